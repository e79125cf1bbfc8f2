"""What a client can do alone: standardise its features by its own statistics.

Per-client centring (``x - mu_k``) and standardisation (``(x - mu_k) /
sigma_k``) cost no communication and need no federation, so every gain of
SLOT is measured beside them (``skslot bench`` prints them as columns).  The
third baseline, CORAL-style alignment of each client's covariance to the
reference with no mean transport, is :class:`~skslot.SLOTTransformer` with
``tau=1, mean_tau=0``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ._doc_link import DocLinkMixin
from ._param_validation import ParameterValidationMixin
from ._validation import ClientTransformerMixin, check_host_rows, client_rows
from .transformer import SLOTTransformer

__all__ = ["ClientStandardScaler"]


def _standardised(X: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(X - mean) / scale`` in ``X``'s dtype."""
    return ((X - mean) / scale).astype(X.dtype, copy=False)


class ClientStandardScaler(
    DocLinkMixin, ParameterValidationMixin, ClientTransformerMixin, BaseEstimator
):
    """Centre (and scale) each client's features by that client's own statistics.

    The baseline that needs no federation: client ``k`` maps ``x`` to
    ``(x - mu_k) / sigma_k`` with its own column means ``mu_k`` and standard
    deviations ``sigma_k`` (``with_std=False``: ``x - mu_k``, per-client
    centring).  It takes ``client`` like :class:`~skslot.SLOTTransformer`, so
    a :class:`~sklearn.pipeline.Pipeline` swaps one for the other.

    Parameters
    ----------
    with_mean : bool, default=True
        Subtract each client's mean.
    with_std : bool, default=True
        Divide by each client's standard deviation (a constant column is left
        unscaled).
    unknown_client : {"fit", "error", "identity"}, default="fit"
        What ``transform`` does with a client not seen in ``fit``: use the
        statistics of its rows in that call (at least 2), raise, or leave its
        rows unchanged.

    Attributes
    ----------
    means_ : dict
        Client label to its column means, ndarray of shape (`n_features_in_`,).
    scales_ : dict
        Client label to its column scales (ones with ``with_std=False``).
    clients_ : list
        Client labels seen in ``fit``.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)

    See Also
    --------
    SLOTTransformer : the federated alignment these baselines are measured against.
    sklearn.preprocessing.StandardScaler : the same for one client.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import ClientStandardScaler
    >>> X = np.array([[0.0, 1.0], [2.0, 3.0], [10.0, 10.0], [14.0, 10.0]])
    >>> client = np.array(["a", "a", "b", "b"])
    >>> ClientStandardScaler(with_std=False).fit_transform(X, client=client)
    array([[-1., -1.],
           [ 1.,  1.],
           [-2.,  0.],
           [ 2.,  0.]])
    """

    __metadata_request__fit = {"client": True}
    __metadata_request__transform = {"client": True}
    _fits_unknown = "use the statistics of its rows"

    _parameter_constraints: ClassVar[dict] = {
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
        "unknown_client": SLOTTransformer._parameter_constraints["unknown_client"],
    }

    def __init__(
        self, *, with_mean: bool = True, with_std: bool = True, unknown_client: str = "fit"
    ) -> None:
        self.with_mean = with_mean
        self.with_std = with_std
        self.unknown_client = unknown_client

    def _statistics(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The mean (zero without ``with_mean``) and standard deviation (``ddof=0``; one
        without ``with_std``) of each column, in float64.

        A constant column gets the scale 1 (as :class:`~sklearn.preprocessing.StandardScaler`):
        it is centred and left unscaled, never divided by zero.
        """
        mean = X.mean(axis=0, dtype=np.float64)
        std = np.sqrt(np.mean(np.square(X - mean), axis=0, dtype=np.float64))
        tiny = 10 * np.finfo(np.float64).eps * np.maximum(np.abs(mean), 1.0)
        scale = np.where(std > tiny, std, 1.0) if self.with_std else np.ones_like(mean)
        return (mean if self.with_mean else np.zeros_like(mean)), scale

    def fit(self, X: Any, y: Any = None, *, client: Any = None) -> ClientStandardScaler:
        """Each client's column means and standard deviations.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows of every client.
        y : None
            Ignored.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client label of each row (``None``: one client).

        Returns
        -------
        self : object
            The fitted scaler.
        """
        self._validate_params()
        X = check_host_rows(self, X, reset=True)
        self.means_, self.scales_ = {}, {}
        for label, rows in client_rows(client, X.shape[0]).items():
            self.means_[label], self.scales_[label] = self._statistics(X[rows])
        self.clients_ = list(self.means_)
        return self

    def _client_transform(self, label: Any, X: Any) -> Callable[[Any], Any]:
        """Standardisation by ``label``'s statistics (``X``: its rows, for a client unseen in
        ``fit``; a zero mean and unit scale leave them unchanged)."""
        if label in self.means_:
            mean, scale = self.means_[label], self.scales_[label]
        elif self._fits_new_client(label, X):
            mean, scale = self._statistics(X)
        else:
            mean, scale = np.zeros(X.shape[1]), np.ones(X.shape[1])
        return partial(_standardised, mean=mean, scale=scale)

    def transform(self, X: Any, *, client: Any = None) -> np.ndarray:
        """Standardise each row by its client's statistics.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to scale.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row.  ``None`` is allowed when ``fit`` saw a single
            client.

        Returns
        -------
        X_scaled : ndarray of shape (n_samples, n_features)
            In ``X``'s floating dtype.
        """
        check_is_fitted(self, "means_")
        return self._transform_by_client(check_host_rows(self, X, reset=False), client)[0]
