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
* ``say-why``: exits 0 and says once on stderr, up front, why a claim cannot be tested (an audit
  of the two public files: membership is the owner's record).

A refusal that reads ``nothing`` but the arguments (and what a defense's or attack's source
declares, read without importing it: :mod:`dpaudit.app.names`) must also be decided before torch,
torch_geometric, scipy or sklearn is imported (each process records what it imported); issue 49's
Python API cases (``adapt``, ``save``, ``to_html``) run as ``python -c`` and count a
:class:`~dpaudit.errors.DPAuditError` as the one line. ``--smoke`` runs only the refusals that
read nothing (seconds) and writes to a temporary folder, never to benchmarks/results.

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
    reads: str = "-"


#: run first in every process: at exit, write which heavy libraries the process imported to the
#: file named by DPAUDIT_BENCH_IMPORTS (outside the case's folder, so its files stay the user's)
_RECORD_IMPORTS = (
    "import atexit, json, os, sys\n"
    "def _record():\n"
    "    with open(os.environ['DPAUDIT_BENCH_IMPORTS'], 'w') as fh:\n"
    "        json.dump(sorted(m for m in ('torch', 'torch_geometric', 'scipy', 'sklearn') if m in sys.modules), fh)\n"
    "atexit.register(_record)\n"
)
#: ``dpaudit ARGV`` exactly as the installed command runs it, with the import record
_CLI = (
    _RECORD_IMPORTS
    + "import runpy\nsys.argv[0] = 'dpaudit'\nrunpy.run_module('dpaudit.app.cli', run_name='__main__')\n"
)
#: a Python API call (issue 49's adapt/save/to_html cases): a DPAuditError is the user's one line (exit 2)
_API = _RECORD_IMPORTS + (
    "from dpaudit.errors import DPAuditError\n"
    "try:\n"
    "    exec(compile(sys.argv[1], 'case', 'exec'))\n"
    "except DPAuditError as exc:\n"
    "    print(f'{type(exc).__name__}: {exc}', file=sys.stderr)\n"
    "    sys.exit(2)\n"
)


class Runner:
    def __init__(self, root: Path, work: Path):
        self.root, self.work = root, work
        self.env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
        self.imports: dict[int, list[str]] = {}  # pid -> heavy modules it imported
        self._record = work.parent / f"{work.name}-imports"
        self._record.mkdir(exist_ok=True)

    def start(self, argv: list[str], cwd: Path, api: str | None = None) -> subprocess.Popen:
        record = self._record / f"{len(list(self._record.iterdir()))}-{time.monotonic_ns()}.json"
        code = [_API, api] if api is not None else [_CLI, *argv]
        proc = subprocess.Popen(
            [sys.executable, "-c", *code],
            cwd=cwd,
            env={**self.env, "DPAUDIT_BENCH_IMPORTS": str(record)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        proc.record = record
        return proc

    def heavy(self, proc: subprocess.Popen) -> list[str] | None:
        """The heavy libraries ``proc`` imported (after it ended); ``None`` if it recorded nothing."""
        try:
            return json.loads(Path(proc.record).read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def run(self, argv: list[str], cwd: Path, api: str | None = None) -> tuple[int, str, str, float]:
        began = time.perf_counter()
        proc = self.start(argv, cwd, api)
        out, err = proc.communicate()
        self.last_heavy = self.heavy(proc)
        return proc.returncode, out, err, time.perf_counter() - began


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


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


TINY_TRAIN = [
    "--defense",
    "gcn",
    "--dataset",
    "csbm",
    "--dataset-option",
    "num_nodes=120",
    "--set",
    "epochs=2",
    "--device",
    "cpu",
]
STUDY = [
    "compare",
    "--dataset",
    "csbm",
    "--dataset-option",
    "num_nodes=200",
    "--defenses",
    "gcn,mlp",
    "--epsilons",
    "inf",
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


def refuse(
    runner: Runner,
    name: str,
    argv: list[str],
    folder: Path,
    reads: str = "data",
    api: str | None = None,
    shown: str | None = None,
) -> Outcome:
    """A refusal: exit 2, one line, no traceback, the folder's files unchanged. ``reads``: what
    deciding it needs — ``nothing`` (the arguments, and what a defense's or attack's source declares,
    :mod:`dpaudit.app.names`: refused before torch is imported, which the row checks) or ``data``."""
    before = _tree(folder)
    code, _, err, seconds = runner.run(argv, folder, api)
    lines = _lines(err)
    heavy = runner.last_heavy
    clean = code == 2 and len(lines) == 1 and "Traceback" not in err and _tree(folder) == before
    if reads == "nothing":
        clean = clean and heavy == []
    return Outcome(
        name,
        shown or "dpaudit " + " ".join(argv),
        "refuse",
        clean,
        seconds,
        lines[-1] if lines else "",
        {"exit": code, "stderr lines": len(lines), "files unchanged": _tree(folder) == before, "heavy imports": heavy},
        reads,
    )


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
    out.append(
        refuse(
            runner,
            "seed above 2**31",
            ["train", *TINY_TRAIN, "--seed", "99999999999999999999999", "--out", "m"],
            d,
            reads="nothing",
        )
    )
    d = folder("split-garbage")
    out.append(
        refuse(runner, "compare --split garbage", [*STUDY, "--split", "garbage", "--out", "s"], d, reads="nothing")
    )
    d = folder("split-too-big")
    _graph(d / "G.npz")
    out.append(
        refuse(
            runner,
            "compare split larger than the graph",
            [
                *STUDY[:1],
                "--dataset",
                "G.npz",
                "--dataset-option",
                "declare_classes=0,1",
                *STUDY[5:],
                "--split",
                "per-class:1000,10,10",
                "--out",
                "s",
            ],
            d,
        )
    )
    d = folder("demo-over-compare")
    shutil.copytree(study, d / "demo-out")
    out.append(refuse(runner, "demo over a compare study", ["demo", "--jobs", "1"], d, reads="nothing"))
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
        out.append(
            Outcome(
                f"report: {how} line in results.jsonl",
                f"dpaudit report s  ({how} line)",
                "skip-line",
                clean,
                seconds,
                said[0] if said else (_lines(err) or [""])[-1],
                {"exit": code},
            )
        )
    d = folder("two-trains")
    procs = [runner.start(["train", *TINY_TRAIN, "--out", "same/m"], d) for _ in range(2)]
    began = time.perf_counter()
    results = [(p.wait(), p.communicate()[1]) for p in procs]
    seconds = time.perf_counter() - began
    codes = sorted(code for code, _ in results)
    loser = [err for code, err in results if code == 2]
    complete = (d / "same" / "m" / "model.json").is_file()
    clean = complete and (codes == [0, 0] or (codes == [0, 2] and len(_lines(loser[0])) == 1))
    out.append(
        Outcome(
            "two trains to one --out",
            "dpaudit train … --out same/m  (twice, at once)",
            "one-wins",
            clean,
            seconds,
            (_lines(loser[0]) or [""])[-1] if loser else "both finished (one waited)",
            {"exits": codes},
        )
    )
    d = folder("text-npz")
    (d / "g.npz").write_text("hello, this is text\n")
    out.append(
        refuse(
            runner,
            "a text file named .npz",
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                "g.npz",
                "--dataset-option",
                "declare_classes=0,1",
                "--out",
                "m",
            ],
            d,
        )
    )
    d = folder("labels-declared")
    _graph(d / "g.npz", labels=[0, 5, 17])
    code, _, err, seconds = runner.run(
        [
            "train",
            "--defense",
            "gcn",
            "--dataset",
            "g.npz",
            "--dataset-option",
            "declare_classes=0,5,17",
            "--set",
            "epochs=2",
            "--out",
            "m",
        ],
        d,
    )
    card = json.loads((d / "m" / "model.json").read_text()) if code == 0 else {}
    classes = card.get("card", {}).get("dataset", {}).get("public_facts", {}).get("classes")
    out.append(
        Outcome(
            "labels {0, 5, 17}, declared",
            "dpaudit train … --dataset-option declare_classes=0,5,17",
            "accept",
            code == 0 and "Traceback" not in err and classes == [0, 5, 17],
            seconds,
            f"card.dataset.public_facts.classes = {classes}",
            {"exit": code},
        )
    )
    d = folder("three-labeled")
    _graph(d / "g.npz", labeled=3)
    out.append(
        refuse(
            runner,
            "a graph with 3 labeled nodes",
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                "g.npz",
                "--dataset-option",
                "declare_classes=0,1",
                "--out",
                "m",
            ],
            d,
        )
    )
    d = folder("empty-attacks")
    out.append(
        refuse(
            runner,
            "audit --attacks ''",
            ["audit", "--model", str(model), "--attacks", "", "--out", "a.html"],
            d,
            reads="nothing",
        )
    )
    d = folder("report-no-report")
    out.append(
        refuse(
            runner, "compare --report X --no-report", [*STUDY, "--report", "X.html", "--out", "s"], d, reads="nothing"
        )
    )
    d = folder("two-audits")
    argv = [
        "audit",
        "--model",
        str(model),
        "--attacks",
        "mia-threshold",
        "--attack-set",
        "n_boot=50",
        "--out",
        "same.html",
    ]
    procs = [runner.start(argv, d) for _ in range(2)]
    began = time.perf_counter()
    results = [(p.wait(), p.communicate()[1]) for p in procs]
    seconds = time.perf_counter() - began
    codes = sorted(code for code, _ in results)
    loser = [err for code, err in results if code == 2]
    clean = (d / "same.html").is_file() and (codes == [0, 0] or (codes == [0, 2] and len(_lines(loser[0])) == 1))
    out.append(
        Outcome(
            "two audits to one --out",
            "dpaudit audit … --out same.html  (twice, at once)",
            "one-wins",
            clean,
            seconds,
            (_lines(loser[0]) or [""])[-1] if loser else "both finished (one waited)",
            {"exits": codes},
        )
    )
    out += declaration_refusals(runner, folder, model)
    out += issue_49(runner, folder, model, private_model(runner, fixtures), study)
    out += argument_refusals(runner, folder)
    return out


def no_data_refusals(runner: Runner) -> list[Outcome]:
    """Every refusal of the table that reads nothing but its arguments, with the least fixture
    each needs (a missing model, a study.json another command made): ``--smoke`` and
    tests/benchmarks/test_bench_bad_inputs.py run these, each checked to import no heavy library."""
    out: list[Outcome] = []

    def folder(name: str) -> Path:
        path = runner.work / name
        path.mkdir()
        return path

    out.append(
        refuse(
            runner,
            "seed above 2**31",
            ["train", *TINY_TRAIN, "--seed", "99999999999999999999999", "--out", "m"],
            folder("seed"),
            reads="nothing",
        )
    )
    out.append(
        refuse(
            runner,
            "compare --split garbage",
            [*STUDY, "--split", "garbage", "--out", "s"],
            folder("split-garbage"),
            reads="nothing",
        )
    )
    d = folder("demo-over-compare")
    (d / "demo-out").mkdir()
    (d / "demo-out" / "study.json").write_text(json.dumps({"schema": "dpaudit.study", "made_by": "compare"}))
    out.append(refuse(runner, "demo over a compare study", ["demo", "--jobs", "1"], d, reads="nothing"))
    out.append(
        refuse(
            runner,
            "audit --attacks ''",
            ["audit", "--model", "model", "--attacks", "", "--out", "a.html"],
            folder("empty-attacks"),
            reads="nothing",
        )
    )
    out.append(
        refuse(
            runner,
            "compare --report X --no-report",
            [*STUDY, "--report", "X.html", "--out", "s"],
            folder("report-no-report"),
            reads="nothing",
        )
    )
    out.append(
        refuse(
            runner,
            "compare --seeds 1000000",
            [
                "compare",
                "--dataset",
                "csbm",
                "--defenses",
                "gcn",
                "--epsilons",
                "inf",
                "--seeds",
                "1000000",
                "--out",
                "s",
            ],
            folder("seeds"),
            reads="nothing",
        )
    )
    for value in ("-1", "0", "nan"):
        out.append(
            refuse(
                runner,
                f"train --epsilon {value}",
                ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", value, "--out", "m"],
                folder(f"epsilon-{value}"),
                reads="nothing",
            )
        )
    out += declaration_refusals(runner, folder, Path("model"))
    out += argument_refusals(runner, folder)
    return out


def declaration_refusals(runner: Runner, folder, model: Path) -> list[Outcome]:
    """Refusals decided by what a defense's or an attack's source declares (its privacy unit, its
    settings; :mod:`dpaudit.app.names`) and the arguments: before torch too (issue 49). ``model``
    need not exist: the count is refused before the model is read."""
    d = folder("labels-undeclared")
    _graph(d / "g.npz", labels=[0, 5, 17])
    return [
        refuse(
            runner,
            "attack count above its cap",
            [
                "attack",
                "--model",
                str(model),
                "--attack",
                "mia-rmia",
                "--attack-set",
                "num_references=100000",
                "--out",
                "r.json",
            ],
            folder("rmia-cap"),
            reads="nothing",
        ),
        refuse(
            runner,
            "labels {0, 5, 17}, undeclared",
            ["train", "--defense", "gcn", "--dataset", "g.npz", "--out", "m"],
            d,
            reads="nothing",
        ),
        refuse(
            runner,
            "audit count above its cap",
            ["audit", "--model", str(model), "--attack-set", "mia-rmia.num_references=100000", "--out", "a.html"],
            folder("audit-cap"),
            reads="nothing",
        ),
        refuse(
            runner,
            "compare --defenses gcn --epsilons 1",
            ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "1", "--out", "s"],
            folder("compare-gcn-eps"),
            reads="nothing",
        ),
    ]


def argument_refusals(runner: Runner, folder) -> list[Outcome]:
    """Refusals of a bad δ or split syntax (not in issue 40's or 49's lists; the same rule)."""
    return [
        refuse(
            runner,
            "train --delta 2",
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "1", "--delta", "2", "--out", "m"],
            folder("delta-2"),
            reads="nothing",
        ),
        refuse(
            runner,
            "train --split nope",
            ["train", "--defense", "gcn", "--dataset", "csbm", "--split", "nope", "--out", "m"],
            folder("split-nope"),
            reads="nothing",
        ),
        refuse(
            runner,
            "canary --epsilon nan",
            [
                "canary",
                "--defense",
                "mlp-dp",
                "--dataset",
                "csbm",
                "--epsilon",
                "nan",
                "--kind",
                "node",
                "--out",
                "c.json",
            ],
            folder("canary-nan"),
            reads="nothing",
        ),
    ]


def private_model(runner: Runner, fixtures: Path) -> Path:
    """A tiny private model (mlp-dp, ε = 4): its privacy spec records declared facts."""
    code, _, err, _ = runner.run(
        [
            "train",
            "--defense",
            "mlp-dp",
            "--dataset",
            "csbm",
            "--dataset-option",
            "num_nodes=200",
            "--epsilon",
            "4",
            "--set",
            "epochs=1",
            "--out",
            "private",
        ],
        fixtures,
    )
    if code != 0:
        raise SystemExit(f"could not train the private fixture model: {err.strip().splitlines()[-1:]}")
    return fixtures / "private"


#: a module and a graph for the adapt() cases (a csbm graph of 90 nodes and 3 classes)
_ADAPT = (
    "import torch\n"
    "from dpaudit.data.datasets import load_dataset\n"
    "from dpaudit.training.adapters import adapt\n"
    "graph = load_dataset('csbm', num_nodes=90, num_classes=3, num_features=8, seed=0)\n"
    "torch.manual_seed(0)\n"
)


def issue_49(runner: Runner, folder, model: Path, private: Path, study: Path) -> list[Outcome]:
    """Issue 49's twelve cases (BAD 1–8, PARTIAL 1–4) and its slow refusals of ε."""
    out: list[Outcome] = []
    d = folder("delta-above-1-over-n")
    out.append(
        refuse(
            runner,
            "δ ≥ 1/n (train --delta 0.5)",
            [
                "train",
                "--defense",
                "mlp-dp",
                "--dataset",
                "csbm",
                "--epsilon",
                "4",
                "--delta",
                "0.5",
                "--set",
                "epochs=1",
                "--out",
                "m",
            ],
            d,
        )
    )
    d = folder("label-minus-five")
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    y[:3] = -5
    np.savez(
        d / "g.npz", x=rng.standard_normal((300, 8)).astype(np.float32), y=y, edge_index=rng.integers(0, 300, (2, 1200))
    )
    out.append(
        refuse(
            runner,
            "y = -5 on 3 nodes of a .npz",
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                "g.npz",
                "--dataset-option",
                "declare_classes=3",
                "--set",
                "epochs=1",
                "--out",
                "m",
            ],
            d,
        )
    )
    d = folder("edited-facts")
    shutil.copytree(private, d / "m")
    meta = json.loads((d / "m" / "model.json").read_text())
    meta["privacy"]["public_facts"]["num_nodes"] = 10
    (d / "m" / "model.json").write_text(json.dumps(meta, indent=1))
    out.append(refuse(runner, "inspect: public_facts.num_nodes edited to 10", ["inspect", "m"], d))
    d = folder("compare-seeds")
    out.append(
        refuse(
            runner,
            "compare --seeds 1000000",
            [
                "compare",
                "--dataset",
                "csbm",
                "--defenses",
                "gcn",
                "--epsilons",
                "inf",
                "--seeds",
                "1000000",
                "--out",
                "s",
            ],
            d,
            reads="nothing",
        )
    )
    d = folder("adapt-width")
    out.append(
        refuse(
            runner,
            "adapt(): 5 outputs on a 3-class graph",
            [],
            d,
            api=_ADAPT + "adapt(torch.nn.Linear(8, 5), graph, train_nodes=range(40), input='features')",
            shown="adapt(Linear(8, 5), <3-class graph>, input='features')",
        )
    )
    d = folder("adapt-proba")
    out.append(
        refuse(
            runner,
            "adapt(output='proba') of logits",
            [],
            d,
            api=_ADAPT + "adapt(torch.nn.Linear(8, 3), graph, train_nodes=range(40), input='features', output='proba')",
            shown="adapt(Linear(8, 3), ..., output='proba')",
        )
    )
    d = folder("save-twice")
    save = (
        _ADAPT + "m = adapt(torch.nn.Linear(8, 3), graph, train_nodes=range(40), input='features', "
        "privacy={'epsilon': 2.0, 'delta': 1e-4, 'unit': 'node'})\nm.save('m')\n"
    )
    code, _, err, _ = runner.run([], d, api=save)
    if code != 0:
        raise SystemExit(f"could not save the adapted model: {_lines(err)[-1:]}")
    out.append(refuse(runner, "model.save(path) twice", [], d, api=save, shown="model.save('m'); model.save('m')"))
    d = folder("audit-public-files")
    (d / "m").mkdir()
    shutil.copy(model / "model.json", d / "m" / "model.json")
    shutil.copy(model / "model.safetensors", d / "m" / "model.safetensors")
    code, _, err, seconds = runner.run(
        ["audit", "--model", "m", "--attacks", "mia-threshold", "--attack-set", "n_boot=50", "--out", "a.html"], d
    )
    said = [line for line in _lines(err) if "owner's record" in line]
    clean = code == 0 and "Traceback" not in err and len(said) == 1 and "adapted model" not in err
    out.append(
        Outcome(
            "audit of the two shipped files (no provenance.json)",
            "dpaudit audit --model DIR  (public files only)",
            "say-why",
            clean,
            seconds,
            said[0] if said else (_lines(err) or [""])[-1],
            {"exit": code, "lines saying why": len(said)},
        )
    )
    d = folder("adapt-claim")
    out.append(
        refuse(
            runner,
            "adapt(privacy={'epsilon': -1, ...})",
            [],
            d,
            api=_ADAPT + "adapt(torch.nn.Linear(8, 3), graph, train_nodes=range(40), input='features', "
            "privacy={'epsilon': -1, 'delta': 1e-4, 'unit': 'node'})",
            shown="adapt(..., privacy={'epsilon': -1, 'delta': 1e-4, 'unit': 'node'})",
        )
    )
    d = folder("to-html-proc")
    out.append(
        refuse(
            runner,
            "StudyResult.to_html('/proc/x.html')",
            [],
            d,
            api=(
                "from dpaudit.app.workflows.study import StudyResult\n"
                f"StudyResult.load({str(study)!r}).to_html('/proc/x.html')"
            ),
            shown="StudyResult.load(S).to_html('/proc/x.html')",
        )
    )
    d = folder("canary-count")
    out.append(
        refuse(
            runner,
            "canary --canaries 100000000",
            [
                "canary",
                "--defense",
                "gcn",
                "--dataset",
                "csbm",
                "--kind",
                "node",
                "--canaries",
                "100000000",
                "--out",
                "c.json",
            ],
            d,
        )
    )
    for value in ("-1", "0", "nan"):
        d = folder(f"epsilon-{value}")
        out.append(
            refuse(
                runner,
                f"train --epsilon {value}",
                ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", value, "--out", "m"],
                d,
                reads="nothing",
            )
        )
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:220]


