"""A head's accuracy in each of the two ways a federation is judged.

``"domain"`` (the paper's test): each client's test rows are its domain's whole
test split, every class served, and the head predicts with the federation's
label mix.  ``"own mix"``: each client's future rows follow its own training
mix; the head predicts with the client's own prior where it takes one
(:mod:`skslot.label_mix`), and the client's test rows are weighted to its
training mix (:func:`~skslot.label_mix.own_mix_accuracy`: no rows drawn, no
sampling noise).  Every study of the benchmark scores its heads here, so the
two cases mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from skslot.label_mix import own_mix_accuracy
from skslot.label_shift import class_counts
from skslot.privacy._statistics import rounded_counts

__all__ = [
    "CASES",
    "CASE_TITLES",
    "accuracy_by_case",
    "case_predictions",
    "macro_accuracy_by_case",
    "own_mix_rows",
    "training_mixes",
]

#: The two ways a federation is judged: each client's test rows are its domain's whole test
#: split, every class served ("domain", the paper's), or follow its own training mix ("own mix").
CASES = ("domain", "own mix")
#: Each case as a table names it, with how its test rows are drawn.
CASE_TITLES = {
    "own mix": "Each client's own label mix (test rows weighted to its training mix; "
    "label_mix='client')",
    "domain": "Every class of each domain (its whole test split; label_mix='federation', "
    "the paper's)",
}


def training_mixes(
    y: np.ndarray, client: np.ndarray, classes: np.ndarray
) -> dict[Hashable, np.ndarray]:
    """Each client's class counts on its training rows: its label mix in the own-mix case.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        The training rows' labels.
    client : ndarray of shape (n_samples,)
        The training rows' clients.
    classes : ndarray of shape (C,)

    Returns
    -------
    dict
        Client to its counts, in the order of ``classes``.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot_bench import training_mixes
    >>> training_mixes(np.array([0, 0, 1]), np.array([5, 5, 7]), np.array([0, 1]))
    {5: array([2, 0]), 7: array([0, 1])}
    """
    return {
        k.item() if isinstance(k, np.generic) else k: class_counts(y[client == k], classes)
        for k in np.unique(client)
    }


def case_predictions(head: Any, X: np.ndarray, client: np.ndarray) -> dict[str, np.ndarray]:
    """``head``'s predictions of ``X`` in each case.

    The federation's mix for ``"domain"``; each row's client's own mix for
    ``"own mix"`` where the head takes one (a ``label_mix`` parameter, as
    skslot's heads and :class:`~skslot.label_mix.ClientPriorClassifier`
    have); a head without one predicts both cases alike.  The head's
    ``label_mix`` is restored.

    Parameters
    ----------
    head : fitted classifier
    X : ndarray of shape (n_samples, n_features)
        The test rows, aligned as the head's training rows were.
    client : ndarray of shape (n_samples,)
        Each row's client.

    Returns
    -------
    dict
        Case (:data:`CASES`) to predictions.
    """
    mix = getattr(head, "label_mix", None)
    if mix is None:
        pred = head.predict(X)
        return {"domain": pred, "own mix": pred}
    try:
        domain = head.set_params(label_mix="federation").predict(X)
        own = head.set_params(label_mix="client").predict(X, client=client)
    finally:
        head.set_params(label_mix=mix)
    return {"domain": domain, "own mix": own}


def accuracy_by_case(
    predictions: Mapping[str, np.ndarray],
    y: np.ndarray,
    client: np.ndarray,
    client_domain: np.ndarray,
    mixes: Mapping[Hashable, np.ndarray],
    classes: np.ndarray,
) -> dict[str, dict[int, float]]:
    """Each domain's accuracy (a fraction) in each case.

    ``"domain"``: the accuracy of ``predictions["domain"]`` on the domain's
    test rows.  ``"own mix"``: the mean over the domain's clients of the
    accuracy of ``predictions["own mix"]`` on the client's test rows weighted
    to its training mix; a domain none of whose clients has a mix is left out.

    Parameters
    ----------
    predictions : mapping of case to ndarray of shape (n_samples,)
        :func:`case_predictions`.
    y : ndarray of shape (n_samples,)
        The test rows' labels.
    client : ndarray of int of shape (n_samples,)
        The test rows' clients (indices into ``client_domain``).
    client_domain : ndarray of int of shape (n_clients,)
        Each client's domain.
    mixes : mapping of client to ndarray of shape (C,)
        :func:`training_mixes`.
    classes : ndarray of shape (C,)

    Returns
    -------
    dict
        Case to {domain: accuracy}.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot_bench import accuracy_by_case
    >>> pred = np.array([0, 0, 0, 0])
    >>> y, client = np.array([0, 0, 1, 1]), np.zeros(4, dtype=int)
    >>> accuracy_by_case({"domain": pred, "own mix": pred}, y, client, np.array([0]),
    ...                  {0: np.array([3, 1])}, np.array([0, 1]))
    {'domain': {0: 0.5}, 'own mix': {0: 0.75}}
    """
    domain_of_row = client_domain[client]
    own = own_mix_accuracy(predictions["own mix"] == y, y, client, mixes, classes)
    by_case: dict[str, dict[int, float]] = {case: {} for case in CASES}
    for d in np.unique(domain_of_row):
        rows = domain_of_row == d
        by_case["domain"][int(d)] = float(np.mean(predictions["domain"][rows] == y[rows]))
        held = [own[k] for k in range(len(client_domain)) if k in own and client_domain[k] == d]
        if held:
            by_case["own mix"][int(d)] = float(np.mean(held))
    return by_case


def macro_accuracy_by_case(
    head: Any,
    X: np.ndarray,
    y: np.ndarray,
    client: np.ndarray,
    client_domain: np.ndarray,
    mixes: Mapping[Hashable, np.ndarray],
    classes: np.ndarray,
) -> dict[str, float]:
    """``head``'s macro accuracy over domains, in %, in each case.

    :func:`case_predictions` scored by :func:`accuracy_by_case`, averaged
    over the domains.

    Parameters
    ----------
    head : fitted classifier
    X : ndarray of shape (n_samples, n_features)
        The test rows, aligned as the head's training rows were.
    y, client, client_domain, mixes, classes
        As in :func:`accuracy_by_case`.

    Returns
    -------
    dict
        Case (:data:`CASES`) to macro accuracy in %.
    """
    by_case = accuracy_by_case(
        case_predictions(head, X, client), y, client, client_domain, mixes, classes
    )
    return {case: 100 * float(np.mean(list(acc.values()))) for case, acc in by_case.items()}


def own_mix_rows(
    y: np.ndarray,
    mix: np.ndarray,
    classes: np.ndarray,
    n_rows: int,
    random_state: int | Sequence[int] | np.random.Generator | None = None,
) -> np.ndarray:
    """A client's test rows drawn with its own label mix, for runs that count rows.

    Where the accuracy is counted on the rows a client holds (the protocol's
    evaluation stage: each client reports its correct predictions), the
    own-mix case gives each client test rows drawn from its domain's test
    split with its training class proportions: ``n_rows`` rows, each class's
    share rounded by largest remainder, drawn with replacement within the
    class.  (:func:`accuracy_by_case` weights the rows instead, without
    sampling noise, where the predictions are at hand.)

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        The labels of the rows to draw from (the domain's test split).
    mix : ndarray of shape (C,)
        The client's class counts, in the order of ``classes``.
    classes : ndarray of shape (C,)
    n_rows : int
        How many rows to draw.
    random_state : int, sequence of int, Generator or None, default=None
        Seeds :func:`numpy.random.default_rng`.

    Returns
    -------
    ndarray of int of shape (n_rows,)
        Indices into ``y``.

    Raises
    ------
    ValueError
        If the mix has no row, or gives a row to a class ``y`` has no row of.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot_bench import own_mix_rows
    >>> y = np.array([0, 0, 0, 1, 1, 1])
    >>> rows = own_mix_rows(y, np.array([3, 1]), np.array([0, 1]), 8, random_state=0)
    >>> np.bincount(y[rows])
    array([6, 2])
    """
    mix = np.asarray(mix, dtype=np.float64)
    if mix.sum() <= 0:
        raise ValueError("the client's label mix has no row")
    counts = rounded_counts(mix, n_rows).astype(int)  # each class's share, largest remainder
    rng = np.random.default_rng(random_state)
    drawn = []
    for c, count in zip(classes, counts, strict=True):
        if count == 0:
            continue
        pool = np.flatnonzero(y == c)
        if pool.size == 0:
            raise ValueError(f"the label mix holds class {c}, of which there is no row to draw")
        drawn.append(rng.choice(pool, size=count, replace=True))
    return np.concatenate(drawn)
