"""The audit's conclusion, computed once: one typed :class:`Verdict` per model and a
:class:`StudyVerdict` over a study, from the stored attack results
(:class:`~dpaudit.auditing.results.AttackResult`), the model's claim
(:class:`~dpaudit.accounting.spec.PrivacySpec`) and its canary evidence.

A verdict says:

* **validity** — whether each attack's ε lower bound and ceiling may be held against the claim
  (:class:`Validity`: members decided by a fair coin on a random split, and the attack tests
  neighbouring inputs), and why not;
* **multiple testing** — the Bonferroni correction over every (model, attack) bound that tests a
  claim (:class:`MultipleTesting`, :func:`dpaudit.auditing.intervals.bonferroni_confidence`);
* **power** — the largest ε each attack's audit could certify at its size with every guess right,
  at the confidence a refutation needs (:attr:`AttackSummary.epsilon_lower_bound_power`, computed
  once per attack and pair count; :class:`Power` is the strongest of them), so a card never shows
  two maxima for one audit;
* **the claim's status** — ``broken`` (refuted), ``consistent`` (not refuted by an audit that
  could have refuted it), ``underpowered`` (not refuted, but no audit could have), ``not-auditable``
  (not tested) or ``none`` (no claim).

Cell records (one trained model and its attacks, :mod:`dpaudit.app.workflows.study`) are the
input, as saved: a saved study's verdict is re-derived from its stored results, never stored
apart from them. Every class serialises with ``to_dict`` / ``from_dict`` (JSON), and
``to_dict`` keys are the report's (:mod:`reports.aggregate` renders them and computes nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dpaudit.accounting.spec import HYPOTHESES, PrivacySpec
from dpaudit.auditing.estimators import RIGOROUS_ESTIMATORS
from dpaudit.auditing.intervals import bonferroni_confidence
from dpaudit.auditing.low_fpr import summarize_level
from dpaudit.auditing.results import CLAIM_REFUTED, REFUTING_VERDICTS, AttackResult
from dpaudit.auditing.statistics import (
    HYPOTHESIS_WORDS,
    PAIR_GUESS_FRACTIONS,
    pair_test_from_counts,
    pair_test_max_possible,
)
from dpaudit.release.deployments import DEPLOYMENTS, deployment_entry

#: the confidence of the study's family of verdicts (Bonferroni over its tests)
FAMILY_CONFIDENCE = 0.95
#: the confidence of an interval over seeds
CONFIDENCE = 0.95
#: the FPR level of the headline TPR (a key of ``AttackResult.tpr_at_fpr``)
TPR_KEY = "0.01"
#: relative tolerance of "a bound exceeds the claim" (one tolerance everywhere)
EXCEEDS_TOLERANCE = 1e-9
#: splits whose members were assigned at random (the prefix of a split spec)
RANDOM_SPLITS = ("random", "per-class", "inductive")
#: the words a diagnostic's result carries in ``bound_validity`` (results saved before
#: ``extra["diagnostic"]`` was recorded; the attack's registration declares it: ``attacks.AttackDeclaration``)
DIAGNOSTIC_WORDS = "is a diagnostic"


def is_diagnostic(result: AttackResult | Mapping) -> bool:
    """Whether ``result`` comes from a diagnostic attack (fitted after looking at the target's
    membership: never a test or a bound), as the attack declared it when it ran.

    Args:
        result: one attack result (or its ``to_dict``).

    Returns:
        ``extra["diagnostic"]`` when recorded, else whether its ``bound_validity`` says so.
    """
    if isinstance(result, Mapping):
        extra, validity = result.get("extra") or {}, result.get("bound_validity")
    else:
        extra, validity = result.extra or {}, result.bound_validity
    recorded = extra.get("diagnostic")
    if recorded is not None:
        return bool(recorded)
    return DIAGNOSTIC_WORDS in str(validity or "")


#: the model's statuses (:attr:`Verdict.status`)
STATUSES = ("broken", "consistent", "underpowered", "not-auditable", "none")
EDGE_CAVEAT = (
    "edges and non-edges are different node pairs, not units assigned at random: the attack also measures how "
    "predictable edges are from features (homophily), which DP does not hide; its AUC may exceed the DP ceiling "
    "and its ε lower bound the claim without any guarantee being broken"
)
LEGACY_CAVEAT = (
    "recorded before the randomized audit game: its ε lower bound treats per-node outcomes of one model as "
    "independent trials (membership is fixed-size, not Bernoulli)"
)
#: AUC under this, with its whole interval under 0.5, is clearly below chance
BELOW_CHANCE_AUC = 0.45
#: what each hypothesis is, said after a verdict's headline (a proven guarantee needs nothing)
STATUS_NOTES = {
    "claimed": " The claim is the user's own statement (protocol=claimed): a hypothesis this audit tests, not a "
    "proven bound.",
    "paper": " The claimed ε is the paper's own analysis (protocol=paper): a hypothesis this audit tests, not a "
    "proven bound.",
    "unsound": " The claimed ε leaves a step unaccounted (sound: false): a hypothesis this audit tests, not a proven "
    "bound.",
}
UNIT_COVERS = {
    "node": "one node with its features, label and edges: node membership, and edges through group privacy "
    "(two node changes) as far as inference is private",
    "edge": "one edge's presence: edge inference as far as inference is private; not node membership",
}
#: the audit-game wording of a randomized game (only ever said of one)
FAIR_COIN = "membership decided by a fair coin per class-stratified pair on a random split"


def exceeds(value: float | None, claim: float | None) -> bool:
    """Whether ``value`` exceeds ``claim`` (relative tolerance :data:`EXCEEDS_TOLERANCE`).

    Args:
        value: an ε (a bound, an audit's power); None never exceeds.
        claim: the claimed ε; None is never exceeded.

    Returns:
        ``value > claim · (1 + tolerance)``.
    """
    return value is not None and claim is not None and float(value) > float(claim) * (1 + EXCEEDS_TOLERANCE)


# --------------------------------------------------------------------------- serialisation


class _Record:
    """``to_dict`` (JSON-safe: tuples as lists) and ``from_dict`` for the frozen dataclasses here."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-able data (nested records as dicts, tuples as lists, non-finite as None)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]):
        """Rebuild from :meth:`to_dict` output (unknown keys ignored, missing ones defaulted)."""
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: _typed(hints[k], v) for k, v in payload.items() if k in known})


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _typed(hint: Any, value: Any) -> Any:
    """``value`` (parsed JSON) as ``hint``: nested records, tuples of records, optional records."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, _Record):
        return hint.from_dict(value)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _typed(inner[0], value) if len(inner) == 1 else value
    if origin is tuple:
        item = args[0] if args else Any
        return tuple(_typed(item, v) for v in value)
    if origin is dict and len(args) == 2:
        return {k: _typed(args[1], v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- small statistics


def finite(values: Iterable) -> list[float]:
    """The finite numbers among ``values`` (None, NaN, ±∞ and non-numbers dropped)."""
    return [
        float(v)
        for v in values
        if v is not None and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]


def mean_ci_over_seeds(values) -> tuple[float | None, float | None, float | None]:
    """Mean and 95 % Student-t interval over seeds.

    Args:
        values: one number per seed (non-finite ones dropped).

    Returns:
        ``(mean, low, high)``; the interval is None with fewer than 2 values, all None with none.
    """
    vals = finite(values)
    if not vals:
        return None, None, None
    mean = float(np.mean(vals))
    if len(vals) < 2:
        return mean, None, None
    sem = float(np.std(vals, ddof=1)) / math.sqrt(len(vals))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(vals) - 1)) * sem
    return mean, mean - half, mean + half


def below_chance(auc: float | None, ci_high: float | None) -> bool:
    """Whether an AUC is clearly below chance: under :data:`BELOW_CHANCE_AUC` with its interval
    entirely below 0.5."""
    return bool(auc is not None and auc < BELOW_CHANCE_AUC and ci_high is not None and ci_high < 0.5)


# --------------------------------------------------------------------------- validity


@dataclass(frozen=True)
class Validity(_Record):
    """Whether an attack's AUC and ε lower bound may be held against the model's DP guarantee.

    Attributes:
        valid: members decided at random (a random split and the randomized audit game) and an
            attack on neighbouring inputs.
        why: why not (empty when valid).
    """

    valid: bool
    why: str = ""


def attack_validity(result: AttackResult, split_spec: str | None) -> Validity:
    """Whether ``result`` is a valid audit of its model's claim.

    The DP inequalities (ceiling, lower bound) concern one unit included or not *at random*: they
    apply where members and non-members were assigned at random — node membership on a random
    split, scored on the randomized audit game's pairs. Edge attacks compare edges with other
    pairs (non-edges), which differ in the data itself, and a fixed public split was chosen by
    people; both can exceed the DP bounds on a perfectly private model. A result says so itself
    (``bound_valid``, ``bound_validity``); one written before those fields existed (neither set)
    carries the per-node Clopper–Pearson statistic and is never a valid audit.

    Args:
        result: the attack's result.
        split_spec: the model's split (``random:0.75,0.1,0.15``, ``public``, ...).

    Returns:
        The :class:`Validity`.
    """
    if (result.ceiling or {}).get("attack_unit", "node") == "edge":
        return Validity(False, EDGE_CAVEAT)
    spec = str(split_spec or "")
    if not spec.startswith(RANDOM_SPLITS):
        return Validity(False, f"the split {spec or '(unknown)'!r} did not assign members at random")
    if not result.bound_valid:
        if not result.bound_validity:
            return Validity(False, LEGACY_CAVEAT)
        return Validity(False, str(result.bound_validity))
    return Validity(True, "")


# --------------------------------------------------------------------------- power


@dataclass(frozen=True)
class PairTestDesign(_Record):
    """The size of a result's one-run pair test: what its power depends on.

    Attributes:
        pairs: member/non-member pairs.
        delta: δ of the test.
        group_size: units a member/non-member swap changes (group privacy).
        fractions: the guess grid (fractions of pairs guessed on); None: the default grid.
    """

    pairs: int
    delta: float
    group_size: int = 1
    fractions: tuple[float, ...] | None = None

    @classmethod
    def of(cls, result: AttackResult) -> PairTestDesign | None:
        """The design stored in ``result.extra["lower_bound"]``; None without one (edge attacks,
        diagnostics)."""
        lb = (result.extra or {}).get("lower_bound") or {}
        if not lb.get("pairs"):
            return None
        fractions = tuple(float(c["fraction"]) for c in lb.get("counts") or [] if "fraction" in c)
        return cls(int(lb["pairs"]), float(lb.get("delta") or 0.0), int(lb.get("group_size") or 1), fractions or None)

    def max_epsilon(self, confidence: float) -> float:
        """The largest ε this pair test could certify at ``confidence`` with every guess right
        (:func:`dpaudit.auditing.statistics.pair_test_max_possible`)."""
        fractions = tuple(self.fractions or PAIR_GUESS_FRACTIONS)
        return _pair_power(int(self.pairs), float(self.delta), int(self.group_size), float(confidence), fractions)


@functools.lru_cache(maxsize=4096)
def _pair_power(pairs: int, delta: float, group_size: int, confidence: float, fractions: tuple) -> float:
    return pair_test_max_possible(pairs, delta, group_size, confidence, fractions)


def certified_max_possible(max_possible) -> float | None:
    """The largest ε a canary audit's certified estimators could show with every guess right.

    Args:
        max_possible: ``max_possible`` per estimator
            (:func:`dpaudit.auditing.estimators.audit_epsilon`), or one number.

    Returns:
        The largest certified ceiling; None when there is none.
    """
    if not isinstance(max_possible, Mapping):
        return float(max_possible) if finite([max_possible]) else None
    values = finite(v for k, v in max_possible.items() if k in RIGOROUS_ESTIMATORS)
    return max(values) if values else None


@dataclass(frozen=True)
class Power(_Record):
    """The strongest audit that tests a claim: the largest ε it could certify, every guess right.

    Attributes:
        attack: the attack (or canary audit) whose power this is.
        max_epsilon: the largest ε it could certify at ``confidence``.
        pairs: its member/non-member pairs (canaries, for a canary audit).
        delta: its δ.
        group_size: its group size.
        confidence: the confidence a refutation needs (after Bonferroni over ``tests``).
        tests: the tests of the study's Bonferroni family.
        enough: ``max_epsilon`` exceeds the claim: this audit could have refuted it.
        canary: a canary audit's power (not an attack's).
    """

    attack: str
    max_epsilon: float | None
    pairs: int | None
    delta: float | None
    group_size: int
    confidence: float
    tests: int = 1
    enough: bool = False
    canary: bool = False


# --------------------------------------------------------------------------- one attack over seeds


@dataclass(frozen=True)
class AttackSummary(_Record):
    """One attack against one model, over the model's seeds: what its verdict reads.

    ``epsilon_lower_bound_power`` is the one "max possible" of this attack: its largest pair test
    over seeds, at the study's refutation confidence (:attr:`MultipleTesting.per_test_confidence`).
    """

    attack: str
    auc: float | None
    auc_ci: tuple[float | None, float | None]
    auc_interval: str
    auc_per_seed: tuple[float | None, ...]
    tpr_at_1pct_fpr: float | None
    tpr_at_1pct_fpr_over_runs: dict[str, Any]
    epsilon_lower_bound_max: float | None
    epsilon_lower_bound_delta: float | None
    covered_by_guarantee: bool
    ceiling_auc: float | None
    valid_audit: bool
    why_not_valid: str
    coverage: str
    design: PairTestDesign | None
    epsilon_lower_bound_power: float | None
    power_confidence: float
    below_chance: bool
    n: int
    #: the game was randomized (a fair coin per pair) — the only game "fair coin" may be said of
    randomized: bool = False
    #: the attack is a diagnostic (declared at registration): never a test or a bound
    diagnostic: bool = False

    @property
    def validity(self) -> Validity:
        return Validity(self.valid_audit, self.why_not_valid)


def tpr_over_runs(results: list[AttackResult]) -> dict[str, Any]:
    """TPR at 1 % FPR over every run of ``results`` (each seed's ``runs``; a result written
    without them counts as one run of unknown negatives):
    :func:`dpaudit.auditing.low_fpr.summarize_level`."""
    runs = [run for r in results for run in (r.runs or [{"tpr_at_fpr": r.tpr_at_fpr}])]
    tprs = [(run.get("tpr_at_fpr") or {}).get(TPR_KEY) for run in runs]
    return summarize_level(tprs, [run.get("non_members") for run in runs], float(TPR_KEY))


def summarise_attack(name: str, pairs: list[tuple[str | None, AttackResult]], confidence: float) -> AttackSummary:
    """One attack's results over the seeds of one model.

    Args:
        name: the attack.
        pairs: ``(split spec, result)`` per seed.
        confidence: the refutation confidence its power is computed at.

    Returns:
        The :class:`AttackSummary`.
    """
    results = [r for _, r in pairs]
    validities = [attack_validity(r, spec) for spec, r in pairs]
    aucs = [r.auc for r in results]
    mean, lo, hi = mean_ci_over_seeds(aucs)
    interval = "t over seeds"
    if len(finite(aucs)) == 1:
        ci = results[0].auc_ci or (None, None)
        lo, hi = ci[0], ci[1]
        interval = "attack's own interval"
    bounds = finite(r.epsilon_lower_bound for r in results)
    ceilings = finite(r.ceiling_auc for r in results)
    designs = [d for d in (PairTestDesign.of(r) for r in results) if d]
    design = max(designs, key=lambda d: d.pairs) if designs else None
    valid = all(v.valid for v in validities)
    return AttackSummary(
        attack=name,
        auc=mean,
        auc_ci=(lo, hi),
        auc_interval=interval,
        auc_per_seed=tuple(aucs),
        tpr_at_1pct_fpr=mean_ci_over_seeds([(r.tpr_at_fpr or {}).get(TPR_KEY) for r in results])[0],
        tpr_at_1pct_fpr_over_runs=tpr_over_runs(results),
        epsilon_lower_bound_max=max(bounds) if bounds else None,
        epsilon_lower_bound_delta=next((r.epsilon_lower_bound_delta for r in results), None),
        covered_by_guarantee=any(bool(r.covered_by_guarantee) for r in results),
        ceiling_auc=max(ceilings) if ceilings else None,
        valid_audit=valid,
        why_not_valid=next((v.why for v in validities if not v.valid), ""),
        coverage=str((results[0].ceiling or {}).get("reason") or ""),
        design=design,
        epsilon_lower_bound_power=design.max_epsilon(confidence) if design else None,
        power_confidence=float(confidence),
        below_chance=below_chance(mean, hi),
        n=len(results),
        randomized=valid and not any(map(is_diagnostic, results)) and all(r.bound_valid for r in results),
        diagnostic=any(map(is_diagnostic, results)),
    )


# --------------------------------------------------------------------------- multiple testing


@dataclass(frozen=True)
class TestedBound(_Record):
    """One (cell, attack) ε lower bound next to the claimed ε, and whether it refutes the claim.

    Attributes:
        epsilon_lower_bound_bonferroni: the bound recomputed at the family's per-test confidence
            (None for a bound that tests no claim).
        broken: a valid, covered bound above the claim after Bonferroni.
        exceeds_claim: the 95 % bound is above the claim (valid or not).
    """

    __test__ = False  # not a pytest class

    defense: str
    epsilon_target: float | None
    seed: int
    attack: str
    claimed_epsilon: float | None
    claimed_delta: float | None
    epsilon_lower_bound: float
    lower_bound_delta: float | None
    covered: bool
    sound: bool
    hypothesis: bool
    valid_audit: bool
    caveat: str
    exceeds_claim: bool
    epsilon_lower_bound_bonferroni: float | None = None
    broken: bool = False


@dataclass(frozen=True)
class MultipleTesting(_Record):
    """The study's Bonferroni correction over every bound that tests a claim."""

    tests: int
    family_confidence: float = FAMILY_CONFIDENCE
    per_test_confidence: float = FAMILY_CONFIDENCE
    method: str = (
        "Bonferroni over the (cell, attack) pairs with a valid, covered ε lower bound of a private model: "
        "a guarantee is broken when its bound at confidence 1 − 0.05/M exceeds the claim"
    )


