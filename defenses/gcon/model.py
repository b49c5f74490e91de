"""The released GCON model (encoder + Θ) and its inference features (Eq. 11 / Eq. 16).

Shapes: node features X [n, F] → encoded, L2-normalised :math:`\bar X` [n, d₁] → propagated
:math:`\\hat Z` [n, s·d₁] → scores :math:`\\hat Z\\Theta` [n, c].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from defenses.gcon.mechanism import check_alpha, gcon_features, normalized_adjacency, one_hop_features, parse_steps
from dpaudit.accounting import PrivacySpec
from dpaudit.errors import ModelFormatError
from dpaudit.model import ReleasedModel, _node_index, register_model_kind
from dpaudit.nn import MLP

INFERENCE_MODES = ("private", "public")

INFERENCE_NOTES = {
    "private": (
        "Θ and the encoder are (ε, δ)-edge-DP (GCON Theorem 1). Predictions use Eq. (16): node v's answer "
        "aggregates v's direct neighbours in the clear (restart α_I), so it reveals v's own edges; it is "
        "edge-DP only toward v itself (the paper's threat model), not toward a third party querying v."
    ),
    "public": (
        "Θ and the encoder are (ε, δ)-edge-DP (GCON Theorem 1). Predictions use Algorithm 4's public-graph "
        "mode: Z of Eq. (11) is recomputed on the queried graph, which is treated as public; answers reveal "
        "that graph's edges (multi-hop)."
    ),
}


def steps_to_json(steps: list[float]) -> list:
    return ["inf" if math.isinf(m) else int(m) for m in steps]


def json_float(value: float):
    return None if isinstance(value, float) and not math.isfinite(value) else value


@register_model_kind("gcon")
class GCONModel(ReleasedModel):
    r"""A released GCON model: the feature encoder (an :class:`~dpaudit.nn.MLP` whose hidden layer
    gives :math:`\bar X`) and the linear map :math:`\Theta \in \mathbb R^{sd_1\times c}`.

    ``predict_proba`` returns softmax of the scores :math:`\hat Z\Theta` (a monotone map: the
    argmax is the model's prediction); ``embed`` returns :math:`\hat Z`, the propagated encoded
    features that enter Θ. :math:`\hat Z` is Eq. (16) (``inference="private"``) or Eq. (11) on the
    queried graph (``"public"``), see the module docstring for what each reveals.
    """

    def __init__(self, encoder: MLP, theta: torch.Tensor, settings: dict, privacy: PrivacySpec, card: dict):
        super().__init__(privacy, card)
        self.encoder = encoder.eval()
        self.theta = theta
        self.settings = dict(settings)
        self.steps = parse_steps(self.settings["steps"])
        self.alpha = check_alpha(self.settings["alpha"])
        self.alpha_inference = check_alpha(self.settings["alpha_inference"], "alpha_inference")
        if self.settings["inference"] not in INFERENCE_MODES:
            raise ModelFormatError(f"gcon inference mode must be one of {INFERENCE_MODES}")
        expected = (len(self.steps) * int(self.settings["encoder"]["hidden"][0]), int(self.settings["num_classes"]))
        if tuple(theta.shape) != expected:
            raise ModelFormatError(f"gcon theta has shape {tuple(theta.shape)}, expected {expected}")

    @property
    def device(self) -> torch.device:
        return self.theta.device

    @torch.no_grad()
    def features(self, graph: Data) -> torch.Tensor:
        """The propagated features :math:`\\hat Z` of every node of ``graph`` (float64)."""
        x = encode_features(self.encoder, graph.x.to(self.device))
        adj = normalized_adjacency(graph.edge_index.to(self.device), int(graph.num_nodes))
        if self.settings["inference"] == "public":
            return gcon_features(adj, x, self.alpha, self.steps)
        return one_hop_features(adj, x, self.alpha_inference, self.steps)

    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        idx = _node_index(graph, nodes).to(self.device)
        scores = self.features(graph)[idx] @ self.theta.double()
        return torch.softmax(scores, dim=1).float()

    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        idx = _node_index(graph, nodes).to(self.device)
        return self.features(graph)[idx].float()

    def config(self) -> dict:
        return dict(self.settings)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        tensors = {f"encoder.{k}": v for k, v in self.encoder.state_dict().items()}
        tensors["theta"] = self.theta
        return tensors

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        arch = config["encoder"]
        encoder = MLP(int(arch["in_dim"]), [int(h) for h in arch["hidden"]], int(arch["out_dim"]), 0.0, arch["act"])
        encoder_state = {k.removeprefix("encoder."): v for k, v in tensors.items() if k.startswith("encoder.")}
        unexpected = set(tensors) - {f"encoder.{k}" for k in encoder_state} - {"theta"}
        if "theta" not in tensors or unexpected:
            raise ModelFormatError(f"gcon model needs 'theta' and encoder tensors; unexpected {sorted(unexpected)}")
        encoder.load_state_dict(encoder_state, strict=True)
        theta = tensors["theta"]
        return cls(encoder.to(theta.device), theta, config, privacy, card)


@torch.no_grad()
def encode_features(encoder: MLP, x: torch.Tensor) -> torch.Tensor:
    r""":math:`\bar X = H_{mlp}(\mathrm{MLP}(X; W_1^\star))` (Algorithm 3 line 5), rows L2-normalised
    (Algorithm 1 line 2), in float64."""
    encoder.eval()
    return F.normalize(encoder.embed(x.float()).double(), p=2.0, dim=1)


def query_features(adj: torch.Tensor, x_enc: torch.Tensor, config, inference: str) -> torch.Tensor:
    """:math:`\\hat Z` for queries: Eq. (16) (``private``) or Eq. (11) on the queried graph (``public``)."""
    with torch.no_grad():
        if inference == "public":
            return gcon_features(adj, x_enc, config.alpha, config.steps)
        return one_hop_features(adj, x_enc, config.alpha_inference, config.steps)
