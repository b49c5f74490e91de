"""The broken-mechanism zoo: private defenses with a deliberate, named break, each still
*claiming* the ε of its sound version, and the true ε the break really gives (issue 25, item 1).

A zoo defense trains exactly like the defense it breaks, releases that defense's privacy spec
(so ``Defense._check_privacy`` passes: the claim is the sound one's), and changes one thing the
spec does not see — the noise actually added, or the clipping. ``true_epsilon`` is the
accountant's ε for the noise really used at the run's δ (``inf`` where nothing bounds it), so a
canary audit's certified bound can be judged against both numbers:

* a **caught** break is one whose certified ε lower bound exceeds the claim (a bound above the
  claim is a proof, at the audit's confidence, that the claim is false), or whose certified μ
  exceeds the μ-GDP guarantee its spec also states (exact Gaussian mechanisms: GAP's edge level);
* a **sound** variant must never be caught (its true ε is its claim).

Importing this module registers the ``zoo-*`` defenses in :mod:`dpaudit.training.registry`. Only the
composition layer (benchmarks, tests) imports it: the zoo is never on a user's path.

=================================  ===========================================================
defense                            break (true ε)
=================================  ===========================================================
``zoo-mlp-dp-noise-div10``         DP-SGD noise multiplier σ/10 (accountant's ε at σ/10)
``zoo-mlp-dp-noise-0.6``           DP-SGD noise multiplier 0.6σ (accountant's ε at 0.6σ)
``zoo-mlp-dp-noise-0.8``           DP-SGD noise multiplier 0.8σ (accountant's ε at 0.8σ)
``zoo-mlp-dp-rate-x2``             Poisson rate 2q (≤ 1) where the accountant is told q
``zoo-mlp-dp-missing-step``        T + 1 steps where the accountant counts T
``zoo-mlp-dp-no-clipping``         no per-example clipping; noise std σ·C kept (∞)
``zoo-gap-edp-sensitivity-div10``  PMA calibrated to Δ/10 = √2/10 per hop (Gaussian ε at σΔ/10)
``zoo-gap-ndp-noise-div10``        encoder, PMA and classifier noise ÷ 10 (ledger at σ/10)
``zoo-gcon-noise-div10``           objective noise B ÷ 10 (Theorem 1 re-derived at rate 10β)
``zoo-dpgnn-noise-div10``          DP-GNN noise std σ/10 (Theorem 1 at z/10)
``zoo-gaussian-sum-sigma-half``    toy Gaussian sum with σ/2 (Gaussian ε at σ/2)
=================================  ===========================================================
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

import defenses.baselines.mlp_dp as mlp_dp
from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger, calibrate_noise
from dpaudit.auditing.intervals import bonferroni_confidence
from dpaudit.auditing.results import REFUTING_VERDICTS
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.release import declared_train_size
from dpaudit.release.deployments import inference_entry
from dpaudit.release.model import ReleasedModel
from dpaudit.training.defense import Defense, PrivateHyperparameters
from dpaudit.training.registry import get_defense, register_defense


def ledger_epsilon(mechanisms, delta: float) -> float:
    """The accountant's ε of ``mechanisms`` composed, at ``delta`` (the defenses' own ledger).

    Args:
        mechanisms: the mechanisms of one run.
        delta: δ.

    Returns:
        ε at ``delta``.
    """
    return float(PrivacyLedger().extend(list(mechanisms)).explain_epsilon(delta)[0])


# --------------------------------------------------------------------------- mlp-dp


@contextmanager
def _mlp_dp_training(noise_factor: float, clip_factor: float, rate_factor: float = 1.0, extra_steps: int = 0):
    """While open, mlp-dp's DP-SGD adds noise std σ·C·``noise_factor``, clips at
    C·``clip_factor``, samples at ``rate_factor`` × the planned rate q (capped at 1) and runs
    ``extra_steps`` more steps than planned, and reports the mechanism it was asked to run (σ, q,
    T): what a bug between the accountant and the optimiser looks like from outside."""
    real = mlp_dp.train_mlp_dp

    def wrong(module, x, y, *, noise_multiplier, max_grad_norm, schedule=None, **kw):
        planned = schedule
        if schedule is not None and rate_factor != 1.0:
            schedule = dataclasses.replace(schedule, sample_rate=min(1.0, schedule.sample_rate * rate_factor))
        if schedule is not None and extra_steps:
            # one epoch of all the steps: the extra step needs no equal split
            schedule = dataclasses.replace(schedule, steps=schedule.steps + extra_steps, epochs=1)
            kw["epochs"] = 1
        # opacus-style noise std is σ'·C': σ' = σ·noise/clip keeps it at σ·C·noise.
        spent = real(
            module,
            x,
            y,
            noise_multiplier=noise_multiplier * noise_factor / clip_factor,
            max_grad_norm=max_grad_norm * clip_factor,
            schedule=schedule,
            **kw,
        )
        if spent is None:
            return None
        if planned is not None:
            return PoissonSubsampledGaussian(noise_multiplier, planned.sample_rate, planned.steps)
        return PoissonSubsampledGaussian(noise_multiplier, spent.sample_rate, spent.steps)

    mlp_dp.train_mlp_dp = wrong
    try:
        yield
    finally:
        mlp_dp.train_mlp_dp = real


class _BrokenMLPDP(mlp_dp.MLPDP):
    """mlp-dp whose DP-SGD runs another mechanism than it accounts: another (noise multiplier,
    clipping norm), a higher sampling rate, or more steps."""

    noise_factor = 1.0
    clip_factor = 1.0
    rate_factor = 1.0
    extra_steps = 0

    def _fit(self, dataset, split, delta):
        with _mlp_dp_training(self.noise_factor, self.clip_factor, self.rate_factor, self.extra_steps):
            return super()._fit(dataset, split, delta)

    def true_epsilon(self, dataset: GraphDataset, split: Split, delta: float, module: str | None = None) -> float:
        """The run's true ε (one DP-SGD run: ``module`` names nothing else)."""
        if self.clip_factor > 1.0:
            return math.inf  # an unclipped gradient has unbounded sensitivity
        plan = self.plan(dataset.num_features, declared_train_size(dataset, split), delta)
        mech = plan.mechanism
        run = PoissonSubsampledGaussian(
            mech.sigma * self.noise_factor, min(1.0, mech.sample_rate * self.rate_factor), mech.steps + self.extra_steps
        )
        return ledger_epsilon([run], delta)


