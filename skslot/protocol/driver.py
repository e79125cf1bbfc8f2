"""The one-shot protocol's stage order, written once.

:class:`OneShotProtocol` runs a whole round over any :class:`~skslot.protocol.Transport`:

1. ``upload``: every client sends its summary (and, for statistics heads,
   the statistics of its unaligned rows; with a validation round those of
   its fitting and of its validation rows apart, and its summary describes
   the fitting rows alone, so that the held-out rows are new to its map);
2. the server ties each upload to the others (:mod:`skslot.protocol.intake`),
   screens the clients against each other (:class:`~skslot.defence.DefenceBounds`),
   and builds the reference and every client's map (:mod:`skslot.protocol.reference`);
3. the head's own protocol (:mod:`skslot.heads`) fits one head per candidate
   ``(tau, server parameters)``, asking the clients for local heads where it
   trains on aligned rows;
4. with ``tau = "auto"``, ``validation``: each client counts the candidates'
   correct predictions on its held-out rows; the server chooses
   (:func:`~skslot.selection.select_candidate`);
5. ``screening`` (on by default with ``tau = "auto"`` and a defence): each
   client compares the chosen head with the heads without one other client
   each on its held-out rows; a client whose exclusion makes the others
   significantly better is left out (:mod:`skslot.screening`), the
   reference is built again without it, the choice made again and the rest
   screened again; then the final head is fitted (a client rejected after
   the reference was built never shapes the final head's reference);
6. ``evaluation``: the global head out, each client's test counts back.

:class:`~skslot.FederatedTauSearch` runs it in process
(:class:`~skslot.protocol.InProcessTransport`) and the Flower ``ServerApp``
over a ``Grid`` (:mod:`skslot.flower.transport`): the same object, two
transports.  No step branches on the kind of head.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from .._backend import as_host_rows
from .._validation import (
    check_client_labels,
    check_in_range,
    check_open_fraction,
    check_option,
    check_row_labels,
    spawn_seeds,
)
from ..defence import DefenceBounds
from ..gaussian import GaussianMap, GaussianSummary
from ..heads import LinearScores, OneShotHead
from ..label_shift import CLIENT_TAU_RULES, label_shift_distances
from ..screening import MIN_VOTERS, SCREENING, PairedCounts, comparable_classes
from ..selection import (
    DEFAULT_TAUS,
    SELECTION_RULES,
    Candidate,
    Selection,
    ValidationCounts,
    candidate_grid,
    check_tau_grid,
    select_candidate,
    validation_sizes,
    validation_split,
)
from ..summary import COVARIANCES
from . import intake
from .exchanges import (
    Evaluation,
    EvaluationRequest,
    Exchange,
    ScreeningRequest,
    UpdatesRequest,
    Upload,
    UploadRequest,
    ValidationRequest,
)
from .reference import ReferenceStep
from .report import ProtocolReport, ProtocolRunError, logger

__all__ = ["OneShotProtocol", "ProtocolResult", "Transport"]

#: Server steps whose failure on the clients' values fails the run with a report.
SERVER_STEP_ERRORS = (ValueError, ArithmeticError, np.linalg.LinAlgError, MemoryError)
#: Barycenter iterations of each leave-one-out probe of the culprit search.
PROBE_ITERATIONS = 2


class Transport(Protocol):
    """How the driver reaches the clients.

    ``parties()`` lists the clients' addresses; ``exchange(stage, requests)``
    delivers one request object per addressed client and returns the decoded,
    checked replies (:class:`~skslot.protocol.exchanges.Exchange`).
    """

    def parties(self) -> list[Hashable]: ...

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange: ...


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
        return self.report.stages


@dataclass(eq=False)
class _Client:
    """What the server holds about one accepted client."""

    upload: Upload
    weight: float = 0.0
    statistics: Any = None
    validation: Any = None
    tau_scale: float = 1.0

    @property
    def summary(self) -> GaussianSummary:
        return self.upload.summary


class OneShotProtocol:
    """SLOT-Align and a one-shot head, over any transport: the stage order, once.

    Parameters
    ----------
    head : OneShotHead
        The head template (cloned for every fit, never modified); its
        ``protocol`` attribute decides what the clients upload and whether
        they train locally.
    tau : float or "auto", default=0.4
        Fraction of the transport the clients apply, or ``"auto"``: chosen by
        the clients' validation over ``taus`` and ``head_grid``.
    taus : sequence of float, default=(0, 0.2, 0.4, 0.6, 0.8, 1)
    head_grid : dict of str to list, optional
        Server-side head parameters searched with ``tau``.
    validation_fraction : float, default=0.2
    rule : {"one-standard-error", "best"}, default="one-standard-error"
    refit : bool, default=True
        With ``tau = "auto"``, refit the chosen candidate on all rows.
    reference : ReferenceStep, optional
        How the server builds the reference and the maps (the default
        :class:`~skslot.protocol.reference.ReferenceStep`).
    defence : DefenceBounds or None, default=None
        Screen the clients against each other and cap their weights; ``None``
        accepts every client whose messages pass their checks.
    min_clients : int, default=1
        Fewest clients that must complete every stage.
    random_state : int, RandomState or None, default=None
        Seeds the clients' validation splits (one per client, by position).
    evaluate : bool, default=True
        Run the ``evaluation`` stage (clients score the global head on their
        test rows).
    client_tau : {"uniform", "label-shift"}, default="uniform"
        Each client's fraction of the transport: ``tau`` for all, or ``tau``
        times the total-variation distance between its class proportions and
        the federation's (:mod:`skslot.label_shift`; the clients then upload
        their class counts, checked against their summary and statistics).
    summary_covariance : {"total", "within"}, default="total"
        What the clients' summaries describe (all rows, or class-centred
        rows: :class:`~skslot.GaussianSummaryEstimator`), so the server checks
        each client's statistics against its summary of that kind, or derives
        the summary of that kind from them (FedCGS).
    covariance_floor : float, default=1e-8
        The clients' summaries' ``covariance_floor``
        (:class:`~skslot.GaussianSummaryEstimator`), for the summaries the
        server derives from a client's statistics (FedCGS).
    mean_tau : float or None, default=None
        Fraction of the mean's transport, the same for every client and every
        candidate ``tau`` (:class:`~skslot.SLOTTransformer`'s ``mean_tau``);
        ``None``: the mean follows each client's ``tau``.
    screen : {"auto", "on", "off"}, default="auto"
        Screen each client's contribution by the others' validation
        (:mod:`skslot.screening`, thresholds from ``defence``): ``"auto"``
        where the run has a validation round (``tau = "auto"``) and a
        defence; ``"on"`` also at a fixed ``tau`` (the clients then hold out
        validation rows, and the final head is refitted on all rows: one more
        exchange, two for O-FedAvg); ``"off"`` never.
    config : dict, optional
        Shown in the report.
    """

    def __init__(
        self,
        head: OneShotHead,
        *,
        tau: float | str = 0.4,
        taus: Sequence[float] = DEFAULT_TAUS,
        head_grid: Mapping[str, Sequence] | None = None,
        validation_fraction: float = 0.2,
        rule: str = "one-standard-error",
        refit: bool = True,
        reference: ReferenceStep | None = None,
        defence: DefenceBounds | None = None,
        min_clients: int = 1,
        random_state: int | np.random.RandomState | None = None,
        evaluate: bool = True,
        client_tau: str = "uniform",
        summary_covariance: str = "total",
        covariance_floor: float = 1e-8,
        mean_tau: float | None = None,
        screen: str = "auto",
        config: dict | None = None,
    ) -> None:
        if not isinstance(head, OneShotHead):
            raise TypeError(
                f"head must be a skslot one-shot head (skslot.heads), got {type(head).__name__}"
            )
        head._check_params()
        if tau != "auto":
            if isinstance(tau, str):
                raise ValueError(f"tau must be a number in [0, 1] or 'auto', got {tau!r}")
            check_in_range("tau", tau, 0.0, 1.0)
        check_tau_grid(taus)
        self.candidates = (
            candidate_grid(head, taus, head_grid) if tau == "auto" else [Candidate(float(tau))]
        )
        check_open_fraction("validation_fraction", validation_fraction)
        check_option("rule", rule, SELECTION_RULES)
        if not isinstance(refit, (bool, np.bool_)):
            raise ValueError(f"refit must be True or False, got {refit!r}")
        if defence is not None and not isinstance(defence, DefenceBounds):
            raise TypeError(f"defence must be DefenceBounds or None, got {type(defence).__name__}")
        self.head = head
        self.tau = tau
        self.validation_fraction = validation_fraction
        self.rule = rule
        self.refit = bool(refit)
        self.reference = reference if reference is not None else ReferenceStep()
        self.defence = defence
        self.min_clients = min_clients
        self.random_state = random_state
        self.evaluate = evaluate
        self.client_tau = check_option("client_tau", client_tau, CLIENT_TAU_RULES)
        self.summary_covariance = check_option(
            "summary_covariance", summary_covariance, COVARIANCES
        )
        self.covariance_floor = check_in_range("covariance_floor", covariance_floor, 0.0, None)
        self.mean_tau = None if mean_tau is None else check_in_range("mean_tau", mean_tau, 0.0, 1.0)
        self.screen = check_option("screen", screen, SCREENING)
        if screen == "on" and defence is None:
            raise ValueError(
                "screen='on' needs a defence: its thresholds are the DefenceBounds' "
                "screen_significance and screen_min_gain"
            )
        self.config = dict(config or {})

    @property
    def auto(self) -> bool:
        """Whether ``tau`` is chosen by the federation."""
        return self.tau == "auto"

    @property
    def screening(self) -> bool:
        """Whether the clients' contributions are screened by the others' validation."""
        if self.defence is None or self.screen == "off":
            return False
        return self.screen == "on" or self.auto

    @property
    def split(self) -> bool:
        """Whether the clients hold out validation rows (to choose ``tau``, or to screen)."""
        return self.auto or self.screening

    def run(self, transport: Transport, classes: Sequence) -> ProtocolResult:
        """Run every stage over ``transport``; the clients agree on the class set ``classes``.

        Raises
        ------
        ProtocolRunError
            When fewer than ``min_clients`` clients complete a stage, or a
            server step fails on the clients' values; its ``report`` says why.
        """
        run = _Run(self, transport, np.asarray(classes))
        return run.execute()


class _Run:
    """One run's state: the accepted clients, the reference, the report.

    It is what a head's protocol sees of the server (:class:`skslot.heads.ServerSide`).
    """

    def __init__(self, protocol: OneShotProtocol, transport: Transport, classes: np.ndarray):
        self.protocol, self.transport, self.classes = protocol, transport, classes
        self.report = ProtocolReport(config=protocol.config)
        self.report.classes = classes.tolist()
        self.clients: dict[Hashable, _Client] = {}
        self.reference: GaussianSummary | None = None
        self.full_maps: dict[Hashable, GaussianMap] = {}
        self.has_reference: set = set()
        #: Per part of the rows ("fit", "all"), each client's local heads by its fraction.
        self.updates: dict[str, dict[Hashable, dict[float, Any]]] = {}

    # -- the stage order ---------------------------------------------------------------

    def execute(self) -> ProtocolResult:
        protocol, report = self.protocol, self.report
        head = protocol.head
        report.nodes = list(self.transport.parties())
        self.uploads()
        self.screen_summaries()
        self.build_reference()
        self.scale_taus()  # over the clients the reference kept, with their capped weights
        selection, candidates = None, []
        if protocol.split:
            candidates, selection, chosen = self.choose()
            while protocol.screening and self.screen_contributions(chosen, candidates):
                self.refresh_reference("screening")  # without the removed clients
                candidates, selection, chosen = self.choose()  # and screened again
            if protocol.refit or not protocol.auto:
                final = head.protocol.fit_final(head, chosen, self, stage="refit")
            else:
                final = candidates[selection.index]
        else:
            (chosen,) = protocol.candidates
            final = head.protocol.fit_final(head, chosen, self, stage="updates")
        tau = chosen.tau
        report.tau = float(tau)
        if protocol.evaluate:
            self.evaluation(final, tau)
        report.status = "completed"
        order = self.order
        return ProtocolResult(
            report,
            final,
            float(tau),
            self.reference,
            order,
            [self.clients[c].summary for c in order],
            selection,
            list(candidates),
            {c: self.clients[c].tau_scale for c in order},
        )

    def choose(self) -> tuple[list[OneShotHead], Selection | None, Candidate]:
        """The candidate heads on the fitting rows, and the one chosen (by validation)."""
        protocol, head = self.protocol, self.protocol.head
        candidates = head.protocol.fit_candidates(head, protocol.candidates, self)
        if not protocol.auto:
            return candidates, None, protocol.candidates[0]
        selection = self.select(candidates)
        return candidates, selection, selection.candidate

    # -- what a head's protocol sees ---------------------------------------------------

    def statistics(self) -> list:
        return [self.clients[c].statistics for c in self.order]

    def validation_statistics(self) -> list:
        return [self.clients[c].validation for c in self.order]

    def maps(self) -> list[GaussianMap]:
        """Each client's map at ``tau = 1``: its full map, or that scaled by its ``tau_scale``.

        With ``mean_tau`` the map is anchored at the client's mean, which
        moves by ``mean_tau`` at every ``tau``
        (:meth:`~skslot.gaussian.GaussianMap.with_mean_fraction`), unless the
        run's maps came anchored (a fitted transformer's,
        :class:`~skslot.protocol.reference.FixedReference`).
        """
        scaled, mean_tau = [], self.protocol.mean_tau
        for c in self.order:
            full, scale = self.full_maps[c], self.clients[c].tau_scale
            if full.anchor is None:  # a fitted transformer's maps come anchored
                full = full.with_mean_fraction(mean_tau, self.clients[c].summary.mean)
            scaled.append(full if scale == 1.0 else full.geodesic(scale))
        return scaled

    def client_taus(self, c: Hashable, taus: Sequence[float]) -> tuple[float, ...]:
        """The fractions client ``c`` moves by at the run's ``taus`` (``client_tau``)."""
        scale = self.clients[c].tau_scale
        return tuple(float(t) * scale for t in taus)

    def server_step(self, what: str, step: Callable[[], Any]) -> Any:
        """A server step on client values; its failure fails the run with a report."""
        try:
            return step()
        except SERVER_STEP_ERRORS as exc:
            raise ProtocolRunError(
                f"{what} failed: {type(exc).__name__}: {exc}", self.report
            ) from exc

    def local_updates(self, stage: str, taus: Sequence[float], part: str) -> dict[float, list]:
        """Each client's local heads at ``taus``, tied to its upload and screened.

        A client is asked only for the heads it has not sent on this reference
        (the same rows at the same fraction of the same map give the same
        head), so a choice made again costs no new training unless the
        reference or the clients' fractions changed.  A client rejected or
        missing here leaves the reference it helped build: the reference is
        built again without it and the local heads asked for again on it.
        """
        cache = self.updates.setdefault(part, {})
        wanted = {
            c: [t for t in self.client_taus(c, taus) if t not in cache.get(c, {})]
            for c in self.order
        }
        requests = {
            c: UpdatesRequest(self.reference_for(c), tuple(ts), part)
            for c, ts in wanted.items()
            if ts
        }
        if requests:
            exchange = self.exchange(stage, requests)
            received = {}
            for c, updates in exchange.replies.items():
                client = self.clients[c]
                expected = client.upload.n_fit if part == "fit" else client.upload.n_rows
                why = intake.local_updates_problem(updates, len(wanted[c]), expected)
                if why:
                    self.report.reject(stage, c, why)
                    continue
                factor = client.weight / client.summary.n
                received[c] = [u.scaled(factor) for u in updates]
            defence = self.protocol.defence
            if defence is not None:
                order = list(received)
                norms = [max(u.norm() for u in received[c]) for c in order]
                for k, why in defence.implausible_updates(norms).items():
                    self.report.reject(stage, order[k], f"implausible: {why}")
                    del received[order[k]]
            self.keep(stage, [c for c in self.order if c in received or c not in requests])
            for c, updates in received.items():
                cache.setdefault(c, {}).update(zip(wanted[c], updates, strict=True))
            if self.refresh_reference(stage):  # (a new reference empties the cache)
                return self.local_updates(stage, taus, part)
        return {tau: [cache[c][self.client_taus(c, [tau])[0]] for c in self.order] for tau in taus}

    # -- the stages --------------------------------------------------------------------

    @property
    def order(self) -> list:
        return sorted(self.clients, key=_order_key)

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
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
        missing = sorted(result.missing, key=_order_key)
        report.missing[stage] = sorted({*report.missing.get(stage, []), *missing}, key=_order_key)
        for c in missing:
            logger.warning(
                "%s missing at the %s stage: %s", report.name(c), stage, result.missing[c]
            )
        return result

    def keep(self, stage: str, accepted: Any) -> None:
        """Drop the clients not in ``accepted``; fail when fewer than ``min_clients`` remain."""
        accepted = set(accepted)
        self.clients = {c: client for c, client in self.clients.items() if c in accepted}
        if len(self.clients) < self.protocol.min_clients:
            report = self.report
            problems = [f"{report.name(n)} missing" for n in report.missing.get(stage, [])] + [
                f"{report.name(n)} rejected: {why}"
                for n, why in report.rejected.get(stage, {}).items()
            ]
            raise ProtocolRunError(
                f"only {len(self.clients)} client(s) completed the {stage} stage, fewer than "
                f"min_clients = {self.protocol.min_clients} "
                f"({'; '.join(problems) or 'no other node'})",
                report,
            )

    def reference_for(self, c: Hashable) -> GaussianSummary | None:
        """The reference the first time a client is sent a message after it was built."""
        if c in self.has_reference:
            return None
        self.has_reference.add(c)
        return self.reference

    def uploads(self) -> None:
        """Stage "upload": summaries (and statistics), tied together and to the run."""
        protocol, report = self.protocol, self.report
        parties = sorted(report.nodes, key=_order_key)
        seeds = _split_seeds(parties, protocol.random_state) if protocol.split else {}
        counting = protocol.client_tau == "label-shift" or protocol.screening
        requests = {
            c: UploadRequest(
                k,
                seeds.get(c),
                class_counts=counting,
                summary_covariance=protocol.summary_covariance,
                covariance_floor=protocol.covariance_floor,
                mean_tau=protocol.mean_tau,
            )
            for k, c in enumerate(parties)
        }
        exchange = self.exchange("upload", requests)
        head = protocol.head
        derives = head.protocol.derives_summary
        replies = {}
        for c, upload in exchange.replies.items():
            report.clients[c] = upload.client_label  # shown, never trusted
            if upload.summary_bytes is not None:
                report.summary_payload_bytes[c] = upload.summary_bytes
            why = intake.summary_form_problem(upload, derives)
            if why is None and derives:
                try:
                    summary = head.protocol.derived_summary(
                        upload.statistics,
                        upload.shrinkage,
                        covariance=protocol.summary_covariance,
                        covariance_floor=protocol.covariance_floor,
                        client=upload.label,
                    )
                except ValueError as exc:
                    why = f"its statistics make no summary: {exc}"
                else:
                    upload = replace(upload, summary=summary)
                    report.clients[c] = summary.client  # the label as a summary holds it
            if why:
                report.reject("upload", c, why)
                continue
            replies[c] = upload
        m = intake.run_dimension(replies)
        if m is None:
            self.keep("upload", [])
        report.n_features = m
        # values per summary on the wire: the shrinkage alone where the server derives it
        report.summary_values = 1 if derives else m * (m + 1) // 2 + m + 1
        # a summary the server derived agrees with its statistics by construction
        consistency = protocol.defence is not None and not derives
        for c in parties:
            if c not in replies:
                continue
            upload = replies[c]
            why = intake.upload_problem(
                upload,
                m,
                split=protocol.split,
                uploads_statistics=head.protocol.uploads_statistics,
                consistency=consistency,
                summary_covariance=protocol.summary_covariance,
                n_classes=self.classes.shape[0] if counting else None,
                validation_fraction=protocol.validation_fraction,
                run_classes=self.classes.shape[0],
            )
            if why:
                report.reject("upload", c, why)
                continue
            if protocol.defence is not None and upload.validation is not None:
                # the summary describes the fitting part; the refit also takes this one
                why = protocol.defence.inconsistent_parts(upload.statistics, upload.validation)
                if why:
                    report.reject("upload", c, f"implausible: {why}")
                    continue
            self.clients[c] = _Client(
                upload, statistics=upload.statistics, validation=upload.validation
            )
        self.keep("upload", self.clients)

    def screen_summaries(self) -> None:
        """Reject clients out of line with the others; cap the weight of the rest."""
        defence = self.protocol.defence
        order = self.order
        if defence is None:
            weights = [float(self.clients[c].summary.n) for c in order]
        else:
            reasons, capped = defence.screen([self.clients[c].summary for c in order])
            for k, why in sorted(reasons.items()):
                self.report.reject("upload", order[k], f"implausible: {why}")
            self.keep("upload", [c for k, c in enumerate(order) if k not in reasons])
            order, weights = self.order, [float(w) for w in capped]
        for c, weight in zip(order, weights, strict=True):
            client = self.clients[c]
            client.weight = weight
            n = client.summary.n
            if weight < n:
                factor = weight / n
                self.report.capped[c] = round(factor, 6)
                logger.warning("%s: weight capped to %.3g of its rows", self.report.name(c), factor)
                if client.statistics is not None:
                    client.statistics = client.statistics.scaled(factor)
                if client.validation is not None:
                    client.validation = client.validation.scaled(factor)

    def scale_taus(self) -> None:
        """Each accepted client's factor of ``tau``, from the accepted clients' class counts."""
        if self.protocol.client_tau == "uniform":
            return
        order = self.order
        capped = any(c in self.report.capped for c in order)
        weights = {  # the capped weights, in the class counts' rows (fitting and held out)
            c: self.clients[c].weight / self.clients[c].summary.n * self.clients[c].upload.n_rows
            for c in order
        }
        distances = label_shift_distances(
            {c: self.clients[c].upload.class_counts for c in order},
            weights if capped else None,  # else pooled
        )
        for c in order:
            self.clients[c].tau_scale = distances[c]
        self.report.tau_scales = {c: round(distances[c], 6) for c in order}

    def build_reference(self, stage: str = "upload") -> None:
        """The reference and every client's map; clients whose summaries break it are found.

        They are rejected at ``stage``: the upload, or the stage after which
        the reference is built again (:meth:`refresh_reference`).
        """
        order = self.order
        summaries = [self.clients[c].summary for c in order]
        weights = [self.clients[c].weight for c in order]
        try:
            built = self.protocol.reference.build(order, summaries, weights)
        except SERVER_STEP_ERRORS as exc:
            culprits = self._culprits(order, summaries, weights, exc)
            for c in culprits:
                self.report.reject(stage, c, f"its summary breaks the reference: {exc}")
            self.keep(stage, [c for c in order if c not in culprits])
            return self.build_reference(stage)
        self.reference, self.full_maps = built.reference, built.maps
        self.report.barycenter_iterations = built.n_iter
        self.report.reference_clients = list(order)
        return None

    def refresh_reference(self, stage: str) -> bool:
        """Build the reference again if a client it was built from has since left the run.

        A client rejected or missing after the reference was built (at the
        updates stage, or excluded by the screening) must not shape the
        reference of the final head: the reference, the maps and the clients'
        fractions of ``tau`` are made again from the clients still in, sent
        to every client with its next request, and the local heads trained
        on the old reference are dropped.  Returns whether it was rebuilt.
        """
        built_from = self.report.reference_clients
        if self.order == built_from:
            return False
        gone = [c for c in built_from if c not in self.clients]
        logger.info(
            "skslot: the reference is built again without %s",
            ", ".join(self.report.name(c) for c in gone),
        )
        previous = self.reference
        self.build_reference(stage)
        self.scale_taus()
        if self.reference is not previous:  # a fixed reference stays the same
            self.has_reference.clear()
            self.updates.clear()
        return True

    def _culprits(
        self, order: list, summaries: list, weights: list, error: Exception
    ) -> list[Hashable]:
        """The clients whose summaries break the reference, in O(K) barycenter iterations.

        First each summary alone (a one-client reference: one iteration each):
        those that break the step by themselves.  If none does, each
        leave-one-out set, probed with ``PROBE_ITERATIONS`` iterations: the
        one client whose removal lets the step through.  Otherwise the run
        fails.  The caller rebuilds the reference in full without them.
        """

        def breaks(kept: list[int], max_iter: int) -> bool:
            try:
                self.protocol.reference.build(
                    [order[i] for i in kept],
                    [summaries[i] for i in kept],
                    [weights[i] for i in kept],
                    max_iter=max_iter,
                )
            except SERVER_STEP_ERRORS:
                return True
            return False

        K = len(order)
        culprits = [c for k, c in enumerate(order) if breaks([k], 1)]
        if not culprits and K > self.protocol.min_clients:
            culprits = [
                c
                for k, c in enumerate(order)
                if not breaks([i for i in range(K) if i != k], PROBE_ITERATIONS)
            ]
            culprits = culprits if len(culprits) == 1 else []
        if not culprits or K - len(culprits) < self.protocol.min_clients:
            raise ProtocolRunError(
                f"the reference could not be built from the clients' summaries: {error}",
                self.report,
            ) from error
        return culprits

    def select(self, heads: list[OneShotHead]) -> Selection:
        """Stage "validation": candidates out, counts back (tied to the uploads), the choice."""
        candidates = self.protocol.candidates
        scores = tuple(h.linear_scores() for h in heads)
        taus = tuple(c.tau for c in candidates)
        requests = {
            c: ValidationRequest(self.reference_for(c), scores, self.client_taus(c, taus))
            for c in self.order
            if self.clients[c].upload.n_validation > 0
        }
        left_out = {
            c: "no validation rows (too few rows per class to split)"
            for c in self.order
            if c not in requests
        }
        exchange = self.exchange("validation", requests)
        counts: dict[Hashable, ValidationCounts] = {}
        for c in requests:
            if c in exchange.rejected:
                left_out[c] = f"rejected: {exchange.rejected[c]}"
                continue
            if c not in exchange.replies:
                left_out[c] = "did not answer the validation stage"
                continue
            reply = exchange.replies[c]
            upload = self.clients[c].upload
            totals = (
                None
                if upload.class_counts is None
                else validation_sizes(upload.class_counts, self.protocol.validation_fraction)
            )
            why = intake.counts_problem(
                reply, len(candidates), self.classes.shape[0], upload.n_validation, totals
            )
            if why:
                self.report.reject("validation", c, why)
                left_out[c] = f"rejected: {why}"
                continue
            counts[c] = reply
        selection = self.server_step(
            "the choice of tau", lambda: select_candidate(candidates, counts, self.protocol.rule)
        )
        table = selection.table()
        self.report.selection = {
            "candidates": table["params"],
            "clients": selection.clients,
            "scores": selection.scores.tolist(),
            "mean_validation_score": table["mean_validation_score"].tolist(),
            "std_error_validation_score": table["std_error_validation_score"].tolist(),
            "chosen": selection.candidate.describe(),
            "left_out": left_out,
        }
        logger.info("skslot: validation chose %s", selection.candidate.describe())
        return selection

    def screen_contributions(self, candidate: Candidate, heads: list[OneShotHead]) -> list:
        """Stage "screening": each client's contribution judged by the others' validation.

        ``heads`` are the candidate heads on every client's fitting rows; the
        one at ``candidate`` is compared, on each client's held-out rows, with
        the head without each other client (:mod:`skslot.screening`).  The
        client with the strongest case against it is rejected with the
        evidence (unless fewer than ``min_clients`` would remain), and so are
        voters whose counts fail their checks; returns every client it
        removed (the run then builds the reference again without them, chooses
        and screens again).  The weight caps stay those of the upload stage.
        """
        protocol, report = self.protocol, self.report
        order = self.order
        earlier = (report.screening or {}).get("excluded", [])  # by an earlier round
        voters = [c for c in order if self.clients[c].upload.n_validation > 0]
        if len(order) <= MIN_VOTERS or len(voters) < MIN_VOTERS:
            report.screening = {
                "skipped": f"{len(order)} clients, {len(voters)} with validation rows: the "
                f"screening needs {MIN_VOTERS + 1} clients and {MIN_VOTERS} with validation rows",
                "excluded": earlier,
            }
            return []
        counts = [self.clients[c].upload.class_counts for c in order]
        masks = comparable_classes(counts)
        fraction = protocol.validation_fraction  # each client's validation rows per class:
        sizes = {c: validation_sizes(n, fraction) for c, n in zip(order, counts, strict=True)}
        head = protocol.head
        without: dict[int, LinearScores] = {}
        unfit: dict[Hashable, str] = {}
        for k, c in enumerate(order):  # only where some voter has something to compare
            if not masks[k].any() or not any(v != c for v in voters):
                continue
            try:
                without[k] = head.protocol.leave_one_out(head, candidate, self, k).linear_scores()
            except SERVER_STEP_ERRORS as exc:  # e.g. too few classes left: not screenable
                unfit[c] = f"the head without it could not be fitted: {type(exc).__name__}: {exc}"
        full = heads[protocol.candidates.index(candidate)].linear_scores()
        targets = {c: [k for k in without if order[k] != c] for c in voters}
        requests = {
            c: ScreeningRequest(
                self.reference_for(c),
                full,
                tuple(without[k] for k in targets[c]),
                masks[targets[c]],
                self.client_taus(c, [candidate.tau])[0],
            )
            for c in voters
            if targets[c]
        }
        exchange = self.exchange("screening", requests) if requests else Exchange()
        votes: dict[Hashable, dict[Hashable, tuple[int, int, int]]] = {c: {} for c in order}
        refused = [c for c in exchange.rejected if c in requests]
        for c in requests:
            if c not in exchange.replies:
                continue  # missing (the transport said why), or refused on the wire
            reply: PairedCounts = exchange.replies[c]
            expected = [int(sizes[c][masks[k]].sum()) for k in targets[c]]
            why = intake.paired_counts_problem(reply, np.array(expected, dtype=np.int64))
            if why:
                report.reject("screening", c, why)
                refused.append(c)
                continue
            for i, k in enumerate(targets[c]):
                votes[order[k]][c] = (int(reply.better[i]), int(reply.worse[i]), int(reply.rows[i]))
        flagged, evidence = protocol.defence.strongest_case(votes)
        room = len(order) - len(refused) - protocol.min_clients > 0
        excluded = [flagged] if flagged is not None and room else []
        kept = [flagged] if flagged is not None and not room else []
        report.screening = {
            "candidate": candidate.describe(),
            "clients": {c: e.describe() for c, e in evidence.items()},
            "excluded": [*earlier, *excluded],
            "unscreenable": {
                **{
                    c: "the other clients hold fewer than two classes"
                    if not masks[k].any()
                    else "no other client's counts on it were received"
                    for k, c in enumerate(order)
                    if c not in unfit and evidence[c].voters == 0
                },
                **unfit,
            },
            "kept": {c: "excluding it would leave fewer than min_clients" for c in kept},
        }
        for c in excluded:
            report.reject("screening", c, evidence[c].reason())
        self.keep("screening", [c for c in order if c not in excluded and c not in refused])
        return excluded + refused

    def evaluation(self, final: OneShotHead, tau: float) -> None:
        """Stage "evaluation": the global head out, local test counts back."""
        report = self.report
        scores = final.linear_scores()
        implausible = {}
        if self.protocol.defence is not None:  # a test size out of line: not evaluated
            sizes = [self.clients[c].upload.n_test for c in self.order]
            found = self.protocol.defence.implausible_test_sizes(sizes)
            implausible = {self.order[k]: why for k, why in found.items()}
            for c, why in implausible.items():
                report.reject("evaluation", c, f"implausible: {why}")
        requests = {
            c: EvaluationRequest(self.reference_for(c), scores, self.client_taus(c, [tau])[0])
            for c in self.order
            if c not in implausible
        }
        exchange = self.exchange("evaluation", requests)
        for c in self.order:
            if c not in exchange.replies:
                continue
            result: Evaluation = exchange.replies[c]
            n_test = self.clients[c].upload.n_test
            why = intake.evaluation_problem(result, n_test)
            if why:
                report.reject("evaluation", c, why)
                continue
            report.n_test[c] = n_test
            if n_test:
                report.accuracy[c] = result.n_correct / n_test
        self.keep("evaluation", [c for c in self.order if c in report.n_test])
        if report.accuracy:
            report.macro_accuracy = float(np.mean(list(report.accuracy.values())))


