"""Whose label mix a prediction assumes: the client's own, or the federation's.

A federation is judged one of two ways, and the training data cannot tell
which: each client's future rows follow **its own label mix** (a hospital's
prevalence, a shop's sales), or the model must serve **every class of the
client's domain** (the paper's test).  By Bayes,

    p(y | x, k)  is proportional to  p(x | y, k) p(y | k),

so a head trained on the federation's rows, whose scores embed the
federation's class proportions ``pi``, serves client ``k``'s own mix by
adding ``log pi_k(y) - log pi(y)`` to its class scores.  ``pi_k`` is the
client's class proportions, estimated from its training counts ``n_k`` with
the federation's proportions as the prior mean (a Dirichlet of strength
:data:`PRIOR_STRENGTH` times the number of classes):

    pi_k(c) = (n_kc + s C pi(c)) / (n_k + s C),

so a small client leans on the federation's mix and a class a client never
saw keeps a small, non-zero probability.  Only the client's own counts enter:
in a deployment each client applies its own prior to the global head, and
nothing is sent for it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, ClassVar

import numpy as np
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.utils.validation import check_is_fitted

from ._param_validation import HasMethods, Options, ParameterValidationMixin
from ._validation import check_client_labels, check_row_labels
from .exceptions import warn_lone_classes
from .label_shift import class_counts

__all__ = [
    "LABEL_MIXES",
    "PRIOR_STRENGTH",
    "ClientPriorClassifier",
    "averaged_log_prior",
    "client_log_prior",
    "domain_offsets",
    "own_mix_accuracy",
    "prior_shift",
    "prior_shifts",
]

#: The two cases: each client's rows follow its own label mix ("client"), or the
#: federation's, every class of the domain served ("federation").
LABEL_MIXES = ("client", "federation")
#: Pseudo-rows per class of the Dirichlet prior on a client's proportions.
PRIOR_STRENGTH = 1.0


def client_log_prior(counts: np.ndarray, federation: np.ndarray) -> np.ndarray:
    """``log pi_k``: a client's class proportions, shrunk towards the federation's.

    Parameters
    ----------
    counts : ndarray of shape (C,)
        The client's training rows of each class.
    federation : ndarray of shape (C,)
        The federation's class proportions ``pi`` (summing to one).

    Returns
    -------
    ndarray of shape (C,)
        ``log((n_kc + s C pi(c)) / (n_k + s C))``; ``-inf`` for a class with
        neither rows nor federation share.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.label_mix import client_log_prior
    >>> np.round(np.exp(client_log_prior(np.array([8, 0]), np.array([0.5, 0.5]))), 2)
    array([0.9, 0.1])
    """
    counts = np.asarray(counts, dtype=np.float64)
    strength = PRIOR_STRENGTH * counts.shape[0]
    with np.errstate(divide="ignore"):
        return np.log((counts + strength * federation) / (counts.sum() + strength))


def prior_shift(
    counts: np.ndarray, federation: np.ndarray, embedded: np.ndarray | None = None
) -> np.ndarray:
    """One client's addition ``log pi_k - log rho`` to its class scores.

    ``rho`` is the class prior the head's scores embed: the federation's
    proportions ``pi`` by default.  Classes the federation has no rows of get
    zero (their scores are left as the head made them).

    Parameters
    ----------
    counts : ndarray of shape (C,)
        The client's training rows of each class.
    federation : ndarray of shape (C,)
        The federation's class proportions ``pi``.
    embedded : ndarray of shape (C,), optional
        ``log rho``, where the head's scores embed another prior than ``pi``
        (:func:`averaged_log_prior` for averaged local heads).

    Returns
    -------
    ndarray of shape (C,)
    """
    present = federation > 0
    if embedded is None:
        embedded = np.log(np.where(present, federation, 1.0))
    shift = np.zeros(federation.shape)
    shift[present] = client_log_prior(counts, federation)[present] - embedded[present]
    return shift


def prior_shifts(
    client: np.ndarray,
    client_counts: Mapping[Hashable, np.ndarray],
    federation_counts: np.ndarray,
    embedded: np.ndarray | None = None,
) -> np.ndarray:
    """Per-row additions :func:`prior_shift` to class scores, for each row's client.

    Rows of a client absent from ``client_counts`` (unseen in ``fit``) get
    zero: the federation's mix.

    Parameters
    ----------
    client : ndarray of shape (n_samples,)
        Each row's client label.
    client_counts : mapping of client label to ndarray of shape (C,)
    federation_counts : ndarray of shape (C,)
    embedded : ndarray of shape (C,), optional
        See :func:`prior_shift`.

    Returns
    -------
    ndarray of shape (n_samples, C)
    """
    federation_counts = np.asarray(federation_counts, dtype=np.float64)
    shifts = np.zeros((client.shape[0], federation_counts.shape[0]))
    total = federation_counts.sum()
    if total <= 0:
        return shifts
    pi = federation_counts / total
    for label, counts in client_counts.items():
        rows = client == label
        if rows.any():
            shifts[rows] = prior_shift(counts, pi, embedded)
    return shifts


def averaged_log_prior(
    client_counts: Mapping[Hashable, np.ndarray], weights: np.ndarray
) -> np.ndarray:
    """The class prior that averaged local heads embed: ``sum_k w_k log pi_k``.

    Each client's local softmax head carries its own class prior in its
    intercept (``log pi_k``, up to a constant); averaging the heads with
    weights ``w_k`` averages those logarithms, a geometric mixture of the
    clients' priors rather than the federation's ``pi``.

    Parameters
    ----------
    client_counts : mapping of client label to ndarray of shape (C,)
    weights : ndarray of shape (n_clients,)
        The averaging weights, in the order of ``client_counts``.

    Returns
    -------
    ndarray of shape (C,)
    """
    table = np.stack([np.asarray(c, dtype=np.float64) for c in client_counts.values()])
    pi = table.sum(axis=0) / table.sum()
    logs = np.stack([client_log_prior(c, pi) for c in table])
    return np.asarray(weights, dtype=np.float64) @ logs


def domain_offsets(counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Each client's domain offset, measured within classes: the two-way fit of class means.

    Client ``k``'s mean of class ``c`` is modelled as ``mu_c + delta_k``: a
    class mean shared by the federation plus the client's offset.  The
    offsets minimise ``sum_kc n_kc |M_kc - mu_c - delta_k|^2`` under
    ``sum_k n_k delta_k = 0`` (the federation's mean stays where it is), so a
    client's label mix does not enter its offset, unlike its plain mean's
    distance to the federation's.  Eliminating ``mu`` leaves the ``K x K``
    system ``L delta = r`` with ``L = diag(n_k) - N diag(n_c)^-1 N^T`` and
    ``r_k = sum_c (S_kc - n_kc Mbar_c)`` (``Mbar_c`` the pooled class means),
    solved by least squares: where clients share no class with the others
    (the client-class graph falls apart), the offsets of the pieces are not
    identified and the minimum-norm solution is used.

    Parameters
    ----------
    counts : ndarray of shape (K, C)
        Each client's rows of each class.
    sums : ndarray of shape (K, C, m)
        Each client's sum of the rows of each class.

    Returns
    -------
    ndarray of shape (K, m)

    Examples
    --------
    Two clients, each holding both classes in other proportions, the second
    shifted by 2: the offsets are exactly the shift, whatever the mixes.

    >>> import numpy as np
    >>> from skslot.label_mix import domain_offsets
    >>> counts = np.array([[9, 1], [1, 9]])
    >>> means = np.array([[[0.0], [10.0]], [[2.0], [12.0]]])
    >>> domain_offsets(counts, counts[..., None] * means).ravel().round(6)
    array([-1.,  1.])
    """
    N = np.asarray(counts, dtype=np.float64)
    S = np.asarray(sums, dtype=np.float64)
    n_client, n_class = N.sum(axis=1), N.sum(axis=0)
    held = n_class > 0
    pooled = np.zeros(S.shape[1:])
    pooled[held] = S.sum(axis=0)[held] / n_class[held, None]
    r = S.sum(axis=1) - N @ pooled
    L = np.diag(n_client) - (N[:, held] / n_class[held]) @ N[:, held].T
    system = np.vstack([L, n_client[None, :]])
    rhs = np.vstack([r, np.zeros((1, r.shape[1]))])
    return np.linalg.lstsq(system, rhs, rcond=None)[0]


