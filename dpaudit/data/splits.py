"""Node splits, deterministic from a seed.

* transductive — random fractions (``random:0.75,0.1,0.15``), per-class counts
  (``per-class:20,500,1000``: 20 training nodes per class, 500 validation, 1000 test — GCON's
  convention), or the dataset's own split (``public``);
* inductive — disjoint node sets with every edge between them removed
  (``inductive:0.8,0.2``, DPAR's setup): training sees only edges among training nodes,
  evaluation only edges among evaluation nodes;
* graph partition — ``metis:K`` (the DPAR authors' setup, K = 9): METIS (pymetis, seed 0)
  cuts the graph into K parts; test = part 4, validation = part 5, training = the other
  parts; inductive, and every edge between two parts is removed (also between two training
  parts), so each part keeps only its internal edges;
* membership partitions for attacks (:func:`membership_partition`).

Only labeled nodes are ever put in a split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch_geometric.utils import subgraph

from dpaudit.data.datasets import GraphDataset
from dpaudit.data.split_specs import parse_split_spec
from dpaudit.errors import ConfigurationError

SPLIT_KINDS = ("public", "random", "per-class", "inductive", "metis")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


@dataclass
class Split:
    """Index sets of one split (global node indices) and how to build the visible graphs.

    Attributes:
        train: training node ids.
        val: validation node ids.
        test: test node ids.
        spec: the split specification it was built from (e.g. ``random:0.75,0.1,0.15``).
        seed: the seed it was drawn with.
        inductive: edges are restricted to each phase's nodes.
        info: notes on how it was built (shown in records).
        node_part: part id of every node (``metis:K`` only).
        declared_sizes: part sizes declared public, or ``None``.
    """

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    spec: str
    seed: int
    inductive: bool = False
    info: dict = field(default_factory=dict)
    #: part id of every node (``metis:K`` only): edges between different parts are never visible
    node_part: torch.Tensor | None = None
    #: part sizes declared public (``{"train": n, ...}``): set by :func:`make_split` on a graph
    #: whose sizes are declared (a public benchmark's split is public); ``None`` otherwise. A
    #: neighbouring split built for a test keeps it (:mod:`dpaudit.release`).
    declared_sizes: dict | None = None

    def edge_index_for(self, dataset: GraphDataset, part: str) -> torch.Tensor:
        """Edges visible in a phase: all edges (transductive), or, inductively, only edges with
        both endpoints in ``part`` (``"train"``, ``"val"`` or ``"test"``).

        Args:
            dataset: the dataset the split belongs to.
            part: ``"train"``, ``"val"`` or ``"test"``.

        Returns:
            The visible edges.

        Shapes:
            return: [2, num_visible_edges]
        """
        if not self.inductive:
            return dataset.data.edge_index
        nodes = getattr(self, part)
        edge_index, _ = subgraph(nodes, dataset.data.edge_index, num_nodes=dataset.num_nodes)
        if self.node_part is not None:  # graph partition: only edges inside one part
            same = self.node_part[edge_index[0]] == self.node_part[edge_index[1]]
            edge_index = edge_index[:, same]
        return edge_index

    def graph_for(self, dataset: GraphDataset, part: str):
        """The ``Data`` a phase may see (same node indexing as the dataset).

        Args:
            dataset: the dataset the split belongs to.
            part: ``"train"``, ``"val"`` or ``"test"``.

        Returns:
            A clone of ``dataset.data`` whose ``edge_index`` is :meth:`edge_index_for`.
        """
        data = dataset.data.clone()
        data.edge_index = self.edge_index_for(dataset, part)
        return data

    def to_dict(self) -> dict:
        """The owner's record of the split: specification, seed and exact sizes."""
        return {
            "spec": self.spec,
            "seed": self.seed,
            "inductive": self.inductive,
            "sizes": {"train": len(self.train), "val": len(self.val), "test": len(self.test)},
        }

    def public_dict(self) -> dict:
        """What the public card says of the split: its specification only."""
        return {"spec": self.spec, "inductive": self.inductive}


def _labeled_permutation(dataset: GraphDataset, seed: int) -> torch.Tensor:
    labeled = dataset.labeled_nodes
    return labeled[torch.randperm(labeled.numel(), generator=_generator(seed))]


