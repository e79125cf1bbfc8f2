"""What every one-shot federated head shares: the client/server split of ``fit``.

A head is fitted in one round: each client computes *statistics* from its own
rows (:meth:`OneShotHead.client_statistics`), the server combines them
(:meth:`OneShotHead.fit_from_statistics`).  ``fit(X, y, client=...)`` runs
exactly these two steps in-process, so a real deployment and a scikit-learn
Pipeline execute the same code.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import as_host_rows
from .._doc_link import DocLinkMixin
from .._param_validation import InstanceOf, ParameterValidationMixin
from .._validation import (
    check_classification_data,
    check_client_labels,
    check_host_rows,
    check_non_negative_int,
    spawn_seeds,
)
from ..label_mix import ClientMixMixin
from ..maps import GaussianMap
from ..wire import message_bytes
from ._fitting import LOCAL_TRAINING, HeadStrategy
from ._linear_scores import UNSCORED, LinearScores


class OneShotHead(
    DocLinkMixin, ParameterValidationMixin, ClientMixMixin, ClassifierMixin, BaseEstimator
):
    """Base class of the one-shot federated classifiers.

    Subclasses implement :meth:`_client_statistics` (a client's exact
    statistics) and :meth:`_fit_from_statistics`, and declare their
    parameters' constraints in ``_parameter_constraints``; everything else
    (validation, the global class set, client routing) lives here.  A head
    knows nothing of privacy: a private client's release wraps its statistics
    (:mod:`skslot.privacy`).  The parameters are validated at every
    entry point (``fit``, :meth:`client_statistics`,
    :meth:`fit_from_statistics`, :meth:`decode_statistics`) before any work;
    a registry or a deployment calls ``_validate_params()`` when it builds the
    head, before contacting any client.
    """

    __metadata_request__decision_function = {"client": True}

    #: The class of what :meth:`client_statistics` returns: its instances have
    #: ``n_features`` and ``to_arrays()``, the class
    #: ``from_arrays(arrays, classes=, n_features=, n_samples=)`` (which decodes and checks a
    #: received message; a head may pass more options, :meth:`_decode_options`).
    statistics_type: ClassVar[Any]
    #: The shape of the one-shot protocol this head needs (:mod:`skslot.heads._fitting`):
    #: local heads trained on aligned rows, unless the statistics are moments an affine
    #: map acts on exactly, so the server aligns them itself
    #: (``fit_from_statistics(..., maps=...)``, a :class:`StatisticsStrategy`).
    strategy: ClassVar[HeadStrategy] = LOCAL_TRAINING
    #: Parameters used only by the server step: changing one needs no new
    #: client statistics (what a federated search may tune for free).
    server_params: ClassVar[tuple[str, ...]] = ()

    def fit(self, X: Any, y: Any, *, client: Any = None) -> OneShotHead:
        """Fit the head as one federated round over the clients in ``client``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows of every client.
        y : array-like of shape (n_samples,)
            The class labels.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (``None``: one client).

        Returns
        -------
        self : object
            The fitted head.
        """
        return self._fit_rows(X, y, client)

    def _fit_rows(
        self, X: Any, y: Any, client: Any, statistics: Callable[..., Any] | None = None
    ) -> OneShotHead:
        """:meth:`fit` with each client's statistics made by
        ``statistics(X_k, y_k, classes, seed, position, label)``: what a wrapper makes in
        place of the head's own (:class:`skslot.privacy.PrivateClassifier`; ``None``: the
        head's own)."""
        self._validate_params()
        X, y, classes = check_classification_data(self, X, y)
        labels, codes = check_client_labels(client, X.shape[0])
        stats = []
        for i, seed in enumerate(_client_seeds(self, len(labels))):
            rows = codes == i if len(labels) > 1 else slice(None)
            if statistics is None:
                stats.append(self._client_statistics(X[rows], y[rows], classes, seed))
            else:
                stats.append(statistics(X[rows], y[rows], classes, seed, i, labels[i]))
        self._record_counts(y, codes, labels, classes, stacklevel=3)
        self._fit_from_statistics(stats, classes, None)
        self.upload_bytes_ = _upload_bytes(stats)
        return self

    def client_statistics(
        self, X: Any, y: Any, classes: ArrayLike, *, client_index: int = 0
    ) -> Any:
        """What one client sends: statistics of its own rows.

        Parameters
        ----------
        X : array-like of shape (n_k, n_features)
            This client's rows (aligned features, in SLOT-Align).
        y : array-like of shape (n_k,)
        classes : array-like
            The global class set agreed by all parties (a client may lack some).
        client_index : int, default=0
            Position of this client among all clients in sorted label order;
            a randomised head draws this client's seed from ``random_state``
            at that position, exactly as ``fit`` does.

        Returns
        -------
        statistics : object
            This client's statistics, of type :attr:`statistics_type`.

        Raises
        ------
        ValueError
            If a label of ``y`` is not in ``classes`` or ``client_index`` is
            not a non-negative int.
        """
        self._validate_params()
        X = np.asarray(check_host_rows(self, X, reset=True))
        class_set = np.asarray(classes)
        y = np.asarray(as_host_rows(y))
        missing = np.setdiff1d(y, class_set)
        if missing.size:
            raise ValueError(f"labels {missing.tolist()} are not in the global class set")
        seed = _client_seeds(self, check_non_negative_int("client_index", client_index) + 1)[-1]
        return self._client_statistics(X, y, class_set, seed)

    def fit_from_statistics(
        self, statistics: Sequence, classes: ArrayLike, *, maps: Sequence[GaussianMap] | None = None
    ) -> OneShotHead:
        """Server step: build the global head from the clients' statistics.

        Parameters
        ----------
        statistics : sequence
            One client's statistics each (what :meth:`client_statistics` returns).
        classes : array-like
            The global class set.
        maps : sequence of GaussianMap, optional
            One affine map per client, applied by the server to that client's
            statistics (statistics of unaligned rows, pushed exactly through
            the client's ``T_k^tau``); a map in factor form
            (what a
            :class:`~skslot.SLOTTransformer` holds in factor form) is pushed as
            its ``m x m`` matrix, of the size of the statistics' Gram matrices.  Only heads with
            a :class:`~skslot.heads._fitting.StatisticsStrategy` (FedCGS, FedPFT)
            accept it.

        Returns
        -------
        self : object
            The fitted head.
        """
        self._validate_params()
        if not statistics:
            raise ValueError("no client statistics received")
        class_set = np.asarray(classes)
        dims = {int(stat.n_features) for stat in statistics}
        if len(dims) != 1:
            raise ValueError(f"client statistics have different dimensions: {sorted(dims)}")
        dense_maps = None
        if maps is not None:
            if not self.strategy.uploads_statistics:
                raise TypeError(
                    f"{type(self).__name__} trains on aligned rows: its statistics cannot be "
                    "aligned by the server (send the reference to the clients instead)"
                )
            dense_maps = [t.dense() for t in maps]
            if len(dense_maps) != len(statistics):
                raise ValueError(
                    f"{len(dense_maps)} maps for the statistics of {len(statistics)} clients"
                )
            if any(t.linear.shape != (*dims, *dims) for t in dense_maps):
                raise ValueError(f"maps must act on dimension {next(iter(dims))}")
        (self.n_features_in_,) = dims
        self.client_class_counts_ = {}
        self.class_counts_ = _federation_counts(statistics, class_set)
        self._fit_from_statistics(list(statistics), class_set, dense_maps)
        self.upload_bytes_ = _upload_bytes(statistics)
        return self

    def with_client_counts(self, counts: Mapping[Any, Any]) -> OneShotHead:
        """Record clients' class counts, for predicting their rows with their own label mix.

        A head fitted from statistics knows no client's label mix; in a
        deployment each client holds its own counts and passes them here
        (nothing is sent for it).  Returns ``self``.

        Parameters
        ----------
        counts : mapping of client label to array-like of shape (n_classes,)
            Training rows of each class of ``classes_``, by client.

        Returns
        -------
        self : object
        """
        check_is_fitted(self, "classes_")
        C = self.classes_.shape[0]
        checked = {}
        for label, row in counts.items():
            row = np.asarray(row)
            if row.shape != (C,) or not np.issubdtype(row.dtype, np.integer) or np.any(row < 0):
                raise ValueError(
                    f"client {label!r}'s class counts must be {C} non-negative integers, "
                    f"got an array of dtype {row.dtype} and shape {row.shape}"
                )
            checked[label] = row.astype(np.int64)
        self.client_class_counts_ = {**getattr(self, "client_class_counts_", {}), **checked}
        if getattr(self, "class_counts_", None) is None:
            self.class_counts_ = (
                sum(checked.values(), np.zeros(C, dtype=np.int64)) if checked else None
            )
        return self

    def decode_statistics(
        self,
        arrays: Mapping[str, Any],
        *,
        classes: ArrayLike,
        n_features: int,
        n_samples: int | None = None,
    ) -> Any:
        """Decode and validate one client's statistics received as named arrays.

        The inverse of ``statistics.to_arrays()``, for a transport between
        parties.  Nothing is unpickled; names, shapes, dtypes, finiteness and
        internal consistency are checked before the result can reach
        :meth:`fit_from_statistics`.

        Parameters
        ----------
        arrays : mapping of str to ndarray
            The received message.
        classes : array-like
            The global class set the server sent to the clients.
        n_features : int
            The dimension of the features.
        n_samples : int, optional
            Rows the client announced earlier (in its summary); its
            statistics must account for exactly (at most, for FedPFT) as many.

        Returns
        -------
        statistics : object
            The client's statistics, of type :attr:`statistics_type`.

        Raises
        ------
        StatisticsFormatError
            If anything in the message is missing, malformed or inconsistent.
        """
        self._validate_params()
        return self.statistics_type.from_arrays(
            arrays,
            classes=np.asarray(classes),
            n_features=n_features,
            n_samples=n_samples,
            **self._decode_options(),
        )

    def _decode_options(self) -> dict:
        """Head parameters a decoder needs besides the shapes (none by default)."""
        return {}

    def linear_scores(self) -> LinearScores:
        """The fitted head as linear class scores ``X W^T + b``, ready to send.

        ``linear_scores().predict(X)`` equals ``predict(X)``.

        Returns
        -------
        scores : LinearScores
            The classes, ``W`` and ``b``; with ``label_mix="client"`` also the
            federation's class proportions and the prior the scores embed,
            so that each client predicts with its own label mix
            (``linear_scores().predict(X, class_counts)``).

        Raises
        ------
        TypeError
            If the head's decision function is not linear.
        """
        check_is_fitted(self, "classes_")
        coef, intercept = self._linear_parts()
        federation = self._federation_mix()
        if federation is None:
            return LinearScores(self.classes_, coef, intercept)
        pi = federation / federation.sum()
        embedded = self._embedded_prior()
        if embedded is None:
            embedded = np.log(np.where(pi > 0, pi, 1.0))
        return LinearScores(self.classes_, coef, intercept, pi, np.where(pi > 0, embedded, 0.0))

    def untrained_classes(self) -> np.ndarray:
        """The classes of ``classes_`` no client's rows trained: the head never predicts them.

        A linear head scores them :data:`~skslot.heads.UNSCORED`; another
        knows them by the federation's class counts.

        Returns
        -------
        classes : ndarray
            A subset of ``classes_``, empty when every class was trained.
        """
        check_is_fitted(self, "classes_")
        try:
            _, intercept = self._linear_parts()
        except TypeError:
            counts = getattr(self, "class_counts_", None)
            if counts is None:
                return self.classes_[:0]
            return self.classes_[np.asarray(counts) <= 0]
        return self.classes_[intercept <= UNSCORED]

    def _linear_parts(self) -> tuple[np.ndarray, np.ndarray]:
        raise TypeError(f"{type(self).__name__} has no linear decision function")

    @abstractmethod
    def _client_statistics(
        self, X: np.ndarray, y: np.ndarray, classes: np.ndarray, seed: int | None
    ) -> Any: ...

    @abstractmethod
    def _fit_from_statistics(
        self, statistics: list, classes: np.ndarray, maps: list[GaussianMap] | None
    ) -> None: ...

    @abstractmethod
    def _scores(self, X: np.ndarray) -> np.ndarray:
        """Class scores of shape (n_samples, n_classes), larger is more likely."""

    def _row_scores(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "classes_")
        return self._scores(check_host_rows(self, X, reset=False))

    def decision_function(self, X: Any, *, client: Any = None) -> np.ndarray:
        """Class scores; of shape (n_samples,) for two classes, as in scikit-learn.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to score.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.  With ``label_mix="client"`` a row of a client
            seen in ``fit`` is scored under that client's label mix
            (:mod:`skslot.label_mix`); other rows, and every row when
            ``client`` is ``None``, under the federation's.

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Larger is more likely; for two classes, the second class's score
            minus the first's.
        """
        scores = self._client_scores(X, client)
        return scores[:, 1] - scores[:, 0] if scores.shape[1] == 2 else scores


