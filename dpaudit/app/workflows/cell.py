"""One study cell — train a defense, attack the released model — run inside a worker."""

from __future__ import annotations

import base64
import copy
import dataclasses
import importlib
import json
import logging
import math
import os
import socket
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from dpaudit.app.workflows.config import StudyConfig, now_iso
from dpaudit.app.workflows.store import CELL_SCHEMA, CELL_SCHEMA_VERSION, load_study_dataset
from dpaudit.errors import DatasetError, DPAuditError
from dpaudit.runtime import atomic_write_json

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- one cell (runs in a worker)


def _attack_kwargs(name: str, config: StudyConfig, seed: int) -> dict[str, Any]:
    import attacks as attack_registry

    known = attack_registry.attack_settings(name)
    settings = dict(config.attack_settings.get(name) or {})
    defaults = {"seed": seed, "device": config.device, "data_root": config.data_root}
    for key, value in defaults.items():
        if key in known and key not in settings and value is not None:
            settings[key] = value
    return settings


_DATASETS: dict[str, Any] = {}


def _cached_dataset(config: StudyConfig, study_dir: str):
    """The study's dataset, loaded once per worker process (a worker runs many cells)."""
    key = json.dumps(
        [config.dataset, config.dataset_options, config.data_root, str(study_dir)], sort_keys=True, default=str
    )
    if key not in _DATASETS:
        _DATASETS.clear()  # one study per worker at a time: keep one graph in memory, not many
        _DATASETS[key] = load_study_dataset(config, study_dir)
    cached = _DATASETS[key]
    # each cell gets its own tensors: nothing a defense or attack does to them reaches the next cell
    return dataclasses.replace(cached, data=cached.data.clone(), info=copy.deepcopy(cached.info))


def _without_artifacts(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "artifacts"}


