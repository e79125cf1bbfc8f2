"""The Bures-Wasserstein barycenter of low-rank summaries, on the span of their bases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._barycenter_kernel import BarycenterResult, _inner_eigh, bures_wasserstein_barycenter
from .._linalg import sym_eigh
from ..maps import GaussianMap
from ._map import LowRankMap
from ._summary import (
    LowRankGaussianSummary,
    common_basis,
)

__all__ = ["LowRankBarycenter", "low_rank_barycenter"]


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
