"""The maximum-entropy degree projection of sound gap-ndp: what the solver costs as graphs grow,
and how the proven sensitivity compares with measured changes (``defenses/gap/projection.py``).

Three tables:

1. **Real graphs** (every dataset in ``DPAUDIT_DATA``, D = 10, 30, 100): sweeps and CPU s to a
   certified duality gap, the share of edge weight kept, and Δ for N̄ = the graph's node count.
2. **Growth** (csbm, average degree 20, D = 10 so that most nodes are above the cap): CPU s and
   sweeps against the number of edges, with the log-log slope (1 = linear).
3. **Measured against proven** (cora_ml, johnshopkins55): remove each of the 20 highest-degree
   nodes, or add a node joined to the 300 highest-degree ones, and report the largest squared
   change of the other rows (in units of D), the largest J/H_v (step 1 of the proof) and the
   largest whole change (aligned features) against Δ; and the worst synthetic family found, a node
   joined to one side of K_{D,D}.
4. **What Δ would have to be** (johnshopkins55:year, ε = 8, 3 seeds, default gap-ndp): test
   accuracy with PMA's per-hop Δ *replaced* by hypothetical values — not private runs (their ε is
   not proven), only the answer to "how tight must a bound be to beat mlp-dp".

Run::

    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/bench_degree_projection.py

writes ``benchmarks/results/degree_projection.md`` (``--quick``: smaller csbm sizes, D = 10 only).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _harness import add_smoke_argument, results_dir, start_smoke, without_node  # noqa: E402

from defenses.gap.projection import (  # noqa: E402
    entropy_projection,
    projection_sensitivity,
    removal_terms,
    simple_pairs,
)
from dpaudit.data.datasets import csbm, load_dataset  # noqa: E402
from dpaudit.errors import DPAuditError  # noqa: E402
from dpaudit.runtime import atomic_write_text  # noqa: E402

log = logging.getLogger("bench_degree_projection")

REAL = ["Cora", "cora_ml", "reed98", "johnshopkins55", "cornell5", "Actor"]
CAPS = [10, 30, 100]


def timed_projection(edge_index: torch.Tensor, num_nodes: int, cap: int, repeats: int = 3):
    """(projection, median CPU s over ``repeats`` solves)."""
    times, projection = [], None
    for _ in range(repeats):
        start = time.process_time()
        projection = entropy_projection(edge_index, num_nodes, cap)
        times.append(time.process_time() - start)
    return projection, sorted(times)[len(times) // 2]


def real_rows(root: str | None, caps: list[int], names: list[str] = REAL) -> list[str]:
    rows = []
    for name in names:
        try:
            dataset = load_dataset(name, root=root)
        except DPAuditError as exc:
            log.warning("%s: %s", name, exc)
            continue
        edge_index, n = dataset.data.edge_index, dataset.num_nodes
        pairs = simple_pairs(edge_index, n)
        degree = torch.bincount(torch.cat([pairs[0], pairs[1]]), minlength=n)
        for cap in caps:
            projection, cpu = timed_projection(edge_index, n, cap)
            kept = float(projection.weight.sum()) / max(1, projection.weight.numel())
            rows.append(
                f"| {name} | {n:,} | {pairs.size(1):,} | {int(degree.max())} | {int((degree > cap).sum()):,} | {cap} | "
                f"{projection.sweeps} | {projection.duality_gap:.2g} | {cpu:.3f} | {kept:.3f} | "
                f"{projection_sensitivity(cap, n):.1f} |"
            )
            log.info(rows[-1])
    return rows


def growth_rows(sizes: list[int], cap: int) -> tuple[list[str], float | None]:
    rows, edges, cpus = [], [], []
    for n in sizes:
        graph = csbm(num_nodes=n, num_classes=4, num_features=8, avg_degree=20, homophily=0.8, seed=0)
        edge_index = graph.data.edge_index
        projection, cpu = timed_projection(edge_index, n, cap)
        m = projection.weight.numel() // 2
        per = cpu / max(1, projection.sweeps) / max(1, m) * 1e9
        rows.append(
            f"| {n:,} | {m:,} | {cap} | {projection.sweeps} | {projection.duality_gap:.2g} | {cpu:.3f} | {per:.1f} |"
        )
        log.info(rows[-1])
        edges.append(m)
        cpus.append(cpu)
    slope = None
    if len(edges) >= 2 and min(cpus) > 0:
        xs, ys = [math.log(e) for e in edges], [math.log(c) for c in cpus]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return rows, slope


def measured_rows(
    root: str | None,
    caps: list[int],
    names: tuple[str, ...] = ("cora_ml", "johnshopkins55"),
    removed: int = 20,
    hubs: int = 300,
) -> list[str]:
    rows = []
    for name in names:
        dataset = load_dataset(name, root=root)
        edge_index, n = dataset.data.edge_index, dataset.num_nodes
        order = torch.argsort(torch.bincount(edge_index[0], minlength=n), descending=True)
        for cap in caps:
            full = entropy_projection(edge_index, n, cap)
            found = []
            for v in order[:removed].tolist():
                found.append(removal_terms(full, entropy_projection(without_node(edge_index, v), n, cap), v, n))
            joined = torch.stack([torch.full_like(order[:hubs], n), order[:hubs]])
            grown = torch.cat([edge_index, joined, joined.flip(0)], dim=1)
            found.append(removal_terms(entropy_projection(grown, n + 1, cap), full, n, n + 1))
            bound = projection_sensitivity(cap, n + 1)
            rows.append(
                f"| {name} | {cap} | {max(f['others'] for f in found) / cap:.3f} | "
                f"{max(f['J'] / max(f['H'], 1e-12) for f in found):.4f} | {max(f['total'] for f in found):.1f} | "
                f"{bound:.1f} | {max(f['total'] for f in found) / bound:.3f} |"
            )
            log.info(rows[-1])
    return rows


def family_rows(caps: list[int]) -> list[str]:
    """v joined to the m nodes of one side of K_{m,k}; the worst (m, k) near D found by hand."""
    rows = []
    for cap in caps:
        worst, at = 0.0, None
        for m in sorted({cap // 2, cap, 2 * cap}):
            for k in sorted({cap, cap + 1, 2 * cap}):
                n = 1 + m + k
                ws, us = torch.arange(1, m + 1), torch.arange(m + 1, n)
                pairs = torch.cartesian_prod(ws, us).T
                pairs = torch.cat([pairs, torch.stack([torch.zeros(m, dtype=torch.long), ws])], dim=1)
                edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
                terms = removal_terms(
                    entropy_projection(edge_index, n, cap),
                    entropy_projection(without_node(edge_index, 0), n, cap),
                    0,
                    n,
                )
                if terms["others"] / cap > worst:
                    worst, at = terms["others"] / cap, (m, k)
        rows.append(f"| {cap} | {at[0]} | {at[1]} | {worst:.3f} |")
        log.info(rows[-1])
    return rows


def hypothetical_rows(
    root: str | None,
    sensitivities: list[float],
    cap: int = 100,
    name: str = "johnshopkins55:year",
    seeds: tuple[int, ...] = (0, 1, 2),
    overrides: dict | None = None,
) -> list[str]:
    """gap-ndp at ε = 8 on ``name`` with Δ overridden (NOT private: a what-if)."""
    import defenses  # noqa: F401  (registers the defenses)
    import defenses.gap.protocols as gap_protocols
    from dpaudit.data.splits import make_split
    from dpaudit.release.model import answering
    from dpaudit.training.registry import get_defense

    dataset = load_dataset(name, root=root)
    proven = projection_sensitivity(cap, dataset.num_nodes)
    real = gap_protocols.projection_sensitivity
    rows = []
    try:
        for sensitivity in [proven, *sensitivities]:
            gap_protocols.projection_sensitivity = lambda *_args, s=sensitivity: s
            accuracies = []
            for seed in seeds:
                split = make_split(dataset, "random:0.75,0.1,0.15", seed)
                defense = get_defense("gap-ndp")(epsilon=8.0, seed=seed, max_degree=cap, **(overrides or {}))
                model = defense.fit(dataset, split)
                graph = split.graph_for(dataset, "test")  # answered as benchmarks/bench_honest.py answers it
                accuracies.append(float(answering(model.interactive_copy(), graph).accuracy(graph, split.test)))
            mean = sum(accuracies) / len(accuracies)
            label = f"{sensitivity:.1f} (proven)" if sensitivity == proven else f"{sensitivity:g}"
            rows.append(f"| {cap} | {label} | {mean:.3f} | {', '.join(f'{a:.3f}' for a in accuracies)} |")
            log.info(rows[-1])
    finally:
        gap_protocols.projection_sensitivity = real
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="csbm up to 20 k nodes, D = 10 only")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/degree_projection.md")
    add_smoke_argument(parser, "generated csbm (1000 nodes) for every table, D = 10, 2 removals, 1 gap-ndp seed")
    args = parser.parse_args(argv)
    if args.smoke:
        start_smoke()
    args.out = args.out or results_dir() / "degree_projection.md"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    root = os.environ.get("DPAUDIT_DATA")
    if args.smoke:
        caps, sizes, real_names, family_caps = [10], [300, 600], ["csbm"], [10]
        measured = {"names": ("csbm",), "removed": 2, "hubs": 30}
        what_if = {"sensitivities": [10], "cap": 10, "name": "csbm", "seeds": (0,)}
        what_if["overrides"] = {"encoder_epochs": 1, "epochs": 1}
    else:
        try:  # tables 3 and 4 need these two: refuse before any work when they are missing
            for name in ("cora_ml", "johnshopkins55:year"):
                load_dataset(name, root=root)
        except DPAuditError as exc:
            print(f"bench_degree_projection: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        caps = [10] if args.quick else CAPS
        sizes = [5_000, 10_000, 20_000] if args.quick else [10_000, 100_000, 1_000_000]
        real_names, family_caps, measured = REAL, [10, 20, 40] if args.quick else [10, 20, 40, 80], {}
        what_if = {"sensitivities": [105, 22.4, 15, 10] if not args.quick else [15, 10]}
    real = real_rows(root, caps, real_names)
    growth, slope = growth_rows(sizes, 10)
    measured = measured_rows(root, caps, **measured)
    family = family_rows(family_caps)
    hypothetical = hypothetical_rows(root, **what_if)
    slope_text = "n/a" if slope is None else f"{slope:.2f}"
    text = f"""# The degree projection of sound gap-ndp: cost and measured sensitivity

