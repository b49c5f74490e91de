"""GAP benchmark: accuracy over ε for gap-edp / gap-ndp, gap-inf against the baselines,
train time and peak memory, and one scaling run on cornell5.

Full run (as in benchmarks/results/gap.md)::

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/bench_gap.py \\
        --datasets cora_ml johnshopkins55 --seeds 0 1 2 --epsilons 1 2 4 8 16 --scale cornell5

Reduced: fewer ``--seeds`` / ``--epsilons`` / ``--datasets``, ``--scale none``. Several
partial runs can be combined: ``--json-out part.json`` on each, then ``--merge a.json b.json``.
``--smoke``: every method of the sweep and the scaling run on a 300-node csbm graph, seed 0,
ε = 4 (mlp-dp at 8), the table and the raw records in the smoke folder (``_harness.start_smoke``).

Registry defaults, tested on the split's test nodes; under ``protocol=sound`` gap-inf and gap-edp
choose K and their checkpoints on validation accuracy over the hop prefixes of one PMA release of
max(hop_grid) hops (post-processing at edge level, see ``defenses/gap/protocols.py``), gap-ndp
and the baselines use fixed choices. The ε column is the ε spent by the accountant (≤ target).
Peak memory is the process's peak resident set size sampled every 20 ms during ``fit``
(includes the loaded dataset); train seconds come from the model card.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import re
import resource
import statistics
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import add_smoke_argument, results_dir, start_smoke, write_atomic  # noqa: E402

import defenses  # noqa: E402,F401  (registers the defenses)
from dpaudit.app.pipeline import evaluate  # noqa: E402
from dpaudit.data.datasets import load_dataset  # noqa: E402
from dpaudit.data.splits import make_split  # noqa: E402
from dpaudit.training.registry import get_defense  # noqa: E402

log = logging.getLogger("bench_gap")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: ``--smoke``: the generated graph's size (the sweep's and the scaling run's dataset)
SMOKE_NODES = 300


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * PAGE
    except OSError:  # not Linux: fall back to the lifetime peak
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakRSS:
    """Samples the resident set size in a thread; ``peak`` is the maximum seen (bytes)."""

    def __enter__(self):
        self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def run_one(method, dataset, split, epsilon, seed, overrides):
    defense = get_defense(method)(epsilon=epsilon, seed=seed, **overrides)
    with PeakRSS() as mem:
        model = defense.fit(dataset, split)
    acc = evaluate(model, dataset, split)["test_accuracy"]  # the owner's training release: no new query
    record = {
        "method": method,
        "dataset": dataset.name,
        "seed": seed,
        "target_epsilon": None if math.isinf(defense.epsilon) else defense.epsilon,
        "spent_epsilon": model.privacy.epsilon if math.isfinite(model.privacy.epsilon) else None,
        "delta": model.privacy.delta,
        "unit": model.privacy.unit,
        "test_accuracy": acc,
        "train_seconds": model.record["timings"]["train_seconds"],
        "peak_rss_mb": mem.peak / 2**20,
        "overrides": overrides,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
    }
    log.info(
        "%s %s ε=%s seed=%d: acc %.4f, ε spent %s, %.1fs, %.0f MB",
        dataset.name,
        method,
        record["target_epsilon"],
        seed,
        acc,
        record["spent_epsilon"],
        record["train_seconds"],
        record["peak_rss_mb"],
    )
    return record


def plan(args):
    """(method, epsilon, overrides) for the utility sweep."""
    proto = {"protocol": args.protocol}
    jobs = [("gcn", math.inf, {}), ("mlp", math.inf, {}), ("gap-inf", math.inf, dict(proto))]
    jobs += [("mlp-dp", e, {"epochs": args.mlp_dp_epochs}) for e in args.baseline_epsilons]
    jobs += [("gap-edp", e, dict(proto)) for e in args.epsilons]
    # the degree promise at --max-degree, as the recorded rows ran (the default is now the projection)
    jobs += [("gap-ndp", e, {"max_degree": args.max_degree, "degree_bound": "promise", **proto}) for e in args.epsilons]
    return [job for job in jobs if args.methods is None or job[0] in args.methods]


class Records(list):
    """A list of records that rewrites ``path`` after every append (a killed run keeps its results)."""

    def __init__(self, path, command):
        super().__init__()
        self.path, self.command = path, command

    def append(self, record):
        super().append(record)
        if self.path:
            write_atomic(Path(self.path), json.dumps({"command": self.command, "records": list(self)}, indent=1))


def sweep(args, records: list) -> list[dict]:
    options = {"num_nodes": SMOKE_NODES} if getattr(args, "smoke", False) else {}
    for name in args.datasets:
        dataset = load_dataset(name, root=args.data_root, **options)
        for seed in args.seeds:
            split = make_split(dataset, args.split, seed)
            for method, eps, overrides in plan(args):
                records.append(run_one(method, dataset, split, eps, seed, overrides))
    if args.scale != "none":
        dataset = load_dataset(args.scale, root=args.data_root, **options)
        split = make_split(dataset, args.split, 0)
        for method, eps, overrides in [
            ("gap-inf", math.inf, {"protocol": args.protocol}),
            ("gap-edp", 4.0, {"protocol": args.protocol}),
            (
                "gap-ndp",
                8.0,
                {
                    "max_degree": args.max_degree,
                    "degree_bound": "promise",
                    "batch_size": args.scale_batch_size,
                    "protocol": args.protocol,
                },
            ),
        ]:
            rec = run_one(method, dataset, split, eps, 0, overrides)
            rec["scale_run"] = True
            records.append(rec)
    return records


_LOG_LINE = re.compile(
    r"bench_gap (?P<dataset>\S+) (?P<method>\S+) ε=(?P<eps>\S+) seed=(?P<seed>\d+): acc (?P<acc>[\d.]+), "
    r"ε spent (?P<spent>\S+), (?P<sec>[\d.]+)s, (?P<mb>[\d.]+) MB"
)


def parse_log(text: str) -> list[dict]:
    """Records from the per-run log lines of a sweep that was stopped before writing its JSON."""
    records = []
    for m in _LOG_LINE.finditer(text):
        records.append(
            {
                "method": m["method"],
                "dataset": m["dataset"],
                "seed": int(m["seed"]),
                "target_epsilon": None if m["eps"] == "None" else float(m["eps"]),
                "spent_epsilon": None if m["spent"] == "None" else float(m["spent"]),
                "test_accuracy": float(m["acc"]),
                "train_seconds": float(m["sec"]),
                "peak_rss_mb": float(m["mb"]),
            }
        )
    return records


def _fmt(values, scale=100.0, digits=1):
    if not values:
        return "–"
    mean = statistics.fmean(values) * scale
    std = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {std:.{digits}f} (n={len(values)})"


def _label(method, eps):
    return f"{method} (ε = {eps:g})" if eps is not None else f"{method} (ε = ∞)"


def render(records: list[dict], command: str, split_spec: str) -> str:
    utility = [r for r in records if not r.get("scale_run")]
    scale = [r for r in records if r.get("scale_run")]
    datasets = list(dict.fromkeys(r["dataset"] for r in utility))
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in utility:
        groups[(r["method"], r["target_epsilon"])][r["dataset"]].append(r)
    order = {"gcn": 0, "mlp": 1, "gap-inf": 2, "mlp-dp": 3, "gap-edp": 4, "gap-ndp": 5}
    keys = sorted(groups, key=lambda k: (order.get(k[0], 9), -1 if k[1] is None else k[1]))

    lines = [
        "# GAP benchmark",
        "",
        f"Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} on {platform.machine()} CPU "
        f"(torch {torch.__version__}, {torch.get_num_threads()} thread(s)); command:",
        "",
        f"    {command}",
        "",
        f"Split `{split_spec}` (the paper's 75/10/15 random split over labeled nodes), a new split per "
        "seed. Test accuracy in % (mean ± std over n seeds); ε is the target, the accountant's spent ε "
        "is ≤ target in every run (max spent/target shown). Registry defaults; under `sound`, gap-inf and "
        "gap-edp choose K and checkpoints on validation over the hop prefixes of one PMA release "
        "(post-processing at edge level), gap-ndp and the baselines are fixed. δ = auto (below 1/#edges for edge level, 1/#nodes for node "
        "level).",
        "",
        "## Accuracy",
        "",
        "| method | " + " | ".join(datasets) + " | seeds | max spent/target |",
        "|---|" + "---|" * len(datasets) + "---|---|",
    ]
    for key in keys:
        per = groups[key]
        cells = [_fmt([r["test_accuracy"] for r in per.get(d, [])]) for d in datasets]
        seeds = max(len(v) for v in per.values())
        ratios = [r["spent_epsilon"] / r["target_epsilon"] for v in per.values() for r in v if r["target_epsilon"]]
        ratio = f"{max(ratios):.4f}" if ratios else "–"
        lines.append(f"| {_label(*key)} | " + " | ".join(cells) + f" | {seeds} | {ratio} |")

    lines += [
        "",
        "## Train time and peak memory (mean over seeds)",
        "",
        "| method | " + " | ".join(f"{d} s | {d} MB" for d in datasets) + " |",
        "|---|" + "---|---|" * len(datasets),
    ]
    for key in keys:
        per = groups[key]
        cells = []
        for d in datasets:
            rs = per.get(d, [])
            cells.append(f"{statistics.fmean(r['train_seconds'] for r in rs):.1f}" if rs else "–")
            cells.append(f"{max(r['peak_rss_mb'] for r in rs):.0f}" if rs else "–")
        lines.append(f"| {_label(*key)} | " + " | ".join(cells) + " |")

    if scale:
        r0 = scale[0]
        lines += [
            "",
            f"## Scaling: {r0['dataset']}, seed 0"
            if r0["num_nodes"] is None
            else f"## Scaling: {r0['dataset']} ({r0['num_nodes']:,} nodes, {r0['num_edges']:,} undirected edges), seed 0",
            "",
            "| method | test acc % | spent ε | train s | peak RSS MB | overrides |",
            "|---|---|---|---|---|---|",
        ]
        for r in scale:
            eps = "∞" if r["spent_epsilon"] is None else f"{r['spent_epsilon']:.3f}"
            lines.append(
                f"| {_label(r['method'], r['target_epsilon'])} | {100 * r['test_accuracy']:.1f} | {eps} | "
                f"{r['train_seconds']:.1f} | {r['peak_rss_mb']:.0f} | {json.dumps(r['overrides'])} |"
            )

    lines += ["", "## The issue's utility claims", ""]
    for d in datasets:

        def mean(method, eps, d=d):
            rs = groups.get((method, eps), {}).get(d, [])
            return statistics.fmean(r["test_accuracy"] for r in rs) * 100 if rs else None

        checks = [
            ("gap-inf within 3 points of gcn", mean("gap-inf", None), mean("gcn", None), lambda a, b: a >= b - 3),
            ("gap-edp (ε = 4) beats mlp", mean("gap-edp", 4.0), mean("mlp", None), lambda a, b: a > b),
            (
                "gap-ndp (ε = 8) ≥ mlp-dp (ε = 8) − 1",
                mean("gap-ndp", 8.0),
                mean("mlp-dp", 8.0),
                lambda a, b: a >= b - 1,
            ),
        ]
        for text, a, b, ok in checks:
            if a is None or b is None:
                lines.append(f"- {d}: {text}: not measured in this run")
            else:
                lines.append(f"- {d}: {text}: {a:.1f} vs {b:.1f} → **{'holds' if ok(a, b) else 'does NOT hold'}**")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="*", default=["cora_ml", "johnshopkins55"])
    p.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    p.add_argument("--epsilons", nargs="*", type=float, default=[1, 2, 4, 8, 16])
    p.add_argument("--methods", nargs="*", default=None, help="restrict the sweep to these methods")
    p.add_argument("--baseline-epsilons", nargs="*", type=float, default=[8.0], help="ε values for mlp-dp")
    p.add_argument("--mlp-dp-epochs", type=int, default=10, help="mlp-dp epochs (GAP paper: 10)")
    p.add_argument(
        "--max-degree",
        type=int,
        default=100,
        help="gap-ndp degree bound D (protocol=sound refuses graphs whose maximum degree exceeds it)",
    )
    p.add_argument(
        "--protocol",
        choices=["sound", "paper"],
        default="sound",
        help="GAP protocol: sound (edge/∞: K and checkpoints from one release's hop prefixes; node: fixed K, D, "
        "last iterate) or paper (selection on validation over separate releases, sound: false)",
    )
    p.add_argument("--split", default="random:0.75,0.1,0.15")
    p.add_argument("--scale", default="cornell5", help="dataset for the scaling run, or 'none'")
    p.add_argument("--scale-batch-size", type=int, default=1024, help="gap-ndp batch size on the scaling run")
    p.add_argument("--data-root", default=os.environ.get("DPAUDIT_DATA"))
    p.add_argument("--out", default=None, help="the table (default: benchmarks/results/gap.md)")
    p.add_argument("--json-out", default=None, help="also write the raw records here")
    p.add_argument("--merge", nargs="*", default=None, help="render the table from these raw-record files")
    add_smoke_argument(p, f"{SMOKE_NODES}-node csbm, every method once, seed 0, scaling run on it too")
    args = p.parse_args(argv)
    if args.smoke:
        start_smoke()
        args.datasets, args.scale, args.seeds, args.epsilons = ["csbm"], "csbm", [0], [4.0]
        args.merge, args.json_out = None, str(results_dir() / "gap.json")
        args.out = str(results_dir() / "gap.md")
    if args.out is None:
        args.out = str(results_dir() / "gap.md")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("dpaudit").setLevel(logging.WARNING)
    logging.getLogger("defenses").setLevel(logging.WARNING)
    command = "OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/bench_gap.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    if args.merge:
        records, commands = [], []
        for path in args.merge:
            if path.endswith(".log"):
                records += parse_log(Path(path).read_text())
                commands.append(f"(records parsed from the log of an interrupted run: {Path(path).name})")
                continue
            payload = json.loads(Path(path).read_text())
            records += payload["records"]
            commands.append(payload["command"])
        command = "\n    ".join(commands)
        for record in records:  # log-parsed records do not carry the flag
            record.setdefault("scale_run", record["dataset"] == args.scale)
            record.setdefault("num_nodes", None)
            record.setdefault("num_edges", None)
            record.setdefault("overrides", "not in log")
    else:
        start = time.perf_counter()
        records = sweep(args, Records(args.json_out, command))
        log.info("sweep took %.0f s", time.perf_counter() - start)
    table = render(records, command, args.split)
    print(table)
    if args.out:
        write_atomic(Path(args.out), table)


if __name__ == "__main__":
    main()
