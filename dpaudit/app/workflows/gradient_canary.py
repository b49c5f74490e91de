"""White-box gradient-canary audits of a defense's DP-SGD run: one JSON document with the same
keys as :func:`dpaudit.app.workflows.canary.canary_audit` (``kind = "gradient"``).

>>> result = gradient_canary_audit("mlp-dp", "cora", 4.0, canaries=4000)   # doctest: +SKIP
>>> result["certified_epsilon_lower_bound"], result["verdict"]              # doctest: +SKIP

The game (Steinke, Nasr & Jagielski, NeurIPS 2023, Dirac canaries with every iterate observed;
Nasr et al., USENIX Security 2023): the defense trains on its real data, unchanged, while
:class:`dpaudit.training.dpsgd.DiracCanaries` — entered with :func:`dpaudit.training.dpsgd.inserting_canaries`
around ``Defense.fit`` — adds m canary gradients of norm C to one of its DP-SGD runs, each
included by a fair coin and then sampled like any example; :mod:`dpaudit.auditing.gradient_canary`
designs the coordinates, draws the coins, scores and gives the verdict. No defense is edited: every defense whose
DP-SGD goes through :func:`dpaudit.training.dpsgd.train_dp_sgd` is auditable (:func:`dpsgd_modules`), and
so is DP-GNN, whose own loop drives the same hook with the law its accountant assumes for a node
(:mod:`defenses.dpgnn.canaries`: N(K, r) subgraph terms drawn without replacement, ±C each).
DPAR (its own DP-SGD on APPR rows) does not, and is refused.

**What is compared.** The canaries are examples of that one DP-SGD run, so the scores are
bounded by that run's mechanism as the defense's *spec* records it — PoissonSubsampledGaussian(σ,
q, T), or DP-GNN's Theorem 1 — never the σ the run used: a defense that adds less noise than it
accounts is exactly what the audit must catch. ``claim="module"`` (default) compares against that
mechanism's own ε at the spec's δ — for mlp-dp and DP-GNN the whole spec, for GAP the encoder's or
the classifier's share, a stricter test than GAP's total; ``claim="total"`` against the spec's
total ε. When the claim also states μ-GDP (the record's or the spec's ``gdp_mu``), that μ goes to
:func:`dpaudit.auditing.estimators.audit_epsilon` as ``claimed_mu`` and a certified μ above it refutes the
claim too. The claim is the maximum over runs; runs are pooled as in ``canary_audit`` (canary i
enters only run r(i)).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.auditing import gradient_canary as game
from dpaudit.auditing.gradient_canary import OBSERVATIONS, SCORE_NAMES, sampling_seed, summarise_game
from dpaudit.auditing.hypothesis import claimed_noise_multiplier
from dpaudit.auditing.results import CANARY_SCHEMA, CANARY_SCHEMA_VERSION, CanaryAuditRecord
from dpaudit.auditing.statistics import auc_or_none
from dpaudit.data.datasets import GraphDataset, load_dataset
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.runtime import atomic_write_json
from dpaudit.training.registry import get_defense

log = logging.getLogger(__name__)

CLAIMS = ("module", "total")
DESIGN_KEYS = ("module", "observe", "claim")
COVERAGE = (
    "gradient canaries are examples of one DP-SGD run (norm exactly the clipping bound, Poisson-sampled at the "
    "run's rate): the bound is valid for that run's example-level guarantee, which for these defenses is the "
    "node-level one"
)


def dpsgd_modules(cls) -> dict[str, str | None]:
    """The noisy runs of a defense class that :class:`dpaudit.training.dpsgd.DiracCanaries` can join (through
    :func:`dpaudit.training.dpsgd.train_dp_sgd`, or DP-GNN's own loop), as {module name: its ``progress``
    label, ``None`` for the first noisy run}; empty when none."""
    from defenses.baselines import MLPDP
    from defenses.dpar import _DPAR
    from defenses.dpgnn import DPGNN
    from defenses.gap import GAPNode

    if issubclass(cls, MLPDP):
        return {"mlp": None}
    if issubclass(cls, GAPNode):
        return {"encoder": "gap encoder", "classifier": "gap classifier"}
    if issubclass(cls, DPGNN):
        return {"gnn": None}
    if issubclass(cls, _DPAR) and cls.unit == "node":
        return {"rows": None}
    return {}


def centres_scores(cls) -> bool:
    """Whether the defense's loop can give the real examples' clipped sum at an iterate (the
    ``centred`` score): :func:`dpaudit.training.dpsgd.train_dp_sgd` can; DP-GNN's loop does not."""
    from defenses.dpgnn import DPGNN

    return not issubclass(cls, DPGNN)


