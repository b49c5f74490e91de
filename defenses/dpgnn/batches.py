r"""Batch layouts of DP-GNN's training subgraphs (computation only, no privacy decision).

* :func:`flat_batch` — a batch as one disjoint union of its subgraphs (rows and messages), its
  subgraphs grouped by size class and padded to the class's cap for ghost-norm clipping
  (:mod:`defenses.dpgnn.training`);
* :func:`pad_batch` — dense, padded per-subgraph tensors (features and the row-normalised
  adjacency :math:`(D + I)^{-1}(A + I)` of Appendix E), the reference layout for vmapped
  per-subgraph gradients;
* :func:`padded_gram` — per-subgraph Gram matrices of a layer's input rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dpaudit.nn import SparseFeatures, row_dots

if TYPE_CHECKING:
    from defenses.dpgnn.mechanism import SubgraphIndex


def padded_gram(a, rows: torch.Tensor) -> torch.Tensor:
    r""":math:`G_{b,i,j} = a_{rows_{bi}}\cdot a_{rows_{bj}}`, padding entries 0.

    Dense ``a``: one batched product; sparse (:class:`~dpaudit.nn.SparseFeatures`): the stored
    values matched pairwise by :func:`~dpaudit.nn.row_dots`.

    Args:
        a: row features, dense or sparse.
        rows: each subgraph's rows of ``a``, padded with ``a.size(0)``.

    Returns:
        The per-subgraph Gram matrices.

    Shapes:
        ``a [R, d]``, ``rows [n, P]`` (values in 0..R; ``R = a.size(0)`` marks padding) →
        ``[n, P, P]``.
    """
    n, width = rows.shape
    if not isinstance(a, SparseFeatures):
        padded = torch.cat([a.detach(), a.new_zeros(1, a.size(1))]).index_select(0, rows.reshape(-1))
        padded = padded.view(n, width, -1)
        return padded @ padded.mT
    first = rows.unsqueeze(2).expand(n, width, width)
    second = rows.unsqueeze(1).expand(n, width, width)
    upper = torch.ones(width, width, dtype=torch.bool, device=rows.device).triu()  # G is symmetric: i ≤ j only
    valid = (first < a.size(0)) & (second < a.size(0)) & upper
    out = torch.zeros(n, width, width, dtype=a.dtype, device=a.device)
    out[valid] = row_dots(a, first[valid], second[valid])
    return out + out.mT.tril(-1)


def _segments(sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For consecutive segments of ``sizes``: (segment of every element, position inside it)."""
    seg = torch.repeat_interleave(torch.arange(sizes.numel(), device=sizes.device), sizes)
    pos = torch.arange(int(sizes.sum()), device=sizes.device) - torch.repeat_interleave(
        torch.cumsum(sizes, 0) - sizes, sizes
    )
    return seg, pos


