"""Issue 39: a user's claim is a hypothesis the audit tests — with attacks and with canary results
(``dpaudit.audit(..., canaries=[...])``, ``dpaudit audit --canaries``) — and an adapted model
saved as a released model goes through ``inspect``, ``attack`` and ``audit`` from the CLI.

The canary results are real runs of :func:`~dpaudit.app.workflows.canary.canary_audit`: the
zoo's DP-SGD with a tenth of its noise (a broken recipe) and the sound ``mlp-dp``, on a csbm graph
padded with all-zero feature columns (room for out-of-distribution canaries, as in
``tests/dpaudit/app/test_canary.py``), written as a graph file so the CLI can read it again."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from report_text import visible_text

import dpaudit
from dpaudit.app.cli import main
from dpaudit.app.workflows import zoo  # noqa: F401  (registers the zoo-* defenses)
from dpaudit.app.workflows.canary import canary_audit
from dpaudit.data.datasets import csbm, load_dataset
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import load
from dpaudit.training.adapters import adapt

CLAIM = {"epsilon": 1.0, "delta": 1e-5, "unit": "node", "accountant": "mine"}
SPLIT = "random:0.5,0.25,0.25"


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    base = csbm(num_nodes=400, num_features=32, avg_degree=6.0, seed=0).data
    x = torch.cat([base.x, torch.zeros(base.num_nodes, 512)], dim=1)
    path = tmp_path_factory.mktemp("graph") / "padded.npz"
    np.savez(path, x=x.numpy(), y=base.y.numpy(), edge_index=base.edge_index.numpy())
    return path


@pytest.fixture(scope="module")
def dataset(graph_file):
    return load_dataset(str(graph_file), declare=True)


def _canaries(dataset, defense, count):
    return canary_audit(
        defense,
        dataset,
        CLAIM["epsilon"],
        kind="node",
        canaries=count,
        split=SPLIT,
        delta=CLAIM["delta"],
        device="cpu",
        progress=False,
        design={"scale": 3.0},
        overrides={"epochs": 40},
    )


@pytest.fixture(scope="module")
def broken(dataset):
    """The broken recipe's canary audit: its certified bound exceeds ε = 1."""
    result = _canaries(dataset, "zoo-mlp-dp-noise-div10", 400)
    assert result["verdict"] == "guarantee broken" and result["certified_epsilon_lower_bound"] > 1.0
    return result


@pytest.fixture(scope="module")
def sound(dataset):
    result = _canaries(dataset, "mlp-dp", 200)
    assert result["verdict"] == "consistent with the claim" and result["can_refute_claim"]
    return result


@pytest.fixture(scope="module")
def model_c(dataset):
    """The user's model: a two-layer MLP trained without noise on the random split's training
    nodes, handed over with the claim (ε = 1, δ = 1e-5, node level)."""
    split = make_split(dataset, SPLIT, seed=0)
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(dataset.num_features, 32), torch.nn.ReLU(), torch.nn.Linear(32, dataset.num_classes)
    )
    optimiser = torch.optim.Adam(module.parameters(), lr=0.01)
    for _ in range(50):
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(module(dataset.data.x)[split.train], dataset.data.y[split.train])
        loss.backward()
        optimiser.step()
    return adapt(module, dataset, split=split, privacy=CLAIM, input="features", surrogate="mlp", name="model-c")


def test_a_valid_canary_bound_above_the_claim_refutes_it(model_c, dataset, broken, tmp_path):
    """The issue's acceptance: the user's claim is tested, and a canary result whose certified
    bound exceeds it gives "claim refuted" — no "paper accounting", no "covered", no "proven"."""
    assert model_c.privacy.status == "claimed" and model_c.privacy.hypothesis
    labelled = copy.deepcopy(broken)
    labelled["defense"] = "<b>zoo</b>"  # the recipe's label reaches the HTML escaped
    result = dpaudit.audit(
        model_c, dataset=dataset, attacks=["mia-threshold"], canaries=[labelled], n_boot=50, progress=False
    )
    [entry] = result.canaries.values()
    assert entry["verdict"] == "claim refuted" and entry["recomputed"] and entry["bound_valid"]
    # re-tested from the kept scores at the claim's own δ: the same certified bound as the run's
    assert entry["certified_epsilon_lower_bound"] == pytest.approx(broken["certified_epsilon_lower_bound"], rel=1e-6)
    res = result.results["mia-threshold"]
    assert res.covered_by_guarantee and res.ceiling["hypothesis"] and res.ceiling_auc is not None
    html = result.to_html(tmp_path / "audit.html").read_text()
    text = visible_text(html)
    assert "claim refuted" in text and "Claim refuted: a valid canary audit" in text
    assert "the user's own statement (protocol=claimed)" in text
    for wrong in ("paper accounting", "paper's own", "guarantee broken", "covered by the guarantee", "Covered here"):
        assert wrong not in text, wrong
    assert "<b>zoo</b>" not in html and "&lt;b&gt;zoo&lt;/b&gt;" in html
    sidecar = json.loads((tmp_path / "audit.json").read_text())
    verdict = sidecar["verdicts"][0]
    assert verdict["status"] == "broken" and verdict["claim_status"] == "claimed" and verdict["hypothesis"]
    assert [c["verdict"] for c in verdict["canaries"]] == ["claim refuted"]


