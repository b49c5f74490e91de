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

import contextlib
import json
import logging
import math
import shutil
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from dpaudit.app.outputs import check_report_paths
from dpaudit.app.workflows.audit.formatting import format_seconds
from dpaudit.app.workflows.audit.plan import WORKER_START_SECONDS, guess_cell_seconds
from dpaudit.app.workflows.config import (
    Cell,
    StudyConfig,
    content_hash,
    dataset_summary,
    epsilon_json,
    grid,
    now_iso,
    validate_config,
)
from dpaudit.app.workflows.executors import (
    EXECUTORS,
    CellProgress,
    connect_ray,
    execute_local,
    execute_ray,
    failed_record,
    longest_first,
)
from dpaudit.app.workflows.store import (
    CELLS_DIR,
    DATASET_DIR,
    RECORD_KEYS,
    RESULTS_FILE,
    STUDY_FILE,
    StudyLock,
    append_result,
    load_cell_artifacts,
    load_cell_record,
    load_study_dataset,
    materialise_cell,
    read_results,
    rewrite_results,
    save_dataset,
)
from dpaudit.auditing.verdict import StudyVerdict, study_verdict
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.progress import load_factor, load_note
from dpaudit.runtime import atomic_write_json

log = logging.getLogger(__name__)
progress_log = logging.getLogger("dpaudit.progress")


# --------------------------------------------------------------------------- the study


