"""GAP (gap-inf, gap-edp, gap-ndp; protocols sound and paper): sensitivities measured
empirically, accountants against independent computations, calibration, the planned DP-SGD
schedules and the bounded-degree unit, the canonical query key, queries without a
training-graph oracle (every query graph a ledgered release; the training release the
owner's), save/load round trips. Release neutrality: ``tests/defenses/gap/test_gap_release.py``."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_undirected

import defenses  # noqa: F401  (registers the defenses)
import defenses.gap.model as gap_model
from defenses.gap import (
    EDGE_SENSITIVITY,
    GAPModel,
    bound_out_degree,
    canonical_edges,
    check_degree_promise,
    graph_key,
    max_degree_of,
    node_sensitivity,
    private_multi_hop_aggregation,
    row_normalize,
    sum_aggregate,
)
from defenses.gap.model import RELEASES_NOTE, _mechanism_from
from defenses.gap.projection import projection_sensitivity
from defenses.gap.queries import structure_key
from dpaudit.accounting import GaussianMechanism, PoissonSubsampledGaussian, PrivacyLedger
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError, IntegrityError, ModelFormatError, PrivacyParameterError
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense

SPLIT = "random:0.5,0.25,0.25"
NDP = {"max_degree": 20}  # the small graph's maximum degree is 15 ≤ 20; batch 256 ≥ n: q = 1 (fast accounting)
PROMISE = {**NDP, "degree_bound": "promise"}  # bounded-degree node-level DP (the default projects instead)


@pytest.fixture(scope="module")
def split(small_graph):
    return make_split(small_graph, SPLIT, 0)


@pytest.fixture(scope="module")
def fitted(small_graph, split):
    """One model per variant (small: few epochs), shared by the tests below. They read the
    training release; a test that queries predict_proba / embed (each graph a new release in the
    query ledger) does it on a copy (``_copy``, ``query_session``). gap-inf and gap-edp release
    2 hops and answer with the K ∈ {1, 2} chosen on validation (``config()["hops"]``)."""
    return {
        "gap-inf": get_defense("gap-inf")(seed=0, encoder_epochs=30, epochs=30).fit(small_graph, split),
        "gap-edp": get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=30, epochs=30).fit(small_graph, split),
        "gap-ndp": get_defense("gap-ndp")(epsilon=8.0, seed=0, **NDP).fit(small_graph, split),
        "gap-ndp-promise": get_defense("gap-ndp")(epsilon=8.0, seed=0, **PROMISE).fit(small_graph, split),
    }


def _copy(model, tmp_path, name="copy"):
    """A fresh owner's copy (save + load with the record) that a test may query on foreign graphs."""
    return load(model.save(tmp_path / name), record=True)


def _hub_graph(num_nodes: int = 60, hub_degree: int = 40, extra_edges: int = 120, seed: int = 0):
    """An undirected random graph with one hub (node 0) adjacent to ``hub_degree`` nodes."""
    g = torch.Generator().manual_seed(seed)
    hub = torch.stack([torch.zeros(hub_degree, dtype=torch.long), torch.arange(1, hub_degree + 1)])
    rand = torch.randint(1, num_nodes, (2, extra_edges), generator=g)
    rand = rand[:, rand[0] != rand[1]]
    return to_undirected(torch.cat([hub, rand], dim=1), num_nodes=num_nodes)


def _remove_node(edge_index: torch.Tensor, node: int) -> torch.Tensor:
    keep = (edge_index[0] != node) & (edge_index[1] != node)
    return edge_index[:, keep]


# --------------------------------------------------------------------------- sensitivities


def test_edge_sensitivity_empirical(small_graph):
    """Lemma 1: removing one directed entry of A moves A^T X (row-normalised X) by exactly 1 in
    Frobenius norm (the paper protocol's Δ); removing one undirected edge moves it by √2 (sound Δ)."""
    data = small_graph.data
    x = row_normalize(torch.randn(data.num_nodes, 8, generator=torch.Generator().manual_seed(0)))
    base = sum_aggregate(x, data.edge_index, data.num_nodes)
    src, dst = data.edge_index
    directed, undirected = [], []
    for e in torch.randperm(src.numel(), generator=torch.Generator().manual_seed(1))[:60].tolist():
        u, v = int(src[e]), int(dst[e])
        one_way = data.edge_index[:, torch.arange(src.numel()) != e]
        both_ways = data.edge_index[:, ~(((src == u) & (dst == v)) | ((src == v) & (dst == u)))]
        directed.append(float(torch.linalg.norm(base - sum_aggregate(x, one_way, data.num_nodes))))
        undirected.append(float(torch.linalg.norm(base - sum_aggregate(x, both_ways, data.num_nodes))))
    assert max(directed) <= 1.0 + 1e-5 and min(directed) >= 1.0 - 1e-5
    assert max(undirected) <= EDGE_SENSITIVITY + 1e-5
    assert min(undirected) >= EDGE_SENSITIVITY - 1e-5  # the paper's Δ = 1 would be too small


def test_sound_node_sensitivity_empirical():
    """Sound gap-ndp: on a graph of maximum degree ≤ D (no trimming), removing any node changes
    the whole aggregation — the other rows *and* its own row — by ≤ √(D(D+1)); a node of degree D
    whose neighbours carry aligned features reaches the bound, and the paper's √D is exceeded."""
    num_nodes = 60
    edge_index = _hub_graph(num_nodes, hub_degree=12, extra_edges=60)
    max_degree = max_degree_of(edge_index, num_nodes)
    bound = node_sensitivity(max_degree, "sound")
    assert bound == pytest.approx(math.sqrt(max_degree * (max_degree + 1)))
    for features in ("random", "aligned"):
        if features == "random":
            x = row_normalize(torch.randn(num_nodes, 8, generator=torch.Generator().manual_seed(0)))
        else:
            x = row_normalize(torch.ones(num_nodes, 8))  # worst case: the removed row has norm = degree
        full = sum_aggregate(x, edge_index, num_nodes)
        changes = []
        for q in range(num_nodes):
            removed = sum_aggregate(x, _remove_node(edge_index, q), num_nodes)  # q isolated: its row is 0
            changes.append(float(torch.linalg.norm(full - removed)))
        assert max(changes) <= bound + 1e-4
        if features == "aligned":
            assert max(changes) == pytest.approx(bound, abs=1e-4)  # the hub (degree D) attains it
            assert max(changes) > math.sqrt(max_degree) + 1  # the paper's √D misses the own row


