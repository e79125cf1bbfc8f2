"""Label-aware alignment: the paper's summary, the within-class summary, the label-shift rule.

For each data set, the paper's protocol (4 alphas, seeds, 3 heads, the tau
sweep {0, 0.2, ..., 1}) runs through ``skslot.bench.run_benchmark`` three
ways: with the clients' summaries of all their rows (``covariance="total"``,
the paper's), of their class-centred rows (``covariance="within"``), and
with the paper's summaries but each client moving ``tau`` times the
total-variation distance between its class proportions and the
federation's (``client_tau="label-shift"``; at ``tau = 1`` the rule itself),
the last also with the federation's choice of ``tau`` by validation.  It
prints one markdown table per data set: macro accuracy (%) without SLOT, at
tau = 0.4, of the rule, of the federated choice, at the best fixed tau, and
over the whole sweep.  The records are written next to the table as CSV; a
kind whose records for these seeds are already there is read back, not run
again (``--fresh`` runs everything).

Run: python benchmarks/label_aware.py [n_seeds] [--fresh] [data sets...]
    > docs/results/label_aware.md
(data sets: digits (the embedded 256-d features), office-caltech10, and
digits-1280 (the full features from ../shared/data, skipped without them);
about 5 CPU minutes per kind for digits, 11 for Office-Caltech10 on 2 cores,
twice that for the label-shift kind with its federated choice).
"""

from __future__ import annotations

import csv
import sys
import warnings
from pathlib import Path

import numpy as np

from skslot.bench import BenchmarkConfig, BenchmarkWarning, run_benchmark, summarise
from skslot.datasets import dirichlet_partition, load_dataset
from skslot.label_shift import class_counts, label_shift_distances

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "label_aware"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
#: name -> (BenchmarkConfig settings, whether the federated choice of tau runs too)
KINDS = {
    "total": ({"covariance": "total"}, False),
    "within": ({"covariance": "within"}, False),
    "label-shift": ({"covariance": "total", "client_tau": "label-shift"}, True),
}
MAIN_TAU = 0.4
INTEGERS = ("seed", "n_train", "n_test", "n_clients", "n_empty_clients", "barycenter_iterations")


def load(name: str):
    if name == "digits-1280":
        return load_dataset(str(SHARED)) if SHARED.exists() else None
    return load_dataset(name)


def kind_of(record: dict) -> str:
    if record.get("client_tau", "uniform") == "label-shift":
        return "label-shift"
    return record["covariance"]


def read_records(path: Path) -> list[dict]:
    """Records written by an earlier run, with their numbers as numbers."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        records = list(csv.DictReader(f))
    for r in records:
        r["alpha"] = r["alpha"] if r["alpha"] == "none" else float(r["alpha"])
        r["tau"], r["accuracy"] = float(r["tau"]), float(r["accuracy"])
        for key in INTEGERS:
            r[key] = int(r[key])
    return records


def distances(data, n_seeds: int) -> str:
    """The label-shift factors d_k of the clients, per alpha, over the seeds' partitions."""
    classes = np.unique(data.y)
    lines = ["| alpha | d_k: min / median / max over clients and seeds |", "| --- | --- |"]
    for alpha in (0.1, 0.05, 0.01, None):
        found = []
        for seed in range(n_seeds):
            part = dirichlet_partition(
                data.y, data.domain, alpha=alpha, clients_per_domain=1, random_state=seed
            )
            keep = ~np.isin(part.train_client, part.empty_clients)
            client, y = part.train_client[keep], data.y[part.train_index[keep]]
            counts = {k: class_counts(y[client == k], classes) for k in np.unique(client)}
            found += list(label_shift_distances(counts).values())
        shown = "none" if alpha is None else alpha
        lines.append(f"| {shown} | {min(found):.2f} / {np.median(found):.2f} / {max(found):.2f} |")
    return "\n".join(lines)


def cell(r: dict, value: float) -> str:
    return f"{value:.2f} ({value - r['without_slot']:+.2f})"


