r"""DP-GNN: node-level DP-SGD / DP-Adam for r-layer GCNs with bounded node occurrences.

Implements Daigavane et al., "Node-Level Differentially Private Graph Neural Networks"
(``shared/papers/dp-gnn-node-level.md``). Package layout: :mod:`~defenses.dpgnn.mechanism`
(Algorithms 1–3, Lemma 1, the slot sampler, Theorem 1's accountant — the proofs),
:mod:`~defenses.dpgnn.batches` (batch layouts), :mod:`~defenses.dpgnn.model` (network, released
model kind), :mod:`~defenses.dpgnn.training` (ghost-norm clipping, the DP-Adam/SGD loop),
:mod:`~defenses.dpgnn.protocols` (the plan, and what ``paper`` and ``sound`` change), this
module (hyperparameters, the defense).

Method
------
1. SAMPLE-EDGELISTS (Algorithm 1) bounds every node's number of training readers by K, and
   SAMPLE-SUBGRAPHS (Algorithms 2–3) cuts the r-hop tree of every training node; each node then
   occurs in at most :math:`N(K, r) = \sum_{i=0}^r K^i` training subgraphs (Lemma 1, checked in
   code).
2. DP-GNN (SGD) / (Adam) (Algorithms 4–5): each of T steps draws m distinct subgraph slots
   uniformly **without replacement**, computes every subgraph's gradient norm by ghost norms over
   the batch's disjoint union, clips each to L2 norm C, sums, adds :math:`\mathcal N(0, \sigma^2 I)`
   (σ = z·C for a noise multiplier z) and updates with :math:`\tilde u_t / m`.
3. Privacy (Theorem 1): each step is (α, γ)-RDP with ρ ~ Hypergeometric(N, N(K, r), m) terms
   of sensitivity 2C (2C√G with G layer-wise clipping groups), recorded as a
   :class:`~dpaudit.accounting.SensitivityMixtureGaussian`, composed over T steps and converted
   to (ε, δ); z is calibrated so that the spent ε ≤ the target.

The model is a GCN with an MLP encoder and decoder: ``enc`` (Linear+act) → r × [mean
aggregation with self loop :math:`\hat A = (D+I)^{-1}(A+I)` (Appendix E), then the reference's
residual layer :math:`h' = \tanh(W\hat A h + b) + \hat A h` (latent 100)] → ``dec``; Adam, lr
3·10⁻³, K = 5, as in the reference.

The plan is public (the released card)
--------------------------------------
Everything ``model.json`` carries is fixed before the private graph is read, from the
hyperparameters, the target (ε, δ) and the **declared** training-set size n̂
(:func:`dpaudit.release.declared_train_size`): Theorem 1's population N = n̂, the batch m (the
``batch_size`` hyperparameter, or :func:`~defenses.dpgnn.mechanism.reference_schedule` of n̂:
the reference's fraction 10,000/90,941, at most 10,000), T (``steps``, or the reference's
3,000), z, and the spec's notes (:func:`~defenses.dpgnn.protocols.plan`). A dataset that declares
no training-set size is refused before any work. The sampler draws m of :math:`\max(n, \hat n)`
slots, empty beyond the real n; :mod:`~defenses.dpgnn.mechanism` proves that Theorem 1 with
N = n̂ bounds it for every real n (the size needs no unaccounted step). What the fit measures
— the number of subgraphs, sampled messages, subgraph sizes, observed occurrences, the
``paper`` protocol's thresholds — is the owner's record (``model.record["dpgnn"]``,
``provenance.json``). :meth:`DPGNN.replan` re-derives the spec's mechanism from a saved card.

Protocols (:mod:`~defenses.dpgnn.protocols` has the table): ``sound`` clips at the fixed
``clip_norm``; ``paper`` clips every parameter tensor at the 75th percentile of its
per-subgraph gradient norms at initialisation (read from private data, listed in
``spec.unaccounted``). Batches are drawn without replacement in both (the reference draws with
replacement while its accountant assumes without; we keep the sampling the theorem covers).

What is proven, and why the sampler is ``sound: false``
------------------------------------------------------
Lemma 2 needs that removing node v̂ changes only the subgraphs v̂ occurs in. That holds when
the graph is directed (Remark 2) and a node's private data are its features, its label and its
*incoming edgelist* :math:`\mathbf{RE}_{\hat v}` (which training nodes read it); a removed
training node's own term becomes a zero term (an empty slot). Algorithm 1's coins for an edge
depend only on the sender's own list, so with coupled coins the other lists are identical and
at most N(K, r) clipped terms change, each by at most 2C. The edge coins are drawn once and
reused for all T steps; for every fixed draw of the coins the T-step run satisfies the composed
bound, and Rényi divergence is jointly quasi-convex (van Erven & Harremoës 2014, Thm. 13), so
the bound also holds for the mixture over the coins (the paper leaves this step implicit).

On an undirected dataset each edge sits in both endpoints' incoming lists, so an edge {v̂, w}
is protected as part of v̂'s data only in the direction "w reads v̂". Removing a node *with all
its undirected edges* — dpaudit's ``node`` unit, what the membership attacks test — also
changes |RE_w| of every node w it reads, hence the keep probability K/(2|RE_w|) of w's other
edges and the drop rule, and so subgraphs the removed node never occurs in. Lemma 2 does not
cover that, and no local degree-bounding rule that refills a node's K slots (or un-drops it)
when one neighbour disappears can: a node of unbounded degree touches unboundedly many such
neighbourhoods. Measured on Cora (K = 5, r = 1, coupled coins): removing the highest-degree
training node with all its edges changes 60 training subgraphs against N(K, r) = 6
(``tests/defenses/dpgnn/test_dpgnn.py``); the directed removal of the same node changes ≤ 6. Both protocols
therefore list this in ``spec.unaccounted`` and report ``sound: false`` with the sampler: the
printed ε is a proven bound for the directed relation only.

``protocol=sound`` with ``degree_bound=promise`` drops the sampler: every message to a training
node is kept, after checking that no node is read by more than K training nodes (a graph above
the promise is refused before any work, like gap-ndp's degree promise). Nothing is sampled, so
removing a node with all its undirected edges changes exactly the subgraphs it occurs in — at
most N(K, r) by Lemma 1 — and Theorem 1 holds for dpaudit's node unit over graphs that keep the
promise (:func:`~defenses.dpgnn.mechanism.promised_edgelists`; measured on Cora by removing and
adding nodes, attained at r = 1). The spec is ``sound: true`` with ``unit_condition =
"training readers per node <= K"``: bounded-degree node-level DP, from which reports draw no
unrestricted ceiling. K must cover the graph's largest reader count (126 on Cora's 75 % split),
so N(K, r) and the noise are large on real graphs.

Inference is **not private**: predictions use each queried node's full neighbourhood in the
query graph (as in the paper, Section 4), so the card says ``inference.private = False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from defenses.dpgnn import protocols
from defenses.dpgnn.mechanism import (  # noqa: F401  (dpgnn_mechanism, occurrence_bound, reference_schedule re-exported)
    build_subgraphs,
    dpgnn_mechanism,
    occurrence_bound,
    promised_edgelists,
    reference_schedule,
    sample_edgelists,
)
from defenses.dpgnn.model import INFERENCE_NOTE, DPGCNNet, DPGNNModel, build_dpgcn, clip_groups  # noqa: F401
from defenses.dpgnn.training import (  # noqa: F401  (clipped_gradient_sum re-exported)
    clipped_gradient_sum,
    percentile_thresholds,
    train_dp,
)
from dpaudit.accounting import PrivacyLedger, PrivacySpec
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, ModelFormatError
from dpaudit.nn import ACTIVATIONS, activation
from dpaudit.nn import features as sparse_features
from dpaudit.release import declared_train_size
from dpaudit.release.deployments import READ_IN_CLEAR, inference_entry
from dpaudit.training.constraints import COUNT, POSITIVE, WIDTH, Interval, Options
from dpaudit.training.defense import Defense, PrivateHyperparameters, check_hyperparameter_ranges
from dpaudit.training.registry import register_defense

__all__ = [
    "protocols",
    "build_subgraphs",
    "dpgnn_mechanism",
    "occurrence_bound",
    "promised_edgelists",
    "reference_schedule",
    "sample_edgelists",
    "INFERENCE_NOTE",
    "DPGCNNet",
    "DPGNNModel",
    "build_dpgcn",
    "clip_groups",
    "clipped_gradient_sum",
    "percentile_thresholds",
    "train_dp",
    "PrivacyLedger",
    "PrivacySpec",
    "GraphDataset",
    "Defense",
    "PrivateHyperparameters",
    "inference_entry",
    "ConfigurationError",
    "ModelFormatError",
    "activation",
    "sparse_features",
    "register_defense",
    "declared_train_size",
    "Split",
    "DPGNNHyperparameters",
    "_train_mask",
    "DPGNN",
]


@dataclass
class DPGNNHyperparameters(PrivateHyperparameters):
    """``batch_size`` / ``steps`` left at ``None`` follow
    :func:`~defenses.dpgnn.mechanism.reference_schedule` of the declared training-set size.
    ``protocol=sound`` clips with the fixed ``clip_norm`` (``clipping`` flat or layerwise);
    ``protocol=paper`` clips every parameter tensor to the ``clip_percentile``-th percentile of
    its per-subgraph gradient norms at initialisation over ≤ ``clip_estimate_nodes`` training
    subgraphs (the reference's rule, read from private data and not accounted).

    Attributes:
        protocol: ``sound`` (every step proven) or ``paper`` (the reference's run, ``sound: false``).
        layers: r, GCN message-passing layers (1–4).
        max_in_degree: K, the in-degree bound of the sampled (or promised) edge lists.
        latent: width of the encoder, GCN and decoder layers.
        encoder_layers: MLP layers before message passing.
        decoder_layers: MLP layers after message passing.
        act: activation (``relu``, ``selu``, ``tanh``, ``elu``).
        residual: residual connections around the GCN layers.
        batch_size: m, subgraphs per step (``None``: the reference schedule).
        steps: T, optimiser steps (``None``: the reference schedule).
        lr: learning rate.
        optimizer: ``adam`` or ``sgd``.
        clip_norm: C, the fixed clipping norm (``sound``).
        clipping: ``flat`` (one norm over all parameters) or ``layerwise``.
        clip_percentile: ``paper``: the percentile of initial per-subgraph gradient norms used as threshold.
        clip_estimate_nodes: ``paper``: at most this many training subgraphs for the percentile.
        microbatch: subgraphs per gradient chunk (memory only).
        degree_bound: ``sampler`` (Algorithm 1, ``sound: false``) or ``promise`` (a public in-degree promise, proven).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "layers": [Interval(int, 1, 4, closed="both")],
        "max_in_degree": [COUNT],
        "latent": [WIDTH],
        "encoder_layers": [COUNT],
        "decoder_layers": [COUNT],
        "act": [Options(*ACTIVATIONS)],
        "residual": [bool],
        "batch_size": [COUNT, None],
        "steps": [COUNT, None],
        "lr": [POSITIVE],
        "optimizer": [Options("adam", "sgd")],
        "clip_norm": [POSITIVE],
        "clipping": [Options("flat", "layerwise")],
        "clip_percentile": [Interval(float, 0, 100, closed="right")],
        "clip_estimate_nodes": [COUNT],
        "microbatch": [COUNT],
        "degree_bound": [Options(*protocols.DEGREE_BOUNDS)],
    }

    layers: int = 1
    """message-passing layers of the DP-GCN (1 to 4)"""
    max_in_degree: int = 5
    """K: in-edges kept per node, which bounds a node's occurrences across subgraphs"""
    latent: int = 100
    """width of the latent node representation"""
    encoder_layers: int = 1
    """layers of the per-node encoder before message passing"""
    decoder_layers: int = 1
    """layers of the decoder after message passing"""
    act: str = "tanh"
    """activation between layers"""
    residual: bool = True
    """add each message-passing layer's input to its output"""
    batch_size: int | None = None
    """expected subgraphs per batch; None: the reference schedule of the declared training size"""
    steps: int | None = None
    """DP-SGD steps; None: the reference schedule of the declared training size"""
    lr: float = 3e-3
    """learning rate"""
    optimizer: str = "adam"
    """adam or sgd (the noisy gradient's optimiser)"""
    clip_norm: float = 1.0
    """per-subgraph gradient clipping norm C (protocol=sound)"""
    clipping: str = "flat"
    """flat: one norm over all parameters; layerwise: one norm per parameter tensor"""
    clip_percentile: float = 75.0
    """protocol=paper: the percentile of initial gradient norms each tensor is clipped to"""
    clip_estimate_nodes: int = 10_000
    """protocol=paper: training subgraphs the clipping percentile is read from"""
    microbatch: int = 2048
    """subgraphs whose per-example gradients are computed at once (memory only, not privacy)"""
    degree_bound: str = "sampler"
    """sampler (Algorithm 1, sound: false) or promise (sound only, proven)"""


def _train_mask(split: Split, num_nodes: int) -> torch.Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[split.train.long()] = True
    return mask


@register_defense
class DPGNN(Defense):
    """Node-level DP-GCN (Daigavane et al.): occurrence-bounded subgraphs + DP-SGD/DP-Adam
    with Theorem 1 accounting. See the package docstring for the neighbouring relation proven,
    the public plan, the two protocols and why inference is not private.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "dpgnn"
    unit = "node"
    family = "DP-GNN"
    relative_cost = 10.0  # its 3,000-step schedule times six trainings dominates a study
    summary = "DP-GNN (Daigavane et al.): r-layer residual GCN, bounded occurrences, DP-Adam, Theorem 1 RDP"
    hyperparameters_class = DPGNNHyperparameters
    selection_refusal = (
        "dpgnn's sampler is sound: false (removing a node with its undirected edges changes other nodes' sampled "
        "subgraphs, outside Theorem 1's occurrence bound), and select=private composes each run's proven Rényi-DP "
        "curve; its proven degree_bound=promise has no selection grid"
    )

    def check_data(self, dataset: GraphDataset, split: Split) -> None:
        """``degree_bound=promise``: a sound protocol's choice (``paper`` samples), and the training
        graph keeps the promise — both checked before any work (a cross-field rule the
        hyperparameter constraints cannot state)."""
        if self.hp.degree_bound == "promise" and self.hp.protocol == "paper":
            raise ConfigurationError("dpgnn degree_bound=promise is a sound protocol's choice; protocol=paper samples")
        if protocols.keeps_promise(self.protocol, self.hp):
            promised_edgelists(
                split.edge_index_for(dataset, "train"),
                dataset.num_nodes,
                _train_mask(split, dataset.num_nodes),
                self.hp.max_in_degree,
            )

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> DPGNNModel:
        hp, device, protocol = self.hp, self.device, self.protocol
        # Public first: the schedule and σ, before anything private is read.
        run = protocols.plan(hp, protocol, self.epsilon, delta, declared_train_size(dataset, split))
        data = dataset.data
        num_nodes = dataset.num_nodes
        train = split.train.long()
        train_mask = _train_mask(split, num_nodes)
        graph = split.edge_index_for(dataset, "train")

        if protocols.keeps_promise(protocol, hp):
            sampled = promised_edgelists(graph, num_nodes, train_mask, hp.max_in_degree)
        else:
            coins = torch.Generator().manual_seed(self.seed)
            sampled = sample_edgelists(graph, num_nodes, train_mask, hp.max_in_degree, generator=coins)
        index = build_subgraphs(sampled, train, num_nodes, hp.layers, hp.max_in_degree)

        arch = {
            "type": "dpgcn",
            "in_dim": dataset.num_features,
            "latent": hp.latent,
            "out_dim": dataset.num_classes,
            "layers": hp.layers,
            "encoder_layers": hp.encoder_layers,
            "decoder_layers": hp.decoder_layers,
            "act": hp.act,
            "residual": hp.residual,
        }
        module = build_dpgcn(arch).to(device)
        groups = clip_groups(module, protocols.clipping(protocol, hp))
        per_tensor: dict[str, float] | None = None
        thresholds: float | list[float] = hp.clip_norm
        if protocols.reads_private_thresholds(protocol):
            per_tensor = percentile_thresholds(
                module,
                index,
                data.x.to(device),
                data.y,
                hp.clip_percentile,
                hp.clip_estimate_nodes,
                torch.Generator().manual_seed(self.seed + 3),
                hp.microbatch,
            )
            thresholds = [per_tensor[g[0]] for g in groups]
        term_norm = protocols.term_norm(protocol, hp, thresholds)
        noise_std = run.noise_multiplier * term_norm

        # Sparse raw features stay sparse (the first layer runs over the stored values only); the
        # first layer's input Gram of every subgraph is fixed for the fit.
        x = sparse_features(data.x.to(device, torch.float32))
        train_dp(
            module,
            index,
            x,
            data.y,
            index.input_grams(x),
            groups,
            thresholds,
            noise_std,
            population=run.population,
            batch_size=run.batch_size,
            steps=run.steps,
            occurrences=run.occurrence_bound,
            optimizer=hp.optimizer,
            lr=hp.lr,
            microbatch=hp.microbatch,
            seed=self.seed,
            device=device,
            desc=self.name,
            noise_from=self.noise,
        )

        privacy = self._privacy(run, term_norm, delta)
        inference = inference_entry(
            private=privacy.is_private, training_graph=False, note=INFERENCE_NOTE, feature_change=READ_IN_CLEAR
        )
        card = {"inference": inference, "dpgnn": run.card()}
        model = DPGNNModel(module.eval(), arch, privacy, card)
        model.record["dpgnn"] = {
            "num_subgraphs": index.num_subgraphs,
            "empty_slots": max(0, run.population - index.num_subgraphs),
            "max_occurrences": int(index.occurrences.max()),
            "sampled_messages": int(sampled.size(1)),
            "mean_subgraph_size": float(index.sizes().float().mean()),
            "noise_std": noise_std,
            "clip_term_norm": term_norm,
            "clip_thresholds": per_tensor,
        }
        return model

    def _privacy(self, run: protocols.DPGNNPlan, term_norm: float, delta: float) -> PrivacySpec:
        if not self.private:
            return PrivacySpec.non_private("dpgnn at ε = ∞: the same sampling, clipping and training without noise")
        notes, unaccounted = protocols.privacy_text(self.protocol, self.hp, run)
        notes.insert(0, f"δ = {delta:g} ({'auto: below 1/#nodes' if str(self.delta_option) == 'auto' else 'given'})")
        spec = (
            PrivacyLedger()
            .step(run.mechanism(term_norm))
            .spec(delta, "node", target_epsilon=self.epsilon, notes=notes, unaccounted=unaccounted)
        )
        spec.unit_condition = protocols.unit_condition(self.protocol, self.hp)
        return spec

    @classmethod
    def replan(cls, card: dict[str, Any], privacy: Any) -> list[dict[str, Any]] | None:
        """Theorem 1's mechanism as :func:`protocols.plan` gives it for the card's
        hyperparameters, target ε, the spec's δ and declared training-set size — the same
        function ``_fit`` calls; the spec's z is kept only if it is what calibration to the
        target ε returns (otherwise the plan's own z differs from it). Under ``paper`` the
        clipping norm C is the spec's own (its thresholds came from private data), so σ = z·C
        is still tied to the target ε. ``None`` for a spec that declares no training-set size
        (written before sizes were declared).

        Args:
            card: the saved model's public card.
            privacy: its privacy spec (δ, mechanisms, declared ``num_train``).

        Returns:
            Theorem 1's mechanism record, or ``None`` without a declared training-set size.

        Raises:
            ModelFormatError: the card's hyperparameters or the spec's mechanism are malformed.
        """
        declared = (privacy.public_facts or {}).get("num_train")
        if declared is None:
            return None
        try:
            hp = cls.hyperparameters_class(**dict(card["hyperparameters"]))
            check_hyperparameter_ranges(cls.name, hp)
            term_norm = protocols.recorded_term_norm(hp.protocol, hp, privacy.mechanisms)
            claimed = float(privacy.mechanisms[0]["sigma"]) / term_norm
            target = float(card["target_epsilon"])
            run = protocols.plan(hp, hp.protocol, target, privacy.delta, int(declared), claimed_multiplier=claimed)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ModelFormatError(f"dpgnn card cannot be re-planned: {type(exc).__name__}: {exc}") from None
        return [run.mechanism(term_norm).describe()]
