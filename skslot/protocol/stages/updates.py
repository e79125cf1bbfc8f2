"""Stages "updates" and "refit": local heads trained on aligned rows, one per ``tau``.

A head that trains on aligned rows (O-FedAvg) cannot be aligned by the
server: each client trains one local head per requested fraction of its map,
on its fitting rows (``part="fit"``, the candidates) or on all its rows
(``part="all"``, the final head).  The server ties each reply to the
client's upload (:func:`check`) and, where the defence checks a client's
messages against each other, to the class sums it uploaded (each head must
place its own class means in their classes, :func:`misplaced_means`), scales
it by the client's capped weight and compares its norm with the others' (the
defence: a head far out of line is refused, the others clipped to the median
client's norm, :func:`~skslot.defence.clipped_norms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...defence.consistency import misplaced_class_means
from ...gaussian import GaussianSummary
from ...heads._fitting import local_heads
from ...maps import GaussianMap
from ...privacy._heads import private_release
from ...privacy.client import map_digest
from ...wire import MessageFormatError
from ...wire.arrays import sample_count_problem
from ...wire.payload import ConfigValue, Payload, ReceivedPayload, array_list
from ._stage import ClientWire, ServerWire, Stage

if TYPE_CHECKING:
    from ..party import Party
    from ..state import RunState
    from .upload import Upload

__all__ = [
    "REFIT",
    "STAGE",
    "LocalHeads",
    "RefitStage",
    "UpdatesRequest",
    "UpdatesStage",
    "check",
    "collect",
    "misplaced_means",
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
    reference : GaussianSummary or None
        The reference, with a client's first request after it was built.
    taus : tuple of float
        The fractions of the client's map to train at.
    part : {"fit", "all"}
        The fitting rows, or all the client's training rows.
    """

    reference: GaussianSummary | None
    taus: tuple[float, ...]
    part: str


class LocalHeads(list):
    """A client's reply: its local heads (:class:`~skslot.heads.LinearHeadUpdate`), one per
    requested ``tau``, in the request's order."""


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
            if not np.array_equal(rows, upload.class_sums[0]):
                return "its local head's class counts are not those of its fitting rows"
        if upload.class_counts is not None:
            counts = upload.class_counts
            if np.any(rows > counts) or (part == "all" and not np.array_equal(rows, counts)):
                return "its local head's class counts are not those its upload declared"
    return None


def misplaced_means(
    updates: Sequence, taus: Sequence[float], full_map: GaussianMap, upload: Upload
) -> str | None:
    """Why a client's local heads do not place its own class means in their classes.

    Each head was trained on the client's rows aligned at its fraction of
    the client's full map; the class sums the client uploaded (of its fitting
    rows), aligned by the same map, must fall in their classes
    (:func:`~skslot.defence.consistency.misplaced_class_means`): a head negated or
    pointed at other classes than its rows' is refused, and so are the heads
    of a client that sent no class sums where others did (``collect`` checks
    nothing where no client sent them: each client's summary private, which
    exact class sums would give away).

    Parameters
    ----------
    updates : sequence of LinearHeadUpdate
        The client's heads, one per fraction.
    taus : sequence of float
        The client's fractions of its map the heads were trained at.
    full_map : GaussianMap
        The client's full map, as it applies it.
    upload : Upload
        The client's upload.

    Returns
    -------
    str or None
    """
    if upload.class_sums is None:
        return (
            "its local heads cannot be checked: it sent no class sums of its fitting rows, "
            "as the other clients did (a client whose summary is private sends none: it "
            "joins a run whose clients' summaries are all private, or one without the defence)"
        )
    counts, sums = upload.class_sums
    means = sums / np.maximum(counts, 1)[:, None]  # a class without rows is not read
    for tau, update in zip(taus, updates, strict=True):
        aligned = full_map.geodesic(tau).apply(means)
        why = misplaced_class_means(update.coef, update.intercept, counts, aligned)
        if why is not None:
            return why
    return None


