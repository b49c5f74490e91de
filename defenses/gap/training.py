"""GAP's training loops: full-batch Adam (gap-inf, gap-edp) and DP-Adam with opacus
(gap-ndp), each keeping the last iterate or, under ``protocol=paper``, the best-validation epoch.
"""

from __future__ import annotations

import copy
import logging
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from dpaudit.accounting import PoissonSubsampledGaussian
from dpaudit.dpsgd import make_optimizer, poisson_sample_rate

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
    """Full-batch Adam on cross-entropy; keeps the last iterate, or with ``val`` the
    best-validation epoch (paper protocol)."""
    opt = make_optimizer("adam", module.parameters(), lr)
    ckpt = _Checkpoint(module, val)
    for _ in tqdm(range(epochs), desc=desc, leave=False, disable=None):
        module.train()
        opt.zero_grad()
        F.cross_entropy(module(inputs), targets).backward()
        opt.step()
        ckpt.update()
    ckpt.finish()


def _train_minibatch(
    module: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: int,
    epochs: int,
    lr: float,
    seed: int,
    desc: str,
    val: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> PoissonSubsampledGaussian | None:
    """DP-Adam (opacus: Poisson sampling at rate 1/⌈n/B⌉, per-example clipping to
    ``max_grad_norm``, Gaussian noise σ·C) for ``epochs`` epochs; returns the mechanism spent
    (``None`` when σ = 0: plain minibatch Adam). With ``val`` the best-validation epoch is kept
    (paper protocol; the choice is not accounted). Shapes: inputs [n, d], targets [n]."""
    device = next(module.parameters()).device
    n = inputs.size(0)
    batch_size = min(batch_size, n)
    loader = DataLoader(
        TensorDataset(inputs.cpu(), targets.cpu()),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    opt = make_optimizer("adam", module.parameters(), lr)
    ckpt = _Checkpoint(module, val)
    mechanism, steps = None, 0
    if noise_multiplier == 0:
        model, optimizer, data_loader = module, opt, loader
    else:
        from opacus import PrivacyEngine

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")
            engine = PrivacyEngine(accountant="rdp", secure_mode=False)
            model, optimizer, data_loader = engine.make_private(
                module=module,
                optimizer=opt,
                data_loader=loader,
                noise_multiplier=noise_multiplier,
                max_grad_norm=max_grad_norm,
                poisson_sampling=True,
                noise_generator=torch.Generator(device=device).manual_seed(seed + 1),
            )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
        for _ in tqdm(range(epochs), desc=desc, leave=False, disable=None):
            model.train()
            for xb, yb in data_loader:
                optimizer.zero_grad()
                # An empty Poisson batch still takes a noise-only step (skipping it would reveal
                # that the batch was empty, which the accountant does not cover).
                F.cross_entropy(model(xb.to(device)), yb.to(device)).backward()
                optimizer.step()
                steps += 1
            ckpt.update()
    if noise_multiplier > 0:
        model.remove_hooks()
        mechanism = PoissonSubsampledGaussian(noise_multiplier, poisson_sample_rate(n, batch_size), steps)
    ckpt.finish()
    return mechanism
