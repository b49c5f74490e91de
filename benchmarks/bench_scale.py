"""How every defense and every attack scales with the graph (issue 27): CPU time and peak
memory of the real commands on generated graphs, one child process per run.

    python benchmarks/bench_scale.py --quick                 # csbm at 2 k, 4 k, 8 k nodes
    python benchmarks/bench_scale.py                         # csbm at 5 k, 20 k, 80 k nodes
    python benchmarks/bench_scale.py --sizes 5000,10000,20000
    python benchmarks/bench_scale.py --sizes '' --shapes facebook,reddit,amazon,1m
    python benchmarks/bench_scale.py --sizes 1000000 --defenses gap-edp --attacks '' --whole-audit --out scale-1m-audit
    python benchmarks/bench_scale.py --merge 'scale-s7,scale-defenses,scale-1m-audit:audit (every attack)' --out scale

Graphs: ``--dataset csbm --dataset-option num_nodes=N --dataset-option avg_degree=20`` with 128
features (the contextual SBM of :func:`dpaudit.data.datasets.csbm`), and csbm graphs with the
published shapes of the papers' graphs (:data:`SHAPES`: nodes, undirected edges, features; the
average degree is 2·edges/nodes). For each graph, each run is a fresh child process running the
CLI a user runs:

* ``dataset``: generating the graph alone (the baseline every other run also pays);
* ``train DEFENSE`` (``dpaudit train`` with the short schedule of :data:`SCHEDULES`);
* ``audit ATTACK`` (``dpaudit audit --quick --attacks ATTACK`` of the ``--audit`` model);
* with ``--whole-audit``, ``audit (every attack)``: one ``dpaudit audit --quick`` process running
  every attack, as a user runs it (the wall time issue 27 bounds), with each attack's own wall
  time read from its log line.

Each child's CPU time (user + system) and peak resident memory come from ``wait4`` (its own
``rusage``, not the maximum over the script); children run with one torch thread and, with
``--memory-cap-gib``, an address-space limit (``RLIMIT_AS``), so a run that outgrows it fails
inside its own process with an allocation error instead of the machine's out-of-memory killer.
A run that exits with dpaudit's one-line error (exit 2) is a refusal: the table shows the
component's own message. "net CPU" subtracts the ``dataset`` run's CPU (interpreter start,
imports and graph generation) from a run's CPU. Growth exponents are log-log least-squares
slopes of net CPU and of peak memory against the number of edges, over every csbm size a
component ran at (at least three).

Every row records the 1-minute load average when its run started and ended (on a shared machine
wall times follow the load; CPU times much less). Results go to ``benchmarks/results/scale.json``
(``--out NAME``: the part ``benchmarks/results/scale-parts/NAME.json``) after every run (a rerun
with the same ``--out`` skips the runs already there unless ``--fresh``) and the ``.md`` beside
it. ``--merge`` joins several parts into one record (:func:`merge`): a run
measured in a later part replaces that run's rows of earlier parts, and each row keeps its part,
whose ``dataset`` run its net CPU subtracts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import add_smoke_argument, start_smoke, tree_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
#: the record ``scale.md`` renders; every other ``--out NAME`` is a part, kept in :data:`PARTS`
MERGED = "scale"
PARTS = RESULTS / "scale-parts"


def result_path(name: str, suffix: str) -> Path:
    """Where results name ``name`` lives: ``results/scale.{json,md}`` for the merged record,
    ``results/scale-parts/NAME.{json,md}`` for a part (``--out NAME``)."""
    return (RESULTS if name == MERGED else PARTS) / f"{name}{suffix}"


#: (nodes, undirected edges, features) of the graphs the papers run on, and the 1 M / 10 M
#: graph of issue 27's acceptance test
SHAPES = {
    "facebook": (26_406, 2_117_924, 128),
    "reddit": (116_713, 46_233_380, 602),
    "amazon": (1_790_731, 80_966_832, 100),
    "1m": (1_000_000, 10_000_000, 128),
}

#: short training schedules (``--set``): enough to exercise every part of a fit; the time per
#: epoch or step is what scales with the graph
SCHEDULES = {
    "gap-edp": ["encoder_epochs=10", "epochs=10"],
    "gap-ndp": ["encoder_epochs=1", "epochs=1"],
    "gap-inf": ["encoder_epochs=10", "epochs=10"],
    "mlp-dp": ["epochs=1"],
    "gcon": [],
    "dpar-em0": ["epochs=1"],
    "dpar-em1": ["epochs=1"],
    "dpar-gm": ["epochs=1"],
    "dpar-nodp": ["epochs=1"],
    "dpgnn": ["steps=5"],
    "gcn": ["epochs=20"],
    "sage": ["epochs=20"],
    "mlp": ["epochs=20"],
}
DEFAULT_DEFENSES = ("gap-edp", "mlp-dp", "gcon", "dpar-em1", "gcn")
NON_PRIVATE = ("gcn", "sage", "mlp", "dpar-nodp", "gap-inf")  # trained at ε = ∞ (every other defense at ε = 1)
WHOLE_AUDIT = "audit (every attack)"
# LinkTeller last: its whole-graph query per node makes it the slowest by far (issue 27)
DEFAULT_ATTACKS = (
    "mia-threshold",
    "mia-rmia",
    "mia-lira",
    "mia-tstf",
    "link-steal",
    "embedding-probe",
    "linkteller",
)


def graph_spec(label: str) -> dict:
    """``"5000"`` → csbm with 5,000 nodes, average degree 20, 128 features; a shape name →
    csbm with that shape."""
    if label in SHAPES:
        nodes, edges, features = SHAPES[label]
        degree = round(2 * edges / nodes, 3)
        return {"label": label, "series": "shape", "num_nodes": nodes, "avg_degree": degree, "num_features": features}
    return {"label": label, "series": "csbm", "num_nodes": int(label), "avg_degree": 20.0, "num_features": 128}


def dataset_args(spec: dict) -> list[str]:
    options = {k: spec[k] for k in ("num_nodes", "avg_degree", "num_features")}
    return ["--dataset", "csbm", *[a for k, v in options.items() for a in ("--dataset-option", f"{k}={v}")]]


def run_child(
    argv: list[str], cap_bytes: int | None, timeout: float, niceness: int, skipped: str | None, whole_audit: bool
) -> dict:
    """Run ``argv`` in a child process of its own; its CPU seconds, peak RSS and outcome. An
    audit exits 0 when an attack did not run (it reports ``ATTACK: not run: why``): a line
    starting with ``skipped`` and saying "not run" or "not applicable" makes the outcome that
    line. A ``whole_audit``'s row also lists its attacks' times (:func:`attack_times`)."""

    def limits():
        os.setsid()  # its own process group: a timeout stops everything it started
        if niceness:
            os.nice(niceness)
        if cap_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log_path = Path(tempfile.gettempdir()) / f"bench_scale_child_{os.getpid()}.log"
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=limits)
    timed_out = False
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    output = log_path.read_text(errors="replace")
    log_path.unlink(missing_ok=True)
    row = {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "wall_s": round(wall, 2),
        "peak_mib": round(usage.ru_maxrss / 1024.0, 1),
        "exit": proc.returncode,
        "load": [round(load_start, 1), round(os.getloadavg()[0], 1)],
    }
    if timed_out:
        row["outcome"] = f"timed out after {timeout:.0f} s"
    elif proc.returncode == 0:
        row["outcome"] = "ok"
        for line in output.splitlines():
            if skipped and line.startswith(skipped) and ("not run" in line or "not applicable" in line):
                row["outcome"] = line.strip()[:300]
    else:
        row["outcome"] = why_it_failed(output, proc.returncode, cap_bytes)
    if whole_audit:
        row["attacks"] = attack_times(output)
    return row


#: the audit's progress log line for a finished attack (``dpaudit -v audit``)
ATTACK_LINE = re.compile(r"audit: \d+/\d+ (\S+) (done|not run) in ([^;]+);")


def attack_times(output: str) -> dict[str, str]:
    """Attack → "done in T" / "not run in T" (wall time) from a whole audit's log lines."""
    return {m[1]: f"{m[2]} in {m[3].strip()}" for m in ATTACK_LINE.finditer(output)}


