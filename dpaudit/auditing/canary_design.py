"""The canary audit's design, shared by the attacks and by defenses that design canaries for
their own threat model (:mod:`attacks.canary` runs the game; e.g. :mod:`defenses.gcon.canaries`
registers a :class:`CanaryStructure`): the N canaries of one audit, the dataset a run trains on,
and the registry of defense-designed edge-canary structures.

Shapes: canary features [N, F], labels [N], wires [W, 2] (canary index, base node), pairs
[N, 2]; coins and scores [N].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch_geometric.data import Data

from dpaudit.data.datasets import GraphDataset, fingerprint
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError

if TYPE_CHECKING:
    from dpaudit.release.model import ReleasedModel


@dataclass
class CanaryDesign:
    """The N canaries of one audit (fixed across runs; only the coins change).

    Attributes:
        kind: ``"node"`` or ``"edge"``.
        features: node canaries' features [N, F] (float32).
        labels: node canaries' labels [N] (long).
        wires: [W, 2] (canary index, base node) edges of node canaries.
        pairs: edge canaries' endpoints [N, 2] (base node indices, u < v).
        settings: how the design was drawn (JSON-able).
    """

    kind: str
    count: int
    features: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    wires: np.ndarray | None = None
    pairs: np.ndarray | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """JSON-able description: kind, count, settings and (edge canaries) the pairs."""
        out: dict[str, Any] = {"kind": self.kind, "count": self.count, **self.settings}
        if self.kind == "edge" and self.pairs is not None:
            out["pairs"] = self.pairs.tolist()
        return out


def dataset_with_canaries(base: GraphDataset, x: torch.Tensor, y: torch.Tensor, edge_index: torch.Tensor, note: str):
    """``base`` with node rows ``x``/``y`` (the canaries appended) and ``edge_index``; the public
    declaration is the base's: it never depends on which canaries the coins put in.

    Args:
        base: the dataset without canaries.
        x: node features with the canary rows appended.
        y: labels with the canary rows appended (−1: unlabeled).
        edge_index: the edges of the run.
        note: how the canaries were put in (kept in ``info``).

    Returns:
        The :class:`~dpaudit.data.datasets.GraphDataset` of the run.

    Shapes:
        x: [N + canaries, F]
        y: [N + canaries]
        edge_index: [2, E]
    """
    n = x.size(0)
    label_mask = y >= 0
    data = Data(x=x.contiguous(), y=y, edge_index=edge_index, label_mask=label_mask, num_nodes=n)
    if base.has_public_split:
        extra = torch.full((n - base.num_nodes,), -1, dtype=torch.long)
        data.public_split = torch.cat([base.data.public_split, extra])
    info = {**base.info, "canaries": note}
    # the declaration is a constant of the game: it never depends on which canaries the coins put in
    return GraphDataset(data, base.name, base.num_classes, fingerprint(data), info, dict(base.public_facts))


def undirected_pairs(pairs: np.ndarray) -> torch.Tensor:
    """[N, 2] node pairs as a [2, 2N] edge_index holding both directions.

    Args:
        pairs: node pairs.

    Returns:
        The edge_index.

    Shapes:
        pairs: [N, 2]
        return: [2, 2N]
    """
    if len(pairs) == 0:
        return torch.zeros((2, 0), dtype=torch.long)
    p = torch.as_tensor(pairs, dtype=torch.long).t()
    return torch.cat([p, p.flip(0)], dim=1)


class CanaryStructure(Protocol):
    """Edge canaries designed by a defense's own module for its threat model: auditor-chosen
    nodes (public data at edge level, present in every run) joined by canary edges (the coins),
    scored from the release by that module (e.g. :mod:`defenses.gcon.canaries`). Registered
    under ``name`` with :func:`register_structure`; chosen by ``design={"structure": name}``.

    Attributes:
        name: the name it is registered and chosen under.
    """

    name: str

    def check(self, defense_cls: type, count: int) -> None:
        """Raise :class:`ConfigurationError` for a defense, or a number of canaries per run, the
        structure cannot take (before any data is loaded).

        Args:
            defense_cls: the defense class to be audited.
            count: canaries per run.
        """

    def draw(self, dataset: GraphDataset, split: Split, count: int, seed: int = 0, **options) -> CanaryDesign:
        """Draw the N canaries of one audit.

        Args:
            dataset: the base dataset.
            split: the target's split.
            count: number of canaries N.
            seed: seed of the design.
            **options: structure-specific options from ``design``.

        Returns:
            The :class:`CanaryDesign`.
        """

    def training_data(
        self, base: GraphDataset, split: Split, design: CanaryDesign, included: np.ndarray
    ) -> tuple[GraphDataset, Split]:
        """The dataset and split one run trains on, given its coins.

        Args:
            base: the base dataset.
            split: the target's split.
            design: the canaries.
            included: bool coin of each canary.

        Returns:
            ``(dataset, split)`` of the run.
        """

    def score(
        self,
        model: ReleasedModel,
        base: GraphDataset,
        split: Split,
        design: CanaryDesign,
        train_ds: GraphDataset,
        train_split: Split,
    ) -> tuple[np.ndarray, str]:
        """Score every canary from the run's release.

        Args:
            model: the run's released model.
            base: the base dataset.
            split: the target's split.
            design: the canaries.
            train_ds: the dataset the run trained on.
            train_split: the split the run trained on.

        Returns:
            ``(scores, description)``: one score per canary (higher: more likely included) and what the score is.
        """


#: the registered :class:`CanaryStructure` s by name
STRUCTURES: dict[str, CanaryStructure] = {}


def register_structure(structure: CanaryStructure) -> CanaryStructure:
    """Register a structure under its ``name`` (replacing any previous one).

    Args:
        structure: the structure.

    Returns:
        ``structure``.
    """
    STRUCTURES[structure.name] = structure
    return structure


def structure_of(name: str) -> CanaryStructure:
    """The registered structure ``name``; :class:`ConfigurationError` when there is none.

    Args:
        name: the structure's name.

    Returns:
        The structure.

    Raises:
        ConfigurationError: no structure is registered under ``name``.
    """
    if name not in STRUCTURES:
        known = ", ".join(sorted(STRUCTURES)) or "none registered"
        raise ConfigurationError(f"canaries: unknown structure {name!r} (known: {known})")
    return STRUCTURES[name]
