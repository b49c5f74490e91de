"""Plumbing shared by every attack: the attacked model's dataset and split (from its card),
shadow models trained with the target's own recipe, pair sampling and result assembly.

What the attacker is given (the threat model of every attack here): black-box queries
(:meth:`ReleasedModel.predict_proba` / :meth:`ReleasedModel.embed`), the model card (recipe,
hyperparameters, dataset name), and the public dataset itself. Ground-truth membership is
used only to *evaluate* attacks, never to orient or tune their scores.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any

import numpy as np
import torch

from attacks import declaration
from attacks._deployment import deployed, resolve_deployment  # noqa: F401  (re-exported for the attacks)
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import Coverage, auc, coverage, epsilon_lower_bound, summarize_runs
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split, membership_partition, split_is_random
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.deployments import DEPLOYMENTS, OWNER_GRAPH, QUERIER_GRAPH, TRAINING_GRAPH  # noqa: F401
from dpaudit.release.model import ReleasedModel, answering, training_release  # noqa: F401  (re-exported for the attacks)
from dpaudit.training.constraints import COUNT, SEED, Interval, Options
from dpaudit.training.noise import card_noise_mode, seeded_flag
from dpaudit.training.registry import get_defense

log = logging.getLogger(__name__)

LOWER_BOUND_CAVEAT = (
    "ε lower bound: one-run pair test (Steinke, Nasr & Jagielski 2023) on the class-stratified (member, "
    "non-member) pairs of the randomized audit game, 95 % with Bonferroni over its grid of guess counts; one "
    "pair's coin is a group of node changes (group privacy), so it is deliberately conservative"
)


NOT_NEIGHBOURING = (
    "no DP ceiling or ε lower bound: edges and non-edges are different node pairs whose features differ "
    "(homophily), not neighbouring graphs, so the score separation is not bounded by the edge guarantee (a "
    "feature-only model that never sees an edge separates them too); the guarantee bounds what the model adds "
    "about one given pair, which this comparison cannot isolate"
)


# --------------------------------------------------------------------------- declared settings
# What the settings every attack shares accept (attacks.register_attack: each attack module
# declares the rest of its own beside its function).

#: how a shadow or reference model's training set is sized: like the target's, or half the pool
SHADOW_SIZES = ("match", "full")
#: counts a statistic needs two of (pairs of a ROC, shadows of a variance, nodes of a probe)
TWO_OR_MORE = Interval(int, 2, None)

#: the settings of every attack
SETTING_CONSTRAINTS: dict[str, list[Any]] = {
    "runs": [COUNT],
    "seed": [SEED],
    "n_boot": [COUNT],  # bootstrap draws of every confidence interval
    "device": [str, torch.device],  # dpaudit.runtime.resolve_device: auto, cpu or cuda[:i]
    "data_root": [str, os.PathLike, None],
    "deployment": [Options("auto", QUERIER_GRAPH, TRAINING_GRAPH)],  # resolve_deployment
}
#: the settings of the attacks that draw a membership game and train shadows with the target's recipe
SHADOW_SETTING_CONSTRAINTS: dict[str, list[Any]] = {
    "max_members": [COUNT, None],  # None: every member the split allows
    "shadow_nodes_per_class": [COUNT],
    "shadow_size": [Options(*SHADOW_SIZES)],
}


# --------------------------------------------------------------------------- the target


def partition(
    dataset: GraphDataset,
    split: Split,
    seed: int,
    max_members: int | None,
    shadow_per_class: int,
    shadow_pool: str = "disjoint",
):
    """The randomized audit game's pairs and a shadow part (:func:`dpaudit.data.splits.membership_partition`)."""
    return membership_partition(
        dataset, split, seed=seed, max_members=max_members, shadow_per_class=shadow_per_class, shadow_pool=shadow_pool
    )


