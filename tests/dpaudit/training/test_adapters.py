"""dpaudit.training.adapters: a user's claim has the status ``claimed`` (a hypothesis), and an
adapted module is exported as a declared layer stack that loads back to the same outputs."""

from __future__ import annotations

import json

import pytest
import torch
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from dpaudit.accounting.spec import PrivacySpec
from dpaudit.data.datasets import load_dataset
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, IntegrityError, ModelFormatError
from dpaudit.release.model import load
from dpaudit.training.adapters import USER_STATED, adapt, export

CLAIM = {"epsilon": 2.0, "delta": 1e-4, "unit": "node"}


@pytest.fixture(scope="module")
def graph():
    return load_dataset("csbm", num_nodes=120, num_features=6, seed=0)


@pytest.fixture(scope="module")
def split(graph):
    return make_split(graph, "random:0.5,0.25,0.25", seed=0)


class GcnGat(torch.nn.Module):
    """GCN → ELU (as a function) → GAT with two heads, a dropout module between."""

    def __init__(self, features, classes):
        super().__init__()
        self.conv1 = GCNConv(features, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.conv2 = GATConv(8, classes, heads=2, concat=False)

    def forward(self, x, edge_index):
        return self.conv2(self.drop(torch.nn.functional.elu(self.conv1(x, edge_index))), edge_index)


class Residual(torch.nn.Module):
    """Two SAGE layers with a skip connection: more than a stack."""

    def __init__(self, features, classes):
        super().__init__()
        self.a, self.b = SAGEConv(features, features), SAGEConv(features, classes)

    def forward(self, x, edge_index):
        return self.b(torch.relu(self.a(x, edge_index)) + x, edge_index)


def test_a_users_claim_is_claimed_neither_proven_nor_a_papers(graph, split):
    model = adapt(GcnGat(graph.num_features, graph.num_classes), graph, split=split, privacy=CLAIM)
    spec = model.privacy
    assert spec.status == "claimed" and spec.hypothesis and spec.protocol == "claimed"
    assert spec.sound is False and spec.unaccounted == [USER_STATED] and not spec.proven
    assert "claimed by the user: a hypothesis, not proven" in spec.summary() and "NOT a sound" not in spec.summary()
    assert model.card["protocol"] == "claimed" and model.verification.status == "stated"
    paper = PrivacySpec(epsilon=1.0, delta=1e-5, unit="node", protocol="paper", sound=False, unaccounted=["x"])
    proven = PrivacySpec(epsilon=1.0, delta=1e-5, unit="node", protocol="sound", mechanisms=[{"m": 1}])
    assert (paper.status, paper.hypothesis) == ("paper", True) and (proven.status, proven.hypothesis) == (
        "proven",
        False,
    )
    assert PrivacySpec.non_private().status == "none"
    assert PrivacySpec.from_dict(spec.to_dict()).status == "claimed"  # survives JSON
    with pytest.raises(ConfigurationError, match="records no mechanism"):
        adapt(model.module, graph, split=split, privacy={**CLAIM, "mechanisms": [{"name": "gaussian"}]})


@pytest.mark.parametrize("activation", [None, "elu"])
def test_export_rebuilds_the_module_from_its_declaration(graph, split, tmp_path, activation):
    torch.manual_seed(0)
    model = adapt(GcnGat(graph.num_features, graph.num_classes), graph, split=split, privacy=CLAIM)
    released = export(model, activation=activation)
    architecture = released.architecture
    assert architecture["act"] == "elu" and [layer["op"] for layer in architecture["layers"]] == ["gcn", "gat"]
    assert architecture["layers"][1]["heads"] == 2 and architecture["layers"][1]["concat"] is False
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert (
        meta["kind"] == "module" and meta["privacy"]["protocol"] == "claimed" and meta["card"]["protocol"] == "claimed"
    )
    assert not any(p.suffix in (".pt", ".pkl", ".pth") for p in (tmp_path / "m").iterdir())  # data, never a pickle
    loaded = load(tmp_path / "m", record=True)  # the owner reads its record explicitly
    assert loaded.privacy.status == "claimed" and loaded.verification.status == "stated"
    assert torch.allclose(loaded.predict_proba(graph.data), model.predict_proba(graph.data), atol=1e-6)
    nodes = torch.tensor([3, 7, 50])
    assert torch.allclose(loaded.predict_proba(graph.data, nodes), model.predict_proba(graph.data, nodes), atol=1e-6)
    assert torch.equal(torch.as_tensor(loaded.record["split"]["nodes"]["train"]), split.train)  # owner's record


def test_export_of_a_feature_module_in_a_sequential(graph, split, tmp_path):
    module = torch.nn.Sequential(
        torch.nn.Linear(graph.num_features, 5), torch.nn.Tanh(), torch.nn.Linear(5, graph.num_classes)
    )
    model = adapt(module, graph, split=split, privacy=CLAIM, input="features")
    model.save(tmp_path / "mlp")
    loaded = load(tmp_path / "mlp")
    assert loaded.architecture["act"] == "tanh"
    assert torch.allclose(loaded.predict_proba(graph.data), model.predict_proba(graph.data), atol=1e-6)


def test_export_refuses_what_it_cannot_declare_in_one_line(graph, split, tmp_path):
    class WithNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.bn = torch.nn.Linear(graph.num_features, graph.num_classes), torch.nn.BatchNorm1d(4)

        def forward(self, x, edge_index):
            return self.bn(self.lin(x))

    with pytest.raises(ConfigurationError, match=r"layer 'bn' \(BatchNorm1d\) is not one dpaudit can declare"):
        adapt(WithNorm(), graph, split=split, privacy=CLAIM).save(tmp_path / "never")
    residual = adapt(Residual(graph.num_features, graph.num_classes), graph, split=split, privacy=CLAIM)
    with pytest.raises(ConfigurationError, match="does not give the module's outputs .* more than a layer stack"):
        residual.save(tmp_path / "never")
    with pytest.raises(ConfigurationError, match="activation must be one of"):
        export(residual, activation="gelu")
    proba = adapt(
        torch.nn.Sequential(torch.nn.Linear(graph.num_features, graph.num_classes), torch.nn.Softmax(1)),
        graph,
        split=split,
        input="features",
        output="proba",
    )
    with pytest.raises(ConfigurationError, match="returns logits"):
        export(proba)
    assert not (tmp_path / "never").exists()


def test_a_claimed_file_cannot_pose_as_a_registered_defense(graph, split, tmp_path):
    """protocol=claimed loads as the user's statement only: on a registered defense's card (whose ε
    dpaudit accounts itself) it is refused, as is a claim that lists mechanisms."""
    module = torch.nn.Sequential(torch.nn.Linear(graph.num_features, graph.num_classes))
    adapt(module, graph, split=split, privacy=CLAIM, input="features").save(tmp_path / "m")
    path = tmp_path / "m" / "model.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "card": {**meta["card"], "method": "mlp-dp"}}))
    with pytest.raises(IntegrityError, match="registered defense's model .* cannot carry a user's claim"):
        load(tmp_path / "m")
    meta["privacy"]["mechanisms"] = [{"name": "gaussian", "sigma": 1.0}]
    path.write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="records no mechanism"):
        load(tmp_path / "m")


