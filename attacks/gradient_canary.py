r"""White-box Dirac gradient canaries for DP-SGD: the design, the coins and the scores (issue 25,
item 1; Nasr et al., USENIX Security 2023, "Tight auditing of differentially private machine
learning"; Steinke, Nasr & Jagielski, NeurIPS 2023, "Privacy auditing with one (1) training run").

The insertion itself — canary gradients of norm exactly C joining each batch by the law the
run's accountant assumes for one unit (DP-SGD's Poisson rate; a DP-GNN node's N(K, r) subgraph
terms, :mod:`defenses.dpgnn.canaries`), the observations of every iterate — is
:class:`dpaudit.training.dpsgd.DiracCanaries`, the part the guarantee rests on. This module decides what
it is given:

* **Design** (:class:`DiracDesign`): m distinct parameter coordinates. A canary's score is the
  noisy gradient summed along its coordinate, so every real gradient on that coordinate is noise
  to the test. Coordinates are taken from the input layer's weights W_{rj} on the feature
  columns j that the fewest training rows use, in that order (random among ties): the real
  gradient ∂L/∂W_{rj} = Σ_i g_{ir} x_{ij} only has terms from rows using column j, and is
  exactly zero on a column no row uses (row normalisation and dropout keep a zero a zero).
  When m exceeds the input layer, the rest are uniformly random coordinates. The choice reads
  the training inputs; that is allowed: in the one-run game the real data are fixed and known
  to the auditor, and only the canaries' coins are random (Steinke et al.).
* **Coins** (:func:`fair_coins`): independent fair coins from a generator of their own, drawn
  after the design (the hook calls the design first) and never shown to the defense.
* **Scores** (:func:`scores`): ``"iterates"`` — :math:`\sum_t \tilde g_t[k_i]`, what an auditor
  who sees every noisy gradient observes; an included canary adds C in each step it is sampled
  (about qT·C in all), an excluded one nothing, the noise N(0, Tσ²C²) either way, so the test
  meets the Gaussian trade-off curve of the run itself when q = 1. ``"centred"`` — the same
  minus q times the real examples' clipped gradient sum at each iterate (computable by a
  white-box auditor who knows the fixed real data): only the real gradients' sampling
  fluctuation is left, which matters on dense inputs (GAP's classifier), where no coordinate has
  a zero real gradient; it costs a pass over the training rows per step. ``"final"`` — the released
  weights only, :math:`\theta_0[k_i] - \theta_T[k_i]` (descent moves against the canary's
  gradient); weaker under Adam, whose steps are not proportional to the gradients.

Shapes: coordinates, coins, scores [m].
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from dpaudit.errors import ConfigurationError
from dpaudit.nn import SparseFeatures
from dpaudit.training.dpsgd import DiracCanaries

log = logging.getLogger(__name__)

#: what the auditor observes: every noisy gradient (raw, or centred on the real examples'
#: expected contribution), or the final weights only
OBSERVATIONS = ("iterates", "centred", "final")
SCORE_NAMES = {
    "iterates": "noisy gradient summed over all iterates along the canary coordinate",
    "centred": "noisy gradient minus q x the real examples' clipped sum, summed over all iterates along the canary "
    "coordinate",
    "final": "initial minus final weight along the canary coordinate",
}
#: separates the coin stream from every other stream seeded by the same (seed, run)
_COIN_STREAM = 0x67726164


def column_usage(inputs) -> torch.Tensor:
    """[F] how many training rows have a non-zero in each feature column."""
    if isinstance(inputs, SparseFeatures):
        stored = inputs.col[inputs.values != 0]
        return torch.bincount(stored.cpu(), minlength=inputs.size(1))
    return (inputs != 0).sum(dim=0).cpu()


def input_layer(module: nn.Module, params: list[nn.Parameter], num_features: int) -> nn.Linear | None:
    """The first trainable linear layer (in module order) that reads ``num_features`` inputs."""
    trainable = {id(p) for p in params}
    for layer in module.modules():
        if isinstance(layer, nn.Linear) and id(layer.weight) in trainable and layer.in_features == num_features:
            return layer
    return None


@dataclass
class DiracDesign:
    """``count`` canary coordinates (module docstring); call it as ``design(module, params,
    inputs)`` — the signature :class:`dpaudit.training.dpsgd.DiracCanaries` expects. ``chosen`` records
    what the last call picked (counts only: the coordinates themselves are in the hook)."""

    count: int
    seed: int = 0
    chosen: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigurationError(f"--canaries must be an integer >= 1, got {self.count!r}")

    def __call__(self, module: nn.Module, params: list[nn.Parameter], inputs) -> torch.Tensor:
        sizes = [p.numel() for p in params]
        total = int(sum(sizes))
        if self.count > total:
            raise ConfigurationError(
                f"{self.count} Dirac canaries need as many distinct coordinates; the audited module has {total} "
                "trainable parameters"
            )
        rng = np.random.default_rng([self.seed, len(sizes), total])
        preferred = np.zeros(0, dtype=np.int64)
        usage = np.zeros(0, dtype=np.int64)
        layer = input_layer(module, params, int(inputs.size(1)))
        if layer is not None:
            offset = 0
            for p, size in zip(params, sizes):
                if p is layer.weight:
                    break
                offset += size
            # weight [out, F] flattens row-major: W[r, j] is offset + r·F + j
            rows, cols = np.divmod(np.arange(layer.weight.numel()), layer.in_features)
            usage = column_usage(inputs).numpy()[cols]
            # least-used columns first (never used: a zero real gradient), random among ties
            order = np.lexsort((rng.random(usage.size), usage))[: self.count]
            preferred, usage = offset + rows[order] * layer.in_features + cols[order], usage[order]
        rest = self.count - preferred.size
        others = np.zeros(0, dtype=np.int64)
        if rest:
            pool = np.ones(total, dtype=bool)
            pool[preferred] = False
            others = rng.choice(np.flatnonzero(pool), size=rest, replace=False)
        self.chosen = {
            "canaries": self.count,
            "on_unused_input_columns": int((usage == 0).sum()),
            "on_input_layer": int(preferred.size),
            "largest_column_usage": int(usage.max()) if usage.size else None,
            "random_coordinates": int(rest),
            "trainable_parameters": total,
        }
        log.info("gradient canaries: %d on the input layer (%d on columns no training row uses), %d random",
                 preferred.size, self.chosen["on_unused_input_columns"], rest)  # fmt: skip
        return torch.from_numpy(np.concatenate([preferred, others]))

    def describe(self) -> dict[str, Any]:
        return {"type": "dirac", "norm": "the run's clipping bound C", "seed": self.seed, **self.chosen}


def fair_coins(seed: int, run: int) -> Callable[[int], np.ndarray]:
    """``coins(m)``: m independent fair coins of run ``run``, from a stream no other draw shares."""

    def coins(m: int) -> np.ndarray:
        return np.random.default_rng([int(seed), int(run), _COIN_STREAM]).integers(0, 2, size=int(m)).astype(bool)

    return coins


def scores(canaries: DiracCanaries, observe: str = "iterates") -> np.ndarray:
    """[m] scores of a finished run, higher = "more likely included" (module docstring)."""
    if observe not in OBSERVATIONS:
        raise ConfigurationError(f"observe must be one of {', '.join(OBSERVATIONS)}, got {observe!r}")
    if not canaries.attached:
        raise ConfigurationError("the gradient canaries were never inserted: no matching noisy DP-SGD run")
    if observe == "iterates":
        return canaries.iterate_scores.copy()
    if observe == "centred":
        if not canaries.centre:
            raise ConfigurationError("centred scores need DiracCanaries(..., centre=True)")
        return canaries.centred_scores.copy()
    return canaries.initial - canaries.final


def sampling_rate_seen(canaries: DiracCanaries) -> float | None:
    """The fraction of (included canary's term, step) pairs in which the term was drawn — the
    law's per-term rate in expectation (DP-SGD: q; DP-GNN: m/N for each of a node's N(K, r)
    terms); ``None`` when nothing was included or no step ran."""
    members = int(canaries.included.sum())
    if not members or not canaries.steps:
        return None
    return float(canaries.sampled[canaries.included].sum() / (members * canaries.steps * canaries.law.terms))
