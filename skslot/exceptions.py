"""The errors and warnings of skslot's estimators and data types."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._validation import ROUTING_HINT

__all__ = [
    "ClassCoverageWarning",
    "InvalidSummaryError",
    "SingleClientWarning",
    "SmallClientWarning",
    "UnknownClientWarning",
]

#: The warnings :func:`warn_once` has shown in this process, by (category, text).
_SHOWN: set[tuple[type[Warning], str]] = set()


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


class ClassCoverageWarning(UserWarning):
    """A class only one client's rows trained.

    The head learns the class from one domain, so the rows of it that other
    clients will meet may go unrecognised where every class of each domain is
    served, and each other client's own label mix gives it almost no weight.
    """


def _action(category: type[Warning], text: str, module: str, lineno: int) -> str:
    """The action of the first warnings filter that matches, as :mod:`warnings` matches them
    (message, category, module and line), else the default action."""
    for action, message, kind, mod, line in warnings.filters:
        if (
            (message is None or message.match(text))
            and issubclass(category, kind)
            and (mod is None or mod.match(module))
            and line in (0, lineno)
        ):
            return action
    return str(getattr(warnings, "defaultaction", "default"))


def warn_once(text: str, category: type[Warning], *, stacklevel: int = 2) -> None:
    """``warnings.warn``, shown once per process for each text under the default filters.

    Python shows a warning once per place it is issued, but forgets what it
    showed whenever a warnings filter changes (any ``catch_warnings`` block,
    which a fit may enter), so a cross-validation would repeat one cause for
    every fold and candidate.  Where the filters say ``"always"``, ``"error"``
    or ``"ignore"`` (``pytest.warns`` among them) the warning goes to
    :func:`warnings.warn` as it is.  A warning recorded under the default
    filters (``catch_warnings(record=True)`` without ``"always"``) counts as
    shown.

    Parameters
    ----------
    text : str
    category : type of Warning
    stacklevel : int, default=2
        The caller's frame the warning points at, counted from the caller of
        this function.
    """
    try:
        frame = sys._getframe(stacklevel)
        module, lineno = frame.f_globals.get("__name__", "<string>"), frame.f_lineno
    except ValueError:  # a shallower stack: warnings.warn points at the outermost frame
        module, lineno = "sys", 0
    if _action(category, text, module, lineno) in ("default", "module", "once"):
        if (category, text) in _SHOWN:
            return
        _SHOWN.add((category, text))
    warnings.warn(text, category, stacklevel=stacklevel + 1)


def lone_classes(client_counts: Mapping[Any, np.ndarray], classes: np.ndarray) -> dict[Any, Any]:
    """The classes exactly one client holds rows of, with that client.

    Parameters
    ----------
    client_counts : mapping of client to ndarray of shape (C,)
        Each client's rows of each class.
    classes : ndarray of shape (C,)

    Returns
    -------
    dict
        Class to client; empty with fewer than two clients.

    Examples
    --------
    >>> import numpy as np
    >>> lone_classes({"a": np.array([3, 1, 0]), "b": np.array([2, 0, 0])}, np.array([7, 8, 9]))
    {8: 'a'}
    """
    classes = np.asarray(classes)
    for client, counts in client_counts.items():
        if np.shape(counts) != classes.shape:
            raise ValueError(
                f"client {client!r} has {np.size(counts)} class counts for {classes.size} classes"
            )
    if len(client_counts) < 2:
        return {}
    labels = list(client_counts)
    held = np.stack([np.asarray(client_counts[c]) > 0 for c in labels])
    lone = np.flatnonzero(held.sum(axis=0) == 1)
    owners = np.argmax(held[:, lone], axis=0)
    return dict(zip(np.asarray(classes)[lone].tolist(), [labels[k] for k in owners], strict=True))


def lone_text(
    lone: Mapping[Any, Any], name: Callable[[Any], str] = lambda k: f"client {k!r}", most: int = 5
) -> str:
    """``"class 3 by client 'a', ..."``: :func:`lone_classes` for a message."""
    return shown_labels([f"class {c!r} by {name(k)}" for c, k in lone.items()], most, str)


def warn_lone_classes(
    estimator: str,
    client_counts: Mapping[Any, np.ndarray],
    classes: np.ndarray,
    *,
    stacklevel: int = 2,
) -> None:
    """Warn, once per cause, of the classes only one client trained (:class:`ClassCoverageWarning`).

    Parameters
    ----------
    estimator : str
        The name of the estimator, as the warning shows it.
    client_counts : mapping of client to ndarray of shape (C,)
    classes : ndarray of shape (C,)
    stacklevel : int, default=2
    """
    lone = lone_classes(client_counts, classes)
    if lone:
        warn_once(
            f"{estimator}: class(es) trained by one client only ({lone_text(lone)}): the head "
            "learns each from that client's domain, so other clients' rows of it may go "
            "unrecognised where every class of each domain is served",
            ClassCoverageWarning,
            stacklevel=stacklevel + 1,
        )


def shown_labels(labels: list, most: int = 5, show: Callable[[Any], str] = repr) -> str:
    """Client labels for a message: the first ``most``, and how many in all.

    Parameters
    ----------
    labels : list
        The labels.
    most : int, default=5
        How many to name.
    show : callable, default=repr
        How each is written.

    Returns
    -------
    str
    """
    named = ", ".join(show(label) for label in labels[:most])
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
    warn_once(
        f"{estimator} was fitted on a single client (client=None or a single label), so the "
        "reference is that client's own Gaussian and the alignment is the identity: transform "
        "returns its rows unchanged. Pass client=<the client of each row> to fit. " + ROUTING_HINT,
        SingleClientWarning,
        stacklevel=stacklevel + 1,
    )
