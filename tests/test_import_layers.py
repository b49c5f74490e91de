"""Every import points down: an AST import graph of the product (function-local imports
included, ``TYPE_CHECKING`` blocks excluded) has no cycle, the core never imports ``defenses``,
``attacks`` or ``reports`` outside its composition layer :mod:`dpaudit.app`, nothing in the core
imports that layer, and the core's layers import only the layers below them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dpaudit", "defenses", "attacks", "reports")
#: the core's layers, lowest first; a module may import its own layer and the ones before it
#: (layers on one line are siblings: neither imports the other)
LAYERS = (
    ("dpaudit.errors",),
    ("dpaudit.runtime", "dpaudit.progress", "dpaudit.seeds", "dpaudit.assignments"),
    ("dpaudit.accounting",),
    ("dpaudit.data",),
    ("dpaudit.nn",),
    ("dpaudit.release",),
    ("dpaudit.auditing", "dpaudit.training"),
    ("dpaudit.whitebox",),
    ("dpaudit.testing",),
    ("dpaudit.app",),
)


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the product packages."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = {
            id(node)
            for branch in ast.walk(tree)
            if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
            for node in ast.walk(branch)
        }
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                targets |= {t for t in (_resolve(a.name, modules) for a in node.names) if t}
            elif isinstance(node, ast.ImportFrom):
                base = (
                    ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                    if node.level
                    else (node.module or "")
                )
                for alias in node.names:
                    target = _resolve(f"{base}.{alias.name}", modules) or _resolve(base, modules)
                    if target:
                        targets.add(target)
        targets.discard(module)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str) -> int | None:
    for rank, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return rank
    return None


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_product_has_no_import_cycle(graph):
    assert cycles(graph) == []


def test_only_the_composition_layer_imports_defenses_attacks_and_reports(graph):
    upward = sorted(
        (m, t)
        for m, targets in graph.items()
        if m.startswith("dpaudit.") and not m.startswith("dpaudit.app")
        for t in targets
        if t.split(".")[0] in ("defenses", "attacks", "reports")
    )
    assert upward == []
    into_app = sorted(
        (m, t)
        for m, targets in graph.items()
        if m != "dpaudit" and not m.startswith("dpaudit.app")
        for t in targets
        if t.startswith("dpaudit.app")
    )
    assert into_app == []  # the facade (dpaudit/__init__) excepted


def test_the_cores_layers_import_only_downward(graph):
    wrong = []
    for module, targets in graph.items():
        rank = _layer(module)
        if rank is None:
            continue
        for target in targets:
            other = _layer(target)
            # a higher layer, or a sibling of the same rank (auditing and training never meet)
            if other is not None and (other > rank or (other == rank and target.split(".")[1] != module.split(".")[1])):
                wrong.append((module, target))
    assert sorted(wrong) == []


def test_every_core_module_lives_in_a_layer(graph):
    assert sorted(m for m in graph if m.startswith("dpaudit.") and _layer(m) is None) == []


def test_the_checks_catch_a_cycle_and_an_upward_import():
    """The checker itself: a made-up graph with a cycle and a core module importing upward."""
    made_up = {"dpaudit.data.a": {"dpaudit.release.b"}, "dpaudit.release.b": {"dpaudit.data.a"}}
    assert cycles(made_up) == [["dpaudit.data.a", "dpaudit.release.b"]]
    assert _layer("dpaudit.data.a") < _layer("dpaudit.release.b")
