"""The protocol's Flower messages: what each stage carries, and its checks.

=========================  ===================================  =================================
message type               server sends                         client replies
=========================  ===================================  =================================
``query.upload``           summary dtype, the client's index    its summary bytes, its counts
                                                                (training rows, fitting part,
                                                                test rows) and, for FedCGS and
                                                                FedPFT, the statistics of its
                                                                unaligned rows (of the fitting
                                                                and validation parts apart when
                                                                ``tau = "auto"``)
``train.updates``          (the reference), taus, which rows    one local head per tau (O-FedAvg)
``query.validation``       (the reference), candidate heads     correct predictions per class
                           and their taus                       and candidate on its validation
                                                                rows
``query.screening``        (the reference), the chosen head,    per left-out head: rows only it
                           the heads without one other client   gets right, rows only the chosen
                           each, the classes each comparison    head gets right, rows scored
                           predicts among, its tau
``evaluate.head``          (the reference), the head and tau    accuracy on its local test split
=========================  ===================================  =================================

The reference travels once, in the first message a client receives after the
server built it (again after the server built it again without a client that
left the run); the client keeps the latest in its run state.  The class set is the
run configuration's, never a client's.  Summaries use skslot's own wire format
(:meth:`GaussianSummary.to_bytes`); arrays travel in Flower ``ArrayRecord``
objects, which write them with ``np.save(allow_pickle=False)``.  On receipt
nothing is unpickled: an array's ``.npy`` header is parsed and checked
(numeric dtype, integer shape entries, declared size equal to the bytes
present, total under a cap) *before* NumPy allocates it, so a hostile header
cannot make the server allocate terabytes (:func:`skslot.wire.read_npy_arrays`), and every
failure is a :class:`ProtocolError` (defined in :mod:`skslot.wire`, with the
other decoding errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from ..heads import LinearScores
from ..wire import ProtocolError, StatisticsFormatError
from ..wire.arrays import ArrayMessage
from ..wire.npy import read_npy_arrays
from ..wire.summary_codec import MAX_COUNT, check_wire_label

__all__ = [
    "ProtocolError",
    "UploadReply",
    "arrays_to_record",
    "evaluation_reply",
    "head_request",
    "payload_bytes",
    "read_evaluation_reply",
    "read_head_request",
    "read_screening_reply",
    "read_screening_request",
    "read_updates_reply",
    "read_updates_request",
    "read_upload_reply",
    "read_upload_request",
    "read_validation_reply",
    "read_validation_request",
    "record_to_arrays",
    "screening_reply",
    "screening_request",
    "updates_reply",
    "updates_request",
    "upload_reply",
    "upload_request",
    "validation_reply",
    "validation_request",
]

#: Record names used in the messages' contents.
CONFIG = "skslot"
STATISTICS = "statistics"
VALIDATION_STATISTICS = "validation-statistics"
UPDATES = "updates"
CANDIDATES = "candidates"
COUNTS = "counts"
HEAD = "head"
EVALUATION = "evaluation"
LEFT_OUT = "left-out"
PAIRED = "paired-counts"


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Named NumPy arrays as a Flower ``ArrayRecord`` (``np.save``, no pickle)."""
    return ArrayRecord({name: Array(np.asarray(a, order="C")) for name, a in arrays.items()})


