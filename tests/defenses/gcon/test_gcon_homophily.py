"""GCON ``protocol=sound``'s accounted homophily statistic and the public α_I rule (issue 41):
the counts' sensitivity, the rule, the ledger entry, the load-time re-derivation, and that the
choices sound GCON makes for free (encoder, its checkpoint, pseudo-labels) cannot change when
only edges do."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from editing import edited_copy

import dpaudit.release.model
from defenses.gcon import GCON
from defenses.gcon.head_selection import HEAD_RECORD
from defenses.gcon.homophily import (
    HOMOPHILY_RECORD,
    RULE_KNOTS,
    inference_restart,
    label_agreement_counts,
    release_homophily,
)
from dpaudit.data.splits import make_split
from dpaudit.errors import IntegrityError
from dpaudit.release.model import compare_records
from dpaudit.runtime import seed_everything
from dpaudit.testing.neighbours import train_and_compare, without_edge

SPLIT = "random:0.5,0.2,0.3"


def test_label_agreement_counts_hand_example():
    # path 0-1-2-3 given in both directions, a self-loop on 2, a duplicate of 0-1
    edges = torch.tensor([[0, 1, 1, 2, 2, 3, 2, 0], [1, 0, 2, 1, 3, 2, 2, 1]])
    labels = torch.tensor([0, 0, 1, 1])
    assert label_agreement_counts(edges, labels) == (2, 3)  # {0,1} and {2,3} agree, {1,2} does not


def test_one_edge_moves_the_counts_by_at_most_the_sensitivity(small_graph):
    """Removing any one undirected edge changes total by exactly 1 and agree by 0 or 1: L1 ≤ 2."""
    labels = small_graph.data.y
    base = label_agreement_counts(small_graph.data.edge_index, labels)
    row, col = small_graph.data.edge_index
    for k in range(0, int((row < col).sum()), 97):
        u, v = int(row[row < col][k]), int(col[row < col][k])
        keep = ~(((row == u) & (col == v)) | ((row == v) & (col == u)))
        agree, total = label_agreement_counts(small_graph.data.edge_index[:, keep], labels)
        assert base[1] - total == 1 and base[0] - agree == int(labels[u] == labels[v])


def test_rule_is_monotone_with_its_knots_and_noise_is_laplace():
    (h_low, a_low), (h_high, a_high) = RULE_KNOTS
    assert inference_restart(0.0) == a_low == inference_restart(h_low) == 1.0  # heterophilous: own features
    assert inference_restart(1.0) == a_high == inference_restart(h_high)
    grid = [inference_restart(h) for h in np.linspace(0, 1, 101)]
    assert all(a >= b for a, b in zip(grid, grid[1:]))
    assert inference_restart((h_low + h_high) / 2) == pytest.approx((a_low + a_high) / 2)
    # Laplace(2/ε_h) on each count: the estimate's spread matches, and ε_h = ∞ is exact
    rng = np.random.default_rng(0)
    estimates = [release_homophily(4000, 10000, 0.1, rng).estimate for _ in range(2000)]
    scale = 2 / 0.1
    predicted_sd = math.sqrt(2 * scale**2 * (1 / 10000**2 + 0.4**2 / 10000**2))
    assert np.std(estimates) == pytest.approx(predicted_sd, rel=0.1)
    assert release_homophily(4000, 10000, math.inf, rng).estimate == 0.4


def test_sound_fit_charges_the_statistic_and_verifies_on_load(small_graph, tmp_path):
    split = make_split(small_graph, SPLIT, seed=0)
    model = GCON(epsilon=2.0, seed=0, encoder_epochs=20).fit(small_graph, split)
    spec = model.privacy
    names = [m["name"] for m in spec.mechanisms]
    assert names[-2] == HOMOPHILY_RECORD and names[-1] == HEAD_RECORD and len(names) == 4
    counts = spec.mechanisms[-2]
    assert counts["epsilon"] == pytest.approx(0.1 * 2.0) and counts["delta"] == 0.0
    assert counts["details"]["scale"] == pytest.approx(2 / 0.2)
    assert spec.mechanisms[0]["details"]["epsilon"] == pytest.approx(0.99 * 0.8 * 2.0)  # (1 − h − s)ε
    assert spec.sound and spec.epsilon <= 2.0 * (1 + 1e-12)
    released = model.card["gcon"]["homophily"]
    assert model.settings["alpha_inference"] == inference_restart(released["estimate"], released["chance_level"])
    assert model.card["gcon"]["config"]["alpha"] == 0.6  # the plan's α is fixed: it does not depend on the statistic
    assert model.card["gcon"]["config"]["alpha_inference"] == model.settings["alpha_inference"]
    assert "homophily_counts" in model.record["gcon"] and "agree" not in json.dumps(model.card)
    directory = model.save(tmp_path / "m")
    loaded = dpaudit.release.model.load(directory, record=False)
    assert loaded.verification.status == "recomputed"
    assert compare_records(loaded.privacy.mechanisms, GCON.replan(loaded.card, loaded.privacy)) is None

    def other_alpha(meta):  # an α_I the rule does not give at the released ĥ
        meta["card"]["gcon"]["config"]["alpha_inference"] = 0.5

    with pytest.raises(IntegrityError, match="rule"):
        dpaudit.release.model.load(edited_copy(directory, tmp_path / "alpha", other_alpha))

    def bigger_share(meta):  # the records stay those of h = 0.1
        meta["card"]["hyperparameters"]["homophily_share"] = 0.2

    with pytest.raises(IntegrityError):
        dpaudit.release.model.load(edited_copy(directory, tmp_path / "share", bigger_share))


def test_statistic_is_spent_only_when_the_rule_sets_alpha_inference(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    for kwargs in ({"adapt": "none"}, {"protocol": "paper", "grid": "alpha=0.6"}):
        model = GCON(epsilon=2.0, seed=0, encoder_epochs=5, **kwargs).fit(small_graph, split)
        assert HOMOPHILY_RECORD not in [m["name"] for m in model.privacy.mechanisms]
        assert "homophily" not in model.card["gcon"]
        assert model.privacy.mechanisms[0]["details"]["epsilon"] == pytest.approx(0.99 * 2.0)


def test_free_choices_read_no_edge(small_graph):
    """The encoder (architecture, its best-validation checkpoint) and the pseudo-labels are the
    same on G and on G minus one edge: they read features and labels only."""
    split = make_split(small_graph, SPLIT, seed=0)
    neighbour = without_edge(small_graph, split)
    outputs = []
    for graph in (small_graph, neighbour):
        seed_everything(0)
        encoder = GCON(epsilon=2.0, seed=0, encoder_epochs=30)._train_encoder(graph, split)
        with torch.no_grad():
            outputs.append(encoder(graph.data.x.float()))
    assert torch.equal(outputs[0], outputs[1])


def test_release_differs_between_neighbours_only_in_the_statistics_output(small_graph, tmp_path):
    """Same seed on G and G minus one edge: model.json agrees leaf by leaf except ĥ (the Laplace
    mechanism's output) and the α_I the public rule computes from it; with the statistic off the
    release is neutral."""
    split = make_split(small_graph, "random:0.75,0.1,0.15", seed=0)
    neighbour = without_edge(small_graph, split)
    diff = train_and_compare(
        lambda: GCON(epsilon=4.0, seed=0, encoder_epochs=20), (small_graph, split), (neighbour, split), tmp_path / "on"
    )
    allowed = set(GCON.released_statistics)
    assert "card.gcon.homophily.estimate" in diff and set(diff) <= allowed
    off = train_and_compare(
        lambda: GCON(epsilon=4.0, seed=0, encoder_epochs=20, adapt="none"),
        (small_graph, split),
        (neighbour, split),
        tmp_path / "off",
    )
    assert off == {}


def test_a_card_without_adapt_is_replanned_as_before(small_graph):
    """A card saved before ``adapt`` existed holds no statistic: it re-plans with none."""
    split = make_split(small_graph, SPLIT, seed=0)
    model = GCON(epsilon=2.0, seed=0, encoder_epochs=5, adapt="none").fit(small_graph, split)
    card = json.loads(json.dumps(model.card))
    del card["hyperparameters"]["adapt"], card["hyperparameters"]["homophily_share"]
    assert compare_records(json.loads(json.dumps(model.privacy.mechanisms)), GCON.replan(card, model.privacy)) is None
