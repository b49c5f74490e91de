"""Executors that run study cells: local worker processes or Ray tasks."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from tqdm.auto import tqdm

from dpaudit.app.workflows.cell import NotATerminal, run_cell, worker_init
from dpaudit.app.workflows.config import now_iso
from dpaudit.app.workflows.store import CELL_SCHEMA, CELL_SCHEMA_VERSION
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.training.registry import get_defense

log = logging.getLogger(__name__)
#: normal progress: INFO on its own logger, which the command line shows without ``-v``
progress_log = logging.getLogger("dpaudit.progress")

EXECUTORS = ("local", "ray")


# --------------------------------------------------------------------------- executors


class CellProgress:
    """One bar over the study's cells (with tqdm's ETA). Without a terminal (CI, nohup, a log
    file) tqdm stays silent, so a log line with the same numbers is written every
    ``log_every`` seconds and at each finished cell.

    Args:
        total: cells in the study.
        done: cells already done (resumed).
        failed: cells already failed.
        disable: hide the bar; ``None``: shown only on a terminal.
        log_every: seconds between log lines without a terminal.
    """

    def __init__(self, total: int, done: int, failed: int, disable: bool | None, log_every: float = 60.0):
        import sys
        import time

        self.total = total
        self.done, self.failed, self.running = done, failed, 0
        self._clock = time.monotonic
        self._start, self._start_count = self._clock(), done + failed
        self._last_log = self._start
        self.log_every = log_every
        self.log_lines = disable is None and not sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=done + failed, desc="cells", unit="cell", disable=disable, leave=True)
        self.refresh()

    def refresh(self, log_due: bool = True):
        """Redraw the bar's counts, and write a log line when one is due.

        Args:
            log_due: allow a log line now.
        """
        self.bar.set_postfix_str(f"done={self.done} running={self.running_now()} failed={self.failed}", refresh=True)
        if log_due and self.log_lines and self._clock() - self._last_log >= self.log_every:
            self._log()

    def eta_seconds(self) -> float | None:
        """Seconds left at the mean pace of the cells finished in this run; ``None`` before the first."""
        finished = self.done + self.failed - self._start_count
        if finished <= 0:  # before the first cell: the study's up-front guess, less the time gone
            guess = getattr(self, "guess_seconds", None)
            return None if guess is None else max(0.0, guess - (self._clock() - self._start))
        rate = (self._clock() - self._start) / finished
        return rate * (self.total - self.done - self.failed)

    def running_now(self) -> int:
        """Cells running now: never more than are left (the executor updates its count only
        when it next waits, after the last cell has already finished)."""
        return max(0, min(self.running, self.total - self.done - self.failed))

    def _log(self, final: bool = False):
        self._last_log = self._clock()
        finished = self.done + self.failed
        if final:
            progress_log.info(
                "cells: %d/%d finished (%d failed) in %.1f min",
                finished,
                self.total,
                self.failed,
                (self._clock() - self._start) / 60,
            )
            return
        eta = self.eta_seconds()
        progress_log.info(
            "cells: %d/%d finished (%d failed), %d running, ETA %s",
            finished,
            self.total,
            self.failed,
            self.running_now(),
            "unknown" if eta is None else f"{eta / 60:.1f} min",
        )

    def finished(self, ok: bool):
        """Count one finished cell and advance the bar.

        Args:
            ok: the cell is done (``False``: it failed).
        """
        if ok:
            self.done += 1
        else:
            self.failed += 1
        self.bar.update(1)
        self.refresh(log_due=False)  # one log line per finished cell, not two
        if self.log_lines:
            self._log(final=self.done + self.failed >= self.total)

    def close(self):
        """Redraw the bar's last state and close it."""
        self.refresh()  # the bar's last state is the study's (no cell left "running")
        self.bar.close()


def longest_first(tasks: list[dict]) -> list[dict]:
    """Tasks ordered by decreasing expected cost, each cell's defense's declared
    :attr:`~dpaudit.training.defense.Defense.relative_cost` (stable: the grid order breaks
    ties), so that no core idles at the end while one long cell finishes; a wrong guess costs
    some idle time, never a result. A defense that is not registered counts 2.0.

    Args:
        tasks: the cells' tasks.

    Returns:
        The tasks, reordered.
    """

    def cost(task: dict) -> float:
        try:
            return float(get_defense(task["cell"]["defense"]).relative_cost)
        except DPAuditError:
            return 2.0

    return sorted(tasks, key=lambda task: -cost(task))


