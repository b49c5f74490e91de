"""GCON's noise (issue 46 §1): integer noise on the homophily counts, and the review's ĥ brute force
— it recovers a seed and the private count with seeded noise, and nothing with the default."""

from __future__ import annotations

import math

import numpy as np
import pytest

from defenses.gcon.defense import GCON
from defenses.gcon.homophily import discrete_laplace, laplace_scale, release_homophily
from dpaudit.data.splits import make_split
from dpaudit.training.noise import SECURE, SEEDED, NoiseSource

SPLIT = "random:0.5,0.2,0.3"


def _mean_abs(scale: float) -> float:
    """E|X| of the discrete Laplace of scale t: 2α / (1 − α²) with α = e^{−1/t}."""
    alpha = math.exp(-1.0 / scale)
    return 2 * alpha / (1 - alpha**2)


def test_discrete_laplace_is_integer_with_the_calibrated_spread():
    rng = np.random.default_rng(0)
    scale = laplace_scale(0.1)  # t = 2/ε_h = 20
    draws = discrete_laplace(scale, 20000, rng)
    assert draws.dtype == np.int64
    mean_abs = np.abs(draws).mean()
    assert mean_abs == pytest.approx(_mean_abs(scale), rel=0.05)
    # half the scale (half the noise ε_h would need) is far outside that tolerance
    assert abs(mean_abs - _mean_abs(scale / 2)) > 0.3 * _mean_abs(scale / 2)
    assert abs(draws.mean()) < 0.05 * scale  # symmetric
    # the released counts are integers: ĥ is a ratio of two integers
    release = release_homophily(4000, 10000, 0.1, rng)
    assert release.estimate == pytest.approx(release.estimate) and 0 <= release.estimate <= 1


def _gcon(mode: str, seed: int):
    return GCON(epsilon=2.0, seed=seed, encoder_epochs=5, noise=mode, device="cpu")


def _brute_force(model, graph, total: int, seeds: range):
    """The review's attack: for each seed, the homophily noise it gives, the agree count that noise
    would need to produce the released ĥ exactly, and a re-training with the seed that must match
    the released weights. Returns (seed, agree) or None."""
    released = model.card["gcon"]["homophily"]
    estimate, epsilon = released["estimate"], released["epsilon"]
    scale = laplace_scale(epsilon)
    source = NoiseSource(SEEDED)
    target = model.weights_sha256()
    for seed in seeds:
        noise = discrete_laplace(scale, 2, source.numpy([seed, 0x40D]))
        denominator = max(total + int(noise[1]), 1)
        agree = round(estimate * denominator) - int(noise[0])
        if not 0 <= agree <= total:
            continue
        if release_homophily(agree, total, epsilon, source.numpy([seed, 0x40D])).estimate != estimate:
            continue  # this seed's noise cannot give the released ĥ
        split = make_split(graph, SPLIT, seed=0)
        if _gcon(SEEDED, seed).fit(graph, split).weights_sha256() == target:
            return seed, agree
    return None


@pytest.mark.parametrize("mode", [SEEDED, SECURE])
def test_homophily_brute_force_recovers_the_seed_only_from_seeded_noise(small_graph, mode):
    split = make_split(small_graph, SPLIT, seed=0)
    secret = 13
    model = _gcon(mode, secret).fit(small_graph, split)
    counts = model.record["gcon"]["homophily_counts"]  # the owner's record: what the attack must find
    agree, total = counts["agree"], counts["total"]  # total: the edge count, taken as known
    found = _brute_force(model, small_graph, total, range(16))
    if mode == SEEDED:
        assert found == (secret, agree)  # the seed and the exact private count
    else:
        assert found is None
