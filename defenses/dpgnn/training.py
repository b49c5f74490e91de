r"""DP-GNN's training (Algorithms 4–5): per-subgraph clipping by ghost norms over a batch's
disjoint union, the noisy sum, and the DP-Adam / DP-SGD loop; plus the reference
implementations (vmapped per-subgraph gradients) the tests compare against, and the paper
protocol's percentile clipping thresholds.

One step draws the batch of :func:`~defenses.dpgnn.mechanism.sample_slots` (m slots of
:math:`\max(n, \hat n)`), sums every subgraph's gradient clipped to C (per clipping group),
adds :math:`\mathcal N(0, \sigma^2 I)` (σ = z·C, the noise *standard deviation*) and updates
with :math:`\Theta \leftarrow \Theta - \frac{\eta}{m}\tilde u_t` (SGD) or Adam on
:math:`\tilde u_t / m`; m is the plan's public batch size, never the number of subgraphs the
batch happened to hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from defenses.dpgnn.batches import FlatBatch, flat_batch, padded_gram
from defenses.dpgnn.canaries import NodeOccurrences
from defenses.dpgnn.mechanism import SubgraphIndex, sample_slots
from defenses.dpgnn.model import DPGCNNet
from dpaudit.nn import SparseFeatures
from dpaudit.nn import features as sparse_features
from dpaudit.progress import steps as progress_steps
from dpaudit.training.dpsgd import DiracCanaries, canaries_for
from dpaudit.training.noise import NoiseSource, noise_source

# --------------------------------------------------------------------------- reference (materialised)


def _thresholds(clip_norm: float | list[float], groups: list[list[str]]) -> list[float]:
    if isinstance(clip_norm, (int, float)):
        return [float(clip_norm)] * len(groups)
    if len(clip_norm) != len(groups):
        raise ValueError("one clipping threshold per group is needed")
    return [float(c) for c in clip_norm]


def per_subgraph_gradients(
    module: DPGCNNet, params: dict[str, torch.Tensor], features, adjacency, labels
) -> dict[str, torch.Tensor]:
    """One gradient per subgraph (vmap over padded subgraphs, the reference for the ghost norms).

    Shapes: ``features [B, L, F]``, ``adjacency [B, L, L]``, ``labels [B]`` →
    ``{name: [B, *param.shape]}``.

    Args:
        module: the network.
        params: parameter name → tensor (detached), for ``functional_call``.
        features: padded subgraph features (:func:`~defenses.dpgnn.batches.pad_batch`).
        adjacency: padded row-normalised adjacencies.
        labels: the roots' labels.

    Returns:
        Parameter name → per-subgraph gradients.
    """

    def loss(p, x, a, y):
        logits = functional_call(module, p, (x, a), {"dense": True})
        return F.cross_entropy(logits.unsqueeze(0), y.unsqueeze(0))

    return vmap(grad(loss), in_dims=(None, 0, 0, 0))(params, features, adjacency, labels)


def clipped_sum(
    grads: dict[str, torch.Tensor], groups: list[list[str]], clip_norm: float | list[float]
) -> dict[str, torch.Tensor]:
    """:math:`\\sum_s \\mathrm{Clip}_C(g_s)` from materialised per-subgraph gradients (reference
    implementation; training uses :func:`clipped_gradient_sum`). ``clip_norm``: one threshold,
    or one per group.

    Args:
        grads: parameter name → per-subgraph gradients (leading dimension B).
        groups: parameter names clipped together (:func:`~defenses.dpgnn.model.clip_groups`).
        clip_norm: one threshold, or one per group.

    Returns:
        Parameter name → the clipped sum.

    Raises:
        ValueError: a threshold list whose length is not the number of groups.
    """
    out = {}
    for group, threshold in zip(groups, _thresholds(clip_norm, groups)):
        sq = sum(grads[n].flatten(1).pow(2).sum(1) for n in group)
        factor = torch.clamp(threshold / (sq.sqrt() + 1e-12), max=1.0)
        for n in group:
            g = grads[n]
            out[n] = (g * factor.view(-1, *([1] * (g.dim() - 1)))).sum(0)
    return out


# --------------------------------------------------------------------------- ghost norms

FIRST_LAYER = "encoder.0"
FIRST_WEIGHT, FIRST_BIAS = FIRST_LAYER + ".weight", FIRST_LAYER + ".bias"
# Sparse first layer: one product over all nodes, gathered, once the batch rows hold ≥ this share of
# X's stored values (the rows' own sub-matrix and its transpose cost ~8× as much per stored value).
FULL_PRODUCT_SHARE = 1 / 8


@dataclass
class _LinearRecord:
    """One linear layer of a flat forward: its input ``a`` (dense or SparseFeatures), the
    gradient of the batch loss w.r.t. its output ``delta`` [n, out], ``owner`` [n], the
    subgraph of every output row (``None``: row s belongs to subgraph s), and ``rows`` [n],
    the row of ``a`` each output row reads (``None``: row i reads row i)."""

    name: str
    a: object
    delta: torch.Tensor | None
    owner: torch.Tensor | None
    rows: torch.Tensor | None = None


def _first_layer(x, node_ids: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    r"""The first layer's pre-activation :math:`x_v W^\top + b` on every batch row, and its
    record's ``(a, rows)``. Sparse x: when the rows' stored values are a large share of X's,
    one product over all nodes gathered by ``node_ids`` (no per-batch sparse bookkeeping);
    otherwise the rows' own sub-matrix.

    Shapes: ``x [num_nodes, F]``, ``node_ids [R]`` → pre-activation ``[R, latent]``.
    """
    if isinstance(x, SparseFeatures):
        row_nnz = int((x.crow[1:] - x.crow[:-1])[node_ids].sum())
        if row_nnz >= FULL_PRODUCT_SHARE * x.nnz:
            return x.linear(weight).index_select(0, node_ids) + bias, x, node_ids
        rows = x.rows(node_ids)
        return rows.linear(weight) + bias, rows, None
    rows = x.index_select(0, node_ids)
    return rows @ weight.T + bias, rows, None


def _flat_forward(module: DPGCNNet, params: dict[str, torch.Tensor], x, batch: FlatBatch):
    """:meth:`DPGCNNet.forward` over the disjoint union of the batch's subgraphs, with every
    linear layer's (input, pre-activation) recorded. Node-wise layers (encoder, GCN layers)
    see all R rows; the decoder sees the B roots only. Returns (logits, records,
    pre-activations), the latter with ``requires_grad`` so that one backward gives every δ.

    Shapes: ``x [num_nodes, F]`` → logits ``[B, C]``.
    """
    act = module.act
    records, outputs = [], []

    def record(name, a, owner, z, rows=None):
        if not outputs and not z.requires_grad:
            z.requires_grad_(True)  # detached parameters: δ's are taken w.r.t. the outputs
        records.append(_LinearRecord(name, a, None, owner, rows))
        outputs.append(z)
        return z

    def linear(name, a, owner):
        return record(name, a, owner, a @ params[name + ".weight"].T + params[name + ".bias"])

    z, a, rows = _first_layer(x, batch.node_ids, params[FIRST_WEIGHT], params[FIRST_BIAS])
    h = act(record(FIRST_LAYER, a, batch.owner, z, rows))
    for i in range(1, len(module.encoder)):
        h = act(linear(f"encoder.{i}", h, batch.owner))
    for j in range(len(module.convs)):
        aggregated = module.mean_aggregate(h, batch.edge_index)
        h = act(linear(f"convs.{j}", aggregated, batch.owner))
        if module.residual:
            h = h + aggregated
    h = h[batch.roots]
    for k in range(len(module.decoder_hidden)):
        h = act(linear(f"decoder_hidden.{k}", h, None))
    logits = linear("out", h, None)
    return logits, records, outputs


def _padded(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``t``'s rows ``rows`` [n, P] as [n, P, d]; index ``t.size(0)`` gives a zero row."""
    n, width = rows.shape
    return torch.cat([t, t.new_zeros(1, t.size(1))]).index_select(0, rows.reshape(-1)).view(n, width, -1)


