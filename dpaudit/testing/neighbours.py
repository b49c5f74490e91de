"""Neighbouring inputs and the leaf-by-leaf comparison of public files (release neutrality).

A release is neutral when two trainings with the same seed on neighbouring inputs — G and
G minus one edge (edge level), or G and G minus one node with its edges (node level) — write
public files that agree on every leaf except the weights (the accounted mechanism's output)
and their hash. The declared public facts are constants of the run, so the neighbour keeps
them (:mod:`dpaudit.release`); everything derived from the data (the class count and label
mapping, the mask, the fingerprint) is rebuilt from the neighbour's own raw data by the same
preparation (:func:`dpaudit.data.datasets.prepare` with the same declared facts), never copied from
the base graph — a derived field copied over would hide a leak of private data into it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from dpaudit.data.datasets import GraphDataset, prepare
from dpaudit.data.splits import Split
from dpaudit.release import PUBLIC_FILES

#: leaves of model.json that are a function of the released weights themselves
WEIGHT_LEAVES = ("weights_sha256",)


def raw_graph(dataset: GraphDataset) -> Data:
    """``dataset``'s raw graph: features, edges, the public split and every label as its declared
    value (class ``i`` → ``public_facts["classes"][i]``; -1 unlabeled), what a loader hands
    :func:`dpaudit.data.datasets.prepare`.

    Args:
        dataset: a prepared dataset with a declared label domain.

    Returns:
        The raw PyG ``Data``.

    Raises:
        ValueError: the dataset declares no label domain.
    """
    declared = dataset.public_facts.get("classes")
    if declared is None:
        raise ValueError(f"{dataset.name}: no declared label domain (public_facts['classes']) to rebuild a neighbour")
    data = dataset.data
    values = torch.tensor(declared, dtype=torch.long)
    y = torch.where(data.label_mask, values[data.y.clamp(min=0)], torch.full_like(data.y, -1))
    raw = Data(x=data.x, y=y, edge_index=data.edge_index, num_nodes=data.num_nodes)
    if dataset.has_public_split:
        raw.public_split = data.public_split
    return raw


def _dataset(base: GraphDataset, raw: Data) -> GraphDataset:
    """The neighbour: ``raw`` prepared as the base graph was, from the same declared facts (the
    label domain, the declared class counts); the declaration itself is kept as a constant."""
    facts = base.public_facts
    rebuilt = prepare(
        raw, base.name, info=dict(base.info), classes=facts["classes"], class_counts=facts.get("class_counts")
    )
    assert rebuilt.public_facts["classes"] == facts["classes"], "the same declaration, the same domain"
    rebuilt.public_facts = dict(facts)
    return rebuilt


def without_edge(
    dataset: GraphDataset, split: Split, index: int = 0, parts: tuple[str, str] = ("train", "train")
) -> GraphDataset:
    """``dataset`` minus one undirected edge between two training nodes (the ``index``-th such
    edge in canonical order), so the removal reaches every edge-reading phase; ``parts`` picks
    edges between other parts of the split instead (e.g. ``("val", "train")``, either direction).

    Args:
        dataset: the graph.
        split: its split (which nodes are training nodes).
        index: which such edge to remove, in canonical order.
        parts: the split parts (``train``, ``val``, ``test``) of the edge's two endpoints.

    Returns:
        The neighbouring dataset.
    """
    row, col = dataset.data.edge_index
    first, second = (torch.zeros(dataset.num_nodes, dtype=torch.bool) for _ in parts)
    first[getattr(split, parts[0])] = True
    second[getattr(split, parts[1])] = True
    between = (first[row] & second[col]) | (second[row] & first[col])
    candidates = ((row < col) & between).nonzero().view(-1)
    u, v = int(row[candidates[index]]), int(col[candidates[index]])
    keep = ~(((row == u) & (col == v)) | ((row == v) & (col == u)))
    raw = raw_graph(dataset)
    raw.edge_index = dataset.data.edge_index[:, keep]
    return _dataset(dataset, raw)


def without_node(dataset: GraphDataset, split: Split, node: int | None = None) -> tuple[GraphDataset, Split]:
    """``dataset`` minus one training node and all its edges (indices relabelled), and the split
    without it; the split's declared sizes are kept. Default: the highest-degree training node,
    the removal that changes the most.

    Args:
        dataset: the graph.
        split: its split.
        node: the training node to remove; ``None``: the highest-degree one.

    Returns:
        ``(dataset, split)`` of the neighbour.
    """
    if node is None:
        degree = torch.bincount(dataset.data.edge_index[0], minlength=dataset.num_nodes)
        node = int(split.train[degree[split.train].argmax()])
    keep = torch.ones(dataset.num_nodes, dtype=torch.bool)
    keep[node] = False
    kept = keep.nonzero().view(-1)
    edge_index, _ = subgraph(kept, dataset.data.edge_index, relabel_nodes=True, num_nodes=dataset.num_nodes)
    full = raw_graph(dataset)
    raw = Data(x=full.x[kept], y=full.y[kept], edge_index=edge_index, num_nodes=kept.numel())
    if dataset.has_public_split:
        raw.public_split = full.public_split[kept]
    new_index = torch.full((dataset.num_nodes,), -1, dtype=torch.long)
    new_index[kept] = torch.arange(kept.numel())

    def remap(part: torch.Tensor) -> torch.Tensor:
        part = part[part != node]
        return new_index[part]

    node_part = split.node_part[kept] if split.node_part is not None else None
    smaller = dataclasses.replace(
        split,
        train=remap(split.train),
        val=remap(split.val),
        test=remap(split.test),
        node_part=node_part,
        info=dict(split.info),
    )
    return _dataset(dataset, raw), smaller


def public_leaves(directory: str | Path) -> dict[str, Any]:
    """Every leaf of ``model.json`` by path, except the weights' own hash.

    Args:
        directory: a saved model's folder.

    Returns:
        Dotted path → value of every leaf.
    """
    meta = json.loads((Path(directory) / "model.json").read_text())
    for key in WEIGHT_LEAVES:
        meta.pop(key, None)
    out: dict[str, Any] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]")
        else:
            out[path] = value

    walk(meta, "")
    return out


def public_files(directory: str | Path) -> set[str]:
    """The names of the public files present in a saved model's folder.

    Args:
        directory: the folder.

    Returns:
        The file names.
    """
    return {p.name for p in Path(directory).iterdir() if p.name in PUBLIC_FILES}


def leaf_differences(a: str | Path, b: str | Path) -> dict[str, tuple[Any, Any]]:
    """``{path: (value in a, value in b)}`` for every public leaf that differs.

    Args:
        a: a saved model's folder.
        b: another's.

    Returns:
        The differing leaves (``"<absent>"`` where a side lacks one).
    """
    la, lb = public_leaves(a), public_leaves(b)
    return {
        k: (la.get(k, "<absent>"), lb.get(k, "<absent>")) for k in sorted(set(la) | set(lb)) if la.get(k) != lb.get(k)
    }


def train_and_compare(
    make_defense, first: tuple[GraphDataset, Split], second: tuple[GraphDataset, Split], tmp_path: Path
) -> dict[str, tuple[Any, Any]]:
    """Fit ``make_defense()`` (same seed) on both inputs, save both, return the public leaves
    that differ (empty for a neutral release).

    Args:
        make_defense: returns a fresh defense with a fixed seed.
        first: ``(dataset, split)`` of one input.
        second: ``(dataset, split)`` of its neighbour.
        tmp_path: where both models are saved.

    Returns:
        The differing public leaves.
    """
    dirs = []
    for i, (dataset, split) in enumerate((first, second)):
        model = make_defense().fit(dataset, split)
        directory = model.save(tmp_path / f"neighbour-{i}")
        dirs.append(directory)
    return leaf_differences(*dirs)