def why_it_failed(output: str, code: int, cap_bytes: int | None) -> str:
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    refusal = [line for line in lines if line.startswith("dpaudit: error:")]
    if code == 2 and refusal:
        return "refused: " + refusal[-1].removeprefix("dpaudit: error:").strip()
    last = lines[-1] if lines else f"exit {code}"
    if cap_bytes and ("MemoryError" in output or "alloc" in output.lower()):
        return f"exceeded the {cap_bytes / 2**30:.0f} GiB memory cap: {last[:300]}"
    return f"failed (exit {code}): {last[:300]}"


def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y on log x (None below three points)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0]
    if len(pairs) < 3:
        return None
    x, y = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
    return float(np.polyfit(x, y, 1)[0])


def expected_edges(spec: dict) -> int:
    return int(round(spec["num_nodes"] * spec["avg_degree"] / 2))


class Results:
    """The JSON record, rewritten after every run (the benchmark's progress survives a stop)."""

    def __init__(self, path: Path, fresh: bool, meta: dict):
        self.path = path
        old = json.loads(path.read_text()) if path.exists() and not fresh else {}
        if old.get("runs"):  # resumed or extended: the record names every command that measured its runs
            meta = {
                **meta,
                "command": f"{old['meta']['command']}; {meta['command']}",
                "started": old["meta"].get("started", meta["started"]),
                "load_start": old["meta"].get("load_start", meta["load_start"]),
            }
        self.data = {"meta": meta, "runs": old.get("runs", [])}

    def find(self, graph: str, component: str) -> dict | None:
        return next((r for r in self.data["runs"] if r["graph"] == graph and r["component"] == component), None)

    def add(self, row: dict) -> None:
        self.data["runs"] = [
            r for r in self.data["runs"] if (r["graph"], r["component"]) != (row["graph"], row["component"])
        ]
        self.data["runs"].append(row)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, self.path)


