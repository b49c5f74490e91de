r"""From cell records to the numbers a report shows (the JSON sidecar is exactly this data).

A *cell record* is one trained model and the attacks run against it (one line of a study's
``results.jsonl``; see :mod:`dpaudit.app.workflows.study`). :func:`build_report_data` groups records by
(defense, target ε), aggregates over seeds and returns plain JSON-able data: every number
the HTML shows is in it, and nothing else is computed at render time.

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

import functools
import math
from collections import OrderedDict
from typing import Any

import numpy as np
from scipy import stats

import attacks as attack_registry
from dpaudit.accounting.spec import HYPOTHESES, PrivacySpec
from dpaudit.auditing.intervals import clopper_pearson_interval
from dpaudit.auditing.results import REFUTING_VERDICTS
from dpaudit.auditing.statistics import HYPOTHESIS_WORDS, auc_ceiling
from dpaudit.errors import DPAuditError
from dpaudit.release.deployments import DEPLOYMENTS, deployment_entry
from dpaudit.training.noise import seeded_flag
from dpaudit.training.registry import get_defense

CONFIDENCE = 0.95
# Strongest first (shadow-model membership attacks, then edge attacks, then cheap diagnostics):
# the order audits run attacks in and reports show them; other attacks follow in their own order.
ATTACK_ORDER = tuple(attack_registry.order_attacks(attack_registry.available_attacks()))
TPR_KEY = "0.01"  # the summary table's TPR at 1 % FPR


# --------------------------------------------------------------------------- small statistics


def unit_label(privacy: dict) -> str | None:
    """The unit as printed, with its restriction when the guarantee has one
    (``node (max degree <= 100)``: bounded-degree node DP)."""
    unit, condition = privacy.get("unit"), privacy.get("unit_condition")
    return unit if unit is None or not condition else f"{unit} ({condition})"


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]


def mean_ci_over_seeds(values) -> tuple[float | None, float | None, float | None]:
    """Mean and 95 % Student-t interval over seeds (interval None with fewer than 2 values)."""
    vals = _finite(values)
    if not vals:
        return None, None, None
    mean = float(np.mean(vals))
    if len(vals) < 2:
        return mean, None, None
    sem = float(np.std(vals, ddof=1)) / math.sqrt(len(vals))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(vals) - 1)) * sem
    return mean, mean - half, mean + half


def _max_or_none(values) -> float | None:
    vals = _finite(values)
    return max(vals) if vals else None


# --------------------------------------------------------------------------- audit validity

RANDOM_SPLITS = ("random", "per-class", "inductive")
EDGE_CAVEAT = (
    "edges and non-edges are different node pairs, not units assigned at random: the attack also measures how "
    "predictable edges are from features (homophily), which DP does not hide; its AUC may exceed the DP ceiling "
    "and its ε lower bound the claim without any guarantee being broken"
)


def audit_validity(record: dict, result: dict) -> tuple[bool, str]:
    """Whether an attack's AUC and ε lower bound can be held against the model's DP guarantee.

    The DP inequalities (ceiling, lower bound) concern one unit included or not *at random*:
    they apply to attack data whose members and non-members were assigned at random — node
    membership on a random split, scored on the randomized audit game's pairs. Edge attacks
    compare edges with other pairs (non-edges), which differ in the data itself, and a fixed
    public split was chosen by people; both can exceed the DP bounds on a perfectly private
    model. A result says so itself (``bound_valid``, ``bound_validity``); a result written before
    those fields existed carries the per-node Clopper–Pearson statistic, which treats
    fixed-size membership as independent trials, and is never a valid audit.
    """
    unit = (result.get("ceiling") or {}).get("attack_unit") or "node"
    if unit == "edge":
        return False, EDGE_CAVEAT
    spec = str((record.get("split") or {}).get("spec") or "")
    if not spec.startswith(RANDOM_SPLITS):
        return False, f"the split {spec or '(unknown)'!r} did not assign members at random"
    if "bound_valid" not in result:
        return False, (
            "recorded before the randomized audit game: its ε lower bound treats per-node outcomes of one model as "
            "independent trials (membership is fixed-size, not Bernoulli)"
        )
    if not result.get("bound_valid"):
        return False, str(result.get("bound_validity") or "the attack marks its bound as not valid")
    return True, ""


# --------------------------------------------------------------------------- multiple testing

FAMILY_CONFIDENCE = 0.95


def _bonferroni_bound(result: dict, tests: int) -> float | None:
    """The result's one-run ε lower bound recomputed at confidence 1 − 0.05/``tests`` from its
    stored pair-test counts (:func:`dpaudit.auditing.statistics.pair_test_from_counts`); None without
    counts (only a single test may then use its own 95 % value)."""
    lb = (result.get("extra") or {}).get("lower_bound") or {}
    counts, pairs = lb.get("counts"), lb.get("pairs")
    if not counts or not pairs:
        return result.get("epsilon_lower_bound") if tests <= 1 else None
    from dpaudit.auditing.statistics import pair_test_from_counts

    confidence = 1.0 - (1.0 - FAMILY_CONFIDENCE) / max(1, tests)
    return pair_test_from_counts(
        counts, int(pairs), float(lb.get("delta") or 0.0), int(lb.get("group_size") or 1), confidence
    )["epsilon"]


@functools.lru_cache(maxsize=4096)
def _pair_power(pairs: int, delta: float, group_size: int, confidence: float, fractions: tuple) -> float:
    from dpaudit.auditing.statistics import pair_test_max_possible

    return pair_test_max_possible(pairs, delta, group_size, confidence, fractions)


def audit_design(result: dict) -> dict | None:
    """The size of a result's one-run pair test (pairs, δ, group size, guess grid): what its
    power depends on; None for a result without one (edge attacks, diagnostics)."""
    lb = (result.get("extra") or {}).get("lower_bound") or {}
    if not lb.get("pairs"):
        return None
    fractions = tuple(float(c["fraction"]) for c in lb.get("counts") or [] if "fraction" in c)
    return {
        "pairs": int(lb["pairs"]),
        "delta": float(lb.get("delta") or 0.0),
        "group_size": int(lb.get("group_size") or 1),
        "fractions": list(fractions) or None,
    }


def audit_power(design: dict | None, confidence: float = FAMILY_CONFIDENCE) -> float | None:
    """The largest ε an audit of this ``design`` (:func:`audit_design`) could certify at
    ``confidence`` if every guess were correct (:func:`dpaudit.auditing.statistics.pair_test_max_possible`):
    an audit whose power is at most the claim could not have refuted it, whatever the attack."""
    if not design:
        return None
    from dpaudit.auditing.statistics import PAIR_GUESS_FRACTIONS

    fractions = tuple(design.get("fractions") or PAIR_GUESS_FRACTIONS)
    return _pair_power(int(design["pairs"]), float(design["delta"]), int(design["group_size"]),
                       float(confidence), fractions)  # fmt: skip


# --------------------------------------------------------------------------- families, verdicts

FAMILIES = ("GAP", "DPAR", "DP-GNN", "GCON", "MLP-DP", "non-private baselines", "other")


def defense_family(name: str) -> str:
    """The family a defense belongs to (figures colour and group by it), as its class declares
    (:attr:`dpaudit.training.defense.Defense.family`); ``"other"`` for a defense not installed."""
    try:
        return get_defense(str(name)).family
    except DPAuditError:
        return "other"


def claim_status(privacy: dict | None) -> str:
    """A record's :attr:`~dpaudit.accounting.spec.PrivacySpec.status` (proven, claimed, paper, ...)."""
    if not privacy or privacy.get("epsilon") is None:
        return "none"
    return PrivacySpec.from_dict(privacy).status


