"""Releases over the training graph are charged to the training data (issue 46 §2, the review's
reproduction): a PMA release over the training graph or a feature-perturbed copy of it is about
the training data, so the training data's total is the training ε composed with those releases;
a release over a disjoint graph is not charged. A session may cap its releases with a declared
budget: a query past it is refused in one line before any work."""

from __future__ import annotations

import pytest
import torch

import defenses  # noqa: F401  (registers the defenses)
import defenses.gap.model as gap_model
from dpaudit.accounting import PrivacyLedger
from dpaudit.accounting.mechanisms import mechanism_from_record
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense


@pytest.fixture(scope="module")
def gap(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    return get_defense("gap-edp")(epsilon=2.0, seed=0, encoder_epochs=2, epochs=2).fit(small_graph, split)


@pytest.fixture(scope="module")
def disjoint():
    """Another graph (another node count): it shares no node and no edge with the training graph."""
    return csbm(
        num_nodes=120, num_classes=3, num_features=16, avg_degree=6, homophily=0.85, feature_signal=0.8, seed=7
    ).data


def _perturbed(data, node: int = 3):
    copy = data.clone()
    copy.x = data.x.clone()
    copy.x[node] = copy.x[node] + 0.5  # LinkTeller's probe: one querier-chosen feature change
    return copy


def _composition(model, charged: int):
    """The training ledger and ``charged`` query releases composed, from the records alone
    (independently of the model's code)."""
    records = [
        *model.privacy.mechanisms,
        *[gap_model._mechanism_from(model.cfg["query_mechanism"]).describe()] * charged,
    ]
    return (
        PrivacyLedger().extend(mechanism_from_record(r) for r in records).spec(model.privacy.delta, model.privacy.unit)
    )


@pytest.mark.parametrize("owner", ["fitted", "loaded"])
def test_the_training_graph_and_a_perturbed_copy_are_charged_a_disjoint_graph_is_not(
    gap, small_graph, disjoint, owner, tmp_path
):
    model = gap if owner == "fitted" else load(gap.save(tmp_path / "m"), record=True)
    session = model.query_session()
    session.predict_proba(small_graph.data, [0])  # the training graph itself (a query outside the release)
    assert session.query_ledger.releases == session.query_ledger.charged == 1
    session.predict_proba(_perturbed(small_graph.data), [1, 2])
    assert session.query_ledger.releases == session.query_ledger.charged == 2
    session.predict_proba(disjoint, [0, 5])
    assert session.query_ledger.releases == 3 and session.query_ledger.charged == 2
    total = session.charged_privacy
    want = _composition(model, 2)
    assert total.epsilon == pytest.approx(want.epsilon, rel=1e-6) and total.epsilon > model.privacy.epsilon
    assert total.delta == model.privacy.delta and total.unit == model.privacy.unit
    assert total.notes[0] == gap_model.CHARGED_NOTE.format(n=2)
    ledger = session.query_ledger.to_dict()
    assert ledger["charged_to_training"] == 2 and ledger["epsilon_total"] == pytest.approx(total.epsilon)
    assert session.privacy.to_dict() == model.privacy.to_dict()  # the training spec itself is unchanged
    assert "2 over the training graph, charged to the training data" in session.query_ledger.summary()


def test_a_graph_sharing_edges_with_the_training_graph_is_charged(gap, small_graph):
    """The training graph minus an edge still shares every other edge: charged."""
    session = gap.query_session()
    fewer = small_graph.data.clone()
    fewer.edge_index = small_graph.data.edge_index[:, 2:]
    session.predict_proba(fewer, [0])
    none = small_graph.data.clone()
    none.edge_index = small_graph.data.edge_index[:, :0]  # the same nodes, no edge: nothing of the edges
    session.predict_proba(none, [0])
    assert session.query_ledger.releases == 2 and session.query_ledger.charged == 1


def test_a_public_copy_is_charged_by_its_declared_deployment(gap, small_graph, disjoint, tmp_path):
    """A copy without the owner's record cannot recognise the training graph: the deployment
    the session is declared for decides (training-graph: every release charged)."""
    public = load(gap.save(tmp_path / "m"))
    undeclared = public.query_session()
    undeclared.predict_proba(small_graph.data, [0])
    assert undeclared.query_ledger.charged == 0
    declared = public.query_session(deployment="training-graph")
    declared.predict_proba(_perturbed(small_graph.data), [0])
    declared.predict_proba(disjoint, [0])  # declared: every graph it answers over is the owner's
    assert declared.query_ledger.charged == 2
    querier = gap.query_session(deployment="querier-graph")  # the owner's copy, the querier's own graph
    querier.predict_proba(small_graph.data, [0])
    assert querier.query_ledger.releases == 1 and querier.query_ledger.charged == 0
    with pytest.raises(ConfigurationError, match="unknown deployment"):
        gap.query_session(deployment="everywhere")


def test_a_query_past_the_declared_budget_is_refused_in_one_line_before_any_work(
    gap, small_graph, disjoint, monkeypatch
):
    runs = []
    real = gap_model.private_multi_hop_aggregation
    monkeypatch.setattr(gap_model, "private_multi_hop_aggregation", lambda *a, **k: runs.append(1) or real(*a, **k))
    budget = _composition(gap, 3).epsilon * (1 + 1e-9)  # room for exactly three releases
    session = gap.query_session(budget=budget)
    for node in range(3):
        session.predict_proba(disjoint, [node])
    assert len(runs) == 3
    with pytest.raises(gap_model.QueryBudgetExceeded) as refused:
        session.predict_proba(small_graph.data, [7])
    assert len(runs) == 3 and session.query_ledger.releases == 3  # refused before the release
    message = str(refused.value)
    assert "\n" not in message and message.startswith("query refused: one more PMA release would take the total ε")
    assert isinstance(refused.value, ConfigurationError)
    # the refusal counts releases, never which graph: a disjoint graph is refused alike
    with pytest.raises(gap_model.QueryBudgetExceeded):
        session.predict_proba(disjoint, [9])
    session.predict_proba(disjoint, [0])  # a repeat this session already released: free, answered again
    assert len(runs) == 3
    with pytest.raises(ConfigurationError, match="at least the training ε"):
        gap.query_session(budget=gap.privacy.epsilon / 2)


def test_answers_from_the_training_release_spend_nothing(gap, small_graph):
    """The owner answers its own graph from the training release: post-processing, nothing charged."""
    from attacks import _common as C

    session = gap.query_session(deployment="training-graph")
    probs = C.posteriors(session, small_graph.data)
    assert probs.shape == (small_graph.num_nodes, small_graph.num_classes)
    assert session.query_ledger.releases == 0 and session.charged_privacy is session.privacy
    assert torch.equal(torch.as_tensor(C.posteriors(session, small_graph.data)), torch.as_tensor(probs))


def test_linkteller_answered_from_the_training_release_spends_nothing_new(gap, small_graph, tmp_path):
    """The owner's policy ``answer_from_release``: every query over the training graph's edge
    structure reads the training release (hops 1..K) and the queried features (hop 0), so
    LinkTeller's feature-perturbed queries cost nothing new and its ceiling stays at the
    training ε."""
    import attacks

    session = gap.query_session(deployment="training-graph", answer_from_release=True)
    result = attacks.run("linkteller", session, small_graph, num_pairs=15, pr_nodes=0, hard_negatives=False)
    assert session.query_ledger.releases == 0 and session.charged_privacy is session.privacy
    assert result.ceiling["epsilon_spent"] == pytest.approx(gap.privacy.epsilon)
    assert result.ceiling["charged_releases"] == 0
    assert result.extra["query_access"]["ran"].endswith("answered from the training release (nothing new charged)")
    # a querier's feature change moves only the changed node's own answer
    moved = _perturbed(small_graph.data, node=3)
    before, after = session.predict_proba(small_graph.data), session.predict_proba(moved)
    assert not torch.equal(before[3], after[3])
    assert torch.equal(torch.cat([before[:3], before[4:]]), torch.cat([after[:3], after[4:]]))
    with pytest.raises(ConfigurationError, match="owner's record"):  # a public copy has no training release
        load(gap.save(tmp_path / "m")).query_session(answer_from_release=True)


def test_charged_releases_survive_save_and_load_and_are_checked(gap, small_graph, tmp_path, capsys):
    """A saved model's charged releases come back with it (its total over the training graph is
    what ``inspect`` prints); a count edited past the releases made is refused on load."""
    import json

    from dpaudit.app.cli import main
    from dpaudit.errors import IntegrityError

    session = gap.query_session()
    session.predict_proba(small_graph.data, [0])
    directory = session.save(tmp_path / "queried")
    public = load(directory)
    assert public.charged_releases == 1
    assert public.charged_privacy.epsilon == pytest.approx(session.charged_privacy.epsilon)
    assert main(["inspect", str(directory)]) == 0
    shown = capsys.readouterr().out
    assert f"total over the training graph: ({public.charged_privacy.epsilon:.4g}, " in shown
    assert "a querier-chosen feature change: one new release over the training graph, charged" in shown
    meta = json.loads((directory / "model.json").read_text())
    meta["config"]["charged_releases"] = 5
    (directory / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="charged_releases must lie in"):
        load(directory)
