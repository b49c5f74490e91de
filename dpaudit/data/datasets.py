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
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import logging
import math
import os
import socket
import zipfile
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from dpaudit.errors import DatasetError

log = logging.getLogger(__name__)


@dataclass
class GraphDataset:
    """One node-classification graph.

    Attributes:
        data: PyG ``Data`` with ``x`` [N, F] float32, ``y`` [N] long (-1 = unlabeled),
            ``edge_index`` [2, E] (both directions of every undirected edge), ``label_mask``
            [N] bool, and optionally ``public_split`` [N] long (0 train, 1 val, 2 test, -1 none).
        name: the dataset's registry name (or the user's label).
        num_classes: number of **declared** classes (labels are 0..C-1; class ``i`` is the raw
            label value ``public_facts["classes"][i]``); never counted on the labels.
        fingerprint: SHA-256 (16 hex digits) of features, labels and edges.
        info: provenance (loader, source folder, generator parameters, preprocessing).
        public_facts: the label domain and sizes **declared** public before any training
            (``classes``: the declared label values in class order, always present;
            ``class_counts``: the declared labeled count of each, when declared; ``num_nodes``,
            ``num_edges``, ``num_labeled``, ``declared_by``; ``published: True`` when they are
            the graph's own published sizes, which makes its splits' sizes public too): a public
            benchmark's published statistics, a synthetic graph's generator parameters, or what
            the user declares through :func:`from_data`. Only ``classes`` for a user's graph
            without a size declaration: then no defense may read a size of it
            (:mod:`dpaudit.release`). A neighbouring graph built for a test keeps the declaration
            unchanged — it is a constant, not a measurement.
    """

    data: Data
    name: str
    num_classes: int
    fingerprint: str
    info: dict = field(default_factory=dict)
    public_facts: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.data.num_nodes)

    @property
    def num_edges(self) -> int:
        """Number of undirected edges."""
        return int(self.data.edge_index.size(1)) // 2

    @property
    def num_features(self) -> int:
        return int(self.data.x.size(1))

    @property
    def labeled_nodes(self) -> torch.Tensor:
        return self.data.label_mask.nonzero().view(-1)

    @property
    def has_public_split(self) -> bool:
        return "public_split" in self.data

    def card(self) -> dict:
        """What the public model card says about the training data: the name, the task's
        declared shape (classes, features), a synthetic graph's generator parameters and the
        declared public facts. Nothing measured on the graph (see :meth:`record`)."""
        out = {"name": self.name, "num_classes": self.num_classes, "num_features": self.num_features}
        if self.info.get("parameters"):
            out["parameters"] = dict(self.info["parameters"])
        if self.info.get("target"):
            out["target"] = self.info["target"]
        if self.public_facts:
            out["public_facts"] = dict(self.public_facts)
        return out

    def record(self) -> dict:
        """What the owner's record keeps about the training data (never shipped): the content
        fingerprint, exact counts and where it was read from."""
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_classes": self.num_classes,
            "info": self.info,
        }

    def declare_public(self, declared_by: str, **facts) -> GraphDataset:
        """Declare this graph's sizes public (``num_nodes``, ``num_edges``, ``num_labeled`` by
        default, measured now — call this only for data whose statistics are published), beside
        the declared label domain (``classes``) kept from :func:`prepare`."""
        measured = {
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_labeled": int(self.data.label_mask.sum()),
        }
        self.public_facts = {**self.public_facts, **measured, **facts, "published": True, "declared_by": declared_by}
        return self

    def __repr__(self) -> str:
        return (
            f"GraphDataset({self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
            f"features={self.num_features}, classes={self.num_classes}, labeled={int(self.data.label_mask.sum())})"
        )


# --------------------------------------------------------------------------- preprocessing


def fingerprint(data: Data) -> str:
    h = hashlib.sha256()
    for t in (data.x, data.y, data.edge_index):
        t = t.detach().cpu().contiguous()
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().reshape(-1).view(np.uint8))  # the tensor's own bytes, not a copy of them
    return h.hexdigest()[:16]


