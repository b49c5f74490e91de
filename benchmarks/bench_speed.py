"""Speed: DP training vs its non-private twin, sparse vs dense first layers, peak memory, scaling.

python benchmarks/bench_speed.py                 # cora_ml, 3 repeats (+ scaling if --scaling)
python benchmarks/bench_speed.py --quick         # fewer epochs/steps, cora_ml only
python benchmarks/bench_speed.py --scaling       # also johnshopkins55:year and cornell5:year, every defense
python benchmarks/bench_speed.py --scaling-only  # the scaling table alone

Results: ``results/speed.md`` on a CPU, ``results/speed_cuda.md`` on a GPU,
``results/speed_scaling.md`` with ``--scaling-only`` (``--out NAME`` → ``results/NAME.md``).

Writes ``benchmarks/results/speed.md``. Every configuration runs in a forked child (its own
peak RSS; on CUDA ``torch.cuda.max_memory_allocated``); the private run and its twin
alternate repeat by repeat, so a busy shared machine slows both alike, and the table reports
medians and the ratio of medians.

What is timed (the training call inside ``fit``; setup, accounting and calibration excluded):

* ``mlp-dp`` — :func:`dpaudit.training.dpsgd.train_dp_sgd`, 2 × 64 MLP, batch 256. Twin: the same
  call with σ = 0 (same module, same batch size, no clipping or noise). Also the opacus
  per-sample path (``clipping="per-sample"``) and dense inputs, for reference.
* ``gap-ndp`` — its encoder and classifier DP-Adam runs (both through ``train_dp_sgd``).
  Twin: gap-ndp at ε = ∞ (same loop, σ = 0).
* ``dpgnn`` — ``DPGNN._train`` (per-subgraph clipping by ghost norms over the batch's flat
  disjoint union, batches of distinct subgraphs). Twin: the same flat batches with ordinary
  backprop of the summed loss (no per-subgraph norms, no clipping, no noise).
* ``dpar-gm`` — Algorithm 2's loop (closed-form per-row ghost clipping). Twin: ``dpar-nodp``
  with the same schedule (same closed form without clipping or noise).
* ``gap-edp``, ``gcon`` — the whole fit (their training is a short full-batch loop beside the
  aggregation / propagation and the accounting). Twin: the same defense at ε = ∞.
* ``mlp``, ``sage``, ``gcn`` — non-private full-batch fits, per epoch (no private twin).

``--scaling`` repeats the private/twin table with the quick schedule for cora_ml,
johnshopkins55:year and cornell5:year, with each whole fit's seconds and peak memory.
The full compare study is timed by ``bench_study.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import add_smoke_argument, markdown_table, measure, start_smoke, write_result  # noqa: E402

import dpaudit.nn as dnn  # noqa: E402
from dpaudit.data.datasets import load_dataset  # noqa: E402
from dpaudit.data.splits import make_split  # noqa: E402
from dpaudit.nn import InputLinear, SparseFeatures  # noqa: E402
from dpaudit.training.registry import get_defense  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------- timed training runs
def _clock() -> float:
    """Seconds on the clock that is compared: this process's CPU time on a CPU run (robust to
    other jobs on a shared machine; runs are single-threaded), wall time on CUDA (synchronised)."""
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter()
    return time.process_time()


def _timer(store: list[float], fn):
    def wrapped(*args, **kwargs):
        start, wall = _clock(), time.perf_counter()
        out = fn(*args, **kwargs)
        store.append((_clock() - start, time.perf_counter() - wall))
        return out

    return wrapped


def _plain_dpgnn_sum(module, params, x, batch, labels, groups, clip_norm):
    """DP-GNN's non-private twin: ordinary backprop of Σ_s ℓ_s over the same flat batch of
    subgraphs (sparse first layer too, when the features are sparse)."""
    import torch.nn.functional as F

    from defenses.dpgnn.training import _flat_forward

    live = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    logits, _, _ = _flat_forward(module, live, x, batch)
    loss = F.cross_entropy(logits, labels, reduction="sum")
    grads = torch.autograd.grad(loss, list(live.values()))
    return dict(zip(live, grads))


def run_training(name: str, epsilon: float, hp: dict, dataset, split, variant: str = "") -> dict:
    """Fit ``name`` with the training call wrapped by a timer; returns seconds and units."""
    import defenses.baselines.mlp_dp as mlp_dp
    import defenses.dpar.defense as dpar
    import defenses.dpgnn.defense as dpgnn
    import defenses.dpgnn.training as dpgnn_training
    import defenses.gap.defense as gap
    from dpaudit.training import dpsgd

    times: list[tuple[float, float]] = []
    if variant == "per-sample":
        original = dpsgd.train_dp_sgd

        def per_sample(*args, **kwargs):
            return original(*args, **kwargs, clipping="per-sample")

        mlp_dp.train_dp_sgd = _timer(times, per_sample)
    else:
        mlp_dp.train_dp_sgd = _timer(times, mlp_dp.train_dp_sgd)
    if variant == "dense":
        dnn.SPARSE_DENSITY = 0.0
    gap._train_minibatch = _timer(times, gap._train_minibatch)
    dpar.train_rows = _timer(times, dpar.train_rows)
    dpgnn.train_dp = _timer(times, dpgnn.train_dp)
    if variant == "plain-backprop":
        dpgnn_training.clipped_gradient_sum = _plain_dpgnn_sum  # train_dp looks it up in its own module
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    model = get_defense(name)(epsilon=epsilon, seed=0, device=DEVICE, **hp).fit(dataset, split)
    fit_seconds = time.perf_counter() - start
    return {
        "train_seconds": sum(t for t, _ in times) if times else fit_seconds,
        "train_wall_seconds": sum(w for _, w in times) if times else fit_seconds,
        "fit_seconds": fit_seconds,
        "epsilon": model.privacy.epsilon,
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if DEVICE == "cuda" else None,
    }


def defense_pairs(dataset, quick: bool) -> list[dict]:
    """(label, unit count, private config, twin config) per defense."""
    from defenses.gap.mechanism import max_degree_of

    e = 1 if quick else 3
    n_train = len(make_split(dataset, None, 0).train)
    mlp_dp = {"layers": 2, "hidden": 64, "dropout": 0.0, "batch_size": 256, "epochs": e, "lr": 0.01}
    degree = max_degree_of(dataset.data.edge_index, dataset.num_nodes)
    gap_hp = {"encoder_epochs": e, "epochs": e, "max_degree": max(degree, 1), "batch_size": 256}
    gap_edp_hp = {"encoder_epochs": 10 * e, "epochs": 10 * e}
    dpgnn_steps = 5 if quick else 30
    dpgnn_hp = {"steps": dpgnn_steps, "batch_size": 256}
    dpar_hp = {"epochs": e, "node_sample_rate": 0.5, "num_sources": 100}
    return [
        {
            "defense": "mlp-dp",
            "unit": f"epoch ({e} timed)",
            "units": e,
            "private": ("mlp-dp", 8.0, mlp_dp, ""),
            "twin": ("mlp-dp", math.inf, mlp_dp, ""),
            "extra": [
                ("opacus per-sample", ("mlp-dp", 8.0, mlp_dp, "per-sample")),
                ("dense input", ("mlp-dp", 8.0, mlp_dp, "dense")),
                ("twin, dense input", ("mlp-dp", math.inf, mlp_dp, "dense")),
            ],
        },
        {
            "defense": "gap-ndp (encoder + classifier)",
            "unit": f"epoch of each module ({e} timed)",
            "units": e,
            "private": ("gap-ndp", 8.0, gap_hp, ""),
            "twin": ("gap-ndp", math.inf, gap_hp, ""),
            "extra": [("dense input", ("gap-ndp", 8.0, gap_hp, "dense"))],
        },
        {
            "defense": "dpgnn",
            "unit": f"step ({dpgnn_steps} timed)",
            "units": dpgnn_steps,
            "private": ("dpgnn", 8.0, dpgnn_hp, ""),
            "twin": ("dpgnn", math.inf, dpgnn_hp, "plain-backprop"),
            "extra": [("dense input", ("dpgnn", 8.0, dpgnn_hp, "dense"))],
        },
        {
            "defense": "dpar-gm",
            "unit": f"epoch ({e} timed)",
            "units": e,
            "private": ("dpar-gm", 8.0, dpar_hp, ""),
            "twin": ("dpar-nodp", math.inf, dpar_hp, ""),
            "extra": [],
        },
        {
            "defense": "gap-edp",
            "unit": "fit",
            "units": 1,
            "whole_fit": True,
            "private": ("gap-edp", 8.0, gap_edp_hp, ""),
            "twin": ("gap-edp", math.inf, gap_edp_hp, ""),
            "extra": [],
        },
        {
            "defense": "gcon",
            "unit": "fit",
            "units": 1,
            "whole_fit": True,
            "private": ("gcon", 8.0, {}, ""),
            "twin": ("gcon", math.inf, {}, ""),
            "extra": [],
        },
        {
            "defense": "mlp",
            "unit": "full-batch epoch",
            "units": 200 if not quick else 50,
            "private": None,
            "twin": ("mlp", math.inf, {"epochs": 200 if not quick else 50}, ""),
            "extra": [],
            "n_train": n_train,
        },
        {
            "defense": "sage",
            "unit": "full-batch epoch",
            "units": 200 if not quick else 50,
            "private": None,
            "twin": ("sage", math.inf, {"epochs": 200 if not quick else 50}, ""),
            "extra": [],
        },
        {
            "defense": "gcn",
            "unit": "full-batch epoch",
            "units": 200 if not quick else 50,
            "private": None,
            "twin": ("gcn", math.inf, {"epochs": 200 if not quick else 50}, ""),
            "extra": [],
        },
    ]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def time_pairs(
    dataset, split, repeats: int, quick: bool, only: list[str] | None = None, extras: bool = True
) -> list[dict]:
    rows = []
    for pair in defense_pairs(dataset, quick):
        if only and pair["defense"].split()[0] not in only:
            continue
        configs = {"twin": pair["twin"]}
        if pair["private"] is not None:
            configs["private"] = pair["private"]
        if extras:
            configs.update({label: cfg for label, cfg in pair["extra"]})
        else:
            pair = {**pair, "extra": []}
        fits: dict[str, list[float]] = {k: [] for k in configs}
        seconds: dict[str, list[float]] = {k: [] for k in configs}
        wall: dict[str, list[float]] = {k: [] for k in configs}
        peaks: dict[str, list[float]] = {k: [] for k in configs}
        eps: dict[str, float] = {}
        for _ in range(repeats):
            for key, (name, epsilon, hp, variant) in configs.items():
                result, _, peak = measure(run_training, name, epsilon, hp, dataset, split, variant)
                timed = "fit_seconds" if pair.get("whole_fit") else "train_seconds"
                seconds[key].append(result[timed] / pair["units"])
                wall[key].append(
                    result["fit_seconds" if pair.get("whole_fit") else "train_wall_seconds"] / pair["units"]
                )
                fits[key].append(result["fit_seconds"])
                peaks[key].append(result["gpu_peak_mb"] if result["gpu_peak_mb"] is not None else peak)
                eps[key] = result["epsilon"]
            print(pair["defense"], {k: round(v[-1], 4) for k, v in seconds.items()}, flush=True)
        twin = _median(seconds["twin"])
        row = {
            "defense": pair["defense"],
            "unit": pair["unit"],
            "twin s/unit": f"{twin:.4f}",
            "private s/unit": f"{_median(seconds['private']):.4f}" if "private" in seconds else "-",
            "private / twin": f"{_median(seconds['private']) / twin:.2f}×" if "private" in seconds else "-",
            "wall: twin / private": f"{_median(wall['twin']):.3f} / "
            + (f"{_median(wall['private']):.3f}" if "private" in wall else "-"),
            "ε spent": f"{eps['private']:.3f}" if "private" in eps else "∞",
            "whole fit s (twin / private)": f"{_median(fits['twin']):.1f} / "
            + (f"{_median(fits['private']):.1f}" if "private" in fits else "-"),
            "peak MiB (twin / private)": f"{_median(peaks['twin']):.0f} / "
            + (f"{_median(peaks['private']):.0f}" if "private" in peaks else "-"),
        }
        rows.append(row)
        for label, _cfg in pair["extra"]:
            rows.append(
                {
                    "defense": f"  {pair['defense']}: {label}",
                    "unit": pair["unit"],
                    "private s/unit": f"{_median(seconds[label]):.4f}",
                    "private / twin": f"{_median(seconds[label]) / twin:.2f}×",
                    "wall: twin / private": f"- / {_median(wall[label]):.3f}",
                    "ε spent": f"{eps[label]:.3f}" if math.isfinite(eps[label]) else "∞",
                    "peak MiB (twin / private)": f"- / {_median(peaks[label]):.0f}",
                }
            )
    return rows


# --------------------------------------------------------------------------- first layer
def first_layer(dataset, repeats: int, hidden: int = 64, batch: int = 256) -> list[dict]:
    """Forward + backward of ``x W^T`` (F → hidden), dense vs sparse, full matrix and one batch."""
    device = torch.device(DEVICE)
    x = dataset.data.x.float().to(device)
    sparse = SparseFeatures.from_tensor(x)
    layer = InputLinear(x.size(1), hidden).to(device)
    gen = torch.Generator().manual_seed(0)
    index = torch.randperm(x.size(0), generator=gen)[:batch].to(device)
    rows = []
    for label, dense_in, sparse_in in (("all nodes", x, sparse), (f"batch {batch}", x[index], sparse[index])):
        out = {}
        for kind, inputs in (("dense", dense_in), ("sparse", sparse_in)):
            times = []
            for _ in range(max(repeats, 5)):
                start = _clock()
                layer.zero_grad()
                layer(inputs).sum().backward()
                times.append(_clock() - start)
            out[kind] = _median(times[1:])  # first call warms up
        with torch.no_grad():
            diff = float((layer(dense_in) - layer(sparse_in)).abs().max())
        rows.append(
            {
                "dataset": dataset.name,
                "input": f"{label} [{dense_in.size(0)} × {x.size(1)}], {sparse.nnz / x.numel():.2%} non-zero",
                "dense ms": f"{out['dense'] * 1e3:.2f}",
                "sparse ms": f"{out['sparse'] * 1e3:.2f}",
                "speed-up": f"{out['dense'] / out['sparse']:.1f}×",
                "max |Δ output|": f"{diff:.1e}",
            }
        )
    return rows


# --------------------------------------------------------------------------- scaling
def scaling(names: list[str], root, repeats: int) -> list[dict]:
    """Every defense's quick schedule (private and twin) on each dataset: time per unit, whole
    fit (preprocessing and accounting included) and peak memory against the graph's size."""
    rows = []
    for name in names:
        dataset = load_dataset(name, root=root)
        split = make_split(dataset, None, 0)
        edges = int(dataset.data.edge_index.size(1))
        layer = first_layer(dataset, repeats)[0]
        for row in time_pairs(dataset, split, repeats, quick=True, extras=False):
            rows.append(
                {
                    "dataset": f"{name} ({dataset.num_nodes} nodes, {edges} edges, F = {dataset.num_features}, "
                    f"{len(split.train)} train; sparse first layer {layer['speed-up']})",
                    **row,
                }
            )
            print(rows[-1], flush=True)
    return rows


