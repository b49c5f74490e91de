"""Ghost clipping in dpaudit.training.dpsgd: the same clipped-and-noised gradients as opacus' per-sample path."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from defenses.baselines import FeatureMLP
from dpaudit.accounting import PoissonSubsampledGaussian
from dpaudit.errors import ConfigurationError
from dpaudit.nn import MLP, SparseFeatures
from dpaudit.training.dpsgd import (
    GhostClipper,
    PerSampleClipper,
    PoissonSchedule,
    make_clipper,
    noise_for_plan,
    noisy_gradients,
    poisson_sample_rate,
    train_dp_sgd,
)
from dpaudit.training.dpsgd import loop as dpsgd_loop
from dpaudit.training.dpsgd import planning as dpsgd_planning


def _data(n=40, f=30, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, f, generator=g) < 0.15).float() * torch.rand(n, f, generator=g) * 3
    y = torch.randint(0, c, (n,), generator=g)
    return x, y


def _mlp(seed=0, layers=2, bias=True):
    torch.manual_seed(seed)
    return FeatureMLP(30, 8, 3, layers=layers, dropout=0.0, act="selu", bias=bias)


@pytest.mark.parametrize("layers,bias", [(1, True), (2, True), (3, False)])
@pytest.mark.parametrize("sparse", [False, True])
def test_ghost_sum_equals_per_sample_sum(layers, bias, sparse):
    x, y = _data()
    module = _mlp(layers=layers, bias=bias)
    inputs = SparseFeatures.from_tensor(x) if sparse else x
    loss = nn.CrossEntropyLoss()
    ghost = GhostClipper(module)
    got = ghost.clipped_sum(inputs, y, loss, max_norm=0.5)
    ghost.remove()
    reference = PerSampleClipper(module)
    want = reference.clipped_sum(x, y, loss, max_norm=0.5)
    reference.remove()
    assert set(got) == set(want) == set(module.parameters())
    for p in module.parameters():
        torch.testing.assert_close(got[p], want[p], rtol=1e-5, atol=1e-6)
    # Clipping is active (some example norms exceed C) and bounds every example.
    for i in range(len(y)):
        one = GhostClipper(module)
        single = one.clipped_sum(x[i : i + 1], y[i : i + 1], loss, max_norm=0.5)
        one.remove()
        assert math.sqrt(sum(float(g.pow(2).sum()) for g in single.values())) <= 0.5 + 1e-5


def test_ghost_noisy_gradient_equals_opacus_dp_optimizer():
    """One step: opacus' GradSampleModule + DPOptimizer.pre_step vs ghost sum + noisy_gradients."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    x, y = _data()
    sigma, clip, expected = 1.3, 0.7, 17
    module = _mlp(layers=2)
    gsm = GradSampleModule(module, batch_first=True, loss_reduction="mean")
    opt = DPOptimizer(
        torch.optim.SGD(module.parameters(), lr=0.1),
        noise_multiplier=sigma,
        max_grad_norm=clip,
        expected_batch_size=expected,
        generator=torch.Generator().manual_seed(5),
    )
    opt.zero_grad()
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    want = [p.grad.clone() for p in module.parameters()]
    gsm._close()

    ghost = GhostClipper(module)
    summed = ghost.clipped_sum(SparseFeatures.from_tensor(x), y, nn.CrossEntropyLoss(), clip)
    ghost.remove()
    params = list(module.parameters())
    noisy_gradients(summed, params, sigma * clip, expected, torch.Generator().manual_seed(5))
    for p, w in zip(params, want):
        torch.testing.assert_close(p.grad, w, rtol=1e-5, atol=1e-6)


def _schedule(batch, epochs, n=40):
    return PoissonSchedule.plan(batch_size=batch, epochs=epochs, declared_size=n)


def _train(clipping, inputs, y, epochs=3, seed=3, batch=8):
    module = _mlp(layers=2)
    mech = train_dp_sgd(
        module,
        inputs,
        y,
        noise_multiplier=1.1,
        max_grad_norm=0.5,
        batch_size=batch,
        epochs=epochs,
        lr=0.05,
        seed=seed,
        clipping=clipping,
        schedule=_schedule(batch, epochs),
    )
    return module, mech


