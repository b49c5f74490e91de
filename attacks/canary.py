r"""Graph-native canaries: crafted nodes and edges inserted by fair coins before training,
scored from the released model (issue 15, item 2).

The audit game (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run",
and Jagielski, Ullman & Oprea 2020 for several runs)::

    draw N canaries once (fixed design, seeded)            — public, never private data
    for each run r:  S_i ~ Bernoulli(1/2) independently     — the coins (seeded, recorded)
                     D_r = D ∪ {canary i : S_i = 1}         — the only data that changes
                     M_r = Defense.fit(D_r)                 — the defense never sees S
                     score_i = f(M_r, canary i)             — one number per canary, same query for in/out

If the defense is (ε, δ)-DP for the canary's unit, the scores cannot reveal the coins better
than the DP hypothesis-testing bound allows; :mod:`dpaudit.auditing.estimators` turns the
(score, coin) pairs into ε lower bounds. What makes the bound *valid* here:

* every coin is an independent fair coin drawn *after* the design and never read by the defense
  (it only sees the resulting graph and training set);
* everything else is fixed: the base graph, its split, δ (resolved once on the base graph) and
  the defense's hyperparameters; the score of canary i uses a query that does not depend on
  the coins, except through the release itself (see *queries* below);
* the canary's unit is the defense's protected unit (node canaries: node-level DP; edge
  canaries: edge-level DP, or node-level DP with group size 2, since removing one edge is
  removing a node with its edges and adding it back without that edge).

**Node canaries** (:func:`draw_node_canaries`). N crafted nodes with out-of-distribution
features — by default a binary pattern on the feature coordinates the fewest training nodes
use (*unique support* on real sparse features: Cora's random half leaves 18 of 1,433 columns
unused and 63 used once; disjoint between canaries while the feature space allows), scaled to
``scale`` times the largest feature-row norm of the data — and a uniformly random label,
optionally wired to ``wires`` random training nodes; or copies of non-training nodes with a
flipped label. An included canary is appended to the graph (with its wires)
*and* to the training set; an excluded one is absent from the training graph. Score: the logit
margin :math:`\log p_y - \log(1-p_y)` of the canary's label (the logit scaling of LiRA,
Carlini et al. 2022) when the released model is queried on the base graph with **all**
canaries present — the same query for in and out.

**Edge canaries** (:func:`draw_edge_canaries`). N distinct node pairs at distance ≥
``min_distance`` (default 3: not within two hops), each node an endpoint of at most
``endpoint_uses`` of them (default 1; more lets a graph of n nodes hold up to
``endpoint_uses``·n/2 canaries, which the one-run certificate needs above ε ≈ 3.5); the
default picks endpoints of lowest degree first (a public property of the base graph), where
one edge moves an aggregation most. Each edge is inserted with probability ½ before
training. Score (:func:`edge_scores`): for a model that releases its hop-1 aggregations (GAP's
cached PMA output), the *aggregation likelihood* — the exact log-likelihood ratio of the
canary's coin from both endpoints' released directions, given the known base graph, with the
other canaries at a shared endpoint marginalised; otherwise the endpoints' ``embed`` cosine
similarity minus each endpoint's mean similarity to a fixed random reference set.

**Structures** (:class:`CanaryStructure`). A defense's own module may design edge canaries for
its threat model — nodes the auditor adds (public at edge level, present in every run) joined
by the canary edges — with its own score from the release; ``design={"structure": name}``
selects one (:mod:`defenses.gcon.canaries`: node pairs scored by the exact likelihood of
GCON's Θ). The game is unchanged: one fair coin per canary edge, drawn after the design.

**Queries.** A model whose inference is private (its card's ``inference.private``), or whose
training release the owner holds (GAP's aggregations of its training graph, read through
:func:`attacks._common.answering` without spending anything), is queried on its own training
graph for edge canaries: that *is* the release. Any other model reads the query
graph's edges in the clear, so it is queried on one fixed graph with every canary edge present
(same query for in and out: only the weights differ). For such weight-only releases one edge
barely moves the weights: on csbm (1000 nodes, 200 canaries) the edge-canary AUC is 0.50 for
``gcn`` and 0.51 for ``gcon`` at ε = 8 (a label-shift or posterior-KL score between the graph
with and without the canaries did no better), so their edge ε lower bound of ≈ 0 says little. Node canaries are always scored on the
graph with every canary node; for GAP that graph is not the training graph, so it is a new
PMA release that the model records in its spec (the audit compares against the ε spent after
the query).

Shapes: canary features [N, F], labels [N], wires [W, 2] (canary index, base node), pairs
[N, 2]; coins and scores [N].
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
from torch_geometric.data import Data

from attacks import _common as C
from dpaudit.accounting.conversion import group_privacy
from dpaudit.auditing.canary_design import (
    CanaryDesign,
    CanaryStructure,
    dataset_with_canaries,
    structure_of,
    undirected_pairs,
)
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.model import ReleasedModel

log = logging.getLogger(__name__)

KINDS = ("node", "edge")


# --------------------------------------------------------------------------- designs


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ConfigurationError(f"canaries: the number of canaries must be an integer >= 1, got {count!r}")
    return int(count)


NODE_FEATURES = ("rare", "sparse", "gaussian", "copy")


def _rarest_coordinates(dataset: GraphDataset, split: Split, rng: np.random.Generator) -> np.ndarray:
    """Every feature coordinate, ordered by how many training nodes use it (non-zero), fewest
    first; ties in random order. The first ones are the canary's *unique support*: a weight
    read only through them moves only with the canaries (and the noise)."""
    x = dataset.data.x[split.train]
    usage = (x.to_dense() if x.is_sparse else x).ne(0).sum(0).cpu().numpy()
    shuffled = rng.permutation(dataset.num_features)
    return shuffled[np.argsort(usage[shuffled], kind="stable")]


def draw_node_canaries(
    dataset: GraphDataset,
    split: Split,
    count: int,
    seed: int = 0,
    *,
    feature: str = "rare",
    support: int | None = None,
    scale: float = 1.0,
    query_scale: float = 1.0,
    wires: int = 0,
    signed: bool = False,
) -> CanaryDesign:
    """``count`` crafted nodes (module docstring): features, labels and wires.

    ``feature="rare"`` (default): a binary pattern on ``support`` coordinates taken from those
    the fewest training nodes use — unused ones first (their first-layer weights move only with
    the canaries and the noise) —, disjoint between canaries while the feature space allows,
    else shared as evenly as possible in that order; ``feature="sparse"``: the same on random
    coordinates; ``feature="gaussian"``: a random direction. Each is rescaled to ``scale`` × the
    largest row norm of the data (as loud as the loudest real node; clipped DP-SGD then gives
    it the full clipping norm, and the bias' share of its gradient is small). Labels are
    uniformly random. ``feature="copy"``: the features of ``count`` distinct non-training
    nodes, each with a *flipped* label (uniform over the other classes): an in-distribution
    point whose label only membership explains. ``wires`` edges join each canary to uniformly
    drawn training nodes. ``query_scale``: the released model is queried on the canaries'
    features times this factor — the same query for every canary, in or out — so that a
    canary trained loud is read where the softmax is not saturated (a saturated probability
    ties included canaries with excluded ones whose noise happens to be large).

    Args:
        dataset: the base graph the canaries are added to.
        split: its split (``feature="rare"`` counts feature use over ``split.train``).
        count: number of canaries, a positive integer.
        seed: seed of every random draw of the design.
        feature: ``"rare"``, ``"sparse"``, ``"gaussian"`` or ``"copy"`` (above).
        support: coordinates per canary pattern, in 1..num_features; ``None`` picks a default.
        scale: feature norm as a multiple of the data's largest row norm, > 0.
        query_scale: factor on the canaries' features when the model is queried, > 0.
        wires: edges drawn from each canary to training nodes.
        signed: random ±1 signs on the pattern's coordinates instead of all +1.

    Returns:
        The design (features, labels, wires and settings) of the ``count`` canaries.

    Raises:
        ConfigurationError: a setting is out of range or of the wrong type.
    """
    count = _check_count(count)
    if feature not in NODE_FEATURES:
        raise ConfigurationError(f"canaries: feature must be one of {', '.join(NODE_FEATURES)}, got {feature!r}")
    num_features = dataset.num_features
    if support is None:
        support = 1 if feature == "rare" else max(1, min(num_features // count, math.ceil(num_features / 20)))
    if isinstance(support, bool) or not isinstance(support, int) or not 1 <= support <= num_features:
        raise ConfigurationError(f"canaries: support must be an integer in 1..{num_features}, got {support!r}")
    for name, value in (("scale", scale), ("query_scale", query_scale)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
            raise ConfigurationError(f"canaries: {name} must be a positive number, got {value!r}")
    if isinstance(wires, bool) or not isinstance(wires, int) or wires < 0:
        raise ConfigurationError(f"canaries: wires must be an integer >= 0, got {wires!r}")
    rng = np.random.default_rng([int(seed), 0x43414E])
    x = np.zeros((count, num_features), dtype=np.float64)
    labels = rng.integers(0, dataset.num_classes, size=count)
    if feature == "copy":
        train = np.zeros(dataset.num_nodes, dtype=bool)
        train[split.train.cpu().numpy()] = True
        labelled = dataset.data.y.cpu().numpy() >= 0
        pool = np.flatnonzero(~train & labelled)
        if len(pool) < count:
            raise ConfigurationError(
                f"canaries: feature=copy needs {count} labelled non-training nodes to copy, the split leaves {len(pool)}"
            )
        copied = rng.choice(pool, size=count, replace=False)
        x = dataset.data.x[torch.as_tensor(copied)].double().numpy()
        shift = rng.integers(1, dataset.num_classes, size=count)  # never 0: the label always changes
        labels = (dataset.data.y[torch.as_tensor(copied)].numpy() + shift) % dataset.num_classes
    elif feature in ("rare", "sparse"):
        k = support
        order = _rarest_coordinates(dataset, split, rng) if feature == "rare" else rng.permutation(num_features)
        if count * k <= num_features:
            coords = order[: count * k].reshape(count, k)
        elif feature == "rare":
            # more slots than coordinates: canary i takes k consecutive ones, wrapping around
            coords = order[(np.arange(count)[:, None] * k + np.arange(k)[None, :]) % num_features]
        else:
            coords = np.stack([rng.choice(num_features, size=k, replace=False) for _ in range(count)])
        values = np.ones((count, 1))
        if signed and feature == "rare":
            # a column's second canary gets the opposite sign: -e_j, not a copy of +e_j (a ReLU network
            # answers the two differently, so one included canary does not lift the other's score)
            values = np.where((np.arange(count) * k // num_features) % 2 == 1, -1.0, 1.0)[:, None]
        np.put_along_axis(x, coords, np.broadcast_to(values, coords.shape).copy(), axis=1)
    else:
        x = rng.normal(size=(count, num_features))
    if feature != "copy":
        loudest = float(dataset.data.x.double().norm(dim=1).max()) or 1.0
        x *= scale * loudest / np.linalg.norm(x, axis=1, keepdims=True)
    wire_rows = np.zeros((0, 2), dtype=np.int64)
    if wires:
        train = split.train.cpu().numpy()
        if len(train) < wires:
            raise ConfigurationError(f"canaries: wires={wires} exceeds the {len(train)} training nodes")
        ends = np.stack([rng.choice(train, size=wires, replace=False) for _ in range(count)])
        wire_rows = np.stack([np.repeat(np.arange(count), wires), ends.reshape(-1)], axis=1).astype(np.int64)
    if not isinstance(signed, bool):
        raise ConfigurationError(f"canaries: signed must be true or false, got {signed!r}")
    settings = {
        "feature": feature,
        "support": support,
        "scale": scale,
        "query_scale": query_scale,
        "wires": wires,
        "seed": int(seed),
        **({"signed": True} if signed else {}),
    }
    return CanaryDesign(
        "node",
        count,
        features=torch.tensor(x, dtype=torch.float32),
        labels=torch.tensor(labels, dtype=torch.long),
        wires=wire_rows,
        settings=settings,
    )


def _within(edge_index: torch.Tensor, num_nodes: int, sources: np.ndarray, hops: int) -> list[set[int]]:
    """For each source, the set of nodes within ``hops`` hops (itself included)."""
    row, col = edge_index.cpu().numpy()
    order = np.argsort(row, kind="stable")
    row, col = row[order], col[order]
    starts = np.searchsorted(row, np.arange(num_nodes + 1))
    out = []
    for s in sources:
        seen, frontier = {int(s)}, [int(s)]
        for _ in range(hops):
            nxt = []
            for a in frontier:
                for b in col[starts[a] : starts[a + 1]]:
                    if int(b) not in seen:
                        seen.add(int(b))
                        nxt.append(int(b))
            frontier = nxt
        out.append(seen)
    return out


def draw_edge_canaries(
    dataset: GraphDataset,
    split: Split,
    count: int,
    seed: int = 0,
    *,
    min_distance: int = 3,
    endpoints: str = "low-degree",
    endpoint_uses: int = 1,
    structure: str | None = None,
) -> CanaryDesign:
    """``count`` distinct node pairs for edge canaries, each at distance ≥ ``min_distance`` in
    the base graph, every node an endpoint of at most ``endpoint_uses`` pairs.

    ``endpoints="low-degree"`` takes candidate endpoints in order of increasing degree (random
    order within a degree), ``"random"`` in uniformly random order. With ``endpoint_uses`` = 1
    a node ends at most one canary: a graph of N nodes holds at most N/2 canaries. Above 1 the
    pairs are a random matching of ``endpoint_uses`` stubs per candidate, no pair twice (the
    configuration model, invalid pairs redrawn), so a graph holds up to ``endpoint_uses``·N/2
    canaries — the certificate's ceiling grows with the count (at m = 1,000 no one-run bound
    exceeds ≈ 3.5 at δ = 1e-5). Each pair is still one edge, one unit of edge-level DP with
    its own coin; a shared endpoint's release sums the included canaries at it, which
    :func:`edge_scores` marginalises over their coins. Under an inductive split only training nodes
    are candidates (other edges never reach training). Raises :class:`ConfigurationError` when
    the graph cannot hold ``count`` pairs. ``structure`` names a registered
    :class:`CanaryStructure`, which then draws the design with its own defaults.

    Args:
        dataset: the base graph.
        split: its split (inductive: only training nodes are candidate endpoints).
        count: number of canary pairs, a positive integer.
        seed: seed of the draw.
        min_distance: least shortest-path distance of a pair in the base graph, an integer >= 2.
        endpoints: ``"low-degree"`` or ``"random"`` order of candidate endpoints.
        endpoint_uses: most pairs one node ends, in 1..``MAX_ENDPOINT_USES``.
        structure: name of a registered :class:`CanaryStructure` that draws the design instead.

    Returns:
        The design, with its ``pairs`` of shape ``[count, 2]``.

    Raises:
        ConfigurationError: a setting is out of range, or the graph cannot hold ``count`` pairs.
    """
    if structure is not None:
        return structure_of(structure).draw(dataset, split, count, seed)
    count = _check_count(count)
    if endpoints not in ("low-degree", "random"):
        raise ConfigurationError(f"canaries: endpoints must be low-degree or random, got {endpoints!r}")
    if isinstance(min_distance, bool) or not isinstance(min_distance, int) or min_distance < 2:
        raise ConfigurationError(f"canaries: min_distance must be an integer >= 2, got {min_distance!r}")
    if (
        isinstance(endpoint_uses, bool)
        or not isinstance(endpoint_uses, int)
        or not 1 <= endpoint_uses <= MAX_ENDPOINT_USES
    ):
        raise ConfigurationError(
            f"canaries: endpoint_uses must be an integer in 1..{MAX_ENDPOINT_USES}, got {endpoint_uses!r}"
        )
    rng = np.random.default_rng([int(seed), 0x454447])
    n = dataset.num_nodes
    edge_index = dataset.data.edge_index
    candidates = split.train.cpu().numpy() if split.inductive else np.arange(n)
    degree = np.bincount(edge_index[0].cpu().numpy(), minlength=n)
    shuffled = rng.permutation(candidates)
    if endpoints == "low-degree":
        shuffled = shuffled[np.argsort(degree[shuffled], kind="stable")]
    # endpoints needed: 2·count slots over ``endpoint_uses`` each, with room for rejected pairs
    pool = shuffled[: min(len(shuffled), 6 * math.ceil(count / endpoint_uses) + 16)]
    near = dict(zip(pool.tolist(), _within(edge_index, n, pool, min_distance - 1)))
    if endpoint_uses == 1:
        pairs = _pairs_once(pool, near, count)
    else:
        pairs = _pairs_reused(pool, near, count, endpoint_uses, rng)
    if len(pairs) < count:
        raise ConfigurationError(
            f"canaries: found only {len(pairs)} node pairs at distance >= {min_distance} with at most "
            f"{endpoint_uses} canar{'y' if endpoint_uses == 1 else 'ies'} per endpoint; ask for fewer canaries "
            f"(--canaries) or more per endpoint (--design endpoint_uses=K) on this graph"
        )
    settings = {"min_distance": min_distance, "endpoints": endpoints, "endpoint_uses": endpoint_uses, "seed": int(seed)}
    return CanaryDesign("edge", count, pairs=np.asarray(pairs, dtype=np.int64), settings=settings)


def _pairs_once(pool: np.ndarray, near: dict[int, set[int]], count: int) -> list[tuple[int, int]]:
    """Greedy pairs in ``pool`` order, every endpoint used once."""
    used: set[int] = set()
    pairs = []
    for i, u in enumerate(pool.tolist()):
        if u in used:
            continue
        for v in pool[i + 1 :].tolist():
            if v not in used and v not in near[u]:
                pairs.append((min(u, v), max(u, v)))
                used.update((u, v))
                break
        if len(pairs) == count:
            break
    return pairs


def _pairs_reused(
    pool: np.ndarray, near: dict[int, set[int]], count: int, uses: int, rng: np.random.Generator, rounds: int = 50
) -> list[tuple[int, int]]:
    """Up to ``count`` distinct far-apart pairs, each node of ``pool`` in at most ``uses``: the
    configuration model on ``uses`` stubs per node, in ``pool`` order (lowest degree first when
    the pool is so ordered); stubs of a rejected pair (a node with itself, too near, or a pair
    already drawn) are shuffled again, for at most ``rounds`` rounds."""
    # a tenth more nodes than the stubs strictly needed: rejected pairs leave stubs unmatched
    needed = min(len(pool), math.ceil(1.1 * 2 * count / uses) + 2)
    stubs = np.repeat(pool[:needed], uses)
    chosen: set[tuple[int, int]] = set()
    for _ in range(rounds):
        stubs = rng.permutation(stubs)
        left = []
        for a, b in zip(stubs[0::2].tolist(), stubs[1::2].tolist()):
            pair = (min(a, b), max(a, b))
            if a != b and b not in near[a] and pair not in chosen and len(chosen) < count:
                chosen.add(pair)
            else:
                left += [a, b]
        if len(stubs) % 2:
            left.append(int(stubs[-1]))
        if len(chosen) == count or len(left) < 2:
            break
        stubs = np.asarray(left, dtype=np.int64)
    return sorted(chosen)


def _structure(design: CanaryDesign) -> CanaryStructure | None:
    name = design.settings.get("structure")
    return None if name is None else structure_of(name)


def draw_canaries(dataset: GraphDataset, split: Split, kind: str, count: int, seed: int = 0, **options) -> CanaryDesign:
    """Draw a canary design of ``kind`` (``"node"`` or ``"edge"``).

    Dispatches to :func:`draw_node_canaries` or :func:`draw_edge_canaries`; an option
    ``structure`` hands the drawing of edge canaries to that registered :class:`CanaryStructure`.

    Args:
        dataset: the base graph.
        split: its split.
        kind: ``"node"`` or ``"edge"``.
        count: number of canaries.
        seed: seed of the draw.
        **options: keyword options of the drawing function (or of the structure).

    Returns:
        The canary design.

    Raises:
        ConfigurationError: unknown ``kind``, a structure asked for node canaries, or a bad option.
    """
    if "structure" in options:
        if kind != "edge":
            raise ConfigurationError(f"canaries: a structure designs edge canaries, not {kind} canaries")
        name = options.pop("structure")
        return structure_of(name).draw(dataset, split, count, seed, **options)
    if kind == "node":
        return draw_node_canaries(dataset, split, count, seed, **options)
    if kind == "edge":
        return draw_edge_canaries(dataset, split, count, seed, **options)
    raise ConfigurationError(f"canary kind must be one of {', '.join(KINDS)}, got {kind!r}")


def flip_coins(count: int, seed: int, run: int) -> np.ndarray:
    """The fair coins of one run: independent Bernoulli(½), seeded by (seed, run).

    Args:
        count: number of canaries.
        seed: the audit's seed.
        run: the run index.

    Returns:
        Boolean array of shape ``[count]``: ``True`` where the canary is included.
    """
    return np.random.default_rng([int(seed), int(run), 0x434F494E]).random(count) < 0.5


# --------------------------------------------------------------------------- injection


def _with_nodes(base: GraphDataset, design: CanaryDesign, chosen: np.ndarray, feature_scale: float = 1.0):
    """The base graph plus the chosen canary nodes (appended in canary order, features times
    ``feature_scale``) and their wires."""
    n = base.num_nodes
    index = {int(c): n + j for j, c in enumerate(chosen)}
    x = torch.cat([base.data.x, feature_scale * design.features[torch.as_tensor(chosen, dtype=torch.long)]])
    y = torch.cat([base.data.y, design.labels[torch.as_tensor(chosen, dtype=torch.long)]])
    wires = [(index[int(c)], int(b)) for c, b in design.wires if int(c) in index]
    edges = torch.cat([base.data.edge_index, undirected_pairs(np.asarray(wires, dtype=np.int64).reshape(-1, 2))], dim=1)
    return dataset_with_canaries(base, x, y, edges, f"{len(chosen)} node canaries appended")


def training_data(base: GraphDataset, split: Split, design: CanaryDesign, included: np.ndarray):
    """(dataset, split) a run trains on: the base graph with the included canaries only.

    Node canaries are appended after the base nodes (in canary order) and added to
    ``split.train``; edge canaries are added to the edge set. Val/test parts are unchanged.

    Args:
        base: the base graph, without canaries.
        split: its split.
        design: the canary design.
        included: boolean coins, shape ``[design.count]``.

    Returns:
        ``(dataset, split)`` to train the run's model on.

    Raises:
        DPAuditError: ``included`` does not have one coin per canary.
    """
    included = np.asarray(included, dtype=bool)
    if included.shape != (design.count,):
        raise DPAuditError(f"canaries: {design.count} coins expected, got shape {included.shape}")
    structure = _structure(design)
    if structure is not None:
        return structure.training_data(base, split, design, included)
    chosen = np.flatnonzero(included)
    if design.kind == "node":
        ds = _with_nodes(base, design, chosen)
        new = torch.arange(base.num_nodes, ds.num_nodes, dtype=torch.long)
        train = torch.cat([split.train, new])
        node_part = None
        if split.node_part is not None:  # a canary forms its own part: its wires are never visible
            node_part = torch.cat([split.node_part, torch.full((len(new),), -2, dtype=split.node_part.dtype)])
        sp = Split(
            train,
            split.val,
            split.test,
            spec=split.spec,
            seed=split.seed,
            inductive=split.inductive,
            info=dict(split.info),
            node_part=node_part,
            declared_sizes=split.declared_sizes,
        )
        return ds, sp
    edges = torch.cat([base.data.edge_index, undirected_pairs(design.pairs[chosen])], dim=1)
    ds = dataset_with_canaries(base, base.data.x, base.data.y, edges, f"{len(chosen)} edge canaries inserted")
    return ds, split


def query_graph(
    base: GraphDataset,
    split: Split,
    design: CanaryDesign,
    train_ds: GraphDataset,
    train_split: Split,
    model: ReleasedModel,
) -> tuple[Data, np.ndarray]:
    """(graph, index of each canary in it) on which the released model is queried. Node canaries
    are queried at ``query_scale`` × their training features (a fixed choice of the design).

    Args:
        base: the base graph.
        split: its split.
        design: the canary design.
        train_ds: the graph the model was trained on (base plus included canaries).
        train_split: the split it was trained with.
        model: the released model; an edge audit of a model that answers from its release is queried on
            the training graph, otherwise on the base graph with every canary edge.

    Returns:
        ``(graph, index)``: the query graph and, per canary, its node index (node canaries) or its
        endpoint pair (edge canaries, shape ``[count, 2]``).
    """
    if design.kind == "node":
        ds = _with_nodes(base, design, np.arange(design.count), design.settings.get("query_scale", 1.0))
        return ds.data, np.arange(base.num_nodes, ds.num_nodes)
    if answers_from_release(model):
        return train_split.graph_for(train_ds, "train"), design.pairs
    full = training_data(base, split, design, np.ones(design.count, dtype=bool))[0]
    return full.data, design.pairs


def answers_from_release(model: ReleasedModel) -> bool:
    """Whether a query on the training graph reads only the release: private inference, or a
    model whose training release the owner holds (GAP's cached aggregations, also at ε = ∞:
    :func:`attacks._common.training_release`; reading it spends nothing).

    Args:
        model: the released model.

    Returns:
        ``True`` when querying it on the training graph reads only what was released.
    """
    return bool(model.inference_private or C.training_release(model) is not None)


# --------------------------------------------------------------------------- scores


def node_scores(model: ReleasedModel, graph: Data, nodes: np.ndarray, labels: torch.Tensor) -> np.ndarray:
    """Logit margin log p_y − log(1 − p_y) of each canary's label (higher: more likely a member).

    Args:
        model: the released model.
        graph: the query graph.
        nodes: index of each canary node in ``graph``.
        labels: each canary's label.

    Returns:
        Float array with one score per canary.

    Shapes:
        nodes: [count]
        labels: [count]
    """
    proba = C.answering(model, graph).predict_proba(graph, torch.as_tensor(nodes, dtype=torch.long))
    proba = proba.detach().cpu().double()
    p = proba[torch.arange(len(nodes)), labels.cpu()].clamp(1e-12, 1 - 1e-12)
    return (p.log() - (-p).log1p()).numpy()


def _aggregation_view(model: ReleasedModel, graph: Data) -> tuple[torch.Tensor, torch.Tensor, float] | None:
    """(hop-0 encodings X0 and released hop-1 aggregations H1, both row-normalised [N, hidden],
    and the per-entry noise std τ of H1 before its normalisation) for a model that releases
    per-hop aggregations (``representation`` = [X0 | H1 | ... | HK] with ``cfg["hidden"]``
    columns per hop — ``num_classes`` under GAP-EDP's skip head — as GAP's, read from its training
    release on the training graph; τ is
    ``cfg["noise_std"]``, 0 when absent); ``None`` otherwise."""
    source = C.answering(model, graph)
    rep = getattr(source, "representation", None)
    cfg = getattr(source, "cfg", None) or {}
    # each hop's width: ``hidden``, or the class count under sound GAP-EDP's skip head (issue 50),
    # whose PMA releases the encoder's C class probabilities per hop
    hidden = cfg.get("num_classes") if cfg.get("head") == "skip" else cfg.get("hidden")
    if not callable(rep) or not isinstance(hidden, int):
        return None
    h = rep(graph).detach().cpu().double()
    if h.size(1) < 2 * hidden:
        return None
    normalize = torch.nn.functional.normalize
    # the rows the release sums, where the model declares them (GAP: ``pma_rows``), else hop 0
    rows = getattr(source, "pma_rows", None)
    x0 = rows(graph).detach().cpu().double() if callable(rows) else h[:, :hidden]
    return (
        normalize(x0, dim=1),
        normalize(h[:, hidden : 2 * hidden], dim=1),
        float(cfg.get("noise_std") or 0.0),
    )


#: the likelihood of a release enumerates every coin pattern of an endpoint's canaries: 2^k of them
MAX_ENDPOINT_USES = 6


def _log_radial_integral(t: torch.Tensor, dims: int) -> torch.Tensor:
    r"""log ∫₀^∞ r^{d−1} exp(−(r − t)²/2) dr for every t, by quadrature on 201 points around the
    integrand's mode (its log is concave: the points span ±10 of its curvature width)."""
    mode = 0.5 * (t + (t * t + 4.0 * (dims - 1)).sqrt())
    width = (1.0 + (dims - 1) / mode.clamp(min=1e-12).pow(2)).rsqrt()
    offsets = torch.linspace(-10.0, 10.0, 201, dtype=t.dtype)
    r = mode.unsqueeze(-1) + width.unsqueeze(-1) * offsets
    log_f = (dims - 1) * r.clamp(min=1e-300).log() - 0.5 * (r - t.unsqueeze(-1)).pow(2)
    log_f = torch.where(r > 0, log_f, torch.full_like(log_f, -math.inf))
    return torch.logsumexp(log_f, dim=-1) + (0.1 * width).log()


