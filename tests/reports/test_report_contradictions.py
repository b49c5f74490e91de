"""The contradictions a newcomer found in the report, each a test on the report data (and the HTML
that renders it): one maximum per card, rows that never mix attacks, "fair coin" only on
randomized games, seeds counted as seeds, ROC axes limited to the resolvable FPR, no "sound:
false · protocol=sound", and no chart whose every point is 0. The records are built by hand from
typed :class:`~dpaudit.auditing.results.AttackResult` s, so each test takes well under a second."""

from __future__ import annotations

import json
import re

import pytest

from dpaudit.accounting.spec import PrivacySpec
from dpaudit.auditing.results import AttackResult
from dpaudit.auditing.statistics import pair_test_from_counts
from dpaudit.auditing.verdict import StudyVerdict, Verdict, study_verdict
from reports.aggregate import build_report_data
from reports.render import render_html

RANDOM = "random:0.75,0.1,0.15"


def _privacy(epsilon=2.0, *, sound=True, protocol="sound", unaccounted=()) -> dict:
    spec = PrivacySpec(
        epsilon=epsilon,
        delta=1e-5,
        unit="node",
        accountant="prv",
        sound=sound,
        protocol=protocol,
        unaccounted=list(unaccounted),
    )
    return spec.to_dict()


def _result(
    name: str,
    auc: float,
    *,
    pairs: int = 200,
    correct: int | None = None,
    valid: bool = True,
    covered: bool = True,
    runs: int = 3,
    negatives: int = 37,
    delta: float = 1e-5,
) -> dict:
    """A membership attack's result with a one-run pair test of ``pairs`` pairs (``correct`` right)."""
    correct = pairs // 2 if correct is None else correct
    counts = [{"fraction": 1.0, "guesses": pairs, "correct": correct}]
    bound = pair_test_from_counts(counts, pairs, delta, 1)["epsilon"]
    return AttackResult(
        attack=name,
        auc=auc,
        auc_ci=(auc - 0.05, auc + 0.05),
        tpr_at_fpr={"0.1": 0.2, "0.01": 0.05, "0.001": 0.0},
        epsilon_lower_bound=bound if valid else None,
        epsilon_lower_bound_delta=delta,
        covered_by_guarantee=covered,
        ceiling={"attack_unit": "node"},
        roc={"fpr": [0.0, 1.0 / negatives, 0.5, 1.0], "tpr": [0.0, 0.1, 0.7, 1.0]},
        runs=[{"seed": i, "auc": auc, "tpr_at_fpr": {"0.01": 0.05}, "non_members": negatives} for i in range(runs)],
        extra={"lower_bound": {"counts": counts, "pairs": pairs, "delta": delta, "group_size": 1}},
        bound_valid=valid,
        bound_validity="" if valid else "the members were picked by hand, not by a fair coin",
    ).to_dict()


def _record(defense: str, epsilon, attacks: dict, privacy: dict | None = None, seed: int = 0) -> dict:
    return {
        "status": "done",
        "defense": defense,
        "epsilon": epsilon,
        "seed": seed,
        "split": {"spec": RANDOM},
        "privacy": privacy if privacy is not None else _privacy(epsilon),
        "metrics": {"test_accuracy": 0.7, "n_test": 100},
        "card": {"inference": {"private": True}},
        "attacks": attacks,
        "attack_errors": {},
        "attack_seconds": {},
        "canaries": {},
    }


def _report(records: list[dict]) -> tuple[dict, str]:
    meta = {"title": "contradictions", "kind": "compare", "dataset": {"name": "toy"}}
    data = build_report_data(records, meta)
    return data, render_html(data)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def _cards(html: str) -> list[str]:
    return [_text(block) for block in re.findall(r'<details class="verdict.*?</details>', html, flags=re.S)]


def _rows(html: str) -> list[str]:
    table = html[html.index('id="summary-table"') :]
    return re.findall(r"<tr class=.*?</tr>", table[: table.index("</table>")], flags=re.S)


def _cell(row: str, label: str) -> str:
    return _text(re.search(rf'data-label="{re.escape(label)}"[^>]*>(.*?)</td>', row, flags=re.S).group(1)).strip()


