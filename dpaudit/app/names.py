"""The names of the installed defenses and attacks, known without importing them.

Importing a defense or an attack imports torch and PyG (about 10 CPU-seconds on a cold start),
so the command line checks a name here first and refuses an unknown one in a fraction of a
second. The names are read from the source of the ``defenses`` and ``attacks`` packages, where
each part registers itself (a class decorated with ``register_defense`` and its ``name``; a
function decorated with ``register_attack("name", ...)``): no list is kept here, and a test
compares what is read with the registries. Two declarations are read the same way, so that
refusals that need them come before torch too: each built-in defense's privacy ``unit``
(:func:`builtin_units`: a non-private defense takes only ε = ∞) and each built-in attack's
settings (:func:`builtin_attack_settings`: the counts whose caps ``--allow-long`` lifts). A name not found is still looked up in the registry
— loading the plugins — whenever another package registers ``dpaudit.plugins`` entry points, or
a defense or attack was registered in this process.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

from dpaudit.errors import ConfigurationError

#: the entry points (``dpaudit.plugins``) this distribution declares
BUILTIN_PLUGINS = ("defenses", "attacks")


def _package_sources(package: str) -> list[Path]:
    """The ``.py`` files of top-level ``package``, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(p for root in spec.submodule_search_locations for p in Path(root).rglob("*.py"))


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else None


def _registered_in(path: Path, decorator: str) -> list[str]:
    """The names ``path`` registers with ``decorator``: a decorated class's ``name = "..."``
    (``register_defense``), or the decorator call's first argument (``register_attack``)."""
    text = path.read_text(encoding="utf-8")
    if decorator not in text:
        return []
    names = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for deco in node.decorator_list:
            if _decorator_name(deco) != decorator:
                continue
            if isinstance(deco, ast.Call) and deco.args and isinstance(deco.args[0], ast.Constant):
                names.append(str(deco.args[0].value))
            elif isinstance(node, ast.ClassDef):
                names += [
                    str(item.value.value)
                    for item in node.body
                    if isinstance(item, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "name" for t in item.targets)
                    and isinstance(item.value, ast.Constant)
                ]
    return names


def _constant(node: ast.expr):
    """The value of a literal (``"node"``, ``None``); raises ValueError for anything else."""
    return ast.literal_eval(node)


