"""Standard architectures shared by baselines, defenses and attack surrogates.

Every module maps ``(x, edge_index)`` to logits and exposes ``embed(x, edge_index)``, the
penultimate representation the embedding probes look at. Architectures are built from a
JSON-able config by :func:`build_architecture` so that a released model can be rebuilt from
its ``model.json`` without running any code stored with it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from dpaudit.errors import ModelFormatError

_ACTIVATIONS = {"relu": nn.ReLU, "selu": nn.SELU, "tanh": nn.Tanh, "elu": nn.ELU}


def activation(name: str) -> nn.Module:
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ModelFormatError(f"unknown activation {name!r}") from None


class MLP(nn.Module):
    """Multi-layer perceptron; ignores the graph. ``hidden`` lists the hidden widths."""

    def __init__(self, in_dim: int, hidden: list[int], out_dim: int, dropout: float = 0.0, act: str = "relu"):
        super().__init__()
        dims = [in_dim, *hidden]
        self.hidden_layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(dims[-1], out_dim)
        self.dropout = nn.Dropout(dropout)
        self.act = activation(act)

    def embed(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.hidden_layers:
            x = self.act(layer(self.dropout(x)))
        return x

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.out(self.dropout(self.embed(x)))


class GNN(nn.Module):
    """Stack of message-passing layers (GCN or GraphSAGE-mean); the last one outputs logits."""

    def __init__(
        self, conv: str, in_dim: int, hidden: list[int], out_dim: int, dropout: float = 0.5, act: str = "relu"
    ):
        super().__init__()
        layer = {"gcn": lambda a, b: GCNConv(a, b, cached=False), "sage": lambda a, b: SAGEConv(a, b)}[conv]
        dims = [in_dim, *hidden]
        self.hidden_layers = nn.ModuleList(layer(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = layer(dims[-1], out_dim)
        self.dropout = nn.Dropout(dropout)
        self.act = activation(act)

    def embed(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.hidden_layers:
            x = self.act(conv(self.dropout(x), edge_index))
        return x

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(self.embed(x, edge_index)), edge_index)


def build_architecture(config: dict) -> nn.Module:
    """Build ``{"type": "mlp"|"gcn"|"sage", "in_dim", "hidden", "out_dim", ...}``."""
    try:
        kind = config["type"]
        common = dict(
            in_dim=int(config["in_dim"]),
            hidden=[int(h) for h in config["hidden"]],
            out_dim=int(config["out_dim"]),
            dropout=float(config.get("dropout", 0.0)),
            act=str(config.get("act", "relu")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"malformed architecture config: {exc}") from None
    if kind == "mlp":
        return MLP(**common)
    if kind in ("gcn", "sage"):
        return GNN(kind, **common)
    raise ModelFormatError(f"unknown architecture type {kind!r}")
