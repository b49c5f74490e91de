"""Attacks on released models, by name.

>>> from attacks import run, available_attacks
>>> available_attacks()
['embedding-probe', 'link-steal', 'linkteller', 'mia-lira', 'mia-rmia', 'mia-threshold', 'mia-tstf', 'seed-replay']
>>> result = run("link-steal", model, dataset, runs=3)          # doctest: +SKIP

Every attack consumes only the released-model interface (``predict_proba``, ``embed``,
``privacy``, ``card``) plus what its threat model gives the attacker, and returns a
:class:`dpaudit.auditing.results.AttackResult` with the statistics of :mod:`dpaudit.auditing.statistics`;
:func:`run` adds ``extra["low_fpr"]``, every low-FPR TPR as mean ± sd over the attack's runs
with its number of negatives (:mod:`dpaudit.auditing.low_fpr`).

Each attack declares what its settings accept beside its function (``MIA_TSTF_CONSTRAINTS``
...: :mod:`dpaudit.training.constraints`, as a defense's ``_parameter_constraints``), and
:func:`register_attack` refuses one that leaves a setting undeclared; :func:`run` and every
command check settings against the declarations (:func:`check_settings`) before any work.

Each attack module registers itself (:func:`register_attack` on its function) and declares there
what the command line, the audit plan and the report need to know about it
(:class:`AttackDeclaration`: its order, heading, quick settings, whether it trains shadow
models, its cost and its queries); this package imports every module in it (:mod:`pkgutil`), so
adding an attack is adding one module (docs/howto/new-attack.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

from attacks._deployment import deployed
from dpaudit.auditing.caps import ALLOW_LONG, COUNT_CAPS, check_attack_caps
from dpaudit.auditing.low_fpr import low_fpr_summary
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.training.constraints import Constraint, Interval, check, describe, make_constraint

_ATTACKS: dict[str, Callable[..., AttackResult]] = {}
_CONSTRAINTS: dict[str, dict[str, list[Constraint]]] = {}
_DECLARATIONS: dict[str, AttackDeclaration] = {}

#: ``cost(settings, measured, dataset) -> (work units, CPU seconds)`` of one attack with its full
#: settings, given ``measured`` ``{"shadow": s, "query": s}`` (one shadow model trained with the
#: target's recipe, one query; :func:`dpaudit.app.workflows.audit.plan.calibrate`)
CostModel = Callable[[Mapping[str, Any], Mapping[str, float], GraphDataset], tuple[int, float]]
#: ``releases(settings, dataset, free_graph) -> int``: at most how many new releases the attack
#: asks a query-charged target for (``free_graph``: the owner's training release answers the
#: full-graph query on the training graph)
ReleaseModel = Callable[[Mapping[str, Any], GraphDataset, bool], int]


def one_graph_query(settings: Mapping[str, Any], dataset: GraphDataset, free_graph: bool) -> int:
    """The :data:`ReleaseModel` of an attack whose only query of the target is one full-graph
    query on the audited graph (its shadow and reference models are the auditor's own).

    Args:
        settings: the attack's settings (unused).
        dataset: the audited graph (unused).
        free_graph: whether the owner's training release answers that query.

    Returns:
        0 when the query is free, else 1.
    """
    return 0 if free_graph else 1


@dataclasses.dataclass(frozen=True)
class AttackDeclaration:
    """What the app and the report know about an attack, declared at its registration.

    Attributes:
        name: the registered name.
        order: rank in audits and reports, strongest first (lower runs first; ties and
            undeclared attacks keep the given order after the ranked ones).
        heading: short column heading (tables that must fit 100 columns); the name by default.
        quick: settings of a quick audit (``audit --quick``); explicit settings still win.
        shadows: whether it trains shadow or reference models with the target's recipe (the
            audit plan measures one such model first).
        cost: its cost model (:data:`CostModel`); ``None``: one shadow model per run.
        releases: its release model for query-charged targets (:data:`ReleaseModel`);
            ``None``: unknown.
        diagnostic: fitted after looking at the target's membership (never a test or a bound).
    """

    name: str
    order: float = math.inf
    heading: str | None = None
    quick: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    shadows: bool = False
    cost: CostModel | None = None
    releases: ReleaseModel | None = None
    diagnostic: bool = False

    @property
    def short(self) -> str:
        """The heading, or the name when none is declared."""
        return self.heading or self.name


def _keyword_settings(fn: Callable) -> dict[str, object]:
    return {
        p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def register_attack(
    name: str,
    constraints: dict[str, list[Any]],
    *,
    order: float = math.inf,
    heading: str | None = None,
    quick: Mapping[str, Any] | None = None,
    shadows: bool = False,
    cost: CostModel | None = None,
    releases: ReleaseModel | None = None,
    diagnostic: bool = False,
) -> Callable[[Callable[..., AttackResult]], Callable[..., AttackResult]]:
    """Decorator: make ``fn(model, dataset=None, *, **settings) -> AttackResult`` available as ``name``.

    Args:
        name: the attack's name on the command line and in reports.
        constraints: for each keyword-only setting of ``fn``, the values it accepts: a list of
            :mod:`dpaudit.training.constraints` (any one suffices; ``None`` admits ``None``, a
            type its instances), as a defense's ``_parameter_constraints`` does.
        order: its rank, strongest first (:attr:`AttackDeclaration.order`).
        heading: its short column heading.
        quick: its settings in a quick audit.
        shadows: whether it trains shadow or reference models with the target's recipe.
        cost: its cost model (:data:`CostModel`).
        releases: its release model for query-charged targets (:data:`ReleaseModel`).
        diagnostic: whether it is a diagnostic (never a test or a bound).

    Returns:
        The decorator; it returns ``fn`` unchanged.

    Raises:
        TypeError: a setting left undeclared, a declaration naming no setting of ``fn``, a
            default outside its declaration, or a quick setting outside it (the attack's
            programming error, raised at registration).
        RuntimeError: another function is already registered as ``name``.
    """

    def decorate(fn):
        settings = _keyword_settings(fn)
        declared = {key: [make_constraint(c) for c in specs] for key, specs in constraints.items()}
        missing = [key for key in settings if key not in declared]
        if missing:
            raise TypeError(
                f"attack {name!r} declares no constraint for {', '.join(missing)}: add them to its constraints "
                f"(dpaudit.training.constraints)"
            )
        extra = sorted(set(declared) - set(settings))
        if extra:
            raise TypeError(f"attack {name!r} declares constraints for {', '.join(extra)}, which it has no setting for")
        for key, default in settings.items():
            bad = check(key, default, declared[key])
            if bad:
                raise TypeError(f"attack {name!r}: the default {bad}")
        if name in _ATTACKS and _ATTACKS[name] is not fn:
            raise RuntimeError(f"attack {name!r} registered twice")
        for key, value in (quick or {}).items():
            bad = check(key, value, declared[key]) if key in declared else f"{key} is no setting"
            if bad:
                raise TypeError(f"attack {name!r}: the quick setting {bad}")
        _ATTACKS[name] = fn
        _CONSTRAINTS[name] = {key: declared[key] for key in settings}
        _DECLARATIONS[name] = AttackDeclaration(
            name, order, heading, dict(quick or {}), shadows, cost, releases, diagnostic
        )
        return fn

    return decorate


def available_attacks() -> list[str]:
    """The registered attacks' names, sorted."""
    return sorted(_ATTACKS)


