"""dpaudit's own streaming readers for the large registry graphs (:data:`STREAMED`: Reddit and
ogbn-arxiv), read without PyG's or OGB's processing pass, and refused before reading when the
machine cannot hold them."""

from __future__ import annotations

import gzip
import zipfile
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from dpaudit.errors import DatasetError


def reddit(folder: Path) -> Data:
    """Reddit (Hamilton et al. 2017) from PyG's raw layout (``raw/reddit_data.npz``: ``feature``,
    ``label``; ``raw/reddit_graph.npz``: the adjacency as a SciPy sparse file), read without
    PyG's processing pass: the float32 features are used as stored and the edges stay in the
    file's integer type until :func:`undirected_edges`, which is all of the graph's processing
    (PyG's pass stores int64 copies of both directions, then a processed copy on disk). Like
    PyG's ``Reddit``, no split is taken from the file's ``node_types``.

    Args:
        folder: the dataset folder (holding ``raw/``).

    Returns:
        The raw graph.

    Raises:
        DatasetError: too little memory, or unreadable or unexpected files.
    """
    raw = folder / "raw"
    # edges counted as if int32 (an int64 or two-row file counts double: a conservative estimate)
    _check_load_memory(
        "reddit",
        _npz_member_bytes(raw / "reddit_data.npz", "feature"),
        _npz_member_bytes(raw / "reddit_graph.npz", "row", "coords") // 4,
    )
    try:
        with np.load(raw / "reddit_data.npz") as data:
            x, y = data["feature"], data["label"]
        with np.load(raw / "reddit_graph.npz") as graph:
            layout = graph["format"].item()
            layout = layout.decode() if isinstance(layout, bytes) else str(layout)
            if layout == "coo" and "row" in graph.files:
                row, col = graph["row"], graph["col"]
            elif layout == "coo":  # SciPy's newer layout: one [2, E] array
                row, col = graph["coords"]
            else:
                raise DatasetError(f"reddit_graph.npz holds a {layout!r} matrix; PyG's layout is coo")
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"could not read Reddit from {raw}: {exc}") from exc
    return _raw_graph(x, y.reshape(-1), row, col)


def ogbn_arxiv(folder: Path) -> Data:
    """ogbn-arxiv (Hu et al. 2020) from OGB's raw layout (``raw/*.csv.gz``,
    ``split/time/{train,valid,test}.csv.gz``) without the ``ogb`` package: each file is read
    in blocks of lines straight into arrays sized from ``num-node-list`` and
    ``num-edge-list``, so the peak is the arrays themselves (OGB reads each file whole through
    pandas). Citations are directed in the file (OGB adds no inverse edges for arxiv);
    :func:`prepare` makes them undirected. The time split (train up to 2017, validation 2018,
    test 2019) is the public split.

    Args:
        folder: the dataset folder (holding ``raw/`` and ``split/time/``).

    Returns:
        The raw graph, with ``public_split`` when the split files are there.

    Raises:
        DatasetError: too little memory, unreadable files, or split files naming unknown nodes.
    """
    raw = folder / "raw"
    try:
        num_nodes = int(_read_csv(raw / "num-node-list.csv.gz", np.int64, 1, 1)[0, 0])
        num_edges = int(_read_csv(raw / "num-edge-list.csv.gz", np.int64, 1, 1)[0, 0])
        with gzip.open(raw / "node-feat.csv.gz", "rt") as handle:
            width = handle.readline().count(",") + 1
        _check_load_memory("ogbn-arxiv", 4 * num_nodes * width, num_edges)
        index_type = _index_type(num_nodes)
        edges = _read_csv(raw / "edge.csv.gz", index_type, num_edges, 2)
        x = _read_csv(raw / "node-feat.csv.gz", np.float32, num_nodes, None)
        y = _read_csv(raw / "node-label.csv.gz", np.int64, num_nodes, 1).reshape(-1)
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"could not read ogbn-arxiv from {raw}: {exc}") from exc
    data = _raw_graph(x, y, edges[:, 0], edges[:, 1])
    split_dir = folder / "split" / "time"
    parts = [split_dir / f"{part}.csv.gz" for part in ("train", "valid", "test")]
    if all(p.is_file() for p in parts):
        split = torch.full((num_nodes,), -1, dtype=torch.long)
        for code, path in enumerate(parts):
            nodes = _read_csv(path, np.int64, None, 1).reshape(-1)
            if nodes.size and (nodes.min() < 0 or nodes.max() >= num_nodes):
                raise DatasetError(f"{path} names nodes outside 0..{num_nodes - 1}")
            split[torch.from_numpy(nodes)] = code
        data.public_split = split
    return data


