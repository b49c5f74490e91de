"""``dpaudit train`` and the noise source (issue 46 §1), as a new user runs it: the same command
twice with the same ``--seed`` releases different weights; ``--reproducible-noise`` releases the
same weights, says so on the card and ``inspect`` flags it."""

from __future__ import annotations

import json

import pytest

from dpaudit.app.cli import main
from dpaudit.training.noise import NOISE_ENV, SEEDED_FLAG

SMALL = {
    "mlp-dp": ["--set", "epochs=2"],
    "gcon": ["--set", "encoder_epochs=5"],
    "gap-edp": ["--set", "encoder_epochs=2", "--set", "epochs=2"],
}


def _train(tmp_path, defense: str, seed: int, name: str, *extra: str) -> dict:
    out = tmp_path / name
    data = ["--dataset", "csbm", "--dataset-option", "num_nodes=200", "--split", "random:0.5,0.2,0.3"]
    argv = ["train", "--defense", defense, *data, "--epsilon", "2", "--seed", str(seed), "--device", "cpu"]
    argv += [*SMALL[defense], *extra, "--out", str(out)]
    assert main(argv) == 0
    return json.loads((out / "model.json").read_text())


@pytest.mark.parametrize("defense", sorted(SMALL))
def test_same_command_twice_releases_different_weights(tmp_path, monkeypatch, defense):
    monkeypatch.delenv(NOISE_ENV, raising=False)  # the user's default, not the test suite's seeded noise
    for seed in (0, 7):
        first, second = (_train(tmp_path, defense, seed, f"{seed}-{run}") for run in range(2))
        # the weights, or the owner's record: sound gap-edp's skip head may fall back on its public
        # encoder (K = 0), whose weights read no noisy statistic; its record keeps the noisy release
        paths = [tmp_path / f"{seed}-{run}" / "provenance.safetensors" for run in range(2)]
        records = [path.read_bytes() if path.exists() else b"" for path in paths]
        assert first["weights_sha256"] != second["weights_sha256"] or records[0] != records[1]
        assert first["card"]["noise"] == "secure"


@pytest.mark.parametrize("defense", sorted(SMALL))
def test_reproducible_noise_is_exact_and_carded(tmp_path, monkeypatch, capsys, defense):
    monkeypatch.delenv(NOISE_ENV, raising=False)
    first, second = (_train(tmp_path, defense, 7, f"r{run}", "--reproducible-noise") for run in range(2))
    assert first["weights_sha256"] == second["weights_sha256"]
    assert first["card"]["noise"] == "seeded"
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "r0")]) == 0
    assert SEEDED_FLAG in capsys.readouterr().out
