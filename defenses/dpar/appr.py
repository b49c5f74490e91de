r"""Approximate personalized PageRank (APPR) and the DP-APPR mechanisms of DPAR.

* :func:`appr_ista` — ℓ₁-regularised PageRank solved by ISTA (Fountoulakis et al. 2019,
  "Variational perspective on local graph clustering", Algorithm 3), vectorised over all
  source nodes at once with ``scipy.sparse``.
* :func:`dp_appr_em` — DP-APPR-EM (DPAR Algorithm 1): clip every entry at C₂, one-shot Gumbel
  noise, top-K indices; option I reports 1/K, option II the clipped values + Laplace noise.
* :func:`dp_appr_gm` — DP-APPR-GM (DPAR Algorithm 3): ℓ₂-clip each vector at C₁, add Gaussian
  noise, keep the top-K.
* :func:`exact_top_k` — the non-private sparsification (PPRGo's top-k of the APPR values).
* :func:`paper_strong_composition_epsilon`, :func:`paper_em_epsilon`,
  :func:`paper_gm_sigma` — the per-row parameters exactly as DPAR's Theorems 1 and 3 state
  them (used only by the ``paper`` accountant).

The ISTA problem (lazy random walk :math:`W = \tfrac12(I + AD^{-1})`, teleport α, PageRank
:math:`p = \alpha(I-(1-\alpha)W)^{-1}e_s`) in the variable :math:`q = D^{-1/2}p` is

.. math::
    \min_{q\ge 0}\; \tfrac12 q^\top Q q - \alpha\langle e_s, D^{-1/2}q\rangle
        + \rho\alpha\lVert D^{1/2}q\rVert_1,\qquad
    Q = \tfrac{1+\alpha}{2}I - \tfrac{1-\alpha}{2}D^{-1/2}AD^{-1/2}.

Because the eigenvalues of Q lie in [α, 1], ISTA with step 1 is
:math:`q \leftarrow \max(0,\; \tfrac{1-\alpha}{2}(q + D^{-1/2}AD^{-1/2}q) + \alpha D^{-1/2}e_s - \rho\alpha\sqrt d)`,
stopped once :math:`\lVert D^{-1/2}\nabla f(q)\rVert_\infty \le (1+\gamma)\rho\alpha` (γ is the
tolerance). At that point :math:`p = D^{1/2}q` satisfies :math:`|p^{\text{exact}}_j - p_j| \le
(1+\gamma)\rho\, d_j` for every j (the KKT residual pushed through the PageRank operator,
which maps the degree vector to itself). Each iteration multiplies the current sparse
iterates by the sparse normalised adjacency, so its cost is proportional to the non-zeros
touched — the iterates stay local to each source (Fountoulakis et al., Theorem 3).
Isolated nodes get a self-loop (their lazy walk stays put, so their PageRank is e_s).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import scipy.sparse as sp
import torch

from dpaudit.runtime import rand_on, randn_on

log = logging.getLogger(__name__)

#: Dense (rows × universe) blocks are processed in chunks of at most this many entries.
_CHUNK_ENTRIES = 1 << 24


def normalized_adjacency(edge_index: torch.Tensor, num_nodes: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Return :math:`D^{-1/2}AD^{-1/2}` (CSR) and the degree vector; isolated nodes get a self-loop.

    Args:
        edge_index: undirected graph [2, E] (both directions); duplicate edges count once.
        num_nodes: number of nodes.

    Returns:
        ``(Â, deg)``: the normalised adjacency (float64 CSR) and each node's degree (self-loops included).
    """
    row, col = edge_index.cpu().numpy()
    adj = sp.csr_matrix((np.ones(len(row), dtype=np.float64), (row, col)), shape=(num_nodes, num_nodes))
    adj.sum_duplicates()
    adj.data[:] = 1.0
    deg = np.asarray(adj.sum(axis=1)).ravel()
    isolated = np.flatnonzero(deg == 0)
    if len(isolated):
        adj = adj + sp.csr_matrix((np.ones(len(isolated)), (isolated, isolated)), shape=(num_nodes, num_nodes))
        deg = np.asarray(adj.sum(axis=1)).ravel()
    inv_sqrt = 1.0 / np.sqrt(deg)
    norm = sp.diags(inv_sqrt) @ adj @ sp.diags(inv_sqrt)
    return norm.tocsr(), deg


