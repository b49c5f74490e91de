r"""Statistics every attack reports: ROC/AUC, TPR at low FPR, advantage, bootstrap intervals,
the empirical ε lower bound, and the theoretical ceilings implied by a model's guarantee.

Conventions. Attack scores are continuous and oriented *by the attack's design*: a higher
score means "member" (or "edge"). Nothing here ever flips a curve whose AUC is below 0.5
using the true labels — an attack that is worse than chance is reported as such.

Empirical ε lower bound (Jagielski et al. 2020; Nasr et al. 2021). A membership test
"score ≥ t" of an (ε, δ)-DP mechanism satisfies

.. math::
    \mathrm{TPR} \le e^{\varepsilon}\,\mathrm{FPR} + \delta, \qquad
    \mathrm{TNR} \le e^{\varepsilon}\,\mathrm{FNR} + \delta,

so :math:`\varepsilon \ge \ln\frac{\mathrm{TPR}-\delta}{\mathrm{FPR}}` and
:math:`\varepsilon \ge \ln\frac{\mathrm{TNR}-\delta}{\mathrm{FNR}}`. With finite samples we
plug in one-sided Clopper–Pearson bounds (TPR_lo, FPR_hi, resp. TNR_lo, FNR_hi). The
threshold *and* the form are chosen on a random half of the attack data and the bound is
evaluated once on the other half, so selection never touches the evaluation data. The two
binomial bounds are each taken at level α/2 (Bonferroni), so the reported ε_LB holds with
confidence 1 − α jointly (95 % by default).

Caveat (stated in every result that uses it): the DP inequality is about the randomness of
training for a *randomly included* unit. A fixed member/non-member set of one trained model
gives a valid bound only when membership was assigned at random independently of the data
(one-run auditing, Steinke, Nasr & Jagielski 2023, needs that); splits here are random, so
the number is meaningful, but it is an audit statistic, not a proof.

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
itself private (otherwise the outputs read the edge directly, outside the guarantee).

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
from dpaudit.errors import DPAuditError
from dpaudit.results import FPR_LEVELS

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
    """Area under the ROC curve of the test "score ≥ t" (ties count one half)."""
    s, y = _check(scores, labels)
    return float(skm.roc_auc_score(y, s))


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) of the test "score ≥ t", from (0, 0) to (1, 1)."""
    s, y = _check(scores, labels)
    fpr, tpr, thr = skm.roc_curve(y, s, drop_intermediate=False)
    return fpr, tpr, thr


def tpr_at_fpr(scores, labels, levels=tuple(float(v) for v in FPR_LEVELS)) -> dict[str, float]:
    """Largest TPR among thresholds whose FPR is at most each level (no interpolation, so
    with n non-members an FPR below 1/n can only be met at FPR = 0)."""
    fpr, tpr, _ = roc_curve(scores, labels)
    return {str(level): float(tpr[fpr <= level + 1e-12].max()) for level in levels}


def advantage(scores, labels) -> float:
    """Membership advantage max_t (TPR − FPR) (Yeom et al. 2018)."""
    fpr, tpr, _ = roc_curve(scores, labels)
    return float(np.max(tpr - fpr))


def downsample_roc(fpr: np.ndarray, tpr: np.ndarray, max_points: int = 200) -> dict[str, list[float]]:
    """At most ``max_points`` ROC points (always keeping both ends) for reports."""
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
    separately, so every resample keeps both classes and their sizes)."""
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
    """Percentile interval of bootstrap draws."""
    alpha = 1.0 - confidence
    lo, hi = np.quantile(np.asarray(draws), [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def bootstrap_auc_ci(scores, labels, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0):
    """Stratified percentile-bootstrap interval for the AUC."""
    return bootstrap_ci(bootstrap_auc_draws(scores, labels, n_boot, seed), confidence)


# --------------------------------------------------------------------------- ε lower bound


def clopper_pearson_lower(successes, trials, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial proportion."""
    k, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k <= 0, 0.0, lo)


