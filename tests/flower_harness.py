"""An in-process Flower ``Grid`` that delivers messages to ``ClientApp`` handlers.

The server logic runs unchanged against it; each node has its own ``Context``
(node config, persistent state), and a per-node *fault* can drop or tamper
with that node's replies, which is how the fault tests (and
``benchmarks/attacks.py``) play a client that times out or turns hostile.
The faults they share are at the end of this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from skslot import GaussianSummary
from skslot.flower import messages
from skslot.flower.outputs import LATEST
from skslot.heads import ClassStatistics, FedCGSClassifier
from skslot.protocol import Evaluation, ServerWire, UploadRequest
from skslot.protocol.stages import evaluation as evaluation_stage
from skslot.protocol.stages import updates as updates_stage
from skslot.protocol.stages import upload as upload_stage
from skslot.wire.payload import ReceivedPayload

SERVER_NODE_ID = SUPERLINK_NODE_ID  # the ServerApp's node id, as Flower's runtime sets it


def as_server_app() -> None:
    """What Flower's runtime sets in a ServerApp process before calling main()."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SERVER_NODE_ID, 1


def write_node_files(
    folder: Path,
    X: np.ndarray,
    y: np.ndarray,
    client: np.ndarray,
    *,
    first_node: int,
    train_fraction: float,
) -> dict[int, dict]:
    """Each client's rows in its own ``.npz`` (the user's-own-data mode), by node id.

    The first ``train_fraction`` of a client's rows train, the rest test;
    node ids count from ``first_node``; returns each node's node config.
    """
    configs = {}
    for k in np.unique(client):
        rows = np.flatnonzero(client == k)
        n_train = round(len(rows) * train_fraction)
        train, test = rows[:n_train], rows[n_train:]
        path = folder / f"client{k}.npz"
        np.savez(path, X_train=X[train], y_train=y[train], X_test=X[test], y_test=y[test])
        configs[first_node + int(k)] = {"data": str(path), "client-id": int(k)}
    return configs


#: fault(request, reply) -> the reply to deliver, None to drop it, or a list of replies
Fault = Callable[[Message, Message], Message | list | None]


class LocalGrid(Grid):
    """Delivers each pushed message to the ClientApp at once; its reply is pulled later.

    Like Flower's ``HttpGrid``, a pushed message gets its object id as message
    id and replies are pulled by the ids of the messages they answer.
    ``latency`` (seconds per node) holds a node's replies back that long after
    the push, so a test can play a slow or hung node; a fault may drop a reply
    (``None``), replace it, also with the SuperLink's own error message
    (:func:`lost_reply`), or answer more than once (a list).
    """

    def __init__(
        self,
        client_app: ClientApp,
        node_configs: dict[int, dict],
        run_config: dict,
        faults: dict[int, Fault] | None = None,
        latency: dict[int, float] | None = None,
    ) -> None:
        self.client_app = client_app
        self.contexts = {
            node: Context(
                run_id=1, node_id=node, node_config=nc, state=RecordDict(), run_config=run_config
            )
            for node, nc in node_configs.items()
        }
        self.faults = faults or {}
        self.latency = latency or {}
        self.delivered: list[tuple[int, str]] = []
        self.messages: list[Message] = []
        self._pending: dict[str, list] = {}  # message id -> [(when, reply)]
        as_server_app()

    def set_run(self, run_id: int) -> None:  # pragma: no cover - not used by the apps
        pass

    @property
    def run(self):  # pragma: no cover
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl
        )

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def _deliver(self, message: Message) -> Message | None:
        node = message.metadata.dst_node_id
        self.delivered.append((node, message.metadata.message_type))
        self.messages.append(message)
        try:
            reply = self.client_app(message, self.contexts[node])
        except Exception as exc:  # what a SuperNode sends back when the app raises
            reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=message)
        fault = self.faults.get(node)
        return fault(message, reply) if fault else reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id  # as HttpGrid does
            ids.append(message.metadata.message_id)
            replies = self._deliver(message)
            when = time.monotonic() + self.latency.get(message.metadata.dst_node_id, 0.0)
            for reply in replies if isinstance(replies, list) else [replies]:
                if reply is not None:
                    self._pending.setdefault(ids[-1], []).append((when, reply))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        now = time.monotonic()
        pulled = []
        for i in message_ids:
            pulled += [reply for when, reply in self._pending.get(i, []) if when <= now]
            self._pending[i] = [(w, r) for w, r in self._pending.get(i, []) if w > now]
            if not self._pending[i]:
                del self._pending[i]
        return pulled

    def send_and_receive(self, messages, *, timeout=None):  # pragma: no cover - not used
        raise NotImplementedError("the transport pushes and pulls")


