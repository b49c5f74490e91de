"""Audit an Opacus script with gradient canaries: an MLP on Cora's node features, made private by
``make_private_with_epsilon`` at ε = 4, δ = 1e-5 — three added lines (marked ``# +``) audit it.
``bug=True`` divides the noise by ten after calibration, as a buggy script would, while the
script still says ε = 4.

    DPAUDIT_DATA=/path/to/datasets python examples/opacus_canaries.py [--bug]
"""

import sys
import warnings

import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dpaudit
from dpaudit.data.datasets import load_dataset

EPSILON, DELTA = 4.0, 1e-5


def train(epochs: int = 30, bug: bool = False, canaries: int = 5000, hidden: int = 64, batch_size: int = 512):
    graph = load_dataset("cora").data
    x, y = graph.x, graph.y
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    train_rows, test_rows = order[: int(0.8 * graph.num_nodes)], order[int(0.8 * graph.num_nodes) :]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(x.size(1), hidden), nn.ReLU(), nn.Linear(hidden, int(y.max()) + 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = DataLoader(TensorDataset(x[train_rows], y[train_rows]), batch_size=batch_size)
    engine = PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opacus' notes on secure RNG and on the optimal RDP order
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model, optimizer=optimizer, data_loader=loader, target_epsilon=EPSILON, target_delta=DELTA,
            epochs=epochs, max_grad_norm=1.0,
        )  # fmt: skip
    if bug:
        optimizer.noise_multiplier /= 10  # a tenth of the noise; the script still reports ε = 4

    audit = dpaudit.GradientCanaries(count=canaries, seed=0)  # +
    audit.attach(optimizer, sample_rate=loader.sample_rate, features=x[train_rows])  # +

    for _ in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    accuracy = (model(x[test_rows]).argmax(1) == y[test_rows]).float().mean().item()

    result = audit.result(epsilon=EPSILON, delta=DELTA)  # +
    claim = dpaudit.claim_from_opacus(engine, delta=DELTA, claimed_epsilon=EPSILON)
    return result, claim, accuracy


if __name__ == "__main__":
    result, claim, accuracy = train(bug="--bug" in sys.argv)
    print(f"test accuracy {accuracy:.3f}")
    print(f"certified ε ≥ {result.certified_epsilon_lower_bound:.2f} (at most {result.max_possible['one-run-fdp']:.2f} "
          f"with {result['canaries']} canaries): {result.verdict}")  # fmt: skip
    print(claim.message)
