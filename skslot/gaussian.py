"""The Gaussian summary: the moments a client shares, immutable and validated.

A :class:`GaussianSummary` holds a count, a mean and a positive definite
covariance; invalid values raise :class:`~skslot.exceptions.InvalidSummaryError`.
Its byte format is in :mod:`skslot.wire.summary_codec` (the methods
:meth:`~GaussianSummary.to_bytes` and :meth:`~GaussianSummary.from_bytes` call
it), and the optimal-transport maps between summaries in :mod:`skslot.maps`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, TypeVar, overload

import numpy as np

from ._linalg import is_positive_definite
from .exceptions import InvalidSummaryError
from .wire._errors import SummaryFormatError as _SummaryFormatError
from .wire.summary_codec import (
    DEFAULT_MAX_DIMENSION,
    MAX_COUNT,
    decode_summary,
    encode_summary,
    summary_payload_size,
)

__all__ = ["GaussianSummary"]

#: Tolerance, relative to the largest entry, on the asymmetry of a covariance.
SYMMETRY_RTOL = 1e-10

#: Range of the mean variance ``tr(S) / m`` (and bound on ``|mean|``) a summary
#: may have: the barycenter and the maps multiply covariances by factors of
#: them, so squares of these values must stay normal float64 numbers.
VARIANCE_RANGE = (1e-100, 1e100)


def _check_magnitude(mean: np.ndarray, cov: np.ndarray) -> None:
    """Reject a summary whose scale the Gaussian OT computations cannot represent."""
    check_magnitude(mean, float(np.sum(np.diagonal(cov) / cov.shape[0])))


def check_magnitude(mean: np.ndarray, variance: float) -> None:
    """Reject a mean and a mean variance ``tr(S) / m`` outside :data:`VARIANCE_RANGE`.

    Parameters
    ----------
    mean : ndarray of shape (m,)
    variance : float
        ``tr(S) / m``.

    Raises
    ------
    InvalidSummaryError
        If the variance or a mean entry leaves the range the barycenter and
        the maps can square in float64.
    """
    low, high = VARIANCE_RANGE
    if not low <= variance <= high:
        raise InvalidSummaryError(
            f"mean variance {variance:.3g} is outside the supported range [{low:g}, {high:g}] "
            "(products of such covariances leave float64's range); rescale the features"
        )
    largest = float(np.max(np.abs(mean)))
    if largest > high:
        raise InvalidSummaryError(
            f"mean entries up to {largest:.3g} exceed the supported magnitude {high:g}; "
            "rescale or centre the features"
        )


def _readonly_float64(a: Any, name: str) -> np.ndarray:
    try:
        arr = np.array(a, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise InvalidSummaryError(f"{name} is not a numeric array: {exc}") from None
    if not np.all(np.isfinite(arr)):
        raise InvalidSummaryError(f"{name} contains NaN or infinite values")
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class GaussianSummary:
    """The moments one client shares: count, mean and shrunk covariance.

    Instances are immutable and validated at construction: the mean is a
    finite vector, the covariance a finite, symmetric, positive definite
    matrix of matching dimension, and ``n >= 2``.  The server's reference
    (the barycenter) is a ``GaussianSummary`` too, with ``n`` the total count
    and no shrinkage, so it travels back to clients in the same wire format.

    Parameters
    ----------
    n : int
        Number of samples summarised (at least 2).
    mean : array-like of shape (m,)
        Sample mean.
    covariance : array-like of shape (m, m)
        Positive definite covariance (Ledoit-Wolf shrunk for a client).
    shrinkage : float or None, default=None
        Ledoit-Wolf shrinkage intensity in ``[0, 1]``, the weight of the scaled
        identity target, as ``sklearn.covariance.LedoitWolf.shrinkage_``.
    client : int, str or None, default=None
        Label of the client the summary comes from.

    Raises
    ------
    InvalidSummaryError
        If a value fails one of these checks.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> s = GaussianSummary(n=10, mean=np.zeros(2), covariance=np.eye(2), client="a")
    >>> payload = s.to_bytes(dtype="float32")
    >>> len(payload)  # 28-byte header, 3-byte label, (2 + 3) float32 values
    51
    >>> GaussianSummary.from_bytes(payload).client
    'a'
    """

    n: int
    mean: np.ndarray
    covariance: np.ndarray
    shrinkage: float | None = None
    client: int | str | None = None

    def __post_init__(self) -> None:
        n = self.n
        if isinstance(n, bool) or not isinstance(n, Integral):
            raise InvalidSummaryError(f"n must be an integer, got {n!r}")
        if not 2 <= int(n) <= MAX_COUNT:
            raise InvalidSummaryError(
                f"n must be between 2 and 2**53 samples, got {n}"
                + (f" for client {self.client!r}" if self.client is not None else "")
            )
        mean = _readonly_float64(self.mean, "mean")
        cov = _readonly_float64(self.covariance, "covariance")
        if mean.ndim != 1 or mean.shape[0] < 1:
            raise InvalidSummaryError(f"mean must be a non-empty 1-D array, got {mean.shape}")
        m = mean.shape[0]
        if cov.shape != (m, m):
            raise InvalidSummaryError(
                f"covariance has shape {cov.shape}, expected ({m}, {m}) to match the mean"
            )
        scale = np.max(np.abs(cov))
        if np.max(np.abs(0.5 * cov - 0.5 * cov.T)) > 0.5 * SYMMETRY_RTOL * scale:
            raise InvalidSummaryError("covariance is not symmetric")
        cov = 0.5 * cov + 0.5 * cov.T  # exactly symmetric, as transmitted (no overflow)
        cov.flags.writeable = False
        _check_magnitude(mean, cov)
        if not is_positive_definite(cov):
            raise InvalidSummaryError("covariance is not positive definite")
        shrinkage = self.shrinkage
        if shrinkage is not None:
            if not isinstance(shrinkage, Real) or not 0.0 <= float(shrinkage) <= 1.0:
                raise InvalidSummaryError(f"shrinkage must lie in [0, 1], got {shrinkage!r}")
            shrinkage = float(shrinkage)
        client = self.client
        if isinstance(client, np.generic):
            client = client.item()
        if client is not None and (isinstance(client, bool) or not isinstance(client, (int, str))):
            raise InvalidSummaryError(
                f"client label must be an int, a str or None, got {type(client).__name__}"
            )
        object.__setattr__(self, "n", int(n))
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "covariance", cov)
        object.__setattr__(self, "shrinkage", shrinkage)
        object.__setattr__(self, "client", client)

    @property
    def dimension(self) -> int:
        """Feature dimension ``m``."""
        return self.mean.shape[0]

    def n_values(self) -> int:
        """How many numbers the summary holds: ``m + m (m + 1) / 2`` (the covariance's upper
        triangle; its factor form: :meth:`LowRankGaussianSummary.n_values
        <skslot.low_rank.LowRankGaussianSummary.n_values>`).

        Returns
        -------
        count : int
        """
        m = self.dimension
        return m + m * (m + 1) // 2

    @property
    def trace(self) -> float:
        """The covariance's trace: the total variance."""
        return float(np.trace(self.covariance))

    def variance_along(self, directions: np.ndarray) -> np.ndarray:
        """``d^T Sigma d`` for each column ``d`` of ``directions``.

        Parameters
        ----------
        directions : ndarray of shape (m, k)

        Returns
        -------
        variances : ndarray of shape (k,)
        """
        return np.einsum("mk,mn,nk->k", directions, self.covariance, directions)

    def __repr__(self) -> str:
        return (
            f"GaussianSummary(n={self.n}, dimension={self.dimension}, "
            f"shrinkage={self.shrinkage!r}, client={self.client!r})"
        )

    # ------------------------------------------------------------------ wire
    def to_bytes(self, dtype: str | np.dtype = "float32") -> bytes:
        """Serialise to the compact wire format (never pickle).

        Layout: a 28-byte little-endian header (magic ``SKSG``, format version,
        dtype code, flags, dimension ``m``, count ``n``, shrinkage), an
        optional client label, then the ``m`` mean values and the
        ``m (m + 1) / 2`` values of the covariance's upper triangle, row by
        row, in ``dtype`` (float16, float32 or float64).  For ``m = 512`` in
        float16 this is about 264 KB.  The codec is
        :func:`skslot.wire.encode_summary`.

        Parameters
        ----------
        dtype : {"float16", "float32", "float64"}, default="float32"
            Precision of the transmitted values.

        Returns
        -------
        payload : bytes
            The encoded summary.

        Raises
        ------
        ValueError
            If ``dtype`` is not float16, float32 or float64.
        SummaryFormatError
            If a value overflows ``dtype`` or the rounded covariance is no
            longer positive definite (use a wider dtype then).
        """
        return encode_summary(self, dtype)

    def payload_size(self, dtype: str | np.dtype = "float32") -> int:
        """Length of :meth:`to_bytes` in ``dtype``, without encoding the values.

        ``len(to_bytes(dtype))`` whenever the encoding succeeds (it can fail
        when the rounded covariance is no longer positive definite).

        Parameters
        ----------
        dtype : {"float16", "float32", "float64"}, default="float32"
            Precision of the transmitted values.

        Returns
        -------
        size : int
            Bytes of the payload.

        Examples
        --------
        >>> import numpy as np
        >>> from skslot import GaussianSummary
        >>> GaussianSummary(10, np.zeros(2), np.eye(2), client="a").payload_size("float32")
        51
        """
        return summary_payload_size(self, dtype)

    @classmethod
    def from_bytes(
        cls,
        payload: bytes | bytearray | memoryview,
        *,
        expected_dimension: int | None = None,
        max_dimension: int = DEFAULT_MAX_DIMENSION,
    ) -> GaussianSummary:
        """Decode and validate a payload written by :meth:`to_bytes`.

        Parameters
        ----------
        payload : bytes-like
            The received bytes. Nothing is unpickled or evaluated.
        expected_dimension : int, optional
            Reject a summary of any other dimension.
        max_dimension : int, default=16384
            Reject a header announcing a larger dimension before allocating.

        Returns
        -------
        summary : GaussianSummary
            The validated summary the payload carries.

        Raises
        ------
        SummaryFormatError
            If the payload is truncated, longer than its header implies, of
            another format version or dtype, declares ``n < 2`` or an absurd
            ``n``, has the wrong dimension, or decodes to values the
            constructor rejects (non-finite values, a covariance that is not
            positive definite, ...).
        """
        fields = decode_summary(
            payload, expected_dimension=expected_dimension, max_dimension=max_dimension
        )
        try:
            return cls(*fields)
        except InvalidSummaryError as exc:  # received values: a format error of the payload
            raise _SummaryFormatError(str(exc)) from None