def lost_reply(message_type: str, times: int = 1) -> Fault:
    """The node's first ``times`` replies to ``message_type`` lost on the way.

    The server gets what the SuperLink sends in that case: its own error
    message (from the SuperLink's node id) saying the reply is unavailable,
    as after a restart that lost it.
    """
    lost = [0]

    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != message_type or lost[0] >= times:
            return reply
        lost[0] += 1
        note = Message(
            Error(code=ErrorCode.REPLY_MESSAGE_UNAVAILABLE, reason="Reply Message Unavailable"),
            reply_to=request,
        )
        note.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
        return note

    return fault


# -- messages built with the stages' codecs ------------------------------------------------------


def upload_request(node: int, dtype: str = "float64", **settings) -> Message:
    """The server's upload request to ``node``, as the Flower transport sends it."""
    wire = ServerWire(FedCGSClassifier(), np.arange(4), summary_dtype=dtype)
    payload = upload_stage.STAGE.encode_request(UploadRequest(0, **settings), wire)
    return Message(messages.content(payload), dst_node_id=node, message_type="query.upload")


def evaluation_reply(
    request: Message, n_correct: int, n_test: int, own_mix: float | None = None
) -> Message:
    """A client's evaluation reply with the given counts (and own-mix accuracy)."""
    payload = evaluation_stage.STAGE.encode_reply(Evaluation(n_correct, n_test, own_mix), None)
    return Message(messages.content(payload), reply_to=request)


def record_arrays(record: ArrayRecord, *, max_bytes: int) -> dict[str, np.ndarray]:
    """A received ``ArrayRecord``'s arrays, read as a stage's decoder reads them."""
    payload = ReceivedPayload({}, {"record": {k: a.data for k, a in record.items()}}, {})
    return payload.arrays("record", max_bytes=max_bytes)


def evaluated_rows(reply: Message) -> int:
    """The test rows an evaluation reply counts."""
    return messages.received(reply).metric(evaluation_stage.EVALUATION, "n-test", int)


# -- faults of a hostile client: every message still valid on the wire --------------------------


def rewrite_upload(
    request: Message, reply: Message, summary=None, config=None, statistics=None, drop=()
) -> Message:
    """The upload reply with a replaced summary, config values or statistics arrays, and
    without the groups of arrays named in ``drop``."""
    values = dict(reply.content.config_records[messages.CONFIG])
    if summary is not None:
        values["summary"] = summary.to_bytes("float64")
    values.update(config or {})
    content = RecordDict({messages.CONFIG: ConfigRecord(values)})
    for name, record in reply.content.array_records.items():
        if name not in drop:
            content[name] = record
    if statistics is not None:
        record = reply.content.array_records[upload_stage.STATISTICS]
        arrays = {n: a.numpy() for n, a in record.items()}
        content[upload_stage.STATISTICS] = messages.arrays_to_record(statistics(arrays))
    return Message(content, reply_to=request)


def sends_summary(reply: Message) -> bool:
    """Whether the upload carries a summary (a FedCGS client sends its shrinkage instead)."""
    return "summary" in reply.content.config_records[messages.CONFIG]


def own_summary(reply: Message) -> GaussianSummary:
    """The summary a client's upload reply carries, or the one the server derives from it."""
    config = reply.content.config_records[messages.CONFIG]
    if sends_summary(reply):
        return GaussianSummary.from_bytes(config["summary"])
    record = reply.content.array_records[upload_stage.STATISTICS]
    arrays = {n: a.numpy() for n, a in record.items()}
    C, m = arrays["sums"].shape
    fitting = ClassStatistics.from_arrays(arrays, classes=np.arange(C), n_features=m)
    return fitting.summary(  # of the fitting rows
        config["shrinkage"],
        covariance="total",
        covariance_floor=1e-8,
        client=config.get("label"),
    )


