"""The screening's rule against looser ones: attacks caught, honest clients excluded.

The screening (:mod:`skslot.defence.screening`) excludes a client when the other
clients' held-out rows do significantly better without it: its strongest
accuser left out (so that one liar's counts cannot make the case), the
others' rows pooled with each voter weighing the same, and the p-value an
exact bound (:func:`skslot.defence.screening.pooled_sign_bound`) below the
family-wise level ``screen_significance`` over the clients tested.  This
study records the paired counts every client sends in the first screening
round and asks what other rules would have decided on the same counts:

* ``current``: the library's rule (:func:`skslot.defence.screening.screening_evidence`)
  at its default level (0.01), and at a stricter and a looser one;
* ``accuser and one more out``: the case must hold without the strongest
  accuser and then without any one more voter, each remaining set's pooled
  rows reaching the exact sign test (a stricter rule: at four clients one
  voter must make the case alone);
* ``any one voter out``: the case must hold without any one voter only (the
  strongest accuser may stay), at 0.001 and 0.01;
* ``accuser out, rest pooled``: the library's rule with the rows pooled
  unweighted and the exact sign test, at 0.01 and 0.05;
* ``pooled``: no voter left out (a strict majority of all voters, the pooled
  gain and sign test), at 0.001.

Each rule is scored three ways: the attacks it catches (the attacker, and
only it, excluded), the honest clients it excludes without an attack (the
attacker sending its genuine rows: four honest clients), and the honest
clients **a liar** could exclude: the counts of the "none" runs, with the
fourth client's counts on each honest client replaced by the most damning
its validation rows allow (every scored row "better without it").

The set-up is that of benchmarks/attacks.py (three digits domains through
the 256-d projection, Dirichlet alpha 0.1, tau 0.4, the attacker holding
genuine rows like the median honest client's), in process (the protocol's
one driver; the same counts as over Flower) with ``screen = "on"``, for the
attacks: labels flipped at its honest count and at nine times its rows
(inside the weight cap); and, where the honest clients hold no training row
of the class the fourth client holds most of, every row labelled that class
at nine times, and O-FedAvg local heads that score only that class (their
norm inside the bound): the full head then sends the others' rows to that
class (absorption, counted against it where the head without it gets them
right).  Such heads place none of their client's own class means in their
classes, so the updates stage refuses them before any screening
(:func:`skslot.defence.consistency.misplaced_class_means`): the table says so.

Run: python benchmarks/screening_rules.py [n_seeds] > docs/results/screening_rules.md
(about 4 minutes on 2 cores for 10 seeds; needs ../shared/data).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from scipy.stats import binomtest
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attacks  # the attacks' set-up, written once

from skslot.defence import DefenceBounds
from skslot.defence.screening import screening_evidence
from skslot.protocol import ClientParty, InProcessTransport

Votes = Mapping[Hashable, Mapping[Hashable, tuple[int, int, int]]]
HEADS = ("FedCGS", "FedPFT", "O-FedAvg")
ATTACKS = {
    "none (genuine rows)": attacks.Attack("none", HEADS),
    "flipped labels, honest n": attacks.Attack("", HEADS, rows=attacks.flipped_labels),
    f"flipped labels, rows x{attacks.COUNT}": attacks.Attack(
        "", HEADS, rows=attacks.repeated(attacks.flipped_labels, attacks.COUNT)
    ),
    f"every row labelled a class only it holds, rows x{attacks.COUNT}": attacks.Attack(
        "", HEADS, rows=attacks.repeated(attacks.one_own_class, attacks.COUNT), own_class=True
    ),
    "local heads scoring only a class only it holds": attacks.Attack(
        "", ("O-FedAvg",), own_class=True
    ),
}


class OneClassHeads(ClientParty):
    """Local heads that score only ``target``, at ``factor`` times their genuine norm."""

    target, factor = 0, attacks.NORM

    def answer(self, stage, request):
        found = super().answer(stage, request)
        if stage != "updates":
            return found
        heads = []
        for head in found:
            intercept = np.zeros_like(head.intercept)
            intercept[self.target] = self.factor * head.norm()
            heads.append(
                dataclasses.replace(head, coef=np.zeros_like(head.coef), intercept=intercept)
            )
        return type(found)(heads)


@dataclasses.dataclass(frozen=True)
class RecordingBounds(DefenceBounds):
    """The default bounds, keeping the counts of every screening round (``rounds``)."""

    rounds: list = dataclasses.field(default_factory=list, compare=False)

    def strongest_case(self, votes):
        self.rounds.append({t: dict(v) for t, v in votes.items()})
        return super().strongest_case(votes)


def first_round_votes(attack: str, head: str, seed: int) -> Votes:
    """The paired counts of the first screening round of one run."""
    logging.getLogger("skslot").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    poisoned = ATTACKS[attack]
    if head not in poisoned.heads:
        return {}
    hostile = attack.startswith("local heads scoring")

    def party(node: int) -> type[ClientParty]:
        return OneClassHeads if hostile and node == attacks.ATTACKER else ClientParty

    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        config, parties, setup = attacks.in_process(Path(tmp), poisoned, head, seed, party=party)
        if hostile:
            parties[attacks.ATTACKER].target = setup.own_class
        protocol = config.protocol()
        protocol.defence = recorder = RecordingBounds(**_fields(config.defence_bounds()))
        protocol.run(InProcessTransport(parties), config.class_set)
    return recorder.rounds[0] if recorder.rounds else {}


def _fields(bounds: DefenceBounds) -> dict:
    return {f.name: getattr(bounds, f.name) for f in dataclasses.fields(bounds)}


# -- the rules ---------------------------------------------------------------------------------


def current(level: float) -> Callable[[Mapping, int], bool]:
    def rule(found: Mapping, n_tested: int) -> bool:
        evidence = screening_evidence(
            found, n_tested=n_tested, significance=level, min_gain=DefenceBounds.screen_min_gain
        )
        return evidence.excluded

    return rule


def _holds(counts: list, n_tested: int, level: float) -> bool:
    """A strict majority of ``counts`` agree, their pooled gain and sign test reach the bar."""
    if not counts:
        return False
    better, worse, rows = (sum(c[i] for c in counts) for i in range(3))
    agreeing = sum(b > w for b, w, _ in counts)
    p = binomtest(better, better + worse, 0.5, alternative="greater").pvalue if better else 1.0
    gain = (better - worse) / rows if rows else 0.0
    smallest = DefenceBounds.screen_min_gain
    return 2 * agreeing > len(counts) and gain >= smallest and p < level / n_tested


def accuser_and_one_more_out(found: Mapping, n_tested: int, level: float = 0.01) -> bool:
    """Without the strongest accuser, the case must hold without any one more voter too."""
    counts = {v: c for v, c in found.items() if c[2]}
    if len(counts) < 3:
        return False
    accuser = max(counts, key=lambda v: counts[v][0] - counts[v][1])
    rest = {v: c for v, c in counts.items() if v != accuser}
    return all(_holds([c for w, c in rest.items() if w != v], n_tested, level) for v in rest)


def any_one_out(found: Mapping, n_tested: int, level: float = 0.001) -> bool:
    """The case must hold without any one voter (two voters at least), the accuser may stay."""
    counts = {v: c for v, c in found.items() if c[2]}
    if len(counts) < 2:
        return False
    return all(_holds([c for w, c in counts.items() if w != v], n_tested, level) for v in counts)


def accuser_out(found: Mapping, n_tested: int, level: float = 0.01) -> bool:
    """The strongest accuser left out, the rest pooled (three voters at least)."""
    counts = {v: c for v, c in found.items() if c[2]}
    if len(counts) < 3:
        return False
    accuser = max(counts, key=lambda v: counts[v][0] - counts[v][1])
    return _holds([c for v, c in counts.items() if v != accuser], n_tested, level)


def pooled(found: Mapping, n_tested: int, level: float = 0.001) -> bool:
    """No voter left out: a strict majority of all voters, their pooled gain and sign test."""
    counts = [c for c in found.values() if c[2]]
    return len(counts) >= 2 and _holds(counts, n_tested, level)


RULES = {
    f"current (level {DefenceBounds.screen_significance:g})": current(
        DefenceBounds.screen_significance
    ),
    "current, level 0.001": current(0.001),
    "current, level 0.05": current(0.05),
    "accuser and one more out, 0.01": accuser_and_one_more_out,
    "any one voter out, 0.001": any_one_out,
    "any one voter out, 0.01": lambda found, n: any_one_out(found, n, 0.01),
    "accuser out, rest pooled, 0.01": accuser_out,
    "accuser out, rest pooled, 0.05": lambda found, n: accuser_out(found, n, 0.05),
    "pooled (no voter left out), 0.001": pooled,
}


def excluded(votes: Votes, rule) -> list:
    return [t for t, found in votes.items() if rule(found, len(votes))]


def lied(votes: Votes, target: Hashable) -> Votes:
    """The attacker's counts on ``target`` made the most damning its scored rows allow."""
    found = dict(votes[target])
    if attacks.ATTACKER in found:
        rows = found[attacks.ATTACKER][2]
        found[attacks.ATTACKER] = (rows, 0, rows)
    return {**votes, target: found}


