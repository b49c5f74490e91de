"""Literature settings of RMIA and LiRA (issue 25, item 5): references exactly as large as the
target's training set, RMIA's tie-break as an option, G-BASE's features-only queries and
protocol, and low-FPR TPRs reported as mean ± sd over seeds with their negatives."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attacks
import attacks._common as common
from attacks.lira import query_graph, reference_sets
from attacks.rmia import pairwise_score
from dpaudit.app.pipeline import train
from dpaudit.auditing.low_fpr import low_fpr_summary, summarize_level
from dpaudit.auditing.statistics import tpr_at_fpr
from dpaudit.data.datasets import csbm
from dpaudit.errors import ConfigurationError

FAST = {"n_boot": 50}
HP = {"epochs": 40, "hidden": 32, "dropout": 0.0, "row_normalize": False}


@pytest.fixture(scope="module")
def graph():
    return csbm(num_nodes=400, num_classes=4, num_features=32, avg_degree=6, homophily=0.6, feature_signal=0.3, seed=5)


@pytest.fixture(scope="module")
def half_inductive(graph):
    """G-BASE's target: trained on the subgraph induced by a random half of the nodes."""
    return train("gcn", graph, seed=0, split="inductive:0.5,0.5", overrides=HP).model


@pytest.fixture(scope="module")
def transductive(graph):
    return train("gcn", graph, seed=0, split="random:0.3,0.1,0.3", overrides=HP).model


# --------------------------------------------------------------------------- reference sizes


@pytest.mark.parametrize("name,settings", [("mia-rmia", {"num_references": 2}), ("mia-lira", {"num_shadows": 2})])
def test_online_references_train_on_exactly_as_many_nodes_as_the_target(half_inductive, graph, name, settings):
    # a target trained on half the graph leaves a small disjoint pool: before the fix the
    # references were silently topped up only as far as that pool went (945 vs 1,354 on Cora)
    res = attacks.run(name, half_inductive, graph, seed=0, **settings, **FAST)
    target_size = res.runs[0]["target_train_size"]
    assert target_size == 200
    assert res.runs[0]["reference_train_sizes"] == [target_size] * len(res.runs[0]["reference_train_sizes"])
    assert res.runs[0]["reference_pool"] == "any"  # the disjoint pool could not top them up
    assert not any("fewer than the target" in n for n in res.notes)
    if name == "mia-rmia":
        assert res.runs[0]["population"] >= 1


def test_the_pool_cap_never_turns_a_large_target_into_a_refusal(half_inductive, graph):
    # 200 training nodes against a pool capped at 4 classes × 2 × 10 nodes: the cap grows to what
    # the matched references need (before, on a 10 k-node csbm target, mia-rmia refused)
    res = attacks.run("mia-rmia", half_inductive, graph, seed=0, num_references=2, shadow_nodes_per_class=20, **FAST)
    assert res.runs[0]["reference_train_sizes"] == [200, 200]


def test_offline_references_say_when_they_are_smaller(half_inductive, graph):
    res = attacks.run("mia-lira", half_inductive, graph, seed=0, num_shadows=2, online=False, **FAST)
    sizes = res.runs[0]["reference_train_sizes"]
    assert min(sizes) < res.runs[0]["target_train_size"]
    assert any(f"references train on {min(sizes)} nodes, fewer than the target's 200" in n for n in res.notes)


def test_reference_sets_refuse_to_shrink():
    rng = np.random.default_rng(0)
    audit = np.arange(100)  # each online reference trains on 50 audit nodes and 30 pool nodes
    sets = reference_sets(audit, np.arange(100, 130), 80, 2, True, "match", rng)
    assert [len(s) for s in sets] == [80, 80]
    with pytest.raises(ConfigurationError, match="cannot train on the target's 80 nodes"):
        reference_sets(audit, np.arange(100, 129), 80, 2, True, "match", rng)
    offline = reference_sets(audit, np.arange(100, 179), 80, 2, False, "match", rng)
    assert [len(s) for s in offline] == [39, 39]  # distinct halves of a pool too small for 80


# --------------------------------------------------------------------------- RMIA's tie-break


def test_tie_break_none_is_the_reference_score_and_costs_low_fpr_power():
    rng = np.random.default_rng(0)
    lr_z = rng.uniform(0.5, 1.5, size=50)
    # 30 members and two non-members beat every z; 98 non-members sit inside the population
    members = np.concatenate([np.linspace(2.0, 3.0, 30), rng.uniform(0.5, 1.5, size=70)])
    non_members = np.concatenate([[1.9, 1.95], rng.uniform(0.5, 1.5, size=98)])
    lr_x = np.concatenate([members, non_members])
    labels = np.concatenate([np.ones(100, int), np.zeros(100, int)])
    plain = pairwise_score(lr_x, lr_z, 1.0, tie_break="none")
    reference = np.array([np.mean(x / lr_z >= 1.0) for x in lr_x])  # the paper's count, as the reference code
    assert np.array_equal(plain, reference)
    broken = pairwise_score(lr_x, lr_z, 1.0)
    assert np.array_equal(np.argsort(broken, kind="stable")[-30:], np.argsort(lr_x, kind="stable")[-30:])
    # one false positive allowed among 100 negatives, two tied with the members at score 1:
    # no threshold flags any of them
    assert tpr_at_fpr(plain, labels)["0.01"] == 0.0
    assert tpr_at_fpr(broken, labels)["0.01"] == pytest.approx(0.30)
    with pytest.raises(ConfigurationError, match="tie_break"):
        pairwise_score(lr_x, lr_z, 1.0, tie_break="random")


