"""How should the federation choose tau?  Six selection rules against the test sets.

For each real data set, alpha in {0.1, none}, seed and head, the script fits
the federated search's candidate heads (one per tau in {0, 0.2, ..., 1}, on the
clients' fitting rows, as ``FederatedTauSearch`` does) and records

* each candidate's macro test accuracy over domains, in both cases
  (:data:`skslot_bench.CASES`);
* each client's validation counts for the candidates fitted on all clients
  ("local" validation, what skslot does), and for candidates fitted without
  that client ("leave-one-client-out", Gulrajani and Lopez-Paz 2021);

then chooses with the plain maximum (z = 0) or the z-standard-error rule
(z = 0.5, 1: the least-transport candidate within z standard errors of the
best) and prints, per cell, the chosen candidate's test accuracy minus the
accuracy without SLOT (tau = 0), with the chosen taus per seed.

Run: python benchmarks/selection_rules.py [n_seeds] > docs/results/selection_rules.md
(about 25 minutes of CPU on 2 cores; digits is skipped without ../shared/data).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from skslot_bench import CASE_TITLES, CASES, DEFAULT_HEADS, macro_accuracy_by_case, training_mixes
from threadpoolctl import threadpool_limits

from skslot import SLOTTransformer
from skslot._validation import spawn_seeds
from skslot.datasets import dirichlet_partition, load_npz, load_office_caltech10
from skslot.heads import candidate_heads, local_heads, statistics_of_parts
from skslot.protocol.stages.validation import ValidationCounts, score_candidates
from skslot.selection import DEFAULT_TAUS, candidate_grid, validation_split

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
RULES = {f"{v}, z={z:g}": (v, z) for v in ("local", "loo") for z in (0.0, 0.5, 1.0)}


def load(name: str):
    return load_office_caltech10() if name == "office_caltech10" else load_npz(DIGITS)


def one_partition(name: str, alpha: float | None, seed: int) -> tuple[tuple, dict]:
    """Test accuracy and validation counts of every candidate, for every head."""
    with threadpool_limits(1):
        data = load(name)
        X = data.X.astype(np.float64)
        part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
        keep = ~np.isin(part.train_client, part.empty_clients)
        X_train, y_train = X[part.train_index[keep]], data.y[part.train_index[keep]]
        train_client = part.train_client[keep]
        slot = SLOTTransformer(
            unknown_client="identity", mean_tau=None, client_tau="uniform", label_mix="federation"
        ).fit(X_train, client=train_client)
        labels = sorted(set(train_client.tolist()))
        classes = np.unique(y_train)
        maps = [slot.maps_[label] for label in labels]
        rows = [np.flatnonzero(train_client == label) for label in labels]
        splits = [
            validation_split(y_train[r], 0.2, s)
            for r, s in zip(rows, spawn_seeds(seed, len(labels)), strict=True)
        ]
        y_test = data.y[part.test_index]
        mixes = training_mixes(y_train, train_client, classes)
        out = {}
        for head_name, factory in DEFAULT_HEADS.items():
            head = factory(seed).set_params(label_mix="federation")  # the domain case's rules
            candidates = candidate_grid(head, DEFAULT_TAUS)
            K = len(labels)
            if head.strategy.uploads_statistics:
                stats = [
                    statistics_of_parts(head, X_train[r], y_train[r], classes, sp, client_index=k)[
                        0
                    ]
                    for k, (r, sp) in enumerate(zip(rows, splits, strict=True))
                ]
                full = candidate_heads(head, candidates, stats, classes, maps)
                loo = [
                    candidate_heads(
                        head,
                        candidates,
                        stats[:k] + stats[k + 1 :],
                        classes,
                        maps[:k] + maps[k + 1 :],
                    )
                    for k in range(K)
                ]
            else:
                per_client = [
                    local_heads(
                        head,
                        X_train[r][f],
                        y_train[r][f],
                        classes,
                        maps[k],
                        DEFAULT_TAUS,
                        client_index=k,
                    )
                    for k, (r, (f, _)) in enumerate(zip(rows, splits, strict=True))
                ]
                updates = {t: [u[i] for u in per_client] for i, t in enumerate(DEFAULT_TAUS)}
                full = candidate_heads(head, candidates, updates, classes)
                loo = [
                    candidate_heads(
                        head,
                        candidates,
                        {t: u[:k] + u[k + 1 :] for t, u in updates.items()},
                        classes,
                    )
                    for k in range(K)
                ]
            counts: dict[str, dict] = {"local": {}, "loo": {}}
            for k, (r, (_, v)) in enumerate(zip(rows, splits, strict=True)):
                if len(v) == 0:
                    continue
                for kind, heads in (("local", full), ("loo", loo[k])):
                    counts[kind][k] = score_candidates(
                        [h.linear_scores() for h in heads],
                        DEFAULT_TAUS,
                        maps[k],
                        X_train[r][v],
                        y_train[r][v],
                        classes,
                    )
            test: dict[str, list] = {case: [] for case in CASES}
            for tau, h in zip(DEFAULT_TAUS, full, strict=True):
                Z = slot.set_params(tau=tau).transform(X[part.test_index], client=part.test_client)
                h.with_client_counts(mixes)  # each client holds its own counts
                macro = macro_accuracy_by_case(
                    h, Z, y_test, part.test_client, part.client_domain, mixes, classes
                )
                for case in CASES:
                    test[case].append(macro[case])
            out[head_name] = {
                "counts": counts,
                "test": {case: np.array(v) for case, v in test.items()},
            }
        return (name, alpha, seed), out


def choose(counts: dict[int, ValidationCounts], z: float) -> int:
    """The least-transport candidate within ``z`` standard errors of the best mean score."""
    scores = np.array([c.balanced_accuracy() for c in counts.values()])
    variance = np.array([c.balanced_accuracy_variance() for c in counts.values()])
    mean = scores.mean(axis=0)
    se = np.sqrt(variance.sum(axis=0)) / len(counts)
    best = int(np.argmax(mean))
    return int(np.flatnonzero(mean >= mean[best] - z * se[best])[0])


def main(n_seeds: int = 3) -> None:
    names = ["office_caltech10"] + (["digits_effnet_lite0"] if DIGITS.exists() else [])
    jobs = [(n, a, s) for n in names for a in (0.1, None) for s in range(n_seeds)]
    results = dict(Parallel(n_jobs=2)(delayed(one_partition)(*job) for job in jobs))
    print(f"# Choosing tau: selection rules against the test sets ({n_seeds} seeds)\n")
    print("Gain over tau = 0 of the chosen candidate (macro test accuracy, points; candidates")
    print("trained on the fitting rows), mean over seeds, and the chosen tau per seed. The")
    print("rules score each client's validation rows by balanced accuracy, as the federated")
    print("choice does in the domain case; the chosen candidate's test accuracy is shown in")
    print("both cases (`skslot_bench.CASES`): each client's test rows weighted to its own")
    print("training mix, the head predicting with the client's prior (own mix), and its")
    print("domain's whole test split (domain, the paper's test).\n")
    for case in CASES:
        print(f"## {CASE_TITLES[case]}\n")
        table(results, names, n_seeds, case)


def table(results: dict, names: list[str], n_seeds: int, case: str) -> None:
    print("| data set | alpha | head | tau = 0 | best fixed tau | " + " | ".join(RULES) + " |")
    print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in RULES) + " |")
    gains: dict[str, list] = {rule: [] for rule in RULES}
    gaps: dict[str, list] = {rule: [] for rule in RULES}
    for name in names:
        for alpha in (0.1, None):
            for head in DEFAULT_HEADS:
                runs = [results[(name, alpha, s)][head] for s in range(n_seeds)]
                tests = np.array([r["test"][case] for r in runs])
                base, best_fixed = tests[:, 0].mean(), tests.mean(axis=0).max()
                cells = []
                for rule, (kind, z) in RULES.items():
                    chosen = [choose(r["counts"][kind], z) for r in runs]
                    value = np.mean([t[j] for t, j in zip(tests, chosen, strict=True)])
                    gains[rule].append(value - base)
                    gaps[rule].append(best_fixed - value)
                    taus = ",".join(f"{DEFAULT_TAUS[j]:g}" for j in chosen)
                    cells.append(f"{value - base:+.2f} ({taus})")
                print(
                    f"| {name} | {alpha or 'none'} | {head} | {base:.2f} | {best_fixed:.2f} | "
                    + " | ".join(cells)
                    + " |"
                )
    print("\n| rule | worst cell vs tau = 0 | mean vs tau = 0 | mean gap to the best fixed tau |")
    print("| --- | --- | --- | --- |")
    for rule in RULES:
        print(
            f"| {rule} | {min(gains[rule]):+.2f} | {np.mean(gains[rule]):+.2f} | "
            f"{np.mean(gaps[rule]):.2f} |"
        )
    print()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
