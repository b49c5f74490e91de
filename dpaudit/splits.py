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

import torch
from torch_geometric.utils import subgraph

from dpaudit.datasets import GraphDataset
from dpaudit.errors import ConfigurationError

SPLIT_KINDS = ("public", "random", "per-class", "inductive", "metis")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


@dataclass
class Split:
    """Index sets of one split (global node indices) and how to build the visible graphs."""

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    spec: str
    seed: int
    inductive: bool = False
    info: dict = field(default_factory=dict)
    #: part id of every node (``metis:K`` only): edges between different parts are never visible
    node_part: torch.Tensor | None = None

    def edge_index_for(self, dataset: GraphDataset, part: str) -> torch.Tensor:
        """Edges visible in a phase: all edges (transductive), or, inductively, only edges with
        both endpoints in ``part`` (``"train"``, ``"val"`` or ``"test"``)."""
        if not self.inductive:
            return dataset.data.edge_index
        nodes = getattr(self, part)
        edge_index, _ = subgraph(nodes, dataset.data.edge_index, num_nodes=dataset.num_nodes)
        if self.node_part is not None:  # graph partition: only edges inside one part
            same = self.node_part[edge_index[0]] == self.node_part[edge_index[1]]
            edge_index = edge_index[:, same]
        return edge_index

    def graph_for(self, dataset: GraphDataset, part: str):
        """The ``Data`` a phase may see (same node indexing as the dataset)."""
        data = dataset.data.clone()
        data.edge_index = self.edge_index_for(dataset, part)
        return data

    def to_dict(self) -> dict:
        return {
            "spec": self.spec,
            "seed": self.seed,
            "inductive": self.inductive,
            "sizes": {"train": len(self.train), "val": len(self.val), "test": len(self.test)},
        }


def _labeled_permutation(dataset: GraphDataset, seed: int) -> torch.Tensor:
    labeled = dataset.labeled_nodes
    return labeled[torch.randperm(labeled.numel(), generator=_generator(seed))]


def _check_fractions(fractions: list[float], count: int, spec: str) -> None:
    if len(fractions) != count or any(f < 0 for f in fractions) or sum(fractions) > 1.0 + 1e-9:
        raise ConfigurationError(f"split {spec!r}: need {count} non-negative fractions summing to at most 1")


def random_split(dataset: GraphDataset, train: float, val: float, test: float, seed: int = 0) -> Split:
    fractions = [train, val, test]
    spec = f"random:{train},{val},{test}"
    _check_fractions(fractions, 3, spec)
    perm = _labeled_permutation(dataset, seed)
    n = perm.numel()
    n_train, n_val = int(round(train * n)), int(round(val * n))
    n_test = min(int(round(test * n)), n - n_train - n_val)
    if n_train == 0:
        raise ConfigurationError(f"split {spec!r} leaves no training node")
    return Split(
        perm[:n_train].sort().values,
        perm[n_train : n_train + n_val].sort().values,
        perm[n_train + n_val : n_train + n_val + n_test].sort().values,
        spec,
        seed,
    )


def per_class_split(dataset: GraphDataset, per_class: int, val: int, test: int, seed: int = 0) -> Split:
    """``per_class`` training nodes from every class, then ``val`` and ``test`` nodes at random."""
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
    spec = f"inductive:{train},{test}" + (f",{val}" if val else "")
    _check_fractions([train, test, val], 3, spec)
    base = random_split(dataset, train, val, test, seed)
    base.spec, base.inductive = spec, True
    return base


def public_split(dataset: GraphDataset, seed: int = 0) -> Split:
    if not dataset.has_public_split:
        raise ConfigurationError(f"dataset {dataset.name!r} has no public split; use random:... or per-class:...")
    code = dataset.data.public_split
    parts = [(code == k).nonzero().view(-1) for k in range(3)]
    return Split(*parts, "public", seed, info={"note": "the dataset's own split; the seed does not change it"})


METIS_TEST_PART, METIS_VAL_PART = 4, 5