Written by `benchmarks/bench_degree_projection.py`{" --smoke" if args.smoke else " --quick" if args.quick else ""} (one torch thread, CPU s =
`time.process_time`, median of 3 solves). The projection and its proof are in
`defenses/gap/projection.py`; the solver stops on a certified duality gap ≤ η = 1e-5·D.

## 1. Real graphs

| graph | nodes | undirected edges | max degree | nodes above D | D | sweeps | certified gap | CPU s | mean weight | Δ (N̄ = nodes) |
|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(real)}

## 2. Growth (csbm, average degree 20, D = 10)

| nodes | undirected edges | D | sweeps | certified gap | CPU s | ns per edge per sweep |
|---|---|---|---|---|---|---|
{chr(10).join(growth)}

Log-log slope of CPU s against edges: {slope_text} (1 is linear; the sweep count also varies).

## 3. Measured against proven

Each row: the 20 highest-degree nodes removed one at a time, and one node added joined to the
300 highest-degree nodes. "other rows / D" is the largest Σ_(u≠v) (row-L1 change)², which bounds
the other rows' move for any unit features; J/H_v is step 1 of the proof; the whole change is for
aligned features (v's own row included), against Δ for N̄ = nodes + 1.

| graph | D | other rows / D | J / H_v | whole change (max) | Δ | change / Δ |
|---|---|---|---|---|---|---|
{chr(10).join(measured)}

The worst synthetic family found: v joined to the m nodes of one side of K_(m,k) (D = cap).

| D | m | k | other rows / D |
|---|---|---|---|
{chr(10).join(family)}

Where the bound is loose: v's own row moves by D when v is saturated (as under the degree
promise); the other rows move by O(D) in squared norm in every case measured, while the bound
charges them D·√(2 ln(N̄/D)) in norm. A proof of the O(D) behaviour would bring Δ to ≈ D.

## 4. What Δ would have to be (not private runs)

gap-ndp defaults at ε = 8 on johnshopkins55:year (`random:0.75,0.1,0.15`, seeds 0–2), test
accuracy answered as `bench_honest.py` answers it, with PMA's per-hop Δ replaced by the value shown (σ is
calibrated as usual, so the noise std is σ·Δ). Only the first row is a private run. mlp-dp
sound scores 0.539 there (`honest.md`), so beating it by 0.03 needs Δ between the last two
hypothetical rows at D = 100 — about √D, the other rows' share alone: even a proof that they move
by O(D) would leave the removed node's own row (D) in Δ, unless a training release that keeps
that row out of the public model were analysed on its own (query answers do output it).

| D | Δ | test accuracy (mean) | per seed |
|---|---|---|---|
{chr(10).join(hypothetical)}
"""
    atomic_write_text(args.out, text)
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
