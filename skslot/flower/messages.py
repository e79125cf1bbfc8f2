"""The protocol's Flower messages: what each stage carries, and its checks.

Four exchanges, each a ``Message`` the server sends and the reply it gets:

=====================  ===============================  ==================================
message type           server sends                     client replies
=====================  ===============================  ==================================
``query.summary``      the summary dtype                its :class:`~skslot.GaussianSummary`
                                                        bytes and its class labels
``train.statistics``   the reference summary bytes,     its head statistics (named arrays)
                       ``tau``, the global classes
``evaluate.head``      the global head (linear scores)  accuracy on its local test split
=====================  ===============================  ==================================

Summaries use skslot's own wire format (:meth:`GaussianSummary.to_bytes`);
arrays travel in Flower ``ArrayRecord`` objects, which write them with
``np.save(allow_pickle=False)``.  On receipt nothing is unpickled: an array's
``.npy`` header is parsed and checked (numeric or string dtype, declared size
equal to the bytes present, total under a cap) *before* NumPy allocates it, so
a hostile header cannot make the server allocate terabytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from ..heads import LinearScores, StatisticsFormatError

__all__ = [
    "ProtocolError",
    "arrays_to_record",
    "evaluation_reply",
    "head_request",
    "payload_bytes",
    "read_evaluation_reply",
    "read_head_request",
    "read_statistics_reply",
    "read_statistics_request",
    "read_summary_reply",
    "read_summary_request",
    "record_to_arrays",
    "statistics_reply",
    "statistics_request",
    "summary_reply",
    "summary_request",
]

#: Record names used in every message's content.
CONFIG = "skslot"
LABELS = "labels"
STATISTICS = "statistics"
HEAD = "head"
EVALUATION = "evaluation"

#: Largest number of distinct class labels a client may announce.
MAX_CLASSES = 100_000


class ProtocolError(ValueError):
    """A received message does not follow the protocol (missing or malformed parts)."""


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Named NumPy arrays as a Flower ``ArrayRecord`` (``np.save``, no pickle)."""
    return ArrayRecord({name: Array(np.asarray(a, order="C")) for name, a in arrays.items()})


def _npy_header(data: bytes) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and header length of an ``.npy`` buffer, from its header only."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }[version]
        shape, _, dtype = read_header(stream)
    except (KeyError, ValueError, OSError, SyntaxError, TypeError) as exc:
        raise ProtocolError(f"not a valid .npy array ({exc})") from None
    return shape, dtype, stream.tell()


