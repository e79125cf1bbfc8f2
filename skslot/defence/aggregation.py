"""The defence around the server's aggregation, as a strategy wrapper wraps ``aggregate``.

The protocol's core (:class:`~skslot.protocol.OneShotProtocol`) uploads, builds
the reference, fits the heads and evaluates the final one; it hands each
aggregation step to :class:`DefendedAggregation`, which wraps it:

* before the reference, the bounds (:meth:`~DefendedAggregation.weigh`): the
  clients out of line with the others rejected, the rest's weights capped;
* the reference built without the clients whose summaries break it
  (:func:`~skslot.defence.culprits.culprits`), and again without each client
  that left the run since it was built (the local heads trained on the old
  one dropped, or carried onto the new one);
* the candidates screened (:mod:`skslot.defence.screening`, over the
  ``screening`` stage) and made again without each client the screening
  excludes, until it excludes no one; the final head is then the screened one.

A run without a defence (``defence=None``) is wrapped with
:class:`~skslot.defence.NoDefence`'s bounds: no client is out of line, no weight
capped, nothing screened; a client that breaks the reference or leaves the run
still leaves the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..protocol.report import ProtocolRunError, logger
from ..protocol.stages.screening import PairedCounts, ScreeningRequest, check
from ..protocol.transport import Exchange
from ..selection import validation_sizes
from .culprits import SERVER_STEP_ERRORS, culprits
from .screening import MIN_REMAINING, MIN_VOTERS, comparable_classes

if TYPE_CHECKING:
    from ..heads import LinearScores, OneShotHead
    from ..maps import GaussianMap
    from ..protocol.state import RunState
    from ..selection import Candidate, Selection

__all__ = ["DefendedAggregation"]

H = TypeVar("H")


class DefendedAggregation:
    """The defence around one run's aggregation (see the module docstring).

    Parameters
    ----------
    run : RunState
        The run; its ``defence`` holds the bounds and the screening's thresholds.

    Attributes
    ----------
    screened : bool
        Whether the last screening round could judge the clients' contributions.
    ever_screened : bool
        Whether any screening round could.
    heads_carried : list or None
        The clients whose screened local heads were carried onto the reference
        built without a client the screening excluded (too few left to screen
        heads trained on it), or ``None``.
    """

    def __init__(self, run: RunState) -> None:
        self.run = run
        settings, skipped = run.settings, None
        if settings.privacy is not None and settings.screen == "auto" and run.defence.screens:
            skipped = (
                "a private run: the screening's validation counts are not released under the "
                "clients' budget"
            )
        elif settings.screening and not run.screens:
            skipped = (
                f"{len(run.report.nodes)} clients: the screening needs {MIN_VOTERS + 1} (a case "
                f"rests on {MIN_REMAINING} other clients once the strongest accuser is left out)"
            )
        if skipped:
            run.report.screening = {"skipped": skipped, "excluded": []}
        self.screened = False
        self.ever_screened = False
        self.heads_carried: list | None = None

    def weigh(self) -> None:
        """Reject the clients out of line with the others, cap the rest's weights (the bounds)."""
        run = self.run
        order = run.roster.order
        reasons, capped = run.defence.check_summaries(
            [run.roster.clients[c].summary for c in order]
        )
        for k, why in sorted(reasons.items()):
            run.roster.reject("upload", order[k], f"implausible: {why}")
        run.roster.keep("upload", [c for k, c in enumerate(order) if k not in reasons])
        for c, weight in zip(run.roster.order, capped, strict=True):
            client = run.roster.clients[c]
            client.weight = float(weight)
            if weight < client.summary.n:
                factor = weight / client.summary.n
                run.report.capped[c] = round(factor, 6)
                logger.warning("%s: weight capped to %.3g of its rows", run.report.name(c), factor)
                if client.statistics is not None:
                    client.statistics = client.statistics.scaled(factor)
                if client.validation is not None:
                    client.validation = client.validation.scaled(factor)

    def build_reference(self, stage: str = "upload") -> bool:
        """The run's reference, built without the clients whose summaries break it.

        They are found (:func:`~skslot.defence.culprits.culprits`) and rejected
        at ``stage``; where none can be named, the run fails.

        Parameters
        ----------
        stage : str, default="upload"
            The stage at which the clients that break the reference are rejected.

        Returns
        -------
        bool
            Whether the reference changed (one fixed before the run stays the same).

        Raises
        ------
        ProtocolRunError
            If the step fails and no client can be named for it.
        """
        run = self.run
        while True:
            order = run.roster.order
            try:
                return run.adopt(run.alignment_of(order))
            except SERVER_STEP_ERRORS as exc:
                found = culprits(order, partial(self._build, order), run.settings.min_clients)
                if not found:
                    raise ProtocolRunError(
                        f"the reference could not be built from the clients' summaries: {exc}",
                        run.report,
                    ) from exc
                for c in found:
                    run.roster.reject(stage, c, f"its summary breaks the reference: {exc}")
                run.roster.keep(stage, [c for c in order if c not in found])

    def _build(self, order: list, kept: list[int], max_iter: int) -> object:
        """The reference step on the clients at positions ``kept`` of ``order``, stopped after
        ``max_iter`` iterations (:func:`~skslot.defence.culprits.culprits` probes it)."""
        chosen = [order[i] for i in kept]
        clients = [self.run.roster.clients[c] for c in chosen]
        summaries, weights = [c.summary for c in clients], [c.weight for c in clients]
        return self.run.settings.reference.build(chosen, summaries, weights, max_iter=max_iter)

    def local_heads(self, collect: Callable[[], None], stage: str, taus: Sequence[float]) -> None:
        """The core's stage that receives local heads, until the reference stands.

        A client rejected or missing there leaves the reference it helped
        build: the reference is built again without it and the local heads
        asked for again on it (:meth:`refresh`).

        Parameters
        ----------
        collect : callable
            The stage ("updates" or "refit"), called without arguments.
        stage : str
            Its name.
        taus : sequence of float
            The run's fractions the heads are trained at.
        """
        collect()
        while self.refresh(stage, taus):
            collect()

    def candidates(
        self, fit: Callable[[], tuple[Selection | None, list, Candidate]], taus: Sequence[float]
    ) -> tuple[Selection | None, list, Candidate]:
        """The core's candidates and choice, screened, and made again until they stand.

        After each round the chosen candidate is screened (where the run
        screens); a client the screening excluded, or missing since the
        reference was built, leaves the reference, and the candidates, the
        choice and the screening are made again without it.

        Parameters
        ----------
        fit : callable
            The core's round, called without arguments: the local heads, the
            candidate heads and the choice.
        taus : sequence of float
            The run's fractions.

        Returns
        -------
        selection : Selection or None
        heads : list of OneShotHead
        chosen : Candidate
        """
        while True:
            self.screened = False
            selection, heads, chosen = fit()
            if self.run.screens:
                self.screen(chosen, heads)
                self.ever_screened |= self.screened
            if not self.refresh(self.run.report.stages[-1], taus):
                return selection, heads, chosen

    def final_head(self, heads: Sequence[H], chosen: Candidate, refit: Callable[[], H]) -> H:
        """The final head: the screened (or chosen) candidate, or ``refit`` on every row.

        A screened run never refits: what enters its final head is what the
        screening judged (the clients' fitting rows).

        Parameters
        ----------
        heads : sequence of OneShotHead
            The candidate heads, in the order of the protocol's candidates.
        chosen : Candidate
        refit : callable
            The core's final head on every accepted client's rows, called
            without arguments where the run refits.

        Returns
        -------
        OneShotHead
        """
        run = self.run
        if run.settings.refit and not self.ever_screened:
            return refit()
        run.report.final_head = self._final_fitting()
        return heads[run.settings.candidates.index(chosen)]

    def refresh(self, stage: str, taus: Sequence[float]) -> bool:
        """Whether the run goes round again, its reference built anew without the clients gone.

        A client rejected or missing after the reference was built (at the
        updates stage, or excluded by the screening) must not shape the
        reference of the final head, so it is built again without it, and the
        local heads trained on the old one are dropped.  Not in a private run
        once local heads were released: each client releases its one head on
        one map, so the reference stays as the released heads were trained on
        it.  After a screening leaves too few clients to screen again, for a
        head that trains locally, heads trained on a new reference would
        enter the final head unjudged: the screened heads of the clients left
        are carried onto the reference built without the excluded client
        instead (:meth:`~skslot.heads.fedavg.LinearHeadUpdate.rebased`: each
        scores the same rows mapped onto the new one the same), and the
        candidates and the choice are made again without it.

        Parameters
        ----------
        stage : str
            The stage just run (where the clients that break the new reference
            are rejected).
        taus : sequence of float
            The run's fractions the local heads were trained at.

        Returns
        -------
        bool
        """
        run = self.run
        if run.roster.order == run.report.reference_clients:
            return False
        heads = run.local_heads_received
        if run.account.private and heads:
            logger.info(
                "skslot: a private run keeps its reference: the local heads are released once"
            )
            return False
        carry = (
            stage == "screening"
            and bool(heads)
            and len(run.roster.order) <= MIN_VOTERS
            and run.settings.head.strategy.trains_locally
        )
        if not carry:
            gone = [c for c in run.report.reference_clients if c not in run.roster.clients]
            logger.info(
                "skslot: the reference is built again without %s",
                ", ".join(run.report.name(c) for c in gone),
            )
            if self.build_reference(stage):
                heads.clear()
            return True
        maps = zip(run.roster.order, run.maps(), strict=True)
        before = {c: (m, run.client_taus(c, taus)) for c, m in maps}
        changed = self.build_reference(stage)
        self.heads_carried = list(run.roster.order)
        if not changed:  # a fixed reference stays the same: nothing to carry
            return True
        after = dict(zip(run.roster.order, run.maps(), strict=True))
        for part, cache in heads.items():
            heads[part] = {
                c: {
                    new: received[old].rebased(before[c][0].geodesic(t), after[c].geodesic(t))
                    for t, old, new in zip(
                        taus, before[c][1], run.client_taus(c, taus), strict=True
                    )
                    if old in received
                }
                for c, received in cache.items()
                if c in after
            }
        logger.info(
            "skslot: the screened local heads of %d clients carried onto the reference built "
            "without the excluded client",
            len(run.roster.order),
        )
        return True

    def screen(self, candidate: Candidate, heads: Sequence[OneShotHead]) -> None:
        """The server's step: each client's contribution judged by the others' validation.

        ``heads`` are the candidate heads on every client's fitting rows; the
        one at ``candidate`` is compared, on each client's held-out rows, with
        the head without each other client (:mod:`skslot.defence.screening`).
        The client with the strongest case against it is rejected with the
        evidence (unless fewer than ``min_clients`` would remain), and so are
        voters whose counts fail their checks
        (:func:`~skslot.protocol.stages.screening.check`).  The weight caps
        stay those of the upload stage.  The run then builds the reference
        again without the clients removed, chooses and screens again
        (:meth:`candidates`).

        Parameters
        ----------
        candidate : Candidate
            The chosen candidate.
        heads : sequence of OneShotHead
            The candidate heads, in the order of the protocol's candidates.
        """
        run = self.run
        settings, report, order = run.settings, run.report, run.roster.order
        earlier = (report.screening or {}).get("excluded", [])  # by an earlier round
        voters = [c for c in order if run.roster.clients[c].upload.n_validation > 0]
        if len(order) <= MIN_VOTERS or len(voters) < MIN_VOTERS:
            report.screening = {  # an earlier round's evidence stays
                **(report.screening or {}),
                "skipped": f"{len(order)} clients, {len(voters)} with validation rows: the "
                f"screening needs {MIN_VOTERS + 1} clients and {MIN_VOTERS} with validation rows",
                "excluded": earlier,
            }
            return
        counts = list(run.roster.class_counts(order).values())
        masks = comparable_classes(counts)
        without, rebuilt, unfit = self._heads_without(candidate, masks)
        full = heads[settings.candidates.index(candidate)].linear_scores()
        targets = {c: [k for k in without if order[k] != c] for c in voters}
        requests = {
            c: ScreeningRequest(
                run.reference_for(c),
                full,
                tuple(without[k] for k in targets[c]),
                masks[targets[c]],
                run.client_taus(c, [candidate.tau])[0],
                # the full head predicts among every class, as the final head does (declared
                # counts, unchecked for O-FedAvg, never narrow what is compared)
                np.ones(run.classes.shape[0], dtype=bool),
                tuple(rebuilt[k].reference_for(c) if k in rebuilt else None for k in targets[c]),
                tuple(
                    float(candidate.tau) * rebuilt[k].tau_scale(c) if k in rebuilt else 0.0
                    for k in targets[c]
                ),
            )
            for c in voters
            if targets[c]
        }
        exchange = run.exchange("screening", requests) if requests else Exchange()
        votes: dict[Hashable, dict[Hashable, tuple[int, int, int]]] = {c: {} for c in order}
        refused = [c for c in exchange.rejected if c in requests]
        for c in requests:
            if c not in exchange.replies:
                continue  # missing (the transport said why), or refused on the wire
            reply: PairedCounts = exchange.replies[c]
            sizes = validation_sizes(counts[order.index(c)], settings.validation_fraction)
            expected = [int(sizes[masks[k]].sum()) for k in targets[c]]
            why = check(reply, np.array(expected, dtype=np.int64))
            if why:
                run.roster.reject("screening", c, why)
                refused.append(c)
                continue
            for i, k in enumerate(targets[c]):
                votes[order[k]][c] = (int(reply.better[i]), int(reply.worse[i]), int(reply.rows[i]))
        flagged, evidence = run.defence.strongest_case(votes)
        found = [] if flagged is None else [flagged]
        # the missing left already
        room = len(run.roster.order) - len(refused) - settings.min_clients > 0
        excluded = found if room else []
        report.screening = {
            "candidate": candidate.describe(),
            "clients": {c: e.describe() for c, e in evidence.items()},
            "excluded": [*earlier, *excluded],
            "unscreenable": {
                **{
                    c: "the other clients hold fewer than two classes"
                    if not masks[k].any()
                    else "no other client's counts on it were received"
                    if evidence[c].voters == 0
                    else f"only {evidence[c].voters} other clients scored rows for it: a case "
                    f"needs {MIN_VOTERS}"
                    for k, c in enumerate(order)
                    if c not in unfit and evidence[c].voters < MIN_VOTERS
                },
                **unfit,
            },
            "kept": {
                c: "excluding it would leave fewer than min_clients" for c in found if not room
            },
        }
        # the round judged the contributions if it could have excluded any of them
        self.screened = any(e.voters >= MIN_VOTERS for e in evidence.values())
        for c in excluded:
            run.roster.reject("screening", c, evidence[c].reason())
        run.roster.keep("screening", [c for c in order if c not in excluded and c not in refused])

    def _heads_without(
        self, candidate: Candidate, masks: np.ndarray
    ) -> tuple[dict[int, LinearScores], dict[int, Any], dict[Hashable, str]]:
        """Per client some voter can judge (by position), the head at ``candidate`` without
        it; the alignment built without it where the reference changes (the others'
        statistics aligned or their local heads carried onto it; its maps dropped once
        the head is fitted); and why a head could not be fitted, by client."""
        run = self.run
        order, head = run.roster.order, run.settings.head
        without: dict[int, LinearScores] = {}
        rebuilt: dict[int, Any] = {}
        unfit: dict[Hashable, str] = {}
        for k, c in enumerate(order):  # only where the others hold classes to compare
            if not masks[k].any():
                continue
            kept = [o for o in order if o != c]
            try:
                alignment = run.alignment_of(kept)
                maps: list[GaussianMap | None] | None = None
                # a reference fixed before the run is the same without it: nothing to send
                if alignment.reference is not run.reference:
                    maps = list(alignment.maps(kept))
                    maps.insert(k, None)
                fitted = head.strategy.leave_one_out(head, candidate, run, k, maps=maps)
                without[k] = fitted.linear_scores()
            except SERVER_STEP_ERRORS as exc:  # e.g. too few classes left: not screenable
                unfit[c] = f"the head without it could not be fitted: {type(exc).__name__}: {exc}"
                continue
            if maps is not None:
                rebuilt[k] = replace(alignment, full_maps={})
        return without, rebuilt, unfit

    def _final_fitting(self) -> str:
        """What a final head fitted on the clients' fitting contributions was fitted on."""
        run = self.run
        if not self.ever_screened:
            return "every accepted client's fitting rows"
        screened = "the screened contributions"
        if self.screened:
            unscreenable = (run.report.screening or {}).get("unscreenable", {})
            names = [run.report.name(c) for c in run.roster.order if c in unscreenable]
            shown = f" (not screenable: {', '.join(names)})" if names else ""
            return f"{screened}: every accepted client's fitting rows{shown}"
        left = f"{len(run.roster.order)} clients left cannot be screened again"
        if not run.settings.head.strategy.trains_locally:
            return (
                f"{screened} (every accepted client's fitting statistics), aligned on the "
                f"reference built without the excluded client(s) ({left})"
            )
        if self.heads_carried is not None:  # the heads the screening judged
            return (
                f"{screened}: every accepted client's local heads on its fitting rows, carried "
                "onto the reference built without the excluded client, as the screening "
                f"compared them ({left} heads trained on it)"
            )
        return (  # a client missing since: new local heads on a new reference
            "every accepted client's local heads on its fitting rows, trained again on the "
            f"reference built without the client(s) gone, not screened ({left})"
        )
