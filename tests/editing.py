"""Hand-edited copies of a saved model's public files: the tampering the load checks must refuse."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from dpaudit.release import PUBLIC_FILES


def edited_copy(source: str | Path, target: str | Path, edit: Callable[[dict], None]) -> Path:
    """Copy the two public files of ``source`` into ``target`` and apply ``edit`` to the parsed
    ``model.json`` (the owner's record stays behind, as in a third party's copy)."""
    source, target = Path(source), Path(target)
    target.mkdir(parents=True)
    for name in PUBLIC_FILES:
        (target / name).write_bytes((source / name).read_bytes())
    meta = json.loads((target / "model.json").read_text())
    edit(meta)
    (target / "model.json").write_text(json.dumps(meta))
    return target
