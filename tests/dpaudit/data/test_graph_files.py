"""Your own graph on the command line: ``--dataset PATH`` (.pt or .npz), validated like the
built-in datasets, never unpickled, its path kept out of the public card."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from dpaudit.app.cli import main
from dpaudit.data.datasets import load_dataset, prepare
from dpaudit.errors import DatasetError

#: small_graph's label domain, declared (a graph file must declare it)
DECLARED = ["--dataset-option", "declare_classes=3"]


def _save(graph: Data, path: Path, **extra) -> Path:
    """``graph`` as a graph file (format by suffix), with ``extra`` arrays."""
    arrays = {"x": graph.x, "y": graph.y, "edge_index": graph.edge_index, **extra}
    if path.suffix == ".npz":
        np.savez(path, **{k: v.numpy() if torch.is_tensor(v) else v for k, v in arrays.items()})
    else:
        torch.save(Data(**arrays), path)
    return path


def _one_line_error(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_a_graph_file_loads_as_the_same_graph(small_graph, tmp_path, suffix):
    path = _save(small_graph.data, tmp_path / f"my_graph{suffix}")
    dataset = load_dataset(str(path), declare_classes=3)
    assert dataset.name == "my_graph" and dataset.fingerprint == small_graph.fingerprint
    # a user's graph declares no size by default: only its label domain, which it must declare
    assert dataset.public_facts == {"classes": [0, 1, 2], "declared_by": "the user"}
    assert not dataset.has_public_split
    assert str(tmp_path) not in json.dumps(dataset.card()) and dataset.card()["parameters"] == {
        "file_format": suffix[1:]
    }
    assert dataset.record()["info"]["source"] == str(path.resolve())


def test_self_loops_duplicates_and_one_direction_are_cleaned_as_built_in(tmp_path):
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    edges = torch.tensor([[0, 0, 1, 2, 2, 3], [1, 1, 2, 2, 3, 0]])  # a duplicate, a self loop, one direction only
    path = _save(Data(x=x, y=y, edge_index=edges), tmp_path / "g.npz")
    loaded = load_dataset(str(path), declare_classes="0,1")
    built_in = prepare(Data(x=x, y=y, edge_index=edges), "g", classes=[0, 1])
    assert torch.equal(loaded.data.edge_index, built_in.data.edge_index) and loaded.num_edges == 4


def test_masks_become_the_public_split(small_graph, tmp_path):
    n = small_graph.num_nodes
    masks = {k: torch.zeros(n, dtype=torch.bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][:30], masks["val_mask"][30:60], masks["test_mask"][60:120] = True, True, True
    dataset = load_dataset(str(_save(small_graph.data, tmp_path / "g.pt", **masks)), declare_classes=3)
    codes = dataset.data.public_split
    assert [(codes == k).sum().item() for k in range(3)] == [30, 30, 60]


class _Payload:
    """Unpickling this would write a file: a .pt holding it must be refused without running it."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "unpickled"))


def test_a_pt_file_is_never_unpickled(small_graph, tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"x": small_graph.data.x, "y": small_graph.data.y, "edge_index": _Payload(str(marker))}, path)
    with pytest.raises(DatasetError, match="never unpickles"):
        load_dataset(str(path), declare_classes=3)
    assert not marker.exists()


def test_an_npz_with_object_arrays_is_refused(tmp_path):
    path = tmp_path / "g.npz"
    np.savez(path, x=np.array([[1.0]]), y=np.array([0]), edge_index=np.array([[object()], [object()]], dtype=object))
    with pytest.raises(DatasetError, match="object arrays"):
        load_dataset(str(path), declare_classes=3)


