r"""The non-private baselines ``gcn``, ``sage`` and ``mlp``, their architectures and the
released model kind (``baseline``) they share with ``mlp-dp`` (:mod:`defenses.baselines.mlp_dp`), and
:func:`defense_from_card`, the saved card's defense that ``mlp-dp`` and DPAR re-plan through.

``gcn`` is Kipf & Welling (ICLR 2017) in their published setup: features row-normalised
(:math:`x_v \leftarrow x_v / \lVert x_v\rVert_1`, i.e. :math:`x_v / \sum_j x_{vj}` on their
non-negative features), two layers
:math:`Z = \hat A\,\mathrm{drop}(\mathrm{ReLU}(\hat A\,\mathrm{drop}(X) W_1)) W_2` with
:math:`\hat A = \tilde D^{-1/2}(A + I)\tilde D^{-1/2}`, 16 hidden units, dropout 0.5 on both
layer inputs (on the non-zeros of the sparse input features, as their ``sparse_dropout``),
Adam lr 0.01, weight decay 5·10⁻⁴ on the first layer only, no biases, 200 full-batch epochs and
the last iterate (their early stopping on validation loss is a selection on validation data;
it is not used — a fixed schedule, like every model here). Input dropout runs on the
non-zero entries only: a dense dropout mask over cora_ml's 2995 × 2879 feature matrix cost
0.24 s per call on one core (55–130 s per fit), the sparse one costs ~1 ms and is the same
random function on the non-zeros (dropping a zero changes nothing). Sparse features
(:class:`~dpaudit.nn.SparseFeatures`, at most 10 % non-zero) enter the first layer as a sparse ×
dense product; dense ones (csbm's Gaussian features) as a plain matmul, with dense dropout (the
same law on the non-zeros). :math:`\hat A` is the graph's CSR adjacency built once per fit
(:meth:`dpaudit.data.adjacency.Adjacency.gcn`); a graph whose full batch exceeds the memory budget
trains on neighbour-sampled mini-batches (:mod:`defenses.baseline_batching`), and a query on a
few nodes reads only their 2-hop neighbourhood (:meth:`dpaudit.release.model.ModuleModel._forward`).

Non-private baselines train full-batch for a fixed number of epochs and keep the last
iterate — the same protocol as the private models, which may not select epochs on
validation data (that would spend privacy nobody accounted for).

``select=validation`` (``mlp``, ``gcn``, ``sage``; default ``none``: the one fit of the given
values) makes a non-private baseline a fair reference: it trains every candidate of a small
declared public grid (:data:`GRIDS`: hidden width, dropout, weight decay, lr, epochs; 16
candidates for gcn and sage, 12 for mlp) under the run's seed and releases the one with the
highest validation accuracy (the first in grid order among equals). A split without validation nodes (``inductive:0.8,0.2``)
holds out a seeded 20 % of the training nodes (:func:`held_out_split`): the candidates train on
the rest — on an inductive split over the edges among those only — are scored on the held-out
nodes, and the chosen one is refitted on all training nodes. At ε = ∞ nothing is accounted, so
the selection may read anything; the card records the grid, the rule and the chosen candidate
(``card["validation_selection"]``), the owner's record the per-candidate scores.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from defenses.baseline_batching import BATCHING, GraphSizes, plan_batching, train_message_passing
from dpaudit.accounting import PrivacySpec
from dpaudit.data.adjacency import Adjacency, as_adjacency
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, ModelFormatError
from dpaudit.nn import (
    InputLinear,
    SparseFeatures,
    activation,
    build_architecture,
    dense_or_sparse_linear,
    feature_dropout,
    features,
)
from dpaudit.progress import steps as progress_steps
from dpaudit.release.deployments import READ_IN_CLEAR, inference_entry
from dpaudit.release.model import ModuleModel, ReleasedModel, register_model_kind
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import COUNT, DROPOUT, NON_NEGATIVE, POSITIVE, WIDTH, Items, Options
from dpaudit.training.defense import Defense, Hyperparameters
from dpaudit.training.dpsgd import make_optimizer
from dpaudit.training.registry import register_defense

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------- architectures
def row_normalize(x: torch.Tensor) -> torch.Tensor:
    r"""Kipf & Welling's feature preprocessing :math:`x_v / \lVert x_v \rVert_1` (their
    :math:`x_v / \sum_j x_{vj}` on non-negative features; the ℓ₁ norm keeps it bounded on signed
    ones); all-zero rows are left unchanged. Acts on each node's own features only.

    Args:
        x: dense node features.

    Returns:
        ``x`` with each non-zero row divided by its ℓ₁ norm.

    Shapes:
        x: [num_nodes, num_features] (returned the same)
    """
    total = x.abs().sum(dim=1, keepdim=True)
    return torch.where(total > 0, x / torch.where(total > 0, total, torch.ones_like(total)), x)


class KipfGCN(nn.Module):
    r"""Kipf & Welling's 2-layer GCN (see the module docstring).

    Args:
        in_dim: feature count F.
        hidden: hidden width.
        out_dim: number of classes C.
        dropout: dropout rate on the input and the hidden layer.
        normalize: row-normalise the input features.

    Shapes:
        ``forward(x [N, F], graph) -> logits [N, C]``; ``embed`` returns the hidden layer
        ``[N, hidden]``. ``x`` is the raw features, dense (the first layer is a plain matmul) or
        :class:`~dpaudit.nn.SparseFeatures` (a sparse × dense product over the non-zeros); it is
        row-normalised here when ``normalize``. ``graph`` is an ``edge_index`` [2, E] or its
        :class:`~dpaudit.data.adjacency.Adjacency` (:math:`\hat A` is that adjacency's
        :meth:`~dpaudit.data.adjacency.Adjacency.gcn`, a sparse × dense product).
    """

    #: a node's logits read its 2-hop neighbourhood
    propagation_hops = 2

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float = 0.5, normalize: bool = True):
        super().__init__()
        self.lin1 = nn.Linear(in_dim, hidden, bias=False)
        self.lin2 = nn.Linear(hidden, out_dim, bias=False)
        self.dropout = float(dropout)
        self.normalize = bool(normalize)

    def _first(self, x) -> torch.Tensor:
        r""":math:`\mathrm{drop}(X) W_1^\top` (dropout on the stored values of sparse input)."""
        if self.normalize:
            x = x.row_normalize() if isinstance(x, SparseFeatures) else row_normalize(x)
        return dense_or_sparse_linear(feature_dropout(x, self.dropout, self.training), self.lin1.weight)

    def embed(self, x, graph: torch.Tensor | Adjacency) -> torch.Tensor:
        """The hidden layer ReLU(Â · drop(X) W₁ᵀ).

        Args:
            x: node features, dense or sparse.
            graph: ``edge_index`` or its adjacency.

        Returns:
            Hidden activations.

        Shapes:
            x: [N, F]
            return: [N, hidden]
        """
        adjacency = as_adjacency(graph, x.size(0))
        return F.relu(adjacency.gcn(self.lin1.weight.dtype)(self._first(x)))

    def forward(self, x, graph: torch.Tensor | Adjacency) -> torch.Tensor:
        """Logits Â · drop(H) W₂ᵀ with ``H`` from :meth:`embed`.

        Args:
            x: node features, dense or sparse.
            graph: ``edge_index`` or its adjacency.

        Returns:
            Class logits.

        Shapes:
            x: [N, F]
            return: [N, C]
        """
        adjacency = as_adjacency(graph, x.size(0))
        h = F.dropout(self.embed(x, adjacency), self.dropout, self.training)
        return adjacency.gcn(self.lin2.weight.dtype)(self.lin2(h))


class FeatureMLP(nn.Module):
    """MLP on node features (``layers`` linear maps, ``hidden`` units each, optional biases and
    row normalisation). ``layers = 1`` is multinomial logistic regression.

    Shapes: ``forward(x [B, F]) -> logits [B, C]``; ``embed(x) -> [B, hidden]`` (the input
    features themselves when ``layers = 1``).

    Args:
        in_dim: feature count F.
        hidden: width of each hidden layer.
        out_dim: number of classes C.
        layers: linear maps (1: logistic regression).
        dropout: dropout before each linear map.
        act: activation name (``relu``, ``selu``, ``tanh``, ``elu``).
        bias: whether the linear maps have biases.
        normalize: row-normalise the input features.
    """

    #: a node's output reads its own features only
    propagation_hops = 0

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        layers: int,
        dropout: float = 0.0,
        act: str = "relu",
        bias: bool = True,
        normalize: bool = False,
    ):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1)
        self.hidden_layers = nn.ModuleList(InputLinear(a, b, bias=bias) for a, b in zip(dims[:-1], dims[1:]))
        self.out = InputLinear(dims[-1], out_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.act = activation(act)
        self.normalize = bool(normalize)

    def embed(self, x, edge_index: torch.Tensor | None = None):
        """``x`` dense or :class:`~dpaudit.nn.SparseFeatures` (the first layer is then a sparse ×
        dense product; with ``layers = 1`` the returned input stays sparse).

        Args:
            x: node features, dense or sparse.
            edge_index: ignored (the MLP reads no graph).

        Returns:
            The last hidden layer's activations (the input when ``layers = 1``).

        Shapes:
            x: [B, F]
            return: [B, hidden]
        """
        if self.normalize:
            x = x.row_normalize() if isinstance(x, SparseFeatures) else row_normalize(x)
        for layer in self.hidden_layers:
            x = self.act(layer(feature_dropout(x, self.dropout.p, self.training)))
        return x

    def forward(self, x, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits from each node's own features.

        Args:
            x: node features, dense or sparse.
            edge_index: ignored (the MLP reads no graph).

        Returns:
            Class logits.

        Shapes:
            x: [B, F]
            return: [B, C]
        """
        return self.out(feature_dropout(self.embed(x), self.dropout.p, self.training))


