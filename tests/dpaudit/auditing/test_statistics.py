"""Audit statistics: ceilings against hand-computed values, the empirical ε lower bound on
synthetic scores with known separation and on a simulated randomized-response mechanism,
bootstrap coverage, coverage logic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.accounting import PrivacySpec
from dpaudit.auditing.intervals import clopper_pearson_lower, clopper_pearson_upper
from dpaudit.auditing.statistics import (
    advantage,
    auc,
    auc_ceiling,
    bootstrap_auc_ci,
    coverage,
    epsilon_lower_bound,
    gdp_auc_ceiling,
    gdp_tpr_ceiling,
    pair_test_counts,
    pair_test_epsilon,
    pair_test_from_counts,
    pair_test_lower_bound,
    summarize_runs,
    tpr_at_fpr,
    tpr_ceiling,
)
from dpaudit.errors import DPAuditError


def gaussian_scores(shift: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    scores = np.concatenate([rng.normal(shift, 1.0, n), rng.normal(0.0, 1.0, n)])
    labels = np.concatenate([np.ones(n), np.zeros(n)])
    return scores, labels


def randomized_response(epsilon: float, n: int, seed: int):
    """Members report 1 with probability e^ε/(1+e^ε), non-members with 1/(1+e^ε): exactly ε-DP."""
    rng = np.random.default_rng(seed)
    p = math.exp(epsilon) / (1 + math.exp(epsilon))
    scores = np.concatenate([rng.random(n) < p, rng.random(n) < 1 - p]).astype(float)
    labels = np.concatenate([np.ones(n), np.zeros(n)])
    return scores, labels


# --------------------------------------------------------------------------- ceilings


def test_auc_ceiling_hand_computed():
    assert auc_ceiling(1.0, 0.0) == pytest.approx(1 - 1 / (1 + math.e), abs=1e-12)  # 0.731059
    assert auc_ceiling(1.0, 0.0) == pytest.approx(0.7310585786, abs=1e-9)
    assert auc_ceiling(2.0, 1e-3) == pytest.approx(1 - 0.999**2 / (1 + math.exp(2)), abs=1e-12)
    assert auc_ceiling(math.log(3), 0.0) == pytest.approx(0.75, abs=1e-12)
    assert auc_ceiling(0.0, 0.0) == pytest.approx(0.5)
    assert auc_ceiling(math.inf, 0.0) == 1.0


def test_tpr_ceiling_hand_computed_and_integrates_to_auc_ceiling():
    # min{1, e·0.1 + 0.01, 1 − e^{-1}(1 − 0.01 − 0.1)} = e/10 + 0.01
    assert float(tpr_ceiling(0.1, 1.0, 0.01)) == pytest.approx(math.e * 0.1 + 0.01, abs=1e-12)
    # at FPR 0.5 the third branch is the smaller one: 1 − e^{-1}·0.49
    assert float(tpr_ceiling(0.5, 1.0, 0.01)) == pytest.approx(1 - math.exp(-1) * 0.49, abs=1e-12)
    assert float(tpr_ceiling(0.0, 3.0, 1e-5)) == pytest.approx(1e-5)
    assert float(tpr_ceiling(0.99, 3.0, 0.0)) == pytest.approx(1 - math.exp(-3) * 0.01)
    grid = np.linspace(0, 1, 200_001)
    for eps, delta in ((0.5, 0.0), (1.0, 1e-3), (4.0, 0.05)):
        area = np.trapezoid(tpr_ceiling(grid, eps, delta), grid)
        assert area == pytest.approx(auc_ceiling(eps, delta), abs=1e-6)


def test_gdp_ceiling():
    assert gdp_auc_ceiling(1.0) == pytest.approx(norm.cdf(1 / math.sqrt(2)), abs=1e-12)
    assert gdp_auc_ceiling(1.0) == pytest.approx(0.76025, abs=1e-5)
    grid = np.linspace(0, 1, 400_001)
    assert np.trapezoid(gdp_tpr_ceiling(grid, 1.5), grid) == pytest.approx(gdp_auc_ceiling(1.5), abs=1e-4)


def test_coverage_logic():
    node = PrivacySpec(epsilon=1.0, delta=1e-4, unit="node", accountant="rdp")
    edge = PrivacySpec(epsilon=2.0, delta=1e-5, unit="edge", accountant="rdp", gdp_mu=0.5)
    none = PrivacySpec.non_private()

    c = coverage(none, "node")
    assert not c.covered and c.ceiling_auc is None
    c = coverage(node, "node")
    assert c.covered and c.ceiling_auc == pytest.approx(auc_ceiling(1.0, 1e-4))
    assert not coverage(edge, "node").covered  # edge-level DP says nothing about node membership

    c = coverage(edge, "edge", queries_private_graph=True, inference_private=True)
    assert c.covered and c.group_size == 1
    # GDP is tighter here: Φ(0.5/√2) < 1 − (1−δ)²/(1+e²)
    assert c.ceiling_auc == pytest.approx(min(gdp_auc_ceiling(0.5), auc_ceiling(2.0, 1e-5)))
    assert c.ceiling_auc == pytest.approx(gdp_auc_ceiling(0.5))

    c = coverage(node, "edge", queries_private_graph=True, inference_private=True)
    assert c.covered and c.group_size == 2
    assert c.epsilon == pytest.approx(2.0) and c.delta == pytest.approx((1 + math.e) * 1e-4)
    assert c.ceiling_auc == pytest.approx(1 - (1 - (1 + math.e) * 1e-4) ** 2 / (1 + math.exp(2)))

    # queries on the private graph through non-private inference leave the edge uncovered
    c = coverage(node, "edge", queries_private_graph=True, inference_private=False)
    assert not c.covered and c.ceiling_auc is None
    with pytest.raises(DPAuditError):
        coverage(node, "graph")

    # recipes that keep non-members in their training graph: member vs non-member is 2 node changes
    c = coverage(node, "node", node_group_size=2)
    assert c.covered and c.group_size == 2
    assert c.epsilon == pytest.approx(2.0) and c.delta == pytest.approx((1 + math.e) * 1e-4)
    assert c.ceiling_auc == pytest.approx(auc_ceiling(2.0, (1 + math.e) * 1e-4))
    assert any("group privacy over 2 node changes" in n for n in c.notes)


# --------------------------------------------------------------------------- curve statistics


def test_auc_tpr_advantage_hand_example():
    scores = [0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.2, 0.1]
    labels = [1, 1, 0, 1, 0, 1, 0, 0]
    # pairs (member > non-member): 0.9:4, 0.8:4, 0.6:3, 0.3:2 → 13 of 16
    assert auc(scores, labels) == pytest.approx(13 / 16)
    assert advantage(scores, labels) == pytest.approx(0.5)  # threshold 0.8: TPR .5, FPR 0 / 0.6: .75-.25
    t = tpr_at_fpr(scores, labels)
    assert t == {"0.1": 0.5, "0.01": 0.5, "0.001": 0.5}


def test_auc_is_never_flipped():
    scores, labels = gaussian_scores(-1.0, 300, 0)
    assert auc(scores, labels) < 0.35
    assert advantage(scores, labels) < 0.2


def test_bad_inputs():
    with pytest.raises(DPAuditError):
        auc([0.1, 0.2], [1])
    with pytest.raises(DPAuditError):
        auc([0.1, 0.2], [1, 1])
    with pytest.raises(DPAuditError):
        auc([0.1, float("nan")], [1, 0])
    with pytest.raises(DPAuditError):
        epsilon_lower_bound([0.1, 0.2, 0.3, 0.4], [1, 1, 0, 0], delta=1.5)


def test_bootstrap_ci_covers_the_true_auc():
    true_auc = norm.cdf(1.0 / math.sqrt(2))  # AUC of N(1,1) vs N(0,1)
    hits = 0
    reps = 60
    for seed in range(reps):
        scores, labels = gaussian_scores(1.0, 100, seed)
        lo, hi = bootstrap_auc_ci(scores, labels, n_boot=400, seed=seed)
        assert lo <= auc(scores, labels) <= hi
        hits += lo <= true_auc <= hi
    assert hits / reps >= 0.85


# --------------------------------------------------------------------------- ε lower bound


def test_clopper_pearson_bounds():
    assert clopper_pearson_lower(0, 10, 0.05) == 0.0
    assert clopper_pearson_upper(10, 10, 0.05) == 1.0
    assert float(clopper_pearson_upper(0, 10, 0.05)) == pytest.approx(1 - 0.05 ** (1 / 10))
    assert float(clopper_pearson_lower(10, 10, 0.05)) == pytest.approx(0.05 ** (1 / 10))


def pair_randomized_response(epsilon: float, pairs: int, seed: int):
    """Pair scores of an exactly ε-DP coin: the member of a pair scores 1 and the non-member 0
    with probability e^ε/(1+e^ε), the other way round otherwise (randomized response)."""
    rng = np.random.default_rng(seed)
    right = rng.random(pairs) < math.exp(epsilon) / (1 + math.exp(epsilon))
    return right.astype(float), (~right).astype(float)


def test_the_pair_test_uses_the_one_steinke_p_value():
    """The pair test's p-value is :func:`dpaudit.auditing.estimators.one_run_p_value` with m = pairs (one
    implementation of the theorem, tested in tests/dpaudit/auditing/test_estimators.py): the ε it returns is the
    boundary of that p-value's rejection region."""
    from dpaudit.auditing import estimators

    for guesses, correct, pairs, delta in ((300, 280, 300, 1e-4), (120, 100, 400, 0.0)):
        eps = pair_test_epsilon(guesses, correct, pairs, delta, 0.05)
        assert estimators.one_run_p_value(pairs, guesses, correct, eps, delta) < 0.05
        assert estimators.one_run_p_value(pairs, guesses, correct, eps + 1e-3, delta) >= 0.05


