"""The synthetic default: :func:`csbm`, a contextual stochastic block model generated on the
spot, refused before allocating when the machine cannot hold it."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data

from dpaudit.data.datasets.graph import GraphDataset
from dpaudit.data.datasets.preprocessing import prepare
from dpaudit.errors import DatasetError


def csbm(
    num_nodes: int = 1000,
    num_classes: int = 4,
    num_features: int = 32,
    avg_degree: float = 8.0,
    homophily: float = 0.8,
    feature_signal: float = 0.6,
    seed: int = 0,
) -> GraphDataset:
    r"""Contextual stochastic block model (Deshpande et al. 2018), generated on the spot.

    Labels are balanced over ``num_classes``. Features are
    :math:`x_v = \mu_{y_v} + \mathcal{N}(0, I)` with random class means whose root-mean-square
    coordinate is ``feature_signal`` (the per-coordinate signal-to-noise ratio). About ``num_nodes·avg_degree/2`` undirected edges are drawn; a fraction
    ``homophily`` of them join nodes of the same class (edge homophily), the rest join nodes of
    different classes, endpoints uniform within the chosen classes.

    Args:
        num_nodes: number of nodes (≥ 2).
        num_classes: number of classes (2..num_nodes).
        num_features: feature dimension (≥ 1).
        avg_degree: expected degree, in (0, num_nodes).
        homophily: fraction of intra-class edges, in [0, 1].
        feature_signal: root-mean-square coordinate of the class means.
        seed: generator seed.

    Returns:
        The :class:`GraphDataset`, declared public (a generated graph).

    Raises:
        DatasetError: parameters out of range, or a graph too large for memory.
    """
    if num_nodes < 2 or num_classes < 2 or num_classes > num_nodes or num_features < 1:
        raise DatasetError("csbm needs num_nodes >= 2, 2 <= num_classes <= num_nodes and num_features >= 1")
    if not 0.0 <= homophily <= 1.0:
        raise DatasetError(f"csbm homophily must lie in [0, 1], got {homophily}")
    if avg_degree <= 0 or avg_degree >= num_nodes:
        raise DatasetError(f"csbm avg_degree must lie in (0, num_nodes), got {avg_degree}")
    _check_csbm_memory(num_nodes, num_features, avg_degree)
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(num_nodes) % num_classes)
    means = rng.normal(size=(num_classes, num_features))
    means *= feature_signal / np.sqrt((means**2).mean(axis=1, keepdims=True))
    # the noise is drawn in row blocks (the same stream as one draw) and written as float32
    # at once: 4 bytes per feature entry at the peak, never a whole float64 matrix
    x = torch.empty(num_nodes, num_features, dtype=torch.float32)
    block = max(1, 2**22 // num_features)
    for start in range(0, num_nodes, block):
        rows = slice(start, min(start + block, num_nodes))
        noise = rng.normal(size=(rows.stop - start, num_features))
        noise += means[y[rows]]
        x[rows] = torch.from_numpy(noise)

    num_edges = int(round(num_nodes * avg_degree / 2))
    data = Data(
        x=x, y=torch.tensor(y, dtype=torch.long), edge_index=_csbm_edges(rng, y, num_classes, num_edges, homophily)
    )
    params = dict(
        num_nodes=num_nodes,
        num_classes=num_classes,
        num_features=num_features,
        avg_degree=avg_degree,
        homophily=homophily,
        feature_signal=feature_signal,
        seed=seed,
    )
    info = {"loader": "dpaudit.data.datasets.csbm", "parameters": params}
    dataset = prepare(data, "csbm", info=info, classes=num_classes)  # the generator's classes
    # A generated graph is public by construction: its generator parameters are in the card.
    return dataset.declare_public("the csbm generator (synthetic graph)")


def _csbm_edges(rng: np.random.Generator, y: np.ndarray, num_classes: int, num_edges: int, homophily: float):
    """csbm's edge draw ([2, num_edges] int64); each temporary is released once used, so that
    only the two endpoint arrays outlive the draw."""
    members = [np.flatnonzero(y == c) for c in range(num_classes)]
    src = rng.integers(0, y.size, size=num_edges)
    same = rng.random(num_edges) < homophily
    src_class = y[src]
    offset = rng.integers(1, num_classes, size=num_edges)
    dst_class = np.where(same, src_class, (src_class + offset) % num_classes)
    del same, src_class, offset
    sizes = np.array([len(m) for m in members])
    pick = (rng.random(num_edges) * sizes[dst_class]).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    order = np.concatenate(members)
    pick += starts[dst_class]
    del dst_class
    dst = order[pick]
    del pick
    return torch.from_numpy(np.stack([src, dst]))


def _check_csbm_memory(num_nodes: int, num_features: int, avg_degree: float) -> None:
    """Refuse, before allocating, a graph the machine cannot hold: float32 features (4 bytes
    per entry; the float64 noise is drawn in bounded blocks), edges as six int64 arrays while
    drawn and, while made undirected (:func:`undirected_edges`), about as many again: ~100
    bytes per undirected edge at the peak."""
    from dpaudit.runtime import device_memory

    needed = 4 * num_nodes * num_features + 100 * num_nodes * avg_degree / 2
    memory = device_memory(torch.device("cpu"))
    if memory is not None and needed > memory:
        raise DatasetError(
            f"csbm with num_nodes={num_nodes}, num_features={num_features}, avg_degree={avg_degree:g} needs about "
            f"{needed / 2**30:.3g} GiB; this machine has {memory / 2**30:.3g} GiB"
        )
