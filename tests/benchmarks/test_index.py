"""benchmarks/README.md is the index of the benchmarks: every script is listed with its command,
every file under benchmarks/results/ is named as some script's output, and every page of the
docs' benchmark section includes a result file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
README = (BENCH / "README.md").read_text(encoding="utf-8")


def test_every_script_is_listed():
    scripts = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert scripts, "no benchmark scripts found"
    assert [s for s in scripts if f"`{s}`" not in README] == []


def test_every_result_file_is_named_by_the_index():
    """A file is named by its path under ``results/``, or (for a part of a merged record) by
    the folder it lives in; a name pattern (``baselines-DATASET.md``) counts for its family."""
    unnamed = []
    for path in sorted((BENCH / "results").rglob("*")):
        if path.is_dir() or path.name.startswith("."):
            continue
        rel = path.relative_to(BENCH).as_posix()  # results/...
        folder = path.parent.relative_to(BENCH).as_posix() + "/"
        family = re.sub(r"-[^-/.]+(\.\w+)$", r"-DATASET\1", rel)
        if rel not in README and folder not in README and family not in README:
            unnamed.append(rel)
    assert unnamed == [], "result files no script's row names; add the row or remove the file"


def test_every_benchmark_docs_page_includes_an_existing_result():
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    missing = []
    for page in pages:
        for included in re.findall(r'--8<-- "([^"]+)"', page.read_text(encoding="utf-8")):
            if not (ROOT / included).is_file():
                missing.append(f"{page.name}: {included}")
    assert missing == []
    listed = {p.stem for p in pages if p.stem != "index"}
    results = {p.stem for p in (BENCH / "results").glob("*.md")}
    assert results - listed == set(), "result pages missing from docs/benchmarks/"
