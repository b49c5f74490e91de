"""Declared hyperparameter constraints (``_parameter_constraints``, :mod:`dpaudit.training.constraints`)
and :func:`dpaudit.training.defense.check_hyperparameter_ranges`, which reads them."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import pytest

import dpaudit.app.workflows.zoo  # noqa: F401  (registers the zoo's defenses)
from dpaudit.app.commands.train import _defense_help
from dpaudit.errors import ConfigurationError
from dpaudit.training.constraints import (
    COUNT,
    MAX_WIDTH,
    WIDTH,
    Boolean,
    Interval,
    Items,
    Options,
    check,
    describe,
    parameter_constraints,
)
from dpaudit.training.defense import Hyperparameters, check_hyperparameter_ranges, hyperparameter_constraints
from dpaudit.training.registry import available_defenses, get_defense


# ------------------------------------------------------------------------- every defense declares
@pytest.mark.parametrize("name", available_defenses())
def test_every_registered_defense_declares_every_field(name):
    hp_class = get_defense(name).hyperparameters_class
    fields = {f.name for f in dataclasses.fields(hp_class)}
    declared = parameter_constraints(hp_class)
    assert fields - set(declared) == set(), f"{hp_class.__name__} leaves fields undeclared"
    assert set(declared) - fields == set(), f"{hp_class.__name__} declares constraints for no field"
    # and every default satisfies its own declaration
    hp = hp_class()
    for field, constraints in hyperparameter_constraints(hp_class).items():
        assert check(field, getattr(hp, field), constraints) is None, (name, field)


def test_an_undeclared_field_is_a_programming_error():
    @dataclasses.dataclass
    class Sloppy(Hyperparameters):
        _parameter_constraints: ClassVar[dict[str, list]] = {"epochs": [COUNT]}
        epochs: int = 1
        hidden: int = 8

    with pytest.raises(TypeError, match="Sloppy declares no constraint for hidden"):
        check_hyperparameter_ranges("sloppy", Sloppy())


# ------------------------------------------------------------------------- bad values, each kind
@pytest.mark.parametrize(
    ("name", "overrides", "fragment"),
    [
        ("gcn", {"epochs": 0}, "gcn: hyperparameter epochs=0 must be >= 1"),
        ("gcn", {"lr": 0.0}, "lr=0.0 must be > 0"),
        ("gcn", {"weight_decay": -1.0}, "weight_decay=-1.0 must be >= 0"),
        ("gcn", {"weight_decay": math.nan}, "weight_decay=nan must be finite"),
        ("gcn", {"lr": math.inf}, "lr=inf must be finite"),
        ("gcn", {"dropout": 1.0}, "dropout=1.0 must be < 1 (float in [0, 1))"),
        ("gcn", {"hidden": MAX_WIDTH + 1}, f"hidden={MAX_WIDTH + 1} must be <= {MAX_WIDTH}"),
        ("gcn", {"hidden": 0}, "hidden=0 must be >= 1 (int in [1, 65536])"),
        ("gcn", {"epochs": 2.5}, "epochs=2.5 must be an integer"),
        ("gcn", {"lr": "fast"}, "lr='fast' must be a number"),
        ("gcn", {"epochs": True}, "epochs=True must be an integer"),
        ("gcn", {"row_normalize": "yes"}, "row_normalize='yes' must be bool"),
        ("gcn", {"batching": "huge"}, "batching must be one of auto, full, sampled, got 'huge'"),
        ("gcn", {"fanouts": [25, 0]}, "fanouts=[25, 0] must be list of int >= 1"),
        ("mlp-dp", {"optimizer": "rmsprop"}, "optimizer must be one of adam, sgd, got 'rmsprop'"),
        ("mlp-dp", {"protocol": "best"}, "protocol must be one of sound, paper, got 'best'"),
        ("mlp-dp", {"sample_rate": 1.5}, "sample_rate=1.5 must be <= 1 (float in (0, 1])"),
        ("mlp-dp", {"act": "gelu"}, "act must be one of relu, selu, tanh, elu, got 'gelu'"),
        ("gap-edp", {"hops": 6}, "hops=6 must be <= 5 (int in [1, 5])"),
        ("gap-edp", {"hop_grid": (1, 9)}, "hop_grid=(1, 9) must be non-empty list of int in [1, 5]"),
        ("gap-ndp", {"degree_bound": "cap"}, "degree_bound must be one of projection, promise, got 'cap'"),
        ("dpar-em0", {"alpha": 1.0}, "alpha=1.0 must be < 1 (float in (0, 1))"),
        ("dpgnn", {"layers": 5}, "layers=5 must be <= 4 (int in [1, 4])"),
        ("dpgnn", {"clip_percentile": 0.0}, "clip_percentile=0.0 must be > 0 (float in (0, 100])"),
        ("gcon", {"encoder_epochs": -1}, "encoder_epochs=-1 must be >= 0"),
        ("gcon", {"inference": "both"}, "inference must be one of private, public, got 'both'"),
    ],
)
def test_declared_constraints_refuse_bad_values_with_the_declared_wording(name, overrides, fragment):
    cls = get_defense(name)
    with pytest.raises(ConfigurationError) as raised:
        cls(epsilon=math.inf if cls.unit is None else 1.0, **overrides)
    assert fragment in str(raised.value)


def test_none_is_accepted_only_where_declared():
    get_defense("mlp-dp")(epsilon=1.0, hidden=None, sample_rate=None)  # declared [..., None]
    with pytest.raises(ConfigurationError, match="lr=None must be a number"):
        get_defense("gcn")(lr=None)


# ------------------------------------------------------------------------- inheritance
@dataclasses.dataclass
class _Parent(Hyperparameters):
    _parameter_constraints: ClassVar[dict[str, list]] = {
        "width": [WIDTH],
        "rate": [Interval(float, 0, 1, closed="both")],
    }
    width: int = 8
    rate: float = 0.5


@dataclasses.dataclass
class _Child(_Parent):
    _parameter_constraints: ClassVar[dict[str, list]] = {"rate": [Interval(float, 0, None)], "mode": [Options("a")]}
    mode: str = "a"


def test_a_subclass_adds_its_fields_and_overrides_its_parents_declaration():
    declared = parameter_constraints(_Child)
    assert declared == {"width": [WIDTH], "rate": [Interval(float, 0, None)], "mode": [Options("a")]}
    check_hyperparameter_ranges("child", _Child(rate=3.0))  # the child's [0, ∞) wins
    with pytest.raises(ConfigurationError, match=r"rate=3.0 must be <= 1 \(float in \[0, 1\]\)"):
        check_hyperparameter_ranges("parent", _Parent(rate=3.0))
    with pytest.raises(ConfigurationError, match="width=0 must be >= 1"):  # inherited
        check_hyperparameter_ranges("child", _Child(width=0))
    assert parameter_constraints(_Parent) == {"width": [WIDTH], "rate": [Interval(float, 0, 1, closed="both")]}


def test_the_memory_check_reads_width_declarations_not_names():
    @dataclasses.dataclass
    class Named(Hyperparameters):
        _parameter_constraints: ClassVar[dict[str, list]] = {"units": [WIDTH], "hidden": [COUNT]}
        units: int = 4096
        hidden: int = 10**9  # a count by declaration, whatever its name: no memory check

    with pytest.raises(ConfigurationError, match="units=4096 needs at least"):
        check_hyperparameter_ranges("named", Named(), graph=(10**6, 1000), memory=2**30)
    check_hyperparameter_ranges("named", Named(units=1), graph=(10**6, 1000), memory=2**30)


# ------------------------------------------------------------------------- the constraint types
def test_intervals_describe_themselves_and_check_each_bound():
    assert str(Interval(float, 0, None, closed="neither")) == "float > 0"
    assert str(Interval(int, 1, None)) == "int >= 1"
    assert str(Interval(float, 0, 1, closed="left")) == "float in [0, 1)"
    assert str(Interval(float, 0, 1, closed="right")) == "float in (0, 1]"
    assert str(Interval(float, None, 1, closed="neither")) == "float < 1"
    open_unit = Interval(float, 0, 1, closed="neither")
    assert [open_unit.is_satisfied_by(v) for v in (0, 0.5, 1, -1, 2, math.nan, True)] == [
        False,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    assert Interval(int, 1, None).is_satisfied_by(3.0) and not Interval(int, 1, None).is_satisfied_by(3.5)
    with pytest.raises(ValueError):
        Interval(float, 1, 0)
    with pytest.raises(ValueError):
        Interval(float, 0, 1, closed="open")


def test_check_accepts_any_listed_constraint_and_describes_the_union():
    constraints = [Interval(int, 1, None), Options("auto"), None]
    assert all(check("k", v, constraints) is None for v in (1, "auto", None))
    assert check("k", 0, constraints) == "k=0 must be int >= 1 or one of auto or None"
    assert describe([WIDTH, None]) == f"int in [1, {MAX_WIDTH}] or None"
    assert check("flag", 1, [bool]) == "flag=1 must be bool" and Boolean().is_satisfied_by(False)
    assert check("grid", [], [Items(COUNT)]) == "grid=[] must be non-empty list of int >= 1"
    assert check("grid", [], [Items(COUNT, empty=True)]) is None
    assert check("text", "x", [str]) is None and check("text", 3, [str]) == "text=3 must be str"


def test_help_shows_each_fields_declared_range():
    text = _defense_help("dpar-em0")
    assert "lr (float > 0, default 0.005)" in text
    assert "dropout (float in [0, 1), default 0.1)" in text
    assert "protocol (one of sound, paper, default 'sound')" in text
    assert "top_k (int >= 1 or None, default None)" in text


def test_every_hyperparameter_of_every_defense_has_a_description_the_help_reads():
    """``dpaudit train --defense NAME --help`` describes every field, read from the field's
    attribute docstring or the class's ``Attributes:`` section (no comment is scraped)."""
    from dpaudit.testing import registered_defenses
    from dpaudit.training.defense import hyperparameter_help

    missing = {
        name: [
            f.name
            for f in dataclasses.fields(get_defense(name).hyperparameters_class)
            if not hyperparameter_help(get_defense(name).hyperparameters_class).get(f.name)
        ]
        for name in registered_defenses()
    }
    assert {name: fields for name, fields in missing.items() if fields} == {}


def test_help_reads_attribute_docstrings_and_the_attributes_section_not_comments():
    from dpaudit.training.defense import Hyperparameters, hyperparameter_help

    @dataclasses.dataclass
    class Made(Hyperparameters):
        """A made-up recipe.

        Attributes:
            a, b: shared text
                that goes on.
            c: from the section.
        """

        a: int = 1
        b: int = 2
        """b's own"""
        c: int = 3
        d: int = 4  # a comment is not a description

    assert hyperparameter_help(Made) == {"a": "shared text that goes on.", "b": "b's own", "c": "from the section."}
