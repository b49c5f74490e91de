"""An audit's power before it runs (issue 39): the estimators' ceilings at a given size, and the
canaries a claim needs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.auditing.estimators import audit_epsilon
from dpaudit.auditing.power import (
    audit_power,
    canaries_for_ceiling,
    canaries_needed,
    fixed_grid_bound,
    gaussian_one_run_ceiling,
    perfect_attack_interval,
    split_floor,
)
from dpaudit.errors import ConfigurationError

DELTA = 1e-5


def test_power_is_what_a_perfect_attack_certifies():
    power = audit_power(100, delta=DELTA, claimed_epsilon=1.0)
    balanced = np.random.default_rng(0).permutation(np.arange(100) < 50)
    perfect = audit_epsilon(balanced.astype(float), balanced, delta=DELTA, run_ids=np.zeros(100, int))
    assert power["certifiable_epsilon"] == pytest.approx(perfect["certified_epsilon_lower_bound"])
    assert power["can_refute_claim"] and 2.0 < power["certifiable_epsilon"] < 3.0
    coins = np.random.default_rng(0).random(100) < 0.5  # fair coins: a perfect ranking may get less, never more
    lucky = audit_epsilon(coins.astype(float), coins, delta=DELTA, run_ids=np.zeros(100, int))
    assert lucky["certified_epsilon_lower_bound"] <= power["certifiable_epsilon"]
    noisy = audit_epsilon(
        np.random.default_rng(1).normal(size=100) + coins, coins, delta=DELTA, run_ids=np.zeros(100, int)
    )
    assert noisy["certified_epsilon_lower_bound"] <= power["certifiable_epsilon"]
    # 20 canaries cannot refute ε = 1 whatever the attack; more runs pooled can
    assert not audit_power(20, delta=DELTA, claimed_epsilon=1.0)["can_refute_claim"]
    assert audit_power(20, runs=3, delta=DELTA, claimed_epsilon=1.0)["can_refute_claim"]
    with pytest.raises(ConfigurationError, match="canaries"):
        audit_power(0, delta=DELTA)


def test_canaries_needed_is_the_smallest_count_that_suffices_to_ten_percent():
    needed = canaries_needed(1.0, delta=DELTA)
    assert audit_power(needed, delta=DELTA)["certifiable_epsilon"] > 1.0
    assert audit_power(int(needed * 0.85), delta=DELTA)["certifiable_epsilon"] <= 1.0
    assert canaries_needed(1.0, delta=DELTA, start=10) == needed
    assert canaries_needed(12.0, delta=DELTA, start=500, limit=2000) is None  # the δ term caps the test
    with pytest.raises(ConfigurationError, match="finite"):
        canaries_needed(float("inf"), delta=DELTA)


def test_a_perfect_ranking_certifies_the_ceiling_whatever_the_coins():
    """The plan's interval (issue 47 item 5): the fixed balanced pairs guessed 500 "in", so a
    perfect ranking with 498 of 1,000 canaries included certified 4.17 of a 4.32 ceiling and a
    typical draw 3.65; the two-cluster split rule reads the split from the scores, so every draw
    certifies the ceiling, and the interval's low end is a split that only its 80 % count survives."""
    ceiling = audit_power(1000, delta=1e-5)["certifiable_epsilon"]
    interval = perfect_attack_interval(1000, delta=1e-5)
    assert interval["low"] < interval["median"] == pytest.approx(interval["high"]) == pytest.approx(ceiling)
    assert 4.0 < interval["low"]
    for included in (498, 470):
        y = np.zeros(1000, dtype=bool)
        y[:included] = True
        seen = audit_epsilon(y.astype(float), y, delta=1e-5, confidence=0.95)["certified_epsilon_lower_bound"]
        assert seen == pytest.approx(ceiling)


def test_the_fixed_grids_and_the_split_floor_read_off_an_audit():
    """On a perfect ranking with 470 of 1,000 included: the fixed grids alone (what the refuting
    plan counts on) certify less than the split rule, and the split floor (only its 80 % count all
    right) lies between them."""
    y = np.zeros(1000, dtype=bool)
    y[:470] = True
    audit = audit_epsilon(y.astype(float), y, delta=1e-5)
    grid = fixed_grid_bound(audit)
    assert 0 < grid < split_floor(audit) < audit["certified_epsilon_lower_bound"]
    assert split_floor(audit) == pytest.approx(perfect_attack_interval(1000, delta=1e-5)["low"])


def test_gaussian_one_run_ceiling_is_the_direct_computation():
    mu, m = 0.925, 10_038
    for k in (1, 10):
        alpha = k / (m // 2)  # the ratio (TPR − δ)/α falls as α grows: the max is at the smallest α
        direct = np.log((norm.cdf(norm.ppf(alpha) + mu) - DELTA) / alpha)
        assert gaussian_one_run_ceiling(mu, m, delta=DELTA, min_events=k) == pytest.approx(direct, rel=1e-6)
    # never above the channel's own ε at δ (μ = 0.925 is ε = 4 at δ = 1e-5)
    assert gaussian_one_run_ceiling(mu, 10**9, delta=DELTA) <= 4.0 + 1e-3
    needed = canaries_for_ceiling(mu, 3.0, delta=DELTA, min_events=3)
    assert gaussian_one_run_ceiling(mu, needed, delta=DELTA, min_events=3) >= 3.0
    assert gaussian_one_run_ceiling(mu, int(needed / 1.02), delta=DELTA, min_events=3) < 3.0
    assert needed > 10_038  # 0.75 ε at ε = 4 needs more canaries than mlp-dp on Cora has parameters
    with pytest.raises(ConfigurationError):
        gaussian_one_run_ceiling(0.0, 100, delta=DELTA)
