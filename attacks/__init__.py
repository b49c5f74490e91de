"""Attacks on released models, by name.

>>> from attacks import run, available_attacks
>>> available_attacks()
['embedding-probe', 'link-steal', 'linkteller', 'mia-lira', 'mia-rmia', 'mia-threshold', 'mia-tstf']
>>> result = run("link-steal", model, dataset, runs=3)          # doctest: +SKIP

Every attack consumes only the released-model interface (``predict_proba``, ``embed``,
``privacy``, ``card``) plus what its threat model gives the attacker, and returns a
:class:`dpaudit.auditing.results.AttackResult` with the statistics of :mod:`dpaudit.auditing.statistics`;
:func:`run` adds ``extra["low_fpr"]``, every low-FPR TPR as mean ± sd over the attack's runs
with its number of negatives (:mod:`dpaudit.auditing.low_fpr`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

from dpaudit.auditing.low_fpr import low_fpr_summary
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel

_ATTACKS: dict[str, Callable[..., AttackResult]] = {}


def register_attack(name: str):
    """Decorator: make ``fn(model, dataset=None, **settings) -> AttackResult`` available as ``name``."""

    def decorate(fn):
        if name in _ATTACKS and _ATTACKS[name] is not fn:
            raise RuntimeError(f"attack {name!r} registered twice")
        _ATTACKS[name] = fn
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
    fn = get_attack(name)
    return {
        p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


# Settings that count something (bootstrap draws, repetitions, nodes, pairs, models,
# neighbours, units): below 1 they crash late (n_boot=0) or quietly change the audit
# (max_members=-5 becomes a negative slice of the audit pairs: exit 0, AUC 1.000).
COUNTS = frozenset({
    "n_boot", "runs", "max_members", "num_shadows", "num_references", "max_pairs", "num_pairs", "hidden", "top_k",
    "knn_k", "max_plot_nodes", "population_size", "shadow_nodes_per_class", "label_probe_nodes",
})  # fmt: skip
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


# Settings with a range of their own: (what the range is, the test).
RANGES = {
    "a": ("in [0, 1]", lambda v: 0 <= v <= 1),
    "known_fraction": ("in (0, 1)", lambda v: 0 < v < 1),
    "gamma": ("> 0", lambda v: v > 0),
    "delta": ("> 0", lambda v: v > 0),
    "pr_nodes": ("0 (skip) or >= 2", lambda v: v == 0 or v >= 2),
}


def setting_choices() -> dict[str, tuple[str, ...]]:
    """Settings that name one of a few options (the G-BASE protocol and query mode of
    :mod:`attacks.lira`, RMIA's tie-break), with the options."""
    from attacks.lira import PROTOCOLS, QUERIES
    from attacks.rmia import TIE_BREAKS

    return {"query": QUERIES, "protocol": PROTOCOLS, "tie_break": TIE_BREAKS}


def check_attack_ranges(name: str, settings: dict) -> None:
    """Each numeric setting of attack ``name`` in its range (counts ≥ 1, widths capped, the
    fractions and scales of :data:`RANGES`) and each named option among
    :func:`setting_choices`, checked before the model or data is loaded; the types are
    :func:`check_setting_types`'. ``None`` keeps a setting's default."""
    from dpaudit.training.defense import MAX_WIDTH

    choices = setting_choices()
    if settings.get("protocol") == "g-base" and settings.get("query") == "graph":
        raise ConfigurationError(f"attack {name!r}: protocol=g-base queries features only; drop query=graph")
    for key, value in settings.items():
        if key == "seed" and value is not None:
            from dpaudit.seeds import check_seed

            check_seed(value, f"attack {name!r}: setting seed")
        if key in choices and value is not None and value not in choices[key]:
            raise ConfigurationError(
                f"attack {name!r}: setting {key}={value!r} must be one of {', '.join(choices[key])}"
            )
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        bad = None
        if not math.isfinite(value):
            bad = "must be finite"
        elif key in COUNTS and (not isinstance(value, int) or value < 1):
            bad = "must be an integer >= 1"
        elif key == "hidden" and value > MAX_WIDTH:
            bad = f"must be <= {MAX_WIDTH}"
        elif key in RANGES and not RANGES[key][1](value):
            bad = f"must be {RANGES[key][0]}"
        if bad:
            raise ConfigurationError(f"attack {name!r}: setting {key}={value!r} {bad}")


def check_setting_types(name: str, settings: dict) -> None:
    """Each setting must have the type of its default (ints for ints, numbers for floats ...)."""
    defaults = attack_settings(name)
    for key, value in settings.items():
        default = defaults.get(key)
        if value is None or default is None or key in ("data_root", "device", "seed"):
            continue
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, (list, tuple)):
            ok = isinstance(value, (list, tuple, str))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            kind = "a list" if isinstance(default, (list, tuple)) else f"a {type(default).__name__}"
            raise ConfigurationError(f"attack {name!r}: setting {key}={value!r} must be {kind} (default {default!r})")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ConfigurationError(f"attack {name!r}: setting {key}={value!r} must not be negative")
    # ranges too, also for settings whose default is None (max_members, a), which the type
    # check above cannot see: attacks.run and every command share one rule
    check_attack_ranges(name, settings)


def run(name: str, model: ReleasedModel, dataset: GraphDataset | None = None, **settings) -> AttackResult:
    """Run attack ``name`` against ``model``; ``dataset`` defaults to the one named in its card.

    Unknown settings are a :class:`~dpaudit.errors.ConfigurationError`.
    """
    fn = get_attack(name)
    known = attack_settings(name)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ConfigurationError(f"attack {name!r}: unknown settings {unknown}; known: {sorted(known)}")
    check_setting_types(name, settings)
    if not isinstance(model, ReleasedModel):
        raise ConfigurationError("attacks need a dpaudit ReleasedModel (wrap your module with dpaudit.training.adapters.adapt)")
    result = fn(model, dataset, **settings)
    result.extra["low_fpr"] = low_fpr_summary(result.runs)
    return result


def _register_builtin() -> None:
    from attacks.embedding import embedding_probe
    from attacks.link_stealing import link_steal
    from attacks.linkteller import linkteller
    from attacks.lira import mia_lira
    from attacks.membership import mia_threshold, mia_tstf
    from attacks.rmia import mia_rmia

    for name, fn in (
        ("mia-tstf", mia_tstf),
        ("mia-threshold", mia_threshold),
        ("mia-lira", mia_lira),
        ("mia-rmia", mia_rmia),
        ("link-steal", link_steal),
        ("linkteller", linkteller),
        ("embedding-probe", embedding_probe),
    ):
        register_attack(name)(fn)


_register_builtin()

__all__ = ["attack_settings", "check_setting_types", "available_attacks", "get_attack", "register_attack", "run"]
