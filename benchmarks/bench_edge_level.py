"""Edge-level defenses against the graph's gain (issue 50): does ``protocol=sound`` keep half of
what the graph gives?

For each (dataset, split) label of :data:`SPLITS`, each ε of ``--epsilons`` and each seed, one fit
per cell through the registry, tested on the split's test nodes as :func:`bench_honest.fit_and_test`
answers them (the deployment each answer is computed over, and whether the model's ε covers it
there, are read from the model's card: :func:`dpaudit.release.deployments.deployment_entry`):

* ``mlp`` and ``gcn`` at ε = ∞, ``select=validation`` — the tuned references (the best candidate of
  their public grid on validation nodes, :mod:`defenses.baselines.nonprivate`);
* ``feature-graph`` — the public feature graph alone, no private edge (:func:`feature_graph_reference`:
  logistic regression on :class:`~dpaudit.data.feature_graph.FeatureSmoothing` features), the part of
  a sound cell that edge-level DP gives for free;
* ``gap-edp`` and ``gcon`` under ``sound`` (the registry defaults, every step accounted) and
  ``paper`` (the authors' protocol, ``sound: false``).

A row's graph **helps** where tuned GCN ≥ tuned MLP + 0.10; there the goal at ε = 4 is
``sound − tuned MLP ≥ ½ (tuned GCN − tuned MLP)``; elsewhere ``sound ≥ tuned MLP − one seed std``
(the larger of the two rows' stds). Each check prints its margin.

Each fit runs in a forked child under a per-fit CPU-time budget (``--fit-budget``, 120 CPU s): a cell
that runs out is stored as ``not run`` with the measured time, and the cell's other seeds are not
started. Every finished cell is stored at once in ``benchmarks/results/edge_level.json`` (atomic
writes), keyed ``label|defense|configuration|ε|seed``; a rerun fills only the gaps (``--no-resume``
starts over, ``--forget DEFENSE:CONFIGURATION`` drops one column's runs, e.g. after its defaults
changed). The markdown ``edge_level.md`` is rewritten from the store after every cell.

Full run::

    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/bench_edge_level.py

Filters: ``--datasets``, ``--defenses`` (``mlp gcn feature-graph gap-edp gcon``), ``--configurations``
(``sound paper``), ``--epsilons``, ``--seeds``; ``--write-only`` re-renders the markdown;
``--smoke`` runs a tiny generated graph in seconds (a temporary folder, never benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _harness import add_smoke_argument, results_dir, start_smoke, tree_state  # noqa: E402
from bench_honest import fit_and_test, one_line  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

import defenses  # noqa: E402,F401  (registers the defenses)
from dpaudit.data.datasets import load_dataset  # noqa: E402
from dpaudit.data.feature_graph import FeatureSmoothing  # noqa: E402
from dpaudit.data.splits import make_split  # noqa: E402
from dpaudit.runtime import atomic_write_json, atomic_write_text  # noqa: E402

log = logging.getLogger("bench_edge_level")

STORE_VERSION = 1
#: (dataset, split) label → (registry dataset name, split spec). GCON's split of cora_ml is
#: ``per-class:20,500,1000`` (issue 41); Planetoid Cora's and Texas' standard (public) splits.
SPLITS: dict[str, tuple[str, str]] = {
    "johnshopkins55:year": ("johnshopkins55:year", "random:0.75,0.1,0.15"),
    "cora_ml@per-class": ("cora_ml", "per-class:20,500,1000"),
    "cora_ml@random": ("cora_ml", "random:0.75,0.1,0.15"),
    "cora": ("cora", "public"),
    "actor": ("actor", "random:0.6,0.2,0.2"),
    "texas": ("texas", "public"),
}
SMOKE_LABEL = "csbm"
SMOKE_SPLIT = ("csbm", "random:0.6,0.2,0.2")
DATASET_OPTIONS = {"csbm": {"num_nodes": 120, "num_classes": 3, "num_features": 8, "seed": 0}}
#: the public feature graph alone (no private edge read): a linear model on
#: :class:`~dpaudit.data.feature_graph.FeatureSmoothing` features, computed here (not a registry defense)
FEATURE_GRAPH = "feature-graph"
REFERENCES = ("mlp", "gcn", FEATURE_GRAPH)
#: inverse L2 strengths of the feature-graph reference's logistic regression (best on validation nodes)
FEATURE_GRAPH_C = (0.1, 1.0, 10.0)
PRIVATE = ("gap-edp", "gcon")
CONFIGURATIONS = {"sound": {}, "paper": {"protocol": "paper"}}
TUNED = "tuned"
HELPS = 0.10
GOAL_EPSILON = 4.0


#: measured (``defenses/gap``, issue 50): why sound gap-edp keeps the graph's gain on a dense graph
#: and not on a sparse one with few labels
#: what the sound defaults read and the limits measured where a row misses (issue 50), printed under the table
LIMITS = [
    "- **What both sound defaults read for free.** Edge-level DP leaves features and labels public, so each "
    "feature-only encoder may take as input the features smoothed over their own kNN graph "
    "(`dpaudit.data.feature_graph`), a choice fixed in advance and made by the encoder's own validation accuracy. "
    "The *feature graph (public, linear)* column is what that alone gives a linear model: on cora_ml per-class and "
    "Cora it is most of the way to the goal (0.721 and 0.667 against goals 0.723 and 0.696), so there the part of a "
    "sound cell above that column is what the private graph adds.",
    "- **gap-edp** releases ONE hop (K_max = 1) through PMA of the encoder's predicted class as a one-hot row (a unit "
    "row, Δ = √2: the noisy sum counts the neighbours' predicted classes) and fits the skip head on validation labels. "
    "At ε = 4, δ = 10⁻⁴ each entry of a node's noisy sum carries Gaussian noise of std σ·√2 = 1.36 while the signal "
    "is at most the node's degree: median 3 on Cora and cora_ml, where the release adds 0.04–0.05 over the feature "
    "graph; median 54 on johnshopkins55, where it carries most of the GCN's gain. On johnshopkins55 the encoder's "
    "validation accuracy prefers the smoothed input (0.52 against 0.49, seed 0) and that costs part of the gain "
    "(0.857 with raw input in a seed-0 run of the previous code against 0.773–0.857 here); the rule was not re-tuned.",
    "- **gcon** met its three missing rows at ε = 4 with three changes, each public or accounted "
    "(`docs/defenses/gcon.md`). (1) The objective's rows are every node with pseudo-labels only while the training "
    "labels are scarce (n₀ < n/2, the split's sizes, public): derived on reed98:year, not a benchmark (0.627 → 0.687, "
    "seeds 0–2), held out on johnshopkins55 (0.715 → 0.782 here). (2) What answers a query, Θ or the public encoder, "
    "is chosen by Θ's count of correct validation answers released with discrete Laplace noise (edge sensitivity 2: "
    "an Eq. 16 answer reads only its own node's edges; ε_s = 10 % of ε, in the ledger): on cora_ml per-class the "
    "encoder (0.741 test, seeds 0–2) beats Θ (0.707) and is chosen, on Cora Θ (0.731) beats the encoder (0.689) and "
    "is kept. (3) On a graph the heterophily rule flags, the encoder that answers alone is trained without dropout, "
    "its input chosen again: derived on Wisconsin and Cornell (0.797 / 0.640 → 0.778 / 0.685), held out on Texas "
    "(0.757 → 0.784) and actor (0.357 → 0.357). The count is read only where its noise's std is at most 3 % of "
    "the validation nodes (a public decision; at ε = 1 on 500 nodes it is 5.7 % and Θ answers). What it costs: "
    "Theorem 1 and AMP get 80 % of ε, and without pseudo-label rows Θ is noisier where it is noise-limited: at ε = 1 "
    "johnshopkins55 0.707 ± 0.025 (0.707 ± 0.085 before), cora_ml per-class 0.713 (0.717 before); at ε = 4 four "
    "reruns of this column with fresh noise agree within 0.023 on every row but texas, whose encoder change came "
    "after the first.",
    "- **Fresh noise.** Every private cell draws its noise from the operating system (a release, not a replay), so a "
    "rerun moves a cell by about ±0.02; gcon's margins at ε = 4 (+0.009 to +0.081) and gap-edp's (+0.007 to +0.096) "
    "are listed beside each row.",
]


def feature_graph_reference(dataset, split) -> dict[str, Any]:
    """What the public feature graph gives with no private edge: logistic regression (sklearn) on
    ``FeatureSmoothing().apply(x)`` over every node (the splits here are transductive; edge-level DP
    leaves features and labels public), C of :data:`FEATURE_GRAPH_C` chosen on validation nodes."""
    if split.inductive:
        raise ValueError("the feature-graph reference is computed for transductive splits only")
    start = time.process_time()
    z = FeatureSmoothing().apply(dataset.data.x.float()).numpy()
    y = dataset.data.y.numpy()
    train, val, test = split.train.numpy(), split.val.numpy(), split.test.numpy()
    best = None
    for c in FEATURE_GRAPH_C:
        clf = LogisticRegression(C=c, max_iter=1000).fit(z[train], y[train])
        score = clf.score(z[val], y[val])
        if best is None or score > best[0]:
            best = (score, clf.score(z[test], y[test]), c)
    return {
        "status": "ok",
        "test_accuracy": float(best[1]),
        "val_accuracy": float(best[0]),
        "chosen_c": best[2],
        "cpu_seconds": time.process_time() - start,
    }


def run_key(label: str, defense: str, configuration: str, epsilon: float, seed: int) -> str:
    return f"{label}|{defense}|{configuration}|{epsilon:g}|{seed}"


def _child(queue, defense, dataset, split, epsilon, seed, settings) -> None:
    try:
        queue.put(fit_and_test(defense, dataset, split, epsilon, seed, settings))
    except BaseException as exc:  # a bug, not a refusal: report it, keep the other cells
        queue.put(
            {"status": "error", "message": f"{type(exc).__name__}: {one_line(exc)}", "trace": traceback.format_exc()}
        )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc``; 0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def fit_with_budget(defense, dataset, split, epsilon, seed, settings, budget: float) -> dict[str, Any]:
    """:func:`bench_honest.fit_and_test` in a forked child stopped once it has used ``budget`` CPU
    seconds (stored as ``not run`` with the CPU time measured; CPU, not wall, time: the machine is shared)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, defense, dataset, split, epsilon, seed, settings))
    proc.start()
    while True:
        try:
            result = queue.get(timeout=2.0)
            break
        except Exception:  # queue.Empty: still running
            used = _cpu_seconds(proc.pid)
            if used > budget or not proc.is_alive():
                proc.terminate()
                proc.join()
                if used > budget:
                    return {
                        "status": "not run",
                        "message": f"not run: the fit did not finish within the {budget:.0f} CPU s per-fit budget "
                        f"(stopped after {used:.0f} CPU s)",
                    }
                return {
                    "status": "error",
                    "message": f"the fit's process ended without a result (exit {proc.exitcode})",
                }
    proc.join()
    return result