def metis_split(dataset: GraphDataset, parts: int, seed: int = 0) -> Split:
    """``metis:K``: METIS partition into ``parts`` parts (pymetis, METIS seed 0, so the split is
    the same for every ``seed``); test = part 4, validation = part 5, training = the rest (labeled
    nodes only). Inductive, and edges between different parts are removed in every phase."""
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
    xadj = torch.zeros(n + 1, dtype=torch.long)
    xadj[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
    options = pymetis.Options(seed=0)
    _, membership = pymetis.part_graph(parts, xadj=xadj.tolist(), adjncy=col.tolist(), options=options)
    node_part = torch.as_tensor(list(membership), dtype=torch.long)
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
    return "public" if dataset.has_public_split else "random:0.75,0.1,0.15"


def make_split(dataset: GraphDataset, spec: str | None = None, seed: int = 0) -> Split:
    """Parse a split specification (see the module docstring) and build the split."""
    spec = (spec or default_split_spec(dataset)).strip()
    kind, _, args = spec.partition(":")
    kind = kind.strip().lower()
    try:
        values = [float(v) for v in args.split(",")] if args.strip() else []
    except ValueError:
        raise ConfigurationError(f"split {spec!r}: arguments must be numbers") from None
    if kind == "public" and not values:
        return public_split(dataset, seed)
    if kind == "random" and len(values) == 3:
        return random_split(dataset, *values, seed=seed)
    if kind == "per-class" and len(values) == 3 and all(v == int(v) and v >= 0 for v in values):
        return per_class_split(dataset, *(int(v) for v in values), seed=seed)
    if kind == "metis" and len(values) == 1 and values[0] == int(values[0]):
        return metis_split(dataset, int(values[0]), seed=seed)
    if kind == "inductive" and len(values) in (2, 3):
        return inductive_split(dataset, values[0], values[1], seed=seed, val=values[2] if len(values) == 3 else 0.0)
    raise ConfigurationError(
        f"unknown split {spec!r}; use public, random:TRAIN,VAL,TEST, per-class:K,VAL,TEST, inductive:TRAIN,TEST "
        "or metis:K"
    )


# --------------------------------------------------------------------------- attack partitions


@dataclass
class MembershipSet:
    """Nodes with known membership: ``members`` were trained on, ``non_members`` were not."""

    members: torch.Tensor
    non_members: torch.Tensor

    def nodes_and_labels(self) -> tuple[torch.Tensor, torch.Tensor]:
        nodes = torch.cat([self.members, self.non_members])
        labels = torch.cat([torch.ones(len(self.members)), torch.zeros(len(self.non_members))])
        return nodes, labels


@dataclass
class MembershipPartition:
    """A target part (the audited model's members and an equal number of non-members) and a
    disjoint shadow part the attacker uses to train shadow models."""

    target: MembershipSet
    shadow: MembershipSet
    seed: int


def membership_partition(
    dataset: GraphDataset,
    split: Split,
    seed: int = 0,
    max_members: int | None = None,
    shadow_per_class: int = 1000,
) -> MembershipPartition:
    """Balanced membership sets for node membership inference.

    Target members are (up to ``max_members`` of) the split's training nodes; target
    non-members are as many labeled nodes outside the training set, preferring test nodes.
    At most a quarter of the labeled nodes go to each side so that at least half remain for
    the shadow part. The shadow part is drawn from the labeled nodes outside the target part
    (it may include training nodes that are not target members: the attacker does not know
    them), with up to ``shadow_per_class`` nodes per class (GAP Section 7.4.2), split in half
    into shadow members and shadow non-members within each class.
    """
    g = _generator(seed)
    labeled = dataset.labeled_nodes
    members = split.train[torch.randperm(len(split.train), generator=g)]
    outside = labeled[~torch.isin(labeled, split.train)]
    others = outside[~torch.isin(outside, split.test)]
    non_members = torch.cat(
        [
            split.test[torch.randperm(len(split.test), generator=g)],
            others[torch.randperm(len(others), generator=g)],
        ]
    )
    k = min(len(members), len(non_members), len(labeled) // 4)
    if max_members is not None:
        k = min(k, max_members)
    if k == 0:
        raise ConfigurationError("membership partition needs training nodes and nodes outside the training set")
    target = MembershipSet(members[:k].sort().values, non_members[:k].sort().values)

    pool = labeled[~torch.isin(labeled, torch.cat([target.members, target.non_members]))]
    pool = pool[torch.randperm(len(pool), generator=g)]
    y = dataset.data.y[pool]
    shadow_in, shadow_out = [], []
    for c in range(dataset.num_classes):
        cls = pool[y == c][: 2 * shadow_per_class]
        half = len(cls) // 2
        shadow_in.append(cls[:half])
        shadow_out.append(cls[half : 2 * half])
    shadow = MembershipSet(torch.cat(shadow_in).sort().values, torch.cat(shadow_out).sort().values)
    return MembershipPartition(target, shadow, seed)