def test_training_ghost_equals_per_sample_and_sparse_equals_dense():
    x, y = _data()
    ref, mech_ref = _train("per-sample", x, y)
    ghost, mech = _train("ghost", x, y)
    sparse, mech_sparse = _train("ghost", SparseFeatures.from_tensor(x), y)
    assert mech == mech_ref == mech_sparse
    assert mech.steps == 3 * math.ceil(40 / 8) and mech.sample_rate == poisson_sample_rate(40, 8)
    for a, b, c in zip(ref.parameters(), ghost.parameters(), sparse.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    # A different seed gives different batches and noise.
    other, _ = _train("ghost", x, y, seed=4)
    assert not torch.allclose(next(other.parameters()), next(ghost.parameters()))


def test_empty_poisson_batches_still_take_noise_steps():
    x, y = _data(n=4)
    # Replay the sampler: with q = 1/4 and seed 3 some of the 4·epochs batches are empty.
    g = torch.Generator().manual_seed(3)
    sizes = [int((torch.rand(4, generator=g) < 0.25).sum()) for _ in range(4 * 5)]
    assert 0 in sizes
    module = _mlp()
    before = [p.detach().clone() for p in module.parameters()]
    mech = train_dp_sgd(
        module,
        x,
        y,
        noise_multiplier=2.0,
        max_grad_norm=1.0,
        batch_size=1,
        epochs=5,
        lr=0.01,
        seed=3,
        schedule=_schedule(1, 5, n=4),
    )
    assert mech.steps == len(sizes) == 20 and mech.sample_rate == 0.25
    assert all(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_non_linear_parameters_fall_back_and_batchnorm_is_refused():
    module = nn.Sequential(nn.Linear(30, 8), nn.LayerNorm(8), nn.Linear(8, 3))
    assert isinstance(make_clipper(module), PerSampleClipper)
    assert isinstance(make_clipper(MLP(30, [8], 3)), GhostClipper)
    shared = nn.Linear(3, 3)
    twice = nn.Sequential(nn.Linear(30, 3), shared, shared)
    x, y = _data()
    mech = train_dp_sgd(
        twice,
        x,
        y,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        batch_size=10,
        epochs=1,
        lr=0.01,
        schedule=_schedule(10, 1),
    )
    assert mech.steps == 4
    with pytest.raises(ConfigurationError):
        make_clipper(nn.Sequential(nn.Linear(30, 8), nn.BatchNorm1d(8)))


def test_on_epoch_evaluations_do_not_disturb_ghost_clipping():
    x, y = _data()
    calls = []

    def evaluate(module):
        with torch.no_grad():
            module(x)
            module(x)  # two forwards outside a training step
        calls.append(1)

    settings = dict(
        noise_multiplier=1.0, max_grad_norm=0.5, batch_size=8, epochs=2, lr=0.01, seed=1, schedule=_schedule(8, 2)
    )
    module, reference = _mlp(), _mlp()
    mech = train_dp_sgd(module, x, y, on_epoch=evaluate, **settings)
    train_dp_sgd(reference, x, y, clipping="per-sample", **settings)
    assert len(calls) == 2 and mech.steps == 10
    for a, b in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- the schedule is public


def test_schedule_not_the_number_of_examples_fixes_rate_steps_and_normaliser(monkeypatch):
    """Training sets of n and n − 1 examples under one schedule spend the same mechanism, and the
    noisy sum is divided by the schedule's normaliser — never by anything read from n (the old
    loop read q = 1/⌈n/B⌉, ⌈n/B⌉ steps per epoch and the normaliser ⌊nq⌋: at B = 10 that
    normaliser was 10 for 40 examples and 9 for 39)."""
    x, y = _data(n=40)
    schedule = PoissonSchedule.plan(batch_size=13, epochs=2, declared_size=52)
    assert (schedule.sample_rate, schedule.steps, schedule.expected_batch_size) == (0.25, 8, 13.0)
    seen = []
    real = dpsgd_loop.noisy_gradients

    def spy(summed, params, std, expected_batch_size, generator):
        seen.append(expected_batch_size)
        return real(summed, params, std, expected_batch_size, generator)

    monkeypatch.setattr(dpsgd_loop, "noisy_gradients", spy)
    spent = []
    for n in (40, 39):
        spent.append(
            train_dp_sgd(
                _mlp(),
                x[:n],
                y[:n],
                noise_multiplier=1.0,
                max_grad_norm=1.0,
                batch_size=10,
                epochs=2,
                lr=0.01,
                schedule=schedule,
            )
        )
    assert spent[0] == spent[1] == PoissonSubsampledGaussian(1.0, 0.25, 8)
    assert seen == [13.0] * 16
    by_rate = PoissonSchedule.plan(batch_size=16, epochs=3, declared_size=None, sample_rate=0.1)
    assert (by_rate.sample_rate, by_rate.steps, by_rate.steps_per_epoch, by_rate.expected_batch_size) == (
        0.1,
        30,
        10,
        16,
    )


def test_noisy_training_without_a_schedule_is_refused_before_any_step():
    x, y = _data()
    module = _mlp()
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(ConfigurationError, match="PoissonSchedule"):
        train_dp_sgd(module, x, y, noise_multiplier=1.0, max_grad_norm=1.0, batch_size=8, epochs=2, lr=0.01)
    with pytest.raises(ConfigurationError, match="epochs"):
        train_dp_sgd(
            module,
            x,
            y,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            batch_size=8,
            epochs=3,
            lr=0.01,
            schedule=_schedule(8, 2),
        )
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))
    with pytest.raises(ConfigurationError, match="sample_rate"):
        PoissonSchedule.plan(batch_size=8, epochs=2, declared_size=None)
    # ε = ∞ needs no schedule: nothing is accounted
    assert train_dp_sgd(module, x, y, noise_multiplier=0.0, max_grad_norm=1.0, batch_size=8, epochs=1, lr=0.01) is None


