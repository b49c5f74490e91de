"""Accounted hyperparameter selection (Papernot & Steinke 2022, Theorem 2): the bound checked
against exact Rényi divergences of the best-of-K law on toy mechanisms, the law of K by Monte
Carlo, and ``select=private`` end to end — spent ≤ target, the public card vs the owner's
record, the re-plan on load, and refusals before any work."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.special import logsumexp

from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger, PrivateSelection
from dpaudit.accounting.mechanisms import mechanism_from_record
from dpaudit.accounting.selection import (
    HAT_ORDERS,
    draw_runs,
    expected_runs,
    gamma_for_expected_runs,
    generating_function,
    run_probabilities,
    selection_rdp,
)
from dpaudit.accounting.verify import verify_spec
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError, PrivacyParameterError
from dpaudit.release import PublicCardError, check_public_card
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense

ORDERS = np.array([1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0])
SPLIT = "random:0.6,0.2,0.2"


# ----------------------------------------------------------------------------- the theorem
def _renyi(p: np.ndarray, q: np.ndarray, orders: np.ndarray) -> np.ndarray:
    a = np.asarray(orders)[:, None]
    return logsumexp(a * np.log(p)[None, :] + (1.0 - a) * np.log(q)[None, :], axis=1) / (a[:, 0] - 1.0)


def _symmetric_curve(p, q, orders) -> np.ndarray:
    return np.maximum(_renyi(p, q, orders), _renyi(q, p, orders))


def _best_of_k(p: np.ndarray, eta: float, gamma: float) -> np.ndarray:
    """Exact law of the largest of K ~ D(η, γ) draws from p (outputs ordered by index):
    Pr[max ≤ y] = E[F(y)^K], the generating function at the CDF."""
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    return np.maximum(np.diff(np.concatenate([[0.0], generating_function(eta, gamma, cdf)])), 1e-300)


def _toys(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        m = int(rng.integers(2, 6))
        p = rng.dirichlet(np.full(m, 0.7))
        q = p * np.exp(rng.normal(0.0, rng.uniform(0.05, 1.5), m))
        yield p, q / q.sum(), float(rng.choice([0.0, 0.5, 1.0, 2.0])), float(rng.uniform(0.02, 0.6))


def _bound_and_exact(p, q, eta, gamma):
    run = _symmetric_curve(p, q, ORDERS)
    # λ̂ = 1 is KL: evaluated just above 1 (the curve is continuous there)
    at_hat = _symmetric_curve(p, q, np.array([1.0001, *HAT_ORDERS[1:]]))
    bound = selection_rdp(run, eta, gamma, ORDERS, at_hat)
    exact = _symmetric_curve(_best_of_k(p, eta, gamma), _best_of_k(q, eta, gamma), ORDERS)
    return run, bound, exact


def test_theorem_2_bounds_the_exact_renyi_divergence_of_the_best_of_k():
    """On 200 random toy mechanisms (finite outputs, exact RDP curves), the exact Rényi
    divergence of the best of K runs never exceeds Theorem 2's bound, at every order."""
    worst = 0.0
    for p, q, eta, gamma in _toys(0, 200):
        _, bound, exact = _bound_and_exact(p, q, eta, gamma)
        assert np.all(exact <= bound + 1e-9), (p, q, eta, gamma)
        worst = max(worst, float((exact / bound).max()))
    assert worst > 0.5  # the bound is not vacuous: some toy comes close to it


def test_the_check_has_power_half_the_selection_overhead_is_violated():
    """The same exact computation catches a bound that charges half the selection's overhead."""
    violated = 0
    for p, q, eta, gamma in _toys(1, 200):
        run, bound, exact = _bound_and_exact(p, q, eta, gamma)
        violated += bool(np.any(exact > run + 0.5 * (bound - run) + 1e-9))
    assert violated > 0


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0, 2.0])
def test_the_law_of_k_monte_carlo(eta):
    gamma = gamma_for_expected_runs(eta, 5.0)
    assert expected_runs(eta, gamma) == pytest.approx(5.0, rel=1e-9)
    probabilities = run_probabilities(eta, gamma, 4000)
    assert probabilities.sum() == pytest.approx(1.0, abs=1e-9)
    z = np.array([0.0, 0.3, 0.9, 1.0])
    assert np.allclose(generating_function(eta, gamma, z), [(probabilities * x ** np.arange(1, 4001)).sum() for x in z])
    rng = np.random.default_rng(7)
    draws = np.array([draw_runs(eta, gamma, rng) for _ in range(20000)])
    assert draws.min() >= 1
    # mean within 5 standard errors; Pr[K = 1] within 5 standard errors
    assert abs(draws.mean() - 5.0) < 5 * draws.std() / math.sqrt(len(draws))
    p1 = probabilities[0]
    assert abs((draws == 1).mean() - p1) < 5 * math.sqrt(p1 * (1 - p1) / len(draws))


