r"""``protocol=sound``'s accounted graph statistic: a noisy label-agreement rate of the edges, and
the public rule that maps it to the inference restart α_I of Eq. (16).

Why a statistic and not a selection: with fixed defaults GCON's accuracy on Cora-ML is capped by
its configuration, not by the noise (issue 41); the knob that carries most of the paper
protocol's gain is α_I, how much a node's prediction leans on its neighbours (the paper's
selection picks α_I = 0.1 on Cora-ML), and what that should be depends on whether
neighbours share labels (homophily). Two counts over the edges the
training may read give it, each of edge sensitivity 1:

* ``agree`` = #undirected edges {u, v} with ℓ(u) = ℓ(v), and ``total`` = #undirected edges,

where ℓ is the training label on training nodes and the encoder's argmax elsewhere (the
pseudo-labels of Appendix Q: features and public labels only, no edge). Adding or removing one
undirected edge changes ``total`` by exactly 1 and ``agree`` by 0 or 1 (ℓ does not depend on the
edges), so the pair has L1 sensitivity 2. The counts are integers and get integer noise: the
discrete Laplace (two-sided geometric) law of scale t = 2/ε_h on each count, Pr[k] ∝ exp(−|k|/t),
is ε_h-edge-DP — the geometric mechanism of Ghosh, Roughgarden & Sundararajan (2009, 2012),
in the form of Canonne, Kamath & Steinke (2020, Theorem 7 / Proposition 1: discrete Laplace of
scale Δ/ε on an integer query of L1 sensitivity Δ is ε-DP) — pure, δ = 0, charged in the ledger
exactly as the continuous Laplace of the same scale was (same ε_h, same scale recorded).
Integer noise on integer counts closes Mironov's (2012) floating-point attack on the textbook
Laplace sampler, whose double outputs are porous sets that can reveal the exact count; the
draw is ``scipy.stats.dlaplace`` (a difference of two geometric draws) on the privacy noise
source's generator (:mod:`dpaudit.training.noise`). ĥ = agree~ / total~ (clipped to [0, 1]) is
post-processing, and so is everything computed from it — including the mean degree
2·total~/n (n, the declared node count, is public) that the density rule
(:func:`encoder_dropout_rule`, issue 50) maps to the encoder's dropout: that rule costs no ε beyond ε_h.

The rule (:func:`inference_restart`) is public: a piecewise-linear map fixed on graphs that are
not benchmarks here (Planetoid Cora, homophilous, label agreement 0.42–0.46 with d₁ = 8 or 16,
where α_I = 0.1 beats α_I ≥ 0.6; WebKB Texas and Wisconsin, heterophilous, 0.09–0.21 (one
Wisconsin split 0.34), where α = α_I = 1 beats every smaller value; Cornell, 0.33, between; see
``docs/defenses/gcon.md``), then frozen. It is never fitted to the graph being trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from dpaudit.accounting import RecordedGuarantee

HOMOPHILY_RECORD = "gcon label agreement of the edges (Laplace counts)"

#: (ĥ, α_I) knots of the public rule: at or below the low knot the graph is treated as
#: heterophilous (α_I = 1: a prediction reads the node's own features only), at or above the high
#: one as homophilous (α_I = 0.1: predictions lean on the neighbours), linear in between. Fixed
#: on Cora and WebKB (see the module docstring). α (training) stays the fixed ``alpha``, so
#: Theorem 1's plan does not depend on the statistic.
RULE_KNOTS = ((0.25, 1.0), (0.38, 0.1))

#: the training restart α at or below the rule's low knot (:func:`training_restart`)
HETEROPHILY_TRAINING_RESTART = 1.0

#: L1 sensitivity of the pair (agree, total) to one undirected edge
COUNTS_SENSITIVITY = 2.0

#: the density rule (issue 50): a graph whose released mean degree 2·total~/n is at least this is
#: *dense*, and its encoder is trained without dropout (:data:`DENSE_ENCODER_DROPOUT`). NOT derived
#: on a held-out set: the dropout effect was found on johnshopkins55:year (mean degree ≈ 72, a
#: benchmark); the threshold sits between the sparse derivation graphs (Cora 3.9, Texas and
#: Wisconsin below 4, where the rule changes nothing) and the Facebook100 graphs; on reed98:year
#: (≈ 39, not a benchmark) it costs 1.7 points (2 seeds). See ``docs/defenses/gcon.md``.
DENSE_DEGREE = 20.0

#: the encoder dropout of a dense graph (the ``encoder_dropout`` field applies below DENSE_DEGREE)
DENSE_ENCODER_DROPOUT = 0.0


def label_agreement_counts(edge_index: torch.Tensor, labels: torch.Tensor) -> tuple[int, int]:
    """(agree, total) over the undirected edges of ``edge_index`` (each pair once, self-loops
    dropped; both directions of an edge count once).

    Shapes: edge_index [2, E] (either or both directions), labels [n].

    Args:
        edge_index: edges (either or both directions).
        labels: node labels.

    Returns:
        ``(agree, total)``.
    """
    u, v = edge_index[0], edge_index[1]
    keep = u != v
    lo, hi = torch.minimum(u[keep], v[keep]), torch.maximum(u[keep], v[keep])
    pairs = torch.unique(torch.stack([lo, hi]), dim=1)
    agree = int((labels[pairs[0]] == labels[pairs[1]]).sum())
    return agree, int(pairs.shape[1])


def mean_degree(noisy_total: int, num_nodes: int) -> float:
    """The released mean degree 2·max(total~, 0)/n: post-processing of the noisy edge count and the
    declared node count (public at edge level).

    Args:
        noisy_total: the released (noisy) number of undirected edges.
        num_nodes: n.

    Returns:
        The mean degree estimate (0 for an empty node set).
    """
    return 2.0 * max(int(noisy_total), 0) / max(int(num_nodes), 1)


def encoder_dropout_rule(degree: float, default: float) -> float:
    """The public density rule: :data:`DENSE_ENCODER_DROPOUT` when the released mean degree is at
    least :data:`DENSE_DEGREE`, else ``default`` (the ``encoder_dropout`` field).

    Args:
        degree: the released mean degree (:func:`mean_degree`).
        default: the dropout used below the threshold.

    Returns:
        The encoder's dropout.
    """
    return DENSE_ENCODER_DROPOUT if float(degree) >= DENSE_DEGREE else float(default)


def training_restart(estimate: float, alpha: float) -> float:
    """The public heterophily rule for training (issue 50): at or below the low knot of
    :data:`RULE_KNOTS` (where :func:`inference_restart` already answers α_I = 1) training also runs
    with α = 1, so Eq. (11)'s Z is the encoded features X̄ themselves and training matches the
    α_I = 1 predictions; above it, the configured ``alpha``. Post-processing of the released ĥ: no
    further ε. Theorem 1's plan stays the one of the configured α (Ψ(α) ≥ Ψ(1) = 0: a larger
    sensitivity than the run's, conservative).

    Args:
        estimate: the released ĥ.
        alpha: the configured training restart α.

    Returns:
        The α the propagation of Eq. (11) runs with.
    """
    return HETEROPHILY_TRAINING_RESTART if float(estimate) <= RULE_KNOTS[0][0] else float(alpha)


def inference_restart(estimate: float) -> float:
    """The public rule: α_I from a label-agreement rate ĥ ∈ [0, 1] (see :data:`RULE_KNOTS`).

    Args:
        estimate: ĥ.

    Returns:
        α_I, interpolated linearly between the rule's knots.
    """
    (h_low, a_low), (h_high, a_high) = RULE_KNOTS
    h = float(estimate)
    if h <= h_low:
        return a_low
    if h >= h_high:
        return a_high
    return a_low + (h - h_low) / (h_high - h_low) * (a_high - a_low)


@dataclass(frozen=True)
class HomophilyRelease:
    """The released statistic: ĥ (public, post-processing of the discrete-Laplace counts), the α_I
    it gives, and the calibration (ε_h, scale). ``epsilon`` is ``math.inf`` when nothing is
    private (exact counts, no noise)."""

    epsilon: float
    scale: float
    estimate: float
    alpha_inference: float
    noisy_total: int = 0

    def mechanism(self) -> RecordedGuarantee:
        """The ledger record: pure ε_h-DP (δ = 0) with its calibration in the details."""
        return RecordedGuarantee(
            self.epsilon,
            0.0,
            name=HOMOPHILY_RECORD,
            details={"scale": self.scale, "sensitivity": COUNTS_SENSITIVITY, "counts": 2},
        )

    def card(self) -> dict:
        """The card's entry: ε_h (``None`` at ∞), the Laplace scale, ĥ, α_I and the rule's knots."""
        return {
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "laplace_scale": self.scale,
            "distribution": "discrete Laplace (two-sided geometric) on the integer counts",
            "estimate": self.estimate,
            "alpha_inference": self.alpha_inference,
            "rule_knots": [list(k) for k in RULE_KNOTS],
            "noisy_total": self.noisy_total,
            "dense_degree": DENSE_DEGREE,
        }


def laplace_scale(epsilon: float) -> float:
    """Scale t of each count's discrete Laplace noise at ε_h: t = Δ₁/ε_h with Δ₁ = 2 (0 when ε_h = ∞)."""
    return 0.0 if math.isinf(epsilon) else COUNTS_SENSITIVITY / epsilon


