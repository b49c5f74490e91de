"""Attack benchmark: strength on Cora (public split), G-BASE's protocol on Cora, and the attacks ×
defenses table on cora_ml.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_attacks.py --data-root DIR [--part strength,gbase|table|all]
        [--strength-runs 3] [--strength-refs 4] [--defenses gcn,mlp-dp,...] [--epsilons 1,8,inf]
    python benchmarks/bench_attacks.py --merge PASS.json [PASS.json ...]   # fold side-by-side passes into --out

Part ``strength`` (Cora, public split, default recipes): every attack against ``gcn`` —
threshold (loss), TSTF, LiRA online and offline, RMIA online and offline (``--strength-refs``
reference models each, ``--strength-runs`` runs), the shadow-trained embedding probe, link
stealing attack-0 and LinkTeller (with precision/recall at the true density over 500 sampled
nodes and the AUC against 2-hop non-edges) — and the membership attacks against ``mlp-dp`` at
ε = 1; online RMIA also with ``tie_break=none`` (the reference implementation's count). Part
``gbase`` (Cora, ``inductive:0.5,0.5``: the target trains on the subgraph induced by a random
half of the nodes, as in G-BASE, Lassila et al., NeurIPS 2025): RMIA and LiRA online and offline
with ``protocol=g-base`` (features-only queries), online RMIA also with full-graph queries and
with ``tie_break=none``. Part ``table`` (cora_ml, split ``--split``): every attack against every
registered defense at ε ∈ ``--epsilons`` (non-private baselines at ε = ∞ only).

Each row reports AUC (95 % bootstrap CI), TPR at FPR 1 % and 0.1 % as mean ± sd over the
attack's seeds (runs) with the number of negatives per run (:mod:`dpaudit.auditing.low_fpr`; a level
below one false positive is marked unresolved), the ε lower bound with its δ, coverage and the
AUC ceiling, attack-specific details, attack seconds and peak RSS. Tables
are printed and written to ``benchmarks/results/attacks.md`` (+ ``attacks.json``); a section
of the existing file that starts with ``NOTES_MARKER`` is kept (hand-written reading notes).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _harness import add_smoke_argument, start_smoke

import attacks
from attacks import _common as C
from attacks.link_stealing import baseline_runs as pair_baseline
from attacks.membership import baseline_runs as node_baseline
from dpaudit.app.pipeline import train
from dpaudit.data.datasets import load_dataset
from dpaudit.data.splits import make_split
from dpaudit.runtime import atomic_write_text
from dpaudit.training.registry import available_defenses, get_defense

OUT = Path(__file__).resolve().parent / "results"
NOTES_MARKER = "<!-- hand-written notes below: kept when the tables are regenerated -->"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def fmt(v, d=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.{d}f}"
    return str(v)


def tpr_cell(level: dict | None) -> str:
    """``0.593 ± 0.083`` (one run: the value alone), ``(unresolved)`` below one false positive."""
    if not level or level.get("mean") is None:
        return "-"
    text = fmt(level["mean"]) if level.get("sd") is None else f"{fmt(level['mean'])} ± {fmt(level['sd'])}"
    return text if level.get("resolved") else f"{text} (unresolved)"


def row_for(defense, eps, name, result, seconds, test_acc):
    ci = result.auc_ci
    low = result.extra.get("low_fpr") or {}
    return {
        "defense": defense,
        "ε": fmt(eps, 0),
        "test acc": fmt(test_acc),
        "attack": name,
        "AUC": fmt(result.auc),
        "baseline AUC": fmt(result.baseline_auc),
        "95% CI": f"[{fmt(ci[0])}, {fmt(ci[1])}]",
        "TPR@1%": tpr_cell(low.get("0.01")),
        "TPR@0.1%": tpr_cell(low.get("0.001")),
        "negatives": fmt((low.get("0.01") or {}).get("negatives")),
        "ε_LB (δ)": f"{fmt(result.epsilon_lower_bound, 2)} ({result.epsilon_lower_bound_delta:.0e})"
        if result.epsilon_lower_bound_delta
        else f"{fmt(result.epsilon_lower_bound, 2)} (0)",
        "covered": "yes" if result.covered_by_guarantee else "no",
        "AUC ceiling": fmt(result.ceiling_auc),
        "details": "; ".join(filter(None, [details(result), spent_note(result, eps)])),
        "runs": str(len(result.runs)),
        "seconds": f"{seconds:.1f}",
        "peak MB": f"{peak_mb():.0f}",
        "low_fpr": low,
    }


def spent_note(result, eps: float) -> str:
    """The ε the model had spent when the attack ended, where its queries cost more than training (a
    query-charged model: GAP pays for every release its answers need). 'covered' and the ceiling
    refer to that total, not to the ε column; it is cumulative over the attacks run before on the
    same model in the pass."""
    summary = result.model or {}
    spent = summary.get("epsilon_total", summary.get("epsilon"))  # training ε ⊕ releases charged to it
    if spent is None or math.isinf(eps) or spent <= eps * 1.001:
        return ""
    charged = summary.get("charged_releases")
    releases = f", {charged} releases over the training graph charged" if charged else ""
    return f"ε spent after this attack's queries {spent:.2f}{releases} (covered refers to it)"


def details(result) -> str:
    """Attack-specific numbers worth a glance (LinkTeller's density protocol, RMIA's a, ...)."""
    e = result.extra
    if result.attack == "linkteller":
        out = []
        if "precision_at_density" in e:
            out.append(f"P/R at density {e['precision_at_density']:.2f}/{e['recall_at_density']:.2f}")
        if "auc_hard_negatives" in e:
            out.append(f"AUC vs 2-hop non-edges {e['auc_hard_negatives']:.3f}")
        return "; ".join(out)
    if result.attack in ("mia-rmia", "mia-lira"):
        sizes = sorted({s for r in result.runs for s in r.get("reference_train_sizes", [])})
        out = f"ref. sizes {'/'.join(map(str, sizes))} (target {result.runs[0].get('target_train_size')})"
        out += f", pool {'/'.join(sorted({str(r.get('reference_pool')) for r in result.runs}))}"
        out += f", query {e.get('query')}"
        if result.attack == "mia-rmia":
            out += f", tie-break {e.get('tie_break')}"
            if e.get("offline"):
                out += ", a = " + ", ".join(fmt(a, 2) for a in e.get("a", []))
        return out
    if result.attack == "embedding-probe":
        return "diagnostic: no ε_LB (bound_valid false)"
    if result.attack == "mia-threshold":
        return "AUC loss/conf/entropy " + "/".join(fmt(v) for v in e.get("auc_by_score", {}).values())
    return ""


def overrides_for(defense: str, ds) -> dict:
    """Settings the recorded gap-ndp rows ran with: the degree promise at the graph's largest
    degree (the promise's default, 100, is refused on cora_ml; the default degree projection
    would train at D = 100 with its larger Δ)."""
    if defense != "gap-ndp":
        return {}
    degree = int(torch.bincount(ds.data.edge_index[1], minlength=ds.num_nodes).max())
    return {"max_degree": degree, "degree_bound": "promise"}


def put_row(table: list[dict], row: dict, replace: bool) -> None:
    """Append ``row`` to ``table``; with ``replace``, in place of an earlier row for the same
    defense, ε and attack (a rerun supersedes it rather than sitting beside it), else after the
    last row of the same defense and ε, so a model's rows stay together."""
    if replace:
        same_model = [
            i for i, old in enumerate(table) if (old.get("defense"), old.get("ε")) == (row.get("defense"), row.get("ε"))
        ]
        for i in same_model:
            if table[i].get("attack") == row.get("attack"):
                table[i] = row
                return
        if same_model:
            table.insert(same_model[-1] + 1, row)
            return
    table.append(row)


