"""Baselines on a real graph: test accuracy, ε spent, train seconds and peak memory.

python benchmarks/bench_baselines.py                      # cora_ml, 3 seeds
python benchmarks/bench_baselines.py --dataset cora --seeds 5 --data-root ../shared/datasets
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import tempfile
from pathlib import Path

import torch
from _harness import add_smoke_argument, markdown_table, mean_std, measure, start_smoke, write_result

from dpaudit.app.pipeline import train
from dpaudit.data.datasets import load_dataset

RUNS = [("gcn", math.inf), ("sage", math.inf), ("mlp", math.inf), ("mlp-dp", 1.0), ("mlp-dp", 4.0), ("mlp-dp", 8.0)]


def one_run(defense: str, epsilon: float, dataset, split: str, seed: int):
    result = train(defense, dataset, epsilon=epsilon, seed=seed, split=split, device="cpu")
    return result.metrics["test_accuracy"], result.model.privacy.epsilon, result.model.privacy.delta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="cora_ml")
    parser.add_argument("--split", default=None, help="split spec (default: the dataset's default)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data-root", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    add_smoke_argument(parser, "csbm (generated, 1000 nodes), one seed")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
        args.dataset, args.seeds = "csbm", 1

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        if args.dataset != "csbm":
            shutil.copytree(args.data_root, root)
        os.environ.setdefault("DPAUDIT_CACHE", str(Path(tmp) / "cache"))
        dataset = load_dataset(args.dataset, root=root if args.dataset != "csbm" else None)
        rows = []
        for defense, eps in RUNS:
            accs, spent, secs, peaks, delta = [], [], [], [], None
            for seed in range(args.seeds):
                (acc, eps_spent, delta), seconds, peak = measure(one_run, defense, eps, dataset, args.split, seed)
                accs.append(acc)
                spent.append(eps_spent)
                secs.append(seconds)
                peaks.append(peak)
            rows.append(
                {
                    "defense": defense,
                    "target ε": "∞" if math.isinf(eps) else eps,
                    "test accuracy": mean_std(accs),
                    "ε spent (max)": "∞" if math.isinf(max(spent)) else f"{max(spent):.4f}",
                    "δ": f"{delta:.0e}" if delta else "-",
                    "train+eval s": mean_std(secs),
                    "peak RSS MiB": f"{max(peaks):.0f}",
                }
            )
            print(rows[-1], flush=True)
    columns = ["defense", "target ε", "test accuracy", "ε spent (max)", "δ", "train+eval s", "peak RSS MiB"]
    table = markdown_table(rows, columns)
    header = (
        f"# Baselines on {args.dataset} ({args.seeds} seeds, split {args.split or 'default'})\n\n"
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
        "each run in a fresh forked process (peak RSS includes the loaded dataset)."
    )
    print(table)
    print("written to", write_result(f"baselines-{args.dataset}", header, table))


if __name__ == "__main__":
    main()
