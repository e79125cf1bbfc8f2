"""The server step with many clients: iterations, time and peak memory against K.

K covariances with the Ledoit-Wolf structure (a random rank-64 part per
client plus a scaled identity, as in ``benchmarks/scaling.py``) are written
once to a float32 ``.npy`` stack on disk, then
:func:`skslot.barycenter.bures_wasserstein_barycenter` runs on them in a fresh
process per measurement, so that each peak memory is its own:

* ``held``: the default (``client_batch=None``): the covariances read
  into memory in float64, as the server holds decoded summaries, and
  stacked for one batched iteration (K = 10, 100; at K = 1000 also m = 256);
* ``streamed``: ``client_batch=16`` on the memory-mapped float32 stack, the
  iteration reading 16 clients at a time from disk, ``n_jobs=2`` (one BLAS
  thread per job): iterations, time, peak memory;
* speed-up of ``n_jobs``: the first 3 iterations of the streamed run with
  ``n_jobs=1`` (2 BLAS threads, the default) and ``n_jobs=2`` (1 BLAS thread
  each), side by side in this one run: seconds per iteration of each;
* ``ray``: the streamed run at K = 100 with joblib's Ray backend
  (``ray.util.joblib``, a local Ray of 2 CPUs): the same code spread by Ray;
* ``sgd``: a stochastic warm start (Chewi et al., 2020): one pass of
  stochastic Bures-Wasserstein gradient steps over a random tenth of the
  clients (drawn with probability ``w_k``, step ``1 / (t + 1)``), then the
  fixed point to the same tolerance from there; total eigendecompositions
  and time against the fixed point from the weighted mean (m = 256, K = 100).

Peak memory is sampled from ``/proc/self/status`` every 10 ms: ``VmRSS``
(resident, including the pages of the memory-mapped file, which the kernel
can drop) and ``RssAnon`` (the process's own allocations).

Run: python benchmarks/many_clients.py > docs/results/many_clients.md
(about 30 minutes on 2 cores; ``--sizes``, ``--warm-start``, ``--ray`` and
``--held-up-to`` choose smaller cases).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from joblib import parallel_config
from threadpoolctl import threadpool_info, threadpool_limits

from skslot._linalg import sym_eigh, symmetrize
from skslot.barycenter import bures_wasserstein_barycenter

RANK = 64
BATCH = 16


def write_stack(path: Path, m: int, K: int, seed: int = 0) -> np.ndarray:
    """K Ledoit-Wolf-like covariances as a float32 ``.npy``, one client at a time; the weights."""
    rng = np.random.default_rng(seed)
    stack = np.lib.format.open_memmap(path, "w+", np.float32, (K, m, m))
    for k in range(K):
        B = rng.normal(size=(m, RANK)) * np.geomspace(1, 0.05, RANK)
        stack[k] = B @ B.T + rng.uniform(0.05, 0.2) * np.eye(m)
    stack.flush()
    n = rng.integers(50, 500, size=K)
    return n / n.sum()


class PeakMemory:
    """The largest VmRSS and RssAnon of this process, sampled in a thread."""

    def __init__(self) -> None:
        self.peak = {"VmRSS": 0, "RssAnon": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            with open("/proc/self/status") as f:
                for line in f:
                    key = line.split(":")[0]
                    if key in self.peak:
                        self.peak[key] = max(self.peak[key], int(line.split()[1]) * 1024)
            self._stop.wait(0.01)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sgd_warm_start(covariances, weights: np.ndarray, steps: int, seed: int = 0) -> np.ndarray:
    """Stochastic Bures-Wasserstein gradient steps (Chewi et al., 2020) from one client.

    ``S <- G S G`` with ``G = (1 - eta) I + eta T_k`` and ``T_k`` the map from
    ``N(0, S)`` to ``N(0, Sigma_k)``, ``k`` drawn with probability ``w_k``,
    ``eta = 1 / (t + 1)``: two eigendecompositions per step.
    """
    rng = np.random.default_rng(seed)
    draws = rng.choice(len(weights), size=steps, p=weights)
    S = np.asarray(covariances[draws[0]], dtype=np.float64)
    m = S.shape[0]
    for t, k in enumerate(draws[1:], start=1):
        root = sym_eigh(S)
        half, inv_half = root.sqrt(), root.inv_sqrt()
        inner = sym_eigh(half @ np.asarray(covariances[k], dtype=np.float64) @ half)
        T = inv_half @ inner.sqrt() @ inv_half
        eta = 1.0 / (t + 1)
        G = (1 - eta) * np.eye(m) + eta * symmetrize(T)
        S = symmetrize(G @ S @ G)
    return S


def measure(task: dict) -> dict:
    """One measurement, in this process (run as a child of the script)."""
    weights = np.load(task["weights"])
    stack = np.load(task["stack"], mmap_mode="r")
    threads = 1 if task["n_jobs"] == 2 else None
    options = {"max_iter": task.get("max_iter", 100)}
    out: dict = {}
    with PeakMemory() as memory, threadpool_limits(threads):
        start = time.perf_counter()
        if task["mode"] == "held":
            covariances = list(np.asarray(stack, dtype=np.float64))  # decoded summaries
            result = bures_wasserstein_barycenter(covariances, weights, **options)
        elif task["mode"] == "ray":
            import ray
            from ray.util.joblib import register_ray

            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            register_ray()
            out["ray_init_seconds"] = time.perf_counter() - start
            start = time.perf_counter()
            with parallel_config(backend="ray", n_jobs=2):
                result = bures_wasserstein_barycenter(stack, weights, client_batch=BATCH)
            ray.shutdown()
        else:
            init = "mean"
            if task["mode"] == "sgd":
                init = sgd_warm_start(stack, weights, steps=max(2, len(weights) // 10))
                out["warm_start_seconds"] = time.perf_counter() - start
            result = bures_wasserstein_barycenter(
                stack, weights, init=init, client_batch=BATCH, n_jobs=task["n_jobs"], **options
            )
        out["seconds"] = time.perf_counter() - start
    out.update(
        n_iter=result.n_iter,
        residual=result.residual,
        peak_rss=memory.peak["VmRSS"],
        peak_anon=memory.peak["RssAnon"],
        covariance_norm=float(np.linalg.norm(result.covariance)),
    )
    if task.get("reference"):
        reference = np.load(task["reference"])
        out["distance"] = float(np.linalg.norm(result.covariance - reference))
        out["distance"] /= float(np.linalg.norm(reference))
    if task.get("save"):
        np.save(task["save"], result.covariance)
    return out


def in_child(task: dict) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(task)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def gb(n: float) -> str:
    return f"{n / 2**30:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--sizes", default="256:10,256:100,256:1000,512:10,512:100,512:1000", help="m:K,..."
    )
    parser.add_argument("--warm-start", default="256:100", help="m:K of the stochastic start")
    parser.add_argument("--ray", default="256:100", help="m:K of the Ray run, or 'none'")
    parser.add_argument("--held-up-to", type=int, default=100, help="largest K held at every m")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return
    sizes = [tuple(int(v) for v in size.split(":")) for size in args.sizes.split(",")]
    smallest_m = min(m for m, _ in sizes)
    warm_start = tuple(int(v) for v in args.warm_start.split(":"))
    ray_at = None if args.ray == "none" else tuple(int(v) for v in args.ray.split(":"))
    blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    print(f"# Many clients: the server step against K\n\nBLAS: {blas}; {os.cpu_count()} cores.\n")
    print(
        "| m | K | covariances (float32 on disk, MB) | mode | iterations | seconds "
        "| peak RSS (GB) | peak anonymous (GB) |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    speed, extra = [], []
    with tempfile.TemporaryDirectory() as folder:
        for m, K in sizes:
            stack, weights = Path(folder) / "covs.npy", Path(folder) / "w.npy"
            np.save(weights, write_stack(stack, m, K))
            base = {"stack": str(stack), "weights": str(weights)}
            reference = Path(folder) / "reference.npy"
            runs = [
                ("streamed, n_jobs=2", {"mode": "streamed", "n_jobs": 2, "save": str(reference)})
            ]
            if K <= args.held_up_to or m == smallest_m:
                runs.append(("held, n_jobs=1", {"mode": "held", "n_jobs": 1}))
            for label, task in runs:
                r = in_child({**base, **task})
                print(
                    f"| {m} | {K} | {stack.stat().st_size / 1e6:.0f} | {label} | {r['n_iter']} "
                    f"| {r['seconds']:.1f} | {gb(r['peak_rss'])} | {gb(r['peak_anon'])} |",
                    flush=True,
                )
            per_iteration = {}
            for n_jobs in (1, 2):
                r = in_child({**base, "mode": "streamed", "n_jobs": n_jobs, "max_iter": 3})
                per_iteration[n_jobs] = r["seconds"] / r["n_iter"]
            speed.append((m, K, per_iteration[1], per_iteration[2]))
            if (m, K) == warm_start:
                fixed = in_child({**base, "mode": "streamed", "n_jobs": 1})
                warm = in_child({**base, "mode": "sgd", "n_jobs": 1, "reference": str(reference)})
                extra.append(("sgd", m, K, fixed, warm))
            if (m, K) == ray_at:
                ray = in_child({**base, "mode": "ray", "n_jobs": 2, "reference": str(reference)})
                extra.append(("ray", m, K, None, ray))
    print(
        "\n## n_jobs: seconds per iteration, side by side (first 3 iterations, streamed)\n\n"
        "| m | K | n_jobs=1 (2 BLAS threads) | n_jobs=2 (1 BLAS thread each) | speed-up |\n"
        "| --- | --- | --- | --- | --- |"
    )
    for m, K, one, two in speed:
        print(f"| {m} | {K} | {one:.2f} | {two:.2f} | {one / two:.2f}x |")
    for kind, m, K, fixed, r in extra:
        if kind == "sgd":
            steps = max(2, K // 10)
            print(
                f"\n## Stochastic warm start, m = {m}, K = {K} (n_jobs=1)\n\n"
                f"- fixed point from the weighted mean: {fixed['n_iter']} iterations "
                f"({fixed['n_iter'] * K} eigendecompositions), {fixed['seconds']:.1f} s;\n"
                f"- {steps} stochastic steps ({2 * (steps - 1)} eigendecompositions, "
                f"{r['warm_start_seconds']:.1f} s), then {r['n_iter']} fixed-point iterations "
                f"({2 * (steps - 1) + r['n_iter'] * K} eigendecompositions in all), "
                f"{r['seconds']:.1f} s; relative distance to the fixed point's answer "
                f"{r['distance']:.1e}."
            )
        else:
            print(
                f"\n## Ray backend, m = {m}, K = {K}\n\n"
                f"`with parallel_config(backend='ray', n_jobs=2)` (local Ray, 2 CPUs; started "
                f"in {r['ray_init_seconds']:.1f} s): {r['n_iter']} iterations, "
                f"{r['seconds']:.1f} s; relative distance to the threads' answer "
                f"{r['distance']:.1e}."
            )


if __name__ == "__main__":
    main()
