"""benchmarks/bench_bad_inputs.py: every refusal of its table that reads nothing but the arguments
is decided before torch (or torch_geometric, scipy, sklearn) is imported (issue 49), one line, exit
2, the user's folder untouched — each in a fresh interpreter, as the command runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_bad_inputs", ROOT / "benchmarks" / "bench_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    bench = _bench()
    work = tmp_path_factory.mktemp("bad-inputs") / "cases"
    work.mkdir()
    return bench.no_data_refusals(bench.Runner(ROOT, work))


def test_every_refusal_that_reads_nothing_imports_no_heavy_library(outcomes):
    assert len(outcomes) >= 10
    for o in outcomes:
        assert o.reads == "nothing"
        assert o.detail["heavy imports"] == [], (o.name, o.detail)
        assert o.clean, (o.name, o.detail, o.message)
        assert o.message.startswith("dpaudit: error: "), o.message


def test_the_declaration_refusals_come_before_torch(outcomes):
    """Issue 49's three refusals that imported torch to read a declaration (an attack's count cap in
    `attack` and `audit`, a non-private defense at finite ε in `compare`, a graph file's undeclared
    label domain) read the sources instead and are among the refusals run above."""
    names = {o.name for o in outcomes}
    assert {
        "attack count above its cap",
        "audit count above its cap",
        "compare --defenses gcn --epsilons 1",
        "labels {0, 5, 17}, undeclared",
    } <= names


def test_the_table_says_no_refusal_that_reads_no_data_imported_torch(outcomes):
    """The results table (what a reviewer reads): every refusal listed is either decided from the
    arguments and the sources' declarations, clean and with none of the heavy libraries imported,
    or reads the user's data (a graph, a model, a module); no row is left in between, and every
    such refusal run above is in the table."""
    rows = [
        line.split(" | ")
        for line in (ROOT / "benchmarks" / "results" / "bad_inputs.md").read_text().splitlines()
        if line.startswith("| ") and " | refuse | " in line
    ]
    assert {row[3] for row in rows} <= {"nothing", "data"}, sorted({row[3] for row in rows})
    nothing = {row[0].removeprefix("| "): row for row in rows if row[3] == "nothing"}
    assert len(nothing) >= 13
    for row in nothing.values():
        assert row[2] == "yes" and row[4] == "none", row
    assert {o.name for o in outcomes} <= set(nothing)
