"""Canary audits: K trainings through the defense registry with fresh fair coins, canary scores,
ε lower bounds (:mod:`dpaudit.auditing.estimators`) and a verdict — one JSON document.

>>> result = canary_audit("mlp-dp", "csbm", 1.0, kind="node", canaries=200, runs=1)   # doctest: +SKIP
>>> result.certified_epsilon_lower_bound, result.verdict                                  # doctest: +SKIP

The game and the scores are :mod:`attacks.canary`; ``kind="gradient"`` (white-box Dirac
gradient canaries inside DP-SGD) is :mod:`dpaudit.app.workflows.gradient_canary`, dispatched from
here with the same arguments and JSON keys. What this module adds:

* what trains is a registered defense or **your own** ``fit(dataset, split)``
  (:class:`dpaudit.training.user_fit.FitFunction`): then the claim (ε, δ, unit) is yours, tested
  as a hypothesis, and a certified bound above it is "claim refuted";
* before any training, :func:`canary_plan` states the audit's power — the largest ε a perfect
  attack could certify at this size (:mod:`dpaudit.auditing.power`) — and warns, with the
  canaries needed, when that is at most the claim;
* δ is resolved **once** on the base graph (``--delta auto`` counts the base graph's units) and
  given explicitly to every run, so no run's guarantee depends on how many canaries it drew;
* every run is ``get_defense(name)(epsilon, delta, seed + run, **overrides).fit(...)`` — the
  defense's own ``fit`` with its privacy checks; run r's coins are seeded by (seed, r);
* the claim tested is the ε each run actually *spent* after the audit's queries (a GAP query on
  a foreign graph is recorded in its spec), maximised over runs — for edge canaries against a
  node-level defense through group privacy of size 2 (:func:`attacks.canary.audited_claim`);
* one call to :func:`dpaudit.auditing.estimators.audit_epsilon` on the pooled (score, coin) pairs with
  the run of each score (pooling is valid for the one-run test: canary i enters only run r(i),
  so the joint output of all runs is as private for it as run r(i) alone; the multi-run
  estimator runs only with one canary per run, ``canaries=1, runs=K``, its independent trials) (Bonferroni over the estimators used). The verdict "guarantee broken"
  requires the **certified** bound (one-run / one-run-fdp / multi-run) to exceed the claim — a statement at
  the audit's confidence (95 % by default) after that correction. When the claim is a hypothesis
  (:attr:`dpaudit.accounting.spec.PrivacySpec.hypothesis`: your fit function's, a ``protocol=paper``
  defense's, a spec with an unaccounted step) the same bound gives "claim refuted" (:data:`CLAIM_REFUTED`):
  there was no guarantee to break. When only the GDP estimate
  (valid if the trade-off curve is Gaussian-shaped, as for Gaussian mechanisms and DP-SGD)
  exceeds it, the verdict says "likely broken (GDP estimate ...)": the one-run bound cannot
  certify a factor-2 violation at small ε with a few thousand canaries;
* when every run's spec states a μ-GDP guarantee (``gdp_mu``: exact Gaussian mechanisms, e.g.
  GAP's edge-level PMA), the audit also tests it: ``claimed_mu`` is the largest μ over runs at
  the canary's unit (2μ for edge canaries against node-level DP,
  :func:`attacks.canary.audited_mu`) and one-run-fdp-gaussian's certified μ above it is a
  refuted claim ("guarantee broken" or "claim refuted", with a note when the (ε, δ) claim itself stands). Specs
  without μ — subsampled DP-SGD (mlp-dp, GAP's node level, the gradient canaries of
  :mod:`dpaudit.app.workflows.gradient_canary`), recorded guarantees (GCON, DP-GNN) — are tested
  on (ε, δ) only, and the JSON says so (``claimed_mu``: null and a note);
* Ctrl-C keeps finished runs: the JSON is written with ``"partial": true`` before the
  interrupt propagates.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.auditing.estimators import RIGOROUS_ESTIMATORS
from dpaudit.auditing.results import (  # noqa: F401
    CANARY_SCHEMA,
    CANARY_SCHEMA_VERSION,
    CANARY_VERDICTS,
    CLAIM_REFUTED,
    ESTIMATE_VERDICT,
    NO_POWER_NOTE,
    CanaryAuditRecord,
    canary_verdict,
)
from dpaudit.auditing.statistics import auc_or_none
from dpaudit.data.datasets import GraphDataset, load_dataset
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.runtime import atomic_write_json
from dpaudit.training.registry import get_defense
from dpaudit.training.user_fit import FitFunction, function_name

log = logging.getLogger(__name__)

SCHEMA, SCHEMA_VERSION = CANARY_SCHEMA, CANARY_SCHEMA_VERSION
#: δ of the ε lower bound for a non-private model (no claim: the bound only shows the attack's power).
NON_PRIVATE_DELTA = 1e-5
VERDICTS = CANARY_VERDICTS


#: the plan predicts a perfect ranking's bound over the coin draws up to this many scores (canaries × runs)
PREDICTED_SCORES = 10_000

#: every canary kind: the graph-native ones of :mod:`attacks.canary` and white-box gradient canaries
#: in DP-SGD (:mod:`dpaudit.app.workflows.gradient_canary`)
ALL_KINDS = ("node", "edge", "gradient")


def _check_counts(canaries, runs) -> None:
    if isinstance(canaries, bool) or not isinstance(canaries, int) or canaries < 1:
        raise ConfigurationError(f"--canaries must be an integer >= 1, got {canaries!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigurationError(f"--runs must be an integer >= 1, got {runs!r}")


def check_canary_request(
    defense: str,
    epsilon,
    kind: str,
    canaries: int,
    runs: int,
    overrides: dict | None,
    delta="auto",
    device: str = "auto",
    seed: int = 0,
    design: dict | None = None,
):
    """Validate everything that can be validated before data is loaded; returns the defense class.

    Args:
        defense: a registered defense's name.
        epsilon: its target ε (a number or ``"inf"``).
        kind: ``"node"``, ``"edge"`` or ``"gradient"``.
        canaries: canaries per run.
        runs: independent trainings.
        overrides: the defense's hyperparameter overrides.
        delta: δ, or ``"auto"``.
        device: torch device.
        seed: the audit's seed.
        design: canary design options.

    Returns:
        The defense class.

    Raises:
        ConfigurationError: any of them is invalid.
    """
    if kind not in ALL_KINDS:
        raise ConfigurationError(f"--kind must be one of {', '.join(ALL_KINDS)}, got {kind!r}")
    if kind == "gradient":
        from dpaudit.app.workflows.gradient_canary import check_gradient_request

        return check_gradient_request(defense, epsilon, canaries, runs, overrides, delta, device, seed, design)
    _check_counts(canaries, runs)
    cls = get_defense(defense)
    cls(epsilon=epsilon, delta=delta, seed=seed, device=device, **(overrides or {}))  # ranges, protocol, ε
    structure = canary_structure(design)
    if structure is not None:
        if kind != "edge":
            raise ConfigurationError(f"--design structure={structure.name} designs edge canaries (--kind edge)")
        structure.check(cls, canaries)
    return cls


def check_fit_request(
    fit,
    epsilon,
    kind: str,
    canaries: int,
    runs: int,
    unit: str | None = None,
    delta="auto",
    device: str = "auto",
    seed: int = 0,
    design: dict | None = None,
) -> FitFunction:
    """Validate an audit of the user's ``fit(dataset, split)`` before data is loaded (the claim, the
    kind, the counts, the design); returns the recipe of run 0.

    Args:
        fit: the user's ``fit(dataset, split)`` function.
        epsilon: the claimed ε (``"inf"``: no claim).
        kind: ``"node"`` or ``"edge"``.
        canaries: canaries per run.
        runs: independent trainings.
        unit: the claim's privacy unit; ``None``: the canaries' kind.
        delta: the claimed δ, or ``"auto"``.
        device: torch device.
        seed: the audit's seed.
        design: canary design options (no ``structure``).

    Returns:
        The recipe of run 0.

    Raises:
        ConfigurationError: any of them is invalid.
    """
    if kind not in game_kinds():
        why = " (gradient canaries are inserted inside a registered DP-SGD defense)" if kind == "gradient" else ""
        raise ConfigurationError(f"a fit function is audited with --kind node or edge, got {kind!r}{why}")
    _check_counts(canaries, runs)
    if (design or {}).get("structure") is not None:
        raise ConfigurationError("--design structure=... is a registered defense's own canary design, not for --train")
    if epsilon is None:
        raise ConfigurationError("auditing a fit function needs --epsilon: the ε you claim (inf: no claim)")
    return FitFunction(fit, epsilon=epsilon, delta=delta, unit=unit or kind, seed=seed, device=device)


def game_kinds() -> tuple[str, ...]:
    """The graph-native canary kinds (:data:`attacks.canary.KINDS`)."""
    return tuple(k for k in ALL_KINDS if k != "gradient")


#: the modules that register a defense's own edge-canary structure (:class:`dpaudit.auditing.canary_design.CanaryStructure`)
STRUCTURE_MODULES = {"gcon-pairs": "defenses.gcon.canaries"}


def canary_structure(design: dict | None):
    """The structure ``design`` names (its module imported, which registers it), or ``None``.

    Args:
        design: canary design options; the ``structure`` key is read.

    Returns:
        The registered :class:`~attacks.canary.CanaryStructure`, or ``None``.
    """
    import importlib

    from attacks import canary as game

    name = (design or {}).get("structure")
    if name is None:
        return None
    if name in STRUCTURE_MODULES:
        importlib.import_module(STRUCTURE_MODULES[name])
    return game.structure_of(name)


def canary_audit(
    defense: str | Callable | None = None,
    dataset: str | GraphDataset | None = None,
    epsilon: float | str | None = None,
    *,
    kind: str,
    fit: Callable | None = None,
    unit: str | None = None,
    canaries: int = 200,
    runs: int = 1,
    overrides: dict[str, Any] | None = None,
    split: str | None = None,
    seed: int = 0,
    delta: float | str = "auto",
    device: str = "auto",
    data_root: str | None = None,
    dataset_options: dict[str, Any] | None = None,
    design: dict[str, Any] | None = None,
    confidence: float = 0.95,
    out: str | Path | None = None,
    progress: bool = True,
    keep_scores: bool = True,
    on_plan: Callable[[dict[str, Any]], None] | None = None,
) -> CanaryAuditRecord:
    """Run the canary audit (module docstring) and return (and, with ``out``, write) its JSON
    record (a ``dict`` with ``.verdict`` and ``.certified_epsilon_lower_bound``).

    What trains is a registered defense (``defense``, its name) or **your own function**
    (``fit``, or a callable as first argument): ``fit(dataset, split)`` returning a trained
    torch module (:class:`dpaudit.training.user_fit.FitFunction`), audited against the claim
    ``epsilon`` (``"inf"``: none), ``delta`` and ``unit`` (default: the canaries' kind) that you
    state — a hypothesis the audit tests: verdict "claim refuted" when a certified bound exceeds
    it, "consistent with the claim" otherwise. The function sees only each run's training
    dataset and split (the base graph with the canaries its coins included).

    Before any training the audit's power is planned (:func:`canary_plan`, ``result["plan"]``)
    and given to ``on_plan`` — or, without one, logged (INFO), a claim no attack could refute at
    this size at WARNING, with the number of canaries that could.

    ``kind="gradient"`` is the white-box DP-SGD audit of
    :func:`dpaudit.app.workflows.gradient_canary.gradient_canary_audit`, called with every other
    argument unchanged (same JSON keys).

    Args:
        defense: a registered defense's name, or your fit function (read as ``fit``).
        dataset: a dataset name or a loaded :class:`~dpaudit.data.datasets.GraphDataset`.
        epsilon: the target or claimed ε (``"inf"``: no claim).
        kind: ``"node"``, ``"edge"`` or ``"gradient"``.
        fit: your ``fit(dataset, split)`` function, instead of ``defense``.
        unit: the claim's privacy unit (with ``fit``); ``None``: the canaries' kind.
        canaries: canaries per run.
        runs: independent trainings, fresh coins each.
        overrides: the defense's hyperparameter overrides.
        split: the split spec; ``None``: the default.
        seed: the audit's seed.
        delta: δ, or ``"auto"``.
        device: torch device.
        data_root: where to find the dataset.
        dataset_options: options of :func:`~dpaudit.data.datasets.load_dataset`.
        design: canary design options (:func:`attacks.canary.draw_canaries`).
        confidence: confidence of the certified lower bound.
        out: where to write the JSON record; ``None``: not written.
        progress: show a progress bar.
        keep_scores: keep every score and coin in the record (needed to re-test it later).
        on_plan: called with the plan before any training.

    Returns:
        The JSON record.

    Raises:
        ConfigurationError: invalid arguments, refused before any training.
        KeyboardInterrupt: after Ctrl-C, once the partial record is written.
    """
    from attacks import canary as game
    from dpaudit.auditing.estimators import audit_epsilon

    defense, fit = _who_trains(defense, fit, dataset, epsilon)
    if kind == "gradient" and fit is None:
        from dpaudit.app.workflows.gradient_canary import gradient_canary_audit

        return gradient_canary_audit(
            defense,
            dataset,
            epsilon,
            canaries=canaries,
            runs=runs,
            overrides=overrides,
            split=split,
            seed=seed,
            delta=delta,
            device=device,
            data_root=data_root,
            dataset_options=dataset_options,
            design=design,
            confidence=confidence,
            out=out,
            progress=progress,
            keep_scores=keep_scores,
        )
    probe, name, claim_source, recipe = _recipe(
        defense, fit, epsilon, kind, canaries, runs, unit, overrides, delta, device, seed, design
    )
    base = (
        dataset
        if isinstance(dataset, GraphDataset)
        else load_dataset(dataset, root=data_root, **(dataset_options or {}))
    )
    sp = make_split(base, split, seed)
    run_delta = probe.resolve_delta(base, sp)
    canary_design = game.draw_canaries(base, sp, kind, canaries, seed, **(design or {}))
    plan = canary_plan(canary_design, runs, probe, kind, run_delta, confidence, claim_source)
    _announce_plan(plan, on_plan)
    record = CanaryAuditRecord(
        _record_head(
            name,
            claim_source,
            base,
            sp,
            seed,
            kind,
            probe,
            run_delta,
            overrides,
            canaries,
            canary_design,
            runs,
            confidence,
            plan,
        )
    )
    scores, coins, per_run, score_name, interrupted = _play_runs(
        game, recipe, probe, base, sp, canary_design, canaries, runs, seed, delta, run_delta, name, progress
    )
    if interrupted:
        record["partial"] = True
    record.update(
        _summarise(
            record,
            per_run,
            scores,
            coins,
            score_name,
            probe,
            kind,
            run_delta,
            confidence,
            audit_epsilon,
            game,
            keep_scores,
        )
    )
    if out is not None:
        atomic_write_json(out, record)
    if interrupted:
        raise KeyboardInterrupt
    return record


def _who_trains(defense, fit, dataset, epsilon) -> tuple[str | None, Callable | None]:
    """(the registered defense's name, the user's fit function): exactly one of them, a callable
    first argument read as ``fit``; a dataset and, for a defense, ε required."""
    if callable(defense) and not isinstance(defense, str):
        if fit is not None:
            raise ConfigurationError("canary_audit: pass your function once (as fit=...)")
        defense, fit = None, defense
    if (defense is None) == (fit is None):
        raise ConfigurationError(
            "canary_audit: audit a registered defense (its name) or your fit function, one of them"
        )
    if dataset is None:
        raise ConfigurationError("canary_audit: a dataset is required (a name, a graph file or a GraphDataset)")
    if epsilon is None and fit is None:
        raise ConfigurationError("canary_audit: epsilon is required (the defense's target ε, inf for a baseline)")
    return defense, fit


def _recipe(defense, fit, epsilon, kind, canaries, runs, unit, overrides, delta, device, seed, design):
    """The request checked before any data is loaded (:func:`check_fit_request` or
    :func:`check_canary_request`); returns run 0's recipe (the claim's probe), the audited name, who
    states the claim (``user`` or ``defense``) and ``recipe(delta, seed)``, what each run fits."""
    if fit is not None:
        if overrides:
            raise ConfigurationError("canary_audit: overrides set a registered defense's hyperparameters, not a fit's")
        probe = check_fit_request(fit, epsilon, kind, canaries, runs, unit, delta, device, seed, design)

        def recipe(run_delta, run_seed):
            return FitFunction(fit, epsilon=epsilon, delta=run_delta, unit=probe.unit, seed=run_seed, device=device)

        return probe, function_name(fit), "user", recipe
    if unit is not None:
        raise ConfigurationError("canary_audit: unit states the claim of a fit function; a defense declares its own")
    cls = check_canary_request(defense, epsilon, kind, canaries, runs, overrides, delta, device, seed, design)
    probe = cls(epsilon=epsilon, delta=delta, seed=seed, device=device, **(overrides or {}))

    def recipe(run_delta, run_seed):
        return cls(epsilon=epsilon, delta=run_delta, seed=run_seed, device=device, **(overrides or {}))

    return probe, defense, "defense", recipe


def _announce_plan(plan: dict[str, Any], on_plan) -> None:
    """Give the plan to ``on_plan``, or without one log it (INFO; its warning at WARNING)."""
    if on_plan is not None:
        on_plan(plan)
    else:
        for line in plan_lines(plan):
            log.info("%s", line)
        if plan.get("warning"):
            log.warning("%s", plan["warning"])


def _record_head(
    name,
    claim_source,
    base,
    sp,
    seed,
    kind,
    probe,
    run_delta,
    overrides,
    canaries,
    canary_design,
    runs,
    confidence,
    plan,
) -> dict[str, Any]:
    """The JSON's first keys, known before any run: what was audited, on what, against which claim,
    with which design and plan (``partial``: False until an interrupt)."""
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "defense": name,
        "claim_source": claim_source,
        "dataset": base.name,
        "dataset_fingerprint": base.fingerprint,
        "split": sp.spec,
        "seed": int(seed),
        "kind": kind,
        "unit": probe.unit,
        "target_epsilon": None if math.isinf(probe.epsilon) else probe.epsilon,
        "defense_delta": run_delta if probe.private else None,
        "overrides": dict(overrides or {}),
        "canaries": canaries,
        "design": canary_design.describe(),
        "runs_requested": runs,
        "confidence": confidence,
        "plan": plan,
        "partial": False,
    }


def _play_runs(game, recipe, probe, base, sp, canary_design, canaries, runs, seed, delta, run_delta, name, progress):
    """The game's runs: run r flips its coins (seeded by (seed, r)), fits the recipe on the data they
    make and scores the canaries; returns the scores, coins, per-run records, the score's name and
    whether Ctrl-C stopped it (the finished runs are kept)."""
    from tqdm.auto import tqdm

    scores: list[np.ndarray] = []
    coins: list[np.ndarray] = []
    per_run: list[dict[str, Any]] = []
    score_name = None
    try:
        for r in tqdm(range(runs), desc=f"canary audit {name}", disable=None if progress else True):
            start = time.perf_counter()
            # the coins are drawn after the design; the recipe sees only the data they make
            included = game.flip_coins(canaries, seed, r)
            train_ds, train_split = game.training_data(base, sp, canary_design, included)
            model = recipe(run_delta if probe.private else delta, seed + r).fit(train_ds, train_split)
            s, score_name = game.score_run(model, base, sp, canary_design, train_ds, train_split, seed=seed + r)
            spec = model.privacy
            scores.append(s)
            coins.append(included)
            per_run.append(
                {
                    "run": r,
                    "seed": seed + r,
                    "included": int(included.sum()),
                    "spent_epsilon": spec.epsilon if spec.is_private else None,
                    "delta": spec.delta if spec.is_private else None,
                    "gdp_mu": spec.gdp_mu if spec.is_private else None,
                    "unit": spec.unit,
                    "sound": spec.sound,
                    "protocol": spec.protocol,
                    "status": spec.status,
                    "hypothesis": spec.hypothesis,
                    "auc": auc_or_none(s, included),
                    "seconds": time.perf_counter() - start,
                }
            )
    except KeyboardInterrupt:
        log.warning("interrupted after %d finished run(s); writing them", len(per_run))
        return scores, coins, per_run, score_name, True
    return scores, coins, per_run, score_name, False


def canary_plan(
    design, runs: int, probe, kind: str, delta: float, confidence: float, claim_source: str = "defense"
) -> dict[str, Any]:
    """The audit's power, before any training: how many canaries, how loud, the claim it tests
    and the largest ε a **perfect** attack could certify at this size
    (:func:`dpaudit.auditing.power.audit_power`); when that is at most the claim, a warning and
    the canaries per run that could (:func:`dpaudit.auditing.power.canaries_needed`).

    The claim planned for is the recipe's target ε (a defense's runs may spend less, or more
    after the audit's queries; the audit tests what they spend), at the canary's unit
    (:func:`attacks.canary.audited_claim`: edge canaries against node-level DP test 2ε).

    Args:
        design: the drawn canary design.
        runs: independent trainings.
        probe: the recipe of run 0 (its ε, unit and loudness).
        kind: the canaries' kind.
        delta: δ of the runs.
        confidence: confidence of the certified bound.
        claim_source: ``"defense"`` or ``"user"``.

    Returns:
        The plan.
    """
    from attacks import canary as game
    from dpaudit.auditing.power import audit_power, canaries_needed, canaries_needed_typically, perfect_attack_interval

    count = design.count
    valid, why, claim, claim_delta = game.audited_claim(
        probe.unit if probe.private else None, kind, probe.epsilon, delta
    )
    testable = bool(valid and math.isfinite(claim))
    estimate_delta = min(claim_delta if (testable and claim_delta > 0) else NON_PRIVATE_DELTA, 0.5)
    power = audit_power(
        count, runs=runs, delta=estimate_delta, confidence=confidence, claimed_epsilon=claim if testable else None
    )
    loudness = {k: v for k, v in design.describe().items() if k not in ("pairs", "count", "kind")}
    if design.kind == "node" and design.features is not None:
        loudness["feature_norm"] = float(design.features.norm(dim=1).max())
    plan: dict[str, Any] = {
        "kind": design.kind,
        "canaries": count,
        "runs": runs,
        "scores": count * runs,
        "loudness": loudness,
        "claim_source": claim_source,
        "claimed_epsilon": claim if testable else None,
        "claim_delta": claim_delta if testable else None,
        "delta": estimate_delta,
        "confidence": confidence,
        "bound_valid": bool(valid),
        "coverage": why,
        "certifiable_epsilon": power["certifiable_epsilon"],
        "max_possible": power["max_possible"],
        "can_refute_claim": power.get("can_refute_claim"),
        "canaries_needed": None,
        "warning": None,
    }
    settings = design.settings or {}
    if design.kind == "node" and settings.get("feature") == "rare" and design.features is not None:
        slots, columns = count * int(settings.get("support", 1)), int(design.features.shape[1])
        if slots > columns:
            plan["interference"] = (
                f"{count} canaries × support {settings.get('support', 1)} exceed the {columns} feature columns: "
                "canaries share columns and interfere (one included canary moves another's score), so the ranking "
                "is not perfect and the prediction below is optimistic; fewer canaries, --design signed=true (a "
                "column's second canary is -e_j), or more runs"
            )
    # what a perfect ranking certifies over the coin draws and the split's location
    # (:func:`dpaudit.auditing.power.perfect_attack_interval`); skipped above PREDICTED_SCORES scores,
    # where three audits of perfect scores would delay the plan
    predicted = None
    if count * runs <= PREDICTED_SCORES:
        predicted = perfect_attack_interval(count, runs=runs, delta=estimate_delta, confidence=confidence)
        plan["predicted_epsilon"] = predicted["median"]
        plan["predicted_interval"] = [predicted["low"], predicted["high"]]
        plan["predicted_coverage"] = predicted["coverage"]
    if testable and predicted is not None and power["can_refute_claim"] and predicted["median"] <= claim:
        needed = canaries_needed_typically(claim, runs=runs, delta=estimate_delta, confidence=confidence, start=count)
        plan["canaries_needed"] = needed
        advice = f"use >= {needed} canaries" if needed is not None else "pool more runs"
        columns = int(design.features.shape[1]) if design.kind == "node" and design.features is not None else None
        if needed is not None and columns is not None and settings.get("feature") == "rare" and needed > columns:
            advice += f", more than the {columns} feature columns hold without interference: pool more runs (--runs)"
        plan["warning"] = (
            f"a perfect attack refutes ε = {claim:g} only with luck: it certifies {predicted['median']:.3g} at the "
            f"median coin draw ({predicted['low']:.3g}-{predicted['high']:.3g} over "
            f"{100 * predicted['coverage']:g} % of draws and wherever the score-chosen split falls) with {count} "
            f"canaries × {runs} run(s); {advice}"
        )
    if testable and not power["can_refute_claim"]:
        needed = canaries_needed(claim, runs=runs, delta=estimate_delta, confidence=confidence, start=count)
        plan["canaries_needed"] = needed
        advice = (
            f"use >= {needed} canaries"
            if needed is not None
            else "no count up to 10,000 canaries per run could (the one-run tests cap near ε ≈ 4-6): more runs or "
            "a larger δ"
        )
        plan["warning"] = (
            f"this audit cannot refute ε = {claim:g} at this size: a perfect attack certifies at most "
            f"{power['certifiable_epsilon']:.3g} with {count} canaries × {runs} run(s); {advice}"
        )
    return plan


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan of :func:`canary_plan` in a few lines (printed before any training).

    Args:
        plan: the plan.

    Returns:
        The lines.
    """
    loud = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in plan["loudness"].items())
    claim = plan.get("claimed_epsilon")
    whose = "your claim" if plan.get("claim_source") == "user" else "the target"
    if claim is not None:
        tested = f"tests ε = {claim:g} at δ = {plan['claim_delta']:g} ({whose})"
    else:
        tested = f"no claim to test ({plan['coverage']})"
    lines = [
        f"plan: {plan['canaries']} {plan['kind']} canaries × {plan['runs']} run(s) = {plan['scores']} scores; "
        f"design: {loud}",
        f"plan: {tested}; a perfect attack could certify at most ε = {plan['certifiable_epsilon']:.3g} at "
        f"{100 * plan['confidence']:g} %",
    ]
    if plan.get("predicted_interval"):
        low, high = plan["predicted_interval"]
        lines.append(
            f"plan: a perfect ranking certifies {plan['predicted_epsilon']:.3g} at the median coin draw "
            f"({low:.3g}-{high:.3g} over {100 * plan['predicted_coverage']:g} % of draws and wherever the "
            f"score-chosen split falls)"
        )
    if plan.get("interference"):
        lines.append(f"note: {plan['interference']}")
    if plan.get("warning"):
        lines.append(f"warning: {plan['warning']}")
    return lines


