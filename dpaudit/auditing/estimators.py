r"""ε lower bounds and estimates from audit scores (canaries or randomized membership).

Five estimators turn per-canary attack scores into a statement about ε at a fixed δ:

* :func:`one_run_lower_bound` — Steinke, Nasr & Jagielski (2023), *Privacy Auditing with One
  (1) Training Run*: a guess-count test with abstention over m canaries whose inclusion is an
  independent fair coin; valid from a single training run. A lower **bound**.
* :func:`fdp_one_run_lower_bound` — Mahloujifar, Melis & Chaudhuri (2024), *Auditing
  f-Differential Privacy in One Run*: the same game, tested against a trade-off curve with
  their recursive bound. Against the (ε, δ) curve (``one-run-fdp``) a lower **bound**; against
  Gaussian curves (``one-run-fdp-gaussian``) a certified bound on μ whose ε is an **estimate**
  unless the mechanism is Gaussian-shaped.
* :func:`multi_run_lower_bound` — Jagielski, Ullman & Oprea (2020): independent trainings, one
  guess per run, Clopper–Pearson bounds on FPR and FNR. A lower **bound**.
* :func:`gdp_estimate` — Nasr et al. (2023) / f-DP (Dong, Roth & Su 2019): a lower confidence
  bound on μ from the empirical trade-off curve, converted to ε at δ through the exact
  Gaussian curve. An **estimate**: a lower bound only if the mechanism's trade-off curve is
  Gaussian-shaped.

:func:`audit_epsilon` runs several of them with a Bonferroni split of the error budget and
reports the maximum.

Guesses of the one-run tests. Both theorems hold for any guesser that reads only the released
output and makes a number of guesses fixed in advance, so each one-run estimator tries its own
grid and the two-cluster split rule (:func:`split_guess_grid`, :func:`two_cluster_split`: the
"in"/"out" split read from the scores), a weighted Bonferroni split of its β fixed in advance
(:data:`SPLIT_SHARE`). A perfect ranking then guesses every canary right whatever number the
coins included.

Conventions (all functions). ``scores`` are floats, higher = "more likely included";
``included`` is the fair coin of each canary (True = inserted before training), decided before
training and independently of everything the attack sees. Every result is an
:class:`EpsilonEstimate`; ``epsilon_lower_bound`` is 0.0 when nothing is certified.

Shapes:
    scores: [n] float, finite.
    included: [n] bool (or 0/1 integers).
    run_ids: [n] any hashable labels (which training run produced each score), or None.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import gammaln

from dpaudit.accounting.pld import gaussian_epsilon
from dpaudit.auditing import fdp_one_run
from dpaudit.auditing.intervals import (
    bonferroni_confidence,
    clopper_pearson_epsilon,
    clopper_pearson_lower,
    clopper_pearson_upper,
    threshold_counts,
)
from dpaudit.errors import DPAuditError

log = logging.getLogger(__name__)

ESTIMATORS = ("one-run", "one-run-fdp", "one-run-fdp-gaussian", "multi-run", "gdp")
RIGOROUS_ESTIMATORS = ("one-run", "one-run-fdp", "multi-run")
#: Estimators whose ε rests on an assumption about the trade-off curve's shape (kind "estimate").
ESTIMATE_ESTIMATORS = ("one-run-fdp-gaussian", "gdp")
MULTI_RUN_PER_RUN = ("error", "sample")
#: Multi-run threshold selection scores candidates at α × this factor (see multi_run_lower_bound).
SELECTION_LEVEL_FACTOR = 0.01

#: ε beyond which the search for the one-run bound stops (e^50 ≈ 5e21: a certificate this large
#: only says "no privacy"). Reaching it is recorded in ``details``.
EPSILON_SEARCH_MAX = 50.0


class EstimatorInputError(DPAuditError, ValueError):
    """Scores, coins, run ids or a parameter of an ε estimator are invalid."""


# --------------------------------------------------------------------------- result type


@dataclass
class EpsilonEstimate:
    """One estimator's statement about ε at ``delta``.

    ``epsilon_lower_bound`` ≥ 0 holds with probability ≥ ``confidence`` under the estimator's
    ``assumptions`` (for :data:`ESTIMATE_ESTIMATORS` only if the mechanism is Gaussian-shaped:
    an estimate).
    ``confidence`` is the level this estimator was run at, i.e. after any Bonferroni split done
    by the caller (:func:`audit_epsilon`).

    Attributes:
        estimator: the estimator's name.
        epsilon_lower_bound: the bound (or estimate), ≥ 0.
        confidence: the level it was run at.
        delta: the δ at which ε is stated.
        details: the estimator's intermediate numbers.
        assumptions: when the statement is valid.
    """

    estimator: str
    epsilon_lower_bound: float
    confidence: float
    delta: float
    details: dict = field(default_factory=dict)
    assumptions: str = ""

    def to_dict(self) -> dict:
        """JSON-able form, with ``kind`` ("estimate" or "lower bound") added."""
        out = asdict(self)
        out["details"] = _jsonable(self.details)
        out["epsilon_lower_bound"] = float(self.epsilon_lower_bound)
        out["kind"] = "estimate" if self.estimator in ESTIMATE_ESTIMATORS else "lower bound"
        return out


def _jsonable(value: Any) -> Any:
    """Recursively turn numpy scalars/arrays and tuples into plain JSON types."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else None
    return value


# --------------------------------------------------------------------------- input validation


