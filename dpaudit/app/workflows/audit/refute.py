"""An audit able to refute the claim it tests, chosen before any training (issue 47, item 1).

Membership attacks on a graph of a few hundred nodes have a few dozen member/non-member pairs:
even a perfect attack certifies at most ε ≈ 0.6 from them (:mod:`dpaudit.auditing.power`), so
on their own they never test a claim of ε = 1 or 4. Canaries are not bounded by the graph's
labelled nodes: :func:`plan_refuting_audit` picks the strongest canary game the defense allows —
white-box Dirac gradient canaries inside its DP-SGD run
(:func:`dpaudit.app.workflows.gradient_canary.dpsgd_modules`), else edge canaries for an
edge-level claim, else node canaries — and sizes it with :func:`dpaudit.auditing.power.canaries_needed`
so that a perfect attack certifies :func:`refute_target` (a margin) above the claim
(:func:`perfect_attack_bound`). Where a run holds
fewer canaries than that (a Dirac canary needs its own coordinate of the audited module; an edge
canary its own pair of distant endpoints), the canaries are spread over several runs, pooled
(canary i enters run r(i) only). Where no size can (the one-run tests pay about m·δ for m
canaries: at δ = 1e-3 no count certifies anything), the plan says, in one line and before any
training, what would: a smaller δ and the canaries it then needs, with the cost in trainings.

:func:`run_refuting_audit` runs the plan on a trained model's recipe and returns the canary
result, which :func:`dpaudit.app.workflows.audit.canaries.canary_evidence` re-tests against the
model's own claim — the evidence the report weighs (``record["canaries"]``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from dpaudit.errors import ConfigurationError, DPAuditError

log = logging.getLogger(__name__)

#: a plan's canaries let a perfect attack certify at least this fraction above the claim: a
#: broken model's real attack is near perfect, not perfect, and the ceiling is not monotone in
#: the count
REFUTE_MARGIN = 0.05
#: ... and at least this much above it in absolute terms: at ε = 1 a 5 % margin left the demo's
#: broken model (σ ÷ 10) 35 canaries, whose near-perfect ranking refuted ε = 1 in 1 of 3 recorded
#: runs (benchmarks/results/demo.md, 0.74–1.36 certified); 0.25 above it costs a few dozen canaries
REFUTE_MARGIN_ABSOLUTE = 0.25


def refute_target(epsilon: float) -> float:
    """The ε a refuting plan sizes its canaries for: what a perfect attack must certify, the
    claim plus :data:`REFUTE_MARGIN` of it, and at least :data:`REFUTE_MARGIN_ABSOLUTE` above it.

    Args:
        epsilon: the claim's ε.

    Returns:
        The target ε.
    """
    return max(float(epsilon) * (1.0 + REFUTE_MARGIN), float(epsilon) + REFUTE_MARGIN_ABSOLUTE)


#: the δ :func:`plan_refuting_audit` suggests when the claim's δ leaves the one-run tests no power
SUGGESTED_DELTA = 1e-5

#: the most runs a plan spreads its canaries over (each is one more training of the recipe)
MAX_RUNS = 32

#: how many edge canaries may share an endpoint in a refuting audit's design
EDGE_ENDPOINT_USES = 4


@dataclass(frozen=True)
class RefutingPlan:
    """A canary audit sized to refute ``claim`` (module docstring).

    Attributes:
        defense: the registered defense whose recipe is audited.
        kind: ``"gradient"``, ``"edge"`` or ``"node"``.
        claim: the ε the audit must be able to refute.
        delta: the claim's δ.
        canaries: canaries per run (``None`` when no size suffices).
        runs: trainings the canaries are spread over.
        certifiable: the largest ε a perfect attack could certify at this size (``None`` when unknown).
        can_refute: whether ``certifiable`` exceeds the claim.
        design: the canary design options (``--design``).
        estimated_seconds: the plan's cost (its trainings), when a training's time is known.
        advice: what would suffice when this plan cannot refute the claim; ``None`` when it can.
    """

    defense: str
    kind: str
    claim: float
    delta: float
    canaries: int | None
    runs: int
    certifiable: float | None
    can_refute: bool
    design: dict
    estimated_seconds: float | None = None
    advice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-able data (a study cell records it as ``canary_plan``)."""
        return asdict(self)

    def line(self) -> str:
        """The plan in one line (printed before any training)."""
        cost = "" if self.estimated_seconds is None else f", about {_seconds(self.estimated_seconds)}"
        if not self.can_refute:
            return f"{self.defense} at ε = {self.claim:.3g}: no canary audit here can refute the claim — {self.advice}"
        spread = f" over {self.runs} runs" if self.runs > 1 else ""
        return (
            f"{self.defense} at ε = {self.claim:.3g}: {self.canaries * self.runs} {self.kind} canaries{spread} "
            f"(a perfect attack would certify ε ≥ {self.certifiable:.2f} at δ = {self.delta:.0e}{cost})"
        )


