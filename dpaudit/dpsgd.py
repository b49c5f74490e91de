r"""DP-SGD / DP-Adam on per-example tensors through opacus (Abadi et al. 2016).

Each step draws a Poisson batch (every example independently with probability
q = 1/⌈n/B⌉, opacus' ``DPDataLoader``), clips every per-example gradient to L2 norm C, sums,
adds N(0, σ²C²I) and takes an optimiser step. The privacy cost is exactly
:class:`~dpaudit.accounting.PoissonSubsampledGaussian` (σ, q, steps); the function returns
that mechanism with the number of steps actually taken, and cross-checks it against the
privacy engine's own RDP accountant.

With ``noise_multiplier = 0`` the same loop runs without clipping or noise (the non-private
variant of a private recipe); nothing is then accounted.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from dpaudit.accounting.mechanisms import PoissonSubsampledGaussian

log = logging.getLogger(__name__)


def poisson_sample_rate(num_examples: int, batch_size: int) -> float:
    """The sampling rate opacus uses for a loader of ``num_examples`` and ``batch_size``."""
    return 1.0 / math.ceil(num_examples / min(batch_size, num_examples))


def steps_for(num_examples: int, batch_size: int, epochs: int) -> int:
    return epochs * math.ceil(num_examples / min(batch_size, num_examples))


def make_optimizer(name: str, params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; use adam or sgd")


def train_dp_sgd(
    module: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: int,
    epochs: int,
    lr: float,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    seed: int = 0,
    progress: str | None = None,
    on_epoch: Callable[[nn.Module], None] | None = None,
) -> PoissonSubsampledGaussian | None:
    """Train ``module`` in place on (inputs[i], targets[i]) pairs; return the mechanism spent.

    ``inputs`` is indexed along its first dimension (one row per protected example).
    ``on_epoch(module)`` runs after every epoch (e.g. a ``paper`` protocol's best-validation
    checkpoint, which reads data outside the accountant and must be listed as unaccounted).
    """
    device = next(module.parameters()).device
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    n = inputs.size(0)
    batch_size = min(batch_size, n)
    generator = torch.Generator().manual_seed(seed)
    dataset = TensorDataset(inputs.cpu(), targets.cpu())
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)
    opt = make_optimizer(optimizer, module.parameters(), lr, weight_decay)
    module.train()

    if noise_multiplier == 0:
        for _ in tqdm(range(epochs), desc=progress, disable=None if progress else True, leave=False):
            for xb, yb in loader:
                opt.zero_grad()
                loss_fn(module(xb.to(device)), yb.to(device)).backward()
                opt.step()
            if on_epoch is not None:
                on_epoch(module)
        module.eval()
        return None

    from opacus import PrivacyEngine

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")
        warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
        engine = PrivacyEngine(accountant="rdp", secure_mode=False)
        mechanism = _private_loop(
            engine, module, opt, loader, noise_multiplier, max_grad_norm, epochs, loss_fn, seed, progress, device,
            on_epoch,
        )
    module.eval()
    opacus_steps = sum(n for (_, _, n) in engine.accountant.history)
    if opacus_steps != mechanism.steps:
        log.warning("opacus accounted %d steps, dpaudit counted %d", opacus_steps, mechanism.steps)
    return mechanism


def _private_loop(
    engine, module, opt, loader, noise_multiplier, max_grad_norm, epochs, loss_fn, seed, progress, device, on_epoch
):
    dp_module, dp_opt, dp_loader = engine.make_private(
        module=module,
        optimizer=opt,
        data_loader=loader,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        poisson_sampling=True,
        noise_generator=torch.Generator(device=device).manual_seed(seed + 1),
    )
    sample_rate = 1.0 / len(loader)
    steps = 0
    for _ in tqdm(range(epochs), desc=progress, disable=None if progress else True, leave=False):
        for xb, yb in dp_loader:
            dp_opt.zero_grad()
            # An empty Poisson batch still takes a noise-only step: skipping it would reveal
            # that the batch was empty, which the accountant does not cover.
            loss_fn(dp_module(xb.to(device)), yb.to(device)).backward()
            dp_opt.step()
            steps += 1
        if on_epoch is not None:
            on_epoch(module)
    dp_module.remove_hooks()
    return PoissonSubsampledGaussian(sigma=noise_multiplier, sample_rate=sample_rate, steps=steps)