def test_one_maximum_per_card():
    """The card once showed 0.000 (power at the Bonferroni level) and 0.255 (the same pairs at 95 %)
    for one attack: now every "could certify" number on a card is its attack's one
    ``epsilon_lower_bound_power``."""
    small = _record("small", 2.0, {"mia-threshold": _result("mia-threshold", 0.6, pairs=37)})
    other = _record("other", 1.0, {"mia-threshold": _result("mia-threshold", 0.6, pairs=400)})
    data, html = _report([small, other])
    assert data["multiple_testing"]["tests"] == 2
    for verdict, card in zip(data["verdicts"], _cards(html), strict=True):
        power = verdict["attacks"]["mia-threshold"]["epsilon_lower_bound_power"]
        assert verdict["power"]["max_epsilon"] == power
        if verdict["lower_bound"]:
            assert verdict["lower_bound"]["max_possible"] == power
        shown = set(re.findall(r"could certify (?:up to |at most )?ε (?:≤|=) ([0-9.]+)", card))
        shown |= set(re.findall(r"at most ([0-9.]+) possible", card))
        assert shown == {f"{power:.3f}"} or shown == {f"{power:.2f}", f"{power:.3f}"}, (card, shown)
        assert all(abs(float(s) - power) < 0.006 for s in shown)


def test_summary_rows_never_mix_attacks():
    """A row's AUC, TPR and ε lower bound are all its headline attack's, never the AUC of one attack
    beside another attack's bound."""
    attacks = {
        "mia-threshold": _result("mia-threshold", 0.74, pairs=200, correct=100),  # headline, bound ~0
        "mia-lira": _result("mia-lira", 0.62, pairs=400, correct=330),  # weaker AUC, larger bound
    }
    data, html = _report([_record("gap-ndp", 2.0, attacks)])
    (row,) = data["summary"]
    assert row["headline_attack"] == "mia-threshold"
    mine = row["attacks"]["mia-threshold"]
    assert mine["epsilon_lower_bound_max"] < row["attacks"]["mia-lira"]["epsilon_lower_bound_max"]
    (html_row,) = _rows(html)
    assert _cell(html_row, "strongest attack").startswith("mia-threshold")
    assert _cell(html_row, "AUC").startswith(f"{mine['auc']:.3f}")
    assert _cell(html_row, "ε LB").startswith(f"{mine['epsilon_lower_bound_max']:.3f}")


def test_fair_coin_only_on_a_randomized_game():
    """The headline attack's game was not random (bound_valid false): the row says "not random",
    even though another attack's game was; a row says "fair coin" only of a randomized game."""
    attacks = {
        "mia-threshold": _result("mia-threshold", 0.8, valid=False),
        "mia-lira": _result("mia-lira", 0.6),
    }
    records = [_record("hand-picked", 2.0, attacks), _record("fair", 1.0, {"mia-lira": _result("mia-lira", 0.6)})]
    data, html = _report(records)
    for row, html_row, rec in zip(data["summary"], _rows(html), records, strict=True):
        game = _cell(html_row, "audit game")
        result = AttackResult.from_dict(rec["attacks"][row["headline_attack"]])
        assert (game == "fair coin") == (result.bound_valid and row["audit_validity"]["valid"]), (row["defense"], game)
    assert [_cell(r, "audit game") for r in _rows(html)] == ["not random", "fair coin"]


def test_seeds_are_counted_as_seeds():
    """One model seed (``--seeds 1``) with an attack of 3 runs: the report counts 3 runs, never
    "3 seeds", and the summary says no "mean over seeds"."""
    data, html = _report([_record("gap-ndp", 2.0, {"mia-threshold": _result("mia-threshold", 0.7, runs=3)})])
    assert data["summary"][0]["seeds"] == [0]
    text = _text(html)
    assert "3 seeds" not in text and "over 3 seeds" not in text and "mean over seeds" not in text
    assert "3 runs" in text


