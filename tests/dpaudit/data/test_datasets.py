"""Datasets: real loaders from ../shared/datasets, the synthetic default, preprocessing, errors."""

from __future__ import annotations

import os

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import is_undirected

from dpaudit.data.datasets import GraphDataset, csbm, describe_availability, from_data, load_dataset
from dpaudit.errors import DatasetError

# (name, nodes, undirected edges after deduplication, features, classes, labeled nodes)
REAL = [
    ("cora", 2708, 5278, 1433, 7, 2708),
    ("cora_ml", 2995, 8158, 2879, 7, 2995),
    ("actor", 7600, 26659, 932, 5, 7600),
    ("cornell", 183, 277, 1703, 5, 183),
    ("texas", 183, 279, 1703, 5, 183),
    ("wisconsin", 251, 450, 1703, 5, 251),
    ("reed98", 962, 18812, 745, 2, 865),
    ("johnshopkins55", 5180, 186586, 2406, 2, 4762),
]


def _check_invariants(ds: GraphDataset):
    d = ds.data
    ei = d.edge_index
    assert is_undirected(ei, num_nodes=ds.num_nodes)
    assert not (ei[0] == ei[1]).any(), "self loops survived"
    keys = ei[0] * ds.num_nodes + ei[1]
    assert keys.unique().numel() == keys.numel(), "duplicate edges survived"
    assert torch.isfinite(d.x).all() and d.x.dtype == torch.float32
    assert (d.y[d.label_mask] >= 0).all() and (d.y[~d.label_mask] == -1).all()
    assert int(d.y.max()) == ds.num_classes - 1


@pytest.mark.parametrize("name,nodes,edges,features,classes,labeled", REAL)
def test_real_datasets_load_offline(load_real, name, nodes, edges, features, classes, labeled):
    ds = load_real(name)
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (nodes, edges, features, classes)
    assert int(ds.data.label_mask.sum()) == labeled
    _check_invariants(ds)


def test_public_splits_and_source_untouched(load_real, data_root):
    cora = load_real("cora")
    counts = torch.bincount(cora.data.public_split[cora.data.public_split >= 0])
    assert counts.tolist() == [140, 500, 1000]
    assert not (data_root / "Cora" / "processed").exists(), "the data root must only be read"
    assert sorted(os.listdir(data_root / "Cora")) == ["geom-gcn", "raw"]


def test_loading_is_deterministic(load_real, data_root):
    again = load_dataset("cora", root=data_root)
    assert again.fingerprint == load_real("cora").fingerprint


def test_cornell5_loads(load_real):
    ds = load_real("cornell5")
    assert ds.num_nodes == 18660 and ds.num_edges == 1581554 // 2 and int(ds.data.label_mask.sum()) == 16822


def test_missing_dataset_names_files_and_folder(tmp_path):
    with pytest.raises(DatasetError) as err:
        load_dataset("pubmed", root=tmp_path)
    message = str(err.value)
    assert "ind.pubmed.x" in message and str(tmp_path / "PubMed" / "raw") in message


def test_unknown_dataset():
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset("no-such-graph")


def test_data_root_from_environment(monkeypatch, data_root):
    monkeypatch.setenv("DPAUDIT_DATA", str(data_root))
    assert load_dataset("texas").num_nodes == 183
    rows = {r["name"]: r for r in describe_availability()}
    assert rows["texas"]["available"] and not rows["pubmed"]["available"]


def test_csbm_is_seeded_and_homophilous():
    a = csbm(num_nodes=500, num_classes=5, homophily=0.9, seed=3)
    b = csbm(num_nodes=500, num_classes=5, homophily=0.9, seed=3)
    c = csbm(num_nodes=500, num_classes=5, homophily=0.9, seed=4)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    _check_invariants(a)
    src, dst = a.data.edge_index
    homophily = (a.data.y[src] == a.data.y[dst]).float().mean().item()
    assert 0.85 < homophily < 0.95
    assert 7.0 < a.data.edge_index.size(1) / 500 < 8.5  # average degree ≈ 8 after deduplication
    low = csbm(num_nodes=500, num_classes=5, homophily=0.1, seed=3)
    s, d = low.data.edge_index
    assert (low.data.y[s] == low.data.y[d]).float().mean().item() < 0.15


def test_preprocessing_cleans_edges_and_masks_unlabeled():
    data = Data(
        x=torch.randn(4, 3),
        y=torch.tensor([0, 1, -1, 1]),
        edge_index=torch.tensor([[0, 0, 1, 2, 2], [1, 1, 0, 2, 3]]),
    )
    ds = from_data(data, "toy", classes=2)
    assert ds.data.edge_index.tolist() == [[0, 1, 2, 3], [1, 0, 3, 2]]
    assert ds.data.label_mask.tolist() == [True, True, False, True]
    assert ds.num_classes == 2


def test_min_class_size_drops_rare_classes():
    y = torch.tensor([0] * 10 + [1] * 3 + [2] * 10)
    data = Data(x=torch.randn(23, 2), y=y, edge_index=torch.tensor([[0, 12], [12, 22]]))
    # a published graph (public_facts=True): its per-class counts are public, the threshold reads them
    ds = from_data(data, "toy", public_facts=True, min_class_size=5)
    assert ds.num_classes == 2 and int(ds.data.label_mask.sum()) == 20
    assert ds.public_facts["classes"] == [0, 2] and ds.public_facts["class_counts"] == [10, 10]
    removed = from_data(data, "toy", public_facts=True, min_class_size=5, remove_unlabeled=True)
    assert removed.num_nodes == 20 and removed.data.edge_index.numel() == 0
    # undeclared counts: the threshold is refused (it would read the private labels)
    with pytest.raises(DatasetError, match="min_class_size compares declared per-class counts"):
        from_data(data, "toy", classes=3, min_class_size=5)


@pytest.mark.parametrize(
    "data,match",
    [
        (
            Data(
                x=torch.tensor([[0.0, float("nan")]] * 3),
                y=torch.tensor([0, 1, 0]),
                edge_index=torch.zeros(2, 0, dtype=torch.long),
            ),
            "NaN",
        ),
        (
            Data(
                x=torch.zeros(0, 3), y=torch.zeros(0, dtype=torch.long), edge_index=torch.zeros(2, 0, dtype=torch.long)
            ),
            "non-empty",
        ),
        (Data(x=torch.zeros(3, 2), y=torch.tensor([0, 1, 0]), edge_index=torch.tensor([[0], [7]])), "outside"),
        (Data(x=torch.zeros(3, 2), y=torch.tensor([0, 1, 0]), edge_index=torch.tensor([0, 1, 2])), "shape"),
        (
            Data(x=torch.zeros(3, 2), y=torch.tensor([-1, -1, -1]), edge_index=torch.zeros(2, 0, dtype=torch.long)),
            "no labeled",
        ),
        (
            Data(x=torch.zeros(3, 2), y=torch.tensor([0, 1]), edge_index=torch.zeros(2, 0, dtype=torch.long)),
            "one label per node",
        ),
        (
            Data(x=torch.zeros(3, 2), y=torch.tensor([0.5, 1, 0]), edge_index=torch.zeros(2, 0, dtype=torch.long)),
            "integers",
        ),
        (
            Data(x=torch.zeros(3, 2), y=torch.tensor([1, 1, 1]), edge_index=torch.zeros(2, 0, dtype=torch.long)),
            "2 classes",
        ),
    ],
)
def test_bad_graphs_get_clear_errors(data, match):
    with pytest.raises(DatasetError, match=match):
        from_data(data, "bad", public_facts=True)