def own_mix_accuracy(
    correct: np.ndarray,
    y: np.ndarray,
    client: np.ndarray,
    mixes: Mapping[Hashable, np.ndarray],
    classes: np.ndarray,
) -> dict[Hashable, float]:
    """Each client's accuracy on test rows that follow its own label mix.

    The expected accuracy on rows drawn with client ``k``'s class
    proportions ``p_k`` (its training mix): ``sum_c p_k(c) acc_k(c)``, with
    ``acc_k(c)`` the accuracy on the client's test rows of class ``c``.  No
    rows are drawn (no sampling noise); a class of the mix that has no test
    row counts as wrong.

    Parameters
    ----------
    correct : ndarray of bool of shape (n_samples,)
        Whether each test row was classified right.
    y : ndarray of shape (n_samples,)
        The test rows' labels.
    client : ndarray of shape (n_samples,)
        The test rows' clients.
    mixes : mapping of client to ndarray of shape (C,)
        Each client's class counts (or proportions) in the order of ``classes``.
    classes : ndarray of shape (C,)

    Returns
    -------
    dict
        Client to accuracy, for the clients of ``mixes`` that have test rows.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.label_mix import own_mix_accuracy
    >>> correct = np.array([True, True, False, False])
    >>> y = np.array([0, 0, 1, 1]); client = np.zeros(4, dtype=int)
    >>> own_mix_accuracy(correct, y, client, {0: np.array([9, 1])}, np.array([0, 1]))
    {0: 0.9}
    """
    accuracy = {}
    for label, mix in mixes.items():
        mine = client == label
        if not mine.any():
            continue
        weights = np.asarray(mix, dtype=np.float64)
        per_class = np.array(
            [correct[mine & (y == c)].mean() if np.any(mine & (y == c)) else 0.0 for c in classes]
        )
        accuracy[label] = float(weights @ per_class / weights.sum())
    return accuracy


