"""``dpaudit demo``: every defense family under every attack on the embedded synthetic graph, one
study, one report, in about two minutes on two cores."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dpaudit import __version__

# The demo's plan, all in one place. The graph is small enough that a cell takes seconds, and
# hard enough to show a trade-off: with a weak feature signal (0.3 per coordinate; csbm's default
# 0.6 let every model, private or not, reach test accuracy ≈ 1.0) and homophily 0.7, the
# non-private GNNs still reach ≈ 0.95 by aggregating neighbours, the MLP ≈ 0.7, and the private
# models fall below them, further at ε = 1 than at ε = 4.
DEMO_DATASET_OPTIONS = {
    "num_nodes": 500, "num_classes": 4, "num_features": 32, "avg_degree": 8.0, "homophily": 0.7,
    "feature_signal": 0.3, "seed": 0,
}  # fmt: skip
# Every private defense at two ε, so the privacy–utility panel has a curve per defense and the
# ε lower bounds sit at two claims; non-private models train once (ε = ∞).
DEMO_EPSILONS = [1.0, 4.0]
# One private member of each family and the non-private models they are compared with: the
# baselines gcn/sage/mlp, and GAP and DPAR without noise (gap-inf, dpar-nodp), which show what
# the noise itself buys. The other registered variants add minutes and nothing new to the story.
DEMO_DEFENSES = [
    "gap-edp", "gap-ndp", "gap-inf", "dpar-gm", "dpar-nodp", "dpgnn", "gcon", "mlp-dp",
    "gcn", "sage", "mlp",
]  # fmt: skip
# Every other defense trains with its defaults (each under a second here). DP-GNN's default
# schedule takes 16 s per training, and the attacks train shadow models with the same recipe;
# 200 steps take 2 s and reach 0.92 test accuracy at ε = 4 (the default reaches 1.0).
DEMO_DEFENSE_OVERRIDES = {"dpgnn": {"steps": 200}}
DEMO_ATTACK_SETTINGS = {
    "*": {"n_boot": 200},
    "mia-tstf": {"runs": 1, "hidden": 32},
    "mia-lira": {"num_shadows": 2},
    "mia-rmia": {"num_references": 2},
    "link-steal": {"runs": 1, "max_pairs": 400},
    # Each LinkTeller query of a GAP model is a new noisy release whose cost is re-accounted over
    # every release before it, so its time grows with the square of the queries: 40 edges and
    # 40 non-edges (about 75 queries) keep the GAP cells under 20 s; the paper's density
    # protocol and the 2-hop negatives would add 100 queries more.
    "linkteller": {"num_pairs": 40, "pr_nodes": 0, "hard_negatives": False},
    "embedding-probe": {"projections": ["tsne"], "max_plot_nodes": 200},
}
# Short column headings (other attacks keep their names), so that every attack fits in 100
# columns; the report names each attack in full, with its intervals.
ATTACK_HEADINGS = {"mia-rmia": "rmia", "mia-lira": "lira", "mia-tstf": "tstf", "mia-threshold": "threshold",
                   "embedding-probe": "probe"}  # fmt: skip


def demo_plan() -> tuple[list[str], dict, list[str], dict]:
    """The demo's defenses, their overrides, every registered attack and the settings that apply
    to each (keys an attack does not have are skipped, so a new attack joins with its defaults)."""
    import attacks as attack_registry

    names = attack_registry.available_attacks()
    settings = {}
    for name in names:
        known = attack_registry.attack_settings(name)
        chosen = {**DEMO_ATTACK_SETTINGS["*"], **DEMO_ATTACK_SETTINGS.get(name, {})}
        chosen = {k: v for k, v in chosen.items() if k in known}
        if chosen:
            settings[name] = chosen
    return list(DEMO_DEFENSES), dict(DEMO_DEFENSE_OVERRIDES), names, settings


def demo_table(rows: list[dict], units: dict[str, str | None]) -> str:
    """The result table of :meth:`StudyResult.table` rows in at most 100 columns: defense, the
    unit its ε protects, ε, test accuracy and every attack's AUC under a short heading."""
    from dpaudit.app.commands._common import fmt as _fmt
    from dpaudit.app.commands._common import table as _table

    attack_keys = list(dict.fromkeys(k for r in rows for k in r if k.endswith(" AUC")))
    attack_names = [k.removesuffix(" AUC") for k in attack_keys]
    columns = ["defense", "unit", "ε", "test acc", *(ATTACK_HEADINGS.get(name, name) for name in attack_names)]
    table_rows = []
    for r in rows:
        values = [r["defense"], units.get(r["defense"]) or "-", r["epsilon"], _fmt(r.get("test_accuracy"))]
        values += [_fmt(r.get(k)) for k in attack_keys]
        table_rows.append(dict(zip(columns, values)))
    # the formatter pads every cell, the last one included; trailing blanks only widen the table
    return "\n".join(line.rstrip() for line in _table(table_rows, columns).splitlines())


