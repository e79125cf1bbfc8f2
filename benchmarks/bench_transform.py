"""SLOTTransformer.transform against the bare affine map, side by side.

n = 200,000 rows, m = 512 (override: n m), float32 and float64.  Prints the
time of ``X @ A.T + b``, of ``transform`` (one client), of ``GaussianMap.apply``
into a preallocated ``out``, their ratios (target <= 1.3) and the output dtype.

    python benchmarks/bench_transform.py [n] [m]
"""

import sys
import time

import numpy as np
from threadpoolctl import threadpool_info

from skslot import SLOTTransformer


def best_of(fn, repeat=3):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    rng = np.random.default_rng(0)
    print(f"BLAS: {[(i['internal_api'], i['num_threads']) for i in threadpool_info()]}")
    fit_rows = rng.normal(size=(4 * m, m)) * np.geomspace(0.5, 2, m)
    client = np.repeat([0, 1], 2 * m)
    slot = SLOTTransformer(tau=0.4, mean_tau=None, client_tau="uniform").fit(
        fit_rows + client[:, None], client=client
    )
    T = slot.maps_[0].geodesic(slot.tau)
    for dtype in (np.float32, np.float64):
        X = rng.normal(size=(n, m)).astype(dtype)
        A_t, b = T.linear.T.astype(dtype), T.offset.astype(dtype)
        out = np.empty_like(X)
        bare = best_of(lambda X=X, A_t=A_t, b=b: X @ A_t + b)
        ours = best_of(lambda X=X: slot.transform(X, client=0))
        into = best_of(lambda X=X, out=out: T.apply(X, out=out))
        dt = slot.transform(X[:10], client=0).dtype
        print(
            f"{np.dtype(dtype).name}: bare {bare:.3f}s, transform {ours:.3f}s "
            f"(ratio {ours / bare:.2f}), apply(out=) {into:.3f}s (ratio {into / bare:.2f}); "
            f"output {dt}"
        )


if __name__ == "__main__":
    main()
