"""Does the edge-addition degree projection bound GAP's node-level aggregation? (issue 24 item 3)

The θ-projection of Day, Li & Lyu (SIGMOD 2016, "Publishing graph degree distribution with node
differential privacy") keeps an undirected edge iff, in a fixed public order, both endpoint
degrees are still below θ = D. Its stability lemma bounds the projected degree *sequence* under
adding or removing a node; GAP's PMA aggregates over the kept *edges*. This script measures
what removing one node does to the kept edges and to the per-hop aggregation
:math:`A_\\pi^\\top X` (X: unit rows), against √(D(D+1)) — the change when nothing but the
node's own edges moves (its D rows plus its own row):

* a path whose edge order follows the path, D = 1 (the worst case: every kept edge flips and
  the change grows like √(2L) with the path length L, so no constant bounds it);
* real graphs (cora_ml, johnshopkins55:year): the highest-degree nodes and random ones;
* the other route, naive truncation T_D (drop every edge of a node whose degree exceeds D)
  released through propose-test-release or smooth sensitivity (Kasiviswanathan, Nissim,
  Raskhodnikova & Smith, TCC 2013): removing a node z re-admits each neighbour whose degree
  crosses D, so the local sensitivity at distance k grows with the number of z's neighbours whose
  degree lies within k of D. The second table counts them (max over z), with the share of edges
  T_D drops: PTR at ε₀ needs k ≈ ln(1/δ)/ε₀ (23 for ε₀ = 0.5, δ = 1e-5).

Run::

    DPAUDIT_DATA=/work/shared/datasets nice .venv/bin/python benchmarks/gap_projection_check.py

writes ``benchmarks/results/gap_projection.md``. The conclusion is in ``defenses/gap/__init__.py``
("Why not a local degree projection"): no local rule is stable, so sound gap-ndp's default is the
global maximum-entropy projection of ``defenses/gap/projection.py`` (measured by
``benchmarks/bench_degree_projection.py``), and ``degree_bound=promise`` keeps the promise.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _harness import add_smoke_argument, results_dir, start_smoke  # noqa: E402

import defenses  # noqa: E402,F401  (registers the datasets' defenses)
from dpaudit.data.datasets import load_dataset  # noqa: E402
from dpaudit.runtime import atomic_write_text  # noqa: E402

log = logging.getLogger("gap_projection_check")


def edge_addition(edges: np.ndarray, num_nodes: int, max_degree: int, order: np.ndarray) -> np.ndarray:
    """Day et al.'s θ-projection: which of the undirected ``edges`` [E, 2] are kept when they are
    added in ``order`` while both endpoint degrees are < ``max_degree`` (sequential by definition)."""
    degree = np.zeros(num_nodes, dtype=np.int64)
    keep = np.zeros(len(edges), dtype=bool)
    for i in order:
        a, b = edges[i]
        if a != b and degree[a] < max_degree and degree[b] < max_degree:
            degree[a] += 1
            degree[b] += 1
            keep[i] = True
    return keep


def aggregate(edges: np.ndarray, keep: np.ndarray, x: np.ndarray) -> np.ndarray:
    """SUM aggregation over the kept undirected edges (both directions): [N, d]."""
    out = np.zeros_like(x)
    kept = edges[keep]
    np.add.at(out, kept[:, 1], x[kept[:, 0]])
    np.add.at(out, kept[:, 0], x[kept[:, 1]])
    return out


def removal(edges, num_nodes, max_degree, priority, x, node):
    """(kept edges of ``node``, kept edges elsewhere that flip, ‖Δ A_π^T X‖_F) when ``node`` is removed."""
    base = edge_addition(edges, num_nodes, max_degree, np.argsort(priority))
    others = (edges[:, 0] != node) & (edges[:, 1] != node)
    after = edge_addition(edges[others], num_nodes, max_degree, np.argsort(priority[others]))
    change = np.linalg.norm(aggregate(edges[others], after, x) - aggregate(edges, base, x))
    return int(base[~others].sum()), int((base[others] != after).sum()), float(change)


def path_rows(lengths: list[int]) -> list[str]:
    rows = []
    for length in lengths:
        hub = length + 1  # node v, joined to a₀ by the first edge of the order
        edges = np.array([[hub, 0]] + [[i, i + 1] for i in range(length)])
        x = np.eye(3)[np.arange(length + 2) % 3]  # unit rows, neighbours orthogonal
        kept_v, flips, change = removal(edges, length + 2, 1, np.arange(len(edges), dtype=float), x, hub)
        rows.append(
            f"| path, L = {length} | 1 | v (degree 1) | {kept_v} | {flips} | {change:.2f} | "
            f"{math.sqrt(2):.2f} | {change / math.sqrt(2):.2f} |"
        )
    return rows


def graph_rows(name: str, max_degree: int, data_root: str | None, top: int, random_nodes: int) -> list[str]:
    dataset = load_dataset(name, root=data_root)
    pairs = np.sort(dataset.data.edge_index.numpy().T, axis=1)
    edges = np.unique(pairs[pairs[:, 0] != pairs[:, 1]], axis=0)
    n = dataset.num_nodes
    rng = np.random.default_rng(0)
    priority = rng.random(len(edges))  # the fixed public order
    x = rng.normal(size=(n, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    degree = np.bincount(edges.ravel(), minlength=n)
    nodes = [int(v) for v in np.argsort(-degree)[:top]] + [int(v) for v in rng.choice(n, random_nodes, replace=False)]
    bound = math.sqrt(max_degree * (max_degree + 1))
    rows = []
    for node in nodes:
        kept_v, flips, change = removal(edges, n, max_degree, priority, x, node)
        log.info("%s D=%d node %d (degree %d): %d flips, ‖Δ‖ %.2f", name, max_degree, node, degree[node], flips, change)
        rows.append(
            f"| {name} | {max_degree} | {node} (degree {degree[node]}) | {kept_v} | {flips} | "
            f"{change:.2f} | {bound:.2f} | {change / bound:.3f} |"
        )
    return rows


def truncation_rows(name: str, data_root: str | None, degrees: tuple[int, ...], widths: tuple[int, ...]) -> list[str]:
    """Per D and k: nodes whose degree lies in [D − k, D + 1 + k], the most of them around one
    node (what one removal can re-admit at distance k), and the edges naive truncation drops."""
    dataset = load_dataset(name, root=data_root)
    pairs = np.sort(dataset.data.edge_index.numpy().T, axis=1)
    edges = np.unique(pairs[pairs[:, 0] != pairs[:, 1]], axis=0)
    n = dataset.num_nodes
    degree = np.bincount(edges.ravel(), minlength=n)
    rows = []
    for max_degree in degrees:
        dropped = ((degree[edges[:, 0]] > max_degree) | (degree[edges[:, 1]] > max_degree)).mean()
        for width in widths:
            band = ((degree >= max_degree - width) & (degree <= max_degree + 1 + width)).astype(np.int64)
            around = np.bincount(edges[:, 0], weights=band[edges[:, 1]], minlength=n)
            around += np.bincount(edges[:, 1], weights=band[edges[:, 0]], minlength=n)
            rows.append(
                f"| {name} | {max_degree} | {width} | {int(band.sum())} | {int(around.max())} | {dropped:.1%} |"
            )
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-root", default=os.environ.get("DPAUDIT_DATA"))
    p.add_argument("--top", type=int, default=5, help="highest-degree nodes removed per graph")
    p.add_argument("--random", type=int, default=5, help="random nodes removed per graph")
    p.add_argument("--out", default=None, help="default: benchmarks/results/gap_projection.md")
    add_smoke_argument(p, "a path of length 10, csbm (generated, 1000 nodes) at D = 10, one top and one random node")
    args = p.parse_args(argv)
    if args.smoke:
        start_smoke()
    out = args.out or str(results_dir() / "gap_projection.md")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.smoke:
        rows = path_rows([10]) + graph_rows("csbm", 10, None, 1, 1)
        band_rows = truncation_rows("csbm", None, (10,), (0, 5))
    else:
        rows = path_rows([10, 100, 1000])
        for name, max_degree in (("cora_ml", 10), ("cora_ml", 100), ("johnshopkins55:year", 100)):
            rows += graph_rows(name, max_degree, args.data_root, args.top, args.random)
        band_rows = truncation_rows("johnshopkins55:year", args.data_root, (50, 100, 200), (0, 5, 23))
        band_rows += truncation_rows("cora_ml", args.data_root, (10, 20), (0, 5, 23))
    text = "\n".join(
        [
            "# Edge-addition degree projection vs GAP's node-level aggregation",
            "",
            "Written by `benchmarks/gap_projection_check.py` (see its docstring). Removing one node v; "
            "`flips` = kept edges NOT incident to v that change (the cascade); ‖Δ‖ = ‖Δ A_π^T X‖_F per hop "
            "(real graphs: X = 16 random unit rows, not the worst case); √(D(D+1)) = the change with no cascade.",
            "",
            "| graph | D | removed node | its kept edges | flips | ‖Δ‖ | √(D(D+1)) | ratio |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "The path rows grow like √(2L): no constant bounds the per-hop change, so the projection gives "
            "no node-level sensitivity for GAP (its lemma bounds the degree sequence, which the cascade leaves "
            "unchanged). Real graphs show cascades too (tens of flipped edges on johnshopkins55).",
            "",
            "## Naive truncation under propose-test-release",
            "",
            "`band`: nodes with degree in [D − k, D + 1 + k]; `most around one node`: the largest number of them "
            "adjacent to a single node — each can be re-admitted (≤ D edges back) by removing that node at "
            "distance k, so a PTR bound on the aggregation's local sensitivity must cover that many; "
            "`edges dropped`: the share of edges T_D removes at k = 0.",
            "",
            "| graph | D | k | band | most around one node | edges dropped |",
            "|---|---|---|---|---|---|",
            *band_rows,
            "",
            "On johnshopkins55 (median degree 54) a test at k = 23 must admit a local sensitivity covering "
            "≈ 240 re-admitted nodes at D = 100 while T_100 already drops most edges; D = 886 (no truncation) "
            "is what the promise costs today. Neither route gives sound node-level GAP a usable noise scale there.",
            "",
        ]
    )
    atomic_write_text(out, text)
    print(text)


if __name__ == "__main__":
    main()