def _bonferroni_bound(result: AttackResult, tests: int) -> float | None:
    """The result's one-run ε lower bound at confidence 1 − 0.05/``tests`` from its stored
    pair-test counts; None without counts (only a single test may then use its own 95 % value)."""
    lb = (result.extra or {}).get("lower_bound") or {}
    counts, pairs = lb.get("counts"), lb.get("pairs")
    if not counts or not pairs:
        return result.epsilon_lower_bound if tests <= 1 else None
    return pair_test_from_counts(
        counts,
        int(pairs),
        float(lb.get("delta") or 0.0),
        int(lb.get("group_size") or 1),
        bonferroni_confidence(FAMILY_CONFIDENCE, tests),
    )["epsilon"]


# --------------------------------------------------------------------------- the verdict of one model


@dataclass(frozen=True)
class Claim(_Record):
    """The claim a verdict tests: the model's (ε, δ) at its unit.

    ``composed_epsilon`` (training ε composed with the query releases charged to the training
    data) and ``seeded_noise`` (the noise was drawn from a replayable seed: not a release) are
    carried for the card when the model's spec states them.
    """

    epsilon: float | None
    delta: float | None
    unit: str | None
    unit_label: str | None
    target_epsilon: float | None
    accountant: str | None
    composed_epsilon: float | None = None
    seeded_noise: bool = False


