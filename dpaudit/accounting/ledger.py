"""The accountant: a ledger of composed mechanisms behind a small interface.

Like opacus' accountants, :class:`PrivacyLedger` has ``step`` (record what the code did) and
``get_epsilon`` (what it costs). Mechanisms with an RDP curve compose in RDP; pure ε-DP
mechanisms also compose by adding their ε, and the smaller of the two valid bounds is
reported. Guarantees proven directly in (ε, δ) (:class:`RecordedGuarantee`) compose by the
basic theorem (ε's and δ's add).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpaudit.accounting.conversion import rdp_to_epsilon
from dpaudit.accounting.mechanisms import Mechanism, RecordedGuarantee, orders_array
from dpaudit.accounting.spec import PrivacySpec, Unit
from dpaudit.errors import PrivacyParameterError


@dataclass
class PrivacyLedger:
    """Everything a training run spent, in order."""

    orders: np.ndarray = field(default_factory=orders_array)
    mechanisms: list[Mechanism] = field(default_factory=list)

    def step(self, mechanism: Mechanism) -> PrivacyLedger:
        """Record one (possibly repeated) mechanism; returns ``self`` for chaining."""
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"expected a Mechanism, got {type(mechanism).__name__}")
        self.mechanisms.append(mechanism)
        return self

    def extend(self, mechanisms) -> PrivacyLedger:
        for m in mechanisms:
            self.step(m)
        return self

    def _split(self):
        recorded = [m for m in self.mechanisms if isinstance(m, RecordedGuarantee)]
        composable = [m for m in self.mechanisms if not isinstance(m, RecordedGuarantee)]
        return composable, recorded

    def rdp(self) -> np.ndarray:
        composable, _ = self._split()
        total = np.zeros_like(self.orders)
        for m in composable:
            total = total + m.rdp(self.orders)
        return total

    def get_epsilon(self, delta: float) -> float:
        """ε spent at δ (δ is shared out among the parts only when recorded guarantees exist)."""
        eps, _ = self.get_epsilon_and_order(delta)
        return eps

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float | None]:
        composable, recorded = self._split()
        rec_eps = sum(m.epsilon for m in recorded)
        rec_delta = sum(m.delta for m in recorded)
        remaining = delta - rec_delta
        if not composable:
            if remaining < 0:
                raise PrivacyParameterError(f"recorded guarantees already spend δ = {rec_delta} > {delta}")
            return rec_eps, None
        if remaining <= 0:
            raise PrivacyParameterError(f"no δ left for the RDP part: recorded guarantees spend δ = {rec_delta}")
        eps, order = rdp_to_epsilon(self.rdp(), remaining, self.orders)
        pure = [m.pure_epsilon() for m in composable]
        if all(p is not None for p in pure):
            pure_total = float(sum(pure))
            if pure_total <= eps:
                return rec_eps + pure_total, math.inf
        return rec_eps + eps, order

    def gdp_mu(self) -> float | None:
        """μ when every mechanism is an exact Gaussian (μ's compose as a root sum of squares)."""
        mus = [m.gdp_mu() for m in self.mechanisms]
        if not mus or any(mu is None for mu in mus):
            return None
        return math.sqrt(sum(mu * mu for mu in mus))

    def spec(
        self,
        delta: float,
        unit: Unit,
        target_epsilon: float | None = None,
        sound: bool = True,
        notes: list[str] | None = None,
        accountant: str = "rdp (Balle et al. 2020 conversion)",
        unaccounted: list[str] | None = None,
    ) -> PrivacySpec:
        """The :class:`PrivacySpec` for everything recorded so far.

        ``unaccounted`` lists steps that read private data outside this ledger; any entry
        makes the spec ``sound: false``.
        """
        eps = self.get_epsilon(delta)
        spec = PrivacySpec(
            epsilon=eps,
            delta=delta,
            unit=unit,
            mechanisms=[m.describe() for m in self.mechanisms],
            accountant=accountant,
            sound=sound,
            target_epsilon=target_epsilon,
            gdp_mu=self.gdp_mu(),
            notes=list(notes or []),
        )
        return spec.mark_unaccounted(*(unaccounted or []))
