"""GAP's neural modules (encoder, per-hop classifier; reference architecture) and the released
model kind ``gap`` (cached PMA output, canonical-key query routing, ledgered foreign releases).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from torch import nn
from torch_geometric.data import Data

from defenses.gap import protocols
from defenses.gap.mechanism import (
    LEVELS,
    MAX_HOPS,
    bound_out_degree,
    check_degree_promise,
    graph_key,
    private_multi_hop_aggregation,
    row_normalize,
)
from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger, PrivacySpec
from dpaudit.errors import DPAuditError, ModelFormatError
from dpaudit.model import ReleasedModel, _node_index, register_model_kind
from dpaudit.nn import InputLinear

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- modules


def mlp_stack(in_dim: int, hidden: int, layers: int, out_dim: int, dropout: float, batch_norm: bool) -> nn.Sequential:
    """``layers`` linear layers; between two of them [BatchNorm] → [Dropout] → SELU (the
    reference MLP's order); the last layer stays linear. The first layer is an
    :class:`~dpaudit.nn.InputLinear` (accepts :class:`~dpaudit.nn.SparseFeatures`: a sparse ×
    dense product on sparse raw features; same parameters as ``nn.Linear``)."""
    dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
    modules: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        modules.append(InputLinear(a, b) if i == 0 else nn.Linear(a, b))
        if i == layers - 1:
            break
        if batch_norm:
            modules.append(nn.BatchNorm1d(b))
        if dropout > 0:
            modules.append(nn.Dropout(dropout))
        modules.append(nn.SELU())
    return nn.Sequential(*modules)


def _post_combine(width: int, dropout: float, batch_norm: bool) -> nn.Sequential:
    """[BatchNorm] → [Dropout] → SELU, applied after an L2 normalisation."""
    modules: list[nn.Module] = [nn.BatchNorm1d(width)] if batch_norm else []
    if dropout > 0:
        modules.append(nn.Dropout(dropout))
    modules.append(nn.SELU())
    return nn.Sequential(*modules)


class GAPEncoder(nn.Module):
    r"""Encoder module (Eq. 3–5). ``encode`` is the released :math:`\check X^{(0)}` =
    L2-normalise(MLP_enc(x)); ``forward`` (pre-training only) continues with
    [BatchNorm] → SELU → linear head. Shapes: x [n, F] → encode [n, hidden], forward [n, C]."""

    def __init__(self, in_dim: int, hidden: int, layers: int, num_classes: int, dropout: float, batch_norm: bool):
        super().__init__()
        self.mlp = mlp_stack(in_dim, hidden, layers, hidden, dropout, batch_norm)
        self.post = _post_combine(hidden, dropout, batch_norm)
        self.head = nn.Linear(hidden, num_classes)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return row_normalize(self.mlp(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.post(self.encode(x)))


class GAPClassifier(nn.Module):
    r"""Classification module (Eq. 10–12) on :math:`[\check X^{(0)} \| \dots \| \check X^{(K)}]`
    (one row per node, so one DP-SGD example per node): one base MLP per hop, COMBINE =
    concatenation (``embed`` = H), then L2-normalise → [BatchNorm] → SELU → head MLP.
    Shapes: z [n, (K+1)·hidden] → embed [n, (K+1)·hidden] → logits [n, C]."""

    def __init__(
        self,
        hops: int,
        hidden: int,
        base_layers: int,
        head_layers: int,
        num_classes: int,
        dropout: float,
        batch_norm: bool,
    ):
        super().__init__()
        self.hidden = hidden
        self.base = nn.ModuleList(
            mlp_stack(hidden, hidden, base_layers, hidden, dropout, batch_norm) for _ in range(hops + 1)
        )
        self.post = _post_combine((hops + 1) * hidden, dropout, batch_norm)
        self.head = mlp_stack((hops + 1) * hidden, hidden, head_layers, num_classes, dropout, batch_norm)

    def embed(self, z: torch.Tensor) -> torch.Tensor:
        chunks = z.split(self.hidden, dim=1)
        return torch.cat([mlp(chunk) for mlp, chunk in zip(self.base, chunks)], dim=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.head(self.post(row_normalize(self.embed(z))))


def _build_encoder(cfg: dict[str, Any]) -> GAPEncoder:
    return GAPEncoder(
        cfg["in_dim"], cfg["hidden"], cfg["encoder_layers"], cfg["num_classes"], cfg["dropout"], cfg["batch_norm"]
    )


def _build_classifier(cfg: dict[str, Any], hops: int) -> GAPClassifier:
    return GAPClassifier(
        hops,
        cfg["hidden"],
        cfg["base_layers"],
        cfg["head_layers"],
        cfg["num_classes"],
        cfg["dropout"],
        cfg["batch_norm"],
    )


# --------------------------------------------------------------------------- ledger (de)serialisation


def _mechanism_record(m) -> dict[str, Any]:
    if isinstance(m, GaussianMechanism):
        return {"type": "gaussian", "sigma": m.sigma, "sensitivity": m.sensitivity, "count": m.count, "name": m.name}
    if isinstance(m, PoissonSubsampledGaussian):
        return {"type": "poisson", "sigma": m.sigma, "sample_rate": m.sample_rate, "steps": m.steps, "name": m.name}
    raise TypeError(f"unexpected mechanism {m!r}")  # pragma: no cover - bug guard


def _mechanism_from(record: dict[str, Any]):
    try:
        if record["type"] == "gaussian":
            return GaussianMechanism(
                float(record["sigma"]), float(record["sensitivity"]), int(record["count"]), name=str(record["name"])
            )
        if record["type"] == "poisson":
            return PoissonSubsampledGaussian(
                float(record["sigma"]), float(record["sample_rate"]), int(record["steps"]), name=str(record["name"])
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"gap model ledger entry {record!r} is invalid: {exc}") from None
    raise ModelFormatError(f"gap model ledger entry has unknown type {record.get('type')!r}")


def _full_ledger(cfg: dict[str, Any]) -> PrivacyLedger:
    """The training ledger plus one PMA release per recorded foreign-graph query."""
    ledger = PrivacyLedger().extend(_mechanism_from(r) for r in cfg["ledger"])
    if cfg.get("query_mechanism") is not None:
        ledger.extend([_mechanism_from(cfg["query_mechanism"])] * int(cfg["query_releases"]))
    return ledger


# --------------------------------------------------------------------------- released model


@register_model_kind("gap")
class GAPModel(ReleasedModel):
    """A trained GAP model plus the cached private aggregations of its training graph.

    Tensors: ``encoder.*``, ``classifier.*`` and ``cache.aggregations`` ([N, K·hidden], hops
    1..K of PMA's output on the training graph). The config keeps the training ledger
    (``ledger``), the mechanism one foreign-graph PMA release costs (``query_mechanism``) and
    how many such releases this model has made (``query_releases``), so its spec's ε is always
    training + every recorded release.
    """

    _CONFIG_KEYS = (
        "level",
        "protocol",
        "in_dim",
        "hidden",
        "encoder_layers",
        "base_layers",
        "head_layers",
        "num_classes",
        "hops",
        "dropout",
        "batch_norm",
        "noise_std",
        "max_degree",
        "graph",
        "ledger",
        "query_mechanism",
        "query_releases",
    )

    def __init__(
        self,
        encoder: GAPEncoder,
        classifier: GAPClassifier,
        cfg: dict[str, Any],
        cached_aggregations: torch.Tensor,
        privacy: PrivacySpec,
        card: dict[str, Any],
    ):
        super().__init__(privacy, card)
        self.encoder = encoder.eval()
        self.classifier = classifier.eval()
        self.cfg = dict(cfg)
        self.cached_aggregations = cached_aggregations
        # PMA releases on other graphs made by this object, by canonical key (memo).
        self._other_graphs: dict[str, torch.Tensor] = {}

    @property
    def device(self) -> torch.device:
        return self.cached_aggregations.device

    # -- queries ----------------------------------------------------------------------------
    def _check_graph(self, graph: Data) -> None:
        if not isinstance(graph, Data) or getattr(graph, "x", None) is None or graph.edge_index is None:
            raise DPAuditError("GAP queries need a torch_geometric Data with x and edge_index")
        if graph.x.dim() != 2 or graph.x.size(1) != self.cfg["in_dim"]:
            raise DPAuditError(
                f"query graph has features of shape {tuple(graph.x.shape)}; expected [N, {self.cfg['in_dim']}]"
            )

    def _record_query_release(self) -> None:
        """Compose one more PMA release into the spec (ε grows)."""
        self.cfg["query_releases"] = int(self.cfg["query_releases"]) + 1
        if self.cfg["query_mechanism"] is None:
            return
        ledger = _full_ledger(self.cfg)
        spec = self.privacy
        fresh = ledger.spec(spec.delta, spec.unit)
        spec.epsilon = fresh.epsilon
        spec.mechanisms = fresh.mechanisms
        spec.gdp_mu = fresh.gdp_mu
        spec.accountant = fresh.accountant
        spec.epsilon_by_accountant = fresh.epsilon_by_accountant
        spec.accounting = fresh.accounting
        note = "PMA releases on foreign query graphs composed into ε: "
        spec.notes = [n for n in spec.notes if not n.startswith(note)] + [f"{note}{self.cfg['query_releases']}"]
        log.warning(
            "GAP: a new PMA release on a foreign query graph; spent ε is now %.4g (%d release(s))",
            spec.epsilon,
            self.cfg["query_releases"],
        )

    @torch.no_grad()
    def _hop_features(self, graph: Data) -> torch.Tensor:
        """Hops 1..K for every node of ``graph``: cached if it is the training graph (canonical
        key), else a new, recorded PMA release (memoised per key)."""
        key = graph_key(graph.num_nodes, graph.edge_index, graph.x)
        if key == self.cfg["graph"]["key"]:
            return self.cached_aggregations
        if key not in self._other_graphs:
            log.info(
                "GAP: query graph differs from the training graph; new PMA release (noise std %g)",
                self.cfg["noise_std"],
            )
            edge_index = graph.edge_index
            private = self.cfg["query_mechanism"] is not None
            if self.cfg["max_degree"] is not None:
                if protocols.sound_node_level_needs_promise(self.cfg["level"], self.cfg["protocol"], private):
                    check_degree_promise(edge_index, graph.num_nodes, self.cfg["max_degree"], "query graph")
            x0 = self.encoder.encode(graph.x.to(self.device).float())
            # Fresh randomness from torch's global RNG (not derivable from the saved model).
            seed = int(torch.randint(0, 2**62, (1,)).item())
            if self.cfg["max_degree"] is not None and protocols.samples_degrees(self.cfg["protocol"]):
                edge_index = bound_out_degree(
                    edge_index, graph.num_nodes, self.cfg["max_degree"], torch.Generator().manual_seed(seed)
                )
            gen = torch.Generator().manual_seed(seed + 1)
            hops = private_multi_hop_aggregation(
                x0, edge_index.to(self.device), self.cfg["hops"], self.cfg["noise_std"], gen
            )
            self._record_query_release()
            self._other_graphs[key] = torch.cat(hops, dim=1)
        return self._other_graphs[key]

    @torch.no_grad()
    def representation(self, graph: Data, nodes=None) -> torch.Tensor:
        """Classifier input :math:`[\\check X^{(0)} \\| \\dots \\| \\check X^{(K)}]` of the queried nodes."""
        self._check_graph(graph)
        idx = _node_index(graph, nodes).to(self.device)
        hops = self._hop_features(graph)
        x0 = self.encoder.encode(graph.x.to(self.device).float()[idx])
        return torch.cat([x0, hops[idx]], dim=1)

    @torch.no_grad()
    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        return torch.softmax(self.classifier(self.representation(graph, nodes)), dim=1)

    @torch.no_grad()
    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        return self.classifier.embed(self.representation(graph, nodes))

    # -- persistence -------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return copy.deepcopy(self.cfg)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        tensors = {f"encoder.{k}": v for k, v in self.encoder.state_dict().items()}
        tensors.update({f"classifier.{k}": v for k, v in self.classifier.state_dict().items()})
        tensors["cache.aggregations"] = self.cached_aggregations
        return tensors

    @classmethod
    def verify_privacy(cls, privacy, config, card):
        """The spec's mechanisms must be the config's training ledger followed by one PMA
        release per recorded foreign-graph query (``query_releases``), the unit the config's
        level; then the generic recomputation (:func:`dpaudit.accounting.verify.verify_spec`).
        Spent ε may exceed the target only by those recorded releases.

        Raises:
            IntegrityError: on any mismatch (one line).
        """
        from dpaudit.accounting.verify import refuse, verify_spec
        from dpaudit.model import card_protocol

        level_unit = {"edge": "edge", "node": "node"}.get(config.get("level"))
        try:
            releases = int(config.get("query_releases", 0))
            expected = [m.describe() for m in _full_ledger(config).mechanisms] if privacy.is_private else []
        except (KeyError, TypeError, ValueError, ModelFormatError) as exc:
            raise refuse(f"gap config ledger is unreadable: {exc}") from None
        if releases < 0:
            raise refuse(f"query_releases must be >= 0, got {releases}")
        if privacy.is_private and privacy.mechanisms != expected:
            raise refuse(
                f"the spec records {len(privacy.mechanisms)} mechanism(s) that differ from the model's ledger "
                f"({len(config.get('ledger', []))} training mechanism(s) + {releases} foreign-graph release(s))"
            )
        return verify_spec(privacy, level_unit, card_protocol(card), allow_above_target=releases > 0)

    @classmethod
    def from_state(cls, config, tensors, privacy, card) -> GAPModel:
        missing = [k for k in cls._CONFIG_KEYS if k not in config]
        if missing:
            raise ModelFormatError(f"gap model config lacks {missing}")
        if (
            config["level"] not in LEVELS
            or config["protocol"] not in ("sound", "paper")
            or not 1 <= int(config["hops"]) <= MAX_HOPS
        ):
            raise ModelFormatError(
                f"gap model config is inconsistent: level={config['level']!r}, protocol={config['protocol']!r}, "
                f"hops={config['hops']!r}"
            )
        for record in list(config["ledger"]) + ([config["query_mechanism"]] if config["query_mechanism"] else []):
            _mechanism_from(record)
        encoder, classifier = _build_encoder(config), _build_classifier(config, int(config["hops"]))
        enc_state = {k.removeprefix("encoder."): v for k, v in tensors.items() if k.startswith("encoder.")}
        cls_state = {k.removeprefix("classifier."): v for k, v in tensors.items() if k.startswith("classifier.")}
        extra = set(tensors) - {f"encoder.{k}" for k in enc_state} - {f"classifier.{k}" for k in cls_state}
        if extra != {"cache.aggregations"}:
            raise ModelFormatError(
                f"gap model tensors: unexpected or missing entries {sorted(extra ^ {'cache.aggregations'})}"
            )
        try:
            encoder.load_state_dict(enc_state, strict=True)
            classifier.load_state_dict(cls_state, strict=True)
        except RuntimeError as exc:
            raise ModelFormatError(f"gap model tensors do not match its config: {str(exc).splitlines()[0]}") from None
        cache = tensors["cache.aggregations"]
        expected = (int(config["graph"]["num_nodes"]), int(config["hops"]) * int(config["hidden"]))
        if tuple(cache.shape) != expected:
            raise ModelFormatError(f"cached aggregations have shape {tuple(cache.shape)}, config implies {expected}")
        device = cache.device
        return cls(encoder.to(device), classifier.to(device), config, cache, privacy, card)
