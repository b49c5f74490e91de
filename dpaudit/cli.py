"""Command-line interface: ``dpaudit datasets | train | inspect``; the other commands live in :mod:`dpaudit.commands`.

Errors caused by input (unknown names, bad ε/δ, tampered models) print one line on stderr
and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path

from dpaudit import __version__
from dpaudit.errors import DPAuditError, PrivacyParameterError
from dpaudit.seeds import seed_argument

log = logging.getLogger("dpaudit")


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other input error
        self.exit(2, f"dpaudit: error: {message}\n")


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.{digits}f}"
    return str(value)


# --------------------------------------------------------------------------- commands


def cmd_datasets(args) -> int:
    from dpaudit.datasets import describe_availability

    rows = describe_availability(args.data_root)
    print(
        _table(
            [{**r, "available": "yes" if r["available"] else "no"} for r in rows],
            ["name", "available", "needs", "folder"],
        )
    )
    return 0


def _defense_help(name: str) -> str:
    from dpaudit.registry import get_defense

    cls = get_defense(name)
    lines = [
        f"{cls.name}: {cls.summary}",
        f"privacy unit: {cls.unit or 'none (non-private)'}",
        "hyperparameters (--set KEY=VALUE):",
    ]
    for key, declared, default, text in cls.describe_hyperparameters():
        lines.append(f"  {f'{key} ({declared}, default {default!r})':<48} {text}".rstrip())
    return "\n".join(lines)


# Below this target ε, noise calibrated for it makes δ alone cover the mechanism: the
# accountant states ε = 0 (measured: from ε ≈ 1e-8 for mlp-dp and gap-edp at δ = 1e-4) and
# no privacy spec can be written — after all the training. Such a model is pure noise anyway.
MIN_TARGET_EPSILON = 1e-6


def check_target_epsilon(epsilon: float, what: str = "--epsilon") -> None:
    """Refuse, before any work, a finite target ε too small for any defense to calibrate."""
    if epsilon < MIN_TARGET_EPSILON:
        raise PrivacyParameterError(
            f"{what} {epsilon:g} is below {MIN_TARGET_EPSILON:g}: noise calibrated for it leaves ε = 0 to the "
            f"accountant (δ alone covers it), which no privacy spec can state; use ε >= {MIN_TARGET_EPSILON:g}"
        )


def parse_delta(text: str) -> float | str:
    """``--delta``: ``"auto"``, or δ as a number (a given δ must reach the defense typed: as a
    string it would be read as auto, which needs a declared size)."""
    from dpaudit.accounting.spec import validate_delta

    return "auto" if str(text).strip().lower() == "auto" else validate_delta(text)


def check_memory(defense, num_nodes: int, num_features: int) -> None:
    """``defense``'s widths against the memory of its device, for a graph of these sizes."""
    from dpaudit.defense import check_hyperparameter_ranges
    from dpaudit.runtime import device_memory

    check_hyperparameter_ranges(defense.name, defense.hp, (num_nodes, num_features), device_memory(defense.device))


def cmd_train(args) -> int:
    if not args.help_defense:
        # names and required arguments first: refused in a fraction of a second, before torch loads
        for required in ("defense", "dataset", "out"):
            if getattr(args, required) is None:
                raise DPAuditError(f"train needs --{required}")
        from dpaudit.names import check_defense_name

        check_defense_name(args.defense)
    from dpaudit.commands._dataset_args import (
        check_declarations,
        parse_dataset_options,
        warn_if_membership_not_random,
    )
    from dpaudit.datasets import load_dataset
    from dpaudit.defense import parse_overrides
    from dpaudit.outputs import check_output_dir, output_lock
    from dpaudit.pipeline import train
    from dpaudit.registry import available_defenses, get_defense
    from dpaudit.splits import make_split

    if args.help_defense:
        if not args.defense:
            args.parser.print_help()
            print("\ndefenses (see `dpaudit train --defense NAME --help`): " + ", ".join(available_defenses()))
            return 0
        print(_defense_help(args.defense))
        return 0
    for required in ("defense", "dataset", "out"):
        if getattr(args, required) is None:
            raise DPAuditError(f"train needs --{required}")
    cls = get_defense(args.defense)
    overrides = parse_overrides(cls.hyperparameters_class, args.set or [])
    args.delta = parse_delta(args.delta)
    defense = cls(epsilon=args.epsilon, delta=args.delta, seed=args.seed, device=args.device, **overrides)
    check_target_epsilon(defense.epsilon)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    # the label domain, δ, declared sizes and the defense's own needs, all in one line
    check_declarations(args.dataset, options, [defense], args.delta)
    from dpaudit.progress import log, log_progress

    with output_lock(args.out):  # a second `train --out` the same folder refuses, naming this one
        check_output_dir(args.out, "model", force=args.force)
        dataset = load_dataset(args.dataset, root=args.data_root, **options)
        check_memory(defense, dataset.num_nodes, dataset.num_features)
        warn_if_membership_not_random(dataset, make_split(dataset, args.split, args.seed), args.argv)
        log.info("training %s on %s (%d nodes) -> %s", args.defense, dataset.name, dataset.num_nodes, args.out)
        # a bar on a terminal; otherwise a progress line every 30 s
        with log_progress(every=30.0):
            result = train(
                args.defense,
                dataset,
                epsilon=args.epsilon,
                delta=args.delta,
                seed=args.seed,
                split=args.split,
                device=args.device,
                overrides=overrides,
                out=args.out,
            )
        m = result.metrics
        print(
            f"{m['defense']} on {m['dataset']}: test accuracy {_fmt(m['test_accuracy'])}, "
            f"train accuracy {_fmt(m['train_accuracy'])}, {result.model.privacy.summary()}, "
            f"{m['train_seconds']:.1f}s -> {args.out}"
        )
    return 0


