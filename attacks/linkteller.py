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

Two harder readings of the same influence scores go to ``extra`` (per run in ``runs``):

* **the paper's protocol** (Wu et al. 2022, Sec. V-A): sample ``pr_nodes`` nodes (500), score
  every unordered pair among them by the symmetrised influence
  :math:`\tfrac12(I(u \to v) + I(v \to u))` (one query per sampled node gives both
  directions), predict the top ``k = ρ · #pairs`` pairs as edges, where ρ is the graph's true
  edge density :math:`|E| / \binom{N}{2}` (the paper assumes the density is known), and report
  precision = TP / k and recall = TP / (edges among the sampled nodes). Balanced AUC hides how
  many false edges a sparse graph's ~99.6 % non-edges produce at the attacker's operating point;
  this does not.
* **hard negatives**: AUC of the sampled edges against as many 2-hop non-edges (pairs with a
  common neighbour but no edge), next to the headline AUC against random non-edges. A
  k-layer model lets every node within k hops influence u, so 2-hop pairs are the ones
  influence analysis must actually separate.

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
from dpaudit.statistics import auc

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


def influence_matrix(model: ReleasedModel, graph, nodes: np.ndarray, delta: float) -> np.ndarray:
    """``M[i, j] = I(nodes[j] → nodes[i])`` for every ordered pair of ``nodes`` (one query per node).

    Shapes: ``nodes`` ``[n]`` → ``[n, n]`` (diagonal: a node's influence on itself)."""
    base = C.posteriors(model, graph)[nodes]
    out = np.zeros((len(nodes), len(nodes)))
    x = graph.x
    for j, node in enumerate(tqdm(nodes, desc="linkteller all-pairs queries", leave=False, disable=None)):
        perturbed = graph.clone()
        perturbed.x = x.clone()
        perturbed.x[int(node)] = x[int(node)] * (1.0 + delta)
        out[:, j] = np.linalg.norm(C.posteriors(model, perturbed)[nodes] - base, axis=1) / delta
    return out


def precision_recall_at_k(scores: np.ndarray, labels: np.ndarray, k: int) -> tuple[float, float]:
    """Precision and recall of predicting the ``k`` highest-scored pairs as edges.

    Ties at the k-th score are broken by pair order (stable sort), so exactly ``k`` pairs are
    predicted; precision is TP / k (0 when k = 0), recall TP / #edges (0 without edges)."""
    labels = np.asarray(labels).astype(bool)
    k = int(max(0, min(k, len(scores))))
    top = np.argsort(-np.asarray(scores, dtype=float), kind="stable")[:k]
    tp = int(labels[top].sum())
    return (tp / k if k else 0.0), (tp / int(labels.sum()) if labels.any() else 0.0)


def density_protocol(model, graph, num_nodes: int, edge_index, sample: int, delta: float, rng) -> dict:
    """The paper's evaluation: ``sample`` random nodes, all pairs, top-k at the true density."""
    n = int(min(sample, num_nodes))
    nodes = np.sort(rng.choice(num_nodes, size=n, replace=False))
    infl = influence_matrix(model, graph, nodes, delta)
    iu, ju = np.triu_indices(n, k=1)
    scores = 0.5 * (infl[iu, ju] + infl[ju, iu])
    edges = C.undirected_edges(edge_index.cpu()).numpy()
    keys = set((edges[0].astype(np.int64) * num_nodes + edges[1]).tolist())
    a, b = nodes[iu].astype(np.int64), nodes[ju].astype(np.int64)
    labels = np.fromiter((int(key in keys) for key in (a * num_nodes + b).tolist()), dtype=np.int64, count=len(a))
    density = edges.shape[1] / (num_nodes * (num_nodes - 1) / 2)
    k = int(round(density * len(scores)))
    precision, recall = precision_recall_at_k(scores, labels, k)
    return {
        "precision_at_density": precision,
        "recall_at_density": recall,
        "density": density,
        "sampled_nodes": n,
        "pairs": int(len(scores)),
        "predicted_edges": k,
        "true_edges": int(labels.sum()),
    }


