"""Research: a validation estimate for the choice of tau that sees the classes a client lacks.

Under label skew a client's held-out rows only hold the classes it has, where
SLOT costs a little; its gain lives on the classes it lacks, which its
validation never sees (docs/results.md, "why the federated choice is blind").
This study computes, for FedCGS (whose heads without one client's class are
closed-form updates of its statistics), three estimates of the federation's
macro test accuracy at each tau, from what the protocol could compute with
counts only leaving the clients:

* ``validation``: the mean over clients of their balanced accuracy on their
  held-out rows, each client's map estimated from all its rows (its held-out
  rows inside the map's sample);
* ``class-out``: for each client ``i`` and each class ``c`` it holds that
  another client also holds, the head without ``i``'s rows of ``c`` scored on
  all ``i``'s rows of ``c`` (rows of a class the head learned from other
  domains only: what a test row of a class ``i`` lacks meets); the mean over
  those pairs;
* ``validation, own rows out``: the same, but each client's map estimated
  from its fitting rows only, so its held-out rows are outside the sample
  the map was estimated from, as its test rows are (what
  ``FederatedTauSearch`` selects on; at large tau the in-sample rows fare far
  worse);
* ``combined``: per client, its validation accuracy of each class it holds and
  its mean class-out accuracy for each class it lacks, averaged over the
  federation's classes (the structure of a domain's macro test accuracy),
  then over clients;

and compares each with the truth (macro test accuracy of the head fitted on
all rows), and the tau each would choose with the test accuracy of that
choice.  Digits through the 256-d projection, one client per domain,
Dirichlet alpha in (0.1, none), 3 seeds, OpenBLAS 1 thread.

Run: python benchmarks/class_out_selection.py > docs/results/class_out_selection.md
(under a minute; needs ../shared/data).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from skslot_bench import CASES, macro_accuracy_by_case
from threadpoolctl import threadpool_limits

from skslot import BuresBarycenter, GaussianSummaryEstimator, SLOTTransformer
from skslot.datasets import digits_projection, dirichlet_partition, load_npz
from skslot.heads import ClassStatistics, FedCGSClassifier
from skslot.label_shift import class_counts
from skslot.selection import validation_split

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
ALPHAS = (0.1, None)
FRACTION = 0.2


def fedcgs(statistics: list[ClassStatistics], classes: np.ndarray) -> FedCGSClassifier:
    head = FedCGSClassifier()
    head._fit_from_statistics(statistics, classes, None)
    return head


def without_class(stats: ClassStatistics, c: int) -> ClassStatistics:
    """The statistics with class ``c``'s rows out of its class mean and prior (the shared
    covariance keeps them: the Gram of one class is not in the message)."""
    counts, sums = stats.counts.copy(), stats.sums.copy()
    counts[c], sums[c] = 0.0, 0.0
    return ClassStatistics(stats.classes, counts, sums, stats.moments)


def client_maps(
    X: np.ndarray, rows: list[np.ndarray], y: np.ndarray | None = None, covariance: str = "total"
) -> list:
    """Each client's full map, from the summaries of its ``rows`` and their reference."""
    summaries = []
    for k, r in enumerate(rows):
        labels = None if y is None else y[r]
        s = GaussianSummaryEstimator(covariance=covariance).fit(X[r], labels).summaries_[None]
        summaries.append(type(s)(s.n, s.mean, s.covariance, s.shrinkage, client=k))
    reference = BuresBarycenter().fit(summaries).reference_
    return [
        SLOTTransformer.from_reference(reference, s, mean_tau=None, client_tau="uniform").maps_[k]
        for k, s in enumerate(summaries)
    ]