class LinearHeadMixin:
    """Scores ``X W^T + b`` from fitted ``coef_`` and ``intercept_``."""

    coef_: np.ndarray
    intercept_: np.ndarray

    def _scores(self, X: np.ndarray) -> np.ndarray:
        return X @ self.coef_.T.astype(X.dtype, copy=False) + self.intercept_

    def _linear_parts(self) -> tuple[np.ndarray, np.ndarray]:
        return self.coef_, self.intercept_


#: The constraint of a parameter that takes a one-shot head (the protocol's, a client's).
ONE_SHOT_HEAD = InstanceOf(OneShotHead, "a skslot one-shot head (skslot.heads)")


def _client_seeds(head: Any, n_clients: int) -> list[int | None]:
    """One seed per client, drawn from the head's ``random_state`` (if any)."""
    if not hasattr(head, "random_state"):
        return [None] * n_clients
    return list(spawn_seeds(head.random_state, n_clients))


def _federation_counts(statistics: Sequence, classes: np.ndarray) -> np.ndarray | None:
    """The federation's class counts from statistics that carry them, else ``None``."""
    if not all(hasattr(stat, "class_counts") for stat in statistics):
        return None
    counts = [np.asarray(stat.class_counts(), dtype=np.int64) for stat in statistics]
    if any(c.shape != classes.shape for c in counts):
        return None
    return sum(counts, np.zeros(classes.shape, dtype=np.int64))


def _upload_bytes(statistics: Sequence) -> np.ndarray:
    """Bytes each client's statistics take on the wire (:func:`message_bytes`)."""
    return np.array([message_bytes(stat.to_arrays()) for stat in statistics], dtype=np.int64)
