r"""From cell records to the numbers a report shows (the JSON sidecar is exactly this data).

A *cell record* is one trained model and the attacks run against it (one line of a study's
``results.jsonl``; see :mod:`dpaudit.app.workflows.study`). :func:`build_report_data` groups records by
(defense, target ε) and returns plain JSON-able data: every number the HTML shows is in it, and
nothing else is computed at render time. The conclusion — validity, the Bonferroni correction,
each audit's power, the claim's status and every number a verdict card shows — is
:func:`dpaudit.auditing.verdict.study_verdict`'s, computed once in the core; this module lays it
out (summary rows, figure series, ledgers) and computes nothing a verdict needs.

Intervals:

* test accuracy — with ≥ 2 seeds a 95 % Student-t interval over seeds; with one seed the
  Clopper–Pearson interval of the test-set proportion (n = number of test nodes);
* attack AUC — with ≥ 2 seeds a 95 % Student-t interval over the per-seed mean AUCs; with
  one seed the attack's own interval over its repetitions;
* TPR at 1 % FPR — beside the mean, the mean ± sd over every run of the attack (each model
  seed's runs pooled) and the number of negatives, which says whether 1 % is even one false
  positive (:mod:`dpaudit.auditing.low_fpr`).

The ceiling :math:`\mathrm{AUC}_{\max}(\varepsilon,\delta)` is the area under the most
powerful ROC curve any test can reach against an (ε, δ)-DP mechanism: by the hypothesis
testing characterisation of DP (Kairouz, Oh & Viswanath 2015; Dong, Roth & Su 2022,
Prop. 2.5) every test's type-II error obeys
:math:`\beta(\alpha) \ge f_{\varepsilon,\delta}(\alpha) = \max(0,\, 1-\delta-e^{\varepsilon}\alpha,\,
e^{-\varepsilon}(1-\delta-\alpha))`, so
:math:`\mathrm{AUC} = \int_0^1 (1-\beta(\alpha))\,d\alpha \le 1 - \int_0^1 f_{\varepsilon,\delta}`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

import attacks as attack_registry
from dpaudit.accounting.spec import HYPOTHESES
from dpaudit.auditing.intervals import clopper_pearson_interval
from dpaudit.auditing.results import REFUTING_VERDICTS
from dpaudit.auditing.statistics import auc_ceiling
from dpaudit.auditing.verdict import (
    RANDOM_SPLITS,
    Verdict,
    certified_max_possible,
    claim_status,
    epsilon_key,
    epsilon_label,
    finite,
    is_diagnostic,
    mean_ci_over_seeds,
    study_verdict,
    unit_label,
)
from dpaudit.errors import DPAuditError
from dpaudit.training.registry import get_defense

CONFIDENCE = 0.95  # the test-accuracy interval
# Strongest first (shadow-model membership attacks, then edge attacks, then cheap diagnostics):
# the order audits run attacks in and reports show them; other attacks follow in their own order.
ATTACK_ORDER = tuple(attack_registry.order_attacks(attack_registry.available_attacks()))


# --------------------------------------------------------------------------- families, verdicts

FAMILIES = ("GAP", "DPAR", "DP-GNN", "GCON", "MLP-DP", "non-private baselines", "other")


def defense_family(name: str) -> str:
    """The family a defense belongs to (figures colour and group by it), as its class declares
    (:attr:`dpaudit.training.defense.Defense.family`); "other" for a name no longer registered."""
    try:
        return get_defense(str(name)).family
    except DPAuditError:
        return "other"


RANDOM_SPLIT_HINT = "random:0.75,0.1,0.15"


def _split_banner(done: list[dict], meta: dict) -> dict[str, Any] | None:
    """When some model's members were not assigned at random (a fixed public split, explicit node
    lists) or an attack marks its bound as not valid (``bound_valid: false``), its ε lower bounds
    and ceilings are not valid audits: say so once, why, and how to get valid ones."""
    fixed_recs = [r for r in done if not str((r.get("split") or {}).get("spec") or "").startswith(RANDOM_SPLITS)]
    fixed = _ordered_unique(str((r.get("split") or {}).get("spec") or "unknown") for r in fixed_recs)
    reasons = _ordered_unique(
        str(res.get("bound_validity"))
        for r in done
        for name, res in (r.get("attacks") or {}).items()
        if res.get("bound_valid") is False
        and (res.get("ceiling") or {}).get("attack_unit", "node") == "node"
        and not is_diagnostic(res)
        and res.get("bound_validity")
    )
    if not fixed and not reasons:
        return None
    command = meta.get("train_command")
    return {
        "splits": fixed,
        "defenses": _ordered_unique(r["defense"] for r in fixed_recs),
        "reasons": reasons,
        "hint": RANDOM_SPLIT_HINT,
        "command": command,
    }


def _risk_slices(done: list[dict], defenses: list[str]) -> list[dict]:
    """Per model (first seed of each defense and ε): attack success by degree, class and
    homophily bucket from the strongest membership attack that recorded ``risk_slices``."""
    out, seen = [], set()
    for rec in sorted(done, key=lambda r: (defenses.index(r["defense"]), epsilon_key(r.get("epsilon")), r["seed"])):
        key = (rec["defense"], rec.get("epsilon"))
        if key in seen:
            continue
        candidates = [
            (name, res)
            for name, res in (rec.get("attacks") or {}).items()
            if (res.get("extra") or {}).get("risk_slices") and res.get("auc") is not None
        ]
        if not candidates:
            continue
        seen.add(key)
        name, res = max(candidates, key=lambda p: p[1]["auc"])
        slices = res["extra"]["risk_slices"]
        out.append(
            {
                "defense": rec["defense"],
                "epsilon": rec.get("epsilon"),
                "epsilon_label": epsilon_label(rec.get("epsilon")),
                "seed": rec["seed"],
                "attack": name,
                "auc": res["auc"],
                "degree": slices.get("degree") or [],
                "class": slices.get("class") or [],
                "homophily": slices.get("homophily") or [],
                "method": slices.get("method"),
            }
        )
    return out


# --------------------------------------------------------------------------- grouping


def _ordered_unique(items) -> list:
    return list(OrderedDict.fromkeys(items))


def _attack_names(records: list[dict]) -> list[str]:
    names = []
    for rec in records:
        names.extend(rec.get("attacks", {}).keys())
        names.extend(rec.get("attack_errors", {}).keys())
    return _ordered_unique(names)


#: an AUC clearly below chance (:func:`dpaudit.auditing.verdict.below_chance`), explained where it is shown
BELOW_CHANCE_NOTE = (
    "AUC below 0.5: the attack's scores are anti-correlated with membership (members score lower than "
    "non-members). The attack's direction is fixed before it runs, so this is not leakage in the tested "
    "direction and refutes no claim; it does show that the model treats members and non-members differently, "
    "which a reversed attack, tested afresh, might exploit"
)


def _summary_rows(done: list[dict], verdicts: list[Verdict]) -> list[dict]:
    """One row per model: its verdict's attack summaries and headline, with test accuracy and the
    attacks' seconds (formatting only: every number a verdict needs is the verdict's)."""
    rows = []
    for v in verdicts:
        recs = [r for r in done if r["defense"] == v.defense and r.get("epsilon") == v.epsilon]
        accs = [(r.get("metrics") or {}).get("test_accuracy") for r in recs]
        acc, lo, hi = mean_ci_over_seeds(accs)
        acc_interval = "t over seeds"
        if len(finite(accs)) == 1:
            n_test = int((recs[0].get("metrics") or {}).get("n_test") or 0)
            lo, hi = clopper_pearson_interval(round(acc * n_test), n_test, CONFIDENCE) if n_test else (None, None)
            acc_interval = f"Clopper–Pearson over {n_test} test nodes"
        privacy = recs[0].get("privacy") or {}
        spent = finite((r.get("privacy") or {}).get("epsilon") for r in recs)
        attacks = {}
        for name, summary in v.attacks.items():
            seconds = [(r.get("attack_seconds") or {}).get(name) for r in recs if name in (r.get("attacks") or {})]
            attacks[name] = summary.to_dict() | {"seconds": mean_ci_over_seeds(seconds)[0]}
        rows.append(
            {
                "defense": v.defense,
                "unit": v.claimed.unit,
                "unit_label": v.claimed.unit_label,
                "epsilon": v.epsilon,
                "epsilon_label": v.epsilon_label,
                "epsilon_spent": max(spent) if spent else None,
                "delta": v.claimed.delta,
                "sound": v.sound,
                "protocol": v.protocol,
                "claim_status": v.claim_status,
                "hypothesis": v.claim_status in HYPOTHESES,
                "unaccounted": list(v.unaccounted),
                "family": defense_family(v.defense),
                "accountant": privacy.get("accountant"),
                "seeds": list(v.seeds),
                "test_accuracy": acc,
                "test_accuracy_ci": [lo, hi],
                "test_accuracy_interval": acc_interval,
                "test_accuracy_per_seed": accs,
                "attacks": attacks,
                # the one headline AUC of this model, everywhere it is shown (its verdict card, this row)
                "headline_attack": v.headline_attack,
                "strongest_attack": v.strongest_attack,
                "non_private": v.claimed.unit is None or v.claimed.epsilon is None,
                # the headline attack's game: "fair coin" only where that game was randomized
                "audit_validity": v.audit_game.to_dict(),
            }
        )
    return rows


def _panel_series(rows: list[dict], attack: str, defenses: list[str]) -> list[dict]:
    series = []
    for defense in defenses:
        points = []
        for row in rows:
            if row["defense"] != defense or attack not in row["attacks"]:
                continue
            s = row["attacks"][attack]
            points.append(
                {
                    "epsilon": row["epsilon"],
                    "auc": s["auc"],
                    "auc_ci": s["auc_ci"],
                    "covered": s["covered_by_guarantee"],
                    "private": row["epsilon"] is not None and row["unit"] is not None,
                }
            )
        if points:
            # A line is "not covered" when the guarantee at its finite ε does not cover the attack.
            private_points = [p for p in points if p["private"]]
            covered = all(p["covered"] for p in private_points) if private_points else None
            series.append({"defense": defense, "points": points, "covered": covered})
    return series


def _ceiling_curve(rows: list[dict], attack: str) -> dict | None:
    """AUC_max(ε, δ) on a grid, with the largest δ among covered private results (the loosest
    ceiling); None when no covered result is a valid audit (:func:`dpaudit.auditing.verdict.attack_validity`)."""
    deltas = [
        row["delta"]
        for row in rows
        if attack in row["attacks"]
        and row["attacks"][attack]["covered_by_guarantee"]
        and row["attacks"][attack]["valid_audit"]
        and row["epsilon"] is not None
        and row["delta"] is not None
    ]
    finite = [row["epsilon"] for row in rows if row["epsilon"] is not None]
    if not deltas or not finite:
        return None
    delta = max(deltas)
    # up to where ε = ∞ is drawn (reports.figures.INF_FACTOR), so the region spans the panel
    lo, hi = min(finite) / 2, max(finite) * 8
    grid = np.geomspace(lo, hi, 60)
    return {"delta": delta, "epsilon": grid.tolist(), "auc_max": [auc_ceiling(float(e), delta) for e in grid]}


def _roc_strongest(done: list[dict], attack: str, defenses: list[str]) -> list[dict]:
    """For each defense, the ROC of the cell where this attack reached its highest AUC."""
    curves = []
    for defense in defenses:
        best = None
        for rec in done:
            res = rec.get("attacks", {}).get(attack)
            if rec["defense"] != defense or not res or res.get("auc") is None:
                continue
            roc = res.get("roc") or {}
            if not roc.get("fpr"):
                continue
            if best is None or res["auc"] > best[1]["auc"]:
                best = (rec, res)
        if best:
            rec, res = best
            negatives = [int(run["non_members"]) for run in res.get("runs") or [] if run.get("non_members")]
            fpr = [float(f) for f in res["roc"]["fpr"]]
            positive = [f for f in fpr if f > 0]
            curves.append(
                {
                    "defense": defense,
                    "epsilon": rec.get("epsilon"),
                    "seed": rec["seed"],
                    "auc": res["auc"],
                    "fpr": fpr,
                    "tpr": list(res["roc"]["tpr"]),
                    "negatives": max(negatives) if negatives else None,
                    # the smallest FPR its negatives resolve: one false positive among them (the
                    # curve's smallest positive FPR when their number was not recorded)
                    "fpr_floor": 1.0 / max(negatives) if negatives else (min(positive) if positive else None),
                }
            )
    return curves


def _roc_panels(done: list[dict], attacks: list[str], defenses: list[str]) -> list[dict]:
    """Per attack the strongest ROC of each defense, with the panel's FPR floor: the smallest FPR any
    of its curves resolves (an axis below 1/negatives would show only the zero-false-positive step)."""
    panels = []
    for a in attacks:
        curves = _roc_strongest(done, a, defenses)
        floors = [c["fpr_floor"] for c in curves if c["fpr_floor"]]
        panels.append({"attack": a, "curves": curves, "fpr_floor": min(floors) if floors else None})
    return panels


def _charts(lower: list[dict], canaries: list[dict]) -> dict[str, dict]:
    """Whether each scatter of ε lower bounds is drawn, and why not: a chart whose every point is 0
    shows nothing but the axis, so it is replaced by a sentence."""
    out = {}
    bounds = [p["epsilon_lower_bound"] for p in lower if p["claimed_epsilon"] is not None]
    out["lower_bounds"] = {"drawn": bool(bounds) and any(b > 0 for b in bounds), "why": None}
    if bounds and not out["lower_bounds"]["drawn"]:
        out["lower_bounds"]["why"] = (
            f"Not drawn: all {len(bounds)} ε lower bound(s) are 0 — no attack here proves any leakage at 95 %, so "
            "every point would sit on the axis. A bound of 0 refutes nothing; each verdict gives the most its audit "
            "could have certified."
        )
    points = [p for p in canaries if p["claimed_epsilon"] is not None and p["certified"] is not None]
    out["canaries"] = {"drawn": any((p["certified"] or 0) > 0 or (p["overall"] or 0) > 0 for p in points), "why": None}
    if points and not out["canaries"]["drawn"]:
        out["canaries"]["why"] = (
            f"Not drawn: all {len(points)} canary ε lower bound(s) are 0 — no canary audit here proves any leakage, "
            "so every point would sit on the axis; the table gives what each audit could have certified."
        )
    return out


def _embeddings(done: list[dict], defenses: list[str], epsilons: list) -> dict:
    """The defense × ε grid of embedding panels (first seed), from the attacks' image artifacts."""
    grid = []
    for defense in defenses:
        row = []
        for eps in epsilons:
            recs = [r for r in done if r["defense"] == defense and r.get("epsilon") == eps]
            cell = None
            for rec in sorted(recs, key=lambda r: r["seed"]):
                for name, res in rec.get("attacks", {}).items():
                    images = res.get("artifacts") or {}
                    if images:
                        cell = {
                            "attack": name,
                            "seed": rec["seed"],
                            "images": dict(images),
                            "scores": {k: v for k, v in (res.get("extra") or {}).items() if _is_number(v)},
                        }
                        break
                if cell:
                    break
            row.append(cell)
        grid.append({"defense": defense, "cells": row})
    return {"epsilons": epsilons, "epsilon_labels": [epsilon_label(e) for e in epsilons], "rows": grid}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def collapse_mechanisms(mechanisms: list[dict]) -> tuple[list[dict], list[dict]]:
    """Runs of identical consecutive ledger rows as one row each (a record written before GAP's
    query ledger composed its 968 query-graph releases into the spec: 968 identical rows): the
    distinct rows, and per row
    ``{"first", "last", "repeats"}`` (1-based positions in the full ledger)."""
    rows: list[dict] = []
    spans: list[dict] = []
    for position, mechanism in enumerate(mechanisms, 1):
        if rows and mechanism == rows[-1]:
            spans[-1]["last"] = position
            spans[-1]["repeats"] += 1
        else:
            rows.append(mechanism)
            spans.append({"first": position, "last": position, "repeats": 1})
    return rows, spans


