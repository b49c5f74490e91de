"""DP-GNN: node-level DP-SGD / DP-Adam for r-layer GCNs with bounded node occurrences.

The defense classes, their hyperparameters and the fit live in :mod:`defenses.dpgnn.defense`
(its docstring is the method, the theorem and where the paper is loose); this package
re-exports them, and importing it registers them with :mod:`dpaudit.training.registry`.
"""

from defenses.dpgnn.defense import *  # noqa: F401,F403
from defenses.dpgnn.defense import __all__  # noqa: F401
