"""Algorithm 2's training loop: per-row gradients of the Eq. 1 loss (closed form for
:class:`~defenses.dpar.model.DPARNet`), per-row clipping, dropout masks, Poisson batches, noise, Adam."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from defenses.dpar.mechanism import poisson_sample
from defenses.dpar.model import DPARNet
from dpaudit.progress import steps as progress_steps
from dpaudit.runtime import rand_on, randn_on
from dpaudit.training.dpsgd import CanaryLaw, canaries_for


def _row_loss(params, buffers, module, features, weights, label):
    outputs = functional_call(module, (params, buffers), (features,))  # [K, C]
    logits = (weights.unsqueeze(1) * outputs).sum(0)
    return F.cross_entropy(logits.unsqueeze(0), label.unsqueeze(0))


def per_row_gradients(module: torch.nn.Module, x: torch.Tensor, columns, weights, labels) -> dict[str, torch.Tensor]:
    """Per-row gradients of the Eq. 1 loss (module in eval mode: no dropout), by
    ``torch.func.vmap(grad(...))`` — the reference the closed form is tested against.

    ``x`` holds the features indexed by ``columns`` [b, K] (−1 = empty slot, weight 0).

    Args:
        module: f_θ.
        x: node features.
        columns: feature rows of each training row (−1 empty).
        weights: Π's weights of those entries.
        labels: each row's label.

    Returns:
        Parameter name → per-row gradient.

    Shapes:
        x: [n, F]
        columns: [b, K]
        weights: [b, K]
        labels: [b]
        return: each [b, *parameter shape]
    """
    params = {k: v.detach() for k, v in module.named_parameters()}
    buffers = {k: v.detach() for k, v in module.named_buffers()}
    features = x[columns.clamp(min=0)]  # [b, K, F]
    fn = vmap(grad(_row_loss), in_dims=(None, None, None, 0, 0, 0))
    return fn(params, buffers, module, features, weights, labels)


def clip_and_sum(grads: dict[str, torch.Tensor], max_norm: float | None) -> dict[str, torch.Tensor]:
    """Clip every per-row gradient to ℓ₂ norm ``max_norm`` (all parameters jointly) and sum.

    Args:
        grads: parameter name → per-row gradients (leading dimension b).
        max_norm: the clip; ``None`` sums without clipping.

    Returns:
        Parameter name → the clipped sum.
    """
    if max_norm is None:
        return {k: g.sum(0) for k, g in grads.items()}
    norms = torch.sqrt(sum(g.reshape(g.size(0), -1).pow(2).sum(1) for g in grads.values()))
    factor = torch.clamp(max_norm / (norms + 1e-12), max=1.0)
    return {k: (g * factor.view(-1, *([1] * (g.dim() - 1)))).sum(0) for k, g in grads.items()}


def dropout_masks(
    shape_in: tuple[int, ...], shape_hidden: tuple[int, ...], p: float, generator: torch.Generator, device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Inverted-dropout masks (values 0 or 1/(1−p)) for the input [b, K, F] and hidden [b, K, H]
    activations of every (row, slot): drawn from ``generator``, independent of the data.

    Args:
        shape_in: [b, K, F], the input activations' shape.
        shape_hidden: [b, K, H], the hidden activations' shape.
        p: dropout rate (≤ 0: no masks).
        generator: the masks' generator.
        device: where the masks live.

    Returns:
        ``(input mask, hidden mask)``, or ``None`` when ``p <= 0``.
    """
    if p <= 0:
        return None
    keep = 1.0 - p
    m_in = (rand_on(shape_in, generator, device) < keep).float() / keep
    m_h = (rand_on(shape_hidden, generator, device) < keep).float() / keep
    return m_in, m_h