def _endpoint_log_ratios(
    x0: torch.Tensor, h1: torch.Tensor, b: torch.Tensor, pairs: np.ndarray, tau: float, chunk: int = 512
) -> torch.Tensor:
    r"""Per (canary, end) [N, 2]: the log-likelihood ratio of the canary's coin (1 against 0)
    given that end's released direction, the other canaries at the end marginalised over
    their fair coins.

    End a with canary partners P releases the direction :math:`h_a` of :math:`\mu + n` with :math:`\mu = b_a + \sum_{c \in P} s_c x_c` and
    :math:`n \sim \mathcal N(0, \tau^2 I_d)`; the norm is not released. The density of the
    direction (the projected normal) is, up to a constant,
    :math:`\exp(-\|\mu_\perp\|^2 / 2\tau^2)\,J(\langle h_a, \mu\rangle/\tau)` with
    :math:`\mu_\perp = \mu - \langle h_a, \mu\rangle h_a` and
    :math:`J(t) = \int_0^\infty r^{d-1} e^{-(r-t)^2/2}\,dr`; it is evaluated for every
    pattern of the partners' coins (:data:`MAX_ENDPOINT_USES` bounds their number)."""
    ends = torch.as_tensor(pairs).reshape(-1)  # canary i's ends at 2i (u) and 2i + 1 (v)
    others = torch.as_tensor(pairs[:, ::-1].copy()).reshape(-1)
    nodes, slot_of = torch.unique(ends, return_inverse=True)
    order = torch.argsort(slot_of, stable=True)
    counts = torch.bincount(slot_of, minlength=len(nodes))
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(order)
    position[order] = torch.arange(len(order)) - starts[slot_of[order]]  # rank of each (canary, end) at its node
    width, dims = int(counts.max()), x0.size(1)
    partners = torch.zeros(len(nodes), width, dims, dtype=x0.dtype)  # padding partners are 0: no effect
    partners[slot_of, position] = x0[others]
    patterns = ((torch.arange(2**width)[:, None] >> torch.arange(width)[None, :]) & 1).to(x0.dtype)  # [2^w, w]
    ratios = torch.empty(len(nodes), width, dtype=x0.dtype)
    for lo in range(0, len(nodes), chunk):
        part = slice(lo, lo + chunk)
        mu = b[nodes[part]].unsqueeze(1) + torch.einsum("pw,nwd->npd", patterns, partners[part])  # [n, 2^w, d]
        h = h1[nodes[part]].unsqueeze(1)
        along = (mu * h).sum(-1)
        perp = (mu - along.unsqueeze(-1) * h).pow(2).sum(-1)
        log_lik = -0.5 * perp / tau**2 + _log_radial_integral(along / tau, dims)  # [n, 2^w]
        for j in range(width):
            on = patterns[:, j] > 0
            ratios[part, j] = torch.logsumexp(log_lik[:, on], 1) - torch.logsumexp(log_lik[:, ~on], 1)
    return ratios[slot_of, position].reshape(-1, 2)


