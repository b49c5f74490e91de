r"""White-box Dirac gradient canaries for DP-SGD: the design, the coins, the scores and the verdict
(issue 25, item 1; Nasr et al., USENIX Security 2023, "Tight auditing of differentially private machine
learning"; Steinke, Nasr & Jagielski, NeurIPS 2023, "Privacy auditing with one (1) training run").

The insertion itself — canary gradients of norm exactly C joining each batch by the law the
run's accountant assumes for one unit (DP-SGD's Poisson rate; a DP-GNN node's N(K, r) subgraph
terms, :mod:`defenses.dpgnn.canaries`), the observations of every iterate — is
:class:`dpaudit.training.dpsgd.DiracCanaries`, the part the guarantee rests on. This module decides what
it is given, and reads the finished game (the defenses' workflow
:mod:`dpaudit.app.workflows.gradient_canary`, and :class:`dpaudit.whitebox.GradientCanaries` for
any DP-SGD loop, share it):

* **Design** (:class:`DiracDesign`): m distinct parameter coordinates, seeded. A canary's score is the
  noisy gradient summed along its coordinate, so every real gradient on that coordinate is noise
  to the test. Coordinates are taken from the input layer's weights W_{rj} on the feature
  columns j that the fewest training rows use, in that order (random among ties): the real
  gradient ∂L/∂W_{rj} = Σ_i g_{ir} x_{ij} only has terms from rows using column j, and is
  exactly zero on a column no row uses (row normalisation and dropout keep a zero a zero).
  When m exceeds the input layer, the rest are uniformly random coordinates; without training
  inputs, all are. Without a module, the input layer's weight is the first trainable [out, F]
  matrix. The choice reads
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

* **Verdict** (:func:`summarise_game`): the (score, coin) pairs against the claimed ε (and μ)
  through :func:`dpaudit.auditing.estimators.audit_epsilon`, in the keys of the canary audit's
  JSON (:data:`dpaudit.auditing.results.CANARY_SCHEMA`).

Shapes: coordinates, coins, scores [m].
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dpaudit.auditing.estimators import audit_epsilon
from dpaudit.auditing.hypothesis import sgm_epsilon_lower_bound, sgm_hypothesis_test
from dpaudit.auditing.results import NO_POWER_NOTE, canary_verdict
from dpaudit.auditing.statistics import auc_or_none
from dpaudit.errors import ConfigurationError
from dpaudit.nn import SparseFeatures

if TYPE_CHECKING:
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
#: separates the canaries' sampling stream from the coins and the training seeds
_SAMPLING_STREAM = 0x73616D70


def column_usage(inputs) -> torch.Tensor:
    """[F] how many training rows have a non-zero in each feature column.

    Args:
        inputs: the training features, dense or :class:`~dpaudit.nn.SparseFeatures`.

    Returns:
        The count of each column (on CPU).

    Shapes:
        inputs: [rows, F]
        return: [F]
    """
    if isinstance(inputs, SparseFeatures):
        stored = inputs.col[inputs.values != 0]
        return torch.bincount(stored.cpu(), minlength=inputs.size(1))
    return (inputs != 0).sum(dim=0).cpu()


def input_layer(module: nn.Module, params: list[nn.Parameter], num_features: int) -> nn.Linear | None:
    """The first trainable linear layer (in module order) that reads ``num_features`` inputs.

    Args:
        module: the trained module.
        params: its trainable parameters.
        num_features: number of input features F.

    Returns:
        The layer, or ``None``.
    """
    trainable = {id(p) for p in params}
    for layer in module.modules():
        if isinstance(layer, nn.Linear) and id(layer.weight) in trainable and layer.in_features == num_features:
            return layer
    return None


def input_weight(module: nn.Module | None, params: list[torch.Tensor], num_features: int) -> torch.Tensor | None:
    """The input layer's weight [out, F]: :func:`input_layer`'s, or without a module the first
    of ``params`` shaped [out, ``num_features``] (a loop that hands its tensors, not its module).

    Args:
        module: the trained module, or ``None``.
        params: its trainable tensors.
        num_features: number of input features F.

    Returns:
        The weight, or ``None`` when there is none.

    Shapes:
        return: [out, F]
    """
    if module is not None:
        layer = input_layer(module, params, num_features)
        return None if layer is None else layer.weight
    return next((p for p in params if p.dim() == 2 and p.size(1) == num_features), None)


@dataclass
class DiracDesign:
    """``count`` canary coordinates (module docstring); call it as ``design(module, params,
    inputs)`` — the signature :class:`dpaudit.training.dpsgd.DiracCanaries` expects; ``module``
    and ``inputs`` may be ``None`` (module docstring). ``chosen`` records what the last call
    picked (counts only: the coordinates themselves are in the hook).

    Attributes:
        count: number of canaries (≥ 1).
        seed: seed of the coordinate choice.
        chosen: counts of what the last call picked.
    """

    count: int
    seed: int = 0
    chosen: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigurationError(f"--canaries must be an integer >= 1, got {self.count!r}")

    def __call__(self, module: nn.Module | None, params: list[nn.Parameter], inputs) -> torch.Tensor:
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
        weight = None if inputs is None else input_weight(module, params, int(inputs.size(1)))
        if weight is not None:
            offset = 0
            for p, size in zip(params, sizes):
                if p is weight:
                    break
                offset += size
            # weight [out, F] flattens row-major: W[r, j] is offset + r·F + j
            features = int(weight.size(1))
            rows, cols = np.divmod(np.arange(weight.numel()), features)
            usage = column_usage(inputs).numpy()[cols]
            # least-used columns first (never used: a zero real gradient), random among ties
            order = np.lexsort((rng.random(usage.size), usage))[: self.count]
            preferred, usage = offset + rows[order] * features + cols[order], usage[order]
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
        log.info(
            "gradient canaries: %d on the input layer (%d on columns no training row uses), %d random",
            preferred.size,
            self.chosen["on_unused_input_columns"],
            rest,
        )
        return torch.from_numpy(np.concatenate([preferred, others]))

    def describe(self) -> dict[str, Any]:
        """JSON-able description: type, norm, seed and :attr:`chosen`."""
        return {"type": "dirac", "norm": "the run's clipping bound C", "seed": self.seed, **self.chosen}


def fair_coins(seed: int, run: int) -> Callable[[int], np.ndarray]:
    """``coins(m)``: m independent fair coins of run ``run``, from a stream no other draw shares.

    Args:
        seed: the audit's seed.
        run: the run index.

    Returns:
        ``coins(m)`` → bool array of m fair coins.
    """

    def coins(m: int) -> np.ndarray:
        return np.random.default_rng([int(seed), int(run), _COIN_STREAM]).integers(0, 2, size=int(m)).astype(bool)

    return coins


def scores(canaries: DiracCanaries, observe: str = "iterates") -> np.ndarray:
    """[m] scores of a finished run, higher = "more likely included" (module docstring).

    Args:
        canaries: the canaries of a finished run.
        observe: ``"iterates"``, ``"centred"`` or ``"final"``.

    Returns:
        One score per canary.

    Raises:
        ConfigurationError: an unknown ``observe``, canaries never attached, or centred scores without ``centre=True``.
    """
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
    terms); ``None`` when nothing was included or no step ran.

    Args:
        canaries: the canaries of a finished run.

    Returns:
        The observed rate, or ``None``.
    """
    members = int(canaries.included.sum())
    if not members or not canaries.steps:
        return None
    return float(canaries.sampled[canaries.included].sum() / (members * canaries.steps * canaries.law.terms))


