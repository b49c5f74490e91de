"""Valid audits by default: ``train`` warns (with the command that fixes it) when its split makes
membership non-random, ``audit`` says in one line how to get a valid bound, and the README's
"your own model" example gives a valid bound."""

from __future__ import annotations

import logging
import shlex

import numpy as np
import pytest
import torch

from dpaudit.app.cli import main


@pytest.fixture()
def masked_graph(small_graph, tmp_path):
    """``small_graph`` as a graph file whose masks (the public split) hold 10 nodes per class."""
    y = small_graph.data.y.numpy()
    train = np.zeros(len(y), bool)
    for c in range(small_graph.num_classes):
        train[np.flatnonzero(y == c)[:10]] = True
    rest = np.flatnonzero(~train)
    val, test = np.zeros(len(y), bool), np.zeros(len(y), bool)
    val[rest[:40]], test[rest[40:140]] = True, True
    path = tmp_path / "masked.npz"
    np.savez(
        path,
        x=small_graph.data.x.numpy(),
        y=y,
        edge_index=small_graph.data.edge_index.numpy(),
        train_mask=train,
        val_mask=val,
        test_mask=test,
    )
    return path


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_train_on_a_public_split_warns_with_the_command_that_gives_a_valid_audit(
    masked_graph, tmp_path, caplog, capsys
):
    argv = [
        "train",
        "--defense",
        "gcn",
        "--dataset",
        str(masked_graph),
        "--dataset-option",
        "declare_classes=3",
        "--set",
        "epochs=2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "public"),
    ]
    with caplog.at_level(logging.WARNING, logger="dpaudit"):
        assert main(argv) == 0
    [warning] = _warnings(caplog)
    assert "public split was fixed by people" in warning and "no valid ε bound" in warning
    command = warning.partition("train with: ")[2]
    assert command == shlex.join(["dpaudit", *argv, "--split", "per-class:10,40,100"])  # the same sizes, at random

    capsys.readouterr()
    audit = ["audit", "--model", str(tmp_path / "public"), "--attacks", "mia-threshold", "--attack-set", "n_boot=50"]
    assert main([*audit, "--out", str(tmp_path / "a.html")]) == 0
    advice = [line for line in capsys.readouterr().out.splitlines() if "valid ε bound" in line]
    assert len(advice) == 1 and "--split per-class:10,40,100" in advice[0]

    caplog.clear()
    suggested = shlex.split(command)[1:]
    suggested[suggested.index("--out") + 1] = str(tmp_path / "random")
    with caplog.at_level(logging.WARNING, logger="dpaudit"):
        assert main(suggested) == 0
    assert _warnings(caplog) == []
    audit[2] = str(tmp_path / "random")
    assert main([*audit, "--out", str(tmp_path / "b.html")]) == 0
    out = capsys.readouterr().out
    assert "no valid ε bound" not in out and "mia-threshold" in out
    row = next(line for line in out.splitlines() if line.startswith("mia-threshold"))
    assert row.split()[-1] == "yes"  # the "fair game" column: members decided by a fair coin
    # the terminal prints the report's own verdict: about the claim (none here), never "valid audit"
    assert any(line.startswith("verdict: No privacy guarantee") for line in out.splitlines()), out


def test_a_graph_partition_suggests_an_inductive_random_split(tmp_path, caplog):
    argv = [
        "train",
        "--defense",
        "gcn",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=150",
        "--split=metis:6",
        "--set",
        "epochs=2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "m"),
    ]
    with caplog.at_level(logging.WARNING, logger="dpaudit"):
        assert main(argv) == 0
    [warning] = _warnings(caplog)
    suggested = shlex.split(warning.partition("train with: ")[2])
    assert [a for a in suggested if a.startswith("--split")][0].startswith("--split=inductive:")


def test_the_readme_own_model_example_gives_a_valid_bound(small_graph):
    """The README's "Your own model" section, with a small GCN trained on its random split."""
    import attacks
    from dpaudit.data.splits import make_split
    from dpaudit.training.adapters import adapt

    class TwoLayerGCN(torch.nn.Module):
        def __init__(self, features, classes):
            super().__init__()
            from torch_geometric.nn import GCNConv

            self.conv1, self.conv2 = GCNConv(features, 16), GCNConv(16, classes)

        def forward(self, x, edge_index):
            return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)

    dataset = small_graph
    split = make_split(dataset, "random:0.5,0.2,0.3", seed=0)  # as the README: membership drawn at random
    my_gcn = TwoLayerGCN(dataset.num_features, dataset.num_classes)
    optimiser = torch.optim.Adam(my_gcn.parameters(), lr=0.01)
    for _ in range(20):
        optimiser.zero_grad()
        logits = my_gcn(dataset.data.x, dataset.data.edge_index)
        torch.nn.functional.cross_entropy(logits[split.train], dataset.data.y[split.train]).backward()
        optimiser.step()
    model = adapt(my_gcn, dataset, split=split, privacy=None, input="graph", output="logits", surrogate="gcn")
    result = attacks.run("mia-threshold", model, dataset, n_boot=50)
    assert result.bound_valid, result.bound_validity
