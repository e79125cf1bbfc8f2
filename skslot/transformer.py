"""SLOT-Align as a scikit-learn transformer."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from functools import partial
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_is_fitted

from ._backend import as_host_rows
from ._doc_link import DocLinkMixin
from ._linalg import cholesky_factor
from ._param_validation import Interval, Options, ParameterValidationMixin
from ._validation import (
    ClientTransformerMixin,
    check_in_range,
    check_row_labels,
    check_rows,
    client_rows,
)
from .barycenter import BuresBarycenter, SingleClientWarning, as_summary_list, warn_single_client
from .defaults import CLIENT_TAU, LABEL_MIX, MEAN_TAU, default_tau
from .exceptions import SmallClientWarning, UnknownClientWarning, shown_labels, warn_once
from .gaussian import GaussianSummary
from .label_mix import LABEL_MIXES, domain_offsets
from .label_shift import CLIENT_TAU_RULES, class_sums, label_shift_distances
from .maps import GaussianMap, with_mean_image
from .summary import GaussianSummaryEstimator

if TYPE_CHECKING:  # the output types, without importing pandas or torch at run time
    import pandas
    import torch

__all__ = ["SLOTTransformer"]

#: A label no client has (an unseen client's map).
_NO_CLIENT = object()

UNKNOWN_CLIENT = ("fit", "error", "identity")


class SLOTTransformer(
    DocLinkMixin, ParameterValidationMixin, ClientTransformerMixin, BaseEstimator
):
    """Align each client's features to a shared reference Gaussian (SLOT-Align).

    ``fit`` summarises every client (mean, Ledoit-Wolf covariance), builds the
    reference ``N(mu_b, Sigma_b)`` (weighted mean, Bures-Wasserstein
    barycenter) and each client's optimal-transport map ``T_k(x) = A_k x + b_k``.
    ``transform`` moves each row of client ``k`` along its client's
    geodesic: its mean a fraction ``mean_tau`` of the way to its destination,
    its covariance a fraction ``tau_k`` along the Bures geodesic::

        T_k(x) = mu_k + mean_tau (nu_k - mu_k) + ((1 - tau_k) I + tau_k A_k) (x - mu_k).

    **Whose label mix** (``label_mix``) decides the destination ``nu_k`` of
    the client's mean.  A client's mean is its domain *and* its label mix;
    when each client's future rows follow its own mix (a hospital's
    prevalence), the second must stay.  With ``label_mix="client"`` (the
    default) the client's domain offset ``delta_k`` is measured within
    classes (:func:`~skslot.label_mix.domain_offsets`, a two-way fit of the
    clients' class means) and ``nu_k = mu_k - delta_k``: the classes of every
    client meet, its label mix stays; its covariance stays too by default
    (``tau`` 0).  With ``label_mix="federation"`` (every class of each
    client's domain served, the paper's test) ``nu_k = mu_b``, the reference
    mean, and by default ``tau_k = 0.6 d_k`` with ``d_k`` the client's label
    shift (``client_tau``).  Pair it with the same ``label_mix`` of the head
    (:mod:`skslot.label_mix`); docs/choosing.md gives the measured cost of
    each wrong choice.  The paper's geodesic,
    ``T_k^tau(x) = (1 - tau) x + tau (A_k x + b_k)`` for every client, is
    ``SLOTTransformer(tau=0.4, mean_tau=None, client_tau="uniform",
    label_mix="federation")``.

    Parameters
    ----------
    tau : float or None, default=None
        Fraction of the covariance's transport (and of the mean's, with
        ``mean_tau=None``), in ``[0, 1]``: 0 leaves the covariance alone, 1
        maps it onto the reference's.  ``None``: 0 with
        ``label_mix="client"``, 0.6 with ``"federation"``
        (:func:`skslot.defaults.default_tau`; :attr:`tau_value`).  Changing it
        after ``fit`` needs no refit.
    mean_tau : float or None, default=1.0
        Fraction of the mean's transport, in ``[0, 1]``, the same for every
        client: each client's mean moves ``mean_tau`` of the way to its
        destination (``label_mix``) and its rows about it follow the covariance's geodesic
        at ``tau`` (:meth:`~skslot.maps.GaussianMap.with_mean_fraction`).
        ``None`` moves the mean by the client's ``tau`` too (the paper's
        geodesic, scaled by ``client_tau`` like it); ``mean_tau=1, tau=0`` is
        per-client centring onto that destination, ``mean_tau=0, tau=1,
        client_tau="uniform"`` CORAL-style alignment of the covariances
        alone.  Changing it after ``fit`` needs no refit.
    client_tau : {"uniform", "label-shift"}, default="label-shift"
        How each client's fraction follows from ``tau``: the same for every
        client (the paper's), or ``tau * d_k`` with ``d_k`` the
        total-variation distance between client ``k``'s class proportions
        and the federation's (:mod:`skslot.label_shift`: a client with the
        federation's label mix keeps its covariance; ``fit`` then needs
        ``y``; without labels every client moves ``tau``, with a warning).
    label_mix : {"client", "federation"}, default="client"
        Whose label mix the aligned rows keep: each client's own (its mean's
        domain offset measured within classes; ``fit`` needs ``y`` for it,
        and without labels falls back to ``"federation"``'s mean with a
        warning), or the federation's (each client's whole mean moved to
        the reference mean).
    unknown_client : {"fit", "error", "identity"}, default="fit"
        What ``transform`` does with a client label not seen in ``fit``:
        estimate that client's Gaussian from the rows given to ``transform``
        and map it to the reference (a client joining later, as in a
        federation, and the held-out clients of grouped cross-validation;
        the fitted state is not changed; it needs at least 2 rows of that
        client in one call), raise, or leave its rows unchanged.  A new
        client's labels are unknown, so its label mix is taken as the
        federation's: its mean moves to the reference mean, and its
        covariance only where no label-aware rule applies
        (``client_tau="uniform"``, ``covariance="total"``).
    covariance : {"total", "within"}, default="total"
        The covariance each client's summary transports (see
        :class:`GaussianSummaryEstimator`): of all its rows (the paper's), or
        of its class-centred rows (label-aware: the client's label mix no
        longer enters the map; ``fit`` then needs ``y``).
    barycenter : BuresBarycenter, default=None
        The server's step, unfitted: it summarises each client (its
        ``covariance_floor``, ``chunk_size``, ``form`` and ``n_jobs`` are the
        summaries' too) and builds the reference (its ``weights``,
        ``solver``, ``tol``, ``max_iter``, ...).  ``None``:
        ``BuresBarycenter()``.  A clone is fitted (:attr:`barycenter_`);
        search its settings as ``barycenter__solver`` and the like.  Its
        ``form`` (``"auto"``, the default) keeps the summaries, the
        reference and the maps in factor form where every client holds no
        more rows than features and the settings allow it (``covariance="total"``,
        NumPy rows): no ``m x m`` matrix is formed, and ``transform`` costs
        ``O(n m d)``; the same alignment as the dense form to rounding.

    Attributes
    ----------
    summaries_ : dict
        Client label to :class:`~skslot.GaussianSummary` (in factor form with
        ``form="low-rank"``).
    reference_ : GaussianSummary
        The barycenter reference (in factor form on the low-rank path).
    maps_ : dict
        Client label to its full (``tau = 1``) :class:`~skslot.maps.GaussianMap`
        (in factor form on the low-rank path).
    tau_scales_ : dict
        Client label to the factor of ``tau`` its rows move by: 1 with
        ``client_tau="uniform"``, ``d_k`` with ``"label-shift"``.
    domain_offsets_ : dict or None
        Client label to its domain offset measured within classes, where
        ``fit`` had labels (``None`` otherwise); used with
        ``label_mix="client"``, so changing ``label_mix`` after ``fit`` needs
        no refit.
    clients_ : list
        Client labels seen in ``fit``.
    barycenter_ : BuresBarycenter or None
        The fitted server step (``None`` when built by :meth:`from_reference`).
    n_iter_ : int
        Barycenter iterations (0 when built by :meth:`from_reference`).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)

    See Also
    --------
    GaussianSummaryEstimator, BuresBarycenter

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import SLOTTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(0, 1, (200, 2)), rng.normal(5, 3, (200, 2))])
    >>> client = np.repeat([0, 1], 200)
    >>> y = np.tile([0, 1], 200)
    >>> slot = SLOTTransformer(label_mix="federation").fit(X, y, client=client)
    >>> Z = slot.transform(X, client=client)
    >>> np.round(Z[:200].mean(0) - Z[200:].mean(0), 8) + 0.0  # the means meet
    array([0., 0.])

    Each client's own label mix kept: client 1 is client 0 moved by 4 and
    holds class 1 three times as often; its class means meet client 0's,
    and its mean stays apart by what its label mix says.

    >>> means = np.array([[0.0, 0.0], [6.0, 0.0]])
    >>> y = np.r_[np.tile([0, 1], 100), np.repeat([0, 1, 1, 1], 50)]
    >>> X = means[y] + rng.normal(0, 1, (400, 2)) + 4.0 * (client == 1)[:, None]
    >>> Z = SLOTTransformer().fit(X, y, client=client).transform(X, client=client)
    >>> [np.round(Z[(client == 1) & (y == c)].mean(0) - Z[(client == 0) & (y == c)].mean(0))
    ...  + 0.0 for c in (0, 1)]
    [array([0., 0.]), array([0., 0.])]
    >>> np.round(Z[client == 1].mean(0) - Z[client == 0].mean(0), 1) + 0.0  # 6 x (0.75 - 0.5)
    array([1.5, 0. ])

    The paper's geodesic:

    >>> paper = SLOTTransformer(
    ...     tau=1.0, mean_tau=None, client_tau="uniform", label_mix="federation"
    ... )
    >>> Z = paper.fit_transform(X, client=client)  # no labels needed
    >>> np.round(Z[:200].std(0) / Z[200:].std(0), 1)  # the spreads meet too (up to shrinkage)
    array([1., 1.])
    """

    __metadata_request__fit = {"client": True}
    __metadata_request__transform = {"client": True}
    _fits_unknown = "estimate a new client's map from its rows"

    _parameter_constraints: ClassVar[dict] = {
        "tau": [Interval(Real, 0.0, 1.0, closed="both"), None],
        "mean_tau": [Interval(Real, 0.0, 1.0, closed="both"), None],
        "client_tau": [Options(CLIENT_TAU_RULES)],
        "label_mix": [Options(LABEL_MIXES)],
        "unknown_client": [Options(UNKNOWN_CLIENT)],
        "covariance": GaussianSummaryEstimator._parameter_constraints["covariance"],
        "barycenter": [BuresBarycenter, None],
    }

    def __init__(
        self,
        tau: float | None = None,
        *,
        mean_tau: float | None = MEAN_TAU,
        client_tau: str = CLIENT_TAU,
        label_mix: str = LABEL_MIX,
        unknown_client: str = "fit",
        covariance: str = "total",
        barycenter: BuresBarycenter | None = None,
    ) -> None:
        self.tau = tau
        self.mean_tau = mean_tau
        self.client_tau = client_tau
        self.label_mix = label_mix
        self.unknown_client = unknown_client
        self.covariance = covariance
        self.barycenter = barycenter

    def _anchored(
        self, full: GaussianMap, source: GaussianSummary, label: Any = _NO_CLIENT
    ) -> GaussianMap:
        """A client's full map with its mean moved by ``mean_tau`` (as it is without).

        With ``label_mix="client"`` and the client's domain offset measured,
        the mean's destination is the client's mean less its offset instead
        of the reference mean.
        """
        offsets = getattr(self, "domain_offsets_", None)
        if self.label_mix == "client" and offsets is not None and label in offsets:
            full = with_mean_image(full, source.mean, source.mean - offsets[label])
        return full.with_mean_fraction(self.mean_tau, source.mean)

    def _summary_estimator(self, covariance: str | None = None) -> GaussianSummaryEstimator:
        """The clients' summaries as the barycenter's settings make them."""
        return self.barycenter_estimator()._summary_estimator(covariance or self.covariance)

    def _full_map(self, summary: GaussianSummary) -> GaussianMap:
        """A client's full (``tau = 1``) map onto the fitted reference, in the reference's form."""
        return GaussianMap.optimal_transport(
            summary, self.reference_, target_factor=self._reference_factor
        )

    def barycenter_estimator(self) -> BuresBarycenter:
        """The (unfitted) server step: a clone of ``barycenter``, or ``BuresBarycenter()``.

        What the server of a federated run fits on the clients' summaries.

        Returns
        -------
        barycenter : BuresBarycenter
            A new, unfitted estimator.
        """
        return BuresBarycenter() if self.barycenter is None else clone(self.barycenter)

    def fit(self, X: Any, y: Any = None, *, client: Any = None) -> SLOTTransformer:
        """Summarise the clients, build the reference and the maps.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows of every client.
        y : array-like of shape (n_samples,), default=None
            Class labels: used (and required) with ``covariance="within"``
            or ``client_tau="label-shift"``, ignored otherwise.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client label of each row (``None``: one client).

        Returns
        -------
        self : object
            The fitted transformer.
        """
        self._validate_params()
        if y is None and (self.label_mix == "client" or self.client_tau == "label-shift"):
            warnings.warn(
                f"{type(self).__name__}.fit without y: no client's label mix can be measured, "
                "so each client's mean moves to the reference mean (its label mix with it) "
                "and every client moves tau (pass y to measure each client's domain offset "
                "within classes and its label shift)",
                UserWarning,
                stacklevel=2,
            )
        X = check_rows(self, X, reset=True, ensure_min_samples=2)
        bary = self.barycenter_estimator()
        with warnings.catch_warnings():  # warned below, in this estimator's name
            warnings.simplefilter("ignore", SingleClientWarning)
            if self.tau_value == 0:  # no covariance moves: a small client's is not used
                warnings.simplefilter("ignore", SmallClientWarning)
            if self.covariance == "total":
                bary.fit(X, client=client)  # on a tensor's device when X is one
            else:  # label-aware: the clients' within-class summaries
                summaries = self._summary_estimator().fit(X, y, client=client).summaries_
                bary.fit(list(summaries.values()))
        if len(bary.clients_) == 1:
            warn_single_client(type(self).__name__)
        self.summaries_ = dict(zip(bary.clients_, bary.summaries_, strict=True))
        self.reference_ = bary.reference_
        self.maps_ = bary.maps()
        self.clients_ = bary.clients_
        self._label_aware_fit(X, y, client)
        self.barycenter_: BuresBarycenter | None = bary
        self.n_iter_ = bary.n_iter_
        self._reference_factor = bary._result.factor if bary.form_ == "dense" else None
        return self

    def _label_aware_fit(self, X: Any, y: Any, client: Any) -> None:
        """``tau_scales_`` (see ``client_tau``) and ``domain_offsets_`` (see ``label_mix``),
        both from each fitted client's class counts and sums."""
        self.tau_scales_ = dict.fromkeys(self.clients_, 1.0)
        self.domain_offsets_ = None
        if y is None:
            return
        y = check_row_labels(y, X.shape[0])
        classes = np.unique(y)
        rows = np.asarray(as_host_rows(X), dtype=np.float64)
        mine = client_rows(client, X.shape[0])
        parts = [class_sums(rows[mine[c]], y[mine[c]], classes) for c in self.clients_]
        counts, sums = np.stack([n for n, _ in parts]), np.stack([s for _, s in parts])
        if self.client_tau == "label-shift":
            self.tau_scales_ = label_shift_distances(dict(zip(self.clients_, counts, strict=True)))
        self.domain_offsets_ = dict(zip(self.clients_, domain_offsets(counts, sums), strict=True))

    def _given_scales(self, tau_scales: Mapping[Any, float] | None) -> dict:
        """Each client's factor of ``tau`` as given to :meth:`from_reference`."""
        if tau_scales is None:
            if self.client_tau == "label-shift":
                raise ValueError(
                    "from_reference(client_tau='label-shift') needs tau_scales: each client's "
                    "factor of tau, from the federation's class counts"
                )
            return dict.fromkeys(self.clients_, 1.0)
        missing = [label for label in self.clients_ if label not in tau_scales]
        if missing:
            raise ValueError(f"tau_scales has no factor for clients {missing}")
        return {
            label: check_in_range(f"tau_scales[{label!r}]", float(tau_scales[label]), 0.0, 1.0)
            for label in self.clients_
        }

    @classmethod
    def from_reference(
        cls,
        reference: GaussianSummary,
        summaries: GaussianSummary | list | Mapping,
        *,
        tau: float | None = None,
        tau_scales: Mapping[Any, float] | None = None,
        domain_offsets: Mapping[Any, Any] | None = None,
        **params: Any,
    ) -> SLOTTransformer:
        """A fitted transformer from the protocol objects of a deployment.

        A client holds only its own summary and the reference received from
        the server; no other client's data or summary is needed.

        Parameters
        ----------
        reference : GaussianSummary
            The server's reference (``BuresBarycenter.reference_``); the maps
            are in its form.
        summaries : summary, list or dict of summaries
            This party's own summary (or several, keyed by client label), each
            a :class:`~skslot.GaussianSummary` (in either form).
        tau : float or None, default=None
            Fraction of the covariance's transport, in ``[0, 1]`` (``None``:
            the default of ``label_mix``).
        tau_scales : dict, optional
            Client label to the factor of ``tau`` its rows move by (what the
            server computed from the class counts, with
            ``client_tau="label-shift"``); default 1 for every client.
        domain_offsets : dict, optional
            Client label to its domain offset measured within classes (what
            the server computed from the clients' class sums,
            :func:`~skslot.label_mix.domain_offsets`), for
            ``label_mix="client"``; a client without one moves its mean to the
            reference mean, as with ``label_mix="federation"``.
        **params
            Other constructor parameters.

        Returns
        -------
        transformer : SLOTTransformer
            Fitted for the clients of ``summaries`` (``barycenter_`` is ``None``).

        Raises
        ------
        TypeError
            If ``reference`` is not a summary.
        ValueError
            If a parameter is invalid, or ``tau_scales`` lacks a client or has
            a factor outside ``[0, 1]``.

        Examples
        --------
        >>> import numpy as np
        >>> from skslot import BuresBarycenter, GaussianSummaryEstimator, SLOTTransformer
        >>> rng = np.random.default_rng(0)
        >>> X_a, X_b = rng.normal(0, 1, (50, 3)), rng.normal(2, 2, (80, 3))
        >>> s_a = GaussianSummaryEstimator().fit(X_a, client="a").summaries_["a"]
        >>> s_b = GaussianSummaryEstimator().fit(X_b, client="b").summaries_["b"]
        >>> reference = BuresBarycenter().fit([s_a, s_b]).reference_  # server
        >>> # the server sends each client the reference and its label-shift factor
        >>> slot_a = SLOTTransformer.from_reference(reference, s_a, tau_scales={"a": 0.3})
        >>> slot_a.transform(X_a).shape  # client "a" aligns its own rows
        (50, 3)
        """
        self = cls(tau=tau, **params)
        self._validate_params()
        if not isinstance(reference, GaussianSummary):
            raise TypeError(f"reference must be a GaussianSummary, got {type(reference).__name__}")
        if isinstance(summaries, GaussianSummary):
            self.summaries_ = {summaries.client: summaries}
        else:  # labelled by client, by position when unlabelled; duplicates rejected
            self.summaries_ = dict(zip(*as_summary_list(summaries), strict=True))
        self.reference_ = reference
        self._reference_factor = (
            None if reference.basis is not None else cholesky_factor(reference.covariance)
        )
        self.maps_ = {label: self._full_map(s) for label, s in self.summaries_.items()}
        self.clients_ = list(self.summaries_)
        self.n_features_in_ = reference.dimension
        self.tau_scales_ = self._given_scales(tau_scales)
        self.domain_offsets_ = self._given_offsets(domain_offsets)
        self.barycenter_ = None
        self.n_iter_ = 0
        return self

    def _given_offsets(self, offsets: Mapping[Any, Any] | None) -> dict | None:
        """Each client's domain offset as given to :meth:`from_reference`, checked."""
        if offsets is None:
            return None
        checked = {}
        for label in (label for label in self.clients_ if label in offsets):
            offset = np.asarray(offsets[label], dtype=np.float64)
            if offset.shape != (self.n_features_in_,) or not np.all(np.isfinite(offset)):
                raise ValueError(
                    f"domain_offsets[{label!r}] must be {self.n_features_in_} finite values"
                )
            checked[label] = offset
        return checked

    def _map_for(self, label: Any, X: np.ndarray | None) -> GaussianMap:
        """The map of ``label``'s rows; ``X``: those rows, for a client ``fit`` did not see."""
        full = self.maps_.get(label)
        if full is None:
            assert X is not None  # the callers pass the rows of a client not in maps_
            if not self._fits_new_client(label, X):
                return GaussianMap.identity(X.shape[1], form=self.reference_.form)
            with warnings.catch_warnings():  # transform's own warning names the new client
                warnings.simplefilter("ignore", SmallClientWarning)
                summary = self._summary_estimator(covariance="total")
                summary = summary.fit(X, client=label).summaries_[label]
            # its label mix is unknown, so taken as the federation's: the mean moves to the
            # reference mean, and the covariance only where a rule needs no labels
            label_aware = self.client_tau == "label-shift" or self.covariance == "within"
            tau = 0.0 if label_aware else self.tau_value
            return self._anchored(self._full_map(summary), summary).geodesic(tau)
        scale = self.tau_scales_[label]
        return self._anchored(full, self.summaries_[label], label).geodesic(self.tau_value * scale)

    @property
    def tau_value(self) -> float:
        """``tau``, or where it is ``None`` the default of ``label_mix``
        (:func:`skslot.defaults.default_tau`: 0 for the client's own mix, 0.6 for the
        federation's)."""
        return default_tau(self.label_mix) if self.tau is None else float(self.tau)

    def client_map(self, client: Any) -> GaussianMap:
        """The affine map ``transform`` applies to the rows of ``client``, a fitted client.

        Its fractions are this transformer's (``tau`` scaled by the client's
        factor, ``mean_tau``): what a server pushes a client's statistics
        through (:meth:`~skslot.maps.GaussianMap.push_moments`).

        Parameters
        ----------
        client : int or str
            A client label seen in ``fit``.

        Returns
        -------
        map : GaussianMap
            ``x -> A x + b`` for the client's rows (in factor form on the
            low-rank path).
        """
        check_is_fitted(self, "maps_")
        if client not in self.maps_:
            raise ValueError(
                f"client {client!r} was not seen during fit (fitted clients: {self.clients_})"
            )
        return self._map_for(client, None)

    def _client_transform(self, label: Any, X: np.ndarray | None) -> Callable[[Any], Any]:
        """The function ``transform`` applies to the rows of ``label`` (see ``_map_for``)."""
        chunk_size = (self.barycenter or BuresBarycenter()).chunk_size
        return partial(self._map_for(label, X).apply, chunk_size=chunk_size)

    def transform(
        self, X: Any, *, client: Any = None
    ) -> np.ndarray | pandas.DataFrame | torch.Tensor:
        """Apply each row's client map ``T_k^tau``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to align.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.  ``None`` is allowed when ``fit`` saw a single
            client.

        Returns
        -------
        X_aligned : ndarray, DataFrame or tensor of shape (n_samples, n_features)
            In ``X``'s floating dtype (float32 stays float32): a tensor on
            ``X``'s device for a tensor ``X``, a DataFrame with
            ``set_output(transform="pandas")``, else an ndarray.
        """
        check_is_fitted(self, "maps_")
        X_aligned, unknown = self._transform_by_client(check_rows(self, X, reset=False), client)
        if unknown:  # named once per call
            what = "their maps are estimated from their rows here"
            if self.unknown_client == "identity":
                what = "their rows are left unchanged"
            warn_once(
                f"{type(self).__name__}.transform: client(s) {shown_labels(unknown)} were not "
                f"seen during fit{self._near_miss(unknown)}: {what} "
                f"(unknown_client={self.unknown_client!r})",
                UnknownClientWarning,
                stacklevel=2,
            )
        return X_aligned

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # the label-aware options read the class labels in fit
        tags.target_tags.required = self.covariance == "within"
        return tags