#: what each hypothesis is, said after a verdict's headline (a proven guarantee needs nothing)
STATUS_NOTES = {
    "claimed": " The claim is the user's own statement (protocol=claimed): a hypothesis this audit tests, not a "
    "proven bound.",
    "paper": " The claimed ε is the paper's own analysis (protocol=paper): a hypothesis this audit tests, not a "
    "proven bound.",
    "unsound": " The claimed ε leaves a step unaccounted (sound: false): a hypothesis this audit tests, not a proven "
    "bound.",
}


def _coverage_reason(result: dict) -> str:
    return str((result.get("ceiling") or {}).get("reason") or "")


def _headline_attack(attacks: dict[str, dict]) -> str | None:
    """The strongest of ``attacks`` (the summary row's, or a verdict's among those it may
    name): the highest AUC (ties: first in order), never a diagnostic
    (:data:`DIAGNOSTIC_ATTACKS`: fitted after looking at models, not a test)."""
    best = None
    for name, s in attacks.items():
        if name in DIAGNOSTIC_ATTACKS:
            continue
        if s.get("auc") is not None and (best is None or s["auc"] > attacks[best]["auc"]):
            best = name
    return best


RANDOM_SPLIT_HINT = "random:0.75,0.1,0.15"

UNIT_COVERS = {
    "node": "one node with its features, label and edges: node membership, and edges through group privacy "
    "(two node changes) as far as inference is private",
    "edge": "one edge's presence: edge inference as far as inference is private; not node membership",
}


def _is_private(row: dict, rec: dict) -> bool:
    return row["unit"] is not None and (rec.get("privacy") or {}).get("epsilon") is not None


def headline_pool(attacks: dict[str, dict], private: bool) -> dict[str, dict]:
    """The attacks that may headline a model (its verdict card, its summary row, every place its
    one AUC is shown): for a private model only those its guarantee covers (an edge attack against
    node-level DP with non-private inference says nothing about the claim, however high its AUC);
    for a model without a guarantee, every attack."""
    return {n: s for n, s in attacks.items() if s["covered_by_guarantee"]} if private else dict(attacks)


def _auc_entry(attacks: dict[str, dict], name: str | None, **more) -> dict | None:
    if not name:
        return None
    s = attacks[name]
    return {"attack": name, "auc": s["auc"], "auc_ci": s["auc_ci"], "below_chance": bool(s.get("below_chance")),
            **more}  # fmt: skip


def _power(attacks: dict[str, dict], names, confidence: float) -> dict | None:
    """The strongest of ``names``' audits: the largest ε any could have certified at ``confidence``
    with every guess right (:func:`audit_power`), with its size."""
    best = None
    for name in names:
        design = attacks[name].get("design")
        value = audit_power(design, confidence)
        if value is not None and (best is None or value > best["max_epsilon"]):
            best = {"attack": name, "max_epsilon": value, "pairs": design["pairs"], "delta": design["delta"],
                    "group_size": design["group_size"], "confidence": confidence}  # fmt: skip
    return best


