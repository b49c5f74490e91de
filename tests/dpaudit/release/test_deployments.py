"""What ε covers per deployment (dpaudit.release.deployments): the card's entry, coverage() and the attacks.

Over a graph the querier supplies the answers are post-processing of the private weights; over
the owner's training graph they are covered only through a training release or own-features
answers. Attacks audit the deployment a model is trained for (inductive → the querier's graph)
unless told otherwise, and say which.
"""

from __future__ import annotations

import json

import pytest

import attacks
import attacks._common as C
import defenses  # noqa: F401  (registers the defenses)
from dpaudit.accounting import GaussianMechanism, PrivacyLedger
from dpaudit.app.cli import main
from dpaudit.auditing.statistics import coverage
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.deployments import (
    CHARGED_RELEASE,
    DEPLOYMENTS,
    FEATURE_CHANGE,
    OWN_FEATURES,
    OWNER_GRAPH,
    QUERIER_GRAPH,
    READ_IN_CLEAR,
    TRAINING_GRAPH,
    covered_deployments,
    deployment_entry,
    inference_entry,
)
from dpaudit.training.registry import get_defense

DPAR_FAST = {"epochs": 3, "num_sources": 40, "batch_size": 100}


@pytest.fixture(scope="module")
def graph():
    return csbm(num_nodes=240, num_classes=3, num_features=12, avg_degree=5, homophily=0.8, feature_signal=1.0, seed=5)


@pytest.fixture(scope="module")
def inductive(graph):
    return make_split(graph, "inductive:0.8,0.2", seed=0)


@pytest.fixture(scope="module")
def dpar_inductive(graph, inductive):
    return get_defense("dpar-em1")(epsilon=4.0, delta=1e-3, seed=0, **DPAR_FAST).fit(graph, inductive)


def _edge_spec():
    return PrivacyLedger().step(GaussianMechanism(2.0, 1.0, 1)).spec(1e-5, "edge")


# --------------------------------------------------------------------------- the card's entry


def test_each_defense_declares_what_a_feature_change_costs_per_deployment(graph):
    """What a querier-chosen feature change over the private graph costs is declared by each
    defense and said per deployment on its card (issue 46 §2)."""
    split = make_split(graph, "random:0.5,0.25,0.25", seed=0)
    fits = {
        "gap-edp": (CHARGED_RELEASE, {"encoder_epochs": 2, "epochs": 2}),
        "mlp-dp": (OWN_FEATURES, {"epochs": 2}),
        "dpar-em1": (READ_IN_CLEAR, DPAR_FAST),
    }
    for name, (kind, hp) in fits.items():
        card = get_defense(name)(epsilon=4.0, seed=0, **hp).fit(graph, split).card["inference"]
        assert card["feature_change"] == kind
        for deployment in DEPLOYMENTS:
            entry = deployment_entry(card, deployment)
            assert entry["feature_change"] == FEATURE_CHANGE[kind][deployment]
    charged = deployment_entry(
        inference_entry(private=True, training_graph=True, note="n", owner_graph_mechanism="a PMA release"),
        TRAINING_GRAPH,
    )
    assert "charged to the training data" in charged["feature_change"]
    with pytest.raises(DPAuditError, match="feature_change must be one of"):
        inference_entry(private=True, training_graph=True, note="n", feature_change="whatever")


def test_an_entry_says_every_deployment_and_a_non_private_model_covers_none():
    entry = inference_entry(private=True, training_graph=False, note="reads the graph")
    assert set(entry["deployments"]) == set(DEPLOYMENTS)
    assert covered_deployments(entry) == {QUERIER_GRAPH: True, TRAINING_GRAPH: False, OWNER_GRAPH: True}
    assert entry["private"] is False  # the legacy key is the training graph's answer
    assert entry["deployments"][OWNER_GRAPH]["graph_protected"] is False
    guarded = inference_entry(private=True, training_graph=True, note="n", owner_graph_mechanism="a PMA release")
    assert guarded["deployments"][OWNER_GRAPH]["graph_protected"] is True
    assert "query ledger" in guarded["deployments"][OWNER_GRAPH]["note"]
    off = inference_entry(private=False, training_graph=True, note="n")
    assert not any(covered_deployments(off).values())
    # a card claiming coverage never covers anything when the weights are not private
    assert not any(covered_deployments(guarded, private=False).values())


