r"""Link stealing (He et al., "Stealing Links from Graph Neural Networks", USENIX Security 2021).

Threat model: black-box access to the target model deployed on its (private) graph — the
attacker obtains every node's posterior from one query of the model on that graph and asks
whether two nodes are linked. Pairs are edges of the graph (up to ``max_pairs``) and as many
uniformly drawn non-edges.

* Attack-0 (unsupervised): score(u, v) = −d(p_u, p_v) for each of the 8 distances
  (cosine, euclidean, correlation, chebyshev, braycurtis, canberra, cityblock,
  sqeuclidean); all 8 AUCs are reported, the headline is ``correlation`` (the paper's best).
* Attack-2 (partial graph known): the attacker knows the status of a ``known_fraction`` of
  the pairs and trains an MLP on features built from the posteriors: the 8 distances, and
  the pairwise operations (mean, Hadamard, |a − b|, (a − b)²) on the posteriors and on their
  entropies. Attack-3 adds the 8 distances between the two nodes' features (features known).
  The standardiser is fitted on the attacker's training pairs only; AUCs are measured on the
  remaining pairs. (He et al. use 4 operators on the posteriors' entropies with the
  distances; including the operators on the posteriors themselves follows the issue.)

Edges and non-edges are different node pairs, not neighbouring graphs: the result says
whether the model's guarantee covers edges, but carries no DP ceiling and no ε lower bound
(see :mod:`dpaudit.auditing.statistics`, "Neighbouring tests only").
"""

from __future__ import annotations

import logging

import numpy as np

from attacks import _common as C
from attacks import one_graph_query, register_attack
from attacks.membership import _setup, locals_settings
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import auc
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import FRACTION, WIDTH, Boolean, Options

log = logging.getLogger(__name__)

DISTANCES = ("cosine", "euclidean", "correlation", "chebyshev", "braycurtis", "canberra", "cityblock", "sqeuclidean")
_TINY = 1e-12


