"""The defense contract (scikit-learn style): configure, then ``fit`` returns a released model.

>>> defense = get_defense("mlp-dp")(epsilon=8, seed=0, epochs=5)    # doctest: +SKIP
>>> model = defense.fit(dataset, split)                             # doctest: +SKIP
>>> model.predict_proba(dataset.data, split.test)                   # doctest: +SKIP

A defense declares its privacy ``unit`` (``"node"``, ``"edge"`` or ``None`` for a
non-private baseline) and its hyperparameters as a dataclass. :meth:`Defense.fit` validates
input up front, seeds everything, times training and fills the model card; subclasses
implement :meth:`Defense._fit`. Private defenses accept ε = ∞ (train the same pipeline with
no noise, reported as non-private); non-private baselines accept only ε = ∞.

Every private defense has two protocols (hyperparameter ``protocol``, see
:class:`PrivateHyperparameters`):

* ``sound`` (default): the paper's method with every step proven by the accountant and no
  choice read from private data — no epoch or hyperparameter is selected on validation data,
  no clipping norm is read from private gradients.
* ``paper``: the method as its authors ran it — their accounting, training set, architecture,
  selection on validation data and checkpointing — so their tables can be reproduced. Its
  privacy spec is ``sound: false`` and lists every unaccounted step
  (:attr:`~dpaudit.accounting.PrivacySpec.unaccounted`); it is never a guarantee.

The two differ only where soundness needs: whatever of ``paper`` is sound (architecture,
training set, split support) ``sound`` keeps.

``select=private`` (mlp-dp, gap-edp, gap-ndp, dpar-em0, dpar-em1, dpar-gm;
:mod:`dpaudit.training.private_selection`) chooses the
hyperparameters from a public grid by an accounted selection (Papernot & Steinke 2022) whose
whole cost stays within the target ε; other defenses refuse it at construction.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import logging
import math
import re
import textwrap
import time
import typing
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

import dpaudit
from dpaudit.accounting.spec import (
    check_delta_population,
    check_unit_epsilon,
    validate_delta,
    validate_epsilon,
    within_target,
)
from dpaudit.assignments import NONE_WORDS, parse_boolean, split_assignment
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release import declared_facts, declared_population, require_declared
from dpaudit.release.model import ReleasedModel
from dpaudit.runtime import library_versions, resolve_device, seed_everything
from dpaudit.seeds import DERIVED_SEED_LIMIT, check_seed
from dpaudit.training.constraints import MAX_WIDTH as MAX_WIDTH  # re-exported: the cap of widths
from dpaudit.training.constraints import NON_NEGATIVE, WIDTH, Options, check, describe, parameter_constraints
from dpaudit.training.noise import noise_source
from dpaudit.training.private_selection import (
    SELECT_CHOICES,
    check_selection_request,
    replan_selection,
    select_privately,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Hyperparameters:
    """Base of every defense's hyperparameter dataclass (each field needs a default).

    Each field's accepted values are declared in ``_parameter_constraints`` (scikit-learn's
    convention, :mod:`dpaudit.training.constraints`): field name → list of constraints, any one of which
    a value may satisfy. A subclass declares its own fields and may override an inherited
    entry; :func:`check_hyperparameter_ranges` reads the merged declaration, and a field
    without one is a programming error.

    Attributes:
        _parameter_constraints: field name → list of accepted constraints (class variable).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {}


PROTOCOLS = ("sound", "paper")


