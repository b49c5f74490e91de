"""benchmarks/bench_honest.py's bookkeeping: flags refused before work, refusals kept as
results (and bugs retried), and the acceptance lines of honest.md read only from what was
measured, never claiming more (a `sound: false` winner or uncovered inference is said so)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from dpaudit.errors import ConfigurationError

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_honest.py"
JH = "johnshopkins55:year"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_honest_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ok(accuracy: float, sound: bool = True, inference_private: bool = True, unit: str = "node") -> dict:
    return {
        "status": "ok",
        "test_accuracy": accuracy,
        "epsilon_spent": 8.0,
        "epsilon_after_test": 8.0,
        "sound": sound,
        "unit": unit,
        "inference_private": inference_private,
        "inference_note": "reads the graph",
        "cpu_seconds": 1.0,
        "wall_seconds": 2.0,
    }


def _store(bench, runs: dict[tuple, list[dict]]) -> dict:
    store = {"version": bench.STORE_VERSION, "runs": {}}
    for (dataset, defense, configuration, epsilon), results in runs.items():
        for seed, result in enumerate(results):
            store["runs"][bench.run_key(dataset, defense, configuration, epsilon, seed)] = result
    return store


@pytest.mark.parametrize(
    "argv",
    [
        ["--datasets", "cora"],
        ["--defenses", "gcn"],
        ["--epsilons", "0"],
        ["--epsilons", "inf"],
        ["--seeds", "-1"],
        ["--epsilons", "x"],
        ["--configurations", "tuned"],
        ["--budget", "0"],
        ["--skip", "gcn:paper"],
    ],
)
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
    assert [c[2] for c in cells[:8]] == ["non-private"] * 4 + [bench.TUNED] * 4
    private = [c for c in cells if c[3] != math.inf]
    assert [(c[0], c[3]) for c in private[:2]] == [(JH, 8.0), (JH, 8.0)]
    first_selection = next(i for i, c in enumerate(private) if c[2] == "select=private")
    assert all(c[2] == "select=private" for c in private[first_selection:])
    assert (JH, "gap-ndp", bench.GRAPH_DEGREE, 8.0) in cells


def test_refused_defense_is_recorded_with_its_message(bench, small_graph):
    from dpaudit.data.splits import make_split

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
    first = next(line for line in lines if line.startswith("- johnshopkins55:year, ε = 8"))
    # the unsound dpgnn is higher but cannot be the sound winner; dpar-em1 wins by +0.040
    assert "dpar-em1" in first and "+0.040" in first and "**holds**" in first
    unsound_only = _store(
        bench,
        {
            (JH, "mlp-dp", "sound", 8.0): [_ok(0.50)] * 3,
            (JH, "dpgnn", "sound", 8.0): [_ok(0.70, sound=False, inference_private=False)] * 3,
        },
    )
    lines = bench.acceptance(bench.rows_for(unsound_only, [0, 1, 2]))
    first = next(line for line in lines if line.startswith("- johnshopkins55:year, ε = 8"))
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
    assert "## Acceptance (issues 24 and 37)" in text


JH_IND = "johnshopkins55:year@inductive:0.8,0.2"


def test_labels_keep_the_stored_keys_and_name_the_new_split(bench):
    assert bench.SPLITS[JH] == "random:0.75,0.1,0.15" and bench.SPLITS["cora_ml"] == "inductive:0.8,0.2"
    assert bench.JH_INDUCTIVE == JH_IND and bench.SPLITS[JH_IND] == "inductive:0.8,0.2"
    assert bench.dataset_of(JH_IND) == JH and bench.dataset_of(JH) == JH
    key = bench.run_key(JH_IND, "mlp-dp", "sound", 8.0, 2)
    assert key == "johnshopkins55:year@inductive:0.8,0.2|mlp-dp|sound|8|2" and len(key.split("|")) == 5
    assert bench.deployment_of(bench.SPLITS[JH]) == "training-graph"
    assert bench.deployment_of(bench.SPLITS[JH_IND]) == "querier-graph"
    # every key of the committed store still names a known label (the existing runs stay valid)
    store = bench.load_store(bench.RESULTS / "honest.json", resume=True)
    assert {key.split("|")[0] for key in store["runs"]} <= set(bench.SPLITS)
    assert bench.validate(bench.parse_args(["--datasets", JH_IND, "--baselines-only"])).datasets == [JH_IND]
    with pytest.raises(ConfigurationError):
        bench.validate(bench.parse_args(["--baselines-only", "--no-baselines"]))


def test_baselines_only_plans_untuned_then_tuned_references(bench):
    cells = bench.plan_cells([JH_IND], ["mlp-dp"], [8.0], include_baselines=True, include_private=False)
    assert cells == [(JH_IND, n, c, math.inf) for c in ("non-private", bench.TUNED) for n in ("mlp", "gcn")]
    first = bench.plan_cells(["cora_ml", JH, JH_IND], ["mlp-dp"], [8.0], include_baselines=False)
    assert first[0][0] == JH_IND  # the issue-37 acceptance pair first


def test_deployment_column_follows_the_split_for_legacy_runs(bench, tmp_path):
    """A run stored before deployments: inductive → the querier's graph, covered for a private
    model whatever inference.private said; transductive → the training graph, covered only as
    inference.private said. The ⚠ follows that coverage."""
    store = _store(
        bench,
        {
            (JH, "mlp-dp", "sound", 8.0): [_ok(0.50)] * 3,
            (JH, "dpar-em1", "sound", 8.0): [_ok(0.60, inference_private=False)] * 3,
            ("cora_ml", "mlp-dp", "sound", 8.0): [_ok(0.70)] * 3,
            ("cora_ml", "dpar-em1", "sound", 8.0): [_ok(0.77, inference_private=False)] * 3,
            ("cora_ml", "mlp", "non-private", math.inf): [_ok(0.80, unit=None) | {"epsilon_spent": None}] * 3,
        },
    )
    rows = bench.rows_for(store, [0, 1, 2])
    jh = bench.find(rows, JH, "dpar-em1", "sound", 8.0)
    cora = bench.find(rows, "cora_ml", "dpar-em1", "sound", 8.0)
    assert (jh["deployment"], jh["deployment_covered"]) == ("training-graph", False)
    assert (cora["deployment"], cora["deployment_covered"]) == ("querier-graph", True)
    text = bench.write_report(store, [0, 1, 2], "cmd", tmp_path / "h.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    cora_at = lines.index("## cora_ml, split `inductive:0.8,0.2`")
    jh_line = next(line for line in lines if line.startswith("| dpar-em1"))
    cora_line = next(line for line in lines[cora_at:] if line.startswith("| dpar-em1"))
    assert "training-graph: **no**" in jh_line and "⚠" in jh_line
    assert "querier-graph: yes" in cora_line and "⚠" not in cora_line
    mlp = next(line for line in lines[cora_at:] if line.startswith("| mlp |"))
    assert "querier-graph: n/a (ε = ∞)" in mlp


def test_query_ledger_is_its_own_column_never_the_training_epsilon(bench):
    class Ledger:
        epsilon = 3.5

    class Session:
        query_ledger = Ledger()

    assert bench.query_ledger_epsilon(Session(), 1e-6) == 3.5
    assert bench.query_ledger_epsilon(object(), 1e-6) is None
    ledger_run = _ok(0.6, unit="edge") | {"query_ledger_epsilon": 3.5, "epsilon_after_test": None}
    grown_run = _ok(0.6, unit="edge") | {"epsilon_after_test": 12.0}
    store = _store(
        bench, {(JH_IND, "gap-edp", "sound", 8.0): [ledger_run] * 3, (JH, "gap-edp", "sound", 8.0): [grown_run] * 3}
    )
    rows = bench.rows_for(store, [0, 1, 2])
    ledger, grown = bench.find(rows, JH_IND, "gap-edp", "sound", 8.0), bench.find(rows, JH, "gap-edp", "sound", 8.0)
    assert bench.epsilon_text(ledger) == bench.epsilon_text(grown) == "8.000"
    assert bench.query_epsilon_text(ledger) == "3.500 (query ledger)"
    assert "12.000" in bench.query_epsilon_text(grown)


def test_fit_and_test_records_the_deployment(bench, small_graph):
    from dpaudit.data.splits import make_split

    inductive = make_split(small_graph, "inductive:0.8,0.2", 0)
    private = bench.fit_and_test("dpar-em1", small_graph, inductive, 8.0, 0, {})
    assert private["status"] == "ok" and private["deployment"] == "querier-graph" and private["deployment_covered"]
    assert private["epsilon_after_test"] is None and private["query_ledger_epsilon"] is None
    transductive = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    again = bench.fit_and_test("dpar-em1", small_graph, transductive, 8.0, 0, {})
    assert again["deployment"] == "training-graph" and not again["deployment_covered"]
    tuned = bench.fit_and_test("mlp", small_graph, inductive, math.inf, 0, {"select": "validation"})
    assert tuned["deployment"] == "querier-graph" and not tuned["deployment_covered"]
    assert set(tuned["validation_chosen"]) == {"hidden", "dropout", "weight_decay", "lr", "epochs"}


def test_querier_graph_acceptance_needs_005_and_coverage(bench):
    store = _store(
        bench,
        {
            (JH_IND, "mlp-dp", "sound", 8.0): [_ok(0.54)] * 3,
            (JH_IND, "dpar-em1", "sound", 8.0): [
                _ok(0.68) | {"deployment": "querier-graph", "deployment_covered": True}
            ]
            * 3,
            (JH_IND, "dpgnn", "sound", 8.0): [_ok(0.75, sound=False)] * 3,
            (JH_IND, "mlp", bench.TUNED, math.inf): [_ok(0.58, unit=None) | {"epsilon_spent": None}] * 3,
            (JH_IND, "mlp", "non-private", math.inf): [_ok(0.51, unit=None) | {"epsilon_spent": None}] * 3,
        },
    )
    lines = bench.acceptance(bench.rows_for(store, [0, 1, 2]))
    first = lines[0]
    assert first.startswith("- johnshopkins55:year `inductive:0.8,0.2`, ε = 8, 3 seeds")
    assert "dpar-em1" in first and "+0.140" in first and "covered" in first and "**holds**" in first
    mlp = next(line for line in lines if "grid on validation" in line and line.startswith("- "))
    assert "+0.040" in mlp and "**above**" in mlp and "untuned mlp 0.510" in mlp
    close = _store(
        bench,
        {
            (JH_IND, "mlp-dp", "sound", 8.0): [_ok(0.54)] * 3,
            (JH_IND, "gap-ndp", "sound", 8.0): [_ok(0.58)] * 3,
        },
    )
    assert "does not hold" in bench.acceptance(bench.rows_for(close, [0, 1, 2]))[0]