@register_defense
class MLPDPNoiseDiv10(_BrokenMLPDP):
    """A deliberately broken defense of the zoo: mlp-dp whose DP-SGD adds a tenth of the accounted noise; its spec still claims the accounted guarantee.

    Attributes:
        noise_factor: factor on the noise multiplier actually used (0.1).
    """

    name = "zoo-mlp-dp-noise-div10"
    summary = "zoo: mlp-dp with a tenth of the accounted DP-SGD noise"
    noise_factor = 0.1


@register_defense
class MLPDPNoise06(_BrokenMLPDP):
    name = "zoo-mlp-dp-noise-0.6"
    summary = "zoo: mlp-dp with 0.6 of the accounted DP-SGD noise"
    noise_factor = 0.6


@register_defense
class MLPDPNoise08(_BrokenMLPDP):
    name = "zoo-mlp-dp-noise-0.8"
    summary = "zoo: mlp-dp with 0.8 of the accounted DP-SGD noise (20 % short)"
    noise_factor = 0.8


@register_defense
class MLPDPRateX2(_BrokenMLPDP):
    name = "zoo-mlp-dp-rate-x2"
    summary = "zoo: mlp-dp sampling at twice the Poisson rate its accountant is told"
    rate_factor = 2.0


@register_defense
class MLPDPMissingStep(_BrokenMLPDP):
    name = "zoo-mlp-dp-missing-step"
    summary = "zoo: mlp-dp running one DP-SGD step more than its accountant counts"
    extra_steps = 1


@register_defense
class MLPDPNoClipping(_BrokenMLPDP):
    """A deliberately broken defense of the zoo: mlp-dp without per-example clipping (the noise std σ·C is unchanged); its spec still claims the accounted guarantee.

    Attributes:
        clip_factor: factor on the clipping norm actually used (10⁶: nothing is clipped).
    """

    name = "zoo-mlp-dp-no-clipping"
    summary = "zoo: mlp-dp without per-example clipping (noise std σ·C unchanged)"
    clip_factor = 1e6  # C' = 10⁶·C: no gradient is ever clipped