class ClientMixMixin:
    """Predictions under each row's client's label mix, for a classifier of the federation.

    The class records each client's class counts in ``fit``
    (:meth:`_record_counts`) and adds each row's client's
    :func:`prior_shifts` to its class scores (:meth:`_row_scores`, which a
    subclass implements) where ``label_mix="client"``.
    """

    __metadata_request__fit = {"client": True}
    __metadata_request__predict = {"client": True}
    __metadata_request__predict_proba = {"client": True}

    classes_: np.ndarray
    #: The federation's class counts (``None`` where unknown), and each client's, by label.
    class_counts_: np.ndarray | None
    client_class_counts_: dict[Any, np.ndarray]

    def _row_scores(self, X: Any) -> np.ndarray:
        """Class scores of shape (n_samples, n_classes) under the federation's mix."""
        raise NotImplementedError

    def _record_counts(
        self, y: np.ndarray, codes: np.ndarray, labels: list, classes: np.ndarray, stacklevel: int
    ) -> None:
        """Each client's class counts (``codes`` index ``labels``) and the federation's, with a
        warning for the classes one client alone holds (``stacklevel``: as seen by the caller)."""
        self.client_class_counts_ = {
            label: class_counts(y[codes == i], classes) for i, label in enumerate(labels)
        }
        self.class_counts_ = sum(  # the federation's: its clients' together
            self.client_class_counts_.values(), np.zeros(classes.shape[0], dtype=np.int64)
        )
        warn_lone_classes(
            type(self).__name__, self.client_class_counts_, classes, stacklevel=stacklevel + 1
        )

    def _federation_mix(self) -> np.ndarray | None:
        """The federation's class counts where each client predicts with its own label mix
        (``label_mix="client"``), else ``None``."""
        if getattr(self, "label_mix", "federation") != "client":
            return None
        return getattr(self, "class_counts_", None)

    def _embedded_prior(self) -> np.ndarray | None:
        """``log`` of the class prior the scores embed; ``None``: the federation's mix."""
        return None

    def _client_scores(self, X: Any, client: Any) -> np.ndarray:
        """Class scores, shifted to each row's client's label mix with ``label_mix="client"``."""
        scores = self._row_scores(X)
        federation = self._federation_mix()
        if federation is None or client is None:
            return scores
        labels, codes = check_client_labels(client, scores.shape[0])
        rows = np.asarray(labels, dtype=object)[codes]  # each row's client label
        shifts = prior_shifts(rows, self.client_class_counts_, federation, self._embedded_prior())
        return scores + shifts

    def predict_proba(self, X: Any, *, client: Any = None) -> np.ndarray:
        """Class probabilities under each row's client's label mix, columns as ``classes_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to classify.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.  With ``label_mix="client"`` a row of a client
            seen in ``fit`` is scored under that client's label mix; other
            rows, and every row when ``client`` is ``None``, under the
            federation's.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            The softmax of the class scores.
        """
        return softmax(self._client_scores(X, client), axis=1)

    def predict(self, X: Any, *, client: Any = None) -> np.ndarray:
        """The most likely class of each row under its client's label mix.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to classify.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (see :meth:`predict_proba`).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            A label of ``classes_`` per row.
        """
        scores = self._client_scores(X, client)  # checks the fit first
        return self.classes_[np.argmax(scores, axis=1)]


