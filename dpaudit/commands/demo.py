"""``dpaudit demo``: every defense and attack on the embedded synthetic graph, one study, one report."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from dpaudit import __version__

# The demo's small settings, all in one place: the embedded synthetic graph at a size that
# trains in seconds, per-defense epoch/iteration overrides (keys a defense does not have are
# skipped, so new defenses join the demo with their defaults) and per-attack settings.
DEMO_DATASET_OPTIONS = {"num_nodes": 600, "num_classes": 4, "num_features": 32, "avg_degree": 8.0, "seed": 0}
DEMO_EPSILONS = [1.0, 4.0, math.inf]
DEMO_DEFENSE_OVERRIDES = {
    "gcn": {"epochs": 60},
    "sage": {"epochs": 60},
    "mlp": {"epochs": 60},
    "mlp-dp": {"epochs": 10},
    "gap-edp": {"encoder_epochs": 20, "epochs": 20},
    "gap-inf": {"encoder_epochs": 20, "epochs": 20},
    "gap-ndp": {"encoder_epochs": 5, "epochs": 5},
    "dpar-gm": {"epochs": 5},
    "dpar-em0": {"epochs": 5},
    "dpar-em1": {"epochs": 5},
    "dpar-nodp": {"epochs": 5},
    "dpgnn": {"steps": 30},
    "gcon": {"encoder_epochs": 50, "max_iter": 1000},
}
DEMO_ATTACK_SETTINGS = {
    "*": {"n_boot": 200},
    "mia-tstf": {"runs": 1, "hidden": 32},
    "mia-lira": {"num_shadows": 2},
    "mia-rmia": {"num_references": 2},
    "link-steal": {"runs": 1, "max_pairs": 400},
    "linkteller": {"num_pairs": 100, "pr_nodes": 200},
    "embedding-probe": {"projections": ["tsne"], "max_plot_nodes": 200},
}


def demo_plan() -> tuple[list[str], dict, list[str], dict]:
    """Every registered defense and attack, with the demo overrides that apply to each."""
    import attacks as attack_registry
    from dpaudit.registry import available_defenses, get_defense

    defenses = available_defenses()
    overrides = {}
    for name in defenses:
        fields = get_defense(name).hyperparameters_class.__dataclass_fields__
        chosen = {k: v for k, v in DEMO_DEFENSE_OVERRIDES.get(name, {}).items() if k in fields}
        if chosen:
            overrides[name] = chosen
    names = attack_registry.available_attacks()
    settings = {}
    for name in names:
        known = attack_registry.attack_settings(name)
        chosen = {**DEMO_ATTACK_SETTINGS["*"], **DEMO_ATTACK_SETTINGS.get(name, {})}
        chosen = {k: v for k, v in chosen.items() if k in known}
        if chosen:
            settings[name] = chosen
    return defenses, overrides, names, settings


def cmd_demo(args) -> int:
    from dpaudit.cli import _fmt, _table, cap_jobs
    from dpaudit.outputs import check_output_dir, check_report_paths
    from dpaudit.workflows import Study, StudyConfig

    check_output_dir(args.out, "study")
    check_report_paths(args.report, "study", what="--report")
    args.jobs = cap_jobs(args.jobs)
    defenses, overrides, names, settings = demo_plan()
    config = StudyConfig(
        dataset="csbm",
        defenses=defenses,
        epsilons=DEMO_EPSILONS,
        seeds=[args.seed],
        attacks=names,
        dataset_options=dict(DEMO_DATASET_OPTIONS),
        overrides=overrides,
        attack_settings=settings,
        device=args.device,
        title="dpaudit demo: every defense and attack on the embedded synthetic graph",
    )
    print(
        f"dpaudit {__version__} demo: {len(defenses)} defenses × ε ∈ {{1, 4, ∞}} × {len(names)} attacks on csbm "
        f"({DEMO_DATASET_OPTIONS['num_nodes']} nodes), {args.jobs} worker(s); study folder {args.out}/"
    )
    start = time.perf_counter()
    # the demo folder is ours: a newer demo configuration may re-configure it
    result = Study(config, args.out, command="dpaudit " + " ".join(sys.argv[1:]), force=True).run(jobs=args.jobs)
    rows = result.table()
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print(_table([{k: _fmt(r.get(k)) for k in columns} for r in rows], columns))
    for rec in result.failed:
        err = rec.get("error") or {}
        print(f"failed: {rec['cell_id']}: {err.get('type')}: {err.get('message')}")
    path = result.to_html(args.report)
    print(f"{len(result.done)} cells done, {len(result.failed)} failed in {time.perf_counter() - start:.0f}s")
    print(f"report: {Path(path).resolve()}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the end-to-end demo on the embedded synthetic graph (writes demo-report.html)")
    p.add_argument("--out", default="demo-out", help="study folder (rerunning resumes it)")
    p.add_argument("--report", default="demo-report.html")
    p.add_argument("--jobs", type=int, default=None, help="cells run in parallel (default: one per core)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=cmd_demo)
