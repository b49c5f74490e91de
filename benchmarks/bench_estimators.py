"""ε estimators on the ideal one-run game: the Gaussian mechanism at ε = 4, δ = 1e-5.

python benchmarks/bench_estimators.py --out benchmarks/results/estimators.json           # 50 seeds
python benchmarks/bench_estimators.py --out /tmp/estimators.json --quick                 # 12 seeds, ~1 min
python benchmarks/bench_estimators.py --smoke     # 1 seed, 200 simulated games: seconds, to the smoke folder

σ is calibrated exactly (analytic Gaussian mechanism, Balle & Wang 2018, through dp_accounting;
checked against dpaudit.accounting.gaussian_epsilon). Each seed draws m = 1,000 canaries with a
fair coin each; canary i's score is the mechanism's output on its coordinate, coin_i + N(0, σ²)
(in-canaries shifted by the sensitivity 1): the ideal one-run game. Every estimator of
dpaudit.auditing.estimators runs on its own at confidence 0.95, and audit_epsilon runs them together
(Bonferroni over the estimators). The same is repeated with σ halved (true ε ≈ 9.1, claim 4) to
show which estimators catch the broken mechanism.

Writes ``--out`` (JSON: ``median_certified`` / ``max_certified`` {estimator: ε} for every
estimator whose ε is certified for this mechanism, the estimates beside them, per-seed values)
and ``benchmarks/results/estimators.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from dp_accounting.gaussian_mechanism import get_sigma_gaussian

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import add_smoke_argument, markdown_table, results_dir, start_smoke  # noqa: E402

from dpaudit.accounting import gaussian_epsilon  # noqa: E402
from dpaudit.auditing.estimators import (  # noqa: E402
    audit_epsilon,
    fdp_guess_grid,
    fdp_one_run_lower_bound,
    gdp_estimate,
    one_run_lower_bound,
)
from dpaudit.runtime import atomic_write_json, atomic_write_text  # noqa: E402

log = logging.getLogger("bench_estimators")

EPSILON, DELTA, CANARIES, CONFIDENCE = 4.0, 1e-5, 1000, 0.95
SEEDS, QUICK_SEEDS = 50, 12
#: games simulated for the count ceiling (``--smoke``: far fewer, a rough ceiling)
CEILING_GAMES, SMOKE_CEILING_GAMES = 4000, 200

#: What each certified estimator's ε is certified for (its assumptions in dpaudit.auditing.estimators).
CERTIFIED_FOR = {
    "one-run": "any mechanism (Steinke, Nasr & Jagielski 2023)",
    "one-run-fdp": "any mechanism (f-DP test against the (ε, δ) curve)",
    "one-run-fdp-gaussian": "Gaussian-shaped mechanisms, as here (μ_LB is certified for any mechanism; "
    "ε at δ of μ_LB-GDP bounds ε only for a Gaussian trade-off curve)",
}
#: Estimates: not certified even for this mechanism (treat many canaries of one run as independent
#: trials, data-dependent thresholds).
ESTIMATES = ("gdp",)
#: Per-seed diagnostics of one-run-fdp-gaussian's largest guess count (for the count ceiling), not
#: estimators: kept out of the table.
LARGEST = "largest guess count: "


def calibrated_sigma(epsilon: float, delta: float) -> float:
    """σ of the sensitivity-1 Gaussian mechanism that is exactly (ε, δ)-DP, on the safe side."""
    sigma = get_sigma_gaussian(epsilon, delta)
    while gaussian_epsilon(1.0 / sigma, delta) > epsilon:
        sigma *= 1 + 1e-12
    return sigma


def game(sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores and coins of one run of the ideal game."""
    rng = np.random.default_rng(seed)
    included = rng.random(CANARIES) < 0.5
    return included + rng.normal(0.0, sigma, CANARIES), included


def independent_tails(mus: np.ndarray, r: int, games: int, seed: int) -> np.ndarray:
    """P[V ≥ v] (v = 0..r+1) of the extremes rule's r guesses under the product Gaussian mechanism
    of each μ in ``mus`` (canary i's output coin_i·μ + N(0, 1), independent), from ``games``
    simulated games with the same draws for every μ.

    Shapes: mus: [K]; returns [K, r + 2]."""
    rng = np.random.default_rng(seed)
    coins = rng.random((games, CANARIES)) < 0.5
    noise = rng.standard_normal((games, CANARIES))
    tails = np.empty((mus.size, r + 2))
    for i, mu in enumerate(mus):
        centred = noise + mu * coins
        centred -= np.median(centred, axis=1, keepdims=True)
        guessed = np.argpartition(-np.abs(centred), r - 1, axis=1)[:, :r]
        right = ((np.take_along_axis(centred, guessed, 1) > 0) == np.take_along_axis(coins, guessed, 1)).sum(1)
        tails[i] = np.bincount(right, minlength=r + 2)[::-1].cumsum()[::-1] / games
    return tails


