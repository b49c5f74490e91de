"""GAP (Sajadmanesh et al., USENIX Security 2023) headline claims on the Facebook class-year task.

The paper's "Facebook" is UIllinois20 predicting class year; dpaudit uses the Facebook100
school ``johnshopkins55`` with the same target (``johnshopkins55:year``) and the paper's one
75/10/15 random split shape (a new split per seed). ``paper`` runs select hops (and D for
GAP-NDP) on validation accuracy and keep best-validation checkpoints (``sound: false``);
``sound`` runs choose, at edge level and ∞ only, the hop prefix of one release and the
checkpoints on validation accuracy (post-processing there: features and labels are not
protected); at node level they use the fixed defaults and the last iterate.
"""

from __future__ import annotations

from reproduce import Claim, Run

DATASET = "johnshopkins55:year"
SPLIT = "random:0.75,0.1,0.15"


def _run(defense: str, epsilon="inf", *sets: str) -> Run:
    return Run(defense, DATASET, SPLIT, epsilon=epsilon, sets=tuple(sets))


#: Sound gap-ndp's degree promise (degree_bound=promise) refuses graphs whose maximum degree
#: exceeds D. johnshopkins55's maximum degree is 886, so the recorded sound run states the public
#: promise D = 900 (a round bound above it; the promise reveals only that no node has more than
#: 900 friends). The default projection at D = 100 scores alike (0.543, benchmarks/results/honest.md).
SOUND_MAX_DEGREE = 900

MLP = _run("mlp")
MLP_DP = _run("mlp-dp", 8)
GCN = _run("gcn")

CLAIMS = [
    Claim(
        id="gap-edp-beats-mlp",
        source="GAP Table 3 / Figure 3 (Facebook)",
        statement="GAP-EDP at ε = 4 beats the non-private MLP",
        paper_value="GAP-EDP(ε=4) 76.3 vs MLP ≈ 50 (README: MLP-DP 50.2)",
        runs={
            "paper": _run("gap-edp", 4, "protocol=paper"),
            "sound": _run("gap-edp", 4, "protocol=sound"),
            "mlp": MLP,
        },
        rule="paper > mlp",
        holds=lambda m: m["paper"] > m["mlp"],
    ),
    Claim(
        id="gap-inf-near-gcn",
        source="GAP Table 3 (Facebook)",
        statement="non-private GAP-∞ is within a few points of GCN",
        paper_value="GAP-∞ 80.0",
        runs={
            "paper": _run("gap-inf", "inf", "protocol=paper"),
            "sound": _run("gap-inf", "inf", "protocol=sound"),
            "gcn": GCN,
        },
        rule="paper ≥ gcn − 0.03",
        holds=lambda m: m["paper"] >= m["gcn"] - 0.03,
        evidence=(
            "measured (3 seeds): gap-inf paper 0.752 ± 0.010 (K chosen on validation, mostly 3-5, best-validation "
            "checkpoints, reference architecture) vs the registry gcn 0.786 ± 0.016 (Kipf & Welling's setup; the "
            "earlier 2x64 GCN reached 0.864): short by 0.004 of the 3-point margin; sound 0.753 ± 0.012 (best "
            "prefix of one K = 2 release and best-validation checkpoints, free at ∞; 0.611 with the last iterate). The paper itself has GAP-inf 3.2 points below SAGE-inf on Facebook (80.0 vs 83.2); dpaudit's "
            "school (johnshopkins55) and GCN baseline differ. Nothing tuned on test data."
        ),
    ),
    Claim(
        id="gap-ndp-beats-mlp-dp",
        source="GAP Table 3 (Facebook)",
        statement="GAP-NDP at ε = 8 beats MLP-DP at ε = 8",
        paper_value="GAP-NDP(ε=8) 63.2 vs MLP-DP 50.2",
        runs={
            "paper": _run("gap-ndp", 8, "protocol=paper"),
            "sound": _run("gap-ndp", 8, "protocol=sound", "degree_bound=promise", f"max_degree={SOUND_MAX_DEGREE}"),
            "mlp-dp": MLP_DP,
        },
        rule="paper > mlp-dp",
        holds=lambda m: m["paper"] > m["mlp-dp"],
    ),
]
