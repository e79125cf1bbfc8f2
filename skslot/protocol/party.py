"""A client of the protocol: its rows, its settings and what it keeps between stages,
as the stages read them (:class:`~skslot.protocol.ClientParty` answers with them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._param_validation import validate_parameter_constraints
from .._validation import check_client_size
from ..defaults import FORM, VALIDATION_FRACTION
from ..gaussian import GaussianSummary
from ..heads import LinearScores, OneShotHead
from ..heads._base import ONE_SHOT_HEAD
from ..label_shift import class_counts
from ..maps import GaussianMap
from ..privacy import LifetimeBudget, PrivacyBudget, null_rows
from ..selection import validation_split
from ..summary import GaussianSummaryEstimator

if TYPE_CHECKING:
    from ..heads._fitting import StatisticsRelease
    from .stages.upload._messages import UploadRequest

__all__ = ["ClientRelease", "ClientState"]  # and Party, the base of ClientParty (documented there)


class ClientRelease(Protocol):
    """How a client releases what it sends in a run: exactly, or each value as a release of
    its privacy budget's plan.

    The stages' client steps ask :meth:`Party.release` for it and have no
    privacy branch of their own: a client without a budget answers with
    :class:`~skslot.protocol.client.ExactRelease`, a private client with the
    privacy package's :class:`~skslot.privacy.client.PrivateRelease`, whose
    every value is a release of the plan or post-processing of one.
    """

    @property
    def statistics_release(self) -> StatisticsRelease | None:
        """How the head's statistics of its rows are made: ``None``, the head's own (exact);
        else a private client's release (:data:`~skslot.heads._fitting.StatisticsRelease`)."""

    def begin(self, request: UploadRequest) -> None:
        """Take part in the run the upload request announces (a private client: charged once
        per run against its lifetime budget).

        Parameters
        ----------
        request : UploadRequest
        """

    def check_rows(self, X: np.ndarray) -> None:
        """Check the fitting rows before the head's statistics of them are made.

        Parameters
        ----------
        X : ndarray of shape (n, m)
            The client's fitting rows.
        """

    def shrinkage(self, fitting: Any, X: np.ndarray, y: np.ndarray, covariance: str) -> float:
        """The shrinkage the server derives the client's summary with (FedCGS).

        Parameters
        ----------
        fitting : object
            The head's statistics of the fitting rows, as sent.
        X, y : ndarray
            The fitting rows and their labels.
        covariance : {"total", "within"}

        Returns
        -------
        float
        """

    def summary(self, fitting: Any, request: UploadRequest) -> GaussianSummary:
        """The summary the client sends (the step keeps it as the server decodes it).

        Parameters
        ----------
        fitting : object or None
            The head's statistics of the fitting rows, as sent.
        request : UploadRequest

        Returns
        -------
        GaussianSummary
        """

    def class_counts(self, fitting: Any) -> np.ndarray:
        """The rows of each of the run's classes among the client's training rows.

        Parameters
        ----------
        fitting : object or None
            The head's statistics of the fitting rows, as sent.

        Returns
        -------
        ndarray of int64
        """

    def released_counts(self, fitting: Any) -> np.ndarray | None:
        """The class counts this upload releases, which a private client predicts with where
        its evaluation count is a release (``None``: exact values, or no counts released).

        Parameters
        ----------
        fitting : object or None
            The head's statistics of the fitting rows, as sent.

        Returns
        -------
        ndarray of int64 or None
        """

    def class_sums(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The class counts and sums of the fitting rows, where the client sends them.

        Parameters
        ----------
        X, y : ndarray
            The fitting rows and their labels.

        Returns
        -------
        tuple of (ndarray, ndarray) or None
        """

    def local_head_rows(
        self, full_map: GaussianMap, taus: Sequence[float], part: str
    ) -> Callable[[np.ndarray, np.ndarray, GaussianMap], tuple[np.ndarray, np.ndarray]] | None:
        """How the rows a local head is trained on are made from the client's rows, or
        ``None`` for the rows aligned as they are.

        Parameters
        ----------
        full_map : GaussianMap
            The client's full map.
        taus : sequence of float
            The fractions of the local heads (a private client makes one).
        part : {"fit", "all"}
            The rows it is trained on.

        Returns
        -------
        callable or None
            ``rows(X, y, aligned_map) -> (X, y)``.
        """

    def evaluation_count(self, head: LinearScores, tau: float, count: Callable[[], int]) -> int:
        """The count of correct test predictions the client sends.

        Parameters
        ----------
        head : LinearScores
            The head the count is of.
        tau : float
            The fraction its test rows are aligned at.
        count : callable
            ``count()``: the exact count.

        Returns
        -------
        int
        """

    def own_mix_accuracy(self, accuracy: Callable[[], float | None]) -> float | None:
        """The accuracy on test rows weighted to the client's training mix, if it sends one.

        Parameters
        ----------
        accuracy : callable
            ``accuracy()``: the exact figure, on the client's exact training
            counts (``None`` for a client without any).

        Returns
        -------
        float or None
            ``None`` where the client's plan does not declare it.
        """


@dataclass
class ClientState:
    """What a client keeps between the stages of one run.

    Every stage uses the same summary and reference, so the same map.

    Parameters
    ----------
    summary : GaussianSummary or None, default=None
        The client's summary, exactly as the server received it.
    reference : GaussianSummary or None, default=None
        The server's reference, once received.
    client_index : int or None, default=None
        The client's position in the run's order, received with the upload
        request.
    split_seed : int or None, default=None
        The seed of its validation split, received with the upload request
        (``None``: no split).
    fixed_map : GaussianMap or None, default=None
        Where the run's maps were fitted before it
        (:class:`~skslot.protocol.stages.reference.FixedReference`), this
        client's map among them, used in place of the one its summary would
        make.  Kept in process only.
    mean_tau : float or None, default=None
        The run's fraction of the mean's transport, received with the upload
        request (``None``: the mean follows ``tau``).
    releases : tuple of str, default=()
        Under a privacy budget, the releases of the run (received with the
        upload request), which its budget is split over.
    noise_seed : int or None, default=None
        Under a privacy budget, the run's secret noise seed (drawn by the
        client, never sent): a release made again is the same release.
    evaluation : tuple of (str, int) or None, default=None
        Under a privacy budget, the digest of the evaluation request answered
        and the count released for it: the same request gets the same count,
        another is refused (its input is the server's choice).
    local_head : str or None, default=None
        Under a privacy budget, the digest of the map (reference, fractions)
        and rows its local head was released for: the same request gets the
        same head, another is refused (the same noise on rows aligned by
        another map would release the difference of two exact heads).
    released_counts : tuple of int or None, default=None
        Under a privacy budget, the class counts its upload released (those of
        its released statistics, or the release ``"class_counts"``): the
        prior it predicts with where its evaluation count is a release
        (``None``: none released, no prior).
    rows_digest : str or None, default=None
        Under a privacy budget, the digest of the rows the run's releases are
        made of (:func:`~skslot.privacy.rows_digest`; kept, never sent):
        a client whose rows changed refuses the rest of the run.
    """

    summary: GaussianSummary | None = None
    reference: GaussianSummary | None = None
    client_index: int | None = None
    split_seed: int | None = None
    fixed_map: GaussianMap | None = None
    mean_tau: float | None = None
    releases: tuple[str, ...] = ()
    noise_seed: int | None = None
    evaluation: tuple[str, int] | None = None
    local_head: str | None = None
    released_counts: tuple[int, ...] | None = None
    rows_digest: str | None = None

    def to_config(self) -> dict[str, bytes]:
        """The state as bytes settings, to keep between a transport's calls.

        The summaries are kept in float64, the other values as one JSON object.
        Summaries are kept as received or derived (a factor form's basis is
        made orthonormal again when read back, a change at rounding level).

        Returns
        -------
        dict of str to bytes
            What :meth:`from_config` reads back.
        """
        if self.fixed_map is not None:
            raise ValueError("a state with a fixed map is kept in process only")
        kept = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_JSON}
        values = {"state": json.dumps(kept).encode()}
        for name in ("summary", "reference"):
            summary = getattr(self, name)
            if summary is not None:
                values[name] = summary.to_bytes("float64")
        return values

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> ClientState:
        """The state :meth:`to_config` wrote.

        Parameters
        ----------
        values : mapping of str to bytes

        Returns
        -------
        ClientState
        """
        kept: dict[str, Any] = json.loads(bytes(values["state"]))
        kept = {name: tuple(v) if isinstance(v, list) else v for name, v in kept.items()}
        for name in ("summary", "reference"):
            if name in values:
                kept[name] = GaussianSummary.from_bytes(values[name])
        return cls(**kept)


#: The state's values not kept as JSON: the summaries (bytes) and a fixed map (in process).
_NOT_JSON = ("summary", "reference", "fixed_map")


class Party:
    """One client of a run, as its stages read and update it: its rows, settings and state.

    The parameters are :class:`~skslot.protocol.ClientParty`'s, which answers the
    stages' requests with it.
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        *,
        head: OneShotHead,
        classes: np.ndarray,
        label: int | str | None = None,
        X_test: np.ndarray | None = None,
        y_test: np.ndarray | None = None,
        summary_estimator: GaussianSummaryEstimator | None = None,
        validation_fraction: float = VALIDATION_FRACTION,
        state: ClientState | None = None,
        privacy: PrivacyBudget | None = None,
        lifetime: LifetimeBudget | None = None,
    ) -> None:
        validate_parameter_constraints({"head": [ONE_SHOT_HEAD]}, {"head": head}, "ClientParty")
        self.head = head
        self.classes = np.asarray(classes)
        self.label = label
        check_client_size(np.shape(y)[0], label)  # the estimators' rule and message
        if privacy is not None:  # never an error naming a row: it would be exact
            X, y = null_rows(X, y, self.classes)
            if X_test is not None and y_test is not None:
                X_test, y_test = null_rows(X_test, y_test, self.classes, part="test")
        self.X, self.y = X, y
        self.X_test, self.y_test = X_test, y_test
        self.summary_estimator = summary_estimator
        self.validation_fraction = validation_fraction
        self.state = state if state is not None else ClientState()
        if lifetime is not None and privacy is None:
            raise ValueError("a lifetime budget bounds private runs: give the client privacy too")
        self.privacy = privacy
        self.lifetime = lifetime

    def release(self) -> ClientRelease:
        """How this client releases what it sends (:class:`ClientRelease`).

        Returns
        -------
        ClientRelease
        """
        raise NotImplementedError

    def summary_settings_problem(self, covariance: str, covariance_floor: float) -> str | None:
        """Why this client refuses the run's summary settings where its head's statistics
        determine its summary (FedCGS), or ``None``: they must be its own, or it would map its
        rows with another summary than the server's.

        Parameters
        ----------
        covariance : {"total", "within"}
            The run's summary covariance.
        covariance_floor : float
            The run's covariance floor.

        Returns
        -------
        str or None
        """
        own = (self.estimator.covariance, self.estimator.covariance_floor)
        if not self.head.strategy.derives_summary or own == (covariance, covariance_floor):
            return None
        return (
            f"this client summarises with covariance={own[0]!r}, covariance_floor={own[1]!r}, "
            f"but the run derives summaries with covariance={covariance!r}, "
            f"covariance_floor={covariance_floor!r}: the client would map its rows with another "
            "summary than the server's"
        )

    @property
    def estimator(self) -> GaussianSummaryEstimator:
        """The summary's estimator (exact Ledoit-Wolf unless one was given)."""
        return self.summary_estimator or GaussianSummaryEstimator(form=FORM)

    @property
    def n_test(self) -> int:
        """The client's test rows."""
        return 0 if self.y_test is None else int(self.y_test.shape[0])

    @property
    def class_counts(self) -> np.ndarray:
        """The client's training rows of each class of the run: its own label mix, with
        which it predicts where the head serves each client's own (nothing is sent)."""
        return class_counts(self.y, self.classes)

    @property
    def prior_counts(self) -> np.ndarray | None:
        """The class counts the client predicts with where the server reads the result: its
        own counts, or under a privacy budget the counts it released (``None``: none).

        Where the head serves each client's own label mix its predictions
        shift by these counts, so a count of correct predictions sent to the
        server depends on them; a private client's must be a release already
        charged, never its exact counts.
        """
        if self.privacy is None:
            return self.class_counts
        counts = self.state.released_counts
        return None if counts is None else np.asarray(counts, dtype=np.int64)

    def summarise(self) -> GaussianSummary:
        """The summary of this client's fitting rows (all its training rows without a split).

        Returns
        -------
        GaussianSummary
            In the estimator's form: by default the factor form where the
            client holds no more fitting rows than features.
        """
        X, y = self.fitting_rows()
        return self.estimator.fit(X, y, client=self.label).summaries_[self.label]

    def fitting_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows and labels the client fits on: those it does not hold out.

        Returns
        -------
        X, y : ndarray
        """
        split = self.split
        if split is None:
            return self.X, self.y
        return self.X[split[0]], self.y[split[0]]

    @property
    def split(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The (fitting, validation) positions among the rows, or ``None`` without a split."""
        if self.state.split_seed is None:
            return None
        return validation_split(self.y, self.validation_fraction, self.state.split_seed)

    def held_out(self, stage: str) -> tuple[np.ndarray, np.ndarray]:
        """This client's validation rows and labels, for ``stage``.

        Parameters
        ----------
        stage : str
            The stage that needs them (named in the error without a split).

        Returns
        -------
        X, y : ndarray
        """
        split = self.split
        if split is None:
            raise RuntimeError(f"{stage} was requested, but this run has no validation split")
        return self.X[split[1]], self.y[split[1]]

    def full_map(self, reference: GaussianSummary | None = None) -> GaussianMap:
        """This client's full map onto the reference (the reference stored on first receipt).

        Parameters
        ----------
        reference : GaussianSummary, optional
            The reference, where the request carries it.

        Returns
        -------
        GaussianMap
            The map at ``tau = 1``, its mean moved by the run's ``mean_tau``.
        """
        state = self.state
        if reference is not None:
            state.reference = reference
        if state.fixed_map is not None:
            return state.fixed_map
        if state.reference is None:
            raise RuntimeError("this client has not received the reference of this run")
        return self.map_onto(state.reference)

    def map_onto(self, reference: GaussianSummary) -> GaussianMap:
        """This client's full map onto ``reference``, its mean moved by the run's ``mean_tau``
        (the reference is not stored: the screening's references built without one client).

        Parameters
        ----------
        reference : GaussianSummary

        Returns
        -------
        GaussianMap
            In the reference's form (:meth:`~skslot.GaussianMap.optimal_transport`).
        """
        own = self.state.summary
        if own is None:
            raise RuntimeError("this client has no summary of this run (no upload stage ran)")
        full = GaussianMap.optimal_transport(own, reference)
        return full.with_mean_fraction(self.state.mean_tau, own.mean)
