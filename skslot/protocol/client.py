"""A client's answers: each request to its stage's client step; a private client's
through its release plan (:func:`skslot.privacy.private_answer`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import check_feature_scale
from ..gaussian import GaussianSummary
from ..heads import LinearScores
from ..label_shift import class_sums
from ..maps import GaussianMap
from ..privacy.client import PrivateRelease, private_answer, private_summary_problem
from .party import ClientRelease, Party
from .stages import STAGES, ClientWire

if TYPE_CHECKING:
    from ..privacy import PrivacyLedger
    from ..wire.payload import Payload, ReceivedPayload
    from .stages.upload import UploadRequest

__all__ = ["ClientParty", "ExactRelease"]


class ClientParty(Party):
    """One client of the protocol: its rows, its head settings and its run state.

    The stages' client steps (``answer`` in each module of
    :mod:`skslot.protocol.stages`) read and update it; the in-process
    transport and the Flower ``ClientApp`` call the same steps on it.

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
        Settings of the summary (by default exact Ledoit-Wolf, in factor form
        where the client holds no more fitting rows than features:
        ``GaussianSummaryEstimator(form="auto")``; or private, which is dense).
    validation_fraction : float, default=0.2
        Share of each class held out when the server asks for a split.
    state : ClientState, optional
        A run's state restored between stages (the Flower ``ClientApp``).
    privacy : PrivacyBudget, optional
        The client's own differential-privacy budget for a run
        (:class:`~skslot.privacy.PrivacyBudget`): the party then answers
        only the releases of its plan, each charged to the budget, and
        refuses every other request with one reply, before reading its rows
        (:mod:`skslot.privacy`); its rows with a non-finite value or a
        label outside ``classes`` enter as null rows
        (:func:`~skslot.privacy.null_rows`).  A party (its state) is one
        run's: a new run needs a new party, and spends a new budget.
    lifetime : LifetimeBudget, optional
        What all the client's runs release together
        (:class:`~skslot.privacy.LifetimeBudget`, on the client's disk): each
        private run is charged ``privacy``'s ``(epsilon, delta)`` once, when
        it announces its plan, and a run past the lifetime budget is refused
        before anything is released.  Needs ``privacy``.
    """

    def answer(self, stage: str, request: Any) -> Any:
        """The reply to ``request`` at ``stage``: the stage's client step on this party
        (under a privacy budget, wrapped by :func:`private_answer`).

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        request : object
            The stage's request.

        Returns
        -------
        object
            The stage's reply.
        """
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; the stages are {list(STAGES)}")
        if self.privacy is not None:
            return private_answer(self, STAGES[stage], request)
        return STAGES[stage].answer(self, request)

    def serve(self, stage: str, payload: ReceivedPayload) -> Payload:
        """This client's side of one message: the request decoded with the client's checks,
        answered (:meth:`answer`) and the reply encoded, as each transport delivers it.

        Parameters
        ----------
        stage : str
            A stage of :data:`~skslot.protocol.stages.STAGES`.
        payload : ReceivedPayload
            The request as received.

        Returns
        -------
        Payload
            The encoded reply.

        Raises
        ------
        WireFormatError
            If the request fails its checks.
        """
        codec = STAGES[stage]
        wire = ClientWire(self.classes, int(np.shape(self.X)[1]))
        request = codec.decode_request(payload, wire)
        return codec.encode_reply(self.answer(stage, request), request)

    def release(self) -> ClientRelease:
        """How this client releases what it sends: exactly, or under its privacy budget
        through its ledger (:class:`~skslot.privacy.client.PrivateRelease`).

        Returns
        -------
        ExactRelease or PrivateRelease
            Under a privacy budget, the same object while the party has that
            budget (it keeps the run's ledger).
        """
        if self.privacy is None:
            return ExactRelease(self)
        kept = self.__dict__.get("_private_release")
        if kept is None or kept.party is not self or kept.budget is not self.privacy:
            kept = self.__dict__["_private_release"] = PrivateRelease(self)
        return kept

    def ledger(self) -> PrivacyLedger:
        """This run's ledger of the client's releases, under its privacy budget
        (:attr:`PrivateRelease.ledger <skslot.privacy.client.PrivateRelease.ledger>`).

        Returns
        -------
        PrivacyLedger

        Raises
        ------
        RuntimeError
            If the client has no privacy budget, or no run announced its releases.
        """
        release = self.release()
        if not isinstance(release, PrivateRelease):
            raise RuntimeError("this client has no privacy budget")
        return release.ledger


class ExactRelease:
    """A client without a privacy budget: its exact summary, shrinkage, counts and heads.

    Its rows' scale is checked (the second moments must fit in float64), its
    shrinkage is the Ledoit-Wolf one of its rows (their fourth moments).  It
    has the methods of :class:`~skslot.protocol.party.ClientRelease`.

    Parameters
    ----------
    party : Party
        The client.
    """

    statistics_release = None

    def __init__(self, party: Party) -> None:
        self.party = party

    def begin(self, request: UploadRequest) -> None:
        """Refuse a run that asks for private releases (this client has no budget), and a
        private summary beside statistics that reveal its moments.

        Parameters
        ----------
        request : UploadRequest
        """
        why = private_summary_problem(self.party.head, self.party.estimator.epsilon)
        if why:
            raise ValueError(why)
        if request.privacy is not None:
            raise ValueError(
                "the run asks for private releases, but this client has no privacy budget of "
                "its own"
            )

    def check_rows(self, X: np.ndarray) -> None:
        """Check that the rows' second moments fit in float64.

        Parameters
        ----------
        X : ndarray of shape (n, m)
        """
        check_feature_scale(X)

    def shrinkage(self, fitting: Any, X: np.ndarray, y: np.ndarray, covariance: str) -> float:
        """The Ledoit-Wolf shrinkage of the fitting rows.

        Parameters
        ----------
        fitting : object
            The head's statistics of the fitting rows.
        X, y : ndarray
            The fitting rows and their labels.
        covariance : {"total", "within"}

        Returns
        -------
        float
        """
        return fitting.ledoit_wolf_shrinkage(X, y, covariance=covariance)

    def summary(self, fitting: Any, request: UploadRequest) -> GaussianSummary:
        """The summary of the client's fitting rows.

        Parameters
        ----------
        fitting : object or None
        request : UploadRequest

        Returns
        -------
        GaussianSummary
        """
        return self.party.summarise()

    def class_counts(self, fitting: Any) -> np.ndarray:
        """The client's exact class counts.

        Parameters
        ----------
        fitting : object or None

        Returns
        -------
        ndarray of int64
        """
        return self.party.class_counts

    def released_counts(self, fitting: Any) -> np.ndarray | None:
        """``None``: nothing is released.

        Parameters
        ----------
        fitting : object or None

        Returns
        -------
        None
        """
        return None

    def class_sums(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The class sums of the fitting rows; none beside a private summary (exact class
        sums would give it away).

        Parameters
        ----------
        X, y : ndarray
            The fitting rows and their labels.

        Returns
        -------
        tuple of (ndarray, ndarray) or None
        """
        if self.party.estimator.epsilon is not None:
            return None
        return class_sums(X, y, self.party.classes)

    def local_head_rows(
        self, full_map: GaussianMap, taus: Sequence[float], part: str
    ) -> Callable[[np.ndarray, np.ndarray, GaussianMap], tuple[np.ndarray, np.ndarray]] | None:
        """``None``: the rows aligned as they are.

        Parameters
        ----------
        full_map : GaussianMap
        taus : sequence of float
        part : {"fit", "all"}

        Returns
        -------
        None
        """
        return None

    def evaluation_count(self, head: LinearScores, tau: float, count: Callable[[], int]) -> int:
        """The exact count.

        Parameters
        ----------
        head : LinearScores
        tau : float
        count : callable

        Returns
        -------
        int
        """
        return count()

    def own_mix_accuracy(self, accuracy: Callable[[], float | None]) -> float | None:
        """The exact figure.

        Parameters
        ----------
        accuracy : callable

        Returns
        -------
        float or None
        """
        return accuracy()
