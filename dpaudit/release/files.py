"""What a third party receives with a released model, and what stays the owner's record.

A released model directory holds two kinds of files:

======================  =========================================================  ==========
file                    holds                                                      covered by ε
======================  =========================================================  ==========
``model.safetensors``   the trained weights (the output of the accounted mechanism)  yes
``model.json``          schema, model kind, architecture, the privacy spec, the       yes
                        public card: hyperparameters, the declared public facts,
                        the plan derived from them, tensor manifest, weights hash
``provenance.json``     the owner's record: dataset fingerprint, exact node and edge  **no**
                        counts, split seed, sizes and node lists, the training seed,
                        sampled sizes, solver and training diagnostics, timings
``metrics.json``        accuracies on the owner's train / validation / test nodes     **no**
``provenance.safetensors``  a defense's cached answers on the training graph (GAP),  **no**
                        usable only by the owner
======================  =========================================================  ==========

Ship ``model.safetensors`` and ``model.json`` only. :func:`dpaudit.release.model.load` needs nothing
else; audits read the owner's record when it is there (membership, the dataset fingerprint).

Why each public leaf is public (the rule :func:`check_public_card` enforces):

* ``method``, ``hyperparameters``, ``protocol``, ``target_epsilon``, ``delta_option``,
  ``overrides``, ``inference``, versions: choices made before any data is read.
* ``dataset``: the registry **name**, number of classes and features (node features and
  labels' domain are declared facts of the task), the generator parameters of a synthetic
  graph, and ``public_facts``: the declared label domain (``classes``: class ``i`` is label
  value ``classes[i]``) and sizes **declared** before training (a public benchmark's
  published node / edge / split sizes, or a size the user declares), never measured on the
  private graph. The same declaration is recorded in the privacy spec (``public_facts``).
* ``split``: the split *specification* (``random:0.75,0.1,0.15``), never its seed, sizes or
  nodes (the seed plus the data would reconstruct membership, and the training seed would
  reconstruct the noise: both are the owner's).
* per-defense sections (``dpar``, ``gcon``, ``dpgnn``, ``mlp_dp``, ``gap``): only what the
  defense's plan derives from public hyperparameters and declared facts (σ, steps, q, the
  theorem's constants). Anything measured during training goes to the owner's record.
* ``selection`` (``--set select=private``, :mod:`dpaudit.training.private_selection`): the public grid,
  the law of the number of runs (η, γ, E[K]), the score's definition and noise, the per-run ε
  and the chosen candidate — the selection's output, which its ε covers. The number of runs,
  the scores and the other runs are not covered (Papernot & Steinke's theorem releases the best
  run only): owner's record.

The training seed is the owner's: with the seed, anyone holding the neighbouring datasets can
re-run training and strip the noise, which voids every ε.
"""

from __future__ import annotations

from typing import Any

from dpaudit.errors import DPAuditError

PUBLIC_FILES = ("model.safetensors", "model.json")
RECORD_FILE = "provenance.json"
METRICS_FILE = "metrics.json"
#: files of a model directory that are the owner's (never covered by the guarantee)
OWNER_FILES = (RECORD_FILE, "provenance.safetensors", METRICS_FILE)

#: top-level keys a public model card may hold (see the module docstring for why each is public)
PUBLIC_CARD_KEYS = frozenset(
    {
        "method",
        "hyperparameters",
        "protocol",
        "target_epsilon",
        "delta_option",
        "dataset",
        "split",
        "dpaudit_version",
        "library_versions",
        "inference",
        "overrides",
        "surrogate",
        "adapter",
        # the privacy noise source's mode ("secure"/"seeded"; dpaudit.training.noise): seeded is not a release
        "noise",
        # per-defense plans: derived from public hyperparameters and declared facts only
        "mlp_dp",
        "dpar",
        "gap",
        "gcon",
        "dpgnn",
        # accounted hyperparameter selection: public grid, law, per-run ε and the chosen candidate
        "selection",
        # a non-private baseline's grid selected on validation: the grid, the rule, the chosen candidate
        "validation_selection",
    }
)
PUBLIC_DATASET_KEYS = frozenset({"name", "num_classes", "num_features", "parameters", "target", "public_facts"})
PUBLIC_SPLIT_KEYS = frozenset({"spec", "inductive"})
#: keys that never belong in a public card, wherever they are nested (measured on private data)
PRIVATE_LEAF_NAMES = frozenset(
    {
        "fingerprint",
        "seed",
        "sizes",
        "nodes",
        "timings",
        "train_seconds",
        "seconds",
        "source",
        "key",
        "val_accuracy",
        "best_val_epoch",
        # a private selection's number of runs and scores (not covered by its theorem)
        "number_of_runs",
        "scores",
        "score_history",
    }
)