def _verdict(row: dict, rec: dict, lower: list[dict] | None = None, correction: dict | None = None) -> dict[str, Any]:
    """The verdict of one model (one summary row), worded for a reviewer: the claim, whether any
    valid audit refutes it, how strong the audit was (its power: the largest ε it could have
    certified at its size, :func:`audit_power`) and the strongest leakage measured, covered or not.

    ``status`` is one of ``broken`` (a valid, covered bound exceeds the claim after the report's
    Bonferroni correction, :func:`_lower_bounds`; never the maximum over seeds at 95 % each),
    ``consistent`` (no valid audit refutes the claim, and one could have: its power at the
    confidence a refutation needs exceeds the claim), ``underpowered`` (no valid audit refutes it,
    but none could have), ``not-auditable`` (no attack here is a valid audit of this guarantee) or
    ``none`` (the model claims no guarantee)."""
    attacks = row["attacks"]
    privacy = rec.get("privacy") or {}
    claimed = privacy.get("epsilon")
    private = _is_private(row, rec)
    leakage = _strongest_leakage(attacks, private)
    lb = _strongest_lower_bound(attacks, private, privacy)
    correction = correction or {"tests": 1}
    tests = max(1, int(correction.get("tests") or 1))
    power = _refutation_power(attacks, private, claimed, tests)
    status_of_claim = row.get("claim_status") or claim_status(privacy)
    hypothesis = private and status_of_claim in HYPOTHESES
    # canary audits of this model's own claim (dpaudit.audit(..., canaries=...)): re-tested against it
    canaries = [dict(e, name=k) for k, e in (rec.get("canaries") or {}).items()
                if isinstance(e, dict) and e.get("claim_status")]  # fmt: skip
    invalid = [s.get("why_not_valid") for n, s in attacks.items()
               if not s["valid_audit"] and s.get("why_not_valid")]  # fmt: skip
    if not private:
        status, headline = "none", "No privacy guarantee: the numbers below are the leakage of an unprotected model."
    elif (refuted := _refuted_headline(row, lower, correction, canaries, claimed, hypothesis)) is not None:
        status, headline = "broken", refuted
    else:
        status, headline, power = _unrefuted_verdict(claimed, hypothesis, lb, power, canaries, tests)
    if private and not row["sound"]:
        headline += STATUS_NOTES.get(status_of_claim, " The claimed ε itself is not a sound bound.")
    return {
        "defense": row["defense"],
        "epsilon": row["epsilon"],
        "epsilon_label": row["epsilon_label"],
        "status": status,
        "headline": headline,
        **leakage,
        "power": power,
        "below_chance": [n for n, s in attacks.items() if s.get("below_chance")],
        "lower_bound": lb,
        "bound_validity": invalid[0] if invalid and not (lb and lb["valid"]) else None,
        "multiple_testing": {"tests": correction.get("tests")},
        **_claim_scope(row, rec, privacy, private),
        "sound": row["sound"],
        "protocol": row.get("protocol"),
        "claim_status": status_of_claim,
        # a user's or a paper's unproven claim: tested here, never "covered" or "proven"
        "hypothesis": hypothesis,
        "claim_words": HYPOTHESIS_WORDS.get(status_of_claim) if hypothesis else None,
        "canaries": canaries,
        "unaccounted": row.get("unaccounted") or [],
        "test_accuracy": row["test_accuracy"],
    }


def _strongest_leakage(attacks: dict[str, dict], private: bool) -> dict[str, Any]:
    """A verdict's leakage entries: the headline AUC and TPR at 1 % FPR (among the attacks that may
    headline the model, :func:`headline_pool`), the strongest attack its guarantee does not cover,
    and the strongest leakage measured, covered or not."""
    pool = headline_pool(attacks, private)
    uncovered_pool = {n: s for n, s in attacks.items() if not s["covered_by_guarantee"]} if private else {}
    best_auc = _headline_attack(pool)
    best_uncovered = _headline_attack(uncovered_pool)
    strongest = _headline_attack(attacks)
    tprs = {n: s["tpr_at_1pct_fpr"] for n, s in pool.items()
            if s.get("tpr_at_1pct_fpr") is not None and n not in DIAGNOSTIC_ATTACKS}  # fmt: skip
    best_tpr = max(tprs, key=tprs.get) if tprs else None
    return {
        "best_auc": _auc_entry(attacks, best_auc),
        "best_tpr_at_1pct_fpr": {
            "attack": best_tpr,
            "tpr": tprs[best_tpr],
            "over_runs": attacks[best_tpr].get("tpr_at_1pct_fpr_over_runs"),
        }
        if best_tpr
        else None,
        "strongest_uncovered": _auc_entry(
            attacks, best_uncovered,
            why=(attacks[best_uncovered].get("coverage") or "the guarantee does not cover this attack's unit")
            if best_uncovered else None,
        ),  # fmt: skip
        # the strongest leakage measured, covered or not (the headline when it is covered)
        "strongest_leakage": _auc_entry(
            attacks, strongest, covered=bool(strongest and attacks[strongest]["covered_by_guarantee"])
        ),
    }


