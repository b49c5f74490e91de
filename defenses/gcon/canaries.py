r"""Worst-case edge canaries for GCON, scored by the exact likelihood of the released Θ
(issue 25, item 1; the one-run game of Steinke, Nasr & Jagielski, NeurIPS 2023).

**Why real edges are not enough.** One real edge moves n₁∇J₀ by about 0.03 on Cora, while
Theorem 1 (Wei et al., "GCON", Eqs. 18–20) calibrates the objective noise B to the worst case
:math:`\|n_1\Delta\nabla_{\theta_j}J_0\| \le (c_1 + c_2c_\theta)\Psi` per column. Under edge-level
DP the node set, features and training labels are public, so the auditor may add nodes of its
own choosing (Section III): the canaries here are edges between such nodes, chosen so that one
edge moves the gradient as far as a single edge can.

**The design** (:meth:`GCONPairs.draw`). Canary k is a pair of auditor nodes (u_k, v_k), both
training nodes in every run, joined to nothing else; only the edge u_k–v_k is the coin.

* Features: u_k holds ``scale`` on the training nodes' rarest feature coordinate, v_k its
  negation, so the encoder (trained on public features and labels only, identically in both
  worlds) maps them to opposite encodings :math:`\bar x_v \approx -\bar x_u` (the tanh saturates).
* Then for one propagation step m = 1 (Eq. 9), the edge moves each endpoint's row of Z by
  :math:`(1-\alpha)(\bar x_v - \bar x_u)/2`, so :math:`\sum_i\|\Delta z_i\| = 2(1-\alpha)` = Ψ
  of Lemma 2: the whole sensitivity budget of Z.
* Labels: u_k and v_k carry different classes (a_k, b_k), disjoint between the canaries of a
  run while the classes allow. With ℓ′ = (σ(x) − y)/c (Eq. 27) and a small Θ, the two endpoints'
  terms add in columns a_k and b_k: :math:`|n_1\Delta\nabla_{\theta_{a}}J_0| \approx (1-\alpha)/c`,
  half of Theorem 1's per-column bound :math:`c_1\Psi = 2(1-\alpha)/c` (ℓ′ ≈ ±½c₁ when Θ is
  small; one-hot labels leave the other columns almost unmoved).

**The score** (:meth:`GCONPairs.score`). Given Θ the noise is determined: the first-order
condition of Eq. (13) gives :math:`B = -n_1(\nabla J_0(\Theta; G) + (\Lambda+\Lambda')\Theta)`,
and with the canary-free graph and the public design known, B is an affine function of the
run's coins, :math:`B(s) = B_0 + \sum_k s_k\Delta_k` (the pairs are separate components, so
their effects add exactly). Algorithm 2's noise has density :math:`\propto \exp(-\beta\sum_j
\|b_j\|)` (Lemma 6) and the map B ↦ Θ has Jacobian :math:`\prod_j \det(H_j)` with
:math:`H_j = \sum_i \ell''(z_i^T\theta_j)z_iz_i^T + n_1(\Lambda+\Lambda')I` (Lemma 7's change of
variables), so

.. math:: \log p(\Theta \mid s) = -\beta\sum_j \|b_j(s)\| + \sum_j \log\det H_j(s) + \text{const},

and canary k's score is :math:`\log\sum_{s: s_k=1}p(\Theta\mid s) - \log\sum_{s: s_k=0}p(\Theta\mid s)`,
the other canaries of the run marginalised over their fair coins (exactly: at most
:data:`MAX_PER_RUN` per run). β and Λ + Λ′ are the card's (the claimed mechanism's, public).
The released Θ is the fixed schedule's end plus AMP's Gaussian, within ~1e-5 of the exact
minimiser at the default tolerance; the score treats it as exact, which costs power, never
validity (any score is valid: the coins are fair and the defense never sees them).

**One row or two** (``rows``). With θ small, ℓ′ ≈ (½ − y)/c in every column, and the edge moves
the endpoints' rows in opposite directions (:math:`\Delta z_u = -\Delta z_v`). When both are
rows their terms cancel except in the two columns where their labels differ: B moves by
(1 − α)/c in each, a privacy loss of at most 2β(1 − α)/c (``rows="both"``, the default; ⌊c/2⌋
canaries fit a run on disjoint columns). When only u is a row (``rows="one"``: v is in no split,
and the objective has no pseudo-label rows), B moves by (1 − α)/(2c) in **every** column, a
loss of up to β(1 − α)/2 — 1.75 × more on Cora's seven classes, and the loss concentrates on
the canaries whose columns all agree, which the one-run tests' top guesses read (simulated on
Laplace columns at the break's rate, 12,000 canaries, δ = 1e-7: certified 0.80 against 0.63 for
the pair design; measured on Cora, GCON with B ÷ 10 at claim 0.5: 0.718 with 12,000 one-row
canaries against 0.418 with 3 pair canaries in each of 4,000 trainings at δ = 1e-4). Its shifts
overlap in every column, so the zoo puts one canary in a training.

**Where it is strong.** With d = s·d₁ encoded dimensions per column, B's columns have
uniform directions in R^d; a shift of size a in one column moves the log-density by
:math:`\beta a\cos\phi`, whose spread is :math:`\beta a/\sqrt d`. With d₁ = 1 every column of B
is a Laplace variable and the privacy loss of a canary is ±β·(its shift) in each of its columns
— the worst case Theorem 1 bounds, attained for most draws of B. Θ has only c·d numbers, so a
run carries at most ⌊c/2⌋ canaries on disjoint columns; audits pool many runs (each canary is
in exactly one training, so the one-run theorems apply to the pooled game).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from defenses.gcon.mechanism import gcon_features, make_loss, normalized_adjacency
from defenses.gcon.model import GCONModel, encode_features
from defenses.gcon.protocols import uses_pseudo_labels
from dpaudit.auditing.canary_design import CanaryDesign, dataset_with_canaries, register_structure, undirected_pairs
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import Split
from dpaudit.errors import ConfigurationError, DPAuditError

log = logging.getLogger(__name__)

#: the structure's name (``--design structure=gcon-pairs``)
STRUCTURE = "gcon-pairs"
#: the score enumerates every coin pattern of a run's canaries: 2^k of them
MAX_PER_RUN = 12
SCORE = "gcon-objective-likelihood"
#: β used for a noiseless release (ε = ∞): only the coin pattern that zeroes B scores high
NOISELESS_BETA = 1e8


#: which endpoints of a canary pair are training nodes (module docstring, "One row or two")
ROWS = ("both", "one")


def _rows(design: CanaryDesign) -> str:
    return design.settings.get("rows", "both")


def _rarest_coordinate(dataset: GraphDataset, split: Split, rng: np.random.Generator) -> int:
    """The feature coordinate the fewest training nodes use (ties drawn at random)."""
    usage = dataset.data.x[split.train].ne(0).sum(0).cpu().numpy()
    fewest = np.flatnonzero(usage == usage.min())
    return int(rng.choice(fewest))


def _check_count(count) -> int:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= MAX_PER_RUN:
        raise ConfigurationError(
            f"canaries: structure={STRUCTURE} scores every coin pattern of a run, so 1..{MAX_PER_RUN} canaries "
            f"per run (pool more with --runs), got {count!r}"
        )
    return int(count)


@dataclass(frozen=True)
class GCONPairs:
    """The :class:`dpaudit.auditing.canary_design.CanaryStructure` of GCON's worst-case edge canaries (module
    docstring): auditor-added node pairs, the edge inside each pair being the coin.

    Attributes:
        name: the structure's registered name.
    """

    name: str = STRUCTURE

    def check(self, defense_cls: type, count: int) -> None:
        """Refuse, before any work, a defense whose release is not GCON's Θ, or more canaries
        per run than the score enumerates.

        Args:
            defense_cls: the audited defense class (must be GCON or a subclass).
            count: canaries per run.

        Raises:
            ConfigurationError: not GCON, or a count outside 1..``MAX_PER_RUN``.
        """
        from defenses.gcon import GCON

        _check_count(count)
        if not (isinstance(defense_cls, type) and issubclass(defense_cls, GCON)):
            raise ConfigurationError(
                f"canaries: structure={STRUCTURE} scores GCON's objective and audits gcon (or a zoo variant of it), "
                f"not {getattr(defense_cls, 'name', defense_cls)!r}"
            )

    def draw(
        self,
        dataset: GraphDataset,
        split: Split,
        count: int,
        seed: int = 0,
        *,
        scale: float = 100.0,
        rows: str = "both",
    ) -> CanaryDesign:
        """``count`` canary pairs (≤ :data:`MAX_PER_RUN`): features ±``scale`` on the rarest
        training coordinate, labels (a_k, b_k) = (2k, 2k + 1) mod c — disjoint for the first
        ⌊c/2⌋ canaries. Node indices follow the base graph's: u_k = n + 2k, v_k = n + 2k + 1.
        ``rows``: ``"both"`` endpoints are training nodes, or only u_k (``"one"``; module
        docstring, "One row or two").

        Args:
            dataset: the base dataset.
            split: its split (transductive).
            count: canary pairs per run.
            seed: seeds the choice of the rarest coordinate among ties.
            scale: the feature magnitude (> 0).
            rows: ``"both"`` or ``"one"``.

        Returns:
            The design: 2·``count`` canary nodes, their features, labels and pairs.

        Raises:
            ConfigurationError: too many canaries per run, a bad scale or ``rows``, fewer than
                two classes, or an inductive split (the pairs must be visible to training).
        """
        count = _check_count(count)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (scale > 0 and math.isfinite(scale)):
            raise ConfigurationError(f"canaries: scale must be a positive number, got {scale!r}")
        if rows not in ROWS:
            raise ConfigurationError(f"canaries: rows must be one of {', '.join(ROWS)}, got {rows!r}")
        if dataset.num_classes < 2:
            raise ConfigurationError(f"canaries: structure={STRUCTURE} needs two classes per pair")
        if split.inductive:
            raise ConfigurationError(
                f"canaries: structure={STRUCTURE} needs a transductive split (an inductive one hides the pairs' edges)"
            )
        rng = np.random.default_rng([int(seed), 0x47434F4E])
        coordinate = _rarest_coordinate(dataset, split, rng)
        features = torch.zeros(2 * count, dataset.num_features)
        features[0::2, coordinate] = float(scale)
        features[1::2, coordinate] = -float(scale)
        c = dataset.num_classes
        labels = torch.arange(2 * count) % c
        n = dataset.num_nodes
        pairs = n + np.arange(2 * count, dtype=np.int64).reshape(count, 2)
        settings = {
            "structure": STRUCTURE,
            "scale": float(scale),
            "coordinate": coordinate,
            "rows": rows,
            "labels": labels.view(count, 2).tolist(),
            "seed": int(seed),
        }
        return CanaryDesign("edge", count, features=features, labels=labels, pairs=pairs, settings=settings)

    def training_data(
        self, base: GraphDataset, split: Split, design: CanaryDesign, included: np.ndarray
    ) -> tuple[GraphDataset, Split]:
        """The base graph plus every canary node and the edges of the included pairs. The
        training nodes are the same in every run: both endpoints, or only u_k (``rows="one"``;
        v_k is then in no split).

        Args:
            base: the base dataset.
            split: its split.
            design: the canary design.
            included: one coin per canary (the pair's edge is added when true).

        Returns:
            ``(dataset, split)`` of the run.
        """
        n = base.num_nodes
        x = torch.cat([base.data.x, design.features.to(base.data.x.dtype)])
        y = torch.cat([base.data.y, design.labels])
        edges = torch.cat(
            [base.data.edge_index, undirected_pairs(design.pairs[np.asarray(included, dtype=bool)])], dim=1
        )
        ds = dataset_with_canaries(
            base, x, y, edges, f"{2 * design.count} gcon canary nodes, {int(np.sum(included))} edges"
        )
        step = 1 if _rows(design) == "both" else 2
        train = torch.cat([split.train, torch.arange(n, n + 2 * design.count, step, dtype=split.train.dtype)])
        sp = Split(
            train,
            split.val,
            split.test,
            spec=split.spec,
            seed=split.seed,
            inductive=split.inductive,
            info=dict(split.info),
            node_part=split.node_part,
            declared_sizes=split.declared_sizes,
        )
        return ds, sp

    def score(
        self, model, base: GraphDataset, split: Split, design: CanaryDesign, train_ds: GraphDataset, train_split: Split
    ) -> tuple[np.ndarray, str]:
        """Each canary's log-likelihood ratio of its coin given Θ (module docstring), read from
        the release and public data only: the design, the canary-free graph and the card.

        Args:
            model: the released GCON model.
            base: the base dataset.
            split: its split.
            design: the canary design.
            train_ds: the run's training dataset (unused: the score reads only public data).
            train_split: the run's split.

        Returns:
            ``(scores, description)``: one log-likelihood ratio per canary.

        Raises:
            DPAuditError: not a GCON release, an objective whose row count differs from the card's, or a
                Hessian that is not positive definite.
        """
        if not isinstance(model, GCONModel):
            raise DPAuditError(f"canaries: structure={STRUCTURE} reads a GCON release, got {type(model).__name__}")
        gcon = model.card["gcon"]
        config = gcon["config"]
        beta = float((gcon.get("theorem1") or {}).get("beta") or math.inf)
        beta = beta if math.isfinite(beta) else NOISELESS_BETA
        mu = float(gcon["regularization_total"])
        c = int(model.settings["num_classes"])
        loss = make_loss(config["loss"], c, config["huber_delta"])

        # the canary-free training graph: every canary node, isolated (base indices are unchanged)
        x = torch.cat([base.data.x, design.features.to(base.data.x.dtype)])
        y_all = torch.cat([base.data.y, design.labels])
        n = x.size(0)
        x_in = model.encoder_input(x)  # the encoder's input (raw or feature-graph smoothed: no edge)
        x_enc = encode_features(model.encoder, x_in)
        train = train_split.train
        protocol = (model.card.get("hyperparameters") or {}).get("protocol", "sound")
        if uses_pseudo_labels(bool(config["pseudo_labels"]), protocol, len(train), n, train_split.inductive):
            rows = torch.arange(n)
            with torch.no_grad():
                labels = model.encoder(x_in.float()).argmax(dim=1)
            labels[train] = y_all[train]
        else:
            rows, labels = train, y_all
        if len(rows) != int(gcon["n1"]):
            raise DPAuditError(f"canaries: the objective has {len(rows)} rows here, the card says n1 = {gcon['n1']}")
        edges_out = split.edge_index_for(base, "train")
        edges_in = torch.cat([edges_out, undirected_pairs(design.pairs)], dim=1)
        z_out = gcon_features(normalized_adjacency(edges_out, n), x_enc, model.alpha, model.steps).numpy()
        z_in = gcon_features(normalized_adjacency(edges_in, n), x_enc, model.alpha, model.steps).numpy()
        theta = model.theta.detach().cpu().double().numpy()
        y = F.one_hot(labels, c).double().numpy()
        row_index = rows.numpy()
        z_rows, y_rows = z_out[row_index], y[row_index]
        n1, d = len(row_index), theta.shape[0]
        b_out = -(z_rows.T @ loss.d1(z_rows @ theta, y_rows)) - n1 * mu * theta  # [d, c]
        h_out = np.einsum("ij,ia,ib->jab", loss.d2(z_rows @ theta, y_rows), z_rows, z_rows) + n1 * mu * np.eye(d)

        ends = design.pairs.reshape(-1)
        # an endpoint that is not a row of the objective (rows="one" without pseudo-labels) adds no term
        in_objective = np.isin(ends, row_index).astype(float)
        if _rows(design) == "one" and in_objective[1::2].any():
            log.warning(
                "canaries: rows=one, but the second endpoints are rows of the objective (pseudo-labels): "
                "their terms cancel u's in all but two columns; train with pseudo_labels=false"
            )
        y_ends = y[ends]

        def terms(z):  # per canary: its rows' gradient [k, d, c] and curvature [k, c, d, d] terms
            ze = z[ends]
            grad = np.einsum("ij,ia,i->iaj", loss.d1(ze @ theta, y_ends), ze, in_objective)
            curv = np.einsum("ij,ia,ib,i->ijab", loss.d2(ze @ theta, y_ends), ze, ze, in_objective)
            return grad.reshape(design.count, 2, d, c).sum(1), curv.reshape(design.count, 2, c, d, d).sum(1)

        grad_in, curv_in = terms(z_in)
        grad_out, curv_out = terms(z_out)
        shift = -(grad_in - grad_out)  # B moves by this when the canary's edge is present
        patterns = ((np.arange(2**design.count)[:, None] >> np.arange(design.count)[None, :]) & 1).astype(float)
        b = b_out[None] + np.einsum("pk,kac->pac", patterns, shift)  # [P, d, c]
        h = h_out[None] + np.einsum("pk,kjab->pjab", patterns, curv_in - curv_out)  # [P, c, d, d]
        sign, logdet = np.linalg.slogdet(h)
        if not np.all(sign > 0):
            raise DPAuditError("canaries: a Hessian of GCON's objective is not positive definite (Λ > 0 is required)")
        log_lik = -beta * np.linalg.norm(b, axis=1).sum(1) + logdet.sum(1)
        scores = np.empty(design.count)
        for k in range(design.count):
            on = patterns[:, k] > 0
            scores[k] = np.logaddexp.reduce(log_lik[on]) - np.logaddexp.reduce(log_lik[~on])
        return scores, SCORE


#: the instance the canary workflow registers
PAIRS = GCONPairs()
register_structure(PAIRS)
