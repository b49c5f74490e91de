"""Integrity on load: the privacy spec in model.json is recomputed from its recorded mechanisms
and an edited ε, δ, unit, ``sound`` flag or mechanism parameter is refused with one line."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
from editing import edited_copy

from dpaudit.app.cli import main
from dpaudit.data.datasets import csbm
from dpaudit.data.splits import make_split
from dpaudit.errors import IntegrityError, ModelFormatError
from dpaudit.release.model import load
from dpaudit.training.registry import get_defense

FAST = {
    "mlp-dp": {"epochs": 2},
    "gap-edp": {"encoder_epochs": 2, "epochs": 2},
    "gap-ndp": {"encoder_epochs": 2, "epochs": 2},
    "dpar-gm": {"epochs": 2},
    "dpar-em1": {"epochs": 2},
    "dpgnn": {"steps": 5},
    "gcon": {"encoder_epochs": 5, "max_iter": 200},
}
#: (defense, protocol) pairs trained once per module; gcon's paper grid is slow, so sound only.
MODELS = [(name, "sound") for name in FAST] + [
    ("mlp-dp", "paper"),
    ("gap-edp", "paper"),
    ("dpar-gm", "paper"),
    ("dpar-em1", "paper"),
    ("dpgnn", "paper"),
]
IDS = [f"{n}-{p}" for n, p in MODELS]


@pytest.fixture(scope="module")
def saved(small_graph, tmp_path_factory):
    """Every private defense (sound and most paper runs) at ε = 4, trained for seconds, saved."""
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    root = tmp_path_factory.mktemp("integrity")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, protocol in MODELS:
            model = get_defense(name)(epsilon=4.0, seed=0, protocol=protocol, **FAST[name]).fit(small_graph, split)
            directory = root / f"{name}-{protocol}"
            model.save(directory)
            out[f"{name}-{protocol}"] = directory
        baseline = get_defense("gcn")(seed=0, epochs=2).fit(small_graph, split)
        baseline.save(root / "gcn")
        out["gcn"] = root / "gcn"
    return out


def _edited(src, dst, edit):
    return edited_copy(src, dst, edit)


@pytest.mark.parametrize("key", IDS)
def test_every_defense_loads_and_its_epsilon_is_recomputed(saved, key):
    model = load(saved[key])
    check = model.verification
    assert check.status == "recomputed", check.summary
    assert check.epsilon == pytest.approx(model.privacy.epsilon, rel=1e-3)
    assert "matches" in check.summary
    assert model.privacy.sound == (key.endswith("sound") and not key.startswith("dpgnn"))


def test_non_private_model_loads(saved):
    assert load(saved["gcn"]).verification.status == "non-private"


@pytest.mark.parametrize("key", IDS)
def test_edited_epsilon_is_refused(saved, key, tmp_path):
    """The issue's example: ε = 0.5 claimed for a model trained at ε = 4."""

    def edit(meta):
        meta["privacy"]["epsilon"] = 0.5

    with pytest.raises(IntegrityError, match="does not match|exceeds|0.5"):
        load(_edited(saved[key], tmp_path / "m", edit))


@pytest.mark.parametrize("key", IDS)
def test_edited_epsilon_and_target_are_refused(saved, key, tmp_path):
    """Editing the target and every listed analysis along with ε does not help either."""

    def edit(meta):
        p = meta["privacy"]
        p["epsilon"] = p["target_epsilon"] = 0.5
        p["epsilon_by_accountant"] = {k: 0.5 for k in p["epsilon_by_accountant"]}
        meta["card"]["target_epsilon"] = 0.5

    with pytest.raises(IntegrityError):
        load(_edited(saved[key], tmp_path / "m", edit))


@pytest.mark.parametrize("key", IDS)
def test_deleted_mechanisms_are_refused(saved, key, tmp_path):
    def edit(meta):
        meta["privacy"]["mechanisms"] = []
        meta["privacy"]["epsilon"] = 0.5

    with pytest.raises(IntegrityError, match="mechanism"):
        load(_edited(saved[key], tmp_path / "m", edit))


@pytest.mark.parametrize("key", IDS)
def test_changed_delta_is_refused(saved, key, tmp_path):
    def edit(meta):
        meta["privacy"]["delta"] = meta["privacy"]["delta"] * 10

    with pytest.raises(IntegrityError):
        load(_edited(saved[key], tmp_path / "m", edit))


