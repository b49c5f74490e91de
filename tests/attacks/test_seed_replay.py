"""The ``seed-replay`` attack (issue 46 §1): a release made with seeded noise is reproduced from its
public card (a broken guarantee, ε lower bound ∞); one made with the default noise is not."""

from __future__ import annotations

import math

import pytest

import attacks
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.training.noise import SECURE, SEEDED
from dpaudit.training.registry import get_defense

SPLIT = "random:0.5,0.2,0.3"


def _release(graph, mode: str, seed: int):
    split = make_split(graph, SPLIT, seed=seed)  # as `dpaudit train --seed` does
    model = get_defense("mlp-dp")(epsilon=4.0, seed=seed, epochs=2, noise=mode, device="cpu").fit(graph, split)
    model.card["split"]["spec"] = SPLIT
    return model


def test_seed_replay_flags_a_seeded_release(small_graph):
    result = attacks.run("seed-replay", _release(small_graph, SEEDED, 2), small_graph, seeds=4)
    replay = result.extra["seed_replay"]
    assert replay["reproduced"] and replay["seed"] == 2 and replay["seeds_tried"] == [0, 1, 2]
    assert result.epsilon_lower_bound == math.inf and result.bound_valid and result.covered_by_guarantee
    assert replay["epsilon_lower_bound"] == "inf"  # what the saved JSON keeps
    assert any("broken" in note for note in result.notes)
    assert result.model["noise"] == SEEDED
    assert result.to_dict()["extra"]["seed_replay"]["epsilon_lower_bound"] == "inf"


def test_seed_replay_does_not_flag_a_default_release(small_graph):
    result = attacks.run("seed-replay", _release(small_graph, SECURE, 0), small_graph, seeds=2)
    replay = result.extra["seed_replay"]
    assert not replay["reproduced"] and replay["seeds_tried"] == [0, 1]
    assert result.epsilon_lower_bound is None and not result.bound_valid
    assert result.model["noise"] == SECURE


def test_seed_replay_settings_are_declared():
    assert "seed-replay" in attacks.available_attacks()
    assert attacks.attack_settings("seed-replay")["seeds"] == 4
    with pytest.raises(ConfigurationError, match="seeds"):
        attacks.check_settings("seed-replay", {"seeds": 0})
