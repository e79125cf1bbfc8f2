"""Accuracy of SLOT-Align + each head when the summaries are differentially private.

The paper's protocol (one client per domain, Dirichlet alpha = 0.1, 70/30
split, full test sets aligned with their own client's map). Rows are first
L2-normalised and scaled by sqrt(m) (a per-row, data-free step that keeps
coordinates at unit scale for the logistic heads), so the clipping bound
C = sqrt(m) clips nothing and the noise is the only change. Each client releases its summary
with ``GaussianSummaryEstimator(epsilon=..., delta=1e-5, clip_norm=sqrt(m))``; the
server computes the reference from the noisy summaries; each client aligns
with ``SLOTTransformer.from_reference`` (the deployment path). Only the
summaries are private: the heads' own statistics are not protected by this
option. Prints macro accuracy over domains (%), mean +- std over seeds, for
no SLOT (tau = 0) and SLOT at tau = 0.4 with epsilon in {1, 4, 16, none}, in
both cases (:data:`skslot_bench.CASES`: each client's test rows weighted to its
own training mix, the head predicting with its prior; its domain's whole test
split).

Usage:

    python benchmarks/privacy.py [path.npz] [n_seeds]

(default: ../shared/data/digits_effnet_lite0.npz when present, else the
embedded Office-Caltech10; 3 seeds).
"""

import sys
import time
from pathlib import Path

import numpy as np
from skslot_bench import CASES, DEFAULT_HEADS, PREPROCESS, macro_accuracy_by_case, training_mixes

from skslot import BuresBarycenter, GaussianSummaryEstimator, SLOTTransformer
from skslot.datasets import dirichlet_partition, load_npz, load_office_caltech10

EPSILONS = (1.0, 4.0, 16.0, None)
TAU = 0.4
ALPHA = 0.1
DELTA = 1e-5


def aligned(X, train_rows, train_client, test_rows, test_client, epsilon, seed):
    clip_norm = np.sqrt(X.shape[1])
    """Train and test rows aligned with each client's map from (noisy) summaries."""
    summaries = {}
    for k in np.unique(train_client):
        est = GaussianSummaryEstimator(
            epsilon=epsilon,
            delta=DELTA,
            clip_norm=None if epsilon is None else clip_norm,
            random_state=1000 * seed + int(k),
        )
        summaries[int(k)] = est.fit(X[train_rows[train_client == k]], client=int(k)).summaries_[
            int(k)
        ]
    reference = BuresBarycenter().fit(summaries).reference_
    slot = SLOTTransformer.from_reference(
        reference,
        summaries,
        tau=TAU,
        unknown_client="identity",
        mean_tau=None,
        client_tau="uniform",
    )
    return (
        slot.transform(X[train_rows], client=train_client),
        slot.transform(X[test_rows], client=test_client),
    )


def main(path: str | None, n_seeds: int) -> None:
    data = load_npz(path) if path else load_office_caltech10()
    X = PREPROCESS["l2"](data.X) * np.sqrt(data.X.shape[1])
    print(
        f"{data.name}: {X.shape[0]} rows x {X.shape[1]} features, alpha={ALPHA}, "
        f"tau={TAU}, delta={DELTA}, rows of norm sqrt(m), clip_norm=sqrt(m), "
        f"{n_seeds} seeds, OpenBLAS threads as set in the environment"
    )
    columns = ["no SLOT"] + [f"eps={e}" if e else "eps=none" for e in EPSILONS]
    scores = {(case, head): {c: [] for c in columns} for case in CASES for head in DEFAULT_HEADS}
    classes = np.unique(data.y)
    start = time.perf_counter()
    for seed in range(n_seeds):
        part = dirichlet_partition(data.y, data.domain, alpha=ALPHA, random_state=seed)
        keep = ~np.isin(part.train_client, part.empty_clients)
        train_rows, train_client = part.train_index[keep], part.train_client[keep]
        y_train, y_test = data.y[train_rows], data.y[part.test_index]
        mixes = training_mixes(y_train, train_client, classes)
        variants = {"no SLOT": (X[train_rows], X[part.test_index])}
        for column, epsilon in zip(columns[1:], EPSILONS, strict=True):
            variants[column] = aligned(
                X, train_rows, train_client, part.test_index, part.test_client, epsilon, seed
            )
        for column, (Z_train, Z_test) in variants.items():
            for head, factory in DEFAULT_HEADS.items():
                model = factory(seed).fit(Z_train, y_train, client=train_client)
                macro = macro_accuracy_by_case(
                    model, Z_test, y_test, part.test_client, part.client_domain, mixes, classes
                )
                for case in CASES:
                    scores[(case, head)][column].append(macro[case])
        print(f"  seed {seed} done ({time.perf_counter() - start:.0f} s)", flush=True)
    print("\n| case | head | " + " | ".join(columns) + " |")
    print("|" + " --- |" * (len(columns) + 2))
    for (case, head), row in scores.items():
        cells = [f"{np.mean(v):.1f} +- {np.std(v):.1f}" for v in row.values()]
        print(f"| {case} | {head} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
    path = sys.argv[1] if len(sys.argv) > 1 else (str(default) if default.exists() else None)
    main(path or None, int(sys.argv[2]) if len(sys.argv) > 2 else 3)
