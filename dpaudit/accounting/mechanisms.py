r"""Privacy mechanisms as Rényi-DP curves and privacy loss distributions.

Each mechanism knows its RDP curve :math:`\varepsilon(\alpha)` over a grid of orders
(Mironov 2017), its privacy loss distribution (PLD, :meth:`Mechanism.pld`, a dominating pair
discretised pessimistically by dp-accounting, see :mod:`dpaudit.accounting.pld`) and, when it
is pure ε-DP, its ε. Curves of composed mechanisms add up (RDP composition, Mironov Prop. 1);
PLDs convolve. The closed forms and the subsampling analyses come from opacus, dp-accounting
and autodp; the graph-specific term (a Gaussian whose sensitivity is random,
:class:`SensitivityMixtureGaussian`) is ours.

The accountant must match the sampler the code uses:

* :class:`PoissonSubsampledGaussian` — every example joins a batch independently with
  probability q (opacus' ``DPDataLoader``); add/remove-one neighbours (Mironov et al. 2019).
* :class:`FixedSizeSubsampledGaussian` — a batch of exactly m of n examples drawn without
  replacement; replace-one neighbours (Wang, Balle & Kasiviswanathan 2019, Thm 27).

Both analyses are kept for every mechanism: :class:`~dpaudit.accounting.PrivacyLedger`
reports the tightest valid one and the others beside it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
from scipy.special import logsumexp

from dpaudit.errors import PrivacyParameterError

#: the record name of amplification by Poisson node sampling (DPAR's outer step, Balle et al. 2018,
#: Thm 8): an (ε, δ) statement with no Rényi curve, so composition that needs one drops it at q′ = 1
NODE_SAMPLING_AMPLIFICATION = "amplification by Poisson node sampling"

#: Default RDP orders: dense near 1 (large ε), sparse far out (small ε, tiny δ).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 20.0 for x in range(1, 40)]
    + [3.0 + x / 4.0 for x in range(0, 28)]
    + [float(a) for a in range(10, 64)]
    + [64.0, 80.0, 96.0, 128.0, 160.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0]
)

#: Orders beyond 1024, used by the ledger only when the optimum sits at the end of
#: :data:`DEFAULT_ORDERS` (ε below ≈ 0.02): they are expensive for subsampled mechanisms.
EXTENDED_ORDERS: tuple[float, ...] = (1536.0, 2048.0, 3072.0, 4096.0, 6144.0, 8192.0, 12288.0, 16384.0)


def orders_array(orders=None) -> np.ndarray:
    """Rényi orders as a float64 array.

    Args:
        orders: orders to use; ``None`` gives :data:`DEFAULT_ORDERS`.

    Returns:
        1-D float64 array of the orders.
    """
    return np.asarray(DEFAULT_ORDERS if orders is None else orders, dtype=np.float64)


def _check_positive(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise PrivacyParameterError(f"{name} must be a positive finite number, got {value}")
    return value


def _check_count(name: str, value: int) -> int:
    if int(value) != value or value < 0:
        raise PrivacyParameterError(f"{name} must be a non-negative integer, got {value}")
    return int(value)


@dataclass(frozen=True)
class Mechanism(ABC):
    """A mechanism applied ``count`` times; subclasses give its RDP curve.

    Attributes:
        name: label of the mechanism in the ledger (each subclass declares it, with a default, among its fields).
    """

    @abstractmethod
    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """

    def pure_epsilon(self) -> float | None:
        """ε of a pure ε-DP mechanism (all applications composed), else ``None``."""
        return None

    def gdp_mu(self) -> float | None:
        """μ when the mechanism is exactly μ-GDP (un-subsampled Gaussian), else ``None``."""
        return None

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications
        composed), or ``None`` when the mechanism has none (then the ledger uses RDP).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid.

        Returns:
            A ``PrivacyLossDistribution``, or ``None`` in this base class.
        """
        return None

    def describe(self) -> dict:
        """Ledger record of the mechanism: its class name and every public dataclass field.

        Returns:
            Dict with ``"mechanism"`` (class name) and the field values; :func:`mechanism_from_record` inverts it.
        """
        record = {"mechanism": type(self).__name__}
        record.update({k: v for k, v in asdict(self).items() if not k.startswith("_")})
        return record


@dataclass(frozen=True)
class GaussianMechanism(Mechanism):
    r"""Gaussian mechanism N(f(D), σ²I) with L2 sensitivity Δ, applied ``count`` times.

    RDP: :math:`\varepsilon(\alpha) = \text{count}\cdot\alpha\Delta^2 / (2\sigma^2)`;
    exactly μ-GDP with :math:`\mu = \sqrt{\text{count}}\,\Delta/\sigma` (Dong et al. 2019).

    Attributes:
        sigma: noise standard deviation σ (> 0).
        sensitivity: L2 sensitivity Δ (> 0).
        count: number of applications composed (≥ 0).
        name: label in the ledger.
    """

    sigma: float
    sensitivity: float = 1.0
    count: int = 1
    name: str = "gaussian"

    def __post_init__(self):
        _check_positive("sigma", self.sigma)
        _check_positive("sensitivity", self.sensitivity)
        _check_count("count", self.count)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        a = orders_array(orders)
        return self.count * a * self.sensitivity**2 / (2.0 * self.sigma**2)

    def gdp_mu(self) -> float:
        """μ of the composed mechanism, which is exactly μ-GDP: √count·Δ/σ.

        Returns:
            μ (float).
        """
        return math.sqrt(self.count) * self.sensitivity / self.sigma

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import gaussian_pld

        return gaussian_pld(self.sigma, self.sensitivity, value_discretization_interval, 1.0, self.count)


@dataclass(frozen=True)
class PoissonSubsampledGaussian(Mechanism):
    r"""DP-SGD step with Poisson sampling at rate q and noise multiplier σ, ``steps`` times.

    RDP of the sampled Gaussian mechanism (Mironov, Talwar & Zhang 2019), computed by opacus'
    ``compute_rdp`` (dp-accounting beyond order 1024, where opacus overflows); sensitivity is
    folded into σ (σ = noise std / clipping norm). PLD of the add/remove dominating pair
    :math:`(\mathcal N(0,\sigma^2), (1-q)\mathcal N(0,\sigma^2) + q\mathcal N(1,\sigma^2))` and
    its reverse (Zhu, Dong & Wang 2022; Koskela et al. 2020), composed ``steps`` times.

    Attributes:
        sigma: noise multiplier (noise std divided by the clipping norm, > 0).
        sample_rate: Poisson sampling probability q in (0, 1].
        steps: number of steps composed (≥ 0).
        name: label in the ledger.
    """

    sigma: float
    sample_rate: float
    steps: int
    name: str = "dp-sgd (poisson)"

    def __post_init__(self):
        _check_positive("sigma", self.sigma)
        if not 0.0 < self.sample_rate <= 1.0:
            raise PrivacyParameterError(f"sample_rate must lie in (0, 1], got {self.sample_rate}")
        _check_count("steps", self.steps)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        a = orders_array(orders)
        out = np.empty_like(a)
        small = a <= 1024.0
        if small.any():
            key = tuple(float(x) for x in a[small])
            out[small] = _poisson_rdp_cached(float(self.sample_rate), float(self.sigma), key)
        if (~small).any():
            large = tuple(float(x) for x in a[~small])
            out[~small] = _poisson_rdp_large_orders(float(self.sample_rate), float(self.sigma), large)
        return self.steps * out

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import gaussian_pld

        return gaussian_pld(self.sigma, 1.0, value_discretization_interval, self.sample_rate, self.steps)


@lru_cache(maxsize=256)
def _poisson_rdp_cached(q: float, sigma: float, orders: tuple[float, ...]) -> tuple[float, ...]:
    """One step of opacus' sampled-Gaussian RDP (cached: a ledger often holds the same (q, σ)
    twice, e.g. GAP's encoder and classifier, and load-time verification recomputes it)."""
    from opacus.accountants.analysis.rdp import compute_rdp

    return tuple(float(v) for v in compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(orders)))


