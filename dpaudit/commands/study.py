"""``dpaudit audit | compare | report``: the audit and compare workflows from the command line.

    dpaudit audit --model runs/gcn --attacks mia-threshold,link-steal --out audit.html
    dpaudit compare --dataset csbm --defenses mlp-dp,gcn --epsilons 1,4,inf --seeds 2 \\
        --set mlp-dp.epochs=10 --attack-set runs=2 --jobs 2 --out studies/demo
    dpaudit report studies/demo --out report.html
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from dpaudit.errors import ConfigurationError


def parse_literal(text: str) -> Any:
    """``3`` → 3, ``0.5`` → 0.5, ``true`` → True, ``none`` → None, ``[1,2]`` → list, else the string."""
    low = text.strip().lower()
    if low in {"true", "yes", "on"}:
        return True
    if low in {"false", "no", "off"}:
        return False
    if low in {"none", "null"}:
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.strip().startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def _split_assignment(item: str, flag: str) -> tuple[str | None, str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigurationError(f"{flag} expects [NAME.]KEY=VALUE, got {item!r}")
    scope, dot, key = key.strip().rpartition(".") if "." in key else ("", "", key.strip())
    return (scope or None), key.strip().replace("-", "_"), value.strip()


def defense_overrides(assignments: list[str], defenses: list[str]) -> dict[str, dict[str, Any]]:
    """``--set DEFENSE.KEY=VALUE`` (one defense) or ``--set KEY=VALUE`` (every defense that has KEY),
    typed by each defense's hyperparameter dataclass."""
    from dpaudit.defense import parse_overrides
    from dpaudit.registry import get_defense

    out: dict[str, dict[str, Any]] = {}
    for item in assignments or []:
        scope, key, value = _split_assignment(item, "--set")
        targets = [scope] if scope else defenses
        if scope and scope not in defenses:
            raise ConfigurationError(f"--set {item}: defense {scope!r} is not in --defenses")
        applied = False
        for defense in targets:
            cls = get_defense(defense)
            if key in {f.name for f in dataclasses.fields(cls.hyperparameters_class)} or scope:
                out.setdefault(defense, {}).update(parse_overrides(cls.hyperparameters_class, [f"{key}={value}"]))
                applied = True
        if not applied:
            raise ConfigurationError(f"--set {item}: no defense in the study has a hyperparameter {key!r}")
    return out


def attack_overrides(
    assignments: list[str], attacks: list[str], allow_long: bool = False
) -> dict[str, dict[str, Any]]:
    """``--attack-set ATTACK.KEY=VALUE`` or ``--attack-set KEY=VALUE`` (every attack that accepts
    KEY); each count at most its cap unless ``allow_long`` (:func:`attacks.check_attack_caps`)."""
    import attacks as attack_registry
    from attacks import check_attack_caps, check_attack_ranges

    out: dict[str, dict[str, Any]] = {}
    for item in assignments or []:
        scope, key, value = _split_assignment(item, "--attack-set")
        if scope and scope not in attacks:
            raise ConfigurationError(f"--attack-set {item}: attack {scope!r} is not being run")
        targets = [scope] if scope else attacks
        applied = False
        for name in targets:
            known = attack_registry.attack_settings(name)
            if key in known:
                out.setdefault(name, {})[key] = parse_literal(value)
                attack_registry.check_setting_types(name, {key: out[name][key]})
                check_attack_ranges(name, {key: out[name][key]})
                check_attack_caps(name, {key: out[name][key]}, allow_long)
                applied = True
            elif scope:
                raise ConfigurationError(f"attack {name!r} has no setting {key!r}; known: {', '.join(sorted(known))}")
        if not applied:
            raise ConfigurationError(f"--attack-set {item}: no attack being run accepts {key!r}")
    return out


