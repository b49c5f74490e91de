r"""GAP: GNN with Aggregation Perturbation (Sajadmanesh et al., USENIX Security 2023).

Three registry names share one pipeline (Algorithm 2):

* ``gap-inf`` — non-private (no noise anywhere; the paper's GAP-∞),
* ``gap-edp`` — edge-level DP (Section 5.1),
* ``gap-ndp`` — node-level DP (Section 5.2); under ``protocol=sound`` over a proven degree
  projection (default) or, with ``degree_bound=promise``, bounded-degree node-level DP.

Pipeline (Algorithm 2) and architecture (as in the authors' reference code)
---------------------------------------------------------------------------
1. **Encoder module** (Section 4.2, Eq. 3–5), trained on the training nodes' features and
   labels only (never the edges). :math:`\mathrm{MLP_{enc}}` is Linear → [BatchNorm] → SELU →
   Linear (``encoder_layers`` = 2, width ``hidden`` = 16); pre-training appends
   L2-normalise → [BatchNorm] → SELU → linear head (softmax over classes). The released
   encoding is :math:`\check X^{(0)}_v = \mathrm{MLP_{enc}}(X)_v/\|\mathrm{MLP_{enc}}(X)_v\|_2` (Eq. 6).
2. **Aggregation module**, PMA (Algorithm 1, Eq. 7–9): for k = 1..K,
   :math:`X^{(k)} = A^\top \check X^{(k-1)}` (SUM aggregation), :math:`\tilde X^{(k)} = X^{(k)} +
   \mathcal N(0, \sigma^2 I)` row by row, :math:`\check X^{(k)}_v = \tilde X^{(k)}_v/\|\tilde X^{(k)}_v\|_2`.
   PMA runs **once** on the training graph; its output is the owner's cached training release.
3. **Classification module** (Section 4.4, Eq. 10–12): one Linear per hop 0..K (``base_layers``
   = 1), COMBINE = concatenation (the embedding :math:`H` returned by ``embed``), then
   L2-normalise → [BatchNorm] → SELU → head (``head_layers`` = 1 Linear).

BatchNorm mixes the examples of a batch, which per-example DP-SGD cannot clip; the reference
code turns it off for node-level GAP (its ``NodePrivGAP`` forces ``batch_norm=False``), and so
does dpaudit in both protocols: ``gap-ndp`` uses L2-normalise → SELU (a per-example operation)
where the others use L2-normalise → BatchNorm → SELU. Setting ``batch_norm=True`` on
``gap-ndp`` is an error.

Shapes: features ``x`` [N, F]; encodings and each hop [N, hidden]; training aggregations
[N, K·hidden]; classifier input [N, (K+1)·hidden]; embedding [N, (K+1)·hidden]; logits [N, C].

Protocols (``protocol`` hyperparameter, :class:`dpaudit.training.defense.PrivateHyperparameters`)
-----------------------------------------------------------------------------------------
``paper`` uses the per-direction edge sensitivity 1, the random out-degree sampling with the
paper's √D, best-validation checkpoints and selects K (and D) on validation accuracy over
``hop_grid`` (× ``degree_grid``), one release per configuration; ``sound`` uses √2 and, at edge
level and ∞, best-validation checkpoints and K chosen among the prefixes 1..``hops`` of ONE
release of ``hops`` hops (post-processing, accounted for ``hops``); at node level the degree
promise with √(D(D+1)), the last iterate and the fixed ``hops`` / ``max_degree``. The
side-by-side table and the only code that branches on the protocol are in
:mod:`defenses.gap.protocols`. Package layout:
:mod:`~defenses.gap.mechanism` (pure math), :mod:`~defenses.gap.model` (modules, released
model), :mod:`~defenses.gap.training` (loops), this module (hyperparameters, the defenses).

Everything else (architecture, schedule, the inference rules below) is shared. ``paper`` runs
are ``sound: false`` with every unaccounted step in ``spec.unaccounted``.

Privacy
-------
*Edge level* (``gap-edp``). Only PMA reads the edges; encoder and classifier read features and
labels, which edge-level DP does not protect, and post-process PMA's output. Lemma 1 gives
sensitivity 1 for one **directed** entry :math:`A_{v,u}`. dpaudit's protected unit is one
undirected edge (``Defense.population`` counts undirected edges); removing it changes both
:math:`A_{u,v}` and :math:`A_{v,u}` — two rows by a unit vector each — so the per-hop L2
sensitivity is :math:`\Delta=\sqrt2` (measured in the tests; the paper's 1 is the
per-direction value and is only used under ``protocol=paper``). PMA is then
:math:`(\alpha, K\alpha\Delta^2/2s^2)`-RDP for noise std s (Theorem 1 with Δ), recorded as
``GaussianMechanism(s, Δ, K)`` and converted with the improved RDP→(ε,δ) conversion
(Balle et al. 2020), never worse than Proposition 2.

*Edge level, selection* (``sound``). PMA runs once with K_max = ``hops`` hops and is
accounted for K_max. Algorithm 1 computes hop k from hop k − 1 only and draws each hop's noise
in order, so hops 1..k of that run are a k-hop PMA release at the same noise (the same tensors
with the same random stream; tested), and the classifier for every k ≤ K_max reads a prefix of
the one release. Choosing k, and the encoder's and classifier's
best-validation epochs, reads that release and node features and labels — which edge-level DP
does not protect — so it is post-processing (Dwork & Roth 2014, Proposition 2.1) and costs no ε.
The released model then answers query graphs with k hops (each query is a k-hop release).
A grid over separately released mechanisms (another K_max or noise scale) would compose; none is
run. K_max stays ``hops`` rather than the paper's 5: every hop of the release costs
budget, and at K_max = 5 the per-hop noise is √(5/2) times larger (johnshopkins55:year, ε = 4,
3 seeds: 0.703 with K_max = 5 against 0.712 with K_max = 2).

*Edge level, sound architecture* (issue 50; :meth:`_GAP._fit_skip`). Features, labels of every
split and the declared node count are public at edge level, so everything but PMA is built from
them for free: a feature-only encoder over raw features or their smoothing over the public kNN
feature graph (:mod:`dpaudit.data.feature_graph`; input and the public grid
:data:`protocols.SKIP_ENCODER_GRID` chosen by its own validation accuracy), ONE PMA release of
K_max = ``hops`` (default 1 for gap-edp) hops of its one-hot predicted classes (unit rows; the only
mechanism in the ledger, Theorem 1 with Δ = √2), and :class:`~defenses.gap.model.GAPSkipClassifier` — a linear head over the encoder's
log-probabilities (the hop-0 skip) and the release's noisy sums, fitted on the validation labels,
K ∈ 0..K_max chosen by cross-validation with K = 0 the encoder alone. All post-processing of the
release and public data (Dwork & Roth 2014, Prop. 2.1). The derivation (Planetoid Cora, Texas,
Wisconsin; held out: johnshopkins55, cora_ml, actor) is in docs/defenses/gap.md.

*Node level, sound, the default* (``gap-ndp``, ``degree_bound=projection``). PMA aggregates over
the maximum-entropy projection of the graph to weighted degree ≤ D
(:mod:`defenses.gap.projection`: every edge kept, a hub's edges scaled down together, the
identity on graphs of maximum degree ≤ D), solved to a certified duality gap. Its per-hop
sensitivity under adding or removing any node, cascades included, is
:math:`\Delta = \sqrt{D^2 + (\sqrt D + \sqrt{2DH_{\max}})^2}` plus the solver's certified error,
with :math:`H_{\max} = D\ln((\bar N - 1)/D)` for graphs of at most N̄ nodes (the proof is in
that module): N̄ is the **declared** number of nodes, a graph or query graph with more is refused
before any work, and a dataset that declares none is refused (use the promise). This is plain
node-level DP for every graph of at most N̄ nodes — no condition on degrees, no refusal on a
degree — and the spec carries no ``unit_condition``. The price is noise: at D = 100, Δ ≈ 290
on cora_ml and 309 on johnshopkins55 (N̄ = 2,995 and 5,180), where the promise needs
√(D(D+1)) ≈ D but refuses both graphs; measured, the change stays near D (the removed node's
own row), so the bound is about 3× loose. Encoder, PMA and classifier compose as below.

*Node level, sound, the promise* (``degree_bound=promise``). Theorem 2 / Lemma 3 of the paper bound
the change of the *other* nodes' aggregated rows by √D after a random out-degree sampling, but
(i) the sampling itself depends on the graph — removing a node changes which of its
neighbours' edges survive, which no lemma covers (measured on reed98: ‖Δ‖ = 11.5 > √D = 10),
and (ii) the released aggregation also contains the removed node's own row. dpaudit's sound
variant replaces the sampling by a **promise checked on the data**: the training graph must
satisfy :math:`\max_v \max(\deg^{in}_v, \deg^{out}_v) \le D` (counting duplicate edges and
self-loops); otherwise the fit is refused with a one-line error — there is no trimming, so no
graph-dependent preprocessing exists to analyse.

*Claim.* For node-neighbouring graphs G, G' = G with node v removed (v's edges, features and
label gone; v's released rows compared with v isolated), both of degree ≤ D, and a fixed
row-normalised input :math:`\check X` (every row norm ≤ 1), the per-hop aggregation
:math:`A^\top\check X` changes by at most :math:`\Delta = \sqrt{D(D+1)}` in Frobenius norm.

*Proof.* Row u ≠ v of :math:`A^\top\check X` is :math:`\sum_{w:(w\to u)} \check X_w`; it changes
only if (v → u) ∈ E, i.e. for at most :math:`\deg^{out}_v \le D` rows, each by
:math:`\check X_v` (norm ≤ 1 per copy of the edge, and duplicate copies count in the degree):
total squared change ≤ D. Row v changes from :math:`\sum_{w:(w\to v)}\check X_w` (norm ≤
:math:`\deg^{in}_v \le D`) to 0: squared change ≤ D². Summing, :math:`\|\Delta\|_F^2 \le D + D^2`.
No other row and no other edge changes, because nothing is trimmed. ∎ The encoder (DP-SGD,
released first), each PMA hop (its input :math:`\check X^{(k-1)}` is the previous release,
post-processed) and the classifier's DP-SGD (conditioned on the released aggregations only v's
own example differs) compose adaptively (Proposition 3) under one noise multiplier σ
calibrated with :func:`~dpaudit.accounting.calibrate_noise`; PMA adds noise std σ·Δ. The
guarantee is **bounded-degree node-level DP**: the neighbouring relation is restricted to
graphs of maximum degree ≤ D (Kasiviswanathan et al. 2013 / Blocki et al. 2013). It is not
unrestricted node-level DP: adding one node to a graph of degree D can make a neighbour exceed
D, and then training is refused while it ran on the other graph — an observable difference no
ε bounds. The spec says so: ``unit_condition = "max degree <= D"`` (printed
``node (max degree <= D)``; :attr:`~dpaudit.accounting.PrivacySpec.proven` is false, so
reports draw no unrestricted ceiling from it) and the load check requires that condition of
every sound node-level GAP spec. The cost is honest noise: Δ grows like D, so D must cover the
largest degree.

*Why not a local degree projection.* A projection to degree ≤ D makes the unit plain node-level
DP only if the projected aggregation moves boundedly when any node is added or removed, cascades
included. The edge-addition θ-projection of Day, Li & Lyu (SIGMOD 2016: edges in a fixed
public order, each kept iff both endpoint degrees are still < θ) does not: its stability
lemma bounds the projected *degree sequence* (a node in the middle of a cascade loses one
kept edge and gains another, so its degree is unchanged), not the *edge set*, and GAP
aggregates over the edges. Counter-example, D = 1: a path a₀ … a_L whose edges come in path
order, plus v joined to a₀ by the first edge. Without v the kept edges are (a₀a₁), (a₂a₃), …;
with v they are (va₀), (a₁a₂), (a₃a₄), …: all L path edges flip, and with unit rows that
differ between neighbours the per-hop change grows like √(2L) (4.7, 14.2, 44.7 for L = 10,
100, 1000), unbounded in the graph size where a sound Δ must be a constant. On real graphs
the cascades are short but present (johnshopkins55, D = 100: removing a node of degree 886
flips 63 kept edges not incident to it; ``benchmarks/gap_projection_check.py``). Every
local alternative examined — keeping an edge iff it is among the D first of both endpoints,
degree-scaled edge weights, thresholds on raw degree — lets a node of degree m move one
neighbour-side quantity at each of its m neighbours, and no constant bounds the sum. The
maximum-entropy projection above is global — a hub's edges get weight ≈ D/m, so its removal
barely moves its neighbours — and its bound comes from strong convexity, not from a local rule.

Both DP-SGD runs sample with a rate fixed before training (:class:`~dpaudit.training.dpsgd.PoissonSchedule`):
the ``sample_rate`` hyperparameter, or 1/⌈n̂/B⌉ with ⌈n̂/B⌉ steps per epoch from the declared
training-set size n̂ (a public benchmark's split size). The real number n of training nodes
is private at node level; each node is included in a batch independently with probability q
whatever n is, so ``PoissonSubsampledGaussian(σ, q, steps)`` is exactly what is spent on
every neighbouring graph, and the noisy sum is divided by the public n̂·q (or B), never by a
count of the batch. Without a rate or a declared size the fit is refused before any work.
(The paper, through opacus, uses q = B/n, which reads n; both protocols here use the plan.)

*Node level, paper* (``protocol=paper``): out-degree sampling to D (random keys, keep the D
smallest per source), per-hop sensitivity √D as the authors account it (the "D^K" of Theorem
2's statement is D·K, as its proof shows), encoder/classifier DP-Adam (``train_dp_sgd``:
Poisson sampling, ghost clipping to 1), best-validation checkpoints and (K, D) chosen on validation accuracy.

Inference (Section 4.5/5.1) — no query may average PMA's noise away, no query is an oracle
-------------------------------------------------------------------------------------------
Every graph passed to :meth:`GAPModel.predict_proba` / :meth:`GAPModel.embed` gets a **new
PMA release** on that graph with the training noise std, counted in the model's **query
ledger** (:attr:`GAPModel.query_ledger`). A release over the training graph, or a graph sharing
its nodes or edges, is about the training data and is charged to it: the training data's total is
:attr:`GAPModel.charged_privacy`, the training ε composed with those releases
(:meth:`GAPModel.charges_training`; the model's ε, :attr:`GAPModel.privacy`, is the training spec
and does not change with queries). The training graph is no exception. An earlier design answered a query whose canonical key matched the training graph's
from the cached training aggregations, for free; with the key in ``model.json`` that was an
exact "is this your training graph?" oracle — ε = ∞ at either level, since G and G minus one
edge were answered differently (free and identical vs. charged and fresh). A later design
memoised every release on the model object: in a shared deployment, once the owner had answered
its test nodes, a third party's exact copy of the graph was answered from the memo (free, with
the owner's published rows) while G minus one edge was charged — the same oracle, through
another caller's queries. The model object now memoises nothing: a copy of the training graph
and the graph minus one edge are charged alike and answered with fresh noise, whoever asked
before. A repeated identical query is free only inside a caller's own
:meth:`GAPModel.query_session` (its own memo and query ledger; in memory only, never saved).
Hop 0 is always recomputed from the queried features (graph-agnostic). At node level under
``sound`` a query graph must satisfy the degree promise too. A saved model records its query
ledger's count (``query_releases``); files that composed query releases into the spec load with
the training spec and the count in the query ledger.

What is public and what is the owner's (:mod:`dpaudit.release`). ``model.json`` holds the
architecture, the ledger planned from public inputs (σ, Δ, K, D and, at node level, the DP-SGD
schedules from the ``sample_rate`` hyperparameter or the **declared** training-set size), the
query mechanism and the count of query releases; the ``gap`` card section repeats that plan.
Nothing in it is measured on the training graph: no key, no node count, no validation
accuracy. A third party holding only the public files can query any graph, each query charged.
PMA's output on the training graph — part of the accounted release, paid for by the training ε
— is the owner's record: the aggregations in ``provenance.safetensors``, the training graph's
key and node count, the validation accuracy and (paper) the number of edges kept in
``provenance.json``. The owner reads it only by naming it, :meth:`GAPModel.training_release`,
which answers on the training graph alone and spends nothing; an owner's audit uses it for
every attack that queries the training graph (:func:`attacks._common.answering`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from torch_geometric.data import Data

from defenses.gap import protocols
from defenses.gap.mechanism import (  # noqa: F401  (re-exported)
    EDGE_SENSITIVITY,
    LEVELS,
    MAX_HOPS,
    PAPER_EDGE_SENSITIVITY,
    bound_out_degree,
    canonical_edges,
    check_degree_promise,
    graph_key,
    max_degree_of,
    node_sensitivity,
    private_multi_hop_aggregation,
    row_normalize,
    sum_aggregate,
)
from defenses.gap.model import (  # noqa: F401  (re-exported)
    GAPClassifier,
    GAPEncoder,
    GAPModel,
    GAPSkipClassifier,
    QueryLedger,
    TrainingGraph,
    TrainingRelease,
    _build_classifier,
    _build_encoder,
    _mechanism_record,
    released_rows,
    unit_condition,
)
from defenses.gap.projection import DegreeProjection, projection_of
from defenses.gap.queries import structure_key
from defenses.gap.training import _accuracy, _train_full_batch, _train_minibatch
from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger, PrivacySpec
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.feature_graph import FeatureSmoothing, smoothing_fits
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.nn import features as sparse_features
from dpaudit.release import declared_population, declared_train_size, require_declared
from dpaudit.release.deployments import CHARGED_RELEASE, inference_entry
from dpaudit.training.constraints import COUNT, DROPOUT, POSITIVE, SAMPLE_RATE, WIDTH, Interval, Items, Options
from dpaudit.training.defense import Defense, PrivateHyperparameters
from dpaudit.training.dpsgd import PoissonSchedule, noise_for_plan, plan_mismatch
from dpaudit.training.private_selection import Score
from dpaudit.training.registry import register_defense

__all__ = [
    "protocols",
    "EDGE_SENSITIVITY",
    "LEVELS",
    "MAX_HOPS",
    "PAPER_EDGE_SENSITIVITY",
    "bound_out_degree",
    "canonical_edges",
    "check_degree_promise",
    "graph_key",
    "max_degree_of",
    "node_sensitivity",
    "private_multi_hop_aggregation",
    "row_normalize",
    "sum_aggregate",
    "GAPClassifier",
    "GAPEncoder",
    "GAPModel",
    "QueryLedger",
    "TrainingGraph",
    "TrainingRelease",
    "_build_classifier",
    "_build_encoder",
    "_mechanism_record",
    "unit_condition",
    "DegreeProjection",
    "projection_of",
    "_accuracy",
    "_train_full_batch",
    "_train_minibatch",
    "GaussianMechanism",
    "PoissonSubsampledGaussian",
    "PrivacyLedger",
    "PrivacySpec",
    "GraphDataset",
    "Defense",
    "PrivateHyperparameters",
    "inference_entry",
    "PoissonSchedule",
    "noise_for_plan",
    "plan_mismatch",
    "ConfigurationError",
    "DPAuditError",
    "sparse_features",
    "Score",
    "register_defense",
    "declared_population",
    "declared_train_size",
    "require_declared",
    "Split",
    "GAPHyperparameters",
    "GAPEdgeHyperparameters",
    "GAPNodeHyperparameters",
    "_Candidate",
    "_SIGMA_MEMO",
    "_GAP",
    "GAPInf",
    "GAPEdge",
    "GAPNode",
]

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- defenses


@dataclass
class GAPHyperparameters(PrivateHyperparameters):
    """Section 7.3 / reference defaults for GAP-∞ / GAP-EDP (full-batch Adam, 100 epochs per
    module). Under ``sound`` at edge level and ∞, PMA releases ``hops`` hops once and K is chosen
    among its prefixes 1..``hops``; at node level (or on a split without validation nodes)
    ``hops`` is the fixed K. ``hop_grid`` is searched only under ``protocol=paper``, one
    release per K.

    Attributes:
        protocol: ``sound`` (every step proven) or ``paper`` (the authors' search, ``sound: false``).
        hops: K, the aggregation hops released (at most ``MAX_HOPS``).
        hidden: width of every module's hidden layers.
        encoder_layers: layers of the encoder MLP.
        base_layers: layers of each hop's base MLP in the classifier.
        head_layers: layers of the classifier's head MLP.
        dropout: dropout rate.
        batch_norm: BatchNorm in the MLPs.
        lr: Adam's learning rate.
        encoder_epochs: epochs training the encoder.
        epochs: epochs training the classifier.
        hop_grid: the K values searched under ``protocol=paper``.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "hops": [Interval(int, 1, MAX_HOPS, closed="both")],
        "hidden": [WIDTH],
        "encoder_layers": [COUNT],
        "base_layers": [COUNT],
        "head_layers": [COUNT],
        "dropout": [DROPOUT],
        "batch_norm": [bool],
        "lr": [POSITIVE],
        "encoder_epochs": [COUNT],
        "epochs": [COUNT],
        "hop_grid": [Items(Interval(int, 1, MAX_HOPS, closed="both"))],
    }

    hops: int = 2
    """K: aggregation hops PMA releases (the fixed K at node level)"""
    hidden: int = 16
    """hidden width of the encoder and the classification modules"""
    encoder_layers: int = 2
    """layers of the edge-free encoder"""
    base_layers: int = 1
    """layers of each hop's base MLP"""
    head_layers: int = 1
    """layers of the classification head over the combined hops"""
    dropout: float = 0.0
    """dropout in every module"""
    batch_norm: bool = True
    """batch normalisation between layers (refused at node level)"""
    lr: float = 0.01
    """learning rate of every module (Adam)"""
    encoder_epochs: int = 100
    """epochs of the encoder"""
    epochs: int = 100
    """epochs of the classification module"""
    hop_grid: tuple[int, ...] = (1, 2, 3, 4, 5)
    """protocol=paper: the K searched, one release per K"""


