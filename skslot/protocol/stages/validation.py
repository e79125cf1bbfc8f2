"""Stage "validation": the candidate heads out, each client's correct predictions back.

Each client aligns its held-out rows with its own map at each candidate's
``tau`` and counts, per class, the rows each candidate predicts right
(:class:`ValidationCounts`: a few hundred bytes).  The server ties the counts
to the client's upload (:func:`check`) and chooses
(:func:`~skslot.selection.select_candidate`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...gaussian import GaussianSummary
from ...heads import LinearScores
from ...maps import GaussianMap
from ...selection import Selection, select_candidate, validation_sizes
from ...wire.arrays import ArrayMessage, read_array
from ...wire.payload import Payload, ReceivedPayload, array_list
from ..report import logger
from ._stage import ClientWire, ServerWire, Stage

if TYPE_CHECKING:
    from ...heads import OneShotHead
    from ..party import Party
    from ..state import RunState

__all__ = [
    "STAGE",
    "ValidationCounts",
    "ValidationRequest",
    "ValidationStage",
    "check",
    "choose",
    "score_candidates",
]

#: The groups of arrays the candidates and the counts travel in.
CANDIDATES, COUNTS = "candidates", "counts"


@dataclass(frozen=True, eq=False)
class ValidationRequest:
    """The candidate heads and their ``tau``.

    Parameters
    ----------
    reference : GaussianSummary or None
        The reference, with a client's first request after it was built.
    heads : tuple of LinearScores
        The candidate heads.
    taus : tuple of float
        Each candidate's fraction of this client's map.
    """

    reference: GaussianSummary | None
    heads: tuple[LinearScores, ...]
    taus: tuple[float, ...]


@dataclass(frozen=True, eq=False)
class ValidationCounts:
    """What a client sends back: per candidate and class, its correct validation predictions.

    Attributes
    ----------
    correct : ndarray of shape (n_candidates, C)
        Correct predictions of each candidate head among the client's
        validation rows of each class.
    total : ndarray of shape (C,)
        The client's validation rows of each class.
    """

    correct: np.ndarray
    total: np.ndarray

    @property
    def n_samples(self) -> int:
        """The client's validation rows."""
        return int(self.total.sum())

    def balanced_accuracy(self) -> np.ndarray:
        """Per candidate, the mean over the client's classes of the recall.

        Returns
        -------
        ndarray of shape (n_candidates,)
        """
        present = self.total > 0
        return (self.correct[:, present] / self.total[present]).mean(axis=1)

    def balanced_accuracy_variance(self) -> np.ndarray:
        """Per candidate, the binomial sampling variance of :meth:`balanced_accuracy`.

        ``sum_c p_c (1 - p_c) / n_c / C^2`` over the ``C`` classes present,
        with the recall smoothed as ``p_c = (correct_c + 1/2) / (n_c + 1)`` so
        that a class of one or two rows counts as uncertain, not as exact.

        Returns
        -------
        ndarray of shape (n_candidates,)
        """
        present = self.total > 0
        n = self.total[present]
        p = (self.correct[:, present] + 0.5) / (n + 1.0)
        return (p * (1.0 - p) / n).sum(axis=1) / present.sum() ** 2

    def to_arrays(self) -> ArrayMessage:
        """The counts as named arrays (:meth:`from_arrays` reads them back).

        Returns
        -------
        dict of str to ndarray
        """
        return {"correct": self.correct, "total": self.total}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, Any], *, n_candidates: int, n_classes: int
    ) -> ValidationCounts:
        """Decode received counts: non-negative integers of the requested shapes.

        How they agree with each other and with the client's validation part
        is the server's check (:func:`check`), the same for either transport.

        Parameters
        ----------
        arrays : mapping of str to ndarray
        n_candidates, n_classes : int

        Returns
        -------
        ValidationCounts

        Raises
        ------
        StatisticsFormatError
            If a count is missing, of the wrong shape or not a non-negative integer.
        """
        total = read_array(arrays, "total", (n_classes,), integer=True, nonnegative=True)
        correct = read_array(
            arrays, "correct", (n_candidates, n_classes), integer=True, nonnegative=True
        )
        return cls(correct, total)


def score_candidates(
    heads: Sequence[LinearScores],
    taus: Sequence[float],
    full_map: GaussianMap,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    class_counts: np.ndarray | None = None,
) -> ValidationCounts:
    """Count correct predictions of each candidate on the validation rows.

    Each candidate ``j`` predicts the rows aligned with this client's own map
    at its ``tau``, ``full_map.geodesic(taus[j])`` (aligned once per
    distinct ``tau``).

    Parameters
    ----------
    heads : sequence of LinearScores
        The candidate heads, as received.
    taus : sequence of float
        Each candidate's ``tau``.
    full_map : GaussianMap
        This client's full (``tau = 1``) map onto the reference.
    X, y : ndarray
        The client's validation rows and labels.
    classes : ndarray
        The global class set.
    class_counts : ndarray of shape (C,), optional
        The client's own class counts: a candidate serving each client's own
        label mix predicts with them (:meth:`LinearScores.predict`).

    Returns
    -------
    ValidationCounts
    """
    if len(heads) != len(taus):
        raise ValueError(f"{len(heads)} candidate heads but {len(taus)} taus")
    classes = np.asarray(classes)
    codes = np.searchsorted(classes, y)
    total = np.bincount(codes, minlength=classes.shape[0]).astype(np.int64)
    correct = np.zeros((len(heads), classes.shape[0]), dtype=np.int64)
    aligned: dict[float, np.ndarray] = {}
    for j, (head, tau) in enumerate(zip(heads, taus, strict=True)):
        if tau not in aligned:
            aligned[tau] = full_map.geodesic(tau).apply(X)
        hit = head.predict(aligned[tau], class_counts) == y
        correct[j] = np.bincount(codes[hit], minlength=classes.shape[0])
    return ValidationCounts(correct, total)


