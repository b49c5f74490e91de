"""The audit itself: :func:`audit` resolves the model and the dataset, checks the canary results
and the attacks' settings, plans, runs every attack (interruptibly) and returns an
:class:`~dpaudit.app.workflows.audit.result.AuditResult`."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from dpaudit.app.workflows.audit.canaries import canary_evidence, check_canary_results
from dpaudit.app.workflows.audit.plan import QUICK_COMMON, audit_plan, format_plan, order_attacks
from dpaudit.app.workflows.audit.progress import _AuditProgress, _run_interruptibly
from dpaudit.app.workflows.audit.queries import charges_queries, query_api_finding
from dpaudit.app.workflows.audit.result import AuditResult
from dpaudit.app.workflows.audit.risk import node_risk
from dpaudit.errors import ConfigurationError, DPAuditError

log = logging.getLogger(__package__)  # one logger for the whole audit: dpaudit.app.workflows.audit


def audit(
    model,
    dataset=None,
    attacks: list[str] | str | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    data_root: str | None = None,
    device: str = "auto",
    command: str | None = None,
    quick: bool = False,
    progress: bool | None = None,
    on_plan=None,
    canaries=None,
    **common: Any,
) -> AuditResult:
    """Run every applicable attack (or ``attacks``) against ``model`` (a ReleasedModel or its folder).

    ``dataset`` defaults to the one named in the model card (its fingerprint is checked).
    Settings: ``settings={"mia-tstf": {"runs": 2}}`` per attack; any other keyword (e.g.
    ``runs=2``) goes to every attack that accepts it. ``quick=True`` starts from
    :data:`~dpaudit.app.workflows.audit.plan.QUICK_COMMON` and each attack's declared quick settings (explicit settings still win). An attack that does not apply to the
    model (a :class:`~dpaudit.errors.DPAuditError`) is recorded in ``errors``; unknown attack
    names or settings raise :class:`~dpaudit.errors.ConfigurationError`.

    Attacks run strongest first (:func:`order_attacks`). The plan (:func:`audit_plan`) is logged
    at INFO before any work, handed to ``on_plan(plan)`` when given (e.g. the CLI printing
    :func:`format_plan`), and returned in ``result.plan``; ``progress`` shows one bar over
    every attack × run (default: when stderr is a terminal). Ctrl-C stops within a fraction of
    a second and returns what finished, with ``result.interrupted`` set.

    A query-charged model (GAP: every query graph is a new release counted in its query ledger)
    is audited on sessions: the plan states at most how many new releases each attack needs
    (:func:`query_plan`); each step queries its own query session, whose training-graph queries
    read the owner's training release (free) when the owner's record is there; the sessions'
    releases are one finding, ``result.query_api`` (their query ledger: about the query graphs,
    never the training data), logged as one warning line. The model's spec — the report's
    headline guarantee — is its training spec, which no query changes.

    ``canaries``: canary audit results of the model's recipe (``dpaudit canary`` JSON files or
    the dicts :func:`~dpaudit.app.workflows.canary.canary_audit` returns) at the model's claimed
    unit, ε and dataset; they are re-tested against the model's claim (:func:`canary_evidence`)
    and enter its verdict: a valid certified bound above a user's or a paper's claim is "claim
    refuted". A mismatched or malformed result is refused in one line before any attack runs.

    Args:
        model: a released model, or the folder of a saved one.
        dataset: the graph to attack; ``None``: the card's.
        attacks: attack names (a list or a comma-separated string); ``None``: every attack.
        settings: per-attack settings, keyed by attack name.
        data_root: where to find the dataset.
        device: torch device (``"auto"``, ``"cpu"``, ``"cuda"``).
        command: the command line that started the audit (recorded in the result).
        quick: start from the quick preset.
        progress: show a progress bar; ``None``: when stderr is a terminal.
        on_plan: called with the plan before any work.
        canaries: canary audit results of the model's recipe (paths or dicts).
        **common: settings given to every attack that accepts them.

    Returns:
        The audit's result.

    Raises:
        DPAuditError: ``model`` is not a released model or its folder.
        ConfigurationError: unknown attack names or settings, or mismatched canary results.
    """
    from dpaudit.release.model import ReleasedModel, load

    if isinstance(model, (str, Path)):
        model = load(model, record=True)  # a folder: the owner's audit reads its record when it is there
    if not isinstance(model, ReleasedModel):
        raise DPAuditError("audit expects a dpaudit ReleasedModel or the folder of a saved one")
    canary_results = check_canary_results(model, canaries)
    dataset = _resolve_dataset(model, dataset, data_root)
    names, plans = _attack_plans(attacks, settings, common, quick, device, data_root)
    plan = audit_plan(model, dataset, names, plans, quick=quick, device=device)
    log.info("%s", format_plan(plan))
    if on_plan is not None:
        on_plan(plan)
    targets = _Targets(model)
    split, metrics = _accuracy(targets, dataset)
    results, errors, seconds, cpu_seconds, interrupted = _run_attacks(plan, plans, targets, dataset, progress)
    risk = None
    if split is not None and not interrupted:
        risk = _node_risk(targets, dataset, split, plans)
    queries = (
        query_api_finding(model, targets.releases(), targets.releases("charged_releases")) if targets.charged else None
    )
    if queries and queries["releases"]:
        log.warning("audit: %s", queries["finding"])
    return AuditResult(
        model,
        dataset,
        results,
        errors,
        seconds,
        metrics,
        command=command,
        plan=plan,
        interrupted=interrupted,
        node_risk=risk,
        query_api=queries,
        cpu_seconds=cpu_seconds,
        canaries=canary_evidence(model, canary_results),
    )


def _resolve_dataset(model, dataset, data_root):
    """The dataset the attacks run on: a name or graph file comes back with the options recorded at
    training; none, the card's (its fingerprint checked)."""
    from dpaudit.release.provenance import resolve_dataset

    if isinstance(dataset, str):  # a name or graph file: the options recorded at training come back with it
        from dpaudit.data.datasets import reload_dataset

        dataset = reload_dataset(model.card.get("dataset"), model.provenance("dataset"), dataset, root=data_root)
    return resolve_dataset(model, dataset, data_root)