class PublicCardError(DPAuditError):
    """A public card holds a field that is not declared public (a bug in the defense)."""


def check_public_card(card: dict[str, Any]) -> None:
    """Refuse a card that would put an undeclared or private field into ``model.json``.

    Raises:
        PublicCardError: the first offending key (one line).

    Args:
        card: the card to be written.
    """
    extra = sorted(set(card) - PUBLIC_CARD_KEYS)
    if extra:
        raise PublicCardError(f"model card fields {extra} are not declared public (they belong in the owner's record)")
    dataset = card.get("dataset") or {}
    if set(dataset) - PUBLIC_DATASET_KEYS:
        raise PublicCardError(f"model card dataset fields {sorted(set(dataset) - PUBLIC_DATASET_KEYS)} are not public")
    split = card.get("split") or {}
    if set(split) - PUBLIC_SPLIT_KEYS:
        raise PublicCardError(f"model card split fields {sorted(set(split) - PUBLIC_SPLIT_KEYS)} are not public")
    for key, value in card.items():
        if key in ("hyperparameters", "overrides", "library_versions", "dataset"):
            continue  # choices and versions; a hyperparameter named ``seed`` is a choice
        bad = _private_leaf(value, key)
        if bad:
            raise PublicCardError(f"model card field {bad!r} is measured on private data (owner's record only)")


#: keys a model's architecture config must never hold (a digest or measurement of private data)
PRIVATE_CONFIG_NAMES = frozenset({"fingerprint", "key", "sizes", "nodes", "seed", "timings"})


def check_public_config(config: dict[str, Any]) -> None:
    """Refuse an architecture config holding a digest or measurement of the private data
    (a training-graph key that would answer "is this your graph?").

    Raises:
        PublicCardError: the first offending key.

    Args:
        config: the model's architecture config.
    """
    bad = _private_leaf(config, "config", PRIVATE_CONFIG_NAMES)
    if bad:
        raise PublicCardError(f"model config field {bad!r} depends on private data (owner's record only)")


def _private_leaf(value: Any, path: str, names: frozenset = PRIVATE_LEAF_NAMES) -> str | None:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in names:
                return f"{path}.{k}"
            found = _private_leaf(v, f"{path}.{k}", names)
            if found:
                return found
    return None


# --------------------------------------------------------------------------- declared facts


def declared_facts(dataset, split=None) -> dict[str, Any]:
    """The public facts a run may read: the dataset's declaration plus the split's declared
    sizes (``num_train``). Empty when nothing is declared (then no size may be read).

    Args:
        dataset: the dataset (its ``public_facts``).
        split: the split (its ``declared_sizes``), or ``None``.

    Returns:
        The facts dict.
    """
    facts = dict(getattr(dataset, "public_facts", None) or {})
    sizes = getattr(split, "declared_sizes", None) if split is not None else None
    if facts and sizes:
        facts.setdefault("num_train", int(sizes["train"]))  # a user's own declaration wins
    return facts


def declared_train_size(dataset, split) -> int | None:
    """The declared number of training nodes (a public benchmark's split size), or ``None``.

    Args:
        dataset: the dataset.
        split: the split.

    Returns:
        ``num_train`` or ``None``.
    """
    value = declared_facts(dataset, split).get("num_train")
    return None if value is None else int(value)