def test_geometric_case_in_closed_form():
    """η = 1, one Gaussian run of ρ-zCDP (ε(λ) = ρλ): ε'(λ) = ρλ + min over λ̂ of
    2(λ̂ − 1)ρ + 2 ln(1/γ)/λ̂ + ln(1/γ)/(λ − 1), with E[K] = 1/γ."""
    sigma, gamma = 3.0, 0.1
    rho = 1.0 / (2 * sigma**2)
    selection = PrivateSelection(((GaussianMechanism(sigma),),), 1.0, gamma)
    hat = np.asarray(HAT_ORDERS)
    best_hat = float(np.min(2 * (hat - 1) * rho + 2 * math.log(1 / gamma) / hat))
    expected = rho * ORDERS + best_hat + math.log(1 / gamma) / (ORDERS - 1)
    assert np.allclose(selection.rdp(ORDERS), expected, rtol=1e-12)
    assert np.all(selection.rdp(ORDERS) > GaussianMechanism(sigma).rdp(ORDERS))


def test_the_run_curve_is_the_worst_candidate_and_records_round_trip():
    weak, strong = (GaussianMechanism(2.0),), (PoissonSubsampledGaussian(1.0, 0.1, 50), GaussianMechanism(5.0))
    selection = PrivateSelection((weak, strong), 0.0, 0.2)
    curves = [sum(m.rdp(ORDERS) for m in run) for run in (weak, strong)]
    assert np.allclose(selection.run_rdp(ORDERS), np.maximum(*curves))
    rebuilt = mechanism_from_record(json.loads(json.dumps(selection.describe())))
    assert rebuilt == selection
    spec = PrivacyLedger().step(selection).spec(1e-5, "node", target_epsilon=100.0)
    spec.protocol = "sound"
    verify_spec(spec, "node", "sound")  # recomputed from the records alone


def test_a_law_that_cannot_be_drawn_is_refused():
    with pytest.raises(PrivacyParameterError, match="eta > -1"):
        PrivateSelection(((GaussianMechanism(1.0),),), -1.0, 0.5)
    with pytest.raises(PrivacyParameterError, match="gamma"):
        PrivateSelection(((GaussianMechanism(1.0),),), 1.0, 1.0)
    with pytest.raises(PrivacyParameterError, match="> 1"):
        gamma_for_expected_runs(1.0, 1.0)


# ----------------------------------------------------------------------------- select=private
@pytest.fixture(scope="module")
def selected_mlp(small_graph, tmp_path_factory):
    split = make_split(small_graph, SPLIT, seed=0)
    defense = get_defense("mlp-dp")(epsilon=6.0, delta=1e-4, seed=2, select="private", select_runs=3, epochs=20)
    model = defense.fit(small_graph, split)
    return model, model.save(tmp_path_factory.mktemp("sel") / "model")


def test_selection_spends_at_most_the_target_and_accounts_the_noisy_score(selected_mlp):
    model, _ = selected_mlp
    spec = model.privacy
    assert spec.epsilon <= 6.0 and spec.sound and spec.unit == "node"
    (record,) = spec.mechanisms
    assert record["mechanism"] == "PrivateSelection"
    selection = mechanism_from_record(record)
    run_epsilon = model.card["selection"]["run_epsilon"]
    assert run_epsilon < 6.0
    for run in selection.candidates:
        score = run[-1]
        assert isinstance(score, GaussianMechanism) and score.sensitivity == 1.0 and score.sigma == 5.0
        # each candidate's training alone is calibrated to ε_run
        assert PrivacyLedger().extend(run[:-1]).get_epsilon(1e-4) <= run_epsilon * (1 + 1e-9)
    # the score is charged: without it the same runs would spend less
    cheaper = PrivateSelection(tuple(run[:-1] for run in selection.candidates), selection.eta, selection.gamma)
    assert PrivacyLedger().step(cheaper).get_epsilon(1e-4) < spec.epsilon


