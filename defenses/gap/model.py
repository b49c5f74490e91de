"""GAP's neural modules (encoder, per-hop classifier; reference architecture) and the released
model kind ``gap``: every query graph a new PMA release, counted in the model's query ledger
(:class:`QueryLedger`); a release over the training graph (or a graph sharing its nodes or edges:
:meth:`GAPModel.charges_training`) is charged to the training data, whose total is the training
ε composed with those releases (:attr:`GAPModel.charged_privacy`); the training graph's release
kept as the owner's record and answered only through :meth:`GAPModel.training_release` (free).
Repeated identical queries are free only inside a caller's own :meth:`GAPModel.query_session`,
which may cap its releases with a declared budget (:class:`QueryBudgetExceeded`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
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
    max_degree_of,
    private_multi_hop_aggregation,
    row_normalize,
)
from defenses.gap.projection import projection_of
from defenses.gap.queries import (
    QueryRelease,
    edge_codes,
    features_unchanged,
    local_edges,
    row_digests,
    shares_edges,
    structure_key,
)
from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger, PrivacySpec
from dpaudit.accounting.mechanisms import mechanism_from_record
from dpaudit.data.adjacency import TensorCache
from dpaudit.data.feature_graph import FeatureSmoothing
from dpaudit.errors import ConfigurationError, DPAuditError, ModelFormatError, PrivacyParameterError
from dpaudit.nn import InputLinear
from dpaudit.release.deployments import DEPLOYMENTS, QUERIER_GRAPH, TRAINING_GRAPH
from dpaudit.release.model import Answers, ReleasedModel, _node_index, register_model_kind
from dpaudit.training.noise import card_noise_mode, noise_source

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- modules


def mlp_stack(in_dim: int, hidden: int, layers: int, out_dim: int, dropout: float, batch_norm: bool) -> nn.Sequential:
    """``layers`` linear layers; between two of them [BatchNorm] → [Dropout] → SELU (the
    reference MLP's order); the last layer stays linear. The first layer is an
    :class:`~dpaudit.nn.InputLinear` (accepts :class:`~dpaudit.nn.SparseFeatures`: a sparse ×
    dense product on sparse raw features; same parameters as ``nn.Linear``).

    Args:
        in_dim: input width.
        hidden: width of the hidden layers.
        layers: linear layers (≥ 1).
        out_dim: output width.
        dropout: dropout rate between layers (0: none).
        batch_norm: BatchNorm between layers.

    Returns:
        The stack.
    """
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
    [BatchNorm] → SELU → linear head. Shapes: x [n, F] → encode [n, hidden], forward [n, C].

    Args:
        in_dim: feature count F.
        hidden: the encoder's width (the released X⁽⁰⁾'s width).
        layers: layers of the encoder MLP.
        num_classes: C, the pre-training head's output.
        dropout: dropout rate.
        batch_norm: BatchNorm in the MLP and after the normalisation.
    """

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        layers: int,
        num_classes: int,
        dropout: float,
        batch_norm: bool,
        probabilities: bool = False,
    ):
        super().__init__()
        self.probabilities = bool(probabilities)
        self.mlp = mlp_stack(in_dim, hidden, layers, hidden, dropout, batch_norm)
        self.post = _post_combine(hidden, dropout, batch_norm)
        self.head = nn.Linear(hidden, num_classes)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The released X⁽⁰⁾: the row-ℓ₂-normalised encoder MLP output, or (``probabilities``:
        sound GAP-EDP's skip head, :class:`GAPSkipClassifier`) the row-ℓ₂-normalised class
        probabilities of the pre-training head [n, C].

        Args:
            x: node features, dense or sparse.

        Returns:
            X⁽⁰⁾.

        Shapes:
            x: [n, F]
            return: [n, hidden] ([n, C] with ``probabilities``)
        """
        if self.probabilities:
            return row_normalize(torch.softmax(self.forward(x), dim=1))
        return row_normalize(self.mlp(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-training logits: :meth:`encode`, then [BatchNorm] → SELU → linear head.

        Args:
            x: node features, dense or sparse.

        Returns:
            Class logits.

        Shapes:
            x: [n, F]
            return: [n, C]
        """
        return self.head(self.post(row_normalize(self.mlp(x))))


class GAPClassifier(nn.Module):
    r"""Classification module (Eq. 10–12) on :math:`[\check X^{(0)} \| \dots \| \check X^{(K)}]`
    (one row per node, so one DP-SGD example per node): one base MLP per hop, COMBINE =
    concatenation (``embed`` = H), then L2-normalise → [BatchNorm] → SELU → head MLP.
    Shapes: z [n, (K+1)·hidden] → embed [n, (K+1)·hidden] → logits [n, C].

    Args:
        hops: K; the classifier has K + 1 base MLPs.
        hidden: width of each hop's input and of the hidden layers.
        base_layers: layers of each base MLP.
        head_layers: layers of the head MLP.
        num_classes: C.
        dropout: dropout rate.
        batch_norm: BatchNorm in the MLPs and after the combination.
    """

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
        """H: each hop's chunk through its base MLP, concatenated (COMBINE).

        Args:
            z: the concatenated hops X⁽⁰⁾ … X⁽ᴷ⁾.

        Returns:
            H.

        Shapes:
            z: [n, (K+1)·hidden]
            return: [n, (K+1)·hidden]
        """
        chunks = z.split(self.hidden, dim=1)
        return torch.cat([mlp(chunk) for mlp, chunk in zip(self.base, chunks)], dim=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Logits: H row-normalised → [BatchNorm] → SELU → head MLP.

        Args:
            z: the concatenated hops X⁽⁰⁾ … X⁽ᴷ⁾.

        Returns:
            Class logits.

        Shapes:
            z: [n, (K+1)·hidden]
            return: [n, C]
        """
        return self.head(self.post(row_normalize(self.embed(z))))


class GAPSkipClassifier(nn.Module):
    r"""Sound GAP-EDP's classification module (issue 50): one linear layer over the hop-0 skip
    :math:`\log \check X^{(0)}` (the feature-only encoder's log class probabilities, up to a
    per-row constant that softmax ignores) and the released noisy sums
    :math:`\tilde X^{(1)}, \dots, \tilde X^{(K)}` (Eq. 8 before the normalisation of Eq. 9:
    post-processing of the same release). With the hop weights at zero it is the encoder's own
    prediction, the fallback where the graph does not help. Its weights are fitted on public labels
    (validation nodes; edge-level DP does not protect them), never by reading an edge beyond the release.
    Shapes: z [n, (K+1)·C] → embed [n, (K+1)·C] → logits [n, C].

    Args:
        hops: K.
        num_classes: C (the width of every chunk).
    """

    def __init__(self, hops: int, num_classes: int):
        super().__init__()
        self.hidden = num_classes  # the chunk width (the config's hop width)
        self.linear = nn.Linear((hops + 1) * num_classes, num_classes)

    def embed(self, z: torch.Tensor) -> torch.Tensor:
        """H: the hop-0 chunk's log probabilities beside the noisy hop sums.

        Args:
            z: [X̌⁽⁰⁾ | X̃⁽¹⁾ … X̃⁽ᴷ⁾].

        Returns:
            H.

        Shapes:
            z: [n, (K+1)·C]
            return: [n, (K+1)·C]
        """
        return torch.cat([torch.log(z[:, : self.hidden].clamp_min(1e-6)), z[:, self.hidden :]], dim=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Logits: one linear layer over :meth:`embed`.

        Args:
            z: [X̌⁽⁰⁾ | X̃⁽¹⁾ … X̃⁽ᴷ⁾].

        Returns:
            Class logits.

        Shapes:
            z: [n, (K+1)·C]
            return: [n, C]
        """
        return self.linear(self.embed(z))


def skip_head(cfg: dict[str, Any]) -> bool:
    """Whether a config uses sound GAP-EDP's skip head (:class:`GAPSkipClassifier`; absent: the
    reference architecture).

    Args:
        cfg: a GAP model config.

    Returns:
        ``cfg["head"] == "skip"``.
    """
    return cfg.get("head") == "skip"


def input_smoothing(cfg: dict[str, Any]) -> FeatureSmoothing | None:
    """The encoder's input transform: the public feature-graph smoothing
    (:class:`~dpaudit.data.feature_graph.FeatureSmoothing`) sound GAP-EDP chose by its encoder's
    validation accuracy, computed over the nodes of whichever graph is read, or ``None`` (raw
    features; every other configuration and files written before the choice).

    Args:
        cfg: a GAP model config.

    Returns:
        The smoothing, or ``None``.

    Raises:
        ConfigurationError: a malformed ``feature_smoothing`` entry.
    """
    return FeatureSmoothing.from_dict(cfg.get("feature_smoothing"))


def released_rows(cfg: dict[str, Any], x0: torch.Tensor) -> torch.Tensor:
    """The rows PMA aggregates: X⁽⁰⁾ itself, or, where sound GAP-EDP's config says
    ``"released_rows": "prediction"``, the one-hot row of the encoder's predicted class (a unit row,
    so Theorem 1's Δ = √2 holds unchanged). A row-normalised probability vector spends most of its
    unit norm on the direction common to all classes when the encoder is unsure; the one-hot row
    spends all of it on one class, so the noisy sum of the neighbours' votes carries more class
    signal for the same noise (the derivation in ``docs/defenses/gap.md``).

    Args:
        cfg: a GAP model config.
        x0: the encoder's output X⁽⁰⁾.

    Returns:
        The rows to release.

    Shapes:
        x0: [n, C]
        return: [n, C]
    """
    if cfg.get("released_rows") == "prediction":
        return torch.nn.functional.one_hot(x0.argmax(dim=1), x0.size(1)).to(x0.dtype)
    return x0


def hop_width(cfg: dict[str, Any]) -> int:
    """The width of X⁽⁰⁾ and of every released hop: C under the skip head, else ``hidden``.

    Args:
        cfg: a GAP model config.

    Returns:
        The width.
    """
    return int(cfg["num_classes"]) if skip_head(cfg) else int(cfg["hidden"])


def _build_encoder(cfg: dict[str, Any]) -> GAPEncoder:
    return GAPEncoder(
        cfg["in_dim"],
        cfg["hidden"],
        cfg["encoder_layers"],
        cfg["num_classes"],
        cfg["dropout"],
        cfg["batch_norm"],
        probabilities=skip_head(cfg),
    )


def _build_classifier(cfg: dict[str, Any], hops: int) -> GAPClassifier | GAPSkipClassifier:
    if skip_head(cfg):
        return GAPSkipClassifier(hops, int(cfg["num_classes"]))
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
    if "mechanism" in record:  # dpaudit's own record: a private selection (dpaudit.training.private_selection)
        try:
            return mechanism_from_record(record)
        except PrivacyParameterError as exc:
            raise ModelFormatError(f"gap model ledger entry is invalid: {exc}") from None
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


def _training_ledger(cfg: dict[str, Any]) -> PrivacyLedger:
    """The training ledger (the config's ``ledger``): what the model's spec composes."""
    return PrivacyLedger().extend(_mechanism_from(r) for r in cfg["ledger"])


def _legacy_mechanisms(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """What a spec written before the query ledger recorded: the training ledger followed by
    one PMA release per recorded query (``query_releases``)."""
    training = [m.describe() for m in _training_ledger(cfg).mechanisms]
    if cfg.get("query_mechanism") is None:
        return training
    return training + [_mechanism_from(cfg["query_mechanism"]).describe()] * int(cfg["query_releases"])


#: the note a spec carried when query-graph releases were composed into it (files written before
#: the query ledger: loaded as the training spec, the releases moved to :class:`QueryLedger`)
RELEASES_NOTE = "PMA releases on query graphs composed into ε: "
#: what a query ledger protects (its ``to_dict()["protects"]``)
QUERY_LEDGER_PROTECTS = (
    "the query graph(s); releases over the training graph or a graph sharing its nodes or edges are also charged to "
    "the training data (charged_to_training, epsilon_total)"
)
#: the note of a charged spec (:attr:`GAPModel.charged_privacy`)
CHARGED_NOTE = "training ε composed with {n} PMA release(s) over the training graph (charged to the training data)"


class QueryBudgetExceeded(ConfigurationError):
    """A query past a session's declared budget (:meth:`GAPModel.query_session`): refused in one
    line before any release is made."""


@lru_cache(maxsize=64)
def _query_composition(record: str, releases: int, delta: float, unit: str | None) -> PrivacySpec:
    """``releases`` PMA releases of the JSON mechanism ``record`` composed at ``delta`` (cached:
    a spec read after every query does not re-compose the whole count each time)."""
    mechanism = _mechanism_from(json.loads(record))
    return PrivacyLedger().extend([mechanism] * releases).spec(delta, unit)


@lru_cache(maxsize=256)
def _charged_composition(ledger: str, record: str, releases: int, delta: float, unit: str | None) -> PrivacySpec:
    """The training ledger (JSON list of records) composed with ``releases`` PMA releases of the
    JSON mechanism ``record`` at ``delta`` (:class:`~dpaudit.accounting.PrivacyLedger`: the one
    composition every ε is computed with)."""
    mechanisms = [_mechanism_from(r) for r in json.loads(ledger)]
    query = _mechanism_from(json.loads(record))
    if isinstance(query, GaussianMechanism):  # n releases of a Gaussian: one mechanism applied n·count times
        queries = [dataclasses.replace(query, count=query.count * releases, name=f"{query.name} × {releases}")]
    else:  # pragma: no cover - GAP's query mechanism is a Gaussian
        queries = [query] * releases
    return PrivacyLedger().extend(mechanisms + queries).spec(delta, unit)


def charged_spec(cfg: dict[str, Any], training: PrivacySpec, releases: int) -> PrivacySpec:
    """``training`` (the model's spec of its training ledger ``cfg["ledger"]``) composed with
    ``releases`` PMA releases of ``cfg["query_mechanism"]`` at the same δ and unit: the total ε of
    the training data once those releases over the training graph are charged to it. ``training``
    itself when nothing is charged or the model is not private."""
    if releases <= 0 or not training.is_private or cfg.get("query_mechanism") is None:
        return training
    composed = _charged_composition(
        json.dumps(cfg["ledger"], sort_keys=True),
        json.dumps(cfg["query_mechanism"], sort_keys=True),
        int(releases),
        float(training.delta),
        training.unit,
    )
    spec = copy.deepcopy(composed)
    spec.target_epsilon = training.target_epsilon
    spec.unit_condition = training.unit_condition
    spec.protocol = training.protocol
    spec.public_facts = copy.deepcopy(training.public_facts)
    spec.notes = [CHARGED_NOTE.format(n=int(releases)), *training.notes]
    if not training.sound:
        spec.sound = False
        spec.unaccounted = list(training.unaccounted)
    return spec


@dataclass(frozen=True)
class QueryLedger:
    """The PMA releases a GAP model object (or one :meth:`GAPModel.query_session`) made on
    query graphs: ``releases`` of ``mechanism`` (the config's ``query_mechanism``; ``None`` for
    the non-private gap-inf, whose releases carry no noise), at the model's ``delta`` and
    ``unit``; ``charged`` of them were over the training graph or a graph sharing its nodes or
    edges (:meth:`GAPModel.charges_training`) and are charged to the training data: the training
    ε composed with them is ``total`` (:attr:`GAPModel.charged_privacy`). The composition of all
    ``releases`` bounds the worst case for a query graph: every release made on the same graph."""

    releases: int
    mechanism: dict[str, Any] | None
    delta: float
    unit: str | None
    charged: int = 0
    #: the training data's total, composed only when read (``None``: unknown)
    total_spec: Callable[[], PrivacySpec] | None = dataclasses.field(default=None, compare=False)

    @property
    def total(self) -> PrivacySpec | None:
        """The training spec composed with the ``charged`` releases (:func:`charged_spec`),
        computed when read; ``None`` when unknown."""
        return None if self.total_spec is None else self.total_spec()

    def spec(self) -> PrivacySpec:
        """The composition of the ``releases`` releases (:class:`~dpaudit.accounting.PrivacyLedger`)
        at the model's δ and unit, as a spec about the query graph(s): ε = 0 before any release,
        ε = ∞ for a non-private model's releases."""
        if self.mechanism is None:
            return PrivacySpec.non_private("query-graph releases of a non-private GAP carry no noise")
        if self.releases == 0:
            return PrivacySpec(
                epsilon=0.0, delta=0.0, unit=self.unit, accountant="none", notes=["no PMA release on a query graph yet"]
            )
        spec = copy.deepcopy(
            _query_composition(json.dumps(self.mechanism, sort_keys=True), self.releases, float(self.delta), self.unit)
        )
        spec.notes = [f"{self.releases} PMA release(s) on query graphs; protects {QUERY_LEDGER_PROTECTS}"]
        return spec

    def to_dict(self) -> dict[str, Any]:
        """JSON: ``{"releases", "epsilon", "delta", "unit", "protects", "charged_to_training",
        "epsilon_total"}`` (ε ``None``: not private; ``epsilon_total``: the training ε composed
        with the ``charged_to_training`` releases, ``None`` when unknown or not private)."""
        spec = self.spec()
        total = self.total
        return {
            "releases": int(self.releases),
            "epsilon": spec.epsilon if spec.is_private else None,
            "delta": spec.delta,
            "unit": self.unit,
            "protects": QUERY_LEDGER_PROTECTS,
            "charged_to_training": int(self.charged),
            "epsilon_total": total.epsilon if total is not None and total.is_private else None,
        }

    def summary(self) -> str:
        """One line (what ``dpaudit inspect`` prints)."""
        spec = self.spec()
        eps = f"ε = {spec.epsilon:.4g} at δ = {spec.delta:.3g}" if spec.is_private else "ε = ∞ (no noise)"
        line = f"query ledger: {self.releases} PMA release(s) on query graphs, {eps} ({self.unit or 'no'} level)"
        if self.charged and self.total is not None and self.total.is_private:
            total = self.total
            line += f"; {self.charged} over the training graph, charged to the training data: total ε = "
            line += f"{total.epsilon:.4g} at δ = {total.delta:.3g}"
        return line


#: name of the owner's record tensor (``provenance.safetensors``)
TRAINING_AGGREGATIONS = "gap.training_aggregations"
#: the training graph's edge set (:func:`~defenses.gap.queries.edge_codes`), owner's record only: what
#: :meth:`GAPModel.charges_training` recognises a graph sharing an edge with the training graph by
TRAINING_EDGES = "gap.training_edges"
#: where files before format 3 kept the training aggregations (in the public ``model.safetensors``)
LEGACY_CACHE = "cache.aggregations"


# --------------------------------------------------------------------------- query-graph keys

#: how many query-graph releases a query session keeps for free repeats (``query_memo_size``)
QUERY_MEMO_SIZE = 8
# canonical key of recently queried graphs, by the identity of their tensors (strings only)
_QUERY_KEYS = TensorCache(size=64)
# maximum degree of recently queried edge structures (sound node-level GAP's promise)
_MAX_DEGREES = TensorCache(size=8)


def query_graph_key(graph: Data) -> str:
    """:func:`~defenses.gap.mechanism.graph_key` of ``graph`` (SHA-256 of the node count, the
    canonical edge set and the features), hashed once per graph object: while the very same
    ``edge_index`` and ``x`` tensors are alive and unmodified in place (identity and version
    counter, :class:`~dpaudit.data.adjacency.TensorCache`), the key is reused; any other tensor, or an
    in-place torch edit of one, is hashed in full. Two graphs that differ in one edge or one
    feature value therefore never share a key. (Writes through ``.numpy()`` or ``.data`` bypass
    torch's version counter: edit query graphs with torch operations.)

    Args:
        graph: a query graph with ``x`` and ``edge_index``.

    Returns:
        The graph's key (32 hex digits).
    """
    num_nodes = int(graph.num_nodes)
    return _QUERY_KEYS.get(
        (graph.edge_index, graph.x), lambda: graph_key(num_nodes, graph.edge_index, graph.x), (num_nodes,)
    )


# --------------------------------------------------------------------------- the training release


@dataclass(frozen=True)
class TrainingGraph:
    """The owner's identification of the training graph: its canonical key
    (:func:`~defenses.gap.mechanism.graph_key`) and node count. Part of the owner's record,
    never of the public files (with it, anyone could ask "is this your graph?").

    Attributes:
        key: the canonical key (:func:`~defenses.gap.mechanism.graph_key`).
        num_nodes: the training graph's node count.
    """

    key: str
    num_nodes: int
    #: :func:`~defenses.gap.queries.structure_key` of the training graph (its edges without the
    #: features): what :meth:`GAPModel.charges_training` recognises a feature-perturbed copy by.
    #: ``None`` in records written before it
    structure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"key": self.key, "num_nodes": self.num_nodes}
        if self.structure is not None:
            out["structure"] = self.structure
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrainingGraph:
        """Read the training graph's identification from the owner's record.

        Args:
            record: the owner's record (``provenance.json``).

        Returns:
            The identification from ``record["gap"]["training_graph"]``.

        Raises:
            ModelFormatError: the entry is missing or malformed.
        """
        try:
            info = record["gap"]["training_graph"]
            structure = info.get("structure")
            return cls(str(info["key"]), int(info["num_nodes"]), None if structure is None else str(structure))
        except (KeyError, TypeError, ValueError):
            raise ModelFormatError(
                "the owner's record holds GAP's training aggregations but provenance.json lacks gap.training_graph"
            ) from None


@dataclass
class TrainingRows:
    """What the owner's code learns the first time it queries the training graph itself (its
    whole key matching the record's): the edge structure's key and the feature rows' digests
    (:mod:`defenses.gap.queries`), in memory only. With them a later query on a few nodes of a
    graph that shares the structure is recognised as the training graph's release from the
    nodes' own neighbourhood (their rows unchanged), without hashing the whole graph again.

    Attributes:
        structure: the training graph's edge-structure key, once learned.
        digests: the digests of its feature rows, once learned.
    """

    structure: str | None = None
    digests: np.ndarray | None = None


class TrainingRelease(Answers):
    """PMA's output on the training graph, made once during training and already paid for by
    the model's ε: its answers read the cached aggregations and spend nothing more.

    It is the owner's (the aggregations are in ``provenance.safetensors``) and answers only on
    the training graph itself: a graph whose canonical key differs is refused, so a caller never
    gets training-graph answers for another graph. Obtain it with
    :meth:`GAPModel.training_release`; the query methods mirror :class:`ReleasedModel`'s.

    Args:
        model: the GAP model.
        graph: the training graph's identification.
        aggregations: PMA's hops 1..K on the training graph.
        seen: what queries learned about the training graph (shared with the model's copies).
    """

    def __init__(self, model: GAPModel, graph: TrainingGraph, aggregations: torch.Tensor, seen: TrainingRows):
        self.model = model
        self.graph = graph
        self.aggregations = aggregations
        self.cfg = model.cfg
        self.seen = seen

    def is_training_graph(self, graph: Data) -> bool:
        """Whether ``graph`` is the training graph (same node count, edge set and features).

        Args:
            graph: the graph to test.

        Returns:
            ``True`` when it is the training graph.
        """
        return self.covers(graph)

    def covers(self, graph: Data, nodes=None) -> bool:
        """Whether the training release answers ``nodes`` (all when ``None``) of ``graph``: the
        training graph's edge structure and, on those nodes' K-hop neighbourhood, its feature
        rows (the rows the release computed for them depend on nothing else:
        :mod:`defenses.gap.queries`). The first match is the whole graph's key against the
        record's; from then on the structure's key and the rows' digests decide.

        Args:
            graph: the queried graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            Whether the cached release answers them.
        """
        if not isinstance(graph, Data) or graph.num_nodes != self.graph.num_nodes:
            return False
        if self.seen.digests is None:
            if query_graph_key(graph) != self.graph.key:
                return False
            self.seen.structure, self.seen.digests = structure_key(graph), row_digests(graph.x)
            return True
        if structure_key(graph) != self.seen.structure:
            return False
        wanted = None if nodes is None else torch.unique(_node_index(graph, nodes))
        if input_smoothing(self.cfg) is not None:  # every row's encoder input reads every node's features
            wanted = None
        return features_unchanged(graph, wanted, int(self.cfg["hops"]), None, self.seen.digests)

    @torch.no_grad()
    def representation(self, graph: Data, nodes=None) -> torch.Tensor:
        """Classifier input :math:`[\\check X^{(0)} \\| \\dots \\| \\check X^{(K)}]` of the queried nodes.

        Args:
            graph: the training graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            The classifier's input.

        Raises:
            DPAuditError: a malformed graph, or one the release does not cover.

        Shapes:
            return: [len(nodes), (K+1)·hidden]
        """
        self.model._check_graph(graph)
        if not self.covers(graph, nodes):
            raise DPAuditError(
                "the training release answers on the training graph only; this graph differs (query the model "
                "itself: every other graph is a new PMA release counted in its query ledger)"
            )
        idx = _node_index(graph, nodes)
        x0 = self.model.encoder.encode(self.model.encoder_inputs(graph, idx))
        return torch.cat([x0, self.aggregations[idx.to(self.aggregations.device)]], dim=1)

    @torch.no_grad()
    def pma_rows(self, graph: Data) -> torch.Tensor:
        """The rows PMA aggregates over ``graph`` (:meth:`GAPModel.pma_rows`; spends nothing).

        Args:
            graph: the graph.

        Returns:
            The rows.

        Shapes:
            return: [N, hop width]
        """
        return self.model.pma_rows(graph)

    @torch.no_grad()
    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        """Class posteriors from the cached training release (spends nothing).

        Args:
            graph: the training graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            Class probabilities.

        Raises:
            DPAuditError: a graph the release does not cover.

        Shapes:
            return: [len(nodes), C]
        """
        return torch.softmax(self.model.classifier(self.representation(graph, nodes)), dim=1)

    @torch.no_grad()
    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """The classifier's H from the cached training release (spends nothing).

        Args:
            graph: the training graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            H.

        Raises:
            DPAuditError: a graph the release does not cover.

        Shapes:
            return: [len(nodes), (K+1)·hidden]
        """
        return self.model.classifier.embed(self.representation(graph, nodes))


# --------------------------------------------------------------------------- released model


@register_model_kind("gap")
class GAPModel(ReleasedModel):
    """A trained GAP model: encoder and classifier weights, the training ledger
    (``ledger``: what :attr:`privacy` composes, never changed by a query), the mechanism one
    PMA release on a query graph costs (``query_mechanism``) and how many such releases this
    object has made (``query_releases``: its :attr:`query_ledger`), of which ``charged_releases``
    were over the training graph or a graph sharing its nodes or edges (:meth:`charges_training`):
    those are charged to the training data, whose total is :attr:`charged_privacy` (the training
    ε composed with them).

    Public tensors: ``encoder.*``, ``classifier.*``. The config holds nothing measured on the
    training graph (no key, no node count): from the public files a third party can query any
    graph, and every ``predict_proba`` / ``embed`` / ``representation`` call on the model
    object is a new PMA release counted in its query ledger. The object keeps **no memo**: it
    is what the owner and anyone else holding it call, and no charge, answer or timing may
    depend on another caller's queries (a memo would answer a copy of the owner's graph with
    the owner's published rows, for free). Identical repeated queries are free only inside a
    caller's own :meth:`query_session`. The aggregations PMA released on the training graph are
    the owner's record (``provenance.safetensors``, with the graph's key in
    ``provenance.json``) and answer only through :meth:`training_release`.

    Args:
        encoder: the trained encoder.
        classifier: the trained classifier.
        cfg: the config (level, protocol, sizes, noise, ledgers; see ``_CONFIG_KEYS``).
        privacy: the training spec.
        card: the public card.
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
        "ledger",
        "query_mechanism",
        "query_releases",
    )

    def __init__(
        self,
        encoder: GAPEncoder,
        classifier: GAPClassifier,
        cfg: dict[str, Any],
        privacy: PrivacySpec,
        card: dict[str, Any],
    ):
        self.cfg = dict(cfg)
        super().__init__(privacy, card)
        self.encoder = encoder.eval()
        self.classifier = classifier.eval()
        # the owner's cached training aggregations (set by fit or attach_record_tensors), and
        # what queries learn about the training graph (shared with interactive copies)
        self._training: tuple[TrainingGraph, torch.Tensor] | None = None
        self._training_rows = TrainingRows()
        # the training graph's edge codes (owner's record), when known
        self._training_edges: torch.Tensor | None = None
        # a query session's PMA releases on query graphs, least recently used first (a bounded
        # memo, never saved; at most ``query_memo_size`` kept). None on the model object itself:
        # it answers every caller, so it memoises nothing (:meth:`query_session`)
        self._memo: OrderedDict[int, QueryRelease] | None = None
        self.query_memo_size = QUERY_MEMO_SIZE
        #: the deployment this object answers in (:mod:`dpaudit.release.deployments`): ``None`` on
        #: the model object (undeclared: only the owner's record decides what is charged), the
        #: declared one in a :meth:`query_session`
        self.deployment: str | None = None
        #: a session's declared cap on the total ε (training ε ⊕ every release of the session),
        #: ``None``: no cap (:meth:`query_session`)
        self.query_budget: float | None = None
        self._budget_releases: int | None = None
        #: a session's policy: answer every query over the training graph's edge structure from
        #: the training release, whatever the features (:meth:`query_session`)
        self.answer_from_release = False

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    @property
    def query_ledger(self) -> QueryLedger:
        """The PMA releases this object (or session) made on query graphs so far, at the
        model's δ and unit (:class:`QueryLedger`), with those charged to the training data and
        their total (:attr:`charged_privacy`). :attr:`privacy` stays the training spec whatever
        was queried."""
        return QueryLedger(
            int(self.cfg["query_releases"]),
            self.cfg.get("query_mechanism"),
            float(self.privacy.delta),
            self.privacy.unit,
            charged=self.charged_releases,
            total_spec=functools.partial(charged_spec, self.cfg, self.privacy, self.charged_releases),
        )

    @property
    def charged_releases(self) -> int:
        """How many of this object's query releases were charged to the training data."""
        return int(self.cfg.get("charged_releases", 0) or 0)

    @property
    def charged_privacy(self) -> PrivacySpec:
        """The training spec composed with the :attr:`charged_releases` PMA releases over the
        training graph (:func:`charged_spec`): what the training data has spent once this object's
        answers are counted. :attr:`privacy` itself when nothing was charged."""
        return charged_spec(self.cfg, self.privacy, self.charged_releases)

    def total_with(self, releases: int) -> PrivacySpec:
        """The training spec composed with ``releases`` PMA releases charged to the training data
        (:func:`charged_spec`): what a plan of that many releases over the training graph costs."""
        return charged_spec(self.cfg, self.privacy, int(releases))

    def charges_training(self, graph: Data) -> bool:
        """Whether a release over ``graph`` is charged to the training data: the object answers
        in the ``training-graph`` deployment (declared so: every graph it answers over is the
        owner's, or built from it, as LinkTeller's feature-perturbed copies), or — unless it is
        declared ``querier-graph`` (the querier's own graph, the same whatever the training data)
        — the owner's record is here and ``graph``, over the training graph's nodes (the same
        node count: node ids name the same nodes), shares an edge with it (its edge set in the
        record; for a record without it, the same edge structure: the training graph, or a copy
        with changed features). A graph of another node count built from the training graph
        (relabelled nodes) is not recognised: answer it in a ``training-graph`` session. Decided from the declaration and
        the owner's record only: the answer itself (a fresh PMA release) is the same either way,
        and a third party's copy, which holds no record, decides from its declaration alone."""
        if self.deployment == TRAINING_GRAPH:
            return True
        if self.deployment == QUERIER_GRAPH or self._training is None:  # declared: the querier's own graph
            return False
        trained, _ = self._training
        if int(graph.num_nodes) != trained.num_nodes:  # node ids name the training graph's nodes only there
            return False
        if self._training_edges is not None:  # any shared edge, whatever the features
            return shares_edges(graph, self._training_edges)
        structure = trained.structure or self._training_rows.structure
        if structure is not None:
            return structure_key(graph) == structure
        return query_graph_key(graph) == trained.key

    @property
    def is_query_session(self) -> bool:
        """Whether this object is a :meth:`query_session` (memoises its own releases)."""
        return self._memo is not None

    # -- the owner's training release --------------------------------------------------------
    def keep_training_release(
        self, graph: TrainingGraph, aggregations: torch.Tensor, edge_index: torch.Tensor | None = None
    ) -> None:
        """Hold PMA's training-graph output as the owner's record (``fit`` calls this), with the
        training graph's edges (``edge_index``; kept as :func:`~defenses.gap.queries.edge_codes`)
        when given: what :meth:`charges_training` recognises a graph sharing an edge with it by."""
        expected = (graph.num_nodes, int(self.cfg["hops"]) * hop_width(self.cfg))
        if tuple(aggregations.shape) != expected:
            raise ModelFormatError(
                f"GAP training aggregations have shape {tuple(aggregations.shape)}; the training graph and config "
                f"imply {expected}"
            )
        self._training = (graph, aggregations)
        self._training_rows = TrainingRows()
        if edge_index is not None:
            self._training_edges = edge_index if edge_index.dtype == torch.int64 and edge_index.dim() == 1 else None
            if self._training_edges is None:
                self._training_edges = edge_codes(edge_index)
        self.record.setdefault("gap", {})["training_graph"] = graph.to_dict()

    def training_release(self) -> TrainingRelease:
        """The release PMA made on the training graph (paid for by the model's ε; reading it
        spends nothing). Only the owner has it.

        Raises:
            DPAuditError: this copy lacks the owner's record (a third party's copy, or loaded
                with ``record=False``).
        """
        if self._training is None:
            raise DPAuditError(
                "this GAP model has no training release: PMA's answers on the training graph are the owner's "
                "record (provenance.json + provenance.safetensors), absent from this copy; predict_proba / embed "
                "answer any graph as a new PMA release counted in the query ledger"
            )
        return TrainingRelease(self, *self._training, self._training_rows)

    def record_tensors(self) -> dict[str, torch.Tensor]:
        if self._training is None:
            return {}
        tensors = {TRAINING_AGGREGATIONS: self._training[1]}
        if self._training_edges is not None:
            tensors[TRAINING_EDGES] = self._training_edges
        return tensors

    def attach_record_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        if TRAINING_AGGREGATIONS not in tensors or not set(tensors) <= {TRAINING_AGGREGATIONS, TRAINING_EDGES}:
            raise ModelFormatError(
                f"GAP owner's record tensors: expected {TRAINING_AGGREGATIONS!r} (and {TRAINING_EDGES!r}), got "
                f"{sorted(tensors)}"
            )
        edges = tensors.get(TRAINING_EDGES)
        if edges is not None and (edges.dtype != torch.int64 or edges.dim() != 1):
            raise ModelFormatError(f"GAP owner's record tensor {TRAINING_EDGES!r} must be a 1-D int64 tensor")
        self.keep_training_release(
            TrainingGraph.from_record(self.record),
            tensors[TRAINING_AGGREGATIONS],
            None if edges is None else edges.cpu(),
        )

    # -- a caller's query session ------------------------------------------------------------
    def query_session(
        self, deployment: str | None = None, budget: float | None = None, answer_from_release: bool = False
    ) -> GAPModel:
        """A caller's own session: the same weights, training spec and training release, its
        own query ledger (starting at 0 releases) and its own memo. Inside it an identical
        repeated query (rows a release of this session computed, their neighbourhood's
        features unchanged) is answered again from that release, free; nothing it answers,
        charges or memoises depends on queries made on the model object or another session,
        and its queries leave the model's ledgers unchanged (an audit's queries do not alter
        the saved model).

        Args:
            deployment: the graph the session answers over (:mod:`dpaudit.release.deployments`):
                ``training-graph`` charges every release to the training data
                (:meth:`charges_training`); ``None`` keeps the model object's rule.
            budget: a cap on the total ε: the training ε composed with every release of this
                session, each counted as charged (so the refusal depends on the number of
                releases only, never on which graph was queried). A query that would pass it is
                refused in one line before any release (:class:`QueryBudgetExceeded`).
            answer_from_release: the owner answers every query over its training graph's edge
                structure (the graph itself, or a copy with the querier's features) from the
                training release: hops 1..K are the aggregations PMA released in training (paid
                for by the training ε), hop 0 the queried features — post-processing, nothing new
                charged; a querier's feature change then moves only the changed node's own
                answer. Needs the owner's record (its training release and edge structure).

        Raises:
            ConfigurationError: an unknown deployment, or a budget below the training ε.
        """
        if deployment is not None and deployment not in DEPLOYMENTS:
            raise ConfigurationError(f"unknown deployment {deployment!r}; use one of {', '.join(DEPLOYMENTS)}")
        if budget is not None:
            budget = float(budget)
            if not budget > 0 or (self.privacy.is_private and budget < self.privacy.epsilon):
                raise ConfigurationError(
                    f"query budget ε = {budget:g} must be positive and at least the training ε = "
                    f"{self.privacy.epsilon:.4g}"
                )
        twin = copy.copy(self)
        twin.cfg = copy.deepcopy(self.cfg)
        twin.cfg["query_releases"] = 0
        twin.cfg["charged_releases"] = 0
        twin.deployment = deployment if deployment is not None else self.deployment
        twin.query_budget = budget
        twin._budget_releases = None
        twin.answer_from_release = bool(answer_from_release)
        if twin.answer_from_release and (self._training is None or self._training[0].structure is None):
            raise ConfigurationError(
                "answer_from_release needs the owner's record with the training graph's edge structure "
                "(load(..., record=True) of a model saved by this version)"
            )
        twin.privacy = copy.deepcopy(self.privacy)
        twin.card = copy.deepcopy(self.card)
        twin.record = copy.deepcopy(self.record)
        twin._memo = OrderedDict()
        return twin

    #: what audits, evaluation and private selection call (kept name): a :meth:`query_session`
    interactive_copy = query_session

    # -- queries ----------------------------------------------------------------------------
    def _check_graph(self, graph: Data) -> None:
        if not isinstance(graph, Data) or getattr(graph, "x", None) is None or graph.edge_index is None:
            raise DPAuditError("GAP queries need a torch_geometric Data with x and edge_index")
        if graph.x.dim() != 2 or graph.x.size(1) != self.cfg["in_dim"]:
            raise DPAuditError(
                f"query graph has features of shape {tuple(graph.x.shape)}; expected [N, {self.cfg['in_dim']}]"
            )

    def _check_budget(self) -> None:
        """Refuse, before any work, a release that would take the session past its declared
        :attr:`query_budget` (every release counted as charged)."""
        if self.query_budget is None or self.cfg.get("query_mechanism") is None or not self.privacy.is_private:
            return
        if self._budget_releases is None:
            self._budget_releases = self._releases_within(self.query_budget)
        if int(self.cfg["query_releases"]) + 1 > self._budget_releases:
            raise QueryBudgetExceeded(
                f"query refused: one more PMA release would take the total ε past the declared budget "
                f"{self.query_budget:g} (training ε = {self.privacy.epsilon:.4g}; {self.cfg['query_releases']} "
                f"release(s) made, {self._budget_releases} allowed)"
            )

    def _releases_within(self, budget: float) -> int:
        """The most releases whose composition with the training ledger stays within ``budget``
        (an exponential then a binary search over cached compositions)."""

        def fits(n: int) -> bool:
            return charged_spec(self.cfg, self.privacy, n).epsilon <= budget * (1 + 1e-12)

        high = 1
        while fits(high) and high < 1 << 24:
            high *= 2
        low = high // 2 if high > 1 else 0
        if low == 0 and not fits(1):
            return 0
        while high - low > 1:  # fits(low), not fits(high)
            mid = (low + high) // 2
            low, high = (mid, high) if fits(mid) else (low, mid)
        return low

    def _record_query_release(self, charged: bool = False) -> None:
        """Count one more PMA release in the query ledger (never in :attr:`privacy`); a
        ``charged`` one also in :attr:`charged_releases` (the training data's total)."""
        self.cfg["query_releases"] = int(self.cfg["query_releases"]) + 1
        if charged:
            self.cfg["charged_releases"] = self.charged_releases + 1
        # debug: an audit makes hundreds of releases and reports them once, summed (its plan
        # and finding); the query ledger, which every caller can read, records each one
        log.debug("GAP: a new PMA release on a query graph (%d release(s))", self.cfg["query_releases"])

    def _check_promise(self, graph: Data) -> None:
        """Sound node-level GAP's degree promise on the whole query graph (its maximum degree is
        computed once per ``edge_index`` tensor)."""
        num_nodes = int(graph.num_nodes)
        degree = _MAX_DEGREES.get((graph.edge_index,), lambda: max_degree_of(graph.edge_index, num_nodes), (num_nodes,))
        if degree > self.cfg["max_degree"]:
            check_degree_promise(graph.edge_index, num_nodes, self.cfg["max_degree"], "query graph")

    def encoder_inputs(self, graph: Data, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's input rows of ``graph``: its raw features, or, when the config chose the
        public feature-graph smoothing (:func:`input_smoothing`), the features smoothed over the
        feature graph of ``graph``'s own nodes (all of them, whichever rows are asked). Reads the
        features only, never an edge.

        Args:
            graph: the graph read (training graph or a querier's).
            rows: the rows wanted, in order; ``None`` for all.

        Returns:
            The input rows (float32, on the model's device).

        Shapes:
            return: [len(rows), F] ([N, F] when ``rows`` is ``None``)
        """
        smoothing = input_smoothing(self.cfg)
        if smoothing is None:
            x = graph.x if rows is None else graph.x[rows.to(graph.x.device)]
            return x.to(self.device).float()
        smoothed = smoothing.apply(graph.x.to(self.device).float())
        return smoothed if rows is None else smoothed[rows.to(self.device)]

    @torch.no_grad()
    def pma_rows(self, graph: Data) -> torch.Tensor:
        """The rows PMA sums over ``graph``'s edges: X⁽⁰⁾ of every node, or, under sound GAP-EDP's
        ``released_rows``, the one-hot predicted classes (:func:`released_rows`). The encoder only:
        reads features, no edge, and makes no release (what an auditor needs to model a release).

        Args:
            graph: the graph.

        Returns:
            The rows.

        Shapes:
            return: [N, hop width]
        """
        return released_rows(self.cfg, self.encoder.encode(self.encoder_inputs(graph)))

    @torch.no_grad()
    def _hop_features(self, graph: Data, idx: torch.Tensor, inputs: torch.Tensor | None = None) -> torch.Tensor:
        """Hops 1..K of nodes ``idx`` of ``graph`` (in query order): a new, recorded PMA release.
        The training graph is no exception: routing it to the cached training release would
        answer "is this the training graph?".

        The release runs on the K-hop neighbourhood of ``idx`` (:mod:`defenses.gap.queries`: the
        answered rows have exactly the law of the same rows of a whole-graph release, and one
        release costs one PMA release whatever it answers), or on the whole graph when that
        neighbourhood holds more than half of it, or when the ``paper`` protocol samples
        out-degrees (which edges of a node survive depends on all of its out-edges).

        Memo: only inside a :meth:`query_session`, the session's last ``query_memo_size``
        releases answer again for free the rows they computed while the features those rows
        read are unchanged (:class:`~defenses.gap.queries.QueryRelease`). Any other row — a node
        the release did not cover, or a graph whose release was evicted — is a new release,
        charged like any. The model object itself memoises nothing: every call is a release.

        With the public feature-graph smoothing (:func:`input_smoothing`) every node's encoder
        input reads every node's features: the release is over the whole graph (``inputs``: the
        smoothed rows of all of ``graph``'s nodes when the caller has them) and a session's memo
        answers again only while no feature row of the graph changed."""
        if self.answer_from_release:
            trained, aggregations = self._training
            if int(graph.num_nodes) == trained.num_nodes and structure_key(graph) == trained.structure:
                # the training release's rows: post-processing of what training released and paid for
                return aggregations[idx.to(aggregations.device)]
        memo = self._memo
        if memo is not None and self.query_memo_size < 1:
            raise DPAuditError(f"GAP query_memo_size must be >= 1, got {self.query_memo_size}")
        hops = int(self.cfg["hops"])
        idx = idx.cpu()
        for key in reversed(list(memo or ())):
            rows = memo[key].answers(graph, idx, hops)
            if rows is not None:
                memo.move_to_end(key)
                return rows
        self._check_budget()
        private = self.cfg["query_mechanism"] is not None
        degree_bound = self.cfg.get("degree_bound") or "promise"  # files written before the projection
        projects = protocols.projects_degrees(self.cfg["level"], self.cfg["protocol"], degree_bound)
        if self.cfg["max_degree"] is not None:
            if protocols.sound_node_level_needs_promise(self.cfg["level"], self.cfg["protocol"], private, degree_bound):
                self._check_promise(graph)
        num_nodes = int(graph.num_nodes)
        universe = self.cfg.get("universe_nodes")
        if projects and private and universe is not None and num_nodes > int(universe):
            raise DPAuditError(
                f"query graph has {num_nodes} nodes, more than the declared {universe} this model's projection "
                "sensitivity is proven for"
            )
        wanted = torch.unique(idx)
        whole = 2 * wanted.numel() > num_nodes
        whole = whole or self.cfg["max_degree"] is not None and protocols.samples_degrees(self.cfg["protocol"])
        # the projection's weights depend on the whole graph: a neighbourhood would not give its rows
        whole = whole or projects
        smoothed = input_smoothing(self.cfg) is not None
        whole = whole or smoothed
        if not whole:
            subset, edge_index, positions = local_edges(graph, wanted, hops)
            whole = 2 * subset.numel() > num_nodes
        # A fresh release: OS entropy (dpaudit.training.noise), or torch's global RNG for a model
        # trained with seeded noise (reproducible, not a release) — never derivable from the saved model.
        seed = noise_source(card_noise_mode(self.card)).fresh_seed()
        gen = torch.Generator().manual_seed(seed + 1)
        if whole:
            edge_index = graph.edge_index
            if self.cfg["max_degree"] is not None and protocols.samples_degrees(self.cfg["protocol"]):
                edge_index = bound_out_degree(
                    edge_index, num_nodes, self.cfg["max_degree"], torch.Generator().manual_seed(seed)
                )
            x0 = released_rows(self.cfg, self.encoder.encode(self.encoder_inputs(graph) if inputs is None else inputs))
            operator = None
            if projects:
                projection = projection_of(edge_index, num_nodes, self.cfg["max_degree"])
                operator = projection.sum_operator(num_nodes, x0.dtype, self.device)
            released = private_multi_hop_aggregation(
                x0,
                edge_index.to(self.device),
                hops,
                self.cfg["noise_std"],
                gen,
                operator=operator,
                raw=skip_head(self.cfg),
            )
            rows, covered, subset = torch.cat(released, dim=1), None, None
        else:
            x0 = released_rows(
                self.cfg, self.encoder.encode(graph.x[subset.to(graph.x.device)].to(self.device).float())
            )
            released = private_multi_hop_aggregation(
                x0, edge_index.to(self.device), hops, self.cfg["noise_std"], gen, raw=skip_head(self.cfg)
            )
            rows, covered = torch.cat(released, dim=1)[positions.to(self.device)], wanted
        self._record_query_release(charged=self.charges_training(graph))
        if memo is not None:  # a session keeps its own release to answer its own repeats
            digests = row_digests(graph.x) if subset is None else row_digests(graph.x, subset)
            release = QueryRelease(structure_key(graph), num_nodes, covered, subset, digests, rows, smoothed)
            memo[max(memo, default=-1) + 1] = release
            while len(memo) > self.query_memo_size:
                memo.popitem(last=False)
        at = idx if covered is None else torch.searchsorted(wanted, idx)
        return rows[at.to(rows.device)]

    @torch.no_grad()
    def representation(self, graph: Data, nodes=None) -> torch.Tensor:
        """Classifier input :math:`[\\check X^{(0)} \\| \\dots \\| \\check X^{(K)}]` of the queried nodes.

        Args:
            graph: the query graph (a new PMA release, counted in the query ledger).
            nodes: the queried nodes; ``None`` for all.

        Returns:
            The classifier's input.

        Raises:
            DPAuditError: a malformed graph, or one beyond the model's declared node count or degree promise.

        Shapes:
            return: [len(nodes), (K+1)·hidden]
        """
        self._check_graph(graph)
        idx = _node_index(graph, nodes)
        if input_smoothing(self.cfg) is None:
            hops = self._hop_features(graph, idx)
            x0 = self.encoder.encode(self.encoder_inputs(graph, idx))
        else:  # one smoothing of the query graph's nodes serves the release and the hop-0 rows
            inputs = self.encoder_inputs(graph)
            hops = self._hop_features(graph, idx, inputs)
            x0 = self.encoder.encode(inputs[idx.to(inputs.device)])
        return torch.cat([x0, hops], dim=1)

    @torch.no_grad()
    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        """Class posteriors on a query graph: a new PMA release, counted in the query ledger.

        Args:
            graph: the query graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            Class probabilities.

        Shapes:
            return: [len(nodes), C]
        """
        return torch.softmax(self.classifier(self.representation(graph, nodes)), dim=1)

    @torch.no_grad()
    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """The classifier's H on a query graph: a new PMA release, counted in the query ledger.

        Args:
            graph: the query graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            H.

        Shapes:
            return: [len(nodes), (K+1)·hidden]
        """
        return self.classifier.embed(self.representation(graph, nodes))

    # -- persistence -------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """A deep copy of the config (nothing measured on the training graph)."""
        return copy.deepcopy(self.cfg)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The encoder's and classifier's weights, prefixed ``encoder.`` / ``classifier.``."""
        tensors = {f"encoder.{k}": v for k, v in self.encoder.state_dict().items()}
        tensors.update({f"classifier.{k}": v for k, v in self.classifier.state_dict().items()})
        return tensors

    @staticmethod
    def is_legacy_spec(privacy: PrivacySpec, config: dict[str, Any]) -> bool:
        """Whether ``privacy`` is a spec written before the query ledger: its mechanisms the
        training ledger followed by the config's ``query_releases`` (> 0) PMA releases on
        query graphs (and the :data:`RELEASES_NOTE` it carried).

        Args:
            privacy: the saved spec.
            config: the saved config.

        Returns:
            Whether the spec composed the query releases.
        """
        releases = int(config.get("query_releases", 0) or 0)
        return (
            privacy.is_private
            and releases > 0
            and config.get("query_mechanism") is not None
            and len(privacy.mechanisms) == len(config["ledger"]) + releases
        )

    @classmethod
    def verify_privacy(cls, privacy, config, card):
        """The spec's mechanisms must be the config's training ledger (queries never enter it:
        they are counted in ``query_releases``, the query ledger), the unit the config's level,
        and sound node-level GAP's unit condition the degree bound it was trained under
        (``max degree <= D``; no other spec carries one); then the generic recomputation
        (:func:`dpaudit.accounting.verify.verify_spec`). A file written before the query ledger
        (its spec composed training + ``query_releases`` × the query mechanism,
        :meth:`is_legacy_spec`) is verified as written — its ε may exceed the target by those
        releases only — and loads as the training spec (:meth:`from_state`).

        Args:
            privacy: the saved spec.
            config: the saved config (ledger, level, protocol, degree bound).
            card: the public card.

        Returns:
            The verification.

        Raises:
            IntegrityError: on any mismatch (one line).
        """
        from dpaudit.accounting.verify import refuse, verify_spec
        from dpaudit.release.model import card_protocol

        level_unit = {"edge": "edge", "node": "node"}.get(config.get("level"))
        try:
            releases = int(config.get("query_releases", 0))
            legacy = cls.is_legacy_spec(privacy, config)
            if not privacy.is_private:
                expected = []
            elif legacy:
                expected = _legacy_mechanisms(config)
            else:
                expected = [m.describe() for m in _training_ledger(config).mechanisms]
        except (KeyError, TypeError, ValueError, ModelFormatError) as exc:
            raise refuse(f"gap config ledger is unreadable: {exc}") from None
        if releases < 0:
            raise refuse(f"query_releases must be >= 0, got {releases}")
        try:
            charged = int(config.get("charged_releases", 0) or 0)
        except (TypeError, ValueError):
            raise refuse(f"charged_releases must be an integer, got {config.get('charged_releases')!r}") from None
        if not 0 <= charged <= releases:
            raise refuse(f"charged_releases must lie in 0..query_releases ({releases}), got {charged}")
        if privacy.is_private and privacy.mechanisms != expected:
            what = f" + {releases} query-graph release(s) (a spec written before the query ledger)" if legacy else ""
            raise refuse(
                f"the spec records {len(privacy.mechanisms)} mechanism(s) that differ from the model's training "
                f"ledger ({len(config.get('ledger', []))} training mechanism(s){what})"
            )
        condition = unit_condition(
            config.get("level"),
            config.get("protocol"),
            config.get("max_degree"),
            config.get("degree_bound") or "promise",
        )
        if privacy.is_private and privacy.unit_condition != condition:
            raise refuse(
                f"unit condition {privacy.unit_condition!r} stated; a {config.get('level')}-level "
                f"protocol={config.get('protocol')} GAP model proves {condition or 'no condition'!r}"
            )
        verification = verify_spec(privacy, level_unit, card_protocol(card), allow_above_target=legacy)
        if legacy:
            verification.checked.append(
                f"written before the query ledger: the spec composed {releases} PMA release(s) on query graphs; "
                "loaded as the training spec, the releases moved to the query ledger"
            )
        return verification

    @staticmethod
    def training_spec_of(privacy: PrivacySpec, config: dict[str, Any]) -> PrivacySpec:
        """The training spec of a legacy spec (:meth:`is_legacy_spec`): the training ledger
        recomposed at the same δ and unit, the query releases and their note stripped (the
        releases stay counted in the config's ``query_releases``). Any other spec unchanged.

        Args:
            privacy: the saved spec.
            config: the saved config.

        Returns:
            The training spec.
        """
        if not GAPModel.is_legacy_spec(privacy, config):
            return privacy
        spec = copy.deepcopy(privacy)
        fresh = _training_ledger(config).spec(spec.delta, spec.unit)
        spec.epsilon = fresh.epsilon
        spec.mechanisms = fresh.mechanisms
        spec.gdp_mu = fresh.gdp_mu
        spec.accountant = fresh.accountant
        spec.epsilon_by_accountant = fresh.epsilon_by_accountant
        spec.accounting = fresh.accounting
        spec.notes = [n for n in spec.notes if not n.startswith(RELEASES_NOTE)]
        return spec

    @classmethod
    def from_state(cls, config, tensors, privacy, card) -> GAPModel:
        """Rebuild the encoder and classifier from the config and load their weights.

        Args:
            config: the saved config.
            tensors: ``encoder.*`` and ``classifier.*`` weights.
            privacy: the saved spec (a legacy one becomes the training spec).
            card: the public card.

        Returns:
            The model, on the tensors' device.

        Raises:
            ModelFormatError: a missing or inconsistent config entry, an unreadable ledger record, or
                tensors that do not match the config.
        """
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
        try:
            input_smoothing(config)
        except ConfigurationError as exc:
            raise ModelFormatError(f"gap model config: {exc}") from None
        if config.get("released_rows", "prediction") != "prediction":
            raise ModelFormatError(
                f"gap model config: released_rows must be 'prediction', got {config['released_rows']!r}"
            )
        if isinstance(config.get("graph"), dict):
            # A file written before format 3 ships the training graph's key and aggregations in the
            # public files (the oracle this format removes). It loads as a public copy: both are
            # dropped, every query is charged, and saving it writes the current format.
            config = {k: v for k, v in config.items() if k != "graph"}
            tensors = {k: v for k, v in tensors.items() if k != LEGACY_CACHE}
        encoder, classifier = _build_encoder(config), _build_classifier(config, int(config["hops"]))
        enc_state = {k.removeprefix("encoder."): v for k, v in tensors.items() if k.startswith("encoder.")}
        cls_state = {k.removeprefix("classifier."): v for k, v in tensors.items() if k.startswith("classifier.")}
        extra = set(tensors) - {f"encoder.{k}" for k in enc_state} - {f"classifier.{k}" for k in cls_state}
        if extra:
            raise ModelFormatError(f"gap model tensors: unexpected entries {sorted(extra)}")
        try:
            encoder.load_state_dict(enc_state, strict=True)
            classifier.load_state_dict(cls_state, strict=True)
        except RuntimeError as exc:
            raise ModelFormatError(f"gap model tensors do not match its config: {str(exc).splitlines()[0]}") from None
        device = next(iter(tensors.values())).device
        privacy = cls.training_spec_of(privacy, config)  # a legacy spec's query releases: the query ledger
        return cls(encoder.to(device), classifier.to(device), config, privacy, card)


def unit_condition(
    level: str | None, protocol: str | None, max_degree: int | None, degree_bound: str | None = "promise"
) -> str | None:
    """The restriction of the neighbouring relation a GAP spec holds under: sound node-level GAP
    with the degree promise proves node-level DP over graphs of maximum degree ≤ D only (it
    refuses every other graph); over the degree projection it holds for every graph of at most
    the declared number of nodes, with no condition on degrees.

    Args:
        level: ``inf``, ``edge`` or ``node``.
        protocol: ``sound`` or ``paper``.
        max_degree: D, or ``None``.
        degree_bound: ``promise`` or ``projection``.

    Returns:
        ``"max degree <= D"`` for sound node-level GAP under the promise, else ``None``.
    """
    if level == "node" and protocol == "sound" and max_degree is not None and degree_bound != "projection":
        return f"max degree <= {int(max_degree)}"
    return None
