"""The public API documents its arguments Google-style (issue 48): at least 80 % of the public
callables of dpaudit, defenses, attacks and reports carry an ``Args:`` section (a dataclass may use
``Attributes:``; a callable taking nothing but self/cls needs only a docstring). Public: in a
module whose path has no part starting with ``_`` (``__init__`` excepted), named without a leading
``_``; properties and ``__init__`` are documented on their class."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dpaudit", "defenses", "attacks", "reports")
#: the share of public callables that must document their arguments
REQUIRED = 0.80


def _arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def _is_property(fn) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id in ("property", "overload"))
        or (isinstance(d, ast.Attribute) and d.attr == "setter")
        for d in fn.decorator_list
    )


def documented(body, where: str, out: list[tuple[str, bool]]) -> None:
    """Append ``(name, documents its arguments)`` for each public callable in ``body``."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("_") or _is_property(node):
                continue
            doc = ast.get_docstring(node) or ""
            out.append((f"{where}{node.name}", "Args:" in doc if _arguments(node) else bool(doc)))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node) or ""
            out.append((f"{where}{node.name}", "Args:" in doc or "Attributes:" in doc))
            documented(node.body, f"{where}{node.name}.", out)


def public_callables() -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if any(p.startswith("_") and p != "__init__.py" for p in parts):
                continue
            documented(ast.parse(path.read_text(encoding="utf-8")).body, f"{path.relative_to(ROOT)}:", out)
    return out


def test_most_public_callables_document_their_arguments():
    found = public_callables()
    share = sum(ok for _, ok in found) / len(found)
    missing = [name for name, ok in found if not ok]
    assert share >= REQUIRED, f"{share:.1%} of {len(found)} document their arguments; missing e.g. {missing[:20]}"


def test_the_counter_sees_a_missing_args_section():
    tree = ast.parse('def f(x):\n    """No sections."""\n\ndef g():\n    """Nothing to list."""\n')
    out: list[tuple[str, bool]] = []
    documented(tree.body, "", out)
    assert out == [("f", False), ("g", True)]
