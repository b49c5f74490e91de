"""Sparse input features: SparseFeatures / InputLinear give the dense models' functions."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data

import dpaudit.nn as dnn
from defenses.baselines import FeatureMLP
from defenses.gap.model import GAPEncoder
from dpaudit.data.datasets import from_data
from dpaudit.data.splits import make_split
from dpaudit.nn import GNN, MLP, SparseFeatures, feature_dropout, features
from dpaudit.training.registry import get_defense


def _sparse_matrix(n=60, f=40, density=0.08, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, f, generator=g) < density).float() * (1 + torch.rand(n, f, generator=g))


def test_sparse_features_round_trip_rows_and_transpose():
    x = _sparse_matrix()
    x[5] = 0  # an empty row
    s = SparseFeatures.from_tensor(x)
    assert torch.equal(s.to_dense(), x) and s.nnz == int((x != 0).sum())
    torch.testing.assert_close(s.t_matmul(torch.eye(60)), x.t())
    index = torch.tensor([7, 5, 7, 0, 59])
    sub = s[index]
    assert torch.equal(sub.to_dense(), x[index])
    torch.testing.assert_close(sub.t_matmul(torch.eye(5)), x[index].t())
    mask = torch.zeros(60, dtype=torch.bool)
    mask[[1, 2, 40]] = True
    assert torch.equal(s[mask].to_dense(), x[mask])
    torch.testing.assert_close(s.row_sq_norms(), x.pow(2).sum(1))
    normalized = s.row_normalize().to_dense()
    total = x.abs().sum(1, keepdim=True)
    torch.testing.assert_close(normalized, torch.where(total > 0, x / total.clamp(min=1e-30), x))


def test_sparse_products_equal_dense_ones_with_empty_rows_and_columns():
    x = _sparse_matrix(n=30, f=12)
    x[[0, 4, 29]] = 0  # empty rows, the last one included
    x[:, 3] = 0  # an empty column
    s = SparseFeatures.from_tensor(x)
    m, g = torch.randn(12, 5), torch.randn(30, 5)
    torch.testing.assert_close(s.matmul(m), x @ m)
    torch.testing.assert_close(s.t_matmul(g), x.t() @ g)
    empty = SparseFeatures.from_tensor(torch.zeros(4, 12))
    assert torch.equal(empty.matmul(m), torch.zeros(4, 5)) and torch.equal(empty.t_matmul(g[:4]), torch.zeros(12, 5))
    weight = torch.randn(5, 12, requires_grad=True)
    s.linear(weight).pow(2).sum().backward()
    reference = weight.detach().clone().requires_grad_(True)
    (x @ reference.t()).pow(2).sum().backward()
    torch.testing.assert_close(weight.grad, reference.grad)


def test_features_keeps_only_sparse_matrices_sparse():
    assert isinstance(features(_sparse_matrix()), SparseFeatures)
    dense = torch.rand(10, 5) + 0.1
    assert features(dense) is dense
    assert isinstance(features(_sparse_matrix().to_sparse()), SparseFeatures)


def _modules():
    torch.manual_seed(0)
    return [
        MLP(40, [16], 4),
        MLP(40, [], 4),
        GNN("sage", 40, [16], 4),
        GNN("gcn", 40, [16], 4),
        FeatureMLP(40, 16, 4, layers=2, normalize=True),
        FeatureMLP(40, 16, 4, layers=1, bias=False),
        GAPEncoder(40, 16, 2, 4, dropout=0.0, batch_norm=False),
    ]


@pytest.mark.parametrize("index", range(7))
def test_sparse_first_layer_same_outputs_and_gradients(index):
    module = _modules()[index]
    x = _sparse_matrix()
    edge_index = torch.randint(0, 60, (2, 300), generator=torch.Generator().manual_seed(1))
    module.eval()
    outputs, grads = [], []
    for inputs in (x, SparseFeatures.from_tensor(x)):
        module.zero_grad()
        out = module(inputs, edge_index) if isinstance(module, GNN) else module(inputs)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outputs.append(out.detach())
        grads.append([p.grad.clone() for p in module.parameters()])
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(grads[0], grads[1]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_sparse_dropout_touches_only_the_non_zeros():
    x = _sparse_matrix()
    s = SparseFeatures.from_tensor(x)
    torch.manual_seed(0)
    dropped = feature_dropout(s, 0.5, True).to_dense()
    assert torch.all(dropped[x == 0] == 0)
    kept = dropped[x != 0]
    assert torch.all((kept == 0) | torch.isclose(kept, 2 * x[x != 0]))
    assert 0.3 < float((kept == 0).float().mean()) < 0.7
    assert feature_dropout(s, 0.5, False) is s


def _sparse_dataset():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(150) % 3
    x = (torch.rand(150, 60, generator=g) < 0.05).float()
    x[torch.arange(150), y * 20 + torch.randint(0, 20, (150,), generator=g)] = 1.0  # class words
    src = torch.randint(0, 150, (600,), generator=g)
    dst = torch.where(
        torch.rand(600, generator=g) < 0.8, src - src % 3 + y[src], torch.randint(0, 150, (600,), generator=g)
    )
    dst = (dst - y[dst] + y[src]).clamp(0, 149)
    return from_data(Data(x=x, edge_index=torch.stack([src, dst]), y=y), name="sparse-toy", public_facts=True)


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("mlp", {"epochs": 20}),
        ("sage", {"epochs": 20, "dropout": 0.0}),
        ("mlp-dp", {"epochs": 3}),
        ("dpgnn", {"steps": 3, "batch_size": 30, "latent": 8}),
        ("gap-ndp", {"encoder_epochs": 2, "epochs": 2, "max_degree": 40, "batch_size": 256}),
        ("gcon", {"encoder_epochs": 5, "encoder_dropout": 0.0}),
    ],
)
def test_fit_on_sparse_features_equals_dense_fit(name, overrides, monkeypatch):
    dataset = _sparse_dataset()
    assert isinstance(features(dataset.data.x.float()), SparseFeatures)
    split = make_split(dataset, "random:0.6,0.2,0.2", 0)
    eps = math.inf if name in ("mlp", "sage") else 8.0
    probs = []
    for density in (dnn.SPARSE_DENSITY, 0.0):  # 0.0: nothing counts as sparse, dense path
        monkeypatch.setattr(dnn, "SPARSE_DENSITY", density)
        model = get_defense(name)(epsilon=eps, seed=0, **overrides).fit(dataset, split)
        probs.append(model.predict_proba(dataset.data))
    torch.testing.assert_close(probs[0], probs[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layers,clipping", [(1, "flat"), (2, "layerwise"), (2, "per-tensor")])
def test_dpgnn_sparse_clipped_sum_equals_dense_and_materialised(layers, clipping):
    from defenses.dpgnn.batches import flat_batch, pad_batch
    from defenses.dpgnn.mechanism import build_subgraphs, sample_edgelists
    from defenses.dpgnn.model import DPGCNNet, clip_groups
    from defenses.dpgnn.training import clipped_gradient_sum, clipped_sum, per_subgraph_gradients

    dataset = _sparse_dataset()
    n, x = dataset.num_nodes, dataset.data.x.float()
    train = torch.arange(n // 2)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[train] = True
    sampled = sample_edgelists(dataset.data.edge_index, n, mask, 3, torch.Generator().manual_seed(2))
    index = build_subgraphs(sampled, train, n, layers, 3)
    torch.manual_seed(0)
    net = DPGCNNet(x.size(1), 8, 3, layers=layers, encoder_layers=2, decoder_layers=2)
    params = {k: v.detach() for k, v in net.named_parameters()}
    batch = torch.arange(40)
    dense, adj, roots = pad_batch(index, batch, x)
    flat = flat_batch(index, batch)
    groups = clip_groups(net, clipping)
    y = dataset.data.y[roots]
    ref = clipped_sum(per_subgraph_gradients(net, params, dense, adj, y), groups, 0.05)
    fast_dense = clipped_gradient_sum(net, params, x, flat, y, groups, 0.05)
    fast_sparse = clipped_gradient_sum(net, params, SparseFeatures.from_tensor(x), flat, y, groups, 0.05)
    for name in ref:
        torch.testing.assert_close(fast_sparse[name], fast_dense[name], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(fast_sparse[name], ref[name], rtol=1e-5, atol=1e-6)
