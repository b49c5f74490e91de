"""What every loader applies to a raw graph (:func:`prepare`): validation, undirected deduplicated
edges without self loops (:func:`undirected_edges`), the declared label domain
(:func:`declared_classes`, :data:`PUBLISHED`), optional class pruning, and the content
:func:`fingerprint`."""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from dpaudit.data.datasets.graph import GraphDataset
from dpaudit.errors import DatasetError


def fingerprint(data: Data) -> str:
    """First 16 hex digits of the SHA-256 of ``x``, ``y`` and ``edge_index`` (shapes and bytes).

    Args:
        data: the graph.

    Returns:
        The fingerprint.
    """
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
    instead of the several int64 copies of both directions the PyG utilities make.

    Args:
        row: edge sources.
        col: edge targets.
        num_nodes: number of nodes.

    Returns:
        The edge_index.

    Shapes:
        row: [E]
        col: [E]
        return: [2, 2U]
    """
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

    Args:
        name: the dataset's name (for messages).
        value: the declaration.

    Returns:
        The label values.
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
    loops; mark ``y = -1`` as unlabeled (any other negative label is refused); check every label lies in the declared ``classes``;
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
            non-integer labels, a negative label other than -1, no declared domain, a label outside it, ``min_class_size``
            without declared counts, fewer than 2 classes, or no labeled node left.

    Args:
        data: the raw PyG graph.
        name: the dataset's name.
        min_class_size: drop classes whose declared count is below it.
        remove_unlabeled: drop unlabeled nodes.
        info: loader information kept in ``info``.
        classes: the declared label domain (or :data:`PUBLISHED`).
        class_counts: declared per-class counts (or :data:`PUBLISHED`), or ``None``.

    Returns:
        The :class:`GraphDataset`.
    """
    if classes is None:
        raise DatasetError(f"{name}: the label domain is not declared; {DECLARE_CLASSES_PYTHON}")
    x, y, edge_index = _checked_graph(data, name)
    n = x.size(0)

    negative = y < -1  # -1 marks an unlabeled node; any other negative value is a mistake, never "unlabeled"
    if bool(negative.any()):
        values = sorted({int(v) for v in y[negative].tolist()})
        raise DatasetError(
            f"{name}: {int(negative.sum())} node(s) have a negative label other than -1 "
            f"({', '.join(map(str, values[:5]))}{' ...' if len(values) > 5 else ''}); -1 marks an unlabeled node and "
            "class labels are >= 0: fix those labels, or set them to -1 if the nodes are unlabeled"
        )
    label_mask = y >= 0
    public_split = getattr(data, "public_split", None)
    steps = ["undirected", "deduplicated", "no self loops"]
    if not label_mask.any():
        raise DatasetError(f"{name}: no labeled node (labels must be >= 0 for at least one node)")

    domain, class_counts = _label_domain(name, y, label_mask, classes, class_counts)

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


def _checked_graph(data: Data, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`prepare`'s validation: float32 finite features [n, F], integer labels [n] (long),
    and the edges within 0..n-1 made undirected, deduplicated and free of self loops
    (:func:`undirected_edges`).

    Raises:
        DatasetError: a missing or malformed x, y or edge_index, non-finite features or
            non-integer labels.
    """
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
    return x, y, edge_index


def _label_domain(name: str, y: torch.Tensor, label_mask: torch.Tensor, classes, class_counts):
    """:func:`prepare`'s declared label domain as a tensor of label values (the graph's own label
    set for :data:`PUBLISHED`) and the declared per-class counts (``None``, or one per class;
    :data:`PUBLISHED`: counted on the labels).

    Raises:
        DatasetError: fewer than 2 published classes, a label outside the domain, or counts that
            are not one count >= 0 per class.
    """
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
    return domain, class_counts
