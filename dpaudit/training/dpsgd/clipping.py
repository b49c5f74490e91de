"""Clipped per-example gradient sums: :class:`GhostClipper` (ghost norms) and
:class:`PerSampleClipper` (opacus' per-example gradients), chosen by :func:`make_clipper`.

How the per-example norms are obtained does not change the mechanism (``clipping``):

* ``"ghost"`` (default) — ghost clipping / book-keeping (Goodfellow 2015; Li et al. 2022; Bu
  et al. 2023): for a linear layer z_i = W a_i + b applied once to example i's own input
  a_i ∈ ℝ^d, the per-example gradient is ∇W_i = g_i a_iᵀ with g_i = ∂L_i/∂z_i, so
  ‖∇W_i‖²_F = ‖g_i‖²·‖a_i‖² and ‖∇b_i‖² = ‖g_i‖² — no per-example gradient is materialised.
  One backward pass to the layer outputs (not to the weights) gives every g_i; the clipped sum
  is then Σ_i c_i g_i a_iᵀ = (c ⊙ G)ᵀA, one matmul per layer (sparse × dense for
  :class:`~dpaudit.nn.SparseFeatures` inputs). Applies when every trainable parameter belongs
  to an ``nn.Linear`` called at most once per forward on 2-D input (MLPs, GAP's modules).
* ``"per-sample"`` — opacus' ``GradSampleModule`` materialises per-example gradients (any
  layer opacus supports); used automatically when ghost clipping does not apply, and as the
  reference the ghost path is tested against.

Modules that mix examples (BatchNorm) are refused: per-example clipping would not bound one
example's influence.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import torch
from torch import nn

from dpaudit.errors import ConfigurationError
from dpaudit.nn import SparseFeatures

log = logging.getLogger(__name__)


Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

CLIP_EPS = 1e-6  # opacus' clip factor C / (‖g‖ + 1e-6)


class GhostClippingUnsupported(Exception):
    """The module has a layer ghost clipping cannot handle (the caller falls back)."""


def _rows(inputs, index: torch.Tensor):
    return inputs.rows(index) if isinstance(inputs, SparseFeatures) else inputs[index]


def _per_example_loss_sum(loss_fn: Loss, out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Σ_i L_i for a mean-reduced ``loss_fn`` (opacus' ``loss_reduction="mean"``)."""
    return loss_fn(out, targets) * targets.size(0)


def _check_module(module: nn.Module) -> None:
    for sub in module.modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            raise ConfigurationError(
                f"DP-SGD cannot train a module with {type(sub).__name__}: it mixes the examples of a batch, so "
                "per-example clipping would not bound one example's influence"
            )


class GhostClipper:
    r"""Clipped per-example gradient sums by ghost norms (module docstring, ``"ghost"``).

    Shapes: ``clipped_sum(x [B, F] or SparseFeatures, y [B])`` → {parameter: summed clipped
    gradient of the parameter's shape}.

    Args:
        module: the module to train; every trainable parameter must belong to an ``nn.Linear``.

    Raises:
        GhostClippingUnsupported: a trainable parameter outside an ``nn.Linear``.
    """

    def __init__(self, module: nn.Module):
        self.module = module
        params = [p for p in module.parameters() if p.requires_grad]
        self.layers = [m for m in module.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]
        covered = {id(m.weight) for m in self.layers} | {id(m.bias) for m in self.layers if m.bias is not None}
        if any(id(p) not in covered for p in params):
            raise GhostClippingUnsupported("a trainable parameter does not belong to an nn.Linear layer")
        self._records: list[tuple[nn.Linear, object, torch.Tensor]] = []
        self._active = False  # record only inside clipped_sum (not in e.g. on_epoch's evaluations)
        self._handles = [m.register_forward_hook(self._record) for m in self.layers]

    def _record(self, layer, inputs, output) -> None:
        if not self._active:
            return
        a = inputs[0]
        if any(layer is r[0] for r in self._records):
            raise GhostClippingUnsupported(f"{type(layer).__name__} is applied twice in one forward")
        if not isinstance(a, SparseFeatures) and a.dim() != 2:
            raise GhostClippingUnsupported("a linear layer sees non-2-D input (weights shared inside an example)")
        self._records.append((layer, a, output))

    def remove(self) -> None:
        """Remove the forward hooks this clipper registered."""
        for h in self._handles:
            h.remove()

    def clipped_sum(self, x, y: torch.Tensor, loss_fn: Loss, max_norm: float) -> dict[nn.Parameter, torch.Tensor]:
        """Sum over the batch of every example's gradient clipped to norm ``max_norm``.

        Args:
            x: batch inputs (dense or :class:`~dpaudit.nn.SparseFeatures`).
            y: batch targets.
            loss_fn: mean-reduced loss ``loss_fn(output, y)``.
            max_norm: clipping bound C.

        Returns:
            Parameter → summed clipped gradient (the parameter's shape).

        Shapes:
            x: [B, F]
            y: [B]

        Raises:
            GhostClippingUnsupported: a layer applied twice per forward, or seeing non-2-D input.
        """
        self._records, self._active = [], True
        try:
            loss = _per_example_loss_sum(loss_fn, self.module(x), y)
            records = self._records
            grads = torch.autograd.grad(loss, [r[2] for r in records])
        finally:
            self._records, self._active = [], False
        with torch.no_grad():
            sq = torch.zeros(y.size(0), dtype=loss.dtype, device=loss.device)
            for (layer, a, _), g in zip(records, grads):
                g_sq = g.pow(2).sum(1)
                a_sq = a.row_sq_norms() if isinstance(a, SparseFeatures) else a.detach().pow(2).sum(1)
                sq += g_sq * a_sq
                if layer.bias is not None and layer.bias.requires_grad:
                    sq += g_sq
            factor = (max_norm / (sq.sqrt() + CLIP_EPS)).clamp(max=1.0)
            summed: dict[nn.Parameter, torch.Tensor] = {}
            for (layer, a, _), g in zip(records, grads):
                scaled = g * factor.unsqueeze(1)
                if isinstance(a, SparseFeatures):
                    summed[layer.weight] = a.t_matmul(scaled).t()
                else:
                    summed[layer.weight] = scaled.t() @ a.detach()
                if layer.bias is not None and layer.bias.requires_grad:
                    summed[layer.bias] = scaled.sum(0)
        return summed


