"""The paper's federated partition: per-domain split, Dirichlet label skew."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_in_range, check_positive_int


@dataclass(frozen=True, eq=False)
class FederatedPartition:
    """Row indices of each client's training and test sets.

    Attributes
    ----------
    train_index, test_index : ndarray
        Rows of the data set used for training / testing.
    train_client, test_client : ndarray
        Client of each of those rows (clients are numbered ``0 .. K-1``).
    client_domain : ndarray of shape (K,)
        Domain of each client.
    class_counts : ndarray of shape (K, n_classes)
        Training rows each client keeps of each class.
    empty_clients : list of int
        Clients left with fewer than 2 training rows: they cannot summarise
        their features and take no part in training (reported, not crashed on).
    """

    train_index: np.ndarray
    train_client: np.ndarray
    test_index: np.ndarray
    test_client: np.ndarray
    client_domain: np.ndarray
    class_counts: np.ndarray
    empty_clients: list = field(default_factory=list)

    @property
    def n_clients(self) -> int:
        """The number of clients."""
        return self.client_domain.shape[0]


def dirichlet_partition(
    y: np.ndarray,
    domain: np.ndarray,
    *,
    alpha: float | None = 0.1,
    clients_per_domain: int = 1,
    test_size: float = 0.3,
    test_mask: np.ndarray | None = None,
    random_state: int | None = None,
) -> FederatedPartition:
    """Partition a multi-domain data set as in the SLOT-Align paper.

    1. Per domain, a stratified ``1 - test_size`` / ``test_size`` train/test
       split (rows of each class shuffled, the first ``round(test_size * n)``
       go to test), or, with ``test_mask``, the given split: the rows it
       marks are the test rows, all others the training rows.  With
       ``clients_per_domain = J > 1`` both splits are then dealt evenly,
       class by class, into ``J`` shards, one per client.
    2. Label skew: for each class ``c``, ``p ~ Dir(alpha * 1_K)`` over all
       ``K`` clients, and client ``k`` keeps ``floor(p_k * n_kc)`` of its own
       ``n_kc`` training rows of class ``c``.  ``alpha=None``: keep all rows
       (no label skew).
    3. Test sets stay full (each client's whole test shard).

    Parameters
    ----------
    y, domain : ndarray of shape (n_samples,)
    alpha : float or None, default=0.1
    clients_per_domain : int, default=1
    test_size : float, default=0.3
        Ignored with ``test_mask``.
    test_mask : ndarray of bool of shape (n_samples,), optional
        ``True`` for the test rows (a table's own train/test column,
        :attr:`FeatureTable.is_test`): the split is then exactly this one,
        and the sharding and the label skew act on the other rows.  It must
        mark at least one row as test and one as training.
    random_state : int or None

    Returns
    -------
    FederatedPartition

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.datasets import dirichlet_partition
    >>> y = np.tile(np.arange(4), 50); domain = np.repeat([0, 1], 100)
    >>> part = dirichlet_partition(y, domain, alpha=None, random_state=0)
    >>> part.n_clients, len(part.train_index), len(part.test_index)  # 8 of each 25 to test
    (2, 136, 64)

    The given split: the test rows are exactly the marked ones, and without
    label skew every other row trains.

    >>> is_test = np.arange(200) % 4 == 0
    >>> part = dirichlet_partition(y, domain, alpha=None, test_mask=is_test, random_state=0)
    >>> bool(np.array_equal(np.sort(part.test_index), np.flatnonzero(is_test)))
    True
    >>> bool(np.array_equal(np.sort(part.train_index), np.flatnonzero(~is_test)))
    True
    """
    y = np.asarray(y)
    domain = np.asarray(domain)
    if y.shape != domain.shape or y.ndim != 1:
        raise ValueError("y and domain must be 1-D arrays of the same length")
    check_in_range("test_size", test_size, 0.0, 1.0)
    J = check_positive_int("clients_per_domain", clients_per_domain)
    if alpha is not None:
        check_in_range("alpha", alpha, np.finfo(float).tiny, None)
    if test_mask is not None:
        test_mask = np.asarray(test_mask)
        if test_mask.dtype != bool or test_mask.shape != y.shape:
            raise ValueError(
                f"test_mask must be a boolean array with one value per row ({y.shape[0]}), "
                f"got dtype {test_mask.dtype} and shape {test_mask.shape}"
            )
        if test_mask.all() or not test_mask.any():
            which = "every" if test_mask.all() else "no"
            raise ValueError(f"test_mask marks {which} row as a test row")
    rng = np.random.default_rng(random_state)
    classes = np.unique(y)
    domains = np.unique(domain)
    K = domains.shape[0] * J
    client_domain = np.repeat(domains, J)
    # own[k][c]: the training rows client k could keep of class c, shuffled
    own: list[list[np.ndarray]] = [[] for _ in range(K)]
    test_rows: list[list[np.ndarray]] = [[] for _ in range(K)]
    for d_i, d in enumerate(domains):
        for c in classes:
            in_cell = (domain == d) & (y == c)
            if test_mask is None:
                rows = rng.permutation(np.flatnonzero(in_cell))
                n_test = round(test_size * rows.shape[0])
                train, test = rows[n_test:], rows[:n_test]
            else:
                train = rng.permutation(np.flatnonzero(in_cell & ~test_mask))
                test = rng.permutation(np.flatnonzero(in_cell & test_mask))
            test_shards = np.array_split(test, J)
            for j, shard in enumerate(np.array_split(train, J)):
                own[d_i * J + j].append(rng.permutation(np.sort(shard)))
                test_rows[d_i * J + j].append(np.sort(test_shards[j]))
    class_counts = np.zeros((K, classes.shape[0]), dtype=np.int64)
    for c_i in range(classes.shape[0]):
        class_counts[:, c_i] = [own[k][c_i].shape[0] for k in range(K)]
        if alpha is not None:
            class_counts[:, c_i] = np.floor(rng.dirichlet(np.full(K, alpha)) * class_counts[:, c_i])
        for k in range(K):
            own[k][c_i] = own[k][c_i][: class_counts[k, c_i]]
    train_index = np.concatenate([np.concatenate(own[k]) for k in range(K)]).astype(np.intp)
    train_client = np.repeat(np.arange(K), class_counts.sum(axis=1))
    test_parts = [np.concatenate(test_rows[k]) for k in range(K)]
    test_index = np.concatenate(test_parts).astype(np.intp)
    test_client = np.repeat(np.arange(K), [p.shape[0] for p in test_parts])
    empty = [int(k) for k in np.flatnonzero(class_counts.sum(axis=1) < 2)]
    return FederatedPartition(
        train_index, train_client, test_index, test_client, client_domain, class_counts, empty
    )
