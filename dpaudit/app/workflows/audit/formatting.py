"""Small text helpers of audits and studies: durations, slugs, floats."""

from __future__ import annotations

import math


def format_seconds(seconds: float) -> str:
    """A duration in words: seconds below 90 s, minutes below 1.5 h, else hours.

    Args:
        seconds: the duration (negative counts as 0).

    Returns:
        E.g. ``"42 s"``, ``"3.5 min"``, ``"2.0 h"``.
    """
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def slug_name(text: str) -> str:
    """A file-name-safe slug of ``text``: runs of other characters than letters, digits, ``.`` and ``-``
    become ``-``, at most 30 characters.

    Args:
        text: e.g. a dataset name.

    Returns:
        The slug, or ``"dataset"`` when nothing is left.
    """
    import re

    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-")[:30] or "dataset"


def format_float(value) -> str:
    """A value for a table cell.

    Args:
        value: a number, ``None`` or anything printable.

    Returns:
        ``"-"`` for ``None``, a float with 3 decimals (``"inf"`` for infinity), else ``str(value)``.
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3f}"
    return str(value)