def test_paper_degree_sampling_changes_other_nodes_edges():
    """Why the paper's random out-degree sampling is unanalysed: with the same random stream,
    removing one node changes which edges *other* nodes keep, so the other rows move by more
    than the √D that Lemma 3 allows."""
    num_nodes, max_degree = 60, 6
    edge_index = _hub_graph(num_nodes)
    x = row_normalize(torch.randn(num_nodes, 8, generator=torch.Generator().manual_seed(0)))
    worst = 0.0
    for q in range(num_nodes):
        others = torch.arange(num_nodes) != q
        a = bound_out_degree(edge_index, num_nodes, max_degree, torch.Generator().manual_seed(3))
        b = bound_out_degree(_remove_node(edge_index, q), num_nodes, max_degree, torch.Generator().manual_seed(3))
        diff = sum_aggregate(x, a, num_nodes)[others] - sum_aggregate(x, b, num_nodes)[others]
        worst = max(worst, float(torch.linalg.norm(diff)))
    assert worst > math.sqrt(max_degree)


def test_degree_promise_and_bound_out_degree():
    edge_index = _hub_graph(60)
    assert max_degree_of(edge_index, 60) >= 40
    check_degree_promise(edge_index, 60, 60, "graph")
    with pytest.raises(ConfigurationError, match="maximum degree"):
        check_degree_promise(edge_index, 60, 10, "graph")
    a = bound_out_degree(edge_index, 60, 6, torch.Generator().manual_seed(0))
    b = bound_out_degree(edge_index, 60, 6, torch.Generator().manual_seed(1))
    degree = torch.bincount(edge_index[0], minlength=60)
    assert torch.equal(torch.bincount(a[0], minlength=60), degree.clamp(max=6))
    assert not torch.equal(a, b)  # a random sample, not a deterministic truncation
    assert set(map(tuple, a.t().tolist())) <= set(map(tuple, edge_index.t().tolist()))
    with pytest.raises(ConfigurationError):
        bound_out_degree(edge_index, 60, 0)


def test_pma_rows_are_unit_norm_and_noise_free_pma_matches_dense(small_graph):
    data = small_graph.data
    x0 = row_normalize(torch.randn(data.num_nodes, 4, generator=torch.Generator().manual_seed(0)))
    dense_adj = torch.zeros(data.num_nodes, data.num_nodes)
    dense_adj[data.edge_index[0], data.edge_index[1]] = 1.0
    hops = private_multi_hop_aggregation(x0, data.edge_index, 3, 0.0)
    expected = x0
    for hop in hops:
        expected = row_normalize(dense_adj.t() @ expected)
        assert torch.allclose(hop, expected, atol=1e-5)
    noisy = private_multi_hop_aggregation(x0, data.edge_index, 3, 2.0, torch.Generator().manual_seed(0))
    norms = torch.stack([h.norm(dim=1) for h in noisy])
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    assert not torch.allclose(noisy[0], hops[0], atol=1e-2)
    with pytest.raises(DPAuditError):
        private_multi_hop_aggregation(x0, data.edge_index, 1, -1.0)


def test_graph_key_is_canonical_and_reads_features(small_graph):
    data = small_graph.data
    n, e = data.num_nodes, data.edge_index
    perm = torch.randperm(e.size(1), generator=torch.Generator().manual_seed(0))
    key = graph_key(n, e, data.x)
    assert graph_key(n, e[:, perm], data.x) == key
    assert graph_key(n, torch.cat([e, e[:, :10]], dim=1), data.x) == key  # duplicates do not matter
    assert torch.equal(canonical_edges(e[:, perm], n), canonical_edges(e, n))
    assert graph_key(n, e[:, 1:], data.x) != key
    x = data.x.clone()
    x[5] = 0
    assert graph_key(n, e, x) != key


# --------------------------------------------------------------------------- accountants


@pytest.mark.parametrize("hops,z,delta", [(1, 1.0, 1e-5), (2, 3.0, 1e-4), (5, 10.0, 1e-6)])
def test_pma_accounting_matches_proposition_2(hops, z, delta):
    """Theorem 1 curve + the classic conversion reproduces Prop. 2's closed form; the improved
    conversion we report is never larger; dp_accounting agrees independently."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    closed_form = hops / (2 * z**2) + math.sqrt(2 * hops * math.log(1 / delta)) / z
    mech = GaussianMechanism(z * EDGE_SENSITIVITY, EDGE_SENSITIVITY, hops)
    alpha_star = 1 + z * math.sqrt(2 * math.log(1 / delta) / hops)
    orders = np.linspace(1.001, 2 * alpha_star + 2, 200_001)
    classic = float(np.min(mech.rdp(orders) + math.log(1 / delta) / (orders - 1)))
    assert classic == pytest.approx(closed_form, rel=1e-6)
    ours = PrivacyLedger(accountant="rdp").step(mech).get_epsilon(delta)
    assert ours <= closed_form + 1e-9
    accountant = RdpAccountant()
    accountant.compose(dp_event.GaussianDpEvent(z), hops)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=0.02)
    # what the model reports (auto: the exact Gaussian curve here) is never looser than RDP
    assert PrivacyLedger().step(mech).get_epsilon(delta) <= ours * (1 + 1e-9)


def test_node_level_composition_matches_dp_accounting():
    """Proposition 3's composition (DP-SGD + PMA + DP-SGD, one noise multiplier) against
    dp_accounting's RDP accountant built from the same events."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    sigma, q, steps, hops, max_degree, delta = 2.0, 0.1, 100, 2, 100, 1e-4
    ours = (
        PrivacyLedger(accountant="rdp")
        .step(PoissonSubsampledGaussian(sigma, q, steps))
        .step(GaussianMechanism(sigma * math.sqrt(max_degree), math.sqrt(max_degree), hops))
        .step(PoissonSubsampledGaussian(sigma, q, steps))
        .get_epsilon(delta)
    )
    accountant = RdpAccountant()
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), 2 * steps)
    accountant.compose(dp_event.GaussianDpEvent(sigma), hops)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=0.02)


