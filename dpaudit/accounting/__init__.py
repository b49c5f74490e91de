"""Privacy accounting: mechanisms, their composition, conversion and noise calibration.

>>> from dpaudit.accounting import PrivacyLedger, PoissonSubsampledGaussian, calibrate_noise
>>> sigma = calibrate_noise(8.0, 1e-5, lambda s: PoissonSubsampledGaussian(s, 0.01, 1000))
>>> PrivacyLedger().step(PoissonSubsampledGaussian(sigma, 0.01, 1000)).get_epsilon(1e-5) <= 8.0
True

``PrivacyLedger(accountant="auto")`` (default) reports the tightest valid analysis (RDP, PLD or
the exact Gaussian curve); ``"rdp"`` / ``"pld"`` force one. ``calibrate_noise(...,
accountant=...)`` calibrates under the same choice.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below, for type checkers; loaded on first use (see __getattr__)
    from dpaudit.accounting.calibrate import calibrate_noise, epsilon_for_sigma
    from dpaudit.accounting.conversion import amplify_by_subsampling, group_privacy, rdp_to_epsilon
    from dpaudit.accounting.ledger import ACCOUNTANTS, PrivacyLedger
    from dpaudit.accounting.mechanisms import (
        DEFAULT_ORDERS,
        EXTENDED_ORDERS,
        ExponentialMechanism,
        FixedSizeSubsampledGaussian,
        GaussianMechanism,
        LaplaceMechanism,
        Mechanism,
        PoissonSubsampledGaussian,
        PureDPMechanism,
        RecordedGuarantee,
        SensitivityMixtureGaussian,
    )
    from dpaudit.accounting.opacus_claims import OpacusClaim, claim_from_opacus
    from dpaudit.accounting.pld import DEFAULT_DISCRETIZATION, gaussian_delta, gaussian_epsilon, pld_epsilon
    from dpaudit.accounting.selection import PrivateSelection
    from dpaudit.accounting.spec import UNITS, PrivacySpec, auto_delta, validate_delta, validate_epsilon

#: where each public name lives: importing the package stays cheap (scipy, numba and dp-accounting load
#: on first use), so a command refuses a bad ε or δ (:mod:`dpaudit.accounting.spec`) before any heavy import
_HOME = {
    "ACCOUNTANTS": "dpaudit.accounting.ledger",
    "DEFAULT_DISCRETIZATION": "dpaudit.accounting.pld",
    "DEFAULT_ORDERS": "dpaudit.accounting.mechanisms",
    "EXTENDED_ORDERS": "dpaudit.accounting.mechanisms",
    "ExponentialMechanism": "dpaudit.accounting.mechanisms",
    "FixedSizeSubsampledGaussian": "dpaudit.accounting.mechanisms",
    "GaussianMechanism": "dpaudit.accounting.mechanisms",
    "LaplaceMechanism": "dpaudit.accounting.mechanisms",
    "Mechanism": "dpaudit.accounting.mechanisms",
    "OpacusClaim": "dpaudit.accounting.opacus_claims",
    "PoissonSubsampledGaussian": "dpaudit.accounting.mechanisms",
    "PrivacyLedger": "dpaudit.accounting.ledger",
    "PrivacySpec": "dpaudit.accounting.spec",
    "PrivateSelection": "dpaudit.accounting.selection",
    "PureDPMechanism": "dpaudit.accounting.mechanisms",
    "RecordedGuarantee": "dpaudit.accounting.mechanisms",
    "SensitivityMixtureGaussian": "dpaudit.accounting.mechanisms",
    "UNITS": "dpaudit.accounting.spec",
    "amplify_by_subsampling": "dpaudit.accounting.conversion",
    "auto_delta": "dpaudit.accounting.spec",
    "calibrate_noise": "dpaudit.accounting.calibrate",
    "claim_from_opacus": "dpaudit.accounting.opacus_claims",
    "epsilon_for_sigma": "dpaudit.accounting.calibrate",
    "gaussian_delta": "dpaudit.accounting.pld",
    "gaussian_epsilon": "dpaudit.accounting.pld",
    "group_privacy": "dpaudit.accounting.conversion",
    "pld_epsilon": "dpaudit.accounting.pld",
    "rdp_to_epsilon": "dpaudit.accounting.conversion",
    "validate_delta": "dpaudit.accounting.spec",
    "validate_epsilon": "dpaudit.accounting.spec",
}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_DISCRETIZATION",
    "DEFAULT_ORDERS",
    "EXTENDED_ORDERS",
    "UNITS",
    "ExponentialMechanism",
    "FixedSizeSubsampledGaussian",
    "GaussianMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "OpacusClaim",
    "PoissonSubsampledGaussian",
    "PrivateSelection",
    "PrivacyLedger",
    "PrivacySpec",
    "PureDPMechanism",
    "RecordedGuarantee",
    "SensitivityMixtureGaussian",
    "amplify_by_subsampling",
    "auto_delta",
    "calibrate_noise",
    "claim_from_opacus",
    "epsilon_for_sigma",
    "gaussian_delta",
    "gaussian_epsilon",
    "group_privacy",
    "pld_epsilon",
    "rdp_to_epsilon",
    "validate_delta",
    "validate_epsilon",
]
