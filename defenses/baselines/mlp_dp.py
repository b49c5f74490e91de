r"""Node-level private ``mlp-dp``: its presets, plan, DP-SGD training and re-planning.

``mlp-dp`` is the "Features" baseline of DPAR and "MLP-DP" of GAP: an MLP on node features
alone, trained with DP-Adam (or DP-SGD) by :func:`dpaudit.training.dpsgd.train_dp_sgd` (ghost
clipping; opacus' clipping and noise, bit for bit) — Poisson sampling at a rate q fixed before
training, per-node gradient clipping to C, Gaussian noise N(0, z²C²I) with z calibrated so that
the accounted ε ≤ target (:class:`~dpaudit.accounting.PoissonSubsampledGaussian`, Mironov et al.
2019, add/remove). Because the MLP never reads the graph, each node influences exactly one
per-example gradient, so example-level DP-SGD is node-level DP (and edge-level DP: edges are not
used at all). Inference on a node reads only its own features.

No private size decides a public choice. At node level the number of training nodes n is
private (one node more or less changes it), and the architecture, q, the steps and σ are all
published in ``model.json``; so the whole plan (:class:`MLPDPPlan`, :meth:`MLPDP.plan`) reads
only public inputs — the hyperparameters, the feature count and the **declared** training-set
size n̂ (:func:`dpaudit.release.declared_train_size`: a public benchmark's split size, or what the
user declares). The schedule is :meth:`dpaudit.training.dpsgd.PoissonSchedule.plan`: q = 1/⌈n̂/B⌉ and
⌈n̂/B⌉ steps per epoch, or q = the ``sample_rate`` hyperparameter and ⌈1/q⌉ steps per epoch; B
is min(B, n̂). With neither a declaration nor ``sample_rate`` a private run is refused before any
work; ``auto`` needs the declaration. Neighbouring training sets of n and n − 1 nodes therefore
publish the same ``model.json`` (weights aside). At ε = ∞ nothing is accounted and an
undeclared graph's real size stands in. The same plan method re-derives a saved card's
mechanisms on load (:meth:`MLPDP.replan`).

``mlp-dp`` configurations (hyperparameter ``preset``; any field set explicitly wins):

* ``auto`` (default) — a fixed public rule of the declared training-set size n̂ and the
  feature dimension F, never of labels, accuracies or the real n. With Poisson rate q = B/n̂,
  T steps and noise multiplier z, the accountant needs z ≈ q√T/ε for small q, so the per-step
  noise on the *mean* clipped gradient is zC/B ≈ C√T/(n̂ε): the noise-to-signal ratio falls like
  1/n̂, and its norm grows like √d with the number of parameters d. Small training sets
  therefore get the smallest model that can fit the classes: a multinomial logistic regression
  (``layers = 1``, d = F·c) when n̂ < 1000 or n̂ < F, trained full batch (B = n̂, q = 1) for 100
  steps with Adam lr 0.05 and no dropout; larger sets get the 2 × 64 MLP (dropout 0.5, Adam lr
  0.01) with B = max(256, ⌈n̂/16⌉) (≤ n̂) and 30 epochs.
* ``gap`` — GAP's MLP-DP (Sajadmanesh et al. 2023, §6): 3 layers, 16 hidden, SELU, DP-Adam
  with C = 1, lr 0.01, 10 epochs, batch 256. The paper (§6, "Model implementation details")
  uses BatchNorm for every method *except* the node-private ones, MLP-DP included, "for which
  batch-normalization is not supported": BatchNorm normalises with batch statistics, so one
  node's features would enter every other example's gradient and per-example clipping would
  no longer bound a node's influence. So this preset has no BatchNorm, as in the paper.
* ``dpar`` — DPAR's "Features" baseline (Zhang et al. 2024, §5: DPAR's own training with a
  one-hot APPR row per node, i.e. an MLP on the node's own features): 2 layers of width 32
  (hidden 32), no biases, dropout 0.1, DP-Adam lr 5·10⁻³, C = 1, batch 60, 200 epochs. DPAR
  additionally trains on a q′ = 0.09 node sample of the training pool and amplifies by it;
  that sample is not reproduced here (the baseline trains on every training node).

``protocol=paper`` keeps the epoch with the best validation accuracy (GAP's reported numbers
do; evaluated after every epoch) — a choice read from private validation labels that the
accountant does not cover, listed in ``spec.unaccounted`` (``sound: false``); which epoch won is
the owner's record (``model.record["mlp_dp"]``), the card says only the rule. ``sound`` keeps
the last iterate.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from defenses.baselines.nonprivate import BaselineModel, build_baseline_architecture, defense_from_card
from dpaudit.accounting import PrivacyLedger, PrivacySpec
from dpaudit.accounting.mechanisms import PoissonSubsampledGaussian
from dpaudit.accounting.verify import refuse
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, ModelFormatError
from dpaudit.nn import ACTIVATIONS, activation, features
from dpaudit.release import declared_train_size
from dpaudit.release.deployments import OWN_FEATURES, inference_entry
from dpaudit.training.constraints import COUNT, DROPOUT, POSITIVE, SAMPLE_RATE, WIDTH, Options
from dpaudit.training.defense import Defense, PrivateHyperparameters
from dpaudit.training.dpsgd import PoissonSchedule, noise_for_plan, plan_mismatch, train_dp_sgd
from dpaudit.training.noise import NoiseSource
from dpaudit.training.private_selection import Score
from dpaudit.training.registry import register_defense

# --------------------------------------------------------------------------------- mlp-dp
PRESETS: dict[str, dict] = {
    # GAP §6: 3 layers, 16 hidden, SELU, DP-Adam C = 1, lr 0.01, 10 epochs, batch 256 (Facebook).
    "gap": dict(layers=3, hidden=16, act="selu", dropout=0.0, lr=0.01, epochs=10, batch_size=256, bias=True),
    # DPAR §5 / its Algorithm 2 settings: 2 × 32, no biases, dropout 0.1, lr 5e-3, batch 60, 200 epochs.
    "dpar": dict(layers=2, hidden=32, act="relu", dropout=0.1, lr=0.005, epochs=200, batch_size=60, bias=False),
}
SMALL_TRAINING_SET = 1000


def auto_configuration(train_size: int, num_features: int) -> dict:
    """The ``auto`` preset: a fixed public rule of the **declared** training-set size n̂ and the
    feature count F (see the module docstring); never of the real n.

    Args:
        train_size: the declared training-set size n̂.
        num_features: the feature count F.

    Returns:
        ``layers``, ``hidden``, ``act``, ``dropout``, ``lr``, ``epochs``, ``batch_size`` and ``bias``:
        one linear layer with full batches below 1000 training nodes (or fewer nodes than features),
        otherwise two layers with batches of max(256, ⌈n̂/16⌉) capped at n̂.
    """
    if train_size < SMALL_TRAINING_SET or train_size < num_features:
        return dict(layers=1, hidden=64, act="relu", dropout=0.0, lr=0.05, epochs=100, batch_size=train_size, bias=True)
    batch = min(train_size, max(256, math.ceil(train_size / 16)))
    return dict(layers=2, hidden=64, act="relu", dropout=0.5, lr=0.01, epochs=30, batch_size=batch, bias=True)


@dataclass
class MLPDPHyperparameters(PrivateHyperparameters):
    """``preset`` picks the configuration (``auto`` | ``gap`` | ``dpar``); a field left at
    ``None`` takes the preset's value, a field set explicitly overrides it.

    Attributes:
        preset: ``auto``, ``gap`` or ``dpar``.
        hidden: hidden width.
        layers: linear layers.
        dropout: dropout rate in [0, 1).
        lr: learning rate (> 0).
        epochs: training epochs.
        batch_size: expected batch size B.
        act: activation (``relu``, ``selu``, ``tanh``, ``elu``).
        bias: whether the linear layers have biases.
        row_normalize: row-normalise the features before the first layer.
        max_grad_norm: per-example clipping norm C (> 0).
        optimizer: ``adam`` or ``sgd``.
        sample_rate: DP-SGD's Poisson rate q; ``None`` for B / the declared training-set size.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "preset": [Options("auto", *PRESETS)],
        "hidden": [WIDTH, None],
        "layers": [COUNT, None],
        "dropout": [DROPOUT, None],
        "lr": [POSITIVE, None],
        "epochs": [COUNT, None],
        "batch_size": [COUNT, None],
        "act": [Options(*ACTIVATIONS), None],
        "bias": [bool, None],
        "row_normalize": [bool],
        "max_grad_norm": [POSITIVE],
        "optimizer": [Options("adam", "sgd")],
        "sample_rate": [SAMPLE_RATE, None],
    }

    preset: str = "auto"
    """auto, gap or dpar: the configuration fields left at None take"""
    hidden: int | None = None
    """hidden width; None: the preset's"""
    layers: int | None = None
    """layers; None: the preset's"""
    dropout: float | None = None
    """dropout; None: the preset's"""
    lr: float | None = None
    """learning rate; None: the preset's"""
    epochs: int | None = None
    """DP-SGD epochs; None: the preset's"""
    batch_size: int | None = None
    """expected Poisson batch size B; None: the preset's"""
    act: str | None = None
    """activation; None: the preset's"""
    bias: bool | None = None
    """bias terms in the linear layers; None: the preset's"""
    row_normalize: bool = False
    """scale every feature row to unit ℓ₁ norm first (a per-node, public transform)"""
    max_grad_norm: float = 1.0
    """per-example gradient clipping norm C"""
    optimizer: str = "adam"
    """adam or sgd (the noisy gradient's optimiser)"""
    sample_rate: float | None = None
    """Poisson rate q of DP-SGD; None: B / the declared training-set size"""


