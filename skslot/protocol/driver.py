"""The one-shot protocol's driver: its stage list, written once."""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._backend import as_host_rows
from .._validation import check_client_labels, check_open_fraction, check_row_labels
from ..defaults import VALIDATION_FRACTION
from ..exceptions import lone_classes, lone_text, shown_labels
from ..gaussian import GaussianSummary
from ..heads import OneShotHead
from ..selection import Candidate, Selection, validation_split
from .parameters import ProtocolParameters
from .report import ProtocolReport, ProtocolRunError, logger
from .roster import split_seeds
from .stages import evaluation, updates, upload, validation
from .state import RunState
from .transport import Transport

if TYPE_CHECKING:
    from ..defence.aggregation import DefendedAggregation

__all__ = ["OneShotProtocol", "ProtocolResult", "held_out_rows"]


@dataclass(eq=False)
class ProtocolResult:
    """The outcome of a run.

    Attributes
    ----------
    report : ProtocolReport
    head : OneShotHead
        The final global head.
    tau : float
    reference : GaussianSummary
    clients : list
        The accepted clients' addresses, in the order of ``summaries``.
    summaries : list of GaussianSummary
        The accepted clients' summaries as received.
    selection : Selection or None
        With ``tau = "auto"``, the choice and its table.
    candidate_heads : list of OneShotHead
        With ``tau = "auto"`` (or a screening), the candidates, fitted on the
        fitting rows of the clients that completed the screening.
    tau_scales : dict
        Each accepted client's factor of ``tau`` (``client_tau``), by address.
    stages : list of str
    """

    report: ProtocolReport
    head: OneShotHead
    tau: float
    reference: GaussianSummary
    clients: list
    summaries: list
    selection: Selection | None = None
    candidate_heads: list = field(default_factory=list)
    tau_scales: dict = field(default_factory=dict)

    @property
    def stages(self) -> list[str]:
        """The exchanges the run held, in order."""
        return self.report.stages


