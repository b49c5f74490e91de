r"""What one PMA release on a query graph answers, and at what cost: the K-hop neighbourhood of the
queried nodes, and the memo entry that lets the same release answer again.

**Neighbourhood releases.** PMA (Sajadmanesh et al., USENIX Security 2023, Algorithm 1) computes
:math:`\check X^{(k)} = \mathrm{norm}(A^\top \check X^{(k-1)} + Z^{(k)})` with noise
:math:`Z^{(k)}` independent for every node and hop. Row v of hop K is a function of the rows of
v's in-neighbours at hop K − 1 and of :math:`Z^{(K)}_v` only; unrolled, the rows of a node set T
at hop K are a function of the encoder rows :math:`\check X^{(0)}` of the nodes within K hops of
T, of the edges into the nodes within K − 1 hops, and of the noise of those nodes' (node, hop)
entries — nothing else. PMA run on exactly that subgraph (:meth:`~dpaudit.data.adjacency.Adjacency.
neighbourhood`: every in-edge of a node within K − 1 hops, none into the boundary) computes the
same function of the same inputs with noise of the same law, so T's rows have **the same joint
distribution** as T's rows of a whole-graph release: the answer is a sub-view of the release on
the whole query graph. The accounting is therefore unchanged: one such release costs one PMA
release (:meth:`defenses.gap.GAP.query_mechanism`) whatever the number of rows it answers.

**Memo.** A release answers again for free (:class:`QueryRelease`) only for rows it computed
(``covered``) and only while every feature row they depend on (their K-hop neighbourhood in the
same edge structure) is what it was at release time: the answer is then the very release
already charged, a sub-view of it on the queried graph. Any other row, or a changed feature in
the neighbourhood, makes a new, charged release. Edge structures are compared by a SHA-256 of the
canonical edge set (:func:`structure_key`, once per ``edge_index`` tensor); feature rows by
128-bit row digests (:func:`row_digests`). Whatever a digest comparison says, every answer is
read from a release that was charged: a collision could only answer with the rows of a release
made on other features, never spend less than was released.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Data

from defenses.gap.mechanism import canonical_edges
from dpaudit.data.adjacency import TensorCache, adjacency_of

# edge structures of recently queried graphs, by the identity and version of ``edge_index``
_STRUCTURE_KEYS = TensorCache(size=64)
# a fresh key per process: row digests are never saved nor compared across processes
_DIGEST_SEED = secrets.randbits(64)
_DIGEST_KEYS: dict[int, np.ndarray] = {}
#: rows digested per chunk (bounds the uint64 temporary to CHUNK_ROWS × features × 8 bytes)
CHUNK_ROWS = 1 << 15


def structure_key(graph: Data) -> str:
    """SHA-256 of the node count and the canonical edge set (sorted, duplicates removed: the
    key of :func:`~defenses.gap.mechanism.graph_key` without the features), computed once per
    ``edge_index`` tensor while it is alive and unmodified in place.

    Args:
        graph: a graph with ``edge_index`` and ``num_nodes``.

    Returns:
        The key (32 hex digits).
    """
    num_nodes = int(graph.num_nodes)

    def build() -> str:
        edges = canonical_edges(graph.edge_index, num_nodes).contiguous()
        h = hashlib.sha256(f"{num_nodes}|{tuple(edges.shape)}|".encode())
        h.update(edges.numpy().tobytes())
        return h.hexdigest()[:32]

    return _STRUCTURE_KEYS.get((graph.edge_index,), build, (num_nodes,))


# whether recently queried edge structures share an edge with a training graph (by ``edge_index``)
_OVERLAPS = TensorCache(size=16)


def edge_codes(edge_index: torch.Tensor) -> torch.Tensor:
    """Every directed edge (u, v) as the int64 code u·2³² + v, sorted, duplicates removed: an edge
    set comparable across graphs of any node count (the same node ids)."""
    e = edge_index.detach().to("cpu", torch.int64)
    return torch.unique(e[0] * (1 << 32) + e[1]) if e.numel() else torch.zeros(0, dtype=torch.int64)


def shares_edges(graph: Data, codes: torch.Tensor) -> bool:
    """Whether ``graph`` holds any edge of the sorted :func:`edge_codes` ``codes`` (the training
    graph's, from the owner's record), computed once per ``edge_index`` tensor while it is alive
    and unmodified in place."""

    def build() -> bool:
        if codes.numel() == 0 or graph.edge_index.numel() == 0:
            return False
        return bool(torch.isin(edge_codes(graph.edge_index), codes).any())

    return _OVERLAPS.get((graph.edge_index, codes), build)


def _keys(width: int) -> np.ndarray:
    if width not in _DIGEST_KEYS:
        _DIGEST_KEYS[width] = np.random.default_rng([_DIGEST_SEED, width]).integers(
            0, 2**64, size=(width, 2), dtype=np.uint64, endpoint=False
        )
    return _DIGEST_KEYS[width]


def row_digests(x: torch.Tensor, rows: torch.Tensor | None = None) -> np.ndarray:
    r"""Two 64-bit multilinear hashes of every row's float32 bit patterns,
    :math:`h_j(x_v) = \sum_i k_{ji}\,\mathrm{bits}(x_{vi}) \bmod 2^{64}` with random keys drawn once
    per process ([len(rows), 2] uint64; all rows when ``rows`` is None). Rows that differ in any
    bit get equal digests with probability at most :math:`2^{-66}` for keys the caller does not
    know. Cost: the rows read, in chunks (never a copy of the whole matrix).

    Args:
        x: node features.
        rows: the rows to digest; ``None`` for all.

    Returns:
        The digests (uint64).
    """
    keys = _keys(int(x.size(1)))
    index = torch.arange(x.size(0)) if rows is None else rows.cpu().long()
    out = np.empty((index.numel(), 2), dtype=np.uint64)
    for start in range(0, index.numel(), CHUNK_ROWS):
        part = x[index[start : start + CHUNK_ROWS].to(x.device)].detach().to("cpu", torch.float32)
        bits = part.contiguous().numpy().view(np.uint32).astype(np.uint64)
        out[start : start + CHUNK_ROWS] = bits @ keys  # wraps modulo 2**64
    return out


def neighbourhood_nodes(graph: Data, nodes: torch.Tensor, hops: int) -> torch.Tensor:
    """Sorted ids of every node within ``hops`` in-hops of ``nodes`` (``nodes`` included): the
    rows PMA's answer for ``nodes`` depends on. Reads the graph's cached CSR.

    Args:
        graph: the query graph.
        nodes: the queried nodes.
        hops: K.

    Returns:
        The sorted node ids.
    """
    hood = adjacency_of(graph.edge_index.cpu(), int(graph.num_nodes)).neighbourhood(nodes.cpu(), hops)
    return hood.subset


def local_edges(graph: Data, nodes: torch.Tensor, hops: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(subset, edge_index, positions)`` of the subgraph a ``hops``-hop PMA on ``nodes`` reads
    (module docstring): ``subset`` sorted global ids, ``edge_index`` [2, E'] in local ids (every
    stored in-edge of the nodes within ``hops - 1`` hops, duplicates kept as PMA counts them),
    ``positions`` the local id of every node of ``nodes``.

    Args:
        graph: the query graph.
        nodes: the queried nodes.
        hops: K.
    """
    hood = adjacency_of(graph.edge_index.cpu(), int(graph.num_nodes)).neighbourhood(nodes.cpu(), hops)
    local = hood.adjacency
    counts = (local.ptr[1:] - local.ptr[:-1]).long()
    destinations = torch.repeat_interleave(torch.arange(local.num_nodes), counts)
    return hood.subset, torch.stack([local.src.long(), destinations]), hood.positions


