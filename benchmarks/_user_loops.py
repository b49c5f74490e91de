"""User code for the bug zoo (``bench_bug_zoo.py``; not a benchmark): an Opacus MLP and a
hand-rolled DP-SGD loop on Cora's node features, each audited through the white-box API
(:class:`dpaudit.GradientCanaries`), each with the subtle bugs a user ships.

Both train an MLP (1433 → 16 → 7) on 80 % of Cora's rows with Poisson batches of expected size
512 (q ≈ 0.236) for 30 epochs, clipping at C = 1, and claim ε = 4 at δ = 1e-5.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

import dpaudit
from dpaudit.data.datasets import load_dataset

EPSILON, DELTA, CLIP = 4.0, 1e-5, 1.0
EPOCHS, BATCH, HIDDEN = 30, 512, 16

#: Opacus bugs: noise factor, and the rate the accountant is told (a fraction of the loader's)
OPACUS_BUGS = {
    "sound": {},
    "noise-0.8": {"noise": 0.8},
    "noise-0.6": {"noise": 0.6},
    "rate-x2": {"told_rate": 0.5},
}
#: hand-rolled bugs
HAND_BUGS = {
    "sound": {},
    "noise-0.8": {"noise": 0.8},
    "clip-after-noise": {"clip_after_noise": True},
}


def _data(dataset: str):
    graph = load_dataset(dataset).data
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    rows = order[: int(0.8 * graph.num_nodes)]
    return graph.x[rows].float(), graph.y[rows]


def _mlp(features: int, classes: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, classes))


def _record(
    canaries: dpaudit.GradientCanaries, sample_rate: float, steps: int, claimed_rate: float, dataset: str
) -> dict:
    result = canaries.result(epsilon=EPSILON, delta=DELTA, dataset=dataset, keep_scores=True)
    return {
        "scores": np.asarray(result["scores"]),
        "coins": np.asarray(result["included"], dtype=bool),
        "certified": result["certified_epsilon_lower_bound"],
        "sample_rate": sample_rate,
        "claimed_rate": claimed_rate,
        "steps": steps,
        "max_grad_norm": CLIP,
    }


def opacus_run(
    bug: str, seed: int, count: int = 5000, epochs: int = EPOCHS, dataset: str = "cora", batch_size: int = BATCH
) -> dict:
    """One Opacus run with ``bug`` (:data:`OPACUS_BUGS`), its canaries' scores and coins, the
    rate and steps it ran and the rate its claim assumes (``epochs``, ``dataset``, ``batch_size``:
    smaller for ``bench_bug_zoo.py --smoke``)."""
    from opacus import PrivacyEngine
    from opacus.accountants.utils import get_noise_multiplier

    spec = OPACUS_BUGS[bug]
    x, y = _data(dataset)
    model = _mlp(x.size(1), int(y.max()) + 1, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size)
    engine = PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            target_epsilon=EPSILON,
            target_delta=DELTA,
            epochs=epochs,
            max_grad_norm=CLIP,
        )
        q, steps = loader.sample_rate, epochs * len(loader)
        claimed_rate = q * spec.get("told_rate", 1.0)
        if "told_rate" in spec:  # the accountant is told another rate than the loader's
            optimizer.noise_multiplier = get_noise_multiplier(
                target_epsilon=EPSILON, target_delta=DELTA, sample_rate=claimed_rate, steps=steps
            )
    optimizer.noise_multiplier *= spec.get("noise", 1.0)
    canaries = dpaudit.GradientCanaries(count=count, seed=seed)
    canaries.attach(optimizer, sample_rate=loader.sample_rate, features=x)
    for _ in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    return _record(canaries, q, steps, claimed_rate, dataset)


def hand_rolled_run(
    bug: str, seed: int, count: int = 5000, epochs: int = EPOCHS, dataset: str = "cora", batch_size: int = BATCH
) -> dict:
    """One hand-rolled DP-SGD run with ``bug`` (:data:`HAND_BUGS`): Poisson batches, per-example
    gradients (torch.func), clip at C, the canaries injected into the clipped sum and observed
    after the noise, SGD on the sum divided by the expected batch size. ``clip-after-noise``
    sums the unclipped gradients, adds the noise, then clips the noisy sum to C·B."""
    from dpaudit.auditing.hypothesis import claimed_noise_multiplier

    spec = HAND_BUGS[bug]
    x, y = _data(dataset)
    n = x.size(0)
    q = batch_size / n
    steps = epochs * math.ceil(1 / q)
    sigma = claimed_noise_multiplier(EPSILON, DELTA, q, steps) * spec.get("noise", 1.0)
    model = _mlp(x.size(1), int(y.max()) + 1, seed)
    params = {k: v.detach() for k, v in model.named_parameters()}
    leaves = list(model.parameters())
    canaries = dpaudit.GradientCanaries(count=count, seed=seed)
    canaries.attach(leaves, sample_rate=q, max_grad_norm=CLIP, features=x)
    gen = torch.Generator().manual_seed(10_000 + seed)

    def loss(p, xi, yi):
        return nn.functional.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    for _ in range(steps):
        batch = torch.rand(n, generator=gen) < q
        grads = per_example(params, x[batch], y[batch])
        flat = torch.cat([g.reshape(g.size(0), -1) for g in grads.values()], dim=1)
        if not spec.get("clip_after_noise"):
            flat = flat * (CLIP / flat.norm(dim=1).clamp_min(CLIP))[:, None]
        summed = flat.sum(0)
        parts = list(summed.split([p.numel() for p in leaves]))
        parts = [s.reshape(p.shape) for s, p in zip(parts, leaves)]
        parts = canaries.inject(parts)
        noisy = [s + sigma * CLIP * torch.randn(s.shape, generator=gen) for s in parts]
        canaries.observe(noisy)
        if spec.get("clip_after_noise"):
            total = torch.cat([v.reshape(-1) for v in noisy]).norm()
            noisy = [v * min(1.0, CLIP * batch_size / float(total)) for v in noisy]
        with torch.no_grad():
            for (name, p), g in zip(params.items(), noisy):
                params[name] = p - 1.0 * g / batch_size
    return _record(canaries, q, steps, q, dataset)
