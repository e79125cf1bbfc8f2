"""Fitting heads from the clients' messages, and the shape of protocol a head needs.

The server's steps fit heads from what the clients sent (statistics of
unaligned rows pushed through each client's map, or local heads): the
candidates, the leave-one-out heads, the final; the clients' steps make
those messages.

The head decides its protocol's shape, the driver asks: the protocol's driver
never asks what kind of head it drives; it asks the head's
:class:`HeadStrategy` what the clients upload with their summary and how to
fit the candidate and the final heads, which the strategy does with these
steps.  Two shapes exist: :class:`StatisticsStrategy` (FedCGS, FedPFT:
statistics of unaligned rows, aligned by the server; :class:`GramStrategy`
where they determine the summary) and :class:`LocalTrainingStrategy`
(O-FedAvg: local heads trained on aligned rows, received by the ``updates``
and ``refit`` stages).  A new head picks one (or implements its own) as its
``strategy``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import clone

from ..maps import GaussianMap

if TYPE_CHECKING:
    from ..selection import Candidate

#: What a client sends in place of the head's statistics of its rows ``(X, y, classes)``: a
#: wrapper around the head (a private client's release, :mod:`skslot.privacy`).
StatisticsRelease = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]


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
    return candidate_heads(head, [candidate], statistics, classes, maps)[0]


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
        ``released(X, y, classes)``: what the client sends in place of the head's
        statistics (:data:`StatisticsRelease`, a private client's release).

    Returns
    -------
    fitting, validation
        With ``parts``, the statistics of the fitting rows and of the
        validation rows (``None`` when there are none); without, those of
        all rows and ``None``.
    """
    # computing statistics records n_features_in_ on the head: a clone's
    if released is not None and parts is not None:
        raise ValueError("a private client releases the statistics of all its rows, in one part")
    made = released or partial(clone(head).client_statistics, client_index=client_index)
    if parts is None:
        return made(X, y, classes), None
    fit, val = parts
    return made(X[fit], y[fit], classes), made(X[val], y[val], classes) if val.size else None


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
        ``released(Z, y, classes)``: what the client sends in place of the local head
        trained on its aligned rows (:data:`StatisticsRelease`, a private client's release).
    aligned_rows : callable, optional
        ``aligned_rows(X, y, aligned_map)``: the rows and labels the head is
        trained on, given the map at one ``tau`` (a private client's clipped
        rows and null rows); default: ``aligned_map.apply(X), y``.

    Returns
    -------
    list of LinearHeadUpdate
        One local head per ``tau``, in order.
    """
    # training records n_features_in_ on the head: a clone's
    made = released or partial(clone(head).client_statistics, client_index=client_index)
    aligned_rows = aligned_rows or _aligned_rows
    return [made(*aligned_rows(X, y, full_map.geodesic(tau)), classes) for tau in taus]


def _aligned_rows(X: np.ndarray, y: np.ndarray, aligned: Any) -> tuple[np.ndarray, np.ndarray]:
    return aligned.apply(X), y


def _at(maps: Sequence[GaussianMap] | None, tau: float) -> list[GaussianMap] | None:
    """The maps moved a fraction ``tau``; ``None`` where that moves nothing.

    ``tau = 0`` is no transport only for unanchored maps: an anchored map (its mean
    moved by ``mean_tau``, or by a client's domain offset) still translates there.
    """
    if maps is None or (tau == 0.0 and all(getattr(t, "anchor", None) is None for t in maps)):
        return None
    return [t.geodesic(tau) for t in maps]


class ServerSide(Protocol):
    """What the driver offers a head's protocol on the server (one run's state)."""

    classes: np.ndarray

    def statistics(self) -> list:
        """Each accepted client's uploaded fitting statistics, in client order."""

    def validation_statistics(self) -> list:
        """Each accepted client's validation statistics (``None`` where it has none)."""

    def maps(self) -> list[GaussianMap] | None:
        """Each accepted client's full map onto the reference (``None`` without SLOT)."""

    def local_heads(self, part: str, tau: float) -> list:
        """Each accepted client's local head at ``tau`` on its ``part`` ("fit" or "all")."""

    def server_step(self, what: str, step: Callable[[], Any]) -> Any:
        """Run a server step on client values; a failure fails the run with a report."""


class HeadStrategy:
    """The head-specific part of the one-shot protocol (see the module docstring)."""

    #: Whether a client's upload carries the head's statistics.
    uploads_statistics: bool = False
    #: Whether the clients train local heads on aligned rows (the ``updates`` stages).
    trains_locally: bool = False
    #: Whether the statistics determine the client's summary: the client then sends its
    #: shrinkage instead of a summary, and both sides derive it
    #: (:meth:`~skslot.heads.ClassStatistics.summary`).
    derives_summary: bool = False

    def client_upload(
        self,
        head: Head,
        X: np.ndarray,
        y: np.ndarray,
        classes: np.ndarray,
        split: tuple[np.ndarray, np.ndarray] | None,
        *,
        client_index: int,
        released: StatisticsRelease | None = None,
    ) -> tuple[Any, Any]:
        """Client: what it uploads with its summary, ``(fitting, validation)`` statistics
        (``released``: in place of the head's, :func:`~skslot.heads.statistics_of_parts`)."""
        return None, None

    def fit_candidates(
        self, head: HeadT, candidates: Sequence[Candidate], server: ServerSide
    ) -> list[HeadT]:
        """Server: one fitted head per candidate, on the clients' fitting rows."""
        raise NotImplementedError

    def leave_one_out(
        self,
        head: HeadT,
        candidate: Candidate,
        server: ServerSide,
        k: int,
        *,
        maps: Sequence[GaussianMap | None] | None = None,
    ) -> HeadT:
        """Server: the head at ``candidate`` on the fitting rows of all clients but the k-th.

        ``maps``: each client's map onto the reference built without the k-th
        (the k-th ``None``): the head aligns the others' statistics with them,
        or carries their local heads, trained on the run's reference, onto it
        (:meth:`~skslot.heads.fedavg.LinearHeadUpdate.rebased`).
        """
        raise NotImplementedError

    def fit_final(self, head: HeadT, candidate: Candidate, server: ServerSide) -> HeadT:
        """Server: the head at ``candidate`` on all the clients' rows."""
        raise NotImplementedError

    def max_upload_bytes(self, head: Head, n_classes: int, n_features: int) -> int:
        """Most bytes one part of a client's statistics may take on the wire."""
        return 0

    def max_update_bytes(self, head: Head, n_classes: int, n_features: int) -> int:
        """Most bytes one local head may take on the wire."""
        return 0


class StatisticsStrategy(HeadStrategy):
    """Statistics of unaligned rows uploaded once; the server aligns them (FedCGS, FedPFT)."""

    uploads_statistics = True

    def client_upload(self, head, X, y, classes, split, *, client_index, released=None):
        return statistics_of_parts(
            head, X, y, classes, split, client_index=client_index, released=released
        )

    def fit_candidates(self, head, candidates, server):
        return server.server_step(
            "the candidate heads",
            lambda: candidate_heads(
                head, candidates, server.statistics(), server.classes, server.maps()
            ),
        )

    def leave_one_out(self, head, candidate, server, k, *, maps=None):
        maps = server.maps() if maps is None else maps
        return head_without(head, candidate, server.statistics(), server.classes, k, maps)

    def fit_final(self, head, candidate, server):
        statistics, validation = server.statistics(), server.validation_statistics()
        return server.server_step(
            "the final head",
            lambda: refit_head(
                head, candidate, server.classes, statistics, validation, server.maps()
            ),
        )

    def max_upload_bytes(self, head, n_classes, n_features):
        components = getattr(head, "n_components", 1)
        return 8 * (n_classes * components + 2) * (n_features + 2) ** 2 + (1 << 20)


class GramStrategy(StatisticsStrategy):
    """Class sums and a Gram matrix (FedCGS): they determine the summary, so it is derived."""

    derives_summary = True


class LocalTrainingStrategy(HeadStrategy):
    """Local heads trained on aligned rows, one per ``tau`` (O-FedAvg)."""

    trains_locally = True

    def max_update_bytes(self, head, n_classes, n_features):
        return 8 * (n_classes + 1) * (n_features + 2) + 4096

    def fit_candidates(self, head, candidates, server):
        updates = {tau: server.local_heads("fit", tau) for tau in {c.tau for c in candidates}}
        return server.server_step(
            "the candidate heads",
            lambda: candidate_heads(head, candidates, updates, server.classes),
        )

    def leave_one_out(self, head, candidate, server, k, *, maps=None):
        updates = server.local_heads("fit", candidate.tau)
        if maps is not None:  # each local head carried onto the reference built without k
            tau, trained = candidate.tau, server.maps()
            updates = [
                update if i == k else update.rebased(
                    trained[i].geodesic(tau), maps[i].geodesic(tau)
                )
                for i, update in enumerate(updates)
            ]  # fmt: skip
        return head_without(head, candidate, {candidate.tau: updates}, server.classes, k)

    def fit_final(self, head, candidate, server):
        updates = server.local_heads("all", candidate.tau)
        return server.server_step(
            "the final head", lambda: refit_head(head, candidate, server.classes, updates)
        )


#: The strategies of the library's heads (stateless: one instance each).
STATISTICS = StatisticsStrategy()
GRAM = GramStrategy()
LOCAL_TRAINING = LocalTrainingStrategy()
