"""Where flipped labels hurt, and what the screening's held-out rows can show of it.

The set-up of benchmarks/attacks.py (three honest digits clients, one per
domain, alpha 0.1, the paper's geodesic at tau 0.4, every class of each
domain served; the fourth client holding genuine rows like the median honest
client's), in process (the protocol's one driver) with ``screen = "on"``: the
fourth client flips its labels (``y + 1``) at its honest row count.  For each
head and seed, each honest client's test accuracy with the attacker is
compared with its accuracy in the run without it, on the classes the client
holds (five training rows or more: those its held-out rows can speak for)
and on the others; and the screening's case against the attacker is shown
as the run's screening decided it: the rows of the voters it rests on (the
strongest accuser left out), the rows they found better and worse without
it, the pooled sign bound's p-value and the level it must pass.

Last, what evidence covering every class would show: the screening's rule
(:func:`skslot.defence.screening.screening_evidence`) on the honest clients' paired
counts between the federation's final head with the fourth client and the
one without it, counted on their test rows (every class of their domains,
as a validation set drawn like them), at several rows per voter: how often
the case against the flipping client holds, and against the same client
sending its genuine rows.

Run: python benchmarks/flip_harm.py [n_seeds] > docs/results/flip_harm.md
(about a minute on one core for 3 seeds; needs ../shared/data).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attacks  # the attacks' set-up, written once

from skslot.defence import DefenceBounds
from skslot.defence.screening import screening_evidence
from skslot.protocol import ClientParty, InProcessTransport

HEADS = ("FedCGS", "FedPFT", "O-FedAvg")
FLIPS = attacks.Attack("flipped labels, honest n", HEADS, rows=attacks.flipped_labels)
GENUINE = attacks.Attack("none", HEADS)
CLASSES = np.arange(10)  # the digits' classes
#: Rows per voter of the draws in the last table (``None``: every test row).
BUDGETS = (50, 100, 200, 400, None)
DRAWS = 200
#: Fewest training rows of a class a client holds (as attacks.Setup's classes).
HELD = 5


class Recorded(ClientParty):
    """An honest client that keeps, at the evaluation, which of its test rows the final head
    got right (``right``)."""

    right: np.ndarray | None = None

    def answer(self, stage, request):
        if stage == "evaluation":
            aligned = self.full_map(request.reference).geodesic(request.tau).apply(self.X_test)
            found = request.head.predict(aligned, class_counts=self.class_counts)
            self.right = found == self.y_test
        return super().answer(stage, request)


def one_run(head: str, seed: int, fourth: str, screen: str = "off") -> tuple[dict, dict | None]:
    """Each honest client's test rows, which the final head got right and its training counts;
    and the screening's case on the fourth client (``fourth``: "flipped", "genuine" or
    "absent")."""
    logging.getLogger("skslot").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    attack = FLIPS if fourth == "flipped" else GENUINE
    if fourth == "absent":
        attack = dataclasses.replace(attack, present=False)
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        config, parties, _ = attacks.in_process(
            Path(tmp), attack, head, seed, screen=screen, party=lambda node: Recorded
        )
        result = config.protocol().run(InProcessTransport(parties), config.class_set)
    recorded = {n: (parties[n].y_test, parties[n].right, parties[n].y) for n in attacks.HONEST}
    screening = result.report.screening or {}
    return recorded, screening.get("clients", {}).get(attacks.ATTACKER)


def harm(attacked: dict, alone: dict, classes: np.ndarray) -> list[list[float]]:
    """Per honest client, its test accuracy with the attacker minus without it (points), on
    the classes it holds, on the others and macro over every class."""
    changes = []
    for node in attacks.HONEST:
        y_test, _, y = attacked[node]
        held = classes[np.bincount(y, minlength=classes.shape[0]) >= HELD]
        change = {}
        for c in np.unique(y_test):
            rows = y_test == c
            change[c] = 100 * (attacked[node][1][rows].mean() - alone[node][1][rows].mean())
        changes.append(
            [
                np.mean([d for c, d in change.items() if c in held]),
                np.mean([d for c, d in change.items() if c not in held]),
                np.mean(list(change.values())),
            ]
        )
    return changes


def trusted_cases(with_it: dict, alone: dict, budget: int | None, rng) -> float:
    """How often the screening's rule excludes the fourth client on the honest clients'
    test rows (every class of their domains): the share of :data:`DRAWS` draws of ``budget``
    rows per voter (``None``: every row, once) where the case holds."""
    bounds = DefenceBounds()
    draws = 1 if budget is None else DRAWS
    held = 0
    for _ in range(draws):
        votes = {}
        for node in attacks.HONEST:
            right_with, right_without = with_it[node][1], alone[node][1]
            rows = np.arange(right_with.shape[0])
            if budget is not None:
                rows = rng.choice(rows, min(budget, rows.shape[0]), replace=False)
            better = int(np.sum(right_without[rows] & ~right_with[rows]))
            worse = int(np.sum(right_with[rows] & ~right_without[rows]))
            votes[node] = (better, worse, rows.shape[0])
        held += screening_evidence(
            votes, n_tested=len(attacks.HONEST) + 1,
            significance=bounds.screen_significance, min_gain=bounds.screen_min_gain,
        ).excluded  # fmt: skip
    return held / draws


def main(n_seeds: int = 3) -> None:
    if not attacks.DIGITS.exists():
        sys.exit(f"{attacks.DIGITS} not found: this benchmark needs ../shared/data")
    start = time.time()
    rng = np.random.default_rng(0)
    rows, cases, trusted, sizes = [], [], [], set()
    for head in HEADS:
        changes, evidence = [], []
        shares = {fourth: np.zeros(len(BUDGETS)) for fourth in ("flipped", "genuine")}
        for seed in range(n_seeds):
            screened, case = one_run(head, seed, "flipped", screen="on")
            alone, _ = one_run(head, seed, "absent")
            changes += harm(screened, alone, CLASSES)
            sizes |= {y_test.shape[0] for y_test, _, _ in alone.values()}
            evidence.append(case)
            for fourth in shares:
                with_it, _ = one_run(head, seed, fourth)
                shares[fourth] += [trusted_cases(with_it, alone, b, rng) for b in BUDGETS]
        rows.append((head, np.mean(changes, axis=0), np.min(changes, axis=0)))
        cases.append((head, evidence))
        trusted.append((head, {f: 100 * v / n_seeds for f, v in shares.items()}))
    wall = time.time() - start
    print("# Where flipped labels hurt, and what the held-out rows show\n")
    print(
        f"`python benchmarks/flip_harm.py {n_seeds}`: the fourth client of docs/results/attacks.md "
        "flips its labels at its honest row count; every class of each domain served (the "
        f"paper's test, tau 0.4), in process, seeds 0 to {n_seeds - 1}, {wall:.0f} s on one "
        'core.  Honest clients\' test accuracy (%) with the attacker (`screen = "on"`) minus '
        "without it, mean [lowest] over clients and seeds, on the classes each holds "
        f"({HELD} training rows or more: what its held-out rows speak for), on the others, "
        "and macro over every class.\n"
    )
    print("| head | classes it holds | other classes | every class |")
    print("| --- | --- | --- | --- |")
    for head, mean, low in rows:
        cells = [f"{m:+.1f} [{lo:+.1f}]" for m, lo in zip(mean, low, strict=True)]
        print(f"| {head} | {' | '.join(cells)} |")
    print(
        "\nThe screening's case against the attacker in each seed: the held-out rows of the "
        "voters it rests on (its strongest accuser left out), rows better and worse without "
        "it, the voters' mean gain (each weighing the same), the pooled sign bound's p-value "
        "and the level it must pass (`screen-significance / K`).\n"
    )
    print("| head | seed | rows | better / worse | gain | p-value | level | excluded |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for head, evidence in cases:
        for seed, e in enumerate(evidence):
            if e is None:
                print(f"| {head} | {seed} | not screened | | | | | |")
                continue
            print(
                f"| {head} | {seed} | {e['rows']} | {e['better']} / {e['worse']} | "
                f"{100 * e['gain']:+.1f} | {e['p_value']:.2g} | {e['threshold']:.2g} | "
                f"{'yes' if e['excluded'] else 'no'} |"
            )
    print(
        "\nWhat evidence covering every class would show: the screening's rule "
        "(`skslot.defence.screening.screening_evidence`, the default level and gain) on the honest "
        "clients' paired counts between the final head with the fourth client and the one "
        'without it (`screen = "off"`), counted on their test rows, every class of their '
        f"domains ({min(sizes)} to {max(sizes)} rows each), as a validation set drawn like "
        "them would count them: the share (%) of draws of that many rows per voter "
        f"({DRAWS} per seed, every row once) where the case holds, against the fourth client "
        "flipping its labels and against it sending its genuine rows.\n"
    )
    header = " | ".join(f"{b} rows" if b else "every row" for b in BUDGETS)
    print(f"| head | fourth client | {header} |")
    print(f"| --- | --- |{' --- |' * len(BUDGETS)}")
    for head, share in trusted:
        for fourth, values in share.items():
            print(f"| {head} | {fourth} | {' | '.join(f'{v:.0f}' for v in values)} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
