"""``gcn`` and ``sage`` at scale: fit CPU time and peak RSS, and the CPU time of one
``predict_proba`` on 64 nodes, on csbm graphs (average degree 20, 128 features), one thread.

python benchmarks/bench_gcn_scale.py                       # 5 k / 20 k / 80 k nodes, gcn
python benchmarks/bench_gcn_scale.py --sizes 5000 --defenses gcn sage --epochs 20

Each (defense, size) runs in its own child process, so the peak RSS is that run's own (graph
generation included). The query time is the median CPU time of ``--queries`` calls, each on a
fresh draw of 64 nodes (one warm-up call first, so a per-graph cache is built once, as an audit
would). ``--baseline-root DIR`` runs every configuration a second time, interleaved, with the
dpaudit of another checkout (e.g. ``git archive HEAD | tar -x -C DIR``): the two code versions
side by side in one run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import torch
from _harness import add_smoke_argument, markdown_table, measure, start_smoke, write_result


def run(root: str | None, defense: str, num_nodes: int, features: int, epochs: int, queries: int) -> dict:
    if root is not None:  # a child process: import the other checkout's dpaudit and defenses
        sys.path.insert(0, root)
    from dpaudit.data.datasets import csbm
    from dpaudit.data.splits import make_split
    from dpaudit.training.registry import get_defense

    torch.set_num_threads(1)
    dataset = csbm(num_nodes=num_nodes, avg_degree=20, num_features=features)
    split = make_split(dataset, "random:0.5,0.25,0.25", 0)
    start = time.process_time()
    model = get_defense(defense)(seed=0, epochs=epochs).fit(dataset, split)
    fit_cpu = time.process_time() - start
    generator = torch.Generator().manual_seed(1)
    model.predict_proba(dataset.data, torch.randperm(num_nodes, generator=generator)[:64])
    times = []
    for _ in range(queries):
        nodes = torch.randperm(num_nodes, generator=generator)[:64]
        start = time.process_time()
        model.predict_proba(dataset.data, nodes)
        times.append(time.process_time() - start)
    return {"fit_cpu_s": fit_cpu, "query_ms": statistics.median(times) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000, 80_000])
    parser.add_argument("--defenses", nargs="+", default=["gcn"])
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--queries", type=int, default=7)
    parser.add_argument("--baseline-root", help="another checkout to compare with, run side by side")
    parser.add_argument("--out", default="gcn_scale")
    add_smoke_argument(parser, "one graph of 300 nodes, 2 epochs, one query")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
        args.sizes, args.epochs, args.queries, args.features = [300], 2, 1, 16
    versions = [("this checkout", None)] + ([("baseline", args.baseline_root)] if args.baseline_root else [])
    rows = []
    for defense in args.defenses:
        for n in args.sizes:
            for label, root in reversed(versions):
                value, _, peak = measure(run, root, defense, n, args.features, args.epochs, args.queries)
                rows.append(
                    {
                        "code": label,
                        "defense": defense,
                        "nodes": f"{n:,}",
                        f"fit CPU s ({args.epochs} epochs)": f"{value['fit_cpu_s']:.2f}",
                        "peak RSS MiB": f"{peak:.0f}",
                        "predict_proba(64 nodes) CPU ms": f"{value['query_ms']:.2f}",
                    }
                )
                print(rows[-1], flush=True)
    header = (
        f"# gcn / sage at scale\n\ncsbm, average degree 20, {args.features} features, one thread, "
        f"{platform.processor() or platform.machine()}; command: "
        f"`python benchmarks/bench_gcn_scale.py --sizes {' '.join(map(str, args.sizes))} "
        f"--defenses {' '.join(args.defenses)} --epochs {args.epochs}"
        f"{' --baseline-root DIR' if args.baseline_root else ''}`"
        + (f" (baseline: {args.baseline_root})" if args.baseline_root else "")
    )
    path = write_result(args.out, header, markdown_table(rows, list(rows[0])))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
