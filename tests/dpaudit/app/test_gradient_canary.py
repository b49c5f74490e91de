"""White-box Dirac gradient canaries in DP-SGD (issue 25, item 1): the hook in dpaudit.training.dpsgd, the
design, scores and verdict in dpaudit.auditing.gradient_canary, the composed audit in
dpaudit.app.workflows.gradient_canary."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import defenses.baselines.mlp_dp as mlp_dp
import defenses.dpgnn.defense as dpgnn
from defenses.baselines import FeatureMLP
from dpaudit.accounting import PoissonSubsampledGaussian
from dpaudit.app.workflows.gradient_canary import gradient_canary_audit
from dpaudit.auditing import gradient_canary as game
from dpaudit.auditing.results import CLAIM_REFUTED, REFUTING_VERDICTS
from dpaudit.data.datasets import csbm, from_data
from dpaudit.errors import ConfigurationError
from dpaudit.nn import SparseFeatures
from dpaudit.training.dpsgd import DiracCanaries, PoissonSchedule, inserting_canaries, train_dp_sgd
from dpaudit.training.registry import get_defense, register_defense

DELTA = 1e-5
SPLIT = "random:0.5,0.25,0.25"


# --------------------------------------------------------------------------- the hook


def _data(n=60, real=6, pad=10, classes=3, seed=0):
    """Features whose last ``pad`` columns are zero for every row (room for Dirac canaries)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.randn(n, real, generator=g), torch.zeros(n, pad)], dim=1)
    return x, torch.randint(0, classes, (n,), generator=g)


def _train(x, y, *, seed=0, steps=40, rate=0.25, sigma=1.0, optimizer="adam", layers=1, dropout=0.0):
    torch.manual_seed(seed)
    module = FeatureMLP(x.size(1), 8, 3, layers=layers, dropout=dropout, act="relu", bias=True)
    schedule = PoissonSchedule(rate, steps, rate * len(y), "test", 1)
    spent = train_dp_sgd(
        module,
        x,
        y,
        noise_multiplier=sigma,
        max_grad_norm=1.0,
        batch_size=0,
        epochs=1,
        lr=0.05,
        schedule=schedule,
        optimizer=optimizer,
        seed=seed,
    )
    return module, spent


def _flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def _canaries(count, seed=0, label=None, run=0, centre=False):
    return DiracCanaries(
        game.DiracDesign(count, seed), game.fair_coins(seed, run), seed=seed + 17, module_label=label, centre=centre
    )


def test_hook_is_inert_without_canaries():
    x, y = _data()
    plain, _ = _train(x, y, steps=20)
    again, _ = _train(x, y, steps=20)
    assert torch.equal(_flat(plain), _flat(again))
    # a canary block whose canaries ask for another run changes nothing
    elsewhere = _canaries(5, label="gap encoder")
    with inserting_canaries(elsewhere):
        inside, _ = _train(x, y, steps=20)
    assert not elsewhere.attached and torch.equal(_flat(inside), _flat(plain))
    # leaving a block by an exception leaves no canary behind
    hook = _canaries(5)
    with pytest.raises(RuntimeError), inserting_canaries(hook):
        raise RuntimeError("interrupted")
    after, _ = _train(x, y, steps=20)
    assert not hook.attached and torch.equal(_flat(after), _flat(plain))


def test_canaries_move_only_their_own_coordinates():
    """Canaries on input columns no row uses never reach the forward pass, and their sampling
    draws from a generator of its own: every other coordinate — excluded canaries' included —
    follows exactly the run without canaries (Adam is per coordinate)."""
    x, y = _data()
    plain, spent_plain = _train(x, y)
    hook = _canaries(24)
    with inserting_canaries(hook):
        audited, spent = _train(x, y)
    assert spent == spent_plain == PoissonSubsampledGaussian(1.0, 0.25, 40)
    moved = torch.nonzero(_flat(audited) != _flat(plain)).reshape(-1)
    included = hook.coordinates[torch.from_numpy(hook.included)]
    assert 0 < hook.included.sum() < 24
    assert set(moved.tolist()) <= set(included.tolist())
    assert len(moved) >= len(included) - 1  # an included canary that was sampled at least once moves


def test_included_canary_is_sampled_at_the_schedule_rate():
    x, y = _data()
    hook = _canaries(30)
    with inserting_canaries(hook):
        _train(x, y, steps=120, rate=0.25)
    counts = hook.sampled[hook.included]
    assert hook.steps == 120 and (hook.sampled[~hook.included] == 0).all()
    # Binomial(120, 0.25): mean 30, sd 4.74 — every count within 5 sd, their mean within 4 sd of it
    assert (np.abs(counts - 30) < 5 * 4.74).all()
    assert abs(counts.mean() - 30) < 4 * 4.74 / np.sqrt(len(counts))
    assert game.sampling_rate_seen(hook) == pytest.approx(0.25, abs=0.04)


