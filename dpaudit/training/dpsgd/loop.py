"""The DP-SGD loop (:func:`train_dp_sgd`): Poisson batches on the planned schedule, clipped sums,
the Gaussian noise and the normaliser (:func:`noisy_gradients`), the optimiser step; without
noise, the same model on shuffled minibatches."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from dpaudit.accounting.mechanisms import PoissonSubsampledGaussian
from dpaudit.errors import ConfigurationError
from dpaudit.progress import steps as progress_steps
from dpaudit.training.dpsgd.canaries import _full_clipped_sum, canaries_for
from dpaudit.training.dpsgd.clipping import GhostClippingUnsupported, Loss, PerSampleClipper, _rows, make_clipper
from dpaudit.training.dpsgd.optimizers import make_optimizer
from dpaudit.training.dpsgd.schedule import PoissonSchedule
from dpaudit.training.noise import NoiseSource, noise_source
from dpaudit.training.sampling import poisson_subset

log = logging.getLogger(__name__)


def noisy_gradients(
    summed: dict[nn.Parameter, torch.Tensor],
    params: list[nn.Parameter],
    std: float,
    expected_batch_size: float,
    generator: torch.Generator,
) -> None:
    """``p.grad = (Σ clipped + N(0, std²)) / expected_batch_size`` for every parameter, in order;
    the noise is drawn on the CPU ``generator`` (identical on every device). A parameter with no
    entry in ``summed`` (empty batch) gets noise only.

    Args:
        summed: clipped gradient sum by parameter (missing entries: zero).
        params: the trainable parameters, in order.
        std: noise standard deviation (σ·C).
        expected_batch_size: the schedule's public normaliser.
        generator: CPU generator of the noise.
    """
    for p in params:
        noise = torch.normal(0.0, std, size=tuple(p.shape), generator=generator).to(p.device, p.dtype)
        total = summed.get(p)
        total = noise if total is None else total.to(p.dtype) + noise
        p.grad = (total / expected_batch_size).view_as(p)


def train_dp_sgd(
    module: nn.Module,
    inputs,
    targets: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: int,
    epochs: int,
    lr: float,
    schedule: PoissonSchedule | None = None,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    loss_fn: Loss | None = None,
    seed: int = 0,
    progress: str | None = None,
    on_epoch: Callable[[nn.Module], None] | None = None,
    clipping: str = "ghost",
    shuffle: bool = True,
    noise: NoiseSource | None = None,
) -> PoissonSubsampledGaussian | None:
    """Train ``module`` in place on (inputs[i], targets[i]) pairs; return the mechanism spent.

    ``inputs`` ([n, F] tensor or :class:`~dpaudit.nn.SparseFeatures`) is indexed along its
    first dimension (one row per protected example), on the module's device. ``loss_fn`` is
    mean-reduced (default cross-entropy). ``on_epoch(module)`` runs after every epoch (e.g. a
    ``paper`` protocol's best-validation checkpoint, which reads data outside the accountant
    and must be listed as unaccounted). ``clipping``: see :mod:`dpaudit.training.dpsgd.clipping`.

    A noisy run (``noise_multiplier > 0``) takes its rate, steps and normaliser from
    ``schedule`` alone (:meth:`PoissonSchedule.plan`; ``epochs`` must be the schedule's) and
    returns ``PoissonSubsampledGaussian(noise_multiplier, schedule.sample_rate, schedule.steps)``;
    ``batch_size`` is then unused. Without noise, shuffled minibatches of min(``batch_size``, n)
    for ``epochs`` epochs (``shuffle=False``: the rows in their given order, no permutation; with
    ``batch_size`` ≥ n, one full batch per epoch), and ``None`` is returned. A noisy run draws its
    Poisson batches and its Gaussian noise from ``noise`` (:mod:`dpaudit.training.noise`; ``None``:
    :func:`~dpaudit.training.noise.noise_source`'s default, OS entropy), generators seeded ``seed``
    and ``seed + 1`` only in ``seeded`` mode; the noise-free run's shuffles follow ``seed``. Inside :func:`inserting_canaries`, a noisy
    run the :class:`DiracCanaries` ask for (by ``progress`` label) also trains on them.

    Raises:
        ConfigurationError: a noisy run without a schedule, with other epochs than it plans, or
            with ``shuffle=False`` (its batches are the accounted Poisson draws).

    Args:
        module: the module to train (in place).
        inputs: training inputs, one row per example.
        targets: training targets.
        noise_multiplier: σ (0: no noise, no accounting).
        max_grad_norm: clipping bound C.
        batch_size: minibatch size of a noise-free run.
        epochs: number of epochs.
        lr: learning rate.
        schedule: the public Poisson schedule of a noisy run.
        optimizer: ``"adam"`` or ``"sgd"``.
        weight_decay: L2 weight decay.
        loss_fn: mean-reduced loss, default cross-entropy.
        seed: seed of the batches and the noise.
        progress: progress label (also selects canaries).
        on_epoch: callback after every epoch.
        clipping: ``"ghost"`` or ``"per-sample"``.
        shuffle: shuffle a noise-free run's rows.

    Returns:
        The mechanism spent, or ``None`` without noise.

    Shapes:
        inputs: [n, F]
        targets: [n]
    """
    if noise_multiplier > 0:
        if not shuffle:
            raise ConfigurationError("noisy DP-SGD draws Poisson batches: shuffle=False is for noise-free runs only")
        if schedule is None:
            raise ConfigurationError(
                "noisy DP-SGD needs a PoissonSchedule fixed before training (PoissonSchedule.plan): its rate and "
                "steps may not be read from the number of training examples"
            )
        if int(epochs) != schedule.epochs:
            raise ConfigurationError(f"train_dp_sgd: epochs={epochs}, but the schedule plans {schedule.epochs}")
    device = next(module.parameters()).device
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    inputs = inputs.to(device)
    targets = targets.to(device)
    n = int(targets.size(0))
    generator = torch.Generator().manual_seed(seed)
    opt = make_optimizer(optimizer, module.parameters(), lr, weight_decay)
    epochs_bar = progress_steps(epochs, progress, disable=None if progress else True, unit="epoch")

    if noise_multiplier == 0:
        batch_size = min(batch_size, n)  # nothing is accounted here: reading n is harmless
        for _ in epochs_bar:
            module.train()
            # torch's RandomSampler: one randperm per epoch from the seeded generator.
            order = torch.randperm(n, generator=generator).to(device) if shuffle else torch.arange(n, device=device)
            for start in range(0, n, batch_size):
                index = order[start : start + batch_size]
                opt.zero_grad()
                loss_fn(module(_rows(inputs, index)), targets[index]).backward()
                opt.step()
            if on_epoch is not None:
                on_epoch(module)
        module.eval()
        return None

    sample_rate = schedule.sample_rate
    # the accounted Poisson batches and the Gaussian noise: the privacy noise source's
    noise = noise_source() if noise is None else noise
    generator = noise.torch(seed)
    noise_generator = noise.torch(seed + 1)
    params = [p for p in module.parameters() if p.requires_grad]
    canaries = canaries_for(progress)
    if canaries is not None:
        canaries.attach(
            module,
            params,
            inputs,
            sample_rate=sample_rate,
            noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm,
            label=progress,
            real_clipped_sum=lambda: _full_clipped_sum(clipper, module, inputs, targets, loss_fn, max_grad_norm),
        )
    clipper = make_clipper(module, clipping)
    steps = 0
    try:
        for _ in epochs_bar:
            module.train()
            for _ in range(schedule.steps_per_epoch):
                index = poisson_subset(n, sample_rate, generator).to(device)
                opt.zero_grad()
                # An empty Poisson batch still takes a noise-only step: skipping it would reveal
                # that the batch was empty, which the accountant does not cover.
                summed = {}
                if index.numel():
                    try:
                        summed = clipper.clipped_sum(_rows(inputs, index), targets[index], loss_fn, max_grad_norm)
                    except GhostClippingUnsupported as exc:
                        log.info("ghost clipping does not apply (%s); using opacus per-sample gradients", exc)
                        clipper.remove()
                        clipper = PerSampleClipper(module)
                        summed = clipper.clipped_sum(_rows(inputs, index), targets[index], loss_fn, max_grad_norm)
                if canaries is not None:
                    canaries.insert(summed)
                noisy_gradients(
                    summed, params, noise_multiplier * max_grad_norm, schedule.expected_batch_size, noise_generator
                )
                if canaries is not None:
                    canaries.observe(schedule.expected_batch_size)
                opt.step()
                steps += 1
            if on_epoch is not None:
                on_epoch(module)
    finally:
        clipper.remove()
    if canaries is not None:
        canaries.finish()
    module.eval()
    return PoissonSubsampledGaussian(sigma=noise_multiplier, sample_rate=sample_rate, steps=steps)
