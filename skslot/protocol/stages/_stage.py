"""What a stage of the protocol is made of, and the settings its codec reads."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

import numpy as np

from ...gaussian import GaussianSummary
from ...heads import LinearScores
from ...wire import MessageFormatError, StatisticsFormatError, WireFormatError
from ...wire.payload import ConfigValue, Payload, ReceivedPayload

if TYPE_CHECKING:
    from ...heads import OneShotHead
    from ..party import Party

__all__ = ["ClientWire", "ServerWire", "Stage"]

Request = TypeVar("Request")
Reply = TypeVar("Reply")


@dataclass
class ServerWire:
    """What the server's side of a codec reads: the run's settings and bounds.

    Parameters
    ----------
    head : OneShotHead
        The run's head: it decodes the statistics and bounds their size.
    classes : ndarray
        The run's class set.
    summary_dtype : {"float16", "float32", "float64"}, default="float32"
        Precision of the summaries and of the reference on the wire.
    n_features : int, default=0
        The dimension every summary must have (0: the one most clients send).
    max_dimension : int, default=4096
        Largest dimension a summary's header may announce.
    dimension : int, default=0
        The run's dimension, once the uploads are decoded.
    """

    head: OneShotHead
    classes: np.ndarray
    summary_dtype: str = "float32"
    n_features: int = 0
    max_dimension: int = 4096
    dimension: int = 0

    def with_reference(
        self, values: dict[str, ConfigValue], reference: GaussianSummary | None
    ) -> dict[str, ConfigValue]:
        """A request's settings with the reference, where it travels, in the run's precision.

        Parameters
        ----------
        values : dict
            The request's other settings.
        reference : GaussianSummary or None
            ``None`` where the client already holds it.

        Returns
        -------
        dict
        """
        if reference is not None:
            values["reference"] = reference.smaller_bytes(self.summary_dtype)
        return values


@dataclass(frozen=True)
class ClientWire:
    """What a client's side of a codec reads: the run's class set and its own dimension.

    Parameters
    ----------
    classes : ndarray
        The run's class set.
    n_features : int
        The dimension of the client's rows.
    """

    classes: np.ndarray
    n_features: int

    def reference(self, payload: ReceivedPayload) -> GaussianSummary | None:
        """The reference a request carries, if any, at this client's dimension.

        Parameters
        ----------
        payload : ReceivedPayload

        Returns
        -------
        GaussianSummary or None
        """
        data = payload.optional("reference", bytes)
        if data is None:
            return None
        return GaussianSummary.from_bytes(data, expected_dimension=self.n_features)

    @property
    def head_bytes(self) -> int:
        """Most bytes one head of the run's classes and this dimension takes on the wire."""
        return 8 * (self.classes.shape[0] + 1) * (self.n_features + 1) + 4096

    @property
    def reference_bytes(self) -> int:
        """Most bytes one reference of this dimension takes on the wire (in float64): it
        travels in the smaller of its forms (:meth:`~skslot.GaussianSummary.smaller_form`), so
        at most the dense form's ``m (m + 3) / 2`` values."""
        m = self.n_features
        return 8 * (m * (m + 3) // 2) + 4096

    def head(self, arrays: Mapping[str, np.ndarray]) -> LinearScores:
        """A received head, checked against the run's classes and this client's dimension.

        Parameters
        ----------
        arrays : mapping of str to ndarray

        Returns
        -------
        LinearScores

        Raises
        ------
        MessageFormatError
            If the head's arrays do not have the expected names and shapes.
        """
        try:
            return LinearScores.from_arrays(
                arrays, classes=self.classes, n_features=self.n_features
            )
        except StatisticsFormatError as exc:
            raise MessageFormatError(f"head: {exc}") from None


class Stage(Generic[Request, Reply]):
    """One exchange of the protocol: its messages, the client's step and their codec.

    Each stage module subclasses it once (its class docstring says what the
    stage's messages hold) and the table :data:`skslot.protocol.stages.STAGES`
    holds one instance per exchange.  The server's check of a reply is the
    module's ``check`` function (its arguments are the stage's own), also
    reachable as :attr:`check`.
    """

    #: The stage's name in reports and logs.
    name: ClassVar[str]
    #: The Flower message type (``"<category>.<action>"``) it travels as.
    message_type: ClassVar[str]
    #: The request the server sends and the reply a client returns.
    request: ClassVar[type]
    reply: ClassVar[type]
    #: The server's check of a decoded reply against what the client sent before.
    check: ClassVar[Callable[..., str | None]]

    def private_problem(self, party: Party, request: Request) -> str | None:
        """Why a client under a privacy budget refuses ``request``, or ``None`` where its reply
        is a release its plan declares (:mod:`skslot.privacy`).

        Reads the request, the client's budget and its state of the run, never
        its rows, and changes nothing.  By default a stage's reply is a
        release of no plan: only the stages that carry one
        (:data:`~skslot.privacy.RELEASE_PLAN`) say when they answer.

        Parameters
        ----------
        party : Party
            A client with a privacy budget.
        request : object
            The stage's request, as received.

        Returns
        -------
        str or None
            The reason, for the client's own log.
        """
        return f"the {self.name!r} stage's reply is a release of no privacy plan"

    def answer(self, party: Party, request: Request) -> Reply:
        """The client's step: its reply to ``request``.

        Parameters
        ----------
        party : Party
            The client: its rows and its state of the run (updated in place).
        request : object
            The stage's request, as received.

        Returns
        -------
        object
            The stage's reply.
        """
        raise NotImplementedError

    def encode_request(self, request: Request, wire: ServerWire) -> Payload:
        """The server's side: a request as a payload.

        Parameters
        ----------
        request : object
            The stage's request.
        wire : ServerWire
            The run's wire settings (the reference's precision).

        Returns
        -------
        Payload
        """
        raise NotImplementedError

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> Request:
        """The client's side: the request a payload carries, each value checked.

        Parameters
        ----------
        payload : ReceivedPayload
        wire : ClientWire
            The run's class set and the client's dimension.

        Returns
        -------
        object
            The stage's request.

        Raises
        ------
        WireFormatError
            If a part is missing, malformed or too large.
        """
        raise NotImplementedError

    def encode_reply(self, reply: Reply, request: Request) -> Payload:
        """The client's side: its reply as a payload.

        Parameters
        ----------
        reply : object
            The stage's reply.
        request : object
            The request it answers.

        Returns
        -------
        Payload
        """
        raise NotImplementedError

    def decode_reply(self, payload: ReceivedPayload, request: Request, wire: ServerWire) -> Reply:
        """The server's side: the reply a payload carries, of the sizes the request implies.

        Parameters
        ----------
        payload : ReceivedPayload
        request : object
            What the client was asked.
        wire : ServerWire
            The run's settings and bounds.

        Returns
        -------
        object
            The stage's reply (tied to the client's other messages by :attr:`check`).

        Raises
        ------
        WireFormatError
            If a part is missing, malformed or too large.
        """
        raise NotImplementedError

    def label(self, reply: Reply) -> int | str | None:
        """The name a client gives itself in ``reply``, shown in logs, never trusted.

        Parameters
        ----------
        reply : object
            A decoded reply.

        Returns
        -------
        int, str or None
            ``None`` where the stage's replies carry none.
        """
        return None

    def decode_replies(
        self,
        payloads: Mapping[Hashable, ReceivedPayload],
        requests: Mapping[Hashable, Request],
        wire: ServerWire,
    ) -> tuple[dict[Hashable, Reply], dict[Hashable, str]]:
        """Every received reply decoded, or the reason it was refused.

        Each reply is decoded alone (:meth:`decode_reply`) unless the stage's
        replies are decoded together (the uploads fix the run's dimension).

        Parameters
        ----------
        payloads : mapping of address to ReceivedPayload
        requests : mapping of address to request
            What each client was asked.
        wire : ServerWire

        Returns
        -------
        replies : dict
            The decoded replies, by address.
        rejected : dict
            Why each other reply was refused, by address.
        """
        replies, rejected = {}, {}
        for address, payload in payloads.items():
            try:
                replies[address] = self.decode_reply(payload, requests[address], wire)
            except WireFormatError as exc:
                rejected[address] = str(exc)
        return replies, rejected
