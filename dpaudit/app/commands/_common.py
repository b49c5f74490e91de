"""What the command modules share: table and number formatting, the checks every command
makes before any work (target ε, δ, the first layer's memory, ``--jobs``) and literal values
from the command line."""

from __future__ import annotations

import contextlib
import logging
import math
import os

from dpaudit.errors import DPAuditError, PrivacyParameterError

log = logging.getLogger("dpaudit")

MIN_TARGET_EPSILON = 1e-6


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.{digits}f}"
    return str(value)


def check_target_epsilon(epsilon: float, what: str = "--epsilon") -> None:
    """Refuse, before any work, a finite target ε too small for any defense to calibrate."""
    if epsilon < MIN_TARGET_EPSILON:
        raise PrivacyParameterError(
            f"{what} {epsilon:g} is below {MIN_TARGET_EPSILON:g}: noise calibrated for it leaves ε = 0 to the "
            f"accountant (δ alone covers it), which no privacy spec can state; use ε >= {MIN_TARGET_EPSILON:g}"
        )


def parse_delta(text: str) -> float | str:
    """``--delta``: ``"auto"``, or δ as a number (a given δ must reach the defense typed: as a
    string it would be read as auto, which needs a declared size)."""
    from dpaudit.accounting.spec import validate_delta

    return "auto" if str(text).strip().lower() == "auto" else validate_delta(text)


def check_memory(defense, num_nodes: int, num_features: int) -> None:
    """``defense``'s widths against the memory of its device, for a graph of these sizes."""
    from dpaudit.runtime import device_memory
    from dpaudit.training.defense import check_hyperparameter_ranges

    check_hyperparameter_ranges(defense.name, defense.hp, (num_nodes, num_features), device_memory(defense.device))


def cap_jobs(jobs: int | None) -> int:
    """``--jobs`` ≥ 1, and no more worker processes than cores (more only thrash); ``None``
    (the default) uses every core, since a study's cells are independent."""
    cores = os.cpu_count() or 1
    if jobs is None:
        return cores
    if jobs < 1:
        raise DPAuditError(f"--jobs must be >= 1, got {jobs}")
    if jobs > cores:
        log.warning("--jobs %d capped at the %d cores of this machine", jobs, cores)
    return min(jobs, cores)


def print_table(rows: list[dict]) -> None:
    if not rows:
        return
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


@contextlib.contextmanager
def threads_for_load(keep: bool = False):
    """While inside, torch runs as many threads as the machine's load leaves cores idle
    (:func:`dpaudit.progress.threads_for_load`): on a busy machine extra threads spin at every
    barrier (13× slower measured); torch's own count is restored after. ``keep``: leave the count
    as it is (a run with seeded noise replays as the first run did).

    Args:
        keep: do not change the thread count.

    Returns:
        A context manager giving the thread count used.
    """
    import torch

    from dpaudit.progress import threads_for_load as chosen

    threads = torch.get_num_threads()
    if not keep:
        torch.set_num_threads(chosen(threads))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
