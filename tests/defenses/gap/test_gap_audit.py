"""Auditing a query-charged model (issue 23, item 8; issue 46 §2): a GAP model answers every
query graph with a new PMA release counted in its query ledger; a release over the training
graph (or a feature-perturbed copy of it: LinkTeller) is charged to the training data, whose
total is the training ε composed with those releases. The audit states what its attacks will
release up front, reads the owner's training release for the training graph (free), queries its
own sessions so the saved model never changes, and reports the sessions' releases in one finding —
one warning line, not one per release — with the composed total beside the training ε."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import defenses  # noqa: F401  (registers the defenses)
from defenses.gap.model import QUERY_LEDGER_PROTECTS
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
    assert ledger["protects"] == QUERY_LEDGER_PROTECTS
    assert queries["epsilon_total_at_most"] > queries["training_epsilon"]
    text = format_plan(result.plan)
    assert "query-charged model: the attacks need at most" in text
    assert f"their releases go to the query ledger (ε ≤ {ledger['epsilon']:.4g}" in text
    assert f"charged to the training data: total ε ≤ {queries['epsilon_total_at_most']:.4g}" in text
    assert "would spend" not in text


def test_the_audit_spends_nothing_of_the_saved_model(audited, saved_edp):
    result, before, _ = audited
    saved = load(saved_edp, record=True)
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
    # LinkTeller's feature-perturbed copies of the training graph: every release charged to the training data
    assert found["charged_releases"] == made and found["charged_by_step"] == {"linkteller": made}
    total = result.model.total_with(made)
    ledger = dataclasses.replace(result.model.query_ledger, releases=made, charged=made, total_spec=lambda: total)
    assert found["query_ledger"] == ledger.to_dict() and found["query_ledger"]["releases"] == made
    assert found["training_epsilon"] == result.model.privacy.epsilon
    assert found["epsilon_total"] == pytest.approx(total.epsilon) and total.epsilon > result.model.privacy.epsilon
    assert found["finding"].startswith(
        f"answering these {made} queries made {made} PMA release(s), {made} of them over the training graph: charged "
        f"to the training data, total ε = {total.epsilon:.4g}"
    )
    assert warnings == [f"dpaudit.app.workflows.audit: audit: {found['finding']}"]


def test_the_report_headlines_the_saved_guarantee_and_the_finding_once(audited, tmp_path):
    result, _, _ = audited
    html = result.to_html(tmp_path / "audit.html").read_text()
    assert html.count("answering these") == 1
    assert f"({result.model.privacy.epsilon:.3f}, " in html  # the claimed guarantee is the training ε
    ledger = result.query_api["query_ledger"]
    assert html.count("<dt>query ledger</dt>") == 1  # one line per model, beside (not in) the guarantee
    assert f"{ledger['releases']} PMA release(s) on query graphs: ({ledger['epsilon']:.3f}, " in html
    assert f"{ledger['charged_to_training']} of them over the training graph, charged to the training data" in html


def test_a_public_copy_pays_for_the_training_graph_too(saved_edp, small_graph):
    public = load(saved_edp)  # the public view is the default
    assert not public.has_record
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


def test_an_attack_that_queries_the_training_graph_is_compared_at_the_composed_epsilon(saved_edp, small_graph):
    """LinkTeller run directly on a query-charged model over its training graph (the review's
    reproduction, issue 46 §2): every release it makes over the feature-perturbed copies of the
    training graph is charged to the training data, and its coverage and would-be ceiling are
    judged at the training ε composed with them, never at the training ε alone."""
    import attacks
    from dpaudit.auditing.statistics import coverage

    model = load(saved_edp, record=True)
    result = attacks.run("linkteller", model, small_graph, **SETTINGS["linkteller"])
    target = model.card["target_epsilon"]
    charged = model.query_ledger.charged
    assert charged == model.query_ledger.releases > 0
    composed = model.charged_privacy
    assert composed.epsilon > model.privacy.epsilon and composed.delta == model.privacy.delta
    assert result.ceiling["target_epsilon"] == target and result.ceiling["charged_releases"] == charged
    assert result.ceiling["epsilon_training"] == pytest.approx(model.privacy.epsilon)
    assert result.ceiling["epsilon_spent"] == pytest.approx(composed.epsilon)
    assert result.ceiling["epsilon"] == pytest.approx(composed.epsilon)  # the coverage itself is the composed ε
    assert result.model["epsilon_total"] == pytest.approx(composed.epsilon)
    # "covered" is decided against the composed spec: the would-be ceiling is the composed one
    cov = coverage(
        composed,
        "edge",
        True,
        model.inference_private,
        deployment="training-graph",
        inference=model.card.get("inference"),
    )
    assert result.covered_by_guarantee == cov.covered
    assert result.ceiling["ceiling_auc_if_neighbouring"] == pytest.approx(cov.ceiling_auc)
    assert any(n.startswith(f"compared with ε = {composed.epsilon:.4g}: the training ε") for n in result.notes)
    access = result.extra["query_access"]
    assert access["deployment"] == "training-graph" and access["graph"] == "the owner's full training graph"
    assert access["feature_changes"] > 0 and access["charged_releases"] == charged
    assert access["ran"].startswith(f"training-graph: {access['feature_changes']} queries with querier-chosen feature")
    ledger = result.to_dict()["extra"]["query_ledger"]
    assert ledger == model.query_ledger.to_dict() and ledger["charged_to_training"] == charged
    quiet = attacks.run("mia-threshold", load(saved_edp, record=True), small_graph)  # from the training release
    assert quiet.extra["query_ledger"]["releases"] == 0 and quiet.ceiling["charged_releases"] == 0
    assert quiet.ceiling["epsilon_spent"] == pytest.approx(model.privacy.epsilon)


def test_link_stealing_over_the_training_graph_spends_nothing_new(saved_edp, small_graph):
    """Link stealing's one full-graph query on the owner's copy is answered from the training
    release (post-processing: nothing new charged); on a copy without the owner's record
    declared ``training-graph``, the same query is one new release charged to the training data."""
    import attacks

    owner = load(saved_edp, record=True)
    result = attacks.run("link-steal", owner, small_graph, **SETTINGS["link-steal"])
    assert owner.query_ledger.releases == 0 and result.ceiling["epsilon_spent"] == pytest.approx(owner.privacy.epsilon)
    assert result.extra["query_access"]["ran"].endswith("answered from the training release (nothing new charged)")
    public = load(saved_edp).query_session(deployment="training-graph")
    public.predict_proba(small_graph.data)
    assert public.query_ledger.charged == 1 and public.charged_privacy.epsilon > public.privacy.epsilon
