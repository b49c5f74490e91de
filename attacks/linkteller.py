r"""LinkTeller (Wu et al., "LinkTeller: Recovering Private Edges from Graph Neural Networks via
Influence Analysis", IEEE S&P 2022).

Threat model (the paper's vertically split setting): the attacker owns the node features and
may query the model's inference API — which runs the model on the private graph — with
features of its choice (inductive query access: :meth:`ReleasedModel.predict_proba` on a
modified graph). The influence of node v on node u is the finite-difference derivative of
u's prediction when v's features move along a direction g,

.. math::
    I(v \to u) = \frac{\lVert P_u(X') - P_u(X)\rVert_2}{\Delta},
    \qquad X'_v = X_v + \Delta \lVert X_v\rVert_2\, g,\; X'_w = X_w \ (w \ne v),

and pairs are scored by influence (higher = edge): in a k-layer message-passing model v can
only influence u if they are within k hops, and a direct edge gives the largest influence.
g is a random unit direction fixed per run (:func:`probe_direction`), not the paper's
:math:`X'_v = (1 + \Delta) X_v`: scaling a row is invisible to a model that normalises its
feature rows (Kipf & Welling's GCN, our default ``gcn``: AUC 0.73 against 0.999 with the
random direction on Cora), while ‖J g‖ estimates the norm of the Jacobian ∂P_u/∂X_v the
paper's influence stands for, whatever the model does to a row's scale. The perturbation is
written into the graph's feature matrix for one query and undone (no copy of the graph).
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
(see :mod:`dpaudit.auditing.statistics`, "Neighbouring tests only").
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from sklearn.metrics import average_precision_score
from tqdm.auto import tqdm

from attacks import _common as C
from attacks import register_attack
from attacks.link_stealing import BASELINE as LINK_BASELINE
from attacks.link_stealing import baseline_runs
from attacks.membership import _setup, locals_settings
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import auc
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import POSITIVE, Boolean, Interval

log = logging.getLogger(__name__)


#: LinkTeller's model-free baseline: link stealing's (:data:`attacks.link_stealing.BASELINE`), on the same pairs
BASELINE = LINK_BASELINE


def probe_direction(num_features: int, seed: int) -> torch.Tensor:
    """A random unit direction (standard Gaussian, normalised), fixed by ``seed`` for one run.

    Moving a node's features along a random direction g measures the Jacobian J = ∂P_u/∂x_v
    through J·g, whose squared norm estimates ‖J‖²_F (Hutchinson 1989: E‖Jg‖² = ‖J‖²_F for
    isotropic g), the paper's influence. Scaling x_v itself — direction x_v — is what a
    scale-invariant model cancels: Kipf & Welling's GCN divides each row by its ℓ₁ norm, so
    x_v(1 + Δ) reaches it unchanged (Cora, default ``gcn``: AUC 0.73). A Gaussian direction
    lies in no fixed subspace with positive probability — not along x_v, not along the
    all-ones direction a softmax ignores — so no such invariance of the model cancels it.

    Args:
        num_features: dimension of the direction.
        seed: seed of the Gaussian draw.

    Returns:
        Float tensor of shape ``[num_features]`` with unit norm.
    """
    g = np.random.default_rng(seed).standard_normal(num_features)
    return torch.from_numpy(g / max(np.linalg.norm(g), 1e-12)).float()


class FeatureProbe:
    r"""Perturbs one node's features of ``graph`` in place for one query, then restores them.

    Node v moves to :math:`x_v + Δ\,s_v\,g`: ``g`` is :func:`probe_direction` and
    :math:`s_v = \lVert x_v\rVert_2` (the mean norm of the non-zero rows when x_v = 0), so Δ is a
    step relative to the row, as the paper's :math:`(1 + Δ)x_v`. Nothing is copied: the row is
    written into ``graph.x`` and the saved row written back bit for bit after the query.

    Args:
        graph: the query graph; its ``x`` is modified in place during a query.
        delta: relative step Δ > 0.
        seed: seed of the probe direction.
    """

    def __init__(self, graph, delta: float, seed: int):
        self.graph, self.delta = graph, float(delta)
        x = graph.x
        self.direction = probe_direction(x.shape[1], seed).to(device=x.device, dtype=x.dtype)
        norms = torch.linalg.vector_norm(x.float(), dim=1)
        nonzero = norms[norms > 0]
        self.fallback_scale = float(nonzero.mean()) if len(nonzero) else 1.0
        #: queries made with a node's features moved (querier-chosen feature changes)
        self.changes = 0

    def posteriors(self, model: ReleasedModel, node: int, targets: np.ndarray) -> np.ndarray:
        """The model's posteriors of ``targets`` with node ``node``'s features perturbed.

        Args:
            model: the released model.
            node: the node whose features are perturbed.
            targets: the nodes whose posteriors are read.

        Returns:
            Posteriors of shape ``[len(targets), C]``.
        """
        x = self.graph.x
        original = x[node].clone()
        scale = float(torch.linalg.vector_norm(original.float())) or self.fallback_scale
        x[node] = original + (self.delta * scale) * self.direction
        self.changes += 1
        try:
            return C.posteriors(model, self.graph, targets)
        finally:
            x[node] = original


def influence_scores(model: ReleasedModel, probe: FeatureProbe, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """I(v → u) for every pair: per distinct v, one query of its u's on the graph as it is and
    one with v perturbed. Both ask for the same nodes, so they are the same computation but
    for v's row: a query of other nodes may round differently (a feature-only MLP's batch of
    another size does) and fake influence where there is none. The unperturbed query is the
    same graph every time, which a query-charged model answers from what it already paid for:
    one query of every u first, so that each later one asks for rows that release covers (GAP
    answers a query on its nodes' neighbourhood and covers only the rows it was asked for).

    Args:
        model: the released model.
        probe: the feature probe over the query graph.
        u: the influenced end of each pair.
        v: the perturbed end of each pair.

    Returns:
        Influence ‖ΔP_u‖ / Δ of each pair, shape ``[len(u)]``.
    """
    scores = np.zeros(len(u))
    C.posteriors(model, probe.graph, np.unique(u))
    for node in tqdm(np.unique(v), desc="linkteller queries", leave=False, disable=None):
        rows = np.flatnonzero(v == node)
        base = C.posteriors(model, probe.graph, u[rows])
        out = probe.posteriors(model, int(node), u[rows])
        scores[rows] = np.linalg.norm(out - base, axis=1) / probe.delta
    return scores


def influence_matrix(model: ReleasedModel, probe: FeatureProbe, nodes: np.ndarray) -> np.ndarray:
    """``M[i, j] = I(nodes[j] → nodes[i])`` for every ordered pair of ``nodes`` (one query per node).

    Shapes: ``nodes`` ``[n]`` → ``[n, n]`` (diagonal: a node's influence on itself).

    Args:
        model: the released model.
        probe: the feature probe over the query graph.
        nodes: the nodes.

    Returns:
        The influence matrix.
    """
    base = C.posteriors(model, probe.graph, nodes)
    out = np.zeros((len(nodes), len(nodes)))
    for j, node in enumerate(tqdm(nodes, desc="linkteller all-pairs queries", leave=False, disable=None)):
        out[:, j] = np.linalg.norm(probe.posteriors(model, int(node), nodes) - base, axis=1) / probe.delta
    return out


def precision_recall_at_k(scores: np.ndarray, labels: np.ndarray, k: int) -> tuple[float, float]:
    """Precision and recall of predicting the ``k`` highest-scored pairs as edges.

    Ties at the k-th score are broken by pair order (stable sort), so exactly ``k`` pairs are
    predicted; precision is TP / k (0 when k = 0), recall TP / #edges (0 without edges).

    Args:
        scores: score of each pair.
        labels: whether each pair is an edge.
        k: pairs predicted as edges (clamped to 0..len(scores)).

    Returns:
        ``(precision, recall)``.
    """
    labels = np.asarray(labels).astype(bool)
    k = int(max(0, min(k, len(scores))))
    top = np.argsort(-np.asarray(scores, dtype=float), kind="stable")[:k]
    tp = int(labels[top].sum())
    return (tp / k if k else 0.0), (tp / int(labels.sum()) if labels.any() else 0.0)


def edge_keys(edge_index, num_nodes: int) -> np.ndarray:
    """Every undirected edge (u < v) as the key u·N + v, sorted (int64; 8 bytes per edge).

    Args:
        edge_index: the graph's edges ``[2, E]`` (a tensor).
        num_nodes: N.

    Returns:
        Sorted int64 keys, one per undirected edge.
    """
    edges = C.undirected_edges(edge_index.cpu()).numpy()
    return np.sort(edges[0].astype(np.int64) * num_nodes + edges[1])


def is_edge(keys: np.ndarray, a: np.ndarray, b: np.ndarray, num_nodes: int) -> np.ndarray:
    """Whether each pair (a, b) is an edge, for sorted :func:`edge_keys` (a binary search each).

    Args:
        keys: sorted keys of :func:`edge_keys`.
        a: first end of each pair.
        b: second end of each pair.
        num_nodes: N, as given to :func:`edge_keys`.

    Returns:
        Boolean array, one entry per pair.
    """
    query = np.minimum(a, b).astype(np.int64) * num_nodes + np.maximum(a, b)
    at = np.minimum(np.searchsorted(keys, query), max(len(keys) - 1, 0))
    return keys[at] == query if len(keys) else np.zeros(len(query), dtype=bool)


def density_protocol(model, probe: FeatureProbe, num_nodes: int, edge_index, sample: int, rng) -> dict:
    """The paper's evaluation: ``sample`` random nodes, all pairs, top-k at the true density.

    Args:
        model: the released model.
        probe: the feature probe over the query graph.
        num_nodes: nodes of the graph.
        edge_index: its edges ``[2, E]``.
        sample: nodes sampled (at most ``num_nodes``).
        rng: numpy generator of the sample.

    Returns:
        Precision and recall at the true density, the density, and the counts of sampled nodes, pairs,
        predicted and true edges.
    """
    n = int(min(sample, num_nodes))
    nodes = np.sort(rng.choice(num_nodes, size=n, replace=False))
    infl = influence_matrix(model, probe, nodes)
    iu, ju = np.triu_indices(n, k=1)
    scores = 0.5 * (infl[iu, ju] + infl[ju, iu])
    keys = edge_keys(edge_index, num_nodes)
    labels = is_edge(keys, nodes[iu], nodes[ju], num_nodes).astype(np.int64)
    density = len(keys) / (num_nodes * (num_nodes - 1) / 2)
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
    """Up to ``count`` distinct pairs (u < w) with a common neighbour and no edge, as arrays.

    Each draw picks a centre uniformly among the nodes of degree ≥ 2, then two distinct
    neighbours of it uniformly; draws that are edges or repeats are rejected, at most
    ``50·count + 1000`` draws in all. Vectorised over batches of draws on the graph's CSR
    (sorted neighbour lists) and sorted edge keys: O(E) memory, no per-edge Python objects.

    Args:
        edge_index: the graph's edges ``[2, E]``.
        num_nodes: N.
        count: pairs wanted.
        rng: numpy generator of the draws.

    Returns:
        ``(u, w)``: two int64 arrays of equal length, at most ``count``.
    """
    keys = edge_keys(edge_index, num_nodes)
    src = np.concatenate([keys // num_nodes, keys % num_nodes])
    dst = np.concatenate([keys % num_nodes, keys // num_nodes])
    order = np.argsort(src, kind="stable")
    neighbours = dst[order]
    degree = np.bincount(src, minlength=num_nodes)
    start = np.concatenate([[0], np.cumsum(degree)[:-1]])
    centres = np.flatnonzero(degree >= 2)
    found = np.empty(0, dtype=np.int64)
    budget = 50 * count + 1000
    while len(found) < count and len(centres) and budget > 0:
        size = int(min(budget, max(64, 4 * (count - len(found)))))
        budget -= size
        c = centres[rng.integers(len(centres), size=size)]
        i = rng.integers(degree[c])
        j = rng.integers(degree[c] - 1)
        j = j + (j >= i)  # a second neighbour, distinct from the first
        a, b = neighbours[start[c] + i], neighbours[start[c] + j]
        key = np.minimum(a, b) * num_nodes + np.maximum(a, b)
        key = key[~is_edge(keys, a, b, num_nodes)]
        key = key[~np.isin(key, found)]
        _, first = np.unique(key, return_index=True)
        found = np.concatenate([found, key[np.sort(first)]])
    found = found[:count]
    return found // num_nodes, found % num_nodes


#: what each setting of :func:`linkteller` accepts (:func:`attacks.register_attack`)
LINKTELLER_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    "num_pairs": [C.TWO_OR_MORE],
    "delta": [POSITIVE],
    "pr_nodes": [Interval(int, 0, 0, closed="both"), C.TWO_OR_MORE],  # 0: skip precision/recall
    "hard_negatives": [Boolean()],
}


def _linkteller_cost(settings, measured, dataset) -> tuple[int, float]:
    """One query per perturbed graph: two per pair, one per hard negative and per density node."""
    runs = C.count_setting(settings, "runs", 1)
    pairs = min(C.count_setting(settings, "num_pairs", 250), dataset.num_edges // 2 or 1)
    per_run = min(2 * pairs, dataset.num_nodes) + (pairs if settings.get("hard_negatives", True) else 0)
    per_run += min(C.count_setting(settings, "pr_nodes", 500), dataset.num_nodes)
    return runs, runs * per_run * measured["query"]


def _linkteller_releases(settings, dataset, free_graph: bool) -> int:
    """Per run, the unperturbed graph once per part (pairs, hard negatives, the density
    protocol; free with ``free_graph``) and one perturbed graph per distinct node moved in each
    part: a GAP release covers only the nodes it was asked for, so a node moved again for other
    targets is a new release."""
    base = 0 if free_graph else 1
    runs = int(settings.get("runs", 1) or 1)
    pairs = min(int(settings.get("num_pairs", 250) or 250), max(dataset.num_edges, 1))
    hard = bool(settings.get("hard_negatives", True))
    density = min(int(settings.get("pr_nodes", 0) or 0), dataset.num_nodes)
    per_run = min(2 * pairs, dataset.num_nodes) + (min(pairs, dataset.num_nodes) if hard else 0) + density
    return runs * (per_run + base * (1 + hard + bool(density)))


@register_attack(
    "linkteller",
    LINKTELLER_CONSTRAINTS,
    order=4,
    quick={"num_pairs": 100, "pr_nodes": 200},
    cost=_linkteller_cost,
    releases=_linkteller_releases,
)
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
    deployment: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    """LinkTeller influence analysis over ``num_pairs`` edges and as many non-edges per run,
    plus precision/recall at the true density over ``pr_nodes`` sampled nodes (0: skip) and
    the AUC against 2-hop non-edges (``hard_negatives``); see the module docstring.

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        num_pairs: edges (and as many non-edges) scored per run, >= 2.
        delta: relative feature step Δ of the probe, > 0.
        pr_nodes: nodes sampled for precision/recall at the true density; 0 skips it, else >= 2.
        hard_negatives: also report the AUC against 2-hop non-edges.
        device: accepted for a uniform signature across attacks (unused here).
        data_root: where to find the dataset when ``dataset`` is ``None``.
        deployment: the deployment audited (:func:`attacks._common.resolve_deployment`; ``"auto"`` by the split).
        n_boot: bootstrap draws of each confidence interval.

    Returns:
        The attack's result: headline AUC, ε lower bound and ceiling, per-run details in ``extra``.

    Raises:
        ConfigurationError: a setting is out of range, or ``model`` is not a released model.
    """
    settings = locals_settings(locals())
    if not delta > 0:
        raise ConfigurationError("linkteller delta must be > 0")
    if runs < 1 or num_pairs < 2:
        raise ConfigurationError("runs must be >= 1 and num_pairs >= 2")
    if pr_nodes == 1:
        raise ConfigurationError("linkteller pr_nodes must be 0 (skip) or >= 2")
    ds, split = _setup(model, dataset, data_root)
    deployment = C.resolve_deployment(model, deployment)
    seed_everything(seed)
    graph = ds.data  # pairs and their labels: the true edges
    queried = C.query_graph(ds, split, deployment, "edge")
    run_scores, run_extra, run_pairs = [], [], []
    changes = 0
    for r in range(runs):
        rng = np.random.default_rng(seed + 7919 * r)
        probe = FeatureProbe(queried, delta, seed + 7919 * r)
        u, v, labels = C.sample_pairs(graph.edge_index, ds.num_nodes, num_pairs, rng)
        scores = influence_scores(model, probe, u, v)
        run_scores.append((scores, labels))
        run_pairs.append((u, v, labels))
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
                hard = influence_scores(model, probe, hu, hw)
                both = np.concatenate([scores[pos], hard])
                lab = np.concatenate([np.ones(int(pos.sum())), np.zeros(len(hard))]).astype(np.int64)
                info["auc_hard_negatives"] = float(auc(both, lab))
                info["hard_negatives"] = int(len(hard))
        if pr_nodes:
            info.update(density_protocol(model, probe, ds.num_nodes, graph.edge_index, pr_nodes, rng))
        changes += probe.changes
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
    extra["query_access"] = C.query_access(model, deployment, "feature-perturbed queries", changes)
    notes = [
        f"ran: {extra['query_access']['ran']}",
        "the model is queried on the private graph with the attacker's perturbed features (inductive access); a "
        "release over it is charged to the training data"
        if deployment == C.TRAINING_GRAPH
        else "the model is queried on the querier's graph (the auditor's graph without the edges training read) "
        "with the attacker's perturbed features",
        f"influence = ||P_u(X') - P_u(X)|| / Δ with X'_v = X_v + Δ ||X_v|| g, g a random unit direction, Δ = {delta:g}",
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
        baseline_runs=baseline_runs(graph.x.cpu().numpy(), run_pairs),
        baseline=BASELINE,
    )