def plan_cells(labels, defenses_, configurations, epsilons) -> list[tuple[str, str, str, float]]:
    """(label, defense, configuration, ε) in fill order: per label the references, then ε = 4, then the rest."""
    order = sorted(epsilons, key=lambda e: (e != GOAL_EPSILON, e))
    cells = []
    for label in labels:
        cells += [(label, name, TUNED, math.inf) for name in REFERENCES if name in defenses_]
        cells += [(label, n, c, order[0]) for n in PRIVATE if n in defenses_ for c in configurations]
    for epsilon in order[1:]:
        cells += [(label, n, c, epsilon) for label in labels for n in PRIVATE if n in defenses_ for c in configurations]
    return cells


def save_run(store: dict[str, Any], store_path: Path, key: str, result: dict[str, Any]) -> None:
    """Store one finished cell: re-read the store first, so that two runs filling different
    columns at once (``--defenses``) never drop each other's cells."""
    if store_path.exists():
        store["runs"] = {**json.loads(store_path.read_text(encoding="utf-8"))["runs"], **store["runs"]}
    store["runs"][key] = result
    atomic_write_json(store_path, store)


def run_cells(cells, seeds, store, store_path: Path, budget: float, write) -> None:
    loaded: dict[str, Any] = {}
    measured_at = tree_state(code_only=True)  # the code every cell of this run is measured with
    total, done = len(cells) * len(seeds), 0
    for label, defense, configuration, epsilon in cells:
        name, spec = SPLITS[label]
        settings = {"select": "validation"} if configuration == TUNED else dict(CONFIGURATIONS[configuration])
        stopped = None
        for seed in seeds:
            done += 1
            key = run_key(label, defense, configuration, epsilon, seed)
            if key in store["runs"] and store["runs"][key]["status"] != "error":
                continue
            if stopped is not None:
                save_run(store, store_path, key, {"status": "not run", "message": stopped, "settings": settings})
                continue
            if name not in loaded:
                loaded[name] = load_dataset(name, root=os.environ.get("DPAUDIT_DATA"), **DATASET_OPTIONS.get(name, {}))
            dataset = loaded[name]
            split = make_split(dataset, spec, seed)
            log.info("[%d/%d] %s %s %s ε=%g seed %d", done, total, label, defense, configuration, epsilon, seed)
            # the references' grids are not what the budget measures: ten times as long
            if defense == FEATURE_GRAPH:
                result = feature_graph_reference(dataset, split)
            else:
                result = fit_with_budget(
                    defense, dataset, split, epsilon, seed, settings, budget if defense in PRIVATE else 10 * budget
                )
            if result["status"] == "error":
                log.error("%s failed:\n%s", key, result.get("trace", ""))
            if result["status"] == "not run":
                stopped = result["message"]
            log.info(
                "  → %s %s",
                result["status"],
                f"{result['test_accuracy']:.3f}" if result["status"] == "ok" else result.get("message"),
            )
            result.pop("trace", None)
            result["settings"] = settings
            result["measured_at"] = measured_at
            save_run(store, store_path, key, result)
            write(store)


