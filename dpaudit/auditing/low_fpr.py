"""Low-FPR true-positive rates as they can honestly be reported: mean ± sd over the attack's runs,
with the number of negatives that decides how fine the FPR axis is.

With ``n`` negatives (non-members, or non-edges), "TPR at FPR ≤ f" allows ⌊f·n⌋ false positives
(:func:`dpaudit.auditing.statistics.tpr_at_fpr`): with 140 negatives 1 % is one false positive (1.4
rounded down), and 0.1 % is none at all, so "TPR@0.1 %" is then the TPR at zero false positives.
Where ⌊f·n⌋ < 1 the rate at level f is *not resolved* by the data and is reported as such. One
run's TPR at 1 % moves with a single negative's score, so a single run is never a headline: the
spread over the attack's runs (each run redraws the audit set and the reference models) is
shown beside the mean (Carlini et al., "Membership Inference Attacks From First Principles",
IEEE S&P 2022, Sec. III-C, on reporting TPR at low FPR).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpaudit.auditing.results import FPR_LEVELS


def _percent(level: float) -> str:
    return f"{100 * level:g}%"


def summarize_level(tprs: list[float], negatives: list[int], level: float) -> dict[str, Any]:
    """Mean ± sd (ddof 1; None with one run) of one FPR level's per-run TPRs, the negatives per
    run (the smallest decides the resolution), and a one-line description.

    Args:
        tprs: TPR of each run at ``level`` (``None``/non-finite skipped).
        negatives: number of negatives of each run.
        level: the FPR level.

    Returns:
        Dict with ``level``, ``mean``, ``sd``, ``runs``, ``per_run``, ``negatives``, ``negatives_max``,
        ``false_positives_at_level``, ``resolved``, ``text`` and ``detail``.
    """
    values = [float(v) for v in tprs if v is not None and math.isfinite(float(v))]
    counts = [int(n) for n in negatives if n is not None]
    mean = float(np.mean(values)) if values else None
    sd = float(np.std(values, ddof=1)) if len(values) >= 2 else None
    fewest = min(counts) if counts else None
    allowed = None if fewest is None else level * fewest
    resolved = allowed is not None and math.floor(allowed + 1e-9) >= 1
    out = {
        "level": level,
        "mean": mean,
        "sd": sd,
        "runs": len(values),
        "per_run": values,
        "negatives": fewest,
        "negatives_max": max(counts) if counts else None,
        "false_positives_at_level": allowed,
        "resolved": resolved,
    }
    out["text"] = describe(out)
    # the same without the value, for a text that shows it already (the report's verdict)
    spread = f"mean {mean:.2f} ± {sd:.2f} over " if sd is not None else ""
    out["detail"] = spread + describe_runs(out) if mean is not None else ""
    return out


def describe(summary: dict[str, Any]) -> str:
    """``TPR@1%FPR 0.59 ± 0.08 (3 runs, 140 negatives: 1% = 1.4 false positives)``; a level
    below one false positive says it is not resolved."""
    head = f"TPR@{_percent(summary['level'])}FPR"
    if summary["mean"] is None:
        return f"{head} - (no run)"
    value = f"{summary['mean']:.2f}" if summary["sd"] is None else f"{summary['mean']:.2f} ± {summary['sd']:.2f}"
    return f"{head} {value} ({describe_runs(summary)})"


def describe_runs(summary: dict[str, Any]) -> str:
    """What the TPR rests on, for a text that already shows the value: ``3 runs, 140 negatives:
    1% = 1.4 false positives`` (and whether the level is resolved)."""
    level, runs = summary["level"], summary["runs"]
    # the attack's runs (each with its own seed), never the models' seeds: "--seeds 1" with 3
    # attack runs is "3 runs", not "3 seeds"
    seeds = f"{runs} run" + ("s" if runs != 1 else ", no spread")
    fewest, most = summary.get("negatives"), summary.get("negatives_max")
    if fewest is None:
        return f"{seeds}; negatives unknown"
    count = f"{fewest}" if most in (None, fewest) else f"{fewest}–{most}"
    allowed = summary["false_positives_at_level"]
    text = f"{seeds}, {count} negatives: {_percent(level)} = {allowed:.3g} false positives"
    if not summary["resolved"]:
        text += "; not resolved: this is the TPR at zero false positives"
    return text


def low_fpr_summary(runs: list[dict]) -> dict[str, dict[str, Any]]:
    """Every FPR level of :data:`dpaudit.auditing.results.FPR_LEVELS` over an attack result's ``runs``
    (each with ``tpr_at_fpr`` and ``non_members``, as :func:`dpaudit.auditing.statistics.summarize_runs`
    writes them), keyed like ``tpr_at_fpr`` (``"0.01"``).

    Args:
        runs: the result's per-run dicts.

    Returns:
        :func:`summarize_level` of each level, by level key.
    """
    out = {}
    for key in FPR_LEVELS:
        tprs = [(r.get("tpr_at_fpr") or {}).get(key) for r in runs]
        negatives = [r.get("non_members") for r in runs]
        out[key] = summarize_level(tprs, negatives, float(key))
    return out