def declared_population(unit: str | None, dataset, split) -> int | None:
    """The declared number of protected units, for ``delta = auto``: nodes (node level) or
    undirected edges (edge level) of the declared graph; ``None`` when nothing is declared.

    The whole declared graph bounds the training graph's units from above, so δ < 1/declared
    is at least as strict as δ < 1/actual.

    Args:
        unit: ``"node"``, ``"edge"`` or ``None``.
        dataset: the dataset.
        split: the split.

    Returns:
        The count (≥ 1), or ``None``.
    """
    facts = declared_facts(dataset, split)
    key = {"node": "num_nodes", "edge": "num_edges"}.get(unit or "")
    if key is None or facts.get(key) is None:
        return None
    return max(1, int(facts[key]))


def require_declared(value: int | None, what: str, instead: str) -> int:
    """``value`` or one clear error naming what to declare (before any work).

    Args:
        value: the declared value, or ``None``.
        what: what needs it (named in the error).
        instead: the alternative the error suggests.

    Returns:
        ``value`` as an int.

    Raises:
        DPAuditError: ``value`` is ``None``.
    """
    if value is None:
        raise DPAuditError(
            f"{what} needs a declared public size, and this dataset declares none: declare it "
            f"(--dataset-option declare=true on the command line; from_data(..., public_facts={{...}}) in Python) "
            f"or {instead}"
        )
    return int(value)


#: the declared sizes :func:`check_public_facts` compares (each a count, so an integer >= 0)
SIZE_FACTS = ("num_nodes", "num_edges", "num_labeled", "num_train")


def check_public_facts(facts: dict[str, Any], card: dict[str, Any], mechanisms: list[dict] | None = None) -> None:
    """The declared facts of a privacy spec, consistent with each other, with the card's copy of
    the declaration, and with the recorded mechanisms (checked on load, so an edited
    ``public_facts`` in ``model.json`` is refused rather than printed as the model's).

    * each size is an integer >= 0; ``num_train <= num_labeled <= num_nodes`` and
      ``num_edges <= num_nodes·(num_nodes − 1)/2``;
    * every fact the card's ``dataset.public_facts`` also states has the same value there;
    * a recorded sampling rate ``q`` samples at least one unit of the declared graph in
      expectation (``q · max(num_nodes, num_edges) >= 1``: the schedule was planned with
      ``q = batch / declared size``, so a declared size that shrank below the batch is an edit).

    Args:
        facts: the spec's ``public_facts`` (``{}`` when nothing was declared: nothing to check).
        card: the model's public card.
        mechanisms: the spec's recorded mechanism dicts.

    Raises:
        DPAuditError: the first inconsistency, in one line naming the facts.
    """
    if not facts:
        return
    sizes = {}
    for key in SIZE_FACTS:
        value = facts.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DPAuditError(f"public_facts.{key} = {value!r} is not a count (an integer >= 0)")
        sizes[key] = value
    order = [k for k in ("num_train", "num_labeled", "num_nodes") if k in sizes]
    for small, large in zip(order, order[1:]):
        if sizes[small] > sizes[large]:
            raise DPAuditError(
                f"the declared facts contradict each other: {small} = {sizes[small]} > {large} = {sizes[large]}"
            )
    if "num_edges" in sizes and "num_nodes" in sizes:
        most = sizes["num_nodes"] * (sizes["num_nodes"] - 1) // 2
        if sizes["num_edges"] > most:
            raise DPAuditError(
                f"the declared facts contradict each other: num_edges = {sizes['num_edges']} exceeds the "
                f"{most} possible edges of num_nodes = {sizes['num_nodes']}"
            )
    stated = ((card.get("dataset") or {}).get("public_facts")) or {}
    for key, value in stated.items():
        if key in facts and key != "declared_by" and facts[key] != value:
            raise DPAuditError(
                f"public_facts.{key} = {facts[key]!r} in the privacy spec, but the card's dataset declares {value!r}"
            )
    population = max(sizes.get("num_nodes", 0), sizes.get("num_edges", 0))
    for i, mech in enumerate(mechanisms or [], 1):
        rate = mech.get("sample_rate") if isinstance(mech, dict) else None
        if population and isinstance(rate, (int, float)) and 0 < rate and rate * population < 1:
            raise DPAuditError(
                f"mechanism {i} ({mech.get('name', mech.get('mechanism', '?'))}) samples at rate q = {rate:g}, "
                f"less than one unit of the declared graph (max(num_nodes, num_edges) = {population}); the facts "
                "do not match what the mechanism was planned with"
            )
