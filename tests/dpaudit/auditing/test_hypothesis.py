"""The one-run hypothesis test of a claimed SGM(σ, q, T) (dpaudit.auditing.hypothesis): the score
law against independent computations (dp_accounting's PLD, the closed-form Gaussian), the
order-statistics tail against simulation, and the test's level and power on simulated runs."""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtr

from dpaudit.accounting import gaussian_delta
from dpaudit.auditing.hypothesis import (
    ScoreLaw,
    claimed_noise_multiplier,
    epsilon_delta_profile,
    sgm_epsilon,
    sgm_epsilon_lower_bound,
    sgm_hypothesis_test,
    top_guesses_p_value,
    xiang_epsilon_lower_bound,
)
from dpaudit.errors import ConfigurationError


def simulate(m, sigma, q, steps, seed, factor=1.0):
    """One simulated run's Dirac canary scores (units of C) with the noise ``factor`` × σ."""
    rng = np.random.default_rng(seed)
    coins = rng.integers(0, 2, m).astype(bool)
    sampled = rng.binomial(steps, q, m) * coins
    return sampled + rng.normal(0.0, math.sqrt(steps) * sigma * factor, m), coins


def test_score_law_delta_matches_dp_accounting_pld():
    # one step: the score is the subsampled Gaussian's own output, so its δ(ε) is dp_accounting's
    sigma, q, eps = 1.0, 0.3, 1.0
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    expected = accountant.get_delta(eps)
    assert ScoreLaw(sigma, q, 1).delta(eps) == pytest.approx(expected, rel=2e-3, abs=1e-6)


def test_score_law_at_full_batch_is_the_gaussian_mechanism():
    law = ScoreLaw(10.0, 1.0, 100)  # μ = √T/σ = 1
    assert law.delta(2.0) == pytest.approx(gaussian_delta(1.0, 2.0), rel=1e-6)
    assert law.profile().bayes_error == pytest.approx(ndtr(-0.5), abs=1e-5)


def test_order_statistics_tail_matches_simulation():
    law = ScoreLaw(1.0, 0.5, 4)
    profile = law.profile()
    m, r, trials = 300, 40, 3000
    rng = np.random.default_rng(0)
    mistakes = []
    for _ in range(trials):
        coins = rng.integers(0, 2, m).astype(bool)
        s = rng.binomial(4, 0.5, m) * coins + rng.normal(0, 2.0, m)
        llr = law.log_likelihood_ratio(s)
        top = np.argsort(-np.abs(llr))[:r]
        mistakes.append(int(((llr[top] > 0) != coins[top]).sum()))
    mistakes = np.array(mistakes)
    for u in (np.quantile(mistakes, 0.05), np.median(mistakes), np.quantile(mistakes, 0.9)):
        u = int(u)
        assert top_guesses_p_value(profile, m, r, u) == pytest.approx((mistakes <= u).mean(), abs=0.03)


@pytest.mark.parametrize("q, steps", [(1.0, 100), (0.2, 30)])
def test_correct_runs_are_refuted_at_most_at_the_level(q, steps):
    sigma = 8.0 if q == 1.0 else 1.2
    refuted = [
        sgm_hypothesis_test(
            *simulate(2000, sigma, q, steps, seed), noise_multiplier=sigma, sample_rate=q, steps=steps
        ).refuted
        for seed in range(60)
    ]
    # level 0.05; 60 runs: the 0.999 binomial quantile is 9
    assert sum(refuted) <= 9


def test_noisier_runs_are_not_refuted():
    refuted = [
        sgm_hypothesis_test(
            *simulate(2000, 8.0, 1.0, 100, seed, factor=1.25), noise_multiplier=8.0, sample_rate=1.0, steps=100
        ).refuted
        for seed in range(30)
    ]
    assert sum(refuted) == 0


@pytest.mark.parametrize("factor", [0.8, 0.6])
def test_short_noise_is_refuted_in_one_run(factor):
    # σ = 10.81: mlp-dp's full-batch run on Cora at ε = 4 (q = 1, T = 100), 4000 canaries
    tests = [
        sgm_hypothesis_test(
            *simulate(4000, 10.81, 1.0, 100, seed, factor=factor), noise_multiplier=10.81, sample_rate=1.0, steps=100
        )
        for seed in range(10)
    ]
    assert all(t.refuted for t in tests)
    assert max(t.p_value for t in tests) < 1e-3