def pair_distances(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """The 8 distances of scipy.spatial.distance between the rows of ``a`` and ``b``,
    vectorised (0/0 terms of canberra count 0, as in scipy).

    Args:
        a: one row per pair, shape ``[n, d]``.
        b: the other end of each pair, shape ``[n, d]``.

    Returns:
        Each distance name (cosine, euclidean, correlation, chebyshev, braycurtis, canberra, cityblock,
        sqeuclidean) mapped to an array of shape ``[n]``.
    """
    diff = a - b
    absdiff = np.abs(diff)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ac, bc = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    nac, nbc = np.linalg.norm(ac, axis=1), np.linalg.norm(bc, axis=1)
    denom = np.abs(a) + np.abs(b)
    canberra = np.where(denom > 0, absdiff / np.where(denom > 0, denom, 1.0), 0.0).sum(axis=1)
    sum_abs = np.abs(a + b).sum(axis=1)
    sq = (diff**2).sum(axis=1)
    return {
        "cosine": 1.0 - (a * b).sum(axis=1) / np.maximum(na * nb, _TINY),
        "euclidean": np.sqrt(sq),
        "correlation": 1.0 - (ac * bc).sum(axis=1) / np.maximum(nac * nbc, _TINY),
        "chebyshev": absdiff.max(axis=1),
        "braycurtis": absdiff.sum(axis=1) / np.maximum(sum_abs, _TINY),
        "canberra": canberra,
        "cityblock": absdiff.sum(axis=1),
        "sqeuclidean": sq,
    }


def _entropy(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, _TINY, 1.0)
    return -(q * np.log(q)).sum(axis=1, keepdims=True)


def _pair_ops(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Symmetric pairwise operations: mean, Hadamard, |a − b|, (a − b)²."""
    return np.concatenate([(a + b) / 2, a * b, np.abs(a - b), (a - b) ** 2], axis=1)


def supervised_features(pu: np.ndarray, pv: np.ndarray, xu: np.ndarray | None = None, xv: np.ndarray | None = None):
    """Features of attack-2/3 for each pair (u, v): the 8 distances of the posteriors, pairwise
    operations on the posteriors and on their entropies, and (attack-3) the 8 distances of the
    node features.

    Args:
        pu: posteriors of the first ends, shape ``[n, C]``.
        pv: posteriors of the second ends, shape ``[n, C]``.
        xu: features of the first ends, ``[n, d]``, or ``None`` (attack-2).
        xv: features of the second ends, ``[n, d]`` (read when ``xu`` is given).

    Returns:
        One feature row per pair, shape ``[n, F]``.
    """
    parts = [
        np.stack(list(pair_distances(pu, pv).values()), axis=1),
        _pair_ops(pu, pv),
        _pair_ops(_entropy(pu), _entropy(pv)),
    ]
    if xu is not None:
        parts.append(np.stack(list(pair_distances(xu, xv).values()), axis=1))
    return np.concatenate(parts, axis=1)


#: link stealing's model-free baseline (:attr:`~dpaudit.auditing.results.AttackResult.baseline`), on the same pairs
BASELINE = (
    "cosine similarity of the two endpoints' features on the same pairs (no model query; He et al. 2021's "
    "feature-only link inference)"
)


def baseline_runs(x, pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The model-free baseline's ``(scores, labels)`` on each run's pairs: :func:`C.feature_cosine`.

    Args:
        x: node features, [N, F].
        pairs: each run's ``(u, v, labels)``.

    Returns:
        One ``(scores, labels)`` per run.
    """
    return [(C.feature_cosine(x, u, v), labels) for u, v, labels in pairs]


#: what each setting of :func:`link_steal` accepts (:func:`attacks.register_attack`)
LINK_STEAL_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    "max_pairs": [C.TWO_OR_MORE],
    "headline": [Options(*DISTANCES)],
    "known_fraction": [FRACTION],
    "supervised": [Boolean()],
    "hidden": [WIDTH],
}

#: CPU seconds per sampled pair and run (8 distances and the attack-2/3 MLP; the audit plan's cost model)
PAIR_SECONDS = 6e-5


def _link_steal_cost(settings, measured, dataset) -> tuple[int, float]:
    runs = C.count_setting(settings, "runs", 1)
    pairs = min(C.count_setting(settings, "max_pairs", 1000), dataset.num_edges // 2 or 1)
    return runs, runs * 2 * pairs * PAIR_SECONDS


@register_attack(
    "link-steal",
    LINK_STEAL_CONSTRAINTS,
    order=5,
    quick={"runs": 1, "max_pairs": 400},
    cost=_link_steal_cost,
    releases=one_graph_query,
)
def link_steal(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 3,
    seed: int = 0,
    max_pairs: int = 1000,
    headline: str = "correlation",
    known_fraction: float = 0.5,
    supervised: bool = True,
    hidden: int = 32,
    device: str = "auto",
    data_root: str | None = None,
    deployment: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    """Attack-0 over all 8 distances (headline ``headline``) and supervised attack-2/3.

    Each run draws new pairs (and a new known/unknown division for attack-2/3). The headline
    AUC, ε lower bound and ceiling are those of attack-0 with the ``headline`` distance.

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        max_pairs: edges and as many non-edges sampled per run, >= 2.
        headline: the distance of the headline attack-0 (one of ``DISTANCES``).
        known_fraction: share of the pairs the attacker knows for attack-2/3, in (0, 1).
        supervised: also run the supervised attack-2/3.
        hidden: hidden units of the supervised attack's MLP.
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
    if headline not in DISTANCES:
        raise ConfigurationError(f"link-steal headline must be one of {DISTANCES}")
    if not 0.0 < known_fraction < 1.0:
        raise ConfigurationError("link-steal known_fraction must lie in (0, 1)")
    if runs < 1 or max_pairs < 2:
        raise ConfigurationError("runs must be >= 1 and max_pairs >= 2")
    ds, split = _setup(model, dataset, data_root)
    deployment = C.resolve_deployment(model, deployment)
    seed_everything(seed)
    graph = ds.data  # pairs and their labels: the true edges
    probs = C.posteriors(model, C.query_graph(ds, split, deployment, "edge"))
    x = graph.x.cpu().numpy()  # the attacker's own features, read in place (rows cast per pair below)
    run_scores, run_extra, run_pairs = [], [], []
    by_distance = {d: [] for d in DISTANCES}
    sup = {"attack-2": [], "attack-3": []}
    for r in range(runs):
        rng = np.random.default_rng(seed + 7919 * r)
        u, v, labels = C.sample_pairs(graph.edge_index, ds.num_nodes, max_pairs, rng)
        run_pairs.append((u, v, labels))
        dists = pair_distances(probs[u], probs[v])
        aucs = {d: auc(-dists[d], labels) for d in DISTANCES}
        for d in DISTANCES:
            by_distance[d].append(aucs[d])
        run_scores.append((-dists[headline], labels))
        extra_r = {"seed": seed + 7919 * r, "pairs": int(len(labels)), "auc_by_distance": aucs}
        if supervised:
            known = _stratified_mask(labels, known_fraction, rng)
            for name, feats in (
                ("attack-2", supervised_features(probs[u], probs[v])),
                ("attack-3", supervised_features(probs[u], probs[v], x[u].astype(np.float64), x[v].astype(np.float64))),
            ):
                score = C.fit_attack_mlp(feats[known], labels[known], hidden=(hidden, hidden), seed=seed + r)
                value = auc(score(feats[~known]), labels[~known])
                sup[name].append(value)
                extra_r[name] = value
        run_extra.append(extra_r)
    extra = {
        "headline": f"attack-0 ({headline})",
        "auc_by_distance": {d: float(np.mean(v)) for d, v in by_distance.items()},
    }
    if supervised:
        extra.update({k: float(np.mean(v)) for k, v in sup.items()})
        extra["known_fraction"] = known_fraction
    extra["query_access"] = C.query_access(model, deployment, "one query of every node")
    notes = [
        f"ran: {extra['query_access']['ran']}",
        "posteriors from one query of the model on the full (private) graph"
        if deployment == C.TRAINING_GRAPH
        else "posteriors from one query of the model on the querier's graph: the auditor's graph without the edges "
        "training read (a querier does not hold them)",
        "attack-2/3 are trained on the attacker's known pairs and evaluated on the other pairs",
    ]
    return C.make_result(
        "link-steal",
        model,
        run_scores,
        "edge",
        settings,
        queries_private_graph=True,
        neighbouring=False,
        extra=extra,
        notes=notes,
        run_extra=run_extra,
        baseline_runs=baseline_runs(x, run_pairs),
        baseline=BASELINE,
    )


def _stratified_mask(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(len(labels), dtype=bool)
    for value in (0, 1):
        idx = rng.permutation(np.flatnonzero(labels == value))
        mask[idx[: max(1, int(round(fraction * len(idx))))]] = True
    return mask
