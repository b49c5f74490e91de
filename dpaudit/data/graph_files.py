"""A user's own graph from a file (``--dataset PATH``), read without unpickling anything.

Two formats, told apart by the suffix:

* ``.pt`` / ``.pth`` — a PyG ``Data`` (or a dict of tensors) saved with ``torch.save``. It is
  read with ``torch.load(..., weights_only=True)``. PyG allow-lists ``Data`` itself, but not
  the storage classes a pickled ``Data`` refers to (``GlobalStorage``, ``DataEdgeAttr``,
  ``DataTensorAttr`` in PyG 2.8), so those few plain containers are allowed for this one call
  (``torch.serialization.safe_globals``); anything else in the file is refused. There is no
  fallback to ``weights_only=False`` (PyG's own ``fs.torch_load`` has one; arbitrary code).
* ``.npz`` — ``numpy.savez`` arrays, read with ``allow_pickle=False``:

  ==============  ===========  ====================================================
  array           shape        dtype
  ==============  ===========  ====================================================
  ``x``           N × F        float (or integer / bool, converted to float32)
  ``y``           N            integer; ``-1`` marks an unlabeled node
  ``edge_index``  2 × E        integer node indices in 0..N-1 (either direction)
  ``train_mask``  N            bool, optional: the graph's own split (``public``)
  ``val_mask``    N            bool, optional (needs ``train_mask``)
  ``test_mask``   N            bool, optional (needs ``train_mask``)
  ==============  ===========  ====================================================

The same names are read from a ``Data``. Masks, when present, become the dataset's
``public`` split (the default split, as for the benchmarks); they must not overlap. Everything
else is checked by :func:`dpaudit.data.datasets.prepare`, as for every built-in dataset (shapes,
finite features, integer labels, index ranges; self loops dropped, edges made undirected and
deduplicated). Every problem is one :class:`~dpaudit.errors.DatasetError` line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle  # only for its exception class: torch.load(weights_only=True) raises UnpicklingError  # reviewed: nothing is unpickled, pickle.UnpicklingError is caught to refuse a file
import re
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from dpaudit.data.graph_paths import SUFFIXES
from dpaudit.errors import DatasetError

log = logging.getLogger(__name__)

REQUIRED = ("x", "y", "edge_index")
MASKS = ("train_mask", "val_mask", "test_mask")
#: ``info["loader"]`` of a dataset read from a file (how the owner's record says so)
LOADER = "dpaudit.data.graph_files"


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of the file's bytes (the owner's record keeps it: a changed file is noticed).

    Args:
        path: the file.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _storage_classes() -> list[type]:
    """The PyG classes a ``torch.save``-d ``Data`` refers to: plain attribute containers."""
    from torch_geometric.data import data as data_module
    from torch_geometric.data.storage import GlobalStorage

    names = ("DataEdgeAttr", "DataTensorAttr")
    return [Data, GlobalStorage, *(getattr(data_module, n) for n in names if hasattr(data_module, n))]


def _first_sentence(exc: BaseException) -> str:
    """The first sentence of a library's (often multi-line) message: errors are one line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split(". ")[0].rstrip(".")


