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
   guarantee covers the training graph only.

Shapes: Π is stored row-sparse as ``columns`` [rows, K] (node ids, −1 = empty slot) and
``values`` [rows, K]; features x [n, F]; f_θ(x) [n, C]; a batch of b rows gathers [b, K, F].

Package layout: :mod:`~defenses.dpar.appr` (ISTA, DP-APPR mechanisms, the paper's formulas),
:mod:`~defenses.dpar.mechanism` (Π: cap, column rescaling, identity rows; the affected-row
mixture), :mod:`~defenses.dpar.protocols` (schedule, noise calibration and spec of ``paper`` and
``sound`` side by side), :mod:`~defenses.dpar.training` (Algorithm 2), :mod:`~defenses.dpar.model`
(f_θ, Eq. 4, the released model); this module holds the hyperparameters and the defenses.

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

``sound`` (default) keeps everything from ``paper`` that is sound — training set (APPR rows +
identity rows), network, schedule, column rescaling to exactly τ, split support, inference —
and proves a guarantee for the exact sampling and noise the code performs:

* Public schedule: with n̂ the **declared** training-set size (:mod:`dpaudit.release`; the real
  pool size n is private at node level: one node more or less changes it) and n̄ = round(q′n̂)
  the expected number of sampled nodes, q = B/n̄ and T = epochs·⌈n̄/B⌉; the gradient sum is
  divided by the expected batch q·n̄. Nothing of the schedule reads n or |S|, so neighbouring
  pools of n and n − 1 nodes run the same schedule and publish the same plan.
* DP-APPR rows are computed over a universe of n̂ candidate slots fixed by the declaration
  (:func:`~defenses.dpar.mechanism.candidate_universe`): pool node i is slot i, a candidate that
  was not sampled, or a slot beyond the pool, has utility 0 and is dropped after the mechanism.
  Neighbouring pools therefore share the output space: removing node u turns its slot into a
  candidate outside the pool, and the remaining nodes' slots are relabelled by a fixed bijection
  (the indices after u shift by one), under which the mechanisms below are equivariant — their
  noise is i.i.d. over slots. The declaration must bound the pool: a private run on a pool larger
  than n̂ is refused before any work (a failed declaration, not a data-dependent choice within
  it). Every entry lies in [0, C₂] (EM), resp. every row is a non-negative vector of
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
  (an absent row). ``tests/test_dpar.py`` runs the pool logic of ``fit``
  (:func:`~defenses.dpar.mechanism.training_matrix`) on a pool of n and of n − 1 nodes with the
  same released rows (slots relabelled as above), measures the changed clipped gradients — the
  bound D + K + 2 is attained there — and checks that both pools get the same plan.
* Node sampling that keeps no node is not refused (a refusal would be an event outside the
  accountant): the run then takes its T steps on noise alone.
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
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch_geometric.utils import subgraph

from defenses.baselines import defense_from_card
from defenses.dpar.appr import appr_ista, dp_appr_em, dp_appr_gm, exact_top_k
from defenses.dpar.mechanism import (
    affected_slots_bound,
    assemble_rows,
    candidate_universe,
    cap_column_occurrences,
    column_l1_norms,
    normalize_columns_l1,
    poisson_sample,
    sgd_step_mechanism,
    slots_of,
    training_matrix,
)
from defenses.dpar.model import INFERENCE_NOTE, DPARModel, DPARNet, build_network, power_iteration
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
from dpaudit.accounting.verify import refuse
from dpaudit.datasets import GraphDataset
from dpaudit.defense import Defense, PrivateHyperparameters
from dpaudit.dpsgd import plan_mismatch
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.registry import register_defense
from dpaudit.release import declared_train_size, require_declared
from dpaudit.splits import Split

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
    "normalize_columns_l1",
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
]

log = logging.getLogger(__name__)


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


class _DPAR(Defense):
    """Shared pipeline; subclasses fix the DP-APPR ``variant`` (em0, em1, gm or exact)."""

    unit = "node"
    hyperparameters_class = DPARHyperparameters
    variant: ClassVar[str] = "em0"

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
            self.variant, self.hp, self.protocol_name, self.epsilon if self.private else math.inf, delta,
            declared_pool=declared_pool, sampled=sampled, recorded=recorded,
        )  # fmt: skip

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
        hp = self.hp
        _validate(hp)
        protocol = self.protocol_name
        device = self.device
        # sound: everything public is planned before the private data is read
        plan = self.plan(delta, declared_pool=self.declared_pool(dataset, split)) if protocol == "sound" else None
        generator = torch.Generator().manual_seed(self.seed)
        noise_generator = torch.Generator().manual_seed(self.seed + 1)  # CPU: CUDA runs draw the same numbers

        # 1. Poisson node sampling of the training graph (pool ids 0..n_train-1). An empty sample is
        #    not refused (that would be an event outside the accountant): training is then noise only.
        train = split.train
        n_train = len(train)
        train_edges = split.edge_index_for(dataset, "train")
        train_edges, _ = subgraph(train, train_edges, relabel_nodes=True, num_nodes=dataset.num_nodes)
        priority = torch.randperm(n_train, generator=generator)  # public order (seed only)
        sampled = poisson_sample(n_train, hp.node_sample_rate, generator)
        sampled = sampled[torch.argsort(priority[sampled])]  # sampled nodes in the public order
        graph_edges, _ = subgraph(sampled, train_edges, relabel_nodes=True, num_nodes=n_train)
        if plan is None:  # paper: the schedule of the private sample size, as the authors run it
            plan = self.plan(delta, sampled=len(sampled))
        noise = plan.noise
        # 2. Sources = the first M sampled nodes (the others get identity rows); the DP-APPR candidates.
        m = min(hp.num_sources, len(sampled))
        universe = candidate_universe(protocol, sampled, n_train, plan.universe)
        column_position = slots_of(universe, n_train)[sampled].numpy()  # sampled-graph node → slot
        # 3. APPR of the sources on the sampled graph, then DP-APPR over the universe's slots.
        appr = appr_ista(graph_edges, len(sampled), np.arange(m), hp.alpha, hp.rho, hp.ista_tol, hp.ista_max_iter)
        slots = len(universe)
        if self.variant == "gm":
            cols, vals = dp_appr_gm(
                appr, column_position, slots, hp.top_k, hp.clip_gm, noise.gm_sigma, noise_generator, device
            )
        elif self.variant in ("em0", "em1"):
            option = 1 if self.variant == "em0" else 2
            cols, vals = dp_appr_em(
                appr, column_position, slots, hp.top_k, hp.clip_em, noise.gumbel_scale, option, noise.laplace_scale,
                noise_generator, device,
            )  # fmt: skip
        else:
            cols, vals = exact_top_k(appr, column_position, hp.top_k, device)
        # 4. Π: the protocol's column handling in slot space, identity rows appended, slots → pool ids.
        row_nodes, cols, vals = training_matrix(
            cols, vals, sampled, hp.num_sources, universe, n_train,
            protocol=protocol, bound=hp.column_l1_bound, max_occurrences=hp.max_occurrences,
        )  # fmt: skip

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
            steps=plan.steps,
            lr=hp.lr,
            generator=generator,
            noise_generator=noise_generator,
            progress=self.name,
        )
        card = {"inference": {"private": False, "note": INFERENCE_NOTE}, "dpar": plan.card()}
        model = DPARModel(module, arch, hp.alpha, hp.power_steps, noise.privacy, card, hp.self_loops)
        model.record["dpar"] = {  # measured on the private pool: the owner's record only
            "sampled_nodes": len(sampled),
            "appr_rows": m,
            "identity_rows": len(sampled) - m,
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