def keeps_non_members_in_training_graph(model: ReleasedModel) -> tuple[bool, str]:
    """Whether the model's recipe reads non-training nodes (features, edges) in training, so a
    non-member is still in its training graph (then member vs non-member is two node changes).

    False for an inductive split (only training nodes are in the training graph) and for
    feature-only recipes (``mlp``, ``mlp-dp``, adapted models with ``input="features"``); True
    for every other recipe (GAP, DPAR, DP-GNN, GCON, GCN/SAGE read the whole transductive
    graph) and, conservatively, for unknown ones."""
    card = model.card
    if (card.get("split") or {}).get("inductive"):
        return False, "inductive split: non-members are not in the training graph"
    adapter = card.get("adapter") or {}
    method = str(card.get("method") or "")
    if adapter:
        if adapter.get("input") == "features":
            return False, "the adapted model reads node features only"
        return True, "an adapted model that reads the graph: assumed to keep non-members in its training graph"
    try:
        reads_graph = get_defense(method).reads_graph  # as the recipe declares (Defense.reads_graph)
    except DPAuditError:
        reads_graph = True  # an unknown recipe, conservatively
    if not reads_graph:
        return False, f"{method!r} reads only the training nodes' features"
    return True, f"{method!r} reads the whole transductive graph in training: non-members stay in it"


def bound_validity(
    model: ReleasedModel, attack: str, *, neighbouring: bool, audit_game: bool, diagnostic: bool
) -> tuple[bool, str]:
    """``(bound_valid, why)`` of an attack result: whether its ε lower bound and DP ceiling are a
    valid comparison with a guarantee. Valid only when membership was decided at random by a
    process the defense never saw — a ``random:``/``per-class:``/``inductive:`` split drawn by
    dpaudit's seeded RNG — and the audit set is the randomized game's class-stratified pairs."""
    if not neighbouring:
        return False, NOT_NEIGHBOURING
    if diagnostic:
        return False, (
            f"{attack} is a diagnostic (its probe and features were chosen after looking at models, not a "
            "pre-registered test): its AUC never feeds an ε lower bound or a 'guarantee broken' verdict"
        )
    if not audit_game:
        return False, "the audit set was not drawn by the randomized audit game (class-stratified pairs)"
    card_split = model.provenance("split") or model.card.get("split") or {}
    random, why = split_is_random(card_split.get("spec"), card_split)
    if not random:
        return False, why
    return True, (
        f"{why}; the audit set is class-stratified (member, non-member) pairs, so which node of a pair is the member "
        "is a fair coin the defense never chose"
    )


def answering_nodes(model: ReleasedModel, graph, nodes=None):
    """:func:`answering` for a query on ``nodes``: the training release also answers when only
    the queried nodes' rows are the training graph's (a release that says which rows it covers,
    as GAP's, decides from their neighbourhood: LinkTeller's perturbed graph still reads the
    training release for nodes its perturbation cannot reach, without hashing the whole graph)."""
    release = training_release(model)
    if release is None:
        return model
    covers = getattr(release, "covers", None)
    return release if (covers(graph, nodes) if callable(covers) else release.is_training_graph(graph)) else model


class OwnerView:
    """``model``'s query interface with every query routed by :func:`answering_nodes`: code
    written for a :class:`ReleasedModel` (accuracy on the owner's split, say) then reads the
    training release on the training graph instead of buying a new release of it."""

    def __init__(self, model: ReleasedModel):
        self.model = model

    def predict_proba(self, graph, nodes=None):
        return answering_nodes(self.model, graph, nodes).predict_proba(graph, nodes)

    def embed(self, graph, nodes=None):
        return answering_nodes(self.model, graph, nodes).embed(graph, nodes)

    def accuracy(self, graph, nodes) -> float:
        return answering_nodes(self.model, graph, nodes).accuracy(graph, nodes)


def posteriors(model: ReleasedModel, graph, nodes=None) -> np.ndarray:
    out = answering_nodes(model, graph, nodes).predict_proba(graph, nodes).detach().cpu().double().numpy()
    return np.clip(out, 0.0, 1.0)