@pytest.mark.parametrize("name,target", [("gap-edp", 1.0), ("gap-ndp", 4.0)])
def test_sound_calibrated_spent_epsilon_within_target(small_graph, split, name, target):
    defense = get_defense(name)(
        epsilon=target, seed=0, encoder_epochs=3, epochs=3, **(NDP if name == "gap-ndp" else {})
    )
    model = defense.fit(small_graph, split)
    spec = model.privacy
    assert spec.sound and spec.unaccounted == [] and spec.protocol == "sound"
    assert target * 0.98 < spec.epsilon <= target  # calibrated, not merely bounded
    delta = spec.delta
    pma = [m for m in spec.mechanisms if m["name"].startswith("pma")]
    # one release of ``hops`` hops; at edge level K ≤ hops is then chosen among its prefixes
    released = defense.hp.hops
    assert len(pma) == 1 and pma[0]["count"] == released
    assert pma[0]["sigma"] == pytest.approx(model.config()["noise_std"])
    if name == "gap-edp":
        assert pma[0]["sensitivity"] == pytest.approx(math.sqrt(2))
        z = pma[0]["sigma"] / pma[0]["sensitivity"]
        closed = released / (2 * z**2) + math.sqrt(2 * released * math.log(1 / delta)) / z
        assert spec.epsilon <= closed
    else:  # the default degree bound: the projection, Δ for graphs of the declared 300 nodes
        declared = small_graph.public_facts["num_nodes"]
        assert pma[0]["sensitivity"] == pytest.approx(projection_sensitivity(NDP["max_degree"], declared))
        assert model.card["gap"]["universe_nodes"] == declared
        dpsgd = [m for m in spec.mechanisms if m["mechanism"] == "PoissonSubsampledGaussian"]
        assert len(dpsgd) == 2  # encoder and classifier
        sigma = dpsgd[0]["sigma"]
        assert dpsgd[1]["sigma"] == sigma and pma[0]["sigma"] == pytest.approx(sigma * pma[0]["sensitivity"])
        ledger = PrivacyLedger().extend(
            [
                PoissonSubsampledGaussian(sigma, dpsgd[0]["sample_rate"], dpsgd[0]["steps"]),
                GaussianMechanism(pma[0]["sigma"], pma[0]["sensitivity"], pma[0]["count"]),
                PoissonSubsampledGaussian(sigma, dpsgd[1]["sample_rate"], dpsgd[1]["steps"]),
            ]
        )
        assert ledger.get_epsilon(delta) == pytest.approx(spec.epsilon, rel=1e-9)


def test_paper_protocol_specs_are_unsound_and_list_their_steps(small_graph, split):
    edp = get_defense("gap-edp")(epsilon=2.0, seed=0, encoder_epochs=5, epochs=5, protocol="paper", hop_grid=[1, 2])
    model = edp.fit(small_graph, split)
    spec = model.privacy
    assert not spec.sound and spec.protocol == "paper" and spec.epsilon <= 2.0
    assert any("sensitivity 1" in s for s in spec.unaccounted)
    assert any("2 configurations" in s for s in spec.unaccounted)
    pma = [m for m in spec.mechanisms if m["name"].startswith("pma")]
    assert pma[0]["sensitivity"] == 1.0 and pma[0]["count"] == model.config()["hops"] in (1, 2)
    ndp = get_defense("gap-ndp")(
        epsilon=8.0,
        seed=0,
        encoder_epochs=2,
        epochs=2,
        protocol="paper",
        hop_grid=[2],
        degree_grid=[3, 5],
    )
    model = ndp.fit(small_graph, split)  # the paper protocol samples degrees: no promise needed
    spec = model.privacy
    assert not spec.sound and spec.epsilon <= 8.0 and model.config()["max_degree"] in (3, 5)
    text = " ".join(spec.unaccounted)
    for step in ("degree bounding", "√D", "best-validation", "2 configurations"):
        assert step in text
    pma = [m for m in spec.mechanisms if m["name"].startswith("pma")][0]
    assert pma["sensitivity"] == pytest.approx(math.sqrt(model.config()["max_degree"]))


def test_paper_selection_uses_validation_and_best_checkpoint(small_graph, split):
    """At ∞ nothing is protected, so ``sound`` selects exactly like ``paper``: over K ∈ {1, 2}
    (paper: ``hop_grid``; sound: the prefixes of ``hops`` = 2) and the same seed both keep the
    same K and best-validation checkpoint (before, ``sound`` kept K = 2 and the last iterate).
    The validation accuracy is a measurement: the owner's record, never the public card."""
    kwargs = {"seed": 0, "encoder_epochs": 20, "epochs": 20}
    paper = get_defense("gap-inf")(protocol="paper", hop_grid=[1, 2], **kwargs).fit(small_graph, split)
    sound = get_defense("gap-inf")(protocol="sound", hops=2, **kwargs).fit(small_graph, split)
    paper_val = paper.record["gap"]["selection"]["val_accuracy"]
    assert paper_val == sound.record["gap"]["selection"]["val_accuracy"]
    assert paper.config()["hops"] == sound.config()["hops"]
    for a, b in zip(paper.classifier.state_dict().values(), sound.classifier.state_dict().values()):
        assert torch.equal(a, b)
    assert paper.training_release().accuracy(small_graph.data, split.val) == pytest.approx(paper_val)
    assert "selection" not in paper.card and "val_accuracy" not in json.dumps(paper.card)
    grid = get_defense("gap-inf")(protocol="paper", seed=0, encoder_epochs=5, epochs=5, hop_grid=[1, 3])
    model = grid.fit(small_graph, split)
    assert model.card["gap"]["grid_size"] == 2 and model.card["gap"]["hops"] == model.config()["hops"] in (1, 3)


def test_pma_hop_prefixes_are_the_shorter_release(small_graph):
    """Hop k of PMA depends on hops < k only and draws its noise in hop order, so the first k
    hops of a K-hop release ARE a k-hop release with the same randomness: what lets sound
    edge-level GAP choose k from one release of K_max hops."""
    x0 = row_normalize(small_graph.data.x.float())
    edges = small_graph.data.edge_index
    longest = private_multi_hop_aggregation(x0, edges, 4, 0.7, torch.Generator().manual_seed(3))
    for k in (1, 2, 3):
        shorter = private_multi_hop_aggregation(x0, edges, k, 0.7, torch.Generator().manual_seed(3))
        assert all(torch.equal(a, b) for a, b in zip(shorter, longest[:k]))