def _query_api(done: list[dict]) -> list[dict]:
    """The query-ledger finding of every audited query-charged *private* model, once per cell:
    the releases its audit made on query graphs (a separate ledger from the training guarantee;
    a non-private model's releases carry no noise, so it has no finding to show)."""
    return [
        {
            "defense": r["defense"],
            "epsilon_target": r.get("epsilon"),
            "epsilon_label": epsilon_label(r.get("epsilon")),
            "seed": r["seed"],
            **r["query_api"],
        }
        for r in done
        if r.get("query_api") and r.get("epsilon") is not None
    ]


def _ledgers(done: list[dict], defenses: list[str]) -> list[dict]:
    out = []
    seen = set()
    for rec in sorted(done, key=lambda r: (defenses.index(r["defense"]), epsilon_key(r.get("epsilon")), r["seed"])):
        key = (rec["defense"], rec.get("epsilon"))
        if key in seen:
            continue
        seen.add(key)
        privacy = rec.get("privacy") or {}
        mechanisms, spans = collapse_mechanisms(privacy.get("mechanisms") or [])
        out.append(
            {
                "defense": rec["defense"],
                "epsilon_target": rec.get("epsilon"),
                "epsilon_label": epsilon_label(rec.get("epsilon")),
                "seed": rec["seed"],
                "epsilon_spent": privacy.get("epsilon"),
                "delta": privacy.get("delta"),
                "unit": privacy.get("unit"),
                "unit_label": unit_label(privacy),
                "accountant": privacy.get("accountant"),
                "sound": privacy.get("sound", True),
                "protocol": privacy.get("protocol"),
                "claim_status": claim_status(privacy),
                "unaccounted": privacy.get("unaccounted") or [],
                "gdp_mu": privacy.get("gdp_mu"),
                "mechanisms": mechanisms,
                "mechanism_rows": spans,
                "notes": privacy.get("notes") or [],
                "inference": (rec.get("card") or {}).get("inference"),
                # GAP: releases on query graphs, a separate ledger (never in the guarantee above)
                "query_ledger": (rec.get("query_api") or {}).get("query_ledger"),
                "hyperparameters": (rec.get("card") or {}).get("hyperparameters"),
                "selection": (rec.get("card") or {}).get("selection"),
            }
        )
    return out