def undirected_edges(row: np.ndarray, col: np.ndarray, num_nodes: int) -> torch.Tensor:
    """Both directions of every undirected edge of ``(row, col)``, deduplicated, without self
    loops, sorted by (source, target): what ``coalesce(to_undirected(remove_self_loops(.)))``
    gives, in int64 [2, 2U]. Works on one int64 key per edge (``min·n + max``) sorted in place,
    so the peak is a few bytes per edge beyond the result, whatever the input's integer type,
    instead of the several int64 copies of both directions the PyG utilities make."""
    lo = np.minimum(row, col).astype(np.int64, copy=False)
    hi = np.maximum(row, col)
    keep = lo != hi
    lo *= num_nodes
    lo += hi
    key = lo[keep]
    del lo, hi, keep
    key.sort()
    if key.size:
        fresh = np.empty(key.size, dtype=bool)
        fresh[0] = True
        np.not_equal(key[1:], key[:-1], out=fresh[1:])
        key = key[fresh]
        del fresh
    both = np.empty(2 * key.size, dtype=np.int64)
    both[: key.size] = key
    mirrored = both[key.size :]
    np.floor_divide(key, num_nodes, out=mirrored)  # source of each edge ...
    mirrored += (key % num_nodes) * num_nodes  # ... becomes the target of its reverse
    del key
    both.sort()
    edge_index = np.empty((2, both.size), dtype=np.int64)
    np.floor_divide(both, num_nodes, out=edge_index[0])
    np.remainder(both, num_nodes, out=edge_index[1])
    return torch.from_numpy(edge_index)


#: ``prepare(classes=PUBLISHED)`` / ``class_counts=PUBLISHED``: the graph's own label set (or
#: per-class counts) is published, so it may be read from the data (a public benchmark, a graph the
#: user declares published with ``declare=true`` / ``public_facts=True``)
PUBLISHED = "published"

#: how to declare the label domain, for a Python caller (the CLI says it in its own words)
DECLARE_CLASSES_PYTHON = (
    "pass classes=[...] (the label values a model may predict, in order; or a count C for 0..C-1), "
    "or public_facts=True if the graph's labels are published"
)


def declared_classes(name: str, value) -> list[int]:
    """A declared label domain as a list of label values, in order: a count ``C`` (0..C-1), a
    sequence of integers, or text ``"0,1,2"``. Class ``i`` of every model is ``value[i]``.

    Raises:
        DatasetError: not integers, negative (-1 marks unlabeled), repeated, or fewer than 2.
    """
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.replace(" ", "").strip("[]").split(",") if v]
        except ValueError:
            raise DatasetError(f"{name}: declared classes {value!r} must be integers separated by commas") from None
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = list(range(int(value)))
    if not isinstance(value, (list, tuple, range)) or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        raise DatasetError(f"{name}: declared classes must be a count or a list of integer labels, got {value!r}")
    value = [int(v) for v in value]
    if any(v < 0 for v in value):
        raise DatasetError(f"{name}: declared classes must be labels >= 0 (-1 marks an unlabeled node), got {value}")
    if len(set(value)) != len(value):
        raise DatasetError(f"{name}: declared classes {value} repeat a label")
    if len(value) < 2:
        raise DatasetError(f"{name}: node classification needs at least 2 declared classes, got {value}")
    return value