def test_a_card_written_before_deployments_is_read_conservatively():
    legacy = {"private": False, "note": "Eq. 4 reads the graph"}
    assert deployment_entry(legacy, TRAINING_GRAPH) == {"covered": False, "note": "Eq. 4 reads the graph"}
    assert deployment_entry(legacy, QUERIER_GRAPH)["covered"] is True
    assert deployment_entry({"private": True, "note": "own features"}, TRAINING_GRAPH)["covered"] is True
    with pytest.raises(DPAuditError, match="unknown deployment"):
        deployment_entry(legacy, "somewhere")


def test_coverage_of_edge_inference_follows_the_deployment():
    spec = _edge_spec()
    entry = inference_entry(private=True, training_graph=False, note="reads the graph in the clear")
    querier = coverage(spec, "edge", True, False, deployment=QUERIER_GRAPH, inference=entry)
    training = coverage(spec, "edge", True, False, deployment=TRAINING_GRAPH, inference=entry)
    assert querier.covered and querier.epsilon == pytest.approx(spec.epsilon)
    assert not training.covered and "training-graph" in training.reason
    # a training release covers the training graph
    released = inference_entry(private=True, training_graph=True, note="training release")
    assert coverage(spec, "edge", True, False, deployment=TRAINING_GRAPH, inference=released).covered
    # without a deployment the legacy flags decide, as before
    assert not coverage(spec, "edge", True, False).covered


# --------------------------------------------------------------------------- every defense's card


@pytest.mark.parametrize(
    "name, settings, training_covered",
    [
        ("mlp-dp", {"epsilon": 4.0, "delta": 1e-3, "epochs": 2}, True),
        ("dpar-em1", {"epsilon": 4.0, "delta": 1e-3, **DPAR_FAST}, False),
        ("dpar-em1", {"epsilon": 4.0, "delta": 1e-3, "power_steps": 0, **DPAR_FAST}, True),
        ("gcn", {"epsilon": float("inf"), "epochs": 2}, False),
    ],
)
def test_cards_say_per_deployment_what_is_covered(graph, inductive, name, settings, training_covered):
    model = get_defense(name)(seed=0, **settings).fit(graph, inductive)
    covered = covered_deployments(model.card["inference"], model.privacy.is_private)
    if not model.privacy.is_private:
        assert not any(covered.values())
        return
    assert covered[QUERIER_GRAPH] and covered[OWNER_GRAPH]
    assert covered[TRAINING_GRAPH] is training_covered
    assert model.inference_private is training_covered


# --------------------------------------------------------------------------- attacks


def test_the_querier_graph_holds_no_edge_training_read(graph, inductive):
    trained = inductive.edge_index_for(graph, "train")
    queried = C.query_graph(graph, inductive, QUERIER_GRAPH, "edge")
    n = graph.num_nodes
    kept = set((queried.edge_index[0] * n + queried.edge_index[1]).tolist())
    assert kept.isdisjoint((trained[0] * n + trained[1]).tolist())
    assert queried.edge_index.size(1) == graph.data.edge_index.size(1) - trained.size(1)
    assert queried.x is graph.data.x  # no copy of the features
    # node membership: one graph for members and non-members alike (the auditor's)
    assert C.query_graph(graph, inductive, QUERIER_GRAPH, "node") is graph.data
    transductive = make_split(graph, "random:0.5,0.2,0.3", seed=0)
    assert C.query_graph(graph, transductive, QUERIER_GRAPH, "edge").edge_index.numel() == 0


