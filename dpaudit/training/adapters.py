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
  ``protocol: claimed`` (status ``claimed``: a hypothesis, neither proven nor a paper's), marked
  ``sound: false`` with the unaccounted step :data:`USER_STATED`, and the model's
  ``verification`` says "stated by the user, not recomputed". Audits test it: ceilings are what
  the claim allows, and a valid certified lower bound above it refutes it ("claim refuted");
* the training recipe is unknown, so attacks that need shadow models train them with a
  stated **surrogate** recipe (a registered defense, ``gcn`` by default) and say so in
  their result notes;
* which nodes were training nodes must be given (``train_nodes`` or a :class:`Split`).

An adapted model is saved (:func:`export`, :meth:`AdaptedModel.save`) as a released model of
kind ``module`` whose architecture is **declared** (:class:`dpaudit.nn.LayerStack`: Linear,
GCNConv, SAGEConv and GATConv layers with one activation between them), never code: a module
that is not such a stack is refused, naming the layer, and the declared stack must give the
module's own outputs on the dataset's graph before anything is written.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, SAGEConv

import dpaudit
from dpaudit.accounting.spec import CLAIMED, PrivacySpec
from dpaudit.accounting.verify import stated_verification
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError, ModelFormatError
from dpaudit.nn import ACTIVATIONS, STACK_LAYERS, build_architecture
from dpaudit.release.deployments import inference_entry
from dpaudit.release.model import ModuleModel, ReleasedModel, _node_index
from dpaudit.training.registry import get_defense

#: The unaccounted step every private user claim carries (``sound: false``).
USER_STATED = (
    "the guarantee is stated by the user, not proven: dpaudit ran none of the mechanisms behind it and cannot "
    "recompute its epsilon"
)


class AdaptedModel(ReleasedModel):
    """A user's module behind the released-model interface (see the module docstring).

    Args:
        module: the user's trained module.
        privacy: the (user-claimed) privacy spec.
        card: the public card.
        input: ``"graph"`` (``module(x, edge_index)``) or ``"features"`` (``module(x)``).
        output: ``"logits"`` or ``"proba"``.

    Raises:
        ConfigurationError: an unknown ``input`` or ``output``.
    """

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
        self.verification = stated_verification(privacy)

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
        """Class posteriors of the wrapped module (softmax of its logits when ``output="logits"``).

        Args:
            graph: the queried graph.
            nodes: node ids, or ``None`` for all.

        Returns:
            Posteriors.

        Raises:
            ModelFormatError: the module does not return a [num_nodes, num_classes] tensor.

        Shapes:
            return: [len(nodes), num_classes]
        """
        idx = _node_index(graph, nodes)
        out = self._call(self.module, graph)
        if not torch.is_tensor(out) or out.dim() != 2 or out.size(0) != graph.num_nodes:
            raise ModelFormatError("the wrapped module must return a [num_nodes, num_classes] tensor")
        probs = torch.softmax(out, dim=1) if self.output == "logits" else out
        return probs[idx.to(probs.device)]

    @torch.no_grad()
    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """The module's ``embed`` output if it has one, else its output.

        Args:
            graph: the queried graph.
            nodes: node ids, or ``None`` for all.

        Returns:
            Embeddings.

        Shapes:
            return: [len(nodes), hidden]
        """
        idx = _node_index(graph, nodes)
        fn = getattr(self.module, "embed", None) or self.module
        out = self._call(fn, graph)
        return out[idx.to(out.device)]

    def config(self) -> dict[str, Any]:
        """Always raises: an adapted module is saved through :func:`export`.

        Raises:
            ModelFormatError: always.
        """
        raise ModelFormatError("an adapted module is written as a declared architecture: use save() or export()")

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Always raises: an adapted module is saved through :func:`export`.

        Raises:
            ModelFormatError: always.
        """
        raise ModelFormatError("an adapted module is written as a declared architecture: use save() or export()")

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Always raises: exported adapted modules load as kind ``module``.

        Args:
            config: unused.
            tensors: unused.
            privacy: unused.
            card: unused.

        Raises:
            ModelFormatError: always.
        """
        raise ModelFormatError("adapted user modules load as kind 'module' (their declared architecture)")

    def save(self, directory, activation: str | None = None, overwrite: bool = False):
        """Write this model as a released model (:func:`export`): the declared architecture and
        its weights, the user's claim (``protocol: claimed``) and the owner's record; a released
        model already in ``directory`` is replaced only with ``overwrite``."""
        return export(self, activation=activation).save(directory, overwrite=overwrite)


def _privacy(claim) -> PrivacySpec:
    if claim is None:
        return PrivacySpec.non_private("user-supplied model without a privacy claim")
    if isinstance(claim, PrivacySpec):
        spec = claim
    elif isinstance(claim, dict):
        spec = PrivacySpec.from_dict(claim)
    else:
        raise ConfigurationError("privacy must be a PrivacySpec, its dict form, or None")
    if spec.is_private:
        wrong = [
            *(["unit is missing (node or edge)"] if spec.unit is None else []),
            *([f"delta = {spec.delta} is not in [0, 1)"] if not 0.0 <= spec.delta < 1.0 else []),
            *([f"epsilon = {spec.epsilon} is not > 0"] if not spec.epsilon > 0 else []),
        ]
        if wrong:
            raise ConfigurationError(f"adapt: privacy claim: {'; '.join(wrong)}")
    spec.notes = [*spec.notes, "claimed by the user; not verified by dpaudit"]
    if spec.is_private:
        if spec.mechanisms:
            raise ConfigurationError("a user's claim records no mechanism (dpaudit ran none): drop 'mechanisms'")
        # No mechanism dpaudit ran is behind it: a hypothesis audits test, never a proven bound.
        spec.protocol = CLAIMED
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
    _check_outputs(model, dataset, "module" + args)


#: how far a row of ``output="proba"`` may be from a probability vector (float32 softmax rounding)
PROBA_TOLERANCE = 1e-3


@torch.no_grad()
def _check_outputs(model: AdaptedModel, dataset: GraphDataset, call: str) -> None:
    """On the probe forward: one output per **declared** class (the model's output width is
    public: a module with 5 outputs on a 3-class graph answers about classes that do not
    exist), and with ``output="proba"`` rows that are probabilities (non-negative, summing to 1
    within :data:`PROBA_TOLERANCE`; logits passed as probabilities would make every attack's
    scores meaningless)."""
    out = model._call(model.module, dataset.data)
    if out.size(1) != dataset.num_classes:
        raise ConfigurationError(
            f"adapt: {call} returns {out.size(1)} outputs per node, and {dataset.name} declares "
            f"{dataset.num_classes} classes; the module's output width must be the declared class count"
        )
    if model.output == "proba":
        sums = out.float().sum(dim=1)
        low = float(out.min()) if out.numel() else 0.0
        if low < -PROBA_TOLERANCE or not bool(((sums - 1).abs() <= PROBA_TOLERANCE).all()):
            shown = ", ".join(f"{v:.3g}" for v in sums[:3].tolist())
            raise ConfigurationError(
                f"adapt: output='proba', but the rows {call} returns are not probabilities (row sums {shown} ..., "
                f"smallest entry {low:.3g}); pass output='logits' if it returns logits"
            )


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
    cannot be called that way is a :class:`~dpaudit.errors.ConfigurationError` here.

    Args:
        module: the user's trained module.
        dataset: the dataset it was trained on.
        train_nodes: training node ids or a bool mask (when ``split`` is not given).
        split: the training split (instead of ``train_nodes``).
        privacy: the user's claim (a :class:`PrivacySpec`, its dict, or ``None`` for non-private).
        input: ``"graph"`` or ``"features"``, how the module is called.
        output: ``"logits"`` or ``"proba"``.
        surrogate: defense that shadow-model attacks train as the module's surrogate.
        surrogate_hyperparameters: its hyperparameters.
        inference_private: the user claims the module's inference on the training graph is private.
        name: the method name on the card.
        seed: seed recorded with the split.

    Returns:
        The :class:`AdaptedModel`.

    Raises:
        ConfigurationError: a bad module, dataset, node list, surrogate, claim, or a module that fails its dry run.
    """
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError("adapt expects a torch.nn.Module")
    if not isinstance(dataset, GraphDataset):
        raise ConfigurationError(
            "adapt expects a dpaudit GraphDataset (dpaudit.data.datasets.from_data wraps PyG Data)"
        )
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
        **({"protocol": CLAIMED} if spec.is_private else {}),
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
    model._graph = dataset.data  # export() checks the declared stack on it
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


# --------------------------------------------------------------------------- export

#: activation modules a stack may hold between its layers, by the name :mod:`dpaudit.nn` knows
_ACTIVATION_MODULES = {torch.nn.ReLU: "relu", torch.nn.ELU: "elu", torch.nn.Tanh: "tanh", torch.nn.SELU: "selu"}


def declare(module: torch.nn.Module, input: str = "graph") -> tuple[list[dict[str, Any]], list[str], dict[str, str]]:
    """The layer stack ``module`` holds, in registration order: ``(layers, activations, keys)``
    with ``layers`` the :class:`dpaudit.nn.LayerStack` declarations, ``activations`` the names of
    the activation modules met (empty when the forward calls them as functions) and ``keys`` the
    module's state-dict prefix of each layer → ``layers.i.``. Dropout is skipped (identity in
    evaluation).

    Raises:
        ConfigurationError: a layer dpaudit cannot declare (one line naming it).

    Args:
        module: the user's module.
        input: ``"graph"`` or ``"features"`` (then only linear layers are allowed).

    Returns:
        ``(layers, activations, keys)``.
    """
    layers: list[dict[str, Any]] = []
    acts: list[str] = []
    keys: dict[str, str] = {}
    supported = {cls: op for op, (cls, _) in STACK_LAYERS.items()}
    names = "Linear, GCNConv, SAGEConv, GATConv, Dropout, " + "/".join(c.__name__ for c in _ACTIVATION_MODULES)

    def walk(mod: torch.nn.Module, prefix: str) -> None:
        for name, child in mod.named_children():
            path = f"{prefix}{name}"
            op = supported.get(type(child))
            if op is not None:
                if input == "features" and op != "linear":
                    raise ConfigurationError(
                        f"export: layer {path!r} ({type(child).__name__}) reads edges, but the "
                        "module is adapted with input='features'"
                    )
                keys[f"{path}."] = f"layers.{len(layers)}."
                layers.append(_layer_declaration(op, child))
            elif type(child) in _ACTIVATION_MODULES:
                acts.append(_ACTIVATION_MODULES[type(child)])
            elif isinstance(child, torch.nn.Dropout):
                continue
            elif isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)) or (
                type(child) is not torch.nn.Module and list(child.children()) and not list(child.parameters(False))
            ):
                walk(child, f"{path}.")
            else:
                raise ConfigurationError(
                    f"export: layer {path!r} ({type(child).__name__}) is not one dpaudit can "
                    f"declare; a saved model is a stack of {names}"
                )

    if type(module) in supported:  # the module is itself one layer
        keys[""] = "layers.0."
        layers.append(_layer_declaration(supported[type(module)], module))
        if input == "features" and supported[type(module)] != "linear":
            raise ConfigurationError(
                f"export: {type(module).__name__} reads edges, but the module is adapted with input='features'"
            )
        return layers, acts, keys
    walk(module, "")
    own = [n for n, _ in module.named_parameters(recurse=False)] + [n for n, _ in module.named_buffers(recurse=False)]
    if own:
        raise ConfigurationError(
            f"export: the module holds tensors outside any layer ({', '.join(own)}): not a declared layer stack"
        )
    if not layers:
        raise ConfigurationError("export: the module holds no Linear, GCNConv, SAGEConv or GATConv layer")
    return layers, acts, keys


def _layer_declaration(op: str, layer: torch.nn.Module) -> dict[str, Any]:
    """One layer's declaration: its sizes and the constructor options :data:`STACK_LAYERS` lists."""
    if op == "linear":
        return {"op": op, "in": layer.in_features, "out": layer.out_features, "bias": layer.bias is not None}
    out: dict[str, Any] = {"op": op, "in": int(layer.in_channels), "out": int(layer.out_channels)}
    if isinstance(layer, GCNConv):
        out.update(
            improved=bool(layer.improved),
            add_self_loops=bool(layer.add_self_loops),
            normalize=bool(layer.normalize),
            bias=layer.bias is not None,
        )
    elif isinstance(layer, SAGEConv):
        if not isinstance(layer.aggr, str):
            raise ConfigurationError(
                f"export: SAGEConv with aggregation {layer.aggr!r} is not declarable (a name only)"
            )
        out.update(
            aggr=layer.aggr,
            normalize=bool(layer.normalize),
            root_weight=bool(layer.root_weight),
            project=bool(layer.project),
            bias=layer.lin_l.bias is not None,
        )
    else:
        if layer.edge_dim is not None or layer.dropout != 0 or isinstance(layer.in_channels, tuple):
            raise ConfigurationError(
                "export: GATConv with edge features, attention dropout or bipartite input is not declarable"
            )
        out.update(
            heads=int(layer.heads),
            concat=bool(layer.concat),
            negative_slope=float(layer.negative_slope),
            add_self_loops=bool(layer.add_self_loops),
            bias=layer.bias is not None,
        )
    return out


