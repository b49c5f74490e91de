"""The defense contract, one function per check (scikit-learn's ``check_estimator`` for defenses).

Every registered defense (:func:`dpaudit.training.registry.available_defenses`) must pass every check;
the project's tests/contract/test_defense_contract.py parametrises them over the registry, so a
new defense gets them all by registering. :func:`check_defense` runs them all on one defense
(a registered name or a :class:`~dpaudit.training.defense.Defense` subclass), e.g. in a new
defense's own tests (docs/howto/new-defense.md)::

    from dpaudit.testing import check_defense
    check_defense("gcon", tmp_path, encoder_epochs=5)

A check takes a :class:`Subject` (the defense, its fast settings, a tiny graph and split, and
the privacy target it is trained at: a finite ε with δ given for a private defense, ε = ∞ for
a non-private one) and a scratch folder; it raises ``AssertionError`` when the defense breaks
the contract and :class:`CheckSkipped` when the check does not apply to it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import typing
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

import dpaudit.release.model
from dpaudit.data.datasets import GraphDataset, csbm
from dpaudit.data.splits import Split, make_split
from dpaudit.errors import ConfigurationError, ModelFormatError
from dpaudit.release.model import META_FILE, PLUGIN_GROUP, WEIGHTS_FILE, ReleasedModel, training_release
from dpaudit.runtime import to_json
from dpaudit.testing.neighbours import leaf_differences, public_files, without_edge, without_node
from dpaudit.training.defense import Defense
from dpaudit.training.noise import SECURE, SEEDED
from dpaudit.training.registry import available_defenses, get_defense

#: the privacy target of a private defense under test (δ given: no declared size is needed)
EPSILON, DELTA = 4.0, 1e-3
#: the default split of the tiny graph
SPLIT = "random:0.6,0.2,0.2"


def registered_defenses() -> list[str]:
    """Every defense the installed plugins register (``dpaudit.plugins`` entry points), by name:
    :func:`~dpaudit.training.registry.available_defenses` less the ones a test module registered for
    itself (e.g. tests/dpaudit/app/test_gradient_canary.py's deliberately quieter mlp-dp), which would
    otherwise join the suite or not depending on which test file was imported first."""
    plugins = {entry.value.split(":")[0].split(".")[0] for entry in metadata.entry_points(group=PLUGIN_GROUP)}
    return [name for name in available_defenses() if get_defense(name).__module__.split(".")[0] in plugins]


class CheckSkipped(Exception):
    """The check does not apply to this defense (the message says why).

    Attributes:
        args: why the check does not apply, as ``args[0]``.
    """


def tiny_graph() -> GraphDataset:
    """A 150-node CSBM graph (it declares its classes and sizes, as the neighbour rebuild needs)."""
    return csbm(num_nodes=150, num_classes=3, num_features=12, avg_degree=5, homophily=0.8, feature_signal=1.0, seed=3)


@dataclasses.dataclass
class Subject:
    """One defense under test: its class, fast hyperparameters, graph, split and privacy target.

    :meth:`fitted` is the seed-0 fit on the graph, made once and saved once (``saved``) at
    once, before anything queries it (a query can change a model's config: GAP counts its
    query releases), so checks may share it; :meth:`fit` always trains afresh.

    Attributes:
        defense: the defense class.
        settings: its fast hyperparameters (overrides of the defaults).
        dataset: the graph it trains on.
        split: the split it trains with.
        root: the folder the fitted model is saved under.
    """

    defense: type[Defense]
    settings: dict[str, Any]
    dataset: GraphDataset
    split: Split
    root: Path
    _fitted: ReleasedModel | None = None
    _saved: Path | None = None

    @classmethod
    def of(
        cls,
        defense: str | type[Defense],
        root: str | Path,
        dataset: GraphDataset | None = None,
        split: Split | str | None = None,
        **settings: Any,
    ) -> Subject:
        """The subject of ``defense`` on ``dataset`` (default: a tiny graph) and its split.

        Args:
            defense: a registered defense's name or class.
            root: the folder the fitted model is saved under (created).
            dataset: the graph; ``None``: a tiny built-in graph.
            split: a split, or its spec; ``None``: the default spec.
            **settings: the defense's hyperparameters.

        Returns:
            The subject.
        """
        defense = get_defense(defense) if isinstance(defense, str) else defense
        dataset = dataset if dataset is not None else tiny_graph()
        if split is None or isinstance(split, str):
            split = make_split(dataset, split or SPLIT, 0)
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        return cls(defense, dict(settings), dataset, split, root)

    @property
    def name(self) -> str:
        return self.defense.name

    @property
    def private(self) -> bool:
        return self.defense.unit is not None

    @property
    def privacy_args(self) -> dict[str, Any]:
        return {"epsilon": EPSILON, "delta": DELTA} if self.private else {"epsilon": math.inf}

    def make(self, seed: int = 0, noise: str = SEEDED, **overrides: Any) -> Defense:
        """The defense with ``seed``; **seeded** noise unless asked otherwise: the checks compare
        fits under one seed (:mod:`dpaudit.training.noise`; :func:`check_noise_source` asks for the
        default, OS-entropy noise)."""
        return self.defense(seed=seed, noise=noise, **self.privacy_args, **{**self.settings, **overrides})

    def fit(
        self, seed: int = 0, dataset: GraphDataset | None = None, split: Split | None = None, noise: str = SEEDED
    ) -> ReleasedModel:
        return self.make(seed, noise).fit(dataset if dataset is not None else self.dataset, split or self.split)

    def fitted(self) -> ReleasedModel:
        """The seed-0 fit on the subject's graph, trained and saved on first use, then shared."""
        if self._fitted is None:
            self._fitted = self.fit(0)
            self._saved = self._fitted.save(self.root / "fitted")
        return self._fitted

    @property
    def saved(self) -> Path:
        self.fitted()
        return self._saved


# --------------------------------------------------------------------------- helpers


def _json(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists, numbers stay numbers)."""
    return json.loads(to_json(value))


def _same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], what: str) -> None:
    assert sorted(a) == sorted(b), f"{what}: tensor names differ: {sorted(set(a) ^ set(b))}"
    for key in a:
        x, y = a[key].detach().cpu(), b[key].detach().cpu()
        assert x.dtype == y.dtype and x.shape == y.shape, (
            f"{what}: {key} is {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}"
        )
        assert torch.equal(x, y), (
            f"{what}: tensor {key} differs (max |Δ| {float((x.double() - y.double()).abs().max()):.3g})"
        )


def _answers(model: Any, graph, nodes, seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor]:
    """``predict_proba`` and ``embed`` under one seed of torch's global RNG (a model whose queries
    are fresh noisy releases, like GAP's, draws its noise there: the same seed, the same noise)."""
    torch.manual_seed(seed)
    proba = model.predict_proba(graph, nodes)
    torch.manual_seed(seed)
    embedding = model.embed(graph, nodes)
    return proba.detach().cpu(), embedding.detach().cpu()


def _manifest(directory: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name → (shape, dtype) of every tensor in ``model.safetensors``."""
    with safe_open(str(directory / WEIGHTS_FILE), framework="pt") as handle:
        out = {}
        for key in handle.keys():
            t = handle.get_tensor(key)
            out[key] = (tuple(t.shape), str(t.dtype))
    return out


# --------------------------------------------------------------------------- the checks


def check_save_load_round_trip(subject: Subject, tmp_path: Path) -> None:
    """``save`` then :func:`dpaudit.release.model.load` — the owner's copy and a third party's
    (``record=False``) — give the same kind, privacy spec, card, config and tensors, and the
    same answers: ``predict_proba`` / ``embed`` under one global seed, and the owner's training
    release (where the model has one: GAP's cached aggregations) answer for answer.

    Args:
        subject: the defense under test.
        tmp_path: a scratch folder of the check.

    Raises:
        AssertionError: the defense breaks the contract (the message says how).
    """
    model = subject.fitted()
    directory = subject.saved
    expected = {
        "privacy": _json(model.privacy.to_dict()),
        "card": _json(model.card),
        "config": _json(model.config()),
        "record": _json(model.record),
    }
    tensors = model.state_tensors()
    owner = dpaudit.release.model.load(directory, record=True)
    public = dpaudit.release.model.load(directory, record=False)
    graph, nodes = subject.dataset.data, subject.split.test
    reference = _answers(copy.deepcopy(model), graph, nodes)
    release = training_release(model)
    for label, loaded in (("owner's copy", owner), ("third party's copy", public)):
        what = f"{subject.name} round trip ({label})"
        assert type(loaded) is type(model) and loaded.kind == model.kind, f"{what}: {type(loaded)} vs {type(model)}"
        assert _json(loaded.privacy.to_dict()) == expected["privacy"], f"{what}: privacy spec differs"
        assert _json(loaded.card) == expected["card"], f"{what}: card differs"
        assert _json(loaded.config()) == expected["config"], f"{what}: config differs"
        _same_tensors(tensors, loaded.state_tensors(), what)
        got = _answers(loaded, graph, nodes)
        assert torch.equal(reference[0], got[0]), f"{what}: predict_proba differs"
        assert torch.equal(reference[1], got[1]), f"{what}: embed differs"
    assert _json(owner.record) == expected["record"], f"{subject.name} round trip: the owner's record differs"
    assert public.record == {}, f"{subject.name} round trip: a third party's copy holds the owner's record"
    if release is not None:
        owned = training_release(owner)
        assert owned is not None, f"{subject.name} round trip: the owner's copy lost its training release"
        assert training_release(public) is None, (
            f"{subject.name} round trip: a third party's copy has a training release"
        )
        assert torch.equal(release.predict_proba(graph, nodes), owned.predict_proba(graph, nodes)), (
            f"{subject.name} round trip: the training release answers differently"
        )


def _refused(directory: Path) -> str | None:
    """The load error's message, or ``None`` when the file loads."""
    try:
        dpaudit.release.model.load(directory, record=False)
    except ModelFormatError as exc:  # IntegrityError is one
        return str(exc)
    return None


def _edited(source: Path, target: Path, edit: Callable[[dict], None]) -> Path:
    target.mkdir(parents=True)
    (target / WEIGHTS_FILE).write_bytes((source / WEIGHTS_FILE).read_bytes())
    meta = json.loads((source / META_FILE).read_text())
    edit(meta)
    (target / META_FILE).write_text(json.dumps(meta))
    return target


def check_plan_integrity_on_load(subject: Subject, tmp_path: Path) -> None:
    """A saved model whose ``model.json`` claims another guarantee is refused at load
    (``IntegrityError``, or another ``ModelFormatError``): a private model's ε halved, and σ of
    the first recorded mechanism that states one doubled (GCON records it in the mechanism's
    details); a non-private model relabelled private (ε = 1 with no mechanism to prove it).

    Args:
        subject: the defense under test.
        tmp_path: a scratch folder of the check.

    Raises:
        AssertionError: the defense breaks the contract (the message says how).
    """
    directory = subject.saved
    assert _refused(directory) is None, f"{subject.name}: the unedited copy must load"
    edits: dict[str, Callable[[dict], None]] = {}
    if subject.private:

        def halve_epsilon(meta: dict) -> None:
            meta["privacy"]["epsilon"] = meta["privacy"]["epsilon"] / 2

        edits["epsilon halved"] = halve_epsilon
        sigma = _first_sigma(meta_privacy(directory)["mechanisms"])
        if sigma is not None:

            def double_sigma(meta: dict, where: tuple[int, bool] = sigma) -> None:
                record = meta["privacy"]["mechanisms"][where[0]]
                (record["details"] if where[1] else record)["sigma"] *= 2

            edits["sigma doubled"] = double_sigma
    else:

        def claim_privacy(meta: dict) -> None:
            meta["privacy"].update(epsilon=1.0, delta=1e-5, unit="node")

        edits["non-private relabelled ε = 1"] = claim_privacy
    for label, edit in edits.items():
        target = _edited(directory, tmp_path / label.replace(" ", "-"), edit)
        assert _refused(target) is not None, f"{subject.name}: a model.json with {label} loads"


def _first_sigma(mechanisms: list[dict]) -> tuple[int, bool] | None:
    """(index, in ``details``) of the first recorded mechanism that states a noise scale σ."""
    for i, record in enumerate(mechanisms):
        if isinstance(record.get("sigma"), (int, float)):
            return i, False
        if isinstance(record.get("details"), dict) and isinstance(record["details"].get("sigma"), (int, float)):
            return i, True
    return None


def meta_privacy(directory: Path) -> dict[str, Any]:
    """The ``privacy`` entry of a saved model's ``model.json``.

    Args:
        directory: the model's folder.

    Returns:
        The privacy spec as JSON data.
    """
    return json.loads((directory / META_FILE).read_text())["privacy"]


def check_release_neutrality(subject: Subject, tmp_path: Path) -> None:
    """Same seed on G and on its neighbour — G minus its highest-degree training node (node
    level) or minus one train–train edge (edge level) — writes the same public leaves of
    ``model.json`` (bar the weights' hash and the leaves the defense declares in
    ``released_statistics``: outputs of accounted mechanisms) and the same tensor names, shapes and dtypes in
    ``model.safetensors``: nothing but the accounted weights depends on the protected unit.

    Args:
        subject: the defense under test.
        tmp_path: a scratch folder of the check.

    Raises:
        AssertionError: the defense breaks the contract (the message says how).
        CheckSkipped: the defense is not private.
    """

    if not subject.private:
        raise CheckSkipped("non-private: nothing to be neutral about")
    if subject.defense.unit == "node":
        dataset, split = without_node(subject.dataset, subject.split)
    elif subject.defense.unit == "edge":
        dataset, split = without_edge(subject.dataset, subject.split), subject.split
    else:
        raise AssertionError(f"{subject.name}: unknown privacy unit {subject.defense.unit!r}")
    base = subject.saved
    # a declared statistic names a leaf of model.json by its path from the top (``card.…``, ``config.…``):
    # a path under another root never matches, and the exemption it was meant to make silently fails
    roots = set(json.loads((base / META_FILE).read_text()))
    misnamed = [k for k in subject.defense.released_statistics if k.split(".")[0] not in roots]
    assert not misnamed, (
        f"{subject.name}: released_statistics name no model.json leaf (roots {sorted(roots)}): {misnamed}"
    )
    neighbour = subject.fit(0, dataset, split).save(tmp_path / "neighbour")
    assert public_files(base) == public_files(neighbour), f"{subject.name}: the public files differ"
    differences = leaf_differences(base, neighbour)
    # leaves the defense declares to hold an accounted mechanism's output may differ, like the weights
    differences = {k: v for k, v in differences.items() if k not in subject.defense.released_statistics}
    assert differences == {}, f"{subject.name}: model.json leaves differ on the neighbour: {differences}"
    assert _manifest(base) == _manifest(neighbour), (
        f"{subject.name}: model.safetensors' tensors differ on the neighbour"
    )


def _numeric(annotation: Any) -> type | None:
    """``int`` or ``float`` when a field's declared type is one (optionally ``| None``)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    if len(args) == 1 and args[0] in (int, float):
        return args[0]
    return None


def numeric_hyperparameters(defense: type[Defense]) -> list[str]:
    """The defense's hyperparameters declared ``int`` or ``float`` (booleans excluded).

    Args:
        defense: the defense class.

    Returns:
        The hyperparameters' names.
    """
    hp = defense.hyperparameters_class
    types = typing.get_type_hints(hp)
    return [f.name for f in dataclasses.fields(hp) if _numeric(types[f.name]) is not None]


def check_bad_hyperparameters_refused(subject: Subject, tmp_path: Path) -> None:
    """Construction (no data, no fit) refuses with ``ConfigurationError``: each numeric
    hyperparameter at -1 and at NaN, and an unknown hyperparameter name.

    Args:
        subject: the defense under test.
        tmp_path: a scratch folder of the check.

    Raises:
        AssertionError: the defense breaks the contract (the message says how).
    """
    accepted = []
    for field in numeric_hyperparameters(subject.defense):
        for bad in (-1, math.nan):
            try:
                subject.make(0, **{field: bad})
            except ConfigurationError:
                continue
            except Exception as exc:  # noqa: BLE001 - any other error is a contract breach too
                accepted.append(f"{field}={bad!r} ({type(exc).__name__}: {exc})")
            else:
                accepted.append(f"{field}={bad!r}")
    assert not accepted, f"{subject.name}: construction does not refuse with ConfigurationError: {', '.join(accepted)}"
    try:
        subject.make(0, no_such_hyperparameter=1)
    except ConfigurationError:
        pass
    else:
        raise AssertionError(f"{subject.name}: an unknown hyperparameter name is accepted")


def check_determinism(subject: Subject, tmp_path: Path) -> None:
    """Two fits under one seed give bit-identical weights; a private defense's fit under another
    seed gives different ones (its noise, at least, depends on the seed).

    Args:
        subject: the defense under test.
        tmp_path: a scratch folder of the check.

    Raises:
        AssertionError: the defense breaks the contract (the message says how).
    """
    first = subject.fitted().state_tensors()
    _same_tensors(first, subject.fit(0).state_tensors(), f"{subject.name}: two fits with seed 0")
    if subject.private:
        other = subject.fit(1).state_tensors()
        assert any(not torch.equal(first[k].cpu(), other[k].cpu()) for k in first if k in other), (
            f"{subject.name}: seeds 0 and 1 give identical weights"
        )


def check_noise_source(subject: Subject, tmp_path: Path) -> None:
    """A private defense's noise cannot be replayed from the seed (issue 46): two fits with seed 0
    and the default noise (OS entropy, :mod:`dpaudit.training.noise`) give different weights or owner's
    records, and
    the cards say which noise each fit drew (``secure``; ``seeded`` for the checks' own fits)."""
    if not subject.private:
        raise CheckSkipped("non-private: no privacy noise")
    first, second = (subject.fit(0, noise=SECURE) for _ in range(2))
    assert first.card.get("noise") == SECURE and subject.fitted().card.get("noise") == SEEDED, (
        f"{subject.name}: the card does not say which noise the fit drew"
    )
    # the weights and the owner's record (e.g. GAP-EDP's cached noisy release on the training
    # graph): a sound GAP-EDP whose skip head falls back on its public encoder (K = 0) ships
    # weights that read no noisy statistic, so only its record shows the noise it drew
    a = {**first.state_tensors(), **{f"record.{k}": v for k, v in first.record_tensors().items()}}
    b = {**second.state_tensors(), **{f"record.{k}": v for k, v in second.record_tensors().items()}}
    assert any(not torch.equal(a[k].cpu(), b[k].cpu()) for k in a if k in b), (
        f"{subject.name}: two fits with seed 0 and the default noise give identical weights and records: its privacy "
        "noise is replayable from the seed (draw it from the defense's noise source, dpaudit.training.noise)"
    )


#: every check, in the order :func:`check_defense` runs them
CHECKS: tuple[Callable[[Subject, Path], None], ...] = (
    check_save_load_round_trip,
    check_plan_integrity_on_load,
    check_release_neutrality,
    check_bad_hyperparameters_refused,
    check_determinism,
    check_noise_source,
)


def check_defense(
    defense: str | type[Defense],
    tmp_path: str | Path,
    dataset: GraphDataset | None = None,
    split: Split | str | None = None,
    **settings: Any,
) -> dict[str, str]:
    """Run every check of the defense contract (:data:`CHECKS`) on one defense.

    Args:
        defense: a registered name or a :class:`~dpaudit.training.defense.Defense` subclass.
        tmp_path: a scratch folder (one subfolder per check).
        dataset: the graph to train on; by default a 150-node CSBM graph (:func:`tiny_graph`).
        split: a :class:`~dpaudit.data.splits.Split` or a split spec; by default :data:`SPLIT`.
        **settings: hyperparameters that make training fast (a few epochs, small widths).

    Returns:
        ``{check name: "passed" | "skipped: why"}``.

    Raises:
        AssertionError: the first check the defense fails, saying what broke.
    """
    subject = Subject.of(defense, Path(tmp_path) / "subject", dataset, split, **settings)
    outcome = {}
    for check in CHECKS:
        folder = Path(tmp_path) / check.__name__
        folder.mkdir(parents=True, exist_ok=True)
        try:
            check(subject, folder)
        except CheckSkipped as why:
            outcome[check.__name__] = f"skipped: {why}"
        else:
            outcome[check.__name__] = "passed"
    return outcome