def test_pair_test_is_sound_on_an_exactly_dp_coin():
    """Randomized response at ε' per pair: the bound (group size 1 here) exceeds ε' in at most
    5 % of seeds, and finds most of it when there are many pairs."""
    for eps in (0.5, 2.0):
        values = [pair_test_lower_bound(*pair_randomized_response(eps, 2000, s), 0.0, 1)["epsilon"] for s in range(40)]
        assert sum(v > eps for v in values) <= 2
        assert np.median(values) > 0.6 * eps


def test_pair_test_group_size_and_counts():
    member, non_member = np.ones(300), np.zeros(300)  # perfect separation
    one = pair_test_lower_bound(member, non_member, 0.0, 1)
    two = pair_test_lower_bound(member, non_member, 0.0, 2)
    assert one["epsilon"] > 2.0 and two["epsilon"] == pytest.approx(one["epsilon"] / 2, rel=1e-6)
    assert one["pairs"] == 300 and one["counts"][0] == {"fraction": 1.0, "guesses": 300, "correct": 300}
    # recomputed from its counts at a stricter confidence (a report's Bonferroni split): smaller
    strict = pair_test_from_counts(one["counts"], 300, 0.0, 1, confidence=0.999)["epsilon"]
    assert strict < one["epsilon"]
    assert pair_test_from_counts(one["counts"], 300, 0.0, 1, 0.95)["epsilon"] == pytest.approx(one["epsilon"])
    # ties are never guessed on; the largest differences are guessed first
    counts = pair_test_counts([1.0, 5.0, 0.0, 2.0], [1.0, 0.0, 3.0, 1.0], fractions=(1.0, 0.25))
    assert counts == [{"fraction": 1.0, "guesses": 3, "correct": 2}, {"fraction": 0.25, "guesses": 1, "correct": 1}]
    assert pair_test_lower_bound(np.zeros(50), np.zeros(50))["epsilon"] == 0.0
    # a positive δ can only weaken the bound
    assert pair_test_epsilon(300, 280, 300, 1e-3, 0.05) <= pair_test_epsilon(300, 280, 300, 0.0, 0.05)
    with pytest.raises(DPAuditError):
        pair_test_lower_bound([1.0, 2.0], [0.0])


