"""Audit one released model: the plan, progress, per-node risk and the audit result.

>>> import dpaudit
>>> report = dpaudit.audit("runs/gcn", attacks=["mia-threshold"])        # doctest: +SKIP
>>> report.to_html("audit.html")                                        # doctest: +SKIP

An audit is a one-cell study: the same report (:mod:`reports`) as a comparison.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dpaudit.app.workflows.config import content_hash, dataset_summary, now_iso
from dpaudit.app.workflows.store import CELL_SCHEMA, CELL_SCHEMA_VERSION
from dpaudit.errors import ConfigurationError, DPAuditError

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the audit plan

# ``audit(..., quick=True)``: a first look in about a minute on a Cora-sized graph. Settings the
# caller gives explicitly always win over these.
QUICK_SETTINGS: dict[str, dict[str, Any]] = {
    "*": {"n_boot": 200},
    "mia-rmia": {"num_references": 2},
    "mia-lira": {"num_shadows": 2},
    "mia-tstf": {"runs": 1},
    "link-steal": {"runs": 1, "max_pairs": 400},
    "linkteller": {"num_pairs": 100, "pr_nodes": 200},
    "embedding-probe": {"projections": ["tsne"], "max_plot_nodes": 300},
}

# Cost model of the plan's time estimate, in CPU seconds (what an idle core spends; a loaded
# machine stretches the wall time, which the progress bar's ETA then follows). Two costs are
# measured on the audited model itself when the plan is made (:func:`calibrate`): one shadow
# model trained warm with the target's recipe, and one query of a perturbed copy of the graph.
# The constants below are what is left of each attack beside those two, set from per-attack
# CPU times of gcn audits of Cora; benchmarks/bench_estimates.py reports each attack's residual
# (actual − estimate) to check and refit them (benchmarks/results/estimates.md).
_COST = {
    "fixed": 0.05,  # per attack: the dataset, the split and the result's statistics
    "per_boot": 2e-4,  # per bootstrap draw of the result's confidence intervals
    "tstf_attack_model": 0.3,  # per run: the attack MLP on the shadow nodes' posteriors
    "threshold": 0.02,  # per run: one loss per audit node
    "link_steal_per_pair": 6e-5,  # per sampled pair and run (8 distances + attack-2/3 MLP)
    "tsne_per_node": 0.004,
    "umap": 8.0,  # including numba's compilation, paid by every fresh process
}

#: the settings that count a recipe's training epochs, per defense: a shadow model's cost is
#: linear in them (full-batch or DP-SGD epochs), so a short trial measures the cost per epoch.
#: Recipes not listed (and plug-ins) are not calibrated: their estimate reads the recorded
#: training time, a cold upper estimate.
EPOCH_SETTINGS = {
    "gcn": ("epochs",),
    "sage": ("epochs",),
    "mlp": ("epochs",),
    "mlp-dp": ("epochs",),
    "gap-edp": ("encoder_epochs", "epochs"),
    "gap-ndp": ("encoder_epochs", "epochs"),
    "gap-inf": ("encoder_epochs", "epochs"),
    "dpar-gm": ("epochs",),
    "dpar-em0": ("epochs",),
    "dpar-em1": ("epochs",),
    "dpar-nodp": ("epochs",),
}
#: the trial trains with 1/TRIAL_FRACTION of each epoch count, then twice that
TRIAL_FRACTION = 20
#: attacks that train shadow (reference) models with the target's recipe
_SHADOW_ATTACKS = ("mia-rmia", "mia-lira", "mia-tstf", "embedding-probe")


def _epoch_counts(method: str, hyperparameters: dict[str, Any], card: dict) -> dict[str, int] | None:
    """The recipe's epoch counts (:data:`EPOCH_SETTINGS`); an automatic count (``None``, e.g.
    mlp-dp's preset) is read from the card's resolved configuration. ``None`` when unknown."""
    counts = {}
    for key in EPOCH_SETTINGS.get(method, ()):
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
    ``"none"`` (``shadows=False``: no planned attack trains one)."""
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


def _count(settings: dict[str, Any], key: str, default: int) -> int:
    value = settings.get(key, default)
    return default if value is None else int(value)


