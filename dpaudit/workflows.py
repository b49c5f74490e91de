"""The two front-door workflows: audit one released model, or compare defenses on a grid.

>>> import dpaudit
>>> report = dpaudit.audit("runs/gcn", attacks=["mia-threshold"])        # doctest: +SKIP
>>> report.to_html("audit.html")                                        # doctest: +SKIP
>>> study = dpaudit.compare("csbm", ["mlp-dp", "gcn"], [1, 4, "inf"])    # doctest: +SKIP
>>> study.to_html("compare.html")                                       # doctest: +SKIP

Both produce the same kind of report (:mod:`reports`): an audit is a one-cell study.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.study import (
    CELL_SCHEMA,
    CELL_SCHEMA_VERSION,
    Study,
    StudyConfig,
    StudyResult,
    _hash,
    _now,
    dataset_summary,
)


class AuditResult:
    """Every attack run against one released model.

    Attributes:
        model: the audited :class:`~dpaudit.model.ReleasedModel`.
        dataset: the dataset the attacks ran on.
        results: attack name → :class:`~dpaudit.results.AttackResult`.
        errors: attack name → why it could not run on this model.
        seconds: attack name → wall-clock seconds.
    """

    def __init__(self, model, dataset, results: dict, errors: dict, seconds: dict, metrics: dict, command=None):
        self.model = model
        self.dataset = dataset
        self.results = results
        self.errors = errors
        self.seconds = seconds
        self.metrics = metrics
        self.command = command

    def record(self, with_artifacts: bool = True) -> dict[str, Any]:
        """The audit as one study cell record (see :mod:`dpaudit.study`)."""
        card = self.model.card
        privacy = self.model.privacy
        target = card.get("target_epsilon")
        attacks = {}
        for name, res in self.results.items():
            d = res.to_dict()
            if not with_artifacts:
                d.pop("artifacts", None)
            attacks[name] = d
        return {
            "schema": CELL_SCHEMA,
            "version": CELL_SCHEMA_VERSION,
            "cell_id": f"audit-{_hash({'card': card, 'privacy': privacy.to_dict()})}",
            "config_hash": None,
            "status": "done",
            "defense": str(card.get("method") or self.model.kind),
            "epsilon": target if target is not None else (privacy.epsilon if privacy.is_private else None),
            "seed": int(card.get("seed", 0) or 0),
            "dataset": {k: v for k, v in dataset_summary(self.dataset).items() if k != "info"},
            "split": card.get("split"),
            "privacy": privacy.to_dict(),
            "metrics": self.metrics,
            "card": {k: card.get(k) for k in ("method", "hyperparameters", "inference", "target_epsilon", "device")},
            "overrides": card.get("overrides") or {},
            "attacks": attacks,
            "attack_errors": dict(self.errors),
            "attack_seconds": dict(self.seconds),
            "error": None,
            "seconds": sum(self.seconds.values()),
            "started_at": None,
            "finished_at": _now(),
            "run_id": None,
            "worker": None,
        }

    def report_meta(self) -> dict[str, Any]:
        from dpaudit import __version__
        from dpaudit.runtime import library_versions

        card = self.model.card
        return {
            "title": f"dpaudit audit of {card.get('method') or self.model.kind} on {self.dataset.name}",
            "kind": "audit",
            "dataset": dataset_summary(self.dataset),
            "defenses": [str(card.get("method") or self.model.kind)],
            "attacks": list(self.results) + list(self.errors),
            "reproducibility": {
                "dpaudit_version": __version__,
                "config_hash": self.record(with_artifacts=False)["cell_id"],
                "dataset_fingerprint": self.dataset.fingerprint,
                "seeds": [card.get("seed")],
                "split": (card.get("split") or {}).get("spec"),
                "delta": self.model.privacy.delta,
                "created": _now(),
                "command": self.command,
                "versions": card.get("library_versions") or library_versions(),
                "config": {"model_card": {k: v for k, v in card.items() if k not in ("library_versions",)},
                           "attack_settings": {n: r.settings for n, r in self.results.items()}},
            },
        }  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return self.record(with_artifacts=False)

    def to_html(self, path: str | Path) -> Path:
        """Write the HTML report and its JSON sidecar (``.json`` next to it)."""
        from reports.render import write_report

        html, _ = write_report([self.record()], self.report_meta(), path)
        return html

    def __repr__(self) -> str:
        aucs = ", ".join(f"{n}: AUC {r.auc:.3f}" for n, r in self.results.items() if r.auc is not None)
        return f"AuditResult({self.model.method}, {aucs or 'no result'}{', errors: ' + str(len(self.errors)) if self.errors else ''})"


def audit(
    model,
    dataset=None,
    attacks: list[str] | str | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    data_root: str | None = None,
    device: str = "auto",
    command: str | None = None,
    **common: Any,
) -> AuditResult:
    """Run every applicable attack (or ``attacks``) against ``model`` (a ReleasedModel or its folder).

    ``dataset`` defaults to the one named in the model card (its fingerprint is checked).
    Settings: ``settings={"mia-tstf": {"runs": 2}}`` per attack; any other keyword (e.g.
    ``runs=2``) goes to every attack that accepts it. An attack that does not apply to the
    model (a :class:`~dpaudit.errors.DPAuditError`) is recorded in ``errors``; unknown attack
    names or settings raise :class:`~dpaudit.errors.ConfigurationError`.
    """
    import attacks as attack_registry
    from attacks._common import resolve_dataset, target_split
    from dpaudit.model import ReleasedModel, load
    from dpaudit.pipeline import evaluate

    if isinstance(model, (str, Path)):
        model = load(model)
    if not isinstance(model, ReleasedModel):
        raise DPAuditError("audit expects a dpaudit ReleasedModel or the folder of a saved one")
    if isinstance(dataset, str):
        from dpaudit.datasets import load_dataset

        params = ((model.card.get("dataset") or {}).get("info") or {}).get("parameters") or {}
        dataset = load_dataset(dataset, root=data_root, **(params if dataset == "csbm" else {}))
    dataset = resolve_dataset(model, dataset, data_root)
    names = attacks.split(",") if isinstance(attacks, str) else list(attacks or attack_registry.available_attacks())
    names = [n.strip() for n in names if n.strip()]
    settings = {k: dict(v) for k, v in (settings or {}).items()}
    for name in names:
        attack_registry.get_attack(name)
    for name in settings:
        if name not in names:
            raise ConfigurationError(f"settings given for attack {name!r}, which is not being run")
    plans = {}
    for name in names:
        known = attack_registry.attack_settings(name)
        plan = {k: v for k, v in common.items() if k in known}
        defaults = {"device": device, "data_root": data_root}
        plan.update({k: v for k, v in defaults.items() if k in known and v is not None and k not in plan})
        plan.update(settings.get(name, {}))
        plans[name] = plan
    unused = set(common) - {k for name in names for k in attack_registry.attack_settings(name)}
    if unused:
        raise ConfigurationError(f"no attack accepts the settings {sorted(unused)}")
    try:
        split = target_split(model, dataset)
        metrics = {**evaluate(model, dataset, split), "n_train": len(split.train), "n_val": len(split.val),
                   "n_test": len(split.test)}  # fmt: skip
    except DPAuditError:
        metrics = {}
    results, errors, seconds = {}, {}, {}
    for name in names:
        start = time.perf_counter()
        try:
            results[name] = attack_registry.run(name, model, dataset, **plans[name])
        except ConfigurationError:
            raise
        except DPAuditError as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
        seconds[name] = time.perf_counter() - start
    return AuditResult(model, dataset, results, errors, seconds, metrics, command=command)


def compare(
    dataset,
    defenses: list[str] | str,
    epsilons: list[float | str] | str,
    seeds: int | list[int] = 1,
    attacks: list[str] | str | None = None,
    jobs: int = 1,
    executor: str = "local",
    out: str | Path | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    attack_settings: dict[str, dict[str, Any]] | None = None,
    split: str | None = None,
    delta: float | str = "auto",
    device: str = "auto",
    data_root: str | None = None,
    dataset_options: dict[str, Any] | None = None,
    title: str | None = None,
    progress: bool | None = None,
    retry_failed: bool = True,
    command: str | None = None,
) -> StudyResult:
    """Train every defense at every ε and seed, attack each model, and collect the results.

    ``dataset`` is a name (``"csbm"``, ``"cora"``, ...) or a
    :class:`~dpaudit.datasets.GraphDataset`. ``seeds`` is a count (seeds 0..n-1) or a list.
    ``out`` is the study folder (default ``studies/<hash of the configuration>``): rerunning
    the same call resumes it (see :mod:`dpaudit.study`). Returns a
    :class:`~dpaudit.study.StudyResult` (``.records``, ``.table()``, ``.to_html(path)``).
    """
    from dpaudit.datasets import GraphDataset

    split_list = lambda v: [t.strip() for t in v.split(",") if t.strip()] if isinstance(v, str) else list(v)  # noqa: E731
    given = dataset if isinstance(dataset, GraphDataset) else None
    name = dataset.name if given is not None else str(dataset)
    config = StudyConfig(
        dataset=name,
        defenses=split_list(defenses),
        epsilons=split_list(epsilons),
        seeds=seeds,
        attacks=None if attacks is None else split_list(attacks),
        dataset_options=dict(dataset_options or {}),
        split=split,
        delta=delta,
        overrides={k: dict(v) for k, v in (overrides or {}).items()},
        attack_settings={k: dict(v) for k, v in (attack_settings or {}).items()},
        device=device,
        data_root=None if data_root is None else str(data_root),
        title=title,
    )
    if out is None:
        ident = config.to_dict()
        if given is not None:
            ident["fingerprint"] = given.fingerprint
        out = Path("studies") / f"{_slug_name(name)}-{_hash(ident, 12)}"
    if command is None:
        command = "python: dpaudit.compare(...) from " + shlex.join(sys.argv[:1] or ["python"])
    study = Study(config, out, dataset=given, command=command)
    return study.run(jobs=jobs, executor=executor, progress=progress, retry_failed=retry_failed)


def report(study_dir: str | Path, out: str | Path | None = None) -> Path:
    """Re-render a study's report from its saved results (no retraining)."""
    return StudyResult.load(study_dir).to_html(out)


def _slug_name(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-")[:30] or "dataset"


def format_float(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3f}"
    return str(value)
