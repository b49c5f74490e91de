r"""What ``protocol=paper`` and ``protocol=sound`` change in DP-GNN, side by side, in one place.

================  ================================================  ========================================
step              ``paper`` (the reference run)                     ``sound`` (default)
================  ================================================  ========================================
clipping          every parameter tensor to the                     one fixed ``clip_norm``, flat or per
                  ``clip_percentile``-th percentile of its          layer group (``clipping``), never read
                  per-subgraph gradient norms at initialisation     from data
                  (read from private gradients, unaccounted)
accounted norm    one term's norm :math:`C = (\sum_p C_p^2)^{1/2}`  :math:`C\sqrt G` for G clipping groups
noise std         z·C: depends on the private thresholds            z·``clip_norm``: public
edgelists         Algorithm 1's sampler (undirected node removal    the sampler (default, same caveat), or
                  not covered: ``sound: false``)                    ``degree_bound=promise``: no sampling,
                                                                    every node read by ≤ K training nodes
                                                                    checked and refused otherwise —
                                                                    bounded-degree node-level DP,
                                                                    ``sound: true``
================  ================================================  ========================================

Shared by both: the plan (:func:`plan`: population N = the declared training-set size n̂,
batch m, steps T, noise multiplier z — all fixed before the private graph is read, and
re-derived from a saved card on load), the sampler, the model, the accountant (Theorem 1) and
the unaccounted undirected node removal of the sampler, which makes both ``sound: false``;
``protocol=sound`` with ``degree_bound=promise`` replaces the sampler by a checked promise
(:func:`~defenses.dpgnn.mechanism.promised_edgelists`) and is proven for the node unit over graphs
that keep it. The functions below are the only places the code asks which protocol it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from defenses.dpgnn.mechanism import (  # noqa: F401  (unit_condition re-exported)
    dpgnn_mechanism,
    occurrence_bound,
    reference_schedule,
    unit_condition,
)
from defenses.dpgnn.model import INFERENCE_NOTE, DPGCNNet, clip_groups
from dpaudit.accounting import SensitivityMixtureGaussian, calibrate_noise
from dpaudit.accounting.calibrate import epsilon_for_sigma
from dpaudit.release import require_declared

if TYPE_CHECKING:
    from defenses.dpgnn import DPGNNHyperparameters

CLIPPING_STEP = (
    "clipping thresholds read from private data: each parameter tensor is clipped to the {p:g}th percentile of "
    "its per-subgraph gradient norms at initialisation over at most {n} training subgraphs (the reference's rule)"
)
UNDIRECTED_STEP = (
    "undirected node removal is not covered: Theorem 1 (via Lemma 2) is proven for the directed relation of "
    "Remark 2 — a node's features, label and incoming edgelist (who reads it) — under which at most "
    "N(K, r) = {bound} training subgraphs change. Removing a node together with all its undirected edges also "
    "removes it from the incoming edgelists of the nodes it reads, which changes Algorithm 1's keep probability "
    "K/(2|RE_w|) and its drop rule at each of them, and so subgraphs it never occurs in: the number of changed "
    "subgraphs is unbounded in the worst case (tests/defenses/dpgnn/test_dpgnn.py measures it on Cora), so the spent ε is a "
    "proven bound for the directed relation only"
)


#: how the edgelists are bounded: Algorithm 1's sampler (both protocols; the undirected removal is
#: not covered) or the checked promise (``sound`` only; bounded-degree node-level DP)
DEGREE_BOUNDS = ("sampler", "promise")


def keeps_promise(protocol: str, hp: DPGNNHyperparameters) -> bool:
    """``sound`` with ``degree_bound=promise``: no sampling, the promise checked on the graph.

    Args:
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters (``degree_bound``).

    Returns:
        Whether the run uses the checked degree promise.
    """
    return protocol == "sound" and hp.degree_bound == "promise"


# --------------------------------------------------------------------------- the plan

#: :func:`~dpaudit.accounting.calibrate_noise`'s search settings, shared by the fit and the check
#: of a saved multiplier (:func:`plan` with ``claimed_multiplier``)
SIGMA_MIN = 1e-3
CALIBRATION_TOLERANCE = 1e-3


@dataclass(frozen=True)
class DPGNNPlan:
    """A run's schedule and noise, from public hyperparameters and declared facts only.

    Attributes:
        population: N, Theorem 1's number of subgraph slots: the declared training-set size n̂.
        batch_size: m ≤ N, slots drawn per step (also the public divisor of the noisy sum).
        steps: T.
        max_in_degree, layers: K and r (Lemma 1's N(K, r)).
        accounted_groups: G, one term's norm is C√G (1 for flat or per-tensor clipping).
        noise_multiplier: z (noise std z·C); 0 for a non-private run.
    """

    population: int
    batch_size: int
    steps: int
    max_in_degree: int
    layers: int
    accounted_groups: int
    noise_multiplier: float

    @property
    def occurrence_bound(self) -> int:
        return occurrence_bound(self.max_in_degree, self.layers)

    def mechanism(self, term_norm: float) -> SensitivityMixtureGaussian:
        """Theorem 1 for this plan with per-group clipping norm ``term_norm`` (noise std z·C).

        Args:
            term_norm: C, the per-group clipping norm.

        Returns:
            Theorem 1's mixture mechanism over the plan's T steps.
        """
        return dpgnn_mechanism(
            self.noise_multiplier * term_norm,
            term_norm,
            self.population,
            self.batch_size,
            self.max_in_degree,
            self.layers,
            self.steps,
            self.accounted_groups,
        )

    def card(self) -> dict[str, Any]:
        """The public ``card["dpgnn"]``: every value is a function of the hyperparameters, the
        target (ε, δ) and the declared training-set size."""
        return {
            "declared_train_size": self.population,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "occurrence_bound": self.occurrence_bound,
            "accounted_clip_groups": self.accounted_groups,
            "noise_multiplier": self.noise_multiplier,
        }


def plan(
    hp: DPGNNHyperparameters,
    protocol: str,
    epsilon: float,
    delta: float,
    declared_train_size: int | None,
    claimed_multiplier: float | None = None,
) -> DPGNNPlan:
    """The plan of a run (``_fit``) or of a saved card (``replan``): N = n̂, m and T from the
    hyperparameters or :func:`~defenses.dpgnn.mechanism.reference_schedule` of n̂, z calibrated
    so that T steps of Theorem 1 spend ≤ ε at δ (z = 0 for ε = ∞).

    ``claimed_multiplier`` (a saved model's z) is kept when it meets the calibration's contract
    — it spends ≤ ε and one tolerance step less noise would not (:func:`_is_calibrated`), two
    ε evaluations instead of the search's dozen; otherwise z is searched afresh, so a claimed z
    the target ε does not give comes back different.

    Args:
        hp: the hyperparameters.
        protocol: ``sound`` or ``paper``.
        epsilon: target ε (``inf``: z = 0).
        delta: δ.
        declared_train_size: n̂, or ``None`` (refused).
        claimed_multiplier: a saved model's z, or ``None``.

    Returns:
        The plan.

    Raises:
        DPAuditError: the dataset declares no training-set size (before any work).
    """
    population = require_declared(
        declared_train_size,
        "dpgnn (Theorem 1's population and the batch schedule)",
        "train dpgnn on a registry benchmark or csbm, which declare their split sizes",
    )
    rule_batch, rule_steps = reference_schedule(population)
    batch_size = min(hp.batch_size if hp.batch_size is not None else rule_batch, population)
    steps = hp.steps if hp.steps is not None else rule_steps
    fixed = dict(
        population=population,
        batch_size=batch_size,
        steps=steps,
        max_in_degree=hp.max_in_degree,
        layers=hp.layers,
        accounted_groups=accounted_group_count(protocol, hp),
    )
    multiplier = 0.0
    if math.isfinite(epsilon):

        def family(z: float) -> SensitivityMixtureGaussian:
            return DPGNNPlan(**fixed, noise_multiplier=z).mechanism(1.0)

        if claimed_multiplier is not None and _is_calibrated(claimed_multiplier, epsilon, delta, family):
            multiplier = claimed_multiplier
        else:
            multiplier = calibrate_noise(epsilon, delta, family, sigma_min=SIGMA_MIN, rel_tol=CALIBRATION_TOLERANCE)
    return DPGNNPlan(**fixed, noise_multiplier=multiplier)


def _is_calibrated(multiplier: float, epsilon: float, delta: float, family) -> bool:
    """Whether :func:`~dpaudit.accounting.calibrate_noise` can return ``multiplier`` for this
    target: ε(z) ≤ target, and ε(z / (1 + tolerance)) > target unless z is at the search's
    floor (its final bracket [lo, z] has z/lo ≤ 1 + tolerance and ε(lo) > target)."""
    if not (multiplier > 0 and math.isfinite(multiplier)):
        return False
    if epsilon_for_sigma(family, multiplier, delta) > epsilon:
        return False
    return (
        multiplier <= SIGMA_MIN or epsilon_for_sigma(family, multiplier / (1 + CALIBRATION_TOLERANCE), delta) > epsilon
    )


# --------------------------------------------------------------------------- what the protocols change


def reads_private_thresholds(protocol: str) -> bool:
    """``paper`` clips at percentiles of private gradient norms; ``sound`` at ``clip_norm``.

    Args:
        protocol: ``sound`` or ``paper``.

    Returns:
        ``True`` under ``paper``.
    """
    return protocol == "paper"


def clipping(protocol: str, hp: DPGNNHyperparameters) -> str:
    """The clipping groups (:func:`~defenses.dpgnn.model.clip_groups`): one per parameter
    tensor under ``paper``, ``hp.clipping`` (flat or layerwise) under ``sound``.

    Args:
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters (``clipping``).

    Returns:
        ``per-tensor``, ``flat`` or ``layerwise``.
    """
    return "per-tensor" if protocol == "paper" else hp.clipping


def accounted_group_count(protocol: str, hp: DPGNNHyperparameters) -> int:
    """G of one term's norm bound C√G. ``paper`` folds its per-tensor thresholds into one
    norm C = (Σ_p C_p²)^½ (G = 1); ``sound`` counts its groups on the architecture (built on
    PyTorch's meta device: no memory, no random numbers drawn).

    Args:
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters (architecture sizes and ``clipping``).

    Returns:
        G.
    """
    if protocol == "paper":
        return 1
    with torch.device("meta"):
        module = DPGCNNet(
            1, hp.latent, 1, layers=hp.layers, encoder_layers=hp.encoder_layers, decoder_layers=hp.decoder_layers
        )
    return len(clip_groups(module, hp.clipping))


def term_norm(protocol: str, hp: DPGNNHyperparameters, thresholds: float | list[float]) -> float:
    """C: the per-group clipping norm the accountant and the noise use — (Σ_p C_p²)^½ of the
    private per-tensor thresholds (``paper``) or ``clip_norm`` (``sound``).

    Args:
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters (``clip_norm``).
        thresholds: ``paper``'s per-tensor thresholds (ignored under ``sound``).

    Returns:
        C.
    """
    if protocol == "paper":
        return math.sqrt(sum(c * c for c in thresholds))
    return hp.clip_norm


def recorded_term_norm(protocol: str, hp: DPGNNHyperparameters, mechanisms: list[dict]) -> float:
    """C for re-planning a saved model: ``clip_norm`` (``sound``), or, under ``paper``, the norm
    the spec records (its thresholds were read from private data, so no card can re-derive
    them; σ = z·C is still checked against the card's target ε).

    Args:
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters (``clip_norm``).
        mechanisms: the spec's mechanism records (the first is Theorem 1's, sensitivity 2C).

    Returns:
        C.
    """
    if protocol == "paper":
        return float(mechanisms[0]["sensitivity_per_term"]) / 2.0
    return hp.clip_norm


def privacy_text(protocol: str, hp: DPGNNHyperparameters, run: DPGNNPlan) -> tuple[list[str], list[str]]:
    """(notes, unaccounted steps) of a private run's spec, from the plan alone (no measured value).

    Args:
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters.
        run: the run's plan.

    Returns:
        ``(notes, unaccounted)``: the spec's notes and its unaccounted steps (empty for a sound promise run).
    """
    bound = run.occurrence_bound
    if keeps_promise(protocol, hp):
        relation = [
            "the ε is proven for node-level DP (a node with its features, label and all its undirected edges) over "
            f"graphs where every node is read by at most K = {hp.max_in_degree} training nodes: the promise is "
            "checked and a graph above it refused, nothing is sampled, so removing or adding a node changes only the "
            "subgraphs it occurs in (defenses.dpgnn.mechanism.promised_edgelists)",
            f"each node occurs in <= N(K={hp.max_in_degree}, r={hp.layers}) = {bound} training subgraphs (Lemma 1, "
            "checked on the graph)",
        ]
    else:
        relation = [
            "the ε is proven for the node-level adjacency of Remark 2: a node's features, label and incoming "
            "edgelist (who reads it) on the graph treated as directed",
            f"each node occurs in <= N(K={hp.max_in_degree}, r={hp.layers}) = {bound} training subgraphs (Lemma 1, "
            "checked on the sampled graph)",
        ]
    notes = [
        *relation,
        f"schedule: {run.batch_size} of N = {run.population} subgraph slots per step without replacement, "
        f"{run.steps} steps, the noisy sum divided by {run.batch_size}; N is the declared training-set size, "
        "never the real one: slots beyond the real training set are empty, and a larger training set is "
        "sampled from its own size, which Theorem 1 with N bounds too (defenses.dpgnn.mechanism)",
    ]
    unaccounted = []
    if reads_private_thresholds(protocol):
        notes.append("per-tensor clipping; one term's norm is C = sqrt(sum of the squared thresholds)")
        unaccounted.append(CLIPPING_STEP.format(p=hp.clip_percentile, n=hp.clip_estimate_nodes))
    else:
        notes.append(f"{hp.clipping} clipping at C = {hp.clip_norm:g} per group ({run.accounted_groups} group(s))")
    if not keeps_promise(protocol, hp):
        unaccounted.append(UNDIRECTED_STEP.format(bound=bound))
    notes.append(INFERENCE_NOTE)
    return notes, unaccounted
