"""The price of privacy: macro accuracy against each client's budget epsilon, end to end.

Each run is the real protocol in process (``OneShotProtocol`` over
``InProcessTransport``, one ``ClientParty`` per client holding its own
``PrivacyBudget``): every value a client sends is a release under its one
budget (FedCGS: its statistics, from which the server derives its summary and
its label-shift counts, and its test count), delta = 1e-5.  Rows are
L2-normalised first (a public per-row step), so ``clip_norm = 1`` clips
nothing.  Embedded digits (three domains, one client each, 256-d public
projection), Dirichlet alpha = 0.1 and no label skew, seeds 0-4.

Configurations, each beside the others on the same partition:

* ``no SLOT``: tau = 0;
* ``centred alone``: each client centres its own rows before the
  L2-normalisation (a local step, no release), tau = 0;
* ``SLOT``: the recommended configuration (tau = 0.6, client_tau =
  "label-shift", mean_tau = 1).

The accuracy is measured on each client's test rows with its own map (the
clients' reported counts are noisy releases).  Two splits of the budget:
equal shares, and nine tenths to the statistics (``--shares 9``).

Usage::

    python benchmarks/private_federation.py [--seeds 5] [--shares 1 9]
        [--out docs/results/private_federation.md]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from skslot.accounting import PrivacyBudget
from skslot.datasets import dirichlet_partition, load_digits_effnet
from skslot.heads import FedCGSClassifier
from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, None)
ALPHAS = (0.1, None)
DELTA = 1e-5
CONFIGS = {
    "no SLOT": {"tau": 0.0},
    "centred alone": {"tau": 0.0},
    "SLOT": {"tau": 0.6, "client_tau": "label-shift", "mean_tau": 1.0},
}


def l2(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def run(data, part, config: str, epsilon: float | None, share: float, seed: int) -> float:
    """Macro accuracy (%) over the clients of one run."""
    classes = np.unique(data.y)
    budget = None
    if epsilon is not None:
        budget = PrivacyBudget(
            epsilon, DELTA, clip_norm=1.0, shares={"statistics": share}, random_state=seed
        )
    parties = {}
    for k in range(part.n_clients):
        train = part.train_index[part.train_client == k]
        test = part.test_index[part.test_client == k]
        X, Xt = data.X[train], data.X[test]
        if config == "centred alone":
            mean = X.mean(axis=0)
            X, Xt = X - mean, Xt - mean
        parties[k] = ClientParty(
            l2(X),
            data.y[train],
            head=FedCGSClassifier(),
            classes=classes,
            label=k,
            X_test=l2(Xt),
            y_test=data.y[test],
            privacy=budget,
        )
    protocol = OneShotProtocol(FedCGSClassifier(), privacy=budget, **CONFIGS[config])
    result = protocol.run(InProcessTransport(parties), classes)
    accuracies = []
    for k, party in parties.items():
        tau = result.tau * result.tau_scales.get(k, 1.0)
        rows = party.full_map().geodesic(tau).apply(party.X_test)
        accuracies.append(np.mean(result.head.predict(rows) == party.y_test))
    return 100.0 * float(np.mean(accuracies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 9.0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", "random_state fixes the privacy noise")
    data = load_digits_effnet()
    start = time.perf_counter()
    scores: dict = {}
    for seed in range(args.seeds):
        for alpha in ALPHAS:
            part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
            for share in args.shares:
                for epsilon in EPSILONS:
                    if epsilon is None and share != args.shares[0]:
                        continue  # no budget to split
                    for config in CONFIGS:
                        key = (alpha, share if epsilon else None, config, epsilon)
                        scores.setdefault(key, []).append(
                            run(data, part, config, epsilon, share, seed)
                        )
    elapsed = time.perf_counter() - start
    lines = [
        "# The price of privacy (FedCGS, every release under one budget per client)",
        "",
        "Embedded digits (three domains, one client each, 256-d), rows L2-normalised, "
        f"clip_norm = 1, delta = {DELTA:g}, {args.seeds} seeds; macro accuracy (%) over the "
        "clients' test rows, mean [min, max]; each client releases its FedCGS statistics "
        "(the summary, its shrinkage and the label-shift counts are derived from them) and its "
        "test count under one budget. Shares: the statistics' weight against the evaluation "
        "count's 1. Generated by benchmarks/private_federation.py "
        f"({len(scores) * args.seeds} runs, {elapsed:.0f} s on one process).",
        "",
    ]
    for alpha in ALPHAS:
        skew = f"alpha = {alpha}" if alpha else "no label skew"
        header = ["configuration", "shares"] + [
            f"eps = {e:g}" if e else "no privacy" for e in EPSILONS
        ]
        lines += [
            f"## {skew}",
            "",
            "| " + " | ".join(header) + " |",
            "| " + " | ".join("---" for _ in header) + " |",
        ]
        for share in args.shares:
            for config in CONFIGS:
                cells = [config, f"{share:g} : 1"]
                for epsilon in EPSILONS:
                    values = np.asarray(
                        scores[(alpha, share if epsilon else None, config, epsilon)]
                    )
                    cells.append(f"{values.mean():.1f} [{values.min():.1f}, {values.max():.1f}]")
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