def test_short_noise_under_subsampling_is_refuted():
    tests = [
        sgm_hypothesis_test(
            *simulate(4000, 1.0, 0.1, 200, seed, factor=0.8), noise_multiplier=1.0, sample_rate=0.1, steps=200
        )
        for seed in range(5)
    ]
    assert sum(t.refuted for t in tests) >= 4


def test_claimed_noise_multiplier_is_the_calibration():
    sigma = claimed_noise_multiplier(4.0, 1e-5, 1.0, 10)
    from dpaudit.accounting import PoissonSubsampledGaussian, PrivacyLedger

    assert PrivacyLedger().step(PoissonSubsampledGaussian(sigma, 1.0, 10)).get_epsilon(1e-5) <= 4.0
    # full batch: Gaussian with μ = √T/σ, whose exact ε at δ is the claim
    assert gaussian_delta(math.sqrt(10) / sigma, 4.0) == pytest.approx(1e-5, rel=0.02)


def test_xiang_bounds_sit_below_the_truth_and_the_gaussian_family_is_tight():
    true = 4.377  # ε of 1-GDP at δ = 1e-5
    gaussian, eps_delta = [], []
    for seed in range(5):
        s, coins = simulate(10000, 1.0, 1.0, 1, seed)
        gaussian.append(xiang_epsilon_lower_bound(s, coins, delta=1e-5, family="gaussian")["epsilon"])
        eps_delta.append(xiang_epsilon_lower_bound(s, coins, delta=1e-5, family="epsilon-delta")["epsilon"])
    # a 95 % bound: above the truth in about 1 run of 20, so the median is below it
    assert 0.75 * true < np.median(gaussian) <= true
    assert 0.0 < np.median(eps_delta) < np.median(gaussian)


def test_epsilon_delta_profile_is_randomized_response_plus_delta():
    prof = epsilon_delta_profile(1.0, 0.01)
    assert prof.bayes_error == pytest.approx(0.99 / (1 + math.e))
    assert prof.mean_error_above(np.array([0.995]))[0] == 0.0


def test_bad_inputs_are_refused():
    with pytest.raises(ConfigurationError):
        sgm_hypothesis_test([1.0, 2.0], [True], noise_multiplier=1.0, sample_rate=1.0, steps=1)
    with pytest.raises(ConfigurationError):
        ScoreLaw(1.0, 1.5, 1)
    with pytest.raises(ConfigurationError):
        top_guesses_p_value(ScoreLaw(1.0, 1.0, 1).profile(), 10, 11, 0)


def test_the_canary_record_reports_both_results():
    from dpaudit.auditing.gradient_canary import summarise_game

    s, coins = simulate(3000, 10.81, 1.0, 100, 0, factor=0.8)
    mechanism = {"noise_multiplier": 10.81, "sample_rate": 1.0, "steps": 100, "max_grad_norm": 1.0}
    out = summarise_game(s, coins, delta=1e-5, claimed_epsilon=4.0, mechanism=mechanism, keep_scores=False)
    assert out["hypothesis_test"]["refuted"] and out["hypothesis_test"]["p_value"] < 0.05
    assert out["certified_epsilon_lower_bound"] < 4.0  # the any-mechanism bound alone does not refute it
    with pytest.raises(ConfigurationError):
        summarise_game(s, coins, delta=1e-5, claimed_epsilon=4.0, mechanism=mechanism, run_ids=np.arange(s.size) % 2)


# ------------------------------------------------------------------ the SGM-family ε lower bound


@pytest.mark.parametrize(
    "q, steps, sigma, ratio",
    # q = 1: the Gaussian pair; q < 1: the subsampled score law (a coarser σ grid keeps the 200
    # accountant calls few: the grid only makes σ* larger, the bound lower)
    [(1.0, 100, 8.0, 1.02), (0.2, 20, 1.0, 1.05)],
)
def test_sgm_bound_exceeds_the_true_epsilon_at_most_at_the_level_and_agrees_with_the_test(q, steps, sigma, ratio):
    true = sgm_epsilon(sigma, q, steps, 1e-5)
    bounds = []
    for seed in range(200):
        s, coins = simulate(1000, sigma, q, steps, seed)
        bound = sgm_epsilon_lower_bound(
            s, coins, sample_rate=q, steps=steps, delta=1e-5, claimed_noise_multiplier=sigma, sigma_ratio=ratio
        )
        # the bound and the test agree: same level, same guesses, the claimed σ among the points tested
        assert (
            bound.refutes_claim == (bound.p_value_at_claim <= 0.05) == (bound.epsilon >= bound.claim_mechanism_epsilon)
        )
        bounds.append(bound.epsilon)
    bounds = np.array(bounds)
    # level 0.05 over 200 runs: the 0.999 binomial quantile is 21
    assert (bounds > true).sum() <= stats.binom.ppf(0.999, 200, 0.05)
    # and it is not vacuous: a bound computed with half the noise (σ*/2 fed to the accountant, or a
    # score law of half the noise, σ* ≈ 2σ) would sit far above the truth or far below this
    assert np.median(bounds) > sgm_epsilon(1.5 * sigma, q, steps, 1e-5)
    assert (bounds > sgm_epsilon(0.5 * sigma, q, steps, 1e-5)).sum() == 0


