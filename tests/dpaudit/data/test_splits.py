"""Splits: deterministic, disjoint, labeled-only; inductive edge removal; membership partitions."""

from __future__ import annotations

import pytest
import torch

from dpaudit.data.splits import audit_game, make_split, membership_partition, split_is_random
from dpaudit.errors import ConfigurationError


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
    assert not torch.isin(t.non_members, split.val).any()  # validation nodes are read by selection (paper)
    assert len(s.members) == len(s.non_members) > 0
    assert _disjoint(t.members, t.non_members, s.members, s.non_members)
    y = small_graph.data.y
    assert torch.equal(torch.bincount(y[s.members], minlength=3), torch.bincount(y[s.non_members], minlength=3))
    # shadow data disjoint from the target's training set (the default where the graph allows)
    assert part.info["shadow_pool"] == "disjoint" and part.info["shadow_nodes_in_target_training_set"] == 0
    assert not torch.isin(torch.cat([s.members, s.non_members]), split.train).any()
    again = membership_partition(small_graph, split, seed=0, shadow_per_class=20)
    assert torch.equal(again.shadow.members, s.members) and torch.equal(again.target.members, t.members)
    # the attacker's pool may be widened explicitly; a tiny pool falls back and says so
    wide = membership_partition(small_graph, split, seed=0, shadow_per_class=20, shadow_pool="any")
    assert wide.info["shadow_pool"] == "any"
    crowded = make_split(small_graph, "random:0.97,0.0,0.03", seed=0)  # 9 labeled non-members in all
    fallback = membership_partition(small_graph, crowded, seed=0, shadow_per_class=20)
    assert fallback.info["shadow_pool"] == "any" and "shadow_pool_note" in fallback.info
    with pytest.raises(ConfigurationError, match="shadow_pool"):
        membership_partition(small_graph, split, shadow_pool="bogus")


@pytest.mark.parametrize("spec", ["random:0.5,0.1,0.4", "per-class:20,30,100", "inductive:0.5,0.4"])
def test_audit_game_pairs_members_and_non_members_of_one_class(small_graph, spec):
    split = make_split(small_graph, spec, seed=1)
    game = audit_game(small_graph, split, seed=3)
    y = small_graph.data.y
    pairs = game.pairs
    assert pairs.shape == (len(game.members), 2) and len(game.members) == len(game.non_members) > 0
    assert torch.equal(y[pairs[:, 0]], y[pairs[:, 1]])  # same class: the class prior carries no signal
    assert torch.isin(pairs[:, 0], split.train).all() and not torch.isin(pairs[:, 1], split.train).any()
    assert _disjoint(pairs[:, 0], pairs[:, 1])
    nodes, labels = game.nodes_and_labels()
    assert torch.equal(nodes[labels == 1], pairs[:, 0]) and torch.equal(nodes[labels == 0], pairs[:, 1])
    capped = audit_game(small_graph, split, seed=3, max_members=10)
    assert 0 < len(capped.members) <= 10
    assert len(audit_game(small_graph, split, seed=3, max_members=1).members) == 1  # below the number of classes
    reserved = audit_game(small_graph, split, seed=3, reserve_for_shadows=True)
    assert len(reserved.members) <= len(game.members)


def test_split_is_random_only_for_dpaudit_draws():
    for spec in ("random:0.5,0.2,0.3", "per-class:20,500,1000", "inductive:0.8,0.2"):
        assert split_is_random(spec)[0]
    for spec in ("public", "metis:9", "explicit", None):
        assert not split_is_random(spec)[0]
    assert "0-139" in split_is_random("public")[1]
    assert not split_is_random("random:0.5,0.2,0.3", {"nodes": {"train": [1]}})[0]
    assert split_is_random("explicit", {"nodes": {"train": [1]}, "drawn_at_random": True})[0]


def _index_score_auc(game) -> float:
    from dpaudit.auditing.statistics import auc

    nodes, labels = game.nodes_and_labels()
    return auc(-nodes.double().numpy(), labels.numpy())  # model-free: minus the node index


def test_model_free_index_score_is_chance_on_a_random_split_only(load_real):
    """Issue 15 acceptance: on Cora's public split −(node index) separates members perfectly (the
    bound would be meaningless); on a random split with the default audit game it is at chance."""
    cora = load_real("cora")
    public = audit_game(cora, make_split(cora, "public"), seed=0)
    assert _index_score_auc(public) > 0.95 and not split_is_random("public")[0]
    aucs = []
    for seed in range(3):
        game = audit_game(cora, make_split(cora, "random:0.5,0.1,0.4", seed=seed), seed=seed)
        assert len(game.members) > 400
        aucs.append(_index_score_auc(game))
    assert all(abs(a - 0.5) < 0.05 for a in aucs), aucs


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


def test_metis_partition_is_the_one_metis_gives_on_the_adjacency_lists(small_graph):
    """The int32 arrays handed to METIS describe the graph's adjacency exactly: the partition
    equals METIS's on plain per-node neighbour lists (same seed), so splits made before keep
    their nodes."""
    import pymetis

    n = small_graph.num_nodes
    neighbours = [[] for _ in range(n)]
    for u, v in small_graph.data.edge_index.t().tolist():
        neighbours[u].append(v)
    _, expected = pymetis.part_graph(9, adjacency=neighbours, options=pymetis.Options(seed=0))
    split = make_split(small_graph, "metis:9", seed=0)
    assert split.node_part.tolist() == list(expected)


@pytest.mark.parametrize("spec", ["metis:3", "metis:0", "metis:x", "metis:9.5", "metis:301"])
def test_bad_metis_specs(small_graph, spec):
    with pytest.raises(ConfigurationError, match="metis|split"):
        make_split(small_graph, spec, 0)