def _seconds(seconds: float) -> str:
    from dpaudit.app.workflows.audit.formatting import format_seconds

    return format_seconds(seconds)


def canary_kind(defense: str, epsilon: float, overrides: dict | None = None) -> str:
    """The strongest canary game ``defense`` allows: ``"gradient"`` when its DP-SGD run takes Dirac
    canaries (:func:`~dpaudit.app.workflows.gradient_canary.check_gradient_request`), else
    ``"edge"`` for an edge-level claim, else ``"node"``.

    Args:
        defense: a registered private defense.
        epsilon: the claim's ε (some defenses refuse gradient canaries at some settings).
        overrides: the recipe's hyperparameters.

    Returns:
        The canary kind.

    Raises:
        ConfigurationError: the defense claims no privacy unit.
    """
    from dpaudit.app.workflows.gradient_canary import check_gradient_request
    from dpaudit.training.registry import get_defense

    cls = get_defense(defense)
    if cls.unit is None:
        raise ConfigurationError(f"{defense} states no privacy claim: there is nothing for canaries to refute")
    try:
        check_gradient_request(defense, epsilon, 1, 1, overrides, delta=1e-5, device="cpu")
        return "gradient"
    except ConfigurationError:
        return "edge" if cls.unit == "edge" else "node"


@lru_cache(maxsize=256)
def perfect_attack_bound(canaries: int, runs: int, delta: float, confidence: float) -> float:
    """The certified ε a *perfect* attack gets from ``canaries`` per run over ``runs`` runs, with
    the fair coins two standard deviations off balance (√m more included than excluded; fair
    coins are at least this balanced 95 % of the time), counting the estimators' fixed guess grids
    only (:func:`dpaudit.auditing.power.fixed_grid_bound`; the score-chosen split can only add):
    every score right, the audit's own estimators
    (:func:`dpaudit.auditing.estimators.audit_epsilon`). Below the estimators' ``max_possible``
    ceilings (:func:`dpaudit.auditing.power.audit_power`), which count every guess right at
    balanced coins: 24 canaries have a ceiling of 1.15 at δ = 1e-5, yet a perfect attack with 16
    of them included certifies 0.67.

    Args:
        canaries: canaries per run.
        runs: runs pooled.
        delta: the claim's δ.
        confidence: the audit's confidence.

    Returns:
        The certified ε lower bound.
    """
    import numpy as np

    from dpaudit.auditing.estimators import audit_epsilon
    from dpaudit.auditing.power import fixed_grid_bound

    total = canaries * runs
    included = min(total, total // 2 + math.ceil(math.sqrt(total)))
    coins = np.zeros(total, dtype=bool)
    coins[np.random.default_rng(0).permutation(total)[:included]] = True
    estimators = ("one-run", "one-run-fdp", "one-run-fdp-gaussian") if coins.all() or not coins.any() else None
    audit = audit_epsilon(
        coins.astype(float),
        coins,
        delta=delta,
        confidence=confidence,
        run_ids=np.repeat(np.arange(runs), canaries),
        estimators=estimators,
    )
    # the split of the one-run tests' score-chosen guesses may fall inside a wide cluster of a few
    # dozen scores (measured: zoo-mlp-dp-noise-div10, 29 gradient canaries, AUC 1.0, certified 0.95
    # where the split rule promised 1.07): plan on the fixed grids alone
    return fixed_grid_bound(audit)


@lru_cache(maxsize=256)
def _needed(target: float, delta: float, confidence: float) -> int | None:
    """The fewest canaries (one run; grown by a fifth from the power module's count) whose
    :func:`perfect_attack_bound` exceeds ``target``; ``None`` above the power module's limit."""
    from dpaudit.auditing.power import MAX_PLANNED_CANARIES, canaries_needed

    count = canaries_needed(target, delta=delta, confidence=confidence)
    while count is not None and perfect_attack_bound(count, 1, delta, confidence) <= target:
        count = math.ceil(count * 1.2) if count < MAX_PLANNED_CANARIES else None
    return count


def _ceiling(canaries: int, runs: int, delta: float, confidence: float) -> float:
    return perfect_attack_bound(canaries, runs, delta, confidence)


def _design(kind: str, defense: str) -> dict:
    """The canary design: gradient canaries scored on the iterates less the real examples'
    clipped sum where the defense's loop gives it (``observe=centred``: on a small model the
    real gradients otherwise drown the canaries); edge canaries sharing an endpoint up to 4 times
    (a graph of n nodes then holds about n canaries, not n/2)."""
    from dpaudit.app.workflows.gradient_canary import centres_scores
    from dpaudit.training.registry import get_defense

    if kind == "gradient":
        return {"observe": "centred"} if centres_scores(get_defense(defense)) else {}
    return {"endpoint_uses": EDGE_ENDPOINT_USES} if kind == "edge" else {}


def plan_refuting_audit(
    defense: str,
    epsilon: float,
    delta: float,
    *,
    kind: str | None = None,
    capacity: int | None = None,
    confidence: float = 0.95,
    overrides: dict | None = None,
    seconds_per_run: float | None = None,
) -> RefutingPlan:
    """The fewest canaries (and runs) whose audit of ``defense`` at (``epsilon``, ``delta``) could
    refute the claim — a perfect attack certifying :func:`refute_target` — or, when none
    can, a plan that says what would (module docstring).

    Args:
        defense: a registered private defense.
        epsilon: the claim's ε (a module's share, for gradient canaries in one module, is at most it).
        delta: the claim's δ.
        kind: the canary kind (default :func:`canary_kind`).
        capacity: the most canaries one run holds (a gradient run's trainable coordinates, an
            edge run's distant pairs); ``None``: unbounded.
        confidence: the audit's confidence.
        overrides: the recipe's hyperparameters.
        seconds_per_run: one training's time, for the estimate.

    Returns:
        The :class:`RefutingPlan`.

    Raises:
        ConfigurationError: the defense states no claim, or ε, δ or ``capacity`` are out of range.
    """
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ConfigurationError(f"a refuting audit needs a finite claimed ε > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ConfigurationError(f"a refuting audit needs the claim's δ in (0, 1), got {delta!r}")
    if capacity is not None and capacity < 1:
        raise ConfigurationError(f"a run must hold at least one canary, got capacity {capacity!r}")
    kind = kind or canary_kind(defense, epsilon, overrides)
    target = refute_target(epsilon)
    total = _needed(target, float(delta), confidence)
    base = {
        "defense": defense,
        "kind": kind,
        "claim": float(epsilon),
        "delta": float(delta),
        "design": _design(kind, defense),
    }
    if total is None:
        return RefutingPlan(
            **base,
            canaries=None,
            runs=1,
            certifiable=None,
            can_refute=False,
            advice=_advice(defense, kind, epsilon, delta, confidence, capacity, seconds_per_run),
        )
    per_run, runs = _spread(total, capacity, float(delta), confidence, target)
    ceiling = _ceiling(per_run, runs, float(delta), confidence)
    seconds = None if seconds_per_run is None else seconds_per_run * runs
    if ceiling <= epsilon:  # more runs than MAX_RUNS would be needed
        advice = (
            f"{per_run} canaries per run is all one run of {defense} holds here, and {runs} runs certify at most "
            f"ε = {ceiling:.2f}: audit a larger model or graph, or pass more runs (dpaudit canary --runs)"
        )
        return RefutingPlan(
            **base,
            canaries=per_run,
            runs=runs,
            certifiable=ceiling,
            can_refute=False,
            estimated_seconds=seconds,
            advice=advice,
        )
    return RefutingPlan(
        **base, canaries=per_run, runs=runs, certifiable=ceiling, can_refute=True, estimated_seconds=seconds
    )


def _spread(total: int, capacity: int | None, delta: float, confidence: float, target: float) -> tuple[int, int]:
    """(canaries per run, runs): ``total`` canaries in as few runs as ``capacity`` allows, with runs
    added while the pooled ceiling stays at most ``target`` (up to :data:`MAX_RUNS`)."""
    if capacity is None or total <= capacity:
        return total, 1
    runs = math.ceil(total / capacity)
    while runs < MAX_RUNS and _ceiling(capacity, runs, delta, confidence) <= target:
        runs += 1
    return min(capacity, total), min(runs, MAX_RUNS)


def _advice(
    defense: str,
    kind: str,
    epsilon: float,
    delta: float,
    confidence: float,
    capacity: int | None,
    seconds_per_run: float | None,
) -> str:
    """What would suffice when no count does at ``delta``: the claim at a smaller δ."""
    suggested = min(SUGGESTED_DELTA, delta / 10)
    total = _needed(refute_target(epsilon), suggested, confidence)
    head = (
        f"at δ = {delta:.0e} the one-run tests pay about m·δ for m canaries, so not even "
        f"10,000 {kind} canaries could certify ε > {epsilon:g}"
    )
    if total is None:
        return head + "; audit a smaller ε or run the canary audit with many runs of one canary (dpaudit canary --runs)"
    per_run, runs = _spread(total, capacity, suggested, confidence, refute_target(epsilon))
    cost = "" if seconds_per_run is None else f", about {_seconds(seconds_per_run * runs)}"
    return (
        f"{head}; a claim at δ = {suggested:.0e} (pass --delta {suggested:.0e}: the noise is calibrated to it) "
        f"is tested by {per_run * runs} {kind} canaries in {runs} training(s){cost}"
    )


class _Measured(Exception):
    """Raised by :class:`_MeasureModule` to stop a run once its audited module is known."""

    def __init__(self, coordinates: int):
        super().__init__(coordinates)
        self.coordinates = coordinates


class _MeasureModule:
    """A Dirac design that counts the audited module's trainable coordinates and stops the run."""

    def __call__(self, module, params, inputs):
        raise _Measured(int(sum(p.numel() for p in params)))


def run_capacity(
    defense: str,
    kind: str,
    dataset,
    split,
    epsilon: float,
    delta: float,
    overrides: dict | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> int | None:
    """The most canaries of ``kind`` one run of ``defense`` holds on ``dataset``: the trainable
    coordinates of the DP-SGD module gradient canaries join (measured by starting the run and
    stopping it as the canaries attach: no step is trained), or for edge canaries the pairs of
    distant endpoints, each shared by at most :data:`EDGE_ENDPOINT_USES` (as many as the nodes); ``None`` for node canaries (unbounded).

    Args:
        defense: a registered defense.
        kind: the canary kind.
        dataset: the :class:`~dpaudit.data.datasets.GraphDataset` the recipe trains on.
        split: its :class:`~dpaudit.data.splits.Split`.
        epsilon: the recipe's ε.
        delta: the recipe's δ.
        overrides: the recipe's hyperparameters.
        seed: the recipe's seed.
        device: where the run would train.

    Returns:
        The capacity, or ``None`` when unbounded or the run could not be measured.
    """
    if kind == "edge":  # pairs at distance >= 3, each endpoint in at most EDGE_ENDPOINT_USES of them
        return max(1, dataset.num_nodes)
    if kind != "gradient":
        return None
    from dpaudit.app.workflows.gradient_canary import check_gradient_request
    from dpaudit.auditing import gradient_canary as game
    from dpaudit.training.dpsgd import DiracCanaries, inserting_canaries

    cls, options = check_gradient_request(defense, epsilon, 1, 1, overrides, delta, device, seed)
    hook = DiracCanaries(
        _MeasureModule(),
        game.fair_coins(seed, 0),
        seed=game.sampling_seed(seed, 0),
        module_label=options["label"],
        centre=False,
    )
    instance = cls(epsilon=epsilon, delta=delta, seed=seed, device=device, **(overrides or {}))
    try:
        with inserting_canaries(hook):
            instance.fit(dataset, split)
    except _Measured as measured:
        return measured.coordinates
    except DPAuditError as exc:
        log.info("could not measure %s's audited module: %s", defense, exc)
    return None


def run_refuting_audit(
    plan: RefutingPlan,
    dataset,
    epsilon: float,
    *,
    split: str | None,
    seed: int = 0,
    delta: float | str | None = None,
    overrides: dict | None = None,
    device: str = "auto",
    confidence: float = 0.95,
    out=None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run ``plan``'s canary audit of its defense's recipe (:func:`dpaudit.app.workflows.canary.canary_audit`,
    scores kept so that the claim can be re-tested).

    Args:
        plan: a :class:`RefutingPlan` that can refute its claim.
        dataset: the recipe's dataset.
        epsilon: the recipe's target ε (the model card's).
        split: the recipe's split specification.
        seed: the recipe's seed.
        delta: the recipe's δ (default the plan's).
        overrides: the recipe's hyperparameters.
        device: where to train.
        confidence: the audit's confidence.
        out: where to write the canary JSON (optional).
        progress: show the runs' progress bar.

    Returns:
        The canary audit's JSON document.

    Raises:
        ConfigurationError: the plan cannot refute its claim.
    """
    from dpaudit.app.workflows.canary import canary_audit

    if not plan.can_refute or plan.canaries is None:
        raise ConfigurationError(plan.line())
    return canary_audit(
        plan.defense,
        dataset,
        epsilon,
        kind=plan.kind,
        canaries=plan.canaries,
        runs=plan.runs,
        split=split,
        seed=seed,
        delta=plan.delta if delta is None else delta,
        overrides=overrides,
        device=device,
        design=dict(plan.design) or None,
        confidence=confidence,
        out=out,
        progress=progress,
    )


def model_recipe(model) -> dict[str, Any]:
    """What retrains ``model``'s recipe with canaries: its defense, target ε, δ, hyperparameter
    overrides, split specification and seed (from its card and the owner's record).

    Args:
        model: a private :class:`~dpaudit.release.model.ReleasedModel` trained by a registered defense.

    Returns:
        ``{"defense", "epsilon", "claim", "delta", "overrides", "split", "seed", "train_seconds"}``.

    Raises:
        DPAuditError: the model states no claim, or has no recipe to retrain (an adapted model).
    """
    from dpaudit.training.registry import get_defense

    card, privacy = model.card, model.privacy
    if not privacy.is_private:
        raise DPAuditError("the model states no privacy claim: there is nothing for canaries to refute")
    method = card.get("method")
    if not method or card.get("surrogate"):
        raise DPAuditError(
            "the model has no dpaudit recipe to retrain with canaries (run dpaudit canary on your "
            "training function: --train fit.py:fit)"
        )
    get_defense(str(method))
    target = card.get("target_epsilon")
    timings = model.provenance("timings") or {}
    seconds = timings.get("train_seconds")
    return {
        "defense": str(method),
        "epsilon": float(target) if isinstance(target, (int, float)) else float(privacy.epsilon),
        "claim": float(privacy.epsilon),
        "delta": float(privacy.delta),
        "overrides": dict(card.get("overrides") or {}),
        "split": (card.get("split") or {}).get("spec"),
        "seed": int(model.provenance("seed", 0) or 0),
        "train_seconds": float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) else None,
    }


def plan_for_model(model, dataset, confidence: float = 0.95) -> tuple[RefutingPlan, dict[str, Any]]:
    """The refuting canary audit of ``model``'s recipe (:func:`plan_refuting_audit`, the run's
    capacity measured on ``dataset`` by :func:`run_capacity`), and the recipe (:func:`model_recipe`).

    Args:
        model: a private released model trained by a registered defense.
        dataset: its dataset.
        confidence: the audit's confidence.

    Returns:
        ``(plan, recipe)``.

    Raises:
        DPAuditError: no recipe to retrain, or no claim.
    """
    from dpaudit.data.splits import make_split

    recipe = model_recipe(model)
    kind = canary_kind(recipe["defense"], recipe["epsilon"], recipe["overrides"])
    split = make_split(dataset, recipe["split"], recipe["seed"])
    capacity = run_capacity(
        recipe["defense"], kind, dataset, split, recipe["epsilon"], recipe["delta"], recipe["overrides"], recipe["seed"]
    )
    plan = plan_refuting_audit(
        recipe["defense"],
        recipe["claim"],
        recipe["delta"],
        kind=kind,
        capacity=capacity,
        confidence=confidence,
        overrides=recipe["overrides"],
        seconds_per_run=recipe["train_seconds"],
    )
    return plan, recipe


def refuting_canaries(
    model, dataset, *, device: str = "auto", progress: bool = False, on_plan=None
) -> list[dict[str, Any]]:
    """Plan (:func:`plan_for_model`), announce (``on_plan(plan)``, before any training) and run
    the canary audit of ``model``'s recipe able to refute its claim; the result in a list, ready
    for :func:`dpaudit.app.workflows.audit.run.audit`'s ``canaries``, or an empty list when no
    audit here can refute the claim (the plan's line says what would) or the model has no recipe.

    Args:
        model: a released model.
        dataset: its dataset.
        device: where to train.
        progress: show the runs' progress bar.
        on_plan: called with the :class:`RefutingPlan` (or the reason there is none, a string)
            before any training.

    Returns:
        The canary results.
    """
    try:
        plan, recipe = plan_for_model(model, dataset)
    except DPAuditError as exc:
        if on_plan is not None:
            on_plan(str(exc))
        return []
    if on_plan is not None:
        on_plan(plan)
    if not plan.can_refute:
        return []
    return [
        run_refuting_audit(
            plan,
            dataset,
            recipe["epsilon"],
            split=recipe["split"],
            seed=recipe["seed"],
            delta=recipe["delta"],
            overrides=recipe["overrides"],
            device=device,
            progress=progress,
        )
    ]


def study_power_lines(config, dataset) -> list[str]:
    """Before a study trains: one line per private (defense, ε) of ``config`` saying which canary
    audit will test its claim (``canaries=["auto"]``), or what would suffice where none can.

    Args:
        config: the :class:`~dpaudit.app.workflows.config.StudyConfig`.
        dataset: the study's dataset (δ = auto counts its units).

    Returns:
        The lines (empty when the study runs no ``auto`` canary audit or trains nothing private).
    """
    from dpaudit.data.splits import make_split
    from dpaudit.training.registry import get_defense

    if "auto" not in (config.canaries or []):
        return []
    split = make_split(dataset, config.split, config.seeds[0])
    lines = []
    for defense in config.defenses:
        cls = get_defense(defense)
        if cls.unit is None:
            continue
        overrides = config.overrides.get(defense) or {}
        for epsilon in sorted(e for e in config.epsilons if math.isfinite(e)):
            try:
                delta = cls(epsilon=epsilon, delta=config.delta, device="cpu", **overrides).resolve_delta(
                    dataset, split
                )
                lines.append(plan_refuting_audit(defense, epsilon, delta, overrides=overrides).line())
            except DPAuditError as exc:
                lines.append(f"{defense} at ε = {epsilon:g}: no canary audit ({exc})")
    return lines