def embeddings(model: ReleasedModel, graph, nodes=None) -> np.ndarray:
    """``embed`` rows as float64, through the training release where :func:`answering_nodes` picks it."""
    return answering_nodes(model, graph, nodes).embed(graph, nodes).detach().cpu().double().numpy()


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
    # The shadow data is the attacker's own, so its sizes are public to the attacker. The
    # target's recipe is a plan of its *declared* training size (the card's public facts: preset,
    # schedule, universe), so the shadow declares that same size — else mlp-dp's preset=auto
    # would pick another architecture for a smaller shadow set, and its embeddings another width.
    target_size = (model.privacy.public_facts or {}).get("num_train")
    declared = len(members) if target_size is None else max(int(target_size), len(members))
    split = Split(
        members,
        torch.empty(0, dtype=torch.long),
        non_members,
        spec="shadow",
        seed=seed,
        inductive=inductive,
        declared_sizes={"train": declared, "val": 0, "test": len(non_members)},
    )
    return defense.fit(dataset, split)


# --------------------------------------------------------------------------- pairs


def undirected_edges(edge_index: torch.Tensor) -> torch.Tensor:
    """[2, E/2] with u < v."""
    mask = edge_index[0] < edge_index[1]
    return edge_index[:, mask]


def query_graph(dataset: GraphDataset, split: Split, deployment: str, attack_unit: str):
    """The graph an attack's queries are computed over in ``deployment``.

    ``training-graph``: the owner's graph (``dataset.data``). ``querier-graph``: a graph the
    querier could supply, identical in both worlds of the attack's game — for node membership
    the auditor's whole graph (members and non-members alike are in it); for edge inference the
    same graph without the edges training read (:meth:`~dpaudit.data.splits.Split.edge_index_for`:
    the training subgraph's edges on an inductive split, every edge on a transductive one),
    which a querier does not hold. Pairs and labels are always read from ``dataset.data``."""
    if deployment == TRAINING_GRAPH or attack_unit == "node":
        return dataset.data
    trained = split.edge_index_for(dataset, "train")
    n = dataset.num_nodes
    data = copy.copy(dataset.data)  # shares x and y (read-only here); only edge_index is replaced
    if trained.size(1) == dataset.data.edge_index.size(1):
        data.edge_index = dataset.data.edge_index[:, :0]
        return data
    keys = dataset.data.edge_index[0] * n + dataset.data.edge_index[1]
    drop = torch.isin(keys, trained[0] * n + trained[1])
    data.edge_index = dataset.data.edge_index[:, ~drop]
    return data


def query_access(model: ReleasedModel, deployment: str, what: str, feature_changes: int = 0) -> dict[str, Any]:
    """What an edge attack ran, as its result records it (``extra["query_access"]``) and labels it:
    the graph its queries read (``graph``), how many of them moved a node's features by the
    querier's choice (``feature_changes``), how many new releases were charged to the training
    data (``charged_releases``) and the label (``ran``), e.g. "training-graph: 412 queries with
    querier-chosen feature changes over the owner's full training graph; 413 release(s) charged
    to the training data"."""
    full = deployment == TRAINING_GRAPH
    graph = "the owner's full training graph"
    if not full:
        graph = "the querier's graph (the auditor's graph without the edges training read)"
    charged = int(getattr(model, "charged_releases", 0) or 0)
    label = f"{deployment}: {what} over {graph}"
    if feature_changes:
        label = f"{deployment}: {feature_changes} queries with querier-chosen feature changes over {graph}"
    if charged:
        label += f"; {charged} release(s) charged to the training data"
    elif callable(getattr(model, "charges_training", None)) and full:
        label += "; answered from the training release (nothing new charged)"
    return {
        "deployment": deployment,
        "graph": graph,
        "feature_changes": int(feature_changes),
        "charged_releases": charged,
        "ran": label,
    }


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
    """The attacked model as a result records it: ``epsilon`` is the training ε,
    ``epsilon_total`` the training data's total once the releases this object made over the
    training graph are charged to it (:attr:`~dpaudit.release.model.ReleasedModel.charged_privacy`;
    equal to ``epsilon`` when nothing was charged), ``charged_releases`` their number."""
    p = model.privacy
    total = model.charged_privacy
    return {
        "method": model.method,
        "kind": model.kind,
        "dataset": (model.card.get("dataset") or {}).get("name"),
        "epsilon": p.epsilon if p.is_private else None,
        "epsilon_total": total.epsilon if total.is_private else None,
        "charged_releases": int(getattr(model, "charged_releases", 0) or 0),
        "delta": p.delta,
        "unit": p.unit,
        "sound": p.sound,
        "status": p.status,
        "target_epsilon": model.card.get("target_epsilon"),
        "inference_private": model.inference_private,
        "noise": card_noise_mode(model.card),  # "seeded": not a release (dpaudit.training.noise)
    }