def test_iterate_scores_add_the_clipping_bound_per_sampled_step():
    """With (almost) no noise an included canary's score is C per step it was sampled, an excluded
    one's 0; the final-model score moves in the canary's direction (plain SGD)."""
    x, y = _data()
    hook = _canaries(20)
    with inserting_canaries(hook):
        _train(x, y, steps=30, rate=1.0, sigma=1e-6, optimizer="sgd")
    scores = game.scores(hook, "iterates")
    assert np.allclose(scores[hook.included], 30.0, rtol=1e-4)
    assert np.allclose(scores[~hook.included], 0.0, atol=1e-3)
    final = game.scores(hook, "final")
    assert (final[hook.included] > 0.1).all() and np.allclose(final[~hook.included], 0.0, atol=1e-4)


def test_centred_scores_remove_the_real_examples_contribution():
    """Dense inputs: every coordinate has a real gradient. With q = 1 and (almost) no noise the
    centred score is exactly the canary's C per step; the raw sum is not. Centring evaluates the
    real examples without dropout, so the run's own random draws are untouched."""
    x, y = _data(pad=0)
    hook = _canaries(20, centre=True)
    with inserting_canaries(hook):
        _train(x, y, steps=30, rate=1.0, sigma=1e-6, optimizer="sgd")
    centred, raw = game.scores(hook, "centred"), game.scores(hook, "iterates")
    assert np.allclose(centred[hook.included], 30.0, rtol=1e-3)
    assert np.allclose(centred[~hook.included], 0.0, atol=1e-3)
    assert np.abs(raw[~hook.included]).max() > 0.1
    weights, hooks = [], [_canaries(20, centre=False), _canaries(20, centre=True)]
    for each in hooks:
        with inserting_canaries(each):
            weights.append(_flat(_train(x, y, steps=10, layers=2, dropout=0.5)[0]))
    assert torch.equal(weights[0], weights[1])
    with pytest.raises(ConfigurationError, match="centre"):
        game.scores(hooks[0], "centred")


def test_design_prefers_the_least_used_input_columns():
    x, y = _data(real=6, pad=10)
    x[:, 5] = 0.0
    x[0, 5] = 1.0  # column 5: one row; columns 6..15: none
    torch.manual_seed(0)
    module = FeatureMLP(16, 8, 3, layers=2, dropout=0.0, act="relu", bias=True)
    params = list(module.parameters())
    first = module.hidden_layers[0].weight  # [8, 16], the first parameter
    for inputs in (x, SparseFeatures.from_tensor(x)):
        design = game.DiracDesign(60, seed=3)
        coords = design(module, params, inputs).numpy()
        assert len(np.unique(coords)) == 60 and design.chosen["on_unused_input_columns"] == 60
        assert (coords < first.numel()).all() and (coords % 16 >= 6).all()  # W1[:, 6:16], the unused columns
    design = game.DiracDesign(84, seed=3)
    coords = design(module, params, x).numpy()
    assert design.chosen["on_unused_input_columns"] == 80 and design.chosen["largest_column_usage"] == 1
    assert set(coords[coords % 16 < 6] % 16) == {5}  # then the column one row uses
    design = game.DiracDesign(150, seed=3)
    coords = design(module, params, x).numpy()
    assert design.chosen["on_input_layer"] == 128 and design.chosen["random_coordinates"] == 22
    assert len(np.unique(coords)) == 150 and (coords[128:] >= first.numel()).all()
    with pytest.raises(ConfigurationError, match="distinct coordinates"):
        game.DiracDesign(10_000)(module, params, x)


def test_bad_designs_and_nested_blocks_are_refused():
    x, y = _data()
    twice = DiracCanaries(lambda m, p, i: torch.tensor([1, 1]), game.fair_coins(0, 0), seed=0)
    with pytest.raises(ConfigurationError, match="distinct"), inserting_canaries(twice):
        _train(x, y)
    outside = DiracCanaries(lambda m, p, i: torch.tensor([10**9]), game.fair_coins(0, 0), seed=0)
    with pytest.raises(ConfigurationError, match="coordinates in"), inserting_canaries(outside):
        _train(x, y)
    with inserting_canaries(_canaries(3)), pytest.raises(ConfigurationError, match="one canary block"):
        with inserting_canaries(_canaries(3)):
            pass


# --------------------------------------------------------------------------- the audit