@dataclass
class GAPEdgeHyperparameters(GAPHyperparameters):
    """GAP-EDP's defaults: those of :class:`GAPHyperparameters` with ``hops`` = 1, the K_max of
    the one PMA release under ``sound`` (issue 50: every released hop costs budget, and on the
    derivation graphs — Planetoid Cora, Texas, Wisconsin — one hop of the encoder's class
    probabilities kept more than two: Cora, ε = 4, seed 0: 0.645 against 0.624; Texas and
    Wisconsin fall back to the encoder at either). ``paper`` searches ``hop_grid`` as before.

    Attributes:
        hops: K_max, the hops PMA releases under ``sound``.
    """

    hops: int = 1
    """K_max: the hops PMA releases once (sound; K chosen among its prefixes)"""


@dataclass
class GAPNodeHyperparameters(GAPHyperparameters):
    """Section 7.3 / reference defaults for GAP-NDP: DP-Adam, 10 epochs per module, batch 256,
    clip 1, D = 100, no BatchNorm. ``hop_grid`` × ``degree_grid`` is searched only under
    ``protocol=paper``. Under ``sound``, ``degree_bound=projection`` (default) aggregates over the
    maximum-entropy projection of the graph to weighted degree ≤ ``max_degree`` (node-level DP for
    graphs of at most the declared number of nodes); ``degree_bound=promise`` refuses a graph of
    maximum degree above ``max_degree`` (bounded-degree node-level DP).
    The DP-SGD rate is ``sample_rate`` when set, else 1/⌈n̂/B⌉ from the declared training-set
    size n̂ (:class:`~dpaudit.training.dpsgd.PoissonSchedule`); the real number of training nodes is never read.

    Attributes:
        batch_size: B, DP-Adam's expected batch size.
        max_grad_norm: C, the per-example clip.
        max_degree: D, the degree bound (projection target or promise).
        degree_grid: the D values searched under ``protocol=paper``.
        sample_rate: DP-SGD's Poisson rate q; ``None`` for 1/⌈n̂/B⌉.
        degree_bound: ``projection`` (node-level DP) or ``promise`` (bounded-degree node-level DP); ``sound`` only.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "batch_size": [COUNT],
        "max_grad_norm": [POSITIVE],
        "max_degree": [COUNT],
        "degree_grid": [Items(COUNT)],
        "sample_rate": [SAMPLE_RATE, None],
        "degree_bound": [Options(*protocols.DEGREE_BOUNDS)],
    }

    batch_norm: bool = False
    encoder_epochs: int = 10
    epochs: int = 10
    batch_size: int = 256
    """expected Poisson batch size of DP-Adam"""
    max_grad_norm: float = 1.0
    """per-example gradient clipping norm of DP-Adam"""
    max_degree: int = 100
    """D: the degree bound of the aggregation (in-edges kept per node)"""
    degree_grid: tuple[int, ...] = (100, 200, 300, 400)
    """protocol=paper: the D searched"""
    sample_rate: float | None = None
    """Poisson rate q of DP-SGD; default: batch_size over the declared training size"""
    degree_bound: str = "projection"
    """sound only: "projection" (node-level DP) or "promise" (bounded-degree)"""


@dataclass
class _Candidate:
    """One configuration of the grid (the paper's, sound's hop prefixes, or the single fixed one)."""

    hops: int
    released_hops: int  # hops PMA released on the training graph (K_max when K is a prefix choice)
    max_degree: int | None
    val_accuracy: float
    sigma: float
    noise_std: float
    sensitivity: float | None  # None: a projected run at ε = ∞ (no noise, no sensitivity read)
    encoder: GAPEncoder
    classifier: GAPClassifier
    cache: torch.Tensor
    mechanisms: list
    kept_edges: int
    projection: DegreeProjection | None = None  # the degree projection PMA aggregated over (sound node level)


#: calibrated noise multipliers by mechanism parameters (see ``_GAP._calibrate``).
_SIGMA_MEMO: dict[tuple, float] = {}


def _head_regression(c: float) -> Pipeline:
    """Sound GAP-EDP's skip head before it is folded into :class:`GAPSkipClassifier`: each input
    column standardised over the validation nodes, then an L2 logistic regression of inverse
    strength ``c``. The standardisation makes the regularisation scale-free: an under-confident
    encoder (e.g. over smoothed features) has log-probabilities spread over a narrow range, which a
    fixed ``c`` on the raw columns would shrink to the prior."""
    return Pipeline([("scale", StandardScaler()), ("regression", LogisticRegression(C=c, max_iter=2000))])


def encoder_input_entry(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The card's record of sound GAP-EDP's encoder input (``gap.encoder_input``): raw features or
    the public feature-graph smoothing, chosen by the feature-only encoder's validation accuracy on
    public labels; it reads no edge. ``None`` for a config without the choice.

    Args:
        cfg: a GAP model config (its ``feature_smoothing`` entry).

    Returns:
        ``{"transform", "smoothing", "chosen_by", "reads_edges"}``, or ``None``.

    Raises:
        ConfigurationError: a malformed smoothing record.
    """
    if "feature_smoothing" not in cfg:
        return None
    smoothing = FeatureSmoothing.from_dict(cfg["feature_smoothing"])
    return {
        "transform": "raw" if smoothing is None else "knn_feature_smoothing",
        "smoothing": None if smoothing is None else smoothing.to_dict(),
        "chosen_by": "the feature-only encoder's validation accuracy (public labels) among raw features and, where "
        "the declared size allows it, their smoothing over the kNN feature graph (fixed in advance)",
        "reads_edges": False,
    }