def strip_artifacts(data: Any) -> Any:
    """The sidecar keeps numbers, not images: drop base64 payloads, keep their names."""
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            if k in ("images", "artifacts") and isinstance(v, dict):
                out[k] = sorted(v)
            else:
                out[k] = strip_artifacts(v)
        return out
    if isinstance(data, list):
        return [strip_artifacts(v) for v in data]
    return data


def build_report_data(records: list[dict], meta: dict[str, Any]) -> dict[str, Any]:
    """Everything the report shows, from cell records (see the module docstring).

    ``meta`` carries the title, dataset description, the study configuration, the command and
    library versions; it is copied into the reproducibility section as is.
    """
    done = [r for r in records if r.get("status") == "done"]
    failed = [r for r in records if r.get("status") != "done"]
    defenses = _ordered_unique([*(meta.get("defenses") or []), *(r["defense"] for r in records)])
    defenses = [d for d in defenses if any(r["defense"] == d for r in records)]
    attacks = _ordered_unique([*(meta.get("attacks") or []), *_attack_names(done)])
    attacks = [a for a in attacks if any(a in r.get("attacks", {}) or a in r.get("attack_errors", {}) for r in done)]
    rank = {a: i for i, a in enumerate(ATTACK_ORDER)}
    attacks = sorted(attacks, key=lambda a: (rank.get(a, len(rank)), attacks.index(a)))
    epsilons = sorted(_ordered_unique(r.get("epsilon") for r in done), key=epsilon_key)
    # the conclusion, computed once in the core: the report renders it
    sv = study_verdict(done, defenses=defenses)
    verdicts = [v.to_dict() for v in sv.models]
    rows = _summary_rows(done, list(sv.models))
    headline = [
        {
            "attack": a,
            "series": _panel_series(rows, a, defenses),
            "ceiling": _ceiling_curve(rows, a),
            "covered_anywhere": any(a in row["attacks"] and row["attacks"][a]["covered_by_guarantee"] for row in rows),
            "valid_audit": all(row["attacks"][a]["valid_audit"] for row in rows if a in row["attacks"]),
        }
        for a in attacks
    ]
    utility = [
        {
            "defense": d,
            "points": [
                {"epsilon": row["epsilon"], "accuracy": row["test_accuracy"], "ci": row["test_accuracy_ci"]}
                for row in rows
                if row["defense"] == d
            ],
        }
        for d in defenses
    ]
    attack_errors = [
        {
            "cell_id": r.get("cell_id"),
            "defense": r["defense"],
            "epsilon": r.get("epsilon"),
            "seed": r["seed"],
            "attack": name,
            "error": msg,
        }
        for r in done
        for name, msg in (r.get("attack_errors") or {}).items()
    ]
    failures = [
        {
            "cell_id": r.get("cell_id"),
            "defense": r["defense"],
            "epsilon": r.get("epsilon"),
            "seed": r["seed"],
            "error": (r.get("error") or {}).get("message", "unknown error"),
            "error_type": (r.get("error") or {}).get("type"),
        }
        for r in failed
    ]
    dataset = dict(meta.get("dataset") or {})
    if not dataset and done:
        dataset = dict(done[0].get("dataset") or {})
    lower = [b.to_dict() for b in sv.bounds]
    canaries = canary_points(done)
    correction = sv.multiple_testing.to_dict()
    overall = sv.overall.to_dict()
    kind = meta.get("kind", "compare")
    risk = [
        {"defense": r["defense"], "epsilon": r.get("epsilon"), "seed": r["seed"], **_node_risk(r["node_risk"])}
        for r in done
        if r.get("node_risk")
    ]
    interrupted = [
        {"defense": r["defense"], "skipped": r.get("skipped_attacks") or []} for r in done if r.get("interrupted")
    ]
    return {
        "schema": "dpaudit.report-data",
        "version": 1,
        "title": meta.get("title") or "dpaudit privacy report",
        "kind": meta.get("kind", "compare"),
        "dataset": dataset,
        "defenses": defenses,
        "attacks": attacks,
        "epsilons": epsilons,
        # cells planned by the study (more than the records when a result line was unreadable)
        "counts": {
            "cells": max(len(records) + int(meta.get("cells_unreadable") or 0), int(meta.get("cells_planned") or 0)),
            "done": len(done),
            "failed": len(failed),
            "unreadable": int(meta.get("cells_unreadable") or 0),
            "unreadable_lines": list(meta.get("unreadable_lines") or []),
        },
        "families": {d: defense_family(d) for d in defenses},
        "single_model": kind == "audit" or len(rows) == 1,
        "verdicts": verdicts,
        "overall": overall,
        "below_chance_note": BELOW_CHANCE_NOTE,
        "split_banner": _split_banner(done, meta),
        "node_risk": risk,
        "interrupted": interrupted,
        "plans": [r["plan"] for r in done if r.get("plan")],
        "summary": rows,
        "headline": headline,
        "utility": utility,
        "roc": _roc_panels(done, attacks, defenses),
        "embeddings": _embeddings(done, defenses, epsilons),
        "lower_bounds": lower,
        "multiple_testing": correction,
        "risk_slices": _risk_slices(done, defenses),
        "canaries": canaries,
        "charts": _charts(lower, canaries),
        "broken": [p for p in lower if p["broken"]],
        "exceeds_not_valid": [p for p in lower if p["exceeds_claim"] and not p["broken"]],
        "ledgers": _ledgers(done, defenses),
        "query_api": _query_api(done),
        "failures": failures,
        "attack_errors": attack_errors,
        "notes": _attack_notes(done),
        "reproducibility": {
            **(meta.get("reproducibility") or {}),
            "cells": [
                {
                    "cell_id": r.get("cell_id"),
                    "defense": r["defense"],
                    "epsilon": r.get("epsilon"),
                    "seed": r["seed"],
                    "status": r.get("status"),
                    "config_hash": r.get("config_hash"),
                    "seconds": r.get("seconds"),
                }
                for r in records
            ],
        },
    }


