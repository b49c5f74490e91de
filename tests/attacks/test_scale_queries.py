"""Queries cost what they touch (issue 27): the CSR adjacency and its operators against PyG,
k-hop queries against whole-graph ones, the per-graph caches, and GAP's bounded query memo."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.utils import k_hop_subgraph

import defenses  # noqa: F401  (registers the defenses)
import defenses.gap.model as gap_model
from defenses.baselines import BaselineModel, FeatureMLP, KipfGCN
from dpaudit.accounting import PrivacySpec
from dpaudit.data.adjacency import Adjacency, adjacency_of
from dpaudit.data.splits import make_split
from dpaudit.errors import DPAuditError
from dpaudit.nn import GNN, SparseFeatures, build_architecture
from dpaudit.release.model import ModuleModel
from dpaudit.training.registry import get_defense


def _graph(n: int = 120, edges: int = 500, features: int = 20, sparse: bool = False, seed: int = 0) -> Data:
    """A directed random graph with self loops and duplicate edges (both are legal input)."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, edges), generator=g)
    edge_index = torch.cat([edge_index, edge_index[:, :20], torch.tensor([[3, 3, 5], [3, 3, 5]])], dim=1)
    x = torch.rand(n, features, generator=g)
    if sparse:
        x = x * (torch.rand(n, features, generator=g) < 0.05)
    return Data(x=x, edge_index=edge_index, num_nodes=n)


# ----------------------------------------------------------------------------- operators
@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_operators_match_pyg_forward_and_backward(kind):
    data = _graph()
    torch.manual_seed(0)
    conv = GCNConv(20, 7) if kind == "gcn" else SAGEConv(20, 7)
    module = GNN(kind, 20, [], 7).eval()
    module.out.load_state_dict(conv.state_dict())
    x = data.x.clone().requires_grad_(True)
    x_ref = data.x.clone().requires_grad_(True)
    weights = torch.linspace(-1, 1, 120 * 7).view(120, 7)
    ours, ref = module(x, data.edge_index), conv(x_ref, data.edge_index)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    (ours * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-6)  # the transposed product
    for ours_p, ref_p in zip(module.out.parameters(), conv.parameters()):
        torch.testing.assert_close(ours_p.grad, ref_p.grad, rtol=1e-5, atol=1e-5)


