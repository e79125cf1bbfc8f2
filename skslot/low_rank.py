"""Low-rank Gaussian summaries: the exact server step when clients hold fewer rows than dimensions.

A client with ``n`` rows in ``m >= n`` dimensions has a sample covariance
``S`` of rank ``r <= n - 1``, so its Ledoit-Wolf covariance (see
:func:`skslot.ledoit_wolf.ledoit_wolf_summary`) is exactly::

    Sigma = U diag(e) U^T + c (I - U U^T),   e = (1 - s) lambda + c,   c = s mu (+ floor)

with ``U`` (``m x r``, orthonormal) and ``lambda`` the eigenvectors and
non-zero eigenvalues of ``S``, ``mu = tr(S) / m`` and ``s`` the shrinkage.
:class:`LowRankGaussianSummary` holds this factor form, computed from a thin QR
factorisation of the centred rows (``O(n^2 m)`` time, ``O(n m)`` memory: no
``m x m`` matrix is formed).

Every covariance of the federation then acts as its scalar ``c_k`` on the
orthogonal complement of ``V = span(U_1, ..., U_K)`` (of dimension ``d <=
sum r_k``), and the Bures-Wasserstein fixed point keeps that block structure,
so [1]_::

    Sigma_b = V B V^T + c_b (I - V V^T),   B = barycenter of V^T Sigma_k V,
    c_b = (sum_k w_k c_k^{1/2})^2

(:func:`low_rank_barycenter`, ``O(K d^3 + m d^2)`` instead of ``O(K m^3)``),
and the optimal-transport map between two such Gaussians is a ``d x d`` map on
their common span plus the scalar ``(c_t / c_s)^{1/2}`` on its complement
(:class:`LowRankMap`), applied to rows in ``O(n m d)``.  When ``d`` reaches
``m`` the span is the whole space and these are the dense formulas.

References
----------
.. [1] Agueh and Carlier, "Barycenters in the Wasserstein space", SIAM Journal
   on Mathematical Analysis, 2011 (the fixed-point characterisation whose
   invariant subspaces are used here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np

from ._backend import empty_like_rows, to_backend
from ._barycenter_kernel import BarycenterResult, _inner_eigh, bures_wasserstein_barycenter
from ._linalg import sym_eigh, symmetrize
from .exceptions import InvalidSummaryError
from .gaussian import GaussianSummary, _readonly_float64, check_magnitude
from .ledoit_wolf import floor_shift, shrinkage_from_traces
from .maps import GaussianMap
from .wire._errors import SummaryFormatError
from .wire.low_rank_codec import (
    decode_low_rank_summary,
    encode_low_rank_summary,
    low_rank_payload_size,
)

__all__ = [
    "LowRankBarycenter",
    "LowRankGaussianSummary",
    "LowRankMap",
    "common_basis",
    "low_rank_barycenter",
]

#: Eigenvalues of the sample covariance below this fraction of the largest
#: (times the number of rows) are round-off: their directions belong to the
#: complement, where the covariance is ``c`` anyway.
RANK_RTOL = 1e-13

#: A direction of a new basis whose residual against the span so far is below
#: this norm is taken as inside the span (its part outside is round-off).
SPAN_TOL = 1e-10

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
    >>> bool(np.allclose(s.covariance(), LedoitWolf().fit(X).covariance_, rtol=0, atol=1e-12))
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
        covariance_floor: float = 1e-8,
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
        """The summary in its wire format (:mod:`skslot.wire.low_rank_codec`).

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
        payload: bytes,
        *,
        expected_dimension: int | None = None,
        max_dimension: int | None = None,
        max_rank: int | None = None,
    ) -> LowRankGaussianSummary:
        """Decode and validate a payload of :meth:`to_bytes`.

        The basis must be orthonormal up to what its dtype's rounding explains
        (``|U^T U - I| <= 64 eps``); it is then made orthonormal again (a QR
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
            If the payload is malformed, or its basis is not orthonormal.
        InvalidSummaryError
            If the decoded values are not a valid summary.
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
            allowed = 64 * float(np.finfo(fields.dtype).eps)
            if float(np.max(np.abs(gram))) > allowed:
                raise SummaryFormatError(
                    f"basis is not orthonormal: |U^T U - I| reaches {np.max(np.abs(gram)):.2e}, "
                    f"above the {allowed:.1e} that {fields.dtype} rounding explains"
                )
            Q, R = np.linalg.qr(U)
            U = Q * np.sign(np.diagonal(R))  # the nearest orthonormal columns, the same span
        return cls(
            fields.n,
            fields.mean,
            U,
            fields.eigenvalues,
            fields.complement,
            fields.shrinkage,
            fields.client,
        )

    @property
    def dimension(self) -> int:
        """``m``."""
        return self.mean.shape[0]

    @property
    def rank(self) -> int:
        """``r``, the number of columns of the basis."""
        return self.basis.shape[1]

    def covariance(self) -> np.ndarray:
        """The dense ``m x m`` covariance (``O(m^2)`` memory: for checks and small ``m``).

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
        return GaussianSummary(self.n, self.mean, self.covariance(), self.shrinkage, self.client)

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
    if U.shape[1] == 0 or float(np.max(np.abs(error))) <= ORTHONORMAL_TOL / 100:
        return lam, U
    Q, R = np.linalg.qr(Z.T)
    lam, W = kept(sym_eigh(symmetrize(R @ R.T)))
    return lam, Q @ W