@lru_cache(maxsize=256)
def _poisson_rdp_large_orders(q: float, sigma: float, orders: tuple[float, ...]) -> tuple[float, ...]:
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian

    return tuple(float(v) for v in _compute_rdp_poisson_subsampled_gaussian(q, sigma, list(orders)))


@lru_cache(maxsize=256)
def _wor_rdp_cached(q: float, sigma: float, orders: tuple[float, ...]) -> tuple[float, ...]:
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_sample_wor_gaussian

    return tuple(float(v) for v in _compute_rdp_sample_wor_gaussian(q, sigma, list(orders)))


@dataclass(frozen=True)
class FixedSizeSubsampledGaussian(Mechanism):
    r"""Gaussian step on a batch of exactly ``batch_size`` of ``population`` examples drawn
    without replacement, ``steps`` times; replace-one neighbouring relation.

    ``sigma`` is the noise std divided by the clipping norm C (as for DP-SGD). Under
    replace-one, swapping one example moves a sum of clipped terms by up to 2C, so
    ``sensitivity`` (in units of C) defaults to 2 and the analysis runs with the effective
    noise multiplier σ/2. RDP from Wang, Balle & Kasiviswanathan (2019), Theorem 27, via
    dp-accounting.

    PLD: if :math:`(P, Q)` dominates the base mechanism under replace-one, then
    :math:`((1-\gamma)P + \gamma Q,\ P)` and its reverse dominate the mechanism run on a
    without-replacement sample of rate :math:`\gamma = m/n` under replace-one (Zhu, Dong &
    Wang 2022, subsampling without replacement; its privacy profile is Balle, Barthe &
    Gaboardi 2018, Thm 10). With the Gaussian pair :math:`P = \mathcal N(0, \sigma^2)`,
    :math:`Q = \mathcal N(\text{sensitivity}, \sigma^2)` this is dp-accounting's Poisson
    add/remove pair at rate γ with noise σ/sensitivity — the same σ/2 convention as the RDP.

    Attributes:
        sigma: noise std divided by the clipping norm C (> 0).
        batch_size: batch size m, in (0, population].
        population: number of examples n the batch is drawn from.
        steps: number of steps composed (≥ 0).
        sensitivity: replace-one sensitivity in units of C (default 2).
        name: label in the ledger.
    """

    sigma: float
    batch_size: int
    population: int
    steps: int
    sensitivity: float = 2.0
    name: str = "dp-sgd (fixed-size, without replacement)"

    def __post_init__(self):
        _check_positive("sigma", self.sigma)
        _check_positive("sensitivity", self.sensitivity)
        _check_count("steps", self.steps)
        if not 0 < self.batch_size <= self.population:
            raise PrivacyParameterError("batch_size must lie in (0, population]")

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        a = tuple(float(x) for x in orders_array(orders))
        q = self.batch_size / self.population
        return self.steps * np.asarray(_wor_rdp_cached(q, float(self.sigma / self.sensitivity), a))

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import gaussian_pld

        gamma = self.batch_size / self.population
        return gaussian_pld(self.sigma, self.sensitivity, value_discretization_interval, gamma, self.steps)


