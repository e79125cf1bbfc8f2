"""Research: the federated choice with held-out rows outside the maps' sample.

``FederatedTauSearch`` estimates each client's map from its fitting rows.
Maps estimated from all its rows, its held-out rows included, would make its
validation score rows inside the sample of the maps it validates
(``docs/results/summary_kind_selection.md``: with within-class summaries that
validation rises with tau while the test falls).
This study, for FedCGS (whose candidate heads are closed-form), repeats the
search's choice with the maps estimated from each client's fitting rows
only (out of sample), so that its held-out rows are new to its map as a test
row is, and from all its rows (in sample), and compares, over the paper's
summary's candidates, the within-class summary's and both (the summary kind as
a candidate), the test accuracy of the choice:

* the search's one-standard-error rule (the least transport within one
  binomial standard error of the best mean balanced validation accuracy;
  at equal tau the paper's summary first);
* scored by the macro test accuracy of the head on all rows at the chosen
  (kind, tau), the maps estimated from all rows (the fixed configuration's;
  the search's refit keeps its fitting-row maps), against ``tau = 0``.

Digits through the 256-d projection and Office-Caltech10 (both embedded),
one client per domain, Dirichlet alpha in (0.1, 0.05, 0.01, none), 3 seeds,
clients with fewer than 10 rows left out, OpenBLAS 1 thread per worker.

Run: python benchmarks/out_of_sample_selection.py > docs/results/out_of_sample_selection.md
(about 6 minutes on 2 cores).
"""

from __future__ import annotations

import time

import numpy as np
from class_out_selection import FRACTION, balanced_validation, client_maps, macro_test_accuracy
from joblib import Parallel, delayed
from skslot_bench import CASES
from summary_kind_selection import KINDS, TAUS, choose
from threadpoolctl import threadpool_limits

from skslot.datasets import dirichlet_partition, load_dataset
from skslot.selection import validation_split

ALPHAS = (0.1, 0.05, 0.01, None)
SEEDS = 3
#: the candidate sets compared: the summary kinds a search may choose among
CHOICES = {"paper's": ("total",), "within": ("within",), "joint": KINDS}


def one_run(data, alpha, seed: int) -> dict:
    """(sample, choice) -> (gain of the chosen candidate's test accuracy in each case, the
    candidate)."""
    X, y, classes = data.X.astype(np.float64), data.y, np.unique(data.y)
    with threadpool_limits(1):
        part = dirichlet_partition(y, data.domain, alpha=alpha, random_state=seed)
        clients = range(int(part.train_client.max()) + 1)
        train = [part.train_index[part.train_client == k] for k in clients]
        test = [part.test_index[part.test_client == k] for k in clients]
        kept = [k for k, r in enumerate(train) if r.shape[0] >= 10]
        train, test = [train[k] for k in kept], [test[k] for k in kept]
        splits = [validation_split(y[r], FRACTION, 1000 * seed + k) for k, r in enumerate(train)]
        fitting = [r[s[0]] for r, s in zip(train, splits, strict=True)]
        maps = {kind: client_maps(X, train, y, kind) for kind in KINDS}
        own_out = {kind: client_maps(X, fitting, y, kind) for kind in KINDS}
        tables = {
            sample: {
                (kind, tau): balanced_validation(chosen[kind], tau, X, y, train, splits, classes)
                for kind in KINDS
                for tau in TAUS
            }
            for sample, chosen in (("in sample", maps), ("out of sample", own_out))
        }
        truth = {
            (kind, tau): macro_test_accuracy(maps[kind], tau, X, y, train, test, classes)
            for kind in KINDS
            for tau in TAUS
        }
    base = truth[("total", 0.0)]
    found = {}
    for sample, table in tables.items():
        for name, kinds in CHOICES.items():
            candidate = choose(table, kinds)
            gains = {case: 100 * (truth[candidate][case] - base[case]) for case in CASES}
            found[(sample, name)] = (gains, candidate)
    return found


def main() -> None:
    print("# The federated choice with held-out rows outside the maps' sample (FedCGS)\n")
    for name in ("digits", "office-caltech10"):
        data = load_dataset(name)
        runs = [(alpha, seed) for alpha in ALPHAS for seed in range(SEEDS)]
        start = time.perf_counter()
        results = Parallel(n_jobs=2)(delayed(one_run)(data, a, s) for a, s in runs)
        wall = time.perf_counter() - start
        by_run = dict(zip(runs, results, strict=True))
        print(
            f"## {data.name} ({data.X.shape[1]} features; {SEEDS} seeds, {wall:.0f} s wall)\n\n"
            "Gain (%) of the choice's macro test accuracy against no SLOT, mean over seeds, "
            "with the (kind, tau) chosen per seed (t: the paper's summary, w: within-class), "
            "in both cases (`skslot_bench.CASES`): each client's test rows weighted to its "
            "own training mix, the head predicting with its prior (own mix), and its "
            "domain's whole test split (domain, the paper's test; what the validation "
            "estimates):\n"
        )
        samples = ("in sample", "out of sample")
        columns = [(sample, choice) for sample in samples for choice in CHOICES]
        print("| case | alpha | " + " | ".join(f"{c} ({s})" for s, c in columns) + " |")
        print("| --- " * (2 + len(columns)) + "|")
        for case in CASES:
            for alpha in ALPHAS:
                cells = []
                for column in columns:
                    found = [by_run[(alpha, seed)][column] for seed in range(SEEDS)]
                    picks = ",".join(f"{k[0]}{t:g}" for _, (k, t) in found)
                    cells.append(f"{np.mean([g[case] for g, _ in found]):+.2f} ({picks})")
                shown = "none" if alpha is None else alpha
                print(f"| {case} | {shown} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