def build_baseline_architecture(config: dict) -> nn.Module:
    """Build ``gcn-kipf`` / ``mlp-features`` configs; anything else goes to :mod:`dpaudit.nn`.

    Args:
        config: the architecture dict (``type`` and its sizes).

    Returns:
        The untrained module.

    Raises:
        ModelFormatError: a ``gcn-kipf`` / ``mlp-features`` config with a missing or malformed field.
    """
    kind = config.get("type")
    try:
        if kind == "gcn-kipf":
            return KipfGCN(
                int(config["in_dim"]),
                int(config["hidden"]),
                int(config["out_dim"]),
                float(config["dropout"]),
                bool(config["normalize"]),
            )
        if kind == "mlp-features":
            return FeatureMLP(
                int(config["in_dim"]),
                int(config["hidden"]),
                int(config["out_dim"]),
                int(config["layers"]),
                float(config["dropout"]),
                str(config["act"]),
                bool(config["bias"]),
                bool(config["normalize"]),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"malformed {kind} architecture config: {exc}") from None
    return build_architecture(config)


@register_model_kind("baseline")
class BaselineModel(ModuleModel):
    """A released ``gcn-kipf`` or ``mlp-features`` module (rebuilt by
    :func:`build_baseline_architecture`). An ``mlp-features`` model reads only the queried
    nodes' own features, a GCN their 2-hop neighbourhood (:meth:`ModuleModel._forward`).

    Args:
        module: the trained module.
        architecture: its config, for :func:`build_baseline_architecture`.
        privacy: the privacy spec.
        card: the public card.
    """

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Rebuild the module from its architecture config and load its tensors.

        Args:
            config: the saved config with its ``architecture``.
            tensors: the module's state dict.
            privacy: the privacy spec.
            card: the public card.

        Returns:
            The model, on the tensors' device.

        Raises:
            ModelFormatError: no architecture, a malformed one, or tensors that do not match it.
        """
        if not isinstance(config.get("architecture"), dict):
            raise ModelFormatError("baseline model config lacks its architecture")
        module = build_baseline_architecture(config["architecture"])
        module.load_state_dict(tensors, strict=True)
        device = next(iter(tensors.values())).device if tensors else torch.device("cpu")
        return cls(module.to(device), config["architecture"], privacy, card)


# --------------------------------------------------------------------------------- non-private
@dataclass
class BatchingHyperparameters(Hyperparameters):
    """How a message-passing baseline trains at scale (:mod:`defenses.baseline_batching`).

    Attributes:
        batching: ``auto`` (full batch when the estimate fits the budget, else sampled), ``full`` or ``sampled``.
        batch_size: training nodes per sampled mini-batch.
        fanouts: in-edges sampled per node and layer; ``None`` or empty for 25, 10 (Hamilton et al. 2017).
        memory_budget_gib: memory budget in GiB; ``None`` for half the device's memory (or of ``RLIMIT_AS``).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "batching": [Options(*BATCHING)],
        "batch_size": [COUNT],
        "fanouts": [Items(COUNT, empty=True), None],  # [] or None: the default fan-outs
        "memory_budget_gib": [NON_NEGATIVE, None],
    }

    batching: str = "auto"
    """auto: full batch when the memory estimate fits the budget, else sampled; full; sampled"""
    batch_size: int = 512
    """training nodes per sampled mini-batch"""
    fanouts: list[int] | None = None
    """in-edges sampled per node and layer; None: 25, 10 (Hamilton et al. 2017)"""
    memory_budget_gib: float | None = None
    """None: half the device's memory, or of RLIMIT_AS when lower"""


