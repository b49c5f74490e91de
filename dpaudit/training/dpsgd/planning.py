"""σ of a plan (:func:`noise_for_plan`: calibrated, or a saved model's recorded σ when it meets the
calibration's contract) and where a saved plan differs from the re-derived one
(:func:`plan_mismatch`)."""

from __future__ import annotations

import math
from typing import Any

from dpaudit.accounting.calibrate import MechanismsForSigma, calibrate_noise, epsilon_for_sigma
from dpaudit.errors import PrivacyParameterError

#: calibrate_noise's tolerance and floor, which :func:`noise_for_plan` re-checks a recorded σ against
CALIBRATION_REL_TOL = 1e-3

CALIBRATION_SIGMA_MIN = 1e-3


def noise_for_plan(
    target_epsilon: float,
    delta: float,
    mechanisms_for_sigma: MechanismsForSigma,
    *,
    recorded: float | None = None,
    accountant: str = "auto",
) -> float:
    """σ of a plan: :func:`~dpaudit.accounting.calibrate_noise` — or, when a saved model is
    re-planned (:meth:`dpaudit.training.defense.Defense.replan`), its ``recorded`` σ when that σ meets
    calibrate_noise's own contract: ε(σ) ≤ target and ε(σ / (1 + tol)) > target (or σ at the
    floor). A freshly calibrated σ always meets it, so an unmodified model re-plans to its own σ
    in two ε evaluations instead of a full calibration (seconds per load), and independently of
    floating-point details of the calibration's search path on another machine; a σ edited by
    more than the tolerance fails it and is re-calibrated, so it no longer matches the plan.

    Args:
        target_epsilon: target ε.
        delta: target δ.
        mechanisms_for_sigma: ``σ`` → the mechanisms the run spends at that σ.
        recorded: σ recorded in a saved model, or ``None``.
        accountant: ``"auto"``, ``"rdp"`` or ``"pld"``.

    Returns:
        σ.

    Raises:
        PrivacyParameterError: ε or δ out of range, or the target cannot be met.
    """
    if recorded is not None and math.isfinite(recorded) and recorded > 0:
        if not (target_epsilon > 0 and math.isfinite(target_epsilon)) or not 0 < delta < 1:
            raise PrivacyParameterError(f"cannot plan noise for ε = {target_epsilon}, δ = {delta}")
        fits = epsilon_for_sigma(mechanisms_for_sigma, recorded, delta, accountant) <= target_epsilon
        tight = recorded <= CALIBRATION_SIGMA_MIN or (
            epsilon_for_sigma(mechanisms_for_sigma, recorded / (1.0 + CALIBRATION_REL_TOL), delta, accountant)
            > target_epsilon
        )
        if fits and tight:
            return float(recorded)
    return calibrate_noise(
        target_epsilon,
        delta,
        mechanisms_for_sigma,
        sigma_min=CALIBRATION_SIGMA_MIN,
        rel_tol=CALIBRATION_REL_TOL,
        accountant=accountant,
    )


def plan_mismatch(recorded: Any, planned: Any, path: str, rtol: float = 1e-6) -> str | None:
    """Where a saved plan section (a card's per-defense dict) differs from the plan re-derived
    from the card's public inputs, as ``"path.key: planned X, the card records Y"``; ``None`` when
    they agree. Numbers are compared to ``rtol`` (the same computation on another machine may
    differ in its last bits), nested dicts key by key, anything else exactly.

    Args:
        recorded: the card's section (or value).
        planned: the re-derived section (or value).
        path: dotted path of this section (prefix of the message).
        rtol: relative tolerance for numbers.

    Returns:
        The first difference, or ``None``.
    """
    if isinstance(planned, dict):
        if not isinstance(recorded, dict):
            return f"{path}: planned a section, the card records {recorded!r}"
        for key in sorted(set(planned) | set(recorded)):
            if key not in planned or key not in recorded:
                return f"{path}.{key}: planned {planned.get(key, '<absent>')!r}, the card records {recorded.get(key, '<absent>')!r}"
            found = plan_mismatch(recorded[key], planned[key], f"{path}.{key}", rtol)
            if found:
                return found
        return None
    numbers = (int, float)
    if (
        isinstance(planned, numbers)
        and isinstance(recorded, numbers)
        and not isinstance(planned, bool)
        and not isinstance(recorded, bool)
    ):
        if math.isclose(float(recorded), float(planned), rel_tol=rtol, abs_tol=1e-12):
            return None
    elif recorded == planned:
        return None
    return f"{path}: planned {planned!r}, the card records {recorded!r}"
