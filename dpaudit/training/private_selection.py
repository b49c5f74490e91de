r"""Accounted hyperparameter selection: ``--set select=private`` on a private defense.

The random-stopping selection of Papernot & Steinke (ICLR 2022, Theorem 2;
:mod:`dpaudit.accounting.selection`): draw K from a truncated negative binomial law, make K
independent runs — each draws a candidate uniformly from the defense's public grid
(the defense's :attr:`~dpaudit.training.defense.Defense.selection_grid`), trains it at a per-run target ε_run and scores it — and release only the
best-scoring run. The selection's RDP follows from one run's; ε_run is the largest value (to
0.5 %) whose selection spends ε ≤ the target at the target δ, found before any data is read.
Theorem 2 needs each run's Rényi-DP curve, so a run must be a ``sound`` run whose whole
guarantee is a composition of mechanisms with RDP curves.

A run's score must itself be private for the unit (the defense's :attr:`~dpaudit.training.defense.Defense.selection_score`, each with its own count of
correct validation predictions):

* **edge level** (``gap-edp``): node features and labels are not protected, and a validation
  node's prediction reads only the run's release — the PMA aggregates of the training graph
  (its row) and the trained modules — and its own features. Validation accuracy is then
  post-processing of the run and costs nothing. The validation nodes must be answered from the
  training release: a transductive split (an inductive validation graph would be a new,
  unaccounted release).
* **node level** (``mlp-dp``, ``gap-ndp``, ``dpar-em0``, ``dpar-em1``, ``dpar-gm``): validation
  features and labels are private. The score is the number of correct validation predictions
  plus Gaussian noise of std ``select_score_noise``. Given the run's released output, node v's
  prediction depends only on that output and v's own data (mlp-dp: its features; gap-ndp: its
  features and its row of the accounted PMA release; DPAR: its features alone, below), so adding
  or removing one node changes the count by at most 1: a Gaussian mechanism of sensitivity 1,
  composed into each run's RDP. gap-ndp needs a transductive split for the same reason as
  gap-edp.
* **DPAR** (``sound``): its released prediction (Eq. 4) propagates f_θ over the query graph, so
  one node's features reach every validation node within P hops and a count of those
  predictions has unbounded node sensitivity. The score counts the **features-only**
  predictions argmax f_θ(x_v) instead (:func:`features_only_count`: no propagation, no edge and
  no other node read), which has sensitivity 1 as above and needs no training release (any
  split with validation nodes). A run's guarantee is DP-APPR + the mixture DP-SGD, amplified by
  Poisson node sampling q′; only q′ = 1 (the ``sound`` default) is accepted, where the
  amplification is the identity and the run is exactly its inner ledger's RDP curve (for
  q′ < 1 the amplification is proven for (ε, δ) only, Balle et al. 2018, Thm 8).

Refused, with the reason (the defense's :attr:`~dpaudit.training.defense.Defense.selection_refusal`):

* ``dpgnn``: its sampler (the default of both protocols) is ``sound: false`` (removing a node
  with its undirected edges changes other nodes' sampled subgraphs, outside Theorem 1's
  occurrence bound; :mod:`defenses.dpgnn`), so its runs carry no proven curve; its proven
  ``degree_bound=promise`` is bounded-degree node DP, which needs K at least the graph's largest
  training-reader count — no grid is offered for it.
* ``gcon``: its guarantee is Theorem 1 of Wei et al. (objective perturbation), proven as
  (ε, δ)-edge-DP only. An (ε, δ) statement with δ > 0 bounds no Rényi divergence of order > 1
  (the δ mass may sit where the neighbour has none), so Theorem 2 has no run curve to start
  from. The score is not the obstacle: at edge level a features-only validation count (Θ and
  the encoder applied to each node's own features) would be post-processing. Liu & Talwar's
  (STOC 2019) random stopping also covers (ε, δ) runs, but only with a cap on the number of
  runs and an additive δ that grows with that cap and with 1/γ; it is not implemented here.

Each run also draws a uniform tie-break, so the order "score, then tie-break" is total
(Theorem 2 releases the maximum of a totally ordered output).

What is public (the card's ``selection`` section and the spec's
:class:`~dpaudit.accounting.PrivateSelection` record): the grid, the law (η, γ, E[K]), the
score's definition and noise, ε_run and the chosen candidate — the selection's output. The
number of runs K, every score and the losing runs are not covered by Theorem 2 (it releases
the best run only) and stay in the owner's record (``provenance.json``, ``selection``).
Defenses without a proven private score are refused before any work.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dpaudit.accounting import GaussianMechanism, Mechanism, PrivacyLedger, PrivateSelection
from dpaudit.accounting.mechanisms import NODE_SAMPLING_AMPLIFICATION
from dpaudit.accounting.selection import draw_runs, expected_runs, gamma_for_expected_runs
from dpaudit.accounting.spec import within_target
from dpaudit.accounting.verify import refuse as integrity_error
from dpaudit.errors import ConfigurationError, PrivacyParameterError
from dpaudit.release import declared_train_size
from dpaudit.release.model import ReleasedModel, answering, compare_records

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from dpaudit.data.datasets import GraphDataset
    from dpaudit.data.splits import Split
    from dpaudit.training.defense import Defense

log = logging.getLogger(__name__)

SELECT_CHOICES = ("none", "private")


def _answered_count(model: ReleasedModel, dataset: GraphDataset, split: Split, from_training_release: bool) -> int:
    """The number of validation nodes the run predicts correctly, answered from its training
    release where the model charges queries (never a new release)."""
    graph = split.graph_for(dataset, "val")
    asked = model.query_session() if callable(getattr(model, "query_session", None)) else model
    answerer = answering(asked, graph)
    if from_training_release and answerer is asked:
        raise AssertionError("a selection score would have made a new release")  # guarded by check_split
    accuracy = answerer.accuracy(graph, split.val)
    return int(round(accuracy * len(split.val)))


@torch.no_grad()
def features_only_count(model: ReleasedModel, graph: Data, nodes) -> int:
    """How many of ``nodes`` a DPAR model's f_θ classifies correctly from their own features,
    argmax f_θ(x_v), without Eq. 4's propagation: node v's term reads θ and row v of the
    features and labels only, so adding or removing any node (with its edges) changes the count
    by at most 1 (its own term, if it is one of ``nodes``). Only the asked rows are read.

    Args:
        model: a DPAR model (its ``module`` is f_θ).
        graph: the graph holding the nodes' features ``x`` and labels ``y``.
        nodes: node ids to score.

    Returns:
        Number of correct features-only predictions.
    """
    index = torch.as_tensor(nodes, dtype=torch.long).view(-1)
    rows = graph.x.index_select(0, index)
    rows = rows.to_dense() if rows.is_sparse else rows
    module = model.module
    was_training = module.training
    module.eval()  # dropout off: the score is a deterministic function of θ and the node's row
    try:
        logits = module(rows.to(model.device, torch.float32))
    finally:
        module.train(was_training)
    return int((logits.argmax(dim=1).cpu() == graph.y[index].cpu()).sum())


def _features_only_validation_count(model: ReleasedModel, dataset: GraphDataset, split: Split) -> int:
    return features_only_count(model, dataset.data, split.val)


@dataclass(frozen=True)
class Score:
    """How a run is scored: ``noisy`` (node level: Gaussian noise on the correct count) or
    free (edge level: post-processing), whether validation nodes must be answered from the
    training release (transductive split), why the count is private for the unit, and the
    count — ``count(model, dataset, split)``, correct validation predictions, when not the model's own answers.

    Attributes:
        noisy: Gaussian noise is added to the count (node level).
        needs_training_release: validation nodes must be answered from the training release.
        reason: why the count is private for the unit (shown on the card's notes).
        count: custom counting function, or ``None`` for the model's own answers.
        label: how the score is named on the card.
    """

    noisy: bool
    needs_training_release: bool
    reason: str
    count: Callable[[ReleasedModel, GraphDataset, Split], int] | None = None
    label: str = "noisy validation count"

    def correct(self, model: ReleasedModel, dataset: GraphDataset, split: Split) -> int:
        """The run's correct validation predictions: ``count``, else the model's own answers
        (from the training release where ``needs_training_release``).

        Args:
            model: the run's released model.
            dataset: the dataset trained on.
            split: the split whose ``val`` nodes are scored.

        Returns:
            Number of correct validation predictions.
        """
        if self.count is not None:
            return self.count(model, dataset, split)
        return _answered_count(model, dataset, split, self.needs_training_release)


#: The score of a DPAR run (node level): the features-only count, since a prediction through Eq. 4
#: reads the neighbours and has unbounded node sensitivity.
FEATURES_ONLY_SCORE = Score(
    noisy=True,
    needs_training_release=False,
    reason="the score counts features-only predictions argmax f_θ(x_v), without Eq. 4's propagation: a validation "
    "node's term reads only the released f_θ and the node's own features",
    count=_features_only_validation_count,
    label="noisy validation count of features-only predictions f_θ(x_v)",
)


def score_of(defense) -> Score:
    """The run score ``defense`` (an instance or its class) declares (``selection_score``).

    Args:
        defense: a defense instance or class.

    Returns:
        Its :class:`Score`.

    Raises:
        ConfigurationError: the defense declares none.
    """
    score = getattr(defense, "selection_score", None)
    if not isinstance(score, Score):
        raise ConfigurationError(f"{defense.name}: no run score proven private for select=private")
    return score


def grid_of(defense) -> tuple[dict[str, Any], ...]:
    """The public candidate grid ``defense`` (an instance or its class) declares (``selection_grid``).

    Args:
        defense: a defense instance or class.

    Returns:
        The candidates (hyperparameter overrides), empty when none is declared.
    """
    return tuple(getattr(defense, "selection_grid", ()) or ())


#: Relative precision of the per-run ε search (the answer always satisfies spent ≤ target).
RUN_EPSILON_TOLERANCE = 0.005


def check_selection_request(defense: Defense) -> None:
    """Refuse a ``select`` setting that cannot run, before any work: an unknown choice, a
    defense without a proven private score or refused for a stated reason (``selection_refusal``),
    ε = ∞, ``protocol=paper``, node sampling below 1 (no RDP curve), or a law that cannot be
    drawn.

    Args:
        defense: the configured defense.

    Raises:
        ConfigurationError: the request cannot run (any of the reasons above).
    """
    hp = defense.hp
    if hp.select not in SELECT_CHOICES:
        raise ConfigurationError(f"{defense.name}: select must be one of {SELECT_CHOICES}, got {hp.select!r}")
    if hp.select != "private":
        return
    if defense.selection_refusal:
        raise ConfigurationError(f"{defense.name}: select=private is refused: {defense.selection_refusal}")
    if defense.selection_score is None or not grid_of(defense):
        raise ConfigurationError(
            f"{defense.name}: select=private needs a run score proven private for its unit and a public grid, and "
            f"{defense.name} declares none (supported: mlp-dp, gap-edp, gap-ndp, dpar-em0, dpar-em1, dpar-gm)"
        )
    if not defense.private:
        raise ConfigurationError(f"{defense.name}: select=private selects under a finite ε; this run has ε = ∞")
    if defense.paper_protocol:
        raise ConfigurationError(
            f"{defense.name}: select=private accounts every run; protocol=paper is not a private run (use sound)"
        )
    if getattr(hp, "node_sample_rate", 1.0) != 1.0:
        raise ConfigurationError(
            f"{defense.name}: select=private composes each run's Rényi-DP curve; node sampling at q′ = "
            f"{hp.node_sample_rate:g} < 1 is amplified for (ε, δ) only (Balle et al. 2018, Thm 8): use node_sample_rate=1"
        )
    if not hp.select_runs > 1:
        raise ConfigurationError(f"{defense.name}: select_runs (the expected number of runs) must be > 1")
    if score_of(defense).noisy and not hp.select_score_noise > 0:
        raise ConfigurationError(f"{defense.name}: select_score_noise must be > 0 (node-level scores are private)")


def law(hp) -> tuple[float, float]:
    """(η, γ) of the truncated negative binomial from ``select_eta`` and ``select_runs``.

    Args:
        hp: the defense's hyperparameters (``select_eta``, ``select_runs``).

    Returns:
        ``(eta, gamma)``.
    """
    eta = float(hp.select_eta)
    return eta, gamma_for_expected_runs(eta, float(hp.select_runs))


# ----------------------------------------------------------------------------------- the plan
def candidate(defense: Defense, overrides: dict[str, Any], run_epsilon: float, seed: int | None = None) -> Defense:
    """The defense of one candidate: the same class and hyperparameters with ``overrides``,
    selection off, at ε_run.

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).
        overrides: the candidate's hyperparameter values.
        run_epsilon: ε_run, the per-run target.
        seed: the run's seed (``None`` keeps the defense's).

    Returns:
        A new defense instance.
    """
    hp = {**dataclasses.asdict(defense.hp), **overrides, "select": "none"}
    run = type(defense)(
        epsilon=run_epsilon,
        delta=defense.delta_option,
        seed=defense.seed if seed is None else seed,
        device=defense.device,
        noise=defense.noise.mode,
        **hp,
    )
    adopt = getattr(run, "adopt_declared_facts", None)
    if adopt is not None:  # a plan that reads declared facts (projected gap-ndp: the declared node count)
        adopt(getattr(defense, "declared_facts_read", {}))
    return run


def run_mechanisms(defense: Defense, num_features: int, declared_train: int | None, delta: float) -> list[Mechanism]:
    """What one training run of ``defense`` (at its ε) spends, from public inputs alone, through
    the defense's own plan (:meth:`~dpaudit.training.defense.Defense.selection_run_mechanisms`: the same
    calls its ``fit`` makes).

    Args:
        defense: the candidate defense (at ε_run).
        num_features: number of node features (public, from the dataset).
        declared_train: declared number of training nodes, or ``None``.
        delta: the target δ.

    Returns:
        The mechanisms one run spends.
    """
    return list(defense.selection_run_mechanisms(num_features, declared_train, delta))


def accounted_records(records: list[dict]) -> list[dict]:
    """A run's spec records whose composition is its guarantee: a sound DPAR run's ledger ends
    with its amplification by Poisson node sampling, which at q′ = 1 is the identity
    (ln(1 + 1·(e^ε − 1)) = ε, δ/1 = δ) and is dropped; the rest compose in RDP.

    Raises:
        ConfigurationError: an amplification at q′ < 1 (no RDP curve; refused at construction).

    Args:
        records: the mechanism records of a run's spec.

    Returns:
        The records that compose in RDP.
    """
    if records and records[-1].get("mechanism") == NODE_SAMPLING_AMPLIFICATION:
        if float(records[-1].get("sample_rate", math.nan)) != 1.0:
            raise ConfigurationError("a run amplified by node sampling at q′ < 1 has no Rényi-DP curve to select with")
        return list(records[:-1])
    return list(records)


def score_mechanism(defense: Defense) -> GaussianMechanism | None:
    """The noisy validation count of a node-level run (sensitivity 1), or ``None`` when the
    score is post-processing.

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).

    Returns:
        The :class:`~dpaudit.accounting.GaussianMechanism` of the score, or ``None``.
    """
    if not score_of(defense).noisy:
        return None
    return GaussianMechanism(float(defense.hp.select_score_noise), 1.0, 1, name="noisy validation count (selection)")


def selection_for(
    defense: Defense, run_epsilon: float, num_features: int, declared_train: int | None, delta: float
) -> PrivateSelection:
    """The selection mechanism of the grid at ε_run: per candidate its run plan and the score.

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).
        run_epsilon: ε_run, the per-run target.
        num_features: number of node features (public, from the dataset).
        declared_train: declared number of training nodes, or ``None``.
        delta: the target δ.

    Returns:
        The :class:`~dpaudit.accounting.PrivateSelection` to account.
    """
    eta, gamma = law(defense.hp)
    score = score_mechanism(defense)
    runs = []
    for overrides in grid_of(defense):
        planned = run_mechanisms(candidate(defense, overrides, run_epsilon), num_features, declared_train, delta)
        runs.append(tuple(planned) + ((score,) if score is not None else ()))
    return PrivateSelection(tuple(runs), eta, gamma)


def training_records(selection: PrivateSelection, index: int, score: Score) -> list[dict]:
    """The records of candidate ``index``'s training (its run without the score).

    Args:
        selection: the selection mechanism.
        index: index of the candidate in the grid.
        score: the run score (a noisy one is the run's last mechanism).

    Returns:
        The candidate's training mechanism records.
    """
    run = selection.candidates[index]
    return [m.describe() for m in (run[:-1] if score.noisy else run)]


def selection_epsilon(selection: PrivateSelection, delta: float) -> float:
    """ε the selection spends at ``delta`` (ledger of the one selection mechanism).

    Args:
        selection: the selection mechanism.
        delta: target δ.

    Returns:
        ε.
    """
    return PrivacyLedger().step(selection).get_epsilon(delta)


def plan_run_epsilon(defense: Defense, num_features: int, declared_train: int | None, delta: float) -> float:
    """The largest ε_run (to :data:`RUN_EPSILON_TOLERANCE`) whose selection spends ≤ the target.

    The selection's ε grows with ε_run, nearly linearly in (ln ε_run, ln ε): a bracket
    [lo, hi] with ε(lo) ≤ target < ε(hi) (halving from the target) is shrunk by false-position
    steps in that plane, each followed by a probe one tolerance step inside the bracket, as
    :func:`~dpaudit.accounting.calibrate_noise` does for σ. Only values that passed are returned.

    Raises:
        PrivacyParameterError: the target cannot be met even at ε_run = target/64 (the law's own
            overhead, ln E[K] and (1+η)ln(1/γ), already spends it).

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).
        num_features: number of node features (public, from the dataset).
        declared_train: declared number of training nodes, or ``None``.
        delta: the target δ.

    Returns:
        ε_run.
    """
    target = defense.epsilon
    cache: dict[float, float] = {}

    def spends(run_epsilon: float) -> float:
        if run_epsilon not in cache:
            plan = selection_for(defense, run_epsilon, num_features, declared_train, delta)
            cache[run_epsilon] = selection_epsilon(plan, delta)
        return cache[run_epsilon]

    def refuse() -> PrivacyParameterError:
        return PrivacyParameterError(
            f"{defense.name}: private selection with E[K] = {defense.hp.select_runs:g} runs (η = "
            f"{defense.hp.select_eta:g}) cannot meet ε = {target:g} at δ = {delta:g}: the selection's own overhead "
            "spends it; use a larger ε or a smaller select_runs"
        )

    hi = target
    if spends(hi) <= target:
        return hi
    lo = target / 2.0
    try:
        while spends(lo) > target:
            hi, lo = lo, lo / 2.0
            if lo < target / 64.0:
                raise refuse()
    except PrivacyParameterError as exc:  # a per-run ε too small for a defense to calibrate
        raise refuse() from exc
    log_tol = math.log1p(RUN_EPSILON_TOLERANCE)
    log_target = math.log(target)
    while math.log(hi / lo) > log_tol:
        a, b = math.log(lo), math.log(hi)
        fa, fb = math.log(max(spends(lo), 1e-300)) - log_target, math.log(spends(hi)) - log_target
        x = a + (b - a) * fa / (fa - fb) if fb > fa else (a + b) / 2
        x = min(max(x, a + 0.02 * (b - a)), b - 0.02 * (b - a))
        if spends(math.exp(x)) <= target:
            lo = math.exp(x)
            probe = math.exp(x + 0.9 * log_tol)
        else:
            hi = math.exp(x)
            probe = math.exp(x - 0.9 * log_tol)
        if lo < probe < hi:
            if spends(probe) <= target:
                lo = probe
            else:
                hi = probe
    return lo


# ----------------------------------------------------------------------------------- the runs
def check_split(defense: Defense, split: Split) -> None:
    """Scoring needs validation nodes, answered from the training release where required.

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).
        split: the split to be used.

    Raises:
        ConfigurationError: the split is inductive where the score needs the training release, or has no validation
            nodes.
    """
    if score_of(defense).needs_training_release and split.inductive:
        raise ConfigurationError(
            f"{defense.name}: select=private scores on validation nodes answered from the training release; an "
            "inductive split's validation graph would be a new, unaccounted release (use a transductive split)"
        )
    if len(split.val) == 0:
        raise ConfigurationError(
            f"{defense.name}: select=private scores runs on validation nodes; the split has none (give it a "
            "validation share, e.g. random:0.6,0.2,0.2 or inductive:0.7,0.2,0.1)"
        )


def select_privately(defense: Defense, dataset: GraphDataset, split: Split, delta: float) -> ReleasedModel:
    """Run the selection and return the best run's model, its spec the selection's.

    The card gains ``selection`` (public) and the record ``selection`` (K, the scores, the
    runs' candidates and seeds: the owner's). Every run's spent mechanisms are checked against
    the plan the selection was accounted with.

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).
        dataset: the dataset to train on.
        split: the split (validation nodes score the runs).
        delta: target δ.

    Returns:
        The chosen run's released model, carrying the selection's privacy spec.

    Raises:
        ConfigurationError: the split cannot be scored on.
        PrivacyParameterError: the target ε cannot be met (see :func:`plan_run_epsilon`).
    """

    check_split(defense, split)
    declared_train = declared_train_size(dataset, split)
    run_epsilon = plan_run_epsilon(defense, dataset.num_features, declared_train, delta)
    selection = selection_for(defense, run_epsilon, dataset.num_features, declared_train, delta)
    spent = selection_epsilon(selection, delta)
    if not within_target(spent, defense.epsilon):
        raise AssertionError(f"private selection spends ε = {spent} > target {defense.epsilon}")
    eta, gamma = law(defense.hp)
    grid = grid_of(defense)
    score_spec = score_of(defense)
    # K, the candidates, the runs' seeds and the score noise: the selection's private randomness
    rng = defense.noise.numpy([defense.seed, 0x5E1EC7])
    runs = draw_runs(eta, gamma, rng)
    log.info(
        "%s: private selection, ε_run = %.4g (selection ε = %.4g ≤ %g), %d candidate(s)",
        defense.name,
        run_epsilon,
        spent,
        defense.epsilon,
        len(grid),
    )
    best: tuple | None = None
    history = []
    for run in range(runs):
        index = int(rng.integers(len(grid)))
        seed = int(rng.integers(2**31 - 1))
        member = candidate(defense, grid[index], run_epsilon, seed=seed)
        model = member.fit(dataset, split)
        spent_records = accounted_records(model.privacy.mechanisms)
        mismatch = compare_records(spent_records, training_records(selection, index, score_spec))
        if mismatch:
            raise AssertionError(f"{defense.name}: run {run + 1} spent what its plan does not say: {mismatch}")
        correct = score_spec.correct(model, dataset, split)
        score = correct + (float(rng.normal(0.0, defense.hp.select_score_noise)) if score_spec.noisy else 0.0)
        key = (score, float(rng.random()))
        history.append({"candidate": index, "seed": seed, "score": score})
        log.info("%s: selection run %d of %d: candidate %d", defense.name, run + 1, runs, index)
        if best is None or key > best[0]:
            best = (key, index, run, model)
    assert best is not None
    _, index, run, model = best
    return _as_selected(model, defense, selection, run_epsilon, delta, index, run, history)


def _as_selected(model, defense, selection, run_epsilon, delta, index, run, history):
    """The best run's model carrying the selection's spec, card section and owner's record."""
    score_spec = score_of(defense)
    notes = [
        f"δ = {delta:g} ({'auto' if str(defense.delta_option) == 'auto' else 'given'})",
        f"private hyperparameter selection (Papernot & Steinke 2022, Theorem 2): the best of K runs, K drawn from "
        f"the truncated negative binomial law with η = {selection.eta:g}, γ = {selection.gamma:.4g} "
        f"(E[K] = {selection.expected_runs:.3g}); each run draws one of {len(selection.candidates)} public "
        f"candidates (card: selection.grid) and is accounted at ε_run = {run_epsilon:.4g}",
        "run score: "
        + (
            f"{score_spec.label}: correct validation predictions + N(0, {defense.hp.select_score_noise:g}²), "
            "sensitivity 1 ("
            if score_spec.noisy
            else "validation accuracy, post-processing ("
        )
        + score_spec.reason
        + ")",
        "the number of runs, the scores and the other runs are the owner's record, not released",
    ]
    winner_spec = model.privacy
    spec = PrivacyLedger().step(selection).spec(delta, defense.unit, target_epsilon=defense.epsilon, notes=notes)
    spec.unit_condition = winner_spec.unit_condition
    spec.protocol = winner_spec.protocol
    model.privacy = spec
    cfg = getattr(model, "cfg", None)
    if isinstance(cfg, dict) and "ledger" in cfg:
        # GAP recomposes its spec from this ledger on every foreign-graph query: it must hold
        # the selection, never the run alone; and each later release is charged the worst
        # candidate's PMA (the bound must not depend on which candidate won).
        worst = query_bound(selection)
        cfg["ledger"] = [selection.describe()]
        cfg["query_mechanism"] = {
            "type": "gaussian",
            "sigma": worst.sigma,
            "sensitivity": worst.sensitivity,
            "count": worst.count,
            "name": worst.name,
        }
    model.card["selection"] = selection_card(defense, selection, run_epsilon, index)
    model.record["selection"] = {
        "number_of_runs": len(history),
        "chosen_run": run,
        "score_history": copy.deepcopy(history),
        "winner_run_spec": winner_spec.to_dict(),
    }
    return model


