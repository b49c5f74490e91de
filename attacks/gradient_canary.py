"""White-box Dirac gradient canaries for DP-SGD, as the attack family's module: the design, the
coins and the scores live in the core, :mod:`dpaudit.auditing.gradient_canary` (one home, shared
by the defenses' workflow and :class:`dpaudit.whitebox.GradientCanaries` for any DP-SGD loop);
this module names them where the other attacks are found."""

from dpaudit.auditing.gradient_canary import (
    OBSERVATIONS,
    SCORE_NAMES,
    DiracDesign,
    column_usage,
    fair_coins,
    input_layer,
    input_weight,
    sampling_rate_seen,
    sampling_seed,
    scores,
    summarise_game,
)

__all__ = [
    "OBSERVATIONS",
    "SCORE_NAMES",
    "DiracDesign",
    "column_usage",
    "fair_coins",
    "input_layer",
    "input_weight",
    "sampling_rate_seen",
    "sampling_seed",
    "scores",
    "summarise_game",
]
