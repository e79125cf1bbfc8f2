"""The price of privacy: macro accuracy against each client's budget epsilon, end to end.

Each run is the real protocol in process (``OneShotProtocol`` over
``InProcessTransport``, one ``ClientParty`` per client holding its own
``PrivacyBudget``): every value a client sends is a release under its one
budget (FedCGS: its statistics, from which the server derives its summary and
its label-shift counts; FedPFT: its class moments, from which it derives its
mixtures and its summary; O-FedAvg: its summary, its label-shift counts and
its local head, released by output perturbation; all: its test count),
delta = 1e-5.  Rows are
L2-normalised first (a public per-row step), so ``clip_norm = 1`` clips
nothing.  Embedded digits (three domains, one client each, 256-d public
projection), Dirichlet alpha = 0.1 and no label skew, seeds 0-4.

Configurations, each beside the others on the same partition:

* ``no SLOT``: tau = 0, the means where they are;
* ``centred by the release``: tau = 0, each client's mean moved to the
  reference (``mean_tau = 1``), the one the release determines: centring
  written as post-processing of the released statistics (the server pushes
  them through the shift, the client shifts its test rows by the same
  released mean), so private;
* ``SLOT``: the recommended configuration (tau = 0.6, client_tau =
  "label-shift", mean_tau = 1).

The accuracy is measured on each client's test rows with its own map (the
clients' reported counts are noisy releases).  Two splits of the budget:
equal shares, and nine tenths to the statistics (the default).  A last table
releases in a lower dimension (a public projection of the 256 features,
``digits_projection``) at epsilon = 8, and another repeats each client's rows
``k`` times (the same information, ``k`` times the rows: the statistics scale
by ``k``, the noise does not) to measure the client sizes at which the noise
stops costing accuracy.  ``--maps`` runs only FedCGS with SLOT's maps made from
the release or from the clients' exact summaries
(docs/results/private_federation_maps.md).

Usage::

    python benchmarks/private_federation.py [--seeds 5] [--shares 1 9]
        [--heads FedCGS FedPFT O-FedAvg] [--out docs/results/private_federation.md]
        [--figure docs/results/private_federation.png] [--maps]
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
from skslot_bench import CASES, macro_accuracy_by_case, training_mixes

from skslot import BuresBarycenter, SLOTTransformer, SmallClientWarning
from skslot.datasets import digits_projection, dirichlet_partition, load_digits_effnet
from skslot.heads import (
    ClassStatistics,
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
)
from skslot.label_shift import label_shift_distances
from skslot.privacy import CLASS_STATISTICS_SENSITIVITY, PrivacyBudget, private_class_statistics
from skslot.privacy._statistics import consistent_statistics
from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0, None)
ALPHAS = (0.1, None)
DELTA = 1e-5
#: The domain case's alignment (``label_mix="federation"``), the configurations measured; each
#: is scored in both cases, with each client's own prior where its rows follow its own mix.
HEADS = {
    "FedCGS": lambda seed: FedCGSClassifier(label_mix="federation"),
    "FedPFT": lambda seed: FedPFTClassifier(random_state=seed, label_mix="federation"),
    # the regularisation a private local head needs (its noise grows with C): 0.1 on rows of
    # norm 1, against 22.3 / 18.8 / 15.5 / 13.2 at C = 0.01 / 0.03 / 0.3 / 3 (eps 8, no SLOT,
    # alpha 0.1, seed 0)
    "O-FedAvg": lambda seed: OneShotFedAvgClassifier(C=0.1, max_iter=1000, label_mix="federation"),
}
#: Each client's rows repeated this many times (the client-size table, eps = 8).
REPEATS = (1, 4, 16, 64)
#: The releases that shape the model (their share is the benchmark's ``share``).
MODEL_RELEASES = ("summary", "statistics", "local_head")
DIMENSIONS = (256, 128, 64)
CONFIGS = {
    "no SLOT": {"tau": 0.0, "mean_tau": None},
    "centred by the release": {"tau": 0.0, "mean_tau": 1.0},
    "SLOT": {"tau": 0.6, "client_tau": "label-shift", "mean_tau": 1.0},
}


def l2(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def scored(head, tests: dict, mixes: dict, classes: np.ndarray) -> dict[str, float]:
    """Macro accuracy (%) over the clients in each case (:data:`skslot_bench.CASES`).

    ``tests``: client to its aligned test rows and labels; ``mixes``: client to its
    training class counts, which it holds itself (its own prior is applied where it
    predicts: nothing more is released for it).
    """
    head.with_client_counts(mixes)
    Z = np.vstack([rows for rows, _ in tests.values()])
    y = np.concatenate([labels for _, labels in tests.values()])
    client = np.concatenate([np.full(len(labels), k) for k, (_, labels) in tests.items()])
    return macro_accuracy_by_case(head, Z, y, client, np.arange(max(tests) + 1), mixes, classes)


def run(
    data,
    part,
    config: str,
    epsilon: float | None,
    share: float,
    seed: int,
    head: str = "FedCGS",
    repeats: int = 1,
) -> dict[str, float]:
    """Macro accuracy (%) over the clients of one run, in each case."""
    classes = np.unique(data.y)

    def budget(k: int | None) -> PrivacyBudget | None:
        """The run's budget; a client's own seeds its noise apart from the others'."""
        if epsilon is None:
            return None
        rs = None if k is None else 1000 * seed + k
        return PrivacyBudget(
            epsilon,
            DELTA,
            clip_norm=1.0,
            shares=dict.fromkeys(MODEL_RELEASES, share),
            random_state=rs,
        )

    parties = {}
    for k in range(part.n_clients):
        train = part.train_index[part.train_client == k]
        test = part.test_index[part.test_client == k]
        X, Xt = data.X[train], data.X[test]
        parties[k] = ClientParty(
            np.tile(l2(X), (repeats, 1)),
            np.tile(data.y[train], repeats),
            head=HEADS[head](seed),
            classes=classes,
            label=k,
            X_test=l2(Xt),
            y_test=data.y[test],
            privacy=budget(k),
        )
    protocol = OneShotProtocol(HEADS[head](seed), privacy=budget(None), **CONFIGS[config])
    result = protocol.run(InProcessTransport(parties), classes)
    tests = {}
    for k, party in parties.items():
        tau = result.tau * result.tau_scales.get(k, 1.0)
        tests[k] = (party.full_map().geodesic(tau).apply(party.X_test), party.y_test)
    return scored(result.head, tests, training_counts(data, part), classes)