def _node_risk(risk: dict) -> dict:
    """A record's nodes-at-risk view with its FPR level named (``fpr_level``, ``threshold_at_fpr``,
    per bucket ``tpr_at_fpr``); a record written before the 1 % level keeps its 10 % numbers,
    labelled as such."""
    risk = dict(risk)
    if "threshold_at_fpr" not in risk and "threshold_10pct_fpr" in risk:
        risk["fpr_level"] = 0.1
        risk["threshold_at_fpr"] = risk.pop("threshold_10pct_fpr")
        risk["by_degree"] = [
            {**{k: v for k, v in b.items() if k != "tpr_at_10pct_fpr"}, "tpr_at_fpr": b.get("tpr_at_10pct_fpr")}
            for b in risk.get("by_degree") or []
        ]
    risk.setdefault("fpr_level", 0.01)
    return risk


def _attack_notes(done: list[dict]) -> list[dict]:
    notes = OrderedDict()
    for rec in done:
        for name, res in rec.get("attacks", {}).items():
            for note in res.get("notes") or []:
                notes.setdefault((name, str(note)), None)
    return [{"attack": a, "note": n} for a, n in notes]


def canary_points(done: list[dict]) -> list[dict]:
    """Every cell's canary audit (``compare --canaries``): claimed ε (spent, group-adjusted for
    edge canaries on node-level DP) against the certified and overall ε lower bounds."""
    points = []
    for rec in done:
        for kind, res in sorted((rec.get("canaries") or {}).items()):
            bounds = res.get("epsilon_lower_bound") or {}
            points.append(
                {
                    "defense": rec["defense"],
                    "epsilon_target": rec.get("epsilon"),
                    "seed": rec["seed"],
                    "kind": kind,
                    "canaries": res.get("canaries"),
                    "claimed_epsilon": res.get("claimed_epsilon"),
                    "certified": res.get("certified_epsilon_lower_bound"),
                    "overall": bounds.get("overall"),
                    "bounds": bounds,
                    "auc": res.get("auc"),
                    "bound_valid": bool(res.get("bound_valid")),
                    "why": res.get("why") or res.get("coverage"),
                    "verdict": res.get("verdict"),
                    "broken": res.get("verdict") in REFUTING_VERDICTS,
                    # the audit's power: the most its certified estimators could show (every guess right)
                    "max_possible": certified_max_possible(res.get("max_possible")),
                    "can_refute_claim": res.get("can_refute_claim"),
                }
            )
    return points
