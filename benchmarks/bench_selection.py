"""Private hyperparameter selection (``--set select=private``) against the sound fixed defaults.

For each defense, ε and seed: one run with the registry's sound defaults, and one accounted
selection (Papernot & Steinke 2022, Theorem 2; :mod:`dpaudit.training.private_selection`) over the
defense's public grid, both calibrated to the same target ε. Test accuracy on the split's test
nodes, the ε spent, the per-run ε of the selection and CPU seconds of ``fit`` (one torch
thread). The number of runs is the owner's measurement (never in a model's public files).

Full run (as in benchmarks/results/selection.md)::

    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python \\
        benchmarks/bench_selection.py --dataset cora_ml --epsilons 4 8 --seeds 0 1 2

Selection scores runs on validation nodes, so a split without any (DPAR's ``inductive:0.8,0.2``)
cannot select: ``--select-split`` names the split the selection runs on, e.g.
``inductive:0.7,0.2,0.1``, whose test nodes are the same (the seeded permutation puts test last)
and whose validation nodes come out of the training share. The fixed defaults are then run on
both splits. ``--section TITLE`` merges the table into the existing results file as a section of
that title (replacing an older section of the same title, keeping everything else)::

    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python \\
        benchmarks/bench_selection.py --dataset cora_ml --defenses dpar-em1 --split inductive:0.8,0.2 \\
        --select-split inductive:0.7,0.2,0.1 --epsilons 4 8 --seeds 0 1 2 \\
        --section "dpar-em1 on cora_ml, inductive split"

gap-ndp runs the degree promise (``degree_bound=promise``, as the recorded rows did) with
``max_degree`` = ``--ndp-max-degree`` (a public bound at least the graph's maximum degree: the
promise refuses a graph above it).
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

from _harness import add_smoke_argument, markdown_table, results_dir, start_smoke, write_result  # noqa: E402

import defenses  # noqa: E402,F401  (registers the defenses)
from dpaudit.app.pipeline import evaluate  # noqa: E402
from dpaudit.data.datasets import load_dataset  # noqa: E402
from dpaudit.data.splits import make_split  # noqa: E402
from dpaudit.runtime import atomic_write_text  # noqa: E402
from dpaudit.training.registry import get_defense  # noqa: E402

log = logging.getLogger("bench_selection")


def one(defense: str, dataset, split, epsilon: float, seed: int, select: dict | None, extra: dict) -> dict:
    """One fit: the sound defaults, or (``select``: the law's settings) an accounted selection."""
    settings = dict(extra, select="private", **select) if select is not None else dict(extra)
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


def run_rows(args, dataset) -> list[dict]:
    rows = []
    select_split = args.select_split or args.split
    for defense in args.defenses:
        extra = {"max_degree": args.ndp_max_degree, "degree_bound": "promise"} if defense == "gap-ndp" else {}
        for epsilon in args.epsilons:
            configurations = [(False, args.split)]
            if select_split != args.split:
                configurations.append((False, select_split))
            configurations.append((True, select_split))
            for select, spec in configurations:
                results = []
                for seed in args.seeds:
                    split = make_split(dataset, spec, seed)
                    law = {"select_runs": args.select_runs} if args.select_runs else {}
                    results.append(one(defense, dataset, split, epsilon, seed, law if select else None, extra))
                    log.info("%s ε=%g select=%s %s seed %d: %s", defense, epsilon, select, spec, seed, results[-1])
                rows.append(
                    {
                        "defense": defense,
                        "ε target": f"{epsilon:g}",
                        "split": spec or "default",
                        "configuration": "sound + private selection" if select else "sound, fixed defaults",
                        "test accuracy": mean_sd([r["test"] for r in results]),
                        "per seed": ", ".join(f"{r['test']:.3f}" for r in results),
                        "ε spent (max)": f"{max(r['spent'] for r in results):.3f}",
                        "ε per run": f"{results[0]['run_epsilon']:.3f}" if select else "-",
                        "runs (mean)": f"{statistics.mean(r['runs'] for r in results):.1f}" if select else "1",
                        "chosen": "; ".join(str(r["chosen"]) for r in results) if select else "-",
                        "CPU s (median)": f"{statistics.median(r['cpu'] for r in results):.1f}",
                    }
                )
    return rows


def merge_section(path: Path, title: str, body: str) -> str:
    """The results file's text with ``## title`` replaced by (or, if absent, followed by) ``body``;
    every other section is kept as it is."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    heading = f"## {title}\n"
    section = f"{heading}\n{body.strip()}\n"
    if heading in text:
        start = text.index(heading)
        following = text.find("\n## ", start + len(heading))
        end = len(text) if following < 0 else following + 1
        return text[:start] + section + ("\n" + text[end:] if end < len(text) else "")
    return text.rstrip("\n") + "\n\n" + section


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cora_ml")
    parser.add_argument("--split", default=None, help="default: the dataset's default split")
    parser.add_argument("--select-split", default=None, help="the selection's split (needs validation nodes)")
    parser.add_argument("--defenses", nargs="+", default=["mlp-dp", "gap-edp", "gap-ndp"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[4.0, 8.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--ndp-max-degree", type=int, default=250)
    parser.add_argument("--name", default="selection")
    parser.add_argument("--section", default=None, help="merge into the results file under this section title")
    parser.add_argument("--select-runs", type=float, default=None, help="E[K] of the law (default: the registry's)")
    add_smoke_argument(parser, "csbm with 300 nodes, mlp-dp only, ε = 4, one seed, E[K] = 2")
    args = parser.parse_args(argv)
    if args.smoke:
        start_smoke()
        args.dataset, args.defenses, args.epsilons, args.seeds, args.select_runs = "csbm", ["mlp-dp"], [4.0], [0], 2.0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    if args.smoke:
        dataset = load_dataset("csbm", num_nodes=300, num_classes=3, num_features=16, seed=0)
    else:
        dataset = load_dataset(args.dataset, root=os.environ.get("DPAUDIT_DATA"))
    rows = run_rows(args, dataset)
    table = markdown_table(rows, list(rows[0]))
    command = (
        "    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python \\\n"
        f"        benchmarks/bench_selection.py --dataset {args.dataset} --defenses {' '.join(args.defenses)}"
        + (f" --split {args.split}" if args.split else "")
        + (f" --select-split {args.select_split}" if args.select_split else "")
        + f" --epsilons {' '.join(f'{e:g}' for e in args.epsilons)} --seeds {' '.join(map(str, args.seeds))}"
        + (f" --select-runs {args.select_runs:g}" if args.select_runs else "")
        + (f' --section "{args.section}"' if args.section else "")
    )
    about = (
        "Selection: random stopping (Papernot & Steinke 2022, Theorem 2), "
        + (
            f"E[K] = `select_runs` = {args.select_runs:g} and the registry's `select_eta`"
            if args.select_runs
            else "registry defaults for the law (`select_runs`, `select_eta`)"
        )
        + ", the public grids of `dpaudit/training/private_selection.py`; every run accounted at "
        "the per-run ε shown, the whole selection at ≤ the target; δ = the registry default. Test accuracy mean ± "
        "sd over seeds."
        + (f" gap-ndp: max_degree = {args.ndp_max_degree}." if "gap-ndp" in args.defenses else "")
        + " CPU seconds of `fit`, one torch thread, on a shared machine."
    )
    if args.section:
        path = results_dir() / f"{args.name}.md"
        body = f"Written by `benchmarks/bench_selection.py`:\n\n{command}\n\n{about}\n\n{table}"
        atomic_write_text(path, merge_section(path, args.section, body))
    else:
        header = (
            f"# Private hyperparameter selection on {args.dataset} ({len(args.seeds)} seeds)\n\n"
            f"Written by `benchmarks/bench_selection.py`:\n\n{command}\n\n{about}"
        )
        path = write_result(args.name, header, table)
    print(path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
