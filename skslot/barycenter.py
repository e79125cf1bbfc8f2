"""Server step: the Bures-Wasserstein barycenter of client summaries.

:class:`BuresBarycenter` is the estimator; its fixed-point iteration
(:func:`bures_wasserstein_barycenter`) and the scheduler of blocks of clients
are in :mod:`skslot._barycenter_kernel`, importable from here.

Summaries in factor form (``Sigma_k = U_k diag(e_k) U_k^T + c_k (I - U_k U_k^T)``,
see :mod:`skslot.gaussian`) act as their scalar ``c_k`` on the orthogonal
complement of ``V = span(U_1, ..., U_K)`` (of dimension ``d <= sum r_k``), and
the Bures-Wasserstein fixed point keeps that block structure, so [1]_::

    Sigma_b = V B V^T + c_b (I - V V^T),   B = barycenter of V^T Sigma_k V,
    c_b = (sum_k w_k c_k^{1/2})^2

(:func:`_low_rank_barycenter`, ``O(K d^3 + m d^2)`` instead of ``O(K m^3)``).
When ``d`` reaches ``m`` the span is the whole space and these are the dense
formulas.

References
----------
.. [1] Agueh and Carlier, "Barycenters in the Wasserstein space", SIAM Journal
   on Mathematical Analysis, 2011 (the fixed-point characterisation whose
   invariant subspaces are used here).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ._backend import is_tensor, stack
from ._barycenter_kernel import (
    INITS,
    SOLVERS,
    BarycenterResult,
    _client_blocks,
    _in_parallel,
    _inner_eigh,
    attainable_residual,
    bures_wasserstein_barycenter,
)
from ._doc_link import DocLinkMixin
from ._linalg import common_basis, sym_eigh
from ._param_validation import Interval, Options, ParameterValidationMixin
from ._validation import client_weights, unchanged_on_error
from .defaults import COVARIANCE_FLOOR, FORM
from .exceptions import SingleClientWarning, warn_single_client
from .gaussian import GaussianSummary, as_summary_list
from .maps import GaussianMap
from .summary import GaussianSummaryEstimator

__all__ = [
    "BarycenterResult",
    "BuresBarycenter",
    "SingleClientWarning",
    "attainable_residual",
    "bures_wasserstein_barycenter",
]


#: The parameters of the fixed point, the same on either path.
_FIXED_POINT_SETTINGS = ("solver", "init", "anderson", "tol", "max_iter", "client_batch", "n_jobs")


class BuresBarycenter(DocLinkMixin, ParameterValidationMixin, BaseEstimator):
    """Reference Gaussian of the clients: weighted mean and Bures barycenter.

    ``mean_ = sum_k w_k mu_k`` and ``covariance_`` is the Bures-Wasserstein
    barycenter of the client covariances (see
    :func:`bures_wasserstein_barycenter`), with ``w_k = n_k / N`` by default.

    Summaries in factor form (:class:`~skslot.GaussianSummary` with a basis,
    from ``GaussianSummaryEstimator(form="low-rank")``) whose ranks add up to
    fewer than ``m`` take the exact low-rank path (the module docstring): the
    fixed point runs on the ``d``-dimensional span of the clients' bases, no
    ``m x m`` matrix is formed, and the reference and the maps are in factor
    form.  Otherwise (a dense summary among them, or ranks that span ``R^m``)
    every summary is made dense and the dense path runs.

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
    form : {"auto", "dense", "low-rank"}, default="auto"
        Passed to :class:`GaussianSummaryEstimator` when ``fit`` is given
        rows: ``"low-rank"`` summarises each client in factor form (for
        clients with fewer rows than features), which selects the low-rank
        path when the ranks add up to fewer than ``m``; ``"auto"`` does so
        where every client holds no more rows than features.
    device : str or torch.device, default=None
        Run the fixed point in torch on this device (for example ``"cuda"``),
        its ``K`` eigendecompositions per iteration as one batched call.
        Default: NumPy on the host, or the device of a torch tensor given to
        ``fit`` as rows.  The reference is returned on the host either way.
        On the low-rank path the ``d x d`` fixed point runs there (the
        summaries and maps stay on the host).

    Attributes
    ----------
    mean_ : ndarray of shape (m,)
    covariance_ : ndarray of shape (m, m) or None
        ``None`` on the low-rank path, where the reference is held in factor
        form (``reference_.covariance`` forms it).
    form_ : {"dense", "low-rank"}
        The path taken.
    weights_ : ndarray of shape (K,)
    clients_ : list
        Client labels, in the order of ``weights_`` (positions ``0 .. K-1`` when
        the summaries carry no label).
    summaries_ : list of GaussianSummary
        The clients' summaries as given (or as summarised from rows).
    reference_ : GaussianSummary
        The reference ``N(mean_, covariance_)`` with ``n`` the total count;
        it travels back to clients with its ``to_bytes``.
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

    _parameter_constraints: ClassVar[dict] = {
        "weights": [Options(("samples", "uniform")), "array-like"],
        "solver": [Options(SOLVERS)],
        "init": [Options(INITS)],
        "anderson": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "covariance_floor": GaussianSummaryEstimator._parameter_constraints["covariance_floor"],
        "chunk_size": GaussianSummaryEstimator._parameter_constraints["chunk_size"],
        "form": GaussianSummaryEstimator._parameter_constraints["form"],
        "client_batch": [Interval(Integral, 1, None, closed="left"), None],
        "n_jobs": GaussianSummaryEstimator._parameter_constraints["n_jobs"],
        "device": "no_validation",
    }

    def __init__(
        self,
        *,
        weights: Any = "samples",
        solver: str = "fixed-point",
        init: str = "mean",
        anderson: int = 5,
        tol: float = 1e-10,
        max_iter: int = 100,
        covariance_floor: float = COVARIANCE_FLOOR,
        chunk_size: int = 4096,
        form: str = FORM,
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
        self.form = form
        self.client_batch = client_batch
        self.n_jobs = n_jobs
        self.device = device

    def fit(self, X: Any, y: Any = None, *, client: Any = None) -> BuresBarycenter:
        """Compute the reference from client summaries, or from raw rows.

        Parameters
        ----------
        X : list or dict of summaries, or array-like of shape (n_samples, m)
            Client summaries (:class:`GaussianSummary`, in either form; a dict
            is keyed by client label), or rows that are first summarised per
            ``client``.
        y : None
            Ignored.
        client : array-like of shape (n_samples,), optional
            Client of each row, when ``X`` holds rows.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        self._validate_params()
        with unchanged_on_error(self):  # a rejected fit keeps what was fitted before
            if _is_summaries(X):
                if client is not None:
                    raise ValueError("client is only used when X holds rows, not summaries")
                labels, items = as_summary_list(X)
                self.n_features_in_ = items[0].dimension
            else:
                est = self._summary_estimator().fit(X, client=client)
                labels, items = list(est.summaries_), list(est.summaries_.values())
                self.n_features_in_ = est.n_features_in_
                if hasattr(est, "feature_names_in_"):
                    self.feature_names_in_ = est.feature_names_in_
            if len(items) == 1:
                warn_single_client("BuresBarycenter")
            self.weights_ = client_weights("weights", self.weights, [s.n for s in items])
            self.clients_ = labels
            self.summaries_ = items
            settings = {name: getattr(self, name) for name in _FIXED_POINT_SETTINGS}
            if all(s.basis is not None for s in items) and sum(s.rank for s in items) < (
                items[0].dimension
            ):  # every summary in factor form, their ranks leaving part of R^m to them
                self.form_ = "low-rank"
                self.reference_, self._low_rank_maps, result = _low_rank_barycenter(
                    items, self.weights_, device=self.device, **settings
                )
                self.mean_ = self.reference_.mean
                self.covariance_: np.ndarray | None = None
            else:  # the dense fixed point on the m x m covariances
                self.form_ = "dense"
                dense = [s.to_dense() for s in items]
                result = bures_wasserstein_barycenter(
                    [s.covariance for s in dense],
                    self.weights_,
                    device=self.device if self.device is not None or not is_tensor(X) else X.device,
                    **settings,
                )
                self.mean_ = sum(w * s.mean for w, s in zip(self.weights_, dense, strict=True))
                self.covariance_ = result.covariance
                self.reference_ = GaussianSummary(
                    n=sum(s.n for s in dense), mean=self.mean_, covariance=result.covariance
                )
            self.n_iter_ = result.n_iter
            self.residual_ = result.residual
            self.residual_floor_ = result.floor
            self._result = result
        if not result.converged:
            warnings.warn(
                f"Bures-Wasserstein barycenter did not converge in {self.max_iter} "
                f"iterations (relative residual {result.residual:.2e} > tol "
                f"{self.tol:.1e}, and above {result.floor:.1e}, the floor float64 can "
                "attain for these covariances' conditioning); increase max_iter or tol",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _summary_estimator(self, covariance: str = "total") -> GaussianSummaryEstimator:
        """The clients' summaries as this estimator's settings make them (of rows given to fit)."""
        return GaussianSummaryEstimator(
            covariance=covariance,
            covariance_floor=self.covariance_floor,
            chunk_size=self.chunk_size,
            form=self.form,
            n_jobs=self.n_jobs,
        )

    def maps(self) -> dict:
        """Each client's optimal-transport map onto the reference.

        Computed from the last iteration's factorisations (no new one):
        ``A_k = F (F^T Sigma_k F)^{-1/2} F^T`` with ``S = F F^T``, which equals
        ``S^{1/2} (S^{1/2} Sigma_k S^{1/2})^{-1/2} S^{1/2}``.

        Returns
        -------
        maps : dict
            :class:`~skslot.maps.GaussianMap` per client label (in factor form
            on the low-rank path).
        """
        check_is_fitted(self, "reference_")
        if self.form_ == "low-rank":
            return dict(zip(self.clients_, self._low_rank_maps, strict=True))
        factor, inner = self._result.factor, self._result.inner
        if inner is not None:
            return {
                label: GaussianMap.from_factors(factor, decomposition, s.mean, self.mean_)
                for label, s, decomposition in zip(
                    self.clients_, self.summaries_, inner, strict=True
                )
            }

        summaries = [s.to_dense() for s in self.summaries_]  # the covariances, decomposed again
        # streamed (client_batch set at fit); one block if it was unset since by set_params
        batch = len(summaries) if self.client_batch is None else self.client_batch
        blocks = _client_blocks(len(summaries), batch)
        tasks = [(factor, self.mean_, summaries[rows]) for rows in blocks]
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


def _low_rank_barycenter(
    summaries: list[GaussianSummary], weights: np.ndarray, **settings: Any
) -> tuple[GaussianSummary, list[GaussianMap], BarycenterResult]:
    """The barycenter of summaries in factor form on the span of their bases (module docstring).

    With ``V`` the common basis (:func:`~skslot._linalg.common_basis`, ``d``
    columns), the reference is ``V B V^T + c_b (I - V V^T)`` where ``B`` is
    the ``d x d`` barycenter of ``V^T Sigma_k V`` (the dense fixed point, run
    with ``settings``: on ``device`` in torch, or streamed over blocks of
    clients, each map then costing one more ``d x d`` eigendecomposition) and
    ``c_b = (sum_k w_k c_k^{1/2})^2``; the mean is ``sum_k w_k mu_k``.
    Client ``k``'s map is ``V L_k V^T + (c_b / c_k)^{1/2} (I - V V^T)`` with
    ``L_k`` the dense map between the restrictions, written with the
    iteration's factor ``B = F F^T``: ``L_k = F (F^T V^T Sigma_k V F)^{-1/2} F^T``
    (no new factorisation).  Returns the reference, the maps in the clients'
    order and the iteration's record.
    """
    V = common_basis([s.basis for s in summaries])
    complement = float(weights @ np.sqrt([s.complement for s in summaries])) ** 2
    mean = np.einsum("k,km->m", weights, np.stack([s.mean for s in summaries]))
    blocks = np.stack([s.project(V) for s in summaries])
    if V.shape[1] == 0:
        result = BarycenterResult(np.zeros((0, 0)), np.zeros((0, 0)), None, 1, 0.0, True)
        inner: list = [None] * len(summaries)
        basis, eigenvalues = V, np.zeros(0)
    else:
        result = bures_wasserstein_barycenter(blocks, weights, **settings)
        # streamed over blocks of clients: one decomposition per map
        inner = result.inner or [_inner_eigh(block, result.factor) for block in blocks]
        eig = sym_eigh(result.covariance)
        basis, eigenvalues = V @ eig.eigenvectors, eig.eigenvalues
    n = sum(s.n for s in summaries)
    reference = GaussianSummary(
        n, mean, basis=basis, eigenvalues=eigenvalues, complement=complement
    )
    scales = np.sqrt(complement / np.array([s.complement for s in summaries]))
    maps = [
        GaussianMap.from_factors(result.factor, root, s.mean, mean, basis=V, complement=float(a))
        for s, root, a in zip(summaries, inner, scales, strict=True)
    ]
    return reference, maps, result