def test_a_consistent_canary_audit_states_its_power(model_c, dataset, sound, tmp_path):
    from reports.render import verdict_label

    result = dpaudit.audit(
        model_c, dataset=dataset, attacks=["mia-threshold"], canaries=[sound], n_boot=50, progress=False
    )
    [entry] = result.canaries.values()
    assert entry["verdict"] == "consistent with the claim" and entry["can_refute_claim"]
    result.to_html(tmp_path / "audit.html")
    verdict = json.loads((tmp_path / "audit.json").read_text())["verdicts"][0]
    assert verdict["status"] == "consistent"
    label = verdict_label(verdict)
    assert label.startswith("consistent with the claim (audit could certify ε ≤ ") and "proven" not in label


def test_mismatched_canary_results_are_refused_before_any_work(model_c, dataset, broken):
    edge_claim = adapt(
        model_c.module,
        dataset,
        split=make_split(dataset, SPLIT, seed=0),
        input="features",
        privacy={**CLAIM, "unit": "edge"},
    )
    with pytest.raises(ConfigurationError, match="audits node-level DP, the model claims edge-level DP"):
        dpaudit.audit(edge_claim, dataset=dataset, canaries=[broken], progress=False)
    looser = adapt(
        model_c.module,
        dataset,
        split=make_split(dataset, SPLIT, seed=0),
        input="features",
        privacy={**CLAIM, "epsilon": 2.0},
    )
    with pytest.raises(ConfigurationError, match=r"audits ε = 1.0, the model claims ε = 2"):
        dpaudit.audit(looser, dataset=dataset, canaries=[broken], progress=False)
    plain = adapt(model_c.module, dataset, split=make_split(dataset, SPLIT, seed=0), input="features")
    with pytest.raises(ConfigurationError, match="states no privacy claim"):
        dpaudit.audit(plain, dataset=dataset, canaries=[broken], progress=False)
    with pytest.raises(ConfigurationError, match="audits on 'csbm', the model was trained on 'padded'"):
        dpaudit.audit(model_c, dataset=dataset, canaries=[{**broken, "dataset": "csbm"}], progress=False)
    # a hand-typed dict: not a canary result (schema), said in one line
    with pytest.raises(ConfigurationError, match="not a canary audit result"):
        dpaudit.audit(model_c, dataset=dataset, canaries=[{"verdict": "claim refuted"}], progress=False)


def test_exported_model_round_trips_through_the_cli(model_c, broken, tmp_path, capsys):
    """export → inspect / attack / audit --canaries from the command line, on the graph file."""
    folder = tmp_path / "model-c"
    model_c.save(folder)
    loaded = load(folder)
    assert loaded.kind == "module" and loaded.privacy.status == "claimed" and loaded.card["protocol"] == "claimed"
    graph = model_c._graph
    assert torch.allclose(loaded.predict_proba(graph), model_c.predict_proba(graph), atol=1e-6)
    assert json.loads((folder / "model.json").read_text())["config"]["architecture"]["type"] == "stack"

    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "claimed by the user" in out and "stated by the user" in out
    assert "within the claim" in out and "covered by the guarantee" not in out
    assert (
        main(
            [
                "attack",
                "--model",
                str(folder),
                "--attack",
                "mia-threshold",
                "--attack-set",
                "n_boot=50",
                "--out",
                str(tmp_path / "a.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "the claim allows AUC ≤" in out and "covered by the guarantee" not in out
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert (
        main(
            [
                "audit",
                "--model",
                str(folder),
                "--attacks",
                "mia-threshold",
                "--attack-set",
                "n_boot=50",
                "--canaries",
                str(tmp_path / "broken.json"),
                "--out",
                str(tmp_path / "audit.html"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "node canaries (zoo-mlp-dp-noise-div10)" in out and ": claim refuted" in out
    assert "verdict: " in out and out.split("verdict: ")[1].startswith("Claim refuted: a valid canary audit")
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "something-else"}))
    assert (
        main(
            [
                "audit",
                "--model",
                str(folder),
                "--canaries",
                str(tmp_path / "bad.json"),
                "--out",
                str(tmp_path / "never.html"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "not a canary audit result" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "never.html").exists()


def test_a_proven_models_canary_result_keeps_the_guarantee_wording(dataset, sound, tmp_path):
    """The same canary evidence for a model dpaudit trained and accounted (mlp-dp, sound: true): its
    card's target ε is the one the recipe ran at (it spent at most that), and its verdict keeps the
    proven guarantee's words."""
    from dpaudit.app.pipeline import train
    from reports.render import verdict_label

    trained = train("mlp-dp", dataset, epsilon=1.0, delta=1e-5, split=SPLIT, device="cpu", overrides={"epochs": 40})
    model = trained.model
    assert model.privacy.status == "proven" and model.privacy.epsilon <= 1.0
    result = dpaudit.audit(
        model, dataset=dataset, attacks=["mia-threshold"], canaries=[sound], n_boot=50, progress=False
    )
    [entry] = result.canaries.values()
    assert entry["verdict"] == "consistent with the claim" and entry["claim_status"] == "proven"
    result.to_html(tmp_path / "audit.html")
    verdict = json.loads((tmp_path / "audit.json").read_text())["verdicts"][0]
    assert not verdict["hypothesis"] and verdict_label(verdict).startswith("consistent (audit could certify")
