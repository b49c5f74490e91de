"""Result records shared by attacks (which produce them) and reports (which render them).

An :class:`AttackResult` is plain data: every number a report shows comes from one, and it
round-trips through JSON (``to_dict`` / ``from_dict``) so studies can be re-rendered
without recomputation.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dpaudit.runtime import atomic_write_json

#: the canary audit's JSON record (``dpaudit canary``, :func:`dpaudit.app.workflows.canary.canary_audit`
#: and its gradient form): schema name and version
CANARY_SCHEMA = "dpaudit.canary-audit"
CANARY_SCHEMA_VERSION = 1
#: a canary audit's verdict when only the GDP estimate (not a certified bound) exceeds the claim
ESTIMATE_VERDICT = "likely broken (GDP estimate above the claim; not certified)"
#: the verdict on a hypothesis (a user's or a paper's unproven claim, a fit function's) that a valid
#: certified lower bound exceeds; a proven guarantee's is "guarantee broken"
CLAIM_REFUTED = "claim refuted"
#: the verdict when the one-run hypothesis test rejects the claim's own mechanism (SGM(σ, q, T) at the
#: clipping bound, :func:`dpaudit.auditing.hypothesis.sgm_hypothesis_test`) while no certified bound valid
#: for any mechanism exceeds the claim; "…" stands for the test's p-value (:func:`mechanism_refuted`)
MECHANISM_REFUTED = "claim refuted (the claim's mechanism rejected, p = …)"
CANARY_VERDICTS = (
    "guarantee broken",
    CLAIM_REFUTED,
    MECHANISM_REFUTED,
    ESTIMATE_VERDICT,
    "consistent with the claim",
    "not applicable",
)
#: the verdicts one attack's result can give on its own (:attr:`AttackResult.verdict`): a valid bound
#: above the guarantee the attack is covered by, at or under it, or no comparison at all
ATTACK_VERDICTS = ("guarantee broken", CLAIM_REFUTED, "consistent with the claim", "not applicable")
#: the verdicts that say a certified bound exceeds what the spec states
REFUTING_VERDICTS = ("guarantee broken", CLAIM_REFUTED)

#: the note a canary audit carries when even a perfect attack could not certify more than the claim
NO_POWER_NOTE = (
    "even a perfect attack could not certify more than the claim with this many canaries and runs: "
    "ask for more canaries before reading 'consistent with the claim' as evidence"
)


def mechanism_refuted(p_value: float) -> str:
    """:data:`MECHANISM_REFUTED` with the test's p-value in place of "…".

    Args:
        p_value: the hypothesis test's p-value.

    Returns:
        The verdict string.
    """
    return MECHANISM_REFUTED.replace("…", f"{float(p_value):.2g}")


def verdict_form(verdict: str | None) -> str | None:
    """The entry of :data:`CANARY_VERDICTS` a verdict string is an instance of (the p-value of a
    :data:`MECHANISM_REFUTED` verdict replaced by "…"; any other verdict unchanged).

    Args:
        verdict: a verdict string, or ``None``.

    Returns:
        Its form.
    """
    prefix = MECHANISM_REFUTED.split("…")[0]
    if isinstance(verdict, str) and verdict.startswith(prefix) and verdict.endswith(")"):
        return MECHANISM_REFUTED
    return verdict


def canary_verdict(
    audit: dict[str, Any], *, hypothesis: bool, valid: bool = True, mechanism_test: dict[str, Any] | None = None
) -> str:
    """A canary audit's verdict from :func:`dpaudit.auditing.estimators.audit_epsilon`'s output:
    "not applicable" when the game does not test the claim (``valid`` false); a valid certified
    bound above the claim refutes it — :data:`CLAIM_REFUTED` for a hypothesis (a user's or a
    paper's unproven claim), "guarantee broken" for a proven guarantee; else, when the one-run
    test of the claim's own mechanism rejects it, :data:`MECHANISM_REFUTED` with its p-value
    (valid for that mechanism form only, so never "guarantee broken"); :data:`ESTIMATE_VERDICT`
    when only the GDP estimate exceeds it; else "consistent with the claim" (read beside the
    audit's ``max_possible``).

    Args:
        audit: the dict :func:`~dpaudit.auditing.estimators.audit_epsilon` returned.
        hypothesis: the claim is unproven.
        valid: the game tests the claim.
        mechanism_test: the hypothesis test's ``to_dict()``
            (:class:`dpaudit.auditing.hypothesis.HypothesisTest`: ``refuted``, ``p_value``), or ``None``.

    Returns:
        The verdict string.
    """
    if not valid:
        return "not applicable"
    if audit.get("claim_refuted"):
        return CLAIM_REFUTED if hypothesis else "guarantee broken"
    if mechanism_test is not None and mechanism_test.get("refuted"):
        return mechanism_refuted(mechanism_test["p_value"])
    if audit.get("estimate_exceeds_claim"):
        return ESTIMATE_VERDICT
    return "consistent with the claim"


FPR_LEVELS = ("0.1", "0.01", "0.001")


class CanaryAuditRecord(dict):
    """A canary audit's JSON record (:data:`CANARY_SCHEMA`) as a ``dict`` — the keys ``dpaudit
    canary`` writes — with its headline numbers as attributes and :meth:`to_json` (non-finite
    floats written as ``null``).

    Attributes:
        certified_epsilon_lower_bound: the certified ε lower bound (property over the dict key).
        max_possible: the most any attack could certify (property).
        verdict: the audit's verdict (property).
        bound_valid: whether the bound may be compared with the claim (property).
    """

    @property
    def certified_epsilon_lower_bound(self) -> float | None:
        return self.get("certified_epsilon_lower_bound")

    @property
    def max_possible(self) -> float | None:
        return self.get("max_possible")

    @property
    def verdict(self) -> str | None:
        return self.get("verdict")

    @property
    def bound_valid(self) -> bool:
        return bool(self.get("bound_valid"))

    def to_json(self, indent: int | None = 2) -> str:
        """Args:
            indent: JSON indentation (``None``: one line).

        Returns:
            The JSON text.
        """
        return json.dumps(_clean(dict(self)), indent=indent)

    def save(self, path: str | Path) -> None:
        """Write the record as JSON, atomically.

        Args:
            path: the file to write.
        """
        atomic_write_json(path, _clean(dict(self)))


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None (JSON has no inf/NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


@dataclass
class AttackResult:
    """Outcome of one attack (aggregated over its repetitions) against one released model.

    Attributes:
        attack: attack name (``mia-tstf``, ``link-steal``, ...).
        auc: mean AUC over runs (scores oriented by design: higher = member / edge).
        auc_ci: (low, high) 95 % interval for the AUC.
        tpr_at_fpr: TPR at FPR 10 %, 1 %, 0.1 % (keys ``"0.1"``, ``"0.01"``, ``"0.001"``).
        advantage: max over thresholds of TPR − FPR.
        epsilon_lower_bound: empirical ε lower bound (one-run pair test on the randomized audit
            game, :func:`dpaudit.auditing.statistics.pair_test_lower_bound`); None when not
            ``bound_valid`` (the number then sits in ``extra["not_a_valid_bound"]``).
        epsilon_lower_bound_delta: the δ used for the lower bound.
        covered_by_guarantee: whether the model's DP guarantee covers this attack's unit.
        ceiling_auc: the AUC no attack can exceed under the guarantee (None when uncovered or
            non-private).
        ceiling: how the ceiling was derived (ε, δ used, group size, μ if GDP, ...).
        roc: {"fpr": [...], "tpr": [...]} of a representative run (down-sampled).
        settings: every setting the attack used (for reproducibility).
        runs: per-run numbers (auc, seed, ...).
        extra: attack-specific numbers (e.g. the AUC of each of 8 distances, probe scores).
        artifacts: name → base64 PNG (e.g. t-SNE / UMAP panels) for inline embedding.
        notes: caveats (surrogate recipe used, inference not private, ...).
        model: summary of the attacked model (method, dataset, ε, δ, unit).
        bound_valid: whether the ε lower bound and the ceiling may be compared with the DP
            guarantee: membership decided at random by a process the defense never saw
            (a ``random:``/``per-class:``/``inductive:`` split and the randomized audit game),
            and an attack on neighbouring inputs.
        bound_validity: why (or why not), in plain words.
        baseline_auc: the model-free baseline: the AUC an attacker gets from the node features
            alone (no query of the model) on exactly the pairs or targets the attack scored, mean
            over the same runs; ``auc − baseline_auc`` is the leakage due to the model. None when
            the attack declares none (and in results saved before the field existed).
        baseline: how the baseline was computed, as the attack declares it.
    """

    attack: str
    auc: float | None
    auc_ci: tuple[float | None, float | None] = (None, None)
    tpr_at_fpr: dict[str, float | None] = field(default_factory=dict)
    advantage: float | None = None
    epsilon_lower_bound: float | None = None
    epsilon_lower_bound_delta: float | None = None
    covered_by_guarantee: bool = False
    ceiling_auc: float | None = None
    ceiling: dict[str, Any] = field(default_factory=dict)
    roc: dict[str, list[float]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    bound_valid: bool = False
    bound_validity: str = ""
    baseline_auc: float | None = None
    baseline: str | None = None

    @property
    def verdict(self) -> str:
        """This attack's verdict on its own (:data:`ATTACK_VERDICTS`): "not applicable" unless the
        bound is valid and the model's guarantee (or claim) covers the attacked unit; a valid ε
        lower bound above the covering ε is "guarantee broken" — :data:`CLAIM_REFUTED` when the
        ε is a hypothesis (a user's or a paper's unproven claim) —, else "consistent with the
        claim". One attack at its own confidence: the model's verdict over all its attacks
        (Bonferroni, power) is :mod:`dpaudit.auditing.verdict`'s."""
        claimed = self.ceiling.get("epsilon") if self.covered_by_guarantee else None
        comparable = self.bound_valid and self.epsilon_lower_bound is not None and claimed is not None
        if not comparable or not math.isfinite(float(claimed)):
            return "not applicable"
        if float(self.epsilon_lower_bound) > float(claimed) * (1 + 1e-9):
            return CLAIM_REFUTED if self.ceiling.get("hypothesis") else "guarantee broken"
        return "consistent with the claim"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every field (non-finite floats as ``None``)."""
        return _clean(asdict(self))

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> AttackResult:
        """Rebuild a result from :meth:`to_dict`'s form (unknown keys ignored).

        Args:
            payload: the dict.

        Returns:
            The result.
        """
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in payload.items() if k in known}
        if "auc_ci" in data and data["auc_ci"] is not None:
            data["auc_ci"] = tuple(data["auc_ci"])
        return cls(**data)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON, atomically.

        Args:
            path: the file to write.
        """
        atomic_write_json(path, self.to_dict())