# --------------------------------------------------------------------------- GAP


class _BrokenGAP:
    """Mixin for GAP. ``sensitivity_factor`` makes PMA calibrate to that fraction of the true
    per-hop sensitivity Δ: the noise std σ·Δ shrinks by it while the recorded
    ``GaussianMechanism(σΔ', Δ', K)`` keeps its ε (the ratio is unchanged), exactly the bug of a
    wrong sensitivity. ``noise_factor`` scales the noise of both DP-SGD runs (node level) while
    the spec keeps the accounted σ."""

    noise_factor = 1.0
    sensitivity_factor = 1.0

    def aggregation_sensitivity(self, max_degree=None):
        return super().aggregation_sensitivity(max_degree) * self.sensitivity_factor

    def _train_module(self, module, inputs, targets, sigma, schedule, epochs, desc, seed, val):
        spent = super()._train_module(
            module, inputs, targets, sigma * self.noise_factor, schedule, epochs, desc, seed, val
        )
        if spent is None:
            return None
        return PoissonSubsampledGaussian(sigma, spent.sample_rate, spent.steps)

    def true_epsilon(self, dataset: GraphDataset, split: Split, delta: float, module: str | None = None) -> float:
        """The true ε of the whole pipeline, or of one DP-SGD ``module`` (``"encoder"`` /
        ``"classifier"``, node level) — the part a gradient-canary audit tests."""
        schedules = self.schedules(declared_train_size(dataset, split))
        sigma = self._calibrate(delta, schedules, self.hp.hops)
        mechanisms = self.mechanisms_for(sigma, schedules)
        if module is not None:
            mechanisms = [mechanisms[{"encoder": 0, "classifier": 2}[module]]]
        true = []
        for m in mechanisms:
            if isinstance(m, GaussianMechanism):  # PMA: the noise std added, against the true sensitivity
                true.append(GaussianMechanism(m.sigma, m.sensitivity / self.sensitivity_factor, m.count, name=m.name))
            else:
                true.append(PoissonSubsampledGaussian(m.sigma * self.noise_factor, m.sample_rate, m.steps))
        return ledger_epsilon(true, delta)


@register_defense
class GAPEdgeSensitivityDiv10(_BrokenGAP, get_defense("gap-edp")):
    """A deliberately broken defense of the zoo: gap-edp calibrating PMA to a tenth of the edge sensitivity √2; its spec still claims the accounted guarantee.

    Attributes:
        sensitivity_factor: fraction of the true per-hop sensitivity PMA calibrates to (0.1).
    """

    name = "zoo-gap-edp-sensitivity-div10"
    summary = "zoo: gap-edp calibrating PMA to a tenth of the edge sensitivity √2"
    sensitivity_factor = 0.1


@register_defense
class GAPNodeNoiseDiv10(_BrokenGAP, get_defense("gap-ndp")):
    """A deliberately broken defense of the zoo: gap-ndp with a tenth of the accounted noise in PMA and in both DP-SGD runs; its spec still claims the accounted guarantee.

    Attributes:
        noise_factor: factor on the DP-SGD runs' noise (0.1).
        sensitivity_factor: fraction of the per-hop sensitivity PMA calibrates to (0.1).
    """

    name = "zoo-gap-ndp-noise-div10"
    summary = "zoo: gap-ndp with a tenth of the accounted noise in PMA and both DP-SGD runs"
    noise_factor = 0.1
    sensitivity_factor = 0.1


# --------------------------------------------------------------------------- GCON


@contextmanager
def _gcon_objective_noise(factor: float):
    """While open, GCON's objective perturbation draws B with ``factor`` times the radius
    Algorithm 2 asks for (rate β/``factor``) and keeps the plan's β in its spec."""
    import defenses.gcon.defense as gcon

    real = gcon.sample_objective_noise

    def wrong(dim, count, beta, rng):
        return real(dim, count, beta / factor, rng)

    gcon.sample_objective_noise = wrong
    try:
        yield
    finally:
        gcon.sample_objective_noise = real