def clopper_pearson_upper(successes, trials, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson upper bound on a binomial proportion."""
    k, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1 - alpha, k + 1, n - k)
    return np.where(k >= n, 1.0, hi)


def _epsilon_forms(pos_scores, neg_scores, thresholds, delta, alpha) -> tuple[np.ndarray, np.ndarray]:
    """ε bounds of both forms for each threshold ("score ≥ t" = predicted member)."""
    pos_sorted, neg_sorted = np.sort(pos_scores), np.sort(neg_scores)
    n_pos, n_neg = pos_sorted.size, neg_sorted.size
    tp = n_pos - np.searchsorted(pos_sorted, thresholds, side="left")
    fp = n_neg - np.searchsorted(neg_sorted, thresholds, side="left")
    fn, tn = n_pos - tp, n_neg - fp
    half = alpha / 2  # Bonferroni over the two binomial bounds of one form
    with np.errstate(divide="ignore", invalid="ignore"):
        tpr_lo = clopper_pearson_lower(tp, n_pos, half)
        fpr_hi = clopper_pearson_upper(fp, n_neg, half)
        tnr_lo = clopper_pearson_lower(tn, n_neg, half)
        fnr_hi = clopper_pearson_upper(fn, n_pos, half)
        eps_fpr = np.where(tpr_lo - delta > 0, np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), -np.inf)
        eps_fnr = np.where(tnr_lo - delta > 0, np.log(np.maximum(tnr_lo - delta, 1e-300) / fnr_hi), -np.inf)
    return eps_fpr, eps_fnr


def epsilon_lower_bound(
    scores,
    labels,
    delta: float = 0.0,
    confidence: float = 0.95,
    seed: int = 0,
    max_thresholds: int = 2000,
) -> dict[str, Any]:
    r"""Empirical ε lower bound with a held-out threshold (see the module docstring).

    The attack data are split at random into two halves, stratified by label. On the first
    half every distinct score is a candidate threshold; the (threshold, form) pair with the
    largest Clopper–Pearson ε bound there is selected. The bound is then computed once on the
    second half: ε_LB = max(0, ln((TPR_lo − δ)/FPR_hi)) for the FPR form, or
    ln((TNR_lo − δ)/FNR_hi) for the FNR form, both binomial bounds at α/2 (α = 1 − confidence).

    Returns a dict with ``epsilon`` (≥ 0), ``delta``, ``confidence``, the selected
    ``threshold`` and ``form``, and the evaluation-half counts.
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
    sel_fpr, sel_fnr = _epsilon_forms(s[sel_pos], s[sel_neg], candidates, delta, alpha)
    best_fpr, best_fnr = int(np.argmax(sel_fpr)), int(np.argmax(sel_fnr))
    if sel_fpr[best_fpr] >= sel_fnr[best_fnr]:
        form, threshold = "fpr", float(candidates[best_fpr])
    else:
        form, threshold = "fnr", float(candidates[best_fnr])

    ev_fpr, ev_fnr = _epsilon_forms(s[ev_pos], s[ev_neg], np.array([threshold]), delta, alpha)
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


# --------------------------------------------------------------------------- ceilings


def tpr_ceiling(fpr, epsilon: float, delta: float) -> np.ndarray:
    r"""Largest TPR any test can reach at ``fpr`` under (ε, δ)-DP:
    :math:`\min\{1, e^\varepsilon \mathrm{FPR} + \delta, 1 - e^{-\varepsilon}(1 - \delta - \mathrm{FPR})\}`."""
    f = np.clip(np.asarray(fpr, dtype=float), 0.0, 1.0)
    if math.isinf(epsilon):
        return np.ones_like(f)
    return np.minimum.reduce(
        [np.ones_like(f), math.exp(epsilon) * f + delta, 1.0 - math.exp(-epsilon) * (1.0 - delta - f)]
    )


def auc_ceiling(epsilon: float, delta: float) -> float:
    r"""Area under :func:`tpr_ceiling`: :math:`1 - (1-\delta)^2 / (1 + e^\varepsilon)`."""
    if math.isinf(epsilon):
        return 1.0
    return 1.0 - (1.0 - delta) ** 2 / (1.0 + math.exp(epsilon))


def gdp_tpr_ceiling(fpr, mu: float) -> np.ndarray:
    """μ-GDP trade-off: TPR ≤ Φ(Φ⁻¹(FPR) + μ) (Dong, Roth & Su 2022, Def. 2.7)."""
    f = np.clip(np.asarray(fpr, dtype=float), 0.0, 1.0)
    return stats.norm.cdf(stats.norm.ppf(f) + mu)


def gdp_auc_ceiling(mu: float) -> float:
    """AUC ≤ Φ(μ/√2) under μ-GDP (the AUC of N(μ, 1) versus N(0, 1))."""
    return float(stats.norm.cdf(mu / math.sqrt(2.0)))


@dataclass
class Coverage:
    """Whether a model's guarantee covers an attack, and the guarantee that then applies."""

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

    @property
    def ceiling_auc(self) -> float | None:
        if not self.covered:
            return None
        bounds = [auc_ceiling(self.epsilon, self.delta)]
        if self.gdp_mu is not None:
            bounds.append(gdp_auc_ceiling(self.gdp_mu))
        return float(min(bounds))

    def tpr_ceiling(self, fpr) -> np.ndarray | None:
        if not self.covered:
            return None
        bound = tpr_ceiling(fpr, self.epsilon, self.delta)
        if self.gdp_mu is not None:
            bound = np.minimum(bound, gdp_tpr_ceiling(fpr, self.gdp_mu))
        return bound

    def describe(self) -> dict[str, Any]:
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
) -> Coverage:
    """Decide whether ``privacy`` covers an attack on ``attack_unit`` ("node" membership or
    "edge" inference) and with which (ε, δ[, μ]).

    ``queries_private_graph``: the attack's answers come from running the model on the
    private graph (link stealing, LinkTeller). Then a training-time guarantee covers the
    edge only when inference is private too (``card["inference"]["private"]``).
    """
    if attack_unit not in ATTACK_UNITS:
        raise DPAuditError(f"attack unit must be one of {ATTACK_UNITS}, got {attack_unit!r}")
    unit = privacy.unit
    base = dict(model_unit=unit, attack_unit=attack_unit, sound=privacy.sound)
    if not privacy.is_private or unit is None:
        return Coverage(False, "the model is not private: no guarantee, no ceiling", **base)
    notes = []
    if not privacy.sound:
        notes.append("the model's ε follows a paper's own analysis that is not a sound bound; the ceiling inherits it")
    if attack_unit == "node":
        if unit != "node":
            return Coverage(False, f"node membership is not covered by {unit}-level DP", **base)
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
    if queries_private_graph and not inference_private:
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
        "(2ε, 2e^ε δ) (Vadhan 2017, Lemma 2.2), slightly looser than (1 + e^ε)δ"
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


