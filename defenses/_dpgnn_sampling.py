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
* :func:`pad_batch` — dense, padded per-subgraph tensors (features and the row-normalised
  adjacency :math:`(D + I)^{-1}(A + I)` of Appendix E) for vmapped per-subgraph gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch_geometric.utils import remove_self_loops

from dpaudit.nn import SparseFeatures


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

    @property
    def num_subgraphs(self) -> int:
        return int(self.roots.numel())

    def sizes(self) -> torch.Tensor:
        return self.node_ptr[1:] - self.node_ptr[:-1]

    def nodes_of(self, i: int) -> torch.Tensor:
        return self.node_ids[self.node_ptr[i] : self.node_ptr[i + 1]]


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


@dataclass
class PaddedRows:
    """Sparse stand-in for padded ``features [B, L, F]``: only the R real rows, as
    :class:`~dpaudit.nn.SparseFeatures` ``rows [R, F]`` placed at ``(batch[r], pos[r])``; every
    other (padding) row is zero."""

    rows: SparseFeatures
    batch: torch.Tensor  # [R]
    pos: torch.Tensor  # [R]
    shape: tuple[int, int, int]

    def to_dense(self) -> torch.Tensor:
        out = torch.zeros(self.shape, dtype=self.rows.dtype, device=self.rows.device)
        out[self.batch, self.pos] = self.rows.to_dense()
        return out


def pad_batch(
    index: SubgraphIndex, batch: torch.Tensor, x
) -> tuple[torch.Tensor | PaddedRows, torch.Tensor, torch.Tensor]:
    r"""Padded tensors for the subgraphs ``batch``.

    Returns ``features [B, L, F]``, ``adjacency [B, L, L]`` with rows
    :math:`(D + I)^{-1}(A + I)` restricted to the subgraph (padding rows and columns are zero)
    and ``roots [B]`` (global ids). The root of each subgraph is at position 0. With
    :class:`~dpaudit.nn.SparseFeatures` ``x`` the features come as :class:`PaddedRows` (nothing
    of size B × L × F is built).
    """
    device = x.device
    batch = batch.to(index.node_ptr.device)
    starts, ends = index.node_ptr[batch], index.node_ptr[batch + 1]
    sizes = ends - starts
    width = int(sizes.max())
    b = torch.repeat_interleave(torch.arange(batch.numel(), device=sizes.device), sizes)
    offsets = torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes)
    pos = torch.arange(int(sizes.sum()), device=sizes.device) - offsets
    global_ids = index.node_ids[torch.repeat_interleave(starts, sizes) + pos]
    if isinstance(x, SparseFeatures):
        shape = (batch.numel(), width, x.size(1))
        features = PaddedRows(x.rows(global_ids.to(device)), b.to(device), pos.to(device), shape)
    else:
        features = x.new_zeros(batch.numel(), width, x.size(1))
        features[b.to(device), pos.to(device)] = x[global_ids.to(device)]

    e_starts, e_ends = index.edge_ptr[batch], index.edge_ptr[batch + 1]
    e_sizes = e_ends - e_starts
    eb = torch.repeat_interleave(torch.arange(batch.numel(), device=sizes.device), e_sizes)
    e_off = torch.repeat_interleave(torch.cumsum(e_sizes, 0) - e_sizes, e_sizes)
    e_pos = torch.repeat_interleave(e_starts, e_sizes) + torch.arange(int(e_sizes.sum()), device=sizes.device) - e_off
    adjacency = torch.zeros(batch.numel(), width, width, dtype=x.dtype, device=device)
    adjacency[b.to(device), pos.to(device), pos.to(device)] = 1.0  # self loops (A + I)
    adjacency.index_put_(
        (eb.to(device), index.edge_dst[e_pos].to(device), index.edge_src[e_pos].to(device)),
        torch.ones(e_pos.numel(), device=device, dtype=x.dtype),
        accumulate=True,
    )
    adjacency = adjacency / adjacency.sum(dim=2, keepdim=True).clamp(min=1.0)
    return features, adjacency, index.roots[batch].to(device)
