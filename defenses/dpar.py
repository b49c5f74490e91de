r"""DPAR: decoupled GNN with node-level DP through DP approximate personalized PageRank.

Zhang et al., "DPAR: Decoupled Graph Neural Networks with Node-Level Differential Privacy"
(WWW 2024). Registered as ``dpar-em0`` (DP-APPR-EM option I), ``dpar-em1`` (option II),
``dpar-gm`` (DP-APPR-GM) and ``dpar-nodp`` (the same pipeline without any noise).

Pipeline (Algorithms 1–3, Section 4, and the authors' reference code):

1. Node sampling: every node of the training pool joins the training graph G independently with
   probability q′ = 0.09 (Poisson sampling; G keeps only edges among sampled nodes; ≈ 210 nodes
   of the 2330-node cora_ml ``metis:9`` pool).
2. Training rows, in a public seed-determined order of the pool: the first M = 70 sampled nodes
   are *sources* and get a top-K DP-APPR row; **every other sampled node gets an identity row**
   (it aggregates only itself, value 1). All |S| rows are trained with their labels — the
   reference code's training set (the paper's text mentions only the M APPR rows).
3. APPR of the sources on G by ISTA (α, ρ, γ), vectorised over all sources
   (:func:`defenses._dpar_appr.appr_ista`), then DP-APPR-EM (Algorithm 1) or DP-APPR-GM
   (Algorithm 3): at most K non-zeros per row.
4. Column handling of Π (Algorithm 2, line 3; see the two protocols), then a 2-layer MLP f_θ
   (hidden 32, no biases, dropout 0.1 — the reference's network) is trained on
   :math:`z_v = \mathrm{softmax}(\sum_u \Pi_{vu} f_\theta(x_u))` (Eq. 1) with per-row gradient
   clipping C, Gaussian noise, Poisson batches (expected size B = 60) and Adam (lr 5e-3) for
   200 epochs of ⌈rows/B⌉ steps.
5. Inference (Eq. 4): :math:`Q^{(0)} = H,\ Q^{(p)} = (1-\alpha)\tilde D^{-1}\tilde AQ^{(p-1)} + \alpha H`,
   P = 2, α = 0.25, on the query graph with self-loops added (Ã = A + I, as the reference does).
   **Inference reads the query graph and is not private for its edges and features**: the
   guarantee covers the training graph only.

Shapes: Π is stored row-sparse as ``columns`` [rows, K] (node ids, −1 = empty slot) and
``values`` [rows, K]; features x [n, F]; f_θ(x) [n, C]; a batch of b rows gathers [b, K, F].

Two protocols (hyperparameter ``protocol``)
-------------------------------------------
``paper`` reproduces the authors' run and is recorded with ``sound: false``; every unaccounted
step is listed in the spec (:func:`plan_paper`):

* DP-APPR per Theorem 1 (EM; Gumbel scale C₂/ε) or Theorem 3 (GM; σ = √(2 ln(1.25/δ))C₁/ε), the M
  rows composed by the strong composition theorem as stated, candidate universe = the sampled
  nodes; DP-SGD per Theorem 2 read with sensitivity τ·C (noise std z·τ·C, z from the RDP of the
  Poisson-subsampled Gaussian at q = B/|S|, δ_sgd = δ/(2q′)); ε = q′·(ε_APPR + ε_SGD).
* Batch rate q = B/|S| and T = epochs·⌈|S|/B⌉ read from the private sample size |S|.
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

``sound`` (default) keeps everything from ``paper`` that is sound — training set (APPR rows +
identity rows), network, schedule, column rescaling to exactly τ, split support, inference —
and proves a guarantee for the exact sampling and noise the code performs:

* Public schedule: with n the pool size (public, like the split; δ = auto uses it too) and
  n̄ = round(q′n) the expected number of sampled nodes, q = B/n̄ and T = epochs·⌈n̄/B⌉; the
  gradient sum is divided by the expected batch q·n̄. Nothing of the schedule reads |S|.
* DP-APPR rows are computed over the fixed universe of all pool nodes (a candidate that was not
  sampled has utility 0 and is dropped after the mechanism), so neighbouring graphs share the
  output space. Every entry lies in [0, C₂] (EM), resp. every row is a non-negative vector of
  ℓ₂ norm ≤ C₁ (GM), so each row mechanism is private against an *arbitrary* change of its row:
  ``ExponentialMechanism(2C₂/β, count=K·M)`` (one-shot Gumbel top-K = K peeling EMs, Durfee &
  Rogers 2019), option II adds ``LaplaceMechanism(b, C₂, count=K·M)``, GM is
  ``GaussianMechanism(σ, √2·C₁, count=M)``.
* Column handling (:func:`assemble_rows`), in this order: (a) every non-empty column of the M
  released rows Z is rescaled to ℓ₁ = τ exactly (up and down); (b) every column keeps only its
  first D entries in row order (``max_occurrences``); (c) entries of non-sampled candidates are
  dropped; (d) identity rows (value 1) are appended, outside (a)–(b).
  *Proof that (a) costs nothing:* (a) is a function of the released Z alone — its column norms
  are computed from Z's entries, not from which rows are trained, which nodes are sampled or
  which identity rows exist — so for a fixed Z it is the same map on both neighbouring graphs,
  i.e. post-processing of the DP-released Π. Scaling up breaks no bound the sound SGD analysis
  uses: that analysis never uses a column ℓ₁ norm (the paper's τ argument is not used); it
  counts affected rows and uses per-row clipping at C, which holds whatever the scale of Π.
  Rescaling *after* (b) or over the identity rows would not be post-processing of Z: the
  norms would depend on row order or on which nodes have identity rows, and one node would
  change every row of up to K + 1 more columns. Hence the order (a) → (b) → (c) → (d), and
  columns hit by the cap end with ℓ₁ ≤ τ instead of = τ.
* Affected rows (adaptive composition for a fixed neighbouring pair G ∋ u, G′ = G − u: condition
  on the released Z, aligning the rows of the sources common to both and pairing u's row with
  the row of w, the next sampled node that becomes a source in G′). Given Z, removing u changes
  at most d = D + K + 2 per-row clipped gradients: the paired row (label y_u → y_w, position in
  row order), w's identity row (present in G only), the ≤ D rows holding u after the cap (u's
  entries dropped), and the ≤ K rows whose cap status the paired row's changed position flips
  (one per column of that row). If there is no w (|S| ≤ M) u's row is simply absent from G′
  (d ≤ D + K + 1). If u is not a source the sources are unchanged and only u's identity row and
  the ≤ D rows holding u change (d = D + 1). Each changes the sum by ≤ 2C (a changed row) or ≤ C
  (an absent row). ``tests/test_dpar.py`` rebuilds both training matrices and measures the
  changed clipped gradients; the bound D + K + 2 is attained there.
* DP-SGD: each row joins a batch independently with probability q, so the number ρ of affected
  rows in a batch is dominated by Binomial(d, q); conditioned on ρ the step is a Gaussian
  mechanism with sensitivity 2Cρ and, by the joint convexity of exp((α−1)D_α) (DP-GNN's
  Theorem 1 argument with the binomial law of this sampler),
  :math:`\varepsilon(\alpha) = \tfrac{T}{\alpha-1}\ln\mathbb{E}_\rho\exp(\alpha(\alpha-1)(2C\rho)^2/2\sigma^2)`
  (:class:`~dpaudit.accounting.SensitivityMixtureGaussian`). Dropout masks are data-independent.
* APPR (≤ M rows) and SGD compose in RDP to (ε_in, δ/q′); Poisson node sampling amplifies it to
  (ln(1+q′(e^{ε_in}−1)), δ) (Balle et al. 2018, Thm 8). The APPR noise is calibrated to
  ``appr_budget_ratio`` of ε_in, then the SGD σ to the rest, so the total is ≤ the target.

Sound accounting is far more expensive than the paper's: at the paper's budgets both DP-APPR and
DP-SGD are dominated by noise (see ``benchmarks/results/dpar.md``).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import binom
from torch.func import functional_call, grad, vmap
from torch_geometric.data import Data
from torch_geometric.utils import add_self_loops, remove_self_loops, subgraph
from tqdm.auto import tqdm

from defenses._dpar_appr import (
    appr_ista,
    dp_appr_em,
    dp_appr_gm,
    exact_top_k,
    paper_em_epsilon,
    paper_gm_sigma,
    paper_strong_composition_epsilon,
)
from dpaudit.accounting import (
    ExponentialMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    Mechanism,
    PoissonSubsampledGaussian,
    PrivacyLedger,
    PrivacySpec,
    SensitivityMixtureGaussian,
    amplify_by_subsampling,
    calibrate_noise,
)
from dpaudit.datasets import GraphDataset
from dpaudit.defense import Defense, PrivateHyperparameters
from dpaudit.errors import ConfigurationError, DPAuditError, ModelFormatError, PrivacyParameterError
from dpaudit.model import ReleasedModel, _node_index, register_model_kind
from dpaudit.nn import build_architecture
from dpaudit.registry import register_defense
from dpaudit.splits import Split

log = logging.getLogger(__name__)

INFERENCE_NOTE = (
    "inference propagates the MLP outputs over the query graph (with self-loops) by power iteration (DPAR Eq. 4): "
    "it reads the query graph's edges and neighbours' features, which the privacy guarantee does not cover (it "
    "covers the training graph only)"
)


@dataclass
class DPARHyperparameters(PrivateHyperparameters):
    """Defaults from DPAR Section 4 / 4.3 and the authors' reference code (τ: the reference's 1;
    D is dpaudit's, used by the ``sound`` accountant only)."""

    appr_budget_ratio: float = 0.5  # share of the budget spent on DP-APPR (the paper splits evenly)
    node_sample_rate: float = 0.09  # q′, Poisson node sampling of the training graph
    num_sources: int = 70  # M, sampled nodes with a DP-APPR row; the other sampled nodes get identity rows
    top_k: int = 2  # K
    alpha: float = 0.25  # teleport (ISTA and inference)
    rho: float = 1e-4  # ISTA ℓ₁ regularisation
    ista_tol: float = 1e-4  # γ, ISTA termination slack
    ista_max_iter: int = 1000
    clip_gm: float = 0.01  # C₁
    clip_em: float = 0.001  # C₂
    em_value_share: float = 0.5  # option II: share of the DP-APPR budget for the Laplace values
    column_l1_bound: float = 1.0  # τ: every non-empty column of Π is rescaled to this ℓ₁ norm
    max_occurrences: int = 4  # D: entries kept per column of Π (sound protocol)
    max_grad_norm: float = 1.0  # C
    batch_size: int = 60  # B (expected Poisson batch size)
    epochs: int = 200
    lr: float = 0.005
    hidden: int = 32
    dropout: float = 0.1  # on the input and hidden layer of f_θ (reference code)
    bias: bool = False  # the reference's linear layers have no bias
    power_steps: int = 2  # P of Eq. 4
    self_loops: bool = True  # add self-loops to the query graph at inference (reference code)


