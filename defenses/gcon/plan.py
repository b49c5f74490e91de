r"""GCON's privacy plan for one configuration, from public inputs only.

Everything the released spec and the public card say about privacy — Theorem 1's Λ′, β, c_θ,
the descent schedule T and its residual bound, AMP's σ, the ledger records and the note — is a
function of the target (ε, δ), the hyperparameters, the configuration and three numbers that
are public at edge level: c (classes), d (= s·d₁, the width of Z) and n₁ (the rows of the
objective: all nodes with pseudo-labels, else the training nodes; node features, labels and the
node set are public under edge DP, GCON Section III). No edge, and nothing computed from one, is
read here. :meth:`defenses.gcon.GCON._fit` trains with this plan, :meth:`defenses.gcon.GCON.replan`
re-derives it from a saved card, and :meth:`defenses.gcon.GCONModel.verify_privacy` re-derives the
AMP record's schedule with :func:`amp_calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from defenses.gcon.mechanism import (
    DescentSchedule,
    TheoremOneParameters,
    amp_noise_multiplier,
    amp_sensitivity,
    descent_schedule,
    gaussian_delta,
    json_float,
    make_loss,
    sensitivity_psi,
    theorem1_parameters,
)
from defenses.gcon.protocols import Config
from dpaudit.accounting import RecordedGuarantee

THEOREM1_RECORD = "gcon objective perturbation (Theorem 1)"
AMP_RECORD = "gcon AMP output noise (Iyengar et al. 2019; analytic Gaussian)"


@dataclass(frozen=True)
class AMPCalibration:
    """AMP's Gaussian for one schedule: σ = noise multiplier × sensitivity, (ε, δ) its share.

    Attributes:
        schedule: the fixed descent schedule.
        sensitivity: twice its residual bound.
        noise_multiplier: z, from the analytic Gaussian.
        sigma: z × sensitivity.
        epsilon: AMP's ε share.
        delta: the analytic Gaussian's δ at that ε.
    """

    schedule: DescentSchedule
    sensitivity: float
    noise_multiplier: float
    sigma: float
    epsilon: float
    delta: float

    def details(self) -> dict:
        """The ledger record's details (all public): σ, its calibration and the schedule."""
        return {
            "sigma": self.sigma,
            "sensitivity": self.sensitivity,
            "noise_multiplier": self.noise_multiplier,
            **self.schedule.to_dict(),
        }


def amp_calibration(
    params: TheoremOneParameters, blocks: int, residual_tol: float, max_steps: int, epsilon: float, delta: float
) -> AMPCalibration:
    """The schedule of :func:`~defenses.gcon.mechanism.descent_schedule` and the analytic
    Gaussian covering twice its residual bound at AMP's share (``epsilon``, ``delta``).

    Args:
        params: Theorem 1's parameters.
        blocks: s, the propagation steps concatenated.
        residual_tol: the target residual bound.
        max_steps: the cap on T.
        epsilon: AMP's ε share.
        delta: AMP's δ share.

    Returns:
        The calibration.
    """
    schedule = descent_schedule(params, blocks, residual_tol, max_steps)
    sensitivity = amp_sensitivity(schedule.residual_bound)
    multiplier = amp_noise_multiplier(epsilon, delta)
    return AMPCalibration(
        schedule, sensitivity, multiplier, multiplier * sensitivity, epsilon, gaussian_delta(multiplier, epsilon)
    )