class _GAP(Defense):
    """Algorithm 2 for the three privacy levels and both protocols."""

    level: ClassVar[str] = "inf"
    family = "GAP"
    epoch_settings = ("encoder_epochs", "epochs")
    hyperparameters_class = GAPHyperparameters

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._validate_hyperparameters()
        self._universe_nodes: int | None = None  # N̄ of a private projected run (universe_nodes)

    def _validate_hyperparameters(self) -> None:
        """The one rule the declared ranges (``_parameter_constraints``, checked at construction)
        cannot say: batch normalisation mixes a batch's examples, so node-level DP-SGD refuses it."""
        if self.level == "node" and self.hp.batch_norm:
            raise ConfigurationError(
                f"{self.name}: batch_norm mixes the examples of a batch, which per-example DP-SGD cannot clip "
                "(the reference code turns it off at node level too); use batch_norm=false"
            )

    # -- the plan: everything the privacy spec says, from public inputs only ---------------------
    @property
    def degree_bound(self) -> str:
        """``projection`` or ``promise`` at node level (the hyperparameter), ``promise`` elsewhere."""
        return getattr(self.hp, "degree_bound", "promise")

    @property
    def projects(self) -> bool:
        """Whether PMA aggregates over the degree projection (:func:`protocols.projects_degrees`)."""
        return protocols.projects_degrees(self.level, self.protocol, self.degree_bound)

    def aggregation_sensitivity(self, max_degree: int | None = None) -> float | None:
        """Per-hop L2 sensitivity of :math:`A^\\top\\check X` (:func:`protocols.aggregation_sensitivity`);
        over the projection it needs the declared number of nodes (:meth:`universe_nodes`), which
        a run at ε = ∞ does not read: it has no sensitivity (``None``) and adds no noise."""
        degree = (self.hp.max_degree if max_degree is None else max_degree) if self.level == "node" else None
        if self.projects and self._universe_nodes is None and not self.private:
            return None
        return protocols.aggregation_sensitivity(
            self.level, self.protocol, degree, self.degree_bound, self._universe_nodes
        )

    @property
    def declared_facts_read(self) -> dict[str, int]:
        """The declared facts this defense's plan read (the node count N̄ of a projected run)."""
        return {} if self._universe_nodes is None else {"num_nodes": self._universe_nodes}

    def adopt_declared_facts(self, facts: dict) -> None:
        """Plan from declared facts without the data (a saved card's, or the defense a private
        selection's candidate comes from): N̄ of a private projected run."""
        if self.projects and self.private and facts.get("num_nodes") is not None:
            self._universe_nodes = int(facts["num_nodes"])

    def universe_nodes(self, dataset: GraphDataset, split: Split) -> int | None:
        """N̄ of a private projected run: the declared number of nodes, which bounds every node's
        degree in the projection's analysis. Refused before any work when nothing is declared or
        the graph has more nodes (the declaration would be false). ``None`` where not needed.

        Raises:
            DPAuditError: no declared size, or a graph larger than declared.
        """
        if not (self.projects and self.private):
            return None
        declared = require_declared(
            declared_population("node", dataset, split),
            f"{self.name} (degree_bound=projection: the declared number of nodes bounds every degree)",
            "use degree_bound=promise (bounded-degree node-level DP, refusing graphs above max_degree)",
        )
        if dataset.num_nodes > declared:
            raise DPAuditError(
                f"{self.name}: the graph has more nodes than the declared {declared}; the projection's sensitivity "
                "is proven for graphs of at most the declared number of nodes"
            )
        return declared

    def missing_declarations(self, declared: set[str]) -> list[str]:
        if "num_train" in declared:
            return []
        try:
            self.schedules(None)
        except ConfigurationError:
            return [
                f"{self.name}'s DP-SGD Poisson rate is fixed before any data is read: --dataset-option "
                "declare_num_train=N, or --set sample_rate=Q"
            ]
        return []

    def schedules(self, declared_train: int | None) -> tuple[PoissonSchedule, PoissonSchedule] | None:
        """(encoder, classifier) DP-SGD schedules of private node-level GAP, fixed before any
        data is read: q = ``sample_rate``, else from the declared training-set size n̂
        (:meth:`PoissonSchedule.plan`). ``None`` elsewhere (no DP-SGD, or no noise).

        Raises:
            ConfigurationError: neither ``sample_rate`` nor a declared size is given.
        """
        if self.level != "node" or not self.private:
            return None
        hp = self.hp

        def plan(epochs: int) -> PoissonSchedule:
            return PoissonSchedule.plan(
                batch_size=hp.batch_size, epochs=epochs, declared_size=declared_train, sample_rate=hp.sample_rate
            )

        try:
            return plan(hp.encoder_epochs), plan(hp.epochs)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.name}: {exc}") from None

    def selection_run_mechanisms(self, num_features: int, declared_train: int | None, delta: float) -> list:
        schedules = self.schedules(declared_train)
        hops = self.hp.hops
        sigma = noise_for_plan(self.epsilon, delta, lambda s: self.mechanisms_for(s, schedules, hops))
        return list(self.mechanisms_for(sigma, schedules, hops))

    def mechanisms_for(
        self, noise_multiplier: float, schedules, hops: int | None = None, max_degree: int | None = None
    ) -> list:
        """What the pipeline spends at noise multiplier σ with K hops (calibration and the spec).

        PMA adds noise of std σ·Δ per hop, i.e. ``GaussianMechanism(σΔ, Δ, K)`` (Theorem 1 / 2,
        with this protocol's Δ); at node level it is sandwiched between the encoder's and the
        classifier's DP-SGD runs (Proposition 3), both with noise multiplier σ on their planned
        ``schedules``. Δ cancels: σ does not depend on D.
        """
        hops = self.hp.hops if hops is None else hops
        delta_agg = self.aggregation_sensitivity(max_degree)
        pma = GaussianMechanism(noise_multiplier * delta_agg, delta_agg, hops, name="pma (GAP Algorithm 1)")
        if self.level != "node":
            return [pma]
        encoder, classifier = schedules
        return [
            PoissonSubsampledGaussian(noise_multiplier, encoder.sample_rate, encoder.steps),
            pma,
            PoissonSubsampledGaussian(noise_multiplier, classifier.sample_rate, classifier.steps),
        ]

    def _calibrate(self, delta: float, schedules, hops: int) -> float:
        """σ for ε at δ with K hops (:func:`~dpaudit.training.dpsgd.noise_for_plan`), memoised per process: σ is a
        deterministic function of the mechanisms' parameters, which repeat across seeds of a
        plan (the opacus RDP of a Poisson-sampled Gaussian is slow to evaluate)."""
        shape = tuple((s.sample_rate, s.steps) for s in schedules) if schedules else ()
        key = (self.level, self.protocol, self.epsilon, delta, hops, shape)
        if key not in _SIGMA_MEMO:
            _SIGMA_MEMO[key] = noise_for_plan(self.epsilon, delta, lambda s: self.mechanisms_for(s, schedules, hops))
        return _SIGMA_MEMO[key]

    def query_mechanism(self, sigma: float, hops: int, max_degree: int | None) -> GaussianMechanism:
        """What one PMA release on a query graph costs: the training PMA's noise and sensitivity."""
        sens = self.aggregation_sensitivity(max_degree)
        return GaussianMechanism(sigma * sens, sens, hops, name="pma on a query graph")

    @classmethod
    def replan(cls, card: dict[str, Any], privacy) -> list[dict[str, Any]] | None:
        """The mechanism records the card's public inputs give: the hyperparameters, target ε,
        the spec's δ and declared facts (the DP-SGD schedules at node level), and the K (and D)
        the card's ``gap`` section names (chosen on validation data under ``paper``, which its
        spec lists as unaccounted, or as post-processing at edge level) with the hops released on
        the training graph (``released_hops``, K_max of a prefix choice; K when absent). σ is the section's when it meets the calibration's contract
        (:func:`~dpaudit.training.dpsgd.noise_for_plan`), else re-calibrated; the section itself must be
        the plan's, and every record after the training ledger one query-graph PMA release.

        Raises:
            IntegrityError: the card's ``gap`` section is not the plan's (one line).
        """
        from dpaudit.accounting.verify import refuse

        target, section = card.get("target_epsilon"), card.get("gap")
        if target is None or not isinstance(section, dict) or not isinstance(card.get("hyperparameters"), dict):
            return None
        try:
            hops = int(section["hops"])
            released_hops = int(section.get("released_hops", hops))  # absent: K is the whole release
            max_degree = None if section.get("max_degree") is None else int(section["max_degree"])
            grid_size = int(section["grid_size"])
            recorded_sigma = float(section["noise_multiplier"])
        except (KeyError, TypeError, ValueError):
            raise refuse(f"the card's gap section is incomplete: {section!r}") from None
        if not 1 <= hops <= released_hops <= MAX_HOPS:
            raise refuse(f"the card's gap section names K = {hops} hops of a release of {released_hops}")
        defense = cls(epsilon=target, delta=privacy.delta, device="cpu", **card["hyperparameters"])
        schedules = defense.schedules((privacy.public_facts or {}).get("num_train"))
        defense.adopt_declared_facts(privacy.public_facts or {})
        if defense.projects and privacy.is_private and defense._universe_nodes is None:
            raise refuse("a projected node-level GAP card needs the declared number of nodes in its public facts")
        sigma = noise_for_plan(
            target,
            privacy.delta,
            lambda s: defense.mechanisms_for(s, schedules, released_hops, max_degree),
            recorded=recorded_sigma,
        )
        chosen = section.get("encoder_input")  # a public choice (features and labels only), like K
        if chosen is not None:
            try:
                chosen = encoder_input_entry({"feature_smoothing": chosen["smoothing"]})
            except (ConfigurationError, KeyError, TypeError):
                raise refuse(f"the card's gap.encoder_input is malformed: {chosen!r}") from None
        planned = defense.plan_card(
            hops,
            max_degree,
            grid_size,
            sigma,
            schedules,
            released_hops=released_hops,
            encoder_input=chosen,
        )
        mismatch = plan_mismatch(section, planned, "gap")
        if mismatch:
            raise refuse(f"the card's plan section differs from the plan of its hyperparameters: {mismatch}")
        training = [m.describe() for m in defense.mechanisms_for(sigma, schedules, released_hops, max_degree)]
        query = defense.query_mechanism(sigma, hops, max_degree).describe()
        return training + [query] * max(0, len(privacy.mechanisms) - len(training))

    def plan_card(
        self,
        hops: int,
        max_degree: int | None,
        grid_size: int,
        sigma: float,
        schedules,
        *,
        released_hops: int | None = None,
        encoder_input: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The public ``gap`` card section: the configuration released (K; and ``released_hops``,
        the K_max hops PMA released on the training graph, when K is a shorter prefix of it) and
        the plan derived from public inputs (σ, Δ, the DP-SGD schedules); measurements go to the
        owner's record."""
        plan: dict[str, Any] = {
            "hops": hops,
            "max_degree": max_degree,
            "grid_size": grid_size,
            "noise_multiplier": sigma,
            "aggregation_sensitivity": self.aggregation_sensitivity(max_degree),
        }
        if released_hops is not None and released_hops != hops:
            plan["released_hops"] = released_hops
        if encoder_input is not None:  # sound GAP-EDP's encoder input (:func:`encoder_input_entry`)
            plan["encoder_input"] = encoder_input
        if self._universe_nodes is not None:
            plan["universe_nodes"] = self._universe_nodes  # the declared graph size Δ is proven for
        for module, schedule in zip(("encoder", "classifier"), schedules or ()):
            plan[f"{module}_schedule"] = {
                "sample_rate": schedule.sample_rate,
                "steps": schedule.steps,
                "expected_batch_size": schedule.expected_batch_size,
                "from": schedule.source,
            }
        return plan

    # -- training -----------------------------------------------------------------------------
    def _train_module(self, module, inputs, targets, sigma, schedule, epochs, desc, seed, val):
        hp = self.hp
        if self.level == "node":
            return _train_minibatch(
                module,
                inputs,
                targets,
                noise_multiplier=sigma,
                max_grad_norm=hp.max_grad_norm,
                batch_size=hp.batch_size,
                epochs=epochs,
                schedule=schedule,
                lr=hp.lr,
                seed=seed,
                desc=desc,
                val=val,
                noise=self.noise,
            )
        _train_full_batch(module, inputs, targets, epochs, hp.lr, desc, val)
        return None

    def check_data(self, dataset: GraphDataset, split: Split) -> None:
        """Sound node-level GAP checks its degree promise on the training graph before any work
        (``fit`` calls this before a private selection's calibration too)."""
        if protocols.sound_node_level_needs_promise(self.level, self.protocol, self.private, self.degree_bound):
            edge_index = split.edge_index_for(dataset, "train")
            check_degree_promise(edge_index, dataset.num_nodes, self.hp.max_degree, "training graph")
        self._universe_nodes = self.universe_nodes(dataset, split)

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> GAPModel:
        hp, device = self.hp, self.device
        data = dataset.data
        num_nodes = dataset.num_nodes
        train, val = split.train, split.val
        edge_index = split.edge_index_for(dataset, "train")
        node = self.level == "node"
        if self.paper_protocol and len(val) == 0:
            raise ConfigurationError(f"{self.name}: protocol=paper selects on validation nodes; the split has none")
        schedules = self.schedules(declared_train_size(dataset, split))
        self._universe_nodes = self.universe_nodes(dataset, split)

        hop_grid, degree_grid = protocols.search_grid(self.level, self.protocol, hp)
        base_cfg = {
            "in_dim": dataset.num_features,
            "hidden": hp.hidden,
            "encoder_layers": hp.encoder_layers,
            "base_layers": hp.base_layers,
            "head_layers": hp.head_layers,
            "num_classes": dataset.num_classes,
            "dropout": hp.dropout,
            "batch_norm": bool(hp.batch_norm),
        }
        encoder_schedule, classifier_schedule = schedules or (None, None)
        # Raw features stay sparse where they are (the encoder's first layer is CSR × dense).
        x = sparse_features(data.x.float().to(device))
        y = data.y.to(device)
        if protocols.uses_skip_head(self.level, self.protocol):
            return self._fit_skip(dataset, split, edge_index, x, y, delta, base_cfg)
        train_d, val_d = train.to(device), val.to(device)
        selects = protocols.selects_on_validation(self.level, self.protocol)
        if selects and len(val) == 0:  # sound only (paper refused above): nothing to select on
            log.info("%s: the split has no validation nodes; fixed K = %d, last iterate", self.name, hp.hops)
            selects, hop_grid = False, [hp.hops]
        enc_val = (x[val_d], y[val_d]) if selects else None
        # Sound edge level and ∞: every K reads the first K hops of ONE release of K_max hops.
        one_release = protocols.hops_share_one_release(self.level, self.protocol, self.private)

        best: _Candidate | None = None
        encoder_memo: dict[int, tuple[GAPEncoder, Any, torch.Tensor]] = {}
        shared_hops: torch.Tensor | None = None  # the one PMA release of max(hop_grid) hops, sliced per K
        for hops in hop_grid:
            released_hops = max(hop_grid) if one_release else hops
            sigma = 0.0
            if self.private:
                sigma = self._calibrate(delta, schedules, released_hops)
                log.info(
                    "%s: K = %d (released %d), calibrated σ = %.4g for ε = %g, δ = %g",
                    self.name,
                    hops,
                    released_hops,
                    sigma,
                    self.epsilon,
                    delta,
                )
            # Step 1: the encoder reads features and labels only. Without DP-SGD it does not
            # depend on K, so one encoder serves the whole grid.
            enc_key = hops if (node and self.private) else 0
            if enc_key not in encoder_memo:
                encoder_memo.clear()
                torch.manual_seed(self.seed)
                encoder = _build_encoder(base_cfg).to(device)
                enc_mech = self._train_module(
                    encoder,
                    x[train_d],
                    y[train_d],
                    sigma,
                    encoder_schedule,
                    hp.encoder_epochs,
                    "gap encoder",
                    self.seed,
                    enc_val,
                )
                with torch.no_grad():
                    x0 = encoder.eval().encode(x)
                encoder_memo[enc_key] = (encoder, enc_mech, x0)
            encoder, enc_mech, x0 = encoder_memo[enc_key]
            for max_degree in degree_grid:
                sens = self.aggregation_sensitivity(max_degree)
                noise_std = sigma * sens if sens is not None else 0.0
                # Steps 2–4: PMA (once per configuration; cached).
                features, cache, ei, projection, shared_hops = self._aggregate(
                    x0, edge_index, num_nodes, hops, released_hops, max_degree, noise_std, one_release, shared_hops
                )
                # Step 5: the classification module on the cached representations.
                torch.manual_seed(self.seed + 1)
                classifier = _build_classifier(base_cfg, hops).to(device)
                cls_val = (features[val_d], y[val_d]) if selects else None
                cls_mech = self._train_module(
                    classifier,
                    features[train_d],
                    y[train_d],
                    sigma,
                    classifier_schedule,
                    hp.epochs,
                    "gap classifier",
                    self.seed + 1,
                    cls_val,
                )
                val_acc = _accuracy(classifier, features[val_d], y[val_d]) if len(val) else float("nan")
                log.info("%s: K = %d, D = %s: validation accuracy %.4f", self.name, hops, max_degree, val_acc)
                mechanisms = []
                if self.private:
                    pma = GaussianMechanism(noise_std, sens, released_hops, name="pma (GAP Algorithm 1)")
                    mechanisms = [enc_mech, pma, cls_mech] if node else [pma]
                candidate = _Candidate(
                    hops,
                    released_hops,
                    max_degree,
                    val_acc,
                    sigma,
                    noise_std,
                    sens,
                    encoder,
                    classifier,
                    cache,
                    mechanisms,
                    int(ei.size(1)),
                    projection,
                )
                if best is None or (selects and val_acc > best.val_accuracy):
                    best = candidate
        assert best is not None
        return self._release(best, dataset, edge_index, delta, base_cfg, len(hop_grid) * len(degree_grid), schedules)

    def _skip_nodes(self, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
        """(encoder's training nodes, the nodes the skip head is fitted and chosen on): the split's
        training and validation nodes, or, without validation nodes, a seeded 20 % of the training
        nodes held out (public labels at edge level)."""
        if len(split.val) > 0:
            return split.train, split.val
        gen = torch.Generator().manual_seed(self.seed + 4_000_037)
        order = split.train[torch.randperm(len(split.train), generator=gen)]
        held = max(1, len(order) // 5)
        return order[held:], order[:held]

    def _fit_skip(self, dataset, split, edge_index, x, y, delta, base_cfg) -> GAPModel:
        """Sound GAP-EDP (issue 50): Algorithm 2 with a public-data encoder and a hop-0 skip.

        1. Encoder: for each input of :meth:`_input_candidates` (raw features; their public
           kNN feature-graph smoothing where it fits) and each (width, dropout) of
           :data:`protocols.SKIP_ENCODER_GRID`, the feature-only encoder trained without noise on
           the training labels (best-validation epoch); the one with the best validation accuracy
           is kept (ties: the earlier, raw first) and its input recorded (``feature_smoothing``).
           It reads features and labels only, which edge-level DP does not protect: free.
        2. PMA (Algorithm 1, Theorem 1 with Δ = √2): ONE release of K_max = ``hops`` hops of the
           encoder's one-hot predicted classes (:func:`~defenses.gap.model.released_rows`: unit
           rows, C wide), calibrated to (ε, δ) and the only mechanism in the ledger. The classifier reads the noisy sums X̃⁽ᵏ⁾ (Eq. 8), not their normalisations:
           the same release.
        3. Skip head (:class:`~defenses.gap.model.GAPSkipClassifier`): a logistic regression
           (scikit-learn) over [log X̌⁽⁰⁾ | X̃⁽¹⁾ … X̃⁽ᴷ⁾] fitted on the validation labels (the
           encoder's training-node probabilities are over-fitted: a head fitted there would learn
           to ignore the graph). K ∈ 1..K_max and the regularisation are chosen by stratified
           cross-validation accuracy on the validation nodes, the encoder alone among the choices
           (the fallback where the graph does not help). Every step reads the release and public
           features and labels only: post-processing (Dwork & Roth 2014, Prop. 2.1), no ε.
        """
        hp, device = self.hp, self.device
        num_classes = dataset.num_classes
        fit_nodes, head_nodes = self._skip_nodes(split)
        fit_d, head_d = fit_nodes.to(device), head_nodes.to(device)
        # the release carries the encoder's predicted class (one-hot unit rows): :func:`released_rows`
        cfg = {**base_cfg, "head": "skip", "released_rows": "prediction"}
        best_enc = None
        for smoothing, inputs in self._input_candidates(dataset, split, x):
            name = "smoothed" if smoothing else "raw"
            for width, dropout in protocols.SKIP_ENCODER_GRID:
                trial = {
                    **cfg,
                    "hidden": width,
                    "dropout": dropout,
                    "feature_smoothing": smoothing and smoothing.to_dict(),
                }
                torch.manual_seed(self.seed)
                encoder = _build_encoder(trial).to(device)
                _train_full_batch(
                    encoder,
                    inputs[fit_d],
                    y[fit_d],
                    hp.encoder_epochs,
                    hp.lr,
                    "gap encoder",
                    (inputs[head_d], y[head_d]),
                )
                acc = _accuracy(encoder, inputs[head_d], y[head_d])
                log.info(
                    "%s: encoder input %s, width %d, dropout %g: validation accuracy %.4f",
                    self.name,
                    name,
                    width,
                    dropout,
                    acc,
                )
                if best_enc is None or acc > best_enc[0]:  # ties keep the earlier candidate (raw first)
                    best_enc = (acc, encoder, trial, inputs)
        enc_acc, encoder, cfg, inputs = best_enc
        log.info("%s: encoder input %s chosen", self.name, "smoothed" if cfg["feature_smoothing"] else "raw")
        with torch.no_grad():
            x0 = encoder.eval().encode(inputs)
        released_hops = hp.hops
        sigma, sens = 0.0, self.aggregation_sensitivity()
        if self.private:
            sigma = self._calibrate(delta, None, released_hops)
            log.info(
                "%s: K_max = %d, calibrated σ = %.4g for ε = %g, δ = %g",
                self.name,
                released_hops,
                sigma,
                self.epsilon,
                delta,
            )
        noise_std = sigma * sens
        with torch.no_grad():
            gen = self.noise.torch(self.seed + 2_000_003 + 7919 * released_hops)
            sums = torch.cat(
                private_multi_hop_aggregation(
                    released_rows(cfg, x0), edge_index.to(device), released_hops, noise_std, gen, raw=True
                ),
                dim=1,
            )
        hops, classifier, score, grid_size = self._fit_skip_head(x0, sums, y, head_nodes, released_hops, enc_acc)
        cache = sums[:, : hops * num_classes].contiguous()
        mechanisms = (
            [GaussianMechanism(noise_std, sens, released_hops, name="pma (GAP Algorithm 1)")] if self.private else []
        )
        best = _Candidate(
            hops,
            released_hops,
            None,
            score,
            sigma,
            noise_std,
            sens,
            encoder,
            classifier.to(device),
            cache,
            mechanisms,
            int(edge_index.size(1)),
        )
        return self._release(best, dataset, edge_index, delta, cfg, grid_size, None)

    def _input_candidates(self, dataset: GraphDataset, split: Split, x: torch.Tensor):
        """Sound GAP-EDP's encoder inputs, fixed in advance: raw features, and the public
        feature-graph smoothing (:class:`~dpaudit.data.feature_graph.FeatureSmoothing`) where
        :func:`~dpaudit.data.feature_graph.smoothing_fits` the declared N and F. Yields
        ``(smoothing or None, inputs [N, F])``. The smoothing is computed over the nodes of the graph
        the phase reads: all nodes (transductive), or each part's nodes apart (inductive: the
        training graph's nodes only for the training rows). It reads features only, never an edge:
        free at edge level (features and node set public)."""
        yield None, x
        if not smoothing_fits(dataset.num_nodes, dataset.num_features):
            return
        smoothing = FeatureSmoothing()
        dense = dataset.data.x.float().to(self.device)  # the tensor (``x`` may be the encoder's sparse form)
        if not split.inductive:
            yield smoothing, smoothing.apply(dense)
            return
        dense = dense.to_dense() if dense.layout != torch.strided else dense
        out = torch.zeros(dense.shape, dtype=torch.float32, device=dense.device)
        placed = torch.zeros(dataset.num_nodes, dtype=torch.bool)
        rest = torch.arange(dataset.num_nodes)
        for part in (split.train, split.val, split.test, rest):
            part = part.cpu()[~placed[part.cpu()]]
            placed[part] = True
            if part.numel() >= 2:
                out[part.to(dense.device)] = smoothing.apply(dense[part.to(dense.device)])
            elif part.numel() == 1:  # a one-node feature graph: Ŝ = I, the unit row
                out[part.to(dense.device)] = torch.nn.functional.normalize(dense[part.to(dense.device)].float(), dim=1)
        yield smoothing, out

    def _fit_skip_head(self, x0, sums, y, head_nodes, released_hops, encoder_accuracy):
        """(K, the fitted :class:`~defenses.gap.model.GAPSkipClassifier`, its cross-validated
        accuracy, the number of choices) from the validation nodes' public labels."""
        num_classes = x0.size(1)
        idx = head_nodes.cpu().numpy()
        labels = y.cpu().numpy()[idx]
        log_p = torch.log(x0.clamp_min(1e-6)).cpu()
        raw = sums.cpu()
        counts = [int((labels == c).sum()) for c in set(labels.tolist())]
        folds = min(5, max(counts)) if counts else 0
        # K = 0: the encoder's log-probabilities alone (hop weights zero), the fallback where the graph does not help
        choices = [(k, c) for k in range(0, released_hops + 1) for c in protocols.SKIP_HEAD_REGULARISATION]

        def inputs(k: int):
            return torch.cat([log_p, raw[:, : k * num_classes]], dim=1).numpy()[idx]

        best = (encoder_accuracy, 0, None)  # too few validation labels to cross-validate: the encoder itself
        if folds >= 2 and len(counts) >= 2:
            cv = StratifiedKFold(folds, shuffle=True, random_state=self.seed)
            best = (-1.0, 0, None)
            for k, c in choices:
                score = float(cross_val_score(_head_regression(c), inputs(k), labels, cv=cv).mean())
                log.info("%s: skip head K = %d, C = %g: cross-validated accuracy %.4f", self.name, k, c, score)
                if score > best[0]:
                    best = (score, k, c)
        score, k, c = best
        hops = max(1, k)
        classifier = GAPSkipClassifier(hops, num_classes)
        with torch.no_grad():
            classifier.linear.weight.zero_()
            classifier.linear.bias.zero_()
            if c is None:  # the encoder's own prediction: identity on the hop-0 log-probabilities
                classifier.linear.weight[:, :num_classes] = torch.eye(num_classes)
            else:
                head = _head_regression(c).fit(inputs(k), labels)
                scaler, regression = head.named_steps["scale"], head.named_steps["regression"]
                # the standardisation folded into the linear layer: W (z − μ)/s + b = (W/s) z + (b − W μ/s)
                coef = regression.coef_ / scaler.scale_
                intercept = regression.intercept_ - coef @ scaler.mean_
                rows = torch.as_tensor(regression.classes_, dtype=torch.long)
                width = (k + 1) * num_classes
                classifier.linear.weight[rows, :width] = torch.as_tensor(coef, dtype=torch.float32)
                classifier.linear.bias[rows] = torch.as_tensor(intercept, dtype=torch.float32)
                if len(rows) < num_classes:  # a class absent from the validation labels: never predicted
                    missing = torch.ones(num_classes, dtype=torch.bool)
                    missing[rows] = False
                    classifier.linear.bias[missing] = -1e4
        return hops, classifier.eval(), score, 1 + len(choices)

    def _aggregate(
        self, x0, edge_index, num_nodes, hops, released_hops, max_degree, noise_std, one_release, shared_hops
    ):
        """Steps 2–4 for one (K, D): the sampled degree bound (node level, where the protocol samples
        it), the projection (where it projects) and the private multi-hop aggregation of the encoder's
        output ``x0`` with noise std ``noise_std`` — or, with ``one_release``, the first K hops of the
        one release of ``released_hops`` hops (``shared_hops``: computed on the first call, then
        sliced). Returns (features [n, (K+1)·hidden], the K hops' cache, the kept edges, the
        projection or None, shared_hops)."""
        hp, device = self.hp, self.device
        node = self.level == "node"
        ei, operator, projection = edge_index, None, None
        if node and protocols.samples_degrees(self.protocol):
            ei = bound_out_degree(ei, num_nodes, max_degree, torch.Generator().manual_seed(self.seed + 1_000_003))
        if self.projects:
            projection = projection_of(ei, num_nodes, max_degree)
            operator = projection.sum_operator(num_nodes, x0.dtype, device)
        with torch.no_grad():
            # the aggregation noise (CPU: CUDA draws the same): the privacy noise source's
            gen = self.noise.torch(self.seed + 2_000_003 + 7919 * released_hops)
            if one_release:
                if shared_hops is None:
                    shared_hops = torch.cat(
                        private_multi_hop_aggregation(
                            x0, ei.to(device), released_hops, noise_std, gen, operator=operator
                        ),
                        dim=1,
                    )
                cache = shared_hops[:, : hops * hp.hidden].contiguous()
            else:
                cache = torch.cat(
                    private_multi_hop_aggregation(x0, ei.to(device), hops, noise_std, gen, operator=operator),
                    dim=1,
                )
            features = torch.cat([x0, cache], dim=1)
        return features, cache, ei, projection, shared_hops

    def _release(
        self,
        best: _Candidate,
        dataset: GraphDataset,
        edge_index: torch.Tensor,
        delta: float,
        base_cfg: dict,
        grid_size: int,
        schedules,
    ) -> GAPModel:
        """The released model of the chosen candidate: its configuration (with the ledger and the
        query mechanism), spec, card (the plan) and training release; what was measured on the
        private graph (validation accuracy, kept edges, the projection) goes to the owner's record."""
        node = self.level == "node"
        data, num_nodes = dataset.data, dataset.num_nodes
        cfg = {
            "level": self.level,
            "protocol": self.protocol,
            **base_cfg,
            "hops": best.hops,
            "noise_std": best.noise_std,
            "max_degree": best.max_degree,
            "degree_bound": self.degree_bound if node else None,
            "universe_nodes": self._universe_nodes,
            "ledger": [_mechanism_record(m) for m in best.mechanisms],
            "query_mechanism": (
                _mechanism_record(self.query_mechanism(best.sigma, best.hops, best.max_degree))
                if self.private
                else None
            ),
            "query_releases": 0,
        }
        privacy = self._privacy(best, delta, grid_size)
        card = {
            "inference": self._inference_card(),
            "gap": self.plan_card(
                best.hops,
                best.max_degree,
                grid_size,
                best.sigma,
                schedules,
                released_hops=best.released_hops,
                encoder_input=encoder_input_entry(cfg),
            ),
        }
        model = GAPModel(best.encoder.eval(), best.classifier.eval(), cfg, privacy, card)
        trained = TrainingGraph(
            graph_key(num_nodes, edge_index, data.x),
            num_nodes,
            structure_key(Data(edge_index=edge_index, num_nodes=num_nodes)),
        )
        model.keep_training_release(trained, best.cache, edge_index)
        # no validation nodes: no accuracy (None, not NaN, which JSON cannot hold)
        val_accuracy = best.val_accuracy if math.isfinite(best.val_accuracy) else None
        model.record["gap"]["selection"] = {"val_accuracy": val_accuracy, "kept_edges": best.kept_edges}
        if best.projection is not None:  # measured on the private graph: the owner's record only
            model.record["gap"]["projection"] = {
                "cap": best.projection.cap,
                "duality_gap": best.projection.duality_gap,
                "sweeps": best.projection.sweeps,
                "weighted_edges": int(best.projection.weight.numel()),
                "total_weight": float(best.projection.weight.sum()),
            }
        return model

    def _privacy(self, best: _Candidate, delta: float, grid_size: int) -> PrivacySpec:
        if not self.private:
            return PrivacySpec.non_private(f"{self.name} at ε = ∞: the GAP pipeline without any noise")
        if any(m is None for m in best.mechanisms):
            raise RuntimeError("a private GAP step returned no mechanism")  # pragma: no cover - bug guard
        notes, unaccounted = protocols.privacy_text(
            self.level,
            self.protocol,
            hops=best.hops,
            released_hops=best.released_hops,
            max_degree=best.max_degree,
            sensitivity=best.sensitivity,
            sigma=best.sigma,
            grid_size=grid_size,
            degree_bound=self.degree_bound,
            universe_nodes=self._universe_nodes,
        )
        notes.insert(0, f"δ = {delta:g} ({'auto' if str(self.delta_option) == 'auto' else 'given'})")
        ledger = PrivacyLedger().extend(best.mechanisms)
        spec = ledger.spec(delta, self.unit, target_epsilon=self.epsilon, notes=notes, unaccounted=unaccounted)
        spec.unit_condition = unit_condition(self.level, self.protocol, best.max_degree, self.degree_bound)
        return spec

    def _inference_card(self) -> dict[str, Any]:
        if not self.private:
            return inference_entry(
                private=False, training_graph=False, note="non-private model: aggregations carry no noise"
            )
        return inference_entry(
            private=True,
            training_graph=True,
            note="every graph passed to predict_proba / embed, the training graph included, is a new PMA release "
            "counted in the model's query ledger; a release over the training graph or a graph sharing its nodes or "
            "edges is charged to the training data (total ε = training ε composed with those releases); the release "
            "made on the training graph in training is the owner's (training_release(), owner's record only)",
            training_note="answers on the training graph read the release PMA made in training (training_release(), "
            "the owner's record: free) or are new PMA releases charged to the training data: covered at the "
            "composed ε",
            owner_graph_mechanism=f"a PMA release per query graph ({self.name}: {self.level}-level)",
            feature_change=CHARGED_RELEASE,
        )


@register_defense
class GAPInf(_GAP):
    """GAP-∞ (Sajadmanesh et al. 2023): encoder + non-noisy multi-hop SUM aggregation + per-hop classifier.

    Args:
        epsilon: must be ``inf`` (non-private).
        delta: unused at ε = ∞.
        seed: seeds initialisation, dropout and the held-out split.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "gap-inf"
    unit = None
    relative_cost = 1.1
    level = "inf"
    summary = "GAP-∞ (Sajadmanesh et al. 2023): encoder + non-noisy multi-hop SUM aggregation + per-hop classifier"
    hyperparameters_class = GAPHyperparameters


@register_defense
class GAPEdge(_GAP):
    """GAP-EDP: edge-level DP by aggregation perturbation (PMA, Theorem 1 with Δ = √2), noise calibrated to ε.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "gap-edp"
    unit = "edge"
    relative_cost = 1.1
    level = "edge"
    summary = "GAP-EDP: edge-level DP by aggregation perturbation (PMA, Theorem 1 with Δ = √2), noise calibrated to ε"
    hyperparameters_class = GAPEdgeHyperparameters
    selection_score = Score(
        noisy=False,
        needs_training_release=True,
        reason="at edge level node features and labels are public and a validation node's prediction reads only "
        "the run's release, so validation accuracy is post-processing",
        label="validation accuracy (post-processing)",
    )
    #: the number of hops released, the width and the learning rate (never the degree bound)
    selection_grid = ({}, {"hops": 3}, {"hidden": 32}, {"lr": 0.005})


@register_defense
class GAPNode(_GAP):
    """GAP-NDP: node-level DP by PMA over a max-entropy degree projection (or, ``degree_bound=promise``,
    over graphs of max degree ≤ D), DP-Adam encoder and classifier, Prop. 3.


    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "gap-ndp"
    unit = "node"
    relative_cost = 1.2
    level = "node"
    summary = (
        "GAP-NDP: node-level DP by PMA over a proven max-entropy degree projection (or, degree_bound=promise, "
        "over graphs of max degree ≤ D), DP-Adam encoder/classifier, Prop. 3"
    )
    hyperparameters_class = GAPNodeHyperparameters
    selection_score = Score(
        noisy=True,
        needs_training_release=True,
        reason="a validation node's prediction reads only the run's release (modules and its row of the accounted "
        "PMA aggregates) and the node's own features",
    )
    #: never the degree bound D, whose refusal of a graph would be a data-dependent event
    selection_grid = ({}, {"hops": 1}, {"hidden": 32}, {"epochs": 20, "encoder_epochs": 20})
