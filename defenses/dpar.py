r"""DPAR: decoupled GNN with node-level DP through DP approximate personalized PageRank.

Zhang et al., "DPAR: Decoupled Graph Neural Networks with Node-Level Differential Privacy"
(WWW 2024). Registered as ``dpar-em0`` (DP-APPR-EM option I), ``dpar-em1`` (option II),
``dpar-gm`` (DP-APPR-GM) and ``dpar-nodp`` (the same pipeline without any noise).

Pipeline (Algorithms 1–3, Section 4):

1. Node sampling: every training node joins the training graph G independently with
   probability q′ (Poisson sampling; G keeps only edges among sampled nodes).
2. Sources: the M sampled nodes that come first in a public, seed-determined random order of
   the training nodes (rows of Π keep that order).
3. APPR of the sources on G by ISTA (α, ρ, γ), vectorised over all sources
   (:func:`defenses._dpar_appr.appr_ista`), then DP-APPR-EM (Algorithm 1) or DP-APPR-GM
   (Algorithm 3): at most K non-zeros per row of Π.
4. Algorithm 2: bound the columns of Π, then train a 2-layer MLP f_θ (hidden 32) with
   :math:`z_v = \mathrm{softmax}(\sum_u \Pi_{vu} f_\theta(x_u))` (Eq. 1) on the sources' labels,
   with per-node gradient clipping C, Gaussian noise, Poisson batches (rate B/M) and Adam.
5. Inference (Eq. 4): :math:`Q^{(0)} = H,\ Q^{(p)} = (1-\alpha)D^{-1}AQ^{(p-1)} + \alpha H`,
   P = 2, α = 0.25, on the graph passed to ``predict_proba`` (the test graph). **Inference reads
   the query graph and is not private for its edges and features**: the guarantee covers the
   training graph only.

Two accountants (hyperparameter ``accounting``)
-----------------------------------------------
``paper`` reproduces the paper's computation so that Table 1 can be reproduced, and is
recorded with ``sound = False``: DP-APPR per Theorem 1 (EM; Gumbel scale C₂/ε) or Theorem 3 (GM;
σ = √(2 ln(1.25/δ))C₁/ε), the rows composed with the strong composition theorem as stated;
DP-SGD per Theorem 2 read with sensitivity τ·C (noise std z·τ·C, z from the Poisson-subsampled
Gaussian accountant); the two parts *added* and the sum *multiplied* by q′. This is not a
valid bound: q′·ε is not an amplification theorem (the correct one is ln(1+q′(e^ε−1))), the
τ-sensitivity argument treats the per-node gradient as linear in Π while per-node gradients
pass through a non-linear model and are clipped to C each (one node can change up to
#rows-containing-it clipped gradients by 2C each, regardless of τ), the GM sensitivity of two
non-negative ℓ₂-clipped vectors is √2·C₁, not C₁, and the classic Gaussian σ is only valid
for ε < 1.

``sound`` (default) is a proof for the exact sampling and noise the code performs:

* Rows are computed over the fixed universe of all training nodes (a candidate that was not
  sampled has utility 0 and is dropped after the mechanism), so neighbouring graphs share
  the output space. Every entry lies in [0, C₂] (EM), resp. every row is a non-negative
  vector of ℓ₂ norm ≤ C₁ (GM), so each row mechanism is private against an *arbitrary* change
  of its row: ``ExponentialMechanism(2C₂/β, count=K·M)`` (one-shot Gumbel top-K = K peeling
  EMs, Durfee & Rogers 2019), option II adds ``LaplaceMechanism(b, C₂, count=K·M)``, GM is
  ``GaussianMechanism(σ, √2·C₁, count=M)``.
* Column counting: Π keeps, in every column, only the first D entries in row order
  (``max_occurrences``); the column ℓ₁ bound τ is enforced by clipping every entry to τ/D
  (row-local, so it cannot couple rows the way rescaling a whole column would). Removing a
  node u therefore changes at most d = D + K + 1 per-node gradients: u's own slot (u is
  replaced by the next source in the public order), the ≤ D rows holding u, and the ≤ K rows
  whose entries u's own row displaced from the cap. Each changes by ≤ 2C.
* DP-SGD: each slot joins a batch independently with probability q = B/M, so the number ρ of
  affected slots in a batch is dominated by Binomial(d, q); conditioned on ρ the step is a
  Gaussian mechanism with sensitivity 2Cρ and, by the joint convexity of
  exp((α−1)D_α) (DP-GNN's Theorem 1 argument with the binomial law of this sampler),
  :math:`\varepsilon(\alpha) = \tfrac{T}{\alpha-1}\ln\mathbb{E}_\rho\exp(\alpha(\alpha-1)(2C\rho)^2/2\sigma^2)`
  (:class:`~dpaudit.accounting.SensitivityMixtureGaussian`).
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
from torch_geometric.utils import subgraph
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
from dpaudit.defense import Defense, Hyperparameters
from dpaudit.errors import ConfigurationError, DPAuditError, ModelFormatError, PrivacyParameterError
from dpaudit.model import ReleasedModel, _node_index, register_model_kind
from dpaudit.nn import MLP, build_architecture
from dpaudit.registry import register_defense
from dpaudit.splits import Split

log = logging.getLogger(__name__)

ACCOUNTING = ("sound", "paper")
INFERENCE_NOTE = (
    "inference propagates the MLP outputs over the query graph by power iteration (DPAR Eq. 4): it reads the "
    "query graph's edges and neighbours' features, which the privacy guarantee does not cover (it covers the "
    "training graph only)"
)


@dataclass
class DPARHyperparameters(Hyperparameters):
    """Defaults from DPAR Section 4 / 4.3 (τ and D are not given by the paper)."""

    accounting: str = "sound"  # "sound" or "paper" (see the module docstring)
    appr_budget_ratio: float = 0.5  # share of the budget spent on DP-APPR
    node_sample_rate: float = 0.09  # q′, Poisson node sampling of the training graph
    num_sources: int = 70  # M, rows of Π (= training examples)
    top_k: int = 2  # K
    alpha: float = 0.25  # teleport (ISTA and inference)
    rho: float = 1e-4  # ISTA ℓ₁ regularisation
    ista_tol: float = 1e-4  # γ, ISTA termination slack
    ista_max_iter: int = 1000
    clip_gm: float = 0.01  # C₁
    clip_em: float = 0.001  # C₂
    em_value_share: float = 0.5  # option II: share of the DP-APPR budget for the Laplace values
    column_l1_bound: float = 1.0  # τ
    max_occurrences: int = 4  # D: entries kept per column of Π (sound accountant)
    max_grad_norm: float = 1.0  # C
    batch_size: int = 60  # B (expected Poisson batch size)
    epochs: int = 200
    lr: float = 0.005
    hidden: int = 32
    power_steps: int = 2  # P of Eq. 4


def _validate(hp: DPARHyperparameters) -> None:
    if hp.accounting not in ACCOUNTING:
        raise ConfigurationError(f"accounting must be one of {ACCOUNTING}, got {hp.accounting!r}")
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
    }
    for name in ("num_sources", "top_k", "max_occurrences", "batch_size", "epochs", "hidden", "ista_max_iter"):
        checks[name] = int(getattr(hp, name)) == getattr(hp, name) and getattr(hp, name) >= 1
    checks["power_steps"] = int(hp.power_steps) == hp.power_steps and hp.power_steps >= 0
    bad = [name for name, ok in checks.items() if not ok]
    if bad:
        raise ConfigurationError(
            "dpar: invalid hyperparameters " + ", ".join(f"{n}={getattr(hp, n)!r}" for n in bad) + " (fractions in "
            "(0, 1), α in (0, 1), positive bounds, integers ≥ 1)"
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
    """d = D + K + 1: per-node gradients that removing one node can change (module docstring)."""
    return int(max_occurrences) + int(top_k) + 1


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


def clip_columns_l1(columns: torch.Tensor, values: torch.Tensor, bound: float, num_columns: int) -> torch.Tensor:
    r"""Algorithm 2, line 3: :math:`\Pi_{:,j} \leftarrow \Pi_{:,j}/\max(1, \lVert\Pi_{:,j}\rVert_1/\tau)`."""
    valid = columns >= 0
    col = torch.where(valid, columns, 0)
    norms = torch.zeros(num_columns, dtype=values.dtype, device=values.device)
    norms.scatter_add_(0, col[valid], values[valid].abs())
    factor = torch.clamp(norms / bound, min=1.0)
    return torch.where(valid, values / factor[col], torch.zeros_like(values))


def bound_columns_sound(
    columns: torch.Tensor, values: torch.Tensor, bound: float, max_occurrences: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sound column bound: ≤ D entries per column (first in row order), each clipped to τ/D in
    absolute value, so every column has ℓ₁ ≤ τ and no row's values depend on another row."""
    keep = cap_column_occurrences(columns, max_occurrences)
    cap = bound / max_occurrences
    values = torch.where(keep, values.clamp(min=-cap, max=cap), torch.zeros_like(values))
    return torch.where(keep, columns, -1), values


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
            f"sound DPAR accountant: at most {hp.max_occurrences} entries per column of Pi, so removing a node "
            f"changes at most {affected} clipped per-node gradients; Poisson slot sampling q={sample_rate:.4g}",
            f"delta inside node sampling = {inner_delta:g}; DP-APPR alone spends eps={appr_eps:.4g} of the inner "
            f"{inner_eps:.4g}",
            INFERENCE_NOTE,
        ],
    )
    return plan


