"""Declared parameter constraints, in the spirit of scikit-learn's ``_parameter_constraints``.

A hyperparameter dataclass declares, for every field, the list of constraints a value may
satisfy (any one of them suffices)::

    @dataclass
    class MyHyperparameters(Hyperparameters):
        _parameter_constraints: ClassVar[dict[str, list]] = {
            "epochs": [Interval(int, 1, None)],
            "lr": [Interval(float, 0, None, closed="neither")],
            "act": [Options("relu", "tanh")],
            "hidden": [WIDTH, None],            # None: the field may be left unset
        }
        epochs: int = 10
        lr: float = 0.01
        act: str = "relu"
        hidden: int | None = None

Declarations inherit: :func:`parameter_constraints` merges those of every class of the MRO, a
subclass's entry overriding its parent's. :func:`check` returns the error of a value that
satisfies none of its constraints, :func:`describe` the range ``--help`` prints.

Numbers are checked finite: no interval here contains ``nan`` or ``±inf``.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from dpaudit.seeds import SEED_LIMIT

__all__ = [
    "COUNT",
    "DROPOUT",
    "FRACTION",
    "MAX_WIDTH",
    "NON_NEGATIVE",
    "NON_NEGATIVE_INT",
    "POSITIVE",
    "SAMPLE_RATE",
    "SEED",
    "WIDTH",
    "Boolean",
    "Constraint",
    "InstanceOf",
    "Interval",
    "Items",
    "Options",
    "check",
    "describe",
    "parameter_constraints",
]

#: No architecture a defense here reproduces comes near 2^16 units per layer; a wider one is a
#: typo (hidden=1000000) that would allocate gigabytes, or fail to, before any error.
MAX_WIDTH = 2**16


class Constraint(ABC):
    """One set of acceptable values.

    Subclasses implement :meth:`is_satisfied_by` and ``__str__``.
    """

    @abstractmethod
    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` belongs to the set.

        Args:
            value: the candidate value.

        Returns:
            ``True`` when ``value`` is accepted.
        """

    @abstractmethod
    def __str__(self) -> str:
        """The set in a few words, for ``--help`` (``"float > 0"``, ``"one of sound, paper"``)."""

    def error(self, name: str, value: Any) -> str:
        """Why ``name=value`` is refused, as the tail of an error message.

        Args:
            name: the parameter's name.
            value: the refused value.

        Returns:
            The message tail.
        """
        return f"{name}={value!r} must be {self}"


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fmt(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


class Interval(Constraint):
    """Finite numbers of ``type`` (``int`` or ``float``) between ``left`` and ``right``.

    ``None`` for a bound leaves that side open (unbounded); ``closed`` says which of the given
    bounds belong to the interval: ``"left"`` (default), ``"right"``, ``"both"`` or ``"neither"``.
    An ``int`` interval accepts integers (a float with an integral value included); a ``float``
    interval accepts every real number (booleans are never numbers here).

    Args:
        type: ``int`` or ``float``.
        left: lower bound, or ``None`` for none.
        right: upper bound, or ``None`` for none.
        closed: which given bounds are included.

    Raises:
        TypeError: ``type`` is neither ``int`` nor ``float``.
        ValueError: ``closed`` is unknown or ``right < left``.
    """

    CLOSED = ("left", "right", "both", "neither")

    def __init__(self, type: type, left: float | None, right: float | None, *, closed: str = "left"):
        if type not in (int, float):
            raise TypeError(f"Interval type must be int or float, got {type!r}")
        if closed not in self.CLOSED:
            raise ValueError(f"closed must be one of {', '.join(self.CLOSED)}, got {closed!r}")
        if left is not None and right is not None and right < left:
            raise ValueError(f"Interval's right bound {right} is below its left bound {left}")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Interval) and (self.type, self.left, self.right, self.closed) == (
            other.type,
            other.left,
            other.right,
            other.closed,
        )

    def __hash__(self) -> int:
        return hash((Interval, self.type, self.left, self.right, self.closed))

    def __repr__(self) -> str:
        return f"Interval({self.type.__name__}, {self.left!r}, {self.right!r}, closed={self.closed!r})"

    @property
    def _left_closed(self) -> bool:
        return self.closed in ("left", "both")

    @property
    def _right_closed(self) -> bool:
        return self.closed in ("right", "both")

    def _violation(self, value: Any) -> str | None:
        """``None`` when ``value`` lies in the interval, else ``"must be ..."``."""
        if not _is_number(value):
            return "must be an integer" if self.type is int else "must be a number"
        if not math.isfinite(value):
            return "must be finite"
        if self.type is int and not float(value).is_integer():
            return "must be an integer"
        if self.left is not None and (value < self.left or (value == self.left and not self._left_closed)):
            return f"must be {'>=' if self._left_closed else '>'} {_fmt(self.left)}"
        if self.right is not None and (value > self.right or (value == self.right and not self._right_closed)):
            return f"must be {'<=' if self._right_closed else '<'} {_fmt(self.right)}"
        return None

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is a finite number of the interval's type within its bounds.

        Args:
            value: the candidate value.

        Returns:
            ``True`` when ``value`` is accepted.
        """
        return self._violation(value) is None

    def __str__(self) -> str:
        kind = self.type.__name__
        if self.left is not None and self.left == self.right and self.closed == "both":
            return _fmt(self.left)  # one value: pr_nodes' "0 (skip) or int >= 2"
        if self.left is not None and self.right is not None:
            return (
                f"{kind} in {'[' if self._left_closed else '('}{_fmt(self.left)}, "
                f"{_fmt(self.right)}{']' if self._right_closed else ')'}"
            )
        if self.left is not None:
            return f"{kind} {'>=' if self._left_closed else '>'} {_fmt(self.left)}"
        if self.right is not None:
            return f"{kind} {'<=' if self._right_closed else '<'} {_fmt(self.right)}"
        return f"finite {kind}"

    def error(self, name: str, value: Any) -> str:
        """Why ``name=value`` is refused (the violated bound, plus the interval when it has two bounds).

        Args:
            name: the parameter's name.
            value: the refused value.

        Returns:
            The message tail.
        """
        message = f"{name}={value!r} {self._violation(value)}"
        if self.left is not None and self.right is not None:
            message += f" ({self})"
        return message


class Options(Constraint):
    """One of a fixed set of strings (kept in the order given, for messages).

    Args:
        *options: the accepted strings (or one iterable of them); duplicates dropped.

    Raises:
        TypeError: no option, or an option that is not a string.
    """

    def __init__(self, *options: str):
        if len(options) == 1 and not isinstance(options[0], str):
            options = tuple(options[0])
        if not options or not all(isinstance(o, str) for o in options):
            raise TypeError("Options takes one or more strings")
        self.options = tuple(dict.fromkeys(options))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Options) and set(self.options) == set(other.options)

    def __hash__(self) -> int:
        return hash((Options, frozenset(self.options)))

    def __repr__(self) -> str:
        return f"Options({', '.join(map(repr, self.options))})"

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is one of the options.

        Args:
            value: the candidate value.

        Returns:
            ``True`` when ``value`` is accepted.
        """
        return isinstance(value, str) and value in self.options

    def __str__(self) -> str:
        return "one of " + ", ".join(self.options)

    def error(self, name: str, value: Any) -> str:
        """Why ``name=value`` is refused, listing the options.

        Args:
            name: the parameter's name.
            value: the refused value.

        Returns:
            The message tail.
        """
        return f"{name} must be {self}, got {value!r}"


