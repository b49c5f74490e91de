"""The deployment an attack audits, and its declaration to a model whose answers are accounted
releases (issue 46: releases over the training graph are charged to the training data).

Kept apart from :mod:`attacks._common` so that the package's ``run`` can declare the deployment
without importing the attacks' shared helpers (which read the attacks' registrations).
"""

from __future__ import annotations

import contextlib

from dpaudit.errors import ConfigurationError
from dpaudit.release.deployments import DEPLOYMENTS, OWNER_GRAPH, QUERIER_GRAPH, TRAINING_GRAPH
from dpaudit.release.model import ReleasedModel


def resolve_deployment(model: ReleasedModel, deployment: str | None) -> str:
    """The deployment an attack audits (:mod:`dpaudit.release.deployments`). ``"auto"``: a model trained
    on an inductive split is audited as deployed — answering over a graph the querier supplies
    (``querier-graph``); any other model answers over the owner's training graph
    (``training-graph``). ``owner-graph`` is refused: its answers are post-processing for the
    training data, and the other graph's protection is that graph's own ledger."""
    if deployment in (None, "auto"):
        split = model.card.get("split") or {}
        return QUERIER_GRAPH if split.get("inductive") else TRAINING_GRAPH
    if deployment not in DEPLOYMENTS:
        raise ConfigurationError(f"unknown deployment {deployment!r}; use auto, {QUERIER_GRAPH} or {TRAINING_GRAPH}")
    if deployment == OWNER_GRAPH:
        raise ConfigurationError(
            "deployment owner-graph is not an attack on the training data (its answers are post-processing of the "
            "weights); audit that graph's own query ledger instead: use querier-graph or training-graph"
        )
    return deployment


@contextlib.contextmanager
def deployed(model: ReleasedModel, deployment: str | None):
    """Declare, for the duration of an attack, the deployment ``model`` answers in
    (:func:`resolve_deployment`) to a model whose answers are accounted releases (GAP:
    :meth:`~defenses.gap.GAPModel.charges_training`): in ``training-graph`` every release it makes
    is over the owner's graph, or a copy of it with the querier's features, and is charged to
    the training data; in ``querier-graph`` none is. Other models are unchanged."""
    if not callable(getattr(model, "charges_training", None)):
        yield model
        return
    before = getattr(model, "deployment", None)
    model.deployment = resolve_deployment(model, deployment)
    try:
        yield model
    finally:
        model.deployment = before