def test_an_inductive_model_is_audited_over_the_queriers_graph_with_a_ceiling(graph, dpar_inductive):
    res = attacks.run("mia-threshold", dpar_inductive, graph, runs=1)
    assert res.extra["deployment"] == QUERIER_GRAPH and res.settings["deployment"] == QUERIER_GRAPH
    assert res.covered_by_guarantee and res.bound_valid
    assert res.ceiling_auc is not None and res.auc <= res.ceiling_auc
    assert not any(n.startswith("inference: ") for n in res.notes)  # Eq. 4's caveat is the training graph's


def test_edge_inference_is_covered_over_the_queriers_graph_only(graph, dpar_inductive):
    querier = attacks.run("link-steal", dpar_inductive, graph, runs=1, max_pairs=200, supervised=False)
    owner = attacks.run(
        "link-steal", dpar_inductive, graph, runs=1, max_pairs=200, supervised=False, deployment=TRAINING_GRAPH
    )
    assert querier.extra["deployment"] == QUERIER_GRAPH and querier.covered_by_guarantee
    assert owner.extra["deployment"] == TRAINING_GRAPH and not owner.covered_by_guarantee
    assert any("training-graph" in n for n in owner.notes)
    with pytest.raises(ConfigurationError, match="owner-graph"):
        attacks.run("link-steal", dpar_inductive, graph, runs=1, max_pairs=200, deployment=OWNER_GRAPH)
    with pytest.raises(ConfigurationError, match="deployment must be one of auto, querier-graph, training-graph"):
        attacks.run("mia-threshold", dpar_inductive, graph, runs=1, deployment="elsewhere")


def test_the_cli_prints_coverage_per_deployment_and_audits_the_one_asked(graph, dpar_inductive, tmp_path, capsys):
    directory = dpar_inductive.save(tmp_path / "m")
    assert main(["inspect", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "querier-graph    covered" in out and "training-graph   NOT covered" in out
    result = tmp_path / "ls.json"
    code = main(
        [
            "attack",
            "--model",
            str(directory),
            "--attack",
            "mia-threshold",
            "--runs",
            "1",
            "--deployment",
            "training-graph",
            "--out",
            str(result),
        ]
    )
    assert code == 0
    assert "(deployment training-graph)" in capsys.readouterr().out
    assert json.loads(result.read_text())["extra"]["deployment"] == TRAINING_GRAPH


def test_gcon_declares_the_own_answer_audience_of_its_training_graph_answers(graph, tmp_path, capsys):
    """GCON's Eq. 16 answers read the queried node's own edges in the clear: not covered over the
    training graph for a third party, covered for each node receiving only its own answer (issue
    50); the card declares it, ``inspect`` prints it, and a defense that declares nothing has none."""
    split = make_split(graph, "random:0.5,0.25,0.25", seed=0)
    gcon = get_defense("gcon")(epsilon=4.0, seed=0, encoder_epochs=5).fit(graph, split)
    entry = deployment_entry(gcon.card["inference"], TRAINING_GRAPH, gcon.privacy.is_private)
    assert entry["covered"] is False
    assert "its own answer" in entry["covered_for"] and "third party" in entry["covered_for"]
    assert "covered_for" not in deployment_entry(gcon.card["inference"], QUERIER_GRAPH)
    assert main(["inspect", str(gcon.save(tmp_path / "gcon"))]) == 0
    out = capsys.readouterr().out
    assert "training-graph   NOT covered" in out and "covered only for: each node receiving only its own" in out
    public = get_defense("gcon")(epsilon=4.0, seed=0, encoder_epochs=5, inference="public").fit(graph, split)
    assert "covered_for" not in deployment_entry(public.card["inference"], TRAINING_GRAPH)
    # never beside a covered answer, and never on a non-private model
    assert (
        "covered_for"
        not in inference_entry(private=True, training_graph=True, note="n", training_audience="x")["deployments"][
            TRAINING_GRAPH
        ]
    )
    off = inference_entry(private=False, training_graph=False, note="n", training_audience="x")
    assert "covered_for" not in deployment_entry(off, TRAINING_GRAPH, private=False)
