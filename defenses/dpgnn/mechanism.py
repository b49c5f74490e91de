r"""DP-GNN's mechanism as pure functions: occurrence-bounded subgraphs (Algorithms 1–3,
Lemma 1), the batch sampler over declared slots, and Theorem 1's accountant (Daigavane et al.,
"Node-Level Differentially Private Graph Neural Networks", ``shared/papers/dp-gnn-node-level.md``).

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
  (its size and per-edge coins) and on the training set — this locality is what makes
  Lemma 2 hold, and the ``uniforms`` argument lets tests couple the coins of two neighbouring
  graphs.
* :func:`build_subgraphs` — SAMPLE-SUBGRAPHS (Algorithms 2–3): the r-hop tree of every
  training root, built as breadth-first edge-list joins over the sampled graph (no per-node
  recursion). The set of nodes of the DFS tree of depth r is exactly the set of nodes within r
  message hops of the root, and running r rounds of message passing on those nodes and the
  messages into nodes at depth < r reproduces the tree computation at the root. Lemma 1's
  bound :math:`N(K, r) = \sum_{i=0}^{r} K^i` on the number of subgraphs any node occurs in is
  checked after construction (a violation raises).
* :func:`sample_slots` — m distinct slots out of :math:`\max(n, \hat n)`, uniformly (sampling
  without replacement, as Algorithm 4 and Lemma 4's hypergeometric law require), slot i < n
  holding subgraph i and the others empty.
* :func:`dpgnn_mechanism` — Theorem 1 as a
  :class:`~dpaudit.accounting.SensitivityMixtureGaussian`;
  :func:`reference_schedule` — the reference run's batch fraction and steps.

Theorem 1 with a declared population, not the private one
---------------------------------------------------------
Theorem 1 (Appendix B) takes N, the number of training subgraphs, as known: its neighbouring
relation (Remark 2) keeps the training set fixed. Under dpaudit's node unit the training-set
size n is private (removing a training node changes it), so nothing public may depend on it:
the accountant uses :math:`N = \hat n`, the **declared** training-set size
(:func:`dpaudit.release.declared_train_size`), and the sampler draws m distinct slots out of
:math:`P = \max(n, \hat n)` (:func:`sample_slots`, :math:`m \le \hat n` by the plan).

*Claim.* For every real n, the number ρ of a node v's training subgraphs :math:`S(v)` that
land in a batch is stochastically dominated by
:math:`\mathrm{Hypergeometric}(\hat n, N(K, r), m)`, so the spent ε bounds the run whatever n
is — also against a neighbour with one training node fewer.

*Proof.* If :math:`n \le \hat n`, P = n̂ and :math:`\rho \sim \mathrm{Hypergeometric}(\hat n,
|S(v)|, m)`, dominated by the claim's law because :math:`|S(v)| \le N(K, r)` (Lemmas 1 and 6).
If :math:`n > \hat n`, P = n and ρ ~ Hypergeometric(n, |S(v)|, m). Adding an unmarked item to
the population only lowers the count: a uniform m-subset of P + 1 items is a uniform
m-subset of the first P with at most one drawn item swapped for the extra one, so
Hypergeometric(P + 1, k, m) ≤ Hypergeometric(P, k, m) stochastically, and by induction down to
n̂. Every RDP term :math:`\exp(\alpha(\alpha-1)s^2\rho^2/2\sigma^2)` and every hockey-stick
divergence of the ρ-revealed Gaussian pair grows with ρ — and so does that of T composed steps
with independent :math:`\rho_t`, a Gaussian of sensitivity :math:`s(\sum_t\rho_t^2)^{1/2}` given
the ρ's — so a dominated ρ spends no more (Hadar & Russell 1969, as in the paper's proof). For
a neighbour with n − 1 training nodes, couple its uniform m-subset with the larger side's slot
by slot, by root (a uniform subset does not care which slot a root sits in): when
:math:`n \le \hat n` both have n̂ slots and the removed root's slot turns empty (one term moves
by ≤ C); when :math:`n - 1 \ge \hat n` a drawn slot of the removed root is swapped for a
uniform undrawn one (by symmetry a uniform m-subset of the other n − 1 slots) — one term out,
one in, ≤ 2C together, the budget of one replaced term. Either way the terms that move are the larger
side's drawn slots of :math:`S(v)`, each by ≤ 2C. ∎

So the declared size replaces the private one without an unaccounted step; what remains
unaccounted is the undirected removal (:mod:`defenses.dpgnn`). A declared size far above n
only wastes batch slots on empty terms (the sum is still divided by the public m).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.stats import hypergeom
from torch_geometric.utils import remove_self_loops

from defenses.dpgnn.batches import padded_gram
from dpaudit.accounting import SensitivityMixtureGaussian

# --------------------------------------------------------------------------- Algorithms 1–3, Lemma 1


def occurrence_bound(max_in_degree: int, num_layers: int) -> int:
    r"""Lemma 1: :math:`N(K, r) = \sum_{i=0}^{r} K^i`.

    Args:
        max_in_degree: K.
        num_layers: r.

    Returns:
        N(K, r), the most training subgraphs one node occurs in.
    """
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
        train_mask: ``[num_nodes]`` bool, the training set :math:`V_{tr}`.
        max_in_degree: K.
        generator: source of the per-edge coins (ignored when ``uniforms`` is given).
        uniforms: optional ``[E]`` uniforms in [0, 1), one per column of ``edge_index`` (tests
            use it to run two neighbouring graphs on the same coins).

    Shapes:
        ``edge_index [2, E]``, ``train_mask [num_nodes]`` → kept messages ``[2, E']``, E' ≤ E.
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


def training_readers(edge_index: torch.Tensor, num_nodes: int, train_mask: torch.Tensor) -> torch.Tensor:
    """|RE_v| for every node: how many of its messages (self-loops dropped, duplicates counted)
    go to training nodes, ``[num_nodes]``.

    Args:
        edge_index: messages (src → dst).
        num_nodes: number of nodes.
        train_mask: the training nodes.

    Returns:
        |RE_v| per node (int64).

    Shapes:
        edge_index: [2, E]
        train_mask: [num_nodes]
        return: [num_nodes]
    """
    edge_index, _ = remove_self_loops(edge_index)
    src, dst = edge_index
    return torch.bincount(src[train_mask.to(dst.device)[dst]], minlength=num_nodes)


def promised_edgelists(
    edge_index: torch.Tensor, num_nodes: int, train_mask: torch.Tensor, max_in_degree: int
) -> torch.Tensor:
    """The degree promise in place of Algorithm 1 (``degree_bound=promise``): every message to a
    training node is kept — nothing is sampled, so removing a node changes no other node's
    edgelist — after checking that no node is read by more than K training nodes.

    *Claim.* For node-neighbouring graphs G and G − v that both keep the promise, the training
    subgraphs that differ are exactly those v occurs in, at most N(K, r) (Lemma 1 with every
    edgelist of size ≤ K), so Theorem 1 holds for removing or adding a node with all its
    undirected edges (bounded-degree node-level DP: the relation is restricted to graphs that
    keep the promise). *Proof.* Every kept message is a message of the graph into a training
    node; removing v removes the messages v sends and receives and nothing else, so a root's
    r-hop tree changes only if v lies in it. ∎

    Args:
        edge_index: messages (src → dst).
        num_nodes: number of nodes.
        train_mask: the training nodes.
        max_in_degree: K, the promised bound on training readers per node.

    Returns:
        The messages into training nodes, self-loops dropped.

    Raises:
        ConfigurationError: a node is read by more than K training nodes (before any work).

    Shapes:
        edge_index: [2, E]
        train_mask: [num_nodes]
        return: [2, E']
    """
    from dpaudit.errors import ConfigurationError

    readers = training_readers(edge_index, num_nodes, train_mask)
    if readers.numel() and int(readers.max()) > max_in_degree:
        raise ConfigurationError(
            f"dpgnn degree_bound=promise proves node-level DP only for graphs where every node is read by at most "
            f"max_in_degree = {max_in_degree} training nodes; a node of this training graph is read by "
            f"{int(readers.max())}: set a larger max_in_degree (more noise) or degree_bound=sampler (sound: false)"
        )
    edge_index, _ = remove_self_loops(edge_index)
    return edge_index[:, train_mask.to(edge_index.device)[edge_index[1]]]


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
        """Nodes per subgraph, ``[R]``."""
        return self.node_ptr[1:] - self.node_ptr[:-1]

    def nodes_of(self, i: int) -> torch.Tensor:
        """Global ids of subgraph ``i``'s nodes, root first.

        Args:
            i: the subgraph (root) index.

        Returns:
            Its node ids.
        """
        return self.node_ids[self.node_ptr[i] : self.node_ptr[i + 1]]

    def size_classes(self) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        r"""``(caps, class_of [R], slot [R])``: subgraph s belongs to class ``class_of[s]``, the
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
        on ``x``'s device: what the first layer's ghost norm needs, fixed for a fit
        (:func:`~defenses.dpgnn.batches.padded_gram`).

        Args:
            x: node features, dense or sparse.

        Returns:
            One Gram tensor per size class.

        Shapes:
            ``x [num_nodes, F]`` (dense or :class:`~dpaudit.nn.SparseFeatures`) → one
            ``[R_c, cap_c, cap_c]`` per size class c (zero padding, rows in subgraph order).
        """
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

    Args:
        sampled_edge_index: the sampled messages (src → dst).
        roots: the training nodes, one subgraph each.
        num_nodes: number of nodes.
        num_layers: r, the subgraph depth.
        max_in_degree: K, for Lemma 1's check.

    Returns:
        The subgraph index.

    Raises:
        RuntimeError: if some node occurs in more than N(K, r) subgraphs (Lemma 1 violated,
            i.e. the edgelists were not produced by :func:`sample_edgelists` with this K).

    Shapes:
        ``sampled_edge_index [2, E']`` (from :func:`sample_edgelists`), ``roots [R]`` → an
        index of R subgraphs.
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


# --------------------------------------------------------------------------- batch sampler


def sample_batch(num_subgraphs: int, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices of ``batch_size`` distinct items of ``num_subgraphs``, uniform over all subsets of that size.

    Args:
        num_subgraphs: population size.
        batch_size: items drawn, in 1..``num_subgraphs``.
        generator: the permutation's generator.

    Returns:
        The drawn indices.

    Raises:
        ValueError: ``batch_size`` out of range.
    """
    if not 0 < batch_size <= num_subgraphs:
        raise ValueError(f"batch size must lie in 1..{num_subgraphs}, got {batch_size}")
    return torch.randperm(num_subgraphs, generator=generator)[:batch_size]


def sample_slots(
    num_subgraphs: int, population: int, batch_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The subgraphs of one batch: ``batch_size`` distinct slots of ``max(num_subgraphs,
    population)``, uniformly, keeping the slots that hold a subgraph (slot i < n holds
    subgraph i; the others are empty, i.e. zero terms). ``population`` is the declared
    training-set size n̂; the module docstring proves Theorem 1 with N = n̂ for this sampler.
    With n = n̂ it is exactly :func:`sample_batch` over the n subgraphs.

    Shapes: → ``[b]`` subgraph ids, b ≤ ``batch_size`` (b = ``batch_size`` when n ≥ n̂).

    Args:
        num_subgraphs: n, the real training subgraphs.
        population: n̂, the declared training-set size.
        batch_size: m, slots drawn per step.
        generator: the draw's generator.

    Returns:
        The ids of the drawn slots that hold a subgraph.
    """
    slots = sample_batch(max(num_subgraphs, population), batch_size, generator)
    return slots[slots < num_subgraphs]


# --------------------------------------------------------------------------- Theorem 1


def hypergeometric_law(population: int, successes: int, draws: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Support and pmf of Hypergeometric(N = population, K = successes, n = draws).

    Args:
        population: N.
        successes: K (capped at N).
        draws: n.

    Returns:
        ``(support, pmf)``: 0..min(K, n) and their probabilities (renormalised).
    """
    successes = min(successes, population)
    support = np.arange(0, min(successes, draws) + 1)
    pmf = hypergeom(population, successes, draws).pmf(support)
    pmf = np.clip(pmf, 0.0, None)
    pmf = pmf / pmf.sum()
    return tuple(float(s) for s in support), tuple(float(p) for p in pmf)


def dpgnn_mechanism(
    noise_std: float,
    clip_norm: float,
    num_subgraphs: int,
    batch_size: int,
    max_in_degree: int,
    num_layers: int,
    steps: int,
    clip_groups: int = 1,
) -> SensitivityMixtureGaussian:
    r"""Theorem 1 over ``steps`` iterations: ρ ~ Hypergeometric(N, N(K, r), m), sensitivity 2ρC
    (2ρC√G with G layer-wise clipping groups), Gaussian noise of standard deviation ``noise_std``.

    Each step is (α, γ)-RDP with

    .. math::
        \gamma(\alpha) = \frac{1}{\alpha-1}\ln \mathbb{E}_\rho\Big[\exp\Big(\alpha(\alpha-1)
        \frac{2\rho^2C^2}{\sigma^2}\Big)\Big],

    recorded as :class:`~dpaudit.accounting.SensitivityMixtureGaussian` with
    ``sensitivity_per_term = 2C`` (its exponent :math:`\alpha(\alpha-1)(2C\rho)^2/(2\sigma^2)` is
    exactly the theorem's) and its default "convexity" analysis (ρ revealed), which holds for
    any sampler whose law does not depend on the data. ``num_subgraphs`` is the population N —
    the declared training-set size in a fit (module docstring). ``N(K, r)`` is capped at N (a
    node cannot occur in more subgraphs than exist).

    Args:
        noise_std: σ, the noise std on the clipped gradient sum.
        clip_norm: C.
        num_subgraphs: N, the population.
        batch_size: m.
        max_in_degree: K.
        num_layers: r.
        steps: iterations T.
        clip_groups: G, the layer-wise clipping groups (1: flat).

    Returns:
        The mixture mechanism.
    """
    support, probabilities = hypergeometric_law(num_subgraphs, occurrence_bound(max_in_degree, num_layers), batch_size)
    return SensitivityMixtureGaussian(
        sigma=noise_std,
        sensitivity_per_term=2.0 * clip_norm * math.sqrt(clip_groups),
        support=support,
        probabilities=probabilities,
        steps=steps,
        name="dp-gnn (Theorem 1: hypergeometric occurrences, sampling without replacement)",
    )


# --------------------------------------------------------------------------- the reference schedule
# google-research ``differentially_private_gnns`` on ogbn-arxiv: batch 10,000 of 90,941 training
# nodes (q ≈ 0.11) for 3,000 steps (≈ 330 passes).
REFERENCE_TRAIN_NODES = 90_941
REFERENCE_BATCH = 10_000
REFERENCE_STEPS = 3_000


def reference_schedule(num_train: int) -> tuple[int, int]:
    """(batch m, steps T) scaled to the graph by a fixed rule of the training-set size — in a
    fit, the declared size n̂: the reference's sampling fraction m/N = 10,000/90,941 and its
    3,000 steps (so ≈ 330 passes over the training subgraphs whatever the graph size), the
    batch capped at 10,000.

    Args:
        num_train: training-set size (the declared n̂ in a fit).

    Returns:
        ``(batch_size, steps)``.
    """
    batch = min(REFERENCE_BATCH, max(1, round(num_train * REFERENCE_BATCH / REFERENCE_TRAIN_NODES)))
    return min(batch, max(1, num_train)), REFERENCE_STEPS


def unit_condition(protocol: str | None, hp_or_card: Any) -> str | None:
    """The restriction of the neighbouring relation a promise run is proven under (``None`` for
    the sampler, whose spec is ``sound: false`` instead). Accepts hyperparameters or a card's
    hyperparameter dict.

    Args:
        protocol: ``sound``, ``paper`` or ``None``.
        hp_or_card: hyperparameters, or a card's hyperparameter dict.

    Returns:
        ``"training readers per node <= K"`` for a sound promise run, else ``None``.
    """
    get = hp_or_card.get if isinstance(hp_or_card, dict) else lambda k, d=None: getattr(hp_or_card, k, d)
    if protocol == "sound" and get("degree_bound", "sampler") == "promise":
        return f"training readers per node <= {int(get('max_in_degree'))}"
    return None
