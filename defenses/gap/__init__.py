"""GAP: GNN with Aggregation Perturbation (Sajadmanesh et al., USENIX Security 2023).

The defense classes, their hyperparameters and the fit live in :mod:`defenses.gap.defense`
(its docstring is the method, the theorem and where the paper is loose); this package
re-exports them, and importing it registers them with :mod:`dpaudit.training.registry`.
"""

from defenses.gap.defense import *  # noqa: F401,F403
from defenses.gap.defense import __all__  # noqa: F401
