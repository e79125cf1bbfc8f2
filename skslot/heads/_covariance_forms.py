"""The forms a class covariance travels in, and the factor a sampler draws with.

FedPFT sends each class's covariance as a matrix, as its top principal
directions plus a diagonal (:func:`low_rank_plus_diagonal`,
:func:`low_rank_of_covariance`), as a diagonal or a scalar; the server
samples from a received full covariance through :func:`covariance_factor`.
"""

from __future__ import annotations

import numpy as np

from .._linalg import cholesky_factor

__all__ = ["covariance_factor", "low_rank_of_covariance", "low_rank_plus_diagonal"]


def low_rank_plus_diagonal(centred: np.ndarray, rank: int, reg_covar: float) -> np.ndarray:
    """``[W | d]``: the top ``rank`` principal directions and the remaining variances.

    With ``S = X_c^T X_c / n`` the sample covariance of the centred rows and
    ``S = U diag(lambda) U^T``, ``W = U_r diag(lambda_r)^{1/2}`` keeps the
    ``rank`` largest eigenpairs exactly and ``d = diag(S) - diag(W W^T) +
    reg_covar >= reg_covar`` keeps every feature's variance: one step of
    principal-factor analysis, computed from the thin SVD of the rows
    (``O(n m min(n, m))``, no ``m x m`` matrix).  Directions beyond the rows'
    rank get zero columns.
    """
    n = centred.shape[0]
    _, singular, Vt = np.linalg.svd(centred, full_matrices=False)
    variances = np.einsum("ij,ij->j", centred, centred) / n
    return _factor_and_remainder(singular**2 / n, Vt.T, variances, rank, reg_covar)


def low_rank_of_covariance(cov: np.ndarray, rank: int, reg_covar: float) -> np.ndarray:
    """``[W | d]`` of a covariance matrix, as :func:`low_rank_plus_diagonal` makes it of rows.

    For a covariance known as a matrix (a private client's released moments).

    Parameters
    ----------
    cov : ndarray of shape (m, m)
        Positive semi-definite.
    rank : int
        Columns of ``W``.
    reg_covar : float
        Added to every remaining variance.

    Returns
    -------
    ndarray of shape (m, rank + 1)
    """
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1]
    return _factor_and_remainder(
        values[order].clip(min=0.0), vectors[:, order], np.diagonal(cov), rank, reg_covar
    )


def _factor_and_remainder(
    values: np.ndarray, vectors: np.ndarray, variances: np.ndarray, rank: int, reg_covar: float
) -> np.ndarray:
    """``W = U_r diag(lambda_r)^{1/2}`` of the largest eigenpairs, ``d = diag(S) - diag(W W^T)``."""
    m = vectors.shape[0]
    r = min(rank, values.shape[0])
    W = np.zeros((m, rank))
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
