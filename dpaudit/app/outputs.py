"""Output paths checked before any work starts, so a long run never fails at its last write
and never destroys what it did not make.

Every command checks every path it will write — sidecars included — before it trains or
attacks anything:

* :func:`check_output_file` — a JSON result (``attack``, ``canary``);
* :func:`check_report_paths` — an HTML report and its JSON sidecar (``audit``, ``compare``,
  ``report``, ``demo``);
* :func:`check_output_dir` — a folder the command owns (a released model, a study).

The rules, the same for each:

* the target folder is **probed**: a temporary file is created and removed there (folders
  that do not exist yet are created for the probe and removed again). ``os.access`` is no
  test: it says yes to root on ``/proc`` and on read-only mounts.
* a **released model's folder** (one that holds ``model.json`` or ``model.safetensors``) is
  written only by ``train``, which owns it; ``--force`` does not change that.
* an **existing output** is replaced only when it is what the command itself writes (an
  attack result by ``attack``, an audit report by ``audit`` ...), or with ``--force``. A
  study folder is resumed; a released model is replaced only with ``--force`` (training it
  again costs time and privacy budget, and its owner's record goes with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpaudit.errors import DPAuditError
from dpaudit.release import PUBLIC_FILES

# What marks a folder as a study (a released model is marked by any of PUBLIC_FILES).
STUDY_MARKER = "study.json"
# An HTML report made by dpaudit says so in its head (reports/templates/report.html.j2); its
# sidecar carries the schema and kind of reports.aggregate.build_report_data.
REPORT_GENERATOR = '<meta name="generator" content="dpaudit'
REPORT_SCHEMA = "dpaudit.report-data"


class OutputPathError(DPAuditError):
    """An output path that cannot (or must not) be written.

    Attributes:
        args: the one-line error as ``args[0]`` (what is wrong with the output path, and what to do).
    """


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _attack_result(path: Path) -> bool:
    payload = _json(path)
    return isinstance(payload, dict) and isinstance(payload.get("attack"), str) and {"auc", "settings"} <= set(payload)


def _canary_audit(path: Path) -> bool:
    from dpaudit.auditing.results import CANARY_SCHEMA as SCHEMA

    payload = _json(path)
    return isinstance(payload, dict) and payload.get("schema") == SCHEMA


def _report_sidecar(kind: str) -> Callable[[Path], bool]:
    def recognise(path: Path) -> bool:
        payload = _json(path)
        return isinstance(payload, dict) and payload.get("schema") == REPORT_SCHEMA and payload.get("kind") == kind

    return recognise


def _report_html(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            return REPORT_GENERATOR in fh.read(4096)
    except OSError:
        return False


# What each command's output file is, and how an earlier one is recognised.
FILE_KINDS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "attack": ("an attack result", _attack_result),
    "canary": ("a canary audit", _canary_audit),
    "audit-sidecar": ("an audit report's sidecar", _report_sidecar("audit")),
    "study-sidecar": ("a study report's sidecar", _report_sidecar("compare")),
    "report": ("a dpaudit report", _report_html),
}
# The sidecar kind of each report kind (``audit`` writes audit reports; ``compare``,
# ``report`` and ``demo`` write study reports).
REPORT_KINDS = {"audit": "audit-sidecar", "study": "study-sidecar"}


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` is a released model's folder (it holds one of the public files).

    Whether ``path`` holds a released model (any of its public files).

    Args:
        path: a folder.

    Returns:
        ``True`` when it is a released model's folder.
    """
    return any((path / name).is_file() for name in PUBLIC_FILES)


def _probe(folder: Path, target: Path, what: str) -> None:
    """Create and remove a temporary file in ``folder``, creating missing folders for the
    probe and removing them again: what is unwritable fails here, before any work."""
    missing = []
    existing = folder
    while not existing.exists():
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        raise OutputPathError(f"{what} {target}: {existing} is a file, not a folder")
    created: list[Path] = []
    try:
        for path in reversed(missing):
            try:
                path.mkdir()
            except OSError as exc:
                raise OutputPathError(f"{what} {target}: cannot create {path}: {exc.strerror or exc}") from None
            created.append(path)
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".dpaudit-probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise OutputPathError(f"{what} {target}: cannot write in {folder}: {exc.strerror or exc}") from None
    finally:
        for path in reversed(created):
            with contextlib.suppress(OSError):  # something else wrote there meanwhile: leave it
                path.rmdir()


