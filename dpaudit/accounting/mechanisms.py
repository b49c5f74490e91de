r"""Privacy mechanisms as Rényi-DP curves.

Each mechanism knows its RDP curve :math:`\varepsilon(\alpha)` over a grid of orders
(Mironov 2017) and, when it is pure ε-DP, its ε. Curves of composed mechanisms add up
(RDP composition, Mironov Prop. 1). The closed forms and the subsampling analyses come from
opacus, dp-accounting and autodp; the graph-specific term (a Gaussian whose sensitivity is
random, :class:`SensitivityMixtureGaussian`) is ours.

The accountant must match the sampler the code uses:

* :class:`PoissonSubsampledGaussian` — every example joins a batch independently with
  probability q (opacus' ``DPDataLoader``); add/remove-one neighbours (Mironov et al. 2019).
* :class:`FixedSizeSubsampledGaussian` — a batch of exactly m of n examples drawn without
  replacement; replace-one neighbours (Wang, Balle & Kasiviswanathan 2019, Thm 27).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
from scipy.special import logsumexp

from dpaudit.errors import PrivacyParameterError

#: Default RDP orders: dense near 1 (small ε), sparse far out (large ε, tiny δ).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 20.0 for x in range(1, 40)]
    + [3.0 + x / 4.0 for x in range(0, 28)]
    + [float(a) for a in range(10, 64)]
    + [64.0, 80.0, 96.0, 128.0, 160.0, 192.0, 256.0, 384.0, 512.0, 1024.0]
)


def orders_array(orders=None) -> np.ndarray:
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
    """A mechanism applied ``count`` times; subclasses give its RDP curve."""

    @abstractmethod
    def rdp(self, orders=None) -> np.ndarray:
        """RDP ε(α) at every order (all applications composed)."""

    def pure_epsilon(self) -> float | None:
        """ε of a pure ε-DP mechanism (all applications composed), else ``None``."""
        return None

    def gdp_mu(self) -> float | None:
        """μ when the mechanism is exactly μ-GDP (un-subsampled Gaussian), else ``None``."""
        return None

    def describe(self) -> dict:
        record = {"mechanism": type(self).__name__}
        record.update({k: v for k, v in asdict(self).items() if not k.startswith("_")})
        return record


@dataclass(frozen=True)
class GaussianMechanism(Mechanism):
    r"""Gaussian mechanism N(f(D), σ²I) with L2 sensitivity Δ, applied ``count`` times.

    RDP: :math:`\varepsilon(\alpha) = \text{count}\cdot\alpha\Delta^2 / (2\sigma^2)`;
    exactly μ-GDP with :math:`\mu = \sqrt{\text{count}}\,\Delta/\sigma` (Dong et al. 2019).
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
        a = orders_array(orders)
        return self.count * a * self.sensitivity**2 / (2.0 * self.sigma**2)

    def gdp_mu(self) -> float:
        return math.sqrt(self.count) * self.sensitivity / self.sigma


