"""The unusual-input table of issue 40, rerun against the real command line.

python benchmarks/bench_bad_inputs.py            # every case, fresh interpreters, in a temporary folder
python benchmarks/bench_bad_inputs.py --root R   # another checkout (e.g. before a change)

Each case is one or two ``python -m dpaudit.app.cli …`` processes (the installed ``dpaudit``
command is the same entry point). A case is **clean** when it ends the way its row expects:

* ``refuse``: exit 2, exactly one non-empty line on stderr, no traceback, and nothing of the
  user's created or changed (the files under the case's folder are hashed before and after);
* ``accept``: exit 0 and no traceback (a right input that looks odd, e.g. labels {0, 5, 17} once
  declared);
* ``skip-line``: ``report`` exits 0, renders, and says which line of ``results.jsonl`` it could
  not read (its line number on stderr);
* ``one-wins``: two writers to one ``--out`` started together: exactly one exits 0, the other
  exits 2 in one line naming the first, or both exit 0 because the second waited (never two
  silent successes that replace each other's files — the surviving model must be complete).

Writes ``benchmarks/results/bad_inputs.md`` with the command, the outcome, the seconds (wall)
and the message of each case, and the counts. Tests assert the same behaviours on the Python
entry point (``tests/dpaudit/app/test_bad_inputs.py``); this script is the end-to-end rerun a
reviewer can read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bad_inputs.md"


@dataclass
class Outcome:
    name: str
    command: str
    expect: str
    clean: bool
    seconds: float
    message: str
    detail: dict = field(default_factory=dict)


class Runner:
    def __init__(self, root: Path, work: Path):
        self.root, self.work = root, work
        self.env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}

    def start(self, argv: list[str], cwd: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "dpaudit.app.cli", *argv], cwd=cwd, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

    def run(self, argv: list[str], cwd: Path) -> tuple[int, str, str, float]:
        began = time.perf_counter()
        proc = self.start(argv, cwd)
        out, err = proc.communicate()
        return proc.returncode, out, err, time.perf_counter() - began


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def _lines(err: str) -> list[str]:
    return [line for line in err.strip().splitlines() if line.strip()]


def _graph(path: Path, num_nodes: int = 200, labeled: int | None = None, labels=None, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    y = np.arange(num_nodes) % 2 if labels is None else np.asarray(labels)[np.arange(num_nodes) % len(labels)]
    if labeled is not None:
        y[labeled:] = -1
    edges = rng.integers(0, num_nodes, (2, 4 * num_nodes))
    np.savez(path, x=rng.standard_normal((num_nodes, 8)).astype(np.float32), y=y, edge_index=edges)
    return path


TINY_TRAIN = ["--defense", "gcn", "--dataset", "csbm", "--dataset-option", "num_nodes=120", "--set", "epochs=2",
              "--device", "cpu"]  # fmt: skip
STUDY = ["compare", "--dataset", "csbm", "--dataset-option", "num_nodes=200", "--defenses", "gcn,mlp",
         "--epsilons", "inf", "--attacks", "mia-threshold", "--set", "epochs=2", "--attack-set", "n_boot=50",
         "--jobs", "1", "--no-report"]  # fmt: skip


def refuse(runner: Runner, name: str, argv: list[str], folder: Path) -> Outcome:
    before = _tree(folder)
    code, _, err, seconds = runner.run(argv, folder)
    lines = _lines(err)
    clean = code == 2 and len(lines) == 1 and "Traceback" not in err and _tree(folder) == before
    return Outcome(name, "dpaudit " + " ".join(argv), "refuse", clean, seconds, lines[-1] if lines else "",
                   {"exit": code, "stderr lines": len(lines), "files unchanged": _tree(folder) == before})


def cases(runner: Runner) -> list[Outcome]:
    work = runner.work
    out: list[Outcome] = []

    def folder(name: str) -> Path:
        path = work / name
        path.mkdir()
        return path

    # shared fixtures: a tiny model and a finished two-cell study (the user's)
    fixtures = folder("fixtures")
    code, _, err, _ = runner.run(["train", *TINY_TRAIN, "--out", "model"], fixtures)
    if code != 0:
        raise SystemExit(f"could not train the fixture model: {err.strip().splitlines()[-1:]}")
    model = fixtures / "model"
    code, _, err, _ = runner.run([*STUDY, "--out", "study"], fixtures)
    if code != 0:
        raise SystemExit(f"could not run the fixture study: {err.strip().splitlines()[-1:]}")
    study = fixtures / "study"

    d = folder("seed")
    out.append(refuse(runner, "seed above 2**31", ["train", *TINY_TRAIN, "--seed", "99999999999999999999999",
                                                   "--out", "m"], d))  # fmt: skip
    d = folder("rmia-cap")
    out.append(refuse(runner, "attack count above its cap", ["attack", "--model", str(model), "--attack", "mia-rmia",
                      "--attack-set", "num_references=100000", "--out", "r.json"], d))  # fmt: skip
    d = folder("split-garbage")
    out.append(refuse(runner, "compare --split garbage", [*STUDY, "--split", "garbage", "--out", "s"], d))
    d = folder("split-too-big")
    _graph(d / "G.npz")
    out.append(refuse(runner, "compare split larger than the graph",
                      [*STUDY[:1], "--dataset", "G.npz", "--dataset-option", "declare_classes=0,1", *STUDY[5:],
                       "--split", "per-class:1000,10,10", "--out", "s"], d))  # fmt: skip
    d = folder("demo-over-compare")
    shutil.copytree(study, d / "demo-out")
    out.append(refuse(runner, "demo over a compare study", ["demo", "--jobs", "1"], d))
    for how in ("banana", "truncated", "corrupted"):
        d = folder(f"report-{how}")
        shutil.copytree(study, d / "s")
        path = d / "s" / "results.jsonl"
        lines = path.read_text().splitlines()
        if how == "banana":
            record = json.loads(lines[1])
            record["epsilon"] = "banana"
            lines[1] = json.dumps(record)
            path.write_text("\n".join(lines) + "\n")
        elif how == "truncated":
            path.write_text("\n".join([*lines[:1], lines[1][:80]]))
        else:
            lines[0] = lines[0][:40] + "#" + lines[0][41:]
            path.write_text("\n".join(lines) + "\n")
        code, _, err, seconds = runner.run(["report", "s", "--out", "r.html"], d)
        said = [line for line in _lines(err) if "results.jsonl" in line and "line" in line]
        clean = code == 0 and "Traceback" not in err and (d / "r.html").is_file() and bool(said)
        out.append(Outcome(f"report: {how} line in results.jsonl", f"dpaudit report s  ({how} line)",
                           "skip-line", clean, seconds, said[0] if said else (_lines(err) or [""])[-1],
                           {"exit": code}))  # fmt: skip
    d = folder("two-trains")
    procs = [runner.start(["train", *TINY_TRAIN, "--out", "same/m"], d) for _ in range(2)]
    began = time.perf_counter()
    results = [(p.wait(), p.communicate()[1]) for p in procs]
    seconds = time.perf_counter() - began
    codes = sorted(code for code, _ in results)
    loser = [err for code, err in results if code == 2]
    complete = (d / "same" / "m" / "model.json").is_file()
    clean = complete and (codes == [0, 0] or (codes == [0, 2] and len(_lines(loser[0])) == 1))
    out.append(Outcome("two trains to one --out", "dpaudit train … --out same/m  (twice, at once)", "one-wins",
                       clean, seconds, (_lines(loser[0]) or [""])[-1] if loser else "both finished (one waited)",
                       {"exits": codes}))  # fmt: skip
    d = folder("text-npz")
    (d / "g.npz").write_text("hello, this is text\n")
    out.append(refuse(runner, "a text file named .npz", ["train", "--defense", "gcn", "--dataset", "g.npz",
                      "--dataset-option", "declare_classes=0,1", "--out", "m"], d))  # fmt: skip
    d = folder("labels-undeclared")
    _graph(d / "g.npz", labels=[0, 5, 17])
    out.append(refuse(runner, "labels {0, 5, 17}, undeclared", ["train", "--defense", "gcn", "--dataset", "g.npz",
                      "--out", "m"], d))  # fmt: skip
    d = folder("labels-declared")
    _graph(d / "g.npz", labels=[0, 5, 17])
    code, _, err, seconds = runner.run(["train", "--defense", "gcn", "--dataset", "g.npz", "--dataset-option",
                                        "declare_classes=0,5,17", "--set", "epochs=2", "--out", "m"], d)  # fmt: skip
    card = json.loads((d / "m" / "model.json").read_text()) if code == 0 else {}
    classes = card.get("card", {}).get("dataset", {}).get("public_facts", {}).get("classes")
    out.append(Outcome("labels {0, 5, 17}, declared", "dpaudit train … --dataset-option declare_classes=0,5,17",
                       "accept", code == 0 and "Traceback" not in err and classes == [0, 5, 17], seconds,
                       f"card.dataset.public_facts.classes = {classes}", {"exit": code}))  # fmt: skip
    d = folder("three-labeled")
    _graph(d / "g.npz", labeled=3)
    out.append(refuse(runner, "a graph with 3 labeled nodes", ["train", "--defense", "gcn", "--dataset", "g.npz",
                      "--dataset-option", "declare_classes=0,1", "--out", "m"], d))  # fmt: skip
    d = folder("empty-attacks")
    out.append(refuse(runner, "audit --attacks ''", ["audit", "--model", str(model), "--attacks", "",
                                                     "--out", "a.html"], d))  # fmt: skip
    d = folder("audit-cap")
    out.append(refuse(runner, "audit count above its cap", ["audit", "--model", str(model), "--attack-set",
                      "mia-rmia.num_references=100000", "--out", "a.html"], d))  # fmt: skip
    d = folder("report-no-report")
    out.append(refuse(runner, "compare --report X --no-report", [*STUDY, "--report", "X.html", "--out", "s"], d))
    d = folder("two-audits")
    argv = ["audit", "--model", str(model), "--attacks", "mia-threshold", "--attack-set", "n_boot=50",
            "--out", "same.html"]  # fmt: skip
    procs = [runner.start(argv, d) for _ in range(2)]
    began = time.perf_counter()
    results = [(p.wait(), p.communicate()[1]) for p in procs]
    seconds = time.perf_counter() - began
    codes = sorted(code for code, _ in results)
    loser = [err for code, err in results if code == 2]
    clean = (d / "same.html").is_file() and (codes == [0, 0] or (codes == [0, 2] and len(_lines(loser[0])) == 1))
    out.append(Outcome("two audits to one --out", "dpaudit audit … --out same.html  (twice, at once)", "one-wins",
                       clean, seconds, (_lines(loser[0]) or [""])[-1] if loser else "both finished (one waited)",
                       {"exits": codes}))  # fmt: skip
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:220]


def write(outcomes: list[Outcome], root: Path) -> str:
    clean = sum(o.clean for o in outcomes)
    load = os.getloadavg()[0]
    lines = [
        "# Unusual inputs, rerun end to end (issue 40's table)",
        "",
        f"Written by `benchmarks/bench_bad_inputs.py` on checkout `{root}`; {os.cpu_count()} CPUs, "
        f"load {load:.1f} at the end. **{clean} of {len(outcomes)} cases clean** "
        f"({sum(o.expect == 'refuse' for o in outcomes)} refusals, "
        f"{sum(o.expect == 'accept' for o in outcomes)} accepted, "
        f"{sum(o.expect == 'skip-line' for o in outcomes)} skipped lines, "
        f"{sum(o.expect == 'one-wins' for o in outcomes)} concurrent writers). "
        "What clean means per kind is in the script's docstring. Seconds are wall time of a fresh "
        "interpreter on a shared machine.",
        "",
        "| case | expected | clean | s | what the user sees |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(f"| {_cell(o.name)} | {o.expect} | {'yes' if o.clean else 'NO ' + _cell(json.dumps(o.detail))} "
                     f"| {o.seconds:.1f} | {_cell(o.message)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dpaudit-bad-inputs-") as tmp:
        outcomes = cases(Runner(args.root.resolve(), Path(tmp)))
    text = write(outcomes, args.root.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".md.partial")
    partial.write_text(text)
    partial.replace(args.out)
    print(text)
    return 0 if all(o.clean for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
