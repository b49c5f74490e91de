"""Audit a DP-SGD loop of your own (no Opacus) with gradient canaries: Poisson sampling,
per-example clipping with ``torch.func``, Gaussian noise on the clipped sum. The canaries go in
between (the three lines of ``audit``) — ``inject`` on the clipped sum, ``observe`` on the noisy sum. ``noise_divisor=10``
adds a tenth of the calibrated noise while the claim stays ε = 4.

    DPAUDIT_DATA=/path/to/datasets python examples/own_loop_canaries.py [--bug]
"""

import sys

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import dpaudit
from dpaudit.accounting import PoissonSubsampledGaussian, calibrate_noise
from dpaudit.data.datasets import load_dataset

EPSILON, DELTA, CLIP = 4.0, 1e-5, 1.0


def calibrated_sigma(steps: int, sample_rate: float) -> float:
    """The noise multiplier for which T Poisson-sampled Gaussian steps at rate q are (4, 1e-5)-DP."""
    return calibrate_noise(EPSILON, DELTA, lambda s: PoissonSubsampledGaussian(s, sample_rate, steps), accountant="rdp")


def train(
    sigma: float,
    steps: int = 150,
    sample_rate: float = 0.2,
    noise_divisor: float = 1.0,
    canaries: int = 5000,
    hidden: int = 64,
    lr: float = 1.0,
):
    graph = load_dataset("cora").data
    x, y = graph.x, graph.y
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    train_rows = order[: int(0.8 * graph.num_nodes)]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(x.size(1), hidden), nn.ReLU(), nn.Linear(hidden, int(y.max()) + 1))
    params = dict(model.named_parameters())

    def loss(p, xi, yi):
        out = functional_call(model, p, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    per_example_grads = vmap(grad(loss), in_dims=(None, 0, 0))

    audit = dpaudit.GradientCanaries(count=canaries, seed=0)
    audit.attach(
        params.values(),
        sample_rate=sample_rate,
        max_grad_norm=CLIP,
        features=x[train_rows],
        dataset_size=train_rows.numel(),
    )  # with the batch sizes, checks sample_rate

    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        batch = train_rows[torch.rand(train_rows.numel(), generator=generator) < sample_rate]  # Poisson
        g = per_example_grads({k: v.detach() for k, v in params.items()}, x[batch], y[batch])
        norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
        factor = (CLIP / (norms + 1e-6)).clamp(max=1.0)
        summed = [torch.einsum("i,i...->...", factor, g[k]) for k in params]  # clipped sum

        summed = audit.inject(summed, batch_size=batch.numel())
        noisy = [s + torch.randn(s.shape, generator=generator) * (sigma / noise_divisor) * CLIP for s in summed]
        audit.observe(noisy)

        with torch.no_grad():
            for p, n in zip(params.values(), noisy):
                p -= lr * n / (sample_rate * train_rows.numel())  # divide by the expected batch size
    return audit.result(epsilon=EPSILON, delta=DELTA)


if __name__ == "__main__":
    sigma = calibrated_sigma(steps=150, sample_rate=0.2)
    result = train(sigma, steps=150, sample_rate=0.2, noise_divisor=10.0 if "--bug" in sys.argv else 1.0)
    print(f"σ = {sigma:.3f}; certified ε ≥ {result.certified_epsilon_lower_bound:.2f}: {result.verdict}")