def _host_array(x) -> np.ndarray:
    """numpy view of a list, numpy array or (any-device) torch tensor, without importing torch."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _check_common(scores, included, delta, confidence) -> tuple[np.ndarray, np.ndarray]:
    try:
        s = _host_array(scores).astype(np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise EstimatorInputError(f"scores must be numbers: {exc}") from None
    raw = _host_array(included).reshape(-1)
    if raw.size != s.size:
        raise EstimatorInputError(f"scores ({s.size}) and included ({raw.size}) differ in length")
    if s.size == 0:
        raise EstimatorInputError("no scores given")
    if not np.isfinite(s).all():
        bad = int((~np.isfinite(s)).sum())
        raise EstimatorInputError(f"scores must be finite; {bad} are NaN or infinite")
    if raw.dtype == np.bool_:
        y = raw.astype(bool)
    elif np.issubdtype(raw.dtype, np.number) and np.isin(raw, (0, 1)).all():
        y = raw.astype(bool)
    else:
        raise EstimatorInputError("included must be booleans (the fair coin of each canary), or 0/1")
    _check_delta_confidence(delta, confidence)
    return s, y


def _check_delta_confidence(delta, confidence) -> None:
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating, np.integer)):
        raise EstimatorInputError(f"delta must be a number in [0, 1), got {delta!r}")
    if not (0.0 <= float(delta) < 1.0):
        raise EstimatorInputError(f"delta must lie in [0, 1), got {delta}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating, np.integer)):
        raise EstimatorInputError(f"confidence must be a number in (0, 1), got {confidence!r}")
    if not (0.0 < float(confidence) < 1.0):
        raise EstimatorInputError(f"confidence must lie in (0, 1), got {confidence}")


def _float_list(name: str, values) -> np.ndarray:
    """A non-empty 1-D array of finite floats (thresholds, quantile levels)."""
    try:
        arr = _host_array(values).astype(np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise EstimatorInputError(f"{name} must be a list of numbers, got {values!r}") from None
    if arr.size == 0 or not np.isfinite(arr).all():
        raise EstimatorInputError(f"{name} must be a non-empty list of finite numbers")
    return arr


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise EstimatorInputError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_runs(run_ids, n: int) -> np.ndarray | None:
    """Integer run index per score (0..R-1), or None when ``run_ids`` is None."""
    if run_ids is None:
        return None
    r = _host_array(run_ids)
    if r.ndim != 1 or r.size != n:
        raise EstimatorInputError(f"run_ids must be a 1-D array of length {n} (one per score), got shape {r.shape}")
    if np.issubdtype(r.dtype, np.floating) and not np.isfinite(r).all():
        raise EstimatorInputError("run_ids must not contain NaN")
    try:
        _, inverse = np.unique(r, return_inverse=True)
    except TypeError as exc:
        raise EstimatorInputError(f"run_ids must be comparable labels: {exc}") from None
    return inverse.reshape(-1)


def _tie_break_order(s: np.ndarray, seed: int) -> np.ndarray:
    """Indices sorting ``s`` ascending, ties broken by a seeded random key.

    The random key is independent of the coins, so a caller that listed canaries in coin order
    cannot leak the coins into the guesses through tied scores."""
    key = np.random.default_rng(seed).permutation(s.size)
    return np.lexsort((key, s))


# --------------------------------------------------------------------------- binomial tails


def _check_int(name: str, value, allow_negative: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise EstimatorInputError(f"{name} must be an integer, got {value!r}")
    if value < 0 and not allow_negative:
        raise EstimatorInputError(f"{name} must be >= 0, got {value}")
    return int(value)


def _check_counts(m, r, v) -> tuple[int, int, int]:
    m, r, v = _check_int("m", m), _check_int("r", r), _check_int("v", v)
    if not v <= r <= m:
        raise EstimatorInputError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    return m, r, v


def _check_epsilon(epsilon) -> None:
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, (int, float, np.floating, np.integer))
        or not (0.0 <= float(epsilon) < math.inf)
    ):
        raise EstimatorInputError(f"epsilon must be a finite number >= 0, got {epsilon!r}")


def _logsumexp(x: np.ndarray) -> float:
    """log Σ exp(x) for a 1-D array (scipy's version costs ~0.5 ms of overhead per call)."""
    top = float(np.max(x))
    if not math.isfinite(top):
        return top
    return top + math.log(float(np.sum(np.exp(x - top))))


def _log_binom_coefficients(r: int) -> np.ndarray:
    k = np.arange(r + 1, dtype=np.float64)
    return gammaln(r + 1.0) - gammaln(k + 1.0) - gammaln(r - k + 1.0)


def _log_q(epsilon: float) -> tuple[float, float]:
    """(log q, log(1 − q)) for q = e^ε / (1 + e^ε), stable for every ε ≥ 0."""
    log_q = -math.log1p(math.exp(-epsilon))
    log_1mq = -epsilon + log_q
    return log_q, log_1mq


def _log_pmf(r: int, epsilon: float, log_coef: np.ndarray | None = None) -> np.ndarray:
    if log_coef is None:
        log_coef = _log_binom_coefficients(r)
    log_q, log_1mq = _log_q(epsilon)
    k = np.arange(r + 1, dtype=np.float64)
    return log_coef + k * log_q + (r - k) * log_1mq


def binomial_tail(v: int, r: int, epsilon: float) -> float:
    r"""P[W ≥ v] for W ~ Binomial(r, e^ε/(1+e^ε)), summed exactly in log space.

    The probability that an ε-DP randomized response guesses correctly is e^ε/(1+e^ε); this is
    the pure-DP part of the one-run test (Steinke et al. 2023). Cross-checked against
    ``scipy.stats.binom.sf`` and brute-force enumeration in the tests.

    Args:
        v: threshold count.
        r: number of trials.
        epsilon: ε ≥ 0.

    Returns:
        P[W ≥ v] (1 for v ≤ 0, 0 for v > r).

    Raises:
        EstimatorInputError: a non-integer count or an invalid ε.
    """
    v, r = _check_int("v", v, allow_negative=True), _check_int("r", r)
    _check_epsilon(epsilon)
    if v <= 0:
        return 1.0
    if v > r:
        return 0.0
    return float(min(1.0, math.exp(_logsumexp(_log_pmf(r, epsilon)[v:]))))


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float, *, _log_coef=None) -> float:
    r"""p-value of ``v`` correct guesses out of ``r`` (of ``m`` canaries) under (ε, δ)-DP.

    Steinke, Nasr & Jagielski (2023), main theorem for approximate DP (arXiv 2305.08846,
    §5, the (ε, δ) corollary; the same quantity as their Appendix D p-value): with
    f(u) = P[Binomial(r, q) ≥ u], q = e^ε/(1+e^ε),

    .. math::
        P[\#\text{correct} \ge v] \;\le\; f(v) + 2m\delta \max_{i = 1..v} \frac{f(v - i) - f(v)}{i}.

    For δ = 0 this is the binomial tail alone (their pure-DP theorem). Written here from the
    statement; the maximum runs over i = 1..v with f(v−i) − f(v) = P[v − i ≤ W ≤ v − 1].

    Monotonicity in ε (used by :func:`one_run_epsilon`'s bisection): with
    A_i(q) = f(v) + (c/i)(f(v−i) − f(v)), c = 2mδ, and d/dq P[W ≥ u] = r·P[W' = u − 1]
    (W' ~ Binomial(r − 1, q)), dA_i/dq ≥ r·P[W' = v − 1]·(1 − c/i) ≥ 0 whenever c ≤ 1. So the
    p-value is non-decreasing in ε when 2mδ ≤ 1.

    Args:
        m: number of canaries.
        r: number of guesses.
        v: number of correct guesses.
        epsilon: ε of the null hypothesis.
        delta: δ of the null hypothesis, in [0, 1).

    Returns:
        The p-value, in [0, 1].

    Raises:
        EstimatorInputError: inconsistent counts, or ε/δ out of range.
    """
    m, r, v = _check_counts(m, r, v)
    _check_epsilon(epsilon)
    _check_delta_confidence(delta, 0.5)
    if v == 0:
        return 1.0
    logp = _log_pmf(r, epsilon, _log_coef)
    tail = float(math.exp(_logsumexp(logp[v:])))
    if delta <= 0:
        return min(1.0, tail)
    below = np.exp(logp[:v][::-1])  # P[W = v-1], P[W = v-2], ..., P[W = 0]
    window = np.cumsum(below)  # P[v-i <= W <= v-1] for i = 1..v
    alpha = float(np.max(window / np.arange(1, v + 1)))
    return min(1.0, tail + 2.0 * m * delta * alpha)


def _one_run_p_values(m: int, r: int, v: int, epsilons: np.ndarray, delta: float, log_coef: np.ndarray) -> np.ndarray:
    """:func:`one_run_p_value` for many ε at once (rows of a [E, r + 1] log-pmf matrix)."""
    eps = np.asarray(epsilons, dtype=np.float64)
    log_q = -np.log1p(np.exp(-eps))
    log_1mq = -eps + log_q
    k = np.arange(r + 1, dtype=np.float64)
    logp = log_coef[None, :] + k[None, :] * log_q[:, None] + (r - k)[None, :] * log_1mq[:, None]
    upper = logp[:, v:]
    top = upper.max(axis=1)
    tail = np.exp(top) * np.exp(upper - top[:, None]).sum(axis=1)
    if delta <= 0:
        return np.minimum(1.0, tail)
    window = np.cumsum(np.exp(logp[:, :v][:, ::-1]), axis=1)  # P[v-i <= W <= v-1], i = 1..v
    alpha = (window / np.arange(1, v + 1)[None, :]).max(axis=1)
    return np.minimum(1.0, tail + 2.0 * m * delta * alpha)