def clipped_gradient_sum(
    module: DPARNet,
    x: torch.Tensor,
    columns: torch.Tensor,
    weights: torch.Tensor,
    labels: torch.Tensor,
    max_norm: float | None,
    masks: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    r"""Σ over rows of the per-row gradient of the Eq. 1 loss clipped to ``max_norm`` — closed form
    for :class:`DPARNet`, without materialising per-row weight gradients.

    With x̃_bk = x_bk ⊙ m^in_bk, a_bk = W₁x̃_bk (+ b₁), h_bk = relu(a_bk) ⊙ m^h_bk,
    :math:`\delta_b = \mathrm{softmax}(\sum_k w_{bk}(W_2h_{bk} + b_2)) - e_{y_b}`, ĥ_b = Σ_k w_bk h_bk and
    :math:`g_{bk} = w_{bk}(W_2^\top\delta_b)\odot m^h_{bk}\odot 1[a_{bk}>0]`: ∇W₂ = δ_b ĥ_bᵀ,
    ∇b₂ = δ_b Σ_k w_bk, ∇W₁ = Σ_k g_bk x̃_bkᵀ, ∇b₁ = Σ_k g_bk; the squared norm of ∇W₁ is
    :math:`\sum_{k,k'} (g_{bk}\cdot g_{bk'})(\tilde x_{bk}\cdot\tilde x_{bk'})` ("ghost" norm).

    Shapes: x [n, F]; columns, weights [b, K]; labels [b]; masks ([b, K, F], [b, K, H]) or None.

    Args:
        module: f_θ.
        x: node features.
        columns: feature rows of each training row (−1 empty).
        weights: Π's weights of those entries.
        labels: each row's label.
        max_norm: the clip C; ``None`` sums without clipping.
        masks: dropout masks from :func:`dropout_masks`, or ``None``.

    Returns:
        Parameter name → the clipped gradient sum.
    """
    lin1, lin2 = module.lin1, module.lin2
    feats = x[columns.clamp(min=0)]  # [b, K, F]
    with torch.no_grad():
        if masks is not None:
            feats = feats * masks[0]
        pre = feats @ lin1.weight.T
        if lin1.bias is not None:
            pre = pre + lin1.bias
        hidden = pre.clamp(min=0)
        gate = (pre > 0).to(pre.dtype)
        if masks is not None:
            hidden, gate = hidden * masks[1], gate * masks[1]
        out = hidden @ lin2.weight.T
        if lin2.bias is not None:
            out = out + lin2.bias
        logits = torch.einsum("bk,bkc->bc", weights, out)
        delta = torch.softmax(logits, dim=1)
        delta[torch.arange(len(labels), device=delta.device), labels] -= 1.0
        h_agg = torch.einsum("bk,bkh->bh", weights, hidden)
        w_sum = weights.sum(1)
        g = weights.unsqueeze(2) * (delta @ lin2.weight).unsqueeze(1) * gate  # [b, K, H]
        if max_norm is None:
            factor = torch.ones_like(w_sum)
        else:
            sq = delta.pow(2).sum(1) * h_agg.pow(2).sum(1)
            if lin2.bias is not None:
                sq = sq + delta.pow(2).sum(1) * w_sum.pow(2)
            sq = sq + torch.einsum("bkh,bjh->bkj", g, g).mul(torch.einsum("bkf,bjf->bkj", feats, feats)).sum((1, 2))
            if lin1.bias is not None:
                sq = sq + g.sum(1).pow(2).sum(1)
            factor = torch.clamp(max_norm / (sq.clamp(min=0).sqrt() + 1e-12), max=1.0)
        scaled_delta, scaled_g = delta * factor.unsqueeze(1), g * factor.view(-1, 1, 1)
        grads = {"lin1.weight": torch.einsum("bkh,bkf->hf", scaled_g, feats), "lin2.weight": scaled_delta.T @ h_agg}
        if lin1.bias is not None:
            grads["lin1.bias"] = scaled_g.sum((0, 1))
        if lin2.bias is not None:
            grads["lin2.bias"] = (scaled_delta * w_sum.unsqueeze(1)).sum(0)
        return grads


def _two_rate_batch(
    rows: int, rate: float, pair_start: int | None, pair_rate: float | None, generator: torch.Generator
) -> torch.Tensor:
    """Poisson batch: rows below ``pair_start`` at ``rate``, the rest at ``pair_rate``."""
    if pair_start is None or pair_start >= rows:
        return poisson_sample(rows, rate, generator)
    head = poisson_sample(pair_start, rate, generator)
    tail = poisson_sample(rows - pair_start, pair_rate, generator) + pair_start
    return torch.cat([head, tail])


def train_rows(
    module: DPARNet,
    x: torch.Tensor,
    columns: torch.Tensor,
    weights: torch.Tensor,
    labels: torch.Tensor,
    *,
    noise_std: float,
    max_grad_norm: float | None,
    sample_rate: float,
    expected_batch: float,
    steps: int,
    lr: float,
    generator: torch.Generator,
    noise_generator: torch.Generator,
    progress: str | None = None,
    pair_start: int | None = None,
    pair_rate: float | None = None,
    canary_law: CanaryLaw | None = None,
) -> int:
    """Algorithm 2, lines 5–15, with Adam: Poisson batches of rows, dropout masks, per-row
    clipping, noise std ``noise_std`` on the sum, division by ``expected_batch``.

    Rows from ``pair_start`` on (the ``sound`` pair terms) are Poisson-sampled at ``pair_rate``,
    the others at ``sample_rate``: every row still draws its own coin, as the accountant assumes.

    A private run takes every one of ``steps`` steps, noise-only when the batch is empty (skipping
    it would reveal that). Returns the number of steps taken.

    Inside :func:`dpaudit.training.dpsgd.inserting_canaries`, a noisy run with a ``canary_law`` (``sound``:
    :class:`defenses.dpar.canaries.NodeTerms`) also trains on the white-box Dirac canaries: added
    to the clipped sum before the noise, observed after it, on a generator of their own.

    Args:
        module: f_θ, trained in place (left in eval mode).
        x: node features.
        columns: feature rows of each training row (−1 empty).
        weights: Π's weights.
        labels: each row's label.
        noise_std: Gaussian noise std on the clipped sum (0: none).
        max_grad_norm: the clip C; ``None`` for a non-private run.
        sample_rate: q, the Poisson rate of rows before ``pair_start``.
        expected_batch: the divisor of the noisy sum.
        steps: optimiser steps.
        lr: Adam's learning rate.
        generator: the batches' generator.
        noise_generator: the noise's and dropout masks' generator.
        progress: progress-bar label, or ``None``.
        pair_start: first pair-term row, or ``None`` for none.
        pair_rate: q_p, the pair terms' Poisson rate.
        canary_law: the canaries' inclusion law, or ``None``.

    Shapes:
        x: [n, F]
        columns: [R, K]
        weights: [R, K]
        labels: [R]
    """
    device = x.device
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    private = max_grad_norm is not None
    hidden = module.lin1.out_features
    params = dict(module.named_parameters())
    canaries = canaries_for(progress) if noise_std > 0 and private and canary_law is not None else None
    if canaries is not None:

        def real_clipped_sum() -> dict[torch.nn.Parameter, torch.Tensor]:
            # every row at the current iterate, evaluation mode (no dropout draw consumed)
            was_training = module.training
            module.eval()
            total = clipped_gradient_sum(module, x, columns, weights, labels, max_grad_norm)
            module.train(was_training)
            return {params[name]: g for name, g in total.items()}

        canaries.attach(
            module,
            list(module.parameters()),
            x,
            sample_rate=sample_rate,
            noise_multiplier=noise_std / max_grad_norm,
            max_grad_norm=max_grad_norm,
            label=progress,
            real_clipped_sum=real_clipped_sum,
            law=canary_law,
        )
    for _ in progress_steps(steps, progress, disable=None if progress else True):
        batch = _two_rate_batch(len(labels), sample_rate, pair_start, pair_rate, generator).to(device)
        if batch.numel() == 0 and not private:
            continue
        if batch.numel():
            b, k = batch.numel(), columns.size(1)
            masks = dropout_masks((b, k, x.size(1)), (b, k, hidden), module.p, noise_generator, device)
            summed = clipped_gradient_sum(
                module, x, columns[batch], weights[batch], labels[batch], max_grad_norm, masks
            )
        else:
            summed = {k: torch.zeros_like(p) for k, p in module.named_parameters()}
        if canaries is not None:
            by_parameter = {params[name]: g for name, g in summed.items()}
            canaries.insert(by_parameter)
            summed = {name: by_parameter[p] for name, p in params.items()}
        optimizer.zero_grad(set_to_none=False)
        for name, param in params.items():
            g = summed[name]
            if noise_std > 0:
                g = g + noise_std * randn_on(g.shape, noise_generator, device, g.dtype)
            param.grad = g / expected_batch
        if canaries is not None:
            canaries.observe(expected_batch)
        optimizer.step()
    if canaries is not None:
        canaries.finish()
    module.eval()
    return steps
