r"""A public feature graph and the features smoothed over it: what edge-level DP leaves free.

Under edge-level DP the node features are not protected (only the edges are), so any function of
the features alone is free: it reads no edge and costs no ε. One such function is a graph built
from the features themselves: every node joined to its ``k`` nearest neighbours by cosine
similarity of its (L2-normalised) feature row, symmetrised, with a self loop, and normalised as
GCN's propagation operator (Kipf & Welling, ICLR 2017, Eq. 2):

.. math::

    \hat S = \tilde D^{-1/2}(K \lor K^\top + I)\tilde D^{-1/2},\qquad
    X_s = \hat S^{h}\,\bar X,

where :math:`K_{ij} = 1` when :math:`j` is one of :math:`i`'s ``k`` nearest neighbours (itself
excluded) and :math:`\bar X` is :math:`X` with unit rows. :math:`X_s` is SGC's propagation
(Wu et al., ICML 2019) over the feature graph rather than the private one; kNN feature graphs are
the usual starting point of graph-structure learning (e.g. Franceschi et al., ICML 2019, "LDS",
whose kNN-GCN baseline this is). The neighbours are sklearn's exact brute-force
:class:`~sklearn.neighbors.NearestNeighbors` (chunked: no N × N matrix is held), so the result is
deterministic and reads ``x`` only.

Who may use it: an **edge-level** defense, on the features of the graph its phase reads (the
training graph's nodes in training, the querier's graph at a query) — never a node-level one,
whose unit protects the features too. Whether a defense uses it is its own public choice (e.g. by
the encoder's validation accuracy on public labels).

Cost and limits (measured on the 2-core CPU box, :func:`smoothing_fits` refuses above them): the
neighbour search is O(N² F) time in chunks, and the smoothed features are a dense N × F float32
matrix; the option is offered only up to :data:`MAX_NODES` nodes and :data:`MAX_DENSE_ENTRIES`
entries of that matrix (a public test on the declared N and F). :meth:`FeatureSmoothing.apply`
keeps the result for the last two feature tensors it saw while they are alive and unedited, so a
model answering many queries over one graph searches once (Cora: 0.40 CPU s the first time,
0.001 s after); a perturbed feature tensor (LinkTeller's probe) is a new tensor and is searched
again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.neighbors import NearestNeighbors
from sklearn.preprocessing import normalize

from dpaudit.data.adjacency import TensorCache
from dpaudit.errors import ConfigurationError

#: neighbours per node of the public feature graph
KNN_NEIGHBOURS = 10
#: propagation steps over it
SMOOTHING_HOPS = 2
#: the largest graph the option is offered on (the neighbour search is quadratic in N)
MAX_NODES = 100_000
#: the largest smoothed feature matrix (N · F float32 entries: 800 MB)
MAX_DENSE_ENTRIES = 200_000_000

#: smoothed features of the last feature tensors seen (reused while that very tensor is alive and
#: unedited: a model answering several queries over one graph searches its neighbours once)
_SMOOTHED = TensorCache(size=2)


@dataclass(frozen=True)
class FeatureSmoothing:
    """The public feature-graph smoothing of one model: ``k`` neighbours, ``hops`` steps.

    Attributes:
        k: neighbours per node (cosine similarity of unit feature rows).
        hops: powers of the normalised feature-graph operator applied to the unit rows.
    """

    k: int = KNN_NEIGHBOURS
    hops: int = SMOOTHING_HOPS

    def __post_init__(self) -> None:
        if int(self.k) < 1 or int(self.hops) < 1:
            raise ConfigurationError(f"feature smoothing needs k ≥ 1 and hops ≥ 1, got k={self.k}, hops={self.hops}")

    def to_dict(self) -> dict[str, int]:
        """Returns:
        The JSON form (``{"k": …, "hops": …}``) a model's config stores."""
        return {"k": int(self.k), "hops": int(self.hops)}

    @classmethod
    def from_dict(cls, record: dict[str, Any] | None) -> FeatureSmoothing | None:
        """Read :meth:`to_dict`'s form back.

        Args:
            record: the stored form, or ``None`` (no smoothing).

        Returns:
            The smoothing, or ``None``.

        Raises:
            ConfigurationError: a malformed record.
        """
        if record is None:
            return None
        if not isinstance(record, dict) or set(record) != {"k", "hops"}:
            raise ConfigurationError(f"feature smoothing record must be {{'k': int, 'hops': int}}, got {record!r}")
        return cls(int(record["k"]), int(record["hops"]))

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """The smoothed features of the nodes whose rows ``x`` holds (see the module docstring).

        Shapes: x [N, F] → [N, F] float32 (dense, on ``x``'s device).

        Args:
            x: node features (dense or torch sparse).

        Returns:
            :math:`\\hat S^h \\bar X` (a new tensor; the search is cached per feature tensor
            object while it is alive and unedited, :class:`~dpaudit.data.adjacency.TensorCache`).

        Raises:
            ConfigurationError: a graph above :func:`smoothing_fits`'s limits.
        """
        smoothed = _SMOOTHED.get((x,), lambda: smooth_features(x, self.k, self.hops), (self.k, self.hops))
        return smoothed.clone()


