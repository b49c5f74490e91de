r"""DP-GNN's network (a GCN with MLP encoder and decoder, the reference's residual layer), its
clipping groups, and the released model kind ``dpgnn``, whose inference is not private.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops

from defenses.dpgnn.mechanism import unit_condition
from dpaudit.errors import ModelFormatError
from dpaudit.nn import activation
from dpaudit.release.model import ModuleModel, _node_index, register_model_kind

INFERENCE_NOTE = (
    "inference is NOT private: predictions aggregate each queried node's full neighbourhood in the "
    "query graph (no edge sampling, no noise); only the trained weights carry the node-level guarantee"
)

#: values gathered per chunk of messages in :meth:`DPGCNNet.mean_aggregate`
_MESSAGE_CHUNK = 1 << 24


class DPGCNNet(nn.Module):
    r"""GCN with MLP encoder/decoder and mean aggregation :math:`\hat A = (D+I)^{-1}(A+I)`.

    Each graph layer is :math:`h' = \sigma(W\hat A h + b)`, or with ``residual`` the reference
    implementation's layer :math:`h' = \sigma(W\hat A h + b) + \hat A h` (latent width kept).
    The row (target-side) normalisation matters for soundness: symmetric normalisation would
    make a root's output depend on the degrees of its leaves, i.e. on nodes outside its subgraph.

    ``forward(x, edge_index)`` runs on a whole graph (messages src → dst);
    ``forward(x, adjacency, dense=True)`` runs on one padded subgraph (``adjacency``
    row-normalised) and returns the root's logits (position 0).

    Args:
        in_dim: feature count F.
        latent: width of every hidden layer.
        out_dim: number of classes C.
        layers: r, graph layers.
        encoder_layers: MLP layers before the graph layers.
        decoder_layers: MLP layers after them (the last is the output layer).
        act: activation name (``relu``, ``selu``, ``tanh``, ``elu``).
        residual: add Âh to each graph layer's output (the reference layer).

    Shapes:
        ``x [N, F], edge_index [2, E] -> logits [N, C]`` on a whole graph;
        ``x [L, F], adjacency [L, L] -> logits [C]`` on one padded subgraph (dense).
    """

    def __init__(
        self,
        in_dim: int,
        latent: int,
        out_dim: int,
        layers: int = 1,
        encoder_layers: int = 1,
        decoder_layers: int = 1,
        act: str = "tanh",
        residual: bool = False,
    ):
        super().__init__()
        self.residual = bool(residual)
        enc_dims = [in_dim] + [latent] * encoder_layers
        self.encoder = nn.ModuleList(nn.Linear(a, b) for a, b in zip(enc_dims[:-1], enc_dims[1:]))
        self.convs = nn.ModuleList(nn.Linear(latent, latent) for _ in range(layers))
        self.decoder_hidden = nn.ModuleList(nn.Linear(latent, latent) for _ in range(decoder_layers - 1))
        self.out = nn.Linear(latent, out_dim)
        self.act = activation(act)

    @staticmethod
    def mean_aggregate(h: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """:math:`(D+I)^{-1}(A+I)h` over messages src → dst (self loops added here).

        Shapes: ``h [N, d], edge_index [2, E] -> [N, d]``.

        Args:
            h: node representations.
            edge_index: messages (src → dst), without self-loops.

        Returns:
            The row-normalised aggregate.
        """
        src, dst = edge_index
        total = h.clone()
        # messages in chunks of ~2^24 values: whole-graph inference would otherwise gather an
        # edges × d array (8 GB at 1 M nodes, 20 M directed edges, d = 100); the sum per row is
        # accumulated in the same order, so the result is the same
        step = max(1, _MESSAGE_CHUNK // max(1, h.size(1)))
        for start in range(0, src.numel(), step):
            total.index_add_(0, dst[start : start + step], h[src[start : start + step]])
        degree = torch.bincount(dst, minlength=h.size(0)).to(h.dtype) + 1.0
        return total / degree.unsqueeze(1)

    def _encode(self, x):
        for layer in self.encoder:
            x = self.act(layer(x))
        return x

    def _decode_hidden(self, h):
        for layer in self.decoder_hidden:
            h = self.act(layer(h))
        return h

    def embed(
        self, x: torch.Tensor, graph: torch.Tensor, dense: bool = False, pre_activation: bool = False
    ) -> torch.Tensor:
        """Penultimate representation; with ``pre_activation`` ``x`` is the first encoder
        layer's output before its activation (used to get per-node gradients there).

        Shapes: ``[N, latent]`` on a whole graph, ``[latent]`` on one dense subgraph.

        Args:
            x: node features, or the first encoder layer's pre-activation output.
            graph: ``edge_index`` [2, E] (whole graph) or the row-normalised adjacency [L, L] (``dense``).
            dense: ``graph`` is one padded subgraph's adjacency; the root's (position 0) row is returned.
            pre_activation: ``x`` is the first encoder layer's pre-activation output.

        Returns:
            The decoder's hidden representation.
        """
        if pre_activation:
            h = self.act(x)
            for layer in self.encoder[1:]:
                h = self.act(layer(h))
        else:
            h = self._encode(x)
        for conv in self.convs:
            aggregated = graph @ h if dense else self.mean_aggregate(h, graph)
            h = self.act(conv(aggregated))
            if self.residual:  # the reference layer: h' = act(Dense(Â h)) + Â h
                h = h + aggregated
        if dense:
            h = h[0]
        return self._decode_hidden(h)

    def forward(
        self, x: torch.Tensor, graph: torch.Tensor, dense: bool = False, pre_activation: bool = False
    ) -> torch.Tensor:
        """Logits: the output layer on :meth:`embed`.

        Args:
            x: node features, or the first encoder layer's pre-activation output.
            graph: ``edge_index`` [2, E] (whole graph) or the row-normalised adjacency [L, L] (``dense``).
            dense: ``graph`` is one padded subgraph's adjacency; the root's logits are returned.
            pre_activation: ``x`` is the first encoder layer's pre-activation output.

        Returns:
            Class logits.

        Shapes:
            return: [N, C] on a whole graph, [C] on one dense subgraph
        """
        return self.out(self.embed(x, graph, dense, pre_activation))


def build_dpgcn(config: dict) -> DPGCNNet:
    """The network of an architecture config (``model.json``'s ``config.architecture``).

    Args:
        config: the architecture config.

    Returns:
        The untrained network.

    Raises:
        ModelFormatError: a missing or malformed field.
    """
    try:
        return DPGCNNet(
            in_dim=int(config["in_dim"]),
            latent=int(config["latent"]),
            out_dim=int(config["out_dim"]),
            layers=int(config["layers"]),
            encoder_layers=int(config["encoder_layers"]),
            decoder_layers=int(config["decoder_layers"]),
            act=str(config["act"]),
            residual=bool(config.get("residual", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"malformed dpgnn architecture config: {exc}") from None


def clip_groups(module: DPGCNNet, clipping: str) -> list[list[str]]:
    """Parameter-name groups clipped separately: one group (``flat``), encoder / each graph
    layer / decoder (``layerwise``, Section 6), or one per parameter tensor (``per-tensor``,
    the reference's per-parameter clipping).

    Args:
        module: the network.
        clipping: ``flat``, ``layerwise`` or ``per-tensor``.

    Returns:
        Lists of parameter names, one per clipping group.
    """
    names = [n for n, _ in module.named_parameters()]
    if clipping == "flat":
        return [names]
    if clipping == "per-tensor":
        return [[n] for n in names]
    prefixes = ["encoder."] + [f"convs.{i}." for i in range(len(module.convs))] + ["decoder_hidden.", "out."]
    groups = [[n for n in names if n.startswith(p)] for p in prefixes]
    decoder = groups[-2] + groups[-1]
    return [g for g in groups[:-2] if g] + [decoder]


@register_model_kind("dpgnn")
class DPGNNModel(ModuleModel):
    """A DP-GCN released model. Inference reads the queried nodes' full neighbourhoods in the
    query graph, so it is not private (``card["inference"]["private"] is False``).

    Args:
        module: the trained :class:`DPGCNNet`.
        architecture: its config, for :func:`build_dpgcn`.
        privacy: the privacy spec.
        card: the public card.
    """

    @classmethod
    def verify_privacy(cls, privacy, config, card):
        """Generic recomputation (:func:`dpaudit.accounting.verify.verify_spec`) with
        ``sound: false`` required for the sampler (Theorem 1 covers the directed relation of
        Remark 2, not removing a node with all its edges, :mod:`defenses.dpgnn`) and
        ``sound: true`` with its stated unit condition for the degree promise. The plan itself
        is re-derived from the card by :meth:`defenses.dpgnn.DPGNN.replan`.

        Args:
            privacy: the saved spec.
            config: the saved config (unused).
            card: the public card (protocol, hyperparameters).

        Returns:
            The verification.

        Raises:
            IntegrityError: the unit condition or the spec does not match.
        """
        from dpaudit.accounting.verify import refuse, verify_spec
        from dpaudit.release.model import card_protocol

        protocol = card_protocol(card)
        condition = unit_condition(protocol, dict(card.get("hyperparameters") or {}))
        if privacy.is_private and privacy.unit_condition != condition:
            raise refuse(
                f"unit condition {privacy.unit_condition!r} stated; this dpgnn card proves {condition or 'none'!r}"
            )
        return verify_spec(privacy, "node", protocol, expected_sound=condition is not None)

    @torch.no_grad()
    def _forward(self, graph: Data, nodes, embed: bool) -> torch.Tensor:
        idx = _node_index(graph, nodes).to(self.device)
        edge_index, _ = remove_self_loops(graph.edge_index.to(self.device))
        x = graph.x.to(self.device)
        out = self.module.embed(x, edge_index) if embed else self.module(x, edge_index)
        out = out[idx]
        return out if embed else torch.softmax(out, dim=1)

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Rebuild the network from its architecture config and load its tensors.

        Args:
            config: the saved config with its ``architecture``.
            tensors: the network's state dict.
            privacy: the privacy spec.
            card: the public card.

        Returns:
            The model, on the tensors' device.

        Raises:
            ModelFormatError: no architecture or a malformed one.
        """
        if not isinstance(config.get("architecture"), dict):
            raise ModelFormatError("dpgnn model config lacks its architecture")
        module = build_dpgcn(config["architecture"])
        module.load_state_dict(tensors, strict=True)
        device = next(iter(tensors.values())).device if tensors else torch.device("cpu")
        return cls(module.to(device), config["architecture"], privacy, card)