def check_gradient_request(
    defense: str,
    epsilon,
    canaries: int,
    runs: int,
    overrides: dict | None,
    delta="auto",
    device: str = "auto",
    seed: int = 0,
    design: dict | None = None,
):
    """Validate everything that can be validated before data is loaded; returns the defense class
    and the resolved design options ``{"module", "label", "observe", "claim"}``.

    Args:
        defense: a registered DP-SGD defense's name.
        epsilon: its target ε.
        canaries: gradient canaries per run, >= 1.
        runs: independent trainings, >= 1.
        overrides: the defense's hyperparameter overrides.
        delta: δ, or ``"auto"``.
        device: torch device.
        seed: the audit's seed.
        design: ``module``, ``label``, ``observe`` and ``claim`` options.

    Returns:
        ``(defense class, resolved design options)``.

    Raises:
        ConfigurationError: any of them is invalid.
    """
    if isinstance(canaries, bool) or not isinstance(canaries, int) or canaries < 1:
        raise ConfigurationError(f"--canaries must be an integer >= 1, got {canaries!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigurationError(f"--runs must be an integer >= 1, got {runs!r}")
    cls = get_defense(defense)
    probe = cls(epsilon=epsilon, delta=delta, seed=seed, device=device, **(overrides or {}))
    modules = dpsgd_modules(cls)
    if not modules:
        raise ConfigurationError(
            f"gradient canaries audit the DP-SGD runs of mlp-dp, gap-ndp, dpgnn and dpar (sound); {defense} has none "
            "they can "
            "join: use --kind node or edge"
        )
    if not probe.private:
        raise ConfigurationError("gradient canaries need a finite ε: at ε = ∞ the defense trains without DP-SGD noise")
    if "rows" in modules and probe.protocol_name == "paper":
        raise ConfigurationError(
            "gradient canaries audit DPAR's sound run only (protocol=paper's accounting is not a bound)"
        )
    options = dict(design or {})
    unknown = sorted(set(options) - set(DESIGN_KEYS))
    if unknown:
        raise ConfigurationError(
            f"unknown gradient canary option(s) {', '.join(unknown)}; use {', '.join(DESIGN_KEYS)}"
        )
    module = options.get("module", next(iter(modules)))
    if module not in modules:
        raise ConfigurationError(f"{defense} trains the DP-SGD module(s) {', '.join(modules)}; got module={module!r}")
    observe = options.get("observe", "iterates")
    if observe not in OBSERVATIONS:
        raise ConfigurationError(f"observe must be one of {', '.join(OBSERVATIONS)}, got {observe!r}")
    if observe == "centred" and not centres_scores(cls):
        raise ConfigurationError(f"observe=centred needs the real examples' clipped sum, which {defense} does not give")
    claim = options.get("claim", "module")
    if claim not in CLAIMS:
        raise ConfigurationError(f"claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
    return cls, {"module": module, "label": modules[module], "observe": observe, "claim": claim}


def module_claim(spec, hook) -> tuple[float, float | None] | None:
    """(ε at the spec's δ, μ or ``None``) of the spec's own record of the audited run — the one
    the canaries' law says accounts it (:meth:`dpaudit.training.dpsgd.CanaryLaw.matches`: DP-SGD's
    Poisson-sampled Gaussian with the run's rate and steps, DP-GNN's Theorem 1 over its steps),
    with the spec's σ, never the one the run used; the largest ε if several records match (its μ
    only when every match states one); ``None`` if none does.

    Args:
        spec: the run's privacy spec.
        hook: the canary hook of the audited module (its canary law).

    Returns:
        ``(epsilon, mu)`` or ``None``.
    """
    from dpaudit.accounting import PrivacyLedger
    from dpaudit.accounting.mechanisms import mechanism_from_record

    found = [mechanism_from_record(record) for record in spec.mechanisms if hook.law.matches(record, hook.steps)]
    if not found:
        return None
    mus = [m.gdp_mu() for m in found]
    mu = None if any(v is None for v in mus) else max(mus)
    return max(PrivacyLedger().step(m).get_epsilon(spec.delta) for m in found), mu


def gradient_canary_audit(
    defense: str,
    dataset: str | GraphDataset,
    epsilon: float | str,
    *,
    canaries: int = 1000,
    runs: int = 1,
    overrides: dict[str, Any] | None = None,
    split: str | None = None,
    seed: int = 0,
    delta: float | str = "auto",
    device: str = "auto",
    data_root: str | None = None,
    dataset_options: dict[str, Any] | None = None,
    design: dict[str, Any] | None = None,
    confidence: float = 0.95,
    out: str | Path | None = None,
    progress: bool = True,
    keep_scores: bool = True,
) -> CanaryAuditRecord:
    """Run the gradient-canary audit (module docstring) and return (and, with ``out``, write) its
    JSON record (a ``dict`` with ``.verdict`` and ``.certified_epsilon_lower_bound``). ``design``: ``module`` (:func:`dpsgd_modules`; default the first), ``observe``
    (:data:`dpaudit.auditing.gradient_canary.OBSERVATIONS`, default ``"iterates"``), ``claim``
    (``"module"`` or ``"total"``).

    Args:
        defense: a registered DP-SGD defense's name.
        dataset: a dataset name or a loaded :class:`~dpaudit.data.datasets.GraphDataset`.
        epsilon: its target ε.
        canaries: gradient canaries per run.
        runs: independent trainings, fresh coins each.
        overrides: the defense's hyperparameter overrides.
        split: the split spec; ``None``: the default.
        seed: the audit's seed.
        delta: δ, or ``"auto"``.
        device: torch device.
        data_root: where to find the dataset.
        dataset_options: options of :func:`~dpaudit.data.datasets.load_dataset`.
        design: the options above.
        confidence: confidence of the certified lower bound.
        out: where to write the JSON record; ``None``: not written.
        progress: show a progress bar.
        keep_scores: keep every score and coin in the record.

    Returns:
        The JSON record.

    Raises:
        ConfigurationError: invalid arguments, refused before any training.
    """
    from tqdm.auto import tqdm

    from dpaudit.training.dpsgd import DiracCanaries, inserting_canaries

    cls, options = check_gradient_request(defense, epsilon, canaries, runs, overrides, delta, device, seed, design)
    base = (
        dataset
        if isinstance(dataset, GraphDataset)
        else load_dataset(dataset, root=data_root, **(dataset_options or {}))
    )
    sp = make_split(base, split, seed)
    probe = cls(epsilon=epsilon, delta=delta, seed=seed, device=device, **(overrides or {}))
    run_delta = probe.resolve_delta(base, sp)
    canary_design = game.DiracDesign(canaries, seed)
    record = CanaryAuditRecord(
        {
            "schema": CANARY_SCHEMA,
            "version": CANARY_SCHEMA_VERSION,
            "defense": defense,
            "dataset": base.name,
            "dataset_fingerprint": base.fingerprint,
            "split": sp.spec,
            "seed": int(seed),
            "kind": "gradient",
            "unit": cls.unit,
            "target_epsilon": probe.epsilon,
            "defense_delta": run_delta,
            "overrides": dict(overrides or {}),
            "canaries": canaries,
            "design": {},
            "module": options["module"],
            "runs_requested": runs,
            "confidence": confidence,
            "partial": False,
        }
    )
    scores: list[np.ndarray] = []
    coins: list[np.ndarray] = []
    per_run: list[dict[str, Any]] = []
    interrupted = False
    try:
        for r in tqdm(range(runs), desc=f"gradient canary audit {defense}", disable=None if progress else True):
            start = time.perf_counter()
            hook = DiracCanaries(
                canary_design,
                game.fair_coins(seed, r),
                seed=sampling_seed(seed, r),
                module_label=options["label"],
                centre=options["observe"] == "centred",
            )
            instance = cls(epsilon=epsilon, delta=run_delta, seed=seed + r, device=device, **(overrides or {}))
            with inserting_canaries(hook):
                model = instance.fit(base, sp)
            if not hook.attached:
                raise DPAuditError(f"{defense} trained no noisy DP-SGD run for module {options['module']!r}")
            s = game.scores(hook, options["observe"])
            spec = model.privacy
            scores.append(s)
            coins.append(hook.included)
            module = module_claim(spec, hook)
            per_run.append(
                {
                    "run": r,
                    "seed": seed + r,
                    "included": int(hook.included.sum()),
                    "spent_epsilon": spec.epsilon,
                    "spent_mu": spec.gdp_mu,
                    "module_epsilon": None if module is None else module[0],
                    "module_mu": None if module is None else module[1],
                    "delta": spec.delta,
                    "unit": spec.unit,
                    "sound": spec.sound,
                    "protocol": spec.protocol,
                    "hypothesis": spec.hypothesis,
                    "auc": auc_or_none(s, hook.included),
                    "run_label": hook.label,
                    "sample_rate": hook.sample_rate,
                    "max_grad_norm": hook.max_grad_norm,
                    "law": hook.law.describe(),
                    "steps": hook.steps,
                    "sampled_rate": game.sampling_rate_seen(hook),
                    "seconds": time.perf_counter() - start,
                }
            )
            record["design"] = {**canary_design.describe(), "observe": options["observe"], "claim": options["claim"]}
    except KeyboardInterrupt:
        interrupted = True
        record["partial"] = True
        log.warning("interrupted after %d finished run(s); writing them", len(per_run))
    record.update(_summarise(per_run, scores, coins, options, run_delta, confidence, keep_scores))
    if out is not None:
        atomic_write_json(out, record)
    if interrupted:
        raise KeyboardInterrupt
    return record


def _claim(per_run: list[dict[str, Any]], scope: str) -> tuple[float, float | None, str]:
    """(the ε claim tested, its μ-GDP claim or ``None``, its scope): the maximum over runs of the
    module's or of the spec's total; a run whose spec has no record of the audited run falls back
    to the total. μ only when every run states one."""
    if scope == "module" and all(r["module_epsilon"] is not None for r in per_run):
        epsilon_key, mu_key = "module_epsilon", "module_mu"
    else:
        epsilon_key, mu_key, scope = "spent_epsilon", "spent_mu", "total"
    mus = [r[mu_key] for r in per_run]
    return max(r[epsilon_key] for r in per_run), None if None in mus else max(mus), scope


def _summarise(per_run, scores, coins, options, run_delta, confidence, keep_scores) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(per_run), "per_run": per_run, "score": _score_name(options["observe"])}
    notes: list[str] = []
    if not per_run:
        out.update(
            claimed_epsilon=None,
            claim_delta=None,
            bound_valid=False,
            coverage=COVERAGE,
            notes=notes,
            epsilon_lower_bound=None,
            verdict="not applicable",
            auc=None,
            why="no run finished",
        )
        return out
    claim, claimed_mu, scope = _claim(per_run, options["claim"])
    if scope != options["claim"]:
        notes.append("the spec records no mechanism with the audited run's rate and steps: compared with its total ε")
    if any(r["sound"] is False for r in per_run):
        notes.append(
            "the defense's spec is sound: false (it lists unaccounted steps): its ε is not a guarantee for "
            "the unit it names, only for the relation its accountant proves"
        )
    out.update(
        claimed_epsilon=claim,
        claim_delta=run_delta,
        claim_scope=scope,
        total_epsilon=max(r["spent_epsilon"] for r in per_run),
        bound_valid=True,
        coverage=_coverage(per_run),
        notes=notes,
    )
    run_ids = np.concatenate([np.full(len(c), i) for i, c in enumerate(coins)])
    out.update(
        summarise_game(
            np.concatenate(scores),
            np.concatenate(coins),
            delta=run_delta,
            claimed_epsilon=claim,
            claimed_mu=claimed_mu,
            run_ids=run_ids,
            confidence=confidence,
            keep_scores=keep_scores,
            notes=notes,
            hypothesis=any(r["hypothesis"] for r in per_run),
            mechanism=_claimed_mechanism(per_run, claim, run_delta, options, out["coverage"]),
        )
    )
    return out


def _claimed_mechanism(per_run, claim: float, delta: float, options, coverage: str) -> dict[str, Any] | None:
    """The SGM(σ, q, T) the claim names, for the one-run hypothesis test
    (:func:`dpaudit.auditing.hypothesis.sgm_hypothesis_test`), or ``None`` where that test's score
    law does not apply: several runs (it reads one run's canaries), a score other than the summed
    iterates, or canaries whose law is not one DP-SGD example's (DP-GNN's, DPAR's).

    Args:
        per_run: the finished runs' rows.
        claim: the ε claim tested.
        delta: its δ.
        options: the audit's options (``observe``).
        coverage: what the bound covers (:data:`COVERAGE` for DP-SGD examples).

    Returns:
        ``noise_multiplier``, ``sample_rate``, ``steps``, ``max_grad_norm``, or ``None``.
    """
    if len(per_run) != 1 or options["observe"] != "iterates" or coverage != COVERAGE or not math.isfinite(claim):
        return None
    run = per_run[0]
    return {
        "noise_multiplier": claimed_noise_multiplier(claim, delta, run["sample_rate"], run["steps"]),
        "sample_rate": run["sample_rate"],
        "steps": run["steps"],
        "max_grad_norm": run["max_grad_norm"],
    }


def _coverage(per_run: list[dict[str, Any]]) -> str:
    """What the bound covers, from the canaries' law: DP-GNN's node canaries, or DP-SGD examples."""
    from defenses.dpar import canaries as dpar_canaries
    from defenses.dpgnn import canaries as dpgnn_canaries

    law = per_run[0]["law"]["law"]
    if law == dpgnn_canaries.LAW:
        return dpgnn_canaries.COVERAGE
    return dpar_canaries.COVERAGE if law == dpar_canaries.LAW else COVERAGE


def _score_name(observe: str) -> str:
    return f"white-box gradient canaries: {SCORE_NAMES[observe]}"