def two_hop_non_edges(edge_index, num_nodes: int, count: int, rng: np.random.Generator):
    """Up to ``count`` distinct pairs (u < w) with a common neighbour and no edge, as arrays."""
    edges = C.undirected_edges(edge_index.cpu()).numpy().astype(np.int64)
    keys = set((edges[0] * num_nodes + edges[1]).tolist())
    neighbours = [[] for _ in range(num_nodes)]
    for u, v in edges.T.tolist():
        neighbours[u].append(v)
        neighbours[v].append(u)
    centres = np.array([c for c in range(num_nodes) if len(neighbours[c]) >= 2])
    found: dict[int, tuple[int, int]] = {}
    attempts = 0
    while len(found) < count and len(centres) and attempts < 50 * count + 1000:
        attempts += 1
        c = int(centres[rng.integers(len(centres))])
        a, b = rng.choice(neighbours[c], size=2, replace=False)
        u, w = int(min(a, b)), int(max(a, b))
        key = u * num_nodes + w
        if key not in keys:
            found.setdefault(key, (u, w))
    pairs = np.array(list(found.values()), dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def linkteller(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    num_pairs: int = 250,
    delta: float = 1e-2,
    pr_nodes: int = 500,
    hard_negatives: bool = True,
    device: str = "auto",
    data_root: str | None = None,
    n_boot: int = 1000,
) -> AttackResult:
    """LinkTeller influence analysis over ``num_pairs`` edges and as many non-edges per run,
    plus precision/recall at the true density over ``pr_nodes`` sampled nodes (0: skip) and
    the AUC against 2-hop non-edges (``hard_negatives``); see the module docstring."""
    settings = locals_settings(locals())
    if not delta > 0:
        raise ConfigurationError("linkteller delta must be > 0")
    if runs < 1 or num_pairs < 2:
        raise ConfigurationError("runs must be >= 1 and num_pairs >= 2")
    if pr_nodes == 1:
        raise ConfigurationError("linkteller pr_nodes must be 0 (skip) or >= 2")
    ds, _ = _setup(model, dataset, data_root)
    seed_everything(seed)
    graph = ds.data
    run_scores, run_extra = [], []
    for r in range(runs):
        rng = np.random.default_rng(seed + 7919 * r)
        u, v, labels = C.sample_pairs(graph.edge_index, ds.num_nodes, num_pairs, rng)
        scores = influence_scores(model, graph, u, v, delta)
        run_scores.append((scores, labels))
        info = {
            "seed": seed + 7919 * r,
            "average_precision": float(average_precision_score(labels, scores)),
            "queries": int(len(np.unique(v))),
            "zero_influence_fraction": float(np.mean(scores == 0)),
            "auc_random_negatives": float(auc(scores, labels)),
        }
        if hard_negatives:
            hu, hw = two_hop_non_edges(graph.edge_index, ds.num_nodes, int(labels.sum()), rng)
            if len(hu):
                pos = labels == 1
                hard = influence_scores(model, graph, hu, hw, delta)
                both = np.concatenate([scores[pos], hard])
                lab = np.concatenate([np.ones(int(pos.sum())), np.zeros(len(hard))]).astype(np.int64)
                info["auc_hard_negatives"] = float(auc(both, lab))
                info["hard_negatives"] = int(len(hard))
        if pr_nodes:
            info.update(density_protocol(model, graph, ds.num_nodes, graph.edge_index, pr_nodes, delta, rng))
        run_extra.append(info)
    extra = {"average_precision": float(np.mean([e["average_precision"] for e in run_extra]))}
    for key in ("auc_random_negatives", "auc_hard_negatives", "precision_at_density", "recall_at_density"):
        values = [e[key] for e in run_extra if key in e]
        if values:
            extra[key] = float(np.mean(values))
    if pr_nodes:
        extra["density_protocol"] = {
            k: run_extra[0][k] for k in ("sampled_nodes", "pairs", "density", "predicted_edges", "true_edges")
        }
    notes = [
        "the model is queried on the private graph with the attacker's perturbed features (inductive access)",
        f"influence = ||P_u(X') - P_u(X)|| / Δ with X'_v = (1 + Δ) X_v, Δ = {delta:g}",
    ]
    if pr_nodes:
        notes.append(
            f"paper's protocol: {extra['density_protocol']['sampled_nodes']} sampled nodes, all pairs, top-k at the "
            f"true density: precision {extra['precision_at_density']:.3f}, recall {extra['recall_at_density']:.3f}"
        )
    if "auc_hard_negatives" in extra:
        notes.append(f"AUC against 2-hop non-edges (hard negatives): {extra['auc_hard_negatives']:.3f}")
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