def measure_graph(spec: dict, args, results: Results, log) -> None:
    label = spec["label"]
    base = [sys.executable, "-m", "dpaudit.app.cli"]
    work = Path(args.work) / label
    work.mkdir(parents=True, exist_ok=True)
    cap = int(args.memory_cap_gib * 2**30) if args.memory_cap_gib else None

    def run(component: str, argv: list[str], skipped: str | None = None, whole_audit: bool = False) -> dict:
        done = results.find(label, component)
        if done is not None and args.retry_failed and not kept(done):
            done = None
        if done is not None:
            log(f"{label} {component}: kept from {results.path.name}")
            return done
        log(f"{label} {component} ...")
        row = {"graph": label, "series": spec["series"], "component": component, "part": args.out, **spec_fields(spec)}
        row.update(run_child(argv, cap, args.timeout_s, args.nice, skipped, whole_audit))
        results.add(row)
        log(f"  {row['outcome']}: {row['cpu_s']} CPU s, {row['peak_mib']} MiB peak, {row['wall_s']} s wall")
        return row

    options = {k: spec[k] for k in ("num_nodes", "avg_degree", "num_features")}
    generate = f"from dpaudit.data.datasets import load_dataset; print(load_dataset('csbm', **{options!r}))"
    first = run("dataset", [sys.executable, "-c", generate])
    if first["outcome"] != "ok" or args.dataset_only:
        return
    for defense in args.defenses:
        model = work / defense
        sets = [a for s in SCHEDULES.get(defense, []) for a in ("--set", s)]
        epsilon = "inf" if defense in NON_PRIVATE else "1"
        run(
            f"train {defense}",
            [
                *base,
                "train",
                "--defense",
                defense,
                *dataset_args(spec),
                "--epsilon",
                epsilon,
                *sets,
                "--out",
                str(model),
                "--force",
            ],
        )
    audited = results.find(label, f"train {args.audit}")
    if audited is None or audited["outcome"] != "ok":
        return
    for attack in args.attacks:
        report = work / f"audit-{attack}.html"
        run(
            f"audit {attack}",
            [
                *base,
                "audit",
                "--model",
                str(work / args.audit),
                "--quick",
                "--attacks",
                attack,
                "--out",
                str(report),
                "--force",
            ],
            skipped=f"{attack}: ",
        )
    if args.whole_audit:  # -v: the audit logs each attack's wall time
        run(
            WHOLE_AUDIT,
            [
                *base,
                "-v",
                "audit",
                "--model",
                str(work / args.audit),
                "--quick",
                "--out",
                str(work / "audit-all.html"),
                "--force",
            ],
            whole_audit=True,
        )


def kept(row: dict) -> bool:
    """A finished run or a component's own refusal stays; a crash or a timeout is retried
    with ``--retry-failed`` (the tree it crashed on may have changed)."""
    return row["outcome"] == "ok" or row["outcome"].startswith("refused")


def spec_fields(spec: dict) -> dict:
    return {
        "num_nodes": spec["num_nodes"],
        "undirected_edges": expected_edges(spec),
        "num_features": spec["num_features"],
        "avg_degree": spec["avg_degree"],
    }


