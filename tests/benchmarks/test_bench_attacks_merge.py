"""benchmarks/bench_attacks.py's bookkeeping: folding side-by-side passes into the attack table
(every row's origin stays in the header), refusing an unknown attack before any work, and saying
when a row's 'covered' refers to more ε than its ε column (benchmarks/results/attacks.md rests
on all three)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_attacks.py"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH.parent))  # the script imports _harness beside it
    spec = importlib.util.spec_from_file_location("bench_attacks_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(defense: str, eps: str, attack: str, auc: str, negatives: str = "") -> dict:
    return {"defense": defense, "ε": eps, "attack": attack, "AUC": auc, "negatives": negatives}


def _report(command: str, table: list[dict], note: str) -> dict:
    return {
        "command": command,
        "header": f"Command: `{command}`.",
        "strength": [],
        "gbase": [],
        "table": table,
        "split": "random:0.3,0.1,0.3",
        "table_note": note,
    }


def test_merge_replaces_rows_keeps_model_groups_and_lists_every_pass(bench, tmp_path):
    out = tmp_path / "attacks.md"
    old = [
        _row("gcn", "inf", "mia-tstf", "0.600"),
        _row("gcn", "inf", "link-steal", "0.914", "1000"),
        _row("mlp", "inf", "mia-tstf", "0.853"),
    ]
    out.with_suffix(".json").write_text(json.dumps(_report("python first", old, "first note")))
    out.write_text(f"# old\n{bench.NOTES_MARKER}\nhand-written reading notes\n")
    first = tmp_path / "a.json"
    first.write_text(json.dumps(_report("python pass A", [_row("gcn", "inf", "mia-tstf", "0.545", "861")], "A")))
    second = tmp_path / "b.json"
    second.write_text(json.dumps(_report("python pass B", [_row("gcn", "inf", "linkteller", "0.997", "100")], "B")))

    bench.merge_passes(out, [first, second])

    merged = json.loads(out.with_suffix(".json").read_text())
    assert [(r["defense"], r["attack"], r["AUC"]) for r in merged["table"]] == [
        ("gcn", "mia-tstf", "0.545"),  # replaced in place
        ("gcn", "link-steal", "0.914"),
        ("gcn", "linkteller", "0.997"),  # new: after gcn's rows, before mlp's
        ("mlp", "mia-tstf", "0.853"),
    ]
    assert "`python pass A`" in merged["header"] and "`python pass B`" in merged["header"]
    assert merged["header"].startswith("Command: `python first`.")
    assert merged["table_note"] == "first note A B"
    text = out.read_text()
    assert text.endswith(f"{bench.NOTES_MARKER}\nhand-written reading notes\n")
    assert "| gcn | inf |  | mia-tstf | 0.545 |" in text


def test_unknown_attack_is_refused_before_any_work(bench, tmp_path, capsys):
    out = tmp_path / "attacks.md"
    with pytest.raises(SystemExit) as stop:
        bench.main(["--part", "table", "--attacks", "linkteller,mia-nope", "--out", str(out)])
    assert stop.value.code == 2
    assert "mia-nope" in capsys.readouterr().err
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_merge_refuses_missing_pass_files(bench, tmp_path, capsys):
    out = tmp_path / "attacks.md"
    out.with_suffix(".json").write_text(json.dumps(_report("python first", [], "")))
    with pytest.raises(SystemExit) as stop:
        bench.main(["--merge", str(tmp_path / "absent.json"), "--out", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--merge: no such file" in err and "absent.json" in err
    assert json.loads(out.with_suffix(".json").read_text())["header"] == "Command: `python first`."


def test_spent_note_only_where_queries_cost_more_than_training(bench):
    def result(spent):
        return SimpleNamespace(model={"epsilon": spent})

    # GAP's queries are charged releases: 'covered' then refers to the total, which the row must say
    assert bench.spent_note(result(4.897), 1.0) == "ε spent after this attack's queries 4.90 (covered refers to it)"
    assert bench.spent_note(result(0.9993), 1.0) == ""  # training spent a hair under the target
    assert bench.spent_note(result(None), math.inf) == ""  # non-private model
