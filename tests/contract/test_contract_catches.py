"""The contract suite catches what it claims to: defenses broken on purpose, registered for
these tests only (a fixture removes them), fail the checks; an honest one passes them all."""

from __future__ import annotations

import os

import pytest
import torch

import dpaudit.release.model
import dpaudit.training.registry
from defenses.baselines import MLPBaseline
from dpaudit.release.model import ModuleModel, register_model_kind
from dpaudit.testing.checks import (
    Subject,
    check_defense,
    check_determinism,
    check_noise_source,
    check_release_neutrality,
    check_save_load_round_trip,
    tiny_graph,
)
from dpaudit.training.noise import SEEDED, NoiseSource
from dpaudit.training.registry import get_defense, register_defense

FAST = {"epochs": 3, "hidden": 8}


class PerturbedOnLoad(ModuleModel):
    """Loads its weights with the first one nudged: save/load is not a round trip."""

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        first = next(iter(tensors))
        return super().from_state(config, {**tensors, first: tensors[first] + 1e-3}, privacy, card)


class DropsABias(ModuleModel):
    """Leaves the output layer's bias out of the file and rebuilds it as zeros: the tensors that
    are saved round-trip, the answers do not."""

    def state_tensors(self):
        return {k: v for k, v in super().state_tensors().items() if k != "out.bias"}

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        return super().from_state(
            config, {**tensors, "out.bias": torch.zeros_like(tensors["out.weight"][:, 0])}, privacy, card
        )


def _as(kind: type[ModuleModel], model: ModuleModel) -> ModuleModel:
    out = kind(model.module, model.architecture, model.privacy, model.card)
    out.record = model.record
    return out


class BrokenSaveDefense(MLPBaseline):
    name = "contract-perturbed-on-load"

    def _fit(self, dataset, split, delta):
        return _as(PerturbedOnLoad, super()._fit(dataset, split, delta))


class DropsABiasDefense(MLPBaseline):
    name = "contract-drops-a-bias"

    def _fit(self, dataset, split, delta):
        return _as(DropsABias, super()._fit(dataset, split, delta))


class NondeterministicDefense(MLPBaseline):
    """Adds noise the seed does not fix (drawn from the operating system's entropy)."""

    name = "contract-nondeterministic"

    def _fit(self, dataset, split, delta):
        model = super()._fit(dataset, split, delta)
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
        with torch.no_grad():
            weight = next(model.module.parameters())
            weight.add_(1e-3 * torch.randn(weight.shape, generator=generator))
        return model


class LeakyGCON(get_defense("gcon")):
    """GCON that writes the training graph's edge count into its public config."""

    name = "contract-leaky-gcon"

    def _fit(self, dataset, split, delta):
        model = super()._fit(dataset, split, delta)
        model.settings["edges_seen"] = int(dataset.num_edges)
        return model


@pytest.fixture
def broken():
    """Register the broken defenses (and their model kinds) for one test, then remove them."""
    kinds = {BrokenSaveDefense: PerturbedOnLoad, DropsABiasDefense: DropsABias}
    for defense, kind in kinds.items():
        register_model_kind(defense.name)(kind)
    for defense in (*kinds, NondeterministicDefense, LeakyGCON):
        register_defense(defense)
    yield
    for defense in (*kinds, NondeterministicDefense, LeakyGCON):
        dpaudit.training.registry._DEFENSES.pop(defense.name, None)
        dpaudit.release.model._MODEL_KINDS.pop(defense.name, None)
    assert not any(name.startswith("contract-") for name in dpaudit.training.registry.available_defenses())


@pytest.fixture(scope="module")
def graph():
    return tiny_graph()


@pytest.mark.parametrize("defense", [BrokenSaveDefense, DropsABiasDefense], ids=lambda d: d.name)
def test_a_broken_round_trip_fails_the_round_trip_check(broken, graph, defense, tmp_path):
    subject = Subject.of(defense.name, tmp_path / "subject", graph, **FAST)
    with pytest.raises(AssertionError, match="round trip"):
        check_save_load_round_trip(subject, tmp_path)
    check_determinism(subject, tmp_path)  # only the round trip is broken
    with pytest.raises(AssertionError, match="round trip"):
        check_defense(defense, tmp_path / "all", graph, **FAST)


def test_nondeterministic_training_fails_the_determinism_check(broken, graph, tmp_path):
    subject = Subject.of(NondeterministicDefense, tmp_path / "subject", graph, **FAST)
    check_save_load_round_trip(subject, tmp_path)  # its files round-trip
    with pytest.raises(AssertionError, match="two fits with seed 0"):
        check_determinism(subject, tmp_path)
    with pytest.raises(AssertionError, match="two fits with seed 0"):
        check_defense(NondeterministicDefense, tmp_path / "all", graph, **FAST)


def test_a_release_that_reads_the_protected_unit_fails_the_neutrality_check(broken, graph, tmp_path):
    subject = Subject.of(LeakyGCON, tmp_path / "subject", graph, encoder_epochs=5)
    with pytest.raises(AssertionError, match="edges_seen"):
        check_release_neutrality(subject, tmp_path)


def test_an_honest_defense_passes_every_check(graph, tmp_path):
    outcome = check_defense("mlp", tmp_path, graph, **FAST)
    assert outcome.pop("check_release_neutrality") == "skipped: non-private: nothing to be neutral about"
    assert outcome.pop("check_noise_source") == "skipped: non-private: no privacy noise"
    assert set(outcome.values()) == {"passed"} and len(outcome) == 4


class ReplayableNoise(get_defense("mlp-dp")):
    """Draws its privacy noise from the seed whatever the card says: the replayable noise of issue 46."""

    def _fit(self, dataset, split, delta):
        carded, self.noise = self.noise, NoiseSource(SEEDED)
        try:
            return super()._fit(dataset, split, delta)
        finally:
            self.noise = carded


def test_noise_replayable_from_the_seed_fails_the_noise_source_check(graph, tmp_path):
    check_noise_source(Subject.of("mlp-dp", tmp_path / "honest", graph, epochs=2), tmp_path)
    subject = Subject.of(ReplayableNoise, tmp_path / "subject", graph, epochs=2)
    with pytest.raises(AssertionError, match="replayable from the seed"):
        check_noise_source(subject, tmp_path)
