"""Stages "updates" and "refit": local heads trained on aligned rows, one per ``tau``.

A head that trains on aligned rows (O-FedAvg) cannot be aligned by the
server: each client trains one local head per requested fraction of its map,
on its fitting rows (``part="fit"``, the candidates) or on all its rows
(``part="all"``, the final head).  The server ties each reply to the
client's upload (:func:`check`), scales it by the client's capped weight and
compares its norm with the others' (the defence).

Stage "left-out" serves the screening of such a head.  The screening compares
the candidate head with the head the federation would have made without each
client; where the server aligns statistics (FedCGS, FedPFT) it builds that
head itself on the reference rebuilt without the client, but local heads
trained on the run's reference carry the suspect's summary in their
alignment.  So every other client trains its local head again, on its
fitting rows aligned by its map onto the reference built without the
suspect: one request per client carries every such reference (one per other
client, ``K - 1``) and its fraction of the map, and the reply is one local
head per reference, checked as the ``updates`` stage checks its heads.  The
references are never stored: the client's run keeps its own reference and
map.  A screening round with this head thus costs each client ``K - 1`` more
references received and local heads trained and sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...accounting import PrivacyBudgetExceeded
from ...heads._fitting import local_heads
from ...low_rank import Summary, TransportMap, summary_from_bytes
from ...wire import MessageFormatError
from ...wire.arrays import sample_count_problem
from ...wire.payload import Payload, ReceivedPayload, array_list
from ._stage import ClientWire, ServerWire, Stage

if TYPE_CHECKING:
    from ..alignment import Alignment
    from ..client import ClientParty
    from ..state import RunState
    from .upload import Upload

__all__ = [
    "LEFT_OUT",
    "REFIT",
    "STAGE",
    "LeftOutRequest",
    "LeftOutStage",
    "LocalHeads",
    "RefitStage",
    "UpdatesRequest",
    "UpdatesStage",
    "check",
    "collect",
    "collect_left_out",
]

#: The group of arrays the local heads travel in.
UPDATES = "updates"
#: The parts of a client's rows a local head is trained on.
PARTS = ("fit", "all")


@dataclass(frozen=True, eq=False)
class UpdatesRequest:
    """One local head per ``tau`` on ``part`` of the rows.

    Parameters
    ----------
    reference : GaussianSummary, LowRankGaussianSummary or None
        The reference, with a client's first request after it was built.
    taus : tuple of float
        The fractions of the client's map to train at.
    part : {"fit", "all"}
        The fitting rows, or all the client's training rows.
    """

    reference: Summary | None
    taus: tuple[float, ...]
    part: str


class LocalHeads(list):
    """A client's reply: its local heads (:class:`~skslot.heads.LinearHeadUpdate`), one per
    requested ``tau``, in the request's order."""


def encode_local_heads(heads: LocalHeads) -> Payload:
    """A reply of local heads on the wire: one group of arrays per head."""
    return Payload(arrays={UPDATES: array_list([u.to_arrays() for u in heads])})


def decode_local_heads(payload: ReceivedPayload, n: int, wire: ServerWire) -> LocalHeads:
    """The ``n`` local heads a reply carries, each decoded and checked by the run's head
    (at most the head's bytes each, read before anything is allocated)."""
    head, C, m = wire.head, wire.classes.shape[0], wire.dimension
    arrays = payload.array_list(
        UPDATES, n, max_bytes=n * head.strategy.max_update_bytes(head, C, m)
    )
    return LocalHeads(head.decode_statistics(a, classes=wire.classes, n_features=m) for a in arrays)


