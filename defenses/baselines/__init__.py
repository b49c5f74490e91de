"""Baselines: the non-private ``gcn``, ``sage`` and ``mlp`` (:mod:`defenses.baselines.nonprivate`)
and the node-level private ``mlp-dp`` (:mod:`defenses.baselines.mlp_dp`). Importing this package
registers all four with :mod:`dpaudit.training.registry` and re-exports their public names.

A name is looked up in the module that defines it: to replace a function an ``mlp-dp`` fit calls
(``train_mlp_dp``, ``train_dp_sgd``, ``noise_for_plan``), patch :mod:`defenses.baselines.mlp_dp`.
This package does not re-export those three, so patching them here fails loudly instead of
silently leaving the fit unchanged."""

from defenses.baselines.mlp_dp import (
    BEST_VAL_STEP,
    CHECKPOINTS,
    MLPDP,
    PRESETS,
    SMALL_TRAINING_SET,
    MLPDPHyperparameters,
    MLPDPPlan,
    auto_configuration,
    resolve_mlp_dp,
)
from defenses.baselines.nonprivate import (
    GCN,
    GRIDS,
    HELD_OUT_FRACTION,
    HELD_OUT_RULE,
    NON_PRIVATE_CARD,
    SELECT_CHOICES,
    SPLIT_VALIDATION_RULE,
    BaselineModel,
    BatchingHyperparameters,
    FeatureMLP,
    GNNHyperparameters,
    GraphSAGE,
    KipfGCN,
    KipfGCNHyperparameters,
    MLPBaseline,
    MLPHyperparameters,
    build_baseline_architecture,
    defense_from_card,
    grid_candidates,
    held_out_split,
    row_normalize,
)

__all__ = [
    "BEST_VAL_STEP",
    "CHECKPOINTS",
    "GCN",
    "GRIDS",
    "HELD_OUT_FRACTION",
    "HELD_OUT_RULE",
    "MLPDP",
    "NON_PRIVATE_CARD",
    "PRESETS",
    "SELECT_CHOICES",
    "SMALL_TRAINING_SET",
    "SPLIT_VALIDATION_RULE",
    "BaselineModel",
    "BatchingHyperparameters",
    "FeatureMLP",
    "GNNHyperparameters",
    "GraphSAGE",
    "KipfGCN",
    "KipfGCNHyperparameters",
    "MLPBaseline",
    "MLPDPHyperparameters",
    "MLPDPPlan",
    "MLPHyperparameters",
    "auto_configuration",
    "build_baseline_architecture",
    "defense_from_card",
    "grid_candidates",
    "held_out_split",
    "resolve_mlp_dp",
    "row_normalize",
]
