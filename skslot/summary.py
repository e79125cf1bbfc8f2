"""Client step: per-client Gaussian summaries with Ledoit-Wolf shrinkage."""

from __future__ import annotations

import copy
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ._backend import is_tensor
from ._doc_link import DocLinkMixin
from ._moments import DEFAULT_CHUNK_SIZE, RowMagnitude, ShiftedMoments
from ._param_validation import Interval, InvalidParameterError, Options, ParameterValidationMixin
from ._validation import (
    FEATURE_RANGE,
    check_client_labels,
    check_client_size,
    check_feature_scale,
    check_finite_rows,
    check_row_labels,
    check_rows,
    client_rows,
    unchanged_on_error,
)
from .defaults import COVARIANCE_FLOOR, DELTA
from .exceptions import SmallClientWarning, shown_labels, warn_once
from .ledoit_wolf import ledoit_wolf_summary, low_rank_summary, within_class_summary
from .privacy._accounting import MAX_EPSILON, gaussian_noise_scale
from .privacy._summary import (
    SUMMARY_SENSITIVITY,
    noise_generator,
    private_covariance_problem,
    private_summary,
)

__all__ = ["GaussianSummaryEstimator"]  # the formulas are skslot.ledoit_wolf's

#: What a summary's covariance describes: all rows, or class-centred rows.
COVARIANCES = ("total", "within")
#: How a summary is held: a dense ``m x m`` covariance, or low rank plus a multiple of the
#: identity (the factor form of :class:`~skslot.GaussianSummary`); ``"auto"``: low rank where
#: every client holds no more rows than features and the summary allows it, else dense.
FORMS = ("auto", "dense", "low-rank")


