"""Sound GCON's free choices of issue 50: the encoder's input (raw features or their public
feature-graph smoothing, chosen by the encoder's validation accuracy) and the heterophily rule
(α = α_I = 1 and the encoder alone as the answer, post-processing of the released ĥ and the public
chance level q). Both read no edge beyond the accounted statistic; ``paper`` is unchanged."""

from __future__ import annotations

import pytest
import torch
from editing import edited_copy

import dpaudit.release.model
from defenses.gcon import GCON
from defenses.gcon.head_selection import choose_head
from defenses.gcon.homophily import (
    DENSE_DEGREE,
    HETEROPHILY_KNOT,
    adjusted_agreement,
    answer_head,
    chance_agreement,
    heterophilous,
    inference_restart,
    mean_degree,
    smoothing_offered,
    training_restart,
)
from defenses.gcon.model import encoder_input
from dpaudit.data.feature_graph import FeatureSmoothing
from dpaudit.data.splits import make_split
from dpaudit.errors import IntegrityError
from dpaudit.testing.neighbours import without_edge

SPLIT = "random:0.5,0.2,0.3"


def test_encoder_input_choice_is_recorded_and_round_trips(small_graph, tmp_path):
    split = make_split(small_graph, SPLIT, seed=0)
    model = GCON(epsilon=4.0, seed=0, encoder_epochs=20).fit(small_graph, split)
    choice = model.card["gcon"]["encoder_input"]
    assert [c["input"] for c in choice["candidates"]] == ["raw", "smoothed"]  # fixed in advance
    assert choice["reads_edges"] is False
    scores = [c["val_accuracy"] for c in choice["candidates"]]
    assert choice["chosen"] == ("smoothed" if scores[1] > scores[0] else "raw")  # ties: raw
    expected = None if choice["chosen"] == "raw" else FeatureSmoothing().to_dict()
    assert choice["smoothing"] == expected == model.settings["feature_smoothing"]
    # the encoder reads the chosen input at inference, over the queried graph's nodes
    x = small_graph.data.x
    want = x if expected is None else FeatureSmoothing().apply(x)
    assert torch.equal(model.encoder_input(x), want)
    loaded = dpaudit.release.model.load(model.save(tmp_path / "m"), record=False)
    assert loaded.verification.status == "recomputed"
    assert loaded.settings["feature_smoothing"] == expected
    assert (loaded.smoothing is None) == (expected is None)
    graph = small_graph.data
    assert torch.allclose(loaded.predict_proba(graph), model.predict_proba(graph))


def test_a_forced_smoothing_round_trips_and_changes_what_the_encoder_reads(small_graph, tmp_path):
    """Whatever the choice on this graph, a smoothed model saves, loads and answers identically."""
    split = make_split(small_graph, SPLIT, seed=0)
    model = GCON(epsilon=4.0, seed=0, encoder_epochs=10).fit(small_graph, split)
    model.settings["feature_smoothing"] = FeatureSmoothing(k=5, hops=1).to_dict()
    model.smoothing = FeatureSmoothing(k=5, hops=1)
    loaded = dpaudit.release.model.load(model.save(tmp_path / "m"), record=False)
    assert loaded.smoothing == FeatureSmoothing(k=5, hops=1)
    graph = small_graph.data
    assert torch.equal(loaded.encoder_input(graph.x), FeatureSmoothing(k=5, hops=1).apply(graph.x))
    assert torch.allclose(loaded.predict_proba(graph), model.predict_proba(graph))