def tamper_statistics(edit: Callable) -> Fault:
    """The upload's head statistics replaced by ``edit(arrays)`` (values may be raw ``Array``s)."""

    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "query.upload" or reply.has_error():
            return reply
        record = reply.content.array_records[upload_stage.STATISTICS]
        arrays = {name: array.numpy() for name, array in record.items()}
        raw = edit(arrays)
        record = ArrayRecord(
            {name: a if isinstance(a, Array) else Array(a) for name, a in raw.items()}
        )
        content = RecordDict({messages.CONFIG: reply.content.config_records[messages.CONFIG]})
        for name, kept in reply.content.array_records.items():  # the validation part stays
            content[name] = kept
        content[upload_stage.STATISTICS] = record
        return Message(content, reply_to=request)

    return fault


def scaled_summary(factor: float, shift: float = 0.0, class_sums: bool = True) -> Fault:
    """The client's true summary, valid on the wire, but its covariance scaled and mean shifted
    (and, without ``class_sums``, none of the class sums asked for: as a client whose summary
    is private sends)."""

    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "query.upload":
            return reply
        own = own_summary(reply)
        mean, covariance = own.mean + shift, own.covariance * factor
        summary = GaussianSummary(own.n, mean, covariance, client=own.client)
        drop = () if class_sums else (upload_stage.CLASS_SUMS,)
        return rewrite_upload(request, reply, summary, drop=drop)

    return fault


def inflated_count(factor: int) -> Fault:
    """Declares ``factor`` times its rows, consistently in every message."""

    def fault(request: Message, reply: Message) -> Message:
        kind = request.metadata.message_type
        if kind == "query.upload":
            own = own_summary(reply)
            summary = GaussianSummary(own.n * factor, own.mean, own.covariance, client=own.client)
            config = {"n-fit": reply.content.config_records[messages.CONFIG]["n-fit"] * factor}
            if not sends_summary(reply):  # FedCGS: the summary follows from the statistics
                summary = None
            if upload_stage.STATISTICS not in reply.content.array_records:
                return rewrite_upload(request, reply, summary, config)
            scaled = ("n", "counts", "sums", "s1", "gram_upper")
            return rewrite_upload(
                request,
                reply,
                summary,
                config,
                lambda a: {k: v * factor if k in scaled else v for k, v in a.items()},
            )
        if kind == "train.updates":
            return _rewrite_updates(request, reply, lambda n: n.endswith(".n"), factor)
        return reply

    return fault


def scaled_heads(factor: float) -> Fault:
    """O-FedAvg local heads (coefficients and intercepts) times ``factor``."""

    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "train.updates":
            return reply
        return _rewrite_updates(request, reply, lambda n: n.endswith(("coef", "intercept")), factor)

    return fault


def _rewrite_updates(
    request: Message, reply: Message, selected: Callable[[str], bool], factor: float
) -> Message:
    """The updates reply with the ``selected`` arrays multiplied by ``factor``."""
    return rewrite_updates(
        request, reply, lambda a: {n: v * factor if selected(n) else v for n, v in a.items()}
    )


def rewrite_updates(request: Message, reply: Message, edit: Callable[[dict], dict]) -> Message:
    """The updates reply (local heads) with its arrays replaced by ``edit(arrays)``."""
    record = reply.content.array_records[updates_stage.UPDATES]
    arrays = edit({n: a.numpy() for n, a in record.items()})
    content = RecordDict({updates_stage.UPDATES: messages.arrays_to_record(arrays)})
    return Message(content, reply_to=request)


def read_pointer(output_dir: Path, name: str = LATEST) -> Path:
    """The run folder a pointer file of ``output_dir`` (``latest``, ``last-completed``) names."""
    return output_dir / (output_dir / name).read_text().strip()
