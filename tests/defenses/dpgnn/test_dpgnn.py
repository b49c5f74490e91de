"""DP-GNN (defenses/dpgnn/): occurrence bound, samplers, accountant, sensitivity, the public plan and its
re-derivation on load, release neutrality, persistence."""

from __future__ import annotations

import dataclasses
import json
import math

import mpmath
import numpy as np
import pytest
import torch
from editing import edited_copy

from defenses.dpgnn import DPGNN, DPGNNHyperparameters, protocols
from defenses.dpgnn.batches import flat_batch, pad_batch
from defenses.dpgnn.mechanism import (
    build_subgraphs,
    dpgnn_mechanism,
    hypergeometric_law,
    occurrence_bound,
    promised_edgelists,
    reference_schedule,
    sample_batch,
    sample_edgelists,
    sample_slots,
    training_readers,
)
from defenses.dpgnn.model import DPGCNNet, clip_groups
from defenses.dpgnn.protocols import UNDIRECTED_STEP
from defenses.dpgnn.training import clipped_gradient_sum, clipped_sum, per_subgraph_gradients
from dpaudit.accounting import GaussianMechanism, PrivacyLedger
from dpaudit.accounting.mechanisms import DEFAULT_ORDERS
from dpaudit.data.datasets import from_data
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError, IntegrityError, ModelFormatError, PrivacyParameterError
from dpaudit.release import declared_train_size
from dpaudit.release.model import compare_records, load
from dpaudit.testing.neighbours import train_and_compare, without_node
from dpaudit.training.registry import get_defense


