"""GCON ``protocol=sound``'s density rule (issue 50): the released mean degree 2·total~/n (a
post-processing of the homophily statistic's noisy edge count and the public node count) sets the
encoder's dropout; it spends nothing beyond the statistic's ε_h, and the dense graph's encoder is
the one trained on the public features and labels alone with the rule's dropout."""

from __future__ import annotations

import pytest
import torch

from defenses.gcon import GCON
from defenses.gcon.head_selection import HEAD_RECORD
from defenses.gcon.homophily import (
    DENSE_DEGREE,
    DENSE_ENCODER_DROPOUT,
    HETEROPHILY_ENCODER_DROPOUT,
    HOMOPHILY_RECORD,
    encoder_dropout_rule,
    mean_degree,
)
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.runtime import seed_everything

SPLIT = "random:0.5,0.2,0.3"


def test_mean_degree_and_rule_hand_values():
    assert mean_degree(1500, 300) == 10.0
    assert mean_degree(-7, 300) == 0.0  # a negative noisy count is clipped
    assert encoder_dropout_rule(DENSE_DEGREE, 0.5) == DENSE_ENCODER_DROPOUT == 0.0
    assert encoder_dropout_rule(DENSE_DEGREE - 1e-9, 0.5) == 0.5
    assert encoder_dropout_rule(3.9, 0.3) == 0.3  # below the threshold the field applies


@pytest.mark.parametrize("avg_degree, dense", [(6, False), (40, True)])
def test_density_rule_sets_the_encoder_and_spends_only_the_statistic(avg_degree, dense):
    graph = csbm(
        num_nodes=200, num_classes=3, num_features=16, avg_degree=avg_degree, homophily=0.85, feature_signal=0.8, seed=1
    )
    split = make_split(graph, SPLIT, seed=0)
    model = GCON(epsilon=2.0, seed=0, encoder_epochs=15).fit(graph, split)
    released = model.card["gcon"]["homophily"]
    assert (mean_degree(released["noisy_total"], graph.num_nodes) >= DENSE_DEGREE) is dense
    assert released["encoder_dropout"] == (0.0 if dense else 0.5)
    names = [m["name"] for m in model.privacy.mechanisms]
    # no new record: the rule is post-processing (the statistic, then the answer-head count)
    assert names[-2] == HOMOPHILY_RECORD and names[-1] == HEAD_RECORD and len(names) == 4
    assert model.privacy.sound and model.privacy.epsilon <= 2.0 * (1 + 1e-12)
    # the released encoder is the one trained on features and labels alone with the rule's dropout
    seed_everything(0)
    expected = GCON(epsilon=2.0, seed=0, encoder_epochs=15)._train_encoder(
        graph, split, dropout=released["encoder_dropout"]
    )
    with torch.no_grad():
        x = graph.data.x.float()
        assert torch.equal(model.encoder(x), expected.eval()(x))


def test_a_flagged_graph_chooses_its_answering_encoder_again_without_dropout():
    """The heterophily rule's encoder: on a graph the released ĥ flags, the encoder that answers
    alone is chosen again (raw or smoothed input, by its own validation accuracy) at dropout 0 —
    features and public labels only, the same encoder an edge-free rerun of the choice gives."""
    assert encoder_dropout_rule(3.9, 0.5, flagged=True) == HETEROPHILY_ENCODER_DROPOUT == 0.0
    assert encoder_dropout_rule(3.9, 0.5, flagged=False) == 0.5
    graph = csbm(num_nodes=300, num_classes=3, num_features=16, avg_degree=6, homophily=0.1, feature_signal=0.8, seed=1)
    split = make_split(graph, SPLIT, seed=0)
    model = GCON(epsilon=4.0, seed=0, encoder_epochs=15).fit(graph, split)
    released = model.card["gcon"]["homophily"]
    assert released["heterophilous"] and model.settings["head"] == "encoder"
    assert released["encoder_dropout"] == 0.0 and model.card["gcon"]["encoder_input"]["dropout"] == 0.0
    defense = GCON(epsilon=4.0, seed=0, encoder_epochs=15)
    expected, smoothing, x_input, _ = defense._choose_encoder(graph, split, 16, dropout=0.0)
    assert model.card["gcon"]["encoder_input"]["chosen"] == ("raw" if smoothing is None else "smoothed")
    with torch.no_grad():
        assert torch.equal(model.encoder(x_input.float()), expected.eval()(x_input.float()))