def _collect_files(root: Path) -> dict[str, str]:
    """Every file under ``root`` as relative path → base64 (JSON-able, so any executor can ship it)."""
    return {
        str(p.relative_to(root)): base64.b64encode(p.read_bytes()).decode("ascii")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run_cell(task: dict[str, Any]) -> dict[str, Any]:
    """Train and attack one cell; returns ``{"record": ..., "files": {...}}`` and never raises.

    ``task`` is plain data (config dict, cell fields, study folder), so it travels to spawn
    workers and Ray tasks alike. Files are returned, not written into the study folder: the
    coordinator writes them atomically (module docstring).

    Args:
        task: the cell's task (plain data).

    Returns:
        The cell's record (``status`` done or failed) and the files to write.
    """
    if task.get("threads"):  # a Ray task: use the CPUs it was given, not every core of the node
        worker_init(int(task["threads"]), die_with_parent=False)  # Ray supervises its own workers
    started = time.perf_counter()
    started_at = now_iso()
    config = StudyConfig.from_dict(task["config"])
    for module in config.modules:  # e.g. a module registering defenses, imported in every worker
        importlib.import_module(module)
    cell = task["cell"]
    epsilon = math.inf if cell["epsilon"] is None else float(cell["epsilon"])
    record: dict[str, Any] = {
        "schema": CELL_SCHEMA,
        "version": CELL_SCHEMA_VERSION,
        "cell_id": cell["cell_id"],
        "config_hash": cell["config_hash"],
        "status": "failed",
        "defense": cell["defense"],
        "epsilon": cell["epsilon"],
        "seed": cell["seed"],
        "dataset": task.get("dataset_summary_short"),
        "split": None,
        "privacy": None,
        "metrics": {},
        "card": {},
        "overrides": config.overrides.get(cell["defense"]) or {},
        "attacks": {},
        "attack_errors": {},
        "attack_seconds": {},
        "query_api": None,
        "canaries": {},
        "canary_errors": {},
        "canary_plan": None,
        "error": None,
        "seconds": None,
        "started_at": started_at,
        "finished_at": None,
        "run_id": task["run_id"],
        "worker": {"host": socket.gethostname(), "pid": os.getpid()},
    }
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dpaudit-cell-") as tmp:
        work = Path(tmp)
        try:
            import attacks as attack_registry
            from dpaudit.app.pipeline import train
            from dpaudit.app.workflows.audit import charges_queries, query_api_finding

            dataset = _cached_dataset(config, task["study_dir"])
            if dataset.fingerprint != task["fingerprint"]:
                raise DatasetError(
                    f"dataset fingerprint {dataset.fingerprint} differs from the study's {task['fingerprint']}"
                )
            trained = train(
                cell["defense"],
                dataset,
                epsilon=epsilon,
                delta=config.delta,
                seed=cell["seed"],
                split=config.split,
                device=config.device,
                data_root=config.data_root,
                overrides=record["overrides"],
                out=work / "model",
            )
            split = trained.split
            record["split"] = trained.metrics.get("split")
            record["privacy"] = trained.model.privacy.to_dict()
            record["metrics"] = {
                "train_accuracy": trained.metrics.get("train_accuracy"),
                "val_accuracy": trained.metrics.get("val_accuracy"),
                "test_accuracy": trained.metrics.get("test_accuracy"),
                "n_train": len(split.train),
                "n_val": len(split.val),
                "n_test": len(split.test),
                "train_seconds": trained.metrics.get("train_seconds"),
            }
            card = trained.model.card
            record["card"] = {
                "method": card.get("method"),
                "hyperparameters": card.get("hyperparameters"),
                "inference": card.get("inference"),
                "target_epsilon": card.get("target_epsilon"),
                "device": trained.model.provenance("device"),
            }
            charged = charges_queries(trained.model)
            releases: dict[str, int] = {}
            charged_releases: dict[str, int] = {}  # of them, over the training graph: charged to the training data
            for name in config.attacks or []:
                attack_start = time.perf_counter()
                # a query-charged model (GAP) is attacked through its own query session: the saved
                # model is unchanged and the session's releases (its query ledger) are one finding
                target = trained.model.query_session() if charged else trained.model
                try:
                    result = attack_registry.run(name, target, dataset, **_attack_kwargs(name, config, cell["seed"]))
                except DPAuditError as exc:  # not applicable to this model / setting
                    record["attack_errors"][name] = f"{type(exc).__name__}: {exc}"
                    continue
                except Exception as exc:  # a bug in one attack must not cost the other attacks
                    log.exception("attack %s failed on cell %s", name, cell["cell_id"])
                    record["attack_errors"][name] = f"{type(exc).__name__}: {exc}"
                    continue
                finally:
                    record["attack_seconds"][name] = time.perf_counter() - attack_start
                    if charged:
                        releases[name] = target.query_ledger.releases
                        charged_releases[name] = target.query_ledger.charged  # over the training graph
                result.save(work / "attacks" / f"{name}.json")
                record["attacks"][name] = _without_artifacts(result.to_dict())
            if charged:
                record["query_api"] = query_api_finding(trained.model, releases, charged_releases)
            _run_canaries(record, config, dataset, cell, epsilon, work, trained.model, split)
            record["status"] = "done"
        except Exception as exc:
            if not isinstance(exc, DPAuditError):
                log.exception("cell %s failed", cell["cell_id"])
            record["error"] = {
                "type": type(exc).__name__,
                "message": str(exc) or type(exc).__name__,
                "traceback": traceback.format_exc(limit=20),
            }
        record["seconds"] = time.perf_counter() - started
        record["finished_at"] = now_iso()
        if record["status"] == "done":
            atomic_write_json(work / "cell.json", record)
            files = _collect_files(work)
    return {"record": record, "files": files}


def _run_canaries(
    record: dict, config: StudyConfig, dataset, cell: dict, epsilon: float, work: Path, model=None, split=None
) -> None:
    """The cell's canary audits (one extra training with canaries per kind), recorded under
    ``record["canaries"][kind]`` without per-canary scores (those are in ``canaries/<kind>.json``);
    ``"auto"``: :func:`_run_refuting_audit`."""
    from dpaudit.app.workflows.canary import canary_audit

    for kind in config.canaries:
        if kind == "auto":
            _run_refuting_audit(record, config, dataset, cell, epsilon, work, model, split)
            continue
        try:
            result = canary_audit(
                cell["defense"],
                dataset,
                epsilon,
                kind=kind,
                canaries=config.canary_count,
                runs=1,
                overrides=record["overrides"],
                split=config.split,
                seed=cell["seed"],
                delta=config.delta,
                device=config.device,
                progress=False,
                out=work / "canaries" / f"{kind}.json",
            )
        except DPAuditError as exc:
            record["canary_errors"][kind] = f"{type(exc).__name__}: {exc}"
            continue
        except Exception as exc:  # a bug in one audit must not cost the cell
            log.exception("canary audit %s failed on cell %s", kind, cell["cell_id"])
            record["canary_errors"][kind] = f"{type(exc).__name__}: {exc}"
            continue
        record["canaries"][kind] = {k: v for k, v in result.items() if k not in ("scores", "included", "run_ids")}


def _run_refuting_audit(
    record: dict, config: StudyConfig, dataset, cell: dict, epsilon: float, work: Path, model, split
) -> None:
    """A private cell's canary audit sized to refute its claim (:mod:`dpaudit.app.workflows.audit.refute`):
    the plan under ``record["canary_plan"]``, the audit re-tested against the cell's model
    (:func:`~dpaudit.app.workflows.audit.canaries.canary_evidence`) under
    ``record["canaries"]["<kind> canaries"]`` — the canary evidence the report's verdict weighs —
    and a plan that cannot refute the claim under ``record["canary_errors"]["auto"]`` (its line
    says what would)."""
    from dpaudit.app.workflows.audit.canaries import canary_evidence, check_canary_results
    from dpaudit.app.workflows.audit.refute import canary_kind, plan_refuting_audit, run_capacity, run_refuting_audit

    if model is None or not model.privacy.is_private or math.isinf(epsilon):
        return
    privacy, overrides, seed = model.privacy, record["overrides"], cell["seed"]
    try:
        kind = canary_kind(cell["defense"], epsilon, overrides)
        capacity = run_capacity(cell["defense"], kind, dataset, split, epsilon, privacy.delta, overrides, seed)
        plan = plan_refuting_audit(
            cell["defense"],
            privacy.epsilon,
            privacy.delta,
            kind=kind,
            capacity=capacity,
            overrides=overrides,
            seconds_per_run=record["metrics"].get("train_seconds"),
        )
        record["canary_plan"] = plan.to_dict()
        if not plan.can_refute:
            record["canary_errors"]["auto"] = plan.line()
            return
        result = run_refuting_audit(
            plan,
            dataset,
            epsilon,
            split=config.split,
            seed=seed,
            delta=privacy.delta,
            overrides=overrides,
            device=config.device,
            out=work / "canaries" / f"{kind}.json",
        )
        record["canaries"].update(canary_evidence(model, check_canary_results(model, [result])))
    except DPAuditError as exc:
        record["canary_errors"]["auto"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug in the audit must not cost the cell
        log.exception("refuting canary audit failed on cell %s", cell["cell_id"])
        record["canary_errors"]["auto"] = f"{type(exc).__name__}: {exc}"


# Library warnings that repeat once per cell and say nothing about the study's validity.
_QUIET_WARNINGS = (
    "Optimal order is the smallest alpha",  # opacus: the RDP bound might be tightened with orders < 1.x
    "Sparse CSR tensor support is in beta",
    "Sparse invariant checks are implicitly disabled",
)


class NotATerminal:
    """A stream that says it is no terminal, whatever it writes to: tqdm draws a bar only on a
    terminal (``disable=None``), so a cell's own bars (training epochs, shadow models) stay off
    the screen while its warnings still reach it. The study draws the one bar a user sees.

    Args:
        stream: the stream written to (e.g. ``sys.stderr``).
    """

    def __init__(self, stream):
        self._stream = stream

    def isatty(self) -> bool:
        """Always ``False``."""
        return False

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def worker_init(threads: int, die_with_parent: bool = True, log_level: int = logging.WARNING) -> None:
    """Set-up of a worker process: share the CPU cores between workers, keep the screen to the
    study's one progress bar and the log readable, leave Ctrl-C to the coordinator (a terminal
    signals the whole process group; the coordinator stops the workers itself, and a worker's
    own KeyboardInterrupt would only print a traceback), and exit when the coordinator dies
    (even by SIGKILL, which runs none of its clean-up).

    Args:
        threads: torch threads of this worker.
        die_with_parent: exit when the coordinator dies (``False`` under Ray, which supervises its workers).
        log_level: level of the root logger in the worker.
    """
    import signal
    import sys
    import threading
    import warnings

    import torch
    from tqdm.auto import tqdm

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr = NotATerminal(sys.stderr)
    # tqdm's default lock holds a multiprocessing semaphore, which a worker killed by an
    # interrupted study could never release (the resource tracker then reports it leaked); a
    # worker draws no bars, so a thread lock is all it needs
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(max(1, threads))
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")  # `dpaudit -v` reaches workers
    for message in _QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    if die_with_parent:
        _exit_with_parent()


def _exit_with_parent(poll_seconds: float = 1.0) -> None:
    """A killed coordinator must not leave workers computing for nobody.

    On Linux the kernel signals us when the parent dies (``PR_SET_PDEATHSIG``); everywhere a
    daemon thread also polls ``getppid()`` — a worker re-parented to init has lost its
    coordinator — and exits within ``poll_seconds``.
    """
    import signal
    import sys
    import threading

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="dpaudit-parent-watch", daemon=True).start()
