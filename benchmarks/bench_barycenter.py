"""Barycenter speed against POT, side by side in one run, at equal accuracy.

Both solvers stop at the same relative fixed-point residual (``tol``, default
1e-8): POT's absolute ``eps`` on ``||C_b - C_new||`` (its step, which is the
fixed-point residual) is set to ``tol * ||C_b||``.  Prints
times, the ratio, each result's residual (measured by one common function) and
the relative difference of the two barycenters, with one BLAS thread and with
the default thread count (each time the median of ``repeats`` runs of each
solver, interleaved).  Also counts eigendecompositions per iteration.

    python benchmarks/bench_barycenter.py [m] [K] [tol] [repeats]
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


def low_rank_ridge_covariances(m: int, K: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """The covariances and sample weights of ``scaling.py``'s clients.

    ``B B^T + c I`` with a rank-64 ``B`` in a random subspace per client: the
    Ledoit-Wolf structure of clients whose features fill different
    low-dimensional subspaces, a slowly converging fixed point.
    """
    from scaling import lw_like_summaries

    summaries = lw_like_summaries(m, K, seed)
    w = np.array([s.n for s in summaries], dtype=float)
    return [s.covariance for s in summaries], w / w.sum()


def office_caltech_covariances(m: int, K: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """Ledoit-Wolf covariances of real clients: Office-Caltech10 under the paper's protocol.

    The embedded SURF features projected on their first ``m`` principal
    components, ``K / 4`` clients per domain, label shift Dirichlet(0.1) on the
    70 % training split; clients left with fewer than 2 rows take no part.
    """
    from sklearn.decomposition import PCA

    from skslot.datasets import dirichlet_partition, load_office_caltech10

    data = load_office_caltech10()
    Z = PCA(m, random_state=seed).fit_transform(data.X.astype(np.float64))
    part = dirichlet_partition(
        data.y, data.domain, alpha=0.1, clients_per_domain=max(1, K // 4), random_state=seed
    )
    return real_covariances(Z[part.train_index], part.train_client)


def digits_covariances(m: int, K: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """Ledoit-Wolf covariances of real clients: the embedded digits features.

    The 256-d EfficientNet-Lite0 digits (:func:`skslot.datasets.load_digits_effnet`),
    on their first ``m`` principal components below 256, about ``K / 3``
    clients per domain (at least one), label shift Dirichlet(0.1) on the 70 %
    training split; clients left with fewer than 2 rows take no part.  Empty
    (the case is skipped) for ``m`` above 256.
    """
    from sklearn.decomposition import PCA

    from skslot.datasets import dirichlet_partition, load_digits_effnet

    data = load_digits_effnet()
    if m > data.X.shape[1]:
        return [], np.zeros(0)
    Z = data.X.astype(np.float64)
    if m < Z.shape[1]:
        Z = PCA(m, random_state=seed).fit_transform(Z)
    part = dirichlet_partition(
        data.y, data.domain, alpha=0.1, clients_per_domain=max(1, round(K / 3)), random_state=seed
    )
    return real_covariances(Z[part.train_index], part.train_client)


def real_covariances(X: np.ndarray, client: np.ndarray) -> tuple[list, np.ndarray]:
    """The Ledoit-Wolf covariances and sample weights of the clients of 2 rows or more."""
    kept = np.isin(client, np.flatnonzero(np.bincount(client) >= 2))
    est = GaussianSummaryEstimator().fit(X[kept], client=client[kept])
    covs = [s.covariance for s in est.summaries_.values()]
    w = np.array([s.n for s in est.summaries_.values()], dtype=float)
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


def compare(covs: list, w: np.ndarray, tol: float, threads: int | None, repeats: int) -> str:
    import ot

    K, m = len(covs), covs[0].shape[0]
    times_ours, times_pot = [], []
    with threadpool_limits(threads):
        for _ in range(repeats):  # interleaved: a slower spell of the machine hits both
            t = time.perf_counter()
            ours = bures_wasserstein_barycenter(covs, w, tol=tol, max_iter=1000)
            times_ours.append(time.perf_counter() - t)
            eps = tol * np.linalg.norm(ours.covariance)
            t = time.perf_counter()
            _, pot_cov, pot_log = ot.gaussian.bures_wasserstein_barycenter(
                np.zeros((K, m)), np.stack(covs), weights=w, num_iter=10_000, eps=eps, log=True
            )
            times_pot.append(time.perf_counter() - t)
    t_ours, t_pot = float(np.median(times_ours)), float(np.median(times_pot))
    diff = np.linalg.norm(ours.covariance - pot_cov) / np.linalg.norm(pot_cov)
    label = "1 thread" if threads == 1 else "default threads"
    if repeats > 1:
        label += f", median of {repeats}"
    return (
        f"[{label}] skslot {t_ours:.3f}s ({ours.n_iter} it, residual "
        f"{residual(ours.covariance, covs, w):.1e}) | POT {t_pot:.3f}s "
        f"({pot_log['num_iter']} it, residual {residual(pot_cov, covs, w):.1e}) | "
        f"speed-up x{t_pot / t_ours:.1f} | relative difference {diff:.1e}"
    )


def main() -> None:
    import ot

    m = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    K = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-8
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    print(f"POT {ot.__version__}; m={m}, K={K}, relative fixed-point residual <= {tol:.0e}")
    print(f"BLAS: {[(i['internal_api'], i['num_threads']) for i in threadpool_info()]}")
    cases = {
        "Ledoit-Wolf estimates of sampled clients": ledoit_wolf_covariances,
        "low rank + ridge (Ledoit-Wolf structure, random subspaces)": low_rank_ridge_covariances,
        "real clients: Office-Caltech10, PCA to m, Dirichlet(0.1)": office_caltech_covariances,
        "real clients: the embedded digits, PCA to m, Dirichlet(0.1)": digits_covariances,
    }
    for name, generate in cases.items():
        covs, w = generate(m, K)
        if not covs:
            print(f"{name}: skipped (m = {m} exceeds the features' dimension)")
            continue
        print(f"{name} (K = {len(covs)}):")
        for threads in (1, None):
            print("  " + compare(covs, w, tol, threads, repeats), flush=True)
        plain = bures_wasserstein_barycenter(covs, w, tol=tol, max_iter=1000, anderson=0)
        result, n_eigh = count_eigh(lambda: bures_wasserstein_barycenter(covs, w, tol=tol))  # noqa: B023
        print(
            f"  eigendecompositions: {n_eigh} in {result.n_iter} iterations, "
            f"{n_eigh / result.n_iter:.1f} per iteration (at most K + 1 = {len(covs) + 1}), "
            f"plus one or two Cholesky factorisations; without Anderson acceleration: "
            f"{plain.n_iter} iterations"
        )


if __name__ == "__main__":
    main()
