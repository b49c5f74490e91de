"""Audit time estimates: the plan's estimate against the audit's measured time.

python benchmarks/bench_estimates.py              # gcn, mlp-dp, gap-edp on Cora; default and --quick; 3 runs
python benchmarks/bench_estimates.py --quick      # gcn only, 1 run of each (a few minutes)
nice -n 5 python benchmarks/bench_estimates.py --commands --extra-load 2 [--label idle]   # issue 49 (below)
python benchmarks/bench_estimates.py --from-log idle.log benchmarks/results/estimates_load.json   # merge runs

``--commands``: the estimate ``train``, ``audit --quick`` and a small ``compare`` print before their
wait, against the time from that line to their exit, at the machine's load as found and with
``--extra-load`` busy processes; writes ``results/estimates_load.md`` and its rows
(``estimates_load.json``). ``--from-log`` re-renders the table from the rows of several runs (the
logs a ``--commands`` run prints, or a recorded ``estimates_load.json``), e.g. an idle run's and a
loaded run's.

Each defense is trained once on Cora with a random split (``dpaudit train``); each audit runs
in a fresh Python process (as ``dpaudit audit`` does: cold torch, numba compiling UMAP) and
reports the plan (:func:`dpaudit.app.workflows.audit.audit_plan`, with the costs it measured on the
model) and, per attack, the wall and CPU seconds it took. Writes
``benchmarks/results/estimates.md`` and ``estimates.json``: medians over the runs, the
estimate / actual ratios, and each attack's residual (actual CPU − estimate), which is what the
constants of :data:`dpaudit.app.workflows.audit.plan._COST` and of each attack's declared cost
(:attr:`attacks.AttackDeclaration.cost`) are fitted from.

The audits run on one torch thread (``--threads``): the estimate is CPU time of one idle
core, and on a shared machine several torch threads spin at every barrier, which multiplies
a small model's training time by 10-20 (see the results file for the load measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import markdown_table, results_dir, write_atomic, write_result  # noqa: E402

DEFENSES = {"gcn": None, "mlp-dp": "4", "gap-edp": "4"}  # defense: target ε (None: non-private)
SPLIT = "random:0.75,0.1,0.15"
ROOT = Path(__file__).resolve().parents[1]


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0]) if Path("/proc/loadavg").exists() else float("nan")


def child(model_dir: str, quick: bool, threads: int) -> None:
    """One audit in this process; prints one JSON line (the plan and the measured times)."""
    import torch

    torch.set_num_threads(threads)
    import attacks
    from dpaudit.app.workflows import audit
    from dpaudit.release.model import load

    cpu: dict[str, float] = {}
    run = attacks.run

    def timed_run(name, *args, **kwargs):
        start = time.process_time()
        try:
            return run(name, *args, **kwargs)
        finally:
            cpu[name] = time.process_time() - start

    attacks.run = timed_run
    marks: dict[str, float] = {}
    load_before = load_average()
    model = load(model_dir, device="cpu", record=True)

    def on_plan(plan):
        marks["wall"], marks["cpu"] = time.perf_counter(), time.process_time()

    result = audit(model, quick=quick, progress=False, device="cpu", on_plan=on_plan)
    record = {
        "plan": result.plan,
        "attack_wall": dict(result.seconds),
        "attack_cpu": cpu,
        "audit_wall": time.perf_counter() - marks["wall"],
        "audit_cpu": time.process_time() - marks["cpu"],
        "load": [load_before, load_average()],
    }
    print("RESULT " + json.dumps(record), flush=True)


def train(defense: str, epsilon: str | None, out: Path) -> None:
    command = [
        str(Path(sys.executable).parent / "dpaudit"),
        "train",
        "--defense",
        defense,
        "--dataset",
        "cora",
        "--split",
        SPLIT,
        "--out",
        str(out),
    ]
    if epsilon is not None:
        command += ["--epsilon", epsilon]
    subprocess.run(command, check=True, capture_output=True, text=True)


def audit_once(model_dir: Path, quick: bool, threads: int) -> dict:
    command = [sys.executable, __file__, "--child", str(model_dir), "--threads", str(threads)]
    command += ["--quick-audit"] if quick else []
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        raise RuntimeError(f"audit of {model_dir} failed:\n{proc.stderr[-3000:]}")
    record = json.loads(line[len("RESULT ") :])
    record["command_wall"] = time.perf_counter() - start
    return record


def median(values) -> float:
    return statistics.median(values)


def summarise(defense: str, mode: str, records: list[dict]) -> tuple[dict, list[dict]]:
    estimate = median([r["plan"]["estimated_seconds"] for r in records])
    wall = median([r["audit_wall"] for r in records])
    cpu = median([r["audit_cpu"] for r in records])
    row = {
        "defense": defense,
        "audit": mode,
        "runs": len(records),
        "estimate s": f"{estimate:.1f}",
        "actual wall s": f"{wall:.1f}",
        "actual CPU s": f"{cpu:.1f}",
        "estimate / wall": f"{estimate / wall:.2f}",
        "estimate / CPU": f"{estimate / cpu:.2f}",
        "command wall s": f"{median([r['command_wall'] for r in records]):.1f}",
        "shadow (trial) s": f"{median([r['plan']['costs']['shadow'] for r in records]):.2f}",
        "query s": f"{median([r['plan']['costs']['query'] for r in records]):.3f}",
        "calibration s": f"{median([r['plan']['costs']['seconds'] for r in records]):.1f}",
        "load": f"{min(min(r['load']) for r in records):.1f}-{max(max(r['load']) for r in records):.1f}",
    }
    attacks = []
    for step in records[0]["plan"]["attacks"]:
        name = step["attack"]
        est = median(
            [next(s for s in r["plan"]["attacks"] if s["attack"] == name)["estimated_seconds"] for r in records]
        )
        actual = median([r["attack_cpu"][name] for r in records])
        attacks.append(
            {
                "defense": defense,
                "audit": mode,
                "attack": name,
                "estimate s": f"{est:.1f}",
                "actual CPU s": f"{actual:.1f}",
                "residual s": f"{actual - est:+.1f}",
                "actual wall s": f"{median([r['attack_wall'][name] for r in records]):.1f}",
            }
        )
    return row, attacks


# --------------------------------------------------------------------------- --commands (issue 49)

#: the three commands of issue 49's "waits are silent", small enough to run on a shared machine;
#: each: argv, the regex of the line holding its estimate (seconds in group 1, unit in group 2),
#: and what "actual" is measured from
COMMANDS = {
    "train": (
        [
            "train",
            "--defense",
            "mlp-dp",
            "--dataset",
            "csbm",
            "--dataset-option",
            "num_nodes=4000",
            "--epsilon",
            "4",
            "--out",
            "{tmp}/m",
        ],
        r"-> \S+: about ([\d.]+) (s|min|h) here",
        "the estimate line to exit",
    ),
    "audit --quick": (
        ["audit", "--model", "{tmp}/m", "--quick", "--out", "{tmp}/a.html"],
        r"about [^,]+ on an idle machine, about ([\d.]+) (s|min|h) here",
        "the plan line to exit",
    ),
    "compare (small)": (
        [
            "compare",
            "--dataset",
            "csbm",
            "--dataset-option",
            "num_nodes=300",
            "--defenses",
            "gcn,mlp-dp",
            "--epsilons",
            "4,inf",
            "--attacks",
            "mia-threshold,mia-lira",
            "--attack-set",
            "num_shadows=2",
            "--jobs",
            "2",
            "--no-report",
            "--out",
            "{tmp}/s",
        ],
        r"cell\(s\) to run on \d+ worker\(s\), about ([\d.]+) (s|min|h)",
        "the estimate line to exit",
    ),
}
_UNIT = {"s": 1.0, "min": 60.0, "h": 3600.0}


def _timed_lines(argv: list[str], env: dict) -> tuple[int, list[tuple[float, str]], float]:
    """Run ``dpaudit ARGV``; every output line with the seconds since start when it appeared."""
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpaudit.app.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    lines: list[tuple[float, str]] = []

    def read():
        for line in proc.stdout:
            lines.append((time.perf_counter() - start, line.rstrip()))

    reader = threading.Thread(target=read)
    reader.start()
    proc.wait()
    reader.join()
    return proc.returncode, lines, time.perf_counter() - start


def measure_command(name: str, tmp: Path, smoke: bool = False) -> dict:
    """One run of a :data:`COMMANDS` entry: its estimate (the first matching line) against the
    seconds it then took, and the load before it started."""
    import re

    argv, pattern, what = COMMANDS[name]
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    if smoke:  # seconds, not a measurement: the script still runs end to end
        argv = [{"num_nodes=4000": "num_nodes=200"}.get(a, a) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    load = load_average()
    code, lines, wall = _timed_lines(argv, env)
    row = {"command": name, "load before": f"{load:.1f}", "exit": code, "command wall s": f"{wall:.1f}"}
    for at, line in lines:
        found = re.search(pattern, line)
        if not found:
            continue
        estimate = float(found.group(1)) * _UNIT[found.group(2)]
        actual = wall - at
        ratio = estimate / actual if actual > 0 else float("nan")
        row.update(
            {
                "estimate s": f"{estimate:.0f}",
                "actual s": f"{actual:.0f}",
                "estimate / actual": f"{ratio:.2f}",
                "within 2×": "yes" if 0.5 <= ratio <= 2 else "no",
                "actual is": what,
            }
        )
        return row
    row.update(
        {
            "estimate s": "-",
            "actual s": f"{wall:.0f}",
            "estimate / actual": "-",
            "within 2×": "no estimate",
            "actual is": what,
            "last line": (lines[-1][1] if lines else "")[:120],
        }
    )
    return row


def _burn(seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        pass


def render_commands(rows: list[dict], extra_load: int) -> str:
    """``results/estimates_load.md`` from the measured rows (also from a run's printed rows: ``--from-log``)."""
    columns = [
        "load",
        "command",
        "load before",
        "estimate s",
        "actual s",
        "estimate / actual",
        "within 2×",
        "actual is",
        "command wall s",
        "exit",
    ]
    within = sum(r.get("within 2×") == "yes" for r in rows)
    loaded = any(r["load"].startswith("+") for r in rows)
    header = (
        "# Time estimates at the machine's load (issue 49)\n\n"
        f"`python benchmarks/bench_estimates.py --commands` — {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, run under `nice -n 5`. Each command is a fresh `dpaudit` process; its "
        "**estimate** is the line it prints before the wait (train: before training, a guess from the graph's "
        "size and the defense's declared cost; audit: the plan's wall estimate with the report; compare: the "
        "study's up-front guess from the graph's size and the workers; each corrected for the machine's load "
        "by `dpaudit.progress.load_factor`); *actual*: from that line to the command's exit, measured. "
        "*command wall*: the whole process, imports included (at a load of 20 on 2 cores importing torch alone "
        "takes minutes, before any line can be printed). *load before*: the 1-minute load average when the "
        "command started. *load*: the block — the machine as found (shared with other jobs: a load near 0 is "
        "idle), or with busy processes added"
        + (" (started 75 s before the block, so that the load average sees them)" if loaded else "")
        + f". **{within} of {len(rows)} estimates within 2×** of the time measured."
    )
    return header + "\n\n" + markdown_table(rows, [c for c in columns if any(c in r for r in rows)]) + "\n"


def commands_main(
    extra_load: int, out: str, smoke: bool, only: list[str] | None = None, label: str | None = None
) -> int:
    """``--commands``: each command of :data:`COMMANDS` at the machine's load as it is, then with
    ``extra_load`` more busy processes; writes ``results/OUT.md`` (a temporary folder with --smoke)."""
    import multiprocessing as mp

    rows = []
    names = ["train"] if smoke else [n for n in COMMANDS if not only or n in only]
    with tempfile.TemporaryDirectory(prefix="bench-estimates-") as tmp:
        blocks = [(label or "as found", 0)] + ([(f"+{extra_load} busy processes", extra_load)] if extra_load else [])
        for condition, burners in blocks:
            if smoke and burners:
                continue
            procs = [mp.Process(target=_burn, args=(3600,), daemon=True) for _ in range(burners)]
            for proc in procs:
                proc.start()
            try:
                if burners:
                    time.sleep(75)  # the 1-minute load average sees 1 - e^(-75/60) ≈ 71 % of them
                work = Path(tmp) / condition.replace(" ", "-").replace("+", "")
                work.mkdir()
                for name in names:
                    row = {"load": condition, **measure_command(name, work, smoke)}
                    rows.append(row)
                    print(row, flush=True)
            finally:
                for proc in procs:
                    proc.terminate()
        text = render_commands(rows, extra_load)
        if smoke:
            path = Path(tmp).parent / "estimates_load-smoke.md"
            path.write_text(text)
        else:
            path = write_atomic(results_dir() / f"{out}.md", text)
            write_atomic(path.with_suffix(".json"), json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0 if all(r.get("exit") == 0 for r in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="gcn only, one run of each audit")
    parser.add_argument("--repeats", type=int, default=None, help="audits per (defense, mode); default 3 (1 quick)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each audit (default 1)")
    parser.add_argument(
        "--commands",
        action="store_true",
        help="issue 49: train, audit --quick and a small "
        "compare, estimate vs actual at the load found and under --extra-load (results/estimates_load.md)",
    )
    parser.add_argument("--extra-load", type=int, default=4, help="busy processes added for the loaded block")
    parser.add_argument(
        "--smoke", action="store_true", help="--commands' train row only, written to a temporary folder"
    )
    parser.add_argument("--only", default=None, help="--commands: these commands only (comma-separated names)")
    parser.add_argument(
        "--from-log",
        nargs="+",
        default=None,
        help="re-render results/estimates_load.md from --commands logs (e.g. an idle run's and a loaded run's), "
        "their rows in order; rows of an older format (train measured by its loop) are left out",
    )
    parser.add_argument(
        "--label", default=None, help="--commands: the first block's name in the table (default 'as found'; e.g. idle)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quick-audit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.quick_audit, args.threads)
        return 0
    if args.from_log:  # re-render the rows --commands runs printed (one dict per line), the logs' blocks in order
        import ast

        rows = []
        for log in args.from_log:
            text = Path(log).read_text()
            if log.endswith(".json"):  # the rows a run recorded (results/estimates_load.json)
                found = json.loads(text)["rows"]
            else:
                found = [ast.literal_eval(line) for line in text.splitlines() if line.startswith("{")]
            rows += [r for r in found if r.get("actual is") != "the training loop (from its first line)"]
        print(f"wrote {write_atomic(results_dir() / 'estimates_load.md', render_commands(rows, args.extra_load))}")
        write_atomic(results_dir() / "estimates_load.json", json.dumps({"rows": rows}, indent=1) + "\n")
        return 0
    if args.commands or args.smoke:
        only = [o.strip() for o in args.only.split(",")] if args.only else None
        return commands_main(args.extra_load, "estimates_load", args.smoke, only, args.label)
    defenses = {"gcn": None} if args.quick else DEFENSES
    repeats = args.repeats or (1 if args.quick else 3)
    rows, attack_rows, raw = [], [], {}
    with tempfile.TemporaryDirectory(prefix="bench-estimates-") as tmp:
        for defense, epsilon in defenses.items():
            model_dir = Path(tmp) / defense
            train(defense, epsilon, model_dir)
            records = {"default": [], "quick": []}
            for _ in range(repeats):  # the two modes alternate, so a load change hits both alike
                for mode in records:
                    records[mode].append(audit_once(model_dir, mode == "quick", args.threads))
                    print(
                        f"{defense} {mode}: estimate {records[mode][-1]['plan']['estimated_seconds']:.1f} s, "
                        f"actual {records[mode][-1]['audit_wall']:.1f} s",
                        flush=True,
                    )
            for mode, recs in records.items():
                row, per_attack = summarise(defense, mode, recs)
                rows.append(row)
                attack_rows += per_attack
            raw[defense] = records
    header = (
        "# Audit time estimates vs actual (Cora, random split " + SPLIT.split(":")[1] + ")\n\n"
        f"`python benchmarks/bench_estimates.py{' --quick' if args.quick else ''}` — {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch threads per audit: {args.threads}; medians of {repeats} run(s) per row, each "
        "audit a fresh process. *estimate*: the plan printed before any work (CPU seconds of an idle core, from a "
        "shadow cost measured on a short warm trial and one timed query); *actual*: from the plan to the audit's "
        "return (wall and CPU of the process); *command wall*: the whole child process (imports, load, plan, "
        "audit). *load*: the 1-minute load average before and after the runs (the machine is shared: wall times "
        "stretch with the load, CPU times much less).\n\n"
        "Acceptance (issue 26): estimate within 1.5× of actual for gcn, default audit and --quick."
    )
    table = markdown_table(rows, list(rows[0])) + "\n\n## Per attack (estimate vs actual CPU)\n\n"
    table += markdown_table(attack_rows, list(attack_rows[0]))
    path = write_result("estimates", header, table)
    path.with_suffix(".json").write_text(json.dumps({"rows": rows, "attacks": attack_rows, "raw": raw}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
