"""Run-time plumbing: devices, seeds, atomic writes, library versions."""

from __future__ import annotations

import functools
import json
import os
import random
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit.errors import ConfigurationError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto`` picks CUDA when available; ``cuda`` without a GPU is a clear error.

    Args:
        device: ``"auto"``, ``"cpu"``, ``"cuda[:i]"``, a ``torch.device`` or ``None`` (auto).

    Returns:
        The device.

    Raises:
        ConfigurationError: CUDA requested without a GPU, or an unknown name.
    """
    if isinstance(device, torch.device):
        return device
    name = (device or "auto").lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigurationError("device 'cuda' requested but no CUDA GPU is available")
        return torch.device(name)
    if name == "cpu":
        return torch.device("cpu")
    raise ConfigurationError(f"unknown device {device!r}; use auto, cpu or cuda")


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory ``device`` has in all: the GPU's, or the machine's RAM capped by this
    process's cgroup limit (a container sees the host's RAM); ``None`` when unknown.

    Args:
        device: the device.

    Returns:
        Bytes, or ``None``.
    """
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) so a run is reproducible on CPU.

    Args:
        seed: the seed (NumPy gets it modulo 2³²).
    """
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` so that ``path`` is either the old file or the complete new one.

    Args:
        path: the file (parent folders are created).
        payload: the bytes to write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make shared results unreadable
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` as UTF-8, atomically (:func:`atomic_write_bytes`).

    Args:
        path: the file.
        text: the text.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any):
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if torch.is_tensor(obj):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def to_json(payload: Any) -> str:
    """Indented JSON of ``payload`` (numpy, torch and paths converted; NaN/∞ refused).

    Args:
        payload: JSON-able data.

    Returns:
        The JSON text.

    Raises:
        TypeError: an object that cannot be converted.
        ValueError: a NaN or infinite float.
    """
    return json.dumps(payload, indent=2, sort_keys=False, default=_json_default, allow_nan=False)


def atomic_write_json(path: str | os.PathLike, payload: Any) -> None:
    """Write :func:`to_json` of ``payload`` plus a newline, atomically.

    Args:
        path: the file.
        payload: JSON-able data.
    """
    atomic_write_text(path, to_json(payload) + "\n")


def library_versions() -> dict[str, str]:
    """The installed versions of the libraries a record names (a fresh dict: callers may edit it)."""
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    # read once per process: package metadata lookups cost ~0.1 s, as much as a small fit
    versions = []
    for dist in ("dpaudit", "torch", "torch_geometric", "opacus", "autodp", "dp-accounting", "scikit-learn", "numpy"):
        try:
            versions.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            continue
    return tuple(versions)


def _draw(fn, shape, generator: torch.Generator | None, device, dtype) -> torch.Tensor:
    source = generator.device if generator is not None else device
    out = fn(tuple(shape), generator=generator, device=source, dtype=dtype)
    return out.to(device)


def randn_on(shape, generator: torch.Generator | None, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal draws made on ``generator``'s device and moved to ``device``.

    Defenses keep their noise generators on the CPU, so a CUDA run draws exactly the numbers a
    CPU run with the same seed draws (the CPU and CUDA generators are different streams); the
    cost is one host → device copy. Without a generator the global RNG of ``device`` is used.

    Args:
        shape: shape of the draw.
        generator: the generator, or ``None`` for ``device``'s global RNG.
        device: device of the result.
        dtype: dtype of the result.

    Returns:
        The draws.
    """
    return _draw(torch.randn, shape, generator, device, dtype)


def rand_on(shape, generator: torch.Generator | None, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Uniform [0, 1) draws on ``generator``'s device, moved to ``device`` (see :func:`randn_on`).

    Args:
        shape: shape of the draw.
        generator: the generator, or ``None`` for ``device``'s global RNG.
        device: device of the result.
        dtype: dtype of the result.

    Returns:
        The draws.
    """
    return _draw(torch.rand, shape, generator, device, dtype)
