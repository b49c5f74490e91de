"""The privacy noise source (issue 46 §1): OS entropy by default, the seed's generators only when
asked, recorded on the card; and the review's default-seed replay as a test."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.training.noise import NOISE_ENV, SECURE, SEEDED, SEEDED_FLAG, NoiseSource, noise_source, seeded_flag
from dpaudit.training.registry import get_defense

SPLIT = "random:0.5,0.2,0.3"


def test_secure_generators_differ_and_seeded_ones_repeat():
    secure, seeded = NoiseSource(SECURE), NoiseSource(SEEDED)
    a, b = (torch.randn(8, generator=secure.torch(0)) for _ in range(2))
    assert not torch.equal(a, b)
    assert torch.equal(torch.randn(8, generator=seeded.torch(5)), torch.randn(8, generator=seeded.torch(5)))
    assert not np.array_equal(secure.numpy([0, 1]).normal(size=8), secure.numpy([0, 1]).normal(size=8))
    assert np.array_equal(seeded.numpy([0, 1]).normal(size=8), seeded.numpy([0, 1]).normal(size=8))
    shared = torch.Generator().manual_seed(3)
    assert seeded.torch(shared) is shared and secure.torch(shared) is not shared


def test_mode_from_argument_then_environment(monkeypatch):
    monkeypatch.delenv(NOISE_ENV, raising=False)
    assert noise_source().mode == SECURE  # the default outside the tests
    monkeypatch.setenv(NOISE_ENV, "seeded")
    assert noise_source().mode == SEEDED and noise_source("secure").mode == SECURE
    monkeypatch.setenv(NOISE_ENV, "nope")
    with pytest.raises(ConfigurationError, match=NOISE_ENV):
        noise_source()
    with pytest.raises(ConfigurationError, match="noise must be one of secure, seeded"):
        noise_source("loud")
    with pytest.raises(ConfigurationError, match="noise"):
        get_defense("mlp-dp")(epsilon=1.0, noise="loud")


def test_card_records_the_mode(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    for mode in (SECURE, SEEDED):
        model = get_defense("mlp-dp")(epsilon=4.0, seed=0, epochs=2, noise=mode, device="cpu").fit(small_graph, split)
        assert model.card["noise"] == mode
        assert seeded_flag(model.card) == (SEEDED_FLAG if mode == SEEDED else None)
        assert "noise" not in model.record  # nothing of the entropy is kept


def _fit(mode: str, split, graph, seed: int = 0):
    return get_defense("mlp-dp")(epsilon=4.0, seed=seed, epochs=2, noise=mode, device="cpu").fit(graph, split)


def test_default_seed_replay_is_exact_only_with_seeded_noise(small_graph):
    """The review's reproduction: an adversary holding (D, D′) re-trains with the default seed 0;
    on D the replay matches the release exactly and on D′ (one training node fewer) it does not —
    with seeded noise. With the default noise the replay matches neither."""
    split = make_split(small_graph, SPLIT, seed=0)
    neighbour = dataclasses.replace(split, train=split.train[1:])
    released = _fit(SEEDED, split, small_graph).weights_sha256()
    assert _fit(SEEDED, split, small_graph).weights_sha256() == released
    assert _fit(SEEDED, neighbour, small_graph).weights_sha256() != released
    secure = _fit(SECURE, split, small_graph).weights_sha256()
    assert _fit(SEEDED, split, small_graph).weights_sha256() != secure
    assert _fit(SECURE, split, small_graph).weights_sha256() != secure


def test_private_selection_draws_from_the_source(small_graph):
    """``select=private``: K, the candidates and the run seeds come from the noise source, and
    every run inherits the mode."""
    from dpaudit.training.private_selection import candidate

    defense = get_defense("mlp-dp")(epsilon=4.0, seed=0, noise=SEEDED, device="cpu")
    assert candidate(defense, {}, 2.0).noise.mode == SEEDED
    defense = get_defense("mlp-dp")(epsilon=4.0, seed=0, noise=SECURE, device="cpu")
    assert candidate(defense, {}, 2.0).noise.mode == SECURE
