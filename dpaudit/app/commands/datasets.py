"""``dpaudit datasets``: what is available offline and what each dataset needs."""

from __future__ import annotations

from dpaudit.app.commands._common import table


def cmd_datasets(args) -> int:
    """Print every dataset, whether it is available under ``--data-root`` and what it needs offline.

    Args:
        args: the parsed command line of ``dpaudit datasets``.

    Returns:
        0.
    """
    from dpaudit.data.datasets import describe_availability

    rows = describe_availability(args.data_root)
    print(
        table(
            [{**r, "available": "yes" if r["available"] else "no"} for r in rows],
            ["name", "available", "needs", "folder"],
        )
    )
    return 0


def add_parser(subparsers) -> None:
    """Add the ``datasets`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    p = subparsers.add_parser("datasets", help="list datasets and what each needs offline")
    p.add_argument("--data-root", default=None)
    p.set_defaults(func=cmd_datasets)