def _check_fractions(fractions: list[float], count: int, spec: str) -> None:
    if len(fractions) != count or any(f < 0 for f in fractions) or sum(fractions) > 1.0 + 1e-9:
        raise ConfigurationError(f"split {spec!r}: need {count} non-negative fractions summing to at most 1")


def random_split(dataset: GraphDataset, train: float, val: float, test: float, seed: int = 0) -> Split:
    """Random fractions of the labeled nodes (``random:TRAIN,VAL,TEST``).

    Args:
        dataset: the dataset to split (only labeled nodes are used).
        train: fraction of labeled nodes for training.
        val: fraction for validation.
        test: fraction for testing (the three sum to at most 1).
        seed: seed of the permutation.

    Returns:
        The split (sorted index sets).

    Raises:
        ConfigurationError: invalid fractions, or no training node, or no test node while ``test > 0``.
    """
    fractions = [train, val, test]
    spec = f"random:{train},{val},{test}"
    _check_fractions(fractions, 3, spec)
    perm = _labeled_permutation(dataset, seed)
    n = perm.numel()
    n_train, n_val = int(round(train * n)), int(round(val * n))
    n_test = min(int(round(test * n)), n - n_train - n_val)
    if n_train == 0:
        raise ConfigurationError(f"split {spec!r} leaves no training node (the graph has {n} labeled nodes)")
    if test > 0 and n_test == 0:  # a model with no test node measures nothing: say so before training
        raise ConfigurationError(
            f"split {spec!r} leaves no test node: the graph has only {n} labeled nodes; label more nodes, "
            "or give a larger test fraction"
        )
    return Split(
        perm[:n_train].sort().values,
        perm[n_train : n_train + n_val].sort().values,
        perm[n_train + n_val : n_train + n_val + n_test].sort().values,
        spec,
        seed,
    )


def per_class_split(dataset: GraphDataset, per_class: int, val: int, test: int, seed: int = 0) -> Split:
    """``per_class`` training nodes from every class, then ``val`` and ``test`` nodes at random.

    Args:
        dataset: the dataset to split (only labeled nodes are used).
        per_class: training nodes per class.
        val: number of validation nodes.
        test: number of test nodes.
        seed: seed of the permutation.

    Returns:
        The split.

    Raises:
        ConfigurationError: a class has fewer than ``per_class`` labeled nodes, or too few remain for val and test.
    """
    spec = f"per-class:{per_class},{val},{test}"
    perm = _labeled_permutation(dataset, seed)
    y = dataset.data.y[perm]
    train_parts = []
    for c in range(dataset.num_classes):
        members = perm[y == c]
        if members.numel() < per_class:
            raise ConfigurationError(f"split {spec!r}: class {c} has only {members.numel()} labeled nodes")
        train_parts.append(members[:per_class])
    train = torch.cat(train_parts)
    rest = perm[~torch.isin(perm, train)]
    if rest.numel() < val + test:
        raise ConfigurationError(f"split {spec!r}: only {rest.numel()} labeled nodes left for val and test")
    return Split(train.sort().values, rest[:val].sort().values, rest[val : val + test].sort().values, spec, seed)


def inductive_split(dataset: GraphDataset, train: float, test: float, seed: int = 0, val: float = 0.0) -> Split:
    """Inductive split (``inductive:TRAIN,TEST[,VAL]``): a random split whose phases see only their own edges.

    Args:
        dataset: the dataset to split (only labeled nodes are used).
        train: fraction for training.
        test: fraction for testing.
        seed: seed of the permutation.
        val: fraction for validation.

    Returns:
        The split, with ``inductive=True``.

    Raises:
        ConfigurationError: invalid fractions, or no training/test node.
    """
    spec = f"inductive:{train},{test}" + (f",{val}" if val else "")
    _check_fractions([train, test, val], 3, spec)
    base = random_split(dataset, train, val, test, seed)
    base.spec, base.inductive = spec, True
    return base


def public_split(dataset: GraphDataset, seed: int = 0) -> Split:
    """The dataset's own split (``public``).

    Args:
        dataset: a dataset with a public split.
        seed: recorded only; it does not change the split.

    Returns:
        The split.

    Raises:
        ConfigurationError: the dataset has no public split.
    """
    if not dataset.has_public_split:
        raise ConfigurationError(f"dataset {dataset.name!r} has no public split; use random:... or per-class:...")
    code = dataset.data.public_split
    parts = [(code == k).nonzero().view(-1) for k in range(3)]
    return Split(*parts, "public", seed, info={"note": "the dataset's own split; the seed does not change it"})


