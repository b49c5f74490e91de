r"""Recompute a privacy spec from its recorded mechanisms: the integrity check run on load.

A released model's ``model.json`` is plain text; anyone can edit its ε. :func:`verify_spec`
rebuilds every mechanism from the spec's ledger records (:func:`mechanism_from_record`, the
inverse of :meth:`Mechanism.describe`), recomposes them with the accountant the spec records
(``spec.accounting``: the ledger's choice ``auto | rdp | pld``, the analysis that produced ε,
the PLD grid) at the spec's δ, and refuses (:class:`~dpaudit.errors.IntegrityError`, one line)
a spec whose ε, δ, μ, unit, protocol or ``sound`` flag does not match:

* ε: :math:`|\varepsilon_{stated} - \varepsilon_{recomputed}| \le 10^{-3}\,\varepsilon_{recomputed}
  + 10^{-9}` under the recorded analysis (a claim *smaller* than the proof is refused, and so is a
  larger one: the file no longer says what was computed). Every other analysis listed in
  ``epsilon_by_accountant`` is recomputed and compared too, and under ``auto`` the stated ε must
  be their minimum;
* δ: recomputation runs at the stated δ, so an edited δ changes the recomputed ε and is refused
  (ledgers made only of recorded (ε, δ) guarantees: their δ's must fit in the stated δ; the
  defense's hook checks the split, see GCON);
* μ (GDP): recomputed from the Gaussian records;
* unit / protocol: against what the model card says the defense is (``expected_unit``,
  ``card["protocol"]``); ``protocol = sound`` must be ``sound: true`` and ``paper`` ``sound: false``
  (DP-GNN: always false); ``sound: false`` must list its unaccounted steps; a private spec must
  record at least one mechanism (every defense does; only in-memory adapted models carry a
  guarantee merely stated by the user);
* spent ε ≤ target ε (unless a hook allows more, e.g. GAP's foreign-graph releases).

What it cannot do alone: this is a *consistency* check, not a signature. Someone who edits ε
*and* every mechanism parameter so that they agree (e.g. raises σ in the record) produces a
file whose arithmetic is proven — for mechanisms the weights did not go through. Defenses with
a plan close most of that gap on load (:func:`dpaudit.release.model.check_plan` re-derives the records
from the card's hyperparameters, target ε, δ and declared facts); editing those too still
produces a consistent file. Tying σ to the
weights needs a signed release; dpaudit ships none. Steps a paper's protocol leaves
unaccounted are, by definition, not recomputable; their ``sound: false`` flag is checked, the
paper's own arithmetic is re-done by the defense's hook where one is registered.

Recorded (ε, δ) guarantees (:class:`RecordedGuarantee`) compose by the basic theorem here;
whether their (ε, δ) follows from their parameters is the defense's business (its model kind's
``verify_privacy`` hook; GCON re-derives Theorem 1 and the AMP Gaussian).

Results are cached per (records, δ, accounting) in memory, so loading the same model again is
free; the first load of a PLD-accounted model costs what its training-time accounting did once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from dpaudit.accounting.ledger import ACCOUNTANTS, LABELS, PrivacyLedger
from dpaudit.accounting.mechanisms import RecordedGuarantee, mechanism_from_record
from dpaudit.accounting.pld import DEFAULT_DISCRETIZATION, gaussian_epsilon
from dpaudit.accounting.spec import CLAIMED, UNITS, PrivacySpec, within_target
from dpaudit.errors import DPAuditError, IntegrityError

#: Relative tolerance of every recomputed-vs-stated comparison.
RTOL = 1e-3
ATOL = 1e-9

ANALYSES = ("rdp", "pld", "gaussian", "rdp+pld", "basic")


def close(stated: float, recomputed: float, rtol: float = RTOL) -> bool:
    """``stated`` equals ``recomputed`` up to ``rtol`` (relative) + 1e-9 (absolute); ∞ = ∞.

    Args:
        stated: the value written in the file.
        recomputed: the value re-derived.
        rtol: relative tolerance.

    Returns:
        Whether they agree.
    """
    if math.isinf(stated) or math.isinf(recomputed):
        return stated == recomputed
    return abs(stated - recomputed) <= rtol * abs(recomputed) + ATOL


@dataclass
class Verification:
    """Outcome of a load-time privacy check (attached to a loaded model as ``.verification``).

    Attributes:
        status: ``"recomputed"`` (ε re-derived from the records and matches), ``"non-private"``,
            or ``"stated"`` (a user's claim on an adapted model: shown, not proven).
        summary: one line for ``dpaudit inspect``.
        checked: what was compared.
        not_checked: what could not be verified from the file (old format, recorded guarantees
            without a hook, unaccounted steps).
        epsilon: the recomputed ε (``None`` when not recomputed).
        seconds: wall time of the recomputation (0 when cached).
    """

    status: str
    summary: str
    checked: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    epsilon: float | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (every field but ``seconds``)."""
        return {
            "status": self.status,
            "summary": self.summary,
            "checked": list(self.checked),
            "not_checked": list(self.not_checked),
            "epsilon": self.epsilon,
        }


def refuse(message: str) -> IntegrityError:
    """The one-line error of a spec that does not match its records.

    Args:
        message: what does not match.

    Returns:
        The :class:`~dpaudit.errors.IntegrityError` to raise.
    """
    return IntegrityError(f"privacy spec does not match its recorded mechanisms: {message}")


# ----------------------------------------------------------------------------- recomputation


def analysis_from_label(label: str) -> str | None:
    """The analysis named by a ledger-built ``accountant`` label (format-1 files record no
    ``accounting``); ``None`` when the label names none of :data:`LABELS`.

    Args:
        label: the spec's ``accountant`` label.

    Returns:
        ``"rdp"``, ``"pld"``, ``"gaussian"``, ``"rdp+pld"``, ``"basic"`` or ``None``.
    """
    text = label.split("ε by ", 1)[-1]
    if text.startswith("basic composition of (ε, δ) guarantees"):
        return "basic"
    for key in ("rdp+pld", "pld", "gaussian", "rdp"):
        head = LABELS[key].split(" (", 1)[0].split(":", 1)[0]
        if text.startswith(head):
            return key
    return None


def _ledger(records: list[dict], accounting: dict) -> PrivacyLedger:
    accountant = accounting.get("accountant", "auto")
    if accountant not in ACCOUNTANTS:
        raise refuse(f"unknown accountant choice {accountant!r}")
    grid = accounting.get("value_discretization_interval", DEFAULT_DISCRETIZATION)
    if isinstance(grid, bool) or not isinstance(grid, (int, float)) or not grid > 0:
        raise refuse(f"invalid PLD grid {grid!r}")
    kwargs: dict[str, Any] = {"accountant": accountant, "value_discretization_interval": float(grid)}
    if accounting.get("orders") is not None:
        try:
            orders = np.asarray([float(a) for a in accounting["orders"]], dtype=np.float64)
        except (TypeError, ValueError):
            raise refuse("invalid RDP orders") from None
        if orders.size == 0 or not np.all(orders > 1):
            raise refuse("RDP orders must be > 1")
        kwargs["orders"] = orders
    ledger = PrivacyLedger(**kwargs)
    for record in records:
        try:
            mechanism = mechanism_from_record(record)
        except DPAuditError as exc:
            raise refuse(str(exc)) from None
        if isinstance(mechanism, RecordedGuarantee):
            eps, delta = mechanism.epsilon, mechanism.delta
            if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (eps >= 0 and math.isfinite(eps)):
                raise refuse(f"recorded guarantee {mechanism.name!r} has an invalid ε {eps!r}")
            if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1:
                raise refuse(f"recorded guarantee {mechanism.name!r} has an invalid δ {delta!r}")
        ledger.step(mechanism)
    return ledger


def _gaussian_value(ledger: PrivacyLedger, delta: float) -> float | None:
    composable, _ = ledger._split()
    mus = [m.gdp_mu() for m in composable]
    if not composable or any(mu is None for mu in mus):
        return None
    rec_eps, remaining = ledger._recorded_part(delta)
    return rec_eps + gaussian_epsilon(math.sqrt(sum(mu * mu for mu in mus)), remaining)


@lru_cache(maxsize=128)
def _recompute_cached(records_json: str, delta: float, accounting_json: str, analyses: tuple[str, ...]):
    records, accounting = json.loads(records_json), json.loads(accounting_json)
    ledger = _ledger(records, accounting)
    composable, recorded = ledger._split()
    try:
        if not composable:
            rec_eps, _ = ledger._recorded_part(delta)
            return {"basic": rec_eps}, ledger.gdp_mu()
        # One ledger evaluation with the widest analysis needed (RDP is always part of it).
        if "rdp+pld" in analyses:
            values = ledger.epsilon_by_accountant(delta)
        else:
            values = ledger.epsilon_by_accountant(delta, only="pld" if "pld" in analyses else "rdp")
        if "gaussian" in analyses and "gaussian" not in values:
            g = _gaussian_value(ledger, delta)
            if g is not None:
                values["gaussian"] = g
    except DPAuditError as exc:
        raise refuse(str(exc)) from None
    return values, ledger.gdp_mu()


def recompute(records: list[dict], delta: float, accounting: dict, analyses) -> tuple[dict[str, float], float | None]:
    """ε at ``delta`` of the ledger ``records`` under each analysis in ``analyses`` (those that
    apply; ``"basic"`` for ledgers of recorded guarantees only), and the ledger's GDP μ.

    Raises:
        IntegrityError: a record cannot be rebuilt or the ledger cannot be evaluated at δ.

    Args:
        records: mechanism records (``Mechanism.describe()`` dicts).
        delta: the δ at which ε is computed.
        accounting: the spec's accounting record (accountant, PLD grid, orders).
        analyses: names of the analyses wanted.

    Returns:
        ``(values, mu)``: ε by analysis, and μ (``None`` when not GDP).
    """
    try:
        records_json = json.dumps(records, sort_keys=True, allow_nan=False)
        accounting_json = json.dumps(accounting, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise refuse(f"ledger records are not plain JSON numbers ({exc})") from None
    values, mu = _recompute_cached(records_json, float(delta), accounting_json, tuple(sorted(set(analyses))))
    return dict(values), mu


def check_ledger_epsilon(
    records: list[dict], epsilon: float, delta: float, accounting: dict, recorded_values: dict[str, float] | None = None
) -> tuple[float, str, float | None, list[str]]:
    """Recompute ε of ``records`` at ``delta`` and compare it with the stated ``epsilon``.

    ``accounting`` is the spec's record (empty for format-1 specs: then ``recorded_values``' keys
    and ε's match with any of them decide). Returns (recomputed ε, analysis, μ, notes).

    Raises:
        IntegrityError: on any mismatch.

    Args:
        records: mechanism records.
        epsilon: the stated ε.
        delta: the stated δ.
        accounting: the spec's accounting record.
        recorded_values: the spec's ``epsilon_by_accountant``, each checked too.
    """
    notes: list[str] = []
    recorded_values = dict(recorded_values or {})
    analysis = accounting.get("analysis")
    if accounting and analysis not in ANALYSES:
        raise refuse(f"unknown analysis {analysis!r}")
    wanted = set(recorded_values) | ({analysis} if analysis else set())
    if not analysis:
        wanted |= {"rdp", "gaussian"}
        notes.append("format 1: the accountant choice is not recorded; ε was matched against every listed analysis")
    values, mu = recompute(records, delta, accounting or {"accountant": "auto"}, wanted - {"basic"})
    if "basic" in values:
        recomputed, used = values["basic"], "basic"
        if analysis not in (None, "basic"):
            raise refuse(f"analysis {analysis!r} recorded for a ledger of (ε, δ) guarantees only")
    elif analysis:
        if analysis not in values:
            raise refuse(f"the {analysis} analysis does not apply to the recorded mechanisms")
        recomputed, used = values[analysis], analysis
    else:
        matches = [k for k, v in values.items() if close(epsilon, v)]
        if not matches:
            raise refuse(
                f"stated ε = {epsilon:.6g} at δ = {delta:.3g}, the mechanisms prove "
                + ", ".join(f"{v:.6g} ({k})" for k, v in sorted(values.items()))
            )
        used = matches[0]
        recomputed = values[used]
    if not close(epsilon, recomputed):
        raise refuse(
            f"stated ε = {epsilon:.6g} at δ = {delta:.3g}, the recorded mechanisms prove {recomputed:.6g} ({used})"
        )
    for key, value in recorded_values.items():
        if key in values and not close(value, values[key]):
            raise refuse(f"epsilon_by_accountant[{key!r}] = {value:.6g}, recomputed {values[key]:.6g}")
        if key not in values:
            notes.append(f"epsilon_by_accountant[{key!r}] not recomputed (the analysis does not apply)")
    choice = accounting.get("accountant")
    if choice == "rdp" and used not in ("rdp", "basic"):
        raise refuse(f"accountant 'rdp' was chosen, but ε is attributed to the {used} analysis")
    if choice == "pld" and used not in ("pld", "basic") and "pld" in values:
        raise refuse(f"accountant 'pld' was chosen, but ε is attributed to the {used} analysis")
    if choice == "auto" and used != "basic":
        smallest = min(values.values())
        if not close(epsilon, smallest):
            raise refuse(
                f"accountant 'auto' reports the smallest analysis ({smallest:.6g}), the spec states {epsilon:.6g}"
            )
    return recomputed, used, mu, notes


# ----------------------------------------------------------------------------- the spec check


def expected_soundness(protocol: str | None) -> bool | None:
    """``sound`` that a defense's protocol implies: ``sound`` → true, ``paper`` → false, else
    unknown (defenses that are never sound, like DP-GNN, pass ``False`` themselves).

    Args:
        protocol: ``"sound"``, ``"paper"`` or anything else.

    Returns:
        ``True``, ``False`` or ``None``.
    """
    return {"sound": True, "paper": False}.get(protocol)


def check_claims(
    spec: PrivacySpec,
    expected_unit: str | None = None,
    expected_protocol: str | None = None,
    allow_above_target: bool = False,
    expected_sound: bool | None = None,
) -> None:
    """The checks that need no recomputation: unit, protocol vs ``sound``, unaccounted steps,
    δ range, spent ≤ target, and that mechanisms are recorded at all.

    ``expected_sound`` defaults to what ``expected_protocol`` implies (:func:`expected_soundness`).

    Raises:
        IntegrityError: on any mismatch.

    Args:
        spec: the spec to check.
        expected_unit: the unit the card's defense protects, or ``None`` when unknown.
        expected_protocol: the protocol the card names, or ``None``.
        allow_above_target: accept spent ε above ``target_epsilon``.
        expected_sound: the ``sound`` flag the defense implies, or ``None``.
    """
    if not spec.is_private:
        if spec.mechanisms:
            raise refuse(f"ε = ∞ (non-private) is stated but {len(spec.mechanisms)} mechanism(s) are recorded")
        return
    if not (spec.epsilon > 0) or math.isnan(spec.epsilon):
        raise refuse(f"ε must be > 0, got {spec.epsilon}")
    if spec.unit not in UNITS:
        raise refuse(f"a private spec needs a unit (node or edge), got {spec.unit!r}")
    if expected_unit is not None and spec.unit != expected_unit:
        raise refuse(f"unit {spec.unit!r} stated, but the defense protects {expected_unit!r}s")
    if not 0.0 < spec.delta < 1.0:
        raise refuse(f"δ must lie in (0, 1), got {spec.delta}")
    if expected_protocol is not None and spec.protocol != expected_protocol:
        raise refuse(f"protocol {spec.protocol!r} stated, the model card says {expected_protocol!r}")
    if expected_unit is not None and expected_protocol is None and spec.protocol is None:
        raise refuse("a private defense's spec and card must name its protocol (sound or paper); neither does")
    if "paper" in (spec.protocol, expected_protocol) and spec.sound:
        raise refuse("protocol=paper follows the paper's own accounting and cannot be sound: true")
    if not spec.sound and not spec.unaccounted:
        raise refuse("sound: false without the unaccounted steps listed")
    if expected_sound is None:
        expected_sound = expected_soundness(expected_protocol or spec.protocol)
    if expected_sound is not None and spec.sound != expected_sound:
        raise refuse(
            f"sound: {str(spec.sound).lower()} stated, but this defense and protocol "
            f"({expected_protocol or spec.protocol}) give sound: {str(expected_sound).lower()}"
        )
    if not spec.mechanisms:
        raise refuse(
            f"sound: {str(spec.sound).lower()} private spec (ε = {spec.epsilon:.4g}) records no mechanism, so ε "
            "cannot be recomputed"
        )
    if spec.target_epsilon is not None and not allow_above_target:
        if not within_target(spec.epsilon, spec.target_epsilon):
            raise refuse(f"spent ε = {spec.epsilon:.6g} exceeds the target ε = {spec.target_epsilon:.6g}")


def stated_verification(spec: PrivacySpec) -> Verification:
    """The verification of a guarantee the user states for their own model (``protocol:
    claimed``): shown, tested by audits as a hypothesis, never recomputed.

    Args:
        spec: the user's spec.

    Returns:
        A ``"stated"`` (or ``"non-private"``) :class:`Verification`.
    """
    if not spec.is_private:
        return Verification("non-private", "non-private (no privacy claim)")
    return Verification(
        "stated",
        "stated by the user, not recomputed: dpaudit recorded no mechanism for this guarantee (a claim audits test)",
        not_checked=["ε, δ and unit are the user's claim"],
    )


def check_stated(spec: PrivacySpec, expected_unit: str | None, expected_protocol: str | None) -> Verification:
    """Check a ``protocol: claimed`` spec (a user's claim, e.g. an exported adapted model): it
    is never a registered defense's (whose ε dpaudit accounts itself), never ``sound: true``, and
    states ε, δ and a unit; it records no mechanism, so nothing is recomputed (:func:`stated_verification`).

    Raises:
        IntegrityError: one line, on any mismatch.

    Args:
        spec: the spec to check.
        expected_unit: the unit the card's defense protects, or ``None`` when unknown.
        expected_protocol: the protocol the card names, or ``None``.

    Returns:
        :func:`stated_verification` of the spec.
    """
    if spec.protocol != expected_protocol:
        raise refuse(f"protocol {spec.protocol!r} stated, the model card says {expected_protocol!r}")
    if expected_unit is not None:
        raise refuse(
            f"a registered defense's model ({expected_unit}-level) cannot carry a user's claim (protocol=claimed)"
        )
    if spec.sound or not spec.unaccounted:
        raise refuse("a user's claim (protocol=claimed) is sound: false with its unaccounted step listed")
    if spec.is_private:
        if spec.unit not in UNITS or not (spec.epsilon > 0) or not 0.0 <= spec.delta < 1.0:
            raise refuse(f"a user's claim needs ε > 0, δ in [0, 1) and a unit, got {spec.to_dict()}")
    if spec.mechanisms:
        raise refuse("a user's claim records no mechanism (dpaudit ran none)")
    return stated_verification(spec)


def verify_spec(
    spec: PrivacySpec,
    expected_unit: str | None = None,
    expected_protocol: str | None = None,
    allow_above_target: bool = False,
    verified_records: set[int] | None = None,
    expected_sound: bool | None = None,
) -> Verification:
    """Check ``spec`` (see the module docstring); ``verified_records`` are indices of recorded
    guarantees whose (ε, δ) a defense hook has already re-derived. A private spec must record
    its mechanisms (every dpaudit defense does; a guarantee merely stated by a user is an
    adapted model's, which never comes from disk).

    Raises:
        IntegrityError: one line, on any mismatch.

    Args:
        spec: the spec read from a file.
        expected_unit: the unit the card's defense protects, or ``None`` when unknown.
        expected_protocol: the protocol the card names, or ``None``.
        allow_above_target: accept spent ε above ``target_epsilon``.
        verified_records: indices of recorded guarantees already re-derived, or ``None``.
        expected_sound: the ``sound`` flag the defense implies, or ``None`` (from the protocol).

    Returns:
        The :class:`Verification`.
    """
    import time

    if CLAIMED in (spec.protocol, expected_protocol):
        return check_stated(spec, expected_unit, expected_protocol)
    check_claims(spec, expected_unit, expected_protocol, allow_above_target, expected_sound)
    if not spec.is_private:
        return Verification("non-private", "non-private (ε = ∞): nothing to recompute", ["no mechanism recorded"])
    start = time.perf_counter()
    eps, used, mu, notes = check_ledger_epsilon(
        spec.mechanisms, spec.epsilon, spec.delta, spec.accounting, spec.epsilon_by_accountant
    )
    if (mu is None) != (spec.gdp_mu is None) or (mu is not None and not close(spec.gdp_mu, mu)):
        raise refuse(f"gdp_mu = {spec.gdp_mu!r} stated, the recorded mechanisms give {mu!r}")
    recorded = [i for i, r in enumerate(spec.mechanisms) if r.get("mechanism") == "RecordedGuarantee"]
    unverified = [i for i in recorded if i not in (verified_records or set())]
    not_checked = list(notes)
    if unverified:
        not_checked.append(
            f"{len(unverified)} recorded (ε, δ) guarantee(s) taken as recorded: "
            + ", ".join(repr(spec.mechanisms[i].get("name")) for i in unverified)
        )
    if not spec.sound:
        not_checked.append(f"{len(spec.unaccounted)} unaccounted step(s) (sound: false)")
    tag = "" if spec.sound else f" (sound: false, {len(spec.unaccounted)} unaccounted step(s): NOT a bound)"
    return Verification(
        "recomputed",
        f"ε = {eps:.4g} at δ = {spec.delta:.3g} recomputed from {len(spec.mechanisms)} recorded mechanism(s) "
        f"({used}){tag}: matches",
        ["ε", "δ", "gdp_mu", "unit", "protocol/sound", "spent ≤ target"],
        not_checked,
        eps,
        time.perf_counter() - start,
    )
