r"""The mathematics of GCON (Wei et al., "GCON: Differentially Private Graph Convolutional
Network via Objective Perturbation"), kept apart from the defense so that every piece can be
tested on its own.

* :class:`MultiLabelSoftMargin`, :class:`PseudoHuber` — the per-class losses
  :math:`\ell(x; y)` of Eq. (27)/(28) with their derivatives and the suprema
  :math:`c_1, c_2, c_3` of Eq. (19) (Appendix F).
* :func:`normalized_adjacency`, :func:`appr_propagate`, :func:`ppr_propagate`,
  :func:`gcon_features`, :func:`one_hop_features` — :math:`\tilde A = D^{-1}(A + I)`, the
  propagation matrices :math:`R_m` of Eq. (9), :math:`Z` of Eqs. (10)–(11) and the inference
  features of Eq. (16).
* :func:`sensitivity_psi` — :math:`\Psi(Z)` of Lemma 2 / Eq. (20).
* :func:`erlang_tail_quantile` — :math:`c_{sf}` of Eq. (21).
* :func:`theorem1_parameters` — :math:`\Lambda, c_\theta, \epsilon_\Lambda, \Lambda', \beta`
  of Eqs. (17)–(24), and :meth:`TheoremOneParameters.guarantee`, which re-derives the
  (ε, δ) the parameters actually give from the proof's inequalities (Lemmas 7–9).
* :func:`sample_objective_noise` — Algorithm 2.
* :func:`solve_perturbed_objective` — the warm start (L-BFGS + Newton polish, no guarantee);
  :func:`descent_schedule`, :func:`project_columns`, :func:`descend` — the fixed schedule whose
  residual :math:`\|\Theta_T - \Theta_{priv}\|_F` is bounded on public grounds;
  :func:`amp_sensitivity`, :func:`amp_noise_multiplier` — Approximate Minima Perturbation.

Checks of the paper's algebra (all hold; they are re-verified numerically in the tests):

* Lemma 2 for finite m: the telescoping :math:`\Delta(\tilde A^m) = \sum_{t<m}\tilde A'^t
  \Delta\tilde A\,\tilde A^{m-1-t}` (cleaner than the paper's Eq. 37) gives
  :math:`\psi(\tilde A^m X) \le 2m`, and :math:`\alpha\sum_{i=1}^{m-1}(1-\alpha)^i 2i +
  2m(1-\alpha)^m = 2\sum_{i=1}^m (1-\alpha)^i`, which is Eq. (25).
* Lemma 9: with Λ from Eq. (22) and :math:`c_\theta` from Eq. (23),
  :math:`\beta n_1(\Lambda c_\theta - c_1) = c_{sf}\max(\epsilon - \epsilon_\Lambda,
  \omega\epsilon)/(\omega\epsilon) \ge c_{sf}`, because
  :math:`(c_1 + c_2 c_\theta)(n_1\omega\epsilon\Lambda - c c_2\Psi c_{sf}) = n_1\omega\epsilon
  c_1(\Lambda + c_2)`.
* Eq. (17): in the "otherwise" branch :math:`\Lambda' > 0` because
  :math:`cd\log(1 + x/(d\Lambda)) \le cx/\Lambda`; and then the Jacobian factor of Lemma 7 is
  :math:`(1 + (1-\omega)\epsilon/(cd))^{cd} \le e^{(1-\omega)\epsilon}`.
* Eq. (41) writes the density ratio with inverted determinants; the correct change of
  variables has :math:`|\det J(\Theta\mapsto B|D)| / |\det J(\Theta\mapsto B'|D')|`. Lemma 7's
  bound is symmetric in D and D' (both Jacobians have eigenvalues ≥ n₁(Λ + Λ′)), so the
  theorem is unaffected.

Readings chosen where the paper is loose (each keeps the proof valid):

* The Λ that enters the objective is the one *raised* by Eq. (22); ξ > 0 is a hyperparameter.
* :math:`R_\infty X` is computed by the Richardson iteration :math:`Z \leftarrow (1-\alpha)
  \tilde A Z + \alpha X` (i.e. Eq. 4) run for M steps with :math:`2(1-\alpha)^M \le` tol. What
  the code releases is therefore exactly :math:`R_M X`, whose sensitivity
  :math:`\Psi(Z_M) \le \Psi(Z_\infty)` by Lemma 2 — so the proof covers the computed features,
  which a Krylov solver (a data-dependent non-linear map) would not.
* Eq. (16) omits the 1/s of Eq. (11); inference keeps it so that training and inference
  features have the same scale (argmax is unchanged either way).
* Theorem 1 is for the exact minimiser (Eq. 15), which no solver returns; the paper's Remark
  after Theorem 1 calls the guarantee "independent of the optimization algorithm ... and the
  optimization steps", and its experiments release Adam's iterate after a fixed number of steps
  (Appendix Q), which the theorem does not cover. Approximate Minima Perturbation (Iyengar et al.,
  S&P 2019) closes the gap only for a solver that *reaches* a gradient tolerance γ; whether it
  does is a data-dependent event outside any accountant (refusing to release when it does not
  leaks it). We release instead the end of a schedule fixed in advance
  (:func:`descent_schedule`): any warm start, projected onto Theorem 1's ball
  :math:`\{\|\theta_j\| \le c_\theta\}`, then T gradient steps of size 1/L, T chosen from
  public constants only. Then :math:`\|\Theta_T - \Theta_{priv}\|_F \le (1-\mu/L)^T\,2\sqrt c\,c_\theta`
  for every dataset whenever :math:`\Theta_{priv}` lies in the ball — the event whose complement
  Lemma 9 already charges to δ — and AMP's Gaussian covers twice that bound
  (:func:`amp_sensitivity`) at a small fixed share of (ε, δ), recorded in the ledger. Nothing is
  ever refused after training starts.
* β is shrunk by a factor 1 − 1e-12 and c_sf enlarged by 1 + 1e-10 so that floating-point
  rounding never makes the re-derived (ε, δ) exceed the target.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy import optimize, stats

from dpaudit.errors import ConfigurationError, PrivacyParameterError

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------- losses


class MultiLabelSoftMargin:
    r"""MultiLabel Soft Margin loss per class, Eq. (27):
    :math:`\ell(x;y) = -\frac1c\big(y\log\sigma(x) + (1-y)\log(1-\sigma(x))\big)`.

    :math:`\ell' = (\sigma(x) - y)/c`, :math:`\ell'' = \sigma(1-\sigma)/c`,
    :math:`\ell''' = \sigma(1-\sigma)(1-2\sigma)/c`; for y ∈ {0, 1} the suprema are
    :math:`c_1 = 1/c`, :math:`c_2 = 1/(4c)`, :math:`c_3 = 1/(6\sqrt3 c)` (Appendix F).

    Args:
        num_classes: c.
    """

    name = "msl"

    def __init__(self, num_classes: int):
        self.c = int(num_classes)

    def value(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        # log(1 + e^{-x}) and log(1 + e^{x}) computed stably
        """The loss ℓ(x; y) per entry.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ, elementwise (NumPy).
        """
        return (y * np.logaddexp(0.0, -x) + (1.0 - y) * np.logaddexp(0.0, x)) / self.c

    def d1(self, x, y):
        """ℓ′ with respect to ``x``.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ′, elementwise.
        """
        return (_sigmoid(x) - y) / self.c

    def d2(self, x, y):
        """ℓ″ with respect to ``x``.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ″, elementwise.
        """
        s = _sigmoid(x)
        return s * (1.0 - s) / self.c

    def d3(self, x, y):
        """ℓ‴ with respect to ``x``.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ‴, elementwise.
        """
        s = _sigmoid(x)
        return s * (1.0 - s) * (1.0 - 2.0 * s) / self.c

    def suprema(self) -> tuple[float, float, float]:
        """(c₁, c₂, c₃): the suprema of |ℓ′|, |ℓ″|, |ℓ‴| used by Theorem 1."""
        return 1.0 / self.c, 1.0 / (4.0 * self.c), 1.0 / (6.0 * math.sqrt(3.0) * self.c)

    def torch_value(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss ℓ(x; y) per entry, in torch (differentiable).

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ, elementwise (tensor).
        """
        zero = torch.zeros_like(x)  # not F.softplus: it switches to the identity beyond x = 20
        return (y * torch.logaddexp(zero, -x) + (1 - y) * torch.logaddexp(zero, x)) / self.c