METIS_TEST_PART, METIS_VAL_PART = 4, 5


def metis_split(dataset: GraphDataset, parts: int, seed: int = 0) -> Split:
    """``metis:K``: METIS partition into ``parts`` parts (pymetis, METIS seed 0, so the split is
    the same for every ``seed``); test = part 4, validation = part 5, training = the rest (labeled
    nodes only). Inductive, and edges between different parts are removed in every phase.

    Args:
        dataset: the dataset to partition.
        parts: number of METIS parts K (≥ 6, ≤ number of nodes).
        seed: recorded only.

    Returns:
        The inductive split with ``node_part`` set.

    Raises:
        ConfigurationError: K out of range, pymetis missing, too many edges, or no labeled training/test node.
    """
    spec = f"metis:{parts}"
    n = dataset.num_nodes
    if parts < METIS_VAL_PART + 1:
        raise ConfigurationError(
            f"split {spec!r}: need K >= {METIS_VAL_PART + 1} parts (test = part 4, validation = part 5)"
        )
    if parts > n:
        raise ConfigurationError(f"split {spec!r}: K = {parts} parts exceeds the {n} nodes of the graph")
    try:
        import pymetis
    except ImportError:  # pragma: no cover - a declared dependency
        raise ConfigurationError("split 'metis:K' needs pymetis (pip install pymetis)") from None
    row, col = dataset.data.edge_index
    keep = row != col
    row, col = row[keep], col[keep]
    order = torch.argsort(row * n + col)
    row, col = row[order], col[order]
    if col.numel() >= 2**31:
        raise ConfigurationError(
            f"split {spec!r}: METIS takes at most 2^31 - 1 stored edges, the graph has {col.numel()}"
        )
    # METIS' own 32-bit index arrays, handed over without a copy (never Python lists over edges)
    starts = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(torch.bincount(row, minlength=n).numpy(), out=starts[1:])
    adjacency = pymetis.CSRAdjacency(starts, col.numpy().astype(np.int32))
    _, membership = pymetis.part_graph(parts, adjacency=adjacency, options=pymetis.Options(seed=0))
    node_part = torch.from_numpy(np.asarray(membership, dtype=np.int64))
    labeled = dataset.data.label_mask.bool()
    test = ((node_part == METIS_TEST_PART) & labeled).nonzero().view(-1)
    val = ((node_part == METIS_VAL_PART) & labeled).nonzero().view(-1)
    train = ((node_part != METIS_TEST_PART) & (node_part != METIS_VAL_PART) & labeled).nonzero().view(-1)
    if len(train) == 0 or len(test) == 0:
        raise ConfigurationError(f"split {spec!r}: the partition leaves no labeled training or test node")
    sizes = torch.bincount(node_part, minlength=parts).tolist()
    info = {"note": "METIS partition (pymetis, METIS seed 0); the split seed does not change it", "part_sizes": sizes}
    return Split(train, val, test, spec, seed, inductive=True, info=info, node_part=node_part)


def default_split_spec(dataset: GraphDataset) -> str:
    """The split used when none is given: ``public`` if the dataset has one, else ``random:0.75,0.1,0.15``.

    Args:
        dataset: the dataset.

    Returns:
        The split specification.
    """
    return "public" if dataset.has_public_split else "random:0.75,0.1,0.15"


def make_split(dataset: GraphDataset, spec: str | None = None, seed: int = 0) -> Split:
    """Parse a split specification (see the module docstring) and build the split.

    Args:
        dataset: the dataset to split.
        spec: the specification, or ``None`` for :func:`default_split_spec`.
        seed: split seed.

    Returns:
        The split (``declared_sizes`` set when the dataset's sizes are published).

    Raises:
        ConfigurationError: an unknown or malformed specification, or one the dataset cannot satisfy.
    """
    spec = (spec or default_split_spec(dataset)).strip()
    kind, values = parse_split_spec(spec)
    if kind == "public":
        split = public_split(dataset, seed)
    elif kind == "random":
        split = random_split(dataset, *values, seed=seed)
    elif kind == "per-class":
        split = per_class_split(dataset, *(int(v) for v in values), seed=seed)
    elif kind == "metis":
        split = metis_split(dataset, int(values[0]), seed=seed)
    else:  # inductive
        split = inductive_split(dataset, values[0], values[1], seed=seed, val=values[2] if len(values) == 3 else 0.0)
    if (getattr(dataset, "public_facts", None) or {}).get("published"):
        # the split of a graph whose own sizes are published is a public function of it (a
        # user who declares only a bound, e.g. num_nodes, does not make the split sizes public)
        split.declared_sizes = {"train": len(split.train), "val": len(split.val), "test": len(split.test)}
    return split