def _strongest_lower_bound(attacks: dict[str, dict], private: bool, privacy: dict) -> dict | None:
    """The largest ε lower bound measured (a valid, covered one first), with whether it may be held
    against the claim and why."""
    bounds = [(n, s) for n, s in attacks.items() if s.get("epsilon_lower_bound_max") is not None]
    valid = [(n, s) for n, s in bounds if s["valid_audit"] and s["covered_by_guarantee"]]
    pick = max(valid or bounds, key=lambda p: p[1]["epsilon_lower_bound_max"]) if bounds else None
    if not pick:
        return None
    name, s = pick
    value = s["epsilon_lower_bound_max"]
    if not private:
        why = "the model claims no guarantee, so there is nothing to test it against"
    elif not s["covered_by_guarantee"]:
        why = s.get("coverage") or "the guarantee does not cover this attack's unit"
    elif not s["valid_audit"]:
        why = s.get("why_not_valid") or "members were not assigned at random"
    elif private and claim_status(privacy) in HYPOTHESES:
        why = "members were assigned at random and the claim speaks to the attack"
    else:
        why = "members were assigned at random and the guarantee covers the attack"
    return {"attack": name, "value": value, "delta": s.get("epsilon_lower_bound_delta"),
            "valid": bool(s["valid_audit"] and s["covered_by_guarantee"] and private), "why": why,
            "max_possible": s.get("epsilon_lower_bound_power")}  # fmt: skip


def _refutation_power(attacks: dict[str, dict], private: bool, claimed, tests: int) -> dict | None:
    """The power (:func:`_power`) of the valid, covered audits that test the claim, at the confidence
    a refutation needs after Bonferroni over ``tests``, and whether it exceeds the claim."""
    refute_confidence = 1.0 - (1.0 - FAMILY_CONFIDENCE) / tests
    testing = [n for n, s in attacks.items() if private and s["valid_audit"] and s["covered_by_guarantee"]
               and n not in DIAGNOSTIC_ATTACKS]  # fmt: skip
    power = _power(attacks, testing, refute_confidence)
    if power is not None:
        power["tests"] = tests
        power["enough"] = bool(claimed is not None and power["max_epsilon"] > float(claimed) * (1 + 1e-9))
    return power


def _refuted_headline(row: dict, lower: list[dict] | None, correction: dict, canaries: list[dict], claimed,
                      hypothesis: bool) -> str | None:  # fmt: skip
    """A private model's headline when a valid audit refutes its claim: a Bonferroni-corrected
    attack bound (:func:`_lower_bounds`) first, else a refuting canary audit; ``None`` when neither does."""
    refuted_word = "Claim refuted" if hypothesis else "Guarantee broken"
    broken_points = [p for p in (lower or []) if p["broken"] and p["defense"] == row["defense"]
                     and p["epsilon_target"] == row["epsilon"]]  # fmt: skip
    refuting = [e for e in canaries if e.get("verdict") in REFUTING_VERDICTS]
    if broken_points:
        worst = max(broken_points, key=lambda p: p["epsilon_lower_bound_bonferroni"])
        return (f"{refuted_word}: a valid audit ({worst['attack']}, seed {worst['seed']}) proves "
                f"ε ≥ {worst['epsilon_lower_bound_bonferroni']:.2f} at 95 % after Bonferroni over "
                f"{correction['tests']} test(s), above the claimed ε = {claimed:.2f}.")  # fmt: skip
    if refuting:
        worst = max(refuting, key=lambda e: e["certified_epsilon_lower_bound"])
        return (f"{refuted_word}: a valid canary audit ({worst['name']}: {worst.get('canaries')} canaries, "
                f"recipe {worst.get('recipe')}) certifies ε ≥ {worst['certified_epsilon_lower_bound']:.2f} at "
                f"{100 * worst['confidence']:.3g} % (δ = {worst['delta']:.1e}), above the ε = "
                f"{worst['claimed_epsilon']:.2f} the claim allows at its unit.")  # fmt: skip
    return None


def _unrefuted_verdict(claimed, hypothesis: bool, lb: dict | None, power: dict | None, canaries: list[dict],
                       tests: int) -> tuple[str, str, dict | None]:  # fmt: skip
    """A private model's status, headline and power when no valid audit refutes its claim:
    ``consistent`` when an attack audit or a canary audit could have, ``underpowered`` when a valid
    audit ran but none could have, else ``not-auditable``."""
    canary_power = [e for e in canaries if e.get("bound_valid") and e.get("can_refute_claim")
                    and e.get("verdict") not in REFUTING_VERDICTS]  # fmt: skip
    confidence_words = "95 %" if tests == 1 else f"95 % over {tests} tests (Bonferroni)"
    audited = "testing" if hypothesis else "covered"
    if lb and lb["valid"] and power is not None and power["enough"]:
        return "consistent", (
            f"Consistent with the claim ε = {claimed:.2f}: no fair, {audited} "
            f"audit refutes it, and one could have — "
            f"{power['attack']} on {power['pairs']} member/non-member pairs could certify up to "
            f"ε = {power['max_epsilon']:.2f} ({confidence_words}) with every guess right; the strongest "
            f"valid audit proves only ε ≥ {lb['value']:.2f} ({lb['attack']})."), power  # fmt: skip
    if canary_power:
        best = max(canary_power, key=lambda e: _certified_max_possible(e.get("max_possible")) or 0.0)
        if power is None or not power.get("enough"):
            power = {"attack": best["name"], "max_epsilon": _certified_max_possible(best.get("max_possible")),
                     "pairs": best.get("canaries"), "delta": best.get("delta"), "group_size": 1,
                     "confidence": best["confidence"], "tests": 1, "enough": True, "canary": True}  # fmt: skip
        return "consistent", (
            f"Consistent with the claim ε = {claimed:.2f}: no valid audit refutes it, and one could have — "
            f"the {best['name']} audit ({best.get('canaries')} canaries) could certify up to "
            f"ε = {power['max_epsilon']:.2f} at {100 * best['confidence']:.3g} % with every guess right; "
            f"it certifies only ε ≥ {best['certified_epsilon_lower_bound']:.2f}."), power  # fmt: skip
    if lb and lb["valid"]:
        if power is None:
            size = "its size is not recorded, so its power is unknown"
        else:
            size = (f"with {power['pairs']} member/non-member pairs (δ = {power['delta']:.1e}) even a perfect attack "
                    f"could certify at most ε = {power['max_epsilon']:.2f} ({confidence_words}), "
                    f"{'not above' if power['max_epsilon'] > 0 else 'far below'} the claim")  # fmt: skip
        return "underpowered", (
            f"Not refuted, but not tested either: no fair, {audited} audit "
            f"refutes ε = {claimed:.2f}, yet the audit "
            f"was too small to refute it — {size}. Audit a larger graph (more pairs) to test the claim."), power
    return "not-auditable", (
        "Claim not tested: no attack here is a fair audit of this claim, so the leakage below is measured "
        "but cannot be held against it." if hypothesis else
        "Claim not tested: no attack here is a fair, covered audit of this guarantee, so the leakage "
        "below is measured but cannot be held against the claim."), power  # fmt: skip