def _weight_sq_norms(record: _LinearRecord, batch: FlatBatch) -> torch.Tensor:
    r""":math:`\lVert\sum_{i\in s} \delta_i a_i^\top\rVert_F^2` for every subgraph s, [B].

    Root-only layers: one row per subgraph, :math:`\lVert\delta_s\rVert^2\lVert a_s\rVert^2`.
    Node-wise layers, per size class of subgraphs padded to P rows (``batch.blocks``), whichever
    is cheaper of the ghost-norm identity
    :math:`\lVert A_s^\top\Delta_s\rVert_F^2 = \langle A_sA_s^\top, \Delta_s\Delta_s^\top\rangle_F`
    — O(P²·(in + out)) per subgraph, batched products — and the per-subgraph gradient
    :math:`A_s^\top\Delta_s` itself, O(P·in·out) (the choice of "mixed ghost clipping", Bu et al.
    2022). The first layer's input Gram :math:`A_sA_s^\top` is fixed for a fit and comes
    precomputed with the batch (``block.gram``); padding rows are zero in A and Δ.
    """
    a, delta, owner = record.a, record.delta, record.owner
    if owner is None:
        return delta.pow(2).sum(1) * a.detach().pow(2).sum(1)
    out = torch.zeros(batch.num_subgraphs, dtype=delta.dtype, device=delta.device)
    sparse = isinstance(a, SparseFeatures)
    in_dim, out_dim = a.size(1), delta.size(1)
    for block in batch.blocks:
        d = _padded(delta, block.rows)
        width = block.rows.size(1)
        if record.name == FIRST_LAYER and block.gram is not None:
            value = (block.gram * (d @ d.mT)).sum((1, 2))
        elif sparse or record.rows is not None:
            value = (padded_gram(a, _input_rows(record, block.rows, batch.num_rows)) * (d @ d.mT)).sum((1, 2))
        elif width * (in_dim + out_dim) <= in_dim * out_dim:
            padded = _padded(a.detach(), block.rows)
            value = ((padded @ padded.mT) * (d @ d.mT)).sum((1, 2))
        else:
            value = (_padded(a.detach(), block.rows).mT @ d).pow(2).sum((1, 2))
        out[block.members] = value
    return out.clamp(min=0.0)


