"""The server step with low-rank summaries beside the dense path, at large m with few rows.

Clients of ``n`` rows in ``m`` dimensions (the data of ``benchmarks/large_m.py``:
Gaussian rows, scaled per feature and shifted per client).  For each case, in
one process: each client's summary (``GaussianSummaryEstimator`` against
``skslot.ledoit_wolf.low_rank_summary``, the factor form), the barycenter
(``BuresBarycenter`` on dense summaries against the same on factor-form ones,
both to the same tolerance 1e-10) and every client's map onto it
(``BuresBarycenter.maps``: the factor-form maps are made with the barycenter,
counted in its time), the largest relative difference between the two paths'
barycenters and maps, the size of a client's float32 summary, and the low-rank
server step's peak memory (``tracemalloc``).  Where the dense barycenter would take too long it
runs one iteration (``--dense-iterations 1``) and its time is that iteration's
times the low-rank run's count (the ``d x d`` iterates are the dense ones
restricted to the span, from the same start), and its maps are timed on one
client; the table says so.

Run: ``python benchmarks/low_rank.py > docs/results/low_rank.md`` (about
15 minutes on 2 cores, most of it the dense path at m = 4096).

``python benchmarks/low_rank.py --streaming > docs/results/low_rank_streaming.md``
(about 2 minutes) runs the low-rank server step of the largest case twice, side
by side: every client's ``d x d`` block held for the whole iteration
(``client_batch=None``) and streamed one client at a time (``client_batch=1``),
with each one's time, peak memory and the largest difference between their maps.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_info

from skslot import BuresBarycenter, GaussianMap, GaussianSummaryEstimator
from skslot.ledoit_wolf import low_rank_summary

TOL = 1e-10


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    K: int
    full_dense: bool  # the dense barycenter to convergence and every map, or one of each


CASES = [
    Case(1024, 100, 4, True),
    Case(4096, 100, 4, True),
    Case(4096, 200, 8, False),
]


def client_rows(case: Case) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    client = np.repeat(np.arange(case.K), case.n)
    X = rng.normal(size=(case.K * case.n, case.m)) * rng.uniform(0.5, 2.0, case.m)
    X += 0.3 * client[:, None]
    return [X[client == k] for k in range(case.K)]


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def run(case: Case) -> dict:
    rows = client_rows(case)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "GaussianSummaryEstimator: client", UserWarning)
        dense, t_dense_summaries = timed(
            lambda: [GaussianSummaryEstimator().fit(X).summaries_[None] for X in rows]
        )
    low, t_low_summaries = timed(lambda: [low_rank_summary(X) for X in rows])

    tracemalloc.start()
    barycenter, t_low_bary = timed(lambda: BuresBarycenter(tol=TOL).fit(low))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    reference, n_iter = barycenter.reference_, barycenter.n_iter_
    low_maps = list(barycenter.maps().values())
    t_low_maps = 0.0  # made with the barycenter, from its last factorisations

    iterations = None if case.full_dense else 1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        bary, t_dense_bary = timed(
            lambda: BuresBarycenter(tol=TOL, max_iter=iterations or 100).fit(dense)
        )
    if case.full_dense:
        dense_maps, t_dense_maps = timed(lambda: list(bary.maps().values()))
        bary_diff = rel(reference.covariance, bary.covariance_)
        map_diff = max(
            rel(lm.dense().linear, dm.linear) for lm, dm in zip(low_maps, dense_maps, strict=True)
        )
        dense_iterations = bary.n_iter_
    else:  # one iteration, and one map, scaled: the dense path's cost, not its result
        t_dense_bary *= n_iter
        _, t_one_map = timed(lambda: GaussianMap.optimal_transport(dense[0], bary.reference_))
        t_dense_maps = t_one_map * case.K
        bary_diff = map_diff = None
        dense_iterations = n_iter
    dense_bytes = len(dense[0].to_bytes(dtype="float32"))
    low_bytes = 4 * low[0].n_values()
    return {
        "case": case,
        "d": reference.rank,
        "iterations": (dense_iterations, n_iter),
        "summary": (t_dense_summaries / case.K, t_low_summaries / case.K),
        "barycenter": (t_dense_bary, t_low_bary),
        "maps": (t_dense_maps, t_low_maps),
        "bytes": (dense_bytes, low_bytes),
        "peak_mb": peak / 1e6,
        "bary_diff": bary_diff,
        "map_diff": map_diff,
        "residual": barycenter.residual_,
    }


def main() -> None:
    threads = sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()})
    print("# Low-rank summaries beside the dense path\n")
    print(
        "`python benchmarks/low_rank.py`: clients of n rows in m dimensions (the data of "
        f"`benchmarks/large_m.py`), one process, BLAS {threads}. Times in seconds; "
        '"server step" is the barycenter plus every client\'s map; speed-ups are dense / '
        "low-rank. A summary's size is its float32 values (the dense one as its wire format "
        "encodes it).\n"
    )
    print(
        "| m | n | K | d | summary, per client: dense / low-rank (speed-up) "
        "| barycenter: dense / low-rank (iterations) | maps: dense (low-rank: with the barycenter) "
        "| server step speed-up | summary MB: dense / low-rank | low-rank server peak MB "
        "| relative difference: barycenter, maps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for case in CASES:
        r = run(case)
        (ds, ls), (db, lb), (dm, lm) = r["summary"], r["barycenter"], r["maps"]
        step = (db + dm) / (lb + lm)
        diff = (
            f"{r['bary_diff']:.1e}, {r['map_diff']:.1e}"
            if r["bary_diff"] is not None
            else "(dense not converged: see below)"
        )
        star = "" if case.full_dense else " *"
        print(
            f"| {case.m} | {case.n} | {case.K} | {r['d']} | {ds:.2f} / {ls:.3f} ({ds / ls:.0f}x) "
            f"| {db:.1f}{star} / {lb:.2f} ({r['iterations'][1]}) | {dm:.1f}{star} "
            f"| {step:.0f}x | {r['bytes'][0] / 1e6:.1f} / {r['bytes'][1] / 1e6:.2f} "
            f"({r['bytes'][0] / r['bytes'][1]:.0f}x) | {r['peak_mb']:.0f} | {diff} |",
            flush=True,
        )
        if not case.full_dense:
            notes.append(
                f"\\* m = {case.m}, K = {case.K}: the dense barycenter ran one iteration, "
                f"timed and multiplied by the {r['iterations'][1]} iterations of the "
                "low-rank run (the same iterates restricted to the span); the dense maps: "
                f"one client's map times {case.K}."
            )
    print()
    for note in notes:
        print(note)
    print(
        "\nThe dense path's costs are its m x m matrices: each summary forms and checks one "
        "(a Cholesky factorisation), each barycenter iteration decomposes K of them, each map "
        "factorises one. The low-rank path forms none: a thin QR of each client's rows, "
        "the barycenter of the d x d restrictions (d the dimension of the span of the "
        "clients' bases), and maps of d x d blocks plus a scalar."
    )


def streaming(case: Case) -> None:
    """The low-rank server step with the clients' blocks held, and streamed one at a time."""
    low = [low_rank_summary(X) for X in client_rows(case)]
    d = sum(s.rank for s in low)
    threads = sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()})
    print("# The low-rank server step, held or streamed over clients\n")
    print(
        f"`python benchmarks/low_rank.py --streaming`: m = {case.m}, K = {case.K} clients of "
        f"{case.n} rows (d = {d}), one process, BLAS {threads}; the barycenter to tol {TOL} "
        "and every client's map, peak memory by `tracemalloc`.\n"
    )
    print("| client_batch | seconds | iterations | peak MB |")
    print("|---|---|---|---|")
    fitted = {}
    for batch in (None, 1):
        tracemalloc.start()
        bary, seconds = timed(lambda b=batch: BuresBarycenter(tol=TOL, client_batch=b).fit(low))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        fitted[batch] = bary.maps().values()
        print(f"| {batch} | {seconds:.1f} | {bary.n_iter_} | {peak / 1e6:.0f} |")
    rows = np.random.default_rng(1).normal(size=(5, case.m))
    diff = max(
        rel(a.apply(rows), b.apply(rows)) for a, b in zip(fitted[None], fitted[1], strict=True)
    )
    floor = 2 * case.K * d * d * 8 / 1e6
    print(
        f"\nLargest relative difference between the two runs' maps on 5 rows: {diff:.1e}. "
        f"What both hold at the end: the clients' projected covariances and their d x d "
        f"maps, 2 K d^2 float64 = {floor:.0f} MB."
    )


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:  # a smoke run at small sizes
        CASES[:] = [Case(300, 30, 3, True), Case(300, 40, 4, False)]
    if "--streaming" in sys.argv[1:]:
        streaming(CASES[-1])
    else:
        main()
