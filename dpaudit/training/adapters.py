"""Audit your own model: wrap a plain PyTorch / PyG module as a released model.

>>> from dpaudit.training.adapters import adapt
>>> model = adapt(my_gcn, dataset, train_nodes=idx_train, privacy=None)      # doctest: +SKIP
>>> attacks.run("link-steal", model, dataset)                                 # doctest: +SKIP

The wrapped module is called as ``module(x, edge_index)`` (``input="graph"``, PyG style) or
``module(x)`` (``input="features"``) and returns logits (``output="logits"``) or
probabilities (``output="proba"``). ``embed`` uses ``module.embed`` with the same signature
when the module has one, else the logits (said in the card).

What the adapter cannot know — and therefore states:

* the privacy guarantee is the user's **claim** (a :class:`PrivacySpec`, a dict in its JSON
  form, or ``None`` for a non-private model); dpaudit does not verify it: a private claim is
  marked ``sound: false`` with the unaccounted step :data:`USER_STATED`, and the model's
  ``verification`` says "stated by the user, not recomputed";
* the training recipe is unknown, so attacks that need shadow models train them with a
  stated **surrogate** recipe (a registered defense, ``gcn`` by default) and say so in
  their result notes;
* which nodes were training nodes must be given (``train_nodes`` or a :class:`Split`).

An adapted model lives in memory only: it cannot be saved, because a released model on disk
is data, never code, and the user's module class is code.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch_geometric.data import Data

import dpaudit
from dpaudit.accounting.spec import PrivacySpec
from dpaudit.accounting.verify import Verification
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError, ModelFormatError
from dpaudit.release.deployments import inference_entry
from dpaudit.release.model import ReleasedModel, _node_index
from dpaudit.training.registry import get_defense

#: The unaccounted step every private user claim carries (``sound: false``).
USER_STATED = (
    "the guarantee is stated by the user, not proven: dpaudit ran none of the mechanisms behind it and cannot "
    "recompute its epsilon"
)


class AdaptedModel(ReleasedModel):
    """A user's module behind the released-model interface (see the module docstring)."""

    kind = "adapted"

    def __init__(
        self,
        module: torch.nn.Module,
        privacy: PrivacySpec,
        card: dict[str, Any],
        input: str = "graph",
        output: str = "logits",
    ):
        super().__init__(privacy, card)
        if input not in ("graph", "features"):
            raise ConfigurationError("adapter input must be 'graph' (module(x, edge_index)) or 'features' (module(x))")
        if output not in ("logits", "proba"):
            raise ConfigurationError("adapter output must be 'logits' or 'proba'")
        self.module = module.eval()
        self.input = input
        self.output = output
        self.verification = Verification(
            "stated" if privacy.is_private else "non-private",
            "stated by the user, not recomputed: dpaudit recorded no mechanism for this guarantee"
            if privacy.is_private
            else "non-private (no privacy claim)",
            not_checked=["ε, δ and unit are the user's claim"] if privacy.is_private else [],
        )

    @property
    def device(self) -> torch.device:
        try:
            return next(self.module.parameters()).device
        except StopIteration:
            return torch.device("cpu")

    def _call(self, fn, graph: Data) -> torch.Tensor:
        x = graph.x.to(self.device)
        if self.input == "features":
            return fn(x)
        return fn(x, graph.edge_index.to(self.device))

    @torch.no_grad()
    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        idx = _node_index(graph, nodes)
        out = self._call(self.module, graph)
        if not torch.is_tensor(out) or out.dim() != 2 or out.size(0) != graph.num_nodes:
            raise ModelFormatError("the wrapped module must return a [num_nodes, num_classes] tensor")
        probs = torch.softmax(out, dim=1) if self.output == "logits" else out
        return probs[idx.to(probs.device)]

    @torch.no_grad()
    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        idx = _node_index(graph, nodes)
        fn = getattr(self.module, "embed", None) or self.module
        out = self._call(fn, graph)
        return out[idx.to(out.device)]

    def config(self) -> dict[str, Any]:
        raise ModelFormatError("an adapted user module cannot be saved: released models on disk hold no code")

    def state_tensors(self) -> dict[str, torch.Tensor]:
        raise ModelFormatError("an adapted user module cannot be saved: released models on disk hold no code")

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        raise ModelFormatError("adapted user modules cannot be loaded from disk")


def _privacy(claim) -> PrivacySpec:
    if claim is None:
        return PrivacySpec.non_private("user-supplied model without a privacy claim")
    if isinstance(claim, PrivacySpec):
        spec = claim
    elif isinstance(claim, dict):
        spec = PrivacySpec.from_dict(claim)
    else:
        raise ConfigurationError("privacy must be a PrivacySpec, its dict form, or None")
    if spec.is_private and (spec.unit is None or not 0.0 <= spec.delta < 1.0 or not spec.epsilon > 0):
        raise ConfigurationError(f"inconsistent privacy claim {spec.to_dict()}")
    spec.notes = [*spec.notes, "claimed by the user; not verified by dpaudit"]
    if spec.is_private:
        # No mechanism dpaudit ran is behind it: shown as stated, never as a proven bound.
        spec.mark_unaccounted(USER_STATED)
    return spec


