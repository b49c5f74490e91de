"""Bad and partial inputs (issue 40): each is one clear line before any work (exit 2), never a
traceback, and nothing of the user's is overwritten."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from dpaudit.app.cli import main


def _one_line_error(capsys, *fragments: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]


def _graph_file(path, num_nodes=200, labeled=None, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(num_nodes) % 2
    if labeled is not None:
        y[labeled:] = -1
    edges = rng.integers(0, num_nodes, (2, 4 * num_nodes))
    np.savez(path, x=rng.standard_normal((num_nodes, 8)).astype(np.float32), y=y, edge_index=edges)
    return path


# --------------------------------------------------------------------------- seeds


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--defense", "gcn", "--dataset", "csbm", "--out", "OUT"],
        ["attack", "--model", "OUT", "--attack", "mia-threshold", "--out", "OUT.json"],
        ["canary", "--defense", "gcn", "--dataset", "csbm", "--out", "OUT.json"],
        ["demo", "--out", "OUT"],
    ],
)
@pytest.mark.parametrize("seed", ["99999999999999999999999", "-1", str(2**31)])
def test_a_seed_out_of_range_is_one_line(argv, seed, tmp_path, capsys):
    argv = [str(tmp_path / "x") + a.removeprefix("OUT") if a.startswith("OUT") else a for a in argv]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--seed", seed])
    assert stop.value.code == 2
    _one_line_error(capsys, "--seed", "[0, 2**31)")
    assert not (tmp_path / "x").exists()


def test_seeds_in_settings_and_options_are_range_checked(tmp_path, capsys):
    big = str(2**64)
    base = ["train", "--defense", "gcn", "--dataset", "csbm", "--out", str(tmp_path / "m")]
    assert main([*base, "--dataset-option", f"seed={big}"]) == 2
    _one_line_error(capsys, "seed=", "[0, 2**31)")
    compare = ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "inf", "--out", str(tmp_path / "s")]
    assert main([*compare, "--attacks", "mia-threshold", "--attack-set", f"seed={big}"]) == 2
    _one_line_error(capsys, "seed", "[0, 2147483648)")
    assert not (tmp_path / "s").exists()


def test_a_defense_refuses_a_seed_torch_cannot_take():
    from dpaudit.errors import ConfigurationError
    from dpaudit.training.registry import get_defense

    with pytest.raises(ConfigurationError, match="seed must be an integer in"):
        get_defense("gcn")(seed=2**70)
    assert get_defense("gcn")(seed=np.int64(3)).seed == 3


# --------------------------------------------------------------------------- files, splits, lists


def test_a_text_file_named_npz_is_said_not_to_be_an_npz_archive(tmp_path, capsys):
    path = tmp_path / "g.npz"
    path.write_text("hello, this is text\n")
    classes = ["--dataset-option", "declare_classes=0,1"]
    assert main(["train", "--defense", "gcn", "--dataset", str(path), *classes, "--out", str(tmp_path / "m")]) == 2
    line = _one_line_error(capsys, "not a numpy .npz archive (not a zip file)")
    assert "unpickle" not in line
    np.save(tmp_path / "a.npy", np.zeros(3))
    (tmp_path / "a.npy").rename(tmp_path / "a.npz")
    assert (
        main(
            ["train", "--defense", "gcn", "--dataset", str(tmp_path / "a.npz"), *classes, "--out", str(tmp_path / "m")]
        )
        == 2
    )
    _one_line_error(capsys, "a single numpy array (.npy), not a .npz archive")
    assert not (tmp_path / "m").exists()


def test_a_split_with_no_test_node_is_refused_before_training(tmp_path, capsys):
    path = _graph_file(tmp_path / "g3.npz", labeled=3)
    assert (
        main(
            [
                "train",
                "--defense",
                "gcn",
                "--dataset",
                str(path),
                "--dataset-option",
                "declare_classes=0,1",
                "--out",
                str(tmp_path / "m"),
            ]
        )
        == 2
    )
    _one_line_error(capsys, "leaves no test node", "only 3 labeled nodes")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("option", ["--attacks", "--defenses", "--epsilons"])
def test_an_empty_list_names_its_option(option, tmp_path, capsys):
    argv = {"--attacks": "mia-threshold", "--defenses": "gcn", "--epsilons": "inf"}
    argv[option] = " , "
    flat = [x for k, v in argv.items() for x in (k, v)]
    assert main(["compare", "--dataset", "csbm", *flat, "--out", str(tmp_path / "s")]) == 2
    _one_line_error(capsys, f"{option} was given an empty list")
    assert not (tmp_path / "s").exists()


def test_audit_empty_attacks_names_the_option(tmp_path, capsys):
    assert (
        main(["audit", "--model", str(tmp_path / "no-model"), "--attacks", "", "--out", str(tmp_path / "a.html")]) == 2
    )
    _one_line_error(capsys, "--attacks was given an empty list")


def test_report_and_no_report_contradict(tmp_path, capsys):
    argv = [
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
        str(tmp_path / "s"),
        "--report",
        str(tmp_path / "r.html"),
        "--no-report",
    ]
    assert main(argv) == 2
    _one_line_error(capsys, "--report and --no-report contradict each other")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "split,fragment", [("garbage", "unknown split 'garbage'"), ("per-class:1000,10,10", "class 0 has only")]
)
def test_compare_checks_its_split_before_the_study_folder_exists(split, fragment, tmp_path, capsys):
    path = _graph_file(tmp_path / "G.npz")
    argv = [
        "compare",
        "--dataset",
        str(path),
        "--dataset-option",
        "declare_classes=0,1",
        "--defenses",
        "gcn",
        "--epsilons",
        "inf",
        "--attacks",
        "mia-threshold",
        "--split",
        split,
        "--out",
        str(tmp_path / "s"),
        "--jobs",
        "1",
    ]
    assert main(argv) == 2
    _one_line_error(capsys, fragment)
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- studies the user made


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    """A finished three-cell study made by `compare` (the user's)."""
    out = tmp_path_factory.mktemp("study") / "s"
    argv = [
        "compare",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=200",
        "--defenses",
        "gcn,mlp,sage",
        "--epsilons",
        "inf",
        "--attacks",
        "mia-threshold",
        "--set",
        "epochs=2",
        "--attack-set",
        "n_boot=50",
        "--jobs",
        "1",
        "--no-report",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return out


def _copy(study, tmp_path):
    import shutil

    target = tmp_path / "demo-out"
    shutil.copytree(study, target)
    return target


def test_demo_refuses_a_folder_holding_another_study(small_study, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _copy(small_study, tmp_path)
    before = {name: (folder / name).read_bytes() for name in ("study.json", "results.jsonl")}
    assert main(["demo", "--jobs", "1"]) == 2
    _one_line_error(capsys, "demo-out holds a study made by `dpaudit compare`, not a demo")
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert not (tmp_path / "demo-report.html").exists()
    # a study written before `made_by` was recorded is told by its command line
    meta = json.loads(before["study.json"])
    del meta["made_by"]
    meta["command"] = "dpaudit compare --dataset csbm --defenses gcn,mlp,sage --epsilons inf --out demo-out"
    (folder / "study.json").write_text(json.dumps(meta))
    assert main(["demo", "--jobs", "1"]) == 2
    _one_line_error(capsys, "made by `dpaudit compare`")


def _damage(folder, how: str) -> None:
    path = folder / "results.jsonl"
    lines = path.read_text().splitlines()
    if how == "banana":
        record = json.loads(lines[1])
        record["epsilon"] = "banana"
        lines[1] = json.dumps(record)
        path.write_text("\n".join(lines) + "\n")
    elif how == "truncated":
        path.write_text("\n".join([*lines[:2], lines[2][:80]]))
    elif how == "corrupted-first":
        lines[0] = lines[0][:40] + "#" + lines[0][41:]
        path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "how,line,reason",
    [
        ("banana", 2, "epsilon 'banana' is not a positive number"),
        ("truncated", 3, "a torn last line (an interrupted write)"),
        ("corrupted-first", 1, "not valid JSON (a corrupted line)"),
    ],
)
def test_report_skips_an_unreadable_line_and_counts_it(how, line, reason, small_study, tmp_path, capsys, caplog):
    from dpaudit.app.workflows.study import StudyResult

    folder = _copy(small_study, tmp_path)
    _damage(folder, how)
    assert main(["report", str(folder), "--out", str(tmp_path / "r.html")]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and f"results.jsonl line {line}: {reason}" in caplog.text
    assert f"2 of 3 cells done, 0 failed, 1 unreadable, 0 not run yet (results.jsonl line {line}: {reason}" in (
        captured.out
    )
    result = StudyResult.load(folder)
    meta = result.report_meta()
    assert meta["cells_planned"] == 3 and meta["cells_unreadable"] == 1
    assert meta["unreadable_lines"][0]["line"] == line
    # the HTML report counts the planned cells and names the unreadable line
    page = (tmp_path / "r.html").read_text()
    assert "of 3 models finished" in page and "1 unreadable</b> (results.jsonl line" in page


def test_a_resumed_study_keeps_its_corrupted_lines_aside(small_study, tmp_path, capsys):
    from dpaudit.app.workflows.store import read_results

    folder = _copy(small_study, tmp_path)
    _damage(folder, "banana")
    damaged = (folder / "results.jsonl").read_text().splitlines()[1]
    argv = [
        "compare",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=200",
        "--defenses",
        "gcn,mlp,sage",
        "--epsilons",
        "inf",
        "--attacks",
        "mia-threshold",
        "--set",
        "epochs=2",
        "--attack-set",
        "n_boot=50",
        "--jobs",
        "1",
        "--no-report",
        "--out",
        str(folder),
    ]
    assert main(argv) == 0  # the same command resumes: the unreadable cell is run again
    assert (folder / "results.unreadable.jsonl").read_text() == damaged + "\n"
    assert len(read_results(folder)) == 3


# --------------------------------------------------------------------------- one writer per --out


@pytest.fixture
def other_process():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _hold_lock(path, pid, command="dpaudit train --out m"):
    import socket

    from dpaudit.app.outputs import lock_path

    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": command, "since": "now"}))
    return lock


def test_a_second_train_to_the_same_out_refuses_naming_the_first(other_process, tmp_path, capsys):
    out = tmp_path / "s03" / "m"
    lock = _hold_lock(out, other_process)
    argv = [
        "train",
        "--defense",
        "gcn",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=100",
        "--set",
        "epochs=1",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    _one_line_error(capsys, f"is being written by process {other_process}", "dpaudit train --out m")
    assert not out.exists() and lock.exists()


def test_a_stale_lock_is_taken_over_and_removed(tmp_path, capsys):
    import subprocess
    import sys

    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    out = tmp_path / "m"
    lock = _hold_lock(out, done.pid)
    argv = [
        "train",
        "--defense",
        "gcn",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=100",
        "--set",
        "epochs=1",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert (out / "model.json").is_file() and not lock.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_second_audit_to_the_same_out_refuses(other_process, tmp_path, capsys):
    report = tmp_path / "same.html"
    _hold_lock(report, other_process, "dpaudit audit --out same.html")
    assert main(["audit", "--model", str(tmp_path / "no-model"), "--out", str(report)]) == 2
    _one_line_error(capsys, f"--out {report} is being written by process {other_process}")
    assert not report.exists()


def test_the_lock_is_exclusive_within_one_process(tmp_path):
    from dpaudit.app.outputs import OutputPathError, output_lock

    with output_lock(tmp_path / "a" / "m") as lock:
        assert lock.is_file() and json.loads(lock.read_text())["pid"] > 0
        with pytest.raises(OutputPathError, match="is being written by process"):
            with output_lock(tmp_path / "a" / "m"):
                pass
    assert not (tmp_path / "a").exists()  # the folder made for the lock goes with it


# --------------------------------------------------------------------------- attack counts and long runs


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "gcn"
    argv = [
        "train",
        "--defense",
        "gcn",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=120",
        "--set",
        "epochs=2",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return out


def test_attack_refuses_a_count_above_its_cap(tiny_model, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["attack", "--model", str(tiny_model), "--attack", "mia-rmia", "--attack-set", "num_references=100000"]
    assert main([*argv, "--out", str(out)]) == 2
    _one_line_error(capsys, "num_references=100000 is above its cap of 256", "--allow-long")
    assert not out.exists()


@pytest.mark.parametrize("setting", ["mia-rmia.num_references=100000", "runs=100000", "linkteller.num_pairs=10**6"])
def test_audit_and_compare_refuse_a_count_above_its_cap(setting, tiny_model, tmp_path, capsys):
    setting = setting.replace("10**6", "1000000")
    out = tmp_path / "a.html"
    argv = ["audit", "--model", str(tiny_model), "--attacks", "mia-rmia,linkteller", "--attack-set", setting]
    assert main([*argv, "--out", str(out)]) == 2
    _one_line_error(capsys, "is above its cap of", "--allow-long")
    assert not out.exists()
    argv = [
        "compare",
        "--dataset",
        "csbm",
        "--defenses",
        "gcn",
        "--epsilons",
        "inf",
        "--attacks",
        "mia-rmia,linkteller",
        "--attack-set",
        setting,
        "--out",
        str(tmp_path / "s"),
    ]
    assert main(argv) == 2
    _one_line_error(capsys, "is above its cap of", "--allow-long")
    assert not (tmp_path / "s").exists()


def test_a_plan_estimated_above_the_limit_is_refused_unless_allow_long(tiny_model, tmp_path, capsys, monkeypatch):
    import importlib

    audit_workflow = importlib.import_module("dpaudit.app.workflows.audit.plan")  # where check_plan_duration looks
    monkeypatch.setattr(audit_workflow, "LONG_RUN_SECONDS", 0.0)  # every plan is "long": the rule, not the clock
    out = tmp_path / "a.html"
    argv = ["audit", "--model", str(tiny_model), "--attacks", "mia-threshold", "--attack-set", "n_boot=50"]
    assert main([*argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "audit plan:" in captured.out and "Traceback" not in captured.err
    error = [line for line in captured.err.splitlines() if line.strip()]
    assert len(error) == 1 and "this would take about" in error[0] and "--allow-long" in error[0]
    assert not out.exists()
    assert main([*argv, "--allow-long", "--out", str(out)]) == 0 and out.is_file()

    result = tmp_path / "r.json"
    argv = ["attack", "--model", str(tiny_model), "--attack", "mia-threshold", "--attack-set", "n_boot=50"]
    assert main([*argv, "--out", str(result)]) == 2
    captured = capsys.readouterr()
    assert "audit plan:" in captured.out
    _one_line_error_text = captured.err.strip().splitlines()
    assert len(_one_line_error_text) == 1 and _one_line_error_text[0].startswith(
        "dpaudit: error: this would take about"
    )
    assert not result.exists()
    assert main([*argv, "--allow-long", "--out", str(result)]) == 0 and result.is_file()


# --------------------------------------------------------------------------- every missing declaration at once


def test_every_missing_declaration_is_said_at_once(tmp_path, capsys):
    path = _graph_file(tmp_path / "G.npz")
    # the label domain is one of them: undeclared, it is said first, with the rest
    assert (
        main(["train", "--defense", "mlp-dp", "--dataset", str(path), "--epsilon", "1", "--out", str(tmp_path / "m")])
        == 2
    )
    _one_line_error(
        capsys, "needs 4 things declared or set", "(1) the label domain is not declared", "(2) --delta auto"
    )
    base = ["--dataset", str(path), "--dataset-option", "declare_classes=0,1", "--epsilon", "1"]
    assert main(["train", "--defense", "mlp-dp", *base, "--out", str(tmp_path / "m")]) == 2
    line = _one_line_error(
        capsys, "needs 3 things declared or set", "(1) --delta auto", "(2) preset=auto", "(3) DP-SGD's Poisson rate"
    )
    assert "declare_num_train=N" in line and "sample_rate=Q" in line
    assert not (tmp_path / "m").exists()
    compare = [
        "compare",
        *base[:4],
        "--defenses",
        "mlp-dp,gap-ndp,gcn",
        "--epsilons",
        "1,inf",
        "--attacks",
        "mia-threshold",
        "--out",
        str(tmp_path / "s"),
    ]
    assert main(compare) == 2
    _one_line_error(capsys, "needs 4 things declared or set", "(1) --delta auto", "gap-ndp's DP-SGD Poisson rate")
    assert not (tmp_path / "s").exists()
    # declaring the training-set size answers the defenses' needs; δ alone is then left
    declared = ["--dataset-option", "declare_num_train=150"]
    assert main(["train", "--defense", "mlp-dp", *base, *declared, "--out", str(tmp_path / "m")]) == 2
    _one_line_error(capsys, "pass --delta D (below 1/its nodes)")


# --------------------------------------------------------------------------- issue 49: BAD 1–5


def test_a_delta_not_below_one_over_n_is_refused_unless_forced(tmp_path, capsys):
    """BAD 1: δ ≥ 1/n guarantees nothing (publishing one node in the clear is (0, 1/n)-DP)."""
    base = [
        "train",
        "--defense",
        "mlp-dp",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=200",
        "--epsilon",
        "4",
        "--set",
        "epochs=1",
        "--out",
        str(tmp_path / "m"),
    ]
    assert main([*base, "--delta", "0.5"]) == 2
    _one_line_error(capsys, "delta 0.5 is not below 1/n = 1/200", "--force-delta")
    assert not (tmp_path / "m").exists()
    assert main([*base, "--delta", "0.5", "--force-delta"]) == 0
    assert json.loads((tmp_path / "m" / "model.json").read_text())["privacy"]["delta"] == 0.5


def test_a_negative_label_other_than_minus_one_is_refused(tmp_path, capsys):
    """BAD 2: −1 marks an unlabeled node; −5 is a mistake, never silently unlabeled."""
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    y[:3] = -5
    np.savez(
        tmp_path / "g.npz",
        x=rng.standard_normal((300, 8)).astype(np.float32),
        y=y,
        edge_index=rng.integers(0, 300, (2, 1200)),
    )
    argv = [
        "train",
        "--defense",
        "gcn",
        "--dataset",
        str(tmp_path / "g.npz"),
        "--dataset-option",
        "declare_classes=3",
        "--set",
        "epochs=1",
        "--out",
        str(tmp_path / "m"),
    ]
    assert main(argv) == 2
    _one_line_error(capsys, "3 node(s) have a negative label other than -1 (-5)")
    assert not (tmp_path / "m").exists()


def test_edited_public_facts_are_refused_on_inspect(tiny_model, tmp_path, capsys):
    """BAD 3: declared facts consistent with each other and with the card's declaration."""
    import shutil

    edited = tmp_path / "m"
    shutil.copytree(tiny_model, edited)
    meta = json.loads((edited / "model.json").read_text())
    facts = meta["privacy"]["public_facts"] or meta["card"]["dataset"]["public_facts"]
    meta["privacy"]["public_facts"] = {**facts, "num_nodes": 10}
    (edited / "model.json").write_text(json.dumps(meta))
    assert main(["inspect", str(edited)]) == 2
    _one_line_error(capsys, "model.json", "num_nodes")


def test_compare_refuses_a_non_private_defense_at_a_finite_epsilon(tmp_path, capsys):
    """BAD 4: the rule train applies (``Defense.check_epsilon``), from the same place."""
    argv = ["compare", "--dataset", "csbm", "--defenses", "gcn", "--epsilons", "1", "--out", str(tmp_path / "s")]
    assert main(argv) == 2
    _one_line_error(capsys, "gcn is not a private defense; its epsilon must be inf")
    assert not (tmp_path / "s").exists()


def test_compare_caps_its_seeds(tmp_path, capsys):
    """BAD 5: a cap, said before anything is written or imported."""
    argv = [
        "compare",
        "--dataset",
        "csbm",
        "--defenses",
        "gcn",
        "--epsilons",
        "inf",
        "--seeds",
        "1000000",
        "--out",
        str(tmp_path / "s"),
    ]
    assert main(argv) == 2
    _one_line_error(capsys, "--seeds 1000000 is above its cap of 100", "--allow-long")
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- issue 49: PARTIAL


def test_an_audit_of_the_public_files_says_why_once_up_front(tiny_model, tmp_path, capsys, caplog):
    import shutil

    public = tmp_path / "public"
    public.mkdir()
    for name in ("model.json", "model.safetensors"):
        shutil.copy(tiny_model / name, public / name)
    argv = [
        "audit",
        "--model",
        str(public),
        "--attacks",
        "mia-threshold",
        "--attack-set",
        "n_boot=50",
        "--out",
        str(tmp_path / "a.html"),
    ]
    with caplog.at_level(logging.WARNING, logger="dpaudit"):
        assert main(argv) == 0
    err = capsys.readouterr().err
    said = [r.getMessage() for r in caplog.records if "owner's record" in r.getMessage()]
    said += [line for line in err.splitlines() if "owner's record" in line]  # where no handler captures it
    assert len(said) == 1 and "claim will not be tested" in said[0], (err, caplog.text)
    assert "adapted model" not in err + caplog.text


def test_to_html_probes_its_location_before_rendering(small_study):
    import time

    from dpaudit.app.outputs import OutputPathError
    from dpaudit.app.workflows.study import StudyResult

    result = StudyResult.load(small_study)
    began = time.perf_counter()
    with pytest.raises(OutputPathError, match="to_html"):
        result.to_html("/proc/x.html")
    assert time.perf_counter() - began < 5  # the probe, not 20 s of rendering first


def test_canaries_that_cannot_fit_in_memory_are_refused_before_work(tmp_path, capsys):
    argv = [
        "canary",
        "--defense",
        "gcn",
        "--dataset",
        "csbm",
        "--dataset-option",
        "num_nodes=200",
        "--kind",
        "node",
        "--canaries",
        "100000000000",
        "--out",
        str(tmp_path / "c.json"),
    ]
    assert main(argv) == 2
    _one_line_error(capsys, "--canaries 100000000000", "GiB", "lower --canaries")
    assert not (tmp_path / "c.json").exists()
