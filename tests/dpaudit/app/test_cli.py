"""The CLI: train → inspect round trip, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dpaudit.app.cli import main


def test_train_and_inspect(tmp_path, capsys):
    out = tmp_path / "model"
    code = main(
        [
            "train",
            "--defense",
            "mlp-dp",
            "--dataset",
            "csbm",
            "--epsilon",
            "4",
            "--seed",
            "1",
            "--split",
            "random:0.6,0.2,0.2",
            "--set",
            "epochs=3",
            "--set",
            "hidden=16",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("defense", "dataset", "seed", "test_accuracy", "train_accuracy", "train_seconds", "privacy"):
        assert key in metrics
    assert metrics["privacy"]["epsilon"] <= 4 and metrics["privacy"]["unit"] == "node" and metrics["privacy"]["sound"]
    card = json.loads((out / "model.json").read_text())["card"]
    assert card["hyperparameters"]["hidden"] == 16 and card["split"]["spec"] == "random:0.6,0.2,0.2"
    assert main(["inspect", str(out)]) == 0
    assert "mlp-dp" in capsys.readouterr().out


def test_defense_help_lists_hyperparameters(capsys):
    assert main(["train", "--defense", "mlp-dp", "--help"]) == 0
    out = capsys.readouterr().out
    assert "max_grad_norm" in out and "batch_size" in out


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["train", "--defense", "nope", "--dataset", "csbm", "--out", "x"], "unknown defense"),
        (["train", "--defense", "gcn", "--dataset", "nope", "--out", "x"], "unknown dataset"),
        (["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "0", "--out", "x"], "epsilon"),
        (
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "1", "--delta", "1.5", "--out", "x"],
            "delta",
        ),
        (
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--set", "bogus=1", "--out", "x"],
            "unknown hyperparameter",
        ),
        (["train", "--defense", "mlp-dp", "--dataset", "csbm", "--set", "epochs=many", "--out", "x"], "epochs"),
        (["train", "--defense", "gcn", "--dataset", "csbm", "--split", "sideways", "--out", "x"], "unknown split"),
        (["inspect", "/definitely/not/here"], "not a released-model directory"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(argv, fragment, tmp_path, capsys):
    argv = [a if a != "x" else str(tmp_path / "x") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err


def test_console_script_error_contract(tmp_path):
    """End to end through a fresh interpreter: one line on stderr, exit status 2."""
    argv = ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "-3", "--out", str(tmp_path / "m")]
    proc = subprocess.run([sys.executable, "-m", "dpaudit.app.cli", *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "epsilon" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "dpaudit.app.cli", "train", "--bogus"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_datasets_command(capsys, data_root):
    assert main(["datasets", "--data-root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert "csbm" in out and "cora_ml" in out


# --------------------------------------------------------------------------- checked before any work


def _one_line_error(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["train", "--defense", "gcn", "--dataset", "csbm", "--set", "epochs=-5", "--out", "NEW"], "epochs=-5"),
        (
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "1", "--set", "lr=0", "--out", "NEW"],
            "lr=0.0",
        ),
        (
            [
                "train",
                "--defense",
                "mlp-dp",
                "--dataset",
                "csbm",
                "--epsilon",
                "1",
                "--set",
                "dropout=1.5",
                "--out",
                "NEW",
            ],
            "dropout",
        ),
        (["train", "--defense", "gcn", "--dataset", "csbm", "--out", "FILE"], "existing file"),
        (["train", "--defense", "gcn", "--dataset", "csbm", "--out", "FOREIGN"], "already holds other files"),
        (["attack", "--model", "/not/here", "--attack", "mia-threshold", "--out", "DIR"], "is a directory"),
        (
            ["attack", "--model", "/not/here", "--attack", "mia-tstf", "--set", "runs=abc", "--out", "NEW"],
            "runs='abc' must be an integer",
        ),
        (["audit", "--model", "/not/here", "--out", "DIR"], "is a directory"),
        (["report", "STUDY", "--out", "DIR"], "is a directory"),
        (["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "inf", "--out", "FILE"], "existing file"),
        (
            ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "inf", "--out", "MODEL"],
            "already holds a released model",
        ),
        (
            [
                "compare",
                "--dataset",
                "csbm",
                "--defenses",
                "gcn",
                "--epsilons",
                "inf",
                "--dataset-option",
                "num_nodez=50",
                "--out",
                "NEW",
            ],
            "unknown csbm options",
        ),
    ],
)
def test_bad_input_is_refused_before_work(argv, fragment, tmp_path, capsys):
    paths = {
        "NEW": tmp_path / "new",
        "FILE": tmp_path / "file.txt",
        "DIR": tmp_path / "dir",
        "FOREIGN": tmp_path / "foreign",
        "MODEL": tmp_path / "model",
        "STUDY": tmp_path / "study",
    }
    paths["FILE"].write_text("keep me")
    paths["DIR"].mkdir()
    paths["FOREIGN"].mkdir()
    (paths["FOREIGN"] / "notes.txt").write_text("mine")
    paths["MODEL"].mkdir()
    (paths["MODEL"] / "model.json").write_text("{}")
    assert main([str(paths.get(a, a)) for a in argv]) == 2
    _one_line_error(capsys, fragment)
    assert paths["FILE"].read_text() == "keep me" and (paths["FOREIGN"] / "notes.txt").read_text() == "mine"
    assert not paths["NEW"].exists()


def test_train_help_without_defense_prints_usage(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--defense" in out and "mlp-dp" in out and "gcn" in out


def test_outputs_are_world_readable(tmp_path):
    out = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--defense",
                "mlp",
                "--dataset",
                "csbm",
                "--set",
                "epochs=2",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    for name in ("model.json", "model.safetensors", "metrics.json"):
        assert (out / name).stat().st_mode & 0o044 == 0o044, name


def test_compare_refuses_a_study_with_another_configuration(tmp_path, capsys):
    base = [
        "compare",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=120",
        "--defenses",
        "mlp",
        "--attacks",
        "mia-threshold",
        "--set",
        "epochs=2",
        "--no-report",
        "--out",
        str(tmp_path / "s"),
    ]
    assert main([*base, "--epsilons", "inf"]) == 0
    before = (tmp_path / "s" / "study.json").read_text()
    capsys.readouterr()
    assert main([*base, "--epsilons", "inf", "--seeds", "2"]) == 2
    _one_line_error(capsys, "another configuration")
    assert (tmp_path / "s" / "study.json").read_text() == before


def test_attack_help_lists_every_attack_setting(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["attack", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "mia-tstf:" in out and "runs=" in out and "shadow_nodes_per_class=" in out
    assert "link-steal:" in out and "max_pairs=" in out and "--attack-set" in out


# --------------------------------------------------------------------------- values that pass validation and shouldn't


@pytest.fixture(scope="module")
def gcn_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "gcn"
    assert (
        main(
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                "csbm",
                "--set",
                "epochs=2",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--set", "hidden=2000000000", "--out", "NEW"],
            "hidden=2000000000 must be <= 65536",
        ),
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--set", "hidden=1000000", "--out", "NEW"],
            "hidden=1000000 must be <= 65536",
        ),
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--set", "weight_decay=-1", "--out", "NEW"],
            "weight_decay=-1.0 must be >= 0",
        ),
        (
            ["train", "--defense", "gap-edp", "--dataset", "csbm", "--epsilon", "1e-9", "--out", "NEW"],
            "--epsilon 1e-09 is below 1e-06",
        ),
        (
            ["train", "--defense", "mlp-dp", "--dataset", "csbm", "--epsilon", "1e-9", "--out", "NEW"],
            "--epsilon 1e-09 is below 1e-06",
        ),
        (
            [
                "canary",
                "--defense",
                "mlp-dp",
                "--dataset",
                "csbm",
                "--epsilon",
                "1e-9",
                "--kind",
                "node",
                "--out",
                "NEW",
            ],
            "--epsilon 1e-09 is below 1e-06",
        ),
        (
            ["compare", "--dataset", "csbm", "--defenses", "gap-edp", "--epsilons", "1,1e-9", "--out", "NEW"],
            "--epsilons 1e-09 is below 1e-06",
        ),
        (
            [
                "compare",
                "--dataset",
                "csbm",
                "--defenses",
                "gcn",
                "--epsilons",
                "inf",
                "--set",
                "hidden=1000000",
                "--out",
                "NEW",
            ],
            "hidden=1000000 must be <= 65536",
        ),
        (
            ["attack", "--model", "MODEL", "--attack", "mia-threshold", "--set", "n_boot=0", "--out", "NEW"],
            "n_boot=0 must be >= 1",
        ),
        (
            ["attack", "--model", "MODEL", "--attack", "mia-threshold", "--set", "max_members=-5", "--out", "NEW"],
            "max_members=-5 must be >= 1",
        ),
        (
            ["attack", "--model", "MODEL", "--attack", "mia-tstf", "--set", "hidden=1000000", "--out", "NEW"],
            "hidden=1000000 must be <= 65536",
        ),
        (
            ["attack", "--model", "MODEL", "--attack", "link-steal", "--set", "known_fraction=1.5", "--out", "NEW"],
            "known_fraction=1.5 must be < 1 (float in (0, 1))",
        ),
        (["audit", "--model", "MODEL", "--attack-set", "n_boot=0", "--out", "NEW"], "n_boot=0 must be"),
        (
            ["audit", "--model", "MODEL", "--attack-set", "mia-threshold.max_members=-5", "--out", "NEW"],
            "max_members=-5 must be",
        ),
        (
            [
                "compare",
                "--dataset",
                "csbm",
                "--defenses",
                "gcn",
                "--epsilons",
                "inf",
                "--attack-set",
                "n_boot=0",
                "--out",
                "NEW",
            ],
            "n_boot=0 must be",
        ),
    ],
)
def test_out_of_range_values_are_refused_before_work(argv, fragment, gcn_model, tmp_path, capsys):
    paths = {"NEW": str(tmp_path / "new"), "MODEL": str(gcn_model)}
    argv = [paths.get(a, a) for a in argv]
    if argv[0] == "audit":
        argv[-1] += ".html"
    assert main(argv) == 2
    _one_line_error(capsys, fragment)
    assert list(tmp_path.iterdir()) == []


def test_widths_must_fit_the_device_memory(tmp_path, monkeypatch, capsys):
    import dpaudit.runtime

    monkeypatch.setattr(dpaudit.runtime, "device_memory", lambda device: 2**20)
    base = ["--defense", "gcn", "--dataset", "csbm", "--set", "hidden=4096", "--device", "cpu"]
    assert main(["train", *base, "--out", str(tmp_path / "m")]) == 2
    _one_line_error(capsys, "hidden=4096 needs at least 0.0162 GiB")
    assert main(["canary", *base, "--kind", "edge", "--epsilon", "inf", "--out", str(tmp_path / "c.json")]) == 2
    _one_line_error(capsys, "the device has 0.000977 GiB")
    assert list(tmp_path.iterdir()) == []


def test_adapt_refuses_a_module_that_cannot_take_the_graph():
    import torch

    from dpaudit.data.datasets import load_dataset
    from dpaudit.errors import ConfigurationError
    from dpaudit.training.adapters import adapt

    ds = load_dataset("csbm", num_nodes=60, num_features=4, seed=0)
    train = torch.arange(30)
    with pytest.raises(ConfigurationError, match=r"module\(x, edge_index\) fails on csbm .*TypeError"):
        adapt(torch.nn.Linear(4, 2), ds, train_nodes=train, input="graph")
    with pytest.raises(ConfigurationError, match=r"module\(x\) fails on csbm \(60 nodes, 4 features\)"):
        adapt(torch.nn.Linear(8, 2), ds, train_nodes=train, input="features")
    assert adapt(torch.nn.Linear(4, ds.num_classes), ds, train_nodes=train, input="features").kind == "adapted"


# --------------------------------------------------------------------------- --dataset-option, help texts


def test_dataset_options_size_csbm_and_audit_regenerates_the_same_graph(tmp_path, capsys):
    model = tmp_path / "m"
    assert (
        main(
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                "csbm",
                "--dataset-option",
                "num_nodes=150",
                "--dataset-option",
                "avg_degree=5",
                "--split",
                "random:0.5,0.2,0.3",
                "--set",
                "epochs=2",
                "--device",
                "cpu",
                "--out",
                str(model),
            ]
        )
        == 0
    )
    card = json.loads((model / "model.json").read_text())["card"]["dataset"]
    assert card["parameters"]["num_nodes"] == 150 and card["parameters"]["avg_degree"] == 5.0
    assert json.loads((model / "provenance.json").read_text())["dataset"]["num_nodes"] == 150
    audit = ["audit", "--model", str(model), "--attacks", "mia-threshold", "--attack-set", "n_boot=50"]
    capsys.readouterr()
    assert main([*audit, "--out", str(tmp_path / "a.html")]) == 0  # regenerated from the card
    assert "on csbm" in capsys.readouterr().out
    given = [*audit, "--dataset", "csbm", "--dataset-option"]
    assert main([*given, "num_nodes=150", "--out", str(tmp_path / "b.html")]) == 0  # given again: the same
    capsys.readouterr()
    assert main([*given, "num_nodes=160", "--out", str(tmp_path / "c.html")]) == 2
    _one_line_error(capsys, "not the same graph")


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--dataset-option", "nodes=5", "--out", "NEW"],
            "unknown csbm options ['nodes']; known: num_nodes, num_classes, num_features, avg_degree",
        ),
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--dataset-option", "num_nodes=1e12", "--out", "NEW"],
            "needs about",
        ),
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--dataset-option", "homophily=nan", "--out", "NEW"],
            "homophily=nan must be a finite number",
        ),
        (
            ["train", "--defense", "gcn", "--dataset", "csbm", "--dataset-option", "num_nodes", "--out", "NEW"],
            "--dataset-option expects KEY=VALUE",
        ),
        (
            [
                "canary",
                "--defense",
                "gcn",
                "--dataset",
                "csbm",
                "--kind",
                "edge",
                "--dataset-option",
                "nodes=5",
                "--out",
                "NEW",
            ],
            "unknown csbm options ['nodes']; known: num_nodes",
        ),
        (
            ["audit", "--model", "MODEL", "--dataset", "csbm", "--dataset-option", "nodes=5", "--out", "NEW"],
            "unknown csbm options ['nodes']; known: num_nodes",
        ),
        (
            [
                "compare",
                "--dataset",
                "csbm",
                "--defenses",
                "gcn",
                "--epsilons",
                "inf",
                "--dataset-option",
                "nodes=5",
                "--out",
                "NEW",
            ],
            "unknown csbm options ['nodes']; known: num_nodes",
        ),
    ],
)
def test_unknown_dataset_options_list_the_known_ones_before_work(argv, fragment, gcn_model, tmp_path, capsys):
    paths = {"NEW": str(tmp_path / "new"), "MODEL": str(gcn_model)}
    argv = [paths.get(a, a) for a in argv]
    if argv[0] in ("audit", "canary"):
        argv[-1] += ".html" if argv[0] == "audit" else ".json"
    assert main(argv) == 2
    _one_line_error(capsys, fragment)
    assert list(tmp_path.iterdir()) == []


def test_canary_of_a_non_private_defense_needs_no_epsilon(monkeypatch, tmp_path, capsys):
    import dpaudit.app.workflows.canary

    seen = {}

    def fake_canary_audit(defense, dataset, epsilon, **kwargs):
        seen.update(defense=defense, epsilon=epsilon, nodes=dataset.num_nodes)
        return {}

    monkeypatch.setattr(dpaudit.app.workflows.canary, "canary_audit", fake_canary_audit)
    monkeypatch.setattr(dpaudit.app.workflows.canary, "summary_lines", lambda result: [])
    base = ["canary", "--dataset", "csbm", "--dataset-option", "num_nodes=120", "--kind", "edge"]
    assert main([*base, "--defense", "gap-inf", "--out", str(tmp_path / "c.json")]) == 0
    assert seen == {"defense": "gap-inf", "epsilon": "inf", "nodes": 120}
    assert main([*base, "--defense", "gap-edp", "--out", str(tmp_path / "d.json")]) == 2
    _one_line_error(capsys, "canary needs --epsilon (the target ε of gap-edp)")


def test_attack_help_names_every_registered_attack(capsys):
    import attacks
    from dpaudit.app.names import builtin_attacks

    assert list(builtin_attacks()) == attacks.available_attacks()
    with pytest.raises(SystemExit):
        main(["attack", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(f"{name} |" in help_text or f"| {name}" in help_text for name in builtin_attacks())


@pytest.mark.parametrize("command", ["train", "canary", "compare"])
def test_split_help_names_every_split_kind(command, capsys):
    from dpaudit.data.splits import SPLIT_KINDS

    if command == "train":
        assert main(["train", "--help"]) == 0
    else:
        with pytest.raises(SystemExit):
            main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f"{kind}:" in text or f"{kind} |" in text for kind in SPLIT_KINDS) and "metis:K" in text
    assert "--dataset-option" in text


def test_builtin_names_are_the_registries():
    """The names the command line checks before importing torch (dpaudit.app.names, read from the
    packages' source) are exactly the registered defenses and attacks."""
    import attacks
    from dpaudit.app.names import BUILTIN_PLUGINS, builtin_attacks, builtin_defenses
    from dpaudit.training.registry import available_defenses, get_defense

    # the distribution's own: defenses other test modules register in-process (broken variants,
    # the zoo's) are not built in
    shipped = [n for n in available_defenses() if get_defense(n).__module__.split(".")[0] == "defenses"]
    assert list(builtin_defenses()) == shipped
    own = [n for n in attacks.available_attacks() if attacks.get_attack(n).__module__.split(".")[0] == "attacks"]
    assert list(builtin_attacks()) == own
    assert set(BUILTIN_PLUGINS) == {"defenses", "attacks"}


def test_declarations_read_from_source_are_the_registries():
    """The privacy units and attack settings the command line reads from the sources, to refuse
    before torch is imported (dpaudit.app.names), are each registered class's and function's own."""
    import attacks
    from dpaudit.app.names import builtin_attack_settings, builtin_units
    from dpaudit.training.registry import available_defenses, get_defense

    shipped = [n for n in available_defenses() if get_defense(n).__module__.split(".")[0] == "defenses"]
    assert builtin_units() == {n: get_defense(n).unit for n in shipped}
    own = [n for n in attacks.available_attacks() if attacks.get_attack(n).__module__.split(".")[0] == "attacks"]
    assert builtin_attack_settings() == {n: tuple(attacks.attack_settings(n)) for n in own}


def test_unknown_names_are_refused_before_torch_is_imported(tmp_path):
    """An unknown defense or attack is refused (exit 2, one line) before torch or PyG is imported,
    in every command that takes one (asserted on sys.modules in a fresh interpreter, not timed:
    benchmarks/bench_cli_latency.py measures how fast)."""
    out = str(tmp_path / "x")
    commands = [
        ["train", "--defense", "no-such", "--dataset", "cora", "--out", out],
        ["compare", "--dataset", "csbm", "--defenses", "gcn,no-such", "--epsilons", "inf", "--out", out],
        ["compare", "--dataset", "csbm", "--defenses", "gcn", "--attacks", "nope", "--epsilons", "inf", "--out", out],
        ["audit", "--model", out, "--attacks", "mia-rmia,nope", "--out", out + ".html"],
        ["attack", "--model", out, "--attack", "nope", "--out", out + ".json"],
        ["canary", "--defense", "no-such", "--dataset", "csbm", "--kind", "node", "--out", out + ".json"],
    ]
    script = (
        "import json, sys\n"
        "from dpaudit.app.cli import main\n"
        "codes = [main(argv) for argv in json.loads(sys.argv[1])]\n"
        "heavy = sorted(m for m in ('torch', 'torch_geometric', 'opacus') if m in sys.modules)\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(commands)], capture_output=True, text=True, timeout=300
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"codes": [2] * len(commands), "heavy": []}, proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == len(commands) and all(e.startswith("dpaudit: error: unknown ") for e in errors), errors


def test_train_parses_epsilon_once_and_metrics_read_the_card(tmp_path, monkeypatch):
    """``--epsilon`` is parsed and checked once, when the command builds the defense;
    pipeline.train trains that very defense, and metrics.json's target is the card's."""
    import dpaudit.training.defense as defense_module

    calls = []
    original = defense_module.validate_epsilon
    monkeypatch.setattr(defense_module, "validate_epsilon", lambda value: calls.append(value) or original(value))
    out = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--defense",
                "mlp-dp",
                "--dataset",
                "csbm",
                "--epsilon",
                "4",
                "--set",
                "epochs=2",
                "--set",
                "hidden=8",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    # the text is parsed once; saving re-derives the plan from the card's float (a check, not a parse)
    assert [c for c in calls if isinstance(c, str)] == ["4"]
    metrics = json.loads((out / "metrics.json").read_text())
    card = json.loads((out / "model.json").read_text())["card"]
    assert metrics["privacy"]["target_epsilon"] == card["target_epsilon"] == 4.0