def lower_bound_delta(cov: Coverage, model: ReleasedModel) -> float:
    """δ used in the ε lower bound: the guarantee's δ for the attacked unit when covered,
    else the model's own δ (0 for a non-private model). A group guarantee whose δ reached 1
    (δ·k·e^((k−1)ε) at a large ε) says nothing; the bound then uses the model's own δ, a
    valid statement about the attacked unit that the vacuous guarantee cannot contradict."""
    own = float(model.privacy.delta) if model.privacy.is_private else 0.0
    if cov.covered and float(cov.delta) < 1.0:
        return float(cov.delta)
    return own


def _spent_above_target(model: ReleasedModel, ceiling: dict[str, Any]) -> str | None:
    """Record in ``ceiling`` the ε the comparison used — the training data's total when the attack
    ended: the training ε composed with the releases this object made over the training graph
    (:attr:`~dpaudit.release.model.ReleasedModel.charged_privacy`; GAP's PMA releases over the
    training graph or a feature-perturbed copy of it) — beside the training ε
    (``epsilon_training``), the number of charged releases and the training target, and say so
    when it is above the target: a table's ε column names the target, and "covered" alone would
    read as covered at it."""
    if not model.privacy.is_private:
        return None
    total = model.charged_privacy
    spent = float(total.epsilon)
    charged = int(getattr(model, "charged_releases", 0) or 0)
    target = model.card.get("target_epsilon")
    ceiling["epsilon_spent"] = spent
    ceiling["epsilon_training"] = float(model.privacy.epsilon)
    ceiling["charged_releases"] = charged
    ceiling["target_epsilon"] = target
    if charged and total is not model.privacy:
        return (
            f"compared with ε = {spent:.4g}: the training ε = {model.privacy.epsilon:.4g} composed with the "
            f"{charged} release(s) this attack's queries made over the training graph (charged to the training "
            f"data){'' if target is None else f'; the training target was ε = {float(target):g}'}"
        )
    if target is None or spent <= float(target) * (1.0 + 1e-9):
        return None
    return (
        f"compared with ε = {spent:.4g}, the ε spent by training and the queries this attack made, not the training "
        f"target ε = {float(target):g}"
    )


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
    nodes: list[np.ndarray] | None = None,
    dataset: GraphDataset | None = None,
    audit_game: bool = True,
    diagnostic: bool | None = None,
    baseline_runs: list[tuple[np.ndarray, np.ndarray]] | None = None,
    baseline: str | None = None,
) -> AttackResult:
    """Statistics (:func:`dpaudit.auditing.statistics.summarize_runs`) + coverage + ceiling + validity → result.

    Node-membership ``runs`` are expected in the order of
    :meth:`dpaudit.data.splits.MembershipSet.nodes_and_labels` on a :func:`C.partition` target
    (``audit_game=True``): the i-th member and i-th non-member score are pair i of the
    randomized audit game, which the one-run ε lower bound needs. ``nodes`` (one array per run,
    aligned with that run's scores) and ``dataset`` add per-node risk slices
    (``extra["risk_slices"]``: :func:`risk_slices`).

    Every result says ``bound_valid`` and ``bound_validity`` (:func:`bound_validity`). When the
    bound is not valid, ``epsilon_lower_bound`` and ``ceiling_auc`` are None and the numbers are
    kept under ``extra["not_a_valid_bound"]``, never shown as a comparison with the guarantee.

    ``neighbouring=False`` marks an attack whose two classes are not neighbouring datasets
    (natural edges versus non-edges: different pairs, whose features differ by homophily).
    The guarantee still protects each edge (``covered_by_guarantee``), but the DP ceiling and
    the ε lower bound describe a test of one unit's presence, not this comparison — a
    feature-only MLP that never sees an edge scores link-stealing AUC 0.80 on cora_ml. The
    would-be ceiling is kept in ``ceiling["ceiling_auc_if_neighbouring"]`` and the statistic in
    ``extra["pair_distinguishability"]``.

    Group size (node membership): when the recipe keeps non-members in its training graph
    (:func:`keeps_non_members_in_training_graph`), a member and a non-member differ by two node
    changes, so the ceiling uses group privacy with k = 2; one pair's coin in the ε lower bound
    is twice that many changes (remove the member, add the non-member).

    ``baseline_runs`` (one ``(scores, labels)`` per run, on the same pairs or targets as ``runs``)
    are the attack's model-free baseline, computed from the node features alone as the attack
    declares (``baseline`` says how): their mean AUC is the result's ``baseline_auc``.
    """
    if diagnostic is None:  # as the attack declares (attacks.AttackDeclaration.diagnostic)
        try:
            diagnostic = declaration(attack).diagnostic
        except DPAuditError:
            diagnostic = False
    deployment = resolve_deployment(model, settings.get("deployment"))
    settings = {**settings, "deployment": deployment}
    cov, group, coverage_notes = _attack_coverage(model, attack_unit, queries_private_graph, deployment)
    paired = attack_unit == "node" and neighbouring and audit_game
    summary = _run_statistics(model, runs, cov, attack_unit, settings, 2 * group if paired else None, run_extra)
    valid, validity = bound_validity(
        model, attack, neighbouring=neighbouring, audit_game=audit_game, diagnostic=diagnostic
    )
    per_run = summary["runs"]
    all_notes = [*(notes or []), *coverage_notes, *filter(None, [seeded_flag(model.card)])]
    extra = _measured_extra(model, extra, summary, attack_unit, runs, nodes, dataset)
    ceiling = cov.describe()
    spent_note = _spent_above_target(model, ceiling)
    if spent_note:
        all_notes.append(spent_note)
    bound = (cov.ceiling_auc, summary["epsilon_lower_bound"], summary["epsilon_lower_bound_delta"])
    if not neighbouring:
        bound = _distinguishability_instead_of_bound(model, cov, runs, settings, ceiling, extra, per_run, all_notes)
    elif not valid:
        bound = _set_aside_invalid_bound(validity, bound, ceiling, extra, per_run, all_notes)
    else:
        ceiling["applies"] = cov.covered
        all_notes.append(LOWER_BOUND_CAVEAT)
    extra["deployment"] = deployment
    extra["diagnostic"] = bool(diagnostic)  # as declared: the verdict reads it (dpaudit.auditing.verdict)
    if not model.inference_private and model.privacy.is_private and deployment == TRAINING_GRAPH:
        note = (model.card.get("inference") or {}).get("note")
        if note:
            all_notes.append(f"inference: {note}")
    ceiling_auc, lower_bound, lower_bound_delta_used = bound
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
        bound_valid=valid,
        bound_validity=validity,
        baseline_auc=baseline_auc(baseline_runs),
        baseline=baseline if baseline_runs else None,
    )