def _class_attribute(classes: dict[str, ast.ClassDef], cls: ast.ClassDef, attribute: str, seen=()):
    """``attribute`` of ``cls`` as its source assigns it, looked up through its bases in
    ``classes`` (the package's classes by name) as Python's attribute lookup would; ``Defense``
    (the root, :class:`dpaudit.training.defense.Defense`) gives ``None``. Raises LookupError
    where the source does not say (a base outside the package, a computed value)."""
    for item in cls.body:
        targets = (
            item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(item, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == attribute for t in targets) and item.value is not None:
            try:
                return _constant(item.value)
            except ValueError:
                raise LookupError(attribute) from None
    for base in cls.bases:
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if name == "Defense":
            return None
        if name in classes and name not in seen:
            return _class_attribute(classes, classes[name], attribute, (*seen, cls.name))
    raise LookupError(attribute)


@functools.cache
def builtin_units() -> dict[str, str | None]:
    """Each built-in defense's privacy unit (``"node"``, ``"edge"``; ``None``: not private), read
    from the ``defenses`` package's source without importing it; a defense whose unit the source
    does not state plainly is left out (its class decides, after the import). A test compares
    this with ``get_defense(name).unit``.

    Returns:
        Defense name → unit.
    """
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in _package_sources("defenses")]
    classes = {node.name: node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    units = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if not any(_decorator_name(d) == "register_defense" for d in node.decorator_list):
                continue
            try:
                name, unit = _class_attribute(classes, node, "name"), _class_attribute(classes, node, "unit")
            except LookupError:
                continue
            units[str(name)] = unit
    return units


@functools.cache
def builtin_attack_settings() -> dict[str, tuple[str, ...]]:
    """Each built-in attack's settings (its function's keyword-only parameters, which
    :func:`attacks.attack_settings` reads from the signature), read from the ``attacks``
    package's source without importing it. A test compares this with the registry.

    Returns:
        Attack name → its setting names.
    """
    out = {}
    for path in _package_sources("attacks"):
        text = path.read_text(encoding="utf-8")
        if "register_attack" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if _decorator_name(deco) != "register_attack" or not isinstance(deco, ast.Call) or not deco.args:
                    continue
                if isinstance(deco.args[0], ast.Constant):
                    out[str(deco.args[0].value)] = tuple(a.arg for a in node.args.kwonlyargs)
    return out


@functools.cache
def installed_names(package: str, decorator: str) -> tuple[str, ...]:
    """The names registered in ``package``'s source with ``decorator``, sorted (no import).

    Args:
        package: ``"defenses"`` or ``"attacks"``.
        decorator: ``"register_defense"`` or ``"register_attack"``.

    Returns:
        The names, sorted.
    """
    return tuple(sorted({n for path in _package_sources(package) for n in _registered_in(path, decorator)}))


def builtin_defenses() -> tuple[str, ...]:
    """The defenses the ``defenses`` package registers (``dpaudit.training.registry.available_defenses()``)."""
    return installed_names("defenses", "register_defense")


def builtin_attacks() -> tuple[str, ...]:
    """The attacks the ``attacks`` package registers (``attacks.available_attacks()``)."""
    return installed_names("attacks", "register_attack")


def _other_plugins() -> bool:
    """Whether an installed package other than this one registers plugins (entry points are
    package metadata: reading them imports nothing)."""
    from importlib import metadata

    return any(entry.value not in BUILTIN_PLUGINS for entry in metadata.entry_points(group="dpaudit.plugins"))


def _registered_here(module: str, attribute: str) -> set[str]:
    """Names registered in this process (a registry already imported), e.g. by a library user."""
    loaded = sys.modules.get(module)
    return set(getattr(loaded, attribute, {}) or {})


def check_defense_name(name: str | None) -> None:
    """Refuse an unknown defense name before torch is imported (see the module docstring).

    Refuse an unknown defense name without importing torch or any defense.

    Names are read from the defenses' source; when another plugin may register more, the registry
    decides later.

    Args:
        name: the name; ``None`` passes.

    Raises:
        ConfigurationError: the name is unknown (the message lists the built-in ones).
    """
    if name is None or name in builtin_defenses() or name in _registered_here("dpaudit.training.registry", "_DEFENSES"):
        return
    if _other_plugins():
        return  # a plugin may register it: the registry decides
    raise ConfigurationError(f"unknown defense {name!r}; available: {', '.join(builtin_defenses())}")


def check_attack_name(name: str | None) -> None:
    """Refuse an unknown attack name before torch is imported (see the module docstring).

    Refuse an unknown attack name without importing torch or any attack.

    Args:
        name: the name; ``None`` passes.

    Raises:
        ConfigurationError: the name is unknown (the message lists the built-in ones).
    """
    if name is None or name in builtin_attacks() or name in _registered_here("attacks", "_ATTACKS"):
        return
    if _other_plugins():
        return
    raise ConfigurationError(f"unknown attack {name!r}; available: {', '.join(builtin_attacks())}")


def check_names(defenses=None, attacks=None) -> None:
    """Every name of comma-separated (or listed) ``defenses`` and ``attacks``; empty items are
    left to the command's own checks.

    Args:
        defenses: defense names, a list or a comma-separated string; ``None``: not checked.
        attacks: attack names, a list or a comma-separated string; ``None``: not checked.

    Raises:
        ConfigurationError: a name is unknown.
    """
    for value, check in ((defenses, check_defense_name), (attacks, check_attack_name)):
        if value is None:
            continue
        items = value.split(",") if isinstance(value, str) else value
        for item in items:
            if str(item).strip():
                check(str(item).strip())
