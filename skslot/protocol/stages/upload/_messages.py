"""The upload's messages: the server's request and a client's reply.

Stage "upload" (:mod:`skslot.protocol.stages.upload`) sends an
:class:`UploadRequest` and receives an :class:`Upload`; their wire format is
:class:`~skslot.protocol.stages.upload.UploadCodec`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....defaults import COVARIANCE_FLOOR
from ....gaussian import GaussianSummary

#: The groups of arrays an upload carries.
STATISTICS, VALIDATION_STATISTICS = "statistics", "validation-statistics"
CLASS_SUMS = "class-sums"


@dataclass(frozen=True)
class UploadRequest:
    """Stage "upload": a client's position, and the seed of its validation split.

    Parameters
    ----------
    client_index : int
        The client's position in the run's order.
    split_seed : int or None, default=None
        Seed of its validation split (``None``: the run has no validation round).
    class_counts : bool, default=False
        Ask for the client's class counts (the label-shift rule's and the
        screening's input).
    class_sums : bool, default=False
        Ask for the class counts and row sums of the client's fitting rows,
        from which the server measures each client's domain offset within
        classes (``label_mix="client"``, a head whose statistics carry none).
    summary_covariance : {"total", "within"}, default="total"
        What the summaries describe; with ``covariance_floor``, the settings
        with which the server derives the summary of a head whose statistics
        determine it (FedCGS).  A client summarising otherwise refuses, rather
        than map its rows with another summary than the server's.
    covariance_floor : float, default=1e-8
    mean_tau : float or None, default=None
        The run's fraction of the mean's transport (``None``: the mean follows
        ``tau``), with which the client makes its map as the server does.
    summary_dtype : {"float16", "float32", "float64"} or None, default=None
        The precision the summary travels in: the client keeps its summary
        rounded to it, so that its map is the server's (``None``: exact).
    validation_statistics : bool, default=True
        With a validation part, send the head's statistics of it too (for the
        refit of an unscreened run); a screened run's final head is fitted on
        the fitting parts alone and does not ask for them.
    privacy : tuple of (float, float, float) or None, default=None
        A private run's budget, which must be the client's own (the three
        values of a :class:`~skslot.privacy.PrivacyBudget`; on the wire,
        :func:`~skslot.privacy.server.plan_to_wire`).
    releases : tuple of str, default=()
        A private run's releases (:data:`~skslot.privacy.RELEASES`), which
        the client's budget is split over.
    shares : tuple of float, default=()
        Each release's share of the budget as the server accounts for it; a
        client splitting its budget otherwise refuses.
    """

    client_index: int
    split_seed: int | None = None
    class_counts: bool = False
    class_sums: bool = False
    summary_covariance: str = "total"
    covariance_floor: float = COVARIANCE_FLOOR
    mean_tau: float | None = None
    summary_dtype: str | None = None
    validation_statistics: bool = True
    privacy: tuple[float, float, float] | None = None
    releases: tuple[str, ...] = ()
    shares: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class Upload:
    """A client's first reply: its summary and, for statistics heads, their statistics.

    The summary describes the fitting rows (all the training rows when there
    is no validation part), so that the held-out rows are as new to the map
    they are aligned with as a test row is.  For a head whose statistics
    determine the summary (``head.strategy.derives_summary``, FedCGS),
    ``summary`` is ``None``: the client sends its Ledoit-Wolf ``shrinkage``
    and its ``label`` instead, and the server derives the summary.

    Parameters
    ----------
    summary : GaussianSummary or None
        The summary of the fitting rows (``None`` where the server derives it).
    n_fit : int
        The fitting rows.
    n_test : int
        The test rows the client will evaluate on.
    statistics : object, default=None
        The head's statistics of the fitting rows (``None`` when the head
        uploads none).
    validation : object, default=None
        The head's statistics of the validation rows (``None`` when the client
        holds none, or the head uploads none).
    summary_bytes : int or None, default=None
        The summary's length on the wire, where a transport encodes it.
    class_counts : ndarray of int or None, default=None
        When asked for, the rows of each of the run's classes among all the
        training rows.
    shrinkage : float or None, default=None
        The Ledoit-Wolf shrinkage of a summary the server derives.
    label : int, str or None, default=None
        The client's own name, sent with a summary the server derives.
    n_validation : int, default=0
        The rows it holds out (none without a validation round).
    class_sums : tuple of (ndarray, ndarray) or None, default=None
        When asked for, the fitting rows of each class, shape ``(C,)``, and
        their sums, shape ``(C, m)``.
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
    class_sums: tuple[np.ndarray, np.ndarray] | None = None

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