def _read_pt(path: Path) -> dict:
    try:
        with torch.serialization.safe_globals(_storage_classes()):
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if found is None:
            raise DatasetError(f"{path}: not a readable torch.save file") from None
        raise DatasetError(
            f"{path}: refers to {found.group(1)}, which dpaudit never unpickles (torch.load with weights_only=True); "
            "save a PyG Data or a dict of tensors"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise DatasetError(f"{path}: not a readable torch.save file ({_first_sentence(exc)})") from None
    if isinstance(loaded, Data):
        return {key: loaded[key] for key in loaded.keys()}
    if isinstance(loaded, dict) and all(isinstance(k, str) for k in loaded):
        return dict(loaded)
    raise DatasetError(f"{path}: holds a {type(loaded).__name__}; expected a PyG Data (or a dict of tensors)")


def _read_npz(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({_first_sentence(exc)})") from None
    if head.startswith(b"\x93NUMPY"):
        raise DatasetError(
            f"{path}: a single numpy array (.npy), not a .npz archive; save the arrays x, y and edge_index "
            "together with numpy.savez"
        )
    if not head.startswith(b"PK"):  # every zip file starts so; a damaged one is np.load's to explain
        raise DatasetError(
            f"{path}: not a numpy .npz archive (not a zip file); save the arrays x, y and edge_index with numpy.savez"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: torch.from_numpy(np.array(archive[key])) for key in archive.files}
    except ValueError as exc:  # numpy would need pickle, which is never allowed
        if "Object arrays" in str(exc):
            raise DatasetError(f"{path}: holds object arrays; only numeric and bool arrays are read") from None
        raise DatasetError(f"{path}: not a readable .npz file (numpy would have to unpickle it)") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise DatasetError(f"{path}: not a readable .npz file ({_first_sentence(exc)})") from None
    except TypeError as exc:  # a dtype torch has no tensor for (strings, uint16 on old torch ...)
        raise DatasetError(f"{path}: an array has a type dpaudit cannot read ({exc})") from None


def _as_tensor(path: Path, key: str, value) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not torch.is_tensor(value):
        raise DatasetError(f"{path}: {key} must be an array/tensor, got {type(value).__name__}")
    value = value.as_subclass(torch.Tensor)  # PyG's EdgeIndex / Index subclasses: plain data here
    if value.layout != torch.strided:
        value = value.to_dense()
    if value.is_complex():
        raise DatasetError(f"{path}: {key} must hold real numbers, got {value.dtype}")
    return value


def _public_split(path: Path, masks: dict[str, torch.Tensor], num_nodes: int) -> torch.Tensor | None:
    """The masks as one code per node (0 train, 1 val, 2 test, -1 none), or ``None``."""
    if not masks:
        return None
    if "train_mask" not in masks:
        raise DatasetError(f"{path}: {', '.join(sorted(masks))} given without train_mask")
    code = torch.full((num_nodes,), -1, dtype=torch.long)
    for index, key in enumerate(MASKS):
        mask = masks.get(key)
        if mask is None:
            continue
        if mask.dtype != torch.bool or tuple(mask.shape) != (num_nodes,):
            raise DatasetError(
                f"{path}: {key} must be a bool vector of the {num_nodes} nodes, got {mask.dtype} {tuple(mask.shape)}"
            )
        if (mask & (code >= 0)).any():
            raise DatasetError(f"{path}: {key} overlaps an earlier mask; a node belongs to one part at most")
        code[mask] = index
    return code


def read_graph_file(path: str | os.PathLike) -> tuple[Data, dict]:
    """The raw graph in ``path`` (format by suffix, see the module docstring) and what the
    owner's record keeps about it (``loader``, absolute ``source`` path, ``format``,
    ``sha256``). Not yet validated beyond its arrays: :func:`dpaudit.data.datasets.prepare` does that.

    Raises:
        DatasetError: wrong suffix, missing or unreadable file, missing arrays, bad masks.

    Args:
        path: the graph file (``.pt``/``.pth`` or ``.npz``).

    Returns:
        ``(raw, info)``.
    """
    path = Path(path).expanduser()
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DatasetError(
            f"graph file {path}: unknown suffix {path.suffix or '(none)'!r}; use .pt/.pth (torch.save of a PyG Data) "
            "or .npz (arrays x, y, edge_index and optional train_mask, val_mask, test_mask)"
        )
    if not path.exists():
        raise DatasetError(f"graph file {path} does not exist")
    if not path.is_file():
        raise DatasetError(f"graph file {path} is not a file")
    arrays = _read_pt(path) if fmt == "pt" else _read_npz(path)
    missing = [key for key in REQUIRED if arrays.get(key) is None]
    if missing:
        raise DatasetError(f"{path}: missing {', '.join(missing)} (a graph file holds x, y and edge_index)")
    ignored = sorted(set(arrays) - {*REQUIRED, *MASKS, "num_nodes"})
    if ignored:
        log.warning("%s: ignoring %s (dpaudit reads x, y, edge_index and the masks)", path, ", ".join(ignored))
    tensors = {key: _as_tensor(path, key, arrays[key]) for key in (*REQUIRED, *MASKS) if arrays.get(key) is not None}
    x = tensors["x"]
    if x.dim() != 2:
        raise DatasetError(f"{path}: x must be a [num_nodes, num_features] array, got shape {tuple(x.shape)}")
    num_nodes = x.size(0)
    declared = arrays.get("num_nodes")
    if declared is not None and int(declared) != num_nodes:
        raise DatasetError(f"{path}: num_nodes = {int(declared)} but x has {num_nodes} rows")
    raw = Data(x=x, y=tensors["y"], edge_index=tensors["edge_index"], num_nodes=num_nodes)
    split = _public_split(path, {k: tensors[k] for k in MASKS if k in tensors}, num_nodes)
    if split is not None:
        raw.public_split = split
    info = {"loader": LOADER, "source": str(path.resolve()), "format": fmt, "sha256": file_sha256(path)}
    return raw, info
