"""Graph datasets: PyG loaders behind one name, an embedded synthetic default, and the
preprocessing every loader applies.

Every dataset comes out as a :class:`GraphDataset`: a PyG ``Data`` with undirected,
deduplicated edges and no self loops, ``y = -1`` and ``label_mask = False`` on unlabeled
nodes, finite float features, plus its name, number of classes and a content fingerprint.

Where data lives (first match wins): the ``root`` argument (``--data-root``), the
``DPAUDIT_DATA`` environment variable, ``~/.cache/dpaudit/datasets``. The root holds raw
files in the layout PyG expects (``ROOT/Cora/raw/ind.cora.x`` ...). The root is only ever
read: PyG processes into a cache (``DPAUDIT_CACHE`` or ``~/.cache/dpaudit/processed``) whose
``raw/`` folders link to the source files, so a read-only or shared folder is never touched.

The package, one concern per module (every name below is importable from here):

* :mod:`~dpaudit.data.datasets.graph` — :class:`GraphDataset`, its card and record;
* :mod:`~dpaudit.data.datasets.preprocessing` — :func:`prepare` (validation, edges, the declared
  label domain) and :func:`fingerprint`;
* :mod:`~dpaudit.data.datasets.user` — :func:`from_data`, a user's own graph and its declared facts;
* :mod:`~dpaudit.data.datasets.synthetic` — :func:`csbm`, the generated default;
* :mod:`~dpaudit.data.datasets.sources` — the registry of named datasets and where their raw files live;
* :mod:`~dpaudit.data.datasets.pyg` — reading a registry dataset through its PyG class;
* :mod:`~dpaudit.data.datasets.facebook` — Facebook100 schools and their label targets;
* :mod:`~dpaudit.data.datasets.streamed` — the streaming readers of Reddit and ogbn-arxiv;
* :mod:`~dpaudit.data.datasets.options` — the options each dataset accepts, checked before loading;
* :mod:`~dpaudit.data.datasets.loading` — :func:`load_dataset`, :func:`reload_dataset`,
  :func:`describe_availability`.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below, for type checkers; loaded on first use (see __getattr__)
    from dpaudit.data.datasets.facebook import (
        FACEBOOK100_CLASSES,
        FACEBOOK100_COLUMNS,
        FACEBOOK100_MIN_CLASS_SHARE,
        facebook100,
    )
    from dpaudit.data.datasets.graph import GraphDataset
    from dpaudit.data.datasets.loading import load_dataset, reload_dataset
    from dpaudit.data.datasets.options import (
        FILE_OPTIONS,
        PREPROCESSING_OPTIONS,
        check_dataset_options,
        dataset_options,
    )
    from dpaudit.data.datasets.preprocessing import (
        DECLARE_CLASSES_PYTHON,
        PUBLISHED,
        declared_classes,
        fingerprint,
        prepare,
        undirected_edges,
    )
    from dpaudit.data.datasets.sources import (
        FACEBOOK100,
        FACEBOOK100_TARGETS,
        PUBLISHED_CLASSES,
        SOURCES,
        SYNTHETIC,
        available_datasets,
        cache_root,
        data_root,
        describe_availability,
        missing_raw_files,
        parse_dataset_name,
    )
    from dpaudit.data.datasets.streamed import LOAD_BYTES_PER_EDGE, STREAMED, ogbn_arxiv, reddit
    from dpaudit.data.datasets.synthetic import csbm
    from dpaudit.data.datasets.user import USER_FACTS, from_data
    from dpaudit.data.graph_paths import check_file_declaration

#: where each public name lives: importing the package stays cheap (torch and PyG load on first use),
#: so ``dpaudit datasets`` lists what is on disk without them (:func:`describe_availability`)
_HOME = {
    "DECLARE_CLASSES_PYTHON": "dpaudit.data.datasets.preprocessing",
    "FACEBOOK100": "dpaudit.data.datasets.sources",
    "FACEBOOK100_CLASSES": "dpaudit.data.datasets.facebook",
    "FACEBOOK100_COLUMNS": "dpaudit.data.datasets.facebook",
    "FACEBOOK100_MIN_CLASS_SHARE": "dpaudit.data.datasets.facebook",
    "FACEBOOK100_TARGETS": "dpaudit.data.datasets.sources",
    "FILE_OPTIONS": "dpaudit.data.datasets.options",
    "GraphDataset": "dpaudit.data.datasets.graph",
    "LOAD_BYTES_PER_EDGE": "dpaudit.data.datasets.streamed",
    "PREPROCESSING_OPTIONS": "dpaudit.data.datasets.options",
    "PUBLISHED": "dpaudit.data.datasets.preprocessing",
    "PUBLISHED_CLASSES": "dpaudit.data.datasets.sources",
    "SOURCES": "dpaudit.data.datasets.sources",
    "STREAMED": "dpaudit.data.datasets.streamed",
    "SYNTHETIC": "dpaudit.data.datasets.sources",
    "USER_FACTS": "dpaudit.data.datasets.user",
    "available_datasets": "dpaudit.data.datasets.sources",
    "cache_root": "dpaudit.data.datasets.sources",
    "check_dataset_options": "dpaudit.data.datasets.options",
    "check_file_declaration": "dpaudit.data.graph_paths",
    "csbm": "dpaudit.data.datasets.synthetic",
    "data_root": "dpaudit.data.datasets.sources",
    "dataset_options": "dpaudit.data.datasets.options",
    "declared_classes": "dpaudit.data.datasets.preprocessing",
    "describe_availability": "dpaudit.data.datasets.sources",
    "facebook100": "dpaudit.data.datasets.facebook",
    "fingerprint": "dpaudit.data.datasets.preprocessing",
    "from_data": "dpaudit.data.datasets.user",
    "load_dataset": "dpaudit.data.datasets.loading",
    "missing_raw_files": "dpaudit.data.datasets.sources",
    "ogbn_arxiv": "dpaudit.data.datasets.streamed",
    "parse_dataset_name": "dpaudit.data.datasets.sources",
    "prepare": "dpaudit.data.datasets.preprocessing",
    "reddit": "dpaudit.data.datasets.streamed",
    "reload_dataset": "dpaudit.data.datasets.loading",
    "undirected_edges": "dpaudit.data.datasets.preprocessing",
}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DECLARE_CLASSES_PYTHON",
    "FACEBOOK100",
    "FACEBOOK100_CLASSES",
    "FACEBOOK100_COLUMNS",
    "FACEBOOK100_MIN_CLASS_SHARE",
    "FACEBOOK100_TARGETS",
    "FILE_OPTIONS",
    "LOAD_BYTES_PER_EDGE",
    "PREPROCESSING_OPTIONS",
    "PUBLISHED",
    "PUBLISHED_CLASSES",
    "SOURCES",
    "STREAMED",
    "SYNTHETIC",
    "USER_FACTS",
    "GraphDataset",
    "available_datasets",
    "cache_root",
    "check_dataset_options",
    "check_file_declaration",
    "csbm",
    "data_root",
    "dataset_options",
    "declared_classes",
    "describe_availability",
    "facebook100",
    "fingerprint",
    "from_data",
    "load_dataset",
    "missing_raw_files",
    "ogbn_arxiv",
    "parse_dataset_name",
    "prepare",
    "reddit",
    "reload_dataset",
    "undirected_edges",
]
