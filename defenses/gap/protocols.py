"""What ``protocol=paper`` and ``protocol=sound`` change in GAP, side by side, in one place.

================  =====================================  ==========================================
step              ``paper`` (the authors' run)           ``sound`` (default)
================  =====================================  ==========================================
edge sensitivity  1 per hop (Lemma 1, one direction)     √2 per hop (one undirected edge = 2 entries)
node sensitivity  √D after random out-degree sampling    ``degree_bound=projection`` (default): the
                                                         max-entropy projection to weighted degree
                                                         ≤ D, Δ = √(D² + (√D + √(2D·H_max))²) for
                                                         graphs of ≤ N̄ (declared) nodes; ``promise``:
                                                         √(D(D+1)), graphs with degree > D refused
checkpoints       best validation epoch (enc. + cls.)    edge / ∞: best validation epoch (free, see
                                                         below); node: last iterate
hops K            best validation accuracy over          edge / ∞: best validation accuracy over the
                  ``hop_grid``, each K its own PMA       prefixes k = 1..``hops`` of ONE PMA release
                  release (only the chosen one           of ``hops`` hops, accounted once for
                  accounted)                             ``hops``; node: the fixed ``hops``
degree D (node)   best validation accuracy over          the fixed ``max_degree``
                  ``degree_grid``
architecture      the reference code's                   edge: feature-only encoder (public grid on
                                                         validation) whose class probabilities PMA
                                                         releases; hop-0 skip head fitted on the
                                                         validation labels, K ∈ 0..``hops`` by
                                                         cross-validation (:func:`uses_skip_head`)
================  =====================================  ==========================================

Which data a choice may read for free, per protected unit (the ``sound`` rule):

================  ==========================================================================
unit              a choice (checkpoint, K) may read without being accounted
================  ==========================================================================
none (gap-inf)    anything: nothing is protected
edge (gap-edp)    node features and labels of every split (edge-level DP does not protect
                  them) and the released PMA output: hop k < K is a prefix of the same noisy
                  aggregates, so choosing k ≤ ``hops`` and the checkpoints is post-processing
                  of one release of ``hops`` hops. A grid over separately released mechanisms
                  (another K_max, another σ) would be a composition and is not offered.
node (gap-ndp)    nothing measured on the graph: validation features and labels are nodes'
                  private data, so K, D and the checkpoints are fixed in advance.
================  ==========================================================================

Everything else — architecture, schedules, PMA, the inference rules — is shared. The functions
below are the only places the training code asks which protocol it runs.
"""

from __future__ import annotations

from defenses.gap.mechanism import EDGE_SENSITIVITY, PAPER_EDGE_SENSITIVITY, node_sensitivity
from defenses.gap.projection import projection_sensitivity

#: how sound node-level GAP bounds degrees: ``projection`` (node-level DP for every graph of at
#: most the declared number of nodes) or ``promise`` (bounded-degree node-level DP, refusing
#: graphs above D)
DEGREE_BOUNDS = ("projection", "promise")


def aggregation_sensitivity(
    level: str,
    protocol: str,
    max_degree: int | None,
    degree_bound: str = "promise",
    universe_nodes: int | None = None,
) -> float:
    """Per-hop L2 sensitivity of :math:`A^\\top\\check X` for a level's unit under a protocol
    (over the projected graph for sound node level with ``degree_bound=projection``, which needs
    the declared number of nodes N̄).

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        max_degree: D (node level).
        degree_bound: ``promise`` or ``projection``.
        universe_nodes: N̄, the declared number of nodes (projection only).

    Returns:
        Δ: √2 (sound edge), 1 (paper edge), √(D(D+1)) (sound promise), √D (paper node) or the
        projection's bound.

    Raises:
        ValueError: the projection without ``universe_nodes``.
    """
    if level == "node":
        if projects_degrees(level, protocol, degree_bound):
            if universe_nodes is None:
                raise ValueError("the projection's sensitivity needs the declared number of nodes")
            return projection_sensitivity(int(max_degree), int(universe_nodes))
        return node_sensitivity(int(max_degree), protocol)
    return PAPER_EDGE_SENSITIVITY if protocol == "paper" else EDGE_SENSITIVITY


