"""GCON's worst-case edge canaries (defenses/gcon/canaries.py, issue 25 item 1): the design, the
exact likelihood score of Θ, the structure hook of the canary workflow, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import dpaudit.app.workflows.zoo  # noqa: F401  (registers zoo-gcon-noise-div10)
from attacks import canary as game
from defenses.gcon import canaries as gcon_canaries
from dpaudit.app.workflows.canary import canary_audit, check_canary_request
from dpaudit.app.workflows.zoo import AUDIT_OVERRIDES
from dpaudit.auditing.statistics import auc
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.training.registry import get_defense

SPLIT = "random:0.5,0.25,0.25"
DELTA = 1e-5
DESIGN = {"structure": "gcon-pairs"}
SETTINGS = {**AUDIT_OVERRIDES["gcon"], "encoder_epochs": 5}
RUNS = 25  # 50 canaries: two per training (four classes: two disjoint label pairs)


@pytest.fixture(scope="module")
def graph():
    return csbm(num_nodes=200, num_classes=4, num_features=16, avg_degree=4.0, seed=3)


def _audit(graph, defense, claim, runs, **kw):
    return canary_audit(
        defense,
        graph,
        claim,
        kind="edge",
        canaries=2,
        runs=runs,
        split=SPLIT,
        delta=DELTA,
        design=DESIGN,
        overrides=SETTINGS,
        progress=False,
        **kw,
    )


@pytest.fixture(scope="module")
def broken(graph):
    return _audit(graph, "zoo-gcon-noise-div10", 4.0, RUNS)


def test_design_is_public_and_opposite(graph):
    split = make_split(graph, SPLIT, 0)
    design = game.draw_canaries(graph, split, "edge", 3, 0, structure="gcon-pairs")
    assert design.pairs.tolist() == [[200, 201], [202, 203], [204, 205]]
    assert design.labels.tolist() == [0, 1, 2, 3, 0, 1]  # disjoint label columns for the first ⌊c/2⌋
    assert (design.features[0::2] == -design.features[1::2]).all() and design.features.abs().sum() > 0
    ds, sp = game.training_data(graph, split, design, np.array([True, False, True]))
    assert ds.num_nodes == 206 and set(range(200, 206)) <= set(sp.train.tolist())  # nodes in every run
    edges = set(map(tuple, ds.data.edge_index.t().tolist())) - set(map(tuple, graph.data.edge_index.t().tolist()))
    assert edges == {(200, 201), (201, 200), (204, 205), (205, 204)}  # only the included pairs' edges


def test_score_reads_the_coins_exactly_from_a_noiseless_release(graph):
    """At ε = ∞ Θ minimises J₀ + μ/2‖Θ‖² exactly (no B, no AMP): B(s) vanishes only at the true
    coins, so every canary's likelihood ratio has the sign of its coin — B(s) = B₀ + Σ s_k Δ_k holds."""
    split = make_split(graph, SPLIT, 0)
    design = game.draw_canaries(graph, split, "edge", 3, 0, structure="gcon-pairs")
    for coins in ([True, False, True], [False, True, False]):
        included = np.array(coins)
        ds, sp = game.training_data(graph, split, design, included)
        model = get_defense("gcon")(epsilon="inf", seed=0, device="cpu", **SETTINGS).fit(ds, sp)
        scores, name = game.score_run(model, graph, split, design, ds, sp)
        assert name == gcon_canaries.SCORE
        assert ((scores > 0) == included).all(), scores


def test_one_row_design_leaves_the_second_endpoint_out_of_every_split(graph):
    """rows="one": u_k is a training node in every run, v_k is in no split (so, without
    pseudo-labels, not a row of GCON's objective); the coins still only add the pairs' edges."""
    split = make_split(graph, SPLIT, 0)
    design = game.draw_canaries(graph, split, "edge", 2, 0, structure="gcon-pairs", rows="one")
    assert design.settings["rows"] == "one"
    ds, sp = game.training_data(graph, split, design, np.array([True, False]))
    chosen = set(sp.train.tolist()) | set(sp.val.tolist()) | set(sp.test.tolist())
    assert {200, 202} <= set(sp.train.tolist()) and not {201, 203} & chosen
    edges = set(map(tuple, ds.data.edge_index.t().tolist())) - set(map(tuple, graph.data.edge_index.t().tolist()))
    assert edges == {(200, 201), (201, 200)}
    with pytest.raises(ConfigurationError, match="rows must be one of"):
        game.draw_canaries(graph, split, "edge", 2, 0, structure="gcon-pairs", rows="two")