def test_sound_edge_level_chooses_k_among_prefixes_of_one_release(small_graph, split, tmp_path):
    """Sound gap-edp releases PMA once with ``hops`` = 3 hops (accounted for 3, calibrated to
    the target) and picks K ∈ {1, 2, 3} (0 answers with 1 hop, its weights zero) by cross-validation over its
    prefixes: post-processing, nothing unaccounted. The model answers queries with K hops; the
    card names both K and the release, and a card that misstates the release is refused."""
    model = get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=10, epochs=10, hops=3).fit(small_graph, split)
    spec = model.privacy
    assert spec.sound and spec.unaccounted == [] and 0.98 * 4.0 < spec.epsilon <= 4.0
    assert [m["count"] for m in spec.mechanisms] == [3]
    k = model.config()["hops"]
    assert k in (1, 2, 3) and model.card["gap"]["hops"] == k and model.card["gap"].get("released_hops", 3) == 3
    assert any("post-processing" in note and "K_max = 3" in note for note in spec.notes)
    query = model.config()["query_mechanism"]
    assert query["count"] == k and query["sigma"] == pytest.approx(model.config()["noise_std"])
    release = model.training_release()
    # the skip head (issue 50): the release carries the encoder's class probabilities (C wide); the
    # owner's record keeps the head's cross-validated accuracy on the validation nodes
    assert release.aggregations.shape == (small_graph.num_nodes, k * small_graph.num_classes)
    assert 0.0 <= model.record["gap"]["selection"]["val_accuracy"] <= 1.0
    directory = model.save(tmp_path / "m")
    assert load(directory).privacy.epsilon == pytest.approx(spec.epsilon)
    meta = json.loads((directory / "model.json").read_text())
    meta["card"]["gap"]["released_hops"] = 2 if k == 1 else 1
    (directory / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError):
        load(directory)


def test_sound_node_level_keeps_the_fixed_choice(small_graph, split):
    """Validation labels are private at node level: sound gap-ndp releases and answers with the
    fixed ``hops`` (no prefix choice, no hop_grid)."""
    model = get_defense("gap-ndp")(epsilon=8.0, seed=0, hop_grid=[1, 3], **NDP).fit(small_graph, split)
    pma = [m for m in model.privacy.mechanisms if m["name"].startswith("pma")]
    assert model.config()["hops"] == 2 and [m["count"] for m in pma] == [2]
    assert "released_hops" not in model.card["gap"]


def test_sound_ndp_is_bounded_degree_node_dp(fitted, tmp_path):
    """Sound gap-ndp refuses graphs above D, so its guarantee is over graphs of degree ≤ D: the
    spec says so (``node (max degree <= D)``, not ``proven``), the load check keeps it, and a
    file that drops the condition is refused. Edge-level and paper specs carry none."""
    spec = fitted["gap-ndp-promise"].privacy
    assert spec.unit == "node" and spec.unit_condition == "max degree <= 20"
    assert spec.unit_label == "node (max degree <= 20)" and not spec.proven
    assert fitted["gap-edp"].privacy.unit_condition is None and fitted["gap-edp"].privacy.proven
    projected = fitted["gap-ndp"].privacy  # the default projection: no condition on degrees
    assert projected.unit_condition is None and projected.proven and projected.unit_label == "node"
    directory = fitted["gap-ndp-promise"].save(tmp_path / "ndp")
    assert load(directory).privacy.unit_label == "node (max degree <= 20)"
    meta = json.loads((directory / "model.json").read_text())
    meta["privacy"]["unit_condition"] = None
    (directory / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="unit condition"):
        load(directory)


def test_ndp_dp_sgd_schedule_is_planned_from_public_inputs(small_graph, split):
    """Both DP-SGD runs use q and steps from the declared training-set size (or the sample_rate
    hyperparameter), never len(split.train); with neither, the fit is refused before any work."""
    from dpaudit.data.datasets import GraphDataset
    from dpaudit.release import declared_train_size

    declared = declared_train_size(small_graph, split)
    fewer = dataclasses.replace(split, train=split.train[:-7])  # the real count moves, the declaration does not
    kwargs = {"epsilon": 8.0, "seed": 0, "encoder_epochs": 2, "epochs": 3, "batch_size": 64, **NDP}
    model = get_defense("gap-ndp")(**kwargs).fit(small_graph, fewer)
    dpsgd = [m for m in model.privacy.mechanisms if m["mechanism"] == "PoissonSubsampledGaussian"]
    per_epoch = math.ceil(declared / 64)
    assert [(m["sample_rate"], m["steps"]) for m in dpsgd] == [
        (1 / per_epoch, 2 * per_epoch),
        (1 / per_epoch, 3 * per_epoch),
    ]
    assert model.card["gap"]["encoder_schedule"]["from"] == f"declared training-set size {declared}"
    # the rate the declaration gives, as a hyperparameter (same q and steps: σ is reused), normalised by B
    rated = get_defense("gap-ndp")(**{**kwargs, "sample_rate": 1 / per_epoch}).fit(small_graph, split)
    assert rated.privacy.mechanisms == model.privacy.mechanisms
    assert rated.card["gap"]["classifier_schedule"]["from"] == "sample_rate hyperparameter"
    assert rated.card["gap"]["classifier_schedule"]["expected_batch_size"] == 64
    undeclared = GraphDataset(small_graph.data, "mine", small_graph.num_classes, small_graph.fingerprint, {}, {})
    plain = make_split(undeclared, SPLIT, 0)
    with pytest.raises(ConfigurationError, match="sample_rate"):
        get_defense("gap-ndp")(**kwargs, delta=1e-4, degree_bound="promise").fit(undeclared, plain)
    # the projection also needs the declared number of nodes (its Δ bounds degrees by it)
    with pytest.raises(DPAuditError, match="declared number of nodes"):
        get_defense("gap-ndp")(**kwargs, delta=1e-4, sample_rate=0.5).fit(undeclared, plain)