class PerSampleClipper:
    """Clipped per-example gradient sums from opacus' materialised per-example gradients.

    Args:
        module: the module to train (wrapped in opacus' ``GradSampleModule``).
    """

    def __init__(self, module: nn.Module):
        from opacus import GradSampleModule
        from opacus.grad_sample import register_grad_sampler
        from opacus.grad_sample.linear import compute_linear_grad_sample

        from dpaudit.nn import InputLinear

        # InputLinear is an nn.Linear (dense inputs reach this path); opacus looks layers up by exact type.
        if InputLinear not in GradSampleModule.GRAD_SAMPLERS:
            register_grad_sampler(InputLinear)(compute_linear_grad_sample)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
            self.wrapped = GradSampleModule(module, batch_first=True, loss_reduction="mean")
        self.params = [p for p in module.parameters() if p.requires_grad]

    def remove(self) -> None:
        """Remove opacus' hooks from the module."""
        self.wrapped._close()

    def clipped_sum(self, x, y: torch.Tensor, loss_fn: Loss, max_norm: float) -> dict[nn.Parameter, torch.Tensor]:
        """Sum over the batch of every example's gradient clipped to norm ``max_norm``.

        Args:
            x: batch inputs (dense or :class:`~dpaudit.nn.SparseFeatures`).
            y: batch targets.
            loss_fn: mean-reduced loss ``loss_fn(output, y)``.
            max_norm: clipping bound C.

        Returns:
            Parameter → summed clipped gradient (the parameter's shape).

        Shapes:
            x: [B, F]
            y: [B]
        """
        if isinstance(x, SparseFeatures):
            x = x.to_dense()
        for p in self.params:
            p.grad_sample, p.grad = None, None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
            loss_fn(self.wrapped(x), y).backward()
        with torch.no_grad():
            samples = [p.grad_sample for p in self.params]
            norms = torch.stack([g.reshape(len(g), -1).norm(2, dim=1) for g in samples], dim=1).norm(2, dim=1)
            factor = (max_norm / (norms + CLIP_EPS)).clamp(max=1.0)
            summed = {p: torch.einsum("i,i...", factor, g) for p, g in zip(self.params, samples)}
        for p in self.params:
            p.grad_sample, p.grad = None, None
        return summed


def make_clipper(module: nn.Module, clipping: str = "ghost"):
    """A :class:`GhostClipper` when it applies (and ``clipping == "ghost"``), else opacus'.

    Args:
        module: the module to train.
        clipping: ``"ghost"`` or ``"per-sample"``.

    Returns:
        The clipper.

    Raises:
        ConfigurationError: the module holds batch normalisation, or ``clipping`` is unknown.
    """
    _check_module(module)
    if clipping not in ("ghost", "per-sample"):
        raise ConfigurationError(f"clipping must be ghost or per-sample, got {clipping!r}")
    if clipping == "ghost":
        try:
            return GhostClipper(module)
        except GhostClippingUnsupported as exc:
            log.info("ghost clipping does not apply (%s); using opacus per-sample gradients", exc)
    return PerSampleClipper(module)
