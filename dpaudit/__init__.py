"""dpaudit: train differentially private GNNs, attack them, and report what they leak.

``dpaudit.audit``, ``dpaudit.compare`` and ``dpaudit.report`` (see :mod:`dpaudit.workflows`)
are imported lazily, so ``import dpaudit`` stays light (no torch until a workflow runs).
"""

__version__ = "0.1.0"

_LAZY = {"audit": "dpaudit.workflows", "compare": "dpaudit.workflows", "report": "dpaudit.workflows"}

__all__ = ["__version__", "audit", "compare", "report"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
