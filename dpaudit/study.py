"""Studies: the defense × ε × seed grid — train, attack, collect — resumable and distributable.

A study lives in one folder::

    STUDY_DIR/
      study.json          configuration, dataset summary, command (rewritten on every run)
      results.jsonl       one line per finished cell (status "done" or "failed")
      cells/<cell-id>/    model.safetensors + model.json, cell.json, attacks/<name>.json
      dataset/            only when the study was given an in-memory dataset
      .lock               held while a process runs the study

Guarantees:

* **Atomic cells.** A worker computes a cell in a private temporary folder and returns the
  files; the coordinating process (the only writer of ``STUDY_DIR``) writes them under
  ``cells/.tmp-*``, fsyncs and renames the folder to ``cells/<cell-id>`` in one step, *then*
  appends the cell's line to ``results.jsonl`` (one ``write`` + ``fsync``).
* **Resumable.** Rerunning skips every cell with a ``done`` line; a cell whose folder exists
  but whose line was lost (killed between the rename and the append) is recovered from its
  ``cell.json`` without recomputation; interrupted cells (no folder) are redone; leftover
  temporary folders and a torn last line are cleaned up. Failed cells are retried by
  default (their old line is dropped, so the file keeps one line per cell).
* **Failures stay local.** An exception in a cell is recorded (type, message, traceback) as
  a ``failed`` line and the study goes on; an attack that cannot run on a model is recorded
  in the cell's ``attack_errors`` and the other attacks still run.
* **Cell ids are content-addressed**: ``<defense>_eps-<ε>_seed-<s>_<hash>`` where the hash
  covers everything the cell's result depends on (dataset fingerprint, split, δ, the
  defense's overrides, the attacks and their settings), so a changed configuration never
  reuses stale results.

Executors: ``local`` runs cells in ``jobs`` worker processes (``spawn`` context; in-process
when ``jobs == 1``); ``ray`` submits each cell as a Ray task requesting one GPU when the
cluster has GPUs. Workers send files back to the coordinator, so Ray workers need no shared
filesystem — only dpaudit installed (and, for real datasets, the data under ``data_root``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from dpaudit.errors import ConfigurationError, DatasetError, DPAuditError
from dpaudit.runtime import atomic_write_bytes, atomic_write_json

log = logging.getLogger(__name__)

CELL_SCHEMA = "dpaudit.study-cell"
CELL_SCHEMA_VERSION = 1
STUDY_FILE = "study.json"
RESULTS_FILE = "results.jsonl"
CELLS_DIR = "cells"
DATASET_DIR = "dataset"
EXECUTORS = ("local", "ray")
RECORD_KEYS = (
    "schema", "version", "cell_id", "config_hash", "status", "defense", "epsilon", "seed", "dataset", "split",
    "privacy", "metrics", "card", "overrides", "attacks", "attack_errors", "attack_seconds", "error", "seconds",
    "started_at", "finished_at", "run_id", "worker",
)  # fmt: skip


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(text)).strip("-")[:limit] or "x"


def _eps_value(epsilon) -> float:
    from dpaudit.accounting.spec import validate_epsilon

    return validate_epsilon(epsilon)


def _eps_json(epsilon: float) -> float | None:
    return None if math.isinf(epsilon) else float(epsilon)


def _canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str, allow_nan=False)


def _hash(payload: Any, length: int = 10) -> str:
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:length]


# --------------------------------------------------------------------------- configuration


@dataclass
class StudyConfig:
    """What a study computes.

    Attributes:
        dataset: a dataset name (see :func:`dpaudit.datasets.load_dataset`), or ``"study:dataset"``
            for a dataset saved in the study folder (set by :meth:`Study.__init__` when given a
            :class:`~dpaudit.datasets.GraphDataset`).
        defenses: registered defense names. Non-private defenses (unit ``None``) run at ε = ∞ only.
        epsilons: target ε values (``math.inf`` / ``"inf"`` for no privacy).
        seeds: training seeds; each (defense, ε) runs once per seed.
        attacks: attack names; ``None`` means every available attack.
        dataset_options: keyword arguments of :func:`~dpaudit.datasets.load_dataset` (e.g. csbm's
            ``num_nodes``).
        split: split specification (None: the dataset's default).
        delta: δ, or ``"auto"``.
        overrides: defense name → hyperparameter overrides.
        attack_settings: attack name → settings (see :func:`attacks.attack_settings`). ``seed``
            defaults to the cell's seed, ``device`` and ``data_root`` to the study's.
        device: ``auto``, ``cpu`` or ``cuda``.
        data_root: folder of real datasets (never written).
        title: report title.
    """

    dataset: str
    defenses: list[str]
    epsilons: list[float]
    seeds: list[int] = field(default_factory=lambda: [0])
    attacks: list[str] | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)
    split: str | None = None
    delta: float | str = "auto"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    attack_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "auto"
    data_root: str | None = None
    title: str | None = None

    def __post_init__(self):
        if not self.defenses:
            raise ConfigurationError("a study needs at least one defense")
        if not self.epsilons:
            raise ConfigurationError("a study needs at least one epsilon")
        self.epsilons = [_eps_value(e) for e in self.epsilons]
        if isinstance(self.seeds, int):
            if self.seeds < 1:
                raise ConfigurationError(f"seeds must be >= 1, got {self.seeds}")
            self.seeds = list(range(self.seeds))
        self.seeds = [int(s) for s in self.seeds]
        if not self.seeds:
            raise ConfigurationError("a study needs at least one seed")
        self.defenses = list(dict.fromkeys(self.defenses))
        if self.attacks is not None:
            self.attacks = list(dict.fromkeys(self.attacks))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["epsilons"] = [_eps_json(e) for e in self.epsilons]
        return out

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> StudyConfig:
        data = dict(payload)
        data["epsilons"] = [math.inf if e is None else e for e in data.get("epsilons", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def validate_config(config: StudyConfig) -> StudyConfig:
    """Resolve and check names, overrides and attack settings up front (before any training)."""
    import attacks as attack_registry
    from dpaudit.registry import get_defense

    for defense in config.defenses:
        cls = get_defense(defense)
        overrides = config.overrides.get(defense) or {}
        known = {f for f in cls.hyperparameters_class.__dataclass_fields__}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigurationError(f"{defense}: unknown hyperparameters {sorted(unknown)}; known: {sorted(known)}")
        cls(epsilon=math.inf, delta=config.delta, device="cpu", **overrides)  # ranges and protocol, before work
    extra = set(config.overrides) - set(config.defenses)
    if extra:
        raise ConfigurationError(f"overrides given for defenses not in the study: {sorted(extra)}")
    if config.attacks is None:
        config.attacks = attack_registry.available_attacks()
    for name in config.attacks:
        attack_registry.get_attack(name)
    for name, settings in config.attack_settings.items():
        if name not in config.attacks:
            raise ConfigurationError(f"settings given for attack {name!r}, which is not in the study")
        known = attack_registry.attack_settings(name)
        unknown = set(settings) - set(known)
        if unknown:
            raise ConfigurationError(f"attack {name!r}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
    return config


@dataclass(frozen=True)
class Cell:
    defense: str
    epsilon: float
    seed: int
    cell_id: str
    config_hash: str


def grid(config: StudyConfig, dataset_fingerprint: str) -> list[Cell]:
    """Every cell of the study, in a stable order (defense, ε, seed)."""
    from dpaudit.registry import get_defense

    cells = []
    for defense in config.defenses:
        private = get_defense(defense).unit is not None
        epsilons = sorted(set(config.epsilons)) if private else [math.inf]
        for eps in epsilons:
            for seed in config.seeds:
                identity = {
                    "dataset": config.dataset,
                    "dataset_options": config.dataset_options,
                    "fingerprint": dataset_fingerprint,
                    "split": config.split,
                    "delta": str(config.delta),
                    "defense": defense,
                    "epsilon": _eps_json(eps),
                    "seed": seed,
                    "overrides": config.overrides.get(defense) or {},
                    "attacks": sorted(config.attacks or []),
                    "attack_settings": {a: config.attack_settings.get(a) or {} for a in sorted(config.attacks or [])},
                }
                digest = _hash(identity)
                label = "inf" if math.isinf(eps) else f"{eps:g}"
                cells.append(Cell(defense, eps, seed, f"{_slug(defense)}_eps-{label}_seed-{seed}_{digest}", digest))
    return cells


# --------------------------------------------------------------------------- datasets


def save_dataset(dataset, directory: str | Path) -> None:
    """Write a :class:`~dpaudit.datasets.GraphDataset` as tensors (safetensors) + JSON, never pickle."""
    from safetensors.torch import save as save_safetensors

    directory = Path(directory)
    data = dataset.data
    tensors = {k: getattr(data, k).detach().cpu().contiguous() for k in ("x", "y", "edge_index", "label_mask")}
    if "public_split" in data:
        tensors["public_split"] = data.public_split.detach().cpu().contiguous()
    atomic_write_bytes(directory / "graph.safetensors", save_safetensors(tensors))
    meta = {"name": dataset.name, "num_classes": dataset.num_classes, "fingerprint": dataset.fingerprint,
            "info": dataset.info}  # fmt: skip
    atomic_write_json(directory / "dataset.json", meta)


def load_saved_dataset(directory: str | Path):
    from safetensors.torch import load as load_safetensors
    from torch_geometric.data import Data

    from dpaudit.datasets import GraphDataset, fingerprint

    directory = Path(directory)
    try:
        meta = json.loads((directory / "dataset.json").read_text())
        tensors = load_safetensors((directory / "graph.safetensors").read_bytes())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"cannot read the study's saved dataset in {directory}: {exc}") from None
    data = Data(**tensors, num_nodes=int(tensors["x"].size(0)))
    if fingerprint(data) != meta["fingerprint"]:
        raise DatasetError(f"the study's saved dataset in {directory} does not match its fingerprint")
    return GraphDataset(data, meta["name"], int(meta["num_classes"]), meta["fingerprint"], meta.get("info") or {})


def load_study_dataset(config: StudyConfig, study_dir: str | Path):
    from dpaudit.datasets import load_dataset

    if config.dataset == "study:dataset":
        return load_saved_dataset(Path(study_dir) / DATASET_DIR)
    return load_dataset(config.dataset, root=config.data_root, **config.dataset_options)


def dataset_summary(dataset) -> dict[str, Any]:
    return {
        "name": dataset.name,
        "fingerprint": dataset.fingerprint,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_classes": dataset.num_classes,
        "num_features": dataset.num_features,
        "info": dataset.info,
    }


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
    """
    if task.get("threads"):  # a Ray task: use the CPUs it was given, not every core of the node
        _worker_init(int(task["threads"]))
    started = time.perf_counter()
    started_at = _now()
    config = StudyConfig.from_dict(task["config"])
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
            from dpaudit.pipeline import train

            dataset = load_study_dataset(config, task["study_dir"])
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
                "device": card.get("device"),
            }
            for name in config.attacks or []:
                attack_start = time.perf_counter()
                try:
                    result = attack_registry.run(
                        name, trained.model, dataset, **_attack_kwargs(name, config, cell["seed"])
                    )
                except DPAuditError as exc:  # not applicable to this model / setting
                    record["attack_errors"][name] = f"{type(exc).__name__}: {exc}"
                    continue
                except Exception as exc:  # a bug in one attack must not cost the other attacks
                    log.exception("attack %s failed on cell %s", name, cell["cell_id"])
                    record["attack_errors"][name] = f"{type(exc).__name__}: {exc}"
                    continue
                finally:
                    record["attack_seconds"][name] = time.perf_counter() - attack_start
                result.save(work / "attacks" / f"{name}.json")
                record["attacks"][name] = _without_artifacts(result.to_dict())
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
        record["finished_at"] = _now()
        if record["status"] == "done":
            atomic_write_json(work / "cell.json", record)
            files = _collect_files(work)
    return {"record": record, "files": files}


