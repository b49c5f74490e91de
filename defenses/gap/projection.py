r"""A degree projection for node-level GAP whose stability under adding or removing a node is
proven: the maximum-entropy edge weighting with every node's weighted degree capped at D.

The projection
--------------
For the simple undirected support E of a graph (pairs {a, b}, a ≠ b; duplicates and self-loops
dropped — a public rule) and a cap D, the weights are

.. math::  x^*(G) = \arg\min_{x \in C(G)} F(x),\qquad F(x) = \sum_{e\in E}\varphi(x_e),\quad
           \varphi(t) = t\ln t - t,\qquad C(G) = \{x \ge 0 : \textstyle\sum_{e\ni a} x_e \le D\ \forall a\}.

φ is minimised at t = 1, so a graph of maximum degree ≤ D keeps every edge at weight 1 (the
projection is an *extension*: it changes nothing where the bounded-degree promise holds). Above
D, KKT gives :math:`x_e = \alpha_a\alpha_b` with :math:`\alpha\in(0,1]` and
:math:`\alpha_a < 1 \Rightarrow \sum_{e\ni a}x_e = D`: a hub's edges are scaled down together,
never cut. The solver (:func:`entropy_projection`) maximises the concave dual
:math:`g(\alpha) = -\sum_{e}\alpha_a\alpha_b + D\sum_a\ln\alpha_a` by damped coordinate updates
:math:`\alpha_a \leftarrow \min(1, D/\sum_{b\sim a}\alpha_b)` and stops on a **certified**
duality gap: a feasible :math:`\tilde x` with :math:`F(\tilde x) - g(\alpha) \le \eta`, so
:math:`F(\tilde x) - F(x^*) \le \eta` whatever the graph. Cost O(E) per sweep.

Stability (the per-hop sensitivity of SUM aggregation over the projection)
--------------------------------------------------------------------------
Let G' = G − v (v's features, label and edges gone), both with at most N̄ nodes, x = x*(G),
y = x*(G') extended by 0 on v's edges :math:`E_v`, so that :math:`C(G') = C(G)\cap\{x_{E_v}=0\}`.
For rows :math:`\check X_b` of norm ≤ 1 the aggregation is :math:`A_u = \sum_{b\sim u}x_{ub}\check X_b`.

1. *Symmetric Bregman bound.* Optimality of x over C(G) ∋ y and of y over C(G') ∋ x|_{E∖E_v}
   give :math:`\langle\ln x, y - x\rangle \ge 0` and :math:`\langle \ln y, x - y\rangle_{E\setminus E_v}
   \ge 0`; adding them,
   :math:`J := \sum_{e\notin E_v}(y_e - x_e)(\ln y_e - \ln x_e) \le H_v := \sum_{e\in E_v}x_e\ln(1/x_e)`.
2. *Row v* (compared with v isolated): :math:`\|A_v\| \le \sum_{e\in E_v}x_e \le D`.
3. *Rows u ≠ v*: :math:`\|\Delta A_u\| \le x_{uv} + c_u`, :math:`c_u = \sum_{b\ne v}|x_{ub}-y_{ub}|`.
   Cauchy–Schwarz with the logarithmic mean :math:`L_{ub}\le(x_{ub}+y_{ub})/2` (so
   :math:`\sum_b L_{ub}\le D`) gives :math:`c_u^2 \le D\sum_b (y_{ub}-x_{ub})(\ln y_{ub}-\ln x_{ub})`;
   summed over u, each edge counted from both ends, :math:`\sum_u c_u^2 \le 2DJ \le 2DH_v`, and
   :math:`\sum_u x_{uv}^2 \le \sum_{E_v}x_e \le D`. Minkowski:
   :math:`\big(\sum_{u\ne v}\|\Delta A_u\|^2\big)^{1/2} \le \sqrt D + \sqrt{2DH_v}`.
4. *The entropy of a capped row.* With at most d = N̄ − 1 weights in [0, 1] summing to ≤ D,
   :math:`H_v \le H_{\max} = d/e` when d ≤ eD, else :math:`D\ln(d/D)` (uniform weights; t ln(1/t)
   is concave) — attained by a hub whose neighbours are below the cap.

So :math:`\|\Delta A\|_F \le \Delta_* = \sqrt{D^2 + (\sqrt D + \sqrt{2DH_{\max}})^2}` for removal,
and for addition with the roles of G and G' swapped. N̄ is the **declared** number of nodes (a
public fact; a graph with more nodes is refused, the declaration would be false).

*The solver's error.* F is (1/4D)-strongly convex in the mixed norm
:math:`N(z)^2 = \sum_a(\sum_{e\ni a}|z_e|)^2` on C (row-wise Pinsker: the Hessian diag(1/x) and a
row mass ≤ D), so a certified :math:`\tilde x` lies within :math:`N \le \sqrt{4D\eta}` of
:math:`x^*`, and :math:`\|A(\tilde x) - A(x^*)\|_F \le N(\tilde x - x^*)`. The sensitivity used is
:math:`\Delta = \Delta_* + 2\sqrt{4D\eta}` (:func:`projection_sensitivity`).

*Where it is loose.* Row v alone moves by D when v is saturated, as under the promise; the
bound's other term, √D + √(2D·H_max) ≈ D√(2 ln(N̄/D)), is where it is loose. Removing each of the
20 highest-degree nodes of cora_ml and johnshopkins55, or adding a node joined to their 300
highest-degree nodes, moved the other rows by at most 1.44·D in squared norm (D = 10, 30, 100),
J was at most 1.6 % of H_v (step 1), and the whole change was ≈ D against Δ ≈ 3D–4D; the
worst family found, v joined to one side of K_{D,D}, reaches ≈ 4.9·D. A proof that the other
rows move by O(D) would bring Δ to ≈ D. On a graph of N̄ = D + 1 nodes Δ is within 1.5× of the
change a star's centre makes (``tests/defenses/gap/test_gap_projection.py``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from dpaudit.data.adjacency import Propagation, TensorCache, index_dtype
from dpaudit.errors import DPAuditError

log = logging.getLogger(__name__)

#: certified duality gap per unit of cap: η = GAP_PER_CAP · D, so the solver's share of Δ is
#: 4D·√(GAP_PER_CAP) ≈ 0.013·D, under 0.5 % of Δ_* (float64 rounding of the gap is ~1e-7 at 10⁸ edges)
GAP_PER_CAP = 1e-5
#: a solve that has not certified its gap after this many sweeps is an error (never observed:
#: cora_ml and johnshopkins55 certify in well under a thousand)
MAX_SWEEPS = 100_000
#: how often (in sweeps) the duality gap is evaluated
CHECK_EVERY = 10


@dataclass(frozen=True)
class DegreeProjection:
    """The projected graph: ``edge_index`` [2, 2m] (both directions of the m support pairs) with
    ``weight`` [2m] (float64), and the solve's certificate (the owner's record, never public).

    Attributes:
        edge_index: both directions of the m support pairs.
        weight: each directed entry's weight (float64).
        cap: D, the weighted-degree cap.
        duality_gap: the certified F(x̃) − F(x*) bound reached.
        sweeps: coordinate-ascent sweeps taken (0: no node above the cap).
    """

    edge_index: torch.Tensor
    weight: torch.Tensor
    cap: float
    duality_gap: float
    sweeps: int

    def sum_operator(self, num_nodes: int, dtype: torch.dtype = torch.float32, device=None) -> Propagation:
        r"""The weighted SUM aggregation :math:`A_u = \sum_{b} x_{ub} h_b` as a CSR operator on ``device``.

        Args:
            num_nodes: N.
            dtype: the weights' dtype.
            device: where the operator lives.

        Returns:
            The propagation operator.
        """
        src, dst = self.edge_index.to(device)
        order = torch.sort(dst, stable=True).indices
        degree = torch.bincount(dst, minlength=num_nodes)
        dtype_index = index_dtype(num_nodes, src.numel())
        ptr = torch.zeros(num_nodes + 1, dtype=dtype_index, device=src.device)
        ptr[1:] = degree.cumsum(0)
        return Propagation(ptr, src[order].to(dtype_index), self.weight.to(device)[order].to(dtype), None)


def simple_pairs(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The undirected simple support of ``edge_index``: pairs (a, b), a < b, once each, [2, m].

    Args:
        edge_index: edges in any orientation.
        num_nodes: N.

    Returns:
        The pairs, self-loops and duplicates dropped.
    """
    if edge_index.numel() == 0:
        return torch.zeros(2, 0, dtype=torch.long, device=edge_index.device)
    a, b = edge_index[0].long(), edge_index[1].long()
    keep = a != b
    lo, hi = torch.minimum(a[keep], b[keep]), torch.maximum(a[keep], b[keep])
    key = torch.unique(lo * num_nodes + hi)
    return torch.stack([key // num_nodes, key % num_nodes])


def _phi_sum(x: torch.Tensor) -> torch.Tensor:
    """F(x) = Σ (x ln x − x), with 0 ln 0 = 0."""
    return torch.where(x > 0, x * torch.log(x.clamp_min(1e-300)) - x, torch.zeros_like(x)).sum()


def entropy_projection(
    edge_index: torch.Tensor, num_nodes: int, cap: int | float, gap_tolerance: float | None = None
) -> DegreeProjection:
    """The certified maximum-entropy projection of a graph to weighted degree ≤ ``cap``.

    Args:
        edge_index: [2, E] (any orientation; the undirected simple support is used).
        num_nodes: N.
        cap: D ≥ 1.
        gap_tolerance: η, the certified bound on F(x̃) − F(x*); default ``GAP_PER_CAP · D``.

    Raises:
        DPAuditError: the gap is not certified within ``MAX_SWEEPS`` sweeps.
    """
    cap = float(cap)
    if not cap >= 1:
        raise DPAuditError(f"the projection's cap D must be ≥ 1, got {cap}")
    eta = GAP_PER_CAP * cap if gap_tolerance is None else float(gap_tolerance)
    pairs = simple_pairs(edge_index, num_nodes)
    a, b = pairs[0], pairs[1]
    both = torch.cat([torch.stack([a, b]), torch.stack([b, a])], dim=1)
    degree = torch.bincount(both[1], minlength=num_nodes)
    if pairs.size(1) == 0 or int(degree.max()) <= cap:
        # every node within the cap: x* = 1 exactly (F's minimiser, feasible)
        weight = torch.ones(both.size(1), dtype=torch.float64, device=edge_index.device)
        return DegreeProjection(both, weight, cap, 0.0, 0)
    log_alpha = torch.zeros(num_nodes, dtype=torch.float64, device=edge_index.device)
    log_cap = math.log(cap)
    gap = math.inf
    for sweep in range(1, MAX_SWEEPS + 1):
        alpha = log_alpha.exp()
        reach = torch.zeros_like(alpha).index_add_(0, a, alpha[b]).index_add_(0, b, alpha[a])
        best = torch.where(reach > 0, (log_cap - reach.clamp_min(1e-300).log()).clamp(max=0.0), 0.0)
        log_alpha = 0.5 * (log_alpha + best)  # damped exact coordinate ascent (Jacobi would oscillate)
        if sweep % CHECK_EVERY:
            continue
        weight, gap = _certificate(log_alpha, a, b, num_nodes, cap)
        if gap <= eta:
            log.debug("degree projection: D = %g, gap %.3g after %d sweeps", cap, gap, sweep)
            return DegreeProjection(both, torch.cat([weight, weight]), cap, gap, sweep)
    raise DPAuditError(
        f"the degree projection did not certify its duality gap ({gap:.3g} > {eta:.3g}) in {MAX_SWEEPS} sweeps"
    )


_PROJECTIONS = TensorCache(size=4)


def projection_of(edge_index: torch.Tensor, num_nodes: int, cap: int | float) -> DegreeProjection:
    """:func:`entropy_projection` at the default tolerance, cached while that very ``edge_index``
    tensor is alive and unedited (:class:`~dpaudit.data.adjacency.TensorCache`): a private selection's
    runs and repeated queries of one graph solve it once. The solve is deterministic, so a
    cached projection is the one a new solve would return.

    Args:
        edge_index: edges in any orientation.
        num_nodes: N.
        cap: D ≥ 1.

    Returns:
        The projection.

    Raises:
        DPAuditError: the solve does not certify its gap.
    """
    return _PROJECTIONS.get(
        (edge_index,), lambda: entropy_projection(edge_index, num_nodes, cap), (int(num_nodes), float(cap))
    )


def _certificate(log_alpha, a, b, num_nodes: int, cap: float) -> tuple[torch.Tensor, float]:
    """(a feasible x̃, F(x̃) − g(α)): x̃ scales the KKT weights α_aα_b of each edge by the larger
    of its endpoints' excess, so every weighted degree is ≤ D; the dual value g(α) ≤ F(x*)."""
    alpha = log_alpha.exp()
    raw = alpha[a] * alpha[b]
    load = torch.zeros(num_nodes, dtype=raw.dtype, device=raw.device).index_add_(0, a, raw).index_add_(0, b, raw)
    shrink = (cap / load.clamp_min(1e-300)).clamp(max=1.0) * (1.0 - 1e-12)  # margin for rounding
    weight = raw * torch.minimum(shrink[a], shrink[b])
    dual = -raw.sum() + cap * log_alpha.sum()
    return weight, float(_phi_sum(weight) - dual)


def max_row_entropy(cap: float, max_degree: int) -> float:
    r""":math:`\max \sum_i x_i\ln(1/x_i)` over at most ``max_degree`` weights in [0, 1] with sum ≤ cap.

    Args:
        cap: the sum bound D.
        max_degree: the number of weights.

    Returns:
        The maximum entropy: d/e when d ≤ e·D, else D·ln(d/D).
    """
    d = max(0, int(max_degree))
    if d <= math.e * cap:
        return d / math.e
    return cap * math.log(d / cap)


def projection_sensitivity(cap: float, universe_nodes: int, gap_tolerance: float | None = None) -> float:
    r"""Per-hop L2 sensitivity of SUM aggregation over the projection (module docstring):
    :math:`\sqrt{D^2 + (\sqrt D + \sqrt{2DH_{\max}})^2} + 2\sqrt{4D\eta}` for graphs of at most
    ``universe_nodes`` nodes.

    Args:
        cap: D.
        universe_nodes: the declared bound on the number of nodes.
        gap_tolerance: η; default ``GAP_PER_CAP · D``.

    Returns:
        The per-hop sensitivity.
    """
    cap = float(cap)
    eta = GAP_PER_CAP * cap if gap_tolerance is None else float(gap_tolerance)
    entropy = max_row_entropy(cap, int(universe_nodes) - 1)
    exact = math.sqrt(cap**2 + (math.sqrt(cap) + math.sqrt(2.0 * cap * entropy)) ** 2)
    return exact + 2.0 * math.sqrt(4.0 * cap * eta)


def removal_terms(larger: DegreeProjection, smaller: DegreeProjection, v: int, num_nodes: int) -> dict[str, float]:
    """The proof's quantities, measured, for G (``larger``, with node v) and G − v (``smaller``):
    ``J`` and ``H`` (H_v) of step 1, ``others`` = Σ_{u≠v} (x_uv + c_u)² — the squared row-L1
    changes of the other rows, which bound their move for any unit features and equal it for
    aligned ones — ``own`` = v's row mass, and ``total`` = √(others + own²) (the whole change
    with aligned features). Used by the tests and ``benchmarks/bench_degree_projection.py``.

    Args:
        larger: the projection of G.
        smaller: the projection of G − v.
        v: the removed node.
        num_nodes: N.

    Returns:
        ``{"J", "H", "others", "own", "total"}``.

    Raises:
        DPAuditError: ``smaller`` is not ``larger``'s graph without v.
    """

    def pairs_and_weights(projection: DegreeProjection):
        half = projection.weight.numel() // 2
        pairs, weight = projection.edge_index[:, :half].cpu(), projection.weight[:half].cpu()
        keys = pairs[0] * num_nodes + pairs[1]
        order = torch.argsort(keys)
        return pairs[:, order], keys[order], weight[order]

    pairs, keys, x = pairs_and_weights(larger)
    _, small_keys, small_x = pairs_and_weights(smaller)
    at_v = (pairs[0] == v) | (pairs[1] == v)
    where = torch.searchsorted(small_keys, keys[~at_v])
    if where.numel() and not torch.equal(small_keys[where.clamp(max=small_keys.numel() - 1)], keys[~at_v]):
        raise DPAuditError("the smaller graph is not the larger one without node v")
    y, xo, xv = small_x[where], x[~at_v], x[at_v]
    rows = torch.zeros(num_nodes, dtype=torch.float64)
    rows.index_add_(0, pairs[0][~at_v], (xo - y).abs()).index_add_(0, pairs[1][~at_v], (xo - y).abs())
    rows.index_add_(0, torch.where(pairs[0][at_v] == v, pairs[1][at_v], pairs[0][at_v]), xv)  # x_uv of row u
    others, own = float(rows.pow(2).sum()), float(xv.sum())
    return {
        "J": float(((y - xo) * (y.log() - xo.log())).sum()),
        "H": float((xv * (1.0 / xv).log()).sum()),
        "others": others,
        "own": own,
        "total": math.sqrt(others + own**2),
    }