def main(n_seeds: int = 5) -> None:
    if not attacks.DIGITS.exists():
        sys.exit(f"{attacks.DIGITS} not found: this study needs ../shared/data")
    jobs = [(a, h, s) for a in ATTACKS for h in ATTACKS[a].heads for s in range(n_seeds)]
    start = time.perf_counter()
    found = Parallel(n_jobs=2)(delayed(first_round_votes)(*job) for job in jobs)
    wall = time.perf_counter() - start
    votes = dict(zip(jobs, found, strict=True))
    seeds = range(n_seeds)
    print("# The screening's rule against looser ones\n")
    print(
        f"`python benchmarks/screening_rules.py {n_seeds}`: the counts of the first screening "
        f"round of {len(jobs)} in-process runs (the set-up of docs/results/attacks.md: three "
        'honest digits clients and a fourth, alpha 0.1, tau 0.4, `screen = "on"`, seeds 0 to '
        f"{n_seeds - 1}), decided by each rule; {wall:.0f} s wall on 2 workers. *Caught*: runs "
        "in which the attacker, and only it, is a case; *honest excluded*: runs in which an "
        "honest client is a case (without an attack: the fourth client sends its genuine rows; "
        "an attacker refused before the screening, at the updates stage, is no case there); "
        "*a liar excludes*: runs of no attack in which the fourth client, claiming every row "
        "it scores on an honest client better without it, makes that client a case.\n"
    )
    names = list(RULES)
    print("| runs | " + " | ".join(names) + " |")
    print("|" + " --- |" * (len(names) + 1))
    for attack in list(ATTACKS)[1:]:
        for head in ATTACKS[attack].heads:
            cells = [
                sum(excluded(votes[attack, head, s], rule) == [attacks.ATTACKER] for s in seeds)
                for rule in RULES.values()
            ]
            before = sum(attacks.ATTACKER not in votes[attack, head, s] for s in seeds)
            refused = f", refused before the screening in {before} / {n_seeds}" if before else ""
            print(
                f"| caught: {attack} ({head}{refused}) | "
                + " | ".join(f"{c} / {n_seeds}" for c in cells)
                + " |"
            )
    none = {h: [votes[next(iter(ATTACKS)), h, s] for s in seeds] for h in HEADS}
    for head, runs in none.items():
        wrong = [sum(bool(excluded(v, rule)) for v in runs) for rule in RULES.values()]
        print(
            f"| honest client excluded, no attack ({head}) | "
            + " | ".join(f"{c} / {len(runs)}" for c in wrong)
            + " |"
        )
    every = [v for runs in none.values() for v in runs]
    by_liar = [
        sum(any(t in excluded(lied(v, t), rule) for t in attacks.HONEST if t in v) for v in every)
        for rule in RULES.values()
    ]
    print(
        "| a liar excludes an honest client | "
        + " | ".join(f"{c} / {len(every)}" for c in by_liar)
        + " |"
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