def failed_record(task: dict, exc: BaseException | str) -> dict:
    """The cell record of a cell that failed outside the cell's own code (a worker that died).

    Args:
        task: the cell's task.
        exc: the exception, or the reason in words.

    Returns:
        A cell record with ``status="failed"`` and the error.
    """
    cell = task["cell"]
    message = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
    return {
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
        "overrides": {},
        "attacks": {},
        "attack_errors": {},
        "attack_seconds": {},
        "error": {
            "type": "WorkerError" if isinstance(exc, str) else type(exc).__name__,
            "message": message,
            "traceback": None,
        },
        "seconds": None,
        "started_at": None,
        "finished_at": now_iso(),
        "run_id": task["run_id"],
        "worker": None,
    }


@contextlib.contextmanager
def _cell_bars_hidden():
    """A cell run in this process draws no bars of its own (see :class:`NotATerminal`); the
    study's bar keeps the stream it was created with."""
    stream = sys.stderr
    sys.stderr = NotATerminal(stream)
    try:
        yield
    finally:
        sys.stderr = stream


def _kill_workers(pool) -> None:
    """Stop a process pool now: kill its workers (a running cell is lost, a finished one is
    already recorded) and cancel what is queued. ``shutdown(wait=True)``, what leaving a
    ``with`` block does, would let every running cell finish first: 19–64 s measured."""
    kill = getattr(pool, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
    else:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()
    # with its workers dead the pool's manager thread ends at once; waiting for it releases the
    # pool's queues (their semaphores would otherwise be reported leaked at exit)
    pool.shutdown(wait=True, cancel_futures=True)


def execute_local(tasks: list[dict], jobs: int, on_result, progress: CellProgress) -> None:
    """Run ``tasks`` here (``jobs`` = 1) or in ``jobs`` worker processes; an interruption
    (KeyboardInterrupt, which :meth:`Study.run` also raises on SIGTERM) kills the workers at
    once and propagates, and every cell finished before it has been passed to ``on_result``.

    Args:
        tasks: the cells' tasks.
        jobs: worker processes (1: in this process).
        on_result: called with each finished cell's result as it arrives.
        progress: the study's progress bar.
    """
    if jobs <= 1:
        with _cell_bars_hidden():
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
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=context,
        initializer=worker_init,
        initargs=(threads, True, logging.getLogger("dpaudit").getEffectiveLevel()),
    )
    try:
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
                    outcome = {"record": failed_record(task, "the worker process died (out of memory?)"), "files": {}}
                except Exception as exc:  # pickling / transport errors
                    outcome = {"record": failed_record(task, exc), "files": {}}
                on_result(task, outcome)
    except BaseException:
        _kill_workers(pool)
        raise
    pool.shutdown(wait=True)
    progress.running = 0


def connect_ray(jobs: int):
    """The ``ray`` module, connected: to the cluster at ``RAY_ADDRESS``, else to a local one with
    ``jobs`` CPUs. A study calls it before it writes anything, so a missing extra or an
    unreachable cluster is one error line and no study folder.

    Args:
        jobs: CPUs of a local Ray instance.

    Returns:
        The ``ray`` module.

    Raises:
        ConfigurationError: Ray is not installed or the cluster is unreachable.
    """
    try:
        import ray
    except ImportError:
        raise ConfigurationError(
            "--executor ray needs Ray, which is not installed: pip install 'dpaudit[ray]' (or use --executor local)"
        ) from None
    if not ray.is_initialized():
        # RAY_ADDRESS (Ray's own variable) names an existing cluster; without it a local one is
        # started for this study and stopped with it
        address = os.environ.get("RAY_ADDRESS")
        try:
            ray.init(
                address=address,
                ignore_reinit_error=True,
                include_dashboard=False,
                log_to_driver=False,
                **({} if address else {"num_cpus": max(1, jobs)}),
            )
        except ConnectionError as exc:
            raise ConfigurationError(
                f"--executor ray could not reach the Ray cluster at RAY_ADDRESS={address}: {exc} "
                "(start it with `ray start --head`, or unset RAY_ADDRESS for a local one)"
            ) from None
    return ray


def execute_ray(tasks: list[dict], jobs: int, on_result, progress: CellProgress) -> None:
    """Run the cells as Ray tasks (one CPU each, and one GPU when the cluster has one).

    Args:
        tasks: the cells' tasks.
        jobs: CPUs of a local Ray instance (:func:`connect_ray`).
        on_result: called with each finished cell's result as it arrives.
        progress: the study's progress bar.
    """
    ray = connect_ray(jobs)
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    remote = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=0)(run_cell)
    refs = {remote.remote({**task, "threads": 1}): task for task in tasks}
    log.info("submitted %d cells to Ray (%s GPU per task)", len(refs), gpus)
    try:
        while refs:
            progress.running = len(refs)
            progress.refresh()
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                task = refs.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # the task's worker died
                    outcome = {"record": failed_record(task, exc), "files": {}}
                on_result(task, outcome)
    except BaseException:  # interrupted: queued and running cells are cancelled, their workers killed
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    progress.running = 0