class Study:
    """A study folder and its configuration. ``Study(config, out).run(jobs=2)``.

    Args:
        config: the study's configuration.
        out: the study folder.
        dataset: the loaded dataset; ``None``: loaded from the configuration.
        command: the command line that made the study (recorded).
        force: reuse a folder of another kind.
        made_by: the command that made the study (``"compare"``, ``"demo"``).
    """

    def __init__(
        self,
        config: StudyConfig,
        out: str | Path,
        dataset=None,
        command: str | None = None,
        force: bool = False,
        made_by: str = "compare",
    ):
        self.config = config
        self.force = force
        self.made_by = made_by
        self.dir = Path(out)
        self.command = command
        self._dataset = dataset

    # -- set-up ----------------------------------------------------------------------------
    def _prepare(self) -> tuple[dict, list[Cell]]:
        from dpaudit.data.datasets import GraphDataset

        if isinstance(self._dataset, GraphDataset):
            validate_config(self.config, self._dataset)
            self.dir.mkdir(parents=True, exist_ok=True)
            save_dataset(self._dataset, self.dir / DATASET_DIR)
            self.config.dataset = "study:dataset"
            dataset = self._dataset
        else:  # a bad dataset or option fails before the folder exists
            dataset = load_study_dataset(self.config, self.dir)
            validate_config(self.config, dataset)
            self.dir.mkdir(parents=True, exist_ok=True)
        summary = dataset_summary(dataset)
        cells = grid(self.config, dataset.fingerprint)
        previous = self.dir / STUDY_FILE
        created = now_iso()
        if previous.exists():
            try:
                old = json.loads(previous.read_text())
            except (OSError, json.JSONDecodeError):
                old = {}
            created = old.get("created") or created
            new_hash = content_hash(self.config.to_dict(), 16)
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
            "config_hash": content_hash(self.config.to_dict(), 16),
            "dataset": summary,
            "cells": [c.cell_id for c in cells],
            "command": self.command,
            "made_by": self.made_by,
            "created": created,
            "updated": now_iso(),
            "dpaudit_version": __version__,
            "versions": {**library_versions(), "python": sys.version.split()[0]},
        }
        atomic_write_json(previous, meta)
        return meta, cells

    def _task(self, cell: Cell, meta: dict, run_id: str) -> dict:
        d = meta["dataset"]
        return {
            "config": meta["config"],
            "cell": {
                "defense": cell.defense,
                "epsilon": epsilon_json(cell.epsilon),
                "seed": cell.seed,
                "cell_id": cell.cell_id,
                "config_hash": cell.config_hash,
            },
            "study_dir": str(self.dir.resolve()),
            "fingerprint": d["fingerprint"],
            "dataset_summary_short": {
                k: d[k] for k in ("name", "fingerprint", "num_nodes", "num_edges", "num_classes")
            },
            "run_id": run_id,
        }

    def _announce(self, meta: dict, pending: int, jobs: int) -> float | None:
        """Say, before the first cell starts, how long the cells left should take here: a guess
        from the graph's size (:func:`~dpaudit.app.workflows.audit.plan.guess_cell_seconds`) spread
        over the workers and stretched by the machine's load; the ETA follows the cells after."""
        if not pending:
            return None
        d = meta["dataset"]
        cell = guess_cell_seconds(
            self.config.attacks,
            self.config.attack_settings or {},
            int(d["num_nodes"]),
            int(d["num_features"]),
            int(d["num_edges"]),
        )
        workers = max(1, min(jobs, pending))
        seconds = (WORKER_START_SECONDS + cell * math.ceil(pending / workers)) * load_factor(threads=workers)
        progress_log.info(
            "study: %d cell(s) to run on %d worker(s), about %s (%s; a guess from the graph's size until a cell "
            "finishes, then the ETA follows the cells)",
            pending,
            workers,
            format_seconds(seconds),
            load_note(),
        )
        return seconds

    # -- run ---------------------------------------------------------------------------------
    def run(
        self, jobs: int = 1, executor: str = "local", progress: bool | None = None, retry_failed: bool = True
    ) -> StudyResult:
        """Run every unfinished cell (see the module docstring); returns the study's results.

        Args:
            jobs: cells run at once, >= 1.
            executor: ``"local"`` or ``"ray"``.
            progress: show a progress bar; ``None``: when stderr is a terminal.
            retry_failed: rerun cells that failed before.

        Returns:
            The study's results.

        Raises:
            ConfigurationError: unknown executor, ``jobs`` < 1, or Ray unavailable.
        """
        if executor not in EXECUTORS:
            raise ConfigurationError(f"unknown executor {executor!r}; use {' or '.join(EXECUTORS)}")
        if int(jobs) < 1:
            raise ConfigurationError(f"--jobs must be >= 1, got {jobs}")
        if executor == "ray":  # the extra and the cluster are checked before anything is written
            connect_ray(int(jobs))
        fresh = not self.dir.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        with StudyLock(self.dir):
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

            skipped: list[dict] = []
            records = read_results(self.dir, skipped)
            keep_aside(self.dir, skipped)
            latest = {r["cell_id"]: r for r in records}
            wanted = {c.cell_id for c in cells}
            done = {cid for cid, r in latest.items() if r.get("status") == "done"}
            # cells folded in place but whose line was lost: recover, never recompute
            recovered = []
            for cell in cells:
                if cell.cell_id not in done:
                    rec = load_cell_record(self.dir, cell.cell_id)
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
                rewrite_results(self.dir, dedup)
            for rec in recovered:
                if rec["cell_id"] not in seen:
                    append_result(self.dir, rec)
                    seen.add(rec["cell_id"])
            finished_before = {cid for cid in seen}
            pending = [c for c in cells if c.cell_id not in finished_before]
            failed_kept = sum(1 for c in cells if c.cell_id in finished_before and c.cell_id not in done)
            already_done = sum(1 for c in cells if c.cell_id in done)
            log.info("study %s: %d cells, %d done, %d to run", self.dir, len(cells), already_done, len(pending))

            guess = self._announce(meta, len(pending), int(jobs))
            bar = CellProgress(len(cells), already_done, failed_kept, None if progress is None else not progress)
            bar.guess_seconds = guess

            interrupts = _Interrupts()

            def on_result(task: dict, outcome: dict) -> None:
                with interrupts.recording():
                    record_cell(task, outcome)

            def record_cell(task: dict, outcome: dict) -> None:
                record = {k: outcome["record"].get(k) for k in RECORD_KEYS}
                if record["status"] == "done":
                    try:
                        materialise_cell(self.dir, record["cell_id"], outcome.get("files") or {})
                    except OSError as exc:
                        record = failed_record(task, f"could not write the cell folder: {exc}")
                append_result(self.dir, record)
                bar.finished(record["status"] == "done")

            tasks = longest_first([self._task(c, meta, run_id) for c in pending])
            try:
                with interrupts.installed():
                    if executor == "local":
                        execute_local(tasks, int(jobs), on_result, bar)
                    else:
                        execute_ray(tasks, int(jobs), on_result, bar)
            except KeyboardInterrupt:
                bar.running = 0
                bar.close()
                log.warning(
                    "study interrupted: %d of %d cells kept in %s; rerun the same command to resume",
                    bar.done + bar.failed,
                    len(cells),
                    self.dir,
                )
                raise
            bar.close()
        return StudyResult.load(self.dir)