def test_an_edited_declaration_is_refused_on_load(graph, split, tmp_path):
    module = torch.nn.Sequential(
        torch.nn.Linear(graph.num_features, 4), torch.nn.ReLU(), torch.nn.Linear(4, graph.num_classes)
    )
    adapt(module, graph, split=split, privacy=CLAIM, input="features").save(tmp_path / "m")
    path = tmp_path / "m" / "model.json"
    meta = json.loads(path.read_text())
    for layer, message in (
        ({"op": "conv3d", "in": 6, "out": 4}, "unknown stack layer 'conv3d'"),
        ({"op": "linear", "in": 6, "out": 300_000}, "size mismatch|architecture"),
        ({"op": "linear", "in": 6, "out": 4, "code": "import os"}, "takes no options"),
    ):
        edited = json.loads(json.dumps(meta))
        edited["config"]["architecture"]["layers"][0] = layer
        path.write_text(json.dumps(edited))
        with pytest.raises(ModelFormatError, match=message):
            load(tmp_path / "m")


def test_a_module_whose_outputs_are_not_the_declared_classes_is_refused(graph, split):
    """Issue 49 BAD 6: five outputs on a three-class graph answer about classes that do not exist."""
    wide = torch.nn.Linear(graph.num_features, graph.num_classes + 3)
    with pytest.raises(
        ConfigurationError,
        match=rf"returns {graph.num_classes + 3} outputs per node.*declares "
        rf"{graph.num_classes} classes",
    ):
        adapt(wide, graph, split=split, input="features")


def test_logits_passed_as_probabilities_are_refused(graph, split):
    """Issue 49 BAD 7: ``output="proba"`` is checked on the probe forward (non-negative rows summing to 1)."""
    torch.manual_seed(0)
    logits = torch.nn.Linear(graph.num_features, graph.num_classes)
    with pytest.raises(ConfigurationError, match=r"output='proba', but the rows .* are not probabilities"):
        adapt(logits, graph, split=split, input="features", output="proba")
    softmax = torch.nn.Sequential(logits, torch.nn.Softmax(1))
    assert adapt(softmax, graph, split=split, input="features", output="proba").output == "proba"


@pytest.mark.parametrize(
    ("field", "value", "said"), [("epsilon", -1, "epsilon = -1"), ("unit", None, "unit is missing")]
)
def test_a_bad_claim_names_its_field(graph, split, field, value, said):
    """Issue 49 PARTIAL: not the whole dict, the field that is wrong."""
    with pytest.raises(ConfigurationError, match=rf"adapt: privacy claim: {said}") as err:
        adapt(GcnGat(graph.num_features, graph.num_classes), graph, split=split, privacy={**CLAIM, field: value})
    assert "{" not in str(err.value)


def test_save_twice_refuses_without_overwrite(graph, split, tmp_path):
    """Issue 49 BAD 8: the API does not differ from the CLI (which needs --force)."""
    from dpaudit.errors import OutputExistsError

    model = adapt(GcnGat(graph.num_features, graph.num_classes), graph, split=split, privacy=CLAIM)
    model.save(tmp_path / "m")
    before = (tmp_path / "m" / "model.json").read_bytes()
    with pytest.raises(OutputExistsError, match="already holds a released model.*overwrite=True"):
        model.save(tmp_path / "m")
    assert (tmp_path / "m" / "model.json").read_bytes() == before
    model.save(tmp_path / "m", overwrite=True)
    assert load(tmp_path / "m").privacy.epsilon == model.privacy.epsilon