def _list(text: str | None, option: str) -> list[str] | None:
    """``"a, b"`` → ``["a", "b"]``; ``None`` when the option was not given; an option given
    with nothing in it (``--attacks ''``) is refused, naming ``option``."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigurationError(f"{option} was given an empty list; name at least one, or leave {option} out")
    return items


def _attack_names(text: str | None) -> list[str]:
    import attacks as attack_registry

    names = _list(text, "--attacks") or attack_registry.available_attacks()
    for name in names:
        attack_registry.get_attack(name)
    return names


def _command_line() -> str:
    return shlex.join(["dpaudit", *sys.argv[1:]])


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.{digits}f}"
    return str(value)


def print_table(rows: list[dict]) -> None:
    if not rows:
        return
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


# --------------------------------------------------------------------------- commands


def _epsilons(text: str) -> list[str]:
    """``--epsilons``, each a valid target ε that a defense can calibrate (checked before work)."""
    from dpaudit.accounting.spec import validate_epsilon
    from dpaudit.cli import check_target_epsilon

    items = _list(text, "--epsilons")
    for item in items:
        check_target_epsilon(validate_epsilon(item), what="--epsilons")
    return items


def cmd_audit(args) -> int:
    from dpaudit.names import check_names
    from dpaudit.outputs import output_lock

    check_names(attacks=args.attacks)  # before torch loads (a fraction of a second)
    with output_lock(args.out):  # a second audit to the same --out refuses, naming this one
        return _audit_locked(args)


def _audit_locked(args) -> int:
    from dpaudit.commands._dataset_args import parse_dataset_options, valid_bound_advice
    from dpaudit.datasets import reload_dataset
    from dpaudit.model import load
    from dpaudit.outputs import check_report_paths
    from dpaudit.workflows import audit, format_plan
    from dpaudit.workflows.audit import check_plan_duration

    check_report_paths(args.out, "audit", force=args.force)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)  # the model's classes
    names = _attack_names(args.attacks)  # names and settings are refused before the model is read
    settings = attack_overrides(args.attack_set, names, args.allow_long)
    model = load(args.model, device="cpu")
    dataset = reload_dataset(model.card.get("dataset"), model.provenance("dataset"), args.dataset, options,
                             args.data_root)  # fmt: skip
    result = audit(
        model,
        dataset=dataset,
        attacks=names,
        settings=settings,
        quick=args.quick,
        on_plan=lambda plan: (print(format_plan(plan), flush=True), check_plan_duration(plan, args.allow_long)),
        data_root=args.data_root,
        device=args.device,
        command=_command_line(),
        **({} if args.deployment is None else {"deployment": args.deployment}),
    )
    rows = [
        {"attack": n, "AUC": r.auc, "TPR@1%FPR": (r.tpr_at_fpr or {}).get("0.01"), "ε lower bound": r.epsilon_lower_bound,
         "covered": "yes" if r.covered_by_guarantee else "no",
         "fair game": "yes" if getattr(r, "bound_valid", False) else "no"}
        for n, r in result.results.items()
    ]  # fmt: skip
    audited = sorted({str(r.extra.get("deployment")) for r in result.results.values() if r.extra.get("deployment")})
    where = f", deployment {', '.join(audited)}" if audited else ""
    print(f"audit of {model.method} ({model.privacy.summary()}) on {result.dataset.name}{where}")
    print_table(rows)
    advice = valid_bound_advice(model, result.dataset)
    if advice:
        print(advice)
    for name, err in result.errors.items():
        print(f"{name}: not run: {err}")
    path = result.to_html(args.out)
    print(f"verdict: {_report_verdict(path)}")
    print(f"report: {Path(path).resolve()}")
    if result.interrupted:
        print("audit interrupted: the report holds the attacks that finished", file=sys.stderr)
        return 130
    return 0


def _report_verdict(html_path) -> str:
    """The report's own verdict of the audited model (its sidecar), so that the terminal and the
    report never say different things."""
    import json

    from reports.render import sidecar_path

    verdicts = json.loads(sidecar_path(html_path).read_text(encoding="utf-8")).get("verdicts") or []
    return verdicts[0]["headline"] if verdicts else "no verdict (no attack finished)"


def run_compare(args, command: str | None = None):
    """Build and run the study described by ``compare``-style arguments; returns the StudyResult."""
    from dpaudit.names import check_names

    check_names(defenses=args.defenses, attacks=args.attacks)  # before torch loads
    from dpaudit.accounting.spec import validate_epsilon
    from dpaudit.cli import cap_jobs
    from dpaudit.commands._dataset_args import absolute_dataset, check_declarations, parse_dataset_options
    from dpaudit.outputs import check_output_dir, check_report_paths
    from dpaudit.registry import get_defense
    from dpaudit.workflows import Study, StudyConfig

    if args.no_report and args.report is not None:
        raise ConfigurationError("--report and --no-report contradict each other; give one of them")
    check_output_dir(args.out, "study", force=args.force)
    if not args.no_report:
        check_report_paths(args.report or Path(args.out) / "report.html", "study", force=args.force, what="--report")
    args.jobs = cap_jobs(args.jobs)
    defenses = _list(args.defenses, "--defenses")
    names = _attack_names(args.attacks)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    epsilons = _epsilons(args.epsilons)
    finite = [validate_epsilon(e) for e in epsilons if validate_epsilon(e) < math.inf]
    private = []
    if finite:
        overrides = defense_overrides(args.set, defenses)
        private = [get_defense(d)(epsilon=finite[0], delta=args.delta, device="cpu", **overrides.get(d, {}))
                   for d in defenses if get_defense(d).unit is not None]  # fmt: skip
    # the label domain, δ, declared sizes and every private defense's own needs, all in one line
    check_declarations(args.dataset, options, private, args.delta)
    config = StudyConfig(
        dataset=absolute_dataset(args.dataset),
        defenses=defenses,
        epsilons=epsilons,
        seeds=args.seeds,
        attacks=names,
        dataset_options=options,
        split=args.split,
        delta=args.delta,
        overrides=defense_overrides(args.set, defenses),
        attack_settings=attack_overrides(args.attack_set, names, getattr(args, "allow_long", False)),
        device=args.device,
        data_root=args.data_root,
        title=args.title,
        canaries=_list(getattr(args, "canaries", None), "--canaries") or [],
        canary_count=getattr(args, "canary_count", 200),
    )
    study = Study(config, args.out, command=command or _command_line(), force=args.force)
    return study.run(jobs=args.jobs, executor=args.executor, retry_failed=not args.keep_failed)


def cmd_compare(args) -> int:
    result = run_compare(args)
    print_table(result.table())
    print(f"{len(result.done)} cells done, {len(result.failed)} failed -> {Path(args.out).resolve()}")
    for rec in result.failed:
        err = rec.get("error") or {}
        print(f"failed: {rec['cell_id']}: {err.get('type')}: {err.get('message')}")
    if not args.no_report:
        path = result.to_html(args.report)
        print(f"report: {Path(path).resolve()}")
    return 0 if not result.failed else 1


def cmd_report(args) -> int:
    from dpaudit.outputs import check_report_paths
    from dpaudit.workflows.study import StudyResult

    check_report_paths(args.out or Path(args.study_dir) / "report.html", "study", force=args.force)
    result = StudyResult.load(args.study_dir)
    path = result.to_html(args.out)
    print(result.counts_line())
    print(f"report: {Path(path).resolve()}")
    return 0


# --------------------------------------------------------------------------- parsers


def add_allow_long_argument(p) -> None:
    """``--allow-long``: run attack counts above their caps and plans estimated above the limit."""
    p.add_argument(
        "--allow-long",
        action="store_true",
        help="run attack counts above their caps (num_references > 256, runs > 50 ...; see the README) and audits "
        "estimated above 2 h, which are otherwise refused before any work",
    )


def add_study_arguments(p) -> None:
    """Options shared by ``compare`` and ``demo``-like commands."""
    from dpaudit.commands._dataset_args import SPLIT_HELP, add_dataset_option_argument

    p.add_argument("--attacks", default=None, help="comma-separated attack names (default: every attack)")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds per (defense, ε) (seeds 0..N-1)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="cells run in parallel (worker processes or Ray tasks; default: one per core)",
    )
    p.add_argument("--executor", default="local", choices=["local", "ray"])
    p.add_argument("--split", default=None, help=SPLIT_HELP)
    p.add_argument("--delta", default="auto", help="δ in (0, 1) or auto (a power of ten below 1/#declared units)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--data-root", default=None)
    p.add_argument("--set", action="append", metavar="[DEFENSE.]KEY=VALUE", help="defense hyperparameter (repeatable)")
    p.add_argument("--attack-set", action="append", metavar="[ATTACK.]KEY=VALUE", help="attack setting (repeatable)")
    add_dataset_option_argument(p)
    p.add_argument("--keep-failed", action="store_true", help="do not retry cells that failed in an earlier run")
    p.add_argument("--title", default=None, help="report title")
    add_allow_long_argument(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="write into --out even if it holds something else "
        "(another kind of output, or a study with another configuration)",
    )


def add_parser(subparsers) -> None:
    from dpaudit.commands._dataset_args import DATASET_HELP, add_dataset_option_argument

    p = subparsers.add_parser("audit", help="run every applicable attack against one released model, then report")
    p.add_argument("--model", required=True, help="released-model folder")
    p.add_argument("--dataset", default=None,
                   help="the model's dataset: a name or graph file, to give again when the default fails (default: "
                   "the card's dataset, or the graph file in the owner's record)")  # fmt: skip
    add_dataset_option_argument(p)
    p.add_argument("--attacks", default=None, help="comma-separated attack names (default: every attack)")
    p.add_argument("--attack-set", action="append", metavar="[ATTACK.]KEY=VALUE", help="attack setting (repeatable)")
    p.add_argument("--data-root", default=None)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--out", default="audit-report.html", help="HTML report path (a .json sidecar goes next to it)")
    p.add_argument("--quick", action="store_true", help="smaller settings: a first look in about a minute")
    p.add_argument(
        "--deployment",
        default=None,
        choices=["auto", "querier-graph", "training-graph"],
        help="which graph the attacks' queries are answered over (default auto: the querier's graph for a model "
        "trained on an inductive split, the owner's training graph otherwise)",
    )
    p.add_argument("--force", action="store_true", help="replace --out and its sidecar whatever they hold")
    add_allow_long_argument(p)
    p.set_defaults(func=cmd_audit)

    p = subparsers.add_parser("compare", help="train and attack a defense × ε × seed grid (resumable)")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--defenses", required=True, help="comma-separated defense names")
    p.add_argument("--epsilons", required=True, help="comma-separated target ε values (inf allowed)")
    p.add_argument("--out", required=True, help="study folder (rerun the same command to resume)")
    p.add_argument("--report", default=None, help="HTML report path (default STUDY_DIR/report.html)")
    p.add_argument("--no-report", action="store_true", help="do not render the report at the end")
    p.add_argument("--canaries", default=None, help="canary audits per cell: node, edge or node,edge (dpaudit canary)")
    p.add_argument("--canary-count", type=int, default=200, help="canaries per canary audit (default 200)")
    add_study_arguments(p)
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser("report", help="re-render a study's report from its saved results")
    p.add_argument("study_dir")
    p.add_argument("--out", default=None, help="HTML report path (default STUDY_DIR/report.html)")
    p.add_argument("--force", action="store_true", help="replace --out and its sidecar whatever they hold")
    p.set_defaults(func=cmd_report)
