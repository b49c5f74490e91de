"""DPAR's pure building blocks for the training rows and the DP-SGD accountant: Poisson sampling,
the per-column occurrence cap, ℓ₁ column rescaling, the ``paper`` training matrix (DP-APPR rows +
identity rows), the ``sound`` training terms (identity and pair terms) and the mixture mechanism
of a node's removed terms. The proofs are in the package docstring (:mod:`defenses.dpar`).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import binom

from dpaudit.accounting import SensitivityMixtureGaussian
from dpaudit.training.sampling import poisson_subset


def poisson_sample(num: int, rate: float, generator: torch.Generator) -> torch.Tensor:
    """Indices of ``range(num)`` kept independently with probability ``rate`` (Poisson sampling).

    Both DPAR samplers use it — q′ node sampling and the DP-SGD batches — because the
    accountants (amplification by Poisson subsampling; the binomial law of affected slots)
    assume exactly this.

    Args:
        num: population size.
        rate: inclusion probability in [0, 1].
        generator: the sampling's generator.

    Returns:
        The kept indices (int64).
    """
    return poisson_subset(num, rate, generator)


def affected_slots_bound(max_occurrences: int, top_k: int) -> int:
    """d = 1 + K + D: training terms that removing one node removes under the ``sound`` protocol —
    its identity term, the ≤ K pair terms of its own source row and the ≤ D pair terms that name
    it as a column (the cap); every other term is unchanged (:func:`pair_terms`).

    Args:
        max_occurrences: D, the per-column occurrence cap.
        top_k: K, entries per DP-APPR row.

    Returns:
        d = 1 + K + D.
    """
    return 1 + int(top_k) + int(max_occurrences)


def sgd_step_mechanism(
    noise_std: float,
    max_grad_norm: float,
    affected: int,
    sample_rate: float,
    steps: int,
    pair_rate: float | None = None,
) -> SensitivityMixtureGaussian:
    """The sound DP-SGD accountant. A node owns ≤ d = ``affected`` terms — its identity term,
    Poisson-sampled at rate q, and ≤ d − 1 pair terms, each Poisson-sampled on its own at rate
    q_p (``pair_rate``; default q) — every one clipped to C, and removing the node removes exactly
    those terms (nothing else changes). That is case (a)+(b) of
    :class:`~dpaudit.accounting.SensitivityMixtureGaussian`: the mixture-of-Gaussians dominating
    pair (Choquette-Choo et al. 2023) over the number ρ of its terms in the batch, whose law is
    Bernoulli(q) * Binomial(d − 1, q_p) (independent coins; the worst case is a node owning all d).

    Args:
        noise_std: the Gaussian noise's standard deviation on the clipped gradient sum (same units as C).
        max_grad_norm: C, the per-term clip.
        affected: d, the terms one node owns.
        sample_rate: q, the identity term's Poisson rate.
        steps: DP-SGD steps composed.
        pair_rate: q_p, each pair term's Poisson rate; ``None`` for q.

    Returns:
        The mixture mechanism over ρ ∈ {0, …, d} with the law above.
    """
    pair_rate = sample_rate if pair_rate is None else pair_rate
    pairs = binom.pmf(np.arange(affected), affected - 1, pair_rate)
    probabilities = np.zeros(affected + 1)
    probabilities[:-1] += (1.0 - sample_rate) * pairs
    probabilities[1:] += sample_rate * pairs
    support = tuple(float(i) for i in range(affected + 1))
    probabilities = tuple(float(p) for p in probabilities / probabilities.sum())
    return SensitivityMixtureGaussian(
        sigma=noise_std,
        sensitivity_per_term=max_grad_norm,
        support=support,
        probabilities=probabilities,
        steps=steps,
        name="dpar dp-sgd (poisson terms, a node's terms removed with it)",
        analysis="mixture-of-gaussians",
    )


def cap_column_occurrences(columns: torch.Tensor, max_occurrences: int) -> torch.Tensor:
    """Mask [rows, K]: keep, in every column, only its first ``max_occurrences`` entries in row
    order (entries with column −1 are empty). Vectorised: sort by (column, row), rank in group.

    Args:
        columns: column ids of Π's entries (−1 empty).
        max_occurrences: D, entries kept per column.

    Returns:
        Boolean mask of the kept entries.

    Shapes:
        columns: [rows, K]
        return: [rows, K]
    """
    flat = columns.reshape(-1)
    rows = torch.arange(columns.size(0), device=columns.device).repeat_interleave(columns.size(1))
    valid = flat >= 0
    key = torch.where(valid, flat, flat.new_full((), torch.iinfo(torch.long).max // 4))
    # stable sort by row first, then by column → entries of a column ordered by row
    order = torch.sort(rows, stable=True).indices
    order = order[torch.sort(key[order], stable=True).indices]
    sorted_key = key[order]
    position = torch.arange(len(order), device=columns.device)
    is_start = torch.ones_like(sorted_key, dtype=torch.bool)
    is_start[1:] = sorted_key[1:] != sorted_key[:-1]
    group_start = torch.cummax(torch.where(is_start, position, torch.zeros_like(position)), dim=0).values
    rank = torch.empty_like(position)
    rank[order] = position - group_start
    return ((rank < max_occurrences) & valid).view_as(columns)


def column_l1_norms(columns: torch.Tensor, values: torch.Tensor, num_columns: int) -> torch.Tensor:
    """ℓ₁ norm of every column of the row-sparse Π ([rows, K] columns/values) → [num_columns].

    Args:
        columns: column ids of Π's entries (−1 empty).
        values: their values.
        num_columns: number of columns of Π.

    Returns:
        Each column's ℓ₁ norm.

    Shapes:
        columns: [rows, K]
        values: [rows, K]
        return: [num_columns]
    """
    valid = columns >= 0
    norms = torch.zeros(num_columns, dtype=values.dtype, device=values.device)
    return norms.scatter_add_(0, columns[valid], values[valid].abs())


def normalize_columns_l1(columns: torch.Tensor, values: torch.Tensor, bound: float, num_columns: int) -> torch.Tensor:
    r"""Rescale every non-empty column of Π to ℓ₁ norm exactly ``bound`` (τ), up as well as down:
    :math:`\Pi_{:,j} \leftarrow \tau\,\Pi_{:,j}/\lVert\Pi_{:,j}\rVert_1` (the reference code's
    normalisation; Algorithm 2, line 3 only clips down). Empty slots and all-zero columns stay 0.

    Args:
        columns: column ids of Π's entries (−1 empty).
        values: their values.
        bound: τ, the target ℓ₁ norm.
        num_columns: number of columns of Π.

    Returns:
        The rescaled values.

    Shapes:
        columns: [rows, K]
        values: [rows, K]
        return: [rows, K]
    """
    valid = columns >= 0
    col = torch.where(valid, columns, 0)
    norms = column_l1_norms(columns, values, num_columns)
    scale = torch.where(norms > 0, bound / norms.clamp(min=torch.finfo(values.dtype).tiny), torch.zeros_like(norms))
    return torch.where(valid, values * scale[col], torch.zeros_like(values))


def assemble_rows(
    source_columns: torch.Tensor,
    source_values: torch.Tensor,
    identity_nodes: torch.Tensor,
    in_graph: torch.Tensor,
    *,
    bound: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``paper`` protocol's training matrix Π: the M released source rows (in row order), then
    one identity row per node of ``identity_nodes``; candidates outside the graph (``in_graph``
    False) dropped, then every non-empty column of the whole matrix rescaled to ℓ₁ = τ (the
    reference code). ``sound`` trains on :func:`pair_terms` instead.

    Shapes: ``source_columns``/``source_values`` [M, K] (node ids over the universe, −1 = empty);
    ``identity_nodes`` [I]; ``in_graph`` [universe] bool. Returns columns/values [M + I, K].

    Args:
        source_columns: the released source rows' candidate slots (−1 empty).
        source_values: their values.
        identity_nodes: slots of the nodes given an identity row.
        in_graph: whether each candidate slot holds a sampled node.
        bound: τ, the ℓ₁ norm of every non-empty column.
    """
    universe = in_graph.numel()
    k = source_columns.size(1)
    cols, vals = source_columns, source_values
    keep = (cols >= 0) & in_graph[cols.clamp(min=0)]
    cols, vals = torch.where(keep, cols, -1), torch.where(keep, vals, torch.zeros_like(vals))
    id_cols = torch.full((len(identity_nodes), k), -1, dtype=cols.dtype, device=cols.device)
    id_vals = torch.zeros(len(identity_nodes), k, dtype=vals.dtype, device=vals.device)
    id_cols[:, 0] = identity_nodes.to(cols.device)
    id_vals[:, 0] = 1.0
    cols, vals = torch.cat([cols, id_cols]), torch.cat([vals, id_vals])
    return cols, normalize_columns_l1(cols, vals, bound, universe)


