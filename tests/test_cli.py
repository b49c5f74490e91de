"""The CLI: train → inspect round trip, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dpaudit.cli import main


def test_train_and_inspect(tmp_path, capsys):
    out = tmp_path / "model"
    code = main(
        ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "4", "--seed", "1", "--split", "random:0.6,0.2,0.2",
         "--set", "epochs=3", "--set", "hidden=16", "--device", "cpu", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("defense", "dataset", "seed", "test_accuracy", "train_accuracy", "train_seconds", "privacy"):
        assert key in metrics
    assert metrics["privacy"]["epsilon"] <= 4 and metrics["privacy"]["unit"] == "node" and metrics["privacy"]["sound"]
    card = json.loads((out / "model.json").read_text())["card"]
    assert card["hyperparameters"]["hidden"] == 16 and card["split"]["spec"] == "random:0.6,0.2,0.2"
    assert main(["inspect", str(out)]) == 0
    assert "mlp-dp" in capsys.readouterr().out


def test_defense_help_lists_hyperparameters(capsys):
    assert main(["train", "--defense", "mlp-dp", "--help"]) == 0
    out = capsys.readouterr().out
    assert "max_grad_norm" in out and "batch_size" in out


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["train", "--defense", "nope", "--dataset", "csbm", "--out", "x"], "unknown defense"),
        (["train", "--defense", "gcn", "--dataset", "nope", "--out", "x"], "unknown dataset"),
        (["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "0", "--out", "x"], "epsilon"),
        (
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "1", "--delta", "1.5", "--out", "x"],
            "delta",
        ),
        (
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--set", "bogus=1", "--out", "x"],
            "unknown hyperparameter",
        ),
        (["train", "--defense", "mlp-dp", "--dataset", "csbm", "--set", "epochs=many", "--out", "x"], "epochs"),
        (["train", "--defense", "gcn", "--dataset", "csbm", "--split", "sideways", "--out", "x"], "unknown split"),
        (["inspect", "/definitely/not/here"], "not a released-model directory"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(argv, fragment, tmp_path, capsys):
    argv = [a if a != "x" else str(tmp_path / "x") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err


def test_console_script_error_contract(tmp_path):
    """End to end through a fresh interpreter: one line on stderr, exit status 2."""
    argv = ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "-3", "--out", str(tmp_path / "m")]
    proc = subprocess.run([sys.executable, "-m", "dpaudit.cli", *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "epsilon" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "dpaudit.cli", "train", "--bogus"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_datasets_command(capsys, data_root):
    assert main(["datasets", "--data-root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert "csbm" in out and "cora_ml" in out
