"""Embedding probes (DPAR Appendix E, Figure 9): what the penultimate representation reveals.

* 2-D projections of ``embed()`` for the training nodes — t-SNE (scikit-learn) and UMAP
  (umap-learn) — coloured by label, rendered with matplotlib (Agg) and stored base64-encoded
  in :attr:`AttackResult.artifacts` for the reports;
* silhouette score of the training embeddings by label (Euclidean), and k-NN label-probe
  accuracy (stratified k-fold cross-validated);
* a member-vs-non-member probe trained on **shadow models** (never on the target's
  membership): per run a shadow model is trained with the target's recipe on shadow members
  drawn from labeled nodes outside the audit set (as in TSTF, ``shadow_size="match"`` shapes its
  training set like the target's: :func:`attacks.membership.match_split_shape`); a logistic
  regression on standardised
  :func:`embedding_features` of the shadow's embeddings learns shadow member vs shadow
  non-member, and scores the target's audit nodes from the target's embeddings. The
  features are invariant to permuting (and, except the sorted coordinates, rotating) the
  hidden units, since two trainings of one recipe share no coordinate system, and have a fixed
  width whatever the embedding's: a shadow's run of the recipe may choose another width than
  the target's (GAP's edge-level K is picked on validation nodes; a shadow split has none).

The probe is a **diagnostic**: it reports no ε lower bound. Its held-out separation is kept
in ``extra["probe_distinguishability"]``, ``epsilon_lower_bound`` is 0 (the trivial bound),
and ``extra["bound_valid"]`` is False with the reason, so the probe never feeds a "guarantee
broken" verdict. (It is not a pre-registered test: several diagnostics are computed and its
features were designed after looking at models.)
"""

from __future__ import annotations

import base64
import io
import logging
import os
import warnings

import numpy as np
import torch

from attacks import _common as C
from attacks import one_graph_query, register_attack
from attacks.membership import (
    BASELINE,
    _check_shadow_settings,
    _setup,
    baseline_runs,
    locals_settings,
    match_split_shape,
)
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.errors import ConfigurationError
from dpaudit.release.model import ReleasedModel
from dpaudit.runtime import seed_everything
from dpaudit.training.constraints import COUNT, Items, Options

log = logging.getLogger(__name__)

PROJECTIONS = ("tsne", "umap")


def _numba_on_its_own_threads() -> None:
    """Run UMAP's numba kernels on numba's own ``workqueue`` thread pool (unless the user chose a
    layer with ``NUMBA_THREADING_LAYER``). numba's default OpenMP layer shares libgomp with torch
    and resets its thread count: after one UMAP a study worker pinned to 1 thread ran every
    torch op on 2 spinning OpenMP threads — with both cores busy, a DP-GNN step measured
    8.3 ms before the process's first UMAP and 73 ms after. torch's thread count is also
    restored after every UMAP call."""
    import sys

    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    os.environ["NUMBA_THREADING_LAYER"] = "workqueue"
    if "numba" in sys.modules:  # imported already: the layer is chosen at the first parallel launch
        sys.modules["numba"].config.THREADING_LAYER = "workqueue"


def project(embeddings: np.ndarray, method: str, seed: int) -> np.ndarray:
    """2-D projection with t-SNE (scikit-learn) or UMAP (umap-learn).

    Args:
        embeddings: the points to project, shape ``[n, H]``.
        method: ``"tsne"`` or ``"umap"``.
        seed: random state of the projection.

    Returns:
        The 2-D coordinates, shape ``[n, 2]``.

    Raises:
        ConfigurationError: unknown ``method``.
    """
    if method == "tsne":
        from sklearn.manifold import TSNE

        perplexity = float(min(30.0, max(2.0, (len(embeddings) - 1) / 3)))
        return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(embeddings)
    if method == "umap":
        threads = torch.get_num_threads()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _numba_on_its_own_threads()
                import umap

                reducer = umap.UMAP(n_components=2, n_neighbors=min(15, len(embeddings) - 1), random_state=seed)
                return reducer.fit_transform(embeddings)
        finally:
            torch.set_num_threads(threads)
    raise ConfigurationError(f"unknown projection {method!r}; use {PROJECTIONS}")


