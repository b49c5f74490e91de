"""How much graph signal a node-level answer can carry when ε covers it (issue 24's utility line).

DPAR sound beats mlp-dp on johnshopkins55:year only through Eq. 4 inference, which reads the
private graph in the clear. This script measures the ceiling of the natural covered replacement:
answer node v from f_θ(x_v) plus a **noisy one-hop aggregate of f_θ's predicted class
distributions** over v's neighbours, released by the Gaussian mechanism.

The aggregate (floor mean; p_z = softmax f_θ(x_z), a probability vector, ‖p_z‖₂ ≤ 1):

    r_v = Σ_{z ∈ N(v)} p_z / max(d_v, m)

Removing (or adding) a node u with all its edges changes

* u's own row r_u, from at most ‖r_u‖ ≤ d_u / max(d_u, m) ≤ 1 to the empty row 0;
* each neighbour w's row: if d_w ≤ m, by p_u / m (≤ 1/m); if d_w > m, by
  (d_w p_u − S_w) / (d_w (d_w − 1)) = Σ_{z ≠ u}(p_u − p_z) / (d_w (d_w − 1)), of norm
  ≤ √2 / d_w ≤ √2 / (m + 1) (two probability vectors are at most √2 apart);
* nothing else.

Under a degree promise d ≤ D the L2 sensitivity is therefore
Δ = √(1 + D·max(1/m, √2/(m + 1))²). The script checks it by removing the highest-degree nodes
and the largest rows ("measured / Δ"). The noise is set four ways:

* **proven Δ, own row counted.** dpaudit's threat model: a third party querying v learns no more
  about v's edges than ε allows (GCON's inference note says the same).
* **measured Δ.** The largest change measured on this graph. No valid bound can be smaller.
* **own row free.** u's own answer is not charged, Δ = √D·max(1/m, √2/(m + 1)): GCON's "edge-DP
  toward v itself".
* **measured Δ, own row free.** Both optimistic at once.

**Why the rows below are ceilings, not runs:**

* f_θ is DPAR sound's model trained with the **whole** ε = 8. The inference release gets its
  ε_inference **on top**, so every (ε_train, ε_inference) split of a total of 8 does worse.
* D is the graph's own maximum degree. That is a promise read from the data; the promise-free
  projection only adds noise.
* m ∈ {30, 72, 150} and the mixing weight λ ∈ {0.1, 0.3, 1, 3} (answer = argmax p_v + λ·r̃_v) are
  chosen **on the test nodes**, the best over the grid, averaged over 5 noise draws per seed.
* The row "σ = 0" releases the aggregate without noise. No private release of this statistic
  can do better.

A second statistic, the **neighbours' training labels**, is tried the same way: p_z replaced by
the one-hot training label e_{y_z} of each training neighbour (0 for any other neighbour), the
same floor mean and the same Δ (one-hot and zero rows are also at most √2 apart), answered as
argmax p_v + λ·r̃_v with λ up to 100 (the vote alone). Both are measurements of these two
statistics on one graph, not a theorem about every covered answer.

Run::

    DPAUDIT_DATA=/work/shared/datasets OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/bench_covered_inference.py

writes ``benchmarks/results/covered_inference.md`` (about 1 CPU min).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import os
import statistics
import sys
from pathlib import Path

import torch
from sklearn.linear_model import LogisticRegression

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _harness import add_smoke_argument, mean_std, results_dir, start_smoke, without_node  # noqa: E402

import defenses  # noqa: E402,F401  (registers the defenses)
from dpaudit.accounting.calibrate import calibrate_noise  # noqa: E402
from dpaudit.accounting.mechanisms import GaussianMechanism  # noqa: E402
from dpaudit.data.datasets import load_dataset  # noqa: E402
from dpaudit.data.splits import make_split  # noqa: E402
from dpaudit.errors import DPAuditError  # noqa: E402
from dpaudit.runtime import atomic_write_text  # noqa: E402
from dpaudit.training.registry import get_defense  # noqa: E402

log = logging.getLogger("bench_covered_inference")

DATASET, SPLIT, EPSILON = "johnshopkins55:year", "random:0.75,0.1,0.15", 8.0
FLOORS = [30, 72, 150]
MIXING = [0.1, 0.3, 1.0, 3.0]
#: the label vote's mixing weights: up to 100, where the answer is the noisy vote alone
VOTE_MIXING = [0.3, 1.0, 3.0, 100.0]
VOTE = "neighbours' training labels, proven Δ (own row counted)"
INFERENCE_EPSILONS = [8.0, 4.0, 2.0]
NOISE_DRAWS = 5
HUBS = 20
CONVENTIONS = (
    "proven Δ (own row counted)",
    "measured Δ (own row counted)",
    "proven Δ, own row free",
    "measured Δ, own row free",
)


def neighbour_bound(floor: int) -> float:
    """Largest change of one neighbour's floor-mean row when a node leaves (module docstring)."""
    return max(1.0 / floor, math.sqrt(2.0) / (floor + 1))