class Boolean(Constraint):
    """``True`` or ``False``."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Boolean)

    def __hash__(self) -> int:
        return hash(Boolean)

    def __repr__(self) -> str:
        return "Boolean()"

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is a ``bool``.

        Args:
            value: the candidate value.

        Returns:
            ``True`` when ``value`` is accepted.
        """
        return isinstance(value, bool)

    def __str__(self) -> str:
        return "bool"


class InstanceOf(Constraint):
    """Any instance of ``type`` (a free-form string a defense parses itself, for instance).

    Args:
        type: the accepted type (a ``bool`` is not accepted as an ``int``).
    """

    def __init__(self, type: type):
        self.type = type

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InstanceOf) and self.type is other.type

    def __hash__(self) -> int:
        return hash((InstanceOf, self.type))

    def __repr__(self) -> str:
        return f"InstanceOf({self.type.__name__})"

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is an instance of ``type`` (booleans only when ``type`` is ``bool``).

        Args:
            value: the candidate value.

        Returns:
            ``True`` when ``value`` is accepted.
        """
        return isinstance(value, self.type) and not (self.type is not bool and isinstance(value, bool))

    def __str__(self) -> str:
        return self.type.__name__


class Items(Constraint):
    """A list or tuple whose every item satisfies ``item`` (``empty``: whether ``[]`` is allowed).

    Args:
        item: the constraint every item must satisfy.
        empty: whether an empty list is accepted.
    """

    def __init__(self, item: Constraint, *, empty: bool = False):
        self.item, self.empty = item, empty

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Items) and (self.item, self.empty) == (other.item, other.empty)

    def __hash__(self) -> int:
        return hash((Items, self.item, self.empty))

    def __repr__(self) -> str:
        return f"Items({self.item!r}, empty={self.empty})"

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is a list/tuple (non-empty unless ``empty``) of accepted items.

        Args:
            value: the candidate value.

        Returns:
            ``True`` when ``value`` is accepted.
        """
        return (
            isinstance(value, (list, tuple))
            and (self.empty or len(value) > 0)
            and all(self.item.is_satisfied_by(v) for v in value)
        )

    def __str__(self) -> str:
        return f"{'' if self.empty else 'non-empty '}list of {self.item}"


