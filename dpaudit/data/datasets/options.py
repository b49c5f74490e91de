"""The options each dataset accepts (``--dataset-option KEY=VALUE``, :func:`load_dataset`'s
keywords), checked for type and range before anything is loaded, and a graph file's required
declarations (:func:`dpaudit.data.graph_paths.check_file_declaration`)."""

from __future__ import annotations

import inspect
import math

from dpaudit.data.datasets.preprocessing import declared_classes
from dpaudit.data.datasets.sources import SOURCES, available_datasets, parse_dataset_name
from dpaudit.data.datasets.synthetic import csbm
from dpaudit.data.datasets.user import USER_FACTS
from dpaudit.data.graph_paths import is_graph_path
from dpaudit.errors import DatasetError

#: options of every dataset (:func:`prepare`'s): a choice, recorded with the dataset
PREPROCESSING_OPTIONS = ("min_class_size", "remove_unlabeled")

#: what a user declares public about a graph file (``declare=true``: its own sizes and label set
#: are published; ``declare_classes=0,1,2`` or ``=C``: the label domain; ``declare_num_nodes=N``
#: ...: a bound known in advance; see :func:`from_data`)
FILE_OPTIONS = ("declare", "declare_classes", *(f"declare_{fact}" for fact in USER_FACTS))

_CSBM_INTEGERS = ("num_nodes", "num_classes", "num_features", "seed")


def dataset_options(name: str) -> list[str]:
    """The options ``name`` accepts (``--dataset-option KEY=VALUE``; :func:`load_dataset`'s keywords).

    Args:
        name: a dataset name or graph file path.

    Returns:
        The option names.

    Raises:
        DatasetError: an unknown dataset.
    """
    if is_graph_path(name):
        return [*FILE_OPTIONS, *PREPROCESSING_OPTIONS]
    key, _ = parse_dataset_name(name)
    if key == "csbm":
        return [*inspect.signature(csbm).parameters, *PREPROCESSING_OPTIONS]
    if key not in SOURCES:
        raise DatasetError(f"unknown dataset {name!r}; available: {', '.join(available_datasets())} or a graph file")
    return list(PREPROCESSING_OPTIONS)


def check_dataset_options(name: str, options: dict) -> None:
    """Every option known to ``name`` and of the right type and range, before anything is loaded.

    Raises:
        DatasetError: one line naming the option (and, for an unknown one, every known option).

    Args:
        name: a dataset name or graph file path.
        options: the options given.
    """
    known = dataset_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        label = "graph file" if is_graph_path(name) else parse_dataset_name(name)[0]
        raise DatasetError(f"unknown {label} options {unknown}; known: {', '.join(known)}")
    for option, value in options.items():
        if option == "declare_classes":
            declared_classes("declare_classes", value)  # one line naming the problem
            continue
        if option in ("remove_unlabeled", "declare"):
            ok, kind = isinstance(value, bool), "true or false"
        elif option == "min_class_size":
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
            kind = "an integer >= 0"
        elif option in _CSBM_INTEGERS or option.startswith("declare_"):
            lowest = 0 if option == "seed" else 1
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == int(value)
            ok, kind = ok and value >= lowest, f"an integer >= {lowest}"
            if option == "seed":
                from dpaudit.seeds import SEED_LIMIT

                ok, kind = ok and value < SEED_LIMIT, "an integer in [0, 2**31)"
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            kind = "a finite number"
        if not ok:
            raise DatasetError(f"dataset option {option}={value!r} must be {kind}")
