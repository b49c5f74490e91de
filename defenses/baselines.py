"""Baselines: non-private ``gcn``, ``sage`` and ``mlp``, and node-level private ``mlp-dp``.

``mlp-dp`` is the "Features" baseline of DPAR and "MLP-DP" of GAP: an MLP on node features
alone, trained with DP-Adam (or DP-SGD) through opacus — Poisson sampling, per-node gradient
clipping, Gaussian noise calibrated so the accounted ε ≤ target. Because the MLP never reads
the graph, each node influences exactly one per-example gradient, so example-level DP-SGD is
node-level DP (and, a fortiori, edge-level DP: edges are not used at all). Inference on a
node reads only that node's own features.

Non-private baselines train full-batch for a fixed number of epochs and keep the last
iterate — the same protocol as the private models, which may not select epochs on
validation data (that would spend privacy nobody accounted for).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch.nn.functional as F
from tqdm.auto import tqdm

from dpaudit.accounting import PrivacyLedger, PrivacySpec, calibrate_noise
from dpaudit.accounting.mechanisms import PoissonSubsampledGaussian
from dpaudit.datasets import GraphDataset
from dpaudit.defense import Defense, Hyperparameters
from dpaudit.dpsgd import make_optimizer, poisson_sample_rate, steps_for, train_dp_sgd
from dpaudit.errors import ConfigurationError
from dpaudit.model import ModuleModel
from dpaudit.nn import build_architecture
from dpaudit.registry import register_defense
from dpaudit.splits import Split

log = logging.getLogger(__name__)


@dataclass
class GNNHyperparameters(Hyperparameters):
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200


def _architecture(kind: str, dataset: GraphDataset, hidden: int, layers: int, dropout: float) -> dict:
    return {
        "type": kind,
        "in_dim": dataset.num_features,
        "hidden": [hidden] * (layers - 1),
        "out_dim": dataset.num_classes,
        "dropout": dropout,
        "act": "relu",
    }


class _FullBatchBaseline(Defense):
    """Non-private full-batch training of one :mod:`dpaudit.nn` architecture."""

    unit = None
    architecture_type: str = "gcn"
    hyperparameters_class = GNNHyperparameters

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> ModuleModel:
        hp = self.hp
        arch = _architecture(self.architecture_type, dataset, hp.hidden, hp.layers, hp.dropout)
        module = build_architecture(arch).to(self.device)
        x = dataset.data.x.to(self.device)
        y = dataset.data.y.to(self.device)
        edge_index = split.edge_index_for(dataset, "train").to(self.device)
        train = split.train.to(self.device)
        opt = make_optimizer("adam", module.parameters(), hp.lr, hp.weight_decay)
        module.train()
        for _ in tqdm(range(hp.epochs), desc=f"{self.name}", leave=False, disable=None):
            opt.zero_grad()
            logits = module(x[train], None) if arch["type"] == "mlp" else module(x, edge_index)[train]
            F.cross_entropy(logits, y[train]).backward()
            opt.step()
        module.eval()
        card = {"inference": {"private": False, "note": "non-private model: nothing is protected"}}
        return ModuleModel(module, arch, PrivacySpec.non_private(), card)


@register_defense
class GCN(_FullBatchBaseline):
    name = "gcn"
    summary = "2-layer GCN (Kipf & Welling 2017), non-private"
    architecture_type = "gcn"


@register_defense
class GraphSAGE(_FullBatchBaseline):
    name = "sage"
    summary = "2-layer GraphSAGE with mean aggregation (Hamilton et al. 2017), non-private"
    architecture_type = "sage"


@dataclass
class MLPHyperparameters(GNNHyperparameters):
    dropout: float = 0.0


@register_defense
class MLPBaseline(_FullBatchBaseline):
    name = "mlp"
    summary = "2-layer MLP on node features only, non-private"
    architecture_type = "mlp"
    hyperparameters_class = MLPHyperparameters


@dataclass
class MLPDPHyperparameters(Hyperparameters):
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    lr: float = 0.01
    epochs: int = 30
    batch_size: int = 256
    max_grad_norm: float = 1.0
    optimizer: str = "adam"


@register_defense
class MLPDP(Defense):
    name = "mlp-dp"
    unit = "node"
    summary = "MLP on node features with node-level DP-Adam/DP-SGD (opacus), noise calibrated to ε"
    hyperparameters_class = MLPDPHyperparameters

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> ModuleModel:
        hp = self.hp
        if hp.optimizer not in ("adam", "sgd"):
            raise ConfigurationError("mlp-dp optimizer must be adam or sgd")
        arch = _architecture("mlp", dataset, hp.hidden, hp.layers, hp.dropout)
        module = build_architecture(arch).to(self.device)
        n = len(split.train)
        q = poisson_sample_rate(n, hp.batch_size)
        steps = steps_for(n, hp.batch_size, hp.epochs)
        if self.private:
            sigma = calibrate_noise(self.epsilon, delta, lambda s: PoissonSubsampledGaussian(s, q, steps))
        else:
            sigma = 0.0
        mechanism = train_dp_sgd(
            module,
            dataset.data.x[split.train],
            dataset.data.y[split.train],
            noise_multiplier=sigma,
            max_grad_norm=hp.max_grad_norm,
            batch_size=hp.batch_size,
            epochs=hp.epochs,
            lr=hp.lr,
            optimizer=hp.optimizer,
            seed=self.seed,
            progress=self.name,
        )
        card = {
            "inference": {
                "private": True,
                "note": "inference reads only the queried node's own features; the graph is never used",
            }
        }
        if mechanism is None:
            privacy = PrivacySpec.non_private("mlp-dp at ε = ∞: the same training loop without clipping or noise")
        else:
            notes = [f"δ = {delta:g} ({'auto: below 1/#nodes' if str(self.delta_option) == 'auto' else 'given'})"]
            privacy = PrivacyLedger().step(mechanism).spec(delta, "node", target_epsilon=self.epsilon, notes=notes)
        return ModuleModel(module, arch, privacy, card)
