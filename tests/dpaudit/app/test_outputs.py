"""Output paths (issue 26, "writes that destroy or come too late"): every target is probed
before any work, a released model's folder is written only by ``train``, and nothing a
command did not write itself is replaced without ``--force``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dpaudit.app.cli import main
from dpaudit.app.outputs import OutputPathError, check_output_dir, check_output_file, check_report_paths
from dpaudit.errors import ConfigurationError

# A folder no one can create files in, root included (os.access says yes to root there).
UNWRITABLE = Path("/proc/dpaudit-test")
needs_proc = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")


def _one_line_error(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trained") / "model"
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


@pytest.fixture
def model(trained, tmp_path) -> Path:
    """A copy of a released model that a test may (wrongly) write into."""
    return Path(shutil.copytree(trained, tmp_path / "model"))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _no_work(monkeypatch):
    """Make every kind of work fail the test: a refusal must come before any of it."""
    import dpaudit.app.pipeline
    import dpaudit.app.workflows
    import dpaudit.app.workflows.canary

    def work(*args, **kwargs):
        raise AssertionError("work started before the output path was refused")

    monkeypatch.setattr(dpaudit.app.pipeline, "train", work)
    monkeypatch.setattr(dpaudit.app.workflows, "audit", work)
    monkeypatch.setattr(dpaudit.app.workflows.canary, "canary_audit", work)
    monkeypatch.setattr(dpaudit.app.workflows.Study, "run", work)


# --------------------------------------------------------------------------- the cases


def test_attack_never_writes_into_the_released_model(model, capsys):
    before = _snapshot(model)
    for name in ("model.json", "result.json"):
        assert (
            main(
                [
                    "attack",
                    "--model",
                    str(model),
                    "--attack",
                    "mia-threshold",
                    "--set",
                    "n_boot=20",
                    "--out",
                    str(model / name),
                ]
            )
            == 2
        )
        _one_line_error(capsys, "only `dpaudit train` writes")
    assert _snapshot(model) == before
    assert main(["inspect", str(model)]) == 0


def test_audit_refuses_a_foreign_sidecar_before_any_attack(model, tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    (tmp_path / "results.json").write_text('{"mine": true}')
    argv = ["audit", "--model", str(model), "--attacks", "mia-threshold", "--out", str(tmp_path / "results.html")]
    assert main(argv) == 2
    _one_line_error(capsys, "results.json exists and is not an audit report's sidecar")
    assert (tmp_path / "results.json").read_text() == '{"mine": true}'
    assert not (tmp_path / "results.html").exists()


def test_audit_into_the_model_is_refused_before_any_attack(model, monkeypatch, capsys):
    _no_work(monkeypatch)
    before = _snapshot(model)
    assert main(["audit", "--model", str(model), "--attacks", "mia-threshold", "--out", str(model / "model.json")]) == 2
    _one_line_error(capsys, "must not end in .json")
    assert main(["audit", "--model", str(model), "--attacks", "mia-threshold", "--out", str(model / "audit.html")]) == 2
    _one_line_error(capsys, "only `dpaudit train` writes")
    assert _snapshot(model) == before


def test_train_replaces_a_released_model_only_with_force(model, capsys):
    before = _snapshot(model)
    argv = [
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
        str(model),
    ]
    assert main(argv) == 2
    _one_line_error(capsys, "already holds a released model")
    assert _snapshot(model) == before
    assert main([*argv, "--force"]) == 0
    assert json.loads((model / "model.json").read_text())["card"]["method"] == "mlp"


def test_a_study_never_goes_into_a_released_model_even_with_force(model, monkeypatch, capsys):
    _no_work(monkeypatch)
    before = _snapshot(model)
    base = ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "inf", "--attacks", "mia-threshold"]
    for extra in ([], ["--force"]):
        assert main([*base, "--out", str(model), *extra]) == 2
        _one_line_error(capsys, "only `dpaudit train` writes")
        assert main([*base, "--out", str(model / "study"), *extra]) == 2
        _one_line_error(capsys, "only `dpaudit train` writes")
        assert main([*base, "--out", str(model.parent / "s"), "--report", str(model / "r.html"), *extra]) == 2
        _one_line_error(capsys, "only `dpaudit train` writes")
    assert _snapshot(model) == before


@needs_proc
@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--defense", "gcn", "--dataset", "csbm", "--out", "UNWRITABLE/model"],
        ["attack", "--model", "MODEL", "--attack", "mia-threshold", "--out", "UNWRITABLE/x.json"],
        ["audit", "--model", "MODEL", "--attacks", "mia-threshold", "--out", "UNWRITABLE/x.html"],
        [
            "canary",
            "--defense",
            "mlp-dp",
            "--dataset",
            "csbm",
            "--epsilon",
            "1",
            "--kind",
            "node",
            "--out",
            "UNWRITABLE/c.json",
        ],
        [
            "compare",
            "--dataset",
            "csbm",
            "--defenses",
            "gcn",
            "--epsilons",
            "inf",
            "--attacks",
            "mia-threshold",
            "--report",
            "UNWRITABLE/r.html",
            "--out",
            "STUDY",
        ],
        [
            "compare",
            "--dataset",
            "csbm",
            "--defenses",
            "gcn",
            "--epsilons",
            "inf",
            "--attacks",
            "mia-threshold",
            "--out",
            "UNWRITABLE/study",
        ],
        ["report", "STUDY", "--out", "UNWRITABLE/r.html"],
    ],
)
def test_an_unwritable_target_is_one_line_before_any_work(argv, model, tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    study = tmp_path / "study"
    study.mkdir()
    (study / "study.json").write_text("{}")
    paths = {"MODEL": str(model), "STUDY": str(study)}
    argv = [paths.get(a, a.replace("UNWRITABLE", str(UNWRITABLE))) for a in argv]
    assert main(argv) == 2
    _one_line_error(capsys, str(UNWRITABLE))
    assert not UNWRITABLE.exists()


# --------------------------------------------------------------------------- the rules, one by one


def test_the_probe_creates_nothing_it_leaves_behind(tmp_path):
    target = tmp_path / "a" / "b" / "result.json"
    assert check_output_file(target, "attack") == target
    assert not (tmp_path / "a").exists()
    assert check_output_dir(tmp_path / "c" / "study", "study") == tmp_path / "c" / "study"
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_output_of_the_same_kind_is_replaced(tmp_path):
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"attack": "mia-threshold", "auc": 0.5, "settings": {}}))
    check_output_file(result, "attack")
    with pytest.raises(OutputPathError, match="not a canary audit"):
        check_output_file(result, "canary")
    check_output_file(result, "canary", force=True)
    html = tmp_path / "report.html"
    html.write_text('<html><head><meta name="generator" content="dpaudit 1.0"></head></html>')
    (tmp_path / "report.json").write_text(json.dumps({"schema": "dpaudit.report-data", "kind": "audit"}))
    assert check_report_paths(html, "audit") == (html, tmp_path / "report.json")
    with pytest.raises(OutputPathError, match="study report's sidecar"):
        check_report_paths(html, "study")
    html.write_text("<html>my own page</html>")
    with pytest.raises(OutputPathError, match="not a dpaudit report"):
        check_report_paths(html, "audit")


def test_folders(tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    (study / "study.json").write_text("{}")
    check_output_dir(study, "study")  # resumed
    with pytest.raises(OutputPathError, match="already holds a study"):
        check_output_dir(study, "model")
    check_output_dir(study, "model", force=True)
    weights_only = tmp_path / "weights"
    weights_only.mkdir()
    (weights_only / "model.safetensors").write_bytes(b"")
    with pytest.raises(OutputPathError, match="only `dpaudit train` writes"):
        check_output_dir(weights_only, "study", force=True)
    with pytest.raises(OutputPathError, match="only `dpaudit train` writes"):
        check_output_file(weights_only / "notes.json", "attack", force=True)
    with pytest.raises(OutputPathError, match="is a file, not a folder"):
        check_output_file(study / "study.json" / "x.json", "attack")


@pytest.mark.skipif(os.name != "posix", reason="POSIX relative paths")
def test_the_model_folder_rule_sees_through_dot(tmp_path, monkeypatch):
    (tmp_path / "model.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputPathError, match="already holds a released model; .* --force"):
        check_output_dir(".", "model")
    check_output_dir(".", "model", force=True)


def test_attack_ranges_hold_for_the_python_api_too(small_graph):
    """attacks.run checks the same ranges as the CLI, also for settings whose default is None."""
    import attacks
    from dpaudit.data.splits import make_split
    from dpaudit.training.registry import get_defense

    model = get_defense("mlp")(epochs=1).fit(small_graph, make_split(small_graph, "random:0.6,0.2,0.2", 0))
    with pytest.raises(ConfigurationError, match="max_members"):
        attacks.run("mia-threshold", model, small_graph, max_members=-5)
    with pytest.raises(ConfigurationError, match="n_boot"):
        attacks.run("mia-threshold", model, small_graph, n_boot=0)