def _claim_scope(row: dict, rec: dict, privacy: dict, private: bool) -> dict[str, Any]:
    """A verdict's entries on what the claim covers: its (ε, δ, unit), the attacks it covers and
    those it does not, whether inference is private, what ε covers per deployment
    (:mod:`dpaudit.release.deployments`) and which deployments the attacks audited."""
    attacks = row["attacks"]
    inference = (rec.get("card") or {}).get("inference") or {}
    return {
        "claimed": {
            "epsilon": privacy.get("epsilon"),
            "delta": privacy.get("delta"),
            "unit": row["unit"],
            "unit_label": row["unit_label"],
            "target_epsilon": row["epsilon"],
            "accountant": privacy.get("accountant"),
        },  # fmt: skip
        "covers": UNIT_COVERS.get(row["unit"] or "", None),
        "covered_attacks": [n for n, s in attacks.items() if s["covered_by_guarantee"]],
        "uncovered_attacks": {n: s.get("coverage") for n, s in attacks.items() if not s["covered_by_guarantee"]},
        "inference_private": inference.get("private"),
        "inference_note": inference.get("note"),
        "seeded_noise": seeded_flag(rec.get("card") or {}),  # dpaudit.training.noise: not a release
        "deployments": {d: deployment_entry(inference, d, private) for d in DEPLOYMENTS} if private else None,
        "audited_deployments": sorted(
            {
                str((res.get("extra") or {}).get("deployment"))
                for res in (rec.get("attacks") or {}).values()
                if isinstance(res, dict) and (res.get("extra") or {}).get("deployment")
            }
        ),
    }


def overall_verdict(verdicts: list[dict]) -> dict[str, Any]:
    """One line for the whole report a reviewer can act on: how many claims are broken,
    consistent with an audit that could have refuted them, not refuted by audits too small to,
    not tested at all, or absent; and the strongest leakage measured anywhere."""
    by = {k: [v for v in verdicts if v["status"] == k]
          for k in ("broken", "consistent", "underpowered", "not-auditable", "none")}  # fmt: skip
    private = len(verdicts) - len(by["none"])

    def names(vs):
        return ", ".join(f"{v['defense']} (ε = {v['epsilon_label']})" for v in vs)

    if by["broken"]:
        status = "broken"
        action = (f"Do not rely on the claimed ε of {names(by['broken'])}: a valid audit refutes "
                  f"{'it' if len(by['broken']) == 1 else 'them'}.")  # fmt: skip
        if all(v.get("hypothesis") for v in by["broken"]):
            action += " (A claim, not a proven guarantee, is what is refuted.)"
    elif not private:
        status, action = "none", "No model here claims a privacy guarantee: the report measures leakage only."
    elif len(by["consistent"]) == private:
        status = "consistent"
        action = ("No claim is refuted, and every claim was tested by an audit strong enough to refute it "
                  "(each card states that audit's certifiable maximum).")
    else:
        status = "untested"
        untested = by["underpowered"] + by["not-auditable"]
        one = len(untested) == 1
        which = "the only claim" if one and private == 1 else f"{len(untested)} of {private} claims"
        action = (f"No claim is refuted, but {which} {'was' if one else 'were'} not tested by an audit strong "
                  f"enough to refute {'it' if one else 'them'} ({names(untested)}): treat "
                  f"{'it' if one else 'those'} as unaudited, not as confirmed.")  # fmt: skip
    refuted = sum(bool(v.get("hypothesis")) for v in by["broken"])  # a hypothesis is refuted, not broken
    broken_word = "refuted" if refuted == len(by["broken"]) > 0 else "broken" if not refuted else "broken or refuted"
    parts = [f"{len(by['broken'])} {broken_word}", f"{len(by['consistent'])} consistent with an audit that could refute them",
             f"{len(by['underpowered'])} not refuted by audits too small to refute them",
             f"{len(by['not-auditable'])} not tested by any valid audit",
             f"{len(by['none'])} without a guarantee"]  # fmt: skip
    leaks = [(v, v["strongest_leakage"]) for v in verdicts if v.get("strongest_leakage")]
    leak = None
    if leaks:
        v, s = max(leaks, key=lambda p: p[1]["auc"] if p[1]["auc"] is not None else -1.0)
        coverage = ("no guarantee" if v["status"] == "none" else "outside its guarantee" if not s["covered"]
                    else "tested against its claim" if v.get("hypothesis") else "covered by its guarantee")  # fmt: skip
        leak = {"defense": v["defense"], "epsilon_label": v["epsilon_label"], "attack": s["attack"], "auc": s["auc"],
                "coverage": coverage}  # fmt: skip
    powers = [v["power"]["max_epsilon"] for v in verdicts if v.get("power")]
    return {
        "status": status,
        "action": action,
        "counts": {k: len(vs) for k, vs in by.items()},
        "summary": "; ".join(parts),
        "strongest_leakage": leak,
        "largest_certifiable": max(powers) if powers else None,
    }


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
        and name not in DIAGNOSTIC_ATTACKS
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