def _validate(hp: DPARHyperparameters) -> None:
    checks = {
        "appr_budget_ratio": 0 < hp.appr_budget_ratio < 1,
        "node_sample_rate": 0 < hp.node_sample_rate <= 1,
        "em_value_share": 0 < hp.em_value_share < 1,
        "alpha": 0 < hp.alpha < 1,
        "rho": hp.rho > 0,
        "ista_tol": hp.ista_tol >= 0,
        "clip_gm": hp.clip_gm > 0,
        "clip_em": hp.clip_em > 0,
        "column_l1_bound": hp.column_l1_bound > 0,
        "max_grad_norm": hp.max_grad_norm > 0,
        "lr": hp.lr > 0,
        "dropout": 0 <= hp.dropout < 1,
    }
    for name in ("num_sources", "top_k", "max_occurrences", "batch_size", "epochs", "hidden", "ista_max_iter"):
        checks[name] = int(getattr(hp, name)) == getattr(hp, name) and getattr(hp, name) >= 1
    checks["power_steps"] = int(hp.power_steps) == hp.power_steps and hp.power_steps >= 0
    bad = [name for name, ok in checks.items() if not ok]
    if bad:
        raise ConfigurationError(
            "dpar: invalid hyperparameters " + ", ".join(f"{n}={getattr(hp, n)!r}" for n in bad) + " (fractions in "
            "(0, 1), α in (0, 1), dropout in [0, 1), positive bounds, integers ≥ 1)"
        )