@dataclass(frozen=True)
class AucEntry(_Record):
    attack: str
    auc: float | None
    auc_ci: tuple[float | None, float | None]
    below_chance: bool = False
    why: str | None = None
    covered: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        return {k: v for k, v in out.items() if k not in ("why", "covered") or v is not None}


@dataclass(frozen=True)
class TprEntry(_Record):
    attack: str
    tpr: float | None
    over_runs: dict[str, Any] | None


@dataclass(frozen=True)
class LowerBound(_Record):
    """The largest ε lower bound measured on a model (a valid, covered one first)."""

    attack: str
    value: float
    delta: float | None
    valid: bool
    why: str
    #: the same attack's :attr:`AttackSummary.epsilon_lower_bound_power` (one field, never recomputed)
    max_possible: float | None


@dataclass(frozen=True)
class AuditGame(_Record):
    """The audit game of a model's headline attack: ``valid`` ("fair coin") only for a
    randomized game."""

    attack: str | None
    valid: bool
    why: str
    valid_attacks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Deployment(_Record):
    """What a model's answers in one deployment are covered by (:mod:`dpaudit.release.deployments`).

    Attributes:
        covered: whether the answers are covered by the guarantee.
        note: why, in words.
        feature_change: what a querier-chosen feature change over the private graph costs there.
        covered_for: where ``covered`` is false, the narrower audience the answers are covered for
            (GCON's Eq. 16: each node receiving only its own answer), or ``None``.
    """

    covered: bool
    note: str
    feature_change: str | None = None
    covered_for: str | None = None


