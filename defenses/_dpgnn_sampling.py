r"""Occurrence-bounded subgraph sampling for DP-GNN (Daigavane et al., "Node-Level
Differentially Private Graph Neural Networks"), Algorithms 1–3 and Lemma 1, vectorised.

Direction convention. A PyG edge ``(src, dst)`` is a message: ``dst`` aggregates ``src``'s
representation. In the paper's notation the *incoming edgelist* of a node ``v`` is
:math:`\mathbf{RE}_v = \{u \in V_{tr} \mid (u, v) \in E\}`, the training nodes whose
computation reads ``v`` — in PyG terms, the destinations of the messages ``v`` sends to
training nodes. :math:`\mathbf{E}_v` (the nodes ``v`` aggregates) is the reverse.

* :func:`sample_edgelists` — SAMPLE-EDGELISTS (Algorithm 1): every node ``v`` keeps each of
  its messages to a training node independently with probability
  :math:`\min(1, K / (2|\mathbf{RE}_v|))`; a node that still sends more than K messages is
  dropped from every edgelist (it sends none). Afterwards every node is read by at most K
  training nodes. The decisions about ``v``'s messages depend only on ``v``'s own edgelist
  (its size and per-edge coins) and on the public training set — this locality is what makes
  Lemma 2 hold, and the ``uniforms`` argument lets tests couple the coins of two neighbouring
  graphs.
* :func:`build_subgraphs` — SAMPLE-SUBGRAPHS (Algorithms 2–3): the r-hop tree of every
  training root, built as breadth-first edge-list joins over the sampled graph (no per-node
  recursion). The set of nodes of the DFS tree of depth r is exactly the set of nodes within r
  message hops of the root, and running r rounds of message passing on those nodes and the
  messages into nodes at depth < r reproduces the tree computation at the root. Lemma 1's
  bound :math:`N(K, r) = \sum_{i=0}^{r} K^i` on the number of subgraphs any node occurs in is
  checked after construction (a violation raises).
* :func:`sample_batch` — a uniformly random subset of m distinct subgraphs (sampling without
  replacement, as Algorithm 4 and the hypergeometric law of Theorem 1 require).
* :func:`flat_batch` — a batch as one disjoint union of its subgraphs (rows and messages), its
  subgraphs grouped by size class and padded to the class's cap for ghost-norm clipping; :func:`pad_batch` — dense, padded
  per-subgraph tensors (features and the row-normalised adjacency :math:`(D + I)^{-1}(A + I)`
  of Appendix E), the reference layout for vmapped per-subgraph gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch_geometric.utils import remove_self_loops

from dpaudit.nn import SparseFeatures, row_dots


def occurrence_bound(max_in_degree: int, num_layers: int) -> int:
    r"""Lemma 1: :math:`N(K, r) = \sum_{i=0}^{r} K^i`."""
    return sum(int(max_in_degree) ** i for i in range(int(num_layers) + 1))


def sample_edgelists(
    edge_index: torch.Tensor,
    num_nodes: int,
    train_mask: torch.Tensor,
    max_in_degree: int,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """SAMPLE-EDGELISTS (Algorithm 1). Returns the kept messages ``[2, E']`` (src → dst).

    Args:
        edge_index: messages ``[2, E]`` (treated as directed, Remark 2).
        num_nodes: number of nodes.
        train_mask: ``[num_nodes]`` bool, the (public) training set :math:`V_{tr}`.
        max_in_degree: K.
        generator: source of the per-edge coins (ignored when ``uniforms`` is given).
        uniforms: optional ``[E]`` uniforms in [0, 1), one per column of ``edge_index`` (tests
            use it to run two neighbouring graphs on the same coins).
    """
    device = edge_index.device
    edge_index, _ = remove_self_loops(edge_index)
    if uniforms is not None:
        if uniforms.numel() != edge_index.size(1):
            raise ValueError("uniforms must have one entry per (non-self-loop) edge")
        uniforms = uniforms.to(device)
    src, dst = edge_index
    # RE_v only counts readers that are training nodes (only their subgraphs are trained on).
    to_train = train_mask.to(device)[dst]
    src, dst = src[to_train], dst[to_train]
    if uniforms is None:
        uniforms = torch.rand(src.numel(), generator=generator, device="cpu" if generator is None else generator.device)
        uniforms = uniforms.to(device)
    else:
        uniforms = uniforms[to_train]
    readers = torch.bincount(src, minlength=num_nodes).to(torch.float64)
    keep_probability = torch.clamp(max_in_degree / (2.0 * readers[src]), max=1.0)
    keep = uniforms.to(torch.float64) < keep_probability
    kept_readers = torch.bincount(src[keep], minlength=num_nodes)
    # Nodes whose sampled in-degree still exceeds K are dropped from all edgelists.
    keep &= kept_readers[src] <= max_in_degree
    return torch.stack([src[keep], dst[keep]])


@dataclass
class SubgraphIndex:
    """The r-hop training subgraphs, stored as concatenated per-root lists (CSR style).

    Attributes:
        roots: ``[R]`` global ids of the roots (the training nodes), root ``i`` owns subgraph ``i``.
        node_ptr: ``[R + 1]`` offsets into ``node_ids``.
        node_ids: global ids of each subgraph's nodes; the root comes first.
        edge_ptr: ``[R + 1]`` offsets into ``edge_src`` / ``edge_dst``.
        edge_src, edge_dst: local (within-subgraph) endpoints of the messages the root's r-layer
            computation uses (messages into nodes at depth < r).
        num_layers: r.
        occurrences: ``[num_nodes]`` number of subgraphs each node occurs in.
    """

    roots: torch.Tensor
    node_ptr: torch.Tensor
    node_ids: torch.Tensor
    edge_ptr: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    num_layers: int
    occurrences: torch.Tensor
    _classes: tuple[list[int], torch.Tensor, torch.Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def num_subgraphs(self) -> int:
        return int(self.roots.numel())

    def sizes(self) -> torch.Tensor:
        return self.node_ptr[1:] - self.node_ptr[:-1]

    def nodes_of(self, i: int) -> torch.Tensor:
        return self.node_ids[self.node_ptr[i] : self.node_ptr[i + 1]]

    def size_classes(self) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        r"""``(caps, class_of [N], slot [N])``: subgraph s belongs to class ``class_of[s]``, the
        smallest cap ≥ its size (caps 4, 16, 64, … and the largest size last), at position
        ``slot[s]`` among that class's subgraphs. A class is padded to its cap, so per-subgraph
        Grams are batched products of at most 16·L² + 16 entries for a subgraph of L rows.
        Built once and cached (the subgraphs never change during training)."""
        if self._classes is None:
            sizes = self.sizes()
            largest = int(sizes.max()) if sizes.numel() else 1
            caps, cap = [], 4
            while cap < largest:
                caps.append(cap)
                cap *= 4
            caps.append(largest)
            class_of = torch.bucketize(sizes, torch.tensor(caps, device=sizes.device))
            order = torch.argsort(class_of, stable=True)
            counts = torch.bincount(class_of, minlength=len(caps))
            slot = torch.empty_like(class_of)
            slot[order] = torch.arange(order.numel(), device=order.device) - torch.repeat_interleave(
                torch.cumsum(counts, 0) - counts, counts
            )
            self._classes = (caps, class_of, slot)
        return self._classes

    def input_grams(self, x) -> list[torch.Tensor]:
        r"""Every subgraph's input Gram :math:`(x_u\cdot x_v)_{u,v}` over its rows, per size class
        ``[N_c, cap_c, cap_c]`` (zero padding, rows in subgraph order) on ``x``'s device: what
        the first layer's ghost norm needs, fixed for a fit (:func:`padded_gram`)."""
        caps, class_of, slot = self.size_classes()
        sizes, out = self.sizes(), []
        for c, cap in enumerate(caps):
            members = torch.nonzero(class_of == c).view(-1)
            members = members[torch.argsort(slot[members])]
            k = torch.arange(cap, device=members.device)
            at = self.node_ptr[members].unsqueeze(1) + k
            valid = k < sizes[members].unsqueeze(1)
            ids = torch.where(valid, self.node_ids[at.clamp(max=self.node_ids.numel() - 1)], x.size(0))
            out.append(padded_gram(x, ids.to(x.device)))
        return out


def padded_gram(a, rows: torch.Tensor) -> torch.Tensor:
    r""":math:`G_{b,i,j} = a_{rows_{bi}}\cdot a_{rows_{bj}}` for ``rows`` [n, P] (``a.size(0)`` marks
    padding, whose entries are 0) → [n, P, P]. Dense ``a``: one batched product; sparse
    (:class:`~dpaudit.nn.SparseFeatures`): the stored values matched pairwise by :func:`row_dots`."""
    n, width = rows.shape
    if not isinstance(a, SparseFeatures):
        padded = torch.cat([a.detach(), a.new_zeros(1, a.size(1))]).index_select(0, rows.reshape(-1))
        padded = padded.view(n, width, -1)
        return padded @ padded.mT
    first = rows.unsqueeze(2).expand(n, width, width)
    second = rows.unsqueeze(1).expand(n, width, width)
    upper = torch.ones(width, width, dtype=torch.bool, device=rows.device).triu()  # G is symmetric: i ≤ j only
    valid = (first < a.size(0)) & (second < a.size(0)) & upper
    out = torch.zeros(n, width, width, dtype=a.dtype, device=a.device)
    out[valid] = row_dots(a, first[valid], second[valid])
    return out + out.mT.tril(-1)


def _in_csr(edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Messages sorted by destination: (rowptr over dst, sources in that order)."""
    src, dst = edge_index
    order = torch.argsort(dst, stable=True)
    counts = torch.bincount(dst, minlength=num_nodes)
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=edge_index.device)
    rowptr[1:] = torch.cumsum(counts, 0)
    return rowptr, src[order]


def _expand(
    owner: torch.Tensor, node: torch.Tensor, rowptr: torch.Tensor, sources: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Join (owner, node) pairs with the messages into ``node``: returns (owner, src, dst)."""
    counts = rowptr[node + 1] - rowptr[node]
    total = int(counts.sum())
    rep_owner = torch.repeat_interleave(owner, counts)
    rep_dst = torch.repeat_interleave(node, counts)
    # Position of each expanded entry inside its node's in-edge block.
    starts = torch.repeat_interleave(rowptr[node], counts)
    block_offsets = torch.arange(total, device=node.device) - torch.repeat_interleave(
        torch.cumsum(counts, 0) - counts, counts
    )
    return rep_owner, sources[starts + block_offsets], rep_dst


def build_subgraphs(
    sampled_edge_index: torch.Tensor, roots: torch.Tensor, num_nodes: int, num_layers: int, max_in_degree: int
) -> SubgraphIndex:
    """SAMPLE-SUBGRAPHS (Algorithms 2–3) over already sampled edgelists, plus Lemma 1's check.

    Breadth-first: depth-h pairs (root, node) are joined with the messages into ``node`` to
    give depth-(h+1) pairs; pairs already seen at a smaller depth are dropped. Every step is a
    tensor operation whose size is bounded by ``num_nodes · N(K, r)`` pairs (each node occurs in
    at most N(K, r) subgraphs), so the construction scales linearly in the graph size.

    Raises:
        RuntimeError: if some node occurs in more than N(K, r) subgraphs (Lemma 1 violated,
            i.e. the edgelists were not produced by :func:`sample_edgelists` with this K).
    """
    device = sampled_edge_index.device
    roots = roots.to(device).long()
    num_roots = roots.numel()
    rowptr, sources = _in_csr(sampled_edge_index, num_nodes)
    owner = torch.arange(num_roots, device=device)
    node = roots.clone()
    depth = torch.zeros(num_roots, dtype=torch.long, device=device)
    all_owner, all_node, all_depth = [owner], [node], [depth]
    seen = owner * num_nodes + node
    edge_owner, edge_src_g, edge_dst_g = [], [], []
    for h in range(num_layers):
        o, s, d = _expand(owner, node, rowptr, sources)
        # Every frontier node sits at depth h < r, so the root's computation reads its messages.
        edge_owner.append(o)
        edge_src_g.append(s)
        edge_dst_g.append(d)
        key = torch.unique(o * num_nodes + s)
        fresh = key[~torch.isin(key, seen)]
        seen = torch.cat([seen, fresh])
        owner, node = fresh // num_nodes, fresh % num_nodes
        all_owner.append(owner)
        all_node.append(node)
        all_depth.append(torch.full_like(owner, h + 1))
    # Order nodes by (root, depth, id) so that each root comes first in its block.
    p_owner, p_node, p_depth = torch.cat(all_owner), torch.cat(all_node), torch.cat(all_depth)
    order = torch.argsort((p_owner * (num_layers + 1) + p_depth) * num_nodes + p_node)
    p_owner, p_node = p_owner[order], p_node[order]
    node_counts = torch.bincount(p_owner, minlength=num_roots)
    node_ptr = torch.zeros(num_roots + 1, dtype=torch.long, device=device)
    node_ptr[1:] = torch.cumsum(node_counts, 0)
    local = torch.arange(p_owner.numel(), device=device) - node_ptr[p_owner]

    e_owner, e_src, e_dst = torch.cat(edge_owner), torch.cat(edge_src_g), torch.cat(edge_dst_g)
    e_order = torch.argsort(e_owner, stable=True)
    e_owner, e_src, e_dst = e_owner[e_order], e_src[e_order], e_dst[e_order]
    # Global → local ids through a sorted (root, node) key table.
    table = p_owner * num_nodes + p_node
    sorted_keys, key_order = torch.sort(table)
    local_sorted = local[key_order]
    src_local = local_sorted[torch.searchsorted(sorted_keys, e_owner * num_nodes + e_src)]
    dst_local = local_sorted[torch.searchsorted(sorted_keys, e_owner * num_nodes + e_dst)]
    edge_counts = torch.bincount(e_owner, minlength=num_roots)
    edge_ptr = torch.zeros(num_roots + 1, dtype=torch.long, device=device)
    edge_ptr[1:] = torch.cumsum(edge_counts, 0)

    occurrences = torch.bincount(p_node, minlength=num_nodes)
    bound = occurrence_bound(max_in_degree, num_layers)
    worst = int(occurrences.max()) if occurrences.numel() else 0
    if worst > bound:
        raise RuntimeError(
            f"Lemma 1 violated: a node occurs in {worst} training subgraphs > N(K={max_in_degree}, r={num_layers}) "
            f"= {bound}; the edgelists were not sampled with in-degree bound K"
        )
    return SubgraphIndex(roots, node_ptr, p_node, edge_ptr, src_local, dst_local, num_layers, occurrences)


def sample_batch(num_subgraphs: int, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices of ``batch_size`` distinct subgraphs, uniform over all subsets of that size."""
    if not 0 < batch_size <= num_subgraphs:
        raise ValueError(f"batch size must lie in 1..{num_subgraphs}, got {batch_size}")
    return torch.randperm(num_subgraphs, generator=generator)[:batch_size]


def pad_batch(index: SubgraphIndex, batch: torch.Tensor, x) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Padded tensors for the subgraphs ``batch`` (the reference layout for vmapped per-subgraph
    gradients; training uses :func:`flat_batch`).

    Returns ``features [B, L, F]``, ``adjacency [B, L, L]`` with rows
    :math:`(D + I)^{-1}(A + I)` restricted to the subgraph (padding rows and columns are zero)
    and ``roots [B]`` (global ids). The root of each subgraph is at position 0.
    """
    device = x.device
    batch = batch.to(index.node_ptr.device)
    starts, ends = index.node_ptr[batch], index.node_ptr[batch + 1]
    sizes = ends - starts
    width = int(sizes.max())
    b, pos = _segments(sizes)
    global_ids = index.node_ids[starts[b] + pos]
    rows = x.rows(global_ids.to(device)).to_dense() if isinstance(x, SparseFeatures) else x[global_ids.to(device)]
    features = rows.new_zeros(batch.numel(), width, x.size(1))
    features[b.to(device), pos.to(device)] = rows

    e_starts, e_ends = index.edge_ptr[batch], index.edge_ptr[batch + 1]
    e_sizes = e_ends - e_starts
    eb, e_local = _segments(e_sizes)
    e_pos = e_starts[eb] + e_local
    adjacency = torch.zeros(batch.numel(), width, width, dtype=x.dtype, device=device)
    adjacency[b.to(device), pos.to(device), pos.to(device)] = 1.0  # self loops (A + I)
    adjacency.index_put_(
        (eb.to(device), index.edge_dst[e_pos].to(device), index.edge_src[e_pos].to(device)),
        torch.ones(e_pos.numel(), device=device, dtype=x.dtype),
        accumulate=True,
    )
    adjacency = adjacency / adjacency.sum(dim=2, keepdim=True).clamp(min=1.0)
    return features, adjacency, index.roots[batch].to(device)


@dataclass
class SizeClassBlock:
    """The subgraphs of one size class within a batch, padded to the class's cap P.

    Attributes:
        members: ``[n]`` the subgraphs' positions in the batch (0..B-1).
        rows: ``[n, P]`` each subgraph's rows in the flat batch, in subgraph order; the
            batch's row count R marks padding.
        gram: ``[n, P, P]`` the first layer's input Gram of each subgraph
            (:meth:`SubgraphIndex.input_grams`), or ``None``.
    """

    members: torch.Tensor
    rows: torch.Tensor
    gram: torch.Tensor | None = None


@dataclass
class FlatBatch:
    r"""A batch of subgraphs as one disjoint union (no padding): the R rows of all B subgraphs
    back to back, subgraph s owning rows ``ptr[s]:ptr[s+1]`` with its root first.

    Attributes:
        node_ids: ``[R]`` global id of every row.
        owner: ``[R]`` subgraph of every row (0..B-1).
        ptr: ``[B + 1]`` row offsets; ``ptr[:-1]`` are the roots' rows.
        edge_index: ``[2, E_b]`` the subgraphs' messages (src → dst) between rows; the
            aggregation :math:`(D+I)^{-1}(A+I)` over them is exactly the padded adjacency of
            :func:`pad_batch` restricted to real rows.
        blocks: the batch's subgraphs grouped by size class (:class:`SizeClassBlock`), for
            per-subgraph Grams of layers shared inside a subgraph (ghost norms).
    """

    node_ids: torch.Tensor
    owner: torch.Tensor
    ptr: torch.Tensor
    edge_index: torch.Tensor
    blocks: list[SizeClassBlock]

    @property
    def num_subgraphs(self) -> int:
        return int(self.ptr.numel() - 1)

    @property
    def num_rows(self) -> int:
        return int(self.node_ids.numel())

    @property
    def roots(self) -> torch.Tensor:
        return self.ptr[:-1]


def _segments(sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For consecutive segments of ``sizes``: (segment of every element, position inside it)."""
    seg = torch.repeat_interleave(torch.arange(sizes.numel(), device=sizes.device), sizes)
    pos = torch.arange(int(sizes.sum()), device=sizes.device) - torch.repeat_interleave(
        torch.cumsum(sizes, 0) - sizes, sizes
    )
    return seg, pos


def flat_batch(
    index: SubgraphIndex,
    batch: torch.Tensor,
    device: torch.device | str | None = None,
    grams: list[torch.Tensor] | None = None,
) -> FlatBatch:
    """The subgraphs ``batch`` as a :class:`FlatBatch` (built on the index's device, moved to
    ``device``); ``grams`` (:meth:`SubgraphIndex.input_grams`) fills every block's ``gram``."""
    batch = batch.to(index.node_ptr.device)
    starts, sizes = index.node_ptr[batch], index.node_ptr[batch + 1] - index.node_ptr[batch]
    ptr = torch.zeros(batch.numel() + 1, dtype=torch.long, device=sizes.device)
    ptr[1:] = torch.cumsum(sizes, 0)
    owner, pos = _segments(sizes)
    node_ids = index.node_ids[starts[owner] + pos]

    e_starts, e_sizes = index.edge_ptr[batch], index.edge_ptr[batch + 1] - index.edge_ptr[batch]
    e_owner, e_pos = _segments(e_sizes)
    take = e_starts[e_owner] + e_pos
    offset = ptr[e_owner]
    edge_index = torch.stack([index.edge_src[take] + offset, index.edge_dst[take] + offset])

    caps, class_of, slot = index.size_classes()
    of_batch = class_of[batch]
    order = torch.argsort(of_batch, stable=True)
    counts = torch.bincount(of_batch, minlength=len(caps)).tolist()
    num_rows = int(ptr[-1])
    blocks = []
    for c, members in enumerate(order.split(counts)):
        if members.numel() == 0:
            continue
        k = torch.arange(caps[c], device=members.device)
        rows = torch.where(k < sizes[members].unsqueeze(1), ptr[members].unsqueeze(1) + k, num_rows)
        gram = None if grams is None else grams[c].index_select(0, slot[batch[members]].to(grams[c].device))
        blocks.append(SizeClassBlock(members, rows, gram))
    out = FlatBatch(node_ids, owner, ptr, edge_index, blocks)
    if device is not None:
        out = FlatBatch(
            *(t.to(device) for t in (node_ids, owner, ptr, edge_index)),
            [
                SizeClassBlock(b.members.to(device), b.rows.to(device), None if b.gram is None else b.gram.to(device))
                for b in blocks
            ],
        )
    return out
