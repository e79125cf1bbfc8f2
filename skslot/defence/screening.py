"""The screening's decision: which client the others' paired counts exclude.

For each client ``j``, every other client ``i`` compares on its held-out
rows the head of all clients ``H`` with the head without ``j``, ``H_{-j}``
(the ``screening`` stage, :mod:`skslot.protocol.stages.screening`).  Both
are scored on ``i``'s rows of the classes ``S_j`` some client other than
``j`` holds (:func:`comparable_classes`); ``H_{-j}`` predicts among ``S_j``
(a class only ``j`` holds would otherwise make it look better for having one
class fewer to confuse), while ``H`` predicts among every class the
federation holds, as the final head does: a row ``H`` sends to a class only
``j`` holds and ``H_{-j}`` gets right is an error ``j`` caused
(absorption).  A row both get wrong counts for neither: that error is not
one ``j``'s removal undoes, and counting it against ``j`` would book
another client's harm (one whose heads push rows away from their classes)
against whichever client holds the class they land in.
``i`` sends three counts: rows only ``H_{-j}`` gets right (``b_i``), rows
only ``H`` gets right (``w_i``), rows scored (``n_i``).

The case against ``j`` (:func:`screening_evidence`) leaves out its strongest
accuser (most rows gained without it, net), so that no one client's counts,
an attacker's among them, can make it, and rests on the others, at least
:data:`MIN_REMAINING` of them (else ``j`` is unscreenable, never excluded).
It is one test on their rows pooled, each voter weighing the same whatever
its row count (no voter dominates): the statistic is the mean of their
gains ``g_i = (b_i - w_i) / n_i``.  Under "no difference" each discordant row
favours either head with probability one half, independently, so the mean
gain is a weighted sum of signs with variance proxy
``V = sum_i (b_i + w_i) / (r n_i)^2`` over the ``r`` voters kept, and

``P(G >= g) <= min(exp(-g^2 / (2 V)), (2 e^3 / 9) Phi(-g / sqrt(V)))``

(Hoeffding's bound and Pinelis's for weighted sums of signs): the p-value,
an exact bound whatever the voters' row counts.  ``j`` is excluded when
the p-value is below ``significance / K`` (Bonferroni over the ``K`` clients
tested: the family-wise false-positive rate is at most ``significance``),
the mean gain reaches ``min_gain``, and a strict majority of the voters
kept found ``H_{-j}`` better.

An exclusion therefore needs :data:`MIN_VOTERS` voters (four clients).  One
client at most is excluded per comparison, the strongest case
(:func:`strongest_case`).  Measured: docs/results/screening.md and
docs/results/attacks.md; what the screening cannot catch: docs/threats.md.

References
----------
.. [1] Hoeffding, "Probability inequalities for sums of bounded random
   variables", Journal of the American Statistical Association 58, 1963.
.. [2] Pinelis, "Extremal probabilistic problems and Hotelling's T^2 test
   under a symmetry condition", The Annals of Statistics 22, 1994.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import ndtr

__all__ = [
    "MIN_REMAINING",
    "MIN_VOTERS",
    "SCREENING",
    "ScreeningEvidence",
    "comparable_classes",
    "pooled_sign_bound",
    "screening_evidence",
    "strongest_case",
]

#: The ``screen`` settings: wherever there is a defence, the same but required, never.
SCREENING = ("auto", "on", "off")
#: Fewest voters a case rests on once the strongest accuser is left out: with two, no
#: one voter's counts make the case, and a strict majority needs both.
MIN_REMAINING = 2
#: Fewest other clients whose counts can exclude a client: the strongest accuser, left
#: out, and :data:`MIN_REMAINING` more.
MIN_VOTERS = MIN_REMAINING + 1
#: Pinelis's constant: a weighted sum of signs exceeds ``x`` standard deviations with
#: probability at most this times the normal tail.
_PINELIS = 2.0 * math.e**3 / 9.0


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
    >>> from skslot.defence.screening import comparable_classes
    >>> counts = [np.array([5, 0, 2]), np.array([3, 4, 0]), np.array([1, 1, 0])]
    >>> comparable_classes(counts).astype(int)
    array([[1, 1, 0],
           [1, 1, 1],
           [1, 1, 1]])
    """
    held = np.array([np.asarray(c, dtype=np.float64) for c in class_counts]) > 0
    by_others = held.sum(axis=0) - held > 0
    return by_others & (by_others.sum(axis=1, keepdims=True) >= 2)


def pooled_sign_bound(votes: Sequence[tuple[int, int, int]]) -> tuple[float, float]:
    """The voters' mean gain and a bound on its p-value under "no difference".

    Each voter ``i`` weighs ``1 / r`` (``r`` voters) whatever its row count:
    the statistic is ``G = mean_i (b_i - w_i) / n_i``.  If each discordant row
    favours either head with probability one half, independently, ``G`` is a
    sum of ``b_i + w_i`` signs of weight ``1 / (r n_i)`` each, whose tail is
    bounded by Hoeffding's inequality and by Pinelis's; the smaller bound is
    returned.

    Parameters
    ----------
    votes : sequence of (better, worse, rows)
        Each voter's counts (``rows > 0``).

    Returns
    -------
    gain : float
        The mean gain ``G`` (a fraction of the rows).
    p_value : float
        An upper bound on ``P(G' >= G)`` under "no difference"; 1 when
        ``G <= 0``.

    Examples
    --------
    >>> from skslot.defence.screening import pooled_sign_bound
    >>> gain, p = pooled_sign_bound([(12, 1, 60), (9, 0, 40)])
    >>> round(gain, 3), p < 1e-3
    (0.204, True)
    """
    r = len(votes)
    gain = sum((b - w) / n for b, w, n in votes) / r if r else 0.0
    variance = sum((b + w) / (r * n) ** 2 for b, w, n in votes)
    if gain <= 0.0 or variance == 0.0:
        return gain, 1.0
    z = gain / math.sqrt(variance)
    return gain, float(min(1.0, math.exp(-0.5 * z * z), _PINELIS * ndtr(-z)))