def _input_rows(record: _LinearRecord, rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Block ``rows`` (flat batch rows, ``num_rows`` = padding) as rows of ``record.a``."""
    if record.rows is None:
        return torch.where(rows < num_rows, rows, record.a.size(0))
    lookup = torch.cat([record.rows, record.rows.new_full((1,), record.a.size(0))])
    return lookup[rows]


def subgraph_gradient_terms(
    module: DPGCNNet, params: dict[str, torch.Tensor], x, batch: FlatBatch, labels: torch.Tensor
) -> tuple[list[_LinearRecord], dict[str, torch.Tensor]]:
    r"""Everything per-subgraph clipping needs, without materialising a per-subgraph gradient.

    Every parameter of :class:`DPGCNNet` belongs to a linear layer applied row-wise, so
    subgraph s's gradient of a weight is :math:`\sum_{i\in s}\delta_i a_i^\top` and of a bias
    :math:`\sum_{i\in s}\delta_i`, where :math:`a_i` is the layer's input on row i and
    :math:`\delta_i = \partial\ell_s/\partial z_i` its output gradient — rows of different
    subgraphs never interact, so one backward of :math:`\sum_s\ell_s` yields every
    :math:`\delta_i` of its own subgraph's loss (the "ghost clipping" of Li et al. 2022 /
    Opacus, with examples spanning several rows). Returns the layer records (δ filled in) and
    the squared norm of every parameter tensor's per-subgraph gradient, ``{name: [B]}``.

    Shapes: ``x [num_nodes, F]``, ``labels [B]`` (the roots' labels).

    Args:
        module: the network.
        params: parameter name → tensor (detached).
        x: node features, dense or sparse.
        batch: the flat batch of subgraphs.
        labels: the roots' labels.
    """
    logits, records, outputs = _flat_forward(module, params, x, batch)
    loss = F.cross_entropy(logits, labels, reduction="sum")
    deltas = torch.autograd.grad(loss, outputs)
    sq = {}
    with torch.no_grad():
        for record, delta in zip(records, deltas):
            record.delta = delta
            sq[record.name + ".weight"] = _weight_sq_norms(record, batch)
            if record.owner is None:
                sq[record.name + ".bias"] = delta.pow(2).sum(1)
            else:
                per_subgraph = torch.zeros(batch.num_subgraphs, delta.size(1), dtype=delta.dtype, device=delta.device)
                sq[record.name + ".bias"] = per_subgraph.index_add_(0, record.owner, delta).pow(2).sum(1)
    return records, sq


def clipped_gradient_sum(
    module: DPGCNNet,
    params: dict[str, torch.Tensor],
    x,
    batch: FlatBatch,
    labels: torch.Tensor,
    groups: list[list[str]],
    clip_norm: float | list[float],
) -> dict[str, torch.Tensor]:
    r""":math:`\sum_s \mathrm{Clip}_{C_g}(\nabla_{\Theta_g} \ell_s)` for every clipping group g
    (Algorithm 4's clipped sum), from :func:`subgraph_gradient_terms`: with clip factors
    :math:`c_{g,s} = \min(1, C_g / \lVert\nabla_{\Theta_g}\ell_s\rVert)`, a weight's clipped
    sum is :math:`\sum_i c_{g,s(i)}\,\delta_i a_i^\top = (c \odot \Delta)^\top A` — one (sparse or
    dense) matrix product per layer. Equal, to float tolerance, to :func:`clipped_sum` of
    :func:`per_subgraph_gradients` on the padded batch (checked in the tests).

    Shapes: ``x [num_nodes, F]`` (dense or :class:`~dpaudit.nn.SparseFeatures`), ``labels
    [B]`` (the roots' labels in batch order) → ``{name: param.shape}``.

    Args:
        module: the network.
        params: parameter name → tensor (detached).
        x: node features, dense or sparse.
        batch: the flat batch of subgraphs.
        labels: the roots' labels.
        groups: parameter names clipped together.
        clip_norm: one threshold, or one per group.

    Returns:
        Parameter name → the clipped gradient sum.
    """
    records, sq = subgraph_gradient_terms(module, params, x, batch, labels)
    factor_of = {}
    for group, threshold in zip(groups, _thresholds(clip_norm, groups)):
        norm = sum(sq[n] for n in group).sqrt()
        factor = torch.clamp(threshold / (norm + 1e-12), max=1.0)
        factor_of.update({n: factor for n in group})
    out = {}
    with torch.no_grad():
        for record in records:
            weight, bias = record.name + ".weight", record.name + ".bias"
            weight_factor, bias_factor = factor_of[weight], factor_of[bias]
            if record.owner is not None:  # node-wise layer: every row takes its subgraph's factor
                weight_factor, bias_factor = weight_factor[record.owner], bias_factor[record.owner]
            scaled = record.delta * weight_factor.unsqueeze(1)
            if record.rows is not None:  # rows of a shared input: sum each input row's terms first
                scaled = scaled.new_zeros(record.a.size(0), scaled.size(1)).index_add_(0, record.rows, scaled)
            if isinstance(record.a, SparseFeatures):
                out[weight] = record.a.t_matmul(scaled).T.contiguous()
            else:
                out[weight] = scaled.T @ record.a.detach()
            out[bias] = (record.delta * bias_factor.unsqueeze(1)).sum(0)
    return out


# --------------------------------------------------------------------------- protocol=paper thresholds


def percentile_thresholds(
    module: DPGCNNet,
    index: SubgraphIndex,
    x: torch.Tensor,
    y: torch.Tensor,
    percentile: float,
    max_subgraphs: int,
    generator: torch.Generator,
    microbatch: int = 256,
) -> dict[str, float]:
    """The reference's clipping rule (``protocol=paper`` only; reads private gradients and is
    NOT accounted): for every parameter tensor, the ``percentile``-th percentile of the
    per-subgraph gradient norms at the current (initial) parameters over a uniform sample of
    at most ``max_subgraphs`` training subgraphs.

    Shapes: ``x [num_nodes, F]``, ``y [num_nodes]`` → one threshold per parameter tensor.

    Args:
        module: the network at its initial parameters.
        index: the training subgraphs.
        x: node features.
        y: node labels.
        percentile: the percentile in (0, 100].
        max_subgraphs: at most this many subgraphs sampled.
        generator: the sample's generator.
        microbatch: subgraphs per gradient chunk.

    Returns:
        Parameter name → threshold (at least 1e-8).
    """
    device = x.device
    x = sparse_features(x.to(torch.float32))
    params = {k: v.detach() for k, v in module.named_parameters()}
    chosen = torch.randperm(index.num_subgraphs, generator=generator)[: min(max_subgraphs, index.num_subgraphs)]
    norms: dict[str, list[torch.Tensor]] = {k: [] for k in params}
    grams = index.input_grams(x)
    for chunk in chosen.split(microbatch):
        batch = flat_batch(index, chunk, device, grams)
        labels = y.to(device)[batch.node_ids[batch.roots]]
        _, sq = subgraph_gradient_terms(module, params, x, batch, labels)
        for k, v in sq.items():
            norms[k].append(v.sqrt().cpu())
    out = {}
    for k, parts in norms.items():
        value = float(np.percentile(torch.cat(parts).double().numpy(), percentile))
        out[k] = max(value, 1e-8)  # a tensor whose gradients are all zero still gets a positive threshold
    return out


# --------------------------------------------------------------------------- the loop


def train_dp(
    module: DPGCNNet,
    index: SubgraphIndex,
    x,
    y: torch.Tensor,
    input_grams: list[torch.Tensor],
    groups: list[list[str]],
    thresholds: float | list[float],
    noise_std: float,
    *,
    population: int,
    batch_size: int,
    steps: int,
    occurrences: int,
    optimizer: str,
    lr: float,
    microbatch: int,
    seed: int,
    device: torch.device,
    desc: str = "dpgnn",
    noise_from: NoiseSource | None = None,
) -> None:
    """Algorithm 4 (``optimizer="sgd"``) / 5 (``"adam"``) for ``steps`` steps, in place.

    Each step: the subgraphs of :func:`~defenses.dpgnn.mechanism.sample_slots` (``batch_size``
    slots of ``max(n, population)``), their clipped gradients summed by
    :func:`clipped_gradient_sum` in microbatches, Gaussian noise of std ``noise_std`` on every
    coordinate (drawn on the CPU from its own generator, so CUDA runs draw the same noise),
    divided by the public ``batch_size``. Batches and noise come from ``noise_from``
    (:mod:`dpaudit.training.noise`; ``None``: :func:`~dpaudit.training.noise.noise_source`'s default), generators seeded ``seed + 1`` and
    ``seed + 2`` only in its ``seeded`` mode. ``occurrences``: Lemma 1's N(K, r), the most subgraphs one
    node occurs in (what a canary node owns).

    Inside :func:`dpaudit.training.dpsgd.inserting_canaries`, a noisy run also trains on the white-box
    Dirac canaries, each a node of Theorem 1's relation (:mod:`defenses.dpgnn.canaries`): they
    are added to the clipped sum before the noise and observed after it; their draws come from
    a generator of their own, so the batches and the noise are those of the run without them.

    Shapes: ``x [num_nodes, F]``, ``y [num_nodes]``; ``input_grams`` from
    :meth:`~defenses.dpgnn.mechanism.SubgraphIndex.input_grams` of ``x``.

    Args:
        module: the network, trained in place (left in eval mode).
        index: the training subgraphs.
        x: node features, dense or sparse.
        y: node labels.
        input_grams: the first layer's per-size-class input Grams.
        groups: parameter names clipped together.
        thresholds: one clipping threshold, or one per group.
        noise_std: Gaussian noise std on the clipped sum (0: none).
        population: N, the declared training-set size.
        batch_size: m, slots drawn per step (and the sum's divisor).
        steps: T.
        occurrences: N(K, r).
        optimizer: ``adam`` or ``sgd``.
        lr: learning rate.
        microbatch: subgraphs per gradient chunk.
        seed: seeds the batch (``seed + 1``) and noise (``seed + 2``) generators.
        device: where training runs.
        desc: progress-bar and canary label.
    """
    y = y.to(device)
    params = dict(module.named_parameters())
    canaries = canaries_for(desc) if noise_std > 0 else None
    if canaries is not None:
        _attach_canaries(canaries, module, index, x, thresholds, noise_std, population, batch_size, occurrences, desc)
    # fused: one kernel per step for all tensors (the same update, 5× faster on CPU than the loop)
    if optimizer == "adam":
        opt = torch.optim.Adam(params.values(), lr=lr, fused=True)
    else:
        opt = torch.optim.SGD(params.values(), lr=lr, fused=True)  # plain SGD, Algorithm 4
    # the sampled batches and the Gaussian noise (CPU: CUDA draws the same): the privacy noise source's
    noise_from = noise_source() if noise_from is None else noise_from
    batches = noise_from.torch(seed + 1)
    noise = noise_from.torch(seed + 2)
    module.train()
    for _ in progress_steps(steps, desc):
        batch = sample_slots(index.num_subgraphs, population, batch_size, batches)
        detached = {k: v.detach() for k, v in params.items()}
        # A batch of empty slots only (a training set far below the declared size) adds noise alone.
        total = {k: torch.zeros_like(p) for k, p in params.items()}
        for chunk in batch.split(microbatch):
            flat = flat_batch(index, chunk, device, input_grams)
            labels = y[flat.node_ids[flat.roots]]
            summed = clipped_gradient_sum(module, detached, x, flat, labels, groups, thresholds)
            for k, v in summed.items():
                total[k].add_(v)
        if canaries is not None:
            by_parameter = {params[k]: v for k, v in total.items()}
            canaries.insert(by_parameter)
            total = {k: by_parameter[p] for k, p in params.items()}
        for k, p in params.items():
            noisy = total[k]
            if noise_std > 0:
                noisy.add_(torch.normal(0.0, noise_std, size=tuple(p.shape), generator=noise).to(device))
            p.grad = noisy.div_(batch_size)
        if canaries is not None:
            canaries.observe(batch_size)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if canaries is not None:
        canaries.finish()
    module.eval()


def _attach_canaries(
    canaries: DiracCanaries,
    module: DPGCNNet,
    index: SubgraphIndex,
    x,
    thresholds,
    noise_std: float,
    population: int,
    batch_size: int,
    occurrences: int,
    desc: str,
) -> None:
    """Start the canaries on this run: designed on the rows the subgraphs read (a node occurring in
    several subgraphs counts each time), each owning Theorem 1's min(N(K, r), N) terms, with norm
    the smallest clipping threshold (a Dirac canary within every group's bound)."""
    rows = index.node_ids.to(x.device)
    inputs = x.rows(rows) if isinstance(x, SparseFeatures) else x.index_select(0, rows)
    clip = float(thresholds) if isinstance(thresholds, (int, float)) else min(thresholds)
    law = NodeOccurrences(population, batch_size, min(occurrences, population))
    canaries.attach(
        module,
        list(module.parameters()),
        inputs,
        sample_rate=law.sample_rate,
        noise_multiplier=noise_std / clip,
        max_grad_norm=clip,
        label=desc,
        law=law,
    )
