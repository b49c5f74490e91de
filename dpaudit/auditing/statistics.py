r"""Statistics every attack reports: ROC/AUC, TPR at low FPR, advantage, bootstrap intervals,
the empirical ε lower bound, and the theoretical ceilings implied by a model's guarantee.

Conventions. Attack scores are continuous and oriented *by the attack's design*: a higher
score means "member" (or "edge"). Nothing here ever flips a curve whose AUC is below 0.5
using the true labels — an attack that is worse than chance is reported as such.

Empirical ε lower bound: the one-run pair test (Steinke, Nasr & Jagielski 2023). The audit
set of a membership attack is drawn by the randomized audit game
(:func:`dpaudit.data.splits.audit_game`): P disjoint pairs (member, non-member) of the same class
whose member is, on a random split, an independent fair coin per pair. The auditor guesses,
for the r pairs with the largest score difference, that the higher-scoring node is the member
and abstains on the others; with W correct guesses, Steinke et al.'s Theorem (approximate DP,
their p-value: :func:`dpaudit.auditing.estimators.one_run_p_value`, the one implementation)

.. math::
    \Pr[W \ge v] \le \Pr[\mathrm{Bin}(r, q) \ge v] + 2m\,\delta' \max_{1 \le i \le v}
    \frac{\Pr[v - i \le \mathrm{Bin}(r, q) < v]}{i}, \qquad q = \frac{e^{\varepsilon'}}{1 + e^{\varepsilon'}},

holds for every mechanism that is (ε', δ')-DP in each coin (m = P pairs). Flipping one pair's
coin removes one node and adds another: a group of :math:`k_{pair} = 2k` node changes, where
k = 2 when the recipe keeps non-members in its training graph (a member and a non-member then
differ by one node change each way) and k = 1 otherwise, so a node-level (ε, δ) claim gives
:math:`\varepsilon' = k_{pair}\varepsilon`, :math:`\delta' = k_{pair} e^{(k_{pair}-1)\varepsilon}\delta`
(group privacy). ε_LB is the largest ε whose p-value is below α; r is chosen from a small grid
of fractions of the pairs, each tested at α / |grid| (Bonferroni), so the maximum over the
grid holds at confidence 1 − α. The bound is valid only on a random split
(``bound_valid`` of every result says whether it is); it is weak by design (Steinke et al.:
one run certifies little at small ε), but it never over-claims.

The older statistic (:func:`epsilon_lower_bound`: Clopper–Pearson on per-node outcomes of one
model) treats fixed-size membership as Bernoulli trials and is valid only for independent
trials (one guess per independent training run); results no longer report it.

Ceilings. For (ε, δ)-DP (Kairouz, Oh & Viswanath 2015, the optimal hypothesis-testing
region) every test satisfies

.. math::
    \mathrm{TPR} \le \min\{1,\; e^{\varepsilon}\mathrm{FPR} + \delta,\;
    1 - e^{-\varepsilon}(1 - \delta - \mathrm{FPR})\},

whose area is :math:`\mathrm{AUC} \le 1 - \frac{(1-\delta)^2}{1 + e^{\varepsilon}}`. For
μ-GDP (Dong, Roth & Su 2022) TPR ≤ Φ(Φ⁻¹(FPR) + μ) and AUC ≤ Φ(μ/√2).

Coverage (:func:`coverage`): node membership is covered only by node-level DP; edge
inference by edge-level DP, or by node-level DP through group privacy over the two node
changes that remove an edge (:func:`dpaudit.accounting.group_privacy`, k = 2), and — when
the attack's queries run the model on the private graph — only if the model's inference is
itself private (otherwise the outputs read the edge directly, outside the guarantee). A
guarantee over a restricted relation (``unit_condition``, e.g. bounded-degree node DP) covers
nothing, whatever its ε. A ``sound: false`` spec (a user's claim, a paper's own accounting) is
a hypothesis: its ceiling is drawn as what the claim allows and marked ``hypothesis`` — a
valid lower bound above it refutes the claim, and nothing below it proves the claim.

Neighbouring tests only. The ceilings and ε_LB bound a test between *neighbouring* inputs
whose unit was included at random. Node membership on a random split is such a test. Edge
inference over natural edges versus non-edges is not: the two classes are different node
pairs whose features differ (homophily), so even a model that never saw an edge separates
them (a feature-only MLP reaches link-stealing AUC 0.80 on cora_ml, and GAP-EDP at ε = 1
reaches 0.76, above the "ceiling" 0.58 that would apply to a single pair). The edge attacks
therefore record whether the guarantee covers edges but report no ceiling and no ε_LB
(see ``attacks._common.make_result``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from dpaudit.accounting.conversion import group_privacy
from dpaudit.accounting.spec import PrivacySpec
from dpaudit.auditing.estimators import one_run_p_value
from dpaudit.auditing.intervals import clopper_pearson_epsilon
from dpaudit.auditing.results import FPR_LEVELS
from dpaudit.errors import DPAuditError
from dpaudit.release.deployments import deployment_entry

ATTACK_UNITS = ("node", "edge")


# --------------------------------------------------------------------------- input checks


def _check(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise DPAuditError(f"scores ({s.size}) and labels ({y.size}) differ in length")
    if not np.isfinite(s).all():
        raise DPAuditError("attack scores must be finite")
    if not np.isin(y, (0, 1)).all():
        raise DPAuditError("labels must be 0 (non-member) or 1 (member)")
    y = y.astype(np.int64)
    if y.sum() == 0 or y.sum() == y.size:
        raise DPAuditError("need both members (label 1) and non-members (label 0)")
    return s, y


# --------------------------------------------------------------------------- curve statistics


def auc(scores, labels) -> float:
    """Area under the ROC curve of the test "score ≥ t" (ties count one half).

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).

    Returns:
        The AUC in [0, 1].

    Raises:
        DPAuditError: lengths differ, a score is not finite, a label is not 0/1, or one class is missing.
    """
    s, y = _check(scores, labels)
    return float(skm.roc_auc_score(y, s))


def auc_or_none(scores, coins) -> float | None:
    """:func:`auc` of scores against 0/1 coins, or ``None`` when only one class is present.

    Args:
        scores: attack scores.
        coins: 0/1 membership coins, one per score.

    Returns:
        The AUC, or ``None``.
    """
    coins = np.asarray(coins)
    if coins.all() or not coins.any():
        return None
    return float(auc(scores, coins.astype(int)))


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) of the test "score ≥ t", from (0, 0) to (1, 1).

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).

    Returns:
        Arrays ``fpr``, ``tpr`` and ``thresholds`` (sklearn's, without dropping intermediate points).

    Raises:
        DPAuditError: lengths differ, a score is not finite, a label is not 0/1, or one class is missing.
    """
    s, y = _check(scores, labels)
    fpr, tpr, thr = skm.roc_curve(y, s, drop_intermediate=False)
    return fpr, tpr, thr


