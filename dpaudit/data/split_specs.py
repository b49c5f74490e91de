"""The syntax of a split specification (``random:0.75,0.1,0.15``, ``per-class:20,500,1000`` ...),
checked without torch: a command refuses a malformed ``--split`` before any heavy import, and
:func:`dpaudit.data.splits.make_split` builds the split from the same parse."""

from __future__ import annotations

from dpaudit.errors import ConfigurationError

#: the split kinds and what each takes, as the error message says them
SPLIT_USAGE = "public, random:TRAIN,VAL,TEST, per-class:K,VAL,TEST, inductive:TRAIN,TEST or metis:K"


def parse_split_spec(spec: str) -> tuple[str, list[float]]:
    """``"random:0.75,0.1,0.15"`` → ``("random", [0.75, 0.1, 0.15])``, the kind checked against
    its number (and integrality) of arguments.

    Args:
        spec: a split specification (see :mod:`dpaudit.data.splits`).

    Returns:
        ``(kind, values)``: the lower-cased kind and its numeric arguments.

    Raises:
        ConfigurationError: arguments that are not numbers, or an unknown kind / argument count.
    """
    spec = spec.strip()
    kind, _, args = spec.partition(":")
    kind = kind.strip().lower()
    try:
        values = [float(v) for v in args.split(",")] if args.strip() else []
    except ValueError:
        raise ConfigurationError(f"split {spec!r}: arguments must be numbers") from None
    known = (
        (kind == "public" and not values)
        or (kind == "random" and len(values) == 3)
        or (kind == "per-class" and len(values) == 3 and all(v == int(v) and v >= 0 for v in values))
        or (kind == "metis" and len(values) == 1 and values[0] == int(values[0]))
        or (kind == "inductive" and len(values) in (2, 3))
    )
    if not known:
        raise ConfigurationError(f"unknown split {spec!r}; use {SPLIT_USAGE}")
    return kind, values