MIXTURE_ANALYSES = ("convexity", "mixture-of-gaussians")

#: Largest order at which the mixture-of-Gaussians RDP is integrated numerically (∞ above:
#: a valid RDP bound that the conversion simply never picks).
MOG_RDP_MAX_ORDER = 256.0


@lru_cache(maxsize=256)
def _mog_rdp_per_step(
    sigma: float, sensitivities: tuple[float, ...], probabilities: tuple[float, ...], orders: tuple[float, ...]
) -> tuple[float, ...]:
    r"""RDP of one mixture-of-Gaussians step, both directions, by quadrature.

    With :math:`c_\rho = s_\rho/\sigma`, :math:`p = \mathcal N(0,1)`, :math:`q = \sum_\rho
    p_\rho \mathcal N(c_\rho,1)`: :math:`\max\{D_\alpha(q\|p), D_\alpha(p\|q)\}`, where
    :math:`(\alpha-1)D_\alpha(a\|b) = \ln\int a^\alpha b^{1-\alpha}`. Each integrand is a
    smooth bump of unit curvature (its log is :math:`-x^2/2` plus a function of slope at most
    :math:`\alpha c_{\max}`) lying within :math:`\pm\alpha c_{\max}`; the trapezoid rule
    with step 0.05 over that range plus 14 standard deviations is exact to far below 1e-10."""
    c = np.asarray(sensitivities, dtype=np.float64) / sigma
    logw = np.log(np.asarray(probabilities, dtype=np.float64))
    cmax = float(c.max())
    a = np.asarray(orders, dtype=np.float64)
    usable = a <= MOG_RDP_MAX_ORDER
    out = np.full(a.shape, math.inf)
    if not usable.any():
        return tuple(out)
    reach = float(a[usable].max()) * cmax + 14.0
    h = 0.05
    x = np.arange(-reach, reach + cmax + h, h)
    log_p = -0.5 * x * x
    log_q = logsumexp(logw[:, None] - 0.5 * (x[None, :] - c[:, None]) ** 2, axis=0)
    au = a[usable][:, None]
    norm = math.log(h) - 0.5 * math.log(2 * math.pi)
    remove = logsumexp(au * log_q[None, :] + (1.0 - au) * log_p[None, :], axis=1) + norm
    add = logsumexp(au * log_p[None, :] + (1.0 - au) * log_q[None, :], axis=1) + norm
    out[usable] = np.maximum(np.maximum(remove, add), 0.0) / (a[usable] - 1.0)
    return tuple(float(v) for v in out)


