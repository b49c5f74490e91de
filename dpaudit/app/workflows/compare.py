"""Compare defenses on a grid (a :class:`~dpaudit.app.workflows.study.Study`) and render a study's report.

>>> import dpaudit
>>> study = dpaudit.compare("csbm", ["mlp-dp", "gcn"], [1, 4, "inf"])    # doctest: +SKIP
>>> study.to_html("compare.html")                                       # doctest: +SKIP
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from dpaudit.app.workflows.audit import slug_name
from dpaudit.app.workflows.config import StudyConfig, content_hash
from dpaudit.app.workflows.study import Study, StudyResult

log = logging.getLogger(__name__)


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
    :class:`~dpaudit.data.datasets.GraphDataset`. ``seeds`` is a count (seeds 0..n-1) or a list.
    ``out`` is the study folder (default ``studies/<hash of the configuration>``): rerunning
    the same call resumes it (see :mod:`dpaudit.app.workflows.study`). Returns a
    :class:`~dpaudit.app.workflows.study.StudyResult` (``.records``, ``.table()``, ``.to_html(path)``).

    Args:
        dataset: a dataset name or a loaded :class:`~dpaudit.data.datasets.GraphDataset`.
        defenses: defense names (a list or a comma-separated string).
        epsilons: target ε values (``"inf"`` allowed).
        seeds: a count or a list of seeds.
        attacks: attack names; ``None``: every attack.
        jobs: cells run at once.
        executor: ``"local"`` or ``"ray"``.
        out: the study folder.
        overrides: per-defense hyperparameter overrides.
        attack_settings: per-attack settings.
        split: the split spec; ``None``: the default.
        delta: δ, or ``"auto"``.
        device: torch device.
        data_root: where to find the dataset.
        dataset_options: options of :func:`~dpaudit.data.datasets.load_dataset`.
        title: the report's title.
        progress: show a progress bar; ``None``: when stderr is a terminal.
        retry_failed: rerun cells that failed in an earlier run.
        command: the command that made the study (recorded).

    Raises:
        ConfigurationError: invalid names, settings or options, before any training.
    """
    from dpaudit.data.datasets import GraphDataset

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
        out = Path("studies") / f"{slug_name(name)}-{content_hash(ident, 12)}"
    if command is None:
        command = "python: dpaudit.compare(...) from " + shlex.join(sys.argv[:1] or ["python"])
    study = Study(config, out, dataset=given, command=command)
    return study.run(jobs=jobs, executor=executor, progress=progress, retry_failed=retry_failed)


def report(study_dir: str | Path, out: str | Path | None = None) -> Path:
    """Re-render a study's report from its saved results (no retraining).

    Args:
        study_dir: the study folder.
        out: the HTML path; ``None``: ``STUDY_DIR/report.html``.

    Returns:
        The report's path.
    """
    return StudyResult.load(study_dir).to_html(out)
