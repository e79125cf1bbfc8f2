"""Barycenter speed side by side in one run: skslot, its float64 path, the reference prototype, POT.

For each set of covariances the script runs, interleaved in one process (each
repetition runs every method once, in the same order, after one untimed
warm-up round of the fast ones):

- **mixed**: ``bures_wasserstein_barycenter(C, w, tol=tol)``, what
  ``BuresBarycenter`` runs (mixed precision on NumPy);
- **float64**: the same with ``precision="float64"`` (every evaluation by
  float64 eigendecompositions);
- **prototype**: ``bary_hybrid3(C, w, tol=tol)`` of the reference prototype
  (research code outside the library), imported from ``--prototype`` or
  ``$SKSLOT_BARYCENTER_PROTOTYPE`` (default
  ``../shared/reference/barycenter-hybrid`` beside the repository); its
  column is skipped, with a message, where the folder is absent.  It runs
  with SciPy's own OpenBLAS held at one thread, as the library holds it (the
  prototype's README advises it): at two threads its SciPy calls would
  otherwise leave a second pool spinning, which slows it and the NumPy
  columns run after it;
- **POT**: ``ot.gaussian.bures_wasserstein_barycenter`` with its default
  settings (the Picard fixed point to ``eps = 1e-7`` on its step), if POT is
  installed; its result is "POT's converged barycenter" of the last column.

It prints, per set, the median time of ``--repeats`` repetitions, the
medians of the per-repetition ratios (which share the machine's load at the
time), iterations, each result's relative fixed-point residual (measured by
one function, with float64 eigendecompositions) and its relative difference
to POT's barycenter; for the mixed path, its evaluations by kind.  Every set
runs at one BLAS thread; the first set runs again at two.

    python benchmarks/bench_barycenter.py [--repeats 5] [--tol 1e-10]
        [--sets shared,lw,shared512,lowrank,office,digits] [--prototype DIR]
        [--no-pot] [--smoke]

``--smoke`` runs every set at m = 40 (K up to 4, one repetition) in a few
seconds: the code path, not a measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import skslot._linalg as linalg
from skslot._barycenter_mixed import MixedRoots, scipy_blas_single_threaded
from skslot.barycenter import bures_wasserstein_barycenter
from skslot.exceptions import SmallClientWarning
from skslot.summary import GaussianSummaryEstimator

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PROTOTYPE = SHARED / "reference" / "barycenter-hybrid"
DIGITS = SHARED / "data" / "digits_effnet_lite0.npz"


# -- the sets of covariances ---------------------------------------------------------


def shared_mixing_covariances(m: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ledoit-Wolf covariances of clients whose rows share a mixing matrix, each perturbed.

    Client ``k`` draws 1,000 rows ``z A_k^T``, ``z`` of independent
    coordinates with variances ``exp(U(-3, 1))`` and ``A_k`` one common
    random matrix plus half as much of its own: the reference prototype's
    set (its ``data.py``: ``bench`` at m = 256, K = 8, ``big`` at 512, 16).
    """
    rng = np.random.default_rng(seed)
    common = rng.standard_normal((m, m)) / np.sqrt(m)
    rows, client = [], []
    for k in range(K):
        mixing = common + 0.5 * rng.standard_normal((m, m)) / np.sqrt(m)
        scales = np.sqrt(np.exp(rng.uniform(-3, 1, m)))
        rows.append(rng.standard_normal((1000, m)) * scales @ mixing.T)
        client += [k] * 1000
    est = GaussianSummaryEstimator().fit(np.concatenate(rows), client=np.array(client))
    return np.array([s.covariance for s in est.summaries_.values()]), np.full(K, 1.0 / K)


