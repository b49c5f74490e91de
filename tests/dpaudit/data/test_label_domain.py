"""The label domain is declared, never read from private labels (issue 37, item 2).

The number of classes sets the output layer's shape and ``card.dataset.num_classes``: a user's
graph where node 0 is the only member of class 3 would otherwise publish 4 classes with node 0
and 3 without it (ε = ∞ for that pair). The domain comes from a declaration (``classes=`` /
``--dataset-option declare_classes=…``, ``declare=true`` for a published graph, a registry
dataset's published classes) and the neighbour harness rebuilds every derived field from the
neighbour's own raw data, so a leak would show.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from torch_geometric.data import Data

from dpaudit.app.cli import main
from dpaudit.data.datasets import from_data, load_dataset
from dpaudit.data.splits import make_split
from dpaudit.errors import DatasetError
from dpaudit.testing.neighbours import leaf_differences, train_and_compare, without_node
from dpaudit.training.registry import get_defense

N, F = 60, 8
SPLIT = "random:0.6,0.2,0.2"


def _raw() -> Data:
    """Node 0 is the only member of class 3; the others are in classes 0..2."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(N) % 3
    y[0] = 3
    return Data(x=torch.randn(N, F, generator=g), y=y, edge_index=torch.randint(0, N, (2, 3 * N), generator=g))


def _with_node_0_in_training(dataset):
    """A random split whose training set holds node 0 (its removal reaches training)."""
    split = make_split(dataset, SPLIT, seed=0)
    if not bool((split.train == 0).any()):
        other = split.train[0:1]
        moved = {name: torch.where(part == 0, other, part) for name, part in (("val", split.val), ("test", split.test))}
        train = torch.cat([torch.zeros(1, dtype=torch.long), split.train[1:]]).sort().values
        split = dataclasses.replace(split, train=train, **moved)
    assert bool((split.train == 0).any())
    return split


def _tensor_shapes(directory) -> dict[str, tuple[int, ...]]:
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}


def _save_npz(path, data: Data):
    np.savez(path, x=data.x.numpy(), y=data.y.numpy(), edge_index=data.edge_index.numpy())
    return path