def write(outcomes: list[Outcome], root: Path) -> str:
    clean = sum(o.clean for o in outcomes)
    load = os.getloadavg()[0]
    lines = [
        "# Unusual inputs, rerun end to end (issues 40 and 49)",
        "",
        f"Written by `benchmarks/bench_bad_inputs.py` on checkout `{root}`; {os.cpu_count()} CPUs, "
        f"load {load:.1f} at the end. **{clean} of {len(outcomes)} cases clean** "
        f"({sum(o.expect == 'refuse' for o in outcomes)} refusals, "
        f"{sum(o.expect == 'accept' for o in outcomes)} accepted, "
        f"{sum(o.expect == 'skip-line' for o in outcomes)} skipped lines, "
        f"{sum(o.expect == 'one-wins' for o in outcomes)} concurrent writers, "
        f"{sum(o.expect == 'say-why' for o in outcomes)} said up front). "
        "What clean means per kind is in the script's docstring. Seconds are wall time of a fresh "
        "interpreter on a shared machine. *reads*: what deciding a refusal needs — `nothing` (the "
        "arguments, and what a defense's or attack's source declares: its privacy unit, its settings, read "
        "without importing it; clean only if the process never imported torch, torch_geometric, scipy or "
        "sklearn) or `data` (a graph, a model or a Python module the user gave); *heavy*: what the "
        "process imported of those four. "
        f"**{sum(o.reads == 'nothing' and o.detail.get('heavy imports') == [] for o in outcomes)} of "
        f"{sum(o.reads == 'nothing' for o in outcomes)} refusals that read no data imported none of them.**",
        "",
        "| case | expected | clean | reads | heavy | s | what the user sees |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        heavy = o.detail.get("heavy imports")
        heavy = "-" if heavy is None else (", ".join(heavy) or "none")
        lines.append(
            f"| {_cell(o.name)} | {o.expect} | {'yes' if o.clean else 'NO ' + _cell(json.dumps(o.detail))} "
            f"| {o.reads} | {heavy} | {o.seconds:.1f} | {_cell(o.message)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    parser.add_argument("--out", type=Path, default=None, help=f"default {RESULTS.relative_to(ROOT)}")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="only the refusals that read nothing (seconds); writes to a temporary folder unless --out is given",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dpaudit-bad-inputs-") as tmp:
        work = Path(tmp) / "cases"
        work.mkdir()
        runner = Runner(args.root.resolve(), work)
        outcomes = no_data_refusals(runner) if args.smoke else cases(runner)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="dpaudit-bench-smoke-")) / RESULTS.name if args.smoke else RESULTS
    text = write(outcomes, args.root.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".md.partial")
    partial.write_text(text)
    partial.replace(args.out)
    print(text)
    return 0 if all(o.clean for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
