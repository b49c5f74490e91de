"""claim_from_opacus: an Opacus run's ε recomputed from its accountant's history with dpaudit's
ledger — the issue's scripts B (σ calibrated for ε = 4) and C (σ / 10, still reported as 4) —
cross-checked against opacus' own RDP and PRV accountants."""

from __future__ import annotations

import pytest
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from dpaudit.accounting import claim_from_opacus
from dpaudit.errors import PrivacyParameterError

DELTA, Q, EPOCHS = 1e-5, 0.2, 30
STEPS = int(EPOCHS / Q)


@pytest.fixture(scope="module")
def sigma_b() -> float:
    """What make_private_with_epsilon(ε = 4) picks (opacus' default PRV accountant)."""
    return get_noise_multiplier(target_epsilon=4.0, target_delta=DELTA, sample_rate=Q, epochs=EPOCHS, accountant="prv")


def _accountant(cls, sigma: float):
    accountant = cls()
    for _ in range(STEPS):  # what the optimizer's step hook records
        accountant.step(noise_multiplier=sigma, sample_rate=Q)
    return accountant


class _Engine:
    def __init__(self, accountant):
        self.accountant = accountant


def test_b_is_supported_and_c_is_flagged(sigma_b):
    b = claim_from_opacus(_Engine(_accountant(RDPAccountant, sigma_b)), DELTA, claimed_epsilon=4.0)
    assert b.supported is True and b.epsilon <= 4.0
    assert b.history == ((sigma_b, Q, STEPS),)
    assert b.message.startswith("claim ε = 4 supported")
    c = claim_from_opacus(_accountant(RDPAccountant, sigma_b / 10), DELTA, claimed_epsilon=4.0)
    assert c.supported is False and c.epsilon > 250
    assert "NOT supported" in c.message and c.to_dict()["history"] == [[sigma_b / 10, Q, STEPS]]
    assert claim_from_opacus(_accountant(RDPAccountant, sigma_b), DELTA).supported is None


@pytest.mark.parametrize("divisor", [1.0, 10.0])
def test_agrees_with_opacus_own_accountants(sigma_b, divisor):
    """dpaudit's ε (the tightest of RDP and PLD) lies within 1 % of opacus' PRV and never above
    opacus' RDP by more than 0.5 % (both RDP analyses of one mechanism; dpaudit's orders differ)."""
    sigma = sigma_b / divisor
    ours = claim_from_opacus(_accountant(RDPAccountant, sigma), DELTA)
    rdp = _accountant(RDPAccountant, sigma).get_epsilon(DELTA)
    assert ours.epsilon <= rdp * 1.005
    if divisor == 1.0:  # opacus' PRV grid is built for moderate ε
        prv = _accountant(PRVAccountant, sigma).get_epsilon(DELTA)
        assert ours.epsilon == pytest.approx(prv, rel=0.01)
    else:
        assert ours.epsilon == pytest.approx(rdp, rel=0.05)


def test_refusals_before_any_computation():
    with pytest.raises(PrivacyParameterError, match="recorded no step"):
        claim_from_opacus(RDPAccountant(), DELTA, 4.0)
    with pytest.raises(PrivacyParameterError, match="PrivacyEngine or accountant"):
        claim_from_opacus(object(), DELTA)
    with pytest.raises(PrivacyParameterError, match="delta"):
        claim_from_opacus(_Engine(_accountant(RDPAccountant, 1.0)), 2.0)
    with pytest.raises(PrivacyParameterError, match="noise_multiplier, sample_rate, steps"):
        claim_from_opacus(type("Broken", (), {"history": [(1.0, 0.1)]})(), DELTA)
    with pytest.raises(PrivacyParameterError):
        claim_from_opacus(_Engine(_accountant(RDPAccountant, 1.0)), DELTA, claimed_epsilon=-1.0)
