"""``dpaudit demo``: every defense family under every attack on the embedded synthetic graph, one
study, one report, in about two minutes on two cores."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dpaudit import __version__
from dpaudit.errors import DPAuditError

# The demo's plan, all in one place. The graph is small enough that a cell takes seconds, and
# hard enough to show a trade-off: with a weak feature signal (0.3 per coordinate; csbm's default
# 0.6 let every model, private or not, reach test accuracy ≈ 1.0) and homophily 0.7, the
# non-private GNNs still reach ≈ 0.95 by aggregating neighbours, the MLP ≈ 0.7, and the private
# models fall below them, further at ε = 1 than at ε = 4.
DEMO_DATASET_OPTIONS = {
    "num_nodes": 500,
    "num_classes": 4,
    "num_features": 32,
    "avg_degree": 8.0,
    "homophily": 0.7,
    "feature_signal": 0.3,
    "seed": 0,
}
# Every private defense at two ε, so the privacy–utility panel has a curve per defense and the
# ε lower bounds sit at two claims; non-private models train once (ε = ∞).
DEMO_EPSILONS = [1.0, 4.0]
# One private member of each family and the non-private models they are compared with: the
# baselines gcn/sage/mlp, and GAP and DPAR without noise (gap-inf, dpar-nodp), which show what
# the noise itself buys. The other registered variants add minutes and nothing new to the story.
DEMO_DEFENSES = [
    "gap-edp",
    "gap-ndp",
    "gap-inf",
    "dpar-gm",
    "dpar-nodp",
    "dpgnn",
    "gcon",
    "mlp-dp",
    "gcn",
    "sage",
    "mlp",
]
# Every other defense trains with its defaults (each under a second here). DP-GNN's default
# schedule takes 16 s per training, and the attacks train shadow models with the same recipe;
# 200 steps take 2 s and reach 0.92 test accuracy at ε = 4 (the default reaches 1.0).
# mlp-dp (and its broken twin) with a hidden layer: the default's linear model on 32 features has
# 132 coordinates, and a refuting audit at ε = 4 needs about 1,800 gradient canaries, one per
# coordinate — 14 trainings instead of one.
DEMO_MLP_DP = {"layers": 2, "hidden": 64}
DEMO_DEFENSE_OVERRIDES = {"dpgnn": {"steps": 200}, "mlp-dp": DEMO_MLP_DP, "zoo-mlp-dp-noise-div10": DEMO_MLP_DP}
# A deliberately broken private model beside the sound ones: mlp-dp whose DP-SGD adds a tenth of
# the noise it accounts, still claiming mlp-dp's ε (the broken-mechanism zoo,
# dpaudit/app/workflows/zoo.py). The demo's audit must refute it, and must not refute the others.
DEMO_BROKEN = "zoo-mlp-dp-noise-div10"
#: the demo table's short name for a defense (its full name is said under the table)
DEMO_LABELS = {DEMO_BROKEN: "mlp-dp-σ/10"}
DEMO_MODULES = ["dpaudit.app.workflows.zoo"]
# The claims' δ. δ = auto on 500 nodes is 1e-3, where the one-run canary tests pay about m·δ for
# m canaries and certify nothing at any count; every defense calibrates its noise to the δ it is
# given, so the demo claims δ = 1e-5, where 24 canaries can refute ε = 1 and 640 can refute ε = 4.
DEMO_DELTA = 1e-5
# Each private model is also tested by the canary audit its claim needs to be refutable
# (dpaudit/app/workflows/audit/refute.py): the graph's 37 member/non-member pairs cannot.
DEMO_CANARIES = ["auto"]
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
    # one re-training per model: the default seed (0), which the demo trains with — its noise comes
    # from OS entropy, so the replay must not reproduce the release
    "seed-replay": {"seeds": 1},
}


def demo_plan() -> tuple[list[str], dict, list[str], dict]:
    """The demo's defenses (its broken model last among the private ones), their overrides, every
    registered attack and the settings that apply to each (keys an attack does not have are
    skipped, so a new attack joins with its defaults)."""
    import importlib

    import attacks as attack_registry

    for module in DEMO_MODULES:  # registers the broken model (the study's workers import them too)
        importlib.import_module(module)

    names = attack_registry.available_attacks()
    settings = {}
    for name in names:
        known = attack_registry.attack_settings(name)
        chosen = {**DEMO_ATTACK_SETTINGS["*"], **DEMO_ATTACK_SETTINGS.get(name, {})}
        chosen = {k: v for k, v in chosen.items() if k in known}
        if chosen:
            settings[name] = chosen
    defenses = list(DEMO_DEFENSES)
    defenses.insert(defenses.index("mlp-dp") + 1, DEMO_BROKEN)
    return defenses, dict(DEMO_DEFENSE_OVERRIDES), names, settings


def demo_power_line(defenses: list[str]) -> str:
    """What tests the demo's claims, said before any training: the canaries each ε needs at the
    demo's δ (:func:`~dpaudit.app.workflows.audit.refute.plan_refuting_audit`) and their kinds.

    Args:
        defenses: the demo's defenses (names); the private ones are planned.

    Returns:
        One line to print.
    """
    from dpaudit.app.workflows.audit.refute import canary_kind, plan_refuting_audit
    from dpaudit.training.registry import get_defense

    private = [d for d in defenses if get_defense(d).unit is not None]
    kinds = {d: canary_kind(d, max(DEMO_EPSILONS), DEMO_DEFENSE_OVERRIDES.get(d)) for d in private}
    plans = [plan_refuting_audit(private[0], e, DEMO_DELTA, kind="node") for e in DEMO_EPSILONS]
    needs = ", ".join(
        f"ε = {p.claim:g} by {p.canaries} canaries (a perfect attack would certify {p.certifiable:.2f})" for p in plans
    )
    by_kind = "; ".join(
        f"{kind}: {', '.join(d for d in private if kinds[d] == kind)}" for kind in dict.fromkeys(kinds.values())
    )
    return (
        f"each private claim (δ = {DEMO_DELTA:g}) is also tested by a canary audit able to refute it: {needs}, "
        f"spread over runs where a run holds fewer ({by_kind}); {DEMO_BROKEN} is broken on purpose"
    )


def _heading(name: str) -> str:
    """Attack ``name``'s declared short heading; its name when it is not installed."""
    import attacks as attack_registry

    try:
        return attack_registry.declaration(name).short
    except DPAuditError:
        return name


