r"""LinkTeller (Wu et al., "LinkTeller: Recovering Private Edges from Graph Neural Networks via
Influence Analysis", IEEE S&P 2022).

Threat model (the paper's vertically split setting): the attacker owns the node features and
may query the model's inference API — which runs the model on the private graph — with
features of its choice (inductive query access: :meth:`ReleasedModel.predict_proba` on a
modified graph). The influence of node v on node u is the finite-difference derivative of
u's prediction when v's features are up-weighted,

.. math::
    I(v \to u) = \frac{\lVert P_u(X') - P_u(X)\rVert_2}{\Delta},
    \qquad X'_v = (1 + \Delta) X_v,\; X'_w = X_w \ (w \ne v),

and pairs are scored by influence (higher = edge): in a k-layer message-passing model v can
only influence u if they are within k hops, and a direct edge gives the largest influence.
One query per distinct v; pairs are sampled as in link stealing (``num_pairs`` edges and as
many non-edges). Reports AUC and average precision.

Edges and non-edges are different node pairs, not neighbouring graphs: the result says
whether the model's guarantee covers edges, but carries no DP ceiling and no ε lower bound
(see :mod:`dpaudit.statistics`, "Neighbouring tests only").
"""

from __future__ import annotations

import logging

import numpy as np
from sklearn.metrics import average_precision_score
from tqdm.auto import tqdm

from attacks import _common as C
from attacks.membership import _setup, locals_settings
from dpaudit.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.model import ReleasedModel
from dpaudit.results import AttackResult
from dpaudit.runtime import seed_everything

log = logging.getLogger(__name__)


def influence_scores(model: ReleasedModel, graph, u: np.ndarray, v: np.ndarray, delta: float) -> np.ndarray:
    """I(v → u) for every pair (one model query per distinct v)."""
    # Every query asks for all nodes, so the unperturbed and perturbed answers come from
    # identical computations (a node-subset query may round differently and fake influence).
    base = C.posteriors(model, graph)
    scores = np.zeros(len(u))
    x = graph.x
    for node in tqdm(np.unique(v), desc="linkteller queries", leave=False, disable=None):
        rows = np.flatnonzero(v == node)
        perturbed = graph.clone()
        perturbed.x = x.clone()
        perturbed.x[int(node)] = x[int(node)] * (1.0 + delta)
        out = C.posteriors(model, perturbed)[u[rows]]
        scores[rows] = np.linalg.norm(out - base[u[rows]], axis=1) / delta
    return scores


def linkteller(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    num_pairs: int = 250,
    delta: float = 1e-2,
    device: str = "auto",
    data_root: str | None = None,
    n_boot: int = 1000,
) -> AttackResult:
    """LinkTeller influence analysis over ``num_pairs`` edges and as many non-edges per run."""
    settings = locals_settings(locals())
    if not delta > 0:
        raise ConfigurationError("linkteller delta must be > 0")
    if runs < 1 or num_pairs < 2:
        raise ConfigurationError("runs must be >= 1 and num_pairs >= 2")
    ds, _ = _setup(model, dataset, data_root)
    seed_everything(seed)
    graph = ds.data
    run_scores, run_extra = [], []
    for r in range(runs):
        rng = np.random.default_rng(seed + 7919 * r)
        u, v, labels = C.sample_pairs(graph.edge_index, ds.num_nodes, num_pairs, rng)
        scores = influence_scores(model, graph, u, v, delta)
        run_scores.append((scores, labels))
        run_extra.append(
            {
                "seed": seed + 7919 * r,
                "average_precision": float(average_precision_score(labels, scores)),
                "queries": int(len(np.unique(v))),
                "zero_influence_fraction": float(np.mean(scores == 0)),
            }
        )
    extra = {"average_precision": float(np.mean([e["average_precision"] for e in run_extra]))}
    notes = [
        "the model is queried on the private graph with the attacker's perturbed features (inductive access)",
        f"influence = ||P_u(X') - P_u(X)|| / Δ with X'_v = (1 + Δ) X_v, Δ = {delta:g}",
    ]
    return C.make_result(
        "linkteller",
        model,
        run_scores,
        "edge",
        settings,
        queries_private_graph=True,
        neighbouring=False,
        extra=extra,
        notes=notes,
        run_extra=run_extra,
    )
