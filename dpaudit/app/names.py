"""The names of the built-in defenses and attacks, known without importing them.

Importing a defense or an attack imports torch and PyG (about 10 CPU-seconds on a cold start),
so the command line checks a name here first and refuses an unknown one in a fraction of a
second. The lists are the registries' (a test compares them); a name that is not built in is
still looked up in the registry — loading the plugins — whenever another package registers
``dpaudit.plugins`` entry points, or a defense or attack was registered in this process.
"""

from __future__ import annotations

import sys

from dpaudit.errors import ConfigurationError

#: ``dpaudit.training.registry.available_defenses()`` of this distribution (tests/dpaudit/app/test_cli.py checks it)
BUILTIN_DEFENSES = (
    "dpar-em0", "dpar-em1", "dpar-gm", "dpar-nodp", "dpgnn", "gap-edp", "gap-inf", "gap-ndp", "gcn", "gcon",
    "mlp", "mlp-dp", "sage",
)  # fmt: skip
#: ``attacks.available_attacks()`` of this distribution
BUILTIN_ATTACKS = (
    "embedding-probe", "link-steal", "linkteller", "mia-lira", "mia-rmia", "mia-threshold", "mia-tstf", "seed-replay",
)  # fmt: skip
#: the entry points (``dpaudit.plugins``) this distribution declares
BUILTIN_PLUGINS = ("defenses", "attacks")


def _other_plugins() -> bool:
    """Whether an installed package other than this one registers plugins (entry points are
    package metadata: reading them imports nothing)."""
    from importlib import metadata

    return any(entry.value not in BUILTIN_PLUGINS for entry in metadata.entry_points(group="dpaudit.plugins"))


def _registered_here(module: str, attribute: str) -> set[str]:
    """Names registered in this process (a registry already imported), e.g. by a library user."""
    loaded = sys.modules.get(module)
    return set(getattr(loaded, attribute, {}) or {})


def check_defense_name(name: str | None) -> None:
    """Refuse an unknown defense name before torch is imported (see the module docstring)."""
    if name is None or name in BUILTIN_DEFENSES or name in _registered_here("dpaudit.training.registry", "_DEFENSES"):
        return
    if _other_plugins():
        return  # a plugin may register it: the registry decides
    raise ConfigurationError(f"unknown defense {name!r}; available: {', '.join(BUILTIN_DEFENSES)}")


def check_attack_name(name: str | None) -> None:
    """Refuse an unknown attack name before torch is imported (see the module docstring)."""
    if name is None or name in BUILTIN_ATTACKS or name in _registered_here("attacks", "_ATTACKS"):
        return
    if _other_plugins():
        return
    raise ConfigurationError(f"unknown attack {name!r}; available: {', '.join(BUILTIN_ATTACKS)}")


def check_names(defenses=None, attacks=None) -> None:
    """Every name of comma-separated (or listed) ``defenses`` and ``attacks``; empty items are
    left to the command's own checks."""
    for value, check in ((defenses, check_defense_name), (attacks, check_attack_name)):
        if value is None:
            continue
        items = value.split(",") if isinstance(value, str) else value
        for item in items:
            if str(item).strip():
                check(str(item).strip())
