r"""DPAR: decoupled GNN with node-level DP through DP approximate personalized PageRank.

Zhang et al., "DPAR: Decoupled Graph Neural Networks with Node-Level Differential Privacy"
(WWW 2024). Registered as ``dpar-em0`` (DP-APPR-EM option I), ``dpar-em1`` (option II),
``dpar-gm`` (DP-APPR-GM) and ``dpar-nodp`` (the same pipeline without any noise).

Pipeline of the ``paper`` protocol (Algorithms 1–3, Section 4, and the authors' reference code;
``sound`` changes the sources, the training rows and the defaults, below):

1. Node sampling: every node of the training pool joins the training graph G independently with
   probability q′ = 0.09 (Poisson sampling; G keeps only edges among sampled nodes; ≈ 210 nodes
   of the 2330-node cora_ml ``metis:9`` pool).
2. Training rows, in a public seed-determined order of the pool: the first M = 70 sampled nodes
   are *sources* and get a top-K DP-APPR row; **every other sampled node gets an identity row**
   (it aggregates only itself, value 1). All |S| rows are trained with their labels — the
   reference code's training set (the paper's text mentions only the M APPR rows).
3. APPR of the sources on G by ISTA (α, ρ, γ), vectorised over all sources
   (:func:`defenses.dpar.appr.appr_ista`), then DP-APPR-EM (Algorithm 1) or DP-APPR-GM
   (Algorithm 3): at most K non-zeros per row.
4. Column handling of Π (Algorithm 2, line 3; see the two protocols), then a 2-layer MLP f_θ
   (hidden 32, no biases, dropout 0.1 — the reference's network) is trained on
   :math:`z_v = \mathrm{softmax}(\sum_u \Pi_{vu} f_\theta(x_u))` (Eq. 1) with per-row gradient
   clipping C, Gaussian noise, Poisson batches (expected size B = 60) and Adam (lr 5e-3) for
   200 epochs of ⌈rows/B⌉ steps.
5. Inference (Eq. 4): :math:`Q^{(0)} = H,\ Q^{(p)} = (1-\alpha)\tilde D^{-1}\tilde AQ^{(p-1)} + \alpha H`,
   P = 2, α = 0.25, on the query graph with self-loops added (Ã = A + I, as the reference does).
   **Inference reads the query graph and is not private for its edges and features**: the
   guarantee covers the training graph only. ``power_steps = 0`` (P = 0) answers f_θ(x_v) from the
   queried node's own features alone, post-processing of the private weights as ``mlp-dp``'s
   answers are; the card then says ``inference.private: true``
   (:func:`~defenses.dpar.model.inference_card`), and a saved card claiming so with P ≥ 1 is refused.

Shapes: Π is stored row-sparse as ``columns`` [rows, K] (node ids, −1 = empty slot) and
``values`` [rows, K]; features x [n, F]; f_θ(x) [n, C]; a batch of b rows gathers [b, K, F].

Package layout: :mod:`~defenses.dpar.appr` (ISTA, DP-APPR mechanisms, the paper's formulas),
:mod:`~defenses.dpar.mechanism` (``paper``'s Π; ``sound``'s identity and pair terms; the
mixture of a node's removed terms), :mod:`~defenses.dpar.protocols` (schedule, noise calibration and spec of ``paper`` and
``sound`` side by side), :mod:`~defenses.dpar.training` (Algorithm 2), :mod:`~defenses.dpar.model`
(f_θ, Eq. 4, the released model), :mod:`~defenses.dpar.canaries` (how a white-box gradient canary
enters the ``sound`` run: a node owning d terms); this module holds the hyperparameters and the
defenses.

Two protocols (hyperparameter ``protocol``)
-------------------------------------------
``paper`` reproduces the authors' run and is recorded with ``sound: false``; every unaccounted
step is listed in the spec (:func:`plan_paper`):

* DP-APPR per Theorem 1 (EM; Gumbel scale C₂/ε) or Theorem 3 (GM; σ = √(2 ln(1.25/δ))C₁/ε), the M
  rows composed by the strong composition theorem as stated, candidate universe = the sampled
  nodes; DP-SGD per Theorem 2 read with sensitivity τ·C (noise std z·τ·C, z from the RDP of the
  Poisson-subsampled Gaussian at q = B/|S|, δ_sgd = δ/(2q′)); ε = q′·(ε_APPR + ε_SGD).
* Batch rate q = B/|S| and T = epochs·⌈|S|/B⌉ read from the private sample size |S| (the
  spec's DP-SGD record therefore publishes |S|: the paper's run is not release-neutral).
* Column normalisation as the reference code: every non-empty column of the full training
  matrix (APPR rows and identity rows) is rescaled to ℓ₁ norm exactly τ = 1 — up as well as
  down, so a C₂ = 0.001 EM entry becomes 1 (or its share of 1). (The paper's Algorithm 2 only
  clips columns down to τ; the reference rescales; scaling *up* is what gives the aggregated
  logits a usable magnitude.)

Why it is not a bound: q′·ε is not an amplification theorem (the correct one is
ln(1+q′(e^ε−1))); the τ-sensitivity argument treats the per-node gradient as linear in Π, while
per-row gradients pass through a non-linear model and are clipped to C each, so one node can change
every clipped gradient of a row that holds it, its own row and the identity rows — and column
normalisation couples every row of a column to the presence of every other entry in it; the GM
sensitivity of two non-negative ℓ₂-clipped vectors is √2·C₁, not C₁; the classic Gaussian σ
is valid only for ε < 1; an exponential mechanism whose candidate set (the sampled nodes)
depends on the data is not covered by its theorem.

``sound`` (default) proves a guarantee for the exact sampling and noise the code performs. It
keeps DPAR's pipeline — node sampling, DP-APPR-EM/GM rows, f_θ trained by DP-SGD on Eq. 1 rows,
Eq. 4 inference — but changes *what a training row is*, so that removing a node **removes** a
bounded number of training terms and changes no other (the paper's rows instead change when a
node they aggregate leaves, which forced the old sound analysis to d = D + K + 2 changed rows of
sensitivity 2C each under the loose joint-convexity bound: noise 65–117·C at ε = 8).

* Public schedule and universe: n̂ is the **declared** training-set size (:mod:`dpaudit.release`;
  the real pool size n is private at node level), n̄ = round(q′n̂). DP-APPR rows are computed
  over a universe of n̂ candidate slots fixed by the declaration
  (:func:`~defenses.dpar.mechanism.candidate_universe`): pool node i is slot i; a slot that holds
  no sampled pool node has utility 0 and is never trained on. A private run on a pool larger than
  n̂ is refused before any work.
* Sources are **M public slots** (a seeded random order of the n̂ slots, read before the data),
  not "the first M sampled nodes": the released Z has exactly M rows on every input, one per
  source slot (a slot holding no sampled node gets an all-zero utility row — its release is noise).
  Each entry lies in [0, C₂] (EM), resp. each row is a non-negative vector of ℓ₂ norm ≤ C₁ (GM), so
  each row mechanism is private against an *arbitrary* change of its row and the M rows compose:
  ``ExponentialMechanism(2C₂/β, count=K·M)`` (one-shot Gumbel top-K = K peeling EMs, Durfee &
  Rogers 2019), option II adds ``LaplaceMechanism(b, C₂, count=K·M)``, GM is
  ``GaussianMechanism(σ, √2·C₁, count=M)``. Neighbouring pools share this output space: removing u
  empties its slot, and the remaining nodes' slots are relabelled by a fixed bijection under which
  every mechanism here is equivariant (i.i.d. noise over slots, uniformly random source slots).
* Training terms (:func:`~defenses.dpar.mechanism.pair_terms`), given Z: post-processing of Z
  alone — option II drops entries whose noisy value is ≤ 0, then every column of Z keeps only its
  first D entries in row order. Then one **identity term** (label v, features v) per sampled pool
  node v, and one **pair term** (label s, features j) per kept entry (s, j) of Z whose source slot
  s and column j both hold sampled pool nodes. Each term is an Eq. 1 row with a single column of
  weight 1 (the decoupled loss: f_θ(x_j) predicts y_s). *Removal lemma:* conditioned on Z, the
  terms of G − u are exactly the terms of G that do not involve u. The cap and the gate read Z
  only, so no entry enters or leaves for another reason, and every other term has the same label,
  features and weight. The terms involving u number at most d = 1 + K + D: its identity term, the
  ≤ K pair terms of its own source row, and the ≤ D pair terms naming it (the cap).
  ``tests/defenses/dpar/test_dpar_cora_terms.py`` checks this on cora_ml by removing and adding real nodes
  (high-degree ones and the most-selected columns included); the bound is attained.
* DP-SGD: identity terms are Poisson-sampled at rate q and pair terms at q_p = λq (λ =
  ``pair_sample_share``), every term on its own coin; q = min(1, B/(n̄ + λMK)) and
  T = epochs·⌈(n̄ + λMK)/B⌉ from public counts; per-term clipping at C; the noisy sum is divided
  by the public expected batch. By the removal lemma a node's contribution to a step is
  Σ_{t∈S} g_t over the set S of its ≤ d terms that entered the batch, each ‖g_t‖ ≤ C, with S drawn
  independently of every other term, and all other terms identical: exactly the setting of the
  **mixture-of-Gaussians dominating pair** (Choquette-Choo et al. 2023;
  :class:`~dpaudit.accounting.SensitivityMixtureGaussian` with ``analysis="mixture-of-gaussians"``):
  (N(0, σ²), Σ_ρ p_ρ N(ρC, σ²)) and its reverse, ρ ~ Bernoulli(q) * Binomial(K + D, q_p)
  (:func:`~defenses.dpar.mechanism.sgd_step_mechanism`). A node with fewer terms is dominated by
  this law. Dropout masks are data-independent. Adaptive composition over the T steps and after Z.
* DP-APPR and DP-SGD compose in RDP/PLD to (ε_in, δ/q′) on the sample; Poisson node sampling
  amplifies it to (ln(1 + q′(e^{ε_in} − 1)), δ) (Balle et al. 2018, Thm 8; q′ = 1 is the identity).
  DP-APPR is calibrated to ``appr_budget_ratio`` of ε_in, then σ to the rest.
* Node sampling that keeps no node is not refused (a refusal would be an event outside the
  accountant): the run then takes its T steps on noise alone.

Defaults of ``sound`` (:data:`PROTOCOL_DEFAULTS`), fixed from public quantities, never from data:

* **The DP-APPR selection is at chance at node level, whatever its share.** The utility of a
  candidate is clipped to C₂ and every one of the M·K peels must hide an arbitrary change of its
  row, so a peel's odds ratio between a true neighbour and any other slot is at most e^{ε₀/2}
  (ε₀ = 2C₂/β). At ε = 8 and δ = 2·10⁻³ even the *whole* budget on M·K = 70 peels gives
  ε₀ = 0.48, an odds ratio ≤ 1.27, against n̂ ≈ 2,400 slots on cora_ml: a peel lands in a fixed set
  of 40 slots (a generous APPR support) with probability ≤ 2.1 %. Pair terms are therefore
  mostly (label, unrelated features) pairs, which cost privacy (each is one more term a node can
  own) and teach little. Hence the small APPR share (``appr_budget_ratio`` = 0.1), K = 1, D = 1
  (d = 3, the least that keeps a pair term) and pair terms sampled at a tenth of the identity rate
  (λ = 0.1: ρ is then ≤ 1 with probability ≥ 1 − 0.21·q², so σ is close to that of one term).
* q′ = 1: node sampling amplifies, but it also discards 1 − q′ of the training nodes, and the
  DP-SGD step already amplifies by its own Poisson sampling; training on every node wins.
* B = 256 and 30 epochs (the ``mlp-dp`` auto preset's schedule for a set of this size): fewer,
  larger steps put less noise on the mean gradient than the paper's B = 60 over 200 epochs.

The cost of the guarantee is thus mostly the graph: the sound model is an f_θ trained like a
DP-MLP on features (plus a few sampled pair terms), and the accuracy it adds over ``mlp-dp``
comes from Eq. 4 inference on the query graph — which, as said above, is not covered by the
guarantee. Numbers in ``benchmarks/results/dpar.md``; ``benchmarks/results/honest.md`` sets the
covered answers (P = 0) beside it, and ``benchmarks/results/covered_inference.md`` measures how
little a noisy, covered one-hop aggregate can add at node level (the own-row wall).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from torch_geometric.utils import subgraph

from defenses.baselines import defense_from_card
from defenses.dpar.appr import appr_ista, dp_appr_em, dp_appr_gm, exact_top_k
from defenses.dpar.canaries import NodeTerms
from defenses.dpar.mechanism import (
    affected_slots_bound,
    assemble_rows,
    candidate_universe,
    cap_column_occurrences,
    column_l1_norms,
    normalize_columns_l1,
    pair_terms,
    poisson_sample,
    sgd_step_mechanism,
    slots_of,
    training_matrix,
)
from defenses.dpar.model import INFERENCE_NOTE, DPARModel, DPARNet, build_network, inference_card, power_iteration
from defenses.dpar.protocols import (
    DPARPlan,
    NoisePlan,
    expected_rows,
    paper_unaccounted,
    plan_dpar,
    plan_paper,
    plan_sound,
    schedule,
)
from defenses.dpar.training import (
    clip_and_sum,
    clipped_gradient_sum,
    dropout_masks,
    per_row_gradients,
    train_rows,
)
from dpaudit.accounting.mechanisms import mechanism_from_record
from dpaudit.accounting.verify import refuse
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release import declared_train_size, require_declared
from dpaudit.training.constraints import (
    COUNT,
    DROPOUT,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    SAMPLE_RATE,
    WIDTH,
    Interval,
)
from dpaudit.training.defense import Defense, PrivateHyperparameters
from dpaudit.training.dpsgd import plan_mismatch
from dpaudit.training.private_selection import FEATURES_ONLY_SCORE, accounted_records
from dpaudit.training.registry import register_defense

__all__ = [
    "DPARHyperparameters",
    "DPARModel",
    "DPARNet",
    "DPARPlan",
    "INFERENCE_NOTE",
    "NoisePlan",
    "affected_slots_bound",
    "assemble_rows",
    "build_network",
    "candidate_universe",
    "cap_column_occurrences",
    "clip_and_sum",
    "clipped_gradient_sum",
    "column_l1_norms",
    "dropout_masks",
    "expected_rows",
    "inference_card",
    "normalize_columns_l1",
    "pair_terms",
    "paper_unaccounted",
    "per_row_gradients",
    "plan_dpar",
    "plan_paper",
    "plan_sound",
    "poisson_sample",
    "power_iteration",
    "schedule",
    "sgd_step_mechanism",
    "slots_of",
    "train_rows",
    "training_matrix",
    "defense_from_card",
    "appr_ista",
    "dp_appr_em",
    "dp_appr_gm",
    "exact_top_k",
    "NodeTerms",
    "mechanism_from_record",
    "refuse",
    "GraphDataset",
    "Defense",
    "PrivateHyperparameters",
    "plan_mismatch",
    "ConfigurationError",
    "DPAuditError",
    "FEATURES_ONLY_SCORE",
    "accounted_records",
    "register_defense",
    "declared_train_size",
    "require_declared",
    "Split",
    "PROTOCOL_DEFAULTS",
    "_DPAR",
    "_sound_run_mechanisms",
    "DPAREM0",
    "DPAREM1",
    "DPARGM",
    "DPARNoDP",
]

log = logging.getLogger(__name__)


#: Defaults that differ between the protocols: ``paper`` keeps the authors' (Section 4.3), ``sound``
#: has its own — see "Defaults of ``sound``" in the module docstring for why each is what it is.
PROTOCOL_DEFAULTS: dict[str, dict[str, float | int]] = {
    "paper": {
        "node_sample_rate": 0.09,
        "appr_budget_ratio": 0.5,
        "top_k": 2,
        "max_occurrences": 4,
        "batch_size": 60,
        "epochs": 200,
        "pair_sample_share": 1.0,
    },
    "sound": {
        "node_sample_rate": 1.0,
        "appr_budget_ratio": 0.1,
        "top_k": 1,
        "max_occurrences": 1,
        "batch_size": 256,
        "epochs": 30,
        "pair_sample_share": 0.1,
    },
}


@dataclass
class DPARHyperparameters(PrivateHyperparameters):
    """Defaults from DPAR Section 4 / 4.3 and the authors' reference code (τ: the reference's 1;
    D is dpaudit's). A field left at ``None`` takes its protocol's default
    (:data:`PROTOCOL_DEFAULTS`); a field set explicitly wins. The declared ranges are those
    :func:`_validate` enforces (``None`` before ``__post_init__`` fills the protocol's value).

    Attributes:
        protocol: ``sound`` (every step proven) or ``paper`` (the authors' accounting, ``sound: false``).
        appr_budget_ratio: share of the budget spent on DP-APPR (paper 0.5; sound 0.1).
        node_sample_rate: q′, Poisson node sampling of the training graph (paper 0.09; sound 1).
        num_sources: M, the DP-APPR rows (paper: the first M sampled nodes; sound: M public slots).
        top_k: K, entries kept per APPR row (paper 2; sound 1).
        alpha: teleport probability α (ISTA and inference).
        rho: ISTA's ℓ₁ regularisation ρ.
        ista_tol: γ, ISTA's termination slack.
        ista_max_iter: ISTA's iteration cap.
        clip_gm: C₁, DP-APPR-GM's ℓ₂ row clip.
        clip_em: C₂, DP-APPR-EM's entrywise clip.
        em_value_share: option II's share of the DP-APPR budget for the Laplace values.
        column_l1_bound: τ, the ℓ₁ norm every non-empty column of Π is rescaled to.
        max_occurrences: D, entries kept per column of Z (sound 1; unused by paper).
        pair_sample_share: λ, pair terms are Poisson-sampled at λ·q (sound 0.1; unused by paper).
        max_grad_norm: C, the per-term gradient clip.
        batch_size: B, the expected Poisson batch size (paper 60; sound 256).
        epochs: training epochs (paper 200; sound 30).
        lr: learning rate.
        hidden: hidden width of f_θ.
        dropout: dropout on f_θ's input and hidden layer.
        bias: whether f_θ's linear layers have biases.
        power_steps: P, the power-iteration steps of Eq. 4 at inference.
        self_loops: add self-loops to the query graph at inference.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "appr_budget_ratio": [FRACTION, None],
        "node_sample_rate": [SAMPLE_RATE, None],
        "num_sources": [COUNT],
        "top_k": [COUNT, None],
        "alpha": [FRACTION],
        "rho": [POSITIVE],
        "ista_tol": [NON_NEGATIVE],
        "ista_max_iter": [COUNT],
        "clip_gm": [POSITIVE],
        "clip_em": [POSITIVE],
        "em_value_share": [FRACTION],
        "column_l1_bound": [POSITIVE],
        "max_occurrences": [COUNT, None],
        "pair_sample_share": [Interval(float, 0, 1, closed="right"), None],
        "max_grad_norm": [POSITIVE],
        "batch_size": [COUNT, None],
        "epochs": [COUNT, None],
        "lr": [POSITIVE],
        "hidden": [WIDTH],
        "dropout": [DROPOUT],
        "bias": [bool],
        "power_steps": [NON_NEGATIVE_INT],
        "self_loops": [bool],
    }

    appr_budget_ratio: float | None = None
    """share of the budget spent on DP-APPR (paper 0.5; sound 0.1)"""
    node_sample_rate: float | None = None
    """q′, Poisson node sampling of the training graph (paper 0.09; sound 1)"""
    num_sources: int = 70
    """M: DP-APPR rows (paper: the first M sampled nodes; sound: M public slots)"""
    top_k: int | None = None
    """K (paper 2; sound 1)"""
    alpha: float = 0.25
    """teleport (ISTA and inference)"""
    rho: float = 1e-4
    """ISTA ℓ₁ regularisation"""
    ista_tol: float = 1e-4
    """γ, ISTA termination slack"""
    ista_max_iter: int = 1000
    """ISTA's iteration cap per source node"""
    clip_gm: float = 0.01
    """C₁"""
    clip_em: float = 0.001
    """C₂"""
    em_value_share: float = 0.5
    """option II: share of the DP-APPR budget for the Laplace values"""
    column_l1_bound: float = 1.0
    """τ: every non-empty column of Π is rescaled to this ℓ₁ norm (paper)"""
    max_occurrences: int | None = None
    """D: entries kept per column of Z (sound; paper 4 is unused; sound 1)"""
    pair_sample_share: float | None = None
    """λ: pair terms are Poisson-sampled at λ·q (sound 0.1; paper unused)"""
    max_grad_norm: float = 1.0
    """C"""
    batch_size: int | None = None
    """B, expected Poisson batch size (paper 60; sound 256)"""
    epochs: int | None = None
    """paper 200; sound 30"""
    lr: float = 0.005
    """f_θ's learning rate (DP-Adam)"""
    hidden: int = 32
    """f_θ's hidden width"""
    dropout: float = 0.1
    """on the input and hidden layer of f_θ (reference code)"""
    bias: bool = False
    """the reference's linear layers have no bias"""
    power_steps: int = 2
    """P of Eq. 4"""
    self_loops: bool = True
    """add self-loops to the query graph at inference (reference code)"""

    def __post_init__(self):
        for name, value in PROTOCOL_DEFAULTS.get(self.protocol, PROTOCOL_DEFAULTS["sound"]).items():
            if getattr(self, name) is None:
                setattr(self, name, value)


class _DPAR(Defense):
    """Shared pipeline; subclasses fix the DP-APPR ``variant`` (em0, em1, gm or exact)."""

    unit = "node"
    family = "DPAR"
    relative_cost = 3.0
    epoch_settings = ("epochs",)
    hyperparameters_class = DPARHyperparameters
    variant: ClassVar[str] = "em0"
    selection_score = FEATURES_ONLY_SCORE
    #: ``sound`` varies f_θ's optimiser, schedule and width around its public defaults (lr 0.005,
    #: 30 epochs, hidden 32) — never q′, K, D or the declared size, which fix the output space and
    #: the accounting
    selection_grid = ({}, {"lr": 0.01}, {"epochs": 15}, {"hidden": 64})

    def selection_run_mechanisms(self, num_features: int, declared_train: int | None, delta: float) -> list:
        declared = require_declared(declared_train, f"{self.name} (sound)", "use select=none")
        hyperparameters = json.dumps(dataclasses.asdict(self.hp), sort_keys=True)
        return list(_sound_run_mechanisms(type(self), hyperparameters, self.epsilon, delta, declared))

    @property
    def protocol_name(self) -> str:
        return "paper" if self.paper_protocol else "sound"

    def plan(
        self,
        delta: float,
        *,
        declared_pool: int | None = None,
        sampled: int | None = None,
        recorded: dict | None = None,
    ) -> DPARPlan:
        """This run's plan (:func:`~defenses.dpar.protocols.plan_dpar`): ``sound`` from the
        declared pool size n̂, ``paper`` from the sampled count |S|; ``recorded`` when re-planning."""
        return plan_dpar(
            self.variant,
            self.hp,
            self.protocol_name,
            self.epsilon if self.private else math.inf,
            delta,
            declared_pool=declared_pool,
            sampled=sampled,
            recorded=recorded,
        )

    def declared_pool(self, dataset: GraphDataset, split: Split) -> int:
        """n̂ for the ``sound`` universe and schedule: the declared training-set size. A private run
        without one is refused, and so is a pool larger than declared (the declaration, which the
        output space and schedule are fixed by, would be false) — both before any work. At ε = ∞
        nothing is accounted and the real pool may stand in."""
        pool = len(split.train)
        declared = declared_train_size(dataset, split)
        if not self.private:
            return pool if declared is None or declared < pool else declared
        declared = require_declared(
            declared, f"{self.name} (sound)", "use protocol=paper (the authors' schedule, sound: false)"
        )
        if pool > declared:
            raise DPAuditError(
                f"{self.name}: the training pool has more nodes than the declared training-set size {declared}; the "
                "DP-APPR output space and the schedule are fixed by that declaration, so it must bound the pool"
            )
        return declared

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> DPARModel:
        hp = self.hp  # in its declared ranges since construction (check_hyperparameter_ranges)
        protocol = self.protocol_name
        device = self.device
        # sound: everything public is planned before the private data is read
        plan = self.plan(delta, declared_pool=self.declared_pool(dataset, split)) if protocol == "sound" else None
        generator = torch.Generator().manual_seed(self.seed)  # public: the source slots' order
        # the privacy noise (Gumbel/Laplace/Gaussian, dropout, DP-SGD; CPU: CUDA draws the same) and the
        # private Poisson sampling (nodes, then batches): the noise source's (dpaudit.training.noise);
        # seeded mode continues the seed's generator, as before
        noise_generator = self.noise.torch(self.seed + 1)

        # 1. Poisson node sampling of the training graph (pool ids 0..n_train-1). An empty sample is
        #    not refused (that would be an event outside the accountant): training is then noise only.
        train = split.train
        n_train = len(train)
        train_edges = split.edge_index_for(dataset, "train")
        train_edges, _ = subgraph(train, train_edges, relabel_nodes=True, num_nodes=dataset.num_nodes)
        if protocol == "sound":  # the M source slots: a public random order of the n̂ slots (seed only)
            source_slots = torch.randperm(plan.universe, generator=generator)[: hp.num_sources]
            sampler = self.noise.torch(generator)
            sampled = poisson_sample(n_train, hp.node_sample_rate, sampler)
        else:  # the first M sampled nodes in a random order of the pool
            priority = torch.randperm(n_train, generator=generator)
            sampler = self.noise.torch(generator)
            sampled = poisson_sample(n_train, hp.node_sample_rate, sampler)
            sampled = sampled[torch.argsort(priority[sampled])]
        graph_edges, _ = subgraph(sampled, train_edges, relabel_nodes=True, num_nodes=n_train)
        if plan is None:  # paper: the schedule of the private sample size, as the authors run it
            plan = self.plan(delta, sampled=len(sampled))
        noise = plan.noise
        # 2. Sources and the DP-APPR candidate slots (sound: public slots; paper: the first M sampled).
        universe = candidate_universe(protocol, sampled, n_train, plan.universe)
        column_position = slots_of(universe, n_train)[sampled].numpy()  # sampled-graph node → slot
        if protocol == "sound":
            local = torch.full((n_train,), -1, dtype=torch.long)
            local[sampled] = torch.arange(len(sampled))
            slot_node = universe[source_slots]
            source_local = torch.where(slot_node >= 0, local[slot_node.clamp(min=0)], -1)
        else:
            source_local = torch.arange(min(hp.num_sources, len(sampled)))
        # 3. APPR of the sources on the sampled graph, then DP-APPR over the universe's slots (a
        #    source slot without a sampled node gets an all-zero row: its release is noise alone).
        present = (source_local >= 0).nonzero().view(-1).numpy()
        appr = appr_ista(
            graph_edges, len(sampled), source_local[present].numpy(), hp.alpha, hp.rho, hp.ista_tol, hp.ista_max_iter
        )
        appr = (
            sp.csr_matrix(
                (np.ones(len(present)), (present, np.arange(len(present)))), shape=(len(source_local), len(present))
            )
            @ appr
        )
        slots = len(universe)
        if self.variant == "gm":
            cols, vals = dp_appr_gm(
                appr, column_position, slots, hp.top_k, hp.clip_gm, noise.gm_sigma, noise_generator, device
            )
        elif self.variant in ("em0", "em1"):
            option = 1 if self.variant == "em0" else 2
            cols, vals = dp_appr_em(
                appr,
                column_position,
                slots,
                hp.top_k,
                hp.clip_em,
                noise.gumbel_scale,
                option,
                noise.laplace_scale,
                noise_generator,
                device,
            )
        else:
            cols, vals = exact_top_k(appr, column_position, hp.top_k, device)
        # 4. The training rows: sound — identity and pair terms (post-processing of Z, a node's terms
        #    leave with it); paper — Π with the reference's column handling, slots → pool ids.
        if protocol == "sound":
            row_nodes, cols, vals = pair_terms(
                cols,
                vals,
                source_slots,
                universe,
                sampled,
                n_train,
                max_occurrences=hp.max_occurrences,
                gate_on_values=self.variant == "em1",
            )
        else:
            row_nodes, cols, vals = training_matrix(
                cols, vals, sampled, hp.num_sources, universe, n_train, bound=hp.column_l1_bound
            )
        m = int((source_local >= 0).sum())

        # 5. Train f_θ on every row (Algorithm 2).
        arch = {
            "type": "dpar-mlp",
            "in_dim": dataset.num_features,
            "hidden": hp.hidden,
            "out_dim": dataset.num_classes,
            "dropout": hp.dropout,
            "bias": hp.bias,
        }
        module = build_network(arch).to(device)
        # index the full feature matrix with global ids (no copy of the training rows' features)
        x = dataset.data.x.to(device, torch.float32)
        global_cols = torch.where(cols >= 0, train.to(device)[cols.clamp(min=0)], -1)
        labels = dataset.data.y[train[row_nodes]].to(device)
        train_rows(
            module,
            x,
            global_cols,
            vals.to(torch.float32),
            labels,
            noise_std=noise.sgd_noise_std,
            max_grad_norm=hp.max_grad_norm if noise.clip_gradients else None,
            sample_rate=plan.sample_rate,
            expected_batch=plan.expected_batch,
            pair_start=len(sampled) if protocol == "sound" else len(row_nodes),
            pair_rate=plan.pair_rate,
            canary_law=NodeTerms(plan.sample_rate, plan.pair_rate, affected_slots_bound(hp.max_occurrences, hp.top_k))
            if protocol == "sound"
            else None,
            steps=plan.steps,
            lr=hp.lr,
            generator=sampler,
            noise_generator=noise_generator,
            progress=self.name,
        )
        card = {"inference": inference_card(hp.power_steps, noise.privacy.is_private), "dpar": plan.card()}
        model = DPARModel(module, arch, hp.alpha, hp.power_steps, noise.privacy, card, hp.self_loops)
        model.record["dpar"] = {  # measured on the private pool: the owner's record only
            "sampled_nodes": len(sampled),
            "appr_rows": m,
            "identity_rows": len(sampled) - m if protocol == "paper" else len(sampled),
            "trained_rows": len(labels),
            "pi_entries": int((cols >= 0).sum()),
        }
        return model

    @classmethod
    def replan(cls, card: dict, privacy) -> list[dict] | None:
        """Re-derive the spec's records from the card's public inputs through :meth:`plan`
        (hyperparameters, protocol, target ε, δ; ``sound``: the declared training-set size in
        ``privacy.public_facts``; ``paper``: the sampled count its recorded rate and normaliser
        imply — the paper reads it from the data, so it is checked for consistency, not derived),
        and refuse a ``dpar`` card section that is not that plan. ``None`` for files written
        before plans were recorded (no ``expected_batch`` in the section)."""
        section = card.get("dpar")
        if not isinstance(section, dict) or "expected_batch" not in section:
            return None
        defense = defense_from_card(cls, card, privacy)
        try:
            if defense.protocol_name == "sound":
                plan = defense.plan(
                    privacy.delta, declared_pool=privacy.public_facts.get("num_train"), recorded=section
                )
            else:
                sampled = round(float(section["expected_batch"]) / float(section["batch_sample_rate"]))
                plan = defense.plan(privacy.delta, sampled=sampled, recorded=section)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise ConfigurationError(f"{cls.name} cannot re-plan this card: {type(exc).__name__}: {exc}") from None
        mismatch = plan_mismatch(section, plan.card(), "dpar")
        if mismatch:
            raise refuse(f"the card's plan is not what its hyperparameters give: {mismatch}")
        return list(plan.noise.privacy.mechanisms)


@functools.lru_cache(maxsize=256)
def _sound_run_mechanisms(cls, hyperparameters: str, epsilon: float, delta: float, declared: int) -> tuple:
    """A sound DPAR run's mechanisms: the plan its ``_fit`` makes from the declared training-set
    size n̂ (:meth:`_DPAR.plan`), rebuilt from the plan's records without the identity
    amplification (:func:`~dpaudit.training.private_selection.accounted_records`). Cached: a plan
    calibrates three noise scales (seconds each), and the per-run ε search, the selection and
    the load-time re-plan ask for the same candidates at the same ε_run; the key is every public
    input of the plan."""
    defense = cls(epsilon=epsilon, delta=delta, device="cpu", **json.loads(hyperparameters))
    records = accounted_records(defense.plan(delta, declared_pool=declared).noise.privacy.mechanisms)
    return tuple(mechanism_from_record(record) for record in records)


@register_defense
class DPAREM0(_DPAR):
    """DPAR with DP-APPR-EM option I (Gumbel top-K, values 1/K) + DP-SGD; node-level DP.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "dpar-em0"
    summary = "DPAR with DP-APPR-EM option I (top-K by Gumbel noise, values 1/K) + DP-SGD; node-level DP"
    variant = "em0"


@register_defense
class DPAREM1(_DPAR):
    """DPAR with DP-APPR-EM option II (Gumbel top-K, Laplace-noised values) + DP-SGD; node-level DP.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "dpar-em1"
    summary = "DPAR with DP-APPR-EM option II (Gumbel top-K, Laplace-noised values) + DP-SGD; node-level DP"
    variant = "em1"


@register_defense
class DPARGM(_DPAR):
    """DPAR with DP-APPR-GM (Gaussian-noised clipped APPR, top-K) + DP-SGD; node-level DP.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "dpar-gm"
    summary = "DPAR with DP-APPR-GM (Gaussian-noised clipped APPR, top-K) + DP-SGD; node-level DP"
    variant = "gm"


@register_defense
class DPARNoDP(_DPAR):
    """The DPAR pipeline without privacy (exact top-K APPR, no clipping or noise).

    Args:
        epsilon: must be ``inf`` (non-private).
        delta: unused at ε = ∞.
        seed: seeds initialisation, dropout and the held-out split.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "dpar-nodp"
    unit = None
    relative_cost = 2.5
    summary = "DPAR pipeline without privacy (exact top-K APPR, no clipping or noise)"
    variant = "exact"
