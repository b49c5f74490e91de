"""The released GCON model (encoder + Θ) and its inference features (Eq. 11 / Eq. 16).

Shapes: node features X [n, F] → encoded, L2-normalised :math:`\bar X` [n, d₁] → propagated
:math:`\\hat Z` [n, s·d₁] → scores :math:`\\hat Z\\Theta` [n, c].
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from defenses.gcon.head_selection import HEAD_RECORD, choose_head, head_mechanism, head_share
from defenses.gcon.homophily import (
    ANSWER_HEADS,
    HOMOPHILY_RECORD,
    heterophilous,
    homophily_mechanism,
    homophily_share,
    inference_restart,
    training_restart,
)
from defenses.gcon.mechanism import (  # noqa: F401  (json_float, steps_to_json re-exported)
    TheoremOneParameters,
    check_alpha,
    gcon_features,
    json_float,
    make_loss,
    normalized_adjacency,
    one_hop_features,
    parse_steps,
    sensitivity_psi,
    steps_to_json,
    theorem1_parameters,
)
from defenses.gcon.plan import amp_calibration
from dpaudit.accounting import PrivacySpec
from dpaudit.accounting.verify import check_claims, close, refuse, verify_spec
from dpaudit.data.feature_graph import FeatureSmoothing
from dpaudit.errors import ModelFormatError
from dpaudit.nn import MLP
from dpaudit.release.model import ReleasedModel, _node_index, card_protocol, register_model_kind

INFERENCE_MODES = ("private", "public")

#: the narrower audience Eq. (16)'s answers over the training graph are covered for (the paper's
#: threat model): v's answer reads v's own edges in the clear, which v already knows
OWN_ANSWER_AUDIENCE = (
    "each node receiving only its own answer (the querier is the node, as GCON assumes); a third party "
    "querying a node is not covered"
)

INFERENCE_NOTES = {
    "private": (
        "Θ and the encoder are (ε, δ)-edge-DP (GCON Theorem 1). Predictions use Eq. (16): node v's answer "
        "aggregates v's direct neighbours in the clear (restart α_I), so it reveals v's own edges; it is "
        "edge-DP only toward v itself (the paper's threat model), not toward a third party querying v."
    ),
    "public": (
        "Θ and the encoder are (ε, δ)-edge-DP (GCON Theorem 1). Predictions use Algorithm 4's public-graph "
        "mode: Z of Eq. (11) is recomputed on the queried graph, which is treated as public; answers reveal "
        "that graph's edges (multi-hop)."
    ),
}


@register_model_kind("gcon")
class GCONModel(ReleasedModel):
    r"""A released GCON model: the feature encoder (an :class:`~dpaudit.nn.MLP` whose hidden layer
    gives :math:`\bar X`) and the linear map :math:`\Theta \in \mathbb R^{sd_1\times c}`.

    ``predict_proba`` returns softmax of the scores :math:`\hat Z\Theta` (a monotone map: the
    argmax is the model's prediction); ``embed`` returns :math:`\hat Z`, the propagated encoded
    features that enter Θ. :math:`\hat Z` is Eq. (16) (``inference="private"``) or Eq. (11) on the
    queried graph (``"public"``), see the module docstring for what each reveals.

    Args:
        encoder: the trained feature encoder.
        theta: Θ.
        settings: the config (steps, α, α_I, inference mode, encoder architecture, num_classes).
        privacy: the privacy spec.
        card: the public card.

    Raises:
        ConfigurationError: α or α_I outside (0, 1], or malformed steps.
        ModelFormatError: an unknown inference mode, or Θ of the wrong shape.
    """

    def __init__(self, encoder: MLP, theta: torch.Tensor, settings: dict, privacy: PrivacySpec, card: dict):
        super().__init__(privacy, card)
        self.encoder = encoder.eval()
        self.theta = theta
        self.settings = dict(settings)
        self.steps = parse_steps(self.settings["steps"])
        self.alpha = check_alpha(self.settings["alpha"])
        self.alpha_inference = check_alpha(self.settings["alpha_inference"], "alpha_inference")
        # the encoder's input (a model saved before the choice existed read raw features)
        self.smoothing = FeatureSmoothing.from_dict(self.settings.get("feature_smoothing"))
        # what answers a query (a model saved before issue 50's heterophily rule: Ẑ Θ)
        self.head = self.settings.get("head", "theta")
        if self.head not in ANSWER_HEADS:
            raise ModelFormatError(f"gcon head must be one of {ANSWER_HEADS}, got {self.head!r}")
        if self.settings["inference"] not in INFERENCE_MODES:
            raise ModelFormatError(f"gcon inference mode must be one of {INFERENCE_MODES}")
        expected = (len(self.steps) * int(self.settings["encoder"]["hidden"][0]), int(self.settings["num_classes"]))
        if tuple(theta.shape) != expected:
            raise ModelFormatError(f"gcon theta has shape {tuple(theta.shape)}, expected {expected}")

    @classmethod
    def verify_privacy(cls, privacy, config, card):
        r"""Re-derive GCON's recorded (ε, δ) guarantees before the generic check
        (:func:`dpaudit.accounting.verify.verify_spec`, basic composition of the records).

        * Theorem 1: every quantity (c_sf, Λ, c_θ, ε_Λ, Λ′, β) is recomputed from the record's
          inputs (target (1 − s)(ε, δ), c, d, n₁, Λ requested, ω, the loss suprema, Ψ, ξ) by
          :func:`~defenses.gcon.mechanism.theorem1_parameters`, and the guarantee re-derived
          through Lemmas 7–9 (:meth:`TheoremOneParameters.guarantee`) must be the recorded (ε, δ)
          and at most Theorem 1's target; Ψ must be the one of the card's (α, steps); the target
          must be (1 − s) times the spec's target ε and δ (s = ``amp_share``).
        * AMP: the fixed schedule (μ, L, ρ, c_θ, T, residual bound) and the Gaussian (sensitivity =
          2 × bound, σ = multiplier × sensitivity, δ by the analytic Gaussian of Balle & Wang 2018 at
          ε = s·ε_target) are recomputed from the Theorem 1 record, s of the card's steps and the
          card's ``residual_tol`` / ``descent_steps`` by
          :func:`~defenses.gcon.plan.amp_calibration` — the function ``fit`` used — and must be the
          recorded ones; δ must be ≤ s·δ.
        * Ψ = 0 (no edge read): a single record at the target ε with δ = 0; the card's Ψ must be 0.

        Args:
            privacy: the saved spec.
            config: the saved config (unused).
            card: the public card (hyperparameters and ``gcon`` section).

        Returns:
            The verification.

        Raises:
            IntegrityError: on any mismatch (one line).
        """
        check_claims(privacy, "edge", card_protocol(card))
        if not privacy.is_private:
            return verify_spec(privacy, "edge", card_protocol(card))
        info = card.get("gcon") or {}
        hyperparameters = card.get("hyperparameters") or {}
        share = float(hyperparameters.get("amp_share", 0.01))
        target = privacy.target_epsilon
        if target is None:
            raise refuse("a private GCON spec must record its target ε (Theorem 1 is calibrated to it)")
        verified = set()
        theorem = [i for i, r in enumerate(privacy.mechanisms) if str(r.get("name", "")).startswith("gcon objective")]
        amp = [i for i, r in enumerate(privacy.mechanisms) if str(r.get("name", "")).startswith("gcon AMP")]
        counts = [i for i, r in enumerate(privacy.mechanisms) if r.get("name") == HOMOPHILY_RECORD]
        heads = [i for i, r in enumerate(privacy.mechanisms) if r.get("name") == HEAD_RECORD]
        if (
            len(theorem) != 1
            or len(amp) > 1
            or len(privacy.mechanisms) != len(theorem) + len(amp) + len(counts) + len(heads)
        ):
            raise refuse(
                "a GCON spec records one Theorem 1 guarantee, at most one AMP Gaussian, at most one "
                "homophily statistic and at most one answer-head count"
            )
        # the homophily statistic (defenses.gcon.homophily): pure ε_h = h·target, and the rest of
        # the chain is calibrated to (1 − h)·target
        h = _card_share(hyperparameters, "homophily_share", homophily_share)
        if len(counts) != (1 if h > 0 else 0):
            raise refuse(
                f"the card's hyperparameters spend a share h = {h:g} on the homophily statistic, the spec "
                f"records {len(counts)} such statistic(s)"
            )
        # the answer-head count (defenses.gcon.head_selection): pure ε_s = s·target; a card written
        # before it spent nothing on it
        s_head = _card_share(hyperparameters, "head_share", head_share)
        if len(heads) != (1 if s_head > 0 else 0):
            raise refuse(
                f"the card's hyperparameters spend a share s = {s_head:g} on the answer-head count, the spec "
                f"records {len(heads)} such count(s)"
            )
        if heads:
            _check_pure_record(privacy.mechanisms[heads[0]], head_mechanism(s_head * target), "the answer-head count")
            verified.add(heads[0])
        if counts:
            _check_pure_record(
                privacy.mechanisms[counts[0]], homophily_mechanism(h * target), "the homophily statistic"
            )
            released, chosen = info.get("homophily") or {}, info.get("config") or {}
            try:
                chance = released.get("chance_level")  # absent on a card written before issue 50's rule
                chance = None if chance is None else float(chance)
                estimate = float(released["estimate"])
                expected = inference_restart(estimate, chance)
                given = float(chosen["alpha_inference"])
                trained_alpha = released.get("alpha_train")
                # the configured α (the hyperparameter; Ψ is checked against the card's config below)
                expected_train = training_restart(
                    estimate, chance, float(hyperparameters.get("alpha", chosen["alpha"]))
                )
                flagged = heterophilous(estimate, chance)
                expected_head = "encoder" if flagged else "theta"
                if heads:  # the released count decides (defenses.gcon.head_selection)
                    chosen_by = info["head_selection"]
                    if bool(chosen_by.get("heterophilous")) != flagged:
                        raise refuse("the answer-head count's heterophily flag is not the rule's at the released ĥ")
                    expected_head = choose_head(chosen_by["noisy_theta_correct"], chosen_by["encoder_correct"], flagged)
            except (KeyError, TypeError, ValueError):
                raise refuse("the card lacks the released estimate ĥ or the α_I it set") from None
            if not close(given, expected):
                raise refuse(f"the card's α_I = {given} is not the public rule's {expected} at the released ĥ")
            if trained_alpha is not None and not close(
                float((config or {}).get("alpha", math.nan)), float(trained_alpha)
            ):
                raise refuse(
                    f"the model's α = {(config or {}).get('alpha')!r} is not the card's training α {trained_alpha}"
                )
            if (config or {}).get("head", "theta") != expected_head:
                raise refuse(
                    f"the model's head {(config or {}).get('head', 'theta')!r} is not the rule's {expected_head!r}"
                )
            if trained_alpha is not None and not close(float(trained_alpha), expected_train):
                raise refuse(
                    f"the card's training α = {trained_alpha} is not the heterophily rule's {expected_train} "
                    "at the released ĥ"
                )
            verified.add(counts[0])
        elif heads:  # a head count without the statistic (h = 0): nothing flags the graph
            chosen_by = info.get("head_selection") or {}
            expected_head = choose_head(chosen_by.get("noisy_theta_correct"), chosen_by.get("encoder_correct"), False)
            if (config or {}).get("head", "theta") != expected_head:
                raise refuse(
                    f"the model's head {(config or {}).get('head', 'theta')!r} is not the released count's {expected_head!r}"
                )
        target = (1.0 - h - s_head) * target
        record = privacy.mechanisms[theorem[0]]
        details = dict(record.get("details") or {})
        if not details:  # Ψ = 0: the model reads no edge
            if amp or info.get("psi", 0.0) != 0.0 or record.get("delta") != 0.0 or not close(record["epsilon"], target):
                raise refuse("the no-edge (Ψ = 0) record is valid only with Ψ = 0, δ = 0, ε = target and no AMP")
            return verify_spec(privacy, "edge", card_protocol(card), verified_records=verified | {theorem[0]})
        try:
            params = TheoremOneParameters(**{k: math.inf if v is None else v for k, v in details.items()})
        except TypeError as exc:
            raise refuse(f"Theorem 1 record: {exc}") from None
        if not (close(params.epsilon, (1 - share) * target) and close(params.delta, (1 - share) * privacy.delta)):
            raise refuse(
                f"Theorem 1 was run at ({params.epsilon:.6g}, {params.delta:.3g}), (1 − amp_share) × the "
                f"stated target is ({(1 - share) * target:.6g}, {(1 - share) * privacy.delta:.3g})"
            )
        settings = info.get("config") or {}
        if "alpha" in settings and "steps" in settings:
            psi = sensitivity_psi(float(settings["alpha"]), parse_steps(settings["steps"]))
            if not close(params.psi, psi):
                raise refuse(f"Theorem 1 record has Ψ = {params.psi:.6g}, the card's (α, steps) give {psi:.6g}")
        if "loss" in settings:
            suprema = make_loss(settings["loss"], params.num_classes, float(settings.get("huber_delta", 0.0))).suprema()
            if not all(close(a, b) for a, b in zip((params.c1, params.c2, params.c3), suprema)):
                raise refuse(
                    f"Theorem 1 record has loss suprema {(params.c1, params.c2, params.c3)}, "
                    f"the card's loss {settings['loss']!r} has {suprema}"
                )
        again = theorem1_parameters(
            params.epsilon,
            params.delta,
            params.num_classes,
            params.dim,
            params.n1,
            params.regularization_requested,
            params.omega,
            (params.c1, params.c2, params.c3),
            params.psi,
            params.xi,
        )
        for name, value in vars(again).items():
            if isinstance(value, float) and not close(float(getattr(params, name)), value, 1e-9):
                raise refuse(
                    f"Theorem 1 parameter {name} = {getattr(params, name)!r} recorded, Eqs. (17)-(24) give {value!r}"
                )
        eps, delta = params.guarantee()
        if not (close(record["epsilon"], eps) and close(record["delta"], delta)):
            raise refuse(
                f"Theorem 1 record states ({record['epsilon']:.6g}, {record['delta']:.3g}), Lemmas 7-9 give "
                f"({eps:.6g}, {delta:.3g})"
            )
        if not (eps <= params.epsilon * (1 + 1e-9) and delta <= params.delta * (1 + 1e-9)):
            raise refuse("Theorem 1's re-derived guarantee exceeds its target")
        verified.add(theorem[0])
        if not amp:
            raise refuse("a GCON spec with Ψ > 0 must record AMP's Gaussian: Theorem 1 covers only the exact minimiser")
        record = privacy.mechanisms[amp[0]]
        recorded = dict(record.get("details") or {})
        try:
            expected = amp_calibration(
                params,
                len(parse_steps(settings["steps"])),
                float(hyperparameters["residual_tol"]),
                int(hyperparameters["descent_steps"]),
                share * target,
                share * privacy.delta,
            )
        except KeyError as exc:
            raise refuse(f"AMP cannot be re-derived: the card lacks {exc}") from None
        for name, value in expected.details().items():
            if not (isinstance(recorded.get(name), (int, float)) and close(float(recorded[name]), float(value))):
                raise refuse(f"AMP {name} = {recorded.get(name)!r} recorded, the card's schedule gives {value!r}")
        if not close(record["epsilon"], expected.epsilon):
            raise refuse(f"AMP ε = {record['epsilon']:.6g} recorded, amp_share × target = {expected.epsilon:.6g}")
        if not close(record["delta"], expected.delta) or expected.delta > share * privacy.delta * (1 + 1e-6):
            raise refuse(
                f"AMP δ = {record['delta']:.3g} recorded, the analytic Gaussian gives {expected.delta:.3g} "
                f"(≤ amp_share × δ = {share * privacy.delta:.3g} required)"
            )
        verified.add(amp[0])
        return verify_spec(privacy, "edge", card_protocol(card), verified_records=verified)

    @property
    def device(self) -> torch.device:
        return self.theta.device

    @torch.no_grad()
    def features(self, graph: Data) -> torch.Tensor:
        """The propagated features :math:`\\hat Z` of every node of ``graph`` (float64).

        Args:
            graph: the queried graph.

        Returns:
            Ẑ of every node.

        Shapes:
            return: [num_nodes, s·d₁]
        """
        x = encode_features(self.encoder, self.encoder_input(graph.x.to(self.device)))
        adj = normalized_adjacency(graph.edge_index.to(self.device), int(graph.num_nodes))
        if self.settings["inference"] == "public":
            return gcon_features(adj, x, self.alpha, self.steps)
        return one_hop_features(adj, x, self.alpha_inference, self.steps)

    def encoder_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the encoder reads: the raw features, or their public feature-graph smoothing over the
        nodes whose rows ``x`` holds (the queried graph's), as chosen at training
        (:func:`encoder_input`).

        Args:
            x: node features of one graph.

        Returns:
            The encoder's input.

        Shapes:
            x: [n, F]
            return: [n, F]
        """
        return encoder_input(self.smoothing, x)

    def predict_proba(self, graph: Data, nodes=None) -> torch.Tensor:
        """Softmax of the scores ẐΘ of the queried nodes (``head="encoder"``, a graph the
        heterophily rule flags: softmax of the encoder's own logits, no edge read).

        Args:
            graph: the queried graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            Class probabilities (float32).

        Shapes:
            return: [len(nodes), c]
        """
        idx = _node_index(graph, nodes).to(self.device)
        if self.head == "encoder":  # the public encoder alone (a heterophilous graph): no edge read
            with torch.no_grad():
                logits = self.encoder(self.encoder_input(graph.x.to(self.device)).float())
            return torch.softmax(logits[idx].double(), dim=1).float()
        scores = self.features(graph)[idx] @ self.theta.double()
        return torch.softmax(scores, dim=1).float()

    def embed(self, graph: Data, nodes=None) -> torch.Tensor:
        """Ẑ of the queried nodes, the features that enter Θ.

        Args:
            graph: the queried graph.
            nodes: the queried nodes; ``None`` for all.

        Returns:
            Ẑ (float32).

        Shapes:
            return: [len(nodes), s·d₁]
        """
        idx = _node_index(graph, nodes).to(self.device)
        return self.features(graph)[idx].float()

    def config(self) -> dict:
        """The settings :meth:`from_state` rebuilds from."""
        return dict(self.settings)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The encoder's weights (prefixed ``encoder.``) and ``theta``."""
        tensors = {f"encoder.{k}": v for k, v in self.encoder.state_dict().items()}
        tensors["theta"] = self.theta
        return tensors

    @classmethod
    def from_state(cls, config, tensors, privacy, card):
        """Rebuild the encoder from the config and load it and Θ.

        Args:
            config: the saved settings.
            tensors: ``encoder.*`` weights and ``theta``.
            privacy: the privacy spec.
            card: the public card.

        Returns:
            The model, on Θ's device.

        Raises:
            ModelFormatError: ``theta`` missing, unexpected tensors, or settings the model refuses.
        """
        arch = config["encoder"]
        encoder = MLP(int(arch["in_dim"]), [int(h) for h in arch["hidden"]], int(arch["out_dim"]), 0.0, arch["act"])
        encoder_state = {k.removeprefix("encoder."): v for k, v in tensors.items() if k.startswith("encoder.")}
        unexpected = set(tensors) - {f"encoder.{k}" for k in encoder_state} - {"theta"}
        if "theta" not in tensors or unexpected:
            raise ModelFormatError(f"gcon model needs 'theta' and encoder tensors; unexpected {sorted(unexpected)}")
        encoder.load_state_dict(encoder_state, strict=True)
        theta = tensors["theta"]
        return cls(encoder.to(theta.device), theta, config, privacy, card)


def _card_share(hyperparameters: dict, field: str, share) -> float:
    """The share of ε a card's hyperparameters spend on one of ``sound``'s counts (``share``:
    :func:`~defenses.gcon.homophily.homophily_share` or
    :func:`~defenses.gcon.head_selection.head_share`); a card written before the field existed
    spent nothing on it."""
    return share(
        SimpleNamespace(
            protocol=hyperparameters.get("protocol", "sound"),
            adapt=hyperparameters.get("adapt", "none"),
            **{field: float(hyperparameters.get(field, 0.0))},
        )
    )


def _check_pure_record(record: dict, expected, what: str) -> None:
    """A pure-ε count's ledger record must be the one its share of the target gives (ε, δ = 0 and
    the calibration details); ``expected`` is that :class:`RecordedGuarantee`.

    Raises:
        IntegrityError: on a mismatch (one line).
    """
    details = dict(record.get("details") or {})
    if not (
        close(record["epsilon"], expected.epsilon)
        and record.get("delta") == 0.0
        and all(close(float(details.get(k, math.nan)), float(v)) for k, v in expected.details.items())
    ):
        raise refuse(
            f"{what} records ε = {record['epsilon']!r}, details {details}; its share of the target gives "
            f"ε = {expected.epsilon:.6g}, {expected.details}"
        )


def encoder_input(smoothing: FeatureSmoothing | None, x: torch.Tensor, parts=None) -> torch.Tensor:
    """The encoder's input: ``x`` itself, or :class:`~dpaudit.data.feature_graph.FeatureSmoothing`
    of it — features only, no edge (free at edge level). Without ``parts`` the smoothing runs over
    every row of ``x`` (the graph a phase reads); with ``parts`` (an inductive split) over each part's
    rows separately, each part its own graph; rows in no part stay zero.

    Args:
        smoothing: the smoothing, or ``None`` (raw features).
        x: node features.
        parts: index tensors of node sets smoothed separately, or ``None``.

    Returns:
        The encoder's input (``x`` unchanged when ``smoothing`` is ``None``).

    Raises:
        ConfigurationError: a graph above the smoothing's size limits.

    Shapes:
        x: [n, F]
        return: [n, F]
    """
    if smoothing is None:
        return x
    if parts is None:
        return smoothing.apply(x)
    dense = x.to_dense() if x.layout != torch.strided else x
    out = torch.zeros(dense.shape, dtype=torch.float32, device=x.device)
    for nodes in parts:
        if len(nodes) >= 2:
            out[nodes] = smoothing.apply(dense[nodes])
        elif len(nodes) == 1:
            out[nodes] = F.normalize(dense[nodes].float(), p=2.0, dim=1)
    return out


@torch.no_grad()
def encode_features(encoder: MLP, x: torch.Tensor) -> torch.Tensor:
    r""":math:`\bar X = H_{mlp}(\mathrm{MLP}(X; W_1^\star))` (Algorithm 3 line 5), rows L2-normalised
    (Algorithm 1 line 2), in float64.

    Args:
        encoder: the trained encoder.
        x: raw node features.

    Returns:
        X̄.

    Shapes:
        x: [n, F]
        return: [n, d₁]
    """
    encoder.eval()
    return F.normalize(encoder.embed(x.float()).double(), p=2.0, dim=1)


def query_features(adj: torch.Tensor, x_enc: torch.Tensor, config, inference: str) -> torch.Tensor:
    """:math:`\\hat Z` for queries: Eq. (16) (``private``) or Eq. (11) on the queried graph (``public``).

    Args:
        adj: Ã of the queried graph (sparse).
        x_enc: X̄ of its nodes.
        config: the configuration (``alpha``, ``alpha_inference``, ``steps``).
        inference: ``private`` or ``public``.

    Returns:
        Ẑ.
    """
    with torch.no_grad():
        if inference == "public":
            return gcon_features(adj, x_enc, config.alpha, config.steps)
        return one_hop_features(adj, x_enc, config.alpha_inference, config.steps)