@pytest.mark.parametrize("key", IDS)
def test_changed_unit_is_refused(saved, key, tmp_path):
    def edit(meta):
        meta["privacy"]["unit"] = "edge" if meta["privacy"]["unit"] == "node" else "node"

    with pytest.raises(IntegrityError, match="unit"):
        load(_edited(saved[key], tmp_path / "m", edit))


@pytest.mark.parametrize("key", IDS)
def test_flipped_sound_flag_is_refused(saved, key, tmp_path):
    """sound → unsound (with a made-up step) and unsound → sound (steps deleted) are both refused."""

    def edit(meta):
        p = meta["privacy"]
        if p["sound"]:
            p["sound"], p["unaccounted"] = False, ["made up"]
        else:
            p["sound"], p["unaccounted"] = True, []

    with pytest.raises(IntegrityError, match="sound"):
        load(_edited(saved[key], tmp_path / "m", edit))
    # deleting the protocol from the spec and the card does not make a paper run sound either
    if key.endswith("paper") or key.startswith("dpgnn"):

        def edit_more(meta):
            edit(meta)
            meta["privacy"]["protocol"] = None
            meta["card"]["protocol"] = None
            meta["card"]["hyperparameters"].pop("protocol", None)

        with pytest.raises(IntegrityError):
            load(_edited(saved[key], tmp_path / "m2", edit_more))


def _scale_noise(record: dict, factor: float) -> bool:
    """Multiply the noise parameter of one ledger record; False when it has none."""
    for key in ("sigma", "scale"):
        if key in record:
            record[key] *= factor
            if "details" in record:
                record["details"]["sigma"] = record[key]
            return True
    details = record.get("details") or {}
    if "noise_multiplier" in details:
        details["noise_multiplier"] *= factor
        return True
    if "beta" in details:
        details["beta"] *= factor
        return True
    return False


@pytest.mark.parametrize("key", IDS)
def test_changed_noise_is_refused(saved, key, tmp_path):
    """A larger noise multiplier in the record (so the stated ε looks earned) is refused."""

    def edit(meta):
        records = meta["privacy"]["mechanisms"]
        assert any(_scale_noise(r, 3.0) for r in records), records

    with pytest.raises(IntegrityError):
        load(_edited(saved[key], tmp_path / "m", edit))


def test_noise_and_epsilon_edited_together_are_refused_by_the_plan(saved, tmp_path):
    """σ and ε edited to agree (mlp-dp, one record) are self-consistent arithmetic, but the card's
    plan (target ε, δ, schedule) re-derives another σ, so the file is refused. (Before the plan
    check this loaded; what the check still cannot catch is pinned in test_plan_integrity.py.)"""
    from dpaudit.accounting.verify import recompute

    def edit(meta):
        p = meta["privacy"]
        p["mechanisms"][0]["sigma"] *= 3.0
        values, mu = recompute(p["mechanisms"], p["delta"], p["accounting"], set(p["epsilon_by_accountant"]))
        p["epsilon"] = min(values.values())
        p["epsilon_by_accountant"] = values
        p["accounting"]["analysis"] = min(values, key=values.get)
        p["gdp_mu"] = mu

    with pytest.raises(IntegrityError, match="plan"):
        load(_edited(saved["mlp-dp-sound"], tmp_path / "m", edit))


def test_gcon_theorem_parameters_are_rederived(saved, tmp_path):
    def edit(meta):
        details = meta["privacy"]["mechanisms"][0]["details"]
        details["lambda_prime"] = details["lambda_prime"] + 1.0

    with pytest.raises(IntegrityError, match="lambda_prime"):
        load(_edited(saved["gcon-sound"], tmp_path / "m", edit))

    def edit_psi(meta):
        meta["card"]["gcon"]["config"]["alpha"] = 0.9

    with pytest.raises(IntegrityError, match="Ψ"):
        load(_edited(saved["gcon-sound"], tmp_path / "m2", edit_psi))


def test_dpar_amplification_is_rechecked(saved, tmp_path):
    def edit(meta):
        meta["privacy"]["mechanisms"][-1]["sample_rate"] = 0.01
        meta["card"]["hyperparameters"]["node_sample_rate"] = 0.01

    with pytest.raises(IntegrityError):
        load(_edited(saved["dpar-gm-sound"], tmp_path / "m", edit))

    def edit_inner(meta):
        meta["privacy"]["mechanisms"][-1]["inner_epsilon"] *= 0.5

    with pytest.raises(IntegrityError, match="ε"):
        load(_edited(saved["dpar-gm-sound"], tmp_path / "m2", edit_inner))