def training_counts(data, part) -> dict[int, np.ndarray]:
    """Each client's class counts on its training rows (its label mix)."""
    return training_mixes(data.y[part.train_index], part.train_client, np.unique(data.y))


ABLATION = ("all noisy", "class sums and counts noisy, Gram exact", "Gram noisy, sums exact")


def ablation(data, part, seed: int, epsilon: float = 8.0) -> dict[str, dict[str, float]]:
    """FedCGS without SLOT at ``epsilon``, the noise kept on parts of its one release.

    Not a private mechanism (a part left exact is not private): it says which part of
    the statistics release costs the accuracy.
    """
    classes = np.unique(data.y)
    ledger = PrivacyBudget(epsilon, DELTA).ledger(["statistics", "evaluation"])
    sigma = ledger.noise_scale("statistics", CLASS_STATISTICS_SENSITIVITY)
    X = l2(data.X)
    variants: dict[str, list] = {name: [] for name in ABLATION}
    for k in range(part.n_clients):
        rows = part.train_index[part.train_client == k]
        Xk, yk = X[rows], data.y[rows]
        rng = np.random.default_rng([seed, k])
        noisy = private_class_statistics(Xk, yk, classes, clip_norm=1.0, sigma=sigma, rng=rng)
        exact = ClassStatistics.from_rows(Xk, yk, classes)
        n = int(noisy.moments.n)
        variants[ABLATION[0]].append(noisy)
        # each variant made consistent as a release is (rows of norm 1: units of clip_norm)
        variants[ABLATION[1]].append(
            consistent_statistics(classes, noisy.counts, noisy.sums, Xk.T @ Xk, n=n, scale=1.0)
        )
        variants[ABLATION[2]].append(
            consistent_statistics(
                classes, exact.counts, exact.sums, noisy.moments.gram, n=n, scale=1.0
            )
        )
    out = {}
    tests = {}
    for k in range(part.n_clients):
        test = part.test_index[part.test_client == k]
        tests[k] = (X[test], data.y[test])
    for name, stats in variants.items():
        head = FedCGSClassifier(label_mix="federation").fit_from_statistics(stats, classes)
        out[name] = scored(head, tests, training_counts(data, part), classes)
    return out


MAPS = ("no SLOT", "SLOT, maps from the released statistics", "SLOT, maps from exact summaries")


