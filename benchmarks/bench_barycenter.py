"""Barycenter speed against POT, side by side in one run, at equal accuracy.

Both solvers stop at the same relative fixed-point residual (<= 1e-8): POT's
absolute ``eps`` on ``||C_b - C_new||`` is set to ``1e-9 * ||C_b||``.  Prints
times, the ratio, each result's residual (measured by one common function) and
the relative difference of the two barycenters, with one BLAS thread and with
the default thread count.  Also counts eigendecompositions per iteration.

    python benchmarks/bench_barycenter.py [m] [K]
"""

import sys
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import skslot._linalg as linalg
from skslot.barycenter import bures_wasserstein_barycenter
from skslot.summary import GaussianSummaryEstimator


def ledoit_wolf_covariances(m: int, K: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """K Ledoit-Wolf covariances of anisotropic, differently rotated clients."""
    rng = np.random.default_rng(seed)
    covs, counts = [], []
    for _ in range(K):
        n = int(rng.integers(m // 2, 4 * m))
        Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
        scales = np.geomspace(1.0, rng.uniform(10, 100), m)
        X = rng.normal(size=(n, m)) * np.sqrt(scales) @ Q.T
        covs.append(GaussianSummaryEstimator().fit(X).summaries_[None].covariance)
        counts.append(n)
    w = np.array(counts, dtype=float)
    return covs, w / w.sum()


def residual(S: np.ndarray, covs: list, w: np.ndarray) -> float:
    R = linalg.sym_eigh(S).sqrt()
    M = sum(wk * linalg.sym_eigh(R @ C @ R).sqrt() for wk, C in zip(w, covs, strict=True))
    return float(np.linalg.norm(M - S) / np.linalg.norm(S))


def count_eigh(fn):
    calls = 0
    original = np.linalg.eigh

    def counting(A, *args, **kwargs):
        nonlocal calls
        calls += int(np.prod(np.shape(A)[:-2]))  # matrices: a batched call counts each
        return original(A, *args, **kwargs)

    np.linalg.eigh = counting
    try:
        result = fn()
    finally:
        np.linalg.eigh = original
    return result, calls


def main() -> None:
    import ot

    m = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    K = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    covs, w = ledoit_wolf_covariances(m, K)
    means = np.zeros((K, m))
    stack = np.stack(covs)
    print(f"POT {ot.__version__}; m={m}, K={K} Ledoit-Wolf covariances")
    print(f"BLAS: {[(i['internal_api'], i['num_threads']) for i in threadpool_info()]}")
    for threads in (1, None):
        with threadpool_limits(threads):
            t = time.perf_counter()
            ours = bures_wasserstein_barycenter(covs, w, tol=1e-9, max_iter=1000)
            t_ours = time.perf_counter() - t
            eps = 1e-9 * np.linalg.norm(ours.covariance)
            t = time.perf_counter()
            _, pot_cov, pot_log = ot.gaussian.bures_wasserstein_barycenter(
                means, stack, weights=w, num_iter=10_000, eps=eps, log=True
            )
            t_pot = time.perf_counter() - t
        _, n_eigh = count_eigh(lambda: bures_wasserstein_barycenter(covs, w, tol=1e-9))
        diff = np.linalg.norm(ours.covariance - pot_cov) / np.linalg.norm(pot_cov)
        label = "1 thread" if threads == 1 else "default threads"
        print(
            f"[{label}] skslot {t_ours:.3f}s ({ours.n_iter} it, residual "
            f"{residual(ours.covariance, covs, w):.1e}) | POT {t_pot:.3f}s "
            f"({pot_log['num_iter']} it, residual "
            f"{residual(pot_cov, covs, w):.1e}) | speed-up x{t_pot / t_ours:.1f} | "
            f"relative difference {diff:.1e}"
        )
    per_iter = (n_eigh - K) / ours.n_iter  # K eighs for the sqrt-mean start
    print(
        f"eigendecompositions per iteration: {per_iter:.1f} (at most K + 1 = {K + 1}), "
        "plus one Cholesky factorisation"
    )


if __name__ == "__main__":
    main()