def _bad_files(tmp_path: Path, graph: Data) -> dict[str, Path]:
    n = graph.num_nodes
    nan_x = graph.x.clone()
    nan_x[3, 0] = float("nan")
    files = {
        "missing": tmp_path / "gone.npz",
        "suffix": tmp_path / "graph.csv",
        "corrupt-npz": tmp_path / "corrupt.npz",
        "corrupt-pt": tmp_path / "corrupt.pt",
        "nan": _save(Data(x=nan_x, y=graph.y, edge_index=graph.edge_index), tmp_path / "nan.npz"),
        "range": _save(Data(x=graph.x, y=graph.y, edge_index=torch.tensor([[0], [n]])), tmp_path / "range.npz"),
        "labels": _save(Data(x=graph.x, y=graph.y[:-1], edge_index=graph.edge_index), tmp_path / "labels.pt"),
        "float-edges": _save(Data(x=graph.x, y=graph.y, edge_index=graph.edge_index.float()), tmp_path / "fe.npz"),
        "no-edges": tmp_path / "no_edges.npz",
        "mask-dtype": _save(graph, tmp_path / "mask_dtype.npz", train_mask=np.ones(n, dtype=np.int64)),
        "mask-overlap": _save(graph, tmp_path / "overlap.npz", train_mask=np.ones(n, bool), test_mask=np.ones(n, bool)),
        "mask-alone": _save(graph, tmp_path / "alone.npz", test_mask=np.ones(n, bool)),
    }
    files["suffix"].write_text("a,b\n")
    files["corrupt-npz"].write_bytes(b"PK\x03\x04 not really a zip")
    files["corrupt-pt"].write_bytes(b"\x80\x02 truncated")
    np.savez(files["no-edges"], x=graph.x.numpy(), y=graph.y.numpy())
    return files


@pytest.mark.parametrize(
    "case,fragment",
    [
        ("missing", "does not exist"),
        ("suffix", "unknown suffix '.csv'"),
        ("corrupt-npz", "not a readable .npz file"),
        ("corrupt-pt", "not a readable torch.save file"),
        ("nan", "NaN or infinite"),
        ("range", "outside 0..299"),
        ("labels", "one label per node"),
        ("float-edges", "integer node indices"),
        ("no-edges", "missing edge_index"),
        ("mask-dtype", "train_mask must be a bool vector"),
        ("mask-overlap", "test_mask overlaps"),
        ("mask-alone", "test_mask given without train_mask"),
    ],
)
def test_a_bad_graph_file_is_one_line_before_any_work(case, fragment, small_graph, tmp_path, capsys):
    path = _bad_files(tmp_path, small_graph.data)[case]
    out = tmp_path / "model"
    assert main(["train", "--defense", "gcn", "--dataset", str(path), *DECLARED, "--out", str(out)]) == 2
    _one_line_error(capsys, fragment)
    assert not out.exists()


@pytest.mark.parametrize(
    "option,fragment",
    [
        ("num_nodes=5", "unknown graph file options ['num_nodes']; known: declare, declare_classes, declare_num_nodes"),
        ("declare_classes=0,0,1", "declared classes [0, 0, 1] repeat a label"),
        ("declare=maybe", "declare='maybe' must be true or false"),
        ("declare_num_nodes=0", "declare_num_nodes=0 must be an integer >= 1"),
    ],
)
def test_graph_file_options_are_checked_before_reading(option, fragment, small_graph, tmp_path, capsys):
    path = _save(small_graph.data, tmp_path / "g.npz")
    declared = [] if option.startswith("declare_classes") else DECLARED
    argv = ["train", "--defense", "gcn", "--dataset", str(path), *declared, "--dataset-option", option]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 2
    _one_line_error(capsys, fragment)


