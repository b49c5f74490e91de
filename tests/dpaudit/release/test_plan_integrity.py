"""Integrity that re-plans: a saved model's recorded mechanisms must be the ones its defense's
plan gives for the card's own public inputs (hyperparameters, protocol, target ε, δ, declared
facts), so an edit of a subset of fields that keeps the accountant's arithmetic consistent is
refused on load and by ``dpaudit inspect`` (one line, exit 2).

Each edit below passes the arithmetic check alone (the model kind's ``verify_privacy``, what
``load`` did before plans were re-derived): the tests assert that first, so they fail on a
loader that does not re-plan.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass

import pytest
from editing import edited_copy

import dpaudit.training.dpsgd.planning as dpsgd_planning
from dpaudit.accounting import PrivacySpec, amplify_by_subsampling
from dpaudit.accounting.verify import recompute
from dpaudit.app.cli import main
from dpaudit.data.splits import make_split
from dpaudit.errors import IntegrityError
from dpaudit.release.model import load, model_kind
from dpaudit.training.registry import get_defense

DPAR_FAST = {"epochs": 2, "num_sources": 20, "batch_size": 10, "node_sample_rate": 0.5}
MODELS = {
    # the schedule: 30 epochs × ⌈180 / 23⌉ = 8 steps = 240 steps
    "mlp-dp-sound": ("mlp-dp", {"epochs": 30, "batch_size": 23}),
    "mlp-dp-paper": ("mlp-dp", {"epochs": 6, "protocol": "paper"}),
    "dpar-em1-sound": ("dpar-em1", DPAR_FAST),
    "dpar-gm-paper": ("dpar-gm", {**DPAR_FAST, "protocol": "paper"}),
}


@pytest.fixture(scope="module")
def saved(small_graph, tmp_path_factory):
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    root = tmp_path_factory.mktemp("plans")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, (name, hp) in MODELS.items():
            get_defense(name)(epsilon=4.0, delta=1e-4, seed=0, **hp).fit(small_graph, split).save(root / key)
            out[key] = root / key
    return out


def _edited(src, dst, edit):
    return edited_copy(src, dst, edit)


def _reaccount(meta) -> None:
    """Make the stated ε (and every listed analysis) what the edited records prove."""
    p = meta["privacy"]
    values, mu = recompute(p["mechanisms"], p["delta"], p["accounting"], set(p["epsilon_by_accountant"]))
    p["epsilon"] = min(values.values())
    p["epsilon_by_accountant"] = values
    p["accounting"]["analysis"] = min(values, key=values.get)
    p["gdp_mu"] = mu


def _arithmetic_alone_accepts(directory) -> bool:
    """Whether the edit is consistent: the accountant's recomputation from the records agrees."""
    meta = json.loads((directory / "model.json").read_text())
    cls = model_kind(meta["kind"])
    check = cls.verify_privacy(PrivacySpec.from_dict(meta["privacy"]), meta["config"], meta["card"])
    return check.status == "recomputed" and "matches" in check.summary


@dataclass
class Refusal:
    """How ``load`` and ``dpaudit inspect`` answered an edited file."""

    load_error: str  # the IntegrityError's message ("" when load accepted the file)
    cli_exit: int
    cli_err_lines: list[str]
    cli_out: str

    def is_one_line_plan_refusal(self, match: str) -> bool:
        return (
            re.search(match, self.load_error) is not None
            and self.cli_exit == 2
            and len(self.cli_err_lines) == 1
            and self.cli_err_lines[0].startswith("dpaudit: error:")
            and "plan" in self.cli_err_lines[0]
            and self.cli_out == ""
        )


def _refusal(directory, capsys) -> Refusal:
    try:
        load(directory)
        message = ""
    except IntegrityError as exc:
        message = str(exc)
    capsys.readouterr()
    code = main(["inspect", str(directory)])
    captured = capsys.readouterr()
    return Refusal(message, code, captured.err.strip().splitlines(), captured.out)


# ----------------------------------------------------------------------------- unmodified models


@pytest.mark.parametrize("key", list(MODELS))
def test_unmodified_models_load_and_are_replanned_without_a_calibration(saved, key, monkeypatch):
    """The plan is re-derived on every load; the recorded σ meets the calibration's contract, so
    no calibration runs (two ε evaluations instead of a search: see noise_for_plan)."""

    def no_calibration(*args, **kwargs):
        raise AssertionError("load re-calibrated an unmodified model's noise")

    monkeypatch.setattr(dpsgd_planning, "calibrate_noise", no_calibration)
    model = load(saved[key])  # no calibration ran (the patched one raises): the property, not a clock
    assert model.verification.status == "recomputed"
    assert any("re-derived" in item for item in model.verification.checked), model.verification


# ----------------------------------------------------------------------------- the three edits


def test_epsilon_edited_with_sigma_is_refused(saved, tmp_path, capsys):
    """(a) σ raised and ε recomputed for it, in the spec and in the card's plan: the accountant
    agrees, but the card's target ε and schedule plan another σ."""

    def edit(meta):
        meta["privacy"]["mechanisms"][0]["sigma"] *= 1.5
        meta["card"]["mlp_dp"]["noise_multiplier"] *= 1.5
        _reaccount(meta)

    bad = _edited(saved["mlp-dp-sound"], tmp_path / "sigma", edit)
    assert _arithmetic_alone_accepts(bad)
    assert json.loads((bad / "model.json").read_text())["privacy"]["epsilon"] < 3.0
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("sigma|noise_multiplier"), refusal


