"""The public feature graph (:mod:`dpaudit.data.feature_graph`): exact neighbours, GCN's
normalisation, the smoothing's powers, the size limits, and the stored form."""

import numpy as np
import pytest
import torch

import dpaudit.data.feature_graph as fg
from dpaudit.data.feature_graph import (
    MAX_NODES,
    FeatureSmoothing,
    feature_graph,
    smooth_features,
    smoothing_fits,
)
from dpaudit.errors import ConfigurationError


def _dense_reference(x: np.ndarray, k: int, hops: int) -> np.ndarray:
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    n = len(x)
    adj = np.zeros((n, n))
    for i in range(n):
        adj[i, np.argsort(-sim[i], kind="stable")[:k]] = 1
    adj = np.maximum(adj, adj.T) + np.eye(n)
    scale = adj.sum(1) ** -0.5
    op = scale[:, None] * adj * scale[None, :]
    z = unit
    for _ in range(hops):
        z = op @ z
    return z


def test_smoothing_matches_a_dense_reference():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=gen)
    for k, hops in [(3, 1), (5, 2)]:
        got = smooth_features(x, k, hops).numpy()
        np.testing.assert_allclose(got, _dense_reference(x.double().numpy(), k, hops), atol=1e-5)


def test_operator_is_symmetric_with_self_loops_and_sparse_input_agrees():
    gen = torch.Generator().manual_seed(1)
    x = (torch.rand(60, 30, generator=gen) < 0.05).float()  # bag-of-words-like, mostly zero
    x[:, 0] += 1.0  # no all-zero row
    op = feature_graph(x, 4)
    assert abs(op - op.T).max() < 1e-12
    assert (op.diagonal() > 0).all()
    assert op.nnz <= 2 * 4 * 60 + 60
    np.testing.assert_allclose(smooth_features(x.to_sparse(), 4, 2).numpy(), smooth_features(x, 4, 2).numpy())


def test_stored_form_round_trips_and_rejects_malformed_records():
    s = FeatureSmoothing(7, 3)
    assert FeatureSmoothing.from_dict(s.to_dict()) == s
    assert FeatureSmoothing.from_dict(None) is None
    with pytest.raises(ConfigurationError):
        FeatureSmoothing.from_dict({"k": 3})
    with pytest.raises(ConfigurationError):
        FeatureSmoothing(0, 2)


def test_size_limits_refuse_before_the_search():
    assert smoothing_fits(2_708, 1_433)
    assert not smoothing_fits(MAX_NODES + 1, 10)
    assert not smoothing_fits(50_000, 10_000)
    with pytest.raises(ConfigurationError, match="feature graph is offered"):
        feature_graph(torch.zeros(1, 3))


def test_apply_reuses_the_search_for_one_tensor_and_redoes_it_after_an_edit(monkeypatch):
    calls = []
    real = fg.smooth_features
    monkeypatch.setattr(fg, "smooth_features", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(30, 5, generator=torch.Generator().manual_seed(2))
    first = FeatureSmoothing(3, 1).apply(x)
    second = FeatureSmoothing(3, 1).apply(x)
    assert len(calls) == 1 and torch.equal(first, second) and first is not second
    first.zero_()  # a caller's in-place edit never reaches the cache
    assert torch.equal(FeatureSmoothing(3, 1).apply(x), second)
    assert len(FeatureSmoothing(3, 2).apply(x)) == 30 and len(calls) == 2  # another setting: a new search
    x[0] += 1.0  # an edited feature tensor is searched again
    np.testing.assert_allclose(FeatureSmoothing(3, 1).apply(x).numpy(), real(x, 3, 1).numpy())
    assert len(calls) == 3
