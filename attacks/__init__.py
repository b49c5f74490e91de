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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from dpaudit.auditing.low_fpr import low_fpr_summary
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.training.constraints import Constraint, Interval, check, describe, make_constraint

_ATTACKS: dict[str, Callable[..., AttackResult]] = {}
_CONSTRAINTS: dict[str, dict[str, list[Constraint]]] = {}


def _keyword_settings(fn: Callable) -> dict[str, object]:
    return {
        p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def register_attack(name: str, constraints: dict[str, list[Any]]):
    """Decorator: make ``fn(model, dataset=None, *, **settings) -> AttackResult`` available as ``name``.

    ``constraints`` declares, for each keyword-only setting of ``fn``, the values it accepts: a
    list of :mod:`dpaudit.training.constraints` (any one suffices; ``None`` admits ``None``, a
    type its instances), as a defense's ``_parameter_constraints`` does. A setting left
    undeclared, a declaration naming no setting of ``fn``, or a default outside its declaration is
    a ``TypeError`` (the attack's programming error, raised at registration)."""

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
        _ATTACKS[name] = fn
        _CONSTRAINTS[name] = {key: declared[key] for key in settings}
        return fn

    return decorate


def available_attacks() -> list[str]:
    return sorted(_ATTACKS)


def get_attack(name: str) -> Callable[..., AttackResult]:
    try:
        return _ATTACKS[name]
    except KeyError:
        raise ConfigurationError(f"unknown attack {name!r}; available: {', '.join(available_attacks())}") from None


def attack_settings(name: str) -> dict[str, object]:
    """The settings ``name`` accepts, with their defaults."""
    return _keyword_settings(get_attack(name))


def attack_constraints(name: str) -> dict[str, list[Constraint]]:
    """What each setting of ``name`` accepts, as declared at registration (in the order of the
    attack's signature); :func:`dpaudit.training.constraints.describe` says it in words."""
    get_attack(name)
    return {key: list(specs) for key, specs in _CONSTRAINTS[name].items()}


def describe_settings(name: str) -> dict[str, tuple[object, str]]:
    """Each setting of ``name``: its default and the values it accepts in words (``--help``)."""
    declared = attack_constraints(name)
    return {key: (default, describe(declared[key])) for key, default in attack_settings(name).items()}


# Above these caps a count makes an attack run for hours (or holds more than any graph here
# gives it), so a command refuses it in one line unless ``--allow-long``; what each count costs
# is said with it. Each cap is 25-250 times the default; the audit's time estimate
# (:func:`dpaudit.app.workflows.audit.audit_plan`) then judges the whole plan.
COUNT_CAPS: dict[str, tuple[int, str]] = {
    "runs": (50, "each run repeats the whole attack"),
    "num_shadows": (256, "each trains one shadow model with the target's recipe"),
    "num_references": (256, "each trains one reference model with the target's recipe"),
    "max_pairs": (1_000_000, "pairs scored per run"),
    "num_pairs": (20_000, "each pair costs LinkTeller two perturbed queries of the model"),
    "pr_nodes": (100_000, "each node costs LinkTeller one perturbed query of the model"),
    "n_boot": (100_000, "bootstrap draws of every confidence interval"),
    "max_plot_nodes": (50_000, "nodes embedded by t-SNE/UMAP"),
    "population_size": (1_000_000, "population nodes scored per reference model"),
    "shadow_nodes_per_class": (1_000_000, "nodes per class in every shadow training set"),
    "label_probe_nodes": (1_000_000, "nodes the label probe is fitted on"),
    "max_members": (10_000_000, "members in the audit game"),
    "top_k": (1_000, "posteriors kept per node"),
    "knn_k": (1_000, "neighbours of the k-NN probe"),
}
#: the option that lifts the caps and the time limit
ALLOW_LONG = "--allow-long"


def check_attack_caps(name: str, settings: dict, allow_long: bool = False) -> None:
    """Each count of attack ``name`` at most its cap (:data:`COUNT_CAPS`) unless ``allow_long``:
    above it one line says what the count costs and how to run it anyway."""
    if allow_long:
        return
    for key, value in settings.items():
        cap = COUNT_CAPS.get(key)
        if cap is None or isinstance(value, bool) or not isinstance(value, int) or value <= cap[0]:
            continue
        raise ConfigurationError(
            f"attack {name!r}: {key}={value} is above its cap of {cap[0]:,} ({cap[1]}: hours of work); "
            f"lower it, or pass {ALLOW_LONG} to run it anyway"
        )


def check_settings(name: str, settings: dict) -> None:
    """Every setting given to attack ``name`` known and within its declaration
    (:func:`attack_constraints`), and the one rule across settings (G-BASE queries features
    only), checked before the model or data is loaded: one line naming the attack and the
    setting. The caps of :func:`check_attack_caps` are apart (``--allow-long`` lifts them)."""
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


#: the names earlier releases checked settings with: both are :func:`check_settings` now
check_attack_ranges = check_setting_types = check_settings


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
    """
    fn = get_attack(name)
    check_settings(name, settings)
    if not isinstance(model, ReleasedModel):
        raise ConfigurationError("attacks need a dpaudit ReleasedModel (wrap your module with dpaudit.training.adapters.adapt)")
    result = fn(model, dataset, **_as_declared(name, settings))
    result.extra["low_fpr"] = low_fpr_summary(result.runs)
    return result


def _register_builtin() -> None:
    from attacks.embedding import EMBEDDING_PROBE_CONSTRAINTS, embedding_probe
    from attacks.link_stealing import LINK_STEAL_CONSTRAINTS, link_steal
    from attacks.linkteller import LINKTELLER_CONSTRAINTS, linkteller
    from attacks.lira import MIA_LIRA_CONSTRAINTS, mia_lira
    from attacks.membership import MIA_THRESHOLD_CONSTRAINTS, MIA_TSTF_CONSTRAINTS, mia_threshold, mia_tstf
    from attacks.rmia import MIA_RMIA_CONSTRAINTS, mia_rmia
    from attacks.seed_replay import SEED_REPLAY_CONSTRAINTS, seed_replay

    for name, fn, constraints in (
        ("mia-tstf", mia_tstf, MIA_TSTF_CONSTRAINTS),
        ("mia-threshold", mia_threshold, MIA_THRESHOLD_CONSTRAINTS),
        ("mia-lira", mia_lira, MIA_LIRA_CONSTRAINTS),
        ("mia-rmia", mia_rmia, MIA_RMIA_CONSTRAINTS),
        ("link-steal", link_steal, LINK_STEAL_CONSTRAINTS),
        ("linkteller", linkteller, LINKTELLER_CONSTRAINTS),
        ("embedding-probe", embedding_probe, EMBEDDING_PROBE_CONSTRAINTS),
        ("seed-replay", seed_replay, SEED_REPLAY_CONSTRAINTS),
    ):
        register_attack(name, constraints)(fn)


_register_builtin()

__all__ = [
    "attack_constraints",
    "attack_settings",
    "available_attacks",
    "check_settings",
    "describe_settings",
    "get_attack",
    "register_attack",
    "run",
]