def maps_ablation(data, part, seed: int, epsilon: float) -> dict[str, dict[str, float]]:
    """FedCGS at ``epsilon``: SLOT's maps from the noisy release or from exact summaries.

    Each client's statistics are its private release (the default split's noise);
    the server aligns them with each client's map, made from the summaries the
    release determines (what a private run does) or, not a mechanism, from the
    clients' exact Ledoit-Wolf summaries: how much of SLOT's private cost is in
    its maps.
    """
    classes = np.unique(data.y)
    ledger = PrivacyBudget(epsilon, DELTA).ledger(["statistics", "evaluation"])
    sigma = ledger.noise_scale("statistics", CLASS_STATISTICS_SENSITIVITY)
    X = l2(data.X)
    X_train, y_train = X[part.train_index], data.y[part.train_index]
    stats = []
    for k in range(part.n_clients):
        rows = part.train_client == k
        rng = np.random.default_rng([seed, k, 7])
        stats.append(
            private_class_statistics(
                X_train[rows], y_train[rows], classes, clip_norm=1.0, sigma=sigma, rng=rng
            )
        )
    slot = {"tau": 0.6, "client_tau": "label-shift", "mean_tau": 1.0, "label_mix": "federation"}
    summaries = [s.summary(s.oas_shrinkage("total"), client=k) for k, s in enumerate(stats)]
    released = SLOTTransformer.from_reference(  # as the server derives them from the release
        BuresBarycenter().fit(summaries).reference_,
        dict(enumerate(summaries)),
        tau_scales=label_shift_distances({k: s.class_counts() for k, s in enumerate(stats)}),
        **slot,
    )
    exact = SLOTTransformer(**slot).fit(X_train, y_train, client=part.train_client)
    out = {}
    for name, transformer in zip(MAPS, (None, released, exact), strict=True):
        maps = None
        if transformer is not None:
            maps = [transformer.client_map(k) for k in range(part.n_clients)]
        head = FedCGSClassifier(label_mix="federation")
        head.fit_from_statistics(stats, classes, maps=maps)
        tests = {}
        for k in range(part.n_clients):
            test = part.test_index[part.test_client == k]
            rows = X[test] if transformer is None else transformer.client_map(k).apply(X[test])
            tests[k] = (rows, data.y[test])
        out[name] = scored(head, tests, training_counts(data, part), classes)
    return out


def maps_table(seeds: int, out: Path | None) -> None:
    """The :func:`maps_ablation` table over seeds, skews and budgets."""
    warnings.filterwarnings("ignore", category=SmallClientWarning)
    data = load_digits_effnet()
    budgets = (4.0, 8.0, 1e4)
    start = time.perf_counter()
    scores: dict = {}
    for seed in range(seeds):
        for alpha in ALPHAS:
            part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
            for epsilon in budgets:
                for name, values in maps_ablation(data, part, seed, epsilon).items():
                    for case, value in values.items():
                        scores.setdefault((case, alpha, name, epsilon), []).append(value)
    rows = [
        (
            (f"alpha = {alpha}" if alpha else "no label skew", name),
            [(alpha, name, e) for e in budgets],
        )
        for alpha in ALPHAS
        for name in MAPS
    ]
    lines = [
        "# FedCGS under privacy: SLOT's maps from the release or from exact summaries",
        "",
        "Embedded digits (256-d, rows L2-normalised, clip_norm = 1, delta = 1e-5), "
        f"{seeds} seeds; macro accuracy (%), mean [min, max]. Each client's class "
        "statistics are its private release (the default split's noise); the server "
        "aligns them with each client's map (SLOT: tau = 0.6, client_tau = label-shift, "
        "mean_tau = 1) made from the summaries the release determines, as a private run "
        "does, or, not a mechanism, from the clients' exact Ledoit-Wolf summaries; the "
        "test rows are mapped alike. Both cases (`skslot_bench.CASES`): each client's test "
        "rows weighted to its own training mix, the head predicting with its own prior "
        "(own mix), and its domain's whole test split (domain, the paper's test). "
        "Generated by `benchmarks/private_federation.py --maps` "
        f"({time.perf_counter() - start:.0f} s, one process).",
        "",
    ]
    lines += table(scores, rows, budgets, ("skew", "configuration"), lambda e: f"eps = {e:g}")
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)


