"""Accountants, cross-checked against independent libraries and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.accounting import (
    ExponentialMechanism,
    FixedSizeSubsampledGaussian,
    GaussianMechanism,
    LaplaceMechanism,
    PoissonSubsampledGaussian,
    PrivacyLedger,
    PrivacySpec,
    PureDPMechanism,
    RecordedGuarantee,
    SensitivityMixtureGaussian,
    amplify_by_subsampling,
    auto_delta,
    calibrate_noise,
    group_privacy,
    rdp_to_epsilon,
    validate_delta,
    validate_epsilon,
)
from dpaudit.errors import PrivacyParameterError


def _dp_accounting_rdp_epsilon(event, delta, relation=None):
    from dp_accounting import rdp

    kwargs = {} if relation is None else {"neighboring_relation": relation}
    accountant = rdp.RdpAccountant(**kwargs)
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def _exact_gaussian_delta(mu: float, eps: float) -> float:
    """δ(ε) of the μ-GDP Gaussian mechanism (Balle & Wang 2018, Thm 8)."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("sigma,q,steps,delta", [(1.1, 0.01, 1000, 1e-5), (0.8, 0.05, 300, 1e-4), (2.0, 1.0, 50, 1e-5)])
def test_poisson_subsampled_gaussian_matches_dp_accounting(sigma, q, steps, delta):
    import dp_accounting

    ours = PrivacyLedger().step(PoissonSubsampledGaussian(sigma, q, steps)).get_epsilon(delta)
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )
    theirs_rdp = _dp_accounting_rdp_epsilon(event, delta)
    # Same analysis, different order grids: agree to a few percent.
    assert ours == pytest.approx(theirs_rdp, rel=0.03)
    # The PLD accountant is (nearly) exact: RDP must upper-bound it, and not by much.
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(event)
    exact = pld.get_epsilon(delta)
    assert exact <= ours * 1.001
    assert ours <= 1.6 * exact + 0.05


def test_gaussian_rdp_is_an_upper_bound_of_the_exact_curve():
    sigma, count, delta = 3.0, 4, 1e-5
    ledger = PrivacyLedger().step(GaussianMechanism(sigma, sensitivity=1.0, count=count))
    eps = ledger.get_epsilon(delta)
    mu = math.sqrt(count) / sigma
    assert ledger.gdp_mu() == pytest.approx(mu)
    # The exact Gaussian δ at our ε must not exceed the target δ (our ε is valid) ...
    assert _exact_gaussian_delta(mu, eps) <= delta
    # ... and our ε is not wildly loose.
    assert _exact_gaussian_delta(mu, 0.8 * eps) > delta


def test_gaussian_sensitivity_scales_like_sigma():
    a = GaussianMechanism(2.0, sensitivity=3.0).rdp()
    b = GaussianMechanism(2.0 / 3.0, sensitivity=1.0).rdp()
    np.testing.assert_allclose(a, b)


@pytest.mark.parametrize("sigma,q", [(2.0, 0.1), (1.0, 0.01), (4.0, 0.5)])
def test_fixed_size_sampling_matches_autodp(sigma, q):
    from autodp.mechanism_zoo import GaussianMechanism as AutodpGaussian
    from autodp.transformer_zoo import AmplificationBySampling

    orders = np.array([2.0, 3.0, 8.0, 16.0, 32.0])
    base = AutodpGaussian(sigma=sigma / 2.0)  # replace-one sensitivity of a clipped sum is 2C
    base.neighboring = "replace_one"
    theirs = AmplificationBySampling(PoissonSampling=False)(base, prob=q, improved_bound_flag=True)
    ours = FixedSizeSubsampledGaussian(sigma, int(q * 1000), 1000, steps=1).rdp(orders)
    np.testing.assert_allclose(ours, [theirs.RenyiDP(a) for a in orders], rtol=1e-6)