def check_demo_folder(out) -> None:
    """The demo re-configures its own study folder (a newer demo may change its plan), so it
    refuses, before any work, a folder holding a study that another command made: its
    ``study.json`` would be rewritten and the demo's cells appended to its ``results.jsonl``."""
    from dpaudit.app.outputs import study_made_by
    from dpaudit.errors import ConfigurationError

    made_by = study_made_by(out)
    if made_by not in (None, "demo"):
        made = "by an unknown command" if made_by == "unknown" else f"by `dpaudit {made_by}`"
        raise ConfigurationError(
            f"--out {out} holds a study made {made}, not a demo; the demo would re-configure it and add its cells to "
            "it: choose another folder (dpaudit demo --out DIR)"
        )


def cmd_demo(args) -> int:
    from dpaudit.app.commands._common import cap_jobs
    from dpaudit.app.outputs import check_output_dir, check_report_paths

    check_output_dir(args.out, "study")  # refused before torch loads
    check_demo_folder(args.out)
    check_report_paths(args.report, "study", what="--report")
    args.jobs = cap_jobs(args.jobs)
    from dpaudit.app.workflows import Study, StudyConfig
    from dpaudit.training.registry import get_defense

    defenses, overrides, names, settings = demo_plan()
    units = {name: get_defense(name).unit for name in defenses}
    private = sum(unit is not None for unit in units.values())
    config = StudyConfig(
        dataset="csbm",
        defenses=defenses,
        epsilons=list(DEMO_EPSILONS),
        seeds=[args.seed],
        attacks=names,
        dataset_options=dict(DEMO_DATASET_OPTIONS),
        overrides=overrides,
        attack_settings=settings,
        device=args.device,
        title="dpaudit demo: every defense family under every attack on the embedded synthetic graph",
    )
    print(
        f"dpaudit {__version__} demo: {private} private defenses (ε = {', '.join(f'{e:g}' for e in DEMO_EPSILONS)}) and "
        f"{len(defenses) - private} non-private models under {len(names)} attacks"
    )
    print(f"graph: csbm, {DEMO_DATASET_OPTIONS['num_nodes']} nodes; {args.jobs} worker(s); study folder {args.out}/")
    start = time.perf_counter()
    # the demo folder is ours: a newer demo configuration may re-configure it
    result = Study(config, args.out, command="dpaudit " + " ".join(sys.argv[1:]), force=True,
                   made_by="demo").run(jobs=args.jobs)  # fmt: skip
    print(demo_table(result.table(), units))
    print("attack AUC: 0.5 is chance, 1.0 always right; the report says which attacks each guarantee covers.")
    for rec in result.failed:
        err = rec.get("error") or {}
        print(f"failed: {rec['cell_id']}: {err.get('type')}: {err.get('message')}")
    seconds = time.perf_counter() - start
    print(f"{len(result.done)} cells done, {len(result.failed)} failed in {seconds:.0f}s; writing the report")
    print(f"report: {Path(result.to_html(args.report)).resolve()}")
    return 0


def add_parser(subparsers) -> None:
    from dpaudit.seeds import seed_argument

    p = subparsers.add_parser(
        "demo", help="the end-to-end demo on the embedded synthetic graph (writes demo-report.html)"
    )
    p.add_argument("--out", default="demo-out", help="study folder (rerunning resumes it)")
    p.add_argument("--report", default="demo-report.html")
    p.add_argument("--jobs", type=int, default=None, help="cells run in parallel (default: one per core)")
    p.add_argument("--seed", type=seed_argument, default=0, help="0 <= seed < 2**31")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=cmd_demo)