def held_out_rows(
    y: Any,
    client: Any,
    *,
    validation_fraction: float = 0.2,
    random_state: int | np.random.RandomState | None = None,
) -> dict[Hashable, tuple[np.ndarray, np.ndarray]]:
    """The rows each client holds out in a run with a validation round, as positions in ``y``.

    The split the clients of a :class:`~skslot.FederatedTauSearch` (and of a
    :class:`OneShotProtocol` over :class:`InProcessTransport`, whose clients
    are addressed by label) draw with ``tau = "auto"`` or ``screen = "on"``:
    the ``k``-th client in the protocol's order (by label) splits its rows
    with the run's ``k``-th seed (:func:`skslot.selection.validation_split`).
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
    seeds = _split_seeds(labels, random_state)
    rows = {}
    for k, c in enumerate(labels):
        own = np.flatnonzero(codes == k)
        fit, val = validation_split(y[own], validation_fraction, seeds[c])
        rows[c] = (own[fit], own[val])
    return rows  # in the protocol's order: the labels are of one type, sorted


def _split_seeds(parties: Sequence[Hashable], random_state: Any) -> dict[Hashable, int]:
    """Each client's seed of its validation split: the run's ``k``-th for the ``k``-th client."""
    order = sorted(parties, key=_order_key)
    return dict(zip(order, spawn_seeds(random_state, len(order)), strict=True))


def _order_key(address: Hashable) -> tuple:
    """Clients in a stable order: by address, integers before strings."""
    return (isinstance(address, str), address)