# Library warnings that repeat once per cell and say nothing about the study's validity.
_QUIET_WARNINGS = (
    "Optimal order is the smallest alpha",  # opacus: the RDP bound might be tightened with orders < 1.x
    "Sparse CSR tensor support is in beta",
    "Sparse invariant checks are implicitly disabled",
)


def _worker_init(threads: int) -> None:
    """Set-up of a worker process: share the CPU cores between workers, keep the log readable."""
    import warnings

    import torch

    torch.set_num_threads(max(1, threads))
    logging.basicConfig(level=logging.WARNING)
    for message in _QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


# --------------------------------------------------------------------------- the study folder


class _StudyLock:
    """Exclusive lock on ``STUDY_DIR/.lock`` (released by the OS even on SIGKILL)."""

    def __init__(self, directory: Path):
        self.path = directory / ".lock"
        self.fh = None

    def __enter__(self):
        import fcntl

        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise DPAuditError(f"{self.path.parent} is being run by another process") from None
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def read_results(study_dir: str | Path) -> list[dict[str, Any]]:
    """Every well-formed line of ``results.jsonl`` (a torn last line is ignored)."""
    path = Path(study_dir) / RESULTS_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.warning("ignoring a malformed line in %s (an interrupted write)", path)
            continue
        if isinstance(rec, dict) and rec.get("schema") == CELL_SCHEMA:
            records.append(rec)
    return records


