"""The demo's figures, from recorded runs: what ``dpaudit demo`` printed and its report concluded.

python benchmarks/bench_demo.py                      # one `dpaudit demo` (seed 0) in a fresh process
python benchmarks/bench_demo.py --runs 3             # three runs: each figure's range over them
python benchmarks/bench_demo.py --from-study D1 D2   # re-render from finished demo study folders
python benchmarks/bench_demo.py --smoke              # a two-cell compare study, summarised the same way

The demo's graph, split and seeds are fixed (seed 0), but every private model draws its noise
from the operating system's entropy (a release, not a replay), so its accuracy, its attacks'
AUC and its canary audit's certified ε change from run to run; the non-private models are
seeded and repeat. The README quotes this file's figures (issue 49: "the README's demo figures
come from a recorded run"). Each run is ``python -m dpaudit.app.cli demo`` in a fresh process,
its study folder kept under ``--keep DIR`` (default: a temporary folder); the figures are read
back from the study (:meth:`dpaudit.app.workflows.study.StudyResult.verdict` and ``table``),
exactly what the report renders.

Writes ``benchmarks/results/demo.md`` and ``demo.json``: per run the wall and CPU seconds and
the load; per model (defense, ε) its test accuracy, verdict, certified ε lower bound (the canary
audit's, the largest valid one) and strongest attack AUC, as a range over the runs; the verdict
counts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import add_smoke_argument, markdown_table, results_dir, start_smoke, tree_state, write_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: the smoke run: a two-cell study on a tiny graph, read back as a demo study is
SMOKE_STUDY = [
    "compare",
    "--dataset",
    "csbm",
    "--dataset-option",
    "num_nodes=120",
    "--defenses",
    "gcn,mlp-dp",
    "--epsilons",
    "4,inf",
    "--attacks",
    "mia-threshold",
    "--set",
    "epochs=2",
    "--attack-set",
    "n_boot=50",
    "--jobs",
    "1",
    "--no-report",
]


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_demo(study: Path, argv: list[str] | None = None) -> dict:
    """One ``dpaudit demo`` (or ``argv``) in a fresh process writing ``study``; its seconds and load."""
    report = study.with_suffix(".html")
    argv = argv or ["demo", "--out", str(study), "--report", str(report)]
    if argv[0] == "compare":
        argv = [*argv, "--out", str(study)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before, start = _load(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dpaudit.app.cli", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"`dpaudit {' '.join(argv)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    cpu = (after_cpu.ru_utime - before_cpu.ru_utime) + (after_cpu.ru_stime - before_cpu.ru_stime)
    return {
        "study": str(study),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "load": [round(load_before, 1), round(_load(), 1)],
        "stdout": proc.stdout,
    }


def read_study(study: Path) -> dict:
    """The figures of one finished study: per model its accuracy, verdict, bound and best AUC."""
    from dpaudit.app.workflows.study import StudyResult

    result = StudyResult.load(study)
    verdict = result.verdict
    models = {}
    for v in verdict.models:
        aucs = [s.auc for s in v.attacks.values() if s.auc is not None and not s.diagnostic]
        certified = [c.get("certified_epsilon_lower_bound") for c in v.canaries]
        certified = [c for c in certified if isinstance(c, (int, float))]
        models[f"{v.defense} @ ε={v.epsilon_label}"] = {
            "defense": v.defense,
            "epsilon": v.epsilon_label,
            "test_accuracy": v.test_accuracy,
            "status": v.status,
            "canaries": sum(int(c.get("canaries") or 0) for c in v.canaries) or None,
            "certified": max(certified) if certified else None,
            "best_auc": max(aucs) if aucs else None,
        }
    return {
        "cells": f"{len(result.done)} of {len(result.meta.get('cells') or [])} done, {len(result.failed)} failed",
        "counts": dict(verdict.overall.counts),
        "models": models,
    }


def _span(values: list, digits: int = 3) -> str:
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:.{digits}f}–{high:.{digits}f}"


def render(runs: list[dict], command: str, checkout: str | None = None) -> str:
    """``results/demo.md`` from the recorded runs (each: :func:`run_demo`'s seconds, :func:`read_study`'s figures)."""
    names = list(dict.fromkeys(name for r in runs for name in r["figures"]["models"]))
    rows = []
    for name in names:
        per = [r["figures"]["models"].get(name) for r in runs]
        per = [p for p in per if p]
        statuses = sorted({p["status"] for p in per})
        rows.append(
            {
                "defense": per[0]["defense"],
                "ε": per[0]["epsilon"],
                "test accuracy": _span([p["test_accuracy"] for p in per]),
                "verdict": ", ".join(statuses),
                "canaries": _span([p["canaries"] for p in per], 0),
                "canary-certified ε ≥": _span([p["certified"] for p in per], 2),
                "best attack AUC": _span([p["best_auc"] for p in per]),
            }
        )
    run_rows = [
        {
            "run": i + 1,
            "cells": r["figures"]["cells"],
            "verdicts": ", ".join(f"{k} {v}" for k, v in r["figures"]["counts"].items() if v),
            "wall s": r.get("wall_s", "-"),
            "CPU s (process)": r.get("cpu_s", "-"),
            "load before-after": "-" if "load" not in r else f"{r['load'][0]}-{r['load'][1]}",
        }
        for i, r in enumerate(runs)
    ]
    header = (
        "# The demo's figures, recorded (issue 49)\n\n"
        f"`{command}` — {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"checkout {checkout or tree_state()}. {len(runs)} run(s) of `dpaudit demo` (seed 0), each a fresh process. "
        "The graph, split and seeds are fixed and the non-private models are seeded, so their figures repeat "
        "(or nearly: dpar-nodp's differed slightly between runs); "
        "every private model draws its noise from the operating system's entropy, so its test accuracy, its "
        "attacks' AUC and its canary audit's certified ε vary from run to run: a range below is the smallest and "
        "largest over the runs, a single number what every run gave. *verdict*: the report's verdict on the "
        "claim (broken: refuted; consistent: an audit able to refute it did not; none: no privacy claim). "
        "*canaries*: how many the canary audit that tests the claim planted (over its runs); *canary-certified "
        "ε ≥*: the ε lower bound it certified (95 % confidence). *best attack AUC*: the strongest non-diagnostic "
        "attack (the edge attacks' AUC also measures homophily, which DP does not hide; the report says which "
        "attacks each guarantee covers). Wall seconds depend on the machine's load (a shared 2-core machine: see the load "
        "column); CPU seconds are the demo process's own (its study workers included)."
    )
    body = markdown_table(run_rows, list(run_rows[0])) + "\n\n" + markdown_table(rows, list(rows[0]))
    printed = [line for line in (runs[-1].get("stdout") or "").splitlines() if not line.startswith("report: ")]
    if printed:  # what the demo printed (its table), the last run's; the report's path was a temporary one
        body += "\n\nWhat the last run printed:\n\n```text\n" + "\n".join(printed) + "\n```"
    return header + "\n\n" + body + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="demo runs (default 1)")
    parser.add_argument("--keep", type=Path, default=None, help="keep each run's study folder under DIR")
    parser.add_argument("--from-study", nargs="+", type=Path, default=None, help="finished demo study folders")
    add_smoke_argument(parser, "a two-cell compare study on 120 nodes instead of the demo")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
    command = "python benchmarks/bench_demo.py" + (f" --runs {args.runs}" if args.runs != 1 else "")
    runs, checkout = [], tree_state()  # what the runs ran, said when they start
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        if args.from_study:
            command = "python benchmarks/bench_demo.py --from-study " + " ".join(p.name for p in args.from_study)
            runs = [{"study": str(p), "figures": read_study(p)} for p in args.from_study]
        else:
            folder = args.keep or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(1 if args.smoke else args.runs):
                study = folder / f"demo-{i + 1}"
                record = run_demo(study, SMOKE_STUDY if args.smoke else None)
                record["figures"] = read_study(study)
                runs.append(record)
                print(f"run {i + 1}: {record['wall_s']} s wall, {record['figures']['counts']}", flush=True)
        text = render(runs, command + (" --smoke" if args.smoke else ""), checkout)
    path = write_atomic(results_dir() / "demo.md", text)
    write_atomic(
        path.with_suffix(".json"), json.dumps({"command": command, "checkout": checkout, "runs": runs}, indent=1) + "\n"
    )
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