def check(
    updates: Sequence,
    n_updates: int,
    n_samples: int,
    upload: Upload | None = None,
    part: str = "all",
) -> str | None:
    """Why a client's local heads do not match the request and its upload.

    A head spanning the classes its client holds (``class_rows``) must hold
    the rows of each class the client declared at the upload: those of its
    fitting rows' class sums where it sent them (``part="fit"``), its class
    counts for all its rows (``part="all"``), at most those counts for its
    fitting part.

    Parameters
    ----------
    updates : sequence of local heads
    n_updates : int
        The heads requested.
    n_samples : int
        The rows of the requested part, as its upload announced them.
    upload : Upload, optional
        The client's upload, whose class counts and sums the heads are tied to.
    part : {"fit", "all"}, default="all"
        The rows the heads were trained on.

    Returns
    -------
    str or None
    """
    if len(updates) != n_updates:
        return f"{len(updates)} local heads, but {n_updates} were requested"
    for update in updates:
        why = sample_count_problem(update.n_samples, n_samples, "local head trained on")
        if why is not None:
            return why
        rows = getattr(update, "class_rows", None)
        if rows is None or upload is None:
            continue
        if part == "fit" and upload.class_sums is not None:
            declared = upload.class_sums[0]
            if not np.array_equal(rows, declared):
                return "its local head's class counts are not those of its fitting rows"
        if upload.class_counts is not None:
            counts = upload.class_counts
            if np.any(rows > counts) or (part == "all" and not np.array_equal(rows, counts)):
                return "its local head's class counts are not those its upload declared"
    return None


def collect(run: RunState, stage: str, taus: Sequence[float], part: str) -> None:
    """The server's step: ask each client for the local heads it has not sent on this reference.

    The same rows at the same fraction of the same map give the same head,
    so a choice made again costs no new training unless the reference or
    the clients' fractions changed.  Each reply is tied to the client's
    upload (:func:`check`) and scaled by its capped weight; the defence
    rejects heads whose norm is out of line with the others'.

    Parameters
    ----------
    run : RunState
    stage : {"updates", "refit"}
    taus : sequence of float
        The run's fractions (each client moves its own share of them).
    part : {"fit", "all"}
    """
    cache = run.local_heads_cache(part)
    wanted = {
        c: [t for t in run.client_taus(c, taus) if t not in cache.get(c, {})]
        for c in run.roster.order
    }
    requests = {
        c: UpdatesRequest(run.reference_for(c), tuple(ts), part) for c, ts in wanted.items() if ts
    }
    if not requests:
        return
    exchange = run.exchange(stage, requests)
    received = {}
    for c, updates in exchange.replies.items():
        run.account.receive(c, "updates")  # spent, even if refused (refit: the same exchange)
        upload = run.roster.clients[c].upload
        expected = upload.n_fit if part == "fit" else upload.n_rows
        why = check(updates, len(wanted[c]), expected, upload, part)
        if why:
            run.roster.reject(stage, c, why)
            continue
        received[c] = [u.scaled(run.weight_factor(c)) for u in updates]
    order = list(received)
    norms = [max(u.norm() for u in received[c]) for c in order]
    for k, why in run.defence.implausible_updates(norms).items():
        run.roster.reject(stage, order[k], f"implausible: {why}")
        del received[order[k]]
    for c, updates in received.items():
        cache.setdefault(c, {}).update(zip(wanted[c], updates, strict=True))
    run.roster.keep(stage, [c for c in run.roster.order if c in received or c not in requests])


def _check_private_request(party: ClientParty, aligned: TransportMap, part: str) -> None:
    """A private client's local head is released for one map and part of its rows only.

    Its input (the map, made from the server's reference and fractions) is
    the server's choice, so the same noise on rows aligned by another map
    would release the difference of two exact heads: the client keeps the
    digest of the first request's map and part (in its state, across
    processes), answers the same request again with the same release and
    refuses another.
    """
    parts = (aligned.linear, aligned.offset, np.asarray(part.encode()))
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in parts))
    state = party.state
    if state.local_head is None:
        state.local_head = digest.hexdigest()
    elif state.local_head != digest.hexdigest():
        raise PrivacyBudgetExceeded(
            f"client {party.label!r} released its local head of this run on another map "
            "(reference, tau or mean fraction): a second head would release the difference"
        )