def plan_paper(
    variant: str, hp: DPARHyperparameters, epsilon: float, delta: float, steps: int, sample_rate: float
) -> NoisePlan:
    """The paper's computation (Theorems 1–3, q′ scaling as in Theorem 2); ``sound = False``."""
    q_node, m, k = hp.node_sample_rate, hp.num_sources, hp.top_k
    inner_eps, inner_delta = epsilon / q_node, delta / q_node
    eps_pr, eps_sgd = hp.appr_budget_ratio * inner_eps, (1 - hp.appr_budget_ratio) * inner_eps
    delta_pr = delta_sgd = inner_delta / 2.0
    if not delta_sgd < 1:
        raise PrivacyParameterError(f"dpar (paper accounting): δ/(2q′) = {delta_sgd:g} must be below 1")
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
        notes=[INFERENCE_NOTE],
        unaccounted=[
            "paper accounting, NOT a valid bound: linear q' scaling, tau*C sensitivity for clipped non-linear "
            "per-node gradients, GM sensitivity C1 instead of sqrt(2)*C1 (see dpar module docstring)",
        ],
    )
    return plan


# --------------------------------------------------------------------------- training (Algorithm 2)


def _row_loss(params, buffers, module, features, weights, label):
    outputs = functional_call(module, (params, buffers), (features,))  # [K, C]
    logits = (weights.unsqueeze(1) * outputs).sum(0)
    return F.cross_entropy(logits.unsqueeze(0), label.unsqueeze(0))


