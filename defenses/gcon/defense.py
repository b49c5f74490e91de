r"""GCON: edge-level DP graph convolution by objective perturbation (Wei et al., Algorithm 1).

Training (Algorithm 1):

1. **Feature encoder** (Section IV-C1, Algorithm 3): a 2-layer MLP
   :math:`X \to H_{mlp}(XW_1) \to \cdot W_2` trained on the training nodes' features and labels
   only (public under edge DP — Section III), giving :math:`d_1`-dimensional features
   :math:`\bar X = H_{mlp}(XW_1^\star)`. With ``pseudo_labels`` the objective uses all n nodes
   (:math:`n_1 = n`, Appendix Q), the non-training ones labelled by the encoder's argmax — a
   function of features and public labels only; under ``sound`` only while the training labels
   are scarce, n₀ < n/2 (:func:`~defenses.gcon.protocols.uses_pseudo_labels`).
2. Every row of :math:`\bar X` is L2-normalised (Line 2; all-zero rows stay zero, norm ≤ 1 is
   all Lemma 2 needs).
3. **Propagation** on the training graph: :math:`\tilde A = D^{-1}(A + I)`,
   :math:`Z = \frac1s(R_{m_1}\bar X \oplus \dots \oplus R_{m_s}\bar X)` (Eqs. 9–11), APPR by
   repeated sparse products and PPR (m = ∞) by a sparse Richardson iteration.
4. **Objective perturbation** (Eq. 13): minimise
   :math:`L_{priv}(\Theta) = \frac1{n_1}\sum_i\sum_j\ell(z_i^T\theta_j; y_{ij}) + \frac\Lambda2\|\Theta\|_F^2
   + \frac1{n_1}B\odot\Theta + \frac{\Lambda'}2\|\Theta\|_F^2` with Λ′, β from Theorem 1
   (Eqs. 17–24) and the columns of B drawn by Algorithm 2, on a **schedule fixed in advance**
   (:func:`~defenses.gcon.mechanism.descent_schedule`): an L-BFGS + Newton warm start (float64, no
   convergence requirement), projected onto Theorem 1's ball :math:`\|\theta_j\| \le c_\theta`,
   then T gradient steps of size 1/L, T computed from public constants only. Then
   :math:`\|\Theta_T - \Theta_{priv}\|_F \le (1-\mu/L)^T 2\sqrt c\,c_\theta` on Theorem 1's good
   event, for every dataset; no convergence check, no refusal after training starts.
5. **Approximate Minima Perturbation** (Iyengar et al., "Towards Practical Differentially Private
   Convex Optimization", IEEE S&P 2019, Algorithm 1): release :math:`\Theta_T + \mathcal N(0, \sigma_2^2 I)`
   with :math:`\sigma_2` covering twice that residual bound
   (:func:`~defenses.gcon.mechanism.amp_sensitivity` says why 2, and why no δ is added).

Privacy: Theorem 1 gives (ε, δ)-edge-DP for the *exact* minimiser :math:`\Theta_{priv}` (add/remove
one undirected edge). Theorem 1 is calibrated to ((1 − s)ε, (1 − s)δ) and AMP's Gaussian to
(sε, sδ) with s = ``amp_share`` (default 0.01); the ledger records a :class:`RecordedGuarantee`
whose (ε, δ) is *re-derived* from the computed Λ, Λ′, β, c_θ through Lemmas 7–9
(:meth:`TheoremOneParameters.guarantee`) and one for AMP's Gaussian (exact analytic bound,
Balle & Wang 2018, Theorem 8), composed by adding ε's and δ's; the total is checked to be ≤
the target. The encoder and the pseudo-labels read no edge. See :mod:`defenses.gcon.mechanism` for the check of the paper's algebra and the
readings chosen where it is loose (Λ raised by Eq. 22 is the Λ used in the objective; PPR
computed as R_M; 1/s kept at inference; the exact-minimiser assumption, closed by the fixed
schedule + AMP). The plan — every number the spec and the card hold — is computed from public
inputs by :mod:`defenses.gcon.plan`, shared by ``fit``, :meth:`GCON.replan` (the load-time check)
and :meth:`GCONModel.verify_privacy`.

**Public card vs owner's record.** ``card["gcon"]`` holds the plan only (n₁, d, c, Ψ, Theorem
1's constants, the schedule, AMP's σ; under ``paper`` the grid and the chosen configuration).
What the warm start measured on the edges (objective, gradient norms, iterations, restarts,
whether it reached its tolerance) and the validation accuracy of a ``paper`` selection go to
``model.record["gcon"]`` (``provenance.json``), never to ``model.json`` or the spec's notes.

**Protocols.** ``sound`` (default): the defaults of :class:`GCONHyperparameters`, every choice
either read from what edge-level DP leaves public or charged in the ledger — the encoder
(architecture, its best-validation epoch) and the pseudo-labels read node features and labels
only, which edge-level DP does not protect, and no edge (tested: changing only edges changes
neither); the inference restart α_I is set by the public rule of :mod:`defenses.gcon.homophily`
from a label-agreement rate of the edges released with Laplace noise at ε_h = hε (pure, in the
ledger); what answers a query — Θ or the public encoder alone — is chosen by a count of Θ's
correct validation answers released with discrete Laplace noise at ε_s = sε
(:mod:`defenses.gcon.head_selection`, edge sensitivity 2); Theorem 1 and AMP get (1 − h − s)ε;
``sound: true``. ``paper``: Appendix Q's protocol — every
configuration of ``grid`` (default :data:`PAPER_GRID`) is trained with the same mechanism and
the best by validation accuracy is released; that selection is not accounted, so the spec is
``sound: false`` and lists it (each candidate alone spends ≤ the target, as the paper reports). What each protocol changes is laid out in :mod:`defenses.gcon.protocols`.

Package layout: :mod:`~defenses.gcon.mechanism` (the math: losses, propagation, Lemma 2,
Theorem 1, Algorithm 2, the solver, AMP — pure functions), :mod:`~defenses.gcon.model` (the
released-model kind and inference features), :mod:`~defenses.gcon.protocols` (``sound`` vs
``paper``, the grid), :mod:`~defenses.gcon.homophily` and :mod:`~defenses.gcon.head_selection`
(``sound``'s two accounted counts and the public rules over them), and this module (hyperparameters and the registered defense).

**What inference reveals.** The released parameters (encoder + Θ) are edge-DP; predictions
are not automatically. ``inference="private"`` (default, Eq. 16 / Algorithm 4 lines 1–4)
computes node v's features from v and its *direct neighbours* with restart α_I: the answer for
v depends on v's own edges (and the features of its neighbours) in the clear. The paper
calls this edge-DP because the querier is assumed to be v, who knows its own edges; answered
to anyone else (e.g. an attacker querying both endpoints of a candidate edge) it leaks those
edges, so the card marks inference as *not private*. ``inference="public"`` (Algorithm 4 lines
5–7) recomputes the full Z of Eq. (11) on the queried graph and is only appropriate when that
graph is public.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from defenses.gcon.head_selection import (
    INFORMATIVE_SHARE,
    HeadSelection,
    count_noise_std,
    head_mechanism,
    head_share,
    informative,
    release_head_selection,
    theta_correct,
)
from defenses.gcon.homophily import (
    HomophilyRelease,
    chance_agreement,
    encoder_dropout_rule,
    heterophilous,
    homophily_mechanism,
    homophily_share,
    label_agreement_counts,
    mean_degree,
    release_homophily,
    smoothing_offered,
    training_restart,
)
from defenses.gcon.mechanism import (
    check_alpha,
    descend,
    gcon_features,
    make_loss,
    normalized_adjacency,
    parse_steps,
    perturbed_objective,
    project_columns,
    sample_objective_noise,
    solve_perturbed_objective,
)
from defenses.gcon.model import (
    INFERENCE_MODES,
    INFERENCE_NOTES,
    OWN_ANSWER_AUDIENCE,
    GCONModel,
    encode_features,
    encoder_input,
    query_features,
    steps_to_json,
)
from defenses.gcon.plan import ConfigurationPlan, plan_configuration
from defenses.gcon.protocols import (
    GRID_KEYS,
    PAPER_GRID,
    Config,
    default_config,
    grid_configs,
    parse_grid,
    selection_unaccounted,
    selects_encoder_checkpoint,
    uses_pseudo_labels,
)
from dpaudit.accounting import PrivacyLedger, PrivacySpec
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.feature_graph import FeatureSmoothing, smoothing_fits
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError
from dpaudit.nn import ACTIVATIONS, MLP
from dpaudit.nn import features as sparse_features
from dpaudit.progress import steps as progress_steps
from dpaudit.release.deployments import READ_IN_CLEAR, inference_entry
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import (
    COUNT,
    DROPOUT,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    WIDTH,
    Interval,
    Options,
)
from dpaudit.training.defense import Defense, PrivateHyperparameters, check_hyperparameter_ranges
from dpaudit.training.registry import register_defense

__all__ = [
    "GCON",
    "GCONHyperparameters",
    "GCONModel",
    "GRID_KEYS",
    "PAPER_GRID",
    "encode_features",
    "parse_grid",
    "check_alpha",
    "descend",
    "gcon_features",
    "make_loss",
    "normalized_adjacency",
    "parse_steps",
    "perturbed_objective",
    "project_columns",
    "sample_objective_noise",
    "solve_perturbed_objective",
    "INFERENCE_MODES",
    "INFERENCE_NOTES",
    "query_features",
    "steps_to_json",
    "ConfigurationPlan",
    "plan_configuration",
    "Config",
    "default_config",
    "grid_configs",
    "selection_unaccounted",
    "selects_encoder_checkpoint",
    "PrivacyLedger",
    "PrivacySpec",
    "GraphDataset",
    "Defense",
    "PrivateHyperparameters",
    "inference_entry",
    "ConfigurationError",
    "MLP",
    "sparse_features",
    "register_defense",
    "seed_everything",
    "Split",
    "_validate",
    "_Trained",
]

log = logging.getLogger(__name__)


#: a restart probability α of Eq. (9) (:func:`~defenses.gcon.mechanism.check_alpha`)
RESTART = Interval(float, 0, 1, closed="right")


@dataclass
class GCONHyperparameters(PrivateHyperparameters):
    """GCON's hyperparameters. Defaults (``protocol=sound``): m = 2, d₁ = 16, tanh encoder, Λ = 0.2,
    ξ = 0.1, n₁ = n, MSL, chosen once from small sweeps on Cora (Planetoid; not a benchmark
    dataset here) and fixed — a public rule, never tuned on the validation data of the graph
    being trained on (issue 41: d₁ = 16 against 8, 32, 64 on Cora at ε = 1 and 4), α = 0.6. α_I
    comes from the public rule of :mod:`defenses.gcon.homophily` applied to a noisy label
    agreement of the edges (``adapt="homophily"``, charged in the ledger); with ``adapt="none"``
    it is the fixed ``alpha_inference`` (``None``: α).

    ``protocol=paper`` reproduces Appendix Q's protocol *inside* ``fit``: every configuration of
    ``grid`` is trained (its own encoder, Theorem 1 noise, AMP) and the one with the best
    validation accuracy (ties: first in grid order) is released. The selection reads the private
    graph through the validation predictions and is not accounted (the paper: "we do not account
    for the privacy cost of hyperparameter tuning"), so the spec is ``sound: false`` and lists it.
    The default grid is :data:`PAPER_GRID` (Appendix Q for s = 1, minus Adam's learning rate:
    5,760 configurations, 1,920 solves, about 2–4 min per fit on one CPU core for Cora-ML).
    Fields that the grid sets are ignored under ``paper``; the others (encoder training, ω, ξ,
    the schedule, AMP share, inference mode) apply to every candidate.

    ReLU encoder features are non-negative, so every inner product z^T μ_j is positive and a strongly
    regularised linear model drifts toward the largest (pseudo-)class; tanh avoids that (sweep on Cora).

    Attributes:
        encoder_hidden: d₁, the encoder's hidden width = feature dimension (Appendix Q: 8, 16, 64).
        encoder_epochs, encoder_lr, encoder_weight_decay, encoder_dropout, encoder_act: encoder
            training (full batch Adam on the training nodes, cross-entropy). Under ``sound`` with
            ``adapt="homophily"`` the density rule of :mod:`defenses.gcon.homophily` replaces
            ``encoder_dropout`` by 0 on a graph whose released mean degree is ≥ 20 (issue 50;
            post-processing of the statistic's noisy edge count, no further ε). Under ``sound`` the
            encoder reads raw features or their public kNN feature-graph smoothing, whichever
            validates better (:meth:`GCON._choose_encoder`; no edge read), and on a graph the
            heterophily rule flags α = α_I = 1 and queries are answered by the encoder alone.
        pseudo_labels: n₁ = n (all nodes, pseudo-labelled by the encoder) instead of n₁ = n₀.
            Under ``sound`` only while the training labels are scarce (n₀ < n/2,
            :func:`~defenses.gcon.protocols.uses_pseudo_labels`: the split's sizes, public).
        alpha: restart probability α of Eq. (9) (Appendix Q: 0.2, 0.4, 0.6, 0.8).
        steps: propagation steps m₁,…,m_s as text, e.g. ``"2"``, ``"1,5"``, ``"inf"`` (PPR).
        alpha_inference: α_I of Eq. (16); ``None`` means α.
        loss: ``"msl"`` (MultiLabel Soft Margin, Eq. 27) or ``"huber"`` (pseudo-Huber, Eq. 28).
        huber_delta: δ_l of Eq. (28).
        regularization: Λ of Eq. (2) (raised by Eq. 22 when too small for the privacy budget).
        omega: budget allocator ω of Theorem 1.
        xi: ξ > 0 of Eq. (22).
        inference: ``"private"`` (Eq. 16) or ``"public"`` (Algorithm 4, public test graph).
        residual_tol: target for the proven residual bound ‖Θ_T − Θ_priv‖_F: the schedule runs the
            fewest gradient steps T whose bound (1 − μ/L)^T·2√c·c_θ is ≤ this (at most
            ``descent_steps``); AMP's sensitivity is twice the bound reached.
        descent_steps: the cap on T. A cap below what ``residual_tol`` needs releases with the
            larger bound and correspondingly more AMP noise (decided from public constants; never
            a refusal).
        amp_share: share s of ε and of δ given to AMP's Gaussian; Theorem 1 gets (1 − s)(ε, δ).
        adapt: ``protocol=sound`` only. ``"homophily"`` (default): α_I is set by the public rule
            of :mod:`defenses.gcon.homophily` from a noisy label agreement of the edges (Laplace
            counts, pure ε_h = hε, in the ledger; the ``alpha_inference`` field is not used);
            ``"none"``: the fixed ``alpha_inference``, nothing spent.
        homophily_share: share h of ε spent on that statistic; Theorem 1 and AMP then share (1 − h)ε
            (10 %: the heterophily rule needs ĥ on graphs of a few hundred edges, issue 50).
        head_share: ``protocol=sound`` with ``adapt="homophily"`` only: share s of ε spent on the
            noisy count of Θ's correct validation answers that chooses between Θ and the public
            encoder as the answer head (:mod:`defenses.gcon.head_selection`, issue 50); Theorem 1
            and AMP then share (1 − h − s)ε.
        max_iter: the warm start's budget: L-BFGS iterations per (re)start and at most this many
            Newton steps (utility only: the residual bound holds whatever the warm start returns).
        grid: ``protocol=paper`` only: ``"key=v1,v2; key=..."`` over encoder_hidden, alpha, steps
            (``+`` joins several steps of one candidate, e.g. ``1+5``), pseudo_labels, loss
            (``msl`` or ``huber:δ_l``), regularization and alpha_inference (``alpha`` = α). Keys
            left out take the field's value.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "encoder_hidden": [WIDTH],
        "encoder_epochs": [NON_NEGATIVE_INT],
        "encoder_lr": [POSITIVE],
        "encoder_weight_decay": [NON_NEGATIVE],
        "encoder_dropout": [DROPOUT],
        "encoder_act": [Options(*ACTIVATIONS)],
        "pseudo_labels": [bool],
        "alpha": [RESTART],
        "steps": [str],  # parse_steps: "2", "1,5", "inf"
        "alpha_inference": [RESTART, None],
        "loss": [Options("msl", "huber")],
        "huber_delta": [NON_NEGATIVE],  # loss=huber refuses 0 itself
        "regularization": [POSITIVE],
        "omega": [FRACTION],
        "xi": [POSITIVE],
        "inference": [Options(*INFERENCE_MODES)],
        "residual_tol": [POSITIVE],
        "descent_steps": [NON_NEGATIVE_INT],
        "amp_share": [FRACTION],
        "adapt": [Options("homophily", "none")],
        "homophily_share": [FRACTION],
        "head_share": [FRACTION],
        "max_iter": [COUNT],
        "grid": [str],  # parse_grid, under protocol=paper
    }

    encoder_hidden: int = 16
    encoder_epochs: int = 200
    encoder_lr: float = 0.01
    encoder_weight_decay: float = 5e-4
    encoder_dropout: float = 0.5
    encoder_act: str = "tanh"
    pseudo_labels: bool = True
    alpha: float = 0.6
    steps: str = "2"
    alpha_inference: float | None = None
    loss: str = "msl"
    huber_delta: float = 0.2
    regularization: float = 0.2
    omega: float = 0.9
    xi: float = 0.1
    inference: str = "private"
    residual_tol: float = 1e-8
    descent_steps: int = 10000
    amp_share: float = 0.01
    adapt: str = "homophily"
    homophily_share: float = 0.1
    head_share: float = 0.1
    max_iter: int = 5000
    grid: str = PAPER_GRID


def _validate(hp: GCONHyperparameters) -> dict:
    """Every field in its declared range (``_parameter_constraints``: a card's hyperparameters are
    checked as a constructed defense's are), the one rule across fields no constraint can say
    (a pseudo-Huber loss needs δ_l > 0), and what the text fields say: α, α_I, the steps and,
    under ``protocol=paper``, the grid."""
    check_hyperparameter_ranges("gcon", hp)
    if hp.loss == "huber" and not hp.huber_delta > 0:
        raise ConfigurationError(f"gcon huber_delta must be > 0 with loss=huber, got {hp.huber_delta}")
    alpha = float(hp.alpha)
    alpha_inference = alpha if hp.alpha_inference is None else float(hp.alpha_inference)
    steps = parse_steps(hp.steps)
    grid = parse_grid(hp.grid) if hp.protocol == "paper" else {}
    if homophily_share(hp) + head_share(hp) >= 1.0:
        raise ConfigurationError(
            f"gcon homophily_share + head_share must be < 1 (Theorem 1 needs a share of ε), got "
            f"{hp.homophily_share} + {hp.head_share}"
        )
    return {"alpha": alpha, "alpha_inference": alpha_inference, "steps": steps, "grid": grid}


@dataclass
class _Trained:
    """Θ released for one configuration, its plan (public) and the warm start's diagnostics (private)."""

    theta: np.ndarray
    plan: ConfigurationPlan
    diagnostics: dict
    n1: int
    d: int


@register_defense
class GCON(Defense):
    r"""GCON (see the module docstring). ``fit`` runs Algorithm 1 on a fixed schedule with
    Approximate Minima Perturbation; ``protocol=paper`` adds Appendix Q's selection on validation
    data (unaccounted).

    Privacy of one trained configuration, at target (ε, δ) and AMP share s:

    * Θ_priv, the exact minimiser of Eq. (13), is ((1−s)ε, (1−s)δ)-edge-DP by Theorem 1
      (Λ′, β calibrated to (1−s)ε, (1−s)δ; the (ε, δ) is re-derived through Lemmas 7–9), and its
      proof bounds the density ratio on the event ‖θ_j‖ ≤ c_θ for all j, charging the rest to δ;
    * the released point Θ_T is a warm start projected onto that ball followed by T gradient steps
      of size 1/L, T fixed from public constants (:func:`~defenses.gcon.mechanism.descent_schedule`),
      so ‖Θ_T − Θ_priv‖_F ≤ b_T = (1 − μ/L)^T·2√c·c_θ on that event for every dataset;
    * Θ_T + N(0, σ₂²I) is released with σ₂ = z·2b_T, z calibrated so that the Gaussian spends
      ≤ sε at δ₂ = sδ (Iyengar et al. 2019, AMP; :func:`~defenses.gcon.mechanism.amp_sensitivity`);
    * the ledger composes both (ε's and δ's add), spent ≤ target. The Gaussian is recorded in
      (ε, δ) by the exact analytic bound (Balle & Wang 2018), since the RDP conversion floors at
      the small ε₂ = sε.

    Nothing in that chain depends on whether a solver converged: a fit either is refused before
    any work (bad hyperparameters) or releases.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.

    Raises:
        ConfigurationError: invalid hyperparameters (at construction, before any training).
    """

    name = "gcon"
    unit = "edge"
    family = "GCON"
    relative_cost = 1.2
    summary = "GCON (Wei et al.): linear APPR/PPR graph convolution with objective perturbation + AMP, edge-level DP"
    hyperparameters_class = GCONHyperparameters
    selection_refusal = (
        "select=private composes each run's Rényi-DP curve (Papernot & Steinke 2022, Theorem 2), and GCON's "
        "objective perturbation is proven (ε, δ)-edge-DP only (Wei et al., Theorem 1): an (ε, δ) guarantee with δ > 0 "
        "bounds no Rényi divergence, so a run has no curve to compose (its validation score would be free at edge level)"
    )

    #: the homophily statistic's output (the Laplace-noised ĥ) and the α_I the public rule computes
    #: from it: accounted in the ledger, so they may differ between neighbouring graphs
    released_statistics = (
        "card.gcon.homophily.estimate",
        "card.gcon.homophily.alpha_inference",
        "card.gcon.config.alpha_inference",
        "config.alpha_inference",
        "card.gcon.homophily.noisy_total",
        "card.gcon.homophily.encoder_dropout",
        "card.gcon.homophily.alpha_train",
        "config.alpha",
        "config.head",
        "card.gcon.homophily.head",
        "card.gcon.homophily.heterophilous",
        "card.gcon.encoder_input.chosen",
        "card.gcon.encoder_input.smoothing",
        "card.gcon.encoder_input.dense_override",
        "config.feature_smoothing",
        "card.gcon.head_selection.noisy_theta_correct",
        "card.gcon.head_selection.head",
        "card.gcon.head_selection.heterophilous",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _validate(self.hp)  # bad hyperparameters fail at construction, before any training

    def _train_encoder(
        self,
        dataset: GraphDataset,
        split: Split,
        hidden: int | None = None,
        dropout: float | None = None,
        smoothing: FeatureSmoothing | None = None,
    ) -> MLP:
        """Algorithm 3 on the training nodes' features and labels (no edge is read). Under
        ``sound`` the epoch with the best validation accuracy of the encoder itself is kept
        (validation features and labels only: public at edge level, so the choice is free);
        ``paper`` and a split without validation nodes keep the last epoch. ``dropout`` (default
        the ``encoder_dropout`` field) is the density rule's under ``sound``; ``smoothing`` the
        encoder's input (:meth:`_encoder_input`, ``None``: raw features)."""
        x_input = self._encoder_input(dataset, split, smoothing)
        return self._fit_encoder(dataset, split, x_input, hidden, dropout)[0]

    def _encoder_input(self, dataset: GraphDataset, split: Split, smoothing: FeatureSmoothing | None) -> torch.Tensor:
        """The encoder's input over every node (:func:`~defenses.gcon.model.encoder_input`): the
        smoothing runs over the nodes of the graph each phase reads — all nodes on a transductive
        split, each part's own nodes on an inductive one. Features only: no edge is read."""
        x = dataset.data.x.to(self.device)
        parts = (split.train, split.val, split.test) if split.inductive else None
        return encoder_input(smoothing, x, parts)

    def _input_candidates(self, dataset: GraphDataset, split: Split) -> list[FeatureSmoothing | None]:
        """The encoder inputs ``sound`` chooses between, fixed in advance: raw features, and
        :class:`~dpaudit.data.feature_graph.FeatureSmoothing` when :func:`smoothing_fits` the
        declared sizes and the split has validation nodes to choose by. ``paper``: raw only."""
        candidates: list[FeatureSmoothing | None] = [None]
        if (
            selects_encoder_checkpoint(self.hp.protocol)
            and len(split.val) > 0
            and smoothing_fits(dataset.num_nodes, dataset.num_features)
        ):
            candidates.append(FeatureSmoothing())
        return candidates

    def _choose_encoder(self, dataset: GraphDataset, split: Split, hidden: int, dropout: float | None = None):
        """One encoder per input candidate (:meth:`_input_candidates`, each from the same seed); the
        one with the best validation accuracy is kept (ties: the earlier candidate, raw first).
        Features and public labels only: free at edge level, and the same on every edge-neighbour.

        Returns:
            ``(encoder, smoothing, x_input, choice)``: ``choice`` is the card's public entry.
        """
        best = None
        scores = []
        for smoothing in self._input_candidates(dataset, split):
            seed_everything(self.seed)
            x_input = self._encoder_input(dataset, split, smoothing)
            encoder, accuracy = self._fit_encoder(dataset, split, x_input, hidden, dropout)
            scores.append({"input": "raw" if smoothing is None else "smoothed", "val_accuracy": accuracy})
            if best is None or (accuracy is not None and accuracy > best[3]):
                best = (encoder, smoothing, x_input, -1.0 if accuracy is None else accuracy)
        encoder, smoothing, x_input, _ = best
        choice = {
            "chosen": "raw" if smoothing is None else "smoothed",
            "smoothing": None if smoothing is None else smoothing.to_dict(),
            "candidates": scores,
            "reads_edges": False,
            "rule": "the encoder's best validation accuracy (public features and labels; ties: raw)",
        }
        return encoder, smoothing, x_input, choice

    def _fit_encoder(
        self,
        dataset: GraphDataset,
        split: Split,
        x_input: torch.Tensor,
        hidden: int | None = None,
        dropout: float | None = None,
    ) -> tuple[MLP, float | None]:
        """:meth:`_train_encoder` on a given input; also returns the kept epoch's validation
        accuracy (``None`` when no epoch is selected)."""
        hp = self.hp
        data = dataset.data
        width = hp.encoder_hidden if hidden is None else int(hidden)
        rate = hp.encoder_dropout if dropout is None else float(dropout)
        encoder = MLP(dataset.num_features, [width], dataset.num_classes, rate, hp.encoder_act)
        encoder = encoder.to(self.device)
        # Sparse raw features stay sparse (first layer CSR × dense, input dropout on the non-zeros).
        x = sparse_features(x_input[split.train.to(x_input.device)].float().to(self.device))
        y = data.y[split.train].to(self.device)
        select = selects_encoder_checkpoint(hp.protocol) and len(split.val) > 0
        if select:
            x_val = sparse_features(x_input[split.val.to(x_input.device)].float().to(self.device))
            y_val = data.y[split.val].to(self.device)
        best_accuracy, best_state = -1.0, None
        opt = torch.optim.Adam(encoder.parameters(), lr=hp.encoder_lr, weight_decay=hp.encoder_weight_decay)
        for _ in progress_steps(hp.encoder_epochs, "gcon encoder", unit="epoch"):
            encoder.train()
            opt.zero_grad()
            F.cross_entropy(encoder(x), y).backward()
            opt.step()
            if select:
                encoder.eval()
                with torch.no_grad():
                    accuracy = float((encoder(x_val).argmax(dim=1) == y_val).float().mean())
                if accuracy > best_accuracy:
                    best_accuracy, best_state = accuracy, copy.deepcopy(encoder.state_dict())
        if best_state is not None:
            encoder.load_state_dict(best_state)
        return encoder.eval(), (best_accuracy if best_state is not None else None)

    def _homophily_share(self) -> float:
        """h of :mod:`defenses.gcon.homophily` when this fit spends it (``sound`` with
        ``adapt="homophily"``), else 0."""
        return homophily_share(self.hp)

    def _train_theta(
        self,
        z: torch.Tensor,
        y_rows: torch.Tensor,
        config: Config,
        c: int,
        delta: float,
        stream: tuple[int, ...],
        epsilon: float | None = None,
    ) -> _Trained:
        r"""Steps 4–5 of Algorithm 1 for one configuration: the plan (public inputs only), the
        objective noise, the warm start, the fixed schedule and AMP.

        Shapes: z [n₁, s·d₁] (float64, rows of Eq. 11), y_rows [n₁, c] (one-hot); Θ [s·d₁, c]."""
        hp = self.hp
        z_np, y_np = z.cpu().numpy(), y_rows.cpu().numpy()
        n1, d = z_np.shape
        epsilon = self.epsilon if epsilon is None else epsilon
        plan = plan_configuration(epsilon, delta, c, d, n1, config, hp)
        loss = make_loss(config.loss, c, config.huber_delta)
        noise = np.zeros((d, c))
        if plan.theorem1 is not None:
            rng = self.noise.numpy([self.seed, 0x6C0, *stream])  # the privacy noise source's
            noise = sample_objective_noise(d, c, plan.theorem1.beta, rng)
            if plan.theorem1.regularization > config.regularization:
                log.debug(
                    "gcon: Λ raised from %g to %g by Eq. (22)", config.regularization, plan.theorem1.regularization
                )
        # warm start aimed at the gradient norm that alone would give the target residual (utility
        # only); max_iter bounds its Newton polish as well as each L-BFGS run
        warm_tol = plan.strong_convexity * hp.residual_tol
        theta, info = solve_perturbed_objective(
            z_np, y_np, loss, plan.strong_convexity, noise, warm_tol, hp.max_iter, max_newton=min(50, hp.max_iter)
        )
        diagnostics = {"warm_start": {"method": "scipy L-BFGS-B + Newton polish, float64", **asdict(info)}}
        if plan.amp is not None:
            schedule = plan.amp.schedule
            theta = descend(project_columns(theta, schedule.radius), z_np, y_np, loss, noise, schedule)
            _, grad = perturbed_objective(theta, z_np, y_np, loss, schedule.strong_convexity, noise)
            diagnostics["grad_norm_after_schedule"] = float(np.linalg.norm(grad))
            amp_rng = self.noise.numpy([self.seed, 0xA3, *stream])
            theta = theta + amp_rng.normal(0.0, plan.amp.sigma, size=theta.shape)
        return _Trained(theta, plan, diagnostics, n1, d)

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> GCONModel:
        hp = self.hp
        checked = _validate(hp)
        data = dataset.data
        n, c = dataset.num_nodes, dataset.num_classes
        train = split.train.to(self.device)
        y_all = data.y.to(self.device)
        # 3. propagation on the graph training may see (Eqs. 9–11)
        adj = normalized_adjacency(split.edge_index_for(dataset, "train").to(self.device), n)
        configs = grid_configs(hp, checked) if self.paper_protocol else [default_config(hp, checked)]
        val = split.val.to(self.device)
        adj_val = None
        if self.paper_protocol:
            if len(split.val) == 0:
                raise ConfigurationError("gcon protocol=paper selects on validation data: the split has none")
            adj_val = normalized_adjacency(split.edge_index_for(dataset, "val").to(self.device), n)

        best = None  # (val_accuracy, config, encoder, trained)
        selection: HeadSelection | None = None
        homophily: HomophilyRelease | None = None
        homophily_counts = None
        encoders: dict[int, tuple] = {}
        features: dict[tuple, torch.Tensor] = {}
        trained_cache: dict[tuple, _Trained] = {}
        for index, config in enumerate(
            tqdm(configs, desc="gcon grid", leave=False, disable=True if len(configs) == 1 else None)
        ):
            # 1–2. encoder (public data only) and L2-normalised encoded features, once per width
            if config.encoder_hidden not in encoders:
                encoders.clear()
                features.clear()
                # the encoder's input: raw or feature-graph smoothed, by its own validation
                # accuracy under sound (features and public labels only); raw under paper
                encoder, smoothing, x_input, input_choice = self._choose_encoder(dataset, split, config.encoder_hidden)
                x_enc = encode_features(encoder, x_input)
                with torch.no_grad():
                    pseudo = encoder(x_input.float()).argmax(dim=1)
                pseudo[train] = y_all[train]
                encoders[config.encoder_hidden] = (encoder, x_enc, pseudo, smoothing, x_input, input_choice)
            encoder, x_enc, pseudo, smoothing, x_input, input_choice = encoders[config.encoder_hidden]
            run_config = config  # the configuration the propagation runs with (α may follow ĥ)
            share = 0.0 if self.paper_protocol else self._homophily_share()
            if share > 0:
                # the accounted statistic (Laplace counts over the training graph's edges, labels
                # = training labels + encoder pseudo-labels: no edge read but the counted ones)
                counts = label_agreement_counts(split.edge_index_for(dataset, "train"), pseudo.cpu())
                # q: the agreement of random pairs of the training graph's nodes (labels only, public)
                chance = chance_agreement(pseudo[train] if split.inductive else pseudo, c)
                rng = self.noise.numpy([self.seed, 0x40D])
                homophily = release_homophily(*counts, share * self.epsilon, rng, chance)
                homophily_counts = counts
                config = dataclasses.replace(config, alpha_inference=homophily.alpha_inference)
                # the density rule (issue 50): post-processing of the released edge count and the
                # public n; a dense graph's encoder is retrained without dropout (features and
                # labels only, no edge), and so is a flagged graph's, whose encoder alone answers
                degree = mean_degree(homophily.noisy_total, n)
                flagged = heterophilous(homophily.estimate, homophily.chance)
                dropout = encoder_dropout_rule(degree, hp.encoder_dropout, flagged)
                if flagged and smoothing_offered(degree) and dropout != hp.encoder_dropout:
                    # a flagged graph's encoder answers alone: its input is chosen again at the
                    # rule's dropout (features and public labels only, no edge)
                    encoder, smoothing, x_input, input_choice = self._choose_encoder(
                        dataset, split, config.encoder_hidden, dropout
                    )
                    input_choice["dropout"] = dropout
                    retrain, refresh = False, True
                elif smoothing is not None and not smoothing_offered(degree):
                    # a dense graph's encoder reads raw features (the density rule's second half:
                    # post-processing of the same released count; derived on reed98:year)
                    smoothing, x_input = None, self._encoder_input(dataset, split, None)
                    input_choice = {**input_choice, "chosen": "raw", "smoothing": None, "dense_override": True}
                    retrain, refresh = True, False
                else:
                    retrain, refresh = dropout != hp.encoder_dropout, False
                if retrain:
                    seed_everything(self.seed)
                    encoder = self._fit_encoder(dataset, split, x_input, config.encoder_hidden, dropout)[0]
                    refresh = True
                if refresh:
                    x_enc = encode_features(encoder, x_input)
                    with torch.no_grad():
                        pseudo = encoder(x_input.float()).argmax(dim=1)
                    pseudo[train] = y_all[train]
                    encoders[config.encoder_hidden] = (encoder, x_enc, pseudo, smoothing, x_input, input_choice)
                    features.clear()
                # the heterophily rule (issue 50): post-processing of ĥ; at or below the low knot the
                # propagation runs with α = 1 (Z = X̄), planned with the configured α's larger Ψ
                run_config = dataclasses.replace(
                    config, alpha=training_restart(homophily.estimate, chance, config.alpha)
                )
            key = (run_config.alpha, tuple(run_config.steps))
            if key not in features:
                with torch.no_grad():
                    features[key] = gcon_features(adj, x_enc, run_config.alpha, run_config.steps)
            # rows of the objective: the training nodes (n1 = n0), or every node visible in training
            # with encoder pseudo-labels (n1 = n; inductively only the training nodes are visible)
            if uses_pseudo_labels(config.pseudo_labels, hp.protocol, len(split.train), n, split.inductive):
                rows, labels = torch.arange(n, device=self.device), pseudo
            else:
                rows, labels = train, y_all
            y_rows = F.one_hot(labels[rows], c).double()
            # α_I changes inference only: one trained Θ serves every α_I of the same training config
            train_key = (
                config.encoder_hidden,
                key,
                config.pseudo_labels,
                config.loss,
                config.huber_delta,
                config.regularization,
            )
            if train_key not in trained_cache:
                trained_cache.clear()
                trained_cache[train_key] = self._train_theta(
                    features[key][rows],
                    y_rows,
                    config,
                    c,
                    delta,
                    (index,) if self.paper_protocol else (),
                    (1.0 - share - head_share(hp)) * self.epsilon,
                )
            trained = trained_cache[train_key]
            if not self.paper_protocol:
                best = (None, config, encoder, trained)
                if head_share(hp) > 0:
                    selection = self._select_head(dataset, split, x_enc, x_input, encoder, config, trained, homophily)
                break
            z_val = query_features(adj_val, x_enc, config, hp.inference)[val]
            pred = (z_val @ torch.as_tensor(trained.theta, device=self.device)).argmax(dim=1)
            accuracy = float((pred == y_all[val]).double().mean())
            if best is None or accuracy > best[0]:
                best = (accuracy, config, encoder, trained)
        val_accuracy, config, encoder, trained = best
        # sound: the encoder's input choice (public, reads no edge) and the α the propagation ran with
        run = None if self.paper_protocol else (input_choice, run_config.alpha)
        return self._release(
            dataset,
            delta,
            config,
            encoder,
            trained,
            val_accuracy,
            len(configs),
            homophily,
            homophily_counts,
            run,
            selection,
        )

    def _select_head(
        self,
        dataset: GraphDataset,
        split: Split,
        x_enc: torch.Tensor,
        x_input: torch.Tensor,
        encoder: MLP,
        config: Config,
        trained: _Trained,
        homophily: HomophilyRelease | None,
    ) -> HeadSelection:
        """The accounted answer-head choice of :mod:`defenses.gcon.head_selection`: the released
        Θ's correct Eq. (16) validation answers over the training graph (edge sensitivity 2),
        noised at ε_s = s·ε, against the public encoder's correct answers (no edge read)."""
        epsilon = head_share(self.hp) * self.epsilon if self.private else math.inf
        rng = self.noise.numpy([self.seed, 0x4EAD])
        flagged = homophily is not None and heterophilous(homophily.estimate, homophily.chance)
        val = split.val.to(self.device)
        why = None
        if split.inductive or len(val) == 0:
            why = "no validation node in the training graph"
        elif self.hp.inference != "private":
            why = "inference='public' propagates over several hops: one edge moves more than two answers"
        elif not informative(epsilon, len(val)):
            why = (
                f"the count's noise (std {count_noise_std(epsilon):.3g}) is above {INFORMATIVE_SHARE:.0%} of the "
                f"{len(val)} validation nodes: too noisy to tell the heads apart"
            )
        if why is not None:
            return release_head_selection(None, None, 0, epsilon, rng, flagged, why)
        y = dataset.data.y.to(self.device)
        counted = theta_correct(
            split.edge_index_for(dataset, "train"),
            dataset.num_nodes,
            x_enc,
            torch.as_tensor(trained.theta, device=self.device),
            config.alpha_inference,
            config.steps,
            val,
            y,
        )
        with torch.no_grad():
            encoder_correct = int((encoder(x_input[val].float()).argmax(dim=1) == y[val]).sum())
        return release_head_selection(counted, encoder_correct, len(val), epsilon, rng, flagged)

    def _release(
        self,
        dataset,
        delta,
        config: Config,
        encoder: MLP,
        trained: _Trained,
        val_accuracy,
        num_candidates: int,
        homophily: HomophilyRelease | None = None,
        homophily_counts: tuple[int, int] | None = None,
        run: tuple[dict, float] | None = None,
        selection: HeadSelection | None = None,
    ) -> GCONModel:
        hp = self.hp
        c = dataset.num_classes
        plan = trained.plan
        # public: the plan and what it was computed from (n1, d, c are public at edge level)
        gcon_card = {
            "n1": trained.n1,
            "d": trained.d,
            "c": c,
            "steps": steps_to_json(config.steps),
            **plan.card(),
            "config": config.to_dict(),
        }
        # the owner's: everything the warm start and the descent measured on the edges
        gcon_record = dict(trained.diagnostics)
        if homophily is not None:
            gcon_card["homophily"] = {
                "share": hp.homophily_share,
                **homophily.card(),
                "encoder_dropout": encoder_dropout_rule(
                    mean_degree(homophily.noisy_total, dataset.num_nodes),
                    hp.encoder_dropout,
                    heterophilous(homophily.estimate, homophily.chance),
                ),
            }
            gcon_record["homophily_counts"] = {"agree": homophily_counts[0], "total": homophily_counts[1]}
            if run is not None:
                gcon_card["homophily"]["alpha_train"] = run[1]
        if run is not None:
            gcon_card["encoder_input"] = run[0]
        if selection is not None:
            gcon_card["head_selection"] = {"share": hp.head_share, **selection.card()}
        unaccounted = []
        if self.paper_protocol:
            gcon_card["selection"] = {"grid": hp.grid, "candidates": num_candidates, "chosen": config.to_dict()}
            gcon_record["selection"] = {"val_accuracy": val_accuracy}
            unaccounted.append(selection_unaccounted(hp.grid, num_candidates))
        if not self.private:
            privacy = PrivacySpec.non_private("gcon at ε = ∞: the same pipeline without B, Λ′ and AMP noise")
            if unaccounted:
                privacy.notes.append("configuration selected on validation data (protocol=paper)")
        else:
            notes = [
                f"δ = {delta:g} ({'auto: a power of ten below 1/#edges' if str(self.delta_option) == 'auto' else 'given'})",
                "edge-level: neighbouring graphs differ by one undirected edge; node features and training labels "
                "are public (GCON Section III)",
                plan.note(),
            ]
            ledger = PrivacyLedger()
            if homophily is not None:
                notes.append(  # public constants only: ĥ and α_I are in card["gcon"]["homophily"]
                    "α_I set by the public rule of defenses.gcon.homophily from the label agreement of the edges ĥ, "
                    f"released with Laplace noise (scale {homophily.scale:.4g} on two counts of edge sensitivity 1) "
                    f"at pure ε_h = {homophily.epsilon:.4g}; Theorem 1 and AMP share the remaining ε"
                )
            if selection is not None:
                notes.append(
                    "the answer head (Θ or the public encoder) chosen by the count of Θ's correct validation answers, "
                    f"released with discrete Laplace noise (scale {selection.scale:.4g}, edge sensitivity 2) at pure "
                    f"ε_s = {selection.epsilon:.4g}"
                )
            for mechanism in plan.mechanisms():
                ledger.step(mechanism)
            if homophily is not None:
                ledger.step(homophily.mechanism())
            if selection is not None:
                ledger.step(selection.mechanism())
            privacy = ledger.spec(
                delta,
                "edge",
                target_epsilon=self.epsilon,
                notes=notes,
                accountant="GCON Theorem 1 + AMP analytic Gaussian, both (ε, δ) proven directly"
                + (" + Laplace counts (pure ε_h)" if homophily is not None else "")
                + (" + Laplace count (pure ε_s)" if selection is not None else "")
                + ", basic composition",
                unaccounted=unaccounted,
            )
        settings = {
            "encoder": {
                "in_dim": dataset.num_features,
                "hidden": [config.encoder_hidden],
                "out_dim": c,
                "act": hp.encoder_act,
            },
            "num_classes": c,
            "alpha": config.alpha if run is None else run[1],
            "alpha_inference": config.alpha_inference,
            "steps": steps_to_json(config.steps),
            "inference": hp.inference,
            "loss": config.loss,
        }
        if run is not None:
            settings["feature_smoothing"] = run[0]["smoothing"]
            if selection is not None:
                settings["head"] = selection.head
            elif homophily is not None:
                settings["head"] = "encoder" if heterophilous(homophily.estimate, homophily.chance) else "theta"
            else:
                settings["head"] = "theta"
        inference = inference_entry(
            private=privacy.is_private,
            training_graph=False,
            note=INFERENCE_NOTES[hp.inference],
            feature_change=READ_IN_CLEAR,  # Eq. (16) / Algorithm 4 read the queried graph in the clear
            training_audience=OWN_ANSWER_AUDIENCE if hp.inference == "private" else None,
        )
        card = {"inference": inference, "gcon": gcon_card}
        theta_t = torch.as_tensor(trained.theta, dtype=torch.float64, device=self.device)
        model = GCONModel(encoder, theta_t, settings, privacy, card)
        model.record["gcon"] = gcon_record
        return model

    @classmethod
    def replan(cls, card: dict, privacy) -> list[dict]:
        """The ledger records :func:`~defenses.gcon.plan.plan_configuration` — the function ``fit``
        trains with — gives for the card's public inputs: its hyperparameters, target ε, the spec's
        δ, the number of classes, and ``gcon.n1`` (public at edge level). The configuration is the
        hyperparameters' own under ``sound``; under ``paper`` the card's chosen one, which must be
        a point of the card's grid. d = s·d₁ follows from the configuration.

        Args:
            card: the saved model's public card.
            privacy: its privacy spec (δ read).

        Returns:
            The mechanism records: Theorem 1 and AMP (or the Ψ = 0 record), then the homophily statistic's when spent.

        Raises:
            ConfigurationError: the card lacks an input or holds an invalid one, or the chosen
                configuration is not a point of the grid.
        """
        try:
            # a card written before ``adapt`` existed (issue 41) spent nothing on the statistic
            # ... and one written before the head selection (issue 50) spent nothing on it
            hp = cls.hyperparameters_class(**{"adapt": "none", "head_share": 0.0, **card["hyperparameters"]})
            checked = _validate(hp)
            gcon = card["gcon"]
            if hp.protocol == "paper":
                chosen = dict(gcon["config"])
                config = Config(**{**chosen, "steps": parse_steps(chosen["steps"])})
                if config not in grid_configs(hp, checked):
                    raise ConfigurationError("the gcon card's chosen configuration is not a point of its grid")
            else:
                config = default_config(hp, checked)  # α_I (the statistic's) does not enter the plan
            num_classes, n1 = int(card["dataset"]["num_classes"]), int(gcon["n1"])
            target_epsilon = float(card["target_epsilon"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"gcon card cannot be re-planned: {type(exc).__name__}: {exc}") from None
        dim = len(config.steps) * config.encoder_hidden
        share, selection_share = homophily_share(hp), head_share(hp)
        plan = plan_configuration(
            (1.0 - share - selection_share) * target_epsilon, privacy.delta, num_classes, dim, n1, config, hp
        )
        mechanisms = plan.mechanisms()
        if share > 0 and math.isfinite(target_epsilon):
            mechanisms.append(homophily_mechanism(share * target_epsilon))
        if selection_share > 0 and math.isfinite(target_epsilon):
            mechanisms.append(head_mechanism(selection_share * target_epsilon))
        return [mechanism.describe() for mechanism in mechanisms]