def pair_terms(
    released_columns: torch.Tensor,
    released_values: torch.Tensor,
    source_slots: torch.Tensor,
    universe: torch.Tensor,
    sampled: torch.Tensor,
    pool_size: int,
    *,
    max_occurrences: int,
    gate_on_values: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``sound`` protocol's training terms, from the released DP-APPR rows Z and the sampled pool
    (the pool logic of :meth:`defenses.dpar._DPAR._fit`, in one function so the node-removal test
    runs it).

    Z has one row per public source slot (``source_slots`` [M], in the public priority order),
    whether or not the slot holds a sampled pool node. Post-processing of Z alone (no other input):
    entries whose released value is ≤ 0 are dropped when ``gate_on_values`` (option II's noisy
    values), then every column keeps only its first D entries in row order. The terms:

    * an **identity term** (label v, features v) for every sampled pool node v;
    * a **pair term** (label s, features j) for every kept entry (s, j) of Z whose source slot s
      and column slot j both hold sampled pool nodes.

    Each term is one training row with one column of value 1. Removing node u from the pool (its
    slot then holds no pool node) removes its identity term, the ≤ K pair terms of its row and the
    ≤ D pair terms naming it (the cap was computed on Z alone, so no other entry enters or leaves),
    and changes no other term: d = 1 + K + D (:func:`affected_slots_bound`).

    Args:
        released_columns: Z's candidate slots (−1 empty).
        released_values: Z's values.
        source_slots: the slot of each row's source.
        universe: slot → pool id (−1: no pool node), from :func:`candidate_universe`.
        sampled: pool ids of the sampled nodes.
        pool_size: nodes in the training pool.
        max_occurrences: D, the per-column cap.
        gate_on_values: drop entries whose released value is ≤ 0 (option II).

    Returns:
        ``(row_nodes [R], columns [R, 1], values [R, 1])``: the pool id whose label each term
        trains on, the pool id whose features it reads, and its weight 1.

    Shapes:
        released_columns: [M, K]
        released_values: [M, K]
        source_slots: [M]
        universe: [n̂]
    """
    device = released_columns.device
    universe = universe.to(device)
    cols = released_columns
    if gate_on_values:
        cols = torch.where(released_values > 0, cols, -1)
    cols = torch.where(cap_column_occurrences(cols, max_occurrences), cols, -1)
    is_sampled = torch.zeros(pool_size, dtype=torch.bool, device=device)
    is_sampled[sampled.to(device)] = True
    slot_node = torch.where(universe >= 0, universe, -1)  # slot → pool id (−1: no pool node)
    slot_in = (slot_node >= 0) & is_sampled[slot_node.clamp(min=0)]  # slot holds a sampled pool node
    source_slots = source_slots.to(device)
    keep = (cols >= 0) & slot_in[cols.clamp(min=0)] & slot_in[source_slots].unsqueeze(1)
    label_nodes = slot_node[source_slots].unsqueeze(1).expand_as(cols)[keep]
    feature_nodes = slot_node[cols[keep]]
    identity = sampled.to(device)
    row_nodes = torch.cat([identity, label_nodes])
    columns = torch.cat([identity, feature_nodes]).unsqueeze(1)
    return row_nodes, columns, torch.ones(len(row_nodes), 1, dtype=torch.float64, device=device)


def candidate_universe(protocol: str, sampled: torch.Tensor, pool_size: int, universe_size: int | None) -> torch.Tensor:
    """The DP-APPR candidate slots, as slot → training-pool id (−1: a candidate outside the pool).

    * ``sound``: ``universe_size`` = the declared training-set size n̂ slots whatever the pool:
      pool node i fills slot i and slots ``pool_size..n̂−1`` are candidates of utility 0 that are
      never in the graph. Neighbouring pools of n and n − 1 nodes thus share one output space of
      n̂ slots (the removed node's slot becomes a candidate outside the pool, like a non-sampled
      node), which is what the DP-APPR theorems need.
    * ``paper``: the sampled nodes (slot j = the j-th sampled node): the output space depends on
      the data (listed unaccounted).

    Args:
        protocol: ``sound`` or ``paper``.
        sampled: pool ids of the sampled nodes.
        pool_size: nodes in the training pool.
        universe_size: n̂, the declared training-set size (``sound`` only).

    Returns:
        Slot → pool id (−1: outside the pool).

    Raises:
        ValueError: ``sound`` without a universe size, or a pool larger than it.
    """
    if protocol == "paper":
        return sampled.clone()
    if universe_size is None or pool_size > universe_size:
        raise ValueError(f"a pool of {pool_size} nodes does not fit a universe of {universe_size} slots")
    outside = torch.full((universe_size - pool_size,), -1, dtype=torch.long)
    return torch.cat([torch.arange(pool_size), outside])


def slots_of(universe: torch.Tensor, pool_size: int) -> torch.Tensor:
    """Inverse of :func:`candidate_universe`: pool id → slot (−1: not a candidate).

    Args:
        universe: slot → pool id (−1: outside the pool).
        pool_size: nodes in the training pool.

    Returns:
        Pool id → slot (−1: not a candidate).

    Shapes:
        universe: [slots]
        return: [pool_size]
    """
    slot = torch.full((pool_size,), -1, dtype=torch.long)
    real = (universe >= 0).nonzero().view(-1)
    slot[universe[real]] = real
    return slot


def training_matrix(
    released_columns: torch.Tensor,
    released_values: torch.Tensor,
    sampled: torch.Tensor,
    num_sources: int,
    universe: torch.Tensor,
    pool_size: int,
    *,
    bound: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows the ``paper`` protocol trains on, from the released DP-APPR rows and the sampled pool.

    ``sampled``: pool ids of the sampled nodes in the public priority order; the first
    min(M, |S|) are the sources, whose released rows ``released_columns``/``released_values``
    ([sources, K], candidate slots of ``universe``, −1 empty) are given in that order; every other
    sampled node gets an identity row (:func:`assemble_rows`), then slots → pool ids.

    Args:
        released_columns: the released rows' candidate slots (−1 empty).
        released_values: their values.
        sampled: pool ids of the sampled nodes, in the public priority order.
        num_sources: M, the DP-APPR rows.
        universe: slot → pool id (−1: outside the pool).
        pool_size: nodes in the training pool.
        bound: τ, the ℓ₁ norm of every non-empty column.

    Returns:
        ``(row_nodes [R], columns [R, K], values [R, K])``: the pool id whose label each row
        trains on, and Π's rows over pool ids (−1 empty).
    """
    m = min(num_sources, len(sampled))
    sources, identity = sampled[:m], sampled[m:]
    device = released_columns.device
    universe = universe.to(device)
    is_sampled = torch.zeros(pool_size, dtype=torch.bool, device=device)
    is_sampled[sampled.to(device)] = True
    in_graph = (universe >= 0) & is_sampled[universe.clamp(min=0)]
    identity_slots = slots_of(universe.cpu(), pool_size)[identity].to(device)
    cols, vals = assemble_rows(released_columns, released_values, identity_slots, in_graph, bound=bound)
    cols = torch.where(cols >= 0, universe[cols.clamp(min=0)], -1)
    return torch.cat([sources, identity]), cols, vals
