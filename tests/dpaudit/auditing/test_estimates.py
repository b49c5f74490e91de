"""The audit plan's time estimate (issue 26): a cost model scaled by costs measured warm on the
audited model — one shadow model of its recipe from a short trial, one perturbed query — never
the target's cold first training time, which overestimated audits 4×."""

from __future__ import annotations

import sys

import pytest

import defenses  # noqa: F401  (registers the defenses)
import dpaudit.app.workflows.audit.plan  # noqa: F401  (the module that holds and looks up the cost model)
from attacks.membership import TSTF_ATTACK_MODEL_SECONDS
from dpaudit.app.workflows import audit_plan, format_plan
from dpaudit.data.splits import make_split
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense

AUDIT = sys.modules["dpaudit.app.workflows.audit.plan"]  # patched where looked up
COSTS = {"shadow_source": "trial", "shadow": 2.0, "first_shadow_extra": 0.0, "query": 0.01, "seconds": 0.0}


@pytest.fixture(scope="module")
def saved_gcn(small_graph, tmp_path_factory):
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    model = get_defense("gcn")(epsilon=float("inf"), seed=0, epochs=40).fit(small_graph, split)
    return model.save(tmp_path_factory.mktemp("estimates") / "gcn")


def _seconds(plan: dict) -> dict[str, float]:
    return {s["attack"]: s["estimated_seconds"] for s in plan["attacks"]}


def test_the_estimate_scales_with_shadows_references_runs_and_pairs(saved_gcn, small_graph):
    model = load(saved_gcn, record=True)
    names = ["mia-lira", "mia-rmia", "mia-tstf", "link-steal", "linkteller"]
    small = {
        "mia-lira": {"num_shadows": 2},
        "mia-rmia": {"num_references": 2},
        "mia-tstf": {"runs": 1},
        "link-steal": {"runs": 1, "max_pairs": 400},
        "linkteller": {"num_pairs": 50, "pr_nodes": 20},
    }
    large = {
        "mia-lira": {"num_shadows": 6},
        "mia-rmia": {"num_references": 8},
        "mia-tstf": {"runs": 3},
        "link-steal": {"runs": 10, "max_pairs": 400},
        "linkteller": {"num_pairs": 100, "pr_nodes": 20},
    }
    a = _seconds(audit_plan(model, small_graph, names, small, costs=COSTS))
    b = _seconds(audit_plan(model, small_graph, names, large, costs=COSTS))
    one_model = COSTS["shadow"] + COSTS["query"]  # each shadow or reference model is trained, then queried once
    assert b["mia-lira"] - a["mia-lira"] == pytest.approx(4 * one_model, abs=0.1)
    assert b["mia-rmia"] - a["mia-rmia"] == pytest.approx(6 * one_model, abs=0.1)
    assert b["mia-tstf"] - a["mia-tstf"] == pytest.approx(2 * (one_model + TSTF_ATTACK_MODEL_SECONDS), abs=0.1)
    assert b["link-steal"] > a["link-steal"]
    # LinkTeller: one perturbed query per sampled node, 3 per pair with hard negatives
    assert b["linkteller"] - a["linkteller"] == pytest.approx(3 * 50 * COSTS["query"], abs=0.1)
    # the measured costs scale the estimate: twice the shadow cost, about twice the shadow attacks
    double = _seconds(audit_plan(model, small_graph, names, large, costs={**COSTS, "shadow": 4.0}))
    assert double["mia-lira"] - b["mia-lira"] == pytest.approx(6 * 2.0, abs=0.1)


def test_a_cold_recorded_training_time_is_not_the_shadow_cost(saved_gcn, small_graph):
    """The owner's record says the first training took 1000 s (cold torch, first calls): the
    plan measures a warm shadow of the recipe instead of repeating that per shadow model."""
    model = load(saved_gcn, record=True)
    model.record["timings"]["train_seconds"] = 1000.0
    plan = audit_plan(model, small_graph, ["mia-lira"], {})
    assert 0 < plan["shadow_seconds"] < 100
    assert plan["estimated_seconds"] < 4 * 100
    assert plan["costs"]["shadow_source"] == "trial"
    assert "upper estimate" not in format_plan(plan)