def resolve_mlp_dp(hp: MLPDPHyperparameters, train_size: int | None, num_features: int) -> dict:
    """The configuration that runs: the preset's values overridden by every field set.

    ``train_size`` is the declared training-set size (``None``: nothing declared; ``auto`` then
    refuses, and the batch is the hyperparameter as given).

    Args:
        hp: the hyperparameters.
        train_size: the declared training-set size, or ``None``.
        num_features: the feature count.

    Returns:
        The configuration dict (keys as :func:`auto_configuration`), its batch capped at ``train_size``.

    Raises:
        ConfigurationError: ``auto`` without a declared size, an unknown preset, optimizer or
            activation, or a value out of range.
    """
    if hp.preset == "auto":
        if train_size is None:
            raise ConfigurationError(
                "mlp-dp preset=auto picks its architecture from the declared training-set size, and this dataset "
                "declares none: declare it (--dataset-option declare_num_train=N on the command line; "
                "from_data(..., public_facts={'num_train': ...}) in Python) or pick preset=gap "
                "or preset=dpar"
            )
        config = auto_configuration(train_size, num_features)
    elif hp.preset in PRESETS:
        config = dict(PRESETS[hp.preset])
    else:
        raise ConfigurationError(f"mlp-dp preset must be auto, {', '.join(PRESETS)}; got {hp.preset!r}")
    for key in ("hidden", "layers", "dropout", "lr", "epochs", "batch_size", "act", "bias"):
        value = getattr(hp, key)
        if value is not None:
            config[key] = value
    if hp.optimizer not in ("adam", "sgd"):
        raise ConfigurationError("mlp-dp optimizer must be adam or sgd")
    if config["layers"] < 1 or config["hidden"] < 1 or config["epochs"] < 1 or config["batch_size"] < 1:
        raise ConfigurationError("mlp-dp layers, hidden, epochs and batch_size must be >= 1")
    if not (0 <= config["dropout"] < 1 and config["lr"] > 0 and hp.max_grad_norm > 0):
        raise ConfigurationError("mlp-dp needs 0 <= dropout < 1, lr > 0 and max_grad_norm > 0")
    try:
        activation(config["act"])
    except ModelFormatError:
        raise ConfigurationError(f"mlp-dp act must be one of relu, selu, tanh, elu, got {config['act']!r}") from None
    config["batch_size"] = (
        int(config["batch_size"]) if train_size is None else min(int(config["batch_size"]), train_size)
    )
    return config