@dataclass(frozen=True)
class SensitivityMixtureGaussian(Mechanism):
    r"""Gaussian mechanism whose sensitivity is itself random ("multi-term" sensitivity).

    One protected unit can affect a random number ρ of the terms summed in a noisy gradient
    (ρ = the number of its affected terms that land in the batch), each term moving the sum
    by at most ``sensitivity_per_term`` = s; Gaussian noise of std σ; ``steps`` repetitions.
    ``support`` and ``probabilities`` give ρ's law (hypergeometric for fixed-size batches,
    binomial for Poisson slots). Two analyses (``analysis``), recorded in :meth:`describe`:

    ``"convexity"`` (default; DP-GNN, Daigavane et al. 2022, Theorem 1). Conditioned on the
    sampler's coins the release is a Gaussian whose mean moves by at most :math:`s\rho`. By
    joint convexity of the hockey-stick divergence,
    :math:`H_\gamma(\mathbb E_B P_B \| \mathbb E_B Q_B) \le \mathbb E_B H_\gamma(P_B\|Q_B)`, the
    *ρ-revealed* pair :math:`P^* = \sum_\rho p_\rho[\rho]\otimes\mathcal N(0,\sigma^2)`,
    :math:`Q^* = \sum_\rho p_\rho[\rho]\otimes\mathcal N(s\rho,\sigma^2)` dominates for every
    γ, so it composes (Zhu, Dong & Wang 2022, Thm 10). Valid for **any** sampler whose law
    does not depend on the data (with or without replacement) and any neighbouring relation
    under which each of the ρ terms moves by ≤ s (replace-type changes: s = 2C). Its RDP is
    Theorem 1 exactly,

    .. math::
        \varepsilon(\alpha) = \frac{1}{\alpha-1}
            \ln \mathbb{E}_\rho\!\left[\exp\!\left(\alpha(\alpha-1)\frac{s^2\rho^2}{2\sigma^2}\right)\right],

    and its PLD is the p-mixture of Gaussian PLDs (a tighter conversion of the *same* pair).
    It is loose: the adversary is told ρ, so the ε-amplification of subsampling (the q² in
    RDP) is lost — only δ scales with the sampling rate.

    ``"mixture-of-gaussians"`` (Choquette-Choo et al. 2023, the MoG mechanism): the pair
    :math:`(\mathcal N(0,\sigma^2),\ \sum_\rho p_\rho\mathcal N(s\rho,\sigma^2))` and its
    reverse. It dominates only when (a) neighbours differ by **adding/removing** the unit, whose
    contribution is :math:`\sum_{j\in S}x_j` with :math:`\|x_j\|\le s` while every other term is
    identical, and (b) the set S of its terms that enter the sum is drawn **independently** of
    the other terms (e.g. every term Poisson-sampled on its own). Then the rest of the sum is
    independent common noise (post-processing removes it) and aligning all :math:`x_j` at
    norm s is the worst case (their dominating-pair theorem). It does **not** apply to (1)
    fixed-size batches drawn without replacement — which other terms fill the batch depends
    on ρ, so the rest of the sum is correlated with ρ — nor to (2) replace-type changes
    (terms :math:`g_j \to g'_j` present on both sides): neither side is then the bare noise
    and we know no proof that the pair with s = 2C dominates for more than one term. Callers
    must choose it only under (a) and (b); the default stays ``"convexity"``. RDP of the pair
    is integrated numerically (orders ≤ 256) and its PLD built by dp-accounting.

    Attributes:
        sigma: Gaussian noise std σ (> 0).
        sensitivity_per_term: s, how far one affected term moves the sum (> 0).
        support: values ρ can take (numbers of affected terms, ≥ 0).
        probabilities: P(ρ) for each support point (non-negative, sum 1).
        steps: number of repetitions composed (≥ 0).
        name: label in the ledger.
        analysis: ``"convexity"`` (default) or ``"mixture-of-gaussians"`` (see above for when it is valid).
    """

    sigma: float
    sensitivity_per_term: float
    support: tuple[float, ...]
    probabilities: tuple[float, ...]
    steps: int
    name: str = "gaussian with random sensitivity"
    analysis: str = "convexity"

    def __post_init__(self):
        _check_positive("sigma", self.sigma)
        _check_positive("sensitivity_per_term", self.sensitivity_per_term)
        _check_count("steps", self.steps)
        p = np.asarray(self.probabilities, dtype=np.float64)
        if len(self.support) != len(p) or len(p) == 0:
            raise PrivacyParameterError("support and probabilities must be non-empty and of equal length")
        if np.any(p < 0) or abs(p.sum() - 1.0) > 1e-9:
            raise PrivacyParameterError("probabilities must be non-negative and sum to 1")
        if np.any(np.asarray(self.support, dtype=np.float64) < 0):
            raise PrivacyParameterError("support (numbers of affected terms) must be non-negative")
        if self.analysis not in MIXTURE_ANALYSES:
            raise PrivacyParameterError(f"analysis must be one of {MIXTURE_ANALYSES}, got {self.analysis!r}")

    def _sensitivities(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(s·ρ, p_ρ) over the support points with positive probability."""
        pairs = [
            (float(self.sensitivity_per_term * r), float(p)) for r, p in zip(self.support, self.probabilities) if p > 0
        ]
        return tuple(s for s, _ in pairs), tuple(p for _, p in pairs)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        a = orders_array(orders)
        if self.analysis == "mixture-of-gaussians":
            sens, probs = self._sensitivities()
            if max(sens) == 0.0:
                return np.zeros_like(a)
            key = tuple(float(x) for x in a)
            return self.steps * np.asarray(_mog_rdp_per_step(float(self.sigma), sens, probs, key))
        a = a[:, None]
        rho = np.asarray(self.support, dtype=np.float64)[None, :]
        p = np.asarray(self.probabilities, dtype=np.float64)[None, :]
        keep = p > 0
        exponent = a * (a - 1.0) * (self.sensitivity_per_term * rho) ** 2 / (2.0 * self.sigma**2)
        log_mgf = logsumexp(np.where(keep, exponent, -np.inf), b=np.where(keep, p, 1.0), axis=1)
        return self.steps * log_mgf / (a[:, 0] - 1.0)

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import mixture_of_gaussians_pld, revealed_mixture_pld

        sens, probs = self._sensitivities()
        build = mixture_of_gaussians_pld if self.analysis == "mixture-of-gaussians" else revealed_mixture_pld
        return build(self.sigma, sens, probs, value_discretization_interval, self.steps)

    def describe(self) -> dict:
        """Ledger record: the fields, the whole law of ρ and a reference for the analysis used.

        Returns:
            Dict as :meth:`Mechanism.describe` plus ``support``, ``probabilities`` (lists) and ``analysis_reference``.
        """
        record = super().describe()
        # The whole law is kept: load-time verification rebuilds the mechanism from it.
        record["support"] = [float(s) for s in self.support]
        record["probabilities"] = [float(s) for s in self.probabilities]
        record["analysis_reference"] = (
            "mixture-of-Gaussians dominating pair (Choquette-Choo et al. 2023): add/remove, independently sampled terms"
            if self.analysis == "mixture-of-gaussians"
            else "joint convexity, rho revealed (DP-GNN Theorem 1): any sampler, any relation"
        )
        return record


@dataclass(frozen=True)
class LaplaceMechanism(Mechanism):
    r"""Laplace mechanism with scale b and L1 sensitivity Δ, ``count`` times: pure (count·Δ/b)-DP.

    RDP from Mironov (2017), Prop. 6, via autodp (tighter than going through pure DP).

    Attributes:
        scale: Laplace scale b (> 0).
        sensitivity: L1 sensitivity Δ (> 0).
        count: number of applications composed (≥ 0).
        name: label in the ledger.
    """

    scale: float
    sensitivity: float = 1.0
    count: int = 1
    name: str = "laplace"

    def __post_init__(self):
        _check_positive("scale", self.scale)
        _check_positive("sensitivity", self.sensitivity)
        _check_count("count", self.count)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        from autodp.rdp_bank import RDP_laplace

        b = self.scale / self.sensitivity
        return self.count * np.array([RDP_laplace({"b": b}, float(x)) for x in orders_array(orders)])

    def pure_epsilon(self) -> float:
        """Pure ε of the composition, count·Δ/b.

        Returns:
            ε (float).
        """
        return self.count * self.sensitivity / self.scale

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import laplace_pld

        return laplace_pld(self.scale, self.sensitivity, value_discretization_interval, self.count)


@dataclass(frozen=True)
class PureDPMechanism(Mechanism):
    r"""Any ε-DP mechanism applied ``count`` times.

    RDP from Bun & Steinke (2016), Lemma 4 (via autodp's ``RDP_pureDP``), capped at ε. PLD of
    the randomized-response pair, which dominates every ε-DP mechanism (Kairouz, Oh &
    Viswanath 2015), so its composition is the optimal one for pure-DP parts.

    Attributes:
        epsilon: ε of one application (> 0).
        count: number of applications composed (≥ 0).
        name: label in the ledger.
    """

    epsilon: float
    count: int = 1
    name: str = "pure-dp"

    def __post_init__(self):
        _check_positive("epsilon", self.epsilon)
        _check_count("count", self.count)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        from autodp.rdp_bank import RDP_pureDP

        return self.count * np.array([RDP_pureDP({"eps": self.epsilon}, float(x)) for x in orders_array(orders)])

    def pure_epsilon(self) -> float:
        """Pure ε of the composition, count·ε.

        Returns:
            ε (float).
        """
        return self.count * self.epsilon

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import pure_dp_pld

        return pure_dp_pld(self.epsilon, value_discretization_interval, self.count)


@dataclass(frozen=True)
class ExponentialMechanism(Mechanism):
    r"""An ε-DP exponential mechanism (sampling ∝ exp(ε·u/(2Δ)), or equivalently the argmax of
    the scores plus Gumbel(2Δ/ε) noise), applied ``count`` times.

    An ε-DP exponential mechanism is ε-bounded-range and hence (ε²/8)-zCDP (Cesar & Rogers
    2021, Lemma 3.2), i.e. RDP α·ε²/8; we take the pointwise minimum with the pure-DP curve.
    Releasing the top-k of one-shot Gumbel-noised scores is exactly k peeling exponential
    mechanisms (Durfee & Rogers 2019), so use ``count = k``.

    PLD: the randomized-response pair of ε-DP (valid for any ε-DP mechanism, not specific to
    the bounded-range property; the ledger also keeps the bounded-range RDP and reports the
    smaller ε).

    Attributes:
        epsilon: ε of one application (> 0).
        count: number of applications composed (≥ 0; k for a one-shot top-k).
        name: label in the ledger.
    """

    epsilon: float
    count: int = 1
    name: str = "exponential"

    def __post_init__(self):
        _check_positive("epsilon", self.epsilon)
        _check_count("count", self.count)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed).

        Args:
            orders: Rényi orders α > 1; ``None`` uses :data:`DEFAULT_ORDERS`.

        Returns:
            Array of ε(α), one per order.
        """
        a = orders_array(orders)
        bounded_range = a * self.epsilon**2 / 8.0
        pure = PureDPMechanism(self.epsilon, 1).rdp(a)
        return self.count * np.minimum(bounded_range, pure)

    def pure_epsilon(self) -> float:
        """Pure ε of the composition, count·ε.

        Returns:
            ε (float).
        """
        return self.count * self.epsilon

    def pld(self, value_discretization_interval: float):
        """dp-accounting ``PrivacyLossDistribution`` of a dominating pair (all applications composed).

        Args:
            value_discretization_interval: width of dp-accounting's privacy-loss grid (smaller is tighter and slower).

        Returns:
            The pessimistically discretised ``PrivacyLossDistribution``.
        """
        from dpaudit.accounting.pld import pure_dp_pld

        return pure_dp_pld(self.epsilon, value_discretization_interval, self.count)


@dataclass(frozen=True)
class RecordedGuarantee(Mechanism):
    """A guarantee proven outside RDP (e.g. GCON's objective perturbation, Theorem 1), recorded
    as (ε, δ) so it appears in the ledger. It cannot be composed through RDP.

    Attributes:
        epsilon: the proven ε.
        delta: the proven δ.
        name: label in the ledger.
        details: free-form parameters of the proof, kept in the record.
    """

    epsilon: float
    delta: float
    name: str = "recorded"
    details: dict = field(default_factory=dict)

    def rdp(self, orders=None) -> np.ndarray:
        """Always raises: an (ε, δ) guarantee has no RDP curve.

        Args:
            orders: ignored.

        Raises:
            PrivacyParameterError: always.
        """
        raise PrivacyParameterError(f"{self.name}: an (ε, δ) guarantee has no RDP curve; compose it in (ε, δ)")


#: Every mechanism class a ledger record can name (``record["mechanism"]``), for
#: :func:`mechanism_from_record`.
MECHANISM_CLASSES: dict[str, type[Mechanism]] = {
    cls.__name__: cls
    for cls in (
        GaussianMechanism,
        PoissonSubsampledGaussian,
        FixedSizeSubsampledGaussian,
        SensitivityMixtureGaussian,
        LaplaceMechanism,
        PureDPMechanism,
        ExponentialMechanism,
        RecordedGuarantee,
    )
}


def mechanism_from_record(record: dict) -> Mechanism:
    """Rebuild a mechanism from its :meth:`Mechanism.describe` record (the inverse of describe).

    Every dataclass field must be present; keys that are not fields (``analysis_reference``)
    are ignored. Lists become tuples (``support``, ``probabilities``).

    Raises:
        PrivacyParameterError: unknown mechanism name, missing or invalid parameters.

    Args:
        record: a dict as written by :meth:`Mechanism.describe` (e.g. read back from a ledger JSON).

    Returns:
        The rebuilt mechanism.
    """
    from dataclasses import MISSING, fields

    if not isinstance(record, dict):
        raise PrivacyParameterError(f"a mechanism record must be a JSON object, got {type(record).__name__}")
    name = record.get("mechanism")
    cls = MECHANISM_CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise PrivacyParameterError(f"unknown mechanism {name!r} in the privacy ledger")
    kwargs = {}
    for f in fields(cls):
        if f.name not in record:
            if f.default is MISSING and f.default_factory is MISSING:
                raise PrivacyParameterError(f"mechanism record {name} lacks {f.name!r}")
            continue
        value = record[f.name]
        kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    for key in ("sigma", "sensitivity", "sample_rate", "scale", "epsilon", "delta", "sensitivity_per_term"):
        if key in kwargs and (isinstance(kwargs[key], bool) or not isinstance(kwargs[key], (int, float))):
            raise PrivacyParameterError(f"mechanism record {name}: {key} must be a number, got {kwargs[key]!r}")
    for key in ("count", "steps", "batch_size", "population"):
        if key in kwargs and (isinstance(kwargs[key], bool) or not isinstance(kwargs[key], int)):
            raise PrivacyParameterError(f"mechanism record {name}: {key} must be an integer, got {kwargs[key]!r}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise PrivacyParameterError(f"mechanism record {name} is invalid: {exc}") from None
