"""``dpaudit compare``: train and attack a defense × ε × seed grid (resumable)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from dpaudit.accounting.spec import check_unit_epsilon, validate_epsilon
from dpaudit.app.commands._common import print_table
from dpaudit.app.commands._dataset_args import check_label_domain_first
from dpaudit.app.commands._study_args import (
    add_study_arguments,
    attack_names,
    attack_overrides,
    check_attack_counts,
    check_seed_count,
    command_line,
    defense_overrides,
    epsilon_grid,
    list_option,
)
from dpaudit.app.names import builtin_units
from dpaudit.errors import ConfigurationError

log = logging.getLogger("dpaudit")


def _canary_kinds(value) -> list[str]:
    """``--canaries``: ``none`` (or unset) runs no canary audit."""
    kinds = list_option(value, "--canaries") if value else []
    return [] if kinds == ["none"] else kinds


def run_compare(args, command: str | None = None):
    """Build and run the study described by ``compare``-style arguments; returns the StudyResult.

    Args:
        args: the parsed ``compare``-style command line.
        command: the name of the command that made the study (recorded in it); ``None``: ``compare``.

    Returns:
        The study's result.

    Raises:
        ConfigurationError: contradictory or invalid options, said before any training.
    """
    from dpaudit.app.names import check_names

    check_names(defenses=args.defenses, attacks=args.attacks)  # before torch loads
    check_seed_count(args.seeds, getattr(args, "allow_long", False))
    # what reads no data is refused before torch (or any heavy library) is imported
    from dpaudit.app.commands._common import cap_jobs, parse_delta
    from dpaudit.app.outputs import check_output_dir, check_report_paths
    from dpaudit.data.split_specs import parse_split_spec

    if args.no_report and args.report is not None:
        raise ConfigurationError("--report and --no-report contradict each other; give one of them")
    defenses = list_option(args.defenses, "--defenses")
    list_option(args.attacks, "--attacks")
    epsilons = epsilon_grid(args.epsilons)
    parse_delta(args.delta)
    if args.split is not None:
        parse_split_spec(args.split)
    check_before_import(args, defenses, epsilons)
    check_output_dir(args.out, "study", force=args.force)
    if not args.no_report:
        check_report_paths(args.report or Path(args.out) / "report.html", "study", force=args.force, what="--report")
    args.jobs = cap_jobs(args.jobs)

    from dpaudit.app.commands._dataset_args import absolute_dataset, check_declarations, parse_dataset_options
    from dpaudit.app.workflows import Study, StudyConfig
    from dpaudit.training.registry import get_defense

    names = attack_names(args.attacks)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    finite = [validate_epsilon(e) for e in epsilons if validate_epsilon(e) < math.inf]
    private = []
    if finite:
        overrides = defense_overrides(args.set, defenses)
        private = [
            get_defense(d)(epsilon=finite[0], delta=args.delta, device="cpu", **overrides.get(d, {}))
            for d in defenses
            if get_defense(d).unit is not None
        ]
    # the label domain, δ, declared sizes and every private defense's own needs, all in one line
    check_declarations(args.dataset, options, private, args.delta)
    settings = attack_overrides(args.attack_set, names, getattr(args, "allow_long", False))
    if finite and len(finite) == len(epsilons):  # no ε = ∞ asked: a non-private defense runs at none of them
        baselines = [name for name in defenses if get_defense(name).unit is None]
        if len(baselines) == len(defenses):  # train's rule, from the same place
            get_defense(baselines[0]).check_epsilon(finite[0], " (add inf to --epsilons to run it at ε = ∞)")
        for name in baselines:
            log.warning("%s is not a private defense: it runs at ε = ∞ only, as the baseline", name)
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
        attack_settings=settings,
        device=args.device,
        data_root=args.data_root,
        title=args.title,
        # a study that trains nothing private has no claim to test (and keeps its configuration hash)
        canaries=[k for k in _canary_kinds(getattr(args, "canaries", None)) if private or k != "auto"],
        canary_count=getattr(args, "canary_count", 200),
    )
    _say_power(config)
    study = Study(config, args.out, command=command or command_line(), force=args.force)
    return study.run(jobs=args.jobs, executor=args.executor, retry_failed=not args.keep_failed)


def check_before_import(args, defenses: list[str], epsilons: list[str]) -> None:
    """What the defenses' and attacks' sources declare decides three refusals before torch is
    imported (:mod:`dpaudit.app.names`): non-private defenses alone at finite ε only (train's rule,
    :func:`~dpaudit.accounting.spec.check_unit_epsilon`), a graph file's undeclared label domain when
    no private model is trained (:func:`~dpaudit.app.commands._dataset_args.check_label_domain_first`),
    and an attack count above its cap (:func:`~dpaudit.app.commands._study_args.check_attack_counts`).
    A defense or attack the sources do not declare (a plug-in) is left to the checks after the import.

    Args:
        args: the parsed ``compare``-style command line.
        defenses: the ``--defenses`` names.
        epsilons: the ``--epsilons`` items (valid target ε).

    Raises:
        ConfigurationError: one of the refusals above.
    """
    units = builtin_units()
    finite = [e for e in map(validate_epsilon, epsilons) if e < math.inf]
    known = all(d in units for d in defenses)
    if known and finite and len(finite) == len(epsilons) and all(units[d] is None for d in defenses):
        check_unit_epsilon(defenses[0], None, finite[0], " (add inf to --epsilons to run it at ε = ∞)")
    # the privacy units of what trains privately (none without a finite ε); unknown for a plug-in
    private = None if not known else [units[d] for d in defenses] if finite else []
    check_label_domain_first(args.dataset, args.dataset_option, private)
    check_attack_counts(
        args.attack_set, list_option(args.attacks, "--attacks") or None, getattr(args, "allow_long", False)
    )


def _say_power(config) -> None:
    """Print, before any training, which canary audit will test each private claim (``--canaries
    auto``, the default) or what would suffice where none can."""
    from dpaudit.app.workflows.audit.refute import study_power_lines
    from dpaudit.data.datasets import load_dataset
    from dpaudit.errors import DPAuditError

    if "auto" not in config.canaries:
        return
    try:
        dataset = load_dataset(config.dataset, root=config.data_root, **config.dataset_options)
    except DPAuditError:  # the study itself says why, before any training
        return
    for line in study_power_lines(config, dataset):
        print(f"canary audit: {line}", flush=True)


def cmd_compare(args) -> int:
    """Run the study (:func:`run_compare`), print its table and failed cells, render its report.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit compare``.

    Returns:
        The process exit status (0: every cell done, 1: some cell failed).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
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


def add_parser(subparsers) -> None:
    """Add the ``compare`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    from dpaudit.app.commands._dataset_args import DATASET_HELP

    p = subparsers.add_parser("compare", help="train and attack a defense × ε × seed grid (resumable)")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--defenses", required=True, help="comma-separated defense names")
    p.add_argument("--epsilons", required=True, help="comma-separated target ε values (inf allowed)")
    p.add_argument("--out", required=True, help="study folder (rerun the same command to resume)")
    p.add_argument("--report", default=None, help="HTML report path (default STUDY_DIR/report.html)")
    p.add_argument("--no-report", action="store_true", help="do not render the report at the end")
    p.add_argument(
        "--canaries",
        default="auto",
        help="canary audits per private cell: auto (default: the audit each claim needs to be refutable, "
        "its size printed before training), node, edge, a comma-separated list, or none",
    )
    p.add_argument("--canary-count", type=int, default=200, help="canaries per canary audit (default 200)")
    add_study_arguments(p)
    p.set_defaults(func=cmd_compare)