def test_gap_query_releases_round_trip_beside_the_training_spec(saved, tmp_path, capsys):
    """A GAP model that answered a foreign graph keeps its training spec (ε within the target);
    the release is counted in its query ledger, which survives save/load and ``inspect`` prints.
    A file written before the query ledger (the release composed into ε) loads as the training
    spec; releases composed into ε that the config does not record are refused."""
    from defenses.gap.model import RELEASES_NOTE, _mechanism_from
    from dpaudit.accounting import PrivacyLedger

    model = load(saved["gap-edp-sound"])
    trained = model.privacy.to_dict()
    other = csbm(num_nodes=60, num_classes=3, num_features=16, avg_degree=4, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.predict_proba(other.data)
    assert model.privacy.to_dict() == trained and model.privacy.epsilon <= 4.0 and model.query_ledger.releases == 1
    model.save(tmp_path / "queried")
    again = load(tmp_path / "queried")
    assert again.privacy.epsilon == pytest.approx(model.privacy.epsilon) and again.query_ledger.releases == 1
    assert again.verification.status == "recomputed"
    assert main(["inspect", str(tmp_path / "queried")]) == 0
    assert "query ledger: 1 PMA release(s) on query graphs" in capsys.readouterr().out

    def compose(meta):  # the form before the query ledger: training + the recorded release in ε
        cfg = meta["config"]
        mechanisms = [_mechanism_from(r) for r in cfg["ledger"]]
        mechanisms += [_mechanism_from(cfg["query_mechanism"])] * int(cfg["query_releases"])
        spec = PrivacyLedger().extend(mechanisms).spec(meta["privacy"]["delta"], "edge").to_dict()
        for key in ("epsilon", "mechanisms", "gdp_mu", "accountant", "epsilon_by_accountant", "accounting"):
            meta["privacy"][key] = spec[key]
        meta["privacy"]["notes"].append(f"{RELEASES_NOTE}{cfg['query_releases']}")

    legacy = load(_edited(tmp_path / "queried", tmp_path / "legacy", compose))
    assert legacy.privacy.epsilon == pytest.approx(model.privacy.epsilon) and legacy.query_ledger.releases == 1
    assert legacy.privacy.mechanisms == model.privacy.mechanisms

    def hide(meta):
        compose(meta)
        meta["config"]["query_releases"] = 0

    with pytest.raises(IntegrityError, match="training ledger"):
        load(_edited(tmp_path / "queried", tmp_path / "hidden", hide))

    def negative(meta):
        meta["config"]["query_releases"] = -1

    with pytest.raises(IntegrityError, match="query_releases"):
        load(_edited(tmp_path / "queried", tmp_path / "negative", negative))


def test_format_1_file_loads_and_says_what_was_not_verified(saved, tmp_path):
    def downgrade(meta):
        meta["schema_version"] = 1
        meta["privacy"].pop("accounting")

    model = load(_edited(saved["mlp-dp-sound"], tmp_path / "v1", downgrade))
    assert model.verification.status == "recomputed"
    assert any("format 1" in item for item in model.verification.not_checked)

    def downgrade_and_lie(meta):
        downgrade(meta)
        meta["privacy"]["epsilon"] = 0.5

    with pytest.raises(IntegrityError):
        load(_edited(saved["mlp-dp-sound"], tmp_path / "v1-lie", downgrade_and_lie))


def test_non_private_spec_with_mechanisms_is_refused(saved, tmp_path):
    def edit(meta):
        meta["privacy"]["epsilon"] = None

    with pytest.raises(IntegrityError, match="non-private"):
        load(_edited(saved["mlp-dp-sound"], tmp_path / "m", edit))


def test_integrity_error_is_a_model_format_error():
    assert issubclass(IntegrityError, ModelFormatError)


def test_cli_inspect_refuses_an_edited_epsilon_with_one_line(saved, tmp_path, capsys):
    def edit(meta):
        meta["privacy"]["epsilon"] = 0.5
        meta["privacy"]["mechanisms"] = []

    bad = _edited(saved["mlp-dp-sound"], tmp_path / "bad", edit)
    assert main(["inspect", str(bad)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "mechanism" in lines[0] and "Traceback" not in captured.err
    assert captured.out == ""

    assert main(["inspect", str(saved["dpar-gm-sound"])]) == 0
    out = capsys.readouterr().out
    assert "privacy check: ε = 4 at δ" in out and "recomputed" in out


def test_adapted_models_are_stated_not_proven(saved, small_graph):
    """A user's claim is never shown as a proven bound, and is not refused either."""
    from dpaudit.training.adapters import USER_STATED, adapt

    module = load(saved["gcn"]).module
    split = make_split(small_graph, "random:0.6,0.2,0.2", 0)
    claimed = adapt(
        module, small_graph, train_nodes=split.train, privacy={"epsilon": 2.0, "delta": 1e-4, "unit": "node"}
    )
    assert claimed.privacy.sound is False and USER_STATED in claimed.privacy.unaccounted
    assert claimed.verification.status == "stated" and "stated by the user" in claimed.verification.summary
    plain = adapt(module, small_graph, train_nodes=split.train)
    assert plain.privacy.sound and not math.isfinite(plain.privacy.epsilon)


@pytest.mark.parametrize(
    "key,section,field",
    [
        ("mlp-dp-sound", "architecture", "out_dim"),
        ("dpgnn-sound", "architecture", "latent"),
        ("dpar-gm-sound", "architecture", "hidden"),
        ("gap-edp-sound", None, "hidden"),
    ],
)
def test_architecture_size_is_still_checked_before_allocating(saved, tmp_path, key, section, field):
    """A 300,000-wide layer is refused by the architecture check (no wall-clock assert: how long a
    refused load takes depends on the machine)."""

    def edit(meta):
        target = meta["config"][section] if section else meta["config"]
        target[field] = 300_000

    with pytest.raises(ModelFormatError, match="size mismatch|architecture|shape|config"):
        load(_edited(saved[key], tmp_path / "m", edit))


def test_save_refuses_a_spec_edited_in_memory(saved, tmp_path):
    """save() runs the same check as load(), so a file that could not be loaded is never written."""
    model = load(saved["mlp-dp-sound"])
    model.privacy.epsilon = 0.5
    with pytest.raises(IntegrityError, match="refusing to save"):
        model.save(tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_recorded_accountant_choice_is_used():
    """A spec made under accountant='rdp' verifies under RDP; relabelled to the (smaller) PLD
    value it is refused, and under 'auto' a value above the smallest analysis is refused."""
    from dpaudit.accounting import PoissonSubsampledGaussian, PrivacyLedger
    from dpaudit.accounting.verify import verify_spec

    mechanism = PoissonSubsampledGaussian(1.1, 0.05, 200)
    rdp_spec = PrivacyLedger(accountant="rdp").step(mechanism).spec(1e-5, "node")
    assert rdp_spec.accounting["accountant"] == "rdp" and rdp_spec.accounting["analysis"] == "rdp"
    assert verify_spec(rdp_spec).epsilon == pytest.approx(rdp_spec.epsilon)
    auto_spec = PrivacyLedger().step(mechanism).spec(1e-5, "node")
    assert auto_spec.epsilon < rdp_spec.epsilon and auto_spec.accounting["analysis"] == "pld"
    relabelled = copy.deepcopy(rdp_spec)
    relabelled.epsilon, relabelled.accounting["analysis"] = auto_spec.epsilon, "pld"
    with pytest.raises(IntegrityError, match="accountant 'rdp'"):
        verify_spec(relabelled)
    loose = copy.deepcopy(auto_spec)
    loose.epsilon, loose.accounting["analysis"] = auto_spec.epsilon_by_accountant["rdp"], "rdp"
    with pytest.raises(IntegrityError, match="smallest"):
        verify_spec(loose)


def test_garbage_privacy_fields_are_one_line_errors(saved, tmp_path):
    for i, edit in enumerate(
        [
            lambda m: m["privacy"].update(delta="abc"),
            lambda m: m["privacy"].update(mechanisms=["not a record"]),
            lambda m: m["privacy"]["mechanisms"][0].update(sigma="big"),
            lambda m: m["privacy"]["mechanisms"][0].update(mechanism="Imaginary"),
            lambda m: m["privacy"].update(accounting={"accountant": "oracle", "analysis": "rdp"}),
        ]
    ):
        with pytest.raises(ModelFormatError):
            load(_edited(saved["mlp-dp-sound"], tmp_path / f"m{i}", edit))