def markdown(rows, columns) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


COLUMNS = [
    "defense",
    "ε",
    "test acc",
    "attack",
    "AUC",
    "baseline AUC",
    "95% CI",
    "TPR@1%",
    "TPR@0.1%",
    "negatives",
    "ε_LB (δ)",
    "covered",
    "AUC ceiling",
    "details",
    "runs",
    "seconds",
    "peak MB",
]


PARTS = ("strength", "gbase", "table", "baseline")

#: how the 'baseline AUC' column is computed (the sentence the results file's header carries)
BASELINE_NOTE = (
    "'baseline AUC': the model-free baseline, the AUC the same attacker gets from the node features alone on "
    "the same pairs or targets (AttackResult.baseline_auc; the attacked model is never queried): link-steal and "
    "linkteller score a pair by the cosine similarity of its endpoints' features; membership attacks by minus the "
    "distance of a node's features to its class's mean (≈ 0.5 under a random split). AUC − baseline AUC is what "
    "the model adds. The baselines of rows run before the column existed were recomputed by "
    "`python benchmarks/bench_attacks.py --part baseline`, which redraws each row's pairs or targets with the "
    "attack's own sampling code and seeds (seed 0, the row's runs and negatives) without training or querying "
    "any model; '-' for mia-tstf, mia-lira, mia-rmia and embedding-probe rows, whose audit draws depend on each "
    "attack's shadow reservation and were not redrawn (new runs of these attacks report it)."
)
#: the split each section's models were trained on (:func:`fill_baselines`)
SECTION_DATA = {"strength": ("cora", None), "gbase": ("cora", "inductive:0.5,0.5")}


