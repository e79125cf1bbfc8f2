"""Messages of named numeric arrays, validated on receipt.

A client's head statistics and the server's global head travel between
parties as a flat ``dict[str, ndarray]`` of numeric arrays (an
:data:`ArrayMessage`), a form any transport carries without pickle (Flower's
``ArrayRecord`` writes each array with ``np.save(allow_pickle=False)``).
Class labels never travel inside these messages: rows are positioned against
the global class set both sides agreed on.  Everything received goes through
:func:`read_array` (names, dtypes, shapes, finite values) and the message
classes' cross-checks (counts that add up, covariances positive semi-definite
up to the rounding of their transmitted dtype, :func:`check_psd_up_to_rounding`)
before any computation touches it; every failure is a
:class:`~skslot.wire.StatisticsFormatError`.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._errors import StatisticsFormatError

__all__ = [
    "ArrayMessage",
    "check_psd_up_to_rounding",
    "message_bytes",
    "read_array",
    "read_count",
    "read_sample_count",
    "sample_count_problem",
]

ArrayMessage = dict[str, np.ndarray]


def message_bytes(arrays: Mapping[str, np.ndarray]) -> int:
    """Bytes a message of named arrays takes on the wire, as Flower counts them.

    Each array travels as an ``.npy`` file (``np.save(allow_pickle=False)``:
    a header padded to 64 bytes, then the raw data) under its name; the count
    is the ``.npy`` lengths plus the names' lengths, which is what Flower's
    ``ArrayRecord.count_bytes`` reports for the same arrays, so
    :func:`skslot_bench.run_benchmark` and the Flower deployment's
    ``report.json`` give one number.

    Parameters
    ----------
    arrays : mapping of str to ndarray
        The message, by array name.

    Returns
    -------
    n_bytes : int
        The ``.npy`` lengths plus the names' lengths.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.heads import message_bytes
    >>> message_bytes({"coef": np.zeros((10, 512)), "intercept": np.zeros(10)})
    41309
    """
    total = 0
    for name, array in arrays.items():
        array = np.asanyarray(array)
        header = io.BytesIO()
        fields = np.lib.format.header_data_from_array_1_0(array)
        np.lib.format.write_array_header_1_0(header, fields)
        total += len(header.getvalue()) + array.nbytes + len(name)
    return total


def read_array(
    arrays: Mapping[str, Any],
    name: str,
    shape: tuple[int | None, ...],
    *,
    integer: bool = False,
    nonnegative: bool = False,
) -> np.ndarray:
    """Fetch and check one array of a received message.

    Parameters
    ----------
    arrays : mapping of str to ndarray
        The received message.
    name : str
        Key of the array.
    shape : tuple of int or None
        Expected shape; ``None`` accepts any length along that axis.
    integer : bool, default=False
        Require integer values (stored as integers or as integral floats).
    nonnegative : bool, default=False
        Require values ``>= 0``.

    Returns
    -------
    ndarray
        A new float64 array (int64 when ``integer``), never a view of the
        received buffer.

    Raises
    ------
    StatisticsFormatError
        If the array is missing, not numeric, of another shape, not finite,
        not integral or negative where that is required.
    """
    if name not in arrays:
        raise StatisticsFormatError(f"message lacks the array {name!r}")
    value = arrays[name]
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iuf":
        kind = getattr(value, "dtype", type(value).__name__)
        raise StatisticsFormatError(f"array {name!r} must be numeric, got {kind}")
    if value.ndim != len(shape) or any(
        want is not None and got != want for got, want in zip(value.shape, shape, strict=True)
    ):
        expected = tuple("*" if s is None else s for s in shape)
        raise StatisticsFormatError(f"array {name!r} has shape {value.shape}, expected {expected}")
    out = value.astype(np.float64)  # a copy: nothing aliases the transport buffer
    if not np.all(np.isfinite(out)):
        raise StatisticsFormatError(f"array {name!r} contains NaN or infinite values")
    if nonnegative and np.any(out < 0):
        raise StatisticsFormatError(f"array {name!r} has negative entries")
    if integer:
        if np.any(out != np.round(out)) or np.any(np.abs(out) > 2.0**53):
            raise StatisticsFormatError(f"array {name!r} must hold integers")
        return out.astype(np.int64)
    return out


def read_count(arrays: Mapping[str, Any], name: str, low: int, high: int | None = None) -> int:
    """A scalar integer field in ``[low, high]``.

    Parameters
    ----------
    arrays : mapping of str to ndarray
        The received message.
    name : str
        Key of the field.
    low : int
        Smallest value accepted.
    high : int, optional
        Largest value accepted; no bound by default.

    Returns
    -------
    value : int
        The field's value.

    Raises
    ------
    StatisticsFormatError
        If the field is missing, not a scalar integer, or out of range.
    """
    value = int(read_array(arrays, name, (), integer=True))
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise StatisticsFormatError(f"{name} = {value} is out of range (expected {bound})")
    return value


def sample_count_problem(n: int, n_samples: int | None, what: str) -> str | None:
    """Why a message's row count ``n`` disagrees with the ``n_samples`` its client announced.

    Parameters
    ----------
    n : int
        The rows the message accounts for.
    n_samples : int or None
        The rows the client announced; ``None``: nothing to compare with.
    what : str
        What the message is, for the reason (``"<what> <n> rows ..."``).

    Returns
    -------
    problem : str or None
        The reason, or ``None`` when the counts agree.
    """
    if n_samples is not None and n != n_samples:
        return f"{what} {n} rows but the client announced {n_samples}"
    return None


def read_sample_count(arrays: Mapping[str, Any], n_samples: int | None, what: str) -> int:
    """The message's row count ``n``, equal to ``n_samples`` (the client's announced) when given.

    Parameters
    ----------
    arrays : mapping of str to ndarray
        The received message, with a scalar field ``n >= 1``.
    n_samples : int or None
        The rows the client announced; ``None``: any count.
    what : str
        What the message is, for the error message.

    Returns
    -------
    n : int
        The message's row count.

    Raises
    ------
    StatisticsFormatError
        If ``n`` is missing or invalid, or differs from ``n_samples``.
    """
    n = read_count(arrays, "n", 1)
    why = sample_count_problem(n, n_samples, what)
    if why is not None:
        raise StatisticsFormatError(why)
    return n


def check_psd_up_to_rounding(name: str, matrix: np.ndarray, eps: float) -> None:
    """Reject a matrix that is not symmetric positive semi-definite.

    A PSD matrix whose entries were each rounded with relative precision
    ``eps`` moves by at most ``m * eps * max_i A_ii`` in spectral norm, so
    ``A + m * eps * max_i A_ii * I`` must still admit a Cholesky factor.

    Parameters
    ----------
    name : str
        What the matrix is, for the error message.
    matrix : ndarray of shape (..., m, m)
        One matrix or a stack of them.
    eps : float
        The relative precision its entries were rounded with.

    Raises
    ------
    StatisticsFormatError
        If a matrix is not symmetric, has a negative variance, or is not
        positive semi-definite up to that rounding.
    """
    m = matrix.shape[-1]
    transpose = np.swapaxes(matrix, -1, -2)
    scale = float(np.max(np.abs(matrix), initial=0.0))
    if np.max(np.abs(matrix - transpose), initial=0.0) > 8 * eps * scale:
        raise StatisticsFormatError(f"{name} is not symmetric")
    diagonal = np.diagonal(matrix, axis1=-2, axis2=-1)
    if np.any(diagonal < 0):
        raise StatisticsFormatError(f"{name} has negative variances")
    ridge = m * eps * np.max(diagonal, axis=-1, initial=0.0) + np.finfo(np.float64).tiny
    try:
        np.linalg.cholesky(matrix + ridge[..., None, None] * np.eye(m))
    except np.linalg.LinAlgError:
        raise StatisticsFormatError(f"{name} is not positive semi-definite") from None
