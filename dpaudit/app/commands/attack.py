"""``dpaudit attack``: run one attack against a released model and write its result as JSON.

```text
dpaudit attack --model DIR --attack NAME [--runs N] [--seed S] [--data-root DIR]
               [--device auto|cpu|cuda] [--set KEY=VALUE ...] [--force] [--allow-long] --out FILE.json
```
"""

from __future__ import annotations

import argparse

from dpaudit.app.commands._common import fmt as _fmt
from dpaudit.app.names import builtin_attack_settings, check_attack_name
from dpaudit.assignments import parse_literal, split_assignment
from dpaudit.auditing.caps import check_attack_caps
from dpaudit.errors import ConfigurationError, DPAuditError


def _parse_setting(text: str):
    _, key, value = split_assignment(text, "--set")
    return key, parse_literal(value)


def cmd_attack(args) -> int:
    """Run one attack against a released model and write its result JSON (``--out``).

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit attack``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    for required in ("model", "attack", "out"):
        if getattr(args, required) is None:
            raise DPAuditError(f"attack needs --{required}")
    check_attack_name(args.attack)  # before torch loads (a fraction of a second)
    settings = dict(_parse_setting(s) for s in args.set or [])
    if args.runs is not None:
        if args.runs < 1:
            raise ConfigurationError("--runs must be >= 1")
        settings["runs"] = args.runs
    # a count above its cap, before torch loads too: the attack's settings read from its source
    declared = builtin_attack_settings().get(args.attack, ())
    check_attack_caps(args.attack, {k: v for k, v in settings.items() if k in declared}, args.allow_long)
    import attacks
    from dpaudit.app.outputs import check_output_file
    from dpaudit.auditing.statistics import coverage_phrase
    from dpaudit.data.datasets import reload_dataset
    from dpaudit.release.model import load
    from dpaudit.runtime import resolve_device

    attacks.get_attack(args.attack)  # unknown names fail before the model is loaded
    check_output_file(args.out, "attack", force=args.force)
    settings["seed"] = args.seed
    if args.deployment is not None:
        settings["deployment"] = args.deployment
    known = attacks.attack_settings(args.attack)
    if "data_root" in known:
        settings["data_root"] = args.data_root
    if "device" in known:
        settings["device"] = args.device
    attacks.check_settings(args.attack, settings)
    attacks.check_attack_caps(args.attack, settings, args.allow_long)
    device = resolve_device(args.device)
    model = load(args.model, device=device, record=True)  # the owner's attack: its record when it is there
    # the model's own graph: a graph file from the owner's record, else the card's dataset
    dataset = reload_dataset(model.card.get("dataset"), model.provenance("dataset"), root=args.data_root)
    # the audit's cost model, measured on this model: the estimate is said, and a run estimated
    # above the limit refused, before the attack starts
    from dpaudit.app.workflows.audit import audit_plan, check_plan_duration, format_plan

    plan = audit_plan(model, dataset, [args.attack], {args.attack: settings}, device=args.device)
    print(format_plan(plan), flush=True)
    check_plan_duration(plan, args.allow_long)
    result = attacks.run(args.attack, model, dataset, **settings)
    result.settings["model_dir"] = str(args.model)
    result.save(args.out)
    hypothesis = bool(result.ceiling.get("hypothesis"))
    if not result.covered_by_guarantee:
        ceiling = coverage_phrase(False)
    elif hypothesis:
        ceiling = f"the claim allows AUC ≤ {_fmt(result.ceiling_auc)} (a hypothesis, not proven)"
    else:
        ceiling = f"ceiling AUC {_fmt(result.ceiling_auc)}"
    if not result.bound_valid:
        bound = (
            f"NOT A VALID BOUND ({result.bound_validity}): no ε lower bound or ceiling is compared with the guarantee"
        )
        ceiling = coverage_phrase(result.covered_by_guarantee, hypothesis)
    else:
        bound = (
            f"valid bound: ε lower bound {_fmt(result.epsilon_lower_bound)} (δ = {result.epsilon_lower_bound_delta:g})"
        )
    spent, target = result.ceiling.get("epsilon_spent"), result.ceiling.get("target_epsilon")
    if spent is not None and target is not None and spent > float(target) * (1.0 + 1e-9):
        ceiling += f" at ε = {spent:.4g} spent by training and this attack's queries (target {float(target):g})"
    lo, hi = result.auc_ci
    # TPR at 1 % FPR with its spread over runs and the negatives it rests on (dpaudit.auditing.low_fpr)
    low_fpr = (result.extra.get("low_fpr") or {}).get("0.01")
    tpr = f", {low_fpr['text']}" if low_fpr else ""
    print(
        f"{args.attack} vs {model.method} (deployment {result.extra.get('deployment')}): AUC {_fmt(result.auc)} "
        f"[{_fmt(lo)}, {_fmt(hi)}]{tpr}, {bound}, {ceiling} -> {args.out}"
    )
    if result.baseline_auc is not None and result.auc is not None:
        print(
            f"model-free baseline AUC: {_fmt(result.baseline_auc)} (features alone: {result.baseline}); "
            f"AUC − baseline {result.auc - result.baseline_auc:+.3f}"
        )
    if result.bound_valid and result.epsilon_lower_bound is not None:
        print(f"certified ε lower bound: {_fmt(result.epsilon_lower_bound)} (δ = {result.epsilon_lower_bound_delta:g})")
    print(f"verdict: {result.verdict}")
    return 0


def attack_settings_help() -> str:
    """Every attack's settings with their defaults and the values they accept (imported only when
    help is asked for)."""
    import attacks

    lines = ["attack settings (--set KEY=VALUE; device, data_root and seed come from their own flags):"]
    for name in attacks.available_attacks():
        settings = attacks.describe_settings(name)
        lines.append(f"  {name}:")
        lines += [
            f"    {key}={default!r}  ({accepted})"
            for key, (default, accepted) in settings.items()
            if key not in ("device", "data_root", "seed")
        ]
    return "\n".join(lines)


class _HelpWithSettings(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        print()
        print(attack_settings_help())
        parser.exit()


def add_parser(subparsers) -> None:
    """Add the ``attack`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    from dpaudit.app.names import builtin_attacks
    from dpaudit.seeds import seed_argument

    p = subparsers.add_parser("attack", help="attack a released model and write the result (JSON)", add_help=False)
    p.add_argument("-h", "--help", action=_HelpWithSettings, help="show this help and every attack's settings")
    p.add_argument("--model", help="released-model directory")
    p.add_argument(
        "--attack",
        # read from the attacks' source (dpaudit.app.names): building the parser imports no attack
        help=f"{' | '.join(builtin_attacks())} (docs/attacks.md describes each)",
    )
    p.add_argument("--runs", type=int, default=None, help="repetitions (default: the attack's own)")
    p.add_argument("--seed", type=seed_argument, default=0, help="0 <= seed < 2**31")
    p.add_argument("--data-root", default=None)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--set",
        "--attack-set",
        dest="set",
        action="append",
        metavar="KEY=VALUE",
        help="an attack setting (repeatable; the same spelling as audit/compare's --attack-set)",
    )
    p.add_argument(
        "--deployment",
        default=None,
        choices=["auto", "querier-graph", "training-graph"],
        help="which graph the attack's queries are answered over: the querier's own graph (a model trained on an "
        "inductive split is deployed so; the default for it) or the owner's training graph (the default otherwise)",
    )
    p.add_argument("--out", help="where to write the result JSON")
    p.add_argument("--force", action="store_true", help="replace --out even if it is not an earlier attack result")
    p.add_argument(
        "--allow-long",
        action="store_true",
        help="run counts above their caps (num_references > 256, runs > 50 ...) and attacks estimated above 2 h, "
        "which are otherwise refused before any work",
    )
    p.set_defaults(func=cmd_attack)
