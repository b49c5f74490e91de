"""White-box audits of training code that is not a dpaudit defense: your own Opacus script or
DP-SGD loop (:class:`GradientCanaries`).

The layer above :mod:`dpaudit.auditing` and :mod:`dpaudit.training`, which never meet: it joins
the insertion the guarantee rests on (:class:`dpaudit.training.dpsgd.DiracCanaries`) with the
design, the scores and the verdict (:mod:`dpaudit.auditing.gradient_canary`).
"""

from dpaudit.whitebox.gradient_canaries import GradientCanaries

__all__ = ["GradientCanaries"]
