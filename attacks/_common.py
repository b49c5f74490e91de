"""Plumbing shared by every attack: the attacked model's dataset and split (from its card),
shadow models trained with the target's own recipe, pair sampling and result assembly.

What the attacker is given (the threat model of every attack here): black-box queries
(:meth:`ReleasedModel.predict_proba` / :meth:`ReleasedModel.embed`), the model card (recipe,
hyperparameters, dataset name), and the public dataset itself. Ground-truth membership is
used only to *evaluate* attacks, never to orient or tune their scores.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from dpaudit.datasets import GraphDataset
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.model import ReleasedModel
from dpaudit.registry import get_defense
from dpaudit.results import AttackResult
from dpaudit.splits import Split, membership_partition
from dpaudit.statistics import Coverage, coverage, summarize_runs

log = logging.getLogger(__name__)

LOWER_BOUND_CAVEAT = (
    "ε lower bound: threshold chosen on a held-out half, Clopper-Pearson at 95 % on the other half; it bounds the "
    "model's ε only insofar as membership was assigned at random (random splits do that)"
)

NOT_NEIGHBOURING = (
    "no DP ceiling or ε lower bound: edges and non-edges are different node pairs whose features differ "
    "(homophily), not neighbouring graphs, so the score separation is not bounded by the edge guarantee (a "
    "feature-only model that never sees an edge separates them too); the guarantee bounds what the model adds "
    "about one given pair, which this comparison cannot isolate"
)


# --------------------------------------------------------------------------- the target


def partition(dataset: GraphDataset, split: Split, seed: int, max_members: int | None, shadow_per_class: int):
    return membership_partition(dataset, split, seed=seed, max_members=max_members, shadow_per_class=shadow_per_class)


def posteriors(model: ReleasedModel, graph, nodes=None) -> np.ndarray:
    out = model.predict_proba(graph, nodes).detach().cpu().double().numpy()
    return np.clip(out, 0.0, 1.0)


# --------------------------------------------------------------------------- shadow models


def shadow_recipe(model: ReleasedModel) -> tuple[str, dict[str, Any], float, str, list[str]]:
    """(defense name, hyperparameters, ε, δ option, notes) for shadow models.

    The target's own recipe (its card's ``method`` and ``hyperparameters``) when it is a
    registered defense; a user model's stated ``surrogate`` recipe otherwise.
    """
    card = model.card
    notes = []
    surrogate = card.get("surrogate")
    if surrogate:
        method = surrogate.get("method", "gcn")
        hp = dict(surrogate.get("hyperparameters") or {})
        cls = get_defense(method)
        eps = card.get("target_epsilon") if cls.unit is not None else None
        notes.append(
            f"shadow models use the surrogate recipe {method!r} {hp or '(default hyperparameters)'}: "
            "the audited model's own training recipe is unknown"
        )
    else:
        method = card.get("method")
        if not method:
            raise DPAuditError("the model card names no training method; shadow models cannot be trained")
        hp = dict(card.get("hyperparameters") or {})
        eps = card.get("target_epsilon")
        notes.append(f"shadow models retrained with the target's own recipe {method!r} (from its card)")
    epsilon = math.inf if eps is None else float(eps)
    delta = str(card.get("delta_option", "auto"))
    return method, hp, epsilon, delta, notes


def train_shadow(
    model: ReleasedModel,
    dataset: GraphDataset,
    members: torch.Tensor,
    non_members: torch.Tensor,
    seed: int,
    device: str = "auto",
    inductive: bool = False,
) -> ReleasedModel:
    """A shadow model trained with the target's recipe on ``members`` (its known non-members
    are the split's test part)."""
    method, hp, epsilon, delta, _ = shadow_recipe(model)
    cls = get_defense(method)
    try:
        defense = cls(epsilon=epsilon, delta=delta, seed=seed, device=device, **hp)
    except TypeError as exc:
        raise ConfigurationError(f"cannot rebuild recipe {method!r} from the card: {exc}") from None
    split = Split(members, torch.empty(0, dtype=torch.long), non_members, spec="shadow", seed=seed, inductive=inductive)
    return defense.fit(dataset, split)