def prepare(
    data: Data,
    name: str,
    min_class_size: int | None = None,
    remove_unlabeled: bool = False,
    info: dict | None = None,
    classes=None,
    class_counts=None,
) -> GraphDataset:
    """Validate and normalise a raw graph into a :class:`GraphDataset`.

    Steps: check shapes and finiteness; make edges undirected, deduplicated and free of self
    loops; mark ``y < 0`` as unlabeled; check every label lies in the declared ``classes``;
    optionally drop the classes whose declared count is below ``min_class_size`` (their nodes
    become unlabeled, as GAP does) and, with ``remove_unlabeled``, drop unlabeled nodes from the
    graph; relabel the declared class values to 0..C-1 in declared order.

    The label domain is **declared**, never read from the labels (a model's output width is
    public): ``classes`` is the list of label values (or a count C for 0..C-1, see
    :func:`declared_classes`), or :data:`PUBLISHED` when the graph's own label set is public.
    A declared class without a labeled node keeps its output. ``class_counts`` (one count per
    declared class, or :data:`PUBLISHED`) are what ``min_class_size`` compares; without them it
    is refused. The domain kept is the dataset's ``public_facts["classes"]`` (class ``i`` is
    label value ``classes[i]``), with ``class_counts`` when declared.

    Raises:
        DatasetError: empty graph, malformed ``edge_index``, non-finite features, missing or
            non-integer labels, no declared domain, a label outside it, ``min_class_size``
            without declared counts, fewer than 2 classes, or no labeled node left.
    """
    if classes is None:
        raise DatasetError(f"{name}: the label domain is not declared; {DECLARE_CLASSES_PYTHON}")
    x, y, edge_index = getattr(data, "x", None), getattr(data, "y", None), getattr(data, "edge_index", None)
    if x is None or y is None or edge_index is None:
        raise DatasetError(f"{name}: a graph needs node features x, labels y and an edge_index")
    if not torch.is_tensor(x) or x.dim() != 2 or x.size(0) == 0 or x.size(1) == 0:
        raise DatasetError(f"{name}: x must be a non-empty [num_nodes, num_features] tensor")
    n = x.size(0)
    x = x.to(torch.float32)
    if not torch.isfinite(x).all():
        bad = (~torch.isfinite(x)).any(dim=1).nonzero().view(-1)
        raise DatasetError(
            f"{name}: node features contain NaN or infinite values in {bad.numel()} nodes (first: {bad[:5].tolist()})"
        )
    y = torch.as_tensor(y)
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if y.dim() != 1 or y.size(0) != n:
        raise DatasetError(f"{name}: y must be a vector with one label per node ({n}), got shape {tuple(y.shape)}")
    if y.is_floating_point():
        if not torch.isfinite(y).all() or not torch.equal(y, y.round()):
            raise DatasetError(f"{name}: labels must be integers (use -1 for unlabeled nodes)")
    y = y.to(torch.long)
    edge_index = torch.as_tensor(edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise DatasetError(f"{name}: edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool or edge_index.is_complex():
        raise DatasetError(f"{name}: edge_index must hold integer node indices")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n):
        raise DatasetError(f"{name}: edge_index refers to nodes outside 0..{n - 1}")
    edge_index = edge_index.detach().cpu()
    edge_index = undirected_edges(edge_index[0].numpy(), edge_index[1].numpy(), n)

    label_mask = y >= 0
    public_split = getattr(data, "public_split", None)
    steps = ["undirected", "deduplicated", "no self loops"]
    if not label_mask.any():
        raise DatasetError(f"{name}: no labeled node (labels must be >= 0 for at least one node)")

    if isinstance(classes, str) and classes == PUBLISHED:  # the graph's own label set, declared public
        classes = torch.unique(y[label_mask]).tolist()
        if len(classes) < 2:
            raise DatasetError(f"{name}: node classification needs at least 2 classes, found {len(classes)}")
    domain = torch.tensor(declared_classes(name, classes), dtype=torch.long)
    outside = label_mask & ~torch.isin(y, domain)
    if outside.any():
        values = torch.unique(y[outside])
        raise DatasetError(
            f"{name}: labels {values[:10].tolist()}{' ...' if values.numel() > 10 else ''} of "
            f"{int(outside.sum())} nodes are outside the declared classes {domain.tolist()}; declare them too "
            "or mark those nodes unlabeled (-1)"
        )
    if isinstance(class_counts, str) and class_counts == PUBLISHED:
        class_counts = [int((y[label_mask] == c).sum()) for c in domain.tolist()]
    if class_counts is not None:
        class_counts = [int(k) for k in class_counts]
        if len(class_counts) != domain.numel() or any(k < 0 for k in class_counts):
            raise DatasetError(f"{name}: declared class counts {class_counts} must be one count >= 0 per class")

    if min_class_size is not None and min_class_size > 0:
        if class_counts is None:
            raise DatasetError(
                f"{name}: min_class_size compares declared per-class counts, and this graph declares none; "
                "declare the classes to keep instead (classes=[...]), or declare the graph published "
                "(public_facts=True / --dataset-option declare=true)"
            )
        small = [c for c, k in zip(domain.tolist(), class_counts) if k < min_class_size]
        if small:
            label_mask = label_mask & ~torch.isin(y, torch.tensor(small, dtype=torch.long))
            kept = [i for i, k in enumerate(class_counts) if k >= min_class_size]
            domain, class_counts = domain[kept], [class_counts[i] for i in kept]
            steps.append(f"classes with < {min_class_size} nodes unlabeled: {small}")
    if remove_unlabeled:
        keep = label_mask.nonzero().view(-1)
        edge_index, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=n)
        x, y, label_mask = x[keep], y[keep], label_mask[keep]
        if public_split is not None:
            public_split = public_split[keep]
        n = keep.numel()
        steps.append("unlabeled nodes removed")
    if domain.numel() < 2:
        raise DatasetError(f"{name}: node classification needs at least 2 classes, found {domain.numel()}")
    if not label_mask.any():
        raise DatasetError(f"{name}: no labeled node (labels must be >= 0 for at least one node)")
    # declared value → its position in the declared order (every labeled value is declared)
    order = torch.argsort(domain)
    position = torch.searchsorted(domain[order], y.clamp(min=0)).clamp(max=domain.numel() - 1)
    y = torch.where(label_mask, order[position], torch.full_like(y, -1))

    out = Data(x=x.contiguous(), y=y, edge_index=edge_index, label_mask=label_mask, num_nodes=n)
    if public_split is not None:
        out.public_split = torch.where(label_mask, public_split, torch.full_like(public_split, -1))
    meta = dict(info or {})
    meta["preprocessing"] = steps
    facts = {"classes": domain.tolist()}
    if class_counts is not None:
        facts["class_counts"] = class_counts
    return GraphDataset(out, name, int(domain.numel()), fingerprint(out), meta, facts)


