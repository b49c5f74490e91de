"""GCON ``protocol=sound``'s accounted answer-head choice (issue 50, ``defenses.gcon.head_selection``):
the count's edge sensitivity measured on a real graph, the ledger record, the load-time check of
the head, the discrete Laplace noise, and the pseudo-label rule of ``defenses.gcon.protocols``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from editing import edited_copy

import dpaudit.release.model
from defenses.gcon import GCON
from defenses.gcon.head_selection import (
    COUNT_SENSITIVITY,
    HEAD_RECORD,
    INFORMATIVE_SHARE,
    choose_head,
    count_noise_std,
    informative,
    release_head_selection,
    theta_correct,
)
from defenses.gcon.model import encode_features
from defenses.gcon.protocols import SCARCE_LABELS, uses_pseudo_labels
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, IntegrityError
from dpaudit.release.model import compare_records
from dpaudit.testing.neighbours import train_and_compare, without_edge


def _count(model, edge_index, num_nodes, x_enc, nodes, labels):
    return theta_correct(edge_index, num_nodes, x_enc, model.theta, model.alpha_inference, model.steps, nodes, labels)


def _mutual_flips(model, edges, n, x_enc, right, y) -> list[tuple[int, int]]:
    """Pairs of correctly answered validation nodes that an added edge {u, w} would both turn wrong:
    row u of Ã = D⁻¹(A + I) gains X̄_w, so u's new Eq. (16) row is
    (1 − α_I)(S_u + X̄_w)/(d_u + 2) + α_I X̄_u with S_u the sum over u and its neighbours."""
    theta, a_i = model.theta.double(), model.alpha_inference
    degree = torch.bincount(edges[0], minlength=n).double()
    sums = torch.zeros_like(x_enc).index_add_(0, edges[0], x_enc[edges[1]]) + x_enc
    flips = torch.zeros(len(right), len(right), dtype=torch.bool)
    for i, u in enumerate(right.tolist()):
        rows = (1 - a_i) * (sums[u] + x_enc[right]) / (degree[u] + 2) + a_i * x_enc[u]
        z = torch.cat([x_enc[u].expand_as(rows) if m == 0 else rows for m in model.steps], dim=1) / len(model.steps)
        flips[i] = (z @ theta).argmax(dim=1) != y[u]
    flips.fill_diagonal_(False)
    mutual = (flips & flips.T).nonzero().tolist()
    return [(int(right[i]), int(right[j])) for i, j in mutual if i < j]


def test_one_edge_moves_the_count_by_at_most_its_sensitivity_on_cora(load_real):
    """Every edge at a validation node removed, and edges added between validation nodes: the count
    moves by at most 2, and by exactly 2 somewhere — a bound of 1 (half) would be broken."""
    dataset = load_real("cora")
    split = make_split(dataset, "public", seed=0)
    model = GCON(epsilon=4.0, seed=0, adapt="none").fit(dataset, split)
    data = dataset.data
    n, edges, y, val = dataset.num_nodes, data.edge_index, data.y, split.val
    x_enc = encode_features(model.encoder, model.encoder_input(data.x))
    base = _count(model, edges, n, x_enc, val, y)
    moves = []
    row, col = edges
    is_val = torch.zeros(n, dtype=torch.bool)
    is_val[val] = True
    touching = ((row < col) & (is_val[row] | is_val[col])).nonzero().flatten()
    for k in touching.tolist():
        u, w = int(row[k]), int(col[k])
        keep = ~(((row == u) & (col == w)) | ((row == w) & (col == u)))
        moves.append(_count(model, edges[:, keep], n, x_enc, val, y) - base)
    # additions: the pairs of correctly answered validation nodes (u, w) where adding {u, w} turns
    # both answers wrong, found in closed form and then counted with the function under test
    with torch.no_grad():
        right = val[model.predict_proba(data, val).argmax(dim=1) == y[val]]
    found = _mutual_flips(model, edges, n, x_enc, right, y)
    assert found, "no pair of validation answers that one added edge turns both wrong"
    for u, w in found[:20]:
        added = torch.cat([edges, torch.tensor([[u, w], [w, u]])], dim=1)
        moves.append(_count(model, added, n, x_enc, val, y) - base)
    moves = np.abs(np.array(moves))
    assert moves.max() <= COUNT_SENSITIVITY
    assert moves.max() > COUNT_SENSITIVITY / 2  # measured: 2 is reached, so the bound is tight
    # an edge touching no validation node moves nothing
    far = ((row < col) & ~is_val[row] & ~is_val[col]).nonzero().flatten()[:50]
    for k in far.tolist():
        u, w = int(row[k]), int(col[k])
        keep = ~(((row == u) & (col == w)) | ((row == w) & (col == u)))
        assert _count(model, edges[:, keep], n, x_enc, val, y) == base


def test_a_fit_records_the_count_and_load_checks_the_head(small_graph, tmp_path):
    # ε_s = 3: the count's noise (std 0.9) is small beside 3 % of the 90 validation nodes
    split = make_split(small_graph, "random:0.3,0.3,0.4", seed=0)
    model = GCON(epsilon=30.0, seed=0, encoder_epochs=20).fit(small_graph, split)
    spec = model.privacy
    record = spec.mechanisms[-1]
    assert record["name"] == HEAD_RECORD and record["delta"] == 0.0
    assert record["epsilon"] == pytest.approx(0.1 * 30.0) and record["details"]["scale"] == pytest.approx(2 / 3.0)
    assert spec.sound and spec.epsilon <= 30.0 * (1 + 1e-12)
    chosen = model.card["gcon"]["head_selection"]
    assert chosen["validation_nodes"] == len(split.val) and chosen["why_not_counted"] is None
    assert 0 <= chosen["encoder_correct"] <= len(split.val)
    assert (
        model.settings["head"]
        == chosen["head"]
        == choose_head(chosen["noisy_theta_correct"], chosen["encoder_correct"], chosen["heterophilous"])
    )
    assert "theta_correct" not in model.card["gcon"]["head_selection"]  # the exact count is never written
    directory = model.save(tmp_path / "m")
    loaded = dpaudit.release.model.load(directory, record=False)
    assert loaded.verification.status == "recomputed"
    assert compare_records(loaded.privacy.mechanisms, GCON.replan(loaded.card, loaded.privacy)) is None

    def other_count(meta):  # a released count that gives the other head
        entry = meta["card"]["gcon"]["head_selection"]
        entry["noisy_theta_correct"] = entry["encoder_correct"] + (-1 if meta["config"]["head"] == "theta" else 0)

    with pytest.raises(IntegrityError, match="head"):
        dpaudit.release.model.load(edited_copy(directory, tmp_path / "count", other_count))

    def bigger_share(meta):  # the records stay those of s = 0.1
        meta["card"]["hyperparameters"]["head_share"] = 0.2

    with pytest.raises(IntegrityError):
        dpaudit.release.model.load(edited_copy(directory, tmp_path / "share", bigger_share))


def test_the_head_rule_and_the_noise():
    assert choose_head(10, 10, False) == "theta" and choose_head(9, 10, False) == "encoder"
    assert choose_head(20, 10, True) == "encoder"  # a flagged graph is answered by the encoder
    assert choose_head(None, None, False) == "theta"  # nothing counted
    # discrete Laplace of scale 2/ε_s on the count: its variance 2e^{-1/t}/(1 - e^{-1/t})², exact at ∞
    rng = np.random.default_rng(0)
    draws = [release_head_selection(300, 290, 500, 0.4, rng, False).noisy_theta_correct for _ in range(4000)]
    t = 2 / 0.4
    q = math.exp(-1 / t)
    assert np.std(draws) == pytest.approx(math.sqrt(2 * q / (1 - q) ** 2), rel=0.08)
    assert np.mean(draws) == pytest.approx(300, abs=0.5)
    exact = release_head_selection(300, 290, 500, math.inf, rng, False)
    assert exact.noisy_theta_correct == 300 and exact.head == "theta"


def test_no_validation_node_in_the_training_graph_counts_nothing_and_still_records_the_share(small_graph):
    split = make_split(small_graph, "inductive:0.5,0.2,0.3", seed=0)
    model = GCON(epsilon=2.0, seed=0, encoder_epochs=10).fit(small_graph, split)
    chosen = model.card["gcon"]["head_selection"]
    assert chosen["noisy_theta_correct"] is None and chosen["why_not_counted"]
    assert model.privacy.mechanisms[-1]["name"] == HEAD_RECORD  # over-reported: sound
    assert model.settings["head"] == ("encoder" if chosen["heterophilous"] else "theta")


def test_a_count_too_noisy_to_tell_the_heads_apart_is_not_read(small_graph):
    """The public decision of ``informative``: the noise's std against 3 % of the validation nodes.
    Below it nothing is counted and Θ answers; the share is still recorded as spent."""
    assert count_noise_std(math.inf) == 0.0
    t = 2 / 0.4
    q = math.exp(-1 / t)
    assert count_noise_std(0.4) == pytest.approx(math.sqrt(2 * q) / (1 - q))  # ≈ 7.06
    assert informative(0.4, 500) and informative(0.4, 300) and not informative(0.4, 200)
    assert not informative(0.1, 500) and not informative(0.4, 0)  # ε = 1 on 500 nodes: std 28
    assert INFORMATIVE_SHARE == 0.03
    split = make_split(small_graph, "random:0.3,0.3,0.4", seed=0)  # 90 validation nodes
    model = GCON(epsilon=2.0, seed=0, encoder_epochs=10).fit(small_graph, split)
    chosen = model.card["gcon"]["head_selection"]
    assert chosen["noisy_theta_correct"] is None and "too noisy" in chosen["why_not_counted"]
    assert model.settings["head"] == ("encoder" if chosen["heterophilous"] else "theta")
    assert model.privacy.mechanisms[-1]["name"] == HEAD_RECORD


def test_shares_must_leave_theorem_one_some_epsilon():
    with pytest.raises(ConfigurationError, match="head_share"):
        GCON(epsilon=1.0, homophily_share=0.5, head_share=0.5)
    GCON(epsilon=1.0, homophily_share=0.5, head_share=0.5, adapt="none")  # neither is spent


def test_pseudo_label_rows_only_while_training_labels_are_scarce(small_graph):
    n = small_graph.num_nodes
    assert uses_pseudo_labels(True, "sound", int(SCARCE_LABELS * n) - 1, n, False)
    assert not uses_pseudo_labels(True, "sound", int(SCARCE_LABELS * n), n, False)
    assert uses_pseudo_labels(True, "paper", n - 1, n, False)  # paper follows its configuration
    assert not uses_pseudo_labels(True, "sound", 10, n, True)  # inductive: only training nodes are visible
    assert not uses_pseudo_labels(False, "sound", 10, n, False)
    for spec, rows in (("random:0.3,0.3,0.4", n), ("random:0.6,0.2,0.2", int(0.6 * n))):
        model = GCON(epsilon=2.0, seed=0, encoder_epochs=5).fit(small_graph, make_split(small_graph, spec, seed=0))
        assert model.card["gcon"]["n1"] == rows


def _first_moving_neighbour(model, dataset, split, x_enc, base):
    """G minus the first edge at a validation node (to a training, test or validation node, in
    :func:`without_edge`'s order) whose removal moves Θ's count, rebuilt from its raw data."""
    for parts in (("val", "train"), ("val", "test"), ("val", "val")):
        index = 0
        while True:
            try:
                neighbour = without_edge(dataset, split, index, parts=parts)
            except IndexError:  # past the last such edge
                break
            edges = neighbour.data.edge_index
            if _count(model, edges, dataset.num_nodes, x_enc, split.val, dataset.data.y) != base:
                return neighbour
            index += 1
    pytest.fail("no edge at a validation node moves Θ's count")


def test_an_edge_at_a_validation_node_moves_only_the_released_statistics(small_graph, tmp_path):
    """G and G minus one edge at a validation node whose answer it changes (the neighbour rebuilt
    from its own raw data, the same seeded noise): model.json differs only in accounted outputs
    (``GCON.released_statistics``), among them the head's noisy count."""
    split = make_split(small_graph, "random:0.3,0.3,0.4", seed=0)
    model = GCON(epsilon=30.0, seed=0, encoder_epochs=20).fit(small_graph, split)
    data = small_graph.data
    x_enc = encode_features(model.encoder, model.encoder_input(data.x))
    base = _count(model, data.edge_index, small_graph.num_nodes, x_enc, split.val, data.y)
    neighbour = _first_moving_neighbour(model, small_graph, split, x_enc, base)
    diff = train_and_compare(
        lambda: GCON(epsilon=30.0, seed=0, encoder_epochs=20), (small_graph, split), (neighbour, split), tmp_path
    )
    assert "card.gcon.head_selection.noisy_theta_correct" in diff
    assert set(diff) <= set(GCON.released_statistics)