def _attack_cost(name: str, settings: dict[str, Any], costs: dict[str, float], dataset) -> tuple[int, float]:
    """(work units shown on the progress bar, estimated CPU seconds) of one attack with
    ``settings``, given the measured ``costs`` (:func:`calibrate`)."""
    c = _COST
    runs = _count(settings, "runs", 1)
    shadow, query = costs["shadow"], costs["query"]
    fixed = c["fixed"] + _count(settings, "n_boot", 1000) * c["per_boot"] + query
    if name == "mia-tstf":
        return runs, runs * (shadow + query + c["tstf_attack_model"]) + fixed
    if name in ("mia-lira", "mia-rmia"):
        models = _count(settings, "num_shadows" if name == "mia-lira" else "num_references", 4)
        return runs * models, runs * models * (shadow + query) + fixed
    if name == "mia-threshold":
        return runs, runs * c["threshold"] + fixed
    if name == "link-steal":
        pairs = min(_count(settings, "max_pairs", 1000), dataset.num_edges // 2 or 1)
        return runs, runs * 2 * pairs * c["link_steal_per_pair"] + fixed
    if name == "linkteller":
        pairs = min(_count(settings, "num_pairs", 250), dataset.num_edges // 2 or 1)
        per_run = min(2 * pairs, dataset.num_nodes) + (pairs if settings.get("hard_negatives", True) else 0)
        per_run += min(_count(settings, "pr_nodes", 500), dataset.num_nodes)
        return runs, runs * per_run * query + fixed
    if name == "embedding-probe":
        projections = settings.get("projections", ("tsne", "umap"))
        if isinstance(projections, str):
            projections = [p for p in projections.split(",") if p.strip()]
        nodes = min(_count(settings, "max_plot_nodes", 1000), dataset.num_nodes)
        seconds = shadow + 2 * query + (nodes * c["tsne_per_node"] if "tsne" in projections else 0.0)
        return runs, runs * seconds + (c["umap"] if "umap" in projections else 0.0) + fixed
    return runs, runs * shadow + fixed


def order_attacks(names: list[str]) -> list[str]:
    """``names`` strongest first, unknown names (plug-ins) last in the given order.

    If the audit is stopped, what finished is what matters most: RMIA, LiRA and TSTF (reference
    or shadow models trained by the target's own recipe) are the most powerful membership attacks
    at low FPR;
    LinkTeller and link stealing test edges; the shadow-free threshold attack and the embedding
    probe are cheap diagnostics. The order is :data:`reports.aggregate.ATTACK_ORDER`, the one
    reports show attacks in.
    """
    from reports.aggregate import ATTACK_ORDER

    rank = {n: i for i, n in enumerate(ATTACK_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), names.index(n)))


#: attacks whose only query of the target is one full-graph query on the audited graph
#: (their shadow and reference models are the auditor's own, never the target)
_ONE_GRAPH_QUERY = ("mia-tstf", "mia-threshold", "mia-lira", "mia-rmia", "link-steal", "embedding-probe")


def charges_queries(model) -> bool:
    """Whether ``model`` answers queries as new, accounted releases (GAP: every query graph is
    a PMA release counted in its query ledger, about the query graphs, never in its training
    ε), so an audit queries its own sessions and reports their releases."""
    return callable(getattr(model, "query_session", None))


def _foreign_releases(name: str, settings: dict[str, Any], dataset, free_graph: bool) -> int | None:
    """At most how many new releases (graphs other than what the owner's training release
    answers) attack ``name`` asks a query-charged target for; ``None`` when unknown (a plug-in).

    ``free_graph``: the audited graph is the training graph and the owner's training release is
    there, so the attacks' full-graph query costs nothing. LinkTeller, per run, queries the
    unperturbed graph once per part (pairs, hard negatives, the density protocol; free with
    ``free_graph``) and one perturbed graph per distinct node it moves in each part: a GAP
    release covers only the nodes it was asked for, so a node moved again for other targets
    is a new release."""
    base = 0 if free_graph else 1
    if name in _ONE_GRAPH_QUERY:
        return base
    if name == "linkteller":
        runs = int(settings.get("runs", 1) or 1)
        pairs = min(int(settings.get("num_pairs", 250) or 250), max(dataset.num_edges, 1))
        hard = bool(settings.get("hard_negatives", True))
        density = min(int(settings.get("pr_nodes", 0) or 0), dataset.num_nodes)
        per_run = min(2 * pairs, dataset.num_nodes) + (min(pairs, dataset.num_nodes) if hard else 0) + density
        return runs * (per_run + base * (1 + hard + bool(density)))
    return None


def query_plan(model, dataset, steps: list[dict]) -> dict | None:
    """For a query-charged model (:func:`charges_queries`), what the planned attacks cost: at
    most how many new releases they need (each step's ``foreign_releases``), whether the
    owner's training release answers the training-graph queries for free, and the query ledger
    those releases would make (``query_ledger``: about the query graphs, never added to the
    model's training ε, ``training_epsilon``). ``None`` for other models."""
    if not charges_queries(model):
        return None
    from attacks import _common as C

    release = C.training_release(model)
    free_graph = release is not None and release.is_training_graph(dataset.data)
    for step in steps:
        step["foreign_releases"] = _foreign_releases(step["attack"], step["full_settings"], dataset, free_graph)
    counts = [s["foreign_releases"] for s in steps]
    known = sum(c for c in counts if c is not None)
    return {
        "training_release": release is not None,
        "training_graph_free": free_graph,
        "releases_at_most": known,
        "unknown": [s["attack"] for s in steps if s["foreign_releases"] is None],
        "training_epsilon": model.privacy.epsilon if model.privacy.is_private else None,
        "query_ledger": _query_ledger(model, known),
    }


def _query_ledger(model, releases: int) -> dict[str, Any]:
    """``model``'s query ledger (:attr:`defenses.gap.GAPModel.query_ledger`) as JSON, with
    ``releases`` releases: what they guarantee for the query graph(s)."""
    return dataclasses.replace(model.query_ledger, releases=int(releases)).to_dict()


def audit_plan(
    model, dataset, names: list[str], settings: dict[str, dict[str, Any]], quick: bool = False,
    device: str = "auto", costs: dict[str, Any] | None = None,
) -> dict:  # fmt: skip
    """What an audit will run, in which order, and how long it should take.

    ``settings`` are the complete per-attack settings (defaults filled in by the caller).
    Returns ``{"attacks": [{"attack", "settings", "units", "estimated_seconds"}, ...],
    "estimated_seconds", "units", "quick", "shadow_seconds", "costs", "queries"}``. The
    estimate is the cost model's (:data:`_COST`) scaled by ``costs``, measured on the model
    when not given (:func:`calibrate`: a warm shadow model of the target's recipe, one query);
    it is printed before any work starts. For a query-charged model each step also says at
    most how many new releases it needs (``foreign_releases``) and ``queries`` sums them
    (:func:`query_plan`).
    """
    import attacks as attack_registry

    ordered = order_attacks(list(names))
    if costs is None:
        costs = calibrate(model, dataset, device, shadows=any(n in _SHADOW_ATTACKS for n in ordered))
    steps = []
    first_shadow = True
    for name in ordered:
        full = {**attack_registry.attack_settings(name), **settings.get(name, {})}
        units, seconds = _attack_cost(name, full, costs, dataset)
        if name in _SHADOW_ATTACKS and first_shadow:
            seconds += costs["first_shadow_extra"]
            first_shadow = False
        shown = {k: full[k] for k in ("runs", "num_shadows", "num_references", "max_pairs", "num_pairs", "projections")
                 if k in full}  # fmt: skip
        steps.append({"attack": name, "settings": shown, "units": units, "estimated_seconds": round(seconds, 1),
                      "full_settings": full})  # fmt: skip
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
    costliest step."""
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


def format_seconds(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


#: how :func:`format_plan` says where an uncalibrated shadow cost came from
_SHADOW_SOURCE = {
    "recorded": ", the target's recorded training time: an upper estimate",
    "guess": ", guessed from the graph's size",
}


def format_plan(plan: dict) -> str:
    """The plan as a few lines of text (what ``audit`` logs and the CLI can print)."""
    lines = [
        f"audit plan: {len(plan['attacks'])} attack(s), {plan['units']} run(s), about "
        f"{format_seconds(plan['estimated_seconds'])} on an idle machine (one shadow model ≈ "
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


def query_plan_line(queries: dict) -> str:
    """One line on what a query-charged model's audit costs (:func:`query_plan`)."""
    free = ("training-graph queries read the owner's training release (free)" if queries["training_graph_free"]
            else "no owner's training release for the audited graph: every query is charged")  # fmt: skip
    text = f"query-charged model: the attacks need at most {queries['releases_at_most']} new release(s); {free}"
    ledger = queries.get("query_ledger") or {}
    if ledger.get("epsilon") is not None and queries["releases_at_most"]:
        text += (f"; their releases go to the query-graph ledger (ε ≤ {ledger['epsilon']:.4g} at δ = "
                 f"{ledger['delta']:.3g}, about the query graphs; the model's training ε = "
                 f"{queries['training_epsilon']:.4g} is unchanged)")  # fmt: skip
    if queries["unknown"]:
        text += f"; unknown for {', '.join(queries['unknown'])}"
    return text


class _AuditProgress:
    """One bar over every attack × run, with an ETA; log lines instead when there is no terminal.

    The ETA is the plan's estimate of what is left, scaled by how fast the finished part went
    compared with its estimate (so a loaded machine gets a longer, honest ETA).
    """

    def __init__(self, plan: dict, enabled: bool | None):
        from tqdm.auto import tqdm

        self.plan = plan
        self.start = time.perf_counter()
        self.done_estimate = 0.0
        self.tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        show = self.tty if enabled is None else enabled
        self.bar = tqdm(total=plan["units"], desc="audit", unit="run", disable=not show, leave=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} runs [{elapsed}{postfix}]")  # fmt: skip

    def eta(self) -> float:
        elapsed = time.perf_counter() - self.start
        left = self.plan["estimated_seconds"] - self.done_estimate
        if self.done_estimate <= 0:
            return left
        return left * elapsed / self.done_estimate

    def starting(self, step: dict, index: int) -> None:
        self.bar.set_postfix_str(f"eta {format_seconds(self.eta())}, {step['attack']}", refresh=True)
        log.info("audit: %d/%d %s starting (~%s); about %s left", index + 1, len(self.plan["attacks"]),
                 step["attack"], format_seconds(step["estimated_seconds"]), format_seconds(self.eta()))  # fmt: skip

    def finished(self, step: dict, index: int, seconds: float, ok: bool) -> None:
        self.done_estimate += step["estimated_seconds"]
        self.bar.update(step["units"])
        self.bar.set_postfix_str(f"eta {format_seconds(self.eta())}", refresh=True)
        log.info("audit: %d/%d %s %s in %s; about %s left", index + 1, len(self.plan["attacks"]), step["attack"],
                 "done" if ok else "not run", format_seconds(seconds), format_seconds(self.eta()))  # fmt: skip

    def close(self) -> None:
        self.bar.close()


def _run_interruptibly(fn, *args, **kwargs):
    """Run ``fn`` in a daemon thread and wait for it in short slices, so that Ctrl-C reaches the
    caller within a fraction of a second even while the attack is inside compiled code (t-SNE,
    UMAP, a BLAS call) that checks no signal. The abandoned thread dies with the process."""
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="dpaudit-attack", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]


