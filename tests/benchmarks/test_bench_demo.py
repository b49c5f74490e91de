"""The README's demo figures come from a recorded run (issue 49): the numbers it quotes are those of
benchmarks/results/demo.md, which benchmarks/bench_demo.py writes from runs of ``dpaudit demo``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())  # one space between words
DEMO = (ROOT / "benchmarks" / "results" / "demo.md").read_text(encoding="utf-8")


def _models() -> dict[tuple[str, str], dict[str, str]]:
    lines = [line for line in DEMO.splitlines() if line.startswith("| ")]
    header = next(line for line in lines if line.startswith("| defense |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines]
    return {(r["defense"], r["ε"]): r for r in rows if r.get("defense") not in (None, "defense", "---")}


def _two_places(cell: str) -> str:
    """``0.440–0.520`` → ``0.44–0.52`` (the README's precision)."""
    return "–".join(f"{float(x):.2f}" for x in cell.split("–"))


def test_the_readme_quotes_the_recorded_runs():
    runs = int(re.search(r"(\d+) run\(s\) of `dpaudit demo`", DEMO).group(1))
    assert f"from {['zero', 'one', 'two', 'three', 'four', 'five'][runs]} recorded runs" in README
    assert "benchmarks/results/demo.md" in README and f"bench_demo.py --runs {runs}" in README


def test_the_readme_figures_are_the_tables():
    models = _models()
    for defense in ("gcn", "sage", "gap-inf", "dpar-nodp", "mlp"):
        accuracy = models[(defense, "∞")]["test accuracy"]
        assert f"{defense} {accuracy}" in README, (defense, accuracy)
    one, four = (_two_places(models[("mlp-dp", e)]["test accuracy"]) for e in ("1", "4"))
    assert f"mlp-dp {one} at ε = 1, {four} at ε = 4" in README
    broken = [models[("zoo-mlp-dp-noise-div10", e)] for e in ("1", "4")]
    assert f"certified ε ≥ {broken[1]['canary-certified ε ≥']}" in README
    assert f"certified {broken[0]['canary-certified ε ≥']} by" in README