@register_defense
class MLPDPNoiseTenth(mlp_dp.MLPDP):
    """mlp-dp that trains with a tenth of the noise it accounts (its spec is the sound one's)."""

    name = "gradient-canary-test-mlp-dp-noise-div10"

    def _fit(self, dataset, split, delta):
        real = mlp_dp.train_mlp_dp

        def quieter(module, x, y, *, noise_multiplier, **kw):
            real(module, x, y, noise_multiplier=noise_multiplier / 10, **kw)
            return PoissonSubsampledGaussian(noise_multiplier, kw["schedule"].sample_rate, kw["schedule"].steps)

        mlp_dp.train_mlp_dp = quieter
        try:
            return super()._fit(dataset, split, delta)
        finally:
            mlp_dp.train_mlp_dp = real


@pytest.fixture(scope="module")
def padded():
    """400 csbm nodes plus 512 all-zero feature columns (sparse real features, as on citation graphs)."""
    base = csbm(num_nodes=400, num_features=16, avg_degree=6.0, seed=0).data
    x = torch.cat([base.x, torch.zeros(base.num_nodes, 512)], dim=1)
    return from_data(Data(x=x, y=base.y, edge_index=base.edge_index), "csbm-padded", public_facts=True)


def _audit(defense, dataset, epsilon, canaries, **kw):
    # full-batch logistic regression (mlp-dp's auto preset here): σ is calibrated to the claim, so
    # 20 steps test the same Gaussian trade-off as 100
    kw.setdefault("overrides", {"epochs": 20})
    return gradient_canary_audit(
        defense, dataset, epsilon, canaries=canaries, split=SPLIT, delta=DELTA, device="cpu", progress=False, **kw
    )


def test_broken_mlp_dp_is_caught_and_sound_is_not(padded):
    broken = _audit("gradient-canary-test-mlp-dp-noise-div10", padded, 0.5, 1500)
    assert broken["kind"] == "gradient" and broken["claim_scope"] == "module"
    assert broken["claimed_epsilon"] == pytest.approx(0.5, rel=1e-3)
    assert broken["certified_epsilon_lower_bound"] > 0.5 and broken["verdict"] == "guarantee broken"
    for seed in range(3):
        sound = _audit("mlp-dp", padded, 0.5, 1500, seed=seed)
        assert sound["bound_valid"] and sound["certified_epsilon_lower_bound"] <= 0.5
        assert sound["verdict"] != "guarantee broken"


def test_runs_pool_fresh_coins(padded):
    result = _audit("mlp-dp", padded, 1.0, 200, runs=2, overrides={"epochs": 5})
    included = np.array(result["included"]).reshape(2, 200)
    assert result["runs"] == 2 and result["run_ids"] == [0] * 200 + [1] * 200
    assert (included[0] != included[1]).any()  # each run draws its own coins
    assert [r["sampled_rate"] for r in result["per_run"]] == [1.0, 1.0]  # full batch: q = 1


def test_gap_classifier_is_audited_against_its_own_share(padded):
    result = _audit(
        "gap-ndp",
        padded,
        2.0,
        300,
        design={"module": "classifier"},
        overrides={"encoder_epochs": 5, "epochs": 5, "max_degree": 400},
    )
    run = result["per_run"][0]
    assert run["run_label"] == "gap classifier" and result["claim_scope"] == "module"
    assert 0 < result["claimed_epsilon"] < result["total_epsilon"] <= 2.0 + 1e-6
    assert result["design"]["on_unused_input_columns"] == 0  # the classifier reads encodings, not raw features


def test_requests_refused_before_any_work():
    for defense, kwargs, match in [
        ("gcon", {}, "has none they can join"),
        ("dpar-em1", {"overrides": {"protocol": "paper"}}, "sound run only"),
        ("dpgnn", {"design": {"observe": "centred"}}, "clipped sum"),
        ("mlp-dp", {"design": {"module": "encoder"}}, "module"),
        ("mlp-dp", {"design": {"observe": "logits"}}, "observe"),
        ("mlp-dp", {"design": {"colour": 1}}, "unknown"),
        ("mlp-dp", {"canaries": 0}, "canaries"),
    ]:
        with pytest.raises(ConfigurationError, match=match):
            gradient_canary_audit(defense, "no-such-dataset", 1.0, **kwargs)
    with pytest.raises(ConfigurationError, match="finite"):
        gradient_canary_audit("mlp-dp", "no-such-dataset", "inf")