@dataclass(frozen=True)
class Verdict(_Record):
    """The verdict on one model (one defense at one target ε, over its seeds).

    Every number its card shows is one field here: ``power.max_epsilon`` is the attack's
    ``epsilon_lower_bound_power`` and ``lower_bound.max_possible`` the same attack's, so one
    audit never shows two maxima. ``status`` is one of :data:`STATUSES`.
    """

    defense: str
    epsilon: float | None
    epsilon_label: str
    status: str
    headline: str
    claimed: Claim
    attacks: dict[str, AttackSummary]
    best_auc: AucEntry | None
    best_tpr_at_1pct_fpr: TprEntry | None
    strongest_uncovered: AucEntry | None
    strongest_leakage: AucEntry | None
    headline_attack: str | None
    strongest_attack: str | None
    audit_game: AuditGame
    power: Power | None
    below_chance: tuple[str, ...]
    lower_bound: LowerBound | None
    bound_validity: str | None
    multiple_testing: dict[str, Any]
    covers: str | None
    covered_attacks: tuple[str, ...]
    uncovered_attacks: dict[str, str]
    inference_private: bool | None
    inference_note: str | None
    deployments: dict[str, Deployment] | None
    audited_deployments: tuple[str, ...]
    sound: bool
    protocol: str | None
    claim_status: str
    hypothesis: bool
    claim_words: str | None
    canaries: tuple[dict[str, Any], ...]
    unaccounted: tuple[str, ...]
    seeds: tuple[int, ...]
    test_accuracy: float | None

    @property
    def refuted(self) -> bool:
        """A valid audit refutes the claim."""
        return self.status == "broken"

    @property
    def canary_status(self) -> str:
        """The status in the canary audits' words (:data:`dpaudit.auditing.results.CANARY_VERDICTS`)."""
        if self.status == "broken":
            return CLAIM_REFUTED if self.hypothesis else "guarantee broken"
        if self.status in ("consistent", "underpowered"):
            return "consistent with the claim"
        return "not applicable"


@dataclass(frozen=True)
class Overall(_Record):
    status: str
    action: str
    counts: dict[str, int]
    summary: str
    strongest_leakage: dict[str, Any] | None
    largest_certifiable: float | None


@dataclass(frozen=True)
class StudyVerdict(_Record):
    """Every model's verdict, the bounds tested and their correction, and the overall line."""

    models: tuple[Verdict, ...]
    bounds: tuple[TestedBound, ...]
    multiple_testing: MultipleTesting
    overall: Overall

    def model(self, defense: str, epsilon: float | None) -> Verdict:
        """The verdict of ``defense`` at target ``epsilon``."""
        for v in self.models:
            if v.defense == defense and v.epsilon == epsilon:
                return v
        raise KeyError((defense, epsilon))