class OneShotProtocol(ProtocolParameters):
    """SLOT-Align and a one-shot head, over any transport: the stage order, once.

    Parameters
    ----------
    head : OneShotHead
        The head template (cloned for every fit, never modified); its
        ``strategy`` decides what the clients upload and whether they train
        locally.
    tau : float, "auto" or None, default=None
        Fraction of the transport the clients apply, or ``"auto"``: chosen by
        the clients' validation over ``taus`` and ``head_grid``; ``None``:
        the default of the head's ``label_mix`` (:attr:`label_mix`,
        :func:`skslot.defaults.default_tau`: 0 with each client's own mix,
        0.6 with the federation's).
    taus : sequence of float, default=(0, 0.2, 0.4, 0.6, 0.8, 1)
    head_grid : dict of str to list, optional
        Server-side head parameters searched with ``tau``.
    validation_fraction : float, default=0.2
        The share of each class of each client held out for validation, with
        ``tau="auto"`` or a screening.
    selection_rule : {"one-standard-error", "best"}, default="one-standard-error"
        How the server chooses from the validation scores: the
        least-transport candidate within one standard error of the best, or
        the best.  The rule is :func:`~skslot.selection.select_candidate`'s.
    refit : bool, default=True
        With ``tau = "auto"`` and no screening, refit the chosen candidate on
        all rows (the validation parts too).  A screened run never refits:
        its final head is the screened candidate, built from the
        contributions the screening judged (the clients' fitting rows).
    reference : ReferenceStep, optional
        How the server builds the reference and the maps (the default
        :class:`~skslot.protocol.stages.reference.ReferenceStep`).
    defence : DefenceBounds or None, default=None
        Screen the clients against each other and cap their weights; ``None``
        accepts every client whose messages pass their checks.
    min_clients : int, default=1
        Fewest clients that must complete every stage; below it the run fails
        with a :class:`~skslot.protocol.ProtocolRunError` whose report names
        who was missing or rejected.
    random_state : int, RandomState or None, default=None
        Seeds the clients' validation splits (one per client, by position).
    evaluate : bool, default=True
        Run the ``evaluation`` stage (clients score the global head on their
        test rows).
    client_tau : {"uniform", "label-shift"}, default="label-shift"
        Each client's fraction of the transport: ``tau`` for all
        (``"uniform"``, the paper's), or ``tau`` times the total-variation
        distance between its class proportions and the federation's
        (``"label-shift"``).  With ``"label-shift"`` the clients upload their
        class counts, checked against their summary and statistics
        (:mod:`skslot.label_shift`).
    summary_covariance : {"total", "within"}, default="total"
        The covariance each client's summary transports: of all its rows
        (``"total"``, the paper's) or of its class-centred rows (``"within"``,
        label-aware).  The server checks each client's statistics against
        its summary of that kind, or derives the summary of that kind from
        them (FedCGS); see :class:`~skslot.GaussianSummaryEstimator`'s
        ``covariance``.  ``"within"`` has no private release of its own, so
        a private run refuses it where the summary itself is released
        (O-FedAvg); FedCGS derives it from its released statistics.
    covariance_floor : float, default=1e-8
        The clients' summaries' ``covariance_floor``
        (:class:`~skslot.GaussianSummaryEstimator`), for the summaries the
        server derives from a client's statistics (FedCGS).
    mean_tau : float or None, default=1.0
        Fraction of the mean's transport, the same for every client and every
        candidate ``tau`` (``None``: the mean follows each client's ``tau``,
        the paper's geodesic).  See :class:`~skslot.SLOTTransformer`'s
        ``mean_tau``; the paper's configuration is ``tau=0.4``,
        ``mean_tau=None``, ``client_tau="uniform"``.
    screen : {"auto", "on", "off"}, default="auto"
        Screen each client's contribution by the others' validation
        (:mod:`skslot.defence.screening`, thresholds from ``defence``): ``"auto"``
        wherever there is a defence (a :class:`~skslot.defence.DefenceBounds`
        other than :class:`~skslot.defence.NoDefence`); ``"on"`` the same, but
        a run without a defence is refused; ``"off"`` never.  A run screens
        when it reaches more than :data:`~skslot.defence.screening.MIN_VOTERS`
        clients; the clients then hold out validation rows (at a fixed
        ``tau`` too: one more exchange) and the final head is the screened
        one, fitted on the fitting rows (docs/results/protocol_cost.md gives the cost).
    privacy : PrivacyBudget or None, default=None
        Run under one differential-privacy budget per client
        (:class:`~skslot.privacy.PrivacyBudget`, which each client holds
        and enforces itself, :class:`~skslot.protocol.ClientParty`'s
        ``privacy``): every value a client sends is then a release charged to
        it (the head's statistics, from which the server derives the summary,
        its shrinkage and the label-shift counts; the evaluation counts), and
        the report states what each client spent (``privacy_spent``).  Needs a
        head with a private release (FedCGS, FedPFT), a fixed ``tau`` and no
        screening (``screen="auto"`` then does not screen, and says why):
        validation counts are not released under the budget.
    config : dict, optional
        Shown in the report.
    """

    def run(self, transport: Transport, classes: ArrayLike) -> ProtocolResult:
        """Run every stage over ``transport``; the clients agree on the class set ``classes``.

        The stages, in order (docs/architecture.md tells the protocol):
        ``upload``; the defence's weights and the reference; with a validation
        round, the candidates (``updates`` for heads that train locally),
        ``validation`` (with ``tau = "auto"``) and ``screening`` (with a
        defence) until the screening excludes no one, then the final head:
        the screened candidate, or without a screening the chosen one refitted
        on all rows (``refit``); with neither, the final head (``updates``);
        ``evaluation``.

        Parameters
        ----------
        transport : Transport
        classes : array-like
            The run's class set.

        Returns
        -------
        ProtocolResult

        Raises
        ------
        ProtocolRunError
            When fewer than ``min_clients`` clients complete a stage, or a
            server step fails on the clients' values; its ``report`` says why.
        """
        from ..defence.aggregation import DefendedAggregation  # it wraps this module's stages

        run = RunState(self, transport, np.asarray(classes))
        try:
            return self._stages(run, DefendedAggregation(run))
        except ProtocolRunError:
            run.account.report(run.report)  # what each client spent before the run failed
            raise

    def _stages(self, run: RunState, defence: DefendedAggregation) -> ProtocolResult:
        """The stages of :meth:`run`, in order, on the run's state; each aggregation step
        handed to the defence around it."""
        upload.collect(run)  # each upload checked against itself
        defence.weigh()  # the defence: clients against each other, weight caps
        defence.build_reference()  # the reference step, without clients that break it
        selection: Selection | None = None
        heads: list = []
        if run.splits:
            taus = sorted({c.tau for c in self.candidates})
            fit = partial(self._candidates, run, defence, taus)
            selection, heads, chosen = defence.candidates(fit, taus)
            refit = partial(self._final_head, run, defence, "refit", chosen)
            final = defence.final_head(heads, chosen, refit)
        else:
            (chosen,) = self.candidates
            final = self._final_head(run, defence, "updates", chosen)
        run.report.tau = float(chosen.tau)
        untrained = final.untrained_classes()
        run.report.untrained_classes = untrained.tolist()
        if untrained.size:
            logger.warning(
                "skslot: no accepted client trained on class(es) %s of the run's class set: "
                "the head never predicts them",
                shown_labels(untrained.tolist()),
            )
        counts = {c: run.roster.clients[c].upload.class_counts for c in run.roster.order}
        held = {c: n for c, n in counts.items() if n is not None}
        if len(held) == len(counts):
            lone = lone_classes(held, run.classes)
            run.report.lone_classes = lone
            if lone:
                logger.warning(
                    "skslot: class(es) trained by one node only (%s): the head learns each from "
                    "that node's domain",
                    lone_text(lone, name=run.report.name),
                )
            if self.label_mix == "client":
                final.with_client_counts(held)  # the counts the label-shift rule received
        if self.evaluate:
            evaluation.evaluate(run, final, chosen.tau)
        run.report.status = "completed"
        run.account.report(run.report)
        order, alignment = run.roster.order, run.alignment
        assert alignment is not None  # built before any head (defence.build_reference)
        return ProtocolResult(
            run.report,
            final,
            float(chosen.tau),
            alignment.reference,
            order,
            [run.roster.clients[c].summary for c in order],
            selection,
            list(heads),
            {c: alignment.tau_scale(c) for c in order},
        )

    def _candidates(
        self, run: RunState, defence: DefendedAggregation, taus: Sequence[float]
    ) -> tuple[Selection | None, list, Candidate]:
        """The candidate heads on the clients' fitting rows at ``taus``, and the choice."""
        if self.head.strategy.trains_locally:  # until the reference stands
            collect = partial(updates.collect, run, "updates", taus, "fit")
            defence.local_heads(collect, "updates", taus)
        heads = self.head.strategy.fit_candidates(self.head, self.candidates, run)
        if not self.auto:
            return None, heads, self.candidates[0]
        selection = validation.choose(run, heads)
        return selection, heads, selection.candidate

    def _final_head(
        self, run: RunState, defence: DefendedAggregation, stage: str, chosen: Candidate
    ) -> OneShotHead:
        """The head at ``chosen`` on every accepted client's rows (their local heads asked for
        at ``stage``)."""
        if self.head.strategy.trains_locally:  # until the reference stands
            collect = partial(updates.collect, run, stage, [chosen.tau], "all")
            defence.local_heads(collect, stage, [chosen.tau])
        final = self.head.strategy.fit_final(self.head, chosen, run)
        run.report.final_head = "every accepted client's rows"
        return final