def tpr_at_fpr(scores, labels, levels=tuple(float(v) for v in FPR_LEVELS)) -> dict[str, float]:
    """Largest TPR among thresholds whose FPR is at most each level (no interpolation, so
    with n non-members an FPR below 1/n can only be met at FPR = 0).

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).
        levels: FPR levels (default :data:`~dpaudit.auditing.results.FPR_LEVELS`).

    Returns:
        ``{str(level): TPR}``.

    Raises:
        DPAuditError: lengths differ, a score is not finite, a label is not 0/1, or one class is missing.
    """
    fpr, tpr, _ = roc_curve(scores, labels)
    return {str(level): float(tpr[fpr <= level + 1e-12].max()) for level in levels}


def advantage(scores, labels) -> float:
    """Membership advantage max_t (TPR − FPR) (Yeom et al. 2018).

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).

    Returns:
        The advantage in [−1, 1].

    Raises:
        DPAuditError: lengths differ, a score is not finite, a label is not 0/1, or one class is missing.
    """
    fpr, tpr, _ = roc_curve(scores, labels)
    return float(np.max(tpr - fpr))


def downsample_roc(fpr: np.ndarray, tpr: np.ndarray, max_points: int = 200) -> dict[str, list[float]]:
    """At most ``max_points`` ROC points (always keeping both ends) for reports.

    Args:
        fpr: false-positive rates of the curve.
        tpr: true-positive rates, same length.
        max_points: most points kept.

    Returns:
        ``{"fpr": [...], "tpr": [...]}`` rounded to 6 decimals.
    """
    if len(fpr) > max_points:
        idx = np.unique(np.linspace(0, len(fpr) - 1, max_points).round().astype(int))
        fpr, tpr = fpr[idx], tpr[idx]
    return {"fpr": [round(float(v), 6) for v in fpr], "tpr": [round(float(v), 6) for v in tpr]}


