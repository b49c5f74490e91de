"""Output paths checked before any work starts, so a long run never fails at its last write.

Every command that writes calls one of these first:

* :func:`check_output_file` — a report or JSON file: not a directory, and its folder exists
  (or can be created) and is writable.
* :func:`check_output_dir` — a folder the command owns (a released model, a study): not an
  existing file, and not a folder that already holds something of another kind
  (a study inside a released model, a model inside a study, an unrelated non-empty folder)
  unless ``force``.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpaudit.errors import DPAuditError

# What marks a folder as belonging to one kind of output.
MARKERS = {"model": "model.json", "study": "study.json"}


class OutputPathError(DPAuditError):
    """An output path that cannot (or must not) be written."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _check_writable_parent(path: Path, what: str) -> None:
    existing = _nearest_existing(path.parent)
    if not existing.is_dir():
        raise OutputPathError(f"{what} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path}: folder {existing} is not writable")


def check_output_file(path: str | os.PathLike, what: str = "output file") -> Path:
    """``path`` can be written as a file: not a directory, folder writable (created later)."""
    path = Path(path).expanduser()
    if str(path).strip() == "":
        raise OutputPathError(f"{what}: an empty path was given")
    if path.is_dir():
        raise OutputPathError(f"{what} {path} is a directory; give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(f"{what} {path} exists and is not writable")
    _check_writable_parent(path, what)
    return path


def folder_kind(path: Path) -> str | None:
    """``"model"``, ``"study"``, ``"empty"``, ``"other"`` for an existing folder; ``None`` if absent."""
    if not path.exists():
        return None
    for kind, marker in MARKERS.items():
        if (path / marker).is_file():
            return kind
    return "empty" if not any(path.iterdir()) else "other"


def check_output_dir(path: str | os.PathLike, kind: str, force: bool = False, what: str = "output folder") -> Path:
    """``path`` can hold an output of ``kind`` (``"model"`` or ``"study"``).

    An existing folder of the same kind is reused (a model is replaced, a study resumed); a
    folder of another kind, or a non-empty unrelated one, is refused unless ``force``.
    """
    if kind not in MARKERS:
        raise ValueError(f"unknown output kind {kind!r}")
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{what} {path} is an existing file, not a folder")
    found = folder_kind(path)
    if found is None:
        _check_writable_parent(path, what)
        return path
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path} is not writable")
    if found in (kind, "empty") or force:
        return path
    described = {"model": "a released model", "study": "a study", "other": "other files"}[found]
    raise OutputPathError(
        f"{what} {path} already holds {described}; choose another folder (or pass --force to write there anyway)"
    )