def query_bound(selection: PrivateSelection) -> GaussianMechanism:
    """A GAP selection's charge for one release on a query graph: the PMA of the candidate
    with the largest RDP curve (count·Δ²/σ², linear in the order), which bounds the winner's
    whichever it is — adaptive composition needs a bound fixed before the selection ran.

    Args:
        selection: a GAP selection (its candidates hold ``pma`` mechanisms).

    Returns:
        The Gaussian mechanism charged per query-graph release.
    """
    pmas = [m for run in selection.candidates for m in run if m.name.startswith("pma")]
    worst = max(pmas, key=lambda m: m.count * m.sensitivity**2 / m.sigma**2)
    return GaussianMechanism(worst.sigma, worst.sensitivity, worst.count, name="pma on a query graph")


def selection_card(defense: Defense, selection: PrivateSelection, run_epsilon: float, index: int) -> dict[str, Any]:
    """``card["selection"]``: public choices and the selection's output only.

    Args:
        defense: the private defense with ``select=private`` (its hyperparameters give the law and grid).
        selection: the accounted selection.
        run_epsilon: ε_run.
        index: index of the chosen candidate.

    Returns:
        The card section.
    """
    score_spec = score_of(defense)
    return {
        "method": "random stopping, best of K runs (Papernot & Steinke 2022, Theorem 2)",
        "law": "truncated negative binomial",
        "eta": float(selection.eta),
        "gamma": float(selection.gamma),
        "expected_runs": float(expected_runs(selection.eta, selection.gamma)),
        "grid": [dict(c) for c in grid_of(defense)],
        "chosen": dict(grid_of(defense)[index]),
        "score": score_spec.label,
        "score_noise": float(defense.hp.select_score_noise) if score_spec.noisy else None,
        "run_epsilon": float(run_epsilon),
    }