# --------------------------------------------------------------------------- samplers and Π bounds


def poisson_sample(num: int, rate: float, generator: torch.Generator) -> torch.Tensor:
    """Indices of ``range(num)`` kept independently with probability ``rate`` (Poisson sampling).

    Both DPAR samplers use it — q′ node sampling and the DP-SGD batches — because the
    accountants (amplification by Poisson subsampling; the binomial law of affected slots)
    assume exactly this."""
    if rate >= 1.0:
        return torch.arange(num)
    return (torch.rand(num, generator=generator) < rate).nonzero().view(-1)


def affected_slots_bound(max_occurrences: int, top_k: int) -> int:
    """d = D + K + 2: per-row clipped gradients that removing one node can change under the
    ``sound`` protocol — the paired source row, the promoted node's identity row, ≤ D rows holding
    the node and ≤ K rows displaced from the cap (module docstring)."""
    return int(max_occurrences) + int(top_k) + 2


def sgd_step_mechanism(
    noise_std: float, max_grad_norm: float, affected: int, sample_rate: float, steps: int
) -> SensitivityMixtureGaussian:
    """The sound DP-SGD accountant: ρ ~ Binomial(d, q) affected slots per Poisson batch, each
    changing the gradient sum by ≤ 2C (DP-GNN Theorem 1 with this sampler's law)."""
    support = tuple(float(i) for i in range(affected + 1))
    probabilities = binom.pmf(np.arange(affected + 1), affected, sample_rate)
    probabilities = tuple(float(p) for p in probabilities / probabilities.sum())
    return SensitivityMixtureGaussian(
        sigma=noise_std,
        sensitivity_per_term=2.0 * max_grad_norm,
        support=support,
        probabilities=probabilities,
        steps=steps,
        name="dpar dp-sgd (poisson slots, binomial affected-row mixture)",
    )