@dataclass(frozen=True)
class PoissonSubsampledGaussian(Mechanism):
    r"""DP-SGD step with Poisson sampling at rate q and noise multiplier σ, ``steps`` times.

    RDP of the sampled Gaussian mechanism (Mironov, Talwar & Zhang 2019), computed by opacus'
    ``compute_rdp``; sensitivity is folded into σ (σ = noise std / clipping norm).
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
        from opacus.accountants.analysis.rdp import compute_rdp

        a = orders_array(orders)
        return np.asarray(
            compute_rdp(q=self.sample_rate, noise_multiplier=self.sigma, steps=self.steps, orders=list(a))
        )


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
        a = tuple(float(x) for x in orders_array(orders))
        q = self.batch_size / self.population
        return self.steps * np.asarray(_wor_rdp_cached(q, float(self.sigma / self.sensitivity), a))


@dataclass(frozen=True)
class SensitivityMixtureGaussian(Mechanism):
    r"""Gaussian mechanism whose sensitivity is itself random ("multi-term" sensitivity).

    When one node can affect a random number ρ of the terms summed in a noisy gradient (ρ is
    the number of affected subgraphs that land in the batch), each term clipped to norm C, the
    per-step guarantee is (DP-GNN, Daigavane et al. 2022, Theorem 1):

    .. math::
        \varepsilon(\alpha) = \frac{1}{\alpha-1}
            \ln \mathbb{E}_\rho\!\left[\exp\!\left(\alpha(\alpha-1)\frac{s(\rho)^2}{2\sigma^2}\right)\right]

    with ``s(ρ) = sensitivity_per_term · ρ``. For replace-one neighbours sensitivity_per_term
    is 2C (one clipped gradient leaves, another arrives), giving the paper's 2ρ²C²/σ².
    ``support`` and ``probabilities`` give ρ's distribution (e.g. a hypergeometric law).
    """

    sigma: float
    sensitivity_per_term: float
    support: tuple[float, ...]
    probabilities: tuple[float, ...]
    steps: int
    name: str = "gaussian with random sensitivity"

    def __post_init__(self):
        _check_positive("sigma", self.sigma)
        _check_positive("sensitivity_per_term", self.sensitivity_per_term)
        _check_count("steps", self.steps)
        p = np.asarray(self.probabilities, dtype=np.float64)
        if len(self.support) != len(p) or len(p) == 0:
            raise PrivacyParameterError("support and probabilities must be non-empty and of equal length")
        if np.any(p < 0) or abs(p.sum() - 1.0) > 1e-9:
            raise PrivacyParameterError("probabilities must be non-negative and sum to 1")

    def rdp(self, orders=None) -> np.ndarray:
        a = orders_array(orders)[:, None]
        rho = np.asarray(self.support, dtype=np.float64)[None, :]
        p = np.asarray(self.probabilities, dtype=np.float64)[None, :]
        keep = p > 0
        exponent = a * (a - 1.0) * (self.sensitivity_per_term * rho) ** 2 / (2.0 * self.sigma**2)
        log_mgf = logsumexp(np.where(keep, exponent, -np.inf), b=np.where(keep, p, 1.0), axis=1)
        return self.steps * log_mgf / (a[:, 0] - 1.0)

    def describe(self) -> dict:
        record = super().describe()
        # The support can be long; keep the record readable.
        record["support"] = [float(s) for s in self.support][:64]
        record["probabilities"] = [float(s) for s in self.probabilities][:64]
        return record


@dataclass(frozen=True)
class LaplaceMechanism(Mechanism):
    r"""Laplace mechanism with scale b and L1 sensitivity Δ, ``count`` times: pure (count·Δ/b)-DP.

    RDP from Mironov (2017), Prop. 6, via autodp (tighter than going through pure DP).
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
        from autodp.rdp_bank import RDP_laplace

        b = self.scale / self.sensitivity
        return self.count * np.array([RDP_laplace({"b": b}, float(x)) for x in orders_array(orders)])

    def pure_epsilon(self) -> float:
        return self.count * self.sensitivity / self.scale


@dataclass(frozen=True)
class PureDPMechanism(Mechanism):
    r"""Any ε-DP mechanism applied ``count`` times.

    RDP from Bun & Steinke (2016), Lemma 4 (via autodp's ``RDP_pureDP``), capped at ε.
    """

    epsilon: float
    count: int = 1
    name: str = "pure-dp"

    def __post_init__(self):
        _check_positive("epsilon", self.epsilon)
        _check_count("count", self.count)

    def rdp(self, orders=None) -> np.ndarray:
        from autodp.rdp_bank import RDP_pureDP

        return self.count * np.array([RDP_pureDP({"eps": self.epsilon}, float(x)) for x in orders_array(orders)])

    def pure_epsilon(self) -> float:
        return self.count * self.epsilon


@dataclass(frozen=True)
class ExponentialMechanism(Mechanism):
    r"""An ε-DP exponential mechanism (sampling ∝ exp(ε·u/(2Δ)), or equivalently the argmax of
    the scores plus Gumbel(2Δ/ε) noise), applied ``count`` times.

    An ε-DP exponential mechanism is ε-bounded-range and hence (ε²/8)-zCDP (Cesar & Rogers
    2021, Lemma 3.2), i.e. RDP α·ε²/8; we take the pointwise minimum with the pure-DP curve.
    Releasing the top-k of one-shot Gumbel-noised scores is exactly k peeling exponential
    mechanisms (Durfee & Rogers 2019), so use ``count = k``.
    """

    epsilon: float
    count: int = 1
    name: str = "exponential"

    def __post_init__(self):
        _check_positive("epsilon", self.epsilon)
        _check_count("count", self.count)

    def rdp(self, orders=None) -> np.ndarray:
        a = orders_array(orders)
        bounded_range = a * self.epsilon**2 / 8.0
        pure = PureDPMechanism(self.epsilon, 1).rdp(a)
        return self.count * np.minimum(bounded_range, pure)

    def pure_epsilon(self) -> float:
        return self.count * self.epsilon


@dataclass(frozen=True)
class RecordedGuarantee(Mechanism):
    """A guarantee proven outside RDP (e.g. GCON's objective perturbation, Theorem 1), recorded
    as (ε, δ) so it appears in the ledger. It cannot be composed through RDP."""

    epsilon: float
    delta: float
    name: str = "recorded"
    details: dict = field(default_factory=dict)

    def rdp(self, orders=None) -> np.ndarray:
        raise PrivacyParameterError(f"{self.name}: an (ε, δ) guarantee has no RDP curve; compose it in (ε, δ)")
