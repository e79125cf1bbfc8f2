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

Run: python benchmarks/flip_harm.py [n_seeds] > docs/results/flip_harm.md
(about 2 minutes on one core for 3 seeds; needs ../shared/data).
"""

from __future__ import annotations

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

from skslot.flower import DeploymentConfig, load_client_data
from skslot.protocol import ClientParty, InProcessTransport

HEADS = ("FedCGS", "FedPFT", "O-FedAvg")
FLIPS = attacks.Attack("flipped labels, honest n", HEADS, rows=attacks.flipped_labels)
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


def one_run(head: str, seed: int, present: bool) -> tuple[dict, dict | None]:
    """Each honest client's per-class test accuracy, and the screening's case on the attacker."""
    logging.getLogger("skslot").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        configs, setup = attacks.write_clients(folder, seed)
        configs[attacks.ATTACKER] = attacks.poison(
            folder, FLIPS, seed, setup, configs[attacks.ATTACKER]
        )
        if not present:
            del configs[attacks.ATTACKER]
        config = DeploymentConfig(
            head=head, **attacks.SLOT["domain"], alpha=attacks.ALPHA, seed=seed,
            screen="on" if present else "off", num_clients=len(configs),
        )  # fmt: skip
        head_object = config.make_head()
        parties = {}
        for node, node_config in configs.items():
            data = load_client_data(node_config, config, node)
            parties[node] = Recorded(
                data.X_train, data.y_train, head=head_object, classes=config.class_set,
                label=node, summary_estimator=config.summary_estimator(),
                X_test=data.X_test, y_test=data.y_test,
            )  # fmt: skip
        result = config.protocol().run(InProcessTransport(parties), config.class_set)
    classes = config.class_set
    per_client = {}
    for node in attacks.HONEST:
        party = parties[node]
        held = classes[np.bincount(party.y, minlength=classes.shape[0]) >= HELD]
        accuracy = {c: party.right[party.y_test == c].mean() for c in np.unique(party.y_test)}
        per_client[node] = {
            "held": np.mean([a for c, a in accuracy.items() if c in held]),
            "other": np.mean([a for c, a in accuracy.items() if c not in held]),
            "macro": np.mean(list(accuracy.values())),
        }
    screening = result.report.screening or {}
    return per_client, screening.get("clients", {}).get(attacks.ATTACKER)


def main(n_seeds: int = 3) -> None:
    if not attacks.DIGITS.exists():
        sys.exit(f"{attacks.DIGITS} not found: this benchmark needs ../shared/data")
    start = time.time()
    rows, cases = [], []
    for head in HEADS:
        changes, evidence = [], []
        for seed in range(n_seeds):
            attacked, case = one_run(head, seed, True)
            alone, _ = one_run(head, seed, False)
            changes += [
                [100 * (attacked[n][k] - alone[n][k]) for k in ("held", "other", "macro")]
                for n in attacks.HONEST
            ]
            evidence.append(case)
        rows.append((head, np.mean(changes, axis=0), np.min(changes, axis=0)))
        cases.append((head, evidence))
    wall = time.time() - start
    print("# Where flipped labels hurt, and what the held-out rows show\n")
    print(
        f"`python benchmarks/flip_harm.py {n_seeds}`: the fourth client of docs/results/attacks.md "
        "flips its labels at its honest row count; every class of each domain served (the "
        f'paper\'s test, tau 0.4), in process with `screen = "on"`, seeds 0 to {n_seeds - 1}, '
        f"{wall:.0f} s on one core.  Honest clients' test accuracy (%) with the attacker "
        "minus without it, mean [lowest] over clients and seeds, on the classes each holds "
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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
