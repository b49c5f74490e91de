r"""RMIA (Zarifzadeh, Liu, Brito Cardoso & Shokri, "Low-Cost High-Power Membership Inference
Attacks", ICML 2024) on nodes.

The test compares the target's likelihood of x with that of population samples z, each
normalised by its probability under reference models (Sec. 3 of the paper):

.. math::
    \mathrm{LR}(x) = \frac{\Pr(x \mid \theta)}{\Pr(x)}, \qquad
    \mathrm{Score}(x) = \frac{1}{|Z|}\,\bigl|\{z \in Z : \mathrm{LR}(x) / \mathrm{LR}(z) \ge \gamma\}\bigr|,

where :math:`\Pr(x \mid \theta)` is the model's probability of x's true label (softmax
output, full-graph query) and :math:`\Pr(x) = \mathbb E_{\theta'}[\Pr(x \mid \theta')]` over
reference models trained like the target on random halves of the candidates:

* **online**: IN and OUT references in complementary pairs (:func:`attacks.lira.reference_sets`),
  :math:`\Pr(x) = \frac12(\Pr_{IN}(x) + \Pr_{OUT}(x))`, the mean over all references;
* **offline** (OUT references only): the paper's linear approximation of the missing IN
  models, :math:`\Pr(x) \approx \frac12\bigl((1+a)\Pr_{OUT}(x) + (1-a)\bigr)`, i.e.
  :math:`\Pr_{IN} \approx a\Pr_{OUT} + 1 - a`. As in the paper, ``a`` is chosen by attacking
  one reference model with the others (its own training set is known to the attacker), on
  a grid in [0, 1]; a fixed ``a`` may be given instead.

Population: ``population_size`` labeled nodes of the attacker's pool that no reference
trains on; their :math:`\Pr(z)` comes from the OUT references through the same linear map
(offline: the chosen ``a``; online: ``a`` fitted by least squares to the references' own
IN/OUT probabilities of the audit nodes), so LR(z) and LR(x) estimate the same quantity.

Where the score is loose: with one fixed population the score is a non-decreasing function
of LR(x), so it ranks audit nodes exactly as LR(x) does, except that it saturates at 0 and
1 (every z beaten) and takes only |Z| + 1 values. γ only moves where the saturation happens.

Tie-break (``tie_break``). The paper's score, and the reference implementation of its graph
setting (the RMIA of the G-BASE code, Lassila et al., NeurIPS 2025), count beaten population
comparisons and stop there (that code compares LR(x) > γ·LR(z) strictly, and against each
reference model's own LR(z), so its count has R·|Z| + 1 levels): ``tie_break="none"`` is the
count. The most member-like nodes all beat every z and tie at score 1; when more non-members
are among them than the FPR level allows (two, at 1 % of 140 non-members), no threshold can
flag any of the tied members, and the TPR at that FPR drops to 0 although LR(x) itself
separates them. The default ``tie_break="likelihood-ratio"`` orders tied nodes by LR(x) (an
increment below 1/|Z| that never reorders different score values and uses no membership
label): the AUC is essentially unchanged and the low-FPR end of the ROC is LR(x)'s own.
Low-FPR numbers therefore depend on this setting, and every result records which one it used.

Shapes: probabilities of the true label ``p_target_x`` ``[n]``, ``p_ref_x`` ``[R, n]``,
``in_mask_x`` ``[R, n]``; ``p_target_z`` ``[m]``, ``p_ref_z`` ``[R, m]``; scores ``[n]``.
"""

from __future__ import annotations

import logging

import numpy as np

from attacks import _common as C
from attacks import one_graph_query, register_attack
from attacks.lira import (
    QUERY_CONSTRAINTS,
    audit_and_pool,
    query_graph,
    resolve_protocol,
    shadow_models_cost,
    size_notes,
    train_references,
)
from attacks.membership import BASELINE, _check_shadow_settings, _setup, baseline_runs, locals_settings
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import auc
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.model import ReleasedModel
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import COUNT, POSITIVE, Boolean, Interval, Options

log = logging.getLogger(__name__)

_TINY = 1e-30
A_GRID = tuple(round(0.05 * i, 2) for i in range(21))
TIE_BREAKS = ("likelihood-ratio", "none")