def check(
    counts: ValidationCounts,
    n_candidates: int,
    n_classes: int,
    n_samples: int,
    class_totals: np.ndarray | None = None,
) -> str | None:
    """Why validation counts do not match the candidates and the client's validation part.

    Parameters
    ----------
    counts : ValidationCounts
    n_candidates, n_classes : int
        The candidates asked for and the run's classes.
    n_samples : int
        The client's validation rows, as its upload announced them.
    class_totals : ndarray, optional
        Its validation rows of each class, where the server derived them from
        the client's class counts (:func:`~skslot.selection.validation_sizes`).

    Returns
    -------
    str or None
    """
    if counts.correct.shape != (n_candidates, n_classes) or counts.total.shape != (n_classes,):
        return (
            f"validation counts of shape {counts.correct.shape}, expected "
            f"({n_candidates}, {n_classes})"
        )
    if int(counts.total.sum()) != n_samples:
        return (
            f"validation counts cover {int(counts.total.sum())} rows, but the client's "
            f"validation part has {n_samples}"
        )
    if np.any(counts.correct > counts.total) or np.any(counts.correct < 0):
        return "more correct predictions than validation rows of a class"
    if class_totals is not None and not np.array_equal(counts.total, class_totals):
        return "validation rows per class differ from those its class counts make"
    return None


def choose(run: RunState, heads: Sequence[OneShotHead]) -> Selection:
    """The server's step: the candidates out, the counts back (checked), the choice.

    Parameters
    ----------
    run : RunState
    heads : sequence of OneShotHead
        The candidate heads, in the order of the protocol's candidates.

    Returns
    -------
    Selection
    """
    settings = run.settings
    candidates = settings.candidates
    scores = tuple(h.linear_scores() for h in heads)
    taus = tuple(c.tau for c in candidates)
    requests = {
        c: ValidationRequest(run.reference_for(c), scores, run.client_taus(c, taus))
        for c in run.roster.order
        if run.roster.clients[c].upload.n_validation > 0
    }
    left_out: dict[Hashable, str] = {
        c: "no validation rows (too few rows per class to split)"
        for c in run.roster.order
        if c not in requests
    }
    exchange = run.exchange("validation", requests)
    counts: dict[Hashable, ValidationCounts] = {}
    for c in requests:
        why = exchange.rejected.get(c)
        reply = exchange.replies.get(c)
        if reply is not None:
            upload = run.roster.clients[c].upload
            n = upload.class_counts
            totals = None if n is None else validation_sizes(n, settings.validation_fraction)
            why = check(reply, len(candidates), len(run.classes), upload.n_validation, totals)
            if not why:
                counts[c] = reply
                continue
            run.roster.reject("validation", c, why)
        left_out[c] = f"rejected: {why}" if why else "did not answer the validation stage"
    selection = run.server_step(
        "the choice of tau", lambda: select_candidate(candidates, counts, settings.selection_rule)
    )
    table = selection.table()
    run.report.selection = {
        "candidates": table["params"],
        "clients": selection.clients,
        "scores": selection.scores.tolist(),
        "mean_validation_score": table["mean_validation_score"].tolist(),
        "std_error_validation_score": table["std_error_validation_score"].tolist(),
        "chosen": selection.candidate.describe(),
        "left_out": left_out,
    }
    logger.info("skslot: validation chose %s", selection.candidate.describe())
    return selection


class ValidationStage(Stage[ValidationRequest, ValidationCounts]):
    """Stage "validation": the candidate heads and their ``tau`` out, correct predictions back.

    The client aligns its held-out rows with its own map at each candidate's
    ``tau`` and counts, per class, the rows each candidate predicts right
    (:func:`score_candidates`).
    """

    name = "validation"
    message_type = "query.validation"
    request = ValidationRequest
    reply = ValidationCounts
    check = staticmethod(check)

    def answer(self, party: Party, request: ValidationRequest) -> ValidationCounts:
        full_map = party.full_map(request.reference)
        X, y = party.held_out("validation")
        return score_candidates(
            request.heads, request.taus, full_map, X, y, party.classes, party.class_counts
        )

    def encode_request(self, request: ValidationRequest, wire: ServerWire) -> Payload:
        values = wire.with_reference({"taus": [float(t) for t in request.taus]}, request.reference)
        return Payload(values, {CANDIDATES: array_list([h.to_arrays() for h in request.heads])})

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> ValidationRequest:
        taus = payload.floats("taus")
        size = len(taus) * wire.head_bytes
        heads = [wire.head(a) for a in payload.array_list(CANDIDATES, len(taus), max_bytes=size)]
        return ValidationRequest(wire.reference(payload), tuple(heads), tuple(taus))

    def encode_reply(self, reply: ValidationCounts, request: ValidationRequest) -> Payload:
        return Payload(arrays={COUNTS: reply.to_arrays()})

    def decode_reply(
        self, payload: ReceivedPayload, request: ValidationRequest, wire: ServerWire
    ) -> ValidationCounts:
        n, C = len(request.taus), wire.classes.shape[0]
        arrays = payload.arrays(COUNTS, max_bytes=8 * (n + 1) * C + 4096)
        return ValidationCounts.from_arrays(arrays, n_candidates=n, n_classes=C)


STAGE = ValidationStage()
