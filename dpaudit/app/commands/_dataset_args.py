"""What the commands share about their data: ``--dataset`` (a name or a graph file),
``--dataset-option``, ``--split``, the checks made on them before any work, and the advice
that leads to a valid audit.

Not a sub-command (the leading underscore keeps :func:`dpaudit.app.commands.register_all` away).
"""

from __future__ import annotations

import logging
import shlex

from dpaudit.assignments import parse_literal, split_assignment
from dpaudit.data.graph_paths import check_file_declaration, is_graph_path
from dpaudit.errors import ConfigurationError, DatasetError, PrivacyParameterError

log = logging.getLogger("dpaudit")

DATASET_HELP = (
    "a dataset name (see `dpaudit datasets`; csbm is generated) or your own graph file: PATH.npz (arrays x, y, "
    "edge_index, optional train_mask/val_mask/test_mask) or PATH.pt (torch.save of a PyG Data)"
)
DATASET_OPTION_HELP = (
    "dataset option (repeatable): csbm's num_nodes, num_classes, num_features, avg_degree, homophily, "
    "feature_signal, seed; a graph file's label domain, which it must declare: declare_classes=0,1,2 (the label "
    "values a model may predict, in order; or a count C for 0..C-1) or declare=true (its own sizes and label set "
    "are published), and declare_num_nodes=N, declare_num_edges=N, declare_num_labeled=N, declare_num_train=N "
    "(public bounds); any dataset's min_class_size=K (on declared counts), remove_unlabeled=true"
)
SPLIT_HELP = (
    "public | random:TR,VA,TE | per-class:K,VA,TE | inductive:TR,TE[,VA] | metis:K (K >= 6, DPAR's partition); "
    "only random, per-class and inductive splits give an audit a valid ε bound"
)


def add_dataset_option_argument(parser) -> None:
    parser.add_argument("--dataset-option", action="append", metavar="KEY=VALUE", help=DATASET_OPTION_HELP)


def parse_dataset_options(items: list[str] | None, dataset: str | None, declaring: bool = True) -> dict:
    """``["num_nodes=500", "declare=true"]`` → typed options, each known to ``dataset`` and in
    its range (:func:`dpaudit.data.datasets.check_dataset_options`), before anything is loaded. A
    graph file that a model is trained on (``declaring``) must declare its label domain
    (:func:`dpaudit.data.datasets.check_file_declaration`); an audit takes the model's."""
    from dpaudit.data.datasets import check_dataset_options

    options = option_values(items, dataset)
    if dataset is not None:
        check_dataset_options(dataset, options)
        if declaring and is_graph_path(dataset):
            check_file_declaration(dataset, options)
    return options


def option_values(items: list[str] | None, dataset: str | None) -> dict:
    """``["num_nodes=500", "declare=true"]`` → ``{"num_nodes": 500, "declare": True}``, each key
    once, read without importing anything heavy (:func:`parse_dataset_options` then checks each
    against the dataset).

    Args:
        items: the ``--dataset-option`` values.
        dataset: the ``--dataset`` value (options need one).

    Returns:
        The options, typed as literals.

    Raises:
        ConfigurationError: a malformed or repeated item, or options without a dataset.
    """
    options = {}
    for item in items or []:
        _, key, value = split_assignment(item, "--dataset-option")
        if key in options:
            raise ConfigurationError(f"--dataset-option {key} is given twice")
        options[key] = parse_literal(value)
    if options and dataset is None:
        raise ConfigurationError("--dataset-option needs --dataset")
    return options


def check_label_domain_first(dataset: str | None, items: list[str] | None, units: list[str | None] | None) -> None:
    """A graph file's undeclared label domain, refused before torch is imported where it is all
    :func:`check_declarations` would say: when no private defense is trained (``units``: the run's
    privacy units, each ``None`` for a non-private defense, as :func:`dpaudit.app.names.builtin_units`
    reads them; ``None`` where a unit is not known before the import). A private defense may lack
    more declarations, which :func:`check_declarations` says at once, after the import.

    Args:
        dataset: the ``--dataset`` value.
        items: the ``--dataset-option`` values.
        units: the privacy units of the defenses the run trains privately, or ``None`` (unknown).

    Raises:
        DatasetError: the label domain is not declared (one line).
        ConfigurationError: a malformed ``--dataset-option``.
    """
    if dataset is None or units is None or any(unit is not None for unit in units) or not is_graph_path(dataset):
        return
    check_file_declaration(dataset, option_values(items, dataset))


def absolute_dataset(name: str) -> str:
    """A graph file as an absolute path (a study's workers, and its resumption from another
    folder, read the same file); a registry name unchanged."""
    from pathlib import Path

    return str(Path(name).expanduser().resolve()) if is_graph_path(name) else name


def declared_facts_of(dataset: str, options: dict) -> set[str] | None:
    """The facts a graph file's ``--dataset-option``s declare (``num_nodes``, ``num_train`` ...);
    ``None`` for a registry dataset or csbm, which declare every size themselves."""
    from dpaudit.data.datasets import USER_FACTS

    if not is_graph_path(dataset):
        return None
    if options.get("declare"):
        return set(USER_FACTS)
    return {key.removeprefix("declare_") for key in options if key.startswith("declare_")}


