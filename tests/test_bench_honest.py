"""benchmarks/bench_honest.py's bookkeeping: flags refused before work, refusals kept as
results (and bugs retried), and the acceptance lines of honest.md read only from what was
measured, never claiming more (a `sound: false` winner or uncovered inference is said so)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from dpaudit.errors import ConfigurationError

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_honest.py"
JH = "johnshopkins55:year"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_honest_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ok(accuracy: float, sound: bool = True, inference_private: bool = True, unit: str = "node") -> dict:
    return {"status": "ok", "test_accuracy": accuracy, "epsilon_spent": 8.0, "epsilon_after_test": 8.0,
            "sound": sound, "unit": unit, "inference_private": inference_private, "inference_note": "reads the graph",
            "cpu_seconds": 1.0, "wall_seconds": 2.0}  # fmt: skip


def _store(bench, runs: dict[tuple, list[dict]]) -> dict:
    store = {"version": bench.STORE_VERSION, "runs": {}}
    for (dataset, defense, configuration, epsilon), results in runs.items():
        for seed, result in enumerate(results):
            store["runs"][bench.run_key(dataset, defense, configuration, epsilon, seed)] = result
    return store


@pytest.mark.parametrize(
    "argv",
    [["--datasets", "cora"], ["--defenses", "gcn"], ["--epsilons", "0"], ["--epsilons", "inf"], ["--seeds", "-1"],
     ["--epsilons", "x"], ["--configurations", "tuned"], ["--budget", "0"], ["--skip", "gcn:paper"]],
)  # fmt: skip
def test_bad_flags_are_one_configuration_error(bench, argv):
    with pytest.raises(ConfigurationError):
        bench.validate(bench.parse_args(argv))


def test_bad_flag_exits_2_with_one_line_and_writes_nothing(bench, tmp_path, capsys):
    store = tmp_path / "h.json"
    assert bench.main(["--epsilons", "-1", "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bench_honest: error:") and "\n" not in err
    assert not store.exists() and not store.with_suffix(".md").exists()


def test_quick_is_one_seed_at_eps_8_on_cora_ml(bench):
    args = bench.validate(bench.parse_args(["--quick"]))
    assert (args.datasets, args.epsilons, args.seeds) == (["cora_ml"], [8.0], [0])
    assert args.store.name == "honest-quick.json"


def test_refusals_are_results_and_bugs_are_retried(bench):
    store = {
        "runs": {
            "a": {"status": "refused"},
            "b": {"status": "error"},
            "c": {"status": "ok"},
            "e": {"status": "skipped"},
        }
    }
    assert [bench.needs_run(store, k) for k in ("a", "b", "c", "d", "e")] == [False, True, False, True, True]


def test_plan_fills_acceptance_pairs_first_and_selection_last(bench):
    cells = bench.plan_cells(["cora_ml", JH], ["mlp-dp", "gap-ndp"], [1.0, 4.0, 8.0], include_baselines=True)
    assert [c[2] for c in cells[:4]] == ["non-private"] * 4
    private = [c for c in cells if c[2] != "non-private"]
    assert [(c[0], c[3]) for c in private[:2]] == [(JH, 8.0), (JH, 8.0)]
    first_selection = next(i for i, c in enumerate(private) if c[2] == "select=private")
    assert all(c[2] == "select=private" for c in private[first_selection:])
    assert (JH, "gap-ndp", bench.GRAPH_DEGREE, 8.0) in cells


def test_refused_defense_is_recorded_with_its_message(bench, small_graph):
    from dpaudit.splits import make_split

    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    result = bench.fit_and_test("gap-ndp", small_graph, split, 8.0, 0, {"max_degree": 1, "degree_bound": "promise"})
    assert result["status"] == "refused"
    assert "max_degree = 1" in result["message"] and "\n" not in result["message"]


def test_acceptance_needs_a_sound_winner_by_003(bench):
    sound_winner = _store(
        bench,
        {
            (JH, "mlp-dp", "sound", 8.0): [_ok(0.50), _ok(0.52), _ok(0.54)],
            (JH, "dpar-em1", "sound", 8.0): [_ok(0.56), _ok(0.56), _ok(0.56)],
            (JH, "dpgnn", "sound", 8.0): [_ok(0.70, sound=False)] * 3,
        },
    )
    lines = bench.acceptance(bench.rows_for(sound_winner, [0, 1, 2]))
    first = lines[0]
    # the unsound dpgnn is higher but cannot be the sound winner; dpar-em1 wins by +0.040
    assert "dpar-em1" in first and "+0.040" in first and "**holds**" in first
    unsound_only = _store(
        bench,
        {
            (JH, "mlp-dp", "sound", 8.0): [_ok(0.50)] * 3,
            (JH, "dpgnn", "sound", 8.0): [_ok(0.70, sound=False, inference_private=False)] * 3,
        },
    )
    first = bench.acceptance(bench.rows_for(unsound_only, [0, 1, 2]))[0]
    assert "does not hold" in first and "sound: false" in first and "outside ε" in first


def test_acceptance_reports_refusal_and_edp_gap(bench):
    refused = {"status": "refused", "message": "gap-ndp protocol=sound proves ... max_degree = 100"}
    store = _store(
        bench,
        {
            (JH, "gap-ndp", "sound", 8.0): [refused] * 3,
            (JH, "gap-edp", "sound", 4.0): [_ok(0.70, unit="edge")] * 3,
            (JH, "gap-edp", "paper", 4.0): [_ok(0.74, sound=False, unit="edge")] * 3,
        },
    )
    lines = bench.acceptance(bench.rows_for(store, [0, 1, 2]))
    ndp = next(line for line in lines if line.startswith("- gap-ndp"))
    assert "does not hold" in ndp and "max_degree = 100" in ndp
    edp = next(line for line in lines if "gap-edp sound" in line)
    assert "+0.040" in edp and "does not hold" in edp


def test_report_marks_uncovered_inference_and_refusals(bench, tmp_path):
    store = _store(
        bench,
        {
            (JH, "mlp-dp", "sound", 8.0): [_ok(0.50)] * 3,
            (JH, "dpar-em1", "sound", 8.0): [_ok(0.60, inference_private=False)] * 3,
            (JH, "gap-ndp", "sound", 8.0): [{"status": "refused", "message": "too high a degree"}] * 3,
            (JH, "gcn", "non-private", math.inf): [_ok(0.78, unit=None)] * 3,
        },
    )
    planned = [(JH, "gcon", "sound", 8.0)]  # planned, never stored: a stopped run leaves no silent gap
    text = bench.write_report(store, [0, 1, 2], "cmd", tmp_path / "honest.md", planned).read_text(encoding="utf-8")
    dpar = next(line for line in text.splitlines() if line.startswith("| dpar-em1"))
    assert "**no**" in dpar and "0.600 ± 0.000 ⚠" in dpar and "+0.100" in dpar
    assert "- **dpar-em1**: reads the graph" in text
    assert next(line for line in text.splitlines() if line.startswith("| gap-ndp")).endswith("too high a degree |")
    assert "no result stored" in next(line for line in text.splitlines() if line.startswith("| gcon"))
    assert "## Acceptance (issue 24)" in text
