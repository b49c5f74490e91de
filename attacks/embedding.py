"""Embedding probes (DPAR Appendix E, Figure 9): what the penultimate representation reveals.

* 2-D projections of ``embed()`` for the training nodes — t-SNE (scikit-learn) and UMAP
  (umap-learn) — coloured by label, rendered with matplotlib (Agg) and stored base64-encoded
  in :attr:`AttackResult.artifacts` for the reports;
* silhouette score of the training embeddings by label (Euclidean), and k-NN label-probe
  accuracy (stratified k-fold cross-validated);
* a member-vs-non-member probe: a logistic regression on standardised embeddings, fitted on
  one half of the target's members/non-members and scoring the other half (2-fold
  cross-fitting, so every score is out-of-fold); its AUC is the result's headline and the
  ε lower bound is computed on these out-of-fold scores. The probe is an auditor's tool
  (it learns from ground-truth membership of *other* nodes), so its AUC measures how much
  membership the embedding space separates, not a deployed attacker's success.
"""

from __future__ import annotations

import base64
import io
import logging
import warnings

import numpy as np

from attacks import _common as C
from attacks.membership import _setup, locals_settings
from dpaudit.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.model import ReleasedModel
from dpaudit.results import AttackResult
from dpaudit.runtime import seed_everything

log = logging.getLogger(__name__)

PROJECTIONS = ("tsne", "umap")


def project(embeddings: np.ndarray, method: str, seed: int) -> np.ndarray:
    """2-D projection with t-SNE (scikit-learn) or UMAP (umap-learn)."""
    if method == "tsne":
        from sklearn.manifold import TSNE

        perplexity = float(min(30.0, max(2.0, (len(embeddings) - 1) / 3)))
        return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(embeddings)
    if method == "umap":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import umap

            reducer = umap.UMAP(n_components=2, n_neighbors=min(15, len(embeddings) - 1), random_state=seed)
            return reducer.fit_transform(embeddings)
    raise ConfigurationError(f"unknown projection {method!r}; use {PROJECTIONS}")


def render_png(points: np.ndarray, labels: np.ndarray, title: str) -> str:
    """Scatter plot coloured by label → base64 PNG."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 4), dpi=100)
    ax.scatter(points[:, 0], points[:, 1], c=labels, cmap="tab10", s=6, linewidths=0)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _finite(embeddings: np.ndarray) -> np.ndarray:
    return np.nan_to_num(embeddings, nan=0.0, posinf=0.0, neginf=0.0)


def embedding_probe(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    projections: tuple[str, ...] | list[str] | str = PROJECTIONS,
    max_plot_nodes: int = 500,
    knn_k: int = 5,
    max_members: int | None = None,
    device: str = "auto",
    data_root: str | None = None,
    n_boot: int = 1000,
) -> AttackResult:
    """Projections, label probes and a member-vs-non-member probe of ``model.embed``."""
    settings = locals_settings(locals())
    if isinstance(projections, str):
        projections = [p.strip() for p in projections.split(",") if p.strip()]
    projections = list(projections)
    for p in projections:
        if p not in PROJECTIONS:
            raise ConfigurationError(f"unknown projection {p!r}; use {PROJECTIONS}")
    settings["projections"] = projections
    if runs < 1 or knn_k < 1:
        raise ConfigurationError("runs and knn_k must be >= 1")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import silhouette_score
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ds, split = _setup(model, dataset, data_root)
    seed_everything(seed)
    graph = ds.data
    emb = _finite(model.embed(graph).detach().cpu().double().numpy())
    y = graph.y.numpy()
    train = split.train.numpy()
    rng = np.random.default_rng(seed)
    plot_nodes = train if len(train) <= max_plot_nodes else np.sort(rng.choice(train, max_plot_nodes, replace=False))

    extra: dict = {"embedding_dim": int(emb.shape[1])}
    train_labels = y[train]
    if len(np.unique(train_labels)) > 1 and len(train) > len(np.unique(train_labels)):
        extra["silhouette"] = float(
            silhouette_score(emb[train], train_labels, random_state=seed, sample_size=min(len(train), 2000))
        )
        folds = int(min(5, np.bincount(train_labels).min()))
        if folds >= 2:
            knn = KNeighborsClassifier(n_neighbors=min(knn_k, len(train) - 1))
            cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
            extra["knn_label_accuracy"] = float(cross_val_score(knn, emb[train], train_labels, cv=cv).mean())
            extra["knn_folds"] = folds
    artifacts = {}
    for method in projections:
        points = project(emb[plot_nodes], method, seed)
        artifacts[f"{method}.png"] = render_png(points, y[plot_nodes], f"{method.upper()} of training embeddings")

    run_scores = []
    for r in range(runs):
        part = C.partition(ds, split, seed + 7919 * r, max_members, 1)
        nodes, labels = part.target.nodes_and_labels()
        nodes, labels = nodes.numpy(), labels.numpy().astype(int)
        scores = np.zeros(len(nodes))
        cv = StratifiedKFold(2, shuffle=True, random_state=seed + r)
        for fit_idx, score_idx in cv.split(nodes, labels):
            probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            probe.fit(emb[nodes[fit_idx]], labels[fit_idx])
            scores[score_idx] = probe.predict_proba(emb[nodes[score_idx]])[:, 1]
        run_scores.append((scores, labels))
    notes = [
        "headline AUC: member-vs-non-member logistic probe on embeddings, 2-fold cross-fitted (out-of-fold scores)",
        f"projections of {len(plot_nodes)} training nodes' embeddings (full-graph query), coloured by label",
    ]
    return C.make_result(
        "embedding-probe", model, run_scores, "node", settings, extra=extra, notes=notes, artifacts=artifacts
    )