def edge_scores(
    model: ReleasedModel, graph: Data, pairs: np.ndarray, base_edges: torch.Tensor, reference: int = 256, seed: int = 0
) -> tuple[np.ndarray, str]:
    r"""Score of each canary pair and the name of the score used.

    ``aggregation-likelihood`` (a model that releases its hop-1 aggregations, GAP's PMA,
    Sajadmanesh et al. 2023, Algorithm 1): the release at u is the direction of
    :math:`b_u + \sum_c s_c x_c + n_u` with :math:`n_u \sim \mathcal N(0, \tau^2 I_d)`, the
    sum over the canaries c ending at u, where the auditor knows everything but the coins (DP's
    assumption): the canary-free aggregation :math:`b_u = \sum_{w \to u} x^{(0)}_w` over the
    base edges, the partners' encodings :math:`x_c = x^{(0)}_c` and τ (``cfg["noise_std"]``,
    floored at 10⁻⁶ for a noiseless release). The score is the sum over both ends of the exact
    log-likelihood ratio of the canary's coin from that end's release, other canaries at the
    end marginalised (:func:`_endpoint_log_ratios`); the ends carry independent noise. A
    shared endpoint (``endpoint_uses`` > 1) is thus scored jointly, not confounded.

    ``embedding-cosine`` (any other model): cosine similarity of the endpoints' ``embed``
    rows minus each endpoint's mean similarity to a fixed random reference set.

    Args:
        model: the released model.
        graph: the query graph.
        pairs: endpoint pairs of the canaries, integer array.
        base_edges: the base graph's directed edges (without canaries).
        reference: size of the random reference set of ``embedding-cosine``.
        seed: seed of the reference set.

    Returns:
        ``(scores, name)``: one score per pair and ``"aggregation-likelihood"`` or ``"embedding-cosine"``.

    Shapes:
        pairs: [count, 2]
        base_edges: [2, num_edges]
    """
    u = torch.as_tensor(pairs[:, 0])
    v = torch.as_tensor(pairs[:, 1])
    view = _aggregation_view(model, graph)
    if view is not None:
        x0, h1, tau = view
        b = torch.zeros_like(x0)
        base_edges = base_edges.cpu()
        b.index_add_(0, base_edges[1], x0[base_edges[0]])
        ratios = _endpoint_log_ratios(x0, h1, b, pairs, max(tau, 1e-6))
        return ratios.sum(1).numpy(), "aggregation-likelihood"
    h = torch.nn.functional.normalize(torch.as_tensor(C.embeddings(model, graph)), dim=1)
    rng = np.random.default_rng([int(seed), 0x524546])
    ref = torch.as_tensor(rng.choice(h.size(0), size=min(reference, h.size(0)), replace=False))
    sim = (h[u] * h[v]).sum(1)
    base_u = (h[u] @ h[ref].t()).mean(1)
    base_v = (h[v] @ h[ref].t()).mean(1)
    return (sim - 0.5 * (base_u + base_v)).numpy(), "embedding-cosine"


