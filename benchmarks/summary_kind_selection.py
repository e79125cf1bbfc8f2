"""Research: the summary kind as a candidate of the federated search.

``FederatedTauSearch`` chooses ``tau`` by the clients' validation with one
summary kind, the run's.  Would letting it choose the kind as well (the
paper's total covariance or the within-class one) find the within-class
summary where it helps?  The search's validation split depends on the labels
and the seed only, so two searches, one per kind, validate every candidate on
the *same* held-out rows; their candidates together are what a joint search
would score.  This study runs both (``refit=False``: only their validation
tables are used) and applies the search's own rule
(:func:`skslot.selection.select_candidate`'s one-standard-error rule: the
least transport within one standard error of the best; at equal ``tau`` the
paper's summary first) to

* the paper's summary alone (what ``tau="auto"`` does),
* the within-class summary alone,
* both kinds as candidates (the joint search),

and scores each choice by the test accuracy of that fixed configuration, read
from ``benchmarks/label_aware.py``'s records (the same partitions and seeds;
the refit head of a FedCGS or O-FedAvg search is the fixed head at the chosen
tau, FedPFT's differs by its sampling, and the search's maps are estimated
from the fitting rows where the fixed run's are from all rows).

The search validates with maps estimated from each client's fitting rows,
not from all its rows.  Why that matters is shown
for FedCGS (3 seeds): the mean balanced validation accuracy of each kind's
candidates with the maps estimated from all of a client's rows (its
held-out rows inside the maps' sample) and from its fitting rows only
(held-out rows outside it, as a test row is), against the test accuracy.

Run: python benchmarks/summary_kind_selection.py [n_seeds] [data sets...]
    > docs/results/summary_kind_selection.md
(data sets: digits, office-caltech10; about 20 minutes for both on 2 cores,
most of it Office-Caltech10's searches; needs the label-aware records for the
same seeds).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Hashable

import numpy as np
from class_out_selection import FRACTION, balanced_validation, client_maps, macro_test_accuracy
from joblib import Parallel, delayed
from label_aware import OUT  # the sibling script (run from benchmarks/ or root)
from sklearn.frozen import FrozenEstimator
from skslot_bench import CASE_TITLES, CASES, DEFAULT_HEADS, read_records
from threadpoolctl import threadpool_limits

from skslot import FederatedTauSearch, SLOTTransformer
from skslot.datasets import dirichlet_partition, load_dataset
from skslot.protocol import held_out_rows
from skslot.selection import validation_split

ALPHAS = (0.1, 0.05, 0.01, None)
TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
KINDS = ("total", "within")
#: the choices compared: the kinds a search may choose among
CHOICES = {"total (shipped auto)": ("total",), "within": ("within",), "joint": KINDS}
BIAS_TAUS = (0.0, 0.4, 0.8, 1.0)


def validation_tables(data, alpha, seed: int) -> dict[tuple, tuple[float, float]]:
    """(head, kind, tau) -> (mean balanced validation accuracy, its standard error)."""
    part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
    keep = ~np.isin(part.train_client, part.empty_clients)
    rows, client = part.train_index[keep], part.train_client[keep]
    X, y = data.X[rows].astype(np.float64), data.y[rows]
    # the search's own maps, estimated from each client's fitting rows (its split: the
    # client's position and the run's seed), fitted once per kind for all three heads
    fitting = np.zeros(y.shape[0], dtype=bool)
    split = held_out_rows(y, client, validation_fraction=FRACTION, random_state=seed)
    for fit, _ in split.values():
        fitting[fit] = True
    found = {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            slot = SLOTTransformer(  # the paper's geodesic, the domain case's destination
                unknown_client="identity",
                covariance=kind,
                mean_tau=None,
                client_tau="uniform",
                label_mix="federation",
            )
            slot.fit(X[fitting], y[fitting], client=client[fitting])
            for name, factory in DEFAULT_HEADS.items():
                search = FederatedTauSearch(
                    factory(seed).set_params(label_mix="federation"),
                    taus=TAUS,
                    refit=False,
                    slot=FrozenEstimator(slot),
                    unknown_client="identity",
                    random_state=seed,
                ).fit(X, y, client=client)
                table = search.cv_results_
                for tau, mean, error in zip(
                    table["param_tau"],
                    table["mean_validation_score"],
                    table["std_error_validation_score"],
                    strict=True,
                ):
                    found[(name, kind, float(tau))] = (float(mean), float(error))
    return found


def choose(table: dict[tuple, tuple[float, float]], kinds: tuple) -> tuple:
    """The one-standard-error rule over the candidates ``(kind, tau)`` of ``kinds`` (tau 0
    once), ``table`` giving each candidate's mean validation accuracy and standard error."""
    candidates = [("total", 0.0)] + [(k, t) for t in TAUS if t > 0 for k in kinds]
    scores = np.array([table[c][0] for c in candidates])
    errors = np.array([table[c][1] for c in candidates])
    best = int(np.argmax(scores))
    return candidates[int(np.flatnonzero(scores >= scores[best] - errors[best])[0])]


def fixed_accuracy(records: list[dict], case: str) -> dict[tuple, float]:
    """(alpha, seed, head, kind, tau) -> macro test accuracy (%) of the fixed configuration,
    in ``case`` (:data:`skslot_bench.CASES`)."""
    found: dict[tuple, list[float]] = {}
    for r in records:
        if (
            r.get("selection", "fixed") == "fixed"
            and r.get("client_tau", "uniform") == "uniform"
            and r["case"] == case
        ):
            key = (r["alpha"], r["seed"], r["head"], r["covariance"], r["tau"])
            found.setdefault(key, []).append(r["accuracy"])
    return {key: 100 * float(np.mean(v)) for key, v in found.items()}