@dataclass
class GNNHyperparameters(BatchingHyperparameters):
    """Hyperparameters of the non-private ``sage`` and ``mlp`` baselines.

    Attributes:
        hidden: hidden width.
        layers: layers (hidden layers + output).
        dropout: dropout rate.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        epochs: full passes (full batch: one step each).
        select: ``none`` (these values) or ``validation`` (the public grid's best on validation nodes).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "hidden": [WIDTH],
        "layers": [COUNT],
        "dropout": [DROPOUT],
        "lr": [POSITIVE],
        "weight_decay": [NON_NEGATIVE],
        "epochs": [COUNT],
        "select": [Options("none", "validation")],
    }

    hidden: int = 64
    """hidden width"""
    layers: int = 2
    """message-passing layers"""
    dropout: float = 0.5
    """dropout between layers"""
    lr: float = 0.01
    """Adam's learning rate"""
    weight_decay: float = 5e-4
    """Adam's weight decay"""
    epochs: int = 200
    """full-batch (or mini-batch) epochs"""
    select: str = "none"
    """none: these values; validation: the public grid's best candidate on validation nodes"""


@dataclass
class KipfGCNHyperparameters(BatchingHyperparameters):
    """Kipf & Welling (2017), Section 5.2 / their public code: the published Cora setup.

    Attributes:
        hidden: hidden width.
        dropout: dropout rate.
        lr: Adam learning rate.
        weight_decay: weight decay of the first layer only.
        epochs: training epochs.
        row_normalize: row-normalise the features.
        select: ``none`` (these values) or ``validation`` (the public grid's best on validation nodes).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "hidden": [WIDTH],
        "dropout": [DROPOUT],
        "lr": [POSITIVE],
        "weight_decay": [NON_NEGATIVE],
        "epochs": [COUNT],
        "row_normalize": [bool],
        "select": [Options("none", "validation")],
    }

    hidden: int = 16
    """hidden width"""
    dropout: float = 0.5
    """dropout on the input and hidden layer"""
    lr: float = 0.01
    """Adam's learning rate"""
    weight_decay: float = 5e-4
    """first layer only"""
    epochs: int = 200
    """training epochs"""
    row_normalize: bool = True
    """scale every feature row to unit ℓ₁ norm (Kipf & Welling's preprocessing)"""
    select: str = "none"
    """none: these values; validation: the public grid's best candidate on validation nodes"""


