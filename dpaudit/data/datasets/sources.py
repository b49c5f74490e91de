"""The registry: every dataset :func:`dpaudit.data.datasets.load_dataset` knows by name, where its
raw files live (:data:`SOURCES`, :func:`data_root`, :func:`cache_root`), its published label
domain (:data:`PUBLISHED_CLASSES`), and how a name parses (:func:`parse_dataset_name`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dpaudit.errors import DatasetError

#: the Facebook100 schools dpaudit reads (LINKX's files) and the targets a school's labels can be
FACEBOOK100 = ("reed98", "amherst41", "cornell5", "johnshopkins55", "penn94")
FACEBOOK100_TARGETS = ("gender", "year", "status", "dorm")


@dataclass(frozen=True)
class _Source:
    loader: str  # PyG class (or "ogb")
    pyg_name: str | None  # name argument of the PyG class
    folder: str  # folder under the data root that holds raw/
    raw_files: tuple[str, ...]
    public: str | None = None  # "planetoid" (masks), "geom-gcn" (10 mask columns), "ogb"

    def class_root(self, root: Path) -> Path:
        """The root argument the PyG class needs so that its raw_dir is root/folder/raw."""
        return root / self.folder if self.loader in {"Actor", "Reddit"} else root


def _planetoid(name: str, pyg: str) -> _Source:
    return _Source(
        "Planetoid",
        pyg,
        pyg,
        tuple(f"ind.{name}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")),
        "planetoid",
    )


def _webkb(name: str) -> _Source:
    splits = tuple(f"{name}_split_0.6_0.2_{i}.npz" for i in range(10))
    return _Source(
        "WebKB", name.capitalize(), name, ("out1_node_feature_label.txt", "out1_graph_edges.txt", *splits), "geom-gcn"
    )


SOURCES: dict[str, _Source] = {
    "cora": _planetoid("cora", "Cora"),
    "citeseer": _planetoid("citeseer", "CiteSeer"),
    "pubmed": _planetoid("pubmed", "PubMed"),
    "cora_ml": _Source("CitationFull", "Cora_ML", "cora_ml", ("cora_ml.npz",)),
    "actor": _Source(
        "Actor",
        None,
        "Actor",
        ("out1_node_feature_label.txt", "out1_graph_edges.txt", *(f"film_split_0.6_0.2_{i}.npz" for i in range(10))),
        "geom-gcn",
    ),
    "cornell": _webkb("cornell"),
    "texas": _webkb("texas"),
    "wisconsin": _webkb("wisconsin"),
    **{school: _Source("LINKXDataset", school, school, ("data.mat",)) for school in FACEBOOK100},
    "reddit": _Source("Reddit", None, "Reddit", ("reddit_data.npz", "reddit_graph.npz")),
    "ogbn-arxiv": _Source(
        "ogb",
        "ogbn-arxiv",
        "ogbn_arxiv",
        ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz", "num-edge-list.csv.gz", "num-node-list.csv.gz"),
        "ogb",
    ),
}

SYNTHETIC = ("csbm",)

#: the published number of classes of each registry dataset (its paper's and PyG's): the label
#: domain is 0..C-1, declared, never read from the labels (a class without a labeled node keeps
#: its output). Facebook100 schools: LINKX's gender label; other targets: FACEBOOK100_CLASSES.
PUBLISHED_CLASSES: dict[str, int] = {
    "cora": 7,
    "citeseer": 6,
    "pubmed": 3,
    "cora_ml": 7,
    "actor": 5,
    "cornell": 5,
    "texas": 5,
    "wisconsin": 5,
    **{school: 2 for school in FACEBOOK100},
    "reddit": 41,
    "ogbn-arxiv": 40,
}


def parse_dataset_name(name: str) -> tuple[str, str | None]:
    """``"johnshopkins55:year"`` → ``("johnshopkins55", "year")``; no target → ``None``.

    Args:
        name: the dataset name as given (aliases normalised).

    Returns:
        ``(key, target)``.

    Raises:
        DatasetError: a target on a non-Facebook100 dataset, or an unknown target.
    """
    base, sep, target = name.strip().partition(":")
    key = base.strip().lower().replace("-", "_") if base.strip() != "ogbn-arxiv" else base.strip()
    key = {"ogbn_arxiv": "ogbn-arxiv", "coraml": "cora_ml", "film": "actor"}.get(key, key)
    if not sep:
        return key, None
    target = target.strip().lower()
    if key not in FACEBOOK100:
        raise DatasetError(f"dataset {base!r} has no target choice (':{target}'); only Facebook100 schools do")
    if target not in FACEBOOK100_TARGETS:
        raise DatasetError(f"unknown target {target!r} for {key}; choose one of {', '.join(FACEBOOK100_TARGETS)}")
    return key, target


def available_datasets() -> list[str]:
    """Names of every dataset: the synthetic ones, then the registry's."""
    return [*SYNTHETIC, *SOURCES]


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root``, else ``$DPAUDIT_DATA``, else ``~/.cache/dpaudit/datasets``.

    Args:
        root: an explicit root, or ``None``.

    Returns:
        The path.
    """
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("DPAUDIT_DATA")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "dpaudit" / "datasets"


def cache_root() -> Path:
    """Where processed datasets are cached: ``$DPAUDIT_CACHE``, else ``~/.cache/dpaudit/processed``."""
    env = os.environ.get("DPAUDIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dpaudit" / "processed"


def missing_raw_files(name: str, root: str | os.PathLike | None = None) -> list[str]:
    """The raw files of dataset ``name`` not present under its folder.

    Args:
        name: a registry dataset name.
        root: the data root (default: ``$DPAUDIT_DATA``, else the cache).

    Returns:
        Missing file names (empty when all are there).
    """
    source = SOURCES[name]
    raw = data_root(root) / source.folder / "raw"
    return [f for f in source.raw_files if not (raw / f).is_file()]


def describe_availability(root: str | os.PathLike | None = None) -> list[dict]:
    """For ``dpaudit datasets``: each dataset, whether it is present, and what it needs (file checks
    only: nothing heavy is imported to list them)."""
    rows = [{"name": "csbm", "available": True, "needs": "nothing (generated on the spot)", "folder": "-"}]
    base = data_root(root)
    for name, source in SOURCES.items():
        missing = missing_raw_files(name, base)
        needs = "present" if not missing else ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
        if source.loader == "ogb" and missing:  # read without it once present
            needs += " (the ogb package downloads them)"
        rows.append(
            {"name": name, "available": not missing, "needs": needs, "folder": str(base / source.folder / "raw")}
        )
    return rows
