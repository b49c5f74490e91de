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

The heterophily rule (issue 50, :func:`heterophilous`) reads the same ĥ against the chance level
q = Σ_k p_k² of the labels ℓ (:func:`chance_agreement`: features and public labels, no edge): a
graph whose (ĥ − q)/(1 − q) is at most :data:`HETEROPHILY_KNOT` trains with α = 1, answers with
α_I = 1, and is answered by the encoder alone (:func:`training_restart`, :func:`answer_head`).
Post-processing again: no ε beyond ε_h. Derived on Texas and Wisconsin against Reed98:year, held
out on Cornell and Actor (``docs/defenses/gcon.md``).
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

#: the heterophily rule (issue 50, :func:`heterophilous`): a graph whose released agreement is at
#: most this far above chance, (ĥ − q)/(1 − q) ≤ knot, trains and answers with α = α_I = 1. Derived
#: on WebKB Texas and Wisconsin (adjusted agreement −0.03 to 0.00 with the issue-50 encoder,
#: 3 public splits each) against Facebook100 Reed98:year (0.27, not a benchmark): the midpoint,
#: rounded down; held out on Cornell and Actor. See ``docs/defenses/gcon.md``.
HETEROPHILY_KNOT = 0.13

#: what answers a query: Ẑ Θ (Eq. 16), or the feature encoder alone (:func:`answer_head`)
ANSWER_HEADS = ("theta", "encoder")

#: α and α_I on a graph the heterophily rule flags
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

#: the encoder dropout on a graph the heterophily rule flags, where the encoder alone answers
#: (issue 50). Derived on WebKB Wisconsin and Cornell (public splits 0–2, the encoder alone:
#: Wisconsin 0.797 → 0.778, Cornell 0.640 → 0.685, mean 0.719 → 0.732), held out on Texas
#: (0.757 → 0.784) and Actor (0.357 → 0.357). Width 64 without dropout measured 0.737 on the
#: derivation pair but 0.347 on Actor; the one-knob change (the density rule's 0) was kept.
HETEROPHILY_ENCODER_DROPOUT = 0.0


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


def encoder_dropout_rule(degree: float, default: float, flagged: bool = False) -> float:
    """The public density rule: :data:`DENSE_ENCODER_DROPOUT` when the released mean degree is at
    least :data:`DENSE_DEGREE`, else ``default`` (the ``encoder_dropout`` field); and the
    heterophily rule's encoder: the same 0 on a graph :func:`heterophilous` flags, where the
    encoder alone answers (:data:`HETEROPHILY_ENCODER_DROPOUT`).

    Args:
        degree: the released mean degree (:func:`mean_degree`).
        default: the dropout used below the threshold.
        flagged: whether the heterophily rule flags the graph.

    Returns:
        The encoder's dropout.
    """
    if flagged:
        return HETEROPHILY_ENCODER_DROPOUT
    return DENSE_ENCODER_DROPOUT if float(degree) >= DENSE_DEGREE else float(default)


def chance_agreement(labels: torch.Tensor, num_classes: int) -> float:
    """q = Σ_k p_k², the label agreement of two nodes drawn at random, p_k the share of label k
    among ``labels`` (training labels and encoder pseudo-labels: features and public labels
    only, no edge — public at edge level, the same on every edge-neighbour).

    Shapes: labels [n].

    Args:
        labels: the labels ℓ the counts use, of the nodes of the training graph.
        num_classes: c.

    Returns:
        q ∈ [1/c, 1] (0 for no node).
    """
    if len(labels) == 0:
        return 0.0
    share = torch.bincount(labels.cpu(), minlength=int(num_classes)).double() / len(labels)
    return float((share**2).sum())


def adjusted_agreement(estimate: float, chance: float) -> float:
    """(ĥ − q) / (1 − q): the released agreement above what random pairs of the same labels give
    (≈ 0 on a heterophilous graph whatever its class balance; post-processing of ĥ and the public q).

    Args:
        estimate: the released ĥ.
        chance: q (:func:`chance_agreement`).

    Returns:
        The adjusted agreement (−∞ when q = 1 and ĥ < 1; 0 when both are 1).
    """
    if chance >= 1.0:
        return 0.0 if estimate >= 1.0 else -math.inf
    return (float(estimate) - float(chance)) / (1.0 - float(chance))


