"""Attacks against models trained on the small synthetic graph: valid results, strength on
undefended models, guarantees respected by private ones, adapter and CLI."""

from __future__ import annotations

import base64
import dataclasses
import json
import math

import numpy as np
import pytest
import torch

import attacks
from dpaudit.app.cli import main
from dpaudit.app.pipeline import train
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import auc_ceiling
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DatasetError, DPAuditError, ModelFormatError
from dpaudit.training.adapters import adapt
from dpaudit.training.registry import available_defenses, get_defense

FAST = {"n_boot": 200}
EDGE_ATTACKS = ("link-steal", "linkteller")


@pytest.fixture(scope="module")
def gcn(small_graph):
    # Kipf's row normalisation makes LinkTeller's feature *scaling* probe invisible by design
    # (x_v and (1+Δ)x_v normalise to the same row); the attack-strength checks use raw features.
    return train("gcn", small_graph, seed=0, overrides={"epochs": 100, "row_normalize": False}).model


@pytest.fixture(scope="module")
def mlp(small_graph):
    return train("mlp", small_graph, seed=0, overrides={"epochs": 50}).model


@pytest.fixture(scope="module")
def mlp_dp(small_graph):
    return train("mlp-dp", small_graph, epsilon=1.0, seed=0, overrides={"epochs": 5}).model


def check_result(result: AttackResult, name: str):
    assert result.attack == name
    assert 0.0 <= result.auc <= 1.0
    lo, hi = result.auc_ci
    assert lo <= result.auc + 1e-9 and result.auc - 1e-9 <= hi
    assert set(result.tpr_at_fpr) == {"0.1", "0.01", "0.001"}
    if name in EDGE_ATTACKS:
        # edges vs non-edges are not neighbouring graphs: no ceiling, no ε lower bound
        assert result.ceiling_auc is None and result.epsilon_lower_bound is None
        assert result.ceiling["applies"] is False and result.extra["pair_distinguishability"]["epsilon"] >= 0
    elif result.bound_valid:
        assert result.epsilon_lower_bound >= 0.0 and result.epsilon_lower_bound_delta is not None
        assert (result.ceiling_auc is None) == (not result.covered_by_guarantee)
        assert result.extra["lower_bound"]["pairs"] == result.runs[0]["members"] == result.runs[0]["non_members"]
    else:  # an invalid game: the numbers are kept, clearly not as a bound
        assert result.epsilon_lower_bound is None and result.ceiling_auc is None
        assert result.extra["not_a_valid_bound"]["why"] == result.bound_validity and result.ceiling["applies"] is False
    assert isinstance(result.bound_valid, bool) and result.bound_validity
    if name in EDGE_ATTACKS or name == "embedding-probe":
        assert result.bound_valid is False
    # every attack states its model-free baseline (features alone, same pairs or targets)
    assert 0.0 <= result.baseline_auc <= 1.0 and result.baseline
    payload = json.loads(json.dumps(result.to_dict()))
    for key in (
        "attack",
        "auc",
        "auc_ci",
        "tpr_at_fpr",
        "epsilon_lower_bound",
        "covered_by_guarantee",
        "ceiling_auc",
        "settings",
        "bound_valid",
        "bound_validity",
    ):
        assert key in payload
    assert AttackResult.from_dict(payload).auc == pytest.approx(result.auc)


ATTACK_SETTINGS = {
    "mia-tstf": {"runs": 2},
    "mia-threshold": {},
    "mia-lira": {"num_shadows": 2},
    "mia-rmia": {"num_references": 2},
    "link-steal": {"runs": 2, "max_pairs": 400},
    "linkteller": {"num_pairs": 60},
    "embedding-probe": {"projections": "tsne"},
}


def test_registry():
    # seed-replay re-trains the recipe instead of scoring pairs: tests/attacks/test_seed_replay.py
    assert attacks.available_attacks() == sorted([*ATTACK_SETTINGS, "seed-replay"])
    with pytest.raises(ConfigurationError, match="unknown attack"):
        attacks.run("nope", None)
    with pytest.raises(ConfigurationError, match="unknown settings"):
        attacks.run("mia-threshold", None, bogus=1)
    with pytest.raises(ConfigurationError):
        attacks.run("mia-threshold", object())