@pytest.mark.parametrize("edit", ["sigma", "steps"])
def test_a_consistent_edit_of_the_plan_is_refused(fitted, tmp_path, edit):
    """ε edited together with σ (card, config ledger, spec), or with the encoder's steps: every
    number agrees with every other, and ε stays under the target, so only re-deriving the plan
    from the card's hyperparameters and declared facts can tell."""
    from defenses.gap.model import _training_ledger

    directory = fitted["gap-ndp"].save(tmp_path / "m")
    meta = json.loads((directory / "model.json").read_text())
    if edit == "sigma":
        meta["card"]["gap"]["noise_multiplier"] *= 2
        for m in meta["config"]["ledger"] + [meta["config"]["query_mechanism"]]:
            m["sigma"] *= 2
    else:
        meta["card"]["gap"]["encoder_schedule"]["steps"] //= 2
        meta["config"]["ledger"][0]["steps"] //= 2
    spec = _training_ledger(meta["config"]).spec(meta["privacy"]["delta"], "node").to_dict()
    for key in ("epsilon", "mechanisms", "gdp_mu", "accountant", "epsilon_by_accountant", "accounting"):
        meta["privacy"][key] = spec[key]
    assert spec["epsilon"] < meta["card"]["target_epsilon"]
    (directory / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="plan"):
        load(directory)


def test_sound_ndp_refuses_graphs_above_the_degree_bound(small_graph, split):
    """The promise refuses a graph above D; the default projection trains on it, unconditioned."""
    quick = {"epsilon": 8.0, "seed": 0, "max_degree": 5, "encoder_epochs": 1, "epochs": 1}
    with pytest.raises(ConfigurationError, match="maximum degree"):
        get_defense("gap-ndp")(**quick, degree_bound="promise").fit(small_graph, split)
    model = get_defense("gap-ndp")(**quick).fit(small_graph, split)
    assert model.privacy.unit_condition is None and model.privacy.epsilon <= 8.0
    assert model.record["gap"]["projection"]["duality_gap"] <= 1e-5 * 5  # certified (owner's record)


def test_more_epsilon_means_less_noise(small_graph, split):
    stds = [
        get_defense("gap-edp")(epsilon=e, seed=0, encoder_epochs=2, epochs=2)
        .fit(small_graph, split)
        .config()["noise_std"]
        for e in (1.0, 4.0)
    ]
    assert stds[0] > stds[1] > 0


# --------------------------------------------------------------------------- models and inference


def test_variants_train_and_report_levels(fitted, small_graph, split):
    assert fitted["gap-inf"].privacy.epsilon == math.inf and fitted["gap-inf"].config()["noise_std"] == 0.0
    assert fitted["gap-edp"].privacy.unit == "edge" and fitted["gap-ndp"].privacy.unit == "node"
    assert fitted["gap-inf"].inference_private is False and fitted["gap-edp"].inference_private
    assert fitted["gap-ndp"].config()["batch_norm"] is False  # never under node-level DP-SGD
    assert fitted["gap-edp"].config()["batch_norm"] is True
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in fitted["gap-ndp"].classifier.modules())
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in fitted["gap-edp"].encoder.modules())
    assert fitted["gap-ndp"].privacy.sound and fitted["gap-ndp"].privacy.epsilon <= 8.0
    assert fitted["gap-inf"].training_release().accuracy(small_graph.data, split.test) > 0.8
    for model in fitted.values():
        release = model.training_release()
        proba = release.predict_proba(small_graph.data, split.test)
        assert proba.shape == (len(split.test), 3)
        assert torch.allclose(proba.sum(1), torch.ones(len(split.test)), atol=1e-5)
        k = model.config()["hops"]
        width = gap_model.hop_width(model.config())  # C under sound gap-edp's skip head, else hidden
        assert release.embed(small_graph.data, split.test).shape == (len(split.test), (k + 1) * width)
        assert model.query_ledger.releases == 0  # reading the training release releases nothing


def test_the_training_release_reads_the_cached_noisy_aggregations(fitted, small_graph):
    """The release made in training answers from its cache (no fresh noise, nothing spent); it
    is PMA's noisy output (not the clean aggregation) except for the non-private gap-inf."""
    model = fitted["gap-edp"]
    eps = model.privacy.epsilon
    release = model.training_release()
    k = model.config()["hops"]
    assert release.aggregations.shape == (small_graph.num_nodes, k * gap_model.hop_width(model.config()))
    first = release.predict_proba(small_graph.data)
    assert torch.equal(first, release.predict_proba(small_graph.data.clone()))  # no fresh noise
    assert model._memo is None and model.query_ledger.releases == 0 and model.privacy.epsilon == eps
    x0 = model.encoder.encode(small_graph.data.x)
    clean = private_multi_hop_aggregation(x0, small_graph.data.edge_index, k, 0.0)
    assert not torch.allclose(release.aggregations[:, :16], clean[0], atol=1e-2)  # the cache is noisy
    inf = fitted["gap-inf"]
    x0 = inf.encoder.encode(small_graph.data.x)
    k = inf.config()["hops"]
    clean = torch.cat(private_multi_hop_aggregation(x0, small_graph.data.edge_index, k, 0.0), dim=1)
    assert torch.allclose(inf.training_release().aggregations, clean, atol=1e-5)


@pytest.mark.parametrize("name", ["gap-edp", "gap-ndp"])
def test_the_training_release_answers_on_the_training_graph_only(fitted, small_graph, name):
    """Any permutation of the training graph's edge list is the training graph; a graph minus one
    edge is not, and the training release refuses it rather than answer for the wrong graph.
    (Replaces ``test_permuted_training_graph_gives_identical_posteriors``, which asserted that
    predict_proba itself answered a permuted training graph from the cache, for free.)"""
    release = fitted[name].training_release()
    permuted = small_graph.data.clone()
    e = permuted.edge_index
    permuted.edge_index = e[:, torch.randperm(e.size(1), generator=torch.Generator().manual_seed(7))]
    assert release.is_training_graph(permuted)
    assert torch.equal(release.predict_proba(permuted), release.predict_proba(small_graph.data))
    smaller = small_graph.data.clone()
    smaller.edge_index = e[:, 1:]
    assert not release.is_training_graph(smaller)
    with pytest.raises(DPAuditError, match="training graph only"):
        release.predict_proba(smaller)