# --------------------------------------------------------------------------- computing it


def epsilon_label(epsilon: float | None) -> str:
    """ε as printed (``∞`` for None or infinite)."""
    if epsilon is None or not math.isfinite(epsilon):
        return "∞"
    return f"{epsilon:g}"


def epsilon_key(epsilon: float | None) -> float:
    """Sort key: ε = ∞ (stored as None) last."""
    return math.inf if epsilon is None else float(epsilon)


def unit_label(privacy: Mapping) -> str | None:
    """The unit as printed, with its restriction when the guarantee has one."""
    unit, condition = privacy.get("unit"), privacy.get("unit_condition")
    return unit if unit is None or not condition else f"{unit} ({condition})"


def claim_status(privacy: Mapping | None) -> str:
    """A record's :attr:`~dpaudit.accounting.spec.PrivacySpec.status` (proven, claimed, paper, ...)."""
    if not privacy or privacy.get("epsilon") is None:
        return "none"
    return PrivacySpec.from_dict(dict(privacy)).status


def _split_spec(record: Mapping) -> str | None:
    return (record.get("split") or {}).get("spec")


def _results(record: Mapping) -> dict[str, AttackResult]:
    return {name: AttackResult.from_dict(res) for name, res in (record.get("attacks") or {}).items()}


def headline_attack(attacks: Mapping[str, AttackSummary]) -> str | None:
    """The strongest of ``attacks``: the highest AUC (ties: first), never a diagnostic."""
    best = None
    for name, s in attacks.items():
        if s.diagnostic or s.auc is None:
            continue
        if best is None or s.auc > attacks[best].auc:
            best = name
    return best


def headline_pool(attacks: Mapping[str, AttackSummary], private: bool) -> dict[str, AttackSummary]:
    """The attacks that may headline a model: for a private model only those its guarantee
    covers; for a model without a guarantee, every attack."""
    return {n: s for n, s in attacks.items() if s.covered_by_guarantee} if private else dict(attacks)


def _auc_entry(attacks: Mapping[str, AttackSummary], name: str | None, **more) -> AucEntry | None:
    if not name:
        return None
    s = attacks[name]
    return AucEntry(name, s.auc, s.auc_ci, bool(s.below_chance), **more)


def tested_bounds(records: list[Mapping]) -> tuple[tuple[TestedBound, ...], MultipleTesting]:
    """Every (cell, attack) ε lower bound next to the claimed ε, with the study's correction.

    A guarantee is *broken* only when the attack covers the guarantee's unit, is a valid audit
    and its bound, recomputed at confidence 1 − 0.05/M (Bonferroni over the M tested pairs:
    private, covered, valid, with a bound), still exceeds the claim.

    Args:
        records: the study's finished cell records.

    Returns:
        ``(bounds, correction)``.
    """
    raw = []
    for rec in records:
        privacy = rec.get("privacy") or {}
        claimed = privacy.get("epsilon")
        for name, res in _results(rec).items():
            if res.epsilon_lower_bound is None:
                continue
            covered = bool(res.covered_by_guarantee)
            validity = attack_validity(res, _split_spec(rec))
            raw.append((rec, name, res, claimed, covered, validity))
    tested = [t for t in raw if t[5].valid and t[4] and t[3] is not None]
    m = len(tested)
    bounds = []
    for entry in raw:
        rec, name, res, claimed, covered, validity = entry
        privacy = rec.get("privacy") or {}
        corrected = _bonferroni_bound(res, m) if entry in tested else None
        bounds.append(
            TestedBound(
                defense=rec["defense"],
                epsilon_target=rec.get("epsilon"),
                seed=int(rec.get("seed") or 0),
                attack=name,
                claimed_epsilon=claimed,
                claimed_delta=privacy.get("delta"),
                epsilon_lower_bound=float(res.epsilon_lower_bound),
                lower_bound_delta=res.epsilon_lower_bound_delta,
                covered=covered,
                sound=bool(privacy.get("sound", True)),
                hypothesis=claim_status(privacy) in HYPOTHESES,
                valid_audit=validity.valid,
                caveat=validity.why,
                exceeds_claim=bool(covered and exceeds(res.epsilon_lower_bound, claimed)),
                epsilon_lower_bound_bonferroni=corrected,
                broken=bool(entry in tested and exceeds(corrected, claimed)),
            )
        )
    return tuple(bounds), MultipleTesting(m, FAMILY_CONFIDENCE, bonferroni_confidence(FAMILY_CONFIDENCE, m))


def model_groups(records: list[Mapping]) -> OrderedDict:
    """Finished records grouped by (defense, target ε), each group sorted by seed."""
    groups: OrderedDict = OrderedDict()
    for rec in sorted(records, key=lambda r: (epsilon_key(r.get("epsilon")), r.get("seed") or 0)):
        groups.setdefault((rec["defense"], rec.get("epsilon")), []).append(rec)
    return groups


def _composed_epsilon(records: list[Mapping], privacy: Mapping) -> float | None:
    """The training ε composed with the releases charged to the training data (answers over the
    training graph: issue 46), when any attack's run charged some: the largest total its results
    record (``model.epsilon_total``), else the spec's own ``composed_epsilon``; ``None`` when
    nothing was charged beyond the training ε."""
    totals = finite(
        (res.get("model") or {}).get("epsilon_total")
        for r in records
        for res in (r.get("attacks") or {}).values()
        if (res.get("model") or {}).get("charged_releases")
    )
    composed = max(totals) if totals else privacy.get("composed_epsilon")
    return composed if composed is not None and composed != privacy.get("epsilon") else None


