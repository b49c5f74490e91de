"""Progress a person can see: a bar on a terminal, a periodic log line otherwise.

Every training loop iterates over :func:`steps` (epochs or optimisation steps). On a terminal
that is a tqdm bar (as before); without one (a log file, CI, ``nohup``) tqdm draws nothing, so
when a command asked for it (:func:`log_progress`, which ``dpaudit train`` turns on) a line
``gcn: step 120/400 (30 %), 41 s elapsed, about 95 s left`` is logged at INFO on the
``dpaudit.progress`` logger every ``every`` seconds and when the loop ends. Library calls, study
workers and attacks' shadow models log nothing unless asked (their own progress is the study's).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator

from tqdm.auto import tqdm

log = logging.getLogger("dpaudit.progress")

#: seconds between progress lines without a terminal; None: no lines (the default)
_LOG_EVERY: float | None = None


@contextlib.contextmanager
def log_progress(every: float = 30.0):
    """While inside, training loops without a terminal log a progress line every ``every`` s.

    Args:
        every: seconds between progress lines.

    Returns:
        A context manager.
    """
    global _LOG_EVERY
    previous, _LOG_EVERY = _LOG_EVERY, float(every)
    try:
        yield
    finally:
        _LOG_EVERY = previous


def _logged(total: int, desc: str, unit: str, every: float) -> Iterator[int]:
    """The log lines of :func:`steps`: the first as soon as 2 s have passed (the early
    estimate, measured at the machine's current load), then one every ``every`` seconds."""
    start = last = time.monotonic()
    announced = False
    for i in range(total):
        yield i
        now = time.monotonic()
        due = now - last >= every or (not announced and now - start >= min(2.0, every))
        if due and i + 1 < total:
            last, announced = now, True
            elapsed = now - start
            left = elapsed / (i + 1) * (total - i - 1)
            log.info(
                "%s: %s %d/%d (%.0f %%), %.0f s elapsed, about %.0f s left",
                desc,
                unit,
                i + 1,
                total,
                100.0 * (i + 1) / total,
                elapsed,
                left,
            )
    if total:
        log.info("%s: %d/%d %ss done in %.0f s", desc, total, total, unit, time.monotonic() - start)


def steps(total: int, desc: str | None, *, disable: bool | None = None, unit: str = "step"):
    """``range(total)`` with progress: a tqdm bar on a terminal (``disable=None``: only there;
    ``True``: never), otherwise log lines when :func:`log_progress` is on.

    Args:
        total: number of steps.
        desc: label of the bar or the log lines.
        disable: ``None`` (bar only on a terminal), ``True`` (never) or ``False`` (always a bar).
        unit: name of one step.

    Returns:
        An iterable over ``range(total)``.
    """
    total = int(total)
    if disable is None and _LOG_EVERY is not None and not _is_terminal(sys.stderr):
        return _logged(total, desc or "training", unit, _LOG_EVERY)
    return tqdm(range(total), desc=desc, disable=disable, leave=False, unit=unit)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------- estimates at the current load


def load_factor(threads: int = 1) -> float:
    """How many times longer CPU work takes now than on an idle machine: with a 1-minute load
    average ``L`` (other processes wanting a core) on ``C`` cores, ``threads`` more runnable
    threads get about ``C / (L + threads)`` of a core each once ``L + threads > C``; so the
    factor is ``max(1, (L + threads) / C)``. 1 where the load is unknown.

    Args:
        threads: the runnable threads the estimated work adds (1: one process, one thread).

    Returns:
        The factor by which an idle machine's CPU seconds stretch into wall seconds now.
    """
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return 1.0
    cores = os.cpu_count() or 1
    return max(1.0, (load + max(1, threads)) / cores)


def load_note() -> str:
    """``"load 9.7 on 2 cores"``: what :func:`load_factor` read, for an estimate's line."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return "load unknown"
    return f"load {load:.1f} on {os.cpu_count() or 1} core(s)"


def threads_for_load(most: int) -> int:
    """Torch threads worth running now: the cores the current 1-minute load leaves idle, at least
    one and at most ``most``. On a busy machine several torch threads spin at every barrier while
    one of them waits for a core: a gcn on 4,000 nodes took 112 s with 2 threads and 8 s with one
    on 2 cores at load 13 (``dpaudit train``, measured for issue 49).

    Args:
        most: the threads to use on an idle machine (torch's default: one per core).

    Returns:
        The thread count; ``most`` where the load is unknown.
    """
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return max(1, most)
    idle = (os.cpu_count() or 1) - load
    return max(1, min(int(most), int(idle + 0.5)))
