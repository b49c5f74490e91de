"""DPAR (Zhang et al., WWW 2024) headline claims: Table 1, cora_ml, ε = 8 (δ = 2e-3), METIS split.

The reference code's setup (see ``defenses/dpar/``): METIS into 9 parts (seed 0), test = part 4,
validation = part 5, training pool = the other 7, edges between parts removed; q′ = 0.09 node
sampling, M = 70 DP-APPR rows plus identity rows for the other sampled nodes.
"""

from __future__ import annotations

from reproduce import Claim, Run

SPLIT = "metis:9"
SEEDS = (0, 1, 2, 3, 4)


def _dpar(defense: str, protocol: str | None, epsilon: float | str = 8.0, split: str = SPLIT) -> Run:
    sets = () if protocol is None else (f"protocol={protocol}",)
    delta = 0.002 if epsilon != "inf" else "auto"
    return Run(defense, "cora_ml", split, epsilon=epsilon, delta=delta, sets=sets)


METIS_EVIDENCE = (
    "METIS parts are almost class-pure on cora_ml, so the test part decides the number. With pymetis "
    "(METIS 5, options seed=0) on dpaudit's cora_ml (PyG CitationFull, 2995 nodes) part 4 holds 342 nodes, "
    "251 of class 6 (73 %), while the 2330-node training pool holds only 39 class-6 nodes (1.7 %; "
    "≈ 4 of the ≈ 210 sampled ones); even the non-private pipeline reaches train accuracy 0.82 and test "
    "accuracy ≈ 0.19 on it. The authors' part 4 must differ (other METIS build/options or node order): "
    "with pymetis default options part 4 is classes 1/3/4 (146/92/90), recursive bisection gives class 0 "
    "(198), recursive + seed 0 gives class 2 (323). dpaudit keeps the issue's 'seed 0, part 4' and does not "
    "pick a partition by its test accuracy. The `inductive:0.8,0.2` claims below (the paper's written "
    "setup) show the same pipeline on a split whose test set follows the class distribution. Measured "
    "(seeds 0-4): em1 paper 0.180, em0 paper 0.174, gm paper 0.178, nodp under the paper protocol 0.194; "
    "under today's sound protocol (public source slots, identity and pair terms) em1 0.212, em0 0.213, gm "
    "0.210 and nodp 0.343."
)

INDUCTIVE_EVIDENCE = (
    "On the paper's written split the non-private pipeline is close to the paper (nodp under the paper "
    "protocol 0.680 ± 0.036 against 0.7076; 0.469 before the identity rows and the column rescaling; under "
    "today's sound defaults, the nodp column, 0.825 ± 0.009), but EM1 under the paper's accounting "
    "reaches 0.492 ± 0.039 against 0.6199 (0.182 before). At the paper's Gumbel scale (0.0087 against "
    "utilities clipped at C2 = 0.001) the 70 DP-APPR rows pick nearly random neighbours, so the accuracy comes "
    "from the ≈ 165 identity rows under DP-SGD noise 1.15·C. Which columns the reference rescales is not "
    "certain: rescaling only the DP-APPR rows' columns instead of the whole training matrix gave 0.450 against "
    "0.461 on validation data (inductive:0.8,0.1,0.1, seeds 0-2), so dpaudit keeps the whole matrix. Other "
    "reference details dpaudit cannot see (feature preprocessing, optimiser, where dropout sits, its RDP "
    "conversion) may explain the rest; nothing was tuned on test data. Sound EM1 (0.773 ± 0.020) scores above "
    "the paper's number, but its gain is Eq. 4 inference on the query graph, which its ε does not cover (the "
    "card says so; benchmarks/results/dpar.md); DP-APPR selects at chance at node level."
)

CLAIMS = [
    Claim(
        id="dpar-em1-eps8-metis",
        source="DPAR Table 1, cora_ml",
        statement="DPAR-EM1 at ε = 8 reaches the paper's accuracy (METIS split of the reference code)",
        paper_value="0.6199",
        runs={"paper": _dpar("dpar-em1", "paper"), "sound": _dpar("dpar-em1", "sound")},
        rule="paper ≥ 0.57",
        holds=lambda m: m["paper"] >= 0.57,
        seeds=SEEDS,
        evidence=METIS_EVIDENCE,
    ),
    Claim(
        id="dpar-nodp-metis",
        source="DPAR Table 1, cora_ml",
        statement="DPARNoDP (no noise) reaches the paper's accuracy (METIS split of the reference code)",
        paper_value="0.7076",
        runs={"sound": _dpar("dpar-nodp", None, "inf"), "paper": _dpar("dpar-nodp", "paper", "inf")},
        rule="sound (the default, no --set) ≥ 0.66",
        holds=lambda m: m["sound"] >= 0.66,
        seeds=SEEDS,
        evidence=METIS_EVIDENCE,
    ),
    Claim(
        id="dpar-em1-eps8-inductive",
        source="DPAR Table 1, cora_ml (the paper's written 80/20 inductive setup)",
        statement="DPAR-EM1 at ε = 8 on the paper's written split (random inductive 80/20, re-drawn per seed)",
        paper_value="0.6199",
        runs={
            "paper": _dpar("dpar-em1", "paper", split="inductive:0.8,0.2"),
            "sound": _dpar("dpar-em1", "sound", split="inductive:0.8,0.2"),
            "nodp": _dpar("dpar-nodp", None, "inf", split="inductive:0.8,0.2"),
        },
        rule="paper ≥ 0.57",
        holds=lambda m: m["paper"] >= 0.57,
        seeds=SEEDS,
        evidence=INDUCTIVE_EVIDENCE,
    ),
    Claim(
        id="dpar-em0-eps8-metis",
        source="DPAR Table 1, cora_ml",
        statement="DPAR-EM0 at ε = 8 (METIS split of the reference code)",
        paper_value="0.5965",
        runs={"paper": _dpar("dpar-em0", "paper"), "sound": _dpar("dpar-em0", "sound")},
        rule="paper ≥ 0.5965 − 0.05",
        holds=lambda m: m["paper"] >= 0.5465,
        seeds=SEEDS,
        evidence=METIS_EVIDENCE,
    ),
    Claim(
        id="dpar-gm-eps8-metis",
        source="DPAR Table 1, cora_ml",
        statement="DPAR-GM at ε = 8 (METIS split of the reference code)",
        paper_value="0.4854",
        runs={"paper": _dpar("dpar-gm", "paper"), "sound": _dpar("dpar-gm", "sound")},
        rule="paper ≥ 0.4854 − 0.05",
        holds=lambda m: m["paper"] >= 0.4354,
        seeds=SEEDS,
        evidence=METIS_EVIDENCE,
    ),
]
