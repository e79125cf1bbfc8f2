"""A small synthetic federated problem with domain shift and label shift."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from .._validation import check_in_range, check_positive_int


@dataclass(frozen=True, eq=False)
class FederatedDataset:
    """Rows with labels, client of each row, and the ground truth distortions.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    client : ndarray of shape (n_samples,)
    distortions : list of (ndarray, ndarray)
        Client ``k`` observes ``D_k x + t_k`` for a latent, shift-free ``x``;
        this lists ``(D_k, t_k)``.
    class_means : ndarray of shape (n_classes, n_features)
        Latent class means.
    """

    X: np.ndarray
    y: np.ndarray
    client: np.ndarray
    distortions: list
    class_means: np.ndarray


def make_federated_classification(
    n_clients: int = 3,
    n_samples_per_client: int = 300,
    n_features: int = 8,
    n_classes: int = 4,
    *,
    alpha: float | None = 0.5,
    domain_shift: float = 1.0,
    class_sep: float = 2.5,
    random_state: int | np.random.RandomState | None = None,
) -> FederatedDataset:
    """Generate a federated classification problem with known shifts.

    Latent rows are ``x ~ N(class_sep * m_c, I)`` with random unit class
    directions ``m_c``.  Label shift: client ``k`` draws its class proportions
    from ``Dir(alpha * 1)`` (``alpha=None``: uniform classes).  Domain shift:
    client ``k`` observes ``D_k x + t_k`` with ``D_k = Q_k diag(s_k)``, a random
    rotation ``Q_k`` scaled by ``s_k = exp(domain_shift * N(0, 0.3^2))``, mixed
    with the identity by ``domain_shift``, and ``t_k ~ N(0, domain_shift^2 I)``.
    ``domain_shift=0`` gives identical clients.

    Parameters
    ----------
    n_clients, n_samples_per_client, n_features, n_classes : int
    alpha : float or None, default=0.5
        Dirichlet concentration of the label skew; smaller is more skewed.
    domain_shift : float, default=1.0
    class_sep : float, default=2.5
    random_state : int, RandomState or None

    Returns
    -------
    FederatedDataset

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> data = make_federated_classification(n_clients=2, random_state=0)
    >>> data.X.shape, sorted(set(data.client.tolist()))
    ((600, 8), [0, 1])
    """
    rng = check_random_state(random_state)
    n_clients = check_positive_int("n_clients", n_clients)
    n_per = check_positive_int("n_samples_per_client", n_samples_per_client)
    m = check_positive_int("n_features", n_features)
    n_classes = check_positive_int("n_classes", n_classes)
    shift = check_in_range("domain_shift", domain_shift, 0.0, None)
    if alpha is not None:
        check_in_range("alpha", alpha, np.finfo(float).tiny, None)
    directions = rng.normal(size=(n_classes, m))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    class_means = class_sep * directions
    Xs, ys, distortions = [], [], []
    for _ in range(n_clients):
        if alpha is None:
            p = np.full(n_classes, 1.0 / n_classes)
        else:
            p = rng.dirichlet(np.full(n_classes, alpha))
        y = rng.choice(n_classes, size=n_per, p=p)
        latent = class_means[y] + rng.normal(size=(n_per, m))
        H = rng.normal(scale=0.5 * shift / np.sqrt(m), size=(m, m))
        w, V = np.linalg.eigh(H + H.T)
        D = (V * np.exp(w)) @ V.T
        t = shift * rng.normal(size=m)
        Xs.append(latent @ D.T + t)
        ys.append(y)
        distortions.append((D, t))
    client = np.repeat(np.arange(n_clients), n_per)
    return FederatedDataset(np.vstack(Xs), np.concatenate(ys), client, distortions, class_means)