class PseudoHuber:
    r"""Pseudo-Huber loss per class with weight :math:`\delta_l`, Eq. (28):
    :math:`\ell(x;y) = \frac{\delta_l^2}{c}\big(\sqrt{1 + (x-y)^2/\delta_l^2} - 1\big)`.

    With :math:`u = (x-y)/\delta_l`: :math:`\ell' = \delta_l u/(c\sqrt{1+u^2})`,
    :math:`\ell'' = 1/(c(1+u^2)^{3/2})`, :math:`\ell''' = -3u/(c\delta_l(1+u^2)^{5/2})`; the
    suprema are :math:`c_1 = \delta_l/c`, :math:`c_2 = 1/c`,
    :math:`c_3 = 48\sqrt5/(125 c\delta_l)` (attained at :math:`u = \pm 1/2`).

    Args:
        num_classes: c.
        delta_l: δ_l > 0.

    Raises:
        ConfigurationError: ``delta_l <= 0``.
    """

    name = "huber"

    def __init__(self, num_classes: int, delta_l: float):
        if not delta_l > 0:
            raise ConfigurationError(f"pseudo-Huber weight huber_delta must be > 0, got {delta_l}")
        self.c = int(num_classes)
        self.delta_l = float(delta_l)

    def value(self, x, y):
        """The loss ℓ(x; y) per entry.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ, elementwise (NumPy).
        """
        u = (x - y) / self.delta_l
        return self.delta_l**2 * (np.sqrt(1.0 + u * u) - 1.0) / self.c

    def d1(self, x, y):
        """ℓ′ with respect to ``x``.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ′, elementwise.
        """
        u = (x - y) / self.delta_l
        return (x - y) / (self.c * np.sqrt(1.0 + u * u))

    def d2(self, x, y):
        """ℓ″ with respect to ``x``.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ″, elementwise.
        """
        u = (x - y) / self.delta_l
        return 1.0 / (self.c * (1.0 + u * u) ** 1.5)

    def d3(self, x, y):
        """ℓ‴ with respect to ``x``.

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ‴, elementwise.
        """
        u = (x - y) / self.delta_l
        return -3.0 * (x - y) / (self.c * self.delta_l**2 * (1.0 + u * u) ** 2.5)

    def suprema(self) -> tuple[float, float, float]:
        """(c₁, c₂, c₃): the suprema of |ℓ′|, |ℓ″|, |ℓ‴| used by Theorem 1."""
        return self.delta_l / self.c, 1.0 / self.c, 48.0 * math.sqrt(5.0) / (125.0 * self.c * self.delta_l)

    def torch_value(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss ℓ(x; y) per entry, in torch (differentiable).

        Args:
            x: scores (any shape).
            y: targets in {0, 1} (one-hot labels), broadcastable to ``x``.

        Returns:
            ℓ, elementwise (tensor).
        """
        u = (x - y) / self.delta_l
        return self.delta_l**2 * (torch.sqrt(1 + u * u) - 1) / self.c


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free logistic


def make_loss(name: str, num_classes: int, huber_delta: float):
    """The loss of Section IV-C4 by name: ``"msl"`` (Eq. 27) or ``"huber"`` (Eq. 28).

    Args:
        name: ``msl`` or ``huber``.
        num_classes: c.
        huber_delta: δ_l (``huber`` only).

    Returns:
        The loss object.

    Raises:
        ConfigurationError: an unknown name, or ``huber_delta <= 0``.
    """
    if name == "msl":
        return MultiLabelSoftMargin(num_classes)
    if name == "huber":
        return PseudoHuber(num_classes, huber_delta)
    raise ConfigurationError(f"gcon loss must be 'msl' or 'huber', got {name!r}")


# ---------------------------------------------------------------------------- propagation


def parse_steps(text: str | list) -> list[float]:
    """Propagation steps :math:`m_1..m_s` from ``"2"``, ``"1,5"``, ``"inf"`` (∞ = PPR).

    Args:
        text: a comma-separated string, or a list of items.

    Returns:
        The steps as floats (``inf`` for ∞).

    Raises:
        ConfigurationError: an item that is not an integer ≥ 0 or ``inf``, or no step.
    """
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    steps = []
    for item in items:
        token = str(item).strip().lower()
        if not token:
            continue
        if token in {"inf", "infinity", "∞"}:
            steps.append(math.inf)
            continue
        try:
            value = float(token)
        except ValueError:
            raise ConfigurationError(f"gcon steps: {item!r} is not an integer ≥ 0 or 'inf'") from None
        if value < 0 or value != int(value):
            raise ConfigurationError(f"gcon steps: {item!r} is not an integer ≥ 0 or 'inf'")
        steps.append(float(int(value)))
    if not steps:
        raise ConfigurationError("gcon steps: give at least one propagation step, e.g. '2' or '1,inf'")
    return steps


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """Validate a restart probability.

    Args:
        alpha: the restart probability.
        name: the hyperparameter's name, for the error message.

    Returns:
        ``alpha`` as a float in (0, 1].

    Raises:
        ConfigurationError: ``alpha`` outside (0, 1].
    """
    alpha = float(alpha)
    if not 0.0 < alpha <= 1.0:
        raise ConfigurationError(f"gcon {name} (restart probability) must lie in (0, 1], got {alpha}")
    return alpha


def normalized_adjacency(edge_index: torch.Tensor, num_nodes: int, dtype=torch.float64) -> torch.Tensor:
    r""":math:`\tilde A = D^{-1}(A + I)` (Section IV-C2, r = 0) as a sparse COO tensor.

    ``edge_index`` must hold both directions of every undirected edge and no self loops (the
    :class:`~dpaudit.data.datasets.GraphDataset` invariants); every row of :math:`\tilde A` sums to 1.

    Args:
        edge_index: both directions of every undirected edge, no self-loops.
        num_nodes: n.
        dtype: the values' dtype.

    Returns:
        Ã, coalesced.
    """
    device = edge_index.device
    loops = torch.arange(num_nodes, device=device)
    rows = torch.cat([edge_index[0], loops])
    cols = torch.cat([edge_index[1], loops])
    degree_plus_one = torch.bincount(rows, minlength=num_nodes).to(dtype)
    values = 1.0 / degree_plus_one[rows]
    indices = torch.stack([rows, cols])
    return torch.sparse_coo_tensor(indices, values, (num_nodes, num_nodes), check_invariants=False).coalesce()


def appr_propagate(adj: torch.Tensor, x: torch.Tensor, alpha: float, steps: int) -> torch.Tensor:
    r""":math:`Z_m = R_m X` for finite m by Eq. (4): :math:`Z_0 = X`,
    :math:`Z_t = (1-\alpha)\tilde A Z_{t-1} + \alpha X` (equal to Eq. 6/9, no dense matrix).

    Shapes: adj sparse [n, n], x [n, d] → [n, d].

    Args:
        adj: Ã (sparse).
        x: features.
        alpha: restart probability α.
        steps: m.

    Returns:
        Z_m.
    """
    z = x
    for _ in range(int(steps)):
        z = (1.0 - alpha) * (adj @ z) + alpha * x
    return z


def ppr_iterations(alpha: float, tol: float) -> int:
    r"""Steps M with :math:`2(1-\alpha)^M \le` tol: the rows of :math:`R_\infty - R_M =
    (1-\alpha)^M\tilde A^M(R_\infty - I)` have L1 norm ≤ 2(1-α)^M, so every row of
    :math:`(R_\infty - R_M)X` has L2 norm ≤ tol when the rows of X have norm ≤ 1.

    Args:
        alpha: restart probability α.
        tol: the row-norm tolerance.

    Returns:
        M (0 when α = 1).
    """
    if alpha >= 1.0:
        return 0
    return max(1, math.ceil(math.log(tol / 2.0) / math.log(1.0 - alpha)))


def ppr_propagate(adj: torch.Tensor, x: torch.Tensor, alpha: float, tol: float = 1e-12) -> torch.Tensor:
    r""":math:`Z_\infty = R_\infty X = \alpha(I - (1-\alpha)\tilde A)^{-1}X` (Eq. 5/9) by a sparse
    Richardson iteration, never a dense n×n inverse. The result is exactly :math:`R_M X` with M
    from :func:`ppr_iterations`, whose edge sensitivity is ≤ Ψ(Z_∞) by Lemma 2 (see module doc).

    Args:
        adj: Ã (sparse).
        x: features (rows of norm ≤ 1 for the tolerance to hold).
        alpha: restart probability α.
        tol: the row-norm tolerance.

    Returns:
        R_M X.

    Shapes:
        adj: [n, n]
        x: [n, d]
        return: [n, d]
    """
    return appr_propagate(adj, x, alpha, ppr_iterations(alpha, tol))


def propagate(adj: torch.Tensor, x: torch.Tensor, alpha: float, m: float, tol: float = 1e-12) -> torch.Tensor:
    """:math:`Z_m` for m ∈ {0, 1, ..., ∞} (Eq. 9–10).

    Args:
        adj: Ã (sparse).
        x: features.
        alpha: restart probability α.
        m: the step count (``inf``: PPR).
        tol: the PPR tolerance.

    Returns:
        Z_m.

    Shapes:
        adj: [n, n]
        x: [n, d]
        return: [n, d]
    """
    if math.isinf(m):
        return ppr_propagate(adj, x, alpha, tol)
    return appr_propagate(adj, x, alpha, int(m))


def gcon_features(adj: torch.Tensor, x: torch.Tensor, alpha: float, steps: list[float]) -> torch.Tensor:
    r""":math:`Z = \frac1s(Z_{m_1} \oplus \dots \oplus Z_{m_s})` (Eq. 11), features concatenated.

    Shapes: adj sparse [n, n], x [n, d] → [n, s·d].

    Args:
        adj: Ã (sparse).
        x: encoded features.
        alpha: restart probability α.
        steps: m₁..m_s.

    Returns:
        Z.
    """
    return torch.cat([propagate(adj, x, alpha, m) for m in steps], dim=1) / len(steps)


def one_hop_features(adj: torch.Tensor, x: torch.Tensor, alpha_inference: float, steps: list[float]) -> torch.Tensor:
    r"""Private inference features of Eq. (16): :math:`\hat R_{m_i} = I` if :math:`m_i = 0`, else
    :math:`(1-\alpha_I)\tilde A + \alpha_I I`; row v reads only v's own adjacency. Scaled by 1/s
    like Eq. (11) (Eq. 16 omits it; the argmax is the same).

    Shapes: adj sparse [n, n], x [n, d] → [n, s·d].

    Args:
        adj: Ã of the query graph (sparse).
        x: encoded features.
        alpha_inference: α_I.
        steps: m₁..m_s.

    Returns:
        The inference features.
    """
    one_hop = (1.0 - alpha_inference) * (adj @ x) + alpha_inference * x
    return torch.cat([x if m == 0 else one_hop for m in steps], dim=1) / len(steps)


def sensitivity_psi(alpha: float, steps: list[float]) -> float:
    r""":math:`\Psi(Z) = \frac1s\sum_i \frac{2(1-\alpha)}{\alpha}[1 - (1-\alpha)^{m_i}]`
    (Lemma 2, Eqs. 20, 25, 26); :math:`(1-\alpha)^\infty = 0`.

    Args:
        alpha: restart probability α.
        steps: m₁..m_s.

    Returns:
        Ψ(Z).

    Raises:
        ConfigurationError: α outside (0, 1].
    """
    alpha = check_alpha(alpha)
    total = 0.0
    for m in steps:
        decay = 0.0 if math.isinf(m) else (1.0 - alpha) ** m
        total += 2.0 * (1.0 - alpha) / alpha * (1.0 - decay)
    return total / len(steps)


def psi_metric(z: torch.Tensor, z_prime: torch.Tensor) -> float:
    r""":math:`\psi(Z) = \sum_i \|z'_i - z_i\|_2` (Definition 3).

    Args:
        z: Z on one graph.
        z_prime: Z′ on its neighbour.

    Returns:
        ψ.

    Shapes:
        z: [n, d]
        z_prime: [n, d]
    """
    return float(torch.linalg.vector_norm(z_prime - z, dim=1).sum())


# ---------------------------------------------------------------------------- Theorem 1


def erlang_tail_quantile(d: int, tail: float) -> float:
    r""":math:`c_{sf} = \min\{u > 0: \int_0^u x^{d-1}e^{-x}/(d-1)!\,dx \ge 1 - \text{tail}\}` (Eq. 21)
    with tail = δ/c: the Gamma(d, 1) quantile, nudged up until its survival is ≤ tail.

    Args:
        d: the Gamma shape (the feature dimension).
        tail: δ/c, in (0, 1).

    Returns:
        c_sf.

    Raises:
        PrivacyParameterError: ``tail`` outside (0, 1).
    """
    if not 0.0 < tail < 1.0:
        raise PrivacyParameterError(f"delta/c must lie in (0, 1), got {tail}")
    u = float(stats.gamma.isf(tail, d))
    while float(stats.gamma.sf(u, d)) > tail:  # guard against rounding in isf
        u = math.nextafter(u, math.inf) * (1.0 + 1e-12)
    return u * (1.0 + 1e-10)  # margin for the 1e-12 shrink of β in theorem1_parameters


@dataclass
class TheoremOneParameters:
    r"""Every quantity of Theorem 1 (Eqs. 17–24) for one training run.

    ``regularization`` is Λ after Eq. (22) (the value the objective uses),
    ``regularization_requested`` the user's Λ.

    Attributes:
        epsilon: ε of Theorem 1.
        delta: δ of Theorem 1.
        num_classes: c.
        dim: d, the feature dimension of Z.
        n1: n₁, the objective's rows.
        omega: ω, the budget allocator in (0, 1).
        xi: ξ of Eq. (22).
        c1: sup |ℓ′|.
        c2: sup |ℓ″|.
        c3: sup |ℓ‴|.
        psi: Ψ(Z), the edge sensitivity of the features.
        c_sf: the Erlang tail quantile of Eq. (21).
        regularization_requested: the user's Λ.
        regularization: Λ after Eq. (22).
        c_theta: c_θ of Eq. (23).
        epsilon_lambda: ε_Λ of Eq. (24).
        lambda_prime: Λ′ of Eq. (17).
        beta: β of Eq. (18) (``inf`` when Ψ = 0).
    """

    epsilon: float
    delta: float
    num_classes: int
    dim: int
    n1: int
    omega: float
    xi: float
    c1: float
    c2: float
    c3: float
    psi: float
    c_sf: float
    regularization_requested: float
    regularization: float
    c_theta: float
    epsilon_lambda: float
    lambda_prime: float
    beta: float

    def guarantee(self) -> tuple[float, float]:
        r"""(ε, δ) re-derived from the parameters through the proof's inequalities:

        * Lemma 7: :math:`\epsilon_J = cd\log\big(1 + \frac{(2c_2 + c_3c_\theta)\Psi}{dn_1(\Lambda+\Lambda')}\big)`;
        * Lemma 8: :math:`\epsilon_B = c\beta(c_1 + c_2c_\theta)\Psi`;
        * Lemma 9: :math:`\delta = c\Pr[\mathrm{Gamma}(d,1) > \beta n_1((\Lambda+\Lambda')c_\theta - c_1)]`
          (the proof lower-bounds :math:`\|b_j\|` by :math:`n_1(\Lambda+\Lambda')c_\theta - n_1c_1`).

        Returns :math:`(\epsilon_J + \epsilon_B, \delta)`; Theorem 1 says this is ≤ (ε, δ).
        """
        c, d = self.num_classes, self.dim
        if self.psi == 0.0:
            return 0.0, 0.0
        total = self.regularization + self.lambda_prime
        eps_j = c * d * math.log1p((2 * self.c2 + self.c3 * self.c_theta) * self.psi / (d * self.n1 * total))
        eps_b = c * self.beta * (self.c1 + self.c2 * self.c_theta) * self.psi
        radius = self.beta * self.n1 * (total * self.c_theta - self.c1)
        delta = c * float(stats.gamma.sf(radius, d)) if radius > 0 else float(c)
        return eps_j + eps_b, delta

    def to_dict(self) -> dict:
        """Every field, JSON-ready."""
        return {k: float(v) if isinstance(v, float) else v for k, v in asdict(self).items()}


def theorem1_parameters(
    epsilon: float,
    delta: float,
    num_classes: int,
    dim: int,
    n1: int,
    regularization: float,
    omega: float,
    suprema: tuple[float, float, float],
    psi: float,
    xi: float,
) -> TheoremOneParameters:
    r"""Λ′ and β of Theorem 1, computed in the order of Eqs. (19)–(24), then (17)–(18):

    .. math::
        c_{sf} &= \text{Eq. (21) with tail } \delta/c, \\
        \Lambda &\leftarrow \max\big(\Lambda, \tfrac{c c_2\Psi c_{sf}}{n_1\omega\epsilon} + \xi\big), \\
        c_\theta &= \frac{n_1\omega\epsilon c_1 + c c_1\Psi c_{sf}}{n_1\omega\epsilon\Lambda - c c_2\Psi c_{sf}}, \\
        \epsilon_\Lambda &= cd\log\big(1 + \tfrac{(2c_2 + c_3c_\theta)\Psi}{dn_1\Lambda}\big), \\
        \Lambda' &= 0 \text{ if } \epsilon_\Lambda \le (1-\omega)\epsilon \text{ else }
            \tfrac{c(2c_2 + c_3c_\theta)\Psi}{n_1(1-\omega)\epsilon} - \Lambda, \\
        \beta &= \frac{\max(\epsilon - \epsilon_\Lambda, \omega\epsilon)}{c(c_1 + c_2c_\theta)\Psi}.

    Ψ = 0 (all :math:`m_i = 0`: the model never reads an edge) needs no noise: β = ∞.

    Args:
        epsilon: ε (finite, > 0).
        delta: δ in (0, 1).
        num_classes: c.
        dim: d.
        n1: n₁.
        regularization: the requested Λ (> 0).
        omega: ω in (0, 1).
        suprema: (c₁, c₂, c₃) of the loss.
        psi: Ψ(Z).
        xi: ξ (> 0).

    Returns:
        Every quantity of the theorem.

    Raises:
        PrivacyParameterError: ε or δ out of range.
        ConfigurationError: ω, ξ, Λ, n₁, d or c out of range.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PrivacyParameterError(f"Theorem 1 needs a finite epsilon > 0, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise PrivacyParameterError(f"Theorem 1 needs 0 < delta < 1, got {delta}")
    if not 0.0 < omega < 1.0:
        raise ConfigurationError(f"gcon omega (budget allocator) must lie in (0, 1), got {omega}")
    if not xi > 0:
        raise ConfigurationError(f"gcon xi (Eq. 22) must be > 0, got {xi}")
    if not regularization > 0:
        raise ConfigurationError(f"gcon regularization Λ must be > 0, got {regularization}")
    if n1 < 1 or dim < 1 or num_classes < 1:
        raise ConfigurationError("Theorem 1 needs n1, d, c ≥ 1")
    c, d = int(num_classes), int(dim)
    c1, c2, c3 = suprema
    c_sf = erlang_tail_quantile(d, delta / c)
    if psi == 0.0:
        return TheoremOneParameters(
            epsilon,
            delta,
            c,
            d,
            n1,
            omega,
            xi,
            c1,
            c2,
            c3,
            0.0,
            c_sf,
            regularization,
            regularization,
            0.0,
            0.0,
            0.0,
            math.inf,
        )
    budget = n1 * omega * epsilon
    lam = max(regularization, c * c2 * psi * c_sf / budget + xi)  # Eq. (22)
    c_theta = (budget * c1 + c * c1 * psi * c_sf) / (budget * lam - c * c2 * psi * c_sf)  # Eq. (23)
    eps_lambda = c * d * math.log1p((2 * c2 + c3 * c_theta) * psi / (d * n1 * lam))  # Eq. (24)
    if eps_lambda <= (1.0 - omega) * epsilon:  # Eq. (17)
        lambda_prime = 0.0
    else:
        lambda_prime = c * (2 * c2 + c3 * c_theta) * psi / (n1 * (1.0 - omega) * epsilon) - lam
    beta = max(epsilon - eps_lambda, omega * epsilon) / (c * (c1 + c2 * c_theta) * psi)  # Eq. (18)
    beta *= 1.0 - 1e-12  # absorb float rounding: the re-derived ε must not exceed the target
    return TheoremOneParameters(
        epsilon,
        delta,
        c,
        d,
        n1,
        omega,
        xi,
        c1,
        c2,
        c3,
        psi,
        c_sf,
        regularization,
        lam,
        c_theta,
        eps_lambda,
        lambda_prime,
        beta,
    )


# ---------------------------------------------------------------------------- noise


def sample_objective_noise(dim: int, count: int, beta: float, rng: np.random.Generator) -> np.ndarray:
    r"""Algorithm 2, ``count`` times: each column :math:`b_j` has radius
    :math:`a \sim \mathrm{Erlang}(d, \beta)` (density Eq. 14, i.e. Gamma(shape d, rate β)) and a
    direction :math:`u/\|u\|`, :math:`u \sim \mathcal N(0, I_d)`, uniform on the sphere
    (Lemma 6). The joint density is ∝ :math:`\exp(-\beta\|b\|)`. Returns [dim, count].

    Uses NumPy's seeded PCG64 for reproducibility; a deployment should draw from a
    cryptographically secure source (floating-point sampling attacks are out of scope).

    Args:
        dim: d.
        count: columns (c).
        beta: β (``inf``: zero noise).
        rng: the noise's generator.

    Returns:
        B.

    Raises:
        PrivacyParameterError: β ≤ 0.
    """
    if math.isinf(beta):
        return np.zeros((dim, count))
    if not beta > 0:
        raise PrivacyParameterError(f"noise parameter beta must be > 0, got {beta}")
    radius = rng.gamma(shape=dim, scale=1.0 / beta, size=count)
    direction = rng.standard_normal((dim, count))
    direction /= np.linalg.norm(direction, axis=0, keepdims=True)
    return direction * radius


# ---------------------------------------------------------------------------- optimisation


@dataclass
class SolveInfo:
    """What the warm start did (owner's record only: every number here is measured on the edges).

    Attributes:
        grad_norm: ‖∇L_priv‖_F at the returned point.
        initial_grad_norm: ‖∇L_priv‖_F at Θ = 0.
        relative_grad_norm: their ratio.
        iterations: L-BFGS iterations plus Newton steps.
        restarts: L-BFGS restarts.
        converged: whether ``grad_tol`` was reached.
        objective: L_priv at the returned point.
        grad_tol: γ, the target.
    """

    grad_norm: float
    initial_grad_norm: float
    relative_grad_norm: float
    iterations: int
    restarts: int
    converged: bool
    objective: float
    grad_tol: float


def perturbed_objective(theta: np.ndarray, z: np.ndarray, y: np.ndarray, loss, reg_total: float, noise: np.ndarray):
    r""":math:`L_{priv}` of Eq. (13) and its gradient, float64:
    :math:`\frac1{n_1}\sum_i\sum_j \ell(z_i^T\theta_j; y_{ij}) + \frac{\Lambda+\Lambda'}2\|\Theta\|_F^2
    + \frac1{n_1}B\odot\Theta`.

    Shapes: θ [d, c], z [n₁, d], y [n₁, c], noise [d, c]; returns (float, [d, c]).

    Args:
        theta: Θ.
        z: features of the n₁ rows.
        y: one-hot targets.
        loss: the loss object.
        reg_total: Λ + Λ′.
        noise: B.

    Returns:
        ``(value, gradient)``.
    """
    n1 = z.shape[0]
    scores = z @ theta
    value = loss.value(scores, y).sum() / n1 + 0.5 * reg_total * np.sum(theta * theta) + np.sum(noise * theta) / n1
    grad = z.T @ loss.d1(scores, y) / n1 + reg_total * theta + noise / n1
    return float(value), grad


def solve_perturbed_objective(
    z: np.ndarray,
    y: np.ndarray,
    loss,
    reg_total: float,
    noise: np.ndarray,
    grad_tol: float = 1e-8,
    max_iter: int = 5000,
    max_restarts: int = 3,
    max_newton: int = 50,
) -> tuple[np.ndarray, SolveInfo]:
    r"""Minimise :math:`L_{priv}` (Eq. 13/15) as far as the budget allows, aiming at
    :math:`\|\nabla L_{priv}(\hat\Theta)\|_F \le \gamma` = ``grad_tol``: L-BFGS (SciPy, float64)
    from Θ = 0, restarted from its last iterate if it stalls, then Newton steps (the Hessian is
    block diagonal: one d×d block per class) if L-BFGS stops on floating-point noise above γ.

    The privacy proof asks nothing of this point: the release starts the fixed schedule of
    :func:`descent_schedule` from it (after :func:`project_columns`), whose residual bound holds
    whatever the warm start returned, so a warm start that misses γ is not an error and nothing
    here decides whether to release. ``info.converged`` (whether γ was reached) is a private
    measurement for the owner's record. Deterministic given (z, y, noise).

    Shapes: z [n₁, d], y [n₁, c] (one-hot), noise [d, c]; returns Θ̂ [d, c].

    Args:
        z: features of the n₁ rows.
        y: one-hot targets.
        loss: the loss object.
        reg_total: Λ + Λ′.
        noise: B.
        grad_tol: γ (≥ 0; 0 spends the whole budget).
        max_iter: L-BFGS iterations per run.
        max_restarts: L-BFGS restarts.
        max_newton: Newton steps after L-BFGS.

    Returns:
        ``(Θ̂, info)``.

    Raises:
        ConfigurationError: a negative or non-finite ``grad_tol``.
    """
    if not (math.isfinite(grad_tol) and grad_tol >= 0):  # 0: spend the whole budget
        raise ConfigurationError(f"gcon warm-start tolerance must be ≥ 0, got {grad_tol}")
    d, c = z.shape[1], y.shape[1]
    theta = np.zeros((d, c))

    def fun(flat):
        value, grad = perturbed_objective(flat.reshape(d, c), z, y, loss, reg_total, noise)
        return value, grad.ravel()

    g0 = float(np.linalg.norm(fun(theta.ravel())[1]))
    target = float(grad_tol)
    iterations, restarts = 0, 0
    grad_norm = g0
    while grad_norm > target and restarts <= max_restarts:
        # ‖g‖_∞ ≤ γ/√(dc) implies ‖g‖_2 ≤ γ; ftol = 0 stops L-BFGS-B from quitting early
        result = optimize.minimize(
            fun,
            theta.ravel(),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iter, "gtol": target / math.sqrt(d * c), "ftol": 0.0, "maxcor": 20},
        )
        theta = result.x.reshape(d, c)
        iterations += int(result.nit)
        grad_norm = float(np.linalg.norm(fun(result.x)[1]))
        if grad_norm > target:
            restarts += 1
    newton_steps = 0
    while grad_norm > target and newton_steps < max_newton:
        _, grad = perturbed_objective(theta, z, y, loss, reg_total, noise)
        curvature = loss.d2(z @ theta, y)
        step = np.empty_like(theta)
        for j in range(c):
            hessian = (z * curvature[:, j : j + 1]).T @ z / z.shape[0] + reg_total * np.eye(d)
            step[:, j] = np.linalg.solve(hessian, grad[:, j])
        candidate = theta - step
        candidate_norm = float(np.linalg.norm(fun(candidate.ravel())[1]))
        newton_steps += 1
        if not candidate_norm < grad_norm:
            break
        theta, grad_norm = candidate, candidate_norm
    iterations += newton_steps
    value = fun(theta.ravel())[0]
    info = SolveInfo(
        grad_norm, g0, grad_norm / max(g0, 1e-300), iterations, restarts, grad_norm <= target, value, target
    )
    return theta, info


# ---------------------------------------------------------------------------- fixed schedule


@dataclass(frozen=True)
class DescentSchedule:
    r"""The fixed schedule of one release (:func:`descent_schedule`); every field is computed
    from Theorem 1's public parameters and the hyperparameters, none from the data.

    Attributes:
        strong_convexity: μ = Λ + Λ′.
        smoothness: L = μ + c₂/s; the step is 1/L.
        contraction: ρ = 1 − μ/L per step.
        radius: c_θ, the warm start's projection radius.
        diameter: 2√c·c_θ, the Frobenius diameter of that set.
        residual_tol: the target for the residual bound.
        max_steps: the cap on T.
        steps: T.
        residual_bound: ρ^T · diameter.
    """

    strong_convexity: float  # μ = Λ + Λ′
    smoothness: float  # L = μ + c₂/s, the step is 1/L
    contraction: float  # ρ = 1 − μ/L, per step
    radius: float  # c_θ: the warm start is projected onto ‖θ_j‖ ≤ c_θ (Theorem 1's good event)
    diameter: float  # 2√c·c_θ, the Frobenius diameter of that set
    residual_tol: float  # the target for the residual bound
    max_steps: int  # the cap on T
    steps: int  # T
    residual_bound: float  # ρ^T · diameter ≥ ‖Θ_T − Θ_priv‖_F on the good event

    def to_dict(self) -> dict:
        """Every field, JSON-ready."""
        return asdict(self)


def descent_schedule(params: TheoremOneParameters, blocks: int, residual_tol: float, max_steps: int) -> DescentSchedule:
    r"""The number T of gradient steps, and the residual bound they give, from public constants.

    With μ = Λ + Λ′ (Λ raised by Eq. 22) and :math:`L = \mu + c_2/s` (s = ``blocks``, the
    number of propagation steps concatenated in Eq. 11):

    * :math:`L_{priv}` is μ-strongly convex and L-smooth for every dataset. Its Hessian is block
      diagonal with blocks :math:`\frac1{n_1}\sum_i \ell''(z_i^T\theta_j)z_iz_i^T + \mu I`
      (Lemma 4), :math:`0 \le \ell'' \le c_2` (Eq. 19, Appendix F), and
      :math:`\|z_i\|^2 \le 1/s`: rows of :math:`\bar X` have norm ≤ 1 (Algorithm 1 line 2),
      :math:`R_m` is row-stochastic and non-negative (Lemma 1), and Eq. (11) concatenates s
      such rows scaled by 1/s. So every block's eigenvalues lie in [μ, L].
    * Contraction: with :math:`\nabla L_{priv}(\Theta_{priv}) = 0` and the mean Hessian
      :math:`\bar H` on the segment, :math:`\Theta_{k+1} - \Theta_{priv} = (I - \bar H/L)
      (\Theta_k - \Theta_{priv})`, so one step of size 1/L shrinks the distance by
      ρ = 1 − μ/L (the losses are C², so no co-coercivity argument is needed).
    * Start: on Theorem 1's good event (every :math:`\|\theta_{priv,j}\| \le c_\theta`; Lemma 9
      bounds the complement's probability by the δ Theorem 1 records) both the projected warm
      start and :math:`\Theta_{priv}` lie in :math:`\{\|\theta_j\| \le c_\theta\}`, whose
      Frobenius diameter is :math:`2\sqrt c\,c_\theta`.

    Hence :math:`\|\Theta_T - \Theta_{priv}\|_F \le \rho^T\,2\sqrt c\,c_\theta` on the good
    event, for every dataset and every warm start. T is the fewest steps that bring this bound
    to ``residual_tol``, capped at ``max_steps``: a cap below that releases with the larger
    bound (and AMP's larger noise), never a refusal. Floating-point rounding (~1e-16 relative
    per step) is below the default tolerance by orders of magnitude and, as elsewhere, out of
    scope.

    Args:
        params: Theorem 1's parameters.
        blocks: s, the propagation steps concatenated.
        residual_tol: the target residual bound (> 0).
        max_steps: the cap on T (≥ 0).

    Returns:
        The schedule.

    Raises:
        ConfigurationError: ``residual_tol`` ≤ 0 or ``max_steps`` < 0.
    """
    if not (math.isfinite(residual_tol) and residual_tol > 0) or max_steps < 0:
        raise ConfigurationError("gcon residual_tol must be > 0 and descent_steps ≥ 0")
    mu = params.regularization + params.lambda_prime
    curvature = params.c2 / blocks  # sup ℓ'' · max ‖z_i‖²
    smoothness = mu + curvature
    contraction = curvature / smoothness  # = 1 − μ/L without cancellation
    diameter = 2.0 * math.sqrt(params.num_classes) * params.c_theta
    steps = 0
    if diameter > residual_tol:
        steps = max(0, math.ceil(math.log(residual_tol / diameter) / math.log(contraction)))
        while diameter * contraction**steps > residual_tol:  # rounding in the logarithms
            steps += 1
    steps = min(steps, int(max_steps))
    return DescentSchedule(
        mu,
        smoothness,
        contraction,
        params.c_theta,
        diameter,
        float(residual_tol),
        int(max_steps),
        steps,
        diameter * contraction**steps,
    )


def project_columns(theta: np.ndarray, radius: float) -> np.ndarray:
    r"""The Euclidean projection of Θ onto :math:`\{\|\theta_j\|_2 \le r\ \forall j\}` (each
    column scaled down to norm r if longer). Shapes: [d, c] → [d, c].

    Args:
        theta: Θ.
        radius: r.

    Returns:
        The projected Θ.
    """
    norms = np.linalg.norm(theta, axis=0, keepdims=True)
    return theta * np.minimum(1.0, radius / np.maximum(norms, np.finfo(float).tiny))


def descend(theta: np.ndarray, z: np.ndarray, y: np.ndarray, loss, noise: np.ndarray, schedule: DescentSchedule):
    r"""``schedule.steps`` gradient steps of size 1/L on :math:`L_{priv}`, no stopping rule
    (a fixed count is what makes the residual bound of :func:`descent_schedule` data-free).

    Shapes: θ [d, c], z [n₁, d], y [n₁, c], noise [d, c]; returns Θ_T [d, c].

    Args:
        theta: the projected warm start.
        z: features of the n₁ rows.
        y: one-hot targets.
        loss: the loss object.
        noise: B.
        schedule: the fixed schedule.
    """
    for _ in range(schedule.steps):
        _, grad = perturbed_objective(theta, z, y, loss, schedule.strong_convexity, noise)
        theta = theta - grad / schedule.smoothness
    return theta


# ---------------------------------------------------------------------------- AMP


def amp_sensitivity(residual_bound: float) -> float:
    r"""L2 sensitivity of the residual :math:`\Theta_T - \Theta_{priv}` that AMP's Gaussian covers:
    twice the schedule's residual bound (:attr:`DescentSchedule.residual_bound`).

    Approximate Minima Perturbation (Iyengar, Near, Song, Thakkar, Thakurta & Wang, "Towards
    Practical Differentially Private Convex Optimization", IEEE S&P 2019, Algorithm 1 and its
    privacy theorem): objective perturbation pays (ε₁, δ₁) for the exact minimiser and a Gaussian
    added to the approximate one pays (ε₂, δ₂) for the residual, composed basically.

    **The argument, and why 2·bound.** Condition on the exact minimiser :math:`t = \Theta_{priv}`
    (released by Theorem 1). Given t and the data D the noise B is determined (first-order
    condition), so the residual :math:`g(D, t) = \Theta_T - t` of the deterministic pipeline
    (warm start, projection, T steps) is a function of (D, t). On Theorem 1's good event (all
    :math:`\|t_j\| \le c_\theta`) :math:`\|g(D, t)\| \le b_T` = the residual bound for every D, so
    for neighbours D, D′ and the same t, :math:`\|g(D,t) - g(D',t)\| \le 2b_T`, which the Gaussian
    covers. Theorem 1's proof bounds the density ratio of t only on that event and charges its
    complement to δ₁ (Lemma 9), so the residual needs no event of its own: for any output set E,
    :math:`P_D[E] \le \delta_1 + \delta_2 + e^{\epsilon_1+\epsilon_2}P_{D'}[E]`.
    Iyengar et al.'s Algorithm 1 uses γ/Λ (one residual, not the difference of two) and assumes
    the solver reaches γ — a data-dependent event; Redberg, Koskela & Wang (2023) also use the
    factor 2. Here the bound holds by construction, so no run is ever refused.

    Args:
        residual_bound: b_T (finite, ≥ 0).

    Returns:
        2·b_T.

    Raises:
        ConfigurationError: a negative or non-finite bound.
    """
    if not (math.isfinite(residual_bound) and residual_bound >= 0):
        raise ConfigurationError(f"AMP needs a finite residual bound ≥ 0, got {residual_bound}")
    return 2.0 * float(residual_bound)


def gaussian_delta(multiplier: float, epsilon: float) -> float:
    r"""δ(ε) of the Gaussian mechanism with noise σ = multiplier · Δ (Balle & Wang 2018, Theorem 8,
    the exact "analytic Gaussian mechanism"; μ = 1/multiplier):
    :math:`\delta = \Phi(\tfrac{\mu}{2} - \tfrac{\epsilon}{\mu}) - e^{\epsilon}\Phi(-\tfrac{\mu}{2} - \tfrac{\epsilon}{\mu})`.

    Args:
        multiplier: σ/Δ (> 0).
        epsilon: ε.

    Returns:
        δ(ε).
    """
    mu = 1.0 / float(multiplier)
    first = float(stats.norm.cdf(mu / 2.0 - epsilon / mu))
    second = math.exp(epsilon + float(stats.norm.logcdf(-mu / 2.0 - epsilon / mu)))
    return max(0.0, first - second)


def amp_noise_multiplier(epsilon: float, delta: float) -> float:
    r"""The smallest Gaussian noise multiplier z (σ₂ = z · sensitivity, up to a 1e-6 relative
    bisection tolerance) that is (ε₂, δ₂) = (``epsilon``, ``delta``)-DP by the exact analytic
    Gaussian bound (:func:`gaussian_delta`). The RDP conversion would floor at small ε₂ (AMP's
    share is ~1 % of ε), so this one mechanism is recorded directly in (ε, δ).

    Args:
        epsilon: ε₂.
        delta: δ₂.

    Returns:
        z.

    Raises:
        PrivacyParameterError: on ε₂ ≤ 0 or δ₂ ∉ (0, 1).
    """
    if not (math.isfinite(epsilon) and epsilon > 0) or not 0.0 < delta < 1.0:
        raise PrivacyParameterError(f"AMP needs ε₂ > 0 and 0 < δ₂ < 1, got ({epsilon}, {delta})")
    lo, hi = 1e-3, 1.0
    while gaussian_delta(hi, epsilon) > delta:
        lo, hi = hi, hi * 4.0
    while hi / lo - 1.0 > 1e-6:
        mid = math.sqrt(lo * hi)
        if gaussian_delta(mid, epsilon) <= delta:
            hi = mid
        else:
            lo = mid
    assert gaussian_delta(hi, epsilon) <= delta
    return hi


# --------------------------------------------------------------------------- JSON forms of the plan's numbers


def steps_to_json(steps: list[float]) -> list:
    """Propagation steps in JSON form (∞ as ``"inf"``).

    Args:
        steps: m₁..m_s.

    Returns:
        The steps as ints, with ``"inf"`` for ∞.
    """
    return ["inf" if math.isinf(m) else int(m) for m in steps]


def json_float(value: float):
    """A float in JSON form: ``None`` for ±∞ and NaN, anything else unchanged.

    Args:
        value: the value.

    Returns:
        ``value``, or ``None``.
    """
    return None if isinstance(value, float) and not math.isfinite(value) else value