@pytest.mark.parametrize("name", sorted(ATTACK_SETTINGS))
def test_every_attack_on_gcn_and_mlp_dp(name, gcn, mlp_dp, small_graph):
    res = attacks.run(name, gcn, small_graph, **ATTACK_SETTINGS[name], **FAST)
    check_result(res, name)
    assert not res.covered_by_guarantee and res.ceiling_auc is None  # gcn is not private
    assert res.settings["seed"] == 0 and res.model["method"] == "gcn"
    private = attacks.run(name, mlp_dp, small_graph, **ATTACK_SETTINGS[name], **FAST)
    check_result(private, name)
    # mlp-dp is node-level DP with private inference: it covers membership directly and
    # edges through group privacy (2ε)
    assert private.covered_by_guarantee
    eps, delta = mlp_dp.privacy.epsilon, mlp_dp.privacy.delta
    if name in EDGE_ATTACKS:
        assert private.ceiling["group_size"] == 2
        assert private.ceiling["ceiling_auc_if_neighbouring"] == pytest.approx(
            auc_ceiling(2 * eps, (1 + math.exp(eps)) * delta)
        )
    elif private.bound_valid:
        # mlp-dp reads only training nodes: member vs non-member is one node change
        assert private.ceiling["group_size"] == 1
        assert private.ceiling_auc == pytest.approx(auc_ceiling(eps, delta))
        assert private.epsilon_lower_bound <= private.ceiling["epsilon"]
        assert private.extra["lower_bound"]["group_size"] == 2  # one pair's coin: remove one node, add one


def test_edge_attacks_are_strong_on_gcn(gcn, small_graph):
    res = attacks.run("link-steal", gcn, small_graph, runs=2, **FAST)
    assert res.auc > 0.75
    assert set(res.extra["auc_by_distance"]) == {
        "cosine",
        "euclidean",
        "correlation",
        "chebyshev",
        "braycurtis",
        "canberra",
        "cityblock",
        "sqeuclidean",
    }
    assert res.extra["attack-2"] > 0.65 and res.extra["attack-3"] > 0.6
    assert res.extra["pair_distinguishability"]["epsilon"] > 0.5
    lt = attacks.run("linkteller", gcn, small_graph, num_pairs=80, **FAST)
    assert lt.auc > 0.85 and lt.extra["average_precision"] > 0.8


def test_linkteller_finds_no_influence_in_an_mlp(mlp, small_graph):
    # an MLP never reads the graph: every influence is exactly zero, so the attack is at chance
    res = attacks.run("linkteller", mlp, small_graph, num_pairs=40, **FAST)
    assert res.auc == pytest.approx(0.5)
    assert res.runs[0]["zero_influence_fraction"] == 1.0
    assert res.extra["pair_distinguishability"]["epsilon"] == 0.0


def test_membership_on_overfit_mlp():
    # weak features: a wide MLP trained long without weight decay memorises its 60 training
    # labels and cannot generalise, so members get far more confident predictions
    hard = csbm(num_nodes=300, num_classes=3, num_features=32, feature_signal=0.2, seed=3)
    overfit = train(
        "mlp", hard, seed=0, split="random:0.2,0.1,0.6", overrides={"epochs": 200, "hidden": 256, "weight_decay": 0.0}
    ).model
    res = attacks.run("mia-threshold", overfit, hard, **FAST)
    assert res.auc > 0.75 and res.epsilon_lower_bound > 0.0
    assert set(res.extra["auc_by_score"]) == {"loss", "confidence", "entropy"}