def sensitivity(max_degree: int, floor: int, own_row: bool) -> float:
    """Δ of the floor-mean aggregate under the degree promise d ≤ ``max_degree``."""
    return math.sqrt((1.0 if own_row else 0.0) + max_degree * neighbour_bound(floor) ** 2)


def floor_mean(probabilities: torch.Tensor, edge_index: torch.Tensor, floor: int) -> torch.Tensor:
    """r_v = Σ_{z ∈ N(v)} p_z / max(d_v, m). Shapes: [n, C], [2, E] (both directions) → [n, C]."""
    n = probabilities.size(0)
    row, col = edge_index
    degree = torch.bincount(row, minlength=n).to(probabilities.dtype)
    summed = torch.zeros_like(probabilities).index_add_(0, row, probabilities[col])
    return summed / degree.clamp(min=floor).unsqueeze(1)


def measured_changes(probabilities, edge_index, floor: int, nodes: list[int]) -> tuple[float, float]:
    """Largest change of the whole aggregate, and of the rows other than the removed node's own,
    over removals of ``nodes`` one at a time (L2 over all rows)."""
    before = floor_mean(probabilities, edge_index, floor)
    whole = others = 0.0
    for node in nodes:
        change = before - floor_mean(probabilities, without_node(edge_index, node), floor)
        whole = max(whole, float(change.norm()))
        change[node] = 0.0
        others = max(others, float(change.norm()))
    return whole, others


def gaussian_multiplier(epsilon: float, delta: float) -> float:
    """σ/Δ of one Gaussian release at (ε, δ), calibrated and checked by the project's ledger."""
    return calibrate_noise(epsilon, delta, lambda sigma: GaussianMechanism(sigma))


def features_only_ceiling(dataset, split) -> float:
    """Test accuracy of a **non-private** logistic regression on the node features alone, its
    inverse regularisation C chosen on the validation nodes: what any answer reading only the
    queried node's own features (mlp-dp, DPAR with P = 0) can hope for."""
    x = dataset.data.x
    x = (x.to_dense() if x.is_sparse else x).to(torch.float32).numpy()
    y = dataset.data.y.numpy()
    train, val, test = split.train.numpy(), split.val.numpy(), split.test.numpy()
    best = (-1.0, 0.0)
    for c in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0):
        fitted = LogisticRegression(C=c, max_iter=2000).fit(x[train], y[train])
        best = max(best, (fitted.score(x[val], y[val]), fitted.score(x[test], y[test])))
    return float(best[1])


def accuracy(scores: torch.Tensor, labels: torch.Tensor) -> float:
    return float((scores.argmax(1) == labels).float().mean())


