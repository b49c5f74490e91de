"""attacks/__init__.py: every attack declares what its settings accept, and settings outside the
declaration are refused before the model is touched."""

from __future__ import annotations

import math
import sys

import pytest

import attacks
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.training.constraints import COUNT, MAX_WIDTH, Interval, check


class ModelTouched(AssertionError):
    pass


class Tripwire(ReleasedModel):
    """A released model that fails on any use (``isinstance`` still sees a ReleasedModel)."""

    def __getattribute__(self, attr):
        if attr == "__class__":
            return object.__getattribute__(self, attr)
        raise ModelTouched(attr)


Tripwire.__abstractmethods__ = frozenset()


def tripwire() -> Tripwire:
    return object.__new__(Tripwire)


def out_of_range(constraints) -> list:
    """Values no constraint of a numeric declaration admits: each interval's bounds stepped
    outward, a fraction for an integer, and the non-finite numbers."""
    candidates = [math.nan, math.inf, -math.inf, True]
    for c in constraints:
        if not isinstance(c, Interval):
            continue
        step = 1 if c.type is int else 0.5
        if c.left is not None:
            candidates.append(c.left - step if c.closed in ("left", "both") else c.left)
        if c.right is not None:
            candidates.append(c.right + step if c.closed in ("right", "both") else c.right)
        if c.type is int:
            candidates.append((c.left if c.left is not None else 0) + 1.5)
    return [v for v in candidates if not any(c.is_satisfied_by(v) for c in constraints)]


NUMERIC = [
    (name, key, value)
    for name in attacks.available_attacks()
    for key, constraints in attacks.attack_constraints(name).items()
    if any(isinstance(c, Interval) for c in constraints)
    for value in out_of_range(constraints)
]


@pytest.mark.parametrize("name", attacks.available_attacks())
def test_every_setting_is_declared_and_its_default_satisfies_the_declaration(name):
    declared = attacks.attack_constraints(name)
    defaults = attacks.attack_settings(name)
    assert list(declared) == list(defaults)
    for key, default in defaults.items():
        assert declared[key], key
        assert check(key, default, declared[key]) is None, (key, default)
    # the common settings are declared for every attack, seeds with dpaudit.seeds' range
    assert {"runs", "seed", "n_boot", "device", "data_root", "deployment"} <= set(declared)
    attacks.check_settings(name, {"seed": 2**31 - 1, "n_boot": 1, "runs": 1})


def test_every_numeric_setting_has_out_of_range_values_to_try():
    keys = {key for _, key, _ in NUMERIC}
    assert {"n_boot", "runs", "seed", "max_members", "hidden", "pr_nodes", "a", "known_fraction", "gamma"} <= keys
    # each declared bound and non-integer is tried: a count's 0, a fraction's 0 and 1, a width's MAX_WIDTH + 1
    values = {(key, v) for _, key, v in NUMERIC if not (isinstance(v, float) and math.isnan(v))}
    assert {("n_boot", 0), ("known_fraction", 0), ("known_fraction", 1), ("hidden", MAX_WIDTH + 1)} <= values
    assert {("a", -0.5), ("a", 1.5), ("pr_nodes", 1), ("pr_nodes", -1), ("seed", 2**31), ("runs", 2.5)} <= values


@pytest.mark.parametrize("name,key,value", NUMERIC, ids=[f"{n}-{k}={v!r}" for n, k, v in NUMERIC])
def test_an_out_of_range_value_is_refused_before_the_model_is_touched(name, key, value):
    with pytest.raises(ConfigurationError, match=rf"^attack '{name}': setting {key}=\S+ must be ") as info:
        attacks.run(name, tripwire(), None, **{key: value})
    assert len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("name", attacks.available_attacks())
def test_the_tripwire_fires_when_the_settings_are_accepted(name):
    # the control of the test above: with valid settings the attack does reach the model
    with pytest.raises(ModelTouched):
        attacks.run(name, tripwire(), None, n_boot=50)


