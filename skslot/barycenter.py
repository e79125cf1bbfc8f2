"""Server step: the Bures-Wasserstein barycenter of client summaries."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse
from joblib import Parallel, cpu_count, delayed, effective_n_jobs
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from ._anderson import AndersonMixing
from ._backend import as_host, as_kind_of, concatenate, is_tensor, linalg, stack, to_backend
from ._doc_link import DocLinkMixin
from ._linalg import (
    SymmetricEigh,
    cholesky_factor,
    is_positive_definite,
    solve_lower_transposed,
    sym_eigh,
    symmetrize,
)
from ._validation import (
    ROUTING_HINT,
    check_in_range,
    check_non_negative_int,
    check_option,
    check_positive_int,
    client_weights,
)
from .gaussian import GaussianMap, GaussianSummary
from .summary import GaussianSummaryEstimator

__all__ = [
    "BarycenterResult",
    "BuresBarycenter",
    "SingleClientWarning",
    "attainable_residual",
    "bures_wasserstein_barycenter",
]

SOLVERS = ("fixed-point", "picard")
#: Iterations without progress, below the attainable residual, that count as converged.
STALL = 3
INITS = ("mean", "sqrt-mean")


class SingleClientWarning(UserWarning):
    """A fit saw one client only, so the reference is that client and alignment does nothing.

    Raised when client labels were forgotten (``client=None``, or metadata
    routing off in a Pipeline): every row then counts as one client, whose
    map onto itself is the identity.
    """


def warn_single_client(estimator: str, *, stacklevel: int = 2) -> None:
    """Warn that ``estimator`` was fitted on a single client (see :class:`SingleClientWarning`)."""
    warnings.warn(
        f"{estimator} was fitted on a single client (client=None or a single label), so the "
        "reference is that client's own Gaussian and the alignment is the identity: transform "
        "returns its rows unchanged. Pass client=<the client of each row> to fit. " + ROUTING_HINT,
        SingleClientWarning,
        stacklevel=stacklevel + 1,
    )


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
    inner : list of SymmetricEigh or None
        Eigendecompositions of ``F^T Sigma_k F``: with ``F`` they give every
        client's transport map ``F (F^T Sigma_k F)^{-1/2} F^T`` without a new
        factorisation.  ``None`` when the iteration streamed over blocks of
        clients (``client_batch`` set), which keeps none of them.
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
    inner: list[SymmetricEigh] | None
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
    condition number).  ``eigenvalues``: those of the ``M_k``, shape
    ``(K, m)``, ascending.  At ``m = 100`` and covariances of condition
    ``1e10`` it is ``2.2e-9``; for Ledoit-Wolf covariances it lies far below
    the default ``tol``.
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
    mixing from the plain step.  Each iteration costs ``K`` symmetric
    eigendecompositions (of each ``F^T Sigma_k F``, batched over a block of
    clients) plus one Cholesky factorisation (fixed point) or one
    eigendecomposition (Picard) of ``S``, and one Cholesky factorisation to
    check a mixed iterate.  With torch covariances, or ``device`` set, the
    iteration runs in torch on that device (float64); the result comes back
    in the covariances' kind (NumPy, or tensors of their dtype on their
    device).

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
    solver : {"fixed-point", "picard"}
    init : {"mean", "sqrt-mean"} or ndarray of shape (m, m)
        ``sum_k w_k Sigma_k``, or ``(sum_k w_k Sigma_k^{1/2})^2`` (exact for
        commuting matrices, at the cost of ``K`` more eigendecompositions; with
        acceleration the arithmetic mean reaches a given residual with fewer
        eigendecompositions in ``benchmarks/bench_barycenter.py``), or a matrix.
    anderson : int
        Anderson memory; 0 runs the plain iteration.  The history holds
        ``2 * anderson + 2`` matrices of shape ``(m, m)`` (1.6 GB in float64 at
        m = 4096 with the default 5).
    tol : float
        Stop when the relative fixed-point residual is at most ``tol``, or
        when it stalls below what float64 can attain for these covariances
        (:func:`attainable_residual`, above the default ``tol`` only for
        condition numbers beyond about ``1e8``): three iterations without
        10 % progress there count as converged.
    max_iter : int
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
            S = clients.to_backend(init)
        S = symmetrize(S)
        mixer = AndersonMixing(anderson) if anderson > 0 else None
        best = lowest = np.inf
        n_iter = stalled = 0
        while True:
            n_iter += 1
            F = cholesky_factor(S) if solver == "fixed-point" else sym_eigh(S).sqrt()
            N, inner = clients.inner_sqrt_sum(F)  # K eigendecompositions, in blocks
            N = symmetrize(N)
            FtF = F.T @ F
            residual = float(linalg(N).norm(N - FtF) / linalg(N).norm(FtF))
            floor = attainable_residual(inner.eigenvalues)
            # no 10 % progress on the best residual so far: a stall, at the floor or not
            stalled = stalled + 1 if residual > 0.9 * lowest else 0
            lowest = min(lowest, residual)
            converged = residual <= tol or (residual <= floor and stalled >= STALL)
            if converged or n_iter >= max_iter:
                break
            if solver == "fixed-point":
                X = solve_lower_transposed(F, N)
                image = symmetrize(X @ X.T)
            else:
                image = N
            if mixer is None:
                S = image
                continue
            if residual > 10.0 * best:
                mixer.reset()
            best = min(best, residual)
            S = mixer(S, image)
            if S is not image and not is_positive_definite(S):
                mixer.reset()
                S = image
    kind = clients.kind
    kept = None
    if inner.eigenvectors is not None:
        inner = SymmetricEigh(
            as_kind_of(inner.eigenvalues, kind), as_kind_of(inner.eigenvectors, kind)
        )
        kept = [inner.select(k) for k in range(len(weights))]
    return BarycenterResult(
        as_kind_of(S, kind), as_kind_of(F, kind), kept, n_iter, residual, converged, floor
    )


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
        if self.keep:
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

    def inner_sqrt_sum(self, F: Any) -> tuple[Any, SymmetricEigh]:
        """``N(F)`` and the decompositions (eigenvectors only when kept)."""
        parts = self._visit(_inner_sqrt_sum, F)
        eigenvalues = concatenate([inner.eigenvalues for _, inner in parts])
        eigenvectors = (
            concatenate([inner.eigenvectors for _, inner in parts]) if self.keep else None
        )
        return sum(part for part, _ in parts), SymmetricEigh(eigenvalues, eigenvectors)


def as_summary_list(summaries: Any) -> tuple[list, list[GaussianSummary]]:
    """Client labels and summaries from a summary, a list or a dict of them."""
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
    seen = set()
    for label in labels:
        if label in seen:
            raise ValueError(
                f"two summaries have client label {label!r}; each client sends one summary "
                "(merge a client's partial summaries with GaussianSummaryEstimator.merge)"
            )
        seen.add(label)
    for label, s in zip(labels, items, strict=True):
        if not isinstance(s, GaussianSummary):
            raise TypeError(
                f"expected GaussianSummary objects, got {type(s).__name__} for client {label!r}"
            )
    dims = {s.dimension for s in items}
    if len(dims) > 1:
        raise ValueError(f"summaries have different dimensions: {sorted(dims)}")
    return labels, items


class BuresBarycenter(DocLinkMixin, BaseEstimator):
    """Reference Gaussian of the clients: weighted mean and Bures barycenter.

    ``mean_ = sum_k w_k mu_k`` and ``covariance_`` is the Bures-Wasserstein
    barycenter of the client covariances (see
    :func:`bures_wasserstein_barycenter`), with ``w_k = n_k / N`` by default.

    Parameters
    ----------
    weights : "samples", "uniform" or array-like of shape (K,), default="samples"
        Client weights: ``n_k / N``, ``1 / K``, or given (normalised to sum 1).
    solver : {"fixed-point", "picard"}, default="fixed-point"
        Alvarez-Esteban's provably convergent iteration, or the paper's.
    init : {"mean", "sqrt-mean"}, default="mean"
        Starting point ``sum w_k Sigma_k`` or ``(sum w_k Sigma_k^{1/2})^2``.
    anderson : int, default=5
        Memory of the Anderson acceleration of the iteration; 0 runs the plain
        iteration (the same fixed point, more iterations; less memory, see
        :func:`bures_wasserstein_barycenter`).
    tol : float, default=1e-10
        Relative fixed-point residual at which to stop.
    max_iter : int, default=100
        A :class:`~sklearn.exceptions.ConvergenceWarning` is raised when
        reached before ``tol``.
    client_batch : int, default=None
        Clients decomposed together in each iteration.  ``None`` keeps every
        client's covariance in one float64 stack and its last decomposition,
        for maps without a new factorisation (about ``5 K m^2`` float64 at the
        peak); an integer streams over blocks of that many clients, so that
        the iteration's memory beyond the summaries is about
        ``5 * client_batch * m^2`` float64 per job whatever ``K`` is (the maps
        then cost one more eigendecomposition per client).  See
        :func:`bures_wasserstein_barycenter`.
    n_jobs : int, default=None
        Parallel jobs over clients: summarising rows (passed to
        :class:`GaussianSummaryEstimator`), the blocks of clients of each
        iteration and the maps (threads by default; a
        :func:`joblib.parallel_config` backend such as Ray spreads them over
        a cluster).
    covariance_floor, chunk_size
        Passed to :class:`GaussianSummaryEstimator` when ``fit`` is given rows.
    device : str or torch.device, default=None
        Run the fixed point in torch on this device (for example ``"cuda"``),
        its ``K`` eigendecompositions per iteration as one batched call.
        Default: NumPy on the host, or the device of a torch tensor given to
        ``fit`` as rows.  The reference is returned on the host either way.

    Attributes
    ----------
    mean_ : ndarray of shape (m,)
    covariance_ : ndarray of shape (m, m)
    weights_ : ndarray of shape (K,)
    clients_ : list
        Client labels, in the order of ``weights_`` (positions ``0 .. K-1`` when
        the summaries carry no label).
    summaries_ : list of GaussianSummary
    reference_ : GaussianSummary
        The reference ``N(mean_, covariance_)`` with ``n`` the total count;
        it travels back to clients with :meth:`GaussianSummary.to_bytes`.
    n_iter_ : int
    residual_ : float
        Final relative fixed-point residual.
    residual_floor_ : float
        The residual float64 can attain for these covariances
        (:func:`attainable_residual`); an iteration that stalls below it
        has converged.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import BuresBarycenter, GaussianSummary
    >>> a = GaussianSummary(10, np.zeros(2), np.diag([1.0, 4.0]))
    >>> b = GaussianSummary(30, np.ones(2), np.diag([9.0, 4.0]))
    >>> bary = BuresBarycenter().fit([a, b])
    >>> bary.mean_
    array([0.75, 0.75])
    >>> np.round(np.diag(bary.covariance_), 6)  # (0.25 * 1 + 0.75 * 3)^2
    array([6.25, 4.  ])
    """

    __metadata_request__fit = {"client": True}

    def __init__(
        self,
        *,
        weights: Any = "samples",
        solver: str = "fixed-point",
        init: str = "mean",
        anderson: int = 5,
        tol: float = 1e-10,
        max_iter: int = 100,
        covariance_floor: float = 1e-8,
        chunk_size: int = 4096,
        client_batch: int | None = None,
        n_jobs: int | None = None,
        device: Any = None,
    ) -> None:
        self.weights = weights
        self.solver = solver
        self.init = init
        self.anderson = anderson
        self.tol = tol
        self.max_iter = max_iter
        self.covariance_floor = covariance_floor
        self.chunk_size = chunk_size
        self.client_batch = client_batch
        self.n_jobs = n_jobs
        self.device = device

    def fit(self, X: Any, y: Any = None, *, client: Any = None) -> BuresBarycenter:
        """Compute the reference from client summaries, or from raw rows.

        Parameters
        ----------
        X : list or dict of GaussianSummary, or array-like of shape (n_samples, m)
            Client summaries (a dict is keyed by client label), or rows that
            are first summarised per ``client``.
        y : ignored
        client : array-like of shape (n_samples,), optional
            Client of each row, when ``X`` holds rows.

        Returns
        -------
        self : object
        """
        check_in_range("tol", self.tol, 0.0, None)
        check_positive_int("max_iter", self.max_iter)
        if _is_summaries(X):
            if client is not None:
                raise ValueError("client is only used when X holds rows, not summaries")
            labels, items = as_summary_list(X)
            self.n_features_in_ = items[0].dimension
        else:
            est = GaussianSummaryEstimator(
                covariance_floor=self.covariance_floor,
                chunk_size=self.chunk_size,
                n_jobs=self.n_jobs,
            ).fit(X, client=client)
            labels, items = list(est.summaries_), list(est.summaries_.values())
            self.n_features_in_ = est.n_features_in_
            if hasattr(est, "feature_names_in_"):
                self.feature_names_in_ = est.feature_names_in_
        if len(items) == 1:
            warn_single_client("BuresBarycenter")
        self.weights_ = client_weights("weights", self.weights, [s.n for s in items])
        result = bures_wasserstein_barycenter(
            [s.covariance for s in items],
            self.weights_,
            solver=self.solver,
            init=self.init,
            anderson=self.anderson,
            tol=self.tol,
            max_iter=self.max_iter,
            device=self.device if self.device is not None or not is_tensor(X) else X.device,
            client_batch=self.client_batch,
            n_jobs=self.n_jobs,
        )
        if not result.converged:
            warnings.warn(
                f"Bures-Wasserstein barycenter did not converge in {self.max_iter} "
                f"iterations (relative residual {result.residual:.2e} > tol "
                f"{self.tol:.1e}, and above {result.floor:.1e}, the floor float64 can "
                "attain for these covariances' conditioning); increase max_iter or tol",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.clients_ = labels
        self.summaries_ = items
        self.mean_ = sum(w * s.mean for w, s in zip(self.weights_, items, strict=True))
        self.covariance_ = result.covariance
        self.n_iter_ = result.n_iter
        self.residual_ = result.residual
        self.residual_floor_ = result.floor
        self.reference_ = GaussianSummary(
            n=sum(s.n for s in items), mean=self.mean_, covariance=self.covariance_
        )
        self._result = result
        return self

    def transport_maps(self) -> dict:
        """Each client's optimal-transport map onto the reference.

        Computed from the last iteration's factorisations (no new one):
        ``A_k = F (F^T Sigma_k F)^{-1/2} F^T`` with ``S = F F^T``, which equals
        ``S^{1/2} (S^{1/2} Sigma_k S^{1/2})^{-1/2} S^{1/2}``.

        Returns
        -------
        maps : dict
            :class:`~skslot.gaussian.GaussianMap` per client label.
        """
        check_is_fitted(self, "reference_")
        factor, inner = self._result.factor, self._result.inner
        if inner is not None:
            return {
                label: GaussianMap.from_factors(factor, decomposition, s.mean, self.mean_)
                for label, s, decomposition in zip(
                    self.clients_, self.summaries_, inner, strict=True
                )
            }

        blocks = _client_blocks(len(self.summaries_), self.client_batch)
        tasks = [(factor, self.mean_, self.summaries_[rows]) for rows in blocks]
        parts = _in_parallel(_maps_onto, tasks, self.n_jobs)
        return dict(zip(self.clients_, (m for part in parts for m in part), strict=True))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags


def _maps_onto(factor: np.ndarray, mean: np.ndarray, summaries: list) -> list[GaussianMap]:
    """The maps of a block of clients onto ``N(mean, F F^T)``: one eigendecomposition each."""
    inner = _inner_eigh(stack([s.covariance for s in summaries]), factor)
    return [
        GaussianMap.from_factors(factor, inner.select(j), s.mean, mean)
        for j, s in enumerate(summaries)
    ]


def _is_summaries(X: Any) -> bool:
    if isinstance(X, GaussianSummary):
        return True
    if isinstance(X, Mapping) and not scipy.sparse.issparse(X):  # dok is a dict
        return True
    return isinstance(X, (list, tuple)) and bool(X) and isinstance(X[0], GaussianSummary)