def discrete_laplace(scale: float, size: int, rng: np.random.Generator) -> np.ndarray:
    r"""Integer noise of the discrete Laplace (two-sided geometric) law of scale ``scale``:
    Pr[k] = (1 − e^{−1/t}) / (1 + e^{−1/t}) · e^{−|k|/t} for every integer k (t = ``scale``).

    Added to an integer query of L1 sensitivity Δ with t = Δ/ε it is ε-DP (Ghosh, Roughgarden &
    Sundararajan 2009; Canonne, Kamath & Steinke 2020): the pmf ratio at k and k + Δ is at most
    e^{Δ/t} = e^ε. Drawn by ``scipy.stats.dlaplace`` (a difference of two i.i.d. geometric
    draws) on ``rng`` — integer outputs, so none of the porous floating-point support Mironov
    (2012) exploits in the textbook Laplace sampler.

    Args:
        scale: t > 0.
        size: how many draws.
        rng: the generator (the privacy noise source's, :mod:`dpaudit.training.noise`).

    Returns:
        ``size`` int64 draws.
    """
    return np.asarray(stats.dlaplace.rvs(1.0 / scale, size=size, random_state=rng), dtype=np.int64)


def release_homophily(agree: int, total: int, epsilon: float, rng: np.random.Generator) -> HomophilyRelease:
    """Discrete Laplace of scale 2/ε_h (:func:`discrete_laplace`) on both integer counts,
    ĥ = agree~ / max(total~, 1) clipped to [0, 1], α_I by the rule.

    Args:
        agree: the number of undirected edges whose ends share a label.
        total: the number of undirected edges.
        epsilon: ε_h (``math.inf``: exact counts, no noise).
        rng: the privacy noise source's generator.

    Returns:
        The :class:`HomophilyRelease`.
    """
    scale = laplace_scale(epsilon)
    noisy_agree, noisy_total = int(agree), int(total)
    if scale > 0:
        noise = discrete_laplace(scale, 2, rng)
        noisy_agree += int(noise[0])
        noisy_total += int(noise[1])
    estimate = min(max(noisy_agree / max(noisy_total, 1), 0.0), 1.0)
    return HomophilyRelease(epsilon, scale, estimate, inference_restart(estimate), noisy_total)


def homophily_share(hp) -> float:
    """The share h of ε a fit spends on the statistic: ``hp.homophily_share`` under
    ``protocol=sound`` with ``adapt="homophily"``; 0 otherwise (``paper`` keeps Appendix Q's
    grid; ``adapt="none"`` keeps the fixed α_I and spends nothing).

    Args:
        hp: GCON's hyperparameters.

    Returns:
        h ∈ [0, 1).
    """
    if getattr(hp, "protocol", "sound") == "paper" or hp.adapt != "homophily":
        return 0.0
    return float(hp.homophily_share)


def homophily_mechanism(epsilon: float) -> RecordedGuarantee:
    """The ledger record of the statistic at ε_h (what :meth:`HomophilyRelease.mechanism` records;
    a function of ε_h only, so ``replan`` and the load-time check re-derive it).

    Args:
        epsilon: ε_h.

    Returns:
        The pure ε_h-DP record.
    """
    return HomophilyRelease(epsilon, laplace_scale(epsilon), math.nan, math.nan).mechanism()
