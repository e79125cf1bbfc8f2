"""Stage "screening": the chosen head and the heads without one other client each out,
paired counts back.

Each client compares, on its held-out rows, the head of all clients with the
head without each other client (:func:`paired_counts`: three counts per
comparison); the server ties the counts to the client's class counts
(:func:`check`), and the defence around the aggregation excludes the client with
the strongest case against it
(:meth:`~skslot.defence.aggregation.DefendedAggregation.screen`, the rules of
:mod:`skslot.defence.screening` with the defence's thresholds).  The head that is
screened is the final head, each client predicting with it as it will
(under its own label mix where the head serves each client's own): nothing
the screening did not judge enters it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...gaussian import GaussianSummary
from ...heads import LinearScores
from ...maps import GaussianMap
from ...wire import MessageFormatError
from ...wire.arrays import ArrayMessage, read_array
from ...wire.payload import Payload, ReceivedPayload, array_list
from ...wire.summary_codec import MAX_COUNT
from ._stage import ClientWire, ServerWire, Stage

if TYPE_CHECKING:
    from ..party import Party

__all__ = [
    "STAGE",
    "PairedCounts",
    "ScreeningRequest",
    "ScreeningStage",
    "check",
    "paired_counts",
]

#: The groups of arrays the heads and the counts travel in.
HEAD, LEFT_OUT, PAIRED = "head", "left-out", "paired-counts"


@dataclass(frozen=True, eq=False)
class ScreeningRequest:
    """The head of all clients and those without one other client each.

    ``masks[k]`` holds the classes the comparison with ``left_out[k]``
    predicts among and scores (those clients other than the left-out one
    hold); the full head predicts among ``full_mask``, every class the
    federation holds, as the final head does, so that a row it sends to a
    class only the left-out client holds counts against that client.
    ``tau`` is this client's fraction of its map.  A head without client
    ``k`` comes with the reference built without ``k`` (``references``, about
    this client's destination; the server aligned the others' statistics
    with their maps onto it, or carried their local heads onto it) and this
    client's fraction of its map onto it (``fractions``): the client aligns
    its rows for that comparison with its own map onto it.  A client is never
    sent the head without itself.

    Parameters
    ----------
    reference : GaussianSummary or None
        The reference, with a client's first request after it was built.
    full : LinearScores
    left_out : tuple of LinearScores
    masks : ndarray of bool, shape (len(left_out), C)
    tau : float
    full_mask : ndarray of bool, shape (C,), optional
        The classes the full head predicts among (``None``: every class).
    references : tuple of (GaussianSummary or None), optional
        Per left-out head, the reference built without its client; ``None``
        (or an empty tuple: for every head) where the head is on the run's
        reference (one fixed before the run).
    fractions : tuple of float, optional
        Per left-out head with a reference, this client's fraction of its map
        onto it.
    """

    reference: GaussianSummary | None
    full: LinearScores
    left_out: tuple[LinearScores, ...]
    masks: np.ndarray
    tau: float
    full_mask: np.ndarray | None = None
    references: tuple[GaussianSummary | None, ...] = ()
    fractions: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class PairedCounts:
    """A client's reply at the screening stage: one paired comparison per left-out head.

    Attributes
    ----------
    better : ndarray of shape (n_heads,)
        Validation rows the head without client ``j`` predicts right and the
        head of all clients wrong (among them rows it sends to a class only
        ``j`` holds).
    worse : ndarray of shape (n_heads,)
        Rows the head of all clients predicts right and the other wrong.
    rows : ndarray of shape (n_heads,)
        Rows scored: those of the classes both heads predict among.
    """

    better: np.ndarray
    worse: np.ndarray
    rows: np.ndarray

    def to_arrays(self) -> ArrayMessage:
        """The counts as named arrays (:meth:`from_arrays` reads them back).

        Returns
        -------
        dict of str to ndarray
        """
        return {"better": self.better, "worse": self.worse, "rows": self.rows}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any], *, n_heads: int) -> PairedCounts:
        """Decode received counts: three arrays of non-negative integers of length ``n_heads``.

        How they agree with each other and with the client's validation part
        is the server's check (:func:`check`),
        the same for either transport.

        Parameters
        ----------
        arrays : mapping of str to ndarray
        n_heads : int
            The comparisons asked for.

        Returns
        -------
        PairedCounts

        Raises
        ------
        StatisticsFormatError
            If a count is missing, of the wrong shape or not a non-negative integer.
        """
        return cls(
            *(
                read_array(arrays, name, (n_heads,), integer=True, nonnegative=True)
                for name in ("better", "worse", "rows")
            )
        )


def paired_counts(
    full: LinearScores,
    left_out: Sequence[LinearScores],
    masks: np.ndarray,
    full_map: GaussianMap,
    tau: float,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    *,
    full_mask: np.ndarray | None = None,
    left_out_maps: Sequence[GaussianMap | None] | None = None,
    class_counts: np.ndarray | None = None,
) -> PairedCounts:
    """Compare the full head with each left-out head on the validation rows.

    The rows are aligned with this client's own map at ``tau`` for the full
    head, and for each left-out head with its own map where it has one
    (``left_out_maps``: onto the reference built without that head's
    client); for each left-out head ``k`` only rows of the classes of
    ``masks[k]`` are scored,
    the left-out head predicting among those classes and the full head among
    ``full_mask`` (as the final head predicts), so that a row the full head
    sends to a class only client ``k`` holds and the left-out head gets right
    counts against ``k`` (absorbed by its class); a row both heads get wrong
    counts for neither, whatever class the full head sends it to: that error
    is not one ``k``'s removal undoes.  Each head predicts as the client will
    predict with the final one: under its own label mix where the head serves
    each client's own (``class_counts``,
    :meth:`~skslot.heads.LinearScores.decision_scores`).

    Parameters
    ----------
    full : LinearScores
        The head of all clients.
    left_out : sequence of LinearScores
        The heads without one other client each.
    masks : ndarray of bool, shape (len(left_out), C)
        The classes each comparison predicts among.
    full_map : GaussianMap
        This client's full map onto the reference.
    tau : float
        This client's fraction of its map.
    X, y : ndarray
        The client's validation rows and labels.
    classes : ndarray
        The global class set.
    full_mask : ndarray of bool, shape (C,), optional
        The classes the full head predicts among; ``None``: every class.
    left_out_maps : sequence of (GaussianMap or None), optional
        Per left-out head, the map (at its fraction) that aligns the rows it
        scores; ``None``: the full map at ``tau``.
    class_counts : ndarray of shape (C,), optional
        The client's own training rows of each class: the label mix it
        predicts with where a head serves each client's own; ``None``: the
        scores as the heads embed them.

    Returns
    -------
    PairedCounts
    """
    masks = np.asarray(masks, dtype=bool)
    if masks.shape != (len(left_out), classes.shape[0]):
        raise ValueError(
            f"masks of shape {masks.shape} for {len(left_out)} heads and {classes.shape[0]} classes"
        )
    if full_mask is None:
        full_mask = np.ones(classes.shape[0], dtype=bool)
    full_mask = np.asarray(full_mask, dtype=bool)
    if full_mask.shape != classes.shape or np.any(masks & ~full_mask):
        raise ValueError("the full head's classes must hold every comparison's classes")
    if left_out_maps is None:
        left_out_maps = [None] * len(left_out)
    if len(left_out_maps) != len(left_out):
        raise ValueError(f"{len(left_out_maps)} maps for {len(left_out)} left-out heads")
    aligned = full_map.geodesic(tau).apply(X)
    codes = np.searchsorted(classes, y)
    guess = _restricted_argmax(full.decision_scores(aligned, class_counts), full_mask)
    better, worse, rows = (np.zeros(len(left_out), dtype=np.int64) for _ in range(3))
    for k, (head, mask, own) in enumerate(zip(left_out, masks, left_out_maps, strict=True)):
        scored = mask[codes]
        truth = codes[scored]
        right_full = guess[scored] == truth
        rows_k = aligned[scored] if own is None else own.apply(X[scored])
        scores = head.decision_scores(rows_k, class_counts)
        right_without = _restricted_argmax(scores, mask) == truth
        better[k] = np.sum(right_without & ~right_full)
        worse[k] = np.sum(right_full & ~right_without)
        rows[k] = truth.shape[0]
    return PairedCounts(better, worse, rows)


def _restricted_argmax(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Position of each row's largest score among the classes of ``mask``."""
    return np.where(mask, scores, -np.inf).argmax(axis=1)


