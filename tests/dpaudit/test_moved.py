"""The flat paths of earlier releases (:data:`dpaudit.MOVED`) import as the very module objects
at their new paths, a moved package's submodules included: one module, so registries, context
variables and monkeypatches are shared."""

import importlib

import pytest


@pytest.mark.parametrize(
    "old, new",
    [
        ("dpaudit.datasets", "dpaudit.data.datasets"),
        ("dpaudit.datasets.loading", "dpaudit.data.datasets.loading"),
        ("dpaudit.dpsgd", "dpaudit.training.dpsgd"),
        ("dpaudit.dpsgd.canaries", "dpaudit.training.dpsgd.canaries"),
        ("dpaudit.registry", "dpaudit.training.registry"),
    ],
)
def test_an_old_path_is_the_module_at_its_new_path(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_the_canary_context_is_one_object_through_either_path():
    from dpaudit.dpsgd import inserting_canaries

    from dpaudit.training.dpsgd.canaries import _ACTIVE_CANARIES

    assert importlib.import_module("dpaudit.dpsgd.canaries")._ACTIVE_CANARIES is _ACTIVE_CANARIES
    assert inserting_canaries is importlib.import_module("dpaudit.training.dpsgd").inserting_canaries
