"""Ledoit-Wolf shrunk Gaussian summaries from power sums: the client step's formulas.

The shrinkage is scikit-learn's (:func:`sklearn.covariance.ledoit_wolf_shrinkage`),
computed from mergeable power sums (:class:`~skslot._moments.ShiftedMoments`) or,
for a summary in factor form (:func:`low_rank_summary`), from traces of the
rows' ``n x n`` Gram matrix.
:class:`~skslot.GaussianSummaryEstimator` applies them per client.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ._linalg import orthonormality_error, orthonormalized, sym_eigh, symmetrize
from ._moments import ShiftedMoments
from ._validation import check_client_size
from .defaults import COVARIANCE_FLOOR
from .gaussian import ORTHONORMAL_TOL, GaussianSummary

__all__ = [
    "floor_shift",
    "ledoit_wolf_shrinkage",
    "ledoit_wolf_summary",
    "low_rank_summary",
    "oas_shrinkage",
    "shrinkage_from_traces",
    "shrunk_summary",
    "within_class_summary",
]


#: Eigenvalues of the sample covariance below this fraction of the largest
#: (times the number of rows) are round-off: their directions belong to the
#: complement, where the covariance is ``c`` anyway.
RANK_RTOL = 1e-13


def ledoit_wolf_summary(
    moments: ShiftedMoments,
    *,
    covariance_floor: float = COVARIANCE_FLOOR,
    client: int | str | None = None,
) -> GaussianSummary:
    """Ledoit-Wolf shrunk Gaussian summary from (mergeable) power sums.

    With ``S`` the maximum-likelihood covariance, ``mu = tr(S) / m`` and ``s``
    the Ledoit-Wolf shrinkage [1]_ computed exactly as
    :func:`sklearn.covariance.ledoit_wolf_shrinkage`, the covariance is::

        Sigma = (1 - s) S + s mu I  (+ delta I, the floor)

    i.e. ``lam S + (1 - lam) mu I`` with ``lam = 1 - s``.  Its smallest
    eigenvalue is at least ``s mu`` (``mu`` itself when ``m = 1``).  Floor:
    when that bound is below
    ``covariance_floor * scale`` the difference ``delta`` is added to the
    diagonal, where ``scale`` is ``mu``, or ``||mean||^2 / m`` when all rows
    are identical (``mu = 0``), or 1 when those are zero too.  So a client with
    constant features, or a zero sample covariance, still gets a positive
    definite covariance, while ordinary clients (``s >= covariance_floor``)
    get exactly the Ledoit-Wolf estimate.

    Parameters
    ----------
    moments : ShiftedMoments
        The power sums of one client's rows, fourth order included.
    covariance_floor : float, default=1e-8
        The relative floor on the smallest eigenvalue.
    client : int, str or None, default=None
        The client label the summary carries.

    Returns
    -------
    summary : GaussianSummary
        The rows' mean and shrunk covariance, with the shrinkage.

    Raises
    ------
    ValueError
        If the client has fewer than 2 rows, or the power sums lack the fourth order.

    References
    ----------
    .. [1] Ledoit and Wolf, "A well-conditioned estimator for large-dimensional
       covariance matrices", Journal of Multivariate Analysis, 2004.
    """
    # the within-class summary of one class
    return within_class_summary([moments], covariance_floor=covariance_floor, client=client)


def low_rank_summary(
    X: object, *, covariance_floor: float = COVARIANCE_FLOOR, client: int | str | None = None
) -> GaussianSummary:
    """The exact Ledoit-Wolf summary of rows, in factor form.

    With ``Z`` the centred rows, the eigenvectors of ``S = Z^T Z / n``
    with non-zero eigenvalues ``lambda`` are ``U = Z^T W diag(n lambda)^{-1/2}``
    for ``Z Z^T = W diag(n lambda) W^T`` (an ``n x n`` eigenproblem; see
    :func:`_covariance_eigh` for when it falls back to a QR factorisation); the
    shrinkage needs only ``tr S``, ``||S||_F^2`` (from ``lambda``) and the
    row norms (:func:`shrinkage_from_traces`).  The covariance
    ``U diag(e) U^T + c (I - U U^T)``, ``e = (1 - s) lambda + c``, ``c = s mu``
    (plus the floor) is that of :func:`ledoit_wolf_summary` (and
    scikit-learn's :class:`~sklearn.covariance.LedoitWolf`), floor included,
    to round-off, in ``O(n^2 m)`` time and ``O(n m)`` memory.

    Parameters
    ----------
    X : array-like of shape (n, m)
        The client's rows, ``n >= 2``.
    covariance_floor : float, default=1e-8
        The relative floor on the smallest eigenvalue (see :func:`ledoit_wolf_summary`).
    client : int, str or None, default=None
        The client label the summary carries.

    Returns
    -------
    summary : GaussianSummary
        In factor form, of rank at most ``min(n - 1, m)``.

    Raises
    ------
    ValueError
        If ``X`` is not a finite 2-D array with at least 2 rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.covariance import LedoitWolf
    >>> X = np.random.default_rng(0).normal(size=(20, 300))  # fewer rows than dimensions
    >>> s = low_rank_summary(X)
    >>> s.rank, s.dimension  # the centred rows span 19 dimensions
    (19, 300)
    >>> bool(np.allclose(s.covariance, LedoitWolf().fit(X).covariance_, rtol=0, atol=1e-12))
    True
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
    if m == 1:  # S is mu itself: no complement to speak of, the span is the line
        e, c, U, shrinkage = np.array([mu + shift]), mu + shift, np.ones((1, 1)), 0.0
    else:
        c = shrinkage * mu + shift
        e = (1.0 - shrinkage) * lam + c
    return GaussianSummary(
        n, mean, shrinkage=shrinkage, client=client, basis=U, eigenvalues=e, complement=c
    )


def _covariance_eigh(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-zero eigenvalues of ``S = Z^T Z / n`` and their orthonormal eigenvectors.

    For ``n < m`` from the ``n x n`` Gram ``Z Z^T = W diag(n lambda) W^T``:
    ``U = Z^T W diag(n lambda)^{-1/2}``, whose columns are orthonormal up to
    ``eps lambda_max / lambda_i``; when that exceeds
    :data:`~skslot.gaussian.ORTHONORMAL_TOL` / 100 (nearly dependent rows),
    from the thin QR factorisation ``Z^T = Q R`` instead, ``U = Q W'`` with
    ``R R^T = W' diag(n lambda) W'^T`` (exactly orthonormal, four times the
    cost).  For ``n >= m`` from ``S`` itself.  Eigenvalues below
    :data:`RANK_RTOL` ``n`` times the largest are round-off and left out.
    """
    n, m = Z.shape

    def kept(eig):
        keep = eig.eigenvalues > RANK_RTOL * n * max(float(eig.eigenvalues[-1]), 0.0)
        return eig.eigenvalues[keep] / n, eig.eigenvectors[:, keep]

    if n >= m:
        return kept(sym_eigh(symmetrize(Z.T @ Z)))
    lam, W = kept(sym_eigh(symmetrize(Z @ Z.T)))
    U = Z.T @ (W / np.sqrt(n * lam))
    if orthonormality_error(U) <= ORTHONORMAL_TOL / 100:
        # the nearest orthonormal columns: what a decoder accepts as the float64
        # arithmetic of a basis (BASIS_ROUNDING)
        return lam, orthonormalized(U)
    Q, R = np.linalg.qr(Z.T)
    lam, W = kept(sym_eigh(symmetrize(R @ R.T)))
    return lam, Q @ W


def _fourth_order_sum(moments: ShiftedMoments) -> float:
    """``s4 = sum ||z_i||^4`` of the power sums (the shrinkage needs it)."""
    if moments.s4 is None:
        raise ValueError("the Ledoit-Wolf shrinkage needs power sums of the fourth order")
    return moments.s4


def ledoit_wolf_shrinkage(S: np.ndarray, s4: float, n: int) -> float:
    """The Ledoit-Wolf shrinkage of centred rows ``z_i``, from their power sums.

    ``S = sum z_i z_i^T / n`` and ``s4 = sum ||z_i||^4``; with ``mu = tr(S) / m``::

        delta = ||S - mu I||_F^2 / m,   beta = min(delta, (s4 / n - ||S||_F^2) / (m n)),
        s = beta / delta

    (0 for ``m = 1``, a zero ``S`` or ``beta <= 0``), exactly
    :func:`sklearn.covariance.ledoit_wolf_shrinkage` on the rows ``z_i``.

    Parameters
    ----------
    S : ndarray of shape (m, m)
        The maximum-likelihood covariance ``sum z_i z_i^T / n``.
    s4 : float
        ``sum ||z_i||^4``.
    n : int
        The number of rows.

    Returns
    -------
    shrinkage : float
        The shrinkage ``s``, in ``[0, 1]``.
    """
    return shrinkage_from_traces(float(np.trace(S)), float(np.sum(S * S)), s4, n, S.shape[0])


def shrinkage_from_traces(trace: float, frobenius2: float, s4: float, n: int, m: int) -> float:
    """:func:`ledoit_wolf_shrinkage` from ``tr S`` and ``||S||_F^2`` alone.

    Both are traces of the rows' ``n x n`` Gram matrix ``Z Z^T`` as well
    (``tr S = tr(Z Z^T) / n``, ``||S||_F^2 = ||Z Z^T||_F^2 / n^2``), which is how
    a low-rank summary computes them without forming ``S``.

    Parameters
    ----------
    trace : float
        ``tr S``.
    frobenius2 : float
        ``||S||_F^2``.
    s4 : float
        ``sum ||z_i||^4``.
    n, m : int
        The number of rows and the dimension.

    Returns
    -------
    shrinkage : float
        The shrinkage ``s``, in ``[0, 1]``.
    """
    mu = trace / m
    if m == 1 or trace == 0.0:
        return 0.0
    beta = (s4 / n - frobenius2) / (m * n)
    delta = (frobenius2 - 2.0 * mu * trace + m * mu**2) / m
    beta = min(beta, delta)
    return 0.0 if beta <= 0.0 else beta / delta


def within_class_summary(
    class_moments: Sequence[ShiftedMoments],
    *,
    covariance_floor: float = COVARIANCE_FLOOR,
    client: int | str | None = None,
) -> GaussianSummary:
    """Label-aware summary: the rows' mean, the Ledoit-Wolf covariance of class-centred rows.

    With ``mu_c`` each class's mean, the covariance is that of the rows
    ``z_i = x_i - mu_{c(i)}``::

        S_w = sum_c sum_{i in c} (x_i - mu_c)(x_i - mu_c)^T / n,

    shrunk as in :func:`ledoit_wolf_summary` with the fourth-order sum
    ``sum_c sum_{i in c} ||x_i - mu_c||^4``; the mean is the mean of all rows.
    The class mix of the client (its label shift) no longer enters the
    covariance a map transports.  Each class's power sums are exactly
    mergeable, so streaming and merging stay exact.

    Parameters
    ----------
    class_moments : sequence of ShiftedMoments
        The power sums of each class of one client (fourth order included).
    covariance_floor : float, default=1e-8
        The relative floor on the smallest eigenvalue (see :func:`ledoit_wolf_summary`).
    client : int, str or None, default=None
        The client label the summary carries.

    Returns
    -------
    summary : GaussianSummary
        The rows' mean and the shrunk within-class covariance.

    Raises
    ------
    ValueError
        If the client has fewer than 2 rows, or the power sums lack the fourth order.
    """
    total = class_moments[0]
    for part in class_moments[1:]:
        total = total.merge(part)
    n = check_client_size(total.n, client)
    centred = [part.centred() for part in class_moments]
    S = sum((c.gram for c in centred), np.zeros_like(centred[0].gram)) / n
    S = 0.5 * (S + S.T)
    shrinkage = ledoit_wolf_shrinkage(S, float(sum(_fourth_order_sum(c) for c in centred)), n)
    return shrunk_summary(
        n, total.mean, S, shrinkage, covariance_floor=covariance_floor, client=client
    )


def shrunk_summary(
    n: int,
    mean: np.ndarray,
    S: np.ndarray,
    shrinkage: float,
    *,
    covariance_floor: float = COVARIANCE_FLOOR,
    client: int | str | None = None,
) -> GaussianSummary:
    """``(1 - s) S + s mu I`` with ``mu = tr(S) / m``, floored (see :func:`ledoit_wolf_summary`).

    ``S`` must be positive semi-definite; the result is positive definite.

    Parameters
    ----------
    n : int
        The number of rows (at least 2).
    mean : ndarray of shape (m,)
        The rows' mean.
    S : ndarray of shape (m, m)
        The positive semi-definite covariance to shrink.
    shrinkage : float
        The shrinkage ``s``, in ``[0, 1]``.
    covariance_floor : float, default=1e-8
        The relative floor on the smallest eigenvalue.
    client : int, str or None, default=None
        The client label the summary carries.

    Returns
    -------
    summary : GaussianSummary
        The summary with the shrunk, floored covariance.
    """
    m = mean.shape[0]
    mu = float(np.trace(S)) / m
    cov = (1.0 - shrinkage) * S
    cov.flat[:: m + 1] += shrinkage * mu + floor_shift(
        mu, shrinkage, mean, covariance_floor=covariance_floor, client=client
    )
    return GaussianSummary(n=n, mean=mean, covariance=cov, shrinkage=shrinkage, client=client)


def floor_shift(
    mu: float,
    shrinkage: float,
    mean: np.ndarray,
    *,
    covariance_floor: float,
    client: int | str | None = None,
) -> float:
    """What the floor of :func:`ledoit_wolf_summary` adds to the shrunk covariance's diagonal.

    Warns when the sample covariance is zero (all rows identical).

    Parameters
    ----------
    mu : float
        ``tr(S) / m``.
    shrinkage : float
        The Ledoit-Wolf shrinkage.
    mean : ndarray of shape (m,)
        The rows' mean (the floor's scale when ``mu = 0``).
    covariance_floor : float
        The relative floor on the smallest eigenvalue.
    client : int, str or None, default=None
        The client, for the warning.

    Returns
    -------
    shift : float
        ``max(0, covariance_floor * scale - lower bound)``, with the lower
        bound ``shrinkage * mu`` on the smallest eigenvalue (``mu`` when
        ``m = 1``).
    """
    m = mean.shape[0]
    scale = mu
    if scale <= 0.0:
        scale = float(mean @ mean) / m or 1.0
        warnings.warn(
            f"client {client!r} has a zero sample covariance (all rows identical); "
            f"its covariance is floored to {covariance_floor * scale:.3g} * I",
            UserWarning,
            stacklevel=5,
        )
    floor = covariance_floor * scale
    lower_bound = mu if m == 1 else shrinkage * mu  # on the smallest eigenvalue
    return max(0.0, floor - lower_bound)


def oas_shrinkage(S: np.ndarray, n: int) -> float:
    """Oracle approximating shrinkage intensity of ``S`` towards ``tr(S) / m * I``.

    ``rho = min(1, (tr(S^2) / m + mu^2) / ((n + 1) (tr(S^2) / m - mu^2 / m)))``
    with ``mu = tr(S) / m`` (the form :func:`sklearn.covariance.oas` uses).

    Parameters
    ----------
    S : ndarray of shape (m, m)
        Covariance estimate.
    n : int
        Number of rows it was estimated from.

    Returns
    -------
    rho : float
        Shrinkage intensity, in ``[0, 1]``.
    """
    m = S.shape[0]
    mu = float(np.trace(S)) / m
    alpha = float(np.mean(S * S))
    numerator = alpha + mu * mu
    denominator = (n + 1.0) * (alpha - mu * mu / m)
    return 1.0 if denominator <= 0 else min(numerator / denominator, 1.0)