def appr_ista(
    edge_index: torch.Tensor,
    num_nodes: int,
    sources,
    alpha: float = 0.25,
    rho: float = 1e-4,
    tol: float = 1e-4,
    max_iter: int = 1000,
) -> sp.csr_matrix:
    """APPR vectors of ``sources`` by ISTA (Fountoulakis et al. 2019, Algorithm 3), all sources at once.

    Args:
        edge_index: undirected graph [2, E] (both directions), nodes ``0..num_nodes-1``.
        sources: source node indices (length M).
        alpha: teleport probability α; rho: ℓ₁ regularisation ρ; tol: termination slack γ.

    Returns:
        CSR matrix [M, num_nodes]; row i is the non-negative APPR vector p of ``sources[i]``,
        with :math:`|p^{\\text{exact}} - p| \\le (1+\\gamma)\\rho\\,d` entrywise.
    """
    sources = np.asarray(sources, dtype=np.int64).reshape(-1)
    m = len(sources)
    if m == 0:
        return sp.csr_matrix((0, num_nodes))
    a_hat, deg = normalized_adjacency(edge_index, num_nodes)
    sqrt_deg = np.sqrt(deg)
    threshold = rho * alpha * sqrt_deg  # soft-threshold per column (prox of ρα‖D^{1/2}q‖₁)
    stop = (1.0 + tol) * rho * alpha
    teleport = sp.csr_matrix((alpha / sqrt_deg[sources], (np.arange(m), sources)), shape=(m, num_nodes))

    active = np.arange(m)
    q = sp.csr_matrix((m, num_nodes))
    finished: list[sp.csr_matrix | None] = [None] * m
    for _ in range(max_iter):
        # z = q − ∇f(q) = ((1−α)/2)(q + q Â) + α D^{-1/2} e_s   (Â symmetric, rows are sources)
        z = ((1.0 - alpha) / 2.0) * (q + q @ a_hat) + teleport[active]
        grad = (q - z).tocsr()
        grad.data = np.abs(grad.data) / sqrt_deg[grad.indices]
        worst = np.asarray(grad.max(axis=1).todense()).ravel()
        done = worst <= stop
        for local in np.flatnonzero(done):
            finished[active[local]] = q[local]
        if done.all():
            active = active[:0]
            break
        keep = np.flatnonzero(~done)
        z = z[keep].tocsr()
        z.data = z.data - threshold[z.indices]
        z.data[z.data < 0] = 0.0
        z.eliminate_zeros()
        q, active = z, active[keep]
    if len(active):
        log.warning("ISTA did not converge for %d of %d sources in %d iterations", len(active), m, max_iter)
        for local, source_row in enumerate(active):
            finished[source_row] = q[local]
    result = sp.vstack(finished).tocsr() @ sp.diags(sqrt_deg)  # p = D^{1/2} q
    result = result.tocsr()
    result.data = np.maximum(result.data, 0.0)
    result.eliminate_zeros()
    return result


# --------------------------------------------------------------------------- DP-APPR mechanisms


def _dense_rows(appr: sp.csr_matrix, column_position: np.ndarray, universe_size: int, rows: slice, device):
    """Rows ``rows`` of ``appr`` as a dense [r, universe_size] tensor; local column j → ``column_position[j]``."""
    block = appr[rows].tocoo()
    out = torch.zeros(block.shape[0], universe_size, dtype=torch.float64, device=device)
    if block.nnz:
        r = torch.as_tensor(block.row, dtype=torch.long, device=device)
        c = torch.as_tensor(column_position[block.col], dtype=torch.long, device=device)
        out[r, c] = torch.as_tensor(block.data, dtype=torch.float64, device=device)
    return out


def _row_chunks(num_rows: int, universe_size: int):
    step = max(1, _CHUNK_ENTRIES // max(1, universe_size))
    for start in range(0, num_rows, step):
        yield slice(start, min(num_rows, start + step))


def _gumbel(shape, generator: torch.Generator, device) -> torch.Tensor:
    u = rand_on(shape, generator, device, torch.float64)
    u = u.clamp_(min=torch.finfo(torch.float64).tiny, max=1.0 - 1e-16)
    return -torch.log(-torch.log(u))


def _laplace(shape, scale: float, generator: torch.Generator, device) -> torch.Tensor:
    u = rand_on(shape, generator, device, torch.float64) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2.0 * u.abs().clamp(max=0.5 - 1e-16))


