"""White-box auditing of one noisy run: :class:`DiracCanaries` (gradient canaries observed at every
iterate), the law by which a canary enters each step (:class:`CanaryLaw`, DP-SGD's
:class:`PoissonInclusion`), and the context that inserts them (:func:`inserting_canaries`,
:func:`canaries_for`). Outside that context a training loop is untouched."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from dpaudit.errors import ConfigurationError
from dpaudit.training.dpsgd.clipping import Loss, _rows
from dpaudit.training.sampling import poisson_subset

#: (trainable parameters in ``module.parameters()`` order, the run's training inputs) → canary coordinates
CanaryDesignFn = Callable[[nn.Module, list[nn.Parameter], Any], torch.Tensor]


class CanaryLaw(Protocol):
    """How one canary enters each step of a noisy run: the inclusion law the run's accountant
    assumes for one protected unit. ``draw(included, generator)`` returns, for every canary,
    the multiple of C added along its coordinate this step and how many of its terms were drawn
    (both ``[m]``); ``terms`` is how many terms one unit owns; ``matches(record, steps)`` says
    whether a spec's mechanism record accounts this run (the claim the canaries test).

    Attributes:
        terms: how many terms one protected unit owns.
        sample_rate: the per-step sampling rate of the run.
    """

    terms: int
    sample_rate: float

    def draw(self, included: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's draw.

        Args:
            included: bool mask of the included canaries.
            generator: the canaries' own random generator.

        Returns:
            ``(multiples, drawn)``: the multiple of C each canary adds this step, and how many of its terms were drawn.

        Shapes:
            included: [m]
            multiples: [m]
            drawn: [m]
        """

    def matches(self, record: dict, steps: int) -> bool:
        """Whether a spec's mechanism record accounts this run.

        Args:
            record: a mechanism record (``Mechanism.describe()`` dict).
            steps: the run's number of steps.

        Returns:
            ``True`` when the record is this law's mechanism over ``steps`` steps.
        """

    def describe(self) -> dict[str, Any]:
        """The law as a JSON-able dict (for the result's record)."""


