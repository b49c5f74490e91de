"""What DPAR's answers read, and so what its ε covers per deployment (:mod:`dpaudit.release.deployments`).

Eq. 4 propagates f_θ's outputs over the query graph. Over a graph the querier supplies that is a
function of the private weights and the querier's graph (covered); over the owner's training
graph it reads edges and neighbours' features in the clear (not covered). With ``power_steps = 0``
an answer is f_θ(x_v) of the queried node's own features (covered everywhere, like ``mlp-dp``).
"""

from __future__ import annotations

from dpaudit.release.deployments import OWN_FEATURES, READ_IN_CLEAR, inference_entry

INFERENCE_NOTE = (
    "inference propagates the MLP outputs over the query graph (with self-loops) by power iteration (DPAR Eq. 4): "
    "it reads the query graph's edges and neighbours' features, which the privacy guarantee does not cover (it "
    "covers the training graph only)"
)

FEATURES_NOTE = (
    "power_steps = 0: every answer is f_θ(x_v) of the queried node's own features; no edge and no other node's "
    "features are read, so answers are post-processing of the private weights (as mlp-dp's)"
)


def inference_card(power_steps: int, private: bool = True) -> dict:
    """The card's ``inference`` entry, per deployment (:mod:`dpaudit.release.deployments`). Over a graph the
    querier supplies (DPAR's own inductive setting), Eq. 4 is a function of the private weights
    and the querier's graph: covered for the training data. Over the owner's training graph, Eq. 4
    with P ≥ 1 reads its edges and neighbours' features in the clear (not covered); P = 0 answers
    from the queried node's own features alone (covered, like ``mlp-dp``).

    Args:
        power_steps: P, the power-iteration steps of Eq. 4.
        private: whether the model was trained privately.

    Returns:
        The ``inference`` entry (:func:`~dpaudit.release.deployments.inference_entry`).
    """
    note = FEATURES_NOTE if power_steps == 0 else INFERENCE_NOTE
    return inference_entry(
        private=private,
        training_graph=power_steps == 0,
        note=note,
        feature_change=OWN_FEATURES if power_steps == 0 else READ_IN_CLEAR,
    )
