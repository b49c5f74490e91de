"""Composition of datasets, splits, defenses and (later) attacks into runs.

This is the only place (with the CLI) that ties the packages together.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.data.datasets import GraphDataset, load_dataset
from dpaudit.data.splits import Split, make_split
from dpaudit.release.model import ReleasedModel, answering
from dpaudit.runtime import atomic_write_json
from dpaudit.training.defense import Defense
from dpaudit.training.registry import get_defense

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the released model.
        dataset: the graph it was trained on.
        split: the split it was trained with.
        metrics: accuracies (:func:`evaluate`) and other training metrics.
    """

    model: ReleasedModel
    dataset: GraphDataset
    split: Split
    metrics: dict[str, Any]


def evaluate(model: ReleasedModel, dataset: GraphDataset, split: Split) -> dict[str, float]:
    """Accuracy of ``model`` on each part, each queried on the graph that part may see.

    A model whose queries are charged releases (GAP) answers the training graph from the
    owner's training release, so evaluating it releases nothing; any other graph (an inductive
    part) is queried in a query session (its releases are the session's query ledger, about
    that graph), so the model that is saved has made no query release.

    Args:
        model: the released model.
        dataset: its graph.
        split: its split.

    Returns:
        ``train_accuracy``, ``val_accuracy`` and ``test_accuracy`` (``None`` for an empty part).
    """
    asked = model.query_session() if callable(getattr(model, "query_session", None)) else model
    out = {}
    for part in ("train", "val", "test"):
        nodes = getattr(split, part)
        graph = split.graph_for(dataset, part)
        out[f"{part}_accuracy"] = answering(asked, graph).accuracy(graph, nodes) if len(nodes) else None
    return out


def train(
    defense: str | Defense,
    dataset: str | GraphDataset,
    epsilon: float | str = math.inf,
    delta: float | str = "auto",
    seed: int = 0,
    split: str | None = None,
    device: str = "auto",
    data_root: str | None = None,
    overrides: dict[str, Any] | None = None,
    out: str | Path | None = None,
    noise: str | None = None,
    overwrite: bool = False,
    force_delta: bool = False,
) -> TrainResult:
    """Train one defense and, when ``out`` is given, write the released model there with the
    owner's record and ``metrics.json`` (both the owner's, never covered by ε: see
    :mod:`dpaudit.release`).

    Args:
        defense: a registered name, or a configured :class:`~dpaudit.training.defense.Defense`
            (the command line's: its ε, δ, seed, device and ``overrides`` were parsed and checked
            once, when it was built; the arguments below that configure one are then unused).
        dataset: a dataset name or a loaded graph.
        epsilon: the target ε of the defense named ``defense``.
        delta: its δ (``"auto"``: from the declared size).
        seed: its seed.
        device: its device.
        overrides: its hyperparameters (also written to the card).
        split: the split spec (the defense's seed draws it).
        data_root: where a named dataset is read from.
        out: the folder to write the released model to, or ``None``.
        noise: the privacy noise source of the defense named ``defense``
            (:mod:`dpaudit.training.noise`; ``"seeded"`` = ``--reproducible-noise``, recorded on
            the card as not a release).
        overwrite: replace a released model already in ``out``
            (:meth:`~dpaudit.release.ReleasedModel.save`).
        force_delta: accept a δ at or above 1/(declared units) for the defense named ``defense``
            (:func:`dpaudit.accounting.spec.check_delta_population`).

    Returns:
        The model, the dataset, the split and the metrics.
    """
    if isinstance(defense, Defense):
        instance = defense
    else:
        instance = get_defense(defense)(
            epsilon=epsilon,
            delta=delta,
            seed=seed,
            device=device,
            noise=noise,
            force_delta=force_delta,
            **(overrides or {}),
        )
    seed = instance.seed
    ds = dataset if isinstance(dataset, GraphDataset) else load_dataset(dataset, root=data_root)
    sp = make_split(ds, split, seed)
    model = instance.fit(ds, sp)
    model.card["split"]["spec"] = sp.spec
    model.record["split"]["spec"] = sp.spec
    model.card["overrides"] = dict(overrides or {})
    metrics = {
        "defense": instance.name,
        "dataset": ds.name,
        "seed": seed,
        **evaluate(model, ds, sp),
        "train_seconds": model.record["timings"]["train_seconds"],
        "privacy": {
            "epsilon": model.privacy.epsilon if math.isfinite(model.privacy.epsilon) else None,
            "delta": model.privacy.delta,
            "unit": model.privacy.unit,
            "sound": model.privacy.sound,
            "protocol": model.privacy.protocol,
            "unaccounted": list(model.privacy.unaccounted),
            "target_epsilon": model.card.get("target_epsilon"),  # Defense.fit wrote it from the parsed ε
        },
        "split": sp.to_dict(),
    }
    if out is not None:
        out = Path(out)
        model.save(out, overwrite=overwrite)
        atomic_write_json(out / "metrics.json", metrics)
    return TrainResult(model, ds, sp, metrics)