def collect(run: RunState, stage: str, taus: Sequence[float], part: str) -> None:
    """The server's step: ask each client for the local heads it has not sent on this reference.

    The same rows at the same fraction of the same map give the same head,
    so a choice made again costs no new training unless the reference or
    the clients' fractions changed.  Each reply is tied to the client's
    upload (:func:`check`) and scaled by its capped weight; the defence
    rejects heads whose norm is out of line with the others' and clips the
    rest (the report's ``clipped``: each clipped client's factor).

    Parameters
    ----------
    run : RunState
    stage : {"updates", "refit"}
    taus : sequence of float
        The run's fractions (each client moves its own share of them).
    part : {"fit", "all"}
    """
    cache = run.local_heads_received[part]
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
    # where no client sent class sums (their summaries private), no head can be checked
    summed = any(run.roster.clients[c].upload.class_sums is not None for c in run.roster.order)
    received = {}
    for c, updates in exchange.replies.items():
        run.account.receive(c, "updates")  # spent, even if refused (refit: the same exchange)
        upload = run.roster.clients[c].upload
        expected = upload.n_fit if part == "fit" else upload.n_rows
        why = check(updates, len(wanted[c]), expected, upload, part)
        if why is None and run.checks_local_heads and summed:
            why = misplaced_means(updates, wanted[c], run.full_map(c), upload)
        if why:
            run.roster.reject(stage, c, why)
            continue
        received[c] = [u.scaled(run.weight_factor(c)) for u in updates]
    norms = {c: max(u.norm() for u in heads) for c, heads in received.items()}
    order = list(norms)
    for k, why in run.defence.implausible_updates(list(norms.values())).items():
        run.roster.reject(stage, order[k], f"implausible: {why}")
        del received[order[k]]
    factors = run.defence.clipped_updates([norms[c] for c in received])
    for c, factor in zip(list(received), factors, strict=True):
        if factor < 1.0:
            received[c] = [u.clipped(factor) for u in received[c]]
            run.report.clipped[c] = round(float(factor), 6)
        cache.setdefault(c, {}).update(zip(wanted[c], received[c], strict=True))
    run.roster.keep(stage, [c for c in run.roster.order if c in received or c not in requests])


class UpdatesStage(Stage[UpdatesRequest, LocalHeads]):
    """Stage "updates": one local head per ``tau`` on a part of the client's rows.

    The client trains on its rows aligned at each fraction of its map
    (:func:`skslot.heads._fitting.local_heads`); the heads travel as one group of
    arrays, decoded and checked by the run's head.  A private client releases
    one local head per run, for one map and part of its rows: the map (made
    from the server's reference and fractions) is the server's choice, so the
    same noise on rows aligned by another map would release the difference of
    two exact heads; the same request again gets the same release, another is
    refused (:meth:`private_problem`).
    """

    name = "updates"
    message_type = "train.updates"
    request = UpdatesRequest
    reply = LocalHeads
    check = staticmethod(check)

    def private_problem(self, party: Party, request: UpdatesRequest) -> str | None:
        if private_release(party.head) != "local_head":
            return f"{type(party.head).__name__} trains no local head"
        state = party.state
        if "local_head" not in state.releases or state.summary is None:
            return "no upload of this run announced a local head"
        if len(request.taus) != 1:
            return f"{len(request.taus)} local heads, of one release"
        reference = request.reference if request.reference is not None else state.reference
        if state.fixed_map is not None:
            full_map = state.fixed_map
        elif reference is None:
            return "no reference"
        else:
            full_map = party.map_onto(reference)
        digest = map_digest(full_map.geodesic(request.taus[0]), request.part)
        if state.local_head is not None and state.local_head != digest:
            return "a local head on another map (reference, tau or mean fraction) or part"
        return None

    def answer(self, party: Party, request: UpdatesRequest) -> LocalHeads:
        full_map = party.full_map(request.reference)
        X, y = party.fitting_rows() if request.part == "fit" else (party.X, party.y)
        release = party.release()
        heads = local_heads(
            party.head,
            X,
            y,
            party.classes,
            full_map,
            request.taus,
            client_index=party.state.client_index or 0,
            released=release.statistics_release,
            aligned_rows=release.local_head_rows(full_map, request.taus, request.part),
        )
        return LocalHeads(heads)

    def encode_request(self, request: UpdatesRequest, wire: ServerWire) -> Payload:
        values: dict[str, ConfigValue] = {
            "taus": [float(t) for t in request.taus],
            "part": request.part,
        }
        return Payload(wire.with_reference(values, request.reference))

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> UpdatesRequest:
        part = payload.value("part", str)
        if part not in PARTS:
            raise MessageFormatError(f"part must be 'fit' or 'all', got {part!r}")
        return UpdatesRequest(wire.reference(payload), tuple(payload.floats("taus")), part)

    def encode_reply(self, reply: LocalHeads, request: UpdatesRequest) -> Payload:
        return Payload(arrays={UPDATES: array_list([u.to_arrays() for u in reply])})

    def decode_reply(
        self, payload: ReceivedPayload, request: UpdatesRequest, wire: ServerWire
    ) -> LocalHeads:
        head, C, m = wire.head, wire.classes.shape[0], wire.dimension
        n = len(request.taus)
        arrays = payload.array_list(
            UPDATES, n, max_bytes=n * head.strategy.max_update_bytes(head, C, m)
        )
        return LocalHeads(
            head.decode_statistics(a, classes=wire.classes, n_features=m) for a in arrays
        )


class RefitStage(UpdatesStage):
    """Stage "refit": the same exchange after a choice, local heads at the chosen ``tau``.

    Never under privacy: a private run has a fixed ``tau`` and makes its
    final head at the updates stage, its one local head release.
    """

    name = "refit"

    def private_problem(self, party: Party, request: UpdatesRequest) -> str | None:
        return "a refit: a private run makes its one local head at the updates stage"


STAGE = UpdatesStage()
REFIT = RefitStage()
