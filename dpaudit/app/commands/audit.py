"""``dpaudit audit``: every applicable attack against one released model, then its report."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from dpaudit.app.commands._common import print_table, threads_for_load
from dpaudit.app.commands._study_args import (
    add_allow_long_argument,
    attack_names,
    attack_overrides,
    check_attack_counts,
    command_line,
    list_option,
)

log = logging.getLogger("dpaudit")


def cmd_audit(args) -> int:
    """Audit one released model with every applicable attack and write the HTML report, under a lock on ``--out``.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit audit``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    from dpaudit.app.names import check_names
    from dpaudit.app.outputs import output_lock

    check_names(attacks=args.attacks)  # before torch loads (a fraction of a second)
    # an empty list too, and a count above its cap (each attack's settings read from its source)
    check_attack_counts(args.attack_set, list_option(args.attacks, "--attacks"), args.allow_long)
    with output_lock(args.out):  # a second audit to the same --out refuses, naming this one
        return _audit_locked(args)


def _audit_locked(args) -> int:
    from dpaudit.app.commands._dataset_args import parse_dataset_options
    from dpaudit.app.outputs import check_report_paths
    from dpaudit.app.workflows.audit import check_canary_results
    from dpaudit.data.datasets import reload_dataset
    from dpaudit.release.model import load

    check_report_paths(args.out, "audit", force=args.force)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)  # the model's classes
    names = attack_names(args.attacks)  # names and settings are refused before the model is read
    settings = attack_overrides(args.attack_set, names, args.allow_long)
    model = load(args.model, device="cpu", record=True)  # the owner's audit: its record when it is there
    if not model.has_record:  # said once, up front: otherwise only the report says why nothing was tested
        log.warning(
            "%s has no owner's record (provenance.json): membership is the owner's record, so no attack can tell "
            "members from non-members and the claim will not be tested; audit the folder where provenance.json "
            "sits beside model.json",
            args.model,
        )
    canaries = check_canary_results(model, args.canaries)  # one line before any work
    dataset = reload_dataset(
        model.card.get("dataset"), model.provenance("dataset"), args.dataset, options, args.data_root
    )
    # as many torch threads as the load leaves cores idle: on a busy machine extra threads spin at every
    # barrier, which the plan's load correction does not model
    with threads_for_load():
        if not canaries and not args.no_canaries and model.privacy.is_private:
            canaries = _refuting_canaries(model, dataset, args.device)
        result = _run_audit(args, model, dataset, names, settings, canaries)
    return _report(args, model, result)


def _run_audit(args, model, dataset, names, settings, canaries):
    from dpaudit.app.workflows import audit, format_plan
    from dpaudit.app.workflows.audit import check_plan_duration

    return audit(
        model,
        dataset=dataset,
        attacks=names,
        settings=settings,
        quick=args.quick,
        on_plan=lambda plan: (print(format_plan(plan), flush=True), check_plan_duration(plan, args.allow_long)),
        data_root=args.data_root,
        device=args.device,
        command=command_line(),
        canaries=canaries or None,
        **({} if args.deployment is None else {"deployment": args.deployment}),
    )


def _report(args, model, result) -> int:
    """The audit's table, verdict line and report (``--out``)."""
    from dpaudit.app.commands._dataset_args import valid_bound_advice

    rows = [
        {
            "attack": n,
            "AUC": r.auc,
            "TPR@1%FPR": (r.tpr_at_fpr or {}).get("0.01"),
            "ε lower bound": r.epsilon_lower_bound,
            "covered": ("claim" if r.ceiling.get("hypothesis") else "yes") if r.covered_by_guarantee else "no",
            "fair game": "yes" if getattr(r, "bound_valid", False) else "no",
        }
        for n, r in result.results.items()
    ]
    audited = sorted({str(r.extra.get("deployment")) for r in result.results.values() if r.extra.get("deployment")})
    where = f", deployment {', '.join(audited)}" if audited else ""
    print(f"audit of {model.method} ({model.privacy.summary()}) on {result.dataset.name}{where}")
    print_table(rows)
    advice = valid_bound_advice(model, result.dataset)
    if advice:
        print(advice)
    for name, entry in result.canaries.items():
        certified = entry.get("certified_epsilon_lower_bound")
        certified = "-" if certified is None else f"{certified:.2f}"
        print(
            f"{name} ({entry.get('recipe')}): certified ε ≥ {certified} against "
            f"the claim's ε = {entry.get('claimed_epsilon'):.3g}: {entry['verdict']}"
        )
    for name, err in result.errors.items():
        print(f"{name}: not run: {err}")
    path = result.to_html(args.out)
    print(f"verdict: {_report_verdict(path)}")
    print(f"report: {Path(path).resolve()}")
    if result.interrupted:
        print("audit interrupted: the report holds the attacks that finished", file=sys.stderr)
        return 130
    return 0


def _refuting_canaries(model, dataset, device: str) -> list[dict]:
    """The canary audit of the model's recipe that can refute its claim (the member/non-member
    pairs of a graph this size cannot): its plan printed before any training, or the one line
    saying what would suffice when none here can."""
    from dpaudit.app.workflows.audit.refute import refuting_canaries

    def announce(plan) -> None:
        if isinstance(plan, str):
            print(f"canary audit: none ({plan})", flush=True)
        elif plan.can_refute:
            print(f"canary audit: {plan.line()}; --no-canaries skips it", flush=True)
        else:
            print(f"canary audit: {plan.line()}", flush=True)

    return refuting_canaries(model, dataset, device=device, progress=True, on_plan=announce)


def _report_verdict(html_path) -> str:
    """The report's own verdict of the audited model (its sidecar), so that the terminal and the
    report never say different things."""
    import json

    from reports.render import sidecar_path

    verdicts = json.loads(sidecar_path(html_path).read_text(encoding="utf-8")).get("verdicts") or []
    return verdicts[0]["headline"] if verdicts else "no verdict (no attack finished)"


def add_parser(subparsers) -> None:
    """Add the ``audit`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    from dpaudit.app.commands._dataset_args import add_dataset_option_argument

    p = subparsers.add_parser("audit", help="run every applicable attack against one released model, then report")
    p.add_argument("--model", required=True, help="released-model folder")
    p.add_argument(
        "--dataset",
        default=None,
        help="the model's dataset: a name or graph file, to give again when the default fails (default: "
        "the card's dataset, or the graph file in the owner's record)",
    )
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
    p.add_argument(
        "--canaries",
        nargs="+",
        default=None,
        metavar="RESULT.json",
        help="canary audit results (dpaudit canary --out) of this model's recipe at its claimed unit, ε "
        "and dataset: re-tested against the model's claim, they enter its verdict",
    )
    p.add_argument(
        "--no-canaries",
        action="store_true",
        help="skip the canary audit of the model's recipe that runs by default when --canaries is not "
        "given (sized to refute the claim; its plan is printed before it trains)",
    )
    p.add_argument("--force", action="store_true", help="replace --out and its sidecar whatever they hold")
    add_allow_long_argument(p)
    p.set_defaults(func=cmd_audit)
