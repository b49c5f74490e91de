"""Attacks at full strength and on every model (issue 25 items 3-4, issue 27's attack structures):
LinkTeller's probe survives normalisation inside the model, attack structures are vectorised
and agree with the brute-force definitions, and the embedding probe runs on every defense and
split."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import attacks
from attacks.embedding import COORDINATE_QUANTILES, embedding_features, neighbour_similarity
from attacks.linkteller import edge_keys, is_edge, two_hop_non_edges
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.training.registry import available_defenses, get_defense

FAST = {"n_boot": 50}


@pytest.fixture(scope="module")
def tiny():
    return csbm(num_nodes=240, num_classes=3, num_features=12, avg_degree=5, homophily=0.8, feature_signal=0.8, seed=5)


def _tiny_overrides(cls) -> dict:
    """Few epochs (or steps): every defense trains in about a second on the tiny graph."""
    fields = {f.name for f in dataclasses.fields(cls.hyperparameters_class)}
    out = {name: 2 for name in fields if name.endswith("epochs")}
    if not out and "steps" in fields:
        out["steps"] = 5
    return out


SPLITS = ("random:0.4,0.1,0.3", "per-class:15,30,90", "inductive:0.5,0.3")


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("defense", available_defenses())
def test_embedding_probe_runs_on_every_defense_and_split(defense, split, tiny):
    cls = get_defense(defense)
    epsilon = None if cls.unit is None else 4.0
    model = cls(epsilon=epsilon, seed=0, **_tiny_overrides(cls)).fit(tiny, make_split(tiny, split, 0))
    res = attacks.run("embedding-probe", model, tiny, projections="", **FAST)
    assert 0.0 <= res.auc <= 1.0
    assert res.epsilon_lower_bound is None  # a diagnostic: never a bound


# --------------------------------------------------------------------------- LinkTeller


@pytest.fixture(scope="module")
def normalising_gcn(tiny):
    """The default ``gcn`` (Kipf & Welling: feature rows ℓ1-normalised inside the model)."""
    return get_defense("gcn")(seed=0, epochs=60).fit(tiny, make_split(tiny, "random:0.5,0.1,0.3", 0))


def test_linkteller_sees_through_row_normalisation(normalising_gcn, tiny):
    # scaling x_v, the paper's probe, reaches a row-normalising GCN unchanged (AUC 0.5 here)
    res = attacks.run("linkteller", normalising_gcn, tiny, num_pairs=60, pr_nodes=0, hard_negatives=False, **FAST)
    assert res.auc > 0.95
    assert res.runs[0]["zero_influence_fraction"] < 0.6  # edges all have influence


def test_linkteller_perturbs_in_place_and_restores(normalising_gcn, tiny, monkeypatch):
    from torch_geometric.data import Data

    def no_clone(self, *args, **kwargs):
        raise AssertionError("LinkTeller cloned the graph")

    monkeypatch.setattr(Data, "clone", no_clone)
    x = tiny.data.x
    before = x.clone()
    attacks.run("linkteller", normalising_gcn, tiny, num_pairs=20, pr_nodes=10, **FAST)
    assert tiny.data.x is x and torch.equal(x, before)


def test_linkteller_finds_no_influence_in_a_feature_only_model(tiny):
    # every score exactly 0: the perturbed and unperturbed queries ask for the same nodes, so a
    # model that batches only the queried rows computes both identically
    mlp = get_defense("mlp")(seed=0, epochs=20).fit(tiny, make_split(tiny, "random:0.5,0.1,0.3", 0))
    res = attacks.run("linkteller", mlp, tiny, num_pairs=60, pr_nodes=20, **FAST)
    assert res.runs[0]["zero_influence_fraction"] == 1.0 and res.auc == pytest.approx(0.5)


def test_linkteller_charges_gap_at_most_one_release_per_perturbed_node(tiny):
    cls = get_defense("gap-edp")
    model = cls(epsilon=4.0, seed=0, **_tiny_overrides(cls)).fit(tiny, make_split(tiny, "random:0.5,0.1,0.3", 0))
    twin = model.query_session()  # the owner's: the unperturbed graph is the training release
    res = attacks.run("linkteller", twin, tiny, num_pairs=30, pr_nodes=0, hard_negatives=False, **FAST)
    # a perturbation that cannot reach its targets reads the owner's training release, free; the
    # exact count is tests/attacks/test_scale_queries.py::test_linkteller_pays_gap_only_for_perturbations_that_reach_their_targets
    assert 0 < twin.query_ledger.releases <= res.runs[0]["queries"]


def _brute_two_hop(edges: set, num_nodes: int) -> set:
    nbrs = {i: set() for i in range(num_nodes)}
    for a, b in edges:
        nbrs[a].add(b)
        nbrs[b].add(a)
    out = set()
    for c in range(num_nodes):
        for a in nbrs[c]:
            for b in nbrs[c]:
                if a < b and (a, b) not in edges:
                    out.add((a, b))
    return out


def _random_graph(num_nodes: int, num_edges: int, seed: int):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, num_nodes, size=(2, num_edges))
    keep = a != b
    edges = {(int(min(p, q)), int(max(p, q))) for p, q in zip(a[keep], b[keep])}
    pairs = np.array(sorted(edges)).T
    return edges, torch.as_tensor(np.concatenate([pairs, pairs[::-1]], axis=1))


def test_two_hop_non_edges_and_edge_keys_match_brute_force():
    edges, edge_index = _random_graph(40, 70, seed=2)
    truth = _brute_two_hop(edges, 40)
    u, w = two_hop_non_edges(edge_index, 40, 10_000, np.random.default_rng(0))
    found = list(zip(u.tolist(), w.tolist()))
    assert len(found) == len(set(found)) and set(found) == truth  # all of them, each once
    few = two_hop_non_edges(edge_index, 40, 5, np.random.default_rng(1))
    assert len(few[0]) == 5 and set(zip(*map(list, few))) <= truth
    keys = edge_keys(edge_index, 40)
    a, b = np.meshgrid(np.arange(40), np.arange(40))
    flags = is_edge(keys, a.ravel(), b.ravel(), 40)
    assert {(int(p), int(q)) for p, q, f in zip(a.ravel(), b.ravel(), flags) if f and p < q} == edges


def test_two_hop_non_edges_draws_with_the_old_law():
    # a centre uniform among nodes of degree >= 2, then two distinct neighbours uniformly: the
    # star 0-{1,2,3} plus the path 3-4-5 (centres 0, 3, 4)
    pairs = [(0, 1), (0, 2), (0, 3), (3, 4), (4, 5)]
    edge_index = torch.tensor(pairs + [(b, a) for a, b in pairs]).T
    rng = np.random.default_rng(0)
    draws = [tuple(int(t[0]) for t in two_hop_non_edges(edge_index, 6, 1, rng)) for _ in range(3000)]
    counts = {p: draws.count(p) / len(draws) for p in set(draws)}
    # centre 0 (1/3): (1,2), (1,3), (2,3) each 1/9; centre 3 (1/3): neighbours 0, 4 -> (0,4) 1/3;
    # centre 4 (1/3): neighbours 3, 5 -> (3,5) 1/3
    expected = {(1, 2): 1 / 9, (1, 3): 1 / 9, (2, 3): 1 / 9, (0, 4): 1 / 3, (3, 5): 1 / 3}
    assert set(counts) == set(expected)
    for pair, p in expected.items():
        assert abs(counts[pair] - p) < 0.04


# --------------------------------------------------------------------------- embedding features


def test_embedding_features_fixed_width_and_chunked_similarity():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=50)
    edges, edge_index = _random_graph(50, 120, seed=3)
    ei = edge_index.numpy()
    nodes = np.arange(0, 50, 2)
    for width in (4, 16, 300):
        emb = rng.normal(size=(50, width))
        assert embedding_features(emb, y, ei, nodes).shape == (25, COORDINATE_QUANTILES + 4)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    expected = np.zeros(50)
    for node in range(50):
        nbrs = ei[0][ei[1] == node]
        expected[node] = np.mean(unit[nbrs] @ unit[node]) if len(nbrs) else 0.0
    np.testing.assert_allclose(neighbour_similarity(unit, ei, chunk=7), expected, atol=1e-5)


# --------------------------------------------------------------------------- TSTF


def test_shadow_members_take_the_targets_split_shape(tiny):
    from attacks.membership import match_split_shape

    y = tiny.data.y
    pool_in, pool_out = torch.arange(0, 240, 2), torch.arange(1, 240, 2)
    per_class = make_split(tiny, "per-class:7,30,90", 0)
    s_in, s_out = match_split_shape(pool_in, pool_out, per_class, y, seed=0)
    assert torch.bincount(y[s_in], minlength=3).tolist() == [7, 7, 7]
    assert torch.equal(torch.bincount(y[s_out], minlength=3), torch.bincount(y[s_in], minlength=3))
    uniform = make_split(tiny, "random:0.2,0.1,0.3", 0)
    s_in, s_out = match_split_shape(pool_in, pool_out, uniform, y, seed=0)
    assert len(s_in) <= len(uniform.train) and len(s_in) >= 0.8 * len(uniform.train)
    assert torch.equal(torch.bincount(y[s_out], minlength=3), torch.bincount(y[s_in], minlength=3))
