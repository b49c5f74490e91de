r"""The law by which one white-box gradient canary enters sound DPAR's training: a node owning
the most terms a node can own, each at its own Poisson rate (Dirac canaries of Steinke, Nasr &
Jagielski, NeurIPS 2023, driven by :class:`dpaudit.training.dpsgd.DiracCanaries`).

Under ``protocol=sound`` a node owns at most d = 1 + K + D training terms — its identity term,
Poisson-sampled at rate q, and ≤ K + D pair terms at rate q_p = λq — and removing it removes exactly
those terms (the removal lemma of :mod:`defenses.dpar`). The accountant is the mixture-of-Gaussians
pair over ρ ~ Bernoulli(q) * Binomial(d − 1, q_p) terms of norm C
(:func:`defenses.dpar.mechanism.sgd_step_mechanism`).

A canary is such a node with all d terms equal to :math:`C e_j` along its Dirac coordinate:
**included**, each step draws its identity coin at q and its d − 1 pair coins at q_p (independently
of the real batch, the other canaries and the noise) and adds ρ·C along :math:`e_j`; **excluded**,
it adds nothing. That is the add/remove pair the accountant bounds, with the aligned worst case its
dominating-pair theorem names, so the one-run game is valid against the DP-SGD mechanism's ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from defenses.dpar.mechanism import sgd_step_mechanism

#: the law's name in an audit's record
LAW = "dpar node terms"
COVERAGE = (
    "DPAR gradient canaries are nodes owning the most terms a node can own under protocol=sound (one identity "
    "term at rate q, K + D pair terms at rate lambda*q), each +C along its coordinate when present and absent "
    "when removed; the bound is valid against the DP-SGD mechanism's epsilon (the mixture-of-Gaussians pair)"
)


@dataclass
class NodeTerms:
    """A :class:`dpaudit.training.dpsgd.CanaryLaw` for sound DPAR (module docstring): ``terms`` d, the identity
    rate ``sample_rate`` q and the pair rate ``pair_rate`` q_p. Draws come from a NumPy generator
    seeded once from the hook's own torch generator (the training's batches and noise are untouched).

    Attributes:
        sample_rate: q, the identity term's Poisson rate.
        pair_rate: q_p, each pair term's Poisson rate.
        terms: d, the terms one node owns (one identity term and d − 1 pair terms).
    """

    sample_rate: float
    pair_rate: float
    terms: int
    _rng: np.random.Generator | None = field(default=None, repr=False)

    def draw(self, included: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(multiples of C [m], terms drawn [m]) of one step: ρ for an included canary, 0 for an
        excluded one.

        Args:
            included: whether each canary is in the training set (bool or 0/1).
            generator: seeds the law's NumPy generator on the first call.

        Returns:
            The multiples of C added along each canary's coordinate (float64) and the terms drawn (int64).

        Shapes:
            included: [m]
            return: ([m], [m])
        """
        if self._rng is None:
            self._rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
        count = included.numel()
        own = self._rng.random(count) < self.sample_rate
        pairs = self._rng.binomial(self.terms - 1, self.pair_rate, size=count)
        drawn = torch.from_numpy((own + pairs).astype(np.int64)) * included.long()
        return drawn.double(), drawn

    def matches(self, record: dict, steps: int) -> bool:
        """The spec's DP-SGD record accounts this run: the mixture-of-Gaussians pair over this law.

        Args:
            record: a mechanism record of the spec.
            steps: the run's DP-SGD steps.

        Returns:
            Whether ``record`` is the mixture-of-Gaussians ``SensitivityMixtureGaussian`` over this law's
            probabilities with ``steps`` steps.
        """
        if record.get("mechanism") != "SensitivityMixtureGaussian" or record.get("analysis") != "mixture-of-gaussians":
            return False
        law = sgd_step_mechanism(1.0, 1.0, self.terms, self.sample_rate, 1, self.pair_rate).probabilities
        recorded = record.get("probabilities") or ()
        return (
            int(record.get("steps", -1)) == steps
            and len(recorded) == len(law)
            and all(math.isclose(float(a), b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(recorded, law))
        )

    def describe(self) -> dict[str, Any]:
        """The law's record: its name and parameters."""
        return {"law": LAW, "sample_rate": self.sample_rate, "pair_rate": self.pair_rate, "terms": self.terms}
