"""Poisson batch draws: one uniform per example (``rand(n) < q``, O(n) per step) against
:func:`dpaudit.training.sampling.poisson_subset` (Binomial size + uniform subset, O(B)), side by side.

python benchmarks/bench_sampling.py            # n = 10⁴ … 10⁷, B = 256, medians of 7 × 20 draws
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from _harness import add_smoke_argument, markdown_table, start_smoke, write_result

from dpaudit.training.sampling import poisson_subset


def per_example_draw(n: int, q: float, generator: torch.Generator) -> torch.Tensor:
    """The O(n) draw this replaces: one uniform per example."""
    return (torch.rand(n, generator=generator) < q).nonzero().view(-1)


def cpu_ms_per_draw(draw, n: int, q: float, repeats: int, draws: int) -> float:
    """Median over ``repeats`` of the mean CPU milliseconds of ``draws`` calls (after one warm-up)."""
    generator = torch.Generator().manual_seed(0)
    draw(n, q, generator)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(draws):
            draw(n, q, generator)
        times.append((time.process_time() - start) / draws * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256, help="expected batch size B (q = B/n)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--draws", type=int, default=20)
    add_smoke_argument(parser, "n = 10,000 only, one draw")
    args = parser.parse_args()
    if args.smoke:
        start_smoke()
        args.repeats, args.draws = 1, 1
    torch.set_num_threads(1)
    rows = []
    for n in (10_000,) if args.smoke else (10_000, 100_000, 1_000_000, 10_000_000):
        q = args.batch / n
        per_example = cpu_ms_per_draw(per_example_draw, n, q, args.repeats, args.draws)
        subset = cpu_ms_per_draw(poisson_subset, n, q, args.repeats, args.draws)
        rows.append(
            {
                "n": f"{n:,}",
                "rand(n) < q, ms": f"{per_example:.3f}",
                "poisson_subset, ms": f"{subset:.3f}",
                "speed-up": f"{per_example / subset:.2f}×"
                if per_example < 10 * subset
                else f"{per_example / subset:.0f}×",
            }
        )
        print(rows[-1])
    header = (
        "# Poisson batch draws: O(n) uniforms vs O(B) Binomial + uniform subset\n\n"
        f"`python benchmarks/bench_sampling.py` — {platform.machine()}, one torch thread, B = {args.batch}; CPU "
        f"milliseconds per draw, median of {args.repeats} × {args.draws} draws, both measured in one run. The two "
        "draw the same law (every subset S with probability q^|S|(1 − q)^(n − |S|); `tests/dpaudit/training/test_sampling.py`). A "
        "DP-SGD epoch takes n/B steps, so the per-example draw costs O(n²/B) per epoch and the subset draw O(n)."
    )
    path = write_result("sampling", header, markdown_table(rows, list(rows[0])))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
