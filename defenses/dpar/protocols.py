"""What ``protocol=paper`` and ``protocol=sound`` change, side by side: the schedule, the noise
calibration and the privacy spec (see the package docstring of :mod:`defenses.dpar`).

* :func:`schedule` / :func:`sound_schedule` — batch rates and steps (``paper``: from the sampled
  count |S|; ``sound``: from :func:`expected_rows`, round(q′n̂) of the **declared** training-set
  size n̂, and M·K pair terms at λq — never the real n).
* :func:`plan_dpar` — the whole plan of a run (schedule, noise, the card's ``dpar`` section), shared by
  training and by the load-time re-planning of a saved card (:meth:`dpaudit.training.defense.Defense.replan`).
* :func:`plan_sound` — DP-APPR + the mixture-of-Gaussians DP-SGD of a node's removed terms,
  amplified by q′ node sampling; ``sound: true``.
* :func:`plan_paper` — the paper's Theorems 1–3 with q′ scaling; ``sound: false`` and every
  unaccounted step listed (:func:`paper_unaccounted`).

Training rows differ too (:mod:`defenses.dpar.mechanism`): ``paper`` trains Π (DP-APPR rows +
identity rows, every column of the whole matrix rescaled,
:func:`~defenses.dpar.mechanism.assemble_rows`), ``sound`` identity and pair terms (:func:`~defenses.dpar.mechanism.pair_terms`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from defenses.dpar.appr import paper_em_epsilon, paper_gm_sigma, paper_strong_composition_epsilon
from defenses.dpar.inference import inference_card
from defenses.dpar.mechanism import affected_slots_bound, sgd_step_mechanism
from dpaudit.accounting import (
    ExponentialMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    Mechanism,
    PoissonSubsampledGaussian,
    PrivacyLedger,
    PrivacySpec,
    amplify_by_subsampling,
)
from dpaudit.accounting.mechanisms import NODE_SAMPLING_AMPLIFICATION
from dpaudit.accounting.verify import Verification
from dpaudit.errors import PrivacyParameterError
from dpaudit.training.dpsgd import noise_for_plan

if TYPE_CHECKING:
    from defenses.dpar import DPARHyperparameters


#: Name of the ledger record that wraps the inner ledger of ``sound`` (amplification by q′).
AMPLIFICATION = NODE_SAMPLING_AMPLIFICATION


def schedule(hp: DPARHyperparameters, rows: int) -> tuple[int, float]:
    """(steps T, Poisson row rate q) for ``rows`` training rows: q = min(1, B/rows),
    T = epochs·⌈rows/min(B, rows)⌉ (the reference's 200·⌈|S|/60⌉).

    Args:
        hp: the hyperparameters (``batch_size`` B, ``epochs``).
        rows: training rows (at least 1 is used).

    Returns:
        ``(steps, sample_rate)``.
    """
    rows = max(1, int(rows))
    rate = min(1.0, hp.batch_size / rows)
    return hp.epochs * math.ceil(rows / min(hp.batch_size, rows)), rate


def expected_rows(hp: DPARHyperparameters, declared_pool: int) -> int:
    """n̄ = round(q′·n̂): the expected number of sampled nodes of a pool of the declared size n̂
    (the ``sound`` schedule's identity terms; it never reads the real pool or sample).

    Args:
        hp: the hyperparameters (``node_sample_rate`` q′).
        declared_pool: n̂, the declared training-set size.

    Returns:
        n̄, at least 1.
    """
    return max(1, round(hp.node_sample_rate * int(declared_pool)))


def sound_schedule(hp: DPARHyperparameters, identity_rows: int) -> tuple[int, float, float, float]:
    """(steps T, identity rate q, pair rate q_p = λq, expected batch) of ``sound``, from public
    counts only: n̄ identity terms at rate q and at most M·K pair terms at rate λq, with
    q = min(1, B/(n̄ + λMK)) so that the expected batch is B (or everything), and
    T = epochs·⌈(n̄ + λMK)/B⌉.

    Args:
        hp: the hyperparameters (B, epochs, M, K, λ).
        identity_rows: n̄, the expected identity terms.

    Returns:
        ``(steps, identity rate, pair rate, expected batch)``.
    """
    weighted = identity_rows + hp.pair_sample_share * hp.num_sources * hp.top_k
    rate = min(1.0, hp.batch_size / weighted)
    steps = hp.epochs * math.ceil(weighted / min(hp.batch_size, weighted))
    return steps, rate, hp.pair_sample_share * rate, rate * weighted


@dataclass
class NoisePlan:
    """Noise of one run and the privacy it buys (computed before training; data-independent).

    Attributes:
        gumbel_scale: DP-APPR-EM's Gumbel scale β (0: unused).
        laplace_scale: option II's Laplace scale b (0: unused).
        gm_sigma: DP-APPR-GM's Gaussian σ (0: unused).
        sgd_noise_std: DP-SGD's noise std on the clipped gradient sum.
        clip_gradients: whether DP-SGD clips (a private run).
        privacy: the privacy spec the noise buys.
        details: the calibration's intermediate numbers (recorded in the card's ``plan``).
    """

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


def _recorded(recorded: dict | None, key: str, unit: float) -> float | None:
    """A saved plan's noise ``key`` in units of ``unit`` (the calibrated multiplier), or ``None``."""
    value = (recorded or {}).get(key)
    return None if not isinstance(value, (int, float)) or isinstance(value, bool) else float(value) / unit


def plan_sound(
    variant: str,
    hp: DPARHyperparameters,
    epsilon: float,
    delta: float,
    steps: int,
    sample_rate: float,
    recorded: dict | None = None,
    pair_rate: float | None = None,
) -> NoisePlan:
    """Calibrate DP-APPR to ``appr_budget_ratio`` of the inner budget, then DP-SGD to the rest,
    so that the Poisson-node-sampling-amplified total is ≤ ε (module docstring, ``sound``).
    ``recorded``: a saved card's ``dpar`` section, whose noise scales are reused where they meet
    the calibration's contract (:func:`dpaudit.training.dpsgd.noise_for_plan`).

    Args:
        variant: ``em0``, ``em1`` or ``gm``.
        hp: the hyperparameters.
        epsilon: target ε.
        delta: δ (must be below q′).
        steps: DP-SGD steps.
        sample_rate: q, the identity terms' Poisson rate.
        recorded: a saved card's ``dpar`` section, or ``None``.
        pair_rate: q_p, the pair terms' Poisson rate (``None``: q).

    Returns:
        The noise plan with its sound spec (inner ledger, then the amplification record).

    Raises:
        PrivacyParameterError: δ ≥ q′, or no noise meets the target.
    """
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
        s = noise_for_plan(
            appr_target,
            inner_delta,
            lambda s: _appr_mechanisms("gm", hp, s * c1),
            recorded=_recorded(recorded, "gm_sigma", c1),
        )
        plan.gm_sigma = s * c1
        appr = _appr_mechanisms("gm", hp, plan.gm_sigma)
    else:
        share = hp.em_value_share if variant == "em1" else 0.0
        s = noise_for_plan(
            appr_target * (1 - share),
            inner_delta,
            lambda s: _appr_mechanisms("em0", hp, s * c2),
            recorded=_recorded(recorded, "gumbel_scale", c2),
        )
        plan.gumbel_scale = s * c2
        if variant == "em1":
            s2 = noise_for_plan(
                appr_target * share,
                inner_delta,
                lambda s: [LaplaceMechanism(s * c2, c2, hp.top_k * hp.num_sources)],
                recorded=_recorded(recorded, "laplace_scale", c2),
            )
            plan.laplace_scale = s2 * c2
        appr = _appr_mechanisms(variant, hp, plan.gumbel_scale, plan.laplace_scale)
    affected = affected_slots_bound(hp.max_occurrences, hp.top_k)
    c = hp.max_grad_norm

    def all_mechanisms(s: float) -> list[Mechanism]:
        return [*appr, sgd_step_mechanism(s * c, c, affected, sample_rate, steps, pair_rate)]

    s = noise_for_plan(inner_target, inner_delta, all_mechanisms, recorded=_recorded(recorded, "sgd_noise_std", c))
    plan.sgd_noise_std = s * c
    mechanisms = all_mechanisms(s)
    inner = PrivacyLedger().extend(mechanisms)
    inner_eps, inner_analysis, _ = inner.explain_epsilon(inner_delta, full=False)
    appr_eps = PrivacyLedger().extend(appr).get_epsilon(inner_delta)
    total_eps, _ = amplify_by_subsampling(inner_eps, inner_delta, q_node)
    details.update(inner_epsilon=inner_eps, appr_epsilon_alone=appr_eps, affected_slots=affected)
    plan.details = details
    described = [m.describe() for m in mechanisms] + [
        {
            "mechanism": AMPLIFICATION,
            "sample_rate": q_node,
            "inner_epsilon": inner_eps,
            "inner_delta": inner_delta,
            "accounting": inner.accounting_record(inner_analysis),
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
            f"sound DPAR accountant: every sampled node is one identity term, and each of the M={hp.num_sources} "
            f"public source slots adds <= K={hp.top_k} pair terms (its label, a selected node's features); at most "
            f"D={hp.max_occurrences} entries per column of the released rows, so removing a node removes at most "
            f"{affected} terms and changes no other; Poisson term sampling q={sample_rate:.4g} over {steps} steps "
            "(schedule from the declared training-set size, not from the real pool or the sampled count)",
            "the declared size n̂ is the data universe: node-level DP holds between training sets of at most n̂ "
            "nodes (the DP-APPR output space has n̂ slots); a larger pool is not a valid input and is refused before "
            "any work, a domain of the declaration (e.g. a benchmark's node set), not a restriction on neighbours "
            "inside it",
            "the cap (and option II's value gate) reads the released DP-APPR rows alone: post-processing",
            f"delta inside node sampling = {inner_delta:g}; DP-APPR alone spends eps={appr_eps:.4g} of the inner "
            f"{inner_eps:.4g}",
            inference_card(hp.power_steps)["note"],
        ],
    )
    return plan


def paper_unaccounted(variant: str, row_epsilon: float) -> list[str]:
    """Every step of the ``paper`` protocol that its accounting does not cover, in plain words.

    Args:
        variant: ``em0``, ``em1`` or ``gm``.
        row_epsilon: the per-row ε of the paper's composition (GM at ε ≥ 1 adds a line).

    Returns:
        One line per unaccounted step.
    """
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
    variant: str,
    hp: DPARHyperparameters,
    epsilon: float,
    delta: float,
    steps: int,
    sample_rate: float,
    recorded: dict | None = None,
) -> NoisePlan:
    """The paper's computation (Theorems 1–3, q′ scaling as in Theorem 2), noise calibrated to the
    target under it; ``sound = False`` with :func:`paper_unaccounted` listed.

    ε_APPR: the M rows share ``appr_budget_ratio``·ε/q′ by the strong composition theorem as the
    paper inverts it (δ_pr = δ/(2q′)); ε_SGD: RDP of the Poisson-subsampled Gaussian (q, z, T) at
    δ_sgd = δ/(2q′) (the reference's δ = 0.001/q′ for δ = 0.002), noise std z·τ·C; reported
    ε = q′(ε_APPR + ε_SGD), δ = q′(δ_pr + δ_sgd). ``recorded``: as for :func:`plan_sound`.

    Args:
        variant: ``em0``, ``em1`` or ``gm``.
        hp: the hyperparameters.
        epsilon: target ε.
        delta: δ.
        steps: DP-SGD steps.
        sample_rate: q = B/|S|.
        recorded: a saved card's ``dpar`` section, or ``None``.

    Returns:
        The noise plan with its ``sound: false`` spec.

    Raises:
        PrivacyParameterError: δ/(2q′) ≥ 1.
    """
    q_node, m, k = hp.node_sample_rate, hp.num_sources, hp.top_k
    inner_eps, inner_delta = epsilon / q_node, delta / q_node
    eps_pr, eps_sgd = hp.appr_budget_ratio * inner_eps, (1 - hp.appr_budget_ratio) * inner_eps
    delta_pr = delta_sgd = inner_delta / 2.0
    if not delta_sgd < 1:
        raise PrivacyParameterError(f"dpar (paper protocol): δ/(2q′) = {delta_sgd:g} must be below 1")
    delta_row = delta_pr / (2 * m)
    row_eps = paper_strong_composition_epsilon(eps_pr, m, delta_pr)
    plan = NoisePlan(clip_gradients=True)
    appr_record: dict[str, Any] = {
        "mechanism": f"DPAR Theorem {3 if variant == 'gm' else 1}",
        "rows": m,
        "epsilon": eps_pr,
        "delta": delta_pr,
    }
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
    # The paper's SGD budget is an RDP (moments) computation; keep it RDP so its Table 1 reproduces.
    z = noise_for_plan(
        eps_sgd,
        delta_sgd,
        lambda s: PoissonSubsampledGaussian(s, sample_rate, steps),
        accountant="rdp",
        recorded=_recorded((recorded or {}).get("plan"), "noise_multiplier", 1.0),
    )
    sgd = PoissonSubsampledGaussian(z, sample_rate, steps, name="dp-sgd, Theorem 2 read with sensitivity tau*C")
    sgd_spent = PrivacyLedger(accountant="rdp").step(sgd).get_epsilon(delta_sgd)
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
            inference_card(hp.power_steps)["note"],
        ],
        unaccounted=paper_unaccounted(variant, row_eps),
    )
    return plan


