"""Each head's private release of a client's statistics, and a head fitted on such releases.

A head knows nothing of privacy: its private release is written here, once per
head class (an entry of :data:`_RELEASES`: the release of the plan it is
charged to, and its mechanism from :mod:`skslot.privacy._statistics`), and
wraps the head's statistics as Flower's ``LocalDpMod`` wraps a handler.
FedCGS releases its class sums, counts and Gram matrix
(:func:`private_class_statistics`), FedPFT its class moments, from which its
one Gaussian per class is post-processing (:func:`private_class_moments`),
and O-FedAvg its local head by output perturbation (:func:`private_local_head`).
The protocol's private client (:class:`skslot.privacy.client.PrivateRelease`)
and :class:`PrivateClassifier` both release through :func:`released_statistics`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from .._doc_link import DocLinkMixin
from .._param_validation import ParameterValidationMixin
from ..heads import (
    FedCGSClassifier,
    FedPFTClassifier,
    LinearHeadUpdate,
    OneShotFedAvgClassifier,
    OneShotHead,
)
from ..heads._base import ONE_SHOT_HEAD
from ._accounting import PrivacyBudget, PrivacyLedger
from ._statistics import (
    CLASS_MOMENTS_SENSITIVITY,
    CLASS_STATISTICS_SENSITIVITY,
    LOCAL_HEAD_SENSITIVITY,
    private_class_moments,
    private_class_statistics,
    private_local_head,
)
from ._summary import noise_seed

__all__ = [
    "PrivateClassifier",
    "private_release",
    "released_statistics",
    "statistics_release_problem",
]


def private_release(head: OneShotHead) -> str | None:
    """The release (:data:`skslot.privacy.RELEASES`) a private client's statistics for
    ``head`` are charged to; ``None`` for a head class with no private release.

    Parameters
    ----------
    head : OneShotHead

    Returns
    -------
    str or None

    Examples
    --------
    >>> from skslot.heads import FedPFTClassifier, OneShotFedAvgClassifier
    >>> private_release(FedPFTClassifier()), private_release(OneShotFedAvgClassifier())
    ('statistics', 'local_head')
    """
    entry = _RELEASES.get(type(head))
    return None if entry is None else entry[0]


def statistics_release_problem(head: OneShotHead) -> str | None:
    """Why ``head``'s clients cannot release their statistics privately, or ``None``.

    Parameters
    ----------
    head : OneShotHead

    Returns
    -------
    str or None

    Examples
    --------
    >>> from skslot.heads import FedCGSClassifier, FedPFTClassifier
    >>> statistics_release_problem(FedCGSClassifier()) is None
    True
    >>> print(statistics_release_problem(FedPFTClassifier(n_components=2)))  # doctest: +ELLIPSIS
    FedPFTClassifier: a private release fits one Gaussian per class; ...
    """
    name = type(head).__name__
    if private_release(head) is None:
        return (
            f"{name} has no private release (its messages would be exact statistics of the "
            "clients' rows); use FedCGSClassifier, FedPFTClassifier or OneShotFedAvgClassifier"
        )
    if isinstance(head, FedPFTClassifier) and head.n_components != 1:
        return (
            f"{name}: a private release fits one Gaussian per class; more components "
            f"(n_components={head.n_components}) would need the rows themselves: set "
            "n_components=1"
        )
    if isinstance(head, OneShotFedAvgClassifier) and head.local_classes == "held":
        return (
            "local_classes='held' reveals which classes a private client holds; use "
            "local_classes='auto' or 'all' under privacy"
        )
    return None


def released_statistics(
    head: OneShotHead, X: np.ndarray, y: np.ndarray, classes: np.ndarray, ledger: PrivacyLedger
) -> Any:
    """A client's statistics of ``X, y`` for ``head``, its release under ``ledger``.

    Charged to the head's release (:func:`private_release`); asking again
    returns the first release.

    Parameters
    ----------
    head : OneShotHead
        A head with a private release (:func:`statistics_release_problem`).
    X : ndarray of shape (n, m)
        The client's rows, clipped to the budget's norm by the mechanism.
    y : ndarray of shape (n,)
        Their labels, each one of ``classes``.
    classes : ndarray
        The run's class set, sorted.
    ledger : PrivacyLedger
        The client's ledger, planned for the release.

    Returns
    -------
    object
        Statistics of the head's ``statistics_type``, as the server decodes them.

    Raises
    ------
    ValueError
        If the head has no private release with its settings.
    PrivacyBudgetExceeded
        If the ledger's plan does not cover the release.
    """
    why = statistics_release_problem(head)
    if why:
        raise ValueError(why)
    release, mechanism = _RELEASES[type(head)]
    return mechanism(head, X, y, classes, ledger, release)


def _class_statistics(
    head: FedCGSClassifier,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    ledger: PrivacyLedger,
    release: str,
) -> Any:
    """FedCGS: the class sums, counts and Gram matrix, one Gaussian mechanism."""
    clip = float(ledger.budget.clip_norm)
    return ledger.release(
        release,
        lambda sigma, rng: private_class_statistics(
            X, y, classes, clip_norm=clip, sigma=sigma, rng=rng
        ),
        n=X.shape[0],
        sensitivity=CLASS_STATISTICS_SENSITIVITY,
    )


def _class_gaussians(
    head: FedPFTClassifier,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    ledger: PrivacyLedger,
    release: str,
) -> Any:
    """FedPFT: one Gaussian per class, post-processing of the released class moments."""
    clip = float(ledger.budget.clip_norm)
    moments = ledger.release(
        release,
        lambda sigma, rng: private_class_moments(
            X, y, classes, clip_norm=clip, sigma=sigma, rng=rng
        ),
        n=X.shape[0],
        sensitivity=CLASS_MOMENTS_SENSITIVITY,
    )
    return head.mixtures_of_moments(moments)


def _local_head(
    head: OneShotFedAvgClassifier,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    ledger: PrivacyLedger,
    release: str,
) -> Any:
    """O-FedAvg: the local head by output perturbation, over every class of the run."""
    clip = float(ledger.budget.clip_norm)

    def draw(sigma: float, rng: np.random.Generator) -> LinearHeadUpdate:
        coef, intercept = private_local_head(
            X,
            np.searchsorted(classes, y),
            classes.shape[0],
            C=head.C,
            clip_norm=clip,
            sigma=sigma,
            rng=rng,
            max_iter=head.max_iter,
        )
        # no iteration count: how long the solver took depends on the rows
        return LinearHeadUpdate(classes, coef, intercept, X.shape[0], 0)

    return ledger.release(
        release, draw, n=X.shape[0], sensitivity=LOCAL_HEAD_SENSITIVITY * head.C * clip * clip
    )


#: Each head's private release, by head class (exactly: a subclass, whose statistics may
#: differ, has none unless it has its own entry): the release of the plan its clients'
#: statistics are charged to, and ``mechanism(head, X, y, classes, ledger, release)``.
_RELEASES: dict[type, tuple[str, Callable[..., Any]]] = {
    FedCGSClassifier: ("statistics", _class_statistics),
    FedPFTClassifier: ("statistics", _class_gaussians),
    OneShotFedAvgClassifier: ("local_head", _local_head),
}


def _head_has(name: str) -> Callable[[Any], bool]:
    return lambda self: hasattr(self.head, name)


class PrivateClassifier(
    DocLinkMixin, ParameterValidationMixin, MetaEstimatorMixin, ClassifierMixin, BaseEstimator
):
    """A one-shot head fitted on each client's statistics released under a privacy budget.

    Each ``fit`` is one release of every client's statistics
    (:func:`released_statistics`), under a fresh ledger of the budget per
    client: ``k`` fits, a grid search's folds included, spend ``k`` budgets.
    A federated run composes all of a client's releases (its summary, its
    statistics, its test count) under one budget instead:
    :class:`~skslot.protocol.OneShotProtocol`'s ``privacy`` and
    :class:`~skslot.protocol.ClientParty`'s.  Rows are clipped to the
    budget's ``clip_norm``; choose it from public knowledge.

    For O-FedAvg the noise on each parameter grows with ``C * clip_norm**2``
    (the regularisation in units of the clip norm): keep it near ``0.1``
    (``C = 0.1 / clip_norm**2``; docs/results/private_federation.md), which
    keeps the head's scores above the noise.

    Parameters
    ----------
    head : OneShotHead
        A head with a private release: :class:`~skslot.heads.FedCGSClassifier`,
        :class:`~skslot.heads.FedPFTClassifier` (``n_components=1``) or
        :class:`~skslot.heads.OneShotFedAvgClassifier` (not
        ``local_classes="held"``).  Cloned, never fitted itself.
    privacy : PrivacyBudget
        Each client's budget for one fit.

    Attributes
    ----------
    head_ : OneShotHead
        The head fitted on the released statistics.
    classes_ : ndarray of shape (C,)
    n_features_in_ : int
    privacy_spent_ : dict
        The epsilon each client spent (the accountant's, at the budget's
        delta), by client label.

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import FedCGSClassifier
    >>> from skslot.privacy import PrivacyBudget, PrivateClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    >>> budget = PrivacyBudget(epsilon=8.0, clip_norm=10.0)
    >>> private = PrivateClassifier(FedCGSClassifier(), privacy=budget)
    >>> private = private.fit(data.X, data.y, client=data.client)
    >>> sorted(private.privacy_spent_.values()) <= [8.0] * 3
    True
    >>> private.predict(data.X[:3], client=data.client[:3]).shape
    (3,)
    """

    __metadata_request__fit = {"client": True}
    __metadata_request__predict = {"client": True}
    __metadata_request__predict_proba = {"client": True}
    __metadata_request__decision_function = {"client": True}

    _parameter_constraints: ClassVar[dict] = {
        "head": [ONE_SHOT_HEAD],
        "privacy": [PrivacyBudget],
    }

    def __init__(self, head: OneShotHead, *, privacy: PrivacyBudget) -> None:
        self.head = head
        self.privacy = privacy

    def fit(self, X: Any, y: Any, *, client: Any = None) -> PrivateClassifier:
        """Fit the head on every client's released statistics.

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
        """
        self._validate_params()
        why = statistics_release_problem(self.head)
        if why:
            raise ValueError(why)
        budget, release = self.privacy, str(private_release(self.head))
        # fresh entropy per client, or (with a warning) one seed per client from the budget's
        base = None if budget.random_state is None else noise_seed(budget.random_state)
        spent: dict[Any, float] = {}
        head = clone(self.head)

        def statistics(
            X_k: np.ndarray,
            y_k: np.ndarray,
            classes: np.ndarray,
            seed: Any,
            position: int,
            label: Any,
        ) -> Any:
            seed_k = None if base is None else base + position  # never the same noise twice
            ledger = budget.ledger([release], client=label, seed=seed_k)
            released = released_statistics(head, X_k, y_k, classes, ledger)
            spent[label] = ledger.spent()
            return released

        self.head_ = head._fit_rows(X, y, client, statistics)
        self.privacy_spent_ = spent
        self.classes_ = head.classes_
        self.n_features_in_ = head.n_features_in_
        return self

    @available_if(_head_has("predict"))
    def predict(self, X: Any, *, client: Any = None) -> np.ndarray:
        """The head's predictions (:meth:`~skslot.heads.OneShotHead.predict`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self, "head_")
        return self.head_.predict(X, client=client)

    @available_if(_head_has("predict_proba"))
    def predict_proba(self, X: Any, *, client: Any = None) -> np.ndarray:
        """The head's class probabilities (:meth:`~skslot.heads.OneShotHead.predict_proba`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self, "head_")
        return self.head_.predict_proba(X, client=client)

    @available_if(_head_has("decision_function"))
    def decision_function(self, X: Any, *, client: Any = None) -> np.ndarray:
        """The head's class scores (:meth:`~skslot.heads.OneShotHead.decision_function`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        check_is_fitted(self, "head_")
        return self.head_.decision_function(X, client=client)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        head_tags = get_tags(self.head)
        tags.input_tags = head_tags.input_tags
        tags.classifier_tags = head_tags.classifier_tags
        return tags
