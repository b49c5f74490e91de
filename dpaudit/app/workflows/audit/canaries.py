"""Canary evidence in an audit: canary audit results (``dpaudit canary`` JSON, ``canary_audit``
dicts, ``GradientCanaries.result`` records) checked against the audited model's claim before any
work (:func:`check_canary_results`) and re-tested against it (:func:`canary_evidence`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dpaudit.errors import ConfigurationError

#: keys a canary audit's JSON must hold to be weighed against a model's claim
_CANARY_KEYS = ("kind", "unit", "target_epsilon", "dataset", "bound_valid", "certified_epsilon_lower_bound")


def check_canary_results(model, canaries) -> list[dict[str, Any]]:
    """Refuse, before any work and in one line, canary audit results (``dpaudit canary`` JSON,
    :func:`dpaudit.app.workflows.canary.canary_audit` dicts, :meth:`dpaudit.GradientCanaries.result`
    records) that do not audit ``model``'s claim: another schema, another unit, another ε, another
    dataset or none named. Returns them as dicts.

    Args:
        model: the audited released model.
        canaries: one result or a list: dicts, or paths of ``dpaudit canary`` JSON files; ``None``: none.

    Returns:
        The results as dicts (an empty list for ``None``).

    Raises:
        ConfigurationError: a result is unreadable or does not audit ``model``'s claim.
    """
    from dpaudit.auditing.results import CANARY_SCHEMA, CANARY_SCHEMA_VERSION

    if canaries is None:
        return []
    if isinstance(canaries, (dict, str, Path)):
        canaries = [canaries]
    privacy = model.privacy
    dataset = (model.card.get("dataset") or {}).get("name")
    out = []
    for i, res in enumerate(canaries, 1):
        where = f"canary result #{i}"
        if isinstance(res, (str, Path)):
            where = f"canary result {res}"
            try:
                res = json.loads(Path(res).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ConfigurationError(f"{where}: not a readable JSON file ({exc})") from None
        if (
            not isinstance(res, dict)
            or res.get("schema") != CANARY_SCHEMA
            or res.get("version") != CANARY_SCHEMA_VERSION
        ):
            raise ConfigurationError(
                f"{where}: not a canary audit result (schema {CANARY_SCHEMA!r} version "
                f"{CANARY_SCHEMA_VERSION} expected)"
            )
        missing = [k for k in _CANARY_KEYS if k not in res]
        if missing:
            raise ConfigurationError(f"{where}: a canary audit result lacks {', '.join(missing)}")
        if not privacy.is_private:
            raise ConfigurationError(f"{where}: the model states no privacy claim, so there is nothing to test")
        if res["unit"] != privacy.unit:
            raise ConfigurationError(f"{where} audits {res['unit']}-level DP, the model claims {privacy.unit}-level DP")
        # the ε the recipe was run at: the card's target (a trained model spends at most it), else the claim
        stated = model.card.get("target_epsilon")
        stated = float(stated) if isinstance(stated, (int, float)) else privacy.epsilon
        target = res["target_epsilon"]
        if not isinstance(target, (int, float)) or not math.isclose(float(target), stated, rel_tol=1e-6):
            raise ConfigurationError(f"{where} audits ε = {target}, the model claims ε = {stated:g}")
        if dataset is not None and res["dataset"] is None:
            raise ConfigurationError(
                f"{where} names no dataset, the model was trained on {dataset!r}: name it "
                "(GradientCanaries: features=<the GraphDataset> or result(dataset=...))"
            )
        if dataset is not None and res["dataset"] != dataset:
            raise ConfigurationError(f"{where} audits on {res['dataset']!r}, the model was trained on {dataset!r}")
        if res.get("partial"):
            raise ConfigurationError(f"{where} is partial (interrupted): rerun it to the end")
        out.append(res)
    return out


def canary_evidence(model, canaries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each canary result (checked by :func:`check_canary_results`) re-tested against ``model``'s
    own claim: its (ε, δ) at the canary's unit (:func:`attacks.canary.audited_claim`: edge canaries
    against node-level DP test (2ε, (1 + e^ε)δ)), from the result's kept scores at the result's
    confidence, Bonferroni over the k results (1 − (1 − c)/k; one audit file's verdicts hold
    jointly). A result without its scores is weighed by its recorded certified bound only when it
    is the only one and its δ is at least the claim's (a bound at δ' ≥ δ refutes (ε, δ)).

    The verdict is "claim refuted" (a hypothesis: the user's or a paper's) or "guarantee broken"
    (a proven guarantee) when a valid certified bound exceeds the claim, else as the canary audit
    words it. Keyed ``"<kind> canaries"`` (``#i`` appended when several share a kind).

    Args:
        model: the audited released model.
        canaries: the results returned by :func:`check_canary_results`.

    Returns:
        Each result's evidence (verdict, tested claim, bound), keyed as above.
    """
    import numpy as np

    from attacks.canary import audited_claim
    from dpaudit.auditing.estimators import audit_epsilon
    from dpaudit.auditing.intervals import bonferroni_confidence
    from dpaudit.auditing.results import CLAIM_REFUTED, ESTIMATE_VERDICT

    privacy = model.privacy
    refuted_word = CLAIM_REFUTED if privacy.hypothesis else "guarantee broken"
    k = len(canaries)
    out: dict[str, dict[str, Any]] = {}
    for i, res in enumerate(canaries, 1):
        kind = str(res["kind"])
        valid, why, claim, claim_delta = audited_claim(privacy.unit, kind, privacy.epsilon, privacy.delta)
        confidence = bonferroni_confidence(float(res.get("confidence", 0.95)), k)
        entry = {
            "schema": res.get("schema"),
            "version": res.get("version"),
            "recipe": res.get("defense") or res.get("source"),
            "dataset": res.get("dataset"),
            "kind": kind,
            "canaries": res.get("canaries"),
            "runs": res.get("runs"),
            "claimed_epsilon": claim,
            "claim_delta": claim_delta,
            "claim_status": privacy.status,
            "confidence": confidence,
            "source_verdict": res.get("verdict"),
            "auc": res.get("auc"),
            "multiple_testing": {"canary_results": k},
        }
        valid = valid and bool(res.get("bound_valid"))
        scores, included, run_ids = res.get("scores"), res.get("included"), res.get("run_ids")
        if scores is not None and included is not None and len(scores) == len(included) and len(scores):
            y = np.asarray(included, dtype=bool)
            estimators = ("one-run", "one-run-fdp", "one-run-fdp-gaussian") if y.all() or not y.any() else None
            audit = audit_epsilon(
                np.asarray(scores, dtype=float),
                y,
                delta=min(claim_delta, 0.5),
                confidence=confidence,
                run_ids=None if run_ids is None else np.asarray(run_ids),
                estimators=estimators,
                claimed_epsilon=claim if valid else None,
            )
            entry.update(
                recomputed=True,
                epsilon_lower_bound=audit["epsilon_lower_bound"],
                delta=audit["delta"],
                certified_epsilon_lower_bound=audit["certified_epsilon_lower_bound"],
                max_possible=audit.get("max_possible"),
                can_refute_claim=audit.get("can_refute_claim"),
            )
            refuted, estimate = audit.get("claim_refuted"), audit.get("estimate_exceeds_claim")
        elif k == 1 and float(res.get("delta") or 0.0) >= claim_delta:
            certified = res["certified_epsilon_lower_bound"]
            entry.update(
                recomputed=False,
                epsilon_lower_bound=res.get("epsilon_lower_bound"),
                delta=res.get("delta"),
                certified_epsilon_lower_bound=certified,
                max_possible=res.get("max_possible"),
                can_refute_claim=res.get("can_refute_claim"),
            )
            refuted = certified is not None and certified > claim
            estimate = res.get("verdict") == ESTIMATE_VERDICT
        else:
            entry.update(
                recomputed=False,
                epsilon_lower_bound=res.get("epsilon_lower_bound"),
                delta=res.get("delta"),
                certified_epsilon_lower_bound=res.get("certified_epsilon_lower_bound"),
            )
            valid = False
            why = (
                "the result keeps no scores, and its bound is at δ = "
                f"{res.get('delta')} below the claim's δ = {claim_delta:.3g} or beside other results: "
                "rerun the canary audit with its scores kept"
            )
        entry["bound_valid"] = valid
        entry["coverage"] = why
        if not valid:
            entry["why"] = why if res.get("bound_valid") else (res.get("why") or why)
            entry["verdict"] = "not applicable"
        elif refuted:
            entry["verdict"] = refuted_word
        elif estimate:
            entry["verdict"] = ESTIMATE_VERDICT
        else:
            entry["verdict"] = "consistent with the claim"
        key = f"{kind} canaries" if sum(str(r["kind"]) == kind for r in canaries) == 1 else f"{kind} canaries #{i}"
        out[key] = entry
    return out
