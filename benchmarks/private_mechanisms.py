"""Private mechanisms for FedCGS, side by side: where the price of privacy can be cut.

Each client's releases are made by the library's own mechanisms
(:func:`skslot.heads.private_class_statistics`,
:func:`skslot.privacy.private_summary`,
:func:`skslot.heads.private_class_counts`), the noise of each calibrated by
one :class:`~skslot.privacy.PrivacyBudget` per client split as a run splits
it (nine to each release that shapes the model, one to a count, the test
count's share kept); FedCGS fitted from the releases on the server.  Embedded
digits (three domains, one client each, 256-d, rows L2-normalised, clip_norm =
1, delta = 1e-5), Dirichlet alpha = 0.1 and no label skew, seeds 0-4, both
cases (:data:`skslot_bench.CASES`).  SLOT: tau = 0.6, client_tau =
"label-shift", mean_tau = 1 (the domain case's setting).

Mechanisms:

* ``one release`` (what a private run does): the Gaussian mechanism on the
  clipped class sums, class counts and Gram matrix together (sensitivity
  ``sqrt(6)``); SLOT's summaries, label-shift counts and maps are derived from
  the release and the server pushes the statistics through each client's map.
* ``noise-level ridge``: the same release; the head's ridge is the spectral
  bound of the pooled Gram matrix's noise, ``sigma sqrt(K) sqrt(2 m log(2 m^2 /
  rho))`` with ``rho = 0.05`` (AdaSSP's choice, Wang 2018, from public values
  only; its private estimate of the smallest eigenvalue is left out, the bound
  being far above it here), in place of the fixed relative ``1e-3`` the other mechanisms use.
* ``two releases, maps first``: each client releases its summary
  (:func:`~skslot.privacy.private_summary`) and its class counts first; the
  server builds the maps; each client maps its rows, clips them and releases
  the class statistics of the mapped rows, so the maps do not stretch the
  noise (without SLOT: the one release).
* ``nearest class mean``: class sums and counts only (sensitivity 2, no Gram
  matrix), the server's shared covariance a public isotropic ``I / m`` (rows
  of norm 1): FedNCM's head (Legate et al. 2023), LDA with a covariance no
  noise touches; with SLOT, released after the maps as above.

FedPFT (a second table): its one release of class sums, counts and per-class
Gram matrices (:func:`skslot.heads.private_class_moments`) through the real
protocol (``private_federation.run``), each class's Gaussian fitted with a
full, diagonal or spherical covariance from it (fewer noisy entries read).

References: Wang, "Revisiting differentially private linear regression:
optimal and adaptive prediction & estimation in unbounded domain", UAI 2018;
Legate, Bernier, Caccia, Oyallon and Belilovsky, "Guiding the last layer in
federated learning with pre-trained models", NeurIPS 2023.

Run: python benchmarks/private_mechanisms.py > docs/results/private_mechanisms.md
(about 10 minutes on one core).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import private_federation
from private_federation import DELTA, l2, scored, table, training_counts

from skslot import BuresBarycenter, SLOTTransformer, SmallClientWarning
from skslot._moments import ShiftedMoments
from skslot.datasets import dirichlet_partition, load_digits_effnet
from skslot.heads import ClassStatistics, FedCGSClassifier, FedPFTClassifier
from skslot.label_shift import label_shift_distances
from skslot.privacy import (
    CLASS_COUNTS_SENSITIVITY,
    CLASS_STATISTICS_SENSITIVITY,
    SUMMARY_SENSITIVITY,
    PrivacyBudget,
    private_class_counts,
    private_class_statistics,
    private_summary,
)
from skslot.privacy._statistics import consistent_statistics

ALPHAS = (0.1, None)
EPSILONS = (4.0, 8.0, 16.0, None)
SLOT = {"tau": 0.6, "client_tau": "label-shift", "mean_tau": 1.0, "label_mix": "federation"}
MECHANISMS = ("one release", "noise-level ridge", "two releases, maps first", "nearest class mean")
#: FedPFT's covariance forms measured, each fitted from the same release.
FEDPFT_FORMS = ("full", "diag", "spherical")
#: The failure probability of AdaSSP's spectral bound.
RHO = 0.05
#: Replace-one L2 sensitivity of (class sums, class counts) of rows in the unit ball: one
#: sum moves by at most 2 within a class; across classes two sums (sqrt 2) and two counts.
SUMS_SENSITIVITY = 2.0


def noise_level_ridge(sigma: float, n_clients: int, m: int) -> float:
    """AdaSSP's ridge: the spectral norm the pooled Gram matrix's noise stays below w.p.
    ``1 - RHO`` (entries ``N(0, K sigma^2)``, a union bound over the ``m^2`` entries)."""
    return sigma * math.sqrt(n_clients) * math.sqrt(2 * m * math.log(2 * m * m / RHO))


def nearest_mean_statistics(
    sums: np.ndarray, counts: np.ndarray, classes: np.ndarray, n: int
) -> ClassStatistics:
    """Class sums and counts, with the Gram matrix of a public isotropic covariance ``I / m``."""
    m = sums.shape[1]
    s1 = sums.sum(axis=0)
    gram = np.eye(m) * (n / m) + np.outer(s1, s1) / n
    return consistent_statistics(classes, counts, sums, gram, n=n, scale=1.0)


def slot_maps(summaries: dict, counts: dict) -> list:
    """Each client's SLOT map (:data:`SLOT`) from released summaries and class counts."""
    reference = BuresBarycenter().fit(list(summaries.values())).reference_
    slot = SLOTTransformer.from_reference(
        reference, summaries, tau_scales=label_shift_distances(counts), **SLOT
    )
    return [slot.client_map(k) for k in summaries]


