"""The client's side of the one-shot protocol, written once.

A :class:`ClientParty` holds one client's rows and answers each stage with the
library's own objects: :class:`~skslot.GaussianSummaryEstimator` for the
summary, :meth:`~skslot.GaussianMap.optimal_transport` for its map, the
head's protocol for what it uploads, and :mod:`skslot.selection` for local
heads and validation counts.  The in-process transport calls these methods
directly; the Flower ``ClientApp`` rebuilds the party from the node's data and
the run's state and calls the same methods, so both run the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import check_feature_scale
from ..gaussian import GaussianMap, GaussianSummary
from ..heads import OneShotHead
from ..label_shift import class_counts
from ..screening import PairedCounts, paired_counts
from ..selection import ValidationCounts, local_updates, score_candidates, validation_split
from ..summary import GaussianSummaryEstimator
from .exchanges import (
    Evaluation,
    EvaluationRequest,
    ScreeningRequest,
    UpdatesRequest,
    Upload,
    UploadRequest,
    ValidationRequest,
)

__all__ = ["ClientParty", "ClientState", "private_summary_problem"]


def private_summary_problem(head: OneShotHead, epsilon: float | None) -> str | None:
    """Why a private summary (``epsilon``) is refused with this head, or ``None``.

    A statistics head's messages are exact moments of the client's rows
    (FedCGS's class sums and Gram matrix determine its mean and covariance,
    FedPFT's mixtures its class means and covariances), so beside them a
    private summary would cost accuracy and protect nothing.
    """
    if epsilon is None or not head.protocol.uploads_statistics:
        return None
    return (
        f"epsilon is refused with {type(head).__name__}: its statistics are exact moments of "
        "each client's rows, from which the server reads the mean and covariance a private "
        "summary is meant to protect (see the privacy guide's 'Where the guarantee stops'); "
        "use O-FedAvg with epsilon, or no epsilon"
    )


@dataclass
class ClientState:
    """What a client keeps between the stages of one run.

    ``summary`` is its summary exactly as the server received it, and
    ``reference`` the server's reference once received, so every stage uses
    the same map.  ``fixed_map``, where the run's maps were fitted before it
    (:class:`~skslot.protocol.reference.FixedReference`), is this client's
    map among them, used in place of the one its summary would make.
    ``mean_tau`` is the run's fraction of the mean's transport, received
    with the upload request.
    """

    summary: GaussianSummary | None = None
    reference: GaussianSummary | None = None
    client_index: int | None = None
    split_seed: int | None = None
    fixed_map: GaussianMap | None = None
    mean_tau: float | None = None


class ClientParty:
    """One client of the protocol: its rows, its head settings and its run state.

    Parameters
    ----------
    X, y : ndarray
        The client's training rows and labels.
    head : OneShotHead
        The run's head (never modified: each stage works on a clone).
    classes : ndarray
        The global class set agreed for the run.
    label : int or str, optional
        The client's own name (shown in reports; the server identifies a
        client by its transport address, never by this label).
    X_test, y_test : ndarray, optional
        Local test rows, scored at the ``evaluation`` stage.
    summary_estimator : GaussianSummaryEstimator, optional
        Settings of the summary (exact Ledoit-Wolf by default, or private).
    validation_fraction : float, default=0.2
        Share of each class held out when the server asks for a split.
    state : ClientState, optional
        A run's state restored between stages (the Flower ``ClientApp``).
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
        validation_fraction: float = 0.2,
        state: ClientState | None = None,
    ) -> None:
        self.X, self.y = X, y
        self.head = head
        self.classes = np.asarray(classes)
        self.label = label
        self.X_test, self.y_test = X_test, y_test
        self.summary_estimator = summary_estimator
        self.validation_fraction = validation_fraction
        self.state = state if state is not None else ClientState()

    # -- what the stages share ---------------------------------------------------------

    def summarise(self) -> GaussianSummary:
        """The summary of this client's fitting rows (all its training rows without a split)."""
        X, y = self.fitting_rows()
        estimator = self.summary_estimator or GaussianSummaryEstimator()
        return estimator.fit(X, y, client=self.label).summaries_[self.label]

    def fitting_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows and labels the client fits on: those it does not hold out."""
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

    def transport_map(self, reference: GaussianSummary | None = None) -> GaussianMap:
        """This client's full map onto the reference (stored on first receipt)."""
        state = self.state
        if reference is not None:
            state.reference = reference
        if state.fixed_map is not None:
            return state.fixed_map
        if state.summary is None:
            raise RuntimeError("this client has no summary of this run (no upload stage ran)")
        if state.reference is None:
            raise RuntimeError("this client has not received the reference of this run")
        own = state.summary
        full = GaussianMap.optimal_transport(own, state.reference)
        return full.with_mean_fraction(state.mean_tau, own.mean)

    # -- the stages --------------------------------------------------------------------

    def upload(self, request: UploadRequest) -> Upload:
        """Stage "upload": the summary of its fitting rows and what the head uploads with it.

        With a validation split (``request.split_seed``) the summary, and so
        the map, leaves the held-out rows out: the validation then scores rows
        new to the map, as the test does.  The summary is made once per run: a
        repeated request with the same split gets the same one (for a private
        summary, no fresh noise to average out; another split summarises
        other rows, a new release).  Where the head's statistics determine the
        summary (FedCGS), the client sends its Ledoit-Wolf shrinkage instead
        and keeps the summary the server derives from the same statistics
        (:meth:`~skslot.heads.ClassStatistics.summary`), with the run's summary
        settings (``request``), which must be its own.
        """
        state, protocol = self.state, self.head.protocol
        estimator = self.summary_estimator or GaussianSummaryEstimator()
        why = private_summary_problem(self.head, estimator.epsilon)
        if why:
            raise ValueError(why)
        if state.summary is not None and state.split_seed != request.split_seed:
            state.summary = None  # another split: another fitting part to summarise
        state.client_index, state.split_seed = request.client_index, request.split_seed
        state.mean_tau = request.mean_tau
        split = self.split
        X_fit, y_fit = self.fitting_rows()
        if protocol.derives_summary:  # its summary's scale check, as the estimator's
            check_feature_scale(X_fit)
        fitting, validation = protocol.client_upload(
            self.head, self.X, self.y, self.classes, split, client_index=request.client_index
        )
        derived = protocol.derives_summary
        if derived:  # exact (never private): derived afresh from this upload's statistics
            settings = (estimator.covariance, estimator.covariance_floor)
            if settings != (request.summary_covariance, request.covariance_floor):
                raise ValueError(
                    f"this client summarises with covariance={settings[0]!r}, "
                    f"covariance_floor={settings[1]!r}, but the run derives summaries with "
                    f"covariance={request.summary_covariance!r}, covariance_floor="
                    f"{request.covariance_floor!r}: the client would map its rows with another "
                    "summary than the server's"
                )
            state.summary = protocol.derived_summary(
                fitting,
                protocol.derived_shrinkage(
                    fitting, X_fit, y_fit, covariance=request.summary_covariance
                ),
                covariance=request.summary_covariance,
                covariance_floor=request.covariance_floor,
                client=self.label,
            )
        elif state.summary is None:
            state.summary = self.summarise()
        return Upload(
            None if derived else state.summary,
            n_fit=y_fit.shape[0],
            n_validation=0 if split is None else split[1].shape[0],
            n_test=0 if self.y_test is None else int(self.y_test.shape[0]),
            statistics=fitting,
            validation=validation,
            class_counts=class_counts(self.y, self.classes) if request.class_counts else None,
            shrinkage=state.summary.shrinkage if derived else None,
            label=self.label if derived else None,
        )

    def updates(self, request: UpdatesRequest) -> list:
        """Stages "updates" and "refit": one local head per ``tau``, on aligned rows."""
        transport = self.transport_map(request.reference)
        split = self.split
        rows = split[0] if request.part == "fit" and split is not None else slice(None)
        return local_updates(
            self.head,
            self.X[rows],
            self.y[rows],
            self.classes,
            transport,
            request.taus,
            client_index=self.state.client_index or 0,
        )

    def held_out(self, stage: str) -> tuple[np.ndarray, np.ndarray]:
        """This client's validation rows and labels, for ``stage``."""
        split = self.split
        if split is None:
            raise RuntimeError(f"{stage} was requested, but this run has no validation split")
        return self.X[split[1]], self.y[split[1]]

    def validate(self, request: ValidationRequest) -> ValidationCounts:
        """Stage "validation": correct predictions of each candidate on its held-out rows."""
        transport = self.transport_map(request.reference)
        X, y = self.held_out("validation")
        return score_candidates(request.heads, request.taus, transport, X, y, self.classes)

    def compare(self, request: ScreeningRequest) -> PairedCounts:
        """Stage "screening": the full head against each left-out head, on its held-out rows."""
        transport = self.transport_map(request.reference)
        X, y = self.held_out("screening")
        return paired_counts(
            request.full, request.left_out, request.masks, transport, request.tau, X, y,
            self.classes,
        )  # fmt: skip

    def evaluate(self, request: EvaluationRequest) -> Evaluation:
        """Stage "evaluation": the global head's correct predictions on its test rows."""
        transport = self.transport_map(request.reference)
        if self.X_test is None or self.y_test is None or self.y_test.shape[0] == 0:
            return Evaluation(0, 0)
        predictions = request.head.predict(transport.geodesic(request.tau).apply(self.X_test))
        return Evaluation(int(np.sum(predictions == self.y_test)), int(self.y_test.shape[0]))

    def answer(self, stage: str, request: Any) -> Any:
        """The reply to ``request`` at ``stage`` (what a transport calls)."""
        handlers = {
            "upload": self.upload,
            "updates": self.updates,
            "refit": self.updates,
            "validation": self.validate,
            "screening": self.compare,
            "evaluation": self.evaluate,
        }
        if stage not in handlers:
            raise ValueError(f"unknown stage {stage!r}; the stages are {list(handlers)}")
        return handlers[stage](request)
