"""A message's contents, independent of the transport that moves it.

Each stage of the protocol (:mod:`skslot.protocol.stages`) encodes its
request and its reply as a :class:`Payload`: scalar settings, named groups of
arrays and named groups of metrics.  A transport maps a payload to its own
records (the Flower transport: one ``ConfigRecord``, ``ArrayRecord`` objects
and ``MetricRecord`` objects) and back.  What arrives is a
:class:`ReceivedPayload`: its arrays are still ``.npy`` bytes, read only through
:meth:`ReceivedPayload.arrays` with a size cap, and its values only through
typed accessors, so every decoder checks what it reads.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from ._errors import MessageFormatError
from .npy import read_npy_arrays

__all__ = ["ConfigValue", "Payload", "ReceivedPayload"]

#: A scalar setting as a payload carries it (Flower's ``ConfigRecord`` values).
ConfigValue = int | float | str | bytes | list

_T = TypeVar("_T")
#: A type, or a tuple of types, that a received value must be an instance of.
_Kind = type[_T] | tuple[type[_T], ...]


@dataclass
class Payload:
    """What one message carries: settings, groups of named arrays and groups of metrics.

    Parameters
    ----------
    config : dict of str to int, float, str, bytes or list
        Scalar settings (never booleans: flags are 0 or 1).
    arrays : dict of str to dict of str to ndarray
        Named groups of named arrays.
    metrics : dict of str to dict of str to int or float
        Named groups of counts.
    """

    config: dict[str, ConfigValue] = field(default_factory=dict)
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    metrics: dict[str, Mapping[str, int | float]] = field(default_factory=dict)

    def received(self) -> ReceivedPayload:
        """This payload as a receiver sees it: its arrays as ``.npy`` bytes.

        Returns
        -------
        ReceivedPayload
            The same contents, as a transport delivers them.

        Examples
        --------
        >>> import numpy as np
        >>> from skslot.wire.payload import Payload
        >>> sent = Payload({"tau": 0.5}, {"head": {"w": np.ones(2)}})
        >>> got = sent.received()
        >>> got.value("tau", float), got.arrays("head", max_bytes=1024)["w"].tolist()
        (0.5, [1.0, 1.0])
        """
        arrays: dict[str, dict[str, bytes]] = {}
        for name, group in self.arrays.items():
            arrays[name] = {}
            for key, value in group.items():
                buffer = io.BytesIO()
                np.save(buffer, np.asarray(value, order="C"), allow_pickle=False)
                arrays[name][key] = buffer.getvalue()
        metrics = {name: dict(group) for name, group in self.metrics.items()}
        return ReceivedPayload(dict(self.config), arrays, metrics)


@dataclass(frozen=True)
class ReceivedPayload:
    """A received message's contents, read through checked accessors.

    Parameters
    ----------
    config : mapping of str to object
        The received settings (untrusted: read them with :meth:`value`).
    arrays_bytes : mapping of str to mapping of str to bytes
        Each group's arrays as ``.npy`` bytes (read them with :meth:`arrays`).
    metrics : mapping of str to mapping of str to object
        The received groups of counts (read them with :meth:`metric`).
    """

    config: Mapping[str, object]
    arrays_bytes: Mapping[str, Mapping[str, bytes]]
    metrics: Mapping[str, Mapping[str, object]]

    def has(self, key: str) -> bool:
        """Whether the settings hold ``key``.

        Parameters
        ----------
        key : str

        Returns
        -------
        bool
        """
        return key in self.config

    def value(self, key: str, kind: _Kind[_T]) -> _T:
        """The setting ``key``, checked to be of type ``kind`` (never a boolean).

        Parameters
        ----------
        key : str
        kind : type or tuple of types

        Returns
        -------
        object
            The value, of type ``kind``.

        Raises
        ------
        MessageFormatError
            If the setting is missing or of another type.
        """
        return _typed(self.config, key, kind)

    def optional(self, key: str, kind: _Kind[_T]) -> _T | None:
        """The setting ``key`` of type ``kind``, or ``None`` where the message lacks it.

        Parameters
        ----------
        key : str
        kind : type or tuple of types

        Returns
        -------
        object or None
        """
        return _typed(self.config, key, kind) if key in self.config else None

    def floats(self, key: str) -> list[float]:
        """The setting ``key`` as a non-empty list of floats.

        Parameters
        ----------
        key : str

        Returns
        -------
        list of float

        Raises
        ------
        MessageFormatError
            If it is missing, empty or holds anything but floats.
        """
        values = self.value(key, list)
        if not values or not all(isinstance(v, float) for v in values):
            raise MessageFormatError(f"{key!r} must be a non-empty list of floats")
        return list(values)

    def has_arrays(self, name: str) -> bool:
        """Whether the message holds the group of arrays ``name``.

        Parameters
        ----------
        name : str

        Returns
        -------
        bool
        """
        return name in self.arrays_bytes

    def arrays(
        self, name: str, *, max_bytes: int, string_keys: tuple[str, ...] = ()
    ) -> dict[str, np.ndarray]:
        """The group of arrays ``name``, each ``.npy`` header checked before allocation.

        Parameters
        ----------
        name : str
        max_bytes : int
            Most bytes the group's arrays may take together.
        string_keys : tuple of str, default=()
            Arrays that may hold strings (see :func:`skslot.wire.read_npy_arrays`).

        Returns
        -------
        dict of str to ndarray

        Raises
        ------
        MessageFormatError
            If the group is missing, or as :func:`~skslot.wire.read_npy_arrays` raises.
        """
        if name not in self.arrays_bytes:
            raise MessageFormatError(f"message lacks the arrays {name!r}")
        return read_npy_arrays(
            self.arrays_bytes[name], max_bytes=max_bytes, string_keys=string_keys
        )

    def array_list(self, name: str, n: int, *, max_bytes: int) -> list[dict[str, np.ndarray]]:
        """The group ``name`` as ``n`` messages of named arrays (keys ``<index>.<name>``).

        Parameters
        ----------
        name : str
        n : int
            How many messages the group holds.
        max_bytes : int
            Most bytes the group's arrays may take together.

        Returns
        -------
        list of dict of str to ndarray

        Raises
        ------
        MessageFormatError
            If a key is not ``<index>.<name>`` with an index below ``n``.
        """
        out: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        for key, value in self.arrays(name, max_bytes=max_bytes).items():
            index, _, part = key.partition(".")
            if not index.isdigit() or int(index) >= n or not part:
                raise MessageFormatError(f"unexpected array {key!r} in a list of {n} messages")
            out[int(index)][part] = value
        return out

    def metric(self, name: str, key: str, kind: _Kind[_T]) -> _T:
        """The count ``key`` of the metrics group ``name``, of type ``kind``.

        Parameters
        ----------
        name, key : str
        kind : type or tuple of types

        Returns
        -------
        object

        Raises
        ------
        MessageFormatError
            If the group or the count is missing, or of another type.
        """
        if name not in self.metrics:
            raise MessageFormatError(f"message lacks the metrics {name!r}")
        return _typed(self.metrics[name], key, kind)


def array_list(messages: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Several messages of named arrays as one group, keys prefixed ``<index>.``.

    Parameters
    ----------
    messages : list of mapping of str to ndarray

    Returns
    -------
    dict of str to ndarray
        The group :meth:`ReceivedPayload.array_list` reads back.
    """
    return {f"{i}.{name}": a for i, message in enumerate(messages) for name, a in message.items()}


def _typed(record: Mapping[str, object], key: str, kind: _Kind[_T]) -> _T:
    if key not in record:
        raise MessageFormatError(f"message lacks {key!r}")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MessageFormatError(f"{key!r} has type {type(value).__name__}")
    return value