def keep_aside(study_dir: Path, skipped: list[dict]) -> None:
    """Corrupted lines of ``results.jsonl`` (not a torn last line, which is a write the process
    never finished) are copied to ``results.unreadable.jsonl`` before a run rewrites the file
    and redoes their cells: nothing the user had is lost.

    Args:
        study_dir: the study folder.
        skipped: the skipped lines described by :func:`read_results`.
    """
    corrupted = [s for s in skipped if not s.get("torn")]
    if not corrupted:
        return
    kept = study_dir / "results.unreadable.jsonl"
    with kept.open("a", encoding="utf-8") as fh:
        for s in corrupted:
            fh.write(s["text"].rstrip("\n") + "\n")
    log.warning(
        "%d unreadable line(s) of %s kept in %s; their cells are run again",
        len(corrupted),
        study_dir / RESULTS_FILE,
        kept,
    )


class _Interrupts:
    """While a study runs, Ctrl-C (SIGINT) and ``kill PID`` (SIGTERM, a batch system's stop)
    both raise KeyboardInterrupt: workers are killed, finished cells kept. Inside
    :meth:`recording` (writing one finished cell's folder and its results line, milliseconds)
    the interrupt waits for the write to end, so a stop never leaves a half-written cell.
    Only the main thread can install handlers; elsewhere the defaults stay."""

    def __init__(self):
        self._recording = False
        self._pending = False

    def _handle(self, signum, frame):
        if self._recording:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def recording(self):
        self._recording = True
        try:
            yield
        finally:
            self._recording = False
            if self._pending:
                self._pending = False
                raise KeyboardInterrupt


# --------------------------------------------------------------------------- results


