"""Warnings of skslot's estimators."""

from __future__ import annotations

import warnings

from ._validation import ROUTING_HINT

__all__ = ["SingleClientWarning"]


class SingleClientWarning(UserWarning):
    """A fit saw one client only, so the reference is that client and alignment does nothing.

    Raised when client labels were forgotten (``client=None``, or metadata
    routing off in a Pipeline): every row then counts as one client, whose
    map onto itself is the identity.
    """


def warn_single_client(estimator: str, *, stacklevel: int = 2) -> None:
    """Warn that ``estimator`` was fitted on a single client (see :class:`SingleClientWarning`)."""
    warnings.warn(
        f"{estimator} was fitted on a single client (client=None or a single label), so the "
        "reference is that client's own Gaussian and the alignment is the identity: transform "
        "returns its rows unchanged. Pass client=<the client of each row> to fit. " + ROUTING_HINT,
        SingleClientWarning,
        stacklevel=stacklevel + 1,
    )
