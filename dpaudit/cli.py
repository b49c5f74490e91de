"""Command-line interface: ``dpaudit datasets | train | inspect | demo``.

Errors caused by input (unknown names, bad ε/δ, tampered models) print one line on stderr
and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path

from dpaudit import __version__
from dpaudit.errors import DPAuditError

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
    for key, typ, default in cls.describe_hyperparameters():
        lines.append(f"  {key:<22} {typ:<10} default {default!r}")
    return "\n".join(lines)


def cmd_train(args) -> int:
    from dpaudit.defense import parse_overrides
    from dpaudit.pipeline import train
    from dpaudit.registry import get_defense

    if args.help_defense:
        if not args.defense:
            raise DPAuditError("--help with train needs --defense NAME")
        print(_defense_help(args.defense))
        return 0
    for required in ("defense", "dataset", "out"):
        if getattr(args, required) is None:
            raise DPAuditError(f"train needs --{required}")
    cls = get_defense(args.defense)
    overrides = parse_overrides(cls.hyperparameters_class, args.set or [])
    result = train(
        args.defense,
        args.dataset,
        epsilon=args.epsilon,
        delta=args.delta,
        seed=args.seed,
        split=args.split,
        device=args.device,
        data_root=args.data_root,
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
    from dpaudit.model import load

    model = load(args.model)
    print(f"model: {args.model}")
    print(f"kind: {model.kind}   method: {model.method}")
    print(f"privacy: {model.privacy.summary()}")
    print(json.dumps({"privacy": model.privacy.to_dict(), "card": model.card}, indent=2, default=str))
    return 0


def cmd_demo(args) -> int:
    from dpaudit.pipeline import train

    out = Path(args.out)
    rows = []
    runs = [
        ("gcn", math.inf),
        ("sage", math.inf),
        ("mlp", math.inf),
        ("mlp-dp", 1.0),
        ("mlp-dp", 4.0),
        ("mlp-dp", math.inf),
    ]
    print(f"dpaudit {__version__} demo: baselines on the embedded synthetic graph (csbm, seed {args.seed})")
    for defense, eps in runs:
        tag = f"{defense}-eps{_fmt(eps, 0)}"
        start = time.perf_counter()
        result = train(defense, "csbm", epsilon=eps, seed=args.seed, device=args.device, out=out / tag)
        rows.append(
            {
                "defense": defense,
                "target ε": _fmt(eps, 0),
                "test acc": _fmt(result.metrics["test_accuracy"]),
                "ε spent": _fmt(result.model.privacy.epsilon),
                "δ": f"{result.model.privacy.delta:.0e}" if result.model.privacy.delta else "-",
                "seconds": f"{time.perf_counter() - start:.1f}",
            }
        )
    print(_table(rows, ["defense", "target ε", "test acc", "ε spent", "δ", "seconds"]))
    print(f"released models written under {out}/")
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
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
    p.add_argument("--dataset")
    p.add_argument("--epsilon", default="inf", help="target ε (a positive number or inf)")
    p.add_argument("--delta", default="auto", help="δ in (0, 1) or auto (a power of ten below 1/#units)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", default=None, help="public | random:TR,VA,TE | per-class:K,VA,TE | inductive:TR,TE")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--data-root", default=None)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a hyperparameter (repeatable)")
    p.add_argument("--out")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("inspect", help="validate a released model and print its card and privacy spec")
    p.add_argument("model")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("demo", help="the end-to-end demo on the embedded synthetic graph")
    p.add_argument("--out", default="demo-out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=cmd_demo)

    from dpaudit.commands import register_all

    register_all(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args) or 0)
    except DPAuditError as exc:
        print(f"dpaudit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpaudit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