def _seeded_noise(records: list[Mapping], privacy: Mapping) -> bool:
    """Whether any seed's model drew its privacy noise from a replayable seed (its card's
    ``noise`` is ``"seeded"``: research or tests, not a release; :mod:`dpaudit.training.noise`)."""
    cards = [r.get("card") or {} for r in records]
    return bool(privacy.get("seeded_noise", False)) or any(c.get("noise") == "seeded" for c in cards)


def model_verdict(
    records: list[Mapping],
    attacks: list[str] | None = None,
    bounds: tuple[TestedBound, ...] = (),
    correction: MultipleTesting | None = None,
) -> Verdict:
    """The verdict on one model from its cell records (one per seed).

    Args:
        records: the model's finished cell records (same defense and target ε).
        attacks: the attacks to weigh (default: every attack recorded); weighed in name order.
        bounds: the study's tested bounds (:func:`tested_bounds`); computed from ``records``
            when omitted.
        correction: the study's correction (with ``bounds``).

    Returns:
        The :class:`Verdict`.
    """
    if correction is None:
        bounds, correction = tested_bounds(records)
    tests = max(1, correction.tests)
    confidence = correction.per_test_confidence if correction.tests else FAMILY_CONFIDENCE
    rec = records[0]
    privacy = rec.get("privacy") or {}
    # one order whoever asks (the report, AuditResult.verdict): ties between attacks resolve the same
    names = sorted({n for r in records for n in r.get("attacks") or {}} if attacks is None else set(attacks))
    summaries: dict[str, AttackSummary] = {}
    for name in names:
        pairs = [
            (_split_spec(r), AttackResult.from_dict(r["attacks"][name]))
            for r in records
            if name in (r.get("attacks") or {})
        ]
        if pairs:
            summaries[name] = summarise_attack(name, pairs, confidence)
    unit = privacy.get("unit")
    claimed_eps = privacy.get("epsilon")
    private = unit is not None and claimed_eps is not None
    status_of_claim = claim_status(privacy)
    hypothesis = private and status_of_claim in HYPOTHESES
    sound = all(bool((r.get("privacy") or {}).get("sound", True)) for r in records)
    protocol = privacy.get("protocol")
    if not sound and protocol == "sound":
        protocol = None  # a spec that is not sound is never labelled protocol=sound
    canaries = tuple(
        dict(e, name=k)
        for k, e in (rec.get("canaries") or {}).items()
        if isinstance(e, Mapping) and e.get("claim_status")
    )
    pool = headline_pool(summaries, private)
    headline = headline_attack(pool)
    strongest = headline_attack(summaries)
    leakage = _leakage(summaries, pool, private, headline, strongest)
    lower = _strongest_lower_bound(summaries, private, hypothesis)
    power = _refutation_power(summaries, private, claimed_eps, tests)
    if not private:
        status, text = "none", "No privacy guarantee: the numbers below are the leakage of an unprotected model."
    elif (refuted := _refuted_headline(rec, bounds, correction, canaries, claimed_eps, hypothesis)) is not None:
        status, text = "broken", refuted
    else:
        status, text, power = _unrefuted_verdict(claimed_eps, hypothesis, lower, power, canaries, tests)
    if private and not sound:
        text += STATUS_NOTES.get(status_of_claim, " The claimed ε itself is not a sound bound.")
    invalid = [s.why_not_valid for s in summaries.values() if not s.valid_audit and s.why_not_valid]
    inference = (rec.get("card") or {}).get("inference") or {}
    accs = [(r.get("metrics") or {}).get("test_accuracy") for r in records]
    game = summaries.get(headline) if headline else None
    bounded = [n for n, s in summaries.items() if not s.diagnostic and s.randomized]
    audit_game = AuditGame(
        attack=headline,
        valid=bool(game and game.randomized),
        why=FAIR_COIN
        if game and game.randomized
        else (game.why_not_valid if game else "no bounded attack") or "the attack's game was not randomized",
        valid_attacks=tuple(bounded),
    )
    return Verdict(
        defense=rec["defense"],
        epsilon=rec.get("epsilon"),
        epsilon_label=epsilon_label(rec.get("epsilon")),
        status=status,
        headline=text,
        claimed=Claim(
            epsilon=claimed_eps,
            delta=privacy.get("delta"),
            unit=unit,
            unit_label=unit_label(privacy),
            target_epsilon=rec.get("epsilon"),
            accountant=privacy.get("accountant"),
            composed_epsilon=_composed_epsilon(records, privacy),
            seeded_noise=_seeded_noise(records, privacy),
        ),
        attacks=summaries,
        headline_attack=headline,
        strongest_attack=strongest,
        audit_game=audit_game,
        power=power,
        below_chance=tuple(n for n, s in summaries.items() if s.below_chance),
        lower_bound=lower,
        bound_validity=invalid[0] if invalid and not (lower and lower.valid) else None,
        multiple_testing={"tests": correction.tests},
        covers=UNIT_COVERS.get(unit or "", None),
        covered_attacks=tuple(n for n, s in summaries.items() if s.covered_by_guarantee),
        uncovered_attacks={n: s.coverage for n, s in summaries.items() if not s.covered_by_guarantee},
        inference_private=inference.get("private"),
        inference_note=inference.get("note"),
        deployments={d: Deployment(**deployment_entry(inference, d, private)) for d in DEPLOYMENTS}
        if private
        else None,
        audited_deployments=tuple(
            sorted(
                {
                    str((res.get("extra") or {}).get("deployment"))
                    for res in (rec.get("attacks") or {}).values()
                    if isinstance(res, Mapping) and (res.get("extra") or {}).get("deployment")
                }
            )
        ),
        sound=sound,
        protocol=protocol,
        claim_status=status_of_claim,
        hypothesis=hypothesis,
        claim_words=HYPOTHESIS_WORDS.get(status_of_claim) if hypothesis else None,
        canaries=canaries,
        unaccounted=tuple(
            OrderedDict.fromkeys(u for r in records for u in ((r.get("privacy") or {}).get("unaccounted") or []))
        ),
        seeds=tuple(int(r.get("seed") or 0) for r in records),
        test_accuracy=mean_ci_over_seeds(accs)[0],
        **leakage,
    )


