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
    return float(clopper_pearson_lower(successes, trials, alpha)), float(clopper_pearson_upper(successes, trials, alpha))
