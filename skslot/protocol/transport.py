"""How the driver reaches the clients: the transport's interface and what an exchange returns."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..heads import OneShotHead

__all__ = ["Exchange", "Transport"]


@dataclass
class Exchange:
    """What one stage brought back from the clients it asked.

    Parameters
    ----------
    replies : dict
        The decoded replies of the clients that answered with valid ones.
    rejected : dict
        Why each other answer was refused (an error raised by the client, or
        a message that failed its checks).
    missing : dict
        For each client that did not answer in time, what the transport
        knows of why.
    bytes_sent, bytes_received : dict
        Per client, where the transport counts them.
    """

    replies: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    bytes_sent: dict = field(default_factory=dict)
    bytes_received: dict = field(default_factory=dict)


class Transport(Protocol):
    """How the driver reaches the clients.

    ``open(head, classes)`` starts a run (the head and class set its replies
    are decoded with); ``parties()`` lists the clients' addresses; ``exchange(stage, requests)``
    delivers one request object per addressed client and returns the replies,
    each decoded and checked by the stage's codec
    (:meth:`~skslot.protocol.stages.Stage.decode_replies`): whatever the
    transport, a client's reply reaches the server's step through the same
    checks.  A transport moves messages and nothing else: what a
    stage's messages hold and how they are encoded is the stage's
    (:mod:`skslot.protocol.stages`).
    """

    def open(self, head: OneShotHead, classes: np.ndarray) -> None:
        """Start a run: the head and class set its replies are decoded with.

        Parameters
        ----------
        head : OneShotHead
        classes : ndarray
        """

    def parties(self) -> list[Hashable]:
        """The clients' addresses.

        Returns
        -------
        list of hashable
        """

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """Deliver each request of ``stage`` and return the replies.

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        requests : mapping of address to request
            One request object per addressed client.

        Returns
        -------
        Exchange
            The decoded, checked replies, and the refused and missing clients.
        """