def net_cpu(results: Results, row: dict) -> float | None:
    if row["outcome"] != "ok" or row["component"] == "dataset":
        return None
    part = row.get("part")
    base = next(
        (
            r
            for r in results.data["runs"]
            if (r["graph"], r["component"], r.get("part")) == (row["graph"], "dataset", part)
        ),
        None,
    )
    if base is None or base["outcome"] != "ok":
        return None
    return max(row["cpu_s"] - base["cpu_s"], 0.01)


def parts_of(meta: dict, name: str) -> list[dict]:
    """The runs' parts: a merged record lists them; a single run is its own one part."""
    return meta.get("parts") or [{"name": name, **meta}]


def describe_part(number: int, part: dict) -> str:
    cap = f"; memory cap (RLIMIT_AS) {part['memory_cap_gib']} GiB" if part.get("memory_cap_gib") else ""
    return (
        f"{number}. `{part['name']}` (started {part.get('started', '-')}): `{part['command']}` — {part['machine']}; "
        f"{part['versions']}; tree: {part['tree']}; load average at start {part['load_start']}, at the last write "
        f"{part.get('load_end', '-')}{cap}."
    )


def outcome_text(row: dict) -> str:
    missed = [a for a, how in row.get("attacks", {}).items() if not how.startswith("done")]
    return row["outcome"] + (f"; not run: {', '.join(missed)}" if row["outcome"] == "ok" and missed else "")


