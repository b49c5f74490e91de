"""Name → defense registry. The CLI, sweeps and attacks (which retrain shadow models with
the target's own recipe, read from its card) all build defenses through :func:`get_defense`.

Defenses live in the ``defenses`` package and register themselves with
:func:`register_defense`; they are discovered through the ``dpaudit.plugins`` entry point,
so the core never imports them directly.
"""

from __future__ import annotations

from dpaudit.errors import ConfigurationError
from dpaudit.release.model import install_defense_lookup, load_plugins
from dpaudit.training.defense import Defense

_DEFENSES: dict[str, type[Defense]] = {}


def register_defense(cls: type[Defense]) -> type[Defense]:
    """Class decorator: make a :class:`~dpaudit.training.defense.Defense` available under its ``name``.

    Args:
        cls: the defense class.

    Returns:
        ``cls``.

    Raises:
        RuntimeError: another class is registered under the same name.
    """
    name = cls.name
    existing = _DEFENSES.get(name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise RuntimeError(f"defense {name!r} registered twice")
    _DEFENSES[name] = cls
    return cls


def available_defenses() -> list[str]:
    """Names of every registered defense (plugins loaded first), sorted."""
    load_plugins()
    return sorted(_DEFENSES)


def get_defense(name: str) -> type[Defense]:
    """The defense class registered under ``name`` (plugins loaded on a miss).

    Args:
        name: the defense's name.

    Returns:
        The class.

    Raises:
        ConfigurationError: no defense has that name.
    """
    if name not in _DEFENSES:
        load_plugins()
    try:
        return _DEFENSES[name]
    except KeyError:
        raise ConfigurationError(f"unknown defense {name!r}; available: {', '.join(available_defenses())}") from None


install_defense_lookup(get_defense)
