"""The model-free baseline every attack reports beside its AUC (issue 49): what the same attacker
gets from the node features alone, on the same pairs or targets."""

from __future__ import annotations

import numpy as np
import pytest

import attacks
from attacks import _common as C
from attacks.link_stealing import BASELINE
from dpaudit.app.pipeline import train
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import auc

FAST = {"n_boot": 100}


@pytest.fixture(scope="module")
def mlp_dp(small_graph):
    return train("mlp-dp", small_graph, epsilon=1.0, seed=0, overrides={"epochs": 5}).model


def test_link_steal_baseline_is_the_feature_cosine_auc_on_the_same_pairs(mlp_dp, small_graph):
    res = attacks.run("link-steal", mlp_dp, small_graph, runs=2, max_pairs=150, supervised=False, seed=3, **FAST)
    # the attack's own pairs, redrawn with its seeds: the baseline is their features' cosine AUC
    x = small_graph.data.x.numpy()
    expected = []
    for r in range(2):
        rng = np.random.default_rng(3 + 7919 * r)
        u, v, labels = C.sample_pairs(small_graph.data.edge_index, small_graph.num_nodes, 150, rng)
        expected.append(auc(C.feature_cosine(x, u, v), labels))
    assert res.baseline_auc == pytest.approx(float(np.mean(expected)))
    assert res.baseline == BASELINE
    assert res.baseline_auc > 0.5  # homophilous csbm features: linked nodes' features are alike
    # mlp-dp never reads the graph: its link-stealing AUC is what the features give, not leakage
    assert abs(res.auc - res.baseline_auc) < 0.1


def test_membership_baseline_is_at_chance_under_a_random_split(mlp_dp, small_graph):
    res = attacks.run("mia-threshold", mlp_dp, small_graph, runs=2, **FAST)
    assert res.baseline is not None and "features alone" in res.baseline
    assert 0.3 < res.baseline_auc < 0.7


def test_baseline_round_trips_and_old_json_loads():
    res = AttackResult(attack="link-steal", auc=0.76, baseline_auc=0.74, baseline="cosine of features")
    back = AttackResult.from_dict(res.to_dict())
    assert back.baseline_auc == 0.74 and back.baseline == "cosine of features"
    old = res.to_dict()
    del old["baseline_auc"], old["baseline"]
    loaded = AttackResult.from_dict(old)
    assert loaded.baseline_auc is None and loaded.baseline is None