def test_delta_auto_on_an_undeclared_file_says_how_to_proceed(small_graph, tmp_path, capsys):
    path = _save(small_graph.data, tmp_path / "g.npz")
    base = [
        "train",
        "--defense",
        "mlp-dp",
        "--epsilon",
        "4",
        "--dataset",
        str(path),
        *DECLARED,
        "--set",
        "epochs=2",
        "--set",
        "preset=gap",
        "--device",
        "cpu",
    ]
    assert main([*base, "--out", str(tmp_path / "auto")]) == 2
    _one_line_error(capsys, "pass --delta D (below 1/its nodes), or --dataset-option declare=true")
    assert not (tmp_path / "auto").exists()
    # a given δ needs no declared size (the sampling rate still must not come from the graph)
    assert main([*base, "--delta", "1e-4", "--set", "sample_rate=0.1", "--out", str(tmp_path / "given")]) == 0
    spec = json.loads((tmp_path / "given" / "model.json").read_text())["privacy"]
    assert spec["delta"] == 1e-4 and spec["public_facts"] == {"classes": [0, 1, 2], "declared_by": "the user"}
    # declared published sizes: δ = auto below 1/300 nodes, recorded as the user's declaration
    assert main([*base, "--dataset-option", "declare=true", "--out", str(tmp_path / "declared")]) == 0
    spec = json.loads((tmp_path / "declared" / "model.json").read_text())["privacy"]
    assert spec["delta"] == 1e-3 and spec["public_facts"]["num_nodes"] == 300
    assert spec["public_facts"]["declared_by"].startswith("the user")


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_train_then_audit_a_graph_file_end_to_end(suffix, small_graph, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _save(small_graph.data, tmp_path / f"my_graph{suffix}")
    model = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                f"./my_graph{suffix}",
                *DECLARED,
                "--set",
                "epochs=5",
                "--device",
                "cpu",
                "--out",
                "model",
            ]
        )
        == 0
    )
    public = (model / "model.json").read_text()
    assert '"name": "my_graph"' in public and str(tmp_path) not in public and "my_graph" + suffix not in public
    assert str(tmp_path / f"my_graph{suffix}") in (model / "provenance.json").read_text()
    capsys.readouterr()
    quick = ["audit", "--model", str(model), "--quick", "--attacks", "mia-threshold,link-steal"]
    assert main([*quick, "--out", "a.html"]) == 0  # the recorded path, by default
    out = capsys.readouterr().out
    assert "on my_graph" in out and "mia-threshold" in out and (tmp_path / "a.html").is_file()
    assert "no valid ε bound" not in out  # the default split of a file without masks is random

    moved = tmp_path / "elsewhere" / f"g{suffix}"
    moved.parent.mkdir()
    (tmp_path / f"my_graph{suffix}").rename(moved)
    assert main([*quick, "--out", "b.html"]) == 2
    _one_line_error(capsys, "which is no longer there: pass --dataset PATH")
    assert main([*quick, "--dataset", str(moved), "--out", "b.html"]) == 0  # the same graph, given again
    capsys.readouterr()

    changed = small_graph.data.clone()
    changed.x[0] += 1.0
    _save(changed, tmp_path / f"my_graph{suffix}")
    assert main([*quick, "--out", "c.html"]) == 2
    _one_line_error(capsys, "changed since the model was trained")
    assert main([*quick, "--dataset", f"my_graph{suffix}", "--out", "c.html"]) == 2
    _one_line_error(capsys, "not the same graph")
    assert not (tmp_path / "c.html").exists()


def test_audit_without_the_owners_record_asks_for_the_file(small_graph, tmp_path, capsys):
    path = _save(small_graph.data, tmp_path / "cora.npz")  # a stem that is also a registry name
    model = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                str(path),
                *DECLARED,
                "--set",
                "epochs=2",
                "--device",
                "cpu",
                "--out",
                str(model),
            ]
        )
        == 0
    )
    (model / "provenance.json").unlink()
    (model / "metrics.json").unlink()
    capsys.readouterr()
    assert main(["audit", "--model", str(model), "--out", str(tmp_path / "a.html")]) == 2
    _one_line_error(capsys, "trained on the graph file 'cora', whose path is only in the owner's record")


def test_compare_takes_a_graph_file(small_graph, tmp_path, capsys):
    path = _save(small_graph.data, tmp_path / "g.npz")
    argv = [
        "compare",
        "--dataset",
        str(path),
        *DECLARED,
        "--defenses",
        "gcn",
        "--epsilons",
        "inf",
        "--attacks",
        "mia-threshold",
        "--set",
        "epochs=2",
        "--jobs",
        "1",
        "--no-report",
        "--out",
        str(tmp_path / "s"),
    ]
    assert main(argv) == 0
    record = json.loads((tmp_path / "s" / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "done", record
