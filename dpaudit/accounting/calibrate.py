"""Noise calibration: the smallest σ (up to a tolerance) whose accounted ε ≤ the target."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from dpaudit.accounting.ledger import PrivacyLedger, check_accountant
from dpaudit.accounting.mechanisms import Mechanism
from dpaudit.errors import PrivacyParameterError

log = logging.getLogger(__name__)

MechanismsForSigma = Callable[[float], "Mechanism | Iterable[Mechanism]"]

# Probe points that identify a family σ ↦ mechanisms (frozen dataclasses, compared field by
# field): two families equal at both are the same parametric family in every case dpaudit
# builds, and a reused σ is re-verified anyway (calibrate_noise).
_FAMILY_PROBES = (1.0, math.e)
_CALIBRATED: dict[tuple, float] = {}
_CALIBRATED_MAX = 256


def _family_key(mechanisms_for_sigma: MechanismsForSigma) -> tuple | None:
    key = []
    for sigma in _FAMILY_PROBES:
        produced = mechanisms_for_sigma(sigma)
        produced = (produced,) if isinstance(produced, Mechanism) else tuple(produced)
        try:
            hash(produced)
        except TypeError:  # a mechanism with unhashable fields: no reuse
            return None
        key.append(produced)
    return tuple(key)


def epsilon_for_sigma(
    mechanisms_for_sigma: MechanismsForSigma, sigma: float, delta: float, accountant: str = "auto"
) -> float:
    """ε at δ that a :class:`PrivacyLedger` with ``accountant`` reports for ``mechanisms_for_sigma(σ)``.

    Args:
        mechanisms_for_sigma: ``σ`` → the mechanism(s) spent at that σ.
        sigma: the noise multiplier σ.
        delta: target δ.
        accountant: ``"auto"``, ``"rdp"`` or ``"pld"``.

    Returns:
        ε.
    """
    produced = mechanisms_for_sigma(sigma)
    ledger = PrivacyLedger(accountant=accountant)
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
    accountant: str = "auto",
) -> float:
    """Return σ such that the mechanisms built by ``mechanisms_for_sigma(σ)`` spend ε ≤ target
    under ``accountant`` (``"auto"``: the tightest valid analysis, as the ledger reports it).

    ε is non-increasing in σ for every mechanism here, so a bracket [lo, hi] with
    ε(hi) ≤ target < ε(lo) is found (factors of 4 from σ = 1) and shrunk until
    hi/lo − 1 < ``rel_tol``. Each round takes a false-position step in (ln σ, ln ε) — nearly
    linear there, so it lands next to the root — clamped inside the bracket, then probes one
    tolerance step beyond it to close the bracket; PLD ε is a step function of σ (its loss
    grid), which defeats pure secant methods but not this. The upper end is returned and is
    re-evaluated by the same ledger, so the guarantee always holds — never just "close". Every
    ε is computed by the same deterministic, cached ledger the defenses use for their spec.

    Results are remembered per process, keyed by the target, δ, the settings and the family
    (the frozen mechanisms it builds at two probe σ's): a shadow or reference model trained
    with the target's recipe reuses σ after two checks — ε(σ) ≤ target and
    ε(σ / (1 + rel_tol)) > target (or σ at ``sigma_min``) — so a reused σ is exactly as proven
    and as tight as a fresh one.

    Raises:
        PrivacyParameterError: when even ``sigma_max`` cannot reach the target (for instance
            because a σ-independent part of the composition already spends it), or when the
            target is so small that the σ reaching it makes the accountant report ε = 0.

    Args:
        target_epsilon: target ε (> 0, finite).
        delta: target δ, in (0, 1).
        mechanisms_for_sigma: ``σ`` → the mechanism(s) spent at that σ.
        sigma_min: smallest σ searched.
        sigma_max: largest σ searched.
        rel_tol: relative precision of σ.
        accountant: ``"auto"``, ``"rdp"`` or ``"pld"``.

    Returns:
        σ.
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise PrivacyParameterError(f"target epsilon must be positive and finite, got {target_epsilon}")
    if not 0 < delta < 1:
        raise PrivacyParameterError(f"delta must lie in (0, 1), got {delta}")
    check_accountant(accountant)
    family = _family_key(mechanisms_for_sigma)
    memo_key = None if family is None else (target_epsilon, delta, sigma_min, sigma_max, rel_tol, accountant, family)
    if memo_key is not None and memo_key in _CALIBRATED:
        # Same family, same target (a shadow or reference model trained with the target's
        # recipe): reuse σ after re-checking both sides of the calibration's contract.
        sigma = _CALIBRATED[memo_key]
        fits = epsilon_for_sigma(mechanisms_for_sigma, sigma, delta, accountant) <= target_epsilon
        tight = sigma <= sigma_min or (
            epsilon_for_sigma(mechanisms_for_sigma, sigma / (1.0 + rel_tol), delta, accountant) > target_epsilon
        )
        if fits and tight:
            return sigma
    sigma = _calibrate(target_epsilon, delta, mechanisms_for_sigma, sigma_min, sigma_max, rel_tol, accountant)
    if epsilon_for_sigma(mechanisms_for_sigma, sigma, delta, accountant) <= 0:
        # δ alone covers the mechanism at this σ: the spec would state ε = 0, which no
        # downstream check accepts as a guarantee; say so now, before any training
        raise PrivacyParameterError(
            f"target ε = {target_epsilon:g} is too small to calibrate at δ = {delta:g}: the noise it needs makes the "
            "accountant report ε = 0 (δ alone covers the mechanism); use a larger ε"
        )
    if memo_key is not None:
        if len(_CALIBRATED) >= _CALIBRATED_MAX:
            _CALIBRATED.pop(next(iter(_CALIBRATED)))
        _CALIBRATED[memo_key] = sigma
    return sigma


def _calibrate(target_epsilon, delta, mechanisms_for_sigma, sigma_min, sigma_max, rel_tol, accountant) -> float:
    cache: dict[float, float] = {}

    def eps(sigma: float) -> float:
        if sigma not in cache:
            cache[sigma] = epsilon_for_sigma(mechanisms_for_sigma, sigma, delta, accountant)
        return cache[sigma]

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
    log_tol = math.log1p(rel_tol)
    log_target = math.log(target_epsilon)
    while math.log(hi / lo) > log_tol:
        a, b = math.log(lo), math.log(hi)
        fa, fb = math.log(eps(lo)) - log_target, math.log(max(eps(hi), 1e-300)) - log_target
        width = b - a
        x = a + width * fa / (fa - fb) if fa > fb and math.isfinite(fa - fb) else a + width / 2
        x = min(max(x, a + 0.02 * width), b - 0.02 * width)
        sigma = math.exp(x)
        if eps(sigma) <= target_epsilon:
            hi = sigma
            probe = math.exp(x - 0.9 * log_tol)
            if probe > lo:
                if eps(probe) <= target_epsilon:
                    hi = probe
                else:
                    lo = probe
        else:
            lo = sigma
            probe = math.exp(x + 0.9 * log_tol)
            if probe < hi:
                if eps(probe) <= target_epsilon:
                    hi = probe
                else:
                    lo = probe
    spent = epsilon_for_sigma(mechanisms_for_sigma, hi, delta, accountant)  # re-check, fresh ledger
    if spent > target_epsilon:  # cannot happen: hi only ever takes values that passed
        raise PrivacyParameterError(f"calibration failed: σ = {hi:g} spends ε = {spent:g} > {target_epsilon:g}")
    log.debug(
        "calibrated sigma=%.6g (%s): epsilon %.6g <= target %.6g at delta %.3g, %d evaluations",
        hi,
        accountant,
        spent,
        target_epsilon,
        delta,
        len(cache),
    )
    return hi