#: attacks that are diagnostics by design (fitted on the target's membership): never a bound
DIAGNOSTIC_ATTACKS = tuple(n for n in attack_registry.available_attacks() if attack_registry.declaration(n).diagnostic)


def _risk_slices(done: list[dict], defenses: list[str]) -> list[dict]:
    """Per model (first seed of each defense and ε): attack success by degree, class and
    homophily bucket from the strongest membership attack that recorded ``risk_slices``."""
    out, seen = [], set()
    for rec in sorted(done, key=lambda r: (defenses.index(r["defense"]), epsilon_key(r.get("epsilon")), r["seed"])):
        key = (rec["defense"], rec.get("epsilon"))
        if key in seen:
            continue
        candidates = [(name, res) for name, res in (rec.get("attacks") or {}).items()
                      if (res.get("extra") or {}).get("risk_slices") and res.get("auc") is not None]  # fmt: skip
        if not candidates:
            continue
        seen.add(key)
        name, res = max(candidates, key=lambda p: p[1]["auc"])
        slices = res["extra"]["risk_slices"]
        out.append({
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
        })  # fmt: skip
    return out


# --------------------------------------------------------------------------- grouping


def epsilon_key(epsilon: float | None) -> float:
    """Sort key: ε = ∞ (stored as None) last."""
    return math.inf if epsilon is None else float(epsilon)


def epsilon_label(epsilon: float | None) -> str:
    if epsilon is None or not math.isfinite(epsilon):
        return "∞"
    return f"{epsilon:g}"


def _ordered_unique(items) -> list:
    return list(OrderedDict.fromkeys(items))


def _attack_names(records: list[dict]) -> list[str]:
    names = []
    for rec in records:
        names.extend(rec.get("attacks", {}).keys())
        names.extend(rec.get("attack_errors", {}).keys())
    return _ordered_unique(names)


def tpr_over_runs(results: list[dict]) -> dict[str, Any]:
    """TPR at 1 % FPR over every run of ``results`` (each seed's ``runs``; a result written
    without them counts as one run of unknown negatives): :func:`dpaudit.auditing.low_fpr.summarize_level`."""
    from dpaudit.auditing.low_fpr import summarize_level

    runs = [run for r in results for run in (r.get("runs") or [r])]
    tprs = [(run.get("tpr_at_fpr") or {}).get(TPR_KEY) for run in runs]
    return summarize_level(tprs, [run.get("non_members") for run in runs], float(TPR_KEY))


def _summarise_attack(results: list[dict], valid: bool) -> dict[str, Any]:
    """Aggregate one attack's results over the seeds of one (defense, ε)."""
    aucs = [r.get("auc") for r in results]
    mean, lo, hi = mean_ci_over_seeds(aucs)
    interval = "t over seeds"
    if len(_finite(aucs)) == 1:
        ci = results[0].get("auc_ci") or [None, None]
        lo, hi = ci[0], ci[1]
        interval = "attack's own interval"
    tprs = [(r.get("tpr_at_fpr") or {}).get(TPR_KEY) for r in results]
    bounds = [r.get("epsilon_lower_bound") for r in results]
    ceilings = [r.get("ceiling_auc") for r in results]
    designs = [d for d in (audit_design(r) for r in results) if d]
    design = max(designs, key=lambda d: d["pairs"]) if designs else None
    return {
        "auc": mean,
        "auc_ci": [lo, hi],
        "auc_interval": interval,
        "auc_per_seed": aucs,
        "tpr_at_1pct_fpr": mean_ci_over_seeds(tprs)[0],
        "tpr_at_1pct_fpr_over_runs": tpr_over_runs(results),
        "epsilon_lower_bound_max": _max_or_none(bounds),
        "epsilon_lower_bound_delta": next((r.get("epsilon_lower_bound_delta") for r in results), None),
        "covered_by_guarantee": any(bool(r.get("covered_by_guarantee")) for r in results),
        "ceiling_auc": _max_or_none(ceilings),
        "valid_audit": valid,
        # the largest pair test over seeds and what it could certify at 95 % with every guess right
        "design": design,
        "epsilon_lower_bound_power": audit_power(design),
        "below_chance": below_chance(mean, hi),
        "n": len(results),
    }


#: AUC under this, with its whole interval under 0.5, is explained where it is shown
BELOW_CHANCE_AUC = 0.45
BELOW_CHANCE_NOTE = (
    "AUC below 0.5: the attack's scores are anti-correlated with membership (members score lower than "
    "non-members). The attack's direction is fixed before it runs, so this is not leakage in the tested "
    "direction and refutes no claim; it does show that the model treats members and non-members differently, "
    "which a reversed attack, tested afresh, might exploit"
)


def below_chance(auc: float | None, ci_high: float | None) -> bool:
    """Whether an AUC is clearly below chance: under :data:`BELOW_CHANCE_AUC` with its interval
    entirely below 0.5."""
    return bool(auc is not None and auc < BELOW_CHANCE_AUC and ci_high is not None and ci_high < 0.5)


