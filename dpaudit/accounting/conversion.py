r"""Conversions between privacy notions.

* RDP → (ε, δ): the improved conversion of Balle et al. (2020), Theorem 21,
  :math:`\varepsilon = \min_\alpha\, \varepsilon(\alpha) + \ln\frac{\alpha-1}{\alpha}
  - \frac{\ln\delta + \ln\alpha}{\alpha-1}` (computed by opacus).
* Amplification by subsampling for an (ε, δ)-DP mechanism run on a Poisson subsample of
  rate q: :math:`(\ln(1 + q(e^\varepsilon - 1)),\; q\delta)` (Balle, Barthe & Gaboardi 2018,
  Thm 8). Never the linear :math:`q\varepsilon`, which is not a bound.
* Group privacy: an (ε, δ)-DP mechanism is :math:`(k\varepsilon,\;
  k e^{(k-1)\varepsilon}\delta)`-DP for groups of k (Vadhan 2017, Lemma 2.2).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from dpaudit.accounting.mechanisms import orders_array
from dpaudit.errors import PrivacyParameterError


def rdp_to_epsilon(rdp, delta: float, orders=None) -> tuple[float, float]:
    """Smallest ε over the orders for the given δ; returns ``(epsilon, best_order)``.

    Args:
        rdp: RDP ε(α) at each order.
        delta: target δ, in (0, 1).
        orders: the orders (``None``: the default grid).

    Returns:
        ``(epsilon, best_order)`` (ε = ∞ when no order is finite).

    Raises:
        PrivacyParameterError: δ outside (0, 1).
        ValueError: ``rdp`` and ``orders`` differ in length.
    """
    from opacus.accountants.analysis.rdp import get_privacy_spent

    if not 0.0 < delta < 1.0:
        raise PrivacyParameterError(f"delta must lie in (0, 1), got {delta}")
    a = orders_array(orders)
    rdp = np.asarray(rdp, dtype=np.float64)
    if rdp.shape != a.shape:
        raise ValueError("rdp and orders differ in length")
    if np.all(rdp == 0):
        return 0.0, float(a[0])
    finite = np.isfinite(rdp)
    if not finite.any():
        return math.inf, float("nan")
    with warnings.catch_warnings():
        # At the largest order the curve is flat for (near-)pure mechanisms; the ledger then
        # also composes their pure ε, so the warning carries no information here.
        warnings.filterwarnings("ignore", message="Optimal order is the (largest|smallest) alpha")
        eps, order = get_privacy_spent(orders=list(a[finite]), rdp=list(rdp[finite]), delta=delta)
    return max(0.0, float(eps)), float(order)


def amplify_by_subsampling(epsilon: float, delta: float, sample_rate: float) -> tuple[float, float]:
    """(ε, δ) of an (ε, δ)-DP mechanism applied to a Poisson subsample of rate q.

    ε' = ln(1 + q(e^ε − 1)), δ' = qδ (Balle, Barthe & Gaboardi 2018).

    Args:
        epsilon: ε of the mechanism.
        delta: δ of the mechanism.
        sample_rate: Poisson rate q in (0, 1].

    Returns:
        ``(epsilon, delta)`` of the subsampled mechanism.

    Raises:
        PrivacyParameterError: q outside (0, 1].
    """
    if not 0.0 < sample_rate <= 1.0:
        raise PrivacyParameterError(f"sample_rate must lie in (0, 1], got {sample_rate}")
    if math.isinf(epsilon):
        return math.inf, sample_rate * delta
    if epsilon > 30.0:  # log(1 + q(e^ε − 1)) = ε + log(q + (1 − q)e^-ε), without overflow for large ε
        return epsilon + math.log(sample_rate + (1.0 - sample_rate) * math.exp(-epsilon)), sample_rate * delta
    return math.log1p(sample_rate * math.expm1(epsilon)), sample_rate * delta


def group_privacy(epsilon: float, delta: float, group_size: int) -> tuple[float, float]:
    r"""(ε, δ) for neighbours that differ in ``group_size`` units: the one group-privacy theorem.

    Chaining k neighbouring steps gives :math:`(k\varepsilon,\ \delta\sum_{i=0}^{k-1} e^{i\varepsilon})`
    (Vadhan 2017, Lemma 2.2): for k = 2, :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)`.

    Args:
        epsilon: the guarantee's ε per unit.
        delta: the guarantee's δ per unit.
        group_size: k, the number of units that differ.

    Returns:
        ``(epsilon_k, delta_k)``, δ capped at 1.

    Raises:
        PrivacyParameterError: ``group_size`` below 1.
    """
    if group_size < 1:
        raise PrivacyParameterError("group_size must be >= 1")
    k = int(group_size)
    if math.isinf(epsilon):
        return math.inf, min(1.0, k * delta)
    # e^{iε} capped at e^700: δ·e^700 exceeds 1 for any δ above 1e-304, and δ is capped at 1
    return k * epsilon, min(1.0, delta * sum(math.exp(min(i * epsilon, 700.0)) for i in range(k)))