def search_grid(level: str, protocol: str, hp) -> tuple[list[int], list[int | None]]:
    """(hops to try, degree bounds to try): the paper's grid; under ``sound`` the prefixes
    1..``hops`` of one release at edge level and ∞ (:func:`hops_share_one_release`) and the
    single fixed choice at node level.

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        hp: the hyperparameters (``hops``, ``hop_grid``, ``max_degree``, ``degree_grid``).

    Returns:
        ``(hop_grid, degree_grid)``; the degree grid is ``[None]`` off node level.
    """
    if protocol == "paper":
        hop_grid = sorted(set(hp.hop_grid))
    elif selects_on_validation(level, protocol):
        hop_grid = list(range(1, hp.hops + 1))
    else:
        hop_grid = [hp.hops]
    degree_grid: list[int | None] = [None]
    if level == "node":
        degree_grid = sorted(set(hp.degree_grid)) if protocol == "paper" else [hp.max_degree]
    return hop_grid, degree_grid


def selects_on_validation(level: str, protocol: str) -> bool:
    """Whether checkpoints (encoder and classifier) and K are chosen on validation accuracy:
    always under ``paper`` (unaccounted at node level); under ``sound`` only where the unit
    leaves validation features and labels unprotected (edge level, ∞), as post-processing.

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.

    Returns:
        ``True`` under ``paper`` or off node level.
    """
    return protocol == "paper" or level != "node"


def hops_share_one_release(level: str, protocol: str, private: bool) -> bool:
    """Whether every K of the hop grid reads the first K hops of ONE PMA release of the grid's
    largest K (accounted once for that many): ``sound`` at edge level and ∞ (prefixes of
    ``hops``), and any noise-free run. ``paper`` makes a separate release per K, each at its own σ.

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        private: whether the run adds noise.

    Returns:
        Whether the hop grid shares one release.
    """
    return level != "node" and (protocol == "sound" or not private)


#: sound GAP-EDP's public encoder grid (issue 50): (hidden width, dropout) of the feature-only
#: encoder, chosen by its own validation accuracy (it reads no edge: free at edge level)
SKIP_ENCODER_GRID = ((64, 0.0), (64, 0.5), (256, 0.0), (256, 0.5))
#: sound GAP-EDP's skip-head regularisations (inverse L2 strength of the logistic regression)
SKIP_HEAD_REGULARISATION = (0.1, 1.0)


def uses_skip_head(level: str, protocol: str) -> bool:
    """Sound GAP-EDP (issue 50) releases the feature-only encoder's class probabilities through PMA
    and classifies with :class:`~defenses.gap.model.GAPSkipClassifier` (hop-0 skip + noisy hop
    sums) fitted on the validation labels; ``paper`` and the other levels keep the reference
    architecture.

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.

    Returns:
        ``True`` for sound edge level.
    """
    return level == "edge" and protocol == "sound"


def samples_degrees(protocol: str) -> bool:
    """``paper`` bounds node-level degrees by random out-neighbour sampling (unanalysed); ``sound``
    never changes the graph and checks the promise instead.

    Args:
        protocol: ``sound`` or ``paper``.

    Returns:
        ``True`` under ``paper``.
    """
    return protocol == "paper"


def projects_degrees(level: str, protocol: str, degree_bound: str) -> bool:
    """Sound node-level GAP with ``degree_bound=projection`` aggregates over the max-entropy
    projection (:mod:`defenses.gap.projection`) of every graph, private or not (ε = ∞ is then
    the same method without noise).

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        degree_bound: ``promise`` or ``projection``.

    Returns:
        Whether aggregation runs over the projection.
    """
    return level == "node" and protocol == "sound" and degree_bound == "projection"


def sound_node_level_needs_promise(level: str, protocol: str, private: bool, degree_bound: str = "promise") -> bool:
    """Sound node-level GAP with ``degree_bound=promise`` checks the degree promise on every
    graph it aggregates.

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        private: whether the run adds noise.
        degree_bound: ``promise`` or ``projection``.

    Returns:
        Whether every aggregated graph's degree is checked.
    """
    return level == "node" and protocol == "sound" and private and degree_bound == "promise"


