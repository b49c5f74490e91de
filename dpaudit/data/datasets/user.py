"""A user's own graph: :func:`from_data` wraps a PyG ``Data`` with its declared label domain and
what the user declares public about its sizes (:data:`USER_FACTS`)."""

from __future__ import annotations

from torch_geometric.data import Data

from dpaudit.data.datasets.graph import GraphDataset
from dpaudit.data.datasets.preprocessing import DECLARE_CLASSES_PYTHON, PUBLISHED, declared_classes, prepare
from dpaudit.errors import DatasetError


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
    counts declared (``public_facts=True``).

    Args:
        data: the user's PyG graph.
        name: the dataset's name.
        public_facts: see above.
        classes: see above.
        **kwargs: :func:`prepare`'s ``min_class_size`` and ``remove_unlabeled``.

    Returns:
        The :class:`GraphDataset`.

    Raises:
        DatasetError: undeclared or doubly given classes, invalid facts, or a graph :func:`prepare` refuses.
    """
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
        data,
        name,
        info={"loader": "user-supplied"},
        classes=PUBLISHED if classes is None else classes,
        class_counts=PUBLISHED if counted else None,
        **kwargs,
    )
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