class _BrokenGCON(get_defense("gcon")):
    """GCON whose objective noise B is ``noise_factor`` times what Theorem 1 calibrates."""

    noise_factor = 1.0

    def _train_theta(self, *args, **kwargs):
        with _gcon_objective_noise(self.noise_factor):
            return super()._train_theta(*args, **kwargs)

    def true_epsilon(self, dataset: GraphDataset, split: Split, delta: float, module: str | None = None) -> float:
        """GCON's own accountant on the noise really drawn: Theorem 1's (ε, δ) re-derived
        (Lemmas 7–9, :meth:`TheoremOneParameters.guarantee`) at rate β/``noise_factor``, plus
        AMP's unchanged share, composed as the ledger does (ε's and δ's add). Its δ is below
        the claim's (a larger rate only shrinks Lemma 9's tail), so this ε holds at ``delta``."""
        from dataclasses import replace

        from defenses.gcon import _validate
        from defenses.gcon.plan import plan_configuration
        from defenses.gcon.protocols import default_config

        hp = self.hp
        config = default_config(hp, _validate(hp))
        n1 = dataset.num_nodes if config.pseudo_labels and not split.inductive else len(split.train)
        dim = len(config.steps) * config.encoder_hidden
        plan = plan_configuration(self.epsilon, delta, dataset.num_classes, dim, n1, config, hp)
        broken = replace(plan.theorem1, beta=plan.theorem1.beta / self.noise_factor)
        epsilon, _ = broken.guarantee()
        return float(epsilon + plan.amp.epsilon)


@register_defense
class GCONNoiseDiv10(_BrokenGCON):
    """A deliberately broken defense of the zoo: gcon with a tenth of Theorem 1's objective-perturbation noise; its spec still claims the accounted guarantee.

    Attributes:
        noise_factor: factor on the objective noise B (0.1).
    """

    name = "zoo-gcon-noise-div10"
    summary = "zoo: gcon with a tenth of Theorem 1's objective-perturbation noise"
    noise_factor = 0.1


# --------------------------------------------------------------------------- DP-GNN


@contextmanager
def _dpgnn_training(noise_factor: float):
    """While open, DP-GNN's loop adds noise std σ·``noise_factor`` while its spec keeps Theorem 1
    at σ: the accountant and the optimiser disagree, as in :func:`_mlp_dp_training`."""
    import defenses.dpgnn.defense as dpgnn

    real = dpgnn.train_dp

    def quieter(*args, **kwargs):
        bound = inspect.signature(real).bind(*args, **kwargs)
        bound.arguments["noise_std"] *= noise_factor
        return real(*bound.args, **bound.kwargs)

    dpgnn.train_dp = quieter
    try:
        yield
    finally:
        dpgnn.train_dp = real


@register_defense
class DPGNNNoiseDiv10(get_defense("dpgnn")):
    """A deliberately broken defense of the zoo: dpgnn with a tenth of the noise Theorem 1 accounts; its spec still claims the accounted guarantee.

    Attributes:
        noise_factor: factor on the noise multiplier actually used (0.1).
    """

    name = "zoo-dpgnn-noise-div10"
    summary = "zoo: dpgnn with a tenth of the noise Theorem 1 accounts"
    noise_factor = 0.1

    def _fit(self, dataset, split, delta):
        with _dpgnn_training(self.noise_factor):
            return super()._fit(dataset, split, delta)

    def true_epsilon(self, dataset: GraphDataset, split: Split, delta: float, module: str | None = None) -> float:
        """Theorem 1's ε for the plan's schedule at noise multiplier z·``noise_factor`` (one run:
        ``module`` names nothing else). ε depends on σ/C only, so C = 1 serves both protocols.

        Args:
            dataset: the training graph.
            split: its split (the declared training size).
            delta: δ.
            module: ignored (one DP-SGD run).

        Returns:
            The true ε.
        """
        from defenses.dpgnn import protocols

        run = protocols.plan(self.hp, self.protocol, self.epsilon, delta, declared_train_size(dataset, split))
        quieter = dataclasses.replace(run, noise_multiplier=run.noise_multiplier * self.noise_factor)
        return ledger_epsilon([quieter.mechanism(1.0)], delta)


# --------------------------------------------------------------------------- a toy Gaussian mechanism


