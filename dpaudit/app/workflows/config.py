"""What a study computes: its configuration, validation and the grid of cells."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from dpaudit.errors import ConfigurationError, DPAuditError

log = logging.getLogger(__name__)


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(text)).strip("-")[:limit] or "x"


#: the canary audits a study's cells can run: a kind, or ``"auto"`` (the one that can refute the claim)
CANARY_CHOICES = ("node", "edge", "auto")


def _eps_value(epsilon) -> float:
    from dpaudit.accounting.spec import validate_epsilon

    return validate_epsilon(epsilon)


def epsilon_json(epsilon: float) -> float | None:
    """ε as JSON stores it.

    Args:
        epsilon: a non-negative ε, possibly infinite.

    Returns:
        ``None`` for ∞, else the float.
    """
    return None if math.isinf(epsilon) else float(epsilon)


def _canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str, allow_nan=False)


def content_hash(payload: Any, length: int = 10) -> str:
    """A short SHA-256 digest of ``payload``'s canonical JSON form.

    Args:
        payload: JSON-like data.
        length: hex digits kept.

    Returns:
        The hex digest prefix.
    """
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:length]


# --------------------------------------------------------------------------- configuration


@dataclass
class StudyConfig:
    """What a study computes.

    Attributes:
        dataset: a dataset name (see :func:`dpaudit.data.datasets.load_dataset`), or ``"study:dataset"``
            for a dataset saved in the study folder (set by :meth:`Study.__init__` when given a
            :class:`~dpaudit.data.datasets.GraphDataset`).
        defenses: registered defense names. Non-private defenses (unit ``None``) run at ε = ∞ only.
        epsilons: target ε values (``math.inf`` / ``"inf"`` for no privacy).
        seeds: training seeds; each (defense, ε) runs once per seed.
        attacks: attack names; ``None`` means every available attack.
        dataset_options: keyword arguments of :func:`~dpaudit.data.datasets.load_dataset` (e.g. csbm's
            ``num_nodes``).
        split: split specification (None: the dataset's default).
        delta: δ, or ``"auto"``.
        overrides: defense name → hyperparameter overrides.
        attack_settings: attack name → settings (see :func:`attacks.attack_settings`). ``seed``
            defaults to the cell's seed, ``device`` and ``data_root`` to the study's.
        device: ``auto``, ``cpu`` or ``cuda``.
        data_root: folder of real datasets (never written).
        title: report title.
        canaries: canary audits each cell also runs (``"node"``, ``"edge"``; see
            :mod:`dpaudit.app.workflows.canary`): one extra training with canaries per kind;
            ``"auto"``: the audit each private cell's claim needs to be refutable
            (:func:`dpaudit.app.workflows.audit.refute.plan_refuting_audit`), re-tested against
            the cell's model as the report's canary evidence.
        canary_count: canaries per canary audit.
        modules: Python modules every worker imports before its cell (modules that register
            defenses, e.g. the demo's broken-mechanism zoo, :mod:`dpaudit.app.workflows.zoo`).
    """

    dataset: str
    defenses: list[str]
    epsilons: list[float]
    seeds: list[int] = field(default_factory=lambda: [0])
    attacks: list[str] | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)
    split: str | None = None
    delta: float | str = "auto"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    attack_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "auto"
    data_root: str | None = None
    title: str | None = None
    canaries: list[str] = field(default_factory=list)
    canary_count: int = 200
    modules: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not self.defenses:
            raise ConfigurationError("a study needs at least one defense")
        if not self.epsilons:
            raise ConfigurationError("a study needs at least one epsilon")
        self.epsilons = [_eps_value(e) for e in self.epsilons]
        from dpaudit.seeds import SEED_LIMIT, check_seed

        if isinstance(self.seeds, int):
            if not 1 <= self.seeds <= SEED_LIMIT:
                raise ConfigurationError(f"seeds must be >= 1 (seeds 0..N-1, each below 2**31), got {self.seeds}")
            self.seeds = list(range(self.seeds))
        self.seeds = [check_seed(s, "seed") for s in self.seeds]
        if not self.seeds:
            raise ConfigurationError("a study needs at least one seed")
        self.defenses = list(dict.fromkeys(self.defenses))
        if self.attacks is not None:
            self.attacks = list(dict.fromkeys(self.attacks))
        self.canaries = list(dict.fromkeys(self.canaries or []))
        bad = [k for k in self.canaries if k not in CANARY_CHOICES]
        if bad:
            raise ConfigurationError(f"canaries must be {', '.join(CANARY_CHOICES)}, got {bad}")
        self.modules = list(dict.fromkeys(self.modules or []))
        # a study file is data: it may name dpaudit's own modules only, never code from elsewhere
        if not all(
            isinstance(m, str) and m.startswith("dpaudit.") and all(p.isidentifier() for p in m.split("."))
            for m in self.modules
        ):
            raise ConfigurationError(f"modules must be dotted names of dpaudit modules, got {self.modules}")
        if isinstance(self.canary_count, bool) or not isinstance(self.canary_count, int) or self.canary_count < 2:
            raise ConfigurationError(f"canary_count must be an integer >= 2, got {self.canary_count!r}")

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON data (∞ as ``None``; empty canary and module fields left out, so
        that older studies keep their hash).
        """
        out = asdict(self)
        out["epsilons"] = [epsilon_json(e) for e in self.epsilons]
        if not self.canaries:  # studies without canary audits keep their configuration hash
            out.pop("canaries")
            out.pop("canary_count")
        if not self.modules:  # as do studies that import nothing
            out.pop("modules")
        return out

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> StudyConfig:
        """Args:
            payload: what :meth:`to_dict` wrote; unknown keys are ignored.

        Returns:
            The configuration.
        """
        data = dict(payload)
        data["epsilons"] = [math.inf if e is None else e for e in data.get("epsilons", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def validate_config(config: StudyConfig, dataset=None) -> StudyConfig:
    """Resolve and check names, overrides and attack settings up front (before any training);
    with the study's ``dataset``, also every defense's widths against the device's memory
    (:func:`dpaudit.training.defense.check_hyperparameter_ranges`), as ``train`` does.

    Args:
        config: the study's configuration.
        dataset: the loaded dataset; ``None`` skips the memory checks.

    Returns:
        The configuration, resolved.

    Raises:
        ConfigurationError: an unknown name, override or setting.
    """
    import attacks as attack_registry
    from dpaudit.runtime import device_memory, resolve_device
    from dpaudit.training.defense import check_hyperparameter_ranges
    from dpaudit.training.registry import get_defense

    # the memory the cells will train in, as far as this machine can tell (a device it lacks,
    # e.g. cuda on a Ray coordinator without one, leaves the check to the cells themselves)
    memory = None
    if dataset is not None:
        try:
            memory = device_memory(resolve_device(config.device))
        except DPAuditError:
            memory = None
    if dataset is not None:
        # the split's spec and sizes, as `train` checks them: a bad split is one line before the
        # study folder exists, never a failed cell per seed (sizes do not depend on the seed)
        from dpaudit.data.splits import make_split

        make_split(dataset, config.split, (config.seeds or [0])[0])
    for defense in config.defenses:
        cls = get_defense(defense)
        overrides = config.overrides.get(defense) or {}
        known = {f.name for f in dataclasses.fields(cls.hyperparameters_class)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigurationError(f"{defense}: unknown hyperparameters {sorted(unknown)}; known: {sorted(known)}")
        probe = cls(epsilon=math.inf, delta=config.delta, device="cpu", **overrides)  # ranges and protocol
        if memory is not None:
            check_hyperparameter_ranges(defense, probe.hp, (dataset.num_nodes, dataset.num_features), memory)
    extra = set(config.overrides) - set(config.defenses)
    if extra:
        raise ConfigurationError(f"overrides given for defenses not in the study: {sorted(extra)}")
    if config.attacks is None:
        config.attacks = attack_registry.available_attacks()
    for name in config.attacks:
        attack_registry.get_attack(name)
    for name, settings in config.attack_settings.items():
        if name not in config.attacks:
            raise ConfigurationError(f"settings given for attack {name!r}, which is not in the study")
        known = attack_registry.attack_settings(name)
        unknown = set(settings) - set(known)
        if unknown:
            raise ConfigurationError(f"attack {name!r}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
    return config


@dataclass(frozen=True)
class Cell:
    """One (defense, ε, seed) cell of a study.

    Attributes:
        defense: the defense's name.
        epsilon: the target ε (∞ for a non-private defense).
        seed: the seed.
        cell_id: the cell's stable identifier.
        config_hash: hash of the configuration the cell belongs to.
    """

    defense: str
    epsilon: float
    seed: int
    cell_id: str
    config_hash: str


def grid(config: StudyConfig, dataset_fingerprint: str) -> list[Cell]:
    """Every cell of the study, in a stable order (defense, ε, seed).

    Args:
        config: the study's configuration.
        dataset_fingerprint: the dataset's fingerprint (part of each cell's identity).

    Returns:
        The cells.
    """
    from dpaudit.training.registry import get_defense

    cells = []
    for defense in config.defenses:
        private = get_defense(defense).unit is not None
        epsilons = sorted(set(config.epsilons)) if private else [math.inf]
        for eps in epsilons:
            for seed in config.seeds:
                identity = {
                    "dataset": config.dataset,
                    "dataset_options": config.dataset_options,
                    "fingerprint": dataset_fingerprint,
                    "split": config.split,
                    "delta": str(config.delta),
                    "defense": defense,
                    "epsilon": epsilon_json(eps),
                    "seed": seed,
                    "overrides": config.overrides.get(defense) or {},
                    "attacks": sorted(config.attacks or []),
                    "attack_settings": {a: config.attack_settings.get(a) or {} for a in sorted(config.attacks or [])},
                }
                if config.canaries:
                    identity["canaries"] = {"kinds": sorted(config.canaries), "count": config.canary_count}
                digest = content_hash(identity)
                label = "inf" if math.isinf(eps) else f"{eps:g}"
                cells.append(Cell(defense, eps, seed, f"{_slug(defense)}_eps-{label}_seed-{seed}_{digest}", digest))
    return cells


def dataset_summary(dataset) -> dict[str, Any]:
    """What a report says about a dataset.

    Args:
        dataset: a loaded dataset.

    Returns:
        Name, fingerprint, node, edge, class and feature counts, and its info.
    """
    return {
        "name": dataset.name,
        "fingerprint": dataset.fingerprint,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_classes": dataset.num_classes,
        "num_features": dataset.num_features,
        "info": dataset.info,
    }


def parse_list(text: str | Iterable, what: str) -> list[str]:
    """Args:
        text: a comma-separated string or an iterable.
        what: the option named in the message.

    Returns:
        The stripped, non-empty items.

    Raises:
        ConfigurationError: no item.
    """
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if str(t).strip()]
    if not items:
        raise ConfigurationError(f"{what} must name at least one value")
    return items