def export(model: AdaptedModel, activation: str | None = None, atol: float = 1e-5) -> ModuleModel:
    """The adapted ``model`` as a released model that can be saved (kind ``module``, architecture
    ``{"type": "stack", ...}``): data, never code. Its card and spec keep the user's claim
    (``protocol: claimed``), its owner's record the training nodes.

    ``activation``: the function between layers when the module's forward calls it as a function
    (``torch.relu(...)``); ``None`` takes the activation modules the module holds, else tries every
    activation :mod:`dpaudit.nn` knows. The declared stack is run on the dataset's graph
    (``model.record``'s dataset must be the one the module was adapted on) and must give the
    module's own outputs within ``atol``: a forward that does more than the stack (skip
    connections, normalisation, a different order) is refused, never written.

    Raises:
        ConfigurationError: a module that is not a declarable stack (one line naming why).

    Args:
        model: a model returned by :func:`adapt`.
        activation: see above.
        atol: largest probability difference accepted.

    Returns:
        The :class:`~dpaudit.release.model.ModuleModel`.
    """
    if not isinstance(model, AdaptedModel):
        raise ConfigurationError("export expects a model returned by adapt()")
    if model.output != "logits":
        raise ConfigurationError("export: only a module that returns logits (output='logits') is declarable")
    layers, acts, keys = declare(model.module, model.input)
    if activation is not None and activation not in ACTIVATIONS:
        raise ConfigurationError(f"export: activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if activation is not None:
        candidates = [activation]
    elif len(set(acts)) > 1:
        raise ConfigurationError(f"export: the module mixes activations {sorted(set(acts))}; a stack has one")
    else:
        candidates = list(acts[:1]) or list(ACTIVATIONS)
    state = {}
    for name, tensor in model.module.state_dict().items():
        prefix = next((p for p in keys if name.startswith(p)), None)
        if prefix is None:
            raise ConfigurationError(f"export: tensor {name!r} belongs to no declared layer")
        state[keys[prefix] + name[len(prefix) :]] = tensor.detach().clone()
    graph = _graph_of(model)
    expected = model.predict_proba(graph)
    tried = []
    for act in candidates:
        architecture = {"type": "stack", "layers": layers, "act": act}
        module = build_architecture(architecture)
        module.load_state_dict(state, strict=True)
        module = module.to(model.device)
        card = {
            **model.card,
            "adapter": {
                **model.card.get("adapter", {}),
                "embed": "the declared stack's penultimate layer",
                "exported": True,
            },
        }
        released = ModuleModel(module, architecture, model.privacy, card)
        gap = float((released.predict_proba(graph) - expected).abs().max())
        if gap <= atol:
            released.record = dict(model.record)
            released.verification = stated_verification(model.privacy)
            return released
        tried.append(f"{act}: {gap:.2g}")
    raise ConfigurationError(
        f"export: the declared stack ({' → '.join(layer['op'] for layer in layers)}) does not give the module's outputs "
        f"(largest probability difference {'; '.join(tried)}): its forward does more than a layer stack"
        + ("" if activation else " — name the activation between layers with activation=")
    )


def _graph_of(model: AdaptedModel):
    """The graph ``model`` was adapted on (its dry run's), kept for :func:`export`'s check."""
    graph = getattr(model, "_graph", None)
    if graph is None:
        raise ConfigurationError("export needs a model returned by adapt() (it checks the outputs on its graph)")
    return graph
