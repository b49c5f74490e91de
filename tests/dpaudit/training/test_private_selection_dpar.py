"""``select=private`` for sound DPAR (Papernot & Steinke 2022, Theorem 2, with a features-only
validation score) and the refusals of dpgnn and gcon: the features-only count has node
sensitivity 1 while the propagated (Eq. 4) count does not, the selection spends ≤ the target,
the card holds the choice and the owner's record the runs and scores, and a selected model
saves, loads and refuses edits."""

from __future__ import annotations

import json

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from dpaudit.accounting import GaussianMechanism, PrivacyLedger, SensitivityMixtureGaussian
from dpaudit.accounting.mechanisms import mechanism_from_record
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release import declared_train_size
from dpaudit.release.model import load
from dpaudit.training.private_selection import features_only_count, grid_of, selection_for
from dpaudit.training.registry import get_defense

SPLIT = "random:0.6,0.2,0.2"
FAST = {"epochs": 3, "num_sources": 40, "batch_size": 100}
TARGET, DELTA = 6.0, 1e-4


@pytest.fixture(scope="module")
def selected_dpar(small_graph, tmp_path_factory):
    split = make_split(small_graph, SPLIT, seed=0)
    defense = get_defense("dpar-em1")(epsilon=TARGET, delta=DELTA, seed=1, select="private", select_runs=2, **FAST)
    model = defense.fit(small_graph, split)
    return model, split, defense, model.save(tmp_path_factory.mktemp("dpar-sel") / "model")


# ----------------------------------------------------------------------------- the score
def _propagated_count(model, graph: Data, nodes) -> int:
    """The count a score over the released predictions (Eq. 4 on the graph) would make."""
    return int(round(model.accuracy(graph, nodes) * len(nodes)))