def pad_batch(index: SubgraphIndex, batch: torch.Tensor, x) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Padded tensors for the subgraphs ``batch`` (the reference layout for vmapped per-subgraph
    gradients; training uses :func:`flat_batch`). The root of each subgraph is at position 0;
    the adjacency's rows are :math:`(D + I)^{-1}(A + I)` restricted to the subgraph (padding
    rows and columns are zero).

    Args:
        index: the subgraph index.
        batch: subgraph ids.
        x: node features, dense or sparse.

    Returns:
        ``(features, adjacency, roots)``.

    Shapes:
        ``batch [B]``, ``x [num_nodes, F]`` → ``features [B, L, F]``, ``adjacency [B, L, L]``,
        ``roots [B]`` (global ids), L the largest subgraph of the batch.
    """
    device = x.device
    batch = batch.to(index.node_ptr.device)
    starts, ends = index.node_ptr[batch], index.node_ptr[batch + 1]
    sizes = ends - starts
    width = int(sizes.max())
    b, pos = _segments(sizes)
    global_ids = index.node_ids[starts[b] + pos]
    rows = x.rows(global_ids.to(device)).to_dense() if isinstance(x, SparseFeatures) else x[global_ids.to(device)]
    features = rows.new_zeros(batch.numel(), width, x.size(1))
    features[b.to(device), pos.to(device)] = rows

    e_starts, e_ends = index.edge_ptr[batch], index.edge_ptr[batch + 1]
    e_sizes = e_ends - e_starts
    eb, e_local = _segments(e_sizes)
    e_pos = e_starts[eb] + e_local
    adjacency = torch.zeros(batch.numel(), width, width, dtype=x.dtype, device=device)
    adjacency[b.to(device), pos.to(device), pos.to(device)] = 1.0  # self loops (A + I)
    adjacency.index_put_(
        (eb.to(device), index.edge_dst[e_pos].to(device), index.edge_src[e_pos].to(device)),
        torch.ones(e_pos.numel(), device=device, dtype=x.dtype),
        accumulate=True,
    )
    adjacency = adjacency / adjacency.sum(dim=2, keepdim=True).clamp(min=1.0)
    return features, adjacency, index.roots[batch].to(device)


@dataclass
class SizeClassBlock:
    """The subgraphs of one size class within a batch, padded to the class's cap P.

    Attributes:
        members: ``[n]`` the subgraphs' positions in the batch (0..B-1).
        rows: ``[n, P]`` each subgraph's rows in the flat batch, in subgraph order; the
            batch's row count R marks padding.
        gram: ``[n, P, P]`` the first layer's input Gram of each subgraph
            (:meth:`~defenses.dpgnn.mechanism.SubgraphIndex.input_grams`), or ``None``.
    """

    members: torch.Tensor
    rows: torch.Tensor
    gram: torch.Tensor | None = None


@dataclass
class FlatBatch:
    r"""A batch of subgraphs as one disjoint union (no padding): the R rows of all B subgraphs
    back to back, subgraph s owning rows ``ptr[s]:ptr[s+1]`` with its root first.

    Attributes:
        node_ids: ``[R]`` global id of every row.
        owner: ``[R]`` subgraph of every row (0..B-1).
        ptr: ``[B + 1]`` row offsets; ``ptr[:-1]`` are the roots' rows.
        edge_index: ``[2, E_b]`` the subgraphs' messages (src → dst) between rows; the
            aggregation :math:`(D+I)^{-1}(A+I)` over them is exactly the padded adjacency of
            :func:`pad_batch` restricted to real rows.
        blocks: the batch's subgraphs grouped by size class (:class:`SizeClassBlock`), for
            per-subgraph Grams of layers shared inside a subgraph (ghost norms).
    """

    node_ids: torch.Tensor
    owner: torch.Tensor
    ptr: torch.Tensor
    edge_index: torch.Tensor
    blocks: list[SizeClassBlock]

    @property
    def num_subgraphs(self) -> int:
        return int(self.ptr.numel() - 1)

    @property
    def num_rows(self) -> int:
        return int(self.node_ids.numel())

    @property
    def roots(self) -> torch.Tensor:
        return self.ptr[:-1]


def flat_batch(
    index: SubgraphIndex,
    batch: torch.Tensor,
    device: torch.device | str | None = None,
    grams: list[torch.Tensor] | None = None,
) -> FlatBatch:
    """The subgraphs ``batch`` as a :class:`FlatBatch` (built on the index's device, moved to
    ``device``); ``grams`` (:meth:`~defenses.dpgnn.mechanism.SubgraphIndex.input_grams`) fills
    every block's ``gram``.

    Shapes: ``batch [B]`` subgraph ids → R rows, E_b messages (see :class:`FlatBatch`).

    Args:
        index: the subgraph index.
        batch: subgraph ids.
        device: where the result lives (``None``: the index's device).
        grams: per-size-class input Grams, or ``None``.

    Returns:
        The flat batch.
    """
    batch = batch.to(index.node_ptr.device)
    starts, sizes = index.node_ptr[batch], index.node_ptr[batch + 1] - index.node_ptr[batch]
    ptr = torch.zeros(batch.numel() + 1, dtype=torch.long, device=sizes.device)
    ptr[1:] = torch.cumsum(sizes, 0)
    owner, pos = _segments(sizes)
    node_ids = index.node_ids[starts[owner] + pos]

    e_starts, e_sizes = index.edge_ptr[batch], index.edge_ptr[batch + 1] - index.edge_ptr[batch]
    e_owner, e_pos = _segments(e_sizes)
    take = e_starts[e_owner] + e_pos
    offset = ptr[e_owner]
    edge_index = torch.stack([index.edge_src[take] + offset, index.edge_dst[take] + offset])

    caps, class_of, slot = index.size_classes()
    of_batch = class_of[batch]
    order = torch.argsort(of_batch, stable=True)
    counts = torch.bincount(of_batch, minlength=len(caps)).tolist()
    num_rows = int(ptr[-1])
    blocks = []
    for c, members in enumerate(order.split(counts)):
        if members.numel() == 0:
            continue
        k = torch.arange(caps[c], device=members.device)
        rows = torch.where(k < sizes[members].unsqueeze(1), ptr[members].unsqueeze(1) + k, num_rows)
        gram = None if grams is None else grams[c].index_select(0, slot[batch[members]].to(grams[c].device))
        blocks.append(SizeClassBlock(members, rows, gram))
    out = FlatBatch(node_ids, owner, ptr, edge_index, blocks)
    if device is not None:
        out = FlatBatch(
            *(t.to(device) for t in (node_ids, owner, ptr, edge_index)),
            [
                SizeClassBlock(b.members.to(device), b.rows.to(device), None if b.gram is None else b.gram.to(device))
                for b in blocks
            ],
        )
    return out
