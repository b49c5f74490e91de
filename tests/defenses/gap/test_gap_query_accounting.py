"""GAP's query ledger (issue 27, and the privacy review's two ledgers): a query counts its
release in O(1) in the query ledger; what the ledger states is exactly the composition of every
release made — never less than what PMA actually released — about the query graph(s), while the
model's spec stays its training spec whatever was queried."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

import defenses  # noqa: F401  (registers the defenses)
import defenses.gap.model as gap_model
from dpaudit.accounting import PrivacyLedger
from dpaudit.accounting.mechanisms import mechanism_from_record
from dpaudit.data.splits import make_split
from dpaudit.training.registry import get_defense


@pytest.fixture(scope="module")
def gap(small_graph):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    return get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=2, epochs=2).fit(small_graph, split)


def _composed(model, releases: int):
    """The composition of ``releases`` query releases at the model's δ, from the config's
    query-mechanism record (independently of the query ledger's code)."""
    query = gap_model._mechanism_from(model.cfg["query_mechanism"]).describe()
    ledger = PrivacyLedger().extend(mechanism_from_record(query) for _ in range(releases))
    return ledger.spec(model.privacy.delta, model.privacy.unit)


def _variant(data: Data, drop: int) -> Data:
    other = data.clone()
    other.edge_index = data.edge_index[:, torch.arange(data.edge_index.size(1)) != drop]
    return other


@pytest.mark.parametrize("releases", [1, 3, 40, 250])
def test_the_query_ledger_after_n_releases_is_their_composition(gap, releases):
    """1 and 3 releases: ε < 50, the PLD analysis runs; 40 crosses into RDP only; 250 many."""
    api = gap.query_session()
    for _ in range(releases):
        api._record_query_release()
    spec, want = api.query_ledger.spec(), _composed(gap, releases)
    assert spec.epsilon == pytest.approx(want.epsilon, rel=1e-9)
    assert spec.mechanisms == want.mechanisms and len(spec.mechanisms) == releases
    assert spec.epsilon_by_accountant == pytest.approx(want.epsilon_by_accountant, rel=1e-9)
    assert spec.gdp_mu == pytest.approx(want.gdp_mu, rel=1e-9) and spec.accountant == want.accountant
    assert spec.delta == gap.privacy.delta and spec.unit == gap.privacy.unit
    assert api.privacy.to_dict() == gap.privacy.to_dict() and len(api.privacy.mechanisms) == 1  # training only
    assert not any(n.startswith(gap_model.RELEASES_NOTE) for n in api.privacy.notes)


def test_a_query_composes_nothing_until_the_ledger_is_read(gap, small_graph, monkeypatch):
    composed = []
    real = PrivacyLedger.spec
    monkeypatch.setattr(PrivacyLedger, "spec", lambda self, *a, **k: composed.append(1) or real(self, *a, **k))
    api = gap.query_session()
    for drop in range(5):
        api.predict_proba(_variant(small_graph.data, drop), [0])
    assert api.query_ledger.releases == 5 and composed == []
    assert api.privacy.epsilon == gap.privacy.epsilon and composed == []  # the training spec: nothing to compose
    first = api.query_ledger.spec().epsilon
    assert api.query_ledger.spec().epsilon == first and len(composed) <= 1  # composed once, then kept
    api.predict_proba(_variant(small_graph.data, 5), [0])
    assert api.query_ledger.spec().epsilon > first


def test_the_query_ledger_is_never_smaller_than_what_pma_released(gap, small_graph, monkeypatch):
    """Every PMA run a query makes is one release in the query ledger: session memo hits,
    uncovered nodes, a whole-graph query and an evicted graph, in one sequence; on the model
    object itself every call is a run."""
    runs = []
    real = gap_model.private_multi_hop_aggregation
    monkeypatch.setattr(gap_model, "private_multi_hop_aggregation", lambda *a, **k: runs.append(1) or real(*a, **k))
    api = gap.query_session()
    api.query_memo_size = 2
    graphs = [_variant(small_graph.data, i) for i in range(3)]
    for graph, nodes in [(0, [1, 2]), (0, [2]), (0, [3]), (1, None), (1, [7]), (2, [1]), (0, [1, 2]), (0, [3])]:
        api.predict_proba(graphs[graph], nodes)
        assert api.query_ledger.releases == len(runs)
        assert api.query_ledger.spec().epsilon >= _composed(gap, len(runs)).epsilon * (1 - 1e-9)
    assert len(runs) == 6 and len(api.query_ledger.spec().mechanisms) == len(runs)
    runs.clear()
    before = gap.query_ledger.releases
    for _ in range(3):  # the model object: no memo, whoever asked before
        gap.predict_proba(graphs[0], [1, 2])
    assert gap.query_ledger.releases - before == len(runs) == 3


def test_a_queried_model_saves_and_loads_with_its_query_ledger(gap, small_graph, tmp_path):
    from dpaudit.release.model import load

    api = gap.query_session()
    for drop in range(3):
        api.predict_proba(_variant(small_graph.data, drop), [0])
    api.save(tmp_path / "queried")
    loaded = load(tmp_path / "queried")
    assert loaded.query_ledger.releases == 3 and loaded.privacy.to_dict() == gap.privacy.to_dict()
    assert loaded.query_ledger.spec().epsilon == pytest.approx(_composed(gap, 3).epsilon, rel=1e-9)
    assert loaded.query_ledger.to_dict()["epsilon"] == pytest.approx(api.query_ledger.spec().epsilon, rel=1e-12)
