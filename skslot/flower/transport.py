"""The Flower transport: the protocol's requests and replies as messages over a ``Grid``.

:class:`FlowerTransport` is the server's side: it encodes each request of
the driver (:class:`skslot.protocol.OneShotProtocol`) as a Flower message
(:mod:`skslot.flower.messages`), waits for the replies, and decodes each one
with every check a single message allows (wire format, the configured
dimension bound and class set, sizes capped before anything is allocated).
A node that does not answer in time is *missing*; one whose reply is an
error or fails its checks is *rejected*, with the reason.  Clients are
addressed by their Flower node id, never by a label they declare.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from ..gaussian import GaussianSummary, SummaryFormatError
from ..heads import OneShotHead, StatisticsFormatError
from ..protocol import (
    Evaluation,
    EvaluationRequest,
    Exchange,
    UpdatesRequest,
    Upload,
    UploadRequest,
    ValidationRequest,
)
from ..selection import ValidationCounts
from . import messages

__all__ = ["MESSAGE_TYPES", "FlowerTransport"]

#: The Flower message type of each stage.
MESSAGE_TYPES = {
    "upload": "query.upload",
    "updates": "train.updates",
    "validation": "query.validation",
    "refit": "train.updates",
    "evaluation": "evaluate.head",
}

_DECODE_ERRORS = (messages.ProtocolError, SummaryFormatError, StatisticsFormatError)


class FlowerTransport:
    """Moves the protocol's stages over a Flower ``Grid`` (server side).

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    head : OneShotHead
        The run's head: it decodes the statistics and bounds their size.
    classes : ndarray
        The run's class set.
    summary_dtype : {"float16", "float32", "float64"}
        Precision of the summaries and of the reference on the wire.
    n_features : int, default=0
        The dimension every summary must have (0: any up to ``max_dimension``).
    max_dimension : int, default=4096
    num_clients : int, default=0
        Nodes to wait for (up to ``connect_timeout``); 0 takes whoever is
        connected after ``connect_timeout``.
    connect_timeout, reply_timeout : float
        Seconds to wait for nodes to connect, and for the replies of a stage.
    """

    def __init__(
        self,
        grid: Grid,
        *,
        head: OneShotHead,
        classes: np.ndarray,
        summary_dtype: str = "float32",
        n_features: int = 0,
        max_dimension: int = 4096,
        num_clients: int = 0,
        connect_timeout: float = 60.0,
        reply_timeout: float = 300.0,
    ) -> None:
        self.grid, self.head, self.classes = grid, head, np.asarray(classes)
        self.summary_dtype = summary_dtype
        self.n_features, self.max_dimension = n_features, max_dimension
        self.num_clients = num_clients
        self.connect_timeout, self.reply_timeout = connect_timeout, reply_timeout
        self._dimension: dict[int, int] = {}  # each node's summary dimension, as decoded

    def parties(self) -> list[Hashable]:
        """The connected nodes (waiting up to ``connect_timeout`` for ``num_clients``)."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if (self.num_clients and len(nodes) >= self.num_clients) or (
                time.monotonic() > deadline
            ):
                return nodes
            time.sleep(0.5)

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """Send one message per node, wait for the replies, decode and check each."""
        result = Exchange()
        outgoing = []
        for node, request in requests.items():
            content = self._encode(request)
            result.bytes_sent[node] = messages.payload_bytes(content)
            outgoing.append(
                Message(
                    content,
                    dst_node_id=node,
                    message_type=MESSAGE_TYPES[stage],
                    group_id=stage,
                )
            )
        answered, received = set(), {}
        for reply in self.grid.send_and_receive(outgoing, timeout=self.reply_timeout):
            node = reply.metadata.src_node_id
            if node not in requests or node in answered:
                continue  # not asked, or a duplicate: ignored
            answered.add(node)
            if reply.has_error():
                result.rejected[node] = f"client error: {reply.error.reason}"
                continue
            result.bytes_received[node] = messages.payload_bytes(reply.content)
            received[node] = reply
        result.missing = sorted(set(requests) - answered)
        if stage == "upload":
            self._decode_uploads(received, result)
            return result
        for node, reply in received.items():
            try:
                result.replies[node] = self._decode(node, requests[node], reply)
            except _DECODE_ERRORS as exc:
                result.rejected[node] = str(exc)
        return result

    # -- requests out ------------------------------------------------------------------

    def _reference(self, reference: GaussianSummary | None) -> bytes | None:
        return None if reference is None else reference.to_bytes(self.summary_dtype)

    def _encode(self, request: Any) -> RecordDict:
        if isinstance(request, UploadRequest):
            return messages.upload_request(
                self.summary_dtype, request.client_index, request.split_seed
            )
        if isinstance(request, UpdatesRequest):
            return messages.updates_request(
                self._reference(request.reference), list(request.taus), request.part
            )
        if isinstance(request, ValidationRequest):
            return messages.validation_request(
                self._reference(request.reference), list(request.heads), list(request.taus)
            )
        if isinstance(request, EvaluationRequest):
            return messages.head_request(
                self._reference(request.reference), request.head, request.tau
            )
        raise TypeError(f"no Flower message for a {type(request).__name__}")

    # -- replies in --------------------------------------------------------------------

    def _decode(self, node: int, request: Any, reply: Message) -> Any:
        m, C = self._dimension[node], self.classes.shape[0]
        if isinstance(request, UpdatesRequest):
            n = len(request.taus)
            arrays = messages.read_updates_reply(
                reply,
                n_updates=n,
                max_bytes=n * self.head.protocol.max_update_bytes(self.head, C, m),
            )
            return [
                self.head.decode_statistics(a, classes=self.classes, n_features=m) for a in arrays
            ]
        if isinstance(request, ValidationRequest):
            n = len(request.taus)
            arrays = messages.read_validation_reply(reply, max_bytes=8 * (n + 1) * C + 4096)
            return ValidationCounts.from_arrays(arrays, n_candidates=n, n_classes=C)
        n_correct, n_test = messages.read_evaluation_reply(reply)
        return Evaluation(n_correct, n_test)

    def _decode_uploads(self, received: Mapping[int, Message], result: Exchange) -> None:
        """Every upload: the summaries first, the run's dimension, then each one's statistics.

        The run's dimension is the configured one, or the one most clients
        sent (ties: the smallest); a client with another is rejected.
        """
        summaries = {}
        for node, reply in received.items():
            try:
                payload, *rest = messages.read_upload_reply(reply)
                summary = GaussianSummary.from_bytes(
                    payload,
                    expected_dimension=self.n_features or None,
                    max_dimension=self.max_dimension,
                )
            except _DECODE_ERRORS as exc:
                result.rejected[node] = str(exc)
                continue
            summaries[node] = (summary, len(payload), *rest)
        dims = Counter(summary.dimension for summary, *_ in summaries.values())
        m = self.n_features or (max(dims, key=lambda d: (dims[d], -d)) if dims else 0)
        for node, (summary, size, n_fit, n_test, statistics, validation) in summaries.items():
            try:
                if summary.dimension != m:
                    raise StatisticsFormatError(f"dimension {summary.dimension}, expected {m}")
                if not 1 <= n_fit <= summary.n:
                    raise StatisticsFormatError(
                        f"fitting part of {n_fit} rows, but the summary counts {summary.n}"
                    )
                cap = self.head.protocol.max_upload_bytes(self.head, self.classes.shape[0], m)
                parts = []
                for record, n in ((statistics, n_fit), (validation, summary.n - n_fit)):
                    if record is None:
                        parts.append(None)
                        continue
                    arrays = messages.record_to_arrays(record, max_bytes=cap)
                    parts.append(
                        self.head.decode_statistics(
                            arrays, classes=self.classes, n_features=m, n_samples=n
                        )
                    )
            except _DECODE_ERRORS as exc:
                result.rejected[node] = str(exc)
                continue
            self._dimension[node] = m
            result.replies[node] = Upload(summary, n_fit, n_test, *parts, summary_bytes=size)
