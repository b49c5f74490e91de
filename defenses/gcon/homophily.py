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
edges), so the pair has L1 sensitivity 2 and Laplace noise of scale 2/ε_h on each count is
ε_h-edge-DP (Dwork, McSherry, Nissim & Smith 2006) — pure, δ = 0, charged in the ledger.
ĥ = agree~ / total~ (clipped to [0, 1]) is post-processing, and so is everything computed from it.

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

from dpaudit.accounting import RecordedGuarantee

HOMOPHILY_RECORD = "gcon label agreement of the edges (Laplace counts)"

#: (ĥ, α_I) knots of the public rule: at or below the low knot the graph is treated as
#: heterophilous (α_I = 1: a prediction reads the node's own features only), at or above the high
#: one as homophilous (α_I = 0.1: predictions lean on the neighbours), linear in between. Fixed
#: on Cora and WebKB (see the module docstring). α (training) stays the fixed ``alpha``, so
#: Theorem 1's plan does not depend on the statistic.
RULE_KNOTS = ((0.25, 1.0), (0.38, 0.1))

#: L1 sensitivity of the pair (agree, total) to one undirected edge
COUNTS_SENSITIVITY = 2.0


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
    """The released statistic: ĥ (public, post-processing of the Laplace counts), the α_I it
    gives, and the Laplace calibration (ε_h, scale). ``epsilon`` is ``math.inf`` when nothing is
    private (exact counts, no noise).

    Attributes:
        epsilon: ε_h (``inf``: exact counts).
        scale: each count's Laplace scale b.
        estimate: ĥ.
        alpha_inference: the α_I the rule gives.
    """

    epsilon: float
    scale: float
    estimate: float
    alpha_inference: float

    def mechanism(self) -> RecordedGuarantee:
        """The ledger record: pure ε_h-DP (δ = 0) with its calibration in the details."""
        return RecordedGuarantee(
            self.epsilon, 0.0, name=HOMOPHILY_RECORD,
            details={"scale": self.scale, "sensitivity": COUNTS_SENSITIVITY, "counts": 2},
        )  # fmt: skip

    def card(self) -> dict:
        """The card's entry: ε_h (``None`` at ∞), the Laplace scale, ĥ, α_I and the rule's knots."""
        return {
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "laplace_scale": self.scale,
            "estimate": self.estimate,
            "alpha_inference": self.alpha_inference,
            "rule_knots": [list(k) for k in RULE_KNOTS],
        }


def laplace_scale(epsilon: float) -> float:
    """Scale b of each count's Laplace noise at ε_h: b = Δ₁/ε_h with Δ₁ = 2 (0 when ε_h = ∞).

    Args:
        epsilon: ε_h.

    Returns:
        b.
    """
    return 0.0 if math.isinf(epsilon) else COUNTS_SENSITIVITY / epsilon


def release_homophily(agree: int, total: int, epsilon: float, rng: np.random.Generator) -> HomophilyRelease:
    """Laplace(2/ε_h) on both counts, ĥ = agree~ / max(total~, 1) clipped to [0, 1], α_I by the rule.

    Args:
        agree: edges whose endpoints share a label.
        total: undirected edges.
        epsilon: ε_h.
        rng: the noise's generator.

    Returns:
        The release.
    """
    scale = laplace_scale(epsilon)
    noisy_agree, noisy_total = float(agree), float(total)
    if scale > 0:
        noisy_agree += float(rng.laplace(0.0, scale))
        noisy_total += float(rng.laplace(0.0, scale))
    estimate = min(max(noisy_agree / max(noisy_total, 1.0), 0.0), 1.0)
    return HomophilyRelease(epsilon, scale, estimate, inference_restart(estimate))


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
