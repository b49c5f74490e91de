"""GAP's mechanism math as pure functions: SUM aggregation, PMA (Algorithm 1), the paper's
degree sampling, the sound degree promise, sensitivities and the canonical graph key.

Each function is tested alone in ``tests/defenses/gap/test_gap.py`` (sensitivities measured empirically).
The proofs are in :mod:`defenses.gap` (package docstring).
"""

from __future__ import annotations

import hashlib
import logging
import math

import torch
import torch.nn.functional as F

from dpaudit.data.adjacency import Adjacency
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.runtime import randn_on

log = logging.getLogger(__name__)

#: Per-hop L2 sensitivity of the SUM aggregation of row-normalised features when one
#: undirected edge (two directed entries of A) is removed (sound).
EDGE_SENSITIVITY = math.sqrt(2.0)
#: The paper's Lemma 1 value: one directed entry of A (used only under ``protocol=paper``).
PAPER_EDGE_SENSITIVITY = 1.0
MAX_HOPS = 5
LEVELS = ("inf", "edge", "node")


def node_sensitivity(max_degree: int, protocol: str) -> float:
    r"""Per-hop node-level sensitivity: :math:`\sqrt{D(D+1)}` (sound, proven in the module
    docstring) or the paper's :math:`\sqrt D` (Lemmas 2–3; ignores the removed node's own row
    and the degree sampling).

    Args:
        max_degree: D, the degree bound.
        protocol: ``sound`` or ``paper``.

    Returns:
        The per-hop ℓ₂ sensitivity.
    """
    return math.sqrt(max_degree * (max_degree + 1)) if protocol == "sound" else math.sqrt(max_degree)


# --------------------------------------------------------------------------- graph operations


def row_normalize(x: torch.Tensor) -> torch.Tensor:
    r"""Eq. 6 / Eq. 9: :math:`x_v / \|x_v\|_2` for every row (all-zero rows stay zero, norm ≤ 1).

    Args:
        x: node representations.

    Returns:
        ``x`` with unit-ℓ₂ rows.

    Shapes:
        x: [N, d] (returned the same)
    """
    return F.normalize(x, p=2.0, dim=1)


