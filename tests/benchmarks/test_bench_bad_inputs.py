"""benchmarks/bench_bad_inputs.py: every refusal of its table that reads nothing but the arguments
is decided before torch (or torch_geometric, scipy, sklearn) is imported (issue 49), one line, exit
2, the user's folder untouched — each in a fresh interpreter, as the command runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_bad_inputs", ROOT / "benchmarks" / "bench_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
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


def test_the_table_lists_the_same_cases(outcomes):
    """The results table (what a reviewer reads) has a row for each, marked as reading nothing."""
    table = (ROOT / "benchmarks" / "results" / "bad_inputs.md").read_text()
    for o in outcomes:
        assert f"| {o.name} | refuse | yes | nothing | none |" in table, o.name