def test_tstf_topk_variant_and_settings(gcn, small_graph):
    res = attacks.run("mia-tstf", gcn, small_graph, runs=1, variant="topk", top_k=2, **FAST)
    check_result(res, "mia-tstf")
    assert res.settings["variant"] == "topk" and len(res.runs) == 1
    assert any("own recipe 'gcn'" in n for n in res.notes)
    with pytest.raises(ConfigurationError):
        attacks.run("mia-tstf", gcn, small_graph, variant="bogus")


def test_dataset_is_reloaded_from_the_card_and_checked(gcn, small_graph):
    res = attacks.run("mia-threshold", gcn, None, **FAST)  # csbm regenerated from the card's parameters
    ref = attacks.run("mia-threshold", gcn, small_graph, **FAST)
    assert res.auc == pytest.approx(ref.auc)
    other = csbm(num_nodes=300, num_classes=3, num_features=16, seed=2)
    with pytest.raises(DatasetError, match="fingerprint"):
        attacks.run("mia-threshold", gcn, other)


def test_embedding_probe_artifacts(gcn, small_graph):
    # UMAP's numba compilation takes minutes on a busy CPU: the benchmark exercises it
    res = attacks.run("embedding-probe", gcn, small_graph, projections=["tsne"], **FAST)
    assert set(res.artifacts) == {"tsne.png"}
    for blob in res.artifacts.values():
        assert base64.b64decode(blob)[:8] == b"\x89PNG\r\n\x1a\n"
    assert 0.5 < res.extra["knn_label_accuracy"] <= 1.0
    assert -1.0 <= res.extra["silhouette"] <= 1.0
    assert res.extra["embedding_is_input"] is False


def test_embedding_probe_says_when_the_embedding_is_the_input(mlp_dp, small_graph):
    """mlp-dp's ``auto`` preset is logistic regression on a graph this small: its embedding is
    the (row-normalised) features, so the probe's note must say it reads no learned state."""
    res = attacks.run("embedding-probe", mlp_dp, small_graph, projections=[], **FAST)
    assert res.extra["embedding_is_input"] is True
    assert any("embedding is its input features" in n for n in res.notes)


def test_adapter_for_a_users_module(gcn, small_graph):
    split = make_split(small_graph, gcn.card["split"]["spec"], gcn.record["seed"])
    # the same split (validation nodes included) gives the same audit game as the gcn's own card
    user = adapt(gcn.module, small_graph, split=split, surrogate="gcn", surrogate_hyperparameters={"epochs": 30})
    assert torch.allclose(user.predict_proba(small_graph.data), gcn.predict_proba(small_graph.data), atol=1e-6)
    res = attacks.run("mia-tstf", user, small_graph, runs=1, **FAST)
    check_result(res, "mia-tstf")
    assert any("surrogate recipe 'gcn'" in n for n in res.notes)
    assert res.extra["variant"] == "topk"  # recipe unknown: the architecture-agnostic variant
    assert not res.covered_by_guarantee
    ref = attacks.run("mia-threshold", gcn, small_graph, **FAST)
    assert attacks.run("mia-threshold", user, small_graph, **FAST).auc == pytest.approx(ref.auc, abs=1e-6)

    claimed = adapt(
        gcn.module, small_graph, train_nodes=split.train, privacy={"epsilon": 2.0, "delta": 1e-4, "unit": "node"}
    )
    res = attacks.run("mia-threshold", claimed, small_graph, **FAST)
    # a user's claim is a hypothesis (status claimed, sound: false): tested, its ceiling what the
    # claim allows; explicit node lists not declared random give no valid bound, though
    assert res.covered_by_guarantee and res.ceiling["hypothesis"] and res.ceiling["status"] == "claimed"
    assert "the user's claim is tested, not proven" in res.ceiling["reason"]
    assert res.bound_valid is False and "explicit node lists" in res.bound_validity
    assert res.ceiling_auc is None and res.epsilon_lower_bound is None  # not a fair game: none drawn
    assert res.ceiling["ceiling_auc_not_a_valid_bound"] is not None  # what the claim would allow
    with pytest.raises(ModelFormatError, match="use save"):
        claimed.config()  # written only as a declared architecture (export)
    with pytest.raises(ConfigurationError):
        adapt(gcn.module, small_graph)
    with pytest.raises(ConfigurationError):
        adapt(gcn.module, small_graph, train_nodes=split.train, surrogate="no-such-defense")