@dataclass
class DPARPlan:
    """A DPAR run's plan: its candidate universe, DP-SGD schedule and noise, fixed before the
    private data is read (``sound``; ``paper`` reads the sampled count |S|, listed unaccounted).

    ``universe``: number of DP-APPR candidate slots — ``sound``: the declared training-set size
    n̂ (pool nodes fill the first slots, the rest are candidates of utility 0 that are never in
    the graph); ``paper``: ``None`` (the sampled nodes, the paper's choice). ``rows``: the row
    count the schedule is computed for (n̄ = round(q′n̂), resp. |S|).

    Attributes:
        variant: ``em0``, ``em1``, ``gm`` or ``exact``.
        protocol: ``sound`` or ``paper``.
        universe: DP-APPR candidate slots (``sound``: n̂; ``paper``: ``None``).
        rows: the row count the schedule is computed for.
        steps: DP-SGD steps T.
        sample_rate: q, the identity (or row) Poisson rate.
        noise: the noise and the spec it buys.
        pair_rate: ``sound``: the pair terms' Poisson rate λq.
        pair_rows: ``sound``: at most M·K pair terms.
    """

    variant: str
    protocol: str
    universe: int | None
    rows: int
    steps: int
    sample_rate: float
    noise: NoisePlan
    pair_rate: float | None = None  # sound: the pair terms' Poisson rate λq
    pair_rows: int = 0  # sound: at most M·K pair terms

    @property
    def expected_batch(self) -> float:
        """The public normaliser of the noisy gradient sum: the expected batch of the schedule's
        rows (q·n̄ + q_p·MK, resp. q·|S|)."""
        return self.sample_rate * self.rows + (self.pair_rate or 0.0) * self.pair_rows

    def card(self) -> dict[str, Any]:
        """``card["dpar"]``: the plan only; what sampling measured goes to the owner's record."""
        section: dict[str, Any] = {"variant": self.variant, "protocol": self.protocol}
        if self.protocol == "sound":
            section.update(declared_pool=self.universe, expected_rows=self.rows, pair_sample_rate=self.pair_rate)
        section.update(
            steps=self.steps,
            batch_sample_rate=self.sample_rate,
            expected_batch=self.expected_batch,
            gumbel_scale=self.noise.gumbel_scale,
            laplace_scale=self.noise.laplace_scale,
            gm_sigma=self.noise.gm_sigma,
            sgd_noise_std=self.noise.sgd_noise_std,
            plan=dict(self.noise.details),
        )
        return section


