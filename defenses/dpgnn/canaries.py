r"""The law by which one gradient canary enters DP-GNN's training: a node of Theorem 1's
relation, owning N(K, r) subgraph terms drawn like a real node's (Daigavane et al.,
"Node-Level Differentially Private Graph Neural Networks", Theorem 1 and Lemma 2; white-box
Dirac canaries as in Steinke, Nasr & Jagielski, NeurIPS 2023, driven by
:class:`dpaudit.training.dpsgd.DiracCanaries`).

Theorem 1 bounds one step of DP-GNN for a node v whose k = N(K, r) training subgraphs (its own,
rooted at v, and at most k − 1 it is read in) sit in k of the N slots, of which the batch takes a
uniform m-subset: ρ ~ Hypergeometric(N, k, m) of them are drawn, and removing v moves each drawn
term by at most 2C (a term whose root reads v may flip from one clipped gradient to another),
against Gaussian noise of std σ = z·C on the sum.

A canary is such a node, with the strongest terms that relation allows along its Dirac
coordinate :math:`e_j`:

* **included** (v present): each drawn term is :math:`+C e_j`, its own and the k − 1 readers';
* **excluded** (v removed): its own slot is empty, and each drawn reader term is :math:`-C e_j`
  — the readers' subgraphs exist in both worlds and only lose v.

Every step draws, for each canary independently of the real batch, of the other canaries and
of the noise, ρ ~ Hypergeometric(N, k, m) and whether its own slot is among the ρ (probability
ρ/k: the drawn slots are a uniform ρ-subset of the k). Given ρ, the two worlds differ by
:math:`(2\rho - [\text{own slot drawn}])\,C \le 2\rho C` along :math:`e_j`: a pair of
neighbours under exactly the law and sensitivity Theorem 1 accounts (N the declared population
the plan uses, k capped at N as the accountant caps it), so the one-run game's bound is valid
against the spent ε. It is 2 − 1/k of the accountant's worst case per drawn slot in expectation
(11/12 at K = 5, r = 1), where canaries that only add terms would reach half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

#: the law's name in an audit's record
LAW = "dpgnn node occurrences"
#: the spec's record of Theorem 1 (:func:`defenses.dpgnn.mechanism.dpgnn_mechanism`)
ACCOUNTED_MECHANISM = "SensitivityMixtureGaussian"
COVERAGE = (
    "DP-GNN gradient canaries are nodes of Theorem 1's directed relation (Remark 2): each owns N(K, r) subgraph "
    "terms drawn like a real node's (Hypergeometric over the declared population's slots), +C along its coordinate "
    "when present, -C on its readers' terms when removed; the bound is valid against the accountant's ε for that "
    "relation, which is the one DP-GNN proves"
)


@dataclass
class NodeOccurrences:
    """A :class:`dpaudit.training.dpsgd.CanaryLaw` for DP-GNN (module docstring): ``population`` N slots,
    ``batch_size`` m drawn per step without replacement, ``terms`` k = min(N(K, r), N) slots per
    node. Draws come from a NumPy generator seeded once from the hook's own torch generator (the
    training's batches and noise are untouched).

    Attributes:
        population: N, the declared population's subgraph slots.
        batch_size: m, slots drawn per step without replacement.
        terms: k = min(N(K, r), N), the slots one node occupies.
    """

    population: int
    batch_size: int
    terms: int
    _rng: np.random.Generator | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= self.population or not 1 <= self.terms <= self.population:
            raise ValueError(
                f"a node's terms ({self.terms}) and the batch ({self.batch_size}) must lie in 1..{self.population}"
            )

    @property
    def sample_rate(self) -> float:
        """m / N: the chance that one slot is drawn in a step."""
        return self.batch_size / self.population

    def draw(self, included: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(multiples of C [m], terms drawn [m]) of one step: +ρ for an included canary, −(ρ − own)
        for an excluded one (module docstring).

        Args:
            included: whether each canary is in the training set (bool).
            generator: seeds the law's NumPy generator on the first call.

        Returns:
            The multiples of C (float64) and the terms each canary contributed (int64).

        Shapes:
            included: [m]
            return: ([m], [m])
        """
        if self._rng is None:
            self._rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
        count = included.numel()
        drawn = self._rng.hypergeometric(self.terms, self.population - self.terms, self.batch_size, size=count)
        own = self._rng.random(count) * self.terms < drawn
        inside = included.numpy()
        multiples = np.where(inside, drawn, -(drawn - own)).astype(np.float64)
        contributed = np.where(inside, drawn, drawn - own).astype(np.int64)
        return torch.from_numpy(multiples), torch.from_numpy(contributed)

    def matches(self, record: dict, steps: int) -> bool:
        """Whether a spec's mechanism record is Theorem 1 over this many steps.

        Args:
            record: a mechanism record of the spec.
            steps: the run's DP-SGD steps.

        Returns:
            Whether ``record`` is Theorem 1's ``SensitivityMixtureGaussian`` over ``steps`` steps.
        """
        return record.get("mechanism") == ACCOUNTED_MECHANISM and int(record.get("steps", -1)) == steps

    def describe(self) -> dict[str, Any]:
        """The law's record: its name and parameters."""
        return {"law": LAW, "population": self.population, "batch_size": self.batch_size, "terms": self.terms}