def _batching_plan(defense: Defense, dataset: GraphDataset, edge_index: torch.Tensor, widths, hops: int):
    """The defense's :class:`~defenses.baseline_batching.BatchingPlan` from public sizes (before allocating)."""
    hp = defense.hp
    sizes = GraphSizes(
        dataset.num_nodes, int(edge_index.size(1)), dataset.num_features, tuple(widths), dataset.num_classes
    )
    return plan_batching(
        defense.name,
        hp.batching,
        sizes,
        hops,
        hp.batch_size,
        hp.fanouts,
        hp.memory_budget_gib,
        torch.device(defense.device),
    )


def _architecture(kind: str, dataset: GraphDataset, hidden: int, layers: int, dropout: float) -> dict:
    return {
        "type": kind,
        "in_dim": dataset.num_features,
        "hidden": [hidden] * (layers - 1),
        "out_dim": dataset.num_classes,
        "dropout": dropout,
        "act": "relu",
    }


NON_PRIVATE_CARD = {
    "inference": inference_entry(
        private=False,
        training_graph=False,
        note="non-private model: nothing is protected",
        feature_change=READ_IN_CLEAR,
    )
}


SELECT_CHOICES = ("none", "validation")
#: the share of the training nodes held out for the selection when the split has no validation part
HELD_OUT_FRACTION = 0.2
#: the public grids ``select=validation`` trains (every combination, in this order; the first of
#: equally scored candidates wins). Each fit is as cheap as the default one.
GRIDS: dict[str, dict[str, tuple]] = {
    "mlp": {
        "hidden": (64, 256),
        "dropout": (0.0, 0.5),
        "weight_decay": (5e-4, 5e-3, 5e-2),
        "lr": (0.01,),
        "epochs": (100,),
    },
    "gcn": {
        "hidden": (16, 64),
        "dropout": (0.2, 0.5),
        "weight_decay": (5e-4, 5e-5),
        "lr": (0.01, 0.05),
        "epochs": (200,),
    },
    "sage": {
        "hidden": (32, 64),
        "dropout": (0.2, 0.5),
        "weight_decay": (5e-4, 5e-5),
        "lr": (0.01,),
        "epochs": (100, 200),
    },
}
HELD_OUT_RULE = (
    f"the split has no validation nodes: a seeded {HELD_OUT_FRACTION:.0%} of the training nodes (torch.randperm "
    "under the run's seed) is held out as validation; the candidates train on the other training nodes (on an "
    "inductive split over the edges among those only) and are scored on the held-out nodes over the graph the "
    "split gives a validation part (inductive: the edges among the held-out nodes); the chosen candidate is then "
    "refitted on all training nodes"
)
SPLIT_VALIDATION_RULE = (
    "the candidates train on the split's training nodes and are scored on its validation nodes (over the split's "
    "validation graph); the chosen candidate's fit is the released model"
)


