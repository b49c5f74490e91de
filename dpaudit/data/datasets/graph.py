"""The :class:`GraphDataset` every loader returns: one node-classification graph, what its public
card says about it and what the owner's record keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch_geometric.data import Data


@dataclass
class GraphDataset:
    """One node-classification graph.

    Attributes:
        data: PyG ``Data`` with ``x`` [N, F] float32, ``y`` [N] long (-1 = unlabeled),
            ``edge_index`` [2, E] (both directions of every undirected edge), ``label_mask``
            [N] bool, and optionally ``public_split`` [N] long (0 train, 1 val, 2 test, -1 none).
        name: the dataset's registry name (or the user's label).
        num_classes: number of **declared** classes (labels are 0..C-1; class ``i`` is the raw
            label value ``public_facts["classes"][i]``); never counted on the labels.
        fingerprint: SHA-256 (16 hex digits) of features, labels and edges.
        info: provenance (loader, source folder, generator parameters, preprocessing).
        public_facts: the label domain and sizes **declared** public before any training
            (``classes``: the declared label values in class order, always present;
            ``class_counts``: the declared labeled count of each, when declared; ``num_nodes``,
            ``num_edges``, ``num_labeled``, ``declared_by``; ``published: True`` when they are
            the graph's own published sizes, which makes its splits' sizes public too): a public
            benchmark's published statistics, a synthetic graph's generator parameters, or what
            the user declares through :func:`from_data`. Only ``classes`` for a user's graph
            without a size declaration: then no defense may read a size of it
            (:mod:`dpaudit.release`). A neighbouring graph built for a test keeps the declaration
            unchanged — it is a constant, not a measurement.
    """

    data: Data
    name: str
    num_classes: int
    fingerprint: str
    info: dict = field(default_factory=dict)
    public_facts: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.data.num_nodes)

    @property
    def num_edges(self) -> int:
        """Number of undirected edges."""
        return int(self.data.edge_index.size(1)) // 2

    @property
    def num_features(self) -> int:
        return int(self.data.x.size(1))

    @property
    def labeled_nodes(self) -> torch.Tensor:
        return self.data.label_mask.nonzero().view(-1)

    @property
    def has_public_split(self) -> bool:
        return "public_split" in self.data

    def card(self) -> dict:
        """What the public model card says about the training data: the name, the task's
        declared shape (classes, features), a synthetic graph's generator parameters and the
        declared public facts. Nothing measured on the graph (see :meth:`record`)."""
        out = {"name": self.name, "num_classes": self.num_classes, "num_features": self.num_features}
        if self.info.get("parameters"):
            out["parameters"] = dict(self.info["parameters"])
        if self.info.get("target"):
            out["target"] = self.info["target"]
        if self.public_facts:
            out["public_facts"] = dict(self.public_facts)
        return out

    def record(self) -> dict:
        """What the owner's record keeps about the training data (never shipped): the content
        fingerprint, exact counts and where it was read from."""
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_classes": self.num_classes,
            "info": self.info,
        }

    def declare_public(self, declared_by: str, **facts) -> GraphDataset:
        """Declare this graph's sizes public (``num_nodes``, ``num_edges``, ``num_labeled`` by
        default, measured now — call this only for data whose statistics are published), beside
        the declared label domain (``classes``) kept from :func:`prepare`.

        Args:
            declared_by: who declares it (kept in ``public_facts["declared_by"]``).
            **facts: further facts, overriding the measured ones.

        Returns:
            This dataset.
        """
        measured = {
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_labeled": int(self.data.label_mask.sum()),
        }
        self.public_facts = {**self.public_facts, **measured, **facts, "published": True, "declared_by": declared_by}
        return self

    def __repr__(self) -> str:
        return (
            f"GraphDataset({self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
            f"features={self.num_features}, classes={self.num_classes}, labeled={int(self.data.label_mask.sum())})"
        )
