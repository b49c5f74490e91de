"""GAP's training loops, both through :func:`dpaudit.training.dpsgd.train_dp_sgd`: full-batch Adam
(gap-inf, gap-edp; its noise-free path) and DP-Adam on a planned :class:`~dpaudit.training.dpsgd.PoissonSchedule`
(gap-ndp), each keeping the last iterate or, under ``protocol=paper``, the best-validation epoch.
"""

from __future__ import annotations

import copy
import logging
import math

import torch
from torch import nn

from dpaudit.accounting import PoissonSubsampledGaussian
from dpaudit.training.dpsgd import PoissonSchedule, train_dp_sgd
from dpaudit.training.noise import NoiseSource

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- training loops


@torch.no_grad()
def _accuracy(module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    if inputs.size(0) == 0:
        return float("nan")
    module.eval()
    return float((module(inputs).argmax(dim=1) == targets).float().mean())


class _Checkpoint:
    """Keeps the state of the epoch with the best validation accuracy (``protocol=paper``)."""

    def __init__(self, module: nn.Module, val: tuple[torch.Tensor, torch.Tensor] | None):
        self.module, self.val = module, val
        self.best_acc, self.state = -1.0, None

    def update(self) -> None:
        if self.val is None:
            return
        acc = _accuracy(self.module, *self.val)
        if acc > self.best_acc:
            self.best_acc, self.state = acc, copy.deepcopy(self.module.state_dict())

    def finish(self) -> None:
        if self.state is not None:
            self.module.load_state_dict(self.state)
        self.module.eval()


def _train_full_batch(
    module: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    epochs: int,
    lr: float,
    desc: str,
    val: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """Full-batch Adam on cross-entropy: :func:`dpaudit.training.dpsgd.train_dp_sgd`'s noise-free
    path on one batch of every row in order (no clipping, no noise, nothing accounted: gap-inf's
    and gap-edp's modules train on the already private aggregates); keeps the last iterate, or
    with ``val`` the best-validation epoch (paper protocol)."""
    ckpt = _Checkpoint(module, val)
    train_dp_sgd(
        module,
        inputs,
        targets,
        noise_multiplier=0.0,
        max_grad_norm=math.inf,  # unused without noise: nothing is clipped
        batch_size=max(1, int(targets.size(0))),
        epochs=epochs,
        lr=lr,
        optimizer="adam",
        progress=desc,
        on_epoch=lambda _: ckpt.update(),
        shuffle=False,
    )
    ckpt.finish()


def _train_minibatch(
    module: nn.Module,
    inputs,
    targets: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: int,
    epochs: int,
    schedule: PoissonSchedule | None,
    lr: float,
    seed: int,
    desc: str,
    val: tuple[torch.Tensor, torch.Tensor] | None = None,
    noise: NoiseSource | None = None,
) -> PoissonSubsampledGaussian | None:
    """DP-Adam through :func:`dpaudit.training.dpsgd.train_dp_sgd` on the planned ``schedule`` (Poisson
    rate, steps and normaliser fixed from public inputs before training; per-example clipping to
    ``max_grad_norm`` by ghost norms, Gaussian noise σ·C); returns the mechanism spent (``None``
    when σ = 0: plain minibatch Adam over ``epochs``, ``schedule`` None). With ``val`` the
    best-validation epoch is kept (paper protocol; the choice is not accounted). Batches and noise
    come from ``noise`` (:mod:`dpaudit.training.noise`). Shapes: inputs
    [n, d] (dense or :class:`~dpaudit.nn.SparseFeatures`), targets [n]."""
    ckpt = _Checkpoint(module, val)
    mechanism = train_dp_sgd(
        module,
        inputs,
        targets,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        batch_size=batch_size,
        epochs=epochs,
        schedule=schedule,
        lr=lr,
        optimizer="adam",
        seed=seed,
        noise=noise,
        progress=desc,
        on_epoch=lambda _: ckpt.update(),
    )
    ckpt.finish()
    return mechanism