# --------------------------------------------------------------------------- the report
def summarize(store, label, defense, configuration, epsilon, seeds) -> dict[str, Any]:
    runs = [store["runs"].get(run_key(label, defense, configuration, epsilon, s)) for s in seeds]
    runs = [r for r in runs if r is not None]
    ok = [r for r in runs if r["status"] == "ok"]
    row: dict[str, Any] = {"runs": len(runs), "ok": len(ok)}
    if not ok:
        row["status"] = "; ".join(sorted({r.get("message") or r["status"] for r in runs})) or "not run yet"
        return row
    accuracies = [r["test_accuracy"] for r in ok]
    row["mean"] = statistics.mean(accuracies)
    row["sd"] = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
    row["deployment"] = ok[0].get("deployment")
    row["deployment_note"] = ok[0].get("deployment_note")
    row["covered"] = all(r.get("deployment_covered") for r in ok)
    row["covered_for"] = ok[0].get("deployment_covered_for")
    row["sound"] = all(r.get("sound") for r in ok)
    spent = [r["epsilon_spent"] for r in ok if r.get("epsilon_spent") is not None]
    row["epsilon_spent"] = max(spent) if spent else None
    row["cpu_median"] = statistics.median(r.get("cpu_seconds", 0.0) for r in ok)
    return row