def one_run_epsilon(m: int, r: int, v: int, delta: float, level: float) -> tuple[float, float]:
    """Largest ε whose one-run test (:func:`one_run_p_value`) rejects at ``level``.

    Returns (ε_LB, p-value at ε_LB); ε_LB = 0.0 when even ε = 0 is not rejected. When
    2mδ ≤ 1 the p-value is non-decreasing in ε (see :func:`one_run_p_value`), so every
    ε ≤ ε_LB is rejected too and bisection is exact (to 1e-6; the lower end — the side that
    is rejected — is returned). When 2mδ > 1 the p-value need not be monotone; a scan in steps
    of 0.01 from 0 returns the last grid point before the first non-rejected one. That is
    still valid: for the true ε* let ε' be the smallest grid point ≥ ε* (a fixed number); the
    mechanism is (ε', δ)-DP, so P[p(ε') ≤ level] ≤ level, and reporting more than ε* requires
    every grid point up to the report, ε' included, to be rejected.

    Args:
        m: canaries (all of them, abstentions included); r: guesses; v: correct guesses.
        delta: δ of the tested (ε, δ) hypothesis; level: rejection level (β after any split).
    """
    m, r, v = _check_counts(m, r, v)
    _check_delta_confidence(delta, 0.5)
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0.0 < level < 1.0:
        raise EstimatorInputError(f"level must lie in (0, 1), got {level!r}")
    coef = _log_binom_coefficients(r)

    def p(eps: float) -> float:
        return one_run_p_value(m, r, v, eps, delta, _log_coef=coef)

    p0 = p(0.0)
    if p0 > level:
        return 0.0, p0
    if 2.0 * m * delta > 1.0:
        steps = np.arange(1, int(round(EPSILON_SEARCH_MAX / 0.01)) + 1)
        chunk = max(1, min(256, 4_000_000 // (r + 1)))
        last = 0  # index of the last rejected grid point (0 = ε 0, rejected above)
        for start in range(0, steps.size, chunk):
            js = steps[start : start + chunk]
            rejected = _one_run_p_values(m, r, v, js * 0.01, float(delta), coef) <= level
            if not rejected.all():
                last = int(js[int(np.argmin(rejected))]) - 1
                break
            last = int(js[-1])
        return last * 0.01, p(last * 0.01)
    lo, hi = 0.0, 1.0
    while p(hi) <= level:
        if hi >= EPSILON_SEARCH_MAX:
            return EPSILON_SEARCH_MAX, p(EPSILON_SEARCH_MAX)
        lo, hi = hi, min(2.0 * hi, EPSILON_SEARCH_MAX)
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if p(mid) <= level:
            lo = mid
        else:
            hi = mid
    return lo, p(lo)


# --------------------------------------------------------------------------- threshold counts


# --------------------------------------------------------------------------- pooling runs


def standardize_per_run(scores, run_ids) -> np.ndarray:
    """Scores centred on their run's median and scaled by its interquartile range.

    Pooling the canaries of several trainings ranks scores across models whose score scales
    differ (one model's margins may all be larger); a per-run robust z-score removes that.
    It reads only the outputs (scores, never the coins), so every estimator stays valid on the
    result: the one-run guesses remain a function of the released outputs, and with one score
    kept per run each run's standardized score is still a function of that run alone.

    Shapes:
        scores: [n]; run_ids: [n]; returns [n] float64.

    Args:
        scores: canary scores (finite).
        run_ids: run index of each score.

    Returns:
        The standardized scores.

    Raises:
        EstimatorInputError: non-finite scores or missing/mismatched run ids.
    """
    s = _host_array(scores).astype(np.float64).reshape(-1)
    runs = _check_runs(run_ids, s.size)
    if runs is None or not np.isfinite(s).all():
        raise EstimatorInputError("standardize_per_run needs finite scores and one run id per score")
    out = np.empty_like(s)
    for run in range(int(runs.max()) + 1):
        idx = runs == run
        q25, q50, q75 = np.quantile(s[idx], [0.25, 0.5, 0.75])
        scale = q75 - q25
        out[idx] = (s[idx] - q50) / (scale if scale > 0 else 1.0)
    return out


# --------------------------------------------------------------------------- one-run


ONE_RUN_ASSUMPTIONS = (
    "Valid (Steinke, Nasr & Jagielski 2023) when every canary's inclusion is an independent fair coin "
    "drawn before training, the rest of the training data and the attack are fixed independently of the "
    "coins, and the scores are computed from the released output(s) only; each canary is one unit of the "
    "privacy guarantee (a node canary for node-level DP, an edge canary for edge-level DP). Scores pooled "
    "from several independent runs are allowed (each coin still affects one run by one unit). The bound is "
    "loose: it caps at roughly ln(r) for r guesses, its delta term caps it further (about 3 at delta = 1e-5 "
    "in simulations), it ignores the shape of the trade-off curve, and the union bound over the guess counts "
    "costs a factor |grid| in the error budget."
)


def one_run_ceiling(m: int, r: int, delta: float, level: float) -> float:
    """The one-run bound if all r guesses were correct (v = r): no attack can exceed it.

    (A perfect ranking need not reach it: with r = m guesses split evenly, v = r needs exactly
    m/2 included canaries.) An audit whose ceiling is at most the claimed ε cannot refute the
    claim whatever the attack;
    with perfect guesses more guesses is more evidence (the δ term depends on m, not r), so
    the largest r of the grid gives the ceiling. When 2mδ > 1 the scan uses steps of 0.05
    (valid by the same argument as :func:`one_run_epsilon`, slightly below the 0.01 scan).

    Args:
        m: number of canaries.
        r: number of guesses.
        delta: δ of the claim.
        level: significance level of the test.

    Returns:
        The largest certifiable ε.
    """
    m, r, _ = _check_counts(m, r, r)
    if 2.0 * m * delta <= 1.0:
        return one_run_epsilon(m, r, r, delta, level)[0]
    coef = _log_binom_coefficients(r)
    grid = np.arange(0.0, EPSILON_SEARCH_MAX + 1e-9, 0.05)
    rejected = _one_run_p_values(m, r, r, grid, float(delta), coef) <= level
    if not rejected[0]:
        return 0.0
    return float(grid[-1] if rejected.all() else grid[int(np.argmin(rejected)) - 1])


def default_guess_grid(m: int) -> list[tuple[int, int]]:
    """Guess counts (k₊, k₋) tried by default (12 pairs for m ≥ 40).

    Eight balanced pairs (k₊ = ⌈r/2⌉, k₋ = ⌊r/2⌋) with r on a geometric grid from min(10, m)
    to m, and four "in"-only pairs (k₋ = 0) with k₊ geometric from min(10, ⌊m/4⌋) to ⌊m/4⌋ — for
    scores whose members stand out in the upper tail while non-members do not. Chosen on
    simulated scores (50 seeds, m = 1000) before any real audit: on equal-variance Gaussian
    scores the mean bound is 1.36 (vs 1.31 for 10 + 10 pairs), on member-heavy-tailed scores
    2.38 (vs 2.27; balanced pairs alone 1.57).

    Args:
        m: number of canaries (≥ 1).

    Returns:
        The (k₊, k₋) pairs, duplicates removed.

    Raises:
        EstimatorInputError: m < 1.
    """
    m = _check_int("m", m)
    if m < 1:
        raise EstimatorInputError("need at least one canary")
    lo = min(10, m)
    grid: list[tuple[int, int]] = []
    for r in np.unique(np.round(np.geomspace(lo, m, 8)).astype(int)):
        if r >= 2:
            grid.append((int(r) - int(r) // 2, int(r) // 2))
    lo_in = max(1, min(10, m // 4))
    for k in np.unique(np.round(np.geomspace(lo_in, max(lo_in, m // 4), 4)).astype(int)):
        grid.append((int(k), 0))
    return list(dict.fromkeys(grid))


#: Default guess counts of the f-DP one-run test, as fractions of the number of canaries.
FDP_GUESS_FRACTIONS = (0.07, 0.15)


def fdp_guess_grid(m: int) -> list[int]:
    """Guess counts r tried by default by :func:`fdp_one_run_lower_bound` (two for m ≥ 71).

    r = 7 % and 15 % of m (at least min(10, m)), each guessed by the extremes rule
    (:func:`_extreme_guess_counts`), which sets the split between "in" and "out" guesses from
    the scores alone, so the split costs no Bonferroni share: only the two counts are tested,
    each at β/2. Chosen on simulated scores (m = 1000, seeds 7000-7039; checked on 8000-8039
    and 9000-9029, none of bench_estimators' seeds) before any real audit. Medians of the
    Gaussian-curve ε over seeds 9000-9029, against the previous grid of five fixed splits
    (balanced r = 50, 100, 200 and "in"-only 50, 100): Gaussian mechanism at ε = 4: 2.28 (2.01),
    ε = 8: 4.33 (3.84), ε = 1: 0.27 (0.29); 15 % of members shifted by 4σ: 4.28 (about 3.2-3.4);
    15 % of non-members shifted down by 4σ: 4.28 (2.93). Fewer, mid-sized counts suit the f-DP
    test: the worst f-DP mechanism may correlate the canaries' privacy losses, which makes large
    r weak evidence, and every count added costs Bonferroni.

    Args:
        m: number of canaries (≥ 1).

    Returns:
        The guess counts, duplicates removed.

    Raises:
        EstimatorInputError: m < 1.
    """
    m = _check_int("m", m)
    if m < 1:
        raise EstimatorInputError("need at least one canary")
    floor = min(10, m)
    return list(dict.fromkeys(max(floor, round(fraction * m)) for fraction in FDP_GUESS_FRACTIONS))


#: Guess counts of the two-cluster split rule, as fractions of the number of canaries (:func:`split_guess_grid`).
SPLIT_GUESS_FRACTIONS = (1.0, 0.9, 0.8)
#: Share of a one-run estimator's error budget β spent on the split rule's entries by default; the
#: estimator's own grid keeps the rest (a weighted Bonferroni split, fixed before any audit).
SPLIT_SHARE = 0.2
#: The two-cluster split is computed on scores winsorized at these quantiles (a far outlier does not move it).
SPLIT_WINSOR = (0.01, 0.99)


def split_guess_grid(m: int) -> list[int]:
    """Guess counts r of the two-cluster split rule (:func:`two_cluster_split`), tried by default
    by both one-run estimators beside their own grids: every canary (r = m), and 90 % and 80 % of
    them, abstaining on the 10 % / 20 % whose scores lie nearest the split.

    Chosen before any real audit for strong attacks, whose scores fall into two clusters: a
    perfect ranking whose split lands in the gap between the clusters guesses all m right; when
    the split falls a little inside one cluster (a long tail of the other), the canaries it
    misplaces lie nearest the split, and the abstaining counts drop them. The fixed balanced
    pairs guess m/2 "in" and m/2 "out" and so make |N_in − m/2| wrong guesses even for a perfect
    ranking (issue 47: 1,000 canaries, AUC 1.000, certified 3.65 in 2 of 3 seeds; 4.72-4.84 with
    this rule). Its cost where the scores do not cluster — the grids keep 80 % of β — measured on
    the Gaussian mechanism exactly (4, 1e-5)-DP, m = 1,000, seeds 9000-9019 (medians, without →
    with the rule): one-run 1.29 → 1.27, one-run-fdp 1.49 → 1.47, its Gaussian-curve ε 2.23 → 2.17.

    Args:
        m: number of canaries (≥ 1).

    Returns:
        The guess counts, largest first, duplicates removed.

    Raises:
        EstimatorInputError: m < 1.
    """
    m = _check_int("m", m)
    if m < 1:
        raise EstimatorInputError("need at least one canary")
    return list(dict.fromkeys(max(1, int(math.ceil(fraction * m))) for fraction in SPLIT_GUESS_FRACTIONS))


def two_cluster_split(scores) -> float:
    """The split of the scores into two clusters (Otsu's threshold: the cut maximising the
    between-cluster variance, i.e. 1-D 2-means), computed on the scores winsorized at
    :data:`SPLIT_WINSOR`. A function of the scores alone, never of the coins.

    Args:
        scores: [m] finite scores.

    Returns:
        The threshold (midway between the two sorted scores it falls between); the median when
        all winsorized scores are equal.

    Shapes:
        scores: [m] float.
    """
    s = _host_array(scores).astype(np.float64).reshape(-1)
    low, high = np.quantile(s, SPLIT_WINSOR)
    w = np.sort(np.clip(s, low, high))
    w = w - w.mean()  # the variances below lose no precision to a large offset
    m = w.size
    cuts = np.flatnonzero(np.diff(w) > 0)  # split after sorted index i, between distinct values
    if cuts.size == 0:
        return float(np.median(s))
    below = np.cumsum(w)[cuts]
    k = cuts + 1.0
    # between-cluster variance ∝ k (m − k) (mean_below − mean_above)² = m² · below² / (k (m − k)) (w centred)
    between = below**2 / (k * (m - k))
    i = int(cuts[int(np.argmax(between))])
    a, b = np.sort(s)[i], np.sort(s)[i + 1]
    # midway between the two raw scores the cut falls between (winsorizing only located the cut)
    return float(0.5 * (a + b))


def _split_plan(split, m: int, default: bool) -> list[int]:
    """The split rule's guess counts: ``split`` checked, :func:`split_guess_grid` when ``split`` is None
    and ``default``, else none."""
    if split is None:
        return split_guess_grid(m) if default else []
    try:
        counts = [_check_int("split", c) for c in split]
    except (TypeError, EstimatorInputError):
        raise EstimatorInputError("split must be a list of guess counts (integers)") from None
    for r in counts:
        if not 1 <= r <= m:
            raise EstimatorInputError(f"split guess counts must lie in 1..{m}, got {r}")
    return list(dict.fromkeys(counts))


def _shares(grid_size: int, split_size: int) -> tuple[float, float]:
    """The fractions of β for one grid entry and one split entry (weighted Bonferroni, summing to 1)."""
    if split_size == 0:
        return 1.0 / grid_size, 0.0
    if grid_size == 0:
        return 0.0, 1.0 / split_size
    return (1.0 - SPLIT_SHARE) / grid_size, SPLIT_SHARE / split_size


def _guess_grid(guesses, m: int) -> list[tuple[int, int]]:
    """The (k₊, k₋) pairs of the one-run test: ``guesses`` checked, or :func:`default_guess_grid`."""
    if guesses is None:
        return default_guess_grid(m)
    try:
        grid = [(int(kp), int(km)) for kp, km in guesses]
    except (TypeError, ValueError):
        raise EstimatorInputError("guesses must be (k_plus, k_minus) pairs of integers") from None
    if not grid:
        raise EstimatorInputError("guesses must name at least one (k_plus, k_minus) pair")
    for kp, km in grid:
        if kp < 0 or km < 0 or kp + km < 1 or kp + km > m:
            raise EstimatorInputError(f"guess counts (k_plus={kp}, k_minus={km}) must be >= 0, sum to 1..{m}")
    return grid


def _guess_counts(s: np.ndarray, y: np.ndarray, grid, seed: int) -> list[tuple[int, int, int, int]]:
    """(k₊, k₋, r, v) per grid pair: guess "in" for the k₊ highest scores and "out" for the k₋
    lowest (ties broken by a seeded key independent of the coins), r = k₊ + k₋ guesses, v right."""
    y_sorted = y[_tie_break_order(s, seed)]  # ascending score
    in_from_top = np.concatenate([[0], np.cumsum(y_sorted[::-1])])
    out_from_bottom = np.concatenate([[0], np.cumsum(~y_sorted)])
    return [(kp, km, kp + km, int(in_from_top[kp] + out_from_bottom[km])) for kp, km in grid]


def _extreme_guess_counts(
    s: np.ndarray, y: np.ndarray, counts, seed: int, centre: float | None = None
) -> list[tuple[int, int, int, int]]:
    """(k₊, k₋, r, v) per guess count r of the extremes rule: guess on the r scores farthest from
    ``centre`` (default: the median of all m scores), "in" above it and "out" at or below it (ties in
    the distance broken by a seeded key independent of the coins); k₊ and k₋ are the resulting
    splits, v the right guesses. The split rule passes :func:`two_cluster_split` as ``centre``.

    The guesses, and so the split, are a function of the scores alone (the released output), never
    of the coins: a valid guesser for every r fixed in advance, so only the counts need a Bonferroni
    share. Scores whose members stand out in one tail put most guesses in that tail by themselves.
    """
    centred = s - (np.median(s) if centre is None else centre)
    key = np.random.default_rng(seed).permutation(s.size)
    order = np.lexsort((key, -np.abs(centred)))  # farthest first
    guess_in = centred[order] > 0
    right = np.concatenate([[0], np.cumsum(guess_in == y[order])])
    ins = np.concatenate([[0], np.cumsum(guess_in)])
    return [(int(ins[r]), r - int(ins[r]), r, int(right[r])) for r in counts]


def _fdp_guess_plan(guesses, m: int) -> list[int | tuple[int, int]]:
    """The guesses of an f-DP one-run test: ``guesses`` checked (each a count r for the extremes
    rule or a fixed (k₊, k₋) pair), or :func:`fdp_guess_grid`."""
    if guesses is None:
        return fdp_guess_grid(m)
    plan: list[int | tuple[int, int]] = []
    try:
        for entry in guesses:
            if isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
                plan.append(int(entry))
            else:
                k_plus, k_minus = entry
                plan.append((int(k_plus), int(k_minus)))
    except (TypeError, ValueError):
        raise EstimatorInputError("guesses must be guess counts r or (k_plus, k_minus) pairs of integers") from None
    if not plan:
        raise EstimatorInputError("guesses must name at least one guess count or (k_plus, k_minus) pair")
    for entry in plan:
        k_plus, k_minus = entry if isinstance(entry, tuple) else (entry, 0)
        if k_plus < 0 or k_minus < 0 or not 1 <= k_plus + k_minus <= m:
            raise EstimatorInputError(f"guess counts {entry} must be >= 0 and sum to 1..{m}")
    return plan


def _fdp_guess_counts(s: np.ndarray, y: np.ndarray, plan, seed: int) -> list[tuple[int, int, int, int]]:
    """(k₊, k₋, r, v) per entry of ``plan``, in order (counts by the extremes rule, pairs by rank)."""
    counts = [entry for entry in plan if not isinstance(entry, tuple)]
    pairs = [entry for entry in plan if isinstance(entry, tuple)]
    by_count = iter(_extreme_guess_counts(s, y, counts, seed))
    by_pair = iter(_guess_counts(s, y, pairs, seed))
    return [next(by_pair) if isinstance(entry, tuple) else next(by_count) for entry in plan]


def one_run_lower_bound(
    scores,
    included,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses=None,
    split=None,
    seed: int = 0,
) -> EpsilonEstimate:
    r"""One-run ε lower bound (Steinke, Nasr & Jagielski 2023, guess-count test with abstention).

    Theorem (their main result, (ε, δ) form; see :func:`one_run_p_value`): let each of m
    canaries be included by an independent fair coin S_i, let the auditor, from the output
    only, guess "in" for some canaries, "out" for others and abstain on the rest with r
    guesses in total. If the mechanism is (ε, δ)-DP, the number V of correct guesses satisfies
    P[V ≥ v] ≤ f(v) + 2mδ·max_i (f(v−i) − f(v))/i, f(u) = P[Binomial(r, e^ε/(1+e^ε)) ≥ u].
    ε_LB is the largest ε this test rejects at level β. The guesser is *any* function of the
    output (arXiv 2305.08846, their guesser T: a function of the released output only, with r
    guesses): which canaries are guessed and which way may depend on the scores, never on the
    coins; here r is fixed per entry before the audit.

    Two guessing rules, each entry tested at its own share of β (a weighted Bonferroni split,
    fixed in advance; the maximum ε over the entries is reported — valid at 1 − β jointly):

    * ``guesses`` — fixed (k₊, k₋) pairs (default :func:`default_guess_grid`): sort the scores
      (ties broken by a seeded random key independent of the coins), guess "in" for the k₊
      highest and "out" for the k₋ lowest;
    * ``split`` — guess counts r of the two-cluster split rule (default :func:`split_guess_grid`
      when ``guesses`` is also the default, else none): guess on the r scores farthest from the
      split :func:`two_cluster_split` of the scores, "in" above it, "out" below. The split, and
      so how many guesses are "in", comes from the scores alone: a perfect ranking guesses every
      canary right whatever the coins drew, where a fixed balanced pair makes |N_in − m/2|
      mistakes.

    With both, the split entries share :data:`SPLIT_SHARE` of β and the pairs the rest; with one
    rule, its entries share all of β. Choosing an entry after seeing which guesses were right
    would invalidate the test; the Bonferroni split pays for trying all of them.

    Where it is loose: abstention discards score magnitudes; with r guesses, all correct, ε_LB
    is about ln(r / ln(|grid|/β)); the δ term grows with m and caps the bound further (measured
    on Gaussian scores at δ = 1e-5: ≤ 3.2 for m = 1e3..1e5 although the true ε was 9.1 — the
    one-run test alone cannot catch a σ-halved ε = 4 mechanism), and at small levels it is very
    sensitive to β; the Bonferroni split costs ln(|grid|) in the tail. Typical values are far
    below the true ε (1.3 median for a sound ε = 4 Gaussian with m = 1000), as in the paper's own
    Gaussian experiments.

    Args:
        scores: [m] attack scores, higher = "more likely included".
        included: [m] bool fair coins.
        delta: δ of the audited claim (the same δ as the guarantee, not divided).
        confidence: 1 − β.
        guesses: iterable of (k_plus, k_minus) pairs, each with k_plus + k_minus ≤ m.
        split: guess counts r (1..m) of the split rule; ``()``: none.
        seed: tie-breaking seed.

    Returns:
        The :class:`EpsilonEstimate` (``details["tried"]``: every entry with its rule and level;
        ``details["split_ceilings"]``: the bound were every guess of each split entry right).

    Raises:
        EstimatorInputError: invalid scores, coins or guesses.

    Shapes:
        scores: [m] float; included: [m] bool; ``details["tried"]``: one row per entry.
    """
    s, y = _check_common(scores, included, delta, confidence)
    seed = _check_seed(seed)
    m = s.size
    grid = _guess_grid(guesses, m)
    splits = _split_plan(split, m, default=guesses is None)
    beta = 1.0 - float(confidence)
    grid_share, split_share = _shares(len(grid), len(splits))
    level, split_level = beta * grid_share, beta * split_share
    centre = two_cluster_split(s) if splits else None
    entries = [("top/bottom ranks", level, c) for c in _guess_counts(s, y, grid, seed)]
    entries += [("two-cluster split", split_level, c) for c in _extreme_guess_counts(s, y, splits, seed, centre)]
    tried = []
    best = {"epsilon": 0.0}
    for rule, lvl, (kp, km, r, v) in entries:
        eps, p = one_run_epsilon(m, r, v, float(delta), lvl)
        row = {"rule": rule, "k_plus": kp, "k_minus": km, "r": r, "correct": v, "epsilon": eps, "level": lvl}
        tried.append(row)
        if eps > best["epsilon"]:
            best = dict(row, p_value=p)
    ceiling = one_run_ceiling(m, max(kp + km for kp, km in grid), float(delta), level)
    split_ceilings = [one_run_ceiling(m, r, float(delta), split_level) for r in splits]
    ceiling = max([ceiling, *split_ceilings])
    details = {
        "canaries": m,
        "included": int(y.sum()),
        "grid_size": len(entries),
        "level_per_test": level,
        "multiple_testing": f"Bonferroni over {len(grid)} (k_plus, k_minus) pairs"
        + (
            f" (each at beta*{grid_share:.4g}) and {len(splits)} split-rule counts (each at beta*{split_share:.4g})"
            if splits
            else f": each tested at beta/{len(grid)}"
        ),
        "split_threshold": centre,
        "chosen": best if best["epsilon"] > 0 else None,
        "tried": tried,
        "hit_search_cap": bool(best["epsilon"] >= EPSILON_SEARCH_MAX),
        "max_possible": ceiling,
        "split_ceilings": split_ceilings,
        "method": "Steinke, Nasr & Jagielski 2023, (eps, delta) guess-count test with abstention",
    }
    return EpsilonEstimate(
        "one-run", float(best["epsilon"]), float(confidence), float(delta), details, ONE_RUN_ASSUMPTIONS
    )


# --------------------------------------------------------------------------- f-DP one-run


#: Trade-off families the f-DP one-run test can be run against, and the estimator each gives.
FDP_TRADEOFFS = {"epsilon-delta": "one-run-fdp", "gaussian": "one-run-fdp-gaussian"}

#: μ beyond which the search for the f-DP Gaussian bound stops (a μ_LB this large says "no privacy").
MU_SEARCH_MAX = 50.0

_FDP_GAME = (
    "Valid (Mahloujifar, Melis & Chaudhuri 2024) under the same game as the one-run estimator: every "
    "canary's inclusion is an independent fair coin drawn before training, the rest of the training data "
    "and the attack are fixed independently of the coins, and the scores come from the released output(s) "
    "only; each canary is one unit of the privacy guarantee. The guess counts are a pre-registered grid, "
    "each tested at its pre-registered share of beta (weighted Bonferroni); which canaries are guessed, and "
    "whether 'in' or 'out', is a function of the scores alone. "
)
FDP_ASSUMPTIONS = _FDP_GAME + (
    "The test is against the (epsilon, delta) trade-off curve itself, so a rejection certifies that the "
    "mechanism is not (epsilon, delta)-DP, whatever its trade-off curve. Loose because a one-run audit with m "
    "canaries only sees false-positive rates of order 1/m, where the likelihood ratio of a mechanism that is "
    "(epsilon, delta)-DP only at tiny delta (Gaussian-like) is far below e^epsilon."
)
FDP_GAUSSIAN_ASSUMPTIONS = _FDP_GAME + (
    "Certified: the mechanism is not mu-GDP for any mu below details['mu_lower_bound'] (a rejected mu-GDP "
    "claim is refuted whatever the mechanism). The epsilon reported is the epsilon at delta of a "
    "mu_lower_bound-GDP mechanism: a lower bound on the mechanism's own epsilon only if its trade-off curve is "
    "Gaussian (Gaussian mechanism, full-batch DP-GD); for other curves (subsampled DP-SGD, randomized response) "
    "it is an ESTIMATE that can over-state epsilon, like the gdp estimator."
)


def fdp_one_run_lower_bound(
    scores,
    included,
    *,
    delta: float,
    confidence: float = 0.95,
    tradeoff: str = "epsilon-delta",
    guesses=None,
    split=None,
    seed: int = 0,
) -> EpsilonEstimate:
    r"""f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2024, *Auditing f-Differential Privacy
    in One Run*, Algorithm 3: the audit with abstention; :mod:`dpaudit.auditing.fdp_one_run`).

    Same game as :func:`one_run_lower_bound`; every entry of ``guesses`` (default
    :func:`fdp_guess_grid`) and of ``split`` (default :func:`split_guess_grid` when ``guesses`` is
    the default too, else none) is tested at its share of β (weighted Bonferroni as in
    :func:`one_run_lower_bound`: :data:`SPLIT_SHARE` for the split entries when both are run) and
    the maximum is reported. An entry of ``guesses`` is a guess count r, guessed by the extremes
    rule (:func:`_extreme_guess_counts`: the r scores farthest from the median, "in" above it,
    "out" below; the split comes from the scores, so it needs no share of β), or a fixed (k₊, k₋)
    pair (the k₊ highest "in", the k₋ lowest "out"); an entry of ``split`` is a guess count r of
    the same extremes rule around the two-cluster split :func:`two_cluster_split` instead of the
    median, so a perfect ranking guesses every canary right whatever number of them the coins
    included. Their theorem holds for any guesser that reads only the output and makes a number
    of guesses fixed in advance; only that number has to be pre-registered. The test of each entry
    is their recursive bound on P[V ≥ v] for an f-DP mechanism instead of Steinke et al.'s
    binomial bound, with f from ``tradeoff``:

    * ``"epsilon-delta"`` (estimator ``one-run-fdp``): f = f_{ε,δ}; ε_LB is the largest ε whose
      (ε, δ) curve is rejected — a certified lower bound on ε at δ for every mechanism;
    * ``"gaussian"`` (estimator ``one-run-fdp-gaussian``): f = G_μ; μ_LB (``details``) is the
      largest μ rejected — certified: the mechanism is not μ-GDP for μ < μ_LB — and ε is the
      exact ε at δ of a μ_LB-GDP mechanism (:func:`dpaudit.accounting.gaussian_epsilon`), a
      bound on the mechanism's ε only if its curve is Gaussian: an **estimate** otherwise.

    Where it is loose: as for the one-run test, abstention keeps only the guess counts; the
    recursion bounds the tail through first moments, so it is sensitive to β (the Gaussian
    mechanism below: one count at β = 0.05 certifies ε ≈ 2.3 where β = 0.01 gives 1.9), which
    is why the grid is short; and m canaries see false-positive rates ≥ ~1/m: for the Gaussian
    mechanism at ε = 4, δ = 1e-5 (μ = 0.92) the likelihood ratio there is ≈ e^2, so no (ε, δ)
    bound from 1000 canaries gets near 4; the Gaussian curve extrapolates from the same counts.

    Args:
        scores: [m] attack scores, higher = "more likely included".
        included: [m] bool fair coins.
        delta: δ of the audited claim (the (ε, δ) curve's δ; the δ at which μ_LB is converted).
        confidence: 1 − β.
        tradeoff: ``"epsilon-delta"`` or ``"gaussian"``.
        guesses: iterable of guess counts r (extremes rule) and/or (k_plus, k_minus) pairs
            (default :func:`fdp_guess_grid`).
        split: guess counts r (1..m) of the two-cluster split rule; ``()``: none.
        seed: tie-breaking seed.

    Returns:
        The :class:`EpsilonEstimate` (``details["tried"]``: every entry with its rule and level;
        ``details["split_ceilings"]``: the bound were every guess of each split entry right).

    Raises:
        EstimatorInputError: invalid scores, coins, guesses or trade-off.

    Shapes:
        scores: [m] float; included: [m] bool; ``details["tried"]``: one row per grid entry.
    """
    s, y = _check_common(scores, included, delta, confidence)
    seed = _check_seed(seed)
    if tradeoff not in FDP_TRADEOFFS:
        raise EstimatorInputError(f"tradeoff must be one of {tuple(FDP_TRADEOFFS)}, got {tradeoff!r}")
    m, delta = s.size, float(delta)
    plan = _fdp_guess_plan(guesses, m)
    splits = _split_plan(split, m, default=guesses is None)
    beta = 1.0 - float(confidence)
    grid_share, split_share = _shares(len(plan), len(splits))
    level, split_level = beta * grid_share, beta * split_share
    centre = two_cluster_split(s) if splits else None
    counts = _fdp_guess_counts(s, y, plan, seed) + _extreme_guess_counts(s, y, splits, seed, centre)
    grid = plan + [("split", r) for r in splits]  # the entries, in order
    levels = [level] * len(plan) + [split_level] * len(splits)
    gaussian = tradeoff == "gaussian"
    if gaussian:
        inverse = fdp_one_run.gaussian_inverse
    else:
        inverse = fdp_one_run.epsilon_delta_inverse(delta)

    def search(r: np.ndarray, v: np.ndarray, lvl: float) -> np.ndarray:
        if gaussian:
            return fdp_one_run.fdp_gaussian_mu(m, r, v, lvl, MU_SEARCH_MAX)
        return fdp_one_run.fdp_epsilon(m, r, v, delta, lvl, EPSILON_SEARCH_MAX)

    values_parts, ceilings, split_ceilings = [], [], []
    for lo, hi, lvl in ((0, len(plan), level), (len(plan), len(counts), split_level)):
        if hi == lo:
            continue
        r = np.array([c[2] for c in counts[lo:hi]])
        v = np.array([c[3] for c in counts[lo:hi]])
        right = r if lo else r.max(keepdims=True)  # all guesses right: at r_max (grid), at every r (split)
        found = search(np.append(r, right), np.append(v, right), lvl)
        values_parts.append(found[: r.size])
        ceilings.append(float(found[r.size :].max()))
        if lo:
            split_ceilings = [float(x) for x in found[r.size :]]
    values, ceiling = np.concatenate(values_parts), max(ceilings)
    r = np.array([c[2] for c in counts])
    v = np.array([c[3] for c in counts])

    def as_epsilon(value: float) -> float:
        if not gaussian or value <= 0:
            return float(value)
        return min(gaussian_epsilon(value, delta), EPSILON_SEARCH_MAX) if delta > 0 else EPSILON_SEARCH_MAX

    parameter = "mu" if gaussian else "epsilon"
    tried = []
    for entry, (kp, km, rr, vv), value, lvl in zip(grid, counts, values, levels):
        if isinstance(entry, tuple):
            rule = "two-cluster split" if entry[0] == "split" else "top/bottom ranks"
        else:
            rule = "extremes"
        row = {"rule": rule, "k_plus": kp, "k_minus": km, "r": rr, "correct": vv, "epsilon": as_epsilon(float(value))}
        row["level"] = lvl
        if gaussian:
            row["mu"] = float(value)
        tried.append(row)
    i = int(np.argmax(values))
    best = float(values[i])
    chosen = None
    if best > 0:
        p = fdp_one_run.implied_p_value(m, int(r[i]), int(v[i]), inverse, best)
        chosen = dict(tried[i], p_value=p)
    details = {
        "canaries": m,
        "included": int(y.sum()),
        "tradeoff": tradeoff,
        "grid_size": len(grid),
        "level_per_test": level,
        "multiple_testing": f"Bonferroni over {len(plan)} guess counts"
        + (
            f" (each at beta*{grid_share:.4g}) and {len(splits)} split-rule counts (each at beta*{split_share:.4g})"
            if splits
            else f": each tested at beta/{len(plan)}"
        ),
        "split_threshold": centre,
        "chosen": chosen,
        "tried": tried,
        "hit_search_cap": bool(best >= (MU_SEARCH_MAX if gaussian else EPSILON_SEARCH_MAX)),
        "max_possible": as_epsilon(ceiling),
        "split_ceilings": [as_epsilon(x) for x in split_ceilings],
        "method": f"Mahloujifar, Melis & Chaudhuri 2024, f-DP guess-count test with abstention against the "
        f"{'mu-GDP' if gaussian else '(epsilon, delta)'} trade-off curve; {parameter} found by bisection "
        "(rejection is monotone in it)",
    }
    if gaussian:
        details["mu_lower_bound"] = best
        details["max_possible_mu"] = ceiling
        details["epsilon_from_mu"] = (
            "exact GDP curve at delta (Dong, Roth & Su 2019)"
            if delta > 0
            else ("delta = 0: a mu-GDP mechanism with mu > 0 is not epsilon-DP for any finite epsilon (capped)")
        )
    return EpsilonEstimate(
        FDP_TRADEOFFS[tradeoff],
        as_epsilon(best),
        float(confidence),
        delta,
        details,
        FDP_GAUSSIAN_ASSUMPTIONS if gaussian else FDP_ASSUMPTIONS,
    )


# --------------------------------------------------------------------------- multi-run


MULTI_RUN_ASSUMPTIONS = (
    "Valid (Jagielski, Ullman & Oprea 2020) when each run is an independent training whose canary "
    "inclusion is a fair coin drawn independently of everything else, so the (coin, score) pairs of "
    "different runs are i.i.d. trials; exactly one canary per run is used (several canaries of one run "
    "are not independent trials). The threshold is chosen on a random half of the runs and the bound "
    "evaluated on the other half (or a pre-registered threshold list is union-bounded). Loose because a "
    "single threshold test uses one point of the trade-off curve and Clopper-Pearson needs many runs to "
    "certify a small FPR: with n runs per class the bound cannot exceed about ln(n)."
)


def _one_per_run(runs: np.ndarray, per_run: str, seed: int) -> np.ndarray:
    """Indices keeping one score per run (or all, when every run has exactly one)."""
    counts = np.bincount(runs)
    if counts.max() == 1:
        return np.arange(runs.size)
    if per_run == "error":
        raise EstimatorInputError(
            f"multi-run needs independent trials: {int((counts > 1).sum())} runs have several canaries "
            f"(up to {int(counts.max())}); canaries of one run are not independent. Use one canary per run, "
            "per_run='sample' (one canary per run drawn at random, independent of scores and coins), or the "
            "one-run estimator for pooled canaries"
        )
    rng = np.random.default_rng(seed)
    key = rng.random(runs.size)
    order = np.lexsort((key, runs))
    first = np.ones(order.size, dtype=bool)
    first[1:] = runs[order][1:] != runs[order][:-1]
    return np.sort(order[first])


def multi_run_lower_bound(
    scores,
    included,
    *,
    delta: float,
    confidence: float = 0.95,
    run_ids=None,
    thresholds=None,
    per_run: str = "error",
    seed: int = 0,
    max_candidates: int = 2000,
) -> EpsilonEstimate:
    r"""Multi-run ε lower bound (Jagielski, Ullman & Oprea 2020, Clopper–Pearson).

    Theorem: for an (ε, δ)-DP mechanism every test "score ≥ t" between neighbouring inputs
    satisfies FPR·e^ε + FNR ≥ 1 − δ and FNR·e^ε + FPR ≥ 1 − δ (Kairouz, Oh & Viswanath 2015),
    so ε ≥ ln((1 − δ − FNR)/FPR) and ε ≥ ln((1 − δ − FPR)/FNR). With k independent runs the
    false-positive and false-negative counts at a fixed t are binomial; replacing FPR and FNR by
    one-sided Clopper–Pearson upper bounds, each at α/2, makes both forms hold jointly at 1 − α.

    Threshold choice. A threshold chosen from the same runs would bias the binomials, so
    either ``thresholds`` is a pre-registered list (each tested at α/|list|, Bonferroni, the
    maximum reported) or, by default, the runs are split at random (stratified by coin, seed
    ``seed``) into a selection half — every score there is a candidate threshold; the
    (threshold, form) with the largest bound there, computed at the stricter level
    α·:data:`SELECTION_LEVEL_FACTOR` to favour thresholds with enough counts, wins — and an
    evaluation half on which the bound is computed once at α.

    Independence. Trials are runs: every run id must carry exactly one score. Several canaries
    of one run are *not* independent trials and are refused unless ``per_run="sample"``, which
    keeps one canary per run drawn at random (seeded; independent of scores and coins). Pool
    many canaries per run with :func:`one_run_lower_bound` instead.

    Where it is loose: one point of the trade-off curve; CP needs ≈ e^ε / (1 − FNR) out-runs
    per false positive, so ε_LB ≤ ln(n_out) roughly; the split halves the data.

    Args:
        scores: [n] one score per run (or several with ``per_run="sample"``).
        included: [n] bool coins.
        run_ids: [n] run label of each score; required, with > 1 distinct run.
        thresholds: optional pre-registered thresholds ("score ≥ t" guesses "included").
        per_run: "error" (default) or "sample".
        seed: seed of the split (and of the per-run sampling).
        max_candidates: at most this many candidate thresholds on the selection half.

    Shapes:
        scores, included, run_ids: [n] each (n scores from R ≥ 2 runs).
    """
    s, y = _check_common(scores, included, delta, confidence)
    seed = _check_seed(seed)
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, (int, np.integer)) or max_candidates < 2:
        raise EstimatorInputError(f"max_candidates must be an integer >= 2, got {max_candidates!r}")
    if run_ids is None:
        raise EstimatorInputError("multi-run needs run_ids (which independent training run produced each score)")
    if per_run not in MULTI_RUN_PER_RUN:
        raise EstimatorInputError(f"per_run must be one of {MULTI_RUN_PER_RUN}, got {per_run!r}")
    runs = _check_runs(run_ids, s.size)
    n_runs = int(runs.max()) + 1
    if n_runs < 2:
        raise EstimatorInputError("multi-run needs more than one training run (run_ids has a single value)")
    keep = _one_per_run(runs, per_run, seed)
    s, y = s[keep], y[keep]
    pos, neg = s[y], s[~y]
    alpha = 1.0 - float(confidence)
    delta = float(delta)
    details: dict[str, Any] = {"runs": n_runs, "trials": int(s.size), "included": int(y.sum()), "per_run": per_run}
    if thresholds is not None:
        t = _float_list("thresholds", thresholds)
        if pos.size == 0 or neg.size == 0:
            raise EstimatorInputError("multi-run needs runs with the canary included and runs without")
        level = level_used = alpha / t.size
        eps_a, eps_b, tp, fp, fpr_ub, fnr_ub = clopper_pearson_epsilon(pos, neg, t, delta, level)
        both = np.maximum(eps_a, eps_b)
        i = int(np.argmax(both))
        value = float(both[i])
        details.update(
            {
                "mode": "pre-registered thresholds",
                "multiple_testing": f"Bonferroni over {t.size} thresholds; two CP bounds at level/2 each",
                "threshold": float(t[i]),
                "form": "fpr" if eps_a[i] >= eps_b[i] else "fnr",
                "tp": int(tp[i]),
                "fp": int(fp[i]),
                "members": int(pos.size),
                "non_members": int(neg.size),
                "fpr_ub": float(fpr_ub[i]),
                "fnr_ub": float(fnr_ub[i]),
                "thresholds_tried": int(t.size),
            }
        )
    else:
        level_used = alpha
        rng = np.random.default_rng(seed + 1)
        pidx, nidx = rng.permutation(np.flatnonzero(y)), rng.permutation(np.flatnonzero(~y))
        if pidx.size < 2 or nidx.size < 2:
            raise EstimatorInputError("multi-run with a split needs >= 2 runs with the canary and >= 2 without")
        sel_p, ev_p = pidx[: pidx.size // 2], pidx[pidx.size // 2 :]
        sel_n, ev_n = nidx[: nidx.size // 2], nidx[nidx.size // 2 :]
        cand = np.unique(s[np.concatenate([sel_p, sel_n])])
        if cand.size > max_candidates:
            cand = np.unique(np.quantile(cand, np.linspace(0.0, 1.0, max_candidates)))
        # A 100x stricter level on the selection half favours thresholds with more counts, which
        # shrinks the winner's curse of picking the maximum of many noisy candidates (measured on
        # Gaussian scores: median evaluation bound 2.12 -> 2.20 with 1e5 runs, minimum 1.70 -> 1.98).
        sa, sb, *_ = clopper_pearson_epsilon(s[sel_p], s[sel_n], cand, delta, alpha * SELECTION_LEVEL_FACTOR)
        ia, ib = int(np.argmax(sa)), int(np.argmax(sb))
        form, thr = ("fpr", float(cand[ia])) if sa[ia] >= sb[ib] else ("fnr", float(cand[ib]))
        ea, eb, tp, fp, fpr_ub, fnr_ub = clopper_pearson_epsilon(s[ev_p], s[ev_n], np.array([thr]), delta, alpha)
        value = float(ea[0] if form == "fpr" else eb[0])
        details.update(
            {
                "mode": "held-out threshold",
                "multiple_testing": "threshold and form chosen on a random half of the runs; one test on the other "
                "half, two CP bounds at alpha/2 each",
                "threshold": thr,
                "form": form,
                "selection_bound": float(max(sa[ia], sb[ib])),
                "tp": int(tp[0]),
                "fp": int(fp[0]),
                "members": int(ev_p.size),
                "non_members": int(ev_n.size),
                "fpr_ub": float(fpr_ub[0]),
                "fnr_ub": float(fnr_ub[0]),
                "candidates": int(cand.size),
            }
        )
    eps = max(0.0, value) if math.isfinite(value) else 0.0
    n_in, n_out = details["members"], details["non_members"]
    perfect = clopper_pearson_epsilon(np.ones(n_in), np.zeros(n_out), np.array([0.5]), delta, level_used)[0][0]
    details["max_possible"] = float(max(0.0, perfect)) if math.isfinite(perfect) else 0.0
    details["method"] = "Jagielski, Ullman & Oprea 2020: Clopper-Pearson on FPR/FNR of independent runs"
    return EpsilonEstimate("multi-run", eps, float(confidence), delta, details, MULTI_RUN_ASSUMPTIONS)


# --------------------------------------------------------------------------- GDP estimate


def _gdp_ceiling(n_in: int, n_out: int, level: float, delta: float) -> float:
    """The GDP estimate of a perfect attack (TP = n_in, FP = 0) at the same per-test level."""
    mu = float(
        stats.norm.ppf(clopper_pearson_lower(n_in, n_in, level))
        - stats.norm.ppf(clopper_pearson_upper(0, n_out, level))
    )
    if not mu > 0:
        return 0.0
    return min(gaussian_epsilon(mu, delta), EPSILON_SEARCH_MAX) if delta > 0 else EPSILON_SEARCH_MAX


GDP_ASSUMPTIONS = (
    "An ESTIMATE, not a certificate: it assumes the mechanism's trade-off curve is Gaussian-shaped "
    "(mu-GDP, Dong, Roth & Su 2019), as for the Gaussian mechanism and, approximately, DP-SGD; then "
    "mu >= Phi^-1(TPR) - Phi^-1(FPR) at every threshold and the Clopper-Pearson bounds make mu_LB a lower "
    "confidence bound on mu, converted to epsilon at delta by the exact GDP curve. For a mechanism whose "
    "curve is not Gaussian (e.g. randomized response, Laplace) the conversion can over- or under-state "
    "epsilon. Canary outcomes are treated as independent trials (exact for one canary per independent run; "
    "an approximation for many canaries of one run) and the thresholds are label-free quantiles of the "
    "pooled scores, union-bounded but themselves data-dependent."
)


def gdp_estimate(
    scores,
    included,
    *,
    delta: float,
    confidence: float = 0.95,
    thresholds=None,
    quantiles=None,
) -> EpsilonEstimate:
    r"""GDP (f-DP) ε estimate (Nasr et al. 2023 style; Dong, Roth & Su 2019).

    Theorem: a μ-GDP mechanism has trade-off curve G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), so every test
    satisfies TPR ≤ Φ(Φ⁻¹(FPR) + μ), i.e. μ ≥ Φ⁻¹(TPR) − Φ⁻¹(FPR). With one-sided
    Clopper–Pearson bounds TPR_lb and FPR_ub at α/(2T) each over T thresholds (Bonferroni),

    .. math::
        \mu_{LB} = \max_t \; \Phi^{-1}(\mathrm{TPR}_{lb}(t)) - \Phi^{-1}(\mathrm{FPR}_{ub}(t)),

    and ε is read off the exact GDP curve δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)
    (:func:`dpaudit.accounting.gaussian_epsilon`) at μ_LB.

    This is an **estimate**: the step "mechanism is μ-GDP for some μ" is an assumption about
    the shape of the trade-off curve, not something the data certify. It can be badly wrong
    for other shapes: ε = 2 randomized response over 4000 canaries gives a GDP "estimate"
    ≈ 11 (its one ROC corner maps to a large μ) while the one-run bound is 1.7–1.9 (tests).

    Where it is loose or optimistic: the best single threshold is used (no curve fit);
    thresholds default to nine label-free quantiles (10 %..90 %) of the pooled scores, which
    are data-dependent; and the many canaries of one run are treated as independent trials.

    Args:
        scores: [n] scores; included: [n] bool coins.
        thresholds: optional pre-registered thresholds (replace the quantiles).
        quantiles: quantile levels of the pooled scores used as thresholds (default 0.1..0.9).

    Shapes:
        scores: [n] float; included: [n] bool; thresholds / quantiles: [T].
    """
    s, y = _check_common(scores, included, delta, confidence)
    pos, neg = s[y], s[~y]
    if pos.size == 0 or neg.size == 0:
        raise EstimatorInputError("the GDP estimate needs canaries with both coin values")
    if thresholds is not None:
        t = _float_list("thresholds", thresholds)
        mode = "pre-registered thresholds"
    else:
        qs = np.linspace(0.1, 0.9, 9) if quantiles is None else _float_list("quantiles", quantiles)
        if not ((qs > 0) & (qs < 1)).all():
            raise EstimatorInputError("quantiles must be a non-empty list of levels in (0, 1)")
        t = np.unique(np.quantile(s, qs))  # tied scores can repeat a quantile: test it once
        mode = "quantiles of pooled scores"
    alpha = 1.0 - float(confidence)
    level = alpha / (2.0 * t.size)
    tp, fp = threshold_counts(pos, neg, t)
    tpr_lb = clopper_pearson_lower(tp, pos.size, level)
    fpr_ub = clopper_pearson_upper(fp, neg.size, level)
    with np.errstate(divide="ignore"):
        mus = stats.norm.ppf(tpr_lb) - stats.norm.ppf(fpr_ub)
    mus = np.where(np.isfinite(mus), mus, -np.inf)
    i = int(np.argmax(mus))
    mu_lb = float(max(mus[i], 0.0))
    tpr, fpr = tp[i] / pos.size, fp[i] / neg.size
    with np.errstate(divide="ignore", invalid="ignore"):
        mu_point = float(stats.norm.ppf(tpr) - stats.norm.ppf(fpr))
    capped = False
    if mu_lb <= 0:
        eps = 0.0
    elif delta > 0:
        eps = min(gaussian_epsilon(mu_lb, float(delta)), EPSILON_SEARCH_MAX)
        capped = eps >= EPSILON_SEARCH_MAX
    else:  # δ = 0: a μ-GDP mechanism with μ > 0 is not ε-DP for any finite ε
        eps, capped = EPSILON_SEARCH_MAX, True
    details = {
        "mu_lower_bound": mu_lb,
        "mu_point_at_threshold": mu_point if math.isfinite(mu_point) else None,
        "threshold": float(t[i]),
        "tpr": float(tpr),
        "fpr": float(fpr),
        "tpr_lb": float(tpr_lb[i]),
        "fpr_ub": float(fpr_ub[i]),
        "members": int(pos.size),
        "non_members": int(neg.size),
        "thresholds_tried": int(t.size),
        "mode": mode,
        "capped_at": EPSILON_SEARCH_MAX if capped else None,
        "max_possible": _gdp_ceiling(pos.size, neg.size, level, float(delta)),
        "multiple_testing": f"Bonferroni over {t.size} thresholds x 2 binomial bounds (each at alpha/{2 * t.size})",
        "method": "estimate: mu-GDP lower confidence bound from the empirical trade-off curve, exact GDP "
        "conversion (Dong, Roth & Su 2019)",
    }
    return EpsilonEstimate("gdp", float(eps), float(confidence), float(delta), details, GDP_ASSUMPTIONS)


# --------------------------------------------------------------------------- all together


def audit_epsilon(
    scores,
    included,
    *,
    delta: float,
    confidence: float = 0.95,
    run_ids=None,
    estimators=None,
    claimed_epsilon: float | None = None,
    seed: int = 0,
    per_run: str = "error",
    standardize: bool = False,
    claimed_mu: float | None = None,
) -> dict:
    """Run several estimators with a Bonferroni split and report each and the maximum.

    Each of the k estimators run — certified bounds and estimates alike — runs at confidence
    1 − (1 − c)/k, so all their statements (each estimate's certified μ included) hold jointly
    at c, and ``certified_epsilon_lower_bound``, the maximum over the rigorous estimators
    (:data:`RIGOROUS_ESTIMATORS`: one-run, one-run-fdp, multi-run), is valid at c. The
    estimates (:data:`ESTIMATE_ESTIMATORS`) assume a Gaussian-shaped trade-off curve; "overall"
    (the maximum of everything) and ``estimate_exceeds_claim`` include them, ``claim_refuted``
    (when ``claimed_epsilon`` is given) uses only the certified maximum (and the certified μ,
    against ``claimed_mu``).

    ``estimators=None`` (default) uses every estimator the data support: one-run, one-run-fdp,
    one-run-fdp-gaussian and gdp always, multi-run when ``run_ids`` names > 1 run and each run
    has one score (or ``per_run="sample"``); the skipped ones are listed with the reason. An
    explicit tuple must be applicable, else :class:`EstimatorInputError`.

    ``claimed_mu`` is the μ of a μ-GDP guarantee the audited claim also states (an exact
    Gaussian mechanism's :attr:`dpaudit.accounting.PrivacySpec.gdp_mu`, at the canary's unit).
    one-run-fdp-gaussian certifies μ for every mechanism, so μ_LB > ``claimed_mu`` refutes that
    claim (``mu_claim_refuted``) and counts in ``claim_refuted``. It needs one-run-fdp-gaussian
    among the estimators run.

    ``standardize=True`` (needs ``run_ids``) first replaces each score by its per-run robust
    z-score (:func:`standardize_per_run`) — label-free, so the bounds stay valid; it helps when
    canaries of several trainings are pooled and the models' score scales differ.

    Shapes:
        scores: [n]; included: [n] bool; run_ids: [n] or None.

    Returns a JSON-able dict: ``estimates`` {name: EpsilonEstimate.to_dict()},
    ``epsilon_lower_bound`` {name: x, "overall": max}, ``certified_epsilon_lower_bound``,
    ``confidence``, ``delta``, ``multiple_testing``, ``skipped``, ``max_possible`` {name: the
    most this estimator could report on this many canaries/runs, for any attack} and, with a claim,
    ``claimed_epsilon``, ``claim_refuted``, ``estimate_exceeds_claim`` and ``can_refute_claim``
    (whether a certified estimator's ``max_possible`` exceeds the claim at all: when it is
    False the audit had no power to refute the claim, whatever the attack); with ``claimed_mu``
    also ``claimed_mu``, ``certified_mu_lower_bound`` and ``mu_claim_refuted``.

    Args:
        scores: canary scores, higher meaning "included".
        included: the canaries' coins.
        delta: δ at which ε is bounded.
        confidence: joint confidence c.
        run_ids: run index of each canary, or ``None``.
        estimators: names to run, or ``None`` for every applicable one.
        claimed_epsilon: the claimed ε, or ``None``.
        seed: seed of the estimators' own randomness (multi-run sampling).
        per_run: ``"error"`` or ``"sample"``: what multi-run does with several scores per run.
        standardize: standardize scores per run first.
        claimed_mu: the claimed μ, or ``None``.

    Raises:
        EstimatorInputError: invalid scores, coins, run ids, parameters or an inapplicable estimator.
    """
    s, y = _check_common(scores, included, delta, confidence)
    seed = _check_seed(seed)
    runs = _check_runs(run_ids, s.size)
    if standardize:
        if runs is None:
            raise EstimatorInputError("standardize=True needs run_ids (scores are standardized within each run)")
        s = standardize_per_run(s, run_ids)
    chosen, skipped = _chosen_estimators(estimators, runs, per_run)
    _check_claims(claimed_epsilon, claimed_mu, chosen)
    k = len(chosen)
    each = bonferroni_confidence(confidence, k)
    results = _run_estimators(chosen, s, y, delta, each, run_ids, per_run, seed)
    bounds = {name: float(est.epsilon_lower_bound) for name, est in results.items()}
    log.debug(
        "audit_epsilon: %d scores, delta=%g, each estimator at %.6g: %s (skipped: %s)",
        s.size,
        delta,
        each,
        bounds,
        skipped,
    )
    certified = max([bounds[n] for n in bounds if n in RIGOROUS_ESTIMATORS], default=0.0)
    out = {
        "estimates": {name: est.to_dict() for name, est in results.items()},
        "epsilon_lower_bound": dict(bounds, overall=max(bounds.values())),
        "certified_epsilon_lower_bound": certified,
        "confidence": float(confidence),
        "confidence_per_estimator": each,
        "delta": float(delta),
        "multiple_testing": f"Bonferroni over the k = {k} estimators run ({', '.join(chosen)}): each at "
        f"1-(1-c)/k = {each:.6g}",
        "skipped": skipped,
        "standardized_per_run": bool(standardize),
        "max_possible": {name: est.details.get("max_possible") for name, est in results.items()},
    }
    out.update(_claim_tests(results, out["epsilon_lower_bound"]["overall"], certified, claimed_epsilon, claimed_mu))
    return out


def _chosen_estimators(estimators, runs, per_run: str) -> tuple[list[str], dict[str, str]]:
    """The estimators :func:`audit_epsilon` runs — ``estimators`` checked, or by default every one the
    data support — and those skipped, each with the reason."""
    skipped: dict[str, str] = {}
    if estimators is None:
        chosen = ["one-run", "one-run-fdp", "one-run-fdp-gaussian"]
        if runs is None:
            skipped["multi-run"] = "no run_ids"
        elif int(runs.max()) + 1 < 2:
            skipped["multi-run"] = "a single training run"
        elif np.bincount(runs).max() > 1 and per_run == "error":
            skipped["multi-run"] = "several canaries per run (not independent trials); pass per_run='sample'"
        else:
            chosen.append("multi-run")
        chosen.append("gdp")
        return chosen, skipped
    if isinstance(estimators, str):
        estimators = (estimators,)
    chosen = list(dict.fromkeys(estimators))
    unknown = [e for e in chosen if e not in ESTIMATORS]
    if unknown or not chosen:
        raise EstimatorInputError(f"estimators must be a non-empty subset of {ESTIMATORS}, got {estimators!r}")
    return chosen, skipped


def _check_claims(claimed_epsilon, claimed_mu, chosen: list[str]) -> None:
    """Refuse a claimed ε or μ that is not a finite number >= 0, or a μ without the estimator that tests it."""
    if claimed_epsilon is not None and not (float(claimed_epsilon) >= 0 and math.isfinite(float(claimed_epsilon))):
        raise EstimatorInputError(f"claimed_epsilon must be a finite number >= 0, got {claimed_epsilon}")
    if claimed_mu is not None:
        if (
            isinstance(claimed_mu, bool)
            or not isinstance(claimed_mu, (int, float, np.floating, np.integer))
            or not (0.0 <= float(claimed_mu) < math.inf)
        ):
            raise EstimatorInputError(f"claimed_mu must be a finite number >= 0, got {claimed_mu!r}")
        if "one-run-fdp-gaussian" not in chosen:
            raise EstimatorInputError("claimed_mu is tested by one-run-fdp-gaussian: include it in estimators")


def _run_estimators(
    chosen: list[str], s, y, delta: float, each: float, run_ids, per_run: str, seed: int
) -> dict[str, EpsilonEstimate]:
    """Each of ``chosen`` on the (score, inclusion) pairs at confidence ``each``."""
    results: dict[str, EpsilonEstimate] = {}
    for name in chosen:
        if name == "one-run":
            results[name] = one_run_lower_bound(s, y, delta=delta, confidence=each, seed=seed)
        elif name in ("one-run-fdp", "one-run-fdp-gaussian"):
            tradeoff = "gaussian" if name == "one-run-fdp-gaussian" else "epsilon-delta"
            results[name] = fdp_one_run_lower_bound(s, y, delta=delta, confidence=each, tradeoff=tradeoff, seed=seed)
        elif name == "multi-run":
            results[name] = multi_run_lower_bound(
                s, y, delta=delta, confidence=each, run_ids=run_ids, per_run=per_run, seed=seed
            )
        else:
            results[name] = gdp_estimate(s, y, delta=delta, confidence=each)
    return results


def _claim_tests(
    results: dict[str, EpsilonEstimate], overall: float, certified: float, claimed_epsilon, claimed_mu
) -> dict:
    """The claims tested: the certified μ against ``claimed_mu``; the certified ε (refutes) and the
    overall maximum (estimate exceeds) against ``claimed_epsilon``, and whether a certified estimator
    could exceed it at all (``can_refute_claim``)."""
    out: dict = {}
    mu_refuted = False
    if claimed_mu is not None:
        gaussian = results["one-run-fdp-gaussian"].details
        mu_refuted = bool(gaussian["mu_lower_bound"] > float(claimed_mu))
        out.update(
            claimed_mu=float(claimed_mu),
            certified_mu_lower_bound=gaussian["mu_lower_bound"],
            mu_claim_refuted=mu_refuted,
        )
    if claimed_epsilon is not None:
        out["claimed_epsilon"] = float(claimed_epsilon)
        out["claim_refuted"] = bool(certified > float(claimed_epsilon)) or mu_refuted
        out["estimate_exceeds_claim"] = bool(overall > float(claimed_epsilon))
        ceilings = [results[n].details["max_possible"] for n in results if n in RIGOROUS_ESTIMATORS]
        out["can_refute_claim"] = bool(max(ceilings, default=0.0) > float(claimed_epsilon)) or (
            claimed_mu is not None and results["one-run-fdp-gaussian"].details["max_possible_mu"] > float(claimed_mu)
        )
    elif claimed_mu is not None:
        out["claim_refuted"] = mu_refuted
    return out
