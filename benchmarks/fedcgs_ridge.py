"""Why FedCGS can get worse with SLOT-Align: the ridge and the covariance choice.

Runs the paper's protocol (alpha=0.1, one client per domain) on a real data
set and prints FedCGS macro accuracy for several ridges and both covariance
options at tau in {0, 0.4, 1}, with the condition number of the shared
covariance.  Usage:

    python benchmarks/fedcgs_ridge.py [path.npz] [n_seeds]
"""

import sys

import numpy as np

from skslot.bench import BenchmarkConfig, evaluate_run
from skslot.datasets import load_npz, load_office_caltech10
from skslot.heads import FedCGSClassifier

RIDGES = (1e-6, 1e-4, 1e-3, 1e-2, 1e-1)
TAUS = (0.0, 0.4, 1.0)


def main() -> None:
    data = load_npz(sys.argv[1]) if len(sys.argv) > 1 else load_office_caltech10()
    n_seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    X = data.X.astype(np.float64)
    factories = {
        (cov, ridge): (lambda seed, c=cov, r=ridge: FedCGSClassifier(covariance=c, shrinkage=r))
        for cov in ("total", "within")
        for ridge in RIDGES
    }
    named = {f"{cov}|{ridge:g}": f for (cov, ridge), f in factories.items()}
    config = BenchmarkConfig(taus=TAUS, heads=tuple(named))
    records = [r for s in range(n_seeds) for r in evaluate_run(data, X, 0.1, s, config, named)]
    print(f"{data.name}: FedCGS macro accuracy (%), alpha=0.1, mean over {n_seeds} seeds")
    print("| covariance | ridge | " + " | ".join(f"tau={t:g}" for t in TAUS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in TAUS) + " |")
    for name in named:
        cov, ridge = name.split("|")
        accs = []
        for tau in TAUS:
            per_seed = [
                np.mean(
                    [
                        r["accuracy"]
                        for r in records
                        if (r["head"], r["tau"], r["seed"]) == (name, tau, s)
                    ]
                )
                for s in range(n_seeds)
            ]
            accs.append(f"{100 * np.mean(per_seed):.2f}")
        print(f"| {cov} | {ridge} | " + " | ".join(accs) + " |")


if __name__ == "__main__":
    main()