def table(summaries: dict[str, list[dict]]) -> str:
    lines = [
        "| alpha | head | without SLOT | tau 0.4: total | tau 0.4: within | label-shift rule "
        "| label-shift, federated choice (taus) | best total (tau) | best within (tau) "
        "| sweep total (tau 0 / 0.2 / ... / 1) | sweep within | sweep label-shift |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_kind = {k: {(r["alpha"], r["head"]): r for r in rows} for k, rows in summaries.items()}
    for r in summaries["total"]:
        key = (r["alpha"], r["head"])
        w, ls = by_kind["within"][key], by_kind["label-shift"][key]

        def sweep(row: dict) -> str:
            return " / ".join(f"{v:.1f}" for v in row["tau_sweep"].values())

        chosen = ",".join(f"{t:g}" for t in ls.get("auto_taus", []))
        auto = f"{cell(r, ls['auto'])} ({chosen})" if "auto" in ls else "n/a"
        lines.append(
            f"| {r['alpha']} | {r['head']} | {r['without_slot']:.2f} | "
            f"{cell(r, r['with_slot'])} | {cell(r, w['with_slot'])} | "
            f"{cell(r, ls['tau_sweep'][1.0])} | {auto} | "
            f"{r['best_fixed']:.2f} ({r['best_tau']:g}) | {w['best_fixed']:.2f} "
            f"({w['best_tau']:g}) | {sweep(r)} | {sweep(w)} | {sweep(ls)} |"
        )
    return "\n".join(lines)


def main(n_seeds: int, names: list[str], fresh: bool = False) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    print(
        "# Label-aware alignment: the paper's summary, the within-class summary, "
        "the label-shift rule\n"
    )
    print(
        f"`python benchmarks/label_aware.py {n_seeds} {' '.join(names)}`: the paper's protocol "
        f"(one client per domain, 70/30 split per domain, Dirichlet alpha, {n_seeds} seeds), "
        'each head on rows aligned with the paper\'s summaries (`covariance="total"`), '
        'with within-class summaries (`covariance="within"`), and with the paper\'s summaries '
        "where each client moves tau times the total-variation distance between its class "
        'proportions and the federation\'s (`client_tau="label-shift"`; the *rule* is '
        "tau = 1, the *federated choice* picks tau by the clients' validation); macro accuracy "
        "over domains (%), mean over seeds; gains against no SLOT in brackets.\n"
    )
    seeds = set(range(n_seeds))
    for name in names:
        data = load(name)
        if data is None:
            print(f"## {name}\n\nskipped: {SHARED} is absent\n")
            continue
        path = OUT / f"{data.name}.csv"
        earlier = [] if fresh else read_records(path)
        summaries, records = {}, []
        for kind, (settings, auto) in KINDS.items():
            run = [r for r in earlier if kind_of(r) == kind]
            if {r["seed"] for r in run} != seeds:
                config = BenchmarkConfig(
                    seeds=tuple(range(n_seeds)), auto=auto, n_jobs=2, **settings
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", BenchmarkWarning)
                    run = run_benchmark(data, config, progress=False)
            records += run
            summaries[kind] = summarise(run, MAIN_TAU)
        fieldnames = list(dict.fromkeys(key for r in records for key in r))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fieldnames, restval="uniform")
            writer.writeheader()
            writer.writerows(records)
        print(f"## {data.name} ({data.X.shape[1]} features)\n")
        print(table(summaries))
        print("\nEach client's label-shift factor (the rule's tau_k at tau = 1):\n")
        print(distances(data, n_seeds))
        print(f"\nRecords: `docs/results/label_aware/{path.name}`.\n")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    fresh = "--fresh" in arguments
    arguments = [a for a in arguments if a != "--fresh"]
    seeds = int(arguments[0]) if arguments else 5
    main(seeds, arguments[1:] or ["digits", "office-caltech10"], fresh)
