"""Exact binomial confidence bounds (Clopper & Pearson 1934): the one implementation every
estimator, attack statistic and report uses.

For k successes in n trials, the one-sided (1 − α) bounds are quantiles of beta laws,

.. math::
    \\underline p = B^{-1}(\\alpha;\\, k,\\, n - k + 1), \\qquad
    \\overline p = B^{-1}(1 - \\alpha;\\, k + 1,\\, n - k),

with :math:`\\underline p = 0` at k = 0 and :math:`\\overline p = 1` at k = n. They are exact
(never below the nominal coverage) and conservative for small n.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def clopper_pearson_lower(successes, trials, alpha: float) -> np.ndarray:
    """One-sided (1 − α) lower bound: the p with P[Bin(n, p) ≥ k] = α (0 at k = 0).

    Args:
        successes: number of successes k (array-like).
        trials: number of trials n (array-like).
        alpha: one-sided error.

    Returns:
        Lower bounds, elementwise.
    """
    k, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1.0)
    return np.where(k <= 0, 0.0, lo)


def clopper_pearson_upper(successes, trials, alpha: float) -> np.ndarray:
    """One-sided (1 − α) upper bound: the p with P[Bin(n, p) ≤ k] = α (1 at k = n).

    Args:
        successes: number of successes k (array-like).
        trials: number of trials n (array-like).
        alpha: one-sided error.

    Returns:
        Upper bounds, elementwise.
    """
    k, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, hi)


def clopper_pearson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided interval at ``confidence`` (α/2 in each tail).

    Args:
        successes: number of successes k.
        trials: number of trials n.
        confidence: two-sided coverage.

    Returns:
        ``(low, high)``.
    """
    alpha = (1.0 - confidence) / 2.0
    return float(clopper_pearson_lower(successes, trials, alpha)), float(
        clopper_pearson_upper(successes, trials, alpha)
    )


def threshold_counts(pos: np.ndarray, neg: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TP, FP) of the test "score ≥ t" for each threshold.

    Args:
        pos: the members' (positives') scores.
        neg: the non-members' (negatives') scores.
        thresholds: the thresholds t.

    Returns:
        ``(tp, fp)``, one count per threshold.
    """
    pos_sorted, neg_sorted = np.sort(np.asarray(pos)), np.sort(np.asarray(neg))
    tp = pos_sorted.size - np.searchsorted(pos_sorted, thresholds, side="left")
    fp = neg_sorted.size - np.searchsorted(neg_sorted, thresholds, side="left")
    return tp, fp


def clopper_pearson_epsilon(
    pos: np.ndarray, neg: np.ndarray, thresholds: np.ndarray, delta: float, alpha: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Both (ε, δ) hypothesis-testing bounds at each threshold, Clopper–Pearson at α/2 each: the
    held-out-threshold ε bound's one implementation.

    (ε, δ)-DP implies FPR·e^ε + FNR ≥ 1 − δ and FNR·e^ε + FPR ≥ 1 − δ (Kairouz et al. 2015),
    so ε ≥ ln((1 − δ − FNR)/FPR) and ε ≥ ln((1 − δ − FPR)/FNR); both use the same two binomial
    bounds (FPR_ub, FNR_ub), each at α/2, so both forms hold jointly at 1 − α.

    Args:
        pos: the members' scores ("score ≥ t" = predicted member).
        neg: the non-members' scores.
        thresholds: the thresholds t.
        delta: the δ of the tested guarantee.
        alpha: the level of the joint test (confidence 1 − α).

    Returns:
        ``(eps_fpr, eps_fnr, tp, fp, fpr_ub, fnr_ub)``, one entry per threshold (−∞ where a form
        has no bound).
    """
    pos, neg = np.asarray(pos), np.asarray(neg)
    tp, fp = threshold_counts(pos, neg, thresholds)
    fn = pos.size - tp
    fpr_ub = clopper_pearson_upper(fp, neg.size, alpha / 2.0)
    fnr_ub = clopper_pearson_upper(fn, pos.size, alpha / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        num_a = 1.0 - delta - fnr_ub
        num_b = 1.0 - delta - fpr_ub
        eps_a = np.where(num_a > 0, np.log(np.maximum(num_a, 1e-300) / fpr_ub), -np.inf)
        eps_b = np.where(num_b > 0, np.log(np.maximum(num_b, 1e-300) / fnr_ub), -np.inf)
    return eps_a, eps_b, tp, fp, fpr_ub, fnr_ub


def bonferroni_confidence(confidence: float, tests: int) -> float:
    """The confidence each of ``tests`` tests needs for the family to hold at ``confidence``
    (Bonferroni): 1 − (1 − ``confidence``)/``tests``; the one implementation.

    Args:
        confidence: the family's confidence, in (0, 1).
        tests: how many tests share it (fewer than 1 counts as 1).

    Returns:
        The per-test confidence.
    """
    return 1.0 - (1.0 - float(confidence)) / max(1, int(tests))