# ----------------------------------------------------------------------------------- on load
def replan_selection(cls, card: dict[str, Any], privacy, replan_run) -> list[dict[str, Any]] | None:
    """The records a selected model's card gives: the selection re-derived from its public
    inputs (grid, law, ε_run, score noise, δ, declared facts), then, through the defense's own
    ``replan_run`` on the chosen run's card, whatever the spec records after it (GAP's
    foreign-graph releases). ``None`` where the run's defense cannot re-plan.

    Raises:
        IntegrityError: the card's selection is not what its public inputs give.

    Args:
        cls: the defense class named on the card.
        card: the public card (with its ``selection`` section).
        privacy: the model's privacy spec.
        replan_run: ``replan_run(cls, run_card, run_privacy)``, the defense's re-planning of one run.

    Returns:
        Mechanism records the spec should hold, or ``None``.
    """
    section = card["selection"]
    hyperparameters = card.get("hyperparameters")
    if not isinstance(section, dict) or not isinstance(hyperparameters, dict):
        raise integrity_error("the card's selection section is unreadable")
    try:
        run_epsilon = float(section["run_epsilon"])
        chosen = dict(section["chosen"])
        num_features = int(card["dataset"]["num_features"])
    except (KeyError, TypeError, ValueError):
        raise integrity_error(f"the card's selection section is incomplete: {section!r}") from None
    grid = [dict(c) for c in grid_of(cls)]
    if section.get("grid") != grid or chosen not in grid:
        raise integrity_error("the card's selection grid or chosen candidate is not the defense's public grid")
    base = dict(hyperparameters)
    defense = cls(epsilon=card.get("target_epsilon"), delta=privacy.delta, device="cpu", **base)
    if getattr(defense, "adopt_declared_facts", None) is not None:
        defense.adopt_declared_facts(privacy.public_facts or {})
    declared_train = (privacy.public_facts or {}).get("num_train")
    if abs(plan_run_epsilon(defense, num_features, declared_train, privacy.delta) - run_epsilon) > 1e-9 * run_epsilon:
        raise integrity_error(f"the card's per-run ε {run_epsilon:g} is not what the selection's target gives")
    selection = selection_for(defense, run_epsilon, num_features, declared_train, privacy.delta)
    for key in ("eta", "gamma"):
        if not math.isclose(float(section.get(key, math.nan)), float(getattr(selection, key)), rel_tol=1e-9):
            raise integrity_error(f"the card's selection {key} is not what select_runs and select_eta give")
    index = grid.index(chosen)
    run_card = {
        **card,
        "target_epsilon": run_epsilon,
        "hyperparameters": {**base, **chosen, "select": "none"},
    }
    run_card.pop("selection")
    training = training_records(selection, index, score_of(cls))
    run_privacy = copy.deepcopy(privacy)
    run_privacy.mechanisms = training + list(privacy.mechanisms[1:])
    replanned = replan_run(cls, run_card, run_privacy)
    if replanned is None:
        return None
    replanned = accounted_records(replanned)
    mismatch = compare_records(replanned[: len(training)], training)
    if mismatch:
        raise integrity_error(f"the chosen run's plan differs from the selection's record: {mismatch}")
    queries = len(replanned) - len(training)
    return [selection.describe(), *([query_bound(selection).describe()] * queries if queries else [])]
