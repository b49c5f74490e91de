"""Auditing a query-charged model (issue 23, item 8): a GAP model answers every query graph
with a new PMA release composed into its spec. The audit states what its attacks will cost up
front, reads the owner's training release for the training graph (free), queries copies so the
saved model's spec never changes, and reports what an interactive API answering the attacks'
queries would spend as one finding — one warning line, not one per release."""

from __future__ import annotations

import logging

import pytest

import defenses  # noqa: F401  (registers the defenses)
from dpaudit.model import load
from dpaudit.registry import get_defense
from dpaudit.splits import make_split
from dpaudit.workflows import audit, audit_plan, format_plan
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
    assert queries["saved_epsilon"] < queries["epsilon_at_most"]
    assert "query-charged model: the attacks need at most" in format_plan(result.plan)


def test_the_audit_spends_nothing_of_the_saved_model(audited, saved_edp):
    result, before, _ = audited
    saved = load(saved_edp)
    assert (saved_edp / "model.json").read_bytes() == before
    assert result.model.privacy.epsilon == saved.privacy.epsilon and result.model.foreign_releases == 0
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
    assert found["epsilon"] == pytest.approx(result.model.spec_after(made).epsilon)
    assert found["finding"].startswith(f"answering these {made} queries would spend ε = {found['epsilon']:.4g}")
    assert warnings == [f"dpaudit.workflows.audit: audit: {found['finding']}"]


def test_the_report_headlines_the_saved_guarantee_and_the_finding_once(audited, tmp_path):
    result, _, _ = audited
    html = result.to_html(tmp_path / "audit.html").read_text()
    assert html.count("answering these") == 1
    assert f"({result.model.privacy.epsilon:.3f}, " in html  # the claimed guarantee is the saved ε
    assert f"{result.query_api['epsilon']:.3f}, " not in html


def test_a_public_copy_pays_for_the_training_graph_too(saved_edp, small_graph):
    public = load(saved_edp, record=False)
    plan = audit_plan(public, small_graph, ATTACKS, SETTINGS)
    steps = {s["attack"]: s["foreign_releases"] for s in plan["attacks"]}
    assert not plan["queries"]["training_release"] and not plan["queries"]["training_graph_free"]
    assert steps["link-steal"] == steps["mia-threshold"] == 1


def test_identical_ledger_rows_collapse_in_the_report(audited, tmp_path):
    """A model that answered 968 query graphs records 968 identical releases: one row, × 968."""
    result, _, _ = audited
    spec = result.model.spec_after(968)
    rows, spans = collapse_mechanisms(spec.mechanisms)
    assert len(rows) == 2 and spans[1] == {"first": 2, "last": 969, "repeats": 968}
    record = result.record()
    record["privacy"] = spec.to_dict()
    html, _ = write_report([record], result.report_meta(), tmp_path / "queried.html")
    text = html.read_text()
    assert "× 968" in text and text.count("pma on a query graph") == 1


def test_an_attack_that_spends_says_at_which_epsilon_it_was_compared(saved_edp, small_graph):
    """LinkTeller run directly on a query-charged model: its coverage is judged at the ε spent
    by training and its own queries, recorded beside the training target and said in a note."""
    import attacks

    model = load(saved_edp)
    result = attacks.run("linkteller", model, small_graph, **SETTINGS["linkteller"])
    target = model.card["target_epsilon"]
    assert result.ceiling["target_epsilon"] == target
    assert result.ceiling["epsilon_spent"] == pytest.approx(model.privacy.epsilon) and model.privacy.epsilon > target
    assert any(n.startswith("compared with ε = ") and f"training target ε = {target:g}" in n for n in result.notes)
    quiet = attacks.run("mia-threshold", load(saved_edp), small_graph)  # answered from the training release
    assert quiet.ceiling["epsilon_spent"] <= target and not any(n.startswith("compared with ε = ") for n in quiet.notes)
