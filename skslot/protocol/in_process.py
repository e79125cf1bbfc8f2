"""The in-process transport: clients are objects holding their rows."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from .._validation import check_option
from .client import ClientParty
from .transport import Exchange

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
    Requests and replies are the protocol's objects themselves: nothing is
    encoded, so an in-process run computes exactly what the parties compute
    (the Flower transport casts summaries to their wire precision).  Each
    client answers with its stage's client step (:meth:`ClientParty.answer`), as
    a Flower ``ClientApp`` does.
    """

    def __init__(self, clients: Mapping[Hashable, ClientParty], *, errors: str = "raise") -> None:
        self.clients = dict(clients)
        self.errors = check_option("errors", errors, ("raise", "reject"))

    def parties(self) -> list[Hashable]:
        """The clients' addresses.

        Returns
        -------
        list
        """
        return list(self.clients)

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """Each client's answer to its request at ``stage``.

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        requests : mapping of address to request

        Returns
        -------
        Exchange
        """
        result = Exchange()
        for address, request in requests.items():
            try:
                result.replies[address] = self.clients[address].answer(stage, request)
            except (ValueError, ArithmeticError, RuntimeError) as exc:
                if self.errors == "raise":
                    raise
                result.rejected[address] = f"client error: {type(exc).__name__}: {exc}"
        return result
