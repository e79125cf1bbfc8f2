"""The byte format of a Gaussian summary (never pickle), in either form, and its decoder.

Both forms share a little-endian header (magic, format version, dtype code,
flags, dimension ``m``, ...), an optional client label (an int64, or a uint16
length and UTF-8 bytes) and values in float16, float32 or float64:

* dense (magic ``SKSG``, a 28-byte header: ..., count ``n``, shrinkage): the
  ``m`` mean values and the ``m (m + 1) / 2`` values of the covariance's upper
  triangle, row by row.  For ``m = 512`` in float16 this is about 264 KB;
* factor (magic ``SKSL``, a 40-byte header: ..., rank ``r``, count ``n``,
  shrinkage, complement): the ``m`` mean values, the ``r`` eigenvalues and the
  ``m r`` entries of the basis, row by row: ``m (r + 1) + r`` values (at
  ``m = 4096``, ``r = 99`` in float32: 1.6 MB instead of 33.6 MB dense).

The decoder reads the form from the magic, checks the structure (header,
dimension, rank, count, label, exact length: all before anything the header
sizes is allocated), that the values are finite and that a basis is
orthonormal up to its dtype's rounding; :class:`~skslot.GaussianSummary`
validates the values (:meth:`GaussianSummary.from_bytes
<skslot.GaussianSummary.from_bytes>`).  The codec works on the plain fields of
a summary (:class:`SummaryFields`, or any object with the same attributes).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import numpy as np

from .._linalg import (
    is_positive_definite,
    orthonormality_error,
    orthonormalized,
    symmetric_from_upper,
    upper_triangle,
)
from ._errors import SummaryFormatError

__all__ = [
    "SUMMARY_DTYPES",
    "SummaryFields",
    "check_wire_label",
    "decode_summary",
    "encode_summary",
    "summary_dimension",
    "summary_payload_size",
]


class SummaryFields(NamedTuple):
    """The fields of a Gaussian summary, as the wire format carries them.

    What :func:`decode_summary` returns: structurally checked, not yet
    validated as a summary (``GaussianSummary(*fields)`` does that).  The
    covariance is given dense, or (``covariance=None``) in factor form
    ``U diag(e) U^T + c (I - U U^T)``.

    Parameters
    ----------
    n : int
        Number of samples summarised.
    mean : ndarray of shape (m,)
        The mean.
    covariance : ndarray of shape (m, m) or None
        The dense covariance, symmetric by construction; ``None`` in factor form.
    shrinkage : float or None
        The Ledoit-Wolf shrinkage intensity, if the payload carries one.
    client : int, str or None
        The client label, if the payload carries one.
    basis : ndarray of shape (m, r) or None, default=None
        ``U``, orthonormal columns (factor form).
    eigenvalues : ndarray of shape (r,) or None, default=None
        ``e`` (factor form).
    complement : float or None, default=None
        ``c`` (factor form).
    """

    n: int
    mean: np.ndarray
    covariance: np.ndarray | None
    shrinkage: float | None
    client: int | str | None
    basis: np.ndarray | None = None
    eigenvalues: np.ndarray | None = None
    complement: float | None = None


#: Largest sample count a payload may declare (exactly representable in float64).
MAX_COUNT = 2**53
#: Default largest dimension accepted by :func:`decode_summary`.
DEFAULT_MAX_DIMENSION = 16384
#: What the float64 arithmetic of a basis (a thin QR factorisation, then an
#: eigenbasis of the small Gram) leaves of ``||U^T U - I||_max``: some hundred
#: float64 rounding errors at a few hundred rows, which the decoder accepts.
BASIS_ROUNDING = 1e-12

_MAGIC = b"SKSG"
#: The magic of the factor form, whose header holds the version and the dimension
#: where the dense form's does.
_LOW_RANK_MAGIC = b"SKSL"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBBBxIQd")  # magic, version, dtype, flags, m, n, shrinkage
# magic, version, dtype, flags, m, r, n, shrinkage, complement
_LOW_RANK_HEADER = struct.Struct("<4sBBBxIIQdd")
_DTYPES: dict[int, np.dtype] = {1: np.dtype("<f2"), 2: np.dtype("<f4"), 3: np.dtype("<f8")}
_DTYPE_CODES = {dt.name: code for code, dt in _DTYPES.items()}
#: The precisions a summary may travel in.
SUMMARY_DTYPES = tuple(dt.name for dt in _DTYPES.values())
_FLAG_SHRINKAGE = 1
_FLAG_INT_LABEL = 2
_FLAG_STR_LABEL = 4
_MAX_LABEL_BYTES = 1024


def _wire_dtype(dtype: str | np.dtype) -> np.dtype:
    """``dtype`` as a NumPy dtype, if the format has a code for it."""
    dt = np.dtype(dtype)
    if dt.name not in _DTYPE_CODES:
        raise ValueError(f"dtype must be float16, float32 or float64, got {dt.name}")
    return dt


def _label_bytes(client: int | str | None) -> tuple[int, bytes]:
    """The header flag and the encoded client label (empty for no label)."""
    if isinstance(client, int):
        if not -(2**63) <= client < 2**63:
            raise SummaryFormatError("integer client label does not fit in 64 bits")
        return _FLAG_INT_LABEL, struct.pack("<q", client)
    if isinstance(client, str):
        encoded = client.encode("utf-8")
        if len(encoded) > _MAX_LABEL_BYTES:
            raise SummaryFormatError(f"client label longer than {_MAX_LABEL_BYTES} bytes")
        return _FLAG_STR_LABEL, struct.pack("<H", len(encoded)) + encoded
    return 0, b""


def read_label(data: bytes, offset: int, flags: int) -> tuple[int | str | None, int]:
    """The client label at ``offset`` that the header ``flags`` announce, and the offset after it.

    Parameters
    ----------
    data : bytes
        The payload.
    offset : int
        Where the label starts (after the header).
    flags : int
        The header's flags (``2``: an int64 label; ``4``: a uint16 length and UTF-8 bytes).

    Returns
    -------
    client : int, str or None
    offset : int

    Raises
    ------
    SummaryFormatError
        If the payload ends inside the label, or its length or UTF-8 is invalid.
    """
    try:
        if flags & _FLAG_INT_LABEL:
            return struct.unpack_from("<q", data, offset)[0], offset + 8
        if flags & _FLAG_STR_LABEL:
            (length,) = struct.unpack_from("<H", data, offset)
            end = offset + 2 + length
            if length > _MAX_LABEL_BYTES or end > len(data):
                raise SummaryFormatError("client label length is invalid")
            return data[offset + 2 : end].decode("utf-8"), end
    except struct.error:
        raise SummaryFormatError("payload truncated inside the client label") from None
    except UnicodeDecodeError:
        raise SummaryFormatError("client label is not valid UTF-8") from None
    return None, offset


def check_wire_label(client: object) -> int | str | None:
    """``client`` if the format can carry it as a client label.

    Parameters
    ----------
    client : object
        A candidate client label.

    Returns
    -------
    client : int, str or None
        ``client`` itself.

    Raises
    ------
    SummaryFormatError
        If ``client`` is not an int, a str or ``None``, or does not fit the
        format (an int beyond 64 bits, a label longer than 1024 UTF-8 bytes).
    """
    if client is not None and (type(client) not in (int, str)):
        raise SummaryFormatError(
            f"a client label must be an int, a string or None, got {type(client).__name__}"
        )
    _label_bytes(client)  # type: ignore[arg-type]
    return client  # type: ignore[return-value]


def _packed(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``values`` in the wire's ``dt``, refused where one overflows it."""
    with np.errstate(over="ignore", under="ignore"):
        packed = values.astype(dt.newbyteorder("<"))
    if not np.all(np.isfinite(packed)):
        raise SummaryFormatError(f"summary values overflow {dt.name}; send it in a wider dtype")
    return packed


