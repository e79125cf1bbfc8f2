"""The Bures-Wasserstein barycenter's fixed-point iteration, and its per-block kernels.

The estimator is :class:`skslot.BuresBarycenter`; the names here are
importable from :mod:`skslot.barycenter`.  Each iteration evaluates
``N(F) = sum_k w_k (F^T Sigma_k F)^{1/2}`` in one of two ways: in float64,
visiting the clients' covariances in blocks (:class:`_ClientBlocks`), or in
mixed precision with state carried between iterations
(:class:`skslot._barycenter_mixed.MixedRoots`, NumPy's default).

The scheduler of those blocks, also the estimator's maps', runs a kernel on
each block of clients, in threads or a joblib backend, sharing out the cores
between jobs and BLAS threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from joblib import Parallel, cpu_count, delayed, effective_n_jobs
from threadpoolctl import threadpool_limits

from ._anderson import AndersonMixing
from ._backend import as_host, as_kind_of, concatenate, is_tensor, linalg, stack, to_backend
from ._barycenter_mixed import MixedRoots, scipy_blas_single_threaded
from ._linalg import (
    RootInBasis,
    SymmetricEigh,
    checked_cholesky,
    cholesky_factor,
    solve_lower_transposed,
    sym_eigh,
    symmetrize,
)
from ._validation import check_non_negative_int, check_option, check_positive_int

SOLVERS = ("fixed-point", "picard")
PRECISIONS = ("mixed", "float64")
#: Iterations without progress, below the attainable residual, that count as converged.
STALL = 3
INITS = ("mean", "sqrt-mean")


@dataclass(frozen=True, eq=False)
class BarycenterResult:
    """Output of :func:`bures_wasserstein_barycenter`.

    Arrays are of the covariances' kind: NumPy float64 for NumPy input, tensors
    of the input's dtype on the input's device for torch input.

    Attributes
    ----------
    covariance : ndarray of shape (m, m)
        The barycenter ``S`` (the last iterate, whose fixed-point residual is
        ``residual``).
    factor : ndarray of shape (m, m)
        A factor ``F`` of ``S = F F^T`` (Cholesky for ``"fixed-point"``, the
        square root for ``"picard"``).
    inner : list of SymmetricEigh or RootInBasis, or None
        Each ``F^T Sigma_k F`` as the iteration left it: its
        eigendecomposition, or (mixed precision) its square root ``Y_k`` in an
        earlier iterate's eigenbasis ``V_k``.  Either has ``sqrt()`` and
        ``inv_sqrt()``: with ``F`` they give every client's transport map
        ``F (F^T Sigma_k F)^{-1/2} F^T`` without a new factorisation.
        ``None`` when the iteration streamed over blocks of clients
        (``client_batch`` set), which keeps none of them.
    n_iter : int
        Fixed-point evaluations made (at least 1).
    residual : float
        ``||sum_k w_k (S^{1/2} Sigma_k S^{1/2})^{1/2} - S||_F / ||S||_F``.
    converged : bool
        Whether ``residual <= tol``, or the iteration stalled (no 10 %
        progress in ``STALL = 3`` iterations) below ``floor``.
    floor : float
        The residual float64 can attain for these covariances (see
        :func:`attainable_residual`), at the last iterate.
    """

    covariance: np.ndarray
    factor: np.ndarray
    inner: list[SymmetricEigh | RootInBasis] | None
    n_iter: int
    residual: float
    converged: bool
    floor: float = 0.0


def attainable_residual(eigenvalues: Any) -> float:
    """An estimate of the relative residual below which rounding, not the iteration, dominates.

    Each iteration takes square roots of ``M_k = F^T Sigma_k F`` through an
    eigendecomposition whose eigenvalues carry absolute errors of about
    ``eps * lambda_max``; the square roots amplify them in the smallest
    directions.  Measured on covariances of condition numbers ``1e6`` to
    ``1e12`` (``m`` from 20 to 100), the residual stalls below
    ``m * eps * kappa^(1/4)``, with ``kappa`` the largest condition number of
    the ``M_k`` (about the product of the conditions of ``S`` and ``Sigma_k``:
    ``kappa^(1/4)`` is about the square root of the covariances' own
    condition number).  At ``m = 100`` and covariances of condition
    ``1e10`` it is ``2.2e-9``; for Ledoit-Wolf covariances it lies far below
    the default ``tol``.

    Parameters
    ----------
    eigenvalues : array-like of shape (K, m)
        The eigenvalues of the ``M_k``, ascending (NumPy or torch).

    Returns
    -------
    float
        ``m * eps * kappa^(1/4)``.
    """
    lam = np.asarray(as_host(eigenvalues))
    smallest = np.maximum(lam[..., 0], np.finfo(np.float64).tiny)
    kappa = float(np.max(lam[..., -1] / smallest))
    return float(lam.shape[-1] * np.finfo(np.float64).eps * kappa**0.25)


def bures_wasserstein_barycenter(
    covariances: Any,
    weights: np.ndarray,
    *,
    solver: str = "fixed-point",
    init: str | np.ndarray = "mean",
    anderson: int = 5,
    tol: float = 1e-10,
    max_iter: int = 100,
    device: Any = None,
    client_batch: int | None = None,
    n_jobs: int | None = None,
    precision: str = "mixed",
) -> BarycenterResult:
    """Bures-Wasserstein barycenter of positive definite matrices.

    The barycenter ``S`` of ``Sigma_k`` with weights ``w_k`` is the unique
    positive definite solution of ``S = sum_k w_k (S^{1/2} Sigma_k S^{1/2})^{1/2}``
    [1]_.  For any factor ``S = F F^T`` this reads ``N(F) = F^T F`` with
    ``N(F) = sum_k w_k (F^T Sigma_k F)^{1/2}``, and ``||N(F) - F^T F||_F``
    equals ``||M(S) - S||_F`` (``F = S^{1/2} Q`` with ``Q`` orthogonal).  The
    solvers iterate

    * ``"fixed-point"`` (default): ``S <- F^{-T} N(F)^2 F^{-1}`` with ``F`` the
      Cholesky factor, the iteration of Alvarez-Esteban et al. [2]_
      (``S <- S^{-1/2} M(S)^2 S^{-1/2}`` written with any factor), which
      converges from any positive definite start;
    * ``"picard"``: ``S <- M(S)`` with ``F = S^{1/2}``, the iteration of the
      SLOT-Align paper.

    Either is accelerated by Anderson mixing [3]_ of the last ``anderson``
    iterates (:mod:`skslot._anderson`): a mixed iterate that is not positive
    definite, or whose residual is ten times the best one so far, restarts the
    mixing from the plain step.  An iteration in float64 costs ``K``
    symmetric eigendecompositions (of each ``F^T Sigma_k F``, batched over a
    block of clients) plus one Cholesky factorisation (fixed point) or one
    eigendecomposition (Picard) of ``S``; the Cholesky factorisation that
    checks an accelerated iterate is the next iteration's factor.  With torch
    covariances, or ``device`` set, the iteration runs in torch on that
    device (float64); the result comes back in the covariances' kind (NumPy,
    or tensors of their dtype on their device).

    On NumPy covariances (``precision="mixed"``, one block of clients, ``m``
    at least ``MIN_DIMENSION = 32``) most evaluations are cheaper
    (:mod:`skslot._barycenter_mixed`): float32 eigendecompositions and
    float32 corrections of the roots in their eigenbases while the residual
    is far above float32's reach, then one float64 eigendecomposition, then
    float32 increments of the roots on it, accumulated in float64, while the
    clients' conditioning allows them to stay exact; a correction that does
    not converge is redone as an eigendecomposition.  The result is that of
    the float64 iteration to about ``tol`` (within ``1e-9`` relative at the
    default ``tol``), and ill-conditioned covariances fall back to float64
    eigendecompositions by the same rules.

    The per-client work of an iteration (``F^T Sigma_k F``, its
    eigendecomposition and square root) is the sum over blocks of clients,
    which ``n_jobs`` runs in parallel through :class:`joblib.Parallel`
    (threads by default, since the linear algebra releases the GIL; any
    backend set with :func:`joblib.parallel_config`, such as Ray or Dask,
    spreads the blocks over a cluster instead).

    Parameters
    ----------
    covariances : sequence of ndarray of shape (m, m), or ndarray of shape (K, m, m)
        Any floating dtype; a stack may be a :class:`numpy.memmap` (with
        ``client_batch`` set it is then read from disk one block at a time).
    weights : ndarray of shape (K,)
        Non-negative, summing to one.
    solver : {"fixed-point", "picard"}, default="fixed-point"
    init : {"mean", "sqrt-mean"} or ndarray of shape (m, m), default="mean"
        ``sum_k w_k Sigma_k``, or ``(sum_k w_k Sigma_k^{1/2})^2`` (exact for
        commuting matrices, at the cost of ``K`` more eigendecompositions; with
        acceleration the arithmetic mean reaches a given residual with fewer
        eigendecompositions in ``benchmarks/bench_barycenter.py``), or a matrix.
    anderson : int, default=5
        Anderson memory; 0 runs the plain iteration.  The history holds
        ``2 * anderson + 2`` matrices of shape ``(m, m)`` (1.6 GB in float64 at
        m = 4096 with the default 5).
    tol : float, default=1e-10
        Stop when the relative fixed-point residual is at most ``tol``, or
        when it stalls below what float64 can attain for these covariances
        (:func:`attainable_residual`, above the default ``tol`` only for
        condition numbers beyond about ``1e8``): three iterations without
        10 % progress there count as converged.
    max_iter : int, default=100
        Most fixed-point evaluations.
    device : str or torch.device, optional
        Run in torch on this device (``"cuda"``, ``"cpu"``); default: where
        the covariances are (NumPy on the host, or a tensor's device).
    client_batch : int, optional
        Clients whose covariances are converted to float64 and decomposed
        together.  ``None`` (default): all of them, held as one float64 stack
        for the whole iteration, and every client's last decomposition is
        kept (``inner``), so that the maps need no new factorisation; about
        ``5 K m^2`` float64 at the peak.  An integer streams: each iteration
        reads the covariances a block at a time, so that the memory beyond
        the covariances themselves is about ``5 * client_batch * m^2``
        float64 per job, independent of ``K``; ``inner`` is then not kept.
    n_jobs : int, optional
        Blocks of clients processed at once (joblib's convention: ``None``
        is 1 unless in a :func:`joblib.parallel_config` context, ``-1`` all
        cores).  While the jobs run, each gets ``cores // n_jobs`` BLAS
        threads, so that jobs times threads fits the machine.
    precision : {"mixed", "float64"}, default="mixed"
        ``"mixed"``: float32 work where its rules allow (above), on two or
        more NumPy covariances held in one block (``client_batch=None``, one
        job) of ``m >= 32``, each positive definite; the float64 iteration
        otherwise.
        ``"float64"``: every evaluation by float64 eigendecompositions.

    Returns
    -------
    BarycenterResult
        The barycenter, its factor, the clients' inner decompositions where
        kept, and how the iteration ended.

    References
    ----------
    .. [1] Agueh and Carlier, "Barycenters in the Wasserstein space", SIAM
       Journal on Mathematical Analysis, 2011.
    .. [2] Alvarez-Esteban, del Barrio, Cuesta-Albertos and Matran, "A
       fixed-point approach to barycenters in Wasserstein space", Journal of
       Mathematical Analysis and Applications, 2016.
    .. [3] Walker and Ni, "Anderson acceleration for fixed-point iterations",
       SIAM Journal on Numerical Analysis, 2011.
    """
    check_option("solver", solver, SOLVERS)
    check_option("precision", precision, PRECISIONS)
    anderson = check_non_negative_int("anderson", anderson)
    weights = np.asarray(weights, dtype=np.float64)
    if client_batch is not None:
        client_batch = check_positive_int("client_batch", client_batch)
    with _ClientBlocks(covariances, weights, client_batch, n_jobs, device) as clients:
        if isinstance(init, str):
            check_option("init", init, INITS)
            if init == "mean":
                S = clients.sum(_weighted_sum)
            else:
                root_mean = clients.sum(_weighted_sqrt_sum)
                S = root_mean @ root_mean
        else:
            S = to_backend(init, device=clients.device)
        S = symmetrize(S)
        roots = _roots_of(clients, precision, tol)
        with scipy_blas_single_threaded() if isinstance(roots, MixedRoots) else nullcontext():
            result = _iterate(roots, S, solver, anderson, tol, max_iter)
    kind = clients.kind
    return dataclasses.replace(
        result,
        covariance=as_kind_of(result.covariance, kind),
        factor=as_kind_of(result.factor, kind),
        inner=roots.roots(kind),
    )


def _iterate(
    roots: Any, S: Any, solver: str, anderson: int, tol: float, max_iter: int
) -> BarycenterResult:
    """The accelerated fixed point from ``S``; ``roots`` evaluates ``N(F)``.

    Returns the result in the iteration's kind, without the clients' roots.
    """
    mixer = AndersonMixing(anderson) if anderson > 0 else None
    best = lowest = np.inf
    n_iter = stalled = 0
    F = None  # the factor of S, where the positive definiteness check made it
    while True:
        n_iter += 1
        if F is None:
            F = cholesky_factor(S) if solver == "fixed-point" else sym_eigh(S).sqrt()
        N = roots.evaluate(F)  # symmetric
        FtF = F.T @ F
        residual = float(linalg(N).norm(N - FtF) / linalg(N).norm(FtF))
        roots.observe(residual)
        eigenvalues = roots.floor_eigenvalues
        floor = attainable_residual(eigenvalues) if eigenvalues is not None else 0.0
        # no 10 % progress on the best residual so far: a stall, at the floor or not
        stalled = stalled + 1 if residual > 0.9 * lowest else 0
        lowest = min(lowest, residual)
        # the residual of N as evaluated, plus what its rounding may hide (mixed precision)
        converged = residual + roots.error <= tol or (residual <= floor and stalled >= STALL)
        if converged or n_iter >= max_iter:
            return BarycenterResult(S, F, None, n_iter, residual, converged, floor)
        if solver == "fixed-point":
            X = roots.solve(F, N)
            image = symmetrize(X @ X.T)
        else:
            image = N
        F = None
        if mixer is None:
            S = image
            continue
        if residual > 10.0 * best:
            mixer.reset()
        best = min(best, residual)
        S = mixer(S, image)
        if S is not image:  # checked positive definite by the fixed point's next factor
            F = checked_cholesky(S)
            if F is None:  # the plain step instead
                mixer.reset()
                S = image
            elif solver != "fixed-point":
                F = None  # Picard's factor is the square root, made next iteration


def _roots_of(clients: _ClientBlocks, precision: str, tol: float) -> Any:
    """The evaluator of ``N(F)``: mixed precision where it applies, float64 otherwise."""
    source = clients.source
    if precision == "mixed" and clients.keep and len(clients.blocks) == 1 and not is_tensor(source):
        roots = MixedRoots.start(source, clients.weights, tol)
        if roots is not None:
            return roots
    return clients


def _weighted_sum(covariances: Any, weights: Any, F: Any = None) -> tuple[Any, None]:
    """``sum_k w_k Sigma_k`` of a block."""
    return (weights.reshape(-1, 1, 1) * covariances).sum(axis=0), None


def _weighted_sqrt_sum(covariances: Any, weights: Any, F: Any = None) -> tuple[Any, None]:
    """``sum_k w_k Sigma_k^{1/2}`` of a block."""
    return sym_eigh(covariances).weighted_sqrt_sum(weights), None


def _inner_eigh(covariances: Any, F: Any) -> SymmetricEigh:
    """Each ``F^T Sigma_k F`` of a stack, decomposed (one batched call)."""
    return sym_eigh(F.swapaxes(-1, -2) @ covariances @ F)


def _inner_sqrt_sum(covariances: Any, weights: Any, F: Any) -> tuple[Any, SymmetricEigh]:
    """``sum_k w_k (F^T Sigma_k F)^{1/2}`` of a block, and each ``F^T Sigma_k F`` decomposed."""
    inner = _inner_eigh(covariances, F)
    return inner.weighted_sqrt_sum(weights), inner


# -- the clients visited in blocks -------------------------------------------------


def _block_task(
    kernel: Callable, covariances: Any, weights: np.ndarray, F: Any, device: Any, keep: bool
) -> tuple[Any, SymmetricEigh | None]:
    """``kernel`` on one block of covariances (a list or a slice of a stack), read in float64.

    Without ``keep`` the block's eigenvectors are dropped here, so that a
    visit holds ``O(m^2)`` per block however many blocks there are.
    """
    if isinstance(covariances, list):
        covariances = stack(covariances)
    matrix, inner = kernel(
        to_backend(covariances, device=device), to_backend(weights, device=device), F
    )
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
    sequence or stack and converts only those.  It is also the float64
    evaluator of ``N(F)``, with the interface :func:`_iterate` uses, as
    :class:`MixedRoots` has it.
    """

    solve = staticmethod(solve_lower_transposed)
    #: What the residual of an evaluation does not see: nothing, in float64.
    error = 0.0

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
            self.source = to_backend(stack(list(covariances)), device=self.device)
            client_batch = -(-self.K // effective_n_jobs(n_jobs))
        else:
            self.source = covariances
        self.blocks = _client_blocks(self.K, client_batch)
        self.weights = weights
        self.n_jobs = n_jobs
        self._parallel = Parallel(n_jobs=n_jobs, prefer="threads")
        self._inner: SymmetricEigh | None = None  # the last evaluation's decompositions

    def __enter__(self) -> _ClientBlocks:
        if len(self.blocks) > 1:  # one pool of workers for every visit of the iteration
            self._parallel.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if len(self.blocks) > 1:
            self._parallel.__exit__(*exc)

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

    def evaluate(self, F: Any) -> Any:
        """``N(F)`` by ``K`` float64 eigendecompositions, symmetric, and each ``F^T Sigma_k F``
        decomposed (eigenvectors only when kept: for the maps)."""
        parts = self._visit(_inner_sqrt_sum, F)
        eigenvalues = concatenate([inner.eigenvalues for _, inner in parts])
        eigenvectors = (
            concatenate([inner.eigenvectors for _, inner in parts]) if self.keep else None
        )
        self._inner = SymmetricEigh(eigenvalues, eigenvectors)
        return symmetrize(sum(part for part, _ in parts))

    def observe(self, residual: float) -> None:
        """Nothing to learn from the residual."""

    @property
    def floor_eigenvalues(self) -> Any:
        """The eigenvalues of the last evaluation's ``F^T Sigma_k F`` (the floor's).

        ``None`` before the first evaluation.
        """
        return None if self._inner is None else self._inner.eigenvalues

    def roots(self, kind: Any) -> list[SymmetricEigh] | None:
        """The last decompositions in ``kind``'s kind; ``None`` where streamed (none kept)."""
        last = self._inner
        if last is None or last.eigenvectors is None:  # none evaluated, or none kept
            return None
        inner = SymmetricEigh(
            as_kind_of(last.eigenvalues, kind), as_kind_of(last.eigenvectors, kind)
        )
        return [inner.select(k) for k in range(len(inner.eigenvalues))]
