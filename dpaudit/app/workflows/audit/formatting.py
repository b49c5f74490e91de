"""Small text helpers of audits and studies: durations, slugs, floats."""

from __future__ import annotations

import math


def format_seconds(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def slug_name(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-")[:30] or "dataset"


def format_float(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3f}"
    return str(value)
