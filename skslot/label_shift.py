"""How far each client's label mix is from the federation's, from class counts alone.

SLOT's map moves a client's features towards the reference.  Under label
shift part of what separates a client's Gaussian from the reference is its
label mix, which the map should leave alone; a client whose classes are
distributed like the federation's has only domain shift to remove.  The
*label-shift rule* scales each client's ``tau`` by the total-variation
distance between its class proportions ``p_k`` and the federation's ``p``
(the pooled counts over all clients)::

    d_k = TV(p_k, p) = 1/2 sum_c |p_kc - p_c|,     tau_k = tau * d_k,

so that a client holding the federation's mix is not moved and one holding
a single class (of a federation balanced over many) moves almost ``tau``.
Only class counts are needed, which statistics heads (FedCGS, FedPFT)
upload anyway; measured in ``benchmarks/label_aware.py``
(docs/results/label_aware.md).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

__all__ = ["class_counts", "class_sums", "label_shift_distances"]

#: How each client's tau follows from the run's: the same for all, or scaled by label shift.
CLIENT_TAU_RULES = ("uniform", "label-shift")


def class_counts(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Rows of each of ``classes`` among the labels ``y`` (int64, zero for absent classes).

    Raises ``ValueError`` naming labels that are not in ``classes``.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels.
    classes : array-like of shape (n_classes,)
        The class set, sorted.

    Returns
    -------
    counts : ndarray of shape (n_classes,)
        Rows of each class, in the order of ``classes``.
    """
    y, classes = np.asarray(y), np.asarray(classes)
    position = np.searchsorted(classes, y)
    position = np.clip(position, 0, max(classes.shape[0] - 1, 0))
    if classes.shape[0] == 0 or np.any(classes[position] != y):  # sorted only to name them
        extra = np.setdiff1d(np.unique(y), classes)
        raise ValueError(f"labels {extra.tolist()} are not among the classes {classes.tolist()}")
    return np.bincount(position, minlength=classes.shape[0]).astype(np.int64)


def class_sums(X: np.ndarray, y: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of each of ``classes`` among the labels ``y``, and the sums of those rows.

    What a client's class means are made from (the heads' statistics, a
    domain offset measured within classes, :func:`skslot.label_mix.domain_offsets`).
    A kernel: every label of ``y`` must be one of ``classes`` (unchecked).

    Parameters
    ----------
    X : array-like of shape (n_samples, m)
        The rows.
    y : array-like of shape (n_samples,)
        Their labels, each one of ``classes``.
    classes : ndarray of shape (n_classes,)
        The class set, sorted.

    Returns
    -------
    counts : ndarray of shape (n_classes,) of int64
    sums : ndarray of shape (n_classes, m) of float64

    Examples
    --------
    >>> import numpy as np
    >>> counts, sums = class_sums(np.array([[1.0], [2.0], [4.0]]), np.array([0, 2, 2]),
    ...                           np.array([0, 1, 2]))
    >>> counts.tolist(), sums.ravel().tolist()
    ([1, 0, 2], [1.0, 0.0, 6.0])
    """
    codes = np.searchsorted(classes, y)
    onehot = (codes[:, None] == np.arange(classes.shape[0])).astype(np.float64)
    counts = np.bincount(codes, minlength=classes.shape[0]).astype(np.int64)
    return counts, onehot.T @ np.asarray(X, dtype=np.float64)


def label_shift_distances(
    counts: Mapping[Hashable, np.ndarray], weights: Mapping[Hashable, float] | None = None
) -> dict[Hashable, float]:
    """Each client's total-variation distance to the federation's class proportions.

    Parameters
    ----------
    counts : mapping of client to ndarray of shape (n_classes,)
        Each client's class counts, over one shared class order.
    weights : mapping of client to float, optional
        Each client's weight in the federation's proportions ``p = sum_k w_k
        p_k / sum_k w_k`` (default: its row count, so ``p`` is the pooled
        proportions); the server passes the weights it capped.

    Returns
    -------
    distances : dict
        Client to ``1/2 sum_c |p_kc - p_c|`` in ``[0, 1)``, with ``p`` the
        proportions of the summed counts (0 when there is one client).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.label_shift import label_shift_distances
    >>> d = label_shift_distances({"a": np.array([10, 0]), "b": np.array([0, 10])})
    >>> {k: float(v) for k, v in d.items()}
    {'a': 0.5, 'b': 0.5}
    """
    if not counts:
        raise ValueError("label_shift_distances needs the class counts of at least one client")
    table = np.stack([np.asarray(c) for c in counts.values()])
    if table.ndim != 2 or not np.issubdtype(table.dtype, np.integer):
        raise ValueError(
            "class counts must be integer arrays of one length per client, got "
            f"an array of dtype {table.dtype} and shape {table.shape}"
        )
    if np.any(table < 0):
        raise ValueError("class counts must be >= 0")
    if np.any(table > 2**53):
        raise ValueError("class counts must be at most 2**53")
    table = table.astype(np.float64)  # exact up to 2**53: no integer wrap-around in the sums
    sizes = table.sum(axis=1)
    if np.any(sizes == 0):
        empty = [k for k, n in zip(counts, sizes, strict=True) if n == 0]
        raise ValueError(f"clients {empty} have no rows, so no class proportions")
    own = table / sizes[:, None]
    if weights is None:
        federation = table.sum(axis=0) / sizes.sum()
    else:
        w = np.array([float(weights[k]) for k in counts])
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights must be finite, >= 0 and not all zero")
        federation = w @ own / w.sum()
    distances = np.clip(0.5 * np.abs(own - federation).sum(axis=1), 0.0, 1.0)
    return {k: float(d) for k, d in zip(counts, distances, strict=True)}