def _train_mask(num_nodes: int, train: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[train] = True
    return mask


# ----------------------------------------------------------------------------- Lemma 1
@pytest.mark.parametrize("layers,k", [(1, 3), (2, 3), (2, 5)])
def test_occurrence_bound_holds_on_cora_after_sampling(load_real, layers, k):
    ds = load_real("cora")
    split = make_split(ds, "random:0.75,0.1,0.15", 0)
    n = ds.num_nodes
    mask = _train_mask(n, split.train)
    bound = occurrence_bound(k, layers)
    assert bound == sum(k**i for i in range(layers + 1))
    for seed in range(3):
        sampled = sample_edgelists(ds.data.edge_index, n, mask, k, torch.Generator().manual_seed(seed))
        # Every node is read by at most K training nodes; only training nodes read.
        assert int(torch.bincount(sampled[0], minlength=n).max()) <= k
        assert bool(mask[sampled[1]].all())
        index = build_subgraphs(sampled, split.train, n, layers, k)
        # Independent recount: distinct roots whose r-hop (message) ball contains each node.
        adjacency = torch.zeros(n, n)
        adjacency[sampled[1], sampled[0]] = 1.0  # row = reader, column = read node
        reach = torch.eye(n)[split.train]
        ball = reach.clone()
        for _ in range(layers):
            reach = (reach @ adjacency).clamp(max=1.0)
            ball = (ball + reach).clamp(max=1.0)
        counts = ball.sum(0).long()
        assert torch.equal(counts, index.occurrences)
        assert int(counts.max()) <= bound
        assert int(counts.max()) > k  # the bound is exercised, not vacuous
        for i in (0, 7, len(split.train) - 1):
            expected = set(ball[i].nonzero().view(-1).tolist())
            assert set(index.nodes_of(i).tolist()) == expected
            assert int(index.nodes_of(i)[0]) == int(split.train[i])  # root first
    # Without Algorithm 1 the raw graph violates the bound, and construction refuses it.
    raw = ds.data.edge_index[:, mask[ds.data.edge_index[1]]]
    with pytest.raises(RuntimeError, match="Lemma 1"):
        build_subgraphs(raw, split.train, n, layers, k)


def test_dense_subgraph_forward_matches_full_graph(small_graph):
    n = small_graph.num_nodes
    train = torch.arange(0, n, 2)
    sampled = sample_edgelists(
        small_graph.data.edge_index, n, _train_mask(n, train), 4, torch.Generator().manual_seed(0)
    )
    for layers in (1, 2):
        index = build_subgraphs(sampled, train, n, layers, 4)
        net = DPGCNNet(small_graph.num_features, 8, 3, layers=layers, encoder_layers=2, decoder_layers=2)
        feats, adj, roots = pad_batch(index, torch.arange(index.num_subgraphs), small_graph.data.x)
        dense = torch.stack([net(feats[i], adj[i], dense=True) for i in range(len(roots))])
        full = net(small_graph.data.x, sampled)[roots]
        assert torch.allclose(dense, full, atol=1e-5)


# ----------------------------------------------------------------------------- batch sampler
def test_batch_sampler_without_replacement_and_uniform():
    g = torch.Generator().manual_seed(0)
    n, m, draws = 50, 20, 3000
    hits = torch.zeros(n)
    for _ in range(draws):
        batch = sample_batch(n, m, g)
        assert batch.numel() == m
        assert batch.unique().numel() == m  # never repeats within a step
        assert int(batch.min()) >= 0 and int(batch.max()) < n
        hits[batch] += 1
    # Each subgraph is included with probability m/n; 5-sigma binomial band.
    p = m / n
    sd = math.sqrt(draws * p * (1 - p))
    assert float((hits - draws * p).abs().max()) < 5 * sd
    with pytest.raises(ValueError):
        sample_batch(n, n + 1, g)


# ----------------------------------------------------------------------------- accountant
def _independent_rdp(alpha: float, sigma: float, clip: float, population: int, occ: int, m: int, steps: int) -> float:
    """Theorem 1 evaluated with exact binomial coefficients and mpmath (no scipy, no logsumexp)."""
    mpmath.mp.dps = 60
    a = mpmath.mpf(alpha)
    total = mpmath.mpf(0)
    denom = math.comb(population, m)
    for i in range(0, min(occ, m) + 1):
        p = mpmath.mpf(math.comb(occ, i) * math.comb(population - occ, m - i)) / mpmath.mpf(denom)
        total += p * mpmath.e ** (a * (a - 1) * 2 * i**2 * mpmath.mpf(clip) ** 2 / mpmath.mpf(sigma) ** 2)
    return float(steps * mpmath.log(total) / (a - 1))


@pytest.mark.parametrize(
    "sigma,clip,population,k,layers,m,steps",
    [(8.0, 1.0, 400, 3, 1, 100, 50), (30.0, 0.5, 1000, 3, 2, 250, 20), (4.0, 2.0, 200, 5, 1, 200, 3)],
)
def test_accountant_matches_independent_evaluation(sigma, clip, population, k, layers, m, steps):
    mech = dpgnn_mechanism(sigma, clip, population, m, k, layers, steps)
    occ = occurrence_bound(k, layers)
    orders = [1.5, 2.0, 3.0, 8.0, 32.0]
    ours = mech.rdp(orders)
    theirs = [_independent_rdp(a, sigma, clip, population, occ, m, steps) for a in orders]
    np.testing.assert_allclose(ours, theirs, rtol=1e-8)
    # Independent (ε, δ): Mironov's conversion is looser than the Balle et al. one we use.
    delta = 1e-5
    ours_eps = PrivacyLedger().step(mech).get_epsilon(delta)
    grid = list(DEFAULT_ORDERS)
    mironov = min(steps_rdp + math.log(1 / delta) / (a - 1) for a, steps_rdp in zip(grid, mech.rdp(grid)))
    assert 0 < ours_eps <= mironov
    assert ours_eps >= 0.8 * mironov - 1.0


def test_accountant_full_batch_is_the_plain_gaussian():
    # m = N: every affected subgraph is in every batch, ρ = N(K, r) deterministically, so
    # Theorem 1 reduces to Lemma 3's Gaussian with sensitivity 2C·N(K, r).
    occ = occurrence_bound(4, 2)
    mech = dpgnn_mechanism(50.0, 1.5, 300, 300, 4, 2, 10)
    gauss = GaussianMechanism(sigma=50.0, sensitivity=2 * 1.5 * occ, count=10)
    np.testing.assert_allclose(mech.rdp(), gauss.rdp(), rtol=1e-10)
    # Subsampling strictly helps.
    sub = dpgnn_mechanism(50.0, 1.5, 300, 60, 4, 2, 10)
    assert np.all(sub.rdp() < mech.rdp())


def test_calibrated_model_spends_at_most_target(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("dpgnn")(epsilon=4.0, seed=0, steps=5, batch_size=64, latent=16).fit(small_graph, split)
    spec = model.privacy
    # protocol=sound: every step is accounted for the directed relation of Remark 2, but the spec
    # says node-level, which dpaudit reads as undirected node removal: recorded as not covered.
    assert spec.unit == "node" and spec.protocol == "sound" and not spec.sound
    assert len(spec.unaccounted) == 1 and spec.unaccounted[0].startswith("undirected node removal is not covered")
    assert 0.9 * 4.0 < spec.epsilon <= 4.0
    plan, measured = model.card["dpgnn"], model.record["dpgnn"]
    # Recompute from the public plan alone: noise multiplier (C = 1), declared population, batch, steps.
    assert plan["declared_train_size"] == len(split.train) == measured["num_subgraphs"]
    mech = dpgnn_mechanism(plan["noise_multiplier"], 1.0, plan["declared_train_size"], plan["batch_size"], 5, 1, 5)
    assert abs(PrivacyLedger().step(mech).get_epsilon(spec.delta) - spec.epsilon) < 1e-9
    assert spec.mechanisms[0]["sensitivity_per_term"] == 2.0
    assert spec.mechanisms[0]["sigma"] == pytest.approx(measured["noise_std"]) == plan["noise_multiplier"]
    assert model.card["inference"]["private"] is False
    assert measured["max_occurrences"] <= plan["occurrence_bound"] == 6


# ----------------------------------------------------------------------------- sensitivity
@pytest.mark.parametrize("layers", [1, 2])
def test_removing_a_node_changes_at_most_bound_gradient_terms(small_graph, layers):
    k = 3
    data = small_graph.data
    n = small_graph.num_nodes
    train = torch.arange(0, n, 3)
    mask = _train_mask(n, train)
    edge_index = data.edge_index
    coins = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(1))
    sampled = sample_edgelists(edge_index, n, mask, k, uniforms=coins)
    index = build_subgraphs(sampled, train, n, layers, k)
    bound = occurrence_bound(k, layers)
    torch.manual_seed(0)
    net = DPGCNNet(small_graph.num_features, 8, 3, layers=layers)
    params = {name: p.detach() for name, p in net.named_parameters()}

    def gradients(idx, x):
        feats, adj, roots = pad_batch(idx, torch.arange(idx.num_subgraphs), x)
        grads = per_subgraph_gradients(net, params, feats, adj, data.y[roots])
        return torch.cat([g.flatten(1) for g in grads.values()], 1)

    before = gradients(index, data.x)
    # The most frequent training node: its removal hurts the most subgraphs.
    occ = index.occurrences.clone()
    occ[~mask] = -1
    victim = int(occ.argmax())
    # Remove the victim's data (Remark 2): features, label and incoming edgelist (its messages),
    # with the same coins for every other edge.
    keep = edge_index[0] != victim
    sampled_after = sample_edgelists(edge_index[:, keep], n, mask, k, uniforms=coins[keep])
    index_after = build_subgraphs(sampled_after, train, n, layers, k)
    x_after = data.x.clone()
    x_after[victim] = 0.0
    after = gradients(index_after, x_after)
    victim_root = int((train == victim).nonzero())
    changed = ~torch.isclose(before, after, atol=1e-7, rtol=1e-5).all(1)
    changed[victim_root] = True  # its own term is removed (zero gradient) in the neighbour
    containing = torch.tensor([victim in set(index.nodes_of(i).tolist()) for i in range(index.num_subgraphs)])
    assert int(changed.sum()) <= bound
    assert bool((changed <= containing).all())  # only subgraphs the victim occurs in change
    assert int(changed.sum()) >= 2  # and the check is not vacuous
    # Every other node's edgelist is untouched by the coupled sampler.
    other = sampled[:, sampled[0] != victim]
    assert torch.equal(other, sampled_after)


def test_fast_clipped_sum_equals_materialised(small_graph):
    n = small_graph.num_nodes
    train = torch.arange(n // 2)
    sampled = sample_edgelists(
        small_graph.data.edge_index, n, _train_mask(n, train), 3, torch.Generator().manual_seed(2)
    )
    for layers, clipping in [(1, "flat"), (2, "layerwise")]:
        index = build_subgraphs(sampled, train, n, layers, 3)
        net = DPGCNNet(small_graph.num_features, 8, 3, layers=layers, encoder_layers=2, decoder_layers=2)
        params = {k: v.detach() for k, v in net.named_parameters()}
        batch = torch.randperm(index.num_subgraphs, generator=torch.Generator().manual_seed(layers))[:40]
        feats, adj, roots = pad_batch(index, batch, small_graph.data.x)
        groups = clip_groups(net, clipping)
        y = small_graph.data.y[roots]
        ref = clipped_sum(per_subgraph_gradients(net, params, feats, adj, y), groups, 0.05)
        flat = flat_batch(index, batch)
        assert torch.equal(flat.node_ids[flat.roots], roots)
        assert len(flat.blocks) > 1  # several size classes: Gram and materialised norms both run
        with_grams = flat_batch(index, batch, None, index.input_grams(small_graph.data.x))
        fast = clipped_gradient_sum(net, params, small_graph.data.x, flat, y, groups, 0.05)
        fast_grams = clipped_gradient_sum(net, params, small_graph.data.x, with_grams, y, groups, 0.05)
        for name in ref:
            assert torch.allclose(ref[name], fast[name], atol=1e-6), name
            assert torch.allclose(ref[name], fast_grams[name], atol=1e-6), name
        # Each clipped term has norm ≤ C per group, so the sum is ≤ B·C·sqrt(G).
        total = math.sqrt(sum(float(v.pow(2).sum()) for v in fast.values()))
        assert total <= 40 * 0.05 * math.sqrt(len(groups)) + 1e-6


def test_size_classes_and_input_grams(small_graph):
    n = small_graph.num_nodes
    train = torch.arange(n // 2)
    sampled = sample_edgelists(
        small_graph.data.edge_index, n, _train_mask(n, train), 3, torch.Generator().manual_seed(2)
    )
    index = build_subgraphs(sampled, train, n, 2, 3)
    caps, class_of, slot = index.size_classes()
    sizes = index.sizes()
    assert caps == sorted(caps) and caps[-1] == int(sizes.max())
    bounds = torch.tensor([0] + caps)
    assert bool(((bounds[class_of] < sizes) & (sizes <= bounds[class_of + 1])).all())  # the smallest cap that fits
    x = small_graph.data.x
    grams = index.input_grams(x)
    for c, gram in enumerate(grams):
        members = torch.nonzero(class_of == c).view(-1)
        assert sorted(slot[members].tolist()) == list(range(len(members))) == list(range(gram.size(0)))
    for s in range(index.num_subgraphs):
        rows = x[index.nodes_of(s)]
        gram = grams[int(class_of[s])][int(slot[s])]
        size = rows.size(0)
        torch.testing.assert_close(gram[:size, :size], rows @ rows.t())
        assert not gram[size:].any() and not gram[:, size:].any()


@pytest.mark.parametrize("share", [0.0, 2.0])
def test_sparse_first_layer_full_and_row_products_agree(monkeypatch, share):
    """The sparse first layer over all nodes (gathered) and over the batch rows' sub-matrix give
    the same clipped sums."""
    import defenses.dpgnn.training as dpgnn_training
    from dpaudit.nn import SparseFeatures

    x = (torch.rand(40, 30, generator=torch.Generator().manual_seed(0)) < 0.1).float()
    edge_index = torch.randint(0, 40, (2, 120), generator=torch.Generator().manual_seed(1))
    train = torch.arange(25)
    sampled = sample_edgelists(edge_index, 40, _train_mask(40, train), 3, torch.Generator().manual_seed(2))
    index = build_subgraphs(sampled, train, 40, 1, 3)
    torch.manual_seed(0)
    net = DPGCNNet(30, 6, 3, layers=1)
    params = {k: v.detach() for k, v in net.named_parameters()}
    batch = torch.arange(20)
    y = torch.randint(0, 3, (40,), generator=torch.Generator().manual_seed(3))
    groups = clip_groups(net, "flat")
    flat = flat_batch(index, batch)
    labels = y[flat.node_ids[flat.roots]]
    dense = clipped_gradient_sum(net, params, x, flat, labels, groups, 0.1)
    monkeypatch.setattr(dpgnn_training, "FULL_PRODUCT_SHARE", share)
    sparse = clipped_gradient_sum(net, params, SparseFeatures.from_tensor(x), flat, labels, groups, 0.1)
    for name in dense:
        torch.testing.assert_close(sparse[name], dense[name], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- persistence, errors
def test_save_load_round_trip(tmp_path, small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("dpgnn")(epsilon=8.0, seed=3, layers=2, steps=3, batch_size=50, latent=8).fit(
        small_graph, split
    )
    model.save(tmp_path / "m")
    loaded = load(tmp_path / "m")
    assert loaded.kind == "dpgnn"
    assert torch.allclose(loaded.predict_proba(small_graph.data), model.predict_proba(small_graph.data))
    assert torch.allclose(loaded.embed(small_graph.data, split.test), model.embed(small_graph.data, split.test))
    assert loaded.privacy.epsilon == model.privacy.epsilon and loaded.card["inference"]["private"] is False
    meta_path = tmp_path / "m" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["config"]["architecture"]["layers"] = 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError):
        load(tmp_path / "m")


def test_non_private_run_is_labelled(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("dpgnn")(seed=0, steps=30, batch_size=100, lr=0.02, latent=16).fit(small_graph, split)
    assert not model.privacy.is_private and model.privacy.unit is None
    assert model.accuracy(small_graph.data, split.test) > 0.8  # the pipeline learns


@pytest.mark.parametrize(
    "overrides",
    [
        {"layers": 0},
        {"max_in_degree": 0},
        {"optimizer": "rmsprop"},
        {"clipping": "bogus"},
        {"clip_percentile": 0.0},
        {"protocol": "loose"},
        {"clip_norm": -1.0},
        {"batch_size": 0},
        {"act": "sigmoid"},
    ],
)
def test_bad_hyperparameters_raise_configuration_error(small_graph, overrides):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    with pytest.raises(ConfigurationError):
        get_defense("dpgnn")(epsilon=4.0, steps=1, **overrides).fit(small_graph, split)


def test_bad_privacy_inputs(small_graph):
    with pytest.raises(PrivacyParameterError):
        get_defense("dpgnn")(epsilon=-1.0)
    with pytest.raises(ConfigurationError):
        get_defense("dpgnn")(epsilon=1.0, no_such_knob=3)


# ----------------------------------------------------------------------------- residual layer, schedule
def test_residual_layer_shape_and_behaviour(small_graph):
    torch.manual_seed(0)
    x, edge_index = small_graph.data.x, small_graph.data.edge_index
    plain = DPGCNNet(small_graph.num_features, 8, 3, layers=2, residual=False)
    resid = DPGCNNet(small_graph.num_features, 8, 3, layers=2, residual=True)
    resid.load_state_dict(plain.state_dict())
    assert resid(x, edge_index).shape == (small_graph.num_nodes, 3)
    assert resid.embed(x, edge_index).shape == (small_graph.num_nodes, 8)
    # With the graph layers' Dense set to zero, tanh(0) = 0 and the residual layer is exactly Â h,
    # while the plain layer outputs 0.
    for net in (plain, resid):
        for conv in net.convs:
            torch.nn.init.zeros_(conv.weight)
            torch.nn.init.zeros_(conv.bias)
    h = torch.tanh(resid.encoder[0](x))
    expected = DPGCNNet.mean_aggregate(DPGCNNet.mean_aggregate(h, edge_index), edge_index)
    assert torch.allclose(resid.embed(x, edge_index), expected, atol=1e-6)
    assert torch.count_nonzero(plain.embed(x, edge_index)) == 0
    # The padded dense path computes the same residual layer as the whole-graph path.
    n = small_graph.num_nodes
    train = torch.arange(0, n, 2)
    sampled = sample_edgelists(edge_index, n, _train_mask(n, train), 4, torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    net = DPGCNNet(small_graph.num_features, 8, 3, layers=2, residual=True)
    index = build_subgraphs(sampled, train, n, 2, 4)
    feats, adj, roots = pad_batch(index, torch.arange(index.num_subgraphs), x)
    dense = torch.stack([net(feats[i], adj[i], dense=True) for i in range(len(roots))])
    assert torch.allclose(dense, net(x, sampled)[roots], atol=1e-5)


def test_reference_schedule_is_scaled_to_the_graph(small_graph):
    assert reference_schedule(90_941) == (10_000, 3_000)  # the reference run on ogbn-arxiv
    assert reference_schedule(1_000_000) == (10_000, 3_000)
    assert reference_schedule(3_319) == (365, 3_000)
    assert reference_schedule(5) == (1, 3_000)
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("dpgnn")(epsilon=4.0, seed=0, steps=2, latent=8).fit(small_graph, split)
    plan = model.card["dpgnn"]
    declared = declared_train_size(small_graph, split)
    assert plan["batch_size"] == reference_schedule(declared)[0] and plan["steps"] == 2
    assert model.card["hyperparameters"]["residual"] is True


# ----------------------------------------------------------------------------- protocol=paper
def test_paper_protocol_clips_per_tensor_at_private_percentiles_and_is_unsound(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("dpgnn")(epsilon=6.0, seed=2, steps=3, batch_size=40, latent=8, protocol="paper").fit(
        small_graph, split
    )
    spec = model.privacy
    assert spec.protocol == "paper" and not spec.sound and spec.epsilon <= 6.0
    assert len(spec.unaccounted) == 2
    assert "clipping thresholds read from private data" in spec.unaccounted[0]
    assert spec.unaccounted[1].startswith("undirected node removal")
    measured = model.record["dpgnn"]
    thresholds = measured["clip_thresholds"]
    assert "clip_thresholds" not in model.card["dpgnn"]  # read from private gradients: the owner's record
    # One threshold per parameter tensor, recomputed independently: the 75th percentile of the
    # per-subgraph gradient norms at the same initialisation over all (< 10,000) subgraphs.
    torch.manual_seed(2)  # Defense.fit seeds everything with the seed before building the model
    n = small_graph.num_nodes
    mask = _train_mask(n, split.train)
    sampled = sample_edgelists(small_graph.data.edge_index, n, mask, 5, torch.Generator().manual_seed(2))
    index = build_subgraphs(sampled, split.train.long(), n, 1, 5)
    net = DPGCNNet(small_graph.num_features, 8, small_graph.num_classes, layers=1, residual=True)
    assert set(thresholds) == {k for k, _ in net.named_parameters()}
    params = {k: v.detach() for k, v in net.named_parameters()}
    feats, adj, roots = pad_batch(index, torch.arange(index.num_subgraphs), small_graph.data.x)
    grads = per_subgraph_gradients(net, params, feats, adj, small_graph.data.y[roots])
    for k, g in grads.items():
        assert thresholds[k] == pytest.approx(float(np.percentile(g.flatten(1).norm(dim=1).numpy(), 75)), rel=1e-4)
    # The accountant sees a clipped term of norm sqrt(sum_p C_p^2) (sensitivity 2x that).
    total = math.sqrt(sum(c * c for c in thresholds.values()))
    assert spec.mechanisms[0]["sensitivity_per_term"] == pytest.approx(2 * total)
    assert measured["noise_std"] == pytest.approx(model.card["dpgnn"]["noise_multiplier"] * total)


# ----------------------------------------------------------------------------- undirected node removal
def _subgraph_signatures(index) -> list[tuple[frozenset, frozenset]]:
    out = []
    for i in range(index.num_subgraphs):
        nodes = index.nodes_of(i)
        e0, e1 = int(index.edge_ptr[i]), int(index.edge_ptr[i + 1])
        edges = zip(nodes[index.edge_src[e0:e1]].tolist(), nodes[index.edge_dst[e0:e1]].tolist())
        out.append((frozenset(nodes.tolist()), frozenset(edges)))
    return out


def test_node_removal_on_cora_directed_is_bounded_undirected_is_not(load_real):
    """Count the training subgraphs that change when a node is removed, with the same coins for
    every remaining edge. Remark 2's directed removal (the node's messages = its incoming
    edgelist) changes at most N(K, r) subgraphs (its own included); removing the node with all
    its undirected edges changes far more — which is why the spec lists undirected removal as
    not covered rather than claiming it."""
    ds = load_real("cora")
    split = make_split(ds, "random:0.75,0.1,0.15", 0)
    n, k, layers = ds.num_nodes, 5, 1
    edge_index = ds.data.edge_index
    mask = _train_mask(n, split.train)
    coins = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(0))
    bound = occurrence_bound(k, layers)

    def signatures(keep):
        sampled = sample_edgelists(edge_index[:, keep], n, mask, k, uniforms=coins[keep])
        return _subgraph_signatures(build_subgraphs(sampled, split.train, n, layers, k))

    base = signatures(torch.ones(edge_index.size(1), dtype=torch.bool))
    roots = split.train.tolist()
    degree = torch.bincount(edge_index[0], minlength=n)
    victims = [v for v in torch.argsort(degree, descending=True).tolist() if mask[v]][:6]
    worst_undirected = 0
    for v in victims:
        own = {roots.index(v)}  # its own term is replaced in the neighbouring dataset
        directed = signatures(edge_index[0] != v)
        changed = {i for i, (a, b) in enumerate(zip(base, directed)) if a != b} | own
        assert len(changed) <= bound
        assert all(v in base[i][0] for i in changed)  # only subgraphs it occurs in
        undirected = signatures((edge_index[0] != v) & (edge_index[1] != v))
        changed_u = {i for i, (a, b) in enumerate(zip(base, undirected)) if a != b} | own
        worst_undirected = max(worst_undirected, len(changed_u))
    assert worst_undirected > 5 * bound, worst_undirected
    assert UNDIRECTED_STEP.format(bound=bound).startswith("undirected node removal is not covered")


@pytest.mark.parametrize("layers", [1, 2])
def test_degree_promise_node_removal_and_addition_on_cora_is_bounded(load_real, layers):
    """``degree_bound=promise`` on Cora with K = its largest training-reader count: removing a
    node with all its undirected edges, or adding one (joined to nodes below the promise),
    changes only the training subgraphs that node occurs in, at most N(K, r); the node read by K
    training nodes attains it at r = 1, so half the bound would be exceeded (at r = 2 Cora's
    neighbourhoods overlap and stay far below K²)."""
    ds = load_real("cora")
    split = make_split(ds, "random:0.75,0.1,0.15", 0)
    n, edge_index = ds.num_nodes, ds.data.edge_index
    mask = _train_mask(n, split.train)
    readers = training_readers(edge_index, n, mask)
    k = int(readers.max())
    bound = occurrence_bound(k, layers)
    roots = split.train.tolist()

    def signatures(edges, nodes, train):
        node_mask = _train_mask(nodes, train)
        sampled = promised_edgelists(edges, nodes, node_mask, k)
        return _subgraph_signatures(build_subgraphs(sampled, train, nodes, layers, k))

    base = signatures(edge_index, n, split.train)
    worst = 0
    for v in torch.argsort(readers, descending=True)[:5].tolist():
        removed = signatures(edge_index[:, (edge_index[0] != v) & (edge_index[1] != v)], n, split.train)
        changed = {i for i, (a, b) in enumerate(zip(base, removed)) if a != b}
        changed |= {roots.index(v)} if mask[v] else set()  # its own term leaves the dataset
        assert all(v in base[i][0] for i in changed)  # only subgraphs it occurs in
        assert len(changed) <= bound
        worst = max(worst, len(changed))
    # add a training node joined to training nodes that stay within the promise
    room = [u for u in roots if readers[u] < k][: k - 1]
    new = torch.tensor(room)
    joined = torch.stack([torch.full_like(new, n), new])
    grown_edges = torch.cat([edge_index, joined, joined.flip(0)], dim=1)
    grown_train = torch.cat([split.train, torch.tensor([n])])
    grown = signatures(grown_edges, n + 1, grown_train)
    changed = {i for i, (a, b) in enumerate(zip(base, grown[: len(base)])) if a != b} | {len(base)}
    assert all(n in grown[i][0] for i in changed) and len(changed) <= bound
    if layers == 1:  # the node read by K training nodes: its K readers and itself, so half would fail
        assert worst == bound
    with pytest.raises(ConfigurationError, match="read by at most"):
        promised_edgelists(edge_index, n, mask, k - 1)


# ----------------------------------------------------------------------------- the public plan, declared population
def _fit(graph, split, **overrides):
    settings = {"epsilon": 4.0, "seed": 0, "steps": 3, "latent": 8, **overrides}
    return get_defense("dpgnn")(**settings).fit(graph, split)


def test_release_is_neutral_to_removing_a_training_node(small_graph, tmp_path):
    """Same seed on n and n − 1 training nodes (the highest-degree one removed with all its
    edges): every public leaf of model.json agrees — σ, batch, steps and the notes come from the
    declared training-set size; the counts that do move are in the owner's record only."""
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    smaller = without_node(small_graph, split)
    assert len(smaller[1].train) == len(split.train) - 1
    differences = train_and_compare(
        lambda: get_defense("dpgnn")(epsilon=4.0, seed=0, steps=3, latent=8), (small_graph, split), smaller, tmp_path
    )
    assert differences == {}
    records = [json.loads((tmp_path / f"neighbour-{i}" / "provenance.json").read_text())["dpgnn"] for i in (0, 1)]
    assert [r["num_subgraphs"] for r in records] == [len(split.train), len(split.train) - 1]
    assert [r["empty_slots"] for r in records] == [0, 1]  # the removed node's slot is an empty (zero) term


def test_card_holds_the_plan_and_the_record_the_measurements(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = _fit(small_graph, split, batch_size=40)
    declared = declared_train_size(small_graph, split)
    plan = model.card["dpgnn"]
    assert plan == {
        "declared_train_size": declared,
        "batch_size": 40,
        "steps": 3,
        "occurrence_bound": 6,
        "accounted_clip_groups": 1,
        "noise_multiplier": model.privacy.mechanisms[0]["sigma"],
    }
    measured = model.record["dpgnn"]
    assert {"num_subgraphs", "sampled_messages", "mean_subgraph_size", "max_occurrences"} <= set(measured)
    public = load(model.save(tmp_path / "m"), record=False)
    assert public.record == {} and public.card["dpgnn"] == plan
    assert not any(str(measured["sampled_messages"]) in note for note in public.privacy.notes)
    assert public.privacy.public_facts["num_train"] == declared
    # layer-wise clipping: G = encoder, graph layer, decoder groups, counted without building weights
    layerwise = _fit(small_graph, split, batch_size=40, clipping="layerwise")
    assert layerwise.card["dpgnn"]["accounted_clip_groups"] == 3 == len(clip_groups(layerwise.module, "layerwise"))
    assert layerwise.privacy.mechanisms[0]["sensitivity_per_term"] == pytest.approx(2.0 * math.sqrt(3))


def test_undeclared_training_size_is_refused_before_any_work(small_graph, monkeypatch):
    import defenses.dpgnn.defense as package

    undeclared = from_data(small_graph.data.clone(), name="mine", classes=3)  # no size declared
    split = make_split(undeclared, "random:0.6,0.2,0.2", 0)
    assert declared_train_size(undeclared, split) is None

    def must_not_run(*args, **kwargs):
        raise AssertionError("the private graph was read before the plan was refused")

    monkeypatch.setattr(package, "sample_edgelists", must_not_run)
    for epsilon in (4.0, math.inf):  # the schedule needs N even without noise
        with pytest.raises(DPAuditError, match="declared public size"):
            get_defense("dpgnn")(epsilon=epsilon, delta=1e-5, steps=1).fit(undeclared, split)


def test_slot_sampler_draws_from_the_declared_population():
    """m distinct slots of max(n, n̂): exactly the plain sampler when n = n̂; each subgraph's
    inclusion rate is m/n̂ below the declaration (empty slots) and m/n above it."""
    first, second = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(5):
        assert torch.equal(sample_slots(50, 50, 20, first), sample_batch(50, 20, second))
    g = torch.Generator().manual_seed(1)
    draws, m = 3000, 20
    for n, declared in [(30, 50), (80, 50)]:
        hits = torch.zeros(n)
        for _ in range(draws):
            batch = sample_slots(n, declared, m, g)
            assert batch.unique().numel() == batch.numel() and int(batch.max()) < n
            hits[batch] += 1
        p = m / max(n, declared)
        sd = math.sqrt(draws * p * (1 - p))
        assert float((hits - draws * p).abs().max()) < 5 * sd, (n, declared)


def test_declared_population_bounds_larger_training_sets():
    """The proof's step for n > n̂: Hypergeometric(P, N(K, r), m) is stochastically decreasing in
    the population P, and so is Theorem 1's ε — the accountant's N = n̂ bounds every n ≥ n̂."""
    occ, m = occurrence_bound(5, 1), 20
    cdfs, epsilons = [], []
    for population in (40, 41, 60, 400):
        support, pmf = hypergeometric_law(population, occ, m)
        cdfs.append(np.cumsum(np.pad(pmf, (0, occ + 1 - len(pmf)))))
        mechanism = dpgnn_mechanism(6.0, 1.0, population, m, 5, 1, 50)
        epsilons.append(PrivacyLedger().step(mechanism).get_epsilon(1e-5))
    for smaller, larger in zip(cdfs, cdfs[1:]):
        assert np.all(larger >= smaller - 1e-12)
    assert epsilons == sorted(epsilons, reverse=True) and epsilons[0] > epsilons[-1]


def test_real_training_set_above_or_below_the_declaration(small_graph):
    """The plan reads only the declaration: a training set larger than declared is sampled from
    its own size (all m slots filled), a smaller one leaves empty slots; σ is the plan's."""
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    n = len(split.train)
    for declared in (n - 20, n + 20):
        sizes = {**split.declared_sizes, "train": declared}
        model = _fit(small_graph, dataclasses.replace(split, declared_sizes=sizes), batch_size=40)
        assert model.card["dpgnn"]["declared_train_size"] == declared
        assert model.record["dpgnn"]["num_subgraphs"] == n
        assert model.record["dpgnn"]["empty_slots"] == max(0, declared - n)
        hp = DPGNNHyperparameters(**model.card["hyperparameters"])
        planned = protocols.plan(hp, "sound", 4.0, model.privacy.delta, declared).mechanism(hp.clip_norm)
        assert compare_records(model.privacy.mechanisms, [planned.describe()]) is None


# ----------------------------------------------------------------------------- replan on load
@pytest.mark.parametrize("protocol", ["sound", "paper"])
def test_load_re_derives_the_mechanism_from_the_card(small_graph, tmp_path, protocol):
    """DPGNN.replan calls the plan _fit used; σ edited with ε, steps edited with ε (each file
    self-consistent in its own arithmetic), or a hyperparameter alone, is refused on load."""
    from dpaudit.accounting.verify import recompute

    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = _fit(small_graph, split, batch_size=40, protocol=protocol)
    directory = model.save(tmp_path / "m")
    loaded = load(directory, record=False)
    assert compare_records(loaded.privacy.mechanisms, DPGNN.replan(loaded.card, loaded.privacy)) is None
    assert any("re-derived" in line for line in loaded.verification.checked)

    def edited(name, edit):
        return edited_copy(directory, tmp_path / name, edit)

    def consistent(field, factor):
        def edit(meta):
            p = meta["privacy"]
            p["mechanisms"][0][field] = type(p["mechanisms"][0][field])(p["mechanisms"][0][field] * factor)
            values, mu = recompute(p["mechanisms"], p["delta"], p["accounting"], set(p["epsilon_by_accountant"]))
            p["epsilon"], p["epsilon_by_accountant"], p["gdp_mu"] = min(values.values()), values, mu
            p["accounting"]["analysis"] = min(values, key=values.get)

        return edit

    with pytest.raises(IntegrityError, match="plan"):
        load(edited("sigma", consistent("sigma", 3.0)))
    with pytest.raises(IntegrityError, match="plan"):
        load(edited("steps", consistent("steps", 0.5)))

    def card_steps(meta):
        meta["card"]["hyperparameters"]["steps"] = 30

    with pytest.raises(IntegrityError, match="plan"):
        load(edited("card-steps", card_steps))


# ----------------------------------------------------------------------------- gradient canaries
def test_node_occurrence_law_is_theorem_1s():
    """A canary node owns k terms of N slots, m drawn per step: ρ ~ Hypergeometric(N, k, m), its own
    slot among them with probability ρ/k; present it adds +ρ·C, removed −(ρ − own)·C."""
    from defenses.dpgnn.canaries import NodeOccurrences

    included = torch.tensor([True] * 3000 + [False] * 3000)
    generator = torch.Generator().manual_seed(0)
    full = NodeOccurrences(population=8, batch_size=8, terms=6)  # every slot drawn: exact
    multiples, drawn = full.draw(included, generator)
    assert (multiples[:3000] == 6).all() and (multiples[3000:] == -5).all()
    assert (drawn[:3000] == 6).all() and (drawn[3000:] == 5).all()

    law = NodeOccurrences(population=20, batch_size=5, terms=3)
    assert law.sample_rate == 0.25
    steps = [law.draw(included, generator)[0].numpy() for _ in range(20)]
    present = np.concatenate([s[:3000] for s in steps]).astype(int)
    removed = np.concatenate([s[3000:] for s in steps])
    _, pmf = hypergeometric_law(20, 3, 5)
    observed = np.bincount(present, minlength=len(pmf)) / present.size
    # 60,000 draws: every cell of the law within 5 standard errors
    assert np.all(np.abs(observed - pmf) < 5 * np.sqrt(np.array(pmf) * (1 - np.array(pmf)) / present.size) + 1e-9)
    # E[ρ − own] = k·m/N − m/N = 0.5; sd ≤ 1.2, 60,000 draws
    assert removed.mean() == pytest.approx(-0.5, abs=0.03) and removed.max() <= 0 and removed.min() >= -2
    with pytest.raises(ValueError, match="terms"):
        NodeOccurrences(population=4, batch_size=5, terms=2)


def _padded_graph(small_graph, pad=40):
    """``small_graph`` with ``pad`` all-zero feature columns (room for Dirac canaries)."""
    from torch_geometric.data import Data

    data = small_graph.data
    x = torch.cat([data.x, torch.zeros(data.num_nodes, pad)], dim=1)
    return from_data(Data(x=x, y=data.y, edge_index=data.edge_index), "small-padded", public_facts=True)


def _canary_hook(count, seed=0, label=None):
    from dpaudit.auditing import gradient_canary as game
    from dpaudit.training.dpsgd import DiracCanaries

    return DiracCanaries(game.DiracDesign(count, seed), game.fair_coins(seed, 0), seed=seed + 17, module_label=label)


def _weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])


def test_canaries_touch_only_their_coordinates_and_leave_the_run_otherwise_identical(small_graph):
    """Without canaries (or with canaries asking for another run) the weights are bit-identical;
    canaries on feature columns no row uses never reach the forward pass and draw from their own
    generator, so every other coordinate follows the run without them exactly (Adam is per
    coordinate). Removed canaries move too: their readers' terms are −C."""
    from dpaudit.training.dpsgd import inserting_canaries

    graph = _padded_graph(small_graph)
    split = make_split(graph, "random:0.6,0.2,0.2", 0)

    def fit():
        return _fit(graph, split, batch_size=40, steps=8, latent=8)

    plain = _weights(fit())
    assert torch.equal(plain, _weights(fit()))
    elsewhere = _canary_hook(30, label="gap encoder")
    with inserting_canaries(elsewhere):
        assert torch.equal(plain, _weights(fit()))
    assert not elsewhere.attached
    hook = _canary_hook(30)
    with inserting_canaries(hook):
        audited = _weights(fit())
    assert hook.attached and hook.steps == 8 and hook.law.terms == 6 and hook.law.batch_size == 40
    assert hook.design.chosen["on_unused_input_columns"] == 30 and 0 < hook.included.sum() < 30
    moved = set(torch.nonzero(audited != plain).reshape(-1).tolist())
    assert moved and moved <= set(hook.coordinates.tolist())
    assert moved & set(hook.coordinates[torch.from_numpy(~hook.included)].tolist())


def test_iterate_scores_follow_the_node_law(small_graph):
    """Batch = population (every slot drawn) and almost no noise: a present canary adds k·C per
    step, a removed one −(k − 1)·C, exactly; non-private runs take no canaries."""
    from dpaudit.auditing import gradient_canary as game
    from dpaudit.training.dpsgd import inserting_canaries

    graph = _padded_graph(small_graph)
    split = make_split(graph, "random:0.6,0.2,0.2", 0)
    hook = _canary_hook(20)
    with inserting_canaries(hook):
        model = _fit(graph, split, batch_size=10_000, steps=5, latent=8, epsilon=1e7)
    assert model.card["dpgnn"]["noise_multiplier"] < 0.01
    scores = game.scores(hook, "iterates")
    assert np.allclose(scores[hook.included], 5 * 6.0, atol=0.1)
    assert np.allclose(scores[~hook.included], -5 * 5.0, atol=0.1)
    assert game.sampling_rate_seen(hook) == pytest.approx(1.0)
    idle = _canary_hook(5)
    with inserting_canaries(idle):
        get_defense("dpgnn")(seed=0, steps=2, batch_size=40, latent=8).fit(graph, split)
    assert not idle.attached


def test_mean_aggregate_in_chunks_is_the_same_sum(monkeypatch):
    """Whole-graph inference aggregates messages in chunks (no edges × d array): same values, same
    gradients as one gather."""
    import defenses.dpgnn.model as dpgnn_model

    torch.manual_seed(0)
    h = torch.randn(300, 7, requires_grad=True)
    edge_index = torch.randint(0, 300, (2, 5000))
    whole = DPGCNNet.mean_aggregate(h, edge_index)
    (grad_whole,) = torch.autograd.grad(whole.square().sum(), h)
    monkeypatch.setattr(dpgnn_model, "_MESSAGE_CHUNK", 70)  # 10 edges per chunk
    chunked = DPGCNNet.mean_aggregate(h, edge_index)
    (grad_chunked,) = torch.autograd.grad(chunked.square().sum(), h)
    assert torch.equal(whole, chunked)
    torch.testing.assert_close(grad_chunked, grad_whole)


def test_degree_promise_spec_is_sound_and_bounded_degree(small_graph, tmp_path):
    """``degree_bound=promise``: a graph above K is refused before any work; within it the spec
    is ``sound: true`` with no unaccounted step and the restricted relation stated (no ceiling is
    drawn from it), the load check keeps that condition, and ``paper`` cannot take the promise."""
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    k = int(
        training_readers(
            small_graph.data.edge_index, small_graph.num_nodes, _train_mask(small_graph.num_nodes, split.train)
        ).max()
    )
    with pytest.raises(ConfigurationError, match="read by at most"):
        _fit(small_graph, split, degree_bound="promise", max_in_degree=k - 1)
    model = _fit(small_graph, split, degree_bound="promise", max_in_degree=k)
    spec = model.privacy
    assert spec.sound and spec.unaccounted == [] and spec.unit_condition == f"training readers per node <= {k}"
    assert not spec.proven and spec.epsilon <= 4.0
    directory = model.save(tmp_path / "promise")
    assert load(directory).privacy.unit_condition == spec.unit_condition
    meta = json.loads((directory / "model.json").read_text())
    meta["privacy"]["unit_condition"] = None
    (directory / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="unit condition"):
        load(directory)
    with pytest.raises(ConfigurationError, match="promise"):
        _fit(small_graph, split, degree_bound="promise", protocol="paper")
    assert not _fit(small_graph, split).privacy.sound  # the default sampler is still sound: false


def test_degree_promise_release_is_neutral_to_removing_a_training_node(small_graph, tmp_path):
    """The promise run on n and n − 1 training nodes (the highest-degree one removed with all its
    edges), same seed: every public leaf of model.json agrees (K is a hyperparameter, the check
    reads the graph but publishes nothing of it)."""
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    readers = training_readers(
        small_graph.data.edge_index, small_graph.num_nodes, _train_mask(small_graph.num_nodes, split.train)
    )
    k = int(readers.max())

    def make():
        return get_defense("dpgnn")(epsilon=4.0, seed=0, steps=3, latent=8, degree_bound="promise", max_in_degree=k)

    assert train_and_compare(make, (small_graph, split), without_node(small_graph, split), tmp_path) == {}