def declaration(name: str) -> AttackDeclaration:
    """What attack ``name`` declared at registration (:class:`AttackDeclaration`).

    Args:
        name: a registered attack.

    Returns:
        Its declaration.

    Raises:
        ConfigurationError: ``name`` is not registered.
    """
    get_attack(name)
    return _DECLARATIONS[name]


def order_attacks(names: list[str]) -> list[str]:
    """``names`` in their declared order (strongest first); undeclared or unknown names (e.g.
    the records of an attack no longer installed) last, in the given order.

    Args:
        names: attack names.

    Returns:
        The names, reordered.
    """
    rank = {n: d.order for n, d in _DECLARATIONS.items()}
    position = {n: i for i, n in enumerate(names)}
    return sorted(names, key=lambda n: (rank.get(n, math.inf), position[n]))


def get_attack(name: str) -> Callable[..., AttackResult]:
    """The function registered as attack ``name``.

    Args:
        name: a registered attack (:func:`available_attacks`).

    Returns:
        The attack callable ``fn(model, dataset, **settings) -> AttackResult``.

    Raises:
        ConfigurationError: ``name`` is not registered (the message lists the available ones).
    """
    try:
        return _ATTACKS[name]
    except KeyError:
        raise ConfigurationError(f"unknown attack {name!r}; available: {', '.join(available_attacks())}") from None


def attack_settings(name: str) -> dict[str, object]:
    """The settings ``name`` accepts, with their defaults.

    Args:
        name: a registered attack.

    Returns:
        Each keyword setting of the attack's signature mapped to its default.

    Raises:
        ConfigurationError: ``name`` is not registered.
    """
    return _keyword_settings(get_attack(name))