def test_pair_test_is_null_without_signal():
    values = [pair_test_lower_bound(*gaussian_pairs(0.0, 500, s), 1e-5, 2)["epsilon"] for s in range(20)]
    assert sum(v > 0 for v in values) <= 1


def gaussian_pairs(shift: float, n: int, seed: int):
    scores, labels = gaussian_scores(shift, n, seed)
    return scores[labels == 1], scores[labels == 0]


def test_epsilon_lower_bound_detects_strong_separation():
    scores, labels = gaussian_scores(4.0, 2000, 1)
    lb = epsilon_lower_bound(scores, labels, delta=0.0)
    assert lb["epsilon"] > 2.0
    assert lb["evaluation"]["members"] + lb["selection"]["members"] == 2000


def test_epsilon_lower_bound_is_small_without_separation():
    values = [epsilon_lower_bound(*gaussian_scores(0.0, 1000, seed))["epsilon"] for seed in range(10)]
    assert max(values) < 0.3
    assert np.mean(values) < 0.1


def test_epsilon_lower_bound_never_exceeds_true_epsilon_of_randomized_response():
    for eps in (0.5, 1.0, 2.0):
        values = [epsilon_lower_bound(*randomized_response(eps, 5000, seed))["epsilon"] for seed in range(20)]
        assert sum(v > eps for v in values) <= 1  # 95 % confidence: at most 1 in 20
        assert np.median(values) > 0.75 * eps  # and tight when the data are plentiful


