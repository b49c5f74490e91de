r"""Poisson subsampling in time proportional to the sample, not to the population.

DP-SGD's amplification-by-subsampling analyses (and DPAR's node sampling) assume Poisson
sampling: each of the ``num`` examples is kept independently with probability ``q``. Drawing
``num`` uniforms per batch costs O(n) per step, O(n²/B) per epoch — most of the training time
at Amazon size (issue 27). The same distribution in O(B):

.. math::
    K \sim \mathrm{Binomial}(n, q), \qquad S \mid K = k \ \sim\ \text{uniform over the } k\text{-subsets},

since :math:`\Pr[S] = \binom{n}{|S|} q^{|S|} (1-q)^{n-|S|} / \binom{n}{|S|} = q^{|S|}(1-q)^{n-|S|}`,
exactly the product of independent inclusions. The uniform k-subset is the first k distinct
values of i.i.d. uniform draws from ``range(n)`` (by symmetry every ordered k-tuple of distinct
values is equally likely), which needs about k draws when k ≪ n; for k > n/2 a permutation is
no costlier and is used instead. Nothing in the draw depends on anything but (n, q) and the
generator, so the accountant's assumption holds for the exact sampling performed
(``tests/dpaudit/training/test_sampling.py`` checks the law of the subsets themselves).
"""

from __future__ import annotations

import torch


def _first_distinct(values: torch.Tensor) -> torch.Tensor:
    """The distinct entries of ``values`` in the order of their first occurrence."""
    unique, inverse = torch.unique(values, return_inverse=True)
    positions = torch.arange(values.numel(), dtype=torch.long)
    first = torch.full((unique.numel(),), values.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, positions, reduce="amin")
    return unique[first.argsort()]


def poisson_subset(num: int, rate: float, generator: torch.Generator) -> torch.Tensor:
    """Sorted indices of ``range(num)``, each kept independently with probability ``rate``
    (Poisson sampling), drawn in O(expected sample size) from ``generator``.

    Args:
        num: population size.
        rate: inclusion probability (≥ 1: everything, ≤ 0: nothing).
        generator: the random generator.

    Returns:
        Sorted int64 indices.
    """
    num = int(num)
    if rate >= 1.0:
        return torch.arange(num)
    if num <= 0 or rate <= 0.0:
        return torch.empty(0, dtype=torch.long)
    size = int(torch.binomial(torch.tensor([float(num)]), torch.tensor([float(rate)]), generator=generator).item())
    if size == 0:
        return torch.empty(0, dtype=torch.long)
    if 2 * size > num:
        return torch.randperm(num, generator=generator)[:size].sort().values
    chosen = torch.empty(0, dtype=torch.long)
    while chosen.numel() < size:
        missing = size - chosen.numel()
        # a few more draws than missing values: with k ≤ n/2 repeats are rare, so one round
        # almost always suffices
        draws = torch.randint(num, (missing + missing // 4 + 8,), generator=generator)
        chosen = _first_distinct(torch.cat([chosen, draws]))
    return chosen[:size].sort().values