@dataclass(frozen=True)
class ConfigurationPlan:
    """Privacy plan of one configuration. ``theorem1`` and ``amp`` are ``None`` when no noise is
    needed: ε = ∞ (``private`` false) or Ψ = 0 (no propagation step reads an edge).

    Attributes:
        private: whether ε is finite.
        target_epsilon: the target ε.
        psi: Ψ(Z).
        strong_convexity: Λ + Λ′ of the objective (the requested Λ without noise).
        theorem1: Theorem 1's parameters, or ``None``.
        amp: AMP's calibration, or ``None``.
    """

    private: bool
    target_epsilon: float
    psi: float
    strong_convexity: float  # Λ + Λ′ of the objective (the requested Λ without noise)
    theorem1: TheoremOneParameters | None
    amp: AMPCalibration | None

    def mechanisms(self) -> list[RecordedGuarantee]:
        """The ledger records, in order (empty when not private)."""
        if not self.private:
            return []
        if self.theorem1 is None:  # Ψ = 0: Θ does not depend on the edges at all
            return [RecordedGuarantee(self.target_epsilon, 0.0, name=THEOREM1_RECORD)]
        spent_epsilon, spent_delta = self.theorem1.guarantee()
        return [
            RecordedGuarantee(spent_epsilon, spent_delta, name=THEOREM1_RECORD, details=self.theorem1_details()),
            RecordedGuarantee(self.amp.epsilon, self.amp.delta, name=AMP_RECORD, details=self.amp.details()),
        ]

    def theorem1_details(self) -> dict:
        """Theorem 1's parameters in JSON form (∞ as ``None``)."""
        return {k: json_float(v) for k, v in self.theorem1.to_dict().items()}

    def card(self) -> dict:
        """The plan's entries of ``card["gcon"]`` (public: derived from the inputs above only)."""
        out = {"psi": self.psi, "regularization_total": self.strong_convexity}
        if self.theorem1 is not None:
            spent_epsilon, spent_delta = self.theorem1.guarantee()
            out["theorem1"] = self.theorem1_details()
            out["theorem1_rederived"] = {"epsilon": spent_epsilon, "delta": spent_delta}
            out["amp"] = {
                "sigma": self.amp.sigma,
                "sensitivity": self.amp.sensitivity,
                "noise_multiplier": self.amp.noise_multiplier,
                "epsilon": self.amp.epsilon,
                "delta": self.amp.delta,
            }
            out["schedule"] = self.amp.schedule.to_dict()
        return out

    def note(self) -> str:
        """The privacy spec's note on how the released Θ is covered (public numbers only)."""
        if self.theorem1 is None:
            return "Ψ(Z) = 0 (all steps are 0): the model reads no edge; recorded at the target ε"
        schedule, amp = self.amp.schedule, self.amp
        return (
            f"Theorem 1 covers the exact minimiser Θ_priv; the released Θ is the end of a fixed schedule: a warm "
            f"start projected onto Theorem 1's ball ‖θ_j‖ ≤ c_θ = {schedule.radius:.4g}, then T = {schedule.steps} "
            f"gradient steps of size 1/L (L = {schedule.smoothness:.4g}, μ = {schedule.strong_convexity:.4g}), so "
            f"‖Θ_T − Θ_priv‖_F ≤ (1 − μ/L)^T·2√c·c_θ = {schedule.residual_bound:.3e} on Theorem 1's good event "
            f"(its complement is inside Theorem 1's δ); AMP (Iyengar et al. 2019) adds N(0, σ²), σ = {amp.sigma:.3e}, "
            f"covering the residual sensitivity {amp.sensitivity:.3e} at (ε, δ) = ({amp.epsilon:.3g}, {amp.delta:.3g})"
        )


def plan_configuration(
    epsilon: float, delta: float, num_classes: int, dim: int, n1: int, config: Config, hp
) -> ConfigurationPlan:
    """The plan of ``config`` at target (``epsilon``, ``delta``): Theorem 1 at (1 − s)(ε, δ),
    AMP at s(ε, δ) (s = ``hp.amp_share``), the schedule from ``hp.residual_tol`` and
    ``hp.descent_steps``. ``hp`` supplies ω, ξ, amp_share, residual_tol and descent_steps.

    Args:
        epsilon: target ε (``inf``: no noise).
        delta: target δ.
        num_classes: c.
        dim: d, the feature dimension of Z.
        n1: n₁, the objective's rows.
        config: the configuration (α, steps, loss, Λ).
        hp: the hyperparameters.

    Returns:
        The plan.
    """
    psi = sensitivity_psi(config.alpha, config.steps)
    private = math.isfinite(epsilon)
    if not private or psi == 0.0:
        return ConfigurationPlan(private, epsilon, psi, config.regularization, None, None)
    share = hp.amp_share
    loss = make_loss(config.loss, num_classes, config.huber_delta)
    params = theorem1_parameters(
        (1.0 - share) * epsilon,
        (1.0 - share) * delta,
        num_classes,
        dim,
        n1,
        config.regularization,
        hp.omega,
        loss.suprema(),
        psi,
        hp.xi,
    )
    amp = amp_calibration(params, len(config.steps), hp.residual_tol, hp.descent_steps, share * epsilon, share * delta)
    return ConfigurationPlan(True, epsilon, psi, params.regularization + params.lambda_prime, params, amp)
