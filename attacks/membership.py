r"""Node membership inference: TSTF with a shadow model and threshold attacks (LiRA: :mod:`attacks.lira`,
RMIA: :mod:`attacks.rmia`).

Every attack scores the randomized audit game's audit set (:func:`dpaudit.data.splits.audit_game`:
class-stratified pairs of one training node and one labeled non-member outside training and
validation), all queried **in the same way**: one query of the model on the full graph, the
context the model is deployed on. Shadow models train on nodes disjoint from the target's
training set and the audit set where the graph allows (``shadow_pool="disjoint"``).

Class calibration (``calibration="class"``, the default of TSTF and the threshold attacks):
scores are standardised within each class over the audited nodes of that class (label-free:
the audit set has as many members as non-members per class, and the standardisation does not
depend on which node of a pair is the member, so the pair test stays valid). A pooled
threshold otherwise mixes classes whose typical confidence differs (Cora GCN loss: pooled AUC
0.79 vs 0.86 within classes). (Olatunji et al.'s code queries
members on the training subgraph and non-members on the full graph, so the attack partly
learns the graph context instead of membership; we never do that.)
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attacks import _common as C
from attacks import one_graph_query, register_attack
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import SHADOW_POOLS
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.release.provenance import resolve_dataset, target_split
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import COUNT, WIDTH, Options

log = logging.getLogger(__name__)

_EPS = 1e-12


#: the membership attacks' model-free baseline (:attr:`~dpaudit.auditing.results.AttackResult.baseline`)
BASELINE = (
    "features alone on the same member/non-member targets: minus the distance of a node's features to its class's "
    "mean features over the public dataset (no model query); ≈ 0.5 under a random split, where members and "
    "non-members are exchangeable"
)


def baseline_runs(dataset, run_nodes, run_scores) -> list[tuple[np.ndarray, np.ndarray]]:
    """The model-free baseline's ``(scores, labels)`` on each run's targets: :func:`C.class_typicality`.

    Args:
        dataset: the public dataset.
        run_nodes: each run's scored nodes, aligned with its scores.
        run_scores: each run's ``(scores, labels)``.

    Returns:
        One ``(scores, labels)`` per run.
    """
    return [
        (C.class_typicality(dataset, nodes), np.asarray(labels).astype(int))
        for nodes, (_, labels) in zip(run_nodes, run_scores)
    ]


def _one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
    out = np.zeros((len(labels), num_classes))
    out[np.arange(len(labels)), labels] = 1.0
    return out


TSTF_VARIANTS = ("auto", "loss", "posterior-label", "topk")


def _tstf_features(probs: np.ndarray, labels: np.ndarray, variant: str, top_k: int) -> np.ndarray:
    if variant == "posterior-label":
        return np.concatenate([probs, _one_hot(labels, probs.shape[1])], axis=1)
    # architecture- and label-agnostic: the k largest posteriors, sorted
    k = min(top_k, probs.shape[1])
    ordered = -np.sort(-probs, axis=1)[:, :k]
    if variant == "topk":
        return ordered
    # "loss": the sorted posteriors on a log scale, where an overfit model's members (p → 1)
    # still spread out, and the true label's log-probability — minus the loss, the signal of
    # the threshold attack (Yeom et al. 2018), which the shadows then learn to weigh
    p = np.clip(probs, _EPS, 1.0)
    return np.column_stack([np.log(np.clip(ordered, _EPS, 1.0)), np.log(p[np.arange(len(labels)), labels])])


CALIBRATIONS = ("class", "none")


def class_calibrate(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Standardise ``scores`` within each class (mean 0, standard deviation 1 over the nodes of
    that class; a class with one node or constant scores is only centred).

    Args:
        scores: one score per node.
        classes: the class of each node.

    Returns:
        The standardised scores (float64, a copy).
    """
    s = np.asarray(scores, dtype=np.float64).copy()
    for c in np.unique(classes):
        idx = classes == c
        sd = float(np.std(s[idx]))
        s[idx] = (s[idx] - float(np.mean(s[idx]))) / (sd if sd > 1e-12 else 1.0)
    return s


def _calibrated(scores: np.ndarray, classes: np.ndarray, calibration: str) -> np.ndarray:
    return class_calibrate(scores, classes) if calibration == "class" else np.asarray(scores, dtype=np.float64)