def _refuse_model_folder(target: Path, what: str) -> None:
    folder = target.resolve().parent  # resolved: the parent of "." or "m/.." is not what it spells
    if is_model_folder(folder):
        raise OutputPathError(
            f"{what} {target} is inside the released model {folder}, which only `dpaudit train` writes; "
            "choose another folder"
        )


def check_output_file(path: str | os.PathLike, kind: str, force: bool = False, what: str = "--out") -> Path:
    """``path`` can be written as an output of ``kind`` (a key of :data:`FILE_KINDS`): not a
    directory, not in a released model's folder, not an existing file of another kind (unless
    ``force``), and its folder is writable (probed).

    Args:
        path: the output file.
        kind: what the command writes (a key of ``FILE_KINDS``).
        force: replace a file of another kind.
        what: the option named in messages.

    Returns:
        The path, with ``~`` expanded.

    Raises:
        OutputPathError: the path is empty, a directory, in a model folder, another kind of file, or
            its folder is not writable.
    """
    label, recognise = FILE_KINDS[kind]
    path = Path(path).expanduser()
    if str(path).strip() == "":
        raise OutputPathError(f"{what}: an empty path was given")
    if path.is_dir():
        raise OutputPathError(f"{what} {path} is a directory; give a file name")
    _refuse_model_folder(path, what)
    if path.exists() and not force and not recognise(path):
        raise OutputPathError(
            f"{what} {path} exists and is not {label} written by an earlier run; "
            "choose another name (or pass --force to replace it)"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(f"{what} {path} exists and is not writable")
    _probe(path.parent, path, what)
    return path


def sidecar_path(html: Path) -> Path:
    """The JSON sidecar next to a report (:func:`reports.render.sidecar_path`, without
    importing the renderer and its plotting stack just to check a path).

    Args:
        html: the report's path.

    Returns:
        The sidecar's path (``.json`` in place of the suffix, or appended).
    """
    return html.with_suffix(".json") if html.suffix else html.with_name(html.name + ".json")


def check_report_paths(
    html: str | os.PathLike, kind: str, force: bool = False, what: str = "--out"
) -> tuple[Path, Path]:
    """The HTML report ``html`` and its JSON sidecar can both be written for a report of
    ``kind`` (``"audit"`` or ``"study"``); returns both paths.

    Args:
        html: the report's path.
        kind: ``"audit"`` or ``"study"``.
        force: replace files of another kind.
        what: the option named in messages.

    Returns:
        ``(html, sidecar)``.

    Raises:
        OutputPathError: either path is refused (:func:`check_output_file`), or ``html`` ends in ``.json``.
    """
    html = Path(html).expanduser()
    if html.suffix.lower() == ".json":
        raise OutputPathError(f"{what} {html}: a report path must not end in .json (that name is its JSON sidecar's)")
    check_output_file(html, "report", force=force, what=what)
    sidecar = check_output_file(sidecar_path(html), REPORT_KINDS[kind], force=force, what=f"{what} sidecar")
    return html, sidecar


def folder_kind(path: Path) -> str | None:
    """``"model"``, ``"study"``, ``"empty"``, ``"other"`` for an existing folder; ``None`` if absent.

    What an output folder holds.

    Args:
        path: the folder.

    Returns:
        ``None`` (missing), ``"model"``, ``"study"``, ``"empty"`` or ``"other"``.
    """
    if not path.exists():
        return None
    if is_model_folder(path):
        return "model"
    if (path / STUDY_MARKER).is_file():
        return "study"
    return "empty" if not any(path.iterdir()) else "other"


def check_output_dir(path: str | os.PathLike, kind: str, force: bool = False, what: str = "--out") -> Path:
    """``path`` can hold an output of ``kind`` (``"model"`` or ``"study"``).

    An existing study is resumed; an existing released model is replaced only with ``force``,
    and only by ``train`` (``kind="model"``); a folder of another kind, or a non-empty
    unrelated one, is refused unless ``force``. The folder is probed for writing.

    Args:
        path: the output folder.
        kind: ``"model"`` or ``"study"``.
        force: replace or reuse a folder of another kind.
        what: the option named in messages.

    Returns:
        The path, with ``~`` expanded.

    Raises:
        ValueError: unknown ``kind``.
        OutputPathError: the folder is refused.
    """
    if kind not in ("model", "study"):
        raise ValueError(f"unknown output kind {kind!r}")
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{what} {path} is an existing file, not a folder")
    _refuse_model_folder(path, what)
    found = folder_kind(path)
    if found == "model" and kind != "model":
        raise OutputPathError(
            f"{what} {path} already holds a released model, which only `dpaudit train` writes; choose another folder"
        )
    if found == "model" and not force:
        raise OutputPathError(
            f"{what} {path} already holds a released model; choose another folder (or pass --force to replace it)"
        )
    if found in ("study", "other") and found != kind and not force:
        described = {"study": "a study", "other": "other files"}[found]
        raise OutputPathError(
            f"{what} {path} already holds {described}; choose another folder (or pass --force to write there anyway)"
        )
    _probe(path, path, what)
    return path


# --------------------------------------------------------------------------- one writer per output


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of output ``path``: ``.NAME.dpaudit-lock`` beside it (a released model's
    folder or a report), so that the output itself holds nothing but what the command writes.

    Args:
        path: the output (file or folder).

    Returns:
        The lock file's path: a hidden sibling ``.NAME.dpaudit-lock``.
    """
    path = Path(path).expanduser().absolute()
    return path.with_name(f".{path.name}.dpaudit-lock")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _holder(lock: Path) -> dict | None:
    payload = _json(lock)
    return payload if isinstance(payload, dict) and isinstance(payload.get("pid"), int) else None


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, what: str = "--out"):
    """Hold the lock of output ``path`` while a command writes it: two ``train --out m`` (or two
    ``audit --out a.html``) at once would otherwise both succeed, the first output silently
    replaced. The lock file is created atomically (``O_CREAT | O_EXCL``) and holds the pid, host
    and command of its writer; the second writer refuses in one line naming the first. A lock
    whose process is gone (killed, even by SIGKILL) is stale and taken over. The lock is removed
    on exit, and the folders made for it too when nothing else was put in them.

    Args:
        path: the output; an empty path takes no lock (the output checks refuse it).
        what: the option named in messages.

    Yields:
        Control while the lock is held (``None`` is yielded when no lock is taken).

    Raises:
        OutputPathError: another live process holds the lock.
    """
    import socket
    import sys
    import time

    if str(path).strip() == "":  # the output checks say what is wrong with it
        yield None
        return
    lock = lock_path(path)
    created: list[Path] = []
    folder = lock.parent
    while not folder.exists():
        created.append(folder)
        folder = folder.parent
    try:
        for made in reversed(created):
            made.mkdir()
    except OSError:  # an unwritable place: the output checks refuse it in their words
        yield from _unlocked(created)
        return
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(["dpaudit", *sys.argv[1:]]),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder is None:  # being written this instant, or not ours: look again
                time.sleep(0.05)
                holder = _holder(lock)
            stale = holder is not None and holder.get("host") == me["host"] and not _alive(holder["pid"])
            if stale or (holder is None and time.time() - _mtime(lock) > 60):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
                continue
            who = (
                f"process {holder['pid']} on {holder.get('host')} (`{holder.get('command')}`, since "
                f"{holder.get('since')})"
                if holder
                else "another process"
            )
            raise OutputPathError(
                f"{what} {path} is being written by {who}; wait for it to finish or choose another {what} "
                f"(if no such process runs, remove {lock})"
            ) from None
        except OSError:  # an unwritable place: the output checks refuse it in their words
            yield from _unlocked(created)
            return
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(me, fh)
        break
    else:
        raise OutputPathError(f"{what} {path}: could not take its lock {lock}; try again")
    try:
        yield lock
    finally:
        holder = _holder(lock)
        if holder is not None and holder.get("pid") == me["pid"]:
            with contextlib.suppress(OSError):
                os.unlink(lock)
        for made in created:
            with contextlib.suppress(OSError):  # something else was written there: keep it
                made.rmdir()


def _unlocked(created: list[Path]):
    try:
        yield None
    finally:
        for made in created:
            with contextlib.suppress(OSError):
                made.rmdir()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def study_made_by(directory: str | Path) -> str | None:
    """Which command made the study in ``directory`` (``"demo"``, ``"compare"`` ...); ``None``
    when it holds no study. A study written before ``made_by`` was recorded is told by its
    command line."""
    path = Path(directory) / STUDY_MARKER
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "unknown"
    if not isinstance(meta, dict):
        return "unknown"
    if meta.get("made_by"):
        return str(meta["made_by"])
    command = str(meta.get("command") or "").split()
    return command[1] if len(command) > 1 and command[0] == "dpaudit" else "unknown"
