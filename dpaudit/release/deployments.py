r"""What a model's ε covers, per deployment: which graph its answers are computed over.

A model's guarantee is about its **training data** and nothing else. Whether an answer is
covered by it depends on the graph the answer reads, so a card's ``inference`` entry says it
for each of three deployments:

==================  ==========================================================================
deployment          what the training guarantee says about the answers
==================  ==========================================================================
``querier-graph``   the querier supplies the graph (an inductive test graph, their own data).
                    The answer is a function of the released weights and the querier's graph:
                    post-processing of the private weights, covered for the training data by
                    every private defense. The querier's graph is theirs; it is not protected
                    and needs no protection from them.
``training-graph``  the owner answers over its own training graph. Covered only through a
                    release the training mechanism made (GAP's cached PMA aggregations) or when
                    the answer reads nothing of the graph but the queried node's own features
                    (mlp-dp, DPAR with ``power_steps = 0``). Any other read of the training
                    graph at inference is outside ε.
``owner-graph``     the owner answers over another private graph it holds. For the training
                    data this is post-processing, as for a querier's graph; *that* graph is read
                    in the clear unless a query mechanism is accounted for it (GAP's PMA per
                    query), and that accounting is a separate ledger about that graph, never
                    added to the training guarantee.
==================  ==========================================================================

The entry keeps its ``private`` key (= the ``training-graph`` answer) for files and code written
before deployments were recorded; :func:`deployment_entry` derives the three answers for such a
card conservatively (a legacy ``private: true`` covers the training graph; the other two follow
from the weights being the only channel).
"""

from __future__ import annotations

from typing import Any

from dpaudit.errors import DPAuditError

QUERIER_GRAPH = "querier-graph"
TRAINING_GRAPH = "training-graph"
OWNER_GRAPH = "owner-graph"
#: every deployment an audit can be run for, in the order the card lists them
DEPLOYMENTS = (QUERIER_GRAPH, TRAINING_GRAPH, OWNER_GRAPH)

QUERIER_NOTE = (
    "answers over a graph the querier supplies (disjoint from training) are a function of the released weights and "
    "that graph: post-processing of the private weights, covered for the training data"
)
OWNER_CLEAR_NOTE = (
    "answers over another graph the owner holds are post-processing of the weights for the training data; that graph "
    "itself is read in the clear (no query mechanism protects it)"
)
NON_PRIVATE_NOTE = "non-private model: no answer is covered by a guarantee"


def inference_entry(
    *,
    private: bool,
    training_graph: bool,
    note: str,
    training_note: str | None = None,
    owner_graph_mechanism: str | None = None,
) -> dict[str, Any]:
    """A card's ``inference`` entry.

    Args:
        private: whether the weights are the output of an accounted mechanism (False for a
            non-private model: then no deployment is covered).
        training_graph: whether answers over the owner's training graph are covered
            (through a training release or because they read only the queried node's features).
        note: what inference reads, in one sentence (kept as the entry's ``note``).
        training_note: why the training-graph answers are (not) covered; ``note`` when None.
        owner_graph_mechanism: the accounted query mechanism that protects another owner
            graph at each query (its own ledger), or None when such a graph is read in the clear.
    """
    if not private:
        off = {"covered": False, "note": NON_PRIVATE_NOTE}
        return {
            "private": False,
            "note": note,
            "deployments": {d: dict(off) for d in DEPLOYMENTS},
        }
    owner: dict[str, Any] = {"covered": True, "graph_protected": owner_graph_mechanism is not None}
    owner["note"] = (
        OWNER_CLEAR_NOTE
        if owner_graph_mechanism is None
        else "answers over another graph the owner holds are post-processing of the weights for the training data; "
        f"that graph is protected by {owner_graph_mechanism}, recorded in the query ledger (never in the training ε)"
    )
    return {
        "private": bool(training_graph),
        "note": note,
        "deployments": {
            QUERIER_GRAPH: {"covered": True, "note": QUERIER_NOTE},
            TRAINING_GRAPH: {"covered": bool(training_graph), "note": training_note or note},
            OWNER_GRAPH: owner,
        },
    }


def check_deployment(name: str) -> str:
    """``name`` if it is a deployment, else a one-line error naming them.

    Args:
        name: the deployment's name.

    Returns:
        ``name``.

    Raises:
        DPAuditError: an unknown deployment.
    """
    if name not in DEPLOYMENTS:
        raise DPAuditError(f"unknown deployment {name!r}; use one of {', '.join(DEPLOYMENTS)}")
    return name


def deployment_entry(inference: dict[str, Any] | None, deployment: str, private: bool = True) -> dict[str, Any]:
    """The ``{"covered": bool, "note": str}`` answer of a card's ``inference`` entry for
    ``deployment``; for an entry written before deployments were recorded, derived from its
    ``private`` key (the training graph) and the weights being the only other channel.
    ``private``: whether the model's weights are private at all (a non-private model covers
    nothing, whatever an old card says).

    Args:
        inference: the card's ``inference`` entry, or ``None``.
        deployment: the deployment's name.
        private: whether the weights are private.

    Returns:
        ``{"covered": bool, "note": str}``.

    Raises:
        DPAuditError: an unknown deployment.
    """
    check_deployment(deployment)
    inference = inference or {}
    if not private:
        return {"covered": False, "note": NON_PRIVATE_NOTE}
    recorded = (inference.get("deployments") or {}).get(deployment)
    if isinstance(recorded, dict) and "covered" in recorded:
        return {"covered": bool(recorded["covered"]), "note": str(recorded.get("note") or "")}
    if deployment == TRAINING_GRAPH:
        return {"covered": bool(inference.get("private", False)), "note": str(inference.get("note") or "")}
    if deployment == QUERIER_GRAPH:
        return {"covered": True, "note": QUERIER_NOTE}
    return {"covered": True, "note": OWNER_CLEAR_NOTE}


def covered_deployments(inference: dict[str, Any] | None, private: bool = True) -> dict[str, bool]:
    """``{deployment: covered}`` for every deployment (what ``inspect`` and reports print).

    Args:
        inference: the card's ``inference`` entry, or ``None``.
        private: whether the weights are private.

    Returns:
        Deployment name → covered.
    """
    return {d: deployment_entry(inference, d, private)["covered"] for d in DEPLOYMENTS}
