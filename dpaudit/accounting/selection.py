r"""Private selection by random stopping: the RDP of "run a private algorithm a random number
of times and release only the best run" (Papernot & Steinke, ICLR 2022, "Hyperparameter Tuning
with Rényi Differential Privacy").

The algorithm A draws K from the truncated negative binomial law :math:`\mathcal D_{\eta,\gamma}`
(η > −1, 0 < γ < 1) on {1, 2, ...},

.. math::
    \Pr[K = k] = \frac{(1-\gamma)^k}{\gamma^{-\eta} - 1}\prod_{\ell=0}^{k-1}\frac{\ell+\eta}{\ell+1}
    \quad(\eta \ne 0), \qquad
    \Pr[K = k] = \frac{(1-\gamma)^k}{k \ln(1/\gamma)} \quad(\eta = 0,\ \text{logarithmic}),

runs one randomized algorithm Q (pick a candidate from a public grid at random, train it, score
it) K times independently, and releases the run whose output is largest in a total order (the
score first). Its Theorem 2: if Q is (λ, ε)-RDP and (λ̂, ε̂)-RDP (λ > 1, λ̂ ≥ 1), A is
(λ, ε')-RDP with

.. math::
    \varepsilon' = \varepsilon + (1+\eta)\Big(1-\frac{1}{\hat\lambda}\Big)\hat\varepsilon
        + \frac{(1+\eta)\ln(1/\gamma)}{\hat\lambda} + \frac{\ln \mathbb E[K]}{\lambda - 1},
    \qquad
    \mathbb E[K] = \frac{\eta(1-\gamma)}{\gamma(1-\gamma^{\eta})}\ (\eta\ne0),\quad
    \frac{1/\gamma - 1}{\ln(1/\gamma)}\ (\eta = 0).

η = 1 is the geometric law (E[K] = 1/γ). Q's RDP curve is the pointwise maximum over the grid's
candidates of each candidate's composed curve (a candidate drawn with public coins: Q's output
reveals which, and conditioned on it Q is that candidate's mechanism). λ̂ is optimised over a
fixed grid of orders; every choice gives a valid bound, so the minimum is one.

:class:`PrivateSelection` is that bound as a :class:`~dpaudit.accounting.Mechanism`, so it sits
in a :class:`~dpaudit.accounting.PrivacyLedger` (RDP analysis only: it has no PLD), composes
with later mechanisms and is re-derived from its record on load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from dpaudit.accounting.mechanisms import (
    DEFAULT_ORDERS,
    MECHANISM_CLASSES,
    Mechanism,
    RecordedGuarantee,
    mechanism_from_record,
    orders_array,
)
from dpaudit.errors import PrivacyParameterError

#: Orders over which λ̂ of Theorem 2 is optimised (fixed, so a record recomputes to the same ε).
HAT_ORDERS: tuple[float, ...] = (1.0, *DEFAULT_ORDERS)


def check_law(eta: float, gamma: float) -> None:
    """The truncated negative binomial law needs η > −1 and 0 < γ < 1.

    Args:
        eta: η of the law (> −1).
        gamma: γ of the law, in (0, 1).

    Raises:
        PrivacyParameterError: η or γ out of range.
    """
    if not (math.isfinite(eta) and eta > -1.0):
        raise PrivacyParameterError(f"the truncated negative binomial needs eta > -1, got {eta}")
    if not 0.0 < gamma < 1.0:
        raise PrivacyParameterError(f"the truncated negative binomial needs 0 < gamma < 1, got {gamma}")


def expected_runs(eta: float, gamma: float) -> float:
    """E[K] under :math:`\\mathcal D_{\\eta,\\gamma}` (Papernot & Steinke 2022, §3).

    Args:
        eta: η of the law (> −1).
        gamma: γ of the law, in (0, 1).

    Returns:
        E[K].

    Raises:
        PrivacyParameterError: η or γ out of range.
    """
    check_law(eta, gamma)
    if eta == 0.0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return eta * (1.0 - gamma) / (gamma * (1.0 - gamma**eta))


def gamma_for_expected_runs(eta: float, mean: float) -> float:
    """The γ giving E[K] = ``mean`` (E[K] falls from ∞ to 1 as γ rises from 0 to 1).

    Args:
        eta: η of the law (> −1).
        mean: the wanted E[K] (> 1).

    Returns:
        γ.

    Raises:
        PrivacyParameterError: ``mean`` ≤ 1 or η out of range.
    """
    if not (math.isfinite(mean) and mean > 1.0):
        raise PrivacyParameterError(f"the expected number of runs must be > 1, got {mean}")
    check_law(eta, 0.5)
    return float(brentq(lambda g: expected_runs(eta, g) - mean, 1e-12, 1.0 - 1e-12, xtol=1e-15, rtol=1e-13))


def run_probabilities(eta: float, gamma: float, up_to: int) -> np.ndarray:
    """Pr[K = k] for k = 1..``up_to`` (by the ratio Pr[k+1]/Pr[k] = (1−γ)(k+η)/(k+1)).

    Args:
        eta: η of the law (> −1).
        gamma: γ of the law, in (0, 1).
        up_to: largest k.

    Returns:
        Array of ``up_to`` probabilities.

    Raises:
        PrivacyParameterError: η or γ out of range.
    """
    check_law(eta, gamma)
    first = (1.0 - gamma) / math.log(1.0 / gamma) if eta == 0.0 else (1.0 - gamma) * eta / (gamma**-eta - 1.0)
    out = np.empty(up_to)
    out[0] = first
    for k in range(1, up_to):
        out[k] = out[k - 1] * (1.0 - gamma) * (k + eta) / (k + 1)
    return out


def draw_runs(eta: float, gamma: float, rng: np.random.Generator) -> int:
    """One draw of K (inverse CDF, walking the probabilities; the tail is geometric-fast).

    Args:
        eta: η of the law (> −1).
        gamma: γ of the law, in (0, 1).
        rng: the numpy generator drawing the uniform.

    Returns:
        K ≥ 1.

    Raises:
        PrivacyParameterError: η or γ out of range.
    """
    check_law(eta, gamma)
    u = rng.random()
    k, p = 1, run_probabilities(eta, gamma, 1)[0]
    cumulative = p
    while cumulative < u and p > 0.0:
        p *= (1.0 - gamma) * (k + eta) / (k + 1)
        cumulative += p
        k += 1
    return k


def generating_function(eta: float, gamma: float, z: np.ndarray) -> np.ndarray:
    """E[z^K] for z ∈ [0, 1]: ((1 − (1−γ)z)^{−η} − 1)/(γ^{−η} − 1), or ln(1 − (1−γ)z)/ln γ at η = 0.
    Pr[best of K runs ≤ y] = E[F(y)^K] for the per-run CDF F.

    Args:
        eta: η of the law (> −1).
        gamma: γ of the law, in (0, 1).
        z: points in [0, 1].

    Returns:
        E[z^K] at each point.

    Raises:
        PrivacyParameterError: η or γ out of range.
    """
    check_law(eta, gamma)
    z = np.asarray(z, dtype=np.float64)
    if eta == 0.0:
        return np.log1p(-(1.0 - gamma) * z) / math.log(gamma)
    return ((1.0 - (1.0 - gamma) * z) ** -eta - 1.0) / (gamma**-eta - 1.0)


def selection_rdp(run_rdp, eta: float, gamma: float, orders=None, run_rdp_at_hat=None) -> np.ndarray:
    """Theorem 2 at every order λ of ``orders`` from a run's RDP curve: ``run_rdp`` at ``orders``,
    ``run_rdp_at_hat`` at :data:`HAT_ORDERS` (λ̂ = 1 is KL: the curve's limit at 1, bounded by
    the curve at the smallest order above 1, RDP being non-decreasing in the order).

    Args:
        run_rdp: the run's RDP at ``orders``.
        eta: η of the law (> −1).
        gamma: γ of the law, in (0, 1).
        orders: RDP orders (``None``: the default grid).
        run_rdp_at_hat: the run's RDP at :data:`HAT_ORDERS`.

    Returns:
        The selection's RDP at each order (∞ at orders ≤ 1).

    Raises:
        PrivacyParameterError: η or γ out of range.
    """
    check_law(eta, gamma)
    a = orders_array(orders)
    run_rdp = np.asarray(run_rdp, dtype=np.float64)
    hat = np.asarray(HAT_ORDERS)
    at_hat = np.asarray(run_rdp_at_hat, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hat_terms = (1.0 + eta) * ((1.0 - 1.0 / hat) * at_hat + math.log(1.0 / gamma) / hat)
    hat_terms = np.where(np.isnan(hat_terms), math.inf, hat_terms)
    best_hat = float(hat_terms.min())
    with np.errstate(divide="ignore"):
        tail = math.log(expected_runs(eta, gamma)) / (a - 1.0)
    out = run_rdp + best_hat + tail
    return np.where(a > 1.0, out, math.inf)


@dataclass(frozen=True)
class PrivateSelection(Mechanism):
    r"""Release the best of K ~ :math:`\mathcal D_{\eta,\gamma}` runs of one private run Q
    (Papernot & Steinke 2022, Theorem 2; see the module docstring).

    ``candidates`` holds, per candidate of the public grid, the mechanisms one run of it
    composes (training and, where the score reads private data, the noisy score). Q draws a
    candidate at random, so its RDP is the pointwise maximum of the candidates' composed
    curves. Records (:meth:`describe`) nest the candidates' own records.

    Attributes:
        candidates: per grid candidate, the tuple of mechanisms (or their records) one run composes.
        eta: η of the law of K.
        gamma: γ of the law of K.
        name: label in the ledger.
    """

    candidates: tuple
    eta: float
    gamma: float
    name: str = "private selection (Papernot & Steinke 2022, Theorem 2)"

    def __post_init__(self):
        check_law(float(self.eta), float(self.gamma))
        if not self.candidates:
            raise PrivacyParameterError("a private selection needs at least one candidate")
        built = []
        for run in self.candidates:
            run = tuple(m if isinstance(m, Mechanism) else mechanism_from_record(m) for m in run)
            if not run or any(isinstance(m, (RecordedGuarantee, PrivateSelection)) for m in run):
                raise PrivacyParameterError(
                    "each candidate run of a private selection needs at least one mechanism with an RDP curve"
                )
            built.append(run)
        object.__setattr__(self, "candidates", tuple(built))

    def run_rdp(self, orders=None) -> np.ndarray:
        """Q's RDP curve: the maximum over candidates of their composed curves.

        Args:
            orders: RDP orders (``None``: the default grid).

        Returns:
            Q's ε(α) at each order.
        """
        a = orders_array(orders)
        return np.max([np.sum([m.rdp(a) for m in run], axis=0) for run in self.candidates], axis=0)

    def rdp(self, orders=None) -> np.ndarray:
        """RDP of the selection (Theorem 2, :func:`selection_rdp`).

        Args:
            orders: RDP orders (``None``: the default grid).

        Returns:
            ε(α) at each order.
        """
        a = orders_array(orders)
        # order 1 (KL) is bounded by the smallest order above it (RDP is non-decreasing in λ)
        at_hat = self.run_rdp(np.asarray([DEFAULT_ORDERS[0], *DEFAULT_ORDERS]))
        return selection_rdp(self.run_rdp(a), self.eta, self.gamma, a, at_hat)

    @property
    def expected_runs(self) -> float:
        return expected_runs(self.eta, self.gamma)

    def describe(self) -> dict:
        """Ledger record, nesting every candidate's mechanism records.

        Returns:
            ``{"mechanism", "candidates", "eta", "gamma", "name"}``.
        """
        return {
            "mechanism": type(self).__name__,
            "candidates": [[m.describe() for m in run] for run in self.candidates],
            "eta": float(self.eta),
            "gamma": float(self.gamma),
            "name": self.name,
        }


# Records name their class; a selection record is rebuilt by the same lookup as every other.
MECHANISM_CLASSES[PrivateSelection.__name__] = PrivateSelection
