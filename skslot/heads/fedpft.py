"""FedPFT: per-client, per-class Gaussian mixtures sampled on the server.

The mixtures a client sends, and their arrays, are in :mod:`skslot.heads._mixtures`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from .._param_validation import HasMethods, Interval, InvalidParameterError, Options
from ..defaults import LABEL_MIX
from ..label_mix import LABEL_MIXES
from ._base import OneShotHead
from ._covariance_forms import low_rank_plus_diagonal
from ._fitting import STATISTICS
from ._linear_scores import UNSCORED
from ._mixtures import ClassMixture, ClassMixtures, _as_python, _as_transmitted, _covariance_shape

__all__ = ["ClassMixture", "ClassMixtures", "FedPFTClassifier"]

COVARIANCE_TYPES = ("full", "lowrank", "diag", "spherical")
TRANSMIT_DTYPES = ("float16", "float32", "float64")


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
    covariance_type : {"lowrank", "full", "diag", "spherical"}, default="lowrank"
        What each component's covariance sends: the top ``rank`` principal
        directions of the class's rows plus each feature's remaining variance
        (``"lowrank"``, ``W W^T + diag(d)``, ``m (rank + 1)`` values, one
        component only: the variances are kept exactly and the server samples
        without any factorisation), all ``m^2`` entries (``"full"``), the
        variances (``"diag"``), or one variance (``"spherical"``).  The
        default is the point of the accuracy-against-bytes curve on real
        digits features (docs/results/fedpft_bytes.md)
        where the bytes fall by 38x (659 KB instead of 24.8 MB per client at
        m = 1280, 10 classes) for at most half a point of accuracy; ``"diag"``
        and ``"spherical"`` (Flower's baseline, :meth:`flower_baseline`) lose
        5 to 16 points there.
    rank : int, default=32
        Principal directions per class with ``covariance_type="lowrank"``;
        with fewer features, ``n_features`` (the full covariance, exactly).
    reg_covar : float, default=1e-6
        Passed to :class:`sklearn.mixture.GaussianMixture`.
    min_samples_per_class : int, default=2
    max_synthetic_per_client : int, default=100_000
        Most synthetic rows the server draws for one client's message: a
        client declaring more rows has its per-class counts scaled down in
        proportion (its weight in the head is then bounded too).  The server's
        memory and time are set by this parameter, never by what a client
        claims (a message claiming 10^9 rows would otherwise cost tens of GB).
    transmit_dtype : {"float16", "float32", "float64"}, default="float16"
        Precision of the transmitted parameters (FedPFT sends float16).
    estimator : classifier, default=None
        Trained on the synthetic rows; ``LogisticRegression(max_iter=1000)``
        when None.
    random_state : int, RandomState or None, default=None
        Seeds the mixtures and the server's sampling.
    label_mix : {"client", "federation"}, default="client"
        Whose label mix ``predict`` assumes for a row of a known client
        (``client=`` routed to it): the client's own, estimated from its
        training counts, or the federation's (:mod:`skslot.label_mix`).

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
    estimator_ : classifier
        The fitted server-side classifier.
    skipped_classes_ : list of list of (class, count)
        Per client, the classes it did not send.
    n_synthetic_ : int
        Synthetic rows the server trained on.
    upload_bytes_ : ndarray of shape (n_clients,)
        Bytes of each client's statistics on the wire (``.npy`` arrays, as
        Flower counts them: :func:`~skslot.heads.message_bytes`), in client
        order; the SLOT summary is counted apart.
    n_features_in_ : int

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import FedPFTClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    >>> head = FedPFTClassifier(random_state=0).fit(data.X, data.y, client=data.client)
    >>> head.n_synthetic_ <= len(data.X)
    True

    Each client's class Gaussians released under a privacy budget (one per
    class, ``n_components=1``): :class:`skslot.privacy.PrivateClassifier`.
    """

    statistics_type = ClassMixtures
    strategy = STATISTICS
    server_params = ("estimator",)
    _parameter_constraints: ClassVar[dict] = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "covariance_type": [Options(COVARIANCE_TYPES)],
        "rank": [Interval(Integral, 1, None, closed="left")],
        "reg_covar": [Interval(Real, 0.0, None, closed="left")],
        "min_samples_per_class": [Interval(Integral, 1, None, closed="left")],
        "max_synthetic_per_client": [Interval(Integral, 1, None, closed="left")],
        "transmit_dtype": [Options(TRANSMIT_DTYPES)],
        "estimator": [None, HasMethods("fit")],
        "random_state": ["random_state"],
        "label_mix": [Options(LABEL_MIXES)],
    }

    def __init__(
        self,
        *,
        n_components: int = 1,
        covariance_type: str = "lowrank",
        rank: int = 32,
        reg_covar: float = 1e-6,
        min_samples_per_class: int = 2,
        max_synthetic_per_client: int = 100_000,
        transmit_dtype: str = "float16",
        estimator: Any = None,
        random_state: int | np.random.RandomState | None = None,
        label_mix: str = LABEL_MIX,
    ) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.rank = rank
        self.reg_covar = reg_covar
        self.min_samples_per_class = min_samples_per_class
        self.max_synthetic_per_client = max_synthetic_per_client
        self.transmit_dtype = transmit_dtype
        self.estimator = estimator
        self.random_state = random_state
        self.label_mix = label_mix

    @classmethod
    def flower_baseline(cls, **params: Any) -> FedPFTClassifier:
        """The configuration of Flower's FedPFT baseline: one spherical Gaussian per class.

        ``m + 2`` float16 values per (client, class): 25.9 KB per client at
        m = 1280 with 10 classes, and 7 to 15 points less accurate than the
        default on digits features (docs/results/fedpft_bytes.md).

        Parameters
        ----------
        **params
            Constructor parameters overriding the baseline's settings.

        Returns
        -------
        head : FedPFTClassifier
            The unfitted head.

        Examples
        --------
        >>> from skslot.heads import FedPFTClassifier
        >>> head = FedPFTClassifier.flower_baseline(random_state=0)
        >>> head.covariance_type, head.n_components, head.transmit_dtype
        ('spherical', 1, 'float16')
        """
        settings = {"covariance_type": "spherical", "n_components": 1, "transmit_dtype": "float16"}
        return cls(**{**settings, **params})

    def _validate_params(self) -> None:
        """The declared constraints, then the one low-rank mixtures add."""
        super()._validate_params()
        if self.covariance_type == "lowrank" and self.n_components > 1:
            raise InvalidParameterError(
                f"{type(self).__name__}: covariance_type='lowrank' fits one component: "
                "set n_components=1"
            )

    def _client_statistics(
        self, X: np.ndarray, y: np.ndarray, classes: np.ndarray, seed: int | None
    ) -> ClassMixtures:
        counts = [int(np.sum(y == label)) for label in classes]
        return self._message(
            classes, counts, X.shape[1], lambda k: self._fit_mixture(X[y == classes[k]], seed)
        )

    def _message(
        self,
        classes: np.ndarray,
        counts: Sequence[int],
        n_features: int,
        mixture: Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray]],
    ) -> ClassMixtures:
        """A client's message: ``mixture(k)`` of the ``k``-th class if it has enough rows, cast to
        ``transmit_dtype``; the classes with fewer listed as skipped with their counts."""
        dtype, kind = np.dtype(self.transmit_dtype), self.covariance_type
        min_rows = max(self.min_samples_per_class, 2)
        mixtures, skipped = [], []
        for k, (label, count) in enumerate(zip(classes, counts, strict=True)):
            if count >= min_rows:
                weights, means, covariances = (_as_transmitted(v, dtype) for v in mixture(k))
                mixtures.append(ClassMixture(label, count, weights, means, covariances, kind))
            elif count > 0:
                skipped.append((_as_python(label), count))
        # as the server decodes it: its rank, reg_covar and transmit rounding
        rank, reg_covar = self._rank(n_features), float(self.reg_covar)
        eps = float(np.finfo(dtype).eps)
        return ClassMixtures(
            classes, mixtures, skipped, n_features, kind, dtype.name, rank, reg_covar, eps
        )

    def mixtures_of_moments(self, moments: Any) -> ClassMixtures:
        """The message of one Gaussian per class with the given moments.

        What a client sends whose class moments are not those of its rows (a
        private client's release, :func:`~skslot.privacy.private_class_moments`): the
        covariances in this head's ``covariance_type`` plus ``reg_covar``, cast to
        ``transmit_dtype``.

        Parameters
        ----------
        moments : ClassMoments
            Each class's count, mean and covariance (``classes``, ``counts``,
            ``means`` and ``covariances``).

        Returns
        -------
        ClassMixtures
        """
        counts = [int(c) for c in moments.counts]
        return self._message(
            np.asarray(moments.classes),
            counts,
            moments.means.shape[1],
            lambda k: self._gaussian(moments.means[k], moments.covariances[k], rows=False),
        )

    def _rank(self, n_features: int | None = None) -> int:
        """The low-rank factor's width (0 unless ``covariance_type="lowrank"``).

        At most ``n_features``: the decoder, which does not know the dimension
        here, applies that bound itself (:meth:`ClassMixtures.from_arrays`).
        """
        if self.covariance_type != "lowrank":
            return 0
        return self.rank if n_features is None else min(self.rank, n_features)

    def _fit_mixture(
        self, rows: np.ndarray, seed: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Weights, means and covariances (spherical: shape (k, 1)) of one class's rows, of
        ``n_components`` components (at most one per row).

        One component is the maximum-likelihood Gaussian, in closed form (what
        :class:`~sklearn.mixture.GaussianMixture` converges to, without EM).
        """
        rows = rows.astype(np.float64, copy=False)
        n_components = min(self.n_components, rows.shape[0])
        if n_components == 1:
            mean = rows.mean(axis=0)
            return self._gaussian(mean, rows - mean, rows=True)
        from sklearn.mixture import GaussianMixture  # on use: a Flower process per message

        gm = GaussianMixture(
            n_components=n_components,
            covariance_type=self.covariance_type,
            reg_covar=self.reg_covar,
            random_state=seed,
        ).fit(rows)
        shape = _covariance_shape(self.covariance_type, n_components, rows.shape[1])
        return gm.weights_, gm.means_, gm.covariances_.reshape(shape)  # spherical: (k, 1)

    def _gaussian(
        self, mean: np.ndarray, spread: np.ndarray, *, rows: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One component of mean ``mean`` and the covariance of ``spread``, the centred rows
        (``rows``) or the covariance itself, in the form of ``covariance_type``, plus
        ``reg_covar``."""
        kind, reg, m = self.covariance_type, self.reg_covar, mean.shape[0]
        if kind == "lowrank":
            form = low_rank_plus_diagonal(spread, self._rank(m), reg, rows=rows)
        elif kind == "full":
            form = spread.T @ spread / spread.shape[0] if rows else spread.copy()
            form.flat[:: m + 1] += reg
        else:
            form = ((spread**2).mean(axis=0) if rows else np.diagonal(spread)) + reg
            if kind == "spherical":
                form = np.array([form.mean()])
        return np.ones(1), mean[None], form[None]

    def _synthetic_rows(
        self, statistics: list, classes: np.ndarray, maps: list | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each client's synthetic rows and labels, drawn from its mixtures.

        A client's draws are seeded by the head's seed and that client's class
        counts only (see :func:`_message_seed`).
        """
        cap = self.max_synthetic_per_client
        root = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        drawn = []
        for k, message in enumerate(statistics):
            rng = np.random.RandomState(_message_seed(root, message, classes))
            ot_map = None if maps is None else maps[k]
            declared = sum(mixture.n for mixture in message.mixtures)
            scale = min(1.0, cap / declared) if declared else 1.0
            X_parts, y_parts = [], []
            for mixture in message.mixtures:
                n = max(1, int(mixture.n * scale)) if scale < 1.0 else mixture.n
                X_parts.append(mixture.sample(n, rng, ot_map))
                y_parts.append(np.full(n, mixture.label, dtype=classes.dtype))
            if X_parts:
                drawn.append((np.vstack(X_parts), np.concatenate(y_parts)))
        return drawn

    def _fit_from_statistics(
        self, statistics: list, classes: np.ndarray, maps: list | None
    ) -> None:
        drawn = self._synthetic_rows(statistics, classes, maps)
        if not drawn:
            raise ValueError("no client sent any class mixture (too few rows per class)")
        X_syn, y_syn = (np.concatenate(part) for part in zip(*drawn, strict=True))
        if np.unique(y_syn).shape[0] < 2:
            raise ValueError(
                "the clients' mixtures cover fewer than 2 classes; lower min_samples_per_class"
            )
        if self.estimator is not None:
            base = self.estimator
        else:
            from sklearn.linear_model import LogisticRegression  # on use, as GaussianMixture

            base = LogisticRegression(max_iter=1000)
        self.estimator_ = clone(base).fit(X_syn, y_syn)
        self.classes_ = classes
        self.skipped_classes_ = [message.skipped for message in statistics]
        self.n_synthetic_ = y_syn.shape[0]
        self._columns = np.searchsorted(classes, self.estimator_.classes_)

    def _decode_options(self) -> dict:
        return {
            "covariance_type": self.covariance_type,
            "rank": self._rank(),
            "n_components": self.n_components,
            "min_samples_per_class": self.min_samples_per_class,
            "reg_covar": self.reg_covar,
            "eps": float(np.finfo(self.transmit_dtype).eps),
        }

    def _linear_parts(self) -> tuple[np.ndarray, np.ndarray]:
        est = self.estimator_
        if not (hasattr(est, "coef_") and hasattr(est, "intercept_")):
            raise TypeError(
                f"FedPFT's server classifier {type(est).__name__} has no coef_ and intercept_; "
                "only a linear one can be exported as linear scores"
            )
        coef, intercept = np.atleast_2d(est.coef_), np.atleast_1d(est.intercept_)
        if coef.shape[0] == 1:  # binary: scores (0, d) as in _scores
            coef = np.vstack([np.zeros_like(coef), coef])
            intercept = np.concatenate([[0.0], intercept])
        full_coef = np.zeros((self.classes_.shape[0], coef.shape[1]))
        full_intercept = np.full(self.classes_.shape[0], UNSCORED)  # a class never seen
        full_coef[self._columns] = coef
        full_intercept[self._columns] = intercept
        return full_coef, full_intercept

    def _scores(self, X: np.ndarray) -> np.ndarray:
        est = self.estimator_
        if hasattr(est, "decision_function"):
            d = est.decision_function(X)
            if d.ndim == 1:
                d = np.column_stack([np.zeros_like(d), d])
        else:
            with np.errstate(divide="ignore"):
                d = np.log(est.predict_proba(X))
        scores = np.full((X.shape[0], self.classes_.shape[0]), UNSCORED)
        scores[:, self._columns] = d
        return scores


def _message_seed(root: int, message: ClassMixtures, classes: np.ndarray) -> int:
    """The seed of one client's synthetic rows: the head's seed and that client's class counts.

    Each client's draws depend on nothing else, so leaving a client out (the
    protocol's screening) or reordering the clients redraws no other client's
    rows, and a message merged from two parts of a client's rows (the refit
    after a choice of tau) draws with the seed of that client's message made
    from all its rows at once: the same counts, whatever the rounding of the
    moments.  Clients whose class counts are equal share their standard normal
    draws, each shaped by its own mixtures.
    """
    counts = np.zeros(classes.shape[0], dtype=np.int64)
    for mixture in message.mixtures:
        counts[np.searchsorted(classes, mixture.label)] += int(mixture.n)
    digest = hashlib.sha256(root.to_bytes(8, "little"))
    digest.update(counts.tobytes())
    return int.from_bytes(digest.digest()[:4], "little")
