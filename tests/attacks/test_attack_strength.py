"""Attack strength (issue 15, item 4): RMIA, online LiRA, LinkTeller at the true density and
against 2-hop non-edges, and the shadow-trained embedding probe — on tiny CSBM graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attacks
import attacks._common as common
from attacks.embedding import embedding_probe
from attacks.linkteller import FeatureProbe, density_protocol, precision_recall_at_k, two_hop_non_edges
from attacks.lira import lira_offline_scores, lira_online_scores, reference_sets
from attacks.rmia import fit_a_from_pairs, offline_marginal, pairwise_score, rmia_scores
from dpaudit.app.pipeline import train
from dpaudit.auditing.statistics import auc
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import MembershipSet, make_split
from dpaudit.errors import ConfigurationError
from dpaudit.training.adapters import adapt

FAST = {"n_boot": 50}
SPLIT = "random:0.3,0.1,0.3"  # leaves labeled nodes outside the split for references


@pytest.fixture(scope="module")
def graph():
    return csbm(num_nodes=400, num_classes=4, num_features=32, avg_degree=6, homophily=0.6, feature_signal=0.3, seed=3)


@pytest.fixture(scope="module")
def overfit(graph):
    hp = {"epochs": 60, "hidden": 64, "dropout": 0.0, "row_normalize": False}
    return train("gcn", graph, seed=0, split=SPLIT, overrides=hp).model


@pytest.fixture(scope="module")
def private(graph):
    return train("mlp-dp", graph, epsilon=0.5, seed=0, split=SPLIT, overrides={"epochs": 3}).model


class RandomScores(torch.nn.Module):
    """A model-free 'model': fixed random logits per node, unrelated to any training."""

    def __init__(self, num_nodes: int, num_classes: int):
        super().__init__()
        self.register_buffer("table", torch.randn(num_nodes, num_classes, generator=torch.Generator().manual_seed(7)))

    def forward(self, x, edge_index):
        return 3.0 * self.table[: x.shape[0]]


# --------------------------------------------------------------------------- score functions


def test_online_lira_scores_separate_in_from_out_and_ignore_sigma_scale():
    rng = np.random.default_rng(0)
    n, refs = 400, 8
    mu_out, gap = rng.normal(size=n), 1.5
    in_mask = np.zeros((refs, n), dtype=bool)
    in_mask[::2] = True
    ref_phi = mu_out + gap * in_mask + 0.5 * rng.normal(size=(refs, n))
    member = rng.random(n) < 0.5
    target = mu_out + gap * member + 0.5 * rng.normal(size=n)
    assert auc(lira_online_scores(target, ref_phi, in_mask), member.astype(int)) > 0.9
    # target outputs unrelated to membership: chance
    assert abs(auc(lira_online_scores(rng.normal(size=n), ref_phi, in_mask), member.astype(int)) - 0.5) < 0.08
    # two references (one IN, one OUT per node): a common σ whose value cannot change the ranking
    two = lira_online_scores(target, ref_phi[:2], in_mask[:2])
    mu_in, mu_out2 = ref_phi[0], ref_phi[1]
    linear = (mu_in - mu_out2) * (target - 0.5 * (mu_in + mu_out2))
    assert np.array_equal(np.argsort(two), np.argsort(linear))
    assert auc(two, member.astype(int)) > 0.75
    assert auc(lira_offline_scores(target, ref_phi[1::2]), member.astype(int)) > 0.75


def test_rmia_formulas():
    # offline Pr(x) = ((1 + a) Pr_OUT + 1 - a) / 2, and a is recovered from IN = a OUT + 1 - a
    assert offline_marginal(np.array([0.2]), 0.5)[0] == pytest.approx(0.5 * (1.5 * 0.2 + 0.5))
    p_out = np.linspace(0.1, 0.9, 50)
    assert fit_a_from_pairs(0.3 * p_out + 0.7, p_out) == pytest.approx(0.3)
    # the pairwise score is the fraction of z with LR(x)/LR(z) >= γ, ties broken below 1/|Z|
    rng = np.random.default_rng(1)
    lr_x, lr_z = rng.lognormal(size=30), rng.lognormal(size=20)
    lr_x[:5] = 1e6  # beats every z: ties at 1, broken by LR(x)
    lr_x[1] = 2e6
    gamma = 1.3
    score = pairwise_score(lr_x, lr_z, gamma)
    brute = np.array([np.mean(x / lr_z >= gamma) for x in lr_x])
    assert np.array_equal(np.floor(score * len(lr_z) + 1e-9) / len(lr_z), brute)
    assert score[1] == score[:5].max() and len(np.unique(score)) == len(score)


def test_rmia_scores_are_chance_for_a_membership_free_target():
    rng = np.random.default_rng(2)
    n, m, refs = 300, 200, 4
    in_mask = np.zeros((refs, n), dtype=bool)
    in_mask[::2] = True
    base = rng.uniform(0.2, 0.8, size=n)
    p_ref_x = np.clip(base + 0.2 * in_mask + 0.05 * rng.normal(size=(refs, n)), 0, 1)
    member = rng.random(n) < 0.5
    p_ref_z = np.clip(rng.uniform(0.2, 0.8, size=m) + 0.05 * rng.normal(size=(refs, m)), 0, 1)
    p_target_z = rng.uniform(0.2, 0.8, size=m)
    noise = rng.uniform(0.2, 1.0, size=n)
    chance = rmia_scores(noise, p_ref_x, p_target_z, p_ref_z, in_mask_x=in_mask)
    assert abs(auc(chance, member.astype(int)) - 0.5) < 0.08
    informed = np.clip(base + 0.2 * member + 0.05 * rng.normal(size=n), 0, 1)
    assert auc(rmia_scores(informed, p_ref_x, p_target_z, p_ref_z, in_mask_x=in_mask), member.astype(int)) > 0.85
    offline = rmia_scores(informed, p_ref_x[1::2], p_target_z, p_ref_z, offline=True, a=0.5)
    assert auc(offline, member.astype(int)) > 0.75


def test_online_reference_sets_are_balanced_and_sized_like_the_target():
    rng = np.random.default_rng(0)
    audit, pool = np.arange(100), np.arange(100, 400)
    sets = reference_sets(audit, pool, 80, 6, True, "match", rng)
    counts = np.zeros(400, dtype=int)
    for s in sets:
        assert len(s) == 80 and len(np.unique(s)) == 80
        counts[s] += 1
    assert (counts[audit] == 3).all()  # every audit node IN for exactly half of the references
    offline = reference_sets(audit, pool, 80, 3, False, "match", rng)
    assert all(len(s) == 80 and not np.isin(s, audit).any() for s in offline)
    with pytest.raises(ConfigurationError):
        reference_sets(audit, pool, 80, 3, True, "match", rng)


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize(
    "name,settings",
    [
        ("mia-rmia", {"num_references": 4}),
        ("mia-rmia", {"num_references": 3, "offline": True}),
        ("mia-lira", {"num_shadows": 4}),
    ],
)
def test_beats_chance_on_an_overfit_model(overfit, graph, name, settings):
    res = attacks.run(name, overfit, graph, seed=0, **settings, **FAST)
    assert res.auc > 0.6 and res.auc_ci[0] > 0.5
    assert res.epsilon_lower_bound is not None and res.epsilon_lower_bound >= 0
    if settings.get("offline"):
        assert res.runs[0]["a"] is not None and 0.0 <= res.runs[0]["a"] <= 1.0


@pytest.mark.parametrize("name,settings", [("mia-rmia", {"num_references": 2}), ("mia-lira", {"num_shadows": 2})])
def test_chance_on_a_strongly_private_model(private, graph, name, settings):
    res = attacks.run(name, private, graph, seed=0, **settings, **FAST)
    assert abs(res.auc - 0.5) < 0.1


@pytest.mark.parametrize("name,settings", [("mia-rmia", {"num_references": 2}), ("mia-lira", {"num_shadows": 2})])
def test_chance_on_a_model_free_random_score(graph, name, settings):
    fake = adapt(
        RandomScores(graph.num_nodes, graph.num_classes),
        graph,
        split=make_split(graph, SPLIT, 0),
        surrogate="gcn",
        surrogate_hyperparameters={"epochs": 30, "row_normalize": False},
    )
    res = attacks.run(name, fake, graph, seed=0, **settings, **FAST)
    assert abs(res.auc - 0.5) < 0.1


def test_lira_lives_in_its_own_module_and_checks_settings(overfit, graph):
    import attacks.membership as membership

    assert not hasattr(membership, "mia_lira") and attacks.get_attack("mia-lira").__module__ == "attacks.lira"
    assert "mia-rmia" in attacks.available_attacks()
    with pytest.raises(ConfigurationError):
        attacks.run("mia-lira", overfit, graph, num_shadows=3)
    with pytest.raises(ConfigurationError):
        attacks.run("mia-rmia", overfit, graph, num_references=3)
    with pytest.raises(ConfigurationError):
        attacks.run("mia-rmia", overfit, graph, gamma=0.0)


# --------------------------------------------------------------------------- LinkTeller


def test_precision_recall_at_k_hand_made():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    labels = np.array([1, 0, 1, 0, 0, 1])
    assert precision_recall_at_k(scores, labels, 3) == pytest.approx((2 / 3, 2 / 3))
    assert precision_recall_at_k(scores, labels, 1) == pytest.approx((1.0, 1 / 3))
    assert precision_recall_at_k(scores, labels, 6) == pytest.approx((0.5, 1.0))
    assert precision_recall_at_k(scores, labels, 0) == (0.0, 0.0)
    assert precision_recall_at_k(scores, np.zeros(6), 2) == (0.0, 0.0)


def test_two_hop_non_edges_hand_made():
    # path 0-1-2-3 plus the triangle 4-5-6: 2-hop non-edges are (0,2) and (1,3) only
    pairs = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (4, 6)]
    ei = torch.tensor(pairs + [(b, a) for a, b in pairs]).T
    u, w = two_hop_non_edges(ei, 7, 10, np.random.default_rng(0))
    assert sorted(zip(u.tolist(), w.tolist())) == [(0, 2), (1, 3)]


class OneHop(torch.nn.Module):
    """logits_u = x_u + Σ_{v ~ u} x_v: v influences u exactly when (u, v) is an edge."""

    def forward(self, x, edge_index):
        out = x.clone()
        out.index_add_(0, edge_index[1], x[edge_index[0]])
        return out


def test_density_protocol_is_exact_for_a_one_hop_model():
    g = csbm(num_nodes=60, num_classes=3, num_features=3, avg_degree=3, seed=4)
    model = adapt(OneHop(), g, train_nodes=torch.arange(30))
    probe = FeatureProbe(g.data, 1e-2, seed=0)
    info = density_protocol(model, probe, g.num_nodes, g.data.edge_index, 60, np.random.default_rng(0))
    # all nodes sampled: k = density × pairs = |E|, and exactly the edges have influence
    assert info["sampled_nodes"] == 60 and info["true_edges"] == info["predicted_edges"]
    assert info["precision_at_density"] == pytest.approx(1.0) and info["recall_at_density"] == pytest.approx(1.0)
    res = attacks.run("linkteller", model, g, num_pairs=20, pr_nodes=30, **FAST)
    assert res.extra["auc_hard_negatives"] == pytest.approx(1.0)
    assert 0.0 <= res.extra["precision_at_density"] <= 1.0 and 0.0 <= res.extra["recall_at_density"] <= 1.0
    assert res.epsilon_lower_bound is None  # edges vs non-edges: not neighbouring


def test_linkteller_reports_density_metrics_on_a_gcn(overfit, graph):
    res = attacks.run("linkteller", overfit, graph, num_pairs=40, pr_nodes=60, **FAST)
    for key in ("precision_at_density", "recall_at_density", "auc_hard_negatives", "auc_random_negatives"):
        assert 0.0 <= res.extra[key] <= 1.0
    assert res.extra["auc_random_negatives"] == pytest.approx(res.auc)
    assert res.extra["density_protocol"]["pairs"] == 60 * 59 // 2


# --------------------------------------------------------------------------- embedding probe


def test_embedding_probe_trains_on_shadows_only(overfit, graph, monkeypatch, request):
    captured = []
    make_result = common.make_result

    def capture(attack, model, runs, *args, **kwargs):
        captured.append([s.copy() for s, _ in runs])
        return make_result(attack, model, runs, *args, **kwargs)

    monkeypatch.setattr(common, "make_result", capture)
    # bit-for-bit comparison of two shadow trainings: one torch thread (with several, float
    # summation order differs by ~1e-7 and 60 epochs amplify it)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    clean = embedding_probe(overfit, graph, projections=[], runs=2, **FAST)
    # poison the target's membership labels: the scores must not move
    original = MembershipSet.nodes_and_labels

    def poisoned(self):
        nodes, labels = original(self)
        return nodes, 1.0 - labels

    monkeypatch.setattr(MembershipSet, "nodes_and_labels", poisoned)
    flipped = embedding_probe(overfit, graph, projections=[], runs=2, **FAST)
    for a, b in zip(captured[0], captured[1]):
        np.testing.assert_array_equal(a, b)
    assert flipped.auc == pytest.approx(1.0 - clean.auc, abs=1e-9)
    for res in (clean, flipped):
        assert res.bound_valid is False and "diagnostic" in res.bound_validity
        assert res.epsilon_lower_bound is None and res.ceiling_auc is None
        assert all(r.get("epsilon_lower_bound") is None for r in res.runs)
    # weak but above chance: the randomized game leaves ~160 disjoint shadow nodes on this graph (measured 0.53;
    # mia-threshold 0.59 on the same model)
    assert clean.auc > 0.5