def ledoit_wolf_covariances(m: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
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
    return np.array(covs), w / w.sum()


def low_rank_ridge_covariances(m: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The covariances and sample weights of ``scaling.py``'s clients.

    ``B B^T + c I`` with a rank-64 ``B`` in a random subspace per client: the
    Ledoit-Wolf structure of clients whose features fill different
    low-dimensional subspaces, a slowly converging fixed point.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scaling import lw_like_summaries

    summaries = lw_like_summaries(m, K, seed)
    w = np.array([s.n for s in summaries], dtype=float)
    return np.array([s.covariance for s in summaries]), w / w.sum()


def office_caltech_covariances(m: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
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


def digits_covariances(m: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The Ledoit-Wolf covariances of the three digit domains (K = 3), on ``m`` dimensions.

    From ``../shared/data/digits_effnet_lite0.npz`` (1280-d) on a random
    orthonormal ``m``-d projection (seed 0), the reference prototype's digits
    set; where that file is absent, from the embedded 256-d digits
    (:func:`skslot.datasets.load_digits_effnet`, already such a projection).
    ``K`` is ignored: one client per domain.
    """
    if DIGITS.exists():
        data = np.load(DIGITS, allow_pickle=False)
        X, domain = data["X"].astype(np.float64), data["domain"]
    else:
        from skslot.datasets import load_digits_effnet

        embedded = load_digits_effnet()
        X, domain = embedded.X.astype(np.float64), embedded.domain
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((X.shape[1], m)))[0]
    return real_covariances(X @ basis, domain)


def real_covariances(X: np.ndarray, client: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Ledoit-Wolf covariances and sample weights of the clients of 2 rows or more."""
    kept = np.isin(client, np.flatnonzero(np.bincount(client) >= 2))
    with warnings.catch_warnings():  # small clients: the Ledoit-Wolf target dominates, as meant
        warnings.simplefilter("ignore", SmallClientWarning)
        est = GaussianSummaryEstimator().fit(X[kept], client=client[kept])
    covs = [s.covariance for s in est.summaries_.values()]
    w = np.array([s.n for s in est.summaries_.values()], dtype=float)
    return np.array(covs), w / w.sum()


#: name: (title, generator, m, K)
SETS = {
    "shared": ("sampled, shared mixing (the prototype's set)", shared_mixing_covariances, 256, 8),
    "lw": ("sampled, Ledoit-Wolf of rotated clients", ledoit_wolf_covariances, 256, 8),
    "shared512": ("sampled, shared mixing", shared_mixing_covariances, 512, 16),
    "lowrank": ("low rank + ridge", low_rank_ridge_covariances, 256, 8),
    "office": ("real: Office-Caltech10, Dirichlet(0.1)", office_caltech_covariances, 256, 8),
    "digits": ("real: digits, 3 domains", digits_covariances, 256, 3),
}


# -- the methods ---------------------------------------------------------------------


def residual(S: np.ndarray, covs: np.ndarray, w: np.ndarray) -> float:
    """``||sum_k w_k (S^1/2 C_k S^1/2)^1/2 - S|| / ||S||``, with float64 eigendecompositions."""
    R = linalg.sym_eigh(S).sqrt()
    M = sum(wk * linalg.sym_eigh(R @ C @ R).sqrt() for wk, C in zip(w, covs, strict=True))
    return float(np.linalg.norm(M - S) / np.linalg.norm(S))


def load_prototype(folder: Path) -> Callable | None:
    """The prototype's ``bary_hybrid3``, or ``None`` (with a message) where it is absent."""
    if not (folder / "hybrid3.py").exists():
        print(
            f"prototype column skipped: no hybrid3.py in {folder} "
            "(set --prototype or SKSLOT_BARYCENTER_PROTOTYPE)"
        )
        return None
    sys.path.insert(0, str(folder))
    from hybrid3 import bary_hybrid3

    return bary_hybrid3


def methods(covs: np.ndarray, w: np.ndarray, tol: float, prototype, pot: bool) -> dict:
    """name -> callable returning (covariance, iterations, note)."""
    K, m = covs.shape[:2]

    def ours(**options):
        started: list = []
        start = MixedRoots.start

        def recording(*args, **kwargs):
            roots = start(*args, **kwargs)
            started.append(roots)
            return roots

        MixedRoots.start = recording
        try:
            result = bures_wasserstein_barycenter(covs, w, tol=tol, max_iter=1000, **options)
        finally:
            MixedRoots.start = start
        counts = started[0].counts if started and started[0] is not None else Counter()
        note = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        return result.covariance, result.n_iter, note

    out = {
        "float64": lambda: ours(precision="float64"),
        "mixed": lambda: ours(),
    }
    if prototype is not None:

        def proto():
            with scipy_blas_single_threaded():  # as the library holds it (see the docstring)
                result = prototype(covs, w, tol=tol)
            return result["S"], result["n_iter"], ""

        out["prototype"] = proto
    if pot:
        import contextlib
        import io

        import ot

        def run_pot():
            with contextlib.redirect_stdout(io.StringIO()):  # "Dit not converge."
                _, S, log = ot.gaussian.bures_wasserstein_barycenter(
                    np.zeros((K, m)), covs, weights=w, log=True
                )
            return S, log["num_iter"], ""

        out["POT"] = run_pot
    return out


def measure(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Interleaved repetitions (a warm-up round first, POT excepted): times and last outputs."""
    times: dict = {name: [] for name in fns}
    outputs: dict = {}
    for rep in range(repeats + 1):
        for name, fn in fns.items():
            if rep == 0 and name == "POT":
                continue
            start = time.perf_counter()
            outputs[name] = fn()
            if rep:
                times[name].append(time.perf_counter() - start)
    return times, outputs


def report(title: str, covs: np.ndarray, w: np.ndarray, times: dict, outputs: dict) -> None:
    """One table: times, ratios (medians of the per-repetition ratios), iterations, accuracy."""
    pot = outputs.get("POT", (None,))[0]
    columns = [c for c in ("float64", "prototype", "POT") if c in times]
    print(f"\n{title}")
    header = "| method | time (s) | " + " | ".join(f"vs {c}" for c in columns)
    print(header + " | iterations | residual | rel. diff to POT | evaluations |")
    print("|" + " --- |" * (header.count("|") + 4))
    for name, seconds in times.items():
        mine = np.array(seconds)
        ratios = []
        for other in columns:
            ratio = np.array(times[other]) / mine
            ratios.append(f"{np.median(ratio):.2f}x ({ratio.min():.2f}-{ratio.max():.2f})")
        S, n_iter, note = outputs[name]
        diff = f"{np.linalg.norm(S - pot) / np.linalg.norm(pot):.1e}" if pot is not None else "-"
        print(
            f"| {name} | {np.median(mine):.3f} | " + " | ".join(ratios) + f" | {n_iter} | "
            f"{residual(S, covs, w):.1e} | {diff} | {note} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument(
        "--prototype",
        type=Path,
        default=Path(os.environ.get("SKSLOT_BARYCENTER_PROTOTYPE", PROTOTYPE)),
    )
    parser.add_argument("--no-pot", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="m = 40, K <= 4, one repetition")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    pot = False
    if args.no_pot:
        print("POT column skipped: --no-pot")
    else:
        try:
            import ot

            pot = True
            print(f"POT {ot.__version__}")
        except ModuleNotFoundError:
            print("POT column skipped: POT is not installed (pip install pot)")
    prototype = load_prototype(args.prototype)
    print(f"BLAS: {[(i['internal_api'], i['filepath']) for i in threadpool_info()]}")
    print(
        f"tol {args.tol:.0e}; median of {args.repeats} interleaved repetitions; "
        "ratios: medians of the per-repetition ratios (range)"
    )
    names = args.sets.split(",")
    for index, name in enumerate(names):
        title, generate, m, K = SETS[name]
        if args.smoke:
            m, K = 40, min(K, 4)
        covs, w = generate(m, K)
        fns = methods(covs, w, args.tol, prototype, pot)
        for threads in (1, 2) if index == 0 else (1,):
            with threadpool_limits(threads):
                times, outputs = measure(fns, args.repeats)
            heading = f"## {title}: m = {m}, K = {len(covs)}, {threads} BLAS thread"
            report(heading + ("s" if threads > 1 else ""), covs, w, times, outputs)


if __name__ == "__main__":
    main()
