"""The defense contract (scikit-learn's ``parametrize_with_checks``): one test per (defense,
check) of :mod:`dpaudit.testing.checks`, over every registered defense
(:func:`dpaudit.testing.registered_defenses`: what the ``dpaudit.plugins`` entry points
register), so a new defense gets every check by registering.

``FAST`` holds each defense's fast settings on the 150-node graph (a few epochs, small
widths); a defense missing from it is checked with its defaults. Private defenses train at
ε = 4 with δ = 1e-3, non-private ones at ε = ∞. The parametrisations of defenses whose private
fit takes seconds (σ calibration, node sampling) are marked ``slow``.
"""

from __future__ import annotations

import pytest

from dpaudit.testing.checks import CHECKS, CheckSkipped, Subject, registered_defenses, tiny_graph

_DPAR = {"epochs": 2, "num_sources": 20, "batch_size": 20}
_GAP = {"encoder_epochs": 3, "epochs": 3, "hidden": 8}
FAST = {
    "mlp": {"epochs": 5, "hidden": 16},
    "gcn": {"epochs": 5},
    "sage": {"epochs": 5, "hidden": 16},
    "mlp-dp": {"epochs": 2, "batch_size": 32},
    "gap-inf": _GAP,
    "gap-edp": _GAP,
    "gap-ndp": {**_GAP, "encoder_epochs": 2, "epochs": 2, "max_degree": 20},
    "dpar-em0": _DPAR,
    "dpar-em1": _DPAR,
    "dpar-gm": _DPAR,
    "dpar-nodp": _DPAR,
    "gcon": {"encoder_epochs": 5},
    "dpgnn": {"steps": 3, "latent": 8, "batch_size": 40},
}
#: a split other than dpaudit.testing.checks.SPLIT, where a defense needs one
SPLITS: dict[str, str] = {}
SLOW = {"mlp-dp", "dpar-em0", "dpar-em1", "dpar-gm", "dpgnn"}


def _cases():
    for name in registered_defenses():
        marks = [pytest.mark.slow] if name in SLOW else []
        for check in CHECKS:
            yield pytest.param(name, check, id=f"{name}-{check.__name__.removeprefix('check_')}", marks=marks)


@pytest.fixture(scope="module")
def subject(tmp_path_factory):
    """``subject(name)``: the defense under test, made once per module (its seed-0 fit is shared)."""
    graph = tiny_graph()
    made: dict[str, Subject] = {}

    def make(name: str) -> Subject:
        if name not in made:
            root = tmp_path_factory.mktemp(f"contract-{name}")
            made[name] = Subject.of(name, root, graph, SPLITS.get(name), **FAST.get(name, {}))
        return made[name]

    return make


@pytest.mark.parametrize("name, check", list(_cases()))
def test_defense_contract(name, check, subject, tmp_path):
    try:
        # raises AssertionError on a breach (test_contract_catches.py shows every check failing)
        outcome = check(subject(name), tmp_path)
    except CheckSkipped as why:
        pytest.skip(str(why))
    assert outcome is None and (subject(name).saved / "model.json").is_file()