def record_to_arrays(
    record: Any, *, max_bytes: int, string_keys: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Decode a received ``ArrayRecord`` into NumPy arrays, safely.

    Its arrays' ``.npy`` bytes are read by :func:`skslot.wire.read_npy_arrays`
    (``max_bytes``, ``string_keys`` and the checks are its own).

    Raises
    ------
    ProtocolError
        If the record is not an ``ArrayRecord``, or as
        :func:`~skslot.wire.read_npy_arrays` raises.
    """
    if not isinstance(record, ArrayRecord):
        raise ProtocolError(f"expected an ArrayRecord, got {type(record).__name__}")
    buffers = {name: array.data for name, array in record.items()}
    return read_npy_arrays(buffers, max_bytes=max_bytes, string_keys=string_keys)


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


def _optional_reference(config: Mapping[str, Any]) -> bytes | None:
    return config_value(config, "reference", bytes) if "reference" in config else None


def _float_list(config: Mapping[str, Any], key: str) -> list[float]:
    values = config_value(config, key, list)
    if not values or not all(isinstance(v, float) for v in values):
        raise ProtocolError(f"{key!r} must be a non-empty list of floats")
    return values


def _array_list(arrays: list[ArrayMessage]) -> ArrayRecord:
    """Several named-array messages in one record, keys prefixed ``<index>.``."""
    return arrays_to_record(
        {f"{i}.{name}": a for i, message in enumerate(arrays) for name, a in message.items()}
    )


def _split_array_list(arrays: Mapping[str, np.ndarray], n: int) -> list[dict[str, np.ndarray]]:
    out: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
    for key, value in arrays.items():
        index, _, name = key.partition(".")
        if not index.isdigit() or int(index) >= n or not name:
            raise ProtocolError(f"unexpected array {key!r} in a list of {n} messages")
        out[int(index)][name] = value
    return out


# -- stage "upload": summary and statistics of unaligned rows ------------------------------


def upload_request(
    summary_dtype: str,
    client_index: int,
    split_seed: int | None = None,
    *,
    class_counts: bool = False,
) -> RecordDict:
    values: dict[str, Any] = {"summary-dtype": summary_dtype, "client-index": client_index}
    if split_seed is not None:
        values["split-seed"] = split_seed
    if class_counts:
        values["class-counts"] = 1  # a flag (ConfigRecord values here are never bools)
    return RecordDict({CONFIG: ConfigRecord(values)})


def read_upload_request(message: Message) -> tuple[str, int, int | None, bool]:
    """The summary dtype, this client's position, the seed of its validation split (or None),
    and whether the server asks for its class counts."""
    config = content_record(message, CONFIG, ConfigRecord)
    index = config_value(config, "client-index", int)
    if index < 0:
        raise ProtocolError(f"client-index must be >= 0, got {index}")
    seed = config_value(config, "split-seed", int) if "split-seed" in config else None
    counts = config_value(config, "class-counts", int) if "class-counts" in config else 0
    if counts not in (0, 1):
        raise ProtocolError(f"class-counts must be 0 or 1, got {counts}")
    return config_value(config, "summary-dtype", str), index, seed, counts == 1


def upload_reply(
    request: Message,
    summary: bytes | None,
    *,
    n_fit: int,
    n_test: int,
    n_validation: int = 0,
    statistics: ArrayMessage | None = None,
    validation: ArrayMessage | None = None,
    class_counts: np.ndarray | None = None,
    shrinkage: float | None = None,
    label: int | str | None = None,
    dimension: int | None = None,
) -> Message:
    """A client's upload: its summary, or (``summary=None``) the shrinkage, label and
    dimension of the summary the server derives from its statistics (FedCGS)."""
    values: dict[str, Any] = {"n-fit": n_fit, "n-test": n_test, "n-validation": n_validation}
    if summary is not None:
        values["summary"] = summary
    if shrinkage is not None:
        values["shrinkage"] = float(shrinkage)
    if dimension is not None:
        values["dimension"] = int(dimension)
    if label is not None:
        values["label"] = label
    if class_counts is not None:
        values["class-counts"] = [int(c) for c in class_counts]
    content = RecordDict({CONFIG: ConfigRecord(values)})
    if statistics is not None:
        content[STATISTICS] = arrays_to_record(statistics)
    if validation is not None:
        content[VALIDATION_STATISTICS] = arrays_to_record(validation)
    return Message(content, reply_to=request)


@dataclass(frozen=True)
class UploadReply:
    """What a client's upload message holds, its values checked for type.

    ``summary`` is the summary's bytes, or ``None`` where the head derives it
    (then ``shrinkage`` and ``label``); ``statistics`` and ``validation`` are
    records, decoded by the caller with :func:`record_to_arrays` once the run's
    dimension (and so the largest size to accept) is known.
    """

    summary: bytes | None
    n_fit: int
    n_test: int
    statistics: Any
    validation: Any
    class_counts: np.ndarray | None
    shrinkage: float | None = None
    label: int | str | None = None
    dimension: int | None = None
    n_validation: int = 0


def read_upload_reply(message: Message, *, n_classes: int) -> UploadReply:
    """A client's upload (see :class:`UploadReply`).

    Counts are only checked to be non-negative integers here; the server
    checks them against the decoded summary, and whether the upload has the
    head's form with a valid shrinkage
    (:func:`skslot.protocol.intake.summary_form_problem`,
    :meth:`skslot.heads.ClassStatistics.summary`).
    """
    config = content_record(message, CONFIG, ConfigRecord)
    summary = config_value(config, "summary", bytes) if "summary" in config else None
    shrinkage = config_value(config, "shrinkage", float) if "shrinkage" in config else None
    label = check_wire_label(config.get("label"))
    dimension = config_value(config, "dimension", int) if "dimension" in config else None
    if (summary is None) == (dimension is None):  # what the statistics are decoded with
        raise ProtocolError(
            "an upload carries either a summary or the dimension of the summary derived from "
            "its statistics"
        )
    n_fit, n_test = config_value(config, "n-fit", int), config_value(config, "n-test", int)
    n_validation = config_value(config, "n-validation", int)
    if min(n_fit, n_test, n_validation) < 0:
        raise ProtocolError(
            f"row counts must be >= 0, got n-fit {n_fit}, n-validation {n_validation}, "
            f"n-test {n_test}"
        )
    if max(n_test, n_validation) > MAX_COUNT:
        raise ProtocolError(
            f"n-test and n-validation must be at most 2**53 rows, got {n_test}, {n_validation}"
        )
    counts = None
    if "class-counts" in config:
        values = config["class-counts"]
        if (
            not isinstance(values, list)
            or len(values) != n_classes
            or not all(type(v) is int and 0 <= v <= MAX_COUNT for v in values)
        ):
            raise ProtocolError(
                f"class-counts must be a list of {n_classes} integers in [0, 2**53]"
            )
        counts = np.array(values, dtype=np.int64)
    records = message.content.array_records
    return UploadReply(
        summary,
        n_fit,
        n_test,
        records.get(STATISTICS),
        records.get(VALIDATION_STATISTICS),
        counts,
        shrinkage,
        label,
        dimension,
        n_validation,
    )


# -- stage "updates": local heads at given taus (O-FedAvg) ---------------------------------


def updates_request(reference: bytes | None, taus: list[float], part: str) -> RecordDict:
    """Ask for one local head per tau, trained on the ``part`` ("fit" or "all") of the rows."""
    values: dict[str, Any] = {"taus": [float(t) for t in taus], "part": part}
    if reference is not None:
        values["reference"] = reference
    return RecordDict({CONFIG: ConfigRecord(values)})


def read_updates_request(message: Message) -> tuple[bytes | None, list[float], str]:
    config = content_record(message, CONFIG, ConfigRecord)
    part = config_value(config, "part", str)
    if part not in ("fit", "all"):
        raise ProtocolError(f"part must be 'fit' or 'all', got {part!r}")
    return _optional_reference(config), _float_list(config, "taus"), part


def updates_reply(request: Message, updates: list[ArrayMessage]) -> Message:
    return Message(RecordDict({UPDATES: _array_list(updates)}), reply_to=request)


def read_updates_reply(
    message: Message, *, n_updates: int, max_bytes: int
) -> list[dict[str, np.ndarray]]:
    arrays = record_to_arrays(content_record(message, UPDATES, ArrayRecord), max_bytes=max_bytes)
    return _split_array_list(arrays, n_updates)


# -- stage "validation": candidate heads out, counts back ----------------------------------


def validation_request(
    reference: bytes | None, heads: list[LinearScores], taus: list[float]
) -> RecordDict:
    values: dict[str, Any] = {"taus": [float(t) for t in taus]}
    if reference is not None:
        values["reference"] = reference
    return RecordDict(
        {CONFIG: ConfigRecord(values), CANDIDATES: _array_list([h.to_arrays() for h in heads])}
    )


def read_validation_request(
    message: Message, classes: np.ndarray, n_features: int
) -> tuple[bytes | None, list[LinearScores], list[float]]:
    config = content_record(message, CONFIG, ConfigRecord)
    taus = _float_list(config, "taus")
    heads = [
        _linear_scores(arrays, classes, n_features)
        for arrays in _split_array_list(
            record_to_arrays(
                content_record(message, CANDIDATES, ArrayRecord),
                max_bytes=len(taus) * _head_bytes(classes, n_features),
            ),
            len(taus),
        )
    ]
    return _optional_reference(config), heads, taus


def validation_reply(request: Message, counts: ArrayMessage) -> Message:
    return Message(RecordDict({COUNTS: arrays_to_record(counts)}), reply_to=request)


def read_validation_reply(message: Message, *, max_bytes: int) -> dict[str, np.ndarray]:
    return record_to_arrays(content_record(message, COUNTS, ArrayRecord), max_bytes=max_bytes)


# -- stage "screening": the chosen head and the left-out heads out, paired counts back ----


def screening_request(
    reference: bytes | None,
    full: LinearScores,
    left_out: list[LinearScores],
    masks: np.ndarray,
    tau: float,
) -> RecordDict:
    values: dict[str, Any] = {"tau": float(tau), "n-heads": len(left_out)}
    if reference is not None:
        values["reference"] = reference
    heads = [
        {**h.to_arrays(), "mask": np.asarray(m, dtype=np.uint8)}
        for h, m in zip(left_out, masks, strict=True)
    ]
    return RecordDict(
        {
            CONFIG: ConfigRecord(values),
            HEAD: arrays_to_record(full.to_arrays()),
            LEFT_OUT: _array_list(heads),
        }
    )


def read_screening_request(
    message: Message, classes: np.ndarray, n_features: int
) -> tuple[bytes | None, LinearScores, list[LinearScores], np.ndarray, float]:
    config = content_record(message, CONFIG, ConfigRecord)
    tau = float(config_value(config, "tau", (float, int)))
    n = config_value(config, "n-heads", int)
    size = _head_bytes(classes, n_features)
    if not 1 <= n <= MAX_COUNT:
        raise ProtocolError(f"'n-heads' must be a positive count, got {n}")
    full = _linear_scores(
        record_to_arrays(content_record(message, HEAD, ArrayRecord), max_bytes=size),
        classes,
        n_features,
    )
    parts = _split_array_list(
        record_to_arrays(content_record(message, LEFT_OUT, ArrayRecord), max_bytes=n * size), n
    )
    masks = []
    for arrays in parts:
        mask = arrays.pop("mask", None)
        if mask is None or mask.shape != classes.shape or not np.isin(mask, (0, 1)).all():
            raise ProtocolError(
                f"each left-out head needs a 0/1 mask over the {classes.shape[0]} classes"
            )
        masks.append(mask.astype(bool))
    heads = [_linear_scores(arrays, classes, n_features) for arrays in parts]
    return _optional_reference(config), full, heads, np.array(masks), tau


def screening_reply(request: Message, counts: ArrayMessage) -> Message:
    return Message(RecordDict({PAIRED: arrays_to_record(counts)}), reply_to=request)


def read_screening_reply(message: Message, *, max_bytes: int) -> dict[str, np.ndarray]:
    return record_to_arrays(content_record(message, PAIRED, ArrayRecord), max_bytes=max_bytes)


# -- stage "evaluation": the global head out, local accuracy back -------------------------


def head_request(reference: bytes | None, head: LinearScores, tau: float) -> RecordDict:
    values: dict[str, Any] = {"tau": float(tau)}
    if reference is not None:
        values["reference"] = reference
    return RecordDict({CONFIG: ConfigRecord(values), HEAD: arrays_to_record(head.to_arrays())})


def read_head_request(
    message: Message, classes: np.ndarray, n_features: int
) -> tuple[bytes | None, LinearScores, float]:
    config = content_record(message, CONFIG, ConfigRecord)
    tau = float(config_value(config, "tau", (float, int)))
    arrays = record_to_arrays(
        content_record(message, HEAD, ArrayRecord), max_bytes=_head_bytes(classes, n_features)
    )
    return _optional_reference(config), _linear_scores(arrays, classes, n_features), tau


def _head_bytes(classes: np.ndarray, n_features: int) -> int:
    return 8 * (classes.shape[0] + 1) * (n_features + 1) + 4096


def _linear_scores(arrays: Mapping[str, Any], classes: np.ndarray, n_features: int) -> LinearScores:
    try:
        return LinearScores.from_arrays(arrays, classes=classes, n_features=n_features)
    except StatisticsFormatError as exc:
        raise ProtocolError(f"head: {exc}") from None


def evaluation_reply(request: Message, n_correct: int, n_test: int) -> Message:
    metrics = MetricRecord({"n-correct": n_correct, "n-test": n_test})
    return Message(RecordDict({EVALUATION: metrics}), reply_to=request)


def read_evaluation_reply(message: Message) -> tuple[int, int]:
    """A client's correct predictions and its test rows (tied to its upload by the server)."""
    record = content_record(message, EVALUATION, MetricRecord)
    return config_value(record, "n-correct", int), config_value(record, "n-test", int)


def payload_bytes(content: RecordDict) -> int:
    """Bytes of a message's records as Flower counts them (arrays, keys and values)."""
    return sum(record.count_bytes() for record in content.values())