def plan_dpar(
    variant: str,
    hp: DPARHyperparameters,
    protocol: str,
    epsilon: float,
    delta: float,
    *,
    declared_pool: int | None = None,
    sampled: int | None = None,
    recorded: dict | None = None,
) -> DPARPlan:
    """The plan of a run (ε = ∞: no noise). ``sound`` needs ``declared_pool`` (n̂) and schedules
    :func:`expected_rows` of it; ``paper`` schedules the ``sampled`` count |S| as the authors do.
    ``recorded``: a saved card's ``dpar`` section when re-planning it (:func:`plan_sound`).

    Args:
        variant: ``em0``, ``em1``, ``gm`` or ``exact``.
        hp: the hyperparameters.
        protocol: ``sound`` or ``paper``.
        epsilon: target ε (``inf``: no noise).
        delta: δ.
        declared_pool: n̂ (``sound``).
        sampled: |S|, the sampled count (``paper``).
        recorded: a saved card's ``dpar`` section, or ``None``.

    Returns:
        The plan.

    Raises:
        PrivacyParameterError: the protocol's count is missing, or the calibration fails.
    """
    if protocol == "sound":
        if declared_pool is None:
            raise PrivacyParameterError("dpar (sound) plans its schedule from a declared training-set size")
        universe, rows = int(declared_pool), expected_rows(hp, declared_pool)
        steps, rate, pair_rate, _ = sound_schedule(hp, rows)
        pair_rows, extra = hp.num_sources * hp.top_k, {"pair_rate": pair_rate}
    else:
        if sampled is None:
            raise PrivacyParameterError("dpar (paper) schedules the sampled count |S|")
        universe, rows = None, max(1, int(sampled))
        (steps, rate), pair_rate, pair_rows, extra = schedule(hp, rows), None, 0, {}
    if math.isinf(epsilon):
        noise = NoisePlan(privacy=PrivacySpec.non_private(f"dpar-{variant} at ε = ∞: the DPAR pipeline without noise"))
    else:
        planner = plan_paper if protocol == "paper" else plan_sound
        with warnings.catch_warnings():
            # calibration probes tiny σ, where opacus notes that its smallest order is optimal
            warnings.filterwarnings("ignore", message=".*Optimal order is the smallest alpha.*")
            noise = planner(variant, hp, epsilon, delta, steps, rate, recorded=recorded, **extra)
    return DPARPlan(variant, protocol, universe, rows, steps, rate, noise, pair_rate, pair_rows)