# --------------------------------------------------------------------------- pairs


def undirected_edges(edge_index: torch.Tensor) -> torch.Tensor:
    """[2, E/2] with u < v."""
    mask = edge_index[0] < edge_index[1]
    return edge_index[:, mask]


def sample_pairs(edge_index: torch.Tensor, num_nodes: int, count: int, rng: np.random.Generator):
    """Up to ``count`` edges and as many non-edges (uniform node pairs u ≠ v that are not
    edges), as numpy arrays ``(u, v, label)``."""
    edges = undirected_edges(edge_index.cpu()).numpy()
    if edges.shape[1] == 0:
        raise DPAuditError("the graph has no edge: nothing to infer")
    k = min(count, edges.shape[1])
    pick = rng.choice(edges.shape[1], size=k, replace=False)
    pos = edges[:, pick]
    if num_nodes * (num_nodes - 1) // 2 - edges.shape[1] < k:
        raise DPAuditError("the graph has too few non-edges to balance the sampled edges")
    taken = edges[0].astype(np.int64) * num_nodes + edges[1]  # edges, then chosen non-edges
    neg_u, neg_v = [], []
    need = k
    while need > 0:  # rejection sampling; non-edges dominate sparse graphs, so this is quick
        u = rng.integers(0, num_nodes, size=4 * need + 16)
        v = rng.integers(0, num_nodes, size=4 * need + 16)
        a, b = np.minimum(u, v), np.maximum(u, v)
        key = a.astype(np.int64) * num_nodes + b
        ok = (a != b) & ~np.isin(key, taken)
        _, first = np.unique(key[ok], return_index=True)
        a, b = a[ok][np.sort(first)][:need], b[ok][np.sort(first)][:need]
        neg_u.append(a)
        neg_v.append(b)
        taken = np.concatenate([taken, a.astype(np.int64) * num_nodes + b])
        need -= len(a)
    u = np.concatenate([pos[0], *neg_u])
    v = np.concatenate([pos[1], *neg_v])
    labels = np.concatenate([np.ones(k, dtype=np.int64), np.zeros(k, dtype=np.int64)])
    return u, v, labels


# --------------------------------------------------------------------------- results


def model_summary(model: ReleasedModel) -> dict[str, Any]:
    p = model.privacy
    return {
        "method": model.method,
        "kind": model.kind,
        "dataset": (model.card.get("dataset") or {}).get("name"),
        "epsilon": p.epsilon if p.is_private else None,
        "delta": p.delta,
        "unit": p.unit,
        "sound": p.sound,
        "target_epsilon": model.card.get("target_epsilon"),
        "inference_private": model.inference_private,
    }


def lower_bound_delta(cov: Coverage, model: ReleasedModel) -> float:
    """δ used in the ε lower bound: the guarantee's δ for the attacked unit when covered,
    else the model's own δ (0 for a non-private model)."""
    if cov.covered:
        return float(cov.delta)
    return float(model.privacy.delta) if model.privacy.is_private else 0.0


