"""The protocol's payloads as Flower records, and back.

Each stage encodes its messages as a :class:`~skslot.wire.payload.Payload`
(:mod:`skslot.protocol.stages`); here a payload becomes a Flower
``RecordDict`` (its settings one ``ConfigRecord`` named ``"skslot"``, each
group of arrays an ``ArrayRecord``, each group of counts a ``MetricRecord``)
and a received message a :class:`~skslot.wire.payload.ReceivedPayload`.
Arrays travel as Flower writes them (``np.save(allow_pickle=False)``); on
receipt nothing is unpickled: their ``.npy`` bytes are handed over unread,
and each stage's decoder reads them with a size cap, the header checked
before NumPy allocates anything (:func:`skslot.wire.read_npy_arrays`).
Every failure is a :class:`~skslot.wire.MessageFormatError`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from ..wire import MessageFormatError
from ..wire.payload import Payload, ReceivedPayload

__all__ = [
    "CONFIG",
    "SOURCE",
    "arrays_to_record",
    "content",
    "payload_bytes",
    "received",
    "source_of",
]

#: The name of the record that holds a message's settings.
CONFIG = "skslot"

#: The name of the record in which a node's upload reply says what data it read
#: (``{"source": text}``), for the run's report only: the protocol never reads it.
SOURCE = "skslot-source"

#: How the description of a partition of the run's ``dataset`` begins.
PARTITION = "partition"

#: The longest description of a node's data the server records.
MAX_SOURCE_LENGTH = 200


def source_of(message: Message) -> str | None:
    """What a node's reply says it read (:data:`SOURCE`), or ``None``.

    Untrusted: anything but a short printable string is ``None``.

    Parameters
    ----------
    message : Message

    Returns
    -------
    str or None
    """
    record = message.content.config_records.get(SOURCE)
    text = None if record is None else record.get("source")
    if not isinstance(text, str) or len(text) > MAX_SOURCE_LENGTH or not text.isprintable():
        return None
    return text


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Named NumPy arrays as a Flower ``ArrayRecord`` (``np.save``, no pickle).

    Parameters
    ----------
    arrays : mapping of str to ndarray

    Returns
    -------
    ArrayRecord
    """
    return ArrayRecord({name: Array(np.asarray(a, order="C")) for name, a in arrays.items()})


def content(payload: Payload) -> RecordDict:
    """A payload as a Flower message's content.

    Parameters
    ----------
    payload : Payload

    Returns
    -------
    RecordDict
    """
    records = RecordDict()
    if payload.config:
        records[CONFIG] = ConfigRecord(dict(payload.config))
    for name, arrays in payload.arrays.items():
        records[name] = arrays_to_record(arrays)
    for name, metrics in payload.metrics.items():
        records[name] = MetricRecord(dict(metrics))
    return records


def received(message: Message) -> ReceivedPayload:
    """A received message's content, for a stage's decoder to read.

    Parameters
    ----------
    message : Message

    Returns
    -------
    ReceivedPayload

    Raises
    ------
    MessageFormatError
        If the message is an error reply.  A record of another kind than a
        stage reads is not delivered: the stage's decoder then finds it missing.
    """
    if message.has_error():
        raise MessageFormatError(f"the other party reported an error: {message.error.reason}")
    records = message.content
    config: Mapping[str, object] = records.config_records.get(CONFIG, {})
    arrays = {name: {k: a.data for k, a in r.items()} for name, r in records.array_records.items()}
    metrics = {name: dict(record) for name, record in records.metric_records.items()}
    return ReceivedPayload(dict(config), arrays, metrics)


def payload_bytes(records: RecordDict) -> int:
    """Bytes of a message's records as Flower counts them (arrays, keys and values).

    Parameters
    ----------
    records : RecordDict

    Returns
    -------
    int
    """
    return sum(record.count_bytes() for record in records.values())