@pytest.mark.parametrize(
    "name,settings,message",
    [
        ("mia-threshold", {"max_members": -5}, "setting max_members=-5 must be >= 1"),
        ("mia-rmia", {"n_boot": 0}, "setting n_boot=0 must be >= 1"),
        ("mia-tstf", {"hidden": MAX_WIDTH + 1}, f"setting hidden={MAX_WIDTH + 1} must be <= {MAX_WIDTH}"),
        ("link-steal", {"hidden": 0}, "setting hidden=0 must be >= 1"),
        ("linkteller", {"pr_nodes": 1}, "setting pr_nodes=1 must be 0 or int >= 2"),
        ("mia-rmia", {"a": 1.5}, "setting a=1.5 must be <= 1 (float in [0, 1])"),
        ("mia-rmia", {"a": -0.1}, "setting a=-0.1 must be >= 0"),
        ("link-steal", {"known_fraction": 0.0}, "setting known_fraction=0.0 must be > 0 (float in (0, 1))"),
        ("link-steal", {"known_fraction": 1}, "setting known_fraction=1 must be < 1"),
        ("link-steal", {"known_fraction": 2.0}, "known_fraction=2.0 must be < 1"),
        ("mia-rmia", {"gamma": math.nan}, "setting gamma=nan must be finite"),
        ("linkteller", {"delta": 0}, "setting delta=0 must be > 0"),
        ("mia-lira", {"num_shadows": 1}, "setting num_shadows=1 must be >= 2"),
        ("mia-tstf", {"runs": "abc"}, "setting runs='abc' must be an integer"),
        ("mia-tstf", {"online": True}, "unknown settings ['online']"),
        ("mia-rmia", {"seed": -1}, "setting seed=-1 must be >= 0 (int in [0, 2147483648))"),
        ("mia-lira", {"query": "2-hop"}, "setting query must be one of graph, features, got '2-hop'"),
        ("mia-rmia", {"protocol": "gbase"}, "setting protocol must be one of dpaudit, g-base, got 'gbase'"),
        ("mia-rmia", {"tie_break": "random"}, "setting tie_break must be one of likelihood-ratio, none, got 'random'"),
        ("mia-lira", {"protocol": "g-base", "query": "graph"}, "protocol=g-base queries features only"),
        ("mia-lira", {"online": "yes"}, "setting online='yes' must be bool"),
        ("link-steal", {"deployment": "owner-graph"}, "deployment must be one of auto, querier-graph, training-graph"),
        ("embedding-probe", {"projections": ["tsne", "pca"]}, "projections=['tsne', 'pca'] must be list of one of"),
    ],
)
def test_the_refusals_name_the_attack_the_setting_and_its_range(name, settings, message):
    with pytest.raises(ConfigurationError) as info:
        attacks.run(name, tripwire(), None, **settings)
    text = str(info.value)
    assert text.startswith(f"attack '{name}': ") and message in text and len(text.splitlines()) == 1, text


@pytest.mark.parametrize(
    "name,settings",
    [
        ("linkteller", {"pr_nodes": 0}),
        ("linkteller", {"pr_nodes": 2}),
        ("mia-rmia", {"a": 0, "offline": True}),
        ("mia-rmia", {"a": 1.0, "tie_break": "none", "query": "features", "protocol": "g-base"}),
        ("mia-rmia", {"a": None, "max_members": None}),
        ("link-steal", {"known_fraction": 0.01, "hidden": MAX_WIDTH}),
        ("mia-tstf", {"device": "cpu", "data_root": None, "deployment": "querier-graph", "seed": 2**31 - 1}),
        ("embedding-probe", {"projections": ""}),
        ("embedding-probe", {"projections": ("umap",)}),
    ],
)
def test_values_inside_the_declarations_are_accepted(name, settings):
    attacks.check_settings(name, settings)


def test_an_integral_float_reaches_the_attack_as_an_integer():
    as_given = attacks._as_declared("mia-rmia", {"n_boot": 1e3, "gamma": 2.0, "a": 1.0})
    assert as_given == {"n_boot": 1000, "gamma": 2.0, "a": 1.0} and type(as_given["n_boot"]) is int
    assert type(as_given["gamma"]) is float


def test_attack_constraints_is_a_copy_and_unknown_attacks_are_refused():
    declared = attacks.attack_constraints("mia-rmia")
    declared["n_boot"].clear()
    assert attacks.attack_constraints("mia-rmia")["n_boot"] == [COUNT]
    with pytest.raises(ConfigurationError, match="unknown attack 'nope'"):
        attacks.attack_constraints("nope")
    assert attacks.describe_settings("linkteller")["pr_nodes"] == (500, "0 or int >= 2")


def _probe(model, dataset=None, *, runs: int = 1, n_boot: int = 1000, mode: str = "fast"):
    raise AssertionError("never run")


