r"""The claim as a hypothesis about its mechanism, tested in one run (issue 47, item 2).

A DP-SGD claim (ε, δ) with Poisson rate q and T steps names a mechanism: the subsampled Gaussian
SGM(σ, q, T) at the clipping bound C, σ the smallest noise multiplier the project's accountant
calibrates to (ε, δ) (:func:`dpaudit.accounting.calibrate_noise`, not re-derived here). A Dirac
gradient canary (:mod:`dpaudit.auditing.gradient_canary`) on a coordinate no real gradient touches
is one example of that mechanism, and its score — the noisy gradient summed over the T iterates
along its coordinate, in units of C — has an exact law under the claim:

.. math::
    S \mid \text{out} \sim N(0, T\sigma^2), \qquad
    S \mid \text{in} \sim \sum_{k} \binom{T}{k} q^k (1-q)^{T-k}\, N(k, T\sigma^2)

(:class:`ScoreLaw`; for q = 1 it is the Gaussian pair of μ = √T/σ, whose trade-off curve is the
run's own; for q < 1 the sum is a post-processing of the T observations, so its curve lies above
SGM(σ, q, T)'s and the test is about the score the auditor actually has).

**The test** (:func:`sgm_hypothesis_test`). Under the claim the m canaries' (coin, score) pairs
are independent and identically distributed (each coordinate sees only its own canary and its own
noise). Guess each canary by the claim's likelihood ratio (in when it exceeds 1), release the r
guesses of largest \|log LR\| and count the mistakes U. Xiang, Wang, Xiao, Tian & Wang (2025),
"Tight Privacy Audit in One Run" (arXiv 2509.08704), give the law of U for i.i.d. bits through a
channel when the r most confident guesses are released (their order-statistics theorem): with W
the quantile of the cut (the most confident guess *not* released), W ~ Beta(m − r, r + 1), and the
released guesses' errors i.i.d. Bernoulli of the mean error above W,

.. math::
    P[U \le u] = E_W\big[\mathrm{BinCDF}(u;\ r,\ \bar\gamma(W))\big], \qquad
    \bar\gamma(w) = \frac{1}{1-w}\int_w^1 \gamma(t)\, dt,

γ(t) the Bayes error of the channel at confidence quantile t (:func:`top_guesses_p_value`). That
is the p-value of the observed u under the claim; a few pre-registered r are tried with a
Bonferroni split. A run whose noise is short makes fewer mistakes than the claim allows and is
refuted; a run at least as noisy as claimed makes more (their transmission-dominance theorem; the
tests check it by simulation, 0.8× to 1.2× the noise).

**What it assumes.** The p-value is exact when the run *is* the claimed mechanism on canaries that
nothing else touches; its level also holds for any run whose per-canary channel is more private,
by the theorem above. It is *not* a certified bound for an arbitrary mechanism: canaries that
interact (coordinates real gradients reach) are outside the model. The bound valid for any
mechanism is :func:`dpaudit.auditing.estimators.audit_epsilon`'s ``certified_epsilon_lower_bound``;
report both (:func:`dpaudit.auditing.gradient_canary.summarise_game` with ``mechanism=``).

:func:`xiang_epsilon_lower_bound` is the same order-statistics tail bisected over a parametric
family (the (ε, δ) four-atom pair or μ-GDP), Xiang et al.'s estimator, kept for the tightness
tables: it is valid for mechanisms in that family.

Shapes: scores, coins [m].
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import logsumexp, ndtr

from dpaudit.accounting import PoissonSubsampledGaussian, calibrate_noise, epsilon_for_sigma, gaussian_epsilon
from dpaudit.errors import ConfigurationError

#: guess counts tried, as fractions of the canaries (Bonferroni over them): all guesses, and the
#: most confident tenth (abstention)
GUESS_FRACTIONS = (1.0, 0.1)
#: binomial mass below which the in-canary's sampled count k is dropped (the rest renormalised)
_BINOMIAL_TAIL = 1e-13
#: cells of the score grid (each a band of the confidence quantile)
_CELLS = 20_000
#: nodes of the cut's Beta law (equal-probability midpoints)
_CUT_NODES = 2_000
#: :func:`sgm_epsilon_lower_bound` searches σ on the geometric grid of this ratio (σ* is the grid
#: point rejected, never one between: the bound errs low by at most this factor in σ)
SIGMA_RATIO = 1.005
#: the σ range searched (as :func:`dpaudit.accounting.calibrate_noise`'s)
SIGMA_RANGE = (1e-3, 1e5)
#: σ* is checked against larger σ at these multiples when q < 1 (the guesses move with σ); at q = 1
#: they do not (the guess is s > T/2) and a larger σ's channel errs more, so the test is monotone
_MONOTONE_CHECKS = (1.05, 1.25, 2.0, 4.0, 16.0)


def _check_rate_steps(noise_multiplier: float, sample_rate: float, steps: int) -> None:
    if not (isinstance(noise_multiplier, (int, float)) and math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ConfigurationError(f"noise_multiplier must be a positive number, got {noise_multiplier!r}")
    if not (isinstance(sample_rate, (int, float)) and 0 < sample_rate <= 1):
        raise ConfigurationError(f"sample_rate must lie in (0, 1], got {sample_rate!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ConfigurationError(f"steps must be an integer >= 1, got {steps!r}")


@dataclass(frozen=True)
class Profile:
    """A channel's Bayes-error profile in confidence-quantile coordinates (Xiang et al. 2025):
    cells sorted by increasing confidence, each with its mass under the mixture M = (P + Q)/2 and
    its error mass (min(P, Q)/2).

    Shapes: mass, error [K]."""

    mass: np.ndarray
    error: np.ndarray

    @property
    def bayes_error(self) -> float:
        """The channel's error with every guess made (the optimal single-bit error)."""
        return float(self.error.sum())

    def mean_error_above(self, w: np.ndarray) -> np.ndarray:
        """γ̄(w): the mean error of the guesses above confidence quantile ``w`` (linear inside a
        cell, exact for an atom)."""
        w = np.clip(np.asarray(w, dtype=float), 0.0, 1.0)
        hi = np.cumsum(self.mass)
        hi[-1] = max(hi[-1], 1.0)
        above = self.error[::-1].cumsum()[::-1] - self.error  # strictly above each cell
        j = np.minimum(np.searchsorted(hi, w, side="right"), self.mass.size - 1)
        rate = np.divide(self.error, self.mass, out=np.zeros_like(self.error), where=self.mass > 0)
        g = rate[j] * np.maximum(hi[j] - w, 0.0) + above[j]
        return np.clip(g / np.maximum(1.0 - w, 1e-300), 0.0, 0.5)