def test_kipf_gcn_is_the_dense_formula():
    data = _graph(n=30, edges=80)
    module = KipfGCN(20, 8, 3, dropout=0.0).eval()
    a = torch.zeros(30, 30)
    ei = data.edge_index[:, data.edge_index[0] != data.edge_index[1]]
    a.index_put_((ei[1], ei[0]), torch.ones(ei.size(1)), accumulate=True)
    a += torch.eye(30)
    d = a.sum(1).pow(-0.5)
    a_hat = d[:, None] * a * d[None, :]
    x = data.x / data.x.abs().sum(1, keepdim=True)
    expected = a_hat @ (torch.relu(a_hat @ x @ module.lin1.weight.T) @ module.lin2.weight.T)
    torch.testing.assert_close(module(data.x, data.edge_index), expected, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- k-hop queries
def test_neighbourhood_is_pygs_k_hop_subgraph():
    data = _graph()
    nodes = torch.tensor([7, 3, 7, 100])
    adjacency = Adjacency.from_edge_index(data.edge_index, 120)
    for hops in (1, 2, 3):
        hood = adjacency.neighbourhood(nodes, hops)
        subset, *_ = k_hop_subgraph(nodes, hops, data.edge_index, num_nodes=120)
        assert torch.equal(hood.subset, subset.sort().values)
        assert torch.equal(hood.subset[hood.positions], nodes)


def _models(sparse: bool) -> list[ModuleModel]:
    torch.manual_seed(0)
    spec = PrivacySpec.non_private()
    gcn = KipfGCN(20, 8, 3)
    arch = {"type": "gcn-kipf", "in_dim": 20, "hidden": 8, "out_dim": 3, "dropout": 0.5, "normalize": True}
    mlp = FeatureMLP(20, 8, 3, layers=2)
    mlp_arch = {
        "type": "mlp-features",
        "in_dim": 20,
        "hidden": 8,
        "out_dim": 3,
        "layers": 2,
        "dropout": 0.0,
        "act": "relu",
        "bias": True,
        "normalize": False,
    }
    models = [BaselineModel(gcn, arch, spec, {}), BaselineModel(mlp, mlp_arch, spec, {})]
    for kind, hidden in (("gcn", [8, 8]), ("sage", [8]), ("mlp", [8])):
        architecture = {"type": kind, "in_dim": 20, "hidden": hidden, "out_dim": 3, "dropout": 0.5}
        models.append(ModuleModel(build_architecture(architecture), architecture, spec, {}))
    return models


@pytest.mark.parametrize("sparse", [False, True])
def test_k_hop_queries_answer_exactly_like_the_whole_graph(sparse, monkeypatch):
    """predict_proba / embed on a few nodes read only their k-hop neighbourhood (k = the
    module's number of propagation layers; one fewer for the embedding) and give the
    whole-graph computation's numbers."""
    import dpaudit.release.model as model_module

    data = _graph(sparse=sparse)
    nodes = torch.tensor([11, 4, 11, 90])
    read = []
    real_features = model_module.features
    monkeypatch.setattr(model_module, "features", lambda x: read.append(x.size(0)) or real_features(x))
    fallbacks = []
    for model in _models(sparse):
        for embed in (False, True):
            query = model.embed if embed else model.predict_proba
            whole = query(data)[nodes]
            read.clear()
            part = query(data, nodes)
            torch.testing.assert_close(part, whole, rtol=1e-5, atol=1e-5)
            hops = model.hops(embed)
            if hops:
                subset, *_ = k_hop_subgraph(nodes, hops, data.edge_index, num_nodes=120)
                inner, *_ = k_hop_subgraph(nodes, hops - 1, data.edge_index, num_nodes=120)
                edges_read = torch.isin(data.edge_index[1], inner).sum()
                if edges_read <= data.edge_index.size(1) // 2:  # the node count is no guide to cost
                    assert read == [subset.numel()]  # only the neighbourhood's rows
                    fallbacks.append(False)
                else:  # most of the graph: the whole-graph computation, its features already cached
                    assert read == []
                    fallbacks.append(True)
    assert set(fallbacks) == {False, True}
    assert isinstance(real_features(_graph(sparse=True).x), SparseFeatures)  # both input paths ran


def test_three_layer_gnn_reads_three_hops():
    architecture = {"type": "gcn", "in_dim": 20, "hidden": [8, 8], "out_dim": 3}
    model = ModuleModel(build_architecture(architecture), architecture, PrivacySpec.non_private(), {})
    assert model.hops(False) == 3 and model.hops(True) == 2


# ----------------------------------------------------------------------------- caches
def test_adjacency_is_cached_per_tensor_and_rebuilt_after_an_edit():
    data = _graph()
    first = adjacency_of(data.edge_index, 120)
    assert adjacency_of(data.edge_index, 120) is first
    assert adjacency_of(data.edge_index.clone(), 120) is not first  # another tensor, same values
    data.edge_index[1, 0] = (data.edge_index[1, 0] + 1) % 120  # in place: the version counter moves
    again = adjacency_of(data.edge_index, 120)
    assert again is not first
    assert torch.equal(again.src, Adjacency.from_edge_index(data.edge_index, 120).src)


def test_an_edited_graph_changes_the_answer_and_a_dead_graph_frees_its_adjacency(small_graph):
    import dpaudit.data.adjacency as adjacency_module

    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("gcn")(seed=0, epochs=5).fit(small_graph, split)
    data = small_graph.data.clone()
    target = int(data.edge_index[1, 0])
    before = model.predict_proba(data, [target])
    with torch.no_grad():
        data.x[data.edge_index[0, 0]] *= -3.0  # a neighbour's features, edited in place
    after = model.predict_proba(data, [target])
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, model.predict_proba(data)[[target]], rtol=1e-5, atol=1e-6)
    entries = len(adjacency_module._ADJACENCIES._entries)
    del data
    gc.collect()
    assert len(adjacency_module._ADJACENCIES._entries) < entries


