"""The f-DP one-run audit (Mahloujifar, Melis & Chaudhuri 2024; dpaudit.auditing.fdp_one_run and
dpaudit.auditing.estimators.fdp_one_run_lower_bound): the float recursion against exact rational
arithmetic, the bound against the exact law of the one-run game under the worst-case mechanisms
(randomized response, with and without a δ reveal) and under the product Gaussian mechanism,
monotonicity, the bisection, soundness on a Gaussian mechanism of known ε, and the estimator's
record."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from dpaudit.accounting import gaussian_epsilon
from dpaudit.auditing.estimators import (
    EstimatorInputError,
    audit_epsilon,
    fdp_guess_grid,
    fdp_one_run_lower_bound,
    one_run_lower_bound,
)
from dpaudit.auditing.fdp_one_run import (
    epsilon_delta_inverse,
    fdp_epsilon,
    fdp_gaussian_mu,
    fdp_rejects,
    gaussian_inverse,
    implied_p_value,
)

DELTA = 1e-5


def exact_threshold_at_epsilon_zero(m: int, r: int, v: int) -> Fraction:
    """The smallest τ the recursion rejects for f(x) = 1 − x (ε = 0, δ = 0: f̄⁻¹(y) = y), in exact
    rational arithmetic. Everything is then linear in τ, so τ* = τ / (ρ₀ + η₀) · r/m."""
    tau = Fraction(1)
    rho, eta = tau * v / m, tau * (r - v) / m
    for i in range(v - 1, -1, -1):
        new_eta = max(eta, rho)
        rho, eta = rho + Fraction(i, r - i) * (new_eta - eta), new_eta
    return tau * Fraction(r, m) / (rho + eta)


@pytest.mark.parametrize(
    ("m", "r", "v"), [(100, 100, 96), (100, 100, 90), (20, 20, 18), (10, 10, 9), (6, 6, 5), (50, 20, 15)]
)
def test_float_recursion_agrees_with_exact_arithmetic(m, r, v):
    """At ε = 0 a cancellation in 1 − δ − e^ε(1 − y) once inflated f̄⁻¹ of tiny masses and rejected
    (100, 100, 96) at 1 % below the exact threshold: an over-stated bound."""
    threshold = float(exact_threshold_at_epsilon_zero(m, r, v))
    inverse = epsilon_delta_inverse(0.0)
    assert not fdp_rejects(m, r, v, threshold * (1 - 1e-6), inverse, 0.0)[0]
    assert fdp_rejects(m, r, v, threshold * (1 + 1e-6), inverse, 0.0)[0]


def exact_randomized_response_tail(m: int, r: int, epsilon: float) -> np.ndarray:
    """P[V ≥ v], v = 0..r, by enumerating every coin vector and every flip of ε-randomized
    response over m canaries; the auditor guesses the reported bit of the first r, abstains on the rest."""
    q = math.exp(epsilon) / (1 + math.exp(epsilon))
    law = np.zeros(r + 1)
    for coins in itertools.product((0, 1), repeat=m):
        for flips in itertools.product((0, 1), repeat=m):
            reported = [c ^ f for c, f in zip(coins, flips)]
            right = sum(reported[i] == coins[i] for i in range(r))
            law[right] += 0.5**m * math.prod(q if f == 0 else 1 - q for f in flips)
    return law[::-1].cumsum()[::-1]


@pytest.mark.parametrize("m", [3, 4, 5])
def test_pure_dp_bound_against_brute_force_randomized_response(m):
    """ε-DP randomized response attains the pure-DP curve, so the test's p-value must be at least
    the exact probability of its guess count (sound), and it is within 1.5× of it (tight)."""
    for r, epsilon in itertools.product(range(1, m + 1), (0.0, 0.7, 2.0)):
        tail = exact_randomized_response_tail(m, r, epsilon)
        for v in range(r + 1):
            p = implied_p_value(m, r, v, epsilon_delta_inverse(0.0), epsilon)
            assert tail[v] * (1 - 1e-9) <= p <= 1.5 * tail[v], (m, r, v, epsilon, p, tail[v])


def first_exceeding(values: np.ndarray, truth: float) -> int:
    """Smallest correct-guess count whose bound exceeds ``truth`` (len(values) when none does)."""
    above = np.flatnonzero(values > truth)
    return int(above[0]) if above.size else values.size


@pytest.mark.parametrize(
    ("m", "r", "epsilon", "delta", "level"),
    [
        (1000, 100, 1.0, 0.0, 0.05),
        (1000, 100, 1.0, 1e-3, 0.05),
        (400, 400, 2.0, 1e-4, 0.05),
        (200, 50, 0.5, 0.0, 0.01),
        (1000, 1000, 1.0, 1e-5, 0.05),
    ],
)
def test_epsilon_delta_bound_exceeds_the_truth_with_probability_at_most_level(m, r, epsilon, delta, level):
    """Exact soundness under the worst (ε, δ)-DP mechanism (reveal the coin with probability δ,
    else ε-randomized response): each of r guesses is right with probability δ + (1 − δ)e^ε/(1+e^ε),
    independently. P[ε_LB > ε] is the binomial tail from the first count whose bound exceeds ε;
    measured 0.014-0.040 against 0.05 (0.0056 against 0.01), so a looser bound would fail."""
    bounds = fdp_epsilon(m, np.full(r + 1, r), np.arange(r + 1), delta, level, 50.0)
    assert np.all(np.diff(bounds) >= 0)
    q = delta + (1 - delta) * math.exp(epsilon) / (1 + math.exp(epsilon))
    v_star = first_exceeding(bounds, epsilon)
    assert stats.binom.sf(v_star - 1, r, q) <= level


@pytest.mark.parametrize(("m", "mu"), [(200, 1.0), (1000, 0.5), (2000, 0.3)])
def test_gaussian_test_rejects_the_true_mu_with_probability_at_most_level(m, mu):
    """The product Gaussian mechanism is μ-GDP per canary; guessing every canary by the sign of
    its centred output is right with probability Φ(μ/2), independently. μ_LB > μ needs the test
    to reject μ itself (rejections form an interval from 0), so P[reject μ] bounds P[μ_LB > μ]."""
    rejected = fdp_rejects(m, m, np.arange(m + 1), 0.05, gaussian_inverse, mu)
    assert rejected[-1] and not rejected[m // 2]
    v_star = first_exceeding(rejected.astype(float), 0.5)
    assert not rejected[:v_star].any() and rejected[v_star:].all()
    assert stats.binom.sf(v_star - 1, m, stats.norm.cdf(mu / 2)) <= 0.05


def test_more_correct_guesses_and_a_larger_level_give_larger_bounds():
    m, r = 1000, 200
    v = np.arange(100, r + 1)
    for bounds in (
        fdp_epsilon(m, np.full(v.size, r), v, DELTA, 0.01, 50.0),
        fdp_gaussian_mu(m, np.full(v.size, r), v, 0.01, 50.0),
    ):
        assert np.all(np.diff(bounds) >= 0)
        assert bounds[0] == 0.0 and bounds[-1] > 1.0
    strict = fdp_epsilon(m, [r], [170], DELTA, 0.001, 50.0)[0]
    loose = fdp_epsilon(m, [r], [170], DELTA, 0.05, 50.0)[0]
    assert 0 < strict < loose


def test_bisection_returns_the_edge_of_the_rejected_interval():
    m, r, v, level = 1000, 100, 85, 0.01
    eps = fdp_epsilon(m, [r], [v], DELTA, level, 50.0)[0]
    assert fdp_rejects(m, r, v, level, epsilon_delta_inverse(DELTA), eps)[0]
    assert not fdp_rejects(m, r, v, level, epsilon_delta_inverse(DELTA), eps + 1e-5)[0]
    mu = fdp_gaussian_mu(m, [r], [v], level, 50.0)[0]
    assert fdp_rejects(m, r, v, level, gaussian_inverse, mu)[0]
    assert not fdp_rejects(m, r, v, level, gaussian_inverse, mu + 1e-5)[0]
    assert implied_p_value(m, r, v, gaussian_inverse, mu) <= level


# --------------------------------------------------------------------------- the estimator


def gaussian_canaries(m: int, mu: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return included * mu + rng.standard_normal(m), included


MU_AT_EPS4 = 0.9249308976669359  # μ of the Gaussian mechanism that is exactly (4, 1e-5)-DP


def test_mu_constant_is_the_calibrated_gaussian():
    assert gaussian_epsilon(MU_AT_EPS4, DELTA) == pytest.approx(4.0, abs=1e-9)


def test_never_certifies_above_the_true_epsilon_of_a_gaussian_mechanism():
    """Gaussian mechanism at ε = 4, δ = 1e-5 (μ = 0.925), 1,000 canaries, 8 seeds: neither
    estimator certifies more than the truth (over bench_estimators' 50 seeds: max 2.07 for (ε, δ),
    3.16 for the Gaussian curve), and the Gaussian f-DP test beats Steinke et al. on median."""
    ours, steinke = [], []
    for seed in range(8):
        s, y = gaussian_canaries(1000, MU_AT_EPS4, seed)
        eps_delta = fdp_one_run_lower_bound(s, y, delta=DELTA)
        gauss = fdp_one_run_lower_bound(s, y, delta=DELTA, tradeoff="gaussian")
        assert eps_delta.epsilon_lower_bound <= 4.0
        assert gauss.epsilon_lower_bound <= 4.0 and gauss.details["mu_lower_bound"] <= MU_AT_EPS4
        assert gauss.epsilon_lower_bound == pytest.approx(gaussian_epsilon(gauss.details["mu_lower_bound"], DELTA))
        ours.append(gauss.epsilon_lower_bound)
        steinke.append(one_run_lower_bound(s, y, delta=DELTA).epsilon_lower_bound)
    assert np.median(ours) > np.median(steinke) + 0.3


def test_sigma_halved_refutes_the_mu_gdp_claim():
    """σ halved: μ doubles (true ε 9.1); the certified μ_LB exceeds the claimed μ."""
    s, y = gaussian_canaries(1000, 2 * MU_AT_EPS4, seed=5)
    gauss = fdp_one_run_lower_bound(s, y, delta=DELTA, tradeoff="gaussian")
    assert gauss.details["mu_lower_bound"] > MU_AT_EPS4 and gauss.epsilon_lower_bound > 4.0


def test_estimator_record_grid_and_kind():
    s, y = gaussian_canaries(1000, MU_AT_EPS4, seed=1)
    est = fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=0.9)
    gauss = fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=0.9, tradeoff="gaussian")
    grid = fdp_guess_grid(1000)
    assert grid == [70, 150] and fdp_guess_grid(100) == [10, 15] and fdp_guess_grid(5) == [5]
    for e in (est, gauss):
        d = e.details
        # the grid at 80 % of β, the two-cluster split rule's counts (1,000, 900, 800) at 20 %
        assert d["grid_size"] == len(grid) + 3 and d["level_per_test"] == pytest.approx(0.1 * 0.8 / len(grid))
        assert [row["r"] for row in d["tried"]] == grid + [1000, 900, 800]
        assert [row["rule"] for row in d["tried"]] == ["extremes"] * 2 + ["two-cluster split"] * 3
        assert all(row["k_plus"] + row["k_minus"] == row["r"] for row in d["tried"])
        assert [row["level"] for row in d["tried"]] == pytest.approx([0.04, 0.04] + [0.1 * 0.2 / 3] * 3)
        assert sum(row["level"] for row in d["tried"]) == pytest.approx(0.1)
        assert e.epsilon_lower_bound == max(row["epsilon"] for row in d["tried"])
        assert d["chosen"]["p_value"] <= d["chosen"]["level"]
        assert 0 < e.epsilon_lower_bound <= d["max_possible"]
        json.dumps(e.to_dict(), allow_nan=False)
    assert (est.estimator, est.to_dict()["kind"]) == ("one-run-fdp", "lower bound")
    assert (gauss.estimator, gauss.to_dict()["kind"]) == ("one-run-fdp-gaussian", "estimate")
    assert gauss.details["max_possible_mu"] >= gauss.details["mu_lower_bound"]
    single = fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=0.9, guesses=[150])
    assert single.details["level_per_test"] == pytest.approx(0.1)
    assert single.epsilon_lower_bound >= est.details["tried"][1]["epsilon"]
    mixed = fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=0.9, guesses=[(50, 0), 150, np.int64(70)])
    assert [(row["rule"], row["r"]) for row in mixed.details["tried"]] == [
        ("top/bottom ranks", 50),
        ("extremes", 150),
        ("extremes", 70),
    ]
    assert mixed.details["tried"][0]["k_minus"] == 0
    same = {"epsilon": mixed.details["tried"][1]["epsilon"], "level": pytest.approx(0.1 / 3)}
    assert mixed.details["tried"][1] == dict(est.details["tried"][1], **same)  # explicit guesses: no split rule


def test_perfect_guesses_reach_the_ceiling_and_ties_leak_nothing():
    y = np.r_[np.ones(500, bool), np.zeros(500, bool)]
    perfect = fdp_one_run_lower_bound(y.astype(float), y, delta=DELTA, guesses=[(250, 250)])
    assert perfect.epsilon_lower_bound == pytest.approx(perfect.details["max_possible"])
    tied = np.zeros(1000)
    for tradeoff in ("epsilon-delta", "gaussian"):
        assert fdp_one_run_lower_bound(tied, y, delta=DELTA, tradeoff=tradeoff).epsilon_lower_bound == 0.0


def test_delta_zero_gaussian_is_capped_and_bad_input_is_refused():
    s, y = gaussian_canaries(1000, 3.0, seed=2)
    est = fdp_one_run_lower_bound(s, y, delta=0.0, tradeoff="gaussian")
    assert est.details["mu_lower_bound"] > 0 and est.epsilon_lower_bound == 50.0
    with pytest.raises(EstimatorInputError, match="tradeoff"):
        fdp_one_run_lower_bound(s, y, delta=DELTA, tradeoff="laplace")
    for bad in ([(900, 200)], [1001], [0], [(-1, 5)]):
        with pytest.raises(EstimatorInputError, match="guess counts"):
            fdp_one_run_lower_bound(s, y, delta=DELTA, guesses=bad)
    for bad in ([(1, 2, 3)], ["ab"], [True], 5, []):
        with pytest.raises(EstimatorInputError, match="guess"):
            fdp_one_run_lower_bound(s, y, delta=DELTA, guesses=bad)
    with pytest.raises(EstimatorInputError, match="delta"):
        fdp_one_run_lower_bound(s, y, delta=1.5)


def test_audit_epsilon_refutes_a_mu_gdp_claim_only_when_broken():
    """An exact Gaussian mechanism claims μ-GDP as well as (ε, δ): σ halved is refuted through the
    certified μ (its certified ε stays below 4: issue 25's "σ halved is never certified"); the
    sound mechanism is not, over a few seeds."""
    s, y = gaussian_canaries(1000, 2 * MU_AT_EPS4, seed=7)
    broken = audit_epsilon(s, y, delta=DELTA, claimed_epsilon=4.0, claimed_mu=MU_AT_EPS4)
    assert broken["certified_epsilon_lower_bound"] <= 4.0
    assert broken["mu_claim_refuted"] and broken["claim_refuted"] and broken["can_refute_claim"]
    assert (
        broken["certified_mu_lower_bound"] == broken["estimates"]["one-run-fdp-gaussian"]["details"]["mu_lower_bound"]
    )
    assert audit_epsilon(s, y, delta=DELTA, claimed_epsilon=4.0)["claim_refuted"] is False
    for seed in range(4):
        s, y = gaussian_canaries(1000, MU_AT_EPS4, seed=20 + seed)
        sound = audit_epsilon(s, y, delta=DELTA, claimed_epsilon=4.0, claimed_mu=MU_AT_EPS4)
        assert not sound["mu_claim_refuted"] and not sound["claim_refuted"]
    with pytest.raises(EstimatorInputError, match="claimed_mu"):
        audit_epsilon(s, y, delta=DELTA, claimed_mu=-1.0)
    with pytest.raises(EstimatorInputError, match="one-run-fdp-gaussian"):
        audit_epsilon(s, y, delta=DELTA, claimed_mu=1.0, estimators=("one-run",))


# --------------------------------------------------------------------------- the extremes rule


def test_extremes_rule_reads_the_split_from_the_scores_alone():
    """The r scores farthest from the median are guessed, "in" above it: symmetric scores give a
    near-even split, members standing out in the upper tail an "in"-heavy one. The coins only
    count the right guesses: flipping every coin leaves the guesses (k₊, k₋) unchanged and turns
    v into r − v."""
    s, y = gaussian_canaries(1000, MU_AT_EPS4, seed=3)
    (row,) = fdp_one_run_lower_bound(s, y, delta=DELTA, guesses=[150]).details["tried"]
    assert 55 <= row["k_plus"] <= 95
    flipped = fdp_one_run_lower_bound(s, ~y, delta=DELTA, guesses=[150]).details["tried"][0]
    assert (flipped["k_plus"], flipped["k_minus"]) == (row["k_plus"], row["k_minus"])
    assert flipped["correct"] == 150 - row["correct"]
    heavy = s + 4.0 * (y & (np.arange(1000) % 5 == 0))  # a fifth of the members stand out
    (row,) = fdp_one_run_lower_bound(heavy, y, delta=DELTA, guesses=[70]).details["tried"]
    assert row["k_plus"] >= 60 and row["correct"] >= 60


def test_extremes_rule_beats_the_fixed_split_grid_it_replaced():
    """Gaussian mechanism at ε = 4, 1,000 canaries, 9 seeds outside bench_estimators': the default
    grid (r = 70, 150 by the extremes rule, each at β/2) against the previous default (five fixed
    splits, each at β/5): median Gaussian-curve ε 2.08 vs 1.87 measured, and the (ε, δ) curve
    gains too."""
    previous = [(25, 25), (50, 50), (100, 100), (50, 0), (100, 0)]
    now, before, now_ed, before_ed = [], [], [], []
    for seed in range(100, 109):
        s, y = gaussian_canaries(1000, MU_AT_EPS4, seed)
        now.append(fdp_one_run_lower_bound(s, y, delta=DELTA, tradeoff="gaussian").epsilon_lower_bound)
        before.append(
            fdp_one_run_lower_bound(s, y, delta=DELTA, tradeoff="gaussian", guesses=previous).epsilon_lower_bound
        )
        now_ed.append(fdp_one_run_lower_bound(s, y, delta=DELTA).epsilon_lower_bound)
        before_ed.append(fdp_one_run_lower_bound(s, y, delta=DELTA, guesses=previous).epsilon_lower_bound)
    assert np.median(now) >= 2.0 > np.median(before)
    assert np.median(now_ed) > np.median(before_ed)


def mu_at(epsilon: float) -> float:
    """μ of the Gaussian mechanism that is exactly (ε, 1e-5)-DP."""
    return brentq(lambda mu: gaussian_epsilon(mu, DELTA) - epsilon, 1e-3, 20.0, xtol=1e-12)


@pytest.mark.parametrize("epsilon", [1.0, 4.0, 8.0])
def test_certified_mu_exceeds_the_truth_at_most_at_rate_beta(epsilon):
    """Sound Gaussian mechanism (exactly (ε, 1e-5)-DP, so exactly μ-GDP), 1,000 canaries, 40
    seeds, confidence 0.95: the seeds whose certified μ, or either estimator's ε, exceeds the
    truth are at most the 99.9 % quantile of Binomial(40, 0.05). Measured: none (the recursion is
    conservative for independent canaries); a guesser that reads the coins fails it at ε = 1 and
    4 (at ε = 8 the truth is above what 150 right guesses can certify)."""
    mu = mu_at(epsilon)
    over_mu = over_eps = 0
    for seed in range(1000, 1040):
        s, y = gaussian_canaries(1000, mu, seed)
        gauss = fdp_one_run_lower_bound(s, y, delta=DELTA, tradeoff="gaussian")
        eps_delta = fdp_one_run_lower_bound(s, y, delta=DELTA)
        over_mu += gauss.details["mu_lower_bound"] > mu
        over_eps += gauss.epsilon_lower_bound > epsilon or eps_delta.epsilon_lower_bound > epsilon
    assert over_mu <= stats.binom.ppf(0.999, 40, 0.05)
    assert over_eps <= stats.binom.ppf(0.999, 40, 0.05)