def attack_constraints(name: str) -> dict[str, list[Constraint]]:
    """What each setting of ``name`` accepts, as declared at registration (in the order of the
    attack's signature); :func:`dpaudit.training.constraints.describe` says it in words.

    Args:
        name: a registered attack.

    Returns:
        Each setting mapped to a copy of its declared constraints.

    Raises:
        ConfigurationError: ``name`` is not registered.
    """
    get_attack(name)
    return {key: list(specs) for key, specs in _CONSTRAINTS[name].items()}


def describe_settings(name: str) -> dict[str, tuple[object, str]]:
    """Each setting of ``name``: its default and the values it accepts in words (``--help``).

    Args:
        name: a registered attack.

    Returns:
        Each setting mapped to ``(default, accepted values in words)``.

    Raises:
        ConfigurationError: ``name`` is not registered.
    """
    declared = attack_constraints(name)
    return {key: (default, describe(declared[key])) for key, default in attack_settings(name).items()}


def check_settings(name: str, settings: dict) -> None:
    """Every setting given to attack ``name`` known and within its declaration
    (:func:`attack_constraints`), and the one rule across settings (G-BASE queries features
    only), checked before the model or data is loaded: one line naming the attack and the
    setting. The caps of :func:`check_attack_caps` (:mod:`dpaudit.auditing.caps`) are apart (``--allow-long`` lifts them).

    Args:
        name: a registered attack.
        settings: the keyword settings to be passed to it.

    Raises:
        ConfigurationError: ``name`` is unknown, a setting is unknown or outside its declaration, or
            ``protocol="g-base"`` is combined with ``query="graph"``.
    """
    declared = attack_constraints(name)
    unknown = sorted(set(settings) - set(declared))
    if unknown:
        raise ConfigurationError(f"attack {name!r}: unknown settings {unknown}; known: {sorted(declared)}")
    for key, value in settings.items():
        bad = check(key, value, declared[key])
        if bad:
            raise ConfigurationError(f"attack {name!r}: setting {bad}")
    if settings.get("protocol") == "g-base" and settings.get("query") == "graph":
        raise ConfigurationError(f"attack {name!r}: protocol=g-base queries features only; drop query=graph")


def _as_declared(name: str, settings: dict) -> dict:
    """``settings`` with an integral float given for an integer setting (``n_boot=1e3`` from a
    command line) as that integer, so that the attack counts with an ``int``."""
    declared = attack_constraints(name)

    def integral(key, value):
        return isinstance(value, float) and any(
            isinstance(c, Interval) and c.type is int and c.is_satisfied_by(value) for c in declared[key]
        )

    return {key: int(value) if integral(key, value) else value for key, value in settings.items()}


def run(name: str, model: ReleasedModel, dataset: GraphDataset | None = None, **settings) -> AttackResult:
    """Run attack ``name`` against ``model``; ``dataset`` defaults to the one named in its card.

    Unknown settings, and settings outside their declaration (:func:`check_settings`), are a
    :class:`~dpaudit.errors.ConfigurationError` raised before the model is touched.

    Args:
        name: a registered attack (:func:`available_attacks`).
        model: the released model to attack.
        dataset: the graph the attack reads; ``None`` loads the one named in the model's card.
        **settings: the attack's keyword settings (:func:`attack_settings`).

    Returns:
        The attack's result, with ``extra["low_fpr"]`` set to the low-FPR summary of its runs.

    Raises:
        ConfigurationError: unknown attack or setting, a setting outside its declaration, or ``model``
            not a :class:`ReleasedModel`.
    """
    fn = get_attack(name)
    check_settings(name, settings)
    if not isinstance(model, ReleasedModel):
        raise ConfigurationError(
            "attacks need a dpaudit ReleasedModel (wrap your module with dpaudit.training.adapters.adapt)"
        )
    with deployed(model, settings.get("deployment")):  # releases over the training graph: charged to it
        result = fn(model, dataset, **_as_declared(name, settings))
    result.extra["low_fpr"] = low_fpr_summary(result.runs)
    return result


def _import_modules() -> None:
    """Import every module of this package: each registers its attacks (:func:`register_attack`)."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_modules()

__all__ = [
    "ALLOW_LONG",
    "COUNT_CAPS",
    "AttackDeclaration",
    "attack_constraints",
    "attack_settings",
    "available_attacks",
    "check_attack_caps",
    "check_settings",
    "declaration",
    "describe_settings",
    "get_attack",
    "one_graph_query",
    "order_attacks",
    "register_attack",
    "run",
]
