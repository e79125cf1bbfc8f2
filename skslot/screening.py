"""The screening's decision: which client the others' paired counts exclude.

For each client ``j``, every other client ``i`` compares on its held-out
rows the head of all clients ``H`` with the head without ``j``, ``H_{-j}``
(the ``screening`` stage, :mod:`skslot.protocol.stages.screening`).  Both
are scored on ``i``'s rows of the classes ``S_j`` some client other than
``j`` holds (:func:`comparable_classes`); ``H_{-j}`` predicts among ``S_j``
(a class only ``j`` holds would otherwise make it look better for having one
class fewer to confuse), while ``H`` predicts among every class the
federation holds, as the final head does: a row ``H`` sends to a class only
``j`` holds is an error ``j`` caused (absorption), counted against it even
where ``H_{-j}`` errs too.
``i`` sends three counts.  ``j`` is excluded (:func:`screening_evidence`)
when, with its strongest accuser left out and then any one more voter (so
that neither one liar's counts nor the vote of one more voter can make the
case), over every remaining set of voters

- a strict majority found ``H_{-j}`` better (more rows only it gets right);
- pooled, ``H_{-j}`` gets right at least ``min_gain`` of the scored rows
  more than ``H`` does; and
- the exact one-sided sign test (McNemar's) on the pooled discordant rows
  rejects "no difference" at ``significance / K``, Bonferroni over the ``K``
  clients tested.

An exclusion therefore needs at least :data:`MIN_VOTERS` voters (four
clients).  One client at most is excluded per comparison, the strongest
case (:func:`strongest_case`).  Measured: docs/results/screening.md and
docs/results/attacks.md; what the screening cannot catch: docs/security.md.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest

__all__ = [
    "MIN_VOTERS",
    "SCREENING",
    "ScreeningEvidence",
    "comparable_classes",
    "screening_evidence",
    "strongest_case",
]

#: The ``screen`` settings: wherever there is a defence, the same but required, never.
SCREENING = ("auto", "on", "off")
#: Fewest other clients whose counts can exclude a client: with the strongest accuser
#: and one more voter left out, one voter's case must remain in every set.
MIN_VOTERS = 3


def comparable_classes(class_counts: Sequence[np.ndarray]) -> np.ndarray:
    """For each client ``j``, the classes some other client holds rows of.

    What both heads, with and without ``j``, can predict: the comparisons
    predict among, and score each voter's rows of, these classes only.  A
    class only ``j`` holds would be missing from the head without ``j``, which
    would then look better on the others' rows merely for having one class
    fewer to confuse them with.  A client's own declared counts never shape
    its comparisons.

    Parameters
    ----------
    class_counts : sequence of ndarray of shape (C,)
        Each client's rows per class.

    Returns
    -------
    masks : ndarray of bool, shape (K, C)
        ``masks[j, c]``: a client other than ``j`` holds class ``c``; a row
        with fewer than two such classes is empty (nothing to compare).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.screening import comparable_classes
    >>> counts = [np.array([5, 0, 2]), np.array([3, 4, 0]), np.array([1, 1, 0])]
    >>> comparable_classes(counts).astype(int)
    array([[1, 1, 0],
           [1, 1, 1],
           [1, 1, 1]])
    """
    held = np.array([np.asarray(c, dtype=np.float64) for c in class_counts]) > 0
    by_others = held.sum(axis=0) - held > 0
    return by_others & (by_others.sum(axis=1, keepdims=True) >= 2)


@dataclass(frozen=True)
class ScreeningEvidence:
    """What the other clients' validation says of one client's contribution.

    The case must hold without the client's strongest accuser and without
    any one more voter: the counts shown are those of the voters less the
    accuser and less the one whose absence weakens the case most
    (``discounted``), so that no single voter's counts, an attacker's among
    them, can make the case, nor tip it by agreeing.

    Attributes
    ----------
    voters : int
        Other clients that scored rows for it (none: it cannot be screened).
    accuser : object or None
        The strongest accuser (most rows gained without it, net), left out
        of every case.
    discounted : object or None
        The voter left out, with the accuser, of the weakest case.
    agreeing : int
        Remaining voters whose rows the head without it got right more often.
    better, worse, rows : int
        Pooled over the remaining voters: rows only the head without it got
        right, rows only the head with it got right, rows scored.
    p_value : float
        Exact one-sided sign test of ``better`` against ``worse``.
    threshold : float
        The level ``p_value`` is compared to (``significance / K``).
    excluded : bool
        Whether the case holds in every set of voters: the client is excluded.
    """

    voters: int
    accuser: Hashable | None
    discounted: Hashable | None
    agreeing: int
    better: int
    worse: int
    rows: int
    p_value: float
    threshold: float
    excluded: bool

    @property
    def remaining(self) -> int:
        """Voters the weakest case rests on (all but the accuser and the discounted)."""
        return max(self.voters - (self.accuser is not None) - (self.discounted is not None), 0)

    @property
    def gain(self) -> float:
        """Accuracy the other clients' rows gain without it (a fraction of the rows)."""
        return (self.better - self.worse) / self.rows if self.rows else 0.0

    def describe(self) -> dict:
        """The evidence as a dict of plain values, for the report.

        Returns
        -------
        dict
            The fields and :attr:`gain`, the floats rounded to six digits.
        """
        return {
            "voters": self.voters,
            "accuser": self.accuser,
            "discounted": self.discounted,
            "agreeing": self.agreeing,
            "better": self.better,
            "worse": self.worse,
            "rows": self.rows,
            "gain": round(self.gain, 6),
            "p_value": float(f"{self.p_value:.6g}"),
            "threshold": float(f"{self.threshold:.6g}"),
            "excluded": self.excluded,
        }

    def reason(self) -> str:
        """Why it was excluded, with the evidence.

        Returns
        -------
        str
        """
        return (
            f"its contribution hurts the others: without it, {self.agreeing} of "
            f"{self.remaining} other clients' held-out rows do better even leaving out its "
            f"strongest accuser and any one more voter, {100 * self.gain:+.1f} points on "
            f"{self.rows} rows ({self.better} rows gained, {self.worse} lost; sign test "
            f"p = {self.p_value:.2g} < {self.threshold:.2g})"
        )


