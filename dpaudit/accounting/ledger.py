"""The accountant: a ledger of composed mechanisms behind a small interface.

Like opacus' accountants, :class:`PrivacyLedger` has ``step`` (record what the code did) and
``get_epsilon`` (what it costs). Three valid analyses of the same composition are available:

* ``rdp`` — Rényi-DP curves add up, converted with Balle et al. (2020); when every mechanism
  is pure ε-DP the sum of the ε's is also valid and the smaller is taken;
* ``pld`` — privacy loss distributions of dominating pairs convolve (dp-accounting,
  pessimistic discretisation; see :mod:`dpaudit.accounting.pld`);
* ``gaussian`` — when every mechanism is an un-subsampled Gaussian the ledger is exactly μ-GDP
  and the exact Gaussian curve (Balle & Wang 2018) is inverted;
* ``rdp+pld`` — per part, for mixed ledgers whose mechanisms prefer different analyses (e.g.
  DPAR: exponential mechanisms are tightest in RDP through bounded range, the DP-SGD mixture
  in PLD): the mechanisms that are tighter alone under RDP form one part, the others a PLD
  part, and the parts compose by the basic theorem, :math:`\varepsilon = \varepsilon_{rdp}
  (\\delta_1) + \varepsilon_{pld}(\\delta - \\delta_1)`, with δ₁ the best of a fixed grid of
  shares (valid for every share: adaptive basic composition of two (ε, δ) guarantees).

``accountant="auto"`` (the default) reports the smallest of those that apply — the minimum
of valid upper bounds is a valid upper bound; ``"rdp"`` and ``"pld"`` force one analysis.
Guarantees proven directly in (ε, δ) (:class:`RecordedGuarantee`) compose with the rest by
the basic theorem (ε's and δ's add); the rest gets δ minus their δ's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpaudit.accounting.conversion import rdp_to_epsilon
from dpaudit.accounting.mechanisms import EXTENDED_ORDERS, Mechanism, RecordedGuarantee, orders_array
from dpaudit.accounting.pld import DEFAULT_DISCRETIZATION, composed_pld, gaussian_epsilon, pld_epsilon
from dpaudit.accounting.spec import PrivacySpec, Unit
from dpaudit.errors import PrivacyParameterError

ACCOUNTANTS = ("auto", "rdp", "pld")

#: Above this RDP ε the PLD grid (loss range / discretisation) would be needlessly large; the
#: ledger then reports the (valid) RDP value under every accountant.
PLD_MAX_EPSILON = 50.0

LABELS = {
    "rdp": "rdp (Balle et al. 2020 conversion)",
    "pld": "pld (dp-accounting privacy loss distributions, pessimistic, grid {grid:g})",
    "gaussian": "exact gaussian curve (mu-GDP, Balle & Wang 2018)",
    "rdp+pld": "per part: rdp (Balle et al. 2020) for {rdp_part}, pld (dp-accounting, grid {grid:g}) for the "
    "rest, basic composition between the parts",
}

#: Shares δ₁/δ of the RDP part tried by the per-part analysis.
DELTA_SHARES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.98)


def check_accountant(accountant: str) -> str:
    """Validate an accountant choice.

    Args:
        accountant: ``"auto"``, ``"rdp"`` or ``"pld"``.

    Returns:
        ``accountant`` unchanged.

    Raises:
        PrivacyParameterError: any other value.
    """
    if accountant not in ACCOUNTANTS:
        raise PrivacyParameterError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return accountant


@dataclass
class PrivacyLedger:
    """Everything a training run spent, in order.

    Attributes:
        orders: RDP orders (the default grid is extended beyond 1024 automatically when the
            optimum sits at its end, i.e. for ε below ≈ 0.02).
        mechanisms: the recorded mechanisms.
        accountant: ``"auto"`` (tightest valid), ``"rdp"`` or ``"pld"``.
        value_discretization_interval: PLD grid width (coarser = faster and looser, never
            invalid).
    """

    orders: np.ndarray = field(default_factory=orders_array)
    mechanisms: list[Mechanism] = field(default_factory=list)
    accountant: str = "auto"
    value_discretization_interval: float = DEFAULT_DISCRETIZATION

    def __post_init__(self) -> None:
        check_accountant(self.accountant)
        if not self.value_discretization_interval > 0:
            raise PrivacyParameterError("value_discretization_interval must be positive")

    def step(self, mechanism: Mechanism) -> PrivacyLedger:
        """Record one (possibly repeated) mechanism; returns ``self`` for chaining.

        Args:
            mechanism: the mechanism spent.

        Returns:
            This ledger.

        Raises:
            TypeError: ``mechanism`` is not a :class:`~dpaudit.accounting.mechanisms.Mechanism`.
        """
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"expected a Mechanism, got {type(mechanism).__name__}")
        self.mechanisms.append(mechanism)
        return self

    def extend(self, mechanisms) -> PrivacyLedger:
        """Record several mechanisms in order (:meth:`step` each).

        Args:
            mechanisms: iterable of mechanisms.

        Returns:
            This ledger.
        """
        for m in mechanisms:
            self.step(m)
        return self

    def _split(self):
        recorded = [m for m in self.mechanisms if isinstance(m, RecordedGuarantee)]
        composable = [m for m in self.mechanisms if not isinstance(m, RecordedGuarantee)]
        return composable, recorded

    def rdp(self) -> np.ndarray:
        """Composed RDP curve of every mechanism except recorded (ε, δ) guarantees, at :attr:`orders`.

        Returns:
            Array of ε(α), one per order.
        """
        composable, _ = self._split()
        total = np.zeros_like(self.orders)
        for m in composable:
            total = total + m.rdp(self.orders)
        return total

    # ------------------------------------------------------------------ the three analyses
    def _recorded_part(self, delta: float) -> tuple[float, float]:
        """(ε of the recorded guarantees, δ left for the rest)."""
        composable, recorded = self._split()
        rec_eps = sum(m.epsilon for m in recorded)
        remaining = delta - sum(m.delta for m in recorded)
        if not composable and remaining < 0:
            raise PrivacyParameterError(f"recorded guarantees already spend δ = {delta - remaining} > {delta}")
        if composable and remaining <= 0:
            raise PrivacyParameterError(f"no δ left for the composed part: recorded guarantees spend δ > {delta}")
        return rec_eps, remaining

    def _rdp_epsilon(self, composable: list[Mechanism], delta: float) -> tuple[float, float]:
        total = np.zeros_like(self.orders)
        for m in composable:
            total = total + m.rdp(self.orders)
        eps, order = rdp_to_epsilon(total, delta, self.orders)
        default_grid = len(self.orders) > 0 and float(self.orders[-1]) == float(orders_array()[-1])
        if default_grid and math.isfinite(eps) and order == float(self.orders[-1]):
            # The optimum sits at the end of the grid (small ε): try the larger orders.
            extra = np.asarray(EXTENDED_ORDERS, dtype=np.float64)
            more = np.zeros_like(extra)
            for m in composable:
                more = more + m.rdp(extra)
            eps2, order2 = rdp_to_epsilon(np.concatenate([total, more]), delta, np.concatenate([self.orders, extra]))
            if eps2 < eps:
                eps, order = eps2, order2
        pure = [m.pure_epsilon() for m in composable]
        if all(p is not None for p in pure):
            pure_total = float(sum(pure))
            if pure_total <= eps:
                return pure_total, math.inf
        return eps, order

    def pld_grid(self, rdp_epsilon: float) -> float:
        """PLD grid width: ``value_discretization_interval``, refined to ε_rdp/100 (≥ 1e-5) for
        small ε, where a fixed grid's pessimistic rounding would dominate the answer.

        Args:
            rdp_epsilon: ε of the RDP analysis.

        Returns:
            The grid width.
        """
        return min(self.value_discretization_interval, max(1e-5, rdp_epsilon / 100.0))

    def epsilon_by_accountant(self, delta: float, only: str | None = None) -> dict[str, float]:
        """ε at δ under every analysis that applies (recorded guarantees added to each).

        Keys: ``"rdp"`` always; ``"pld"`` when every mechanism has a PLD and the RDP ε is at
        most :data:`PLD_MAX_EPSILON`; ``"rdp+pld"`` when some mechanisms are tighter alone under
        RDP and others under PLD; ``"gaussian"`` when the composed part is exactly μ-GDP.
        ``only="rdp"`` / ``"pld"`` skips the other analyses (RDP is always computed).

        Args:
            delta: target δ, in (0, 1).
            only: ``"rdp"``, ``"pld"`` or ``None`` (all).

        Returns:
            ε by analysis name.

        Raises:
            PrivacyParameterError: δ out of range, or recorded guarantees leave no δ for the rest.
        """
        if not 0.0 < delta < 1.0:
            raise PrivacyParameterError(f"delta must lie in (0, 1), got {delta}")
        composable, _ = self._split()
        rec_eps, remaining = self._recorded_part(delta)
        if not composable:
            return {"rdp": rec_eps}
        rdp_eps, _ = self._rdp_epsilon(composable, remaining)
        out = {"rdp": rec_eps + rdp_eps}
        if only == "rdp":
            return out
        if rdp_eps <= PLD_MAX_EPSILON and all(type(m).pld is not Mechanism.pld for m in composable):
            out["pld"] = rec_eps + pld_epsilon(composable, remaining, self.pld_grid(rdp_eps))
        if only == "pld":
            return out
        if "pld" in out:
            split = self._per_part_epsilon(composable, remaining)
            if split is not None:
                out["rdp+pld"] = rec_eps + split
        mus = [m.gdp_mu() for m in composable]
        if all(mu is not None for mu in mus):
            out["gaussian"] = rec_eps + gaussian_epsilon(math.sqrt(sum(mu * mu for mu in mus)), remaining)
        return out

    def _part_preferences(self, composable: list[Mechanism], delta: float) -> tuple[list, list]:
        """Mechanisms that are tighter alone under RDP, and the others."""
        by_rdp, by_pld = [], []
        for m in composable:
            alone_rdp, _ = self._rdp_epsilon([m], delta)
            grid = self.pld_grid(alone_rdp)
            alone_pld = pld_epsilon([m], delta, grid) if alone_rdp <= PLD_MAX_EPSILON else math.inf
            (by_rdp if alone_rdp < alone_pld else by_pld).append(m)
        return by_rdp, by_pld

    def _per_part_epsilon(self, composable: list[Mechanism], delta: float) -> float | None:
        """ε of the RDP part at δ₁ plus ε of the PLD part at δ − δ₁ (best share), or ``None``
        when every mechanism prefers the same analysis."""
        by_rdp, by_pld = self._part_preferences(composable, delta)
        if not by_rdp or not by_pld:
            return None
        total = np.zeros_like(self.orders)
        for m in by_rdp:
            total = total + m.rdp(self.orders)
        pld = composed_pld(by_pld, self.pld_grid(self._rdp_epsilon(by_pld, delta)[0]))
        best = math.inf
        for share in DELTA_SHARES:
            eps_rdp, _ = rdp_to_epsilon(total, share * delta, self.orders)
            pure = [m.pure_epsilon() for m in by_rdp]
            if all(p is not None for p in pure):
                eps_rdp = min(eps_rdp, float(sum(pure)))
            eps_pld = max(0.0, float(pld.get_epsilon_for_delta((1.0 - share) * delta)))
            best = min(best, eps_rdp + eps_pld)
        return best

    def explain_epsilon(self, delta: float, full: bool = True) -> tuple[float, str, dict[str, float]]:
        """(ε reported under this ledger's accountant, the analysis that produced it, the values
        of the analyses computed — all of them when ``full``).

        Args:
            delta: target δ, in (0, 1).
            full: compute every analysis, not only the chosen accountant's.

        Returns:
            ``(epsilon, analysis, values)``.
        """
        values = self.epsilon_by_accountant(delta, only=None if full or self.accountant == "auto" else self.accountant)
        if self.accountant == "rdp" or len(values) == 1:
            return values["rdp"], "rdp", values
        if self.accountant == "pld":
            if "pld" in values:
                return values["pld"], "pld", values
            return values["rdp"], "rdp", values
        used = min(values, key=lambda k: (values[k], k != "rdp"))
        return values[used], used, values

    def get_epsilon(self, delta: float) -> float:
        """ε spent at δ under this ledger's accountant (δ is shared out among the parts only
        when recorded guarantees exist).

        Args:
            delta: target δ, in (0, 1).

        Returns:
            ε.
        """
        eps, _, _ = self.explain_epsilon(delta, full=False)
        return eps

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float | None]:
        """The RDP analysis only: (ε, optimal order); order ∞ when the pure-DP sum is smaller,
        ``None`` when only recorded guarantees exist.

        Args:
            delta: target δ, in (0, 1).

        Returns:
            ``(epsilon, order)``.
        """
        composable, _ = self._split()
        rec_eps, remaining = self._recorded_part(delta)
        if not composable:
            return rec_eps, None
        eps, order = self._rdp_epsilon(composable, remaining)
        return rec_eps + eps, order

    def gdp_mu(self) -> float | None:
        """μ when every mechanism is an exact Gaussian (μ's compose as a root sum of squares)."""
        mus = [m.gdp_mu() for m in self.mechanisms]
        if not mus or any(mu is None for mu in mus):
            return None
        return math.sqrt(sum(mu * mu for mu in mus))

    def accounting_record(self, analysis: str) -> dict:
        """What :mod:`dpaudit.accounting.verify` needs to redo this ledger's computation.

        Args:
            analysis: the analysis that produced the reported ε.

        Returns:
            ``{"accountant", "analysis", "value_discretization_interval"[, "orders"]}``.
        """
        record = {
            "accountant": self.accountant,
            "analysis": analysis,
            "value_discretization_interval": self.value_discretization_interval,
        }
        if not np.array_equal(self.orders, orders_array()):
            record["orders"] = [float(a) for a in self.orders]
        return record

    def spec(
        self,
        delta: float,
        unit: Unit,
        target_epsilon: float | None = None,
        sound: bool = True,
        notes: list[str] | None = None,
        accountant: str | None = None,
        unaccounted: list[str] | None = None,
    ) -> PrivacySpec:
        """The :class:`PrivacySpec` for everything recorded so far.

        ``accountant`` is a free-text label of how the numbers were proven; by default it names
        the analysis that produced ε (a caller's own label gets that name appended). The ε of
        every analysis is kept in ``epsilon_by_accountant``. ``unaccounted`` lists steps that
        read private data outside this ledger; any entry makes the spec ``sound: false``.

        Args:
            delta: target δ, in (0, 1).
            unit: the protected unit (``"node"`` or ``"edge"``).
            target_epsilon: the run's target ε, or ``None``.
            sound: whether every step is proven.
            notes: free-text notes kept on the spec.
            accountant: caller's label (see above), or ``None``.
            unaccounted: steps outside this ledger that read private data.

        Returns:
            The spec (``sound: false`` when ``unaccounted`` is non-empty).
        """
        eps, used, values = self.explain_epsilon(delta)
        composable, recorded = self._split()
        rdp_part = (
            ", ".join(type(m).__name__ for m in self._part_preferences(composable, delta)[0])
            if (used == "rdp+pld")
            else ""
        )
        label = LABELS[used].format(grid=self.value_discretization_interval, rdp_part=rdp_part)
        if not composable:
            label = "basic composition of (ε, δ) guarantees"
        elif recorded:
            label += " + basic composition with recorded (ε, δ) guarantees"
        if accountant is not None:
            label = accountant if not composable else f"{accountant}; ε by {label}"
        spec = PrivacySpec(
            epsilon=eps,
            delta=delta,
            unit=unit,
            mechanisms=[m.describe() for m in self.mechanisms],
            accountant=label,
            sound=sound,
            target_epsilon=target_epsilon,
            gdp_mu=self.gdp_mu(),
            notes=list(notes or []),
            epsilon_by_accountant=dict(values) if composable else {},
            accounting=self.accounting_record(used if composable else "basic"),
        )
        return spec.mark_unaccounted(*(unaccounted or []))
