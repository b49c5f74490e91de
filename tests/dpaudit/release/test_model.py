"""Released-model format: round trip, and refusal of pickles and tampered files."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from dpaudit.data.splits import make_split
from dpaudit.errors import ModelFormatError
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense


@pytest.fixture(scope="module")
def saved(small_graph, tmp_path_factory):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("mlp-dp")(epsilon=4.0, seed=0, epochs=3).fit(small_graph, split)
    directory = tmp_path_factory.mktemp("model")
    model.save(directory)
    return model, directory, split


def test_round_trip_gives_identical_predictions(saved, small_graph):
    model, directory, split = saved
    again = load(directory)
    assert torch.equal(
        model.predict_proba(small_graph.data, split.test), again.predict_proba(small_graph.data, split.test)
    )
    assert torch.equal(model.embed(small_graph.data), again.embed(small_graph.data))
    assert again.privacy == model.privacy and again.card == json.loads(json.dumps(model.card))


def test_load_is_the_public_view_unless_the_record_is_asked_for(saved, small_graph):
    """The owner's record (split, seeds, fingerprint, GAP's training release) answers "is this your
    training graph?" exactly: ``load`` attaches it only with ``record=True`` (issue 46 §2)."""
    from dpaudit.release import OWNER_FILES
    from dpaudit.release.model import training_release

    model, directory, _ = saved
    assert (directory / "provenance.json").is_file() and model.record  # the owner's files are there
    public = load(directory)
    assert public.record == {} and not public.has_record
    for key in model.record:  # only what the public card says, never the owner's measurement
        assert public.provenance(key) == json.loads(json.dumps(model.card.get(key)))
    assert model.record["split"] != model.card.get("split")  # the record holds more (seed, sizes, nodes)
    assert training_release(public) is None
    owner = load(directory, record=True)
    assert owner.has_record and owner.record == json.loads(json.dumps(model.record))
    assert "provenance.json" in OWNER_FILES and "metrics.json" in OWNER_FILES


def test_inspect_shows_the_public_view_unless_asked_for_the_record(saved, capsys):
    from dpaudit.app.cli import main

    _, directory, _ = saved
    assert main(["inspect", str(directory), "--json"]) == 0
    shown = capsys.readouterr().out
    assert "a querier-chosen feature change: free" in shown  # mlp-dp reads the queried node's own features
    assert main(["inspect", str(directory), "--record"]) == 0


def test_gnn_round_trip(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    model = get_defense("gcn")(seed=0, epochs=5).fit(small_graph, split)
    model.save(tmp_path)
    again = load(tmp_path)
    assert torch.equal(model.predict_proba(small_graph.data), again.predict_proba(small_graph.data))


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_pickle_is_refused(saved, tmp_path):
    _, directory, _ = saved
    bad = _copy(directory, tmp_path / "pickled")
    payload = pickle.dumps({"weight": torch.zeros(2)})
    (bad / "model.safetensors").write_bytes(payload)
    with pytest.raises(ModelFormatError, match="hash|tampered"):
        load(bad)
    # Even with a matching hash, a pickle is not a safetensors file.
    import hashlib

    meta = json.loads((bad / "model.json").read_text())
    meta["weights_sha256"] = hashlib.sha256(payload).hexdigest()
    (bad / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="safetensors"):
        load(bad)


def test_tampered_weights_are_refused(saved, tmp_path):
    _, directory, _ = saved
    bad = _copy(directory, tmp_path / "tampered")
    blob = bytearray((bad / "model.safetensors").read_bytes())
    blob[-3] ^= 0xFF
    (bad / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(ModelFormatError, match="tampered"):
        load(bad)


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda m: m.update(schema="something-else"), "not a dpaudit"),
        (lambda m: m.update(kind="evil"), "unknown model kind"),
        (lambda m: m["tensors"].pop(next(iter(m["tensors"]))), "manifest"),
        (lambda m: m["config"]["architecture"].update(hidden=[7]), "architecture"),
        (lambda m: m["privacy"].update(unit="planet"), "privacy"),
        (lambda m: m["card"].pop("method"), "card"),
    ],
)
def test_tampered_metadata_is_refused(saved, tmp_path, edit, match):
    _, directory, _ = saved
    bad = _copy(directory, tmp_path / "meta")
    meta = json.loads((bad / "model.json").read_text())
    edit(meta)
    (bad / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match=match):
        load(bad)


def test_missing_or_garbage_directory(tmp_path):
    with pytest.raises(ModelFormatError):
        load(tmp_path / "nope")
    (tmp_path / "model.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelFormatError, match="JSON"):
        load(tmp_path)


def test_edited_architecture_is_refused_before_allocating(tmp_path):
    """hidden = 300,000 in model.json would allocate gigabytes; the meta-device check refuses it first."""
    import json
    import shutil

    from dpaudit.app.pipeline import train
    from dpaudit.errors import ModelFormatError
    from dpaudit.release.model import load

    train("mlp", "csbm", overrides={"epochs": 1}, split="random:0.5,0.25,0.25", out=tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "edited")
    meta = json.loads((tmp_path / "edited" / "model.json").read_text())
    meta["config"]["architecture"]["hidden"] = [300_000]
    (tmp_path / "edited" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="size mismatch"):  # refused by the size check, not timed
        load(tmp_path / "edited")
    assert load(tmp_path / "m").method == "mlp"