class ClientPriorClassifier(
    ParameterValidationMixin, ClientMixMixin, MetaEstimatorMixin, ClassifierMixin, BaseEstimator
):
    """Any probabilistic classifier, predicting each client's rows with its own label mix.

    The wrapped ``estimator`` is fitted on every client's rows together, so
    its probabilities embed the federation's class proportions ``pi``.  With
    ``label_mix="client"`` a row of client ``k`` is scored with ``log
    p(y | x) + log pi_k(y) - log pi(y)`` (:func:`client_log_prior`), the
    client's own proportions from its training counts; rows without a client,
    or of a client unseen in ``fit``, keep the federation's.  This is what
    skslot's own heads do with their ``label_mix`` parameter, for
    scikit-learn's classifiers (``LogisticRegression``,
    ``LinearDiscriminantAnalysis``, ...).

    Parameters
    ----------
    estimator : classifier with ``predict_proba``
        Cloned at ``fit``.
    label_mix : {"client", "federation"}, default="client"
        Whose label mix the predictions assume (:data:`LABEL_MIXES`).

    Attributes
    ----------
    estimator_ : classifier
        The fitted clone.
    classes_ : ndarray of shape (C,)
    class_counts_ : ndarray of shape (C,)
        The federation's training rows of each class.
    client_class_counts_ : dict
        Each client's training rows of each class, by client label.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skslot.label_mix import ClientPriorClassifier
    >>> X = np.zeros((8, 1)); y = np.array([0, 0, 0, 1, 0, 1, 1, 1])
    >>> client = np.repeat([0, 1], 4)
    >>> model = ClientPriorClassifier(LogisticRegression()).fit(X, y, client=client)
    >>> model.predict(np.zeros((2, 1)), client=np.array([0, 1]))  # each client's majority
    array([0, 1])
    """

    _parameter_constraints: ClassVar[dict] = {
        "estimator": [HasMethods(["fit", "predict_proba"])],
        "label_mix": [Options(LABEL_MIXES)],
    }

    def __init__(self, estimator: Any, *, label_mix: str = "client") -> None:
        self.estimator = estimator
        self.label_mix = label_mix

    def fit(self, X: Any, y: Any, *, client: Any = None) -> ClientPriorClassifier:
        """Fit the estimator on all rows and count each client's classes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (``None``: one client).

        Returns
        -------
        self : object
        """
        self._validate_params()
        y_arr = check_row_labels(y, len(y))
        labels, codes = check_client_labels(client, y_arr.shape[0])
        self.estimator_ = clone(self.estimator).fit(X, y_arr)
        self.classes_ = self.estimator_.classes_
        self._record_counts(y_arr, codes, labels, self.classes_, stacklevel=2)
        if hasattr(self.estimator_, "n_features_in_"):
            self.n_features_in_ = self.estimator_.n_features_in_
        return self

    def _row_scores(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "estimator_")
        with np.errstate(divide="ignore"):
            return np.log(self.estimator_.predict_proba(X))
