r"""How the non-private message-passing baselines (``gcn``, ``sage``) train at scale.

Full-batch training holds, besides the dataset, working copies of the features (row
normalisation, the dropout mask and output), the graph's CSR adjacency and its transpose
(:class:`~dpaudit.data.adjacency.Adjacency`: 48 bytes per stored edge with int32 indices while it is
built) and a few activations per node and layer. When that estimate exceeds the memory budget,
training runs on neighbour-sampled mini-batches instead (GraphSAGE's node-wise sampling,
Hamilton et al., NeurIPS 2017, Alg. 2, with fan-outs S₁ = 25, S₂ = 10 of their §4.1;
:meth:`~dpaudit.data.adjacency.Adjacency.sample_neighbourhood`), which holds the CSR and one sampled
batch. When neither fits, the fit is refused before anything is allocated, naming the component
(:class:`MemoryBudgetError`).

The default budget is half the device's memory; on the CPU, half this process's address-space
limit (``RLIMIT_AS``, what a batch system or ``ulimit -v`` caps) when that is lower, since a
fit over the limit fails with an allocation error instead of this refusal. The choice reads
public sizes only — the node, edge and feature counts, the widths and the budget — never a
label or a measurement of the features; ``batching="full"`` / ``"sampled"``
forces it. The card records the hyperparameters (the rule); the choice and its estimate are the
owner's record (``model.record["training"]``), since the sizes behind them are measured on the
training graph.
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dpaudit.data.adjacency import Adjacency, index_dtype
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.progress import steps as progress_steps
from dpaudit.runtime import device_memory

BATCHING = ("auto", "full", "sampled")
#: Hamilton et al. (2017) §4.1: S₁ = 25 neighbours at the first hop, S₂ = 10 at the second
DEFAULT_FANOUTS = (25, 10)
#: share of the device's memory a fit may plan for when no budget is given (the dataset, the
#: caller and the allocator's slack take the rest)
DEFAULT_BUDGET_FRACTION = 0.5
#: working copies of the feature matrix in a full-batch step (normalised, dropout mask, dropout output)
FEATURE_COPIES = 3
#: activations kept per node and unit of width (linear output, aggregation, activation, dropout)
ACTIVATION_COPIES = 4
GIB = 2**30


class MemoryBudgetError(DPAuditError):
    """A fit would need more memory than its budget (raised before allocating).

    Args:
        *args: the message, naming the sizes, the budget and the largest component.
    """


@dataclass(frozen=True)
class GraphSizes:
    """The public sizes a plan reads: nodes, stored edges, features, hidden widths, classes.

    Attributes:
        num_nodes: nodes in the graph.
        num_edges: stored (directed) edges of the adjacency.
        num_features: feature columns.
        widths: hidden layer widths, one per hidden layer.
        num_classes: output classes.
    """

    num_nodes: int
    num_edges: int
    num_features: int
    widths: tuple[int, ...]
    num_classes: int

    def _activations(self, nodes: int) -> int:
        return 4 * ACTIVATION_COPIES * nodes * (sum(self.widths) + self.num_classes)

    def _edge_bytes(self, transpose: bool) -> int:
        index = 4 if index_dtype(self.num_nodes, self.num_edges) == torch.int32 else 8
        # CSR indices and weights (transpose: the same again), and the transients of building
        # them: the sort's int64 values and indices, then int64 endpoints and gathered weights
        return self.num_edges * ((index + 4) * (2 if transpose else 1) + 32)

    def full_batch(self) -> dict[str, int]:
        """Bytes by component of a full-batch step."""
        return {
            "adjacency": self._edge_bytes(transpose=True),
            "features": 4 * FEATURE_COPIES * self.num_nodes * self.num_features,
            "activations": self._activations(self.num_nodes),
        }

    def sampled(self, batch_size: int, fanouts: tuple[int, ...]) -> dict[str, int]:
        """Bytes by component of a sampled step: the CSR, and the largest batch the fan-outs allow.

        Args:
            batch_size: training nodes per batch.
            fanouts: neighbours sampled per node at each hop.

        Returns:
            Bytes by component: ``adjacency`` (the CSR, without its transpose) and ``sampled batch`` (a
            full-batch step on the largest batch, capped at the graph's nodes and edges).
        """
        nodes, edges, reached = batch_size, 0, batch_size
        for fanout in fanouts:
            edges += reached * fanout
            reached *= fanout
            nodes += reached
        nodes, edges = min(nodes, self.num_nodes), min(edges, self.num_edges)
        batch = GraphSizes(nodes, edges, self.num_features, self.widths, self.num_classes)
        batch_bytes = sum(batch.full_batch().values())
        return {"adjacency": self._edge_bytes(transpose=False), "sampled batch": batch_bytes}


@dataclass(frozen=True)
class BatchingPlan:
    """How a fit trains: ``mode`` (``full`` | ``sampled``), the batch size and fan-outs, the
    estimate behind the choice (bytes by component) and the budget.

    Attributes:
        mode: ``full`` or ``sampled``.
        batch_size: training nodes per sampled batch.
        fanouts: neighbours sampled per node at each hop.
        estimate: bytes by component of the chosen mode.
        budget: the memory budget in bytes (``inf`` when the device reports none).
    """

    mode: str
    batch_size: int
    fanouts: tuple[int, ...]
    estimate: dict[str, int]
    budget: float

    def record(self) -> dict:
        """The owner's record of the choice (the sizes behind it are the training graph's)."""
        out = {"batching": self.mode, "estimated_gib": round(sum(self.estimate.values()) / GIB, 3)}
        if self.mode == "sampled":
            out.update(batch_size=self.batch_size, fanouts=list(self.fanouts))
        return out


def address_space_limit() -> int | None:
    """This process's soft ``RLIMIT_AS`` in bytes; ``None`` when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _describe(estimate: dict[str, int]) -> str:
    parts = ", ".join(f"{name} {size / GIB:.3g} GiB" for name, size in sorted(estimate.items(), key=lambda i: -i[1]))
    return f"about {sum(estimate.values()) / GIB:.3g} GiB ({parts})"


