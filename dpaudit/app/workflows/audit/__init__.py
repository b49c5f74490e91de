"""Audit one released model: the plan, progress, per-node risk, canary evidence and the audit result.

>>> import dpaudit
>>> report = dpaudit.audit("runs/gcn", attacks=["mia-threshold"])        # doctest: +SKIP
>>> report.to_html("audit.html")                                        # doctest: +SKIP

An audit is a one-cell study: the same report (:mod:`reports`) as a comparison. One concern per
module, every public name re-exported here:

==============  ===========================================================================
module          holds
==============  ===========================================================================
``plan``        the plan before any work: attack order, settings, the cost model and its
                calibration on the model, the long-run refusal, the plan's text
``queries``     a query-charged model's queries: releases per step, the query-API finding
``progress``    the progress bar with its ETA, attacks run interruptibly (Ctrl-C)
``risk``        per-node membership risk
``canaries``    canary results checked against the model's claim and re-tested against it
``result``      :class:`AuditResult`: the study cell record, the report, the train command
``run``         :func:`audit` itself, in named steps
``formatting``  durations, slugs, floats
==============  ===========================================================================

Patch a name where it is looked up: its module (``dpaudit.app.workflows.audit.plan.LONG_RUN_SECONDS``),
not this package.
"""

from dpaudit.app.workflows.audit.canaries import canary_evidence, check_canary_results
from dpaudit.app.workflows.audit.formatting import format_float, format_seconds, slug_name
from dpaudit.app.workflows.audit.plan import (
    LONG_RUN_SECONDS,
    QUICK_COMMON,
    TRIAL_FRACTION,
    audit_plan,
    calibrate,
    check_plan_duration,
    format_plan,
    order_attacks,
)
from dpaudit.app.workflows.audit.queries import charges_queries, query_api_finding, query_plan, query_plan_line
from dpaudit.app.workflows.audit.result import AuditResult, train_command
from dpaudit.app.workflows.audit.risk import NODE_RISK_FPR, node_risk
from dpaudit.app.workflows.audit.run import audit

__all__ = [
    "LONG_RUN_SECONDS",
    "NODE_RISK_FPR",
    "QUICK_COMMON",
    "TRIAL_FRACTION",
    "AuditResult",
    "audit",
    "audit_plan",
    "calibrate",
    "canary_evidence",
    "charges_queries",
    "check_canary_results",
    "check_plan_duration",
    "format_float",
    "format_plan",
    "format_seconds",
    "node_risk",
    "order_attacks",
    "query_api_finding",
    "query_plan",
    "query_plan_line",
    "slug_name",
    "train_command",
]
