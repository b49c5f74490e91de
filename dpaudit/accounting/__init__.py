"""Privacy accounting: mechanisms, their composition, conversion and noise calibration.

>>> from dpaudit.accounting import PrivacyLedger, PoissonSubsampledGaussian, calibrate_noise
>>> sigma = calibrate_noise(8.0, 1e-5, lambda s: PoissonSubsampledGaussian(s, 0.01, 1000))
>>> PrivacyLedger().step(PoissonSubsampledGaussian(sigma, 0.01, 1000)).get_epsilon(1e-5) <= 8.0
True

``PrivacyLedger(accountant="auto")`` (default) reports the tightest valid analysis (RDP, PLD or
the exact Gaussian curve); ``"rdp"`` / ``"pld"`` force one. ``calibrate_noise(...,
accountant=...)`` calibrates under the same choice.
"""

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
