"""Time scipy's symmetric eigensolver drivers side by side (best of 3).

Run: python benchmarks/bench_eigh_drivers.py
"""

import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_info, threadpool_limits


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    rng = np.random.default_rng(0)
    blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    print(f"BLAS: {blas}")
    print("m     threads  evr(ms)  evd(ms)  ev(ms)   evr/evd")
    for m in (128, 256, 512, 1024):
        Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
        A = (Q * np.geomspace(1, 1e3, m)) @ Q.T
        for threads in (1, None):
            with threadpool_limits(threads):
                t = {
                    d: best_of(lambda A=A, d=d: scipy.linalg.eigh(A, driver=d, check_finite=False))
                    for d in ("evr", "evd", "ev")
                }
            print(
                f"{m:<5} {threads or 'default':<8} {t['evr'] * 1e3:8.1f} {t['evd'] * 1e3:8.1f} "
                f"{t['ev'] * 1e3:8.1f} {t['evr'] / t['evd']:8.2f}"
            )


if __name__ == "__main__":
    main()