def balanced_validation(maps: list, tau: float, X, y, train, splits, classes) -> tuple:
    """Mean over clients of the balanced accuracy on their held-out rows, the head fitted
    on every client's fitting rows aligned with ``maps`` at ``tau``, and its binomial
    standard error (as :func:`skslot.selection.select_candidate` computes them)."""
    geo = [m.geodesic(tau) for m in maps]
    Z = [g.apply(X[r]) for g, r in zip(geo, train, strict=True)]
    fit = [
        ClassStatistics.from_rows(Z[k][s[0]], y[r][s[0]], classes)
        for k, (r, s) in enumerate(zip(train, splits, strict=True))
    ]
    head = fedcgs(fit, classes)
    scores, variances = [], []
    for k, (r, s) in enumerate(zip(train, splits, strict=True)):
        labels = y[r][s[1]]
        if not labels.shape[0]:
            continue
        right = head.predict(Z[k][s[1]]) == labels
        present = np.unique(labels)
        p = np.array([right[labels == c].mean() for c in present])
        n = np.array([np.sum(labels == c) for c in present])
        scores.append(p.mean())
        variances.append(np.sum(p * (1 - p) / n) / present.shape[0] ** 2)
    return float(np.mean(scores)), float(np.sqrt(np.sum(variances)) / len(scores))


def macro_test_accuracy(maps: list, tau: float, X, y, train, test, classes) -> dict[str, float]:
    """Mean over domains (one client each) of the test accuracy of the head on all rows
    aligned at ``tau``, in each case (:data:`skslot_bench.CASES`), as a fraction."""
    geo = [m.geodesic(tau) for m in maps]
    mixes = {k: class_counts(y[r], classes) for k, r in enumerate(train)}
    whole = fedcgs(
        [ClassStatistics.from_rows(geo[k].apply(X[r]), y[r], classes) for k, r in enumerate(train)],
        classes,
    ).with_client_counts(mixes)
    Z = np.vstack([geo[k].apply(X[t]) for k, t in enumerate(test)])
    client = np.concatenate([np.full(t.shape[0], k) for k, t in enumerate(test)])
    macro = macro_accuracy_by_case(
        whole, Z, y[np.concatenate(test)], client, np.arange(len(test)), mixes, classes
    )
    return {case: value / 100 for case, value in macro.items()}


def one_run(X: np.ndarray, y: np.ndarray, domain: np.ndarray, alpha, seed: int) -> list[dict]:
    classes = np.unique(y)
    part = dirichlet_partition(y, domain, alpha=alpha, random_state=seed)
    K = int(part.train_client.max()) + 1
    train = [part.train_index[part.train_client == k] for k in range(K)]
    test = [part.test_index[part.test_client == k] for k in range(K)]
    splits = [validation_split(y[train[k]], FRACTION, 1000 * seed + k) for k in range(K)]
    maps = client_maps(X, train)
    # the maps the validation rows are outside of: estimated from the fitting rows only
    fitting_maps = client_maps(X, [train[k][splits[k][0]] for k in range(K)])
    held = np.array([np.bincount(y[train[k]], minlength=classes.shape[0]) for k in range(K)]) > 0
    records = []
    for tau in TAUS:
        geo = [m.geodesic(tau) for m in maps]
        Z = [geo[k].apply(X[train[k]]) for k in range(K)]
        fit = [
            ClassStatistics.from_rows(Z[k][splits[k][0]], y[train[k]][splits[k][0]], classes)
            for k in range(K)
        ]
        head = fedcgs(fit, classes)
        validation, class_out, combined = [], [], []
        for i in range(K):
            yi = y[train[i]]
            val = splits[i][1]
            right = head.predict(Z[i][val]) == yi[val]
            per_class = {c: right[yi[val] == c].mean() for c in np.unique(yi[val])}
            if per_class:
                validation.append(np.mean(list(per_class.values())))
            outs = []
            for c in np.flatnonzero(held[i]):
                if not any(held[k, c] for k in range(K) if k != i):
                    continue
                rows = yi == c
                parts = [without_class(s, c) if k == i else s for k, s in enumerate(fit)]
                h = fedcgs(parts, classes)
                outs.append(np.mean(h.predict(Z[i][rows]) == c))
                class_out.append(outs[-1])
            lacking = [c for c in classes if not held[i, c] and held[:, c].any()]
            federation = [c for c in classes if held[:, c].any()]
            if outs and per_class:
                estimate = [per_class.get(c, np.mean(outs)) for c in federation if c not in lacking]
                estimate += [np.mean(outs)] * len(lacking)
                combined.append(np.mean(estimate))
        records.append(
            {
                "alpha": "none" if alpha is None else alpha,
                "seed": seed,
                "tau": tau,
                "validation": float(np.mean(validation)),
                "validation, own rows out": balanced_validation(
                    fitting_maps, tau, X, y, train, splits, classes
                )[0],
                "class-out": float(np.mean(class_out)) if class_out else np.nan,
                "combined": float(np.mean(combined)) if combined else np.nan,
                # the truth: the head on all rows at this tau, on every domain's test rows
                **{
                    f"test, {case}": value
                    for case, value in macro_test_accuracy(
                        maps, tau, X, y, train, test, classes
                    ).items()
                },
            }
        )
    return records


