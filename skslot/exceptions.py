"""Warnings of skslot's estimators."""

from __future__ import annotations

import warnings

from ._validation import ROUTING_HINT

__all__ = ["InSampleValidationWarning", "SingleClientWarning"]


class SingleClientWarning(UserWarning):
    """A fit saw one client only, so the reference is that client and alignment does nothing.

    Raised when client labels were forgotten (``client=None``, or metadata
    routing off in a Pipeline): every row then counts as one client, whose
    map onto itself is the identity.
    """


class InSampleValidationWarning(UserWarning):
    """The federated choice of ``tau`` validates on rows its maps were estimated from.

    Each client's map is estimated from all its rows, the held-out ones
    included, so at strong transport its validation rows are scored where the
    map fits them best, not as a new row would be.  With the paper's summary
    the bias goes either way and moved one choice of the three measured
    (docs/results/class_out_selection.md); with within-class summaries
    (``covariance="within"``) the class-centred maps fit their own rows
    closely and the validation is biased, mostly towards strong transport:
    on Office-Caltech10's 800-d counts the search chose ``tau = 1`` in every
    seed without skew (FedCGS, -3.5 points) and lost up to 6.9 points under
    skew (FedPFT; docs/results/summary_kind_selection.md).
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
