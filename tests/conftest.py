"""Shared fixtures: real datasets copied from ../shared/datasets into a temp dir (once per
session, so the shared folder is never written), and a small synthetic graph."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from dpaudit.data.datasets import csbm, load_dataset
from dpaudit.training.noise import NOISE_ENV, SEEDED

# the test helpers (neighbours, editing, contract) import by name from every test folder
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """A writable copy of ../shared/datasets (skips when it is absent)."""
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not found at {SHARED}")
    root = tmp_path_factory.mktemp("datasets")
    for entry in SHARED.iterdir():
        if entry.is_dir():
            shutil.copytree(entry, root / entry.name)
    return root


@pytest.fixture(scope="session", autouse=True)
def _seeded_noise():
    """The test suite asks for **seeded** privacy noise, explicitly: ``DPAUDIT_NOISE=seeded``
    (:data:`dpaudit.training.noise.NOISE_ENV`), so a test's runs are reproducible from its seed
    and neighbour-diff tests compare D and D′ on the same noise. It is read only by defenses
    given no ``noise`` argument (and inherited by the CLI's subprocesses); the models are carded
    ``"noise": "seeded"`` (not a release). Outside the tests the default is OS-entropy noise;
    tests of that default pass ``noise="secure"`` or unset the variable themselves
    (``monkeypatch.delenv``)."""
    old = os.environ.get(NOISE_ENV)
    os.environ[NOISE_ENV] = SEEDED
    yield
    if old is None:
        os.environ.pop(NOISE_ENV, None)
    else:
        os.environ[NOISE_ENV] = old


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Processed datasets go to a per-session cache, never into the user's home."""
    old = os.environ.get("DPAUDIT_CACHE")
    os.environ["DPAUDIT_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("DPAUDIT_CACHE", None)
    else:
        os.environ["DPAUDIT_CACHE"] = old


@pytest.fixture(scope="session")
def load_real(data_root):
    """``load_real(name)`` loads a real dataset from the session copy (cached per name)."""
    cache = {}

    def _load(name: str, **kwargs):
        key = (name, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = load_dataset(name, root=data_root, **kwargs)
        return cache[key]

    return _load


@pytest.fixture(scope="session")
def small_graph():
    """A 300-node CSBM graph: fast enough for every defense and attack test."""
    return csbm(num_nodes=300, num_classes=3, num_features=16, avg_degree=6, homophily=0.85, feature_signal=0.8, seed=1)