@dataclasses.dataclass
class PrivateHyperparameters(Hyperparameters):
    """Base of a private defense's hyperparameters: adds the ``protocol`` choice.

    ``protocol="sound"`` proves every step; ``protocol="paper"`` reproduces the authors' run
    (selection on validation data, their accounting, ...) and is recorded ``sound: false``.

    Attributes:
        protocol: ``"sound"`` (default) or ``"paper"``.
        select: ``"none"`` or ``"private"`` (accounted selection, :mod:`dpaudit.training.private_selection`).
        select_runs: ``select=private``: expected number of runs E[K].
        select_eta: ``select=private``: η ≥ 0 of the law of K (0: logarithmic, 1: geometric).
        select_score_noise: ``select=private`` at node level: noise std on the correct validation count.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "protocol": [Options(*PROTOCOLS)],
        "select": [Options(*SELECT_CHOICES)],
        "select_runs": [NON_NEGATIVE],  # select=private refuses <= 1 itself (check_selection_request)
        "select_eta": [NON_NEGATIVE],
        "select_score_noise": [NON_NEGATIVE],  # select=private at node level refuses 0 itself
    }

    protocol: str = "sound"
    """sound: every step proven (default); paper: as the authors ran it, sound: false"""
    select: str = "none"
    """private: accounted selection over a public grid (dpaudit.training.private_selection)"""
    select_runs: float = 5.0
    """select=private: expected number of runs E[K]"""
    select_eta: float = 0.0
    """select=private: η >= 0 of the law of K (0: logarithmic, 1: geometric)"""
    select_score_noise: float = 5.0
    """select=private at node level: noise std on the correct validation count"""


def _field_types(hp_class: type) -> dict[str, Any]:
    hints = typing.get_type_hints(hp_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(hp_class)}


def parse_value(name: str, text: str, annotation: Any) -> Any:
    """Parse ``--set name=text`` into the field's declared type.

    Args:
        name: the field's name (for the message).
        text: the text after ``=``.
        annotation: the field's type annotation (bool, int, float, str, Literal, list/tuple, optionals).

    Returns:
        The parsed value (``None`` for ``none``/``null`` on an optional field).

    Raises:
        ConfigurationError: ``text`` does not parse as the type, or the type cannot be set from the command line.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        non_none = [a for a in args if a is not type(None)]
        if text.lower() in NONE_WORDS and type(None) in args:
            return None
        annotation = non_none[0]
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    try:
        if annotation is bool:
            return parse_boolean(text)
        if annotation is int:
            return int(text)
        if annotation is float:
            return float(text)
        if annotation is str:
            return text
        if origin is typing.Literal:
            if text not in [str(a) for a in args]:
                raise ValueError
            return next(a for a in args if str(a) == text)
        if origin in (list, tuple):
            item = args[0] if args else str
            return [parse_value(name, t.strip(), item) for t in text.split(",") if t.strip()]
    except ValueError:
        expected = getattr(annotation, "__name__", str(annotation))
        if origin is typing.Literal:
            expected = "one of " + ", ".join(str(a) for a in args)
        elif origin in (list, tuple):
            expected = f"a comma-separated list of {getattr(args[0], '__name__', args[0]) if args else 'str'}"
        raise ConfigurationError(f"hyperparameter {name}={text!r}: expected {expected}") from None
    raise ConfigurationError(f"hyperparameter {name} of type {annotation} cannot be set from the command line")