def record_to_arrays(
    record: Any, *, max_bytes: int, string_keys: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Decode a received ``ArrayRecord`` into NumPy arrays, safely.

    Parameters
    ----------
    record : ArrayRecord
    max_bytes : int
        Reject the record if its arrays hold more bytes in total.
    string_keys : tuple of str
        Arrays that may hold strings (class labels); all others must be
        numeric.

    Raises
    ------
    ProtocolError
        If the record is not an ``ArrayRecord``, is too large, or holds an
        array that is not a plain ``.npy`` of an allowed dtype whose size
        matches its header.
    """
    if not isinstance(record, ArrayRecord):
        raise ProtocolError(f"expected an ArrayRecord, got {type(record).__name__}")
    total = sum(len(array.data) for array in record.values())
    if total > max_bytes:
        raise ProtocolError(f"arrays hold {total} bytes, more than the {max_bytes} allowed")
    out = {}
    for name, array in record.items():
        shape, dtype, header_length = _npy_header(array.data)
        allowed = "iufU" if name in string_keys else "iuf"
        if dtype.hasobject or dtype.kind not in allowed:
            raise ProtocolError(f"array {name!r} has dtype {dtype}, not one of kinds {allowed!r}")
        if (
            any(s < 0 for s in shape)
            or math.prod(shape) * dtype.itemsize != len(array.data) - header_length
        ):
            raise ProtocolError(f"array {name!r}: its header does not match its size")
        out[name] = np.load(io.BytesIO(array.data), allow_pickle=False)
    return out


def content_record(message: Message, name: str, kind: type) -> Any:
    """One record of a received message, checked for presence and type."""
    if message.has_error():
        raise ProtocolError(f"the other party reported an error: {message.error.reason}")
    records = {
        ConfigRecord: message.content.config_records,
        ArrayRecord: message.content.array_records,
        MetricRecord: message.content.metric_records,
    }[kind]
    record = records.get(name)
    if record is None:
        raise ProtocolError(f"message lacks the {kind.__name__} {name!r}")
    return record


def config_value(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """A typed value of a received ``ConfigRecord`` or ``MetricRecord``."""
    if key not in record:
        raise ProtocolError(f"message lacks {key!r}")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProtocolError(f"{key!r} has type {type(value).__name__}")
    return value


def _labels_record(classes: np.ndarray) -> ArrayRecord:
    return arrays_to_record({"classes": np.asarray(classes)})


def _read_labels(message: Message) -> np.ndarray:
    """The class labels a message carries: 1-D, integers or strings, distinct."""
    arrays = record_to_arrays(
        content_record(message, LABELS, ArrayRecord),
        max_bytes=MAX_CLASSES * 256 + 1024,
        string_keys=("classes",),
    )
    labels = arrays.get("classes")
    if labels is None or labels.ndim != 1 or labels.shape[0] > MAX_CLASSES:
        raise ProtocolError(f"class labels must be a 1-D array of at most {MAX_CLASSES}")
    if labels.dtype.kind not in "iuU":
        raise ProtocolError(f"class labels must be integers or strings, got {labels.dtype}")
    if np.unique(labels).shape[0] != labels.shape[0]:
        raise ProtocolError("class labels are repeated")
    return labels


# -- stage 1: summaries ------------------------------------------------------------------


def summary_request(dtype: str) -> RecordDict:
    return RecordDict({CONFIG: ConfigRecord({"summary-dtype": dtype})})


def read_summary_request(message: Message) -> str:
    return config_value(content_record(message, CONFIG, ConfigRecord), "summary-dtype", str)


def summary_reply(request: Message, payload: bytes, classes: np.ndarray) -> Message:
    content = RecordDict(
        {CONFIG: ConfigRecord({"summary": payload}), LABELS: _labels_record(classes)}
    )
    return Message(content, reply_to=request)


def read_summary_reply(message: Message) -> tuple[bytes, np.ndarray]:
    """Summary bytes (decoded by the caller) and the client's class labels."""
    payload = config_value(content_record(message, CONFIG, ConfigRecord), "summary", bytes)
    return payload, _read_labels(message)


# -- stage 2: reference out, head statistics back ----------------------------------------


def statistics_request(
    reference: bytes, tau: float, classes: np.ndarray, client_index: int
) -> RecordDict:
    config = ConfigRecord({"reference": reference, "tau": tau, "client-index": client_index})
    return RecordDict({CONFIG: config, LABELS: _labels_record(classes)})


def read_statistics_request(message: Message) -> tuple[bytes, float, np.ndarray, int]:
    """Reference bytes, ``tau``, the global classes and this client's index."""
    config = content_record(message, CONFIG, ConfigRecord)
    return (
        config_value(config, "reference", bytes),
        float(config_value(config, "tau", (float, int))),
        _read_labels(message),
        config_value(config, "client-index", int),
    )


def statistics_reply(request: Message, arrays: Mapping[str, np.ndarray]) -> Message:
    return Message(RecordDict({STATISTICS: arrays_to_record(arrays)}), reply_to=request)


def read_statistics_reply(message: Message, *, max_bytes: int) -> dict[str, np.ndarray]:
    return record_to_arrays(content_record(message, STATISTICS, ArrayRecord), max_bytes=max_bytes)


# -- stage 3: the global head out, local accuracy back ----------------------------------


def head_request(head: LinearScores) -> RecordDict:
    return RecordDict(
        {HEAD: arrays_to_record(head.to_arrays()), LABELS: _labels_record(head.classes)}
    )


def read_head_request(message: Message, n_features: int) -> LinearScores:
    classes = _read_labels(message)
    max_bytes = 8 * (classes.shape[0] + 1) * (n_features + 1) + 4096
    arrays = record_to_arrays(content_record(message, HEAD, ArrayRecord), max_bytes=max_bytes)
    try:
        return LinearScores.from_arrays(arrays, classes=classes, n_features=n_features)
    except StatisticsFormatError as exc:
        raise ProtocolError(f"global head: {exc}") from None


def evaluation_reply(request: Message, n_correct: int, n_test: int) -> Message:
    metrics = MetricRecord({"n-correct": n_correct, "n-test": n_test})
    return Message(RecordDict({EVALUATION: metrics}), reply_to=request)


def read_evaluation_reply(message: Message) -> tuple[int, int]:
    """Correct predictions and test rows of one client, checked ``0 <= c <= n``."""
    record = content_record(message, EVALUATION, MetricRecord)
    n_correct = config_value(record, "n-correct", int)
    n_test = config_value(record, "n-test", int)
    if not 0 <= n_correct <= n_test:
        raise ProtocolError(f"evaluation counts are inconsistent ({n_correct} of {n_test})")
    return n_correct, n_test


def payload_bytes(content: RecordDict) -> int:
    """Bytes of a message's records as Flower counts them (arrays, keys and values)."""
    return sum(record.count_bytes() for record in content.values())
