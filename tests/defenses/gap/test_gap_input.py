"""Sound GAP-EDP's encoder input (issue 50): raw features or their smoothing over the public kNN
feature graph (:mod:`dpaudit.data.feature_graph`), chosen by the feature-only encoder's validation
accuracy. The choice is recorded and survives save/load; an edge-neighbour training graph gives the
same choice and identical encoder inputs; a query graph is smoothed over its own nodes; node level
(and ``paper``) never smooth."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import defenses  # noqa: F401  (registers the defenses)
from dpaudit.data.datasets import csbm
from dpaudit.data.feature_graph import FeatureSmoothing
from dpaudit.data.splits import make_split
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense

#: few labels, many weak feature coordinates: the feature graph's smoothing wins on validation
#: (measured: encoder validation accuracy 0.95 smoothed against 0.83 raw)
SPLIT = "per-class:5,60,120"
FAST = {"encoder_epochs": 30, "hops": 1}


@pytest.fixture(scope="module")
def graph():
    return csbm(
        num_nodes=300, num_classes=3, num_features=64, avg_degree=6, homophily=0.85, feature_signal=0.35, seed=1
    )


@pytest.fixture(scope="module")
def split(graph):
    return make_split(graph, SPLIT, 0)


def _with_edges(dataset, edge_index):
    data = dataset.data.clone()
    data.edge_index = edge_index
    return dataclasses.replace(dataset, data=data)


def _neighbours(dataset):
    """The graph minus its first undirected edge, and plus one undirected edge it lacks."""
    ei = dataset.data.edge_index
    u, v = int(ei[0, 0]), int(ei[1, 0])
    minus = ei[:, ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))]
    present = set(zip(ei[0].tolist(), ei[1].tolist()))
    a, b = next((0, j) for j in range(1, dataset.num_nodes) if (0, j) not in present)
    plus = torch.cat([ei, torch.tensor([[a, b], [b, a]])], dim=1)
    return _with_edges(dataset, minus), _with_edges(dataset, plus)


@pytest.fixture(scope="module")
def fits(graph, split):
    """Sound gap-edp at ε = 4 on the graph and on its two edge neighbours (same seed)."""
    fit = get_defense("gap-edp")
    return [(g, fit(epsilon=4.0, seed=0, **FAST).fit(g, split)) for g in (graph, *_neighbours(graph))]


def test_the_choice_is_recorded_and_round_trips(fits, tmp_path):
    graph, model = fits[0]
    smoothing = FeatureSmoothing().to_dict()
    assert model.config()["feature_smoothing"] == smoothing
    entry = model.card["gap"]["encoder_input"]
    assert entry["transform"] == "knn_feature_smoothing" and entry["smoothing"] == smoothing
    assert entry["reads_edges"] is False
    expected = FeatureSmoothing().apply(graph.data.x.float())
    assert torch.equal(model.encoder_inputs(graph.data), expected)
    loaded = load(model.save(tmp_path / "m"), record=True)
    assert loaded.config()["feature_smoothing"] == smoothing
    assert loaded.card["gap"]["encoder_input"] == entry
    assert torch.equal(loaded.encoder_inputs(graph.data), expected)
    assert torch.allclose(
        loaded.training_release().predict_proba(graph.data), model.training_release().predict_proba(graph.data)
    )
    # the training release answers from hop-0 rows of the smoothed inputs, not of the raw features
    raw_x0 = model.encoder.encode(graph.data.x.float())
    assert not torch.allclose(model.training_release().representation(graph.data)[:, : graph.num_classes], raw_x0)


def test_edge_neighbours_give_the_same_choice_and_inputs(fits):
    (graph, model), *neighbours = fits
    for other_graph, other in neighbours:
        assert other.config()["feature_smoothing"] == model.config()["feature_smoothing"]
        assert other.card["gap"]["encoder_input"] == model.card["gap"]["encoder_input"]
        assert torch.equal(other.encoder_inputs(other_graph.data), model.encoder_inputs(graph.data))
        for (name, wa), wb in zip(model.encoder.state_dict().items(), other.encoder.state_dict().values()):
            assert torch.equal(wa, wb), name


def test_a_query_graph_is_smoothed_over_its_own_nodes(fits):
    _, model = fits[0]
    other = csbm(
        num_nodes=120, num_classes=3, num_features=64, avg_degree=5, homophily=0.8, feature_signal=0.35, seed=7
    )
    nodes = torch.arange(10)
    copy = model.query_session()
    hop0 = copy.representation(other.data, nodes)[:, : other.num_classes]
    whole = model.encoder.encode(FeatureSmoothing().apply(other.data.x.float()))[nodes]
    assert torch.allclose(hop0, whole, atol=1e-6)
    only_queried = model.encoder.encode(FeatureSmoothing().apply(other.data.x[nodes].float()))
    assert not torch.allclose(hop0, only_queried, atol=1e-3)
    assert copy.query_ledger.releases == 1


def test_a_feature_change_anywhere_is_a_new_release_in_a_session(fits):
    """Every smoothed row reads every node's features: the session's memo answers again only while
    no feature row changed (a far node's change included)."""
    graph, model = fits[0]
    session = model.query_session()
    session.predict_proba(graph.data, torch.arange(5))
    session.predict_proba(graph.data, torch.arange(5))
    assert session.query_ledger.releases == 1
    changed = graph.data.clone()
    changed.x = graph.data.x.clone()
    changed.x[graph.num_nodes - 1] += 1.0
    session.predict_proba(changed, torch.arange(5))
    assert session.query_ledger.releases == 2


def test_node_level_and_paper_never_smooth(graph, split):
    ndp = get_defense("gap-ndp")(epsilon=8.0, seed=0, max_degree=20, encoder_epochs=2, epochs=2, hop_grid=(1,))
    paper = get_defense("gap-edp")(epsilon=4.0, seed=0, protocol="paper", encoder_epochs=5, epochs=5, hop_grid=(1,))
    for model in (ndp.fit(graph, split), paper.fit(graph, split)):
        assert "feature_smoothing" not in model.config() and "encoder_input" not in model.card["gap"]
        assert torch.equal(model.encoder_inputs(graph.data), graph.data.x.float())


def test_the_release_sums_the_encoder_predictions(graph, split):
    """At ε = ∞ (no noise) the training release's hop 1 is each node's sum of its in-neighbours'
    one-hot predicted classes (unit rows: the sensitivity is unchanged)."""
    model = get_defense("gap-edp")(epsilon=float("inf"), seed=0, **FAST).fit(graph, split)
    assert model.config()["released_rows"] == "prediction"
    probabilities = model.encoder.encode(model.encoder_inputs(graph.data))
    votes = torch.nn.functional.one_hot(probabilities.argmax(1), graph.num_classes).float()
    ei = graph.data.edge_index
    expected = torch.zeros_like(votes).index_add_(0, ei[1], votes[ei[0]])
    assert torch.allclose(model.training_release().aggregations[:, : graph.num_classes], expected, atol=1e-5)


def test_an_inductive_split_smooths_the_training_rows_over_the_training_nodes(graph):
    split = make_split(graph, "inductive:0.5,0.3,0.2", 0)
    defense = get_defense("gap-edp")(epsilon=4.0, seed=0, **FAST)
    (raw, x), (smoothing, smoothed) = defense._input_candidates(graph, split, graph.data.x.float())
    assert raw is None and torch.equal(x, graph.data.x.float()) and smoothing == FeatureSmoothing()
    for part in (split.train, split.test):
        assert torch.allclose(smoothed[part], FeatureSmoothing().apply(graph.data.x[part].float()))
    assert not torch.allclose(smoothed[split.train], FeatureSmoothing().apply(graph.data.x.float())[split.train])