def heterophilous(estimate: float, chance: float | None) -> bool:
    """The public heterophily rule (issue 50): the released ĥ is at most :data:`HETEROPHILY_KNOT`
    above chance (:func:`adjusted_agreement`). ``chance`` ``None`` (a card written before the
    rule): never.

    Args:
        estimate: the released ĥ.
        chance: the public q, or ``None``.

    Returns:
        Whether the graph is treated as heterophilous.
    """
    return chance is not None and adjusted_agreement(estimate, chance) <= HETEROPHILY_KNOT


def training_restart(estimate: float, chance: float | None, alpha: float) -> float:
    """The training restart the propagation of Eq. (11) runs with: α = 1 on a graph the public
    heterophily rule (:func:`heterophilous`) flags — Z is then the encoded features X̄ themselves,
    matching the α_I = 1 predictions — else the configured ``alpha``. Post-processing of the
    released ĥ and the public q: no further ε. Theorem 1's plan stays the one of the configured α
    (Ψ(α) ≥ Ψ(1) = 0: a larger sensitivity than the run's, conservative).

    Args:
        estimate: the released ĥ.
        chance: the public q (``None``: the rule is off).
        alpha: the configured training restart α.

    Returns:
        α for training.
    """
    return HETEROPHILY_TRAINING_RESTART if heterophilous(estimate, chance) else float(alpha)


def answer_head(estimate: float, chance: float | None) -> str:
    """What answers a query (issue 50): ``"encoder"`` — the public feature encoder's own softmax,
    no edge read — on a graph :func:`heterophilous` flags, else ``"theta"`` (Ẑ Θ, Eq. 16).
    Post-processing of the released ĥ and the public q.

    Args:
        estimate: the released ĥ.
        chance: the public q (``None``: the rule is off).

    Returns:
        One of :data:`ANSWER_HEADS`.
    """
    return "encoder" if heterophilous(estimate, chance) else "theta"


def smoothing_offered(degree: float) -> bool:
    """The density rule's second half (issue 50): an encoder that chose the public feature-graph
    smoothing reads raw features instead on a graph whose released mean degree is at least
    :data:`DENSE_DEGREE` (the graph's own propagation already averages many neighbours; on
    reed98:year the smoothed encoder cost GCON about 27 points on the two seeds of three that chose it).

    Args:
        degree: the released mean degree (:func:`mean_degree`).

    Returns:
        Whether the smoothed input may be kept.
    """
    return float(degree) < DENSE_DEGREE


def inference_restart(estimate: float, chance: float | None = None) -> float:
    """The public rule: α_I from a label-agreement rate ĥ ∈ [0, 1]: 1 on a graph
    :func:`heterophilous` flags, else piecewise linear in ĥ (see :data:`RULE_KNOTS`).

    Args:
        estimate: ĥ.
        chance: the public chance agreement q (``None``: the knots alone, as before issue 50's rule).

    Returns:
        α_I, interpolated linearly between the rule's knots.
    """
    if heterophilous(estimate, chance):
        return HETEROPHILY_TRAINING_RESTART
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
    chance: float | None = None

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
            **(
                {}
                if self.chance is None
                else {
                    "chance_level": self.chance,
                    "chance_reads_edges": False,
                    "heterophily_knot": HETEROPHILY_KNOT,
                    "heterophilous": heterophilous(self.estimate, self.chance),
                    "head": answer_head(self.estimate, self.chance),
                }
            ),
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


def release_homophily(
    agree: int, total: int, epsilon: float, rng: np.random.Generator, chance: float | None = None
) -> HomophilyRelease:
    """Discrete Laplace of scale 2/ε_h (:func:`discrete_laplace`) on both integer counts,
    ĥ = agree~ / max(total~, 1) clipped to [0, 1], α_I by the rule (with the public chance
    agreement q when given: :func:`inference_restart`).

    Args:
        agree: the number of undirected edges whose ends share a label.
        total: the number of undirected edges.
        epsilon: ε_h (``math.inf``: exact counts, no noise).
        rng: the privacy noise source's generator.
        chance: the public q (:func:`chance_agreement`), or ``None`` (the knots alone).

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
    return HomophilyRelease(epsilon, scale, estimate, inference_restart(estimate, chance), noisy_total, chance)


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
