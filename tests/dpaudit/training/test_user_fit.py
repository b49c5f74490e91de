"""A user's fit(dataset, split) behind the defense interface (issue 39): signature checks, loading
from a file or a module, input detection, and what the function receives and returns."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.nn import GCNConv

from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.training.adapters import USER_STATED, adapt
from dpaudit.training.user_fit import FitFunction, check_fit_function, load_fit_function, module_input

SPLIT = "random:0.5,0.25,0.25"


class GCN(torch.nn.Module):
    def __init__(self, features: int, classes: int):
        super().__init__()
        self.conv = GCNConv(features, classes)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


class Wrapper(torch.nn.Module):
    """Holds its model as ``_module`` and forwards ``*args``, as Opacus' GradSampleModule does."""

    def __init__(self, module):
        super().__init__()
        self._module = module

    def forward(self, *args, **kwargs):
        return self._module(*args, **kwargs)


def test_module_input_reads_the_forward_signature():
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 3))
    assert module_input(GCN(4, 3)) == "graph"
    assert module_input(mlp) == "features"
    assert module_input(Wrapper(GCN(4, 3))) == "graph" and module_input(Wrapper(mlp)) == "features"

    class Opaque(torch.nn.Module):
        def forward(self, *args):
            return args[0]

    assert module_input(Opaque()) is None


def test_fit_signature_is_checked():
    def good(dataset, split):
        return None

    def keyword_split(dataset, split=None, *, verbose=False):
        return None

    assert check_fit_function(good) is good and check_fit_function(keyword_split) is keyword_split
    with pytest.raises(ConfigurationError, match=r"cannot be called as fit\(dataset, split\)"):
        check_fit_function(lambda dataset: None)
    with pytest.raises(ConfigurationError, match=r"cannot be called as fit\(dataset, split\)"):
        check_fit_function(lambda a, b, c: None)
    with pytest.raises(ConfigurationError, match="expected a function"):
        check_fit_function(3)
    with pytest.raises(ConfigurationError, match="expected a function"):
        check_fit_function(GCN)  # a class is callable, but not a fit function


def test_load_fit_function_from_a_file_or_a_module(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(
        "def fit(dataset, split):\n    return 'trained'\nVALUE = 3\ndef one(dataset):\n    return None\n"
    )
    assert load_fit_function(f"{tmp_path / 'train.py'}:fit")(None, None) == "trained"
    monkeypatch.chdir(tmp_path)
    assert load_fit_function("train.py:fit")(None, None) == "trained"
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "training.py").write_text("def fit(dataset, split):\n    return 'module'\n")
    assert load_fit_function("mypkg.training:fit")(None, None) == "module"
    (tmp_path / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    for spec, fragment in [
        ("missing.py:fit", "no such file missing.py"),
        ("train.py:nope", "train.py defines no nope"),
        ("train.py:VALUE", "expected a function"),
        ("train.py:one", "cannot be called as fit(dataset, split)"),
        ("train.py", "expected path/to/file.py:function"),
        ("broken.py:fit", "importing broken.py raised RuntimeError: no GPU here"),
        ("no_such_package.mod:fit", "importing no_such_package.mod raised ModuleNotFoundError"),
    ]:
        with pytest.raises(ConfigurationError, match="--train") as info:
            load_fit_function(spec)
        assert fragment in str(info.value), (spec, str(info.value))


def _train_gcn(dataset, split, epochs=5):
    model = GCN(dataset.num_features, dataset.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    data = dataset.data
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data.x, data.edge_index)[split.train], data.y[split.train]).backward()
        opt.step()
    return model


def test_fit_function_receives_only_the_dataset_and_split_and_states_the_claim(small_graph):
    seen = []

    def fit(*args, **kwargs):
        seen.append((args, kwargs, torch.initial_seed()))
        return _train_gcn(*args)

    split = make_split(small_graph, SPLIT, 0)
    recipe = FitFunction(fit, epsilon=1.0, delta=1e-5, unit="node", seed=7)
    model = recipe.fit(small_graph, split)
    ((args, kwargs, seed),) = seen
    assert args == (small_graph, split) and kwargs == {} and seed == 7  # seeded like every defense
    spec = model.privacy
    assert (spec.epsilon, spec.delta, spec.unit) == (1.0, 1e-5, "node")
    assert spec.sound is False and USER_STATED in spec.unaccounted  # a claim, never a proof
    assert model.card["method"].endswith("fit") and model.input == "graph"
    proba = model.predict_proba(small_graph.data, split.test)
    assert proba.shape == (len(split.test), small_graph.num_classes)
    assert FitFunction(fit, epsilon="inf", unit="edge").fit(small_graph, split).privacy.is_private is False


def test_fit_function_returns_are_checked(small_graph):
    split = make_split(small_graph, SPLIT, 0)

    def adapted(dataset, split):
        return adapt(_train_gcn(dataset, split), dataset, split=split, input="graph")

    def adapted_with_other_claim(dataset, split):
        claim = {"epsilon": 8.0, "delta": 1e-5, "unit": "node"}
        return adapt(_train_gcn(dataset, split), dataset, split=split, privacy=claim)

    model = FitFunction(adapted, epsilon=2.0, delta=1e-5).fit(small_graph, split)
    assert model.privacy.epsilon == 2.0  # the audit's claim replaces the adapted model's absent one
    with pytest.raises(DPAuditError, match="state one claim"):
        FitFunction(adapted_with_other_claim, epsilon=2.0, delta=1e-5).fit(small_graph, split)
    with pytest.raises(DPAuditError, match="returned dict"):
        FitFunction(lambda d, s: {"weights": 1}, epsilon=2.0, delta=1e-5).fit(small_graph, split)

    class Opaque(torch.nn.Module):
        def forward(self, *args):
            return args[0]

    with pytest.raises(ConfigurationError, match="return dpaudit.training.adapters.adapt"):
        FitFunction(lambda d, s: Opaque(), epsilon=2.0, delta=1e-5).fit(small_graph, split)
    with pytest.raises(ConfigurationError, match="unit"):
        FitFunction(adapted, epsilon=2.0, unit="graph")
    assert math.isinf(FitFunction(adapted).epsilon)