def check_declarations(dataset: str, options: dict, defenses: list, delta) -> None:
    """Every declaration a model on the user's own graph lacks, said at once (one line, before
    any work): the label domain (:func:`dpaudit.data.datasets.check_file_declaration`), δ = auto's
    declared size (:func:`check_delta_declared`) and what each private defense reads from
    declared facts (:meth:`dpaudit.training.defense.Defense.missing_declarations`). ``defenses``: the run's
    defense objects (the non-private ones need only the label domain)."""
    declared = declared_facts_of(dataset, options)
    if declared is None:
        return
    label_domain = None
    try:
        check_file_declaration(dataset, options)
    except DatasetError as exc:
        label_domain = exc
    private = [d for d in defenses if d.unit is not None and getattr(d, "private", True)]
    missing = [str(label_domain).partition(": ")[2]] if label_domain is not None else []
    try:
        check_delta_declared(dataset, options, [d.unit for d in private], delta)
    except PrivacyParameterError as exc:
        missing.append(str(exc))
    for defense in private:
        missing += defense.missing_declarations(declared)
    missing = list(dict.fromkeys(missing))
    if len(missing) == 1:
        if label_domain is not None:
            raise label_domain
        raise PrivacyParameterError(missing[0])
    if missing:
        who = f"a private model on {dataset}" if private else dataset
        raise PrivacyParameterError(
            f"{who} needs {len(missing)} things declared or set, all before any work: "
            + "; ".join(f"({i}) {text}" for i, text in enumerate(missing, 1))
        )


def check_delta_declared(dataset: str, options: dict, units: list[str], delta) -> None:
    """``--delta auto`` on a graph file needs the size δ is chosen from (the protected units:
    nodes or edges) to be declared; say how to proceed, before any work. Registry datasets and
    csbm always declare their sizes."""
    from dpaudit.data.datasets import USER_FACTS

    if not is_graph_path(dataset) or str(delta).strip().lower() != "auto":
        return
    if options.get("declare"):
        return
    declared = {key.removeprefix("declare_") for key in options if key.startswith("declare_")}
    for unit in dict.fromkeys(units):
        fact = {"node": "num_nodes", "edge": "num_edges"}.get(unit)
        if fact in USER_FACTS and fact not in declared:
            raise PrivacyParameterError(
                f"--delta auto picks δ below 1/(declared {unit}s), and the graph file {dataset} declares no size: "
                f"pass --delta D (below 1/its {unit}s), or --dataset-option declare=true if its sizes are published "
                f"(declare_{fact}=N for a public upper bound)"
            )


# --------------------------------------------------------------------------- valid audits


def random_split_like(dataset, split) -> str:
    """A split drawn at random with the shape of ``split`` (which was not): ``per-class`` when
    every class has the same number of training nodes (the Planetoid public splits), else
    ``random`` / ``inductive`` with the same fractions of the labeled nodes."""
    import torch

    labeled = max(int(dataset.data.label_mask.sum()), 1)
    counts = torch.bincount(dataset.data.y[split.train], minlength=dataset.num_classes)
    if not split.inductive and len(split.train) and bool((counts == counts[0]).all()):
        return f"per-class:{int(counts[0])},{len(split.val)},{len(split.test)}"
    tr, va, te = (
        max(round(len(part) / labeled, 2), 0.01 if part is split.train else 0.0)
        for part in (split.train, split.val, split.test)
    )
    if split.inductive:
        return f"inductive:{tr:g},{te:g}" + (f",{va:g}" if va else "")
    return f"random:{tr:g},{va:g},{te:g}"


def command_with(argv: list[str], flag: str, value: str) -> str:
    """The command ``dpaudit ARGV`` with ``flag``'s value replaced (or the flag added)."""
    out, replaced, i = [], False, 0
    while i < len(argv):
        item = argv[i]
        if item == flag and i + 1 < len(argv):
            out += [flag, value]
            replaced, i = True, i + 2
            continue
        if item.startswith(flag + "="):
            out.append(f"{flag}={value}")
            replaced = True
        else:
            out.append(item)
        i += 1
    return shlex.join(["dpaudit", *out, *([] if replaced else [flag, value])])


def warn_if_membership_not_random(dataset, split, argv: list[str]) -> None:
    """One log line, before training, when ``split`` makes membership non-random (the rule of
    :func:`dpaudit.data.splits.split_is_random`, which every attack's ``bound_valid`` applies), with
    the exact command that trains on a random split instead."""
    from dpaudit.data.splits import split_is_random

    random, why = split_is_random(split.spec)
    if not random:
        log.warning(
            "%s: an audit of this model gives no valid ε bound; for one, train with: %s",
            why,
            command_with(argv, "--split", random_split_like(dataset, split)),
        )


def valid_bound_advice(model, dataset) -> str | None:
    """One line for ``audit``: how to get a valid bound when the model's split is not random."""
    from dpaudit.data.splits import split_is_random
    from dpaudit.errors import DPAuditError
    from dpaudit.release.provenance import target_split

    card_split = model.provenance("split") or model.card.get("split") or {}
    if not card_split.get("spec"):
        return None
    random, why = split_is_random(card_split.get("spec"), card_split)
    if random:
        return None
    try:
        suggestion = random_split_like(dataset, target_split(model, dataset))
    except DPAuditError:  # no owner's record: the split cannot be rebuilt, suggest the default
        suggestion = "random:0.75,0.1,0.15"
    return (
        f"no valid ε bound: {why}; retrain with `dpaudit train ... --split {suggestion}` (the same sizes, drawn "
        "at random) and audit that model"
    )
