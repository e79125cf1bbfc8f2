"""What a client's upload releases: its exact values, or each value through its ledger.

The upload's client step (:meth:`UploadStage.answer`) asks one release object
for the summary, the shrinkage the server derives it with and the class
counts; it has no privacy branch of its own.  :class:`ExactRelease` is a
client without a budget; :class:`PrivateRelease` wraps the client's ledger
(:func:`~skslot.protocol.stages.upload.private_upload_problem` admitted the
request first),
so every value it returns is a release of the plan or post-processing of one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...._validation import check_feature_scale
from ....label_shift import class_counts
from ....low_rank import Summary
from ._codec import as_decoded
from ._privacy import private_run, released_class_counts, released_summary

if TYPE_CHECKING:
    from ....accounting import PrivacyLedger
    from ...party import Party
    from ._messages import UploadRequest

__all__ = ["ExactRelease", "PrivateRelease", "UploadRelease", "upload_release"]


class UploadRelease:
    """How a client releases its upload: the interface of :class:`ExactRelease` and
    :class:`PrivateRelease`."""

    #: The client's ledger for the run (``None``: its values are exact).
    ledger: PrivacyLedger | None = None

    def check_rows(self, X: np.ndarray) -> None:
        """Check the fitting rows before the head's statistics of them are made.

        Parameters
        ----------
        X : ndarray of shape (n, m)
            The client's fitting rows.
        """
        raise NotImplementedError

    def shrinkage(
        self, party: Party, fitting: Any, X: np.ndarray, y: np.ndarray, covariance: str
    ) -> float:
        """The shrinkage the server derives the client's summary with (FedCGS).

        Parameters
        ----------
        party : Party
        fitting : object
            The head's statistics of the fitting rows, as sent.
        X, y : ndarray
            The fitting rows and their labels.
        covariance : {"total", "within"}

        Returns
        -------
        float
        """
        raise NotImplementedError

    def summary(self, party: Party, fitting: Any, request: UploadRequest) -> Summary:
        """The summary the client sends, kept as the server decodes it.

        Parameters
        ----------
        party : Party
        fitting : object or None
            The head's statistics of the fitting rows, as sent.
        request : UploadRequest

        Returns
        -------
        GaussianSummary or LowRankGaussianSummary
        """
        raise NotImplementedError

    def class_counts(self, party: Party, fitting: Any) -> np.ndarray:
        """The rows of each of the run's classes among the client's training rows.

        Parameters
        ----------
        party : Party
        fitting : object or None
            The head's statistics of the fitting rows, as sent.

        Returns
        -------
        ndarray of int64
        """
        raise NotImplementedError

    def released_counts(self, party: Party, fitting: Any) -> np.ndarray | None:
        """The class counts this upload releases, which a private client predicts with where
        its evaluation count is a release (``None``: exact values, or no counts released).

        Parameters
        ----------
        party : Party
        fitting : object or None
            The head's statistics of the fitting rows, as sent.

        Returns
        -------
        ndarray of int64 or None
        """
        return None


class ExactRelease(UploadRelease):
    """A client without a privacy budget: its exact summary, shrinkage and counts.

    Its rows' scale is checked (the second moments must fit in float64), its
    shrinkage is the Ledoit-Wolf one of its rows (their fourth moments), and
    its summary is made once per run.
    """

    def check_rows(self, X: np.ndarray) -> None:
        check_feature_scale(X)

    def shrinkage(
        self, party: Party, fitting: Any, X: np.ndarray, y: np.ndarray, covariance: str
    ) -> float:
        strategy = party.head.strategy
        return strategy.derived_shrinkage(fitting, X, y, covariance=covariance)

    def summary(self, party: Party, fitting: Any, request: UploadRequest) -> Summary:
        kept = party.state.summary
        return kept if kept is not None else as_decoded(party.summarise(), request.summary_dtype)

    def class_counts(self, party: Party, fitting: Any) -> np.ndarray:
        return class_counts(party.y, party.classes)


class PrivateRelease(UploadRelease):
    """A client under its privacy budget: each value a release of its ledger.

    Its rows are clipped before any release (no scale check); its shrinkage is
    the OAS shrinkage of its released statistics, a function of the release
    alone that the server recomputes; its summary is that of the released
    moments (a head uploading statistics) or the release ``"summary"`` of its
    own (a head training locally); its class counts those of the released
    statistics or the release ``"class_counts"``.

    Parameters
    ----------
    ledger : PrivacyLedger
        The client's ledger for the run, planned for the run's releases.
    """

    ledger: PrivacyLedger

    def __init__(self, ledger: PrivacyLedger) -> None:
        self.ledger = ledger

    def check_rows(self, X: np.ndarray) -> None:
        pass

    def shrinkage(
        self, party: Party, fitting: Any, X: np.ndarray, y: np.ndarray, covariance: str
    ) -> float:
        return fitting.oas_shrinkage(covariance)

    def summary(self, party: Party, fitting: Any, request: UploadRequest) -> Summary:
        release = party.head.private_release
        if release is not None and party.head.strategy.uploads_statistics:
            summary = self.ledger.result(release).summary(
                covariance=request.summary_covariance,
                covariance_floor=request.covariance_floor,
                client=party.label,
            )
        else:
            summary = released_summary(party, self.ledger, request.covariance_floor)
        return as_decoded(summary, request.summary_dtype)

    def class_counts(self, party: Party, fitting: Any) -> np.ndarray:
        if fitting is not None:
            return fitting.class_counts()
        return released_class_counts(party, self.ledger)

    def released_counts(self, party: Party, fitting: Any) -> np.ndarray | None:
        if fitting is not None or "class_counts" in self.ledger.shares:
            return self.class_counts(party, fitting)
        return None


def upload_release(party: Party, request: UploadRequest) -> UploadRelease:
    """How this client releases its upload in this run, the run checked against its budget.

    Parameters
    ----------
    party : Party
    request : UploadRequest

    Returns
    -------
    ExactRelease or PrivateRelease

    Raises
    ------
    ValueError
        If the run asks a client without a budget for private releases.
    PrivacyBudgetExceeded
        If the client's lifetime budget does not cover the run.
    """
    ledger = private_run(party, request)
    return ExactRelease() if ledger is None else PrivateRelease(ledger)
