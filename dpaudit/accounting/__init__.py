"""Privacy accounting: mechanisms, their composition, conversion and noise calibration.

>>> from dpaudit.accounting import PrivacyLedger, PoissonSubsampledGaussian, calibrate_noise
>>> sigma = calibrate_noise(8.0, 1e-5, lambda s: PoissonSubsampledGaussian(s, 0.01, 1000))
>>> PrivacyLedger().step(PoissonSubsampledGaussian(sigma, 0.01, 1000)).get_epsilon(1e-5) <= 8.0
True
"""

from dpaudit.accounting.calibrate import calibrate_noise, epsilon_for_sigma
from dpaudit.accounting.conversion import amplify_by_subsampling, group_privacy, rdp_to_epsilon
from dpaudit.accounting.ledger import PrivacyLedger
from dpaudit.accounting.mechanisms import (
    DEFAULT_ORDERS,
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
from dpaudit.accounting.spec import UNITS, PrivacySpec, auto_delta, validate_delta, validate_epsilon

__all__ = [
    "DEFAULT_ORDERS",
    "UNITS",
    "ExponentialMechanism",
    "FixedSizeSubsampledGaussian",
    "GaussianMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "PoissonSubsampledGaussian",
    "PrivacyLedger",
    "PrivacySpec",
    "PureDPMechanism",
    "RecordedGuarantee",
    "SensitivityMixtureGaussian",
    "amplify_by_subsampling",
    "auto_delta",
    "calibrate_noise",
    "epsilon_for_sigma",
    "group_privacy",
    "rdp_to_epsilon",
    "validate_delta",
    "validate_epsilon",
]