def _without(graph: Data, node: int, nodes: torch.Tensor) -> tuple[Data, torch.Tensor]:
    """``graph`` with ``node`` and its edges removed (relabelled), and ``nodes`` minus it."""
    keep = torch.ones(graph.num_nodes, dtype=torch.bool)
    keep[node] = False
    edges, _ = subgraph(keep, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
    new_id = torch.cumsum(keep.long(), 0) - 1
    return Data(x=graph.x[keep], y=graph.y[keep], edge_index=edges), new_id[nodes[nodes != node]]


def _with_hub(graph: Data, nodes: torch.Tensor, features: torch.Tensor, label: int) -> Data:
    """``graph`` plus one node (features, label) joined to every node of ``nodes``."""
    hub = graph.num_nodes
    ends = torch.stack([torch.full_like(nodes, hub), nodes])
    edges = torch.cat([graph.edge_index, ends, ends.flip(0)], dim=1)
    return Data(
        x=torch.cat([graph.x, features.view(1, -1)]), y=torch.cat([graph.y, torch.tensor([label])]), edge_index=edges
    )


def _changes(model, graph: Data, val: torch.Tensor, count) -> list[int]:
    """|count(neighbour) − count(graph)| over the removal of every validation node and of the 40
    highest-degree nodes, and over one hub addition."""
    base = count(model, graph, val)
    degree = torch.bincount(graph.edge_index[0], minlength=graph.num_nodes)
    removed = torch.unique(torch.cat([val, degree.argsort(descending=True)[:40]])).tolist()
    changes = [abs(count(model, *_without(graph, u, val)) - base) for u in removed]
    # an added node wired to every validation node (a valid node-level neighbour), its features a
    # real node's scaled up: f_θ has no biases, so its logits scale too and dominate Eq. 4's mean
    with torch.no_grad():
        logits = model.module(graph.x)
    # if the hub turns every validation prediction to its class, the count becomes that class's size
    target = int((torch.bincount(graph.y[val], minlength=logits.size(1)) - base).abs().argmax())
    others = logits.clone()
    others[:, target] = -torch.inf
    source = int((logits[:, target] - others.amax(dim=1)).argmax())  # the node most sure of the target
    hub = 1000.0 * graph.x[source]
    for as_validation in (False, True):
        grown = _with_hub(graph, val, hub, target)
        asked = torch.cat([val, torch.tensor([graph.num_nodes])]) if as_validation else val
        changes.append(abs(count(model, grown, asked) - base))
    return changes


def test_features_only_count_has_node_sensitivity_one_and_the_propagated_count_does_not(selected_dpar, small_graph):
    """Measured on a 300-node graph with the selected model's f_θ: removing a node (with its
    edges: every validation node and the hubs) or adding a hub wired to every validation node moves the features-only count by at
    most 1, and by exactly 1 for some neighbour (the bound is attained); the count of the
    released, propagated predictions moves by more than 1 — a score over it would break the
    sensitivity the accounting charges."""
    model, split, _, _ = selected_dpar
    graph = Data(x=small_graph.data.x, y=small_graph.data.y, edge_index=small_graph.data.edge_index)
    features_only = _changes(model, graph, split.val, features_only_count)
    assert max(features_only) == 1
    propagated = _changes(model, graph, split.val, _propagated_count)
    assert max(propagated) > 1


# ----------------------------------------------------------------------------- the selection
def test_dpar_selection_spends_at_most_the_target_and_each_run_is_its_plan(selected_dpar, small_graph):
    model, split, defense, _ = selected_dpar
    spec = model.privacy
    assert spec.sound and spec.unit == "node" and spec.epsilon <= TARGET
    (record,) = spec.mechanisms
    selection = mechanism_from_record(record)
    run_epsilon = model.card["selection"]["run_epsilon"]
    assert len(selection.candidates) == len(grid_of(get_defense("dpar-em1")))
    for run in selection.candidates:
        *training, score = run
        assert isinstance(score, GaussianMechanism) and (score.sigma, score.sensitivity) == (5.0, 1.0)
        assert [type(m).__name__ for m in training] == [
            "ExponentialMechanism",
            "LaplaceMechanism",
            "SensitivityMixtureGaussian",
        ]
        assert training[-1].analysis == "mixture-of-gaussians"
        # DP-APPR + DP-SGD of a candidate alone spend ≤ ε_run (its own calibration at q′ = 1)
        assert PrivacyLedger().extend(training).get_epsilon(DELTA) <= run_epsilon * (1 + 1e-6)
    # the record is the plan of the public grid at ε_run (nothing read from the data)
    planned = selection_for(
        defense, run_epsilon, small_graph.num_features, declared_train_size(small_graph, split), DELTA
    )
    assert planned.describe() == record
    # the winning run's own spec was the DP-APPR + DP-SGD ledger with the identity amplification
    winner = model.record["selection"]["winner_run_spec"]
    assert winner["mechanisms"][-1]["sample_rate"] == 1.0
    assert isinstance(mechanism_from_record(winner["mechanisms"][-2]), SensitivityMixtureGaussian)


def test_card_has_the_choice_and_the_owners_record_keeps_runs_and_scores(selected_dpar):
    model, _, _, directory = selected_dpar
    section = model.card["selection"]
    assert section["chosen"] in section["grid"] and section["grid"] == [
        dict(c) for c in grid_of(get_defense("dpar-em1"))
    ]
    assert "features-only" in section["score"] and section["score_noise"] == 5.0
    public = (directory / "model.json").read_text()
    for private in ("number_of_runs", "score_history", "winner_run_spec", "sampled_nodes", "trained_rows"):
        assert private not in public
    record = json.loads((directory / "provenance.json").read_text())
    assert record["selection"]["number_of_runs"] == len(record["selection"]["score_history"]) >= 1
    assert "trained_rows" in record["dpar"]


def _edited(directory, tmp_path, edit) -> object:
    meta = json.loads((directory / "model.json").read_text())
    edit(meta)
    out = tmp_path / "edited"
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    (out / "model.json").write_text(json.dumps(meta))
    return out


def test_a_selected_dpar_model_loads_and_edits_are_refused(selected_dpar, small_graph, tmp_path):
    model, split, _, directory = selected_dpar
    loaded = load(directory)
    assert loaded.privacy.epsilon == pytest.approx(model.privacy.epsilon)
    assert loaded.card["selection"] == model.card["selection"]
    assert any("re-derived" in line for line in loaded.verification.checked)
    graph = split.graph_for(small_graph, "test")
    assert torch.equal(loaded.predict(graph, split.test), model.predict(graph, split.test))

    def larger_run_epsilon(meta):
        meta["card"]["selection"]["run_epsilon"] *= 1.5

    def another_candidate(meta):
        section = meta["card"]["selection"]
        section["chosen"] = next(c for c in section["grid"] if c != section["chosen"])

    def the_winners_own_ledger(meta):
        winner = json.loads((directory / "provenance.json").read_text())["selection"]["winner_run_spec"]
        meta["privacy"]["mechanisms"] = winner["mechanisms"]

    for edit, match in (
        (larger_run_epsilon, "per-run ε|plan"),
        (another_candidate, "plan"),
        (the_winners_own_ledger, "exactly one private selection"),
    ):
        with pytest.raises(DPAuditError, match=match):
            load(_edited(directory, tmp_path / edit.__name__, edit))


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("name", "settings", "match"),
    [
        ("dpgnn", {}, "dpgnn.s sampler is sound: false"),
        ("gcon", {}, r"\(ε, δ\)-edge-DP only.*bounds no Rényi divergence"),
        ("dpar-em1", {"node_sample_rate": 0.5}, "q′ = 0.5 < 1"),
        ("dpar-gm", {"protocol": "paper"}, "protocol=paper"),
    ],
)
def test_refused_requests_say_why_at_construction(name, settings, match):
    with pytest.raises(ConfigurationError, match=match):
        get_defense(name)(epsilon=4.0, select="private", **settings)


def test_dpar_selection_needs_validation_nodes_and_a_declared_size_before_any_training(small_graph, monkeypatch):
    """DPAR's own inductive:0.8,0.2 has no validation node to score on, and a dataset without a
    declared size cannot plan a run: one error each, and no run is trained."""
    import dataclasses

    from defenses.dpar import _DPAR

    def no_training(*args, **kwargs):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr(_DPAR, "_fit", no_training)
    no_validation = make_split(small_graph, "inductive:0.8,0.2", seed=0)
    with pytest.raises(ConfigurationError, match="validation nodes; the split has none"):
        get_defense("dpar-em1")(epsilon=4.0, delta=DELTA, select="private", **FAST).fit(small_graph, no_validation)
    split = make_split(small_graph, SPLIT, seed=0)
    undeclared = dataclasses.replace(small_graph, public_facts={})
    with pytest.raises(DPAuditError, match="declared"):
        get_defense("dpar-em0")(epsilon=4.0, delta=DELTA, select="private", **FAST).fit(undeclared, split)