# --------------------------------------------------------------------------- model-free baselines


def baseline_auc(baseline_runs: list[tuple[np.ndarray, np.ndarray]] | None) -> float | None:
    """The mean AUC of a model-free baseline's runs (None without runs).

    Args:
        baseline_runs: one ``(scores, labels)`` per run, higher score = member / edge.

    Returns:
        The mean AUC over runs, or None.
    """
    if not baseline_runs:
        return None
    return float(np.mean([auc(np.asarray(s, dtype=float), np.asarray(lab)) for s, lab in baseline_runs]))


def feature_cosine(x: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The cosine similarity of the features of the pairs ``(u[i], v[i])``: the feature-only
    link-inference baseline (He et al. 2021's attack-0 on features instead of posteriors).

    Args:
        x: node features.
        u: first endpoints.
        v: second endpoints.

    Returns:
        One similarity per pair (0 where a row is all zero).

    Shapes:
        x: [N, F]; u, v: [P]; returns [P].
    """
    a, b = x[u].astype(np.float64), x[v].astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-12)


def class_typicality(dataset: GraphDataset, nodes: np.ndarray) -> np.ndarray:
    """A feature-only membership score: minus the distance of each node's features to the mean
    features of its class, the mean taken over every labelled node of the public dataset (no
    membership information). Under a random split members and non-members are exchangeable, so
    its AUC is ≈ 0.5 up to sampling noise.

    Args:
        dataset: the public dataset (features and labels).
        nodes: the scored nodes.

    Returns:
        One score per node (higher = more typical of its class).

    Shapes:
        nodes: [M]; returns [M].
    """
    x = dataset.data.x.cpu().numpy().astype(np.float64)
    y = dataset.data.y.cpu().numpy()
    nodes = np.asarray(nodes, dtype=np.int64).reshape(-1)
    labelled = y >= 0
    means = np.zeros((int(y.max()) + 1 if labelled.any() else 1, x.shape[1]))
    for c in np.unique(y[labelled]):
        means[c] = x[y == c].mean(axis=0)
    centre = np.where((y[nodes] >= 0)[:, None], means[np.maximum(y[nodes], 0)], x.mean(axis=0))
    return -np.linalg.norm(x[nodes] - centre, axis=1)


def _attack_coverage(
    model: ReleasedModel, attack_unit: str, queries_private_graph: bool, deployment: str
) -> tuple[Coverage, int, list[str]]:
    """The guarantee's coverage of the attack (:func:`coverage`), the group size one member/non-member
    difference is (:func:`keeps_non_members_in_training_graph`), and the notes both imply."""
    group, group_why = 1, ""
    if attack_unit == "node":
        keeps, group_why = keeps_non_members_in_training_graph(model)
        group = 2 if keeps else 1
    cov = coverage(
        model.charged_privacy,  # the training ε composed with the releases charged to the training data
        attack_unit,
        queries_private_graph,
        model.inference_private,
        node_group_size=group,
        deployment=deployment if (queries_private_graph or attack_unit == "node") else QUERIER_GRAPH,
        inference=model.card.get("inference"),
    )
    notes = [cov.reason, *cov.notes]
    if attack_unit == "node":
        notes.append(f"group size {group}: {group_why}")
    return cov, group, notes


def _run_statistics(model, runs, cov, attack_unit, settings, pair_group_size, run_extra) -> dict[str, Any]:
    """:func:`summarize_runs` at the δ the attack's ε lower bound is stated at, each run numbered and
    given its ``run_extra``."""
    base_delta = float(model.privacy.delta) if model.privacy.is_private else 0.0
    summary = summarize_runs(
        runs,
        base_delta if attack_unit == "node" else lower_bound_delta(cov, model),
        n_boot=int(settings.get("n_boot", 1000)),
        seed=int(settings.get("seed", 0)),
        pair_group_size=pair_group_size,
    )
    for i, r in enumerate(summary["runs"]):
        r["run"] = i
        if run_extra and i < len(run_extra):
            r.update(run_extra[i])
    return summary


def _measured_extra(model, extra, summary, attack_unit, runs, nodes, dataset) -> dict[str, Any]:
    """The result's ``extra``: the caller's, the summary's lower bound and AUC spread, per-node risk
    slices (:func:`risk_slices`) and a query-charged model's query ledger."""
    extra = dict(extra or {})
    extra["lower_bound"] = summary["lower_bound"]
    extra["auc_std"] = summary["auc_std"]
    extra["auc_ci_components"] = summary["auc_ci_components"]
    extra["attack_unit"] = attack_unit
    if nodes is not None and dataset is not None and attack_unit == "node":
        extra["risk_slices"] = risk_slices(dataset, nodes, runs)
    query_ledger = getattr(model, "query_ledger", None)  # GAP: releases on query graphs, some charged to training
    if query_ledger is not None:
        extra["query_ledger"] = query_ledger.to_dict()
    return extra


def _distinguishability_instead_of_bound(model, cov, runs, settings, ceiling, extra, per_run, notes) -> tuple:
    """Two classes that are not neighbouring datasets: no ceiling or ε lower bound, a
    distinguishability statistic in their place (``ceiling``, ``extra``, ``per_run`` and ``notes``
    are updated); the (ceiling AUC, ε lower bound, its δ) shown: all None."""
    ceiling["applies"] = False
    ceiling["ceiling_auc_if_neighbouring"] = ceiling.pop("ceiling_auc")
    ceiling["why_not"] = NOT_NEIGHBOURING
    # a distinguishability statistic (held-out threshold, Clopper-Pearson on the pairs as
    # independent trials), never a bound: natural edges and non-edges are not neighbours
    extra.pop("lower_bound")
    dist_delta = lower_bound_delta(cov, model)
    stats_by_run = [
        epsilon_lower_bound(sc, lab, dist_delta, seed=int(settings.get("seed", 0)) + i)
        for i, (sc, lab) in enumerate(runs)
    ]
    extra["pair_distinguishability"] = stats_by_run[0]
    notes.append(NOT_NEIGHBOURING)
    for r, st in zip(per_run, stats_by_run):
        r.pop("epsilon_lower_bound", None)
        r["pair_distinguishability"] = st["epsilon"]
    return None, None, None


def _set_aside_invalid_bound(validity: str, bound: tuple, ceiling, extra, per_run, notes) -> tuple:
    """A bound from a game that is not a valid audit: the (ceiling AUC, ε lower bound, its δ) are kept
    under ``extra["not_a_valid_bound"]`` and the ceiling, per run, never compared with the guarantee
    (``ceiling``, ``extra``, ``per_run`` and ``notes`` are updated); the ones shown: all None."""
    ceiling_auc, lower_bound, lower_bound_delta_used = bound
    ceiling["applies"] = False
    ceiling["ceiling_auc_not_a_valid_bound"] = ceiling.pop("ceiling_auc")
    ceiling["why_not"] = validity
    extra["not_a_valid_bound"] = {
        "why": validity,
        "epsilon_lower_bound": lower_bound,
        "epsilon_lower_bound_delta": lower_bound_delta_used,
        "ceiling_auc": ceiling_auc,
    }
    notes.append(f"NOT A VALID BOUND: {validity}; no ε lower bound or ceiling is compared with the guarantee")
    for r in per_run:  # the per-run key stays (None) for callers that read it
        r["epsilon_lower_bound_not_valid"] = r.get("epsilon_lower_bound")
        r["epsilon_lower_bound"] = None
    return None, None, None


# --------------------------------------------------------------------------- per-node risk slices

DEGREE_BUCKETS = ((0, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, None))
HOMOPHILY_BUCKETS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))
SLICE_FPR = 0.01