def from_data(
    data: Data, name: str = "custom", public_facts: dict | bool | None = None, classes=None, **kwargs
) -> GraphDataset:
    """Wrap a user's own PyG graph (validated and preprocessed like every loader's).

    ``classes``: the label domain, declared (a model's output width is public, so it is never
    read from private labels): the label values a model may predict, in order (class ``i`` is
    ``classes[i]``; the mapping is the dataset's ``public_facts["classes"]``), or a count ``C``
    for 0..C-1. A declared class without labeled nodes keeps its output; a label outside the
    domain is an error. Without ``classes``, only ``public_facts=True`` (a published graph: its
    own label set is public) declares it; otherwise the graph is refused before any work.

    ``public_facts``: what the user declares public about the graph's size. ``None`` (the
    default) declares nothing: defenses then read no size of the graph (``delta`` must be
    given, DP-SGD needs its ``sample_rate``). ``True`` declares the graph's own node, edge and
    labeled counts, its label set and per-class counts public (a published graph); a dict
    declares those values (e.g. ``{"num_nodes": 100_000}``, an upper bound known in advance),
    and may hold ``"classes"`` instead of the keyword. ``min_class_size`` needs the per-class
    counts declared (``public_facts=True``)."""
    if isinstance(public_facts, dict) and "classes" in public_facts:
        if classes is not None:
            raise DatasetError(f"{name}: classes given twice (the keyword and public_facts['classes'])")
        public_facts = dict(public_facts)
        classes = public_facts.pop("classes")
    _check_user_facts(name, public_facts)
    if classes is None and public_facts is not True:
        raise DatasetError(f"{name}: the label domain is not declared; {DECLARE_CLASSES_PYTHON}")
    if classes is not None:
        classes = declared_classes(name, classes)
    counted = public_facts is True and kwargs.get("min_class_size")  # a published graph's counts
    dataset = prepare(
        data, name, info={"loader": "user-supplied"}, classes=PUBLISHED if classes is None else classes,
        class_counts=PUBLISHED if counted else None, **kwargs,
    )  # fmt: skip
    return _declare_user_facts(dataset, public_facts)


#: sizes a user may declare public (``public_facts``; ``--dataset-option declare_<fact>=N``)
USER_FACTS = ("num_nodes", "num_edges", "num_labeled", "num_train")


def _check_user_facts(name: str, public_facts: dict | bool | None) -> None:
    if isinstance(public_facts, dict):
        unknown = set(public_facts) - set(USER_FACTS)
        if unknown:
            raise DatasetError(f"{name}: unknown public facts {sorted(unknown)} (classes, {', '.join(USER_FACTS)})")
        for key, value in public_facts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DatasetError(f"{name}: public fact {key}={value!r} must be a positive integer")
    elif public_facts not in (None, False, True):
        raise DatasetError(f"{name}: public_facts must be None, True or a dict of sizes")


