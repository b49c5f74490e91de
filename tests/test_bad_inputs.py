"""Bad and partial inputs (issue 40): each is one clear line before any work (exit 2), never a
traceback, and nothing of the user's is overwritten."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.cli import main


def _one_line_error(capsys, *fragments: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]


def _graph_file(path, num_nodes=200, labeled=None, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(num_nodes) % 2
    if labeled is not None:
        y[labeled:] = -1
    edges = rng.integers(0, num_nodes, (2, 4 * num_nodes))
    np.savez(path, x=rng.standard_normal((num_nodes, 8)).astype(np.float32), y=y, edge_index=edges)
    return path


# --------------------------------------------------------------------------- seeds


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--defense", "gcn", "--dataset", "csbm", "--out", "OUT"],
        ["attack", "--model", "OUT", "--attack", "mia-threshold", "--out", "OUT.json"],
        ["canary", "--defense", "gcn", "--dataset", "csbm", "--out", "OUT.json"],
        ["demo", "--out", "OUT"],
    ],
)
@pytest.mark.parametrize("seed", ["99999999999999999999999", "-1", str(2**31)])
def test_a_seed_out_of_range_is_one_line(argv, seed, tmp_path, capsys):
    argv = [str(tmp_path / "x") + a.removeprefix("OUT") if a.startswith("OUT") else a for a in argv]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--seed", seed])
    assert stop.value.code == 2
    _one_line_error(capsys, "--seed", "[0, 2**31)")
    assert not (tmp_path / "x").exists()


def test_seeds_in_settings_and_options_are_range_checked(tmp_path, capsys):
    big = str(2**64)
    base = ["train", "--defense", "gcn", "--dataset", "csbm", "--out", str(tmp_path / "m")]
    assert main([*base, "--dataset-option", f"seed={big}"]) == 2
    _one_line_error(capsys, "seed=", "[0, 2**31)")
    compare = ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "inf", "--out", str(tmp_path / "s")]
    assert main([*compare, "--attacks", "mia-threshold", "--attack-set", f"seed={big}"]) == 2
    _one_line_error(capsys, "seed", "[0, 2**31)")
    assert not (tmp_path / "s").exists()


def test_a_defense_refuses_a_seed_torch_cannot_take():
    from dpaudit.errors import ConfigurationError
    from dpaudit.registry import get_defense

    with pytest.raises(ConfigurationError, match="seed must be an integer in"):
        get_defense("gcn")(seed=2**70)
    assert get_defense("gcn")(seed=np.int64(3)).seed == 3


# --------------------------------------------------------------------------- files, splits, lists


def test_a_text_file_named_npz_is_said_not_to_be_an_npz_archive(tmp_path, capsys):
    path = tmp_path / "g.npz"
    path.write_text("hello, this is text\n")
    assert main(["train", "--defense", "gcn", "--dataset", str(path), "--out", str(tmp_path / "m")]) == 2
    line = _one_line_error(capsys, "not a numpy .npz archive (not a zip file)")
    assert "unpickle" not in line
    np.save(tmp_path / "a.npy", np.zeros(3))
    (tmp_path / "a.npy").rename(tmp_path / "a.npz")
    assert main(["train", "--defense", "gcn", "--dataset", str(tmp_path / "a.npz"), "--out", str(tmp_path / "m")]) == 2
    _one_line_error(capsys, "a single numpy array (.npy), not a .npz archive")
    assert not (tmp_path / "m").exists()


def test_a_split_with_no_test_node_is_refused_before_training(tmp_path, capsys):
    path = _graph_file(tmp_path / "g3.npz", labeled=3)
    assert main(["train", "--defense", "gcn", "--dataset", str(path), "--out", str(tmp_path / "m")]) == 2
    _one_line_error(capsys, "leaves no test node", "only 3 labeled nodes")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("option", ["--attacks", "--defenses", "--epsilons"])
def test_an_empty_list_names_its_option(option, tmp_path, capsys):
    argv = {"--attacks": "mia-threshold", "--defenses": "gcn", "--epsilons": "inf"}
    argv[option] = " , "
    flat = [x for k, v in argv.items() for x in (k, v)]
    assert main(["compare", "--dataset", "csbm", *flat, "--out", str(tmp_path / "s")]) == 2
    _one_line_error(capsys, f"{option} was given an empty list")
    assert not (tmp_path / "s").exists()


def test_audit_empty_attacks_names_the_option(tmp_path, capsys):
    assert main(["audit", "--model", str(tmp_path / "no-model"), "--attacks", "", "--out", str(tmp_path / "a.html")]) == 2
    _one_line_error(capsys, "--attacks was given an empty list")


def test_report_and_no_report_contradict(tmp_path, capsys):
    argv = ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "inf", "--attacks", "mia-threshold",
            "--out", str(tmp_path / "s"), "--report", str(tmp_path / "r.html"), "--no-report"]  # fmt: skip
    assert main(argv) == 2
    _one_line_error(capsys, "--report and --no-report contradict each other")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("split,fragment", [("garbage", "unknown split 'garbage'"),
                                            ("per-class:1000,10,10", "class 0 has only")])  # fmt: skip
def test_compare_checks_its_split_before_the_study_folder_exists(split, fragment, tmp_path, capsys):
    path = _graph_file(tmp_path / "G.npz")
    argv = ["compare", "--dataset", str(path), "--defenses", "gcn", "--epsilons", "inf", "--attacks", "mia-threshold",
            "--split", split, "--out", str(tmp_path / "s"), "--jobs", "1"]  # fmt: skip
    assert main(argv) == 2
    _one_line_error(capsys, fragment)
    assert not (tmp_path / "s").exists()