def count_ceiling(correct: list[int], r: int, level: float, games: int = CEILING_GAMES) -> dict:
    """The most any test of "the mechanism is μ-GDP" that looks only at the count of right guesses
    (extremes rule, r guesses, at ``level``) can certify from the median count: such a test must
    keep its level on the product Gaussian mechanism of μ, which is μ-GDP, so it cannot reject μ
    where that mechanism reaches the count with probability above ``level``. Simulated (``games``
    games, 4,000 by default; μ on a 0.01 grid)."""
    mus = np.round(np.arange(0.0, 1.5001, 0.01), 2)
    tails = independent_tails(mus, r, games, seed=12345)
    v = int(statistics.median(correct))
    allowed = mus[tails[:, v] <= level]
    mu = float(allowed.max()) if allowed.size else 0.0
    return {"r": r, "level": level, "median_correct": v, "mu": mu, "epsilon": gaussian_epsilon(mu, DELTA)}


def _largest_fixed(tried: list[dict]) -> dict:
    """The tried entry of the fixed grid (the extremes rule, not the score-chosen split) with the
    most guesses: the count the ceiling below is computed for."""
    return [t for t in tried if t.get("rule", "extremes") == "extremes"][-1]


def one_seed(sigma: float, seed: int, claimed_mu: float) -> dict[str, float]:
    s, y = game(sigma, seed)
    fdp_gauss = fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=CONFIDENCE, tradeoff="gaussian")
    combined = audit_epsilon(s, y, delta=DELTA, confidence=CONFIDENCE, claimed_epsilon=EPSILON, claimed_mu=claimed_mu)
    return {
        "one-run": one_run_lower_bound(s, y, delta=DELTA, confidence=CONFIDENCE).epsilon_lower_bound,
        "one-run-fdp": fdp_one_run_lower_bound(s, y, delta=DELTA, confidence=CONFIDENCE).epsilon_lower_bound,
        "one-run-fdp-gaussian": fdp_gauss.epsilon_lower_bound,
        "one-run-fdp-gaussian mu": fdp_gauss.details["mu_lower_bound"],
        LARGEST + "correct": _largest_fixed(fdp_gauss.details["tried"])["correct"],
        LARGEST + "mu": _largest_fixed(fdp_gauss.details["tried"])["mu"],
        LARGEST + "level": _largest_fixed(fdp_gauss.details["tried"])["level"],
        "gdp": gdp_estimate(s, y, delta=DELTA, confidence=CONFIDENCE).epsilon_lower_bound,
        "audit_epsilon certified": combined["certified_epsilon_lower_bound"],
        "audit_epsilon overall": combined["epsilon_lower_bound"]["overall"],
        "audit_epsilon certified mu": combined["certified_mu_lower_bound"],
    }


def run_setting(sigma: float, seeds: list[int], label: str, claimed_mu: float) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for i, seed in enumerate(seeds):
        for name, value in one_seed(sigma, seed, claimed_mu).items():
            values.setdefault(name, []).append(float(value))
        if (i + 1) % 5 == 0 or i + 1 == len(seeds):
            log.info("%s: %d/%d seeds", label, i + 1, len(seeds))
    return values


