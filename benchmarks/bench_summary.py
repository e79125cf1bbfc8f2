"""GaussianSummaryEstimator against sklearn's LedoitWolf, side by side.

n = 50,000 float32 rows of m = 512 features by default.  The two fits run
interleaved in one process (sklearn, skslot, skslot, sklearn, ... so neither
always goes first), ``--repeat`` times each, and the script prints the minimum
and median of each one's wall-clock and CPU seconds, and the median of the
per-round ratios (target <= 0.45), also over the "quiet" rounds in which both
fits ran within 10% of their fastest: on a shared machine the minimum is the
run least disturbed, and a ratio taken within one round cancels slow changes
of the load.  It also prints the BLAS threads, the load average before and after,
the peak memory allocated during ``fit`` (tracemalloc sees every NumPy
allocation; one untimed fit each) against sklearn's and against the bound "one
float64 chunk + a few m x m matrices", and the agreement of the results.

    python benchmarks/bench_summary.py [n] [m] [--repeat R] [--threads T]
                                       [--idle F [--wait S]] [--output FILE]

``--threads`` limits the BLAS and OpenMP threads (threadpoolctl); default: the
libraries' own setting.  ``--idle F`` (Linux) starts each round only once the
other processes leave a fraction F of the CPU time idle (read from
/proc/stat over 0.25 s), waiting at most ``--wait`` seconds; the report gives
the idle fractions measured.  ``--output`` also writes the report (Markdown).
"""

import argparse
import contextlib
import os
import time
import tracemalloc

import numpy as np
from sklearn.covariance import LedoitWolf
from threadpoolctl import threadpool_info, threadpool_limits

from skslot import GaussianSummaryEstimator

QUIET = 1.1  # a round is quiet when both fits take at most 1.1 times their fastest


def peak_allocated(fn):
    tracemalloc.start()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, peak


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def idle_fraction(window: float = 0.25) -> float:
    """Fraction of all CPUs' time spent idle over ``window`` seconds (this process sleeps)."""

    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return ticks[3] + ticks[4], sum(ticks)  # idle + iowait, total

    idle0, total0 = read()
    time.sleep(window)
    idle1, total1 = read()
    return (idle1 - idle0) / max(total1 - total0, 1)


def wait_for_idle(threshold: float, wait: float) -> float:
    start = time.monotonic()
    idle = idle_fraction()
    while idle < threshold and time.monotonic() - start < wait:
        idle = idle_fraction()
    return idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=50_000)
    parser.add_argument("m", nargs="?", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--idle", type=float, default=0.0)
    parser.add_argument("--wait", type=float, default=30.0)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    n, m = args.n, args.m
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(n, m)) * np.geomspace(0.1, 10, m) + 3.0).astype(np.float32)
    est = GaussianSummaryEstimator()
    fits = {"sklearn": lambda: LedoitWolf().fit(X), "skslot": lambda: est.fit(X)}
    limits = threadpool_limits(args.threads) if args.threads else contextlib.nullcontext()
    lines = []
    with limits:
        blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
        lines.append(f"BLAS: {blas}; {os.cpu_count()} CPUs; load average {load()} (before)")
        lines.append(f"X: {n} x {m} float32 ({X.nbytes / 2**20:.0f} MiB); {args.repeat} rounds")
        for fit in fits.values():  # warm up: first-call imports and allocations
            fit()
        wall = {name: [] for name in fits}
        cpu = {name: [] for name in fits}
        idle = []
        for k in range(args.repeat):
            if args.idle > 0:
                idle.append(wait_for_idle(args.idle, args.wait))
            for name in sorted(fits, reverse=bool(k % 2)):  # alternate who goes first
                w, c = timed(fits[name])
                wall[name].append(w)
                cpu[name].append(c)
        lw, peak_lw = peak_allocated(fits["sklearn"])
        ours, peak_ours = peak_allocated(fits["skslot"])
    lines.append(f"load average {load()} (after)")
    if idle:
        lines.append(
            f"CPU idle before the rounds (wanted >= {args.idle:g}): median {np.median(idle):.2f}, "
            f"min {min(idle):.2f}; {sum(i < args.idle for i in idle)} of {len(idle)} rounds "
            f"started after waiting {args.wait:g} s without it"
        )
    lines.append("")
    lines.append(
        "| seconds | skslot min | skslot median | sklearn min | sklearn median "
        "| ratio of minima | median of round ratios | quiet rounds: count, median ratio |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, t in (("wall", wall), ("CPU", cpu)):
        a, b = np.array(t["skslot"]), np.array(t["sklearn"])
        quiet = (a <= QUIET * a.min()) & (b <= QUIET * b.min())
        quiet_ratio = f"{np.median(a[quiet] / b[quiet]):.3f}" if quiet.any() else "-"
        lines.append(
            f"| {label} | {a.min():.3f} | {np.median(a):.3f} | {b.min():.3f} | {np.median(b):.3f} "
            f"| {a.min() / b.min():.3f} | {np.median(a / b):.3f} | {quiet.sum()}, {quiet_ratio} |"
        )
    lines.append(
        f"(quiet rounds: both fits within {QUIET - 1:.0%} of their fastest; on a loaded "
        "machine the median of round ratios is the steadiest figure)"
    )
    s = ours.summaries_[None]
    bound = est.chunk_size * m * 8 * 2 + 8 * m * m * 8
    rel = np.abs(s.covariance - lw.covariance_).max() / np.abs(lw.covariance_).max()
    lines.append("")
    lines.append(
        f"peak allocated: skslot {peak_ours / 2**20:.1f} MiB (bound {bound / 2**20:.1f} MiB), "
        f"sklearn {peak_lw / 2**20:.1f} MiB, ratio {peak_ours / peak_lw:.2f}"
    )
    lines.append(
        f"shrinkage {s.shrinkage:.6f} vs {lw.shrinkage_:.6f}; max relative covariance "
        f"difference {rel:.1e} (sklearn computes in float32, skslot accumulates in float64)"
    )
    report = "\n".join(lines)
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