# ----------------------------------------------------------------------------- GAP's memo
@pytest.fixture(scope="module")
def gap(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    return get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=2, epochs=2).fit(small_graph, split)


def _variant(data: Data, drop: int) -> Data:
    other = data.clone()
    other.edge_index = data.edge_index[:, torch.arange(data.edge_index.size(1)) != drop]
    return other


def test_a_gap_sessions_memo_is_bounded_and_an_evicted_graph_pays_again(gap, small_graph):
    api = gap.query_session()
    api.query_memo_size = 2
    graphs = [_variant(small_graph.data, i) for i in range(3)]
    api.predict_proba(graphs[0])
    api.predict_proba(graphs[1])
    assert api.query_ledger.releases == 2
    api.predict_proba(graphs[0])  # a hit: the same release, not charged; now most recent
    assert api.query_ledger.releases == 2
    api.predict_proba(graphs[2])  # evicts graphs[1] (least recently used)
    assert api.query_ledger.releases == 3 and len(api._memo) == 2
    eps = api.query_ledger.spec().epsilon
    api.predict_proba(graphs[1])  # evicted: a new release, charged exactly like one
    assert api.query_ledger.releases == 4 and api.query_ledger.spec().epsilon > eps
    assert api.privacy.to_dict() == gap.privacy.to_dict()  # the training spec: no query enters it
    api.predict_proba(graphs[2])
    assert api.query_ledger.releases == 4  # still held


def test_gap_hashes_an_edge_structure_once_and_never_confuses_two(gap, small_graph, monkeypatch):
    import defenses.gap.queries as queries

    calls = []
    real = queries.canonical_edges
    monkeypatch.setattr(queries, "canonical_edges", lambda *a: calls.append(1) or real(*a))
    api = gap.query_session()
    data = _variant(small_graph.data, 0)
    for _ in range(3):
        api.predict_proba(data, [0, 1])
    assert len(calls) == 1 and api.query_ledger.releases == 1
    with torch.no_grad():
        data.edge_index[1, 0] = (data.edge_index[1, 0] + 1) % data.num_nodes  # one edge moved, in place
    api.predict_proba(data, [0, 1])
    assert len(calls) == 2 and api.query_ledger.releases == 2  # a different graph: hashed and charged
    permuted = data.clone()
    permuted.edge_index = data.edge_index.flip(1)
    api.predict_proba(permuted, [0, 1])
    assert len(calls) == 3 and api.query_ledger.releases == 2  # another object, the same graph: a hit


# ----------------------------------------------------------------------------- GAP on a neighbourhood
def _pma_rows(monkeypatch) -> list[int]:
    """Rows of every PMA run a GAP query makes from now on."""
    rows = []
    real = gap_model.private_multi_hop_aggregation
    monkeypatch.setattr(
        gap_model, "private_multi_hop_aggregation", lambda x0, *a, **k: rows.append(x0.size(0)) or real(x0, *a, **k)
    )
    return rows


def test_a_gap_query_on_a_few_nodes_runs_pma_on_their_neighbourhood_only(small_graph, monkeypatch):
    """Without noise (gap-inf) PMA is deterministic: the rows answered from the K-hop
    neighbourhood are the whole-graph release's rows."""
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("gap-inf")(seed=0, encoder_epochs=2, epochs=2).fit(small_graph, split)
    data = _variant(small_graph.data, 3)
    nodes = torch.tensor([17, 5, 17, 240])
    rows = _pma_rows(monkeypatch)
    part = model.query_session().predict_proba(data, nodes)
    whole = model.query_session().predict_proba(data)[nodes]
    torch.testing.assert_close(part, whole, rtol=1e-5, atol=1e-6)
    subset, *_ = k_hop_subgraph(nodes, model.cfg["hops"], data.edge_index, num_nodes=data.num_nodes)
    assert rows == [subset.numel(), data.num_nodes] and subset.numel() < data.num_nodes // 2


