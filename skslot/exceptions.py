"""The errors and warnings of skslot's estimators and data types."""

from __future__ import annotations

import warnings

from ._validation import ROUTING_HINT

__all__ = [
    "InvalidSummaryError",
    "SingleClientWarning",
    "SmallClientWarning",
    "UnknownClientWarning",
]


class InvalidSummaryError(ValueError):
    """The values given for a Gaussian summary are invalid.

    Raised by :class:`~skslot.GaussianSummary` when its count, mean,
    covariance, shrinkage or client label fails a check (a covariance that is
    not positive definite, a count below 2, non-finite values, ...).  The
    decoding error :class:`~skslot.wire.SummaryFormatError` derives from it,
    so ``except InvalidSummaryError`` also catches a payload that does not
    decode to a valid summary.
    """


class SingleClientWarning(UserWarning):
    """A fit saw one client only, so the reference is that client and alignment does nothing.

    Raised when client labels were forgotten (``client=None``, or metadata
    routing off in a Pipeline): every row then counts as one client, whose
    map onto itself is the identity.
    """


class SmallClientWarning(UserWarning):
    """A client holds no more rows than features: its covariance is mostly shrinkage.

    With ``n <= m`` rows in ``m`` dimensions the sample covariance has rank
    below ``m``; the Ledoit-Wolf summary is then mostly its scaled-identity
    target, and the client's map carries little beyond its mean.
    """


class UnknownClientWarning(UserWarning):
    """``transform`` met clients ``fit`` did not see (``unknown_client`` says what it did)."""


def shown_labels(labels: list, most: int = 5) -> str:
    """Client labels for a message: the first ``most``, and how many in all.

    Parameters
    ----------
    labels : list
        The labels.
    most : int, default=5
        How many to name.

    Returns
    -------
    str
    """
    named = ", ".join(repr(label) for label in labels[:most])
    return named + (f" ... ({len(labels)} in all)" if len(labels) > most else "")


def warn_single_client(estimator: str, *, stacklevel: int = 2) -> None:
    """Warn that ``estimator`` was fitted on a single client (see :class:`SingleClientWarning`).

    Parameters
    ----------
    estimator : str
        The name of the estimator, as the warning shows it.
    stacklevel : int, default=2
        The caller's frame the warning points at, counted from the caller
        of this function.
    """
    warnings.warn(
        f"{estimator} was fitted on a single client (client=None or a single label), so the "
        "reference is that client's own Gaussian and the alignment is the identity: transform "
        "returns its rows unchanged. Pass client=<the client of each row> to fit. " + ROUTING_HINT,
        SingleClientWarning,
        stacklevel=stacklevel + 1,
    )