def cmd_inspect(args) -> int:
    from dpaudit.deployments import DEPLOYMENTS, deployment_entry
    from dpaudit.model import load
    from dpaudit.release import OWNER_FILES, PUBLIC_FILES

    model = load(args.model)
    directory = Path(args.model)
    print(f"model: {args.model}")
    print(f"kind: {model.kind}   method: {model.method}")
    print(f"privacy: {model.privacy.summary()}")
    query_ledger = getattr(model, "query_ledger", None)  # GAP: releases on query graphs, a separate ledger
    if query_ledger is not None and query_ledger.releases:
        print(query_ledger.summary())
    if model.privacy.public_facts:
        facts = ", ".join(
            f"{k} = {v}" for k, v in model.privacy.public_facts.items() if k not in ("declared_by", "published")
        )
        print(f"public facts: {facts} (declared by {model.privacy.public_facts.get('declared_by', '?')})")
    if model.verification is not None:
        print(f"privacy check: {model.verification.summary}")
        if model.verification.checked:
            print(f"  checked: {'; '.join(model.verification.checked)}")
        for item in model.verification.not_checked:
            print(f"  not verified: {item}")
    print("what ε covers, per deployment (whose graph the answers are computed over):")
    inference = model.card.get("inference")
    for deployment in DEPLOYMENTS:
        entry = deployment_entry(inference, deployment, model.privacy.is_private)
        print(f"  {deployment:<16} {'covered' if entry['covered'] else 'NOT covered'}: {entry['note']}")
    print("files:")
    for name in PUBLIC_FILES:
        print(f"  {name:<24} public release: covered by the guarantee (ship these two)")
    for name in OWNER_FILES:
        if (directory / name).is_file():
            print(f"  {name:<24} owner's record: NOT covered by the guarantee (never ship it)")
    if args.json:
        shown = {"privacy": model.privacy.to_dict(), "card": model.card}
        if query_ledger is not None:
            shown["query_ledger"] = query_ledger.to_dict()
        print(json.dumps(shown, indent=2, default=str))
    else:
        print("(--json prints the whole privacy spec and public card)")
    return 0


def cap_jobs(jobs: int | None) -> int:
    """``--jobs`` ≥ 1, and no more worker processes than cores (more only thrash); ``None``
    (the default) uses every core, since a study's cells are independent."""
    cores = os.cpu_count() or 1
    if jobs is None:
        return cores
    if jobs < 1:
        raise DPAuditError(f"--jobs must be >= 1, got {jobs}")
    if jobs > cores:
        log.warning("--jobs %d capped at the %d cores of this machine", jobs, cores)
    return min(jobs, cores)


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from dpaudit.commands._dataset_args import DATASET_HELP, SPLIT_HELP, add_dataset_option_argument

    parser = _ArgumentParser(
        prog="dpaudit", description="Train differentially private GNNs, attack them, report leakage."
    )
    parser.add_argument("--version", action="version", version=f"dpaudit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    p = sub.add_parser("datasets", help="list datasets and what each needs offline")
    p.add_argument("--data-root", default=None)
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("train", help="train a defense and write the released model", add_help=False)
    p.add_argument(
        "-h", "--help", dest="help_defense", action="store_true", help="with --defense: list its hyperparameters"
    )
    p.add_argument("--defense")
    p.add_argument("--dataset", help=DATASET_HELP)
    add_dataset_option_argument(p)
    p.add_argument("--epsilon", default="inf", help="target ε (a positive number or inf)")
    p.add_argument("--delta", default="auto", help="δ in (0, 1) or auto (a power of ten below 1/#declared units)")
    p.add_argument("--seed", type=seed_argument, default=0, help="0 <= seed < 2**31")
    p.add_argument("--split", default=None, help=SPLIT_HELP)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--data-root", default=None)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a hyperparameter (repeatable)")
    p.add_argument("--out", help="released-model folder to write")
    p.add_argument("--force", action="store_true", help="replace a released model in --out, or write among other files")
    p.set_defaults(func=cmd_train, parser=p)

    p = sub.add_parser("inspect", help="validate a released model, say which files are public, print its guarantee")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="also print the whole privacy spec and public card as JSON")
    p.set_defaults(func=cmd_inspect)

    from dpaudit.commands import register_all

    register_all(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what `train` repeats in its advice
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    # normal progress (cells finished, training steps without a terminal) is INFO, shown without -v
    logging.getLogger("dpaudit.progress").setLevel(logging.INFO)
    try:
        return int(args.func(args) or 0)
    except DPAuditError as exc:
        print(f"dpaudit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpaudit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `dpaudit inspect DIR | head`: the reader left, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush of stdout must not raise again
        return 0


if __name__ == "__main__":
    sys.exit(main())
