"""The one ``KEY=VALUE`` parser: every ``--set``, ``--attack-set``, ``--design`` and
``--dataset-option`` assignment is split by :func:`split_assignment` and its value read by
:func:`parse_literal` (untyped settings) or :func:`parse_boolean` (a typed boolean field), with
one set of boolean words (:data:`BOOLEAN_WORDS`)."""

from __future__ import annotations

import json
from typing import Any

from dpaudit.errors import ConfigurationError

#: the words a boolean is written with (any case); a typed boolean field also takes 1 and 0
BOOLEAN_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
#: the words ``None`` is written with (any case)
NONE_WORDS = frozenset({"none", "null"})


def split_assignment(item: str, flag: str, *, scoped: bool = False) -> tuple[str | None, str, str]:
    """Split ``[NAME.]KEY=VALUE`` into its scope, key and value text.

    Args:
        item: the assignment as given.
        flag: the option it was given to (``--set``), named in the error.
        scoped: whether ``NAME.`` may scope the key to one defense or attack.

    Returns:
        ``(scope or None, key with dashes as underscores, value text stripped)``.

    Raises:
        ConfigurationError: no ``=``, or an empty key.
    """
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigurationError(f"{flag} expects {'[NAME.]' if scoped else ''}KEY=VALUE, got {item!r}")
    scope, key = None, key.strip()
    if scoped and "." in key:
        scope, _, key = key.rpartition(".")
        scope = scope.strip() or None
    return scope, key.strip().replace("-", "_"), value.strip()


def parse_boolean(text: str) -> bool:
    """A boolean field's value: a word of :data:`BOOLEAN_WORDS`, or 1 / 0.

    Args:
        text: the value text.

    Returns:
        The boolean.

    Raises:
        ValueError: any other text.
    """
    low = text.strip().lower()
    if low in BOOLEAN_WORDS:
        return BOOLEAN_WORDS[low]
    if low in ("1", "0"):
        return low == "1"
    raise ValueError(f"not a boolean: {text!r}")


def parse_literal(text: str) -> Any:
    """An untyped value: ``3`` → 3, ``0.5`` → 0.5, ``true`` → True, ``none`` → None, ``[1,2]`` → a
    list (JSON), anything else the string itself.

    Args:
        text: the value text.

    Returns:
        The value.
    """
    low = text.strip().lower()
    if low in BOOLEAN_WORDS:
        return BOOLEAN_WORDS[low]
    if low in NONE_WORDS:
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.strip().startswith(("[", "{", '"')):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text