def check(counts: PairedCounts, expected_rows: np.ndarray) -> str | None:
    """Why screening counts do not match the comparisons asked for.

    Parameters
    ----------
    counts : PairedCounts
    expected_rows : ndarray of int
        The rows each comparison must score: the client's validation rows of
        the comparison's classes, derived from its class counts
        (:func:`~skslot.selection.validation_sizes`).

    Returns
    -------
    str or None
    """
    expected_rows = np.asarray(expected_rows)
    arrays = (counts.better, counts.worse, counts.rows)
    if any(np.shape(a) != expected_rows.shape for a in arrays):
        shapes = [np.shape(a) for a in arrays]
        return f"screening counts of shapes {shapes}, expected {expected_rows.shape}"
    if any(np.asarray(a).dtype.kind not in "iu" for a in arrays):
        return "screening counts must be integers"
    better, worse, rows = (np.asarray(a).astype(object) for a in arrays)  # no wrap-around
    if any(np.any(a < 0) for a in (better, worse)):
        return "negative screening counts"
    if not np.array_equal(rows, expected_rows.astype(object)):
        return (
            f"the comparisons score {rows.tolist()} rows, but its class counts make "
            f"{expected_rows.tolist()} validation rows of those classes"
        )
    if np.any(better + worse > rows):
        return "more discordant rows than rows scored"
    return None