def grid_candidates(grid: dict[str, tuple]) -> list[dict[str, Any]]:
    """Every combination of a grid, in the grid's order (the last field varies fastest).

    Args:
        grid: field name → the values tried.

    Returns:
        One dict per combination.
    """
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def held_out_split(split: Split, seed: int, fraction: float = HELD_OUT_FRACTION) -> Split:
    """``split`` with a seeded ``fraction`` of its training nodes moved to validation (for a
    selection on a split without validation nodes); the same kind (an inductive split's training
    graph then has only the edges among the kept training nodes).

    Args:
        split: a split without validation nodes.
        seed: seeds the permutation.
        fraction: share of the training nodes held out.

    Returns:
        The new split (its declared sizes dropped).

    Raises:
        ConfigurationError: the fraction holds out no node or every node.
    """
    count = len(split.train)
    held = int(round(fraction * count))
    if held < 1 or held >= count:
        raise ConfigurationError(
            f"select=validation holds out {fraction:.0%} of the training nodes when the split has no validation "
            f"nodes: {count} training node(s) leave none to hold out or none to train on"
        )
    order = torch.randperm(count, generator=torch.Generator().manual_seed(int(seed)))
    return dataclasses.replace(
        split,
        train=split.train[order[held:]].sort().values,
        val=split.train[order[:held]].sort().values,
        declared_sizes=None,
    )


