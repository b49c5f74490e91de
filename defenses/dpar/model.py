"""DPAR's network f_θ (the reference's 2-layer MLP), Eq. 4 inference and the released-model kind."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.utils import add_self_loops, remove_self_loops

from defenses.dpar.inference import FEATURES_NOTE, INFERENCE_NOTE, inference_card  # noqa: F401  (re-exported)
from defenses.dpar.protocols import verify_privacy
from dpaudit.errors import DPAuditError, ModelFormatError
from dpaudit.nn import build_architecture
from dpaudit.release.model import ReleasedModel, _node_index, register_model_kind


class DPARNet(torch.nn.Module):
    r"""f_θ of Eq. 1: ``lin2(dropout(relu(lin1(dropout(x)))))`` — the reference's 2-layer network
    (hidden 32, no biases, dropout 0.1 on the input and the hidden layer).

    Shapes: x [n, F] → embed [n, H] → logits [n, C].

    Args:
        in_dim: feature count F.
        hidden: hidden width H.
        out_dim: number of classes C.
        dropout: dropout rate on the input and the hidden layer.
        bias: whether the linear layers have biases.
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.lin1 = torch.nn.Linear(in_dim, hidden, bias=bias)
        self.lin2 = torch.nn.Linear(hidden, out_dim, bias=bias)
        self.p = float(dropout)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The hidden layer ``relu(lin1(dropout(x)))``.

        Args:
            x: node features.

        Returns:
            Hidden activations.

        Shapes:
            x: [n, F]
            return: [n, H]
        """
        return torch.relu(self.lin1(F.dropout(x, self.p, self.training)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``lin2(dropout(embed(x)))``.

        Args:
            x: node features.

        Returns:
            Class logits.

        Shapes:
            x: [n, F]
            return: [n, C]
        """
        return self.lin2(F.dropout(self.embed(x), self.p, self.training))


