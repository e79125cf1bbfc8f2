"""One run's state on the server: the accepted clients, the reference, the report.

:class:`RunState` is what the stages' server steps and the heads' strategies
(:class:`skslot.heads._fitting.ServerSide`) see of a run: each change to the
run's clients (one entered, rejected or dropped, a weight capped) and to its
reference (built, built again) is one named method that also writes the
report; the stages' server steps write their own results into the report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..defence import NoDefence
from ..defence.culprits import SERVER_STEP_ERRORS
from ..defence.screening import MIN_VOTERS
from ..gaussian import GaussianSummary
from ..label_mix import domain_offsets
from ..label_shift import label_shift_distances
from ..maps import GaussianMap, with_mean_image
from ..privacy.server import RunAccount
from .alignment import Alignment
from .report import ProtocolReport, ProtocolRunError, logger
from .roster import Roster, order_key, split_seeds
from .transport import Exchange, Transport

if TYPE_CHECKING:
    from ..defence import DefenceBounds
    from .parameters import ProtocolParameters

__all__ = ["RunState"]

T = TypeVar("T")


class RunState:
    """One run's state: the accepted clients, the reference and every map, the report.

    Parameters
    ----------
    settings : ProtocolParameters
        The protocol whose run this is: the stages read its parameters.
    transport : Transport
    classes : ndarray
        The run's class set.
    """

    def __init__(self, settings: ProtocolParameters, transport: Transport, classes: np.ndarray):
        self.settings, self.transport, self.classes = settings, transport, classes
        transport.open(settings.head, classes)
        self.defence: DefenceBounds | NoDefence = settings.defence or NoDefence()
        self.report = ProtocolReport(config=settings.config)
        self.report.classes = classes.tolist()
        self.report.nodes = list(transport.parties())
        #: The clients still in, and what the server holds about each.
        self.roster = Roster(self.report, settings.min_clients)
        #: The reference, each client's full map onto it and fraction of ``tau``.
        self.alignment: Alignment | None = None
        self.has_reference: set = set()
        #: Per part of the rows ("fit", "all"), each client's local heads by its fraction,
        #: received on the current reference (address to fraction to head).
        self.local_heads_received: defaultdict[str, dict] = defaultdict(dict)
        #: A private run's plan as the clients check it, and what each client spent.
        self.account = RunAccount(settings.privacy, settings.releases)
        #: Whether this run screens: the protocol screens and enough clients can vote.
        self.screens = settings.screening and len(self.report.nodes) > MIN_VOTERS
        #: Whether the clients hold out validation rows (to choose ``tau``, or to screen).
        self.splits = settings.auto or self.screens

    @property
    def checks_local_heads(self) -> bool:
        """Whether each client's local heads are checked against the class sums of its upload
        (:func:`~skslot.protocol.stages.updates.misplaced_means`): the defence checks a
        client's messages against each other, the head trains local heads, and the run has
        no privacy budget (exact class sums would give a private summary or release away)."""
        return (
            self.defence.checks_consistency
            and self.settings.head.strategy.trains_locally
            and self.account.budget is None
        )

    # -- the clients ---------------------------------------------------------------------

    def split_seeds(self) -> dict[Hashable, int]:
        """Each client's seed of its validation split (see :func:`split_seeds`).

        Returns
        -------
        dict of address to int
        """
        return split_seeds(self.roster.parties, self.settings.random_state)

    def weight_factor(self, c: Hashable) -> float:
        """Client ``c``'s capped weight as a fraction of its rows.

        Parameters
        ----------
        c : hashable
            The client's address.

        Returns
        -------
        float
        """
        client = self.roster.clients[c]
        return client.weight / client.summary.n

    # -- the exchanges -------------------------------------------------------------------

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        """One exchange over the transport, its bytes, rejections and missing clients reported.

        A client that does not answer (after the transport's retries) leaves
        the run here: it is asked nothing more, so a silent client costs one
        reply timeout, and what it contributed to (the reference, the
        candidates, the choice) is made again without it
        (:meth:`~skslot.defence.aggregation.DefendedAggregation.refresh`).

        Parameters
        ----------
        stage : str
        requests : mapping of address to request

        Returns
        -------
        Exchange
        """
        report = self.report
        report.stages.append(stage)
        result = self.transport.exchange(stage, requests)
        for counted, found in (
            (report.bytes_sent, result.bytes_sent),
            (report.bytes_received, result.bytes_received),
        ):
            for c, n in found.items():  # a stage run twice (a choice made again) adds up
                per_stage = counted.setdefault(c, {})
                per_stage[stage] = per_stage.get(stage, 0) + n
        for c, why in result.rejected.items():
            report.reject(stage, c, why)
        missing = sorted(result.missing, key=order_key)
        report.missing[stage] = sorted({*report.missing.get(stage, []), *missing}, key=order_key)
        for c in missing:
            logger.warning(
                "%s missing at the %s stage: %s", report.name(c), stage, result.missing[c]
            )
        if stage != "upload":  # at upload, a client that does not answer never entered
            self.roster.keep(stage, [c for c in self.roster.order if c not in result.missing])
        return result

    def reference_for(self, c: Hashable) -> GaussianSummary | None:
        """The reference the first time a client is sent a message after it was built.

        Parameters
        ----------
        c : hashable
            The client's address.

        Returns
        -------
        GaussianSummary or None
            The reference, or ``None`` if ``c`` was already sent it (or none is built).
        """
        if c in self.has_reference or self.alignment is None:
            return None
        self.has_reference.add(c)
        return self.alignment.reference_for(c)

    @property
    def reference(self) -> GaussianSummary | None:
        """The run's reference (``None`` before it is built)."""
        return None if self.alignment is None else self.alignment.reference

    def client_taus(self, c: Hashable, taus: Sequence[float]) -> tuple[float, ...]:
        """The fractions client ``c`` moves by at the run's ``taus`` (``client_tau``).

        Parameters
        ----------
        c : hashable
            The client's address.
        taus : sequence of float
            The run's fractions.

        Returns
        -------
        tuple of float
            Each of ``taus`` times the client's factor of ``tau``
            (:meth:`~skslot.protocol.alignment.Alignment.tau_scale`).
        """
        scale = 1.0 if self.alignment is None else self.alignment.tau_scale(c)
        return tuple(float(t) * scale for t in taus)

    def server_step(self, what: str, step: Callable[[], T]) -> T:
        """A server step on client values; its failure fails the run with a report.

        Parameters
        ----------
        what : str
            The step, named in the error.
        step : callable
            The step, called without arguments.

        Returns
        -------
        object
            What ``step`` returns.

        Raises
        ------
        ProtocolRunError
            If ``step`` raises one of :data:`SERVER_STEP_ERRORS`.
        """
        try:
            return step()
        except SERVER_STEP_ERRORS as exc:
            raise ProtocolRunError(
                f"{what} failed: {type(exc).__name__}: {exc}", self.report
            ) from exc

    # -- the reference -------------------------------------------------------------------

    def adopt(self, alignment: Alignment) -> bool:
        """Make ``alignment``, built from the clients in, the run's reference and maps.

        Where the reference changed, each client gets it with its next request.  The defence
        builds it
        (:meth:`~skslot.defence.aggregation.DefendedAggregation.build_reference`).

        Parameters
        ----------
        alignment : Alignment
            The alignment of the accepted clients (:meth:`alignment_of`).

        Returns
        -------
        bool
            Whether the reference changed (one fixed before the run stays the same).
        """
        changed = self.alignment is None or alignment.reference is not self.alignment.reference
        if changed:
            self.has_reference.clear()
        self.alignment = alignment
        self.report.barycenter_iterations = alignment.n_iter
        self.report.reference_clients = self.roster.order
        if self.settings.client_tau != "uniform":
            self.report.tau_scales = {
                c: round(alignment.tau_scale(c), 6) for c in self.roster.order
            }
        return changed

    def alignment_of(self, order: Sequence[Hashable]) -> Alignment:
        """The reference of the clients ``order``, their maps and fractions of ``tau``.

        Parameters
        ----------
        order : sequence of addresses
            Accepted clients.

        Returns
        -------
        Alignment

        Raises
        ------
        ValueError, ArithmeticError, numpy.linalg.LinAlgError, MemoryError
            Where the clients' values break the step (:data:`SERVER_STEP_ERRORS`).
        """
        order = list(order)
        summaries = [self.roster.clients[c].summary for c in order]
        weights = [self.roster.clients[c].weight for c in order]
        built = self.settings.reference.build(order, summaries, weights)
        full_maps = dict(built.maps)
        destinations = self._mean_destinations(order, full_maps)
        for c, destination in destinations.items():
            mean = self.roster.clients[c].summary.mean
            full_maps[c] = with_mean_image(full_maps[c], mean, destination)
        for c, summary in zip(order, summaries, strict=True):
            if full_maps[c].anchor is None:  # a fitted transformer's maps come anchored
                full_maps[c] = full_maps[c].with_mean_fraction(self.settings.mean_tau, summary.mean)
        return Alignment(
            built.reference, full_maps, destinations, self._tau_scales(order), built.n_iter
        )

    def _mean_destinations(
        self, order: Sequence[Hashable], full_maps: Mapping[Hashable, GaussianMap]
    ) -> dict[Hashable, np.ndarray]:
        """Where each client's mean moves with ``label_mix="client"`` (none otherwise).

        The client's mean less its domain offset, measured within classes from the
        class sums of its statistics, or of its fitting rows where the statistics
        carry none (:func:`~skslot.label_mix.domain_offsets`); its own mean where
        some client sent none (a private run or a private summary: no offset measured).
        A reference whose maps came anchored (a fitted transformer's) keeps them.
        """
        if self.settings.label_mix != "client" or any(
            full_maps[c].anchor is not None for c in order
        ):
            return {}
        means = {c: self.roster.clients[c].summary.mean for c in order}
        stats = [self.roster.clients[c].statistics for c in order]
        if all(hasattr(stat, "class_sums") for stat in stats):
            parts = [stat.class_sums() for stat in stats]
        elif all(self.roster.clients[c].upload.class_sums is not None for c in order):
            parts = [self.roster.clients[c].upload.class_sums for c in order]  # sent for it alone
        else:
            return means
        offsets = domain_offsets(np.stack([n for n, _ in parts]), np.stack([s for _, s in parts]))
        return {c: means[c] - offset for c, offset in zip(order, offsets, strict=True)}

    def _tau_scales(self, order: Sequence[Hashable]) -> dict[Hashable, float]:
        """Each of ``order``'s factor of ``tau``, from their class counts (all 1: uniform)."""
        if self.settings.client_tau == "uniform":
            return dict.fromkeys(order, 1.0)
        capped = any(c in self.report.capped for c in order)
        weights = {  # the capped weights, in the class counts' rows (fitting and held out)
            c: self.weight_factor(c) * self.roster.clients[c].upload.n_rows for c in order
        }
        # the capped weights where some client's is capped, else the pooled counts
        return label_shift_distances(self.roster.class_counts(order), weights if capped else None)

    # -- what a head's strategy sees (skslot.heads._fitting.ServerSide) -----------------

    def statistics(self) -> list:
        """Each accepted client's fitting statistics (weight-capped), in the run's order.

        Returns
        -------
        list
        """
        return [self.roster.clients[c].statistics for c in self.roster.order]

    def validation_statistics(self) -> list:
        """Each accepted client's validation statistics (``None`` where it has none).

        Returns
        -------
        list
        """
        return [self.roster.clients[c].validation for c in self.roster.order]

    def full_map(self, c: Hashable) -> GaussianMap:
        """Client ``c``'s full map as the client applies it (at ``tau = 1``, its mean moved by
        the run's ``mean_tau``).

        Parameters
        ----------
        c : hashable
            The client's address.

        Returns
        -------
        GaussianMap
        """
        assert self.alignment is not None  # built before any map is asked for
        return self.alignment.full_maps[c]

    def maps(self) -> list[GaussianMap]:
        """Each client's map at ``tau = 1``: its full map, or that scaled by its factor of ``tau``.

        With ``mean_tau`` the map is anchored at the client's mean, which
        moves by ``mean_tau`` at every ``tau``
        (:meth:`~skslot.maps.GaussianMap.with_mean_fraction`), unless the
        run's maps came anchored (a fitted transformer's,
        :class:`~skslot.protocol.stages.reference.FixedReference`).

        Returns
        -------
        list of GaussianMap
            In the run's order.
        """
        assert self.alignment is not None  # built before any map is asked for
        return self.alignment.maps(self.roster.order)

    def local_heads(self, part: str, tau: float) -> list:
        """Each accepted client's local head at the run's ``tau`` on ``part`` of its rows.

        They were received by the ``updates`` or ``refit`` stage
        (:func:`skslot.protocol.stages.updates.collect`).

        Parameters
        ----------
        part : {"fit", "all"}
            The part of the clients' rows the heads were trained on.
        tau : float
            The run's fraction (each client's own is scaled by its factor of ``tau``).

        Returns
        -------
        list
            In the run's order.
        """
        cache = self.local_heads_received[part]
        return [cache[c][self.client_taus(c, [tau])[0]] for c in self.roster.order]
