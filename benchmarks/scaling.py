"""How SLOT-Align's server step scales with the dimension m and the client count K.

Times ``BuresBarycenter().fit`` plus ``maps()`` on K Ledoit-Wolf
covariances (as clients would send), sweeping m at fixed K and K at fixed m,
and fits the growth exponent ``t ~ x^p`` by least squares on log-log axes.
Prints a markdown table.

    python benchmarks/scaling.py [max_m] [max_K]
"""

import sys
import time

import numpy as np
from threadpoolctl import threadpool_info

from skslot import BuresBarycenter, GaussianSummary


def lw_like_summaries(m: int, K: int, seed: int = 0) -> list[GaussianSummary]:
    """K covariances with the Ledoit-Wolf structure (low rank + scaled identity)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        rank = min(m, 64)
        B = rng.normal(size=(m, rank)) * np.geomspace(1, 0.05, rank)
        cov = B @ B.T + rng.uniform(0.05, 0.2) * np.eye(m)
        out.append(GaussianSummary(int(rng.integers(50, 500)), rng.normal(size=m), cov, client=k))
    return out


def time_server_step(m: int, K: int) -> tuple[float, int]:
    summaries = lw_like_summaries(m, K)
    start = time.perf_counter()
    bary = BuresBarycenter(tol=1e-8).fit(summaries)
    bary.maps()
    return time.perf_counter() - start, bary.n_iter_


def exponent(xs: list[int], ts: list[float]) -> float:
    return float(np.polyfit(np.log(xs), np.log(ts), 1)[0])


def main() -> None:
    max_m = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    max_K = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    print(f"BLAS: {[(i['internal_api'], i['num_threads']) for i in threadpool_info()]}")
    print("| sweep | m | K | iterations | seconds |")
    print("| --- | --- | --- | --- | --- |")
    ms = [m for m in (128, 256, 512, 1024, 2048) if m <= max_m]
    t_m = []
    for m in ms:
        t, it = time_server_step(m, 8)
        t_m.append(t)
        print(f"| m | {m} | 8 | {it} | {t:.2f} |", flush=True)
    Ks = [K for K in (2, 8, 32, 128) if K <= max_K]
    t_K = []
    for K in Ks:
        t, it = time_server_step(128, K)
        t_K.append(t)
        print(f"| K | 128 | {K} | {it} | {t:.2f} |", flush=True)
    t, it = time_server_step(128, 1000)
    print(f"| K | 128 | 1000 | {it} | {t:.2f} |")
    print(
        f"\nfitted exponents: time ~ m^{exponent(ms, t_m):.2f} (K=8), "
        f"time ~ K^{exponent(Ks, t_K):.2f} (m=128)"
    )


if __name__ == "__main__":
    main()