def dp_appr_em(
    appr: sp.csr_matrix,
    column_position: np.ndarray,
    universe_size: int,
    top_k: int,
    clip: float,
    gumbel_scale: float,
    option: int,
    laplace_scale: float = 0.0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """DP-APPR-EM (DPAR Algorithm 1) on every row of ``appr``.

    Each entry is clipped to [0, C₂] (line 6; entries are non-negative), one-shot
    Gumbel(β) noise is added to all ``universe_size`` candidates (line 8) and the K largest
    noisy entries are reported (line 10). Option I (line 12) sets their values to 1/K;
    option II (line 13) reports the clipped values plus Laplace(b) noise.

    Privacy (per row, against *any* change of the row, since every entry lies in [0, C₂]):
    one-shot Gumbel top-K with scale β is K peeling exponential mechanisms (Durfee & Rogers
    2019), each ε = 2C₂/β (the utility is not monotone under node removal, hence the 2; the
    paper's β = C₂/ε is "2ε"-DP per selection, which its Corollary 1 accounts for with the
    leading factor 2). Option II's values have per-coordinate sensitivity C₂.

    With ``gumbel_scale == 0`` (no privacy) only candidates with positive utility are kept.

    Args:
        appr: APPR rows (CSR, non-negative), columns indexed by node.
        column_position: node → its position in the candidate universe.
        universe_size: number of candidates each row's noise covers.
        top_k: K, the entries reported per row.
        clip: C₂, the entrywise clip.
        gumbel_scale: β, the Gumbel scale (0: no noise).
        option: 1 (values 1/K) or 2 (clipped values plus Laplace noise).
        laplace_scale: b, option II's Laplace scale (0: none).
        generator: the noise's generator.
        device: where the dense blocks are built.

    Returns:
        ``(columns, values)`` of shape [rows, K]: universe positions and values; unused slots
        have value 0 and column −1.

    Raises:
        ValueError: ``option`` not 1 or 2.
    """
    if option not in (1, 2):
        raise ValueError("option must be 1 (values 1/K) or 2 (noisy values)")
    rows = appr.shape[0]
    k = min(top_k, universe_size)
    cols_out = torch.full((rows, k), -1, dtype=torch.long, device=device)
    vals_out = torch.zeros(rows, k, dtype=torch.float64, device=device)
    for chunk in _row_chunks(rows, universe_size):
        utility = _dense_rows(appr, column_position, universe_size, chunk, device).clamp_(min=0.0, max=clip)
        noisy = utility + gumbel_scale * _gumbel(utility.shape, generator, device) if gumbel_scale > 0 else utility
        top = noisy.topk(k, dim=1).indices
        picked = utility.gather(1, top)
        if option == 1:
            values = torch.full_like(picked, 1.0 / top_k)
        else:
            values = picked + (_laplace(picked.shape, laplace_scale, generator, device) if laplace_scale > 0 else 0.0)
        if gumbel_scale <= 0:  # noise-free run: a zero-utility candidate is no neighbour
            valid = picked > 0
            top, values = torch.where(valid, top, -1), torch.where(valid, values, 0.0)
        cols_out[chunk], vals_out[chunk] = top, values
    return cols_out, vals_out


def dp_appr_gm(
    appr: sp.csr_matrix,
    column_position: np.ndarray,
    universe_size: int,
    top_k: int,
    clip: float,
    sigma: float,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """DP-APPR-GM (DPAR Algorithm 3): ℓ₂-clip each row at C₁ (line 6), add N(0, σ²) to every
    one of the ``universe_size`` coordinates (line 8), keep the K largest noisy entries (line 10).

    Privacy: APPR vectors are non-negative, so two clipped rows differ by at most √2·C₁ in ℓ₂
    (‖a−b‖² = ‖a‖²+‖b‖²−2a·b ≤ 2C₁²) — the paper's Theorem 3 uses C₁, which is too small by
    √2 when a node's removal rotates the vector (see the module docstring of ``dpar``).
    The top-K is post-processing. With ``sigma == 0`` only positive entries are kept.

    Args:
        appr: APPR rows (CSR, non-negative), columns indexed by node.
        column_position: node → its position in the candidate universe.
        universe_size: number of coordinates noised per row.
        top_k: K, the entries reported per row.
        clip: C₁, the ℓ₂ clip of each row.
        sigma: σ, the Gaussian noise's standard deviation (0: no noise).
        generator: the noise's generator.
        device: where the dense blocks are built.

    Returns:
        ``(columns, values)`` of shape [rows, K]: universe positions and noisy values; unused slots
        have value 0 and column −1.
    """
    rows = appr.shape[0]
    k = min(top_k, universe_size)
    cols_out = torch.full((rows, k), -1, dtype=torch.long, device=device)
    vals_out = torch.zeros(rows, k, dtype=torch.float64, device=device)
    for chunk in _row_chunks(rows, universe_size):
        dense = _dense_rows(appr, column_position, universe_size, chunk, device).clamp_(min=0.0)
        norms = dense.norm(dim=1, keepdim=True)
        dense = dense / torch.clamp(norms / clip, min=1.0)
        if sigma > 0:
            noise = randn_on(dense.shape, generator, device, torch.float64)
            dense = dense + sigma * noise
        top = dense.topk(k, dim=1)
        cols, values = top.indices, top.values
        if sigma <= 0:
            valid = values > 0
            cols, values = torch.where(valid, cols, -1), torch.where(valid, values, 0.0)
        cols_out[chunk], vals_out[chunk] = cols, values
    return cols_out, vals_out


def exact_top_k(
    appr: sp.csr_matrix, column_position: np.ndarray, top_k: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-private sparsification: the K largest APPR values of each row (PPRGo / DPARNoDP).

    Works on the sparse rows directly (no dense universe), cost O(nnz log nnz).

    Args:
        appr: APPR rows (CSR), columns indexed by node.
        column_position: node → its position in the candidate universe.
        top_k: K, the entries kept per row.
        device: where the outputs live.

    Returns:
        ``(columns, values)`` of shape [rows, K]: universe positions and APPR values, largest first;
        unused slots have value 0 and column −1.
    """
    coo = appr.tocoo()
    rows = appr.shape[0]
    cols_out = torch.full((rows, top_k), -1, dtype=torch.long, device=device)
    vals_out = torch.zeros(rows, top_k, dtype=torch.float64, device=device)
    if coo.nnz == 0:
        return cols_out, vals_out
    order = np.lexsort((-coo.data, coo.row))  # by row, then by value descending
    r, c, v = coo.row[order], coo.col[order], coo.data[order]
    first = np.searchsorted(r, r, side="left")
    rank = np.arange(len(r)) - first
    keep = rank < top_k
    r, c, v, rank = r[keep], c[keep], v[keep], rank[keep]
    idx_r = torch.as_tensor(r, dtype=torch.long, device=device)
    idx_k = torch.as_tensor(rank, dtype=torch.long, device=device)
    cols_out[idx_r, idx_k] = torch.as_tensor(column_position[c], dtype=torch.long, device=device)
    vals_out[idx_r, idx_k] = torch.as_tensor(v, dtype=torch.float64, device=device)
    return cols_out, vals_out


# --------------------------------------------------------------------------- the paper's formulas


def paper_strong_composition_epsilon(total_epsilon: float, count: int, total_delta: float) -> float:
    r"""Per-mechanism ε in DPAR's use of Kairouz et al.'s composition (Theorems 1 and 3):
    :math:`\varepsilon = \varepsilon_g / \bigl(2\sqrt{k\ln(e + \varepsilon_g/\delta_g)}\bigr)`
    with :math:`\delta_g = 2k\delta`. Used only by the ``paper`` accountant.

    Args:
        total_epsilon: ε_g, the composed budget.
        count: k, the number of mechanisms composed.
        total_delta: δ_g.

    Returns:
        The per-mechanism ε.
    """
    return total_epsilon / (2.0 * math.sqrt(count * math.log(math.e + total_epsilon / total_delta)))


def paper_top_k_epsilon(epsilon: float, k: int, delta: float) -> float:
    r"""Corollary 1 of DPAR (Durfee & Rogers): one-shot Gumbel(Δ/ε) top-k is (ε′, δ)-DP with
    :math:`\varepsilon' = 2\min\{k\varepsilon,\; k\varepsilon\tanh\varepsilon + \varepsilon\sqrt{2k\ln(1/\delta)}\}`.

    Args:
        epsilon: ε of one selection.
        k: the number of selections.
        delta: δ.

    Returns:
        ε′.
    """
    return 2.0 * min(k * epsilon, k * epsilon * math.tanh(epsilon) + epsilon * math.sqrt(2 * k * math.log(1 / delta)))


def paper_em_epsilon(row_epsilon: float, k: int, delta: float) -> float:
    """Invert :func:`paper_top_k_epsilon`: the per-selection ε (Gumbel scale C₂/ε) whose
    top-k guarantee is ``row_epsilon`` (Theorem 1's ε₁). Bisection; the map is increasing.

    Args:
        row_epsilon: the row's top-k budget ε₁.
        k: the number of selections.
        delta: δ.

    Returns:
        The largest per-selection ε whose Corollary 1 guarantee is at most ``row_epsilon``.
    """
    lo, hi = 0.0, 1.0
    while paper_top_k_epsilon(hi, k, delta) < row_epsilon:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if paper_top_k_epsilon(mid, k, delta) <= row_epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def paper_gm_sigma(row_epsilon: float, row_delta: float, clip: float) -> float:
    """Algorithm 3, line 8: σ = √(2 ln(1.25/δ))·C₁/ε (classic Gaussian mechanism, valid for ε < 1).

    Args:
        row_epsilon: the row's ε (< 1 for the formula to hold).
        row_delta: the row's δ.
        clip: C₁, the ℓ₂ sensitivity used by the paper.

    Returns:
        σ.
    """
    return math.sqrt(2.0 * math.log(1.25 / row_delta)) * clip / row_epsilon
