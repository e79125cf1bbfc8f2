"""Gaussian summaries, their wire format, and Gaussian optimal transport.

Formulas (each written once, here):

* Bures-Wasserstein distance between ``N(mu_1, S_1)`` and ``N(mu_2, S_2)``
  [1]_::

      W2^2 = ||mu_1 - mu_2||^2 + tr S_1 + tr S_2 - 2 tr (S_2^{1/2} S_1 S_2^{1/2})^{1/2}

* Optimal-transport (Monge) map from ``N(mu_1, S_1)`` to ``N(mu_2, S_2)`` [2]_::

      T(x) = A x + b,   A = S_2^{1/2} (S_2^{1/2} S_1 S_2^{1/2})^{-1/2} S_2^{1/2},
      b = mu_2 - A mu_1

  ``A`` is the unique symmetric positive definite solution of ``A S_1 A = S_2``,
  so for *any* factor ``S_2 = F F^T`` (Cholesky, or the square root) also
  ``A = F (F^T S_1 F)^{-1/2} F^T``, and ``F^T S_1 F`` has the eigenvalues of
  ``S_2^{1/2} S_1 S_2^{1/2}``.  skslot uses the Cholesky factor: no
  eigendecomposition of ``S_2`` is needed.

* Its displacement interpolation (McCann geodesic) [3]_::

      T^tau = (1 - tau) Id + tau T,   W2(T^tau # G_1, G_2) = (1 - tau) W2(G_1, G_2)

* An affine map ``T(x) = A x + b`` acting on statistics of rows (what lets the
  server align a client's head statistics without seeing its rows)::

      Gaussian      N(mu, S)         ->  N(A mu + b, A S A^T)
      class sums    s_c = sum x      ->  A s_c + n_c b
      power sums    about shift c    ->  about A c + b:  A s1,  A G A^T

  (with ``z = x - c`` the power sums are ``s1 = sum z`` and ``G = sum z z^T``,
  and ``T(x) - T(c) = A z``, so no raw second moment is ever formed).

References
----------
.. [1] Bhatia, Jain and Lim, "On the Bures-Wasserstein distance between
   positive definite matrices", Expositiones Mathematicae, 2019.
.. [2] Knott and Smith, "On the optimal mapping of distributions", Journal of
   Optimization Theory and Applications, 1984.
.. [3] McCann, "A convexity principle for interacting gases", Advances in
   Mathematics, 1997.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from ._backend import empty_like_rows, matmul_into, to_backend
from ._linalg import (
    SymmetricEigh,
    cholesky_factor,
    is_positive_definite,
    sym_eigh,
    symmetric_from_upper,
    trace_sqrt,
    upper_triangle,
)
from ._moments import ShiftedMoments

__all__ = [
    "GaussianMap",
    "GaussianSummary",
    "SummaryFormatError",
    "bures_wasserstein_distance",
]

#: Largest sample count a payload may declare (exactly representable in float64).
MAX_COUNT = 2**53
#: Default largest dimension accepted by :meth:`GaussianSummary.from_bytes`.
DEFAULT_MAX_DIMENSION = 16384
#: Tolerance, relative to the largest entry, on the asymmetry of a covariance.
SYMMETRY_RTOL = 1e-10

_MAGIC = b"SKSG"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBBBxIQd")  # magic, version, dtype, flags, m, n, shrinkage
_DTYPES = {1: np.dtype("<f2"), 2: np.dtype("<f4"), 3: np.dtype("<f8")}
_DTYPE_CODES = {dt.name: code for code, dt in _DTYPES.items()}
_FLAG_SHRINKAGE = 1
_FLAG_INT_LABEL = 2
_FLAG_STR_LABEL = 4
_MAX_LABEL_BYTES = 1024


class SummaryFormatError(ValueError):
    """A Gaussian summary, or its byte payload, is malformed or inconsistent."""


#: Range of the mean variance ``tr(S) / m`` (and bound on ``|mean|``) a summary
#: may have: the barycenter and the maps multiply covariances by factors of
#: them, so squares of these values must stay normal float64 numbers.
VARIANCE_RANGE = (1e-100, 1e100)


def _check_magnitude(mean: np.ndarray, cov: np.ndarray) -> None:
    """Reject a summary whose scale the Gaussian OT computations cannot represent."""
    low, high = VARIANCE_RANGE
    variance = float(np.sum(np.diagonal(cov) / cov.shape[0]))
    if not low <= variance <= high:
        raise SummaryFormatError(
            f"mean variance {variance:.3g} is outside the supported range [{low:g}, {high:g}] "
            "(products of such covariances leave float64's range); rescale the features"
        )
    largest = float(np.max(np.abs(mean)))
    if largest > high:
        raise SummaryFormatError(
            f"mean entries up to {largest:.3g} exceed the supported magnitude {high:g}; "
            "rescale or centre the features"
        )


def _readonly_float64(a: Any, name: str) -> np.ndarray:
    try:
        arr = np.array(a, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise SummaryFormatError(f"{name} is not a numeric array: {exc}") from None
    if not np.all(np.isfinite(arr)):
        raise SummaryFormatError(f"{name} contains NaN or infinite values")
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
            raise SummaryFormatError(f"n must be an integer, got {n!r}")
        if not 2 <= int(n) <= MAX_COUNT:
            raise SummaryFormatError(
                f"n must be between 2 and 2**53 samples, got {n}"
                + (f" for client {self.client!r}" if self.client is not None else "")
            )
        mean = _readonly_float64(self.mean, "mean")
        cov = _readonly_float64(self.covariance, "covariance")
        if mean.ndim != 1 or mean.shape[0] < 1:
            raise SummaryFormatError(f"mean must be a non-empty 1-D array, got {mean.shape}")
        m = mean.shape[0]
        if cov.shape != (m, m):
            raise SummaryFormatError(
                f"covariance has shape {cov.shape}, expected ({m}, {m}) to match the mean"
            )
        scale = np.max(np.abs(cov))
        if np.max(np.abs(0.5 * cov - 0.5 * cov.T)) > 0.5 * SYMMETRY_RTOL * scale:
            raise SummaryFormatError("covariance is not symmetric")
        cov = 0.5 * cov + 0.5 * cov.T  # exactly symmetric, as transmitted (no overflow)
        cov.flags.writeable = False
        _check_magnitude(mean, cov)
        if not is_positive_definite(cov):
            raise SummaryFormatError("covariance is not positive definite")
        shrinkage = self.shrinkage
        if shrinkage is not None:
            if not isinstance(shrinkage, Real) or not 0.0 <= float(shrinkage) <= 1.0:
                raise SummaryFormatError(f"shrinkage must lie in [0, 1], got {shrinkage!r}")
            shrinkage = float(shrinkage)
        client = self.client
        if isinstance(client, np.generic):
            client = client.item()
        if client is not None and (isinstance(client, bool) or not isinstance(client, (int, str))):
            raise SummaryFormatError(
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
        float16 this is about 264 KB.

        Raises
        ------
        SummaryFormatError
            If a value overflows ``dtype`` or the rounded covariance is no
            longer positive definite (use a wider dtype then).
        """
        dt = np.dtype(dtype)
        if dt.name not in _DTYPE_CODES:
            raise ValueError(f"dtype must be float16, float32 or float64, got {dt.name}")
        m = self.dimension
        values = np.concatenate([self.mean, upper_triangle(self.covariance)])
        with np.errstate(over="ignore"):
            packed = values.astype(dt.newbyteorder("<"))
        if not np.all(np.isfinite(packed)):
            raise SummaryFormatError(f"summary values overflow {dt.name}; send it in a wider dtype")
        if dt.itemsize < 8:
            rounded = symmetric_from_upper(packed[m:].astype(np.float64), m)
            if not is_positive_definite(rounded):
                raise SummaryFormatError(
                    f"covariance rounded to {dt.name} is not positive definite; "
                    "send it in a wider dtype"
                )
        flags = 0 if self.shrinkage is None else _FLAG_SHRINKAGE
        label_flag, label = self._label_bytes()
        flags |= label_flag
        header = _HEADER.pack(
            _MAGIC,
            _FORMAT_VERSION,
            _DTYPE_CODES[dt.name],
            flags,
            m,
            self.n,
            np.nan if self.shrinkage is None else self.shrinkage,
        )
        return header + label + packed.tobytes()

    def _label_bytes(self) -> tuple[int, bytes]:
        """The header flag and the encoded client label (empty for no label)."""
        if isinstance(self.client, int):
            if not -(2**63) <= self.client < 2**63:
                raise SummaryFormatError("integer client label does not fit in 64 bits")
            return _FLAG_INT_LABEL, struct.pack("<q", self.client)
        if isinstance(self.client, str):
            encoded = self.client.encode("utf-8")
            if len(encoded) > _MAX_LABEL_BYTES:
                raise SummaryFormatError(f"client label longer than {_MAX_LABEL_BYTES} bytes")
            return _FLAG_STR_LABEL, struct.pack("<H", len(encoded)) + encoded
        return 0, b""

    def payload_size(self, dtype: str | np.dtype = "float32") -> int:
        """Length of :meth:`to_bytes` in ``dtype``, without encoding the values.

        ``len(to_bytes(dtype))`` whenever the encoding succeeds (it can fail
        when the rounded covariance is no longer positive definite).

        Examples
        --------
        >>> import numpy as np
        >>> from skslot import GaussianSummary
        >>> GaussianSummary(10, np.zeros(2), np.eye(2), client="a").payload_size("float32")
        51
        """
        dt = np.dtype(dtype)
        if dt.name not in _DTYPE_CODES:
            raise ValueError(f"dtype must be float16, float32 or float64, got {dt.name}")
        m = self.dimension
        return _HEADER.size + len(self._label_bytes()[1]) + (m * (m + 1) // 2 + m) * dt.itemsize

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

        Raises
        ------
        SummaryFormatError
            If the payload is truncated, longer than its header implies, of
            another format version or dtype, declares ``n < 2`` or an absurd
            ``n``, has the wrong dimension, or decodes to non-finite values or
            a covariance that is not positive definite.
        """
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise SummaryFormatError(f"payload must be bytes, got {type(payload).__name__}")
        data = bytes(payload)
        if len(data) < _HEADER.size:
            raise SummaryFormatError(
                f"payload truncated: {len(data)} bytes, shorter than the {_HEADER.size}-byte header"
            )
        magic, version, dtype_code, flags, m, n, shrinkage = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise SummaryFormatError("payload is not a skslot Gaussian summary (bad magic)")
        if version != _FORMAT_VERSION:
            raise SummaryFormatError(
                f"unsupported summary format version {version} "
                f"(this skslot reads version {_FORMAT_VERSION})"
            )
        if dtype_code not in _DTYPES:
            raise SummaryFormatError(f"unknown dtype code {dtype_code}")
        if flags & ~(_FLAG_SHRINKAGE | _FLAG_INT_LABEL | _FLAG_STR_LABEL) or (
            flags & _FLAG_INT_LABEL and flags & _FLAG_STR_LABEL
        ):
            raise SummaryFormatError(f"invalid header flags {flags:#x}")
        if m < 1 or m > max_dimension:
            raise SummaryFormatError(
                f"dimension {m} outside the accepted range [1, {max_dimension}]"
            )
        if expected_dimension is not None and m != expected_dimension:
            raise SummaryFormatError(
                f"dimension mismatch: payload has dimension {m}, expected {expected_dimension}"
            )
        if not 2 <= n <= MAX_COUNT:
            raise SummaryFormatError(f"n must be between 2 and 2**53, payload says {n}")
        offset = _HEADER.size
        client: int | str | None = None
        try:
            if flags & _FLAG_INT_LABEL:
                (client,) = struct.unpack_from("<q", data, offset)
                offset += 8
            elif flags & _FLAG_STR_LABEL:
                (length,) = struct.unpack_from("<H", data, offset)
                offset += 2
                if length > _MAX_LABEL_BYTES or offset + length > len(data):
                    raise SummaryFormatError("client label length is invalid")
                client = data[offset : offset + length].decode("utf-8")
                offset += length
        except struct.error:
            raise SummaryFormatError("payload truncated inside the client label") from None
        except UnicodeDecodeError:
            raise SummaryFormatError("client label is not valid UTF-8") from None
        dt = _DTYPES[dtype_code]
        expected = offset + (m + m * (m + 1) // 2) * dt.itemsize
        if len(data) != expected:
            kind = "truncated" if len(data) < expected else "oversized"
            raise SummaryFormatError(
                f"payload {kind}: {len(data)} bytes, the header implies {expected}"
            )
        values = np.frombuffer(data, dtype=dt, offset=offset).astype(np.float64)
        if not np.all(np.isfinite(values)):
            raise SummaryFormatError("payload decodes to NaN or infinite values")
        if flags & _FLAG_SHRINKAGE:
            if not np.isfinite(shrinkage):
                raise SummaryFormatError("shrinkage is not finite")
            shrink: float | None = float(shrinkage)
        else:
            shrink = None
        return cls(
            n=n,
            mean=values[:m],
            covariance=symmetric_from_upper(values[m:], m),
            shrinkage=shrink,
            client=client,
        )


def bures_wasserstein_distance(source: GaussianSummary, target: GaussianSummary) -> float:
    """2-Wasserstein distance between the Gaussians of two summaries.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.gaussian import bures_wasserstein_distance
    >>> a = GaussianSummary(2, np.zeros(2), np.eye(2))
    >>> b = GaussianSummary(2, np.array([3.0, 4.0]), 4 * np.eye(2))
    >>> round(bures_wasserstein_distance(a, b), 6)  # sqrt(25 + 2 * (2 - 1)^2)
    5.196152
    """
    _check_same_dimension(source, target)
    F = cholesky_factor(target.covariance)
    cross = trace_sqrt(F.T @ source.covariance @ F)
    diff = source.mean - target.mean
    sq = diff @ diff + np.trace(source.covariance) + np.trace(target.covariance)
    return float(np.sqrt(max(sq - 2.0 * cross, 0.0)))


def _check_same_dimension(a: GaussianSummary, b: GaussianSummary) -> None:
    if a.dimension != b.dimension:
        raise ValueError(f"summaries of different dimensions: {a.dimension} and {b.dimension}")


@dataclass(frozen=True, eq=False)
class GaussianMap:
    """An affine map ``x -> A x + b`` between Gaussians.

    Parameters
    ----------
    linear : ndarray of shape (m, m)
        ``A`` (symmetric positive definite for an optimal-transport map).
    offset : ndarray of shape (m,)
        ``b``.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianMap, GaussianSummary
    >>> source = GaussianSummary(10, np.zeros(2), np.diag([1.0, 4.0]))
    >>> target = GaussianSummary(10, np.ones(2), np.diag([4.0, 1.0]))
    >>> T = GaussianMap.optimal_transport(source, target)
    >>> np.round(np.diag(T.linear), 6)  # sqrt(4 / 1), sqrt(1 / 4)
    array([2. , 0.5])
    >>> np.round(np.diag(T.geodesic(0.5).linear), 6)  # half way: (1 + 2) / 2, (1 + 0.5) / 2
    array([1.5 , 0.75])
    """

    linear: np.ndarray
    offset: np.ndarray

    @classmethod
    def identity(cls, dimension: int) -> GaussianMap:
        return cls(np.eye(dimension), np.zeros(dimension))

    @classmethod
    def optimal_transport(
        cls,
        source: GaussianSummary,
        target: GaussianSummary,
        *,
        target_factor: np.ndarray | None = None,
    ) -> GaussianMap:
        """The Monge map pushing ``N(source)`` onto ``N(target)``.

        ``target_factor`` reuses a factor ``F`` of the target covariance
        (``F F^T = S_t``; one factorisation of the reference serves every
        client).  Default: its Cholesky factor.
        """
        _check_same_dimension(source, target)
        F = cholesky_factor(target.covariance) if target_factor is None else target_factor
        inner = sym_eigh(F.T @ source.covariance @ F)
        return cls.from_factors(F, inner, source.mean, target.mean)

    @classmethod
    def from_factors(
        cls,
        target_factor: np.ndarray,
        inner_eigh: SymmetricEigh,
        source_mean: np.ndarray,
        target_mean: np.ndarray,
    ) -> GaussianMap:
        """Map from a factor ``F`` of ``S_t`` and the eigendecomposition of ``F^T S_s F``."""
        A = target_factor @ inner_eigh.inv_sqrt() @ target_factor.T
        A = 0.5 * (A + A.T)
        return cls(A, target_mean - A @ source_mean)

    def geodesic(self, tau: float) -> GaussianMap:
        """``T^tau = (1 - tau) Id + tau T``, a fraction ``tau`` of the way."""
        A = tau * self.linear
        A.flat[:: A.shape[0] + 1] += 1.0 - tau
        return GaussianMap(A, tau * self.offset)

    def push(self, summary: GaussianSummary) -> GaussianSummary:
        """Image of a Gaussian: ``N(A mu + b, A S A^T)``."""
        (mean,), (cov,) = self.push_gaussians(summary.mean[None], summary.covariance[None])
        return GaussianSummary(summary.n, mean, cov, client=summary.client)

    def push_gaussians(
        self, means: np.ndarray, covariances: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Images of a stack of Gaussians ``N(mu_j, S_j)``: ``N(A mu_j + b, A S_j A^T)``.

        Parameters
        ----------
        means : ndarray of shape (J, m)
        covariances : ndarray of shape (J, m, m)

        Returns
        -------
        means, covariances : ndarrays of the same shapes (covariances exactly symmetric)
        """
        A = self.linear
        cov = A @ covariances @ A.T
        return means @ A.T + self.offset, 0.5 * (cov + cov.swapaxes(-1, -2))

    def push_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Images of sums of rows: ``sum_i T(x_i) = A s + n b`` for each (count, sum) pair.

        Parameters
        ----------
        sums : ndarray of shape (C, m)
        counts : ndarray of shape (C,)
        """
        return sums @ self.linear.T + np.multiply.outer(counts, self.offset)

    def push_moments(self, moments: ShiftedMoments) -> ShiftedMoments:
        """Power sums of the images ``T(x_i)``, exactly, from those of the ``x_i``.

        About the shift ``T(c)``: ``s1 -> A s1`` and ``G -> A G A^T`` (the
        module docstring), so precision is kept for features with a large
        mean.  Fourth-order sums are not affine-equivariant and are refused.
        """
        if moments.fourth_order:
            raise ValueError("fourth-order power sums cannot be pushed through an affine map")
        A = self.linear
        gram = A @ moments.gram @ A.T
        return ShiftedMoments(
            moments.n,
            A @ moments.shift + self.offset,
            A @ moments.s1,
            0.5 * (gram + gram.T),
        )

    def apply(
        self,
        X: np.ndarray,
        *,
        out: np.ndarray | None = None,
        chunk_size: int | None = None,
    ) -> np.ndarray:
        """``X A^T + b`` computed in ``X``'s floating dtype.

        Parameters
        ----------
        X : ndarray or torch tensor of shape (n, m)
            A tensor is transformed in torch on its device, and the result is
            a tensor there.
        out : ndarray or tensor of shape (n, m), optional
            Written in place and returned (it may not overlap ``X``).
        chunk_size : int, optional
            Rows per block, to bound temporaries (or stream a memory map).
        """
        if out is None:
            out = empty_like_rows(X, tuple(X.shape))
        At = to_backend(self.linear.T, X, dtype=out.dtype)
        b = to_backend(self.offset, X, dtype=out.dtype)
        step = X.shape[0] if chunk_size is None else max(int(chunk_size), 1)
        for start in range(0, X.shape[0], max(step, 1)):
            rows = slice(start, start + step)
            matmul_into(X[rows], At, out[rows])
            out[rows] += b
        return out