#: whose hypothesis a ``sound: false`` spec states, by :attr:`dpaudit.accounting.spec.PrivacySpec.status`
_HYPOTHESIS_SOURCE = {
    "paper": "the paper's own accounting",
    "unsound": "an accounting with an unaccounted step",
    "claimed": "the user's claim",
}


def _summarise(
    record, per_run, scores, coins, score_name, probe, kind, run_delta, confidence, audit_epsilon, game, keep_scores
) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(per_run), "per_run": per_run, "score": score_name}
    spent = [r["spent_epsilon"] for r in per_run if r["spent_epsilon"] is not None]
    epsilon = max(spent) if spent else (probe.epsilon if probe.private else math.inf)
    valid, why, claim, claim_delta = game.audited_claim(probe.unit if probe.private else None, kind, epsilon, run_delta)
    mus = [r["gdp_mu"] for r in per_run]
    claimed_mu = game.audited_mu(
        probe.unit if probe.private else None, kind, max(mus) if mus and None not in mus else None
    )
    if not (valid and math.isfinite(claim)):
        claimed_mu = None
    notes = []
    stated = record.get("claim_source") == "user"
    # a hypothesis (the user's claim, a paper's accounting, an unaccounted step) is refuted, not broken
    hypothesis = stated or any(r.get("hypothesis") for r in per_run)
    if stated and valid and math.isfinite(claim):
        notes.append(
            "the claim (ε, δ, unit) is your statement, not a guarantee dpaudit proved: the audit tests it as a "
            "hypothesis"
        )
    elif per_run and any(r["sound"] is False for r in per_run):
        whose = sorted(
            {_HYPOTHESIS_SOURCE.get(r.get("status"), "an unproven accounting") for r in per_run if r["sound"] is False}
        )
        notes.append(
            f"the defense's spec is sound: false ({' and '.join(whose)}): its ε is a hypothesis the audit "
            "tests, not a guarantee"
        )
    out.update(
        claimed_epsilon=claim if math.isfinite(claim) else None,
        claim_delta=claim_delta if math.isfinite(claim) else None,
        bound_valid=valid,
        coverage=why,
        notes=notes,
    )
    if not valid:
        out["why"] = why
    if not per_run:
        out.update(epsilon_lower_bound=None, verdict="not applicable", auc=None)
        out.setdefault("why", "no run finished")
        out["bound_valid"] = False
        return out
    s = np.concatenate(scores)
    y = np.concatenate(coins)
    run_ids = np.concatenate([np.full(len(c), i) for i, c in enumerate(coins)])
    estimate_delta = claim_delta if (math.isfinite(claim) and claim_delta > 0) else NON_PRIVATE_DELTA
    estimators = None
    if y.all() or not y.any():  # one coin value: only the guess-count tests apply
        estimators = ("one-run", "one-run-fdp", "one-run-fdp-gaussian")
        notes.append("every coin came up the same: the GDP and multi-run estimators need both values")
    audit = audit_epsilon(
        s,
        y,
        delta=min(estimate_delta, 0.5),
        confidence=confidence,
        run_ids=run_ids,
        estimators=estimators,
        claimed_epsilon=claim if (valid and math.isfinite(claim)) else None,
        claimed_mu=claimed_mu,
    )
    out.update(
        epsilon_lower_bound=audit["epsilon_lower_bound"],
        certified_epsilon_lower_bound=audit["certified_epsilon_lower_bound"],
        delta=audit["delta"],
        estimates=audit["estimates"],
        estimators_skipped=audit.get("skipped", {}),
        multiple_testing=audit["multiple_testing"],
        max_possible=audit.get("max_possible"),
        can_refute_claim=audit.get("can_refute_claim"),
        auc=auc_or_none(s, y),
        claimed_mu=claimed_mu,
        certified_mu_lower_bound=audit.get("certified_mu_lower_bound"),
        mu_claim_refuted=audit.get("mu_claim_refuted"),
    )
    if valid and math.isfinite(claim) and claimed_mu is None:
        notes.append("the spec states no μ-GDP guarantee for this unit: only its (ε, δ) claim is tested")
    elif audit.get("mu_claim_refuted") and audit["certified_epsilon_lower_bound"] <= claim:
        notes.append(
            f"the μ-GDP guarantee the spec states (μ = {claimed_mu:.4g}) is refuted (certified μ ≥ "
            f"{audit['certified_mu_lower_bound']:.4g}); its (ε, δ) claim is not"
        )
    if audit.get("can_refute_claim") is False:
        notes.append(NO_POWER_NOTE)
    out["verdict"] = canary_verdict(audit, hypothesis=hypothesis, valid=valid)
    if keep_scores:
        out["scores"] = [float(v) for v in s]
        out["included"] = [bool(v) for v in y]
        out["run_ids"] = [int(v) for v in run_ids]
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A one-screen summary of a canary audit's JSON.

    Args:
        result: the canary audit's record.

    Returns:
        The lines to print.
    """

    def fmt(v):
        if v is None:
            return "-"
        return "inf" if isinstance(v, float) and math.isinf(v) else f"{v:.3f}"

    lines = [
        f"canary audit: {result['defense']} on {result['dataset']} ({result['split']}), {result['kind']} canaries: "
        f"{result['canaries']} per run × {result['runs']} run(s){' (partial)' if result.get('partial') else ''}",
        f"score: {result.get('score')}   AUC {fmt(result.get('auc'))}",
    ]
    lines += bound_lines(result)
    claim = result.get("claimed_epsilon")
    source = "your claim" if result.get("claim_source") == "user" else "spent, max over runs"
    lines.append(
        f"claimed ε {fmt(claim)} ({source}; unit {result.get('unit')})   "
        f"bound valid: {'yes' if result.get('bound_valid') else 'no'}"
    )
    if result.get("claimed_mu") is not None:
        lines.append(
            f"claimed μ-GDP {fmt(result['claimed_mu'])}   certified μ lower bound "
            f"{fmt(result.get('certified_mu_lower_bound'))} (one-run-fdp-gaussian's μ is certified for any "
            f"mechanism: above the claimed μ, the claim is refuted)"
        )
    if result.get("why"):
        lines.append(f"  why: {result['why']}")
    lines.append(f"verdict: {result.get('verdict')}")
    lines += [f"  note: {n}" for n in result.get("notes") or []]
    return lines


def bound_lines(result: dict[str, Any]) -> list[str]:
    """The certified ε lower bound (valid for any mechanism) on its own line, then the estimates,
    labelled as estimates (never as bounds): the GDP ones assume a Gaussian trade-off curve, and
    the verdict never rests on them alone (:data:`ESTIMATE_VERDICT` says so when they exceed the
    claim); for a one-run gradient audit, then one line each for the ε lower bound if the run is
    the claim's mechanism form SGM(σ, q, T) and for the hypothesis test's p-value.

    Args:
        result: the canary audit's record.

    Returns:
        The lines; empty without bounds.
    """
    bounds = result.get("epsilon_lower_bound") or {}
    if not bounds:
        return []

    def fmt(v):
        return "-" if v is None else ("inf" if isinstance(v, float) and math.isinf(v) else f"{v:.3f}")

    where = (
        f"at δ = {result.get('delta', 0):g}, {100 * result['confidence']:g} % confidence (Bonferroni over estimators)"
    )
    certified = {k: v for k, v in bounds.items() if k in RIGOROUS_ESTIMATORS}
    estimates = {k: v for k, v in bounds.items() if k not in RIGOROUS_ESTIMATORS and k != "overall"}
    lines = [
        f"certified ε lower bound: {fmt(result.get('certified_epsilon_lower_bound'))} {where} (valid for any mechanism)"
    ]
    if certified:
        lines.append("  certified, by estimator: " + ", ".join(f"{k} {fmt(v)}" for k, v in certified.items()))
    if estimates:
        lines.append(
            "  estimates (not bounds: they assume a Gaussian trade-off curve): "
            + ", ".join(f"{k} {fmt(v)}" for k, v in estimates.items())
        )
    sgm = result.get("sgm_epsilon_lower_bound")
    if sgm:
        lines.append(f"{sgm['label']}: {fmt(sgm['epsilon'])} at δ = {sgm['delta']:g} (not valid for any mechanism)")
    test = result.get("hypothesis_test")
    if test:
        outcome = "refuted" if test["refuted"] else "not refuted"
        lines.append(
            f"hypothesis test of the claim's mechanism {test['mechanism']}: p = {test['p_value']:.3g}, {outcome} at "
            f"the {100 * (1 - test['confidence']):g} % level (exact for that mechanism; not a bound for any other)"
        )
    return lines
