"""Studies: results.jsonl schema, atomic cells, resume after SIGKILL, failing cells, executors."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dpaudit
from dpaudit.app.workflows.store import CELL_SCHEMA, RECORD_KEYS, RESULTS_FILE, read_results
from dpaudit.app.workflows.study import StudyResult
from dpaudit.auditing.results import AttackResult
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import load

ROOT = Path(__file__).resolve().parents[3]
DPAUDIT = [sys.executable, "-m", "dpaudit.app.cli"]
TINY = {"num_nodes": 150, "num_classes": 3, "num_features": 8, "avg_degree": 5.0, "seed": 3}
THRESHOLD = {"n_boot": 50}


def _lines(study: Path) -> list[dict]:
    return [json.loads(line) for line in (study / RESULTS_FILE).read_text().splitlines() if line.strip()]


def _env() -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


#: a dpgnn degree promise no training graph here keeps: refused when the cell fits
BROKEN_PROMISE = {"degree_bound": "promise", "max_in_degree": 1, "steps": 2}


def test_schema_failing_cell_and_retry(tmp_path):
    """A cell that raises is recorded with its error and the other cells still finish; every
    line follows the schema; the finished cell's folder holds a loadable model and results."""
    study = tmp_path / "study"
    result = dpaudit.compare(
        "csbm",
        defenses=["gcn", "dpgnn"],
        epsilons=[1, "inf"],
        seeds=1,
        attacks=["mia-threshold"],
        dataset_options=TINY,
        # a degree promise the training graph breaks, refused at fit time (a valid setting that the
        # data refutes): both dpgnn cells must fail, gcn must not
        overrides={"gcn": {"epochs": 20}, "dpgnn": BROKEN_PROMISE},
        attack_settings={"mia-threshold": THRESHOLD},
        out=study,
        progress=False,
    )
    lines = _lines(study)
    assert len(lines) == 3 and len({r["cell_id"] for r in lines}) == 3
    for rec in lines:
        assert set(rec) == set(RECORD_KEYS)
        assert rec["schema"] == CELL_SCHEMA and rec["version"] == 1
        assert rec["status"] in ("done", "failed")
    by_defense = {}
    for rec in lines:
        by_defense.setdefault(rec["defense"], []).append(rec)
    assert sorted(r["epsilon"] for r in by_defense["dpgnn"] if r["epsilon"]) == [1.0]
    assert [r["epsilon"] for r in by_defense["gcn"]] == [None]  # non-private: ε = ∞ only
    for rec in by_defense["dpgnn"]:
        assert rec["status"] == "failed"
        assert rec["error"]["type"] == "ConfigurationError" and "max_in_degree" in rec["error"]["message"]
        assert not (study / "cells" / rec["cell_id"]).exists()
    (gcn,) = by_defense["gcn"]
    assert gcn["status"] == "done" and gcn["error"] is None
    assert 0.0 <= gcn["metrics"]["test_accuracy"] <= 1.0 and gcn["metrics"]["n_test"] > 0
    assert gcn["privacy"]["unit"] is None and gcn["privacy"]["epsilon"] is None
    res = gcn["attacks"]["mia-threshold"]
    assert 0.0 <= res["auc"] <= 1.0 and "artifacts" not in res
    folder = study / "cells" / gcn["cell_id"]
    model = load(folder / "model")
    assert model.method == "gcn"
    saved = AttackResult.from_dict(json.loads((folder / "attacks" / "mia-threshold.json").read_text()))
    assert saved.auc == pytest.approx(res["auc"])
    assert json.loads((folder / "cell.json").read_text()) == gcn
    assert len(result.done) == 1 and len(result.failed) == 2 and not result.missing

    # keep_failed: nothing runs again; retry (default): failures rerun, still one line per cell
    again = dpaudit.compare(
        "csbm",
        ["gcn", "dpgnn"],
        [1, "inf"],
        attacks=["mia-threshold"],
        dataset_options=TINY,
        overrides={"gcn": {"epochs": 20}, "dpgnn": BROKEN_PROMISE},
        attack_settings={"mia-threshold": THRESHOLD},
        out=study,
        progress=False,
        retry_failed=False,
    )
    assert _lines(study) == lines and len(again.records) == 3
    dpaudit.compare(
        "csbm",
        ["gcn", "dpgnn"],
        [1, "inf"],
        attacks=["mia-threshold"],
        dataset_options=TINY,
        overrides={"gcn": {"epochs": 20}, "dpgnn": BROKEN_PROMISE},
        attack_settings={"mia-threshold": THRESHOLD},
        out=study,
        progress=False,
    )
    retried = _lines(study)
    assert len(retried) == 3 and len({r["cell_id"] for r in retried}) == 3
    assert [r for r in retried if r["defense"] == "gcn"] == [gcn]  # the finished cell was not recomputed
    assert all(r["run_id"] != lines[0]["run_id"] for r in retried if r["defense"] == "dpgnn")