def cap_column_occurrences(columns: torch.Tensor, max_occurrences: int) -> torch.Tensor:
    """Mask [rows, K]: keep, in every column, only its first ``max_occurrences`` entries in row
    order (entries with column −1 are empty). Vectorised: sort by (column, row), rank in group."""
    flat = columns.reshape(-1)
    rows = torch.arange(columns.size(0), device=columns.device).repeat_interleave(columns.size(1))
    valid = flat >= 0
    key = torch.where(valid, flat, flat.new_full((), torch.iinfo(torch.long).max // 4))
    # stable sort by row first, then by column → entries of a column ordered by row
    order = torch.sort(rows, stable=True).indices
    order = order[torch.sort(key[order], stable=True).indices]
    sorted_key = key[order]
    position = torch.arange(len(order), device=columns.device)
    is_start = torch.ones_like(sorted_key, dtype=torch.bool)
    is_start[1:] = sorted_key[1:] != sorted_key[:-1]
    group_start = torch.cummax(torch.where(is_start, position, torch.zeros_like(position)), dim=0).values
    rank = torch.empty_like(position)
    rank[order] = position - group_start
    return ((rank < max_occurrences) & valid).view_as(columns)


def column_l1_norms(columns: torch.Tensor, values: torch.Tensor, num_columns: int) -> torch.Tensor:
    """ℓ₁ norm of every column of the row-sparse Π ([rows, K] columns/values) → [num_columns]."""
    valid = columns >= 0
    norms = torch.zeros(num_columns, dtype=values.dtype, device=values.device)
    return norms.scatter_add_(0, columns[valid], values[valid].abs())


def normalize_columns_l1(columns: torch.Tensor, values: torch.Tensor, bound: float, num_columns: int) -> torch.Tensor:
    r"""Rescale every non-empty column of Π to ℓ₁ norm exactly ``bound`` (τ), up as well as down:
    :math:`\Pi_{:,j} \leftarrow \tau\,\Pi_{:,j}/\lVert\Pi_{:,j}\rVert_1` (the reference code's
    normalisation; Algorithm 2, line 3 only clips down). Empty slots and all-zero columns stay 0."""
    valid = columns >= 0
    col = torch.where(valid, columns, 0)
    norms = column_l1_norms(columns, values, num_columns)
    scale = torch.where(norms > 0, bound / norms.clamp(min=torch.finfo(values.dtype).tiny), torch.zeros_like(norms))
    return torch.where(valid, values * scale[col], torch.zeros_like(values))


def assemble_rows(
    source_columns: torch.Tensor,
    source_values: torch.Tensor,
    identity_nodes: torch.Tensor,
    in_graph: torch.Tensor,
    *,
    protocol: str,
    bound: float,
    max_occurrences: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training matrix Π: the M released source rows (in row order) then one identity row per
    node of ``identity_nodes``, with the protocol's column handling (module docstring).

    * ``sound``: rescale the columns of the released rows to ℓ₁ = τ (a function of the released
      rows alone: post-processing), keep the first D entries of every column in row order, drop
      candidates outside the graph (``in_graph`` False), append identity rows (value 1).
    * ``paper``: drop candidates outside the graph, append identity rows, rescale every non-empty
      column of the whole matrix to ℓ₁ = τ (the reference code).

    Shapes: ``source_columns``/``source_values`` [M, K] (node ids over the universe, −1 = empty);
    ``identity_nodes`` [I]; ``in_graph`` [universe] bool. Returns columns/values [M + I, K].
    """
    universe = in_graph.numel()
    k = source_columns.size(1)
    cols, vals = source_columns, source_values
    if protocol == "sound":
        vals = normalize_columns_l1(cols, vals, bound, universe)
        keep = cap_column_occurrences(cols, max_occurrences)
        cols, vals = torch.where(keep, cols, -1), torch.where(keep, vals, torch.zeros_like(vals))
    keep = (cols >= 0) & in_graph[cols.clamp(min=0)]
    cols, vals = torch.where(keep, cols, -1), torch.where(keep, vals, torch.zeros_like(vals))
    id_cols = torch.full((len(identity_nodes), k), -1, dtype=cols.dtype, device=cols.device)
    id_vals = torch.zeros(len(identity_nodes), k, dtype=vals.dtype, device=vals.device)
    id_cols[:, 0] = identity_nodes.to(cols.device)
    id_vals[:, 0] = 1.0
    cols, vals = torch.cat([cols, id_cols]), torch.cat([vals, id_vals])
    if protocol == "paper":
        vals = normalize_columns_l1(cols, vals, bound, universe)
    return cols, vals


# --------------------------------------------------------------------------- noise plans


@dataclass
class NoisePlan:
    """Noise of one run and the privacy it buys (computed before training; data-independent)."""

    gumbel_scale: float = 0.0
    laplace_scale: float = 0.0
    gm_sigma: float = 0.0
    sgd_noise_std: float = 0.0
    clip_gradients: bool = False
    privacy: PrivacySpec = field(default_factory=PrivacySpec.non_private)
    details: dict = field(default_factory=dict)


def _appr_mechanisms(variant: str, hp: DPARHyperparameters, scale: float, laplace: float = 0.0) -> list[Mechanism]:
    m, k = hp.num_sources, hp.top_k
    if variant == "gm":
        return [GaussianMechanism(scale, math.sqrt(2.0) * hp.clip_gm, m, name="dp-appr-gm rows")]
    mechs: list[Mechanism] = [ExponentialMechanism(2.0 * hp.clip_em / scale, k * m, name="dp-appr-em top-k peels")]
    if variant == "em1":
        mechs.append(LaplaceMechanism(laplace, hp.clip_em, k * m, name="dp-appr-em option II values"))
    return mechs


def plan_sound(
    variant: str, hp: DPARHyperparameters, epsilon: float, delta: float, steps: int, sample_rate: float
) -> NoisePlan:
    """Calibrate DP-APPR to ``appr_budget_ratio`` of the inner budget, then DP-SGD to the rest,
    so that the Poisson-node-sampling-amplified total is ≤ ε (module docstring, ``sound``)."""
    q_node = hp.node_sample_rate
    if not delta < q_node:
        raise PrivacyParameterError(f"dpar: delta ({delta:g}) must be below the node sampling rate q′ ({q_node:g})")
    inner_delta = delta / q_node
    inner_target = math.log1p(math.expm1(epsilon) / q_node)  # inverse of ln(1 + q′(e^ε − 1))
    appr_target = hp.appr_budget_ratio * inner_target
    details: dict[str, Any] = {"inner_epsilon_target": inner_target, "inner_delta": inner_delta}
    plan = NoisePlan(clip_gradients=True)
    c1, c2 = hp.clip_gm, hp.clip_em
    if variant == "gm":
        s = calibrate_noise(appr_target, inner_delta, lambda s: _appr_mechanisms("gm", hp, s * c1))
        plan.gm_sigma = s * c1
        appr = _appr_mechanisms("gm", hp, plan.gm_sigma)
    else:
        share = hp.em_value_share if variant == "em1" else 0.0
        s = calibrate_noise(appr_target * (1 - share), inner_delta, lambda s: _appr_mechanisms("em0", hp, s * c2))
        plan.gumbel_scale = s * c2
        if variant == "em1":
            s2 = calibrate_noise(
                appr_target * share, inner_delta, lambda s: [LaplaceMechanism(s * c2, c2, hp.top_k * hp.num_sources)]
            )
            plan.laplace_scale = s2 * c2
        appr = _appr_mechanisms(variant, hp, plan.gumbel_scale, plan.laplace_scale)
    affected = affected_slots_bound(hp.max_occurrences, hp.top_k)
    c = hp.max_grad_norm

    def all_mechanisms(s: float) -> list[Mechanism]:
        return [*appr, sgd_step_mechanism(s * c, c, affected, sample_rate, steps)]

    s = calibrate_noise(inner_target, inner_delta, all_mechanisms)
    plan.sgd_noise_std = s * c
    mechanisms = all_mechanisms(s)
    inner = PrivacyLedger().extend(mechanisms)
    inner_eps = inner.get_epsilon(inner_delta)
    appr_eps = PrivacyLedger().extend(appr).get_epsilon(inner_delta)
    total_eps, _ = amplify_by_subsampling(inner_eps, inner_delta, q_node)
    details.update(inner_epsilon=inner_eps, appr_epsilon_alone=appr_eps, affected_slots=affected)
    plan.details = details
    described = [m.describe() for m in mechanisms] + [
        {
            "mechanism": "amplification by Poisson node sampling",
            "sample_rate": q_node,
            "inner_epsilon": inner_eps,
            "inner_delta": inner_delta,
        }
    ]
    plan.privacy = PrivacySpec(
        epsilon=total_eps,
        delta=delta,
        unit="node",
        mechanisms=described,
        accountant="rdp (DP-APPR + mixture DP-SGD, Balle et al. 2020 conversion) then Poisson node-sampling "
        "amplification ln(1+q'(e^eps-1)) (Balle et al. 2018, Thm 8)",
        sound=True,
        target_epsilon=epsilon,
        notes=[
            f"sound DPAR accountant: all sampled nodes are trained (M={hp.num_sources} DP-APPR rows, identity rows "
            f"for the rest); at most {hp.max_occurrences} entries per column of Pi, so removing a node changes at most "
            f"{affected} clipped per-row gradients; Poisson row sampling q={sample_rate:.4g} over {steps} steps "
            "(schedule from the public pool size, not from the sampled count)",
            "columns of the released DP-APPR rows are rescaled to l1 = tau before the cap: post-processing of the "
            "released rows (see the dpar module docstring)",
            f"delta inside node sampling = {inner_delta:g}; DP-APPR alone spends eps={appr_eps:.4g} of the inner "
            f"{inner_eps:.4g}",
            INFERENCE_NOTE,
        ],
    )
    return plan


def paper_unaccounted(variant: str, row_epsilon: float) -> list[str]:
    """Every step of the ``paper`` protocol that its accounting does not cover, in plain words."""
    steps = [
        "epsilon scaled linearly by the node-sampling rate (q' * (eps_APPR + eps_SGD)); the valid amplification "
        "is ln(1 + q'(e^eps - 1))",
        "DP-SGD noise calibrated to sensitivity tau*C (Theorem 2): removing a node changes the clipped per-row "
        "gradient (up to 2C each) of every row that holds it, of its own APPR or identity row, and of the "
        "promoted node's rows; the number of such rows is not bounded (no column occurrence cap)",
        "column normalisation of the whole training matrix to l1 = 1 (reference code) couples rows: a node's "
        "presence changes the norm, hence every entry, of each column it shares with other rows",
        "DP-SGD batch rate q = B/|S| and step count epochs*ceil(|S|/B) read from the private number of sampled "
        "nodes |S|",
        "DP-APPR candidate universe = the sampled nodes, so neighbouring graphs give the exponential/Gaussian "
        "mechanism different output spaces",
    ]
    if variant == "gm":
        steps.append(
            "DP-APPR-GM sensitivity C1 (Theorem 3); two non-negative l2-clipped rows differ by up to sqrt(2)*C1"
        )
        if row_epsilon >= 1:
            steps.append(f"classic Gaussian mechanism sigma used at per-row eps = {row_epsilon:.3g} >= 1 (valid < 1)")
    return steps


def plan_paper(
    variant: str, hp: DPARHyperparameters, epsilon: float, delta: float, steps: int, sample_rate: float
) -> NoisePlan:
    """The paper's computation (Theorems 1–3, q′ scaling as in Theorem 2), noise calibrated to the
    target under it; ``sound = False`` with :func:`paper_unaccounted` listed.

    ε_APPR: the M rows share ``appr_budget_ratio``·ε/q′ by the strong composition theorem as the
    paper inverts it (δ_pr = δ/(2q′)); ε_SGD: RDP of the Poisson-subsampled Gaussian (q, z, T) at
    δ_sgd = δ/(2q′) (the reference's δ = 0.001/q′ for δ = 0.002), noise std z·τ·C; reported
    ε = q′(ε_APPR + ε_SGD), δ = q′(δ_pr + δ_sgd)."""
    q_node, m, k = hp.node_sample_rate, hp.num_sources, hp.top_k
    inner_eps, inner_delta = epsilon / q_node, delta / q_node
    eps_pr, eps_sgd = hp.appr_budget_ratio * inner_eps, (1 - hp.appr_budget_ratio) * inner_eps
    delta_pr = delta_sgd = inner_delta / 2.0
    if not delta_sgd < 1:
        raise PrivacyParameterError(f"dpar (paper protocol): δ/(2q′) = {delta_sgd:g} must be below 1")
    delta_row = delta_pr / (2 * m)
    row_eps = paper_strong_composition_epsilon(eps_pr, m, delta_pr)
    plan = NoisePlan(clip_gradients=True)
    appr_record: dict[str, Any] = {"mechanism": f"DPAR Theorem {3 if variant == 'gm' else 1}", "rows": m}
    if variant == "gm":
        plan.gm_sigma = paper_gm_sigma(row_eps, delta_row, hp.clip_gm)
        appr_record.update(row_epsilon=row_eps, row_delta=delta_row, sigma=plan.gm_sigma, sensitivity=hp.clip_gm)
    else:
        share = hp.em_value_share if variant == "em1" else 0.0
        selection_eps = paper_em_epsilon((1 - share) * row_eps, k, delta_row)
        plan.gumbel_scale = hp.clip_em / selection_eps
        appr_record.update(row_epsilon=row_eps, row_delta=delta_row, selection_epsilon=selection_eps)
        if variant == "em1":
            plan.laplace_scale = k * hp.clip_em / (share * row_eps)
            appr_record["value_epsilon"] = share * row_eps
    z = calibrate_noise(eps_sgd, delta_sgd, lambda s: PoissonSubsampledGaussian(s, sample_rate, steps))
    sgd = PoissonSubsampledGaussian(z, sample_rate, steps, name="dp-sgd, Theorem 2 read with sensitivity tau*C")
    sgd_spent = PrivacyLedger().step(sgd).get_epsilon(delta_sgd)
    plan.sgd_noise_std = z * hp.column_l1_bound * hp.max_grad_norm
    reported = q_node * (eps_pr + sgd_spent)
    plan.details = {"epsilon_pr": eps_pr, "epsilon_sgd": sgd_spent, "noise_multiplier": z}
    plan.privacy = PrivacySpec(
        epsilon=reported,
        delta=q_node * (delta_pr + delta_sgd),
        unit="node",
        mechanisms=[appr_record, {**sgd.describe(), "delta": delta_sgd, "epsilon": sgd_spent}],
        accountant="DPAR paper (Theorems 1-3, strong composition per row, q'*(eps_pr + eps_sgd))",
        sound=False,
        target_epsilon=epsilon,
        notes=[
            f"paper protocol: DP-SGD q={sample_rate:.4g}, {steps} steps, noise multiplier {z:.4g}; "
            f"eps_APPR={q_node * eps_pr:.4g}, eps_SGD={q_node * sgd_spent:.4g} after the q' scaling",
            INFERENCE_NOTE,
        ],
        unaccounted=paper_unaccounted(variant, row_eps),
    )
    return plan


# --------------------------------------------------------------------------- training (Algorithm 2)


class DPARNet(torch.nn.Module):
    r"""f_θ of Eq. 1: ``lin2(dropout(relu(lin1(dropout(x)))))`` — the reference's 2-layer network
    (hidden 32, no biases, dropout 0.1 on the input and the hidden layer).

    Shapes: x [n, F] → embed [n, H] → logits [n, C]."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.lin1 = torch.nn.Linear(in_dim, hidden, bias=bias)
        self.lin2 = torch.nn.Linear(hidden, out_dim, bias=bias)
        self.p = float(dropout)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin1(F.dropout(x, self.p, self.training)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(F.dropout(self.embed(x), self.p, self.training))


def build_network(arch: dict) -> torch.nn.Module:
    """``{"type": "dpar-mlp", ...}`` → :class:`DPARNet`; ``{"type": "mlp", ...}`` (models saved
    before the reference network) → :class:`dpaudit.nn.MLP`."""
    if arch.get("type") == "dpar-mlp":
        try:
            return DPARNet(
                int(arch["in_dim"]),
                int(arch["hidden"]),
                int(arch["out_dim"]),
                float(arch.get("dropout", 0.0)),
                bool(arch.get("bias", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"malformed dpar architecture config: {exc}") from None
    if arch.get("type") == "mlp":
        return build_architecture(arch)
    raise ModelFormatError(f"dpar model: unknown architecture type {arch.get('type')!r}")


def _row_loss(params, buffers, module, features, weights, label):
    outputs = functional_call(module, (params, buffers), (features,))  # [K, C]
    logits = (weights.unsqueeze(1) * outputs).sum(0)
    return F.cross_entropy(logits.unsqueeze(0), label.unsqueeze(0))


def per_row_gradients(module: torch.nn.Module, x: torch.Tensor, columns, weights, labels) -> dict[str, torch.Tensor]:
    """Per-row gradients of the Eq. 1 loss (module in eval mode: no dropout), by
    ``torch.func.vmap(grad(...))`` — the reference the closed form is tested against.

    ``x`` holds the features indexed by ``columns`` [b, K] (−1 = empty slot, weight 0)."""
    params = {k: v.detach() for k, v in module.named_parameters()}
    buffers = {k: v.detach() for k, v in module.named_buffers()}
    features = x[columns.clamp(min=0)]  # [b, K, F]
    fn = vmap(grad(_row_loss), in_dims=(None, None, None, 0, 0, 0))
    return fn(params, buffers, module, features, weights, labels)


def clip_and_sum(grads: dict[str, torch.Tensor], max_norm: float | None) -> dict[str, torch.Tensor]:
    """Clip every per-row gradient to ℓ₂ norm ``max_norm`` (all parameters jointly) and sum."""
    if max_norm is None:
        return {k: g.sum(0) for k, g in grads.items()}
    norms = torch.sqrt(sum(g.reshape(g.size(0), -1).pow(2).sum(1) for g in grads.values()))
    factor = torch.clamp(max_norm / (norms + 1e-12), max=1.0)
    return {k: (g * factor.view(-1, *([1] * (g.dim() - 1)))).sum(0) for k, g in grads.items()}


def dropout_masks(
    shape_in: tuple[int, ...], shape_hidden: tuple[int, ...], p: float, generator: torch.Generator, device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Inverted-dropout masks (values 0 or 1/(1−p)) for the input [b, K, F] and hidden [b, K, H]
    activations of every (row, slot): drawn from ``generator``, independent of the data."""
    if p <= 0:
        return None
    keep = 1.0 - p
    m_in = (torch.rand(shape_in, generator=generator, device=device) < keep).float() / keep
    m_h = (torch.rand(shape_hidden, generator=generator, device=device) < keep).float() / keep
    return m_in, m_h


def clipped_gradient_sum(
    module: DPARNet,
    x: torch.Tensor,
    columns: torch.Tensor,
    weights: torch.Tensor,
    labels: torch.Tensor,
    max_norm: float | None,
    masks: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    r"""Σ over rows of the per-row gradient of the Eq. 1 loss clipped to ``max_norm`` — closed form
    for :class:`DPARNet`, without materialising per-row weight gradients.

    With x̃_bk = x_bk ⊙ m^in_bk, a_bk = W₁x̃_bk (+ b₁), h_bk = relu(a_bk) ⊙ m^h_bk,
    :math:`\delta_b = \mathrm{softmax}(\sum_k w_{bk}(W_2h_{bk} + b_2)) - e_{y_b}`, ĥ_b = Σ_k w_bk h_bk and
    :math:`g_{bk} = w_{bk}(W_2^\top\delta_b)\odot m^h_{bk}\odot 1[a_{bk}>0]`: ∇W₂ = δ_b ĥ_bᵀ,
    ∇b₂ = δ_b Σ_k w_bk, ∇W₁ = Σ_k g_bk x̃_bkᵀ, ∇b₁ = Σ_k g_bk; the squared norm of ∇W₁ is
    :math:`\sum_{k,k'} (g_{bk}\cdot g_{bk'})(\tilde x_{bk}\cdot\tilde x_{bk'})` ("ghost" norm).

    Shapes: x [n, F]; columns, weights [b, K]; labels [b]; masks ([b, K, F], [b, K, H]) or None."""
    lin1, lin2 = module.lin1, module.lin2
    feats = x[columns.clamp(min=0)]  # [b, K, F]
    with torch.no_grad():
        if masks is not None:
            feats = feats * masks[0]
        pre = feats @ lin1.weight.T
        if lin1.bias is not None:
            pre = pre + lin1.bias
        hidden = pre.clamp(min=0)
        gate = (pre > 0).to(pre.dtype)
        if masks is not None:
            hidden, gate = hidden * masks[1], gate * masks[1]
        out = hidden @ lin2.weight.T
        if lin2.bias is not None:
            out = out + lin2.bias
        logits = torch.einsum("bk,bkc->bc", weights, out)
        delta = torch.softmax(logits, dim=1)
        delta[torch.arange(len(labels), device=delta.device), labels] -= 1.0
        h_agg = torch.einsum("bk,bkh->bh", weights, hidden)
        w_sum = weights.sum(1)
        g = weights.unsqueeze(2) * (delta @ lin2.weight).unsqueeze(1) * gate  # [b, K, H]
        if max_norm is None:
            factor = torch.ones_like(w_sum)
        else:
            sq = delta.pow(2).sum(1) * h_agg.pow(2).sum(1)
            if lin2.bias is not None:
                sq = sq + delta.pow(2).sum(1) * w_sum.pow(2)
            sq = sq + torch.einsum("bkh,bjh->bkj", g, g).mul(torch.einsum("bkf,bjf->bkj", feats, feats)).sum((1, 2))
            if lin1.bias is not None:
                sq = sq + g.sum(1).pow(2).sum(1)
            factor = torch.clamp(max_norm / (sq.clamp(min=0).sqrt() + 1e-12), max=1.0)
        scaled_delta, scaled_g = delta * factor.unsqueeze(1), g * factor.view(-1, 1, 1)
        grads = {"lin1.weight": torch.einsum("bkh,bkf->hf", scaled_g, feats), "lin2.weight": scaled_delta.T @ h_agg}
        if lin1.bias is not None:
            grads["lin1.bias"] = scaled_g.sum((0, 1))
        if lin2.bias is not None:
            grads["lin2.bias"] = (scaled_delta * w_sum.unsqueeze(1)).sum(0)
        return grads


def train_rows(
    module: DPARNet,
    x: torch.Tensor,
    columns: torch.Tensor,
    weights: torch.Tensor,
    labels: torch.Tensor,
    *,
    noise_std: float,
    max_grad_norm: float | None,
    sample_rate: float,
    expected_batch: float,
    steps: int,
    lr: float,
    generator: torch.Generator,
    noise_generator: torch.Generator,
    progress: str | None = None,
) -> int:
    """Algorithm 2, lines 5–15, with Adam: Poisson batches of rows, dropout masks, per-row
    clipping, noise std ``noise_std`` on the sum, division by ``expected_batch``.

    A private run takes every one of ``steps`` steps, noise-only when the batch is empty (skipping
    it would reveal that). Returns the number of steps taken."""
    device = x.device
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    private = max_grad_norm is not None
    hidden = module.lin1.out_features
    for _ in tqdm(range(steps), desc=progress, disable=None if progress else True, leave=False):
        batch = poisson_sample(len(labels), sample_rate, generator).to(device)
        if batch.numel() == 0 and not private:
            continue
        if batch.numel():
            b, k = batch.numel(), columns.size(1)
            masks = dropout_masks((b, k, x.size(1)), (b, k, hidden), module.p, noise_generator, device)
            summed = clipped_gradient_sum(
                module, x, columns[batch], weights[batch], labels[batch], max_grad_norm, masks
            )
        else:
            summed = {k: torch.zeros_like(p) for k, p in module.named_parameters()}
        optimizer.zero_grad(set_to_none=False)
        for name, param in module.named_parameters():
            g = summed[name]
            if noise_std > 0:
                g = g + noise_std * torch.randn(g.shape, generator=noise_generator, device=device, dtype=g.dtype)
            param.grad = g / expected_batch
        optimizer.step()
    module.eval()
    return steps


# --------------------------------------------------------------------------- the released model


def power_iteration(
    h: torch.Tensor, edge_index: torch.Tensor, alpha: float, steps: int, self_loops: bool = False
) -> torch.Tensor:
    r"""DPAR Eq. 4: :math:`Q \leftarrow (1-\alpha)\tilde D^{-1}\tilde AQ + \alpha H`, ``steps`` times,
    from Q = H; Ã = A + I when ``self_loops`` (the reference code), else A (isolated nodes then
    keep αH). Shapes: h [n, C], edge_index [2, E] → [n, C]."""
    n = h.size(0)
    edge_index = edge_index.to(h.device)
    if self_loops:
        edge_index, _ = remove_self_loops(edge_index)
        edge_index, _ = add_self_loops(edge_index, num_nodes=n)
    row, col = edge_index
    deg = torch.zeros(n, dtype=h.dtype, device=h.device).scatter_add_(0, row, torch.ones_like(row, dtype=h.dtype))
    inv_deg = 1.0 / deg.clamp(min=1.0)
    q = h
    for _ in range(steps):
        neighbours = torch.zeros_like(h).index_add_(0, row, q[col])
        q = (1 - alpha) * inv_deg.unsqueeze(1) * neighbours + alpha * h
    return q


@register_model_kind("dpar")
class DPARModel(ReleasedModel):
    """f_θ + power-iteration inference over the query graph (DPAR Eq. 4)."""

    def __init__(
        self, module, architecture: dict, alpha: float, power_steps: int, privacy, card, self_loops: bool = False
    ):
        super().__init__(privacy, card)
        self.module = module.eval()
        self.architecture = dict(architecture)
        self.alpha = float(alpha)
        self.power_steps = int(power_steps)
        self.self_loops = bool(self_loops)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @torch.no_grad()
    def _propagate(self, graph: Data, nodes, embed: bool) -> torch.Tensor:
        idx = _node_index(graph, nodes)
        if graph.x is None or graph.x.size(1) != self.architecture["in_dim"]:
            raise DPAuditError(f"dpar model expects node features of width {self.architecture['in_dim']}")
        x = graph.x.to(self.device, torch.float32)
        h = self.module.embed(x) if embed else self.module(x)
        q = power_iteration(h, graph.edge_index, self.alpha, self.power_steps, self.self_loops)[idx.to(self.device)]
        return q if embed else torch.softmax(q, dim=1)

    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        return self._propagate(graph, nodes, embed=False)

    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        return self._propagate(graph, nodes, embed=True)

    def config(self) -> dict:
        return {
            "architecture": self.architecture,
            "alpha": self.alpha,
            "power_steps": self.power_steps,
            "self_loops": self.self_loops,
        }

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return dict(self.module.state_dict())

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        try:
            arch, alpha, steps = config["architecture"], float(config["alpha"]), int(config["power_steps"])
            self_loops = config.get("self_loops", False)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelFormatError(f"dpar model config is incomplete: {exc}") from None
        if not isinstance(arch, dict) or not 0 < alpha < 1 or steps < 0 or not isinstance(self_loops, bool):
            raise ModelFormatError("dpar model config: expected an architecture, 0 < alpha < 1, power_steps >= 0")
        module = build_network(arch)
        try:
            module.load_state_dict(tensors, strict=True)
        except RuntimeError as exc:
            raise ModelFormatError(f"dpar weights do not match the architecture: {exc}") from None
        return cls(module, arch, alpha, steps, privacy, card, self_loops)


# --------------------------------------------------------------------------- the defenses


def schedule(hp: DPARHyperparameters, rows: int) -> tuple[int, float]:
    """(steps T, Poisson row rate q) for ``rows`` training rows: q = min(1, B/rows),
    T = epochs·⌈rows/min(B, rows)⌉ (the reference's 200·⌈|S|/60⌉)."""
    rows = max(1, int(rows))
    rate = min(1.0, hp.batch_size / rows)
    return hp.epochs * math.ceil(rows / min(hp.batch_size, rows)), rate


class _DPAR(Defense):
    """Shared pipeline; subclasses fix the DP-APPR ``variant`` (em0, em1, gm or exact)."""

    unit = "node"
    hyperparameters_class = DPARHyperparameters
    variant: ClassVar[str] = "em0"

    def public_rows(self, pool_size: int) -> int:
        """n̄ = round(q′·n): the expected number of sampled nodes, from the public pool size."""
        return max(1, round(self.hp.node_sample_rate * pool_size))

    def noise_plan(self, delta: float, steps: int, rate: float) -> NoisePlan:
        """The noise and privacy spec for this defense's target (ε = ∞: no noise)."""
        if not self.private:
            return NoisePlan(privacy=PrivacySpec.non_private(f"{self.name} at ε = ∞: the DPAR pipeline without noise"))
        planner = plan_paper if self.paper_protocol else plan_sound
        with warnings.catch_warnings():
            # calibration probes tiny σ, where opacus notes that its smallest order is optimal
            warnings.filterwarnings("ignore", message=".*Optimal order is the smallest alpha.*")
            return planner(self.variant, self.hp, self.epsilon, delta, steps, rate)

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> DPARModel:
        hp = self.hp
        _validate(hp)
        protocol = "paper" if self.paper_protocol else "sound"
        device = self.device
        generator = torch.Generator().manual_seed(self.seed)
        noise_generator = torch.Generator(device=device).manual_seed(self.seed + 1)

        # 1. Poisson node sampling of the training graph (train-local ids 0..n_train-1).
        train = split.train
        n_train = len(train)
        train_edges = split.edge_index_for(dataset, "train")
        train_edges, _ = subgraph(train, train_edges, relabel_nodes=True, num_nodes=dataset.num_nodes)
        priority = torch.randperm(n_train, generator=generator)  # public order (seed only)
        sampled = poisson_sample(n_train, hp.node_sample_rate, generator)
        if sampled.numel() == 0:
            raise DPAuditError("dpar: node sampling kept no training node; raise node_sample_rate")
        sampled = sampled[torch.argsort(priority[sampled])]  # sampled nodes in the public order
        graph_edges, _ = subgraph(sampled, train_edges, relabel_nodes=True, num_nodes=n_train)
        # 2. Sources = the first M sampled nodes; every other sampled node gets an identity row.
        m = min(hp.num_sources, len(sampled))
        source_pos = torch.arange(m)  # positions in the sampled graph (which is in public order)
        sources, identity = sampled[:m], sampled[m:]
        # schedule: sound from the public pool size, paper from the private |S| (listed unaccounted)
        rows_for_schedule = len(sampled) if protocol == "paper" else self.public_rows(n_train)
        steps, sample_rate = schedule(hp, rows_for_schedule)
        plan = self.noise_plan(delta, steps, sample_rate)
        # 3. APPR on the sampled graph, then DP-APPR over the universe.
        appr = appr_ista(graph_edges, len(sampled), source_pos.numpy(), hp.alpha, hp.rho, hp.ista_tol, hp.ista_max_iter)
        if protocol == "sound":  # universe = all training nodes; a non-sampled candidate has utility 0
            universe_to_train, column_position = torch.arange(n_train), sampled.numpy()
        else:  # the paper's universe: the sampled nodes
            universe_to_train, column_position = sampled, np.arange(len(sampled))
        universe = len(universe_to_train)
        if self.variant == "gm":
            cols, vals = dp_appr_gm(
                appr, column_position, universe, hp.top_k, hp.clip_gm, plan.gm_sigma, noise_generator, device
            )
        elif self.variant in ("em0", "em1"):
            option = 1 if self.variant == "em0" else 2
            cols, vals = dp_appr_em(
                appr,
                column_position,
                universe,
                hp.top_k,
                hp.clip_em,
                plan.gumbel_scale,
                option,
                plan.laplace_scale,
                noise_generator,
                device,
            )
        else:
            cols, vals = exact_top_k(appr, column_position, hp.top_k, device)
        cols = torch.where(cols >= 0, universe_to_train.to(device)[cols.clamp(min=0)], -1)
        # 4. Π: column handling of the protocol, identity rows appended (rows: sources, then identity).
        in_graph = torch.zeros(n_train, dtype=torch.bool, device=device)
        in_graph[sampled.to(device)] = True
        cols, vals = assemble_rows(
            cols,
            vals,
            identity.to(device),
            in_graph,
            protocol=protocol,
            bound=hp.column_l1_bound,
            max_occurrences=hp.max_occurrences,
        )
        row_nodes = torch.cat([sources, identity])
        log.debug(
            "%s: %d sampled nodes, %d APPR rows, %d identity rows, %d entries in Pi",
            self.name,
            len(sampled),
            m,
            len(identity),
            int((cols >= 0).sum()),
        )

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
            noise_std=plan.sgd_noise_std,
            max_grad_norm=hp.max_grad_norm if plan.clip_gradients else None,
            sample_rate=sample_rate,
            expected_batch=sample_rate * rows_for_schedule,
            steps=steps,
            lr=hp.lr,
            generator=generator,
            noise_generator=noise_generator,
            progress=self.name,
        )
        card = {
            "inference": {"private": False, "note": INFERENCE_NOTE},
            "dpar": {
                "variant": self.variant,
                "protocol": protocol,
                "sampled_nodes": len(sampled),
                "appr_rows": m,
                "identity_rows": len(identity),
                "trained_rows": len(labels),
                "steps": steps,
                "batch_sample_rate": sample_rate,
                "gumbel_scale": plan.gumbel_scale,
                "laplace_scale": plan.laplace_scale,
                "gm_sigma": plan.gm_sigma,
                "sgd_noise_std": plan.sgd_noise_std,
                "plan": plan.details,
            },
        }
        return DPARModel(module, arch, hp.alpha, hp.power_steps, plan.privacy, card, hp.self_loops)


@register_defense
class DPAREM0(_DPAR):
    name = "dpar-em0"
    summary = "DPAR with DP-APPR-EM option I (top-K by Gumbel noise, values 1/K) + DP-SGD; node-level DP"
    variant = "em0"


@register_defense
class DPAREM1(_DPAR):
    name = "dpar-em1"
    summary = "DPAR with DP-APPR-EM option II (Gumbel top-K, Laplace-noised values) + DP-SGD; node-level DP"
    variant = "em1"


@register_defense
class DPARGM(_DPAR):
    name = "dpar-gm"
    summary = "DPAR with DP-APPR-GM (Gaussian-noised clipped APPR, top-K) + DP-SGD; node-level DP"
    variant = "gm"


@register_defense
class DPARNoDP(_DPAR):
    name = "dpar-nodp"
    unit = None
    summary = "DPAR pipeline without privacy (exact top-K APPR, no clipping or noise)"
    variant = "exact"
