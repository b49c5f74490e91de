"""The study folder on disk (layout and guarantees: :mod:`dpaudit.app.workflows.study`): saved
dataset, lock, ``results.jsonl`` and atomically materialised cell folders."""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from dpaudit.app.workflows.config import StudyConfig
from dpaudit.errors import DatasetError, DPAuditError
from dpaudit.runtime import atomic_write_bytes, atomic_write_json

log = logging.getLogger(__name__)


CELL_SCHEMA = "dpaudit.study-cell"
CELL_SCHEMA_VERSION = 1
STUDY_FILE = "study.json"
RESULTS_FILE = "results.jsonl"
CELLS_DIR = "cells"
DATASET_DIR = "dataset"
RECORD_KEYS = (
    "schema",
    "version",
    "cell_id",
    "config_hash",
    "status",
    "defense",
    "epsilon",
    "seed",
    "dataset",
    "split",
    "privacy",
    "metrics",
    "card",
    "overrides",
    "attacks",
    "attack_errors",
    "attack_seconds",
    "error",
    "seconds",
    "started_at",
    "finished_at",
    "run_id",
    "worker",
    "canaries",
    "canary_errors",
    "query_api",
    "canary_plan",
)


# --------------------------------------------------------------------------- datasets


def save_dataset(dataset, directory: str | Path) -> None:
    """Write a :class:`~dpaudit.data.datasets.GraphDataset` as tensors (safetensors) + JSON, never pickle.

    Args:
        dataset: the dataset.
        directory: the folder written (``dataset.json`` and tensors).
    """
    from safetensors.torch import save as save_safetensors

    directory = Path(directory)
    data = dataset.data
    tensors = {k: getattr(data, k).detach().cpu().contiguous() for k in ("x", "y", "edge_index", "label_mask")}
    if "public_split" in data:
        tensors["public_split"] = data.public_split.detach().cpu().contiguous()
    atomic_write_bytes(directory / "graph.safetensors", save_safetensors(tensors))
    meta = {
        "name": dataset.name,
        "num_classes": dataset.num_classes,
        "fingerprint": dataset.fingerprint,
        "info": dataset.info,
        "public_facts": dataset.public_facts,
    }
    atomic_write_json(directory / "dataset.json", meta)


def load_saved_dataset(directory: str | Path):
    """Read a dataset written by :func:`save_dataset` (no unpickling).

    Args:
        directory: its folder.

    Returns:
        The :class:`~dpaudit.data.datasets.GraphDataset`.
    """
    from safetensors.torch import load as load_safetensors
    from torch_geometric.data import Data

    from dpaudit.data.datasets import GraphDataset, fingerprint

    directory = Path(directory)
    try:
        meta = json.loads((directory / "dataset.json").read_text())
        tensors = load_safetensors((directory / "graph.safetensors").read_bytes())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"cannot read the study's saved dataset in {directory}: {exc}") from None
    data = Data(**tensors, num_nodes=int(tensors["x"].size(0)))
    if fingerprint(data) != meta["fingerprint"]:
        raise DatasetError(f"the study's saved dataset in {directory} does not match its fingerprint")
    return GraphDataset(
        data,
        meta["name"],
        int(meta["num_classes"]),
        meta["fingerprint"],
        meta.get("info") or {},
        meta.get("public_facts") or {},
    )


def load_study_dataset(config: StudyConfig, study_dir: str | Path):
    """The study's dataset: the copy saved in the study folder (``"study:dataset"``), else loaded by name.

    Args:
        config: the study's configuration.
        study_dir: the study folder.

    Returns:
        The dataset.
    """
    from dpaudit.data.datasets import load_dataset

    if config.dataset == "study:dataset":
        return load_saved_dataset(Path(study_dir) / DATASET_DIR)
    return load_dataset(config.dataset, root=config.data_root, **config.dataset_options)


# --------------------------------------------------------------------------- the study folder


class StudyLock:
    """Exclusive lock on ``STUDY_DIR/.lock`` (released by the OS even on SIGKILL).

    Args:
        directory: the study folder.
    """

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


