"""NumPy on the CPU against torch on a GPU, side by side in one run.

For m in {512, 1024, 2048, 4096} and K in {4, 32} clients, prints the time of

- one Bures-Wasserstein fixed-point iteration (float64, K eigendecompositions
  batched on the GPU),
- the summaries of K clients' rows (``GaussianSummaryEstimator.fit``, n rows
  per client, float32 and float64 rows),

and the transform throughput (rows per second of ``GaussianMap.apply``) for
float32 and float64, with the ratio CPU / GPU.  Then the low-rank path
(summaries in factor form, K clients of ``--low-rank-rows`` rows, fewer than
``m``): each client's factor summary (NumPy), the server step
(``BuresBarycenter.fit``: the ``d x d`` fixed point and every map, ``d`` the
sum of the ranks) with the fixed point in NumPy or on the device, and the
factor-form ``GaussianMap.apply``'s throughput on NumPy rows and on device tensors.
NumPy measurements that would not fit the time budget are skipped and marked;
the script stops measuring NumPy once ``--budget`` seconds have passed, so it
finishes unattended in under 3 minutes on one GPU.

Usage (defaults are the full grid on CUDA)::

    python benchmarks/gpu_bench.py [--device cuda] [--dims 512,1024,2048,4096]
        [--clients 4,32] [--rows 4096] [--transform-rows 100000] [--budget 120]
        [--low-rank-rows 100]

``--device cpu --dims 64 --clients 4 --rows 256 --transform-rows 1000
--low-rank-rows 10`` is a smoke run of the same code without a GPU.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from threadpoolctl import threadpool_info

from skslot import BuresBarycenter, GaussianMap, GaussianSummaryEstimator
from skslot.barycenter import bures_wasserstein_barycenter
from skslot.ledoit_wolf import low_rank_summary


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(func, device: torch.device, repeat: int = 1) -> float:
    """Best of ``repeat`` wall times, with the device synchronised around each call."""
    best = float("inf")
    for _ in range(repeat):
        synchronise(device)
        start = time.perf_counter()
        func()
        synchronise(device)
        best = min(best, time.perf_counter() - start)
    return best


def covariances_on(device: torch.device, m: int, K: int, seed: int) -> torch.Tensor:
    """K well-conditioned SPD matrices ``A A^T / m + I``, made on the device."""
    generator = torch.Generator(device=device).manual_seed(seed)
    A = torch.randn(K, m, m, generator=generator, device=device, dtype=torch.float64)
    return A @ A.mT / m + torch.eye(m, device=device, dtype=torch.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dims", default="512,1024,2048,4096")
    parser.add_argument("--clients", default="4,32")
    parser.add_argument("--rows", type=int, default=4096, help="rows per client (summaries)")
    parser.add_argument("--transform-rows", type=int, default=100_000)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds for NumPy runs")
    parser.add_argument(
        "--low-rank-rows", type=int, default=100, help="rows per client (low-rank path)"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    dims = [int(d) for d in args.dims.split(",")]
    clients = [int(k) for k in args.clients.split(",")]
    start = time.perf_counter()
    blas = ", ".join(f"{i['internal_api']} {i['num_threads']} threads" for i in threadpool_info())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"torch {torch.__version__} on {name}; NumPy {np.__version__} with {blas}; "
        f"{os.cpu_count()} CPU cores"
    )
    # warm-up: CUDA context, cuSOLVER and cuBLAS handles
    bures_wasserstein_barycenter(covariances_on(device, 64, 2, 0), np.full(2, 0.5), max_iter=2)

    cpu = torch.device("cpu")

    def numpy_allowed(estimate: float) -> bool:
        return time.perf_counter() - start + estimate < args.budget

    per_flop: float | None = None  # NumPy seconds per K m^3, from the last measurement
    print("\n## Barycenter: seconds per fixed-point iteration (float64)\n")
    print("| m | K | NumPy CPU | torch GPU | CPU / GPU |")
    print("| --- | --- | --- | --- | --- |")
    for m in dims:
        for K in clients:
            C = covariances_on(device, m, K, seed=m + K)
            weights = np.full(K, 1.0 / K)

            def iterations(covariances, n_iter: int, on: torch.device, w=weights, m=m) -> float:
                # float64 iterations on both sides (NumPy's default mixed precision runs
                # float32 decompositions first: not the same work per iteration)
                return timed(
                    lambda: bures_wasserstein_barycenter(
                        covariances, w, tol=0.0, max_iter=n_iter, precision="float64"
                    ),
                    on,
                    repeat=3 if on.type == "cuda" or m <= 256 else 1,
                )

            # two iterations = (3 iterations) - (1 iteration): start and copies cancel
            t_gpu = (iterations(C, 3, device) - iterations(C, 1, device)) / 2
            estimate = 6 * per_flop * K * m**3 if per_flop else 0.0
            if numpy_allowed(estimate):
                host = list(C.cpu().numpy())
                cpu = torch.device("cpu")
                t_cpu = (iterations(host, 3, cpu) - iterations(host, 1, cpu)) / 2
                per_flop = t_cpu / (K * m**3)
                print(f"| {m} | {K} | {t_cpu:.3f} | {t_gpu:.4f} | {t_cpu / t_gpu:.1f}x |")
            else:
                print(f"| {m} | {K} | skipped (est. {estimate / 6:.1f}) | {t_gpu:.4f} | - |")
            del C

    print(f"\n## Summaries of K clients x {args.rows} rows: seconds\n")
    print("| m | K | dtype | NumPy CPU | torch GPU | CPU / GPU |")
    print("| --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for m in dims:
        for K in clients:
            for dtype in (np.float32, np.float64):
                n = args.rows * K
                client = np.repeat(np.arange(K), args.rows)
                X = torch.randn(n, m, device=device, dtype=getattr(torch, np.dtype(dtype).name))

                def gpu(X=X, client=client) -> None:
                    GaussianSummaryEstimator().fit(X, client=client)

                t_gpu = timed(gpu, device)
                estimate = 2e-11 * n * m * m  # about 50 GFLOP/s on the CPU
                if numpy_allowed(estimate):
                    host = X.cpu().numpy()
                    t_cpu = timed(
                        lambda host=host, client=client: GaussianSummaryEstimator().fit(
                            host, client=client
                        ),
                        torch.device("cpu"),
                    )
                    cells = f"{t_cpu:.3f} | {t_gpu:.4f} | {t_cpu / t_gpu:.1f}x"
                else:
                    cells = f"skipped | {t_gpu:.4f} | -"
                print(f"| {m} | {K} | {np.dtype(dtype).name} | {cells} |")
                del X

    print(f"\n## Transform: rows per second ({args.transform_rows} rows)\n")
    print("| m | dtype | NumPy CPU | torch GPU | GPU / CPU |")
    print("| --- | --- | --- | --- | --- |")
    for m in dims:
        T = GaussianMap(np.eye(m) + 0.01 * rng.normal(size=(m, m)), rng.normal(size=m))
        for dtype in (np.float32, np.float64):
            n = args.transform_rows
            X = torch.randn(n, m, device=device, dtype=getattr(torch, np.dtype(dtype).name))
            T.apply(X[:1000])  # warm-up
            t_gpu = timed(lambda X=X, T=T: T.apply(X), device, repeat=3)
            estimate = 2e-11 * n * m * m
            if numpy_allowed(estimate):
                host = X.cpu().numpy()
                t_cpu = timed(lambda host=host, T=T: T.apply(host), torch.device("cpu"))
                cells = f"{n / t_cpu:,.0f} | {n / t_gpu:,.0f} | {t_cpu / t_gpu:.1f}x"
            else:
                cells = f"skipped | {n / t_gpu:,.0f} | -"
            print(f"| {m} | {np.dtype(dtype).name} | {cells} |")
            del X

    n = args.low_rank_rows
    print(f"\n## Low-rank path: K clients x {n} rows, seconds (transform: rows per second)\n")
    print(
        "| m | K | d | summary, NumPy | server step: NumPy CPU | torch GPU | CPU / GPU "
        "| transform float32: NumPy CPU | torch GPU | GPU / CPU |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in dims:
        for K in clients:
            if K * (n - 1) >= m:
                continue  # the ranks span R^m: the estimators take the dense path
            parts = [rng.normal(k, 1.0 + k, size=(n, m)) for k in range(K)]
            t_summary = timed(lambda p=parts[0]: low_rank_summary(p), cpu)
            summaries = [low_rank_summary(p) for p in parts]
            d = sum(s.rank for s in summaries)
            on_device = BuresBarycenter(device=device)
            on_device.fit(summaries)  # warm-up
            t_gpu = timed(lambda s=summaries, b=on_device: b.fit(s), device)
            estimate = 15 * per_flop * K * d**3 if per_flop else 0.0
            if numpy_allowed(estimate):
                t_cpu = timed(lambda s=summaries: BuresBarycenter().fit(s), cpu)
                step = f"{t_cpu:.3f} | {t_gpu:.4f} | {t_cpu / t_gpu:.1f}x"
            else:
                step = f"skipped (est. {estimate:.0f}) | {t_gpu:.4f} | -"
            T = on_device.maps()[0].geodesic(0.6)
            rows = args.transform_rows
            X = torch.randn(rows, m, device=device, dtype=torch.float32)
            T.apply(X[:1000])  # warm-up
            t_gpu = timed(lambda X=X, T=T: T.apply(X), device, repeat=3)
            if numpy_allowed(4e-11 * rows * m * d):
                host = X.cpu().numpy()
                t_cpu = timed(lambda host=host, T=T: T.apply(host), cpu)
                apply = f"{rows / t_cpu:,.0f} | {rows / t_gpu:,.0f} | {t_cpu / t_gpu:.1f}x"
            else:
                apply = f"skipped | {rows / t_gpu:,.0f} | -"
            print(f"| {m} | {K} | {d} | {t_summary:.4f} | {step} | {apply} |")
            del X
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
