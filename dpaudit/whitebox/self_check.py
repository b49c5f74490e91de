r"""The gradient canaries' self-check: do the canaries sit where the guarantee is stated, at the
scale the claim is about? A canary is one example of norm C added to the **clipped sum** before
the noise N(0, σ²C²); placed elsewhere it is louder (or quieter) than any example of the run, and
its verdict says nothing about the claim. Three placement errors are recognisable from what
:meth:`~dpaudit.whitebox.GradientCanaries.inject` and :meth:`~dpaudit.whitebox.GradientCanaries.observe`
see, and each is refused with one line that says how to place the canaries
(:class:`~dpaudit.errors.ConfigurationError`, a usage error — never a verdict on the claim):

* **observed after a rescaling** (after the division by the batch size, after the optimizer's
  step): ``observe`` must get ``inject``'s output plus the noise. The least-squares slope
  :math:`a = \sum_t \langle o_t, i_t\rangle / \sum_t \lVert i_t\rVert^2` of the observed sums
  :math:`o_t` on the injected ones :math:`i_t` is 1 whatever the noise (the noise is independent
  of what it is added to); refused when :math:`|a - 1| > \max(0.1, 6\,\mathrm{se}(a))`. No noise
  bug moves the slope, so this check cannot hide one.
* **injected after the division by the batch size** (the loop adds σC/B to the mean): the
  canary, still of norm C, is then B times louder than an example, and a correct run would be
  "refuted". Refused when all three hold:

  1. the noise :math:`o_t - i_t` along the non-canary coordinates has standard deviation
     :math:`s \le \tfrac12\,\sigma_{\text{claim}} C` (and :math:`s > 0`), where
     :math:`\sigma_{\text{claim}}` is the smallest noise multiplier for which
     PoissonSubsampledGaussian(σ, q, T) meets the claim (ε, δ) (the tightest accountant,
     :func:`dpaudit.accounting.calibrate_noise`);
  2. every clipped sum the canaries joined had norm at most 2C — what a sum of about B clipped
     examples divided by B is, and what the undivided sum of a batch is not;
  3. at least one of them had norm ≥ C/100 (there were real gradients to divide).

  **Why this cannot hide a noise bug.** A loop that places the canaries correctly and adds too
  little noise fails (1) but passes (2) only if the clipped gradients of each of its T batches
  sum to less than two examples' worth — at every step of the run; such a loop is then refused,
  with the shortfall named (the line says how much too little noise the loop adds if the
  canaries were placed before the division), and is never reported as consistent with the
  claim. Every other noise bug (σ ÷ 10, σ × 0.6, no noise at all) is audited and refuted as
  before: the check only ever withholds a verdict, and only on that structural evidence.
* **a wrong sample rate** (when the batch sizes and the data set's size are known — Opacus'
  per-sample gradients give the batch sizes, a loop of your own passes ``inject(...,
  batch_size=b)``; ``attach(..., dataset_size=N)``): the observed rate
  :math:`\hat q = \sum_t b_t / (N T)` against the ``sample_rate`` the canaries were attached
  with, refused when :math:`|\hat q - q| > \max(0.1\,q, 6\sqrt{q(1-q)/(NT)})`. A rate larger
  than the loop's makes the canaries stronger than its examples (a false alarm), a smaller one,
  weaker.

**Canaries given as examples, before clipping** (:meth:`~dpaudit.whitebox.GradientCanaries.inject_examples`):
the loop's per-example gradients get one extra row per sampled canary, of norm k·C (k =
``example_norm``, 4 by default) along its coordinate, *before* the loop clips; a loop that clips at
C turns each into C·e, one example of the claimed mechanism, and a loop that does not clip (or
clips after the noise, or at a larger bound) lets it through louder, so its own scores refute
it. Here the canaries do not see the loop's clipped sum, so the checks are:

* **the canaries' gain** :math:`a = \sum_t \langle (o_t - r_t)_K, c_t\rangle / \sum_t \lVert c_t\rVert^2`
  along the canary coordinates K, where :math:`c_t` is what a loop clipping at C adds (C along
  each sampled canary) and :math:`r_t` the real rows clipped at C (computed here). A correct loop
  has a = 1; a loop that does not clip the canaries has 1 < a ≤ k — a bug, audited and refuted,
  never refused; a < 1 (observed after the division by the batch size or after the optimizer's
  step, or clipped at a smaller bound) or a > k (observed sums rescaled up) is refused when off
  by more than :data:`SLOPE_TOLERANCE` (relative) and :data:`SLOPE_Z` standard errors;
* **the sample rate**, as above (the batch sizes are the rows given, counted here).

"Injected after the division" cannot happen to these canaries: they go through the loop's own
clipping, summing, division and noise, as its examples do.

**The noise test** (a test of the claim's mechanism, not of placement; loops of your own only,
where the canaries see the noise itself): along the D − m non-canary coordinates the noise
:math:`o_t - i_t` (or :math:`o_t - r_t`) of a run that *is* SGM(σ, q, T) is i.i.d. N(0, σ²C²), so
:math:`\sum (o - i)^2 / (σ C)^2 \sim \chi^2_n` over the n = (D − m)·T coordinate-steps and the
lower tail is the exact p-value of "the loop adds at least the claimed noise" (σ = the claim's,
from ε, δ, q, T). With millions of coordinate-steps it resolves the noise to a few 0.01 % — a
step missing from the accountant (0.35 % less noise than T + 1 steps need, at the zoo's q and T)
is many standard errors away, where the canaries' scores would need ≈ 450,000 canaries. Anything
the loop adds besides the noise (real gradients it clips differently) only raises the measured
noise, so the test never refutes a loop for that; it is recorded (``noise_test``), never a refusal.

The numbers measured go into the record (``self_check``) whether or not the run is refused.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from scipy import stats

from dpaudit.accounting import PoissonSubsampledGaussian, calibrate_noise, epsilon_for_sigma
from dpaudit.errors import PrivacyParameterError

#: slope tolerance (absolute) and its z-score for "observed after a rescaling"
SLOPE_TOLERANCE, SLOPE_Z = 0.1, 6.0
#: "injected after the division": the noise at most this fraction of σ_claim·C ...
NOISE_SHORT = 0.5
#: ... every clipped sum the canaries joined at most this many C, and one at least this many C
DIVIDED_SUM_MAX, DIVIDED_SUM_MIN = 2.0, 0.01
#: sample rate tolerance (relative) and z-score
RATE_TOLERANCE, RATE_Z = 0.1, 6.0


class PlacementCheck:
    """Running sums (float64, O(1) memory beyond one step's injected sums) of what the canaries
    see, and the refusal they imply (module docstring).

    Args:
        canary_mask: [D] bool, the canary coordinates of the flattened parameters.
        max_grad_norm: C.
        placement: whether the loop places the canaries itself (``inject``/``observe``); Opacus'
            hook places them, and only the sample rate is checked.
    """

    def __init__(self, canary_mask: torch.Tensor, max_grad_norm: float, *, placement: bool):
        self.others = ~canary_mask.reshape(-1).bool()
        self.clip = float(max_grad_norm)
        self.placement = placement
        self.steps = 0
        self.obs_inj = self.inj2 = self.obs2 = self.noise2 = 0.0
        self.noise_count = 0
        self.real_max = 0.0
        self.batch_total = 0
        self.batch_steps = 0
        self._injected: torch.Tensor | None = None
        # canaries given as examples (before clipping): None until the first step says which
        self.examples: bool | None = None
        self.example_norm = math.nan
        self.gain_num = self.gain_den = self.gain_res2 = 0.0
        self.gain_count = 0
        self._real: torch.Tensor | None = None
        self._canary: torch.Tensor | None = None

    def example_rows(self, real_clipped: torch.Tensor, canary: torch.Tensor, example_norm: float, rows: int) -> None:
        """One step of canaries given as examples (before clipping).

        Args:
            real_clipped: [D] the real rows clipped at C and summed (what a correct loop sums).
            canary: [D] what a loop clipping at C adds for this step's canaries (C along each).
            example_norm: the canary rows' norm, in units of C.
            rows: the real rows given (this step's batch size).
        """
        self.examples, self.example_norm = True, float(example_norm)
        self.real_max = max(self.real_max, float(real_clipped.double().norm()))
        self._real, self._canary = real_clipped.detach().double(), canary.detach().double()
        self.batch(rows)

    def injected(self, real: torch.Tensor, injected: torch.Tensor, batch_size: int | None) -> None:
        """One step's clipped sum before (``real``) and after (``injected``) the canaries, flat [D]."""
        self.examples = False
        self.real_max = max(self.real_max, float(real.double().norm()))
        self._injected = injected.detach().double().clone()
        self.batch(batch_size)

    def batch(self, batch_size: int | None) -> None:
        if batch_size is not None:
            self.batch_total += int(batch_size)
            self.batch_steps += 1

    def observed(self, noisy: torch.Tensor) -> None:
        """One step's noisy sum, flat [D] (after :meth:`injected` or :meth:`example_rows`)."""
        obs = noisy.detach().double()
        if self.examples:
            self._observed_examples(obs)
            return
        inj, self._injected = self._injected, None
        noise = obs - inj
        self.steps += 1
        self.obs_inj += float(obs @ inj)
        self.inj2 += float(inj @ inj)
        self.obs2 += float(obs @ obs)
        self.noise2 += float(noise[self.others].pow(2).sum())
        self.noise_count += int(self.others.sum())

    def _observed_examples(self, obs: torch.Tensor) -> None:
        real, canary, self._real, self._canary = self._real, self._canary, None, None
        rest = obs - real  # a correct loop: the canaries' C·e plus the noise
        mask = ~self.others
        on, c = rest[mask], canary[mask]
        self.steps += 1
        self.gain_num += float(on @ c)
        self.gain_den += float(c @ c)
        self.gain_res2 += float(on @ on)
        self.gain_count += int(mask.sum())
        self.noise2 += float(rest[self.others].pow(2).sum())
        self.noise_count += int(self.others.sum())

    def gain(self) -> tuple[float, float]:
        """(a, se(a)): the canaries' amplitude in units of a clipped canary (canaries given as
        examples; NaN before any canary was sampled)."""
        if self.gain_den <= 0:
            return math.nan, math.nan
        a = self.gain_num / self.gain_den
        residual = max(self.gain_res2 - 2 * a * self.gain_num + a * a * self.gain_den, 0.0)
        return a, math.sqrt(residual / max(self.gain_count, 1) / self.gain_den)

    # --------------------------------------------------------------------------------- numbers
    def slope(self) -> tuple[float, float]:
        """(a, se(a)): the observed sums regressed on the injected ones (NaN without a signal)."""
        if self.inj2 <= 0:
            return math.nan, math.nan
        a = self.obs_inj / self.inj2
        residual = max(self.obs2 - 2 * a * self.obs_inj + a * a * self.inj2, 0.0)
        count = max(self.noise_count, 1)
        return a, math.sqrt(residual / count / self.inj2)

    def noise_test(self, claimed_sigma: float) -> dict[str, Any] | None:
        """The χ² test of "the noise along the non-canary coordinates has std ≥ σ·C" (module
        docstring), or ``None`` where the loop's noise is not seen (Opacus' hook, no step).

        Args:
            claimed_sigma: the claim's noise multiplier σ.

        Returns:
            ``{"noise_std_over_claimed", "coordinate_steps", "z", "p_value"}``: the ratio of the
            measured std to σ·C, the count n, the ratio's z-score (√(2n)·(ratio − 1)) and the lower
            χ²_n tail.
        """
        if not (self.placement and self.noise_count and claimed_sigma > 0):
            return None
        n = self.noise_count
        statistic = self.noise2 / (claimed_sigma * self.clip) ** 2
        ratio = math.sqrt(statistic / n)
        return {
            "noise_std_over_claimed": ratio,
            "coordinate_steps": n,
            "z": math.sqrt(2 * n) * (ratio - 1),
            "p_value": float(stats.chi2.cdf(statistic, n)),
        }

    def noise_std(self) -> float:
        return math.sqrt(self.noise2 / self.noise_count) if self.noise_count else math.nan

    def summary(self) -> dict[str, Any]:
        a, se = self.slope()
        out: dict[str, Any] = {"steps": self.steps, "placement_checked": self.placement}
        if self.placement and self.examples:
            g, g_se = self.gain()
            out.update(
                inserted="examples, before clipping",
                example_norm=self.example_norm,
                canary_gain=g,
                canary_gain_se=g_se,
                noise_std=self.noise_std(),
                max_clipped_sum_over_c=self.real_max / self.clip,
            )
        elif self.placement:
            out.update(
                inserted="clipped sum",
                observed_slope=a,
                observed_slope_se=se,
                noise_std=self.noise_std(),
                max_clipped_sum_over_c=self.real_max / self.clip,
            )
        if self.batch_steps:
            out["mean_batch_size"] = self.batch_total / self.batch_steps
        return out

    # -------------------------------------------------------------------------------- refusals
    def refusal(
        self,
        *,
        epsilon: float,
        delta: float,
        sample_rate: float,
        steps: int,
        dataset_size: int | None,
        record: dict[str, Any],
    ) -> str | None:
        """The one-line refusal, or ``None``; ``record`` (the audit's ``self_check``) gets the
        numbers measured."""
        record.update(self.summary())
        if self.batch_steps and dataset_size:
            seen = self.batch_total / (dataset_size * self.batch_steps)
            record["observed_sample_rate"] = seen
            sd = math.sqrt(sample_rate * (1 - sample_rate) / (dataset_size * self.batch_steps))
            if abs(seen - sample_rate) > max(RATE_TOLERANCE * sample_rate, RATE_Z * sd):
                return (
                    f"the batches held {self.batch_total / self.batch_steps:.1f} of dataset_size={dataset_size} "
                    f"examples on average, a sample rate of {seen:.4g}, but the canaries were attached with "
                    f"sample_rate={sample_rate:g}: attach them with the rate the loop samples at (Opacus: "
                    "loader.sample_rate), or the canaries are stronger or weaker than its examples"
                )
        if not self.placement or not self.steps:
            return None
        if self.examples:
            return self._gain_refusal()
        a, se = self.slope()
        if math.isfinite(a) and abs(a - 1) > max(SLOPE_TOLERANCE, SLOPE_Z * se):
            return (
                f"the noisy sums given to observe() are {a:.4g}× the sums inject() returned (expected 1: the same "
                "sums plus the noise): call observe() on inject()'s output plus the noise, before dividing by the "
                "batch size and before the optimizer's step"
            )
        return self._divided(epsilon, delta, sample_rate, steps, record)

    def _gain_refusal(self) -> str | None:
        a, se = self.gain()
        if not math.isfinite(a):
            return None
        k = self.example_norm
        if a < 1 - max(SLOPE_TOLERANCE, SLOPE_Z * se):
            return (
                f"the canaries given as examples came through at {a:.4g}×C (expected C: clipped at C, summed, plus "
                "the noise): clip the rows inject_examples() returned at C, and call observe() on their sum plus the "
                "noise, before dividing by the batch size and before the optimizer's step"
            )
        if a > k * (1 + SLOPE_TOLERANCE) + SLOPE_Z * se:
            return (
                f"the canaries given as examples came through at {a:.4g}×C, more than the {k:g}×C they were given: "
                "call observe() on the sum of the rows inject_examples() returned (clipped) plus the noise, not on a "
                "rescaled sum"
            )
        return None

    def _divided(self, epsilon, delta, sample_rate, steps, record) -> str | None:
        s, C = self.noise_std(), self.clip
        small_sums = DIVIDED_SUM_MIN * C <= self.real_max <= DIVIDED_SUM_MAX * C
        if not (small_sums and math.isfinite(s) and s > 0):
            return None

        def family(v):
            return PoissonSubsampledGaussian(v, sample_rate, steps)

        try:
            # one ledger evaluation decides: is twice the observed noise enough for the claim? (ε falls with σ)
            if epsilon_for_sigma(family, s / (NOISE_SHORT * C), delta) <= epsilon:
                return None
            sigma = calibrate_noise(epsilon, delta, family)  # only for the message
        except PrivacyParameterError:
            return None
        ratio = s / (sigma * C)
        record.update(claimed_noise_multiplier=sigma, noise_std_over_claimed=ratio)
        return (
            f"observed noise std {s:.4g} along non-canary coordinates, expected σ·C = {sigma * C:.4g} for the claim "
            f"(σ = {sigma:.4g} from ε, δ, q, T) — σ·C/B with B ≈ {1 / ratio:.0f} — and every clipped sum the canaries "
            f"joined had norm ≤ {self.real_max / C:.2f}·C, as a sum divided by the batch size has: inject/observe the "
            "canaries on the clipped sum before dividing by the batch size (or, if they are placed so, the loop adds "
            f"{1 / ratio:.0f}× too little noise)"
        )