def test_a_gap_release_answers_again_only_the_rows_it_covered(gap, small_graph, monkeypatch):
    api = gap.query_session()
    data = _variant(small_graph.data, 1)
    rows = _pma_rows(monkeypatch)
    first = api.predict_proba(data, [4, 9])
    assert api.query_ledger.releases == 1 and rows[0] < data.num_nodes
    torch.testing.assert_close(api.predict_proba(data, [9, 4, 9]), first[[1, 0, 1]])  # covered: the same release
    assert api.query_ledger.releases == 1
    api.predict_proba(data, [4, 10])  # node 10 was not covered: a new release, charged
    assert api.query_ledger.releases == 2
    hood, *_ = k_hop_subgraph(torch.tensor([4, 9]), gap.cfg["hops"], data.edge_index, num_nodes=data.num_nodes)
    far = int(torch.tensor([v for v in range(data.num_nodes) if v not in set(hood.tolist())])[0])
    with torch.no_grad():
        data.x[far] += 1.0  # outside what rows 4 and 9 read: still that release
    assert torch.equal(api.predict_proba(data, [4, 9]), first) and api.query_ledger.releases == 2
    with torch.no_grad():
        data.x[int(hood[0])] += 1.0  # inside: a new release
    api.predict_proba(data, [4, 9])
    assert api.query_ledger.releases == 3
    api.predict_proba(data)  # every node: not covered by any release yet
    assert api.query_ledger.releases == 4 and rows[-1] == data.num_nodes
    api.predict_proba(data, [0, 1, 2])  # the whole-graph release covers every node
    assert api.query_ledger.releases == 4 and len(rows) == 4


def test_the_owners_training_release_answers_nodes_a_perturbation_cannot_reach(gap, small_graph, monkeypatch):
    """LinkTeller's perturbed graph on the training graph: nodes whose neighbourhood keeps the
    training features read the training release (free, hashed from their neighbourhood only);
    the others are a new release."""
    from attacks import _common as C

    api = gap.query_session()
    data = small_graph.data.clone()
    calls = []
    real = gap_model.graph_key
    monkeypatch.setattr(gap_model, "graph_key", lambda *a: calls.append(1) or real(*a))
    base = C.posteriors(api, data, [4, 9])
    assert api.query_ledger.releases == 0 and len(calls) == 1
    hood, *_ = k_hop_subgraph(torch.tensor([4, 9]), gap.cfg["hops"], data.edge_index, num_nodes=data.num_nodes)
    far = int(torch.tensor([v for v in range(data.num_nodes) if v not in set(hood.tolist())])[0])
    with torch.no_grad():
        data.x[far] += 1.0
    assert np.array_equal(C.posteriors(api, data, [4, 9]), base) and api.query_ledger.releases == 0
    with torch.no_grad():
        data.x[int(hood[0])] += 1.0
    C.posteriors(api, data, [4, 9])
    assert api.query_ledger.releases == 1 and len(calls) == 1  # never the whole graph hashed again
    with pytest.raises(DPAuditError, match="training graph only"):
        api.training_release().predict_proba(data, [4, 9])


def test_linkteller_pays_gap_only_for_perturbations_that_reach_their_targets(gap, small_graph):
    """In an audit (the owner's copy), a perturbed node outside its targets' K-hop
    neighbourhood leaves their rows the training release's: free, and influence exactly 0."""
    from attacks import _common as C
    from attacks.linkteller import FeatureProbe, influence_scores

    api = gap.query_session()
    data = small_graph.data.clone()
    u, v, _ = C.sample_pairs(data.edge_index, data.num_nodes, 20, np.random.default_rng(0))
    scores = influence_scores(api, FeatureProbe(data, 1e-2, 0), u, v)
    moved = np.unique(v)
    reaches = []
    for node in moved:
        hood, *_ = k_hop_subgraph(
            torch.as_tensor(u[v == node]), gap.cfg["hops"], data.edge_index, num_nodes=data.num_nodes
        )
        reaches.append(bool(torch.isin(torch.tensor(int(node)), hood)))
    assert 0 < api.query_ledger.releases == sum(reaches) < len(moved)
    assert all((scores[v == node] == 0).all() for node, reach in zip(moved, reaches) if not reach)
    assert torch.equal(data.x, small_graph.data.x)  # every perturbation undone