def _private_defenses():
    return [name for name in available_defenses() if get_defense(name).unit is not None]


def _tiny_overrides(cls) -> dict:
    """Few epochs (or steps) so that every defense trains in seconds on the small graph."""
    fields = {f.name: f for f in dataclasses.fields(cls.hyperparameters_class)}
    out = {name: 3 for name in fields if name.endswith("epochs")}
    if not out and "steps" in fields:
        out["steps"] = 10
    return out


@pytest.mark.parametrize("defense", _private_defenses())
def test_lower_bound_never_exceeds_the_claimed_epsilon(defense, small_graph):
    """On every private defense at small ε, no attack's ε lower bound exceeds the guarantee."""
    cls = get_defense(defense)
    try:
        model = cls(epsilon=0.5, seed=0, **_tiny_overrides(cls)).fit(small_graph, make_split(small_graph, None, 0))
    except DPAuditError as exc:
        pytest.skip(f"{defense} cannot train on the small graph: {exc}")
    claimed = model.privacy.epsilon
    assert claimed <= 0.5 * (1 + 1e-9) or not model.privacy.sound
    plan = (
        ("mia-threshold", {}),
        ("mia-tstf", {"runs": 1}),
        ("embedding-probe", {"projections": ""}),
        ("link-steal", {"runs": 1, "supervised": False}),
    )
    for name, settings in plan:
        res = attacks.run(name, model, small_graph, **settings, **FAST)
        check_result(res, name)
        if res.covered_by_guarantee and res.bound_valid:
            assert res.epsilon_lower_bound <= res.ceiling["epsilon"]
        if name not in EDGE_ATTACKS and model.privacy.unit == "node" and model.privacy.proven:
            assert res.covered_by_guarantee
            if res.bound_valid:
                assert res.epsilon_lower_bound <= claimed
                # recipes that read the whole graph pay group privacy in the ceiling
                keeps = get_defense(defense).name not in ("mlp-dp",)
                assert res.ceiling["group_size"] == (2 if keeps else 1)


def test_default_game_tstf_uses_disjoint_shadows_calibration_and_slices(small_graph):
    model = train("mlp", small_graph, seed=0, split="random:0.4,0.1,0.5", overrides={"epochs": 30}).model
    res = attacks.run("mia-tstf", model, small_graph, runs=2, **FAST)
    check_result(res, "mia-tstf")
    assert res.bound_valid and "fair coin" in res.bound_validity
    for run in res.runs:  # shadow models never train on a target training node, measured held out
        assert run["shadow_pool"] == "disjoint" and run["shadow_nodes_in_target_training_set"] == 0
        assert run["shadow_heldout_nodes"] > 0 and run["shadow_heldout_auc"] is not None
    assert res.extra["calibration"] == "class" and "auc_uncalibrated" in res.extra
    slices = res.extra["risk_slices"]
    assert {"degree", "class", "homophily"} <= set(slices)
    assert sum(b["members"] for b in slices["class"]) == pytest.approx(np.mean([r["members"] for r in res.runs]))
    assert all(b["auc"] is None or 0 <= b["auc"] <= 1 for b in slices["degree"] + slices["class"])
    # runs >= 2: the interval carries the spread over runs
    assert res.extra["auc_ci_components"]["t_over_runs"] is not None
    raw = attacks.run("mia-threshold", model, small_graph, calibration="none", **FAST)
    assert raw.auc == pytest.approx(raw.extra["auc_uncalibrated"])
    with pytest.raises(ConfigurationError):
        attacks.run("mia-threshold", model, small_graph, calibration="bogus")


