"""Shared benchmark plumbing: run one configuration in a fresh child process and measure it.

Each run is forked so that its peak resident memory (``ru_maxrss``) is its own, not the
maximum over everything the script did before. Once the parent has touched CUDA a forked child
cannot use it, so from then on children are spawned (a fresh interpreter: the benchmark's
function and arguments must be importable and picklable).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _child(fn, args, queue):
    try:
        start = time.perf_counter()
        value = fn(*args)
        seconds = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        queue.put(("ok", value, seconds, peak_mb))
    except BaseException:  # report, don't hang the parent
        queue.put(("error", traceback.format_exc(), 0.0, 0.0))


def _cuda_initialized() -> bool:
    import torch

    return torch.cuda.is_initialized()


def measure(fn: Callable[..., Any], *args) -> tuple[Any, float, float]:
    """Run ``fn(*args)`` in a child process; return (value, wall seconds, peak RSS in MiB)."""
    ctx = mp.get_context("spawn" if _cuda_initialized() else "fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn, args, queue))
    proc.start()
    status, value, seconds, peak = queue.get()
    proc.join()
    if status != "ok":
        raise RuntimeError(f"benchmark run failed:\n{value}")
    return value, seconds, peak


def mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def without_node(edge_index, node: int):
    """``edge_index`` [2, E] with every edge at ``node`` removed (the node-level neighbour; the
    node id stays, isolated)."""
    return edge_index[:, (edge_index[0] != node) & (edge_index[1] != node)]


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


#: what benchmarks write (results and caches): not code, so :func:`tree_state` may leave them out
OUTPUT_PATHS = ("benchmarks/results", "benchmarks/cache")


def tree_state(code_only: bool = False) -> str:
    """The commit a benchmark measured, and whether tracked files differed from it.

    Args:
        code_only: leave the benchmarks' own outputs (:data:`OUTPUT_PATHS`) out of the comparison, so
            a results file that a running benchmark (or another one beside it) has rewritten does not
            mark the code as changed.

    Returns:
        ``"<commit> (clean)"`` or ``"<commit> + working tree with uncommitted changes"``.
    """
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown commit"
    excluded = [f":(exclude){path}" for path in OUTPUT_PATHS] if code_only else []
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return f"{head}" + (" + working tree with uncommitted changes" if dirty else " (clean)")


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it, so an interrupted run
    leaves the previous result whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


#: set by :func:`start_smoke`: the temporary folder a ``--smoke`` run writes its results to
SMOKE_DIR_ENV = "DPAUDIT_BENCH_SMOKE_DIR"


def add_smoke_argument(parser, what: str) -> None:
    """``--smoke``: the script end to end in seconds (tiny data, one repeat: ``what``), writing to
    a temporary folder, never to benchmarks/results (tests/benchmarks/test_smoke.py runs it)."""
    parser.add_argument(
        "--smoke", action="store_true", help=f"seconds, not a measurement ({what}); writes to a temporary folder"
    )


def start_smoke() -> Path:
    """Send :func:`write_result` (and :func:`results_dir`) to a new temporary folder; returns it."""
    folder = Path(os.environ.get(SMOKE_DIR_ENV) or tempfile.mkdtemp(prefix="dpaudit-bench-smoke-"))
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[SMOKE_DIR_ENV] = str(folder)
    return folder


def results_dir() -> Path:
    """``benchmarks/results``, or a ``--smoke`` run's temporary folder (:func:`start_smoke`)."""
    smoke = os.environ.get(SMOKE_DIR_ENV)
    return Path(smoke) if smoke else Path(__file__).resolve().parent / "results"


def write_result(name: str, header: str, table: str) -> Path:
    """``benchmarks/results/NAME.md`` (a smoke run's folder instead, :func:`results_dir`):
    ``header``, a blank line, ``table``."""
    return write_atomic(results_dir() / f"{name}.md", f"{header}\n\n{table}\n")