def score_run(
    model: ReleasedModel,
    base: GraphDataset,
    split: Split,
    design: CanaryDesign,
    train_ds: GraphDataset,
    train_split: Split,
    seed: int = 0,
) -> tuple[np.ndarray, str]:
    """(every canary's score from one released model — higher: more likely included —, score name).

    Args:
        model: the model released by the run.
        base: the base graph.
        split: its split.
        design: the canary design.
        train_ds: the graph the run trained on.
        train_split: the split it trained with.
        seed: seed of the score's own randomness (the reference set of edge scores).

    Returns:
        ``(scores, name)``: float array of shape ``[design.count]`` and the score's name.

    Raises:
        DPAuditError: a score is NaN or infinite.
    """
    structure = _structure(design)
    if structure is not None:
        scores, name = structure.score(model, base, split, design, train_ds, train_split)
        if not np.all(np.isfinite(scores)):
            raise DPAuditError("canary scores contain NaN or infinite values")
        return scores, name
    graph, index = query_graph(base, split, design, train_ds, train_split, model)
    if design.kind == "node":
        scores, name = node_scores(model, graph, index, design.labels), "label-logit-margin"
    else:
        scores, name = edge_scores(model, graph, index, split.edge_index_for(base, "train"), seed=seed)
    if not np.all(np.isfinite(scores)):
        raise DPAuditError("canary scores contain NaN or infinite values (the released model's outputs are not finite)")
    return scores, name


