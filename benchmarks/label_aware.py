"""Label-aware alignment: the paper's summary against the within-class summary.

For each data set, the paper's protocol (4 alphas, seeds, 3 heads, the tau
sweep {0, 0.2, ..., 1}) runs twice through ``skslot.bench.run_benchmark``:
with the clients' summaries of all their rows (``covariance="total"``, the
paper's) and of their class-centred rows (``covariance="within"``).  It prints
one markdown table per data set: macro accuracy (%) without SLOT, at
tau = 0.4, at the best fixed tau, and over the whole sweep, for both kinds.
The records are written next to the table as CSV.

Run: python benchmarks/label_aware.py [n_seeds] [data sets...] > docs/results/label_aware.md
(data sets: digits (the embedded 256-d features), office-caltech10, and
digits-1280 (the full features from ../shared/data, skipped without them);
about 5 CPU minutes per kind for digits, 11 for Office-Caltech10 on 2 cores).
"""

from __future__ import annotations

import csv
import sys
import warnings
from pathlib import Path

from skslot.bench import BenchmarkConfig, BenchmarkWarning, run_benchmark, summarise
from skslot.datasets import load_dataset

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "label_aware"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
KINDS = ("total", "within")
MAIN_TAU = 0.4


def load(name: str):
    if name == "digits-1280":
        return load_dataset(str(SHARED)) if SHARED.exists() else None
    return load_dataset(name)


def table(summaries: dict[str, list[dict]]) -> str:
    lines = [
        "| alpha | head | without SLOT | tau 0.4: total | tau 0.4: within | best total (tau) "
        "| best within (tau) | sweep total (tau 0 / 0.2 / ... / 1) | sweep within |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    within = {(r["alpha"], r["head"]): r for r in summaries["within"]}
    for r in summaries["total"]:
        w = within[(r["alpha"], r["head"])]
        sweep = " / ".join(f"{v:.1f}" for v in r["tau_sweep"].values())
        sweep_w = " / ".join(f"{v:.1f}" for v in w["tau_sweep"].values())
        lines.append(
            f"| {r['alpha']} | {r['head']} | {r['without_slot']:.2f} | "
            f"{r['with_slot']:.2f} ({r['gain']:+.2f}) | {w['with_slot']:.2f} ({w['gain']:+.2f}) | "
            f"{r['best_fixed']:.2f} ({r['best_tau']:g}) | {w['best_fixed']:.2f} "
            f"({w['best_tau']:g}) | {sweep} | {sweep_w} |"
        )
    return "\n".join(lines)


def main(n_seeds: int, names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    print("# Label-aware alignment: the paper's summary and the within-class summary\n")
    print(
        f"`python benchmarks/label_aware.py {n_seeds} {' '.join(names)}`: the paper's protocol "
        f"(one client per domain, 70/30 split per domain, Dirichlet alpha, {n_seeds} seeds), "
        "each head on rows aligned with the paper's summaries (`covariance=\"total\"`) and "
        "with within-class summaries (`covariance=\"within\"`); macro accuracy over domains "
        "(%), mean over seeds; gains against no SLOT in brackets.\n"
    )
    for name in names:
        data = load(name)
        if data is None:
            print(f"## {name}\n\nskipped: {SHARED} is absent\n")
            continue
        summaries, records = {}, []
        for kind in KINDS:
            config = BenchmarkConfig(
                seeds=tuple(range(n_seeds)), auto=False, n_jobs=2, covariance=kind
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BenchmarkWarning)
                run = run_benchmark(data, config, progress=False)
            records += run
            summaries[kind] = summarise(run, MAIN_TAU)
        path = OUT / f"{data.name}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
        print(f"## {data.name} ({data.X.shape[1]} features)\n")
        print(table(summaries))
        print(f"\nRecords: `docs/results/label_aware/{path.name}`.\n")


if __name__ == "__main__":
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    main(seeds, sys.argv[2:] or ["digits", "office-caltech10"])