# --------------------------------------------------------------------------- per-node risk


#: the FPR of the nodes-at-risk threshold: 1 %, as every other TPR in the report (TPR at 1 % FPR)
NODE_RISK_FPR = 0.01


def node_risk(
    model, dataset, split, seed: int = 0, max_members: int | None = None, top: int = 10, bins: int = 30
) -> dict[str, Any] | None:
    """Per-node membership risk from the loss-threshold attack (``mia-threshold``, run 0).

    An :class:`~dpaudit.auditing.results.AttackResult` keeps aggregate statistics and a down-sampled ROC,
    not per-node scores, so the per-node view is recomputed here from the one attack whose
    scores are a deterministic function of the released model: the score of node v is
    :math:`\\operatorname{logit} p_{y_v}(v)` on one full-graph query (a monotone transform of the
    loss score :math:`\\log p_{y_v}(v)`, so every ranking and AUC is the same, but spread out near
    :math:`p = 1` where members pile up), over the same members and non-members as
    ``mia-threshold``'s run 0 (:func:`dpaudit.data.splits.membership_partition` with ``seed``).

    Returns score histograms (members vs non-members), the ``top`` members with the highest
    scores (the nodes most exposed) and, per degree bucket, the AUC and the TPR at the
    threshold that gives 1 % FPR over all non-members (the level every other TPR in the report uses). None when no membership set exists.
    """
    import numpy as np

    from attacks import _common as C
    from attacks.membership import threshold_scores
    from dpaudit.auditing.statistics import auc

    try:
        part = C.partition(dataset, split, seed, max_members, 1)
    except DPAuditError:
        return None
    nodes, labels = part.target.nodes_and_labels()
    nodes, labels = nodes.numpy(), labels.numpy().astype(int)
    y = dataset.data.y.numpy()
    probs = C.posteriors(model, dataset.data)
    p_true = np.clip(np.exp(threshold_scores(probs[nodes], y[nodes])["loss"]), 1e-12, 1 - 1e-12)
    scores = np.log(p_true) - np.log1p(-p_true)  # logit p_y: monotone in the loss score, spread out near p = 1
    degree = np.bincount(dataset.data.edge_index[0].cpu().numpy(), minlength=dataset.num_nodes)[nodes]
    members, others = scores[labels == 1], scores[labels == 0]
    lo, hi = float(np.min(scores)), float(np.max(scores))
    if hi <= lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, bins + 1)
    threshold = float(np.quantile(others, 1.0 - NODE_RISK_FPR)) if len(others) else math.inf  # 1 % of non-members above it
    buckets = []
    bounds = [(0, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, None)]
    for low, high in bounds:
        inside = (degree >= low) & (degree <= (high if high is not None else np.inf))
        m, o = int(np.sum(inside & (labels == 1))), int(np.sum(inside & (labels == 0)))
        if m + o == 0:
            continue
        bucket_auc = auc(scores[inside], labels[inside]) if m and o else None
        tpr = float(np.mean(scores[inside & (labels == 1)] > threshold)) if m else None
        buckets.append({"degree": f"{low}–{high}" if high is not None else f"≥ {low}", "members": m,
                        "non_members": o, "auc": bucket_auc, "tpr_at_fpr": tpr})  # fmt: skip
    order = np.argsort(-members)[:top]
    member_nodes, member_degree = nodes[labels == 1], degree[labels == 1]
    above = float(np.max(others)) if len(others) else math.inf
    exposed = [
        {"node": int(member_nodes[i]), "degree": int(member_degree[i]), "label": int(y[member_nodes[i]]),
         "score": float(members[i]), "above_every_non_member": bool(members[i] > above),
         "fraction_of_non_members_below": float(np.mean(others < members[i])) if len(others) else None}
        for i in order
    ]  # fmt: skip
    return {
        "attack": "mia-threshold",
        "score": "logit p_y(v) (monotone in the loss score log p_y(v)), higher = member",
        "seed": seed,
        "source": "recomputed from the released model (attack results keep no per-node scores)",
        "members": int(len(members)),
        "non_members": int(len(others)),
        "auc": auc(scores, labels),
        "histogram": {
            "edges": edges.tolist(),
            "members": np.histogram(members, edges)[0].tolist(),
            "non_members": np.histogram(others, edges)[0].tolist(),
        },  # fmt: skip
        "fpr_level": NODE_RISK_FPR,
        "threshold_at_fpr": threshold,
        "most_exposed": exposed,
        "by_degree": buckets,
    }


