"""The forms a class covariance travels in, and the factor a sampler draws with.

FedPFT sends each class's covariance as a matrix, as its top principal
directions plus a diagonal (:func:`low_rank_plus_diagonal`), as a diagonal or
a scalar; the server samples from a received full covariance through
:func:`covariance_factor`.
"""

from __future__ import annotations

import numpy as np

from .._linalg import cholesky_factor


def low_rank_plus_diagonal(
    spread: np.ndarray, rank: int, reg_covar: float, *, rows: bool
) -> np.ndarray:
    """``[W | d]``: the top ``rank`` principal directions and the remaining variances.

    With ``S = U diag(lambda) U^T`` the covariance, ``W = U_r
    diag(lambda_r)^{1/2}`` keeps the ``rank`` largest eigenpairs exactly and
    ``d = diag(S) - diag(W W^T) + reg_covar >= reg_covar`` keeps every
    feature's variance: one step of principal-factor analysis.  Of centred
    rows (``S = X_c^T X_c / n``), it is computed from their thin SVD
    (``O(n m min(n, m))``, no ``m x m`` matrix); of a covariance known as a
    matrix (a private client's released moments), from its eigendecomposition.
    Directions beyond the covariance's rank get zero columns.

    Parameters
    ----------
    spread : ndarray of shape (n, m) or (m, m)
        The centred rows (``rows``), or the positive semi-definite covariance.
    rank : int
        Columns of ``W``.
    reg_covar : float
        Added to every remaining variance.
    rows : bool
        Whether ``spread`` holds centred rows or a covariance matrix.

    Returns
    -------
    ndarray of shape (m, rank + 1)
    """
    if rows:
        n = spread.shape[0]
        _, singular, Vt = np.linalg.svd(spread, full_matrices=False)
        values, vectors = singular**2 / n, Vt.T
        variances = np.einsum("ij,ij->j", spread, spread) / n
    else:
        values, vectors = np.linalg.eigh(spread)
        order = np.argsort(values)[::-1]
        values, vectors = values[order].clip(min=0.0), vectors[:, order]
        variances = np.diagonal(spread)
    r = min(rank, values.shape[0])
    W = np.zeros((vectors.shape[0], rank))
    W[:, :r] = vectors[:, :r] * np.sqrt(values[:r])
    d = np.maximum(variances - np.einsum("ij,ij->i", W, W), 0.0) + reg_covar
    return np.column_stack([W, d])


def covariance_factor(cov: np.ndarray) -> np.ndarray:
    """A Cholesky factor of a received full covariance, with a growing relative jitter if needed.

    A transmitted covariance is positive semi-definite up to the rounding of
    its dtype (checked on receipt), but float16 rounding usually leaves it
    slightly indefinite at m = 1280 (every one of 136 real digits class
    covariances).  Cholesky is retried with a jitter of ``1e-8``, ``1e-7``,
    ... times the mean variance: 2.2 factorisations per covariance on average
    there.  A projection onto the positive semi-definite cone (one
    eigendecomposition) was measured 2.3x slower (``benchmarks/fedpft_bytes.py``);
    the ``"lowrank"`` form needs no factorisation at all.
    """
    scale = max(float(np.trace(cov)) / cov.shape[0], np.finfo(np.float64).tiny)
    jitter = 0.0
    for _ in range(12):
        try:
            return cholesky_factor(cov + jitter * np.eye(cov.shape[0]))
        except np.linalg.LinAlgError:
            jitter = scale * (1e-8 if jitter == 0.0 else 10.0 * jitter / scale)
    raise ValueError("a transmitted covariance is too far from positive semi-definite")
