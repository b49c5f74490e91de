"""Noise calibration: the smallest σ (up to a tolerance) whose accounted ε ≤ the target."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from dpaudit.accounting.ledger import PrivacyLedger
from dpaudit.accounting.mechanisms import Mechanism
from dpaudit.errors import PrivacyParameterError

log = logging.getLogger(__name__)

MechanismsForSigma = Callable[[float], "Mechanism | Iterable[Mechanism]"]


def epsilon_for_sigma(mechanisms_for_sigma: MechanismsForSigma, sigma: float, delta: float) -> float:
    produced = mechanisms_for_sigma(sigma)
    ledger = PrivacyLedger()
    if isinstance(produced, Mechanism):
        ledger.step(produced)
    else:
        ledger.extend(produced)
    return ledger.get_epsilon(delta)


def calibrate_noise(
    target_epsilon: float,
    delta: float,
    mechanisms_for_sigma: MechanismsForSigma,
    sigma_min: float = 1e-3,
    sigma_max: float = 1e5,
    rel_tol: float = 1e-3,
) -> float:
    """Return σ such that the mechanisms built by ``mechanisms_for_sigma(σ)`` spend ε ≤ target.

    ε is non-increasing in σ for every mechanism here, so a bracket [lo, hi] with
    ε(hi) ≤ target < ε(lo) is bisected (in log space) until hi/lo − 1 < ``rel_tol``; the
    upper end is returned, so the guarantee always holds — never just "close".

    Raises:
        PrivacyParameterError: when even ``sigma_max`` cannot reach the target (for instance
            because a σ-independent part of the composition already spends it).
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise PrivacyParameterError(f"target epsilon must be positive and finite, got {target_epsilon}")
    if not 0 < delta < 1:
        raise PrivacyParameterError(f"delta must lie in (0, 1), got {delta}")

    def eps(sigma: float) -> float:
        return epsilon_for_sigma(mechanisms_for_sigma, sigma, delta)

    hi = 1.0
    while eps(hi) > target_epsilon:
        hi *= 4.0
        if hi > sigma_max:
            raise PrivacyParameterError(
                f"target ε = {target_epsilon} is unreachable at δ = {delta}: even σ = {sigma_max:g} spends "
                f"ε = {eps(sigma_max):.4g}"
            )
    lo = hi / 4.0
    if eps(lo) <= target_epsilon:
        # Walk down until the bracket is proper or σ is negligible.
        while lo > sigma_min and eps(lo) <= target_epsilon:
            hi, lo = lo, lo / 4.0
        if eps(lo) <= target_epsilon:
            return lo
    while hi / lo - 1.0 > rel_tol:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    spent = eps(hi)
    assert spent <= target_epsilon, (spent, target_epsilon)
    log.debug("calibrated sigma=%.6g: epsilon %.6g <= target %.6g at delta %.3g", hi, spent, target_epsilon, delta)
    return hi