@dataclass(frozen=True)
class ScoreLaw:
    """The exact law of one Dirac canary's score (in units of C) under SGM(σ, q, T) (module
    docstring): out N(0, Tσ²), in Σ_k Bin(k; T, q) N(k, Tσ²).

    Attributes:
        noise_multiplier: σ.
        sample_rate: q.
        steps: T.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        _check_rate_steps(self.noise_multiplier, self.sample_rate, self.steps)

    @property
    def std(self) -> float:
        """The noise std of a score, √T·σ."""
        return math.sqrt(self.steps) * self.noise_multiplier

    def _counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(k, log pmf) of the sampled count of an in-canary, tails below 1e-13 dropped."""
        t, q = int(self.steps), float(self.sample_rate)
        if q >= 1.0:
            return np.array([float(t)]), np.zeros(1)
        lo, hi = stats.binom.ppf(_BINOMIAL_TAIL, t, q), stats.binom.isf(_BINOMIAL_TAIL, t, q)
        k = np.arange(int(max(lo, 0)), int(min(hi, t)) + 1, dtype=float)
        logp = stats.binom.logpmf(k, t, q)
        return k, logp - logsumexp(logp)

    def log_likelihood_ratio(self, scores) -> np.ndarray:
        """log dP_in/dP_out at each score (units of C).

        Shapes: scores [m] → [m]."""
        s = np.asarray(scores, dtype=float).reshape(-1)
        k, logp = self._counts()
        v = self.std**2
        return logsumexp(logp[None, :] + (s[:, None] * k[None, :] - 0.5 * k[None, :] ** 2) / v, axis=1)

    def profile(self, cells: int = _CELLS) -> Profile:
        """The channel's :class:`Profile`, from exact cell masses of both laws on a grid over
        ±12 noise std around the scores' range (the tails beyond carry < 1e-30)."""
        k, logp = self._counts()
        sd = self.std
        edges = np.linspace(-12.0 * sd + k.min(), k.max() + 12.0 * sd, cells + 1)
        edges[0], edges[-1] = -np.inf, np.inf
        z = edges / sd
        p_out = np.diff(ndtr(z))
        cdf_in = (np.exp(logp)[:, None] * ndtr(z[None, :] - k[:, None] / sd)).sum(axis=0)
        p_in = np.diff(cdf_in)
        p_out, p_in = np.maximum(p_out, 0.0), np.maximum(p_in, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            confidence = np.abs(np.log(p_in) - np.log(p_out))
        confidence = np.nan_to_num(confidence, nan=0.0, posinf=np.inf)
        order = np.argsort(confidence, kind="stable")
        mass = 0.5 * (p_in + p_out)[order]
        error = 0.5 * np.minimum(p_in, p_out)[order]
        total = mass.sum()
        return Profile(mass / total, error / total)

    def delta(self, epsilon: float) -> float:
        """δ(ε) of the score channel, the larger of its two directions (for cross-checks against
        an accountant: at T = 1 it is the subsampled Gaussian's own)."""
        k, logp = self._counts()
        sd, e = self.std, float(epsilon)
        pmf = np.exp(logp)
        # in vs out: ∫ (p_in - e^ε p_out)_+ over the region where the ratio exceeds e^ε (one
        # threshold: the ratio is increasing in s for k ≥ 0), found by bisection on log LR - ε.
        lo, hi = -50.0 * sd, k.max() + 50.0 * sd
        out = []
        for sign in (1.0, -1.0):
            a, b = lo, hi
            for _ in range(200):
                mid = 0.5 * (a + b)
                llr = self.log_likelihood_ratio([mid])[0] * sign - e
                if (llr > 0) == (sign > 0):
                    b = mid
                else:
                    a = mid
            t = 0.5 * (a + b)
            if sign > 0:  # region s > t
                d = float((pmf * ndtr((k - t) / sd)).sum() - math.exp(e) * ndtr(-t / sd))
            else:  # region s < t: out vs in
                d = float(ndtr(t / sd) - math.exp(e) * (pmf * ndtr((t - k) / sd)).sum())
            out.append(max(d, 0.0))
        return max(out)


@functools.lru_cache(maxsize=1024)
def _law_profile(law: ScoreLaw) -> Profile:
    """:meth:`ScoreLaw.profile` at the default grid, remembered per law (a bisection over σ and
    a study over seeds revisit the same grid points)."""
    return law.profile()


@functools.lru_cache(maxsize=256)
def _cut_quantiles(m: int, r: int) -> np.ndarray:
    """The cut's Beta(m − r, r + 1) law at :data:`_CUT_NODES` equal-probability midpoints."""
    nodes = (np.arange(_CUT_NODES) + 0.5) / _CUT_NODES
    w = stats.beta.ppf(nodes, m - r, r + 1)
    w.setflags(write=False)
    return w


def top_guesses_p_value(profile: Profile, m: int, r: int, u: int) -> float:
    """P[U ≤ u]: at most ``u`` mistakes among the ``r`` most confident of ``m`` i.i.d. guesses
    through the channel of ``profile`` (Xiang et al. 2025, the order-statistics tail; module
    docstring).

    Args:
        profile: the channel's :class:`Profile`.
        m: canaries.
        r: guesses released (1 ≤ r ≤ m).
        u: mistakes observed.

    Returns:
        The probability, a p-value for "the guesses come from this channel".

    Raises:
        ConfigurationError: counts out of range.
    """
    if not (1 <= r <= m) or not (0 <= u <= r):
        raise ConfigurationError(f"need 1 <= r <= m and 0 <= u <= r, got m={m}, r={r}, u={u}")
    if r == m:
        return float(stats.binom.cdf(u, r, profile.bayes_error))
    gamma = profile.mean_error_above(_cut_quantiles(int(m), int(r)))
    return float(min(1.0, np.mean(stats.binom.cdf(u, r, gamma))))


def _guesses(llr: np.ndarray, coins: np.ndarray, r: int, seed: int) -> int:
    """Mistakes among the r guesses of largest |log LR| (ties broken by ``seed``)."""
    tie = np.random.default_rng(seed).random(llr.size)
    order = np.lexsort((tie, -np.abs(llr)))[:r]
    return int(((llr[order] > 0) != coins[order]).sum())


@dataclass
class HypothesisTest:
    """The one-run test of "this run is SGM(σ, q, T) at the clipping bound" (module docstring).

    Attributes:
        noise_multiplier, sample_rate, steps: the claimed mechanism.
        p_value: Bonferroni over the guess counts tried (capped at 1).
        confidence: 1 − the level; ``refuted`` when p_value ≤ 1 − confidence.
        tried: one row per guess count: ``guesses``, ``mistakes``, ``p_value`` (unadjusted).
        bayes_error: the claimed channel's error with every guess made (what a correct run's
            mistake rate is near).
        mu: the score's GDP parameter √T/σ when q = 1 (else ``None``).
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    p_value: float
    confidence: float
    tried: list[dict[str, Any]] = field(default_factory=list)
    bayes_error: float = 0.5
    mu: float | None = None

    @property
    def refuted(self) -> bool:
        return self.p_value <= 1.0 - self.confidence

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": f"SGM(sigma={self.noise_multiplier:.6g}, q={self.sample_rate:.6g}, T={self.steps})",
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "steps": self.steps,
            "p_value": self.p_value,
            "confidence": self.confidence,
            "refuted": self.refuted,
            "bayes_error": self.bayes_error,
            "mu": self.mu,
            "tried": self.tried,
        }


def claimed_noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """σ of the mechanism a claim names: the smallest noise multiplier whose SGM(σ, q, T) the
    project's accountant proves (ε, δ)-DP (:func:`dpaudit.accounting.calibrate_noise`).

    Args:
        epsilon: the claimed ε.
        delta: its δ.
        sample_rate: the Poisson rate q the claim assumes.
        steps: the steps T the claim assumes.

    Returns:
        σ.

    Raises:
        ConfigurationError: q or T out of range.
        dpaudit.errors.PrivacyParameterError: ε or δ out of range.
    """
    _check_rate_steps(1.0, sample_rate, steps)
    q, t = float(sample_rate), int(steps)
    return float(calibrate_noise(float(epsilon), float(delta), lambda s: PoissonSubsampledGaussian(s, q, t)))


def sgm_hypothesis_test(
    scores,
    coins,
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    max_grad_norm: float = 1.0,
    confidence: float = 0.95,
    fractions=GUESS_FRACTIONS,
    seed: int = 0,
) -> HypothesisTest:
    """Test "this run is SGM(σ, q, T) at clipping bound C" on one run's Dirac canary scores
    (module docstring: the scores' exact law under the claim, the claim's likelihood-ratio guesses,
    Xiang et al.'s order-statistics tail, Bonferroni over ``fractions``).

    Args:
        scores: [m] canary scores (noisy gradient summed over the iterates, raw units).
        coins: [m] bool fair coins (True: the canary was included).
        noise_multiplier: the claimed σ (:func:`claimed_noise_multiplier` from ε, δ, q, T).
        sample_rate: the claimed q.
        steps: the claimed T.
        max_grad_norm: C (the scores are divided by it).
        confidence: 1 − the test's level.
        fractions: the guess counts tried, as fractions of m (pre-registered; each ≥ 1 guess).
        seed: tie-breaking seed.

    Returns:
        The :class:`HypothesisTest`.

    Raises:
        ConfigurationError: mismatched or empty inputs, parameters out of range.

    Shapes:
        scores, coins: [m].
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(coins, dtype=bool).reshape(-1)
    if s.size == 0 or s.size != y.size or not np.isfinite(s).all():
        raise ConfigurationError(f"need as many finite scores as coins (>= 1), got {s.size} and {y.size}")
    if not (0 < confidence < 1):
        raise ConfigurationError(f"confidence must lie in (0, 1), got {confidence!r}")
    if not (max_grad_norm > 0 and math.isfinite(max_grad_norm)):
        raise ConfigurationError(f"max_grad_norm must be a positive number, got {max_grad_norm!r}")
    law = ScoreLaw(float(noise_multiplier), float(sample_rate), int(steps))
    profile = _law_profile(law)
    llr = law.log_likelihood_ratio(s / float(max_grad_norm))
    m = s.size
    counts = sorted({max(1, min(m, int(round(f * m)))) for f in fractions})
    tried = []
    for r in counts:
        u = _guesses(llr, y, r, seed)
        tried.append({"guesses": r, "mistakes": u, "p_value": top_guesses_p_value(profile, m, r, u)})
    p = min(1.0, len(tried) * min(t["p_value"] for t in tried))
    mu = math.sqrt(law.steps) / law.noise_multiplier if law.sample_rate >= 1.0 else None
    return HypothesisTest(
        law.noise_multiplier, law.sample_rate, law.steps, p, float(confidence), tried, profile.bayes_error, mu
    )


# ------------------------------------------------------- the claim's-mechanism (SGM family) bound


@functools.lru_cache(maxsize=4096)
def sgm_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """The project's accountant ε at δ of SGM(σ, q, T) (:func:`dpaudit.accounting.epsilon_for_sigma`
    on :class:`~dpaudit.accounting.PoissonSubsampledGaussian`, the scale every claim is stated in;
    remembered per argument).

    Args:
        noise_multiplier: σ.
        sample_rate: q.
        steps: T.
        delta: δ.

    Returns:
        ε.
    """
    q, t = float(sample_rate), int(steps)
    return float(epsilon_for_sigma(lambda s: PoissonSubsampledGaussian(s, q, t), float(noise_multiplier), float(delta)))


def sgm_bound_label(sample_rate: float, steps: int, confidence: float) -> str:
    """The words the SGM-family bound is printed with, everywhere (what it assumes).

    Args:
        sample_rate: q.
        steps: T.
        confidence: the bound's confidence.

    Returns:
        The label.
    """
    return (
        f"ε lower bound if the run is SGM(σ, q={sample_rate:.4g}, T={int(steps)}) at the clipping bound "
        f"(the claim's mechanism form), {100 * confidence:g} %"
    )


@dataclass(frozen=True)
class SGMEpsilonBound:
    """:func:`sgm_epsilon_lower_bound`'s result: a confidence lower bound on ε valid for runs of
    the claim's mechanism form SGM(σ, q, T) at the clipping bound with σ unknown — not for any
    mechanism (that is :func:`dpaudit.auditing.estimators.audit_epsilon`'s certified bound).

    Attributes:
        epsilon: ε_LB, the accountant's ε at ``delta`` of SGM(σ*, q, T) (0 when no σ is rejected).
        noise_multiplier: σ*, the smallest grid σ rejected with every larger σ checked
            (``None`` when none is).
        sample_rate, steps: q and T of the mechanism form.
        delta: δ of ε.
        confidence: the test's confidence (its level is 1 − confidence, Bonferroni over the
            guess counts, as :func:`sgm_hypothesis_test`).
        max_grad_norm: C.
        claimed_noise_multiplier: σ of the claim when given, else ``None``.
        claim_mechanism_epsilon: the accountant's ε of SGM(claimed σ, q, T) (the claimed ε up to
            the calibration's tolerance), else ``None``.
        refutes_claim: whether the test rejects the claimed σ (⟺ σ* ≤ claimed σ ⟺ ε_LB ≥
            ``claim_mechanism_epsilon``), else ``None``.
        p_value_at_claim: the test's p-value at the claimed σ, else ``None``.
        tests: hypothesis tests evaluated.
    """

    epsilon: float
    noise_multiplier: float | None
    sample_rate: float
    steps: int
    delta: float
    confidence: float
    max_grad_norm: float = 1.0
    claimed_noise_multiplier: float | None = None
    claim_mechanism_epsilon: float | None = None
    refutes_claim: bool | None = None
    p_value_at_claim: float | None = None
    tests: int = 0

    @property
    def label(self) -> str:
        """What the bound assumes, in the words it is printed with (:func:`sgm_bound_label`)."""
        return sgm_bound_label(self.sample_rate, self.steps, self.confidence)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields plus ``label`` and ``valid_for``."""
        return {
            "epsilon": self.epsilon,
            "label": self.label,
            "valid_for": "runs of the claim's mechanism form SGM(sigma, q, T) at the clipping bound, sigma unknown "
            "(not any mechanism)",
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "steps": self.steps,
            "delta": self.delta,
            "confidence": self.confidence,
            "max_grad_norm": self.max_grad_norm,
            "claimed_noise_multiplier": self.claimed_noise_multiplier,
            "claim_mechanism_epsilon": self.claim_mechanism_epsilon,
            "refutes_claim": self.refutes_claim,
            "p_value_at_claim": self.p_value_at_claim,
            "tests": self.tests,
        }


def sgm_epsilon_lower_bound(
    scores,
    coins,
    *,
    sample_rate: float,
    steps: int,
    delta: float,
    max_grad_norm: float = 1.0,
    confidence: float = 0.95,
    fractions=GUESS_FRACTIONS,
    seed: int = 0,
    claimed_noise_multiplier: float | None = None,
    sigma_ratio: float = SIGMA_RATIO,
) -> SGMEpsilonBound:
    r"""The ε lower bound of the claim's mechanism form: :func:`sgm_hypothesis_test` inverted over σ.

    The test rejects more of the noisier σ (a noisier channel makes more mistakes: Xiang et al.'s
    transmission dominance), so its confidence set for σ is an interval below σ* = the smallest
    σ rejected together with every larger one. σ is searched on the geometric grid of ratio
    ``sigma_ratio`` over :data:`SIGMA_RANGE` — bracketed from the claimed σ (or q√T),
    bisected, then, when q < 1, σ* checked against the larger σ at :data:`_MONOTONE_CHECKS` (the
    guesses move with σ; a σ not rejected there moves the search above it). The bound is the
    accountant's ε of SGM(σ*, q, T) at δ (:func:`sgm_epsilon`): with probability ≥ ``confidence``
    a run that *is* SGM(σ, q, T) at the clipping bound, for some unknown σ, has ε above it. It
    is valid for that mechanism form only — canaries that interact, another sampling or another
    clipping are outside it — never for any mechanism. With ``claimed_noise_multiplier`` the
    claimed σ is one of the points tested, so the bound and the test agree exactly:
    ``refutes_claim`` ⟺ the test at the claimed σ refutes ⟺ ε_LB ≥ the claim's mechanism's ε.

    Args:
        scores: [m] canary scores (noisy gradient summed over the iterates, raw units).
        coins: [m] bool fair coins.
        sample_rate: q of the mechanism form.
        steps: T.
        delta: δ of the bound.
        max_grad_norm: C (the scores are divided by it).
        confidence: the test's confidence.
        fractions: the guess counts tried (as :func:`sgm_hypothesis_test`).
        seed: tie-breaking seed.
        claimed_noise_multiplier: the claim's σ (:func:`claimed_noise_multiplier`), or ``None``.
        sigma_ratio: the ratio of the σ grid (> 1; coarser: fewer tests and accountant calls,
            a bound lower by at most that factor in σ).

    Returns:
        The :class:`SGMEpsilonBound`.

    Raises:
        ConfigurationError: mismatched or empty inputs, parameters out of range.

    Shapes:
        scores, coins: [m].
    """
    _check_rate_steps(1.0, sample_rate, steps)
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ConfigurationError(f"delta must lie in (0, 1), got {delta!r}")
    if claimed_noise_multiplier is not None:
        _check_rate_steps(claimed_noise_multiplier, sample_rate, steps)
    if not (isinstance(sigma_ratio, (int, float)) and 1.0 < sigma_ratio <= 2.0):
        raise ConfigurationError(f"sigma_ratio must lie in (1, 2], got {sigma_ratio!r}")
    q, t, delta = float(sample_rate), int(steps), float(delta)
    step = math.log(sigma_ratio)
    k_min, k_max = (int(math.ceil(math.log(v) / step)) for v in SIGMA_RANGE)
    p_values: dict[float, float] = {}

    def p_value(sigma: float) -> float:
        if sigma not in p_values:
            p_values[sigma] = sgm_hypothesis_test(
                scores,
                coins,
                noise_multiplier=sigma,
                sample_rate=q,
                steps=t,
                max_grad_norm=max_grad_norm,
                confidence=confidence,
                fractions=fractions,
                seed=seed,
            ).p_value
        return p_values[sigma]

    level = 1.0 - confidence

    def grid(k: int) -> float:
        return math.exp(k * step)

    def rejects(k: int) -> bool:
        return p_value(grid(k)) <= level

    def upward(lo: int) -> int | None:
        """Above grid index ``lo`` (not rejected): the smallest rejected index, by doubling then
        bisection; ``None`` when not even k_max is rejected."""
        width = 1
        while True:
            k = min(lo + width, k_max)
            if rejects(k):
                return bisect(lo, k)
            if k == k_max:
                return None
            lo, width = k, 2 * width

    def bisect(lo: int, hi: int) -> int:
        """The smallest rejected index in (lo, hi], lo not rejected and hi rejected."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if rejects(mid) else (mid, hi)
        return hi

    # the bracket: from the claimed σ (tested exactly, off the grid) or from q√T
    start = float(claimed_noise_multiplier) if claimed_noise_multiplier is not None else q * math.sqrt(t)
    below = int(math.ceil(math.log(start) / step)) - 1  # the largest grid index strictly below start
    sigma_star: float | None
    if p_value(start) <= level:  # σ* <= start: the grid below it
        if not rejects(below):
            sigma_star = start
        else:
            hi, width, lo = below, 1, below
            while lo > k_min and rejects(lo):
                hi, lo, width = lo, max(lo - width, k_min), 2 * width
            sigma_star = grid(k_min) if rejects(lo) else grid(bisect(lo, hi))
    else:
        found = upward(below + 1 if grid(below + 1) <= start else below)
        sigma_star = None if found is None else grid(found)
    # σ* checked against larger σ; a σ not rejected moves the search above it
    for _ in range(8 if q < 1.0 else 0):
        if sigma_star is None:
            break
        base = int(math.floor(math.log(sigma_star) / step))
        larger = (min(base + max(1, round(math.log(c) / step)), k_max) for c in _MONOTONE_CHECKS)
        bad = next((k for k in larger if not rejects(k)), None)
        if bad is None:
            break
        found = upward(bad)
        sigma_star = None if found is None else grid(found)
    claim_kw: dict[str, Any] = {}
    if claimed_noise_multiplier is not None:
        sigma_c = float(claimed_noise_multiplier)
        refutes = sigma_star is not None and sigma_star <= sigma_c
        claim_kw = {
            "claimed_noise_multiplier": sigma_c,
            "claim_mechanism_epsilon": sgm_epsilon(sigma_c, q, t, delta),
            "refutes_claim": bool(refutes),
            "p_value_at_claim": float(p_values[sigma_c]),
        }
    epsilon = 0.0 if sigma_star is None else sgm_epsilon(sigma_star, q, t, delta)
    return SGMEpsilonBound(
        epsilon=float(epsilon),
        noise_multiplier=sigma_star,
        sample_rate=q,
        steps=t,
        delta=delta,
        confidence=float(confidence),
        max_grad_norm=float(max_grad_norm),
        tests=len(p_values),
        **claim_kw,
    )


# ---------------------------------------------------------------- Xiang et al.'s parametric bound


def epsilon_delta_profile(epsilon: float, delta: float) -> Profile:
    """The (ε, δ) four-atom pair's :class:`Profile` (Dong, Roth & Su 2022, Prop. 2.5's extremal
    pair): mass 1 − δ of randomized response at ε, δ of atoms that reveal the bit."""
    rr = 1.0 / (1.0 + math.exp(min(float(epsilon), 700.0)))
    return Profile(np.array([1.0 - delta, delta]), np.array([(1.0 - delta) * rr, 0.0]))


def gaussian_profile(mu: float) -> Profile:
    """The μ-GDP pair's :class:`Profile` (q = 1, one step: N(0, 1) against N(μ, 1))."""
    return ScoreLaw(1.0 / max(float(mu), 1e-9), 1.0, 1).profile()


def _extreme_mistakes(s: np.ndarray, y: np.ndarray, r: int, seed: int) -> int:
    """Mistakes of the r scores farthest from the median ("in" above it): a decoder that needs no
    model of the scores."""
    return _guesses(s - np.median(s), y, r, seed)


def xiang_epsilon_lower_bound(
    scores,
    coins,
    *,
    delta: float,
    confidence: float = 0.95,
    family: str = "epsilon-delta",
    fractions=GUESS_FRACTIONS,
    seed: int = 0,
    upper: float = 20.0,
) -> dict[str, Any]:
    """Xiang et al. (2025)'s one-run ε lower bound: the largest parameter of ``family`` whose
    order-statistics tail (:func:`top_guesses_p_value`) rejects the observed mistakes, Bonferroni
    over ``fractions``; the guesses are the scores farthest from their median.

    Valid for the mechanisms of ``family`` whose canaries behave as independent channels (their
    theorem); "epsilon-delta": the (ε, δ) four-atom pair; "gaussian": μ-GDP, ε = ε(μ) at δ.

    Args:
        scores: [m] scores, higher = "more likely included".
        coins: [m] bool fair coins.
        delta: δ at which ε is stated.
        confidence: 1 − β.
        family: ``"epsilon-delta"`` or ``"gaussian"``.
        fractions: guess counts tried (fractions of m).
        seed: tie-breaking seed.
        upper: the largest parameter searched.

    Returns:
        ``{"epsilon": ε_LB, "parameter": ε or μ rejected, "guesses": r, "mistakes": u}``.

    Raises:
        ConfigurationError: an unknown family or mismatched inputs.
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(coins, dtype=bool).reshape(-1)
    if s.size == 0 or s.size != y.size:
        raise ConfigurationError(f"need as many scores as coins (>= 1), got {s.size} and {y.size}")
    if family not in ("epsilon-delta", "gaussian"):
        raise ConfigurationError(f"family must be 'epsilon-delta' or 'gaussian', got {family!r}")
    m = s.size
    counts = sorted({max(1, min(m, int(round(f * m)))) for f in fractions})
    level = (1.0 - confidence) / len(counts)
    best = {"epsilon": 0.0, "parameter": 0.0, "guesses": None, "mistakes": None}
    for r in counts:
        u = _extreme_mistakes(s, y, r, seed)

        def rejects(theta: float, r=r, u=u) -> bool:
            prof = epsilon_delta_profile(theta, delta) if family == "epsilon-delta" else gaussian_profile(theta)
            return top_guesses_p_value(prof, m, r, u) <= level

        top = upper if family == "epsilon-delta" else 10.0
        if not rejects(1e-9):
            continue
        lo, hi = 1e-9, top
        if rejects(hi):
            lo = hi
        else:
            for _ in range(40):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if rejects(mid) else (lo, mid)
        eps = lo if family == "epsilon-delta" else float(gaussian_epsilon(lo, delta))
        if eps > best["epsilon"]:
            best = {"epsilon": float(eps), "parameter": float(lo), "guesses": r, "mistakes": u}
    return best