def render(results: Results, args) -> str:
    meta = results.data["meta"]
    runs = results.data["runs"]
    parts = parts_of(meta, args.out)
    number = {p["name"]: i + 1 for i, p in enumerate(parts)}
    defenses = list(dict.fromkeys(d for p in parts for d in p.get("defenses", [])))
    components = list(dict.fromkeys(r["component"] for r in runs))
    lines = [
        "# Scale: every defense and attack on generated graphs (issue 27)",
        "",
        "Parts (the `part` column; a run measured again in a later part replaces the earlier one):",
        "",
        *(describe_part(i + 1, p) for i, p in enumerate(parts)),
        "",
        "A shared machine: wall times follow the other jobs, CPU times much less (the `load` column: 1-minute load "
        "average when the run started → ended, where recorded).",
        "",
        "Graphs: csbm (`--dataset csbm --dataset-option num_nodes=N --dataset-option avg_degree=D "
        "--dataset-option num_features=F`). One child process per run, one torch thread; CPU = user + system "
        "seconds of the child (`wait4`), peak = its peak RSS; net CPU = CPU minus the same part's `dataset` run's "
        "(interpreter, imports, graph generation). Training schedules (`--set`): "
        + "; ".join(f"{d}: {' '.join(SCHEDULES.get(d, [])) or 'defaults'}" for d in defenses)
        + ". Private defenses at ε = 1, non-private ones at ε = ∞. Attacks: `dpaudit audit --quick --attacks A` "
        f"of the {meta.get('audit', 'gap-edp')} model; `{WHOLE_AUDIT}`: one `dpaudit audit --quick` process.",
        "",
        "| graph | nodes | edges (undirected) | F | run | CPU s | net CPU s | wall s | peak MiB | load | part | outcome |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {c: i for i, c in enumerate(components)}
    for row in sorted(runs, key=lambda r: (r["series"] != "csbm", r["num_nodes"], order[r["component"]])):
        net = net_cpu(results, row)
        load = "→".join(f"{v:.1f}" for v in row["load"]) if row.get("load") else "-"
        lines.append(
            f"| {row['graph']} | {row['num_nodes']:,} | {row['undirected_edges']:,} | {row['num_features']} | "
            f"{row['component']} | {row['cpu_s']:.1f} | {'-' if net is None else f'{net:.1f}'} | {row['wall_s']:.1f} | "
            f"{row['peak_mib']:.0f} | {load} | {number.get(row.get('part'), '-')} | {outcome_text(row)} |"
        )
    whole = [r for r in runs if r.get("attacks")]
    if whole:
        lines += ["", f"## `{WHOLE_AUDIT}`: each attack's wall time (from the audit's own log)", ""]
        lines += [f"- {r['graph']}: " + "; ".join(f"{a} {how}" for a, how in r["attacks"].items()) for r in whole]
    lines += [
        "",
        "## Growth exponents over the csbm sizes (log-log least squares against edges)",
        "",
        "Over every size, fixed costs (interpreter, imports: ~3.5 CPU s and ~400 MiB) flatten the small end; the "
        "exponents over the three largest sizes are the ones to read.",
        "",
        "| run | sizes | net CPU exponent (all sizes) | net CPU exponent (3 largest) | peak memory exponent (3 largest) "
        "| net CPU s at the largest size |",
        "|---|---|---|---|---|---|",
    ]
    exponents = {}
    for component in components:
        series = [r for r in runs if r["component"] == component and r["series"] == "csbm" and r["outcome"] == "ok"]
        if component == "dataset":  # one per size: the last part's
            series = list({r["num_nodes"]: r for r in series}.values())
        series.sort(key=lambda r: r["num_nodes"])
        edges = [r["undirected_edges"] for r in series]
        if component == "dataset":
            cpu = [r["cpu_s"] for r in series]
        else:
            cpu = [net_cpu(results, r) for r in series]
        slope_cpu = loglog_slope(edges, cpu)
        top_cpu = loglog_slope(edges[-3:], cpu[-3:])
        top_mem = loglog_slope(edges[-3:], [r["peak_mib"] for r in series][-3:])
        exponents[component] = {
            "cpu_all_sizes": slope_cpu,
            "cpu_3_largest": top_cpu,
            "memory_3_largest": top_mem,
            "sizes": [r["num_nodes"] for r in series],
        }
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        largest = f"{cpu[-1]:.1f}" if cpu and cpu[-1] is not None else "-"
        sizes = ", ".join(f"{n // 1000} k" for n in exponents[component]["sizes"]) or "-"
        lines.append(f"| {component} | {sizes} | {fmt(slope_cpu)} | {fmt(top_cpu)} | {fmt(top_mem)} | {largest} |")
    results.data["exponents"] = exponents
    results.save()
    lines += ["", *(f"- {note}" for note in meta.get("notes", []))]
    return "\n".join(lines) + "\n"


def parse_part(entry: str) -> tuple[str, set[str] | None, bool]:
    """``[+]NAME[:RUN|RUN]``: the part's name; only those runs (besides its ``dataset`` runs),
    or ``None`` for all; and ``+``: the part adds sizes to the parts before it (measured on the
    same tree), so its rows replace only the same run at the same size."""
    adds = entry.startswith("+")
    name, _, only = entry.removeprefix("+").partition(":")
    return name, ({c.strip() for c in only.split("|") if c.strip()} if only else None), adds


def merge(entries: list[str], results: Results) -> None:
    """Join the parts ``entries`` (:func:`parse_part`, in order) into ``results``. A run measured
    in a later part replaces every row of that run (on that series: csbm sizes or shapes) from
    earlier parts, at every size: the tree changed in between, and a growth exponent fitted
    across two trees would mean nothing; a ``+`` part replaces only the sizes it measured. Every
    part's ``dataset`` runs stay, since each row's net CPU subtracts its own part's."""
    runs: list[dict] = []
    parts = []
    for entry in entries:
        name, only, adds = parse_part(entry)
        data = json.loads(result_path(name, ".json").read_text())
        for part in parts_of(data["meta"], name):
            parts.append({k: v for k, v in part.items() if k != "parts" and k != "notes"})
        taken = [
            {"part": name, **row}
            for row in data["runs"]
            if row["component"] == "dataset" or only is None or row["component"] in only
        ]
        if adds:
            measured = {
                (row["component"], row["series"], row["graph"]) for row in taken if row["component"] != "dataset"
            }
            runs = [row for row in runs if (row["component"], row["series"], row["graph"]) not in measured]
        else:
            measured = {(row["component"], row["series"]) for row in taken if row["component"] != "dataset"}
            runs = [row for row in runs if (row["component"], row["series"]) not in measured]
        runs += taken
    results.data["meta"]["parts"] = parts
    results.data["runs"] = runs


def machine() -> str:
    import torch

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"CPU {platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB RAM; torch {torch.__version__}"


def main() -> None:
    global RESULTS, PARTS  # a --smoke run's results go to its temporary folder
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", default="5000,20000,80000", help="csbm node counts (average degree 20, 128 features)"
    )
    parser.add_argument("--quick", action="store_true", help="csbm at 2 k, 4 k and 8 k nodes only")
    parser.add_argument("--shapes", default="", help=f"published shapes to run too: {', '.join(SHAPES)}")
    parser.add_argument("--defenses", default=",".join(DEFAULT_DEFENSES))
    parser.add_argument("--attacks", default=",".join(DEFAULT_ATTACKS))
    parser.add_argument("--audit", default="gap-edp", help="the defense whose model the attacks audit")
    parser.add_argument("--memory-cap-gib", type=float, default=22.0, help="address-space cap per child (0: none)")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="wall-clock limit per child")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the children")
    parser.add_argument(
        "--out",
        default=MERGED,
        help=f"results name: {MERGED} (results/{MERGED}.md/.json), any other NAME is a part "
        "(results/scale-parts/NAME.md/.json) for --merge",
    )
    parser.add_argument("--fresh", action="store_true", help="rerun the runs already in NAME.json")
    parser.add_argument("--note", action="append", default=[], help="a line to print under the tables (repeatable)")
    parser.add_argument("--dataset-only", action="store_true", help="generate each graph only (no training)")
    parser.add_argument("--render-only", action="store_true", help="rewrite NAME.md from NAME.json, run nothing")
    parser.add_argument("--retry-failed", action="store_true", help="rerun runs of NAME.json that crashed or timed out")
    parser.add_argument(
        "--whole-audit", action="store_true", help=f"also run `{WHOLE_AUDIT}`: one audit --quick process"
    )
    parser.add_argument(
        "--merge",
        default="",
        help="join these result names into NAME, run nothing (comma-separated; NAME:RUN|RUN takes only those runs; "
        "+NAME adds sizes measured on the same tree)",
    )
    parser.add_argument(
        "--work", default=str(Path(tempfile.gettempdir()) / "dpaudit-bench-scale"), help="where trained models go"
    )
    add_smoke_argument(parser, "one csbm graph of 300 nodes: dataset, train mlp-dp, audit mia-threshold")
    args = parser.parse_args()
    if args.smoke:
        RESULTS = start_smoke()
        PARTS = RESULTS / "scale-parts"
        args.quick, args.sizes, args.shapes, args.fresh, args.nice = False, "300", "", True, 0
        args.defenses, args.attacks, args.audit, args.work = "mlp-dp", "mia-threshold", "mlp-dp", str(RESULTS / "work")
    args.defenses = [d for d in args.defenses.split(",") if d]
    args.attacks = [a for a in args.attacks.split(",") if a]
    if args.audit not in args.defenses:
        parser.error(f"--audit {args.audit} must be one of --defenses")
    sizes = ["2000", "4000", "8000"] if args.quick else [s for s in args.sizes.split(",") if s.strip()]
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not all(s.strip().isdigit() for s in sizes):
        parser.error(f"sizes are node counts; shapes are {', '.join(SHAPES)}")
    PARTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": shlex.join(["python", "benchmarks/bench_scale.py", *sys.argv[1:]]),
        "machine": machine(),
        "versions": f"python {platform.python_version()}",
        "tree": tree_state(),
        "load_start": " ".join(f"{v:.1f}" for v in os.getloadavg()),
        "defenses": args.defenses,
        "audit": args.audit,
        "memory_cap_gib": args.memory_cap_gib or None,
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "notes": args.note,
    }
    merged = [m for m in args.merge.split(",") if m]
    results = Results(result_path(args.out, ".json"), args.fresh or bool(merged), meta)
    if merged:
        names = [parse_part(m)[0] for m in merged]
        missing = [m for m in names if not result_path(m, ".json").exists()]
        if missing or args.out in names:
            parser.error(f"--merge needs existing parts other than --out; missing: {', '.join(missing) or '-'}")
        merge(merged, results)
        result_path(args.out, ".md").write_text(render(results, args), encoding="utf-8")
        return
    if args.render_only:
        results.data["meta"] = json.loads(results.path.read_text())["meta"]
        results.data["meta"]["notes"] = args.note or results.data["meta"].get("notes", [])
        result_path(args.out, ".md").write_text(render(results, args), encoding="utf-8")
        return

    def log(message: str) -> None:
        print(time.strftime("%H:%M:%S"), message, flush=True)

    for label in [*sizes, *shapes]:
        measure_graph(graph_spec(label.strip()), args, results, log)
        results.data["meta"]["load_end"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
        result_path(args.out, ".md").write_text(render(results, args), encoding="utf-8")
    log(f"wrote {result_path(args.out, '.md')}")


if __name__ == "__main__":
    main()
