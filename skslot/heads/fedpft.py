"""FedPFT: per-client, per-class Gaussian mixtures sampled on the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.mixture import GaussianMixture
from sklearn.utils import check_random_state

from .._linalg import cholesky_factor
from .._validation import check_in_range, check_option, check_positive_int
from ._base import OneShotHead

__all__ = ["ClassMixture", "ClassMixtures", "FedPFTClassifier"]

COVARIANCE_TYPES = ("full", "diag", "spherical")


@dataclass(frozen=True, eq=False)
class ClassMixture:
    """Gaussian mixture of one class at one client, as transmitted."""

    label: Any
    n: int
    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    covariance_type: str


@dataclass(frozen=True, eq=False)
class ClassMixtures:
    """A client's FedPFT message: one mixture per class it has enough rows of.

    ``skipped`` lists ``(class, count)`` for the classes with fewer than
    ``min_samples_per_class`` rows: they are not sent (a mixture of one point
    would reveal that point).
    """

    classes: np.ndarray
    mixtures: list[ClassMixture]
    skipped: list[tuple[Any, int]]
    n_features: int


def _as_transmitted(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):
        cast = values.astype(dtype)
    if not np.all(np.isfinite(cast)):
        raise ValueError(f"mixture parameters overflow {dtype.name}; use transmit_dtype='float32'")
    return cast.astype(np.float64)


def _covariance_factor(cov: np.ndarray) -> np.ndarray:
    """A Cholesky factor, adding a growing relative jitter if rounding broke PD."""
    scale = max(float(np.trace(cov)) / cov.shape[0], np.finfo(np.float64).tiny)
    jitter = 0.0
    for _ in range(12):
        try:
            return cholesky_factor(cov + jitter * np.eye(cov.shape[0]))
        except np.linalg.LinAlgError:
            jitter = scale * (1e-8 if jitter == 0.0 else 10.0 * jitter / scale)
    raise ValueError("a transmitted covariance is too far from positive semi-definite")


def sample_mixture(mixture: ClassMixture, n: int, rng: np.random.RandomState) -> np.ndarray:
    """Draw ``n`` rows from a transmitted mixture."""
    m = mixture.means.shape[1]
    counts = rng.multinomial(n, mixture.weights / mixture.weights.sum())
    rows = []
    for j, count in enumerate(counts):
        if count == 0:
            continue
        z = rng.standard_normal(size=(count, m))
        cov = mixture.covariances[j]
        if mixture.covariance_type == "full":
            z = z @ _covariance_factor(cov).T
        else:  # diag: a vector of variances; spherical: one variance
            z = z * np.sqrt(np.maximum(cov, 0.0))
        rows.append(mixture.means[j] + z)
    return np.vstack(rows)


class FedPFTClassifier(OneShotHead):
    """One-shot federated learning by parametric feature transfer (FedPFT).

    After Beitollahi et al., 2025.  Each client fits, for each class, a
    Gaussian mixture to its rows and sends its parameters cast to
    ``transmit_dtype``.  The server samples as many synthetic rows per
    (client, class) as that client had and trains ``estimator`` on them.

    Classes with fewer than ``min_samples_per_class`` rows at a client are not
    sent by that client (listed in ``skipped_classes_``); mixtures of ``k``
    components need ``k`` rows, so a class with fewer rows gets fewer
    components.

    Parameters
    ----------
    n_components : int, default=1
        Mixture components per (client, class).
    covariance_type : {"full", "diag", "spherical"}, default="full"
    reg_covar : float, default=1e-6
        Passed to :class:`sklearn.mixture.GaussianMixture`.
    min_samples_per_class : int, default=2
    transmit_dtype : {"float16", "float32", "float64"}, default="float16"
        Precision of the transmitted parameters (FedPFT sends float16).
    estimator : classifier, default=None
        Trained on the synthetic rows; ``LogisticRegression(max_iter=1000)``
        when None.
    random_state : int, RandomState or None, default=None
        Seeds the mixtures and the server's sampling.

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
    estimator_ : classifier
        The fitted server-side classifier.
    skipped_classes_ : list of list of (class, count)
        Per client, the classes it did not send.
    n_synthetic_ : int
        Synthetic rows the server trained on.
    n_features_in_ : int

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import FedPFTClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    >>> head = FedPFTClassifier(random_state=0).fit(data.X, data.y, client=data.client)
    >>> head.n_synthetic_ <= len(data.X)
    True
    """

    def __init__(
        self,
        *,
        n_components: int = 1,
        covariance_type: str = "full",
        reg_covar: float = 1e-6,
        min_samples_per_class: int = 2,
        transmit_dtype: str = "float16",
        estimator: Any = None,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        self.min_samples_per_class = min_samples_per_class
        self.transmit_dtype = transmit_dtype
        self.estimator = estimator
        self.random_state = random_state

    def _client_statistics(
        self, X: np.ndarray, y: np.ndarray, classes: np.ndarray, seed: int | None
    ) -> ClassMixtures:
        n_components = check_positive_int("n_components", self.n_components)
        min_samples = check_positive_int("min_samples_per_class", self.min_samples_per_class)
        check_option("covariance_type", self.covariance_type, COVARIANCE_TYPES)
        check_in_range("reg_covar", self.reg_covar, 0.0, None)
        dtype = np.dtype(
            check_option("transmit_dtype", self.transmit_dtype, ("float16", "float32", "float64"))
        )
        mixtures, skipped = [], []
        for label in classes:
            rows = X[y == label]
            if rows.shape[0] == 0:
                continue
            if rows.shape[0] < max(min_samples, 2):
                skipped.append((label.item() if hasattr(label, "item") else label, rows.shape[0]))
                continue
            weights, means, covariances = self._fit_mixture(
                rows.astype(np.float64, copy=False), min(n_components, rows.shape[0]), seed
            )
            mixtures.append(
                ClassMixture(
                    label,
                    rows.shape[0],
                    _as_transmitted(weights, dtype),
                    _as_transmitted(means, dtype),
                    _as_transmitted(covariances, dtype),
                    self.covariance_type,
                )
            )
        return ClassMixtures(classes, mixtures, skipped, X.shape[1])

    def _fit_mixture(
        self, rows: np.ndarray, n_components: int, seed: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Weights, means and covariances (spherical: shape (k, 1)) of one class.

        One component is the maximum-likelihood Gaussian, in closed form (what
        :class:`~sklearn.mixture.GaussianMixture` converges to, without EM).
        """
        if n_components == 1:
            mean = rows.mean(axis=0)
            centred = rows - mean
            if self.covariance_type == "full":
                cov = centred.T @ centred / rows.shape[0]
                cov.flat[:: cov.shape[0] + 1] += self.reg_covar
            else:
                cov = (centred**2).mean(axis=0) + self.reg_covar
                if self.covariance_type == "spherical":
                    cov = np.array([cov.mean()])
            return np.ones(1), mean[None], cov[None]
        gm = GaussianMixture(
            n_components=n_components,
            covariance_type=self.covariance_type,
            reg_covar=self.reg_covar,
            random_state=seed,
        ).fit(rows)
        covariances = gm.covariances_
        if self.covariance_type == "spherical":
            covariances = covariances[:, None]
        return gm.weights_, gm.means_, covariances

    def _fit_from_statistics(self, statistics: list, classes: np.ndarray) -> None:
        rng = check_random_state(self.random_state)
        X_parts, y_parts = [], []
        for message in statistics:
            for mixture in message.mixtures:
                X_parts.append(sample_mixture(mixture, mixture.n, rng))
                y_parts.append(np.full(mixture.n, mixture.label, dtype=classes.dtype))
        if not X_parts:
            raise ValueError("no client sent any class mixture (too few rows per class)")
        y_syn = np.concatenate(y_parts)
        if np.unique(y_syn).shape[0] < 2:
            raise ValueError(
                "the clients' mixtures cover fewer than 2 classes; lower min_samples_per_class"
            )
        base = self.estimator if self.estimator is not None else LogisticRegression(max_iter=1000)
        self.estimator_ = clone(base).fit(np.vstack(X_parts), y_syn)
        self.classes_ = classes
        self.skipped_classes_ = [message.skipped for message in statistics]
        self.n_synthetic_ = y_syn.shape[0]
        self._columns = np.searchsorted(classes, self.estimator_.classes_)

    def _scores(self, X: np.ndarray) -> np.ndarray:
        est = self.estimator_
        if hasattr(est, "decision_function"):
            d = est.decision_function(X)
            if d.ndim == 1:
                d = np.column_stack([np.zeros_like(d), d])
        else:
            with np.errstate(divide="ignore"):
                d = np.log(est.predict_proba(X))
        scores = np.full((X.shape[0], self.classes_.shape[0]), np.finfo(np.float64).min / 4)
        scores[:, self._columns] = d
        return scores