def _rewrite_results(study_dir: Path, records: list[dict]) -> None:
    text = "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n" for r in records)
    atomic_write_bytes(study_dir / RESULTS_FILE, text.encode("utf-8"))


def _append_result(study_dir: Path, record: dict) -> None:
    line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
    fd = os.open(study_dir / RESULTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _materialise_cell(study_dir: Path, cell_id: str, files: dict[str, str]) -> None:
    """Write a finished cell's files under ``cells/.tmp-*`` and rename the folder into place."""
    cells = study_dir / CELLS_DIR
    final = cells / cell_id
    if final.exists():  # finished before (and recovered): keep the first result
        return
    tmp = cells / f".tmp-{cell_id}-{uuid.uuid4().hex[:8]}"
    for rel, payload in files.items():
        target = (tmp / rel).resolve()
        if tmp.resolve() not in target.parents:
            raise RuntimeError(f"refusing to write {rel!r} outside the cell folder")
        atomic_write_bytes(target, base64.b64decode(payload))
    _fsync_dir(tmp)
    os.replace(tmp, final)
    _fsync_dir(cells)


def _load_cell_record(study_dir: Path, cell_id: str) -> dict | None:
    path = study_dir / CELLS_DIR / cell_id / "cell.json"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return rec if rec.get("status") == "done" and rec.get("cell_id") == cell_id else None


def load_cell_artifacts(study_dir: str | Path, record: dict) -> dict:
    """The record with each attack's image artifacts read back from ``cells/<id>/attacks/``."""
    rec = dict(record)
    folder = Path(study_dir) / CELLS_DIR / str(record.get("cell_id")) / "attacks"
    attacks = {}
    for name, result in (record.get("attacks") or {}).items():
        result = dict(result)
        try:
            full = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
            result["artifacts"] = full.get("artifacts") or {}
        except (OSError, json.JSONDecodeError):
            result["artifacts"] = {}
        attacks[name] = result
    rec["attacks"] = attacks
    return rec


# --------------------------------------------------------------------------- executors


class _Progress:
    def __init__(self, total: int, done: int, failed: int, disable: bool | None):
        self.done, self.failed, self.running = done, failed, 0
        self.bar = tqdm(total=total, initial=done + failed, desc="cells", unit="cell", disable=disable, leave=True)
        self.refresh()

    def refresh(self):
        self.bar.set_postfix_str(f"done={self.done} running={self.running} failed={self.failed}", refresh=True)

    def finished(self, ok: bool):
        if ok:
            self.done += 1
        else:
            self.failed += 1
        self.bar.update(1)
        self.refresh()

    def close(self):
        self.bar.close()


def _failed_record(task: dict, exc: BaseException | str) -> dict:
    cell = task["cell"]
    message = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
    return {
        "schema": CELL_SCHEMA, "version": CELL_SCHEMA_VERSION, "cell_id": cell["cell_id"],
        "config_hash": cell["config_hash"], "status": "failed", "defense": cell["defense"],
        "epsilon": cell["epsilon"], "seed": cell["seed"], "dataset": task.get("dataset_summary_short"),
        "split": None, "privacy": None, "metrics": {}, "card": {}, "overrides": {}, "attacks": {},
        "attack_errors": {}, "attack_seconds": {},
        "error": {"type": "WorkerError" if isinstance(exc, str) else type(exc).__name__, "message": message,
                  "traceback": None},
        "seconds": None, "started_at": None, "finished_at": _now(), "run_id": task["run_id"], "worker": None,
    }  # fmt: skip


def _execute_local(tasks: list[dict], jobs: int, on_result, progress: _Progress) -> None:
    if jobs <= 1:
        for task in tasks:
            progress.running = 1
            progress.refresh()
            on_result(task, run_cell(task))
        progress.running = 0
        return
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=context, initializer=_worker_init, initargs=(threads,)
    ) as pool:
        pending = {pool.submit(run_cell, task): task for task in tasks}
        while pending:
            progress.running = min(jobs, len(pending))
            progress.refresh()
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                task = pending.pop(future)
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    outcome = {"record": _failed_record(task, "the worker process died (out of memory?)"), "files": {}}
                except Exception as exc:  # pickling / transport errors
                    outcome = {"record": _failed_record(task, exc), "files": {}}
                on_result(task, outcome)
    progress.running = 0


