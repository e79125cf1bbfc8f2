"""GaussianSummaryEstimator against sklearn's LedoitWolf, side by side.

n = 50,000 float32 rows of m = 512 features (override: n m).  Prints the time
ratio (target <= 0.5), the peak memory allocated during ``fit`` (tracemalloc
sees every NumPy allocation) against sklearn's and against the bound "one
float64 chunk + a few m x m matrices", and the agreement of the results.

    python benchmarks/bench_summary.py [n] [m]
"""

import sys
import time
import tracemalloc

import numpy as np
from sklearn.covariance import LedoitWolf
from threadpoolctl import threadpool_info

from skslot import GaussianSummaryEstimator


def timed_peak(fn):
    tracemalloc.start()
    t = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, elapsed, peak


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(n, m)) * np.geomspace(0.1, 10, m) + 3.0).astype(np.float32)
    print(f"BLAS: {[(i['internal_api'], i['num_threads']) for i in threadpool_info()]}")
    print(f"X: {n} x {m} float32 ({X.nbytes / 2**20:.0f} MiB)")
    est = GaussianSummaryEstimator()
    lw, t_lw, peak_lw = timed_peak(lambda: LedoitWolf().fit(X))
    ours, t_ours, peak_ours = timed_peak(lambda: est.fit(X))
    s = ours.summaries_[None]
    bound = est.chunk_size * m * 8 * 2 + 8 * m * m * 8
    rel = np.abs(s.covariance - lw.covariance_).max() / np.abs(lw.covariance_).max()
    print(f"time: skslot {t_ours:.3f}s, sklearn LedoitWolf {t_lw:.3f}s, ratio {t_ours / t_lw:.2f}")
    print(
        f"peak allocated: skslot {peak_ours / 2**20:.1f} MiB (bound {bound / 2**20:.1f} MiB), "
        f"sklearn {peak_lw / 2**20:.1f} MiB, ratio {peak_ours / peak_lw:.2f}"
    )
    print(
        f"shrinkage {s.shrinkage:.6f} vs {lw.shrinkage_:.6f}; max relative covariance "
        f"difference {rel:.1e} (sklearn computes in float32, skslot accumulates in float64)"
    )


if __name__ == "__main__":
    main()
