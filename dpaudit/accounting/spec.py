"""The privacy specification every released model carries, and input validation for (ε, δ)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from dpaudit.errors import PrivacyParameterError

Unit = Literal["node", "edge"]
UNITS = ("node", "edge")

#: ``PrivacySpec.protocol`` of a guarantee the user states for their own model
#: (:func:`dpaudit.training.adapters.adapt`): no mechanism dpaudit ran is behind it.
CLAIMED = "claimed"
#: what a spec's ε is (:attr:`PrivacySpec.status`): ``proven`` (sound, every neighbouring graph),
#: ``conditional`` (sound over graphs meeting ``unit_condition`` only), ``claimed`` (the user's
#: statement), ``paper`` (a paper's own analysis), ``unsound`` (a defense's accounting with an
#: unaccounted step) or ``none`` (non-private). ``claimed``, ``paper`` and ``unsound`` are
#: hypotheses: audits test them (a valid lower bound above ε refutes them), never cover them.
STATUSES = ("proven", "conditional", "claimed", "paper", "unsound", "none")
HYPOTHESES = ("claimed", "paper", "unsound")


#: relative slack of "spent ≤ target" (floating-point rounding of the accountant's own number;
#: one tolerance wherever a spent ε is held against its target)
SPENT_RTOL = 1e-9


def within_target(spent: float, target: float) -> bool:
    """Whether a spent ε keeps to its target: ``spent ≤ target · (1 + SPENT_RTOL)`` (∞ only
    within ∞). The one check of "spent ≤ target": training asserts it, private selection asserts
    it, loading refuses a model that fails it.

    Args:
        spent: the accounted ε.
        target: the target ε it was calibrated to.

    Returns:
        Whether ``spent`` is within ``target``.
    """
    return spent <= target * (1 + SPENT_RTOL)


def validate_epsilon(epsilon: float | str | None) -> float:
    """Parse and check a target ε: a positive number or ``inf`` (non-private).

    Args:
        epsilon: a number, a string (``"inf"``, ``"none"``, a number) or ``None`` (∞).

    Returns:
        ε as a float (``math.inf`` for non-private).

    Raises:
        PrivacyParameterError: not a number, NaN, or ≤ 0.
    """
    if epsilon is None:
        return math.inf
    if isinstance(epsilon, str):
        text = epsilon.strip().lower()
        if text in {"inf", "infinity", "none"}:
            return math.inf
        try:
            epsilon = float(text)
        except ValueError:
            raise PrivacyParameterError(f"epsilon must be a positive number or 'inf', got {epsilon!r}") from None
    epsilon = float(epsilon)
    if math.isnan(epsilon) or epsilon <= 0:
        raise PrivacyParameterError(f"epsilon must be > 0 (or inf for no privacy), got {epsilon}")
    return epsilon


def check_unit_epsilon(name: str, unit: str | None, epsilon: float, hint: str = "") -> None:
    """The one rule for a target ε and a defense: a non-private defense (privacy ``unit``
    ``None``) takes only ε = ∞. Decided from the unit alone, so the command line applies it
    before any defense is imported (:func:`dpaudit.app.names.builtin_units`), and
    :meth:`dpaudit.training.defense.Defense.check_epsilon` applies it to every defense.

    Args:
        name: the defense (named in the message).
        unit: its privacy unit (``"node"``, ``"edge"``; ``None``: not private).
        epsilon: a validated target ε (:func:`validate_epsilon`).
        hint: what the command can do instead, appended to the message.

    Raises:
        PrivacyParameterError: a finite ``epsilon`` for a non-private defense.
    """
    if unit is None and math.isfinite(epsilon):
        raise PrivacyParameterError(f"{name} is not a private defense; its epsilon must be inf{hint}")


def auto_delta(population: int) -> float:
    """δ "auto": the largest power of ten strictly below ``1 / population``.

    The population is the number of protected units (nodes for node-level DP, undirected
    edges for edge-level DP). δ < 1/n is the usual requirement that a mechanism which
    publishes one random unit in the clear is not called private.

    Args:
        population: number of protected units (≥ 1).

    Returns:
        δ, a power of ten.

    Raises:
        PrivacyParameterError: ``population`` < 1.
    """
    if population < 1:
        raise PrivacyParameterError("cannot choose delta automatically for an empty graph")
    return 10.0 ** (-(math.floor(math.log10(population)) + 1))


def validate_delta(delta: float | str | None, population: int | None = None) -> float:
    """Parse and check δ ∈ (0, 1); ``"auto"`` needs ``population`` (see :func:`auto_delta`).

    Args:
        delta: a number in (0, 1), ``"auto"`` or ``None`` (auto).
        population: number of protected units, needed for auto.

    Returns:
        δ.

    Raises:
        PrivacyParameterError: not a number, out of (0, 1), or auto without ``population``.
    """
    if delta is None or (isinstance(delta, str) and delta.strip().lower() == "auto"):
        if population is None:
            raise PrivacyParameterError("delta='auto' needs the number of protected units")
        return auto_delta(population)
    try:
        value = float(delta)
    except (TypeError, ValueError):
        raise PrivacyParameterError(f"delta must be a number in (0, 1) or 'auto', got {delta!r}") from None
    if not 0.0 < value < 1.0:
        raise PrivacyParameterError(f"delta must lie strictly between 0 and 1, got {value}")
    return value


def check_delta_population(delta: float, population: int | None, unit: str = "node", force: bool = False) -> None:
    """The δ rule: a δ at or above ``1/population`` is refused unless ``force``.

    A mechanism that publishes one of ``n`` units chosen at random, in the clear, satisfies
    (0, 1/n)-DP, so δ ≥ 1/n promises nothing; dpaudit's ``auto`` δ is the largest power of ten
    strictly below 1/n (:func:`auto_delta`). ``population`` is the **declared** number of
    protected units (nodes for node-level DP, undirected edges for edge-level DP); ``None``
    (nothing declared) skips the check.

    Args:
        delta: the δ asked for, already in (0, 1).
        population: the declared number of protected units, or ``None``.
        unit: ``"node"`` or ``"edge"``, named in the message.
        force: accept such a δ anyway (``--force-delta``).

    Raises:
        PrivacyParameterError: ``delta >= 1/population`` and not ``force``.
    """
    if force or population is None or population < 1 or delta < 1.0 / population:
        return
    raise PrivacyParameterError(
        f"delta {delta:g} is not below 1/n = 1/{population} = {1.0 / population:.3g} (n = the declared {unit}s): "
        f"publishing one {unit} in the clear is (0, 1/n)-DP, so such a δ guarantees nothing; use delta < "
        f"{1.0 / population:.3g} (or auto = {auto_delta(population):g}), or --force-delta to use it anyway"
    )


@dataclass
class PrivacySpec:
    """What a model's privacy guarantee is and how it was proven.

    Attributes:
        epsilon: the spent ε (``math.inf`` for a non-private model).
        delta: the δ at which ``epsilon`` was computed (0 for pure DP or non-private).
        unit: ``"node"`` or ``"edge"`` — what a neighbouring graph differs in; ``None`` for a
            non-private model.
        mechanisms: every mechanism composed, as plain dicts (name, σ, sampling, steps, ...).
        accountant: how the mechanisms were composed and converted (e.g. ``"rdp"``).
        sound: ``False`` when the number follows a paper's own analysis that is not a valid
            bound (kept so the paper's tables can be reproduced, never hidden).
        target_epsilon: the ε the noise was calibrated for (spent ≤ target).
        gdp_mu: μ of a μ-GDP guarantee when the accountant can state one.
        notes: free-form remarks (e.g. how δ was chosen, which inference is private).
        unaccounted: every step that read private data and is not covered by ``epsilon``
            (selection on validation data, clipping norms from private gradients, a paper's
            invalid bound, ...). Non-empty exactly when ``sound`` is ``False``.
        protocol: ``"sound"`` or ``"paper"`` (see :mod:`dpaudit.training.defense`),
            :data:`CLAIMED` for a guarantee the user states for their own model (``sound: false``:
            a hypothesis, neither proven nor a paper's); ``None`` for models that have no
            protocol choice (baselines).
        epsilon_by_accountant: ε at the same δ under every analysis the ledger could apply
            (``"rdp"``, ``"pld"``, ``"gaussian"``); ``epsilon`` is the one ``accountant`` names
            (the smallest under the default ``auto`` accountant). Empty when not computed.
        accounting: how to recompute ``epsilon`` from ``mechanisms``, written by
            :meth:`~dpaudit.accounting.PrivacyLedger.spec`: the ledger's accountant choice
            (``"auto"``, ``"rdp"``, ``"pld"``), the analysis that produced ε (a key of
            ``epsilon_by_accountant``), the PLD grid and, when not the default, the RDP orders.
            :mod:`dpaudit.accounting.verify` uses it on load. Empty for specs not built by a
            ledger (then the analysis is read from the ``accountant`` label).
        public_facts: the sizes the run was allowed to read because they were **declared**
            public before training (:mod:`dpaudit.release`); ``{}`` when nothing was declared.
            Every schedule (q, steps, δ = auto, presets) depends on the data only through these.
        unit_condition: a restriction of the neighbouring relation, when the guarantee holds
            only over some graphs (``"max degree <= 100"``: bounded-degree node DP). ``None``
            for the unrestricted unit. Such a spec covers an attack only where the audited
            graph satisfies the condition, so reports draw no ceiling from it.
    """

    epsilon: float
    delta: float
    unit: Unit | None
    mechanisms: list[dict[str, Any]] = field(default_factory=list)
    accountant: str = "none"
    sound: bool = True
    target_epsilon: float | None = None
    gdp_mu: float | None = None
    notes: list[str] = field(default_factory=list)
    unaccounted: list[str] = field(default_factory=list)
    protocol: str | None = None
    epsilon_by_accountant: dict[str, float] = field(default_factory=dict)
    accounting: dict[str, Any] = field(default_factory=dict)
    public_facts: dict[str, Any] = field(default_factory=dict)
    unit_condition: str | None = None

    @property
    def unit_label(self) -> str | None:
        """The unit as printed: ``node``, ``edge`` or ``node (max degree <= 100)``."""
        if self.unit is None:
            return None
        return self.unit if not self.unit_condition else f"{self.unit} ({self.unit_condition})"

    @property
    def proven(self) -> bool:
        """Whether this spec is a guarantee a ceiling may be drawn from: private, sound and
        over the unrestricted unit."""
        return self.is_private and self.sound and not self.unit_condition

    @property
    def status(self) -> str:
        """What ε is (:data:`STATUSES`): proven, conditional, claimed, paper, unsound or none."""
        if not self.is_private:
            return "none"
        if self.sound:
            return "conditional" if self.unit_condition else "proven"
        if self.protocol == CLAIMED:
            return "claimed"
        return "paper" if self.protocol == "paper" else "unsound"

    @property
    def hypothesis(self) -> bool:
        """Whether ε is an unproven claim that audits test (:data:`HYPOTHESES`): a ceiling drawn
        from it is what the claim allows, and a valid lower bound above it refutes the claim."""
        return self.status in HYPOTHESES and not self.unit_condition

    def __post_init__(self) -> None:
        if self.unaccounted and self.sound:
            raise PrivacyParameterError("a privacy spec that lists unaccounted steps cannot be sound")

    def mark_unaccounted(self, *steps: str) -> PrivacySpec:
        """Record steps outside the accounting; the spec is then ``sound: false``.

        Args:
            *steps: one sentence per unaccounted step (duplicates ignored).

        Returns:
            This spec.
        """
        for step in steps:
            if step not in self.unaccounted:
                self.unaccounted.append(step)
        if self.unaccounted:
            self.sound = False
        return self

    @classmethod
    def non_private(cls, note: str = "trained without any privacy mechanism") -> PrivacySpec:
        """The spec of a model trained without any privacy mechanism (ε = ∞, no unit).

        Args:
            note: the note kept on the spec.

        Returns:
            The spec.
        """
        return cls(epsilon=math.inf, delta=0.0, unit=None, accountant="none", sound=True, notes=[note])

    @property
    def is_private(self) -> bool:
        return math.isfinite(self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ε = ∞ is written as ``null``."""
        return {
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "delta": self.delta,
            "unit": self.unit,
            "mechanisms": self.mechanisms,
            "accountant": self.accountant,
            "sound": self.sound,
            "target_epsilon": (
                self.target_epsilon if self.target_epsilon is not None and math.isfinite(self.target_epsilon) else None
            ),
            "gdp_mu": self.gdp_mu,
            "notes": list(self.notes),
            "unaccounted": list(self.unaccounted),
            "protocol": self.protocol,
            "epsilon_by_accountant": {
                k: (v if math.isfinite(v) else None) for k, v in self.epsilon_by_accountant.items()
            },
            "accounting": dict(self.accounting),
            "public_facts": dict(self.public_facts),
            "unit_condition": self.unit_condition,
        }

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> PrivacySpec:
        """Read a spec from its :meth:`to_dict` form (``null`` ε is ∞).

        Args:
            payload: the JSON object.

        Returns:
            The spec.

        Raises:
            PrivacyParameterError: not an object, an unknown unit, δ outside [0, 1), or unaccounted steps on a sound
                spec.
        """
        if not isinstance(payload, dict):
            raise PrivacyParameterError("privacy spec must be a JSON object")
        eps = payload.get("epsilon")
        unit = payload.get("unit")
        if unit not in (None, *UNITS):
            raise PrivacyParameterError(f"privacy unit must be 'node', 'edge' or null, got {unit!r}")
        delta = float(payload.get("delta", 0.0))
        if not 0.0 <= delta < 1.0:
            raise PrivacyParameterError(f"privacy delta must lie in [0, 1), got {delta}")
        target = payload.get("target_epsilon")
        return cls(
            epsilon=math.inf if eps is None else float(eps),
            delta=delta,
            unit=unit,
            mechanisms=list(payload.get("mechanisms", [])),
            accountant=str(payload.get("accountant", "none")),
            sound=bool(payload.get("sound", True)),
            target_epsilon=None if target is None else float(target),
            gdp_mu=None if payload.get("gdp_mu") is None else float(payload["gdp_mu"]),
            notes=[str(n) for n in payload.get("notes", [])],
            unaccounted=[str(n) for n in payload.get("unaccounted", [])],
            protocol=None if payload.get("protocol") is None else str(payload["protocol"]),
            epsilon_by_accountant={
                str(k): (math.inf if v is None else float(v))
                for k, v in dict(payload.get("epsilon_by_accountant") or {}).items()
            },
            accounting=dict(payload.get("accounting") or {}),
            public_facts=dict(payload.get("public_facts") or {}),
            unit_condition=None if payload.get("unit_condition") is None else str(payload["unit_condition"]),
        )

    def summary(self) -> str:
        """One line: ``(ε, δ)-DP at the <unit> level via <accountant>``, tagged when a claim or unsound."""
        if not self.is_private:
            return "non-private (ε = ∞)"
        if self.status == "claimed":
            tag = " [claimed by the user: a hypothesis, not proven]"
        else:
            tag = "" if self.sound else f" [NOT a sound bound: {len(self.unaccounted)} unaccounted step(s)]"
        return f"({self.epsilon:.4g}, {self.delta:.3g})-DP at the {self.unit_label} level via {self.accountant}{tag}"