def make_result(
    attack: str,
    model: ReleasedModel,
    runs: list[tuple[np.ndarray, np.ndarray]],
    attack_unit: str,
    settings: dict[str, Any],
    *,
    queries_private_graph: bool = False,
    extra: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    run_extra: list[dict[str, Any]] | None = None,
    artifacts: dict[str, str] | None = None,
    neighbouring: bool = True,
) -> AttackResult:
    """Statistics (:func:`dpaudit.statistics.summarize_runs`) + coverage + ceiling → result.

    ``neighbouring=False`` marks an attack whose two classes are not neighbouring datasets
    (natural edges versus non-edges: different pairs, whose features differ by homophily).
    The guarantee still protects each edge (``covered_by_guarantee``), but the DP ceiling and
    the ε lower bound describe a test of one unit's presence, not this comparison — a
    feature-only MLP that never sees an edge scores link-stealing AUC 0.80 on cora_ml. Then
    ``ceiling_auc`` and ``epsilon_lower_bound`` are None; the would-be ceiling is kept in
    ``ceiling["ceiling_auc_if_neighbouring"]`` and the statistic in ``extra["pair_distinguishability"]``.
    """
    cov = coverage(model.privacy, attack_unit, queries_private_graph, model.inference_private)
    summary = summarize_runs(
        runs, lower_bound_delta(cov, model), n_boot=int(settings.get("n_boot", 1000)), seed=int(settings.get("seed", 0))
    )
    per_run = summary["runs"]
    for i, r in enumerate(per_run):
        r["run"] = i
        if run_extra and i < len(run_extra):
            r.update(run_extra[i])
    all_notes = list(notes or [])
    all_notes.append(cov.reason)
    all_notes.extend(cov.notes)
    all_notes.append(LOWER_BOUND_CAVEAT)
    if not model.inference_private and model.privacy.is_private:
        note = (model.card.get("inference") or {}).get("note")
        if note:
            all_notes.append(f"inference: {note}")
    extra = dict(extra or {})
    extra["lower_bound"] = summary["lower_bound"]
    extra["auc_std"] = summary["auc_std"]
    extra["attack_unit"] = attack_unit
    ceiling = cov.describe()
    ceiling_auc, lower_bound, lower_bound_delta_used = (
        cov.ceiling_auc,
        summary["epsilon_lower_bound"],
        summary["epsilon_lower_bound_delta"],
    )
    if not neighbouring:
        ceiling["applies"] = False
        ceiling["ceiling_auc_if_neighbouring"] = ceiling.pop("ceiling_auc")
        ceiling["why_not"] = NOT_NEIGHBOURING
        extra["pair_distinguishability"] = extra.pop("lower_bound")
        ceiling_auc = lower_bound = lower_bound_delta_used = None
        all_notes.remove(LOWER_BOUND_CAVEAT)
        all_notes.append(NOT_NEIGHBOURING)
        for r in per_run:
            r["pair_distinguishability"] = r.pop("epsilon_lower_bound")
    else:
        ceiling["applies"] = cov.covered
    return AttackResult(
        attack=attack,
        auc=summary["auc"],
        auc_ci=summary["auc_ci"],
        tpr_at_fpr=summary["tpr_at_fpr"],
        advantage=summary["advantage"],
        epsilon_lower_bound=lower_bound,
        epsilon_lower_bound_delta=lower_bound_delta_used,
        covered_by_guarantee=cov.covered,
        ceiling_auc=ceiling_auc,
        ceiling=ceiling,
        roc=summary["roc"],
        settings=dict(settings),
        runs=per_run,
        extra=extra,
        artifacts=dict(artifacts or {}),
        notes=all_notes,
        model=model_summary(model),
    )


# --------------------------------------------------------------------------- attack classifiers


def fit_attack_mlp(features: np.ndarray, labels: np.ndarray, hidden=(64, 64), seed: int = 0, max_iter: int = 200):
    """A standardising MLP attack classifier (the scaler is fitted on these training rows
    only); returns ``score(features) -> P(member | features)``."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels).astype(np.int64)
    if len(np.unique(labels)) < 2:
        raise DPAuditError("the attack's training data hold a single class")
    scaler = StandardScaler().fit(features)
    clf = MLPClassifier(hidden_layer_sizes=tuple(hidden), max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(scaler.transform(features), labels)
    positive = list(clf.classes_).index(1)

    def score(x: np.ndarray) -> np.ndarray:
        return clf.predict_proba(scaler.transform(x))[:, positive]

    return score
