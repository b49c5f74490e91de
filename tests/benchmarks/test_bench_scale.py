"""benchmarks/bench_scale.py's bookkeeping: joining measured parts into one record, and reading a
whole audit's per-attack times from its log (the numbers in benchmarks/results/scale.md rest on
both)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_scale.py"


@pytest.fixture
def bench(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_scale_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    monkeypatch.setattr(module, "PARTS", tmp_path / "scale-parts")
    return module


def _meta(command: str) -> dict:
    return {
        "command": command,
        "machine": "m",
        "versions": "v",
        "tree": "t",
        "load_start": "1.0",
        "defenses": ["gap-edp"],
        "audit": "gap-edp",
        "started": "s",
    }


def _row(graph: str, component: str, cpu: float, outcome: str = "ok", series: str = "csbm") -> dict:
    return {
        "graph": graph,
        "series": series,
        "component": component,
        "num_nodes": int(graph),
        "undirected_edges": 10 * int(graph),
        "num_features": 8,
        "avg_degree": 20.0,
        "cpu_s": cpu,
        "wall_s": cpu,
        "peak_mib": 100.0,
        "exit": 0,
        "outcome": outcome,
    }


def _write(bench, name: str, rows: list[dict]) -> None:
    path = bench.result_path(name, ".json")  # a part: results/scale-parts/NAME.json
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": _meta(name), "runs": rows}))


def test_a_run_measured_in_a_later_part_replaces_all_its_rows_and_net_cpu_subtracts_its_own_parts_dataset(bench):
    _write(
        bench,
        "old",
        [
            _row("1000", "dataset", 3.0),
            _row("2000", "dataset", 3.5),
            _row("1000", "train gap-edp", 10.0),
            _row("2000", "train gap-edp", 20.0),
            _row("1000", "audit linkteller", 50.0),
        ],
    )
    _write(
        bench,
        "new",
        [_row("1000", "dataset", 5.0), _row("1000", "train gap-edp", 7.0), _row("1000", "audit mia-rmia", 9.0)],
    )
    results = bench.Results(bench.RESULTS / "all.json", True, _meta("merge"))
    bench.merge(["old", "new:train gap-edp"], results)

    runs = {(r["graph"], r["component"], r["part"]): r for r in results.data["runs"]}
    # the old tree's gap-edp rows go at every size; the new part's mia-rmia was not asked for
    assert set(runs) == {
        ("1000", "dataset", "old"),
        ("2000", "dataset", "old"),
        ("1000", "dataset", "new"),
        ("1000", "train gap-edp", "new"),
        ("1000", "audit linkteller", "old"),
    }
    # net CPU: 7 − the new part's dataset 5, and 50 − the old part's 3
    assert bench.net_cpu(results, runs["1000", "train gap-edp", "new"]) == pytest.approx(2.0)
    assert bench.net_cpu(results, runs["1000", "audit linkteller", "old"]) == pytest.approx(47.0)
    text = bench.render(results, SimpleNamespace(out="all"))
    assert "1. `old`" in text and "2. `new`" in text
    assert "| 1000 | 1,000 | 10,000 | 8 | train gap-edp | 7.0 | 2.0 |" in text


def test_a_whole_audit_lists_each_attacks_time_and_the_attacks_that_did_not_run(bench):
    log = "\n".join(
        [
            "INFO dpaudit.app.workflows.audit: audit: 1/3 mia-rmia starting (~4 s); about 9 s left",
            "INFO dpaudit.app.workflows.audit: audit: 1/3 mia-rmia done in 1 min 5 s; about 5 s left",
            "INFO dpaudit.app.workflows.audit: audit: 2/3 linkteller not run in 0 s; about 5 s left",
            "INFO dpaudit.app.workflows.audit: audit: 3/3 mia-threshold done in 2 s; about 0 s left",
        ]
    )
    times = bench.attack_times(log)
    assert times == {"mia-rmia": "done in 1 min 5 s", "linkteller": "not run in 0 s", "mia-threshold": "done in 2 s"}
    row = {**_row("1000", bench.WHOLE_AUDIT, 9.0), "attacks": times}
    assert bench.outcome_text(row) == "ok; not run: linkteller"


def test_a_shape_does_not_replace_the_csbm_sizes_and_a_plus_part_adds_sizes(bench):
    _write(bench, "old", [_row("1000", "dataset", 3.0), _row("1000", "train gcn", 4.0)])
    _write(
        bench, "shape", [_row("9000", "dataset", 6.0, series="shape"), _row("9000", "train gcn", 9.0, series="shape")]
    )
    _write(bench, "more", [_row("2000", "dataset", 3.5), _row("2000", "train gcn", 5.0)])
    results = bench.Results(bench.RESULTS / "all.json", True, _meta("merge"))
    bench.merge(["old", "shape", "+more"], results)
    gcn = sorted((r["graph"], r["part"]) for r in results.data["runs"] if r["component"] == "train gcn")
    assert gcn == [("1000", "old"), ("2000", "more"), ("9000", "shape")]
    datasets = sorted((r["graph"], r["part"]) for r in results.data["runs"] if r["component"] == "dataset")
    assert datasets == [("1000", "old"), ("2000", "more"), ("9000", "shape")]