def summarize_runs(
    runs: list[tuple[np.ndarray, np.ndarray]],
    lower_bound_delta: float,
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Aggregate the (scores, labels) of each run into the numbers an :class:`AttackResult` holds.

    * ``auc``, ``tpr_at_fpr``, ``advantage``: means over runs;
    * ``auc_ci``: percentile bootstrap of the mean-over-runs AUC — draw b averages the b-th
      stratified resample of every run (sampling error of the finite member sets);
    * ``epsilon_lower_bound``: computed on run 0 only (pre-specified, so no maximum over
      runs inflates it); every run's value is listed in ``runs``;
    * ``roc``: run 0, down-sampled.
    """
    if not runs:
        raise DPAuditError("no attack run to summarise")
    per_run, draws = [], []
    for i, (scores, labels) in enumerate(runs):
        fpr, tpr, _ = roc_curve(scores, labels)
        lb = epsilon_lower_bound(scores, labels, lower_bound_delta, confidence, seed=seed + i)
        per_run.append(
            {
                "auc": auc(scores, labels),
                "tpr_at_fpr": tpr_at_fpr(scores, labels),
                "advantage": advantage(scores, labels),
                "epsilon_lower_bound": lb["epsilon"],
                "members": int(np.sum(labels)),
                "non_members": int(len(labels) - np.sum(labels)),
            }
        )
        draws.append(bootstrap_auc_draws(scores, labels, n_boot, seed=seed + 1000 + i))
        if i == 0:
            roc = downsample_roc(fpr, tpr)
            lower_bound = lb
    mean_draws = np.mean(np.stack(draws), axis=0)
    return {
        "auc": float(np.mean([r["auc"] for r in per_run])),
        "auc_ci": bootstrap_ci(mean_draws, confidence),
        "tpr_at_fpr": {k: float(np.mean([r["tpr_at_fpr"][k] for r in per_run])) for k in FPR_LEVELS},
        "advantage": float(np.mean([r["advantage"] for r in per_run])),
        "epsilon_lower_bound": lower_bound["epsilon"],
        "epsilon_lower_bound_delta": lower_bound["delta"],
        "lower_bound": lower_bound,
        "roc": roc,
        "runs": per_run,
        "auc_std": float(np.std([r["auc"] for r in per_run])),
    }
