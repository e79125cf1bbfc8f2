"""Fitting heads from the clients' messages: the candidates, the leave-one-out heads, the final.

The server's steps fit heads from what the clients sent (statistics of
unaligned rows pushed through each client's map, or local heads); the
clients' steps make those messages.  The strategies
(:mod:`skslot.heads._strategy`) call these functions for the protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import clone

from ..maps import GaussianMap

if TYPE_CHECKING:
    from ..selection import Candidate

#: A private client's release of the statistics of its rows ``(X, y, classes)``
#: (:func:`skslot.privacy.released_statistics` under its ledger), in place of the head's own.
StatisticsRelease = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]

__all__ = [
    "Head",
    "StatisticsRelease",
    "candidate_heads",
    "head_without",
    "local_heads",
    "refit_head",
    "statistics_of_parts",
]


class Head(Protocol):
    """What the fitting steps and the strategies ask of a head
    (:class:`~skslot.heads.OneShotHead` is one): its clients' statistics, a fit from
    them, and scikit-learn's parameters (a template is cloned, never fitted)."""

    def client_statistics(
        self, X: Any, y: Any, classes: ArrayLike, *, client_index: int = 0
    ) -> Any:
        """One client's statistics of its rows."""

    def fit_from_statistics(
        self, statistics: Sequence, classes: ArrayLike, *, maps: Sequence | None = None
    ) -> Any:
        """The head fitted from the clients' statistics (aligned by ``maps``)."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The head's parameters."""

    def set_params(self, **params: Any) -> Any:
        """The head with ``params`` set."""


#: A head, typed as given: each step returns heads of its template's class.
HeadT = TypeVar("HeadT", bound=Head)


def candidate_heads(
    head: HeadT,
    candidates: Sequence[Candidate],
    statistics: Sequence | Mapping[float, Sequence],
    classes: np.ndarray,
    maps: Sequence[GaussianMap] | None = None,
) -> list[HeadT]:
    """Server step: one fitted head per candidate.

    Parameters
    ----------
    head : OneShotHead
        The head template (not modified).
    candidates : sequence of Candidate
    statistics : sequence, or mapping of tau to sequence
        For a head that aligns statistics (FedCGS, FedPFT): each client's
        statistics of its unaligned fitting rows, and ``maps``, each client's
        full map; the server pushes them through ``T_k^tau``.  For O-FedAvg: a
        mapping from each ``tau`` to the clients' local heads trained at it.
    classes : ndarray
        The global class set.
    maps : sequence of GaussianMap, optional
        Each client's full map (``tau = 1``), for statistics of unaligned rows.

    Returns
    -------
    list of OneShotHead
        One fitted clone of ``head`` per candidate, in order.
    """
    fitted = []
    for candidate in candidates:
        model = clone(head).set_params(**candidate.params)
        if isinstance(statistics, Mapping):
            model.fit_from_statistics(statistics[candidate.tau], classes)
        else:
            model.fit_from_statistics(statistics, classes, maps=_at(maps, candidate.tau))
        fitted.append(model)
    return fitted


def head_without(
    head: HeadT,
    candidate: Candidate,
    statistics: Sequence | Mapping[float, Sequence],
    classes: np.ndarray,
    k: int,
    maps: Sequence[GaussianMap] | None = None,
) -> HeadT:
    """Server step: the head at ``candidate`` on every client's statistics but the ``k``-th.

    The screening's heads (:mod:`skslot.defence.screening`).

    Parameters
    ----------
    head : OneShotHead
        The head template (not modified).
    candidate : Candidate
    statistics : sequence, or mapping of tau to sequence
        As in :func:`candidate_heads` (for O-FedAvg, the local heads at
        ``candidate.tau``).
    classes : ndarray
        The global class set.
    k : int
        The position of the client left out.
    maps : sequence of GaussianMap, optional
        As in :func:`candidate_heads`, one per client (the ``k``-th is not used).

    Returns
    -------
    OneShotHead
        The fitted head without client ``k``.
    """
    if isinstance(statistics, Mapping):
        kept = {candidate.tau: _without(statistics[candidate.tau], k)}
        return candidate_heads(head, [candidate], kept, classes)[0]
    rest = None if maps is None else _without(maps, k)
    return candidate_heads(head, [candidate], _without(statistics, k), classes, rest)[0]


def _without(values: Sequence, k: int) -> list:
    return [v for i, v in enumerate(values) if i != k]