def _row_baseline(row: dict, ds, split, seed: int) -> str:
    """The model-free baseline AUC of one existing table row, its pairs or targets redrawn exactly as the
    attack drew them (seed ``seed`` + 7919 r for run r; the row's runs and negatives); '-' where not redrawn."""
    name, runs, negatives = row.get("attack", ""), row.get("runs"), row.get("negatives")
    if not runs or not negatives or negatives == "-":
        return "-"
    runs, negatives = int(runs), int(negatives)
    if name.startswith(("link-steal", "linkteller")):
        x = ds.data.x.cpu().numpy()
        pairs = [
            C.sample_pairs(ds.data.edge_index, ds.num_nodes, negatives, np.random.default_rng(seed + 7919 * r))
            for r in range(runs)
        ]
        return fmt(C.baseline_auc(pair_baseline(x, pairs)))
    if name.startswith("mia-threshold"):
        targets = [C.partition(ds, split, seed + 7919 * r, None, 1).target.nodes_and_labels() for r in range(runs)]
        if int((targets[0][1] == 0).sum()) != negatives:
            return "-"  # not the draw the row was scored on
        nodes = [t[0].numpy() for t in targets]
        return fmt(C.baseline_auc(node_baseline(ds, nodes, [(None, t[1].numpy()) for t in targets])))
    return "-"


def fill_baselines(out: Path, data_root, seed: int) -> None:
    """Fill the 'baseline AUC' column of every row of ``out`` (its JSON and markdown) from the dataset alone."""
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    sections = {**SECTION_DATA, "table": (report.get("table_dataset", "cora_ml"), report.get("split"))}
    for section, (name, spec) in sections.items():
        if not report.get(section):
            continue
        ds = load_dataset(name, root=data_root)
        split = make_split(ds, spec, seed)
        for row in report[section]:
            row["baseline AUC"] = _row_baseline(row, ds, split, seed)
            print(section, row.get("defense"), row.get("ε"), row.get("attack"), row["baseline AUC"], flush=True)
    if BASELINE_NOTE not in report["header"]:
        report["header"] += " " + BASELINE_NOTE
    write(report, out)


#: the attacks of the cora_ml table, in their default order
TABLE_ATTACKS = ("mia-tstf", "mia-threshold", "mia-lira", "mia-rmia", "link-steal", "linkteller", "embedding-probe")


