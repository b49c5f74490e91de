"""Your own training code as a defense: a plain function ``fit(dataset, split)`` that returns a
trained torch module, with the privacy **you claim** for it.

>>> def fit(dataset, split):                       # your code: any training loop
...     model = MyGCN(dataset.num_features, dataset.num_classes)
...     ...                                        # train on split.train of dataset.data
...     return model                               # called as model(x, edge_index) -> logits
>>> recipe = FitFunction(fit, epsilon=1.0, delta=1e-5, unit="node", seed=0)   # doctest: +SKIP
>>> released = recipe.fit(dataset, split)                                     # doctest: +SKIP

:class:`FitFunction` is a :class:`~dpaudit.training.defense.Defense` whose ``_fit`` calls your
function and wraps what it returns with :func:`dpaudit.training.adapters.adapt`, so every
workflow that trains through a defense's ``fit`` (the canary audit,
:func:`dpaudit.app.workflows.canary.canary_audit`) trains your code the same way: seeded with
the run's seed (:func:`dpaudit.runtime.seed_everything`), given **only** the dataset and the
split to train on — for a canary run, the base graph with the canaries its coins included and
nothing else (no design, no coins).

What your function returns:

* a ``torch.nn.Module`` called as ``module(x, edge_index)`` (PyG style) or ``module(x)`` (an
  MLP), returning logits — which one is read from its ``forward`` signature (an Opacus
  ``GradSampleModule`` is read through the module it wraps; see :func:`module_input`);
* or an adapted model (``adapt(module, dataset, split=split, input=..., output=...)``) when the
  signature cannot tell, or the module returns probabilities; the audit's claim replaces the
  (absent) claim of the adapted model, and a different claim there is refused.

The claim (ε, δ, unit) is the user's statement, never a proven guarantee: the model's spec is
``sound: false`` with :data:`~dpaudit.training.adapters.USER_STATED` and the audit tests it as
a hypothesis. ``epsilon = inf`` states no claim (a non-private model).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from dpaudit.accounting.spec import PrivacySpec
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.model import ReleasedModel
from dpaudit.training.adapters import AdaptedModel, adapt
from dpaudit.training.defense import Defense

UNITS = ("node", "edge")


#: the module name a file loaded by :func:`load_fit_function` is imported under (plus a hash of its path)
FILE_MODULE_PREFIX = "dpaudit_user_fit_"


def function_name(fit: Callable) -> str:
    """``module:qualname`` of a function, ``file.py:qualname`` for one loaded from a file (what a
    result prints as the recipe).

    Args:
        fit: the function.

    Returns:
        Its name.
    """
    module = getattr(fit, "__module__", None) or "?"
    if module.startswith(FILE_MODULE_PREFIX) and getattr(sys.modules.get(module), "__file__", None):
        module = Path(sys.modules[module].__file__).name
    return f"{module}:{getattr(fit, '__qualname__', type(fit).__name__)}"


def check_fit_function(fit: Any, label: str = "fit") -> Callable:
    """``fit`` if it is a callable that accepts ``(dataset, split)``; else one clear
    :class:`ConfigurationError` naming what it is (before any data is loaded).

    Args:
        fit: the candidate.
        label: prefix of the error message.

    Returns:
        ``fit``.

    Raises:
        ConfigurationError: not a callable taking two positional arguments.
    """
    if not callable(fit) or isinstance(fit, type):
        raise ConfigurationError(f"{label}: expected a function fit(dataset, split), got {type(fit).__name__} {fit!r}")
    try:
        signature = inspect.signature(fit)
    except (TypeError, ValueError):
        return fit  # a builtin or C callable: nothing to read, its first call says
    try:
        signature.bind(None, None)
    except TypeError:
        raise ConfigurationError(
            f"{label}: {function_name(fit)}{signature} cannot be called as fit(dataset, split) "
            "(two positional arguments: the training GraphDataset and its Split)"
        ) from None
    return fit


def load_fit_function(spec: str) -> Callable:
    """The function ``spec`` names — ``path/to/file.py:function`` or ``package.module:function``
    — checked by :func:`check_fit_function`. **Importing it runs that file's code** (it is the
    user's training code, by their request). A file's folder is put first on ``sys.path``, as
    ``python path/to/file.py`` does, so its sibling modules import (``from model import GCN``
    beside ``fit.py``); a module name is looked up from the current directory first, as
    ``python -m`` does. Every failure is one :class:`ConfigurationError`."""
    source, sep, name = str(spec).rpartition(":")
    label = f"--train {spec}"
    if not sep or not source or not name.isidentifier():
        raise ConfigurationError(f"{label}: expected path/to/file.py:function or package.module:function")
    if source.endswith(".py") or os.sep in source or "/" in source:
        path = Path(source)
        if not path.is_file():
            raise ConfigurationError(f"{label}: no such file {source}")
        module_name = f"{FILE_MODULE_PREFIX}{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ConfigurationError(f"{label}: {source} cannot be imported as a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(module_name, None)
            raise ConfigurationError(f"{label}: importing {source} raised {type(exc).__name__}: {exc}") from exc
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(source)
        except Exception as exc:
            raise ConfigurationError(f"{label}: importing {source} raised {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, name):
        raise ConfigurationError(f"{label}: {source} defines no {name}")
    return check_fit_function(getattr(module, name), label)


def module_input(module: torch.nn.Module) -> str | None:
    """``"graph"`` when ``module.forward`` takes two or more positional arguments
    (``module(x, edge_index)``), ``"features"`` when it takes one (``module(x)``), ``None`` when
    its signature cannot say (``forward(*args)``). A wrapper whose forward takes ``*args`` and
    that holds its model as ``_module`` (Opacus' ``GradSampleModule``) or ``module``
    (``DataParallel``) is read through the wrapped model.

    Args:
        module: the user's module.

    Returns:
        ``"graph"``, ``"features"`` or ``None``.
    """
    seen = set()
    while isinstance(module, torch.nn.Module) and id(module) not in seen:
        seen.add(id(module))
        try:
            params = list(inspect.signature(module.forward).parameters.values())
        except (TypeError, ValueError):
            return None
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
            module = getattr(module, "_module", None) or getattr(module, "module", None)
            continue
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if not positional:
            return None
        return "features" if len(positional) == 1 else "graph"
    return None


def claim_spec(epsilon: float, delta: float, unit: str | None) -> PrivacySpec | None:
    """The user's claim as a spec (``None``: no claim, ε = ∞).

    Args:
        epsilon: the claimed ε (∞: no claim).
        delta: the claimed δ.
        unit: the claim's unit.

    Returns:
        The spec, or ``None``.
    """
    if not math.isfinite(epsilon):
        return None
    return PrivacySpec(
        epsilon=float(epsilon),
        delta=float(delta),
        unit=unit,
        accountant="stated by the user",
        target_epsilon=float(epsilon),
    )


class FitFunction(Defense):
    """A user's ``fit(dataset, split)`` behind the defense interface (module docstring).

    ``unit`` is the claim's privacy unit (``"node"`` or ``"edge"``); ``epsilon`` (``inf``: no
    claim) and ``delta`` (a number or ``"auto"``, resolved from the dataset's declared size as
    for every defense) complete it.

    Args:
        fit: the user's ``fit(dataset, split)``.
        epsilon: the claimed ε.
        delta: the claimed δ, or ``"auto"``.
        unit: ``"node"`` or ``"edge"``.
        seed: seed set before ``fit`` runs.
        device: torch device, or ``"auto"``.

    Raises:
        ConfigurationError: an unknown unit or a ``fit`` that cannot be called as ``fit(dataset, split)``.
    """

    name: ClassVar[str] = "user-fit"
    summary: ClassVar[str] = "your own training function, with the privacy you claim for it"

    def __init__(
        self,
        fit: Callable,
        epsilon: float | str | None = math.inf,
        delta: float | str | None = "auto",
        unit: str = "node",
        seed: int = 0,
        device: str | torch.device = "auto",
    ):
        if unit not in UNITS:
            raise ConfigurationError(f"the claim's unit must be one of {', '.join(UNITS)}, got {unit!r}")
        self.fit_function = check_fit_function(fit)
        self.unit = unit  # the instance's claim (the class attribute of a registered defense)
        self.name = function_name(fit)
        super().__init__(epsilon=epsilon, delta=delta, seed=seed, device=device)

    def _fit(self, dataset: GraphDataset, split: Split, delta: float) -> ReleasedModel:
        out = self.fit_function(dataset, split)
        claim = claim_spec(self.epsilon, delta, self.unit)
        if isinstance(out, AdaptedModel):
            stated = out.privacy
            if stated.is_private and (
                claim is None or (stated.epsilon, stated.delta, stated.unit) != (claim.epsilon, claim.delta, claim.unit)
            ):
                raise DPAuditError(
                    f"{self.name} returned a model adapted with the claim (ε = {stated.epsilon:g}, δ = {stated.delta:g}, "
                    f"{stated.unit}); the audit tests {_words(claim)}: state one claim, in the audit"
                )
            module, input, output = out.module, out.input, out.output
        elif isinstance(out, torch.nn.Module):
            module, input, output = out, module_input(out), "logits"
            if input is None:
                raise ConfigurationError(
                    f"{self.name} returned a {type(out).__name__} whose forward signature does not say whether it is "
                    "called as module(x, edge_index) or module(x): return "
                    "dpaudit.training.adapters.adapt(module, dataset, split=split, input='graph' or 'features')"
                )
        else:
            raise DPAuditError(
                f"{self.name} returned {type(out).__name__}: expected a trained torch.nn.Module or an adapted model"
            )
        return adapt(
            module, dataset, split=split, privacy=claim, input=input, output=output, name=self.name, seed=self.seed
        )


def _words(claim: PrivacySpec | None) -> str:
    if claim is None:
        return "no claim (ε = inf)"
    return f"(ε = {claim.epsilon:g}, δ = {claim.delta:g}, {claim.unit})"
