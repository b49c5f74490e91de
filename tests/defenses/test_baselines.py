"""Baselines: utility on Cora, the DP baseline's accounting, reproducibility, input checks."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from torch_geometric.data import Data

import defenses.baselines as baselines
import defenses.baselines.mlp_dp as mlp_dp
from defenses.baselines import (
    SMALL_TRAINING_SET,
    MLPDPHyperparameters,
    auto_configuration,
    resolve_mlp_dp,
    row_normalize,
)
from dpaudit.accounting import PoissonSubsampledGaussian, PrivacyLedger
from dpaudit.app.pipeline import train
from dpaudit.data.adjacency import Adjacency
from dpaudit.data.datasets import from_data
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, PrivacyParameterError
from dpaudit.release.model import load
from dpaudit.testing.neighbours import train_and_compare, without_node
from dpaudit.training.registry import available_defenses, get_defense


def test_registry_lists_baselines():
    assert {"gcn", "sage", "mlp", "mlp-dp"} <= set(available_defenses())
    with pytest.raises(ConfigurationError, match="unknown defense"):
        get_defense("nope")


def test_gcn_on_cora_public_split(load_real):
    result = train("gcn", load_real("cora"), seed=0)
    assert result.split.spec == "public"
    assert result.metrics["test_accuracy"] >= 0.80  # Kipf & Welling report 0.815
    assert result.model.privacy.epsilon == math.inf and result.metrics["privacy"]["epsilon"] is None


def test_mlp_dp_on_cora_is_private_and_above_chance(load_real):
    cora = load_real("cora")
    # 140 training nodes: a linear model keeps the noise dimension small.
    result = train("mlp-dp", cora, epsilon=8.0, seed=0, overrides={"layers": 1, "lr": 0.05, "epochs": 100})
    privacy = result.model.privacy
    assert privacy.unit == "node" and privacy.sound and privacy.epsilon <= 8.0
    assert result.metrics["test_accuracy"] >= 2 * (1 / cora.num_classes)
    # The spec's mechanism, re-accounted independently, reproduces the spent ε.
    (mech,) = privacy.mechanisms
    again = PoissonSubsampledGaussian(mech["sigma"], mech["sample_rate"], mech["steps"])
    assert PrivacyLedger().step(again).get_epsilon(privacy.delta) == pytest.approx(privacy.epsilon)
    assert mech["steps"] == 100 and mech["sample_rate"] == 1.0


def test_mlp_dp_matches_opacus_accountant(small_graph):
    from opacus.accountants import RDPAccountant

    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("mlp-dp")(epsilon=2.0, seed=0, epochs=4, batch_size=32).fit(small_graph, split)
    (mech,) = model.privacy.mechanisms
    opacus_acc = RDPAccountant()
    opacus_acc.history = [(mech["sigma"], mech["sample_rate"], mech["steps"])]
    opacus_eps = opacus_acc.get_epsilon(model.privacy.delta)
    # the spec reports the tightest valid accountant (PLD) and keeps the RDP value beside it
    assert model.privacy.epsilon_by_accountant["rdp"] == pytest.approx(opacus_eps, rel=0.02)
    assert model.privacy.epsilon <= min(2.0, opacus_eps * 1.001)
    assert mech["sample_rate"] == pytest.approx(1 / math.ceil(180 / 32))


def test_more_privacy_costs_utility(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    accs = {}
    for eps in (0.05, math.inf):
        model = get_defense("mlp-dp")(epsilon=eps, seed=0, epochs=10, batch_size=64).fit(small_graph, split)
        accs[eps] = model.accuracy(small_graph.data, split.test)
    assert accs[math.inf] > accs[0.05] + 0.1


def test_same_seed_same_numbers(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    runs = [
        get_defense(name)(epsilon=eps, seed=3, epochs=5).fit(small_graph, split).predict_proba(small_graph.data)
        for name, eps in (("mlp-dp", 2.0), ("mlp-dp", 2.0), ("sage", math.inf), ("sage", math.inf))
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[2], runs[3])


def test_inductive_split_trains_on_the_training_graph_only(small_graph):
    result = train("gcn", small_graph, split="inductive:0.8,0.2", seed=0, overrides={"epochs": 50})
    assert result.metrics["test_accuracy"] > 0.5


def test_bad_inputs():
    with pytest.raises(PrivacyParameterError, match="not a private defense"):
        get_defense("gcn")(epsilon=1.0)
    with pytest.raises(PrivacyParameterError):
        get_defense("mlp-dp")(epsilon=-1)
    with pytest.raises(PrivacyParameterError):
        get_defense("mlp-dp")(epsilon=1, delta=1.0)
    with pytest.raises(ConfigurationError, match="unknown hyperparameters"):
        get_defense("mlp-dp")(epsilon=1, epochz=3)


# ----------------------------------------------------------------------------- gcn (Kipf & Welling)
def test_row_normalisation_and_gcn_propagation():
    x = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 4.0]])
    out = row_normalize(x)
    assert torch.allclose(out.sum(1), torch.tensor([1.0, 0.0, 1.0]))
    assert torch.allclose(out[0], torch.tensor([0.25, 0.75, 0.0]))
    # Â = D^-1/2 (A + I) D^-1/2 on the path 0 - 1 - 2 (a stored self loop is replaced by the one added).
    adjacency = Adjacency.from_edge_index(torch.tensor([[0, 1, 1, 2, 2], [1, 0, 2, 1, 2]]), 3)
    dense = adjacency.gcn(torch.float32)(torch.eye(3))
    a = torch.tensor([[1.0, 1, 0], [1, 1, 1], [0, 1, 1]])
    d = a.sum(1).pow(-0.5)
    assert torch.allclose(dense, d[:, None] * a * d[None, :])


def test_gcn_published_setup_is_scale_invariant_and_round_trips(tmp_path, small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    data = small_graph.data
    model = get_defense("gcn")(seed=0, epochs=30).fit(small_graph, split)
    assert model.card["hyperparameters"]["hidden"] == 16 and model.architecture["normalize"] is True
    weight_norms = [p.norm() for p in model.module.parameters()]
    assert len(weight_norms) == 2  # no biases, as in Kipf & Welling
    # Row normalisation: scaling one node's features leaves every prediction unchanged.
    scaled = data.clone()
    scaled.x = data.x.abs().clone()
    base = data.clone()
    base.x = data.x.abs()
    scaled.x[:50] *= 7.0
    assert torch.allclose(model.predict_proba(base), model.predict_proba(scaled), atol=1e-6)
    raw = get_defense("gcn")(seed=0, epochs=30, row_normalize=False).fit(small_graph, split)
    assert not torch.allclose(raw.predict_proba(base), raw.predict_proba(scaled), atol=1e-4)
    model.save(tmp_path / "gcn")
    again = load(tmp_path / "gcn")
    assert torch.allclose(again.predict_proba(data), model.predict_proba(data))


def test_gcn_weight_decay_only_on_the_first_layer(small_graph, monkeypatch):
    seen = {}
    real_adam = torch.optim.Adam

    def spy(groups, **kw):
        seen["groups"] = [
            (len(list(g["params"])) if not isinstance(g["params"], list) else len(g["params"]), g["weight_decay"])
            for g in groups
        ]
        return real_adam(groups, **kw)

    monkeypatch.setattr(torch.optim, "Adam", spy)
    get_defense("gcn")(seed=0, epochs=1).fit(small_graph, make_split(small_graph, "random:0.6,0.2,0.2", 0))
    assert [wd for _, wd in seen["groups"]] == [5e-4, 0.0]


# ----------------------------------------------------------------------------- mlp-dp rule and presets
def test_mlp_dp_auto_rule_depends_only_on_sizes():
    small = auto_configuration(140, 1433)
    assert small["layers"] == 1 and small["batch_size"] == 140 and small["epochs"] == 100
    wide = auto_configuration(2000, 3000)  # fewer training nodes than features: linear
    assert wide["layers"] == 1
    large = auto_configuration(3319, 2385)
    assert large["layers"] == 2 and large["hidden"] == 64 and large["batch_size"] == 256
    assert auto_configuration(100_000, 100)["batch_size"] == 6250
    gap = resolve_mlp_dp(MLPDPHyperparameters(preset="gap"), 5000, 100)
    assert (gap["layers"], gap["hidden"], gap["act"], gap["epochs"], gap["batch_size"]) == (3, 16, "selu", 10, 256)
    dpar = resolve_mlp_dp(MLPDPHyperparameters(preset="dpar", lr=0.01), 5000, 100)
    assert (dpar["hidden"], dpar["bias"], dpar["batch_size"], dpar["lr"]) == (32, False, 60, 0.01)
    with pytest.raises(ConfigurationError, match="preset"):
        resolve_mlp_dp(MLPDPHyperparameters(preset="nope"), 10, 10)
    # auto needs a declared size; a named preset does not, and then keeps its batch as given
    with pytest.raises(ConfigurationError, match="declared training-set size"):
        resolve_mlp_dp(MLPDPHyperparameters(), None, 100)
    assert resolve_mlp_dp(MLPDPHyperparameters(preset="gap"), None, 100)["batch_size"] == 256


def test_mlp_dp_defaults_learn_on_a_small_training_set(load_real):
    cora = load_real("cora")  # public split: 140 training nodes
    result = train("mlp-dp", cora, epsilon=8.0, seed=0)
    privacy = result.model.privacy
    assert privacy.sound and privacy.unit == "node" and privacy.epsilon <= 8.0
    assert result.model.card["mlp_dp"]["layers"] == 1
    assert result.metrics["test_accuracy"] >= 2 / cora.num_classes  # 0.185 with the old 2x64 default


def test_mlp_dp_presets_and_paper_protocol(tmp_path, small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    gap = get_defense("mlp-dp")(epsilon=4.0, seed=0, preset="gap").fit(small_graph, split)
    linears = [m for m in gap.module.modules() if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(16, 16), (16, 16), (3, 16)]
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in gap.module.modules())
    assert gap.privacy.sound and gap.privacy.epsilon <= 4.0
    dpar = get_defense("mlp-dp")(epsilon=4.0, seed=0, preset="dpar", epochs=2).fit(small_graph, split)
    assert all(m.bias is None for m in dpar.module.modules() if isinstance(m, torch.nn.Linear))
    (mech,) = dpar.privacy.mechanisms
    assert mech["sample_rate"] == pytest.approx(1 / math.ceil(180 / 60))
    paper = get_defense("mlp-dp")(epsilon=4.0, seed=0, preset="gap", protocol="paper").fit(small_graph, split)
    spec = paper.privacy
    assert not spec.sound and spec.protocol == "paper" and spec.epsilon <= 4.0
    assert len(spec.unaccounted) == 1 and "best-validation" in spec.unaccounted[0]
    # the chosen epoch is read from validation data: the owner's record, never the public card
    best = paper.record["mlp_dp"]["best_val_epoch"]
    assert 1 <= best <= 10
    assert "best_val_epoch" not in paper.card["mlp_dp"] and paper.card["mlp_dp"]["checkpoint"].startswith("best")
    paper.save(tmp_path / "m")
    assert "best_val_epoch" not in (tmp_path / "m" / "model.json").read_text()
    again = load(tmp_path / "m", record=True)
    assert torch.allclose(again.predict_proba(small_graph.data), paper.predict_proba(small_graph.data))
    assert not again.privacy.sound and again.privacy.unaccounted == spec.unaccounted
    assert again.record["mlp_dp"]["best_val_epoch"] == best
    assert "mlp_dp" not in load(tmp_path / "m", record=False).record


# ----------------------------------------------------------------------------- mlp-dp: no private size decides
def _flat(n: int, public_facts) -> object:
    """A graph without edges (mlp-dp reads features only) of ``n`` nodes, 8 features, 3 classes."""
    g = torch.Generator().manual_seed(0)
    data = Data(
        x=torch.randn(n, 8, generator=g),
        y=torch.randint(0, 3, (n,), generator=g),
        edge_index=torch.empty(2, 0, dtype=torch.long),
    )
    return from_data(data, "flat", public_facts=public_facts, classes=3)


@pytest.mark.parametrize("protocol", ["sound", "paper"])
def test_mlp_dp_release_is_neutral_across_the_preset_threshold(protocol, tmp_path):
    """Training sets of exactly SMALL_TRAINING_SET nodes and one fewer (the old rule switched from
    the 2 × 64 MLP to logistic regression between them, with other q, steps and σ) publish the same
    model.json leaf by leaf: every choice reads the declared training-set size, not the real one.
    mlp-dp reads features only, so dropping a node from the split is its node neighbour."""
    dataset = _flat(SMALL_TRAINING_SET + 10, public_facts=True)
    split = make_split(dataset, "random:0.99,0.01,0.0", 0)
    assert split.declared_sizes["train"] >= SMALL_TRAINING_SET and len(split.val) > 0
    larger = dataclasses.replace(split, train=split.train[:SMALL_TRAINING_SET])
    smaller = dataclasses.replace(larger, train=larger.train[:-1])
    differences = train_and_compare(
        lambda: get_defense("mlp-dp")(epsilon=4.0, seed=0, epochs=1, protocol=protocol),
        (dataset, larger),
        (dataset, smaller),
        tmp_path,
    )
    assert differences == {}
    card = json.loads((tmp_path / "neighbour-0" / "model.json").read_text())["card"]["mlp_dp"]
    assert card["layers"] == 2 and card["schedule"] == f"declared training-set size {split.declared_sizes['train']}"


def test_mlp_dp_node_removal_with_its_edges_is_neutral(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    differences = train_and_compare(
        lambda: get_defense("mlp-dp")(epsilon=2.0, seed=0, epochs=3),
        (small_graph, split),
        without_node(small_graph, split),
        tmp_path,
    )
    assert differences == {}


def test_mlp_dp_card_holds_the_plan_and_the_record_what_was_measured(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("mlp-dp")(epsilon=2.0, seed=0, epochs=3).fit(small_graph, split)
    section = model.card["mlp_dp"]
    assert set(section) == {
        "preset",
        "layers",
        "hidden",
        "act",
        "dropout",
        "lr",
        "epochs",
        "batch_size",
        "bias",
        "checkpoint",
        "noise_multiplier",
        "sample_rate",
        "steps",
        "expected_batch_size",
        "schedule",
    }
    (mech,) = model.privacy.mechanisms
    assert (mech["sigma"], mech["sample_rate"], mech["steps"]) == (
        section["noise_multiplier"],
        section["sample_rate"],
        section["steps"],
    )


def test_mlp_dp_without_a_declared_size(monkeypatch):
    """A user's graph that declares nothing: no size may be read, so preset=auto and a rate from
    B/n are refused before any training; a named preset with the sample_rate hyperparameter
    trains on a schedule of that rate alone."""
    undeclared = _flat(120, public_facts=None)
    split = make_split(undeclared, "random:0.7,0.1,0.2", 0)
    calls = []
    monkeypatch.setattr(mlp_dp, "train_dp_sgd", lambda *a, **k: calls.append(1))
    with pytest.raises(ConfigurationError, match="declared training-set size"):
        get_defense("mlp-dp")(epsilon=2.0, delta=1e-5, seed=0, sample_rate=0.1).fit(undeclared, split)
    with pytest.raises(ConfigurationError, match="sample_rate"):
        get_defense("mlp-dp")(epsilon=2.0, delta=1e-5, seed=0, preset="gap").fit(undeclared, split)
    assert not calls
    monkeypatch.undo()
    model = get_defense("mlp-dp")(epsilon=2.0, delta=1e-5, seed=0, preset="gap", sample_rate=0.25, epochs=2).fit(
        undeclared, split
    )
    (mech,) = model.privacy.mechanisms
    assert (mech["sample_rate"], mech["steps"]) == (0.25, 8)
    assert model.card["mlp_dp"]["schedule"] == "sample_rate hyperparameter"
    assert model.card["mlp_dp"]["expected_batch_size"] == 256  # the preset's B, not min(B, n)
    # ε = ∞ accounts nothing: the real size may choose the configuration
    assert get_defense("mlp-dp")(seed=0, epochs=1).fit(undeclared, split).card["mlp_dp"]["layers"] == 1


# --------------------------------------------------------------------------- select=validation
def _tiny():
    from dpaudit.data.datasets import csbm

    return csbm(num_nodes=120, num_classes=3, num_features=8, avg_degree=5, homophily=0.8, feature_signal=0.6, seed=3)


@pytest.mark.parametrize("name", ["mlp", "gcn"])
def test_select_validation_keeps_the_best_candidate_on_validation_nodes(name, monkeypatch):
    dataset = _tiny()
    split = make_split(dataset, "random:0.5,0.25,0.25", 0)
    # a 3-candidate grid keeps the test fast; the rule is the same for the declared grid
    grid = {"hidden": (4, 16), "dropout": (0.0,), "weight_decay": (5e-4,), "lr": (0.01, 0.1), "epochs": (15,)}
    monkeypatch.setitem(baselines.GRIDS, name, grid)
    model = get_defense(name)(seed=3, select="validation").fit(dataset, split)
    graph = split.graph_for(dataset, "val")
    by_hand = []
    for values in baselines.grid_candidates(grid):
        fitted = get_defense(name)(seed=3, **values).fit(dataset, split)
        by_hand.append(fitted.accuracy(graph, split.val))
    recorded = model.record["validation_selection"]
    assert [s["validation_accuracy"] for s in recorded["scores"]] == pytest.approx(by_hand)
    best = max(range(len(by_hand)), key=lambda i: (by_hand[i], -i))
    assert recorded["chosen_index"] == best and not recorded["held_out"]
    card = model.card["validation_selection"]
    assert card["chosen"] == baselines.grid_candidates(grid)[best] and card["candidates"] == len(by_hand)
    assert card["grid"] == {k: list(v) for k, v in grid.items()}
    chosen = get_defense(name)(seed=3, **card["chosen"]).fit(dataset, split)  # the release is that candidate's fit
    assert torch.equal(model.predict_proba(dataset.data), chosen.predict_proba(dataset.data))
    from dpaudit.release import check_public_card

    check_public_card(model.card)


def test_select_validation_holds_out_training_nodes_when_the_split_has_no_validation(monkeypatch):
    dataset = _tiny()
    split = make_split(dataset, "inductive:0.8,0.2", 0)
    assert len(split.val) == 0
    grid = {"hidden": (4, 16), "dropout": (0.0,), "weight_decay": (5e-4,), "lr": (0.05,), "epochs": (15,)}
    monkeypatch.setitem(baselines.GRIDS, "gcn", grid)
    first = get_defense("gcn")(seed=1, select="validation").fit(dataset, split)
    again = get_defense("gcn")(seed=1, select="validation").fit(dataset, split)
    assert first.record["validation_selection"] == again.record["validation_selection"]  # deterministic under a seed
    assert torch.equal(first.predict_proba(dataset.data), again.predict_proba(dataset.data))
    recorded = first.record["validation_selection"]
    assert recorded["held_out"] and recorded["validation_nodes"] == round(0.2 * len(split.train))
    assert "held out" in first.card["validation_selection"]["validation"]
    held = baselines.held_out_split(split, 1)
    assert set(held.train.tolist()) | set(held.val.tolist()) == set(split.train.tolist())
    assert not set(held.train.tolist()) & set(held.val.tolist())
    kept_edges = held.edge_index_for(dataset, "train")  # the selection fits see only edges among kept nodes
    assert torch.isin(kept_edges, held.train).all()
    # the release is the chosen candidate refitted on every training node
    chosen = get_defense("gcn")(seed=1, **first.card["validation_selection"]["chosen"]).fit(dataset, split)
    assert torch.equal(first.predict_proba(dataset.data), chosen.predict_proba(dataset.data))


def test_select_unknown_value_is_one_line_and_none_is_unchanged(small_graph):
    for name in ("mlp", "gcn", "sage"):
        with pytest.raises(ConfigurationError, match="select must be one of none, validation") as info:
            get_defense(name)(select="best")
        assert "\n" not in str(info.value)
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    for name in ("mlp", "gcn"):
        plain = get_defense(name)(seed=0, epochs=20).fit(small_graph, split)
        none = get_defense(name)(seed=0, epochs=20, select="none").fit(small_graph, split)
        assert torch.equal(plain.predict_proba(small_graph.data), none.predict_proba(small_graph.data))
        assert "validation_selection" not in none.card and "validation_selection" not in none.record