def _declare_user_facts(dataset: GraphDataset, public_facts: dict | bool | None) -> GraphDataset:
    """Record what the user declares public (checked by :func:`_check_user_facts`) beside the
    declared label domain :func:`prepare` recorded."""
    if public_facts is True:
        dataset.declare_public("the user (the graph's own sizes are published)")
    else:
        sizes = dict(public_facts) if isinstance(public_facts, dict) else {}
        dataset.public_facts = {**dataset.public_facts, **sizes, "declared_by": "the user"}
    return dataset


# --------------------------------------------------------------------------- synthetic default


def csbm(
    num_nodes: int = 1000,
    num_classes: int = 4,
    num_features: int = 32,
    avg_degree: float = 8.0,
    homophily: float = 0.8,
    feature_signal: float = 0.6,
    seed: int = 0,
) -> GraphDataset:
    r"""Contextual stochastic block model (Deshpande et al. 2018), generated on the spot.

    Labels are balanced over ``num_classes``. Features are
    :math:`x_v = \mu_{y_v} + \mathcal{N}(0, I)` with random class means whose root-mean-square
    coordinate is ``feature_signal`` (the per-coordinate signal-to-noise ratio). About ``num_nodes·avg_degree/2`` undirected edges are drawn; a fraction
    ``homophily`` of them join nodes of the same class (edge homophily), the rest join nodes of
    different classes, endpoints uniform within the chosen classes.
    """
    if num_nodes < 2 or num_classes < 2 or num_classes > num_nodes or num_features < 1:
        raise DatasetError("csbm needs num_nodes >= 2, 2 <= num_classes <= num_nodes and num_features >= 1")
    if not 0.0 <= homophily <= 1.0:
        raise DatasetError(f"csbm homophily must lie in [0, 1], got {homophily}")
    if avg_degree <= 0 or avg_degree >= num_nodes:
        raise DatasetError(f"csbm avg_degree must lie in (0, num_nodes), got {avg_degree}")
    _check_csbm_memory(num_nodes, num_features, avg_degree)
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(num_nodes) % num_classes)
    means = rng.normal(size=(num_classes, num_features))
    means *= feature_signal / np.sqrt((means**2).mean(axis=1, keepdims=True))
    # the noise is drawn in row blocks (the same stream as one draw) and written as float32
    # at once: 4 bytes per feature entry at the peak, never a whole float64 matrix
    x = torch.empty(num_nodes, num_features, dtype=torch.float32)
    block = max(1, 2**22 // num_features)
    for start in range(0, num_nodes, block):
        rows = slice(start, min(start + block, num_nodes))
        noise = rng.normal(size=(rows.stop - start, num_features))
        noise += means[y[rows]]
        x[rows] = torch.from_numpy(noise)

    num_edges = int(round(num_nodes * avg_degree / 2))
    data = Data(
        x=x, y=torch.tensor(y, dtype=torch.long), edge_index=_csbm_edges(rng, y, num_classes, num_edges, homophily)
    )
    params = dict(
        num_nodes=num_nodes,
        num_classes=num_classes,
        num_features=num_features,
        avg_degree=avg_degree,
        homophily=homophily,
        feature_signal=feature_signal,
        seed=seed,
    )
    info = {"loader": "dpaudit.data.datasets.csbm", "parameters": params}
    dataset = prepare(data, "csbm", info=info, classes=num_classes)  # the generator's classes
    # A generated graph is public by construction: its generator parameters are in the card.
    return dataset.declare_public("the csbm generator (synthetic graph)")


def _csbm_edges(rng: np.random.Generator, y: np.ndarray, num_classes: int, num_edges: int, homophily: float):
    """csbm's edge draw ([2, num_edges] int64); each temporary is released once used, so that
    only the two endpoint arrays outlive the draw."""
    members = [np.flatnonzero(y == c) for c in range(num_classes)]
    src = rng.integers(0, y.size, size=num_edges)
    same = rng.random(num_edges) < homophily
    src_class = y[src]
    offset = rng.integers(1, num_classes, size=num_edges)
    dst_class = np.where(same, src_class, (src_class + offset) % num_classes)
    del same, src_class, offset
    sizes = np.array([len(m) for m in members])
    pick = (rng.random(num_edges) * sizes[dst_class]).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    order = np.concatenate(members)
    pick += starts[dst_class]
    del dst_class
    dst = order[pick]
    del pick
    return torch.from_numpy(np.stack([src, dst]))


def _check_csbm_memory(num_nodes: int, num_features: int, avg_degree: float) -> None:
    """Refuse, before allocating, a graph the machine cannot hold: float32 features (4 bytes
    per entry; the float64 noise is drawn in bounded blocks), edges as six int64 arrays while
    drawn and, while made undirected (:func:`undirected_edges`), about as many again: ~100
    bytes per undirected edge at the peak."""
    from dpaudit.runtime import device_memory

    needed = 4 * num_nodes * num_features + 100 * num_nodes * avg_degree / 2
    memory = device_memory(torch.device("cpu"))
    if memory is not None and needed > memory:
        raise DatasetError(
            f"csbm with num_nodes={num_nodes}, num_features={num_features}, avg_degree={avg_degree:g} needs about "
            f"{needed / 2**30:.3g} GiB; this machine has {memory / 2**30:.3g} GiB"
        )


# --------------------------------------------------------------------------- real datasets


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


FACEBOOK100 = ("reed98", "amherst41", "cornell5", "johnshopkins55", "penn94")

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
    "cora": 7, "citeseer": 6, "pubmed": 3, "cora_ml": 7, "actor": 5, "cornell": 5, "texas": 5, "wisconsin": 5,
    **{school: 2 for school in FACEBOOK100}, "reddit": 41, "ogbn-arxiv": 40,
}  # fmt: skip
#: the published label domain of a Facebook100 school's target (raw ``local_info`` values, in
#: class order) where GAP's threshold keeps the cohorts: the classes with >= 5 % of the labeled
#: nodes (:data:`FACEBOOK100_MIN_CLASS_SHARE`). Derived once from the public files (LINKX's
#: ``data.mat``) and fixed here: a public fact of the benchmark, never recomputed from the data.
#: A school/target not listed derives its classes from the benchmark's published counts.
FACEBOOK100_CLASSES: dict[tuple[str, str], tuple[int, ...]] = {
    ("reed98", "year"): (2005, 2006, 2007, 2008, 2009),
    ("reed98", "status"): (1, 2),
    ("reed98", "dorm"): (86, 88, 90, 96, 110, 111, 113),
    ("johnshopkins55", "year"): (2004, 2005, 2006, 2007, 2008, 2009),
    ("johnshopkins55", "status"): (1, 2),
    ("johnshopkins55", "dorm"): (51, 52, 53),
    ("cornell5", "year"): (2004, 2005, 2006, 2007, 2008, 2009),
    ("cornell5", "status"): (1, 2),
}

