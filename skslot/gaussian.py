"""The Gaussian summary: the moments a client shares, immutable and validated.

A :class:`GaussianSummary` holds a count, a mean and a positive definite
covariance, dense or in the exact factor form of a client with no more rows
than dimensions; invalid values raise
:class:`~skslot.exceptions.InvalidSummaryError`.  Its byte format is in
:mod:`skslot.wire.summary_codec` (the methods :meth:`~GaussianSummary.to_bytes`
and :meth:`~GaussianSummary.from_bytes` call it), and the optimal-transport
maps between summaries in :mod:`skslot.maps`.

The factor form.  A client with ``n`` rows in ``m >= n`` dimensions has a
sample covariance ``S`` of rank ``r <= n - 1``, so its Ledoit-Wolf covariance
(:func:`skslot.ledoit_wolf.low_rank_summary`) is exactly::

    Sigma = U diag(e) U^T + c (I - U U^T),   e = (1 - s) lambda + c,   c = s mu (+ floor)

with ``U`` (``m x r``, orthonormal) and ``lambda`` the eigenvectors and
non-zero eigenvalues of ``S``, ``mu = tr(S) / m`` and ``s`` the shrinkage: the
summary holds ``U``, ``e`` and ``c`` (``O(n m)`` memory, no ``m x m`` matrix).
The barycenter of such summaries (:class:`~skslot.BuresBarycenter`) and the
maps onto it (:class:`~skslot.GaussianMap`) are computed on the span of their
bases.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any

import numpy as np

from ._linalg import is_positive_definite, orthonormality_error, sym_eigh, symmetrize
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

#: Tolerance on ``||U^T U - I||_max`` for a basis to count as orthonormal.
ORTHONORMAL_TOL = 1e-8

#: Range of the mean variance ``tr(S) / m`` (and bound on ``|mean|``) a summary
#: may have: the barycenter and the maps multiply covariances by factors of
#: them, so squares of these values must stay normal float64 numbers.
VARIANCE_RANGE = (1e-100, 1e100)


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


def _readonly_float64(a: Any, name: str, ndim: int | None = None) -> np.ndarray:
    try:
        arr = np.array(a, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise InvalidSummaryError(f"{name} is not a numeric array: {exc}") from None
    if not np.all(np.isfinite(arr)):
        raise InvalidSummaryError(f"{name} contains NaN or infinite values")
    if ndim is not None and arr.ndim != ndim:
        raise InvalidSummaryError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    arr.flags.writeable = False
    return arr


class GaussianSummary:
    """The moments one client shares: count, mean and shrunk covariance.

    Instances are immutable and validated at construction: the mean is a
    finite vector, the covariance finite, symmetric and positive definite,
    of matching dimension, and ``n >= 2``.  The covariance is held dense, or
    in the factor form ``U diag(e) U^T + c (I - U U^T)`` (``basis``,
    ``eigenvalues``, ``complement``; see the module docstring): the exact
    Ledoit-Wolf summary of a client with no more rows than dimensions
    (:func:`~skslot.ledoit_wolf.low_rank_summary`), and the reference built
    from such summaries.  The server's reference (the barycenter) is a
    ``GaussianSummary`` too, with ``n`` the total count and no shrinkage, so
    it travels back to clients in the same wire format.

    Parameters
    ----------
    n : int
        Number of samples summarised (at least 2).
    mean : array-like of shape (m,)
        Sample mean.
    covariance : array-like of shape (m, m), optional
        Positive definite covariance (Ledoit-Wolf shrunk for a client); not
        given in factor form.
    shrinkage : float or None, default=None
        Ledoit-Wolf shrinkage intensity in ``[0, 1]``, the weight of the scaled
        identity target, as ``sklearn.covariance.LedoitWolf.shrinkage_``.
    client : int, str or None, default=None
        Label of the client the summary comes from.
    basis : array-like of shape (m, r), optional
        Factor form: orthonormal columns ``U`` (``r <= m``, possibly 0).
    eigenvalues : array-like of shape (r,), optional
        Factor form: the covariance's positive eigenvalues ``e`` on the span of ``U``.
    complement : float, optional
        Factor form: the covariance's eigenvalue ``c > 0`` on the orthogonal complement.

    Attributes
    ----------
    form : {"dense", "low-rank"}
        How the covariance is held.

    Raises
    ------
    InvalidSummaryError
        If a value fails one of these checks (in factor form: ``U`` not
        orthonormal, an eigenvalue or the complement not positive), or both
        or neither of the covariance and its factors are given.

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
    >>> f = GaussianSummary(10, np.zeros(3), basis=np.eye(3)[:, :1], eigenvalues=[4.0],
    ...                     complement=1.0)  # diag(4, 1, 1) in factor form
    >>> f.form, f.rank, np.diag(f.covariance)
    ('low-rank', 1, array([4., 1., 1.]))
    """

    n: int
    mean: np.ndarray
    shrinkage: float | None
    client: int | str | None
    _covariance: np.ndarray  # the dense form's, None in factor form
    basis: Any  # the factor form's, None in the dense form
    eigenvalues: Any
    complement: Any

    def __init__(
        self,
        n: int,
        mean: Any,
        covariance: Any = None,
        shrinkage: float | None = None,
        client: int | str | None = None,
        basis: Any = None,
        eigenvalues: Any = None,
        complement: float | None = None,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, Integral):
            raise InvalidSummaryError(f"n must be an integer, got {n!r}")
        if not 2 <= int(n) <= MAX_COUNT:
            raise InvalidSummaryError(
                f"n must be between 2 and 2**53 samples, got {n}"
                + (f" for client {client!r}" if client is not None else "")
            )
        mean = _readonly_float64(mean, "mean")
        if mean.ndim != 1 or mean.shape[0] < 1:
            raise InvalidSummaryError(f"mean must be a non-empty 1-D array, got {mean.shape}")
        if [x is not None for x in (basis, eigenvalues, complement)] != [covariance is None] * 3:
            raise InvalidSummaryError(
                "a summary holds its covariance, or (factor form) its basis, eigenvalues "
                "and complement"
            )
        cov = None
        if covariance is not None:
            cov = self._checked_covariance(mean, _readonly_float64(covariance, "covariance"))
        else:
            basis = _readonly_float64(basis, "basis", 2)
            eigenvalues = _readonly_float64(eigenvalues, "eigenvalues", 1)
            complement = self._checked_factors(mean, basis, eigenvalues, complement)
        if shrinkage is not None:
            if not isinstance(shrinkage, Real) or not 0.0 <= float(shrinkage) <= 1.0:
                raise InvalidSummaryError(f"shrinkage must lie in [0, 1], got {shrinkage!r}")
            shrinkage = float(shrinkage)
        if isinstance(client, np.generic):
            client = client.item()
        if client is not None and (isinstance(client, bool) or not isinstance(client, (int, str))):
            raise InvalidSummaryError(
                f"client label must be an int, a str or None, got {type(client).__name__}"
            )
        vars(self).update(n=int(n), mean=mean, _covariance=cov, shrinkage=shrinkage, client=client)
        vars(self).update(basis=basis, eigenvalues=eigenvalues, complement=complement)

    @staticmethod
    def _checked_covariance(mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
        """The dense covariance, checked and made exactly symmetric."""
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
        check_magnitude(mean, float(np.sum(np.diagonal(cov) / m)))
        if not is_positive_definite(cov):
            raise InvalidSummaryError("covariance is not positive definite")
        return cov

    @staticmethod
    def _checked_factors(
        mean: np.ndarray, basis: np.ndarray, eigenvalues: np.ndarray, complement: Any
    ) -> float:
        """The factor form checked; the complement as a float."""
        m, r = basis.shape
        if m != mean.shape[0]:
            raise InvalidSummaryError(
                f"basis has {m} rows, expected {mean.shape[0]} to match the mean"
            )
        if eigenvalues.shape != (r,):
            raise InvalidSummaryError(
                f"{eigenvalues.shape[0]} eigenvalues for a basis of {r} columns"
            )
        error = orthonormality_error(basis)
        if error > ORTHONORMAL_TOL:
            raise InvalidSummaryError(f"basis is not orthonormal: |U^T U - I| reaches {error:.2e}")
        complement = float(complement)
        if not (np.isfinite(complement) and complement > 0.0):
            raise InvalidSummaryError(f"complement must be positive, got {complement!r}")
        if r and float(eigenvalues.min()) <= 0.0:
            raise InvalidSummaryError(
                f"eigenvalues must be positive, the smallest is {eigenvalues.min():.3g}"
            )
        check_magnitude(mean, (float(eigenvalues.sum()) + (m - r) * complement) / m)
        return complement

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to {name!r}: a GaussianSummary is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete {name!r}: a GaussianSummary is immutable")

    def replace(self, **changes: Any) -> GaussianSummary:
        """A new summary with ``changes`` to these parameters, validated as any.

        Parameters
        ----------
        **changes
            New values of constructor parameters (``mean``, ``client``, ...).

        Returns
        -------
        summary : GaussianSummary
        """
        held = {name.lstrip("_"): value for name, value in vars(self).items()}  # _covariance
        return GaussianSummary(**{**held, **changes})

    @property
    def form(self) -> str:
        """``"dense"`` or ``"low-rank"`` (the factor form)."""
        return "dense" if self.basis is None else "low-rank"

    @property
    def covariance(self) -> np.ndarray:
        """The ``m x m`` covariance: the one held, or (factor form) formed on each access
        (``O(m^2)`` memory: for checks and small ``m``)."""
        if self.basis is None:
            return self._covariance
        U, c = self.basis, self.complement
        cov = (U * (self.eigenvalues - c)) @ U.T
        cov.flat[:: self.dimension + 1] += c
        return symmetrize(cov)

    @property
    def dimension(self) -> int:
        """Feature dimension ``m``."""
        return self.mean.shape[0]

    @property
    def rank(self) -> int:
        """``r``, the number of columns of the basis (``m`` for a dense summary)."""
        return self.dimension if self.basis is None else self.basis.shape[1]

    def n_values(self) -> int:
        """How many numbers the summary holds: ``m + m (m + 1) / 2`` (the covariance's upper
        triangle), or in factor form ``m + m r + r + 1``.

        Returns
        -------
        count : int
        """
        m, r = self.dimension, self.rank
        return m + m * (m + 1) // 2 if self.basis is None else m + m * r + r + 1

    @property
    def trace(self) -> float:
        """The covariance's trace (``sum(e) + (m - r) c`` in factor form): the total variance."""
        if self.basis is None:
            return float(np.trace(self.covariance))
        return float(self.eigenvalues.sum()) + (self.dimension - self.rank) * self.complement

    def variance_along(self, directions: np.ndarray) -> np.ndarray:
        """``d^T Sigma d`` for each column ``d`` of ``directions``.

        In factor form ``d^T Sigma d = c |d|^2 + sum_i (e_i - c) (u_i^T d)^2``, in ``O(m r k)``.

        Parameters
        ----------
        directions : ndarray of shape (m, k)

        Returns
        -------
        variances : ndarray of shape (k,)
        """
        if self.basis is None:
            return np.einsum("mk,mn,nk->k", directions, self.covariance, directions)
        along = (self.basis.T @ directions) ** 2
        c = self.complement
        return c * np.sum(directions**2, axis=0) + (self.eigenvalues - c) @ along

    def project(self, V: np.ndarray) -> np.ndarray:
        """``V^T Sigma V`` for orthonormal ``V`` (``m x d``), in ``O(m d r)`` in factor form.

        ``V^T Sigma V = c I + (V^T U) diag(e - c) (V^T U)^T``; when the span of
        ``V`` holds that of ``U`` this is ``Sigma`` restricted to it.

        Parameters
        ----------
        V : ndarray of shape (m, d)

        Returns
        -------
        block : ndarray of shape (d, d)
        """
        if self.basis is None:  # dense: no eigendecomposition needed
            return symmetrize(V.T @ self.covariance @ V)
        P = V.T @ self.basis
        block = (P * (self.eigenvalues - self.complement)) @ P.T
        block.flat[:: V.shape[1] + 1] += self.complement
        return symmetrize(block)

    def to_dense(self) -> GaussianSummary:
        """The same summary with a dense covariance (itself when it has one).

        Returns
        -------
        summary : GaussianSummary
        """
        if self.basis is None:
            return self
        return GaussianSummary(self.n, self.mean, self.covariance, self.shrinkage, self.client)

    def to_low_rank(self) -> GaussianSummary:
        """The same summary in factor form (itself when it is in one).

        A dense covariance is taken in its full eigenbasis (``r = m``; the
        complement, empty, is given the smallest eigenvalue): a federation
        may mix clients with fewer rows than dimensions and clients with more.

        Returns
        -------
        summary : GaussianSummary
        """
        if self.basis is not None:
            return self
        w, V = sym_eigh(self.covariance)
        return self.replace(covariance=None, basis=V, eigenvalues=w, complement=float(w[0]))

    def smaller_form(self, dtype: str = "float32") -> GaussianSummary:
        """The summary in the form of the smaller payload in ``dtype``.

        The factor form takes ``m (r + 1) + r`` values and the dense form
        ``m (m + 3) / 2``, so a factor form of rank past about ``m / 2``
        travels dense (:meth:`to_dense`, the same covariance).

        Parameters
        ----------
        dtype : {"float16", "float32", "float64"}, default="float32"

        Returns
        -------
        summary : GaussianSummary
            Itself, or its dense form where that travels in fewer bytes.

        Examples
        --------
        >>> import numpy as np
        >>> from skslot.ledoit_wolf import low_rank_summary
        >>> rng = np.random.default_rng(0)
        >>> thin = low_rank_summary(rng.normal(size=(5, 40)))
        >>> wide = low_rank_summary(rng.normal(size=(35, 40)))
        >>> thin.smaller_form().form, wide.smaller_form().form
        ('low-rank', 'dense')
        """
        if summary_payload_size(self, dtype) > summary_payload_size(self, dtype, form="dense"):
            return self.to_dense()
        return self

    def smaller_bytes(self, dtype: str = "float32") -> bytes:
        """The payload of :meth:`smaller_form` in ``dtype``: the summary as it travels.

        Parameters
        ----------
        dtype : {"float16", "float32", "float64"}, default="float32"

        Returns
        -------
        payload : bytes
            ``smaller_form(dtype).to_bytes(dtype)``.

        Raises
        ------
        SummaryFormatError
            As :meth:`to_bytes`.
        """
        return self.smaller_form(dtype).to_bytes(dtype)

    def __repr__(self) -> str:
        return (
            f"GaussianSummary(n={self.n}, dimension={self.dimension}, "
            f"shrinkage={self.shrinkage!r}, client={self.client!r})"
        )

    # ------------------------------------------------------------------ wire
    def to_bytes(self, dtype: str | np.dtype = "float32") -> bytes:
        """Serialise to the compact wire format (never pickle), in the summary's form.

        Layout (dense): a 28-byte little-endian header (magic ``SKSG``, format
        version, dtype code, flags, dimension ``m``, count ``n``, shrinkage),
        an optional client label, then the ``m`` mean values and the
        ``m (m + 1) / 2`` values of the covariance's upper triangle, row by
        row, in ``dtype`` (float16, float32 or float64).  For ``m = 512`` in
        float16 this is about 264 KB.  The factor form's (magic ``SKSL``)
        is in :mod:`skslot.wire.summary_codec`, the codec
        (:func:`skslot.wire.encode_summary`).

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
        max_rank: int | None = None,
    ) -> GaussianSummary:
        """Decode and validate a payload written by :meth:`to_bytes`, in the form it names.

        Parameters
        ----------
        payload : bytes-like
            The received bytes. Nothing is unpickled or evaluated.
        expected_dimension : int, optional
            Reject a summary of any other dimension.
        max_dimension : int, default=16384
            Reject a header announcing a larger dimension before allocating.
        max_rank : int, optional
            Reject a factor form of larger rank before allocating (a client of
            ``n`` rows has rank at most ``n - 1``; default: the dimension).

        Returns
        -------
        summary : GaussianSummary
            The validated summary the payload carries.

        Raises
        ------
        SummaryFormatError
            If the payload is truncated, longer than its header implies, of
            another format version or dtype, declares ``n < 2`` or an absurd
            ``n``, has the wrong dimension, a basis that is not orthonormal,
            or decodes to values the constructor rejects (non-finite values,
            a covariance that is not positive definite, ...).

        Examples
        --------
        >>> import numpy as np
        >>> from skslot import GaussianSummary
        >>> from skslot.ledoit_wolf import low_rank_summary
        >>> s = low_rank_summary(np.random.default_rng(0).normal(size=(5, 40)))
        >>> GaussianSummary.from_bytes(s.to_bytes()).form, GaussianSummary.from_bytes(
        ...     s.to_dense().to_bytes()).form
        ('low-rank', 'dense')
        """
        fields = decode_summary(
            payload,
            expected_dimension=expected_dimension,
            max_dimension=max_dimension,
            max_rank=max_rank,
        )
        try:
            return cls(*fields)
        except InvalidSummaryError as exc:  # received values: a format error of the payload
            raise _SummaryFormatError(str(exc)) from None


def as_summary_list(summaries: Any) -> tuple[list, list[GaussianSummary]]:
    """Client labels and summaries from a summary, a list or a dict of them.

    Parameters
    ----------
    summaries : GaussianSummary, sequence of GaussianSummary or mapping
        One summary, several (labelled by their ``client``, or by position
        when none has one), or a mapping from client label to summary.

    Returns
    -------
    labels : list
        One client label per summary, all distinct.
    items : list of GaussianSummary
        The summaries, all of the same dimension.

    Raises
    ------
    ValueError
        If there is no summary, two share a label, or their dimensions differ.
    TypeError
        If an item is not a :class:`GaussianSummary`.
    """
    if isinstance(summaries, GaussianSummary):
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
    if len(set(labels)) < len(labels):
        label = next(label for i, label in enumerate(labels) if label in labels[:i])
        raise ValueError(
            f"two summaries have client label {label!r}; each client sends one summary "
            "(merge a client's partial summaries with GaussianSummaryEstimator.merge)"
        )
    for label, s in zip(labels, items, strict=True):
        if not isinstance(s, GaussianSummary):
            raise TypeError(
                f"expected GaussianSummary objects, got {type(s).__name__} for client {label!r}"
            )
    dims = {s.dimension for s in items}
    if len(dims) > 1:
        raise ValueError(f"summaries have different dimensions: {sorted(dims)}")
    return labels, items
