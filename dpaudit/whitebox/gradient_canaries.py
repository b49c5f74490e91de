r"""Dirac gradient canaries for any DP-SGD loop: an Opacus ``DPOptimizer`` or a loop of your own
(Nasr et al., USENIX Security 2023; Steinke, Nasr & Jagielski, NeurIPS 2023, one run, every
iterate observed).

>>> canaries = GradientCanaries(count=5000, seed=0)                        # doctest: +SKIP
>>> canaries.attach(optimizer, sample_rate=loader.sample_rate, features=x)  # doctest: +SKIP
>>> ...                                                   # train as before  # doctest: +SKIP
>>> canaries.result(epsilon=4.0, delta=1e-5).verdict                        # doctest: +SKIP

The game is :class:`dpaudit.training.dpsgd.DiracCanaries`'s, the hook dpaudit's own DP-SGD
drives: m canaries, canary i an extra example whose clipped gradient is :math:`C e_{k_i}` (C the
clipping bound, :math:`e_{k_i}` a coordinate of the trainable parameters, flattened and
concatenated in the optimizer's parameter order, param groups in turn). The coordinates are
fixed first (:class:`dpaudit.auditing.gradient_canary.DiracDesign`: rare input columns of
``features``, else seeded random coordinates); then independent fair coins decide which canaries
are included; they are kept here and never handed to the loop. At every step each included
canary joins the batch with the loop's Poisson rate q, on a generator of its own (the loop's
batches and noise are the draws they would be without canaries), and its gradient is added to
the **clipped sum** — the sum the noise N(0, σ²C²) is calibrated to — before the noise. Each
canary is then one more example of the accounted mechanism PoissonSubsampledGaussian(σ, q, T)
under add/remove, so the (score, coin) game bounds the run's ε whatever the coordinates and
whatever the real examples do. The score of canary i is the noisy sum along :math:`e_{k_i}`,
summed over every step (what an auditor who sees every noisy gradient observes), and
:meth:`GradientCanaries.result` turns the scores and coins into the canary audit's record
(:func:`dpaudit.auditing.gradient_canary.summarise_game`).

**Opacus.** :meth:`~GradientCanaries.attach` wraps the optimizer's ``add_noise``: Opacus has
summed the clipped per-sample gradients into ``p.summed_grad`` (with ``loss_reduction="mean"``
the per-sample gradients are rescaled to the per-example ones first, so the sum is the sum of
clipped per-example gradients); the canaries are added there, Opacus adds its noise into
``p.grad``, the canaries read ``p.grad`` (before ``scale_grad`` divides it by the expected batch
size). Per-layer and adaptive clipping (another C per layer or per step), distributed optimizers
and gradient accumulation over several batches per step are refused: a canary of norm C would
not be one example of those mechanisms.

**Your own loop.** ``attach(parameters, sample_rate=q, max_grad_norm=C)``, then at every step
either

* ``summed = canaries.inject(summed)`` on the list of clipped gradient sums (one tensor per
  parameter, in the order given, before any division) — the canaries are clipped gradients, so
  they test the noise, the rate and the steps, not the clipping; or
* ``rows = canaries.inject_examples(rows)`` on the per-example gradients **before clipping** (one
  ``[B, *shape]`` tensor per parameter): each sampled canary is one more row, of norm
  ``example_norm``·C (4·C by default) along its coordinate, which your loop then clips, sums and
  noises like any example. A loop that clips at C makes it C·e — the claimed mechanism's example,
  scores of the claim's law —; a loop that does not clip, clips after the noise or at a larger
  bound lets it through louder, and its scores refute the claim. This tests the clipping too;

and ``canaries.observe(noisy)`` on the noisy sums (the clipped sum plus the noise, before any
division by the batch size and before the optimizer's step).

What is claimed: the bound is valid for the example-level (ε, δ) of a run that samples every
example with the ``sample_rate`` given here and clips at C — the guarantee DP-SGD's analysis
gives for any clipped gradient, so the one your accountant's ε rests on. A rate larger than the
loop's makes the canaries stronger than its examples (a false alarm); a smaller one, weaker (a
weaker audit).

**Which unit.** The record's ``unit`` (``result(unit=...)``, default ``"node"``) names what one
example of your loop is. For a model of node features (an MLP: one example is one node's row, and
removing a node removes that example and changes no other) example-level DP *is* node-level DP, so
the record tests a node-level claim — ``dpaudit.audit(adapt(model, dataset, privacy=claim,
input="features"), canaries=[result])`` weighs it against the model's claim. A loop whose example
is one edge states ``unit="edge"``. The record names its ``dataset`` when ``features`` is the
:class:`~dpaudit.data.datasets.GraphDataset` itself, or by ``result(dataset=...)``; the audit
refuses a record of another unit, ε or dataset than the model's claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from dpaudit.accounting.spec import UNITS, validate_delta, validate_epsilon
from dpaudit.auditing import gradient_canary as game
from dpaudit.auditing.hypothesis import claimed_noise_multiplier
from dpaudit.auditing.results import CANARY_SCHEMA, CANARY_SCHEMA_VERSION, CanaryAuditRecord
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.nn import SparseFeatures
from dpaudit.training.dpsgd import DiracCanaries
from dpaudit.whitebox.self_check import PlacementCheck

COVERAGE = (
    "gradient canaries are examples of this one DP-SGD run (clipped gradient of norm exactly C, Poisson-sampled at "
    "the sample_rate given, added to the clipped sum before the noise): the bound is valid for the run's "
    "example-level (epsilon, delta) if the run samples its examples at that rate and clips at C"
)
#: Opacus optimizers whose clipping bound is not one C for the whole step, or whose step is not one
#: Poisson batch on one process
_REFUSED_OPACUS = {
    "DPPerLayerOptimizer": "per-layer clipping (a bound per layer, not one C)",
    "AdaClipDPOptimizer": "adaptive clipping (C changes every step)",
    "DistributedDPOptimizer": "a distributed optimizer (each process adds to the sum)",
    "DistributedPerLayerOptimizer": "a distributed optimizer (each process adds to the sum)",
    "SimpleDistributedPerLayerOptimizer": "a distributed optimizer (each process adds to the sum)",
    "DistributedDPOptimizerFastGradientClipping": "a distributed optimizer (each process adds to the sum)",
    "FSDPOptimizerFastGradientClipping": "a distributed optimizer (each process adds to the sum)",
}


def _positive(name: str, value, upper: float | None = None) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
        or (upper is not None and value > upper)
    ):
        bound = f"(0, {upper:g}]" if upper is not None else "(0, ∞)"
        raise ConfigurationError(f"{name} must be a number in {bound}, got {value!r}")
    return float(value)


class GradientCanaries:
    """``count`` Dirac gradient canaries for one DP-SGD run (module docstring); ``seed`` fixes the
    design, the coins and the canaries' sampling (apart streams).

    Raises:
        ConfigurationError: ``count`` is not an integer ≥ 1.

    Args:
        count: number of canaries.
        seed: seed of design, coins and sampling.
    """

    def __init__(self, count: int, *, seed: int = 0):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigurationError(f"count must be an integer >= 1, got {count!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(f"seed must be an integer, got {seed!r}")
        self.count, self.seed = count, seed
        self._design = game.DiracDesign(count, seed)
        self._hook = DiracCanaries(self._design, game.fair_coins(seed, 0), seed=game.sampling_seed(seed, 0))
        self._source: str | None = None
        self._dataset: str | None = None  # the GraphDataset's name when features is one
        self._optimizer = None
        self._params: list[torch.Tensor] = []
        self._noise_multipliers: set[float] = set()
        self._injected = False  # your loop's step is between inject() and observe()
        self._example_norm = 4.0
        self._check: PlacementCheck | None = None
        self._dataset_size: int | None = None

    # ------------------------------------------------------------------------------------ attach
    def attach(
        self,
        target,
        *,
        sample_rate: float,
        features=None,
        module: nn.Module | None = None,
        max_grad_norm: float | None = None,
        dataset_size: int | None = None,
        example_norm: float = 4.0,
    ) -> GradientCanaries:
        """Fix the design, draw the coins, and join ``target``'s steps from now on.

        ``target``: an Opacus ``DPOptimizer`` (hooked; ``max_grad_norm`` is the optimizer's), or
        the trainable parameters of your own loop (an iterable of tensors; ``max_grad_norm`` = C
        is then required, and you call :meth:`inject` and :meth:`observe`). ``sample_rate``: the
        loop's Poisson rate q (Opacus: ``loader.sample_rate``). ``features``: the training inputs
        [n, F] (dense or :class:`dpaudit.nn.SparseFeatures`), to put the canaries on the input
        layer's least-used columns — a :class:`~dpaudit.data.datasets.GraphDataset` gives its node
        features and names the record's ``dataset``; ``module``: where to find that layer
        (default: the first [out, F] parameter). ``dataset_size``: how many examples the loop
        samples from (N), to check ``sample_rate`` against the batch sizes seen (Opacus' batches,
        or ``inject(..., batch_size=b)``; :mod:`dpaudit.whitebox.self_check`). ``example_norm``:
        the norm, in units of C, of the canary rows :meth:`inject_examples` adds before clipping
        (> 1, so that a loop that does not clip them shows it). Returns ``self``.

        Raises:
            ConfigurationError: attached already, a rate outside (0, 1], a non-DP optimizer, an
                Opacus optimizer of another mechanism, a missing or non-positive C, a
                ``dataset_size`` that is not a positive integer, or more canaries than
                coordinates (before anything is changed).
        """
        if self._source is not None:
            raise ConfigurationError("these gradient canaries are attached already: one instance audits one run")
        q = _positive("sample_rate", sample_rate, upper=1.0)
        if _positive("example_norm", example_norm) <= 1.0:
            raise ConfigurationError(
                f"example_norm must be > 1 (the canary rows' norm in units of C, larger than clipping lets through), "
                f"got {example_norm!r}"
            )
        if dataset_size is not None and (
            isinstance(dataset_size, bool) or not isinstance(dataset_size, int) or dataset_size < 1
        ):
            raise ConfigurationError(
                f"dataset_size must be an integer >= 1 (the examples the loop samples from), got {dataset_size!r}"
            )
        dataset = features.name if isinstance(features, GraphDataset) else None
        features = self._check_features(features.data.x if isinstance(features, GraphDataset) else features)
        if isinstance(target, torch.optim.Optimizer):
            optimizer = self._check_optimizer(target)
            params, sigma = list(optimizer.params), optimizer.noise_multiplier
            clip = _positive("the optimizer's max_grad_norm", optimizer.max_grad_norm)
            source = f"opacus {type(optimizer).__name__}"
        else:
            params = self._check_params(target)
            clip, sigma, optimizer = _positive("max_grad_norm", max_grad_norm), math.nan, None
            source = "your DP-SGD loop (inject / observe)"
        self._hook.attach(
            module, params, features, sample_rate=q, noise_multiplier=float(sigma), max_grad_norm=clip, label=source
        )
        self._source, self._params, self._optimizer, self._dataset = source, params, optimizer, dataset
        self._dataset_size = dataset_size
        self._example_norm = float(example_norm)
        mask = torch.zeros(sum(p.numel() for p in params), dtype=torch.bool)
        mask[self._hook.coordinates] = True
        self._check = PlacementCheck(mask, clip, placement=optimizer is None)
        if optimizer is not None:
            self._wrap(optimizer)
        return self

    @staticmethod
    def _check_features(features):
        if features is None or isinstance(features, SparseFeatures):
            return features
        try:
            features = torch.as_tensor(features)
        except (TypeError, ValueError, RuntimeError):
            raise ConfigurationError(f"features must be a [n, F] matrix, got {type(features).__name__}") from None
        if features.dim() != 2:
            raise ConfigurationError(f"features must be a [n, F] matrix, got shape {tuple(features.shape)}")
        return features

    @staticmethod
    def _check_optimizer(optimizer):
        if not (hasattr(optimizer, "add_noise") and hasattr(optimizer, "original_optimizer")):
            raise ConfigurationError(
                f"{type(optimizer).__name__} is not a DP optimizer: make it private with opacus' PrivacyEngine first, or "
                "pass your loop's parameters and call inject/observe"
            )
        refused = next((why for cls in type(optimizer).__mro__ if (why := _REFUSED_OPACUS.get(cls.__name__))), None)
        if refused is not None:
            raise ConfigurationError(
                f"gradient canaries need one clipping bound C per step; {type(optimizer).__name__} uses {refused}"
            )
        return optimizer

    @staticmethod
    def _check_params(target) -> list[torch.Tensor]:
        if isinstance(target, torch.Tensor) or not isinstance(target, Iterable):
            raise ConfigurationError(
                f"attach needs an Opacus DPOptimizer or an iterable of parameter tensors, got {type(target).__name__}"
            )
        params = list(target)
        if not params or not all(isinstance(p, torch.Tensor) and p.is_leaf for p in params):
            raise ConfigurationError(
                "attach needs at least one parameter, every one a leaf tensor (model.parameters())"
            )
        if len({id(p) for p in params}) != len(params):
            raise ConfigurationError("attach got the same parameter twice")
        return params

    def _wrap(self, optimizer) -> None:
        """Replace this optimizer instance's ``add_noise`` by canaries → Opacus' noise → observation."""
        add_noise = optimizer.add_noise

        def add_noise_with_canaries():
            self._check_opacus_step(optimizer)
            self._check.batch(_opacus_batch_size(self._params))
            summed = {p: p.summed_grad for p in self._params}
            self._hook.insert(summed)
            for p in self._params:
                p.summed_grad = summed[p]
            add_noise()
            self._noise_multipliers.add(float(optimizer.noise_multiplier))
            self._hook.observe(1.0)  # p.grad is the noisy sum until scale_grad divides it

        optimizer.add_noise = add_noise_with_canaries

    def _check_opacus_step(self, optimizer) -> None:
        if float(optimizer.max_grad_norm) != self._hook.max_grad_norm:
            raise ConfigurationError(
                f"the optimizer's max_grad_norm changed from {self._hook.max_grad_norm:g} to {optimizer.max_grad_norm:g} "
                "during the run: the canaries' norm is the C of the whole run"
            )
        if int(getattr(optimizer, "accumulated_iterations", 1)) != 1:
            raise ConfigurationError(
                "gradient accumulation over several Poisson batches per step is not one example's law at the rate "
                "given: audit a run that steps after every batch"
            )

    # ------------------------------------------------------------------------- your own loop
    def inject(self, summed: Sequence[torch.Tensor], *, batch_size: int | None = None) -> list[torch.Tensor]:
        """The clipped gradient sums of this step (one per attached parameter, before the noise
        and any division) with this step's sampled canaries added (C along each one's
        coordinate); the inputs are not modified.

        Args:
            summed: one tensor per attached parameter, of its shape, in order.
            batch_size: how many examples this step's batch held (optional: with
                ``attach(..., dataset_size=N)`` it checks ``sample_rate``).

        Returns:
            The sums with the canaries added, one tensor per parameter.

        Raises:
            ConfigurationError: before attach, with the wrong tensors, twice without
                :meth:`observe`, or a ``batch_size`` that is not an integer >= 0.
        """
        mapping = self._loop_tensors(summed, "inject")
        if self._injected:
            raise ConfigurationError("inject() twice without observe(): observe each step's noisy sums first")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0
        ):
            raise ConfigurationError(f"batch_size must be an integer >= 0, got {batch_size!r}")
        if self._check.examples:
            raise ConfigurationError(
                "inject() after inject_examples(): give the canaries the same way at every step of the run"
            )
        real = _flat([mapping[p] for p in self._params])
        self._hook.insert(mapping)
        self._injected = True
        out = [mapping[p] for p in self._params]
        self._check.injected(real, _flat(out), batch_size)
        return out

    def inject_examples(self, per_example: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """This step's per-example gradients **before clipping**, with one more row per canary
        sampled this step: ``example_norm``·C along the canary's coordinate, 0 elsewhere. Clip the
        rows returned at C as your loop clips its examples, sum them, add the noise, and call
        :meth:`observe` on that noisy sum (before any division). A loop that clips at C adds
        exactly C along each sampled canary's coordinate — the claimed mechanism's example, the
        scores' law under the claim —; one that does not clip lets ``example_norm``·C through, and
        the scores refute the claim. The inputs are not modified; the batch size is the rows given
        (checked against ``sample_rate`` with ``attach(..., dataset_size=N)``).

        Args:
            per_example: one tensor per attached parameter, ``[B, *shape]`` (B rows: this step's
                examples), in order.

        Returns:
            The tensors with the canary rows appended, ``[B + k, *shape]`` each (k: canaries sampled this step).

        Raises:
            ConfigurationError: before attach, with the wrong tensors, twice without :meth:`observe`,
                or after :meth:`inject` in the same run.

        Shapes:
            per_example: [B, *p.shape] for each attached parameter p.
        """
        if self._source is None:
            raise ConfigurationError("inject_examples() before attach(): attach the loop's parameters first")
        if self._optimizer is not None:
            raise ConfigurationError(f"these canaries are hooked into {self._source}: it injects and observes itself")
        rows = list(per_example)
        if (
            len(rows) != len(self._params)
            or any(not isinstance(g, torch.Tensor) or g.dim() != p.dim() + 1 for g, p in zip(rows, self._params))
            or any(g.shape[1:] != p.shape for g, p in zip(rows, self._params))
            or len({int(g.shape[0]) for g in rows}) != 1
        ):
            raise ConfigurationError(
                "inject_examples() needs one [B, *shape] tensor per attached parameter (the per-example gradients, "
                "B rows each), in order"
            )
        if self._injected:
            raise ConfigurationError("inject_examples() twice without observe(): observe each step's noisy sums first")
        if self._check.examples is False:
            raise ConfigurationError(
                "inject_examples() after inject(): give the canaries the same way at every step of the run"
            )
        clip = self._hook.max_grad_norm
        b = int(rows[0].shape[0])
        with torch.no_grad():
            norms = torch.zeros(b, dtype=torch.float64, device=rows[0].device)
            for g in rows:
                norms = norms + g.detach().reshape(b, -1).double().pow(2).sum(1)
            factor = (clip / norms.sqrt().clamp_min(clip)).to(torch.float64)
            real = torch.cat([torch.einsum("i,i...->...", factor, g.detach().double()).reshape(-1).cpu() for g in rows])
            drawn: dict[torch.Tensor, torch.Tensor] = {}
            self._hook.insert(drawn)  # C along each canary sampled this step, on zeros
            canary = _flat([drawn.get(p, torch.zeros_like(p)) for p in self._params])
            hit = torch.nonzero(canary).reshape(-1)
            out = []
            offset = 0
            for g, p in zip(rows, self._params):
                n = p.numel()
                mine = hit[(hit >= offset) & (hit < offset + n)]
                extra = torch.zeros(hit.numel(), n, dtype=g.dtype, device=g.device)
                position = torch.nonzero((hit >= offset) & (hit < offset + n)).reshape(-1)
                extra[position.to(g.device), (mine - offset).to(g.device)] = self._example_norm * clip
                out.append(torch.cat([g, extra.reshape(hit.numel(), *p.shape)]))
                offset += n
        self._injected = True
        self._check.example_rows(real, canary, self._example_norm, b)
        return out

    def observe(self, noisy: Sequence[torch.Tensor]) -> None:
        """Record this step's noisy sums (the output of :meth:`inject` plus the noise, before any
        division) along the canaries' coordinates.

        Args:
            noisy: this step's noisy sums, one per attached parameter.

        Raises:
            ConfigurationError: not attached to your own loop, wrong tensors, or ``observe`` without
                :meth:`inject` or :meth:`inject_examples`.
        """
        mapping = self._loop_tensors(noisy, "observe")
        if not self._injected:
            raise ConfigurationError(
                "observe() without inject(): inject the canaries into this step's clipped sums first"
            )
        self._injected = False
        self._check.observed(_flat([mapping[p] for p in self._params]))
        saved = [p.grad for p in self._params]
        try:  # DiracCanaries reads the noisy sum from .grad
            for p in self._params:
                p.grad = mapping[p].detach().reshape(p.shape).to(p.dtype)
            self._hook.observe(1.0)
        finally:
            for p, g in zip(self._params, saved):
                p.grad = g

    def _loop_tensors(self, tensors: Sequence[torch.Tensor], what: str) -> dict[torch.Tensor, torch.Tensor]:
        if self._source is None:
            raise ConfigurationError(f"{what}() before attach(): attach the loop's parameters first")
        if self._optimizer is not None:
            raise ConfigurationError(f"these canaries are hooked into {self._source}: it injects and observes itself")
        tensors = list(tensors)
        if len(tensors) != len(self._params) or any(t.shape != p.shape for t, p in zip(tensors, self._params)):
            raise ConfigurationError(f"{what}() needs one tensor per attached parameter, of its shape, in order")
        return dict(zip(self._params, tensors))

    # ------------------------------------------------------------------------------------ result
    @property
    def steps(self) -> int:
        """Steps the canaries have joined so far."""
        return self._hook.steps

    def result(
        self,
        epsilon: float,
        delta: float,
        *,
        unit: str = "node",
        dataset: str | None = None,
        confidence: float = 0.95,
        keep_scores: bool = False,
    ) -> CanaryAuditRecord:
        """The canary audit's record (:data:`dpaudit.auditing.results.CANARY_SCHEMA`, the keys of
        ``dpaudit canary``) testing your claim that the run is (``epsilon``, ``delta``)-DP for one
        example — a hypothesis: "claim refuted" when a certified bound exceeds it —:
        ``certified_epsilon_lower_bound`` (valid for any mechanism), ``max_possible``, ``verdict``,
        ``bound_valid`` …, and the claim's mechanism SGM(σ, q, T) at C tested in this one run:
        ``hypothesis_test`` (its p-value) and ``sgm_epsilon_lower_bound`` (the ε lower bound if the
        run is that mechanism form, σ unknown); a rejection no certified bound confirms gives the
        verdict "claim refuted (the claim's mechanism rejected, p = …)";
        ``unit``: what one example is (module docstring, "Which unit"); ``dataset``: the name of
        the data trained on (default: the ``GraphDataset`` given as ``features``, else none), for
        ``dpaudit.audit(..., canaries=[record])``; ``keep_scores`` adds the scores and the coins
        (reveals them).

        The canaries check their own placement first (:mod:`dpaudit.whitebox.self_check`: observed
        after a rescaling, injected after the division by the batch size, canaries given as
        examples that come through smaller than C, a wrong ``sample_rate``); the numbers go to the
        record's ``self_check``, with the noise test of a loop of your own (``noise_test``: the
        noise along the non-canary coordinates against the claim's σ·C).

        Raises:
            ConfigurationError: before attach or before any step, or an ε, δ, unit, dataset name
                or confidence out of range; or canaries placed where their verdict would say
                nothing about the claim (one line saying how to place them).
        """
        if self._source is None or not self._hook.steps:
            raise ConfigurationError("result() needs a finished run: attach the canaries and train at least one step")
        claim, delta = validate_epsilon(epsilon), validate_delta(delta)
        if not math.isfinite(claim):
            raise ConfigurationError("result() tests a finite ε claim, got ε = inf")
        if unit not in UNITS:
            raise ConfigurationError(
                f"unit must be one of {', '.join(UNITS)} (what one example of the loop is), got {unit!r}"
            )
        if dataset is not None and (not isinstance(dataset, str) or not dataset):
            raise ConfigurationError(f"dataset must be the name of the data trained on, got {dataset!r}")
        _positive("confidence", confidence, upper=1.0)
        hook = self._hook
        self_check: dict[str, Any] = {}
        refusal = self._check.refusal(
            epsilon=claim,
            delta=delta,
            sample_rate=hook.sample_rate,
            steps=hook.steps,
            dataset_size=self._dataset_size,
            record=self_check,
        )
        if refusal is not None:
            raise ConfigurationError(f"gradient canaries refused: {refusal}")
        sigma = claimed_noise_multiplier(claim, delta, hook.sample_rate, hook.steps)
        noise_test = self._check.noise_test(sigma)
        if noise_test is not None:
            self_check["noise_test"] = noise_test
        s = game.scores(hook, "iterates")
        notes: list[str] = []
        per_run: dict[str, Any] = {
            "run": 0,
            "seed": self.seed,
            "included": int(hook.included.sum()),
            "steps": hook.steps,
            "sample_rate": hook.sample_rate,
            "sampled_rate": game.sampling_rate_seen(hook),
            "max_grad_norm": hook.max_grad_norm,
            "law": hook.law.describe(),
            "auc": None,
        }
        if self._optimizer is not None:
            per_run["noise_multipliers_used"] = sorted(self._noise_multipliers)
        record = CanaryAuditRecord(
            schema=CANARY_SCHEMA,
            version=CANARY_SCHEMA_VERSION,
            kind="gradient",
            source=self._source,
            seed=self.seed,
            canaries=self.count,
            design={**self._design.describe(), "observe": "iterates", "claim": "stated"},
            runs_requested=1,
            runs=1,
            confidence=confidence,
            partial=False,
            score=f"white-box gradient canaries: {game.SCORE_NAMES['iterates']}",
            claimed_epsilon=claim,
            claim_delta=delta,
            claim_scope="stated",
            claim_source="user",
            unit=unit,
            target_epsilon=claim,
            dataset=dataset if dataset is not None else self._dataset,
            bound_valid=True,
            coverage=COVERAGE,
            notes=notes,
            self_check=self_check,
        )
        mechanism = {
            "noise_multiplier": sigma,
            "sample_rate": hook.sample_rate,
            "steps": hook.steps,
            "max_grad_norm": hook.max_grad_norm,
        }
        record.update(
            game.summarise_game(
                s,
                hook.included,
                delta=delta,
                claimed_epsilon=claim,
                confidence=confidence,
                keep_scores=keep_scores,
                notes=notes,
                hypothesis=True,
                mechanism=mechanism,
            )
        )
        per_run["auc"] = record["auc"]
        record["per_run"] = [per_run]
        return record

    def __repr__(self) -> str:
        where = self._source or "not attached"
        return f"GradientCanaries(count={self.count}, seed={self.seed}; {where}, {self._hook.steps} steps)"


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).double().cpu() for t in tensors])


def _opacus_batch_size(params: list[torch.Tensor]) -> int | None:
    """This step's batch size from Opacus' per-sample gradients (``None`` when it cannot tell)."""
    for p in params:
        sample = getattr(p, "grad_sample", None)
        if isinstance(sample, torch.Tensor) and sample.dim() >= 1:
            return int(sample.shape[0])
    return None