def per_row_gradients(module: MLP, x: torch.Tensor, columns, weights, labels) -> dict[str, torch.Tensor]:
    """Per-row (per-source) gradients of the Eq. 1 loss, by ``torch.func.vmap(grad(...))``.

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


def clipped_gradient_sum(
    module: MLP, x: torch.Tensor, columns, weights, labels, max_norm: float | None
) -> dict[str, torch.Tensor]:
    r"""Σ over rows of the per-row gradient clipped to ``max_norm`` — closed form for the
    one-hidden-layer ReLU MLP, equal to :func:`per_row_gradients` + :func:`clip_and_sum`
    (tested) but without materialising per-row weight gradients.

    With :math:`\delta_b = \mathrm{softmax}(z_b) - e_{y_b}`, :math:`\hat h_b = \sum_k w_{bk}h_{bk}` and
    :math:`g_{bk} = w_{bk}(W_2^\top\delta_b)\odot 1[W_1x_{bk}+b_1>0]`: ∇W₂ = δ_b ĥ_bᵀ,
    ∇b₂ = δ_b Σ_k w_bk, ∇W₁ = Σ_k g_bk x_bkᵀ, ∇b₁ = Σ_k g_bk; the squared norm of ∇W₁ is
    :math:`\sum_{k,k'} (g_{bk}\cdot g_{bk'})(x_{bk}\cdot x_{bk'})` ("ghost" norm, K² dot products)."""
    if len(module.hidden_layers) != 1 or not isinstance(module.act, torch.nn.ReLU):
        return clip_and_sum(per_row_gradients(module, x, columns, weights, labels), max_norm)
    layer, out = module.hidden_layers[0], module.out
    feats = x[columns.clamp(min=0)]  # [b, K, F]
    with torch.no_grad():
        pre = feats @ layer.weight.T + layer.bias  # [b, K, H]
        hidden = pre.clamp(min=0)
        logits = torch.einsum("bk,bkc->bc", weights, hidden @ out.weight.T + out.bias)
        delta = torch.softmax(logits, dim=1)
        delta[torch.arange(len(labels), device=delta.device), labels] -= 1.0
        h_agg = torch.einsum("bk,bkh->bh", weights, hidden)
        w_sum = weights.sum(1)
        g = weights.unsqueeze(2) * (delta @ out.weight).unsqueeze(1) * (pre > 0)  # [b, K, H]
        if max_norm is None:
            factor = torch.ones_like(w_sum)
        else:
            sq = delta.pow(2).sum(1) * (h_agg.pow(2).sum(1) + w_sum.pow(2))
            sq = sq + torch.einsum("bkh,bjh->bkj", g, g).mul(torch.einsum("bkf,bjf->bkj", feats, feats)).sum((1, 2))
            sq = sq + g.sum(1).pow(2).sum(1)
            factor = torch.clamp(max_norm / (sq.clamp(min=0).sqrt() + 1e-12), max=1.0)
        scaled_delta, scaled_g = delta * factor.unsqueeze(1), g * factor.view(-1, 1, 1)
        return {
            "hidden_layers.0.weight": torch.einsum("bkh,bkf->hf", scaled_g, feats),
            "hidden_layers.0.bias": scaled_g.sum((0, 1)),
            "out.weight": scaled_delta.T @ h_agg,
            "out.bias": (scaled_delta * w_sum.unsqueeze(1)).sum(0),
        }


def train_rows(
    module: MLP,
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
    """Algorithm 2, lines 5–15, with Adam: Poisson batches of rows, per-row clipping, noise std
    ``noise_std`` on the sum, division by the (data-independent) expected batch size.

    A private run takes every one of ``steps`` steps, noise-only when the batch is empty (skipping
    it would reveal that). Returns the number of steps taken."""
    device = x.device
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    module.train()
    private = max_grad_norm is not None
    for _ in tqdm(range(steps), desc=progress, disable=None if progress else True, leave=False):
        batch = poisson_sample(len(labels), sample_rate, generator).to(device)
        if batch.numel() == 0 and not private:
            continue
        if batch.numel():
            summed = clipped_gradient_sum(module, x, columns[batch], weights[batch], labels[batch], max_grad_norm)
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


def power_iteration(h: torch.Tensor, edge_index: torch.Tensor, alpha: float, steps: int) -> torch.Tensor:
    r"""DPAR Eq. 4: :math:`Q \leftarrow (1-\alpha)D^{-1}AQ + \alpha H`, ``steps`` times, from Q = H
    (isolated nodes keep αH + ..., i.e. their own representation up to scale)."""
    n = h.size(0)
    row, col = edge_index.to(h.device)
    deg = torch.zeros(n, dtype=h.dtype, device=h.device).scatter_add_(0, row, torch.ones_like(row, dtype=h.dtype))
    inv_deg = 1.0 / deg.clamp(min=1.0)
    q = h
    for _ in range(steps):
        neighbours = torch.zeros_like(h).index_add_(0, row, q[col])
        q = (1 - alpha) * inv_deg.unsqueeze(1) * neighbours + alpha * h
    return q


@register_model_kind("dpar")
class DPARModel(ReleasedModel):
    """MLP f_θ + power-iteration inference over the query graph (DPAR Eq. 4)."""

    def __init__(self, module: MLP, architecture: dict, alpha: float, power_steps: int, privacy, card):
        super().__init__(privacy, card)
        self.module = module.eval()
        self.architecture = dict(architecture)
        self.alpha = float(alpha)
        self.power_steps = int(power_steps)

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
        q = power_iteration(h, graph.edge_index, self.alpha, self.power_steps)[idx.to(self.device)]
        return q if embed else torch.softmax(q, dim=1)

    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        return self._propagate(graph, nodes, embed=False)

    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        return self._propagate(graph, nodes, embed=True)

    def config(self) -> dict:
        return {"architecture": self.architecture, "alpha": self.alpha, "power_steps": self.power_steps}

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return dict(self.module.state_dict())

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        try:
            arch, alpha, steps = config["architecture"], float(config["alpha"]), int(config["power_steps"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"dpar model config is incomplete: {exc}") from None
        if arch.get("type") != "mlp" or not 0 < alpha < 1 or steps < 0:
            raise ModelFormatError("dpar model config: expected an MLP, 0 < alpha < 1 and power_steps >= 0")
        module = build_architecture(arch)
        try:
            module.load_state_dict(tensors, strict=True)
        except RuntimeError as exc:
            raise ModelFormatError(f"dpar weights do not match the architecture: {exc}") from None
        return cls(module, arch, alpha, steps, privacy, card)


# --------------------------------------------------------------------------- the defenses


class _DPAR(Defense):
    """Shared pipeline; subclasses fix the DP-APPR ``variant`` (em0, em1, gm or exact)."""

    unit = "node"
    hyperparameters_class = DPARHyperparameters
    variant: ClassVar[str] = "em0"

    def _steps(self) -> tuple[int, float]:
        hp = self.hp
        sample_rate = min(1.0, hp.batch_size / hp.num_sources)
        return hp.epochs * math.ceil(hp.num_sources / min(hp.batch_size, hp.num_sources)), sample_rate

    def noise_plan(self, delta: float) -> NoisePlan:
        """The noise and privacy spec for this defense's target (ε = ∞: no noise)."""
        steps, rate = self._steps()
        if not self.private:
            return NoisePlan(privacy=PrivacySpec.non_private(f"{self.name} at ε = ∞: the DPAR pipeline without noise"))
        planner = plan_sound if self.hp.accounting == "sound" else plan_paper
        with warnings.catch_warnings():
            # calibration probes tiny σ, where opacus notes that its smallest order is optimal
            warnings.filterwarnings("ignore", message=".*Optimal order is the smallest alpha.*")
            return planner(self.variant, self.hp, self.epsilon, delta, steps, rate)

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> DPARModel:
        hp = self.hp
        _validate(hp)
        steps, sample_rate = self._steps()
        plan = self.noise_plan(delta)
        sound = hp.accounting == "sound" and self.variant != "exact"
        device = self.device
        generator = torch.Generator().manual_seed(self.seed)
        noise_generator = torch.Generator(device=device).manual_seed(self.seed + 1)

        # 1. Poisson node sampling of the training graph (train-local ids 0..n_train-1).
        train = split.train
        n_train = len(train)
        train_edges, _ = subgraph(train, dataset.data.edge_index, relabel_nodes=True, num_nodes=dataset.num_nodes)
        priority = torch.randperm(n_train, generator=generator)  # public order (seed only)
        sampled = poisson_sample(n_train, hp.node_sample_rate, generator)
        if sampled.numel() == 0:
            raise DPAuditError("dpar: node sampling kept no training node; raise node_sample_rate")
        graph_edges, _ = subgraph(sampled, train_edges, relabel_nodes=True, num_nodes=n_train)
        # 2. Sources: the first M sampled nodes in the public order (positions in the sampled graph).
        source_pos = torch.argsort(priority[sampled])[: hp.num_sources]
        sources = sampled[source_pos]
        # 3. APPR on the sampled graph, then DP-APPR over the universe.
        appr = appr_ista(graph_edges, len(sampled), source_pos.numpy(), hp.alpha, hp.rho, hp.ista_tol, hp.ista_max_iter)
        if sound:  # universe = all training nodes; a non-sampled candidate has utility 0
            universe_to_train, column_position = torch.arange(n_train), sampled.numpy()
        else:  # the paper's universe: the sampled nodes
            universe_to_train, column_position = sampled, np.arange(len(sampled))
        universe = len(universe_to_train)
        noise_device = device
        if self.variant == "gm":
            cols, vals = dp_appr_gm(
                appr, column_position, universe, hp.top_k, hp.clip_gm, plan.gm_sigma, noise_generator, noise_device
            )
        elif self.variant in ("em0", "em1"):
            cols, vals = dp_appr_em(
                appr,
                column_position,
                universe,
                hp.top_k,
                hp.clip_em,
                plan.gumbel_scale,
                1 if self.variant == "em0" else 2,
                plan.laplace_scale,
                noise_generator,
                noise_device,
            )
        else:
            cols, vals = exact_top_k(appr, column_position, hp.top_k, noise_device)
        valid = cols >= 0
        cols = torch.where(valid, universe_to_train.to(device)[cols.clamp(min=0)], -1)
        # 4. Column bound of Π (Algorithm 2, line 3), then drop candidates that were not sampled.
        if sound:
            cols, vals = bound_columns_sound(cols, vals, hp.column_l1_bound, hp.max_occurrences)
        else:
            vals = clip_columns_l1(cols, vals, hp.column_l1_bound, n_train)
        in_graph = torch.zeros(n_train, dtype=torch.bool, device=device)
        in_graph[sampled.to(device)] = True
        keep = (cols >= 0) & in_graph[cols.clamp(min=0)]
        cols, vals = torch.where(keep, cols, -1), torch.where(keep, vals, 0.0)
        log.debug(
            "%s: %d sampled nodes, %d sources, %d entries in Pi", self.name, len(sampled), len(sources), int(keep.sum())
        )

        # 5. Train the MLP on the sources (Algorithm 2).
        arch = {
            "type": "mlp",
            "in_dim": dataset.num_features,
            "hidden": [hp.hidden],
            "out_dim": dataset.num_classes,
            "dropout": 0.0,
            "act": "relu",
        }
        module = build_architecture(arch).to(device)
        # index the full feature matrix with global ids (no copy of the training rows' features)
        x = dataset.data.x.to(device, torch.float32)
        global_cols = torch.where(cols >= 0, train.to(device)[cols.clamp(min=0)], -1)
        labels = dataset.data.y[train[sources]].to(device)
        train_rows(
            module,
            x,
            global_cols,
            vals.to(torch.float32),
            labels,
            noise_std=plan.sgd_noise_std,
            max_grad_norm=hp.max_grad_norm if plan.clip_gradients else None,
            sample_rate=sample_rate,
            expected_batch=sample_rate * hp.num_sources,
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
                "accounting": hp.accounting if self.private else "none",
                "steps": steps,
                "batch_sample_rate": sample_rate,
                "gumbel_scale": plan.gumbel_scale,
                "laplace_scale": plan.laplace_scale,
                "gm_sigma": plan.gm_sigma,
                "sgd_noise_std": plan.sgd_noise_std,
                "plan": plan.details,
            },
        }
        return DPARModel(module, arch, hp.alpha, hp.power_steps, plan.privacy, card)


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