def test_epsilon_lower_bound_respects_delta():
    scores, labels = randomized_response(1.0, 5000, 0)
    assert (
        epsilon_lower_bound(scores, labels, delta=0.1)["epsilon"]
        < epsilon_lower_bound(scores, labels, delta=0.0)["epsilon"]
    )


def test_summarize_runs():
    runs = [gaussian_scores(1.0, 200, s) for s in range(3)]
    out = summarize_runs(runs, lower_bound_delta=1e-5, n_boot=200)
    assert out["auc"] == pytest.approx(np.mean([auc(*r) for r in runs]))
    lo, hi = out["auc_ci"]
    assert lo < out["auc"] < hi
    assert set(out["tpr_at_fpr"]) == {"0.1", "0.01", "0.001"}
    assert len(out["runs"]) == 3 and out["epsilon_lower_bound_delta"] == 1e-5
    assert out["epsilon_lower_bound"] == out["runs"][0]["epsilon_lower_bound"]
    assert out["lower_bound"]["group_size"] == 2 and out["lower_bound"]["pairs"] == 200
    assert out["roc"]["fpr"][0] == 0.0 and out["roc"]["tpr"][-1] == 1.0
    assert summarize_runs(runs, 1e-5, n_boot=50, pair_group_size=None)["epsilon_lower_bound"] is None


def test_auc_interval_includes_the_spread_over_runs():
    """Runs whose AUCs differ (new shadow and attack model each run) widen the interval beyond
    the bootstrap of fixed scores; one run keeps the bootstrap alone and says so."""
    runs = [gaussian_scores(shift, 300, s) for s, shift in enumerate((0.0, 0.6, 1.2))]
    out = summarize_runs(runs, 0.0, n_boot=200)
    comp = out["auc_ci_components"]
    per_run = [r["auc"] for r in out["runs"]]
    assert comp["t_over_runs"] is not None and out["auc_ci"][0] <= comp["t_over_runs"][0] + 1e-12
    assert out["auc_ci"][0] <= min(comp["bootstrap"][0], comp["t_over_runs"][0]) + 1e-12
    assert out["auc_ci"][0] < min(per_run) and out["auc_ci"][1] > max(per_run)
    assert comp["bootstrap"][1] - comp["bootstrap"][0] < out["auc_ci"][1] - out["auc_ci"][0]
    single = summarize_runs(runs[:1], 0.0, n_boot=200)
    assert single["auc_ci_components"]["t_over_runs"] is None and "runs >= 2" in single["auc_ci_components"]["method"]


def test_pair_test_power_is_the_bound_of_perfect_guesses():
    """The audit's power (what every correct guess would certify) bounds every achieved bound,
    grows with the number of pairs and falls with δ and the group size."""
    from dpaudit.auditing.statistics import pair_test_from_counts, pair_test_lower_bound, pair_test_max_possible

    rng = np.random.default_rng(0)
    members, others = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    lb = pair_test_lower_bound(members, others, delta=0.0, group_size=2)
    assert lb["epsilon"] <= lb["max_possible"] == pytest.approx(pair_test_max_possible(300, 0.0, 2))
    perfect = [{"fraction": 1.0, "guesses": 300, "correct": 300}]
    assert pair_test_max_possible(300, 0.0, 2, fractions=(1.0,)) == pytest.approx(
        pair_test_from_counts(perfect, 300, 0.0, 2)["epsilon"]
    )
    assert pair_test_max_possible(37, 0.0, 2) < pair_test_max_possible(300, 0.0, 2)
    assert pair_test_max_possible(300, 1e-3, 2) < pair_test_max_possible(300, 0.0, 2)
    assert pair_test_max_possible(300, 0.0, 4) < pair_test_max_possible(300, 0.0, 2)
    assert pair_test_max_possible(0, 0.0, 2) == 0.0
