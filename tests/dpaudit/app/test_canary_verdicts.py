"""Clear output (issue 47 item 6): every verdict a canary or attack result can give is documented
(docs/canaries.md, docs/attacks.md: verdict → meaning → what to do), every result has
``.verdict``, and the summary prints the certified bound on its own line and never labels an
estimate as a bound."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from dpaudit.app.workflows.canary import summary_lines
from dpaudit.auditing.results import (
    ATTACK_VERDICTS,
    CANARY_VERDICTS,
    CLAIM_REFUTED,
    ESTIMATE_VERDICT,
    MECHANISM_REFUTED,
    AttackResult,
    canary_verdict,
    mechanism_refuted,
    verdict_form,
)

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _table_verdicts(page: str) -> set[str]:
    """The first column of the page's verdict table (rows of ``| `verdict` | ... |``)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    section = text[text.index("{ #verdicts }") :]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def test_every_verdict_a_canary_result_can_give_is_in_the_docs_table():
    tests = (None, {"refuted": False, "p_value": 0.4}, {"refuted": True, "p_value": 0.0012})
    produced = {
        verdict_form(
            canary_verdict(
                {"claim_refuted": refuted, "estimate_exceeds_claim": estimate},
                hypothesis=hypothesis,
                valid=valid,
                mechanism_test=test,
            )
        )
        for refuted, estimate, hypothesis, valid in itertools.product([True, False], repeat=4)
        for test in tests
    }
    assert produced == set(CANARY_VERDICTS)
    assert set(CANARY_VERDICTS) <= _table_verdicts("canaries.md")


def test_a_rejected_mechanism_is_its_own_verdict_below_a_certified_refutation():
    rejected = {"refuted": True, "p_value": 0.0012}
    verdict = canary_verdict({"claim_refuted": False}, hypothesis=False, mechanism_test=rejected)
    assert verdict == "claim refuted (the claim's mechanism rejected, p = 0.0012)" == mechanism_refuted(0.0012)
    assert verdict_form(verdict) == MECHANISM_REFUTED and verdict_form(CLAIM_REFUTED) == CLAIM_REFUTED
    # a certified bound above the claim is the stronger verdict; an unrejected test changes nothing
    assert canary_verdict({"claim_refuted": True}, hypothesis=True, mechanism_test=rejected) == CLAIM_REFUTED
    assert canary_verdict({"claim_refuted": True}, hypothesis=False, mechanism_test=rejected) == "guarantee broken"
    accepted = {"refuted": False, "p_value": 0.4}
    assert canary_verdict({}, hypothesis=True, mechanism_test=accepted) == "consistent with the claim"


def test_every_verdict_an_attack_result_can_give_is_in_the_docs_table():
    assert set(ATTACK_VERDICTS) <= _table_verdicts("attacks.md")


def _attack(bound, *, valid=True, covered=True, epsilon=1.0, hypothesis=False) -> AttackResult:
    return AttackResult(
        attack="mia-threshold",
        auc=0.6,
        epsilon_lower_bound=bound,
        bound_valid=valid,
        covered_by_guarantee=covered,
        ceiling={"epsilon": epsilon, "hypothesis": hypothesis},
    )


@pytest.mark.parametrize(
    "result,verdict",
    [
        (_attack(2.0), "guarantee broken"),
        (_attack(2.0, hypothesis=True), CLAIM_REFUTED),
        (_attack(0.5), "consistent with the claim"),
        (_attack(2.0, valid=False), "not applicable"),
        (_attack(None), "not applicable"),
        (_attack(2.0, covered=False), "not applicable"),
        (_attack(2.0, epsilon=float("inf")), "not applicable"),
    ],
)
def test_an_attack_result_has_a_verdict(result, verdict):
    assert result.verdict == verdict and verdict in ATTACK_VERDICTS
    assert AttackResult.from_dict(result.to_dict()).verdict == verdict  # derived, so it survives JSON


def test_the_summary_prints_the_certified_bound_alone_and_estimates_as_estimates():
    """The CLI's "overall ε lower bound 3.24" for a correct ε = 4 run was the GDP estimate."""
    result = {
        "defense": "fit.py:fit",
        "dataset": "cora",
        "split": "random:0.5",
        "kind": "node",
        "canaries": 1000,
        "runs": 1,
        "score": "logit margin",
        "auc": 0.7,
        "delta": 1e-5,
        "confidence": 0.95,
        "epsilon_lower_bound": {
            "one-run": 1.1,
            "one-run-fdp": 1.4,
            "one-run-fdp-gaussian": 2.9,
            "gdp": 3.24,
            "overall": 3.24,
        },
        "certified_epsilon_lower_bound": 1.4,
        "claimed_epsilon": 4.0,
        "claim_source": "user",
        "unit": "node",
        "bound_valid": True,
        "verdict": "consistent with the claim",
        "notes": [],
    }
    lines = summary_lines(result)
    certified = [line for line in lines if line.startswith("certified ε lower bound: ")]
    assert certified == [certified[0]] and "1.400" in certified[0] and "3.240" not in certified[0]
    assert not any("overall" in line for line in lines)
    for line in lines:
        if "3.240" in line or "2.900" in line:
            assert "estimates (not bounds" in line, line
    assert lines[-1] == "verdict: consistent with the claim" or "verdict: consistent with the claim" in lines
    assert ESTIMATE_VERDICT in CANARY_VERDICTS
