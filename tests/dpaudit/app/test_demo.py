"""`dpaudit demo` without training anything: the study it configures (every defense family under
every attack, each private defense trained once) and the table it prints (at most 100 columns)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import attacks as attack_registry
from dpaudit.app.cli import main
from dpaudit.app.workflows.config import epsilon_json, grid, validate_config
from dpaudit.training.registry import available_defenses, get_defense
from reports.aggregate import defense_family


class _StubResult:
    """What ``Study.run`` returns, with one :meth:`StudyResult.table` row per cell of the grid."""

    def __init__(self, config):
        self.cells = grid(config, "stub-fingerprint")
        self.attacks = attack_registry.order_attacks(list(config.attacks))
        self.done, self.failed = [object()] * len(self.cells), []

    def table(self):
        rows = []
        for i, cell in enumerate(self.cells):
            private = not math.isinf(cell.epsilon)
            row = {
                "defense": cell.defense,
                "epsilon": "∞" if not private else f"{cell.epsilon:g}",
                "epsilon_spent": cell.epsilon if private else None,
                "test_accuracy": 0.25 + i / 100,
            }
            row.update({f"{name} AUC": 0.5 + (i + j) / 1000 for j, name in enumerate(self.attacks)})
            rows.append(row)
        return rows

    def to_html(self, path):
        return Path(path)


@pytest.fixture
def demo_run(tmp_path, monkeypatch, capsys):
    """``dpaudit demo`` with the study replaced by a stub: (the study's configuration, stdout)."""
    seen = {}

    class StubStudy:
        def __init__(self, config, out, **kwargs):
            seen["config"] = config

        def run(self, jobs=1, **kwargs):
            return _StubResult(seen["config"])

    monkeypatch.setattr("dpaudit.app.workflows.Study", StubStudy)
    assert main(["demo", "--out", str(tmp_path / "study"), "--report", str(tmp_path / "demo.html")]) == 0
    return seen["config"], capsys.readouterr().out


def test_demo_covers_every_defense_family_and_every_attack(demo_run):
    config, _ = demo_run
    validate_config(config)  # names, overrides and attack settings are all valid
    assert config.attacks == attack_registry.available_attacks()
    # plug-in defenses that other tests register fall in the "other" family, which the demo skips
    registered = {defense_family(name) for name in available_defenses()} - {"other"}
    assert {defense_family(name) for name in config.defenses} - {"other"} == registered
    # each family shows a private model, and the non-private baselines are all there to compare with
    private_families = {defense_family(name) for name in available_defenses() if get_defense(name).unit is not None}
    private_families.discard("other")
    shown = {defense_family(n) for n in config.defenses if get_defense(n).unit is not None} - {"other"}
    assert shown == private_families
    assert {"gcn", "sage", "mlp"} <= set(config.defenses)


def test_demo_tests_every_claim_with_canaries_and_includes_a_broken_model(demo_run):
    """Issue 47: beside the sound models, a broken one from the zoo; every private cell also runs
    the canary audit its claim needs (``auto``), at a δ where canaries can refute ε = 4; the
    plan is said before any training."""
    from dpaudit.app.commands.demo import DEMO_BROKEN

    config, out = demo_run
    assert DEMO_BROKEN in config.defenses and get_defense(DEMO_BROKEN).unit == "node"
    assert config.canaries == ["auto"] and config.delta == 1e-5
    assert "dpaudit.app.workflows.zoo" in config.modules
    assert "also tested by a canary audit able to refute it" in out and "ε = 4 by " in out


def test_demo_trains_each_private_defense_at_every_epsilon_and_the_others_once(demo_run):
    """Two ε per private defense (a privacy–utility curve, not a point), one ε = ∞ model each
    of the others."""
    from dpaudit.app.commands.demo import DEMO_EPSILONS

    config, out = demo_run
    cells = grid(config, "stub-fingerprint")
    private = {d for d in config.defenses if get_defense(d).unit is not None}
    assert len(DEMO_EPSILONS) >= 2 and all(math.isfinite(e) for e in DEMO_EPSILONS)
    for defense in config.defenses:
        eps = sorted(epsilon_json(c.epsilon) for c in cells if c.defense == defense)
        assert eps == (sorted(DEMO_EPSILONS) if defense in private else [None]), (defense, eps)
    assert "(ε = 1, 4)" in out


def test_the_demo_graph_shows_a_privacy_utility_trade_off():
    """On the demo's graph a private model is visibly less accurate than a non-private one (on
    csbm's default signal every model, private or not, reached test accuracy ≈ 1.0, so the
    privacy–utility panel showed no trade-off)."""
    from dpaudit.app.commands.demo import DEMO_DATASET_OPTIONS, DEMO_EPSILONS
    from dpaudit.app.pipeline import train
    from dpaudit.data.datasets import csbm

    graph = csbm(**DEMO_DATASET_OPTIONS)
    gcn = train("gcn", graph, epsilon="inf", seed=0).metrics["test_accuracy"]
    private = train("mlp-dp", graph, epsilon=min(DEMO_EPSILONS), seed=0).metrics["test_accuracy"]
    assert gcn >= 0.85 and gcn - private >= 0.15, (gcn, private)


def test_demo_table_fits_100_columns(demo_run):
    config, out = demo_run
    cells = grid(config, "stub-fingerprint")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("defense "))
    table = lines[start : start + 2 + len(cells)]
    assert max(len(line) for line in table) <= 100, "\n".join(table)
    from dpaudit.app.commands.demo import DEMO_LABELS

    assert [line.split()[0] for line in table[2:]] == [DEMO_LABELS.get(c.defense, c.defense) for c in cells]
    for name in config.attacks:  # every attack keeps a column, under the heading it declares
        assert (attack_registry.declaration(name).heading or name) in table[0].split()
    assert "0.500" in table[2] and "0.250" in table[2]  # AUCs and accuracies printed to 3 decimals