def _summary_rows(done: list[dict], attacks: list[str], defenses: list[str]) -> list[dict]:
    groups: dict[tuple, list[dict]] = OrderedDict()
    for rec in sorted(done, key=lambda r: (defenses.index(r["defense"]), epsilon_key(r.get("epsilon")), r["seed"])):
        groups.setdefault((rec["defense"], rec.get("epsilon")), []).append(rec)
    rows = []
    for (defense, eps), recs in groups.items():
        accs = [r.get("metrics", {}).get("test_accuracy") for r in recs]
        acc, lo, hi = mean_ci_over_seeds(accs)
        acc_interval = "t over seeds"
        if len(_finite(accs)) == 1:
            n_test = int(recs[0].get("metrics", {}).get("n_test") or 0)
            lo, hi = clopper_pearson_interval(round(acc * n_test), n_test, CONFIDENCE) if n_test else (None, None)
            acc_interval = f"Clopper–Pearson over {n_test} test nodes"
        privacy = recs[0].get("privacy") or {}
        spent = _max_or_none([(r.get("privacy") or {}).get("epsilon") for r in recs])
        row = {
            "defense": defense,
            "unit": privacy.get("unit"),
            "unit_label": unit_label(privacy),
            "epsilon": eps,
            "epsilon_label": epsilon_label(eps),
            "epsilon_spent": spent,
            "delta": privacy.get("delta"),
            "sound": all(bool((r.get("privacy") or {}).get("sound", True)) for r in recs),
            "protocol": privacy.get("protocol"),
            "claim_status": claim_status(privacy),
            "hypothesis": claim_status(privacy) in HYPOTHESES,
            "unaccounted": _ordered_unique(
                u for r in recs for u in ((r.get("privacy") or {}).get("unaccounted") or [])
            ),
            "family": defense_family(defense),
            "accountant": privacy.get("accountant"),
            "seeds": [r["seed"] for r in recs],
            "test_accuracy": acc,
            "test_accuracy_ci": [lo, hi],
            "test_accuracy_interval": acc_interval,
            "test_accuracy_per_seed": accs,
            "attacks": {},
        }
        for name in attacks:
            pairs = [(r, r["attacks"][name]) for r in recs if name in r.get("attacks", {})]
            if pairs:
                valid = all(audit_validity(r, res)[0] for r, res in pairs)
                row["attacks"][name] = _summarise_attack([res for _, res in pairs], valid)
                row["attacks"][name]["seconds"] = mean_ci_over_seeds(
                    [(r.get("attack_seconds") or {}).get(name) for r, _ in pairs]
                )[0]
                row["attacks"][name]["why_not_valid"] = next(
                    (audit_validity(r, res)[1] for r, res in pairs if not audit_validity(r, res)[0]), ""
                )
                row["attacks"][name]["coverage"] = _coverage_reason(pairs[0][1])
        # the one headline AUC of this model, everywhere it is shown (its verdict card, this row)
        row["headline_attack"] = _headline_attack(
            headline_pool(row["attacks"], privacy.get("unit") is not None and privacy.get("epsilon") is not None)
        )
        row["strongest_attack"] = _headline_attack(row["attacks"])
        row["non_private"] = privacy.get("unit") is None or privacy.get("epsilon") is None
        bounded = {n: a for n, a in row["attacks"].items() if n not in DIAGNOSTIC_ATTACKS}
        valid_names = [n for n, a in bounded.items() if a["valid_audit"]]
        row["audit_validity"] = {
            "valid": bool(valid_names),
            "valid_attacks": valid_names,
            "why": "membership decided by a fair coin per class-stratified pair on a random split"
            if valid_names
            else next(
                (a.get("why_not_valid") for a in bounded.values() if a.get("why_not_valid")), "no bounded attack"
            ),
        }
        rows.append(row)
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
    ceiling); None when no covered result is a valid audit (:func:`audit_validity`)."""
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
            curves.append(
                {
                    "defense": defense,
                    "epsilon": rec.get("epsilon"),
                    "seed": rec["seed"],
                    "auc": res["auc"],
                    "fpr": list(res["roc"]["fpr"]),
                    "tpr": list(res["roc"]["tpr"]),
                }
            )
    return curves


def _lower_bounds(done: list[dict]) -> tuple[list[dict], dict]:
    """Every (cell, attack) ε lower bound next to the claimed (accounted) ε, and the multiple-
    testing correction of the "broken" verdict.

    A guarantee is *broken* only when the attack covers the guarantee's unit, is a valid audit
    (:func:`audit_validity`) and its bound, recomputed at confidence 1 − 0.05/M (Bonferroni over
    the M (cell, attack) pairs that are tested: private, covered, valid, with a bound), still
    exceeds the claim — so the family of verdicts holds at 95 %, not each one (the maximum over
    seeds and attacks at 95 % each would flag sound models by chance). Bounds from invalid games
    are not compared with the claim (their results carry no ``epsilon_lower_bound``)."""
    points = []
    for rec in done:
        privacy = rec.get("privacy") or {}
        claimed = privacy.get("epsilon")
        for name, res in rec.get("attacks", {}).items():
            bound = res.get("epsilon_lower_bound")
            if bound is None:
                continue
            covered = bool(res.get("covered_by_guarantee"))
            valid, caveat = audit_validity(rec, res)
            points.append(
                {
                    "defense": rec["defense"],
                    "epsilon_target": rec.get("epsilon"),
                    "seed": rec["seed"],
                    "attack": name,
                    "claimed_epsilon": claimed,
                    "claimed_delta": privacy.get("delta"),
                    "epsilon_lower_bound": bound,
                    "lower_bound_delta": res.get("epsilon_lower_bound_delta"),
                    "covered": covered,
                    "sound": bool(privacy.get("sound", True)),
                    # a user's or a paper's unproven ε: a bound above it refutes a claim, breaks no guarantee
                    "hypothesis": claim_status(privacy) in HYPOTHESES,
                    "valid_audit": valid,
                    "caveat": caveat,
                    "exceeds_claim": bool(claimed is not None and covered and bound > claimed * (1 + 1e-9)),
                    "_result": res,
                }
            )
    tested = [p for p in points if p["valid_audit"] and p["covered"] and p["claimed_epsilon"] is not None]
    m = len(tested)
    for p in points:
        res = p.pop("_result")
        corrected = _bonferroni_bound(res, m) if p in tested else None
        p["epsilon_lower_bound_bonferroni"] = corrected
        p["broken"] = bool(p in tested and corrected is not None and corrected > p["claimed_epsilon"] * (1 + 1e-9))
    correction = {
        "tests": m,
        "family_confidence": FAMILY_CONFIDENCE,
        "per_test_confidence": 1.0 - (1.0 - FAMILY_CONFIDENCE) / max(1, m),
        "method": "Bonferroni over the (cell, attack) pairs with a valid, covered ε lower bound of a private model: "
        "a guarantee is broken when its bound at confidence 1 − 0.05/M exceeds the claim",
    }
    return points, correction


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
    return [{"defense": r["defense"], "epsilon_target": r.get("epsilon"), "epsilon_label": epsilon_label(r.get("epsilon")),
             "seed": r["seed"], **r["query_api"]}
            for r in done if r.get("query_api") and r.get("epsilon") is not None]  # fmt: skip


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
                # GAP: releases on query graphs; those over the training graph charged to it (epsilon_total)
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
    rows = _summary_rows(done, attacks, defenses)
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
        {"cell_id": r.get("cell_id"), "defense": r["defense"], "epsilon": r.get("epsilon"), "seed": r["seed"],
         "attack": name, "error": msg}
        for r in done
        for name, msg in (r.get("attack_errors") or {}).items()
    ]  # fmt: skip
    failures = [
        {"cell_id": r.get("cell_id"), "defense": r["defense"], "epsilon": r.get("epsilon"), "seed": r["seed"],
         "error": (r.get("error") or {}).get("message", "unknown error"),
         "error_type": (r.get("error") or {}).get("type")}
        for r in failed
    ]  # fmt: skip
    dataset = dict(meta.get("dataset") or {})
    if not dataset and done:
        dataset = dict(done[0].get("dataset") or {})
    lower, correction = _lower_bounds(done)
    first = {}
    for rec in done:
        first.setdefault((rec["defense"], rec.get("epsilon")), rec)
    verdicts = [_verdict(row, first[(row["defense"], row["epsilon"])], lower, correction) for row in rows]
    overall = overall_verdict(verdicts)
    kind = meta.get("kind", "compare")
    risk = [{"defense": r["defense"], "epsilon": r.get("epsilon"), "seed": r["seed"], **_node_risk(r["node_risk"])}
            for r in done if r.get("node_risk")]  # fmt: skip
    interrupted = [{"defense": r["defense"], "skipped": r.get("skipped_attacks") or []} for r in done
                   if r.get("interrupted")]  # fmt: skip
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
        "roc": [{"attack": a, "curves": _roc_strongest(done, a, defenses)} for a in attacks],
        "embeddings": _embeddings(done, defenses, epsilons),
        "lower_bounds": lower,
        "multiple_testing": correction,
        "risk_slices": _risk_slices(done, defenses),
        "canaries": canary_points(done),
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
        },  # fmt: skip
    }


def _node_risk(risk: dict) -> dict:
    """A record's nodes-at-risk view with its FPR level named (``fpr_level``, ``threshold_at_fpr``,
    per bucket ``tpr_at_fpr``); a record written before the 1 % level keeps its 10 % numbers,
    labelled as such."""
    risk = dict(risk)
    if "threshold_at_fpr" not in risk and "threshold_10pct_fpr" in risk:
        risk["fpr_level"] = 0.1
        risk["threshold_at_fpr"] = risk.pop("threshold_10pct_fpr")
        risk["by_degree"] = [{**{k: v for k, v in b.items() if k != "tpr_at_10pct_fpr"},
                              "tpr_at_fpr": b.get("tpr_at_10pct_fpr")} for b in risk.get("by_degree") or []]  # fmt: skip
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
                    "max_possible": _certified_max_possible(res.get("max_possible")),
                    "can_refute_claim": res.get("can_refute_claim"),
                }
            )
    return points


def _certified_max_possible(max_possible) -> float | None:
    """The largest ε a canary audit's certified estimators could show with every guess right
    (``max_possible`` per estimator, :func:`dpaudit.auditing.estimators.audit_epsilon`)."""
    if not isinstance(max_possible, dict):
        return float(max_possible) if _is_number(max_possible) else None
    from dpaudit.auditing.estimators import RIGOROUS_ESTIMATORS

    values = [v for k, v in max_possible.items() if k in RIGOROUS_ESTIMATORS and _is_number(v)]
    return float(max(values)) if values else None
