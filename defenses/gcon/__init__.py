"""GCON: edge-level DP graph convolution by objective perturbation (Wei et al., Algorithm 1).

The defense classes, their hyperparameters and the fit live in :mod:`defenses.gcon.defense`
(its docstring is the method, the theorem and where the paper is loose); this package
re-exports them, and importing it registers them with :mod:`dpaudit.training.registry`.
"""

from defenses.gcon.defense import *  # noqa: F401,F403
from defenses.gcon.defense import __all__  # noqa: F401
