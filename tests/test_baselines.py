"""Baselines: utility on Cora, the DP baseline's accounting, reproducibility, input checks."""

from __future__ import annotations

import math

import pytest
import torch

from dpaudit.accounting import PoissonSubsampledGaussian, PrivacyLedger
from dpaudit.errors import ConfigurationError, PrivacyParameterError
from dpaudit.pipeline import train
from dpaudit.registry import available_defenses, get_defense
from dpaudit.splits import make_split


def test_registry_lists_baselines():
    assert {"gcn", "sage", "mlp", "mlp-dp"} <= set(available_defenses())
    with pytest.raises(ConfigurationError, match="unknown defense"):
        get_defense("nope")


def test_gcn_on_cora_public_split(load_real):
    result = train("gcn", load_real("cora"), seed=0)
    assert result.split.spec == "public"
    assert result.metrics["test_accuracy"] >= 0.78
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
    assert opacus_acc.get_epsilon(model.privacy.delta) <= 2.0 * 1.02
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
