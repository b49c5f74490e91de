"""The O(B) Poisson sampler draws exactly Poisson sampling: every subset S of range(n) with
probability q^|S| (1 − q)^(n − |S|), which the subsampling accountants assume."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import binom, chisquare

from dpaudit.training.sampling import _first_distinct, poisson_subset


@pytest.mark.parametrize("q", [0.2, 0.7])  # 0.7: the permutation branch (k > n/2) is taken often
def test_every_subset_has_its_poisson_probability(q):
    """χ² goodness of fit of the 2^n subsets' frequencies against q^|S| (1 − q)^(n − |S|)."""
    n, trials = 5, 40_000
    gen = torch.Generator().manual_seed(11)
    index = {s: i for i, s in enumerate(itertools.product((0, 1), repeat=n))}
    counts = np.zeros(len(index))
    for _ in range(trials):
        mask = [0] * n
        for i in poisson_subset(n, q, gen).tolist():
            mask[i] = 1
        counts[index[tuple(mask)]] += 1
    expected = np.array([q ** sum(s) * (1 - q) ** (n - sum(s)) for s in index]) * trials
    assert chisquare(counts, expected).pvalue > 1e-3


def test_a_law_that_is_not_poisson_is_rejected_by_the_same_check():
    """The χ² check has the power to fail: a fixed batch size (sampling without replacement,
    what a shuffled loader does) has the right mean and inclusion rates but not the law."""
    n, q, trials = 5, 0.4, 40_000
    gen = torch.Generator().manual_seed(11)
    index = {s: i for i, s in enumerate(itertools.product((0, 1), repeat=n))}
    counts = np.zeros(len(index))
    for _ in range(trials):
        mask = [0] * n
        for i in torch.randperm(n, generator=gen)[: round(n * q)].tolist():
            mask[i] = 1
        counts[index[tuple(mask)]] += 1
    expected = np.array([q ** sum(s) * (1 - q) ** (n - sum(s)) for s in index]) * trials
    assert chisquare(counts + 1e-9, expected).pvalue < 1e-6


def test_large_populations_keep_the_binomial_size_and_uniform_inclusion():
    """n = 10⁶, q = 10⁻⁴ (a DP-SGD batch at scale): sizes follow Binomial(n, q) and every index
    is equally likely; indices are distinct, sorted and in range."""
    n, q, trials = 1_000_000, 1e-4, 2_000
    gen = torch.Generator().manual_seed(3)
    sizes, hits = [], np.zeros(10)
    for _ in range(trials):
        batch = poisson_subset(n, q, gen)
        assert torch.equal(batch, batch.unique()) and (batch.numel() == 0 or (batch[0] >= 0 and batch[-1] < n))
        sizes.append(batch.numel())
        hits += np.bincount((batch * 10 // n).numpy(), minlength=10)  # ten equal bands of indices
    sizes = np.array(sizes)
    assert abs(sizes.mean() - n * q) < 4 * np.sqrt(n * q * (1 - q) / trials)
    assert abs(sizes.var() / (n * q * (1 - q)) - 1) < 0.15
    assert chisquare(hits).pvalue > 1e-3
    # the batch-size law itself, bin by bin
    observed = np.bincount(sizes, minlength=sizes.max() + 1)
    assert np.abs(observed / trials - binom.pmf(np.arange(len(observed)), n, q)).max() < 0.02


def test_edge_rates_and_first_occurrence_order():
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(poisson_subset(4, 1.0, gen), torch.arange(4))
    assert poisson_subset(4, 0.0, gen).numel() == 0 and poisson_subset(0, 0.5, gen).numel() == 0
    assert _first_distinct(torch.tensor([5, 2, 5, 9, 2, 1])).tolist() == [5, 2, 9, 1]