def refit_head(
    head: HeadT,
    candidate: Candidate,
    classes: np.ndarray,
    statistics: Sequence,
    validation_statistics: Sequence | None = None,
    maps: Sequence[GaussianMap] | None = None,
) -> HeadT:
    """Server step: the final head at the chosen candidate, on all rows.

    Parameters
    ----------
    head : OneShotHead
    candidate : Candidate
    classes : ndarray
    statistics : sequence
        For a head that aligns statistics: each client's fitting statistics
        (unaligned), with ``maps`` each client's full map.  For O-FedAvg: the
        local heads the clients trained on all their rows at the chosen ``tau``.
    validation_statistics : sequence, optional
        Each client's validation statistics, ``None`` for a client without
        validation rows; merged with its fitting statistics into those of all
        its rows (``statistics.merge``: exact for FedCGS, the maximum-likelihood
        Gaussian of the union for one-component FedPFT mixtures).
    maps : sequence of GaussianMap, optional
        Each client's full map, for statistics of unaligned rows.

    Returns
    -------
    OneShotHead
        The final head, a fitted clone of ``head``.
    """
    statistics = list(statistics)
    for k, extra in enumerate(validation_statistics or []):
        if extra is not None:  # the client's statistics of all its rows
            statistics[k] = statistics[k].merge(extra)
    model = clone(head).set_params(**candidate.params)
    return model.fit_from_statistics(statistics, classes, maps=_at(maps, candidate.tau))


def statistics_of_parts(
    head: HeadT,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    parts: tuple[np.ndarray, np.ndarray] | None,
    *,
    client_index: int = 0,
    released: StatisticsRelease | None = None,
) -> tuple[Any, Any]:
    """Client step of a head that aligns statistics: statistics of each part of its rows.

    The rows are not aligned: the server aligns the statistics.

    Parameters
    ----------
    head : OneShotHead
        The head template (not modified).
    X, y : ndarray
        The client's training rows and labels.
    classes : ndarray
        The global class set.
    parts : tuple of ndarray or None
        The positions of the fitting and the validation rows
        (:func:`~skslot.selection.validation_split`), or ``None``: all rows fit.
    client_index : int, default=0
        The client's position (seeds a head's client-side randomness).
    released : callable, optional
        A private client's release of its statistics (:data:`StatisticsRelease`):
        the statistics of all its rows (``parts`` must be ``None``).

    Returns
    -------
    fitting, validation
        With ``parts``, the statistics of the fitting rows and of the
        validation rows (``None`` when there are none); without, those of
        all rows and ``None``.
    """
    head = clone(head)  # computing statistics records n_features_in_ on the head
    if released is not None:
        if parts is not None:
            raise ValueError(
                "a private client releases the statistics of all its rows, in one part"
            )
        return released(X, y, classes), None
    if parts is None:
        return head.client_statistics(X, y, classes, client_index=client_index), None
    fit, val = parts
    fitting = head.client_statistics(X[fit], y[fit], classes, client_index=client_index)
    if val.shape[0] == 0:
        return fitting, None
    return fitting, head.client_statistics(X[val], y[val], classes, client_index=client_index)


def local_heads(
    head: HeadT,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    full_map: GaussianMap,
    taus: Sequence[float],
    *,
    client_index: int = 0,
    released: StatisticsRelease | None = None,
    aligned_rows: Callable[[np.ndarray, np.ndarray, Any], tuple[np.ndarray, np.ndarray]]
    | None = None,
) -> list:
    """Client step of a head trained on aligned rows (O-FedAvg): one local head per ``tau``.

    Parameters
    ----------
    head : OneShotHead
        The head template (not modified).
    X, y : ndarray
        The rows to train on and their labels.
    classes : ndarray
        The global class set.
    full_map : GaussianMap
        The client's full map onto the reference (in factor form on the low-rank path).
    taus : sequence of float
        The fractions of the map to align the rows with.
    client_index : int, default=0
        The client's position (seeds the local training).
    released : callable, optional
        A private client's release of its local head (:data:`StatisticsRelease`:
        one ``tau``; asked again, the head first released).
    aligned_rows : callable, optional
        ``aligned_rows(X, y, aligned_map)``: the rows and labels the head is
        trained on, given the map at one ``tau`` (a private client's clipped
        rows and null rows); default: ``aligned_map.apply(X), y``.

    Returns
    -------
    list of LinearHeadUpdate
        One local head per ``tau``, in order.
    """
    if aligned_rows is None:

        def aligned_rows(X: np.ndarray, y: np.ndarray, aligned: Any) -> tuple:
            return aligned.apply(X), y

    head = clone(head)  # training records n_features_in_ on the head
    heads = []
    for tau in taus:
        Z, labels = aligned_rows(X, y, full_map.geodesic(tau))
        heads.append(
            head.client_statistics(Z, labels, classes, client_index=client_index)
            if released is None
            else released(Z, labels, classes)
        )
    return heads


def _at(maps: Sequence[GaussianMap] | None, tau: float) -> list[GaussianMap] | None:
    """The maps moved a fraction ``tau``; ``None`` where that moves nothing.

    ``tau = 0`` is no transport only for unanchored maps: an anchored map (its mean
    moved by ``mean_tau``, or by a client's domain offset) still translates there.
    """
    if maps is None or (tau == 0.0 and all(getattr(t, "anchor", None) is None for t in maps)):
        return None
    return [t.geodesic(tau) for t in maps]