def test_one_row_score_reads_the_coins_exactly_from_a_noiseless_release(graph):
    """The same exactness check for rows="one" (only u_k's term of the objective moves):
    at ε = ∞ the likelihood ratio has the sign of every coin."""
    split = make_split(graph, SPLIT, 0)
    design = game.draw_canaries(graph, split, "edge", 2, 0, structure="gcon-pairs", rows="one")
    for coins in ([True, False], [False, True]):
        included = np.array(coins)
        ds, sp = game.training_data(graph, split, design, included)
        model = get_defense("gcon")(epsilon="inf", seed=0, device="cpu", **{**SETTINGS, "pseudo_labels": False})
        model = model.fit(ds, sp)
        scores, _ = game.score_run(model, graph, split, design, ds, sp)
        assert ((scores > 0) == included).all(), scores


def test_one_row_design_warns_when_pseudo_labels_make_the_second_endpoint_a_row(graph, caplog):
    # scarce training labels (n₀ < n/2): sound keeps the pseudo-label rows (protocols.uses_pseudo_labels)
    split = make_split(graph, "random:0.3,0.3,0.4", 0)
    design = game.draw_canaries(graph, split, "edge", 1, 0, structure="gcon-pairs", rows="one")
    ds, sp = game.training_data(graph, split, design, np.array([True]))
    model = get_defense("gcon")(epsilon="inf", seed=0, device="cpu", **{**SETTINGS, "pseudo_labels": True}).fit(ds, sp)
    with caplog.at_level("WARNING", logger="defenses.gcon.canaries"):
        game.score_run(model, graph, split, design, ds, sp)
    assert "pseudo_labels=false" in caplog.text


def test_score_separates_in_and_out_at_a_broken_setting(broken):
    """A tenth of Theorem 1's noise at claim 4 (true ε ≈ 40): the likelihood separates the coins."""
    assert broken["score"] == gcon_canaries.SCORE and broken["runs"] == RUNS
    assert broken["auc"] > 0.9, broken["auc"]
    assert broken["design"]["structure"] == "gcon-pairs" and broken["overrides"]["encoder_hidden"] == 1


def test_permuted_coins_give_chance(broken):
    """The separation is the coins': the same scores against a permutation of the coins are at chance."""
    scores, coins = np.array(broken["scores"]), np.array(broken["included"])
    permuted = np.random.default_rng(0).permutation(coins)
    assert abs(auc(scores, permuted.astype(int)) - 0.5) < 0.12
    assert auc(scores, coins.astype(int)) > 0.9


def test_sound_gcon_is_not_caught_and_scores_stay_within_theorem_1(graph, broken):
    """Sound GCON at claim 1: not caught, near chance; no canary's exact log-likelihood ratio (at
    the claimed β) exceeds the claimed ε — Theorem 1's bound on the privacy loss, which the
    canaries reach only in part."""
    sound = _audit(graph, "gcon", 1.0, RUNS)
    assert sound["verdict"] != "guarantee broken" and sound["certified_epsilon_lower_bound"] <= 1.0
    assert sound["auc"] < 0.75 < broken["auc"]
    assert np.abs(sound["scores"]).max() <= sound["claimed_epsilon"]
    assert np.abs(broken["scores"]).max() <= broken["claimed_epsilon"]


def test_bad_structure_requests_fail_before_any_work():
    ok = check_canary_request("gcon", 1.0, "edge", 3, 10, SETTINGS, DELTA, "cpu", 0, DESIGN)
    assert ok.name == "gcon"
    with pytest.raises(ConfigurationError, match="not 'mlp-dp'"):
        check_canary_request("mlp-dp", 1.0, "edge", 3, 10, {}, DELTA, "cpu", 0, DESIGN)
    with pytest.raises(ConfigurationError, match="--kind edge"):
        check_canary_request("gcon", 1.0, "node", 3, 10, {}, DELTA, "cpu", 0, DESIGN)
    with pytest.raises(ConfigurationError, match="unknown structure"):
        check_canary_request("gcon", 1.0, "edge", 3, 10, {}, DELTA, "cpu", 0, {"structure": "nope"})
    with pytest.raises(ConfigurationError, match="1..12 canaries"):
        check_canary_request("gcon", 1.0, "edge", 20, 10, {}, DELTA, "cpu", 0, DESIGN)
    graph = csbm(num_nodes=60, num_classes=3, num_features=8, seed=0)
    split = make_split(graph, SPLIT, 0)
    with pytest.raises(ConfigurationError, match="1..12 canaries"):
        game.draw_canaries(graph, split, "edge", 13, 0, structure="gcon-pairs")
    with pytest.raises(ConfigurationError, match="transductive"):
        game.draw_canaries(graph, make_split(graph, "inductive:0.6,0.4", 0), "edge", 2, 0, structure="gcon-pairs")