def test_fixed_size_sampling_matches_dp_accounting_event():
    import dp_accounting

    sigma, m, n, steps, delta = 1.5, 64, 2000, 500, 1e-5
    ours = PrivacyLedger().step(FixedSizeSubsampledGaussian(sigma, m, n, steps)).get_epsilon(delta)
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(n, m, dp_accounting.GaussianDpEvent(sigma / 2.0)), steps
    )
    theirs = _dp_accounting_rdp_epsilon(event, delta, dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert ours == pytest.approx(theirs, rel=0.03)


def test_laplace_matches_dp_accounting_and_pure_dp():
    from dp_accounting.rdp.rdp_privacy_accountant import _laplace_rdp

    mech = LaplaceMechanism(scale=2.0, sensitivity=1.0, count=3)
    orders = np.array([1.5, 2.0, 10.0, 100.0])
    np.testing.assert_allclose(mech.rdp(orders), [3 * _laplace_rdp(0.5, a) for a in orders], rtol=1e-9)
    # Three Laplace(2) releases are pure 1.5-DP; the ledger never reports more.
    assert PrivacyLedger().step(mech).get_epsilon(1e-6) <= 1.5 + 1e-12


def test_pure_and_exponential_mechanisms():
    orders = np.array([1.5, 2.0, 4.0, 64.0])
    pure = PureDPMechanism(1.0).rdp(orders)
    em = ExponentialMechanism(1.0).rdp(orders)
    assert np.all(pure <= 1.0 + 1e-12) and np.all(em <= pure + 1e-12)
    np.testing.assert_allclose(em[:2], orders[:2] * 1.0 / 8.0)  # bounded range: α ε²/8 at small α
    # k peeling EMs at ε each: never worse than basic composition kε.
    assert PrivacyLedger().step(ExponentialMechanism(0.5, count=10)).get_epsilon(1e-5) <= 5.0


def test_mixture_with_point_mass_equals_gaussian():
    mix = SensitivityMixtureGaussian(2.0, 1.0, support=(3.0,), probabilities=(1.0,), steps=5)
    np.testing.assert_allclose(mix.rdp(), GaussianMechanism(2.0, sensitivity=3.0, count=5).rdp(), rtol=1e-12)


def test_mixture_matches_direct_evaluation():
    rho = np.arange(0, 4)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    sigma, s = 3.0, 2.0
    mix = SensitivityMixtureGaussian(sigma, s, tuple(rho), tuple(p), steps=1)
    for a in (2.0, 5.0, 8.0):
        direct = math.log(sum(pi * math.exp(a * (a - 1) * (s * r) ** 2 / (2 * sigma**2)) for r, pi in zip(rho, p))) / (
            a - 1
        )
        assert mix.rdp(np.array([a]))[0] == pytest.approx(direct, rel=1e-10)


def test_calibration_reaches_but_never_exceeds_target():
    delta = 1e-5
    for target in (0.5, 1.0, 8.0):
        sigma = calibrate_noise(target, delta, lambda s: PoissonSubsampledGaussian(s, 0.02, 2000))
        spent = PrivacyLedger().step(PoissonSubsampledGaussian(sigma, 0.02, 2000)).get_epsilon(delta)
        assert spent <= target
        looser = PrivacyLedger().step(PoissonSubsampledGaussian(sigma * 0.99, 0.02, 2000)).get_epsilon(delta)
        assert looser > target * 0.995  # tight: 1 % less noise already spends (almost) the whole target


def test_calibration_with_a_fixed_part_and_unreachable_target():
    fixed = PureDPMechanism(0.5)
    sigma = calibrate_noise(2.0, 1e-5, lambda s: [fixed, GaussianMechanism(s, count=10)])
    assert PrivacyLedger().extend([fixed, GaussianMechanism(sigma, count=10)]).get_epsilon(1e-5) <= 2.0
    with pytest.raises(PrivacyParameterError, match="unreachable"):
        calibrate_noise(0.4, 1e-5, lambda s: [fixed, GaussianMechanism(s)])
    with pytest.raises(PrivacyParameterError):
        calibrate_noise(-1.0, 1e-5, lambda s: GaussianMechanism(s))
    with pytest.raises(PrivacyParameterError):
        calibrate_noise(1.0, 1.5, lambda s: GaussianMechanism(s))


def test_amplification_is_exact_not_linear():
    eps, delta = amplify_by_subsampling(8.0, 1e-5, 0.09)
    assert eps == pytest.approx(math.log(1 + 0.09 * (math.exp(8.0) - 1)))
    assert delta == pytest.approx(0.09e-5)
    assert eps > 0.09 * 8.0 * 5  # the linear "q·ε" would understate it more than five-fold
    assert amplify_by_subsampling(1.0, 1e-5, 1.0) == pytest.approx((1.0, 1e-5))


def test_group_privacy():
    eps, delta = group_privacy(1.0, 1e-6, 2)
    assert eps == 2.0 and delta == pytest.approx(2 * math.e * 1e-6)


def test_recorded_guarantees_compose_basically():
    ledger = PrivacyLedger().step(RecordedGuarantee(1.0, 1e-6, "objective perturbation"))
    assert ledger.get_epsilon(1e-5) == 1.0
    ledger.step(GaussianMechanism(5.0))
    eps = ledger.get_epsilon(1e-5)
    assert eps == pytest.approx(1.0 + rdp_to_epsilon(GaussianMechanism(5.0).rdp(), 1e-5 - 1e-6)[0])


def test_validation_of_epsilon_and_delta():
    assert validate_epsilon("inf") == math.inf and validate_epsilon(2) == 2.0
    for bad in (0, -1, "nan", "abc"):
        with pytest.raises(PrivacyParameterError):
            validate_epsilon(bad)
    for bad in (0, 1, 1.5, -0.1, "x"):
        with pytest.raises(PrivacyParameterError):
            validate_delta(bad)
    assert validate_delta("auto", 2708) == 1e-4 and auto_delta(1000) == 1e-4 and auto_delta(999) == 1e-3
    assert all(auto_delta(n) < 1 / n for n in (1, 9, 10, 11, 2708, 10**6))


def test_privacy_spec_round_trip():
    spec = PrivacyLedger().step(GaussianMechanism(2.0, count=3)).spec(1e-5, "edge", target_epsilon=5.0, notes=["x"])
    again = PrivacySpec.from_dict(spec.to_dict())
    assert again == spec
    assert PrivacySpec.from_dict(PrivacySpec.non_private().to_dict()).epsilon == math.inf
    with pytest.raises(PrivacyParameterError):
        PrivacySpec.from_dict({"epsilon": 1.0, "delta": 1e-5, "unit": "galaxy"})
