"""dpaudit: train differentially private GNNs, attack them, and report what they leak.

The core is layered; every import points down:

* :mod:`dpaudit.accounting` — mechanisms, accountants, ε → σ;
* :mod:`dpaudit.data` — graphs, graph files, splits, adjacency;
* :mod:`dpaudit.release` — the released-model format, integrity, provenance, deployments;
* :mod:`dpaudit.auditing` — audit statistics (ROC, intervals, ceilings, one-run and f-DP bounds);
* :mod:`dpaudit.training` — the Defense interface, its registry, DP-SGD, private selection;
* :mod:`dpaudit.whitebox` — white-box audits of your own training code (gradient canaries in an
  Opacus or hand-written DP-SGD loop): it joins auditing and training, which never meet;
* :mod:`dpaudit.app` — the composition layer (CLI, workflows): the only part of the core that
  imports ``defenses``, ``attacks`` and ``reports``; nothing in the core imports it.

``dpaudit.audit``, ``dpaudit.compare``, ``dpaudit.report`` (see :mod:`dpaudit.app.workflows`),
``dpaudit.canary_audit`` (:mod:`dpaudit.app.workflows.canary`: a defense's, or your own ``fit``
function's, canary audit), ``dpaudit.GradientCanaries`` (:mod:`dpaudit.whitebox`) and
``dpaudit.claim_from_opacus`` (:mod:`dpaudit.accounting.opacus_claims`) are imported lazily, so
``import dpaudit`` stays light (no torch until one is used).
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "audit": "dpaudit.app.workflows",
    "compare": "dpaudit.app.workflows",
    "report": "dpaudit.app.workflows",
    "canary_audit": "dpaudit.app.workflows.canary",
    "GradientCanaries": "dpaudit.whitebox",
    "claim_from_opacus": "dpaudit.accounting.opacus_claims",
}

__all__ = ["GradientCanaries", "__version__", "audit", "canary_audit", "claim_from_opacus", "compare", "report"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