class UpdatesStage(Stage[UpdatesRequest, LocalHeads]):
    """Stage "updates": one local head per ``tau`` on a part of the client's rows.

    The client trains on its rows aligned at each fraction of its map
    (:func:`skslot.heads._fitting.local_heads`); the heads travel as one group of
    arrays, decoded and checked by the run's head.
    """

    name = "updates"
    message_type = "train.updates"
    request = UpdatesRequest
    reply = LocalHeads
    check = staticmethod(check)

    answers_privately = True

    def answer(self, party: ClientParty, request: UpdatesRequest) -> LocalHeads:
        ledger = None
        if party.privacy is not None:
            if party.head.private_release != "local_head":
                raise PrivacyBudgetExceeded(
                    f"client {party.label!r} releases under its privacy budget and its "
                    f"head, {type(party.head).__name__}, trains no local head: the "
                    f"{self.name!r} stage would release values the budget does not cover"
                )
            if len(request.taus) != 1:
                raise PrivacyBudgetExceeded(
                    f"client {party.label!r} releases one local head per run under its "
                    f"privacy budget; the request asks for {len(request.taus)}"
                )
            ledger = party.ledger()
        full_map = party.full_map(request.reference)
        split = party.split
        rows = split[0] if request.part == "fit" and split is not None else slice(None)
        if ledger is not None:
            _check_private_request(party, full_map.geodesic(request.taus[0]), request.part)
        heads = local_heads(
            party.head,
            party.X[rows],
            party.y[rows],
            party.classes,
            full_map,
            request.taus,
            client_index=party.state.client_index or 0,
            ledger=ledger,
        )
        return LocalHeads(heads)

    def encode_request(self, request: UpdatesRequest, wire: ServerWire) -> Payload:
        values = {"taus": [float(t) for t in request.taus], "part": request.part}
        return Payload(wire.with_reference(values, request.reference))

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> UpdatesRequest:
        part = payload.value("part", str)
        if part not in PARTS:
            raise MessageFormatError(f"part must be 'fit' or 'all', got {part!r}")
        return UpdatesRequest(wire.reference(payload), tuple(payload.floats("taus")), part)

    def encode_reply(self, reply: LocalHeads, request: UpdatesRequest) -> Payload:
        return encode_local_heads(reply)

    def decode_reply(
        self, payload: ReceivedPayload, request: UpdatesRequest, wire: ServerWire
    ) -> LocalHeads:
        return decode_local_heads(payload, len(request.taus), wire)


class RefitStage(UpdatesStage):
    """Stage "refit": the same exchange after a choice, local heads at the chosen ``tau``.

    Never under privacy: a private run has a fixed ``tau`` and makes its
    final head at the updates stage, its one local head release.
    """

    name = "refit"
    answers_privately = False


#: The group of arrays the references travel in.
REFERENCES = "references"


@dataclass(frozen=True, eq=False)
class LeftOutRequest:
    """One local head on the fitting rows per reference, each built without another client.

    Parameters
    ----------
    references : tuple of GaussianSummary or LowRankGaussianSummary
        The references, each the client's own (about its destination with
        ``label_mix="client"``).
    fractions : tuple of float
        The client's fraction of its map onto each (the candidate's ``tau``
        times its factor of ``tau`` on that reference).
    """

    references: tuple[Summary, ...]
    fractions: tuple[float, ...]


