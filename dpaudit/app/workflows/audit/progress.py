"""The audit's progress (one bar over every attack × run, with an ETA that follows the plan) and
attacks run so that Ctrl-C stops them within a fraction of a second."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from dpaudit.app.workflows.audit.formatting import format_seconds

log = logging.getLogger(__package__)  # one logger for the whole audit: dpaudit.app.workflows.audit


class _AuditProgress:
    """One bar over every attack × run, with an ETA; log lines instead when there is no terminal.

    The ETA is the plan's estimate of what is left, scaled by how fast the finished part went
    compared with its estimate (so a loaded machine gets a longer, honest ETA).
    """

    def __init__(self, plan: dict, enabled: bool | None):
        from tqdm.auto import tqdm

        self.plan = plan
        self.start = time.perf_counter()
        self.done_estimate = 0.0
        self.tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        show = self.tty if enabled is None else enabled
        self.bar = tqdm(
            total=plan["units"],
            desc="audit",
            unit="run",
            disable=not show,
            leave=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} runs [{elapsed}{postfix}]",
        )

    def eta(self) -> float:
        elapsed = time.perf_counter() - self.start
        left = self.plan["estimated_seconds"] - self.done_estimate
        if self.done_estimate <= 0:
            return left
        return left * elapsed / self.done_estimate

    def starting(self, step: dict, index: int) -> None:
        self.bar.set_postfix_str(f"eta {format_seconds(self.eta())}, {step['attack']}", refresh=True)
        log.info(
            "audit: %d/%d %s starting (~%s); about %s left",
            index + 1,
            len(self.plan["attacks"]),
            step["attack"],
            format_seconds(step["estimated_seconds"]),
            format_seconds(self.eta()),
        )

    def finished(self, step: dict, index: int, seconds: float, ok: bool) -> None:
        self.done_estimate += step["estimated_seconds"]
        self.bar.update(step["units"])
        self.bar.set_postfix_str(f"eta {format_seconds(self.eta())}", refresh=True)
        log.info(
            "audit: %d/%d %s %s in %s; about %s left",
            index + 1,
            len(self.plan["attacks"]),
            step["attack"],
            "done" if ok else "not run",
            format_seconds(seconds),
            format_seconds(self.eta()),
        )

    def close(self) -> None:
        self.bar.close()


def _run_interruptibly(fn, *args, **kwargs):
    """Run ``fn`` in a daemon thread and wait for it in short slices, so that Ctrl-C reaches the
    caller within a fraction of a second even while the attack is inside compiled code (t-SNE,
    UMAP, a BLAS call) that checks no signal. The abandoned thread dies with the process."""
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="dpaudit-attack", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]
