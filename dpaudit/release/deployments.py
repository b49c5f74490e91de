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
``training-graph``  the owner answers over its own training graph. Covered through a release
                    the training mechanism made (GAP's cached PMA aggregations: free), when the
                    answer reads nothing of the graph but the queried node's own features
                    (mlp-dp, DPAR with ``power_steps = 0``), or when every answer is a new
                    accounted release **charged to the training data** (GAP's PMA per query):
                    the training data's total is then the training ε composed with those
                    releases (:attr:`~dpaudit.release.model.ReleasedModel.charged_privacy`). Any
                    other read of the training graph at inference is outside ε.
``owner-graph``     the owner answers over another private graph it holds, disjoint from the
                    training graph. For the training data this is post-processing, as for a
                    querier's graph; *that* graph is read in the clear unless a query mechanism
                    is accounted for it (GAP's PMA per query, in the query ledger about that
                    graph). A graph sharing nodes or edges with the training graph is not
                    another graph: its releases are charged to the training data.
==================  ==========================================================================

**Charged releases.** A release computed over any graph that shares nodes or edges with the
training graph is about the training data, whoever chose the features: its cost composes with
the training ε (one accountant, :class:`~dpaudit.accounting.PrivacyLedger`). What is charged is
decided from what the owner declares (the deployment a query session answers in) and the
owner's own record (the training graph's edge structure), never from anything a querier sees:
the answer is the same fresh release either way.

**A querier-chosen feature change** (LinkTeller's probe: the querier moves one node's features
and asks again) costs what the defense declares per deployment (``feature_change``,
:data:`FEATURE_CHANGE`): ``own-features`` answers read only the queried node's own features
(free everywhere); ``charged-release`` answers are a new accounted release, charged to the
training data over the training graph; ``read-in-clear`` answers read the training graph in the
clear (not covered there, ε = ∞ for that deployment). Over a querier's graph every change is
post-processing of the weights.

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

#: what a querier-chosen feature change over the private graph costs, per kind a defense declares
OWN_FEATURES = "own-features"
CHARGED_RELEASE = "charged-release"
READ_IN_CLEAR = "read-in-clear"
FEATURE_CHANGE = {
    OWN_FEATURES: {
        QUERIER_GRAPH: "free: post-processing of the private weights",
        TRAINING_GRAPH: "free: the answer reads only the queried node's own features (post-processing)",
        OWNER_GRAPH: "free for the training data: post-processing of the private weights",
    },
    CHARGED_RELEASE: {
        QUERIER_GRAPH: "free for the training data: a release over the querier's graph (post-processing)",
        TRAINING_GRAPH: "one new release over the training graph, charged to the training data (total ε = training "
        "ε composed with every such release; free only for unchanged rows, answered from the training release)",
        OWNER_GRAPH: "one new release in that graph's query ledger (free for the training data when the graph "
        "shares no node or edge with it; charged to it otherwise)",
    },
    READ_IN_CLEAR: {
        QUERIER_GRAPH: "free: post-processing of the private weights",
        TRAINING_GRAPH: "not covered: the answer reads the training graph in the clear (ε = ∞ for this deployment)",
        OWNER_GRAPH: "free for the training data (post-processing); that graph is read in the clear",
    },
}


def inference_entry(
    *,
    private: bool,
    training_graph: bool,
    note: str,
    training_note: str | None = None,
    owner_graph_mechanism: str | None = None,
    feature_change: str | None = None,
    training_audience: str | None = None,
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
        feature_change: what a querier-chosen feature change over the private graph costs
            (:data:`FEATURE_CHANGE`: ``own-features``, ``charged-release``, ``read-in-clear``);
            ``None``: derived (a query mechanism: charged; the training graph covered without
            one: own features; else read in the clear). Said per deployment.
        training_audience: for answers over the training graph that are NOT covered for every
            querier, the narrower audience they are covered for (GCON's Eq. 16: each node receiving
            only its own answer), kept as the entry's ``covered_for``; ``None``: no narrower one.

    Returns:
        The entry: ``private``, ``note``, ``feature_change`` and ``deployments`` (per deployment
        ``covered``, ``note``, ``feature_change`` and, where declared, ``covered_for``).

    Raises:
        DPAuditError: an unknown ``feature_change``.
    """
    if feature_change is None:
        feature_change = (
            CHARGED_RELEASE if owner_graph_mechanism is not None else OWN_FEATURES if training_graph else READ_IN_CLEAR
        )
    if feature_change not in FEATURE_CHANGE:
        raise DPAuditError(f"feature_change must be one of {', '.join(FEATURE_CHANGE)}, got {feature_change!r}")
    costs = FEATURE_CHANGE[feature_change]
    if not private:
        off = {"covered": False, "note": NON_PRIVATE_NOTE}
        return {
            "private": False,
            "note": note,
            "deployments": {d: dict(off, feature_change="not covered: non-private model") for d in DEPLOYMENTS},
        }
    owner: dict[str, Any] = {"covered": True, "graph_protected": owner_graph_mechanism is not None}
    owner["note"] = (
        OWNER_CLEAR_NOTE
        if owner_graph_mechanism is None
        else "answers over another graph the owner holds (sharing no node or edge with the training graph) are "
        f"post-processing of the weights for the training data; that graph is protected by {owner_graph_mechanism}, "
        "recorded in the query ledger; a graph sharing nodes or edges with the training graph is charged to the "
        "training data"
    )
    owner["feature_change"] = costs[OWNER_GRAPH]
    return {
        "private": bool(training_graph),
        "note": note,
        "feature_change": feature_change,
        "deployments": {
            QUERIER_GRAPH: {"covered": True, "note": QUERIER_NOTE, "feature_change": costs[QUERIER_GRAPH]},
            TRAINING_GRAPH: {
                "covered": bool(training_graph),
                "note": training_note or note,
                "feature_change": costs[TRAINING_GRAPH],
                **({"covered_for": training_audience} if training_audience and not training_graph else {}),
            },
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
    ``deployment`` (plus ``feature_change``, what a querier-chosen feature change costs there,
    when the card says it, and ``covered_for``, the narrower audience an answer that is not
    covered for every querier is covered for, when the defense declares one); for an entry written before deployments were recorded, derived from its
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
        entry = {"covered": bool(recorded["covered"]), "note": str(recorded.get("note") or "")}
        if recorded.get("feature_change"):
            entry["feature_change"] = str(recorded["feature_change"])
        if recorded.get("covered_for") and not entry["covered"]:
            entry["covered_for"] = str(recorded["covered_for"])
        return entry
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