# --------------------------------------------------------------------------- attack partitions

#: split kinds whose training set dpaudit drew with its own seeded RNG (uniform over the labeled
#: nodes, or uniform within each class for ``per-class``): membership is a coin the defense never
#: chose, so the randomized audit game below is valid on them
RANDOM_SPLIT_KINDS = ("random", "per-class", "inductive")


def split_is_random(spec: str | None, card_split: dict | None = None) -> tuple[bool, str]:
    """Whether a split's training set was drawn at random by a process the defense never saw.

    ``random:``, ``per-class:`` and ``inductive:`` splits are drawn by dpaudit's seeded RNG:
    a uniformly random training set (uniform within each class for ``per-class``), so for a
    member ``a`` and a non-member ``b`` of the same class, the split with ``a`` and ``b``
    swapped is exactly as likely. ``public`` (chosen by people: on Cora the training nodes are
    node ids 0–139), ``metis:`` (a deterministic graph partition) and explicit node lists
    (:mod:`dpaudit.training.adapters`) are not, unless the card's split says ``"drawn_at_random": true``
    (the adapter's caller asserts it). Returns ``(random, why)``.

    Args:
        spec: the split specification.
        card_split: the model card's ``split`` entry, if any (explicit ``nodes``, ``drawn_at_random``).

    Returns:
        ``(random, why)``: whether the split was drawn at random, and a sentence saying why.
    """
    spec = str(spec or "")
    kind = spec.partition(":")[0].strip().lower()
    card_split = card_split or {}
    if card_split.get("nodes") is not None:
        if card_split.get("drawn_at_random") is True:
            return True, "explicit node lists that the model card declares drawn uniformly at random"
        return False, (
            "membership comes from explicit node lists (an adapted model) that are not declared drawn at random: "
            "members and non-members may differ by more than membership"
        )
    if kind in RANDOM_SPLIT_KINDS:
        return True, f"the split {spec!r} was drawn by dpaudit's seeded RNG (uniform training set)"
    if kind == "public":
        return False, (
            "the public split was fixed by people, not drawn at random (on Cora the training nodes are node ids "
            "0-139: a model-free score separates them perfectly)"
        )
    if kind == "metis":
        return False, f"the split {spec!r} is a deterministic graph partition, not a random draw"
    return False, f"the split {spec or '(unknown)'!r} is not known to be drawn at random"