class _ValidationSelection(Defense):
    """A non-private baseline whose ``select=validation`` trains every candidate of its public
    grid (:data:`GRIDS`) and releases the best on validation nodes (ε = ∞: the selection may read
    anything). The card records the grid, the chosen candidate and the held-out rule (public); the
    owner's record the per-candidate scores. ``select=none`` is the one fit of the given values."""

    unit = None
    grid_name: ClassVar[str] = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.hp.select not in SELECT_CHOICES:
            raise ConfigurationError(
                f"{self.name}: select must be one of {', '.join(SELECT_CHOICES)}, got {self.hp.select!r}"
            )

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> ReleasedModel:
        if self.hp.select == "none":
            return self._fit_one(dataset, split)
        return self._select_on_validation(dataset, split, delta)

    def _candidate(self, values: dict[str, Any]) -> Defense:
        settings = {**dataclasses.asdict(self.hp), **values, "select": "none"}
        return type(self)(epsilon=self.epsilon, delta=self.delta_option, seed=self.seed, device=self.device, **settings)

    def _select_on_validation(self, dataset: GraphDataset, split: Split, delta: float) -> ReleasedModel:
        grid = GRIDS[self.grid_name]
        has_val = len(split.val) > 0
        selection_split = split if has_val else held_out_split(split, self.seed)
        graph = selection_split.graph_for(dataset, "val")
        scores, best, best_model = [], None, None
        for index, values in enumerate(grid_candidates(grid)):
            seed_everything(self.seed)
            model = self._candidate(values)._fit(dataset, selection_split, delta)
            accuracy = float(model.accuracy(graph, selection_split.val))
            scores.append({"candidate": values, "validation_accuracy": accuracy})
            if best is None or accuracy > scores[best]["validation_accuracy"]:
                best, best_model = index, model
        chosen = scores[best]["candidate"]
        if not has_val:  # refit the chosen candidate on every training node
            seed_everything(self.seed)
            best_model = self._candidate(chosen)._fit(dataset, split, delta)
        best_model.card["validation_selection"] = {
            "grid": {key: list(values) for key, values in grid.items()},
            "candidates": len(scores),
            "chosen": chosen,
            "criterion": "highest validation accuracy; the first in grid order among equals",
            "validation": SPLIT_VALIDATION_RULE if has_val else HELD_OUT_RULE,
        }
        best_model.record["validation_selection"] = {
            "scores": scores,
            "chosen_index": best,
            "validation_nodes": len(selection_split.val),
            "held_out": not has_val,
        }
        return best_model

    @abstractmethod
    def _fit_one(self, dataset: GraphDataset, split: Split) -> ReleasedModel:
        """Train one candidate (the defense's own hyperparameters) and return its model."""


class _FullBatchBaseline(_ValidationSelection):
    """Non-private full-batch training of one :mod:`dpaudit.nn` architecture."""

    unit = None
    architecture_type: str = "gcn"
    hyperparameters_class = GNNHyperparameters

    def _fit_one(self, dataset: GraphDataset, split: Split) -> ModuleModel:
        hp = self.hp
        arch = _architecture(self.architecture_type, dataset, hp.hidden, hp.layers, hp.dropout)
        edge_index = None if arch["type"] == "mlp" else split.edge_index_for(dataset, "train")
        plan = None
        if edge_index is not None:
            plan = _batching_plan(self, dataset, edge_index, arch["hidden"], len(arch["hidden"]) + 1)
        module = build_architecture(arch).to(self.device)
        # Sparse features (cora_ml: 1.75 % non-zero) stay sparse: the first layer is CSR × dense.
        x = features(dataset.data.x.float().to(self.device))
        y = dataset.data.y.to(self.device)
        train = split.train.to(self.device)
        opt = make_optimizer("adam", module.parameters(), hp.lr, hp.weight_decay)
        if plan is None:
            module.train()
            x_train = x[train]
            for _ in progress_steps(hp.epochs, self.name, unit="epoch"):
                opt.zero_grad()
                F.cross_entropy(module(x_train, None), y[train]).backward()
                opt.step()
            module.eval()
        else:
            adjacency = Adjacency.from_edge_index(edge_index.to(self.device), x.size(0))
            train_message_passing(module, x, y, train, adjacency, opt, hp.epochs, plan, self.seed, self.name)
        model = ModuleModel(module, arch, PrivacySpec.non_private(), copy.deepcopy(NON_PRIVATE_CARD))
        if plan is not None:
            model.record["training"] = plan.record()
        return model