# --------------------------------------------------------------------------- canary evidence

#: keys a canary audit's JSON must hold to be weighed against a model's claim
_CANARY_KEYS = ("kind", "unit", "target_epsilon", "dataset", "bound_valid", "certified_epsilon_lower_bound")


def check_canary_results(model, canaries) -> list[dict[str, Any]]:
    """Refuse, before any work and in one line, canary audit results (``dpaudit canary`` JSON,
    :func:`dpaudit.app.workflows.canary.canary_audit` dicts, :meth:`dpaudit.GradientCanaries.result`
    records) that do not audit ``model``'s claim: another schema, another unit, another ε, another
    dataset or none named. Returns them as dicts."""
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
        if not isinstance(res, dict) or res.get("schema") != CANARY_SCHEMA or res.get("version") != CANARY_SCHEMA_VERSION:
            raise ConfigurationError(f"{where}: not a canary audit result (schema {CANARY_SCHEMA!r} version "
                                     f"{CANARY_SCHEMA_VERSION} expected)")  # fmt: skip
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
            raise ConfigurationError(f"{where} names no dataset, the model was trained on {dataset!r}: name it "
                                     "(GradientCanaries: features=<the GraphDataset> or result(dataset=...))")  # fmt: skip
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
    words it. Keyed ``"<kind> canaries"`` (``#i`` appended when several share a kind)."""
    import numpy as np

    from attacks.canary import audited_claim
    from dpaudit.auditing.estimators import audit_epsilon
    from dpaudit.auditing.results import CLAIM_REFUTED, ESTIMATE_VERDICT

    privacy = model.privacy
    refuted_word = CLAIM_REFUTED if privacy.hypothesis else "guarantee broken"
    k = len(canaries)
    out: dict[str, dict[str, Any]] = {}
    for i, res in enumerate(canaries, 1):
        kind = str(res["kind"])
        valid, why, claim, claim_delta = audited_claim(privacy.unit, kind, privacy.epsilon, privacy.delta)
        confidence = 1.0 - (1.0 - float(res.get("confidence", 0.95))) / k
        entry = {
            "schema": res.get("schema"), "version": res.get("version"), "recipe": res.get("defense") or res.get("source"),
            "dataset": res.get("dataset"), "kind": kind, "canaries": res.get("canaries"), "runs": res.get("runs"),
            "claimed_epsilon": claim, "claim_delta": claim_delta, "claim_status": privacy.status,
            "confidence": confidence, "source_verdict": res.get("verdict"), "auc": res.get("auc"),
            "multiple_testing": {"canary_results": k},
        }  # fmt: skip
        valid = valid and bool(res.get("bound_valid"))
        scores, included, run_ids = res.get("scores"), res.get("included"), res.get("run_ids")
        if scores is not None and included is not None and len(scores) == len(included) and len(scores):
            y = np.asarray(included, dtype=bool)
            estimators = ("one-run", "one-run-fdp", "one-run-fdp-gaussian") if y.all() or not y.any() else None
            audit = audit_epsilon(
                np.asarray(scores, dtype=float), y, delta=min(claim_delta, 0.5), confidence=confidence,
                run_ids=None if run_ids is None else np.asarray(run_ids), estimators=estimators,
                claimed_epsilon=claim if valid else None,
            )  # fmt: skip
            entry.update(
                recomputed=True, epsilon_lower_bound=audit["epsilon_lower_bound"], delta=audit["delta"],
                certified_epsilon_lower_bound=audit["certified_epsilon_lower_bound"],
                max_possible=audit.get("max_possible"), can_refute_claim=audit.get("can_refute_claim"),
            )  # fmt: skip
            refuted, estimate = audit.get("claim_refuted"), audit.get("estimate_exceeds_claim")
        elif k == 1 and float(res.get("delta") or 0.0) >= claim_delta:
            certified = res["certified_epsilon_lower_bound"]
            entry.update(
                recomputed=False, epsilon_lower_bound=res.get("epsilon_lower_bound"), delta=res.get("delta"),
                certified_epsilon_lower_bound=certified, max_possible=res.get("max_possible"),
                can_refute_claim=res.get("can_refute_claim"),
            )  # fmt: skip
            refuted = certified is not None and certified > claim
            estimate = res.get("verdict") == ESTIMATE_VERDICT
        else:
            entry.update(recomputed=False, epsilon_lower_bound=res.get("epsilon_lower_bound"), delta=res.get("delta"),
                         certified_epsilon_lower_bound=res.get("certified_epsilon_lower_bound"))  # fmt: skip
            valid = False
            why = ("the result keeps no scores, and its bound is at δ = "
                   f"{res.get('delta')} below the claim's δ = {claim_delta:.3g} or beside other results: "
                   "rerun the canary audit with its scores kept")  # fmt: skip
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


# --------------------------------------------------------------------------- the audit


class AuditResult:
    """Every attack run against one released model.

    Attributes:
        model: the audited :class:`~dpaudit.release.model.ReleasedModel`.
        dataset: the dataset the attacks ran on.
        results: attack name → :class:`~dpaudit.auditing.results.AttackResult`.
        errors: attack name → why it could not run on this model.
        seconds: attack name → wall-clock seconds.
        cpu_seconds: attack name → CPU seconds of this process (user + system), the measure that
            a loaded machine does not inflate.
        plan: what was planned (:func:`audit_plan`), with the estimate made before any work.
        interrupted: True when Ctrl-C stopped the audit; ``results`` holds what finished.
        node_risk: per-node membership diagnostics (:func:`node_risk`) or None.
        query_api: for a query-charged model, what its queries would cost an interactive API
            (:func:`query_api_finding`); None otherwise. ``model.privacy`` stays the saved spec.
        canaries: the canary audits given to :func:`audit` re-tested against the model's claim
            (:func:`canary_evidence`); they enter the model's verdict.
    """

    def __init__(self, model, dataset, results: dict, errors: dict, seconds: dict, metrics: dict, command=None,
                 plan: dict | None = None, interrupted: bool = False, node_risk: dict | None = None,
                 query_api: dict | None = None, cpu_seconds: dict | None = None,
                 canaries: dict | None = None):  # fmt: skip
        self.model = model
        self.dataset = dataset
        self.results = results
        self.errors = errors
        self.seconds = seconds
        self.cpu_seconds = dict(cpu_seconds or {})
        self.metrics = metrics
        self.command = command
        self.plan = plan
        self.interrupted = interrupted
        self.node_risk = node_risk
        self.query_api = query_api
        #: canary audits of the model's claim (:func:`canary_evidence`), by ``"<kind> canaries"``
        self.canaries = dict(canaries or {})

    @property
    def skipped(self) -> list[str]:
        """Planned attacks that never ran (the audit was interrupted first)."""
        ran = set(self.results) | set(self.errors)
        return [s["attack"] for s in (self.plan or {}).get("attacks", []) if s["attack"] not in ran]

    def record(self, with_artifacts: bool = True) -> dict[str, Any]:
        """The audit as one study cell record (see :mod:`dpaudit.app.workflows.study`)."""
        card = self.model.card
        privacy = self.model.privacy
        target = card.get("target_epsilon")
        attacks = {}
        for name, res in self.results.items():
            d = res.to_dict()
            if not with_artifacts:
                d.pop("artifacts", None)
            attacks[name] = d
        return {
            "schema": CELL_SCHEMA,
            "version": CELL_SCHEMA_VERSION,
            "cell_id": f"audit-{content_hash({'card': card, 'privacy': privacy.to_dict()})}",
            "config_hash": None,
            "status": "done",
            "defense": str(card.get("method") or self.model.kind),
            "epsilon": target if target is not None else (privacy.epsilon if privacy.is_private else None),
            "seed": int(self.model.provenance("seed", 0) or 0),
            "dataset": {k: v for k, v in dataset_summary(self.dataset).items() if k != "info"},
            "split": self.model.provenance("split") or card.get("split"),
            "privacy": privacy.to_dict(),
            "metrics": self.metrics,
            "card": {k: card.get(k) for k in ("method", "hyperparameters", "inference", "target_epsilon", "surrogate")}
            | {"device": self.model.provenance("device")},  # fmt: skip
            "overrides": card.get("overrides") or {},
            "attacks": attacks,
            "attack_errors": dict(self.errors),
            "attack_seconds": dict(self.seconds),
            "attack_cpu_seconds": dict(self.cpu_seconds),
            "interrupted": self.interrupted,
            "skipped_attacks": self.skipped,
            "plan": self.plan,
            "node_risk": self.node_risk,
            "query_api": self.query_api,
            "canaries": self.canaries,
            "error": None,
            "seconds": sum(self.seconds.values()),
            "started_at": None,
            "finished_at": now_iso(),
            "run_id": None,
            "worker": None,
        }

    def report_meta(self) -> dict[str, Any]:
        from dpaudit import __version__
        from dpaudit.runtime import library_versions

        card = self.model.card
        return {
            "title": f"dpaudit audit of {card.get('method') or self.model.kind} on {self.dataset.name}",
            "kind": "audit",
            "dataset": dataset_summary(self.dataset),
            "defenses": [str(card.get("method") or self.model.kind)],
            "attacks": list(self.results) + list(self.errors),
            "train_command": train_command(card, seed=self.model.provenance("seed", 0)),
            "reproducibility": {
                "dpaudit_version": __version__,
                "config_hash": self.record(with_artifacts=False)["cell_id"],
                "dataset_fingerprint": self.dataset.fingerprint,
                "seeds": [self.model.provenance("seed")],
                "split": (card.get("split") or {}).get("spec"),
                "delta": self.model.privacy.delta,
                "created": now_iso(),
                "command": self.command,
                "versions": card.get("library_versions") or library_versions(),
                "config": {"model_card": {k: v for k, v in card.items() if k not in ("library_versions",)},
                           "attack_settings": {n: r.settings for n, r in self.results.items()},
                           "plan": self.plan},
            },
        }  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return self.record(with_artifacts=False)

    def to_html(self, path: str | Path) -> Path:
        """Write the HTML report and its JSON sidecar (``.json`` next to it)."""
        from reports.render import write_report

        html, _ = write_report([self.record()], self.report_meta(), path)
        return html

    def __repr__(self) -> str:
        aucs = ", ".join(f"{n}: AUC {r.auc:.3f}" for n, r in self.results.items() if r.auc is not None)
        extra = f", errors: {len(self.errors)}" if self.errors else ""
        extra += ", interrupted" if self.interrupted else ""
        return f"AuditResult({self.model.method}, {aucs or 'no result'}{extra})"


def train_command(card: dict, split: str = "random:0.75,0.1,0.15", seed: int | None = 0) -> str | None:
    """The ``dpaudit train`` command that retrains this card's recipe on a random split (the
    split that makes membership ε lower bounds valid audits); None for models without a recipe."""
    method = card.get("method")
    dataset = (card.get("dataset") or {}).get("name")
    if not method or not dataset or card.get("surrogate"):
        return None
    target = card.get("target_epsilon")
    parts = ["dpaudit", "train", "--defense", str(method), "--dataset", str(dataset)]
    if target is not None:
        parts += ["--epsilon", f"{target:g}" if isinstance(target, (int, float)) else str(target)]
    parts += ["--split", split, "--seed", str(card.get("seed", seed or 0)), "--out", f"{method}-random-split"]
    return shlex.join(parts)


def audit(
    model,
    dataset=None,
    attacks: list[str] | str | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    data_root: str | None = None,
    device: str = "auto",
    command: str | None = None,
    quick: bool = False,
    progress: bool | None = None,
    on_plan=None,
    canaries=None,
    **common: Any,
) -> AuditResult:
    """Run every applicable attack (or ``attacks``) against ``model`` (a ReleasedModel or its folder).

    ``dataset`` defaults to the one named in the model card (its fingerprint is checked).
    Settings: ``settings={"mia-tstf": {"runs": 2}}`` per attack; any other keyword (e.g.
    ``runs=2``) goes to every attack that accepts it. ``quick=True`` starts from
    :data:`QUICK_SETTINGS` (explicit settings still win). An attack that does not apply to the
    model (a :class:`~dpaudit.errors.DPAuditError`) is recorded in ``errors``; unknown attack
    names or settings raise :class:`~dpaudit.errors.ConfigurationError`.

    Attacks run strongest first (:func:`order_attacks`). The plan (:func:`audit_plan`) is logged
    at INFO before any work, handed to ``on_plan(plan)`` when given (e.g. the CLI printing
    :func:`format_plan`), and returned in ``result.plan``; ``progress`` shows one bar over
    every attack × run (default: when stderr is a terminal). Ctrl-C stops within a fraction of
    a second and returns what finished, with ``result.interrupted`` set.

    A query-charged model (GAP: every query graph is a new release counted in its query ledger)
    is audited on sessions: the plan states at most how many new releases each attack needs
    (:func:`query_plan`); each step queries its own query session, whose training-graph queries
    read the owner's training release (free) when the owner's record is there; the sessions'
    releases are one finding, ``result.query_api`` (their query ledger: about the query graphs,
    never the training data), logged as one warning line. The model's spec — the report's
    headline guarantee — is its training spec, which no query changes.

    ``canaries``: canary audit results of the model's recipe (``dpaudit canary`` JSON files or
    the dicts :func:`~dpaudit.app.workflows.canary.canary_audit` returns) at the model's claimed
    unit, ε and dataset; they are re-tested against the model's claim (:func:`canary_evidence`)
    and enter its verdict: a valid certified bound above a user's or a paper's claim is "claim
    refuted". A mismatched or malformed result is refused in one line before any attack runs.
    """
    import attacks as attack_registry
    from attacks import _common as C
    from dpaudit.app.pipeline import evaluate
    from dpaudit.release.model import ReleasedModel, load
    from dpaudit.release.provenance import resolve_dataset, target_split

    if isinstance(model, (str, Path)):
        model = load(model)
    if not isinstance(model, ReleasedModel):
        raise DPAuditError("audit expects a dpaudit ReleasedModel or the folder of a saved one")
    canary_results = check_canary_results(model, canaries)
    if isinstance(dataset, str):  # a name or graph file: the options recorded at training come back with it
        from dpaudit.data.datasets import reload_dataset

        dataset = reload_dataset(model.card.get("dataset"), model.provenance("dataset"), dataset, root=data_root)
    dataset = resolve_dataset(model, dataset, data_root)
    names = attacks.split(",") if isinstance(attacks, str) else list(attacks or attack_registry.available_attacks())
    names = order_attacks(list(dict.fromkeys(n.strip() for n in names if n.strip())))
    settings = {k: dict(v) for k, v in (settings or {}).items()}
    for name in names:
        attack_registry.get_attack(name)
    for name in settings:
        if name not in names:
            raise ConfigurationError(f"settings given for attack {name!r}, which is not being run")
    unused = set(common) - {k for name in names for k in attack_registry.attack_settings(name)}
    if unused:
        raise ConfigurationError(f"no attack accepts the settings {sorted(unused)}")
    plans = {}
    for name in names:
        known = attack_registry.attack_settings(name)
        plan = {}
        if quick:
            preset = {**QUICK_SETTINGS.get("*", {}), **QUICK_SETTINGS.get(name, {})}
            plan.update({k: v for k, v in preset.items() if k in known})
        plan.update({k: v for k, v in common.items() if k in known})
        defaults = {"device": device, "data_root": data_root}
        plan.update({k: v for k, v in defaults.items() if k in known and v is not None and k not in plan})
        plan.update(settings.get(name, {}))
        attack_registry.check_setting_types(name, plan)
        plans[name] = plan
    plan = audit_plan(model, dataset, names, plans, quick=quick, device=device)
    log.info("%s", format_plan(plan))
    if on_plan is not None:
        on_plan(plan)
    charged = charges_queries(model)
    releases: dict[str, int] = {}
    counted: list[tuple[str, Any]] = []  # (audit step, the query session it queried)

    def target_for(what: str):
        """The model an audit step queries: for a query-charged model a fresh query session
        (its own query ledger and memo: what the step releases is counted, the model unchanged);
        for any other model the model itself."""
        if not charged:
            return model
        twin = model.query_session()
        counted.append((what, twin))
        return twin

    try:
        split = target_split(model, dataset)
        metrics = {**evaluate(C.OwnerView(target_for("accuracy")), dataset, split), "n_train": len(split.train),
                   "n_val": len(split.val), "n_test": len(split.test)}  # fmt: skip
    except DPAuditError:
        split, metrics = None, {}
    results, errors, seconds, cpu_seconds = {}, {}, {}, {}
    interrupted = False
    bar = _AuditProgress(plan, progress)
    try:
        for index, step in enumerate(plan["attacks"]):
            name = step["attack"]
            bar.starting(step, index)
            start, cpu_start = time.perf_counter(), time.process_time()
            ok = False
            try:
                target = target_for(name)
                results[name] = _run_interruptibly(attack_registry.run, name, target, dataset, **plans[name])
                ok = True
            except ConfigurationError:
                raise
            except DPAuditError as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # a bug in one attack must not cost the others' results
                log.exception("attack %s failed", name)
                errors[name] = f"{type(exc).__name__}: {exc}"
            seconds[name] = time.perf_counter() - start
            cpu_seconds[name] = time.process_time() - cpu_start
            bar.finished(step, index, seconds[name], ok)
    except KeyboardInterrupt:
        interrupted = True
        log.warning("audit interrupted: keeping %d finished attack(s) (%s)", len(results),
                    ", ".join(results) or "none")  # fmt: skip
    finally:
        bar.close()
    risk = None
    if split is not None and not interrupted:
        try:
            risk = node_risk(
                target_for("per-node risk"),
                dataset,
                split,
                seed=int(plans.get("mia-threshold", {}).get("seed", 0)),
                max_members=plans.get("mia-threshold", {}).get("max_members"),
            )
        except DPAuditError as exc:
            log.info("no per-node risk: %s", exc)
    for what, twin in counted:
        made = twin.query_ledger.releases  # a session's ledger starts at 0
        if made:
            releases[what] = releases.get(what, 0) + made
    queries = query_api_finding(model, releases) if charged else None
    if queries and queries["releases"]:
        log.warning("audit: %s", queries["finding"])
    return AuditResult(model, dataset, results, errors, seconds, metrics, command=command, plan=plan,
                       interrupted=interrupted, node_risk=risk, query_api=queries, cpu_seconds=cpu_seconds,
                       canaries=canary_evidence(model, canary_results))  # fmt: skip


def query_api_finding(model, releases: dict[str, int]) -> dict[str, Any]:
    """The audit's queries of a query-charged model as one finding: the new releases each step
    made (``releases``), their total and their query ledger (``query_ledger``: the composition
    of all of them, about the query graph(s) — each step answered afresh in its own session —
    never added to the model's training ε, ``training_epsilon``, which no query changes)."""
    total = sum(releases.values())
    ledger = _query_ledger(model, total)
    training = model.privacy.epsilon if model.privacy.is_private else None
    if not total:
        finding = "the audit made no new release on a query graph (every query read the owner's training release)"
    elif ledger["epsilon"] is None:
        finding = f"answering these {total} queries releases noise-free aggregations: the model is not private"
    else:
        finding = (f"answering these {total} queries made {total} PMA release(s) on query graphs, query-graph ledger "
                   f"ε = {ledger['epsilon']:.4g} at δ = {ledger['delta']:.3g} (it protects the query graphs, not the "
                   f"training data; the model's training guarantee, ε = {training:.4g}, is unchanged)")  # fmt: skip
    return {"releases": total, "by_step": dict(releases), "query_ledger": ledger, "training_epsilon": training,
            "finding": finding}  # fmt: skip


def slug_name(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-")[:30] or "dataset"


def format_float(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3f}"
    return str(value)