def as_dense(summary: GaussianSummary | LowRankGaussianSummary) -> GaussianSummary:
    """``summary`` as a dense :class:`~skslot.GaussianSummary` (itself when it is one)."""
    return summary.to_dense() if isinstance(summary, LowRankGaussianSummary) else summary


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


@dataclass(frozen=True)
class LowRankBarycenter:
    """What :func:`low_rank_barycenter` returns.

    Attributes
    ----------
    reference : LowRankGaussianSummary
        The barycenter: its basis spans the clients' bases (rank ``d``),
        ``n`` is the total count, the mean ``sum_k w_k mu_k``.
    maps : list of LowRankMap
        Each client's optimal-transport map onto the reference, in the
        clients' order (from the last iteration's factorisations: no new one).
    result : BarycenterResult
        The ``d x d`` iteration's record (iterations, residual, convergence).
    """

    reference: LowRankGaussianSummary
    maps: list[LowRankMap]
    result: BarycenterResult


def low_rank_barycenter(
    summaries: Sequence[LowRankGaussianSummary],
    weights: np.ndarray | None = None,
    *,
    solver: str = "fixed-point",
    init: str = "mean",
    anderson: int = 5,
    tol: float = 1e-10,
    max_iter: int = 100,
    device: Any = None,
    client_batch: int | None = None,
    n_jobs: int | None = None,
) -> LowRankBarycenter:
    """The Bures-Wasserstein barycenter of low-rank summaries, on the span of their bases.

    With ``V`` the common basis (:func:`common_basis`, ``d`` columns), the
    barycenter is ``V B V^T + c_b (I - V V^T)`` where ``B`` is the ``d x d``
    barycenter of ``V^T Sigma_k V`` (the library's dense fixed point) and
    ``c_b = (sum_k w_k c_k^{1/2})^2``; the mean is ``sum_k w_k mu_k``.  Client
    ``k``'s map is ``V L_k V^T + (c_b / c_k)^{1/2} (I - V V^T)`` with ``L_k``
    the dense map between the restrictions, written with the iteration's
    factor ``B = F F^T``: ``L_k = F (F^T V^T Sigma_k V F)^{-1/2} F^T``.

    Parameters
    ----------
    summaries : sequence of LowRankGaussianSummary
        The clients' summaries, of one dimension.
    weights : ndarray of shape (K,), optional
        Non-negative weights summing to 1; default ``n_k / N``.
    solver, init, anderson, tol, max_iter, device, client_batch, n_jobs
        The fixed point's settings on the ``d x d`` problem (see
        :func:`~skslot.barycenter.bures_wasserstein_barycenter`): ``device``
        runs it in torch there (the result comes back to the host), and
        ``client_batch`` streams over blocks of clients (each map then costs
        one more ``d x d`` eigendecomposition).

    Returns
    -------
    barycenter : LowRankBarycenter
        The reference, every client's map onto it, and the iteration's record.

    Raises
    ------
    ValueError
        If there are no summaries, their dimensions differ, or the weights
        do not match them.
    """
    if not summaries:
        raise ValueError("low_rank_barycenter needs at least one summary")
    m = summaries[0].dimension
    if any(s.dimension != m for s in summaries):
        raise ValueError(
            f"summaries of dimensions {sorted({s.dimension for s in summaries})}: one is needed"
        )
    counts = np.array([s.n for s in summaries], dtype=np.float64)
    w = counts / counts.sum() if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(summaries),) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError(f"weights must be {len(summaries)} non-negative numbers summing to 1")
    V = common_basis([s.basis for s in summaries])
    d = V.shape[1]
    complement = float(w @ np.sqrt([s.complement for s in summaries])) ** 2
    mean = np.einsum("k,km->m", w, np.stack([s.mean for s in summaries]))
    if d == 0:
        result = BarycenterResult(np.zeros((0, 0)), np.zeros((0, 0)), None, 1, 0.0, True)
        linears = [np.zeros((0, 0))] * len(summaries)
        basis, eigenvalues = V, np.zeros(0)
    else:
        blocks = np.stack([s.project(V) for s in summaries])
        result = bures_wasserstein_barycenter(
            blocks,
            w,
            solver=solver,
            init=init,
            anderson=anderson,
            tol=tol,
            max_iter=max_iter,
            device=device,
            client_batch=client_batch,
            n_jobs=n_jobs,
        )
        inner = result.inner
        if inner is None:  # the iteration streamed over blocks: one decomposition per map
            inner = [_inner_eigh(blocks[k], result.factor) for k in range(len(summaries))]
        zero = np.zeros(d)
        linears = [
            GaussianMap.from_factors(result.factor, decomposition, zero, zero).linear
            for decomposition in inner
        ]
        eig = sym_eigh(result.covariance)
        basis, eigenvalues = V @ eig.eigenvectors, eig.eigenvalues
    reference = LowRankGaussianSummary(int(counts.sum()), mean, basis, eigenvalues, complement)
    maps = [
        LowRankMap.between(V, L, float(np.sqrt(complement / s.complement)), s.mean, mean)
        for s, L in zip(summaries, linears, strict=True)
    ]
    return LowRankBarycenter(reference, maps, result)


