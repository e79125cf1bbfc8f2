"""The byte format of a low-rank Gaussian summary, and its decoder.

Layout: a 40-byte little-endian header (magic ``SKSL``, format version, dtype
code, flags, dimension ``m``, rank ``r``, count ``n``, shrinkage, complement),
the optional client label of :mod:`skslot.wire.summary_codec`, then the ``m``
mean values, the ``r`` eigenvalues and the ``m r`` entries of the basis, row by
row, in float16, float32 or float64: ``m (r + 1) + r`` values against the
dense format's ``m (m + 3) / 2`` (at ``m = 4096``, ``r = 99`` in float32:
1.6 MB instead of 33.6 MB).

The decoder checks the structure (header, rank at most the dimension, count,
label, exact length: all before anything the header sizes is allocated) and
that the values are finite; :meth:`LowRankGaussianSummary.from_bytes
<skslot.low_rank.LowRankGaussianSummary.from_bytes>` then checks the basis is
orthonormal up to the dtype's rounding, makes it orthonormal again, and
validates the summary.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Protocol

import numpy as np

from ._errors import SummaryFormatError
from .summary_codec import (
    _DTYPE_CODES,
    _DTYPES,
    _FLAG_INT_LABEL,
    _FLAG_SHRINKAGE,
    _FLAG_STR_LABEL,
    DEFAULT_MAX_DIMENSION,
    LOW_RANK_MAGIC,
    MAX_COUNT,
    _label_bytes,
    _Moments,
    _wire_dtype,
    read_label,
)

__all__ = [
    "LowRankFields",
    "decode_low_rank_summary",
    "encode_low_rank_summary",
    "low_rank_payload_size",
]

_MAGIC = LOW_RANK_MAGIC
_FORMAT_VERSION = 1
# magic, version, dtype, flags, m, r, n, shrinkage, complement
_HEADER = struct.Struct("<4sBBBxIIQdd")


class LowRankFields(NamedTuple):
    """The fields of a low-rank summary, as the wire format carries them.

    Parameters
    ----------
    n : int
        Number of samples summarised.
    mean : ndarray of shape (m,)
    basis : ndarray of shape (m, r)
        As sent: orthonormal up to the dtype's rounding, not yet checked.
    eigenvalues : ndarray of shape (r,)
    complement : float
    shrinkage : float or None
    client : int, str or None
    dtype : str
        The precision the values travelled in (what the basis's rounding is).
    """

    n: int
    mean: np.ndarray
    basis: np.ndarray
    eigenvalues: np.ndarray
    complement: float
    shrinkage: float | None
    client: int | str | None
    dtype: str = "float64"


class _LowRank(_Moments, Protocol):
    """What the encoder reads: the attributes of :class:`LowRankFields`."""

    @property
    def basis(self) -> np.ndarray: ...

    @property
    def eigenvalues(self) -> np.ndarray: ...

    @property
    def complement(self) -> float: ...


def encode_low_rank_summary(summary: _LowRank, dtype: str | np.dtype = "float32") -> bytes:
    """The payload of a low-rank summary's fields with its values in ``dtype``.

    Parameters
    ----------
    summary : LowRankGaussianSummary or LowRankFields
    dtype : {"float16", "float32", "float64"}, default="float32"
        The precision of the mean, eigenvalues and basis (the count,
        shrinkage and complement travel in the header, exactly).

    Returns
    -------
    payload : bytes

    Raises
    ------
    ValueError
        If ``dtype`` is not float16, float32 or float64.
    SummaryFormatError
        If a value overflows ``dtype``, an eigenvalue rounds to zero, or the
        client label does not fit the format.
    """
    dt = _wire_dtype(dtype)
    mean = np.asarray(summary.mean, dtype=np.float64)
    basis = np.asarray(summary.basis, dtype=np.float64)
    eigenvalues = np.asarray(summary.eigenvalues, dtype=np.float64)
    m, r = basis.shape
    values = np.concatenate([mean, eigenvalues, basis.ravel()])
    with np.errstate(over="ignore", under="ignore"):
        packed = values.astype(dt.newbyteorder("<"))
    if not np.all(np.isfinite(packed)):
        raise SummaryFormatError(f"summary values overflow {dt.name}; send it in a wider dtype")
    if r and float(packed[m : m + r].min()) <= 0.0:
        raise SummaryFormatError(
            f"an eigenvalue rounds to zero in {dt.name}; send it in a wider dtype"
        )
    flags = 0 if summary.shrinkage is None else _FLAG_SHRINKAGE
    label_flag, label = _label_bytes(summary.client)
    header = _HEADER.pack(
        _MAGIC,
        _FORMAT_VERSION,
        _DTYPE_CODES[dt.name],
        flags | label_flag,
        m,
        r,
        summary.n,
        np.nan if summary.shrinkage is None else summary.shrinkage,
        float(summary.complement),
    )
    return header + label + packed.tobytes()


def low_rank_payload_size(summary: _LowRank, dtype: str | np.dtype = "float32") -> int:
    """Length of :func:`encode_low_rank_summary`'s payload, without encoding the values.

    Parameters
    ----------
    summary : LowRankGaussianSummary or LowRankFields
    dtype : {"float16", "float32", "float64"}, default="float32"

    Returns
    -------
    size : int
    """
    dt = _wire_dtype(dtype)
    m, r = np.shape(summary.basis)
    label = _label_bytes(summary.client)[1]
    return _HEADER.size + len(label) + (m + r + m * r) * dt.itemsize


def decode_low_rank_summary(
    payload: bytes | bytearray | memoryview,
    *,
    expected_dimension: int | None = None,
    max_dimension: int = DEFAULT_MAX_DIMENSION,
    max_rank: int | None = None,
) -> LowRankFields:
    """Decode a payload written by :func:`encode_low_rank_summary` into its fields.

    Parameters
    ----------
    payload : bytes-like
        The received bytes.  Nothing is unpickled or evaluated.
    expected_dimension : int, optional
        Reject a payload of any other dimension.
    max_dimension : int, default=16384
        Reject a header announcing a larger dimension.
    max_rank : int, optional
        Reject a header announcing a larger rank (default: the dimension).

    Returns
    -------
    fields : LowRankFields

    Raises
    ------
    SummaryFormatError
        If the payload is not bytes, is truncated or longer than its header
        implies, has another magic, format version, dtype or unknown flags,
        announces a dimension outside ``[1, max_dimension]`` or other than
        ``expected_dimension``, a rank above the dimension or ``max_rank``,
        ``n < 2`` or ``n > 2**53``, or decodes to non-finite values.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise SummaryFormatError(f"payload must be bytes, got {type(payload).__name__}")
    data = bytes(payload)
    if len(data) < _HEADER.size:
        raise SummaryFormatError(
            f"payload truncated: {len(data)} bytes, shorter than the {_HEADER.size}-byte header"
        )
    magic, version, dtype_code, flags, m, r, n, shrinkage, complement = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise SummaryFormatError("payload is not a skslot low-rank summary (bad magic)")
    if version != _FORMAT_VERSION:
        raise SummaryFormatError(
            f"unsupported low-rank summary format version {version} "
            f"(this skslot reads version {_FORMAT_VERSION})"
        )
    if dtype_code not in _DTYPES:
        raise SummaryFormatError(f"unknown dtype code {dtype_code}")
    if flags & ~(_FLAG_SHRINKAGE | _FLAG_INT_LABEL | _FLAG_STR_LABEL) or (
        flags & _FLAG_INT_LABEL and flags & _FLAG_STR_LABEL
    ):
        raise SummaryFormatError(f"invalid header flags {flags:#x}")
    if m < 1 or m > max_dimension:
        raise SummaryFormatError(f"dimension {m} outside the accepted range [1, {max_dimension}]")
    if expected_dimension is not None and m != expected_dimension:
        raise SummaryFormatError(
            f"dimension mismatch: payload has dimension {m}, expected {expected_dimension}"
        )
    highest = m if max_rank is None else min(m, max_rank)
    if r > highest:
        raise SummaryFormatError(f"rank {r} above the accepted {highest} (dimension {m})")
    if not 2 <= n <= MAX_COUNT:
        raise SummaryFormatError(f"n must be between 2 and 2**53, payload says {n}")
    client, offset = read_label(data, _HEADER.size, flags)
    dt = _DTYPES[dtype_code]
    expected = offset + (m + r + m * r) * dt.itemsize
    if len(data) != expected:
        kind = "truncated" if len(data) < expected else "oversized"
        raise SummaryFormatError(
            f"payload {kind}: {len(data)} bytes, the header implies {expected}"
        )
    values = np.frombuffer(data, dtype=dt, offset=offset).astype(np.float64)
    if not np.all(np.isfinite(values)) or not np.isfinite(complement):
        raise SummaryFormatError("payload decodes to NaN or infinite values")
    if flags & _FLAG_SHRINKAGE:
        if not np.isfinite(shrinkage):
            raise SummaryFormatError("shrinkage is not finite")
        shrink: float | None = float(shrinkage)
    else:
        shrink = None
    return LowRankFields(
        int(n),
        values[:m],
        values[m + r :].reshape(m, r),
        values[m : m + r],
        float(complement),
        shrink,
        client,
        dt.name,
    )
