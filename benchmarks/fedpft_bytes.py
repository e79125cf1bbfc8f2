"""FedPFT: accuracy against bytes per client, and the server's factorisation time.

Real digits features (1280-d, three domains, one client per domain), alpha 0.1
and no label skew, seeds 0-2, SLOT at tau = 0.4 (clients align their rows,
as ``skslot bench`` does), then FedPFT with one Gaussian per (client, class)
whose covariance is sent as:

* ``spherical`` (Flower's FedPFT baseline, ``FedPFTClassifier.flower_baseline()``),
* ``diag``,
* ``lowrank`` at ranks 8, 16, 32, 64 and 128 (``W W^T + diag(d)``),
* ``full`` (an ``m x m`` covariance),

all in float16.  Prints macro accuracy over domains (mean over seeds) and the
bytes each client sends (``upload_bytes_``, as Flower counts them), writes a
figure, and times the server's factorisation of the full float16 covariances:
Cholesky retried with a growing jitter (skslot) against one Cholesky with a
projection onto the PSD cone where it fails, side by side on the same
covariances, and each variant's whole fit.

Run: python benchmarks/fedpft_bytes.py > docs/results/fedpft_bytes.md
(about 15 minutes on 2 cores; needs ../shared/data).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from skslot_bench import CASES, macro_accuracy_by_case, training_mixes
from threadpoolctl import threadpool_limits

from skslot import SLOTTransformer
from skslot._linalg import cholesky_factor, sym_eigh
from skslot.datasets import dirichlet_partition, load_npz
from skslot.heads import FedPFTClassifier
from skslot.heads._covariance_forms import covariance_factor

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
FIGURE = Path(__file__).resolve().parents[1] / "docs" / "results" / "fedpft_bytes.png"
VARIANTS = {
    "spherical (Flower baseline)": {"covariance_type": "spherical"},
    "diag": {"covariance_type": "diag"},
    **{f"lowrank r={r}": {"covariance_type": "lowrank", "rank": r} for r in (8, 16, 32, 64, 128)},
    "full": {"covariance_type": "full"},
}
ALPHAS = (0.1, None)
TAU = 0.4


def projection_factor(cov: np.ndarray) -> np.ndarray:
    """The alternative measured here: one Cholesky, else a projection onto the PSD cone."""
    try:
        return cholesky_factor(cov)
    except np.linalg.LinAlgError:
        eig = sym_eigh(cov)
        return eig.eigenvectors * np.sqrt(np.maximum(eig.eigenvalues, 0.0))


def one_partition(alpha: float | None, seed: int) -> dict:
    with threadpool_limits(1):
        data = load_npz(DIGITS)
        X = data.X.astype(np.float64)
        part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
        keep = ~np.isin(part.train_client, part.empty_clients)
        train, client = part.train_index[keep], part.train_client[keep]
        slot = SLOTTransformer(
            tau=TAU,
            unknown_client="identity",
            mean_tau=None,
            client_tau="uniform",
            label_mix="federation",
        ).fit(X[train], client=client)
        Z_train = slot.transform(X[train], client=client)
        Z_test = slot.transform(X[part.test_index], client=part.test_client)
        y_train, y_test = data.y[train], data.y[part.test_index]
        classes = np.unique(data.y)
        mixes = training_mixes(y_train, client, classes)
        out: dict = {"alpha": alpha, "seed": seed, "accuracy": {}, "bytes": {}}
        for name, params in VARIANTS.items():
            head = FedPFTClassifier(random_state=seed, **params)
            start = time.perf_counter()
            head.fit(Z_train, y_train, client=client)
            out.setdefault("seconds", {})[name] = time.perf_counter() - start
            macro = macro_accuracy_by_case(
                head, Z_test, y_test, part.test_client, part.client_domain, mixes, classes
            )
            for case in CASES:
                out["accuracy"].setdefault(case, {})[name] = macro[case]
            out["bytes"][name] = float(np.mean(head.upload_bytes_))
        # the server's two factorisations of the float16 full covariances, on the same matrices
        covariances = [
            mx.covariances[0]
            for k in np.unique(client)
            for mx in FedPFTClassifier(random_state=seed, covariance_type="full")
            .client_statistics(Z_train[client == k], y_train[client == k], classes)
            .mixtures
        ]
        timings = {}
        for label, factor in (("jitter", covariance_factor), ("projection", projection_factor)):
            start = time.perf_counter()
            for cov in covariances:
                factor(cov)
            timings[label] = time.perf_counter() - start
        out["factorisation"] = timings
        out["n_covariances"] = len(covariances)
        out["failed_cholesky"] = sum(not _is_pd(cov) for cov in covariances)
        return out


def _is_pd(cov: np.ndarray) -> bool:
    try:
        cholesky_factor(cov)
    except np.linalg.LinAlgError:
        return False
    return True


def main(n_seeds: int = 3) -> None:
    if not DIGITS.exists():
        sys.exit(f"{DIGITS} not found: this benchmark needs ../shared/data")
    start = time.perf_counter()
    runs = Parallel(n_jobs=2)(
        delayed(one_partition)(alpha, seed) for alpha in ALPHAS for seed in range(n_seeds)
    )
    wall = time.perf_counter() - start
    print("# FedPFT: accuracy against bytes per client (digits, 1280-d, SLOT tau = 0.4)\n")
    print(
        "Two cases (`skslot_bench.CASES`): *own mix*, each client's test rows weighted to its "
        "training mix, the head predicting with the client's own prior; *domain*, its "
        "domain's whole test split (the paper's test). "
        f"Macro accuracy over domains (%), mean over {n_seeds} seeds [min, max]; KB each client "
        "sends for its FedPFT message (float16, as Flower counts it; the SLOT summary, 3.28 MB "
        f"in float32, comes on top). benchmarks/fedpft_bytes.py, {wall:.0f} s wall on 2 "
        "workers, 1 BLAS thread each.\n"
    )
    columns = [(case, alpha) for case in CASES for alpha in ALPHAS]
    header = (
        "| covariance | KB per client | "
        + " | ".join(f"{case}: alpha {a or 'none'}" for case, a in columns)
        + " | vs full | fit seconds |"
    )
    print(header)
    print("| --- " * (4 + len(columns)) + "|")
    curve = {}
    for name in VARIANTS:
        kb = np.mean([r["bytes"][name] for r in runs]) / 1e3
        cells, gaps = [], []
        for case, alpha in columns:
            mine = [r["accuracy"][case] for r in runs if r["alpha"] == alpha]
            acc = np.array([a[name] for a in mine])
            full = np.array([a["full"] for a in mine])
            cells.append(f"{acc.mean():.2f} [{acc.min():.2f}, {acc.max():.2f}]")
            gaps.append(f"{np.mean(acc - full):+.2f}")
            curve.setdefault((case, alpha), []).append((kb, acc.mean(), name))
        seconds = np.mean([r["seconds"][name] for r in runs])
        print(
            f"| {name} | {kb:,.1f} | "
            + " | ".join(cells)
            + f" | {' / '.join(gaps)} | {seconds:.1f} |"
        )
    jitter = sum(r["factorisation"]["jitter"] for r in runs)
    projection = sum(r["factorisation"]["projection"] for r in runs)
    failed = sum(r["failed_cholesky"] for r in runs)
    total = sum(r["n_covariances"] for r in runs)
    print(
        f"\nServer factorisation of the {total} full float16 covariances ({failed} not positive "
        f"definite after the cast): Cholesky retried with a growing jitter (skslot) "
        f"{jitter:.1f} s, one Cholesky with a projection onto the PSD cone where it fails "
        f"{projection:.1f} s ({projection / jitter:.1f}x the time; 1 BLAS thread). Fit seconds: "
        "the whole head (clients' mixtures, server sampling, logistic regression), mean per run."
    )
    _plot(curve)


def _plot(curve: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for (case, alpha), points in curve.items():
        kb, acc, names = zip(*points, strict=True)
        ax.plot(kb, acc, marker="o", label=f"{case}, alpha {alpha or 'none'}")
        for x, y, name in zip(kb, acc, names, strict=True):
            ax.annotate(
                name.split(" (")[0].replace("lowrank ", ""),
                (x, y),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, -9),
            )
    ax.set_xscale("log")
    ax.set_xlabel("KB per client (FedPFT message, float16)")
    ax.set_ylabel("macro accuracy over domains (%)")
    ax.set_title("FedPFT on digits (1280-d, SLOT tau 0.4): accuracy against bytes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