def _dry_run(model: AdaptedModel, dataset: GraphDataset) -> None:
    """Query ``model`` once on ``dataset``'s graph, as every attack will: a module that cannot
    be called that way (``input="graph"`` on a module that takes only ``x``, a feature width it
    was not built for) fails here, in one clear line, not inside the first attack."""
    args = "(x)" if model.input == "features" else "(x, edge_index)"
    embed = "module.embed" if getattr(model.module, "embed", None) else "module"
    for query, call in ((model.predict_proba, "module" + args), (model.embed, embed + args)):
        try:
            query(dataset.data)
        except DPAuditError:
            raise
        except Exception as exc:
            raise ConfigurationError(
                f"adapt: {call} fails on {dataset.name} ({dataset.num_nodes} nodes, {dataset.num_features} features): "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def adapt(
    module: torch.nn.Module,
    dataset: GraphDataset,
    train_nodes=None,
    split: Split | None = None,
    privacy: PrivacySpec | dict | None = None,
    *,
    input: str = "graph",
    output: str = "logits",
    surrogate: str = "gcn",
    surrogate_hyperparameters: dict[str, Any] | None = None,
    inference_private: bool = False,
    name: str = "user-module",
    seed: int = 0,
) -> AdaptedModel:
    """Wrap ``module`` (trained on ``dataset``, training nodes ``train_nodes`` or
    ``split.train``) with its claimed ``privacy`` into the released-model interface.

    The module is queried once on ``dataset``'s graph, as ``input`` says it is called: one that
    cannot be called that way is a :class:`~dpaudit.errors.ConfigurationError` here."""
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError("adapt expects a torch.nn.Module")
    if not isinstance(dataset, GraphDataset):
        raise ConfigurationError("adapt expects a dpaudit GraphDataset (dpaudit.data.datasets.from_data wraps PyG Data)")
    if split is None:
        if train_nodes is None:
            raise ConfigurationError("adapt needs the training nodes (train_nodes=...) or a split")
        train = torch.as_tensor(train_nodes).view(-1)
        if train.dtype == torch.bool:
            train = train.nonzero().view(-1)
        train = train.long().unique()
        if train.numel() == 0 or train.min() < 0 or train.max() >= dataset.num_nodes:
            raise ConfigurationError(f"train_nodes must be non-empty node indices in 0..{dataset.num_nodes - 1}")
        split = Split(train, torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), "explicit", seed)
    cls = get_defense(surrogate)  # unknown names fail here, with the list of known ones
    hp = dict(surrogate_hyperparameters or {})
    cls(epsilon=math.inf if cls.unit is None else 1.0, **hp)  # validates the hyperparameter names
    spec = _privacy(privacy)
    card = {
        "method": name,
        "hyperparameters": {},
        "target_epsilon": spec.epsilon if spec.is_private else None,
        "delta_option": str(spec.delta) if spec.is_private and spec.delta > 0 else "auto",
        "dataset": dataset.card(),
        "split": split.public_dict(),
        "dpaudit_version": dpaudit.__version__,
        "surrogate": {"method": surrogate, "hyperparameters": hp},
        "inference": inference_entry(
            private=spec.is_private,
            training_graph=bool(inference_private),
            note="claimed by the user" if inference_private else "user model: inference assumed non-private",
        ),
        "adapter": {
            "input": input,
            "output": output,
            "embed": "module.embed" if hasattr(module, "embed") else "logits",
        },
    }
    model = AdaptedModel(module, spec, card, input=input, output=output)
    _dry_run(model, dataset)
    # who trained and on which nodes is the owner's record, never the shareable card
    model.record = {
        "dataset": dataset.record(),
        "split": {**split.to_dict(), "nodes": {p: getattr(split, p).tolist() for p in ("train", "val", "test")}},
        "seed": seed,
    }
    if _drawn_by_dpaudit(dataset, split):
        model.record["split"]["drawn_at_random"] = True
    return model


def _drawn_by_dpaudit(dataset: GraphDataset, split: Split) -> bool:
    """Whether ``split`` is exactly what dpaudit's seeded RNG draws for its random spec: then
    membership was decided by coins the module never saw, and audit bounds are valid."""
    from dpaudit.data.splits import make_split, split_is_random

    if not split_is_random(split.spec)[0]:
        return False
    try:
        drawn = make_split(dataset, split.spec, split.seed)
    except DPAuditError:
        return False
    return all(torch.equal(getattr(drawn, part), getattr(split, part)) for part in ("train", "val", "test"))
