"""Black-box canary power against its plan (issue 47 item 5): a user's non-private GCN
(``benchmarks/blackbox_fit/fit.py:fit``, loaded as ``dpaudit canary --train`` loads it, with its
sibling module ``gcn.py``) audited with node canaries against the claim ε = 4 (δ = 1e-5) on Cora,
one run per row. Each row puts the power plan (``plan.certifiable_epsilon``: the ceiling, what a
perfect attack certifies with balanced coins; ``plan.predicted_epsilon``: what a perfect ranking
certifies at the median coin draw; ``plan.predicted_interval``: over 90 % of the coin draws and
wherever the score-chosen split falls, :func:`dpaudit.auditing.power.perfect_attack_interval`)
beside the certified bound the run achieved, the estimator and guess entry that gave it, the
canary AUC, the verdict and the CPU time.

    DPAUDIT_DATA=DIR OMP_NUM_THREADS=1 nice python benchmarks/bench_blackbox_power.py [--canaries 1000,2000] [--seeds 0,1,2] [--designs default,signed]

Writes ``benchmarks/results/blackbox_power.md`` and its rows, ``benchmarks/results/blackbox_power.json``
(merged: a later run replaces the rows it measures and keeps the others). ``--smoke``: csbm
(generated, 1000 nodes), 100 canaries, seed 0, the default design, written to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _harness import (
    add_smoke_argument,
    markdown_table,
    results_dir,
    start_smoke,
    tree_state,
    write_atomic,
    write_result,
)

from dpaudit.app.workflows.canary import canary_audit
from dpaudit.auditing.estimators import RIGOROUS_ESTIMATORS
from dpaudit.data.datasets import load_dataset
from dpaudit.training.user_fit import load_fit_function

FIT = Path(__file__).resolve().parent / "blackbox_fit" / "fit.py"
#: the achieved bound is "within" the plan's interval up to this rounding of the bisections
TOLERANCE = 1e-6
#: the designs compared (``--design`` of ``dpaudit canary``); the default first
DESIGNS = {"default": {}, "signed": {"signed": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--canaries", default="1000")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--designs", default="default", help=f"comma-separated, of {', '.join(DESIGNS)}")
    add_smoke_argument(parser, "csbm (generated, 1000 nodes), 100 canaries, seed 0, the default design")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
        args.dataset, args.canaries, args.seeds, args.designs = "csbm", "100", "0", "default"
    fit = load_fit_function(f"{FIT}:fit")
    dataset = load_dataset(args.dataset, root=args.data_root)
    rows = []
    for count in [int(c) for c in args.canaries.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for name in args.designs.split(","):
                design = DESIGNS[name]
                start = time.process_time()
                result = canary_audit(
                    fit,
                    dataset,
                    args.epsilon,
                    kind="node",
                    canaries=count,
                    seed=seed,
                    delta=1e-5,
                    design=design,
                    progress=False,
                    keep_scores=False,
                )
                plan = result["plan"]
                low, high = plan.get("predicted_interval") or (None, None)
                certified = result.certified_epsilon_lower_bound
                rows.append(
                    {
                        "canaries": count,
                        "seed": seed,
                        "design": name,
                        "plan: ceiling": f"{plan['certifiable_epsilon']:.2f}",
                        "plan: predicted": "-" if low is None else f"{plan['predicted_epsilon']:.2f}",
                        "plan: interval": "-" if low is None else f"[{low:.2f}, {high:.2f}]",
                        "certified": f"{certified:.2f}",
                        "within": "-"
                        if low is None
                        else ("yes" if low - TOLERANCE <= certified <= high + TOLERANCE else "no"),
                        "certified by": _certified_by(result),
                        "AUC": f"{result['auc']:.3f}",
                        "verdict": result.verdict,
                        "CPU s": f"{time.process_time() - start:.0f}",
                    }
                )
                print(rows[-1], flush=True)
                _write(args, rows)  # after every row: an interrupted run keeps the rows it finished


def _certified_by(result) -> str:
    """The certified estimator and guess entry that gave the bound, e.g. ``one-run-fdp: split r=900 (900/900)``."""
    estimates = {k: v for k, v in (result.get("estimates") or {}).items() if k in RIGOROUS_ESTIMATORS}
    if not estimates:
        return "-"
    name, best = max(estimates.items(), key=lambda kv: kv[1]["epsilon_lower_bound"])
    chosen = best["details"].get("chosen")
    if not chosen:
        return name
    rule = {"two-cluster split": "split", "extremes": "extremes", "top/bottom ranks": "pair"}.get(
        chosen.get("rule"), "pair"
    )
    return f"{name}: {rule} r={chosen['r']} ({chosen['correct']}/{chosen['r']} right)"


def _write(args, rows) -> None:
    """Merge ``rows`` into ``results/blackbox_power.json`` (keyed by canaries, seed, design: a
    later run replaces a row, others are kept) and render the table from all of them."""
    store = results_dir() / "blackbox_power.json"
    kept = json.loads(store.read_text(encoding="utf-8")) if store.is_file() else []
    key = ("canaries", "seed", "design")
    fresh = {tuple(r[k] for k in key) for r in rows}
    rows = sorted(
        [r for r in kept if tuple(r[k] for k in key) not in fresh] + rows,
        key=lambda r: (r["canaries"], r["design"], r["seed"]),
    )
    write_atomic(store, json.dumps(rows, indent=1) + "\n")
    header = (
        f"# Black-box canary power against its plan\n\n`{Path(__file__).name}` on {args.dataset}: a non-private "
        f"GCN through `--train benchmarks/blackbox_fit/fit.py:fit`, node canaries, claim ε = {args.epsilon:g}, "
        f"δ = 1e-5, one run per row, 95 %.\n\nTree: {tree_state()}"
    )
    columns = [
        "canaries",
        "seed",
        "design",
        "plan: ceiling",
        "plan: predicted",
        "plan: interval",
        "certified",
        "within",
        "certified by",
        "AUC",
        "verdict",
        "CPU s",
    ]
    write_result("blackbox_power", header, markdown_table(rows, columns))


if __name__ == "__main__":
    main()