def _rank_auc(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mann–Whitney AUC of each row of ``scores`` [B, n] with ``labels`` [B, n] (vectorised)."""
    ranks = stats.rankdata(scores, axis=1)
    pos = labels.sum(axis=1)
    neg = labels.shape[1] - pos
    rank_sum = (ranks * labels).sum(axis=1)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def bootstrap_auc_draws(scores, labels, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """AUC of ``n_boot`` stratified bootstrap resamples (members and non-members resampled
    separately, so every resample keeps both classes and their sizes).

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).
        n_boot: number of resamples.
        seed: seed of the resampling generator.

    Returns:
        Array of ``n_boot`` AUCs.

    Raises:
        DPAuditError: lengths differ, a score is not finite, a label is not 0/1, or one class is missing.
    """
    s, y = _check(scores, labels)
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    draws = np.empty(n_boot)
    chunk = max(1, 2_000_000 // y.size)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        idx = np.concatenate(
            [rng.choice(pos, size=(b, pos.size)), rng.choice(neg, size=(b, neg.size))],
            axis=1,
        )
        lab = np.concatenate([np.ones((b, pos.size)), np.zeros((b, neg.size))], axis=1)
        draws[start : start + b] = _rank_auc(s[idx], lab)
    return draws


def bootstrap_ci(draws: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap draws.

    Args:
        draws: bootstrap draws of a statistic.
        confidence: two-sided coverage, e.g. 0.95.

    Returns:
        ``(low, high)`` quantiles at (1 − confidence)/2 and (1 + confidence)/2.
    """
    alpha = 1.0 - confidence
    lo, hi = np.quantile(np.asarray(draws), [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def bootstrap_auc_ci(scores, labels, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0):
    """Stratified percentile-bootstrap interval for the AUC.

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).
        n_boot: number of resamples.
        confidence: two-sided coverage.
        seed: seed of the resampling generator.

    Returns:
        ``(low, high)`` of the AUC.

    Raises:
        DPAuditError: lengths differ, a score is not finite, a label is not 0/1, or one class is missing.
    """
    return bootstrap_ci(bootstrap_auc_draws(scores, labels, n_boot, seed), confidence)


# --------------------------------------------------------------------------- ε lower bound


def epsilon_lower_bound(
    scores,
    labels,
    delta: float = 0.0,
    confidence: float = 0.95,
    seed: int = 0,
    max_thresholds: int = 2000,
) -> dict[str, Any]:
    r"""Held-out-threshold Clopper–Pearson ε bound for **independent** trials.

    Valid only when every (score, label) is an independent trial (e.g. one guess per
    independent training run, as in Jagielski et al. 2020); per-node outcomes of one model on a
    fixed-size split are not independent, so attacks report :func:`pair_test_lower_bound`
    instead.

    The attack data are split at random into two halves, stratified by label. On the first
    half every distinct score is a candidate threshold; the (threshold, form) pair with the
    largest Clopper–Pearson ε bound there is selected. The bound is then computed once on the
    second half: ε_LB = max(0, ln((TPR_lo − δ)/FPR_hi)) for the FPR form, or
    ln((TNR_lo − δ)/FNR_hi) for the FNR form, both binomial bounds at α/2 (α = 1 − confidence).

    Returns a dict with ``epsilon`` (≥ 0), ``delta``, ``confidence``, the selected
    ``threshold`` and ``form``, and the evaluation-half counts.

    Args:
        scores: attack scores, higher meaning "member" (finite).
        labels: 1 for members, 0 for non-members (both classes present).
        delta: the δ of the claim tested, in [0, 1).
        confidence: 1 − α, in (0, 1).
        seed: seed of the random halving.
        max_thresholds: most candidate thresholds tried on the selection half (quantiles beyond).

    Raises:
        DPAuditError: invalid scores/labels, δ or confidence out of range, fewer than two of a class.
    """
    s, y = _check(scores, labels)
    if not 0.0 <= delta < 1.0:
        raise DPAuditError(f"delta must lie in [0, 1), got {delta}")
    if not 0.0 < confidence < 1.0:
        raise DPAuditError(f"confidence must lie in (0, 1), got {confidence}")
    alpha = 1.0 - confidence
    rng = np.random.default_rng(seed)
    pos, neg = rng.permutation(np.flatnonzero(y == 1)), rng.permutation(np.flatnonzero(y == 0))
    if pos.size < 2 or neg.size < 2:
        raise DPAuditError("the ε lower bound needs at least two members and two non-members")
    sel_pos, ev_pos = pos[: pos.size // 2], pos[pos.size // 2 :]
    sel_neg, ev_neg = neg[: neg.size // 2], neg[neg.size // 2 :]

    candidates = np.unique(s[np.concatenate([sel_pos, sel_neg])])
    if candidates.size > max_thresholds:
        candidates = np.unique(np.quantile(candidates, np.linspace(0, 1, max_thresholds)))
    sel_fpr, sel_fnr, *_ = clopper_pearson_epsilon(s[sel_pos], s[sel_neg], candidates, delta, alpha)
    best_fpr, best_fnr = int(np.argmax(sel_fpr)), int(np.argmax(sel_fnr))
    if sel_fpr[best_fpr] >= sel_fnr[best_fnr]:
        form, threshold = "fpr", float(candidates[best_fpr])
    else:
        form, threshold = "fnr", float(candidates[best_fnr])

    ev_fpr, ev_fnr, *_ = clopper_pearson_epsilon(s[ev_pos], s[ev_neg], np.array([threshold]), delta, alpha)
    value = float(ev_fpr[0] if form == "fpr" else ev_fnr[0])
    tp = int((s[ev_pos] >= threshold).sum())
    fp = int((s[ev_neg] >= threshold).sum())
    return {
        "epsilon": max(0.0, value) if math.isfinite(value) else 0.0,
        "delta": float(delta),
        "confidence": confidence,
        "threshold": threshold,
        "form": form,
        "evaluation": {"members": int(ev_pos.size), "non_members": int(ev_neg.size), "tp": tp, "fp": fp},
        "selection": {"members": int(sel_pos.size), "non_members": int(sel_neg.size)},
        "method": "threshold and form chosen on a held-out half; one-sided Clopper-Pearson at alpha/2 each "
        "(joint confidence by Bonferroni) on the other half",
    }


# --------------------------------------------------------------------------- one-run pair test

#: fractions of the pairs the pair test guesses on (largest score differences first); each
#: is tested at α / len(PAIR_GUESS_FRACTIONS) (Bonferroni over the grid)
PAIR_GUESS_FRACTIONS = (1.0, 0.5, 0.25, 0.1, 0.05)


def _pair_parameters(epsilon: float, delta: float, group_size: int) -> tuple[float, float]:
    return group_privacy(epsilon, delta, group_size) if group_size > 1 else (epsilon, delta)


def pair_test_epsilon(
    guesses: int, correct: int, pairs: int, delta: float, alpha: float, group_size: int = 1, max_epsilon=50.0
) -> float:
    """Largest node-level ε whose one-run p-value (:func:`dpaudit.auditing.estimators.one_run_p_value`
    over the ``pairs`` coins, with the coin's group of ``group_size`` node changes: ε' = kε,
    δ' = k e^{(k−1)ε} δ) is below ``alpha``; 0 when even ε = 0 is not rejected. Bisection (the
    p-value grows with ε).

    Args:
        guesses: number of pairs guessed on (r).
        correct: number of correct guesses (W).
        pairs: number of coins/pairs m.
        delta: claimed node-level δ.
        alpha: significance level of this test.
        group_size: node changes per coin flip k.
        max_epsilon: search cap; the last rejected ε below it is returned when the doubling passes it.

    Returns:
        ε_LB (≥ 0).
    """
    if guesses == 0:
        return 0.0

    def rejects(eps: float) -> bool:
        e, d = _pair_parameters(eps, delta, group_size)
        if d >= 1.0:  # group privacy's δ' says nothing at this ε
            return False
        return one_run_p_value(pairs, guesses, correct, e, d) < alpha

    if not rejects(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejects(hi):
        lo, hi = hi, 2 * hi
        if hi > max_epsilon:
            return float(lo)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejects(mid) else (lo, mid)
    return float(lo)


def pair_test_counts(member_scores, non_member_scores, fractions=PAIR_GUESS_FRACTIONS) -> list[dict[str, int]]:
    """Guess/correct counts of the pair test for each fraction of pairs guessed on.

    Pair i is (``member_scores[i]``, ``non_member_scores[i]``). The guess "the higher score is
    the member" is made on the pairs with the largest |difference| (a statistic that does not
    depend on which node is the member); tied pairs are never guessed on.

    Args:
        member_scores: scores of each pair's member.
        non_member_scores: scores of each pair's non-member, same length.
        fractions: fractions of the pairs guessed on.

    Returns:
        One ``{"fraction", "guesses", "correct"}`` dict per fraction.

    Raises:
        DPAuditError: the lengths differ, there is no pair, or a score is not finite.
    """
    u = np.asarray(member_scores, dtype=np.float64).reshape(-1)
    w = np.asarray(non_member_scores, dtype=np.float64).reshape(-1)
    if u.shape != w.shape or u.size == 0:
        raise DPAuditError("the pair test needs as many member as non-member scores (one per pair)")
    if not (np.isfinite(u).all() and np.isfinite(w).all()):
        raise DPAuditError("attack scores must be finite")
    d = u - w
    order = np.argsort(-np.abs(d), kind="stable")
    nonzero = int(np.sum(d != 0))
    out = []
    for f in fractions:
        r = min(nonzero, max(1, int(round(f * d.size))))
        out.append({"fraction": float(f), "guesses": r, "correct": int(np.sum(d[order[:r]] > 0))})
    return out


def pair_test_from_counts(
    counts: list[dict], pairs: int, delta: float, group_size: int, confidence: float = 0.95
) -> dict[str, Any]:
    """ε_LB of the pair test from its counts, Bonferroni over the grid (so it can be recomputed at
    another confidence, e.g. after a report's own Bonferroni split over many tests).

    Args:
        counts: the dicts of :func:`pair_test_counts` (``guesses``, ``correct``).
        pairs: number of pairs m.
        delta: claimed node-level δ, in [0, 1).
        group_size: node changes per coin flip.
        confidence: joint confidence over the grid, in (0, 1).

    Returns:
        ``{"epsilon": best ε_LB, "by_fraction": [...], "best": index}``.

    Raises:
        DPAuditError: δ or confidence out of range.
    """
    if not 0.0 < confidence < 1.0:
        raise DPAuditError(f"confidence must lie in (0, 1), got {confidence}")
    if not 0.0 <= delta < 1.0:
        raise DPAuditError(f"delta must lie in [0, 1), got {delta}")
    alpha = (1.0 - confidence) / max(1, len(counts))
    values = [pair_test_epsilon(c["guesses"], c["correct"], pairs, delta, alpha, group_size) for c in counts]
    best = int(np.argmax(values)) if values else 0
    return {"epsilon": float(values[best]) if values else 0.0, "by_fraction": values, "best": best}


def pair_test_max_possible(
    pairs: int, delta: float, group_size: int, confidence: float = 0.95, fractions=PAIR_GUESS_FRACTIONS
) -> float:
    """The audit's power: the largest ε the pair test of ``pairs`` pairs could certify at
    ``confidence`` if every guess were correct (the same Bonferroni grid as
    :func:`pair_test_from_counts`). No attack can exceed it; when it is at most the claimed ε the
    audit could not have refuted the claim whatever the attack (as the ``max_possible`` of
    :func:`dpaudit.auditing.estimators.one_run_ceiling` for canary audits).

    Args:
        pairs: number of pairs m.
        delta: claimed node-level δ.
        group_size: node changes per coin flip.
        confidence: joint confidence.
        fractions: the grid of guessed fractions.

    Returns:
        The largest certifiable ε (0 without pairs).
    """
    pairs = int(pairs)
    if pairs <= 0:
        return 0.0
    perfect = [{"guesses": r, "correct": r} for r in sorted({max(1, int(round(f * pairs))) for f in fractions})]
    # the grid's size sets each test's level: keep it when rounding merges fractions
    alpha = (1.0 - confidence) / max(1, len(tuple(fractions)))
    return float(max(pair_test_epsilon(c["guesses"], c["correct"], pairs, delta, alpha, group_size) for c in perfect))


def pair_test_lower_bound(
    member_scores,
    non_member_scores,
    delta: float = 0.0,
    group_size: int = 2,
    confidence: float = 0.95,
    fractions=PAIR_GUESS_FRACTIONS,
) -> dict[str, Any]:
    r"""One-run ε lower bound of the randomized audit game (module docstring; Steinke, Nasr &
    Jagielski 2023) from paired scores: pair i is (``member_scores[i]``,
    ``non_member_scores[i]``), the two nodes of one class-stratified pair of
    :func:`dpaudit.data.splits.audit_game`.

    ``group_size`` is the number of node changes one pair's coin flip makes (2: remove the
    member, add the non-member; 4 when the recipe keeps non-members in its training graph);
    ``delta`` the claimed node-level δ. Returns ``epsilon`` (node-level, ≥ 0), the counts of
    every grid entry (so :func:`pair_test_from_counts` can recompute it at another confidence),
    and what it assumed.

    Valid when each pair's member is an independent fair coin given everything else (a random
    split); the result's ``bound_valid`` says whether that holds.

    Args:
        member_scores: score of each pair's member.
        non_member_scores: score of each pair's non-member, same order.
        delta: claimed node-level δ.
        group_size: node changes per coin flip.
        confidence: joint confidence over the grid.
        fractions: fractions of the pairs guessed on.

    Returns:
        Dict with ``epsilon``, ``delta``, ``confidence``, ``pairs``, ``group_size``, ``counts``,
        ``epsilon_by_fraction``, the chosen ``guesses``/``correct``, ``max_possible`` and ``method``.

    Raises:
        DPAuditError: mismatched, empty or non-finite scores; δ or confidence out of range.
    """
    counts = pair_test_counts(member_scores, non_member_scores, fractions)
    pairs = len(np.asarray(member_scores).reshape(-1))
    out = pair_test_from_counts(counts, pairs, delta, group_size, confidence)
    chosen = counts[out["best"]]
    return {
        "epsilon": out["epsilon"],
        "delta": float(delta),
        "confidence": confidence,
        "pairs": pairs,
        "group_size": int(group_size),
        "counts": counts,
        "epsilon_by_fraction": out["by_fraction"],
        "guesses": chosen["guesses"],
        "correct": chosen["correct"],
        "max_possible": pair_test_max_possible(pairs, delta, group_size, confidence, fractions),
        "method": (
            "one-run pair test (Steinke, Nasr & Jagielski 2023, approximate-DP p-value): guess the higher score of "
            "each class-stratified (member, non-member) pair on the pairs with the largest score difference; "
            f"grid of {len(counts)} guess counts, each at alpha/{len(counts)} (Bonferroni); one pair's coin is a "
            f"group of {group_size} node changes (group privacy)"
        ),
    }


# --------------------------------------------------------------------------- ceilings


def tpr_ceiling(fpr, epsilon: float, delta: float) -> np.ndarray:
    r"""Largest TPR any test can reach at ``fpr`` under (ε, δ)-DP:
    :math:`\min\{1, e^\varepsilon \mathrm{FPR} + \delta, 1 - e^{-\varepsilon}(1 - \delta - \mathrm{FPR})\}`.

    Args:
        fpr: false-positive rate(s), clipped to [0, 1].
        epsilon: ε of the guarantee (∞ gives 1).
        delta: δ of the guarantee.

    Returns:
        TPR ceiling(s), same shape as ``fpr``.
    """
    f = np.clip(np.asarray(fpr, dtype=float), 0.0, 1.0)
    if math.isinf(epsilon):
        return np.ones_like(f)
    # e^ε capped at e^700 (a composed ε can reach the hundreds): beyond it every FPR above 1e-304
    # already reaches TPR 1, and math.exp would overflow
    growth = math.exp(min(epsilon, 700.0))
    return np.minimum.reduce([np.ones_like(f), growth * f + delta, 1.0 - math.exp(-epsilon) * (1.0 - delta - f)])


def auc_ceiling(epsilon: float | None, delta: float) -> float:
    r"""Area under :func:`tpr_ceiling`: :math:`1 - (1-\delta)^2 / (1 + e^\varepsilon)` — the largest
    AUC any attack can reach against an (ε, δ)-DP mechanism; 1 without a finite ε (``None``, ∞).

    Args:
        epsilon: ε of the guarantee, or ``None``.
        delta: δ of the guarantee.

    Returns:
        The AUC ceiling in [0.5, 1].
    """
    if epsilon is None or not math.isfinite(epsilon):
        return 1.0
    # 1/(1 + e^ε) as e^-ε/(1 + e^-ε): no overflow for the large ε a composed total can reach
    tail = math.exp(-epsilon) / (1.0 + math.exp(-epsilon))
    return float(min(1.0, 1.0 - (1.0 - delta) ** 2 * tail))


def gdp_tpr_ceiling(fpr, mu: float) -> np.ndarray:
    """μ-GDP trade-off: TPR ≤ Φ(Φ⁻¹(FPR) + μ) (Dong, Roth & Su 2022, Def. 2.7).

    Args:
        fpr: false-positive rate(s), clipped to [0, 1].
        mu: μ of the GDP guarantee.

    Returns:
        TPR ceiling(s), same shape as ``fpr``.
    """
    f = np.clip(np.asarray(fpr, dtype=float), 0.0, 1.0)
    return stats.norm.cdf(stats.norm.ppf(f) + mu)


def gdp_auc_ceiling(mu: float) -> float:
    """AUC ≤ Φ(μ/√2) under μ-GDP (the AUC of N(μ, 1) versus N(0, 1)).

    Args:
        mu: μ of the GDP guarantee.

    Returns:
        The AUC ceiling.
    """
    return float(stats.norm.cdf(mu / math.sqrt(2.0)))


@dataclass
class Coverage:
    """Whether a model's guarantee covers an attack, and the guarantee that then applies.

    Attributes:
        covered: whether the guarantee bounds the attack.
        reason: one sentence saying why (or why not).
        epsilon: ε that applies to the attack (after group privacy), ``None`` when not covered.
        delta: δ that applies, ``None`` when not covered.
        gdp_mu: μ that applies when the model is μ-GDP.
        group_size: number of unit changes the attack's test spans (group privacy).
        model_unit: the unit the model protects.
        attack_unit: ``"node"`` or ``"edge"``.
        sound: the spec's ``sound`` flag.
        notes: further sentences for the report.
        hypothesis: the guarantee is an unproven claim (see the comment above).
        status: the spec's status.
    """

    covered: bool
    reason: str
    epsilon: float | None = None
    delta: float | None = None
    gdp_mu: float | None = None
    group_size: int = 1
    model_unit: str | None = None
    attack_unit: str = "node"
    sound: bool = True
    notes: list[str] = field(default_factory=list)
    #: the guarantee is a hypothesis (:attr:`~dpaudit.accounting.spec.PrivacySpec.hypothesis`: a
    #: user's or a paper's unproven claim): ``covered`` then means the claim speaks to the attack,
    #: the ceiling is what the claim allows, and a valid bound above it refutes the claim
    hypothesis: bool = False
    #: the spec's :attr:`~dpaudit.accounting.spec.PrivacySpec.status` (proven, claimed, paper, ...)
    status: str = "proven"

    @property
    def ceiling_auc(self) -> float | None:
        if not self.covered:
            return None
        bounds = [auc_ceiling(self.epsilon, self.delta)]
        if self.gdp_mu is not None:
            bounds.append(gdp_auc_ceiling(self.gdp_mu))
        return float(min(bounds))

    def tpr_ceiling(self, fpr) -> np.ndarray | None:
        """Args:
            fpr: false-positive rate(s).

        Returns:
            TPR ceiling(s) (the GDP one too, if tighter), or ``None`` when not covered.
        """
        if not self.covered:
            return None
        bound = tpr_ceiling(fpr, self.epsilon, self.delta)
        if self.gdp_mu is not None:
            bound = np.minimum(bound, gdp_tpr_ceiling(fpr, self.gdp_mu))
        return bound

    def describe(self) -> dict[str, Any]:
        """JSON-able form: the fields, ``ceiling_auc`` and, when covered, the TPR ceilings at
        :data:`~dpaudit.auditing.results.FPR_LEVELS` and the formula used.
        """
        out = asdict(self)
        out["ceiling_auc"] = self.ceiling_auc
        if self.covered:
            out["tpr_ceiling_at_fpr"] = {level: float(self.tpr_ceiling(float(level))) for level in FPR_LEVELS}
            out["formula"] = "AUC <= 1 - (1 - delta)^2 / (1 + e^epsilon)" + (
                "; AUC <= Phi(mu / sqrt(2)) (GDP)" if self.gdp_mu is not None else ""
            )
        return out


def coverage(
    privacy: PrivacySpec,
    attack_unit: str,
    queries_private_graph: bool = False,
    inference_private: bool = False,
    node_group_size: int = 1,
    deployment: str | None = None,
    inference: dict[str, Any] | None = None,
) -> Coverage:
    """Decide whether ``privacy`` covers an attack on ``attack_unit`` ("node" membership or
    "edge" inference) and with which (ε, δ[, μ]).

    A hypothesis (a user's claim, a paper's own accounting, a defense's ε with an unaccounted
    step: :attr:`~dpaudit.accounting.spec.PrivacySpec.hypothesis`) is tested like a guarantee —
    same units, group sizes and deployments — but the result says so (``hypothesis``): its
    ceiling is what the claim allows, and a valid lower bound above it refutes the claim; it
    never proves anything.

    ``deployment`` (:mod:`dpaudit.release.deployments`): the graph the attack's answers are computed
    over. Over a graph the querier supplies the answers are post-processing of the weights;
    over the owner's training graph they are covered only when the card's ``inference`` entry
    says so for that deployment (``inference``; a training release, or own-features answers).
    Without a ``deployment`` the legacy flags decide: ``queries_private_graph`` (the answers
    run the model on the private graph: link stealing, LinkTeller) is the training graph, and
    ``inference_private`` its coverage (``card["inference"]["private"]``).

    ``node_group_size``: how many node changes separate "v is a member" from "v is not" for
    node membership. 2 for recipes that keep non-training nodes in their training graph (GAP,
    DPAR, DP-GNN, GCON and the GNN baselines on a transductive split): a non-member is still in
    the graph, so turning a member into a non-member removes the node and adds it back without
    its label; the ceiling then uses group privacy (2ε, (1 + e^ε)δ). 1 when non-members are absent
    from training (``mlp-dp``, inductive splits).

    Args:
        privacy: the model's privacy spec.
        attack_unit: ``"node"`` or ``"edge"``.
        queries_private_graph: legacy flag (see above).
        inference_private: legacy flag (see above).
        node_group_size: node changes between member and non-member (see above).
        deployment: name of the deployment the attack's answers are computed over, or ``None``.
        inference: the card's ``inference`` entry (defaults to ``{"private": inference_private}``).

    Returns:
        The :class:`Coverage`.

    Raises:
        DPAuditError: ``attack_unit`` is not ``"node"`` or ``"edge"``.
    """
    if attack_unit not in ATTACK_UNITS:
        raise DPAuditError(f"attack unit must be one of {ATTACK_UNITS}, got {attack_unit!r}")
    cov = _coverage(
        privacy, attack_unit, queries_private_graph, inference_private, node_group_size, deployment, inference
    )
    cov.status = privacy.status
    if cov.covered and privacy.hypothesis:
        cov.hypothesis = True
        cov.reason = (
            f"{HYPOTHESIS_WORDS[privacy.status]} is tested, not proven: it would bound this attack "
            f"({cov.reason.replace(' covers ', ' would bound ')}), so the ceiling is what the claim allows and a valid "
            "lower bound above the claimed ε refutes it"
        )
    return cov


def coverage_phrase(covered: bool, hypothesis: bool = False) -> str:
    """How a result's coverage is said: a hypothesis is tested against, never "covered".

    Args:
        covered: the result's ``covered``.
        hypothesis: the result's ``hypothesis``.

    Returns:
        The phrase.
    """
    if not covered:
        return "not covered by the guarantee"
    return "tested against the claim (a hypothesis, not proven)" if hypothesis else "covered by the guarantee"


#: how a hypothesis (:data:`~dpaudit.accounting.spec.HYPOTHESES`) is named in coverage reasons and reports
HYPOTHESIS_WORDS = {
    "claimed": "the user's claim",
    "paper": "the paper's claim (its own accounting, protocol=paper)",
    "unsound": "the defense's claimed ε (an unaccounted step, sound: false)",
}


def _coverage(
    privacy, attack_unit, queries_private_graph, inference_private, node_group_size, deployment, inference
) -> Coverage:
    unit = privacy.unit
    base = dict(model_unit=unit, attack_unit=attack_unit, sound=privacy.sound)
    if not privacy.is_private or unit is None:
        return Coverage(False, "the model is not private: no guarantee, no ceiling", **base)
    if privacy.unit_condition:
        return Coverage(
            False,
            f"the guarantee is {privacy.unit_label}-level DP: it holds only over graphs that satisfy "
            f"'{privacy.unit_condition}', not for every neighbouring graph, so no ceiling is drawn from it",
            **base,
        )
    notes: list[str] = []
    if attack_unit == "node":
        if deployment is not None:
            notes.append(
                f"deployment {deployment}: members and non-members are queried over one graph, the same in both worlds "
                "of the membership game, so their answers differ only through the private weights"
            )
        if unit != "node":
            return Coverage(False, f"node membership is not covered by {unit}-level DP", **base)
        if node_group_size > 1:
            eps_k, delta_k = group_privacy(privacy.epsilon, privacy.delta, node_group_size)
            notes.append(
                f"group privacy over {node_group_size} node changes: non-members stay in the recipe's training graph, "
                f"so a member and a non-member differ by removing the node and adding it back unlabeled "
                f"(ε·k, δ·k·e^((k-1)ε) with k = {node_group_size})"
            )
            return Coverage(
                True,
                f"node-level DP covers node membership through group privacy ({node_group_size} node changes)",
                eps_k,
                delta_k,
                None if privacy.gdp_mu is None else node_group_size * privacy.gdp_mu,
                node_group_size,
                notes=notes,
                **base,
            )
        return Coverage(
            True,
            "node-level DP covers node membership",
            privacy.epsilon,
            privacy.delta,
            privacy.gdp_mu,
            1,
            notes=notes,
            **base,
        )
    if deployment is not None:
        entry = deployment_entry(inference if inference is not None else {"private": inference_private}, deployment)
        if not entry["covered"]:
            return Coverage(
                False,
                f"deployment {deployment}: the attack's answers are computed over that graph and the model's inference "
                f"there is not covered by the training guarantee ({entry['note']})",
                **base,
            )
        notes.append(f"deployment {deployment}: {entry['note']}")
    elif queries_private_graph and not inference_private:
        return Coverage(
            False,
            "the attack's queries run the model on the private graph and the model's inference is not private: "
            "the training guarantee does not cover what inference reveals about edges",
            **base,
        )
    if unit == "edge":
        return Coverage(
            True,
            "edge-level DP covers edge inference",
            privacy.epsilon,
            privacy.delta,
            privacy.gdp_mu,
            1,
            notes=notes,
            **base,
        )
    eps2, delta2 = group_privacy(privacy.epsilon, privacy.delta, 2)
    notes.append(
        "group privacy over the two node changes that remove one edge: dpaudit.accounting.group_privacy(k=2) gives "
        "(2ε, (1 + e^ε)δ) (Vadhan 2017, Lemma 2.2)"
    )
    return Coverage(
        True,
        "node-level DP covers edge inference through group privacy (2 node changes)",
        eps2,
        delta2,
        None if privacy.gdp_mu is None else 2.0 * privacy.gdp_mu,
        2,
        notes=notes,
        **base,
    )


# --------------------------------------------------------------------------- summary of runs


def runs_t_interval(values, confidence: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean of per-run values (None with fewer than 2 runs).

    Args:
        values: per-run values (``None`` entries skipped).
        confidence: two-sided coverage.

    Returns:
        ``(low, high)`` or ``None``.
    """
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size < 2:
        return None
    half = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1)) * float(np.std(v, ddof=1)) / math.sqrt(v.size)
    return float(v.mean() - half), float(v.mean() + half)


def summarize_runs(
    runs: list[tuple[np.ndarray, np.ndarray]],
    lower_bound_delta: float,
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
    pair_group_size: int | None = 2,
) -> dict[str, Any]:
    """Aggregate the (scores, labels) of each run into the numbers an :class:`AttackResult` holds.

    * ``auc``, ``tpr_at_fpr``, ``advantage``: means over runs;
    * ``auc_ci``: the hull of two 95 % intervals — the percentile bootstrap of the
      mean-over-runs AUC (draw b averages the b-th stratified resample of every run: sampling
      error of the finite member sets) and, with ≥ 2 runs, the Student-t interval over the
      per-run AUCs (each run redraws the audit set, the shadow models and the attack model, so
      their spread carries the attack's own randomness, which the bootstrap of fixed scores
      misses). Both are in ``auc_ci_components``. Neither covers the target's training
      randomness (one released model);
    * ``epsilon_lower_bound``: the one-run pair test (:func:`pair_test_lower_bound`) on run 0
      only (pre-specified, so no maximum over runs inflates it), whose i-th member and i-th
      non-member score form pair i (the order of
      :meth:`dpaudit.data.splits.MembershipSet.nodes_and_labels`); every run's value is listed in
      ``runs``. ``pair_group_size=None`` (scores not from the audit game) reports none;
    * ``roc``: run 0, down-sampled.

    Args:
        runs: ``(scores, labels)`` of each run.
        lower_bound_delta: δ used by the pair test.
        confidence: confidence of intervals and of the pair test.
        n_boot: bootstrap resamples per run.
        seed: base seed of the bootstrap (run i uses ``seed + 1000 + i``).
        pair_group_size: node changes per coin for the pair test, ``None`` for no ε_LB.

    Returns:
        Dict of the aggregated numbers (``auc``, ``auc_ci``, ``tpr_at_fpr``, ``advantage``, ``roc``, ``runs``, ...).

    Raises:
        DPAuditError: no run, or invalid scores/labels in one.
    """
    if not runs:
        raise DPAuditError("no attack run to summarise")
    per_run, draws = [], []
    lower_bound = None
    for i, (scores, labels) in enumerate(runs):
        s, y = _check(scores, labels)
        fpr, tpr, _ = roc_curve(s, y)
        row = {
            "auc": auc(s, y),
            "tpr_at_fpr": tpr_at_fpr(s, y),
            "advantage": advantage(s, y),
            "members": int(np.sum(y)),
            "non_members": int(len(y) - np.sum(y)),
        }
        if pair_group_size is not None and int(y.sum()) * 2 == y.size:
            lb = pair_test_lower_bound(s[y == 1], s[y == 0], lower_bound_delta, pair_group_size, confidence)
            row["epsilon_lower_bound"] = lb["epsilon"]
            if i == 0:
                lower_bound = lb
        per_run.append(row)
        draws.append(bootstrap_auc_draws(s, y, n_boot, seed=seed + 1000 + i))
        if i == 0:
            roc = downsample_roc(fpr, tpr)
    mean_draws = np.mean(np.stack(draws), axis=0)
    boot = bootstrap_ci(mean_draws, confidence)
    over_runs = runs_t_interval([r["auc"] for r in per_run], confidence)
    ci = boot if over_runs is None else (max(0.0, min(boot[0], over_runs[0])), min(1.0, max(boot[1], over_runs[1])))
    return {
        "auc": float(np.mean([r["auc"] for r in per_run])),
        "auc_ci": ci,
        "auc_ci_components": {
            "bootstrap": list(boot),
            "t_over_runs": list(over_runs) if over_runs else None,
            "method": "hull of the stratified bootstrap of the mean AUC and the Student-t interval over runs"
            if over_runs
            else "stratified bootstrap of one run's scores only: shadow and attack-model randomness not included "
            "(use runs >= 2)",
        },
        "tpr_at_fpr": {k: float(np.mean([r["tpr_at_fpr"][k] for r in per_run])) for k in FPR_LEVELS},
        "advantage": float(np.mean([r["advantage"] for r in per_run])),
        "epsilon_lower_bound": None if lower_bound is None else lower_bound["epsilon"],
        "epsilon_lower_bound_delta": None if lower_bound is None else lower_bound["delta"],
        "lower_bound": lower_bound,
        "roc": roc,
        "runs": per_run,
        "auc_std": float(np.std([r["auc"] for r in per_run])),
    }