def test_public_split_results_say_bound_not_valid(load_real, tmp_path):
    """Issue 15 acceptance: on Cora's public split every membership result's JSON says
    ``bound_valid: false`` (members were fixed by people: node ids 0-139)."""
    cora = load_real("cora")
    model = train("mlp", cora, seed=0, split="public", overrides={"epochs": 5}).model
    plan = {
        "mia-threshold": {},
        "mia-tstf": {"runs": 1, "shadow_nodes_per_class": 60},
        "mia-lira": {"num_shadows": 2, "shadow_nodes_per_class": 60},
        "embedding-probe": {"projections": ""},
    }
    for name, settings in plan.items():
        res = attacks.run(name, model, cora, **settings, **FAST)
        res.save(tmp_path / f"{name}.json")
        payload = json.loads((tmp_path / f"{name}.json").read_text())
        assert payload["bound_valid"] is False, name
        assert payload["epsilon_lower_bound"] is None and payload["ceiling_auc"] is None
        if name != "embedding-probe":
            assert "public split" in payload["bound_validity"]


# --------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def saved_gcn(tmp_path_factory, small_graph):
    out = tmp_path_factory.mktemp("gcn-model")
    train("gcn", small_graph, seed=0, overrides={"epochs": 30}, out=out)
    return out


