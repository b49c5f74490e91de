"""The composition layer: dataset → defense → released model → attacks → results → report.

Only the command line (:mod:`dpaudit.app.cli`) and the Python entry points (``dpaudit.audit``,
``dpaudit.compare``, ``dpaudit.report``) use this package; the core (datasets, splits,
accounting, model format), ``defenses``, ``attacks`` and ``reports`` never import it.

- :mod:`~dpaudit.app.workflows.audit`: audit one released model (plan, progress, per-node risk);
- :mod:`~dpaudit.app.workflows.compare`: compare defenses on a grid and render a study's report;
- :mod:`~dpaudit.app.workflows.study`: the resumable study (:class:`Study`, :class:`StudyResult`);
- :mod:`~dpaudit.app.workflows.config`: what a study computes (:class:`StudyConfig`, the grid);
- :mod:`~dpaudit.app.workflows.store`: the study folder on disk;
- :mod:`~dpaudit.app.workflows.cell` and :mod:`~dpaudit.app.workflows.executors`: one cell in a
  worker, and the local / Ray executors that run them.
"""

from dpaudit.app.workflows.audit import AuditResult, audit, audit_plan, format_plan
from dpaudit.app.workflows.compare import compare, report
from dpaudit.app.workflows.config import StudyConfig
from dpaudit.app.workflows.study import Study, StudyResult

__all__ = [
    "AuditResult",
    "Study",
    "StudyConfig",
    "StudyResult",
    "audit",
    "audit_plan",
    "compare",
    "format_plan",
    "report",
]
