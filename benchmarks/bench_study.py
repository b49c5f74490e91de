"""The full compare study's wall time: 6 defenses × 6 ε × the 3 headline attacks, 1 seed.

python benchmarks/bench_study.py                      # cora_ml, the grid below, jobs = cores
python benchmarks/bench_study.py --epsilons 1,8       # a smaller grid (same table)

Runs ``dpaudit compare`` as a child under ``/usr/bin/time -v`` (wall clock, peak RSS of the
largest process) into a fresh study folder and writes ``benchmarks/results/study.md``: the
total wall time, the summed cell time per defense (training + attacks, as the cells record
it), the slowest cell, the per-attack seconds and every cell's status. The headline attacks
are one per family the product audits: membership inference (``mia-rmia``, with reference
models trained by the target's recipe), link stealing (``link-steal``) and the embedding
probe (``embedding-probe``, shadow-trained).

GAP-NDP's sound protocol needs a public degree bound D covering the graph (it refuses
otherwise, see ``defenses/gap``); the study states D = 250 for cora_ml (maximum degree 246) —
a bound the analyst asserts, recorded in the models' cards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import add_smoke_argument, markdown_table, start_smoke, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFENSES = "mlp-dp,gap-edp,gap-ndp,gcon,dpar-em1,dpgnn"
EPSILONS = "0.5,1,2,4,8,16"
ATTACKS = "mia-rmia,link-steal,embedding-probe"


def load_average() -> str:
    """The machine's 1/5/15-minute load averages (the shared machine's other tenants included)."""
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def run_study(args, out: Path) -> tuple[float, int | None, str]:
    command = [
        sys.executable,
        "-m",
        "dpaudit.app.cli",
        "compare",
        "--dataset",
        args.dataset,
        "--data-root",
        args.data_root,
        "--defenses",
        args.defenses,
        "--epsilons",
        args.epsilons,
        "--attacks",
        args.attacks,
        "--seeds",
        "1",
        "--out",
        str(out),
        "--no-report",
    ]
    if "gap-ndp" in args.defenses.split(","):
        command += ["--set", f"gap-ndp.max_degree={args.gap_max_degree}", "--set", "gap-ndp.degree_bound=promise"]
    if args.smoke:
        command += ["--dataset-option", "num_nodes=200", "--set", "epochs=2", "--attack-set", "n_boot=50"]
    if args.jobs:
        command += ["--jobs", str(args.jobs)]
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    wrapped = [timer, "-v", *command] if timer else command
    start = time.perf_counter()
    done = subprocess.run(wrapped, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"the study failed (exit {done.returncode})")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return wall, int(peak.group(1)) if peak else None, " ".join(command[2:])


def summarise(out: Path) -> tuple[list[dict], list[dict], list[dict]]:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    by_defense: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_defense[r["defense"]].append(r)
    defense_rows, attack_seconds = [], defaultdict(list)
    for name, rows in by_defense.items():
        cells = [r["seconds"] or 0.0 for r in rows]
        train = [r["metrics"].get("train_seconds") or 0.0 for r in rows if r["status"] == "done"]
        for r in rows:
            for attack, s in (r.get("attack_seconds") or {}).items():
                attack_seconds[attack].append(s)
        defense_rows.append(
            {
                "defense": name,
                "cells (done/failed)": f"{sum(r['status'] == 'done' for r in rows)}/{sum(r['status'] != 'done' for r in rows)}",
                "cell s (sum)": f"{sum(cells):.0f}",
                "cell s (median)": f"{statistics.median(cells):.1f}",
                "training s (median)": f"{statistics.median(train):.1f}" if train else "-",
                "slowest cell s": f"{max(cells):.1f}",
            }
        )
    attack_rows = [
        {"attack": a, "runs": len(v), "s (sum)": f"{sum(v):.0f}", "s (median)": f"{statistics.median(v):.1f}"}
        for a, v in sorted(attack_seconds.items())
    ]
    failures = [
        {"cell": r["cell_id"], "error": f"{r['error']['type']}: {r['error']['message'][:160]}"}
        for r in records
        if r["status"] != "done"
    ] + [
        {"cell": r["cell_id"], "error": f"attack {a}: {msg[:160]}"}
        for r in records
        for a, msg in (r.get("attack_errors") or {}).items()
    ]
    return defense_rows, attack_rows, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="cora_ml")
    parser.add_argument("--defenses", default=DEFENSES)
    parser.add_argument("--epsilons", default=EPSILONS)
    parser.add_argument("--attacks", default=ATTACKS)
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    parser.add_argument("--gap-max-degree", type=int, default=250)
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--out", default="study", help="result name under benchmarks/results/")
    parser.add_argument("--keep", default=None, help="keep the study folder here (default: a temporary one)")
    add_smoke_argument(parser, "csbm of 200 nodes, gcn and mlp-dp at ε = 4, mia-threshold, one job")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
        args.dataset, args.defenses, args.epsilons, args.attacks, args.jobs = (
            "csbm",
            "gcn,mlp-dp",
            "4",
            "mia-threshold",
            1,
        )

    with tempfile.TemporaryDirectory(prefix="dpaudit-bench-study-") as tmp:
        out = Path(args.keep) if args.keep else Path(tmp) / "study"
        if out.exists():
            raise SystemExit(f"{out} exists; the benchmark times a study from scratch")
        load_before = load_average()
        wall, peak_kb, command = run_study(args, out)
        load_after = load_average()
        defense_rows, attack_rows, failures = summarise(out)
    cells = len(args.defenses.split(",")) * len(args.epsilons.split(","))
    header = (
        f"# Full compare study ({args.dataset})\n\n"
        f"`python benchmarks/bench_study.py {' '.join(sys.argv[1:])}` ran `dpaudit {command}` — "
        f"{os.cpu_count()} cores visible, jobs = {args.jobs or 'one per core'}.\n\n"
        f"**Wall time: {wall / 60:.1f} min** for {cells} cells ({args.defenses.count(',') + 1} defenses × "
        f"{args.epsilons.count(',') + 1} ε × attacks {args.attacks}, 1 seed)"
        + (f"; peak RSS of the largest process {peak_kb / 1024:.0f} MiB" if peak_kb else "")
        + f".\n\nLoad average before / after: {load_before} → {load_after} (a load above the study's "
        "own workers means other jobs shared the cores). Cell seconds are the worker's wall time for "
        "training plus attacks (cells run in parallel, so their sum exceeds the study's wall time)."
    )
    table = (
        markdown_table(defense_rows, list(defense_rows[0]))
        + "\n\n## Attacks\n\n"
        + markdown_table(attack_rows, ["attack", "runs", "s (sum)", "s (median)"])
        + "\n\n## Failures\n\n"
        + (markdown_table(failures, ["cell", "error"]) if failures else "none")
    )
    print(f"wrote {write_result(args.out, header, table)}")


if __name__ == "__main__":
    main()