def encode_summary(summary: Any, dtype: str | np.dtype = "float32") -> bytes:
    """The payload of a summary's fields with its values in ``dtype``, in the summary's form.

    Parameters
    ----------
    summary : GaussianSummary or SummaryFields
        The fields to encode (anything with the attributes of
        :class:`SummaryFields`; the factor form where ``basis`` is set), with
        a finite mean and a symmetric positive definite covariance, as a
        :class:`~skslot.GaussianSummary` holds them.
    dtype : {"float16", "float32", "float64"}, default="float32"
        The precision of the transmitted values (the count, shrinkage and
        complement travel in the header, exactly).

    Returns
    -------
    payload : bytes
        The header, the client label and the values.

    Raises
    ------
    ValueError
        If ``dtype`` is not float16, float32 or float64.
    SummaryFormatError
        If a value overflows ``dtype``, the rounded covariance is no longer
        positive definite or an eigenvalue rounds to zero (use a wider dtype
        then), or the client label does not fit the format.
    """
    dt = _wire_dtype(dtype)
    mean = np.asarray(summary.mean, dtype=np.float64)
    m = mean.shape[0]
    basis = getattr(summary, "basis", None)
    dims: tuple[int, ...]  # after the flags: m, and the factor form's rank
    tail: tuple[float, ...] = ()  # after the shrinkage: the factor form's complement
    if basis is None:
        covariance = np.asarray(summary.covariance, np.float64)
        packed = _packed(np.concatenate([mean, upper_triangle(covariance)]), dt)
        if dt.itemsize < 8:
            rounded = symmetric_from_upper(packed[m:].astype(np.float64), m)
            if not is_positive_definite(rounded):
                raise SummaryFormatError(
                    f"covariance rounded to {dt.name} is not positive definite; "
                    "send it in a wider dtype"
                )
        header, magic, dims = _HEADER, _MAGIC, (m,)
    else:
        basis = np.asarray(basis, dtype=np.float64)
        eigenvalues = np.asarray(summary.eigenvalues, dtype=np.float64)
        r = basis.shape[1]
        packed = _packed(np.concatenate([mean, eigenvalues, basis.ravel()]), dt)
        if r and float(packed[m : m + r].min()) <= 0.0:
            raise SummaryFormatError(
                f"an eigenvalue rounds to zero in {dt.name}; send it in a wider dtype"
            )
        header, magic, dims = _LOW_RANK_HEADER, _LOW_RANK_MAGIC, (m, r)
        tail = (float(summary.complement),)
    flags = 0 if summary.shrinkage is None else _FLAG_SHRINKAGE
    label_flag, label = _label_bytes(summary.client)
    shrinkage = np.nan if summary.shrinkage is None else summary.shrinkage
    fields = (magic, _FORMAT_VERSION, _DTYPE_CODES[dt.name], flags | label_flag, *dims)
    return header.pack(*fields, summary.n, shrinkage, *tail) + label + packed.tobytes()