# Columns of Facebook100's ``local_info`` (Traud et al. 2012); 0 means "missing".
FACEBOOK100_COLUMNS = ("status", "gender", "major", "minor", "dorm", "year", "high_school")
FACEBOOK100_TARGETS = ("gender", "year", "status", "dorm")
# Default minimum class size for a Facebook100 target, as a share of the labeled nodes. GAP
# keeps UIllinois20's class years with >= 1000 of ~30,000 nodes (~3 %); 5 % keeps the cohorts
# and drops the stragglers on every school we ship (Johns Hopkins: 2004-2009 kept).
FACEBOOK100_MIN_CLASS_SHARE = 0.05


def parse_dataset_name(name: str) -> tuple[str, str | None]:
    """``"johnshopkins55:year"`` → ``("johnshopkins55", "year")``; no target → ``None``."""
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


def facebook100(mat_path: Path, target: str) -> tuple[Data, int]:
    """A Facebook100 school with ``target`` as label; features one-hot the other columns.

    As LINKX does for gender: every other ``local_info`` column is one-hot encoded (0,
    "missing", is a category of its own); nodes whose target is 0 are unlabeled, the others keep
    the raw value (a year, a dorm code) as label. Returns the graph and the default minimum
    class size (:data:`FACEBOOK100_MIN_CLASS_SHARE`).
    """
    from scipy.io import loadmat

    try:
        mat = loadmat(str(mat_path))
        adjacency, info = mat["A"].tocoo(), np.asarray(mat["local_info"]).astype(np.int64)
    except Exception as exc:
        raise DatasetError(f"could not read Facebook100 file {mat_path}: {exc}") from exc
    column = FACEBOOK100_COLUMNS.index(target)
    blocks = []
    for c in range(info.shape[1]):
        if c == column:
            continue
        _, codes = np.unique(info[:, c], return_inverse=True)
        blocks.append(np.eye(codes.max() + 1, dtype=np.float32)[codes])
    raw = info[:, column]
    labeled = raw > 0
    y = np.where(labeled, raw, -1).astype(np.int64)  # the raw values: the declared domain names them
    edge_index = torch.from_numpy(np.vstack([adjacency.row, adjacency.col]).astype(np.int64))
    data = Data(x=torch.from_numpy(np.hstack(blocks)), y=torch.from_numpy(y), edge_index=edge_index)
    data.num_nodes = raw.shape[0]
    return data, max(1, int(round(FACEBOOK100_MIN_CLASS_SHARE * labeled.sum())))