def test_a_model_without_its_owners_record_is_calibrated_too(saved_gcn, small_graph):
    public = load(saved_gcn, record=False)
    plan = audit_plan(public, small_graph, ["mia-tstf"], {"mia-tstf": {"runs": 1}})
    assert public.provenance("timings") is None
    assert plan["costs"]["shadow_source"] == "trial" and plan["shadow_seconds"] > 0
    assert plan["costs"]["query"] > 0


def test_the_trial_extrapolates_the_warm_per_epoch_cost(saved_gcn, small_graph, monkeypatch):
    """Shadow cost = fixed + per-epoch × the recipe's epochs, from warm runs of 1/20 and 2/20 of
    them; the first short run's excess (a one-time cost) is paid once, not per shadow."""
    timings = iter([9.0, 1.5, 1.2, 1.0])  # warm-up (ignored), short (first), double, short (warm)
    calls = []

    def scripted(fn, epochs):
        calls.append(dict(epochs))
        return next(timings)

    monkeypatch.setattr(AUDIT, "_cpu_seconds", scripted)
    trial = AUDIT._shadow_trial(load(saved_gcn, record=True), small_graph, "cpu")
    assert calls == [{"epochs": 4}, {"epochs": 2}, {"epochs": 4}, {"epochs": 2}]  # the recipe trains 40 epochs
    # 2 epochs cost 0.2 s warm, the fixed part 0.8 s: 0.8 + 20 × 0.2
    assert trial["shadow"] == pytest.approx(4.8)
    assert trial["first_shadow_extra"] == pytest.approx(0.5)
    plan = audit_plan(
        load(saved_gcn, record=True),
        small_graph,
        ["mia-lira", "mia-tstf"],
        {},
        costs={**COSTS, **trial, "first_shadow_extra": 0.5},
    )
    lira = _seconds(plan)["mia-lira"]
    tstf = _seconds(plan)["mia-tstf"]
    assert lira == pytest.approx(
        _seconds(
            audit_plan(
                load(saved_gcn, record=True),
                small_graph,
                ["mia-lira"],
                {},
                costs={**COSTS, **trial, "first_shadow_extra": 0.0},
            )
        )["mia-lira"]
        + 0.5,
        abs=0.1,
    )
    assert tstf == pytest.approx(
        _seconds(
            audit_plan(
                load(saved_gcn, record=True),
                small_graph,
                ["mia-tstf"],
                {},
                costs={**COSTS, **trial, "first_shadow_extra": 0.0},
            )
        )["mia-tstf"],
        abs=0.1,
    )


def test_an_automatic_epoch_count_is_read_from_the_card():
    card = {"mlp_dp": {"epochs": 30}}
    assert AUDIT._epoch_counts("mlp-dp", {"epochs": None}, card) == {"epochs": 30}
    assert AUDIT._epoch_counts("gap-edp", {"encoder_epochs": 100, "epochs": 50}, {}) == {
        "encoder_epochs": 100,
        "epochs": 50,
    }
    assert AUDIT._epoch_counts("my-plugin", {"epochs": 10}, {}) is None
    assert AUDIT._epoch_counts("mlp-dp", {"epochs": None}, {}) is None


def test_an_uncalibrated_recipe_says_its_estimate_is_an_upper_one(saved_gcn, small_graph, monkeypatch):
    monkeypatch.setattr(get_defense("gcn"), "epoch_settings", ())  # a recipe that declares no epoch counts
    model = load(saved_gcn, record=True)
    plan = audit_plan(model, small_graph, ["mia-lira"], {})
    assert plan["costs"]["shadow_source"] == "recorded"
    assert plan["shadow_seconds"] == pytest.approx(model.record["timings"]["train_seconds"], abs=0.01)
    assert "recorded training time: an upper estimate" in format_plan(plan)
    guessed = audit_plan(load(saved_gcn, record=False), small_graph, ["mia-lira"], {})
    assert guessed["costs"]["shadow_source"] == "guess" and "guessed" in format_plan(guessed)


def test_measuring_a_query_charged_model_spends_none_of_its_budget(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    model = get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=5, epochs=5).fit(small_graph, split)
    saved = load(model.save(tmp_path / "gap-edp"))
    before = (saved.query_ledger.releases, saved.privacy.epsilon, len(saved.privacy.mechanisms))
    costs = AUDIT.calibrate(saved, small_graph, "cpu")
    assert costs["query"] > 0 and costs["shadow_source"] == "trial"
    assert (saved.query_ledger.releases, saved.privacy.epsilon, len(saved.privacy.mechanisms)) == before
