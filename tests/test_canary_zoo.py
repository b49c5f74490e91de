"""The broken-mechanism zoo on a real graph (issue 25, items 1 and 6): the quick version of
``benchmarks/bench_zoo.py``'s acceptance on Cora — breaks whose true ε is ≥ 4 × the claim are
caught, the sound defense is not — and the zoo's true ε."""

from __future__ import annotations

import math

import pytest

from dpaudit.splits import make_split
from dpaudit.workflows import zoo

SPLIT = "random:0.5,0.25,0.25"
DELTA = 1e-4


def _variant(base: str, name: str) -> zoo.Variant:
    (variant,) = [v for v in zoo.VARIANTS if v.base == base and v.variant == name]
    return variant


@pytest.fixture(scope="module")
def cora(load_real):
    return load_real("cora")


def test_true_epsilon_of_each_break(cora):
    split = make_split(cora, SPLIT, 0)

    def truth(defense, claim, spent=None):
        return zoo.true_epsilon(defense, cora, split, claim, DELTA, claim if spent is None else spent)

    assert truth("mlp-dp", 0.5, spent=0.49) == 0.49  # a sound defense: what it spent
    div10 = truth("zoo-mlp-dp-noise-div10", 0.5)
    assert 4 * 0.5 <= div10 < math.inf and truth("zoo-mlp-dp-noise-div10", 4.0) > div10
    assert truth("zoo-mlp-dp-no-clipping", 4.0) == math.inf
    assert truth("zoo-gap-edp-sensitivity-div10", 1.0) >= 10.0  # σ ÷ 10 of a Gaussian: ε grows ≥ 10×
    half = truth("zoo-gaussian-sum-sigma-half", 1.0)
    assert 2.0 <= half < 4.0  # σ/2: about twice the claim, so acceptance does not require catching it


def test_node_canaries_catch_mlp_dp_with_a_tenth_of_the_noise_on_cora(cora):
    """Issue 25's case: noise ÷ 10 (true ε ≈ 7) claimed at 0.5 on Cora; node canaries on the
    rarest feature coordinates certify above the claim in one run."""
    plan = (("node", 1000, {"feature": "rare"}),)
    broken = zoo.audit_variant(_variant("mlp-dp", "noise-div10"), cora, 0.5, split=SPLIT, plan=plan)
    assert broken["true_epsilon"] >= 4 * broken["claimed_epsilon"]
    assert broken["caught"] and broken["certified"] > 0.5, broken["audits"]
    sound = zoo.audit_variant(_variant("mlp-dp", "sound"), cora, 0.5, split=SPLIT, plan=plan)
    assert not sound["caught"] and sound["certified"] <= 0.5, sound["audits"]


def test_zoo_acceptance_at_claim_4_on_cora(cora):
    """At ε = 4 only white-box gradient canaries certify enough: both DP-SGD breaks are caught
    with the default plan (node + gradient canaries, Bonferroni over the two), sound is not."""
    rows = {name: zoo.audit_variant(_variant("mlp-dp", name), cora, 4.0, split=SPLIT)
            for name in ("sound", "noise-div10", "no-clipping")}  # fmt: skip
    assert [a["kind"] for a in rows["sound"]["audits"]] == ["node", "gradient"]
    assert all(a["confidence"] == pytest.approx(0.975) for a in rows["sound"]["audits"])
    assert not rows["sound"]["caught"], rows["sound"]["audits"]
    for name in ("noise-div10", "no-clipping"):
        assert rows[name]["true_epsilon"] >= 16 and rows[name]["caught"], rows[name]["audits"]