def reddit(folder: Path) -> Data:
    """Reddit (Hamilton et al. 2017) from PyG's raw layout (``raw/reddit_data.npz``: ``feature``,
    ``label``; ``raw/reddit_graph.npz``: the adjacency as a SciPy sparse file), read without
    PyG's processing pass: the float32 features are used as stored and the edges stay in the
    file's integer type until :func:`undirected_edges`, which is all of the graph's processing
    (PyG's pass stores int64 copies of both directions, then a processed copy on disk). Like
    PyG's ``Reddit``, no split is taken from the file's ``node_types``."""
    raw = folder / "raw"
    # edges counted as if int32 (an int64 or two-row file counts double: a conservative estimate)
    _check_load_memory(
        "reddit", _npz_member_bytes(raw / "reddit_data.npz", "feature"),
        _npz_member_bytes(raw / "reddit_graph.npz", "row", "coords") // 4,
    )  # fmt: skip
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
    test 2019) is the public split."""
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


def available_datasets() -> list[str]:
    return [*SYNTHETIC, *SOURCES]


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root``, else ``$DPAUDIT_DATA``, else ``~/.cache/dpaudit/datasets``."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("DPAUDIT_DATA")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "dpaudit" / "datasets"


def cache_root() -> Path:
    env = os.environ.get("DPAUDIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dpaudit" / "processed"


def missing_raw_files(name: str, root: str | os.PathLike | None = None) -> list[str]:
    source = SOURCES[name]
    raw = data_root(root) / source.folder / "raw"
    return [f for f in source.raw_files if not (raw / f).is_file()]


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


#: options of every dataset (:func:`prepare`'s): a choice, recorded with the dataset
PREPROCESSING_OPTIONS = ("min_class_size", "remove_unlabeled")
#: what a user declares public about a graph file (``declare=true``: its own sizes and label set
#: are published; ``declare_classes=0,1,2`` or ``=C``: the label domain; ``declare_num_nodes=N``
#: ...: a bound known in advance; see :func:`from_data`)
FILE_OPTIONS = ("declare", "declare_classes", *(f"declare_{fact}" for fact in USER_FACTS))
_CSBM_INTEGERS = ("num_nodes", "num_classes", "num_features", "seed")


def dataset_options(name: str) -> list[str]:
    """The options ``name`` accepts (``--dataset-option KEY=VALUE``; :func:`load_dataset`'s keywords)."""
    from dpaudit.data.graph_files import is_graph_path

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
    """
    from dpaudit.data.graph_files import is_graph_path

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


def check_file_declaration(name: str, options: dict) -> None:
    """A graph file's label domain is declared (``declare_classes`` or ``declare=true``), and
    ``min_class_size`` runs on declared counts (``declare=true``): refused before any work (the
    commands call this on their options before reading the file; :func:`load_dataset` too).

    Raises:
        DatasetError: one line saying what to declare.
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
    """
    from dpaudit.data.graph_files import is_graph_path

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
            ds = prepare(ds.data, "csbm", min_class_size, remove_unlabeled, ds.info, ds.public_facts["classes"],
                         PUBLISHED if min_class_size else None)  # fmt: skip
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

    sizes = {key.removeprefix("declare_"): int(v) for key, v in options.items()
             if key.startswith("declare_") and key != "declare_classes"}  # fmt: skip
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
                raw, f"{key}:{target}", default_min if min_class_size is None else min_class_size, remove_unlabeled,
                info, PUBLISHED, PUBLISHED,
            )
        )  # fmt: skip
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
    """
    from dpaudit.data.graph_files import LOADER, file_sha256, is_graph_path

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


def describe_availability(root: str | os.PathLike | None = None) -> list[dict]:
    """For ``dpaudit datasets``: each dataset, whether it is present, and what it needs."""
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
