"""CLI sub-commands beyond the core ones: every module here defines ``add_parser(subparsers)``,
which adds its sub-command(s) and sets ``func`` on them (see :mod:`dpaudit.app.cli`)."""

import importlib
import pkgutil


def register_all(subparsers) -> None:
    """Add every subcommand: each public module of this package, in name order, adds its own.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action.
    """
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}").add_parser(subparsers)
