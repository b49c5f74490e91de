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

The flat module paths of earlier releases (``dpaudit.datasets``, ``dpaudit.model``,
``dpaudit.workflows``, ``dpaudit.cli`` …) still import, as aliases of their new modules, for
one release (:data:`MOVED`).
"""

import importlib
import importlib.abc
import importlib.util
import sys

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

#: old flat module → its layer (``dpaudit.datasets`` is now ``dpaudit.data.datasets``)
MOVED = {
    **dict.fromkeys(("datasets", "graph_files", "splits", "adjacency"), "data"),
    **dict.fromkeys(("model", "provenance", "deployments"), "release"),
    **dict.fromkeys(("defense", "registry", "adapters", "sampling", "private_selection", "dpsgd", "constraints"), "training"),
    **dict.fromkeys(
        ("statistics", "estimators", "fdp_one_run", "low_fpr", "canary_design", "results", "intervals"), "auditing"
    ),
    **dict.fromkeys(("cli", "commands", "workflows", "pipeline", "outputs", "names"), "app"),
}


def _new_name(fullname: str) -> str | None:
    parts = fullname.split(".")
    if len(parts) >= 2 and parts[0] == __name__ and parts[1] in MOVED:
        return ".".join([__name__, MOVED[parts[1]], *parts[1:]])
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``dpaudit.<old>`` as the very module object at its new path (one object, so
    registries and monkeypatches see one module). It sits first on ``sys.meta_path``: a moved
    package's submodule by its old path (``dpaudit.datasets.loading``) would otherwise be found
    by the path finder in the package's folder and run a second time, as another module."""

    def find_spec(self, fullname, path=None, target=None):
        if _new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(_new_name(spec.name))

    def exec_module(self, module):
        pass


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