@dataclass(frozen=True)
class LowRankMap:
    """The affine map ``x -> A x + b`` with ``A = V L V^T + a (I - V V^T)``.

    Parameters
    ----------
    basis : ndarray of shape (m, d)
        Orthonormal ``V``.
    linear : ndarray of shape (d, d)
        ``L``, the map on the span of ``V``.
    complement : float
        ``a``, the map on its complement.
    offset : ndarray of shape (m,)
        ``b``.
    anchor : ndarray of shape (m,) or None, default=None
        The point whose image :meth:`geodesic` keeps on the way (the source
        mean, set by :meth:`with_mean_fraction`); ``None`` interpolates the
        map itself, ``(1 - tau) Id + tau T``.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.low_rank import LowRankGaussianSummary, LowRankMap, low_rank_barycenter
    >>> rng = np.random.default_rng(0)
    >>> clients = [LowRankGaussianSummary.from_rows(rng.normal(k, 1 + k, size=(30, 200)))
    ...            for k in range(3)]
    >>> barycenter = low_rank_barycenter(clients)
    >>> T = barycenter.maps[0].geodesic(0.6)  # client 0, 60 % of the way to the reference
    >>> T.apply(rng.normal(size=(5, 200))).shape
    (5, 200)
    """

    basis: np.ndarray
    linear: np.ndarray
    complement: float
    offset: np.ndarray
    anchor: np.ndarray | None = None

    @classmethod
    def identity(cls, dimension: int) -> LowRankMap:
        """The identity map of ``R^dimension`` (an empty basis, 1 on the complement).

        Parameters
        ----------
        dimension : int

        Returns
        -------
        map : LowRankMap
        """
        return cls(np.zeros((dimension, 0)), np.zeros((0, 0)), 1.0, np.zeros(dimension))

    @classmethod
    def optimal_transport(
        cls,
        source: LowRankGaussianSummary,
        target: LowRankGaussianSummary,
        *,
        basis: np.ndarray | None = None,
    ) -> LowRankMap:
        """The Monge map pushing ``N(source)`` onto ``N(target)``.

        On the common span of the two bases the map is the dense formula of
        :class:`skslot.GaussianMap` between the restricted covariances; on the
        complement both are scalars, and the map is ``(c_t / c_s)^{1/2}``.

        Parameters
        ----------
        source, target : LowRankGaussianSummary
            Of one dimension.
        basis : ndarray of shape (m, d), optional
            Orthonormal columns whose span holds both bases (the reference's
            basis holds every client's): saves computing the common one.

        Returns
        -------
        map : LowRankMap

        Raises
        ------
        ValueError
            If the dimensions differ.
        """
        if source.dimension != target.dimension:
            raise ValueError(
                f"dimensions differ: source {source.dimension}, target {target.dimension}"
            )
        V = common_basis([target.basis, source.basis]) if basis is None else basis
        a = float(np.sqrt(target.complement / source.complement))
        d = V.shape[1]
        if d == 0:
            L = np.zeros((0, 0))
        else:
            zero = np.zeros(d)
            L = GaussianMap.optimal_transport(
                GaussianSummary(2, zero, source.project(V)),
                GaussianSummary(2, zero, target.project(V)),
            ).linear
        return cls.between(V, L, a, source.mean, target.mean)

    @classmethod
    def between(
        cls,
        basis: np.ndarray,
        linear: np.ndarray,
        complement: float,
        source_mean: np.ndarray,
        target_mean: np.ndarray,
    ) -> LowRankMap:
        """The map with linear part ``A = V L V^T + a (I - V V^T)`` taking ``mu_s`` to ``mu_t``.

        Parameters
        ----------
        basis : ndarray of shape (m, d)
            Orthonormal ``V``.
        linear : ndarray of shape (d, d)
            ``L``.
        complement : float
            ``a``.
        source_mean, target_mean : ndarray of shape (m,)

        Returns
        -------
        map : LowRankMap
            With offset ``b = mu_t - A mu_s``.
        """
        mapped = _apply_linear(basis, linear, complement, source_mean[None, :])[0]
        return cls(basis, linear, complement, target_mean - mapped)

    def geodesic(self, tau: float) -> LowRankMap:
        """``T^tau = (1 - tau) Id + tau T`` (see :meth:`skslot.GaussianMap.geodesic`).

        For an anchored map (:meth:`with_mean_fraction`) the anchor's image stays.

        Parameters
        ----------
        tau : float

        Returns
        -------
        map : LowRankMap
        """
        L = tau * self.linear
        L.flat[:: L.shape[0] + 1] += 1.0 - tau
        a = (1.0 - tau) + tau * self.complement
        if self.anchor is None:
            return LowRankMap(self.basis, L, a, tau * self.offset)
        image = self.apply(self.anchor[None, :])[0]
        mapped = _apply_linear(self.basis, L, a, self.anchor[None, :])[0]
        return LowRankMap(self.basis, L, a, image - mapped, self.anchor)

    def with_mean_fraction(self, mean_tau: float | None, source_mean: np.ndarray) -> LowRankMap:
        """This map with the source mean moved ``mean_tau`` of the way to its image.

        See :meth:`skslot.GaussianMap.with_mean_fraction`.

        Parameters
        ----------
        mean_tau : float or None
            Fraction of the mean's transport; ``None``: this map as it is.
        source_mean : ndarray of shape (m,)

        Returns
        -------
        map : LowRankMap
            Anchored at ``source_mean`` (this map itself when ``mean_tau`` is ``None``).

        Raises
        ------
        ValueError
            If this map is anchored already, or ``source_mean`` has another shape.
        """
        if mean_tau is None:
            return self
        if self.anchor is not None:
            raise ValueError("with_mean_fraction takes a full map, and this map is anchored")
        mu = np.asarray(source_mean, dtype=np.float64)
        if mu.shape != self.offset.shape:
            raise ValueError(f"source_mean must have shape {self.offset.shape}, got {mu.shape}")
        mapped = _apply_linear(self.basis, self.linear, self.complement, mu[None, :])[0]
        image = mapped + self.offset
        return LowRankMap(
            self.basis, self.linear, self.complement, mu + mean_tau * (image - mu) - mapped, mu
        )

    def apply(self, X: Any, *, out: Any = None, chunk_size: int | None = None) -> Any:
        """``T(x)`` for each row of ``X``, in ``O(n m d)`` (no ``m x m`` matrix).

        Parameters
        ----------
        X : ndarray or torch tensor of shape (n, m)
            Computed in ``X``'s floating dtype (a tensor on its device).
        out : ndarray or tensor of shape (n, m), optional
            Written in place and returned (it may not overlap ``X``).
        chunk_size : int, optional
            Rows per block, to bound temporaries.

        Returns
        -------
        Y : ndarray or torch tensor of shape (n, m)
        """
        if out is None:
            out = empty_like_rows(X, tuple(X.shape))
        d = self.basis.shape[1]
        V = to_backend(self.basis, X, dtype=out.dtype)
        inner = to_backend(self.linear - self.complement * np.eye(d), X, dtype=out.dtype)
        b = to_backend(self.offset, X, dtype=out.dtype)
        step = max(X.shape[0] if chunk_size is None else int(chunk_size), 1)
        for start in range(0, X.shape[0], step):
            rows = slice(start, start + step)
            out[rows] = _linear_rows(V, inner, self.complement, X[rows]) + b
        return out

    def dense(self) -> GaussianMap:
        """The same map as a dense :class:`~skslot.GaussianMap` (``O(m^2)`` memory).

        Returns
        -------
        map : GaussianMap
        """
        V = self.basis
        A = V @ (self.linear - self.complement * np.eye(V.shape[1])) @ V.T
        A.flat[:: V.shape[0] + 1] += self.complement
        anchor = None if self.anchor is None else self.anchor.copy()
        return GaussianMap(symmetrize(A), self.offset.copy(), anchor)


def _apply_linear(V: np.ndarray, L: np.ndarray, a: float, X: np.ndarray) -> np.ndarray:
    """``X A`` for the symmetric ``A = V L V^T + a (I - V V^T)``."""
    return _linear_rows(V, L - a * np.eye(L.shape[0]), a, X)


def _linear_rows(V: Any, inner: Any, a: float, X: Any) -> Any:
    """``X A = a X + (X V) (L - a I) V^T`` given ``inner = L - a I`` (NumPy or torch)."""
    return a * X + ((X @ V) @ inner) @ V.T