def held_out_rows(
    y: Any,
    client: Any,
    *,
    validation_fraction: float = VALIDATION_FRACTION,
    random_state: int | np.random.RandomState | None = None,
) -> dict[Hashable, tuple[np.ndarray, np.ndarray]]:
    """The rows each client holds out in a run with a validation round, as positions in ``y``.

    The split the clients of a :class:`~skslot.FederatedTauSearch` (and of a
    :class:`OneShotProtocol` over :class:`InProcessTransport`, whose clients
    are addressed by label) draw with ``tau = "auto"`` or a screening (a
    defence and four clients or more): the ``k``-th client in the protocol's
    order (by label) splits its rows with the run's ``k``-th seed
    (:func:`skslot.selection.validation_split`).
    Its summary and map describe the fitting rows and the validation round
    counts on the others; e.g. to fit a frozen
    :class:`~skslot.SLOTTransformer` on the rows the search's maps are
    estimated from.  (A Flower deployment orders its clients by node id.)

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels.
    client : array-like of shape (n_samples,), int, str or None
        Each row's client, as :class:`~skslot.FederatedTauSearch` takes it.
    validation_fraction : float, default=0.2
        The fraction of each class each client holds out (its
        ``validation_fraction``).
    random_state : int, RandomState or None, default=None
        The run's ``random_state``; a ``RandomState`` is not consumed: the
        split is that of a run started with its current state.

    Returns
    -------
    dict
        Per client, its fitting and validation rows (sorted positions in ``y``).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.protocol import held_out_rows
    >>> y = np.array([0] * 10 + [1] * 10)
    >>> client = np.array(["a", "b"] * 10)
    >>> rows = held_out_rows(y, client, validation_fraction=0.2, random_state=0)
    >>> [(c, len(fit), len(val)) for c, (fit, val) in rows.items()]
    [('a', 8, 2), ('b', 8, 2)]
    """
    y = np.asarray(as_host_rows(y))
    if y.ndim == 2 and y.shape[1] == 1:  # a column, as scikit-learn takes it
        y = y.ravel()
    y = check_row_labels(y, y.shape[0] if y.ndim else 0)
    labels, codes = check_client_labels(client, y.shape[0])
    check_open_fraction("validation_fraction", validation_fraction)
    if isinstance(random_state, np.random.RandomState):
        random_state = copy.deepcopy(random_state)
    seeds = split_seeds(labels, random_state)
    rows = {}
    for k, c in enumerate(labels):
        own = np.flatnonzero(codes == k)
        fit, val = validation_split(y[own], validation_fraction, seeds[c])
        rows[c] = (own[fit], own[val])
    return rows  # in the protocol's order: the labels are of one type, sorted