class GaussianSummaryEstimator(DocLinkMixin, ParameterValidationMixin, BaseEstimator):
    """Per-client mean and Ledoit-Wolf shrunk covariance (the client step).

    Each client's rows are reduced to mergeable power sums (count, sum, Gram
    matrix, and the two fourth-order sums the Ledoit-Wolf shrinkage needs),
    read chunk by chunk, then to a :class:`~skslot.GaussianSummary`.  The mean,
    covariance and shrinkage equal :class:`sklearn.covariance.LedoitWolf`'s;
    ``partial_fit`` over chunks, or :meth:`merge` of estimators fitted on
    disjoint shards, give the same summaries as one ``fit`` on all rows.

    Parameters
    ----------
    covariance : {"total", "within"}, default="total"
        What each summary's covariance describes: all of the client's rows
        (the paper's summary), or its *class-centred* rows, ``x - mu_c``
        (label-aware, :func:`~skslot.ledoit_wolf.within_class_summary`: a client's class mix then
        no longer enters the covariance its map transports; the mean stays
        the mean of all rows).  ``"within"`` needs the class labels ``y`` in
        ``fit`` and ``partial_fit``, and has no differentially private
        release (``epsilon`` is refused).
    form : {"dense", "low-rank", "auto"}, default="dense"
        How each client holds and sends its summary: ``"dense"`` (an ``m x m``
        covariance), ``"low-rank"`` (its exact factor form, for clients with
        no more rows than features) or ``"auto"`` (the factor form where every
        client holds no more rows than features).  ``"dense"``: a
        :class:`~skslot.GaussianSummary` from mergeable power sums (``O(n m^2)``
        time, ``O(m^2)`` memory), the one that merges (``partial_fit``, :meth:`merge`).
        ``"low-rank"``: the same Ledoit-Wolf covariance in factor form
        (:func:`~skslot.ledoit_wolf.low_rank_summary`), computed from the
        client's ``n x n`` Gram matrix (``O(n^2 m)`` time, ``O(n m)`` memory;
        exact, and much cheaper when clients hold fewer rows than features,
        see :mod:`skslot.gaussian`).  It needs each client's rows in one
        ``fit``: ``partial_fit``, :meth:`merge`, ``covariance="within"`` and
        ``epsilon`` need ``"dense"``.  ``"auto"``: ``"low-rank"`` where every
        client holds no more rows than features and nothing above needs
        ``"dense"``, else ``"dense"`` (:attr:`form_` says which).  Where
        every client sends its factor form and their ranks add up to fewer
        than ``m``, the reference is built on the span of the factors
        (:class:`~skslot.BuresBarycenter`), the dense way otherwise.
    covariance_floor : float, default=1e-8
        Relative floor (``>= 0``) on the smallest eigenvalue of each
        covariance, see :func:`~skslot.ledoit_wolf.ledoit_wolf_summary`.  Only acts on degenerate
        clients.
    chunk_size : int, default=4096
        Rows converted to float64 at a time (a positive integer); float32
        input is never upcast as a whole.
    n_jobs : int, default=None
        Clients summarised in parallel (joblib threads; BLAS releases the GIL).
    epsilon : float, default=None
        Make each summary ``(epsilon, delta)``-differentially private with the
        Gaussian mechanism (see :mod:`skslot.privacy`): rows are clipped to
        norm ``clip_norm``, noise of scale ``noise_scale_`` is added to the
        sum and Gram matrix (about zero), the noisy covariance is projected to
        positive semi-definite and shrunk with the oracle approximating
        shrinkage.  ``None`` (default): the exact Ledoit-Wolf summary.
        Otherwise ``> 0``.
    delta : float, default=1e-5
        The ``delta`` of the guarantee, in ``[0, 1]`` and, with ``epsilon``,
        in ``(0, 1)``; keep it well below ``1 / n``.
    clip_norm : float, default=None
        Row-norm bound ``C > 0``, required with ``epsilon``.  Pick it from public
        knowledge (for example 1 for L2-normalised features), not from the data.
    random_state : int, RandomState instance or None, default=None
        Seed of the privacy noise.  ``None`` (the default, and the only
        setting for production) draws fresh operating-system entropy for every
        release, untouched by any ``np.random.seed`` in the process; a fixed
        seed makes the noise reproducible and identical across releases, and
        warns (:class:`~skslot.privacy.PrivacyWarning`).

    Attributes
    ----------
    summaries_ : dict
        :class:`~skslot.GaussianSummary` per client label (key ``None`` when
        ``client`` was not given), in factor form in the low-rank form.
    form_ : {"dense", "low-rank"}
        The form the summaries are held in (``form`` with ``"auto"`` resolved).
    clients_ : list
        The client labels, sorted.
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during ``fit``, when ``X`` has string column names.
    releases_ : dict
        With ``epsilon``: private releases made per client.  Each ``fit``
        releases once; ``partial_fit`` releases after every chunk that
        touches a client, and each release spends the privacy budget again
        (``k`` releases are ``k``-fold compositions; skslot does not compose
        them for you).
    noise_scale_ : float
        Standard deviation of the noise on each released entry of the sums of
        the rows divided by ``clip_norm`` (0 without ``epsilon``): the sum's
        noise is ``clip_norm * noise_scale_``, the Gram matrix's
        ``clip_norm**2 * noise_scale_``.

    See Also
    --------
    BuresBarycenter : combines the summaries on the server.
    sklearn.covariance.LedoitWolf : the same estimate for one client.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummaryEstimator
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 3))
    >>> client = np.repeat(["a", "b"], 50)
    >>> est = GaussianSummaryEstimator().fit(X, client=client)
    >>> est.clients_
    ['a', 'b']
    >>> est.summaries_["a"].n, est.summaries_["a"].covariance.shape
    (50, (3, 3))
    """

    __metadata_request__fit = {"client": True}
    __metadata_request__partial_fit = {"client": True}

    _parameter_constraints: ClassVar[dict] = {
        "covariance": [Options(COVARIANCES)],
        "form": [Options(FORMS)],
        "covariance_floor": [Interval(Real, 0.0, None, closed="left")],
        "chunk_size": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Interval(Integral, None, None, closed="neither"), None],
        "epsilon": [Interval(Real, 0.0, MAX_EPSILON, closed="right"), None],
        "delta": [Interval(Real, 0.0, 1.0, closed="both")],
        "clip_norm": [Interval(Real, 0.0, None, closed="neither"), None],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        covariance: str = "total",
        form: str = "dense",
        covariance_floor: float = COVARIANCE_FLOOR,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        n_jobs: int | None = None,
        epsilon: float | None = None,
        delta: float = DELTA,
        clip_norm: float | None = None,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.covariance = covariance
        self.form = form
        self.covariance_floor = covariance_floor
        self.chunk_size = chunk_size
        self.n_jobs = n_jobs
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.random_state = random_state

    def _validate_params(self) -> None:
        """The declared constraints, then those tying the privacy parameters together."""
        super()._validate_params()
        private = self.epsilon is not None
        why = private_covariance_problem(self.covariance) if private else None
        dense = (
            "needs form='dense' (a low-rank summary is the Ledoit-Wolf covariance of all of a "
            "client's rows, without noise)"
        )
        problem = None
        if self.form == "low-rank" and self.covariance == "within":
            problem = f"covariance='within' {dense}"
        elif self.form == "low-rank" and private:
            problem = f"epsilon (a differentially private release) {dense}"
        elif not private and self.clip_norm is not None:
            problem = "clip_norm is only used with epsilon (differential privacy)"
        elif why:
            problem = f"with epsilon, {why}"
        elif private and self.clip_norm is None:
            problem = "epsilon needs clip_norm, the bound on each row's norm"
        elif private and not 0.0 < self.delta < 1.0:
            problem = f"with epsilon, delta must be in (0, 1), got {self.delta!r}"
        if problem:
            raise InvalidParameterError(f"{type(self).__name__}: {problem}")

    def _noise_scale(self) -> float:
        """``noise_scale_`` for the validated parameters (0 without ``epsilon``)."""
        if self.epsilon is None:
            return 0.0
        return gaussian_noise_scale(self.epsilon, self.delta, SUMMARY_SENSITIVITY)

    def _client_moments(
        self, X: Any, y: Any, client: Any, *, reset: bool, ensure_min_samples: int = 1
    ) -> dict[Any, ShiftedMoments]:
        """The rows checked and reduced to moments per group (a client, or a cell of
        :meth:`_cells`), in one pass.

        The finiteness and feature-scale checks come out of the moments pass:
        it bounds the rows' largest magnitude (:class:`~skslot._moments.RowMagnitude`),
        and only when the bounds leave either question open are the rows
        checked exactly, with the errors (and the state left behind) of
        checking them before the pass.
        """
        cells = self._cells(X, y, client)  # checked before the rows, as the rows' labels
        X = check_rows(
            self, X, reset=reset, ensure_min_samples=ensure_min_samples, ensure_all_finite=False
        )
        if is_tensor(X):  # the rows are summarised as data: no gradient flows into a summary
            X = X.detach()

        def check_exactly() -> None:
            check_finite_rows(self, X)  # fit and partial_fit restore the state on an error
            check_feature_scale(X)

        try:
            labels, codes = cells or check_client_labels(client, X.shape[0])
        except ValueError:  # the rows' own errors come first, as when checked before
            check_exactly()
            raise
        groups: list = [None]  # one client: all rows
        if len(labels) > 1:
            groups = np.split(np.argsort(codes, kind="stable"), np.cumsum(np.bincount(codes))[:-1])
        private = self.epsilon is not None  # clipped sums about zero, no fourth order

        def one_pass(rows: np.ndarray | None) -> tuple[ShiftedMoments, RowMagnitude]:
            return ShiftedMoments.with_magnitude(
                X,
                rows=rows,
                shift=np.zeros(X.shape[1]) if private else None,  # None: first chunk's mean
                fourth_order=not private,
                chunk_size=self.chunk_size,
                clip_norm=self.clip_norm,
            )

        if len(groups) == 1:  # no joblib round trip for one client
            passes = [one_pass(groups[0])]
        else:
            passes = Parallel(n_jobs=self.n_jobs, prefer="threads")(
                delayed(one_pass)(rows) for rows in groups
            )
        magnitude = RowMagnitude.join([row_magnitude for _, row_magnitude in passes])
        if not magnitude.within(*FEATURE_RANGE):
            check_exactly()
        return dict(zip(labels, (moments for moments, _ in passes), strict=True))

    def _finalise(self, labels: list) -> None:
        """The summaries of ``labels`` from their moments (a private release with ``epsilon``)."""
        floor = self.covariance_floor
        for label in labels:
            if self.covariance == "within":
                cells = [self._moments[key] for key in self._keys_of(label)]
                summary = within_class_summary(cells, covariance_floor=floor, client=label)
            elif self.epsilon is None:
                summary = ledoit_wolf_summary(
                    self._moments[label], covariance_floor=floor, client=label
                )
            else:
                assert self.clip_norm is not None  # _validate_params: epsilon needs clip_norm
                n = check_client_size(self._moments[label].n, label)
                rng = noise_generator(self.random_state, self.delta, n, label)
                self.releases_[label] = self.releases_.get(label, 0) + 1
                summary = private_summary(
                    self._moments[label],
                    clip_norm=self.clip_norm,
                    sigma=self.noise_scale_,
                    rng=rng,
                    covariance_floor=floor,
                    client=label,
                )
            self.summaries_[label] = summary
        self.clients_ = sorted(self._clients_in(self._moments), key=_label_key)

    def fit(self, X: Any, y: Any = None, *, client: Any = None) -> GaussianSummaryEstimator:
        """Summarise each client's rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows.
        y : array-like of shape (n_samples,), default=None
            Class labels: required with ``covariance="within"``, ignored otherwise.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` means one client.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        self._validate_params()
        with unchanged_on_error(self):  # a rejected fit keeps what was fitted before
            self.noise_scale_ = self._noise_scale()
            self.form_ = self._form_for(X, client)
            if self.form_ == "low-rank":
                self._fit_low_rank(X, client)
            else:
                self._moments = self._client_moments(X, y, client, reset=True, ensure_min_samples=2)
                self.summaries_: dict = {}
                self.releases_: dict = {}
                self._finalise(self._clients_in(self._moments))
        small = [c for c in self.clients_ if self.summaries_[c].n <= self.n_features_in_]
        hint = "; form='low-rank' holds such summaries exactly without an m x m matrix"
        if small:
            warn_once(
                f"{type(self).__name__}: client(s) {shown_labels(small)} hold no more rows than "
                f"the {self.n_features_in_} features (fewest: "
                f"{min(self.summaries_[c].n for c in small)}): their covariance is mostly the "
                "Ledoit-Wolf target, and their maps carry little beyond their means"
                + (hint if self.form_ == "dense" else ""),
                SmallClientWarning,
                stacklevel=2,
            )
        return self

    def _form_for(self, X: Any, client: Any) -> str:
        """The form a fit holds its summaries in: ``form``, with ``"auto"`` resolved.

        ``"auto"`` is ``"low-rank"`` where every client holds no more rows than
        features and the summary has a low-rank form (all rows' covariance, no
        private release, NumPy rows), else ``"dense"``.
        """
        if self.form != "auto":
            return self.form
        if self.covariance != "total" or self.epsilon is not None or is_tensor(X):
            return "dense"
        shape = np.shape(X)
        if len(shape) != 2:
            return "dense"  # the dense path says what is wrong with the rows
        _, codes = check_client_labels(client, shape[0])
        return "low-rank" if codes.size and np.bincount(codes).max() <= shape[1] else "dense"

    def _fit_low_rank(self, X: Any, client: Any) -> None:
        """Each client's summary in factor form, from its rows (``form="low-rank"``)."""
        if is_tensor(X):
            raise TypeError(
                f"{type(self).__name__}(form='low-rank') summarises NumPy rows; "
                "pass X.cpu().numpy(), or use form='dense' for torch tensors"
            )
        X = check_rows(self, X, reset=True, ensure_min_samples=2)
        check_feature_scale(X)
        groups = client_rows(client, X.shape[0])
        for label, rows in groups.items():
            check_client_size(rows.size, label)

        summaries = Parallel(n_jobs=self.n_jobs, prefer="threads")(
            delayed(low_rank_summary)(X[rows], covariance_floor=self.covariance_floor, client=label)
            for label, rows in groups.items()
        )
        if hasattr(self, "_moments"):  # an earlier dense fit's: no power sums back these
            del self._moments
        self.releases_ = {}
        self.summaries_ = dict(zip(groups, summaries, strict=True))
        self.clients_ = sorted(groups, key=_label_key)

    def _check_mergeable(self, method: str, *others: GaussianSummaryEstimator) -> None:
        """Refuse to merge summaries fitted in low-rank form: they carry no moments."""
        for est in (self, *others):
            fitted = getattr(est, "summaries_", {}).values()
            if est.form == "low-rank" or any(s.basis is not None for s in fitted):
                raise ValueError(self._no_moments(method))

    def _has_partial_fit(self) -> bool:
        """``partial_fit`` exists in the dense form only (for ``hasattr``, as scikit-learn's)."""
        if self.form == "low-rank":
            raise AttributeError(self._no_moments("partial_fit"))
        return True

    def _no_moments(self, method: str) -> str:
        return (
            f"{type(self).__name__}(form='low-rank') summarises each client's rows in one fit, "
            f"and its summaries hold no moments: {method} accumulates dense moments, fit with "
            "form='dense'"
        )

    def _cells(self, X: Any, y: Any, client: Any) -> tuple[list, np.ndarray] | None:
        """With ``covariance="within"``, the rows' ``(client, class)`` cells and each row's
        index into them (the moments of a cell are kept under it); ``None`` otherwise (the
        rows are grouped by their clients)."""
        if self.covariance == "total":
            return None
        if y is None:
            raise ValueError(
                f"{type(self).__name__}(covariance='within') summarises class-centred rows: "
                "pass the class labels, fit(X, y, client=...) (it requires y to be passed, "
                "but the target y is None)"
            )
        n = X.shape[0] if hasattr(X, "shape") else len(X)
        y = check_row_labels(y, n)
        labels, codes = check_client_labels(client, n)
        classes, class_codes = np.unique(y, return_inverse=True)
        pairs, pair_of_row = np.unique(
            np.column_stack([codes, class_codes.ravel()]), axis=0, return_inverse=True
        )
        cells = [(labels[i], classes[j].item()) for i, j in pairs.tolist()]
        return cells, pair_of_row.ravel()

    def _clients_in(self, keys: Any) -> list:
        """The clients the moments under ``keys`` belong to (a cell names its client first)."""
        if self.covariance == "total":
            return list(keys)
        return list(dict.fromkeys(client for client, _ in keys))

    def _keys_of(self, client: Any) -> list:
        """The keys of ``client``'s moments: itself, or its cells."""
        if self.covariance == "total":
            return [client]
        return [key for key in self._moments if key[0] == client]

    @available_if(_has_partial_fit)
    def partial_fit(self, X: Any, y: Any = None, *, client: Any = None) -> GaussianSummaryEstimator:
        """Add a chunk of rows; summaries are updated exactly.

        A client may appear with a single row in one chunk; a summary is
        available once it has two rows in total.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A chunk of rows.
        y : array-like of shape (n_samples,), default=None
            Class labels: required with ``covariance="within"``, ignored otherwise.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` means one client.

        Returns
        -------
        self : object
            The updated estimator.
        """
        self._validate_params()
        self._check_mergeable("partial_fit")  # summaries fitted in low-rank form, then dense
        with unchanged_on_error(self):  # a rejected chunk stores nothing
            self.noise_scale_ = self._noise_scale()
            self.form_ = "dense"  # moments accumulate densely
            first = not hasattr(self, "_moments")
            if first:
                self._moments = {}
                self.summaries_ = {}
                self.releases_ = {}
            self._absorb(self._client_moments(X, y, client, reset=first))
        return self

    def _absorb(self, new: dict) -> None:
        for key, mom in new.items():
            old = self._moments.get(key)
            self._moments[key] = mom if old is None else old.merge(mom)
        ready = [
            label
            for label in self._clients_in(new)
            if sum(self._moments[key].n for key in self._keys_of(label)) >= 2
        ]
        self._finalise(ready)

    def merge(self, *others: GaussianSummaryEstimator) -> GaussianSummaryEstimator:
        """Combine estimators fitted on disjoint rows into a new fitted one.

        The result equals one ``fit`` on the union of the rows (up to
        floating-point rounding): per-worker results merge exactly.

        Parameters
        ----------
        *others : GaussianSummaryEstimator
            Fitted estimators with this one's parameters and number of features.

        Returns
        -------
        merged : GaussianSummaryEstimator
            A new fitted estimator; this one and ``others`` are left unchanged.
        """
        check_is_fitted(self, "summaries_")
        self._check_mergeable("merge", *others)
        merged = copy.copy(self)  # with dicts of its own, below: this one is left unchanged
        merged._validate_params()
        merged.noise_scale_ = merged._noise_scale()
        merged._moments = dict(self._moments)
        merged.summaries_ = dict(self.summaries_)
        merged.releases_ = dict(self.releases_)
        for other in others:
            check_is_fitted(other, "summaries_")
            if other.n_features_in_ != self.n_features_in_:
                raise ValueError(
                    f"cannot merge an estimator fitted on {other.n_features_in_} "
                    f"features into one fitted on {self.n_features_in_}"
                )
            merged._absorb(other._moments)
        return merged


def _label_key(label: Any) -> tuple:
    return (label is not None, label if label is not None else 0)