def test_rmia_records_its_tie_break(transductive, graph):
    by_setting = {}
    for tie_break in ("likelihood-ratio", "none"):
        res = attacks.run("mia-rmia", transductive, graph, seed=0, num_references=2, tie_break=tie_break, **FAST)
        assert res.extra["tie_break"] == tie_break and any(f"tie-break: {tie_break}" in n for n in res.notes)
        by_setting[tie_break] = res
    # same audit draw and references: the tie-break moves ties only, never the order of distinct scores
    assert by_setting["none"].auc <= by_setting["likelihood-ratio"].auc + 0.02


# --------------------------------------------------------------------------- G-BASE queries and protocol


def test_features_only_queries_reach_every_model_without_edges(half_inductive, graph, monkeypatch):
    original = graph.data.edge_index.clone()
    alone = query_graph(graph.data, "features")
    assert alone.edge_index.shape == (2, 0) and alone.x is graph.data.x
    assert torch_equal(graph.data.edge_index, original)
    seen = []
    real = common.posteriors

    def spy(model, queried, nodes=None):
        seen.append(int(queried.edge_index.shape[1]))
        return real(model, queried, nodes)

    monkeypatch.setattr(common, "posteriors", spy)
    res = attacks.run("mia-lira", half_inductive, graph, seed=0, num_shadows=2, query="features", **FAST)
    assert seen == [0, 0, 0] and res.extra["query"] == "features"
    seen.clear()
    attacks.run("mia-lira", half_inductive, graph, seed=0, num_shadows=2, **FAST)
    assert len(seen) == 3 and min(seen) > 0  # the default still queries the full graph


def torch_equal(a, b) -> bool:
    return bool((a == b).all()) and a.shape == b.shape


def test_g_base_protocol(half_inductive, transductive, graph):
    res = attacks.run("mia-rmia", half_inductive, graph, seed=0, num_references=2, protocol="g-base", **FAST)
    assert res.extra["protocol"] == "g-base" and res.extra["query"] == "features"
    assert any("G-BASE protocol" in n for n in res.notes)
    assert res.bound_valid  # a random inductive split, scored on the audit game's pairs
    with pytest.raises(ConfigurationError, match="inductive:0.5,0.5"):
        attacks.run("mia-rmia", transductive, graph, num_references=2, protocol="g-base")
    with pytest.raises(ConfigurationError, match="features only"):
        attacks.run("mia-lira", half_inductive, graph, num_shadows=2, protocol="g-base", query="graph")
    for key, value in (("protocol", "gbase"), ("query", "2-hop"), ("tie_break", "random")):
        with pytest.raises(ConfigurationError, match=key):
            attacks.check_settings("mia-rmia", {key: value})


# --------------------------------------------------------------------------- low-FPR reporting


def test_low_fpr_summary_shows_spread_negatives_and_resolution():
    runs = [{"tpr_at_fpr": {"0.1": 0.8, "0.01": t, "0.001": 0.5}, "non_members": 140} for t in (0.707, 0.55, 0.52)]
    summary = low_fpr_summary(runs)
    one = summary["0.01"]
    assert one["mean"] == pytest.approx(0.5923, abs=1e-4) and one["sd"] == pytest.approx(0.1004, abs=1e-3)
    assert one["runs"] == 3 and one["negatives"] == 140 and one["resolved"]
    assert one["text"] == "TPR@1%FPR 0.59 ± 0.10 (3 runs, 140 negatives: 1% = 1.4 false positives)"
    tenth = summary["0.001"]
    assert not tenth["resolved"] and "not resolved" in tenth["text"] and "0.14 false positives" in tenth["text"]
    single = summarize_level([0.707], [140], 0.01)
    assert single["sd"] is None and "1 run, no spread" in single["text"]
    assert "138–140 negatives" in summarize_level([0.5, 0.6], [140, 138], 0.01)["text"]


def test_attack_results_carry_the_low_fpr_summary(transductive, graph, tmp_path):
    res = attacks.run("mia-threshold", transductive, graph, seed=0, runs=2, **FAST)
    low = res.extra["low_fpr"]
    per_run = [r["tpr_at_fpr"]["0.01"] for r in res.runs]
    assert low["0.01"]["per_run"] == per_run and low["0.01"]["runs"] == 2
    assert low["0.01"]["mean"] == pytest.approx(np.mean(per_run))
    assert low["0.01"]["negatives"] == res.runs[0]["non_members"]
    res.save(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["extra"]["low_fpr"]["0.001"]["text"].startswith("TPR@0.1%FPR")


@pytest.mark.parametrize("name,settings", [("mia-rmia", {"num_references": 4}), ("mia-lira", {"num_shadows": 4})])
def test_references_that_do_not_fit_memory_are_refused_before_training(
    transductive, graph, monkeypatch, name, settings
):
    import attacks.lira as lira

    # 4 references × 400 nodes × (4 classes × 8 + 1) bytes = 52,800 bytes: more than half of 100 kB
    monkeypatch.setattr(lira, "device_memory", lambda device: 100_000)
    monkeypatch.setattr(common, "train_shadow", lambda *a, **k: pytest.fail("a reference was trained"))
    with pytest.raises(ConfigurationError, match="4 reference models' posteriors on 400 nodes need"):
        attacks.run(name, transductive, graph, seed=0, **settings, **FAST)
    monkeypatch.setattr(lira, "device_memory", lambda device: 105_600)
    assert lira.check_reference_memory(4, 400, 4) == 52_800  # exactly half: allowed