@pytest.mark.parametrize(
    "constraints,message",
    [
        ({"runs": [COUNT], "n_boot": [COUNT]}, "declares no constraint for mode"),
        ({"runs": [COUNT], "n_boot": [COUNT], "mode": [str], "hidden": [COUNT]}, "hidden, which it has no setting"),
        ({"runs": [COUNT], "n_boot": [Interval(int, 2000, None)], "mode": [str]}, "the default n_boot=1000 must be"),
    ],
)
def test_registering_an_attack_with_an_undeclared_or_unknown_setting_raises(constraints, message):
    before = attacks.available_attacks()
    with pytest.raises(TypeError, match=message):
        attacks.register_attack("probe", constraints)(_probe)
    assert attacks.available_attacks() == before


def test_a_declared_attack_registers_and_is_checked(monkeypatch):
    monkeypatch.setattr(attacks, "_ATTACKS", dict(attacks._ATTACKS))
    monkeypatch.setattr(attacks, "_CONSTRAINTS", dict(attacks._CONSTRAINTS))
    attacks.register_attack("probe", {"runs": [COUNT], "n_boot": [COUNT], "mode": [str]})(_probe)
    assert attacks.describe_settings("probe") == {
        "runs": (1, "int >= 1"),
        "n_boot": (1000, "int >= 1"),
        "mode": ("fast", "str"),
    }
    with pytest.raises(ConfigurationError, match="attack 'probe': setting mode=3 must be str"):
        attacks.run("probe", tripwire(), None, mode=3)


def test_the_docs_list_every_setting_as_declared():
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "attacks.md").read_text()
    cell = r" `([^`]*)` \|"
    shared = {m[0]: m[1:] for m in re.findall(rf"^\|{cell * 3}$", page, flags=re.M)}
    own = {(m[0], m[1]): m[2:] for m in re.findall(rf"^\|{cell * 4}$", page, flags=re.M)}
    listed = set()
    for name in attacks.available_attacks():
        for key, (default, accepted) in attacks.describe_settings(name).items():
            row = own.get((name, key)) or shared.get(key)
            assert row == (repr(default), accepted), (name, key, row)
            listed.add((name, key) if (name, key) in own else key)
    assert listed == set(shared) | set(own)


NEW_ATTACK_MODULE = """
from attacks import register_attack
from dpaudit.training.constraints import COUNT


def _cost(settings, measured, dataset):
    return settings["runs"], settings["runs"] * measured["query"]


@register_attack(
    "made-up-attack", {"runs": [COUNT]}, order=0.5, heading="made-up", quick={"runs": 1}, cost=_cost
)
def made_up_attack(model, dataset=None, *, runs: int = 3):
    raise AssertionError("never run here")
"""


def test_a_module_placed_in_the_package_registers_itself_with_its_declaration(tmp_path, monkeypatch):
    """Adding an attack is adding one module: the package imports every module it holds
    (pkgutil over its path) and the module's decorator declares everything the app reads."""
    for table in ("_ATTACKS", "_CONSTRAINTS", "_DECLARATIONS"):
        monkeypatch.setattr(attacks, table, dict(getattr(attacks, table)))
    (tmp_path / "made_up.py").write_text(NEW_ATTACK_MODULE)
    monkeypatch.setattr(attacks, "__path__", [*attacks.__path__, str(tmp_path)])
    monkeypatch.setattr(attacks, "made_up", None, raising=False)  # the submodule attribute goes after the test
    assert "made-up-attack" not in attacks.available_attacks()
    try:
        attacks._import_modules()
    finally:
        sys.modules.pop("attacks.made_up", None)
    assert "made-up-attack" in attacks.available_attacks()
    declared = attacks.declaration("made-up-attack")
    assert (declared.short, declared.quick, declared.shadows) == ("made-up", {"runs": 1}, False)
    # its declared order puts it first; its cost model is the one the audit plan calls
    assert attacks.order_attacks(["mia-threshold", "made-up-attack", "mia-rmia"])[0] == "made-up-attack"
    assert declared.cost({"runs": 4}, {"shadow": 9.0, "query": 0.5}, None) == (4, 2.0)


def test_every_shipped_attack_declares_its_order_heading_and_cost():
    names = [n for n in attacks.available_attacks() if attacks.get_attack(n).__module__.startswith("attacks.")]
    declared = [attacks.declaration(n) for n in names]
    assert all(math.isfinite(d.order) and d.cost is not None and d.releases is not None for d in declared)
    assert len({d.order for d in declared}) == len(declared)  # one rank each
    assert all(len(d.short) <= 10 for d in declared)  # the demo's table fits in 100 columns


def test_a_quick_setting_outside_its_declaration_is_refused_at_registration():
    with pytest.raises(TypeError, match="quick setting"):
        attacks.register_attack("probe", {"runs": [COUNT], "n_boot": [COUNT], "mode": [str]}, quick={"runs": 0})(_probe)
