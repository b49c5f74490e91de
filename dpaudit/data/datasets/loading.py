"""One entry point by name: :func:`load_dataset` (a registry dataset, ``csbm`` or a graph file),
:func:`reload_dataset` (the dataset a released model was trained on); ``dpaudit datasets``
lists what is on disk with :func:`dpaudit.data.datasets.sources.describe_availability`."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch_geometric.data import Data

from dpaudit.data.datasets.facebook import FACEBOOK100_CLASSES, facebook100
from dpaudit.data.datasets.graph import GraphDataset
from dpaudit.data.datasets.options import _CSBM_INTEGERS, check_dataset_options
from dpaudit.data.datasets.preprocessing import PUBLISHED, declared_classes, prepare
from dpaudit.data.datasets.pyg import _instantiate, _processing_root, _public_split, _try_download
from dpaudit.data.datasets.sources import (
    PUBLISHED_CLASSES,
    SOURCES,
    cache_root,
    data_root,
    missing_raw_files,
    parse_dataset_name,
)
from dpaudit.data.datasets.streamed import STREAMED
from dpaudit.data.datasets.synthetic import csbm
from dpaudit.data.datasets.user import _declare_user_facts
from dpaudit.data.graph_paths import check_file_declaration
from dpaudit.errors import DatasetError


def load_dataset(
    name: str,
    root: str | os.PathLike | None = None,
    min_class_size: int | None = None,
    remove_unlabeled: bool = False,
    **options,
) -> GraphDataset:
    """Load a dataset by name (see :func:`available_datasets`) or from a graph file.

    A Facebook100 school takes a target after a colon: ``johnshopkins55:year`` (class year,
    as GAP's "Facebook" dataset), ``:gender`` (LINKX's label, the default), ``:status`` or
    ``:dorm``; a non-gender target keeps the classes with 5 % of the labeled nodes or more (the
    published list :data:`FACEBOOK100_CLASSES`, else the benchmark's published counts) unless
    ``min_class_size`` says otherwise. Every registry dataset declares its published label
    domain (:data:`PUBLISHED_CLASSES`); a graph file must declare its own (``declare_classes``
    or ``declare=true``, :func:`check_file_declaration`).

    ``csbm`` is generated from ``options`` (see :func:`csbm`). A path (``./graph.npz``,
    ``graph.pt``: see :mod:`dpaudit.data.graph_files`) is a user's graph named by its file stem; its
    ``options`` declare what is public about it (:data:`FILE_OPTIONS`, as :func:`from_data`'s
    ``public_facts``), and nothing is declared without them. Every other name is loaded through
    its PyG class from the data root (see the module docstring). The options given are kept in
    ``info["options"]`` (the owner's record) and, with a graph file's format, a synthetic graph's
    generator parameters and the preprocessing choices, in ``info["parameters"]`` (the card).

    Raises:
        DatasetError: unknown name, option or file, a malformed file, or raw files neither
            present nor downloadable — the message names the files and the folder they must go in.

    Args:
        name: a registry name (optionally ``school:target``), ``csbm`` or a graph file path.
        root: the data root (default: ``$DPAUDIT_DATA``, else the cache).
        min_class_size: drop classes with fewer declared labeled nodes.
        remove_unlabeled: drop unlabeled nodes.
        **options: generator parameters (csbm) or declarations (graph files).

    Returns:
        The :class:`GraphDataset`.
    """
    from dpaudit.data.graph_paths import is_graph_path

    check_dataset_options(name, {**options, "min_class_size": min_class_size, "remove_unlabeled": remove_unlabeled})
    chosen = {"min_class_size": min_class_size} if min_class_size is not None else {}
    if remove_unlabeled:
        chosen["remove_unlabeled"] = True
    if is_graph_path(name):
        return _record_options(_graph_file(name, min_class_size, remove_unlabeled, options), {**options, **chosen})
    key, target = parse_dataset_name(name)
    if key == "csbm":
        generator = {k: int(v) if k in _CSBM_INTEGERS else float(v) for k, v in options.items()}
        ds = csbm(**generator)
        if chosen:  # the generator's classes and counts are public (its parameters are in the card)
            ds = prepare(
                ds.data,
                "csbm",
                min_class_size,
                remove_unlabeled,
                ds.info,
                ds.public_facts["classes"],
                PUBLISHED if min_class_size else None,
            )
            ds.info["parameters"].update(chosen)
            ds.declare_public("the csbm generator (synthetic graph)")
        return _record_options(ds, {**generator, **chosen})
    ds = _registry(name, key, target, root, min_class_size, remove_unlabeled)
    if chosen:
        ds.info["parameters"] = dict(chosen)
    return _record_options(ds, chosen)


def _record_options(dataset: GraphDataset, options: dict) -> GraphDataset:
    if options:
        dataset.info["options"] = dict(options)
    return dataset


def _graph_file(path: str, min_class_size: int | None, remove_unlabeled: bool, options: dict) -> GraphDataset:
    from dpaudit.data.graph_files import read_graph_file

    sizes = {
        key.removeprefix("declare_"): int(v)
        for key, v in options.items()
        if key.startswith("declare_") and key != "declare_classes"
    }
    if options.get("declare") and sizes:
        raise DatasetError(
            "declare=true (the file's own sizes are published) and declare_* sizes (bounds) exclude each other"
        )
    check_file_declaration(path, {**options, "min_class_size": min_class_size})
    raw, info = read_graph_file(path)
    info["parameters"] = {"file_format": info["format"]}
    if min_class_size is not None:
        info["parameters"]["min_class_size"] = min_class_size
    if remove_unlabeled:
        info["parameters"]["remove_unlabeled"] = True
    published = bool(options.get("declare"))  # its label set and counts are public too
    declared = options.get("declare_classes")
    classes = declared_classes(Path(path).stem, declared) if declared is not None else PUBLISHED
    counts = PUBLISHED if published and min_class_size else None
    dataset = prepare(raw, Path(path).stem, min_class_size, remove_unlabeled, info, classes, counts)
    return _declare_user_facts(dataset, True if published else sizes)


def _registry(
    name: str, key: str, target: str | None, root, min_class_size: int | None, remove_unlabeled: bool
) -> GraphDataset:
    """A registry dataset from the data root (downloaded by PyG when missing and online)."""
    source = SOURCES[key]
    base = data_root(root)
    missing = missing_raw_files(key, base)
    if missing and not _try_download(source, key, base):
        raise DatasetError(
            f"dataset {key!r} is not available offline: put {', '.join(missing)} in {base / source.folder / 'raw'} "
            f"(or point --data-root / DPAUDIT_DATA at a folder that has {source.folder}/raw/)"
        )
    if missing:  # downloaded by PyG into a writable root or the download cache
        base = base if not missing_raw_files(key, base) else cache_root() / "downloads"
    # a public benchmark's per-class counts are published with it (as its sizes): min_class_size
    # may compare them; its label domain is the published one (PUBLISHED_CLASSES)
    counts = PUBLISHED if min_class_size else None
    if target is not None and target != "gender":  # LINKX's own loader only knows gender
        raw, default_min = facebook100(base / source.folder / "raw" / "data.mat", target)
        info = {"loader": "dpaudit.data.datasets.facebook100", "target": target, "source": str(base / source.folder)}
        kept = FACEBOOK100_CLASSES.get((key, target))
        if kept is not None and min_class_size is None:  # the published classes GAP's threshold keeps
            raw.y = torch.where(torch.isin(raw.y, torch.tensor(kept)), raw.y, torch.full_like(raw.y, -1))
            info["classes"] = "published list (FACEBOOK100_CLASSES); other labels unlabeled"
            return _benchmark(prepare(raw, f"{key}:{target}", None, remove_unlabeled, info, list(kept)))
        return _benchmark(
            prepare(
                raw,
                f"{key}:{target}",
                default_min if min_class_size is None else min_class_size,
                remove_unlabeled,
                info,
                PUBLISHED,
                PUBLISHED,
            )
        )
    classes = PUBLISHED_CLASSES[key]
    if key in STREAMED:
        raw, loader = STREAMED[key](base / source.folder), f"dpaudit.data.datasets.{STREAMED[key].__name__}"
        info = {"loader": loader, "source": str(base / source.folder / "raw")}
        return _benchmark(prepare(raw, key, min_class_size, remove_unlabeled, info, classes, counts))
    try:
        pyg_dataset = _instantiate(source, _processing_root(source, base))
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"could not process {key!r} from {base / source.folder / 'raw'}: {exc}") from exc
    data = pyg_dataset[0]
    raw = Data(x=data.x, y=data.y.view(-1), edge_index=data.edge_index, num_nodes=data.num_nodes)
    public = _public_split(source, data, pyg_dataset)
    if public is not None:
        raw.public_split = public
    return _benchmark(
        prepare(
            raw,
            key,
            min_class_size=min_class_size,
            remove_unlabeled=remove_unlabeled,
            info={"loader": f"torch_geometric.datasets.{source.loader}", "source": str(base / source.folder / "raw")},
            classes=classes,
            class_counts=counts,
        )
    )


def reload_dataset(
    card: dict | None,
    record: dict | None = None,
    name: str | None = None,
    options: dict | None = None,
    root: str | os.PathLike | None = None,
) -> GraphDataset:
    """The dataset a model was trained on, from its public card (``card["dataset"]``) and, when
    the owner has it, its record (``provenance.json``'s ``dataset``).

    ``name`` (a registry name or a graph file) and ``options`` are what the caller gives again;
    without ``name`` the model's own dataset is reloaded: a graph file from the path in the
    record (refused when it is gone or its bytes changed: the record keeps their SHA-256), any
    other dataset by its card's name. The options recorded at training (the record's, else the
    card's public parameters) are used for the same dataset, and ``options`` win over them. The
    caller still compares the fingerprint (:func:`dpaudit.release.provenance.resolve_dataset`). A graph
    file without a declared label domain among the options takes the model's (its card's
    ``public_facts["classes"]``): the classes the model predicts.

    Raises:
        DatasetError: the graph file is gone or changed, or the model came from a graph file
            whose path only the owner's record holds.

    Args:
        card: the card's ``dataset`` entry.
        record: the owner's record's ``dataset`` entry, or ``None``.
        name: a dataset name or graph file given again, or ``None``.
        options: options given again, or ``None``.
        root: the data root.

    Returns:
        The dataset.
    """
    from dpaudit.data.graph_files import LOADER, file_sha256
    from dpaudit.data.graph_paths import is_graph_path

    card, record = dict(card or {}), dict(record or {})
    info = record.get("info") or {}
    trained_on = card.get("name") or record.get("name")
    recorded = dict(info.get("options") or card.get("parameters") or {})
    recorded.pop("file_format", None)
    from_file = info.get("loader") == LOADER or "file_format" in (card.get("parameters") or {})
    if name is None:
        if info.get("loader") == LOADER:
            path = Path(info["source"])
            if not path.is_file():
                raise DatasetError(
                    f"the model was trained on the graph file {path}, which is no longer there: pass --dataset PATH "
                    "(the graph it was trained on)"
                )
            if file_sha256(path) != info.get("sha256"):
                raise DatasetError(
                    f"the graph file {path} changed since the model was trained (its SHA-256 differs from the "
                    "owner's record): pass --dataset PATH with the graph it was trained on"
                )
            name = str(path)
        elif from_file:
            raise DatasetError(
                f"the model was trained on the graph file {trained_on!r}, whose path is only in the owner's record "
                "(provenance.json), which is not here: pass --dataset PATH"
            )
        elif not trained_on:
            raise DatasetError("the model card names no dataset; pass --dataset")
        else:
            name = trained_on
    if is_graph_path(name):
        same = from_file and Path(name).stem == trained_on
    else:
        same = not from_file and bool(trained_on) and parse_dataset_name(name) == parse_dataset_name(trained_on)
    options = {**(recorded if same else {}), **(options or {})}
    declared = (card.get("public_facts") or {}).get("classes")
    if is_graph_path(name) and declared is not None and "declare" not in options and "declare_classes" not in options:
        options["declare_classes"] = list(declared)  # the model's declared label domain (its card's, public)
    return load_dataset(name, root=root, **options)


def _benchmark(dataset: GraphDataset) -> GraphDataset:
    """A registry dataset is a public benchmark: its published sizes are public facts."""
    return dataset.declare_public(f"the public benchmark {dataset.name!r}")