class _NoneConstraint(Constraint):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NoneConstraint)

    def __hash__(self) -> int:
        return hash(_NoneConstraint)

    def __repr__(self) -> str:
        return "None"

    def is_satisfied_by(self, value: Any) -> bool:
        return value is None

    def __str__(self) -> str:
        return "None"


#: a layer width: at least one unit, at most :data:`MAX_WIDTH` (the first-layer memory check of
#: :func:`dpaudit.training.defense.check_hyperparameter_ranges` reads the fields declared with it)
WIDTH = Interval(int, 1, MAX_WIDTH, closed="both")


#: shorthands for the ranges most hyperparameters share
COUNT = Interval(int, 1, None)  # epochs, steps, layers, batch sizes ...
NON_NEGATIVE_INT = Interval(int, 0, None)
NON_NEGATIVE = Interval(float, 0, None)  # rates, decays, shares: no hyperparameter here is signed
POSITIVE = Interval(float, 0, None, closed="neither")  # learning rates, norms, scales
DROPOUT = Interval(float, 0, 1, closed="left")
FRACTION = Interval(float, 0, 1, closed="neither")
SAMPLE_RATE = Interval(
    float, 0, 1, closed="right"
)  # a Poisson sampling rate q (dpaudit.training.dpsgd.PoissonSchedule)
SEED = Interval(int, 0, SEED_LIMIT)  # a seed a user gives: dpaudit.seeds.check_seed's range, [0, 2**31)


def make_constraint(spec: Any) -> Constraint:
    """A declaration's entry as a :class:`Constraint`: itself, ``None`` (the value ``None``) or
    a type (:class:`InstanceOf`; ``bool`` is :class:`Boolean`).

    Args:
        spec: a :class:`Constraint`, ``None`` or a type.

    Returns:
        The constraint.

    Raises:
        TypeError: ``spec`` is none of these.
    """
    if isinstance(spec, Constraint):
        return spec
    if spec is None:
        return _NoneConstraint()
    if spec is bool:
        return Boolean()
    if isinstance(spec, type):
        return InstanceOf(spec)
    raise TypeError(f"not a parameter constraint: {spec!r}")


def parameter_constraints(cls: type) -> dict[str, list[Constraint]]:
    """The constraints ``cls`` declares for each field, merged over its MRO (the most derived
    class's ``_parameter_constraints`` entry for a name wins)."""
    merged: dict[str, list[Constraint]] = {}
    for klass in reversed(cls.__mro__):
        own = vars(klass).get("_parameter_constraints")
        if own is None:
            continue
        if not isinstance(own, dict):
            raise TypeError(f"{klass.__name__}._parameter_constraints must be a dict of lists")
        for name, specs in own.items():
            if isinstance(specs, (Constraint, type)) or specs is None:
                specs = [specs]
            merged[name] = [make_constraint(s) for s in specs]
    return merged


def check(name: str, value: Any, constraints: Iterable[Any]) -> str | None:
    """``None`` when ``value`` satisfies one of ``constraints``, else why not (``name=value
    must be ...``).

    Args:
        name: the parameter's name (for the message).
        value: the value to check.
        constraints: constraint specs (see :func:`make_constraint`); any one suffices.

    Returns:
        ``None`` or the error message.
    """
    constraints = [make_constraint(c) for c in constraints]
    if any(c.is_satisfied_by(value) for c in constraints):
        return None
    shown = [c for c in constraints if not isinstance(c, _NoneConstraint)]
    if len(shown) == 1:
        return shown[0].error(name, value)
    return f"{name}={value!r} must be {describe(constraints)}"


def describe(constraints: Iterable[Any]) -> str:
    """The accepted values in words: ``"int >= 1 or None"``.

    Args:
        constraints: constraint specs (see :func:`make_constraint`).

    Returns:
        The constraints' descriptions joined by ``" or "``.
    """
    return " or ".join(str(make_constraint(c)) for c in constraints)