def plan_batching(
    name: str,
    choice: str,
    sizes: GraphSizes,
    hops: int,
    batch_size: int,
    fanouts: list[int] | None,
    budget_gib: float | None,
    device: torch.device,
) -> BatchingPlan:
    """Full batch or neighbour-sampled mini-batches (module docstring), decided before allocating.

    Args:
        name: the baseline's name, used in error messages.
        choice: ``auto``, ``full`` or ``sampled``.
        sizes: the public sizes of the training graph and network.
        hops: message-passing layers (the number of fan-outs needed).
        batch_size: training nodes per sampled batch, >= 1.
        fanouts: neighbours per hop; ``None`` for Hamilton et al.'s (25, 10), then 10 per extra hop.
        budget_gib: memory budget in GiB (> 0); ``None`` for half the device's memory (on the CPU,
            capped by ``RLIMIT_AS``).
        device: where training runs.

    Returns:
        The chosen plan with its estimate and budget in bytes.

    Raises:
        ConfigurationError: an unknown ``choice``, fan-outs that do not match the ``hops``
            layers, a batch size or budget below 1.
        MemoryBudgetError: neither mode (or the forced one) fits the budget; the message names
            the largest component.
    """
    if choice not in BATCHING:
        raise ConfigurationError(f"{name} batching must be one of {', '.join(BATCHING)}, got {choice!r}")
    fanouts = tuple(int(f) for f in fanouts) if fanouts else DEFAULT_FANOUTS[:hops] + (10,) * (hops - 2)
    if len(fanouts) != hops or min(fanouts, default=1) < 1 or batch_size < 1:
        raise ConfigurationError(
            f"{name} needs batch_size >= 1 and one fan-out >= 1 per layer ({hops}), got {batch_size} and {list(fanouts)}"
        )
    if budget_gib is not None and not budget_gib > 0:
        raise ConfigurationError(f"{name} memory_budget_gib must be > 0, got {budget_gib}")
    memory = device_memory(device)
    limit = address_space_limit() if device.type == "cpu" else None
    if limit is not None:
        memory = limit if memory is None else min(memory, limit)
    if budget_gib is not None:
        budget = budget_gib * GIB
    else:
        budget = math.inf if memory is None else DEFAULT_BUDGET_FRACTION * memory
    full, sampled = sizes.full_batch(), sizes.sampled(batch_size, fanouts)
    fits = {"full": sum(full.values()) <= budget, "sampled": sum(sampled.values()) <= budget}
    mode = choice if choice != "auto" else ("full" if fits["full"] else "sampled")
    if not fits[mode]:
        tried = {"full": full, "sampled": sampled}
        detail = "; ".join(
            f"{m} batch needs {_describe(tried[m])}" for m in (("full", "sampled") if choice == "auto" else (mode,))
        )
        raise MemoryBudgetError(
            f"{name} on {sizes.num_nodes:,} nodes, {sizes.num_edges:,} edges and {sizes.num_features} features does not "
            f"fit the memory budget of {budget / GIB:.3g} GiB: {detail} (set memory_budget_gib, or batching=sampled "
            f"with a smaller batch_size or fanouts)"
        )
    return BatchingPlan(mode, batch_size, fanouts, full if mode == "full" else sampled, budget)


def train_message_passing(
    module: nn.Module,
    x,
    y: torch.Tensor,
    train: torch.Tensor,
    adjacency: Adjacency,
    optimizer: torch.optim.Optimizer,
    epochs: int,
    plan: BatchingPlan,
    seed: int,
    desc: str,
) -> None:
    """``epochs`` passes of cross-entropy training on the ``train`` nodes: one full-graph step
    per epoch, or (``plan.mode == "sampled"``) one step per shuffled batch of training nodes on
    its sampled neighbourhood. ``x`` dense or :class:`~dpaudit.nn.SparseFeatures`.

    Args:
        module: the network, called as ``module(x, adjacency)``; left in eval mode.
        x: node features, dense or sparse.
        y: labels of every node.
        train: indices of the training nodes.
        adjacency: the training graph's adjacency.
        optimizer: the optimizer over ``module``'s parameters.
        epochs: passes over the training nodes.
        plan: full batch or sampled, from :func:`plan_batching`.
        seed: seeds the batch order and neighbour sampling.
        desc: progress-bar label.

    Shapes:
        x: [num_nodes, num_features]
        y: [num_nodes]
        train: [num_train]
    """
    module.train()
    generator = torch.Generator().manual_seed(seed)
    for _ in progress_steps(epochs, desc, unit="epoch"):
        if plan.mode == "full":
            optimizer.zero_grad()
            F.cross_entropy(module(x, adjacency)[train], y[train]).backward()
            optimizer.step()
            continue
        order = train[torch.randperm(train.numel(), generator=generator).to(train.device)]
        for batch in order.split(plan.batch_size):
            hood = adjacency.sample_neighbourhood(batch, list(plan.fanouts), generator)
            optimizer.zero_grad()
            logits = module(x[hood.subset], hood.adjacency)[hood.positions]
            F.cross_entropy(logits, y[batch]).backward()
            optimizer.step()
    module.eval()
