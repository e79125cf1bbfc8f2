"""The transports' server side, written once, and the in-process transport.

:class:`CodecTransport` is what both transports share: each request encoded
by its stage's codec, each reply decoded with the server's checks
(:meth:`~skslot.protocol.stages.Stage.decode_replies`).  A transport adds
how the payloads travel (:meth:`CodecTransport.deliver`): to a
:class:`~skslot.protocol.ClientParty` in this process
(:class:`InProcessTransport`), or as Flower messages
(:class:`~skslot.flower.FlowerTransport`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import check_option
from .client import ClientParty
from .stages import STAGES, ServerWire, Stage
from .transport import Exchange

if TYPE_CHECKING:
    from ..heads import OneShotHead
    from ..wire.payload import Payload, ReceivedPayload

__all__ = ["CodecTransport", "InProcessTransport"]


class CodecTransport:
    """A transport whose messages are the stages' payloads (:class:`~skslot.protocol.Transport`).

    Parameters
    ----------
    **wire
        The run's wire settings and bounds (:class:`~skslot.protocol.ServerWire`:
        ``summary_dtype``, ``n_features``, ``max_dimension``).
    """

    def __init__(self, **wire: Any) -> None:
        self.wire_settings = wire
        self.wire: ServerWire | None = None

    def open(self, head: OneShotHead, classes: np.ndarray) -> None:
        """Start a run: the head and class set its replies are decoded with.

        Parameters
        ----------
        head : OneShotHead
            The run's head: it decodes the statistics and bounds their size.
        classes : ndarray
            The run's class set.
        """
        self.wire = ServerWire(head, np.asarray(classes), **self.wire_settings)

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """Each request of ``stage`` encoded, delivered, and its reply decoded and checked.

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        requests : mapping of address to request

        Returns
        -------
        Exchange
        """
        wire = self.wire
        if wire is None:
            raise RuntimeError("the transport is not open: a protocol run opens it")
        codec, result = STAGES[stage], Exchange()
        sent = {address: codec.encode_request(r, wire) for address, r in requests.items()}
        replies, rejected = codec.decode_replies(self.deliver(codec, sent, result), requests, wire)
        result.replies.update(replies)
        result.rejected.update(rejected)
        return result

    def deliver(
        self, stage: Stage, payloads: Mapping[Hashable, Payload], result: Exchange
    ) -> dict[Hashable, ReceivedPayload]:
        """Move each request's payload to its client and bring the replies' payloads back.

        Parameters
        ----------
        stage : Stage
            The stage whose messages these are.
        payloads : mapping of address to Payload
            The encoded requests.
        result : Exchange
            Where the clients that refused, failed or did not answer are
            recorded, with the bytes moved where the transport counts them.

        Returns
        -------
        dict of address to ReceivedPayload
            The replies received, to be decoded.
        """
        raise NotImplementedError


class InProcessTransport(CodecTransport):
    """Delivers each request to a :class:`~skslot.protocol.ClientParty` in this process.

    Parameters
    ----------
    clients : mapping of address to ClientParty
        The parties, keyed by the address the driver uses for them (in
        process, the client's label).
    errors : {"raise", "reject"}, default="raise"
        What a client's failing stage does: raise its error to the caller (a
        user's own data, in process), or reject that client with the error
        and go on, as a Flower node's error reply does.

    Notes
    -----
    Each message makes the trip a Flower message makes, in memory: the
    request is encoded by its stage's codec, the client decodes it with its
    checks, answers with its stage's client step and encodes its reply
    (:meth:`ClientParty.serve`, as a Flower ``ClientApp`` does), and the reply
    is decoded with the server's checks
    (:meth:`~skslot.protocol.stages.Stage.decode_replies`).  Every check of a
    reply is thus the one a Flower run makes.  Values travel in float64: an
    in-process run computes what the parties compute (the Flower transport
    casts summaries and the reference to their wire precision).
    """

    def __init__(self, clients: Mapping[Hashable, ClientParty], *, errors: str = "raise") -> None:
        super().__init__(summary_dtype="float64")
        self.clients = dict(clients)
        self.errors = check_option("errors", errors, ("raise", "reject"))

    def parties(self) -> list[Hashable]:
        """The clients' addresses.

        Returns
        -------
        list
        """
        return list(self.clients)

    def deliver(
        self, stage: Stage, payloads: Mapping[Hashable, Payload], result: Exchange
    ) -> dict[Hashable, ReceivedPayload]:
        """Each client's encoded reply to its payload, made by the client in this process.

        Parameters
        ----------
        stage : Stage
            The stage whose messages these are.
        payloads : mapping of address to Payload
            The encoded requests.
        result : Exchange
            Where a client whose step failed is rejected (with ``errors="reject"``).

        Returns
        -------
        dict of address to ReceivedPayload
            The replies, to be decoded.
        """
        received = {}
        for address, payload in payloads.items():
            try:
                reply = self.clients[address].serve(stage.name, payload.received())
            except (ValueError, ArithmeticError, RuntimeError) as exc:
                if self.errors == "raise":
                    raise
                result.rejected[address] = f"client error: {type(exc).__name__}: {exc}"
                continue
            received[address] = reply.received()
        return received