def true_label_prob(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Pr(x | θ) = p_{y_x}(x). ``probs`` ``[..., n, C]`` → ``[..., n]``.

    Args:
        probs: posteriors.
        labels: true labels, shape ``[n]``.

    Returns:
        The true label's probability per node.
    """
    idx = labels.reshape((1,) * (probs.ndim - 2) + (-1, 1))
    return np.take_along_axis(probs, idx, axis=-1)[..., 0]


def offline_marginal(p_out_mean: np.ndarray, a: float) -> np.ndarray:
    r""":math:`\Pr(x) \approx \frac12((1+a)\Pr_{OUT}(x) + (1-a))` (the paper's offline approximation).

    Args:
        p_out_mean: mean OUT-reference probability per node.
        a: the offline parameter, in [0, 1].

    Returns:
        The approximate marginal Pr(x), same shape.
    """
    return 0.5 * ((1.0 + a) * p_out_mean + (1.0 - a))


def fit_a_from_pairs(p_in: np.ndarray, p_out: np.ndarray) -> float:
    r"""Least-squares ``a`` in :math:`\Pr_{IN} - 1 = a(\Pr_{OUT} - 1)`, clipped to [0, 1].

    Args:
        p_in: mean IN probability per node.
        p_out: mean OUT probability per node.

    Returns:
        The fitted ``a``; 1.0 when every ``p_out`` is 1.
    """
    u, v = p_out - 1.0, p_in - 1.0
    denom = float(np.sum(u * u))
    return float(np.clip(np.sum(u * v) / denom, 0.0, 1.0)) if denom > 0 else 1.0


def pairwise_score(lr_x: np.ndarray, lr_z: np.ndarray, gamma: float, tie_break: str = "likelihood-ratio") -> np.ndarray:
    """Fraction of z with LR(x)/LR(z) ≥ γ; with ``tie_break="likelihood-ratio"`` ties are broken
    by LR(x) (below 1/|Z|), with ``"none"`` they stay (the module docstring says why it matters).

    Args:
        lr_x: likelihood ratio of each audit node.
        lr_z: likelihood ratio of each population node.
        gamma: the threshold γ.
        tie_break: ``"likelihood-ratio"`` or ``"none"``.

    Returns:
        The score of each audit node.

    Raises:
        DPAuditError: the population is empty.
        ConfigurationError: unknown ``tie_break``.
    """
    if len(lr_z) == 0:
        raise DPAuditError("RMIA needs a non-empty population")
    if tie_break not in TIE_BREAKS:
        raise ConfigurationError(f"mia-rmia tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")
    sorted_z = np.sort(lr_z)
    frac = np.searchsorted(sorted_z, lr_x / gamma, side="right") / len(lr_z)
    if tie_break == "none":
        return frac
    order = np.argsort(np.argsort(np.log(np.maximum(lr_x, _TINY)), kind="stable"), kind="stable")
    increment = (order + 1) / (len(lr_x) + 1) * (0.5 / len(lr_z))
    return frac + increment


def rmia_scores(
    p_target_x: np.ndarray,
    p_ref_x: np.ndarray,
    p_target_z: np.ndarray,
    p_ref_z: np.ndarray,
    *,
    in_mask_x: np.ndarray | None = None,
    offline: bool = False,
    a: float = 1.0,
    gamma: float = 1.0,
    tie_break: str = "likelihood-ratio",
) -> np.ndarray:
    """RMIA scores of the audit nodes x against population z (the module docstring's formulas).

    Online (``offline=False``) needs ``in_mask_x``; Pr(x) is the mean over all references,
    Pr(z) the offline map of the OUT mean with ``a`` fitted by :func:`fit_a_from_pairs`.
    Offline: every reference is OUT for x and z, and ``a`` is used for both.

    Args:
        p_target_x: the target's true-label probability per audit node, ``[n]``.
        p_ref_x: the references' per audit node, ``[R, n]``.
        p_target_z: the target's per population node, ``[m]``.
        p_ref_z: the references' per population node, ``[R, m]``.
        in_mask_x: whether each reference trained on each audit node, ``[R, n]`` (online only).
        offline: offline RMIA.
        a: the offline parameter (offline only).
        gamma: the threshold γ of :func:`pairwise_score`.
        tie_break: ``"likelihood-ratio"`` or ``"none"``.

    Returns:
        The score of each audit node, shape ``[n]``.

    Raises:
        DPAuditError: online without ``in_mask_x`` or without IN and OUT references.
    """
    if offline:
        prx = offline_marginal(p_ref_x.mean(axis=0), a)
        a_z = a
    else:
        if in_mask_x is None:
            raise DPAuditError("online RMIA needs the references' membership of the audit nodes")
        in_mask_x = in_mask_x.astype(bool)
        n_in, n_out = in_mask_x.sum(axis=0), (~in_mask_x).sum(axis=0)
        if not ((n_in > 0) & (n_out > 0)).any():
            raise DPAuditError("online RMIA needs IN and OUT references")
        p_in = (p_ref_x * in_mask_x).sum(axis=0) / np.maximum(n_in, 1)
        p_out = (p_ref_x * ~in_mask_x).sum(axis=0) / np.maximum(n_out, 1)
        both = (n_in > 0) & (n_out > 0)
        a_z = fit_a_from_pairs(p_in[both], p_out[both])
        # nodes lacking one side: the linear map fills it in
        p_in = np.where(n_in > 0, p_in, a_z * p_out + 1.0 - a_z)
        p_out = np.where(n_out > 0, p_out, np.clip((p_in - 1.0 + a_z) / max(a_z, 1e-6), 0.0, 1.0))
        prx = 0.5 * (p_in + p_out)
    prz = offline_marginal(p_ref_z.mean(axis=0), a_z)
    lr_x = p_target_x / np.maximum(prx, _TINY)
    lr_z = p_target_z / np.maximum(prz, _TINY)
    return pairwise_score(lr_x, lr_z, gamma, tie_break)


def choose_a(
    p_ref: np.ndarray,
    in_mask: np.ndarray,
    candidates: np.ndarray,
    population: np.ndarray,
    gamma: float,
    tie_break: str = "likelihood-ratio",
) -> tuple[float, float | None]:
    """Offline ``a``: attack reference 0 with references 1..R-1 as OUT models (the attacker
    knows their training sets) and keep the grid value with the best AUC.

    ``p_ref``: ``[R, num_nodes]`` true-label probabilities; ``in_mask``: ``[R, num_nodes]``.
    Members are reference 0's training nodes among ``candidates``, non-members the other
    candidates; each node's Pr_OUT averages the other references that did not train on it
    (nodes with none are skipped). Returns (a, its AUC) — (1.0, None) when the simulation
    has no usable node (a = 1 is the plain OUT mean).

    Args:
        p_ref: true-label probabilities of the references.
        in_mask: the references' membership.
        candidates: the nodes simulated as members / non-members.
        population: the population nodes.
        gamma: the threshold γ.
        tie_break: ``"likelihood-ratio"`` or ``"none"``.

    Returns:
        ``(a, auc)``.
    """
    if p_ref.shape[0] < 2:
        return 1.0, None
    others = in_mask[1:][:, candidates]
    out_count = (~others).sum(axis=0)
    usable = out_count > 0
    nodes = candidates[usable]
    labels = in_mask[0, nodes].astype(int)
    if len(np.unique(labels)) < 2:
        return 1.0, None
    p_out = (p_ref[1:][:, nodes] * ~others[:, usable]).sum(axis=0) / out_count[usable]
    p_target_x, p_target_z = p_ref[0, nodes], p_ref[0, population]
    p_out_z = p_ref[1:][:, population].mean(axis=0)
    best, best_auc = 1.0, -1.0
    for a in A_GRID:
        lr_x = p_target_x / np.maximum(offline_marginal(p_out, a), _TINY)
        lr_z = p_target_z / np.maximum(offline_marginal(p_out_z, a), _TINY)
        value = auc(pairwise_score(lr_x, lr_z, gamma, tie_break), labels)
        if value > best_auc + 1e-12:
            best, best_auc = a, value
    return float(best), float(best_auc)


#: what each setting of :func:`mia_rmia` accepts (:func:`attacks.register_attack`); an online
#: attack's even ``num_references`` (IN/OUT pairs) depends on ``offline`` and is checked by the attack
MIA_RMIA_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    **C.SHADOW_SETTING_CONSTRAINTS,
    **QUERY_CONSTRAINTS,
    "num_references": [COUNT],
    "offline": [Boolean()],
    "gamma": [POSITIVE],
    "a": [Interval(float, 0, 1, closed="both"), None],  # None: chosen by choose_a (offline)
    "population_size": [COUNT],
    "tie_break": [Options(*TIE_BREAKS)],
}


@register_attack(
    "mia-rmia",
    MIA_RMIA_CONSTRAINTS,
    order=1,
    heading="rmia",
    quick={"num_references": 2},
    shadows=True,
    cost=shadow_models_cost("num_references"),
    releases=one_graph_query,
)
def mia_rmia(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    num_references: int = 4,
    offline: bool = False,
    gamma: float = 1.0,
    a: float | None = None,
    population_size: int = 500,
    shadow_nodes_per_class: int = 1000,
    shadow_size: str = "match",
    max_members: int | None = None,
    tie_break: str = "likelihood-ratio",
    query: str | None = None,
    protocol: str = "dpaudit",
    device: str = "auto",
    data_root: str | None = None,
    deployment: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    """RMIA (Zarifzadeh et al. 2024) against ``model``'s audit nodes.

    Per run: audit nodes and the attacker's pool (as :func:`attacks.lira.mia_lira`);
    ``population_size`` pool nodes are set aside as the population Z (capped at half the
    pool and at what the references leave: :func:`attacks.lira.population_size_for`);
    ``num_references`` references are trained with the target's recipe (``shadow_size="match"``:
    online exactly as many nodes as the target; :mod:`attacks.lira` for offline) — online:
    complementary IN/OUT pairs over the audit nodes (even count); offline: on pool nodes
    only; target and references are
    queried once (``query``/``protocol``: :mod:`attacks.lira`) and the audit nodes are scored
    by :func:`rmia_scores` with ``tie_break``. Offline ``a`` is chosen by :func:`choose_a`
    unless given.

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        num_references: reference models (online: even).
        offline: offline RMIA (references on pool nodes only).
        gamma: the threshold γ.
        a: the offline parameter; ``None``: chosen by :func:`choose_a`.
        population_size: population nodes Z set aside from the pool.
        shadow_nodes_per_class: caps the attacker's pool (per class), never below what ``"match"`` references need.
        shadow_size: ``"match"`` (references train on as many nodes as the target) or ``"full"``.
        max_members: most members in the audit game; ``None``: every member the split allows.
        tie_break: ``"likelihood-ratio"`` or ``"none"``.
        query: ``"graph"`` or ``"features"`` (0-hop); ``None``: what ``protocol`` implies.
        protocol: ``"dpaudit"`` or ``"g-base"`` (module docstring of :mod:`attacks.lira`).
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
    _check_rmia_settings(num_references, offline, gamma, a, population_size, tie_break)
    _check_shadow_settings("mia-rmia", shadow_size, runs)
    query, protocol_notes = resolve_protocol("mia-rmia", model, protocol, query)
    ds, split = _setup(model, dataset, data_root)
    seed_everything(seed)
    graph = ds.data
    y = graph.y.numpy()
    p_target = true_label_prob(C.posteriors(model, query_graph(graph, query)), y)
    _, _, _, _, recipe_notes = C.shadow_recipe(model)
    run_scores, run_extra = [], []
    run_nodes: list = []
    trained_sets: list[np.ndarray] = []
    for r in range(runs):
        scored, nodes, train_sets, info = _rmia_run(
            model,
            ds,
            split,
            p_target,
            seed + 7919 * r,
            num_references=num_references,
            offline=offline,
            gamma=gamma,
            a=a,
            population_size=population_size,
            shadow_nodes_per_class=shadow_nodes_per_class,
            shadow_size=shadow_size,
            max_members=max_members,
            tie_break=tie_break,
            query=query,
            device=device,
        )
        run_scores.append(scored)
        run_nodes.append(nodes)
        trained_sets.extend(train_sets)
        run_extra.append(info)
    notes = (
        recipe_notes
        + protocol_notes
        + size_notes(trained_sets, len(split.train))
        + _rmia_notes(offline, num_references, run_extra[0]["population"], gamma, tie_break)
    )
    extra = {
        "offline": offline,
        "num_references": num_references,
        "gamma": gamma,
        "a": [e["a"] for e in run_extra],
        "tie_break": tie_break,
        "query": query,
        "protocol": protocol,
    }
    return C.make_result(
        "mia-rmia",
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


def _check_rmia_settings(
    num_references: int, offline: bool, gamma: float, a: float | None, population_size: int, tie_break: str
) -> None:
    """Refuse RMIA settings out of range, in one line, before any work."""
    if num_references < 1 or (not offline and (num_references < 2 or num_references % 2)):
        raise ConfigurationError("mia-rmia: online needs an even num_references >= 2 (IN/OUT pairs), offline >= 1")
    if not gamma > 0:
        raise ConfigurationError("mia-rmia gamma must be > 0")
    if a is not None and not 0.0 <= float(a) <= 1.0:
        raise ConfigurationError("mia-rmia a must lie in [0, 1]")
    if population_size < 1:
        raise ConfigurationError("mia-rmia population_size must be >= 1")
    if tie_break not in TIE_BREAKS:
        raise ConfigurationError(f"mia-rmia tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")


def _rmia_run(
    model,
    ds,
    split,
    p_target: np.ndarray,
    run_seed: int,
    *,
    num_references: int,
    offline: bool,
    gamma: float,
    a: float | None,
    population_size: int,
    shadow_nodes_per_class: int,
    shadow_size: str,
    max_members: int | None,
    tie_break: str,
    query: str,
    device: str,
):
    """One RMIA run: the audit nodes and the attacker's pool, the references, the population Z they
    leave, ``a`` (chosen offline unless given) and the audit nodes' scores; returns (scores,
    membership), the audited nodes, the references' training sets and the run's record."""
    y = ds.data.y.numpy()
    nodes, labels, pool, pool_kind = audit_and_pool(
        ds, split, run_seed, max_members, shadow_nodes_per_class, not offline, shadow_size, population_size
    )
    refs = train_references(
        model,
        ds,
        split,
        nodes,
        pool,
        num_references,
        not offline,
        shadow_size,
        run_seed,
        device,
        population_size=population_size,
        desc="mia-rmia references",
        query=query,
    )
    population = refs.reserved
    if len(population) < 1:
        raise ConfigurationError(
            "mia-rmia: the references need every pool node, none is left for the population "
            "(lower max_members, or raise shadow_nodes_per_class)"
        )
    p_ref = true_label_prob(refs.probs, y)  # [R, num_nodes]
    used_a, sim_auc = a, None
    if offline and a is None:
        trained_pool = np.setdiff1d(pool, population)
        used_a, sim_auc = choose_a(p_ref, refs.in_mask, trained_pool, population, gamma, tie_break)
    scores = rmia_scores(
        p_target[nodes],
        p_ref[:, nodes],
        p_target[population],
        p_ref[:, population],
        in_mask_x=refs.in_mask[:, nodes],
        offline=offline,
        a=1.0 if used_a is None else float(used_a),
        gamma=gamma,
        tie_break=tie_break,
    )
    info = {
        "seed": run_seed,
        "population": int(len(population)),
        "a": used_a,
        "a_simulation_auc": sim_auc,
        "target_train_size": int(len(split.train)),
        "reference_train_sizes": [int(len(s)) for s in refs.train_sets],
        "reference_pool": pool_kind,
    }
    return (scores, labels), nodes, refs.train_sets, info


def _rmia_notes(offline: bool, num_references: int, population: int, gamma: float, tie_break: str) -> list[str]:
    """What the result says of the mode (online or offline), the population, γ, the tie-break and the queries."""
    mode = (
        f"offline RMIA: {num_references} OUT references per run, Pr(x) ≈ ((1+a)Pr_OUT(x) + 1 - a)/2"
        if offline
        else f"online RMIA: {num_references} references per run in IN/OUT pairs over the audit nodes"
    )
    return [
        mode,
        f"population Z: {population} pool nodes no reference trained on; γ = {gamma:g}",
        f"tie-break: {tie_break} ('none' is the reference implementation's count; low-FPR TPRs depend on it)",
        "target and references are queried once; only audit nodes are scored",
    ]
