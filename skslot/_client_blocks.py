"""The clients' covariances visited in blocks, in threads or a joblib backend.

The scheduler of the barycenter's iteration (:mod:`skslot._barycenter_kernel`)
and of the estimator's maps: it runs a kernel on each block of clients,
sharing out the cores between jobs and BLAS threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from joblib import Parallel, cpu_count, delayed, effective_n_jobs
from threadpoolctl import threadpool_limits

from ._backend import concatenate, is_tensor, stack, to_backend
from ._linalg import SymmetricEigh


def _float64(a: Any, device: Any) -> Any:
    """``a`` in float64 on the host, or a float64 tensor on ``device``."""
    return np.asarray(a, dtype=np.float64) if device is None else to_backend(a, device=device)


def _block_task(
    kernel: Callable, covariances: Any, weights: np.ndarray, F: Any, device: Any, keep: bool
) -> tuple[Any, SymmetricEigh | None]:
    """``kernel`` on one block of covariances (a list or a slice of a stack), read in float64.

    Without ``keep`` the block's eigenvectors are dropped here, so that a
    visit holds ``O(m^2)`` per block however many blocks there are.
    """
    if isinstance(covariances, list):
        covariances = stack(covariances)
    matrix, inner = kernel(_float64(covariances, device), _float64(weights, device), F)
    if inner is not None and not keep:
        inner = SymmetricEigh(inner.eigenvalues, None)
    return matrix, inner


def _in_parallel(
    function: Callable, tasks: list[tuple], n_jobs: int | None, parallel: Parallel | None = None
) -> list:
    """``function(*task)`` for each task, in ``n_jobs`` threads or joblib's configured backend.

    The cores are shared out: while threads run, each gets ``cores // n_jobs``
    BLAS threads (as scikit-learn's ``KMeans`` limits its own), since jobs
    that each start a full BLAS thread pool compete for the same cores.
    ``parallel``: a :class:`joblib.Parallel` entered once for many calls
    (its workers, a Ray pool for instance, then start once).
    """
    if len(tasks) == 1:
        return [function(*tasks[0])]
    if parallel is None:
        parallel = Parallel(n_jobs=n_jobs, prefer="threads")
    blas = max(1, cpu_count() // effective_n_jobs(n_jobs))  # cgroup and affinity aware
    with threadpool_limits(blas, user_api="blas"):
        return parallel(delayed(function)(*task) for task in tasks)


def _client_blocks(K: int, size: int) -> list[slice]:
    """Consecutive blocks of at most ``size`` of ``K`` clients."""
    return [slice(i, min(i + size, K)) for i in range(0, K, size)]


class _ClientBlocks:
    """The clients' covariances and weights, visited in blocks (in parallel with ``n_jobs``).

    With ``client_batch=None`` the covariances are stacked once, in float64 on
    the iteration's backend, and split into one block per job; otherwise
    each visit reads ``client_batch`` covariances at a time from the caller's
    sequence or stack and converts only those.
    """

    def __init__(
        self,
        covariances: Any,
        weights: np.ndarray,
        client_batch: int | None,
        n_jobs: Any,
        device: Any,
    ) -> None:
        self.K = len(covariances)
        if self.K != weights.shape[0]:
            raise ValueError(f"{self.K} covariances but {weights.shape[0]} weights")
        self.kind = covariances[0]  # the result comes back as this kind of array
        self.device = device if device is not None or not is_tensor(self.kind) else self.kind.device
        self.keep = client_batch is None
        if client_batch is None:
            self.source = self.to_backend(stack(list(covariances)))
            client_batch = -(-self.K // effective_n_jobs(n_jobs))
        else:
            self.source = covariances
        self.blocks = _client_blocks(self.K, client_batch)
        self.weights = weights
        self.n_jobs = n_jobs
        self._parallel = Parallel(n_jobs=n_jobs, prefer="threads")

    def __enter__(self) -> _ClientBlocks:
        if len(self.blocks) > 1:  # one pool of workers for every visit of the iteration
            self._parallel.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if len(self.blocks) > 1:
            self._parallel.__exit__(*exc)

    def to_backend(self, a: Any) -> Any:
        """``a`` in float64 where the iteration runs (the host, or ``device``)."""
        return _float64(a, self.device)

    def _visit(self, kernel: Callable, F: Any) -> list[tuple[Any, Any]]:
        """``kernel`` on each block; a task receives only its block (it may be sent elsewhere)."""
        tasks = [
            (kernel, self.source[rows], self.weights[rows], F, self.device, self.keep)
            for rows in self.blocks
        ]
        return _in_parallel(_block_task, tasks, self.n_jobs, self._parallel)

    def sum(self, kernel: Callable, F: Any = None) -> Any:
        """The sum over blocks of ``kernel``'s matrix."""
        return sum(part for part, _ in self._visit(kernel, F))

    def decomposed_sum(self, kernel: Callable, F: Any) -> tuple[Any, SymmetricEigh]:
        """The sum of ``kernel``'s matrices and its decompositions (eigenvectors only when kept).

        For the iteration's ``kernel``, ``N(F)`` and each ``F^T Sigma_k F`` decomposed.
        """
        parts = self._visit(kernel, F)
        eigenvalues = concatenate([inner.eigenvalues for _, inner in parts])
        eigenvectors = (
            concatenate([inner.eigenvectors for _, inner in parts]) if self.keep else None
        )
        return sum(part for part, _ in parts), SymmetricEigh(eigenvalues, eigenvectors)