def sum_aggregate(x: torch.Tensor, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    r"""SUM aggregation :math:`A^\top X` (Eq. 7): row v is :math:`\sum_{u:(u\to v)\in E} x_u`.

    ``edge_index[0]`` is the source, ``edge_index[1]`` the target (PyG's ``source_to_target``
    flow); duplicate edges count once per copy. Shapes: x [N, d], edge_index [2, E] → [N, d].

    Args:
        x: node representations.
        edge_index: edges (source → target).
        num_nodes: N.

    Returns:
        The aggregates.
    """
    if edge_index.numel() == 0:
        return torch.zeros(num_nodes, x.size(1), dtype=x.dtype, device=x.device)
    src, dst = edge_index[0].to(x.device), edge_index[1].to(x.device)
    adj_t = torch.sparse_coo_tensor(
        torch.stack([dst, src]),
        torch.ones(src.numel(), dtype=x.dtype, device=x.device),
        (num_nodes, num_nodes),
        check_invariants=False,  # indices come from a validated edge_index; skip the O(E) check
    ).coalesce()
    return torch.sparse.mm(adj_t, x)


def private_multi_hop_aggregation(
    x0: torch.Tensor,
    edge_index: torch.Tensor,
    hops: int,
    noise_std: float,
    generator: torch.Generator | None = None,
    operator=None,
    raw: bool = False,
) -> list[torch.Tensor]:
    r"""PMA, Algorithm 1: returns :math:`[\check X^{(1)}, \dots, \check X^{(K)}]`, each [N, d].

    ``x0`` must already be row-normalised (Eq. 6). For each hop: aggregate (Eq. 7), add
    :math:`\mathcal N(0, \text{noise\_std}^2)` to every entry (Eq. 8), row-normalise (Eq. 9).
    ``noise_std = 0`` gives GAP-∞. With noise 0 the first k hops of a K-hop run are the k-hop run.
    ``operator`` (a :class:`~dpaudit.data.adjacency.Propagation`, e.g. a degree projection's weighted
    sum) replaces the plain SUM over ``edge_index``.

    Args:
        x0: row-normalised encoder outputs.
        edge_index: the graph's edges (source → target); unused when ``operator`` is given.
        hops: K.
        noise_std: σ of the Gaussian noise per entry (0: GAP-∞).
        generator: the noise's generator.
        operator: a propagation replacing the plain SUM, or ``None``.
        raw: return the noisy sums :math:`\tilde X^{(k)}` (Eq. 8) instead of their normalisations
            (Eq. 9; the next hop still reads the normalised rows): the same release, post-processed less.

    Raises:
        DPAuditError: a negative or non-finite ``noise_std``.

    Shapes:
        x0: [N, d]
    """
    if noise_std < 0 or not math.isfinite(noise_std):
        raise DPAuditError(f"PMA noise std must be a finite non-negative number, got {noise_std}")
    num_nodes = x0.size(0)
    # the CSR operator once for every hop (sum_aggregate rebuilds and sorts a COO matrix per call:
    # 8.3 against 0.21 CPU s per hop at 1 M nodes); it counts duplicate edges the same way
    if operator is not None:
        aggregate = operator
    else:
        aggregate = Adjacency.from_edge_index(edge_index.to(x0.device), num_nodes).sum(x0.dtype)
    out, current = [], x0
    for _ in range(hops):
        aggregated = aggregate(current)
        if noise_std > 0:
            noise = randn_on(aggregated.shape, generator, aggregated.device, aggregated.dtype)
            aggregated = aggregated + noise_std * noise
        current = row_normalize(aggregated)
        out.append(aggregated if raw else current)
    return out


def bound_out_degree(
    edge_index: torch.Tensor, num_nodes: int, max_degree: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The paper's degree bounding (Section 5.2, ``protocol=paper`` only): keep, for every
    source node, at most ``max_degree`` of its out-edges chosen uniformly at random.

    Each edge gets a uniform random key; edges are sorted by (source, key) and an edge is kept
    when its rank within its source's group is < ``max_degree``. The result may be directed.
    Not analysed: which edges survive depends on the graph (see the module docstring).

    Args:
        edge_index: edges (source → target).
        num_nodes: N.
        max_degree: D, out-edges kept per source.
        generator: the random keys' generator.

    Returns:
        The kept edges (on the CPU).

    Raises:
        ConfigurationError: ``max_degree < 1``.

    Shapes:
        edge_index: [2, E]
        return: [2, E']
    """
    if max_degree < 1:
        raise ConfigurationError(f"max_degree must be ≥ 1, got {max_degree}")
    edge_index = edge_index.cpu()
    num_edges = edge_index.size(1)
    if num_edges == 0:
        return edge_index
    src = edge_index[0]
    keys = torch.rand(num_edges, generator=generator)
    order = torch.argsort(keys)
    order = order[torch.argsort(src[order], stable=True)]
    sorted_src = src[order]
    degree = torch.bincount(sorted_src, minlength=num_nodes)
    group_start = torch.cumsum(degree, 0) - degree
    rank = torch.arange(num_edges) - group_start[sorted_src]
    keep = order[rank < max_degree].sort().values
    return edge_index[:, keep]


def max_degree_of(edge_index: torch.Tensor, num_nodes: int) -> int:
    """max over nodes of max(in-degree, out-degree), duplicates and self-loops counted.

    Args:
        edge_index: edges.
        num_nodes: N.

    Returns:
        The maximum degree (0 for no edges).
    """
    if edge_index.numel() == 0:
        return 0
    e = edge_index.cpu()
    return int(max(torch.bincount(e[0], minlength=num_nodes).max(), torch.bincount(e[1], minlength=num_nodes).max()))


def check_degree_promise(edge_index: torch.Tensor, num_nodes: int, max_degree: int, what: str) -> None:
    """Sound node-level GAP: refuse a graph whose degree exceeds D (no trimming, see docstring).

    Args:
        edge_index: the graph's edges.
        num_nodes: N.
        max_degree: D, the promised bound.
        what: names the graph in the error message.

    Raises:
        ConfigurationError: the graph's maximum degree exceeds D.
    """
    if max_degree_of(edge_index, num_nodes) > max_degree:
        raise ConfigurationError(
            f"gap-ndp protocol=sound proves node-level DP only for graphs of maximum degree ≤ max_degree = "
            f"{max_degree}; the {what} exceeds it: set a larger max_degree (more noise) or protocol=paper"
        )


def canonical_edges(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The edge set in a canonical order: sorted by (source, target), duplicates removed. [2, E']

    Args:
        edge_index: edges.
        num_nodes: N.

    Returns:
        The distinct edges, sorted (int64, on the CPU).
    """
    e = edge_index.detach().to("cpu", torch.int64)
    if e.numel() == 0:
        return e.reshape(2, 0)
    codes = torch.unique(e[0] * int(num_nodes) + e[1])  # sorted
    return torch.stack([codes // int(num_nodes), codes % int(num_nodes)])


def graph_key(num_nodes: int, edge_index: torch.Tensor, x: torch.Tensor) -> str:
    """SHA-256 of the node count, the canonical edge set and the feature matrix.

    Invariant to the order and duplication of ``edge_index`` columns; changes with any edge or
    any feature value (float32 bytes). Used for the in-memory memo of query releases and, for
    the training graph, only inside the owner's record: a published key of the training graph
    would let anyone test a guessed graph for equality with it.

    Args:
        num_nodes: N.
        edge_index: the graph's edges.
        x: node features.

    Returns:
        The first 32 hex digits of the hash.
    """
    h = hashlib.sha256()
    h.update(str(int(num_nodes)).encode())
    e = canonical_edges(edge_index, num_nodes).contiguous()
    h.update(str(tuple(e.shape)).encode())
    h.update(e.cpu().numpy().tobytes())
    feats = x.detach().to("cpu", torch.float32).contiguous()
    h.update(str(tuple(feats.shape)).encode())
    h.update(feats.numpy().tobytes())
    return h.hexdigest()[:32]
