"""A private client's release plan: it answers the requests its plan declares, nothing else.

A client under a privacy budget (:class:`~skslot.protocol.ClientParty`'s
``privacy``) is a wrapper around its stages' client steps
(:func:`skslot.privacy.client.private_answer`): every request is first matched against the plan
(:meth:`~skslot.protocol.stages.Stage.private_problem`, which reads the
request, the client's budget and its state of the run, never its rows).  A
request outside the plan (class sums, a within-class summary, a validation
split, validation or screening counts, a refit, a second local head or
evaluation, another budget) gets :func:`refusal`: one reply per stage,
whatever the client's data, with nothing charged to its run or lifetime
budget; why it refused goes to the client's own log
(``logging.getLogger("skslot.protocol.client")``), never to the server.  A
step that fails after the request was admitted also answers with the
refusal, its error logged locally.

Its rows are made safe for the releases when the party is built
(:func:`null_rows`): a row with a non-finite value or a label outside the
run's class set becomes the null row (zero features, the first class), as
replacing one row by another is what the budget covers; an error naming it
would tell the server something exact.
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np

from ._accounting import PrivacyBudgetExceeded

#: The client's own log: nothing logged here reaches the server.
logger = logging.getLogger("skslot.protocol.client")


class RequestRefused(PrivacyBudgetExceeded):
    """A private client's refusal of a request outside its release plan.

    Its message names the stage alone (:func:`refusal`): the same reply
    whatever the client's rows, its files or why it refused.
    """


def refusal(stage: str) -> RequestRefused:
    """The one refusal a private client answers a request of ``stage`` with.

    Parameters
    ----------
    stage : str
        The request's stage.

    Returns
    -------
    RequestRefused

    Examples
    --------
    >>> from skslot.privacy import refusal
    >>> str(refusal("upload"))
    "refused: this client answers only the releases of its privacy plan ('upload' request)"
    """
    return RequestRefused(
        f"refused: this client answers only the releases of its privacy plan ({stage!r} request)"
    )


def rows_digest(X: np.ndarray, y: np.ndarray) -> str:
    """The digest of a client's training rows and labels (kept, never sent).

    Its test count is kept with the request it answered, so a restart
    repeats it whatever its test rows; every other release is made of its
    training rows.

    Parameters
    ----------
    X : ndarray of shape (n, m)
    y : ndarray of shape (n,)

    Returns
    -------
    str
    """
    digest = hashlib.sha256()
    for part in (X, y):
        array = np.asarray(part)
        array = np.ascontiguousarray(array.astype(str) if array.dtype == object else array)
        digest.update(repr((array.dtype.str, array.shape)).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def null_rows(
    X: np.ndarray, y: np.ndarray, classes: np.ndarray, *, part: str = "training"
) -> tuple[np.ndarray, np.ndarray]:
    """A private client's rows, each with a non-finite value or a label outside ``classes``
    made the null row (zero features, the first class).

    Parameters
    ----------
    X : ndarray of shape (n, m)
    y : ndarray of shape (n,)
    classes : ndarray
        The run's class set.
    part : str, default="training"
        What the rows are, named in the client's own log.

    Returns
    -------
    X, y : ndarray
        ``X`` and ``y`` themselves where every row is fine, copies otherwise
        (the inputs are never modified).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.privacy import null_rows
    >>> X, y = null_rows(np.array([[1.0, np.nan], [2.0, 3.0]]), np.array([1, 7]), np.array([0, 1]))
    >>> X.tolist(), y.tolist()
    ([[0.0, 0.0], [0.0, 0.0]], [0, 0])
    """
    X = np.asarray(X)
    y = np.asarray(y)
    outside = ~np.isin(y, classes)
    nonfinite = ~np.isfinite(X).all(axis=1) if X.dtype.kind in "fc" else np.zeros_like(outside)
    null = outside | nonfinite
    if not null.any():
        return X, y
    X, y = X.copy(), y.copy()
    X[null], y[null] = 0, classes[0]
    logger.warning(  # the client's own log: never sent to the server
        "skslot: %d %s row(s) of this private client have a label outside the run's class "
        "set and %d a non-finite value; it does not tell the server, so they enter as null "
        "rows (zero features, class %r): set its labels, its rows or the run's classes right",
        int(outside.sum()),
        part,
        int((nonfinite & ~outside).sum()),
        classes[0],
    )
    return X, y
