"""A query-charged model's queries (GAP: every query graph is a new release): how many new
releases each audit step may need (:func:`query_plan`), and what the audit's queries would cost an
interactive query API, as one finding (:func:`query_api_finding`). Releases over the training graph
(the ``training-graph`` deployment, LinkTeller's feature-perturbed copies) are charged to the
training data: their total is the training ε composed with them (``epsilon_total``)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


def charges_queries(model) -> bool:
    """Whether ``model`` answers queries as new, accounted releases (GAP: every query graph is
    a PMA release counted in its query ledger; those over the training graph are charged to the
    training data), so an audit queries its own sessions and reports their releases."""
    return callable(getattr(model, "query_session", None))


def _foreign_releases(name: str, settings: dict[str, Any], dataset, free_graph: bool) -> int | None:
    """At most how many new releases (graphs other than what the owner's training release
    answers) attack ``name`` asks a query-charged target for, as it declares
    (:attr:`attacks.AttackDeclaration.releases`); ``None`` when it declares none.

    ``free_graph``: the audited graph is the training graph and the owner's training release is
    there, so the attacks' full-graph query costs nothing."""
    import attacks as attack_registry

    releases = attack_registry.declaration(name).releases
    return None if releases is None else int(releases(settings, dataset, free_graph))


def query_plan(model, dataset, steps: list[dict]) -> dict | None:
    """For a query-charged model (:func:`charges_queries`), what the planned attacks cost: at
    most how many new releases they need (each step's ``foreign_releases``), whether the
    owner's training release answers the training-graph queries for free, and the query ledger
    those releases would make (``query_ledger``: about the query graphs, never added to the
    model's training ε, ``training_epsilon``). ``None`` for other models.

    Args:
        model: the target released model.
        dataset: the audited graph.
        steps: the plan's attack steps; each gets its ``foreign_releases`` set.

    Returns:
        ``releases_at_most``, ``training_graph_free``, ``unknown``, ``query_ledger`` and
        ``training_epsilon``, or ``None``.
    """
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
        "epsilon_total_at_most": _total(model, known),
    }


def _total(model, releases: int) -> float | None:
    """The training ε composed with ``releases`` releases charged to the training data
    (:meth:`defenses.gap.GAPModel.total_with`); ``None`` for a model that is not private."""
    total_with = getattr(model, "total_with", None)
    spec = total_with(releases) if callable(total_with) else model.privacy
    return spec.epsilon if spec.is_private else None


def _query_ledger(model, releases: int, charged: int = 0) -> dict[str, Any]:
    """``model``'s query ledger (:attr:`defenses.gap.GAPModel.query_ledger`) as JSON, with
    ``releases`` releases, ``charged`` of them over the training graph (their total with the
    training ε: ``epsilon_total``)."""
    total_with = getattr(model, "total_with", None)
    total = functools.partial(total_with, int(charged)) if callable(total_with) else None
    ledger = dataclasses.replace(model.query_ledger, releases=int(releases), charged=int(charged), total_spec=total)
    return ledger.to_dict()


def query_plan_line(queries: dict) -> str:
    """One line on what a query-charged model's audit costs (:func:`query_plan`).

    Args:
        queries: what :func:`query_plan` returned.

    Returns:
        The line.
    """
    free = (
        "training-graph queries read the owner's training release (free)"
        if queries["training_graph_free"]
        else "no owner's training release for the audited graph: every query is charged"
    )
    text = f"query-charged model: the attacks need at most {queries['releases_at_most']} new release(s); {free}"
    ledger = queries.get("query_ledger") or {}
    if ledger.get("epsilon") is not None and queries["releases_at_most"]:
        text += (
            f"; their releases go to the query ledger (ε ≤ {ledger['epsilon']:.4g} at δ = "
            f"{ledger['delta']:.3g}); those over the training graph are charged to the training data: total ε ≤ "
            f"{queries.get('epsilon_total_at_most') or 0:.4g} (training ε = {queries['training_epsilon']:.4g})"
        )
    if queries["unknown"]:
        text += f"; unknown for {', '.join(queries['unknown'])}"
    return text


def query_api_finding(model, releases: dict[str, int], charged: dict[str, int] | None = None) -> dict[str, Any]:
    """The audit's queries of a query-charged model as one finding: the new releases each step
    made (``releases``), their total and their query ledger (``query_ledger``: the composition
    of all of them), and those made over the training graph (``charged``, per step): charged to
    the training data, whose total is the training ε composed with all of them
    (``epsilon_total``; ``charged_releases`` their count). ``training_epsilon`` is the model's
    training ε."""
    total = sum(releases.values())
    charged = {k: v for k, v in (charged or {}).items() if v}
    n_charged = sum(charged.values())
    ledger = _query_ledger(model, total, n_charged)
    training = model.privacy.epsilon if model.privacy.is_private else None
    epsilon_total = _total(model, n_charged)
    if not total:
        finding = "the audit made no new release on a query graph (every query read the owner's training release)"
    elif ledger["epsilon"] is None:
        finding = f"answering these {total} queries releases noise-free aggregations: the model is not private"
    elif n_charged:
        finding = (
            f"answering these {total} queries made {total} PMA release(s), {n_charged} of them over the training "
            f"graph: charged to the training data, total ε = {epsilon_total:.4g} at δ = {ledger['delta']:.3g} "
            f"(training ε = {training:.4g} composed with them)"
        )
    else:
        finding = (
            f"answering these {total} queries made {total} PMA release(s) on query graphs sharing nothing with "
            f"the training graph, query ledger ε = {ledger['epsilon']:.4g} at δ = {ledger['delta']:.3g} (it "
            f"protects the query graphs; the model's training guarantee, ε = {training:.4g}, is unchanged)"
        )
    return {
        "releases": total,
        "by_step": dict(releases),
        "query_ledger": ledger,
        "training_epsilon": training,
        "charged_releases": n_charged,
        "charged_by_step": charged,
        "epsilon_total": epsilon_total,
        "finding": finding,
    }