def test_mlp_dp_on_cora_certifies_one_in_one_run(load_real):
    """Issue 25's acceptance: mlp-dp at ε = 4 on Cora, gradient canaries, certified ε ≥ 1 in one run."""
    result = gradient_canary_audit(
        "mlp-dp", load_real("cora"), 4.0, canaries=4000, delta=DELTA, device="cpu", progress=False
    )
    assert result["runs"] == 1 and result["design"]["on_unused_input_columns"] == 4000
    assert 1.0 <= result["certified_epsilon_lower_bound"] <= 4.0


# --------------------------------------------------------------------------- DP-GNN


@register_defense
class DPGNNNoiseTenth(get_defense("dpgnn")):
    """dpgnn that trains with a tenth of the noise Theorem 1 accounts (its spec is the sound one's)."""

    name = "gradient-canary-test-dpgnn-noise-div10"

    def _fit(self, dataset, split, delta):
        real = dpgnn.train_dp

        def quieter(*args, **kw):
            bound = inspect.signature(real).bind(*args, **kw)
            bound.arguments["noise_std"] /= 10
            return real(*bound.args, **bound.kwargs)

        dpgnn.train_dp = quieter
        try:
            return super()._fit(dataset, split, delta)
        finally:
            dpgnn.train_dp = real


def test_broken_dpgnn_is_caught_and_sound_is_not(padded):
    """Canaries are nodes of Theorem 1's relation (defenses.dpgnn.canaries): noise ÷ 10 is caught
    at ε = 1, the sound run never is; the claim is Theorem 1's record in the spec."""
    settings = {"overrides": {"steps": 300, "latent": 16}}
    broken = _audit("gradient-canary-test-dpgnn-noise-div10", padded, 1.0, 2000, **settings)
    assert broken["claim_scope"] == "module" and broken["claimed_epsilon"] == pytest.approx(1.0, rel=1e-2)
    run = broken["per_run"][0]
    assert run["law"] == {"law": "dpgnn node occurrences", "population": 200, "batch_size": 22, "terms": 6}
    assert run["sampled_rate"] == pytest.approx(22 / 200, rel=0.05) and run["steps"] == 300
    # DP-GNN's spec is sound: false (its sampler is outside Theorem 1 for node removals): its ε is a
    # hypothesis, refuted rather than broken
    assert run["hypothesis"] and any("sound: false" in note for note in broken["notes"])
    assert broken["certified_epsilon_lower_bound"] > 1.0 and broken["verdict"] == CLAIM_REFUTED
    assert "Theorem 1" in broken["coverage"]
    for seed in range(3):
        sound = _audit("dpgnn", padded, 1.0, 2000, seed=seed, **settings)
        assert sound["bound_valid"] and sound["certified_epsilon_lower_bound"] <= 1.0
        assert sound["verdict"] not in REFUTING_VERDICTS


@register_defense
class MLPDPClaimingMu(mlp_dp.MLPDP):
    """mlp-dp whose spec also claims a (false, tiny) μ-GDP guarantee."""

    name = "gradient-canary-test-mlp-dp-claims-mu"

    def _fit(self, dataset, split, delta):
        model = super()._fit(dataset, split, delta)
        model.privacy.gdp_mu = 0.01
        return model


def test_a_stated_mu_is_tested(padded):
    """claimed_mu: the spec's μ goes to audit_epsilon; a certified μ above it refutes the claim even
    where ε is not refuted. mlp-dp's own spec states no μ (subsampled Gaussian): none is passed."""
    claimed = _audit("gradient-canary-test-mlp-dp-claims-mu", padded, 4.0, 1000, design={"claim": "total"})
    assert claimed["claimed_mu"] == 0.01 and claimed["certified_mu_lower_bound"] > 0.01
    assert claimed["certified_epsilon_lower_bound"] <= 4.0 and claimed["verdict"] == "guarantee broken"
    module = _audit("gradient-canary-test-mlp-dp-claims-mu", padded, 4.0, 1000)
    assert module["claim_scope"] == "module" and module["claimed_mu"] is None
    assert module["verdict"] != "guarantee broken"


def test_sound_dpar_takes_node_term_canaries(padded):
    """DPAR (sound) trains in its own loop: a canary is a node owning all d = 1 + K + D terms, each on
    its own Poisson coin (defenses.dpar.canaries); the claim is the DP-SGD record's."""
    result = _audit("dpar-em1", padded, 4.0, 300, overrides={"epochs": 2})
    run = result["per_run"][0]
    assert run["law"]["law"] == "dpar node terms" and run["law"]["terms"] == 3
    assert result["claim_scope"] == "module" and 0 < result["claimed_epsilon"] <= 4.0 + 1e-6
    assert "DPAR" in result["coverage"] and result["bound_valid"]
    assert result["certified_epsilon_lower_bound"] <= result["claimed_epsilon"]