def test_card_has_the_choice_and_the_record_keeps_runs_and_scores(selected_mlp):
    model, directory = selected_mlp
    section = model.card["selection"]
    assert section["chosen"] in section["grid"]
    assert section["expected_runs"] == pytest.approx(3.0)
    public = (directory / "model.json").read_text()
    for private in ("number_of_runs", "score_history", "winner_run_spec"):
        assert private not in public
    record = json.loads((directory / "provenance.json").read_text())["selection"]
    assert record["number_of_runs"] == len(record["score_history"]) >= 1
    with pytest.raises(PublicCardError, match="number_of_runs"):
        check_public_card({**model.card, "selection": {**section, "number_of_runs": 3}})


def test_a_selected_model_loads_and_an_edited_per_run_epsilon_does_not(selected_mlp, tmp_path):
    model, directory = selected_mlp
    loaded = load(directory)
    assert loaded.privacy.epsilon == pytest.approx(model.privacy.epsilon)
    meta = json.loads((directory / "model.json").read_text())
    meta["card"]["selection"]["run_epsilon"] *= 1.5
    edited = tmp_path / "edited"
    edited.mkdir()
    for name in ("model.safetensors",):
        (edited / name).write_bytes((directory / name).read_bytes())
    (edited / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DPAuditError, match="per-run ε|plan|weights"):
        load(edited)


def test_edge_level_score_is_free_and_gap_edp_selects(small_graph, tmp_path):
    split = make_split(small_graph, SPLIT, seed=0)
    defense = get_defense("gap-edp")(
        epsilon=6.0, delta=1e-4, seed=1, select="private", select_runs=2, epochs=10, encoder_epochs=10
    )
    model = defense.fit(small_graph, split)
    (record,) = model.privacy.mechanisms
    selection = mechanism_from_record(record)
    assert all(m.name.startswith("pma") for run in selection.candidates for m in run)  # no score mechanism
    assert model.privacy.epsilon <= 6.0
    assert model.card["selection"]["score_noise"] is None
    # a release on a query graph is charged the worst candidate's PMA, whichever won
    worst = max((m for run in selection.candidates for m in run), key=lambda m: m.count / m.sigma**2)
    assert (model.cfg["query_mechanism"]["sigma"], model.cfg["query_mechanism"]["count"]) == (worst.sigma, worst.count)
    # a release on another graph is counted in the query ledger at the worst candidate's PMA
    other = small_graph.data.clone()
    other.edge_index = other.edge_index[:, :-2]
    spent = model.privacy.epsilon
    asked = model.query_session()
    asked.predict_proba(other)
    assert asked.query_ledger.releases == 1
    assert asked.query_ledger.spec().epsilon == pytest.approx(
        PrivacyLedger().step(worst).get_epsilon(model.privacy.delta), rel=1e-9
    )
    assert asked.privacy.epsilon == spent  # the query ledger is separate: the selection's ε is unchanged
    assert model.privacy.epsilon == spent and model.query_ledger.releases == 0
    # and the selected model saves and loads with the same spec
    loaded = load(model.save(tmp_path / "gap"))
    assert loaded.privacy.epsilon == pytest.approx(spent)
    assert loaded.card["selection"] == model.card["selection"]


@pytest.mark.parametrize(
    ("name", "settings", "match"),
    [
        ("gap-inf", {}, "select=private needs a run score proven private"),
        ("dpgnn", {"epsilon": 4.0}, "dpgnn.s sampler is sound: false"),
        ("mlp-dp", {}, "ε = ∞"),
        ("mlp-dp", {"epsilon": 4.0, "protocol": "paper"}, "protocol=paper"),
        ("mlp-dp", {"epsilon": 4.0, "select": "best"}, "select must be one of"),
        ("mlp-dp", {"epsilon": 4.0, "select_runs": 1.0}, "select_runs"),
    ],
)
def test_unsupported_requests_are_refused_at_construction(name, settings, match):
    with pytest.raises(ConfigurationError, match=match):
        get_defense(name)(**{"select": "private", **settings})