class ScreeningStage(Stage[ScreeningRequest, PairedCounts]):
    """Stage "screening": the full head and the heads without one other client out,
    paired counts back.

    The client compares them on its held-out rows (:func:`paired_counts`); each
    left-out head travels with the mask of the classes its comparison predicts
    among.
    """

    name = "screening"
    message_type = "query.screening"
    request = ScreeningRequest
    reply = PairedCounts
    check = staticmethod(check)

    def answer(self, party: Party, request: ScreeningRequest) -> PairedCounts:
        full_map = party.full_map(request.reference)
        X, y = party.held_out("screening")
        own = [
            None if reference is None else party.map_onto(reference).geodesic(tau)
            for reference, tau in zip(request.references, request.fractions, strict=True)
        ] or None
        return paired_counts(
            request.full, request.left_out, request.masks, full_map, request.tau, X, y,
            party.classes, full_mask=request.full_mask, left_out_maps=own,
            class_counts=party.class_counts,
        )  # fmt: skip

    def encode_request(self, request: ScreeningRequest, wire: ServerWire) -> Payload:
        values = wire.with_reference(
            {"tau": float(request.tau), "n-heads": len(request.left_out)}, request.reference
        )
        heads = [
            {**h.to_arrays(), "mask": np.asarray(m, dtype=np.uint8)}
            for h, m in zip(request.left_out, request.masks, strict=True)
        ]
        rebuilt = zip(heads, request.references, request.fractions, strict=True)
        for arrays, reference, tau in rebuilt if request.references else ():
            if reference is not None:  # the reference built without this head's client
                data = reference.smaller_bytes(wire.summary_dtype)
                arrays["reference"] = np.frombuffer(data, dtype=np.uint8)
                arrays["tau"] = np.array([tau], dtype=np.float64)
        full = request.full.to_arrays()
        if request.full_mask is not None:
            full["mask"] = np.asarray(request.full_mask, dtype=np.uint8)
        return Payload(values, {HEAD: full, LEFT_OUT: array_list(heads)})

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> ScreeningRequest:
        tau = float(payload.value("tau", (float, int)))
        n = payload.value("n-heads", int)
        if not 1 <= n <= MAX_COUNT:
            raise MessageFormatError(f"'n-heads' must be a positive count, got {n}")
        arrays = payload.arrays(HEAD, max_bytes=wire.head_bytes)
        full_mask = _class_mask(arrays.pop("mask", None), wire.classes, "the full head")
        full = wire.head(arrays)
        each = wire.head_bytes + wire.reference_bytes
        parts = payload.array_list(LEFT_OUT, n, max_bytes=n * each)
        masks = np.array(
            [_class_mask(a.pop("mask", None), wire.classes, "each left-out head") for a in parts]
        )
        if np.any(masks & ~full_mask):
            raise MessageFormatError("a comparison's classes lie outside the full head's")
        references, fractions = zip(*(_left_out_reference(a, wire) for a in parts), strict=True)
        heads = tuple(wire.head(arrays) for arrays in parts)
        if all(r is None for r in references):
            references, fractions = (), ()
        return ScreeningRequest(
            wire.reference(payload), full, heads, masks, tau, full_mask, references, fractions
        )

    def encode_reply(self, reply: PairedCounts, request: ScreeningRequest) -> Payload:
        return Payload(arrays={PAIRED: reply.to_arrays()})

    def decode_reply(
        self, payload: ReceivedPayload, request: ScreeningRequest, wire: ServerWire
    ) -> PairedCounts:
        n = len(request.left_out)
        arrays = payload.arrays(PAIRED, max_bytes=3 * 8 * n + 4096)
        return PairedCounts.from_arrays(arrays, n_heads=n)


def _left_out_reference(
    arrays: dict[str, np.ndarray], wire: ClientWire
) -> tuple[GaussianSummary | None, float]:
    """A left-out head's reference built without its client, and this client's fraction of
    its map onto it (popped from the head's arrays), if it carries one."""
    data, tau = arrays.pop("reference", None), arrays.pop("tau", None)
    if data is None and tau is None:
        return None, 0.0
    if data is None or tau is None or data.dtype != np.uint8 or data.ndim != 1:
        raise MessageFormatError("a left-out head's reference needs its bytes and a fraction")
    if tau.shape != (1,) or not np.isfinite(tau[0]) or not 0.0 <= tau[0] <= 1.0:
        raise MessageFormatError("a left-out head's fraction of the map must lie in [0, 1]")
    reference = GaussianSummary.from_bytes(data.tobytes(), expected_dimension=wire.n_features)
    return reference, float(tau[0])


def _class_mask(mask: np.ndarray | None, classes: np.ndarray, what: str) -> np.ndarray:
    """A received 0/1 mask over the classes, as booleans."""
    if mask is None or mask.shape != classes.shape or not np.isin(mask, (0, 1)).all():
        raise MessageFormatError(f"{what} needs a 0/1 mask over the {classes.shape[0]} classes")
    return mask.astype(bool)


STAGE = ScreeningStage()
