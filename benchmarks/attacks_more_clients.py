"""One hostile client among five and among eight: the screening with more voters.

The federation of ``benchmarks/attacks.py`` (digits through the public 256-d
projection, Dirichlet alpha = 0.1, the real ServerApp and ClientApp in one
process), dealt with two clients per domain and four of them honest (K = 5),
or three per domain and seven honest (K = 8); honest clients of fewer than
``attacks.FEWEST_ROWS`` training rows take no part.  The attacker is built as
there (the median client's class counts, genuine rows the partition left
unused).  The attacks are those the screening has to catch at four clients
and does not always (flipped labels at the honest row count and inside the
weight cap, rows scaled inside the variance bound, local heads scaled inside
the norm bound, framing votes; flipped labels in a private federation), each
three ways (the default defence, its bounds alone, none) in both cases, with
the same verdict as ``attacks.py``.  The same script's ``honest_nodes`` and
``report`` make the table.

Run: python benchmarks/attacks_more_clients.py [n_seeds] > docs/results/attacks_more_clients.md
(about 15 minutes on 2 cores for 3 seeds; needs ../shared/data).
"""

from __future__ import annotations

import sys
from pathlib import Path

from attacks import (
    ALL,
    BOTH,
    COUNT,
    DIGITS,
    NORM,
    PRIVATE,
    VARIANCE,
    Attack,
    baselines,
    flipped_labels,
    framing_votes,
    honest_nodes,
    repeated,
    report,
    run_attacks,
    scaled_heads,
    scaled_rows,
)
from skslot_bench import CASES

#: Every run's record, beside the table.
RECORDS = Path(__file__).resolve().parents[1] / "docs" / "results" / "attacks_more_clients.json"
#: (clients in all, clients per domain): the honest clients are the first K - 1 nodes.
FEDERATIONS = ((5, 2), (8, 3))


def attacks_at(k: int, per_domain: int) -> list[Attack]:
    """The baselines and the attacks of one federation of ``k`` clients."""
    honest = honest_nodes(per_domain)[: k - 1]
    at = {"honest": honest, "per_domain": per_domain}
    private = baselines(
        honest, heads=("O-FedAvg",), settings=PRIVATE,
        what=f"{per_domain} per domain, a private federation (epsilon 16)",
    )  # fmt: skip
    return [
        *(
            Attack(a.name, a.heads, present=a.present, settings=a.settings, **at)
            for a in [*baselines(honest, what=f"{per_domain} per domain"), *private]
        ),
        Attack(f"flipped labels, honest n, K = {k}", ALL, rows=flipped_labels, **at),
        Attack(
            f"flipped labels, rows x{COUNT} (inside the weight cap), K = {k}",
            ALL,
            rows=repeated(flipped_labels, COUNT),
            **at,
        ),
        Attack(
            f"flipped labels, rows x{COUNT}, private (epsilon 16), K = {k}",
            ("O-FedAvg",),
            rows=repeated(flipped_labels, COUNT),
            settings=PRIVATE,
            **at,
        ),
        Attack(
            f"rows scaled, variance x{VARIANCE:g} (consistent), K = {k}",
            BOTH,
            rows=scaled_rows(VARIANCE),
            **at,
        ),
        Attack(
            f"coefficients x{NORM:g} (inside the norm bound), K = {k}",
            ("O-FedAvg",),
            lambda _: scaled_heads(NORM),
            **at,
        ),
        Attack(
            f'vote manipulation: every scored row "better without" each honest client, K = {k}',
            ALL,
            lambda _: framing_votes,
            **at,
        ),
    ]


def main(n_seeds: int = 3) -> None:
    if not DIGITS.exists():
        sys.exit(f"{DIGITS} not found: this benchmark needs ../shared/data")
    federations = {k: attacks_at(k, per_domain) for k, per_domain in FEDERATIONS}
    found, wall = run_attacks(
        [a for attacks in federations.values() for a in attacks], n_seeds, RECORDS
    )
    print("# One hostile client among five and among eight (digits, 256-d, alpha 0.1)\n")
    print(
        "The digits dealt two clients per domain (four honest, K = 5) or three (seven "
        "honest, K = 8), and one attacker, in both cases (`skslot_bench.CASES`), "
        f"{len(found)} runs, {wall:.0f} s wall on 2 workers, 1 BLAS thread each "
        "(benchmarks/attacks_more_clients.py; the columns as in docs/results/attacks.md).\n"
    )
    for k, attacks in federations.items():
        names = {a.name for a in attacks}
        for case in CASES:
            print(f"## K = {k}\n")
            report([r for r in found if r["case"] == case and r["attack"] in names], case,
                   n_seeds, attacks)  # fmt: skip


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
