"""Audit an Opacus script with gradient canaries: an MLP on Cora's node features, made private by
``make_private_with_epsilon`` at ε = 4, δ = 1e-5 — three added lines (marked ``# +``) audit it.
``bug=True`` divides the noise by ten after calibration, as a buggy script would, while the
script still says ε = 4. :func:`report` puts the canaries' record into dpaudit's audit report,
next to the attacks, as evidence on the script's claim.

    DPAUDIT_DATA=/path/to/datasets python examples/opacus_canaries.py [--bug] [--report audit.html]
"""

import sys
import warnings

import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dpaudit
from dpaudit.data.datasets import load_dataset
from dpaudit.training.adapters import adapt

EPSILON, DELTA = 4.0, 1e-5


def split_rows(num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(0))
    return order[: int(0.8 * num_nodes)], order[int(0.8 * num_nodes) :]


def train(epochs: int = 30, bug: bool = False, canaries: int = 5000, hidden: int = 64, batch_size: int = 512):
    graph = load_dataset("cora").data
    x, y = graph.x, graph.y
    train_rows, test_rows = split_rows(graph.num_nodes)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(x.size(1), hidden), nn.ReLU(), nn.Linear(hidden, int(y.max()) + 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = DataLoader(TensorDataset(x[train_rows], y[train_rows]), batch_size=batch_size)
    engine = PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opacus' notes on secure RNG and on the optimal RDP order
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            target_epsilon=EPSILON,
            target_delta=DELTA,
            epochs=epochs,
            max_grad_norm=1.0,
        )
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

    result = audit.result(epsilon=EPSILON, delta=DELTA, dataset="cora")  # +  (one example: one node's row)
    claim = dpaudit.claim_from_opacus(engine, delta=DELTA, claimed_epsilon=EPSILON)
    return result, claim, accuracy, model.to_standard_module()  # the trained MLP, out of opacus' wrapper


# --8<-- [start:report]
def report(mlp: nn.Module, result, out: str = "audit.html", folder: str | None = None, **audit_options):
    """The script's claim — a hypothesis (status ``claimed``) — audited by an attack and by the
    canaries' record: the report's verdict is "claim refuted" when the canaries certify more than
    ε = 4, "consistent with the claim" otherwise. ``folder``: also save the model as a released
    model and the record beside it, for ``dpaudit inspect / attack / audit --canaries``."""
    dataset = load_dataset("cora")
    train_rows, _ = split_rows(dataset.num_nodes)
    claim = {"epsilon": EPSILON, "delta": DELTA, "unit": "node"}
    model = adapt(mlp, dataset, train_nodes=train_rows, privacy=claim, input="features", surrogate="mlp")
    if folder is not None:
        model.save(folder)  # model.json + weights: the claim kept as protocol "claimed"
        result.save(f"{folder}/canaries.json")
    audit = dpaudit.audit(model, dataset=dataset, attacks=["mia-threshold"], canaries=[result], **audit_options)
    return audit.to_html(out)


# --8<-- [end:report]


if __name__ == "__main__":
    result, claim, accuracy, mlp = train(bug="--bug" in sys.argv)
    print(f"test accuracy {accuracy:.3f}")
    print(
        f"certified ε ≥ {result.certified_epsilon_lower_bound:.2f} (at most {result.max_possible['one-run-fdp']:.2f} "
        f"with {result['canaries']} canaries): {result.verdict}"
    )
    print(claim.message)
    if "--report" in sys.argv:
        print(f"report: {report(mlp, result, sys.argv[sys.argv.index('--report') + 1])}")