def test_noise_for_plan_reuses_only_a_calibrated_sigma(monkeypatch):
    """A saved σ that meets the calibration's contract is reused without a calibration; a σ off
    by more than the tolerance is re-calibrated (so it no longer matches the plan)."""
    family = lambda s: PoissonSubsampledGaussian(s, 0.2, 50)  # noqa: E731
    sigma = noise_for_plan(2.0, 1e-5, family)
    calls = []
    monkeypatch.setattr(dpsgd_planning, "calibrate_noise", lambda *a, **k: calls.append(1) or -1.0)
    assert noise_for_plan(2.0, 1e-5, family, recorded=sigma) == sigma and not calls
    assert noise_for_plan(2.0, 1e-5, family, recorded=sigma * 1.5) == -1.0 and len(calls) == 1
    assert noise_for_plan(2.0, 1e-5, family, recorded=sigma * 0.9) == -1.0 and len(calls) == 2


def test_noise_free_run_in_order_is_plain_full_batch_adam():
    """``shuffle=False`` without noise is full-batch Adam on the rows in order, bit for bit (GAP's
    non-private steps train through it); a noisy run refuses it (its batches are the Poisson draws)."""
    x, y = _data()
    reference = _mlp()
    opt = torch.optim.Adam(reference.parameters(), lr=0.05)
    for _ in range(3):
        reference.train()
        opt.zero_grad()
        nn.functional.cross_entropy(reference(x), y).backward()
        opt.step()
    trained = _mlp()
    spent = train_dp_sgd(
        trained, x, y, noise_multiplier=0.0, max_grad_norm=math.inf, batch_size=len(y), epochs=3, lr=0.05, shuffle=False
    )
    assert spent is None
    for a, b in zip(reference.parameters(), trained.parameters()):
        assert torch.equal(a, b)
    schedule = PoissonSchedule.plan(batch_size=10, epochs=1, declared_size=40)
    with pytest.raises(ConfigurationError, match="shuffle=False"):
        train_dp_sgd(
            _mlp(),
            x,
            y,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            batch_size=10,
            epochs=1,
            lr=0.05,
            schedule=schedule,
            shuffle=False,
        )