def test_refusals_before_any_training(small_graph, monkeypatch):
    """An inductive split for GAP, a split without validation nodes, or a target the law's own
    overhead already spends: one clear error, and no run is trained."""
    from defenses.gap import _GAP

    def no_training(*args, **kwargs):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr(_GAP, "_fit", no_training)
    inductive = make_split(small_graph, "inductive:0.6,0.2", seed=0)
    with pytest.raises(ConfigurationError, match="inductive"):
        get_defense("gap-edp")(epsilon=4.0, delta=1e-4, select="private").fit(small_graph, inductive)
    no_val = make_split(small_graph, "random:0.8,0.0,0.2", seed=0)
    with pytest.raises(ConfigurationError, match="validation"):
        get_defense("gap-edp")(epsilon=4.0, delta=1e-4, select="private").fit(small_graph, no_val)
    split = make_split(small_graph, SPLIT, seed=0)
    with pytest.raises(PrivacyParameterError, match="overhead"):
        get_defense("gap-edp")(epsilon=0.05, delta=1e-4, select="private", select_runs=1e6, select_eta=100).fit(
            small_graph, split
        )


def test_a_run_that_spends_more_than_its_plan_is_caught(small_graph, monkeypatch):
    """The selection is accounted with the plan; a run whose spec differs (here: the plan
    under-states the run by planning at a larger σ) stops the selection."""
    import dpaudit.training.private_selection as ps

    planned = ps.run_mechanisms

    def understated(defense, *args):
        return [PoissonSubsampledGaussian(m.sigma * 2, m.sample_rate, m.steps) for m in planned(defense, *args)]

    monkeypatch.setattr(ps, "run_mechanisms", understated)
    split = make_split(small_graph, SPLIT, seed=0)
    defense = get_defense("mlp-dp")(epsilon=6.0, delta=1e-4, select="private", select_runs=2, epochs=5)
    with pytest.raises(AssertionError, match="spent what its plan does not say"):
        defense.fit(small_graph, split)


def test_a_broken_degree_promise_refuses_before_the_selection_is_calibrated(small_graph, monkeypatch):
    """Sound gap-ndp under select=private: a training graph above max_degree is refused by
    ``Defense.check_data`` before ε_run is searched (which trains nothing but costs seconds)."""
    import dpaudit.training.private_selection as selection

    def never(*args, **kwargs):
        raise AssertionError("the selection was calibrated before the degree promise was checked")

    monkeypatch.setattr(selection, "plan_run_epsilon", never)
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    defense = get_defense("gap-ndp")(epsilon=8.0, seed=0, max_degree=1, degree_bound="promise", select="private")
    with pytest.raises(ConfigurationError, match="maximum degree ≤ max_degree = 1"):
        defense.fit(small_graph, split)


def test_projected_gap_ndp_selects_privately_above_its_cap_and_loads(small_graph, tmp_path, monkeypatch):
    """The default degree projection plans every candidate from the declared node count it read
    (no refusal on a degree), solves the training graph's projection once for all its runs, and
    the load check re-derives the same plan from the card."""
    import defenses.gap.projection as projection
    from dpaudit.data.adjacency import TensorCache
    from dpaudit.release.model import load

    solves = []
    real = projection.entropy_projection
    monkeypatch.setattr(projection, "entropy_projection", lambda *a, **k: solves.append(1) or real(*a, **k))
    monkeypatch.setattr(projection, "_PROJECTIONS", TensorCache(size=4))  # not an earlier test's solve
    split = make_split(small_graph, "random:0.5,0.25,0.25", 0)
    model = get_defense("gap-ndp")(epsilon=8.0, seed=3, max_degree=3, select="private", encoder_epochs=2, epochs=2).fit(
        small_graph, split
    )
    assert model.privacy.unit_condition is None and model.privacy.epsilon <= 8.0
    assert model.record["selection"]["number_of_runs"] == 4 and len(solves) == 1  # seed 3 draws 4 runs
    assert load(model.save(tmp_path / "m")).privacy.epsilon == model.privacy.epsilon
