"""Auditing a query-charged model (issue 23, item 8): a GAP model answers every query graph
with a new PMA release counted in its query ledger (about the query graphs, never in its
training ε). The audit states what its attacks will release up front, reads the owner's
training release for the training graph (free), queries its own sessions so the saved model
never changes, and reports the sessions' releases as their query-graph ledger in one finding —
one warning line, not one per release — beside the unchanged training ε."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import defenses  # noqa: F401  (registers the defenses)
from dpaudit.app.workflows import audit, audit_plan, format_plan
from dpaudit.data.splits import make_split
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense
from reports.aggregate import collapse_mechanisms
from reports.render import write_report

ATTACKS = ["linkteller", "link-steal", "mia-threshold"]
SETTINGS = {"linkteller": {"num_pairs": 15, "pr_nodes": 10}, "link-steal": {"runs": 1, "max_pairs": 60}}


@pytest.fixture(scope="module")
def saved_edp(small_graph, tmp_path_factory):
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    model = get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=5, epochs=5).fit(small_graph, split)
    return model.save(tmp_path_factory.mktemp("gap-audit") / "gap-edp")


@pytest.fixture(scope="module")
def audited(saved_edp, small_graph):
    before = (saved_edp / "model.json").read_bytes()
    handler = _Collect()
    logging.getLogger().addHandler(handler)
    try:
        result = audit(saved_edp, dataset=small_graph, attacks=ATTACKS, settings=SETTINGS, n_boot=50, progress=False)
    finally:
        logging.getLogger().removeHandler(handler)
    return result, before, handler.warnings


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []

    def emit(self, record):
        self.warnings.append(f"{record.name}: {record.getMessage()}")


def test_the_plan_states_each_attacks_releases_up_front(audited):
    result, _, _ = audited
    queries = result.plan["queries"]
    steps = {s["attack"]: s for s in result.plan["attacks"]}
    assert queries["training_release"] and queries["training_graph_free"]
    assert steps["link-steal"]["foreign_releases"] == 0 and steps["mia-threshold"]["foreign_releases"] == 0
    assert 0 < steps["linkteller"]["foreign_releases"] == queries["releases_at_most"] <= 15 * 3 + 10
    assert queries["training_epsilon"] == pytest.approx(result.model.privacy.epsilon)
    ledger = queries["query_ledger"]
    assert ledger["releases"] == queries["releases_at_most"] and ledger["epsilon"] > 0
    assert ledger["protects"] == "the query graph(s), not the training data"
    text = format_plan(result.plan)
    assert "query-charged model: the attacks need at most" in text
    assert f"their releases go to the query-graph ledger (ε ≤ {ledger['epsilon']:.4g}" in text
    assert "would spend" not in text


def test_the_audit_spends_nothing_of_the_saved_model(audited, saved_edp):
    result, before, _ = audited
    saved = load(saved_edp)
    assert (saved_edp / "model.json").read_bytes() == before
    assert result.model.privacy.epsilon == saved.privacy.epsilon and result.model.query_ledger.releases == 0
    record = result.record(with_artifacts=False)
    assert record["privacy"]["epsilon"] == pytest.approx(saved.privacy.epsilon)
    assert len(record["privacy"]["mechanisms"]) == 1  # the training PMA only
    assert not result.errors


def test_the_query_api_cost_is_one_finding_and_one_warning(audited):
    result, _, warnings = audited
    found = result.query_api
    made = found["by_step"]["linkteller"]
    assert set(found["by_step"]) == {"linkteller"} and found["releases"] == made
    assert 0 < made <= result.plan["queries"]["releases_at_most"]
    ledger = dataclasses.replace(result.model.query_ledger, releases=made)
    assert found["query_ledger"] == ledger.to_dict() and found["query_ledger"]["releases"] == made
    assert found["training_epsilon"] == result.model.privacy.epsilon
    epsilon = found["query_ledger"]["epsilon"]
    assert found["finding"].startswith(
        f"answering these {made} queries made {made} PMA release(s) on query graphs, query-graph ledger ε = {epsilon:.4g}"
    )
    assert f"training guarantee, ε = {result.model.privacy.epsilon:.4g}, is unchanged" in found["finding"]
    assert warnings == [f"dpaudit.app.workflows.audit: audit: {found['finding']}"]


def test_the_report_headlines_the_saved_guarantee_and_the_finding_once(audited, tmp_path):
    result, _, _ = audited
    html = result.to_html(tmp_path / "audit.html").read_text()
    assert html.count("answering these") == 1
    assert f"({result.model.privacy.epsilon:.3f}, " in html  # the claimed guarantee is the training ε
    ledger = result.query_api["query_ledger"]
    assert html.count("<dt>query ledger</dt>") == 1  # one line per model, beside (not in) the guarantee
    assert f"{ledger['releases']} PMA release(s) on query graphs: ({ledger['epsilon']:.3f}, " in html
    assert "protecting the query graph(s), not the training data" in html


def test_a_public_copy_pays_for_the_training_graph_too(saved_edp, small_graph):
    public = load(saved_edp, record=False)
    plan = audit_plan(public, small_graph, ATTACKS, SETTINGS)
    steps = {s["attack"]: s["foreign_releases"] for s in plan["attacks"]}
    assert not plan["queries"]["training_release"] and not plan["queries"]["training_graph_free"]
    assert steps["link-steal"] == steps["mia-threshold"] == 1


def test_identical_ledger_rows_collapse_in_the_report(audited, tmp_path):
    """A record written before the query ledger, whose spec composed 968 query releases, holds
    968 identical rows: one row, × 968."""
    from defenses.gap.model import _mechanism_from
    from dpaudit.accounting import PrivacyLedger

    result, _, _ = audited
    model = result.model
    mechanisms = [_mechanism_from(r) for r in model.cfg["ledger"]]
    mechanisms += [_mechanism_from(model.cfg["query_mechanism"])] * 968
    spec = PrivacyLedger().extend(mechanisms).spec(model.privacy.delta, model.privacy.unit)
    rows, spans = collapse_mechanisms(spec.mechanisms)
    assert len(rows) == 2 and spans[1] == {"first": 2, "last": 969, "repeats": 968}
    record = result.record()
    record["privacy"] = spec.to_dict()
    html, _ = write_report([record], result.report_meta(), tmp_path / "queried.html")
    text = html.read_text()
    assert "× 968" in text and text.count("pma on a query graph") == 1


def test_an_attack_that_queries_is_compared_at_the_training_epsilon(saved_edp, small_graph):
    """LinkTeller run directly on a query-charged model: its coverage is judged at the training
    ε (no query changes it); its releases are the result's query ledger, a separate entry."""
    import attacks

    model = load(saved_edp)
    result = attacks.run("linkteller", model, small_graph, **SETTINGS["linkteller"])
    target = model.card["target_epsilon"]
    assert result.ceiling["target_epsilon"] == target
    assert result.ceiling["epsilon_spent"] == pytest.approx(model.privacy.epsilon) and model.privacy.epsilon <= target
    assert not any(n.startswith("compared with ε = ") for n in result.notes)
    ledger = result.to_dict()["extra"]["query_ledger"]
    assert ledger == model.query_ledger.to_dict() and ledger["releases"] > 0
    quiet = attacks.run("mia-threshold", load(saved_edp), small_graph)  # answered from the training release
    assert quiet.extra["query_ledger"]["releases"] == 0
