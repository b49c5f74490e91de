"""The public release vs the owner's record (:mod:`dpaudit.release`): what model.json may hold,
what only provenance.json holds, declared public facts, and ceilings only from proven specs."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from attacks.canary import draw_canaries, training_data
from dpaudit.accounting.spec import PrivacySpec
from dpaudit.app.cli import main
from dpaudit.auditing.statistics import coverage
from dpaudit.data.datasets import from_data
from dpaudit.data.splits import make_split
from dpaudit.errors import DatasetError, DPAuditError
from dpaudit.release import PublicCardError, check_public_card, declared_population
from dpaudit.release.model import load
from dpaudit.release.provenance import resolve_dataset, target_split
from dpaudit.testing.neighbours import leaf_differences, public_leaves, train_and_compare, without_edge, without_node
from dpaudit.training.registry import get_defense

SPLIT = "random:0.6,0.2,0.2"


@pytest.fixture(scope="module")
def trained_gcn(small_graph, tmp_path_factory):
    split = make_split(small_graph, SPLIT, seed=3)
    model = get_defense("gcn")(seed=5, epochs=5).fit(small_graph, split)
    return model.save(tmp_path_factory.mktemp("gcn") / "model"), split


def test_model_json_holds_no_measurement_of_the_training_data(trained_gcn, small_graph):
    directory, split = trained_gcn
    meta = json.loads((directory / "model.json").read_text())
    text = json.dumps(meta)
    assert small_graph.fingerprint not in text
    assert "seed" not in meta["card"] and "timings" not in meta["card"] and "device" not in meta["card"]
    assert set(meta["card"]["split"]) == {"spec", "inductive"}
    assert "fingerprint" not in meta["card"]["dataset"] and "num_edges" not in meta["card"]["dataset"]
    record = json.loads((directory / "provenance.json").read_text())
    assert record["seed"] == 5 and record["dataset"]["fingerprint"] == small_graph.fingerprint
    assert record["split"]["seed"] == 3 and record["split"]["sizes"]["train"] == len(split.train)
    assert record["timings"]["train_seconds"] > 0


def test_public_files_alone_load_and_membership_needs_the_owners_record(trained_gcn, small_graph):
    directory, split = trained_gcn
    third_party = load(directory, record=False)
    assert third_party.record == {} and not third_party.has_record
    assert third_party.predict_proba(small_graph.data).shape == (small_graph.num_nodes, small_graph.num_classes)
    with pytest.raises(DPAuditError, match="owner's record"):
        target_split(third_party, small_graph)
    assert load(directory).record == {}  # the public view is the default
    owner = load(directory, record=True)  # the owner's record only when asked for
    assert owner.has_record
    rebuilt = target_split(owner, resolve_dataset(owner, small_graph))
    assert torch.equal(rebuilt.train, split.train)


def test_a_third_partys_copy_needs_only_the_two_public_files(trained_gcn, tmp_path, small_graph):
    directory, _ = trained_gcn
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("model.json", "model.safetensors"):
        (shipped / name).write_bytes((directory / name).read_bytes())
    model = load(shipped)
    assert not model.has_record and model.method == "gcn"


@pytest.mark.parametrize(
    "card,fragment",
    [
        ({"method": "x", "seed": 0}, "not declared public"),
        ({"method": "x", "dataset": {"name": "cora", "fingerprint": "ab"}}, "dataset fields"),
        ({"method": "x", "split": {"spec": "public", "sizes": {"train": 3}}}, "split fields"),
        ({"method": "x", "gcon": {"solver": {"iterations": 3, "timings": 1}}}, "gcon.solver.timings"),
    ],
)
def test_public_card_check_refuses_private_fields(card, fragment):
    with pytest.raises(PublicCardError, match=fragment.replace(".", r"\.")):
        check_public_card(card)


def test_save_refuses_a_card_with_an_undeclared_field(small_graph, tmp_path):
    split = make_split(small_graph, SPLIT, seed=0)
    model = get_defense("mlp")(epochs=2).fit(small_graph, split)
    model.card["timings"] = {"train_seconds": 1.0}
    with pytest.raises(PublicCardError):
        model.save(tmp_path / "m")
    assert not (tmp_path / "m" / "model.json").exists()


@pytest.mark.parametrize("name", ["gcn", "sage", "mlp"])
def test_baselines_release_is_neutral_to_one_edge_and_one_node(name, small_graph, tmp_path):
    split = make_split(small_graph, SPLIT, seed=0)
    make = lambda: get_defense(name)(seed=1, epochs=3)  # noqa: E731
    assert (
        train_and_compare(make, (small_graph, split), (without_edge(small_graph, split), split), tmp_path / "e") == {}
    )
    assert train_and_compare(make, (small_graph, split), without_node(small_graph, split), tmp_path / "n") == {}


def test_neighbour_diff_catches_a_count_in_the_card(small_graph, tmp_path):
    """The harness itself can fail: a card that carries the number of training nodes differs."""
    split = make_split(small_graph, SPLIT, seed=0)
    dirs = []
    for i, (dataset, sp) in enumerate([(small_graph, split), without_node(small_graph, split)]):
        model = get_defense("mlp")(epochs=2).fit(dataset, sp)
        model.card["split"]["inductive"] = len(sp.train)  # a planted leak in a public leaf
        dirs.append(model.save(tmp_path / str(i)))
    assert set(leaf_differences(*dirs)) == {"card.split.inductive"}
    assert "card.split.inductive" in public_leaves(dirs[0])


def test_delta_auto_reads_the_declared_population_only(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    smaller, smaller_split = without_node(small_graph, split)
    assert smaller.num_nodes == small_graph.num_nodes - 1
    for unit in ("node", "edge"):
        assert declared_population(unit, small_graph, split) == declared_population(unit, smaller, smaller_split)
    defense = get_defense("mlp-dp")(epsilon=4)
    assert defense.resolve_delta(small_graph, split) == defense.resolve_delta(smaller, smaller_split) == 1e-3


def _undeclared_graph(**kwargs):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 5, generator=g)
    y = torch.arange(40) % 2
    edge_index = torch.randint(0, 40, (2, 80), generator=g)
    kwargs.setdefault("classes", 2)  # the label domain, always declared; no size unless told
    return from_data(Data(x=x, y=y, edge_index=edge_index), "mine", **kwargs)


def test_a_users_graph_declares_nothing_unless_told(tmp_path):
    mine = _undeclared_graph()
    assert mine.public_facts == {"classes": [0, 1], "declared_by": "the user"}
    assert make_split(mine, SPLIT).declared_sizes is None
    with pytest.raises(DPAuditError, match="delta=auto needs a declared public size"):
        get_defense("mlp-dp")(epsilon=4, epochs=1).fit(mine, make_split(mine, SPLIT))
    declared = _undeclared_graph(public_facts={"num_nodes": 1000})
    assert declared.public_facts == {"classes": [0, 1], "num_nodes": 1000, "declared_by": "the user"}
    # a declared bound does not make the split's measured sizes public
    assert make_split(declared, SPLIT).declared_sizes is None
    assert _undeclared_graph(public_facts=True).public_facts["num_nodes"] == 40
    with pytest.raises(DatasetError, match="unknown public facts"):
        _undeclared_graph(public_facts={"edges": 3})
    with pytest.raises(DatasetError, match="positive integer"):
        _undeclared_graph(public_facts={"num_nodes": -3})


def test_registry_benchmarks_declare_their_published_sizes(load_real):
    cora = load_real("cora")
    assert cora.public_facts["num_nodes"] == 2708 and cora.public_facts["num_edges"] == 5278
    assert "benchmark" in cora.public_facts["declared_by"]
    assert make_split(cora, "public").declared_sizes == {"train": 140, "val": 500, "test": 1000}


def test_canary_runs_keep_the_declaration_whatever_the_coins(small_graph):
    split = make_split(small_graph, SPLIT, seed=0)
    design = draw_canaries(small_graph, split, "node", 8, seed=0)
    seen = set()
    for coins in (np.zeros(8, dtype=bool), np.ones(8, dtype=bool)):
        ds, sp = training_data(small_graph, split, design, coins)
        seen.add((json.dumps(ds.public_facts, sort_keys=True), json.dumps(sp.declared_sizes, sort_keys=True)))
    assert len(seen) == 1


def test_files_before_format_3_still_load_with_their_record_in_the_card(trained_gcn, tmp_path, small_graph):
    directory, split = trained_gcn
    old = tmp_path / "old"
    old.mkdir()
    (old / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    meta = json.loads((directory / "model.json").read_text())
    record = json.loads((directory / "provenance.json").read_text())
    meta["schema_version"] = 2
    meta["card"].update(
        seed=record["seed"], split=record["split"], dataset={**meta["card"]["dataset"], **record["dataset"]}
    )
    (old / "model.json").write_text(json.dumps(meta))
    model = load(old)
    assert model.provenance("seed") == 5
    assert torch.equal(target_split(model, resolve_dataset(model, small_graph)).train, split.train)


def test_ceilings_come_from_proven_specs_and_hypotheses_never_from_conditional_ones():
    sound = PrivacySpec(epsilon=1.0, delta=1e-5, unit="node", mechanisms=[{"m": 1}], accountant="rdp")
    assert coverage(sound, "node").covered and not coverage(sound, "node").hypothesis
    assert sound.status == "proven"
    # a paper's unproven ε is a hypothesis: tested (its ceiling is what the claim allows), never proven
    paper = dataclasses.replace(sound, sound=False, unaccounted=["best-validation checkpoint"], protocol="paper")
    tested = coverage(paper, "node")
    assert paper.status == "paper" and tested.covered and tested.hypothesis and tested.status == "paper"
    assert tested.ceiling_auc == pytest.approx(coverage(sound, "node").ceiling_auc)
    assert "the paper's claim" in tested.reason and " covers " not in tested.reason
    edge = coverage(paper, "edge")  # the same units and group sizes as a proven spec's
    assert edge.hypothesis and edge.group_size == 2 and edge.epsilon == pytest.approx(2.0)
    bounded = dataclasses.replace(sound, unit_condition="max degree <= 10")
    assert bounded.unit_label == "node (max degree <= 10)" and not bounded.proven
    assert not coverage(bounded, "node").covered and not coverage(bounded, "edge").covered
    assert "node (max degree <= 10)" in bounded.summary()
    assert PrivacySpec.from_dict(bounded.to_dict()).unit_condition == "max degree <= 10"
    assert math.isfinite(coverage(sound, "node").ceiling_auc)


def test_inspect_says_which_file_is_which(trained_gcn, capsys):
    directory, _ = trained_gcn
    assert main(["inspect", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "model.json" in out and "public release" in out
    assert "provenance.json" in out and "NOT covered by the guarantee" in out
    assert '"card"' not in out
    assert main(["inspect", str(directory), "--json"]) == 0
    assert '"card"' in capsys.readouterr().out


def test_a_malformed_owners_record_is_refused_not_guessed(trained_gcn, tmp_path):
    from dpaudit.errors import ModelFormatError

    directory, _ = trained_gcn
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("model.json", "model.safetensors"):
        (copy / name).write_bytes((directory / name).read_bytes())
    (copy / "provenance.json").write_text('{"seed": 1}')
    with pytest.raises(ModelFormatError, match="owner's record"):
        load(copy, record=True)
    assert load(copy).record == {}