def verify_privacy(privacy: PrivacySpec, card: dict[str, Any]) -> Verification:
    r"""Load-time check of a DPAR spec against its records (:mod:`dpaudit.accounting.verify`).

    ``sound``: the records are the inner mechanisms (DP-APPR, the mixture DP-SGD) followed by
    the amplification record. The inner ledger is recomputed at δ/q′ under its recorded
    accountant and must give the recorded inner ε; then ε = ln(1 + q′(e^{ε_in} − 1)) and
    δ = q′·δ_in must be the stated (ε, δ). q′ must be the card's ``node_sample_rate`` and the
    DP-SGD record must be the mixture-of-Gaussians pair over d = 1 + K + D removed terms of norm C
    (the card's D, K and C).

    A privately selected model (``card["selection"]``) records one
    :class:`~dpaudit.accounting.PrivateSelection` instead, recomputed by
    :func:`~dpaudit.accounting.verify.verify_spec`; its candidates' plans are re-derived on load
    by :func:`dpaudit.training.private_selection.replan_selection`.

    ``paper``: the paper's arithmetic is redone — ε_pr = ratio·ε_target/q′ (the record's), the
    per-row ε by DPAR's strong composition, σ (GM) or the selection ε (EM) from it, the DP-SGD
    ε at δ_sgd under RDP (the paper's accounting, recomputed), and ε = q′(ε_pr + ε_SGD),
    δ = q′(δ_pr + δ_sgd). What the paper leaves unaccounted stays listed, not verified.

    Args:
        privacy: the saved spec.
        card: the public card (hyperparameters, ``dpar`` section, selection).

    Returns:
        The verification, with the recomputed ε.

    Raises:
        IntegrityError: on any mismatch (one line).
    """
    from dpaudit.accounting.verify import check_claims, check_ledger_epsilon, close, refuse, verify_spec
    from dpaudit.release.model import card_protocol

    check_claims(privacy, "node", card_protocol(card))
    if not privacy.is_private:
        return verify_spec(privacy, "node", card_protocol(card))
    hp = card.get("hyperparameters") or {}
    q_node = float(hp.get("node_sample_rate", 0.09))
    records = list(privacy.mechanisms)
    if not records:
        return verify_spec(privacy, "node", card_protocol(card))
    if "selection" in card:
        # select=private (dpaudit.training.private_selection): one selection record, recomputed here from
        # its candidates' records; the load-time re-plan re-derives every candidate from the card
        if len(records) != 1 or records[0].get("mechanism") != "PrivateSelection":
            raise refuse("a privately selected DPAR spec records exactly one private selection")
        return verify_spec(privacy, "node", card_protocol(card))
    if records[-1].get("mechanism") == AMPLIFICATION:
        if privacy.protocol == "paper":
            raise refuse("a protocol=paper DPAR spec with the sound protocol's amplification record")
        amp = records[-1]
        q, inner_delta, inner_eps = (float(amp[k]) for k in ("sample_rate", "inner_delta", "inner_epsilon"))
        if not close(q, q_node, 1e-9):
            raise refuse(f"amplification sample rate q′ = {q:g}, the card's node_sample_rate is {q_node:g}")
        if not close(privacy.delta, q * inner_delta):
            raise refuse(f"δ = {privacy.delta:.3g} stated, q′·δ_in = {q * inner_delta:.3g}")
        affected = affected_slots_bound(int(hp.get("max_occurrences", 4)), int(hp.get("top_k", 2)))
        for record in records[:-1]:
            if record.get("mechanism") != "SensitivityMixtureGaussian":
                continue
            if len(record.get("support", ())) != affected + 1:
                raise refuse(
                    f"the DP-SGD mixture ranges over {len(record['support']) - 1} terms of a node, "
                    f"the card's 1 + K + D = {affected}"
                )
            if record.get("analysis") != "mixture-of-gaussians" or record.get("sensitivity_per_term") != float(
                hp.get("max_grad_norm", 1.0)
            ):
                raise refuse("the DP-SGD record is not the mixture-of-Gaussians pair of removed terms of norm C")
            section = card.get("dpar") or {}
            rate, pair_rate = (float(section.get(key) or -1.0) for key in ("batch_sample_rate", "pair_sample_rate"))
            ok = 0 < rate <= 1 and 0 < pair_rate <= 1
            law = sgd_step_mechanism(1.0, 1.0, affected, rate, 1, pair_rate).probabilities if ok else ()
            if len(law) != len(record["probabilities"]) or not all(
                close(float(a), b) for a, b in zip(record["probabilities"], law)
            ):
                raise refuse("the DP-SGD mixture's law is not Bernoulli(q) * Binomial(K + D, q_p) at the card's rates")
        accounting = dict(amp.get("accounting") or {})
        recomputed, used, _, notes = check_ledger_epsilon(records[:-1], inner_eps, inner_delta, accounting)
        total, _ = amplify_by_subsampling(recomputed, inner_delta, q)
        if not close(privacy.epsilon, total):
            raise refuse(
                f"stated ε = {privacy.epsilon:.6g}, amplifying the recomputed inner ε = {recomputed:.6g} "
                f"by q′ = {q:g} gives {total:.6g}"
            )
        return Verification(
            "recomputed",
            f"ε = {total:.4g} at δ = {privacy.delta:.3g} recomputed: inner ledger of {len(records) - 1} mechanism(s) "
            f"({used}) amplified by Poisson node sampling q′ = {q:g}: matches",
            ["ε", "δ", "inner ε", "q′ = node_sample_rate", "terms of a node = 1 + K + D", "unit", "protocol/sound"],
            notes,
            total,
        )
    # paper protocol: [DPAR Theorem 1|3 record, DP-SGD record with its own (ε, δ)]
    if privacy.sound or len(records) != 2 or not str(records[0].get("mechanism", "")).startswith("DPAR Theorem"):
        raise refuse("a DPAR spec records either the sound amplification ledger or the paper's two records")
    appr, sgd = dict(records[0]), dict(records[1])
    target = privacy.target_epsilon if privacy.target_epsilon is not None else card.get("target_epsilon")
    ratio = float(hp.get("appr_budget_ratio", 0.5))
    eps_pr = float(appr.get("epsilon", ratio * float(target) / q_node))
    if target is not None and not close(eps_pr, ratio * float(target) / q_node):
        raise refuse(f"ε_APPR = {eps_pr:.6g} recorded, appr_budget_ratio·ε_target/q′ = {ratio * target / q_node:.6g}")
    delta_sgd = float(sgd.pop("delta"))
    sgd_eps = float(sgd.pop("epsilon"))
    delta_pr = float(appr.get("delta", delta_sgd))
    m = int(appr["rows"])
    row_eps = paper_strong_composition_epsilon(eps_pr, m, delta_pr)
    if not close(float(appr["row_epsilon"]), row_eps):
        raise refuse(f"per-row ε = {appr['row_epsilon']} recorded, strong composition gives {row_eps:.6g}")
    if not close(float(appr["row_delta"]), delta_pr / (2 * m)):
        raise refuse(f"per-row δ = {appr['row_delta']} recorded, δ_pr/(2M) = {delta_pr / (2 * m):.6g}")
    if appr["mechanism"] == "DPAR Theorem 3":
        sigma = paper_gm_sigma(row_eps, delta_pr / (2 * m), float(hp.get("clip_gm", 0.01)))
        if not close(float(appr["sigma"]), sigma):
            raise refuse(f"DP-APPR-GM σ = {appr['sigma']} recorded, Theorem 3 gives {sigma:.6g}")
    else:
        share = float(hp.get("em_value_share", 0.5)) if "value_epsilon" in appr else 0.0
        selection = paper_em_epsilon((1 - share) * row_eps, int(hp.get("top_k", 2)), delta_pr / (2 * m))
        if not close(float(appr["selection_epsilon"]), selection):
            raise refuse(f"selection ε = {appr['selection_epsilon']} recorded, Theorem 1 gives {selection:.6g}")
    recomputed, _, _, notes = check_ledger_epsilon([sgd], sgd_eps, delta_sgd, {"accountant": "rdp", "analysis": "rdp"})
    reported = q_node * (eps_pr + recomputed)
    if not close(privacy.epsilon, reported):
        raise refuse(f"stated ε = {privacy.epsilon:.6g}, the paper's q′(ε_APPR + ε_SGD) = {reported:.6g}")
    if not close(privacy.delta, q_node * (delta_pr + delta_sgd)):
        raise refuse(
            f"stated δ = {privacy.delta:.3g}, the paper's q′(δ_pr + δ_sgd) = {q_node * (delta_pr + delta_sgd):.3g}"
        )
    return Verification(
        "recomputed",
        f"ε = {reported:.4g} at δ = {privacy.delta:.3g} recomputed by the paper's own accounting (Theorems 1-3, "
        "q′ scaling; NOT a sound bound): matches",
        ["ε", "δ", "per-row ε/δ", "DP-APPR noise", "DP-SGD ε (rdp)", "unit", "protocol/sound"],
        [*notes, f"{len(privacy.unaccounted)} unaccounted step(s) (sound: false)"],
        reported,
    )
