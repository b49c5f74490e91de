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

How the per-example norms are obtained does not change any of that (``clipping``):

* ``"ghost"`` (default) — ghost clipping / book-keeping (Goodfellow 2015; Li et al. 2022; Bu
  et al. 2023): for a linear layer z_i = W a_i + b applied once to example i's own input
  a_i ∈ ℝ^d, the per-example gradient is ∇W_i = g_i a_iᵀ with g_i = ∂L_i/∂z_i, so
  ‖∇W_i‖²_F = ‖g_i‖²·‖a_i‖² and ‖∇b_i‖² = ‖g_i‖² — no per-example gradient is materialised.
  One backward pass to the layer outputs (not to the weights) gives every g_i; the clipped sum
  is then Σ_i c_i g_i a_iᵀ = (c ⊙ G)ᵀA, one matmul per layer (sparse × dense for
  :class:`~dpaudit.nn.SparseFeatures` inputs). Applies when every trainable parameter belongs
  to an ``nn.Linear`` called at most once per forward on 2-D input (MLPs, GAP's modules).
* ``"per-sample"`` — opacus' ``GradSampleModule`` materialises per-example gradients (any
  layer opacus supports); used automatically when ghost clipping does not apply, and as the
  reference the ghost path is tested against.

Modules that mix examples (BatchNorm) are refused: per-example clipping would not bound one
example's influence. With ``noise_multiplier = 0`` the same model trains on shuffled
minibatches of min(B, n) examples without clipping or noise (the non-private variant of a
private recipe): nothing is accounted, so that path may read n and needs no schedule.

