"""Reading a registry dataset through its PyG class (or OGB's): the download when online, the
writable processing mirror whose ``raw/`` links to the read-only data root, and the public
split the class ships."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from pathlib import Path

import torch
from torch_geometric.data import Data

from dpaudit.data.datasets.sources import _Source, cache_root
from dpaudit.errors import DatasetError

log = logging.getLogger(__name__)


def _try_download(source: _Source, name: str, root: Path) -> bool:
    """Let PyG download into ``root`` (or the cache when root is not writable); False offline."""
    target = root if os.access(root if root.exists() else root.parent, os.W_OK) else cache_root() / "downloads"
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(10)
    try:
        _instantiate(source, target)
        return True
    except Exception as exc:  # any network failure means "not downloadable here"
        log.info("download of %s failed: %s", name, exc)
        return False
    finally:
        socket.setdefaulttimeout(old)


def _instantiate(source: _Source, root: Path):
    import torch_geometric.datasets as pyg_datasets

    class_root = str(source.class_root(root))
    if source.loader == "ogb":
        try:
            from ogb.nodeproppred import PygNodePropPredDataset
        except ImportError as exc:
            raise DatasetError("ogbn-arxiv needs the 'ogb' package: pip install ogb") from exc
        return PygNodePropPredDataset(name=source.pyg_name, root=str(root))
    cls = getattr(pyg_datasets, source.loader)
    if source.pyg_name is None:
        return cls(class_root)
    return cls(class_root, source.pyg_name)


def _processing_root(source: _Source, root: Path) -> Path:
    """A writable mirror of the source folder whose raw/ links to the original files."""
    src_raw = (root / source.folder / "raw").resolve()
    key = hashlib.sha1(str(src_raw).encode()).hexdigest()[:12]
    mirror = cache_root() / key
    raw = mirror / source.folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for f in source.raw_files:
        link = raw / f
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            tmp = link.with_name(link.name + f".tmp{os.getpid()}")
            tmp.symlink_to(src_raw / f)
            os.replace(tmp, link)
    return mirror


def _public_split(source: _Source, data: Data, pyg_dataset) -> torch.Tensor | None:
    n = data.num_nodes
    split = torch.full((n,), -1, dtype=torch.long)
    if source.public in {"planetoid", "geom-gcn"}:
        masks = [getattr(data, k, None) for k in ("train_mask", "val_mask", "test_mask")]
        if any(m is None for m in masks):
            return None
        for code, m in enumerate(masks):
            m = m[:, 0] if m.dim() == 2 else m
            split[m] = code
        return split
    if source.public == "ogb":
        idx = pyg_dataset.get_idx_split()
        for code, key in enumerate(("train", "valid", "test")):
            split[idx[key]] = code
        return split
    return None
