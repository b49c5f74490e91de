"""Sound GAP-EDP's skip head (issue 50): the feature-only encoder and the hop-0 skip read no edge,
the ledger holds the one PMA release only (spent ≤ target), and two graphs differing in one edge
give identical public fields apart from what the noisy release (and its post-processing) gives."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch_geometric.utils import to_undirected

import defenses  # noqa: F401  (registers the defenses)
from defenses.gap import protocols
from defenses.gap.model import GAPSkipClassifier
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense

SPLIT = "random:0.5,0.25,0.25"
FAST = {"encoder_epochs": 15, "hops": 2}


def _with_edges(dataset, edge_index):
    """A copy of ``dataset`` over ``edge_index`` (the same nodes, features, labels and declarations)."""
    data = dataset.data.clone()
    data.edge_index = edge_index
    return dataclasses.replace(dataset, data=data)


def _minus_one_edge(edge_index: torch.Tensor) -> torch.Tensor:
    u, v = int(edge_index[0, 0]), int(edge_index[1, 0])
    keep = ~(((edge_index[0] == u) & (edge_index[1] == v)) | ((edge_index[0] == v) & (edge_index[1] == u)))
    return edge_index[:, keep]


@pytest.fixture(scope="module")
def split(small_graph):
    return make_split(small_graph, SPLIT, 0)


@pytest.fixture(scope="module")
def pair(small_graph, split):
    """Sound gap-edp at ε = 4 on the graph and on the graph minus one undirected edge (same seed)."""
    fit = get_defense("gap-edp")
    neighbour = _with_edges(small_graph, _minus_one_edge(small_graph.data.edge_index))
    return (
        fit(epsilon=4.0, seed=0, **FAST).fit(small_graph, split),
        fit(epsilon=4.0, seed=0, **FAST).fit(neighbour, split),
    )


def test_the_ledger_is_the_one_pma_release_and_spent_within_target(pair):
    model, _ = pair
    spec = model.privacy
    assert spec.sound and spec.unaccounted == []
    assert 0.98 * 4.0 < spec.epsilon <= 4.0
    assert [m["count"] for m in spec.mechanisms] == [2]  # K_max = hops = 2 (set), nothing else charged
    assert model.config()["head"] == "skip"
    assert isinstance(model.classifier, GAPSkipClassifier)
    assert any("skip head" in note for note in spec.notes)


def test_the_encoder_and_hop0_skip_read_no_edge(small_graph, split):
    """The encoder is the same whatever the edges (here: none at all): it reads features and
    labels only, so it needs no charge. If it (or the hop-0 skip) read an edge, the weights and
    the hop-0 outputs on the empty graph would differ."""
    empty = _with_edges(small_graph, torch.empty(2, 0, dtype=torch.long))
    fit = get_defense("gap-edp")
    a = fit(epsilon=4.0, seed=0, **FAST).fit(small_graph, split)
    b = fit(epsilon=4.0, seed=0, **FAST).fit(empty, split)
    for (name, wa), wb in zip(a.encoder.state_dict().items(), b.encoder.state_dict().values()):
        assert torch.equal(wa, wb), name
    x = small_graph.data.x.float()
    assert torch.equal(a.encoder.encode(x), b.encoder.encode(x))
    assert a.encoder.encode(x).shape == (small_graph.num_nodes, small_graph.num_classes)


def test_one_edge_changes_only_the_release(pair):
    """Neighbour-diff neutrality: every public field not computed from the noisy release (the
    plan: ledger, σ, Δ, the query mechanism's noise, ε, δ, the hyperparameters, the encoder)
    is identical for G and G minus one edge; K, the head's weights and the training release may
    differ (post-processing of the release)."""
    a, b = pair
    ca, cb = a.config(), b.config()
    for key in ("ledger", "noise_std", "hidden", "dropout", "in_dim", "num_classes", "head", "level", "protocol"):
        assert ca[key] == cb[key], key
    assert ca["query_mechanism"]["sigma"] == cb["query_mechanism"]["sigma"]
    assert a.privacy.epsilon == b.privacy.epsilon and a.privacy.delta == b.privacy.delta
    assert a.privacy.mechanisms == b.privacy.mechanisms
    plan_a = {k: v for k, v in a.card["gap"].items() if k not in ("hops", "released_hops")}
    plan_b = {k: v for k, v in b.card["gap"].items() if k not in ("hops", "released_hops")}
    assert plan_a == plan_b
    assert a.card["hyperparameters"] == b.card["hyperparameters"]
    for wa, wb in zip(a.encoder.state_dict().values(), b.encoder.state_dict().values()):
        assert torch.equal(wa, wb)


def test_the_skip_head_helps_on_a_homophilous_graph_and_round_trips(tmp_path):
    """On a homophilous graph with weak features, at ε = ∞, the head uses the hops (nonzero hop
    weights) and beats the encoder alone on the test nodes; the saved model reloads with the same answers."""
    graph = csbm(
        num_nodes=300, num_classes=3, num_features=16, avg_degree=8, homophily=0.9, feature_signal=0.25, seed=3
    )
    split = make_split(graph, SPLIT, 0)
    model = get_defense("gap-edp")(epsilon=float("inf"), seed=0, **FAST).fit(graph, split)
    hop_weights = model.classifier.linear.weight[:, graph.num_classes :]
    assert hop_weights.abs().sum() > 0
    release = model.training_release()
    acc = release.accuracy(graph.data, split.test)
    test = split.test
    encoder_acc = float((model.encoder(graph.data.x.float()[test]).argmax(1) == graph.data.y[test]).float().mean())
    assert acc > encoder_acc + 0.05
    loaded = load(model.save(tmp_path / "m"), record=True)
    assert torch.allclose(loaded.training_release().predict_proba(graph.data), release.predict_proba(graph.data))


def test_paper_protocol_keeps_the_reference_architecture(small_graph, split):
    assert not protocols.uses_skip_head("edge", "paper") and not protocols.uses_skip_head("node", "sound")
    model = get_defense("gap-edp")(epsilon=4.0, seed=0, protocol="paper", encoder_epochs=5, epochs=5, hop_grid=(1,))
    fitted = model.fit(small_graph, split)
    assert "head" not in fitted.config() and not isinstance(fitted.classifier, GAPSkipClassifier)


def test_a_heterophilous_graph_falls_back_near_the_encoder():
    """Where the edges carry no label signal, the head may keep the encoder alone: accuracy never
    falls far below it (the fallback among the cross-validated choices)."""
    graph = csbm(
        num_nodes=300, num_classes=3, num_features=16, avg_degree=6, homophily=0.34, feature_signal=0.8, seed=2
    )
    graph.data.edge_index = to_undirected(graph.data.edge_index, num_nodes=graph.num_nodes)
    split = make_split(graph, SPLIT, 0)
    model = get_defense("gap-edp")(epsilon=1.0, seed=0, **FAST).fit(graph, split)
    release = model.training_release()
    acc = release.accuracy(graph.data, split.test)
    encoder_acc = float(
        (model.encoder(graph.data.x.float()[split.test]).argmax(1) == graph.data.y[split.test]).float().mean()
    )
    assert acc >= encoder_acc - 0.08