@dataclass(frozen=True)
class PoissonInclusion:
    """DP-SGD's law (:func:`train_dp_sgd`): an included canary is one example, joining each batch
    independently with probability q (:func:`dpaudit.training.sampling.poisson_subset`); an excluded one
    never enters. Accounted by PoissonSubsampledGaussian(σ, q, T) under add/remove.

    Attributes:
        sample_rate: Poisson sampling rate q.
        terms: terms per unit (1: one example).
    """

    sample_rate: float
    terms: int = 1

    def draw(self, included: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's draw.

        Args:
            included: bool mask of the included canaries.
            generator: the canaries' own random generator.

        Returns:
            ``(multiples, drawn)``: the multiple of C each canary adds this step, and how many of its terms were drawn.

        Shapes:
            included: [m]
            multiples: [m]
            drawn: [m]
        """
        members = torch.nonzero(included).reshape(-1)
        chosen = members[poisson_subset(members.numel(), self.sample_rate, generator)]
        drawn = torch.zeros(included.numel(), dtype=torch.long)
        drawn[chosen] = 1
        return drawn.double(), drawn

    def matches(self, record: dict, steps: int) -> bool:
        """Whether a spec's mechanism record accounts this run.

        Args:
            record: a mechanism record (``Mechanism.describe()`` dict).
            steps: the run's number of steps.

        Returns:
            ``True`` for a ``PoissonSubsampledGaussian`` record at this rate over ``steps`` steps.
        """
        return (
            record.get("mechanism") == "PoissonSubsampledGaussian"
            and math.isclose(float(record.get("sample_rate", math.nan)), self.sample_rate, rel_tol=1e-9)
            and int(record.get("steps", -1)) == steps
        )

    def describe(self) -> dict[str, Any]:
        """``{"law": "poisson", "sample_rate": q}``."""
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

    Args:
        design: ``design(module, params, inputs)`` → the canaries' flat coordinates (:data:`CanaryDesignFn`).
        coins: ``coins(m)`` → m inclusion coins (bool array), drawn after the design.
        seed: seed of the canaries' own sampling generator.
        module_label: attach to the first noisy run whose label contains it; ``None``: the first noisy run.
        centre: also record ``centred_scores`` (costs a pass over the real data per step).
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
        """Whether these canaries attach to the noisy run labelled ``label``.

        Args:
            label: the run's progress label.

        Returns:
            ``True`` when not yet attached and the label matches ``module_label``.
        """
        return not self.attached and (self.module_label is None or self.module_label in (label or ""))

    def attach(
        self,
        module: nn.Module,
        params: list[nn.Parameter],
        inputs,
        *,
        sample_rate: float,
        noise_multiplier: float,
        max_grad_norm: float,
        label: str | None,
        real_clipped_sum: Callable[[], dict[nn.Parameter, torch.Tensor]] | None = None,
        law: CanaryLaw | None = None,
    ) -> None:
        """Fix the design, then draw the coins (in that order); raises ConfigurationError on a design
        that does not name m ≥ 1 distinct coordinates of the trainable parameters, or on
        ``centre`` without ``real_clipped_sum``.
        ``real_clipped_sum()``: the clipped gradient sum of every real example at the current
        iterate (used with ``centre``). ``law``: how a canary enters each step — a loop whose
        accountant assumes another law than DP-SGD's Poisson sampling at ``sample_rate`` passes
        its own (:class:`CanaryLaw`; default :class:`PoissonInclusion`).

        Args:
            module: the module being trained.
            params: its trainable parameters, in ``module.parameters()`` order.
            inputs: the run's training inputs (passed to ``design``).
            sample_rate: the run's Poisson rate q.
            noise_multiplier: the run's σ.
            max_grad_norm: the run's clipping bound C.
            label: the run's progress label.
            real_clipped_sum: callable returning the real examples' clipped gradient sum, or ``None``.
            law: the canaries' inclusion law, or ``None`` for :class:`PoissonInclusion`.

        Raises:
            ConfigurationError: an invalid design, a wrong number of coins, or ``centre`` without ``real_clipped_sum``.
        """
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
        ``centre``, evaluate the real examples' clipped sum at this iterate first.

        Args:
            summed: the step's clipped gradient sum by parameter (updated in place).
        """
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
        sum divided by the schedule's expected batch size).

        Args:
            expected_batch_size: the schedule's expected batch size (``p.grad`` is multiplied back by it).
        """
        noisy = self._values(lambda p: p.grad) * float(expected_batch_size)
        self.iterate_scores += noisy
        if self.centre:
            self.centred_scores += noisy - self.sample_rate * self._expected

    def finish(self) -> None:
        """Record the coordinates' final values (the last iterate) in ``final``."""
        self.final = self._values(lambda p: p)


_ACTIVE_CANARIES: ContextVar[DiracCanaries | None] = ContextVar("dpaudit_dirac_canaries", default=None)


@contextmanager
def inserting_canaries(canaries: DiracCanaries) -> Iterator[DiracCanaries]:
    """Insert ``canaries`` into the next matching noisy :func:`train_dp_sgd` run inside this block
    (e.g. around ``Defense.fit``); on leaving, by return or by exception, no run sees them again.

    Raises:
        ConfigurationError: entered inside another canary block (one audit at a time).

    Args:
        canaries: the canaries to insert.

    Returns:
        A context manager yielding ``canaries``.
    """
    if _ACTIVE_CANARIES.get() is not None:
        raise ConfigurationError("gradient canaries are already being inserted: one canary block at a time")
    token = _ACTIVE_CANARIES.set(canaries)
    try:
        yield canaries
    finally:
        _ACTIVE_CANARIES.reset(token)


def _full_clipped_sum(
    clipper, module: nn.Module, inputs, targets: torch.Tensor, loss_fn: Loss, max_norm: float, chunk: int = 4096
) -> dict[nn.Parameter, torch.Tensor]:
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
    ``finish`` after the last step.

    Args:
        label: the noisy run's progress label.

    Returns:
        The canaries, or ``None``.
    """
    canaries = _ACTIVE_CANARIES.get()
    return canaries if canaries is not None and canaries.wants(label) else None
