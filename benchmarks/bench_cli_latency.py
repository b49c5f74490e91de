"""How fast the command line says no: wall time of a refused command.

python benchmarks/bench_cli_latency.py                 # median of 5 runs of each command
python benchmarks/bench_cli_latency.py --runs 9
python benchmarks/bench_cli_latency.py --root OTHER    # another checkout (e.g. before a change)

Writes ``benchmarks/results/cli_latency.md``. The target: ``dpaudit train --defense no-such
--dataset cora --out x`` exits 2 within 2 s on an idle machine (the names are checked before
torch and PyG are imported, :mod:`dpaudit.app.names`). Each run is a fresh interpreter
(``python -m dpaudit.app.cli``), so the time includes Python's start-up; the CPU time of the child
is recorded beside the wall time, with the load average, since a busy machine inflates only
the wall time. Tests never time anything: ``tests/dpaudit/app/test_cli.py`` asserts on ``sys.modules``
that torch was not imported on these paths.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _harness import add_smoke_argument, start_smoke  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "cli_latency.md"
TARGET_SECONDS = 2.0
COMMANDS = {
    "train --defense no-such": ["train", "--defense", "no-such", "--dataset", "cora", "--out", "x"],
    "audit --attacks nope": ["audit", "--model", "m", "--attacks", "nope", "--out", "x.html"],
    "compare --defenses no-such": [
        "compare",
        "--dataset",
        "csbm",
        "--defenses",
        "no-such",
        "--epsilons",
        "inf",
        "--out",
        "x",
    ],
}


def one_run(argv: list[str], root: Path) -> tuple[float, float, int]:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "dpaudit.app.cli", *argv],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_smoke_argument(parser, "one run of each refusal")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.out = 1, start_smoke() / RESULTS.name
    rows = []
    for label, command in COMMANDS.items():
        load = os.getloadavg()[0]
        runs = [one_run(command, args.root) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        codes = sorted({r[2] for r in runs})
        rows.append((label, wall, cpu, codes, load))
        print(f"{label}: median {wall:.2f} s wall, {cpu:.2f} s CPU, exit {codes}, load {load:.1f}")
    lines = [
        "# Command-line latency of a refusal",
        "",
        f"Median of {args.runs} fresh interpreters (`python -m dpaudit.app.cli …`); target ≤ {TARGET_SECONDS:g} s wall on "
        "an idle machine. Written by `benchmarks/bench_cli_latency.py`.",
        "",
        f"Checkout: `{args.root}`; machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.",
        "",
        "| command | median wall s | median CPU s | exit | load at start | within target |",
        "|---|---|---|---|---|---|",
    ]
    for label, wall, cpu, codes, load in rows:
        ok = "yes" if wall <= TARGET_SECONDS else "no"
        lines.append(
            f"| `dpaudit {label}` | {wall:.2f} | {cpu:.2f} | {', '.join(map(str, codes))} | {load:.1f} | {ok} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
