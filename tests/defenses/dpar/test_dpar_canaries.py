"""White-box gradient canaries in sound DPAR's DP-SGD loop (:mod:`defenses.dpar.canaries`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import defenses  # noqa: F401  (registers the defenses)
from defenses.dpar import sgd_step_mechanism
from defenses.dpar.canaries import LAW, NodeTerms
from dpaudit.data.datasets import from_data
from dpaudit.data.splits import make_split
from dpaudit.training.dpsgd import DiracCanaries, inserting_canaries
from dpaudit.training.registry import get_defense

SETTINGS = {"epochs": 3, "num_sources": 40, "batch_size": 100}


@pytest.fixture(scope="module")
def padded(small_graph):
    """``small_graph`` with 40 all-zero feature columns (room for Dirac canaries) and its split."""
    data = small_graph.data
    x = torch.cat([data.x, torch.zeros(data.num_nodes, 40)], dim=1)
    graph = from_data(Data(x=x, y=data.y, edge_index=data.edge_index), "small-padded", public_facts=True)
    return graph, make_split(graph, "inductive:0.8,0.2", seed=0)


def _hook(count: int, seed: int = 0) -> DiracCanaries:
    from dpaudit.auditing import gradient_canary as game

    return DiracCanaries(game.DiracDesign(count, seed), game.fair_coins(seed, 0), seed=seed + 17)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])


def test_node_terms_law_is_the_accounted_mixture():
    """Included canaries draw ρ ~ Bernoulli(q) * Binomial(d − 1, q_p) terms per step — the law of
    the spec's mixture-of-Gaussians record — and excluded ones none."""
    law = NodeTerms(sample_rate=0.3, pair_rate=0.05, terms=3)
    gen = torch.Generator().manual_seed(0)
    included = torch.tensor([True] * 3000 + [False] * 1000)
    draws = np.concatenate([law.draw(included, gen)[1].numpy()[None] for _ in range(20)])
    observed = np.bincount(draws[:, :3000].reshape(-1), minlength=4) / draws[:, :3000].size
    expected = np.asarray(sgd_step_mechanism(1.0, 1.0, 3, 0.3, 1, 0.05).probabilities)
    assert np.abs(observed - expected).max() < 0.01 and not draws[:, 3000:].any()
    record = sgd_step_mechanism(2.0, 1.0, 3, 0.3, 7, 0.05).describe()
    assert law.matches(record, 7) and not law.matches(record, 8)
    assert not NodeTerms(0.3, 0.5, 3).matches(record, 7)  # another pair rate is another claim
    assert law.describe()["law"] == LAW


def test_canaries_join_the_sound_run_and_leave_it_otherwise_identical(padded):
    """Without canaries, or with every canary excluded, the weights are bit-identical (the canaries
    draw from a generator of their own); included canaries move only their own coordinates, and the
    spec's DP-SGD record is the one their law matches."""
    graph, split = padded

    def fit():
        return get_defense("dpar-em1")(epsilon=4.0, delta=1e-3, seed=0, **SETTINGS).fit(graph, split)

    plain = fit()
    silent = _hook(30)
    silent.coins = lambda m: np.zeros(m, dtype=bool)
    with inserting_canaries(silent):
        assert torch.equal(_weights(plain), _weights(fit()))
    assert silent.attached and silent.steps == plain.card["dpar"]["steps"]
    hook = _hook(30)
    with inserting_canaries(hook):
        audited = fit()
    moved = set(torch.nonzero(_weights(audited) != _weights(plain)).reshape(-1).tolist())
    assert moved and moved <= set(hook.coordinates.tolist())
    assert isinstance(hook.law, NodeTerms) and hook.law.terms == 3
    assert sum(hook.law.matches(record, hook.steps) for record in audited.privacy.mechanisms) == 1
    assert hook.sampled[~hook.included].sum() == 0 and hook.sampled[hook.included].sum() > 0


def test_paper_runs_take_no_canaries(padded):
    """The paper protocol's accounting is not a bound: its loop never attaches gradient canaries."""
    graph, split = padded
    hook = _hook(5)
    with inserting_canaries(hook):
        get_defense("dpar-em1")(epsilon=4.0, delta=1e-3, seed=0, protocol="paper", **SETTINGS).fit(graph, split)
    assert not hook.attached
