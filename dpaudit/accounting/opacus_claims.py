"""An Opacus run's (ε, δ) claim, recomputed from what its accountant recorded.

Opacus' accountants (``RDPAccountant``, ``PRVAccountant``, ``GaussianAccountant``) keep a
``history`` of ``(noise_multiplier, sample_rate, steps)`` entries — one per run of identical
steps, written by the optimizer's step hook with the σ the optimizer *used* at that step
(``optimizer.noise_multiplier``), whatever ε the script prints. Every entry is T steps of the
Poisson-subsampled Gaussian mechanism (σ, q) under add/remove of one example, which
:class:`~dpaudit.accounting.PoissonSubsampledGaussian` accounts; :func:`claim_from_opacus`
composes them in a :class:`~dpaudit.accounting.PrivacyLedger` (tightest of RDP and PLD) and
compares the result with the ε the user states.

>>> class Recorded:                                          # an accountant's numbers only
...     history = [(2.79, 0.1, 300)]
>>> claim_from_opacus(Recorded(), 1e-5, claimed_epsilon=4.0).supported
True

This reads numbers only: opacus is never imported (an engine or an accountant is read through
its ``accountant`` / ``history`` attributes). It checks the *accounting* of what the optimizer
did, not that the optimizer did it — a loop that adds less noise than its optimizer's
``noise_multiplier`` says is what the gradient canaries (:class:`dpaudit.whitebox.GradientCanaries`)
catch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from dpaudit.accounting.ledger import PrivacyLedger, check_accountant
from dpaudit.accounting.mechanisms import PoissonSubsampledGaussian
from dpaudit.accounting.spec import validate_delta, validate_epsilon
from dpaudit.errors import PrivacyParameterError


@dataclass(frozen=True)
class OpacusClaim:
    """ε of an Opacus run recomputed by dpaudit (:func:`claim_from_opacus`).

    Attributes:
        epsilon: ε at ``delta`` of the recorded history under ``analysis`` (an upper bound).
        delta: the δ asked for.
        history: the accountant's ``(noise_multiplier, sample_rate, steps)`` entries.
        analysis: the ledger's analysis that gave ``epsilon`` (``"rdp"``, ``"pld"`` …).
        claimed_epsilon: the ε the user states, or ``None``.
        supported: ``epsilon <= claimed_epsilon`` (``None`` without a claim): the claim is proven
            for the recorded steps when true; when false dpaudit cannot prove it, and it is a
            hypothesis only.
        message: one line saying so.
    """

    epsilon: float
    delta: float
    history: tuple[tuple[float, float, int], ...]
    analysis: str
    claimed_epsilon: float | None
    supported: bool | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``history`` as lists)."""
        out = asdict(self)
        out["history"] = [list(entry) for entry in self.history]
        return out


def opacus_history(engine_or_accountant) -> tuple[tuple[float, float, int], ...]:
    """The ``(noise_multiplier, sample_rate, steps)`` entries of an Opacus ``PrivacyEngine`` (its
    ``accountant``) or accountant; raises PrivacyParameterError when there is no history, it is
    empty, or an entry is not three numbers of the mechanism's ranges.

    Args:
        engine_or_accountant: an Opacus ``PrivacyEngine`` or accountant.

    Returns:
        The history entries.

    Raises:
        PrivacyParameterError: see above.
    """
    source = getattr(engine_or_accountant, "accountant", engine_or_accountant)
    history = getattr(source, "history", None)
    if history is None:
        raise PrivacyParameterError(
            f"expected an Opacus PrivacyEngine or accountant (with a history), got {type(engine_or_accountant).__name__}"
        )
    entries = []
    for entry in history:
        try:
            sigma, rate, steps = entry
            sigma, rate, steps = float(sigma), float(rate), int(steps)
        except (TypeError, ValueError):
            raise PrivacyParameterError(
                f"an Opacus history entry must be (noise_multiplier, sample_rate, steps), got {entry!r}"
            ) from None
        entries.append((sigma, rate, steps))
    if not entries:
        raise PrivacyParameterError("the Opacus accountant recorded no step: train first, then check the claim")
    return tuple(entries)


def claim_from_opacus(
    engine_or_accountant, delta: float, claimed_epsilon: float | None = None, *, accountant: str = "auto"
) -> OpacusClaim:
    """Recompute the ε of an Opacus run at ``delta`` from its accountant's history (module
    docstring) with dpaudit's ledger (``accountant``: ``"auto"``, ``"rdp"`` or ``"pld"``), and
    say whether ``claimed_epsilon`` is supported.

    Raises:
        PrivacyParameterError: δ outside (0, 1), a claimed ε that is not positive, an unknown
            accountant, or an object without a non-empty history of valid entries (before any
            computation).

    Args:
        engine_or_accountant: an Opacus ``PrivacyEngine`` or accountant.
        delta: the δ at which ε is computed.
        claimed_epsilon: the ε the user states, or ``None``.
        accountant: the ledger's accountant.

    Returns:
        The :class:`OpacusClaim`.
    """
    delta = validate_delta(delta)
    claim = None if claimed_epsilon is None else validate_epsilon(claimed_epsilon)
    check_accountant(accountant)
    history = opacus_history(engine_or_accountant)
    ledger = PrivacyLedger(accountant=accountant)
    for sigma, rate, steps in history:
        ledger.step(PoissonSubsampledGaussian(sigma, rate, steps))
    epsilon, analysis, _ = ledger.explain_epsilon(delta, full=False)
    steps = sum(entry[2] for entry in history)
    sigmas = sorted({entry[0] for entry in history})
    said = (
        f"σ {', '.join(f'{s:.4g}' for s in sigmas)} over {steps} steps: ε = {epsilon:.4g} at δ = {delta:g} ({analysis})"
    )
    if claim is None:
        supported, message = None, said
    elif epsilon <= claim:
        supported, message = True, f"claim ε = {claim:g} supported: {said}"
    else:
        supported = False
        message = f"claim ε = {claim:g} NOT supported (a hypothesis, not a guarantee): {said}"
    if math.isinf(epsilon):
        message += " (no finite bound)"
    return OpacusClaim(
        epsilon=float(epsilon),
        delta=delta,
        history=history,
        analysis=analysis,
        claimed_epsilon=claim,
        supported=supported,
        message=message,
    )