def test_a_copy_of_the_training_graph_is_charged_like_any_other_graph(fitted, small_graph, tmp_path):
    """Acceptance (issue 23): from the public files alone, a query on an exact copy of the
    training graph is charged exactly like a query on the graph minus one edge — the same query
    ledger after, the training ε unchanged. This replaces ``test_transductive_queries_use_the_cache``,
    which asserted the opposite: the copy answered free from the cache, the neighbour cost
    ε 1.0 → 1.48, so whoever guessed the graph learned whether it was the training graph."""
    directory = fitted["gap-edp"].save(tmp_path / "m")
    meta = json.loads((directory / "model.json").read_text())
    assert "graph" not in meta["config"] and not any("cache" in name for name in meta["tensors"])
    spent = []
    for make in (lambda d: d.clone(), lambda d: _without_first_edge(d)):
        public = load(directory, record=False)
        saved = public.privacy.epsilon
        with pytest.raises(DPAuditError, match="owner's record"):
            public.training_release()
        public.predict_proba(make(small_graph.data))
        assert public.query_ledger.releases == 1 and public.privacy.epsilon == saved
        spent.append((public.query_ledger.to_dict(), public.privacy.mechanisms))
    assert spent[0] == spent[1]


def _without_first_edge(data):
    """``data`` minus its first undirected edge (both directions)."""
    smaller = data.clone()
    u, v = (int(t) for t in data.edge_index[:, 0])
    e = data.edge_index
    smaller.edge_index = e[:, ~(((e[0] == u) & (e[1] == v)) | ((e[0] == v) & (e[1] == u)))]
    return smaller


def test_the_owners_copy_charges_the_training_graph_too(fitted, small_graph, tmp_path):
    """(Compared on the released rows, ``representation``: they carry the noise whatever the head
    weighs.) Holding the owner's record changes nothing about predict_proba: the training graph passed
    to the model is a new, charged release; the model object memoises nothing, so the same graph
    (permuted or not) is released again, with fresh noise."""
    model = _copy(fitted["gap-edp"], tmp_path)
    saved = model.privacy.epsilon
    first = model.representation(small_graph.data)
    assert model.query_ledger.releases == 1 and model.privacy.epsilon == saved
    permuted = small_graph.data.clone()
    permuted.edge_index = permuted.edge_index.flip(1)
    assert not torch.equal(model.representation(permuted), first)  # no memo: a new release
    assert not torch.equal(model.representation(small_graph.data), first)
    assert model.query_ledger.releases == 3 and model.privacy.epsilon == saved
    assert not torch.equal(first, model.training_release().representation(small_graph.data))  # fresh noise


def test_a_query_session_leaves_the_models_ledgers_unchanged(fitted, small_graph):
    model = fitted["gap-edp"]
    before = json.dumps(model.privacy.to_dict(), sort_keys=True)
    api = model.query_session()
    assert model.interactive_copy.__func__ is GAPModel.query_session  # the name audits call
    api.predict_proba(small_graph.data)
    api.predict_proba(_without_first_edge(small_graph.data))
    assert api.query_ledger.releases == 2 and api.privacy.epsilon == model.privacy.epsilon
    query = GaussianMechanism(model.config()["noise_std"], math.sqrt(2), 2 * model.config()["hops"])
    expected = PrivacyLedger().step(query).get_epsilon(model.privacy.delta)
    assert api.query_ledger.spec().epsilon == pytest.approx(expected, rel=1e-9)
    assert json.dumps(model.privacy.to_dict(), sort_keys=True) == before and model.query_ledger.releases == 0
    assert torch.equal(api.training_release().aggregations, model.training_release().aggregations)


@pytest.mark.parametrize("name", ["gap-edp", "gap-ndp"])
def test_a_guess_of_the_owners_graph_is_not_answered_from_the_owners_queries(
    fitted, small_graph, split, tmp_path, name
):
    """Acceptance (privacy review): in a shared deployment the owner answers its test nodes on
    the private graph with the loaded public model; a third party then submits guesses to the
    same object. An exact copy of the graph and the graph minus one edge are charged alike (one
    release each in the query ledger), neither is answered with the owner's published rows, and
    the model's ε stays the training ε. (Before: the copy was answered from the memo — free,
    bit-identical to the owner's answers — while the neighbour was charged and raised ε.)"""
    model = load(fitted[name].save(tmp_path / name), record=False)
    trained = model.privacy.epsilon
    graph, test = small_graph.data, split.test
    published = model.representation(graph, test)  # the owner's charged release
    assert model.query_ledger.releases == 1
    for guess in (graph.clone(), _without_first_edge(graph)):
        before = model.query_ledger.releases
        answer = model.representation(guess, test)
        assert model.query_ledger.releases == before + 1
        assert not torch.equal(answer, published)
    assert model.query_ledger.releases == 3
    assert model.privacy.epsilon == trained == fitted[name].privacy.epsilon
    assert model.privacy.mechanisms == fitted[name].privacy.mechanisms


def test_a_repeat_is_free_only_inside_its_own_session(fitted, small_graph, split):
    model = fitted["gap-edp"]
    graph = small_graph.data
    mine, theirs = model.query_session(), model.query_session()
    first = mine.representation(graph, split.test)
    assert torch.equal(mine.representation(graph.clone(), split.test), first)  # the session's own release
    assert mine.query_ledger.releases == 1
    other = theirs.representation(graph, split.test)  # another session's first query: charged, fresh
    assert theirs.query_ledger.releases == 1 and not torch.equal(other, first)
    assert model.query_ledger.releases == 0 and model._memo is None
    assert mine.query_ledger.to_dict() == theirs.query_ledger.to_dict()
    assert mine.query_ledger.to_dict()["protects"] == gap_model.QUERY_LEDGER_PROTECTS


def test_zeroing_a_neighbours_features_changes_the_answer(fitted, small_graph, tmp_path):
    """The key reads the features: zeroing a neighbour's features is a new query graph, so its
    (exact, non-private) aggregation changes the target's posterior — LinkTeller has a signal."""
    data = small_graph.data
    target = int(data.edge_index[1, 0])
    neighbours = data.edge_index[0, data.edge_index[1] == target]
    model = _copy(fitted["gap-inf"], tmp_path)
    base = model.predict_proba(data, [target])
    poked = data.clone()
    poked.x = data.x.clone()
    poked.x[neighbours] = 0
    changed = model.predict_proba(poked, [target])
    assert not torch.allclose(base, changed, atol=1e-6)
    x0 = model.encoder.encode(poked.x)
    k = model.config()["hops"]
    z = torch.cat([x0, *private_multi_hop_aggregation(x0, poked.edge_index, k, 0.0)], dim=1)[[target]]
    assert torch.allclose(changed, torch.softmax(model.classifier(z), 1), atol=1e-5)