def _leakage(summaries, pool, private, headline, strongest) -> dict[str, Any]:
    uncovered_pool = {n: s for n, s in summaries.items() if not s.covered_by_guarantee} if private else {}
    best_uncovered = headline_attack(uncovered_pool)
    tprs = {n: s.tpr_at_1pct_fpr for n, s in pool.items() if s.tpr_at_1pct_fpr is not None and not s.diagnostic}
    best_tpr = max(tprs, key=tprs.get) if tprs else None
    return {
        "best_auc": _auc_entry(summaries, headline),
        "best_tpr_at_1pct_fpr": TprEntry(best_tpr, tprs[best_tpr], summaries[best_tpr].tpr_at_1pct_fpr_over_runs)
        if best_tpr
        else None,
        "strongest_uncovered": _auc_entry(
            summaries,
            best_uncovered,
            why=(summaries[best_uncovered].coverage or "the guarantee does not cover this attack's unit")
            if best_uncovered
            else None,
        ),
        "strongest_leakage": _auc_entry(
            summaries, strongest, covered=bool(strongest and summaries[strongest].covered_by_guarantee)
        ),
    }


def _strongest_lower_bound(
    summaries: Mapping[str, AttackSummary], private: bool, hypothesis: bool
) -> LowerBound | None:
    bounds = [(n, s) for n, s in summaries.items() if s.epsilon_lower_bound_max is not None]
    valid = [(n, s) for n, s in bounds if s.valid_audit and s.covered_by_guarantee]
    if not bounds:
        return None
    name, s = max(valid or bounds, key=lambda p: p[1].epsilon_lower_bound_max)
    if not private:
        why = "the model claims no guarantee, so there is nothing to test it against"
    elif not s.covered_by_guarantee:
        why = s.coverage or "the guarantee does not cover this attack's unit"
    elif not s.valid_audit:
        why = s.why_not_valid or "members were not assigned at random"
    elif hypothesis:
        why = "members were assigned at random and the claim speaks to the attack"
    else:
        why = "members were assigned at random and the guarantee covers the attack"
    return LowerBound(
        attack=name,
        value=float(s.epsilon_lower_bound_max),
        delta=s.epsilon_lower_bound_delta,
        valid=bool(s.valid_audit and s.covered_by_guarantee and private),
        why=why,
        max_possible=s.epsilon_lower_bound_power,
    )


def _refutation_power(summaries: Mapping[str, AttackSummary], private: bool, claimed, tests: int) -> Power | None:
    """The strongest valid, covered audit that tests the claim: its
    :attr:`AttackSummary.epsilon_lower_bound_power` (never recomputed)."""
    best = None
    for s in summaries.values():
        if not (private and s.valid_audit and s.covered_by_guarantee and not s.diagnostic):
            continue
        if s.design is None or s.epsilon_lower_bound_power is None:
            continue
        if best is None or s.epsilon_lower_bound_power > best.epsilon_lower_bound_power:
            best = s
    if best is None:
        return None
    d = best.design
    return Power(
        attack=best.attack,
        max_epsilon=best.epsilon_lower_bound_power,
        pairs=d.pairs,
        delta=d.delta,
        group_size=d.group_size,
        confidence=best.power_confidence,
        tests=tests,
        enough=exceeds(best.epsilon_lower_bound_power, claimed),
    )


def _refuted_headline(rec, bounds, correction, canaries, claimed, hypothesis: bool) -> str | None:
    refuted_word = "Claim refuted" if hypothesis else "Guarantee broken"
    broken = [b for b in bounds if b.broken and b.defense == rec["defense"] and b.epsilon_target == rec.get("epsilon")]
    refuting = [e for e in canaries if e.get("verdict") in REFUTING_VERDICTS]
    if broken:
        worst = max(broken, key=lambda b: b.epsilon_lower_bound_bonferroni)
        return (
            f"{refuted_word}: a valid audit ({worst.attack}, seed {worst.seed}) proves "
            f"ε ≥ {worst.epsilon_lower_bound_bonferroni:.2f} at 95 % after Bonferroni over "
            f"{correction.tests} test(s), above the claimed ε = {claimed:.2f}."
        )
    if refuting:
        worst = max(refuting, key=lambda e: e["certified_epsilon_lower_bound"])
        return (
            f"{refuted_word}: a valid canary audit ({worst['name']}: {worst.get('canaries')} canaries, "
            f"recipe {worst.get('recipe')}) certifies ε ≥ {worst['certified_epsilon_lower_bound']:.2f} at "
            f"{100 * worst['confidence']:.3g} % (δ = {worst['delta']:.1e}), above the ε = "
            f"{worst['claimed_epsilon']:.2f} the claim allows at its unit."
        )
    return None


