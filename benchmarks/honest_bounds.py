"""How far honest clients stray from the median client: the defence's margins.

The defence (:mod:`skslot.defence`) rejects a client, or caps its weight, when
it strays too far from the median client.  It changes nothing for a
federation in which no honest client crosses a bound, since it only filters.
This script measures, on the real data sets in docs/results.md's settings
(one client per domain, alpha 0.1, 0.05, 0.01 and no skew, seeds 0-4; for the
summaries and counts also 2 and 5 clients per domain), the largest value over
honest clients of each quantity the server bounds:

* variance ratio: mean variance ``tr(S) / m`` over the median client's (either
  way: ``max(r, 1 / r)``);
* mean offset: distance of the mean from the median mean, in median standard
  deviations;
* count ratio: rows over the median client's rows;
* local head norm ratio (O-FedAvg, one client per domain, at tau = 0, 0.4 and
  1, the largest over the three): ``||[W, b]||_F`` over the median client's;

next to the default bound of each (``DeploymentConfig``).

Run: python benchmarks/honest_bounds.py > docs/results/honest_bounds.md
(about 10 minutes on 2 cores; digits is skipped without ../shared/data).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from skslot_bench import DEFAULT_HEADS
from threadpoolctl import threadpool_limits

from skslot import GaussianSummaryEstimator, SLOTTransformer
from skslot.datasets import dirichlet_partition, load_npz, load_office_caltech10
from skslot.defence import norm_ratios, ratios_to_median, summary_deviations
from skslot.flower import DeploymentConfig
from skslot.heads import local_heads

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
ALPHAS = (0.1, 0.05, 0.01, None)
NORM_TAUS = (0.0, 0.4, 1.0)


def load(name: str):
    return load_office_caltech10() if name == "office_caltech10" else load_npz(DIGITS)


def one_partition(name: str, alpha: float | None, seed: int, per_domain: int) -> dict:
    with threadpool_limits(1):
        data = load(name)
        X = data.X.astype(np.float64)
        part = dirichlet_partition(
            data.y, data.domain, alpha=alpha, clients_per_domain=per_domain, random_state=seed
        )
        keep = ~np.isin(part.train_client, part.empty_clients)
        X_train, y_train = X[part.train_index[keep]], data.y[part.train_index[keep]]
        client = part.train_client[keep]
        labels = np.unique(client)
        summaries = GaussianSummaryEstimator().fit(X_train, client=client).summaries_
        ordered = [summaries[k] for k in labels]
        variance, offset = summary_deviations(ordered)
        out = {
            "variance": float(np.max(np.maximum(variance, 1 / variance))),
            "offset": float(np.max(offset)),
            "count": float(np.max(ratios_to_median([s.n for s in ordered]))),
            "norm": np.nan,
        }
        if per_domain == 1:
            slot = SLOTTransformer(mean_tau=None, client_tau="uniform").fit(X_train, client=client)
            head = DEFAULT_HEADS["O-FedAvg"](seed)
            classes = np.unique(data.y)
            norms = np.array(
                [
                    [
                        np.linalg.norm(np.column_stack([u.coef, u.intercept]))
                        for u in local_heads(
                            head,
                            X_train[client == k],
                            y_train[client == k],
                            classes,
                            slot.maps_[k],
                            NORM_TAUS,
                        )
                    ]
                    for k in labels
                ]
            )
            ratios = [norm_ratios(norms[:, t]) for t in range(3)]
            out["norm"] = max((float(np.max(r)) for r in ratios if r is not None), default=np.nan)
        return {"data": name, "alpha": alpha, "per_domain": per_domain, **out}


def main() -> None:
    names = ["office_caltech10"] + (["digits_effnet_lite0"] if DIGITS.exists() else [])
    jobs = [
        (name, alpha, seed, per_domain)
        for name in names
        for per_domain in (1, 2, 5)
        for alpha in ALPHAS
        for seed in range(5)
    ]
    start = time.perf_counter()
    records = Parallel(n_jobs=2)(delayed(one_partition)(*job) for job in jobs)
    wall = time.perf_counter() - start
    bounds = DeploymentConfig()
    print("# How far honest clients stray from the median client\n")
    print(
        "Largest value over honest clients and seeds 0-4 of each quantity the defence bounds "
        f"(benchmarks/honest_bounds.py, {len(records)} partitions, {wall:.0f} s wall on 2 "
        "workers, 1 BLAS thread each). Head norms: O-FedAvg local heads at tau 0, 0.4 and 1, "
        "one client per domain.\n"
    )
    print(
        "| data | clients per domain | alpha | variance ratio | mean offset | count ratio "
        "| head norm ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        for per_domain in (1, 2, 5):
            for alpha in ALPHAS:
                cell = [
                    r
                    for r in records
                    if r["data"] == name and r["alpha"] == alpha and r["per_domain"] == per_domain
                ]
                values = [max(r[q] for r in cell) for q in ("variance", "offset", "count", "norm")]
                shown = " | ".join("-" if np.isnan(v) else f"{v:.2f}" for v in values)
                print(f"| {name} | {per_domain} | {alpha or 'none'} | {shown} |")
    worst = [np.nanmax([r[q] for r in records]) for q in ("variance", "offset", "count", "norm")]
    print(
        f"| **largest** | | | **{worst[0]:.2f}** | **{worst[1]:.2f}** | **{worst[2]:.2f}** | "
        f"**{worst[3]:.2f}** |"
    )
    print(
        f"| default bound | | | max-variance-ratio {bounds.max_variance_ratio:g} | "
        f"max-mean-offset {bounds.max_mean_offset:g} | max-weight-ratio "
        f"{bounds.max_weight_ratio:g} (cap), max-count-ratio {bounds.max_count_ratio:g} | "
        f"max-norm-ratio {bounds.max_norm_ratio:g} |"
    )


if __name__ == "__main__":
    sys.exit(main())