def summary_rows(values: dict[str, list[float]], label: str, true_epsilon: float) -> list[dict]:
    rows = []
    for name, vals in values.items():
        if name.startswith(LARGEST):
            continue
        kind = "certified" if name in CERTIFIED_FOR or name == "audit_epsilon certified" else "estimate"
        if name.endswith(" mu"):
            kind = "certified μ"
        over = sum(v > EPSILON for v in vals)
        rows.append(
            {
                "mechanism": label,
                "true ε": f"{true_epsilon:.2f}",
                "estimator": name,
                "kind": kind,
                "median": f"{statistics.median(vals):.3f}",
                "min": f"{min(vals):.3f}",
                "max": f"{max(vals):.3f}",
                f"seeds > {EPSILON:g}": "-" if name.endswith(" mu") else f"{over}/{len(vals)}",
            }
        )
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="JSON file to write (parent folder must exist; required unless --smoke)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SEEDS} seeds instead of {SEEDS}")
    add_smoke_argument(parser, f"1 seed, {SMOKE_CEILING_GAMES} games for the count ceiling, --out in the smoke folder")
    args = parser.parse_args(argv)
    if args.smoke:
        start_smoke()
        args.out = str(results_dir() / "estimators.json")
    if args.out is None:
        parser.error("--out is required (a .json file)")
    out = Path(args.out)
    if out.suffix != ".json":
        parser.error(f"--out must name a .json file, got {args.out}")
    if not out.parent.is_dir():
        parser.error(f"--out: folder {out.parent} does not exist")
    if out.is_dir():
        parser.error(f"--out: {args.out} is a folder")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seeds = [0] if args.smoke else list(range(QUICK_SEEDS if args.quick else SEEDS))
    sigma = calibrated_sigma(EPSILON, DELTA)
    broken_sigma = sigma / 2
    broken_epsilon = gaussian_epsilon(1.0 / broken_sigma, DELTA)
    start = time.process_time()
    sound = run_setting(sigma, seeds, "sound", 1.0 / sigma)
    broken = run_setting(broken_sigma, seeds, "sigma halved", 1.0 / sigma)
    grid = fdp_guess_grid(CANARIES)
    games = SMOKE_CEILING_GAMES if args.smoke else CEILING_GAMES
    ceiling = count_ceiling(sound[LARGEST + "correct"], grid[-1], min(sound[LARGEST + "level"]), games)
    cpu = time.process_time() - start
    certified = list(CERTIFIED_FOR)
    payload = {
        "median_certified": {name: statistics.median(sound[name]) for name in certified},
        "max_certified": {name: max(sound[name]) for name in certified},
        "median_estimate": {name: statistics.median(sound[name]) for name in ESTIMATES},
        "max_estimate": {name: max(sound[name]) for name in ESTIMATES},
        "median_certified_mu": {"one-run-fdp-gaussian": statistics.median(sound["one-run-fdp-gaussian mu"])},
        "certified_for": CERTIFIED_FOR,
        "audit_epsilon": {
            "median_certified": statistics.median(sound["audit_epsilon certified"]),
            "max_certified": max(sound["audit_epsilon certified"]),
            "median_overall": statistics.median(sound["audit_epsilon overall"]),
            "note": "all estimators together, Bonferroni over them (each at 1 - 0.05/k); certified = maximum "
            "of one-run, one-run-fdp (valid for any mechanism)",
        },
        "sigma_halved": {
            "true_epsilon": broken_epsilon,
            "median": {name: statistics.median(vals) for name, vals in broken.items() if not name.startswith(LARGEST)},
            "caught": {
                name: sum(v > EPSILON for v in vals) / len(vals)
                for name, vals in broken.items()
                if not name.endswith(" mu") and not name.startswith(LARGEST)
            },
            "mu_claim_refuted": sum(v > 1.0 / sigma for v in broken["audit_epsilon certified mu"]) / len(seeds),
        },
        "sound_mu_claim_refuted": sum(v > 1.0 / sigma for v in sound["audit_epsilon certified mu"]) / len(seeds),
        "sound_seeds_mu_above_truth": sum(v > 1.0 / sigma for v in sound["one-run-fdp-gaussian mu"]),
        "count_ceiling": dict(ceiling, recursion_mu=statistics.median(sound[LARGEST + "mu"])),
        "setting": {
            "mechanism": "Gaussian, sensitivity 1",
            "epsilon": EPSILON,
            "delta": DELTA,
            "sigma": sigma,
            "mu": 1.0 / sigma,
            "canaries": CANARIES,
            "seeds": seeds,
            "confidence": CONFIDENCE,
            "quick": bool(args.quick),
            "smoke": bool(args.smoke),
            "ceiling_games": games,
            "cpu_seconds": cpu,
        },
        "per_seed": {"sound": sound, "sigma_halved": broken},
    }
    atomic_write_json(args.out, payload)
    rows = summary_rows(sound, "sound", EPSILON) + summary_rows(broken, "σ halved", broken_epsilon)
    command = "python benchmarks/bench_estimators.py " + (
        "--smoke" if args.smoke else "--out FILE.json" + (" --quick" if args.quick else "")
    )
    best = max(certified, key=lambda n: payload["median_certified"][n])
    best_any = max(("one-run", "one-run-fdp"), key=lambda n: payload["median_certified"][n])
    header = (
        "# ε estimators on the ideal one-run game (Gaussian mechanism, ε = 4, δ = 1e-5)\n\n"
        f"`{command}` — {platform.machine()}, {os.cpu_count()} cores, {cpu:.0f} CPU s. σ = {sigma:.5f} (μ = "
        f"{1 / sigma:.4f}) calibrated exactly (analytic Gaussian); {CANARIES} canaries per seed, each a fair coin, "
        f"score = coin + N(0, σ²); {len(seeds)} seeds (0-{seeds[-1]}); each estimator on its own at confidence "
        f"{CONFIDENCE}, and `audit_epsilon` (all of them, Bonferroni over the k run). *σ halved*: the same with "
        f"σ/2 (true ε = {broken_epsilon:.2f}), still claimed at ε = 4.\n\n"
        "*audit_epsilon certified mu*: μ_LB of `audit_epsilon` (Bonferroni share), certified for every mechanism; "
        f"above the claimed μ = {1 / sigma:.4f} it refutes the mechanism's μ-GDP claim (σ halved: "
        f"{payload['sigma_halved']['mu_claim_refuted']:.0%} of seeds; sound: {payload['sound_mu_claim_refuted']:.0%}).\n\n"
        "*certified*: a lower bound on ε at confidence 0.95; `one-run` and `one-run-fdp` for every mechanism, "
        "`one-run-fdp-gaussian` for Gaussian-shaped mechanisms like this one (its μ_LB, row *mu*, is certified for "
        "every mechanism). *estimate*: `gdp` treats the canaries of one run as independent trials.\n\n"
        f"Acceptance (issue 25): best certified median ≥ 2.0 — {best} {payload['median_certified'][best]:.3f} "
        f"({'met' if payload['median_certified'][best] >= 2.0 else 'not met'}; best valid for any mechanism: "
        f"{best_any} {payload['median_certified'][best_any]:.3f}); no seed certifies above 4 — max "
        f"{max(payload['max_certified'].values()):.3f} "
        f"({'met' if max(payload['max_certified'].values()) <= EPSILON else 'NOT MET: a bug'}); seeds whose "
        f"certified μ exceeds the true μ: {payload['sound_seeds_mu_above_truth']}/{len(seeds)}.\n\n"
        "The f-DP estimators guess by the extremes rule (the r scores farthest from the median, 'in' above it), "
        f"r = {' and '.join(map(str, grid))}, each at β/{len(grid)} (`dpaudit.auditing.estimators.fdp_guess_grid`); the split "
        "between 'in' and 'out' guesses is read from the scores, so it costs no Bonferroni share.\n\n"
        f"How much the count itself allows: at r = {ceiling['r']} (level {ceiling['level']:g}) the median seed has "
        f"{ceiling['median_correct']} right guesses, where the f-DP recursion certifies μ = "
        f"{payload['count_ceiling']['recursion_mu']:.3f} (median over seeds). Any valid test that reads only that "
        "count must keep its level on the product Gaussian mechanism (independent canaries), which is μ-GDP; "
        f"simulated ({games:,} games), that caps it at μ = {ceiling['mu']:.2f} (ε = {ceiling['epsilon']:.2f}). The gap is what the "
        "recursion pays to stay valid for every μ-GDP mechanism, including ones that correlate the canaries' privacy "
        "losses; whether a tighter test valid for all of them exists is not settled here.\n\n"
        "Why the (ε, δ) bounds stop near 1.5-2: 1,000 canaries see false-positive rates of order 1 %, where the "
        "Gaussian mechanism's likelihood ratio is about e^2 (an exactly known point at FPR 1 % gives "
        "ln((TPR − δ)/FPR) = 2.09; 2.72 at 0.1 %, 3.26 at 0.01 %, 3.90 at 3e-6). A certificate for every (ε, δ)-DP "
        "mechanism cannot extrapolate beyond what the counts show; the Gaussian curve does."
    )
    table = markdown_table(rows, list(rows[0]))
    atomic_write_text(results_dir() / "estimators.md", f"{header}\n\n{table}\n")
    log.info("wrote %s and %s", args.out, results_dir() / "estimators.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