def test_an_edge_neighbour_gives_the_same_choice_and_the_same_smoothed_features(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    neighbour = without_edge(small_graph, split)
    assert neighbour.data.edge_index.shape[1] < small_graph.data.edge_index.shape[1]
    runs = [
        GCON(epsilon=4.0, seed=0, encoder_epochs=20)._choose_encoder(g, split, 16) for g in (small_graph, neighbour)
    ]
    (enc_a, smooth_a, x_a, choice_a), (enc_b, smooth_b, x_b, choice_b) = runs
    assert choice_a == choice_b and smooth_a == smooth_b
    assert torch.equal(x_a, x_b)
    assert torch.equal(FeatureSmoothing().apply(small_graph.data.x), FeatureSmoothing().apply(neighbour.data.x))
    with torch.no_grad():
        assert torch.equal(enc_a(x_a.float()), enc_b(x_b.float()))


def test_inductive_input_smooths_each_part_over_its_own_nodes(small_graph):
    split = make_split(small_graph, "inductive:0.6,0.2,0.2", seed=0)
    smoothing = FeatureSmoothing()
    x = small_graph.data.x
    out = GCON(epsilon=4.0, seed=0)._encoder_input(small_graph, split, smoothing)
    for part in (split.train, split.val, split.test):
        if len(part) >= 2:
            assert torch.equal(out[part], smoothing.apply(x[part]))
    assert torch.equal(encoder_input(None, x), x)


def test_paper_protocol_is_unchanged(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    defense = GCON(epsilon=4.0, seed=0, encoder_epochs=5, protocol="paper", grid="alpha=0.6")
    assert defense._input_candidates(small_graph, split) == [None]
    model = defense.fit(small_graph, split)
    assert "encoder_input" not in model.card["gcon"]
    assert "feature_smoothing" not in model.settings and "head" not in model.settings
    assert model.smoothing is None and model.head == "theta"


def test_heterophily_rule_is_a_function_of_the_released_agreement_and_chance_only():
    # chance level of labels: Σ p_k²
    assert chance_agreement(torch.tensor([0, 0, 1, 1]), 3) == pytest.approx(0.5)
    assert chance_agreement(torch.tensor([], dtype=torch.long), 3) == 0.0
    assert adjusted_agreement(0.43, 0.43) == pytest.approx(0.0)
    # WebKB-like (agreement at chance) vs Cora-like (far above chance)
    for estimate, chance, flagged in ((0.43, 0.43, True), (0.35, 0.36, True), (0.62, 0.17, False), (0.43, 0.21, False)):
        assert heterophilous(estimate, chance) is flagged
        assert training_restart(estimate, chance, 0.6) == (1.0 if flagged else 0.6)
        assert answer_head(estimate, chance) == ("encoder" if flagged else "theta")
        assert inference_restart(estimate, chance) == (1.0 if flagged else inference_restart(estimate))
    knot = 0.2 + HETEROPHILY_KNOT * 0.8
    assert heterophilous(knot - 1e-9, 0.2) and not heterophilous(knot + 1e-6, 0.2)
    # a card written before the rule (no chance level): the rule is off, α_I is the knots' own
    assert not heterophilous(0.0, None) and inference_restart(0.3, None) == inference_restart(0.3)


def test_a_fit_applies_the_rule_to_its_released_statistic(small_graph, tmp_path):
    split = make_split(small_graph, SPLIT, seed=0)
    model = GCON(epsilon=4.0, seed=0, encoder_epochs=10).fit(small_graph, split)
    released = model.card["gcon"]["homophily"]
    estimate, chance = released["estimate"], released["chance_level"]
    assert released["chance_reads_edges"] is False
    assert released["heterophilous"] == heterophilous(estimate, chance)
    assert released["head"] == answer_head(estimate, chance)  # the heterophily rule's head
    chosen_by = model.card["gcon"]["head_selection"]  # ... and the released count's (head_selection)
    assert model.settings["head"] == chosen_by["head"]
    assert model.settings["head"] == choose_head(
        chosen_by["noisy_theta_correct"], chosen_by["encoder_correct"], heterophilous(estimate, chance)
    )
    assert model.settings["alpha"] == released["alpha_train"] == training_restart(estimate, chance, 0.6)
    assert model.settings["alpha_inference"] == inference_restart(estimate, chance)
    # the plan is the configured α's (a larger Ψ than α = 1's: conservative)
    assert model.card["gcon"]["config"]["alpha"] == 0.6

    directory = model.save(tmp_path / "m")

    def flip_head(meta):
        meta["config"]["head"] = "encoder" if meta["config"]["head"] == "theta" else "theta"

    with pytest.raises(IntegrityError, match="head"):
        dpaudit.release.model.load(edited_copy(directory, tmp_path / "head", flip_head))


def test_encoder_head_answers_with_the_encoder_alone(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    model = GCON(epsilon=4.0, seed=0, encoder_epochs=10).fit(small_graph, split)
    model.head = "encoder"
    graph = small_graph.data
    with torch.no_grad():
        want = torch.softmax(model.encoder(model.encoder_input(graph.x).float()).double(), dim=1).float()
    assert torch.equal(model.predict_proba(graph), want)
    # no edge is read: the same answers without any edge
    bare = graph.clone()
    bare.edge_index = graph.edge_index[:, :0]
    assert torch.equal(model.predict_proba(bare), want)


def test_dense_graphs_keep_raw_features():
    """The density rule's second half: smoothing is kept only below the released mean degree threshold."""
    assert smoothing_offered(DENSE_DEGREE - 1e-9) and not smoothing_offered(DENSE_DEGREE)
    assert smoothing_offered(mean_degree(5278, 2708))  # Cora: 3.9