# --------------------------------------------------------------------------- coverage


def audited_claim(unit: str | None, kind: str, epsilon: float, delta: float) -> tuple[bool, str, float, float]:
    """(valid, why, ε, δ) the canary game tests for a defense of privacy ``unit``.

    Node canaries test node-level DP only. Edge canaries test edge-level DP, or node-level DP
    through group privacy of size 2 (an edge change is a node removal followed by its
    re-insertion without the edge): (2ε, (1 + e^ε)δ). Gradient canaries are examples of one DP-SGD
    run and test its example-level DP, at the unit their record says one example is (a node's row
    for a model of node features; :mod:`dpaudit.whitebox.gradient_canaries`, "Which unit"): the
    caller has matched that unit with ``unit``.

    Args:
        unit: the defense's privacy unit (``"node"``, ``"edge"``, ...), ``None`` for a non-private one.
        kind: canary kind, ``"node"``, ``"edge"`` or ``"gradient"``.
        epsilon: the defense's claimed ε.
        delta: its δ.

    Returns:
        ``(valid, why, epsilon, delta)``: whether the game tests the claim, the reason in words, and
        the (ε, δ) it tests (after group privacy where it applies).
    """
    if unit is None or not math.isfinite(epsilon):
        return (
            False,
            "the defense is not private: there is no claim to test (the bound shows the attack's power)",
            math.inf,
            0.0,
        )
    if kind == "gradient":
        return True, f"gradient canaries test the DP-SGD run's example-level DP, one example one {unit}", epsilon, delta
    if kind == "node":
        if unit == "node":
            return True, "node canaries test node-level DP", epsilon, delta
        return False, f"node canaries are not covered by {unit}-level DP (a node is many edges)", epsilon, delta
    if unit == "edge":
        return True, "edge canaries test edge-level DP", epsilon, delta
    if unit == "node":
        return (
            True,
            "edge canaries test node-level DP through group privacy of size 2: (2ε, (1+e^ε)δ)",
            *group_privacy(epsilon, delta, 2),
        )
    return False, f"unknown privacy unit {unit!r}", epsilon, delta


def audited_mu(unit: str | None, kind: str, mu: float | None) -> float | None:
    """The μ of the μ-GDP guarantee the canary game tests, or ``None`` when the spec states none
    (``mu`` is ``None``: a subsampled or recorded mechanism, e.g. DP-SGD, objective
    perturbation) or the canary's unit is not covered. Group privacy of size k for μ-GDP is
    kμ-GDP (Dong, Roth & Su 2022, "Gaussian differential privacy", JRSS-B, group privacy), so edge canaries
    against node-level μ-GDP test 2μ.

    Args:
        unit: the defense's privacy unit, ``None`` for a non-private one.
        kind: canary kind, ``"node"`` or ``"edge"``.
        mu: the spec's μ, or ``None``.

    Returns:
        The tested μ, or ``None``.
    """
    if mu is None or unit is None:
        return None
    if kind == unit:
        return float(mu)
    if kind == "edge" and unit == "node":
        return 2.0 * float(mu)
    return None
