"""Why FedCGS can get worse with SLOT-Align: the ridge, and class-mean collapse.

Runs the paper's protocol (one client per domain) on a real data set and prints

1. FedCGS macro accuracy at alpha=0.1 for several ridges and both covariance
   options, at tau in {0, 0.4, 1}, in both cases (:data:`skslot_bench.CASES`);
2. the share of between-class variance, ``sum_c N_c ||mu_c - mu||^2 / sum_i
   ||x_i - mu||^2``, of the aligned training rows and of the aligned test rows,
   at alpha in {0.1, none}: FedCGS is built from the training class means.

Usage:

    python benchmarks/fedcgs_with_slot.py [path.npz or "" for Office-Caltech10] [n_seeds]
"""

import sys

import numpy as np
from skslot_bench import CASES, BenchmarkConfig, evaluate_run

from skslot import SLOTTransformer
from skslot.datasets import dirichlet_partition, load_npz, load_office_caltech10
from skslot.heads import FedCGSClassifier

RIDGES = (1e-6, 1e-4, 1e-3, 1e-2, 1e-1)
TAUS = (0.0, 0.4, 1.0)


def between_class_share(Z: np.ndarray, y: np.ndarray) -> float:
    mu = Z.mean(axis=0)
    total = float(((Z - mu) ** 2).sum())
    return (
        sum(
            (y == c).sum() * float(((Z[y == c].mean(axis=0) - mu) ** 2).sum()) for c in np.unique(y)
        )
        / total
    )


def class_geometry(data, X: np.ndarray, n_seeds: int) -> None:
    print("\n| alpha | tau | between-class share, train (%) | between-class share, test (%) |")
    print("| --- | --- | --- | --- |")
    for alpha in (0.1, None):
        shares = {tau: [] for tau in TAUS}
        for seed in range(n_seeds):
            part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
            X_tr, c_tr = X[part.train_index], part.train_client
            X_te, c_te = X[part.test_index], part.test_client
            slot = SLOTTransformer(
                unknown_client="identity", mean_tau=None, client_tau="uniform"
            ).fit(X_tr, client=c_tr)
            for tau in TAUS:
                slot.set_params(tau=tau)
                shares[tau].append(
                    (
                        between_class_share(
                            slot.transform(X_tr, client=c_tr), data.y[part.train_index]
                        ),
                        between_class_share(
                            slot.transform(X_te, client=c_te), data.y[part.test_index]
                        ),
                    )
                )
        for tau in TAUS:
            train, test = 100 * np.mean(shares[tau], axis=0)
            print(f"| {alpha} | {tau:g} | {train:.1f} | {test:.1f} |")


def main() -> None:
    data = load_npz(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else load_office_caltech10()
    n_seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    X = data.X.astype(np.float64)
    factories = {
        (cov, ridge): (lambda seed, c=cov, r=ridge: FedCGSClassifier(covariance=c, shrinkage=r))
        for cov in ("total", "within")
        for ridge in RIDGES
    }
    named = {f"{cov}|{ridge:g}": f for (cov, ridge), f in factories.items()}
    # the fixed taus only: neither the baselines nor the federated choice enter the table
    config = BenchmarkConfig(taus=TAUS, heads=tuple(named), auto=False, baselines=False)
    records = [r for s in range(n_seeds) for r in evaluate_run(data, X, 0.1, s, config, named)]
    print(f"{data.name}: FedCGS macro accuracy (%), alpha=0.1, mean over {n_seeds} seeds")
    print("| case | covariance | ridge | " + " | ".join(f"tau={t:g}" for t in TAUS) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in TAUS) + " |")
    for case, name in ((case, name) for case in CASES for name in named):
        cov, ridge = name.split("|")
        accs = []
        for tau in TAUS:
            per_seed = [
                np.mean(
                    [
                        r["accuracy"]
                        for r in records
                        if (r["case"], r["selection"], r["head"], r["tau"], r["seed"])
                        == (case, "fixed", name, tau, s)
                    ]
                )
                for s in range(n_seeds)
            ]
            accs.append(f"{100 * np.mean(per_seed):.2f}")
        print(f"| {case} | {cov} | {ridge} | " + " | ".join(accs) + " |")
    class_geometry(data, X, n_seeds)


if __name__ == "__main__":
    main()
