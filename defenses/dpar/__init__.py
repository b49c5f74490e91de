"""DPAR: decoupled GNN with node-level DP through DP approximate personalized PageRank.

The defense classes, their hyperparameters and the fit live in :mod:`defenses.dpar.defense`
(its docstring is the method, the theorem and where the paper is loose); this package
re-exports them, and importing it registers them with :mod:`dpaudit.training.registry`.
"""

from defenses.dpar.defense import *  # noqa: F401,F403
from defenses.dpar.defense import __all__  # noqa: F401
