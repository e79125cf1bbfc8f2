"""Named ``.npy`` buffers from another party, read without trusting their headers.

A transport that carries arrays as ``.npy`` bytes (Flower's ``ArrayRecord``
writes each with ``np.save(allow_pickle=False)``) hands them to
:func:`read_npy_arrays`.  Nothing is unpickled: each header is parsed and
checked (numeric dtype, integer shape entries, declared size equal to the bytes
present, total under a cap) *before* NumPy allocates the array, so a hostile
header cannot make the receiver allocate terabytes, and every failure is a
:class:`~skslot.wire.MessageFormatError`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._errors import MessageFormatError

__all__ = ["npy_header", "read_npy_arrays"]


def npy_header(data: bytes) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and header length of an ``.npy`` buffer, from its header only.

    Parameters
    ----------
    data : bytes
        The ``.npy`` file's bytes (only the header is read).

    Returns
    -------
    shape : tuple of int
        The shape the header declares.
    dtype : numpy.dtype
        The dtype the header declares.
    header_length : int
        Bytes before the data.

    Raises
    ------
    MessageFormatError
        If the header cannot be parsed.
    """
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }[version]
        shape, _, dtype = read_header(stream)
    except Exception as exc:  # NumPy's parser of untrusted bytes may fail in any way
        raise MessageFormatError(f"not a valid .npy array ({type(exc).__name__}: {exc})") from None
    return shape, dtype, stream.tell()


def read_npy_arrays(
    buffers: Mapping[str, Any], *, max_bytes: int, string_keys: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Decode named ``.npy`` buffers into NumPy arrays, safely.

    Parameters
    ----------
    buffers : mapping of str to bytes
        The received ``.npy`` files, by name.
    max_bytes : int
        Reject them all if they hold more bytes in total.
    string_keys : tuple of str
        Arrays that may hold strings (class labels); all others must be
        numeric.

    Returns
    -------
    arrays : dict of str to ndarray
        The decoded arrays, by name.

    Raises
    ------
    MessageFormatError
        If a buffer is not bytes, the buffers are too large together, or one
        is not a plain ``.npy`` of an allowed dtype whose size matches its
        header.

    Examples
    --------
    >>> import io
    >>> import numpy as np
    >>> from skslot.wire import read_npy_arrays
    >>> buffer = io.BytesIO()
    >>> np.save(buffer, np.arange(3), allow_pickle=False)
    >>> read_npy_arrays({"n": buffer.getvalue()}, max_bytes=1024)
    {'n': array([0, 1, 2])}
    """
    if any(not isinstance(data, bytes) for data in buffers.values()):
        raise MessageFormatError("an array of the record holds no bytes")
    total = sum(len(data) for data in buffers.values())
    if total > max_bytes:
        raise MessageFormatError(f"arrays hold {total} bytes, more than the {max_bytes} allowed")
    out = {}
    for name, data in buffers.items():
        shape, dtype, header_length = npy_header(data)
        allowed = "iufU" if name in string_keys else "iuf"
        if dtype.hasobject or dtype.kind not in allowed:
            raise MessageFormatError(
                f"array {name!r} has dtype {dtype}, not one of kinds {allowed!r}"
            )
        if (
            not isinstance(shape, tuple)
            or any(type(s) is not int or s < 0 for s in shape)
            or math.prod(shape) * dtype.itemsize != len(data) - header_length
        ):
            raise MessageFormatError(f"array {name!r}: its header does not match its size")
        try:
            out[name] = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as exc:  # the header was checked; any failure left is the sender's
            raise MessageFormatError(f"array {name!r} cannot be read ({exc})") from None
    return out
