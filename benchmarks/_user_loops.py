"""User code for the bug zoo (``bench_bug_zoo.py``; not a benchmark): an Opacus MLP and a
hand-rolled DP-SGD loop on Cora's node features, each audited through the white-box API
(:class:`dpaudit.GradientCanaries`), each with the subtle bugs a user ships.

Both train an MLP (1433 → 16 → 7) on 80 % of Cora's rows with Poisson batches of expected size
512 (q ≈ 0.236) for 30 epochs, clipping at C = 1, and claim ε = 4 at δ = 1e-5. Opacus clips
itself, so its canaries go into its clipped sum (:meth:`dpaudit.GradientCanaries.attach`); the
hand-rolled loop gives them as per-example rows of norm 4·C before its clipping
(:meth:`dpaudit.GradientCanaries.inject_examples`), which tests the clipping too.

:func:`opacus_floor_runs` is Opacus' ⌊qN⌋ normaliser on a tiny dataset (opacus issues #571 and
#819), audited by many runs of D vs D ∪ {x} and by one run of canaries.
"""

from __future__ import annotations

import functools
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

#: Opacus bugs: noise factor, the rate the accountant is told (a fraction of the loader's), steps
#: run beyond the ones accounted
OPACUS_BUGS = {
    "sound": {},
    "noise-0.8": {"noise": 0.8},
    "noise-0.6": {"noise": 0.6},
    "rate-x2": {"told_rate": 0.5},
    "missing-step": {"extra_steps": 1},
}
#: hand-rolled bugs (the same, and clipping after the noise)
HAND_BUGS = {
    "sound": {},
    "noise-0.8": {"noise": 0.8},
    "noise-0.6": {"noise": 0.6},
    "rate-x2": {"rate": 2.0},
    "missing-step": {"extra_steps": 1},
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
    canaries: dpaudit.GradientCanaries,
    sample_rate: float,
    steps: int,
    claimed_rate: float,
    dataset: str,
    claimed_steps: int | None = None,
) -> dict:
    result = canaries.result(epsilon=EPSILON, delta=DELTA, dataset=dataset, keep_scores=True)
    return {
        "scores": np.asarray(result["scores"]),
        "coins": np.asarray(result["included"], dtype=bool),
        "certified": result["certified_epsilon_lower_bound"],
        "sample_rate": sample_rate,
        "claimed_rate": claimed_rate,
        "steps": steps,
        "claimed_steps": steps if claimed_steps is None else claimed_steps,
        "max_grad_norm": CLIP,
        "self_check": result.get("self_check", {}),
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
    extra = spec.get("extra_steps", 0)
    for epoch in range(epochs + (1 if extra else 0)):
        for i, (xb, yb) in enumerate(loader):
            if epoch == epochs and i >= extra:  # the steps the accountant does not count
                break
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    return _record(canaries, q, steps + extra, claimed_rate, dataset, claimed_steps=steps)


def hand_rolled_run(
    bug: str, seed: int, count: int = 5000, epochs: int = EPOCHS, dataset: str = "cora", batch_size: int = BATCH
) -> dict:
    """One hand-rolled DP-SGD run with ``bug`` (:data:`HAND_BUGS`): Poisson batches, per-example
    gradients (torch.func), the canaries given as per-example rows of norm 4·C **before** the
    clipping (:meth:`dpaudit.GradientCanaries.inject_examples`), clip at C, sum, add the noise,
    observe the noisy sum, SGD on it divided by the expected batch size. ``clip-after-noise`` sums
    the unclipped gradients, adds the noise, then clips the noisy sum to C·B; ``rate-x2`` samples at
    2q where σ is calibrated (and the claim stated) at q; ``missing-step`` runs T + 1 steps where σ
    is calibrated for T."""
    from dpaudit.auditing.hypothesis import claimed_noise_multiplier

    spec = HAND_BUGS[bug]
    x, y = _data(dataset)
    n = x.size(0)
    q = batch_size / n
    steps = epochs * math.ceil(1 / q)
    sigma = claimed_noise_multiplier(EPSILON, DELTA, q, steps) * spec.get("noise", 1.0)
    rate = min(1.0, q * spec.get("rate", 1.0))  # the rate the loop really samples at
    run_steps = steps + spec.get("extra_steps", 0)
    model = _mlp(x.size(1), int(y.max()) + 1, seed)
    params = {k: v.detach() for k, v in model.named_parameters()}
    leaves = list(model.parameters())
    canaries = dpaudit.GradientCanaries(count=count, seed=seed)
    canaries.attach(leaves, sample_rate=rate, max_grad_norm=CLIP, features=x, dataset_size=n)
    gen = torch.Generator().manual_seed(10_000 + seed)

    def loss(p, xi, yi):
        return nn.functional.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    for _ in range(run_steps):
        batch = torch.rand(n, generator=gen) < rate
        grads = per_example(params, x[batch], y[batch])
        rows = canaries.inject_examples([grads[k] for k in params])  # before the clipping
        flat = torch.cat([g.reshape(g.size(0), -1) for g in rows], dim=1)
        if not spec.get("clip_after_noise"):
            flat = flat * (CLIP / flat.norm(dim=1).clamp_min(CLIP))[:, None]
        summed = flat.sum(0)
        parts = [s.reshape(p.shape) for s, p in zip(summed.split([p.numel() for p in leaves]), leaves)]
        noisy = [s + sigma * CLIP * torch.randn(s.shape, generator=gen) for s in parts]
        canaries.observe(noisy)
        if spec.get("clip_after_noise"):
            total = torch.cat([v.reshape(-1) for v in noisy]).norm()
            noisy = [v * min(1.0, CLIP * batch_size / float(total)) for v in noisy]
        with torch.no_grad():
            for (name, p), g in zip(params.items(), noisy):
                params[name] = p - 1.0 * g / batch_size
    return _record(canaries, rate, run_steps, q, dataset, claimed_steps=steps)


#: Opacus' ⌊qN⌋ normaliser on a tiny dataset: N = 3 rows (D) or 4 (D ∪ {x}), loader batch 2 (so
#: len(loader) = 2 and q = 1/2 for both), a linear model of 64 → 16 (1,040 parameters), 10 steps
FLOOR = {"rows": 3, "features": 64, "classes": 16, "batch": 2, "epochs": 5, "epsilon": 1.0}


def _floor_data(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(FLOOR["rows"] + 1, FLOOR["features"], generator=gen)
    x = x / x.norm(dim=1, keepdim=True)
    y = torch.randint(0, FLOOR["classes"], (FLOOR["rows"] + 1,), generator=gen)
    return x, y


@functools.lru_cache(maxsize=1)
def floor_noise_multiplier() -> float:
    """Opacus' σ for the tiny run's claim (ε = 1, δ = 1e-5, q = 1/2, T = 10, its RDP accountant)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(
            target_epsilon=FLOOR["epsilon"],
            target_delta=DELTA,
            sample_rate=0.5,
            steps=FLOOR["epochs"] * math.ceil(FLOOR["rows"] / FLOOR["batch"]),
        )
    )


def opacus_floor_run(include: bool, seed: int, *, public_normaliser: bool = False, canaries: int = 0) -> dict:
    """One Opacus run on D (3 rows) or D ∪ {x} (4 rows, ``include``): ``make_private`` with
    Opacus' defaults (Poisson sampling, ``loss_reduction="mean"``), so ``scale_grad`` divides the
    noisy sum by ``expected_batch_size = int(len(dataset) · q)`` — 1 for D, 2 for D ∪ {x} (q = 1/2
    both: two batches of 2). ``public_normaliser``: the fix, the normaliser set to a number that
    does not depend on the data (2). The model's initial weights are public (seed 0); the score
    is −‖θ_T − θ_0‖ (a larger normaliser, a smaller step: D ∪ {x} scores higher). ``canaries``:
    that many gradient canaries in the run (one-run audit of it; the record is returned).

    Returns:
        ``{"score", "normaliser", "sample_rate", "steps", "record"}``.
    """
    from opacus import PrivacyEngine

    x, y = _floor_data()
    n = FLOOR["rows"] + (1 if include else 0)
    torch.manual_seed(0)
    model = nn.Linear(FLOOR["features"], FLOOR["classes"])
    start = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = DataLoader(TensorDataset(x[:n], y[:n]), batch_size=FLOOR["batch"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine()
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=floor_noise_multiplier(),
            max_grad_norm=CLIP,
        )
    if public_normaliser:
        optimizer.expected_batch_size = FLOOR["batch"]
    watch = None
    if canaries:
        watch = dpaudit.GradientCanaries(count=canaries, seed=seed)
        watch.attach(optimizer, sample_rate=loader.sample_rate)
    torch.manual_seed(1_000_000 + seed)  # Opacus' noise and Poisson batches
    steps = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(FLOOR["epochs"]):
            for xb, yb in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
                steps += 1
    end = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    record = None
    if watch is not None:
        record = watch.result(epsilon=FLOOR["epsilon"], delta=DELTA, keep_scores=True)
    return {
        "score": -float((end - start).norm()),
        "normaliser": float(optimizer.expected_batch_size),
        "sample_rate": float(loader.sample_rate),
        "steps": steps,
        "record": record,
    }