White-box audits (:class:`DiracCanaries`, entered with :func:`inserting_canaries` around a
defense's ``fit``) add canary gradients to one noisy run's clipped sum and record what the
auditor sees of every iterate; outside that context the loop is untouched.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from dpaudit.accounting.calibrate import MechanismsForSigma, calibrate_noise, epsilon_for_sigma
from dpaudit.accounting.mechanisms import PoissonSubsampledGaussian
from dpaudit.errors import ConfigurationError, PrivacyParameterError
from dpaudit.nn import SparseFeatures
from dpaudit.progress import steps as progress_steps
from dpaudit.training.sampling import poisson_subset

log = logging.getLogger(__name__)


def poisson_sample_rate(num_examples: int, batch_size: int) -> float:
    """The sampling rate opacus uses for a loader of ``num_examples`` and ``batch_size``."""
    return 1.0 / math.ceil(num_examples / min(batch_size, num_examples))


def steps_for(num_examples: int, batch_size: int, epochs: int) -> int:
    return epochs * math.ceil(num_examples / min(batch_size, num_examples))


@dataclass(frozen=True)
class PoissonSchedule:
    r"""A DP-SGD schedule fixed **before** any private data is read: Poisson rate q, number of
    steps, and the public normaliser of the noisy sum (the expected batch size).

    Under node-level DP the number of training examples n is private (add/remove one node
    changes it), so q = B/n, ⌈n/B⌉ steps per epoch or a division by ⌊nq⌋ would each let a
    neighbour be told apart through a public schedule or the weights' scale. Every field here
    comes from public hyperparameters and declared facts (:mod:`dpaudit.release`):

    * ``sample_rate`` given (a hyperparameter): q = sample_rate, ⌈1/q⌉ steps per epoch, the sum
      divided by ``batch_size`` (the expected batch the rate was chosen for);
    * else the declared training-set size n̂: q = 1/⌈n̂/B⌉, ⌈n̂/B⌉ steps per epoch (opacus'
      loader rule, on n̂), the sum divided by n̂·q.

    With neither, :meth:`plan` refuses (one line, before training): no size may be read.
    ``epochs`` splits the ``steps`` into equal epochs (``on_epoch`` callbacks run between them).
    """

    sample_rate: float
    steps: int
    expected_batch_size: float
    source: str
    epochs: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.sample_rate <= 1.0:
            raise ConfigurationError(f"sample_rate must lie in (0, 1], got {self.sample_rate}")
        if self.epochs < 1 or self.steps < 1 or self.steps % self.epochs:
            raise ConfigurationError(
                f"a schedule of {self.steps} steps cannot be split into {self.epochs} equal epochs"
            )
        if not self.expected_batch_size > 0:
            raise ConfigurationError(f"expected_batch_size must be > 0, got {self.expected_batch_size}")

    @property
    def steps_per_epoch(self) -> int:
        return self.steps // self.epochs

    @classmethod
    def plan(
        cls, *, batch_size: int, epochs: int, declared_size: int | None, sample_rate: float | None = None
    ) -> PoissonSchedule:
        if sample_rate is not None:
            if not 0.0 < sample_rate <= 1.0:
                raise ConfigurationError(f"sample_rate must lie in (0, 1], got {sample_rate}")
            per_epoch = math.ceil(1.0 / sample_rate)
            return cls(
                float(sample_rate),
                int(epochs) * per_epoch,
                float(batch_size),
                "sample_rate hyperparameter",
                int(epochs),
            )
        if declared_size is None:
            raise ConfigurationError(
                "DP-SGD needs its Poisson rate fixed in advance: set the sample_rate hyperparameter, or declare the "
                "training-set size public (a registry benchmark does; for your own graph --dataset-option "
                "declare_num_train=N, or from_data(..., public_facts=...) in Python)"
            )
        n = int(declared_size)
        q = poisson_sample_rate(n, batch_size)
        return cls(
            q, steps_for(n, batch_size, epochs), float(int(n * q)), f"declared training-set size {n}", int(epochs)
        )

    def to_dict(self) -> dict:
        return {"sample_rate": self.sample_rate, "steps": self.steps,
                "expected_batch_size": self.expected_batch_size, "source": self.source}  # fmt: skip


#: calibrate_noise's tolerance and floor, which :func:`noise_for_plan` re-checks a recorded σ against
CALIBRATION_REL_TOL = 1e-3
CALIBRATION_SIGMA_MIN = 1e-3


def noise_for_plan(
    target_epsilon: float,
    delta: float,
    mechanisms_for_sigma: MechanismsForSigma,
    *,
    recorded: float | None = None,
    accountant: str = "auto",
) -> float:
    """σ of a plan: :func:`~dpaudit.accounting.calibrate_noise` — or, when a saved model is
    re-planned (:meth:`dpaudit.training.defense.Defense.replan`), its ``recorded`` σ when that σ meets
    calibrate_noise's own contract: ε(σ) ≤ target and ε(σ / (1 + tol)) > target (or σ at the
    floor). A freshly calibrated σ always meets it, so an unmodified model re-plans to its own σ
    in two ε evaluations instead of a full calibration (seconds per load), and independently of
    floating-point details of the calibration's search path on another machine; a σ edited by
    more than the tolerance fails it and is re-calibrated, so it no longer matches the plan.
    """
    if recorded is not None and math.isfinite(recorded) and recorded > 0:
        if not (target_epsilon > 0 and math.isfinite(target_epsilon)) or not 0 < delta < 1:
            raise PrivacyParameterError(f"cannot plan noise for ε = {target_epsilon}, δ = {delta}")
        fits = epsilon_for_sigma(mechanisms_for_sigma, recorded, delta, accountant) <= target_epsilon
        tight = recorded <= CALIBRATION_SIGMA_MIN or (
            epsilon_for_sigma(mechanisms_for_sigma, recorded / (1.0 + CALIBRATION_REL_TOL), delta, accountant)
            > target_epsilon
        )
        if fits and tight:
            return float(recorded)
    return calibrate_noise(
        target_epsilon, delta, mechanisms_for_sigma, sigma_min=CALIBRATION_SIGMA_MIN, rel_tol=CALIBRATION_REL_TOL,
        accountant=accountant,
    )  # fmt: skip


def plan_mismatch(recorded: Any, planned: Any, path: str, rtol: float = 1e-6) -> str | None:
    """Where a saved plan section (a card's per-defense dict) differs from the plan re-derived
    from the card's public inputs, as ``"path.key: planned X, the card records Y"``; ``None`` when
    they agree. Numbers are compared to ``rtol`` (the same computation on another machine may
    differ in its last bits), nested dicts key by key, anything else exactly."""
    if isinstance(planned, dict):
        if not isinstance(recorded, dict):
            return f"{path}: planned a section, the card records {recorded!r}"
        for key in sorted(set(planned) | set(recorded)):
            if key not in planned or key not in recorded:
                return f"{path}.{key}: planned {planned.get(key, '<absent>')!r}, the card records {recorded.get(key, '<absent>')!r}"
            found = plan_mismatch(recorded[key], planned[key], f"{path}.{key}", rtol)
            if found:
                return found
        return None
    numbers = (int, float)
    if (
        isinstance(planned, numbers)
        and isinstance(recorded, numbers)
        and not isinstance(planned, bool)
        and not isinstance(recorded, bool)
    ):
        if math.isclose(float(recorded), float(planned), rel_tol=rtol, abs_tol=1e-12):
            return None
    elif recorded == planned:
        return None
    return f"{path}: planned {planned!r}, the card records {recorded!r}"


def make_optimizer(name: str, params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; use adam or sgd")


Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
CLIP_EPS = 1e-6  # opacus' clip factor C / (‖g‖ + 1e-6)


class GhostClippingUnsupported(Exception):
    """The module has a layer ghost clipping cannot handle (the caller falls back)."""


def _rows(inputs, index: torch.Tensor):
    return inputs.rows(index) if isinstance(inputs, SparseFeatures) else inputs[index]


def _per_example_loss_sum(loss_fn: Loss, out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Σ_i L_i for a mean-reduced ``loss_fn`` (opacus' ``loss_reduction="mean"``)."""
    return loss_fn(out, targets) * targets.size(0)


def _check_module(module: nn.Module) -> None:
    for sub in module.modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            raise ConfigurationError(
                f"DP-SGD cannot train a module with {type(sub).__name__}: it mixes the examples of a batch, so "
                "per-example clipping would not bound one example's influence"
            )


class GhostClipper:
    r"""Clipped per-example gradient sums by ghost norms (module docstring, ``"ghost"``).

    Shapes: ``clipped_sum(x [B, F] or SparseFeatures, y [B])`` → {parameter: summed clipped
    gradient of the parameter's shape}.
    """

    def __init__(self, module: nn.Module):
        self.module = module
        params = [p for p in module.parameters() if p.requires_grad]
        self.layers = [m for m in module.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]
        covered = {id(m.weight) for m in self.layers} | {id(m.bias) for m in self.layers if m.bias is not None}
        if any(id(p) not in covered for p in params):
            raise GhostClippingUnsupported("a trainable parameter does not belong to an nn.Linear layer")
        self._records: list[tuple[nn.Linear, object, torch.Tensor]] = []
        self._active = False  # record only inside clipped_sum (not in e.g. on_epoch's evaluations)
        self._handles = [m.register_forward_hook(self._record) for m in self.layers]

    def _record(self, layer, inputs, output) -> None:
        if not self._active:
            return
        a = inputs[0]
        if any(layer is r[0] for r in self._records):
            raise GhostClippingUnsupported(f"{type(layer).__name__} is applied twice in one forward")
        if not isinstance(a, SparseFeatures) and a.dim() != 2:
            raise GhostClippingUnsupported("a linear layer sees non-2-D input (weights shared inside an example)")
        self._records.append((layer, a, output))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()

    def clipped_sum(self, x, y: torch.Tensor, loss_fn: Loss, max_norm: float) -> dict[nn.Parameter, torch.Tensor]:
        self._records, self._active = [], True
        try:
            loss = _per_example_loss_sum(loss_fn, self.module(x), y)
            records = self._records
            grads = torch.autograd.grad(loss, [r[2] for r in records])
        finally:
            self._records, self._active = [], False
        with torch.no_grad():
            sq = torch.zeros(y.size(0), dtype=loss.dtype, device=loss.device)
            for (layer, a, _), g in zip(records, grads):
                g_sq = g.pow(2).sum(1)
                a_sq = a.row_sq_norms() if isinstance(a, SparseFeatures) else a.detach().pow(2).sum(1)
                sq += g_sq * a_sq
                if layer.bias is not None and layer.bias.requires_grad:
                    sq += g_sq
            factor = (max_norm / (sq.sqrt() + CLIP_EPS)).clamp(max=1.0)
            summed: dict[nn.Parameter, torch.Tensor] = {}
            for (layer, a, _), g in zip(records, grads):
                scaled = g * factor.unsqueeze(1)
                if isinstance(a, SparseFeatures):
                    summed[layer.weight] = a.t_matmul(scaled).t()
                else:
                    summed[layer.weight] = scaled.t() @ a.detach()
                if layer.bias is not None and layer.bias.requires_grad:
                    summed[layer.bias] = scaled.sum(0)
        return summed


class PerSampleClipper:
    """Clipped per-example gradient sums from opacus' materialised per-example gradients."""

    def __init__(self, module: nn.Module):
        from opacus import GradSampleModule
        from opacus.grad_sample import register_grad_sampler
        from opacus.grad_sample.linear import compute_linear_grad_sample

        from dpaudit.nn import InputLinear

        # InputLinear is an nn.Linear (dense inputs reach this path); opacus looks layers up by exact type.
        if InputLinear not in GradSampleModule.GRAD_SAMPLERS:
            register_grad_sampler(InputLinear)(compute_linear_grad_sample)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
            self.wrapped = GradSampleModule(module, batch_first=True, loss_reduction="mean")
        self.params = [p for p in module.parameters() if p.requires_grad]

    def remove(self) -> None:
        self.wrapped._close()

    def clipped_sum(self, x, y: torch.Tensor, loss_fn: Loss, max_norm: float) -> dict[nn.Parameter, torch.Tensor]:
        if isinstance(x, SparseFeatures):
            x = x.to_dense()
        for p in self.params:
            p.grad_sample, p.grad = None, None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
            loss_fn(self.wrapped(x), y).backward()
        with torch.no_grad():
            samples = [p.grad_sample for p in self.params]
            norms = torch.stack([g.reshape(len(g), -1).norm(2, dim=1) for g in samples], dim=1).norm(2, dim=1)
            factor = (max_norm / (norms + CLIP_EPS)).clamp(max=1.0)
            summed = {p: torch.einsum("i,i...", factor, g) for p, g in zip(self.params, samples)}
        for p in self.params:
            p.grad_sample, p.grad = None, None
        return summed


def make_clipper(module: nn.Module, clipping: str = "ghost"):
    """A :class:`GhostClipper` when it applies (and ``clipping == "ghost"``), else opacus'."""
    _check_module(module)
    if clipping not in ("ghost", "per-sample"):
        raise ConfigurationError(f"clipping must be ghost or per-sample, got {clipping!r}")
    if clipping == "ghost":
        try:
            return GhostClipper(module)
        except GhostClippingUnsupported as exc:
            log.info("ghost clipping does not apply (%s); using opacus per-sample gradients", exc)
    return PerSampleClipper(module)


def noisy_gradients(
    summed: dict[nn.Parameter, torch.Tensor],
    params: list[nn.Parameter],
    std: float,
    expected_batch_size: float,
    generator: torch.Generator,
) -> None:
    """``p.grad = (Σ clipped + N(0, std²)) / expected_batch_size`` for every parameter, in order;
    the noise is drawn on the CPU ``generator`` (identical on every device). A parameter with no
    entry in ``summed`` (empty batch) gets noise only."""
    for p in params:
        noise = torch.normal(0.0, std, size=tuple(p.shape), generator=generator).to(p.device, p.dtype)
        total = summed.get(p)
        total = noise if total is None else total.to(p.dtype) + noise
        p.grad = (total / expected_batch_size).view_as(p)


# --------------------------------------------------------------------------------- white-box canaries
#: (trainable parameters in ``module.parameters()`` order, the run's training inputs) → canary coordinates
CanaryDesignFn = Callable[[nn.Module, list[nn.Parameter], Any], torch.Tensor]


class CanaryLaw(Protocol):
    """How one canary enters each step of a noisy run: the inclusion law the run's accountant
    assumes for one protected unit. ``draw(included, generator)`` returns, for every canary,
    the multiple of C added along its coordinate this step and how many of its terms were drawn
    (both ``[m]``); ``terms`` is how many terms one unit owns; ``matches(record, steps)`` says
    whether a spec's mechanism record accounts this run (the claim the canaries test)."""

    terms: int
    sample_rate: float

    def draw(self, included: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]: ...

    def matches(self, record: dict, steps: int) -> bool: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PoissonInclusion:
    """DP-SGD's law (:func:`train_dp_sgd`): an included canary is one example, joining each batch
    independently with probability q (:func:`dpaudit.training.sampling.poisson_subset`); an excluded one
    never enters. Accounted by PoissonSubsampledGaussian(σ, q, T) under add/remove."""

    sample_rate: float
    terms: int = 1

    def draw(self, included: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        members = torch.nonzero(included).reshape(-1)
        chosen = members[poisson_subset(members.numel(), self.sample_rate, generator)]
        drawn = torch.zeros(included.numel(), dtype=torch.long)
        drawn[chosen] = 1
        return drawn.double(), drawn

    def matches(self, record: dict, steps: int) -> bool:
        return (
            record.get("mechanism") == "PoissonSubsampledGaussian"
            and math.isclose(float(record.get("sample_rate", math.nan)), self.sample_rate, rel_tol=1e-9)
            and int(record.get("steps", -1)) == steps
        )

    def describe(self) -> dict[str, Any]:
        return {"law": "poisson", "sample_rate": self.sample_rate}


class DiracCanaries:
    r"""Dirac gradient canaries for one noisy :func:`train_dp_sgd` run, observed at every iterate
    (white-box auditing of DP-SGD: Nasr et al., USENIX Security 2023, "Tight auditing of
    differentially private machine learning"; Steinke, Nasr & Jagielski, NeurIPS 2023, "Privacy
    auditing with one (1) training run", Dirac canaries with all iterates observed).

    Canary i is an extra training example whose per-example gradient is the fixed vector
    :math:`C e_{k_i}`: C the run's clipping bound, :math:`e_{k_i}` a unit coordinate of the
    trainable parameters (flattened and concatenated in ``module.parameters()`` order) chosen by
    ``design(module, params, inputs)`` when the run starts. Its norm is exactly C, so clipping
    leaves it as it is: it is what any example whose gradient points along :math:`e_{k_i}` with
    norm ≥ C contributes after this run's own clipping (a run that clips at a larger bound than
    it accounts lets larger canaries through, as it would larger real gradients). Then ``coins(m)`` draws canary i's inclusion S_i (independent fair coins,
    after the design and outside the defense). At every step each *included* canary joins the
    batch independently with the schedule's rate q (:func:`dpaudit.training.sampling.poisson_subset` on a
    generator of its own, so the real examples' batches and the noise are the same draws as
    without canaries), and a sampled canary's gradient is added to the clipped sum before the
    noise; an excluded canary never enters. Every canary is thus one more example under exactly
    the accounted mechanism — PoissonSubsampledGaussian(σ, q, T) under add/remove of one
    example — which is what makes the (score, coin) game valid for the run's guarantee whatever
    the coordinates and whatever the other examples do (the per-step gradients of the others may
    even depend on the canaries: DP-SGD's analysis allows adaptive gradients).

    A training loop of its own whose accountant assumes another law for one protected unit
    passes that law to :meth:`attach` (:class:`CanaryLaw`): DP-GNN's node owns N(K, r) subgraph
    terms drawn without replacement (:class:`defenses.dpgnn.canaries.NodeOccurrences`), and its
    canary adds a signed multiple of C per step instead of 0 or C.

    Observations, O(m) memory (running sums, never per step):

    * ``iterate_scores`` — :math:`\sum_t \langle \tilde g_t, e_{k_i}\rangle`, the noisy summed
      gradient (clipped sum + canaries + noise, before the division by the expected batch size) of
      every step along the canary's coordinate;
    * ``centred_scores`` (only with ``centre=True``) — the same minus, at every step, q times the
      clipped gradient sum of *all* real examples at the current iterate (evaluation mode, so no
      dropout draw is consumed): the real examples' expected contribution, which the white-box
      auditor can compute from the iterate and the fixed real data, and which otherwise differs
      from coordinate to coordinate and drowns the canaries on dense inputs. It costs a pass
      over the real data per step;
    * ``initial`` / ``final`` — the coordinate's value when the run starts and when it ends (the
      last iterate: a checkpoint restored later by the caller is not seen), for the final-model
      score :math:`\theta_0 - \theta_T` along :math:`e_{k_i}`;
    * ``sampled`` — how many of canary i's terms were drawn over the run (Poisson: in how many
      steps it joined the batch, 0 for an excluded one), which checks the sampling law; it
      reveals the coins and is never a score.

    ``module_label``: attach to the first noisy run whose ``progress`` label contains it (GAP
    trains "gap encoder" and "gap classifier"); ``None``: the first noisy run. One instance
    audits one run; later runs in the same context train without canaries.
    """

    def __init__(
        self,
        design: CanaryDesignFn,
        coins: Callable[[int], np.ndarray],
        *,
        seed: int,
        module_label: str | None = None,
        centre: bool = False,
    ):
        self.design, self.coins, self.seed, self.module_label = design, coins, int(seed), module_label
        self.centre = bool(centre)
        self.attached = False
        self.label: str | None = None
        self.coordinates = torch.empty(0, dtype=torch.long)
        self.included = np.zeros(0, dtype=bool)
        self.iterate_scores = np.zeros(0)
        self.centred_scores = np.zeros(0)
        self.initial = np.zeros(0)
        self.final = np.zeros(0)
        self.sampled = np.zeros(0, dtype=np.int64)
        self.steps = 0
        self.sample_rate = math.nan
        self.noise_multiplier = math.nan
        self.max_grad_norm = math.nan
        self.law: CanaryLaw | None = None

    def wants(self, label: str | None) -> bool:
        return not self.attached and (self.module_label is None or self.module_label in (label or ""))

    def attach(self, module: nn.Module, params: list[nn.Parameter], inputs, *, sample_rate: float,
               noise_multiplier: float, max_grad_norm: float, label: str | None,
               real_clipped_sum: Callable[[], dict[nn.Parameter, torch.Tensor]] | None = None,
               law: CanaryLaw | None = None) -> None:  # fmt: skip
        """Fix the design, then draw the coins (in that order); raises ConfigurationError on a design
        that does not name m ≥ 1 distinct coordinates of the trainable parameters, or on
        ``centre`` without ``real_clipped_sum``.
        ``real_clipped_sum()``: the clipped gradient sum of every real example at the current
        iterate (used with ``centre``). ``law``: how a canary enters each step — a loop whose
        accountant assumes another law than DP-SGD's Poisson sampling at ``sample_rate`` passes
        its own (:class:`CanaryLaw`; default :class:`PoissonInclusion`)."""
        if self.centre and real_clipped_sum is None:
            raise ConfigurationError(f"centred scores need the real examples' clipped sum, which {label} does not give")
        sizes = torch.tensor([p.numel() for p in params], dtype=torch.long)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
        coordinates = torch.as_tensor(self.design(module, params, inputs), dtype=torch.long).reshape(-1).cpu()
        total = int(offsets[-1])
        if coordinates.numel() < 1 or int(coordinates.min()) < 0 or int(coordinates.max()) >= total:
            raise ConfigurationError(
                f"a canary design must name coordinates in [0, {total}), got {coordinates.numel()}"
            )
        if coordinates.unique().numel() != coordinates.numel():
            raise ConfigurationError("a canary design must name distinct coordinates (one canary per coordinate)")
        m = coordinates.numel()
        included = np.asarray(self.coins(m), dtype=bool).reshape(-1)
        if included.size != m:
            raise ConfigurationError(f"{included.size} coins for {m} canaries")
        self.attached, self.label = True, label
        self.coordinates, self.included = coordinates, included
        self.sample_rate, self.noise_multiplier = float(sample_rate), float(noise_multiplier)
        self.max_grad_norm = float(max_grad_norm)
        self.iterate_scores = np.zeros(m)
        self.centred_scores = np.zeros(m)
        self._expected = np.zeros(m)
        self._real_clipped_sum = real_clipped_sum
        self.sampled = np.zeros(m, dtype=np.int64)
        self.law = law if law is not None else PoissonInclusion(self.sample_rate)
        self._included = torch.from_numpy(included)
        self._generator = torch.Generator().manual_seed(self.seed)
        owner = torch.bucketize(coordinates, offsets[1:], right=True)
        # (parameter, canaries on it, their coordinates inside it), on the parameter's device
        self._groups = [
            (p, torch.nonzero(owner == k).reshape(-1), (coordinates[owner == k] - offsets[k]).to(p.device))
            for k, p in enumerate(params)
            if bool((owner == k).any())
        ]
        self.initial = self._values(lambda p: p)

    def _values(self, tensors: Callable[[nn.Parameter], torch.Tensor | None]) -> np.ndarray:
        """[m] the canary coordinates of ``tensors(p)`` (parameter-shaped; ``None`` reads as 0)."""
        out = np.zeros(self.coordinates.numel())
        for p, canaries, local in self._groups:
            source = tensors(p)
            if source is not None:
                out[canaries.numpy()] = source.detach().reshape(-1)[local].double().cpu().numpy()
        return out

    def insert(self, summed: dict[nn.Parameter, torch.Tensor]) -> None:
        """Add a·C·e_k to ``summed`` for every canary, a its multiple of this step's draw from the
        law (Poisson: 1 for an included canary sampled this step, else 0) — and, with
        ``centre``, evaluate the real examples' clipped sum at this iterate first."""
        if self.centre:
            self._expected = self._values(self._real_clipped_sum().get)
        multiples, drawn = self.law.draw(self._included, self._generator)
        self.steps += 1
        if not bool(drawn.any()):
            return
        self.sampled += drawn.numpy()
        for p, canaries, local in self._groups:
            here = multiples[canaries]
            hit = (here != 0).to(p.device)
            if not bool(hit.any()):
                continue
            base = summed.get(p)
            flat = (
                torch.zeros(p.numel(), dtype=p.dtype, device=p.device) if base is None else base.reshape(-1).to(p.dtype)
            )
            where = local[hit]
            added = (here.to(p.device)[hit] * self.max_grad_norm).to(p.dtype)
            flat = flat.index_add(0, where, added)
            summed[p] = flat.view(p.shape)

    def observe(self, expected_batch_size: float) -> None:
        """Add this step's noisy summed gradient along each canary coordinate (``p.grad`` is that
        sum divided by the schedule's expected batch size)."""
        noisy = self._values(lambda p: p.grad) * float(expected_batch_size)
        self.iterate_scores += noisy
        if self.centre:
            self.centred_scores += noisy - self.sample_rate * self._expected

    def finish(self) -> None:
        self.final = self._values(lambda p: p)


_ACTIVE_CANARIES: ContextVar[DiracCanaries | None] = ContextVar("dpaudit_dirac_canaries", default=None)


@contextmanager
def inserting_canaries(canaries: DiracCanaries) -> Iterator[DiracCanaries]:
    """Insert ``canaries`` into the next matching noisy :func:`train_dp_sgd` run inside this block
    (e.g. around ``Defense.fit``); on leaving, by return or by exception, no run sees them again.

    Raises:
        ConfigurationError: entered inside another canary block (one audit at a time).
    """
    if _ACTIVE_CANARIES.get() is not None:
        raise ConfigurationError("gradient canaries are already being inserted: one canary block at a time")
    token = _ACTIVE_CANARIES.set(canaries)
    try:
        yield canaries
    finally:
        _ACTIVE_CANARIES.reset(token)


def _full_clipped_sum(clipper, module: nn.Module, inputs, targets: torch.Tensor, loss_fn: Loss, max_norm: float,
                      chunk: int = 4096) -> dict[nn.Parameter, torch.Tensor]:  # fmt: skip
    """The clipped gradient sum of every example, in chunks of ``chunk`` rows, in evaluation mode
    (no dropout: the training run's random draws are left as they are)."""
    was_training = module.training
    module.eval()
    total: dict[nn.Parameter, torch.Tensor] = {}
    try:
        for start in range(0, int(targets.size(0)), chunk):
            index = torch.arange(start, min(start + chunk, int(targets.size(0))), device=targets.device)
            for p, g in clipper.clipped_sum(_rows(inputs, index), targets[index], loss_fn, max_norm).items():
                total[p] = g if p not in total else total[p] + g
    finally:
        module.train(was_training)
    return total


def canaries_for(label: str | None) -> DiracCanaries | None:
    """The canaries of the enclosing :func:`inserting_canaries` block if they ask for the noisy
    run labelled ``label``, else ``None``. A DP-SGD loop drives them as :func:`train_dp_sgd` does:
    ``attach`` before the first step, ``insert`` into the clipped sum, ``observe`` after the noise,
    ``finish`` after the last step."""
    canaries = _ACTIVE_CANARIES.get()
    return canaries if canaries is not None and canaries.wants(label) else None


def train_dp_sgd(
    module: nn.Module,
    inputs,
    targets: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: int,
    epochs: int,
    lr: float,
    schedule: PoissonSchedule | None = None,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    loss_fn: Loss | None = None,
    seed: int = 0,
    progress: str | None = None,
    on_epoch: Callable[[nn.Module], None] | None = None,
    clipping: str = "ghost",
) -> PoissonSubsampledGaussian | None:
    """Train ``module`` in place on (inputs[i], targets[i]) pairs; return the mechanism spent.

    ``inputs`` ([n, F] tensor or :class:`~dpaudit.nn.SparseFeatures`) is indexed along its
    first dimension (one row per protected example), on the module's device. ``loss_fn`` is
    mean-reduced (default cross-entropy). ``on_epoch(module)`` runs after every epoch (e.g. a
    ``paper`` protocol's best-validation checkpoint, which reads data outside the accountant
    and must be listed as unaccounted). ``clipping``: see the module docstring.

    A noisy run (``noise_multiplier > 0``) takes its rate, steps and normaliser from
    ``schedule`` alone (:meth:`PoissonSchedule.plan`; ``epochs`` must be the schedule's) and
    returns ``PoissonSubsampledGaussian(noise_multiplier, schedule.sample_rate, schedule.steps)``;
    ``batch_size`` is then unused. Without noise, shuffled minibatches of min(``batch_size``, n)
    for ``epochs`` epochs, and ``None`` is returned. Inside :func:`inserting_canaries`, a noisy
    run the :class:`DiracCanaries` ask for (by ``progress`` label) also trains on them.

    Raises:
        ConfigurationError: a noisy run without a schedule, or with other epochs than it plans.
    """
    if noise_multiplier > 0:
        if schedule is None:
            raise ConfigurationError(
                "noisy DP-SGD needs a PoissonSchedule fixed before training (PoissonSchedule.plan): its rate and "
                "steps may not be read from the number of training examples"
            )
        if int(epochs) != schedule.epochs:
            raise ConfigurationError(f"train_dp_sgd: epochs={epochs}, but the schedule plans {schedule.epochs}")
    device = next(module.parameters()).device
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    inputs = inputs.to(device)
    targets = targets.to(device)
    n = int(targets.size(0))
    generator = torch.Generator().manual_seed(seed)
    opt = make_optimizer(optimizer, module.parameters(), lr, weight_decay)
    epochs_bar = progress_steps(epochs, progress, disable=None if progress else True, unit="epoch")

    if noise_multiplier == 0:
        batch_size = min(batch_size, n)  # nothing is accounted here: reading n is harmless
        for _ in epochs_bar:
            module.train()
            # torch's RandomSampler: one randperm per epoch from the seeded generator.
            order = torch.randperm(n, generator=generator).to(device)
            for start in range(0, n, batch_size):
                index = order[start : start + batch_size]
                opt.zero_grad()
                loss_fn(module(_rows(inputs, index)), targets[index]).backward()
                opt.step()
            if on_epoch is not None:
                on_epoch(module)
        module.eval()
        return None

    sample_rate = schedule.sample_rate
    noise_generator = torch.Generator().manual_seed(seed + 1)
    params = [p for p in module.parameters() if p.requires_grad]
    canaries = canaries_for(progress)
    if canaries is not None:
        canaries.attach(module, params, inputs, sample_rate=sample_rate, noise_multiplier=noise_multiplier,
                        max_grad_norm=max_grad_norm, label=progress,
                        real_clipped_sum=lambda: _full_clipped_sum(clipper, module, inputs, targets, loss_fn,
                                                                   max_grad_norm))  # fmt: skip
    clipper = make_clipper(module, clipping)
    steps = 0
    try:
        for _ in epochs_bar:
            module.train()
            for _ in range(schedule.steps_per_epoch):
                index = poisson_subset(n, sample_rate, generator).to(device)
                opt.zero_grad()
                # An empty Poisson batch still takes a noise-only step: skipping it would reveal
                # that the batch was empty, which the accountant does not cover.
                summed = {}
                if index.numel():
                    try:
                        summed = clipper.clipped_sum(_rows(inputs, index), targets[index], loss_fn, max_grad_norm)
                    except GhostClippingUnsupported as exc:
                        log.info("ghost clipping does not apply (%s); using opacus per-sample gradients", exc)
                        clipper.remove()
                        clipper = PerSampleClipper(module)
                        summed = clipper.clipped_sum(_rows(inputs, index), targets[index], loss_fn, max_grad_norm)
                if canaries is not None:
                    canaries.insert(summed)
                noisy_gradients(
                    summed, params, noise_multiplier * max_grad_norm, schedule.expected_batch_size, noise_generator
                )
                if canaries is not None:
                    canaries.observe(schedule.expected_batch_size)
                opt.step()
                steps += 1
            if on_epoch is not None:
                on_epoch(module)
    finally:
        clipper.remove()
    if canaries is not None:
        canaries.finish()
    module.eval()
    return PoissonSubsampledGaussian(sigma=noise_multiplier, sample_rate=sample_rate, steps=steps)
