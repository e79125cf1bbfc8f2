"""What shape of one-shot protocol a head needs: the head decides, the driver asks.

The protocol's driver never asks what kind of head it drives; it asks the
head's :class:`HeadStrategy` what the clients upload with their summary and
how to fit the candidate and the final heads.  Two shapes exist:
:class:`StatisticsStrategy` (FedCGS, FedPFT: statistics of unaligned rows,
aligned by the server; :class:`GramStrategy` where they determine the
summary) and :class:`LocalTrainingStrategy` (O-FedAvg: local heads trained on
aligned rows, received by the ``updates`` and ``refit`` stages).  A new head
picks one (or implements its own) as its ``strategy``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ._fitting import (
    Head,
    HeadT,
    StatisticsRelease,
    candidate_heads,
    head_without,
    refit_head,
    statistics_of_parts,
)

if TYPE_CHECKING:
    from ..gaussian import GaussianSummary
    from ..maps import GaussianMap
    from ..selection import Candidate

__all__ = [
    "GramStrategy",
    "HeadStrategy",
    "LocalTrainingStrategy",
    "ServerSide",
    "StatisticsStrategy",
]


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
    #: shrinkage instead of a summary, and both sides derive it (:meth:`derived_summary`).
    derives_summary: bool = False

    def derived_summary(
        self,
        fitting: Any,
        shrinkage: float,
        *,
        covariance: str,
        covariance_floor: float,
        client: int | str | None,
    ) -> GaussianSummary:
        """Client and server: the summary of a client's fitting rows, from their statistics."""
        raise NotImplementedError(f"{type(self).__name__} does not derive summaries")

    def derived_shrinkage(
        self, fitting: Any, X: np.ndarray, y: np.ndarray, *, covariance: str
    ) -> float:
        """Client: the shrinkage it announces, of its fitting rows ``X, y``."""
        raise NotImplementedError(f"{type(self).__name__} does not derive summaries")

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
        """Client: what it uploads with its summary, ``(fitting, validation)`` statistics.

        A private client's are its release (``released``).
        """
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
        return server.server_step(
            "the final head",
            lambda: refit_head(
                head,
                candidate,
                server.classes,
                server.statistics(),
                server.validation_statistics(),
                server.maps(),
            ),
        )

    def max_upload_bytes(self, head, n_classes, n_features):
        components = getattr(head, "n_components", 1)
        return 8 * (n_classes * components + 2) * (n_features + 2) ** 2 + (1 << 20)


class GramStrategy(StatisticsStrategy):
    """Class sums and a Gram matrix (FedCGS): they determine the summary, so it is derived."""

    derives_summary = True

    def derived_summary(self, fitting, shrinkage, *, covariance, covariance_floor, client):
        return fitting.summary(
            shrinkage, covariance=covariance, covariance_floor=covariance_floor, client=client
        )

    def derived_shrinkage(self, fitting, X, y, *, covariance):
        return fitting.ledoit_wolf_shrinkage(X, y, covariance=covariance)


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
