"""Which data and split a released model saw, rebuilt from the owner's record.

The public card names the dataset and the split specification only; the owner's record
(``provenance.json``, :mod:`dpaudit.release`) holds the dataset fingerprint and the split's
seed, sizes or explicit node lists. Attacks and audits call these to know the target's
members, so auditing membership needs the owner's record (or the caller's own split); nothing
here reads the model's weights. Files written before format 3 kept all of it in the card.
"""

from __future__ import annotations

import torch

from dpaudit.data.datasets import GraphDataset, reload_dataset
from dpaudit.data.splits import Split, make_split
from dpaudit.errors import DatasetError, DPAuditError
from dpaudit.release.model import ReleasedModel


def resolve_dataset(model: ReleasedModel, dataset: GraphDataset | None = None, data_root=None) -> GraphDataset:
    """The attacked model's dataset: the caller's, or reloaded from the card; its fingerprint
    must equal the card's (otherwise membership would be reconstructed on different data).

    Args:
        model: the attacked model.
        dataset: the caller's dataset, or ``None`` to reload it.
        data_root: where datasets are found, or ``None`` for the default.

    Returns:
        The dataset.

    Raises:
        DPAuditError: not a GraphDataset.
        DatasetError: the fingerprint differs from the card's.
    """
    public = model.card.get("dataset") or {}
    info = model.provenance("dataset") or {}
    expected = info.get("fingerprint")
    if dataset is None:  # a graph file comes back from the path in the owner's record, bytes checked
        dataset = reload_dataset(public, info, root=data_root)
    if not isinstance(dataset, GraphDataset):
        raise DPAuditError("attacks expect a dpaudit GraphDataset")
    if expected is not None and dataset.fingerprint != expected:
        raise DatasetError(
            f"dataset {dataset.name!r} has fingerprint {dataset.fingerprint}, but the model was trained on data with "
            f"fingerprint {expected}: not the same graph"
        )
    return dataset


def target_split(model: ReleasedModel, dataset: GraphDataset) -> Split:
    """The target's split, rebuilt deterministically from its card (``split.spec`` + seed), or
    read from explicit node lists (``split.nodes``, as written by :mod:`dpaudit.training.adapters`).

    Args:
        model: the attacked model (its owner's record or card).
        dataset: the dataset the split is rebuilt on.

    Returns:
        The split.

    Raises:
        DPAuditError: no owner's record, no split specification, or a size mismatch.
    """
    info = model.provenance("split") or {}
    if "seed" not in info and info.get("nodes") is None and not model.has_record:
        raise DPAuditError(
            "membership is the owner's record (provenance.json), which this copy of the model does not have: "
            "audit it where provenance.json sits beside model.json, or pass the split explicitly"
        )
    nodes = info.get("nodes")
    if nodes is not None:
        parts = [torch.as_tensor(nodes.get(p, []), dtype=torch.long) for p in ("train", "val", "test")]
        return Split(
            *parts,
            spec=str(info.get("spec", "explicit")),
            seed=int(info.get("seed", 0)),
            inductive=bool(info.get("inductive", False)),
        )
    if "spec" not in info:
        raise DPAuditError("the model card has no split specification; membership cannot be reconstructed")
    seed = int(info.get("seed", model.provenance("seed", 0)))
    split = make_split(dataset, info["spec"], seed)
    sizes = info.get("sizes")
    if sizes and int(sizes.get("train", len(split.train))) != len(split.train):
        raise DPAuditError(f"rebuilt split has {len(split.train)} training nodes, the card says {sizes['train']}")
    return split
