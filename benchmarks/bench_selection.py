"""Private hyperparameter selection (``--set select=private``) against the sound fixed defaults.

For each defense, ε and seed: one run with the registry's sound defaults, and one accounted
selection (Papernot & Steinke 2022, Theorem 2; :mod:`dpaudit.private_selection`) over the
defense's public grid, both calibrated to the same target ε. Test accuracy on the split's test
nodes, the ε spent, the per-run ε of the selection and CPU seconds of ``fit`` (one torch
thread). The number of runs is the owner's measurement (never in a model's public files).

Full run (as in benchmarks/results/selection.md)::

    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python \\
        benchmarks/bench_selection.py --dataset cora_ml --epsilons 4 8 --seeds 0 1 2

gap-ndp runs with ``max_degree`` = ``--ndp-max-degree`` (a public bound at least the graph's
maximum degree: sound node-level GAP refuses a graph above it).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _harness import markdown_table, write_result  # noqa: E402

import defenses  # noqa: E402,F401  (registers the defenses)
from dpaudit.datasets import load_dataset  # noqa: E402
from dpaudit.pipeline import evaluate  # noqa: E402
from dpaudit.registry import get_defense  # noqa: E402
from dpaudit.splits import make_split  # noqa: E402

log = logging.getLogger("bench_selection")


def one(defense: str, dataset, split, epsilon: float, seed: int, select: bool, extra: dict) -> dict:
    settings = dict(extra, select="private") if select else dict(extra)
    start = time.process_time()
    model = get_defense(defense)(epsilon=epsilon, seed=seed, **settings).fit(dataset, split)
    cpu = time.process_time() - start
    selection = model.card.get("selection") or {}
    return {
        "test": evaluate(model, dataset, split)["test_accuracy"],
        "spent": model.privacy.epsilon,
        "run_epsilon": selection.get("run_epsilon"),
        "chosen": selection.get("chosen"),
        "runs": (model.record.get("selection") or {}).get("number_of_runs"),
        "cpu": cpu,
    }


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cora_ml")
    parser.add_argument("--split", default=None, help="default: the dataset's default split")
    parser.add_argument("--defenses", nargs="+", default=["mlp-dp", "gap-edp", "gap-ndp"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[4.0, 8.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--ndp-max-degree", type=int, default=250)
    parser.add_argument("--name", default="selection")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    dataset = load_dataset(args.dataset, root=os.environ.get("DPAUDIT_DATA"))
    rows = []
    for defense in args.defenses:
        extra = {"max_degree": args.ndp_max_degree} if defense == "gap-ndp" else {}
        for epsilon in args.epsilons:
            for select in (False, True):
                results = []
                for seed in args.seeds:
                    split = make_split(dataset, args.split, seed)
                    results.append(one(defense, dataset, split, epsilon, seed, select, extra))
                    log.info("%s ε=%g select=%s seed %d: %s", defense, epsilon, select, seed, results[-1])
                rows.append(
                    {
                        "defense": defense,
                        "ε target": f"{epsilon:g}",
                        "configuration": "sound + private selection" if select else "sound, fixed defaults",
                        "test accuracy": mean_sd([r["test"] for r in results]),
                        "ε spent (max)": f"{max(r['spent'] for r in results):.3f}",
                        "ε per run": f"{results[0]['run_epsilon']:.3f}" if select else "-",
                        "runs (mean)": f"{statistics.mean(r['runs'] for r in results):.1f}" if select else "1",
                        "chosen": "; ".join(str(r["chosen"]) for r in results) if select else "-",
                        "CPU s (median)": f"{statistics.median(r['cpu'] for r in results):.1f}",
                    }
                )
    columns = list(rows[0])
    header = (
        f"# Private hyperparameter selection on {args.dataset} ({len(args.seeds)} seeds)\n\n"
        "Written by `benchmarks/bench_selection.py`:\n\n"
        "    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python \\\n"
        f"        benchmarks/bench_selection.py --dataset {args.dataset} --epsilons "
        f"{' '.join(f'{e:g}' for e in args.epsilons)} --seeds {' '.join(map(str, args.seeds))}\n\n"
        f"Split: {args.split or 'the dataset default'}; test accuracy mean ± sd over seeds. Selection: "
        "random stopping (Papernot & Steinke 2022, Theorem 2), registry defaults for the law "
        "(`select_runs`, `select_eta`), the public grids of `dpaudit/private_selection.py`; every run "
        f"accounted at the per-run ε shown, the whole selection at ≤ the target. gap-ndp: max_degree = "
        f"{args.ndp_max_degree}. CPU seconds of `fit`, one torch thread, on a shared machine."
    )
    path = write_result(args.name, header, markdown_table(rows, columns))
    print(path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
