"""GAP (gap-inf, gap-edp, gap-ndp): sensitivities measured empirically, accountants against
independent computations, calibration, inference paths and save/load round trips."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_undirected

import defenses  # noqa: F401  (registers the defenses)
from defenses.gap import (
    EDGE_SENSITIVITY,
    GAPModel,
    bound_out_degree,
    graph_key,
    private_multi_hop_aggregation,
    row_normalize,
    sum_aggregate,
)
from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger
from dpaudit.errors import ConfigurationError, DPAuditError, ModelFormatError, PrivacyParameterError
from dpaudit.model import load
from dpaudit.registry import get_defense
from dpaudit.splits import make_split

SPLIT = "random:0.5,0.25,0.25"


@pytest.fixture(scope="module")
def split(small_graph):
    return make_split(small_graph, SPLIT, 0)


@pytest.fixture(scope="module")
def fitted(small_graph, split):
    """One model per variant (small: few epochs), shared by the tests below."""
    models = {
        "gap-inf": get_defense("gap-inf")(seed=0, encoder_epochs=30, epochs=30).fit(small_graph, split),
        "gap-edp": get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=30, epochs=30).fit(small_graph, split),
        "gap-ndp": get_defense("gap-ndp")(epsilon=8.0, seed=0, max_degree=5, batch_size=64).fit(small_graph, split),
    }
    return models


def _hub_graph(num_nodes: int = 60, hub_degree: int = 40, extra_edges: int = 120, seed: int = 0):
    """An undirected random graph with one hub (node 0) adjacent to ``hub_degree`` nodes."""
    g = torch.Generator().manual_seed(seed)
    hub = torch.stack([torch.zeros(hub_degree, dtype=torch.long), torch.arange(1, hub_degree + 1)])
    rand = torch.randint(1, num_nodes, (2, extra_edges), generator=g)
    rand = rand[:, rand[0] != rand[1]]
    return to_undirected(torch.cat([hub, rand], dim=1), num_nodes=num_nodes)


def _remove_node(edge_index: torch.Tensor, node: int) -> torch.Tensor:
    keep = (edge_index[0] != node) & (edge_index[1] != node)
    return edge_index[:, keep]


# --------------------------------------------------------------------------- sensitivities


def test_edge_sensitivity_empirical(small_graph):
    """Lemma 1: removing one directed entry of A moves A^T X (row-normalised X) by exactly 1 in
    Frobenius norm; removing one undirected edge moves it by √2 = the Δ we account for."""
    data = small_graph.data
    x = row_normalize(torch.randn(data.num_nodes, 8, generator=torch.Generator().manual_seed(0)))
    base = sum_aggregate(x, data.edge_index, data.num_nodes)
    src, dst = data.edge_index
    directed, undirected = [], []
    for e in torch.randperm(src.numel(), generator=torch.Generator().manual_seed(1))[:60].tolist():
        u, v = int(src[e]), int(dst[e])
        one_way = data.edge_index[:, torch.arange(src.numel()) != e]
        both_ways = data.edge_index[:, ~(((src == u) & (dst == v)) | ((src == v) & (dst == u)))]
        directed.append(float(torch.linalg.norm(base - sum_aggregate(x, one_way, data.num_nodes))))
        undirected.append(float(torch.linalg.norm(base - sum_aggregate(x, both_ways, data.num_nodes))))
    assert max(directed) <= 1.0 + 1e-5 and min(directed) >= 1.0 - 1e-5
    assert max(undirected) <= EDGE_SENSITIVITY + 1e-5
    assert min(undirected) >= EDGE_SENSITIVITY - 1e-5  # the paper's Δ = 1 would be too small


def test_node_sensitivity_empirical_under_degree_bound():
    """Lemmas 2–3: after bounding out-degrees to D, removing a node changes the other nodes'
    aggregated rows by ≤ √D in Frobenius norm; without the bound a hub exceeds √D."""
    num_nodes, max_degree = 60, 6
    edge_index = _hub_graph(num_nodes)
    x = row_normalize(torch.randn(num_nodes, 8, generator=torch.Generator().manual_seed(0)))
    bounded = bound_out_degree(edge_index, num_nodes, max_degree, torch.Generator().manual_seed(3))
    out_degree = torch.bincount(bounded[0], minlength=num_nodes)
    assert int(out_degree.max()) <= max_degree
    assert bounded.size(1) < edge_index.size(1)
    changes = []
    for q in range(num_nodes):
        others = torch.arange(num_nodes) != q
        full = sum_aggregate(x, bounded, num_nodes)[others]
        removed = sum_aggregate(x, _remove_node(bounded, q), num_nodes)[others]
        change = float(torch.linalg.norm(full - removed))
        # Each affected row moves by the unit vector x_q: the change is √(out-degree of q).
        assert change == pytest.approx(math.sqrt(int(out_degree[q])), abs=1e-4)
        changes.append(change)
    assert max(changes) <= math.sqrt(max_degree) + 1e-5
    assert max(changes) == pytest.approx(math.sqrt(max_degree), abs=1e-4)  # the hub hits the bound
    # Without the degree bound the hub's removal exceeds √D: the bound is what the proof needs.
    others = torch.arange(num_nodes) != 0
    unbounded_change = torch.linalg.norm(
        sum_aggregate(x, edge_index, num_nodes)[others]
        - sum_aggregate(x, _remove_node(edge_index, 0), num_nodes)[others]
    )
    assert float(unbounded_change) > math.sqrt(max_degree) + 1


def test_bound_out_degree_keeps_low_degree_nodes_and_is_random():
    edge_index = _hub_graph(60)
    a = bound_out_degree(edge_index, 60, 6, torch.Generator().manual_seed(0))
    b = bound_out_degree(edge_index, 60, 6, torch.Generator().manual_seed(1))
    degree = torch.bincount(edge_index[0], minlength=60)
    kept = torch.bincount(a[0], minlength=60)
    assert torch.equal(kept, degree.clamp(max=6))
    assert not torch.equal(a, b)  # a random sample, not a deterministic truncation
    original = set(map(tuple, edge_index.t().tolist()))
    assert set(map(tuple, a.t().tolist())) <= original
    with pytest.raises(ConfigurationError):
        bound_out_degree(edge_index, 60, 0)


def test_pma_rows_are_unit_norm_and_noise_free_pma_matches_dense(small_graph):
    data = small_graph.data
    x0 = row_normalize(torch.randn(data.num_nodes, 4, generator=torch.Generator().manual_seed(0)))
    dense_adj = torch.zeros(data.num_nodes, data.num_nodes)
    dense_adj[data.edge_index[0], data.edge_index[1]] = 1.0
    hops = private_multi_hop_aggregation(x0, data.edge_index, 3, 0.0)
    expected = x0
    for hop in hops:
        expected = row_normalize(dense_adj.t() @ expected)
        assert torch.allclose(hop, expected, atol=1e-5)
    noisy = private_multi_hop_aggregation(x0, data.edge_index, 3, 2.0, torch.Generator().manual_seed(0))
    norms = torch.stack([h.norm(dim=1) for h in noisy])
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    assert not torch.allclose(noisy[0], hops[0], atol=1e-2)
    with pytest.raises(DPAuditError):
        private_multi_hop_aggregation(x0, data.edge_index, 1, -1.0)


# --------------------------------------------------------------------------- accountants


@pytest.mark.parametrize("hops,z,delta", [(1, 1.0, 1e-5), (2, 3.0, 1e-4), (5, 10.0, 1e-6)])
def test_pma_accounting_matches_proposition_2(hops, z, delta):
    """Theorem 1 curve + the classic conversion reproduces Prop. 2's closed form; the improved
    conversion we report is never larger; dp_accounting agrees independently."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    closed_form = hops / (2 * z**2) + math.sqrt(2 * hops * math.log(1 / delta)) / z
    mech = GaussianMechanism(z * EDGE_SENSITIVITY, EDGE_SENSITIVITY, hops)
    alpha_star = 1 + z * math.sqrt(2 * math.log(1 / delta) / hops)
    orders = np.linspace(1.001, 2 * alpha_star + 2, 200_001)
    classic = float(np.min(mech.rdp(orders) + math.log(1 / delta) / (orders - 1)))
    assert classic == pytest.approx(closed_form, rel=1e-6)
    ours = PrivacyLedger().step(mech).get_epsilon(delta)
    assert ours <= closed_form + 1e-9
    accountant = RdpAccountant()
    accountant.compose(dp_event.GaussianDpEvent(z), hops)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=0.02)