def privacy_text(
    level: str,
    protocol: str,
    *,
    hops: int,
    released_hops: int,
    max_degree: int | None,
    sensitivity: float,
    sigma: float,
    grid_size: int,
    degree_bound: str = "promise",
    universe_nodes: int | None = None,
) -> tuple[list[str], list[str]]:
    """(notes, unaccounted steps) of a private run's spec: every step ``paper`` leaves outside
    the accountant, in plain words, and what ``sound`` proves instead. ``released_hops`` is the
    number of hops PMA released on the training graph (K_max when K is a prefix choice).

    Args:
        level: ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        hops: K chosen.
        released_hops: hops PMA released on the training graph.
        max_degree: D (node level), or ``None``.
        sensitivity: Δ, the per-hop sensitivity.
        sigma: the noise multiplier σ.
        grid_size: configurations searched.
        degree_bound: ``promise`` or ``projection``.
        universe_nodes: N̄ (projection only).

    Returns:
        ``(notes, unaccounted)``.
    """
    paper = protocol == "paper"
    notes = [f"protocol = {protocol}: K = {hops}" + (f", D = {max_degree}" if max_degree else "")]
    unaccounted: list[str] = []
    if level == "edge":
        if paper:
            unaccounted.append(
                "per-hop sensitivity 1 (Lemma 1, one directed entry of A) for an undirected edge, whose removal "
                "changes two entries: the true per-hop sensitivity is √2, so the reported ε is too small"
            )
            notes.append(
                "best-validation checkpoints at edge level are post-processing (they read the released PMA output "
                "and validation features/labels, which edge-level DP does not protect)"
            )
        else:
            notes.append(
                "unit: one undirected edge; removing it changes two directed entries of A, so the per-hop "
                "sensitivity is √2; PMA is (α, Kα·2/(2s²))-RDP (Theorem 1 with Δ = √2)"
            )
            if uses_skip_head(level, protocol):
                notes.append(
                    "skip head (issue 50): the encoder is a feature-only MLP trained without noise on the training "
                    "labels, its width and dropout chosen by its own validation accuracy (it reads no edge); PMA "
                    "releases its row-normalised class probabilities; the classifier is one linear layer over the "
                    "encoder's log-probabilities (hop-0 skip) and the noisy hop sums, fitted on the validation "
                    "labels; K and its regularisation chosen by cross-validation on them, the encoder alone "
                    "among the choices: all post-processing of the one release and of public features and labels"
                )
            notes.append(
                f"one PMA release of K_max = {released_hops} hop(s) on the training graph, accounted for "
                f"{released_hops}; K = {hops} and the encoder's and classifier's best-validation epochs were chosen "
                f"on validation accuracy over its hop prefixes ({grid_size} choice(s)): post-processing, since the "
                "choice reads only that release and node features/labels, which edge-level DP does not protect"
            )
        notes.append("encoder and classifier read node features and labels without noise: edge-level DP only")
    else:
        notes.append(
            f"node-level: encoder DP-SGD + PMA (noise std σ·Δ, Δ = {sensitivity:.4g}) + classifier DP-SGD "
            f"composed in RDP with one noise multiplier σ = {sigma:.4g} (Proposition 3)"
        )
        if paper:
            unaccounted += [
                f"degree bounding by random out-neighbour sampling to D = {max_degree} depends on the graph and is "
                "not analysed (removing a node changes which of its neighbours' edges survive)",
                "per-hop sensitivity √D (Lemmas 2–3) ignores the removed node's own aggregated row (√(D(D+1)) with it)",
                "best-validation checkpoints of the encoder and the classifier (validation labels and features, "
                "private at node level)",
            ]
        elif projects_degrees(level, protocol, degree_bound):
            notes.append(
                f"node-level DP over graphs of at most N̄ = {universe_nodes} nodes (the declared graph size; a larger "
                f"graph is refused): PMA aggregates over the maximum-entropy projection of the graph to weighted degree "
                f"≤ D = {max_degree} (defenses.gap.projection; the identity on graphs of maximum degree ≤ D), whose "
                f"per-hop sensitivity under adding or removing a node is Δ = √(D² + (√D + √(2D·H_max))²) plus the "
                "solver's certified error"
            )
        else:
            notes.append(
                f"bounded-degree node-level DP: neighbouring graphs both of maximum degree ≤ D = {max_degree} "
                "(training and query graphs above it are refused, no trimming); per-hop sensitivity √(D(D+1)) covers "
                "the D rows the node enters and its own row"
            )
    if paper and grid_size > 1:
        unaccounted.append(
            f"hops K (and D at node level) chosen by validation accuracy over {grid_size} configurations, each a "
            "separate private run; only the chosen run is accounted"
        )
    notes.append(
        "every query graph passed to the model (the training graph included) is a new PMA release counted in the "
        "model's query ledger (about the query graph, never composed into this spec); the training graph's release "
        "is answered only through the owner's record"
    )
    return notes, unaccounted