def summary_payload_size(
    summary: Any, dtype: str | np.dtype = "float32", *, form: str | None = None
) -> int:
    """Length of :func:`encode_summary`'s payload in ``dtype``, without encoding the values.

    Parameters
    ----------
    summary : GaussianSummary or SummaryFields
        The fields to encode (only the mean's length, the basis's shape and
        the client label are read).
    dtype : {"float16", "float32", "float64"}, default="float32"
        The precision of the transmitted values.
    form : {"dense", "low-rank"}, optional
        The form to size; default: the summary's own (factor where ``basis`` is set).

    Returns
    -------
    size : int
        ``len(encode_summary(summary, dtype))`` whenever the encoding succeeds.
    """
    dt = _wire_dtype(dtype)
    m = len(summary.mean)
    label = _label_bytes(summary.client)[1]
    basis = getattr(summary, "basis", None)
    if form not in (None, "dense", "low-rank") or (form == "low-rank" and basis is None):
        raise ValueError(f"cannot size a {form!r} form of this summary: it has no such form")
    if form == "dense" or (form is None and basis is None):
        return _HEADER.size + len(label) + (m * (m + 1) // 2 + m) * dt.itemsize
    r = np.shape(summary.basis)[1]
    return _LOW_RANK_HEADER.size + len(label) + (m + r + m * r) * dt.itemsize


def _header(
    payload: object, max_dimension: int, expected_dimension: int | None, *, decoding: bool = True
) -> tuple[bytes, struct.Struct, tuple]:
    """The payload's bytes, its form's header layout and the header's fields.

    The magic (either form's), the version, the dtype and flags (where
    ``decoding``) and the dimension are checked before any allocation.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise SummaryFormatError(f"payload must be bytes, got {type(payload).__name__}")
    data = bytes(payload)
    header = _LOW_RANK_HEADER if data[:4] == _LOW_RANK_MAGIC else _HEADER
    if len(data) < header.size:
        raise SummaryFormatError(
            f"payload truncated: {len(data)} bytes, shorter than the {header.size}-byte header"
        )
    fields = header.unpack_from(data)
    magic, version, dtype_code, flags, m = fields[:5]
    if magic not in (_MAGIC, _LOW_RANK_MAGIC):
        raise SummaryFormatError("payload is not a skslot Gaussian summary (bad magic)")
    if version != _FORMAT_VERSION:
        raise SummaryFormatError(
            f"unsupported summary format version {version} "
            f"(this skslot reads version {_FORMAT_VERSION})"
        )
    if decoding and dtype_code not in _DTYPES:
        raise SummaryFormatError(f"unknown dtype code {dtype_code}")
    if decoding and (
        flags & ~(_FLAG_SHRINKAGE | _FLAG_INT_LABEL | _FLAG_STR_LABEL)
        or (flags & _FLAG_INT_LABEL and flags & _FLAG_STR_LABEL)
    ):
        raise SummaryFormatError(f"invalid header flags {flags:#x}")
    if m < 1 or m > max_dimension:
        raise SummaryFormatError(f"dimension {m} outside the accepted range [1, {max_dimension}]")
    if expected_dimension is not None and m != expected_dimension:
        raise SummaryFormatError(
            f"dimension mismatch: payload has dimension {m}, expected {expected_dimension}"
        )
    return data, header, fields


def summary_dimension(
    payload: bytes | bytearray | memoryview, *, max_dimension: int = DEFAULT_MAX_DIMENSION
) -> int:
    """The dimension a summary payload's header announces, read without decoding the values.

    A server learns each upload's dimension this way, decides the run's, and
    decodes only the summaries of that dimension: a payload announcing another
    costs no allocation.  Either form is read.

    Parameters
    ----------
    payload : bytes-like
        The received bytes.
    max_dimension : int, default=16384
        Reject a header announcing a larger dimension.

    Returns
    -------
    int
        The dimension ``m`` of the header.

    Raises
    ------
    SummaryFormatError
        If the payload is not bytes, is shorter than the header, or its magic,
        format version or dimension is invalid.
    """
    return int(_header(payload, max_dimension, None, decoding=False)[2][4])


def decode_summary(
    payload: bytes | bytearray | memoryview,
    *,
    expected_dimension: int | None = None,
    max_dimension: int = DEFAULT_MAX_DIMENSION,
    max_rank: int | None = None,
) -> SummaryFields:
    """Decode a payload written by :func:`encode_summary` into its fields, in its form.

    The structure is checked: the header, the dimension, the rank, the count,
    the client label and the payload's length, and the values must be
    finite.  A basis must be orthonormal up to what its dtype's rounding and
    the float64 arithmetic that made it explain (``|U^T U - I| <= max(64 eps,
    BASIS_ROUNDING)``); it is then made orthonormal again (a QR
    factorisation, the same span).  The values are not validated as a
    summary (positive definite covariance, magnitudes):
    :meth:`GaussianSummary.from_bytes <skslot.GaussianSummary.from_bytes>`
    builds the summary from these fields and does, so receive summaries with it.

    Parameters
    ----------
    payload : bytes-like
        The received bytes.  Nothing is unpickled or evaluated.
    expected_dimension : int, optional
        Reject a payload of any other dimension.
    max_dimension : int, default=16384
        Reject a header announcing a larger dimension before allocating.
    max_rank : int, optional
        Reject a factor form announcing a larger rank before allocating
        (default: the dimension).

    Returns
    -------
    fields : SummaryFields
        The count, mean, covariance (exactly symmetric) or its factors,
        shrinkage and client label the payload carries.

    Raises
    ------
    SummaryFormatError
        If the payload is not bytes, is truncated or longer than its header
        implies, has another magic, format version, dtype or unknown flags,
        declares ``n < 2`` or ``n > 2**53``, has a dimension outside
        ``[1, max_dimension]`` or other than ``expected_dimension``, a rank
        above the dimension or ``max_rank``, a basis that is not orthonormal,
        or decodes to non-finite values.
    """
    data, header, fields = _header(payload, max_dimension, expected_dimension)
    dtype_code, flags, m = fields[2:5]
    if header is _HEADER:
        n, shrinkage = fields[5:]
        complement, count = 0.0, m + m * (m + 1) // 2
    else:
        r, n, shrinkage, complement = fields[5:]
        highest = m if max_rank is None else min(m, max_rank)
        if r > highest:
            raise SummaryFormatError(f"rank {r} above the accepted {highest} (dimension {m})")
        count = m + r + m * r
    if not 2 <= n <= MAX_COUNT:
        raise SummaryFormatError(f"n must be between 2 and 2**53, payload says {n}")
    client, offset = read_label(data, header.size, flags)
    dt = _DTYPES[dtype_code]
    expected = offset + count * dt.itemsize
    if len(data) != expected:
        kind = "truncated" if len(data) < expected else "oversized"
        raise SummaryFormatError(
            f"payload {kind}: {len(data)} bytes, the header implies {expected}"
        )
    values = np.frombuffer(data, dtype=dt, offset=offset).astype(np.float64)
    if not (np.all(np.isfinite(values)) and np.isfinite(complement)):
        raise SummaryFormatError("payload decodes to NaN or infinite values")
    shrink = None
    if flags & _FLAG_SHRINKAGE:
        if not np.isfinite(shrinkage):
            raise SummaryFormatError("shrinkage is not finite")
        shrink = float(shrinkage)
    if header is _HEADER:
        return SummaryFields(
            int(n), values[:m], symmetric_from_upper(values[m:], m), shrink, client
        )
    mean, eigenvalues, U = values[:m], values[m : m + r], values[m + r :].reshape(m, r)
    allowed = max(64 * float(np.finfo(dt).eps), BASIS_ROUNDING)
    error = orthonormality_error(U)
    if error > allowed:
        raise SummaryFormatError(
            f"basis is not orthonormal: |U^T U - I| reaches {error:.2e}, "
            f"above the {allowed:.1e} that {dt.name} rounding explains"
        )
    U = orthonormalized(U)  # the nearest orthonormal columns, the same span
    return SummaryFields(int(n), mean, None, shrink, client, U, eigenvalues, float(complement))
