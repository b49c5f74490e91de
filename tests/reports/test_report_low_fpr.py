"""The report shows every TPR at 1 % FPR with its spread over the attack's runs and its number
of negatives, and says when 1 % is less than one false positive (issue 25, item 5)."""

from __future__ import annotations

import pytest

import dpaudit
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.verdict import tpr_over_runs
from dpaudit.data.datasets import csbm
from reports.aggregate import build_report_data
from reports.render import render_html


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    graph = csbm(num_nodes=160, num_classes=3, num_features=8, avg_degree=5, homophily=0.85, feature_signal=1.0, seed=5)
    return dpaudit.compare(
        graph,
        defenses=["gcn"],
        epsilons=["inf"],
        attacks=["mia-threshold"],
        overrides={"gcn": {"epochs": 30}},
        attack_settings={"mia-threshold": {"runs": 3, "n_boot": 50}},
        out=tmp_path_factory.mktemp("low-fpr") / "study",
        progress=False,
    )


def test_tpr_cells_show_spread_runs_and_negatives(study):
    data = build_report_data(study.done, study.report_meta())
    cell = data["summary"][0]["attacks"]["mia-threshold"]
    spread = cell["tpr_at_1pct_fpr_over_runs"]
    result = study.done[0]["attacks"]["mia-threshold"]
    assert spread["runs"] == 3 and spread["per_run"] == [r["tpr_at_fpr"]["0.01"] for r in result["runs"]]
    assert spread["negatives"] == min(r["non_members"] for r in result["runs"]) < 100
    assert not spread["resolved"]  # a small graph: 1 % of its non-members is no false positive at all
    html = render_html(data)
    row = html[html.index('id="summary-table"') :]
    row = row[: row.index("</tr>", row.index("<tbody>"))]
    assert f"3 runs, {spread['negatives']} neg." in row and ">unresolved</span>" in row
    if spread["sd"] is not None:
        assert f"± {spread['sd']:.3f}" in row
    verdict = data["verdicts"][0]["best_tpr_at_1pct_fpr"]
    assert verdict["over_runs"]["detail"] in html and "not resolved" in verdict["over_runs"]["text"]


def test_tpr_over_runs_pools_seeds_and_reads_old_results():
    runs = lambda *t: [{"tpr_at_fpr": {"0.01": v}, "non_members": 140} for v in t]  # noqa: E731
    pooled = tpr_over_runs([AttackResult("a", None, runs=runs(0.7, 0.5)), AttackResult("a", None, runs=runs(0.6))])
    assert pooled["runs"] == 3 and pooled["mean"] == pytest.approx(0.6) and pooled["sd"] == pytest.approx(0.1)
    assert pooled["resolved"] and "140 negatives: 1% = 1.4 false positives" in pooled["text"]
    old = tpr_over_runs(
        [AttackResult("a", None, tpr_at_fpr={"0.01": 0.4})]
    )  # written before per-run records: one value, no count
    assert old["runs"] == 1 and old["negatives"] is None and "negatives unknown" in old["text"]