def seed_results(dataset, seed: int, epochs: int | None = None) -> dict:
    """One seed: the fitted models' accuracies, the measured changes, and per (convention,
    ε_inference) the best floor-mean answer over the grid (mean over noise draws); ``epochs``
    overrides both models' default epochs."""
    split = make_split(dataset, SPLIT, seed)
    graph = split.graph_for(dataset, "test")
    labels, test = graph.y, split.test
    overrides = {} if epochs is None else {"epochs": epochs}
    mlp = get_defense("mlp-dp")(epsilon=EPSILON, seed=seed, **overrides).fit(dataset, split)
    dpar = get_defense("dpar-em1")(epsilon=EPSILON, seed=seed, **overrides).fit(dataset, split)
    delta = dpar.privacy.delta
    with torch.no_grad():
        probabilities = torch.softmax(dpar.module(graph.x.to(torch.float32)), dim=1)
    edge_index = graph.edge_index
    degree = torch.bincount(edge_index[0], minlength=graph.num_nodes)
    max_degree = int(degree.max())
    rows = {floor: floor_mean(probabilities, edge_index, floor) for floor in FLOORS}
    measured = {}
    for floor in FLOORS:
        # the highest-degree nodes and the nodes with the largest own rows
        candidates = set(degree.argsort(descending=True)[:HUBS].tolist())
        candidates |= set(rows[floor].norm(dim=1).argsort(descending=True)[:HUBS].tolist())
        measured[floor] = measured_changes(probabilities, edge_index, floor, sorted(candidates))
    out = {
        "delta": delta,
        "max_degree": max_degree,
        "mlp-dp": mlp.accuracy(graph, test),
        "f_theta alone": accuracy(probabilities[test], labels[test]),
        "features ceiling": features_only_ceiling(dataset, split),
        "eq4 (uncovered)": dpar.accuracy(graph, test),
        "measured": measured,
        "best": {},
        "vote": {},
    }
    noise_scale = {
        CONVENTIONS[0]: lambda floor: sensitivity(max_degree, floor, own_row=True),
        CONVENTIONS[1]: lambda floor: measured[floor][0],
        CONVENTIONS[2]: lambda floor: sensitivity(max_degree, floor, own_row=False),
        CONVENTIONS[3]: lambda floor: measured[floor][1],
    }
    generator = torch.Generator().manual_seed(seed)
    settings = [("σ = 0", None)] + [(name, eps) for name in CONVENTIONS for eps in INFERENCE_EPSILONS]
    for name, eps in settings:
        best = (-1.0, None)
        for floor, mixing in itertools.product(FLOORS, MIXING):
            if eps is None:
                scores = [accuracy((probabilities + mixing * rows[floor])[test], labels[test])]
            else:
                std = gaussian_multiplier(eps, delta) * noise_scale[name](floor)
                scores = []
                for _ in range(NOISE_DRAWS):
                    noise = torch.randn(rows[floor][test].shape, generator=generator) * std
                    scores.append(accuracy(probabilities[test] + mixing * (rows[floor][test] + noise), labels[test]))
            score = statistics.fmean(scores)
            if score > best[0]:
                best = (score, (floor, mixing))
        out["best"][(name, eps)] = best
    # the second statistic: a floor-mean vote of the neighbours' training labels
    votes = torch.zeros_like(probabilities)
    votes[split.train, labels[split.train]] = 1.0
    vote_rows = {floor: floor_mean(votes, edge_index, floor) for floor in FLOORS}
    for eps in [None, *INFERENCE_EPSILONS]:
        best = (-1.0, None)
        for floor, mixing in itertools.product(FLOORS, VOTE_MIXING):
            if eps is None:
                scores = [accuracy((probabilities + mixing * vote_rows[floor])[test], labels[test])]
            else:
                std = gaussian_multiplier(eps, delta) * sensitivity(max_degree, floor, own_row=True)
                scores = []
                for _ in range(NOISE_DRAWS):
                    noise = torch.randn(vote_rows[floor][test].shape, generator=generator) * std
                    scores.append(
                        accuracy(probabilities[test] + mixing * (vote_rows[floor][test] + noise), labels[test])
                    )
            score = statistics.fmean(scores)
            if score > best[0]:
                best = (score, (floor, mixing))
        out["vote"][eps] = best
    return out