def test_query_releases_go_to_the_query_ledger_never_to_the_training_spec(fitted, small_graph, tmp_path):
    model = _copy(fitted["gap-edp"], tmp_path)
    trained = model.privacy.to_dict()
    other = small_graph.data.clone()
    other.edge_index = small_graph.data.edge_index[:, : small_graph.data.edge_index.size(1) // 2]
    model.predict_proba(other)
    assert model.config()["query_releases"] == 1 and model.privacy.to_dict() == trained
    model.predict_proba(other)  # the model object memoises nothing: a second release
    assert model.query_ledger.releases == 2 and model.privacy.to_dict() == trained
    # two query releases of the chosen K hops each, at the model's δ (the training ledger apart)
    ledger = PrivacyLedger().step(
        GaussianMechanism(model.config()["noise_std"], math.sqrt(2), 2 * model.config()["hops"])
    )
    spec = model.query_ledger.spec()
    assert spec.epsilon == pytest.approx(ledger.get_epsilon(model.privacy.delta), rel=1e-9)
    assert spec.delta == model.privacy.delta and spec.unit == "edge" and len(spec.mechanisms) == 2
    # half the training graph's edges: it shares edges with the training graph, so both releases are
    # charged to the training data too (issue 46 §2)
    total = model.charged_privacy
    assert total.epsilon > model.privacy.epsilon and model.query_ledger.charged == 2
    assert model.query_ledger.to_dict() == {
        "releases": 2,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "unit": "edge",
        "protects": gap_model.QUERY_LEDGER_PROTECTS,
        "charged_to_training": 2,
        "epsilon_total": total.epsilon,
    }
    reloaded = _copy(model, tmp_path, "again")  # the count survives save/load; the spec stays training
    assert reloaded.privacy.to_dict() == trained and reloaded.query_ledger.releases == 2
    reloaded.predict_proba(other)
    assert reloaded.privacy.to_dict() == trained and reloaded.config()["query_releases"] == 3
    assert fitted["gap-inf"].query_ledger.to_dict()["epsilon"] is None  # no noise: nothing protected


def _legacy(model, directory, releases: int):
    """``model`` saved as a file written before the query ledger: its spec composed ``releases``
    query releases after the training ledger (and said so in a note)."""
    path = model.save(directory)
    meta = json.loads((path / "model.json").read_text())
    cfg = meta["config"]
    training = len(meta["privacy"]["mechanisms"])
    mechanisms = [_mechanism_from(r) for r in cfg["ledger"]] + [_mechanism_from(cfg["query_mechanism"])] * releases
    composed = PrivacyLedger().extend(mechanisms).spec(meta["privacy"]["delta"], meta["privacy"]["unit"]).to_dict()
    for key in ("epsilon", "mechanisms", "gdp_mu", "accountant", "epsilon_by_accountant", "accounting"):
        meta["privacy"][key] = composed[key]
    meta["privacy"]["notes"].append(f"{RELEASES_NOTE}{releases}")
    cfg["query_releases"] = releases
    (path / "model.json").write_text(json.dumps(meta))
    assert len(meta["privacy"]["mechanisms"]) == training + releases
    return path


@pytest.mark.parametrize("name", ["gap-edp", "gap-ndp"])
def test_a_file_that_composed_query_releases_loads_as_the_training_spec(fitted, tmp_path, name):
    """Files written before the query ledger composed every query release into the spec (ε 5.1 →
    6.1 after one); they load with the training spec and the count moved to the query ledger,
    and save back in the current form. Any other count of composed releases is refused."""
    model = fitted[name]
    path = _legacy(model, tmp_path / "old", 3)
    old = json.loads((path / "model.json").read_text())["privacy"]
    assert old["epsilon"] > model.privacy.epsilon
    legacy = load(path)
    assert legacy.privacy.epsilon == pytest.approx(model.privacy.epsilon, rel=1e-12)
    assert legacy.privacy.mechanisms == model.privacy.mechanisms and legacy.privacy.notes == model.privacy.notes
    assert legacy.query_ledger.releases == 3
    assert any("written before the query ledger" in c for c in legacy.verification.checked)
    again = load(legacy.save(tmp_path / "new"))
    assert again.privacy.to_dict() == legacy.privacy.to_dict() and again.query_ledger.releases == 3
    meta = json.loads((path / "model.json").read_text())
    meta["config"]["query_releases"] = 2  # hides one composed release: neither form
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="training ledger"):
        load(path)


def test_sound_ndp_refuses_foreign_query_graphs_above_the_bound(fitted, small_graph, tmp_path):
    model = _copy(fitted["gap-ndp-promise"], tmp_path)
    dense = small_graph.data.clone()
    extra = torch.stack([torch.zeros(40, dtype=torch.long), torch.arange(1, 41)])
    dense.edge_index = to_undirected(torch.cat([dense.edge_index, extra], dim=1), num_nodes=dense.num_nodes)
    with pytest.raises(ConfigurationError, match="maximum degree"):
        model.predict_proba(dense)
    assert model.config()["query_releases"] == 0


@pytest.mark.parametrize("name", ["gap-inf", "gap-edp", "gap-ndp"])
def test_save_load_round_trip(fitted, small_graph, tmp_path, name):
    """The public files carry the weights; the training release travels in the owner's record
    (``provenance.safetensors`` + the graph's key in ``provenance.json``) and comes back with it."""
    model = fitted[name]
    directory = model.save(tmp_path / name)
    loaded = load(directory, record=True)
    assert isinstance(loaded, GAPModel)
    ours, theirs = model.training_release(), loaded.training_release()
    assert torch.equal(theirs.predict_proba(small_graph.data), ours.predict_proba(small_graph.data))
    assert torch.equal(theirs.embed(small_graph.data), ours.embed(small_graph.data))
    assert torch.equal(theirs.aggregations, ours.aggregations)
    assert loaded.privacy.epsilon == model.privacy.epsilon and loaded.privacy.unit == model.privacy.unit
    assert loaded.privacy.unit_condition == model.privacy.unit_condition
    assert loaded.config() == model.config()
    if model.privacy.is_private:
        assert "mechanisms re-derived from the card's hyperparameters and declared facts" in loaded.verification.checked
    record = json.loads((directory / "provenance.json").read_text())
    assert record["gap"]["training_graph"] == {
        "key": ours.graph.key,
        "num_nodes": small_graph.num_nodes,
        "structure": structure_key(small_graph.data),
    }
    # the training graph's edge set travels in the owner's record (what charges a graph sharing an edge)
    assert torch.equal(loaded._training_edges, model._training_edges) and loaded._training_edges.numel() > 0
    public = load(directory)
    with pytest.raises(DPAuditError, match="owner's record"):
        public.training_release()
    if name == "gap-inf":  # no noise: a charged release on the training graph repeats the cache exactly
        assert torch.allclose(public.predict_proba(small_graph.data), ours.predict_proba(small_graph.data), atol=1e-5)


