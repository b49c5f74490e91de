r"""The f-DP one-run test: Mahloujifar, Melis & Chaudhuri (2024), *Auditing f-Differential
Privacy in One Run* (arXiv 2410.22235, ICML 2025), their audit with abstention (Algorithm 3).

Game (the same as Steinke, Nasr & Jagielski 2023): each of m canaries is included by an
independent fair coin; from the released output only, the auditor guesses "in" or "out" for r
of them and abstains on the rest; V of the r guesses are right. Let the mechanism be f-DP in
every coin, f a symmetric trade-off function, :math:`\bar f(x) = 1 - f(x)` and
:math:`\bar f^{-1}` its inverse. Start from

.. math::
    \rho_v = \tau v / m, \qquad \eta_v = \tau (r - v) / m

and for i = v − 1, …, 0

.. math::
    \eta_i = \max\{\eta_{i+1},\ \bar f^{-1}(\rho_{i+1})\}, \qquad
    \rho_i = \rho_{i+1} + \frac{i}{r - i}\,(\eta_i - \eta_{i+1}).

Their theorem: if :math:`\rho_0 + \eta_0 > r/m`, then :math:`P[V \ge v] \le \tau`. (ρ and η are
lower bounds on the per-canary mass of right and wrong guesses on the event V ≥ i if that event
had probability above τ; f-DP forces wrong mass η ≥ f̄⁻¹(ρ) and an outcome with i right guesses
carries r − i wrong ones; more than the r/m guesses per canary that exist is a contradiction.)
Rejecting "the mechanism is f-DP" at level τ is therefore valid whatever the mechanism.

Two families of f are tested (Dong, Roth & Su 2022):

* (ε, δ)-DP, :math:`f_{\varepsilon,\delta}(x) = \max\{0, 1 - \delta - e^\varepsilon x,
  e^{-\varepsilon}(1 - \delta - x)\}` (their Proposition 2.5):
  :math:`\bar f^{-1}(y) = \max\{0, e^{-\varepsilon}(y - \delta), 1 - \delta - e^{\varepsilon}(1 - y)\}`.
  A rejection says the mechanism is not (ε, δ)-DP: a certificate on ε at δ.
* μ-GDP, :math:`G_\mu(x) = \Phi(\Phi^{-1}(1 - x) - \mu)`:
  :math:`\bar f^{-1}(y) = \Phi(\Phi^{-1}(y) - \mu)`. A rejection says the mechanism is not μ-GDP.

Monotonicity (used by the searches). Write g = f̄⁻¹ and w_i = i/(r − i), which shrinks as i
falls. If g_A ≥ g_B pointwise (both non-decreasing, as inverses of increasing f̄), then by induction over the steps η_A ≥ η_B and
ρ_A − ρ_B ≥ w_i (η_A − η_B) ≥ 0: the new η_A = max(η_A, g_A(ρ_A)) ≥ max(η_B, g_B(ρ_B)), and
ρ'_A − ρ'_B = (ρ_A − ρ_B) − w_i(η_A − η_B) + w_i(η'_A − η'_B) ≥ w_i(η'_A − η'_B) ≥ w_{i−1}(η'_A − η'_B).
So ρ_0 + η_0 grows with g. g falls as ε (or μ) grows, so the parameters the test rejects form
an interval starting at 0: the largest rejected parameter is found by bisection, and reporting it is
valid (reporting more than the true θ requires rejecting the true θ, probability ≤ τ). Since ρ
and η only grow, the recursion stops as soon as ρ + η > r/m (rejected) or η stops growing (then
nothing changes any more: not rejected).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import ndtr, ndtri

#: Candidates evaluated per bracket and per round of the vectorised bisection.
_CANDIDATES = 64

#: Relative margin by which f̄⁻¹ is shrunk and the guess budget r/m enlarged, so that rounding
#: never makes the float recursion reject where exact arithmetic would not (a rejection in
#: error would over-state the bound; one lost at the 1e-9 level costs nothing visible).
ROUNDING_MARGIN = 1e-9


def epsilon_delta_inverse(delta: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """f̄⁻¹ of the (ε, δ)-DP trade-off curve as a function of (y, ε), δ fixed.

    Args:
        delta: δ of the curve.

    Returns:
        ``inverse(y, epsilon)``, elementwise.
    """

    def inverse(y: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
        low = np.exp(-epsilon) * (y - delta)
        # 1 − δ − e^ε(1 − y) rearranged: 1 − (1 − y) loses all of a small y to rounding (at ε = 0
        # it returned 1.1e-16 for y = 6e-17, over-stating f̄⁻¹ and so the bound)
        high = np.exp(epsilon) * y - (np.expm1(epsilon) + delta)
        return np.maximum(0.0, np.maximum(low, high))

    return inverse


def gaussian_inverse(y: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """f̄⁻¹ of the μ-GDP trade-off curve: Φ(Φ⁻¹(y) − μ).

    Args:
        y: points in [0, 1].
        mu: μ of the curve.

    Returns:
        f̄⁻¹(y), elementwise.
    """
    return ndtr(ndtri(y) - mu)


def fdp_rejects(m: int, guesses, correct, level: float, inverse, params) -> np.ndarray:
    """Whether the f-DP one-run test rejects each hypothesis at ``level`` (module docstring).

    Element k tests "``correct[k]`` or more of ``guesses[k]`` guesses right" against the
    trade-off curve with parameter ``params[k]`` (ε for :func:`epsilon_delta_inverse`, μ for
    :func:`gaussian_inverse`); all elements share m and ``level`` (τ).

    Shapes:
        guesses, correct, params: [K] (broadcast); returns [K] bool.

    Args:
        m: number of canaries.
        guesses: number of guesses r of each test.
        correct: number of correct guesses v of each test.
        level: significance level τ.
        inverse: ``inverse(y, param)``, f̄⁻¹ of the trade-off curve (:func:`epsilon_delta_inverse`,
            :func:`gaussian_inverse`).
        params: the curve's parameter of each test.

    Returns:
        Whether each test rejects.
    """
    r, v, theta = np.broadcast_arrays(
        np.asarray(guesses, dtype=np.float64), np.asarray(correct, dtype=np.int64), np.asarray(params, dtype=np.float64)
    )
    r, v, theta = r.reshape(-1), v.reshape(-1), theta.reshape(-1)
    rho = level * v / m
    eta = level * (r - v) / m
    budget = r / m * (1.0 + ROUNDING_MARGIN)
    rejected = rho + eta > budget
    live = np.flatnonzero(~rejected & (v > 0))
    rho, eta, budget, r, v, theta = rho[live], eta[live], budget[live], r[live], v[live], theta[live]
    for i in range(int(v.max(initial=0)) - 1, -1, -1):
        if live.size == 0:
            break
        started = v > i
        grow = np.where(started, np.maximum(inverse(rho, theta) * (1.0 - ROUNDING_MARGIN) - eta, 0.0), 0.0)
        rho = rho + i / np.maximum(r - i, 1.0) * grow
        eta = eta + grow
        over = rho + eta > budget
        done = over | (started & (grow <= 0.0))
        if done.any():
            rejected[live[over]] = True
            keep = ~done
            live, rho, eta, budget, r, v, theta = (a[keep] for a in (live, rho, eta, budget, r, v, theta))
    return rejected


def largest_rejected(m: int, guesses, correct, level: float, inverse, upper: float, tol: float = 1e-6) -> np.ndarray:
    """For each (guesses, correct) pair, the largest parameter in [0, ``upper``] whose f-DP test
    rejects at ``level`` (to ``tol``; the rejected end of the final bracket is returned), 0.0 when
    even 0 is not rejected and ``upper`` when everything up to it is.

    Exact by the monotonicity in the module docstring; all pairs are searched together, each
    round testing :data:`_CANDIDATES` points of every open bracket.

    Shapes:
        guesses, correct: [P]; returns [P] float.

    Args:
        m: number of canaries.
        guesses: number of guesses r of each test.
        correct: number of correct guesses v of each test.
        level: significance level.
        inverse: ``inverse(y, param)``, f̄⁻¹ of the trade-off curve (:func:`epsilon_delta_inverse`,
            :func:`gaussian_inverse`).
        upper: top of the search range.
        tol: bracket width at which the search stops.

    Returns:
        The largest rejected parameter of each pair.
    """
    r = np.asarray(guesses, dtype=np.int64).reshape(-1)
    v = np.asarray(correct, dtype=np.int64).reshape(-1)
    lo = np.zeros(r.size)
    hi = np.full(r.size, float(upper))
    at_zero = fdp_rejects(m, r, v, level, inverse, lo)
    at_top = fdp_rejects(m, r, v, level, inverse, hi)
    result = np.where(at_top, float(upper), 0.0)
    open_ = np.flatnonzero(at_zero & ~at_top)
    steps = np.arange(1, _CANDIDATES) / _CANDIDATES
    while open_.size:
        width = hi[open_] - lo[open_]
        points = lo[open_, None] + width[:, None] * steps[None, :]
        rej = fdp_rejects(
            m, np.repeat(r[open_], steps.size), np.repeat(v[open_], steps.size), level, inverse, points.reshape(-1)
        ).reshape(points.shape)
        # rejected points form a prefix (monotonicity): the bracket shrinks to the last rejected one and its successor
        last = rej.sum(axis=1)
        new_lo = np.where(last > 0, points[np.arange(open_.size), np.maximum(last - 1, 0)], lo[open_])
        new_hi = np.where(last < steps.size, points[np.arange(open_.size), np.minimum(last, steps.size - 1)], hi[open_])
        lo[open_], hi[open_] = new_lo, new_hi
        finished = hi[open_] - lo[open_] <= tol
        result[open_[finished]] = lo[open_[finished]]
        open_ = open_[~finished]
    return result


def fdp_epsilon(m: int, guesses, correct, delta: float, level: float, upper: float) -> np.ndarray:
    """Largest ε the f-DP test against the (ε, δ) curve rejects, per (guesses, correct) pair.

    Args:
        m: number of canaries.
        guesses: number of guesses r of each test.
        correct: number of correct guesses v of each test.
        delta: δ of the curve.
        level: significance level.
        upper: top of the ε search range.

    Returns:
        ε of each pair.
    """
    return largest_rejected(m, guesses, correct, level, epsilon_delta_inverse(float(delta)), upper)


def fdp_gaussian_mu(m: int, guesses, correct, level: float, upper: float) -> np.ndarray:
    """Largest μ the f-DP test against the μ-GDP curve rejects, per (guesses, correct) pair.

    Args:
        m: number of canaries.
        guesses: number of guesses r of each test.
        correct: number of correct guesses v of each test.
        level: significance level.
        upper: top of the μ search range.

    Returns:
        μ of each pair.
    """
    return largest_rejected(m, guesses, correct, level, gaussian_inverse, upper)


def implied_p_value(m: int, guesses: int, correct: int, inverse, param: float, tol: float = 1e-9) -> float:
    """Smallest τ at which the test rejects, to a relative ``tol`` and from above (a p-value: the
    rejection region grows with τ, by the same induction as the monotonicity in the module
    docstring); 1.0 when no τ < 1 rejects. Below 1e-300 the search stops and returns 1e-300.

    Args:
        m: number of canaries.
        guesses: number of guesses r.
        correct: number of correct guesses v.
        inverse: ``inverse(y, param)``, f̄⁻¹ of the trade-off curve (:func:`epsilon_delta_inverse`,
            :func:`gaussian_inverse`).
        param: the curve's parameter.
        tol: relative precision of τ.

    Returns:
        The p-value.
    """

    def rejects(tau: float) -> bool:
        return bool(fdp_rejects(m, [guesses], [correct], tau, inverse, [param])[0])

    hi = 1.0 - tol
    if not rejects(hi):
        return 1.0
    lo = 0.0
    while hi > 1e-300 and hi - lo > tol * hi:
        mid = 0.5 * (lo + hi) if lo > 0 else hi / 16.0  # geometric steps until a τ is not rejected
        if rejects(mid):
            hi = mid
        else:
            lo = mid
    return float(hi)