def screening_evidence(
    votes: Mapping[Hashable, tuple[int, int, int]],
    *,
    n_tested: int,
    significance: float,
    min_gain: float,
) -> ScreeningEvidence:
    """Whether the other clients' paired counts exclude one client.

    The strongest accuser (the voter with most rows gained without the
    client, net) is left out; then, for each other voter ``v`` in turn, the
    case is weighed over the voters left: a strict majority of them found
    the head without the client better, their pooled gain is at least
    ``min_gain``, and the exact one-sided sign test on their pooled
    discordant rows gives ``p < significance / n_tested``.  The client is
    excluded when the case holds without every ``v``, so that one voter's
    counts, however large, can neither make the case nor tip it by agreeing;
    at least :data:`MIN_VOTERS` voters must have scored rows.  The evidence
    returned is the weakest of these cases.

    Parameters
    ----------
    votes : mapping of voter to (better, worse, rows)
        Each other client's counts on it (:class:`~skslot.protocol.stages.screening.PairedCounts`).
    n_tested : int
        Clients tested in the run (the Bonferroni factor).
    significance : float
        Family-wise level of the sign test.
    min_gain : float
        Smallest pooled accuracy gain (a fraction of the rows) that excludes.

    Returns
    -------
    ScreeningEvidence
        The weakest of the cases, and whether the client is excluded.

    Examples
    --------
    >>> from skslot.screening import screening_evidence
    >>> votes = {"a": (40, 3, 200), "b": (35, 5, 180), "c": (50, 2, 210), "d": (30, 4, 190)}
    >>> e = screening_evidence(votes, n_tested=5, significance=0.01, min_gain=0.02)
    >>> e.excluded, e.accuser, e.discounted, e.agreeing, round(e.gain, 3)
    (True, 'c', 'a', 2, 0.151)
    >>> votes = {"a": (40, 27, 300), "b": (12, 0, 300), "c": (300, 0, 300)}  # c lies
    >>> screening_evidence(votes, n_tested=4, significance=0.001, min_gain=0.02).excluded
    False
    """
    scored = {v: tuple(int(x) for x in counts) for v, counts in votes.items() if counts[2]}
    threshold = significance / max(int(n_tested), 1)
    if len(scored) < MIN_VOTERS:
        return ScreeningEvidence(len(scored), None, None, 0, 0, 0, 0, 1.0, threshold, False)
    accuser = max(scored, key=lambda v: scored[v][0] - scored[v][1])  # first of equals
    others = [v for v in scored if v != accuser]
    cases = [_case([scored[w] for w in others if w != v], v, threshold, min_gain) for v in others]
    weakest = max(cases, key=lambda e: (not e.excluded, e.p_value, -e.gain))
    return ScreeningEvidence(
        len(scored), accuser, weakest.discounted, weakest.agreeing, weakest.better,
        weakest.worse, weakest.rows, weakest.p_value, threshold,
        all(e.excluded for e in cases),
    )  # fmt: skip


def _case(
    kept: list[tuple[int, int, int]], discounted: Hashable, threshold: float, min_gain: float
) -> ScreeningEvidence:
    """The case made by the voters ``kept`` (the accuser and ``discounted`` left out)."""
    agreeing = sum(b > w for b, w, _ in kept)
    better = sum(b for b, _, _ in kept)
    worse = sum(w for _, w, _ in kept)
    rows = sum(n for _, _, n in kept)
    p = binomtest(better, better + worse, 0.5, alternative="greater").pvalue if better else 1.0
    gain = (better - worse) / rows if rows else 0.0
    holds = bool(kept) and 2 * agreeing > len(kept) and gain >= min_gain and p < threshold
    return ScreeningEvidence(
        len(kept) + 2, None, discounted, agreeing, better, worse, rows, float(p), threshold, holds
    )


def strongest_case(
    votes: Mapping[Hashable, Mapping[Hashable, tuple[int, int, int]]],
    *,
    significance: float,
    min_gain: float,
) -> tuple[Hashable | None, dict[Hashable, ScreeningEvidence]]:
    """The client with the strongest case against it, if any, and the evidence on each.

    Only one client is excluded per comparison: every head compared still
    held the others, so once one is excluded the cases against the rest are
    stale and must be measured again, on heads without it (the protocol
    screens again after an exclusion).

    Parameters
    ----------
    votes : mapping of client to (mapping of voter to (better, worse, rows))
        For each client, every other client's counts on it.
    significance, min_gain : float
        As in :func:`screening_evidence`; the Bonferroni factor is the number
        of clients.

    Returns
    -------
    excluded : object or None
        The excluded client (smallest p-value, then largest gain), or ``None``.
    evidence : dict
        Per client, the evidence on it.
    """
    evidence = {
        target: screening_evidence(
            found, n_tested=len(votes), significance=significance, min_gain=min_gain
        )
        for target, found in votes.items()
    }
    cases = [t for t, e in evidence.items() if e.excluded]
    if not cases:
        return None, evidence
    return min(cases, key=lambda t: (evidence[t].p_value, -evidence[t].gain)), evidence