def test_files_before_format_3_load_without_their_oracle(fitted, small_graph, tmp_path):
    """An old file shipped the training graph's key in its config and the aggregations in its
    public tensors; it loads as a public copy (both dropped, every query charged), holding
    nothing that would write them back."""
    import hashlib

    from safetensors.torch import load as load_safetensors
    from safetensors.torch import save as save_safetensors

    model = fitted["gap-edp"]
    directory = model.save(tmp_path / "new")
    old = tmp_path / "old"
    old.mkdir()
    release = model.training_release()
    tensors = load_safetensors((directory / "model.safetensors").read_bytes())
    tensors["cache.aggregations"] = release.aggregations.contiguous()
    blob = save_safetensors(tensors)
    (old / "model.safetensors").write_bytes(blob)
    meta = json.loads((directory / "model.json").read_text())
    record = json.loads((directory / "provenance.json").read_text())
    meta["schema_version"] = 2
    meta["card"].update(seed=record["seed"], split=record["split"])  # format 2 kept the record in the card
    meta["config"]["graph"] = release.graph.to_dict()
    meta["tensors"]["cache.aggregations"] = {"shape": list(release.aggregations.shape), "dtype": "float32"}
    meta["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    (old / "model.json").write_text(json.dumps(meta))
    legacy = load(old)
    assert "graph" not in legacy.config()
    with pytest.raises(DPAuditError, match="owner's record"):
        legacy.training_release()
    legacy.predict_proba(small_graph.data)
    assert legacy.query_ledger.releases == 1
    assert "cache.aggregations" not in legacy.state_tensors() and legacy.record_tensors() == {}


def test_tampered_config_is_refused(fitted, tmp_path):
    path = fitted["gap-edp"].save(tmp_path / "m")
    meta = json.loads((path / "model.json").read_text())
    for key, value in (("hops", 3), ("hops", 9), ("protocol", "loose")):
        bad = json.loads(json.dumps(meta))
        bad["config"][key] = value
        (path / "model.json").write_text(json.dumps(bad))
        with pytest.raises(ModelFormatError):
            load(path)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "name,kwargs,error",
    [
        ("gap-edp", {"hops": 0}, ConfigurationError),
        ("gap-edp", {"hops": 6}, ConfigurationError),
        ("gap-edp", {"hop_grid": [0, 2]}, ConfigurationError),
        ("gap-edp", {"protocol": "loose"}, ConfigurationError),
        ("gap-ndp", {"max_degree": 0}, ConfigurationError),
        ("gap-ndp", {"degree_grid": []}, ConfigurationError),
        ("gap-ndp", {"batch_size": 0}, ConfigurationError),
        ("gap-ndp", {"batch_norm": True}, ConfigurationError),  # not a node-level option
        ("gap-edp", {"lr": -1.0}, ConfigurationError),
        ("gap-edp", {"epochs": 0}, ConfigurationError),
        ("gap-edp", {"epsilon": -1.0}, PrivacyParameterError),
        ("gap-inf", {"epsilon": 4.0}, PrivacyParameterError),
    ],
)
def test_bad_configuration(name, kwargs, error):
    with pytest.raises(error):
        get_defense(name)(**kwargs)


def test_bad_queries(fitted, small_graph):
    model = fitted["gap-edp"]
    wrong = small_graph.data.clone()
    wrong.x = wrong.x[:, :5]
    with pytest.raises(DPAuditError):
        model.predict_proba(wrong)
    with pytest.raises(DPAuditError):
        model.predict_proba(small_graph.data, [small_graph.num_nodes])
    with pytest.raises(DPAuditError):
        model.embed("not a graph")


def test_projected_ndp_queries_project_the_whole_graph_and_refuse_more_nodes_than_declared(
    fitted, small_graph, tmp_path
):
    """A query graph above D is answered (the projection, not a refusal), as one whole-graph
    release; a query graph with more nodes than declared is refused before any release."""
    model = _copy(fitted["gap-ndp"], tmp_path)
    dense = small_graph.data.clone()
    extra = torch.stack([torch.zeros(40, dtype=torch.long), torch.arange(1, 41)])
    dense.edge_index = to_undirected(torch.cat([dense.edge_index, extra], dim=1), num_nodes=dense.num_nodes)
    assert max_degree_of(dense.edge_index, dense.num_nodes) > NDP["max_degree"]
    model.predict_proba(dense, [0, 1])
    assert model.config()["query_releases"] == 1
    bigger = dense.clone()
    bigger.x = torch.cat([dense.x, dense.x[:1]])
    bigger.num_nodes = dense.num_nodes + 1
    with pytest.raises(DPAuditError, match="more than the declared 300"):
        model.predict_proba(bigger, [0])
    assert model.config()["query_releases"] == 1


def test_projected_ndp_at_infinite_epsilon_projects_without_a_sensitivity(small_graph, split, tmp_path):
    """ε = ∞ runs the same projection with no noise: no declared size is read, the card's
    sensitivity is None, and the model saves, loads and answers."""
    model = get_defense("gap-ndp")(epsilon=math.inf, seed=0, encoder_epochs=1, epochs=1, max_degree=3).fit(
        small_graph, split
    )
    assert model.card["gap"]["aggregation_sensitivity"] is None and model.config()["noise_std"] == 0.0
    assert model.record["gap"]["projection"]["cap"] == 3.0
    assert _copy(model, tmp_path).predict_proba(small_graph.data).shape == (small_graph.num_nodes, 3)