def _accuracy(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was_training = module.training
    module.eval()
    with torch.no_grad():
        acc = float((module(x).argmax(1) == y).float().mean()) if len(y) else 0.0
    module.train(was_training)
    return acc


def train_mlp_dp(
    module: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: int,
    epochs: int,
    lr: float,
    optimizer: str,
    seed: int,
    schedule: PoissonSchedule | None = None,
    on_epoch=None,
    progress: str | None = None,
    noise: NoiseSource | None = None,
) -> PoissonSubsampledGaussian | None:
    r"""DP-Adam/DP-SGD (Abadi et al. 2016) by :func:`~dpaudit.training.dpsgd.train_dp_sgd` (ghost
    clipping) with Poisson sampling at the ``schedule``'s rate, steps and normaliser (fixed from
    public inputs before training). ``on_epoch(module)`` is called after each epoch (the ``paper``
    protocol's validation checkpointing); the batches and the noise come from ``noise``
    (:mod:`dpaudit.training.noise`). Returns the mechanism spent (``None`` without noise:
    the same loop without clipping or noise, and no schedule).

    Shapes: ``x [n, F]``, ``y [n]`` — one row per protected node.

    Args:
        module: the MLP, trained in place.
        x: features of the training nodes.
        y: their labels.
        noise_multiplier: σ (0: no clipping or noise).
        max_grad_norm: per-example clipping norm C.
        batch_size: expected batch size.
        epochs: training epochs.
        lr: learning rate.
        optimizer: ``adam`` or ``sgd``.
        seed: seeds sampling and noise.
        schedule: the Poisson schedule fixed before training (``None`` without noise).
        on_epoch: called as ``on_epoch(module)`` after each epoch, or ``None``.
        progress: progress-bar label, or ``None``.

    Returns:
        The Poisson-subsampled Gaussian mechanism spent, or ``None`` without noise.
    """
    return train_dp_sgd(
        module,
        x,
        y,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        batch_size=batch_size,
        epochs=epochs,
        lr=lr,
        optimizer=optimizer,
        seed=seed,
        progress=progress,
        on_epoch=on_epoch,
        schedule=schedule,
        noise=noise,
    )


BEST_VAL_STEP = (
    "best-validation checkpoint: the epoch with the highest validation accuracy is released "
    "(validation labels and features read after every epoch, outside the accountant)"
)
#: the iterate each protocol releases, recorded in the plan (``card["mlp_dp"]["checkpoint"]``)
CHECKPOINTS = {
    "sound": "last iterate",
    "paper": "best-validation epoch (validation data read after every epoch, unaccounted)",
}


@dataclass(frozen=True)
class MLPDPPlan:
    """Everything an mlp-dp run fixes before it reads private data — the configuration, the
    DP-SGD schedule, σ and the released iterate — from public inputs alone. :meth:`MLPDP._fit`
    trains by it and :meth:`MLPDP.replan` re-derives it from a saved card, through the same
    :meth:`MLPDP.plan`.

    Attributes:
        preset: the preset named by the hyperparameters.
        protocol: ``sound`` or ``paper``.
        config: the resolved configuration (:func:`resolve_mlp_dp`).
        schedule: the DP-SGD Poisson schedule; ``None`` at ε = ∞.
        noise_multiplier: σ calibrated to the target ε (0 at ε = ∞).
    """

    preset: str
    protocol: str
    config: dict
    schedule: PoissonSchedule | None  # None at ε = ∞ (no noise, nothing accounted)
    noise_multiplier: float

    @property
    def mechanism(self) -> PoissonSubsampledGaussian | None:
        if self.schedule is None:
            return None
        return PoissonSubsampledGaussian(self.noise_multiplier, self.schedule.sample_rate, self.schedule.steps)

    @property
    def unaccounted(self) -> list[str]:
        return [BEST_VAL_STEP] if self.protocol == "paper" else []

    def card(self) -> dict:
        """``card["mlp_dp"]``: the plan only (nothing measured during training)."""
        section = {
            **self.config,
            "preset": self.preset,
            "checkpoint": CHECKPOINTS[self.protocol],
            "noise_multiplier": self.noise_multiplier,
        }
        if self.schedule is not None:
            section.update(
                sample_rate=self.schedule.sample_rate,
                steps=self.schedule.steps,
                expected_batch_size=self.schedule.expected_batch_size,
                schedule=self.schedule.source,
            )
        return section


@register_defense
class MLPDP(Defense):
    """MLP on node features trained with node-level DP-Adam/DP-SGD (ghost clipping), σ calibrated to ε.

    The graph is never read: training and inference use each node's own features only.

    Args:
        epsilon: target ε (``inf`` trains without noise).
        delta: δ, or ``"auto"`` for below 1/the declared population.
        seed: seeds initialisation, sampling and noise.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "mlp-dp"
    unit = "node"
    reads_graph = False
    family = "MLP-DP"
    relative_cost = 1.1
    epoch_settings = ("epochs",)
    summary = "MLP on node features with node-level DP-Adam/DP-SGD (ghost clipping), noise calibrated to ε"
    hyperparameters_class = MLPDPHyperparameters

    selection_score = Score(
        noisy=True,
        needs_training_release=False,
        reason="a validation node's prediction reads only the released MLP and the node's own features",
    )
    #: varies the optimiser and the schedule around the ``auto`` preset
    selection_grid = ({}, {"lr": 0.1}, {"epochs": 50}, {"epochs": 200, "lr": 0.02})

    def selection_run_mechanisms(self, num_features: int, declared_train: int | None, delta: float) -> list:
        """What one run spends, from public inputs alone (:meth:`plan`'s mechanism).

        Args:
            num_features: the feature count.
            declared_train: the declared training-set size, or ``None``.
            delta: δ.

        Returns:
            A one-element list: the run's Poisson-subsampled Gaussian (``None`` at ε = ∞).
        """
        return [self.plan(num_features, declared_train, delta).mechanism]

    def missing_declarations(self, declared: set[str]) -> list[str]:
        """The declarations this run needs and ``declared`` lacks, one line each.

        Args:
            declared: names of the public facts the dataset declares.

        Returns:
            Empty when ``num_train`` is declared; otherwise a line for ``preset=auto`` and one for a
            private run without ``sample_rate``.
        """
        if "num_train" in declared:
            return []
        out = []
        if self.hp.preset == "auto":
            out.append(
                "preset=auto picks mlp-dp's architecture from the declared training-set size: "
                "--dataset-option declare_num_train=N, or --set preset=gap (or preset=dpar)"
            )
        if self.private and self.hp.sample_rate is None:
            out.append(
                "DP-SGD's Poisson rate is fixed before any data is read: --dataset-option declare_num_train=N, "
                "or --set sample_rate=Q"
            )
        return out

    def plan(
        self, num_features: int, train_size: int | None, delta: float, recorded_sigma: float | None = None
    ) -> MLPDPPlan:
        """The run's plan from public inputs: the feature count, the declared training-set size
        (``None``: nothing declared), δ and the target ε. ``recorded_sigma``: a saved model's σ,
        reused when it meets the calibration's contract (:func:`~dpaudit.training.dpsgd.noise_for_plan`).

        Args:
            num_features: the feature count.
            train_size: the declared training-set size, or ``None``.
            delta: δ.
            recorded_sigma: σ recorded in a saved model, or ``None``.

        Returns:
            The plan: configuration, schedule and σ.

        Raises:
            ConfigurationError: ``auto`` without a declared size, or a private run with neither a
                declared size nor the ``sample_rate`` hyperparameter (before any work).
        """
        hp = self.hp
        config = resolve_mlp_dp(hp, train_size, num_features)
        protocol = "paper" if self.paper_protocol else "sound"
        if not self.private:
            return MLPDPPlan(hp.preset, protocol, config, None, 0.0)
        schedule = PoissonSchedule.plan(
            batch_size=config["batch_size"],
            epochs=config["epochs"],
            declared_size=train_size,
            sample_rate=hp.sample_rate,
        )
        sigma = noise_for_plan(
            self.epsilon,
            delta,
            lambda s: PoissonSubsampledGaussian(s, schedule.sample_rate, schedule.steps),
            recorded=recorded_sigma,
        )
        return MLPDPPlan(hp.preset, protocol, config, schedule, sigma)

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> BaselineModel:
        hp = self.hp
        train_size = declared_train_size(dataset, split)
        if train_size is None and not self.private:
            train_size = len(split.train)  # ε = ∞: nothing is accounted, the real size may choose
        if self.paper_protocol and len(split.val) == 0:
            raise ConfigurationError(
                "mlp-dp protocol=paper keeps the best-validation epoch: the split needs validation nodes"
            )
        plan = self.plan(dataset.num_features, train_size, delta)
        config = plan.config
        arch = {
            "type": "mlp-features",
            "in_dim": dataset.num_features,
            "hidden": config["hidden"],
            "out_dim": dataset.num_classes,
            "layers": config["layers"],
            "dropout": config["dropout"],
            "act": config["act"],
            "bias": config["bias"],
            "normalize": hp.row_normalize,
        }
        module = build_baseline_architecture(arch).to(self.device)
        best: dict = {"accuracy": -1.0, "state": None, "epoch": None, "epochs": 0}
        on_epoch = None
        if self.paper_protocol:
            val = split.val
            x_val = features(dataset.data.x[val].float().to(self.device))
            y_val = dataset.data.y[val].to(self.device)

            def on_epoch(trained: nn.Module) -> None:
                best["epochs"] += 1
                acc = _accuracy(trained, x_val, y_val)
                if acc > best["accuracy"]:
                    best.update(accuracy=acc, epoch=best["epochs"], state=copy.deepcopy(trained.state_dict()))

        mechanism = train_mlp_dp(
            module,
            features(dataset.data.x[split.train].float().to(self.device)),
            dataset.data.y[split.train],
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=hp.max_grad_norm,
            batch_size=config["batch_size"],
            epochs=config["epochs"],
            lr=config["lr"],
            optimizer=hp.optimizer,
            seed=self.seed,
            noise=self.noise,
            schedule=plan.schedule,
            on_epoch=on_epoch,
            progress=self.name,
        )
        if mechanism != plan.mechanism:
            raise AssertionError(f"mlp-dp: training spent {mechanism}, the plan is {plan.mechanism}")
        if best["state"] is not None:
            module.load_state_dict(best["state"])
        card = {
            "inference": inference_entry(
                private=mechanism is not None,
                training_graph=True,
                note="inference reads only the queried node's own features; the graph is never used",
                feature_change=OWN_FEATURES,
            ),
            "mlp_dp": plan.card(),
        }
        if mechanism is None:
            privacy = PrivacySpec.non_private("mlp-dp at ε = ∞: the same training loop without clipping or noise")
        else:
            delta_source = "auto: below 1/the declared number of nodes" if str(self.delta_option) == "auto" else "given"
            notes = [
                f"δ = {delta:g} ({delta_source})",
                f"configuration: preset {hp.preset!r} → {config['layers']} layer(s), hidden {config['hidden']}, "
                f"batch {config['batch_size']}, {config['epochs']} epochs, lr {config['lr']}; Poisson rate "
                f"q = {plan.schedule.sample_rate:.4g}, {plan.schedule.steps} steps (from the {plan.schedule.source})",
            ]
            privacy = (
                PrivacyLedger()
                .step(mechanism)
                .spec(delta, "node", target_epsilon=self.epsilon, notes=notes, unaccounted=plan.unaccounted)
            )
        model = BaselineModel(module, arch, privacy, card)
        if self.paper_protocol:
            model.record["mlp_dp"] = {"best_val_epoch": best["epoch"], "best_val_accuracy": best["accuracy"]}
        return model

    @classmethod
    def replan(cls, card: dict, privacy) -> list[dict] | None:
        """Re-derive the spec's DP-SGD record from the card's public inputs (hyperparameters,
        protocol, target ε, δ, the declared training-set size) through :meth:`plan`; refuse a card
        whose ``mlp_dp`` plan section (configuration, σ, q, steps, released iterate) or whose
        unaccounted steps are not that plan's. ``None`` for files written before plans were
        recorded (no ``checkpoint`` in the section).

        Args:
            card: the saved model's public card.
            privacy: its privacy spec (δ and public facts read).

        Returns:
            The plan's mechanism records (empty at ε = ∞), or ``None`` for a card without a plan.

        Raises:
            ConfigurationError: the card lacks a public input the plan reads.
            IntegrityError: the card's plan or unaccounted steps differ from the re-derived plan.
        """
        section = card.get("mlp_dp")
        if not isinstance(section, dict) or "checkpoint" not in section:
            return None
        defense = defense_from_card(cls, card, privacy)
        try:
            plan = defense.plan(
                int((card.get("dataset") or {})["num_features"]),
                privacy.public_facts.get("num_train"),
                privacy.delta,
                recorded_sigma=section.get("noise_multiplier"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"mlp-dp cannot re-plan this card: {type(exc).__name__}: {exc}") from None
        mismatch = plan_mismatch(section, plan.card(), "mlp_dp")
        if mismatch:
            raise refuse(f"the card's plan is not what its hyperparameters give: {mismatch}")
        if list(privacy.unaccounted) != plan.unaccounted:
            raise refuse(
                f"the plan of protocol {plan.protocol!r} leaves {plan.unaccounted!r} unaccounted, the spec lists "
                f"{list(privacy.unaccounted)!r}"
            )
        return [plan.mechanism.describe()] if plan.mechanism is not None else []
