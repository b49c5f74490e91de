"""Every benchmark script runs: its ``--smoke`` mode (tiny data, one repeat, results in a temporary
folder) in a fresh interpreter, so a moved or renamed name breaks the suite rather than the next
person who measures (issue 49: bench_speed.py had patched a path that moved). A script without a
smoke mode yet must be listed in :data:`NO_SMOKE_YET`, which only shrinks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
#: scripts that do not take --smoke yet (each needs its own tiny configuration): the debt, said
NO_SMOKE_YET: set[str] = set()
#: smoke runs that take more than a few seconds on a shared 2-core machine (still run by `make test`)
SLOW = {
    "bench_speed.py",
    "bench_baselines.py",
    "bench_estimates.py",
    "bench_interrupt.py",
    "bench_accounting.py",
    "bench_study.py",
    "bench_attacks.py",
    "bench_covered_inference.py",
    "bench_dpar.py",
    "bench_dpgnn.py",
    "bench_gap.py",
    "bench_gap_queries.py",
    "bench_gcon.py",
    "bench_honest.py",
    "bench_scale.py",
    "bench_bug_zoo.py",
    "bench_selection.py",
    "bench_zoo.py",
    "bench_blackbox_power.py",
    "bench_demo.py",
    "bench_edge_level.py",
}


def _scripts() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def _has_smoke(script: str) -> bool:
    text = (BENCH / script).read_text()
    return "add_smoke_argument" in text or '"--smoke"' in text


def test_every_script_has_a_smoke_mode_or_is_listed():
    missing = [s for s in _scripts() if not _has_smoke(s) and s not in NO_SMOKE_YET]
    assert missing == [], "give these a --smoke mode (see benchmarks/_harness.py add_smoke_argument)"
    stale = [s for s in NO_SMOKE_YET if s not in _scripts() or _has_smoke(s)]
    assert stale == [], "these have a smoke mode now (or are gone): remove them from NO_SMOKE_YET"


@pytest.mark.parametrize(
    "script",
    [pytest.param(s, marks=[pytest.mark.slow] if s in SLOW else []) for s in _scripts() if s not in NO_SMOKE_YET],
)
def test_the_smoke_mode_runs_and_writes_nothing_under_results(script, tmp_path):
    results = BENCH / "results"
    before = {p: p.stat().st_mtime_ns for p in results.rglob("*") if p.is_file()}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DPAUDIT_BENCH_SMOKE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    after = {p: p.stat().st_mtime_ns for p in results.rglob("*") if p.is_file()}
    assert after == before, "a smoke run wrote under benchmarks/results"
