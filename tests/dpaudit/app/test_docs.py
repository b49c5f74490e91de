"""The documentation site: ``mkdocs build --strict`` passes, and every ``dpaudit`` subcommand has
its page under ``docs/commands/`` that names every option the parser defines; the Python example
of docs/canaries.md runs."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMAND_PAGES = ROOT / "docs" / "commands"


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser captured")
        self.parser = parser


def _cli_parser() -> argparse.ArgumentParser:
    """The parser of the ``dpaudit`` console script (``[project.scripts]`` in pyproject.toml),
    captured at its first ``parse_args`` call, so the test does not depend on where the CLI
    module builds it."""
    match = re.search(r'^dpaudit\s*=\s*"([\w.]+):(\w+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml declares no `dpaudit` console script"
    main = getattr(importlib.import_module(match.group(1)), match.group(2))

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = capture
    try:
        main([])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError("the dpaudit entry point never parsed its arguments")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = _cli_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the dpaudit parser has no subcommands")


def _names(subparser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``subparser`` (``-h`` included) and every positional's name."""
    names = []
    for action in subparser._actions:
        names += action.option_strings or [action.metavar or action.dest]
    return names


def test_every_subcommand_has_a_page_naming_every_option():
    commands = _subcommands()
    assert {"train", "audit", "compare"} <= set(commands)
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = {}
    for name, subparser in commands.items():
        page = COMMAND_PAGES / f"{name}.md"
        assert page.is_file(), f"`dpaudit {name}` has no page: add docs/commands/{name}.md (and to mkdocs.yml's nav)"
        assert f"commands/{name}.md" in nav, f"docs/commands/{name}.md is not in mkdocs.yml's nav"
        text = page.read_text(encoding="utf-8")
        absent = [n for n in _names(subparser) if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]
        if absent:
            missing[name] = absent
    assert not missing, f"options not named on their command's page: {missing}"
    stale = {p.stem for p in COMMAND_PAGES.glob("*.md")} - set(commands) - {"index"}
    assert not stale, f"pages for commands the CLI does not have: {sorted(stale)}"


def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
            "." in module and importlib.util.find_spec(module) is None
        ):
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="dpaudit.accounting.PrivacyLedger"' in api


def test_canaries_fit_function_example_runs(data_root, monkeypatch, capsys):
    """docs/canaries.md's "Canaries through your fit function": its Python block, as written, on
    the session's copy of Cora, prints what its comment says."""
    text = (ROOT / "docs" / "canaries.md").read_text(encoding="utf-8")
    section = text.split("## Canaries through your fit function", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    expected = block.rsplit("# ", 1)[1].split("(")[0].strip()
    monkeypatch.setenv("DPAUDIT_DATA", str(data_root))
    exec(compile(block, "docs/canaries.md", "exec"), {"__name__": "docs_canaries"})  # our own docs' code
    assert capsys.readouterr().out.strip().splitlines()[-1] == expected