def write(report: dict, path: Path) -> None:
    parts = ["# Attack benchmark", "", report["header"], ""]
    if report["strength"]:
        parts += [
            "## Strength on Cora (public split, default recipes)",
            "",
            report.get("strength_note", ""),
            "",
            markdown(report["strength"], COLUMNS),
            "",
        ]
    if report.get("gbase"):
        parts += [
            "## G-BASE's protocol on Cora (target trained on the subgraph induced by half the nodes)",
            "",
            report.get("gbase_note", ""),
            "",
            markdown(report["gbase"], COLUMNS),
            "",
        ]
    if report["table"]:
        parts += [
            f"## All attacks × defenses on {report.get('table_dataset', 'cora_ml')} ({report['split']})",
            "",
            report["table_note"],
            "",
            markdown(report["table"], COLUMNS),
            "",
        ]
    kept = ""
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if NOTES_MARKER in text:
            kept = text[text.index(NOTES_MARKER) :]
    # atomic: a pass stopped mid-table (a time limit) leaves both files whole, with every finished row
    atomic_write_text(path.with_suffix(".json"), json.dumps(report, indent=2, default=str))
    atomic_write_text(path, "\n".join(parts) + "\n" + kept)


def merge_passes(out: Path, passes: list[Path]) -> None:
    """Fold the cora_ml rows of passes run side by side (each with its own ``--out``) into ``out``:
    a pass's row replaces the row for the same defense, ε and attack, and each pass's command
    and settings join the header and the table's note, so every row's origin stays written."""
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    for path in passes:
        done = json.loads(path.read_text(encoding="utf-8"))
        for row in done.get("table", []):
            put_row(report["table"], row, replace=True)
        report["header"] += f" Rows replaced: `{done['command']}`."
        report["table_note"] = (report.get("table_note", "") + " " + done.get("table_note", "")).strip()
    write(report, out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default=None)
    ap.add_argument(
        "--part",
        default="all",
        help="strength, gbase, table or all, or a comma list of them; baseline: fill the 'baseline AUC' column of "
        "the existing rows (no model trained or queried)",
    )
    ap.add_argument("--defenses", default=None, help="comma list (default: every registered defense)")
    ap.add_argument("--epsilons", default="1,8,inf")
    ap.add_argument("--split", default="random:0.3,0.1,0.3")
    ap.add_argument("--strength-runs", type=int, default=3)
    ap.add_argument("--strength-refs", type=int, default=4, help="reference models of LiRA/RMIA per run (even)")
    ap.add_argument("--linkteller-pr-nodes", type=int, default=500)
    ap.add_argument("--tstf-runs", type=int, default=2)
    ap.add_argument("--lira-shadows", type=int, default=2)
    ap.add_argument(
        "--membership-runs",
        type=int,
        default=1,
        help="table: runs (attack seeds) of mia-threshold, mia-lira and mia-rmia, for a mean ± sd of their low-FPR TPRs",
    )
    ap.add_argument("--linkteller-pairs", type=int, default=100)
    ap.add_argument("--linkteller-runs", type=int, default=2, help="table: runs (attack seeds) of linkteller")
    ap.add_argument("--probe-runs", type=int, default=2, help="table: runs (attack seeds) of embedding-probe")
    ap.add_argument("--attacks", default=None, help="comma list, run in this order (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT / "attacks.md"))
    ap.add_argument("--append", action="store_true", help="add rows to the tables already in --out (.json)")
    ap.add_argument(
        "--replace-rows",
        action="store_true",
        help="like --append, but a row of this pass replaces the earlier row for the same defense, ε and attack",
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="PASS.json",
        help="run no part: fold the cora_ml rows of these passes (each written with its own --out) into --out, "
        "replacing rows for the same defense, ε and attack",
    )
    ap.add_argument(
        "--keep-table", action="store_true", help="keep the cora_ml table (and its note) already in --out (.json)"
    )
    add_smoke_argument(
        ap, "--part table on generated csbm (1000 nodes): gcn at ε = ∞, every attack, one run each, fewest references"
    )
    args = ap.parse_args(argv)
    table_dataset = "cora_ml"
    if args.smoke:
        args.out, table_dataset = str(start_smoke() / "attacks.md"), "csbm"
        args.part, args.defenses, args.epsilons, args.append, args.replace_rows = "table", "gcn", "inf", False, False
        args.merge, args.keep_table = None, False
        args.tstf_runs = args.membership_runs = args.linkteller_runs = args.probe_runs = 1
        args.lira_shadows, args.linkteller_pairs, args.linkteller_pr_nodes = 2, 20, 50
    parts = set(args.part.split(","))
    if not parts <= set(PARTS) | {"all"}:
        ap.error(f"--part: choose among {', '.join(PARTS)}, all (comma-separated), got {args.part!r}")
    if "all" in parts:
        parts = set(PARTS) - {"baseline"}
    runs = (args.membership_runs, args.tstf_runs, args.strength_runs, args.linkteller_runs, args.probe_runs)
    if min(runs) < 1:
        ap.error("--membership-runs, --tstf-runs, --strength-runs, --linkteller-runs and --probe-runs must be >= 1")
    if args.attacks and not set(args.attacks.split(",")) <= set(TABLE_ATTACKS):
        unknown = sorted(set(args.attacks.split(",")) - set(TABLE_ATTACKS))
        ap.error(f"--attacks: unknown {', '.join(unknown)}; choose among {', '.join(TABLE_ATTACKS)}")
    out = Path(args.out)
    if "baseline" in parts:
        fill_baselines(out, args.data_root, args.seed)
        return 0
    if args.merge:
        missing = [p for p in [out.with_suffix(".json"), *map(Path, args.merge)] if not p.is_file()]
        if missing:
            ap.error(f"--merge: no such file: {', '.join(map(str, missing))}")
        merge_passes(out, [Path(p) for p in args.merge])
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", *sys.argv])
    report = {
        "command": command,
        "header": f"Command: `{command}`. Machine: shared 2-core CPU (torch CPU). "
        "AUC = mean over runs; CI = stratified percentile bootstrap of the mean (1000 draws); ε_LB on run 0 "
        "(one-run pair test of Steinke et al. 2023 on the randomized audit game's pairs, 95 %; '-' where bound_valid is false). "
        "TPR@1% and TPR@0.1%: mean ± sd over the attack's runs (each run an attack seed: new audit draw, references "
        "and population); 'negatives' = non-members (non-edges for edge attacks) per run; with n negatives FPR f "
        "allows ⌊f·n⌋ false positives, and a level below one false positive is marked '(unresolved)': it is the TPR "
        "at zero false positives.",
        "strength": [],
        "gbase": [],
        "table": [],
        "split": args.split,
        "table_dataset": table_dataset,
        "table_note": "",
    }
    merge = args.append or args.replace_rows
    if merge and out.with_suffix(".json").is_file():
        previous = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
        report["strength"], report["table"] = previous.get("strength", []), previous.get("table", [])
        report["gbase"], report["gbase_note"] = previous.get("gbase", []), previous.get("gbase_note", "")
        verb = "Rows replaced" if args.replace_rows else "Appended"
        report["header"] = previous.get("header", "") + f" {verb}: `{command}`."
        report["table_note"] = previous.get("table_note", "")
    elif args.keep_table and out.with_suffix(".json").is_file():
        previous = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
        report["table"], report["table_note"] = previous.get("table", []), previous.get("table_note", "")
        report["split"] = previous.get("split", report["split"])
        report["table_dataset"] = previous.get("table_dataset", "cora_ml")
    if "strength" in parts:
        ds = load_dataset("cora", root=args.data_root)
        n, k = args.strength_runs, args.strength_refs
        membership = [
            ("mia-threshold", "mia-threshold (loss)", {}),
            ("mia-tstf", "mia-tstf", {"runs": n}),
            ("mia-lira", f"mia-lira online ({k} shadows)", {"runs": n, "num_shadows": k}),
            ("mia-lira", f"mia-lira offline ({k} shadows)", {"runs": n, "num_shadows": k, "online": False}),
            ("mia-rmia", f"mia-rmia online ({k} refs)", {"runs": n, "num_references": k}),
            (
                "mia-rmia",
                f"mia-rmia online ({k} refs, tie_break=none)",
                {"runs": n, "num_references": k, "tie_break": "none"},
            ),
            ("mia-rmia", f"mia-rmia offline ({k} refs)", {"runs": n, "num_references": k, "offline": True}),
        ]
        others = [
            ("embedding-probe", "embedding-probe (shadow-trained)", {"runs": n, "projections": []}),
            ("link-steal", "link-steal attack-0 (correlation)", {"runs": n}),
            ("linkteller", "linkteller", {"num_pairs": 250, "pr_nodes": args.linkteller_pr_nodes}),
        ]
        report["strength_note"] = (
            f"Settings: {n} runs per shadow-based attack (new audit draw, references and population each run); "
            f"LiRA and RMIA with {k} reference models per run trained with the target's recipe (online: IN/OUT "
            "pairs over the audit nodes; offline: pool nodes only), RMIA population 500 nodes, γ = 1, offline a "
            "chosen by attacking one reference with the others; LinkTeller 250 edges + 250 random non-edges "
            f"(headline AUC), 250 2-hop non-edges, {args.linkteller_pr_nodes} sampled nodes for precision/recall "
            "at the true density. Audit set: the 140 training nodes and 140 test nodes (public split: membership "
            "is not random, so no ε_LB here is a valid bound). TPR@0.1 % with 140 non-members is TPR at FPR = 0."
        )
        for defense, eps, plan in (("gcn", math.inf, membership + others), ("mlp-dp", 1.0, membership)):
            res = train(defense, ds, epsilon=eps, seed=args.seed)
            for name, label, settings in plan:
                start = time.perf_counter()
                try:
                    result = attacks.run(name, res.model, ds, seed=args.seed, **settings)
                except Exception as exc:  # noqa: BLE001 - record, keep benchmarking the others
                    report["strength"].append(
                        {"defense": defense, "ε": fmt(eps, 0), "attack": f"{label} failed: {exc}"}
                    )
                    continue
                row = row_for(defense, eps, name, result, time.perf_counter() - start, res.metrics["test_accuracy"])
                row["attack"] = label
                report["strength"].append(row)
                print(row, flush=True)
                write(report, out)
    if "gbase" in parts:
        ds = load_dataset("cora", root=args.data_root)
        n, k = args.strength_runs, args.strength_refs
        g = {"runs": n, "protocol": "g-base"}
        plan = [
            ("mia-rmia", f"mia-rmia online ({k} refs), G-BASE", {**g, "num_references": k}),
            (
                "mia-rmia",
                f"mia-rmia online ({k} refs), G-BASE, tie_break=none",
                {**g, "num_references": k, "tie_break": "none"},
            ),
            ("mia-rmia", f"mia-rmia offline ({k} refs), G-BASE", {**g, "num_references": k, "offline": True}),
            ("mia-lira", f"mia-lira online ({k} shadows), G-BASE", {**g, "num_shadows": k}),
            ("mia-lira", f"mia-lira offline ({k} shadows), G-BASE", {**g, "num_shadows": k, "online": False}),
            ("mia-rmia", f"mia-rmia online ({k} refs), full-graph queries", {"runs": n, "num_references": k}),
        ]
        report["gbase_note"] = (
            f"Target: `gcn` (default recipe) trained with `--split inductive:0.5,0.5` (1,354 training nodes; training "
            f"sees only edges among them). {n} runs per attack, {k} reference models per run trained with the target's "
            "recipe on the subgraph induced by their own training nodes, exactly as many as the target's where online "
            "(details: sizes, pool); `protocol=g-base` queries every model on each node's features alone. A random "
            "split scored on the randomized audit game's pairs, so ε_LB is a valid bound (of a non-private model)."
        )
        res = train("gcn", ds, epsilon=math.inf, seed=args.seed, split="inductive:0.5,0.5")
        for name, label, settings in plan:
            start = time.perf_counter()
            result = attacks.run(name, res.model, ds, seed=args.seed, **settings)
            row = row_for("gcn", math.inf, name, result, time.perf_counter() - start, res.metrics["test_accuracy"])
            row["attack"] = label
            report["gbase"].append(row)
            print(row, flush=True)
            write(report, out)
    if "table" in parts:
        ds = load_dataset(report["table_dataset"], root=args.data_root)
        names = args.defenses.split(",") if args.defenses else available_defenses()
        epsilons = [float(e) for e in args.epsilons.split(",")]
        plan = {
            "mia-tstf": {"runs": args.tstf_runs},
            "mia-threshold": {"runs": args.membership_runs},
            "mia-lira": {"num_shadows": args.lira_shadows, "runs": args.membership_runs},
            "mia-rmia": {"num_references": args.lira_shadows, "runs": args.membership_runs},
            "link-steal": {"runs": 3},
            "linkteller": {
                "num_pairs": args.linkteller_pairs,
                "runs": args.linkteller_runs,
                "pr_nodes": args.linkteller_pr_nodes,
            },
            # the projections are pictures only: the table reads the shadow-trained probe's scores
            "embedding-probe": {"runs": args.probe_runs, "projections": []},
        }
        if args.attacks:
            # in the order given: a pass stopped for time has the attacks listed first
            plan = {k: plan[k] for k in args.attacks.split(",")}
        note = (
            f"Reduced settings for the shared CPU: mia-tstf {args.tstf_runs} runs, mia-threshold, mia-lira and "
            f"mia-rmia {args.membership_runs} run(s), mia-lira (online) and mia-rmia "
            f"(online) {args.lira_shadows} references, link-steal 3 runs × ≤1000 edges, linkteller {args.linkteller_runs} "
            f"run(s) × {args.linkteller_pairs} edges + as many non-edges (precision/recall at the true density over "
            f"{args.linkteller_pr_nodes} sampled nodes), embedding-probe {args.probe_runs} run(s) (no projections). "
            "Defenses with default hyperparameters (gap-ndp: max_degree = the graph's "
            "largest degree, which its sound node-level guarantee needs), seed "
            f"{args.seed}. Non-private baselines only at ε = ∞. Attacks in this pass: {', '.join(plan)}."
        )
        if args.replace_rows:
            note = f"Rows with a 'negatives' count come from the latest pass and replace earlier ones: {note}"
        report["table_note"] = (report["table_note"] + " " + note).strip() if merge else note
        for defense in names:
            cls = get_defense(defense)
            for eps in epsilons if cls.unit is not None else [math.inf]:
                start = time.perf_counter()
                try:
                    res = train(
                        defense, ds, epsilon=eps, seed=args.seed, split=args.split, overrides=overrides_for(defense, ds)
                    )
                except Exception as exc:  # noqa: BLE001 - record, keep benchmarking the others
                    if args.smoke:  # a smoke run fails on what a measurement would record
                        raise
                    print(f"{defense} ε={eps}: training failed: {exc}", flush=True)
                    put_row(
                        report["table"],
                        {"defense": defense, "ε": fmt(eps, 0), "attack": f"training failed: {exc}"},
                        args.replace_rows,
                    )
                    continue
                print(f"{defense} ε={eps}: trained in {time.perf_counter() - start:.0f}s", flush=True)
                for name, settings in plan.items():
                    start = time.perf_counter()
                    try:
                        result = attacks.run(name, res.model, ds, seed=args.seed, **settings)
                    except Exception as exc:  # noqa: BLE001
                        if args.smoke:
                            raise
                        put_row(
                            report["table"],
                            {"defense": defense, "ε": fmt(eps, 0), "attack": f"{name} failed: {exc}"},
                            args.replace_rows,
                        )
                        continue
                    row = row_for(defense, eps, name, result, time.perf_counter() - start, res.metrics["test_accuracy"])
                    put_row(report["table"], row, args.replace_rows)
                    print(row, flush=True)
                    write(report, out)
    write(report, out)
    print(markdown(report["strength"] + report["table"], COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
