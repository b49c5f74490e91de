r"""DP-SGD / DP-Adam on per-example tensors (Abadi et al. 2016) with ghost clipping.

A noisy run follows a :class:`PoissonSchedule` fixed **before** any private data is read: its
Poisson rate q, its number of steps T and the normaliser of the noisy sum (the expected batch
size) come from public hyperparameters and declared facts (:mod:`dpaudit.release`), never from
the number n of training examples — under node-level DP n itself is private, and a rate
q = B/n, ⌈n/B⌉ steps per epoch or a division by ⌊nq⌋ would each let neighbours of n and n − 1
nodes be told apart through the public spec or the weights' scale.

Each step draws a Poisson batch (every one of the n examples independently with probability q,
the law of opacus' ``UniformWithReplacementSampler``; drawn in O(B) as a Binomial(n, q) size and
a uniform subset of it, the same distribution: :mod:`dpaudit.training.sampling`), clips every per-example gradient
to L2 norm C (factor min(1, C/(‖g_i‖ + 10⁻⁶)), as opacus), sums, adds N(0, σ²C²I) per parameter
(drawn in parameter order from a CPU generator seeded ``seed + 1``, so CPU and CUDA runs draw
the same noise) and divides by the schedule's expected batch size before the optimiser step. An
empty batch still takes a noise-only step. The privacy cost is exactly
:class:`~dpaudit.accounting.PoissonSubsampledGaussian` (σ, q, T) under add/remove of one example
(Mironov et al. 2019; the sampled set is random, the rate is not): T steps are taken whatever n is.

How the per-example norms are obtained (ghost norms or opacus' per-example gradients,
:mod:`~dpaudit.training.dpsgd.clipping`) does not change any of that. With
``noise_multiplier = 0`` the same model trains on shuffled minibatches of min(B, n) examples
without clipping or noise (the non-private variant of a private recipe): nothing is accounted,
so that path may read n and needs no schedule.

White-box audits (:class:`DiracCanaries`, entered with :func:`inserting_canaries` around a
defense's ``fit``) add canary gradients to one noisy run's clipped sum and record what the
auditor sees of every iterate; outside that context the loop is untouched.

The package, one concern per module (every name below is importable from here):

* :mod:`~dpaudit.training.dpsgd.schedule` — :class:`PoissonSchedule`, planned from public inputs;
* :mod:`~dpaudit.training.dpsgd.planning` — σ of a plan (:func:`noise_for_plan`), :func:`plan_mismatch`;
* :mod:`~dpaudit.training.dpsgd.optimizers` — :func:`make_optimizer`;
* :mod:`~dpaudit.training.dpsgd.clipping` — the ghost and per-sample clippers;
* :mod:`~dpaudit.training.dpsgd.canaries` — :class:`DiracCanaries`, :class:`CanaryLaw`, :func:`inserting_canaries`;
* :mod:`~dpaudit.training.dpsgd.loop` — :func:`train_dp_sgd` and :func:`noisy_gradients`.
"""

from dpaudit.training.dpsgd.canaries import (
    CanaryDesignFn,
    CanaryLaw,
    DiracCanaries,
    PoissonInclusion,
    canaries_for,
    inserting_canaries,
)
from dpaudit.training.dpsgd.clipping import (
    CLIP_EPS,
    GhostClipper,
    GhostClippingUnsupported,
    Loss,
    PerSampleClipper,
    make_clipper,
)
from dpaudit.training.dpsgd.loop import noisy_gradients, train_dp_sgd
from dpaudit.training.dpsgd.optimizers import make_optimizer
from dpaudit.training.dpsgd.planning import CALIBRATION_REL_TOL, CALIBRATION_SIGMA_MIN, noise_for_plan, plan_mismatch
from dpaudit.training.dpsgd.schedule import PoissonSchedule, poisson_sample_rate, steps_for

__all__ = [
    "CALIBRATION_REL_TOL",
    "CALIBRATION_SIGMA_MIN",
    "CLIP_EPS",
    "CanaryDesignFn",
    "CanaryLaw",
    "DiracCanaries",
    "GhostClipper",
    "GhostClippingUnsupported",
    "Loss",
    "PerSampleClipper",
    "PoissonInclusion",
    "PoissonSchedule",
    "canaries_for",
    "inserting_canaries",
    "make_clipper",
    "make_optimizer",
    "noise_for_plan",
    "noisy_gradients",
    "plan_mismatch",
    "poisson_sample_rate",
    "steps_for",
    "train_dp_sgd",
]