def demo_table(rows: list[dict], units: dict[str, str | None]) -> str:
    """The result table of :meth:`StudyResult.table` rows in at most 100 columns: defense, the
    unit its ε protects, ε, test accuracy and every attack's AUC under a short heading.

    Args:
        rows: one row per cell (defense, epsilon, test_accuracy and ``"<attack> AUC"`` keys).
        units: each defense's privacy unit (``None``: not private).

    Returns:
        The table as text.
    """
    from dpaudit.app.commands._common import fmt as _fmt
    from dpaudit.app.commands._common import table as _table

    attack_keys = list(dict.fromkeys(k for r in rows for k in r if k.endswith(" AUC")))
    attack_names = [k.removesuffix(" AUC") for k in attack_keys]
    # each attack's declared short heading (attacks.AttackDeclaration.heading), so that every
    # attack fits in 100 columns; the report names each attack in full, with its intervals
    columns = ["defense", "unit", "ε", "test acc", *(_heading(name) for name in attack_names)]
    table_rows = []
    for r in rows:
        label = DEMO_LABELS.get(r["defense"], r["defense"])
        values = [label, units.get(r["defense"]) or "-", r["epsilon"], _fmt(r.get("test_accuracy"))]
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
    """Run the demo study (a small csbm graph, every defense at a few ε) and render its report.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit demo``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
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
        delta=DEMO_DELTA,
        canaries=list(DEMO_CANARIES),
        modules=list(DEMO_MODULES),
        device=args.device,
        title="dpaudit demo: every defense family under every attack on the embedded synthetic graph",
    )
    print(
        f"dpaudit {__version__} demo: {private} private defenses (ε = {', '.join(f'{e:g}' for e in DEMO_EPSILONS)}) and "
        f"{len(defenses) - private} non-private models under {len(names)} attacks"
    )
    print(f"graph: csbm, {DEMO_DATASET_OPTIONS['num_nodes']} nodes; {args.jobs} worker(s); study folder {args.out}/")
    print(demo_power_line(defenses))
    start = time.perf_counter()
    # the demo folder is ours: a newer demo configuration may re-configure it
    result = Study(config, args.out, command="dpaudit " + " ".join(sys.argv[1:]), force=True, made_by="demo").run(
        jobs=args.jobs
    )
    print(demo_table(result.table(), units))
    print("attack AUC: 0.5 is chance, 1.0 always right; the report says which attacks each guarantee covers.")
    print(
        f"{DEMO_LABELS[DEMO_BROKEN]}: {DEMO_BROKEN}, mlp-dp adding a tenth of the noise it accounts (broken on "
        "purpose: the report's verdict refutes its claim)"
    )
    for rec in result.failed:
        err = rec.get("error") or {}
        print(f"failed: {rec['cell_id']}: {err.get('type')}: {err.get('message')}")
    seconds = time.perf_counter() - start
    print(f"{len(result.done)} cells done, {len(result.failed)} failed in {seconds:.0f}s; writing the report")
    print(f"report: {Path(result.to_html(args.report)).resolve()}")
    return 0


def add_parser(subparsers) -> None:
    """Add the ``demo`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
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