def report(per_seed: list[dict], seeds: list[int]) -> str:
    delta, max_degree = per_seed[0]["delta"], per_seed[0]["max_degree"]
    baseline = statistics.fmean(r["mlp-dp"] for r in per_seed)
    alone = statistics.fmean(r["f_theta alone"] for r in per_seed)
    ceiling_features = statistics.fmean(r["features ceiling"] for r in per_seed)
    covered_text = {
        CONVENTIONS[0]: "yes, under the promise",
        CONVENTIONS[1]: "no proof: Δ below any valid bound",
        CONVENTIONS[2]: "only toward v itself (GCON's threat model), under the promise",
        CONVENTIONS[3]: "no proof, and u's own row uncharged",
    }
    lines = [
        "| answer | covered by ε | ε of the inference release (on top of training's 8) | σ/Δ | test accuracy | vs mlp-dp |"
        " best (m, λ) per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {
        "f_theta alone": "f_θ(x_v) alone (DPAR sound's model, P = 0)",
        "features ceiling": "non-private logistic regression on x_v (C chosen on validation)",
        "eq4 (uncovered)": "DPAR Eq. 4",
    }
    for name, covered in (
        ("mlp-dp", "yes"),
        ("f_theta alone", "yes"),
        ("features ceiling", "not private"),
        ("eq4 (uncovered)", "**no**"),
    ):
        values = [r[name] for r in per_seed]
        label = labels.get(name, name)
        lines.append(
            f"| {label} | {covered} | - | - | {mean_std(values)} | {statistics.fmean(values) - baseline:+.3f} | - |"
        )
    best_noisy = {}
    for key in per_seed[0]["best"]:
        name, eps = key
        values = [r["best"][key][0] for r in per_seed]
        chosen = ", ".join(f"({m}, {lam:g})" for m, lam in (r["best"][key][1] for r in per_seed))
        covered = "no noise: the statistic's ceiling" if eps is None else covered_text[name]
        multiplier = "-" if eps is None else f"{gaussian_multiplier(eps, delta):.3f}"
        if eps is not None:
            best_noisy[name] = max(best_noisy.get(name, 0.0), statistics.fmean(values))
        lines.append(
            f"| f_θ(x_v) + λ·floor mean, {name} | {covered} | {'-' if eps is None else f'{eps:g}'} | {multiplier} | "
            f"{mean_std(values)} | {statistics.fmean(values) - baseline:+.3f} | {chosen} |"
        )
    for eps in per_seed[0]["vote"]:
        values = [r["vote"][eps][0] for r in per_seed]
        chosen = ", ".join(f"({m}, {lam:g})" for m, lam in (r["vote"][eps][1] for r in per_seed))
        covered = "no noise: the statistic's ceiling" if eps is None else "yes, under the promise"
        multiplier = "-" if eps is None else f"{gaussian_multiplier(eps, delta):.3f}"
        if eps is not None:
            best_noisy[VOTE] = max(best_noisy.get(VOTE, 0.0), statistics.fmean(values))
        name = "σ = 0" if eps is None else "proven Δ (own row counted)"
        lines.append(
            f"| f_θ(x_v) + λ·floor-mean vote of neighbours' training labels, {name} | {covered} | "
            f"{'-' if eps is None else f'{eps:g}'} | {multiplier} | {mean_std(values)} | "
            f"{statistics.fmean(values) - baseline:+.3f} | {chosen} |"
        )
    vote_free = statistics.fmean(r["vote"][None][0] for r in per_seed)
    measured_lines = [
        "| m | proven Δ | largest whole change | / Δ | largest change of the other rows |",
        "|---|---|---|---|---|",
    ]
    for floor in FLOORS:
        proven = sensitivity(max_degree, floor, own_row=True)
        whole = max(r["measured"][floor][0] for r in per_seed)
        others = max(r["measured"][floor][1] for r in per_seed)
        measured_lines.append(f"| {floor} | {proven:.3f} | {whole:.3f} | {whole / proven:.2f} | {others:.3f} |")
    target = baseline + 0.03
    reaching = [name for name in CONVENTIONS if best_noisy[name] >= target]
    if not reaching:
        reaching_text = (
            f"None reaches the acceptance line ({target:.3f}), not even the last, which is optimistic in every way "
            "(it also spends up to a second ε = 8)."
        )
    else:
        reaching_text = (
            f"Only {' and '.join(f'“{name}”' for name in reaching)} {'reaches' if len(reaching) == 1 else 'reach'} the acceptance line ({target:.3f}): "
            "optimistic in every way (up to a second ε = 8 on top; D, m and λ read from the data), and not a proven "
            "guarantee under dpaudit's threat model."
        )
    return f"""# Covered node-level inference: the ceiling of a noisy one-hop aggregate (issue 24)

Written by `benchmarks/bench_covered_inference.py`; the mechanism and its sensitivity proof are the
script's docstring. {DATASET}, split `{SPLIT}`, seeds {", ".join(map(str, seeds))}, δ = {delta:g},
promise D = {max_degree} (the graph's own maximum degree), one torch thread, {NOISE_DRAWS} noise draws per seed.

This is the **owner's training graph** deployment (a transductive split: the answers read the
private graph itself). Over a graph the querier supplies (an inductive split, DPAR's own setting)
every private defense's answers are post-processing of its weights and covered by ε: DPAR's Eq. 4
then beats mlp-dp by far (`honest.md`, johnshopkins55:year `inductive:0.8,0.2`).

Every floor-mean row is **optimistic**: f_θ is trained with the whole ε = 8 and the inference
release comes on top; D is read from the data; m ∈ {FLOORS} and λ ∈ {MIXING} are chosen on the
test nodes. "measured Δ" rows put in the largest change measured on this graph (below), which no
valid bound can undercut; "own row free" also leaves the removed node's own row uncharged, as if a
querier of u supplied u's edges. The acceptance line needs mlp-dp + 0.03 = {target:.3f}.

{chr(10).join(lines)}

σ/Δ: the noise multiplier of one Gaussian release at that ε, calibrated by the project's ledger.

Measured against proven (per m: the {HUBS} highest-degree nodes and the {HUBS} largest own rows
removed one at a time, on each seed's f_θ; largest L2 change of the whole aggregate and of the rows
other than the removed node's):

{chr(10).join(measured_lines)}

## What it says

- Answers from the queried node's own features hardly reach the line. A **non-private** logistic
  regression on x_v scores {ceiling_features:.3f} ({ceiling_features - baseline:+.3f} against mlp-dp). A private
  feature-only answer would have to lose nothing to privacy, so the margin has to come from the graph.
- Without noise, the one-hop floor mean lifts f_θ(x_v) from {alone:.3f} to
  {statistics.fmean(r["best"][("σ = 0", None)][0] for r in per_seed):.3f}: the graph signal is there.
- Released with the noise that ε needs, the best answers score:

  | Δ used for the noise | best accuracy |
  |---|---|
  | proven Δ, dpaudit's threat model (a third party querying v learns no more of v's edges than ε allows) | {best_noisy[CONVENTIONS[0]]:.3f} |
  | the smallest Δ any proof could give (measured on this graph) | {best_noisy[CONVENTIONS[1]]:.3f} |
  | proven Δ, removed node's own answer uncharged (GCON's "toward v itself") | {best_noisy[CONVENTIONS[2]]:.3f} |
  | measured Δ, own answer uncharged | {best_noisy[CONVENTIONS[3]]:.3f} |
  | neighbours' training labels (floor-mean vote), proven Δ | {best_noisy[VOTE]:.3f} |

  {reaching_text}
- The neighbours' training labels carry more signal in the clear (the vote lifts the answer to
  {vote_free:.3f} without noise) and no more once released: {best_noisy[VOTE]:.3f} at the proven Δ.
- **What this is:** a measurement of two statistics (f_θ's predicted distributions and the
  neighbours' training labels, each a per-row noisy floor mean, m ∈ {FLOORS}) on this graph, not a
  theorem: another statistic or mechanism could do better. What the measurements share is the
  reason below.
- **Why these stop:** removing v empties v's own row. The node-level sensitivity is therefore at least the
  norm of any row, which is all the graph signal a row can carry.
  - Per-node signal-to-noise is at most Δ/σ = 1/(σ/Δ).
  - A single release at ε = 8 already needs σ/Δ ≈ {gaussian_multiplier(8.0, delta):.2f}.
  - Uncharging the own answer leaves the neighbours' term, √D·√2/(m + 1) under a promise D.
    No bound valid for every graph under the promise can be smaller: a hub u whose D readers all
    have degree m + 1, and predict e₂ while u predicts e₁, moves each reader by exactly √2/(m + 1).
  - GAP's sum aggregation meets the same wall (`degree_projection.md` table 4).
"""


