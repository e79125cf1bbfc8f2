"""A client's answers: each request to its stage's client step; a private client's
through its release plan (:mod:`skslot.protocol.plan`)."""

from __future__ import annotations

from typing import Any

from .party import Party
from .plan import logger, refusal, rows_digest
from .stages import STAGES

__all__ = ["ClientParty", "private_answer"]


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
        (:class:`~skslot.accounting.PrivacyBudget`): the party then answers
        only the releases of its plan, each charged to the budget, and
        refuses every other request with one reply, before reading its rows
        (:mod:`skslot.protocol.plan`); its rows with a non-finite value or a
        label outside ``classes`` enter as null rows
        (:func:`~skslot.protocol.plan.null_rows`).  A party (its state) is one
        run's: a new run needs a new party, and spends a new budget.
    lifetime : LifetimeBudget, optional
        What all the client's runs release together
        (:class:`~skslot.lifetime.LifetimeBudget`, on the client's disk): each
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
            return private_answer(self, stage, request)
        return STAGES[stage].answer(self, request)


def private_answer(party: Party, stage: str, request: Any) -> Any:
    """A private client's reply to ``request`` at ``stage``: a release of its plan, or the
    refusal.

    The stage's :meth:`~skslot.protocol.stages.Stage.private_problem` is read
    first, before any of the client's rows; a request it refuses charges
    nothing.  A step that fails after the request was admitted answers with
    the same refusal (its error in the client's own log).

    Parameters
    ----------
    party : ClientParty
        A client with a privacy budget.
    stage : str
        A stage of :data:`~skslot.protocol.stages.STAGES`.
    request : object
        The stage's request, as received.

    Returns
    -------
    object
        The stage's reply.

    Raises
    ------
    RequestRefused
        If the request is outside the plan, or its step failed.
    """
    step = STAGES[stage]
    why = changed_rows_problem(party) or step.private_problem(party, request)
    if why is not None:
        logger.warning("client %r refuses the %r request: %s", party.label, stage, why)
        raise refusal(stage)
    try:
        return step.answer(party, request)
    except Exception:
        logger.exception("client %r failed to answer the %r request", party.label, stage)
        raise refusal(stage) from None


def changed_rows_problem(party: Party) -> str | None:
    """Why a private client refuses every request of a run whose rows changed since its first
    release, or ``None``.

    Each release's noise is drawn from the run's secret seed and the
    release's name, so a release made again on other rows (a node's file
    replaced, a client restored in a new process) would reuse the noise and
    tell the server the exact difference.

    Parameters
    ----------
    party : Party

    Returns
    -------
    str or None
    """
    kept = party.state.rows_digest
    if kept is None or kept == rows_digest(party.X, party.y):
        return None
    return "its rows changed since this run's first release (the same noise on other rows)"