class StudyResult:
    """The finished (and failed) cells of a study folder, renderable as a report.

    Args:
        directory: the study folder.
        meta: the content of ``study.json``.
        records: the cell records.
    """

    def __init__(self, directory: Path, meta: dict, records: list[dict]):
        self.dir = Path(directory)
        self.meta = meta
        self.records = records
        #: the lines of ``results.jsonl`` that could not be read (:func:`read_results`' ``skipped``)
        self.skipped_lines: list[dict] = []

    @classmethod
    def load(cls, directory: str | Path) -> StudyResult:
        """Read a study folder's results.

        Args:
            directory: the study folder.

        Returns:
            The results.

        Raises:
            DPAuditError: the folder holds no readable ``study.json``.
        """
        directory = Path(directory)
        try:
            meta = json.loads((directory / STUDY_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DPAuditError(f"{directory} is not a study folder (no {STUDY_FILE})") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise DPAuditError(f"cannot read {directory / STUDY_FILE}: {exc}") from None
        wanted = meta.get("cells") or []
        latest = {}
        skipped: list[dict] = []
        for rec in read_results(directory, skipped):
            if rec["cell_id"] in wanted and (rec["cell_id"] not in latest or rec.get("status") == "done"):
                latest[rec["cell_id"]] = rec
        records = [latest[c] for c in wanted if c in latest]
        result = cls(directory, meta, records)
        result.skipped_lines = skipped
        return result

    @property
    def done(self) -> list[dict]:
        return [r for r in self.records if r.get("status") == "done"]

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.records if r.get("status") != "done"]

    @property
    def missing(self) -> list[str]:
        """Cells of the study with no readable line (not run yet, or their line unreadable)."""
        have = {r["cell_id"] for r in self.records}
        return [c for c in self.meta.get("cells") or [] if c not in have]

    @property
    def unreadable(self) -> int:
        """How many of the :attr:`missing` cells have a line in ``results.jsonl`` that could not
        be read (:func:`~dpaudit.app.workflows.store.read_results`): a line naming a missing cell, or
        one naming none (corrupted), as far as cells are missing."""
        missing = set(self.missing)
        named = {s["cell_id"] for s in self.skipped_lines if s.get("cell_id") in missing}
        anonymous = sum(1 for s in self.skipped_lines if not s.get("cell_id"))
        return min(len(missing), len(named) + anonymous)

    @property
    def not_run(self) -> int:
        """Cells with no line at all: not run yet."""
        return len(self.missing) - self.unreadable

    def counts_line(self) -> str:
        """``N of M cells done, F failed, U unreadable, K not run yet`` and which lines were skipped."""
        text = (
            f"{len(self.done)} of {len(self.meta.get('cells') or [])} cells done, {len(self.failed)} failed, "
            f"{self.unreadable} unreadable, {self.not_run} not run yet"
        )
        if self.skipped_lines:
            where = "; ".join(f"line {s['line']}: {s['reason']}" for s in self.skipped_lines[:3])
            more = f" and {len(self.skipped_lines) - 3} more" if len(self.skipped_lines) > 3 else ""
            text += f" ({RESULTS_FILE} {where}{more})"
        return text

    @property
    def verdict(self) -> StudyVerdict:
        """The study's verdict (:class:`dpaudit.auditing.verdict.StudyVerdict`), re-derived from its
        finished records: the object its report renders."""
        return study_verdict(self.records, defenses=list((self.report_meta() or {}).get("defenses") or []))

    def table(self) -> list[dict[str, Any]]:
        """One row per (defense, ε): test accuracy and each attack's AUC (means over seeds)."""
        from reports.aggregate import build_report_data

        data = build_report_data(self.records, self.report_meta())
        rows = []
        for row in data["summary"]:
            out = {
                "defense": row["defense"],
                "epsilon": row["epsilon_label"],
                "epsilon_spent": row["epsilon_spent"],
                "test_accuracy": row["test_accuracy"],
            }
            for name, s in row["attacks"].items():
                out[f"{name} AUC"] = s["auc"]
            rows.append(out)
        return rows

    def report_meta(self) -> dict[str, Any]:
        """The report's metadata: title, dataset, defenses, attacks and the study's configuration."""
        config = self.meta.get("config") or {}
        dataset = self.meta.get("dataset") or {}
        return {
            "title": config.get("title") or f"dpaudit study on {dataset.get('name', 'a dataset')}",
            "kind": "compare",
            "dataset": dataset,
            "defenses": config.get("defenses"),
            "attacks": config.get("attacks"),
            # the study's own counts: its planned cells, and the lines the report could not read
            "cells_planned": len(self.meta.get("cells") or []),
            "cells_unreadable": self.unreadable,
            "unreadable_lines": [{k: s[k] for k in ("line", "reason", "cell_id")} for s in self.skipped_lines],
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
        """Write the HTML report (and its JSON sidecar); default ``STUDY_DIR/report.html``. The
        location is probed first (:func:`dpaudit.app.outputs.check_report_paths`), before any rendering."""
        from reports.render import write_report

        path = Path(path) if path is not None else self.dir / "report.html"
        check_report_paths(path, "study", what="to_html")
        records = [load_cell_artifacts(self.dir, r) if r.get("status") == "done" else r for r in self.records]
        html, _ = write_report(records, self.report_meta(), path)
        return html

    def __repr__(self) -> str:
        return f"StudyResult({str(self.dir)!r}, done={len(self.done)}, failed={len(self.failed)}, missing={len(self.missing)})"
