"""An audit's power before it runs: the largest ε a canary audit of this size could certify
for *any* attack, and how many canaries a claim needs.

>>> power = audit_power(200, delta=1e-5, claimed_epsilon=1.0)     # doctest: +SKIP
>>> power["certifiable_epsilon"], power["can_refute_claim"]         # doctest: +SKIP
(3.29..., True)

The numbers are the estimators' own ceilings (``max_possible`` of
:func:`dpaudit.auditing.estimators.audit_epsilon`, one home): the audit is run on the scores of a
*perfect* attack — every included canary scored 1, every excluded one 0 — with balanced coins,
the same runs and the same Bonferroni split as the real audit, and the certified estimators'
(:data:`~dpaudit.auditing.estimators.RIGOROUS_ESTIMATORS`) ceilings are read off. Nothing here
depends on a model or on the coins a run will draw: it is a property of the audit's size, δ and
confidence. When the certifiable maximum is at most the claim, no attack can refute the claim
at this size and "consistent with the claim" is no evidence.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.special import ndtr, ndtri

from dpaudit.auditing.estimators import RIGOROUS_ESTIMATORS, audit_epsilon, one_run_epsilon
from dpaudit.errors import ConfigurationError

#: :func:`canaries_needed` looks no further than this many canaries per run
MAX_PLANNED_CANARIES = 10_000


def audit_power(
    canaries: int, *, runs: int = 1, delta: float, confidence: float = 0.95, claimed_epsilon: float | None = None
) -> dict:
    """The ceilings of an audit with ``canaries`` per run pooled over ``runs`` runs (module docstring).

    Returns ``max_possible`` {estimator: ceiling}, ``certifiable_epsilon`` (the largest certified
    ceiling) and, with ``claimed_epsilon``, ``can_refute_claim``.

    Args:
        canaries: canaries per run (≥ 1).
        runs: number of runs (≥ 1).
        delta: δ of the claim.
        confidence: joint confidence.
        claimed_epsilon: the claimed ε, or ``None``.

    Raises:
        ConfigurationError: ``canaries`` or ``runs`` is not an integer ≥ 1.
    """
    for name, value in (("canaries", canaries), ("runs", runs)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigurationError(f"audit_power: {name} must be an integer >= 1, got {value!r}")
    coins = np.arange(canaries * runs) % 2 == 0  # balanced over all scores (one canary per run too)
    run_ids = np.repeat(np.arange(runs), canaries)
    # one score has one coin value: only the guess-count tests apply (as in the audit itself)
    estimators = ("one-run", "one-run-fdp", "one-run-fdp-gaussian") if coins.size == 1 else None
    audit = audit_epsilon(
        coins.astype(float), coins, delta=delta, confidence=confidence, run_ids=run_ids, estimators=estimators
    )
    ceilings = {name: value for name, value in audit["max_possible"].items() if value is not None}
    certifiable = max((v for name, v in ceilings.items() if name in RIGOROUS_ESTIMATORS), default=0.0)
    out = {
        "max_possible": ceilings,
        "certifiable_epsilon": float(certifiable),
        "confidence": float(confidence),
        "delta": float(delta),
    }
    if claimed_epsilon is not None:
        out["can_refute_claim"] = bool(certifiable > float(claimed_epsilon))
    return out


def canaries_needed(
    claimed_epsilon: float,
    *,
    runs: int = 1,
    delta: float,
    confidence: float = 0.95,
    start: int = 1,
    limit: int = MAX_PLANNED_CANARIES,
) -> int | None:
    """The fewest canaries per run (searched on a doubling grid above ``start``, a
    count known too small, then bisected to 10 %) whose
    :func:`audit_power` exceeds ``claimed_epsilon``; ``None`` when not even ``limit`` do (the δ
    term caps the one-run test: no count certifies much above ≈ 4-6 at δ = 1e-5).

    The ceiling is not exactly monotone in the count (the guess grid changes with it), so the
    answer is the first count found that suffices, checked by :func:`audit_power` itself.

    Args:
        claimed_epsilon: the claimed ε (finite, ≥ 0).
        runs: number of runs.
        delta: δ of the claim.
        confidence: joint confidence.
        start: a count known too small.
        limit: most canaries considered.

    Returns:
        Canaries per run, or ``None``.

    Raises:
        ConfigurationError: an invalid claim.
    """
    if not (isinstance(claimed_epsilon, (int, float)) and math.isfinite(claimed_epsilon) and claimed_epsilon >= 0):
        raise ConfigurationError(f"canaries_needed: the claim must be a finite ε >= 0, got {claimed_epsilon!r}")

    def enough(m: int) -> bool:
        return audit_power(m, runs=runs, delta=delta, confidence=confidence)["certifiable_epsilon"] > claimed_epsilon

    # doubling from the count at hand: a reachable claim costs a few small evaluations (checking
    # ``limit`` first cost ~50 s at 40 runs, 400,000 scores); ``limit`` is evaluated only when
    # the doubling reaches it
    low, high = max(0, int(start)), min(max(2, 2 * int(start)), limit)
    while not enough(high):
        if high >= limit:
            return None
        low, high = high, min(2 * high, limit)
    while high - low > max(1, high // 10):  # to 10 %: a plan, not a theorem
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


#: the coverage of :func:`perfect_attack_interval` (a central interval over the coin draws)
PREDICTION_COVERAGE = 0.9


def perfect_attack_interval(
    canaries: int, *, runs: int = 1, delta: float, confidence: float = 0.95, coverage: float = PREDICTION_COVERAGE
) -> dict:
    """What a perfect ranking certifies, over the coins the audit will draw and over where the
    score-chosen split of the one-run tests falls.

    Two things move the bound of a perfect ranking (every included canary scored above every
    excluded one):

    * the coins: N_in ~ Binomial(m, ½) canaries are included. The fixed balanced guess pairs make
      |N_in − m/2| wrong guesses at the full count; the two-cluster split rule
      (:func:`dpaudit.auditing.estimators.split_guess_grid`) does not, since its split comes from the
      scores. The certified bound of perfectly separated scores (two values) is computed at the
      quantiles of |N_in − m/2|: its median and the ends of a central ``coverage`` interval;
    * the split's location: on two-valued scores it falls in the gap, and every split count (all m
      canaries first) guesses all right. Real scores have tails: when the split falls inside a
      cluster, the canaries it misplaces lie nearest the split and only the counts that abstain
      on them are all right. The interval's low end is the bound when only the most-abstaining
      split count (80 % of the canaries) is all right (``details["split_ceilings"]`` of the
      certified estimators) — a perfect ranking whose split misplaces more than 20 % of the
      canaries certifies less, and an imperfect ranking less again.

    Args:
        canaries: canaries per run.
        runs: runs pooled.
        delta: δ of the audit.
        confidence: the audit's joint confidence.
        coverage: the interval's probability over the coin draws.

    Returns:
        ``{"median", "low", "high", "coverage"}``: certified ε of a perfect ranking at the
        median coin draw (the plan's prediction), the interval's ends (low: the lower coin
        quantile, or the most-abstaining split count if lower; high: the upper coin quantile).

    Raises:
        ConfigurationError: counts below 1 or a coverage outside (0, 1).
    """
    for name, value in (("canaries", canaries), ("runs", runs)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigurationError(f"perfect_attack_interval: {name} must be an integer >= 1, got {value!r}")
    if not 0 < coverage < 1:
        raise ConfigurationError(f"perfect_attack_interval: coverage must be in (0, 1), got {coverage!r}")
    m = canaries * runs
    run_ids = np.repeat(np.arange(runs), canaries)

    def audit(imbalance: int) -> dict:
        included = np.zeros(m, dtype=bool)
        included[: max(0, min(m, m // 2 - imbalance))] = True
        if included.all() or not included.any():
            estimators = ("one-run", "one-run-fdp", "one-run-fdp-gaussian")
        else:
            estimators = None
        return audit_epsilon(
            included.astype(float), included, delta=delta, confidence=confidence, run_ids=run_ids, estimators=estimators
        )

    def imbalance(q: float) -> int:  # the q-quantile of |N_in − m/2|
        return max(0, int(math.ceil(stats.binom.ppf(0.5 + q / 2, m, 0.5) - m / 2)))

    low_draw, median_draw, high_draw = (audit(imbalance(q)) for q in ((1 + coverage) / 2, 0.5, (1 - coverage) / 2))
    return {
        "median": float(median_draw["certified_epsilon_lower_bound"]),
        "low": split_floor(low_draw),
        "high": float(high_draw["certified_epsilon_lower_bound"]),
        "coverage": float(coverage),
    }


def split_floor(audit: dict) -> float:
    """The certified bound of a perfect ranking whose score-chosen split falls inside a cluster, so
    that only the two-cluster split rule's most-abstaining count (80 % of the canaries) guesses all
    right: the lower of ``audit``'s certified bound and the largest such count's ceiling over the
    certified estimators (their ``details["split_ceilings"]``).

    Args:
        audit: an :func:`~dpaudit.auditing.estimators.audit_epsilon` result on perfectly ranked scores.

    Returns:
        The certified ε.
    """
    floors = [
        min(est["details"]["split_ceilings"])
        for name, est in audit["estimates"].items()
        if name in RIGOROUS_ESTIMATORS and est["details"].get("split_ceilings")
    ]
    certified = float(audit["certified_epsilon_lower_bound"] or 0.0)
    return min(certified, max(floors)) if floors else certified


def fixed_grid_bound(audit: dict) -> float:
    """The certified bound of ``audit`` counting only the estimators' fixed grids — every guess entry
    but the two-cluster split rule's — the maximum over the certified estimators (from their
    ``details["tried"]``). On perfectly ranked scores: what a perfect ranking certifies without
    relying on the score-chosen split landing between the clusters, which on a few dozen canaries
    with a wide cluster it need not.

    Args:
        audit: an :func:`~dpaudit.auditing.estimators.audit_epsilon` result.

    Returns:
        The certified ε.
    """
    values = [
        row["epsilon"]
        for name, est in audit["estimates"].items()
        if name in RIGOROUS_ESTIMATORS
        for row in est["details"].get("tried", [])
        if row.get("rule") != "two-cluster split"
    ]
    return float(max(values, default=0.0))


def canaries_needed_typically(
    claimed_epsilon: float,
    *,
    runs: int = 1,
    delta: float,
    confidence: float = 0.95,
    start: int = 1,
    limit: int = MAX_PLANNED_CANARIES,
) -> int | None:
    """The fewest canaries per run (doubling from ``start``, then bisected to 10 %) for which a
    perfect ranking's certified bound at the median coin draw (:func:`perfect_attack_interval`)
    exceeds ``claimed_epsilon``; ``None`` when not even ``limit`` do."""

    def enough(m: int) -> bool:
        return perfect_attack_interval(m, runs=runs, delta=delta, confidence=confidence)["median"] > claimed_epsilon

    low, high = max(0, int(start)), min(max(2, 2 * int(start)), limit)
    while not enough(high):
        if high >= limit:
            return None
        low, high = high, min(2 * high, limit)
    while high - low > max(1, high // 10):
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


# ------------------------------------------------------------- the one-run limit of a Gaussian channel

#: the event counts the tightness table reads the ceiling at: one event, the rule of three (no false
#: positive among m_out certifies FPR ≤ 3/m_out at 95 %), ten
CEILING_EVENTS = (1, 3, 10)


def _check_ceiling(mu, canaries, min_events) -> None:
    if not (isinstance(mu, (int, float)) and math.isfinite(mu) and mu > 0):
        raise ConfigurationError(f"mu must be a positive number, got {mu!r}")
    if isinstance(canaries, bool) or not isinstance(canaries, (int, np.integer)) or canaries < 2:
        raise ConfigurationError(f"canaries must be an integer >= 2, got {canaries!r}")
    if not (isinstance(min_events, (int, float)) and min_events > 0):
        raise ConfigurationError(f"min_events must be a positive number, got {min_events!r}")


def gaussian_one_run_ceiling(mu: float, canaries: int, *, delta: float, min_events: float = 1) -> float:
    r"""The most a one-run ε lower bound valid for any mechanism can show from ``canaries`` Dirac
    canaries of a μ-GDP channel (half of them in, half out), even knowing the exact trade-off
    curve and at no cost of confidence: a bound valid for any mechanism reads the curve only where
    the run has events, at a false-positive rate α ≥ k/m_out (and a false-negative rate ≥ k/m_in),
    k = ``min_events``, so it is at most

    .. math::
        \max_{\alpha \ge k/m_\text{out}} \log\frac{\mathrm{TPR}(\alpha) - \delta}{\alpha},
        \qquad \mathrm{TPR}(\alpha) = \Phi(\Phi^{-1}(\alpha) + \mu)

    and the symmetric branch log((1 − δ − α)/FNR(α)), maximised on a log grid of α. The ratio
    grows as α falls (the Gaussian's likelihood ratio is unbounded), so the ceiling is set by the
    canary count; a certified bound also pays for its confidence, below it.

    Args:
        mu: the channel's μ (√T/σ for a full-batch DP-SGD canary).
        canaries: m, the canaries of the run (≥ 2).
        delta: δ of the bound.
        min_events: k, the fewest false positives (and false negatives) a rate is read from.

    Returns:
        The ceiling ε (≥ 0).

    Raises:
        ConfigurationError: a parameter out of range.
    """

    _check_ceiling(mu, canaries, min_events)
    m_out = int(canaries) // 2
    m_in = int(canaries) - m_out
    alpha = np.geomspace(min(0.5, float(min_events) / m_out), 0.5, 4001)
    tpr = ndtr(ndtri(alpha) + float(mu))
    fnr = ndtr(-ndtri(alpha) - float(mu))
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.log(np.maximum(tpr - delta, 0.0) / alpha)
        second = np.log(np.maximum(1.0 - alpha - delta, 0.0) / fnr)
    values = np.concatenate([first, second[fnr >= float(min_events) / m_in]])
    values = values[np.isfinite(values)]
    return float(max(0.0, values.max())) if values.size else 0.0


def canaries_for_ceiling(
    mu: float, target_epsilon: float, *, delta: float, min_events: float = 1, limit: int = 10**10
) -> int | None:
    """The fewest canaries (to 1 %) whose :func:`gaussian_one_run_ceiling` reaches ``target_epsilon``:
    how many one run needs before any estimator valid for any mechanism could show that much.

    Args:
        mu: the channel's μ.
        target_epsilon: the ε to reach (> 0).
        delta: δ of the bound.
        min_events: k (as :func:`gaussian_one_run_ceiling`).
        limit: the most canaries considered.

    Returns:
        Canaries, or ``None`` when not even ``limit`` reach it.

    Raises:
        ConfigurationError: a parameter out of range.
    """
    if not (isinstance(target_epsilon, (int, float)) and math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ConfigurationError(f"target_epsilon must be a finite ε > 0, got {target_epsilon!r}")

    def enough(m: int) -> bool:
        return gaussian_one_run_ceiling(mu, m, delta=delta, min_events=min_events) >= target_epsilon

    low, high = 2, 4
    while not enough(high):
        if high >= limit:
            return None
        low, high = high, min(4 * high, int(limit))
    while high - low > max(1, low // 100):
        mid = min(max(int(math.sqrt(low * high)), low + 1), high - 1)
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def gaussian_one_run_test_ceiling(mu: float, canaries: int, *, delta: float, confidence: float = 0.95) -> float:
    """What the one-run guess-count test valid for any mechanism (Steinke, Nasr & Jagielski 2023,
    :func:`dpaudit.auditing.estimators.one_run_epsilon`) certifies on a μ-GDP channel at the
    *expected* counts of its best guess count — an auditor who knew the channel picked how many
    of the most confident canaries to guess (|score − μ/2| above a threshold, on a grid of 91
    thresholds) and drew the typical run. Not a theorem about every draw: the limit of that test
    in one run, as the canaries grow (its δ term grows with them).

    Args:
        mu: the channel's μ.
        canaries: m (≥ 2).
        delta: δ of the bound.
        confidence: the test's confidence (no Bonferroni split).

    Returns:
        The certified ε (≥ 0).

    Raises:
        ConfigurationError: a parameter out of range.
    """

    _check_ceiling(mu, canaries, 1)
    best = 0.0
    for d in np.linspace(0.0, 4.5, 91):
        right, wrong = ndtr(mu / 2 - d), ndtr(-mu / 2 - d)
        r = int(round(canaries * (right + wrong)))
        if r < 1:
            continue
        v = int(round(r * right / (right + wrong)))
        best = max(best, float(one_run_epsilon(int(canaries), r, v, float(delta), 1.0 - float(confidence))[0]))
    return best