def cell_text(row: dict[str, Any], private: bool) -> str:
    if "mean" not in row:
        return row["status"]
    text = f"{row['mean']:.3f} ± {row['sd']:.3f}"
    if row["ok"] < row["runs"] or row["ok"] < 3:
        text += f" ({row['ok']} seed{'s' if row['ok'] != 1 else ''})"
    if private:
        if row["covered"]:
            coverage = "covered"
        elif row.get("covered_for"):
            coverage = "covered for each node's own answer only; not for a third party"
        else:
            coverage = "not covered"
        text += f" [{row['deployment']}: {coverage}]"
    return text


def goal_check(mlp, gcn, sound) -> tuple[str, str, bool | None]:
    """(graph helps, the goal check with its margin, met) for one row at ε = 4."""
    if "mean" not in mlp or "mean" not in gcn:
        return "-", "references not measured", None
    gain = gcn["mean"] - mlp["mean"]
    helps = gain >= HELPS
    if "mean" not in sound:
        return ("yes" if helps else "no") + f" ({gain:+.3f})", "sound not measured", None
    if helps:
        need = mlp["mean"] + gain / 2
        margin = sound["mean"] - need
        return (
            f"yes ({gain:+.3f})",
            f"{'met' if margin >= 0 else '**missed**'}: needs ≥ {need:.3f}, margin {margin:+.3f}",
            margin >= 0,
        )
    std = max(mlp["sd"], sound["sd"])
    need = mlp["mean"] - std
    margin = sound["mean"] - need
    return (
        f"no ({gain:+.3f})",
        f"{'met' if margin >= 0 else '**missed**'}: needs ≥ {need:.3f} (MLP − 1 std), margin {margin:+.3f}",
        margin >= 0,
    )