def _execute_ray(tasks: list[dict], jobs: int, on_result, progress: _Progress) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigurationError(
            "--executor ray needs Ray, which is not installed: pip install 'dpaudit[ray]' (or use --executor local)"
        ) from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": max(1, jobs)}))  # fmt: skip
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    remote = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=0)(run_cell)
    refs = {remote.remote({**task, "threads": 1}): task for task in tasks}
    log.info("submitted %d cells to Ray (%s GPU per task)", len(refs), gpus)
    while refs:
        progress.running = len(refs)
        progress.refresh()
        ready, _ = ray.wait(list(refs), num_returns=1)
        for ref in ready:
            task = refs.pop(ref)
            try:
                outcome = ray.get(ref)
            except Exception as exc:  # the task's worker died
                outcome = {"record": _failed_record(task, exc), "files": {}}
            on_result(task, outcome)
    progress.running = 0


# --------------------------------------------------------------------------- the study


class Study:
    """A study folder and its configuration. ``Study(config, out).run(jobs=2)``."""

    def __init__(
        self, config: StudyConfig, out: str | Path, dataset=None, command: str | None = None, force: bool = False
    ):
        self.config = config
        self.force = force
        self.dir = Path(out)
        self.command = command
        self._dataset = dataset

    # -- set-up ----------------------------------------------------------------------------
    def _prepare(self) -> tuple[dict, list[Cell]]:
        from dpaudit.datasets import GraphDataset

        if isinstance(self._dataset, GraphDataset):
            validate_config(self.config)
            self.dir.mkdir(parents=True, exist_ok=True)
            save_dataset(self._dataset, self.dir / DATASET_DIR)
            self.config.dataset = "study:dataset"
            dataset = self._dataset
        else:  # a bad dataset or option fails before the folder exists
            dataset = load_study_dataset(self.config, self.dir)
            validate_config(self.config)
            self.dir.mkdir(parents=True, exist_ok=True)
        summary = dataset_summary(dataset)
        cells = grid(self.config, dataset.fingerprint)
        previous = self.dir / STUDY_FILE
        created = _now()
        if previous.exists():
            try:
                old = json.loads(previous.read_text())
            except (OSError, json.JSONDecodeError):
                old = {}
            created = old.get("created") or created
            new_hash = _hash(self.config.to_dict(), 16)
            if old.get("config_hash") not in (None, new_hash) and not self.force:
                raise ConfigurationError(
                    f"{self.dir} holds a study with another configuration (config hash {old.get('config_hash')}, "
                    f"this one {new_hash}); rerun with the same options to resume it, choose another --out, "
                    "or pass --force to re-configure it"
                )
        from dpaudit import __version__
        from dpaudit.runtime import library_versions

        meta = {
            "schema": "dpaudit.study",
            "version": 1,
            "config": self.config.to_dict(),
            "config_hash": _hash(self.config.to_dict(), 16),
            "dataset": summary,
            "cells": [c.cell_id for c in cells],
            "command": self.command,
            "created": created,
            "updated": _now(),
            "dpaudit_version": __version__,
            "versions": {**library_versions(), "python": sys.version.split()[0]},
        }
        atomic_write_json(previous, meta)
        return meta, cells

    def _task(self, cell: Cell, meta: dict, run_id: str) -> dict:
        d = meta["dataset"]
        return {
            "config": meta["config"],
            "cell": {"defense": cell.defense, "epsilon": _eps_json(cell.epsilon), "seed": cell.seed,
                     "cell_id": cell.cell_id, "config_hash": cell.config_hash},
            "study_dir": str(self.dir.resolve()),
            "fingerprint": d["fingerprint"],
            "dataset_summary_short": {k: d[k] for k in ("name", "fingerprint", "num_nodes", "num_edges", "num_classes")},
            "run_id": run_id,
        }  # fmt: skip

    # -- run ---------------------------------------------------------------------------------
    def run(
        self, jobs: int = 1, executor: str = "local", progress: bool | None = None, retry_failed: bool = True
    ) -> StudyResult:
        """Run every unfinished cell (see the module docstring); returns the study's results."""
        if executor not in EXECUTORS:
            raise ConfigurationError(f"unknown executor {executor!r}; use {' or '.join(EXECUTORS)}")
        if int(jobs) < 1:
            raise ConfigurationError(f"--jobs must be >= 1, got {jobs}")
        if executor == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                raise ConfigurationError(
                    "--executor ray needs Ray, which is not installed: pip install 'dpaudit[ray]' "
                    "(or use --executor local)"
                ) from None
        fresh = not self.dir.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        with _StudyLock(self.dir):
            try:
                meta, cells = self._prepare()
            except BaseException:
                if fresh:  # a configuration error leaves no half-made study folder behind
                    shutil.rmtree(self.dir, ignore_errors=True)
                raise
            run_id = uuid.uuid4().hex[:12]
            cells_dir = self.dir / CELLS_DIR
            cells_dir.mkdir(exist_ok=True)
            for leftover in cells_dir.glob(".tmp-*"):  # an interrupted write: its cell is redone
                shutil.rmtree(leftover, ignore_errors=True)

            records = read_results(self.dir)
            latest = {r["cell_id"]: r for r in records}
            wanted = {c.cell_id for c in cells}
            done = {cid for cid, r in latest.items() if r.get("status") == "done"}
            # cells folded in place but whose line was lost: recover, never recompute
            recovered = []
            for cell in cells:
                if cell.cell_id not in done:
                    rec = _load_cell_record(self.dir, cell.cell_id)
                    if rec is not None:
                        recovered.append(rec)
                        done.add(cell.cell_id)
            retry = {cid for cid, r in latest.items() if r.get("status") != "done" and cid in wanted and retry_failed}
            keep = [r for r in records if r["cell_id"] not in retry or r.get("status") == "done"]
            # one line per cell: drop superseded failures and duplicates; rewrite only when needed
            dedup, seen = [], set()
            for r in keep:
                if r["cell_id"] in seen:
                    continue
                if r.get("status") != "done" and r["cell_id"] in done:
                    continue
                seen.add(r["cell_id"])
                dedup.append(r)
            raw = (self.dir / RESULTS_FILE).read_bytes() if (self.dir / RESULTS_FILE).exists() else b""
            expected = "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n" for r in dedup).encode()
            if raw != expected:
                _rewrite_results(self.dir, dedup)
            for rec in recovered:
                if rec["cell_id"] not in seen:
                    _append_result(self.dir, rec)
                    seen.add(rec["cell_id"])
            finished_before = {cid for cid in seen}
            pending = [c for c in cells if c.cell_id not in finished_before]
            failed_kept = sum(1 for c in cells if c.cell_id in finished_before and c.cell_id not in done)
            already_done = sum(1 for c in cells if c.cell_id in done)
            log.info("study %s: %d cells, %d done, %d to run", self.dir, len(cells), already_done, len(pending))

            bar = _Progress(len(cells), already_done, failed_kept, None if progress is None else not progress)

            def on_result(task: dict, outcome: dict) -> None:
                record = {k: outcome["record"].get(k) for k in RECORD_KEYS}
                if record["status"] == "done":
                    try:
                        _materialise_cell(self.dir, record["cell_id"], outcome.get("files") or {})
                    except OSError as exc:
                        record = _failed_record(task, f"could not write the cell folder: {exc}")
                _append_result(self.dir, record)
                bar.finished(record["status"] == "done")

            tasks = [self._task(c, meta, run_id) for c in pending]
            try:
                if executor == "local":
                    _execute_local(tasks, int(jobs), on_result, bar)
                else:
                    _execute_ray(tasks, int(jobs), on_result, bar)
            finally:
                bar.close()
        return StudyResult.load(self.dir)


