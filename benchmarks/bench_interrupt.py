"""How fast an interrupt stops a study: seconds from the signal to the process's exit.

python benchmarks/bench_interrupt.py              # 3 runs each of Ctrl-C (jobs=2) and SIGTERM (jobs=1, 2)
python benchmarks/bench_interrupt.py --runs 5

Writes ``benchmarks/results/interrupt.md``. The target is a stop within 2 s of the signal on an
idle machine; ``tests/dpaudit/app/test_interrupt.py`` asserts what an interrupt must do (a cell boundary,
exit 130, nothing lost, the rerun completes) with only a hang guard, because a wall-clock assert
fails on a busy shared machine. The same study as the tests: ``compare`` of mlp, gcn and sage at
ε = ∞, two seeds, mia-tstf, on a 150-node csbm graph; the signal is sent once the first cell is
recorded. The load average at the start of each run is recorded beside it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _harness import add_smoke_argument, start_smoke  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "interrupt.md"
TARGET_SECONDS = 2.0
TINY = {"num_nodes": 150, "num_classes": 3, "num_features": 8, "avg_degree": 5.0, "seed": 3}


def _argv(study: Path, jobs: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dpaudit.app.cli",
        "compare",
        "--dataset",
        "csbm",
        "--defenses",
        "mlp,gcn,sage",
        "--epsilons",
        "inf",
        "--seeds",
        "2",
        "--attacks",
        "mia-tstf",
        "--set",
        "epochs=150",
        "--attack-set",
        "runs=2",
        "--attack-set",
        "n_boot=50",
        "--jobs",
        str(jobs),
        "--no-report",
        "--out",
        str(study),
        *[a for k, v in TINY.items() for a in ("--dataset-option", f"{k}={v}")],
    ]


def one_run(kind: str, jobs: int) -> dict:
    """Start the study, wait for its first recorded cell, send the signal; seconds to exit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study"
        load = os.getloadavg()[0]
        proc = subprocess.Popen(
            _argv(study, jobs),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            results = study / "results.jsonl"
            while not (results.exists() and results.stat().st_size > 0):
                if proc.poll() is not None:
                    return {"kind": kind, "jobs": jobs, "seconds": None, "code": proc.returncode, "load": load}
                time.sleep(0.02)
            sent = time.perf_counter()
            if kind == "ctrl-c":
                os.killpg(proc.pid, signal.SIGINT)  # a terminal signals the whole foreground group
            else:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=300)
            seconds = time.perf_counter() - sent
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return {"kind": kind, "jobs": jobs, "seconds": seconds, "code": code, "load": load}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_smoke_argument(parser, "one SIGTERM run, one job")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.out = 1, start_smoke() / RESULTS.name
    rows = []
    for kind, jobs in (("sigterm", 1),) if args.smoke else (("ctrl-c", 2), ("sigterm", 1), ("sigterm", 2)):
        runs = [one_run(kind, jobs) for _ in range(args.runs)]
        seconds = [r["seconds"] for r in runs if r["seconds"] is not None]
        median = statistics.median(seconds) if seconds else None
        rows.append((kind, jobs, runs, median))
        print(f"{kind} jobs={jobs}: median {median if median is None else round(median, 2)} s over {len(seconds)} runs")
    lines = [
        "# Interrupt latency",
        "",
        f"Seconds from the signal to the exit of `dpaudit compare` (median of {args.runs} runs; target ≤ "
        f"{TARGET_SECONDS:g} s on an idle machine). Written by `benchmarks/bench_interrupt.py`; the tests assert "
        "what an interrupt does, not how fast.",
        "",
        f"Machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.",
        "",
        "| signal | jobs | median s | runs (s) | exit codes | load at start | within target |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, jobs, runs, median in rows:
        each = ", ".join("—" if r["seconds"] is None else f"{r['seconds']:.2f}" for r in runs)
        codes = ", ".join(str(r["code"]) for r in runs)
        loads = ", ".join(f"{r['load']:.1f}" for r in runs)
        ok = "—" if median is None else ("yes" if median <= TARGET_SECONDS else "no")
        lines.append(
            f"| {kind} | {jobs} | {'—' if median is None else f'{median:.2f}'} | {each} | {codes} | {loads} | {ok} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
