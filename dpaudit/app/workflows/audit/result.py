"""What an audit returns: :class:`AuditResult` (every attack's result, the plan, the per-node risk,
the canary evidence) as a study cell record, a report and its JSON sidecar."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from dpaudit.app.outputs import check_report_paths
from dpaudit.app.workflows.config import content_hash, dataset_summary, now_iso
from dpaudit.app.workflows.store import CELL_SCHEMA, CELL_SCHEMA_VERSION
from dpaudit.auditing.verdict import Verdict, study_verdict


class AuditResult:
    """Every attack run against one released model.

    Attributes:
        model: the audited :class:`~dpaudit.release.model.ReleasedModel`.
        dataset: the dataset the attacks ran on.
        results: attack name → :class:`~dpaudit.auditing.results.AttackResult`.
        errors: attack name → why it could not run on this model.
        seconds: attack name → wall-clock seconds.
        cpu_seconds: attack name → CPU seconds of this process (user + system), the measure that
            a loaded machine does not inflate.
        plan: what was planned (:func:`audit_plan`), with the estimate made before any work.
        interrupted: True when Ctrl-C stopped the audit; ``results`` holds what finished.
        node_risk: per-node membership diagnostics (:func:`node_risk`) or None.
        query_api: for a query-charged model, what its queries would cost an interactive API
            (:func:`query_api_finding`); None otherwise. ``model.privacy`` stays the saved spec.
        canaries: the canary audits given to :func:`audit` re-tested against the model's claim
            (:func:`canary_evidence`); they enter the model's verdict.
    """

    def __init__(
        self,
        model,
        dataset,
        results: dict,
        errors: dict,
        seconds: dict,
        metrics: dict,
        command=None,
        plan: dict | None = None,
        interrupted: bool = False,
        node_risk: dict | None = None,
        query_api: dict | None = None,
        cpu_seconds: dict | None = None,
        canaries: dict | None = None,
    ):
        self.model = model
        self.dataset = dataset
        self.results = results
        self.errors = errors
        self.seconds = seconds
        self.cpu_seconds = dict(cpu_seconds or {})
        self.metrics = metrics
        self.command = command
        self.plan = plan
        self.interrupted = interrupted
        self.node_risk = node_risk
        self.query_api = query_api
        #: canary audits of the model's claim (:func:`canary_evidence`), by ``"<kind> canaries"``
        self.canaries = dict(canaries or {})

    @property
    def verdict(self) -> Verdict:
        """The verdict on this model (:class:`dpaudit.auditing.verdict.Verdict`), computed from its
        attack results, its claim and its canary evidence: the object its report renders."""
        return study_verdict([self.record(with_artifacts=False)]).models[0]

    @property
    def skipped(self) -> list[str]:
        """Planned attacks that never ran (the audit was interrupted first)."""
        ran = set(self.results) | set(self.errors)
        return [s["attack"] for s in (self.plan or {}).get("attacks", []) if s["attack"] not in ran]

    def record(self, with_artifacts: bool = True) -> dict[str, Any]:
        """The audit as one study cell record (see :mod:`dpaudit.app.workflows.study`).

        Args:
            with_artifacts: keep each attack's artifacts (plots); ``False`` drops them.

        Returns:
            The cell record (JSON-serialisable).
        """
        card = self.model.card
        privacy = self.model.privacy
        target = card.get("target_epsilon")
        attacks = {}
        for name, res in self.results.items():
            d = res.to_dict()
            if not with_artifacts:
                d.pop("artifacts", None)
            attacks[name] = d
        return {
            "schema": CELL_SCHEMA,
            "version": CELL_SCHEMA_VERSION,
            "cell_id": f"audit-{content_hash({'card': card, 'privacy': privacy.to_dict()})}",
            "config_hash": None,
            "status": "done",
            "defense": str(card.get("method") or self.model.kind),
            "epsilon": target if target is not None else (privacy.epsilon if privacy.is_private else None),
            "seed": int(self.model.provenance("seed", 0) or 0),
            "dataset": {k: v for k, v in dataset_summary(self.dataset).items() if k != "info"},
            "split": self.model.provenance("split") or card.get("split"),
            "privacy": privacy.to_dict(),
            "metrics": self.metrics,
            "card": {k: card.get(k) for k in ("method", "hyperparameters", "inference", "target_epsilon", "surrogate")}
            | {"device": self.model.provenance("device")},
            "overrides": card.get("overrides") or {},
            "attacks": attacks,
            "attack_errors": dict(self.errors),
            "attack_seconds": dict(self.seconds),
            "attack_cpu_seconds": dict(self.cpu_seconds),
            "interrupted": self.interrupted,
            "skipped_attacks": self.skipped,
            "plan": self.plan,
            "node_risk": self.node_risk,
            "query_api": self.query_api,
            "canaries": self.canaries,
            "error": None,
            "seconds": sum(self.seconds.values()),
            "started_at": None,
            "finished_at": now_iso(),
            "run_id": None,
            "worker": None,
        }

    def report_meta(self) -> dict[str, Any]:
        """The report's metadata: title, dataset summary, defenses, attacks, the command that retrains the
        recipe on a random split, and library versions for reproducibility.
        """
        from dpaudit import __version__
        from dpaudit.runtime import library_versions

        card = self.model.card
        return {
            "title": f"dpaudit audit of {card.get('method') or self.model.kind} on {self.dataset.name}",
            "kind": "audit",
            "dataset": dataset_summary(self.dataset),
            "defenses": [str(card.get("method") or self.model.kind)],
            "attacks": list(self.results) + list(self.errors),
            "train_command": train_command(card, seed=self.model.provenance("seed", 0)),
            "reproducibility": {
                "dpaudit_version": __version__,
                "config_hash": self.record(with_artifacts=False)["cell_id"],
                "dataset_fingerprint": self.dataset.fingerprint,
                "seeds": [self.model.provenance("seed")],
                "split": (card.get("split") or {}).get("spec"),
                "delta": self.model.privacy.delta,
                "created": now_iso(),
                "command": self.command,
                "versions": card.get("library_versions") or library_versions(),
                "config": {
                    "model_card": {k: v for k, v in card.items() if k not in ("library_versions",)},
                    "attack_settings": {n: r.settings for n, r in self.results.items()},
                    "plan": self.plan,
                },
            },
        }

    def to_dict(self) -> dict[str, Any]:
        """The audit as a JSON-serialisable dict: :meth:`record` without artifacts."""
        return self.record(with_artifacts=False)

    def to_html(self, path: str | Path) -> Path:
        """Write the HTML report and its JSON sidecar (``.json`` next to it); the location is
        probed first (:func:`dpaudit.app.outputs.check_report_paths`), before any rendering."""
        from reports.render import write_report

        check_report_paths(path, "audit", what="to_html")
        html, _ = write_report([self.record()], self.report_meta(), path)
        return html

    def __repr__(self) -> str:
        aucs = ", ".join(f"{n}: AUC {r.auc:.3f}" for n, r in self.results.items() if r.auc is not None)
        extra = f", errors: {len(self.errors)}" if self.errors else ""
        extra += ", interrupted" if self.interrupted else ""
        return f"AuditResult({self.model.method}, {aucs or 'no result'}{extra})"


def train_command(card: dict, split: str = "random:0.75,0.1,0.15", seed: int | None = 0) -> str | None:
    """The ``dpaudit train`` command that retrains this card's recipe on a random split (the
    split that makes membership ε lower bounds valid audits); None for models without a recipe.

    Args:
        card: the model card.
        split: the split of the command.
        seed: the seed used when the card records none.

    Returns:
        The shell-quoted command, or ``None``.
    """
    method = card.get("method")
    dataset = (card.get("dataset") or {}).get("name")
    if not method or not dataset or card.get("surrogate"):
        return None
    target = card.get("target_epsilon")
    parts = ["dpaudit", "train", "--defense", str(method), "--dataset", str(dataset)]
    if target is not None:
        parts += ["--epsilon", f"{target:g}" if isinstance(target, (int, float)) else str(target)]
    parts += ["--split", split, "--seed", str(card.get("seed", seed or 0)), "--out", f"{method}-random-split"]
    return shlex.join(parts)