@dataclass
class MembershipSet:
    """Nodes with known membership: ``members`` were trained on, ``non_members`` were not.

    In an audit set (:func:`audit_game`) the two are paired by position: ``members[i]`` and
    ``non_members[i]`` have the same class and form pair ``i`` of the one-run pair test
    (:func:`dpaudit.auditing.statistics.pair_test_lower_bound`); :meth:`nodes_and_labels` keeps that
    order (all members, then all non-members), so the i-th member score and the i-th
    non-member score of an attack are a pair.

    Attributes:
        members: node ids that were trained on.
        non_members: node ids that were not.
        info: how the set was drawn.
    """

    members: torch.Tensor
    non_members: torch.Tensor
    info: dict = field(default_factory=dict)

    def nodes_and_labels(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All nodes (members first, then non-members) and their 0/1 labels.

        Returns:
            ``(nodes, labels)``; labels are float 1 for members, 0 for non-members.

        Shapes:
            nodes: [len(members) + len(non_members)]
            labels: [len(members) + len(non_members)]
        """
        nodes = torch.cat([self.members, self.non_members])
        labels = torch.cat([torch.ones(len(self.members)), torch.zeros(len(self.non_members))])
        return nodes, labels

    @property
    def pairs(self) -> torch.Tensor:
        """[P, 2]: (member, non-member) of every pair (only meaningful for paired sets)."""
        k = min(len(self.members), len(self.non_members))
        return torch.stack([self.members[:k], self.non_members[:k]], dim=1)


@dataclass
class MembershipPartition:
    """A target part (the audited model's members and as many non-members, paired by class) and
    a disjoint shadow part the attacker uses to train shadow models.

    Attributes:
        target: the audit set.
        shadow: shadow members and non-members.
        seed: the seed it was drawn with.
        info: how it was drawn (pools, overlaps, fallbacks).
    """

    target: MembershipSet
    shadow: MembershipSet
    seed: int
    info: dict = field(default_factory=dict)


def audit_candidates(dataset: GraphDataset, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
    """(members, non-member candidates) of the audit game: the training nodes, and the labeled
    nodes that are neither training nor validation nodes (validation nodes are read by
    selection under ``protocol=paper``, so the recipe does not treat them like the others).

    Args:
        dataset: the dataset.
        split: the target's split.

    Returns:
        ``(members, candidates)`` node ids.
    """
    labeled = dataset.labeled_nodes
    outside = labeled[~torch.isin(labeled, split.train)]
    return split.train, outside[~torch.isin(outside, split.val)]


def audit_game(
    dataset: GraphDataset,
    split: Split,
    seed: int = 0,
    max_members: int | None = None,
    reserve_for_shadows: bool = False,
) -> MembershipSet:
    r"""The randomized audit game's audit set: class-stratified (member, non-member) pairs.

    For every class c, the members of c (training nodes) and the non-member candidates of c
    (:func:`audit_candidates`: labeled nodes outside training and validation) are each put in
    a uniformly random order (seeded), and the first :math:`m_c` of each are paired, with
    :math:`m_c = \min(|M_c|, |N_c|)` (:math:`\lfloor |N_c|/2 \rfloor` for :math:`|N_c|` when
    ``reserve_for_shadows``, so that half the candidates remain for a shadow pool disjoint from
    the training set). Equal members and non-members per class: the class prior carries no
    signal. ``max_members`` caps the number of pairs (classes shrink in proportion).

    Why this is a fair coin per pair. When the training set is uniform over the labeled nodes
    (``random:``, ``inductive:``) or uniform within each class (``per-class:``), swapping a
    member ``a`` and a non-member ``b`` of the same class gives a split of equal probability,
    and the drawing above (independent random orders, then zip) is symmetric under that swap.
    So, conditionally on the unordered pairs and on every node outside them, which node of each
    pair is the member is an independent fair coin — the setting of Steinke, Nasr & Jagielski
    (2023) with one "canary" per pair. Both nodes of a pair sit in the same place of the recipe
    (labeled, outside validation, in the training graph exactly when the recipe keeps non-training
    nodes there). The argument fails when the split itself was not drawn at random
    (:func:`split_is_random`); the set is still drawn the same way, and results say the bound
    is not valid.

    Args:
        dataset: the dataset.
        split: the target's split.
        seed: seed of the random orders.
        max_members: cap on the number of pairs, or ``None``.
        reserve_for_shadows: keep half of each class's candidates out of the set.

    Returns:
        The paired :class:`MembershipSet` (pairs in random order across classes).

    Raises:
        ConfigurationError: no class has both a member and a candidate.
    """
    g = _generator(seed)
    members, candidates = audit_candidates(dataset, split)
    y = dataset.data.y
    per_class = []
    for c in range(dataset.num_classes):
        mc, nc = members[y[members] == c], candidates[y[candidates] == c]
        mc = mc[torch.randperm(len(mc), generator=g)]
        nc = nc[torch.randperm(len(nc), generator=g)]
        limit = len(nc) // 2 if reserve_for_shadows else len(nc)
        k = min(len(mc), limit)
        per_class.append((mc[:k], nc[:k]))
    total = sum(len(m) for m, _ in per_class)
    if max_members is not None and total > max_members:
        scale = max_members / total
        scaled = [(m[: int(len(m) * scale)], n[: int(len(n) * scale)]) for m, n in per_class]
        if not any(len(m) for m, _ in scaled):  # a cap below the number of classes: the largest classes
            order = sorted(range(len(per_class)), key=lambda c: -len(per_class[c][0]))[:max_members]
            scaled = [(m[:1], n[:1]) if c in order else (m[:0], n[:0]) for c, (m, n) in enumerate(per_class)]
        per_class = scaled
    kept = [(m, n) for m, n in per_class if len(m)]
    if not kept:
        raise ConfigurationError(
            "the audit game needs, in some class, a training node and a labeled node outside training and validation"
        )
    mem = torch.cat([m for m, _ in kept])
    non = torch.cat([n for _, n in kept])
    order = torch.randperm(len(mem), generator=g)  # pairs in random order across classes
    return MembershipSet(
        mem[order],
        non[order],
        info={
            "game": "class-stratified pairs",
            "pairs": int(len(mem)),
            "pairs_per_class": {int(c): int(len(m)) for c, (m, _) in enumerate(per_class)},
            "non_member_candidates": "labeled nodes outside training and validation",
        },
    )


SHADOW_POOLS = ("disjoint", "any")


def membership_partition(
    dataset: GraphDataset,
    split: Split,
    seed: int = 0,
    max_members: int | None = None,
    shadow_per_class: int = 1000,
    shadow_pool: str = "disjoint",
) -> MembershipPartition:
    """The audit set (:func:`audit_game`) and a shadow part for attacks that train shadow models.

    The target part is the randomized audit game's class-stratified pairs. When shadow models
    are wanted (``shadow_per_class > 1``), the audit game keeps half of each class's non-member
    candidates out of the audit set, and the shadow pool is ``shadow_pool``:

    * ``"disjoint"`` (default): labeled nodes outside the target's training set and outside the
      audit set (validation nodes, unaudited test nodes, unassigned labeled nodes) — shadow
      models never train on a node the target trained on. When that pool holds fewer than two
      nodes of any class with labeled nodes, it falls back to ``"any"`` and says so in ``info``;
    * ``"any"``: every labeled node outside the audit set (it may hold target training nodes the
      attacker does not know of; the behaviour before the randomized game).

    Up to ``shadow_per_class`` nodes per class are drawn from the pool (GAP Section 7.4.2) and
    halved into shadow members and shadow non-members within each class. The pool does not
    depend on which node of an audit pair is the member (it excludes the whole pair), so it
    keeps the pair coins fair.

    Args:
        dataset: the dataset.
        split: the target's split.
        seed: seed of the audit set and of the shadow draw.
        max_members: cap on the number of audit pairs.
        shadow_per_class: shadow nodes drawn per class (≤ 1: no shadow reservation).
        shadow_pool: ``"disjoint"`` or ``"any"``.

    Returns:
        The :class:`MembershipPartition`.

    Raises:
        ConfigurationError: an unknown ``shadow_pool``, or no audit pair can be formed.
    """
    if shadow_pool not in SHADOW_POOLS:
        raise ConfigurationError(f"shadow_pool must be one of {SHADOW_POOLS}, got {shadow_pool!r}")
    g = _generator(seed + 104729)
    target = audit_game(dataset, split, seed, max_members, reserve_for_shadows=shadow_per_class > 1)
    labeled = dataset.labeled_nodes
    audited = torch.cat([target.members, target.non_members])
    outside_audit = labeled[~torch.isin(labeled, audited)]
    used = shadow_pool
    pool = outside_audit if shadow_pool == "any" else outside_audit[~torch.isin(outside_audit, split.train)]
    y = dataset.data.y
    if used == "disjoint" and shadow_per_class > 1:
        classes = torch.unique(y[labeled])
        if any(int((y[pool] == c).sum()) < 2 for c in classes.tolist()):
            used, pool = "any", outside_audit
    pool = pool[torch.randperm(len(pool), generator=g)]
    y = y[pool]
    shadow_in, shadow_out = [], []
    for c in range(dataset.num_classes):
        cls = pool[y == c][: 2 * shadow_per_class]
        half = len(cls) // 2
        shadow_in.append(cls[:half])
        shadow_out.append(cls[half : 2 * half])
    shadow = MembershipSet(torch.cat(shadow_in).sort().values, torch.cat(shadow_out).sort().values)
    overlap = int(torch.isin(torch.cat([shadow.members, shadow.non_members]), split.train).sum())
    info = {
        **target.info,
        "shadow_pool": used,
        "shadow_pool_requested": shadow_pool,
        "shadow_nodes_in_target_training_set": overlap,
    }
    if used != shadow_pool:
        info["shadow_pool_note"] = (
            "too few labeled nodes outside the target's training set and the audit set for disjoint shadow data: "
            "the shadow pool includes target training nodes outside the audit set"
        )
    return MembershipPartition(target, shadow, seed, info)
