"""Low-rank Gaussian summaries: the factor form of a client's Ledoit-Wolf covariance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from .._linalg import sym_eigh, symmetrize
from ..defaults import COVARIANCE_FLOOR
from ..exceptions import InvalidSummaryError
from ..gaussian import GaussianSummary, _readonly_float64, check_magnitude
from ..ledoit_wolf import floor_shift, shrinkage_from_traces
from ..wire._errors import SummaryFormatError
from ..wire.summary_codec import (
    DEFAULT_MAX_DIMENSION,
    LOW_RANK_MAGIC,
    decode_low_rank_summary,
    encode_low_rank_summary,
    low_rank_payload_size,
    summary_payload_size,
)

__all__ = [
    "LowRankGaussianSummary",
    "Summary",
    "as_dense",
    "common_basis",
    "smaller_form",
    "summary_from_bytes",
    "summary_to_bytes",
]

#: Eigenvalues of the sample covariance below this fraction of the largest
#: (times the number of rows) are round-off: their directions belong to the
#: complement, where the covariance is ``c`` anyway.
RANK_RTOL = 1e-13

#: A direction of a new basis whose residual against the span so far is below
#: this norm is taken as inside the span (its part outside is round-off).
SPAN_TOL = 1e-10

#: What the float64 arithmetic of a basis (a thin QR factorisation, then an
#: eigenbasis of the small Gram) leaves of ``||U^T U - I||_max``: some hundred
#: float64 epsilons at a few hundred rows, which a decoder accepts.
BASIS_ROUNDING = 1e-12

#: Tolerance on ``||U^T U - I||_max`` for a basis to count as orthonormal.
ORTHONORMAL_TOL = 1e-8


def _array(a: object, name: str, ndim: int) -> np.ndarray:
    arr = _readonly_float64(a, name)
    if arr.ndim != ndim:
        raise InvalidSummaryError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


@dataclass(frozen=True, eq=False)
class LowRankGaussianSummary:
    """A Gaussian summary whose covariance is low rank plus a multiple of the identity.

    The covariance is ``U diag(e) U^T + c (I - U U^T)``: ``e`` on the span of
    the orthonormal basis ``U``, ``c`` on its complement.  It is the exact
    Ledoit-Wolf summary of a client with no more rows than dimensions
    (:meth:`from_rows`), and the server's reference built from such summaries
    (:func:`low_rank_barycenter`).  Instances are immutable and validated.

    Parameters
    ----------
    n : int
        Number of samples summarised (at least 2).
    mean : array-like of shape (m,)
        Sample mean.
    basis : array-like of shape (m, r)
        Orthonormal columns ``U`` (``r <= m``, possibly 0).
    eigenvalues : array-like of shape (r,)
        The covariance's positive eigenvalues ``e`` on the span of ``U``.
    complement : float
        The covariance's eigenvalue ``c > 0`` on the orthogonal complement.
    shrinkage : float or None, default=None
        The Ledoit-Wolf shrinkage, as :class:`~skslot.GaussianSummary`'s.
    client : int, str or None, default=None
        Label of the client the summary comes from.

    Raises
    ------
    InvalidSummaryError
        If a value is not finite, the shapes disagree, ``U`` is not
        orthonormal or an eigenvalue is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.covariance import LedoitWolf
    >>> from skslot.low_rank import LowRankGaussianSummary
    >>> X = np.random.default_rng(0).normal(size=(20, 300))  # fewer rows than dimensions
    >>> s = LowRankGaussianSummary.from_rows(X)
    >>> s.rank, s.dimension  # the centred rows span 19 dimensions
    (19, 300)
    >>> bool(np.allclose(s.covariance, LedoitWolf().fit(X).covariance_, rtol=0, atol=1e-12))
    True
    """

    n: int
    mean: np.ndarray
    basis: np.ndarray
    eigenvalues: np.ndarray
    complement: float
    shrinkage: float | None = None
    client: int | str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, Integral) or self.n < 2:
            raise InvalidSummaryError(f"n must be an integer of at least 2, got {self.n!r}")
        mean = _array(self.mean, "mean", 1)
        basis = _array(self.basis, "basis", 2)
        eigenvalues = _array(self.eigenvalues, "eigenvalues", 1)
        m, r = basis.shape
        if m != mean.shape[0] or m < 1:
            raise InvalidSummaryError(
                f"basis has {m} rows, expected {mean.shape[0]} to match the mean"
            )
        if eigenvalues.shape != (r,):
            raise InvalidSummaryError(
                f"{eigenvalues.shape[0]} eigenvalues for a basis of {r} columns"
            )
        gram = basis.T @ basis
        gram.flat[:: r + 1] -= 1.0
        if r and float(np.max(np.abs(gram))) > ORTHONORMAL_TOL:
            raise InvalidSummaryError(
                f"basis is not orthonormal: |U^T U - I| reaches {np.max(np.abs(gram)):.2e}"
            )
        complement = float(self.complement)
        if not (np.isfinite(complement) and complement > 0.0):
            raise InvalidSummaryError(f"complement must be positive, got {complement!r}")
        if r and float(eigenvalues.min()) <= 0.0:
            raise InvalidSummaryError(
                f"eigenvalues must be positive, the smallest is {eigenvalues.min():.3g}"
            )
        check_magnitude(mean, (float(eigenvalues.sum()) + (m - r) * complement) / m)
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "basis", basis)
        object.__setattr__(self, "eigenvalues", eigenvalues)
        object.__setattr__(self, "complement", complement)

    @classmethod
    def from_rows(
        cls,
        X: object,
        *,
        covariance_floor: float = COVARIANCE_FLOOR,
        client: int | str | None = None,
    ) -> LowRankGaussianSummary:
        """The exact Ledoit-Wolf summary of rows, in factor form.

        With ``Z`` the centred rows, the eigenvectors of ``S = Z^T Z / n``
        with non-zero eigenvalues ``lambda`` are ``U = Z^T W diag(n lambda)^{-1/2}``
        for ``Z Z^T = W diag(n lambda) W^T`` (an ``n x n`` eigenproblem; see
        :func:`_covariance_eigh` for when it falls back to a QR factorisation); the
        shrinkage needs only ``tr S``, ``||S||_F^2`` (from ``lambda``) and the
        row norms (:func:`skslot.ledoit_wolf.shrinkage_from_traces`).  The same
        covariance as :func:`skslot.ledoit_wolf.ledoit_wolf_summary` (and
        scikit-learn's :class:`~sklearn.covariance.LedoitWolf`), floor
        included, to round-off.

        Parameters
        ----------
        X : array-like of shape (n, m)
            The client's rows, ``n >= 2``.
        covariance_floor : float, default=1e-8
            The relative floor on the smallest eigenvalue (see
            :func:`skslot.ledoit_wolf.ledoit_wolf_summary`).
        client : int, str or None, default=None
            The client label the summary carries.

        Returns
        -------
        summary : LowRankGaussianSummary
            Of rank at most ``min(n - 1, m)``.

        Raises
        ------
        ValueError
            If ``X`` is not a finite 2-D array with at least 2 rows.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
            raise ValueError(f"X must be 2-D with at least 2 rows, got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        n, m = X.shape
        shifted = X - X[0]  # about a row, as the dense power sums: exact zeros for equal rows
        offset = shifted.mean(axis=0)
        mean = X[0] + offset
        Z = shifted - offset
        lam, U = _covariance_eigh(Z)
        trace = float(lam.sum())
        s4 = float(np.sum(np.einsum("ij,ij->i", Z, Z) ** 2))
        shrinkage = shrinkage_from_traces(trace, float(lam @ lam), s4, n, m)
        mu = trace / m
        shift = floor_shift(mu, shrinkage, mean, covariance_floor=covariance_floor, client=client)
        complement = shrinkage * mu + shift
        if m == 1:  # S is mu itself: no complement to speak of, the span is the line
            return cls(n, mean, np.ones((1, 1)), np.array([mu + shift]), mu + shift, 0.0, client)
        return cls(n, mean, U, (1.0 - shrinkage) * lam + complement, complement, shrinkage, client)

    @classmethod
    def from_dense(cls, summary: GaussianSummary) -> LowRankGaussianSummary:
        """A dense summary in factor form: its full eigenbasis (``r = m``).

        A federation may mix clients with fewer rows than dimensions and
        clients with more; the span of a dense summary is the whole space, so
        a barycenter with one costs what the dense one does.

        Parameters
        ----------
        summary : GaussianSummary

        Returns
        -------
        summary : LowRankGaussianSummary
            Rank ``m``; the complement (empty) is given the smallest eigenvalue.
        """
        eig = sym_eigh(summary.covariance)
        return cls(
            summary.n,
            summary.mean,
            eig.eigenvectors,
            eig.eigenvalues,
            float(eig.eigenvalues[0]),
            summary.shrinkage,
            summary.client,
        )

    def to_bytes(self, dtype: str = "float32") -> bytes:
        """The summary in its wire format (:mod:`skslot.wire.summary_codec`).

        Parameters
        ----------
        dtype : {"float16", "float32", "float64"}, default="float32"

        Returns
        -------
        payload : bytes
        """
        return encode_low_rank_summary(self, dtype)

    def payload_size(self, dtype: str = "float32") -> int:
        """``len(self.to_bytes(dtype))``, without encoding.

        Parameters
        ----------
        dtype : {"float16", "float32", "float64"}, default="float32"

        Returns
        -------
        size : int
        """
        return low_rank_payload_size(self, dtype)

    @classmethod
    def from_bytes(
        cls,
        payload: bytes | bytearray | memoryview,
        *,
        expected_dimension: int | None = None,
        max_dimension: int | None = None,
        max_rank: int | None = None,
    ) -> LowRankGaussianSummary:
        """Decode and validate a payload of :meth:`to_bytes`.

        The basis must be orthonormal up to what its dtype's rounding and the
        float64 arithmetic that made it explain (``|U^T U - I| <= max(64 eps,
        BASIS_ROUNDING)``); it is then made orthonormal again (a QR
        factorisation, the same span), and the summary validated.

        Parameters
        ----------
        payload : bytes-like
        expected_dimension : int, optional
            Reject a payload of any other dimension.
        max_dimension : int, optional
            Reject a larger dimension before allocating (default 16384).
        max_rank : int, optional
            Reject a larger rank before allocating (default: the dimension).

        Returns
        -------
        summary : LowRankGaussianSummary

        Raises
        ------
        SummaryFormatError
            If the payload is malformed, its basis is not orthonormal, or its
            values are not a valid summary (a complement or an eigenvalue
            that is not positive, ...).
        """
        options = {} if max_dimension is None else {"max_dimension": max_dimension}
        fields = decode_low_rank_summary(
            payload, expected_dimension=expected_dimension, max_rank=max_rank, **options
        )
        U = fields.basis
        r = U.shape[1]
        if r:
            gram = U.T @ U
            gram.flat[:: r + 1] -= 1.0
            allowed = max(64 * float(np.finfo(fields.dtype).eps), BASIS_ROUNDING)
            if float(np.max(np.abs(gram))) > allowed:
                raise SummaryFormatError(
                    f"basis is not orthonormal: |U^T U - I| reaches {np.max(np.abs(gram)):.2e}, "
                    f"above the {allowed:.1e} that {fields.dtype} rounding explains"
                )
            Q, R = np.linalg.qr(U)
            U = Q * np.sign(np.diagonal(R))  # the nearest orthonormal columns, the same span
        try:
            return cls(
                fields.n,
                fields.mean,
                U,
                fields.eigenvalues,
                fields.complement,
                fields.shrinkage,
                fields.client,
            )
        except InvalidSummaryError as exc:  # received values: a format error of the payload
            raise SummaryFormatError(str(exc)) from None

    @property
    def dimension(self) -> int:
        """``m``."""
        return self.mean.shape[0]

    @property
    def trace(self) -> float:
        """The covariance's trace, ``sum(e) + (m - r) c``: the total variance."""
        return float(self.eigenvalues.sum()) + (self.dimension - self.rank) * self.complement

    def variance_along(self, directions: np.ndarray) -> np.ndarray:
        """``d^T Sigma d`` for each column ``d`` of ``directions``, in ``O(m r k)``.

        ``d^T Sigma d = c |d|^2 + sum_i (e_i - c) (u_i^T d)^2``.

        Parameters
        ----------
        directions : ndarray of shape (m, k)

        Returns
        -------
        variances : ndarray of shape (k,)
        """
        along = (self.basis.T @ directions) ** 2
        return (
            self.complement * np.sum(directions**2, axis=0)
            + (self.eigenvalues - self.complement) @ along
        )

    @property
    def rank(self) -> int:
        """``r``, the number of columns of the basis."""
        return self.basis.shape[1]

    @property
    def covariance(self) -> np.ndarray:
        """The dense ``m x m`` covariance, formed on each access (``O(m^2)`` memory: for checks
        and small ``m``); the attribute a dense :class:`~skslot.GaussianSummary` holds.

        Returns
        -------
        covariance : ndarray of shape (m, m)
        """
        U = self.basis
        cov = (U * (self.eigenvalues - self.complement)) @ U.T
        cov.flat[:: self.dimension + 1] += self.complement
        return symmetrize(cov)

    def to_dense(self) -> GaussianSummary:
        """The same summary as a dense :class:`~skslot.GaussianSummary`.

        Returns
        -------
        summary : GaussianSummary
        """
        return GaussianSummary(self.n, self.mean, self.covariance, self.shrinkage, self.client)

    def project(self, V: np.ndarray) -> np.ndarray:
        """``V^T Sigma V`` for orthonormal columns ``V`` (``m x d``), in ``O(m d r)``.

        ``V^T Sigma V = c I + (V^T U) diag(e - c) (V^T U)^T``; when the span of
        ``V`` holds that of ``U`` this is ``Sigma`` restricted to it.

        Parameters
        ----------
        V : ndarray of shape (m, d)

        Returns
        -------
        block : ndarray of shape (d, d)
        """
        P = V.T @ self.basis
        block = (P * (self.eigenvalues - self.complement)) @ P.T
        block.flat[:: V.shape[1] + 1] += self.complement
        return symmetrize(block)

    def n_values(self) -> int:
        """How many numbers the summary holds: ``m + m r + r + 1`` (dense: ``m + m (m + 1) / 2``).

        Returns
        -------
        count : int
        """
        m, r = self.basis.shape
        return m + m * r + r + 1


def _covariance_eigh(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-zero eigenvalues of ``S = Z^T Z / n`` and their orthonormal eigenvectors.

    For ``n < m`` from the ``n x n`` Gram ``Z Z^T = W diag(n lambda) W^T``:
    ``U = Z^T W diag(n lambda)^{-1/2}``, whose columns are orthonormal up to
    ``eps lambda_max / lambda_i``; when that exceeds :data:`ORTHONORMAL_TOL`
    / 100 (nearly dependent rows), from the thin QR factorisation ``Z^T = Q R``
    instead, ``U = Q W'`` with ``R R^T = W' diag(n lambda) W'^T`` (exactly
    orthonormal, four times the cost).  For ``n >= m`` from ``S`` itself.
    Eigenvalues below :data:`RANK_RTOL` ``n`` times the largest are round-off
    and left out.
    """
    n, m = Z.shape

    def kept(eig):
        keep = eig.eigenvalues > RANK_RTOL * n * max(float(eig.eigenvalues[-1]), 0.0)
        return eig.eigenvalues[keep] / n, eig.eigenvectors[:, keep]

    if n >= m:
        lam, U = kept(sym_eigh(symmetrize(Z.T @ Z)))
        return lam, U
    lam, W = kept(sym_eigh(symmetrize(Z @ Z.T)))
    U = Z.T @ (W / np.sqrt(n * lam))
    error = U.T @ U
    error.flat[:: U.shape[1] + 1] -= 1.0
    if U.shape[1] == 0:
        return lam, U
    if float(np.max(np.abs(error))) <= ORTHONORMAL_TOL / 100:
        # the nearest orthonormal columns (the same span, O(m r^2)): what a decoder accepts
        # as the float64 arithmetic of a basis (BASIS_ROUNDING)
        Q, R = np.linalg.qr(U)
        return lam, Q * np.sign(np.diagonal(R))
    Q, R = np.linalg.qr(Z.T)
    lam, W = kept(sym_eigh(symmetrize(R @ R.T)))
    return lam, Q @ W


def as_dense(summary: GaussianSummary | LowRankGaussianSummary) -> GaussianSummary:
    """``summary`` as a dense :class:`~skslot.GaussianSummary` (itself when it is one).

    Parameters
    ----------
    summary : GaussianSummary or LowRankGaussianSummary

    Returns
    -------
    GaussianSummary
    """
    return summary.to_dense() if isinstance(summary, LowRankGaussianSummary) else summary


#: A client's summary or a reference, in either form.
Summary = GaussianSummary | LowRankGaussianSummary


def summary_from_bytes(
    payload: bytes | bytearray | memoryview,
    *,
    expected_dimension: int | None = None,
    max_dimension: int | None = None,
    max_rank: int | None = None,
) -> Summary:
    """Decode a summary payload of either form, as its header says.

    A client with no more rows than dimensions sends its summary in factor
    form (:meth:`LowRankGaussianSummary.to_bytes`), another the dense
    ``m x m`` form (:meth:`GaussianSummary.to_bytes`); the magic of the
    header says which, and the form's own decoder checks everything before
    it allocates.

    Parameters
    ----------
    payload : bytes-like
    expected_dimension : int, optional
        Reject a payload of any other dimension.
    max_dimension : int, optional
        Reject a larger dimension before allocating (default 16384).
    max_rank : int, optional
        Reject a factor form of larger rank before allocating (a client of
        ``n`` rows has rank at most ``n - 1``).

    Returns
    -------
    summary : GaussianSummary or LowRankGaussianSummary

    Raises
    ------
    SummaryFormatError
        If the payload is malformed (its magic names neither form, among
        others), or its values are not a valid summary.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.low_rank import LowRankGaussianSummary, summary_from_bytes
    >>> s = LowRankGaussianSummary.from_rows(np.random.default_rng(0).normal(size=(5, 40)))
    >>> type(summary_from_bytes(s.to_bytes())).__name__, type(
    ...     summary_from_bytes(s.to_dense().to_bytes())).__name__
    ('LowRankGaussianSummary', 'GaussianSummary')
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise SummaryFormatError(f"payload must be bytes, got {type(payload).__name__}")
    if bytes(payload[:4]) == LOW_RANK_MAGIC:
        return LowRankGaussianSummary.from_bytes(
            payload,
            expected_dimension=expected_dimension,
            max_dimension=max_dimension,
            max_rank=max_rank,
        )
    return GaussianSummary.from_bytes(
        payload,
        expected_dimension=expected_dimension,
        max_dimension=DEFAULT_MAX_DIMENSION if max_dimension is None else max_dimension,
    )


def summary_to_bytes(summary: Summary, dtype: str = "float32") -> bytes:
    """A summary's payload in the smaller of its two forms.

    The factor form takes ``m (r + 1) + r`` values and the dense form
    ``m (m + 3) / 2``, so a factor form of rank past about ``m / 2`` travels
    dense (:meth:`LowRankGaussianSummary.to_dense`, the same covariance);
    :func:`summary_from_bytes` reads either.

    Parameters
    ----------
    summary : GaussianSummary or LowRankGaussianSummary
    dtype : {"float16", "float32", "float64"}, default="float32"

    Returns
    -------
    payload : bytes

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.low_rank import LowRankGaussianSummary, summary_to_bytes
    >>> rng = np.random.default_rng(0)
    >>> thin = LowRankGaussianSummary.from_rows(rng.normal(size=(5, 40)))
    >>> wide = LowRankGaussianSummary.from_rows(rng.normal(size=(35, 40)))
    >>> len(summary_to_bytes(thin)) == thin.payload_size()
    True
    >>> len(summary_to_bytes(wide)) == wide.to_dense().payload_size() < wide.payload_size()
    True
    """
    return smaller_form(summary, dtype).to_bytes(dtype)


def smaller_form(summary: Summary, dtype: str = "float32") -> Summary:
    """The summary in the form of the smaller payload in ``dtype`` (see :func:`summary_to_bytes`).

    Parameters
    ----------
    summary : GaussianSummary or LowRankGaussianSummary
    dtype : {"float16", "float32", "float64"}, default="float32"

    Returns
    -------
    GaussianSummary or LowRankGaussianSummary
        ``summary`` itself, or its dense form where that travels in fewer bytes.
    """
    if isinstance(summary, LowRankGaussianSummary) and summary.payload_size(
        dtype
    ) > summary_payload_size(summary, dtype):
        return summary.to_dense()
    return summary


def common_basis(bases: Sequence[np.ndarray]) -> np.ndarray:
    """An orthonormal basis of the sum of the spans of orthonormal bases.

    Block Gram-Schmidt with re-orthogonalisation: each basis is projected off
    the span so far twice, and the directions of its residual with singular
    value above :data:`SPAN_TOL` join it (``O(m d sum r_k)`` time).

    Parameters
    ----------
    bases : sequence of ndarray of shape (m, r_k)
        Orthonormal columns each.

    Returns
    -------
    V : ndarray of shape (m, d)
        Orthonormal, with ``d <= min(m, sum r_k)``.
    """
    m = bases[0].shape[0]
    V = np.zeros((m, 0))
    for U in bases:
        R = U - V @ (V.T @ U)
        R -= V @ (V.T @ R)
        if R.shape[1] == 0:
            continue
        left, sv, _ = np.linalg.svd(R, full_matrices=False)
        new = left[:, sv > SPAN_TOL]
        new -= V @ (V.T @ new)
        new, _ = np.linalg.qr(new)
        V = np.hstack([V, new])
    return V