def test_roc_axes_stop_at_the_resolvable_fpr(monkeypatch):
    """37 negatives resolve FPR down to 1/37, not 10⁻⁴: the panel's floor is 1/negatives."""
    from reports import figures

    data, _ = _report(
        [
            _record("gap-ndp", 2.0, {"mia-threshold": _result("mia-threshold", 0.7, negatives=37)}),
            _record("gap-ndp", 4.0, {"mia-threshold": _result("mia-threshold", 0.7, negatives=37)}),
        ]
    )
    (panel,) = data["roc"]
    assert all(c["negatives"] == 37 for c in panel["curves"])
    assert panel["fpr_floor"] == pytest.approx(1 / 37)
    caught = []
    monkeypatch.setattr(figures, "to_svg", lambda fig, prefix: caught.append(fig) or prefix)
    figures.roc_curves(data)
    assert caught
    for fig in caught:
        for ax in fig.axes:
            assert ax.get_xlim()[0] >= 1 / 37 - 1e-12


def test_no_sound_false_beside_protocol_sound():
    """A spec with an unaccounted step is ``sound: false``; its card never adds "protocol=sound"."""
    privacy = _privacy(sound=False, protocol="sound", unaccounted=["the degree bound was read from the data"])
    data, html = _report([_record("gcon", 2.0, {"mia-threshold": _result("mia-threshold", 0.7)}, privacy)])
    (verdict,) = data["verdicts"]
    assert verdict["sound"] is False and verdict["protocol"] is None
    (card,) = _cards(html)
    assert "sound: false" in card and "protocol=sound" not in card
    assert "the degree bound was read from the data" in card


def test_a_chart_of_zeros_is_not_drawn():
    """Every ε lower bound is 0: the scatter would be points on the axis; it is replaced by why."""
    records = [_record("gap-ndp", e, {"mia-threshold": _result("mia-threshold", 0.5, correct=100)}) for e in (1.0, 2.0)]
    data, html = _report(records)
    assert all(p["epsilon_lower_bound"] == 0 for p in data["lower_bounds"])
    assert data["charts"]["lower_bounds"]["drawn"] is False and "are 0" in data["charts"]["lower_bounds"]["why"]
    assert 'id="lower-bounds-figure"' not in html and 'id="lower-bounds-not-drawn"' in html
    # one bound above 0: drawn
    records[0]["attacks"]["mia-threshold"] = _result("mia-threshold", 0.9, pairs=400, correct=390)
    data, html = _report(records)
    assert data["charts"]["lower_bounds"]["drawn"] is True and 'id="lower-bounds-figure"' in html


def test_the_verdict_round_trips_through_json_and_is_what_the_report_renders():
    records = [
        _record(
            "gap-ndp",
            2.0,
            {
                "mia-threshold": _result("mia-threshold", 0.7, pairs=400, correct=300),
                "mia-lira": _result("mia-lira", 0.6, valid=False),
            },
        ),
        _record("gap-ndp", 2.0, {"mia-threshold": _result("mia-threshold", 0.72)}, seed=1),
        _record("gcn", None, {"mia-threshold": _result("mia-threshold", 0.9)}, PrivacySpec.non_private().to_dict()),
    ]
    sv = study_verdict(records)
    again = StudyVerdict.from_dict(json.loads(json.dumps(sv.to_dict())))
    assert again == sv
    assert isinstance(again.models[0], Verdict) and again.models[0].power is not None
    assert again.models[0].seeds == (0, 1)
    data, _ = _report(records)
    assert data["verdicts"] == [v.to_dict() for v in sv.models]
    assert data["overall"] == sv.overall.to_dict()


def test_the_card_shows_a_composed_epsilon_and_seeded_noise_from_the_claim():
    """Fields the spec states reach the card through the verdict's claim, nowhere else."""
    privacy = _privacy() | {"composed_epsilon": 2.75, "seeded_noise": True}
    data, html = _report([_record("gap-ndp", 2.0, {"mia-threshold": _result("mia-threshold", 0.7)}, privacy)])
    (verdict,) = data["verdicts"]
    assert verdict["claimed"]["composed_epsilon"] == 2.75 and verdict["claimed"]["seeded_noise"] is True
    (card,) = _cards(html)
    assert "ε = 2.750 composed with the query releases" in card and "seeded noise — not a release" in card
    data, html = _report([_record("gap-ndp", 2.0, {"mia-threshold": _result("mia-threshold", 0.7)})])
    assert "seeded noise" not in html and "composed with the query releases" not in html