class LeftOutStage(Stage[LeftOutRequest, LocalHeads]):
    """Stage "left-out": a local head per reference built without one other client."""

    name = "left-out"
    message_type = "train.left_out"
    request = LeftOutRequest
    reply = LocalHeads
    check = staticmethod(check)

    def answer(self, party: ClientParty, request: LeftOutRequest) -> LocalHeads:
        X, y = party.fitting_rows()
        heads = []
        for reference, tau in zip(request.references, request.fractions, strict=True):
            heads += local_heads(
                party.head,
                X,
                y,
                party.classes,
                party.map_onto(reference),
                (tau,),
                client_index=party.state.client_index or 0,
            )
        return LocalHeads(heads)

    def encode_request(self, request: LeftOutRequest, wire: ServerWire) -> Payload:
        parts = [
            {"reference": np.frombuffer(r.to_bytes(wire.summary_dtype), dtype=np.uint8)}
            for r in request.references
        ]
        values = {"fractions": [float(t) for t in request.fractions]}
        return Payload(values, {REFERENCES: array_list(parts)})

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> LeftOutRequest:
        fractions = tuple(payload.floats("fractions"))
        if not fractions or not all(0.0 <= t <= 1.0 for t in fractions):
            raise MessageFormatError("left-out fractions must be one or more numbers in [0, 1]")
        n = len(fractions)
        parts = payload.array_list(REFERENCES, n, max_bytes=n * wire.reference_bytes)
        references = []
        for arrays in parts:
            data = arrays.get("reference")
            if data is None or data.dtype != np.uint8 or data.ndim != 1 or len(arrays) != 1:
                raise MessageFormatError("each left-out reference must be one array of bytes")
            m = wire.n_features
            references.append(summary_from_bytes(data.tobytes(), expected_dimension=m))
        return LeftOutRequest(tuple(references), fractions)

    def encode_reply(self, reply: LocalHeads, request: LeftOutRequest) -> Payload:
        return encode_local_heads(reply)

    def decode_reply(
        self, payload: ReceivedPayload, request: LeftOutRequest, wire: ServerWire
    ) -> LocalHeads:
        return decode_local_heads(payload, len(request.fractions), wire)


def collect_left_out(
    run: RunState, rebuilt: dict[int, Alignment], tau: float
) -> tuple[dict[int, list], list[Hashable]]:
    """The server's step: every client's local heads on the references built without others.

    Parameters
    ----------
    run : RunState
    rebuilt : dict of int to Alignment
        Per position of a left-out client in the run's order, the alignment
        built without it.
    tau : float
        The candidate's fraction.

    Returns
    -------
    heads : dict of int to list
        Per left-out position, every client's local head on that reference
        in the run's order (``None`` at the left-out position), scaled by its
        capped weight; only where every other client's came back.
    refused : list
        The clients whose heads failed their checks, or whose norms the
        defence finds out of line with the others' (rejected at this stage).
    """
    order = run.roster.order
    targets = {c: [k for k in rebuilt if order[k] != c] for c in order}
    requests = {
        c: LeftOutRequest(
            tuple(rebuilt[k].reference_for(c) for k in ks),
            tuple(float(tau) * rebuilt[k].tau_scale(c) for k in ks),
        )
        for c, ks in targets.items()
        if ks
    }
    exchange = run.exchange(LEFT_OUT.name, requests)
    received: dict[Hashable, Sequence] = {}
    refused = [c for c in exchange.rejected if c in requests]
    for c, updates in exchange.replies.items():
        upload = run.roster.clients[c].upload
        why = check(updates, len(targets[c]), upload.n_fit, upload, "fit")
        if why:
            run.roster.reject(LEFT_OUT.name, c, why)
            refused.append(c)
            continue
        received[c] = [u.scaled(run.weight_factor(c)) for u in updates]
    # the defence's bound on the heads' norms, as at the updates stage
    named = list(received)
    norms = [max(u.norm() for u in received[c]) for c in named]
    for i, why in run.defence.implausible_updates(norms).items():
        run.roster.reject(LEFT_OUT.name, named[i], f"implausible: {why}")
        refused.append(named[i])
        del received[named[i]]
    heads: dict[int, list] = {}
    for k in rebuilt:
        others = [c for c in order if c != order[k]]
        if all(c in received for c in others):
            heads[k] = [None if c == order[k] else received[c][targets[c].index(k)] for c in order]
    return heads, refused


STAGE = UpdatesStage()
REFIT = RefitStage()
LEFT_OUT = LeftOutStage()