_S = TypeVar("_S")
_T = TypeVar("_T")


@overload
def as_summary_list(summaries: Any) -> tuple[list, list[GaussianSummary]]: ...
@overload
def as_summary_list(summaries: Any, kinds: tuple[type[_S]]) -> tuple[list, list[_S]]: ...
@overload
def as_summary_list(
    summaries: Any, kinds: tuple[type[_S], type[_T]]
) -> tuple[list, list[_S | _T]]: ...
def as_summary_list(
    summaries: Any, kinds: tuple[type, ...] = (GaussianSummary,)
) -> tuple[list, list]:
    """Client labels and summaries from a summary, a list or a dict of them.

    Parameters
    ----------
    summaries : GaussianSummary, sequence of GaussianSummary or mapping
        One summary, several (labelled by their ``client``, or by position
        when none has one), or a mapping from client label to summary.
    kinds : tuple of types, default=(GaussianSummary,)
        The summary types accepted (with
        :class:`~skslot.low_rank.LowRankGaussianSummary` for a caller that
        takes both forms).

    Returns
    -------
    labels : list
        One client label per summary, all distinct.
    items : list of GaussianSummary (or of the ``kinds``)
        The summaries, all of the same dimension.

    Raises
    ------
    ValueError
        If there is no summary, two share a label, or their dimensions differ.
    TypeError
        If an item is not a :class:`GaussianSummary`.
    """
    if isinstance(summaries, kinds):
        summaries = [summaries]
    if isinstance(summaries, Mapping):
        labels = list(summaries.keys())
        items = list(summaries.values())
    else:
        items = list(summaries)
        labels = [getattr(s, "client", None) for s in items]
        if all(label is None for label in labels):
            labels = list(range(len(items)))  # unlabelled summaries: keyed by position
    if not items:
        raise ValueError("at least one GaussianSummary is needed")
    seen = set()
    for label in labels:
        if label in seen:
            raise ValueError(
                f"two summaries have client label {label!r}; each client sends one summary "
                "(merge a client's partial summaries with GaussianSummaryEstimator.merge)"
            )
        seen.add(label)
    for label, s in zip(labels, items, strict=True):
        if not isinstance(s, kinds):
            expected = " or ".join(kind.__name__ for kind in kinds)
            raise TypeError(
                f"expected {expected} objects, got {type(s).__name__} for client {label!r}"
            )
    dims = {s.dimension for s in items}
    if len(dims) > 1:
        raise ValueError(f"summaries have different dimensions: {sorted(dims)}")
    return labels, items
