"""Progress a person can see (dpaudit.progress): a bar on a terminal, a periodic INFO line
otherwise, and ``dpaudit train`` uses both."""

from __future__ import annotations

import fcntl
import logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from dpaudit.app.cli import main
from dpaudit.progress import load_factor, log_progress, steps, threads_for_load

ROOT = Path(__file__).resolve().parents[3]


def test_without_a_terminal_progress_is_logged_at_info(caplog):
    with caplog.at_level(logging.DEBUG, logger="dpaudit.progress"):
        assert list(steps(4, "quiet")) == [0, 1, 2, 3]  # not asked for: nothing logged
        assert not caplog.records
        with log_progress(every=0.0):
            assert list(steps(3, "fit", unit="epoch")) == [0, 1, 2]
    lines = [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.INFO for r in caplog.records)
    assert lines[0].startswith("fit: epoch 1/3 (33 %)") and "left" in lines[0]
    assert lines[-1].startswith("fit: 3/3 epochs done in ")  # the last line says it finished


def test_train_logs_its_progress_without_a_terminal(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="dpaudit.progress"):
        code = main(
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                "csbm",
                "--set",
                "epochs=5",
                "--device",
                "cpu",
                "--out",
                str(tmp_path / "m"),
            ]
        )
    assert code == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "dpaudit.progress"]
    assert lines[0].startswith("training gcn on csbm") and any(
        line.startswith("gcn: 5/5 epochs done") for line in lines
    )
    # the estimate comes first, before any step: at the load it read, and on an idle machine
    assert re.search(
        r"-> \S+: about \d+ s here \(load [\d.]+ on \d+ core\(s\), \d+ torch thread\(s\); about \d+ s on an idle",
        lines[0],
    ), lines[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("dpaudit.progress")]


def test_train_draws_a_bar_on_a_terminal(tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # tqdm draws nothing 0 columns wide
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpaudit.app.cli",
            "train",
            "--defense",
            "gcn",
            "--dataset",
            "csbm",
            "--set",
            "epochs=400",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "m"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=600) == 0
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "gcn:" in text and "epoch" in text and "/400" in text, text[-2000:]


def test_the_estimate_and_the_threads_follow_the_load(monkeypatch):
    """The load correction (dpaudit.progress): the factor by which an idle machine's seconds stretch
    and the torch threads worth running, at a load of 0, 1 and 13 on 2 cores."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for load, factor, threads in ((0.0, 1.0, 2), (1.0, 1.0, 1), (13.0, 7.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert load_factor() == factor and threads_for_load(2) == threads
        assert threads_for_load(1) == 1


def test_the_train_guess_scales_with_the_graph_and_the_epochs():
    """``train``'s up-front guess (dpaudit.app.workflows.audit.plan.guess_train_seconds): the start
    cost plus a per-node cost times the defense's declared relative cost and the epochs asked over
    its defaults."""
    from dpaudit.app.workflows.audit.plan import TRAIN_NODE_SECONDS, TRAIN_START_SECONDS, guess_train_seconds
    from dpaudit.training.registry import get_defense

    gcn = get_defense("gcn")
    base = guess_train_seconds(gcn(epsilon="inf", device="cpu"), 1000)
    assert base == TRAIN_START_SECONDS + TRAIN_NODE_SECONDS * gcn.relative_cost * 1000
    doubled = guess_train_seconds(gcn(epsilon="inf", device="cpu", epochs=400), 1000)
    assert doubled - TRAIN_START_SECONDS == pytest.approx(2 * (base - TRAIN_START_SECONDS))
    assert guess_train_seconds(gcn(epsilon="inf", device="cpu"), 4000) > base