def render_png(points: np.ndarray, labels: np.ndarray, title: str) -> str:
    """Scatter plot coloured by class, with its colour legend (class → colour) → base64 PNG.

    4 inches wide at 192 dpi: the PNG records its dpi, and the report shows an image at its
    physical size (4 CSS inches, 384 px), so it is never stretched and has two pixels per CSS
    pixel (sharp on high-density screens too).

    Args:
        points: 2-D coordinates, shape ``[n, 2]``.
        labels: class of each point, shape ``[n]``.
        title: the plot's title.

    Returns:
        The PNG, base64-encoded (ASCII).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    classes = np.unique(labels)
    # a qualitative palette while classes stay distinguishable; past 20 a continuous one, read off
    # a colour bar instead of a legend of dozens of entries
    palette = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20" if len(classes) <= 20 else "turbo")
    legend_rows = (len(classes) + 4) // 5 if len(classes) <= 20 else 0
    fig, ax = plt.subplots(figsize=(4, 4 + 0.2 * legend_rows), dpi=192, layout="constrained")
    if len(classes) <= 20:
        for i, c in enumerate(classes):
            inside = labels == c
            ax.scatter(points[inside, 0], points[inside, 1], color=palette(i), s=6, linewidths=0, label=f"class {c}")
        fig.legend(
            loc="outside lower center",
            ncol=min(5, len(classes)),
            frameon=False,
            fontsize=8.5,
            markerscale=2,
            handletextpad=0.1,
            columnspacing=0.8,
        )
    else:
        drawn = ax.scatter(points[:, 0], points[:, 1], c=labels, cmap=palette, s=6, linewidths=0)
        fig.colorbar(drawn, ax=ax, label="class").ax.tick_params(labelsize=8.5)
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _finite(embeddings: np.ndarray) -> np.ndarray:
    return np.nan_to_num(embeddings, nan=0.0, posinf=0.0, neginf=0.0)


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


#: points at which each node's sorted coordinates are read (linear interpolation): a fixed
#: width, so a shadow whose recipe chose another embedding width (GAP's K picked on validation
#: nodes, mlp-dp's preset from the declared size) still yields the target's feature columns
COORDINATE_QUANTILES = 16
#: edges per chunk of the neighbour-similarity pass: a bounded float32 temporary per chunk
EDGE_CHUNK = 1 << 18


def neighbour_similarity(unit: np.ndarray, edge_index: np.ndarray, chunk: int = EDGE_CHUNK) -> np.ndarray:
    """Mean cosine of every node's unit embedding with its in-neighbours' (0 when it has none).

    Over edges in chunks of ``chunk``: float32 temporaries of chunk × width, never edges × width.

    Args:
        unit: row-normalised embeddings, shape ``[N, H]``.
        edge_index: directed edges ``[2, E]`` (source, target).
        chunk: edges per chunk.

    Returns:
        Float array of shape ``[N]``.
    """
    unit = unit.astype(np.float32, copy=False)
    src, dst = edge_index
    total = np.zeros(len(unit), dtype=np.float64)
    for lo in range(0, len(src), chunk):
        s, d = src[lo : lo + chunk], dst[lo : lo + chunk]
        total += np.bincount(d, weights=np.einsum("ij,ij->i", unit[s], unit[d]), minlength=len(unit))
    degree = np.bincount(dst, minlength=len(unit))
    return np.where(degree > 0, total / np.maximum(degree, 1), 0.0)


def embedding_features(emb: np.ndarray, y: np.ndarray, edge_index: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    r"""Per-node membership features of one model's embeddings, comparable across models:

    * :math:`\lVert e_v \rVert_2`;
    * the coordinates of :math:`e_v` sorted in decreasing order (permutation-invariant), read
      at :data:`COORDINATE_QUANTILES` evenly spaced quantiles (the same columns whatever the
      embedding width);
    * cosine of :math:`e_v` with its own class's centroid (centroids over every labeled node of
      that class, which the attacker knows for the public dataset), and the margin over the
      best other class's centroid;
    * mean cosine of :math:`e_v` with its graph neighbours' embeddings (0 when isolated).

    Shapes: ``emb`` ``[N, H]``, ``y`` ``[N]`` (−1 unlabeled), ``edge_index`` ``[2, E]``, ``nodes``
    ``[n]`` → ``[n, COORDINATE_QUANTILES + 4]``.

    Args:
        emb: every node's embedding.
        y: every node's label, −1 for unlabeled.
        edge_index: the graph's edges.
        nodes: the nodes to featurise.

    Returns:
        One feature row per node of ``nodes``.
    """
    emb = emb.astype(np.float32, copy=False)
    unit = _unit(emb)
    num_classes = int(y.max()) + 1
    labeled = y >= 0
    sums = np.zeros((num_classes, emb.shape[1]))
    np.add.at(sums, y[labeled], emb[labeled])
    centroids = sums / np.maximum(np.bincount(y[labeled], minlength=num_classes), 1)[:, None]
    cos = unit[nodes] @ _unit(centroids).T  # [n, C]
    own = cos[np.arange(len(nodes)), y[nodes]]
    masked = cos.copy()
    masked[np.arange(len(nodes)), y[nodes]] = -np.inf
    margin = own - (masked.max(axis=1) if num_classes > 1 else 0.0)
    smooth = neighbour_similarity(unit, edge_index)[nodes]
    norm = np.linalg.norm(emb[nodes], axis=1)
    ordered = -np.sort(-emb[nodes], axis=1)
    at = np.linspace(0.0, emb.shape[1] - 1, COORDINATE_QUANTILES)
    low = np.floor(at).astype(np.int64)
    high, frac = np.minimum(low + 1, emb.shape[1] - 1), at - low
    coordinates = ordered[:, low] * (1.0 - frac) + ordered[:, high] * frac
    return np.column_stack([norm, coordinates, own, margin, smooth])


def _is_input(emb: np.ndarray, x: torch.Tensor, nodes: np.ndarray) -> bool:
    """Whether ``embed`` returned the input features themselves, up to each row's scale (a
    one-layer model's embedding, perhaps row-normalised), on a sample of ``nodes``: then a probe
    of it says nothing about the model."""
    if len(nodes) == 0 or emb.shape[1] != x.size(1):
        return False
    rows = x.index_select(0, torch.as_tensor(nodes, dtype=torch.long))
    rows = (rows.to_dense() if rows.is_sparse else rows).double().cpu().numpy()

    def unit(a: np.ndarray) -> np.ndarray:
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-300)

    return bool(np.allclose(unit(emb[nodes]), unit(rows), rtol=1e-5, atol=1e-6))


#: what each setting of :func:`embedding_probe` accepts (:func:`attacks.register_attack`)
EMBEDDING_PROBE_CONSTRAINTS = {
    **C.SETTING_CONSTRAINTS,
    **C.SHADOW_SETTING_CONSTRAINTS,
    "projections": [Items(Options(*PROJECTIONS), empty=True), str],  # a string: comma-separated names
    "max_plot_nodes": [COUNT],
    "knn_k": [COUNT],
    "label_probe_nodes": [C.TWO_OR_MORE],
}

#: CPU seconds per node projected by t-SNE, and of one UMAP projection (numba's compilation
#: included, paid by every fresh process): the audit plan's cost model
TSNE_NODE_SECONDS = 0.004
UMAP_SECONDS = 8.0


def _embedding_probe_cost(settings, measured, dataset) -> tuple[int, float]:
    runs = C.count_setting(settings, "runs", 1)
    projections = settings.get("projections", PROJECTIONS)
    if isinstance(projections, str):
        projections = [p for p in projections.split(",") if p.strip()]
    nodes = min(C.count_setting(settings, "max_plot_nodes", 1000), dataset.num_nodes)
    seconds = measured["shadow"] + 2 * measured["query"] + (nodes * TSNE_NODE_SECONDS if "tsne" in projections else 0.0)
    return runs, runs * seconds + (UMAP_SECONDS if "umap" in projections else 0.0)


@register_attack(
    "embedding-probe",
    EMBEDDING_PROBE_CONSTRAINTS,
    order=7,
    heading="probe",
    quick={"projections": ["tsne"], "max_plot_nodes": 300},
    shadows=True,
    cost=_embedding_probe_cost,
    releases=one_graph_query,
    diagnostic=True,
)
def embedding_probe(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seed: int = 0,
    projections: tuple[str, ...] | list[str] | str = PROJECTIONS,
    max_plot_nodes: int = 500,
    knn_k: int = 5,
    label_probe_nodes: int = 2000,
    max_members: int | None = None,
    shadow_nodes_per_class: int = 1000,
    shadow_size: str = "match",
    device: str = "auto",
    data_root: str | None = None,
    deployment: str = "auto",
    n_boot: int = 1000,
) -> AttackResult:
    """Projections, label probes and a shadow-trained member-vs-non-member probe of ``model.embed``.

    The silhouette and the k-NN label probe read a seeded sample of at most
    ``label_probe_nodes`` training nodes (k-NN cross-validation grows about quadratically in
    the nodes it reads); the projections at most ``max_plot_nodes``.

    Args:
        model: the released model to attack.
        dataset: the graph it is attacked on; ``None`` loads the one named in its card.
        runs: independent repetitions (each draws afresh), >= 1.
        seed: seed of the first run; run r uses ``seed + 7919 * r``.
        projections: ``"tsne"``, ``"umap"``, or several (a list or a comma-separated string).
        max_plot_nodes: most nodes in each projection.
        knn_k: neighbours of the k-NN label probe, >= 1.
        label_probe_nodes: most training nodes read by the silhouette and k-NN probe, >= 2.
        max_members: most members in the audit game; ``None``: every member the split allows.
        shadow_nodes_per_class: nodes per class in the shadow pool.
        shadow_size: ``"match"`` or ``"full"`` shadow training set.
        device: torch device of the models the attack trains (``"auto"``: CUDA when available).
        data_root: where to find the dataset when ``dataset`` is ``None``.
        deployment: the deployment audited (:func:`attacks._common.resolve_deployment`; ``"auto"`` by the split).
        n_boot: bootstrap draws of each confidence interval.

    Returns:
        The attack's result: headline AUC, ε lower bound and ceiling, per-run details in ``extra``.

    Raises:
        ConfigurationError: a setting is out of range, or ``model`` is not a released model.
    """
    settings = locals_settings(locals())
    if isinstance(projections, str):
        projections = [p.strip() for p in projections.split(",") if p.strip()]
    projections = list(projections)
    for p in projections:
        if p not in PROJECTIONS:
            raise ConfigurationError(f"unknown projection {p!r}; use {PROJECTIONS}")
    settings["projections"] = projections
    if runs < 1 or knn_k < 1 or label_probe_nodes < 2:
        raise ConfigurationError("runs and knn_k must be >= 1, label_probe_nodes >= 2")
    _check_shadow_settings("embedding-probe", shadow_size, runs)
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import silhouette_score
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ds, split = _setup(model, dataset, data_root)
    seed_everything(seed)
    graph = ds.data
    emb = _finite(C.embeddings(model, graph))
    y = graph.y.numpy()
    train = split.train.numpy()
    rng = np.random.default_rng(seed)
    plot_nodes = train if len(train) <= max_plot_nodes else np.sort(rng.choice(train, max_plot_nodes, replace=False))

    extra: dict = {"embedding_dim": int(emb.shape[1]), "embedding_is_input": _is_input(emb, graph.x, train[:64])}
    probed = train if len(train) <= label_probe_nodes else np.sort(rng.choice(train, label_probe_nodes, replace=False))
    probed_labels = y[probed]
    if len(np.unique(probed_labels)) > 1 and len(probed) > len(np.unique(probed_labels)):
        extra["silhouette"] = float(silhouette_score(emb[probed], probed_labels, random_state=seed))
        folds = int(min(5, np.bincount(probed_labels).min()))
        if folds >= 2:
            knn = KNeighborsClassifier(n_neighbors=min(knn_k, len(probed) - 1))
            cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
            extra["knn_label_accuracy"] = float(cross_val_score(knn, emb[probed], probed_labels, cv=cv).mean())
            extra["knn_folds"] = folds
        extra["label_probe_nodes"] = int(len(probed))
    artifacts = {}
    for method in projections:
        points = project(emb[plot_nodes], method, seed)
        name = {"tsne": "t-SNE", "umap": "UMAP"}[method]
        artifacts[f"{method}.png"] = render_png(points, y[plot_nodes], f"{name} of training embeddings")

    edge_index = graph.edge_index.cpu().numpy()
    run_scores, run_extra, run_nodes = [], [], []
    for r in range(runs):
        run_seed = seed + 7919 * r
        part = C.partition(ds, split, run_seed, max_members, max(1, shadow_nodes_per_class // 2))
        s_in, s_out = part.shadow.members, part.shadow.non_members
        if len(s_in) < 2 or len(s_out) < 2:
            raise ConfigurationError("not enough labeled nodes outside the target's split for a shadow set")
        if shadow_size == "match":
            s_in, s_out = match_split_shape(s_in, s_out, split, ds.data.y, run_seed)
        shadow = C.train_shadow(model, ds, s_in, s_out, seed=run_seed, device=device, inductive=split.inductive)
        shadow_emb = _finite(C.embeddings(shadow, graph))
        shadow_nodes = torch.cat([s_in, s_out]).numpy()
        shadow_labels = np.concatenate([np.ones(len(s_in)), np.zeros(len(s_out))]).astype(int)
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        probe.fit(embedding_features(shadow_emb, y, edge_index, shadow_nodes), shadow_labels)
        # the target part: only its nodes are used to score; its labels only evaluate
        nodes, labels = part.target.nodes_and_labels()
        nodes = nodes.numpy()
        scores = probe.predict_proba(embedding_features(emb, y, edge_index, nodes))[:, 1]
        run_scores.append((scores, labels.numpy().astype(int)))
        run_nodes.append(nodes)
        run_extra.append({"seed": run_seed, "shadow_members": len(s_in), "shadow_non_members": len(s_out)})
    notes = [
        "headline AUC: member-vs-non-member logistic probe trained on a shadow model's embeddings (known "
        "membership), applied to the target's embeddings (full-graph query)",
        f"projections of {len(plot_nodes)} training nodes' embeddings (full-graph query), coloured by label",
    ]
    if extra["embedding_is_input"]:
        notes.append(
            "the model's embedding is its input features (a model with no hidden layer): the probe reads the "
            "nodes' features, not anything the model learned"
        )
    result = C.make_result(
        "embedding-probe",
        model,
        run_scores,
        "node",
        settings,
        extra=extra,
        notes=notes,
        artifacts=artifacts,
        run_extra=run_extra,
        baseline_runs=baseline_runs(ds, run_nodes, run_scores),
        baseline=BASELINE,
    )
    return result
