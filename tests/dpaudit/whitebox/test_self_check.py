"""The gradient canaries check their own placement (issue 47 item 4, dpaudit/whitebox/self_check.py):
a correct hand-rolled DP-SGD loop that divides by the batch size before adding σC/B and calls
inject/observe after that division is refused (a usage error, never "claim refuted"), over
several seeds; the correct placement is accepted and not refuted; a loop with a tenth of the noise
and correct placement is still refuted (the self-check hides no noise bug); observing after a
rescaling and a wrong sample_rate are refused with one line saying how to place the canaries."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import dpaudit
from dpaudit.accounting import PoissonSubsampledGaussian, calibrate_noise
from dpaudit.auditing.hypothesis import claimed_noise_multiplier
from dpaudit.auditing.results import REFUTING_VERDICTS
from dpaudit.errors import ConfigurationError

EPSILON, DELTA, CLIP, STEPS, RATE, N = 4.0, 1e-5, 1.0, 30, 0.2, 1000


@pytest.fixture(scope="module")
def sigma() -> float:
    """What the user calibrated (RDP: a little more noise than the tightest accountant needs)."""
    return calibrate_noise(EPSILON, DELTA, lambda s: PoissonSubsampledGaussian(s, RATE, STEPS), accountant="rdp")


def _loop(
    sigma: float,
    *,
    placement: str = "sum",
    noise_factor: float = 1.0,
    seed: int = 0,
    claimed_rate: float = RATE,
    dataset_size: int | None = None,
    clip: bool = True,
    extra_steps: int = 0,
):
    """A hand-rolled DP-SGD loop (Poisson sampling, per-example clipping with torch.func, Gaussian
    noise) on N synthetic rows whose last 64 feature columns are unused (where the canaries go);
    ``placement``: ``"sum"`` (inject/observe on the clipped sum, the documented place),
    ``"after-division"`` (divides by B = qN, adds σC/B and injects/observes on the mean: correct
    DP, misplaced canaries), ``"observe-divided"`` (injects on the sum, observes the mean),
    ``"observe-step"`` (injects on the sum, observes the parameters' change after the optimizer's
    step); ``"examples"`` gives the canaries as per-example rows before clipping
    (``inject_examples``), ``"examples-divided"`` / ``"examples-step"`` so, observed after the
    division / the step. ``clip=False``: the loop clips after the noise (the bug: the noise is
    added to the unclipped sum, the noisy sum is clipped to C·B after). ``extra_steps``: steps run
    beyond the STEPS σ was calibrated for (a step missing from the accountant).
    Returns the record or the ConfigurationError that result() raised."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.zeros(N, 128)
    x[:, :64] = torch.randn(N, 64, generator=generator)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 4))
    params = dict(model.named_parameters())

    def loss(p, xi, yi):
        return nn.functional.cross_entropy(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    canaries = dpaudit.GradientCanaries(count=4000, seed=seed)
    canaries.attach(
        params.values(), sample_rate=claimed_rate, max_grad_norm=CLIP, features=x, dataset_size=dataset_size
    )
    batch_norm = RATE * N
    std = sigma * noise_factor * CLIP
    for _ in range(STEPS + extra_steps):
        batch = torch.nonzero(torch.rand(N, generator=generator) < RATE).reshape(-1)
        g = per_example({k: v.detach() for k, v in params.items()}, x[batch], y[batch])
        if placement.startswith("examples"):
            g = dict(zip(params, canaries.inject_examples([g[k] for k in params])))
        norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
        factor = (CLIP / (norms + 1e-6)).clamp(max=1.0) if clip else torch.ones_like(norms)
        summed = [torch.einsum("i,i...->...", factor, g[k]) for k in params]
        before = [p.detach().clone() for p in params.values()]
        if placement.startswith("examples"):
            noisy = [s + torch.randn(s.shape, generator=generator) * std for s in summed]
            update = [t / batch_norm for t in noisy]
            if not clip:  # the noisy sum clipped to C·B after the noise
                total = float(torch.sqrt(sum(t.pow(2).sum() for t in update)))
                update = [t * min(1.0, CLIP / total) for t in update]
            if placement == "examples":
                canaries.observe(noisy)
            elif placement == "examples-divided":
                canaries.observe(update)
        elif placement == "after-division":
            mean = canaries.inject([s / batch_norm for s in summed], batch_size=int(batch.numel()))
            update = [m + torch.randn(m.shape, generator=generator) * std / batch_norm for m in mean]
            canaries.observe(update)
        else:
            summed = canaries.inject(summed, batch_size=int(batch.numel()))
            noisy = [s + torch.randn(s.shape, generator=generator) * std for s in summed]
            update = [t / batch_norm for t in noisy]
            if placement != "observe-step":
                canaries.observe(update if placement == "observe-divided" else noisy)
        with torch.no_grad():
            for p, u in zip(params.values(), update):
                p -= 0.5 * u
        if placement in ("observe-step", "examples-step"):
            canaries.observe([p.detach() - b for p, b in zip(params.values(), before)])
    try:
        return canaries.result(epsilon=EPSILON, delta=DELTA)
    except ConfigurationError as exc:
        return exc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_canaries_injected_after_the_division_by_the_batch_size_are_refused_never_refuted(sigma, seed):
    out = _loop(sigma, placement="after-division", seed=seed)
    assert isinstance(out, ConfigurationError), (out.verdict, out.certified_epsilon_lower_bound)
    line = str(out)
    assert "\n" not in line and "before dividing by the batch size" in line
    assert "expected σ·C = " in line and "along non-canary coordinates" in line


def test_the_correct_placement_is_accepted_and_not_refuted(sigma):
    out = _loop(sigma, dataset_size=N)
    assert not isinstance(out, Exception), out
    assert out.verdict not in REFUTING_VERDICTS and out.certified_epsilon_lower_bound <= EPSILON
    check = out["self_check"]
    assert check["observed_slope"] == pytest.approx(1.0, abs=0.1)
    assert check["noise_std"] == pytest.approx(sigma * CLIP, rel=0.05)
    assert check["max_clipped_sum_over_c"] > 2  # a batch's clipped sum, not a mean
    assert check["observed_sample_rate"] == pytest.approx(RATE, abs=0.02)
    test = out["hypothesis_test"]  # the claim as SGM(σ, q, T): a correct run is not refuted
    assert test["refuted"] is False and test["p_value"] > 0.05


def test_noise_six_tenths_of_the_claim_is_refuted_by_the_hypothesis_test_in_one_run(sigma):
    out = _loop(sigma, noise_factor=0.6, dataset_size=N)
    assert not isinstance(out, Exception), out
    test = out["hypothesis_test"]
    assert test["refuted"] is True and test["p_value"] < 1e-3
    assert test["noise_multiplier"] == pytest.approx(claimed_noise_multiplier(EPSILON, DELTA, RATE, STEPS), rel=1e-6)


def test_a_tenth_of_the_noise_with_the_canaries_well_placed_is_still_refuted(sigma):
    out = _loop(sigma, noise_factor=0.1)
    assert not isinstance(out, Exception), out
    assert out.verdict == "claim refuted" and out.certified_epsilon_lower_bound > EPSILON
    assert out["self_check"]["noise_std"] == pytest.approx(0.1 * sigma * CLIP, rel=0.05)


def test_observing_after_the_division_is_refused(sigma):
    out = _loop(sigma, placement="observe-divided")
    assert isinstance(out, ConfigurationError)
    assert "call observe() on inject()'s output plus the noise" in str(out) and "\n" not in str(out)


def test_a_wrong_sample_rate_is_refused_when_the_batches_show_it(sigma):
    out = _loop(sigma, claimed_rate=2 * RATE, dataset_size=N)
    assert isinstance(out, ConfigurationError)
    assert f"sample_rate={2 * RATE:g}" in str(out) and "loader.sample_rate" in str(out)


def test_no_noise_at_all_is_audited_not_refused():
    """Observing the injected sums unchanged (no noise) is a noise bug, not a placement error."""
    params = [torch.zeros(400, requires_grad=True)]
    canaries = dpaudit.GradientCanaries(count=300, seed=0).attach(params, sample_rate=0.5, max_grad_norm=1.0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        real = 0.01 * torch.randn(400, generator=generator)  # tiny clipped sums, as after a division
        canaries.observe(canaries.inject([real]))
    assert canaries.result(epsilon=1.0, delta=1e-5)["self_check"]["noise_std"] == 0.0


def test_bad_batch_size_and_dataset_size_are_refused_before_any_work():
    params = [torch.zeros(4, requires_grad=True)]
    with pytest.raises(ConfigurationError, match="dataset_size must be an integer"):
        dpaudit.GradientCanaries(count=2).attach(params, sample_rate=0.1, max_grad_norm=1.0, dataset_size=0)
    canaries = dpaudit.GradientCanaries(count=2).attach(params, sample_rate=0.1, max_grad_norm=1.0)
    with pytest.raises(ConfigurationError, match="batch_size must be an integer"):
        canaries.inject([torch.zeros(4)], batch_size=-1)


def test_observing_after_the_optimizers_step_is_refused(sigma):
    """The parameters' change after the step is −lr·(noisy sum)/B: slope −lr/B, refused."""
    out = _loop(sigma, placement="observe-step")
    assert isinstance(out, ConfigurationError)
    assert "before the optimizer's step" in str(out) and "\n" not in str(out)


# ------------------------------------------------- canaries given as examples, before clipping


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_canaries_given_as_examples_before_clipping_are_not_refuted_in_a_correct_loop(sigma, seed):
    """A loop that clips at C turns the 4·C canary rows into C: the claim's law, never refuted."""
    out = _loop(sigma, placement="examples", seed=seed, dataset_size=N)
    assert not isinstance(out, Exception), out
    check = out["self_check"]
    assert check["inserted"] == "examples, before clipping" and check["example_norm"] == 4.0
    assert check["canary_gain"] == pytest.approx(1.0, abs=0.05)
    assert check["noise_std"] == pytest.approx(sigma * CLIP, rel=0.05)
    assert check["observed_sample_rate"] == pytest.approx(RATE, abs=0.02)
    assert out.verdict not in REFUTING_VERDICTS and out.certified_epsilon_lower_bound <= EPSILON
    assert out["hypothesis_test"]["refuted"] is False


def test_clipping_after_the_noise_is_refuted_by_canaries_given_as_examples(sigma):
    """The bug: noise added to the unclipped sum, the noisy sum clipped after. The canary rows
    (4·C) are not clipped before the noise, their scores are 4× the claim's: refuted, not refused."""
    out = _loop(sigma, placement="examples", clip=False, dataset_size=N)
    assert not isinstance(out, Exception), out
    assert out["self_check"]["canary_gain"] == pytest.approx(4.0, rel=0.05)
    test = out["hypothesis_test"]
    assert test["refuted"] is True and test["p_value"] < 1e-6
    assert out.verdict == "claim refuted" and out.certified_epsilon_lower_bound > EPSILON


@pytest.mark.parametrize("placement", ["examples-divided", "examples-step"])
def test_canaries_given_as_examples_observed_after_the_division_or_the_step_are_refused(sigma, placement):
    out = _loop(sigma, placement=placement)
    assert isinstance(out, ConfigurationError), out
    line = str(out)
    assert "\n" not in line and "came through at" in line and "before dividing by the batch size" in line


def test_inject_examples_refuses_bad_rows_and_mixing_with_inject():
    params = [torch.zeros(3, 4, requires_grad=True), torch.zeros(4, requires_grad=True)]
    canaries = dpaudit.GradientCanaries(count=5, seed=0).attach(params, sample_rate=1.0, max_grad_norm=2.0)
    with pytest.raises(ConfigurationError, match="one \\[B, \\*shape\\] tensor per attached parameter"):
        canaries.inject_examples([torch.zeros(3, 4), torch.zeros(4)])  # no batch dimension
    rows = canaries.inject_examples([torch.zeros(2, 3, 4), torch.zeros(2, 4)])
    included = int(canaries._hook.included.sum())  # q = 1: every included canary joins, no excluded one
    assert 0 < included < 5 and rows[0].shape[0] == rows[1].shape[0] == 2 + included
    extra = torch.cat([r[2:].reshape(included, -1) for r in rows], dim=1)
    assert torch.allclose(extra.norm(dim=1), torch.full((included,), 8.0))  # 4·C, one coordinate each
    assert int((extra != 0).sum()) == included
    canaries.observe([torch.zeros(3, 4), torch.zeros(4)])
    with pytest.raises(ConfigurationError, match="inject\\(\\) after inject_examples\\(\\)"):
        canaries.inject([torch.zeros(3, 4), torch.zeros(4)])
    with pytest.raises(ConfigurationError, match="example_norm must be > 1"):
        dpaudit.GradientCanaries(count=2).attach(params, sample_rate=0.5, max_grad_norm=1.0, example_norm=1.0)


def test_the_noise_test_finds_a_step_missing_from_the_accountant_where_the_canaries_cannot():
    """σ calibrated (tightest accountant) for T = 30 steps, T + 1 run: 0.6 % less noise than the
    claim at T + 1 needs. The canaries' scores cannot tell; the noise along the ≈ 4,500 non-canary
    coordinates × 31 steps can (χ² lower tail)."""
    exact = claimed_noise_multiplier(EPSILON, DELTA, RATE, STEPS)
    sound = _loop(exact, placement="examples", dataset_size=N)
    assert sound["self_check"]["noise_test"]["p_value"] > 0.01
    assert sound["self_check"]["noise_test"]["noise_std_over_claimed"] == pytest.approx(1.0, abs=0.01)
    bug = _loop(exact, placement="examples", dataset_size=N, extra_steps=1)
    assert not isinstance(bug, Exception), bug
    test = bug["self_check"]["noise_test"]
    ratio = exact / claimed_noise_multiplier(EPSILON, DELTA, RATE, STEPS + 1)
    assert test["noise_std_over_claimed"] == pytest.approx(ratio, abs=0.003) and ratio < 0.995
    assert test["p_value"] < 1e-4 and test["z"] < -4
    assert bug["hypothesis_test"]["refuted"] is False  # the canaries' scores do not see it


@pytest.mark.parametrize("told", [0.1, 0.2])
def test_an_opacus_loaders_rate_is_checked_against_the_sample_rate_given(told):
    """Opacus' per-sample gradients give each batch's size: canaries attached with twice the
    loader's rate (0.2 for 0.1) are refused in one line; the loader's own rate is accepted."""
    import warnings

    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 16, generator=generator), torch.randint(0, 4, (200,), generator=generator)
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = PrivacyEngine().make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(TensorDataset(x, y), batch_size=20),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
        )
        assert loader.sample_rate == pytest.approx(0.1)
        canaries = dpaudit.GradientCanaries(count=20, seed=0).attach(optimizer, sample_rate=told, dataset_size=200)
        for _ in range(5):
            for xb, yb in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
    try:
        out = canaries.result(epsilon=4.0, delta=1e-5)
    except ConfigurationError as exc:
        out = exc
    if told == 0.1:
        assert not isinstance(out, Exception), out
        assert out["self_check"]["observed_sample_rate"] == pytest.approx(0.1, abs=0.02)
    else:
        assert isinstance(out, ConfigurationError) and "\n" not in str(out)
        assert "sample_rate=0.2" in str(out) and "loader.sample_rate" in str(out)
