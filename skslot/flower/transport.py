"""The Flower transport: the protocol's requests and replies as messages over a ``Grid``.

:class:`FlowerTransport` is the server's side: it moves bytes.  Each stage's
codec (:data:`skslot.protocol.stages.STAGES`) encodes a request of the driver
and decodes the replies with every check a message allows (wire format, the
configured dimension bound and class set, sizes capped before anything is
allocated); the transport turns payloads into Flower messages
(:mod:`skslot.flower.messages`), waits for the replies, and retries.
A node that does not answer in time is *missing*; one whose reply is an
error or fails its checks is *rejected*, with the reason.  Clients are
addressed by their Flower node id, never by a label they declare (logs show
the label next to the id once the node's summary is decoded).

While it waits for a stage's replies the transport polls the SuperLink
(``Grid.push_messages``, then ``Grid.pull_messages`` until every node has
answered or ``reply_timeout`` is up), logs how many have answered every
``progress_interval`` seconds, and sends a node's message again when the
SuperLink reports it or its reply lost (a reply that expired or whose
contents are unavailable, a node that missed its heartbeats, a push the
SuperLink refused), ``retry_interval`` seconds later and within the same
``reply_timeout``.  A node's first reply counts; later ones are ignored.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from flwr.app import Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid

from ..protocol.in_process import CodecTransport
from ..protocol.report import client_name, logger
from ..protocol.stages import STAGES, Stage
from ..protocol.transport import Exchange
from ..wire import WireFormatError
from ..wire.payload import Payload, ReceivedPayload
from . import messages

__all__ = ["FlowerTransport"]

#: Seconds between the first polls for a stage's replies, and at most.
_FIRST_POLL, _LAST_POLL = 0.05, 0.25


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


@dataclass(eq=False)
class FlowerTransport(CodecTransport):
    """Moves the protocol's stages over a Flower ``Grid`` (server side).

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    summary_dtype : {"float16", "float32", "float64"}, default="float32"
        Precision of the summaries and of the reference on the wire.
    n_features : int, default=0
        The dimension every summary must have (0: any up to ``max_dimension``).
    max_dimension : int, default=4096
        Largest dimension a summary's header may announce.
    num_clients : int, default=0
        Nodes to wait for (up to ``connect_timeout``); 0 takes whoever is
        connected after ``connect_timeout``.
    connect_timeout, reply_timeout : float, default=60, 300
        Seconds to wait for nodes to connect, and for the replies of a stage.
    progress_interval : float, default=10
        Seconds between the progress lines logged while a stage's replies are
        awaited (0: only the line at the stage's end).
    retry_interval : float, default=10
        Seconds before a message the SuperLink reports lost is sent again to
        its node (within ``reply_timeout``).

    Attributes
    ----------
    waits : dict
        Per stage: seconds waited, nodes asked and answered, messages re-sent
        per node, and why each missing node is missing; ``"connect"``: the
        seconds waited for the nodes, and how many there were.
    sources : dict
        Per node that answered the upload, what it says it read (unchecked:
        for the report only), or ``"not said"``.
    """

    grid: Grid
    _: KW_ONLY
    summary_dtype: str = "float32"
    n_features: int = 0
    max_dimension: int = 4096
    num_clients: int = 0
    connect_timeout: float = 60.0
    reply_timeout: float = 300.0
    progress_interval: float = 10.0
    retry_interval: float = 10.0

    def __post_init__(self) -> None:
        wire = ("summary_dtype", "n_features", "max_dimension")
        super().__init__(**{name: getattr(self, name) for name in wire})
        self.waits: dict[str, dict] = {}
        self.sources: dict[Hashable, str] = {}
        self._labels: dict[Hashable, Any] = {}  # the label each node's summary declared

    def parties(self) -> list[Hashable]:
        """The connected nodes (waiting up to ``connect_timeout`` for ``num_clients``).

        Returns
        -------
        list of int
            The nodes' ids, sorted.
        """
        start = time.monotonic()
        while True:
            nodes: list[Hashable] = [*sorted(self.grid.get_node_ids())]
            waited = time.monotonic() - start
            if waited > self.connect_timeout or (
                self.num_clients and len(nodes) >= self.num_clients
            ):
                break
            time.sleep(0.5)
        self.waits["connect"] = {"seconds": round(waited, 3), "nodes": len(nodes)}
        logger.info("skslot: %d node(s) connected (%s)", len(nodes), _seconds(waited))
        return nodes

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """Send one message per node, wait for the replies, decode each with its stage's codec
        (:meth:`~skslot.protocol.in_process.CodecTransport.exchange`).

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        requests : mapping of node id to request

        Returns
        -------
        Exchange
        """
        result = super().exchange(stage, requests)
        for node, reply in result.replies.items():
            label = STAGES[stage].label(reply)  # shown in logs once a node names itself
            if label is not None:
                self._labels[node] = label
        return result

    def deliver(
        self, stage: Stage, payloads: Mapping[Hashable, Payload], result: Exchange
    ) -> dict[Hashable, ReceivedPayload]:
        """Each payload as a Flower message to its node; the replies that came in time.

        Parameters
        ----------
        stage : Stage
            The stage whose messages these are.
        payloads : mapping of node id to Payload
            The encoded requests.
        result : Exchange
            Where the bytes sent and received are counted, a node whose reply
            is an error or not a well-formed message is rejected, and one that
            did not answer in time is missing (with why).

        Returns
        -------
        dict of node id to ReceivedPayload
            The replies received, to be decoded.
        """
        contents = {node: messages.content(payload) for node, payload in payloads.items()}
        received, sends = self._wait(stage, contents, result.missing)
        decoded = {}
        for node, content in contents.items():
            result.bytes_sent[node] = messages.payload_bytes(content) * max(sends[node], 1)
            reply = received.get(node)
            if reply is None:  # missing: the wait said why
                continue
            if reply.has_error():
                result.rejected[node] = f"client error: {reply.error.reason}"
                continue
            result.bytes_received[node] = messages.payload_bytes(reply.content)
            if stage.name == "upload":
                self.sources[node] = messages.source_of(reply) or "not said"
            try:
                decoded[node] = messages.received(reply)
            except WireFormatError as exc:
                result.rejected[node] = str(exc)
        return decoded

    # -- waiting for a stage's replies -------------------------------------------------

    def name(self, node: Hashable) -> str:
        """How logs name a node: its id, and the label its summary declared once decoded.

        Parameters
        ----------
        node : int
            The node's id.

        Returns
        -------
        str
        """
        return client_name(node, self._labels.get(node))

    def _wait(
        self, stage: Stage, contents: Mapping[Hashable, RecordDict], missing: dict[Hashable, str]
    ) -> tuple[dict[Hashable, Message], Counter]:
        """Push the stage's messages, then poll for the replies until all came or time is up.

        Returns each node's first reply (later ones, and replies from nodes
        not asked, are ignored) and how many times each node was sent its
        message; why each node that did not answer is missing goes to
        ``missing``.  A message the SuperLink reports lost (its reply expired
        or unavailable, the node unavailable, or the push refused) is sent
        again to that node after ``retry_interval`` seconds, within the
        stage's ``reply_timeout``; a node that has not answered by then is
        missing.  A progress line is logged every ``progress_interval``
        seconds while the server waits, and one when the stage ends.
        """
        kind = stage.message_type
        due = dict.fromkeys(contents, 0.0)  # nodes to (re)send to, and when
        pending: dict[str, Hashable] = {}  # message id -> node, sent and not answered
        answered: dict[Hashable, Message] = {}
        sends: Counter = Counter()
        lost: dict[Hashable, str] = {}

        def retry(node: Hashable, why: str, what: str) -> None:
            lost[node], due[node] = why, time.monotonic() + self.retry_interval
            logger.warning(
                "skslot: stage %s: %s; sending it again in %g s",
                stage.name,
                what,
                self.retry_interval,
            )

        def push(ready: list) -> None:
            outgoing = [
                Message(contents[n], dst_node_id=n, message_type=kind, group_id=stage.name)
                for n in ready
            ]
            ids = dict(zip(ready, self.grid.push_messages(outgoing), strict=False))
            for node in ready:
                if ids.get(node):
                    pending[ids[node]] = node
                    sends[node] += 1
                    del due[node]
                else:
                    why = "the SuperLink did not take the message"
                    retry(node, why, f"{why} to {self.name(node)}")

        def progress(waiting: str = "") -> None:
            elapsed = _seconds(time.monotonic() - start)
            done = f"{len(answered)} of {len(contents)} clients answered"
            logger.info("skslot: stage %s: %s (%s)%s", stage.name, done, elapsed, waiting)

        push(list(contents))
        start = time.monotonic()  # as Grid.send_and_receive: the timeout runs from the push
        deadline = start + self.reply_timeout
        next_line = start + self.progress_interval
        pause = _FIRST_POLL
        while True:
            now = time.monotonic()
            ready = [node for node, at in due.items() if at <= now]
            if ready:
                push(ready)
            for reply in self.grid.pull_messages(list(pending)) if pending else []:
                meta = reply.metadata
                if meta.src_node_id == SUPERLINK_NODE_ID:  # the SuperLink's note: lost on the way
                    node = pending.pop(meta.reply_to_message_id, None)
                    if node is not None and node not in answered and node not in pending.values():
                        why = str(reply.error.reason) if reply.has_error() else "no reply"
                        what = f"the message to {self.name(node)} or its reply was lost ({why})"
                        retry(node, why, what)
                elif meta.src_node_id in contents and meta.src_node_id not in answered:
                    node = meta.src_node_id  # else not asked, or a duplicate: ignored
                    answered[node] = reply
                    due.pop(node, None)
                    for message_id in [m for m, n in pending.items() if n == node]:
                        del pending[message_id]
            now = time.monotonic()
            if len(answered) == len(contents) or now >= deadline:
                break
            if self.progress_interval and now >= next_line:
                waiting = [self.name(node) for node in contents if node not in answered]
                more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
                progress(f"; waiting for {', '.join(waiting[:3])}{more}")
                next_line = now + self.progress_interval
            wake = min([deadline, *due.values()] + ([next_line] if self.progress_interval else []))
            time.sleep(max(0.0, min(pause, wake - now)))
            pause = min(2 * pause, _LAST_POLL)
        late = f"did not answer within reply-timeout = {self.reply_timeout:g} s"
        reasons = {
            node: f"{late}: hung or disconnected"
            + (f" (sent {sends[node]} times; last lost: {lost[node]})" if node in lost else "")
            for node in contents
            if node not in answered
        }
        missing.update(reasons)
        self.waits[stage.name] = {
            "seconds": round(time.monotonic() - start, 3),
            "asked": len(contents),
            "answered": len(answered),
            "resent": {node: sends[node] - 1 for node in contents if sends[node] > 1},
            "missing": reasons,
        }
        progress()  # the driver warns about each missing node, with the reason given here
        return answered, sends