def sampling_seed(seed: int, run: int) -> int:
    """The seed of run ``run``'s canary-sampling generator: a stream apart from the coins and the
    training seeds.

    Args:
        seed: the audit's seed.
        run: the run index.

    Returns:
        The seed.
    """
    return int(np.random.SeedSequence([int(seed), int(run), _SAMPLING_STREAM]).generate_state(1)[0])


def summarise_game(
    scores,
    coins,
    *,
    delta: float,
    claimed_epsilon: float,
    claimed_mu: float | None = None,
    run_ids=None,
    confidence: float = 0.95,
    keep_scores: bool = True,
    notes: list[str] | None = None,
    hypothesis: bool = False,
    mechanism: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The canary audit's verdict keys for the pooled (score, coin) pairs of finished runs:
    ``epsilon_lower_bound``, ``certified_epsilon_lower_bound`` (Bonferroni over the estimators of
    :func:`dpaudit.auditing.estimators.audit_epsilon`), ``max_possible``, ``can_refute_claim``,
    ``verdict`` ("guarantee broken" when the certified ε exceeds ``claimed_epsilon`` or the
    certified μ exceeds ``claimed_mu`` — :data:`dpaudit.auditing.results.CLAIM_REFUTED` when the
    claim is a ``hypothesis``: the user's, a paper's or an unsound spec's —;
    :data:`dpaudit.auditing.results.ESTIMATE_VERDICT` when only the GDP estimate does), ``auc``
    and, with ``keep_scores``, the scores and coins.
    ``run_ids``: the run of each canary (canary i enters only run r(i)); ``notes`` is extended
    with the caveats met.

    ``mechanism`` (``noise_multiplier``, ``sample_rate``, ``steps``, ``max_grad_norm``: the SGM the
    claim names, σ from :func:`dpaudit.auditing.hypothesis.claimed_noise_multiplier`) adds
    ``hypothesis_test``: the one-run test of that mechanism on these scores
    (:func:`dpaudit.auditing.hypothesis.sgm_hypothesis_test`, at ``confidence``; one run only), and
    ``sgm_epsilon_lower_bound``: the ε lower bound if the run is SGM(σ, q, T) at the clipping bound
    for an unknown σ (:func:`dpaudit.auditing.hypothesis.sgm_epsilon_lower_bound`, the test
    inverted over σ; above the claim exactly when the test refutes it) — both reported beside the
    certified bound valid for any mechanism, never merged into it; a rejection the certified
    bound does not confirm gives the verdict :data:`dpaudit.auditing.results.MECHANISM_REFUTED`."""
    notes = [] if notes is None else notes
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(coins, dtype=bool).reshape(-1)
    run_ids = np.zeros(s.size, dtype=np.int64) if run_ids is None else np.asarray(run_ids).reshape(-1)
    estimators = None
    if y.all() or not y.any():  # one coin value: only the guess-count test applies
        estimators = ("one-run",)
        notes.append("every coin came up the same: the GDP and multi-run estimators need both values")
        if claimed_mu is not None:
            notes.append("the claim's μ-GDP is not tested: one-run-fdp-gaussian needs both coin values")
            claimed_mu = None
    audit = audit_epsilon(
        s,
        y,
        delta=min(delta, 0.5),
        confidence=confidence,
        run_ids=run_ids,
        estimators=estimators,
        claimed_epsilon=claimed_epsilon,
        claimed_mu=claimed_mu,
    )
    out: dict[str, Any] = {
        "epsilon_lower_bound": audit["epsilon_lower_bound"],
        "certified_epsilon_lower_bound": audit["certified_epsilon_lower_bound"],
        "delta": audit["delta"],
        "estimates": audit["estimates"],
        "estimators_skipped": audit.get("skipped", {}),
        "multiple_testing": audit["multiple_testing"],
        "max_possible": audit.get("max_possible"),
        "can_refute_claim": audit.get("can_refute_claim"),
        "claimed_mu": audit.get("claimed_mu"),
        "certified_mu_lower_bound": audit.get("certified_mu_lower_bound"),
        "auc": auc_or_none(s, y),
    }
    if audit.get("can_refute_claim") is False:
        notes.append(NO_POWER_NOTE)
    test = None
    if mechanism is not None:
        if np.unique(run_ids).size > 1:
            raise ConfigurationError("the hypothesis test reads one run's canaries: pass one run's scores")
        test = sgm_hypothesis_test(s, y, confidence=confidence, **mechanism).to_dict()
        out["hypothesis_test"] = test
        out["sgm_epsilon_lower_bound"] = sgm_epsilon_lower_bound(
            s,
            y,
            sample_rate=mechanism["sample_rate"],
            steps=mechanism["steps"],
            delta=min(delta, 0.5),
            max_grad_norm=mechanism.get("max_grad_norm", 1.0),
            confidence=confidence,
            claimed_noise_multiplier=mechanism["noise_multiplier"],
        ).to_dict()
    out["verdict"] = canary_verdict(audit, hypothesis=hypothesis, mechanism_test=test)
    if keep_scores:
        out["scores"] = [float(v) for v in s]
        out["included"] = [bool(v) for v in y]
        out["run_ids"] = [int(v) for v in run_ids]
    return out