def _is_number(value) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_problem(rec: Any) -> str | None:
    """Why a parsed ``results.jsonl`` line is not a cell record the report can read (``None``:
    it is one): the fields every reader relies on, with their types.

    Args:
        rec: a parsed JSON line.

    Returns:
        The problem in words, or ``None``.
    """
    if not isinstance(rec, dict):
        return f"a {type(rec).__name__}, not a cell record"
    if rec.get("schema") != CELL_SCHEMA:
        return f"schema {rec.get('schema')!r} is not {CELL_SCHEMA!r}"
    if not isinstance(rec.get("cell_id"), str) or not rec["cell_id"]:
        return "no cell_id"
    if rec.get("status") not in ("done", "failed"):
        return f"status {rec.get('status')!r} is neither done nor failed"
    if not isinstance(rec.get("defense"), str):
        return f"defense {rec.get('defense')!r} is not a name"
    epsilon = rec.get("epsilon")
    if epsilon is not None and not (_is_number(epsilon) and epsilon > 0):
        return f"epsilon {epsilon!r} is not a positive number (or null for ∞)"
    if isinstance(rec.get("seed"), bool) or not isinstance(rec.get("seed"), int):
        return f"seed {rec.get('seed')!r} is not an integer"
    for key in ("dataset", "split", "privacy", "metrics", "card", "overrides", "attacks", "attack_errors", "error"):
        if rec.get(key) is not None and not isinstance(rec[key], dict):
            return f"{key} is a {type(rec[key]).__name__}, not an object"
    for key, value in (rec.get("metrics") or {}).items():
        if value is not None and not isinstance(value, (int, float, str, dict, list)):
            return f"metrics.{key} {value!r} is not a value"
    privacy_epsilon = (rec.get("privacy") or {}).get("epsilon")
    if privacy_epsilon is not None and not _is_number(privacy_epsilon):
        return f"privacy.epsilon {privacy_epsilon!r} is not a number"
    for name, result in (rec.get("attacks") or {}).items():
        if not isinstance(result, dict):
            return f"attacks.{name} is not an object"
        for key in ("auc", "epsilon_lower_bound", "ceiling_auc"):
            value = result.get(key)
            if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)):
                return f"attacks.{name}.{key} {value!r} is not a number"
    return None


def read_results(study_dir: str | Path, skipped: list[dict] | None = None) -> list[dict[str, Any]]:
    """Every readable cell record of ``results.jsonl``, in order.

    A line that is not JSON, or not a valid cell record (:func:`record_problem`), is skipped
    with a warning naming its line number, and described in ``skipped`` when a list is given
    (``{"line", "reason", "cell_id", "text", "torn"}``). Only an unterminated last line is a torn
    write (a process killed while appending); any other bad line is corruption.

    Args:
        study_dir: the study folder.
        skipped: a list that receives a description of each skipped line; ``None``: not collected.

    Returns:
        The cell records.
    """
    path = Path(study_dir) / RESULTS_FILE
    if not path.exists():
        return []
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        torn = number == len(lines) and not text.endswith("\n")
        cell_id = None
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            reason = "a torn last line (an interrupted write)" if torn else "not valid JSON (a corrupted line)"
        else:
            reason = record_problem(rec)
            cell_id = rec.get("cell_id") if isinstance(rec, dict) and isinstance(rec.get("cell_id"), str) else None
            if reason is None:
                records.append(rec)
                continue
            torn = False
        log.warning("%s line %d: %s; skipped (its cell counts as unreadable)", path, number, reason)
        if skipped is not None:
            skipped.append({"line": number, "reason": reason, "cell_id": cell_id, "text": line, "torn": torn})
    return records


def rewrite_results(study_dir: Path, records: list[dict]) -> None:
    """Replace ``results.jsonl`` atomically with ``records``, one JSON line each.

    Args:
        study_dir: the study folder.
        records: the cell records.
    """
    text = "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n" for r in records)
    atomic_write_bytes(study_dir / RESULTS_FILE, text.encode("utf-8"))


def append_result(study_dir: Path, record: dict) -> None:
    """Append one cell record to ``results.jsonl`` as one JSON line, fsynced.

    Args:
        study_dir: the study folder.
        record: the cell record.
    """
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


def materialise_cell(study_dir: Path, cell_id: str, files: dict[str, str]) -> None:
    """Write a finished cell's files under ``cells/.tmp-*`` and rename the folder into place.

    Args:
        study_dir: the study folder.
        cell_id: the cell.
        files: relative path → text of each file.

    Raises:
        RuntimeError: a path would leave the cell's folder.
    """
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


def load_cell_record(study_dir: Path, cell_id: str) -> dict | None:
    """A finished cell's record from ``cells/<id>/cell.json``.

    Args:
        study_dir: the study folder.
        cell_id: the cell.

    Returns:
        The record, or ``None`` when missing, unreadable, not done or of another cell.
    """
    path = study_dir / CELLS_DIR / cell_id / "cell.json"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return rec if rec.get("status") == "done" and rec.get("cell_id") == cell_id else None


def load_cell_artifacts(study_dir: str | Path, record: dict) -> dict:
    """The record with each attack's image artifacts read back from ``cells/<id>/attacks/``.

    Args:
        study_dir: the study folder.
        record: a cell record.

    Returns:
        A copy of the record with the artifacts filled in.
    """
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
