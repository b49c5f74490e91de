r"""Likelihood-ratio membership inference (LiRA, Carlini et al., "Membership Inference Attacks
From First Principles", IEEE S&P 2022), online (IN and OUT reference models) and offline (OUT
only), and the reference-model plumbing that RMIA (:mod:`attacks.rmia`) shares.

Query protocol (as every membership attack here, see :mod:`attacks.membership`): the target
and every reference model are queried once on the **full graph**, and only the audit nodes'
rows (the target's members and as many non-members, from
:func:`attacks._common.partition`) are scored. Reference models are trained with the
target's own recipe (:func:`attacks._common.train_shadow`: the card's method and
hyperparameters, or the stated surrogate recipe of an adapted model).

Reference training sets (:func:`reference_sets`), for ``R`` references and the target's
training-set size ``n_train``:

* **online**: references come in complementary pairs. Each pair draws a random half ``H`` of
  the audit nodes ``A``; one reference trains on ``H``, the other on ``A \ H``, each topped
  up with random nodes of the attacker's pool (labeled nodes outside ``A``) so that it sees
  exactly ``n_train`` training nodes like the target (``shadow_size="match"``; ``"full"`` adds
  half of the pool instead). Every audit node is therefore IN for exactly half of the
  references and OUT for the other half;
* **offline**: every reference trains on ``min(n_train, |pool|/2)`` random pool nodes (half
  of the pool with ``"full"``), so every audit node is OUT for every reference, and the
  references' sets differ like the paper's random halves of the population. When that is
  fewer than ``n_train`` (a target trained on half the graph leaves the attacker fewer than
  ``2·n_train`` nodes outside the audit set), the result says so in its notes.

Online with ``"match"`` the sizes are exact, never silently smaller. The pool is first the
labeled nodes outside the audit set *and* outside the target's training set (``"disjoint"``);
when that cannot supply the top-up (offline: ``2·n_train`` nodes) and the population (a target
trained on half the graph leaves too few), it is every labeled node outside the audit set
(``"any"``: the attacker does not know which of them the target trained on; the pool never
depends on which node of an audit pair is the member, so the pairs' coins stay fair); when even
that cannot top an online reference up, the attack stops with an error. Each run records its
``reference_pool``, ``reference_train_sizes`` and ``target_train_size``.

Queries (``query``): ``"graph"`` queries every model once on the full graph; ``"features"``
queries each node on its own features with no edge (the 0-hop query of G-BASE: Lassila et al.,
"Practical Bayes-Optimal Membership Inference Attacks", NeurIPS 2025). ``protocol="g-base"``
runs that paper's protocol: the target must have been trained on the subgraph induced by its own
training nodes (an ``inductive:`` split; the paper's half is ``--split inductive:0.5,0.5``), the
references are trained the same way on their own training sets (the target's recipe, inductive),
and every query is features-only. (The paper's graph queries restrict each node's neighbourhood
to nodes of its own membership status, which uses the membership under test; they are not
offered here.)

Shapes: ``target_phi``: ``[n]``; ``ref_phi``: ``[R, n]``; ``in_mask``: ``[R, n]`` bool (the
reference's training set contains the node); scores: ``[n]`` (higher = member).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from attacks import _common as C
from attacks import one_graph_query, register_attack
from attacks.membership import BASELINE, _check_shadow_settings, _setup, baseline_runs, locals_settings
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.model import ReleasedModel
from dpaudit.runtime import device_memory, seed_everything
from dpaudit.training.constraints import Boolean, Options

log = logging.getLogger(__name__)

_EPS = 1e-12


# --------------------------------------------------------------------------- reference models


@dataclass
class References:
    """Reference models' full-graph posteriors and their training sets.

    ``probs``: ``[R, num_nodes, C]``; ``in_mask``: ``[R, num_nodes]`` bool; ``train_sets``:
    the R training-node arrays; ``reserved``: nodes no reference ever trained on (RMIA's
    population), sorted.

    Attributes:
        probs: posteriors of every reference on every node, ``[R, num_nodes, C]``.
        in_mask: whether reference r trained on node v, ``[R, num_nodes]`` bool.
        train_sets: the R training-node arrays.
        reserved: nodes no reference trained on (RMIA's population), sorted.
    """

    probs: np.ndarray
    in_mask: np.ndarray
    train_sets: list[np.ndarray]
    reserved: np.ndarray


def top_up(num_audit: int, n_train: int, online: bool) -> int:
    """Pool nodes each online ``"match"`` reference must train on besides its half of the audit
    set to reach exactly ``n_train``; 0 offline (offline sizes follow the pool: module docstring).

    Args:
        num_audit: audit nodes (members and non-members).
        n_train: the target's training-set size.
        online: online references (IN/OUT pairs over the audit set).

    Returns:
        Pool nodes to add to each reference's training set.
    """
    return max(0, n_train - min(num_audit // 2, n_train)) if online else 0


def size_notes(train_sets: list[np.ndarray], n_train: int) -> list[str]:
    """A note when references train on fewer nodes than the target (offline, small pool).

    Args:
        train_sets: the references' training sets.
        n_train: the target's training-set size.

    Returns:
        Zero or one note.
    """
    smallest = min(len(s) for s in train_sets)
    if smallest >= n_train:
        return []
    return [
        f"references train on {smallest} nodes, fewer than the target's {n_train}: offline references never see an "
        "audit node and each takes a random half of the attacker's remaining pool at most, so that their training "
        "sets differ"
    ]


#: share of the machine's memory the references' stacked posteriors may take
REFERENCE_MEMORY_SHARE = 0.5


def check_reference_memory(num_references: int, num_nodes: int, num_classes: int) -> int:
    """Bytes the references' full-graph posteriors (float64) and membership masks take, checked
    before any reference is trained: more than :data:`REFERENCE_MEMORY_SHARE` of the machine's
    memory (:func:`dpaudit.runtime.device_memory`) is refused with one error.

    Args:
        num_references: reference models.
        num_nodes: nodes each is queried on.
        num_classes: classes of the posteriors.

    Returns:
        The bytes needed.

    Raises:
        ConfigurationError: they exceed the share of memory.
    """
    need = int(num_references) * int(num_nodes) * (8 * int(num_classes) + 1)
    memory = device_memory(torch.device("cpu"))
    if memory is not None and need > REFERENCE_MEMORY_SHARE * memory:
        raise ConfigurationError(
            f"{num_references} reference models' posteriors on {num_nodes:,} nodes need {need / 2**30:.3g} GiB, more "
            f"than half of this machine's {memory / 2**30:.3g} GiB: lower num_references / num_shadows"
        )
    return need


def population_size_for(pool_size: int, need: int, population_size: int) -> int:
    """RMIA's population: at most ``population_size`` pool nodes, at most half of the pool, and
    never the nodes the references need (``need``).

    Args:
        pool_size: nodes in the attacker's pool.
        need: pool nodes the references must train on.
        population_size: the requested population size.

    Returns:
        The population size, >= 0.
    """
    return max(0, min(population_size, pool_size // 2, pool_size - need))


def reference_sets(
    audit: np.ndarray,
    pool: np.ndarray,
    n_train: int,
    num_references: int,
    online: bool,
    shadow_size: str,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Training-node sets of the references (see the module docstring); online with ``"match"``
    each has exactly ``n_train`` nodes, or a :class:`ConfigurationError` says why it cannot.

    Args:
        audit: the audit nodes.
        pool: the attacker's pool.
        n_train: the target's training-set size.
        num_references: reference models (online: even, >= 2).
        online: complementary IN/OUT pairs over the audit set, else pool nodes only.
        shadow_size: ``"match"`` or ``"full"``.
        rng: numpy generator of the draws.

    Returns:
        One sorted int64 array of training nodes per reference.

    Raises:
        ConfigurationError: the pool is too small, or an online count is odd or below 2.
    """
    if shadow_size == "match" and online:
        need = top_up(len(audit), n_train, online)
        if need > len(pool):
            raise ConfigurationError(
                f"reference models cannot train on the target's {n_train} nodes: each needs {need} nodes of the "
                f"attacker's pool besides the audit nodes, and the pool holds {len(pool)} (lower max_members, or "
                "raise shadow_nodes_per_class)"
            )
    sets = []
    if online:
        if num_references < 2 or num_references % 2:
            raise ConfigurationError("online reference models come in IN/OUT pairs: num_references must be even >= 2")
        half = len(audit) // 2
        for _ in range(num_references // 2):
            perm = rng.permutation(audit)
            for part in (perm[:half], perm[half : 2 * half]):
                if shadow_size == "full":
                    fill = rng.permutation(pool)[: len(pool) // 2]
                    chosen = part
                else:
                    chosen = part[: min(len(part), n_train)]
                    fill = rng.permutation(pool)[: n_train - len(chosen)]
                sets.append(np.sort(np.concatenate([chosen, fill]).astype(np.int64)))
    else:
        size = len(pool) // 2 if shadow_size == "full" else min(n_train, len(pool) // 2)
        if size < 1:
            raise ConfigurationError("the attacker's pool is too small for offline reference models")
        for _ in range(num_references):
            sets.append(np.sort(rng.permutation(pool)[:size].astype(np.int64)))
    return sets


def train_references(
    model: ReleasedModel,
    ds: GraphDataset,
    split,
    audit: np.ndarray,
    pool: np.ndarray,
    num_references: int,
    online: bool,
    shadow_size: str,
    seed: int,
    device: str,
    population_size: int = 0,
    desc: str = "references",
    query: str = "graph",
) -> References:
    """Train the references with the target's recipe and query each once on
    :func:`query_graph` (``query``).

    Up to ``population_size`` pool nodes (:func:`population_size_for`) are set aside first and
    never trained on (RMIA's population ``Z``). The references' "non-members" handed to the
    recipe (used only for its own test metrics) are the candidates they did not train on.

    Args:
        model: the target; its recipe trains the references.
        ds: the graph.
        split: the target's split.
        audit: the audit nodes.
        pool: the attacker's pool.
        num_references: reference models.
        online: online (IN/OUT pairs) or offline references.
        shadow_size: ``"match"`` or ``"full"``.
        seed: seed of the draws and of the references' training.
        device: torch device of the training.
        population_size: pool nodes set aside as RMIA's population (0: none).
        desc: label of the progress bar.
        query: ``"graph"`` or ``"features"`` (:func:`query_graph`).

    Returns:
        The references' posteriors, membership masks, training sets and reserved population.

    Raises:
        ConfigurationError: not enough memory, or a reference would train on fewer than 2 nodes.
    """
    check_reference_memory(num_references, ds.num_nodes, ds.num_classes)
    rng = np.random.default_rng(seed)
    pool = rng.permutation(pool)
    need = top_up(len(audit), len(split.train), online) if shadow_size == "match" else 0
    reserve = population_size_for(len(pool), need, population_size)
    reserved, pool = np.sort(pool[:reserve]), pool[reserve:]
    sets = reference_sets(audit, pool, len(split.train), num_references, online, shadow_size, rng)
    candidates = np.concatenate([audit, pool])
    queried = query_graph(ds.data, query)
    probs, in_mask = [], np.zeros((len(sets), ds.num_nodes), dtype=bool)
    for r, members in enumerate(tqdm(sets, desc=desc, leave=False, disable=None)):
        if len(members) < 2:
            raise ConfigurationError("a reference model would train on fewer than 2 nodes")
        outside = np.setdiff1d(candidates, members)
        ref = C.train_shadow(
            model,
            ds,
            torch.as_tensor(members, dtype=torch.long),
            torch.as_tensor(outside, dtype=torch.long),
            seed=seed * 131 + r,
            device=device,
            inductive=split.inductive,
        )
        probs.append(C.posteriors(ref, queried))
        in_mask[r, members] = True
    return References(np.stack(probs), in_mask, sets, reserved)


def audit_and_pool(
    ds: GraphDataset,
    split,
    seed: int,
    max_members,
    shadow_nodes_per_class: int,
    online: bool = True,
    shadow_size: str = "match",
    population_size: int = 0,
):
    """(audit nodes, their membership labels, the attacker's pool, the pool's kind) for one run.

    The pool is ``"disjoint"`` (outside the audit set and the target's training set) when it can
    supply every ``"match"`` reference's top-up (offline: two sets of ``n_train``, so that
    random halves reach the target's size) and the population, else ``"any"`` (outside the
    audit set; the module docstring says why the audit game stays fair).

    ``shadow_nodes_per_class`` caps the pool, but never below what ``"match"`` references need:
    they train on ``n_train`` nodes whatever the pool, so a pool too small to supply them would
    only turn a large target's audit into a refusal.

    Args:
        ds: the graph.
        split: the target's split.
        seed: seed of the run's audit game.
        max_members: most members in the audit game; ``None``: every member the split allows.
        shadow_nodes_per_class: cap of the pool per class (two halves).
        online: online references.
        shadow_size: ``"match"`` or ``"full"``.
        population_size: RMIA's population drawn from the pool.

    Returns:
        ``(nodes, labels, pool, kind)`` as numpy arrays and ``"disjoint"`` or ``"any"``.

    Raises:
        ConfigurationError: fewer than 4 labeled nodes outside the audit set.
    """
    per_class = max(1, shadow_nodes_per_class // 2)
    if shadow_size == "match":
        n_audit = len(C.partition(ds, split, seed, max_members, per_class).target.nodes_and_labels()[0])
        need = top_up(n_audit, len(split.train), online) if online else 2 * len(split.train)
        per_class = max(per_class, -(-(need + population_size) // (2 * max(1, ds.num_classes))))
    for kind in ("disjoint", "any"):
        part = C.partition(ds, split, seed, max_members, per_class, shadow_pool=kind)
        nodes, labels = (t.numpy() for t in part.target.nodes_and_labels())
        pool = torch.cat([part.shadow.members, part.shadow.non_members]).numpy()
        need = top_up(len(nodes), len(split.train), online) if online else 2 * len(split.train)
        if shadow_size == "full" or len(pool) >= need + min(population_size, len(pool) // 2):
            break
    if len(pool) < 4:
        raise ConfigurationError("not enough labeled nodes outside the audit set for reference models")
    return nodes, labels, pool, part.info["shadow_pool"]


def query_graph(graph, query: str):
    """The graph every model is queried on: ``"graph"``, the full graph; ``"features"``, the same
    nodes with no edge, so each node is answered from its own features alone (G-BASE's 0-hop
    query). A shallow copy: the features are shared, never copied.

    Args:
        graph: the full graph (a PyG ``Data``).
        query: ``"graph"`` or ``"features"``.

    Returns:
        The graph to query.
    """
    if query == "graph":
        return graph
    alone = copy.copy(graph)
    alone.edge_index = graph.edge_index.new_empty((2, 0))
    return alone


QUERIES = ("graph", "features")
PROTOCOLS = ("dpaudit", "g-base")
#: the query mode and protocol of the reference-model attacks (LiRA, RMIA); ``query=None``: the
#: protocol's own (graph for ``dpaudit``, features for ``g-base``)
QUERY_CONSTRAINTS = {"query": [Options(*QUERIES), None], "protocol": [Options(*PROTOCOLS)]}


def resolve_protocol(attack: str, model: ReleasedModel, protocol: str, query: str | None) -> tuple[str, list[str]]:
    """``(query, notes)`` for ``protocol``; G-BASE (module docstring) needs a target trained on the
    subgraph induced by its own training nodes and queries features only.

    Args:
        attack: the attack's name (in messages).
        model: the target.
        protocol: ``"dpaudit"`` or ``"g-base"``.
        query: ``"graph"``, ``"features"`` or ``None`` (the protocol's default).

    Returns:
        The query and notes for the result.

    Raises:
        ConfigurationError: unknown protocol or query, G-BASE with ``query="graph"``, or G-BASE on a
            target not trained inductively.
    """
    if protocol not in PROTOCOLS:
        raise ConfigurationError(f"{attack}: protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if query is not None and query not in QUERIES:
        raise ConfigurationError(f"{attack}: query must be one of {QUERIES}, got {query!r}")
    if protocol == "dpaudit":
        query = query or "graph"
        return query, [f"query: {'full graph' if query == 'graph' else 'features only, no edge (0-hop)'}"]
    if query == "graph":
        raise ConfigurationError(f"{attack}: protocol=g-base queries features only; drop query=graph")
    card_split = model.provenance("split") or model.card.get("split") or {}
    if not card_split.get("inductive"):
        raise ConfigurationError(
            f"{attack}: protocol=g-base needs a target trained on the subgraph induced by its own training nodes "
            f"(train it with --split inductive:0.5,0.5); this model's split is {card_split.get('spec')!r}"
        )
    return "features", [
        f"G-BASE protocol (Lassila et al., NeurIPS 2025): target trained on the subgraph induced by its training "
        f"nodes (split {card_split.get('spec')!r}), references likewise on theirs, every query features-only"
    ]


# --------------------------------------------------------------------------- LiRA scores


def logit_confidence(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    r"""φ(p) = log(p_y / (1 − p_y)) (Carlini et al. 2022, Sec. IV-C: makes the per-example
    confidence distribution approximately Gaussian). ``probs``: ``[..., n, C]`` → ``[..., n]``.

    Args:
        probs: posteriors.
        labels: true labels, shape ``[n]``.

    Returns:
        φ of each node.
    """
    p = np.take_along_axis(probs, labels.reshape((1,) * (probs.ndim - 2) + (-1, 1)), axis=-1)[..., 0]
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _pooled_std(values: np.ndarray, mask: np.ndarray) -> float | None:
    """Within-node standard deviation pooled over nodes (Σ squared deviations from each
    node's own mean / Σ (count − 1)); None without a degree of freedom."""
    count = mask.sum(axis=0)
    mean = np.where(count > 0, (values * mask).sum(axis=0) / np.maximum(count, 1), 0.0)
    dof = np.maximum(count - 1, 0).sum()
    if dof < 1:
        return None
    return float(math.sqrt((((values - mean) ** 2) * mask).sum() / dof))


def lira_online_scores(
    target_phi: np.ndarray, ref_phi: np.ndarray, in_mask: np.ndarray, global_variance: bool = True
) -> np.ndarray:
    r"""Online LiRA (Carlini et al. 2022, Algorithm 1): per node, Gaussians fitted to the IN and
    OUT references' φ, and the log likelihood ratio

    .. math::
        \Lambda(v) = \log \mathcal N(\phi_t(v); \mu_{in}(v), \sigma_{in}^2)
                   - \log \mathcal N(\phi_t(v); \mu_{out}(v), \sigma_{out}^2).

    ``global_variance`` (the paper's choice below 64 references): σ_in and σ_out are the
    within-node deviations pooled over all nodes; when one side has no degree of freedom
    (one reference per side, e.g. 2 references) both use one common σ — with equal variances
    the ranking, hence AUC and TPR, does not depend on σ's value at all. Otherwise per-node
    σ (needs ≥ 2 IN and ≥ 2 OUT references per node). A node without any IN (or OUT)
    reference — possible only when the audit half exceeds the target's training size — gets
    μ_in = μ_out + the mean IN−OUT gap of the other nodes (or the reverse).

    Shapes: ``target_phi`` ``[n]``, ``ref_phi`` and ``in_mask`` ``[R, n]`` → ``[n]``.

    Args:
        target_phi: the target's φ per audit node.
        ref_phi: the references' φ.
        in_mask: whether each reference trained on each node.
        global_variance: pooled σ (above) instead of per-node σ.

    Returns:
        Log likelihood ratio per node (higher: member).

    Raises:
        DPAuditError: no IN or no OUT reference at all.
        ConfigurationError: per-node variances without >= 2 IN and OUT references per node.
    """
    in_mask = in_mask.astype(bool)
    out_mask = ~in_mask
    n_in, n_out = in_mask.sum(axis=0), out_mask.sum(axis=0)
    if not (n_in > 0).any() or not (n_out > 0).any():
        raise DPAuditError("online LiRA needs IN and OUT reference models")
    mu_in = (ref_phi * in_mask).sum(axis=0) / np.maximum(n_in, 1)
    mu_out = (ref_phi * out_mask).sum(axis=0) / np.maximum(n_out, 1)
    both = (n_in > 0) & (n_out > 0)
    gap = float(np.mean(mu_in[both] - mu_out[both])) if both.any() else 0.0
    mu_in = np.where(n_in > 0, mu_in, mu_out + gap)
    mu_out = np.where(n_out > 0, mu_out, mu_in - gap)
    if global_variance:
        s_in, s_out = _pooled_std(ref_phi, in_mask), _pooled_std(ref_phi, out_mask)
        if s_in is None or s_out is None:  # one common σ: the ranking does not depend on its value
            s_in = s_out = s_in or s_out or float(np.std(ref_phi)) or 1.0
        sigma_in, sigma_out = np.full(len(target_phi), s_in), np.full(len(target_phi), s_out)
    else:
        if (n_in < 2).any() or (n_out < 2).any():
            raise ConfigurationError("per-node variances need >= 2 IN and >= 2 OUT references per node")
        sigma_in = np.sqrt(((ref_phi - mu_in) ** 2 * in_mask).sum(axis=0) / (n_in - 1))
        sigma_out = np.sqrt(((ref_phi - mu_out) ** 2 * out_mask).sum(axis=0) / (n_out - 1))
    sigma_in, sigma_out = np.maximum(sigma_in, 1e-6), np.maximum(sigma_out, 1e-6)
    z_in, z_out = (target_phi - mu_in) / sigma_in, (target_phi - mu_out) / sigma_out
    return -0.5 * z_in**2 - np.log(sigma_in) + 0.5 * z_out**2 + np.log(sigma_out)


def lira_offline_scores(target_phi: np.ndarray, ref_phi: np.ndarray, global_variance: bool = True) -> np.ndarray:
    r"""Offline LiRA (Carlini et al. 2022, Sec. VI-C): OUT references only, the one-sided
    statistic :math:`(\phi_t(v) - \mu_{out}(v)) / \sigma_{out}` (monotone in the paper's
    :math:`1 - \Pr[Z > \phi_t]` test), one pooled σ when ``global_variance``.

    Shapes: ``target_phi`` ``[n]``, ``ref_phi`` ``[R, n]`` → ``[n]``.

    Args:
        target_phi: the target's φ per audit node.
        ref_phi: the OUT references' φ.
        global_variance: one pooled σ instead of per-node σ.

    Returns:
        The standardised score per node (higher: member).
    """
    mu = ref_phi.mean(axis=0)
    if global_variance:
        sigma = _pooled_std(ref_phi, np.ones_like(ref_phi, dtype=bool)) or float(np.std(ref_phi)) or 1.0
    else:
        sigma = ref_phi.std(axis=0, ddof=1)
    return (target_phi - mu) / np.maximum(sigma, 1e-6)


# --------------------------------------------------------------------------- the attack


#: what each setting of :func:`mia_lira` accepts (:func:`attacks.register_attack`); an online
#: attack's even ``num_shadows`` (IN/OUT pairs) depends on ``online`` and is checked by the attack
MIA_LIRA_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    **C.SHADOW_SETTING_CONSTRAINTS,
    **QUERY_CONSTRAINTS,
    "num_shadows": [C.TWO_OR_MORE],
    "online": [Boolean()],
    "global_variance": [Boolean()],
}


def shadow_models_cost(key: str):
    """The cost model of an attack training ``settings[key]`` models (default 4) per run, each
    queried once (LiRA's shadows, RMIA's references).

    Args:
        key: the setting counting the models.

    Returns:
        A :data:`attacks.CostModel`.
    """

    def cost(settings, measured, dataset) -> tuple[int, float]:
        models = C.count_setting(settings, "runs", 1) * C.count_setting(settings, key, 4)
        return models, models * (measured["shadow"] + measured["query"])

    return cost


@register_attack(
    "mia-lira",
    MIA_LIRA_CONSTRAINTS,
    order=2,
    heading="lira",
    quick={"num_shadows": 2},
    shadows=True,
    cost=shadow_models_cost("num_shadows"),
    releases=one_graph_query,
)
def mia_lira(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    num_shadows: int = 4,
    online: bool = True,
    shadow_nodes_per_class: int = 1000,
    shadow_size: str = "match",
    max_members: int | None = None,
    global_variance: bool = True,
    query: str | None = None,
    protocol: str = "dpaudit",
    device: str = "auto",
    data_root: str | None = None,
    deployment: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    r"""LiRA (Carlini et al. 2022) on nodes; online by default, offline with ``online=False``.

    Per run: the audit set (target members and as many non-members) and the attacker's pool
    (labeled nodes outside it, ``shadow_nodes_per_class`` per class at most) are drawn;
    ``num_shadows`` references are trained with the target's recipe (online: complementary
    IN/OUT pairs over the audit nodes, so ``num_shadows`` must be even; offline: on pool
    nodes only); target and references are queried once (``query``: the full graph, or
    features only; ``protocol="g-base"``: see the module docstring); each audit node
    is scored by :func:`lira_online_scores` or :func:`lira_offline_scores` on
    φ = logit(p_y). ``shadow_size="match"`` gives every reference exactly as many training
    nodes as the target had (so its generalisation gap resembles the target's).

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        num_shadows: reference models, >= 2 (even when online).
        online: online (IN/OUT pairs) or offline references.
        shadow_nodes_per_class: caps the attacker's pool (per class), never below what ``"match"`` references need.
        shadow_size: ``"match"`` (references train on as many nodes as the target) or ``"full"``.
        max_members: most members in the audit game; ``None``: every member the split allows.
        global_variance: pooled σ (:func:`lira_online_scores`).
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
    if num_shadows < 2:
        raise ConfigurationError("mia-lira needs num_shadows >= 2")
    if online and num_shadows % 2:
        raise ConfigurationError("online mia-lira needs an even num_shadows (IN/OUT pairs); or set online=False")
    _check_shadow_settings("mia-lira", shadow_size, runs)
    query, protocol_notes = resolve_protocol("mia-lira", model, protocol, query)
    ds, split = _setup(model, dataset, data_root)
    seed_everything(seed)
    graph = ds.data
    y = graph.y.numpy()
    target_probs = C.posteriors(model, query_graph(graph, query))
    _, _, _, _, recipe_notes = C.shadow_recipe(model)
    run_scores, run_extra = [], []
    run_nodes: list = []
    trained_sets: list[np.ndarray] = []
    for r in range(runs):
        run_seed = seed + 7919 * r
        nodes, labels, pool, pool_kind = audit_and_pool(
            ds, split, run_seed, max_members, shadow_nodes_per_class, online, shadow_size
        )
        refs = train_references(
            model,
            ds,
            split,
            nodes,
            pool,
            num_shadows,
            online,
            shadow_size,
            run_seed,
            device,
            desc="mia-lira shadows",
            query=query,
        )
        ref_phi = logit_confidence(refs.probs[:, nodes], y[nodes])
        target_phi = logit_confidence(target_probs[nodes], y[nodes])
        if online:
            scores = lira_online_scores(target_phi, ref_phi, refs.in_mask[:, nodes], global_variance)
        else:
            scores = lira_offline_scores(target_phi, ref_phi, global_variance)
        run_scores.append((scores, labels))
        run_nodes.append(nodes)
        trained_sets.extend(refs.train_sets)
        run_extra.append(
            {
                "seed": run_seed,
                "target_train_size": int(len(split.train)),
                "reference_train_sizes": [int(len(s)) for s in refs.train_sets],
                "reference_pool": pool_kind,
                "in_references_per_node": float(refs.in_mask[:, nodes].sum(axis=0).mean()),
            }
        )
    mode = (
        f"online LiRA: {num_shadows} references per run in IN/OUT pairs over the audit nodes"
        if online
        else f"offline LiRA: {num_shadows} OUT references per run (no audit node in any reference)"
    )
    notes = (
        recipe_notes
        + protocol_notes
        + size_notes(trained_sets, len(split.train))
        + [mode, "target and references are queried once; only audit nodes are scored"]
    )
    extra = {
        "online": online,
        "num_shadows": num_shadows,
        "global_variance": global_variance,
        "query": query,
        "protocol": protocol,
    }
    return C.make_result(
        "mia-lira",
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
