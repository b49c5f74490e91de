"""A graph file named on the command line (``--dataset PATH``): how its name is told from a
registry dataset's, and what it must declare before any model is trained on it — decided from
the name and the options alone, in a module that imports nothing heavy, so that the command
line refuses an undeclared label domain before torch is imported. Reading the file is
:mod:`dpaudit.data.graph_files`.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpaudit.errors import DatasetError

#: suffix → format
SUFFIXES = {".pt": "pt", ".pth": "pt", ".npz": "npz"}


def is_graph_path(name: str) -> bool:
    """Whether ``--dataset NAME`` names a file rather than a registry dataset: it holds a path
    separator, ends in a graph-file suffix, or is an existing file with a suffix.

    Args:
        name: the ``--dataset`` value.

    Returns:
        ``True`` for a file.
    """
    text = str(name).strip()
    suffix = Path(text).suffix.lower()
    return "/" in text or os.sep in text or suffix in SUFFIXES or (bool(suffix) and Path(text).is_file())


def check_file_declaration(name: str, options: dict) -> None:
    """A graph file's label domain is declared (``declare_classes`` or ``declare=true``), and
    ``min_class_size`` runs on declared counts (``declare=true``): refused before any work (the
    commands call this on their options before reading the file; :func:`load_dataset` too).

    Raises:
        DatasetError: one line saying what to declare.

    Args:
        name: the graph file's path.
        options: the options given.
    """
    label = Path(str(name)).name
    if not options.get("declare") and options.get("declare_classes") is None:
        raise DatasetError(
            f"{label}: the label domain is not declared; add --dataset-option declare_classes=V1,V2,... (the label "
            "values a model may predict, in order; or a count C for 0..C-1) or declare=true if the graph's labels "
            "are published"
        )
    if options.get("min_class_size") and not options.get("declare"):
        raise DatasetError(
            f"{label}: min_class_size compares per-class counts, which this graph does not declare; list the classes "
            "to keep in --dataset-option declare_classes=..., or add declare=true if the graph's labels are published"
        )