def _unrefuted_verdict(claimed, hypothesis, lb, power, canaries, tests) -> tuple[str, str, Power | None]:
    canary_power = [
        e
        for e in canaries
        if e.get("bound_valid") and e.get("can_refute_claim") and e.get("verdict") not in REFUTING_VERDICTS
    ]
    confidence_words = "95 %" if tests == 1 else f"95 % over {tests} tests (Bonferroni)"
    audited = "testing" if hypothesis else "covered"
    if lb and lb.valid and power is not None and power.enough:
        return (
            "consistent",
            f"Consistent with the claim ε = {claimed:.2f}: no fair, {audited} audit refutes it, and one could have — "
            f"{power.attack} on {power.pairs} member/non-member pairs could certify up to "
            f"ε = {power.max_epsilon:.2f} ({confidence_words}) with every guess right; the strongest "
            f"valid audit proves only ε ≥ {lb.value:.2f} ({lb.attack}).",
            power,
        )
    if canary_power:
        best = max(canary_power, key=lambda e: certified_max_possible(e.get("max_possible")) or 0.0)
        if power is None or not power.enough:
            power = Power(
                attack=best["name"],
                max_epsilon=certified_max_possible(best.get("max_possible")),
                pairs=best.get("canaries"),
                delta=best.get("delta"),
                group_size=1,
                confidence=best["confidence"],
                tests=1,
                enough=True,
                canary=True,
            )
        return (
            "consistent",
            f"Consistent with the claim ε = {claimed:.2f}: no valid audit refutes it, and one could have — "
            f"the {best['name']} audit ({best.get('canaries')} canaries) could certify up to "
            f"ε = {power.max_epsilon:.2f} at {100 * best['confidence']:.3g} % with every guess right; "
            f"it certifies only ε ≥ {best['certified_epsilon_lower_bound']:.2f}.",
            power,
        )
    if lb and lb.valid:
        if power is None:
            size = "its size is not recorded, so its power is unknown"
        else:
            size = (
                f"with {power.pairs} member/non-member pairs (δ = {power.delta:.1e}) even a perfect attack "
                f"could certify at most ε = {power.max_epsilon:.2f} ({confidence_words}), "
                f"{'not above' if power.max_epsilon > 0 else 'far below'} the claim"
            )
        return (
            "underpowered",
            f"Not refuted, but not tested either: no fair, {audited} audit refutes ε = {claimed:.2f}, yet the audit "
            f"was too small to refute it — {size}. Audit a larger graph (more pairs) to test the claim.",
            power,
        )
    text = (
        "Claim not tested: no attack here is a fair audit of this claim, so the leakage below is measured "
        "but cannot be held against it."
        if hypothesis
        else "Claim not tested: no attack here is a fair, covered audit of this guarantee, so the leakage "
        "below is measured but cannot be held against the claim."
    )
    return "not-auditable", text, power


def overall_verdict(verdicts: list[Verdict]) -> Overall:
    """One line for the whole study a reviewer can act on: how many claims are broken,
    consistent with an audit that could have refuted them, not refuted by audits too small to,
    not tested at all, or absent; and the strongest leakage measured anywhere."""
    by = {k: [v for v in verdicts if v.status == k] for k in STATUSES}
    private = len(verdicts) - len(by["none"])

    def names(vs):
        return ", ".join(f"{v.defense} (ε = {v.epsilon_label})" for v in vs)

    if by["broken"]:
        status = "broken"
        action = (
            f"Do not rely on the claimed ε of {names(by['broken'])}: a valid audit refutes "
            f"{'it' if len(by['broken']) == 1 else 'them'}."
        )
        if all(v.hypothesis for v in by["broken"]):
            action += " (A claim, not a proven guarantee, is what is refuted.)"
    elif not private:
        status, action = "none", "No model here claims a privacy guarantee: the report measures leakage only."
    elif len(by["consistent"]) == private:
        status = "consistent"
        action = (
            "No claim is refuted, and every claim was tested by an audit strong enough to refute it "
            "(each card states that audit's certifiable maximum)."
        )
    else:
        status = "untested"
        untested = by["underpowered"] + by["not-auditable"]
        one = len(untested) == 1
        which = "the only claim" if one and private == 1 else f"{len(untested)} of {private} claims"
        action = (
            f"No claim is refuted, but {which} {'was' if one else 'were'} not tested by an audit strong "
            f"enough to refute {'it' if one else 'them'} ({names(untested)}): treat "
            f"{'it' if one else 'those'} as unaudited, not as confirmed."
        )
    refuted = sum(bool(v.hypothesis) for v in by["broken"])
    broken_word = "refuted" if refuted == len(by["broken"]) > 0 else "broken" if not refuted else "broken or refuted"
    parts = [
        f"{len(by['broken'])} {broken_word}",
        f"{len(by['consistent'])} consistent with an audit that could refute them",
        f"{len(by['underpowered'])} not refuted by audits too small to refute them",
        f"{len(by['not-auditable'])} not tested by any valid audit",
        f"{len(by['none'])} without a guarantee",
    ]
    leaks = [(v, v.strongest_leakage) for v in verdicts if v.strongest_leakage]
    leak = None
    if leaks:
        v, s = max(leaks, key=lambda p: p[1].auc if p[1].auc is not None else -1.0)
        coverage = (
            "no guarantee"
            if v.status == "none"
            else "outside its guarantee"
            if not s.covered
            else "tested against its claim"
            if v.hypothesis
            else "covered by its guarantee"
        )
        leak = {
            "defense": v.defense,
            "epsilon_label": v.epsilon_label,
            "attack": s.attack,
            "auc": s.auc,
            "coverage": coverage,
        }
    powers = [v.power.max_epsilon for v in verdicts if v.power and v.power.max_epsilon is not None]
    return Overall(
        status=status,
        action=action,
        counts={k: len(vs) for k, vs in by.items()},
        summary="; ".join(parts),
        strongest_leakage=leak,
        largest_certifiable=max(powers) if powers else None,
    )


def study_verdict(
    records: list[Mapping], attacks: list[str] | None = None, defenses: list[str] | None = None
) -> StudyVerdict:
    """The verdict on every model of a study from its cell records (finished ones only).

    Args:
        records: cell records (:mod:`dpaudit.app.workflows.study`); those whose ``status`` is not
            ``"done"`` are ignored.
        attacks: the attacks to weigh (default: every attack recorded); weighed in name order.
        defenses: the defenses in display order (default: as recorded).

    Returns:
        The :class:`StudyVerdict`, models ordered by defense then target ε.
    """
    done = [r for r in records if r.get("status", "done") == "done"]
    order = list(OrderedDict.fromkeys([*(defenses or []), *(r["defense"] for r in done)]))
    done = sorted(done, key=lambda r: (order.index(r["defense"]), epsilon_key(r.get("epsilon")), r.get("seed") or 0))
    bounds, correction = tested_bounds(done)
    models = tuple(model_verdict(recs, attacks, bounds, correction) for recs in model_groups(done).values())
    models = tuple(sorted(models, key=lambda v: (order.index(v.defense), epsilon_key(v.epsilon))))
    return StudyVerdict(models, bounds, correction, overall_verdict(list(models)))
