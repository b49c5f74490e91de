"""Audit statistics: ceilings against hand-computed values, the empirical ε lower bound on
synthetic scores with known separation and on a simulated randomized-response mechanism,
bootstrap coverage, coverage logic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.accounting import PrivacySpec
from dpaudit.errors import DPAuditError
from dpaudit.statistics import (
    advantage,
    auc,
    auc_ceiling,
    bootstrap_auc_ci,
    clopper_pearson_lower,
    clopper_pearson_upper,
    coverage,
    epsilon_lower_bound,
    gdp_auc_ceiling,
    gdp_tpr_ceiling,
    summarize_runs,
    tpr_at_fpr,
    tpr_ceiling,
)


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
    assert c.epsilon == pytest.approx(2.0) and c.delta == pytest.approx(2 * math.e * 1e-4)
    assert c.ceiling_auc == pytest.approx(1 - (1 - 2 * math.e * 1e-4) ** 2 / (1 + math.exp(2)))

    # queries on the private graph through non-private inference leave the edge uncovered
    c = coverage(node, "edge", queries_private_graph=True, inference_private=False)
    assert not c.covered and c.ceiling_auc is None
    with pytest.raises(DPAuditError):
        coverage(node, "graph")


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
    assert out["roc"]["fpr"][0] == 0.0 and out["roc"]["tpr"][-1] == 1.0