def test_sgm_bound_agrees_with_the_hypothesis_test_call():
    sigma = 10.81  # mlp-dp on Cora at ε = 4 (q = 1, T = 100)
    for seed, factor in ((0, 1.0), (1, 0.9), (2, 0.8)):
        s, coins = simulate(4000, sigma, 1.0, 100, seed, factor=factor)
        test = sgm_hypothesis_test(s, coins, noise_multiplier=sigma, sample_rate=1.0, steps=100)
        bound = sgm_epsilon_lower_bound(
            s, coins, sample_rate=1.0, steps=100, delta=1e-5, claimed_noise_multiplier=sigma
        )
        assert bound.refutes_claim == test.refuted and bound.p_value_at_claim == test.p_value
        assert (bound.epsilon > 4.0 - 1e-3) == test.refuted
        # the claim's mechanism's ε is the claim, up to calibrate_noise's tolerance
        assert bound.claim_mechanism_epsilon == pytest.approx(4.0, abs=0.01)
        assert bound.to_dict()["label"].startswith("ε lower bound if the run is SGM(σ, q=1, T=100) at the clipping")


@pytest.mark.parametrize("q, steps, claim", [(1.0, 100, 4.0), (0.1, 100, 4.0)])
def test_sgm_bound_at_six_tenths_of_the_noise_exceeds_the_claim(q, steps, claim):
    sigma = claimed_noise_multiplier(claim, 1e-5, q, steps)
    s, coins = simulate(4000, sigma, q, steps, 0, factor=0.6)
    bound = sgm_epsilon_lower_bound(s, coins, sample_rate=q, steps=steps, delta=1e-5, claimed_noise_multiplier=sigma)
    assert bound.refutes_claim and bound.epsilon > claim
    assert bound.noise_multiplier < sigma
    # without a claim the same bound (the grid alone)
    free = sgm_epsilon_lower_bound(s, coins, sample_rate=q, steps=steps, delta=1e-5)
    assert free.refutes_claim is None and free.epsilon == pytest.approx(bound.epsilon, rel=0.03)


def test_sgm_bound_is_zero_when_nothing_is_rejected_and_refuses_bad_input():
    rng = np.random.default_rng(0)
    coins = rng.integers(0, 2, 500).astype(bool)
    bound = sgm_epsilon_lower_bound(rng.normal(size=500) * 1e3, coins, sample_rate=1.0, steps=1, delta=1e-5)
    assert bound.epsilon == 0.0 and bound.noise_multiplier is None
    with pytest.raises(ConfigurationError):
        sgm_epsilon_lower_bound([1.0], [True], sample_rate=1.0, steps=1, delta=0.0)
    with pytest.raises(ConfigurationError):
        sgm_epsilon_lower_bound([1.0], [True], sample_rate=1.0, steps=1, delta=1e-5, sigma_ratio=1.0)


def test_the_canary_record_carries_the_sgm_bound_and_the_mechanism_verdict():
    from dpaudit.auditing.gradient_canary import summarise_game
    from dpaudit.auditing.results import MECHANISM_REFUTED, REFUTING_VERDICTS, verdict_form

    s, coins = simulate(3000, 10.81, 1.0, 100, 0, factor=0.8)
    mechanism = {"noise_multiplier": 10.81, "sample_rate": 1.0, "steps": 100, "max_grad_norm": 1.0}
    out = summarise_game(s, coins, delta=1e-5, claimed_epsilon=4.0, mechanism=mechanism, keep_scores=False)
    assert out["certified_epsilon_lower_bound"] < 4.0 < out["sgm_epsilon_lower_bound"]["epsilon"]
    assert verdict_form(out["verdict"]) == MECHANISM_REFUTED and out["verdict"] not in REFUTING_VERDICTS
    assert f"p = {out['hypothesis_test']['p_value']:.2g})" in out["verdict"]