def _attributes_section(doc: str | None) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring: ``name: text`` (or
    ``a, b, c: text`` for several fields), continuation lines indented further."""
    found: dict[str, str] = {}
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return found
    names: list[str] = []
    indent = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0:
            break  # the next section
        indent = depth if indent is None else indent
        entry = re.match(r"([\w, ]+):\s*(.*)$", line.strip()) if depth == indent else None
        if entry:
            names = [n.strip() for n in entry.group(1).split(",") if n.strip()]
            for name in names:
                found[name] = entry.group(2).strip()
        else:
            for name in names:
                found[name] = f"{found[name]} {line.strip()}".strip()
    return found


def _attribute_docstrings(klass: type) -> dict[str, str]:
    """Each field's attribute docstring (PEP 257: a string literal right below the field, as
    mkdocstrings and Sphinx read it), from the class's source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    found = {}
    for field, after in zip(body, body[1:]):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[field.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return found


def hyperparameter_help(hp_class: type) -> dict[str, str]:
    """One description per field, for ``dpaudit train --defense NAME --help`` and the API docs.

    Read from the dataclass and each of its bases, the nearest winning: ``field(metadata={"help":
    ...})``, else the field's attribute docstring (a string right below it), else its entry in
    the class docstring's ``Attributes:`` section (Google style).

    Args:
        hp_class: a hyperparameter dataclass.

    Returns:
        ``{field: description}`` (fields without one are absent).
    """
    found: dict[str, str] = {}
    for klass in reversed(hp_class.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        found.update(_attributes_section(klass.__dict__.get("__doc__")))
        found.update(_attribute_docstrings(klass))
    for f in dataclasses.fields(hp_class):
        if f.metadata.get("help"):
            found[f.name] = str(f.metadata["help"])
    return {name: text for name, text in found.items() if name in {f.name for f in dataclasses.fields(hp_class)}}


def hyperparameter_constraints(hp_class: type) -> dict[str, list]:
    """The constraints ``hp_class`` declares for each of its fields (inherited declarations
    merged); a field without one raises ``TypeError`` — a defense's programming error.

    Args:
        hp_class: a hyperparameter dataclass.

    Returns:
        Field name → list of constraints, in field order.

    Raises:
        TypeError: a field has no declared constraint.
    """
    declared = parameter_constraints(hp_class)
    missing = [f.name for f in dataclasses.fields(hp_class) if f.name not in declared]
    if missing:
        raise TypeError(
            f"{hp_class.__name__} declares no constraint for {', '.join(missing)}: add them to its "
            f"_parameter_constraints (dpaudit.training.constraints)"
        )
    return {f.name: declared[f.name] for f in dataclasses.fields(hp_class)}


def check_hyperparameter_ranges(
    defense: str, hp: Hyperparameters, graph: tuple[int, int] | None = None, memory: int | None = None
) -> None:
    """Every field's value against its declared constraints (``_parameter_constraints``,
    :mod:`dpaudit.training.constraints`), checked before any work. The shared conventions: numbers are
    finite, counts (epochs, steps, widths ...) ≥ 1, widths ≤ :data:`MAX_WIDTH`, learning rates
    and norms > 0, dropout in [0, 1), other numbers ≥ 0 (no hyperparameter here is signed).

    With ``graph`` — the training dataset's (nodes, features) — and ``memory``, the bytes the
    training device has, the widest first layer (of the fields declared a
    :data:`~dpaudit.training.constraints.WIDTH`) must fit: its float32 weights and their gradient
    (features × width each) and its output over every node (nodes × width), which every model
    here computes to answer an audit's queries. That is a lower bound on what training and
    auditing allocate, so a refused width could not have been audited.

    Args:
        defense: the defense's name (for messages).
        hp: the hyperparameters to check.
        graph: ``(num_nodes, num_features)`` of the training dataset, or ``None``.
        memory: bytes available on the training device, or ``None``.

    Raises:
        ConfigurationError: a value violates its constraints, or the widest first layer cannot fit in ``memory``.
    """
    declared = hyperparameter_constraints(type(hp))
    for name, constraints in declared.items():
        bad = check(name, getattr(hp, name), constraints)
        if bad:
            raise ConfigurationError(f"{defense}: hyperparameter {bad}")
    widths = {
        name: getattr(hp, name)
        for name, constraints in declared.items()
        if WIDTH in constraints and isinstance(getattr(hp, name), int)
    }
    if graph is None or memory is None or not widths:
        return
    name, width = max(widths.items(), key=lambda item: item[1])
    nodes, features = graph
    needed = 4 * width * (2 * features + nodes)
    if needed > memory:
        raise ConfigurationError(
            f"{defense}: {name}={width} needs at least {needed / 2**30:.3g} GiB (float32 weights and gradients for "
            f"{features} features × {width}, outputs for {nodes} nodes × {width}); the device has "
            f"{memory / 2**30:.3g} GiB: choose a smaller {name}"
        )


def parse_overrides(hp_class: type, assignments: list[str]) -> dict[str, Any]:
    """Turn ``["epochs=10", "lr=0.01"]`` into typed overrides, rejecting unknown names.

    Args:
        hp_class: the defense's hyperparameter dataclass.
        assignments: ``KEY=VALUE`` strings (``-`` in a key reads as ``_``).

    Returns:
        Field name → parsed value.

    Raises:
        ConfigurationError: a malformed assignment, an unknown name, or a value of the wrong type.
    """
    types = _field_types(hp_class)
    out: dict[str, Any] = {}
    for item in assignments:
        _, key, value = split_assignment(item, "--set")
        if key not in types:
            raise ConfigurationError(f"unknown hyperparameter {key!r}; known: {', '.join(sorted(types))}")
        out[key] = parse_value(key, value.strip(), types[key])
    return out


class Defense(ABC):
    """A training recipe; ``fit(dataset, split)`` returns a :class:`ReleasedModel`.

    ``seed`` drives splits, initialisation and non-private randomness; the privacy noise and
    private sampling come from ``self.noise`` (:mod:`dpaudit.training.noise`): OS entropy by
    default, the seed's generators only with ``noise="seeded"`` (reproducible, carded as not a
    release; ``None`` reads ``DPAUDIT_NOISE``, which the test suite sets)."""

    #: the registered name (:func:`dpaudit.training.registry.register_defense`)
    name: ClassVar[str]
    #: what its ε protects: ``"node"``, ``"edge"``, or ``None`` for a non-private recipe
    unit: ClassVar[str | None] = None
    summary: ClassVar[str] = ""
    #: the family reports group and colour it by (``"GAP"``, ``"non-private baselines"``, ...)
    family: ClassVar[str] = "other"
    #: the cost of one study cell (training plus the shadow and reference models the attacks
    #: train with its recipe) relative to a GCN's: a study starts the costliest cells first
    relative_cost: ClassVar[float] = 2.0
    #: the hyperparameters that count its training epochs (its cost is linear in them): the
    #: audit plan measures a shadow model from a short trial with 1/20 of each; ``()``: the
    #: plan reads the recorded training time instead (an upper estimate)
    epoch_settings: ClassVar[tuple[str, ...]] = ()
    #: whether training reads nodes outside the training set (the transductive graph): then a
    #: non-member stays in the training graph, and member vs non-member is two node changes;
    #: ``False`` for a recipe that reads only the training nodes' features (mlp, mlp-dp)
    reads_graph: ClassVar[bool] = True
    hyperparameters_class: ClassVar[type[Hyperparameters]] = Hyperparameters
    #: ``select=private`` (:mod:`dpaudit.training.private_selection`): how a run is scored — a
    #: :class:`~dpaudit.training.private_selection.Score` proven private for the unit — or ``None``
    selection_score: ClassVar[Any] = None
    #: the public candidate grid: overrides of the hyperparameters, one dict per candidate
    selection_grid: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: why ``select=private`` is refused for this defense (one line), or ``None``
    selection_refusal: ClassVar[str | None] = None
    #: leaves of ``model.json`` (dotted paths, ``card.gcon.homophily.estimate``) that hold the
    #: output of an accounted mechanism other than the weights — a noisy statistic charged in the
    #: ledger, or a public function of it — so they may differ between neighbouring inputs like
    #: the weights do (the contract's release-neutrality check allows exactly these)
    released_statistics: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        epsilon: float | str | None = math.inf,
        delta: float | str | None = "auto",
        seed: int = 0,
        device: str | torch.device = "auto",
        noise: str | None = None,
        force_delta: bool = False,
        **hyperparameters: Any,
    ):
        # privacy noise: OS entropy unless seeded noise is asked for (dpaudit.training.noise)
        self.noise = noise_source(noise)
        self.epsilon = validate_epsilon(epsilon)
        self.force_delta = bool(force_delta)  # accept δ >= 1/(declared units): check_delta_population
        self.check_epsilon(self.epsilon, unit=self.unit)
        self.delta_option = delta
        if delta is not None and not (isinstance(delta, str) and delta.strip().lower() == "auto"):
            validate_delta(delta)
        self.seed = check_seed(seed, "seed", DERIVED_SEED_LIMIT)
        self.device = resolve_device(device)
        known = {f.name for f in dataclasses.fields(self.hyperparameters_class)}
        unknown = set(hyperparameters) - known
        if unknown:
            raise ConfigurationError(f"{self.name}: unknown hyperparameters {sorted(unknown)}; known: {sorted(known)}")
        self.hp = self.hyperparameters_class(**hyperparameters)
        check_hyperparameter_ranges(self.name, self.hp)
        protocol = getattr(self.hp, "protocol", None)
        if protocol is not None and protocol not in PROTOCOLS:
            raise ConfigurationError(f"{self.name}: protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if isinstance(self.hp, PrivateHyperparameters):
            check_selection_request(self)

    @classmethod
    def check_epsilon(cls, epsilon: float, hint: str = "", unit: str | None = "class") -> None:
        """The one rule for a target ε and this defense: a non-private defense (``unit`` ``None``)
        takes only ε = ∞ (``train`` and ``compare`` both ask it here).

        Args:
            epsilon: a validated target ε (:func:`dpaudit.accounting.spec.validate_epsilon`).
            hint: what the command can do instead, appended to the message.
            unit: the instance's unit where it differs from the class's (a user's fit function
                states its own); by default the class's.

        Raises:
            PrivacyParameterError: a finite ``epsilon`` for a non-private defense.
        """
        check_unit_epsilon(cls.name, cls.unit if unit == "class" else unit, epsilon, hint)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A defense's own :meth:`replan` re-derives one run; a privately selected model's card
        (``card["selection"]``) is re-derived by :func:`dpaudit.training.private_selection.replan_selection`,
        which calls the defense's own re-plan for the chosen run."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("replan")
        if own is not None:
            cls.replan = classmethod(_selection_aware(own.__func__))

    @property
    def selects_privately(self) -> bool:
        """``select=private``: :meth:`fit` runs the accounted selection instead of one run."""
        return getattr(self.hp, "select", "none") == "private"

    @property
    def protocol(self) -> str | None:
        """``"sound"`` or ``"paper"`` for private defenses, ``None`` for baselines."""
        return getattr(self.hp, "protocol", None)

    @property
    def paper_protocol(self) -> bool:
        return self.protocol == "paper"

    @property
    def private(self) -> bool:
        return self.unit is not None and math.isfinite(self.epsilon)

    def missing_declarations(self, declared: set[str]) -> list[str]:
        """What this recipe needs declared (public facts: ``num_train``, ``num_nodes`` ...) or set
        that ``declared`` lacks, one line each, said before any data is read so that a user's
        own graph gets every missing declaration at once. Subclasses that read declared facts
        override it; the default needs none.

        Args:
            declared: names the user declared or set.

        Returns:
            One line per missing declaration (empty by default).
        """
        return []

    @classmethod
    def describe_hyperparameters(cls) -> list[tuple[str, str, Any, str]]:
        """``(name, declared range, default, one-line description)`` for every hyperparameter;
        the range is its declared constraints in words (``"float > 0"``, ``"one of sound, paper"``)."""
        constraints = hyperparameter_constraints(cls.hyperparameters_class)
        helps = hyperparameter_help(cls.hyperparameters_class)
        return [
            (f.name, describe(constraints[f.name]), f.default, helps.get(f.name, ""))
            for f in dataclasses.fields(cls.hyperparameters_class)
        ]

    def population(self, dataset: GraphDataset, split: Split) -> int | None:
        """The **declared** number of protected units (for δ = auto): the declared graph's
        nodes or undirected edges (:func:`dpaudit.release.declared_population`), never a count
        of the private graph; ``None`` when the dataset declares no size.

        Args:
            dataset: the dataset.
            split: the split.

        Returns:
            The declared count, or ``None``.
        """
        return declared_population(self.unit, dataset, split)

    def resolve_delta(self, dataset: GraphDataset, split: Split) -> float:
        """The δ of this run: 0 when not private, ``delta=auto`` resolved against the declared
        population, else the given δ validated.

        Args:
            dataset: the dataset.
            split: the split.

        Returns:
            δ.

        Raises:
            PrivacyParameterError: an invalid δ.
            ConfigurationError: ``delta=auto`` without a declared population.
        """
        if not self.private:
            return 0.0
        if self.delta_option is None or str(self.delta_option).strip().lower() == "auto":
            population = require_declared(
                self.population(dataset, split), "delta=auto", "pass --delta (e.g. 1e-6, below 1/the graph's size)"
            )
            return validate_delta(self.delta_option, population)
        delta = validate_delta(self.delta_option)
        check_delta_population(delta, self.population(dataset, split), self.unit, getattr(self, "force_delta", False))
        return delta

    def fit(self, dataset: GraphDataset, split: Split) -> ReleasedModel:
        """Train on ``split.train`` of ``dataset`` and return the released model.

        Args:
            dataset: a :class:`~dpaudit.data.datasets.GraphDataset`.
            split: the split (every training node labeled).

        Returns:
            The released model, with card and owner's record filled in.

        Raises:
            DPAuditError: not a GraphDataset, no training node, or unlabeled training nodes (plus whatever
                :meth:`check_data` and the accounting refuse).
        """
        if not isinstance(dataset, GraphDataset):
            raise DPAuditError(
                "fit expects a dpaudit GraphDataset (see dpaudit.data.datasets.load_dataset / from_data)"
            )
        if len(split.train) == 0:
            raise DPAuditError("the split has no training node")
        if not dataset.data.label_mask[split.train].all():
            raise DPAuditError("the split's training nodes must all be labeled")
        self.check_data(dataset, split)
        seed_everything(self.seed)
        delta = self.resolve_delta(dataset, split)
        start = time.perf_counter()
        if self.selects_privately:
            model = select_privately(self, dataset, split, delta)
        else:
            model = self._fit(dataset, split, delta)
        seconds = time.perf_counter() - start
        if self.private:
            model.privacy.public_facts = declared_facts(dataset, split)
        self._check_privacy(model)
        model.card.update(self.card(dataset, split))
        model.record.update(self.record(dataset, split, seconds))
        return model

    def check_data(self, dataset: GraphDataset, split: Split) -> None:
        """Refuse, before any work (a selection's calibration included), a dataset this defense
        cannot train on soundly — e.g. a graph above a public degree promise. Nothing by default.

        Args:
            dataset: the dataset.
            split: the split.
        """
        return None

    def _check_privacy(self, model: ReleasedModel) -> None:
        """The engine never lies: spent ≤ target, and a paper run is never reported as sound."""
        spec = model.privacy
        if self.protocol is not None and spec.protocol is None:
            spec.protocol = self.protocol
        if not self.private:
            return
        if not within_target(spec.epsilon, self.epsilon):
            raise AssertionError(f"{self.name}: accounted epsilon {spec.epsilon} exceeds the target {self.epsilon}")
        if self.paper_protocol and spec.sound:
            raise AssertionError(f"{self.name}: protocol=paper must list its unaccounted steps (sound: false)")
        if not spec.sound and not spec.unaccounted:
            raise AssertionError(f"{self.name}: a sound: false spec must list what is unaccounted")

    def card(self, dataset: GraphDataset, split: Split) -> dict[str, Any]:
        """The public card (:mod:`dpaudit.release`): choices and declared facts only.

        Args:
            dataset: the dataset.
            split: the split.

        Returns:
            The card dict (method, hyperparameters, protocol, target ε, δ option, dataset card, public split, versions).
        """
        return {
            "method": self.name,
            "hyperparameters": dataclasses.asdict(self.hp),
            "protocol": self.protocol,
            "target_epsilon": None if math.isinf(self.epsilon) else self.epsilon,
            "delta_option": str(self.delta_option),
            "noise": self.noise.mode,  # "seeded": reproducible from the seed, not a release
            "dataset": dataset.card(),
            "split": split.public_dict(),
            "dpaudit_version": dpaudit.__version__,
            "library_versions": library_versions(),
        }

    def record(self, dataset: GraphDataset, split: Split, seconds: float) -> dict[str, Any]:
        """The owner's record: what was measured on the private data, the seeds and timings.

        Args:
            dataset: the dataset.
            split: the split.
            seconds: training wall time.

        Returns:
            The record dict.
        """
        return {
            "dataset": dataset.record(),
            "split": split.to_dict(),
            "seed": self.seed,
            "device": str(self.device),
            "timings": {"train_seconds": seconds},
        }

    @classmethod
    def replan(cls, card: dict[str, Any], privacy: Any) -> list[dict[str, Any]] | None:
        """The mechanism records (``Mechanism.describe()`` dicts, in ledger order) that this
        defense's plan gives for a saved card's public inputs alone — its hyperparameters and
        protocol, ``card["target_epsilon"]``, ``privacy.delta`` and ``privacy.public_facts`` —
        without any data. :func:`dpaudit.release.model.check_plan` compares them with the spec's records on
        load, so a consistent edit of ε and σ (or of steps alone) is refused. ``None``: this
        defense cannot re-plan (the default; the load check then says so).

        Args:
            card: the saved public card.
            privacy: the saved privacy spec (δ and public facts are read).

        Returns:
            Mechanism records, or ``None``.
        """
        return None

    def selection_run_mechanisms(self, num_features: int, declared_train: int | None, delta: float) -> list[Any]:
        """What one training run (at this defense's ε) spends, from public inputs alone — the
        plan its ``fit`` makes. Defenses with a ``selection_score`` implement it.

        Args:
            num_features: number of node features.
            declared_train: declared number of training nodes, or ``None``.
            delta: target δ.

        Returns:
            The mechanisms of one run.

        Raises:
            ConfigurationError: always, in this base class.
        """
        raise ConfigurationError(f"{self.name}: no run plan for private selection")

    @abstractmethod
    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> ReleasedModel:
        """Train and return the model with its privacy spec and the ``inference`` card entry."""


def _selection_aware(replan_run):
    """``replan`` that sends a selected model's card to the selection's re-plan (see
    :meth:`Defense.__init_subclass__`) and every other card to the defense's own."""

    def replan(cls, card: dict[str, Any], privacy: Any) -> list[dict[str, Any]] | None:
        if isinstance(card, dict) and "selection" in card:
            return replan_selection(cls, card, privacy, replan_run)
        return replan_run(cls, card, privacy)

    replan.__doc__ = replan_run.__doc__
    return replan
