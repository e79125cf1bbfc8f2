"""The weight cap against the attacks that take weight: is a tighter cap than the default worth it?

A client inside every bound takes a weight (in the barycenter and the head) up
to ``max-weight-ratio`` times the median client's count.  This study runs the
attacks of benchmarks/attacks.py that lean on that weight, or on the
reference it shapes (labels flipped at nine times the rows, rows scaled to
ninety times their variance at nine times the rows, the summary's variance x90
at nine times the rows), and those that do not (the same at the honest row
count, as a control), with the default cap and with tighter ones, every head,
both cases, with the defence's default otherwise (bounds and the screening),
on the set-up of that study (three honest digits clients and a fourth,
Dirichlet alpha 0.1, the Flower apps on a local grid).

Each cell: the honest clients' macro accuracy (%, mean over the seeds) and its
gap to the lower of the same federation's runs with the fourth client genuine
and without it, at that cap (the defence's target: within 5 points, or the
attacker rejected in every seed, which the cell then says).

Run: python benchmarks/weight_caps.py [n_seeds] > docs/results/weight_caps.md
(about 8 minutes on 2 cores for 3 seeds; needs ../shared/data).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attacks  # the attacks' set-up, written once
from skslot_bench import CASE_TITLES, CASES

#: The caps compared, the default first.
CAPS = (attacks.BOUNDS.max_weight_ratio, 3.0, 2.0)
GENUINE = "none (the attacker sends its genuine rows; K = 4)"
ABSENT = "none, attacker absent (K = 4)"
#: The attacks of benchmarks/attacks.py compared, by name (the baselines first).
NAMES = (
    GENUINE,
    ABSENT,
    "flipped labels, honest n",
    f"flipped labels, rows x{attacks.COUNT} (inside the weight cap)",
    f"rows scaled, variance x{attacks.VARIANCE:g} (consistent)",
    f"summary's variance x{attacks.HIGH_VARIANCE:g} (statistics genuine), rows x{attacks.COUNT}: "
    "through the reference",
    f"rows scaled, variance x{attacks.HIGH_VARIANCE:g}, rows x{attacks.COUNT} (consistent)",
)


def chosen() -> list[attacks.Attack]:
    """The attacks of :data:`NAMES`, in that order."""
    by_name = {a.name: a for a in attacks.ATTACKS}
    return [by_name[name] for name in NAMES]


def one_run(attack: attacks.Attack, head: str, case: str, seed: int, cap: float) -> dict:
    """One run of ``attack`` with the defence's default at weight cap ``cap``; its record
    (:func:`attacks.one_run`'s) with the cap."""
    capped = dataclasses.replace(attack, settings=(*attack.settings, ("max_weight_ratio", cap)))
    return {**attacks.one_run(capped, head, "screened", seed, case), "cap": cap}


def cell(records: list[dict], name: str, head: str, case: str, cap: float) -> str:
    """A table cell: mean honest accuracy and its gap to the lower baseline, or "rejected"."""

    def runs(which: str) -> list[dict]:
        return [
            r
            for r in records
            if (r["attack"], r["head"], r["case"], r["cap"]) == (which, head, case, cap)
        ]

    found = runs(name)
    mean = 100 * np.mean([r["macro"] for r in found])
    if name in (GENUINE, ABSENT):
        return f"{mean:.1f}"
    if all(r["fate"].startswith("rejected") for r in found):
        return f"{mean:.1f}, rejected"
    bar = min(100 * np.mean([r["macro"] for r in runs(w)]) for w in (GENUINE, ABSENT))
    out = sum(r["honest_out"] for r in found)
    gap = f"{mean - bar:+.1f}"
    shown = gap if mean >= bar - 5 else f"**{gap}**"
    return f"{mean:.1f} ({shown})" + (f", {out} honest out" if out else "")


def main(n_seeds: int = 3) -> None:
    if not attacks.DIGITS.exists():
        sys.exit(f"{attacks.DIGITS} not found: this benchmark needs ../shared/data")
    jobs = [
        (attack, head, case, seed, cap)
        for cap in CAPS
        for attack in chosen()
        for head in attack.heads
        for case in CASES
        for seed in range(n_seeds)
    ]
    start = time.time()
    records = Parallel(n_jobs=2)(delayed(one_run)(*job) for job in jobs)
    wall = time.time() - start
    print("# The weight cap against the attacks that take weight\n")
    print(
        f"`python benchmarks/weight_caps.py {n_seeds}`: {len(records)} runs of "
        "docs/results/attacks.md's set-up (three honest digits clients and a fourth, alpha "
        f"{attacks.ALPHA}, K = 4) with the defence's default, seeds 0 to {n_seeds - 1}, at "
        f"`max-weight-ratio` {', '.join(f'{c:g}' for c in CAPS)} (the default first); "
        f"{wall:.0f} s wall on 2 workers, 1 BLAS thread each.  Honest clients' macro accuracy "
        "(%), mean over the seeds, and in brackets its gap to the lower of the fourth client "
        "genuine and absent at the same cap (bold: more than 5 points below); *rejected*: the "
        "attacker rejected in every seed.\n"
    )
    for case in CASES:
        print(f"## {CASE_TITLES[case]}\n")
        print(f"| attack | head | {' | '.join(f'cap {c:g}' for c in CAPS)} |")
        print(f"| --- | --- |{' --- |' * len(CAPS)}")
        for attack in chosen():
            for head in attack.heads:
                cells = [cell(records, attack.name, head, case, cap) for cap in CAPS]
                print(f"| {attack.name} | {head} | {' | '.join(cells)} |")
        print()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
