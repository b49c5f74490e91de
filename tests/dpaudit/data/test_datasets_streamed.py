"""The large real graphs' loaders (reddit, ogbn-arxiv) on small generated files in the same
raw layouts, against the PyG / plain-NumPy reading they replace; the edge preprocessing every
loader shares against PyG's utilities; csbm's blockwise features against the one-shot draw."""

from __future__ import annotations

import gzip
import os
import shutil
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from dpaudit.data.datasets import csbm, load_dataset, undirected_edges
from dpaudit.errors import DatasetError


def _pyg_undirected(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """What prepare did before: PyG's utilities, in int64."""
    edge_index, _ = remove_self_loops(edge_index.long())
    return coalesce(to_undirected(edge_index, num_nodes=n), num_nodes=n)


def _random_edges(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    row = rng.integers(0, n, m).astype(np.int32)
    col = rng.integers(0, n, m).astype(np.int32)
    row[:7], col[:7] = col[7:14], row[7:14]  # reversed duplicates
    col[20:25] = row[20:25]  # self loops
    return row, col


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
def test_undirected_edges_match_pyg(dtype):
    n = 300
    row, col = _random_edges(n, 5000, 0)
    row, col = row.astype(dtype), col.astype(dtype)
    ours = undirected_edges(row, col, n)
    reference = _pyg_undirected(torch.from_numpy(np.stack([row, col]).astype(np.int64)), n)
    assert ours.dtype == torch.long and torch.equal(ours, reference)
    assert undirected_edges(np.zeros(0, np.int32), np.zeros(0, np.int32), 5).shape == (2, 0)
    assert undirected_edges(np.array([2, 2]), np.array([2, 2]), 5).shape == (2, 0)  # self loops only


def test_csbm_features_drawn_in_blocks_equal_one_draw():
    """Several row blocks (1,000 features: 4,194 rows per block): the same stream, the same sums."""
    n, classes, features, seed, signal = 10_000, 4, 1000, 5, 0.6
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % classes)
    means = rng.normal(size=(classes, features))
    means *= signal / np.sqrt((means**2).mean(axis=1, keepdims=True))
    expected = torch.tensor(means[y] + rng.normal(size=(n, features)), dtype=torch.float32)
    graph = csbm(num_nodes=n, num_classes=classes, num_features=features, seed=seed, feature_signal=signal)
    assert torch.equal(graph.data.x, expected)


def _write_reddit(folder, n=400, features=602, m=6000, layout="coo", compressed=False):
    """PyG's raw layout: the adjacency as SciPy writes a COO matrix (``row``, ``col``)."""
    raw = folder / "Reddit" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = rng.integers(0, 5, n)
    np.savez(raw / "reddit_data.npz", feature=x, label=y, node_types=rng.integers(1, 4, n), node_ids=np.arange(n))
    row, col = _random_edges(n, m, 2)
    adjacency = sp.coo_matrix((np.ones(m, dtype=np.float32), (row, col)), shape=(n, n))
    if layout == "csr":
        adjacency = adjacency.tocsr()
    sp.save_npz(raw / "reddit_graph.npz", adjacency, compressed=compressed)
    return x, y


@pytest.mark.parametrize("compressed", [False, True])
def test_reddit_reads_the_raw_layout_like_pyg(tmp_path, monkeypatch, compressed):
    from torch_geometric.datasets import Reddit

    x, y = _write_reddit(tmp_path, compressed=compressed)
    cache = tmp_path / "cache"
    monkeypatch.setenv("DPAUDIT_CACHE", str(cache))
    graph = load_dataset("reddit", root=tmp_path)
    assert not cache.exists(), "no processed copy is written: the raw files are read as they are"

    pyg_root = tmp_path / "pyg"
    shutil.copytree(tmp_path / "Reddit", pyg_root / "Reddit")
    pyg = Reddit(str(pyg_root / "Reddit"))[0]
    assert torch.equal(graph.data.x, pyg.x) and torch.equal(graph.data.x, torch.from_numpy(x))
    assert torch.equal(graph.data.y, pyg.y) and torch.equal(graph.data.y, torch.from_numpy(y))
    assert torch.equal(graph.data.edge_index, _pyg_undirected(pyg.edge_index, pyg.num_nodes))
    assert graph.public_facts["published"] and not graph.has_public_split  # as PyG's Reddit: no split


def _write_gz(path, rows, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as handle:
        for row in rows:
            handle.write(",".join(fmt % v for v in np.atleast_1d(row)) + "\n")


def _write_arxiv(folder, n=300, features=16, m=2000):
    base = folder / "ogbn_arxiv"
    rng = np.random.default_rng(3)
    row, col = _random_edges(n, m, 4)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = rng.integers(0, 6, n)
    order = rng.permutation(n)
    parts = {"train": np.sort(order[:150]), "valid": np.sort(order[150:200]), "test": np.sort(order[200:280])}
    _write_gz(base / "raw" / "edge.csv.gz", np.stack([row, col], 1), "%d")
    _write_gz(base / "raw" / "node-feat.csv.gz", x, "%.9g")
    _write_gz(base / "raw" / "node-label.csv.gz", y, "%d")
    _write_gz(base / "raw" / "num-node-list.csv.gz", [n], "%d")
    _write_gz(base / "raw" / "num-edge-list.csv.gz", [m], "%d")
    for name, nodes in parts.items():
        _write_gz(base / "split" / "time" / f"{name}.csv.gz", nodes, "%d")
    return x, y, row, col, parts


def test_ogbn_arxiv_reads_the_raw_layout_without_ogb(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ogb", None)  # as without the optional package
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)
    x, y, row, col, parts = _write_arxiv(tmp_path)
    graph = load_dataset("ogbn-arxiv", root=tmp_path)
    n = len(y)
    assert torch.equal(graph.data.x, torch.from_numpy(x))  # %.9g round-trips float32 exactly
    assert torch.equal(graph.data.y, torch.from_numpy(y))
    expected = _pyg_undirected(torch.from_numpy(np.stack([row, col]).astype(np.int64)), n)
    assert torch.equal(graph.data.edge_index, expected)
    for code, nodes in enumerate(parts.values()):
        assert torch.equal((graph.data.public_split == code).nonzero().view(-1), torch.from_numpy(nodes))
    assert int((graph.data.public_split == -1).sum()) == n - 280


def test_ogbn_arxiv_count_mismatch_is_one_clear_error(tmp_path):
    _write_arxiv(tmp_path)
    _write_gz(tmp_path / "ogbn_arxiv" / "raw" / "num-edge-list.csv.gz", [1999], "%d")
    with pytest.raises(DatasetError, match="more than the 1999 lines"):
        load_dataset("ogbn-arxiv", root=tmp_path)


def test_reddit_unreadable_files_are_one_clear_error(tmp_path):
    _write_reddit(tmp_path, layout="csr")  # not PyG's layout
    with pytest.raises(DatasetError, match="'csr' matrix; PyG's layout is coo"):
        load_dataset("reddit", root=tmp_path)
    (tmp_path / "Reddit" / "raw" / "reddit_graph.npz").write_bytes(b"not a zip file")
    with pytest.raises(DatasetError, match="could not read .*reddit_graph.npz"):
        load_dataset("reddit", root=tmp_path)


@pytest.mark.parametrize("name", ["reddit", "ogbn-arxiv"])
def test_a_graph_too_large_for_the_machine_is_refused_before_reading(tmp_path, monkeypatch, name):
    import dpaudit.data.datasets.preprocessing
    import dpaudit.data.datasets.streamed
    import dpaudit.runtime

    if name == "reddit":
        _write_reddit(tmp_path)  # 400 × 602 float32 features: 0.96 MB
    else:
        _write_arxiv(tmp_path)
    monkeypatch.setattr(dpaudit.runtime, "device_memory", lambda device: 100_000)  # a 100 kB machine
    monkeypatch.setattr(dpaudit.data.datasets.preprocessing, "undirected_edges", None)  # never reached
    monkeypatch.setattr(dpaudit.data.datasets.streamed, "_raw_graph", None)  # nor are the arrays assembled
    with pytest.raises(DatasetError, match=rf"{name}: loading needs about .* GiB .*this machine has"):
        load_dataset(name, root=tmp_path)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads peak memory from /proc")
def test_reddit_loader_peak_memory_is_a_few_bytes_per_edge(tmp_path):
    """On a generated Reddit with many edges per node, the load's peak memory above the
    interpreter stays within what the design allows. Measured for 3.2 M stored (directed)
    edges: 40 bytes per stored edge (the int64 result is 16 of them), against 124 through PyG's
    processing pass and utilities (int64 copies of both directions, coalesce's keys and sort)."""
    import subprocess

    n, m = 3000, 2_000_000
    raw = tmp_path / "Reddit" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(raw / "reddit_data.npz", feature=np.zeros((n, 8), np.float32), label=rng.integers(0, 3, n))
    row = rng.integers(0, n, m).astype(np.int32)
    col = rng.integers(0, n, m).astype(np.int32)
    adjacency = sp.coo_matrix((np.ones(m, np.float32), (row, col)), shape=(n, n))
    sp.save_npz(raw / "reddit_graph.npz", adjacency, compressed=False)
    script = (
        "import resource, sys, torch, dpaudit.data.datasets as d\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "g = d.load_dataset('reddit', root=sys.argv[1])\n"
        "print(g.data.edge_index.size(1), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    stored, peak = (int(v) for v in out.stdout.split())
    assert stored > 3_000_000  # most of the 2 M random pairs are distinct: ~4 M directed entries
    assert peak < 60 * stored, f"{peak / 2**20:.0f} MiB for {stored} stored edges"


def test_fingerprint_hashes_the_same_bytes_as_before(small_graph):
    """Fingerprints are compared with the owner's record of every saved model: hashing the
    tensors' buffers in place must give what hashing copies of their bytes gave."""
    import hashlib

    from dpaudit.data.datasets import fingerprint

    h = hashlib.sha256()
    for t in (small_graph.data.x, small_graph.data.y, small_graph.data.edge_index):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy().tobytes())
    assert fingerprint(small_graph.data) == small_graph.fingerprint == h.hexdigest()[:16]
