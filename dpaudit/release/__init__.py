"""The released-model format: what a third party receives and what stays the owner's record, loading with integrity checks, provenance, and what ε covers per deployment.

:mod:`dpaudit.release.files` is the file format (re-exported here, its old path)."""

from dpaudit.release.files import (  # noqa: F401  (the file format, at its old path)
    METRICS_FILE,
    OWNER_FILES,
    PRIVATE_CONFIG_NAMES,
    PRIVATE_LEAF_NAMES,
    PUBLIC_CARD_KEYS,
    PUBLIC_DATASET_KEYS,
    PUBLIC_FILES,
    PUBLIC_SPLIT_KEYS,
    RECORD_FILE,
    PublicCardError,
    check_public_card,
    check_public_config,
    declared_facts,
    declared_population,
    declared_train_size,
    require_declared,
)