def test_node_level_composition_matches_dp_accounting():
    """Proposition 3's composition (DP-SGD + PMA + DP-SGD, one noise multiplier) against
    dp_accounting's RDP accountant built from the same events."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    sigma, q, steps, hops, max_degree, delta = 2.0, 0.1, 100, 2, 100, 1e-4
    ours = (
        PrivacyLedger()
        .step(PoissonSubsampledGaussian(sigma, q, steps))
        .step(GaussianMechanism(sigma * math.sqrt(max_degree), math.sqrt(max_degree), hops))
        .step(PoissonSubsampledGaussian(sigma, q, steps))
        .get_epsilon(delta)
    )
    accountant = RdpAccountant()
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), 2 * steps)
    accountant.compose(dp_event.GaussianDpEvent(sigma), hops)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=0.02)


@pytest.mark.parametrize("name,target", [("gap-edp", 1.0), ("gap-ndp", 4.0)])
def test_calibrated_spent_epsilon_within_target(small_graph, split, name, target):
    defense = get_defense(name)(
        epsilon=target,
        seed=0,
        encoder_epochs=3,
        epochs=3,
        **({"batch_size": 64, "max_degree": 5} if name == "gap-ndp" else {}),
    )
    model = defense.fit(small_graph, split)
    spent = model.privacy.epsilon
    assert spent <= target and spent > 0.98 * target  # calibrated, not merely bounded
    # Re-account from the recorded mechanisms, independently of the training code path.
    delta = model.privacy.delta
    assert delta == pytest.approx(1e-3 if name == "gap-edp" else 1e-3)
    pma = [m for m in model.privacy.mechanisms if m["name"].startswith("pma")]
    assert len(pma) == 1 and pma[0]["count"] == defense.hp.hops
    assert pma[0]["sigma"] == pytest.approx(model.config()["noise_std"])
    if name == "gap-edp":
        z = pma[0]["sigma"] / pma[0]["sensitivity"]
        closed = defense.hp.hops / (2 * z**2) + math.sqrt(2 * defense.hp.hops * math.log(1 / delta)) / z
        assert spent <= closed
        assert pma[0]["sensitivity"] == pytest.approx(math.sqrt(2))
    else:
        dpsgd = [m for m in model.privacy.mechanisms if m["mechanism"] == "PoissonSubsampledGaussian"]
        assert len(dpsgd) == 2  # encoder and classifier
        assert pma[0]["sensitivity"] == pytest.approx(math.sqrt(5))
        sigma = dpsgd[0]["sigma"]
        assert dpsgd[1]["sigma"] == sigma and pma[0]["sigma"] == pytest.approx(sigma * math.sqrt(5))
        ledger = PrivacyLedger().extend(
            [
                PoissonSubsampledGaussian(sigma, dpsgd[0]["sample_rate"], dpsgd[0]["steps"]),
                GaussianMechanism(pma[0]["sigma"], pma[0]["sensitivity"], pma[0]["count"]),
                PoissonSubsampledGaussian(sigma, dpsgd[1]["sample_rate"], dpsgd[1]["steps"]),
            ]
        )
        assert ledger.get_epsilon(delta) == pytest.approx(spent, rel=1e-9)


def test_more_epsilon_means_less_noise(small_graph, split):
    stds = [
        get_defense("gap-edp")(epsilon=e, seed=0, encoder_epochs=2, epochs=2)
        .fit(small_graph, split)
        .config()["noise_std"]
        for e in (1.0, 4.0)
    ]
    assert stds[0] > stds[1] > 0


# --------------------------------------------------------------------------- models and inference


def test_variants_train_and_report_levels(fitted, small_graph, split):
    assert fitted["gap-inf"].privacy.epsilon == math.inf and fitted["gap-inf"].config()["noise_std"] == 0.0
    assert fitted["gap-edp"].privacy.unit == "edge" and fitted["gap-ndp"].privacy.unit == "node"
    assert fitted["gap-inf"].inference_private is False and fitted["gap-edp"].inference_private
    assert fitted["gap-ndp"].config()["batch_norm"] is False  # never under node-level DP-SGD
    assert fitted["gap-edp"].config()["batch_norm"] is True
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in fitted["gap-ndp"].classifier.modules())
    # Non-private GAP learns the (easy, homophilous) CSBM task.
    assert fitted["gap-inf"].accuracy(small_graph.data, split.test) > 0.8
    for model in fitted.values():
        proba = model.predict_proba(small_graph.data, split.test)
        assert proba.shape == (len(split.test), 3)
        assert torch.allclose(proba.sum(1), torch.ones(len(split.test)), atol=1e-5)
        assert model.embed(small_graph.data, split.test).shape == (len(split.test), 3 * 16)


def test_transductive_queries_use_the_cache(fitted, small_graph):
    model = fitted["gap-edp"]
    assert model.cached_aggregations.shape == (small_graph.num_nodes, 2 * 16)
    first = model.predict_proba(small_graph.data)
    again = model.predict_proba(small_graph.data.clone())
    assert torch.equal(first, again)  # no fresh noise on the training graph
    assert model._other_graphs == {}
    # The cache is noisy: it differs from the noise-free aggregation of the same encoder output.
    x0 = row_normalize(model.encoder.encode(small_graph.data.x))
    clean = private_multi_hop_aggregation(x0, small_graph.data.edge_index, 2, 0.0)
    assert not torch.allclose(model.cached_aggregations[:, :16], clean[0], atol=1e-2)
    # gap-inf's cache is exactly the noise-free PMA.
    inf = fitted["gap-inf"]
    x0 = row_normalize(inf.encoder.encode(small_graph.data.x))
    clean = torch.cat(private_multi_hop_aggregation(x0, small_graph.data.edge_index, 2, 0.0), dim=1)
    assert torch.allclose(inf.cached_aggregations, clean, atol=1e-5)


def test_inductive_query_reruns_pma_on_the_new_graph(fitted, small_graph):
    model = fitted["gap-edp"]
    other = small_graph.data.clone()
    other.edge_index = small_graph.data.edge_index[:, : small_graph.data.edge_index.size(1) // 2]
    assert graph_key(other.num_nodes, other.edge_index) != model.config()["graph"]["key"]
    a = model.predict_proba(other)
    assert len(model._other_graphs) == 1
    assert torch.equal(a, model.predict_proba(other))  # memoised: no averaging of fresh noise
    assert not torch.equal(a, model.predict_proba(small_graph.data))
    # gap-inf on a new graph equals the noise-free pipeline run on that graph.
    inf = fitted["gap-inf"]
    x0 = row_normalize(inf.encoder.encode(other.x))
    z = torch.cat([x0, *private_multi_hop_aggregation(x0, other.edge_index, 2, 0.0)], dim=1)
    assert torch.allclose(inf.predict_proba(other), torch.softmax(inf.classifier(z), 1), atol=1e-5)


@pytest.mark.parametrize("name", ["gap-inf", "gap-edp", "gap-ndp"])
def test_save_load_round_trip(fitted, small_graph, tmp_path, name):
    model = fitted[name]
    model.save(tmp_path / name)
    loaded = load(tmp_path / name)
    assert isinstance(loaded, GAPModel)
    assert torch.equal(loaded.predict_proba(small_graph.data), model.predict_proba(small_graph.data))
    assert torch.equal(loaded.embed(small_graph.data), model.embed(small_graph.data))
    assert torch.equal(loaded.cached_aggregations, model.cached_aggregations)
    assert loaded.privacy.epsilon == model.privacy.epsilon and loaded.privacy.unit == model.privacy.unit
    assert loaded.config() == model.config()


def test_tampered_config_is_refused(fitted, tmp_path):
    path = fitted["gap-edp"].save(tmp_path / "m")
    meta = json.loads((path / "model.json").read_text())
    meta["config"]["hops"] = 3
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError):
        load(path)
    meta["config"]["hops"] = 9
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError):
        load(path)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "name,kwargs,error",
    [
        ("gap-edp", {"hops": 0}, ConfigurationError),
        ("gap-edp", {"hops": 6}, ConfigurationError),
        ("gap-ndp", {"max_degree": 0}, ConfigurationError),
        ("gap-ndp", {"batch_size": 0}, ConfigurationError),
        ("gap-ndp", {"batch_norm": True}, ConfigurationError),  # not a node-level option
        ("gap-edp", {"lr": -1.0}, ConfigurationError),
        ("gap-edp", {"epochs": 0}, ConfigurationError),
        ("gap-edp", {"epsilon": -1.0}, PrivacyParameterError),
        ("gap-inf", {"epsilon": 4.0}, PrivacyParameterError),
    ],
)
def test_bad_configuration(name, kwargs, error):
    with pytest.raises(error):
        get_defense(name)(**kwargs)


def test_bad_queries(fitted, small_graph):
    model = fitted["gap-edp"]
    wrong = small_graph.data.clone()
    wrong.x = wrong.x[:, :5]
    with pytest.raises(DPAuditError):
        model.predict_proba(wrong)
    with pytest.raises(DPAuditError):
        model.predict_proba(small_graph.data, [small_graph.num_nodes])
    with pytest.raises(DPAuditError):
        model.embed("not a graph")