@dataclass(frozen=True)
class ScreeningEvidence:
    """What the other clients' validation says of one client's contribution.

    The case leaves out the client's strongest accuser and rests on the
    other voters' rows pooled, each voter weighing the same
    (:func:`pooled_sign_bound`).

    Attributes
    ----------
    voters : int
        Other clients that scored rows for it (fewer than :data:`MIN_VOTERS`:
        it cannot be screened).
    accuser : object or None
        The strongest accuser (most rows gained without it, net), left out.
    agreeing : int
        Voters kept whose rows the head without it got right more often.
    better, worse, rows : int
        Summed over the voters kept: rows only the head without it got right,
        rows only the head with it got right, rows scored.
    gain : float
        The voters' mean gain without it (each voter's fraction of its rows).
    p_value : float
        The bound on the p-value of ``gain`` under "no difference".
    threshold : float
        The level ``p_value`` is compared to (``significance / K``).
    excluded : bool
        Whether the case holds: the client is excluded.
    """

    voters: int
    accuser: Hashable | None
    agreeing: int
    better: int
    worse: int
    rows: int
    gain: float
    p_value: float
    threshold: float
    excluded: bool

    @property
    def remaining(self) -> int:
        """Voters the case rests on (all but the strongest accuser)."""
        return max(self.voters - (self.accuser is not None), 0)

    def describe(self) -> dict:
        """The evidence as a dict of plain values, for the report.

        Returns
        -------
        dict
            The fields, the floats rounded to six digits.
        """
        return {
            **asdict(self),
            "gain": round(self.gain, 6),
            "p_value": float(f"{self.p_value:.6g}"),
            "threshold": float(f"{self.threshold:.6g}"),
        }

    def reason(self) -> str:
        """Why it was excluded, with the evidence.

        Returns
        -------
        str
        """
        return (
            f"its contribution hurts the others: without it, {self.agreeing} of the "
            f"{self.remaining} other clients' held-out rows left once its strongest accuser "
            f"is left out do better, {100 * self.gain:+.1f} points on average over "
            f"{self.rows} rows ({self.better} rows gained, {self.worse} lost; pooled sign "
            f"bound p = {self.p_value:.2g} < {self.threshold:.2g})"
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
    client, net; the first of equals) is left out; the case rests on the
    others, at least :data:`MIN_REMAINING` of them: their mean gain
    (each voter weighing the same) is at least ``min_gain``, its p-value
    bound (:func:`pooled_sign_bound`) is below ``significance / n_tested``,
    and a strict majority of them found the head without the client better.

    Parameters
    ----------
    votes : mapping of voter to (better, worse, rows)
        Each other client's counts on it (:class:`~skslot.protocol.stages.screening.PairedCounts`).
    n_tested : int
        Clients tested in the run (the Bonferroni factor).
    significance : float
        Family-wise level of the test.
    min_gain : float
        Smallest mean accuracy gain (a fraction of each voter's rows) that excludes.

    Returns
    -------
    ScreeningEvidence

    Examples
    --------
    >>> from skslot.defence.screening import screening_evidence
    >>> votes = {"a": (40, 3, 200), "b": (35, 5, 180), "c": (50, 2, 210)}
    >>> e = screening_evidence(votes, n_tested=4, significance=0.01, min_gain=0.02)
    >>> e.excluded, e.accuser, e.agreeing, round(e.gain, 3)
    (True, 'c', 2, 0.176)
    >>> votes = {"a": (40, 27, 300), "b": (12, 0, 300), "c": (300, 0, 300)}  # c lies
    >>> screening_evidence(votes, n_tested=4, significance=0.001, min_gain=0.02).excluded
    False
    """
    scored = {v: (int(b), int(w), int(n)) for v, (b, w, n) in votes.items() if n}
    threshold = significance / max(int(n_tested), 1)
    if len(scored) < MIN_VOTERS:
        return ScreeningEvidence(len(scored), None, 0, 0, 0, 0, 0.0, 1.0, threshold, False)
    accuser = max(scored, key=lambda v: scored[v][0] - scored[v][1])  # first of equals
    kept = [scored[v] for v in scored if v != accuser]
    gain, p = pooled_sign_bound(kept)
    agreeing = sum(b > w for b, w, _ in kept)
    holds = 2 * agreeing > len(kept) and gain >= min_gain and p < threshold
    return ScreeningEvidence(
        len(scored), accuser, agreeing, sum(b for b, _, _ in kept), sum(w for _, w, _ in kept),
        sum(n for _, _, n in kept), gain, p, threshold, holds,
    )  # fmt: skip


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