def releases(
    mechanism: str, X: np.ndarray, y: np.ndarray, classes: np.ndarray, sigma: Callable, rng
) -> ClassStatistics:
    """One client's head statistics under ``mechanism`` (its rows already mapped, if any)."""
    if mechanism == "nearest class mean":
        exact = ClassStatistics.from_rows(X, y, classes)
        s = sigma("statistics", SUMS_SENSITIVITY)
        sums = exact.sums + rng.normal(scale=s, size=exact.sums.shape)
        counts = exact.counts + rng.normal(scale=s, size=exact.counts.shape)
        return nearest_mean_statistics(sums, counts, classes, X.shape[0])
    s = sigma("statistics", CLASS_STATISTICS_SENSITIVITY)
    return private_class_statistics(X, y, classes, clip_norm=1.0, sigma=s, rng=rng)


def one_run(data, part, mechanism: str, epsilon: float | None, slot: bool, seed: int) -> dict:
    """Macro accuracy (%) in each case of FedCGS under ``mechanism`` at ``epsilon``."""
    classes = np.unique(data.y)
    X = l2(data.X)
    K = part.n_clients
    two_releases = slot and mechanism in ("two releases, maps first", "nearest class mean")
    plan = ["statistics", "evaluation"]
    if two_releases:
        plan = ["summary", "class_counts", *plan]
    ledgers = [PrivacyBudget(epsilon, DELTA).ledger(plan) if epsilon else None for _ in range(K)]

    def sigma_of(k: int) -> Callable:
        return lambda release, sensitivity: (
            ledgers[k].noise_scale(release, sensitivity) if ledgers[k] else 0.0
        )

    rows = {k: part.train_index[part.train_client == k] for k in range(K)}
    tests = {k: part.test_index[part.test_client == k] for k in range(K)}
    maps = None
    if two_releases:
        summaries, counts = {}, {}
        for k in range(K):
            rng = np.random.default_rng([seed, k, 1])
            moments = ShiftedMoments.from_rows(
                X[rows[k]], shift=np.zeros(X.shape[1]), fourth_order=False, clip_norm=1.0
            )
            summaries[k] = private_summary(
                moments, clip_norm=1.0, sigma=sigma_of(k)("summary", SUMMARY_SENSITIVITY),
                rng=rng, client=k,
            )  # fmt: skip
            counts[k] = private_class_counts(
                data.y[rows[k]], classes,
                sigma=sigma_of(k)("class_counts", CLASS_COUNTS_SENSITIVITY), rng=rng,
            )  # fmt: skip
        maps = slot_maps(summaries, counts)
        stats = []
        for k in range(K):
            Z = maps[k].apply(X[rows[k]])
            Z /= np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1.0)  # clipped to 1
            rng = np.random.default_rng([seed, k, 2])
            stats.append(releases(mechanism, Z, data.y[rows[k]], classes, sigma_of(k), rng))
        head = FedCGSClassifier(label_mix="federation", shrinkage=1e-3).fit_from_statistics(
            stats, classes
        )
    else:
        base = "nearest class mean" if mechanism == "nearest class mean" else "one release"
        stats = [
            releases(
                base,
                X[rows[k]],
                data.y[rows[k]],
                classes,
                sigma_of(k),
                np.random.default_rng([seed, k, 2]),
            )
            for k in range(K)
        ]
        if slot:
            summaries = {
                k: s.summary(s.oas_shrinkage("total"), client=k) for k, s in enumerate(stats)
            }
            maps = slot_maps(summaries, {k: s.class_counts() for k, s in enumerate(stats)})
        shrinkage = 1e-3
        if mechanism == "noise-level ridge" and epsilon:
            if maps is not None:  # the head's covariance is that of the aligned statistics
                aligned = [s.aligned(t) for s, t in zip(stats, maps, strict=True)]
            pooled = ClassStatistics.combine(stats if maps is None else aligned)
            S = pooled.moments.centred().gram / pooled.moments.n
            sigma = sigma_of(0)("statistics", CLASS_STATISTICS_SENSITIVITY)
            ridge = noise_level_ridge(sigma, K, X.shape[1]) / pooled.moments.n
            shrinkage = ridge / (np.trace(S) / X.shape[1])  # FedCGS's ridge is relative
        head = FedCGSClassifier(label_mix="federation", shrinkage=shrinkage)
        head.fit_from_statistics(stats, classes, maps=maps)
    scored_tests = {
        k: ((maps[k].apply(X[t]) if maps else X[t]), data.y[t]) for k, t in tests.items()
    }
    return scored(head, scored_tests, training_counts(data, part), classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=SmallClientWarning)
    data = load_digits_effnet()
    start = time.perf_counter()
    scores: dict = {}
    for seed in range(args.seeds):
        for alpha in ALPHAS:
            part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
            for mechanism in MECHANISMS:
                for slot in (False, True):
                    for epsilon in EPSILONS:
                        found = one_run(data, part, mechanism, epsilon, slot, seed)
                        for case, value in found.items():
                            key = (case, alpha, mechanism, slot, epsilon)
                            scores.setdefault(key, []).append(value)
            for form in FEDPFT_FORMS:
                name = f"FedPFT ({form})"
                private_federation.HEADS[name] = lambda seed, form=form: FedPFTClassifier(
                    random_state=seed, label_mix="federation", covariance_type=form
                )
                for config in ("no SLOT", "SLOT"):
                    for epsilon in EPSILONS:
                        found = private_federation.run(data, part, config, epsilon, 9.0, seed, name)
                        for case, value in found.items():
                            key = (case, alpha, form, config, epsilon)
                            scores.setdefault(key, []).append(value)
    elapsed = time.perf_counter() - start
    print("# Private mechanisms for FedCGS and FedPFT, side by side\n")
    print(
        "Embedded digits (three domains, one client each, 256-d, rows L2-normalised, "
        f"clip_norm = 1, delta = {DELTA:g}), {args.seeds} seeds; macro accuracy "
        "(%), mean [min, max], in both cases (`skslot_bench.CASES`); each client's budget "
        "split as a run splits it. The mechanisms: benchmarks/private_mechanisms.py's "
        "docstring ('no privacy': the same pipeline without noise). Generated by "
        f"benchmarks/private_mechanisms.py ({elapsed:.0f} s, one process, one BLAS thread).\n"
    )
    for alpha in ALPHAS:
        print(f"## FedCGS, {'alpha = ' + str(alpha) if alpha else 'no label skew'}\n")
        rows = [
            (
                (mechanism, "SLOT" if slot else "no SLOT"),
                [(alpha, mechanism, slot, e) for e in EPSILONS],
            )
            for slot in (False, True)
            for mechanism in MECHANISMS
            if slot or mechanism != "two releases, maps first"  # without SLOT: the one release
        ]
        lines = table(
            scores, rows, EPSILONS, ("mechanism", "alignment"),
            lambda e: f"eps = {e:g}" if e else "no privacy",
        )  # fmt: skip
        print("\n".join(lines) + "\n")
    for alpha in ALPHAS:
        print(f"## FedPFT, {'alpha = ' + str(alpha) if alpha else 'no label skew'}\n")
        rows = [
            ((form, config), [(alpha, form, config, e) for e in EPSILONS])
            for config in ("no SLOT", "SLOT")
            for form in FEDPFT_FORMS
        ]
        lines = table(
            scores, rows, EPSILONS, ("covariance", "alignment"),
            lambda e: f"eps = {e:g}" if e else "no privacy",
        )  # fmt: skip
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
