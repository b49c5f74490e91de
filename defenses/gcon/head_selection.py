r"""``protocol=sound``'s accounted choice of what answers a query: Θ (Eq. 16) or the public feature
encoder alone (issue 50).

Why: GCON's Θ is a linear model over encoded features propagated on the private graph, trained to
reproduce the encoder's pseudo-labels (Appendix Q, n₁ = n). Where the public encoder is already
good and the graph adds little to it, Θ can answer worse than the encoder it learnt from: on
cora_ml ``per-class:20,500,1000`` at ε = 4 Θ scores 0.707 and the encoder 0.741 (test accuracy,
seeds 0–2), while on Planetoid Cora Θ scores 0.731 against the encoder's 0.689. Which one is better
depends on the private edges, so the choice reads them, and is paid for.

The mechanism. After Θ is released, count the validation nodes whose Eq. (16) answer over the
training graph is right:

    C_Θ(G) = #{v ∈ V_val : argmax_j ((1 − α_I)(ÃX̄)_v + α_I X̄_v) θ_j = y_v},  Ã = D⁻¹(A + I).

Row v of Ã reads only v's own edges (the row-normalised adjacency of
:func:`~defenses.gcon.mechanism.normalized_adjacency`), X̄ (the encoder's features) and Θ are fixed
here — X̄ is public, Θ already released — so adding or removing one undirected edge {a, b} changes
rows a and b only and C_Θ by at most **2**. C_Θ is released with discrete Laplace noise of scale
2/ε_s (:func:`~defenses.gcon.homophily.discrete_laplace`, the geometric mechanism: pure ε_s-edge-DP,
δ = 0). The encoder's count C_E reads features and public labels only (free at edge level, the same
on every edge-neighbour). The head is Θ when C̃_Θ ≥ C_E, else the encoder: post-processing. Θ, the
homophily statistic and this count compose by basic composition (ε's and δ's add); the count is
charged ε_s = s·ε (s = ``head_share``) and Theorem 1 + AMP get (1 − h − s)ε.

On a graph the heterophily rule flags (:func:`~defenses.gcon.homophily.heterophilous`) the head is
the encoder whatever the count; the count is still released, so every sound fit's ledger has the
same records. Where the count cannot be read under this bound — no validation node in the training
graph (an inductive split or none at all), or ``inference="public"`` (Algorithm 4 propagates over
several hops, so one edge moves many answers) — nothing is counted, the head is Θ, and ε_s is
still recorded as spent (over-reporting is sound). The same holds where the count could not tell
the heads apart (:func:`informative`: its noise's std above 3 % of the validation nodes, e.g. at
ε = 1 on 500 validation nodes): a public decision from ε_s and the split's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from defenses.gcon.homophily import discrete_laplace
from defenses.gcon.mechanism import normalized_adjacency, one_hop_features
from dpaudit.accounting import RecordedGuarantee

HEAD_RECORD = "gcon answer-head selection (Laplace count)"

#: L1 sensitivity of C_Θ to one undirected edge: the two endpoints' rows of Ã
COUNT_SENSITIVITY = 2.0

#: the count is read only where it can tell the heads apart: one standard deviation of its noise
#: at most this share of the validation nodes (a public decision: ε_s and the split's size). The
#: heads differ by 3.4 (cora_ml ``per-class:20,500,1000``) and 4.2 (Cora) points of validation
#: accuracy at ε = 4; at ε = 1 the noise's std is 5.7 % of Cora's 500 validation nodes and the
#: choice was close to a coin (4–5 of 9 fits each way), and on the demo's 50 it is 57 %.
INFORMATIVE_SHARE = 0.03


def head_share(hp) -> float:
    """The share s of ε a fit spends on the head's count: ``hp.head_share`` under ``protocol=sound``
    with ``adapt="homophily"``; 0 otherwise (``paper`` keeps Appendix Q's selection; ``adapt="none"``
    keeps the fixed fields and spends nothing beyond Θ).

    Args:
        hp: GCON's hyperparameters (or a namespace with ``protocol``, ``adapt``, ``head_share``).

    Returns:
        s ∈ [0, 1).
    """
    if getattr(hp, "protocol", "sound") == "paper" or getattr(hp, "adapt", "none") != "homophily":
        return 0.0
    return float(getattr(hp, "head_share", 0.0))


def count_scale(epsilon: float) -> float:
    """Scale t = 2/ε_s of the count's discrete Laplace noise (0 when ε_s = ∞).

    Args:
        epsilon: ε_s.

    Returns:
        t.
    """
    return 0.0 if math.isinf(epsilon) else COUNT_SENSITIVITY / epsilon


def theta_correct(
    edge_index: torch.Tensor,
    num_nodes: int,
    x_enc: torch.Tensor,
    theta: torch.Tensor,
    alpha_inference: float,
    steps: list[float],
    nodes: torch.Tensor,
    labels: torch.Tensor,
) -> int:
    """C_Θ: how many of ``nodes`` Θ's Eq. (16) answer over the graph ``edge_index`` gets right.

    Args:
        edge_index: the graph's edges (both directions, no self-loops).
        num_nodes: n.
        x_enc: X̄, the encoded features of every node.
        theta: the released Θ.
        alpha_inference: α_I.
        steps: m₁..m_s.
        nodes: the counted (validation) nodes.
        labels: every node's label.

    Returns:
        The count (an integer of edge sensitivity :data:`COUNT_SENSITIVITY`).

    Shapes:
        edge_index: [2, E]; x_enc: [n, d₁]; theta: [s·d₁, c]; nodes: [k]; labels: [n]
    """
    with torch.no_grad():
        adj = normalized_adjacency(edge_index.to(x_enc.device), int(num_nodes))
        z = one_hop_features(adj, x_enc, alpha_inference, steps)[nodes]
        answers = (z @ theta.to(z.dtype)).argmax(dim=1)
        return int((answers == labels[nodes]).sum())


def count_noise_std(epsilon: float) -> float:
    """The standard deviation of the count's discrete Laplace noise at ε_s: √(2q)/(1 − q) with
    q = e^{−1/t}, t = 2/ε_s (0 at ε_s = ∞).

    Args:
        epsilon: ε_s.

    Returns:
        The noise's standard deviation, in counted nodes.
    """
    scale = count_scale(epsilon)
    if scale == 0:
        return 0.0
    q = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * q) / (1.0 - q)


def informative(epsilon: float, validation_nodes: int) -> bool:
    """Whether the count is read: its noise's std is at most :data:`INFORMATIVE_SHARE` of the
    validation nodes (public: ε_s and the split's size, no data).

    Args:
        epsilon: ε_s.
        validation_nodes: the nodes that would be counted.

    Returns:
        Whether to count.
    """
    return validation_nodes > 0 and count_noise_std(epsilon) <= INFORMATIVE_SHARE * validation_nodes


def choose_head(noisy_theta_correct: int | None, encoder_correct: int | None, flagged: bool) -> str:
    """The public rule: ``"encoder"`` on a flagged graph or when the released count of Θ's correct
    validation answers is below the encoder's; ``"theta"`` otherwise (ties, or nothing counted).

    Args:
        noisy_theta_correct: C̃_Θ, or ``None`` when nothing was counted.
        encoder_correct: C_E, or ``None`` when nothing was counted.
        flagged: whether the heterophily rule flags the graph.

    Returns:
        ``"theta"`` or ``"encoder"``.
    """
    if flagged:
        return "encoder"
    if noisy_theta_correct is None or encoder_correct is None:
        return "theta"
    return "theta" if int(noisy_theta_correct) >= int(encoder_correct) else "encoder"


@dataclass(frozen=True)
class HeadSelection:
    """The released count and the head it gives.

    Attributes:
        epsilon: ε_s (``math.inf`` when nothing is private: the exact count).
        scale: the discrete Laplace scale (0 at ε_s = ∞).
        noisy_theta_correct: C̃_Θ, or ``None`` when nothing was counted.
        encoder_correct: C_E (public), or ``None`` when nothing was counted.
        validation_nodes: how many nodes were counted (public: the split).
        flagged: whether the heterophily rule flags the graph.
        why_not_counted: why nothing was counted, or ``None``.
    """

    epsilon: float
    scale: float
    noisy_theta_correct: int | None
    encoder_correct: int | None
    validation_nodes: int
    flagged: bool
    why_not_counted: str | None = None

    @property
    def head(self) -> str:
        """What answers a query (:func:`choose_head`)."""
        return choose_head(self.noisy_theta_correct, self.encoder_correct, self.flagged)

    def mechanism(self) -> RecordedGuarantee:
        """The ledger record: pure ε_s-DP (δ = 0) with its calibration in the details."""
        return head_mechanism(self.epsilon)

    def card(self) -> dict:
        """The card's entry: ε_s (``None`` at ∞), the noise, both counts and the head."""
        return {
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "laplace_scale": self.scale,
            "sensitivity": COUNT_SENSITIVITY,
            "distribution": "discrete Laplace (two-sided geometric) on the integer count",
            "noisy_theta_correct": self.noisy_theta_correct,
            "encoder_correct": self.encoder_correct,
            "encoder_reads_edges": False,
            "validation_nodes": self.validation_nodes,
            "heterophilous": self.flagged,
            "why_not_counted": self.why_not_counted,
            "head": self.head,
            "rule": "theta when the released count of Θ's correct validation answers ≥ the encoder's, else encoder",
        }


def release_head_selection(
    theta_correct: int | None,
    encoder_correct: int | None,
    validation_nodes: int,
    epsilon: float,
    rng: np.random.Generator,
    flagged: bool,
    why_not_counted: str | None = None,
) -> HeadSelection:
    """Discrete Laplace of scale 2/ε_s on C_Θ (nothing when ``theta_correct`` is ``None``).

    Args:
        theta_correct: C_Θ (the exact count, never released), or ``None`` when not counted.
        encoder_correct: C_E.
        validation_nodes: nodes counted.
        epsilon: ε_s (``math.inf``: the exact count).
        rng: the privacy noise source's generator.
        flagged: whether the heterophily rule flags the graph.
        why_not_counted: the reason when ``theta_correct`` is ``None``.

    Returns:
        The :class:`HeadSelection`.
    """
    scale = count_scale(epsilon)
    noisy = None
    if theta_correct is not None:
        noisy = int(theta_correct) + (int(discrete_laplace(scale, 1, rng)[0]) if scale > 0 else 0)
    return HeadSelection(
        epsilon,
        scale,
        noisy,
        None if theta_correct is None else encoder_correct,
        validation_nodes,
        flagged,
        why_not_counted,
    )


def head_mechanism(epsilon: float) -> RecordedGuarantee:
    """The ledger record of the count at ε_s (a function of ε_s only: ``replan`` and the load-time
    check re-derive it).

    Args:
        epsilon: ε_s.

    Returns:
        The pure ε_s-DP record.
    """
    return RecordedGuarantee(
        epsilon,
        0.0,
        name=HEAD_RECORD,
        details={"scale": count_scale(epsilon), "sensitivity": COUNT_SENSITIVITY, "counts": 1},
    )