# --------------------------------------------------------------------------- results


class StudyResult:
    """The finished (and failed) cells of a study folder, renderable as a report."""

    def __init__(self, directory: Path, meta: dict, records: list[dict]):
        self.dir = Path(directory)
        self.meta = meta
        self.records = records

    @classmethod
    def load(cls, directory: str | Path) -> StudyResult:
        directory = Path(directory)
        try:
            meta = json.loads((directory / STUDY_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DPAuditError(f"{directory} is not a study folder (no {STUDY_FILE})") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise DPAuditError(f"cannot read {directory / STUDY_FILE}: {exc}") from None
        wanted = meta.get("cells") or []
        latest = {}
        for rec in read_results(directory):
            if rec["cell_id"] in wanted and (rec["cell_id"] not in latest or rec.get("status") == "done"):
                latest[rec["cell_id"]] = rec
        records = [latest[c] for c in wanted if c in latest]
        return cls(directory, meta, records)

    @property
    def done(self) -> list[dict]:
        return [r for r in self.records if r.get("status") == "done"]

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.records if r.get("status") != "done"]

    @property
    def missing(self) -> list[str]:
        have = {r["cell_id"] for r in self.records}
        return [c for c in self.meta.get("cells") or [] if c not in have]

    def table(self) -> list[dict[str, Any]]:
        """One row per (defense, ε): test accuracy and each attack's AUC (means over seeds)."""
        from reports.aggregate import build_report_data

        data = build_report_data(self.records, self.report_meta())
        rows = []
        for row in data["summary"]:
            out = {"defense": row["defense"], "epsilon": row["epsilon_label"], "epsilon_spent": row["epsilon_spent"],
                   "test_accuracy": row["test_accuracy"]}  # fmt: skip
            for name, s in row["attacks"].items():
                out[f"{name} AUC"] = s["auc"]
            rows.append(out)
        return rows

    def report_meta(self) -> dict[str, Any]:
        config = self.meta.get("config") or {}
        dataset = self.meta.get("dataset") or {}
        return {
            "title": config.get("title") or f"dpaudit study on {dataset.get('name', 'a dataset')}",
            "kind": "compare",
            "dataset": dataset,
            "defenses": config.get("defenses"),
            "attacks": config.get("attacks"),
            "reproducibility": {
                "dpaudit_version": self.meta.get("dpaudit_version"),
                "config_hash": self.meta.get("config_hash"),
                "dataset_fingerprint": dataset.get("fingerprint"),
                "seeds": config.get("seeds"),
                "split": config.get("split") or "dataset default",
                "delta": config.get("delta"),
                "device": config.get("device"),
                "study_dir": str(self.dir),
                "created": self.meta.get("created"),
                "command": self.meta.get("command"),
                "versions": self.meta.get("versions"),
                "config": config,
            },
        }

    def to_html(self, path: str | Path | None = None) -> Path:
        """Write the HTML report (and its JSON sidecar); default ``STUDY_DIR/report.html``."""
        from reports.render import write_report

        path = Path(path) if path is not None else self.dir / "report.html"
        records = [load_cell_artifacts(self.dir, r) if r.get("status") == "done" else r for r in self.records]
        html, _ = write_report(records, self.report_meta(), path)
        return html

    def __repr__(self) -> str:
        return f"StudyResult({str(self.dir)!r}, done={len(self.done)}, failed={len(self.failed)}, missing={len(self.missing)})"


def parse_list(text: str | Iterable, what: str) -> list[str]:
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if str(t).strip()]
    if not items:
        raise ConfigurationError(f"{what} must name at least one value")
    return items