def test_resume_after_sigkill(tmp_path):
    """Kill a running study with SIGKILL, damage its folder the ways a crash can, rerun the same
    command: finished cells are kept as they were, the rest are computed, one line per cell."""
    study = tmp_path / "killed"
    argv = [
        *DPAUDIT,
        "compare",
        "--dataset",
        "csbm",
        "--defenses",
        "mlp,gcn,sage,mlp-dp",
        "--epsilons",
        "2,inf",
        "--attacks",
        "mia-threshold",
        "--set",
        "epochs=30",
        "--set",
        "mlp-dp.epochs=3",
        "--attack-set",
        "n_boot=50",
        "--out",
        str(study),
        "--no-report",
        *[a for k, v in TINY.items() for a in ("--dataset-option", f"{k}={v}")],
    ]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 150
    try:
        while time.monotonic() < deadline:
            if (study / RESULTS_FILE).exists() and len(read_results(study)) >= 2:
                break
            if proc.poll() is not None:
                pytest.fail(f"the study ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        else:
            pytest.fail("no cell finished within 150 s")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    cells = json.loads((study / "study.json").read_text())["cells"]
    assert len(cells) == 5  # mlp, gcn, sage at ∞; mlp-dp at 2 and ∞
    before = _lines(study)
    assert 2 <= len(before) < len(cells), "the kill must land mid-way"
    # a cell can be renamed into place between the last poll and the kill: its folder is kept
    # and the rerun must recover it, run id and all, rather than compute it again
    in_place = {cid for cid in cells if (study / "cells" / cid / "cell.json").exists()}
    assert {r["cell_id"] for r in before} <= in_place
    assert all(r["status"] == "done" for r in before)

    # a crash between "folder renamed into place" and "line appended": drop the last line;
    # a crash mid-append: a torn line; a crash mid-write of a cell: a leftover temporary folder
    lost = before[-1]
    text = "".join(json.dumps(r) + "\n" for r in before[:-1]) + '{"schema": "dpaudit.study-cell", "cell_id": "torn'
    (study / RESULTS_FILE).write_text(text)
    (study / "cells" / ".tmp-half-written").mkdir()
    ((study / "cells" / ".tmp-half-written") / "cell.json").write_text("{")

    rerun = subprocess.run([*argv, "--jobs", "2"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=200)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = _lines(study)
    ids = [r["cell_id"] for r in after]
    assert sorted(ids) == sorted(cells) and len(ids) == len(set(ids))  # nothing lost, nothing duplicated
    assert all(r["status"] == "done" for r in after)
    by_id = {r["cell_id"]: r for r in after}
    for rec in before:  # finished before the kill: identical record, same run → not recomputed
        assert by_id[rec["cell_id"]] == rec
    for cid in in_place:  # finished folders are recovered, never recomputed
        assert by_id[cid]["run_id"] == before[0]["run_id"]
    new_runs = {r["run_id"] for r in after if r["cell_id"] not in in_place}
    assert new_runs and before[0]["run_id"] not in new_runs
    assert by_id[lost["cell_id"]]["run_id"] == lost["run_id"]  # recovered from its folder
    assert not list((study / "cells").glob(".tmp-*"))
    for cid in cells:
        assert json.loads((study / "cells" / cid / "cell.json").read_text()) == by_id[cid]
    # a third run (in-process: the same CLI) has nothing to do
    from dpaudit.app.cli import main

    assert main(argv[len(DPAUDIT) :]) == 0 and _lines(study) == after
    assert len(StudyResult.load(study).done) == 5


def test_ray_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the optional extra were not installed
    with pytest.raises(ConfigurationError, match=r"dpaudit\[ray\]"):
        dpaudit.compare(
            "csbm",
            ["gcn"],
            ["inf"],
            attacks=["mia-threshold"],
            dataset_options=TINY,
            executor="ray",
            out=tmp_path / "s",
            progress=False,
        )


def test_ray_executor(tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'dpaudit[ray]'); not installed here")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        result = dpaudit.compare(
            "csbm",
            ["gcn", "mlp-dp"],
            [2, "inf"],
            attacks=["mia-threshold"],
            dataset_options=TINY,
            overrides={"gcn": {"epochs": 10}, "mlp-dp": {"epochs": 2}},
            attack_settings={"mia-threshold": THRESHOLD},
            executor="ray",
            jobs=2,
            out=tmp_path / "ray",
            progress=False,
        )
    finally:
        ray.shutdown()
    assert len(result.done) == 3 and not result.failed
    assert {r["worker"]["pid"] for r in result.done} != {os.getpid()}  # ran in Ray workers


@pytest.fixture
def unreachable_ray_cluster(monkeypatch):
    """RAY_ADDRESS naming a cluster that does not answer (Ray's own ConnectionError)."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra; not installed here")

    def unreachable(address=None, **kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {address}")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", unreachable)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")


def test_unreachable_ray_cluster_is_one_clear_error(unreachable_ray_cluster):
    """A configuration error naming the address, not Ray's traceback."""
    from dpaudit.app.workflows.executors import execute_ray

    with pytest.raises(ConfigurationError, match=r"RAY_ADDRESS=10\.0\.0\.1:6379.*ray start --head"):
        execute_ray([], 1, on_result=None, progress=None)


def test_unreachable_ray_cluster_leaves_no_study_folder(tmp_path, unreachable_ray_cluster):
    with pytest.raises(ConfigurationError, match=r"RAY_ADDRESS=10\.0\.0\.1:6379"):
        dpaudit.compare(
            "csbm",
            ["gcn"],
            ["inf"],
            attacks=["mia-threshold"],
            dataset_options=TINY,
            executor="ray",
            out=tmp_path / "s",
            progress=False,
        )
    assert not (tmp_path / "s").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: Ray >= 2.5x authenticates drivers with a token; one of the test's own, passed to the head
#: and the driver alike, leaves the user's ~/.ray/auth_token alone
_RAY_TOKEN = os.urandom(16).hex()


def _ray_env() -> dict:
    return {**_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": _RAY_TOKEN}


@pytest.fixture
def ray_cluster():
    """A local Ray cluster started as a user starts one (``ray start --head``), in its own
    session so that it and every process it starts can be told apart and stopped; yields
    (address, session id). Its temporary folder is short: Ray's sockets live there."""
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'dpaudit[ray]'); not installed here")
    import shutil
    import tempfile

    ray_cli = Path(sys.executable).with_name("ray")
    temp = tempfile.mkdtemp(prefix="dpray-", dir="/tmp")
    log_path = Path(temp) / "head.log"
    with open(log_path, "w") as log_file:  # a file, not a pipe: the head never blocks on a full pipe
        head = subprocess.Popen(
            [
                str(ray_cli),
                "start",
                "--head",
                "--block",
                "--port",
                str(_free_port()),
                "--num-cpus",
                "2",
                "--include-dashboard",
                "false",
                "--disable-usage-stats",
                "--temp-dir",
                temp,
            ],
            env=_ray_env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        started = ""
        while "block forever" not in started and head.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the head prints its address, then says so once every process is up
            started = log_path.read_text()
        address = re.search(r"--address='([^']+)'", started)
        if address is None or "block forever" not in started:
            pytest.fail(f"ray start --head failed: {started[-2000:]}")
        address = address.group(1)
        yield address, head.pid
    finally:
        head.terminate()  # --block: a graceful stop of every process the head started
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # anything left of this cluster's session
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _running_cells(session: int) -> list[int]:
    """Ray workers of the cluster whose session is ``session`` that are running a cell now
    (Ray names a busy worker's process after its task: ``ray::run_cell``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            title = (proc / "cmdline").read_bytes()
            sid = int((proc / "stat").read_text().rpartition(")")[2].split()[3])
        except (OSError, ValueError, IndexError):
            continue
        if sid == session and title.startswith(b"ray::run_cell"):
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow
def test_ray_cluster_study_resumes_after_a_killed_worker(tmp_path, ray_cluster):
    """``compare --executor ray`` against a running cluster (RAY_ADDRESS, as on a real one):
    a Ray worker killed mid-cell fails that cell only; rerunning the same command computes what
    is missing and keeps every cell finished before, unchanged."""
    address, session = ray_cluster
    study = tmp_path / "ray-study"
    argv = [
        *DPAUDIT,
        "compare",
        "--dataset",
        "csbm",
        "--defenses",
        "mlp,gcn,sage",
        "--epsilons",
        "inf",
        "--attacks",
        "mia-threshold",
        "--set",
        "epochs=1000",
        "--attack-set",
        "n_boot=50",
        "--out",
        str(study),
        "--no-report",
        "--executor",
        "ray",
        "--jobs",
        "2",
        *[a for k, v in TINY.items() for a in ("--dataset-option", f"{k}={v}")],
    ]
    env = {**_ray_env(), "RAY_ADDRESS": address}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 120
    try:
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if (study / RESULTS_FILE).exists() and read_results(study):
                busy = _running_cells(session)
                if busy:
                    killed = busy[0]
                    os.kill(killed, signal.SIGKILL)
            time.sleep(0.02)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert killed is not None, f"no cell was running after the first finished: {err[-2000:]}"
    first = _lines(study)
    cells = json.loads((study / "study.json").read_text())["cells"]
    assert len(first) == len(cells) == 3
    failed = [r for r in first if r["status"] == "failed"]
    assert len(failed) == 1, out  # the killed worker's cell, and no other
    assert "died" in failed[0]["error"]["message"].lower() or "crash" in failed[0]["error"]["message"].lower()
    assert not (study / "cells" / failed[0]["cell_id"]).exists()
    finished = [r for r in first if r["status"] == "done"]

    rerun = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = {r["cell_id"]: r for r in _lines(study)}
    assert sorted(after) == sorted(cells) and all(r["status"] == "done" for r in after.values())
    for rec in finished:  # finished before: the same record, not recomputed
        assert after[rec["cell_id"]] == rec
    redone = after[failed[0]["cell_id"]]
    assert redone["run_id"] != failed[0]["run_id"] and redone["worker"]["pid"] not in (killed, proc.pid)
    assert json.loads((study / "cells" / redone["cell_id"] / "cell.json").read_text()) == redone


def test_cli_input_errors(tmp_path, capsys):
    from dpaudit.app.cli import main

    base = ["compare", "--dataset", "csbm", "--epsilons", "1", "--out", str(tmp_path / "x")]
    assert main([*base, "--defenses", "no-such-defense"]) == 2
    at_inf = [*base[:4], "inf", *base[5:]]  # gcn is not private: at a finite ε it is refused first
    assert main([*at_inf, "--defenses", "gcn", "--attacks", "mia-threshold", "--set", "gcn.nope=1"]) == 2
    assert main([*at_inf, "--defenses", "gcn", "--attacks", "mia-threshold", "--attack-set", "nope=1"]) == 2
    assert main(["report", str(tmp_path / "not-a-study")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("dpaudit: error: ") for line in err)
    assert "no-such-defense" in err[0] and "nope" in err[1] and "nope" in err[2] and "not a study" in err[3]


_COORDINATOR = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from dpaudit.app.workflows.cell import worker_init

if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=worker_init,
                               initargs=(1,))
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 600)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for a reaper is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def test_workers_die_with_a_killed_coordinator(tmp_path):
    """SIGKILL on the coordinating process (no clean-up runs) must not leave a worker
    computing for nobody: it exits within seconds."""
    script = tmp_path / "coordinator.py"
    script.write_text(_COORDINATOR)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    try:
        worker = int(proc.stdout.readline())
        assert _alive(worker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its killed coordinator"
    finally:
        proc.kill()


def test_longest_cells_start_first_and_progress_logs_without_a_terminal(caplog):
    from dpaudit.app.workflows.executors import CellProgress, longest_first

    tasks = [{"cell": {"defense": d}} for d in ("mlp", "gap-ndp", "gcn", "unknown-defense", "dpgnn")]
    assert [t["cell"]["defense"] for t in longest_first(tasks)] == ["dpgnn", "unknown-defense", "gap-ndp", "mlp", "gcn"]

    progress = CellProgress(total=4, done=0, failed=0, disable=None)
    progress.log_lines = True  # as without a terminal (pytest captures stderr, so tqdm is silent)
    with caplog.at_level("INFO", logger="dpaudit.progress"):
        progress.finished(True)
        progress.finished(False)
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-1].startswith("cells: 2/4 finished (1 failed)") and "ETA" in lines[-1]
    assert progress.eta_seconds() is not None


def test_progress_logs_one_line_per_finished_cell(caplog):
    """A finished cell whose periodic log line is also due writes one line, not two."""
    from dpaudit.app.workflows.executors import CellProgress

    progress = CellProgress(total=2, done=0, failed=0, disable=None, log_every=0.0)
    progress.log_lines = True  # as without a terminal
    progress.running = 1
    with caplog.at_level("INFO", logger="dpaudit.progress"):
        caplog.clear()
        progress.finished(True)
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    progress.close()


def test_progress_is_info_and_its_last_line_tells_the_truth(caplog):
    """Normal progress is INFO (not WARNING); when the last cell finishes, the line says so and
    no cell is "running" (it said "11/11 finished, 1 running")."""
    from dpaudit.app.workflows.executors import CellProgress

    progress = CellProgress(total=3, done=0, failed=0, disable=None)
    progress.log_lines = True  # as without a terminal
    progress.running = 2  # the executor's count, updated only when it next waits
    with caplog.at_level("DEBUG", logger="dpaudit"):
        for _ in range(3):
            progress.finished(True)
    progress.close()
    records = [r for r in caplog.records if r.name == "dpaudit.progress"]
    assert records and all(r.levelname == "INFO" for r in records)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    lines = [r.getMessage() for r in records]
    assert lines[1].startswith("cells: 2/3 finished (0 failed), 1 running"), lines
    assert lines[-1].startswith("cells: 3/3 finished (0 failed) in ") and "running" not in lines[-1], lines


def test_widths_that_cannot_fit_the_device_are_refused_before_any_cell(tmp_path, monkeypatch):
    """compare checks every defense's first layer against the device's memory once the dataset
    is known, as train does: nothing is trained and no study folder is made."""
    import dpaudit.runtime

    monkeypatch.setattr(dpaudit.runtime, "device_memory", lambda device: 1_000_000)  # 1 MB device
    study = tmp_path / "study"
    with pytest.raises(ConfigurationError, match="hidden"):
        dpaudit.compare(
            "csbm",
            defenses=["gcn"],
            epsilons=["inf"],
            attacks=["mia-threshold"],
            dataset_options=TINY,
            overrides={"gcn": {"hidden": 4096}},
            out=study,
        )
    assert not (study / RESULTS_FILE).exists()
