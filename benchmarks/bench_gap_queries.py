"""What a query of a GAP model costs (issue 27), this tree against a baseline checkout, side by side.

    python benchmarks/bench_gap_queries.py --baseline-tree /path/to/old/checkout
    python benchmarks/bench_gap_queries.py --parts linkteller --sizes 80000,1000000 --baseline-tree OLD

Two parts, each run in a fresh child process per tree (``PYTHONPATH`` set to the tree), one torch
thread, CPU time (user + system of the process, ``time.process_time``), medians:

* ``ledger``: a gap-edp model (ε = 4, Cora-sized csbm) that has already made n − 1 + r releases
  on query graphs answers one more query on a new graph; the CPU of that query, and of reading
  its ledger afterwards, medians over r = 0 … repeats − 1, for n = 1, 5, 40, 100, 1000 (each count
  once: a ledger composed before is cached by the accountant, which a new release never hits).
  Before issue 27 every query re-composed the whole ledger (training + every release), so the
  query cost grew with n. ε is the query ledger's after n releases (a tree before the query
  ledger: the spec's, which composed them with training).
* ``linkteller``: a gap-edp model trained on ``--dataset csbm --dataset-option num_nodes=N
  --dataset-option avg_degree=20`` (128 features, short schedule) is queried as LinkTeller
  queries it in an audit (the owner's query session; :func:`attacks.linkteller.influence_scores`
  over ``--pairs`` edges and as many non-edges): CPU per query (one query = one perturbed graph
  answered for a node's targets, with its unperturbed twin), and the releases charged.

Results: ``benchmarks/results/gap_queries.md`` (and ``.json``).

``--smoke``: this tree against itself (each part's child runs once, its row filling both
columns), the ledger part on a 300-node csbm for n = 1, 5 with one query each, the linkteller part
on a 300-node csbm with one edge; results and the trained model go to the smoke folder
(``_harness.start_smoke``).
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

from _harness import add_smoke_argument, results_dir, start_smoke, write_atomic

ROOT = Path(__file__).resolve().parents[1]
RELEASE_COUNTS = (1, 5, 40, 100, 1000)
LEDGER_NODES = 2708
#: ``--smoke``: the csbm size of both parts and the ledger part's release counts
SMOKE_NODES, SMOKE_RELEASE_COUNTS = 300, (1, 5)


def ledger_part(repeats: int, num_nodes: int = LEDGER_NODES, counts: tuple[int, ...] = RELEASE_COUNTS) -> list[dict]:

    import defenses  # noqa: F401
    from dpaudit.data.datasets import csbm
    from dpaudit.data.splits import make_split
    from dpaudit.training.registry import get_defense

    graph = csbm(num_nodes=num_nodes, num_classes=7, num_features=128, avg_degree=4, seed=0)
    split = make_split(graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=2, epochs=2).fit(graph, split)
    rows = []
    for count in counts:
        query, read, epsilon = [], [], None
        for r in range(repeats):
            api = model.interactive_copy()
            if count + r > 1:  # earlier releases, as a model that answered them records them
                api.cfg["query_releases"] = count + r - 1
                if hasattr(api, "spec_after"):  # a tree before the query ledger: the spec composed them
                    api.privacy = api.spec_after(count + r - 1)
            data = graph.data.clone()
            data.x = data.x + 1e-3 * (r + 1)  # a graph never queried before: a new release
            start = time.process_time()
            api.predict_proba(data, [0])
            query.append(time.process_time() - start)
            start = time.process_time()
            spent = api.query_ledger.spec().epsilon if hasattr(api, "query_ledger") else api.privacy.epsilon
            read.append(time.process_time() - start)
            epsilon = epsilon if r else spent
        rows.append(
            {
                "releases": count,
                "query_ms": 1e3 * statistics.median(query),
                "read_ms": 1e3 * statistics.median(read),
                "epsilon": epsilon,
            }
        )
    return rows


def linkteller_part(model_dir: str, pairs: int) -> dict:
    import numpy as np
    import torch

    import defenses  # noqa: F401
    from attacks import _common as C
    from attacks.linkteller import FeatureProbe, influence_scores
    from dpaudit.data.datasets import reload_dataset
    from dpaudit.release.model import load

    model = load(model_dir, record=True)
    dataset = reload_dataset(model.card.get("dataset"), model.provenance("dataset"), "csbm")
    api = model.interactive_copy()
    graph = dataset.data
    rng = np.random.default_rng(0)
    probe = FeatureProbe(graph, 1e-2, 0)
    u, v, _ = C.sample_pairs(graph.edge_index, dataset.num_nodes, pairs, rng)
    start = time.process_time()
    C.posteriors(api, graph, [0])  # first contact with the graph (the training release's key)
    first = time.process_time() - start
    start = time.process_time()
    influence_scores(api, probe, u, v)
    seconds = time.process_time() - start
    queries = len(np.unique(v))
    return {
        "queries": int(queries),
        "cpu_s": seconds,
        "per_query_ms": 1e3 * seconds / queries,
        "first_contact_s": first,
        "releases": _releases(api),
        "peak_mib": _peak_mib(),
        "torch_threads": torch.get_num_threads(),
    }


def _releases(api) -> int:
    """Releases ``api`` made on query graphs (its query ledger; before it, its spec's count)."""
    return int(api.query_ledger.releases if hasattr(api, "query_ledger") else api.foreign_releases)


def _peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(tree: Path, call: str, timeout: float) -> dict | list:
    """Run ``call`` (an expression of this module) with ``tree`` first on the path; its JSON."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    code = (
        f"import sys, json, torch; torch.set_num_threads(1); sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import bench_gap_queries as b; print('RESULT ' + json.dumps(b.{call}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{call} on {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def train(size: int, out: Path, tree: Path) -> None:
    """gap-edp on csbm with ``size`` nodes (the scale benchmark's short schedule), trained by the
    baseline ``tree`` (a model both trees load: a newer tree may record settings an older one
    does not know)."""
    if (out / "model.json").exists():
        return
    argv = [
        sys.executable,
        "-m",
        "dpaudit.app.cli",
        "train",
        "--defense",
        "gap-edp",
        "--dataset",
        "csbm",
        "--dataset-option",
        f"num_nodes={size}",
        "--dataset-option",
        "avg_degree=20",
        "--epsilon",
        "1",
        "--set",
        "encoder_epochs=10",
        "--set",
        "epochs=10",
        "--out",
        str(out),
        "--force",
    ]
    subprocess.run(argv, cwd=tree, check=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-tree", type=Path, help="a checkout of the code to compare with (required)")
    parser.add_argument("--parts", default="ledger,linkteller")
    parser.add_argument("--sizes", default="80000,1000000", help="csbm node counts of the linkteller part")
    parser.add_argument("--pairs", type=int, default=3, help="LinkTeller edges (and non-edges) per size")
    parser.add_argument("--repeats", type=int, default=5, help="queries per release count (ledger part)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench_gap_queries")
    parser.add_argument("--timeout-s", type=float, default=3600)
    parser.add_argument("--out", default="gap_queries")
    add_smoke_argument(parser, f"this tree against itself, {SMOKE_NODES}-node csbm, n = 1, 5, one LinkTeller edge")
    args = parser.parse_args()
    ledger_call = f"ledger_part({args.repeats})"
    if args.smoke:
        folder = start_smoke()
        args.baseline_tree, args.sizes, args.pairs, args.repeats = ROOT, str(SMOKE_NODES), 1, 1
        args.work = folder / "work"
        ledger_call = f"ledger_part(1, {SMOKE_NODES}, {SMOKE_RELEASE_COUNTS})"
    if args.baseline_tree is None:
        parser.error("--baseline-tree is required (a checkout of the code to compare with)")
    trees = {"baseline": args.baseline_tree.resolve(), "this tree": ROOT}
    path = results_dir() / f"{args.out}.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    memo: dict[tuple[Path, str], dict | list] = {}

    def run(tree: Path, call: str) -> dict | list:
        # a smoke run compares this tree with itself: one child per part, its row in both columns
        if not args.smoke or (tree, call) not in memo:
            memo[(tree, call)] = child(tree, call, args.timeout_s)
        return memo[(tree, call)]

    lines = []
    if "ledger" in args.parts.split(","):
        results["ledger"] = {name: run(tree, ledger_call) for name, tree in trees.items()}
        write_atomic(path, json.dumps(results, indent=1) + "\n")
    for size in [int(s) for s in args.sizes.split(",") if s] if "linkteller" in args.parts.split(",") else []:
        model_dir = args.work / f"gap-edp-{size}"
        train(size, model_dir, trees["baseline"])
        for name, tree in trees.items():
            print(f"linkteller {size} {name} ...", flush=True)
            row = run(tree, f"linkteller_part({str(model_dir)!r}, {args.pairs})")
            results.setdefault("linkteller", {}).setdefault(str(size), {})[name] = row
            write_atomic(path, json.dumps(results, indent=1) + "\n")
    write_atomic(path, json.dumps(results, indent=1) + "\n")
    lines.append("# What a GAP query costs: the baseline checkout against this tree\n")
    lines.append(
        f"`python benchmarks/bench_gap_queries.py {' '.join(sys.argv[1:])}` — {platform.machine()}, "
        f"{os.cpu_count()} cores, python {platform.python_version()}; one torch thread, CPU time, medians.\n"
    )
    if "ledger" in results:
        nodes = SMOKE_NODES if args.smoke else LEDGER_NODES
        lines.append(f"## A query after n − 1 earlier releases (gap-edp ε = 4, csbm {nodes:,} nodes)\n")
        lines.append(
            "| releases n | query CPU ms, baseline | query CPU ms, this tree | spec read CPU ms, baseline | "
            "spec read CPU ms, this tree | ε, baseline | ε, this tree |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        old, new = results["ledger"]["baseline"], results["ledger"]["this tree"]
        for a, b in zip(old, new):
            lines.append(
                f"| {a['releases']} | {a['query_ms']:.2f} | {b['query_ms']:.2f} | {a['read_ms']:.2f} | "
                f"{b['read_ms']:.2f} | {a['epsilon']:.10g} | {b['epsilon']:.10g} |"
            )
        lines.append("")
    if "linkteller" in results:
        lines.append("## LinkTeller's queries of gap-edp in an audit (csbm, average degree 20, 128 features)\n")
        lines.append(
            "| nodes | tree | queries | CPU s | CPU ms per query | releases charged | first contact CPU s | peak MiB |"
        )
        lines.append("|---|---|---|---|---|---|---|---|")
        for size, by_tree in sorted(results["linkteller"].items(), key=lambda kv: int(kv[0])):
            for name, r in by_tree.items():
                lines.append(
                    f"| {int(size):,} | {name} | {r['queries']} | {r['cpu_s']:.2f} | {r['per_query_ms']:.1f} | "
                    f"{r['releases']} | {r['first_contact_s']:.2f} | {r['peak_mib']:.0f} |"
                )
        lines.append("")
    write_atomic(results_dir() / f"{args.out}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