def test_epsilon_edited_with_steps_is_refused(saved, tmp_path, capsys):
    """(b) a tenth of the steps (the issue's 24 against 240) with ε recomputed for them."""

    def edit(meta):
        planned = meta["privacy"]["mechanisms"][0]["steps"]
        assert planned == 240
        meta["privacy"]["mechanisms"][0]["steps"] = planned // 10
        meta["card"]["mlp_dp"]["steps"] = planned // 10
        _reaccount(meta)

    bad = _edited(saved["mlp-dp-sound"], tmp_path / "steps", edit)
    assert _arithmetic_alone_accepts(bad)
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("steps"), refusal


PROTOCOL_RELABEL = "privacy.sound, privacy.protocol, privacy.unaccounted, card.protocol, card.hyperparameters.protocol"


def _relabel_sound(meta) -> None:
    """The five fields that name the protocol, edited consistently from paper to sound."""
    meta["privacy"]["sound"] = True
    meta["privacy"]["protocol"] = "sound"
    meta["privacy"]["unaccounted"] = []
    meta["card"]["protocol"] = "sound"
    meta["card"]["hyperparameters"]["protocol"] = "sound"


def test_paper_model_relabelled_sound_is_refused(saved, tmp_path, capsys):
    """(c) the relabel leaves the plan's released iterate (the best-validation checkpoint of
    protocol=paper) in the card: the sound plan releases the last iterate."""
    bad = _edited(saved["mlp-dp-paper"], tmp_path / "relabel", _relabel_sound)
    assert _arithmetic_alone_accepts(bad)
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("checkpoint"), refusal


def test_what_the_plan_check_does_not_promise(saved, tmp_path):
    """Not a signature: a relabel that also rewrites the plan's checkpoint field is a file
    consistent with a sound plan, and loads. (The weights still came from the best-validation
    epoch; only a signed release could tie them to the plan.)"""

    def edit(meta):
        _relabel_sound(meta)
        meta["card"]["mlp_dp"]["checkpoint"] = "last iterate"

    model = load(_edited(saved["mlp-dp-paper"], tmp_path / "six", edit))
    assert model.privacy.sound and model.verification.status == "recomputed"


def test_unaccounted_steps_must_be_the_protocols(saved, tmp_path, capsys):
    def edit(meta):
        meta["privacy"]["unaccounted"] = ["nothing worth mentioning"]

    bad = _edited(saved["mlp-dp-paper"], tmp_path / "unaccounted", edit)
    assert _arithmetic_alone_accepts(bad)
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("unaccounted"), refusal


def test_declared_size_edited_alone_is_refused(saved, tmp_path, capsys):
    """The schedule is the declared size's: a different declaration plans another rate."""

    def edit(meta):
        meta["privacy"]["public_facts"]["num_train"] *= 2

    bad = _edited(saved["mlp-dp-sound"], tmp_path / "facts", edit)
    assert _arithmetic_alone_accepts(bad)
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("plan"), refusal


# ----------------------------------------------------------------------------- DPAR


def test_dpar_sgd_noise_edited_with_epsilon_is_refused(saved, tmp_path, capsys):
    """Sound DPAR: the DP-SGD σ raised, the inner ε and the amplified ε recomputed for it."""

    def edit(meta):
        records = meta["privacy"]["mechanisms"]
        amp = records[-1]
        sgd = next(r for r in records if r["mechanism"] == "SensitivityMixtureGaussian")
        sgd["sigma"] *= 1.5
        meta["card"]["dpar"]["sgd_noise_std"] *= 1.5
        analysis = amp["accounting"]["analysis"]
        values, _ = recompute(records[:-1], amp["inner_delta"], amp["accounting"], {analysis})
        amp["inner_epsilon"] = min(values.values())
        amp["accounting"]["analysis"] = min(values, key=values.get)
        meta["privacy"]["epsilon"], _ = amplify_by_subsampling(
            amp["inner_epsilon"], amp["inner_delta"], amp["sample_rate"]
        )

    bad = _edited(saved["dpar-em1-sound"], tmp_path / "dpar-sigma", edit)
    assert _arithmetic_alone_accepts(bad)
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("sigma|sgd_noise_std|inner_epsilon"), refusal


def test_dpar_paper_steps_edited_with_epsilon_is_refused(saved, tmp_path, capsys):
    """Paper DPAR: the DP-SGD steps cut and its ε (and the paper's sum) recomputed; the steps
    no longer follow from the recorded rate, normaliser and epochs."""

    def edit(meta):
        from dpaudit.accounting import PoissonSubsampledGaussian, PrivacyLedger

        appr, sgd = meta["privacy"]["mechanisms"]
        sgd["steps"] //= 4
        meta["card"]["dpar"]["steps"] = sgd["steps"]
        mech = PoissonSubsampledGaussian(sgd["sigma"], sgd["sample_rate"], sgd["steps"], name=sgd["name"])
        sgd["epsilon"] = PrivacyLedger(accountant="rdp").step(mech).get_epsilon(sgd["delta"])
        q_node = meta["card"]["hyperparameters"]["node_sample_rate"]
        meta["privacy"]["epsilon"] = q_node * (appr["epsilon"] + sgd["epsilon"])

    bad = _edited(saved["dpar-gm-paper"], tmp_path / "dpar-steps", edit)
    assert _arithmetic_alone_accepts(bad)
    refusal = _refusal(bad, capsys)
    assert refusal.is_one_line_plan_refusal("steps"), refusal
