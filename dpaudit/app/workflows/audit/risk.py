"""Per-node membership risk: which training nodes a threshold attack exposes most, and how
exposure varies with degree (:func:`node_risk`)."""

from __future__ import annotations

import math
from typing import Any

from dpaudit.errors import DPAuditError

#: the FPR of the nodes-at-risk threshold: 1 %, as every other TPR in the report (TPR at 1 % FPR)
NODE_RISK_FPR = 0.01


def node_risk(
    model, dataset, split, seed: int = 0, max_members: int | None = None, top: int = 10, bins: int = 30
) -> dict[str, Any] | None:
    """Per-node membership risk from the loss-threshold attack (``mia-threshold``, run 0).

    An :class:`~dpaudit.auditing.results.AttackResult` keeps aggregate statistics and a down-sampled ROC,
    not per-node scores, so the per-node view is recomputed here from the one attack whose
    scores are a deterministic function of the released model: the score of node v is
    :math:`\\operatorname{logit} p_{y_v}(v)` on one full-graph query (a monotone transform of the
    loss score :math:`\\log p_{y_v}(v)`, so every ranking and AUC is the same, but spread out near
    :math:`p = 1` where members pile up), over the same members and non-members as
    ``mia-threshold``'s run 0 (:func:`dpaudit.data.splits.membership_partition` with ``seed``).

    Returns score histograms (members vs non-members), the ``top`` members with the highest
    scores (the nodes most exposed) and, per degree bucket, the AUC and the TPR at the
    threshold that gives 1 % FPR over all non-members (the level every other TPR in the report uses). None when no membership set exists.

    Args:
        model: the released model.
        dataset: its graph.
        split: its split.
        seed: seed of the membership partition (``mia-threshold``'s run 0).
        max_members: most members in the partition; ``None``: every member the split allows.
        top: members listed with the highest scores.
        bins: histogram bins.
    """
    import numpy as np

    from attacks import _common as C
    from attacks.membership import threshold_scores
    from dpaudit.auditing.statistics import auc

    try:
        part = C.partition(dataset, split, seed, max_members, 1)
    except DPAuditError:
        return None
    nodes, labels = part.target.nodes_and_labels()
    nodes, labels = nodes.numpy(), labels.numpy().astype(int)
    y = dataset.data.y.numpy()
    probs = C.posteriors(model, dataset.data)
    p_true = np.clip(np.exp(threshold_scores(probs[nodes], y[nodes])["loss"]), 1e-12, 1 - 1e-12)
    scores = np.log(p_true) - np.log1p(-p_true)  # logit p_y: monotone in the loss score, spread out near p = 1
    degree = np.bincount(dataset.data.edge_index[0].cpu().numpy(), minlength=dataset.num_nodes)[nodes]
    members, others = scores[labels == 1], scores[labels == 0]
    lo, hi = float(np.min(scores)), float(np.max(scores))
    if hi <= lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, bins + 1)
    threshold = (
        float(np.quantile(others, 1.0 - NODE_RISK_FPR)) if len(others) else math.inf
    )  # 1 % of non-members above it
    buckets = []
    bounds = [(0, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, None)]
    for low, high in bounds:
        inside = (degree >= low) & (degree <= (high if high is not None else np.inf))
        m, o = int(np.sum(inside & (labels == 1))), int(np.sum(inside & (labels == 0)))
        if m + o == 0:
            continue
        bucket_auc = auc(scores[inside], labels[inside]) if m and o else None
        tpr = float(np.mean(scores[inside & (labels == 1)] > threshold)) if m else None
        buckets.append(
            {
                "degree": f"{low}–{high}" if high is not None else f"≥ {low}",
                "members": m,
                "non_members": o,
                "auc": bucket_auc,
                "tpr_at_fpr": tpr,
            }
        )
    order = np.argsort(-members)[:top]
    member_nodes, member_degree = nodes[labels == 1], degree[labels == 1]
    above = float(np.max(others)) if len(others) else math.inf
    exposed = [
        {
            "node": int(member_nodes[i]),
            "degree": int(member_degree[i]),
            "label": int(y[member_nodes[i]]),
            "score": float(members[i]),
            "above_every_non_member": bool(members[i] > above),
            "fraction_of_non_members_below": float(np.mean(others < members[i])) if len(others) else None,
        }
        for i in order
    ]
    return {
        "attack": "mia-threshold",
        "score": "logit p_y(v) (monotone in the loss score log p_y(v)), higher = member",
        "seed": seed,
        "source": "recomputed from the released model (attack results keep no per-node scores)",
        "members": int(len(members)),
        "non_members": int(len(others)),
        "auc": auc(scores, labels),
        "histogram": {
            "edges": edges.tolist(),
            "members": np.histogram(members, edges)[0].tolist(),
            "non_members": np.histogram(others, edges)[0].tolist(),
        },
        "fpr_level": NODE_RISK_FPR,
        "threshold_at_fpr": threshold,
        "most_exposed": exposed,
        "by_degree": buckets,
    }