def main() -> None:
    n_seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    data = load_npz(DATA / "digits_effnet_lite0.npz")
    X = data.X.astype(np.float64) @ digits_projection(data.X.shape[1], 256)
    start = time.perf_counter()
    with threadpool_limits(1):
        records = [
            r
            for alpha in ALPHAS
            for seed in range(n_seeds)
            for r in one_run(X, data.y, data.domain, alpha, seed)
        ]
    wall = time.perf_counter() - start
    estimates = ("validation", "validation, own rows out", "class-out", "combined")
    print("# Estimates of the macro test accuracy at each tau (FedCGS, digits 256-d)\n")
    print(
        f"Generated by benchmarks/class_out_selection.py ({n_seeds} seeds, {wall:.0f} s, "
        "1 BLAS thread). Mean over seeds, in %; the estimates are computed from the clients' "
        "own rows only (see the script's docstring). The truth in both cases "
        "(`skslot_bench.CASES`): *test, domain* each domain's whole test split (the paper's "
        "test, what the estimates estimate); *test, own mix* each client's test rows "
        "weighted to its training mix, the head predicting with the client's own prior.\n"
    )
    for alpha in ("0.1" if a == 0.1 else "none" for a in ALPHAS):
        rows = [r for r in records if str(r["alpha"]) == alpha]
        print(f"## alpha = {alpha}\n")
        tests = [f"test, {case}" for case in CASES]
        print("| tau | " + " | ".join((*estimates, *tests)) + " |")
        print("| --- " * (1 + len(estimates) + len(tests)) + "|")
        for tau in TAUS:
            at = [r for r in rows if r["tau"] == tau]
            cells = [f"{100 * np.nanmean([r[e] for r in at]):.1f}" for e in (*estimates, *tests)]
            print(f"| {tau:g} | " + " | ".join(cells) + " |")
        print()
        print(
            "| chosen by | taus chosen (per seed) | "
            + " | ".join(f"{t} accuracy of the choice" for t in tests)
            + " |"
        )
        print("| --- " * (2 + len(tests)) + "|")
        for e in (*estimates, *tests):
            chosen, accuracy = [], []
            for seed in range(n_seeds):
                at = [r for r in rows if r["seed"] == seed]
                best = max(at, key=lambda r: (r[e], -r["tau"]))
                chosen.append(best["tau"])
                accuracy.append([best[t] for t in tests])
            label = f"the {e} set (oracle)" if e in tests else e
            cells = " | ".join(f"{100 * v:.1f}" for v in np.mean(accuracy, axis=0))
            print(f"| {label} | {', '.join(f'{t:g}' for t in chosen)} | {cells} |")
        fixed = [np.mean([r[t] for r in rows if r["tau"] == 0.4]) for t in tests]
        print("| fixed tau = 0.4 | | " + " | ".join(f"{100 * v:.1f}" for v in fixed) + " |\n")


if __name__ == "__main__":
    main()