def _one_line_error(capsys, fragment: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- (a) undeclared: refused


def test_an_undeclared_label_domain_is_refused_in_python():
    with pytest.raises(DatasetError, match=r"mine: the label domain is not declared; pass classes=\[") as info:
        from_data(_raw(), "mine")
    assert "\n" not in str(info.value)


def test_an_undeclared_graph_file_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import dpaudit.data.graph_files

    path = _save_npz(tmp_path / "my.npz", _raw())
    read = []
    monkeypatch.setattr(dpaudit.data.graph_files, "read_graph_file", lambda *a, **k: read.append(a))
    out = tmp_path / "model"
    argv = ["train", "--defense", "gcn", "--dataset", str(path), "--out", str(out)]
    assert main(argv) == 2
    line = _one_line_error(capsys, "my.npz: the label domain is not declared; add --dataset-option declare_classes=")
    assert "declare=true" in line
    assert not read and not out.exists()  # nothing read, nothing written
    # a private model lists it with everything else it lacks, in the same one line
    private = [
        "train",
        "--defense",
        "mlp-dp",
        "--epsilon",
        "4",
        "--delta",
        "1e-4",
        "--dataset",
        str(path),
        "--out",
        str(out),
    ]
    assert main(private) == 2
    line = _one_line_error(capsys, "(1) the label domain is not declared; add --dataset-option declare_classes=")
    assert not read and not out.exists()


# --------------------------------------------------------------------------- (b) declared: neutral


def _declared(data: Data, **kwargs):
    return from_data(data, "mine", classes=[0, 1, 2, 3], **kwargs)


def test_the_declared_domain_sets_the_classes_whoever_is_in_the_graph():
    graph = _declared(_raw())
    smaller, _ = without_node(graph, _with_node_0_in_training(graph), node=0)
    assert graph.num_classes == smaller.num_classes == 4
    assert graph.card()["public_facts"]["classes"] == smaller.card()["public_facts"]["classes"] == [0, 1, 2, 3]
    assert int((smaller.data.y == 3).sum()) == 0  # class 3 has no labeled node left: its output stays
    # the harness rebuilt the neighbour from its own raw data, not from the base's fields
    rebuilt = _declared(Data(x=_raw().x[1:], y=_raw().y[1:], edge_index=smaller.data.edge_index))
    assert rebuilt.fingerprint == smaller.fingerprint and rebuilt.num_classes == 4


@pytest.mark.parametrize(
    "name, make, facts",
    [
        (
            "mlp-dp",
            lambda: get_defense("mlp-dp")(epsilon=4.0, delta=1e-4, seed=0, epochs=2, preset="gap", sample_rate=0.1),
            None,
        ),
        ("gcn", lambda: get_defense("gcn")(seed=0, epochs=3), None),
        (
            "dpar-em1",
            lambda: get_defense("dpar-em1")(epsilon=4.0, delta=1e-4, seed=0, epochs=2, num_sources=10, batch_size=20),
            {"num_nodes": N, "num_train": N},
        ),
    ],
)
def test_removing_a_singleton_class_node_is_neutral(name, make, facts, tmp_path):
    graph = _declared(_raw(), public_facts=facts)
    split = _with_node_0_in_training(graph)
    smaller = without_node(graph, split, node=0)
    assert train_and_compare(make, (graph, split), smaller, tmp_path) == {}
    with_0, without_0 = tmp_path / "neighbour-0", tmp_path / "neighbour-1"
    assert leaf_differences(with_0, without_0) == {}
    assert _tensor_shapes(with_0) == _tensor_shapes(without_0)
    meta = json.loads((with_0 / "model.json").read_text())
    assert meta["card"]["dataset"]["num_classes"] == 4
    assert meta["card"]["dataset"]["public_facts"]["classes"] == [0, 1, 2, 3]
    assert any(shape and shape[0] == 4 for shape in _tensor_shapes(with_0).values())  # the output layer's width


# --------------------------------------------------------------------------- the domain itself


def test_declared_values_map_in_declared_order_and_the_mapping_is_public():
    data = _raw()
    data.y = torch.tensor([0, 5, 17])[data.y.clamp(max=2)]  # labels {0, 5, 17}
    graph = from_data(data, "sparse-labels", classes=[17, 0, 5])
    assert graph.num_classes == 3 and graph.card()["public_facts"]["classes"] == [17, 0, 5]
    index = {17: 0, 0: 1, 5: 2}  # declared order
    assert graph.data.y.tolist() == [index[int(v)] for v in data.y]
    count = from_data(_raw(), "counted", classes=5)  # a count: 0..4, class 4 without any node
    assert count.num_classes == 5 and count.public_facts["classes"] == [0, 1, 2, 3, 4]
    inside = from_data(_raw(), "inside", public_facts={"classes": [0, 1, 2, 3]})  # or inside public_facts
    assert inside.num_classes == 4 and inside.public_facts == {"classes": [0, 1, 2, 3], "declared_by": "the user"}
    published = from_data(_raw(), "published", public_facts=True)  # a published graph: its own label set
    assert published.public_facts["classes"] == [0, 1, 2, 3] and published.public_facts["published"]


def test_a_label_outside_the_declared_domain_is_refused():
    with pytest.raises(DatasetError, match=r"labels \[3\] of 1 nodes are outside the declared classes \[0, 1, 2\]"):
        from_data(_raw(), "mine", classes=3)
    for bad, match in ((1, "at least 2 declared classes"), ([0, 0, 1], "repeat a label"), ([-1, 0], ">= 0")):
        with pytest.raises(DatasetError, match=match):
            from_data(_raw(), "mine", classes=bad)


def test_min_class_size_needs_declared_counts():
    with pytest.raises(DatasetError, match="min_class_size compares declared per-class counts"):
        from_data(_raw(), "mine", classes=4, min_class_size=2)
    published = from_data(_raw(), "mine", public_facts=True, min_class_size=2)  # counts published: class 3 goes
    assert published.public_facts["classes"] == [0, 1, 2] and not bool(published.data.label_mask[0])


def test_registry_datasets_declare_their_published_classes(small_graph):
    assert small_graph.public_facts["classes"] == [0, 1, 2]  # csbm: its generator's classes
    graph = load_dataset("csbm", num_nodes=60, num_classes=4, num_features=4, seed=0)
    assert graph.public_facts["classes"] == [0, 1, 2, 3] and graph.card()["public_facts"]["classes"] == [0, 1, 2, 3]


# --------------------------------------------------------------------------- the command line


def test_declare_classes_on_the_command_line(tmp_path, capsys):
    path = _save_npz(tmp_path / "my.npz", _raw())
    base = [
        "train",
        "--defense",
        "mlp-dp",
        "--epsilon",
        "4",
        "--delta",
        "1e-4",
        "--dataset",
        str(path),
        "--set",
        "epochs=2",
        "--set",
        "preset=gap",
        "--set",
        "sample_rate=0.1",
        "--device",
        "cpu",
    ]
    assert main([*base, "--dataset-option", "declare_classes=0,1,2,3", "--out", str(tmp_path / "listed")]) == 0
    assert main([*base, "--dataset-option", "declare_classes=4", "--out", str(tmp_path / "counted")]) == 0
    for name in ("listed", "counted"):
        card = json.loads((tmp_path / name / "model.json").read_text())["card"]["dataset"]
        assert card["num_classes"] == 4 and card["public_facts"]["classes"] == [0, 1, 2, 3]
    capsys.readouterr()
    assert main([*base, "--dataset-option", "declare_classes=0,1,2", "--out", str(tmp_path / "short")]) == 2
    _one_line_error(capsys, "labels [3] of 1 nodes are outside the declared classes [0, 1, 2]")
    assert not (tmp_path / "short").exists()
    assert (
        main(
            [
                *base,
                "--dataset-option",
                "min_class_size=2",
                "--dataset-option",
                "declare_classes=4",
                "--out",
                str(tmp_path / "min"),
            ]
        )
        == 2
    )
    _one_line_error(capsys, "min_class_size compares per-class counts, which this graph does not declare")
