"""gcn / sage at scale (issue 27): the memory plan decided before allocating, neighbour-sampled
mini-batches when the full graph does not fit, and the sampler's estimates."""

from __future__ import annotations

import json

import pytest
import torch
from torch_geometric.data import Data

import defenses  # noqa: F401  (registers the defenses)
import defenses.baseline_batching as baseline_batching
from defenses.baseline_batching import GIB, GraphSizes, MemoryBudgetError, plan_batching
from dpaudit.data.adjacency import Adjacency
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.training.registry import get_defense

REDDIT = GraphSizes(num_nodes=116_963, num_edges=46_000_000, num_features=602, widths=(16,), num_classes=41)


def _plan(choice="auto", sizes=REDDIT, budget=None, batch=512, fanouts=None):
    return plan_batching("gcn", choice, sizes, 2, batch, fanouts, budget, torch.device("cpu"))


def test_the_plan_reads_sizes_and_budget_only():
    full = sum(REDDIT.full_batch().values())
    assert 2 * GIB < full < 4 * GIB  # Reddit-sized full batch: ~1.5 GiB of CSR, ~0.8 GiB of features
    assert _plan(budget=24).mode == "full"
    sampled = _plan(budget=full / GIB * 0.9)
    assert sampled.mode == "sampled" and sampled.fanouts == (25, 10)
    assert sampled.record() == {
        "batching": "sampled",
        "estimated_gib": pytest.approx(sum(sampled.estimate.values()) / GIB, abs=1e-3),
        "batch_size": 512,
        "fanouts": [25, 10],
    }
    with pytest.raises(MemoryBudgetError, match=r"full batch needs .*adjacency .*sampled batch needs .*adjacency"):
        _plan(budget=0.5)
    with pytest.raises(MemoryBudgetError, match="full batch needs about"):
        _plan("full", budget=1.0)
    with pytest.raises(ConfigurationError, match="one fan-out"):
        _plan(fanouts=[5])
    with pytest.raises(ConfigurationError, match="batching must be"):
        _plan("minibatch")


def test_an_over_budget_fit_is_refused_before_any_allocation(small_graph, monkeypatch):
    def built(*_):
        raise AssertionError("the adjacency was built before the plan")

    monkeypatch.setattr(Adjacency, "from_edge_index", built)
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    for name in ("gcn", "sage"):
        with pytest.raises(MemoryBudgetError, match=f"^{name} on 300 nodes"):
            get_defense(name)(seed=0, epochs=1, memory_budget_gib=1e-6).fit(small_graph, split)


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_sampled_mini_batches_train_and_the_choice_stays_the_owners(name, small_graph, tmp_path):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    # a budget the full graph exceeds but one sampled batch fits: auto picks sampling
    sizes = baseline_batching.GraphSizes(300, small_graph.data.edge_index.size(1), 16, (16,), 3)
    full, sampled = sum(sizes.full_batch().values()), sum(sizes.sampled(8, (2, 2)).values())
    assert sampled < full
    model = get_defense(name)(
        seed=0, epochs=3, batch_size=8, fanouts=[2, 2], hidden=16, memory_budget_gib=(full + sampled) / 2 / GIB
    ).fit(small_graph, split)
    assert model.record["training"]["batching"] == "sampled"
    assert model.accuracy(small_graph.data, split.test) > 0.8
    model.save(tmp_path)
    card = json.loads((tmp_path / "model.json").read_text())["card"]
    assert card["hyperparameters"]["batching"] == "auto" and "training" not in card
    assert "estimated_gib" not in json.dumps(card)


def _random_graph(n=80, edges=600, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, edges), generator=g)
    return Data(x=torch.randn(n, 6, generator=g), edge_index=torch.cat([edge_index, torch.tensor([[2], [2]])], 1))


def test_sampling_every_neighbour_is_the_exact_computation():
    data = _random_graph()
    adjacency = Adjacency.from_edge_index(data.edge_index, 80)
    nodes = torch.tensor([9, 2, 40])
    largest = int(adjacency.degree.max())
    hood = adjacency.sample_neighbourhood(nodes, [largest, largest], torch.Generator().manual_seed(0))
    exact = adjacency.neighbourhood(nodes, 2)
    assert torch.equal(hood.subset, exact.subset)
    for op in ("gcn", "mean"):
        two_hops = lambda a, x, op=op: getattr(a, op)()(getattr(a, op)()(x))  # noqa: E731
        whole = two_hops(adjacency, data.x)[nodes]
        torch.testing.assert_close(two_hops(hood.adjacency, data.x[hood.subset])[hood.positions], whole)


def test_sampled_messages_are_unbiased():
    """The degree / sampled scaling makes a sampled Â h (and the neighbour mean) an unbiased
    estimate of the full one at the batch nodes: the average of 400 draws is within 4 standard
    errors; without the scaling it would be off by d_v / s_v (here ≥ 2)."""
    data = _random_graph(edges=1200)
    adjacency = Adjacency.from_edge_index(data.edge_index, 80)
    nodes = torch.tensor([1, 5, 33])
    generator = torch.Generator().manual_seed(0)
    for op in ("gcn", "mean"):
        exact = getattr(adjacency, op)()(data.x)[nodes]
        draws = []
        for _ in range(400):
            hood = adjacency.sample_neighbourhood(nodes, [3], generator)
            draws.append(getattr(hood.adjacency, op)()(data.x[hood.subset])[hood.positions])
        draws = torch.stack(draws)
        error = (draws.mean(0) - exact).abs()
        assert torch.all(error <= 4 * draws.std(0) / 400**0.5 + 1e-6)


def test_the_default_budget_is_half_the_address_space_limit_when_lower(monkeypatch):
    import defenses.baseline_batching as batching

    full = sum(REDDIT.full_batch().values())
    monkeypatch.setattr(batching, "device_memory", lambda device: 64 * GIB)
    monkeypatch.setattr(batching, "address_space_limit", lambda: None)
    assert _plan().mode == "full"  # 32 GiB of budget
    monkeypatch.setattr(batching, "address_space_limit", lambda: int(1.9 * full))
    capped = _plan()  # a ulimit -v of 1.9 × the full batch: half of it fits a sampled batch only
    assert capped.mode == "sampled" and capped.budget == pytest.approx(0.95 * full)


def test_the_csr_sum_is_gaps_aggregation_with_duplicates_and_self_loops_and_its_gradient():
    from defenses.gap.mechanism import sum_aggregate

    # a duplicate edge (0 → 1 twice), a self loop (2 → 2), and node 3 with no in-edge
    edge_index = torch.tensor([[0, 0, 1, 2, 2, 3, 3], [1, 1, 2, 2, 0, 0, 1]])
    h = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    summed = Adjacency.from_edge_index(edge_index, 4).sum(torch.float64)
    out = summed(h)
    assert torch.allclose(out, sum_aggregate(h.detach(), edge_index, 4))
    dense = torch.zeros(4, 4, dtype=torch.float64).index_put_(
        (edge_index[1], edge_index[0]), torch.ones(7, dtype=torch.float64), accumulate=True
    )
    weights = torch.randn(4, 5, dtype=torch.float64)
    (gradient,) = torch.autograd.grad((out * weights).sum(), h)
    assert torch.allclose(gradient, dense.T @ weights)
