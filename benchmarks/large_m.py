"""Time of the summaries, barycenter and maps at large m with few rows.

Four clients of n = 100 rows each in m = 4096 dimensions (synthetic, scaled
and shifted per client), default threads.  Prints the time of each step; see
docs/scaling.md.

Run: python benchmarks/large_m.py [m] [n] [K]   (about 10 minutes on 2 cores at the defaults)
"""

from __future__ import annotations

import sys
import time

import numpy as np
from threadpoolctl import threadpool_info

from skslot import BuresBarycenter, GaussianSummaryEstimator


def main(m: int = 4096, n: int = 100, K: int = 4) -> None:
    rng = np.random.default_rng(0)
    threads = sorted({info["num_threads"] for info in threadpool_info()})
    print(f"m = {m}, n = {n} rows per client, K = {K}; BLAS threads {threads}")
    client = np.repeat(np.arange(K), n)
    X = rng.normal(size=(K * n, m)) * rng.uniform(0.5, 2.0, m) + 0.3 * client[:, None]
    start = time.perf_counter()
    summaries = GaussianSummaryEstimator().fit(X, client=client).summaries_
    print(f"summaries: {time.perf_counter() - start:.1f} s for {K} clients")
    start = time.perf_counter()
    bary = BuresBarycenter().fit(list(summaries.values()))
    print(
        f"barycenter: {bary.n_iter_} iterations, {time.perf_counter() - start:.0f} s, "
        f"residual {bary.residual_:.1e}"
    )
    start = time.perf_counter()
    bary.maps()
    print(f"maps: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
