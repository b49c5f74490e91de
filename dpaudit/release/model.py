"""The released model: the one interface every defense returns and every attack consumes.

A released model answers black-box queries (:meth:`ReleasedModel.predict_proba`), exposes
its penultimate representation (:meth:`ReleasedModel.embed`), and carries its privacy
guarantee (:attr:`privacy`) and a model card (:attr:`card`).

On disk it is data, never code: ``model.safetensors`` (tensors) + ``model.json`` (schema,
model kind, architecture config, privacy spec, card, tensor manifest and the SHA-256 of the
weights). :func:`load` never unpickles; it checks the schema, the model kind, the weights'
hash, and every tensor name, shape and dtype against the manifest and against the
architecture rebuilt from the config, and refuses anything else with a clear error. It also
recomputes the privacy guarantee from the mechanisms recorded in the spec (the model kind's
:meth:`ReleasedModel.verify_privacy`, :mod:`dpaudit.accounting.verify`) and refuses a spec whose
ε, δ, μ, unit or ``sound`` flag those mechanisms do not prove (:class:`~dpaudit.errors.IntegrityError`);
the outcome is the loaded model's ``verification``. Where the defense has a plan, the recorded
mechanisms are also re-derived from the card's public inputs (:func:`check_plan`), so ε edited
with σ, or with the steps, is refused. That is a consistency check, not a signature: a file
whose hyperparameters, plan and mechanisms are all edited to agree still loads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from abc import ABC, abstractmethod
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from torch_geometric.data import Data

from dpaudit.accounting.spec import PrivacySpec
from dpaudit.accounting.verify import Verification, refuse, verify_spec
from dpaudit.data.adjacency import TensorCache, adjacency_of
from dpaudit.errors import DPAuditError, IntegrityError, ModelFormatError, OutputExistsError
from dpaudit.nn import build_architecture, features
from dpaudit.release import RECORD_FILE, check_public_card, check_public_config
from dpaudit.release.files import check_public_facts
from dpaudit.runtime import atomic_write_bytes, atomic_write_json, to_json

log = logging.getLogger(__name__)

SCHEMA = "dpaudit.released-model"
SCHEMA_VERSION = 3
#: Versions :func:`load` still reads. Version 1 lacks ``privacy.accounting`` (which analysis
#: produced ε) and truncated long sensitivity laws; what that leaves unverified is said in the
#: model's ``verification``. Versions 1 and 2 kept the owner's record inside ``model.json``
#: (their card is read as both).
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"
RECORD_TENSORS_FILE = "provenance.safetensors"
MAX_META_BYTES = 32 * 1024 * 1024
PLUGIN_GROUP = "dpaudit.plugins"
RECORD_SCHEMA = "dpaudit.owner-record"

_MODEL_KINDS: dict[str, type[ReleasedModel]] = {}
#: what every card must hold (files before format 3 also carried the owner's record in it; an
#: audit that needs it says so when it is missing)
_REQUIRED_CARD_KEYS = ("method", "hyperparameters", "dpaudit_version")


def register_model_kind(kind: str):
    """Class decorator: make a :class:`ReleasedModel` subclass loadable under ``kind``.

    Args:
        kind: the name written in ``model.json``'s ``kind`` field.

    Returns:
        The decorator; it sets ``cls.kind`` and returns the class unchanged.

    Raises:
        RuntimeError: another class is already registered under ``kind``.
    """

    def decorate(cls):
        existing = _MODEL_KINDS.get(kind)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise RuntimeError(f"model kind {kind!r} registered twice ({existing} and {cls})")
        cls.kind = kind
        _MODEL_KINDS[kind] = cls
        return cls

    return decorate


def load_plugins() -> None:
    """Import the packages that register defenses, model kinds and attacks (entry points)."""
    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        entry.load()


# The training layer's defense lookup (:func:`dpaudit.training.registry.get_defense`), installed by the
# registry when it is imported: the release format asks a card's defense for its unit and its
# plan without importing the layer above it.
_DEFENSE_LOOKUP: list = []


def install_defense_lookup(lookup) -> None:
    """Called once by :mod:`dpaudit.training.registry`: ``lookup(name)`` returns a defense class or raises
    :class:`~dpaudit.errors.DPAuditError` for an unknown name.

    Args:
        lookup: callable mapping a defense name to its class.
    """
    _DEFENSE_LOOKUP[:] = [lookup]


def _defense_class(method: str):
    """The registered defense ``method`` (plugins loaded first; their packages import the registry)."""
    if not _DEFENSE_LOOKUP:
        load_plugins()
    if not _DEFENSE_LOOKUP:
        raise ModelFormatError(
            "no defense registry is installed (import dpaudit.training.registry): the card cannot be checked"
        )
    return _DEFENSE_LOOKUP[0](method)


def model_kind(kind: str) -> type[ReleasedModel]:
    """The registered :class:`ReleasedModel` subclass for ``kind`` (plugins loaded on a miss).

    Args:
        kind: the model kind named in ``model.json``.

    Returns:
        The model class.

    Raises:
        ModelFormatError: no class is registered under ``kind``.
    """
    if kind not in _MODEL_KINDS:
        load_plugins()
    try:
        return _MODEL_KINDS[kind]
    except KeyError:
        raise ModelFormatError(f"unknown model kind {kind!r}; known: {', '.join(sorted(_MODEL_KINDS))}") from None


def _node_index(graph: Data, nodes) -> torch.Tensor:
    n = int(graph.num_nodes)
    if nodes is None:
        return torch.arange(n)
    idx = torch.as_tensor(nodes, dtype=torch.long).view(-1)
    if idx.numel() and (idx.min() < 0 or idx.max() >= n):
        raise DPAuditError(f"query nodes must lie in 0..{n - 1}")
    return idx


class Answers:
    """What every query interface derives from its posteriors (a released model, or GAP's
    training release): the predicted class and the accuracy on labeled nodes.

    Subclasses provide ``predict_proba(graph, nodes)``.
    """

    def predict(self, graph: Data, nodes=None) -> torch.Tensor:
        """Predicted class of each queried node (argmax of :meth:`predict_proba`).

        Args:
            graph: the graph queried (features ``x``, ``edge_index``).
            nodes: node ids to answer for; ``None`` for all nodes.

        Returns:
            Class indices.

        Shapes:
            return: [len(nodes)]
        """
        return self.predict_proba(graph, nodes).argmax(dim=1)

    def accuracy(self, graph: Data, nodes) -> float:
        """Accuracy of :meth:`predict` against ``graph.y`` on ``nodes``.

        Args:
            graph: the graph queried (features ``x``, ``edge_index``).
            nodes: node ids to answer for; ``None`` for all nodes.

        Returns:
            Fraction correct, NaN when ``nodes`` is empty.

        Raises:
            DPAuditError: a node id lies outside the graph.
        """
        nodes = _node_index(graph, nodes)
        if nodes.numel() == 0:
            return float("nan")
        pred = self.predict(graph, nodes).cpu()
        return float((pred == graph.y[nodes].cpu()).float().mean())


class ReleasedModel(Answers, ABC):
    """Base class of every released model.

    Subclasses implement the two queries and the three persistence hooks
    (:meth:`config`, :meth:`state_tensors`, :meth:`from_state`) and register themselves with
    :func:`register_model_kind`.

    Args:
        privacy: the model's privacy guarantee.
        card: the public model card (copied).

    Attributes:
        privacy: the :class:`~dpaudit.accounting.spec.PrivacySpec`.
        card: the public card (``model.json``).
        record: the owner's record (``provenance.json``), empty for a third party's copy.
        verification: outcome of the load-time privacy check, ``None`` for a model built in this process.
    """

    kind: ClassVar[str] = ""

    def __init__(self, privacy: PrivacySpec, card: dict[str, Any]):
        self.privacy = privacy
        #: the public card (``model.json``): choices and declared facts only (:mod:`dpaudit.release`)
        self.card = dict(card)
        #: the owner's record (``provenance.json``): everything measured on the private data —
        #: dataset fingerprint and counts, split seed / sizes / nodes, the training seed,
        #: diagnostics, timings. Empty for a model loaded from the public files alone.
        self.record: dict[str, Any] = {}
        #: Outcome of the load-time privacy check (:func:`load`); ``None`` for a model built in
        #: this process, whose spec came straight from the accountant.
        self.verification: Verification | None = None

    def provenance(self, key: str, default: Any = None) -> Any:
        """``key`` of the owner's record, else of the card (files written before format 3).

        Args:
            key: record/card key to read.
            default: value returned when neither holds ``key``.

        Returns:
            The stored value or ``default``.
        """
        if key in self.record:
            return self.record[key]
        return self.card.get(key, default)

    @property
    def has_record(self) -> bool:
        """Whether the owner's record is attached (the owner's copy, not a third party's)."""
        return bool(self.record)

    # -- queries ----------------------------------------------------------------------------
    @abstractmethod
    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        """Class posteriors [len(nodes), C] for ``nodes`` of ``graph`` (all nodes if None).

        Args:
            graph: the graph queried (features ``x``, ``edge_index``).
            nodes: node ids to answer for; ``None`` for all nodes.

        Returns:
            Class posteriors (rows sum to 1).

        Shapes:
            return: [len(nodes), num_classes]
        """

    @abstractmethod
    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """Penultimate representation [len(nodes), H].

        Args:
            graph: the graph queried (features ``x``, ``edge_index``).
            nodes: node ids to answer for; ``None`` for all nodes.

        Returns:
            The penultimate representation.

        Shapes:
            return: [len(nodes), hidden]
        """

    @property
    def charged_privacy(self) -> PrivacySpec:
        """The training data's total: :attr:`privacy` composed with every release this object
        made over the training graph or a graph sharing its nodes or edges (GAP's PMA releases
        over the training graph, :mod:`dpaudit.release.deployments`). :attr:`privacy` itself for
        a model whose answers make no accounted release (the default)."""
        return self.privacy

    @property
    def method(self) -> str:
        return self.card.get("method", self.kind)

    @property
    def inference_private(self) -> bool:
        return bool(self.card.get("inference", {}).get("private", False))

    # -- persistence hooks -------------------------------------------------------------------
    @abstractmethod
    def config(self) -> dict[str, Any]:
        """JSON-able description from which :meth:`from_state` rebuilds the model."""

    @abstractmethod
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor the model needs, by name."""

    @classmethod
    @abstractmethod
    def from_state(
        cls, config: dict[str, Any], tensors: dict[str, torch.Tensor], privacy: PrivacySpec, card: dict[str, Any]
    ) -> ReleasedModel:
        """Rebuild from :meth:`config` and :meth:`state_tensors`; raise on any mismatch.

        Args:
            config: the dict :meth:`config` returned.
            tensors: the tensors :meth:`state_tensors` returned, by name.
            privacy: the (verified) privacy spec.
            card: the public card.

        Returns:
            The rebuilt model.
        """

    @classmethod
    def verify_privacy(cls, privacy: PrivacySpec, config: dict[str, Any], card: dict[str, Any]) -> Verification:
        """Recompute ``privacy`` from its recorded mechanisms before the model is rebuilt
        (:func:`dpaudit.accounting.verify.verify_spec`): ε under the recorded accountant at the
        stated δ, μ, the unit against the card's defense, protocol vs ``sound``, spent ≤ target.

        Kinds whose ledger holds records the core cannot rebuild (amplification by node
        sampling, a paper's own arithmetic, recorded (ε, δ) guarantees proven by a theorem)
        override this and re-derive those first.

        Raises:
            IntegrityError: the spec does not match (one line).

        Args:
            privacy: the spec read from ``model.json``.
            config: the model's config (kinds that re-derive records read it).
            card: the public card (defense, protocol, hyperparameters).

        Returns:
            The :class:`~dpaudit.accounting.verify.Verification` (what was checked and what was not).
        """
        return verify_spec(privacy, expected_unit(card), card_protocol(card))

    def record_tensors(self) -> dict[str, torch.Tensor]:
        """Tensors of the owner's record (``provenance.safetensors``), never shipped: e.g. a
        defense's cached answers on the training graph. Empty by default."""
        return {}

    def attach_record_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Receive :meth:`record_tensors` back on load (only when the owner's files are there).
        A kind that keeps none refuses any: they would belong to another model.

        Args:
            tensors: the tensors read from ``provenance.safetensors``.

        Raises:
            ModelFormatError: ``tensors`` is not empty (this base implementation keeps none).
        """
        if tensors:
            raise ModelFormatError(f"a {self.kind!r} model keeps no owner's tensors, found {sorted(tensors)[:3]}")

    # -- save / load -------------------------------------------------------------------------
    def save(self, directory: str | Path, overwrite: bool = False) -> Path:
        """Write the public release (``model.safetensors``, ``model.json``) and, when this
        model carries one, the owner's record (``provenance.json``, ``provenance.safetensors``)
        into ``directory``, each file atomically (:mod:`dpaudit.release` says which is which).

        The privacy spec is verified first, exactly as :func:`load` will (on the JSON form), and
        the card is checked to hold only declared-public fields, so a file that could not be
        loaded back, or that would publish a private measurement, is never written.

        Args:
            directory: the released-model folder to write (created when missing).
            overwrite: replace a released model already in ``directory`` (the CLI's ``--force``);
                without it such a folder is refused, never silently replaced.

        Returns:
            ``directory``, as a :class:`~pathlib.Path`.

        Raises:
            OutputExistsError: ``directory`` already holds a released model and ``overwrite`` is false.
            IntegrityError: the spec does not match its recorded mechanisms (a bug in the
                defense, or a spec edited in memory).
            PublicCardError: the card holds a field that is not declared public.

        Args:
            directory: target directory (created if missing).

        Returns:
            ``directory`` as a :class:`~pathlib.Path`.
        """
        directory = Path(directory)
        if not overwrite and any((directory / name).exists() for name in (META_FILE, WEIGHTS_FILE)):
            raise OutputExistsError(
                f"{directory} already holds a released model; choose another folder, or pass overwrite=True "
                "to replace it (the CLI's --force)"
            )
        written = json.loads(to_json({"privacy": self.privacy.to_dict(), "config": self.config(), "card": self.card}))
        check_public_card(written["card"])
        check_public_config(written["config"])
        try:
            written_spec = PrivacySpec.from_dict(written["privacy"])
            self.verification = type(self).verify_privacy(written_spec, written["config"], written["card"])
            replanned = check_plan(written_spec, written["card"])
        except DPAuditError as exc:
            raise IntegrityError(f"refusing to save {directory}: {exc}") from None
        if replanned:
            self.verification.checked.append(replanned)
        directory.mkdir(parents=True, exist_ok=True)
        tensors, blob = self._weights_blob()
        meta = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "config": self.config(),
            "privacy": self.privacy.to_dict(),
            "card": self.card,
            "tensors": {
                k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")} for k, v in tensors.items()
            },
            "weights_sha256": hashlib.sha256(blob).hexdigest(),
        }
        atomic_write_bytes(directory / WEIGHTS_FILE, blob)
        atomic_write_json(directory / META_FILE, meta)
        record_tensors = {k: v.detach().cpu().contiguous() for k, v in self.record_tensors().items()}
        if record_tensors:
            atomic_write_bytes(directory / RECORD_TENSORS_FILE, save_safetensors(record_tensors))
        else:  # an earlier model's owner tensors must not be read back as this one's
            (directory / RECORD_TENSORS_FILE).unlink(missing_ok=True)
        if self.record:
            atomic_write_json(directory / RECORD_FILE, {"schema": RECORD_SCHEMA, **self.record})
        else:
            (directory / RECORD_FILE).unlink(missing_ok=True)
        return directory

    def _weights_blob(self) -> tuple[dict[str, torch.Tensor], bytes]:
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_tensors().items()}
        blob = save_safetensors(tensors) if tensors else save_safetensors({"_empty": torch.zeros(0)})
        return tensors, blob

    def weights_sha256(self) -> str:
        """The SHA-256 of the released tensors, as :meth:`save` writes it (``weights_sha256``).

        Returns:
            The hex digest.
        """
        return hashlib.sha256(self._weights_blob()[1]).hexdigest()

    @classmethod
    def load(cls, directory: str | Path, record: bool = False) -> ReleasedModel:
        """:func:`load` (the public view unless ``record=True``)."""
        return load(directory, record=record)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.method} on {self.card.get('dataset', {}).get('name')}: {self.privacy.summary()}>"


def load(directory: str | Path, device: str | torch.device = "cpu", record: bool = False) -> ReleasedModel:
    """Load and validate a released model directory (never unpickles anything).

    By default (``record=False``) the public view: exactly what a third party holds
    (``model.json`` + ``model.safetensors``), whatever else lies in the folder. The owner's
    record (``provenance.json`` / ``provenance.safetensors``: the training graph's key, the
    split, the training release) is attached only when asked for with ``record=True``: it
    answers "is this your training graph?" exactly and for free, so only the owner's own code
    paths (its audit, its evaluation) ask for it.

    Args:
        directory: the released model's folder.
        device: where the tensors go.
        record: attach the owner's record when present (the owner's copy).

    Returns:
        The validated model (:attr:`ReleasedModel.verification` set).

    Raises:
        ModelFormatError: a missing, malformed or inconsistent file (one line).
        IntegrityError: a privacy spec its recorded mechanisms do not prove."""
    directory = Path(directory)
    meta_path, weights_path = directory / META_FILE, directory / WEIGHTS_FILE
    if not directory.is_dir():
        raise ModelFormatError(f"{directory} is not a released-model directory")
    for path in (meta_path, weights_path):
        if not path.is_file():
            raise ModelFormatError(
                f"{directory}: missing {path.name} (a released model is {META_FILE} + {WEIGHTS_FILE})"
            )
    meta = _read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
        raise ModelFormatError(f"{meta_path}: not a dpaudit released model (schema {SCHEMA!r} expected)")
    if meta.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
        raise ModelFormatError(
            f"{meta_path}: unsupported schema version {meta.get('schema_version')!r} "
            f"(this dpaudit reads {', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
        )
    for key, typ in (("kind", str), ("config", dict), ("privacy", dict), ("card", dict), ("tensors", dict)):
        if not isinstance(meta.get(key), typ):
            raise ModelFormatError(f"{meta_path}: field {key!r} missing or of the wrong type")
    missing = [k for k in _REQUIRED_CARD_KEYS if k not in meta["card"]]
    if missing:
        raise ModelFormatError(f"{meta_path}: model card lacks {missing}")
    cls = model_kind(meta["kind"])
    _check_architecture_fits_manifest(cls, meta, directory)

    blob = weights_path.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("weights_sha256"):
        raise ModelFormatError(f"{weights_path}: weights do not match the hash in {META_FILE} (tampered or corrupt)")
    try:
        tensors = load_safetensors(blob)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ModelFormatError(f"{weights_path}: not a valid safetensors file ({exc})") from None
    tensors.pop("_empty", None)
    manifest = meta["tensors"]
    if set(manifest) != set(tensors):
        raise ModelFormatError(
            f"{directory}: tensor names differ from the manifest "
            f"(unexpected {sorted(set(tensors) - set(manifest))}, missing {sorted(set(manifest) - set(tensors))})"
        )
    for name, spec in manifest.items():
        t = tensors[name]
        if list(t.shape) != spec.get("shape") or str(t.dtype).removeprefix("torch.") != spec.get("dtype"):
            raise ModelFormatError(
                f"{directory}: tensor {name!r} has shape/dtype {tuple(t.shape)}/{t.dtype}, manifest says {spec}"
            )
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise ModelFormatError(f"{directory}: tensor {name!r} contains NaN or infinite values")
    try:
        privacy = PrivacySpec.from_dict(meta["privacy"])
    except (DPAuditError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"{meta_path}: invalid privacy spec: {exc}") from None
    if privacy.is_private and (
        privacy.unit is None or not privacy.delta < 1 or privacy.epsilon <= 0 or math.isnan(privacy.epsilon)
    ):
        raise ModelFormatError(f"{meta_path}: inconsistent privacy spec {meta['privacy']}")
    verification = verify_model_privacy(cls, privacy, meta, meta_path)
    tensors = {k: v.to(device) for k, v in tensors.items()}
    try:
        model = cls.from_state(meta["config"], tensors, privacy, meta["card"])
    except DPAuditError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ModelFormatError(f"{directory}: tensors do not fit the {meta['kind']!r} architecture: {exc}") from None
    model.verification = verification
    if record:
        model.record = read_record(directory)
        if model.record and (directory / RECORD_TENSORS_FILE).is_file():
            try:
                extra = load_safetensors((directory / RECORD_TENSORS_FILE).read_bytes())
            except (SafetensorError, ValueError, RuntimeError) as exc:
                raise ModelFormatError(
                    f"{directory / RECORD_TENSORS_FILE}: not a valid safetensors file ({exc})"
                ) from None
            model.attach_record_tensors({k: v.to(device) for k, v in extra.items()})
    return model


def _read_json(path: Path) -> Any:
    """A JSON file of bounded size, parsed (never unpickled); malformed files are refused."""
    if path.stat().st_size > MAX_META_BYTES:
        raise ModelFormatError(f"{path}: implausibly large ({path.stat().st_size} bytes)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{path}: not valid JSON ({exc})") from None


def read_record(directory: str | Path) -> dict[str, Any]:
    """The owner's record of a model directory (``provenance.json``), or ``{}`` when absent
    (a third party's copy). Never unpickles; a malformed file is refused.

    Args:
        directory: the model directory.

    Returns:
        The record's fields (without ``schema``), or ``{}``.

    Raises:
        ModelFormatError: the file is not valid JSON or not an owner's record.
    """
    path = Path(directory) / RECORD_FILE
    if not path.is_file():
        return {}
    payload = _read_json(path)
    if not isinstance(payload, dict) or payload.get("schema") != RECORD_SCHEMA:
        raise ModelFormatError(f"{path}: not a dpaudit owner's record (schema {RECORD_SCHEMA!r} expected)")
    payload.pop("schema")
    return payload


def expected_unit(card: dict[str, Any]) -> str | None:
    """The unit the card's defense protects (``None`` when the method is not a registered
    defense, e.g. a model kind from a plugin without one).

    Args:
        card: the public model card.

    Returns:
        The defense's unit (e.g. ``"node"``/``"edge"``) or ``None``.
    """
    method = card.get("method")
    if not isinstance(method, str):
        return None
    try:
        return _defense_class(method).unit
    except DPAuditError:
        return None


def card_protocol(card: dict[str, Any]) -> str | None:
    """The protocol the model card records (``card["protocol"]``, else the hyperparameters');
    two different values are refused.

    Args:
        card: the public model card.

    Returns:
        The protocol name, or ``None`` when the card records none.

    Raises:
        IntegrityError: the two places name different protocols.
    """

    top = card.get("protocol")
    hp = (card.get("hyperparameters") or {}).get("protocol") if isinstance(card.get("hyperparameters"), dict) else None
    if top is not None and hp is not None and top != hp:
        raise refuse(f"the model card names protocol {top!r} and hyperparameter protocol {hp!r}")
    return top if top is not None else hp


def check_plan(privacy: PrivacySpec, card: dict[str, Any]) -> str | None:
    """Re-derive the recorded mechanisms from the card's own public inputs through the
    defense's plan (:meth:`dpaudit.training.defense.Defense.replan`: hyperparameters, protocol, target ε,
    δ, declared facts → schedule, σ) and refuse a spec whose records differ, so editing ε with σ,
    or steps alone, or the protocol labels without the plan they imply, does not load.

    Returns a line for ``verification.checked``, or ``None`` when the card's method has no plan
    (baselines, plugins, old files, adapted models).

    Raises:
        IntegrityError: the recorded mechanisms are not the plan's (one line).

    Args:
        privacy: the spec whose ``mechanisms`` are checked.
        card: the public card (method, hyperparameters, declared facts).
    """
    method = card.get("method")
    if not privacy.is_private or not isinstance(method, str) or card.get("adapter"):
        return None
    try:
        defense = _defense_class(method)
    except DPAuditError:
        return None
    planned = defense.replan(card, privacy)
    if planned is None:
        return None
    mismatch = compare_records(privacy.mechanisms, planned)
    if mismatch:
        raise refuse(f"the card's hyperparameters plan {mismatch}")
    return "mechanisms re-derived from the card's hyperparameters and declared facts"


def compare_records(recorded: list[dict], planned: list[dict], rtol: float = 1e-6) -> str | None:
    """Where ``recorded`` mechanism records differ from ``planned`` ones (every key the plan
    gives, numbers to ``rtol``), as a phrase; ``None`` when they agree.

    Args:
        recorded: mechanism records of the spec.
        planned: mechanism records the plan derives.
        rtol: relative tolerance for numeric values.

    Returns:
        A phrase naming the first difference, or ``None``.
    """
    if len(recorded) != len(planned):
        return f"{len(planned)} mechanism(s), the spec records {len(recorded)}"
    for i, (have, want) in enumerate(zip(recorded, planned)):
        for key, value in want.items():
            got = have.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(got, (int, float)):
                if not math.isclose(float(got), float(value), rel_tol=rtol, abs_tol=1e-12):
                    return (
                        f"{key} = {value!r} for mechanism {i + 1} ({want.get('name', '?')}), the spec records {got!r}"
                    )
            elif got != value:
                return f"{key} = {value!r} for mechanism {i + 1} ({want.get('name', '?')}), the spec records {got!r}"
    return None


def verify_model_privacy(
    cls: type[ReleasedModel], privacy: PrivacySpec, meta: dict[str, Any], meta_path: Path
) -> Verification:
    """Run the model kind's :meth:`ReleasedModel.verify_privacy` hook; a mismatch is one line
    naming the file (:class:`~dpaudit.errors.IntegrityError`).

    Args:
        cls: the model kind's class.
        privacy: the spec read from the file.
        meta: the parsed ``model.json``.
        meta_path: its path (named in errors).

    Returns:
        The :class:`~dpaudit.accounting.verify.Verification`, including the plan check's outcome.

    Raises:
        IntegrityError: the spec or the plan does not verify.
    """
    try:
        verification = cls.verify_privacy(privacy, meta["config"], meta["card"])
    except IntegrityError as exc:
        raise IntegrityError(f"{meta_path}: {exc}") from None
    except DPAuditError as exc:
        raise IntegrityError(f"{meta_path}: privacy spec cannot be verified: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise IntegrityError(f"{meta_path}: privacy spec cannot be verified: {type(exc).__name__}: {exc}") from None
    try:
        replanned = check_plan(privacy, meta["card"])
    except IntegrityError as exc:
        raise IntegrityError(f"{meta_path}: {exc}") from None
    except DPAuditError as exc:
        raise IntegrityError(f"{meta_path}: the card's plan cannot be recomputed: {exc}") from None
    try:  # what no plan re-derives (num_nodes when the schedule reads num_train ...)
        check_public_facts(privacy.public_facts, meta["card"], privacy.mechanisms)
    except DPAuditError as exc:
        raise IntegrityError(f"{meta_path}: {exc}") from None
    if replanned:
        verification.checked.append(replanned)
    elif privacy.is_private and privacy.status != "claimed":  # a claim records no mechanism to re-derive
        verification.not_checked.append("the mechanisms were not re-derived from the card's hyperparameters (no plan)")
    if meta.get("schema_version") == 1:
        verification.not_checked.insert(
            0, "format 1 file: the analysis that produced ε is not recorded (matched against every analysis)"
        )
    if verification.seconds > 0:
        log.debug("%s: privacy recomputed in %.3f s", meta_path, verification.seconds)
    return verification


def _check_architecture_fits_manifest(cls: type[ReleasedModel], meta: dict, directory: Path) -> None:
    """Rebuild the architecture on PyTorch's ``meta`` device (no memory) against the manifest.

    A ``model.json`` whose config asks for sizes its tensors do not have (an edited
    ``hidden: 300000``) is refused here, before gigabytes are allocated for it. Kinds whose
    rebuild needs real data ops the meta device lacks are checked by the real rebuild instead.
    """
    shapes = {}
    for name, spec in meta["tensors"].items():
        dtype = getattr(torch, str(spec.get("dtype")), None) if isinstance(spec, dict) else None
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if (
            not isinstance(dtype, torch.dtype)
            or not isinstance(shape, list)
            or not all(isinstance(d, int) and d >= 0 for d in shape)
        ):
            raise ModelFormatError(f"{directory}: manifest entry {name!r} is malformed: {spec!r}")
        shapes[name] = (shape, dtype)
    if "_empty" in shapes:
        shapes.pop("_empty")
    try:
        with torch.device("meta"):
            fake = {k: torch.empty(shape, dtype=dtype) for k, (shape, dtype) in shapes.items()}
            cls.from_state(meta["config"], fake, PrivacySpec.non_private(), meta["card"])
    except DPAuditError:
        raise
    except RuntimeError as exc:
        if "size mismatch" in str(exc) or "Missing key" in str(exc) or "Unexpected key" in str(exc):
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            detail = next((line for line in lines if "size mismatch" in line or "key" in line), lines[0])
            raise ModelFormatError(
                f"{directory}: the architecture in {META_FILE} does not fit its tensor manifest: {detail}"
            ) from None
    except Exception:  # noqa: BLE001 - not checkable on the meta device; the real rebuild checks it
        return


def training_release(model: ReleasedModel):
    """The model's training release when it has one and this copy holds it (GAP's cached
    aggregations, the owner's record); ``None`` for every other model or copy.

    Args:
        model: any released model.

    Returns:
        The training release object, or ``None``.
    """
    opener = getattr(model, "training_release", None)
    if not callable(opener):
        return None
    try:
        return opener()
    except DPAuditError:  # a third party's copy: every query is a charged release
        return None


def answering(model: ReleasedModel, graph: Data):
    """What answers a query on ``graph``: the model's training release when ``graph`` is the
    graph it was trained on and the owner's record holds that release (reading it spends
    nothing: it is the release the model's ε already pays for), else the model itself (a
    query-charged model such as GAP then makes, and accounts, a new release).

    Only the owner's code paths (evaluation, audits) route through this; a copy loaded from the
    public files alone has no training release and pays for every graph, the training graph
    included.

    Args:
        model: the released model.
        graph: the graph to be queried.

    Returns:
        The object whose ``predict_proba``/``embed`` answer the query.
    """
    release = training_release(model)
    return release if release is not None and release.is_training_graph(graph) else model


#: the last whole-graph query's features as modules take them (dense, or SparseFeatures)
_GRAPH_FEATURES = TensorCache(size=1)


@register_model_kind("module")
class ModuleModel(ReleasedModel):
    """A released model that is one :mod:`dpaudit.nn` architecture over ``(x, edge_index)``.

    Inference runs the module on whatever graph is queried (transductive or inductive); it
    reads the queried nodes' neighbourhoods, so it is private only for what training saw,
    never for the query graph itself. A query on a few nodes computes only their k-hop
    neighbourhood (k = the module's ``propagation_hops``, the number of message-passing layers)
    over the query graph's cached CSR adjacency (:mod:`dpaudit.data.adjacency`): the same numbers as
    the whole-graph computation, at the cost of what it touches.

    Args:
        module: the trained :mod:`dpaudit.nn` module (put in eval mode).
        architecture: the architecture config that rebuilds it (:func:`dpaudit.nn.build_architecture`).
        privacy: the model's privacy guarantee.
        card: the public model card.
    """

    def __init__(self, module: torch.nn.Module, architecture: dict, privacy: PrivacySpec, card: dict):
        super().__init__(privacy, card)
        self.module = module.eval()
        self.architecture = dict(architecture)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    def hops(self, embed: bool) -> int | None:
        """How many hops a node's answer reads (the module's ``propagation_hops``; the embedding
        stops one layer short); ``None`` for a module that does not say (whole-graph queries).

        Args:
            embed: count hops for :meth:`embed` (one fewer) rather than :meth:`predict_proba`.

        Returns:
            Number of hops, or ``None``.
        """
        hops = getattr(self.module, "propagation_hops", None)
        return None if hops is None else max(int(hops) - int(embed), 0)

    @torch.no_grad()
    def _forward(self, graph: Data, nodes, embed: bool) -> torch.Tensor:
        """The module on the nodes' neighbourhood: their own features when it reads no edge,
        else their k-hop neighbourhood (:meth:`~dpaudit.data.adjacency.Adjacency.neighbourhood`, the
        same numbers as the whole-graph computation), else the whole graph."""
        idx = _node_index(graph, nodes)
        self.module.eval()
        hops = self.hops(embed)
        run = self.module.embed if embed else self.module
        if hops == 0:
            out = run(graph.x[idx.to(graph.x.device)].to(self.device).float(), None)
        elif hops is None:  # a module that takes edge_index as such
            out = run(graph.x.to(self.device), graph.edge_index.to(self.device))[idx.to(self.device)]
        elif nodes is None:
            x = _GRAPH_FEATURES.get((graph.x,), lambda: features(graph.x.to(self.device).float()), (self.device,))
            out = run(x, adjacency_of(graph.edge_index, int(graph.num_nodes), self.device))[idx.to(self.device)]
        else:
            adjacency = adjacency_of(graph.edge_index, int(graph.num_nodes), self.device)
            # a neighbourhood holding most of the graph's edges costs more than the graph itself;
            # its node count is no guide (two hops on Reddit reach most nodes over 0.7 % of the edges)
            hood = adjacency.neighbourhood(idx.to(self.device), hops, max_edges=adjacency.num_edges // 2)
            if hood is None:
                return self._forward(graph, None, embed)[idx.to(self.device)]
            x = features(graph.x[hood.subset.to(graph.x.device)].to(self.device).float())
            out = run(x, hood.adjacency)[hood.positions]
        return out if embed else torch.softmax(out, dim=1)

    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        """Softmax of the module's output for ``nodes`` (see :meth:`ReleasedModel.predict_proba`).

        Args:
            graph: the graph queried (features ``x``, ``edge_index``).
            nodes: node ids to answer for; ``None`` for all nodes.

        Returns:
            Class posteriors.

        Shapes:
            return: [len(nodes), num_classes]
        """
        return self._forward(graph, nodes, embed=False)

    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """The module's penultimate representation for ``nodes``.

        Args:
            graph: the graph queried (features ``x``, ``edge_index``).
            nodes: node ids to answer for; ``None`` for all nodes.

        Returns:
            Embeddings.

        Shapes:
            return: [len(nodes), hidden]
        """
        return self._forward(graph, nodes, embed=True)

    def config(self) -> dict:
        """The config that rebuilds the module: ``{"architecture": ...}``."""
        return {"architecture": self.architecture}

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The module's ``state_dict``."""
        return dict(self.module.state_dict())

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Rebuild the module from its architecture config and load its weights strictly.

        Args:
            config: ``{"architecture": ...}`` as :meth:`config` wrote it.
            tensors: the module's ``state_dict`` tensors.
            privacy: the verified privacy spec.
            card: the public card.

        Returns:
            The model, on the tensors' device.
        """
        module = build_architecture(config["architecture"])
        module.load_state_dict(tensors, strict=True)
        return cls(module.to(next(iter(tensors.values())).device), config["architecture"], privacy, card)
