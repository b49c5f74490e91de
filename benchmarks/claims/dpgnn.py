"""DP-GNN (Daigavane et al. 2022) headline claims: 1-layer DP-GCN beats DP-MLP at ε ≤ 12.

The paper's Table 1 shows it on ogbn-arxiv/products/mag and reddit (DP-GCN ≈ 6–10 points
above DP-MLP at ε ≤ 12); those graphs are not available offline, so the claim is checked on a
Facebook100 school (the issue's acceptance line) and on cora_ml.

CPU budget: the reference schedule (:func:`defenses.dpgnn.reference_schedule`: batch ≈ 11 % of
the training subgraphs, 3,000 steps) takes ≈ 20–30 min per run on one shared CPU core here,
so these runs set ``steps=300`` (same batch rule, a tenth of the steps; the noise is
calibrated to the same ε for the 300 steps). Everything else is the default.
"""

from __future__ import annotations

from reproduce import Claim, Run

JHU = "johnshopkins55:year"
SPLIT = "random:0.75,0.1,0.15"
STEPS = "steps=300"


def _dpgnn(dataset: str, protocol: str) -> Run:
    return Run("dpgnn", dataset, SPLIT, 12, sets=(f"protocol={protocol}", "layers=1", STEPS))


CLAIMS = [
    Claim(
        id="dpgnn-jhu-beats-mlp-dp",
        source="Daigavane et al. 2022, Table 1 / §6 (issue 13 acceptance on johnshopkins55:year)",
        statement="1-layer DP-GCN at ε = 12 beats DP-MLP at ε = 12",
        paper_value="DP-GCN > DP-MLP at ε ≤ 12 (ogbn-arxiv: ≈ 10 points)",
        runs={"paper": _dpgnn(JHU, "paper"), "sound": _dpgnn(JHU, "sound"), "mlp-dp": Run("mlp-dp", JHU, SPLIT, 12)},
        rule="mean(paper) > mean(mlp-dp)",
        holds=lambda m: m["paper"] > m["mlp-dp"],
        evidence=(
            "Theorem 1's sensitivity is 2C·ρ with ρ up to N(K = 5, r = 1) = 6 affected subgraphs per step, "
            "so at ε = 12 the calibrated noise multiplier is ≈ 9–12 (card: dpgnn.noise_multiplier) against ≈ 1 "
            "for DP-MLP, whose per-node sensitivity is C. On this 3,319-node training set (F = 2,385 one-hot "
            "features, 250k parameters) the noisy mean gradient is dominated by noise; the graph signal does "
            "not make up for it. Only steps was reduced (CPU budget); the reference's 3,000 steps would need "
            "more noise per step for the same ε."
        ),
    ),
    Claim(
        id="dpgnn-cora-ml-beats-mlp-dp",
        source="Daigavane et al. 2022, §6 (issue 13's table: 63.4 vs 64.0 on cora_ml at ε = 12)",
        statement="1-layer DP-GCN at ε = 12 beats DP-MLP at ε = 12 on cora_ml",
        paper_value="DP-GCN > DP-MLP at ε ≤ 12",
        runs={
            "paper": _dpgnn("cora_ml", "paper"),
            "sound": _dpgnn("cora_ml", "sound"),
            "mlp-dp": Run("mlp-dp", "cora_ml", SPLIT, 12),
        },
        rule="mean(paper) > mean(mlp-dp)",
        holds=lambda m: m["paper"] > m["mlp-dp"],
        seeds=(0,),  # one seed: CPU budget (issue: "if time allows")
        evidence=(
            "Same cause as on johnshopkins55: the occurrence bound N(K, r) = 6 multiplies DP-GCN's sensitivity, "
            "and cora_ml's 2,879 bag-of-words features give a 290k-parameter model whose noisy gradient is "
            "dominated by noise at ε = 12; DP-MLP pays sensitivity C only."
        ),
    ),
]
