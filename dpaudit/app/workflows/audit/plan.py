"""The audit plan, before any work: which attacks run in which order (strongest first), with
which settings, and how long they should take — the cost model (:data:`_COST`), calibrated on the
audited model itself (:func:`calibrate`: one warm shadow model, one query) — and the refusal of a
plan too long to start without ``allow_long`` (:func:`check_plan_duration`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from dpaudit.app.workflows.audit.formatting import format_seconds
from dpaudit.app.workflows.audit.queries import charges_queries, query_plan, query_plan_line
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.progress import load_factor, load_note

# ``audit(..., quick=True)``: a first look in about a minute on a Cora-sized graph, with each
# attack's declared quick settings (:attr:`attacks.AttackDeclaration.quick`) over these common
# ones. Settings the caller gives explicitly always win.
QUICK_COMMON: dict[str, Any] = {"n_boot": 200}


# Cost model of the plan's time estimate, in CPU seconds (what an idle core spends; a loaded
# machine stretches the wall time, which the progress bar's ETA then follows). Two costs are
# measured on the audited model itself when the plan is made (:func:`calibrate`): one shadow
# model trained warm with the target's recipe, and one query of a perturbed copy of the graph.
# Each attack declares what it costs beside those two (:attr:`attacks.AttackDeclaration.cost`,
# set from per-attack CPU times of gcn audits of Cora); these are the costs every attack pays.
# benchmarks/bench_estimates.py reports each attack's residual (actual − estimate) to check
# and refit them (benchmarks/results/estimates.md).
_COST = {
    "fixed": 0.05,  # per attack: the dataset, the split and the result's statistics
    "per_boot": 2e-4,  # per bootstrap draw of the result's confidence intervals
}


#: the trial trains with 1/TRIAL_FRACTION of each epoch count, then twice that
TRIAL_FRACTION = 20


def _epoch_counts(method: str, hyperparameters: dict[str, Any], card: dict) -> dict[str, int] | None:
    """The recipe's epoch counts (the settings its defense declares,
    :attr:`dpaudit.training.defense.Defense.epoch_settings`); an automatic count (``None``, e.g.
    mlp-dp's preset) is read from the card's resolved configuration. ``None`` when unknown."""
    from dpaudit.training.registry import get_defense

    try:
        declared = get_defense(method).epoch_settings
    except DPAuditError:
        return None
    counts = {}
    for key in declared:
        value = hyperparameters.get(key)
        if value is None:
            value = (card.get(method.replace("-", "_")) or {}).get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return None
        counts[key] = value
    return counts or None


class _RecipeWith:
    """What :func:`attacks._common.train_shadow` reads of a model (its card and privacy), with
    the recipe's hyperparameters replaced: the trial trains exactly as a shadow does."""

    def __init__(self, model, changes: dict[str, Any]):
        self.privacy = model.privacy
        self.card = dict(model.card)
        if self.card.get("surrogate"):
            surrogate = dict(self.card["surrogate"])
            surrogate["hyperparameters"] = {**(surrogate.get("hyperparameters") or {}), **changes}
            self.card["surrogate"] = surrogate
        else:
            self.card["hyperparameters"] = {**(self.card.get("hyperparameters") or {}), **changes}


def _cpu_seconds(fn, *args) -> float:
    """CPU seconds of ``fn(*args)`` on one torch thread: on a busy machine the CPU time of
    several threads counts their spinning at every barrier (10-20× a shadow's cost measured
    with 2 threads on a 2-core machine at load 5), one thread's does not."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.process_time()
        fn(*args)
        return time.process_time() - start
    finally:
        torch.set_num_threads(threads)


def _shadow_trial(model, dataset, device: str) -> dict[str, float] | None:
    """Warm CPU seconds of one shadow model, from short trainings with the target's recipe.

    A warm-up training first (torch's first calls, caches), then ``c`` epochs, ``2c`` epochs
    and ``c`` epochs again (``c`` = 1/:data:`TRIAL_FRACTION` of the recipe's): the difference
    of the warm runs is the cost of ``c`` epochs, the last run the fixed cost beside them, and
    the first ``c`` run's excess over the last the one-time cost (a DP recipe's noise
    calibration, memoised) that only the audit's first shadow pays. ``None`` when the recipe's
    epochs are unknown or it cannot be rebuilt from the card (the attacks will say why)."""
    import torch

    from attacks import _common as C

    try:
        method, hyperparameters, _, _, _ = C.shadow_recipe(model)
    except DPAuditError:
        return None
    counts = _epoch_counts(method, hyperparameters, model.card)
    if counts is None:
        return None
    short = {k: max(1, v // TRIAL_FRACTION) for k, v in counts.items()}
    double = {k: min(2 * short[k], counts[k]) for k in counts}
    # the attacks' shadow and reference sets hold a quarter of the target's training size or
    # so (235 to 672 nodes on Cora, of 2031): the DP-SGD cost per epoch grows with it
    declared = (model.privacy.public_facts or {}).get("num_train") or dataset.num_nodes // 2
    size = max(2, min(int(declared) // 4, dataset.num_nodes // 2))
    order = torch.randperm(dataset.num_nodes, generator=torch.Generator().manual_seed(0))
    members, non_members = order[:size].sort().values, order[size : 2 * size].sort().values

    def fit(epochs: dict[str, int]) -> None:
        C.train_shadow(_RecipeWith(model, epochs), dataset, members, non_members, seed=0, device=device)

    try:
        _cpu_seconds(fit, double)
        first = _cpu_seconds(fit, short)
        twice = _cpu_seconds(fit, double)
        once = _cpu_seconds(fit, short)
    except DPAuditError:
        return None
    per_short = max(twice - once, 0.0) * sum(short.values()) / max(sum(double.values()) - sum(short.values()), 1)
    scale = sum(counts.values()) / sum(short.values())
    return {"shadow": once + (scale - 1.0) * per_short, "first_shadow_extra": max(first - once, 0.0)}


def _query_seconds(model, dataset) -> float:
    """Warm CPU seconds of one LinkTeller query: a node's features moved in place and the node
    and another target queried, with their unperturbed twin (what LinkTeller asks for each node
    it moves; the node is among its own targets, so a query-charged model answers with a new
    release, as for every target the move reaches; a query session is asked and the model
    itself is unchanged). Nothing is copied: the row is restored after."""
    import numpy as np

    from attacks import _common as C
    from attacks.linkteller import FeatureProbe

    target = model.query_session() if charges_queries(model) else model
    graph = dataset.data
    probe = FeatureProbe(graph, 1e-2, 0)
    count = int(graph.num_nodes)

    def query(node: int) -> None:
        targets = np.array([node % count, (node + 1) % count])
        C.posteriors(target, graph, targets)
        probe.posteriors(target, node % count, targets)

    _cpu_seconds(query, 0)
    return sorted(_cpu_seconds(query, node) for node in (1, 2, 3))[1]


def calibrate(model, dataset, device: str = "auto", shadows: bool = True) -> dict[str, Any]:
    """The measured costs the plan's estimate scales (CPU seconds): ``shadow`` (one warm shadow
    model), ``first_shadow_extra`` (paid once), ``query`` (one perturbed full-graph query),
    ``shadow_source`` and ``seconds`` (what measuring took).

    ``shadow_source`` says where the shadow cost comes from: ``"trial"`` (measured warm,
    :func:`_shadow_trial`), ``"recorded"`` (an uncalibrated recipe: the target's recorded
    training time, cold, so an upper estimate), ``"guess"`` (neither: a size guess) or
    ``"none"`` (``shadows=False``: no planned attack trains one).

    Args:
        model: the target released model.
        dataset: its graph.
        device: torch device of the shadow trial.
        shadows: measure a shadow model (``False`` when no planned attack trains one).

    Returns:
        The costs above.
    """
    start = time.perf_counter()
    trial = _shadow_trial(model, dataset, device) if shadows else {"shadow": 0.0, "first_shadow_extra": 0.0}
    costs: dict[str, Any] = {"shadow_source": "trial" if shadows else "none"}
    if trial is None:
        timings = model.provenance("timings") or {}
        seconds = timings.get("train_seconds")
        recorded = isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0
        costs["shadow_source"] = "recorded" if recorded else "guess"
        if not recorded:
            seconds = 5.0 + 2e-6 * dataset.num_nodes * max(dataset.num_features, 1)
        trial = {"shadow": float(seconds), "first_shadow_extra": 0.0}
    costs.update(trial)
    try:
        costs["query"] = _query_seconds(model, dataset)
    except DPAuditError:  # the attacks will say why the model cannot be queried
        costs["query"] = 0.0
    costs["seconds"] = time.perf_counter() - start
    return costs


#: a cell's CPU seconds beside its attacks: the target's training, evaluation and the cell's files,
#: in units of one guessed shadow model (:func:`guess_cell_seconds`)
CELL_TRAININGS = 1.0
#: CPU seconds a study worker spends once before its first cell: a spawned interpreter importing
#: torch, PyG and the attacks (benchmarks/results/estimates_load.md: without it a small compare's
#: guess was 0.43 of the time taken)
WORKER_START_SECONDS = 6.0


def guess_cell_seconds(
    attacks: list[str], settings: dict[str, dict[str, Any]], num_nodes: int, num_features: int, num_edges: int
) -> float:
    """A study cell's CPU seconds on an idle core, guessed before any model exists: one training
    of the target plus each attack's cost (:func:`_attack_cost`) with a shadow model priced by the
    graph's size (the guess :func:`calibrate` falls back to) and one query as a hundredth of it.

    Args:
        attacks: the attacks each cell runs.
        settings: per-attack settings (missing keys take the attack's defaults).
        num_nodes, num_features, num_edges: the study graph's sizes.

    Returns:
        The guessed CPU seconds of one cell; a study's ETA replaces it once a cell has finished.
    """
    shadow = 1.0 + 2e-6 * num_nodes * max(num_features, 1)
    costs = {"shadow": shadow, "query": shadow / 100}
    graph = type("Sizes", (), {"num_nodes": num_nodes, "num_edges": num_edges})()
    return CELL_TRAININGS * shadow + sum(
        _attack_cost(name, dict(settings.get(name) or {}), costs, graph)[1] for name in attacks
    )


#: CPU seconds a fresh ``train`` process spends on its first training beside the epochs: torch's
#: first calls, the lazily imported accountant and the noise calibration, the evaluation and the
#: model's files (mlp-dp, csbm 500-3,000 nodes, one thread: a first training costs about 1.3 s
#: more than the same training repeated in the process)
TRAIN_START_SECONDS = 1.5
#: CPU seconds per node of a training with a defense's default epochs, times its declared
#: :attr:`~dpaudit.training.defense.Defense.relative_cost` (fitted with one thread on csbm, 32
#: features: mlp-dp 1.3 s at 1,500 nodes, gcn 0.6 s at 1,500 and 0.9 s at 3,000, repeated in one
#: process. 8e-4, fitted at load 14-16, over-estimated an idle 1,500-node train 2.05× (6 s for 3 s);
#: 6e-4 puts the idle row and both loaded rows of benchmarks/results/estimates_load.md within 2×:
#: idle 1.6×, loaded 0.83× and 0.99× by the same load correction)
TRAIN_NODE_SECONDS = 6e-4


def guess_train_seconds(defense, num_nodes: int) -> float:
    """One ``train``'s CPU seconds on an idle core, guessed before it starts: a fresh process's
    start (:data:`TRAIN_START_SECONDS`) plus, per node, :data:`TRAIN_NODE_SECONDS` times the
    defense's declared relative cost, scaled by the epochs asked over the defaults (each of the
    defense's declared :attr:`~dpaudit.training.defense.Defense.epoch_settings` that both give as
    counts; an automatic count counts as its default).

    Args:
        defense: the defense to train (its class declarations and hyperparameters are read).
        num_nodes: the graph's nodes.

    Returns:
        The guessed CPU seconds; the training's progress lines then follow its steps.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(type(defense).hyperparameters_class)}
    asked = given = 0
    for key in type(defense).epoch_settings:
        value, default = getattr(defense.hp, key, None), defaults.get(key)
        if isinstance(value, int) and isinstance(default, int) and default > 0:
            asked, given = asked + value, given + default
    epochs = asked / given if given else 1.0
    return TRAIN_START_SECONDS + TRAIN_NODE_SECONDS * float(type(defense).relative_cost) * num_nodes * epochs


def _attack_cost(name: str, settings: dict[str, Any], costs: dict[str, float], dataset) -> tuple[int, float]:
    """(work units shown on the progress bar, estimated CPU seconds) of one attack with
    ``settings``, given the measured ``costs`` (:func:`calibrate`): what every attack pays
    (:data:`_COST`, one query) plus what the attack declares (:attr:`attacks.AttackDeclaration.cost`;
    undeclared: one shadow model per run)."""
    import attacks as attack_registry
    from attacks._common import count_setting

    boot = count_setting(settings, "n_boot", 1000)
    fixed = _COST["fixed"] + boot * _COST["per_boot"] + costs["query"]
    declared = attack_registry.declaration(name).cost
    if declared is None:
        runs = count_setting(settings, "runs", 1)
        return runs, runs * costs["shadow"] + fixed
    units, seconds = declared(settings, costs, dataset)
    return units, seconds + fixed


def order_attacks(names: list[str]) -> list[str]:
    """``names`` strongest first (each attack's declared order, :attr:`attacks.AttackDeclaration.order`),
    undeclared names (plug-ins) last in the given order.

    If the audit is stopped, what finished is what matters most: RMIA, LiRA and TSTF (reference
    or shadow models trained by the target's own recipe) are the most powerful membership attacks
    at low FPR; LinkTeller and link stealing test edges; the shadow-free threshold attack and the
    embedding probe are cheap diagnostics. Reports show attacks in the same order.

    Args:
        names: attack names.

    Returns:
        The names, reordered.
    """
    import attacks as attack_registry

    return attack_registry.order_attacks(names)


def audit_plan(
    model,
    dataset,
    names: list[str],
    settings: dict[str, dict[str, Any]],
    quick: bool = False,
    device: str = "auto",
    costs: dict[str, Any] | None = None,
) -> dict:
    """What an audit will run, in which order, and how long it should take.

    ``settings`` are the complete per-attack settings (defaults filled in by the caller).
    Returns ``{"attacks": [{"attack", "settings", "units", "estimated_seconds"}, ...],
    "estimated_seconds", "units", "quick", "shadow_seconds", "costs", "queries"}``. The
    estimate is the cost model's (:data:`_COST`) scaled by ``costs``, measured on the model
    when not given (:func:`calibrate`: a warm shadow model of the target's recipe, one query);
    it is printed before any work starts. For a query-charged model each step also says at
    most how many new releases it needs (``foreign_releases``) and ``queries`` sums them
    (:func:`query_plan`).

    Args:
        model: the target released model.
        dataset: its graph.
        names: the attacks to run.
        settings: each attack's complete settings.
        quick: the plan is of the quick preset (recorded).
        device: torch device of the calibration.
        costs: measured costs (:func:`calibrate`); ``None``: measured now.

    Returns:
        The plan (above).
    """
    import attacks as attack_registry

    ordered = order_attacks(list(names))
    shadows = {n for n in ordered if attack_registry.declaration(n).shadows}
    if costs is None:
        costs = calibrate(model, dataset, device, shadows=bool(shadows))
    steps = []
    first_shadow = True
    for name in ordered:
        full = {**attack_registry.attack_settings(name), **settings.get(name, {})}
        units, seconds = _attack_cost(name, full, costs, dataset)
        if name in shadows and first_shadow:
            seconds += costs["first_shadow_extra"]
            first_shadow = False
        shown = {
            k: full[k]
            for k in ("runs", "num_shadows", "num_references", "max_pairs", "num_pairs", "projections")
            if k in full
        }
        steps.append(
            {
                "attack": name,
                "settings": shown,
                "units": units,
                "estimated_seconds": round(seconds, 1),
                "full_settings": full,
            }
        )
    queries = query_plan(model, dataset, steps)
    for step in steps:
        del step["full_settings"]
    return {
        "attacks": steps,
        "units": sum(s["units"] for s in steps),
        "estimated_seconds": round(sum(s["estimated_seconds"] for s in steps), 1),
        "shadow_seconds": round(costs["shadow"], 2),
        "costs": {k: round(v, 4) if isinstance(v, float) else v for k, v in costs.items()},
        "quick": bool(quick),
        "queries": queries,
    }


#: an audit (or attack) estimated above this many seconds is refused unless ``--allow-long``
LONG_RUN_SECONDS = 2 * 3600


def check_plan_duration(plan: dict, allow_long: bool = False) -> None:
    """Refuse, before any attack runs, a plan (:func:`audit_plan`) estimated above
    :data:`LONG_RUN_SECONDS` on an idle machine, unless ``allow_long``; the line names the
    costliest step.

    Args:
        plan: the plan.
        allow_long: ``True`` (``--allow-long``) skips the check.

    Raises:
        ConfigurationError: the estimate is above the limit.
    """
    seconds = float(plan.get("estimated_seconds") or 0.0)
    if allow_long or seconds <= LONG_RUN_SECONDS:
        return
    step = max(plan["attacks"], key=lambda s: s["estimated_seconds"])
    opts = ", ".join(f"{k}={v}" for k, v in step["settings"].items())
    raise ConfigurationError(
        f"this would take about {format_seconds(seconds)} on an idle machine (above the {format_seconds(LONG_RUN_SECONDS)} "
        f"limit; {step['attack']} ({opts}) about {format_seconds(step['estimated_seconds'])}); lower its counts "
        "(--quick for a first look), or pass --allow-long to run it anyway"
    )


#: how :func:`format_plan` says where an uncalibrated shadow cost came from
_SHADOW_SOURCE = {
    "recorded": ", the target's recorded training time: an upper estimate",
    "guess": ", guessed from the graph's size",
}


#: CPU seconds of what an audit does beside its attacks, on an idle core: writing the report (its
#: figures) and its sidecar. 8 s (benchmarks/results/estimates.md, under load) put `audit --quick`'s
#: estimate at 2.29× the 6 s it took on an idle machine, all of it with the report
#: (benchmarks/results/estimates_load.md, issue 49): 3 s
REPORT_SECONDS = 3.0


def wall_estimate(plan: dict) -> float:
    """The plan's wall-clock seconds here and now: its attacks' CPU estimate plus the report
    (:data:`REPORT_SECONDS`), stretched by the machine's current load (:func:`dpaudit.progress.load_factor`)."""
    return (float(plan.get("estimated_seconds") or 0.0) + REPORT_SECONDS) * load_factor()


def format_plan(plan: dict) -> str:
    """The plan as a few lines of text (what ``audit`` logs and the CLI can print): the idle
    machine's estimate and, corrected for the current load, the wall time to expect."""
    lines = [
        f"audit plan: {len(plan['attacks'])} attack(s), {plan['units']} run(s), about "
        f"{format_seconds(plan['estimated_seconds'])} on an idle machine, about {format_seconds(wall_estimate(plan))} "
        f"here with the report ({load_note()}) (one shadow model ≈ "
        f"{format_seconds(plan['shadow_seconds'])}{_SHADOW_SOURCE.get((plan.get('costs') or {}).get('shadow_source'), '')})"
        + (" [quick preset]" if plan.get("quick") else "")
    ]
    for i, step in enumerate(plan["attacks"], 1):
        opts = ", ".join(f"{k}={v}" for k, v in step["settings"].items())
        cost = step.get("foreign_releases", 0)
        queries = "" if cost == 0 else f", {'?' if cost is None else f'≤ {cost}'} new query-graph release(s)"
        lines.append(f"  {i}. {step['attack']} ({opts}): ~{format_seconds(step['estimated_seconds'])}{queries}")
    queries = plan.get("queries")
    if queries:
        lines.append("  " + query_plan_line(queries))
    return "\n".join(lines)