def table(scores, rows, columns, row_label, column_label) -> list[str]:
    """A markdown table of mean [min, max] over seeds, each row in each case (the scores'
    keys start with the case)."""
    header = ["case", *row_label, *[column_label(c) for c in columns]]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for case in CASES:
        for row, cells in rows:
            values = [np.asarray(scores[(case, *key)]) for key in cells]
            shown = [f"{v.mean():.1f} [{v.min():.1f}, {v.max():.1f}]" for v in values]
            lines.append("| " + " | ".join([case, *row, *shown]) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 9.0])
    parser.add_argument("--heads", nargs="+", default=list(HEADS), choices=list(HEADS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--figure", type=Path, default=None, help="accuracy against epsilon")
    parser.add_argument(
        "--quick", action="store_true", help="one seed, epsilon 8 and none, FedCGS (a smoke run)"
    )
    parser.add_argument(
        "--maps",
        action="store_true",
        help="only the FedCGS table of SLOT's maps from the release against exact summaries",
    )
    args = parser.parse_args()
    if args.maps:
        maps_table(args.seeds, args.out)
        return
    epsilons = (8.0, None) if args.quick else EPSILONS
    repeat_grid = REPEATS[:2] if args.quick else REPEATS
    if args.quick:
        args.seeds, args.heads, args.shares = 1, ["FedCGS"], [9.0]
    warnings.filterwarnings("ignore", "random_state fixes the privacy noise")
    warnings.filterwarnings("ignore", category=SmallClientWarning)  # some clients, n < m
    data = load_digits_effnet()
    start = time.perf_counter()
    scores: dict = {}
    n_runs = 0

    def add(key: tuple, values: dict[str, float]) -> None:
        for case, value in values.items():
            scores.setdefault((case, *key), []).append(value)

    for seed in range(args.seeds):
        for alpha in ALPHAS:
            part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
            for head in args.heads:
                for share in args.shares:
                    for epsilon in epsilons:
                        if epsilon is None and share != args.shares[0]:
                            continue  # no budget to split
                        for config in CONFIGS:
                            key = (head, alpha, share if epsilon else None, config, epsilon)
                            add(key, run(data, part, config, epsilon, share, seed, head))
                            n_runs += 1
                if head == "FedCGS":
                    for name, value in ablation(data, part, seed).items():
                        add(("ablation", alpha, name), value)
                if head != "O-FedAvg":  # repeated rows weaken its penalty: another head
                    for repeats in repeat_grid[1:]:
                        key = (head, alpha, "repeats", repeats)
                        add(key, run(data, part, "SLOT", 8.0, 9.0, seed, head, repeats))
                        n_runs += 1
                    largest = (head, alpha, "repeats, no privacy", repeat_grid[-1])
                    add(largest, run(data, part, "SLOT", None, 9.0, seed, head, repeat_grid[-1]))
                    n_runs += 1
                for dim in DIMENSIONS[1:]:
                    projected = replace(data, X=data.X @ digits_projection(data.X.shape[1], dim))
                    for epsilon in (8.0, None):
                        for config in ("no SLOT", "SLOT"):
                            key = (head, alpha, dim, config, epsilon)
                            add(key, run(projected, part, config, epsilon, 9.0, seed, head))
                            n_runs += 1
    elapsed = time.perf_counter() - start
    lines = [
        "# The price of privacy (every release under one budget per client)",
        "",
        "Embedded digits (three domains, one client each, 256-d), rows L2-normalised, "
        f"clip_norm = 1, delta = {DELTA:g}, {args.seeds} seeds; macro accuracy (%) over the "
        "clients' test rows, mean [min, max]. Each client releases its head's statistics "
        "(FedCGS: class sums, counts and Gram matrix; FedPFT: class sums, counts and per-class "
        "Gram matrices; its summary, shrinkage and label-shift counts are derived from them), "
        "or, O-FedAvg (C = 0.1), its summary, its label-shift counts and its local head, "
        "and its test count under one budget. Shares: the weight of each release that "
        "shapes the model against each count's 1 (9 : 1 is the default). 'Centred by the "
        "release': each client's mean moved to the reference by the mean its release "
        "determines (post-processing of the release, private). Each configuration in both "
        "cases (`skslot_bench.CASES`): each client's test rows weighted to its own training "
        "mix, the head predicting with the client's own prior, which it holds and releases "
        "nothing for (own mix), and its domain's whole test split (domain, the paper's "
        "test). Generated by "
        f"benchmarks/private_federation.py ({n_runs} runs, {elapsed:.0f} s on one process, "
        "one BLAS thread).",
        "",
    ]
    for head in args.heads:
        for alpha in ALPHAS:
            skew = f"alpha = {alpha}" if alpha else "no label skew"
            rows = [
                (
                    (config, f"{share:g} : 1"),
                    [(head, alpha, share if e else None, config, e) for e in epsilons],
                )
                for share in args.shares
                for config in CONFIGS
            ]
            lines += [f"## {head}, {skew}", ""]
            lines += table(
                scores,
                rows,
                epsilons,
                ("configuration", "shares"),
                lambda e: f"eps = {e:g}" if e else "no privacy",
            )
            lines.append("")
        lines += [f"## {head}: releasing in a lower dimension (public projection), eps = 8", ""]
        rows = [
            (
                (f"alpha = {alpha}" if alpha else "no label skew", config, privacy),
                [
                    (
                        head,
                        alpha,
                        9.0 if dim == 256 and e else dim if dim != 256 else None,
                        config,
                        e,
                    )
                    for dim in DIMENSIONS
                ],
            )
            for alpha in ALPHAS
            for config in ("no SLOT", "SLOT")
            for privacy, e in (("eps = 8", 8.0), ("no privacy", None))
        ]
        lines += table(
            scores, rows, DIMENSIONS, ("skew", "configuration", "privacy"), lambda d: f"m = {d}"
        )
        lines.append("")
    sized = [h for h in args.heads if h != "O-FedAvg"]
    if sized:
        lines += [
            "## Client sizes: each client's rows repeated k times (SLOT, eps = 8)",
            "",
            "The same information in k times the rows: the released statistics scale by "
            "k, their noise does not, so this is what clients k times larger (rows from the "
            "same distribution) would lose to the noise. Without privacy, repeating rows "
            "changes no class mean or covariance, only the summaries' shrinkage (both "
            "non-private columns shown).",
            "",
        ]
        rows = [
            (
                (head, f"alpha = {alpha}" if alpha else "no label skew"),
                [(head, alpha, 9.0, "SLOT", 8.0)]
                + [(head, alpha, "repeats", k) for k in repeat_grid[1:]]
                + [(head, alpha, None, "SLOT", None)]
                + [(head, alpha, "repeats, no privacy", repeat_grid[-1])],
            )
            for head in sized
            for alpha in ALPHAS
        ]
        lines += table(
            scores,
            rows,
            [*repeat_grid, None, -repeat_grid[-1]],
            ("head", "skew"),
            lambda k: (
                f"k = {k}"
                if k and k > 0
                else "no privacy"
                if k is None
                else f"no privacy, k = {-k}"
            ),
        )
        lines.append("")
    if "FedCGS" in args.heads:
        lines += [
            "## FedCGS: which part of the statistics release costs the accuracy (eps = 8)",
            "",
            "No SLOT, the default split's noise kept on parts of the release only (a part "
            "left exact is not private: this says where the cost is, it is no mechanism).",
            "",
        ]
        rows = [((name,), [("ablation", alpha, name) for alpha in ALPHAS]) for name in ABLATION]
        lines += table(
            scores, rows, ALPHAS, ("noise on",), lambda a: f"alpha = {a}" if a else "no label skew"
        )
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.figure:
        figure(scores, args.heads, epsilons, args.shares[-1], args.figure)


def figure(scores, heads, epsilons, share, path: Path) -> None:
    """Macro accuracy against epsilon, one panel per head and skew; non-private as dashes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = [e for e in epsilons if e is not None]
    fig, axes = plt.subplots(
        len(heads), len(ALPHAS), figsize=(9, 3.2 * len(heads)), squeeze=False, sharex=True
    )
    for i, head in enumerate(heads):
        for j, alpha in enumerate(ALPHAS):
            ax = axes[i][j]
            colors = ("tab:gray", "tab:blue", "tab:red")
            for config, color in zip(CONFIGS, colors, strict=True):
                key = ("domain", head, alpha)
                means = [np.mean(scores[(*key, share, config, e)]) for e in budgets]
                ax.plot(budgets, means, marker="o", color=color, label=config)
                exact = np.mean(scores[(*key, None, config, None)])
                ax.axhline(exact, color=color, linestyle="--", linewidth=0.8)
            ax.set_xscale("log", base=2)
            skew = f"alpha = {alpha}" if alpha else "no label skew"
            ax.set_title(f"{head}, {skew} (domain case)")
            ax.set_ylabel("macro accuracy (%)")
            if i == len(heads) - 1:
                ax.set_xlabel("epsilon per client (dashes: no privacy)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