def test_cli_attack_writes_json(saved_gcn, tmp_path, capsys):
    out = tmp_path / "res.json"
    code = main(
        [
            "attack",
            "--model",
            str(saved_gcn),
            "--attack",
            "link-steal",
            "--runs",
            "1",
            "--seed",
            "3",
            "--set",
            "max_pairs=200",
            "--set",
            "supervised=false",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    payload = json.loads(out.read_text())
    assert payload["attack"] == "link-steal" and 0 <= payload["auc"] <= 1
    assert set(payload["tpr_at_fpr"]) == {"0.1", "0.01", "0.001"}
    assert payload["ceiling_auc"] is None and payload["covered_by_guarantee"] is False
    assert payload["settings"]["runs"] == 1 and payload["settings"]["seed"] == 3
    assert payload["settings"]["max_pairs"] == 200
    assert 0.5 < payload["baseline_auc"] <= 1
    low = payload["extra"]["low_fpr"]["0.01"]
    assert (
        low["runs"] == 1 and low["negatives"] == payload["runs"][0]["non_members"] and "1 run, no spread" in low["text"]
    )
    printed = capsys.readouterr().out
    assert "link-steal vs gcn (deployment training-graph): AUC" in printed
    assert "model-free baseline AUC" in printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--attack", "nope"], "unknown attack"),
        (["--attack", "mia-threshold", "--set", "bogus=1"], "unknown settings"),
        (["--attack", "mia-threshold", "--runs", "0"], "--runs"),
        (["--attack", "mia-threshold", "--set", "novalue"], "KEY=VALUE"),
        (
            ["--attack", "mia-rmia", "--set", "tie_break=random"],
            "tie_break must be one of likelihood-ratio, none, got 'random'",
        ),
        (["--attack", "mia-lira", "--set", "query=2-hop"], "query must be one of graph, features, got '2-hop'"),
        # the G-BASE protocol needs a target trained on its own half's induced subgraph
        (["--attack", "mia-rmia", "--set", "protocol=g-base"], "--split inductive:0.5,0.5"),
        (["--attack", "mia-lira", "--set", "protocol=g-base", "--set", "query=graph"], "queries features only"),
    ],
)
def test_cli_attack_errors(saved_gcn, tmp_path, capsys, argv, message):
    code = main(["attack", "--model", str(saved_gcn), *argv, "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


def test_cli_attack_bad_model_dir(tmp_path, capsys):
    code = main(
        ["attack", "--model", str(tmp_path / "missing"), "--attack", "mia-threshold", "--out", str(tmp_path / "x.json")]
    )
    assert code == 2 and "released-model directory" in capsys.readouterr().err
    code = main(["attack", "--attack", "mia-threshold", "--out", str(tmp_path / "x.json")])
    assert code == 2 and "--model" in capsys.readouterr().err


# --------------------------------------------------------------------------- building blocks


def test_pair_distances_match_scipy():
    import numpy as np
    from scipy.spatial import distance

    from attacks.link_stealing import DISTANCES, pair_distances

    rng = np.random.default_rng(0)
    a, b = rng.dirichlet(np.ones(5), size=20), rng.dirichlet(np.ones(5), size=20)
    a[0, :2] = b[0, :2] = 0.0  # 0/0 terms of canberra
    ours = pair_distances(a, b)
    for name in DISTANCES:
        ref = [getattr(distance, name)(x, y) for x, y in zip(a, b)]
        assert np.allclose(ours[name], ref, atol=1e-10), name


def test_sample_pairs_are_balanced_edges_and_non_edges(small_graph):
    import numpy as np

    from attacks._common import sample_pairs

    n = small_graph.num_nodes
    ei = small_graph.data.edge_index
    u, v, labels = sample_pairs(ei, n, 300, np.random.default_rng(0))
    assert labels.sum() == 300 and len(labels) == 600
    edge_keys = set((ei[0] * n + ei[1]).tolist())
    keys = u * n + v
    assert all(k in edge_keys for k in keys[labels == 1])
    assert not any(k in edge_keys for k in keys[labels == 0])
    assert len(set(keys.tolist())) == 600 and (u != v).all()


def test_umap_projection_leaves_torch_single_threaded():
    """numba's OpenMP layer resets torch's OpenMP thread count; after UMAP a study worker pinned
    to one thread must still run torch on one thread (else every later op oversubscribes)."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, torch; torch.set_num_threads(1)\n"
        "from attacks.embedding import project\n"
        "project(np.random.default_rng(0).random((60, 8)), 'umap', 0)\n"
        "import numba; print(torch.get_num_threads(), numba.threading_layer())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["1", "workqueue"]


def test_a_vacuous_group_guarantee_falls_back_to_the_models_delta():
    """At a large ε the group δ·k·e^((k−1)ε) reaches 1 (gap-ndp at ε = 16 under link-steal):
    the lower bound must not be asked for δ = 1 (it used to raise) and uses the model's δ."""
    from types import SimpleNamespace

    from attacks._common import lower_bound_delta
    from dpaudit.auditing.statistics import Coverage

    model = SimpleNamespace(privacy=SimpleNamespace(delta=1e-4, is_private=True))
    vacuous = Coverage(True, "group privacy", 32.0, 1.0, None, 2, model_unit="node", attack_unit="edge")
    assert lower_bound_delta(vacuous, model) == 1e-4
    useful = Coverage(True, "group privacy", 2.0, 3e-4, None, 2, model_unit="node", attack_unit="edge")
    assert lower_bound_delta(useful, model) == 3e-4
    from dpaudit.auditing.statistics import epsilon_lower_bound

    scores, labels = np.r_[np.ones(50), np.zeros(50)], np.r_[np.ones(50), np.zeros(50)].astype(int)
    assert epsilon_lower_bound(scores, labels, lower_bound_delta(vacuous, model))["epsilon"] > 0


def test_embedding_probe_shadows_share_the_targets_declared_plan(load_real):
    """mlp-dp's preset=auto is a plan of the declared training size: on Cora's random split the
    target is a 2-layer MLP (64-wide embeddings). The shadow, trained on fewer nodes, must declare
    the target's size too, or it becomes logistic regression and its embeddings are the raw
    1,433 features — the probe then crashed ("X has 68 features, but StandardScaler is
    expecting 1437")."""
    cora = load_real("cora")
    split = make_split(cora, "random:0.75,0.1,0.15", 0)
    model = get_defense("mlp-dp")(epsilon=4, seed=0, epochs=2).fit(cora, split)
    assert model.card["mlp_dp"]["layers"] == 2
    res = attacks.run("embedding-probe", model, cora, runs=1, projections="", n_boot=50)
    assert res.extra["embedding_dim"] == 64 and 0.0 <= res.auc <= 1.0
