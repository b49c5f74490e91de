"""The arguments ``audit``, ``compare`` and ``demo`` share: ``[NAME.]KEY=VALUE`` overrides of
defenses and attacks, lists and ε grids, the study options and ``--allow-long``."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from typing import Any

from dpaudit.app.names import builtin_attack_settings
from dpaudit.assignments import parse_literal
from dpaudit.assignments import split_assignment as _split
from dpaudit.auditing.caps import check_attack_caps
from dpaudit.errors import ConfigurationError


def split_assignment(item: str, flag: str) -> tuple[str | None, str, str]:
    """``[NAME.]KEY=VALUE`` (:func:`dpaudit.assignments.split_assignment`, scoped)."""
    return _split(item, flag, scoped=True)


def defense_overrides(assignments: list[str], defenses: list[str]) -> dict[str, dict[str, Any]]:
    """``--set DEFENSE.KEY=VALUE`` (one defense) or ``--set KEY=VALUE`` (every defense that has KEY),
    typed by each defense's hyperparameter dataclass."""
    from dpaudit.training.defense import parse_overrides
    from dpaudit.training.registry import get_defense

    out: dict[str, dict[str, Any]] = {}
    for item in assignments or []:
        scope, key, value = split_assignment(item, "--set")
        targets = [scope] if scope else defenses
        if scope and scope not in defenses:
            raise ConfigurationError(f"--set {item}: defense {scope!r} is not in --defenses")
        applied = False
        for defense in targets:
            cls = get_defense(defense)
            if key in {f.name for f in dataclasses.fields(cls.hyperparameters_class)} or scope:
                out.setdefault(defense, {}).update(parse_overrides(cls.hyperparameters_class, [f"{key}={value}"]))
                applied = True
        if not applied:
            raise ConfigurationError(f"--set {item}: no defense in the study has a hyperparameter {key!r}")
    return out


def attack_overrides(assignments: list[str], attacks: list[str], allow_long: bool = False) -> dict[str, dict[str, Any]]:
    """``--attack-set ATTACK.KEY=VALUE`` or ``--attack-set KEY=VALUE`` (every attack that accepts
    KEY); each count at most its cap unless ``allow_long`` (:func:`attacks.check_attack_caps`)."""
    import attacks as attack_registry
    from attacks import check_settings

    out: dict[str, dict[str, Any]] = {}
    for item in assignments or []:
        scope, key, value = split_assignment(item, "--attack-set")
        if scope and scope not in attacks:
            raise ConfigurationError(f"--attack-set {item}: attack {scope!r} is not being run")
        targets = [scope] if scope else attacks
        applied = False
        for name in targets:
            known = attack_registry.attack_settings(name)
            if key in known:
                out.setdefault(name, {})[key] = parse_literal(value)
                check_settings(name, {key: out[name][key]})
                check_attack_caps(name, {key: out[name][key]}, allow_long)
                applied = True
            elif scope:
                raise ConfigurationError(f"attack {name!r} has no setting {key!r}; known: {', '.join(sorted(known))}")
        if not applied:
            raise ConfigurationError(f"--attack-set {item}: no attack being run accepts {key!r}")
    return out


def check_attack_counts(assignments: list[str] | None, attacks: list[str] | None, allow_long: bool = False) -> None:
    """Each count of ``--attack-set [ATTACK.]KEY=VALUE`` at most its cap
    (:func:`dpaudit.auditing.caps.check_attack_caps`) unless ``allow_long``, decided before torch
    is imported: the settings each built-in attack has are read from its source
    (:func:`dpaudit.app.names.builtin_attack_settings`). A malformed item, a setting no attack has
    and a plug-in attack are left to :func:`attack_overrides`, after the import.

    Args:
        assignments: the ``--attack-set`` values.
        attacks: the attacks being run; ``None``: every built-in attack.
        allow_long: the user's ``--allow-long``.

    Raises:
        ConfigurationError: a count above its cap.
    """
    declared = builtin_attack_settings()
    for item in assignments or []:
        try:
            scope, key, value = split_assignment(item, "--attack-set")
        except ConfigurationError:
            continue  # said by attack_overrides, in its words
        for name in [scope] if scope else attacks or list(declared):
            if key in declared.get(name, ()):
                check_attack_caps(name, {key: parse_literal(value)}, allow_long)


