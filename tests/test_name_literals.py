"""Every part declares itself (issue 48): the core and the report know a defense or an attack by
what it declares (its class, its registration), not by its name. At most 10 string literals
equal to a registered defense or attack name remain in ``dpaudit/`` and ``reports/``, outside
the demo's chosen lists and the zoo's (they choose parts by name on purpose)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the lists that choose parts by name on purpose: the demo's defenses and settings, the zoo
EXEMPT_FILES = {ROOT / "dpaudit" / "app" / "workflows" / "zoo.py"}
EXEMPT_ASSIGNMENTS = {
    ROOT / "dpaudit" / "app" / "commands" / "demo.py": {
        "DEMO_DEFENSES",
        "DEMO_DEFENSE_OVERRIDES",
        "DEMO_ATTACK_SETTINGS",
    }
}
LIMIT = 10


def _exempt_nodes(tree: ast.AST, names: set[str]) -> set[int]:
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(t, ast.Name) and t.id in names
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for inner in ast.walk(node)
    }


def name_literals(names: set[str]) -> list[tuple[str, int, str]]:
    """``(path, line, literal)`` of each string literal equal to one of ``names``."""
    found = []
    for package in ("dpaudit", "reports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in EXEMPT_FILES:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            skip = _exempt_nodes(tree, EXEMPT_ASSIGNMENTS.get(path, set()))
            found += [
                (str(path.relative_to(ROOT)), node.lineno, node.value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                if id(node) not in skip
            ]
    return found


def _registered() -> set[str]:
    import attacks
    from dpaudit.training.registry import available_defenses, get_defense

    defenses = {n for n in available_defenses() if get_defense(n).__module__.split(".")[0] == "defenses"}
    return defenses | {
        n for n in attacks.available_attacks() if attacks.get_attack(n).__module__.startswith("attacks.")
    }


def test_at_most_ten_defense_or_attack_names_are_written_in_the_core_and_the_report():
    found = name_literals(_registered())
    assert len(found) <= LIMIT, "\n".join(f"{p}:{line}: {value!r}" for p, line, value in found)


def test_the_count_sees_a_name_table():
    """The checker itself: a table keyed by names is counted, an exempt list is not."""
    tree = ast.parse('TABLE = {"gcn": 1.0, "mia-lira": 2}\nDEMO_DEFENSES = ("gcn",)')
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in {"gcn", "mia-lira"}]
    skip = _exempt_nodes(tree, {"DEMO_DEFENSES"})
    kept = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value in {"gcn", "mia-lira"} and id(n) not in skip
    ]
    assert len(constants) == 3 and sorted(kept) == ["gcn", "mia-lira"]