def _check_shadow_settings(attack: str, shadow_size: str, runs: int) -> None:
    if shadow_size not in ("match", "full"):
        raise ConfigurationError(f"{attack} shadow_size must be 'match' or 'full'")
    if runs < 1:
        raise ConfigurationError("runs must be >= 1")


def _setup(model, dataset, data_root):
    if not isinstance(model, ReleasedModel):
        raise ConfigurationError(
            "attacks need a dpaudit ReleasedModel (see dpaudit.training.adapters for your own module)"
        )
    ds = resolve_dataset(model, dataset, data_root)
    split = target_split(model, ds)
    return ds, split


#: what each setting of :func:`mia_tstf` accepts (:func:`attacks.register_attack`)
MIA_TSTF_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    **C.SHADOW_SETTING_CONSTRAINTS,
    "variant": [Options(*TSTF_VARIANTS)],
    "top_k": [COUNT],
    "num_shadows": [COUNT],
    "hidden": [WIDTH],
    "calibration": [Options(*CALIBRATIONS)],
    "shadow_pool": [Options(*SHADOW_POOLS)],
}

#: CPU seconds per run of the TSTF attack MLP on the shadow nodes' posteriors (the audit plan's
#: cost model; benchmarks/bench_estimates.py checks it)
TSTF_ATTACK_MODEL_SECONDS = 0.3
#: CPU seconds per run of the threshold attack: one loss per audit node
THRESHOLD_SECONDS = 0.02


def _tstf_cost(settings, measured, dataset) -> tuple[int, float]:
    runs = C.count_setting(settings, "runs", 1)
    return runs, runs * (measured["shadow"] + measured["query"] + TSTF_ATTACK_MODEL_SECONDS)


def _threshold_cost(settings, measured, dataset) -> tuple[int, float]:
    runs = C.count_setting(settings, "runs", 1)
    return runs, runs * THRESHOLD_SECONDS


