"""GCON (Wei et al., "GCON: Differentially Private Graph Convolutional Network via Objective
Perturbation") headline claim on Cora-ML.

The paper's Section VI-B / Fig. 1: GCON outperforms every edge-DP competitor — MLP (no edges,
hence edge-DP at any ε) is one of them — at every ε ∈ {0.5, 1, 2, 3, 4}, on Cora-ML's fixed
split of 20 training nodes per class, 500 validation and 1,000 test nodes
(``per-class:20,500,1000``; here a new split per seed), δ = 1/|E| (|E| = 16,316 in its Table II:
we pass δ = 6e-5 ≤ 1/16,316). Its accuracies are only plotted (Fig. 1); the text gives no
number, so the claim checked is the ordering at ε = 4.

``paper``: Appendix Q's selection inside ``fit`` — all 5,760 configurations of
:data:`defenses.gcon.PAPER_GRID` (d₁, α, m₁, n₁, loss/δ_l, Λ, α_I; everything but Adam's
learning rate, which has no counterpart in an exact solver) trained with Theorem 1 + AMP, the
best by validation accuracy released, the selection unaccounted (``sound: false``).
``sound``: the defaults, no selection (``sound: true``); since issue 41 its α_I comes from an
accounted homophily statistic (2 % of ε), so its cached runs from before were removed.
"""

from __future__ import annotations

from reproduce import Claim, Run

DATASET = "cora_ml"
SPLIT = "per-class:20,500,1000"
DELTA = "6e-5"


def _gcon(protocol: str, epsilon=4) -> Run:
    return Run("gcon", DATASET, SPLIT, epsilon=epsilon, delta=DELTA, sets=(f"protocol={protocol}",))


CLAIMS = [
    Claim(
        id="gcon-cora_ml-eps4-beats-mlp",
        source="GCON Section VI-B, Fig. 1 (Cora-ML), Appendix Q protocol",
        statement="GCON at ε = 4 beats the (edge-free, hence edge-DP) MLP on Cora-ML, 20 labels per class",
        paper_value="GCON above every edge-DP competitor incl. MLP at every ε (Fig. 1; values only plotted)",
        runs={
            "paper": _gcon("paper"),
            "sound": _gcon("sound"),
            "mlp": Run("mlp", DATASET, SPLIT),
        },
        rule="paper > mlp",
        holds=lambda m: m["paper"] > m["mlp"],
        seeds=(0, 1, 2, 3, 4),
    ),
    Claim(
        id="gcon-cora_ml-eps0.5-beats-mlp",
        source="GCON Section VI-B, Fig. 1 (Cora-ML), Appendix Q protocol",
        statement="GCON at the smallest ε of the paper (0.5) still beats MLP on Cora-ML, 20 labels per class",
        paper_value="GCON above every edge-DP competitor incl. MLP at every ε (Fig. 1; values only plotted)",
        runs={
            "paper": _gcon("paper", 0.5),
            "sound": _gcon("sound", 0.5),
            "mlp": Run("mlp", DATASET, SPLIT),
        },
        rule="paper > mlp",
        holds=lambda m: m["paper"] > m["mlp"],
        seeds=(0, 1, 2, 3, 4),
    ),
]