def _use_smoke_grid() -> None:
    """--smoke: generated csbm, one floor, one mixing weight, ε_inference = 8 only, one noise draw."""
    global DATASET, FLOORS, MIXING, VOTE_MIXING, INFERENCE_EPSILONS, NOISE_DRAWS, HUBS
    DATASET, FLOORS, MIXING, VOTE_MIXING = "csbm", [30], [1.0], [1.0]
    INFERENCE_EPSILONS, NOISE_DRAWS, HUBS = [8.0], 1, 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/covered_inference.md")
    add_smoke_argument(parser, "generated csbm (1000 nodes), seed 0, 1 epoch, m = 30, λ = 1, ε_inference = 8, 1 draw")
    args = parser.parse_args(argv)
    epochs = None
    if args.smoke:
        start_smoke()
        _use_smoke_grid()
        args.seeds, epochs = [0], 1
    args.out = args.out or results_dir() / "covered_inference.md"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    try:
        dataset = load_dataset(DATASET, root=os.environ.get("DPAUDIT_DATA"))
    except DPAuditError as exc:
        print(f"bench_covered_inference: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    per_seed = []
    for seed in args.seeds:
        log.info("seed %d: fitting mlp-dp and dpar-em1 at ε = %g", seed, EPSILON)
        per_seed.append(seed_results(dataset, seed, epochs))
    atomic_write_text(args.out, report(per_seed, args.seeds))
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
