"""Issue 47, item 1: the default paths choose an audit able to refute the claim they test
(:mod:`dpaudit.app.workflows.audit.refute`), and say before training what would suffice when
the data cannot give one."""

from __future__ import annotations

import json

import pytest

import dpaudit.app.workflows.zoo  # noqa: F401  (registers the broken model)
from dpaudit.app.workflows.audit.refute import perfect_attack_bound, plan_refuting_audit, run_capacity
from dpaudit.auditing.power import audit_power
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split

HIDDEN = {"layers": 2, "hidden": 64}
SMALL = {"num_nodes": 160, "num_classes": 2, "num_features": 16, "avg_degree": 5.0, "seed": 0}


@pytest.fixture(scope="module")
def graph():
    return csbm(**SMALL)


def test_a_dp_sgd_model_on_a_small_graph_gets_gradient_canaries_able_to_refute_its_claim(graph):
    """mlp-dp on 160 nodes: its 80 member/non-member pairs could certify little, while Dirac
    gradient canaries, as many as a run's module holds and spread over runs, can refute ε = 4."""
    split = make_split(graph, None, 0)
    assert run_capacity("mlp-dp", "gradient", graph, split, 4.0, 1e-5) == 16 * 2 + 2  # the linear model
    capacity = run_capacity("mlp-dp", "gradient", graph, split, 4.0, 1e-5, HIDDEN)  # measured, no step trained
    assert capacity == 16 * 64 + 64 + 64 * 2 + 2
    plan = plan_refuting_audit("mlp-dp", 4.0, 1e-5, capacity=capacity, seconds_per_run=0.5, overrides=HIDDEN)
    assert plan.kind == "gradient" and plan.can_refute and plan.advice is None
    assert plan.canaries <= capacity and plan.runs > 1 and plan.design == {"observe": "centred"}
    # what a perfect attack certifies at this size, with unbalanced coins, is above the claim
    assert plan.certifiable == perfect_attack_bound(plan.canaries, plan.runs, 1e-5, 0.95) > 4.0
    assert plan.certifiable <= audit_power(plan.canaries, runs=plan.runs, delta=1e-5)["certifiable_epsilon"]
    assert f"{plan.canaries * plan.runs} gradient canaries over {plan.runs} runs" in plan.line()
    # the linear model holds too few coordinates: even 16 runs cannot, and the plan says so
    small = plan_refuting_audit("mlp-dp", 4.0, 1e-5, capacity=34)
    assert not small.can_refute and "larger model or graph" in small.line()


def test_an_edge_level_claim_gets_edge_canaries():
    plan = plan_refuting_audit("gap-edp", 1.0, 1e-5, capacity=80)
    assert plan.kind == "edge" and plan.can_refute and plan.runs == 1 and plan.certifiable > 1.0
    assert plan.design == {"endpoint_uses": 4}


def test_where_no_size_can_refute_the_plan_says_what_would_before_training():
    """δ = auto on a 500-node graph is 1e-3: no count of canaries certifies anything there. The
    plan says so in one line, with the δ, canaries, trainings and time that would suffice."""
    plan = plan_refuting_audit("mlp-dp", 4.0, 1e-3, capacity=132, seconds_per_run=2.0)
    assert not plan.can_refute and plan.canaries is None
    line = plan.line()
    assert "\n" not in line and "no canary audit here can refute the claim" in line
    assert "--delta 1e-05" in line and "gradient canaries in" in line and "training(s), about" in line


@pytest.mark.slow
def test_the_broken_model_is_refuted_and_the_sound_one_tested(graph, tmp_path):
    """A study with ``canaries=["auto"]`` (what the demo runs, at reduced size): the broken zoo
    model's claim is refuted by its canary audit, the sound model's claim tested and not refuted,
    and the report's verdicts say so."""
    from dpaudit.app.workflows import Study, StudyConfig

    config = StudyConfig(
        dataset="csbm",
        defenses=["zoo-mlp-dp-noise-div10", "mlp-dp"],
        epsilons=[1.0],
        seeds=[0],
        attacks=["mia-threshold"],
        dataset_options=dict(SMALL),
        delta=1e-5,
        canaries=["auto"],
        modules=["dpaudit.app.workflows.zoo"],
        attack_settings={"mia-threshold": {"n_boot": 50}},
        device="cpu",
    )
    result = Study(config, tmp_path / "study").run(jobs=1, progress=False)
    assert not result.failed
    records = {r["defense"]: r for r in result.done}
    for name, record in records.items():
        [entry] = record["canaries"].values()
        assert entry["kind"] == "gradient" and entry["bound_valid"] and entry["can_refute_claim"], name
        assert record["canary_plan"]["can_refute"]
    assert records["zoo-mlp-dp-noise-div10"]["canaries"]["gradient canaries"]["verdict"] == "guarantee broken"
    assert records["mlp-dp"]["canaries"]["gradient canaries"]["verdict"] == "consistent with the claim"
    html = result.to_html(tmp_path / "report.html")
    verdicts = {v["defense"]: v["status"] for v in json.loads(html.with_suffix(".json").read_text())["verdicts"]}
    assert verdicts == {"zoo-mlp-dp-noise-div10": "broken", "mlp-dp": "consistent"}


def test_study_configs_name_dpaudit_modules_only():
    from dpaudit.app.workflows import StudyConfig
    from dpaudit.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="dpaudit modules"):
        StudyConfig(dataset="csbm", defenses=["gcn"], epsilons=["inf"], modules=["os"])