@register_attack(
    "mia-tstf",
    MIA_TSTF_CONSTRAINTS,
    order=3,
    heading="tstf",
    quick={"runs": 1},
    shadows=True,
    cost=_tstf_cost,
    releases=one_graph_query,
)
def mia_tstf(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 3,
    seed: int = 0,
    variant: str = "auto",
    top_k: int = 3,
    num_shadows: int = 1,
    shadow_nodes_per_class: int = 1000,
    shadow_size: str = "match",
    max_members: int | None = None,
    hidden: int = 64,
    calibration: str = "class",
    shadow_pool: str = "disjoint",
    device: str = "auto",
    data_root: str | None = None,
    deployment: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    """TSTF node membership inference (Olatunji et al. 2021; GAP Section 7.4.2).

    Per run: draw the audit set (randomized audit game) and a shadow pool disjoint from it and,
    with ``shadow_pool="disjoint"`` (default, where the graph allows), from the target's
    training set (``shadow_nodes_per_class`` nodes per class when available, halved into
    shadow members / non-members); train ``num_shadows`` shadow models with the target's own
    recipe (its card → the defense registry), each on members drawn afresh from the pool; query
    them on the full graph; train a 3-layer MLP (``hidden`` units per hidden layer) on the
    shadow nodes' features → known membership; score the target's members and non-members,
    queried on the full graph. With ``calibration="class"`` every feature column is
    standardised within each class over the nodes it scores (the shadows' nodes, the audited
    nodes) before the MLP, and its scores after it (module docstring), so the MLP learns on the
    same scale as the threshold attack's class-calibrated loss. ``shadow_heldout_auc`` (per
    run) is the attack model's AUC on a quarter of the shadow nodes it was not fitted on.

    ``variant``: ``"loss"`` (what ``"auto"`` picks for a known recipe) reads the log of the ``top_k`` largest
    posteriors, sorted, and the true label's log-probability (minus the loss); ``"topk"`` the
    sorted ``top_k`` posteriors (architecture- and label-agnostic: ``"auto"`` for a user model
    audited through a surrogate recipe) and ``"posterior-label"``
    the posteriors and the one-hot label — the published settings (Olatunji et al.; GAP uses
    the sorted posteriors), with ``calibration="none"`` and ``shadow_size="full"`` as published.

    ``shadow_size="match"`` shapes each shadow's training set like the target's, from its
    public split spec (:func:`match_split_shape`: K per class for ``per-class:K,...``, else as
    many members as the target had, uniformly) with class-stratified shadow non-members, so the
    shadow's generalisation gap resembles the target's; ``"full"`` uses all shadow members.
    Measured on Cora GCNs trained on ``per-class:20,500,1000`` (seeds 0–2, 3 runs each): AUC
    0.734 mean with one shadow, 0.746 with ``num_shadows=4``, against 0.748 for the
    class-calibrated loss threshold (before the split-shaped shadows and the loss features, seed
    0: 0.639). Default 3 runs (new shadow set, shadow models and attack MLP each run) and one
    shadow model per run: sized so that a default audit of a Cora-sized model takes minutes.

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        variant: ``"auto"``, ``"loss"``, ``"topk"`` or ``"posterior-label"`` (above).
        top_k: posteriors kept per node.
        num_shadows: shadow models trained with the target's own recipe.
        shadow_nodes_per_class: nodes per class in the shadow pool, halved into shadow members and non-members.
        shadow_size: ``"match"`` (shadow training set shaped like the target's) or ``"full"``.
        max_members: most members in the audit game; ``None``: every member the split allows.
        hidden: units per hidden layer of the attack MLP.
        calibration: ``"class"`` or ``"none"``.
        shadow_pool: ``"disjoint"`` (shadow pool apart from the target's training set where the graph
            allows) or ``"any"``.
        device: torch device of the models the attack trains (``"auto"``: CUDA when available).
        data_root: where to find the dataset when ``dataset`` is ``None``.
        deployment: the deployment audited (:func:`attacks._common.resolve_deployment`; ``"auto"`` by the split).
        n_boot: bootstrap draws of each confidence interval.

    Returns:
        The attack's result: headline AUC, ε lower bound and ceiling, per-run details in ``extra``.

    Raises:
        ConfigurationError: a setting is out of range, or ``model`` is not a released model.
    """
    settings = locals_settings(locals())
    if variant not in TSTF_VARIANTS:
        raise ConfigurationError(f"mia-tstf variant must be one of {TSTF_VARIANTS}")
    if calibration not in CALIBRATIONS:
        raise ConfigurationError(f"mia-tstf calibration must be one of {CALIBRATIONS}")
    if variant == "auto":
        variant = "topk" if model.card.get("surrogate") else "loss"
        settings["variant_used"] = variant
    _check_shadow_settings("mia-tstf", shadow_size, runs)
    ds, split = _setup(model, dataset, data_root)
    seed_everything(seed)
    _, _, _, _, recipe_notes = C.shadow_recipe(model)
    run_scores, run_extra, run_nodes = [], [], []
    target_probs = C.posteriors(model, ds.data)
    features = {"variant": variant, "top_k": top_k, "calibration": calibration}
    for r in tqdm(range(runs), desc="mia-tstf", leave=False, disable=None):
        run_seed = seed + 7919 * r
        part = C.partition(ds, split, run_seed, max_members, max(1, shadow_nodes_per_class // 2), shadow_pool)
        scored, nodes, info = _tstf_run(
            model, ds, split, part, target_probs, run_seed, num_shadows, shadow_size, hidden, device, features
        )
        run_scores.append(scored)
        run_nodes.append(nodes)
        run_extra.append(info)
    extra, notes = _tstf_extra_and_notes(model, ds, split, variant, calibration, run_extra, recipe_notes)
    return C.make_result(
        "mia-tstf",
        model,
        run_scores,
        "node",
        settings,
        extra=extra,
        notes=notes,
        run_extra=run_extra,
        nodes=run_nodes,
        dataset=ds,
        baseline_runs=baseline_runs(ds, run_nodes, run_scores),
        baseline=BASELINE,
    )


def _tstf_columns(probs: np.ndarray, classes: np.ndarray, variant: str, top_k: int, calibration: str) -> np.ndarray:
    """The attack MLP's input for posteriors ``probs`` of nodes of ``classes``: the variant's features
    (:func:`_tstf_features`), each column calibrated (:func:`_calibrated_columns`)."""
    return _calibrated_columns(_tstf_features(probs, classes, variant, top_k), classes, calibration)


def _tstf_shadows(
    model, ds, split, s_in, s_out, run_seed: int, num_shadows: int, shadow_size: str, device: str, features: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """One run's shadow models (the target's recipe, members drawn afresh from the pool each), each
    queried on the full graph: the MLP's features, the known membership and the class of every
    shadow node, and the shadows' sizes, accuracies and overlap with the target's training set."""
    graph, y = ds.data, ds.data.y.numpy()
    feature_rows, label_rows, class_rows, accuracies, sizes, overlap = [], [], [], [], [], 0
    for j in range(num_shadows):
        shadow_seed = run_seed + 104729 * j
        m_in, m_out = (
            match_split_shape(s_in, s_out, split, ds.data.y, shadow_seed) if shadow_size == "match" else (s_in, s_out)
        )
        shadow = C.train_shadow(model, ds, m_in, m_out, seed=shadow_seed, device=device, inductive=split.inductive)
        shadow_nodes = torch.cat([m_in, m_out]).numpy()
        probs = C.posteriors(shadow, graph, shadow_nodes)
        feature_rows.append(_tstf_columns(probs, y[shadow_nodes], **features))
        label_rows.append(np.concatenate([np.ones(len(m_in)), np.zeros(len(m_out))]))
        class_rows.append(y[shadow_nodes])
        accuracies.append((shadow.accuracy(graph, m_in), shadow.accuracy(graph, m_out)))
        sizes.append((len(m_in), len(m_out)))
        overlap += int(np.isin(shadow_nodes, split.train.numpy()).sum())
    info = {"sizes": sizes, "accuracies": accuracies, "overlap": overlap}
    return np.concatenate(feature_rows), np.concatenate(label_rows), np.concatenate(class_rows), info


def _tstf_run(
    model,
    ds,
    split,
    part,
    target_probs: np.ndarray,
    run_seed: int,
    num_shadows: int,
    shadow_size: str,
    hidden: int,
    device: str,
    features: dict,
) -> tuple[tuple, np.ndarray, dict[str, Any]]:
    """One TSTF run on the audit set ``part``: shadows, the attack MLP fitted on three quarters of
    their nodes, the target's members and non-members scored; returns (scores, membership), the
    audited nodes and the run's record."""
    calibration = features["calibration"]
    y = ds.data.y.numpy()
    s_in, s_out = part.shadow.members, part.shadow.non_members
    if len(s_in) < 2 or len(s_out) < 2:
        raise ConfigurationError("not enough labeled nodes outside the target's split for a shadow set")
    shadow_features, shadow_labels, shadow_classes, shadows = _tstf_shadows(
        model, ds, split, s_in, s_out, run_seed, num_shadows, shadow_size, device, features
    )
    fit_idx, held_idx = _holdout(shadow_labels, run_seed)
    score_fn = C.fit_attack_mlp(
        shadow_features[fit_idx], shadow_labels[fit_idx], hidden=(hidden, hidden), seed=run_seed
    )
    nodes, labels = part.target.nodes_and_labels()
    nodes = nodes.numpy()
    raw = score_fn(_tstf_columns(target_probs[nodes], y[nodes], **features))
    scores = _calibrated(raw, y[nodes], calibration)
    held = held_idx if len(held_idx) else fit_idx
    held_scores = _calibrated(score_fn(shadow_features[held]), shadow_classes[held], calibration)
    sizes, accuracies = shadows["sizes"], shadows["accuracies"]
    info = {
        "seed": run_seed,
        "shadow_models": num_shadows,
        "shadow_members": sizes[0][0],
        "shadow_non_members": sizes[0][1],
        "shadow_pool": part.info["shadow_pool"],
        "shadow_nodes_in_target_training_set": shadows["overlap"],
        "shadow_heldout_auc": _auc_safe(held_scores, shadow_labels[held]),
        "shadow_heldout_nodes": int(len(held_idx)),
        "auc_uncalibrated": _auc_safe(raw, labels.numpy()),
        "shadow_train_accuracy": float(np.mean([a for a, _ in accuracies])),
        "shadow_test_accuracy": float(np.mean([b for _, b in accuracies])),
    }
    return (scores, labels.numpy()), nodes, info


def _tstf_extra_and_notes(
    model, ds, split, variant: str, calibration: str, run_extra: list[dict], recipe_notes: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The result's ``extra`` (variant, calibration, mean uncalibrated AUC, the target's accuracies)
    and notes (the recipe's, the queries, a shadow pool that fell back to 'any')."""
    graph = ds.data
    extra = {
        "variant": variant,
        "calibration": calibration,
        "auc_uncalibrated": float(
            np.mean([e["auc_uncalibrated"] for e in run_extra if e["auc_uncalibrated"] is not None])
        ),
        "target_train_accuracy": model.accuracy(graph, split.train),
        "target_test_accuracy": model.accuracy(graph, split.test) if len(split.test) else None,
    }
    notes = recipe_notes + ["members and non-members (target and shadow) are all queried on the full graph"]
    if any(e["shadow_pool"] != "disjoint" for e in run_extra):
        notes.append("shadow pool fell back to 'any': too few labeled nodes outside the target's training set")
    return extra, notes


def _holdout(labels: np.ndarray, seed: int, fraction: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (fit, held-out) indices: ``fraction`` of each label held out (none when a label
    has fewer than 4 rows)."""
    rng = np.random.default_rng(seed)
    fit, held = [], []
    for value in (0, 1):
        idx = rng.permutation(np.flatnonzero(labels == value))
        k = int(len(idx) * fraction) if len(idx) >= 4 else 0
        held.append(idx[:k])
        fit.append(idx[k:])
    return np.sort(np.concatenate(fit)), np.sort(np.concatenate(held))


def match_split_shape(s_in, s_out, split, y: torch.Tensor, seed: int):
    """Shadow members shaped like the target's training set, from its public split spec: K per
    class for ``per-class:K,...``, else as many as the target's, drawn uniformly; and, per
    class, as many shadow non-members as shadow members of that class — the class-stratified
    pairs of the randomized audit game the target is scored on.

    Args:
        s_in: candidate shadow members (node indices).
        s_out: candidate shadow non-members.
        split: the target's split (its ``spec`` and ``train`` are read).
        y: every node's label.
        seed: seed of the draws.

    Returns:
        ``(members, non_members)``, each sorted.

    Raises:
        ConfigurationError: fewer than 2 class-matched pairs can be drawn.
    """
    g = torch.Generator().manual_seed(seed)
    kind, _, args = str(split.spec).partition(":")
    if kind.strip().lower() == "per-class":
        per_class = int(float(args.split(",")[0]))
        members = torch.cat(
            [
                s_in[y[s_in] == c][torch.randperm(int((y[s_in] == c).sum()), generator=g)[:per_class]]
                for c in torch.unique(y[s_in]).tolist()
            ]
        )
    else:
        members = s_in[torch.randperm(len(s_in), generator=g)[: max(2, len(split.train))]]
    ins, outs = [], []
    for c in torch.unique(y[members]).tolist():
        mine, theirs = members[y[members] == c], s_out[y[s_out] == c]
        k = min(len(mine), len(theirs))
        ins.append(mine[:k])
        outs.append(theirs[torch.randperm(len(theirs), generator=g)[:k]])
    if sum(len(part) for part in ins) < 2:
        raise ConfigurationError("not enough labeled nodes outside the target's split for a class-matched shadow set")
    return torch.cat(ins).sort().values, torch.cat(outs).sort().values


def _calibrated_columns(features: np.ndarray, classes: np.ndarray, calibration: str) -> np.ndarray:
    """Every feature column standardised within each class over the scored nodes (as the
    threshold attack's scores: label-free, and symmetric in a pair's member and non-member)."""
    if calibration != "class":
        return features
    return np.column_stack([class_calibrate(column, classes) for column in features.T])


def _auc_safe(scores, labels) -> float | None:
    from dpaudit.auditing.statistics import auc

    try:
        return auc(scores, labels)
    except Exception:  # noqa: BLE001 - diagnostic only
        return None


def locals_settings(values: dict) -> dict:
    """The keyword settings of an attack call (everything but the model and the data).

    Args:
        values: ``locals()`` at the top of the attack.

    Returns:
        The settings, without ``model``, ``dataset`` and private names.
    """
    return {k: v for k, v in values.items() if k not in ("model", "dataset") and not k.startswith("_")}


THRESHOLD_SCORES = ("loss", "confidence", "entropy")


def threshold_scores(probs: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    r"""Shadow-free membership scores, each higher = member (Yeom et al. 2018; Salem et al. 2019):

    * ``loss``: :math:`\log p_y(v)` (minus the cross-entropy loss; needs the label);
    * ``confidence``: :math:`\max_c p_c(v)` (label-free);
    * ``entropy``: :math:`\sum_c p_c \log p_c` (minus the prediction entropy; label-free).

    Args:
        probs: posteriors, shape ``[n, C]``.
        labels: true labels, shape ``[n]``.

    Returns:
        Each score's name mapped to an array of shape ``[n]``.
    """
    p = np.clip(probs, _EPS, 1.0)
    return {
        "loss": np.log(p[np.arange(len(labels)), labels]),
        "confidence": probs.max(axis=1),
        "entropy": (p * np.log(p)).sum(axis=1),
    }


#: what each setting of :func:`mia_threshold` accepts (:func:`attacks.register_attack`)
MIA_THRESHOLD_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    "score": [Options(*THRESHOLD_SCORES)],
    "max_members": C.SHADOW_SETTING_CONSTRAINTS["max_members"],
    "calibration": [Options(*CALIBRATIONS)],
}


@register_attack(
    "mia-threshold",
    MIA_THRESHOLD_CONSTRAINTS,
    order=6,
    heading="thresh",
    cost=_threshold_cost,
    releases=one_graph_query,
)
def mia_threshold(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    score: str = "loss",
    max_members: int | None = None,
    calibration: str = "class",
    data_root: str | None = None,
    deployment: str = "auto",
    device: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    """Threshold membership attacks without shadow models.

    The headline uses ``score`` (``loss``, ``confidence`` or ``entropy``, see
    :func:`threshold_scores`), standardised within each class when ``calibration="class"``
    (module docstring; the pooled AUC is in ``extra["auc_uncalibrated"]``); the AUC of all
    three is in ``extra["auc_by_score"]``. Each run draws a new audit set (randomized audit game).

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        score: ``"loss"``, ``"confidence"`` or ``"entropy"``.
        max_members: most members in the audit game; ``None``: every member the split allows.
        calibration: ``"class"`` or ``"none"``.
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
    if score not in THRESHOLD_SCORES:
        raise ConfigurationError(f"mia-threshold score must be one of {THRESHOLD_SCORES}")
    if calibration not in CALIBRATIONS:
        raise ConfigurationError(f"mia-threshold calibration must be one of {CALIBRATIONS}")
    if runs < 1:
        raise ConfigurationError("runs must be >= 1")
    ds, split = _setup(model, dataset, data_root)
    probs = C.posteriors(model, ds.data)
    y = ds.data.y.numpy()
    run_scores, run_nodes, uncalibrated, run_extra = [], [], [], []
    by_score: dict[str, list] = {k: [] for k in THRESHOLD_SCORES}
    for r in range(runs):
        part = C.partition(ds, split, seed + 7919 * r, max_members, 1)
        nodes, labels = part.target.nodes_and_labels()
        nodes, labels = nodes.numpy(), labels.numpy()
        all_scores = {
            k: _calibrated(v, y[nodes], calibration) for k, v in threshold_scores(probs[nodes], y[nodes]).items()
        }
        for k, v in all_scores.items():
            by_score[k].append(_auc_safe(v, labels))
        uncalibrated.append(_auc_safe(threshold_scores(probs[nodes], y[nodes])[score], labels))
        run_extra.append({"seed": seed + 7919 * r, "auc_uncalibrated": uncalibrated[-1]})
        run_scores.append((all_scores[score], labels))
        run_nodes.append(nodes)
    extra = {
        "auc_by_score": {k: float(np.mean(v)) for k, v in by_score.items()},
        "score": score,
        "calibration": calibration,
        "auc_uncalibrated": float(np.mean(uncalibrated)),
    }
    notes = ["no shadow model: fixed-direction scores on one full-graph query"]
    if calibration == "class":
        notes.append("scores standardised within each class over the audited nodes (label-free)")
    return C.make_result(
        "mia-threshold",
        model,
        run_scores,
        "node",
        settings,
        extra=extra,
        notes=notes,
        run_extra=run_extra,
        nodes=run_nodes,
        dataset=ds,
        baseline_runs=baseline_runs(ds, run_nodes, run_scores),
        baseline=BASELINE,
    )