def measured_at(store) -> str:
    """Which code the stored cells were measured with: each recorded tree state and its cell count
    (cells stored before runs recorded it are counted as such).

    Args:
        store: the run store.

    Returns:
        One line.
    """
    counts: dict[str, int] = {}
    for run in store["runs"].values():
        state = run.get("measured_at", "not recorded (stored before cells recorded their commit)")
        counts[state] = counts.get(state, 0) + 1
    return "; ".join(f"{state}: {count} cell(s)" for state, count in sorted(counts.items(), key=lambda kv: -kv[1]))


def render(store, labels, epsilons, seeds, command: str) -> str:
    lines = [
        "# Edge-level defenses against the graph's gain (issue 50)",
        "",
        f"`{command}` — {len(seeds)} seed(s) {list(seeds)}; test accuracy, mean ± std over seeds. Cells measured at "
        f"{measured_at(store)}. Rendered at {tree_state()}.",
        "",
        "Tuned MLP / GCN: ε = ∞, `select=validation` (each reference's public grid, best on validation nodes). "
        "Private cells: `[deployment: covered | covered for each node's own answer only | not covered]` — the graph "
        "the test answers were computed over and whether the model's ε covers an answer there, and for whom (read "
        "from the model's card: GCON's Eq. 16 answers read the queried node's own edges in the clear, so they are "
        "covered when each node receives only its own answer, the paper's threat model, and not for a third party). `sound` is the registry "
        "default (every step accounted); `paper` is the authors' protocol (`sound: false`, never a guarantee). "
        "Feature graph (public, linear): what edge-level DP gives for free, with no private edge read — logistic "
        "regression on the features smoothed over their own kNN graph (`dpaudit.data.feature_graph`, k = 10, two "
        "hops; C by validation); both sound defenses may choose that input for their feature-only encoder, so the "
        "part of a sound cell above this column is what the private graph adds. "
        f"Graph helps: tuned GCN ≥ tuned MLP + {HELPS:.2f}. Goal at ε = {GOAL_EPSILON:g} (issue 50): where the graph "
        "helps, sound − tuned MLP ≥ ½ (tuned GCN − tuned MLP); elsewhere sound ≥ tuned MLP − one seed std.",
        "",
    ]
    header = ["data, split", "ε", "tuned MLP", "tuned GCN", "feature graph (public, linear)"]
    header += [f"{d} {c}" for d in PRIVATE for c in CONFIGURATIONS]
    header += ["graph helps", "gap-edp sound: goal", "gcon sound: goal"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    misses = []
    for label in labels:
        name, spec = SPLITS[label]
        mlp = summarize(store, label, "mlp", TUNED, math.inf, seeds)
        gcn = summarize(store, label, "gcn", TUNED, math.inf, seeds)
        knn = summarize(store, label, FEATURE_GRAPH, TUNED, math.inf, seeds)
        for epsilon in sorted(epsilons):
            cells = [f"{name} `{spec}`", f"{epsilon:g}", cell_text(mlp, False), cell_text(gcn, False)]
            cells.append(cell_text(knn, False))
            for d in PRIVATE:
                for c in CONFIGURATIONS:
                    cells.append(cell_text(summarize(store, label, d, c, epsilon, seeds), True))
            helps, checks = "", []
            for d in PRIVATE:
                sound = summarize(store, label, d, "sound", epsilon, seeds)
                h, check, met = goal_check(mlp, gcn, sound)
                helps = h
                checks.append(check if epsilon == GOAL_EPSILON else "-")
                if epsilon == GOAL_EPSILON and met is False:
                    misses.append((label, d, check))
            cells += [helps] + checks
            lines.append("| " + " | ".join(cells) + " |")
    notes = {}
    for label in labels:
        for d in PRIVATE:
            for c in CONFIGURATIONS:
                for epsilon in sorted(epsilons):
                    row = summarize(store, label, d, c, epsilon, seeds)
                    if "mean" in row and not row["covered"] and row.get("deployment_note"):
                        notes.setdefault((d, c, row["deployment"]), row["deployment_note"])
    lines += ["", "## Deployment notes", ""]
    lines += [
        "Where ε does not cover every answer at the deployment the test ran in (the owner's training graph, "
        "transductive splits), the model's card says in which deployment its answers are covered:",
        "",
    ]
    lines += [f"- {d} {c}, {dep}: {note}" for (d, c, dep), note in notes.items()] or ["- none"]
    lines += ["", "## What the sound defaults read, and the limits where a row misses", "", *LIMITS]
    lines += ["", "## Rows that miss the goal at ε = 4", ""]
    lines += [f"- {SPLITS[label][0]} `{SPLITS[label][1]}`, {d}: {check}" for label, d, check in misses] or ["- none"]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(SPLITS), help="labels of SPLITS")
    parser.add_argument("--defenses", nargs="+", default=[*REFERENCES, *PRIVATE])
    parser.add_argument("--configurations", nargs="+", default=list(CONFIGURATIONS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0, 8.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--fit-budget", type=float, default=120.0, help="CPU seconds per fit (default 120)")
    parser.add_argument("--no-resume", action="store_true", help="start the store over")
    parser.add_argument("--forget", nargs="*", default=[], help="DEFENSE:CONFIGURATION runs to drop and refit")
    parser.add_argument("--write-only", action="store_true", help="re-render the markdown from the store")
    add_smoke_argument(parser, "a 120-node generated graph, one seed, ε = 4")
    args = parser.parse_args(argv)
    if args.smoke:
        start_smoke()
        SPLITS[SMOKE_LABEL] = SMOKE_SPLIT
        args.datasets, args.epsilons, args.seeds, args.configurations = [SMOKE_LABEL], [4.0], [0], ["sound"]
        args.defenses = ["mlp", "gap-edp"]
    unknown = [d for d in args.datasets if d not in SPLITS]
    unknown += [d for d in args.defenses if d not in (*REFERENCES, *PRIVATE)]
    unknown += [c for c in args.configurations if c not in CONFIGURATIONS]
    unknown += [f for f in args.forget if f.count(":") != 1]
    if unknown:
        parser.error(f"unknown dataset label / defense / configuration / --forget entry: {unknown}")
    if not all(e > 0 for e in args.epsilons) or args.fit_budget <= 0:
        parser.error("ε and --fit-budget must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    store_path = results_dir() / "edge_level.json"
    md_path = results_dir() / "edge_level.md"
    store: dict[str, Any] = {"version": STORE_VERSION, "runs": {}}
    if store_path.exists() and not args.no_resume:
        store = json.loads(store_path.read_text(encoding="utf-8"))
    for entry in args.forget:
        defense, configuration = entry.split(":")
        store["runs"] = {k: v for k, v in store["runs"].items() if k.split("|")[1:3] != [defense, configuration]}
    command = "python benchmarks/bench_edge_level.py" + ("" if argv is None else " " + " ".join(argv or []))
    labels = [label for label in SPLITS if label in args.datasets]
    all_labels = labels if args.smoke else [label for label in SPLITS if label != SMOKE_LABEL]
    all_seeds = [0] if args.smoke else [0, 1, 2]

    def write(current) -> None:
        atomic_write_text(
            md_path,
            render(
                current,
                all_labels,
                [1.0, 4.0, 8.0] if not args.smoke else [4.0],
                all_seeds,
                "python benchmarks/bench_edge_level.py",
            ),
        )

    if not args.write_only:
        cells = plan_cells(labels, args.defenses, args.configurations, args.epsilons)
        log.info("%d cells × %d seed(s); each fit at most %.0f s", len(cells), len(args.seeds), args.fit_budget)
        atomic_write_json(store_path, store)
        run_cells(cells, args.seeds, store, store_path, args.fit_budget, write)
    write(store)
    log.info("wrote %s", md_path)
    del command
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