def _attack_plans(attacks, settings, common, quick, device, data_root) -> tuple[list[str], dict[str, dict]]:
    """The attacks to run, strongest first, and each one's complete settings (quick preset, common
    keywords, device and data root, its own settings — later wins); unknown names and settings are
    refused before any work."""
    import attacks as attack_registry

    names = attacks.split(",") if isinstance(attacks, str) else list(attacks or attack_registry.available_attacks())
    names = order_attacks(list(dict.fromkeys(n.strip() for n in names if n.strip())))
    settings = {k: dict(v) for k, v in (settings or {}).items()}
    for name in names:
        attack_registry.get_attack(name)
    for name in settings:
        if name not in names:
            raise ConfigurationError(f"settings given for attack {name!r}, which is not being run")
    unused = set(common) - {k for name in names for k in attack_registry.attack_settings(name)}
    if unused:
        raise ConfigurationError(f"no attack accepts the settings {sorted(unused)}")
    plans = {}
    for name in names:
        known = attack_registry.attack_settings(name)
        plan = {}
        if quick:
            preset = {**QUICK_COMMON, **attack_registry.declaration(name).quick}
            plan.update({k: v for k, v in preset.items() if k in known})
        plan.update({k: v for k, v in common.items() if k in known})
        defaults = {"device": device, "data_root": data_root}
        plan.update({k: v for k, v in defaults.items() if k in known and v is not None and k not in plan})
        plan.update(settings.get(name, {}))
        attack_registry.check_settings(name, plan)
        plans[name] = plan
    return names, plans


class _Targets:
    """The model an audit step queries (``targets(what)``): for a query-charged model a fresh query
    session (its own query ledger and memo: what the step releases is counted, the model
    unchanged); for any other model the model itself."""

    def __init__(self, model):
        self.model = model
        self.charged = charges_queries(model)
        self.counted: list[tuple[str, Any]] = []  # (audit step, the query session it queried)

    def __call__(self, what: str):
        if not self.charged:
            return self.model
        twin = self.model.query_session()
        self.counted.append((what, twin))
        return twin

    def releases(self, count: str = "releases") -> dict[str, int]:
        """The new releases each step's sessions made (a session's ledger starts at 0); with
        ``count="charged_releases"`` those charged to the training data (made over the training graph)."""
        releases: dict[str, int] = {}
        for what, twin in self.counted:
            made = getattr(twin.query_ledger, "charged" if count == "charged_releases" else "releases")
            if made:
                releases[what] = releases.get(what, 0) + made
        return releases


def _accuracy(targets: _Targets, dataset) -> tuple[Any, dict[str, Any]]:
    """The target split and the model's accuracy on it; ``(None, {})`` when the model has none."""
    from attacks import _common as C
    from dpaudit.app.pipeline import evaluate
    from dpaudit.release.provenance import target_split

    try:
        split = target_split(targets.model, dataset)
        metrics = {
            **evaluate(C.OwnerView(targets("accuracy")), dataset, split),
            "n_train": len(split.train),
            "n_val": len(split.val),
            "n_test": len(split.test),
        }
    except DPAuditError:
        split, metrics = None, {}
    return split, metrics


def _run_attacks(plan, plans, targets: _Targets, dataset, progress):
    """Every planned attack in order, interruptibly: (results, errors, seconds, cpu_seconds,
    interrupted). An attack that does not apply is recorded in errors, as is a bug in one attack
    (logged); a configuration error and Ctrl-C between attacks stop the audit (Ctrl-C keeping what
    finished)."""
    import attacks as attack_registry

    results, errors, seconds, cpu_seconds = {}, {}, {}, {}
    interrupted = False
    bar = _AuditProgress(plan, progress)
    try:
        for index, step in enumerate(plan["attacks"]):
            name = step["attack"]
            bar.starting(step, index)
            start, cpu_start = time.perf_counter(), time.process_time()
            ok = False
            try:
                target = targets(name)
                results[name] = _run_interruptibly(attack_registry.run, name, target, dataset, **plans[name])
                ok = True
            except ConfigurationError:
                raise
            except DPAuditError as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # a bug in one attack must not cost the others' results
                log.exception("attack %s failed", name)
                errors[name] = f"{type(exc).__name__}: {exc}"
            seconds[name] = time.perf_counter() - start
            cpu_seconds[name] = time.process_time() - cpu_start
            bar.finished(step, index, seconds[name], ok)
    except KeyboardInterrupt:
        interrupted = True
        log.warning("audit interrupted: keeping %d finished attack(s) (%s)", len(results), ", ".join(results) or "none")
    finally:
        bar.close()
    return results, errors, seconds, cpu_seconds, interrupted


def _node_risk(targets: _Targets, dataset, split, plans) -> dict[str, Any] | None:
    """Per-node risk with the threshold attack's seed and member cap; ``None`` (logged) when it
    does not apply."""
    threshold = plans.get("mia-threshold", {})
    try:
        return node_risk(
            targets("per-node risk"),
            dataset,
            split,
            seed=int(threshold.get("seed", 0)),
            max_members=threshold.get("max_members"),
        )
    except DPAuditError as exc:
        log.info("no per-node risk: %s", exc)
        return None