def node_degree_and_homophily(dataset: GraphDataset) -> tuple[np.ndarray, np.ndarray]:
    """Degree (full graph) and homophily of every node: the fraction of its labeled neighbours
    that share its label (NaN without a labeled neighbour or without a label)."""
    ei = dataset.data.edge_index.cpu().numpy()
    n = dataset.num_nodes
    y = dataset.data.y.cpu().numpy()
    degree = np.bincount(ei[0], minlength=n)
    labeled = (y[ei[0]] >= 0) & (y[ei[1]] >= 0)
    same = np.bincount(ei[0][labeled], weights=(y[ei[0]] == y[ei[1]])[labeled].astype(float), minlength=n)
    count = np.bincount(ei[0][labeled], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        homophily = np.where(count > 0, same / np.maximum(count, 1), np.nan)
    return degree, homophily


def _slice_stats(scores, labels, inside, threshold) -> dict[str, Any]:
    m, o = int(np.sum(inside & (labels == 1))), int(np.sum(inside & (labels == 0)))
    out = {"members": m, "non_members": o, "auc": None, "tpr_at_1pct_fpr": None}
    if m and o:
        out["auc"] = auc(scores[inside], labels[inside])
    if m:
        out["tpr_at_1pct_fpr"] = float(np.mean(scores[inside & (labels == 1)] > threshold))
    return out


def risk_slices(dataset: GraphDataset, nodes: list[np.ndarray], runs: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Attack success by degree bucket, class and homophily bucket (which nodes leak most).

    Per run and slice: the AUC of the slice's members against the slice's non-members, and the
    TPR of the slice's members at the run's global threshold of 1 % FPR (over all its
    non-members) — "how many of these members would an attacker flag at 1 % FPR". Averaged over
    runs (counts are per run, averaged); None where a slice lacks members or non-members."""
    degree, homophily = node_degree_and_homophily(dataset)
    y = dataset.data.y.cpu().numpy()
    defs: list[tuple[str, str, Any]] = []
    for low, high in DEGREE_BUCKETS:
        label = f"{low}–{high}" if high is not None else f"≥ {low}"
        defs.append(
            (
                "degree",
                label,
                lambda v, lo=low, hi=high: (degree[v] >= lo) & (degree[v] <= (hi if hi is not None else np.inf)),
            )
        )
    for c in range(dataset.num_classes):
        defs.append(("class", str(c), lambda v, c=c: y[v] == c))
    for low, high in HOMOPHILY_BUCKETS:
        last = high >= 1.0
        defs.append(
            (
                "homophily",
                f"[{low:g}, {high:g}{']' if last else ')'}",
                lambda v, lo=low, hi=high, last=last: (
                    (homophily[v] >= lo) & ((homophily[v] <= hi) if last else (homophily[v] < hi))
                ),
            )
        )
    defs.append(("homophily", "no labeled neighbour", lambda v: np.isnan(homophily[v])))
    acc: dict[tuple[str, str], list[dict]] = {}
    for node_ids, (scores, labels) in zip(nodes, runs):
        v = np.asarray(node_ids, dtype=np.int64).reshape(-1)
        s = np.asarray(scores, dtype=float).reshape(-1)
        lab = np.asarray(labels).reshape(-1).astype(int)
        neg = np.sort(s[lab == 0])[::-1]
        k = int(np.floor(SLICE_FPR * neg.size))
        threshold = float(neg[k]) if neg.size else np.inf
        for kind, label, fn in defs:
            acc.setdefault((kind, label), []).append(_slice_stats(s, lab, fn(v), threshold))
    out: dict[str, list[dict]] = {"degree": [], "class": [], "homophily": []}
    for (kind, label), rows in acc.items():
        members = float(np.mean([r["members"] for r in rows]))
        non = float(np.mean([r["non_members"] for r in rows]))
        if members + non == 0:
            continue
        aucs = [r["auc"] for r in rows if r["auc"] is not None]
        tprs = [r["tpr_at_1pct_fpr"] for r in rows if r["tpr_at_1pct_fpr"] is not None]
        out[kind].append(
            {
                "slice": label,
                "members": members,
                "non_members": non,
                "auc": float(np.mean(aucs)) if aucs else None,
                "tpr_at_1pct_fpr": float(np.mean(tprs)) if tprs else None,
            }
        )
    out["method"] = (
        "per run: slice AUC (slice members vs slice non-members) and the slice members' TPR at the run's global "
        "1 % FPR threshold; averaged over runs. Degree in the full graph; homophily = share of labeled neighbours "
        "with the node's label"
    )
    return out


# --------------------------------------------------------------------------- attack classifiers


def fit_attack_mlp(features: np.ndarray, labels: np.ndarray, hidden=(64, 64), seed: int = 0, max_iter: int = 200):
    """A standardising MLP attack classifier (the scaler is fitted on these training rows
    only); returns ``score(features) -> P(member | features)``. With at least 50 rows of each
    class, Adam stops early when the accuracy on a held-out 10 % of these rows has not improved
    for 10 epochs (at most ``max_iter``): the attack's own data decide when to stop, several
    times sooner than 200 epochs."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels).astype(np.int64)
    if len(np.unique(labels)) < 2:
        raise DPAuditError("the attack's training data hold a single class")
    scaler = StandardScaler().fit(features)
    # The held-out share is stratified: only with enough rows of each class (tiny graphs train on all).
    early = int(np.bincount(labels).min()) >= 50
    clf = MLPClassifier(hidden_layer_sizes=tuple(hidden), max_iter=max_iter, early_stopping=early, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(scaler.transform(features), labels)
    positive = list(clf.classes_).index(1)

    def score(x: np.ndarray) -> np.ndarray:
        return clf.predict_proba(scaler.transform(x))[:, positive]

    return score


def count_setting(settings: dict[str, Any], key: str, default: int) -> int:
    """An integer setting of a cost model (:data:`attacks.CostModel`), ``default`` when absent or ``None``.

    Args:
        settings: the attack's settings.
        key: the setting.
        default: its value when absent or ``None``.

    Returns:
        The count.
    """
    value = settings.get(key, default)
    return default if value is None else int(value)