def environment() -> str:
    if DEVICE == "cuda":
        device = f"CUDA: {torch.cuda.get_device_name(0)}"
    else:
        device = f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores visible"
    return (
        f"device **{device}**; torch {torch.__version__}, {torch.get_num_threads()} thread(s) "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); python {platform.python_version()}"
    )


def default_out(scaling_only: bool) -> str:
    """Where a run writes when ``--out`` is not given: each kind of run has its own file, so no
    run overwrites another's and every result file is some command's default."""
    if scaling_only:
        return "speed_scaling"
    return "speed_cuda" if DEVICE == "cuda" else "speed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="cora_ml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer epochs/steps (the ratios stay comparable)")
    parser.add_argument("--scaling", action="store_true", help="also cora_ml → johnshopkins55:year → cornell5:year")
    parser.add_argument("--data-root", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument(
        "--out",
        help="results name (benchmarks/results/NAME.md); default: speed, speed_cuda on a GPU, "
        "speed_scaling with --scaling-only",
    )
    parser.add_argument("--only", default="", help="comma-separated defenses for the twin table (default: all)")
    parser.add_argument("--scaling-only", action="store_true", help="only the scaling table (implies --scaling)")
    add_smoke_argument(parser, "csbm, --quick --repeats 1 --only mlp-dp,gap-ndp,dpgnn, no extras")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
        args.dataset, args.quick, args.repeats, args.only = "csbm", True, 1, "mlp-dp,gap-ndp,dpgnn"
        args.scaling = args.scaling_only = False
    if args.out is None:
        args.out = default_out(args.scaling_only)

    started = time.perf_counter()
    dataset = load_dataset(args.dataset, root=args.data_root)
    split = make_split(dataset, None, 0)
    print(f"{args.dataset}: {dataset.num_nodes} nodes, {len(split.train)} training nodes", flush=True)
    layer_rows = first_layer(dataset, 1 if args.smoke else max(args.repeats, 10))
    print(layer_rows, flush=True)
    only = [o for o in args.only.split(",") if o]
    pair_rows = [] if args.scaling_only else time_pairs(dataset, split, args.repeats, args.quick, only, not args.smoke)
    scale_rows = (
        scaling(["cora_ml", "johnshopkins55:year", "cornell5:year"], args.data_root, min(args.repeats, 2))
        if args.scaling or args.scaling_only
        else []
    )
    command = "python benchmarks/bench_speed.py " + " ".join(sys.argv[1:])
    header = (
        f"# Training speed ({args.dataset}{', quick' if args.quick else ''})\n\n"
        f"`{command}` — {environment()}; medians of {args.repeats} repeat(s); total "
        f"{time.perf_counter() - started:.0f} s.\n\n"
        "## Private vs non-private twin (seconds per unit of training; same data, same batch)\n\n"
        f"Clock: {'wall time (CUDA synchronised)' if DEVICE == 'cuda' else 'CPU time of the single-threaded run (time.process_time: robust to the other jobs on the shared machine); wall-clock medians beside it'}. "
        "Only the training call is timed (accounting, calibration, data preparation excluded). Peak "
        "memory: the forked child's peak RSS (CPU, includes the loaded dataset) or "
        "`torch.cuda.max_memory_allocated` (CUDA). See the script's docstring for each twin.\n\n"
        + markdown_table(
            pair_rows,
            [
                "defense",
                "unit",
                "twin s/unit",
                "private s/unit",
                "private / twin",
                "wall: twin / private",
                "ε spent",
                "whole fit s (twin / private)",
                "peak MiB (twin / private)",
            ],
        )
        + "\n\n## First layer: dense vs sparse forward + backward (F → 64)\n\n"
        + markdown_table(layer_rows, ["dataset", "input", "dense ms", "sparse ms", "speed-up", "max |Δ output|"])
    )
    table = ""
    if scale_rows:
        table = (
            "## Scaling over graph size (every defense, quick schedule: 1 epoch, 5 DP-GNN steps, 50 epochs "
            f"full-batch; medians of {min(args.repeats, 2)})\n\n"
            + markdown_table(
                scale_rows,
                [
                    "dataset",
                    "defense",
                    "unit",
                    "twin s/unit",
                    "private s/unit",
                    "private / twin",
                    "whole fit s (twin / private)",
                    "peak MiB (twin / private)",
                ],
            )
        )
    path = write_result(args.out, header, table)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