@dataclass
class QueryRelease:
    """One PMA release on a query graph, kept to answer again (module docstring, "Memo").

    ``covered``: sorted ids of the rows it computed (``None``: every node); ``subset``: sorted
    ids of the rows those depend on (``None``: every node); ``digests``: :func:`row_digests` of
    ``subset``'s features at release time; ``rows``: hops 1..K of ``covered`` [len, K·hidden].

    Attributes:
        structure: :func:`structure_key` of the released graph.
        num_nodes: its node count.
        covered: sorted ids of the rows computed (``None``: every node).
        subset: sorted ids of the rows those depend on (``None``: every node).
        digests: :func:`row_digests` of ``subset``'s features at release time.
        rows: hops 1..K of ``covered``.
        reads_all_rows: every computed row read every node's features (see the field).
    """

    structure: str
    num_nodes: int
    covered: torch.Tensor | None
    subset: torch.Tensor | None
    digests: np.ndarray
    rows: torch.Tensor
    #: every computed row read every node's features (the public feature-graph smoothing of the
    #: encoder's input): it answers again only while no feature row of the graph changed
    reads_all_rows: bool = False

    def answers(self, graph: Data, nodes: torch.Tensor, hops: int) -> torch.Tensor | None:
        """Hops 1..K of ``nodes`` (in query order) when this release covers them on ``graph``,
        else ``None``.

        Args:
            graph: the query graph.
            nodes: the queried nodes.
            hops: K.

        Returns:
            The released rows in query order, or ``None`` when this release does not cover them.
        """
        if int(graph.num_nodes) != self.num_nodes or structure_key(graph) != self.structure:
            return None
        wanted = torch.unique(nodes.cpu())
        if self.covered is None:
            at = nodes.cpu()
        else:
            at = torch.searchsorted(self.covered, nodes.cpu()).clamp(max=max(self.covered.numel() - 1, 0))
            if self.covered.numel() == 0 or not torch.equal(self.covered[at], nodes.cpu()):
                return None
        if not features_unchanged(graph, None if self.reads_all_rows else wanted, hops, self.subset, self.digests):
            return None
        return self.rows[at.to(self.rows.device)]


def features_unchanged(
    graph: Data, nodes: torch.Tensor | None, hops: int, subset: torch.Tensor | None, digests: np.ndarray
) -> bool:
    """Whether the feature rows PMA's answer for ``nodes`` (``None``: every node) reads are those
    ``digests`` recorded for ``subset`` (``None``: every node) — the same edge structure given.

    Args:
        graph: the query graph (same edge structure as the release).
        nodes: the queried nodes; ``None`` for all.
        hops: K.
        subset: the rows the release digested; ``None`` for all.
        digests: their digests.

    Returns:
        Whether every feature row the answer reads is unchanged.
    """
    if nodes is None or subset is None and nodes.numel() == graph.num_nodes:
        return subset is None and np.array_equal(row_digests(graph.x), digests)
    needed = neighbourhood_nodes(graph, nodes, hops)
    if subset is None:
        return np.array_equal(row_digests(graph.x, needed), digests[needed.numpy()])
    at = torch.searchsorted(subset, needed).clamp(max=max(subset.numel() - 1, 0))
    if subset.numel() == 0 or not torch.equal(subset[at], needed):
        return False
    return np.array_equal(row_digests(graph.x, needed), digests[at.numpy()])
