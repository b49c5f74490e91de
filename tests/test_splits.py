"""Splits: deterministic, disjoint, labeled-only; inductive edge removal; membership partitions."""

from __future__ import annotations

import pytest
import torch

from dpaudit.errors import ConfigurationError
from dpaudit.splits import make_split, membership_partition


def _disjoint(*parts):
    allnodes = torch.cat(parts)
    return allnodes.unique().numel() == allnodes.numel()


def test_random_split_is_seeded_and_disjoint(small_graph):
    a = make_split(small_graph, "random:0.6,0.2,0.2", seed=5)
    b = make_split(small_graph, "random:0.6,0.2,0.2", seed=5)
    c = make_split(small_graph, "random:0.6,0.2,0.2", seed=6)
    assert torch.equal(a.train, b.train) and not torch.equal(a.train, c.train)
    assert _disjoint(a.train, a.val, a.test)
    assert (len(a.train), len(a.val), len(a.test)) == (180, 60, 60)


def test_per_class_split(load_real):
    cora_ml = load_real("cora_ml")
    split = make_split(cora_ml, "per-class:20,500,1000", seed=0)
    assert torch.bincount(cora_ml.data.y[split.train]).tolist() == [20] * 7
    assert (len(split.val), len(split.test)) == (500, 1000)
    assert _disjoint(split.train, split.val, split.test)


def test_public_split_and_default(load_real):
    cora = load_real("cora")
    split = make_split(cora, None, seed=0)
    assert split.spec == "public" and (len(split.train), len(split.val), len(split.test)) == (140, 500, 1000)
    assert make_split(load_real("cora_ml"), None, 0).spec == "random:0.75,0.1,0.15"


def test_only_labeled_nodes_are_split(load_real):
    reed = load_real("reed98")
    split = make_split(reed, "random:0.5,0.25,0.25", seed=0)
    for part in (split.train, split.val, split.test):
        assert reed.data.label_mask[part].all()


def test_inductive_split_removes_cross_edges(small_graph):
    split = make_split(small_graph, "inductive:0.8,0.2", seed=1)
    assert split.inductive and _disjoint(split.train, split.test)
    train_edges = split.edge_index_for(small_graph, "train")
    test_edges = split.edge_index_for(small_graph, "test")
    train_set = set(split.train.tolist())
    test_set = set(split.test.tolist())
    assert all(u in train_set and v in train_set for u, v in train_edges.t().tolist())
    assert all(u in test_set and v in test_set for u, v in test_edges.t().tolist())
    total = small_graph.data.edge_index.size(1)
    assert train_edges.size(1) + test_edges.size(1) < total  # cross edges are gone


@pytest.mark.parametrize("spec", ["random:0.9,0.2,0.1", "per-class:1000,10,10", "weird", "random:a,b,c", "inductive:1"])
def test_bad_split_specs(small_graph, spec):
    with pytest.raises(ConfigurationError):
        make_split(small_graph, spec, 0)


def test_public_split_missing(small_graph):
    with pytest.raises(ConfigurationError, match="no public split"):
        make_split(small_graph, "public", 0)


def test_membership_partition_is_balanced_and_disjoint(small_graph):
    split = make_split(small_graph, "random:0.5,0.1,0.4", seed=0)
    part = membership_partition(small_graph, split, seed=0, shadow_per_class=20)
    t, s = part.target, part.shadow
    assert len(t.members) == len(t.non_members) > 0
    assert torch.isin(t.members, split.train).all() and not torch.isin(t.non_members, split.train).any()
    assert len(s.members) == len(s.non_members) > 0
    assert _disjoint(t.members, t.non_members, s.members, s.non_members)
    assert len(t.members) <= 300 // 4
    y = small_graph.data.y
    assert torch.equal(torch.bincount(y[s.members], minlength=3), torch.bincount(y[s.non_members], minlength=3))
    again = membership_partition(small_graph, split, seed=0, shadow_per_class=20)
    assert torch.equal(again.shadow.members, s.members)


def test_metis_split_is_deterministic_disjoint_and_inductive(small_graph):
    a = make_split(small_graph, "metis:9", seed=0)
    b = make_split(small_graph, "metis:9", seed=3)  # METIS seed 0: the split seed does not change it
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test) and torch.equal(a.node_part, b.node_part)
    assert a.inductive and _disjoint(a.train, a.val, a.test)
    covered = torch.cat([a.train, a.val, a.test]).sort().values
    assert torch.equal(covered, small_graph.labeled_nodes.sort().values)  # the parts cover every labeled node
    assert set(a.node_part.tolist()) == set(range(9))
    assert torch.equal(a.test, (a.node_part == 4).nonzero().view(-1))
    assert torch.equal(a.val, (a.node_part == 5).nonzero().view(-1))
    edges = small_graph.data.edge_index
    cut = a.node_part[edges[0]] != a.node_part[edges[1]]
    assert cut.any()  # the partition cuts edges, also between two training parts
    between_train = cut & torch.isin(edges[0], a.train) & torch.isin(edges[1], a.train)
    assert between_train.any()
    for phase in ("train", "val", "test"):
        visible = a.edge_index_for(small_graph, phase)
        assert (a.node_part[visible[0]] == a.node_part[visible[1]]).all()
        nodes = set(getattr(a, phase).tolist())
        assert all(u in nodes and v in nodes for u, v in visible.t().tolist())
    inside = ~cut & torch.isin(edges[0], a.train)
    assert a.edge_index_for(small_graph, "train").size(1) == int(inside.sum())  # every internal edge is kept


@pytest.mark.parametrize("spec", ["metis:3", "metis:0", "metis:x", "metis:9.5", "metis:301"])
def test_bad_metis_specs(small_graph, spec):
    with pytest.raises(ConfigurationError, match="metis|split"):
        make_split(small_graph, spec, 0)
