"""CI lints before it tests: ``.ci/run`` runs ``make test``, whose ``lint`` prerequisite runs
``ruff check`` and ``ruff format --check`` over every Python folder of the product."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_runs_ruff_check_and_format_check_over_the_code_first():
    dry = subprocess.run(
        ["make", "-n", "test", "STAMP=pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    check = next(i for i, line in enumerate(dry) if re.search(r"ruff check\b", line))
    fmt = next(i for i, line in enumerate(dry) if re.search(r"ruff format --check\b", line))
    tests = next(i for i, line in enumerate(dry) if "pytest" in line)
    assert check < tests and fmt < tests
    for folder in ("dpaudit", "defenses", "attacks", "reports", "tests", "benchmarks", "examples"):
        assert folder in dry[check].split() and folder in dry[fmt].split()
    assert "make test" in (ROOT / ".ci" / "run").read_text()