#: peak bytes per edge read from a file, from the reading to the undirected int64 result
#: (:func:`undirected_edges`: 40 per stored direction measured, two directions per edge read)
LOAD_BYTES_PER_EDGE = 80


def _check_load_memory(name: str, feature_bytes: int, edges: int) -> None:
    """Refuse, before reading, a graph the machine cannot hold (features as stored, plus
    :data:`LOAD_BYTES_PER_EDGE` per edge of the file)."""
    from dpaudit.runtime import device_memory

    needed = feature_bytes + LOAD_BYTES_PER_EDGE * edges
    memory = device_memory(torch.device("cpu"))
    if memory is not None and needed > memory:
        raise DatasetError(
            f"{name}: loading needs about {needed / 2**30:.3g} GiB ({feature_bytes / 2**30:.3g} GiB of features, "
            f"{edges:,} edges); this machine has {memory / 2**30:.3g} GiB"
        )


def _npz_member_bytes(path: Path, *names: str) -> int:
    """Uncompressed size of the first of ``names`` stored in an ``.npz`` file (0 when none is),
    read from the zip directory without loading anything."""
    try:
        with zipfile.ZipFile(path) as archive:
            sizes = {info.filename.removesuffix(".npy"): info.file_size for info in archive.infolist()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"could not read {path}: {exc}") from exc
    return next((sizes[name] for name in names if name in sizes), 0)


def _index_type(count: int) -> type:
    """int32 node indices where they fit (half the memory of int64), int64 beyond."""
    return np.int32 if count < 2**31 else np.int64


def _raw_graph(x: np.ndarray, y: np.ndarray, row: np.ndarray, col: np.ndarray) -> Data:
    """A raw ``Data`` over the arrays as read (float32 features as stored: no copy)."""
    features = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    edge_index = torch.from_numpy(np.stack([row, col]))  # the file's integer type; int32 in practice
    return Data(x=features, y=torch.from_numpy(np.asarray(y)), edge_index=edge_index, num_nodes=features.size(0))


def _read_csv(path: Path, dtype, rows: int | None, columns: int | None, block: int = 1 << 16) -> np.ndarray:
    """A gzipped CSV of numbers read ``block`` lines at a time into one array of ``rows`` rows
    (grown when ``rows`` is None; ``columns`` None: as many as the first line has)."""
    out, filled = None, 0
    with gzip.open(path, "rt") as handle:
        while True:
            lines = list(islice(handle, block))
            if not lines:
                break
            part = np.loadtxt(lines, delimiter=",", dtype=dtype, ndmin=2)
            if out is None:
                width = part.shape[1] if columns is None else columns
                out = np.empty((rows if rows is not None else max(block, len(lines)), width), dtype=dtype)
            if part.shape[1] != out.shape[1]:
                raise DatasetError(f"{path}: {part.shape[1]} columns in a line, expected {out.shape[1]}")
            if filled + len(part) > out.shape[0]:
                if rows is not None:
                    raise DatasetError(f"{path} has more than the {rows} lines its count file declares")
                out = np.resize(out, (2 * (filled + len(part)), out.shape[1]))
            out[filled : filled + len(part)] = part
            filled += len(part)
    if rows is not None and filled != rows:
        raise DatasetError(f"{path} has {filled} lines; expected {rows}")
    if out is None:  # an empty file where any number of lines may come
        return np.empty((0, columns or 0), dtype=dtype)
    return out[:filled]


#: registry datasets read by dpaudit's own streaming readers (no PyG or OGB processing pass)
STREAMED = {"reddit": reddit, "ogbn-arxiv": ogbn_arxiv}
