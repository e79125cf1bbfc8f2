"""The messages of the one-shot protocol, as library objects.

Each stage is a request from the server and a reply from each client.  A
transport moves them: in process as the objects themselves, on Flower as
records (:mod:`skslot.flower.messages` encodes and decodes them, checking
every value it receives).  The driver and the clients only ever see these
objects, so the two transports run the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..gaussian import GaussianSummary
from ..heads import LinearScores

__all__ = [
    "STAGES",
    "Evaluation",
    "EvaluationRequest",
    "Exchange",
    "ScreeningRequest",
    "UpdatesRequest",
    "Upload",
    "UploadRequest",
    "ValidationRequest",
]

#: Every stage a run may hold, in the order they first occur (after a screening excludes a
#: client, "updates" and "validation" may run again).
STAGES = ("upload", "updates", "validation", "screening", "refit", "evaluation")


@dataclass(frozen=True)
class UploadRequest:
    """Stage "upload": a client's position, and the seed of its validation split.

    ``split_seed`` is ``None`` when the run has no validation round (fixed
    ``tau``); ``class_counts`` asks for the client's class counts (the
    label-shift rule's input).  ``summary_covariance`` and
    ``covariance_floor`` are the run's summary settings, with which the server
    derives the summary of a head whose statistics determine it (FedCGS): a
    client summarising otherwise refuses, rather than map its rows with
    another summary than the server's.  ``mean_tau`` is the run's fraction
    of the mean's transport (``None``: the mean follows ``tau``), with which
    the client makes its map as the server does.
    """

    client_index: int
    split_seed: int | None = None
    class_counts: bool = False
    summary_covariance: str = "total"
    covariance_floor: float = 1e-8
    mean_tau: float | None = None


@dataclass(frozen=True, eq=False)
class Upload:
    """A client's first reply: its summary and, for statistics heads, their statistics.

    ``statistics`` are those of the fitting rows and ``validation`` those of
    the validation rows (``None`` when it holds none, or the head uploads
    none); ``n_fit`` counts the fitting rows, ``n_validation`` the rows it
    holds out (none without a validation round) and ``n_test`` the test rows
    it will evaluate on; ``class_counts``, when asked for, the rows of each of
    the run's classes among all its training rows.  ``summary_bytes`` is the
    summary's length on the wire, where a transport encodes it.

    The summary describes the fitting rows (all the training rows when there
    is no validation part), so that the held-out rows are as new to the map
    they are aligned with as a test row is.

    For a head whose statistics determine the summary
    (``head.protocol.derives_summary``, FedCGS), ``summary`` is ``None``: the
    client sends its Ledoit-Wolf ``shrinkage`` and its ``label`` instead, and
    the server derives the summary
    (:meth:`~skslot.heads._strategy.HeadProtocol.derived_summary`).
    """

    summary: GaussianSummary | None
    n_fit: int
    n_test: int
    statistics: Any = None
    validation: Any = None
    summary_bytes: int | None = None
    class_counts: np.ndarray | None = None
    shrinkage: float | None = None
    label: int | str | None = None
    n_validation: int = 0

    @property
    def n_rows(self) -> int:
        """All the client's training rows: its fitting and its validation part."""
        return self.n_fit + self.n_validation

    @property
    def client_label(self) -> int | str | None:
        """The client's own name, from its summary or, for a derived summary, its upload."""
        return self.label if self.summary is None else self.summary.client

    @property
    def dimension(self) -> int | None:
        """The feature dimension of the summary, or of the statistics it is derived from."""
        if self.summary is not None:
            return self.summary.dimension
        return None if self.statistics is None else int(self.statistics.n_features)


@dataclass(frozen=True, eq=False)
class UpdatesRequest:
    """Stages "updates" and "refit": one local head per ``tau`` on ``part`` of the rows.

    ``reference`` travels with a client's first request after it was built.
    """

    reference: GaussianSummary | None
    taus: tuple[float, ...]
    part: str


@dataclass(frozen=True, eq=False)
class ValidationRequest:
    """Stage "validation": the candidate heads and their ``tau``."""

    reference: GaussianSummary | None
    heads: tuple[LinearScores, ...]
    taus: tuple[float, ...]


@dataclass(frozen=True, eq=False)
class ScreeningRequest:
    """Stage "screening": the head of all clients and those without one other client each.

    ``masks[k]`` holds the classes the comparison with ``left_out[k]``
    predicts among (those clients other than the left-out one hold);
    ``tau`` is this client's fraction of its map.  A client is never sent the
    head without itself.
    """

    reference: GaussianSummary | None
    full: LinearScores
    left_out: tuple[LinearScores, ...]
    masks: np.ndarray
    tau: float


@dataclass(frozen=True, eq=False)
class EvaluationRequest:
    """Stage "evaluation": the global head and the run's ``tau``."""

    reference: GaussianSummary | None
    head: LinearScores
    tau: float


@dataclass(frozen=True)
class Evaluation:
    """A client's local test result: correct predictions among its test rows."""

    n_correct: int
    n_test: int


@dataclass
class Exchange:
    """What one stage brought back from the clients it asked.

    ``replies`` holds the decoded replies of the clients that answered with
    valid ones; ``rejected`` says why each other answer was refused (an error
    raised by the client, or a message that failed its checks); ``missing``
    says, for each client that did not answer in time, what the transport
    knows of why.  ``bytes_sent`` and
    ``bytes_received`` are per client, where the transport counts them.
    """

    replies: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    bytes_sent: dict = field(default_factory=dict)
    bytes_received: dict = field(default_factory=dict)