def smoothing_fits(num_nodes: int, num_features: int) -> bool:
    """Whether the smoothing is offered on a graph of this size (public: declared N and F).

    Args:
        num_nodes: N.
        num_features: F.

    Returns:
        ``N ≤ MAX_NODES`` and ``N · F ≤ MAX_DENSE_ENTRIES``, and N large enough for one neighbour.
    """
    return 2 <= num_nodes <= MAX_NODES and num_nodes * max(num_features, 1) <= MAX_DENSE_ENTRIES


def _unit_rows(x: torch.Tensor) -> sp.csr_matrix | np.ndarray:
    if x.layout != torch.strided:
        x = x.to_dense()
    array = x.detach().cpu().double().numpy()
    if np.count_nonzero(array) <= 0.1 * array.size:
        return normalize(sp.csr_matrix(array))
    return normalize(array)


def feature_graph(x: torch.Tensor, k: int = KNN_NEIGHBOURS) -> sp.csr_matrix:
    """:math:`\\hat S` of the module docstring, over the rows of ``x``.

    Shapes: x [N, F] → [N, N] (sparse, at most 2kN + N stored entries).

    Args:
        x: node features.
        k: neighbours per node (fewer when N ≤ k).

    Returns:
        The symmetric normalised feature-graph operator (scipy CSR, float64).

    Raises:
        ConfigurationError: a graph above :func:`smoothing_fits`'s limits.
    """
    n, f = int(x.shape[0]), int(x.shape[1])
    if not smoothing_fits(n, f):
        raise ConfigurationError(
            f"the public feature graph is offered on 2–{MAX_NODES:,} nodes and at most {MAX_DENSE_ENTRIES:,} "
            f"smoothed entries; this graph has {n:,} nodes × {f:,} features"
        )
    rows = _unit_rows(x)
    k = min(int(k), n - 1)
    search = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(rows)
    _, idx = search.kneighbors(rows)
    # drop each node itself (the first hit unless ties put another row first): keep k others
    others = np.array([[j for j in line if j != i][:k] for i, line in enumerate(idx)], dtype=np.int64)
    src = np.repeat(np.arange(n), k)
    knn = sp.csr_matrix((np.ones(n * k), (src, others.reshape(-1))), shape=(n, n))
    graph = ((knn + knn.T) > 0).astype(np.float64) + sp.eye(n, format="csr")
    scale = sp.diags(np.asarray(graph.sum(axis=1)).ravel() ** -0.5)
    return (scale @ graph @ scale).tocsr()


def smooth_features(x: torch.Tensor, k: int = KNN_NEIGHBOURS, hops: int = SMOOTHING_HOPS) -> torch.Tensor:
    """:math:`\\hat S^h \\bar X` (the module docstring).

    Shapes: x [N, F] → [N, F] float32 (dense, on ``x``'s device).

    Args:
        x: node features (dense or torch sparse).
        k: neighbours per node.
        hops: propagation steps.

    Returns:
        The smoothed features.

    Raises:
        ConfigurationError: a graph above :func:`smoothing_fits`'s limits.
    """
    operator = feature_graph(x, k)
    z = _unit_rows(x)
    for _ in range(int(hops)):
        z = operator @ z
    z = z.toarray() if sp.issparse(z) else np.asarray(z)
    return torch.as_tensor(z, dtype=torch.float32, device=x.device)
