"""The ``dpaudit`` command line: the parser and the dispatch; each sub-command is a module of
:mod:`dpaudit.app.commands` (``add_parser(subparsers)`` adds it)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from dpaudit import __version__
from dpaudit.app.commands import register_all
from dpaudit.errors import DPAuditError

log = logging.getLogger("dpaudit")


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other input error
        self.exit(2, f"dpaudit: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``dpaudit`` argument parser: ``--version``, ``-v`` and every subcommand of
    :mod:`dpaudit.app.commands`.

    Returns:
        The parser.
    """
    parser = _ArgumentParser(
        prog="dpaudit", description="Train differentially private GNNs, attack them, report leakage."
    )
    parser.add_argument("--version", action="version", version=f"dpaudit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    register_all(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``dpaudit`` command line.

    A :class:`~dpaudit.errors.DPAuditError` is printed as one line ``dpaudit: error: ...`` (exit 2),
    an interrupt exits with 130, a closed output pipe with 0.

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns:
        The exit status.
    """
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
