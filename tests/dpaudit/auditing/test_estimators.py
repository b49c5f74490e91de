"""ε estimators over audit scores (dpaudit.auditing.estimators): the one-run binomial test against scipy
and brute-force enumeration, the acceptance numbers of issue 15 on a simulated Gaussian
mechanism calibrated by dpaudit.accounting, soundness over seeds, detection of a broken
mechanism (σ halved), and input validation."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from dpaudit.accounting import GaussianMechanism, gaussian_epsilon
from dpaudit.auditing.estimators import (
    EpsilonEstimate,
    EstimatorInputError,
    audit_epsilon,
    binomial_tail,
    default_guess_grid,
    fdp_one_run_lower_bound,
    gdp_estimate,
    multi_run_lower_bound,
    one_run_epsilon,
    one_run_lower_bound,
    one_run_p_value,
    split_guess_grid,
    standardize_per_run,
)
from dpaudit.errors import DPAuditError

CLAIM, DELTA = 4.0, 1e-5


@pytest.fixture(scope="module")
def sigma() -> float:
    """σ of the sensitivity-1 Gaussian mechanism at exactly ε = 4, δ = 1e-5 on the exact Gaussian
    curve of dpaudit.accounting (the "gaussian" analysis of PrivacyLedger; calibrate_noise would
    return the same σ up to its 1e-3 tolerance but takes ~13 s through its PLD evaluations)."""
    s = brentq(lambda x: gaussian_epsilon(GaussianMechanism(x).gdp_mu(), DELTA) - CLAIM, 0.1, 10.0, xtol=1e-12)
    s = s * (1 + 1e-9)  # on the safe side of the root
    assert gaussian_epsilon(GaussianMechanism(s).gdp_mu(), DELTA) <= CLAIM
    assert abs(s - 1.0820) < 2e-3  # calibrate_noise(4, 1e-5, GaussianMechanism) = 1.08204
    return s


def gaussian_canaries(m: int, sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Output of the Gaussian mechanism f(D) + N(0, σ²) for m canaries, f = 1 if included (fair coin)."""
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return included.astype(float) + rng.normal(0.0, sigma, m), included


