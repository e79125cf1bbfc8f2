"""The in-process transport: clients are objects holding their rows."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import check_option
from .client import ClientParty
from .stages import STAGES, ClientWire, ServerWire
from .transport import Exchange

if TYPE_CHECKING:
    from ..heads import OneShotHead

__all__ = ["InProcessTransport"]


class InProcessTransport:
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
    request is encoded by its stage's codec and decoded with the client's
    checks (:meth:`~skslot.protocol.stages.Stage.decode_request`), the client
    answers with its stage's client step (:meth:`ClientParty.answer`), as a
    Flower ``ClientApp`` does, and its reply is encoded and decoded with the
    server's checks (:meth:`~skslot.protocol.stages.Stage.decode_replies`).
    Every check of a reply is thus the one a Flower run makes.  Values travel
    in float64: an in-process run computes what the parties compute (the
    Flower transport casts summaries and the reference to their wire
    precision).
    """

    def __init__(self, clients: Mapping[Hashable, ClientParty], *, errors: str = "raise") -> None:
        self.clients = dict(clients)
        self.errors = check_option("errors", errors, ("raise", "reject"))
        self.wire: ServerWire | None = None

    def open(self, head: OneShotHead, classes: np.ndarray) -> None:
        """Start a run: the head and class set its replies are decoded with.

        Parameters
        ----------
        head : OneShotHead
        classes : ndarray
        """
        self.wire = ServerWire(head, np.asarray(classes), summary_dtype="float64")

    def parties(self) -> list[Hashable]:
        """The clients' addresses.

        Returns
        -------
        list
        """
        return list(self.clients)

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """Each client's answer to its request at ``stage``, through the stage's codec.

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        requests : mapping of address to request

        Returns
        -------
        Exchange
        """
        if self.wire is None:
            raise RuntimeError("the transport is not open: a protocol run opens it")
        codec = STAGES[stage]
        result = Exchange()
        payloads = {}
        for address, request in requests.items():
            party = self.clients[address]
            wire = ClientWire(party.classes, int(np.shape(party.X)[1]))
            try:
                received = codec.decode_request(
                    codec.encode_request(request, self.wire).received(), wire
                )
                reply = party.answer(stage, received)
                payloads[address] = codec.encode_reply(reply, received).received()
            except (ValueError, ArithmeticError, RuntimeError) as exc:
                if self.errors == "raise":
                    raise
                result.rejected[address] = f"client error: {type(exc).__name__}: {exc}"
        replies, rejected = codec.decode_replies(payloads, requests, self.wire)
        result.replies.update(replies)
        result.rejected.update(rejected)
        return result