@dataclass
class ToyHyperparameters(PrivateHyperparameters):
    """Hyperparameters of the toy Gaussian sum: only the inherited ones.

    Attributes:
        protocol: sound: every step proven (default); paper: as the authors ran it, sound: false
    """

    pass


class ToyGaussianModel(ReleasedModel):
    """Posteriors softmax(Wᵀ x̂) from the released noisy class sums W [F, C].

    Args:
        weights: the released noisy class sums ``[F, C]``.
        privacy: its privacy spec.
        card: its model card.
    """

    kind = "zoo-gaussian-sum"

    def __init__(self, weights, privacy, card):
        super().__init__(privacy, card)
        self.weights = weights

    def predict_proba(self, graph, nodes=None):
        """Args:
            graph: the query graph (its ``x`` is read).
            nodes: the nodes answered; ``None``: every node.

        Returns:
            Posteriors ``[len(nodes), C]`` (float64).
        """
        x = torch.nn.functional.normalize(graph.x.double(), dim=1)
        out = torch.softmax(x @ self.weights, dim=1)
        return out if nodes is None else out[torch.as_tensor(nodes)]

    def embed(self, graph, nodes=None):
        """The posteriors (:meth:`predict_proba`) serve as embeddings.

        Args:
            graph: the query graph (its ``x`` is read).
            nodes: the nodes answered; ``None``: every node.

        Returns:
            Posteriors ``[len(nodes), C]`` (float64).
        """
        return self.predict_proba(graph, nodes)

    def config(self):
        """No configuration beyond the weights: ``{}``."""
        return {}

    def state_tensors(self):
        """The released tensors: ``{"weights": W}``."""
        return {"weights": self.weights}

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Args:
            config: the saved configuration (unused).
            tensors: the saved tensors (``weights``).
            privacy: the saved privacy spec.
            card: the saved model card.

        Returns:
            The model.
        """
        return cls(tensors["weights"], privacy, card)


@register_defense
class ToyGaussianSum(Defense):
    r"""The Gaussian mechanism (Dwork & Roth 2014, Thm A.1; exact calibration of Balle & Wang
    2018) on W = Σ_{v ∈ train} clip₁(x_v) e_{y_v}ᵀ (Frobenius sensitivity 1 under adding or
    removing a node); ``sigma_factor`` < 1 adds less noise than accounted (the broken variant).

    Attributes:
        sigma_factor: factor on the calibrated σ actually used (1.0: sound).
    """

    name = "zoo-gaussian-sum"
    summary = "zoo: Gaussian mechanism on per-class feature sums (node level)"
    unit = "node"
    hyperparameters_class = ToyHyperparameters
    sigma_factor = 1.0

    def _sigma(self, delta: float) -> float:
        return calibrate_noise(self.epsilon, delta, lambda s: GaussianMechanism(s, 1.0, 1))

    def _fit(self, dataset, split, delta):
        sigma = self._sigma(delta)
        x = dataset.data.x[split.train].double()
        x = x / x.norm(dim=1, keepdim=True).clamp(min=1.0)
        y = torch.nn.functional.one_hot(dataset.data.y[split.train], dataset.num_classes).double()
        g = torch.Generator().manual_seed(self.seed)
        w = x.t() @ y + self.sigma_factor * sigma * torch.randn(x.size(1), y.size(1), generator=g, dtype=torch.double)
        spec = PrivacyLedger().step(GaussianMechanism(sigma, 1.0, 1)).spec(delta, "node", target_epsilon=self.epsilon)
        return ToyGaussianModel(
            w, spec, {"inference": inference_entry(private=True, training_graph=True, note="features only")}
        )

    def true_epsilon(self, dataset: GraphDataset, split: Split, delta: float, module: str | None = None) -> float:
        """The true ε (one Gaussian release: ``module`` names nothing else).

        Args:
            dataset: the training graph (unused).
            split: its split (unused).
            delta: δ.
            module: ignored.

        Returns:
            The true ε.
        """
        return ledger_epsilon([GaussianMechanism(self._sigma(delta) * self.sigma_factor, 1.0, 1)], delta)


@register_defense
class ToyGaussianHalf(ToyGaussianSum):
    """The toy Gaussian sum with half the accounted σ (broken).

    Attributes:
        sigma_factor: 0.5.
    """

    name = "zoo-gaussian-sum-sigma-half"
    summary = "zoo: the toy Gaussian sum with half the accounted σ"
    sigma_factor = 0.5


# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Variant:
    """One zoo entry: ``defense`` (registered name) trains; ``base`` is the sound defense it
    breaks (its audits are :data:`AUDIT_PLANS`'s); ``variant`` is ``"sound"`` or the break's name.

    Attributes:
        base: the sound defense's registered name.
        variant: ``"sound"`` or the break's name.
        defense: the registered defense that trains.
    """

    base: str
    variant: str
    defense: str


VARIANTS: tuple[Variant, ...] = (
    Variant("mlp-dp", "sound", "mlp-dp"),
    Variant("mlp-dp", "noise-div10", "zoo-mlp-dp-noise-div10"),
    Variant("mlp-dp", "no-clipping", "zoo-mlp-dp-no-clipping"),
    Variant("gap-edp", "sound", "gap-edp"),
    Variant("gap-edp", "sensitivity-div10", "zoo-gap-edp-sensitivity-div10"),
    Variant("gap-ndp", "sound", "gap-ndp"),
    Variant("gap-ndp", "noise-div10", "zoo-gap-ndp-noise-div10"),
    Variant("gcon", "sound", "gcon"),
    Variant("gcon", "noise-div10", "zoo-gcon-noise-div10"),
    Variant("dpgnn", "sound", "dpgnn"),
    Variant("dpgnn", "noise-div10", "zoo-dpgnn-noise-div10"),
    Variant("zoo-gaussian-sum", "sound", "zoo-gaussian-sum"),
    Variant("zoo-gaussian-sum", "sigma-half", "zoo-gaussian-sum-sigma-half"),
)


#: the subtle bugs of issue 47 (item 3), tested by gradient canaries and the claim's hypothesis
#: test (``benchmarks/bench_bug_zoo.py``): each trains like mlp-dp and claims its ε
SUBTLE_VARIANTS: tuple[Variant, ...] = (
    Variant("mlp-dp", "sound", "mlp-dp"),
    Variant("mlp-dp", "noise-0.8", "zoo-mlp-dp-noise-0.8"),
    Variant("mlp-dp", "noise-0.6", "zoo-mlp-dp-noise-0.6"),
    Variant("mlp-dp", "rate-x2", "zoo-mlp-dp-rate-x2"),
    Variant("mlp-dp", "missing-step", "zoo-mlp-dp-missing-step"),
)


def max_in_degree(dataset: GraphDataset) -> int:
    """The largest in-degree of the graph: the degree promise the zoo gives sound node-level GAP.

    Args:
        dataset: the graph.

    Returns:
        The largest in-degree.
    """
    return int(torch.bincount(dataset.data.edge_index[1], minlength=dataset.num_nodes).max())


def true_epsilon(
    defense: str,
    dataset: GraphDataset,
    split: Split,
    epsilon: float,
    delta: float,
    spent: float,
    overrides: dict[str, Any] | None = None,
    module: str | None = None,
) -> float:
    """The ε that the noise a run of ``defense`` actually adds gives at ``delta`` — of the
    whole run, or of one DP-SGD ``module`` —: a zoo break's own computation, or for a sound
    defense the ε it ``spent`` on what was audited (its accountant's).

    Args:
        defense: the registered defense's name.
        dataset: the training graph.
        split: its split.
        epsilon: the defense's target ε.
        delta: δ.
        spent: the ε the run's accountant spent on what was audited.
        overrides: the defense's hyperparameter overrides.
        module: the audited DP-SGD module; ``None``: the whole run.

    Returns:
        The true ε.
    """
    instance = get_defense(defense)(epsilon=epsilon, delta=delta, seed=0, device="cpu", **(overrides or {}))
    if hasattr(instance, "true_epsilon"):
        return float(instance.true_epsilon(dataset, split, delta, module))
    return float(spent)


# --------------------------------------------------------------------------- auditing a variant


def gcon_runs(claim: float) -> int:
    """Trainings pooled in GCON's audit at ``claim`` (each holds one canary). Below ε = 1 each
    canary carries less, and the one-run tests must resolve a guess precision e^ε/(1 + e^ε)
    nearer ½ (0.62 at 0.5): three times as many trainings there.

    Args:
        claim: the claimed ε.

    Returns:
        12,000 below ε = 1, else 4,000.
    """
    return 12000 if claim < 1.0 else 4000


#: the canary audits of each base defense: (kind, canaries per run, design[, runs]) — runs 1 when
#: left out, or a function of the claim. Node-level DP-SGD gets two:
#: node canaries on the rarest feature coordinates (the black-box view of a released model:
#: they test the whole pipeline, features to posteriors) and Dirac gradient canaries (Nasr et
#: al. 2023), white-box over every iterate, at the norm the training loop clips to — the only
#: design here that certifies more than ε = 4 with a few thousand canaries.
AUDIT_PLANS: dict[str, tuple[tuple, ...]] = {
    "mlp-dp": (("node", 1000, {"feature": "rare"}), ("gradient", 5000, {})),
    # endpoints shared by 4 canaries: 5,000 edge canaries fit Cora (at most 5,416) and cora_ml;
    # with each endpoint used once (≤ N/2 canaries) no one-run bound exceeds ≈ 3.5 (issue 25)
    "gap-edp": (("edge", 5000, {"endpoint_uses": 4}),),
    # GAP's node level: the encoder's DP-SGD run, white-box (its own share of the claim)
    "gap-ndp": (("gradient", 5000, {}),),
    "dpgnn": (("gradient", 5000, {}),),
    # GCON's worst-case edge canaries (defenses.gcon.canaries): an auditor-added node pair, the
    # edge inside it the coin, only one endpoint a row of the objective (it moves all c columns
    # of B, not two: a privacy loss up to β(1 − α)/2 instead of 2β(1 − α)/c), scored by the
    # exact likelihood of Θ; one canary per training, gcon_runs(claim) trainings pooled (a plan's
    # run count may be a function of the claim)
    "gcon": (("edge", 1, {"structure": "gcon-pairs", "rows": "one"}, gcon_runs),),
    "zoo-gaussian-sum": (("node", 1000, {"feature": "rare"}),),
}


#: hyperparameters the zoo audits a base defense at (both variants alike; recorded in each row).
#: The claim holds at every setting and a break applies at every setting, so the auditor picks
#: the setting where the worst case is reachable. GCON: d₁ = 1 makes every column of the
#: objective noise B a Laplace variable (in d dimensions a canary's privacy loss is spread by a
#: random angle, about 1/√d of the worst case); one propagation step lets a single edge use all
#: of Lemma 2's Ψ; Λ = 5 keeps c_θ (hence Theorem 1's c₂c_θ share of the bound) small; two
#: encoder epochs already map the canaries' ±features apart (the encoder reads no edge, and
#: each training fits its own); without pseudo-labels the canary's second endpoint is a node of
#: no split, so not a row of the objective (``rows="one"``).
AUDIT_OVERRIDES: dict[str, dict[str, Any]] = {
    "gcon": {"encoder_hidden": 1, "steps": "1", "regularization": 5.0, "encoder_epochs": 2, "pseudo_labels": False},
}

#: δ a base defense is audited at, where not its default. The one-run theorems pay about m·δ for
#: m canaries (Steinke et al., Theorem 3.1): at GCON's default δ = 1e-4 pooling 12,000 canaries
#: makes that term exceed 1 and the guess-count bound collapses to 0. A claim at δ = 1e-7 is as
#: much the defense's claim as one at 1e-4 (it calibrates its noise to it), so the zoo tests that one.
AUDIT_DELTAS: dict[str, float] = {"gcon": 1e-7}


def audit_variant(
    variant: Variant,
    dataset: GraphDataset,
    claim: float,
    *,
    split: str,
    seed: int = 0,
    confidence: float = 0.95,
    overrides: dict[str, Any] | None = None,
    plan: tuple | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Audit one zoo variant at ``claim`` with every audit of its plan (``plan`` replaces
    :data:`AUDIT_PLANS`'s) and return the row ``{"defense", "dataset", "variant",
    "claimed_epsilon", "true_epsilon", "certified", "caught", "claimed_mu", "certified_mu",
    "audits"}``.

    With k audits, each runs at confidence 1 − (1 − ``confidence``)/k (Bonferroni), so the
    largest certified bound over them is valid at ``confidence``; ``caught``: some audit's
    verdict refutes the spec (:data:`dpaudit.auditing.results.REFUTING_VERDICTS`: "guarantee
    broken", or "claim refuted" for a hypothesis) — its certified ε bound exceeds the ε it tests (the spent
    ε), or, where the spec states μ-GDP (``claimed_mu``, e.g. GAP's edge level), its certified
    μ exceeds that μ. Each audit trains its own run(s) with its own fair coins.

    Args:
        variant: the zoo entry.
        dataset: the graph.
        claim: the claimed ε.
        split: the split spec.
        seed: the audits' seed.
        confidence: joint confidence of the certified bounds.
        overrides: the defense's hyperparameter overrides.
        plan: audits replacing the base defense's plan.
        progress: show progress bars.

    Returns:
        The row above.
    """
    from dpaudit.app.workflows.canary import canary_audit
    from dpaudit.data.splits import make_split

    audits = plan if plan is not None else AUDIT_PLANS[variant.base]
    level = bonferroni_confidence(confidence, len(audits))
    settings = {**AUDIT_OVERRIDES.get(variant.base, {}), **(overrides or {})}
    if variant.base == "gap-ndp":
        # the degree promise at the graph's own degree, as the recorded rows ran (the gradient
        # canaries audit the DP-SGD runs, whose σ does not depend on the degree bound)
        settings.setdefault("degree_bound", "promise")
        settings.setdefault("max_degree", max_in_degree(dataset))
    results = []
    for kind, canaries, design, runs in ((*entry, 1)[:4] for entry in audits):
        runs = runs(claim) if callable(runs) else runs
        results.append(
            canary_audit(
                variant.defense,
                dataset,
                claim,
                kind=kind,
                canaries=canaries,
                runs=runs,
                split=split,
                seed=seed,
                design=design,
                confidence=level,
                delta=AUDIT_DELTAS.get(variant.base, "auto"),
                overrides=settings,
                progress=progress,
                keep_scores=False,
            )
        )
    claimed = max(r["claimed_epsilon"] for r in results)
    certified = max(r["certified_epsilon_lower_bound"] or 0.0 for r in results)
    # each audit against its own claim (a module's share, or a group-privacy claim, may differ);
    # a spec that states μ-GDP is also caught by a certified μ above it (the canary verdict)
    caught = any(r["verdict"] in REFUTING_VERDICTS for r in results)
    mus = [(r["claimed_mu"], r["certified_mu_lower_bound"]) for r in results if r.get("claimed_mu") is not None]
    # gradient canaries in one module of several test that module's share: compare like with like
    modules = {r.get("module") if r.get("claim_scope") == "module" else None for r in results}
    module = modules.pop() if len(modules) == 1 else None
    truth = true_epsilon(
        variant.defense,
        dataset,
        make_split(dataset, split, seed),
        claim,
        results[0]["defense_delta"],
        claimed,
        settings,
        module,
    )
    return {
        "defense": variant.base,
        "dataset": dataset.name,
        "variant": variant.variant,
        "claimed_epsilon": claimed,
        "true_epsilon": truth,
        "certified": certified,
        "caught": caught,
        "overrides": settings,
        "claimed_mu": max((claimed_mu for claimed_mu, _ in mus), default=None),
        "certified_mu": max((certified_mu for _, certified_mu in mus), default=None),
        "audits": [
            # the design without its edge pairs (thousands; redrawn from the seed)
            {
                "kind": r["kind"],
                "canaries": r["canaries"],
                "runs": r["runs"],
                "confidence": r["confidence"],
                "design": {k: v for k, v in r["design"].items() if k != "pairs"},
                "claimed_epsilon": r["claimed_epsilon"],
                "delta": r.get("defense_delta"),
                "certified": r["certified_epsilon_lower_bound"],
                "claimed_mu": r.get("claimed_mu"),
                "certified_mu": r.get("certified_mu_lower_bound"),
                "bounds": r["epsilon_lower_bound"],
                "auc": r["auc"],
                "verdict": r["verdict"],
            }
            for r in results
        ],
    }