def build_network(arch: dict) -> torch.nn.Module:
    """``{"type": "dpar-mlp", ...}`` → :class:`DPARNet`; ``{"type": "mlp", ...}`` (models saved
    before the reference network) → :class:`dpaudit.nn.MLP`.

    Args:
        arch: the architecture config.

    Returns:
        The untrained network.

    Raises:
        ModelFormatError: an unknown type or a malformed ``dpar-mlp`` config.
    """
    if arch.get("type") == "dpar-mlp":
        try:
            return DPARNet(
                int(arch["in_dim"]),
                int(arch["hidden"]),
                int(arch["out_dim"]),
                float(arch.get("dropout", 0.0)),
                bool(arch.get("bias", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"malformed dpar architecture config: {exc}") from None
    if arch.get("type") == "mlp":
        return build_architecture(arch)
    raise ModelFormatError(f"dpar model: unknown architecture type {arch.get('type')!r}")


def power_iteration(
    h: torch.Tensor, edge_index: torch.Tensor, alpha: float, steps: int, self_loops: bool = False
) -> torch.Tensor:
    r"""DPAR Eq. 4: :math:`Q \leftarrow (1-\alpha)\tilde D^{-1}\tilde AQ + \alpha H`, ``steps`` times,
    from Q = H; Ã = A + I when ``self_loops`` (the reference code), else A (isolated nodes then
    keep αH). Shapes: h [n, C], edge_index [2, E] → [n, C].

    Args:
        h: f_θ's outputs H.
        edge_index: the query graph's edges (row aggregates over col).
        alpha: teleport probability α.
        steps: power-iteration steps P (0 returns H).
        self_loops: use Ã = A + I.

    Returns:
        Q after ``steps`` iterations.
    """
    n = h.size(0)
    edge_index = edge_index.to(h.device)
    if self_loops:
        edge_index, _ = remove_self_loops(edge_index)
        edge_index, _ = add_self_loops(edge_index, num_nodes=n)
    row, col = edge_index
    deg = torch.zeros(n, dtype=h.dtype, device=h.device).scatter_add_(0, row, torch.ones_like(row, dtype=h.dtype))
    inv_deg = 1.0 / deg.clamp(min=1.0)
    q = h
    for _ in range(steps):
        neighbours = torch.zeros_like(h).index_add_(0, row, q[col])
        q = (1 - alpha) * inv_deg.unsqueeze(1) * neighbours + alpha * h
    return q


@register_model_kind("dpar")
class DPARModel(ReleasedModel):
    """f_θ + power-iteration inference over the query graph (DPAR Eq. 4).

    Args:
        module: the trained f_θ.
        architecture: its config, for :func:`build_network`.
        alpha: teleport probability α of Eq. 4.
        power_steps: P, power-iteration steps at inference.
        privacy: the privacy spec.
        card: the public card.
        self_loops: add self-loops to the query graph.
    """

    def __init__(
        self, module, architecture: dict, alpha: float, power_steps: int, privacy, card, self_loops: bool = False
    ):
        super().__init__(privacy, card)
        self.module = module.eval()
        self.architecture = dict(architecture)
        self.alpha = float(alpha)
        self.power_steps = int(power_steps)
        self.self_loops = bool(self_loops)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @torch.no_grad()
    def _propagate(self, graph: Data, nodes, embed: bool) -> torch.Tensor:
        idx = _node_index(graph, nodes)
        if graph.x is None or graph.x.size(1) != self.architecture["in_dim"]:
            raise DPAuditError(f"dpar model expects node features of width {self.architecture['in_dim']}")
        x = graph.x.to(self.device, torch.float32)
        h = self.module.embed(x) if embed else self.module(x)
        q = power_iteration(h, graph.edge_index, self.alpha, self.power_steps, self.self_loops)[idx.to(self.device)]
        return q if embed else torch.softmax(q, dim=1)

    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        """Class posteriors: softmax of Eq. 4's propagated logits over ``graph``.

        Args:
            graph: the query graph (its features' width must be the model's).
            nodes: the queried nodes; ``None`` for all.

        Returns:
            Class probabilities.

        Raises:
            DPAuditError: features missing or of the wrong width.

        Shapes:
            return: [len(nodes), C]
        """
        return self._propagate(graph, nodes, embed=False)

    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """Hidden activations of f_θ propagated by Eq. 4 over ``graph``.

        Args:
            graph: the query graph (its features' width must be the model's).
            nodes: the queried nodes; ``None`` for all.

        Returns:
            The propagated hidden layer.

        Raises:
            DPAuditError: features missing or of the wrong width.

        Shapes:
            return: [len(nodes), H]
        """
        return self._propagate(graph, nodes, embed=True)

    @classmethod
    def verify_privacy(cls, privacy, config, card):
        """DPAR's records (amplification by q′, the paper's theorems) are re-derived by
        :func:`defenses.dpar.protocols.verify_privacy`.

        Args:
            privacy: the saved privacy spec.
            config: the saved config (unused).
            card: the public card.

        Returns:
            The verification.

        Raises:
            IntegrityError: the spec does not match its re-derived records.
        """
        return verify_privacy(privacy, card)

    def config(self) -> dict:
        """Architecture, α, power steps and self-loops: what :meth:`from_state` rebuilds from."""
        return {
            "architecture": self.architecture,
            "alpha": self.alpha,
            "power_steps": self.power_steps,
            "self_loops": self.self_loops,
        }

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """f_θ's state dict."""
        return dict(self.module.state_dict())

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Rebuild f_θ from its config and tensors.

        Args:
            config: the saved config (:meth:`config`).
            tensors: f_θ's state dict.
            privacy: the privacy spec.
            card: the public card.

        Returns:
            The model.

        Raises:
            ModelFormatError: an incomplete or out-of-range config, a card claiming private inference
                with P ≥ 1, or tensors that do not match the architecture.
        """
        try:
            arch, alpha, steps = config["architecture"], float(config["alpha"]), int(config["power_steps"])
            self_loops = config.get("self_loops", False)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelFormatError(f"dpar model config is incomplete: {exc}") from None
        if not isinstance(arch, dict) or not 0 < alpha < 1 or steps < 0 or not isinstance(self_loops, bool):
            raise ModelFormatError("dpar model config: expected an architecture, 0 < alpha < 1, power_steps >= 0")
        inference = (card or {}).get("inference")
        if steps != 0 and isinstance(inference, dict) and inference.get("private") is True:
            # a card may understate what ε covers (files written before P = 0 was marked), never overstate it
            raise ModelFormatError(
                f"dpar model card says inference is private, but power_steps = {steps} propagates over the query graph"
            )
        module = build_network(arch)
        try:
            module.load_state_dict(tensors, strict=True)
        except RuntimeError as exc:
            raise ModelFormatError(f"dpar weights do not match the architecture: {exc}") from None
        return cls(module, arch, alpha, steps, privacy, card, self_loops)