def randomized_response(epsilon: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each canary reports its coin truthfully with probability e^ε/(1+e^ε): exactly ε-DP per canary."""
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    truthful = rng.random(m) < math.exp(epsilon) / (1 + math.exp(epsilon))
    return np.where(truthful, included, ~included).astype(float), included


# --------------------------------------------------------------------------- binomial tail


@pytest.mark.parametrize("r", [1, 2, 5, 9])
def test_binomial_tail_matches_brute_force_enumeration(r):
    for eps in (0.0, 0.3, 1.7):
        q = math.exp(eps) / (1 + math.exp(eps))
        for v in range(r + 2):
            brute = 0.0
            for outcome in itertools.product((0, 1), repeat=r):
                if sum(outcome) >= v:
                    brute += math.prod(q if o else 1 - q for o in outcome)
            assert binomial_tail(v, r, eps) == pytest.approx(brute, rel=1e-12, abs=1e-15)


def test_binomial_tail_matches_scipy():
    rng = np.random.default_rng(0)
    for _ in range(200):
        r = int(rng.integers(1, 5000))
        v = int(rng.integers(0, r + 1))
        eps = float(rng.uniform(0, 8))
        q = math.exp(eps) / (1 + math.exp(eps))
        expected = stats.binom.sf(v - 1, r, q)
        assert binomial_tail(v, r, eps) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_one_run_p_value_formula_and_monotonicity():
    m, r, v = 500, 60, 52
    for eps in (0.5, 1.0, 2.0):
        q = 1 / (1 + math.exp(-eps))

        def f(u, q=q):  # P[W >= u], W ~ Binomial(r, q)
            return stats.binom.sf(u - 1, r, q)

        naive = f(v) + 2 * m * 1e-4 * max((f(v - i) - f(v)) / i for i in range(1, v + 1))
        assert one_run_p_value(m, r, v, eps, 1e-4) == pytest.approx(min(naive, 1.0), rel=1e-9)
        assert one_run_p_value(m, r, v, eps, 0.0) == pytest.approx(f(v), rel=1e-9)
    # non-decreasing in ε when 2mδ <= 1 (the proof in the docstring), so bisection is exact
    grid = np.linspace(0, 6, 300)
    for delta in (0.0, 1e-5, 1e-3):
        p = [one_run_p_value(m, r, v, e, delta) for e in grid]
        assert np.all(np.diff(p) >= -1e-15)


def test_one_run_epsilon_is_the_rejection_boundary():
    m, r, v, delta, level = 1000, 100, 90, 1e-5, 0.01
    eps, p = one_run_epsilon(m, r, v, delta, level)
    assert eps > 0 and p <= level
    assert one_run_p_value(m, r, v, eps + 1e-5, delta) > level
    # no correct guess beyond chance -> nothing certified
    assert one_run_epsilon(m, r, r // 2, delta, 0.05)[0] == 0.0


# --------------------------------------------------------------------------- acceptance (issue 15)


def test_gaussian_eps4_one_run_and_gdp_reach_issue15_targets(sigma):
    s, y = gaussian_canaries(1000, sigma, seed=1)
    one = one_run_lower_bound(s, y, delta=DELTA, confidence=0.95)
    gdp = gdp_estimate(s, y, delta=DELTA, confidence=0.95)
    assert 1.0 <= one.epsilon_lower_bound <= CLAIM
    assert 2.0 <= gdp.epsilon_lower_bound <= CLAIM
    assert gdp.details["mu_lower_bound"] <= 1 / sigma


def test_gaussian_eps4_multi_run_reaches_issue15_target(sigma):
    n = 200_000  # independent runs, one canary each (the Gaussian is cheap)
    s, y = gaussian_canaries(n, sigma, seed=2)
    est = multi_run_lower_bound(s, y, delta=DELTA, confidence=0.95, run_ids=np.arange(n))
    assert 2.0 <= est.epsilon_lower_bound <= CLAIM


def test_audit_epsilon_bonferroni_and_json(sigma):
    s, y = gaussian_canaries(1000, sigma, seed=3)
    out = audit_epsilon(s, y, delta=DELTA, confidence=0.95, claimed_epsilon=CLAIM)
    assert list(out["estimates"]) == ["one-run", "one-run-fdp", "one-run-fdp-gaussian", "gdp"]
    assert out["skipped"] == {"multi-run": "no run_ids"}
    assert out["confidence_per_estimator"] == pytest.approx(1 - 0.05 / 4)
    for est in out["estimates"].values():
        assert est["confidence"] == pytest.approx(1 - 0.05 / 4)
    bounds = out["epsilon_lower_bound"]
    assert bounds["overall"] == max(v for k, v in bounds.items() if k != "overall")
    assert out["certified_epsilon_lower_bound"] == max(bounds["one-run"], bounds["one-run-fdp"])
    assert out["claim_refuted"] is False
    kinds = {name: est["kind"] for name, est in out["estimates"].items()}
    assert kinds == {
        "one-run": "lower bound",
        "one-run-fdp": "lower bound",
        "one-run-fdp-gaussian": "estimate",
        "gdp": "estimate",
    }
    json.dumps(out, allow_nan=False)


def test_audit_epsilon_runs_every_estimator_at_alpha_over_k(sigma):
    """Bonferroni over every estimator reported: with k estimators each runs at α/k, so the
    certified maximum holds at 1 − α. Each reported bound equals the estimator run alone at
    1 − α/k and is strictly below the same estimator at 1 − α (which a missing split would report)."""
    s, y = gaussian_canaries(1000, sigma, seed=11)
    runs = np.repeat(np.arange(500), 2)
    for kwargs, k in (({}, 4), ({"run_ids": runs, "per_run": "sample"}, 5), ({"estimators": ("one-run-fdp",)}, 1)):
        out = audit_epsilon(s, y, delta=DELTA, confidence=0.9, **kwargs)
        assert len(out["estimates"]) == k and out["confidence_per_estimator"] == pytest.approx(1 - 0.1 / k)
        assert f"k = {k}" in out["multiple_testing"]
    out = audit_epsilon(s, y, delta=DELTA, confidence=0.9)
    split, full = 1 - 0.1 / 4, 0.9
    pairs = {
        "one-run": lambda c: one_run_lower_bound(s, y, delta=DELTA, confidence=c),
        "one-run-fdp": lambda c: fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=c),
        "one-run-fdp-gaussian": lambda c: fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=c, tradeoff="gaussian"),
        "gdp": lambda c: gdp_estimate(s, y, delta=DELTA, confidence=c),
    }
    for name, run in pairs.items():
        alone = run(split).epsilon_lower_bound
        assert out["epsilon_lower_bound"][name] == pytest.approx(alone, abs=1e-9), name
        assert alone < run(full).epsilon_lower_bound, name
    assert out["certified_epsilon_lower_bound"] < max(
        pairs[n](full).epsilon_lower_bound for n in ("one-run", "one-run-fdp")
    )


# --------------------------------------------------------------------------- soundness


def test_no_estimator_exceeds_the_claim_over_50_seeds(sigma):
    exceed = {"one-run": 0, "multi-run": 0, "gdp": 0}
    for seed in range(50):
        s, y = gaussian_canaries(1000, sigma, seed=100 + seed)
        exceed["one-run"] += one_run_lower_bound(s, y, delta=DELTA).epsilon_lower_bound > CLAIM
        exceed["gdp"] += gdp_estimate(s, y, delta=DELTA).epsilon_lower_bound > CLAIM
        s, y = gaussian_canaries(20_000, sigma, seed=1000 + seed)
        exceed["multi-run"] += (
            multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.arange(s.size)).epsilon_lower_bound > CLAIM
        )
    assert all(count <= 2 for count in exceed.values()), exceed  # <= 5 % of 50; observed 0


def test_one_run_sound_on_exact_randomized_response():
    """ε-DP randomized response is the worst case of the one-run test: with a single
    pre-registered guess count the bound exceeds the true ε in at most ~5 % of trials."""
    eps0, trials, over = 1.0, 200, 0
    for seed in range(trials):
        s, y = randomized_response(eps0, 400, seed)
        est = one_run_lower_bound(s, y, delta=0.0, confidence=0.95, guesses=[(200, 200)], seed=seed)
        over += est.epsilon_lower_bound > eps0
    assert over <= 0.05 * trials + 3 * math.sqrt(0.05 * 0.95 * trials)


def test_multi_run_sound_on_exact_randomized_response():
    over = 0
    for seed in range(40):
        s, y = randomized_response(1.0, 4000, seed)
        over += multi_run_lower_bound(s, y, delta=0.0, run_ids=np.arange(4000), seed=seed).epsilon_lower_bound > 1.0
    assert over <= 4


def test_ties_never_leak_the_coin_order():
    """Constant scores with coins listed in order: a tie-break by position would guess perfectly."""
    y = np.r_[np.ones(500, bool), np.zeros(500, bool)]
    s = np.zeros(1000)
    assert one_run_lower_bound(s, y, delta=DELTA).epsilon_lower_bound == 0.0
    assert gdp_estimate(s, y, delta=DELTA).epsilon_lower_bound == 0.0


# --------------------------------------------------------------------------- power on a broken mechanism


def test_sigma_halved_is_caught(sigma):
    broken = sigma / 2  # true ε ≈ 9.1 at δ = 1e-5, claimed 4
    s, y = gaussian_canaries(1000, broken, seed=5)
    assert gdp_estimate(s, y, delta=DELTA).epsilon_lower_bound > CLAIM
    n = 200_000
    s, y = gaussian_canaries(n, broken, seed=6)
    out = audit_epsilon(s, y, delta=DELTA, run_ids=np.arange(n), claimed_epsilon=CLAIM, estimators=("multi-run", "gdp"))
    assert out["epsilon_lower_bound"]["multi-run"] > CLAIM
    assert out["claim_refuted"] is True
    assert out["epsilon_lower_bound"]["multi-run"] < gaussian_epsilon(2 / sigma, DELTA)


# --------------------------------------------------------------------------- multi-run trials


def test_multi_run_refuses_several_canaries_per_run_unless_sampled(sigma):
    s, y = gaussian_canaries(4000, sigma, seed=7)
    runs = np.repeat(np.arange(1000), 4)
    with pytest.raises(EstimatorInputError, match="not independent"):
        multi_run_lower_bound(s, y, delta=DELTA, run_ids=runs)
    est = multi_run_lower_bound(s, y, delta=DELTA, run_ids=runs, per_run="sample")
    assert est.details["trials"] == 1000
    out = audit_epsilon(s, y, delta=DELTA, run_ids=runs)
    assert "multi-run" in out["skipped"]
    with pytest.raises(EstimatorInputError):
        audit_epsilon(s, y, delta=DELTA, run_ids=runs, estimators=("multi-run",))


def test_multi_run_pre_registered_thresholds(sigma):
    s, y = gaussian_canaries(50_000, sigma, seed=8)
    est = multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.arange(s.size), thresholds=[2.0, 3.0, 4.0])
    assert est.details["mode"] == "pre-registered thresholds"
    assert 0.5 < est.epsilon_lower_bound <= CLAIM


# --------------------------------------------------------------------------- API and validation


def test_estimate_dict_shape():
    s, y = gaussian_canaries(200, 0.5, seed=9)
    est = one_run_lower_bound(s, y, delta=DELTA)
    assert isinstance(est, EpsilonEstimate)
    d = est.to_dict()
    assert set(d) >= {"estimator", "epsilon_lower_bound", "confidence", "delta", "details", "assumptions"}
    assert d["estimator"] == "one-run" and d["epsilon_lower_bound"] >= 0
    assert "fair coin" in d["assumptions"]
    json.dumps(d, allow_nan=False)
    assert len(default_guess_grid(200)) + len(split_guess_grid(200)) == est.details["grid_size"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scores": [0.1, float("nan")], "included": [True, False]}, "finite"),
        ({"scores": [0.1, 0.2, 0.3], "included": [True, False]}, "differ in length"),
        ({"scores": [0.1, 0.2], "included": [1, 2]}, "booleans"),
        ({"scores": [0.1, 0.2], "included": [0.5, 1.0]}, "booleans"),
        ({"scores": [0.1, 0.2], "included": ["yes", "no"]}, "booleans"),
        ({"scores": [], "included": []}, "no scores"),
        ({"scores": ["a", "b"], "included": [True, False]}, "numbers"),
        ({"scores": [0.1, 0.2], "included": [True, False], "delta": 1.5}, "delta"),
        ({"scores": [0.1, 0.2], "included": [True, False], "confidence": 1.0}, "confidence"),
    ],
)
def test_bad_input_is_a_one_line_dpaudit_error(kwargs, message):
    kwargs = dict({"delta": DELTA}, **kwargs)
    for fn in (one_run_lower_bound, gdp_estimate, audit_epsilon):
        with pytest.raises(DPAuditError, match=message):
            fn(**kwargs)


def test_bad_estimator_specific_input():
    s, y = gaussian_canaries(100, 1.0, seed=10)
    with pytest.raises(EstimatorInputError, match="run_ids"):
        multi_run_lower_bound(s, y, delta=DELTA)
    with pytest.raises(EstimatorInputError, match="more than one"):
        multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.zeros(100))
    with pytest.raises(EstimatorInputError, match="length"):
        multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.arange(99))
    with pytest.raises(EstimatorInputError, match="per_run"):
        multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.arange(100), per_run="all")
    with pytest.raises(EstimatorInputError, match="pairs"):
        one_run_lower_bound(s, y, delta=DELTA, guesses=[(1, 2, 3)])
    with pytest.raises(EstimatorInputError, match="guess counts"):
        one_run_lower_bound(s, y, delta=DELTA, guesses=[(80, 30)])
    with pytest.raises(EstimatorInputError, match="quantiles"):
        gdp_estimate(s, y, delta=DELTA, quantiles=[0.0, 0.5])
    with pytest.raises(EstimatorInputError, match="estimators"):
        audit_epsilon(s, y, delta=DELTA, estimators=("lira",))
    with pytest.raises(EstimatorInputError, match="thresholds"):
        multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.arange(100), thresholds=["x"])
    with pytest.raises(EstimatorInputError, match="thresholds"):
        gdp_estimate(s, y, delta=DELTA, thresholds=[])
    with pytest.raises(EstimatorInputError, match="seed"):
        one_run_lower_bound(s, y, delta=DELTA, seed=-1)
    with pytest.raises(EstimatorInputError, match="max_candidates"):
        multi_run_lower_bound(s, y, delta=DELTA, run_ids=np.arange(100), max_candidates=1)
    with pytest.raises(EstimatorInputError, match="both coin values"):
        gdp_estimate(s, np.ones(100, bool), delta=DELTA)


def test_one_run_epsilon_scan_when_two_m_delta_exceeds_one():
    m, r, v, delta, level = 100_000, 2000, 1990, 1e-5, 0.05  # 2mδ = 2: p-value not provably monotone
    eps, p = one_run_epsilon(m, r, v, delta, level)
    assert eps > 0 and p <= level
    assert one_run_p_value(m, r, v, eps + 0.01, delta) > level
    grid = np.arange(0.0, eps, 0.01)
    assert all(one_run_p_value(m, r, v, float(e), delta) <= level for e in grid)


def test_one_run_delta_term_absorbs_leaks():
    """Per canary: with probability δ the coin is published outright (score ±10), otherwise the
    output is pure noise — a (0, δ)-DP mechanism. The δ term keeps the bound at 0; the same test
    analysed as pure DP (δ = 0) is fooled whenever 8 canaries leak."""
    delta, m, trials = 0.01, 1000, 60
    fooled = over = 0
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        y = rng.random(m) < 0.5
        leak = rng.random(m) < delta
        s = np.where(leak, np.where(y, 10.0, -10.0), rng.normal(0.0, 1.0, m))
        over += one_run_lower_bound(s, y, delta=delta, guesses=[(8, 0)]).epsilon_lower_bound > 0
        fooled += one_run_lower_bound(s, y, delta=0.0, guesses=[(8, 0)]).epsilon_lower_bound > 0
    assert over <= 3
    assert fooled >= trials // 3


def test_public_helpers_validate_their_arguments():
    with pytest.raises(EstimatorInputError):
        one_run_p_value(10, 20, 5, 1.0, 1e-5)  # r > m
    with pytest.raises(EstimatorInputError):
        one_run_p_value(10, 5, 2, -1.0, 1e-5)
    with pytest.raises(EstimatorInputError):
        one_run_epsilon(10, 5, 2, 1e-5, 1.5)
    with pytest.raises(EstimatorInputError):
        binomial_tail(2, 5.5, 1.0)


def test_standardize_per_run_removes_run_offsets(sigma):
    """Five 'models' whose scores are shifted by very different offsets: pooled raw scores mostly
    rank the runs, per-run standardized scores rank the canaries."""
    parts = [gaussian_canaries(400, sigma, seed=20 + k) for k in range(5)]
    offsets = np.array([0.0, 5.0, -5.0, 10.0, -10.0])
    s = np.concatenate([p[0] + off for p, off in zip(parts, offsets)])
    y = np.concatenate([p[1] for p in parts])
    runs = np.repeat(np.arange(5), 400)
    raw = audit_epsilon(s, y, delta=DELTA, run_ids=runs)
    std = audit_epsilon(s, y, delta=DELTA, run_ids=runs, standardize=True)
    assert std["standardized_per_run"] is True and raw["standardized_per_run"] is False
    assert std["epsilon_lower_bound"]["one-run"] > raw["epsilon_lower_bound"]["one-run"] + 0.3
    assert std["epsilon_lower_bound"]["overall"] <= CLAIM
    z = standardize_per_run(s, runs)
    for k in range(5):
        assert np.median(z[runs == k]) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(EstimatorInputError, match="run_ids"):
        audit_epsilon(s, y, delta=DELTA, standardize=True)


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    s, y = gaussian_canaries(300, 1.0, seed=11)
    a = one_run_lower_bound(torch.tensor(s), torch.tensor(y), delta=DELTA)
    b = one_run_lower_bound(s, y, delta=DELTA)
    assert a.epsilon_lower_bound == b.epsilon_lower_bound


def test_vectorized_p_values_match_the_scalar_ones():
    from dpaudit.auditing.estimators import _log_binom_coefficients, _one_run_p_values

    m, r, v = 5000, 300, 270
    eps = np.linspace(0.0, 6.0, 37)
    for delta in (0.0, 1e-5, 1e-3):
        vec = _one_run_p_values(m, r, v, eps, delta, _log_binom_coefficients(r))
        scalar = [one_run_p_value(m, r, v, float(e), delta) for e in eps]
        np.testing.assert_allclose(vec, scalar, rtol=1e-9, atol=1e-300)


def test_gdp_is_only_an_estimate_it_overstates_randomized_response():
    """ε-DP randomized response is not Gaussian-shaped: its single ROC corner maps to a large μ,
    so the GDP 'estimate' exceeds the true ε = 2 while the certified one-run bound does not.
    This is why audit_epsilon's claim_refuted uses only the rigorous estimators."""
    s, y = randomized_response(2.0, 4000, seed=12)
    out = audit_epsilon(s, y, delta=DELTA, claimed_epsilon=2.0)
    assert out["epsilon_lower_bound"]["gdp"] > 2.0
    assert out["epsilon_lower_bound"]["one-run"] <= 2.0
    assert out["estimate_exceeds_claim"] is True and out["claim_refuted"] is False


def test_max_possible_is_what_a_perfect_attack_gets(sigma):
    m = 1000
    y = np.random.default_rng(13).random(m) < 0.5
    perfect = y.astype(float)  # scores that separate the coins exactly
    one = one_run_lower_bound(perfect, y, delta=DELTA)
    assert 0.8 * one.details["max_possible"] < one.epsilon_lower_bound <= one.details["max_possible"]
    k = int(y.sum())  # guessing exactly the included ones "in" reaches the ceiling of r = k guesses
    exact = one_run_lower_bound(perfect, y, delta=DELTA, guesses=[(k, 0)])
    assert exact.epsilon_lower_bound == pytest.approx(exact.details["max_possible"], abs=1e-6)
    gdp = gdp_estimate(perfect, y, delta=DELTA)
    assert gdp.epsilon_lower_bound == pytest.approx(gdp.details["max_possible"], rel=1e-9)
    n = 2000
    yr = np.random.default_rng(14).random(n) < 0.5
    mr = multi_run_lower_bound(yr.astype(float), yr, delta=DELTA, run_ids=np.arange(n))
    assert mr.epsilon_lower_bound == pytest.approx(mr.details["max_possible"], rel=1e-9)
    # a real attack stays below its ceiling
    s, y = gaussian_canaries(m, sigma, seed=15)
    out = audit_epsilon(s, y, delta=DELTA, claimed_epsilon=CLAIM)
    for name, ceiling in out["max_possible"].items():
        assert out["epsilon_lower_bound"][name] <= ceiling + 1e-9
    assert out["can_refute_claim"] is True  # one-run ceiling 4.85 > 4 with 1000 canaries
    # 200 canaries cannot certify ε = 4 whatever the attack: the audit says so
    s, y = gaussian_canaries(200, sigma / 10, seed=16)
    out = audit_epsilon(s, y, delta=DELTA, claimed_epsilon=CLAIM)
    assert out["max_possible"]["one-run"] < CLAIM and out["can_refute_claim"] is False
    assert out["claim_refuted"] is False and out["estimate_exceeds_claim"] is True