def validation_bias(data, alpha, covariance: str, n_seeds: int = 3) -> list[tuple]:
    """Per tau of BIAS_TAUS: FedCGS's validation with the maps' sample holding the held-out
    rows, without them, and the test accuracy in each case (%, mean over seeds)."""
    X, y, classes = data.X.astype(np.float64), data.y, np.unique(data.y)
    found = []
    with threadpool_limits(1):
        for seed in range(n_seeds):
            part = dirichlet_partition(y, data.domain, alpha=alpha, random_state=seed)
            K = int(part.train_client.max()) + 1
            train = [part.train_index[part.train_client == k] for k in range(K)]
            test = [part.test_index[part.test_client == k] for k in range(K)]
            splits = [
                validation_split(y[r], FRACTION, 1000 * seed + k) for k, r in enumerate(train)
            ]
            fitting = [r[splits[k][0]] for k, r in enumerate(train)]
            maps = client_maps(X, train, y, covariance)
            own_out = client_maps(X, fitting, y, covariance)
            found.append(
                [
                    (
                        balanced_validation(maps, tau, X, y, train, splits, classes)[0],
                        balanced_validation(own_out, tau, X, y, train, splits, classes)[0],
                        *macro_test_accuracy(maps, tau, X, y, train, test, classes).values(),
                    )
                    for tau in BIAS_TAUS
                ]
            )
    return [tuple(100 * v) for v in np.mean(found, axis=0)]


def main(n_seeds: int, names: list[str]) -> None:
    print("# The summary kind as a candidate of the federated search\n")
    print(
        f"`python benchmarks/summary_kind_selection.py {n_seeds} {' '.join(names)}`: the "
        "federated search's one-standard-error rule over the paper's summary's candidates "
        '(the shipped `tau="auto"`), over the within-class summary\'s, and over both (a joint '
        "search), the same validation rows for all; gain (%) of the choice's macro test "
        f"accuracy against no SLOT, mean over {n_seeds} seeds, with the chosen "
        "(kind, tau) per seed (t: total, w: within); oracle: the best fixed configuration of "
        "both kinds in hindsight.\n"
    )
    for name in names:
        data = load_dataset(name)
        records = read_records(OUT / f"{data.name}.csv")
        if any("case" not in r for r in records):
            sys.exit(f"{OUT / data.name}.csv: records without a case; run label_aware.py first")
        runs = [(alpha, seed) for alpha in ALPHAS for seed in range(n_seeds)]
        start = time.perf_counter()
        tables = Parallel(n_jobs=2)(delayed(validation_tables)(data, a, s) for a, s in runs)
        wall = time.perf_counter() - start
        by_run: dict[tuple, dict] = dict(zip(runs, tables, strict=True))
        print(f"## {data.name} ({data.X.shape[1]} features; {wall:.0f} s wall)\n")
        for case in CASES:
            print(f"{CASE_TITLES[case]}:\n")
            choice_table(by_run, fixed_accuracy(records, case), n_seeds)
        print(
            "FedCGS, 3 seeds: mean balanced validation accuracy (%) with the maps estimated "
            "from all rows (in sample) / from the fitting rows only (held-out rows out of sample, "
            "as the search estimates them) / test accuracy, domain / test accuracy, own mix:\n"
        )
        taus = " | ".join(f"tau {t:g}" for t in BIAS_TAUS)
        print(f"| alpha | summary | {taus} |")
        print("| --- " * (2 + len(BIAS_TAUS)) + "|")
        for alpha in (0.1, None):
            for kind in KINDS:
                cells = [" / ".join(f"{v:.1f}" for v in values)
                         for values in validation_bias(data, alpha, kind)]  # fmt: skip
                print(f"| {'none' if alpha is None else alpha} | {kind} | {' | '.join(cells)} |")
        print()


def choice_table(by_run: dict[tuple, dict], accuracy: dict[tuple, float], n_seeds: int) -> None:
    """Each choice's gain against no SLOT per (alpha, head), and the oracle's."""
    header = " | ".join(CHOICES)
    print(f"| alpha | head | {header} | oracle |")
    print("| --- " * (3 + len(CHOICES)) + "|")
    for alpha in ALPHAS:
        shown: Hashable = "none" if alpha is None else alpha
        for head in DEFAULT_HEADS:
            cells = []
            for kinds in CHOICES.values():
                gains, picks = [], []
                for seed in range(n_seeds):
                    table = {
                        (k, t): v for (h, k, t), v in by_run[(alpha, seed)].items() if h == head
                    }
                    kind, tau = choose(table, kinds)
                    base = accuracy[(shown, seed, head, "total", 0.0)]
                    gains.append(accuracy[(shown, seed, head, kind, tau)] - base)
                    picks.append(f"{kind[0]}{tau:g}")
                cells.append(f"{np.mean(gains):+.2f} ({','.join(picks)})")
            oracle = max(
                np.mean(
                    [
                        accuracy[(shown, s, head, k, t)] - accuracy[(shown, s, head, "total", 0.0)]
                        for s in range(n_seeds)
                    ]
                )
                for k in KINDS
                for t in TAUS
            )
            print(f"| {shown} | {head} | {' | '.join(cells)} | {oracle:+.2f} |")
    print()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    seeds = int(arguments[0]) if arguments else 5
    main(seeds, arguments[1:] or ["digits", "office-caltech10"])
