"""FedCGS: a closed-form Gaussian discriminant from aggregated class statistics."""

from __future__ import annotations

from numbers import Real
from typing import Any, ClassVar

import numpy as np
import scipy.linalg

from .._param_validation import Interval, Options
from ..defaults import LABEL_MIX
from ..label_mix import LABEL_MIXES
from ..ledoit_wolf import oas_shrinkage
from ._base import LinearHeadMixin, OneShotHead
from ._fitting import GRAM
from ._linear_scores import UNSCORED
from ._statistics import ClassStatistics

__all__ = ["FedCGSClassifier"]

#: The ridge of ``shrinkage="oas"`` where OAS shrinks fully (``rho = 1``): the covariance is
#: then the shrinkage target's, the head a nearest class mean rule.
_OAS_MAX_RIDGE = 1e9


class FedCGSClassifier(LinearHeadMixin, OneShotHead):
    """One-shot federated Gaussian discriminant (FedCGS, Guan et al., AAAI 2025).

    Clients send per-class feature sums and counts and the Gram matrix of their
    rows (:class:`~skslot.heads.ClassStatistics`).  The server forms the class
    means ``mu_c``, a shared covariance ``S`` and the linear head::

        W_c = S^{-1} mu_c,   b_c = -1/2 mu_c^T S^{-1} mu_c + log(N_c / N)

    solved with a Cholesky factorisation (no explicit inverse).

    Parameters
    ----------
    covariance : {"total", "within"}, default="total"
        ``"total"``: the covariance of all rows about the global mean (FedCGS);
        ``"within"``: the pooled within-class covariance (classic LDA).
    shrinkage : float or "oas", default="oas"
        Ridge ``S + r (tr S / m) I``, relative to the mean variance, so it is
        invariant to the feature scale.  A float is ``r``; ``"oas"`` takes
        ``r = rho / (1 - rho)``, where ``rho`` is the oracle approximating
        shrinkage intensity of ``S`` from the federation's ``N`` rows
        (:func:`skslot.ledoit_wolf.oas_shrinkage`): the ridge whose covariance
        is OAS's ``(1 - rho) S + rho (tr S / m) I`` up to scale, computed by
        the server from the statistics it already holds.  With very small
        values the head amplifies the directions of smallest variance.  The
        default is the study of FedCGS's covariance
        (docs/results/fedcgs_covariance.md): of the settings that gain at
        least 3 points over a fixed ``1e-3`` under skew behind SLOT on the
        digits and Office-Caltech10, the one whose worst cell loses least.
    priors : {"empirical", "uniform"}, default="empirical"
        ``log(N_c / N)`` or equal class priors.
    label_mix : {"client", "federation"}, default="client"
        Whose label mix ``predict`` assumes for a row of a known client
        (``client=`` routed to it): the client's own, estimated from its
        training counts, or the federation's (:mod:`skslot.label_mix`).

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
        The global class set.
    coef_ : ndarray of shape (C, m)
    intercept_ : ndarray of shape (C,)
    means_ : ndarray of shape (C, m)
    covariance_ : ndarray of shape (m, m)
        The shared covariance, before the ridge.
    shrinkage_ : float
        The ridge's ``r`` (``shrinkage``, or the one ``"oas"`` gave).
    upload_bytes_ : ndarray of shape (n_clients,)
        Bytes of each client's statistics on the wire (``.npy`` arrays, as
        Flower counts them: :func:`~skslot.heads.message_bytes`), in client
        order; the SLOT summary is counted apart.
    n_features_in_ : int

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import FedCGSClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    >>> head = FedCGSClassifier().fit(data.X, data.y, client=data.client)
    >>> head.coef_.shape
    (4, 8)

    Each client's statistics released under a privacy budget:
    :class:`skslot.privacy.PrivateClassifier`.
    """

    statistics_type = ClassStatistics
    strategy = GRAM
    server_params = ("covariance", "shrinkage", "priors")
    _parameter_constraints: ClassVar[dict] = {
        "covariance": [Options(("total", "within"))],
        "shrinkage": [Interval(Real, 0.0, None, closed="left"), Options(("oas",))],
        "priors": [Options(("empirical", "uniform"))],
        "label_mix": [Options(LABEL_MIXES)],
    }

    def __init__(
        self,
        *,
        covariance: str = "total",
        shrinkage: float | str = "oas",
        priors: str = "empirical",
        label_mix: str = LABEL_MIX,
    ) -> None:
        self.covariance = covariance
        self.shrinkage = shrinkage
        self.priors = priors
        self.label_mix = label_mix

    def _embedded_prior(self) -> np.ndarray | None:
        if self.priors == "empirical":
            return None
        return np.zeros(self.classes_.shape[0])  # the scores embed equal priors

    def _client_statistics(
        self, X: np.ndarray, y: np.ndarray, classes: np.ndarray, seed: Any
    ) -> ClassStatistics:
        return ClassStatistics.from_rows(X, y, classes)

    def _ridge_of(self, S: np.ndarray, n: int) -> float:
        """The ridge's ``r``: ``shrinkage``, or OAS's ``rho / (1 - rho)`` of ``S`` from ``n``
        rows (:data:`_OAS_MAX_RIDGE` where ``rho`` is 1: the shrinkage target alone)."""
        if self.shrinkage != "oas":
            return float(self.shrinkage)
        rho = oas_shrinkage(S, n)
        return rho / (1.0 - rho) if rho < 1.0 - 1e-9 else _OAS_MAX_RIDGE

    def _fit_from_statistics(
        self, statistics: list, classes: np.ndarray, maps: list | None
    ) -> None:
        if maps is not None:
            statistics = [s.aligned(t) for s, t in zip(statistics, maps, strict=True)]
        stats = ClassStatistics.combine(statistics)
        S = stats._covariance(self.covariance)
        m = S.shape[0]
        shrinkage = self._ridge_of(S, int(stats.counts.sum()))
        ridge = shrinkage * np.trace(S) / m
        if ridge == 0.0 and shrinkage > 0:
            ridge = shrinkage  # all features constant: fall back to an absolute ridge
        regularised = S.copy()
        regularised.flat[:: m + 1] += ridge
        try:
            factor = scipy.linalg.cho_factor(regularised, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise ValueError(
                f"the shared covariance is singular; increase shrinkage (it is {shrinkage})"
            ) from None
        means = stats.class_means
        coef = scipy.linalg.cho_solve(factor, means.T, check_finite=False).T
        N = stats.counts.sum()
        if self.priors == "empirical":
            with np.errstate(divide="ignore"):
                log_prior = np.log(stats.counts / N)
        else:
            log_prior = np.where(stats.counts > 0, 0.0, -np.inf)
        intercept = -0.5 * np.einsum("cm,cm->c", means, coef) + log_prior
        # a class no client has is never predicted (finite, very low score)
        intercept = np.where(np.isfinite(intercept), intercept, UNSCORED)
        self.classes_ = classes
        self.means_ = means
        self.covariance_ = S
        self.shrinkage_ = shrinkage
        self.coef_ = coef
        self.intercept_ = intercept