def list_option(text: str | None, option: str) -> list[str] | None:
    """``"a, b"`` → ``["a", "b"]``; ``None`` when the option was not given; an option given
    with nothing in it (``--attacks ''``) is refused, naming ``option``."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigurationError(f"{option} was given an empty list; name at least one, or leave {option} out")
    return items


def attack_names(text: str | None) -> list[str]:
    import attacks as attack_registry

    names = list_option(text, "--attacks") or attack_registry.available_attacks()
    for name in names:
        attack_registry.get_attack(name)
    return names


def command_line() -> str:
    return shlex.join(["dpaudit", *sys.argv[1:]])


def epsilon_grid(text: str) -> list[str]:
    """``--epsilons``, each a valid target ε that a defense can calibrate (checked before work)."""
    from dpaudit.accounting.spec import validate_epsilon
    from dpaudit.app.commands._common import check_target_epsilon

    items = list_option(text, "--epsilons")
    for item in items:
        check_target_epsilon(validate_epsilon(item), what="--epsilons")
    return items


#: ``--seeds N`` above this is refused unless ``--allow-long``: each seed is one cell per (defense, ε),
#: a full train and attack run (minutes each on a laptop), so 100 seeds is already hours of work.
MAX_SEEDS = 100


def check_seed_count(seeds: int, allow_long: bool = False) -> None:
    """``--seeds N``: at least 1, and at most :data:`MAX_SEEDS` unless ``allow_long`` (before any import
    of torch, and before the study folder is written).

    Args:
        seeds: the number of seeds asked for.
        allow_long: the user's ``--allow-long``.

    Raises:
        ConfigurationError: ``seeds < 1``, or above the cap without ``allow_long``.
    """
    if seeds < 1:
        raise ConfigurationError(f"--seeds must be >= 1 (seeds 0..N-1), got {seeds}")
    if seeds > MAX_SEEDS and not allow_long:
        raise ConfigurationError(
            f"--seeds {seeds} is above its cap of {MAX_SEEDS} (each seed trains and attacks every defense at every ε "
            "once: hours of work per hundred); lower it, or pass --allow-long to run it anyway"
        )


def add_allow_long_argument(p) -> None:
    """``--allow-long``: run attack counts above their caps and plans estimated above the limit."""
    p.add_argument(
        "--allow-long",
        action="store_true",
        help="run attack counts above their caps (num_references > 256, runs > 50 ...; see the README) and audits "
        "estimated above 2 h, which are otherwise refused before any work",
    )


def add_study_arguments(p) -> None:
    """Options shared by ``compare`` and ``demo``-like commands."""
    from dpaudit.app.commands._dataset_args import SPLIT_HELP, add_dataset_option_argument

    p.add_argument("--attacks", default=None, help="comma-separated attack names (default: every attack)")
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="number of seeds per (defense, ε) (seeds 0..N-1; at most 100 unless --allow-long)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="cells run in parallel (worker processes or Ray tasks; default: one per core)",
    )
    p.add_argument("--executor", default="local", choices=["local", "ray"])
    p.add_argument("--split", default=None, help=SPLIT_HELP)
    p.add_argument("--delta", default="auto", help="δ in (0, 1) or auto (a power of ten below 1/#declared units)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--data-root", default=None)
    p.add_argument("--set", action="append", metavar="[DEFENSE.]KEY=VALUE", help="defense hyperparameter (repeatable)")
    p.add_argument("--attack-set", action="append", metavar="[ATTACK.]KEY=VALUE", help="attack setting (repeatable)")
    add_dataset_option_argument(p)
    p.add_argument("--keep-failed", action="store_true", help="do not retry cells that failed in an earlier run")
    p.add_argument("--title", default=None, help="report title")
    add_allow_long_argument(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="write into --out even if it holds something else "
        "(another kind of output, or a study with another configuration)",
    )