@register_defense
class GCN(_ValidationSelection):
    """Kipf & Welling's GCN in its published setup (module docstring); fixed schedule, last iterate.

    Args:
        epsilon: must be ``inf`` (non-private).
        delta: unused at ε = ∞.
        seed: seeds initialisation, dropout and the held-out split.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "gcn"
    unit = None
    family = "non-private baselines"
    relative_cost = 1.0
    epoch_settings = ("epochs",)
    summary = "2-layer GCN (Kipf & Welling 2017) in the published setup, non-private"
    hyperparameters_class = KipfGCNHyperparameters
    grid_name = "gcn"

    def _fit_one(self, dataset: GraphDataset, split: Split) -> BaselineModel:
        hp = self.hp
        if hp.hidden < 1 or hp.epochs < 0 or not 0 <= hp.dropout < 1 or not hp.lr > 0:
            raise ConfigurationError("gcn needs hidden >= 1, epochs >= 0, 0 <= dropout < 1 and lr > 0")
        arch = {
            "type": "gcn-kipf",
            "in_dim": dataset.num_features,
            "hidden": hp.hidden,
            "out_dim": dataset.num_classes,
            "dropout": hp.dropout,
            "normalize": hp.row_normalize,
        }
        edge_index = split.edge_index_for(dataset, "train")
        plan = _batching_plan(self, dataset, edge_index, [hp.hidden], KipfGCN.propagation_hops)
        module = build_baseline_architecture(arch).to(self.device)
        x = features(dataset.data.x.float().to(self.device))
        y = dataset.data.y.to(self.device)
        adjacency = Adjacency.from_edge_index(edge_index.to(self.device), dataset.num_nodes)
        opt = torch.optim.Adam(
            [
                {"params": module.lin1.parameters(), "weight_decay": hp.weight_decay},
                {"params": module.lin2.parameters(), "weight_decay": 0.0},
            ],
            lr=hp.lr,
        )
        train_message_passing(
            module, x, y, split.train.to(self.device), adjacency, opt, hp.epochs, plan, self.seed, self.name
        )
        model = BaselineModel(module, arch, PrivacySpec.non_private(), copy.deepcopy(NON_PRIVATE_CARD))
        model.record["training"] = plan.record()
        return model


@register_defense
class GraphSAGE(_FullBatchBaseline):
    """2-layer GraphSAGE with mean aggregation (Hamilton et al. 2017), non-private.

    Args:
        epsilon: must be ``inf`` (non-private).
        delta: unused at ε = ∞.
        seed: seeds initialisation, dropout and the held-out split.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "sage"
    family = "non-private baselines"
    relative_cost = 1.0
    epoch_settings = ("epochs",)
    summary = "2-layer GraphSAGE with mean aggregation (Hamilton et al. 2017), non-private"
    architecture_type = "sage"
    grid_name = "sage"


@dataclass
class MLPHyperparameters(Hyperparameters):
    """Hyperparameters of the non-private ``mlp`` baseline (the graph is never read).

    Attributes:
        hidden: hidden width.
        layers: linear layers.
        dropout: dropout rate.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        epochs: full-batch steps.
        select: ``none`` (these values) or ``validation`` (the public grid's best on validation nodes).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = GNNHyperparameters._parameter_constraints

    hidden: int = 64
    """hidden width"""
    layers: int = 2
    """layers"""
    dropout: float = 0.0
    """dropout between layers"""
    lr: float = 0.01
    """Adam's learning rate"""
    weight_decay: float = 5e-4
    """Adam's weight decay"""
    epochs: int = 200
    """training epochs"""
    select: str = "none"
    """none: these values; validation: the public grid's best candidate on validation nodes"""


@register_defense
class MLPBaseline(_FullBatchBaseline):
    """2-layer MLP on node features only, non-private.

    Args:
        epsilon: must be ``inf`` (non-private).
        delta: unused at ε = ∞.
        seed: seeds initialisation, dropout and the held-out split.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a :class:`torch.device`.
        **hyperparameters: fields of the defense's hyperparameter dataclass.
    """

    name = "mlp"
    reads_graph = False
    family = "non-private baselines"
    relative_cost = 1.0
    epoch_settings = ("epochs",)
    summary = "2-layer MLP on node features only, non-private"
    architecture_type = "mlp"
    hyperparameters_class = MLPHyperparameters
    grid_name = "mlp"


# --------------------------------------------------------------------------------- re-planning
def defense_from_card(cls: type[Defense], card: dict, privacy: PrivacySpec) -> Defense:
    """The defense a saved card describes — its hyperparameters, ``card["target_epsilon"]`` and
    the spec's δ — on the CPU, so :meth:`~dpaudit.training.defense.Defense.replan` can run the same plan
    method training ran. Malformed hyperparameters are one :class:`ConfigurationError`.

    Args:
        cls: the defense class.
        card: the saved model's public card.
        privacy: its privacy spec (δ read).

    Returns:
        The defense, on the CPU.

    Raises:
        ConfigurationError: no hyperparameters recorded, or ones the class refuses.
    """
    hyperparameters = card.get("hyperparameters")
    if not isinstance(hyperparameters, dict):
        raise ConfigurationError("the model card records no hyperparameters to re-plan from")
    try:
        return cls(epsilon=card.get("target_epsilon"), delta=privacy.delta, device="cpu", **hyperparameters)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"the card's hyperparameters cannot be re-planned: {exc}") from None
