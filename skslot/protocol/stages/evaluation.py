"""Stage "evaluation": the global head out, each client's test counts back.

Each client aligns its test rows with its map at the run's ``tau`` and counts
the global head's correct predictions (:class:`Evaluation`); where the head
serves each client's own label mix, it adds its accuracy on test rows weighted
to its training mix (:func:`~skslot.label_mix.own_mix_accuracy`, as in
process).  The server ties the counts to the test size the client announced at
upload (:func:`check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from ...gaussian import GaussianSummary
from ...heads import LinearScores
from ...label_mix import own_mix_accuracy
from ...privacy.client import evaluation_digest
from ...wire.payload import Payload, ReceivedPayload
from ._stage import ClientWire, ServerWire, Stage

if TYPE_CHECKING:
    from ...heads import OneShotHead
    from ..party import Party
    from ..state import RunState

__all__ = [
    "STAGE",
    "Evaluation",
    "EvaluationRequest",
    "EvaluationStage",
    "check",
    "evaluate",
]

#: The groups the head and the counts travel in.
HEAD, EVALUATION = "head", "evaluation"


@dataclass(frozen=True, eq=False)
class EvaluationRequest:
    """The global head and the client's fraction of its map.

    Parameters
    ----------
    reference : GaussianSummary or None
        The reference, with a client's first request after it was built.
    head : LinearScores
    tau : float
    """

    reference: GaussianSummary | None
    head: LinearScores
    tau: float


@dataclass(frozen=True)
class Evaluation:
    """A client's local test result: correct predictions among its test rows.

    Parameters
    ----------
    n_correct, n_test : int
    own_mix : float or None, default=None
        Its accuracy on test rows weighted to its training mix, where the head
        serves each client's own label mix and the client releases it (a
        private client's plan declares only the count).
    """

    n_correct: int
    n_test: int
    own_mix: float | None = None


def check(evaluation: Evaluation, n_test: int, asks_own_mix: bool) -> str | None:
    """Why test counts do not match the test size the client announced at upload.

    Parameters
    ----------
    evaluation : Evaluation
    n_test : int
        The test rows its upload announced.
    asks_own_mix : bool
        Whether the run asks for an own-mix accuracy: the head serves each
        client's own label mix, and the run is not private (a private plan
        declares the count only).

    Returns
    -------
    str or None
    """
    if evaluation.n_test != n_test:
        return f"evaluated {evaluation.n_test} test rows, but announced {n_test}"
    if not 0 <= evaluation.n_correct <= n_test:
        return f"evaluation counts are inconsistent ({evaluation.n_correct} of {n_test})"
    own = evaluation.own_mix
    if own is None:
        return None
    if not asks_own_mix:
        return (
            "an own-mix accuracy the run does not ask for (a private plan, or the federation's mix)"
        )
    if not (n_test and 0.0 <= own <= 1.0):
        return f"own-mix accuracy {own!r} is not in [0, 1] for {n_test} test rows"
    if own > 0.0 and evaluation.n_correct == 0:
        return f"own-mix accuracy {own!r} with no test row predicted right"
    return None


def evaluate(run: RunState, final: OneShotHead, tau: float) -> None:
    """The server's step: the global head out, local test counts back into the report.

    Clients announcing a test size out of line with the others' are not
    evaluated (the defence).

    Parameters
    ----------
    run : RunState
    final : OneShotHead
        The global head.
    tau : float
        The run's ``tau``.
    """
    report = run.report
    scores = final.linear_scores()
    order = run.roster.order
    sizes = [run.roster.clients[c].upload.n_test for c in order]
    implausible = {order[k]: why for k, why in run.defence.implausible_test_sizes(sizes).items()}
    for c, reason in implausible.items():
        run.roster.reject("evaluation", c, f"implausible: {reason}")
    requests = {
        c: EvaluationRequest(run.reference_for(c), scores, run.client_taus(c, [tau])[0])
        for c in order
        if c not in implausible
    }
    exchange = run.exchange("evaluation", requests)
    asks_own_mix = scores.federation is not None and not run.account.private
    for c in [c for c in run.roster.order if c in exchange.replies]:
        result: Evaluation = exchange.replies[c]
        n_test = run.roster.clients[c].upload.n_test
        if n_test:  # a client without test rows releases nothing
            run.account.receive(c, "evaluation")
        why = check(result, n_test, asks_own_mix)
        if why:
            run.roster.reject("evaluation", c, why)
            continue
        report.n_test[c] = n_test
        if n_test:
            report.test_accuracy[c] = result.n_correct / n_test
            if result.own_mix is not None:
                report.own_mix_accuracy[c] = result.own_mix
    run.roster.keep("evaluation", [c for c in run.roster.order if c in report.n_test])
    report.score_accuracy()


class EvaluationStage(Stage[EvaluationRequest, Evaluation]):
    """Stage "evaluation": the global head and the client's ``tau`` out, its test counts back.

    The client aligns its test rows with its map at ``tau`` and counts the
    global head's correct predictions, under its own label mix where the head
    carries the federation's prior (``label_mix="client"``; under a privacy
    budget, the class counts it released: :attr:`ClientParty.prior_counts
    <skslot.protocol.ClientParty.prior_counts>`), and then adds its accuracy
    weighted to its own training mix; the counts travel as metrics.
    A private client releases one count per run, for one request only: the
    count's input (the head, ``tau``) is the server's choice, so the same noise
    on another input would tell the difference of the two exact counts; the
    same request again gets the same count, another is refused
    (:meth:`private_problem`).  A client without test rows releases nothing.
    """

    name = "evaluation"
    message_type = "evaluate.head"
    request = EvaluationRequest
    reply = Evaluation
    check = staticmethod(check)

    def private_problem(self, party: Party, request: EvaluationRequest) -> str | None:
        state = party.state
        if not state.releases:
            return "no upload of this run announced its plan"
        if party.n_test == 0:
            return None
        if "evaluation" not in state.releases:
            return "a test count the plan does not declare"
        if state.evaluation is not None and state.evaluation[0] != evaluation_digest(
            request.head, request.tau
        ):
            return "a second test count, for another head or tau"
        return None

    def answer(self, party: Party, request: EvaluationRequest) -> Evaluation:
        full_map = party.full_map(request.reference)
        X_test, y_test, n_test = party.X_test, party.y_test, party.n_test
        if X_test is None or y_test is None or n_test == 0:
            return Evaluation(0, 0)

        @cache
        def rows() -> np.ndarray:  # predicted once, for the count and the own-mix figure
            aligned = full_map.geodesic(request.tau).apply(X_test)
            return request.head.predict(aligned, class_counts=party.prior_counts) == y_test

        def own_mix() -> float | None:  # on its exact training mix: an exact client's figure
            mix = party.class_counts
            if not mix.sum():
                return None
            test_client = np.zeros(n_test)
            return own_mix_accuracy(rows(), y_test, test_client, {0: mix}, request.head.classes)[0]

        release = party.release()
        count = release.evaluation_count(request.head, request.tau, lambda: int(rows().sum()))
        own = None if request.head.federation is None else release.own_mix_accuracy(own_mix)
        return Evaluation(count, n_test, own)

    def encode_request(self, request: EvaluationRequest, wire: ServerWire) -> Payload:
        values = wire.with_reference({"tau": float(request.tau)}, request.reference)
        return Payload(values, {HEAD: request.head.to_arrays()})

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> EvaluationRequest:
        tau = float(payload.value("tau", (float, int)))
        head = wire.head(payload.arrays(HEAD, max_bytes=wire.head_bytes))
        return EvaluationRequest(wire.reference(payload), head, tau)

    def encode_reply(self, reply: Evaluation, request: EvaluationRequest) -> Payload:
        counts: dict[str, int | float] = {"n-correct": reply.n_correct, "n-test": reply.n_test}
        if reply.own_mix is not None:
            counts["own-mix-accuracy"] = float(reply.own_mix)
        return Payload(metrics={EVALUATION: counts})

    def decode_reply(
        self, payload: ReceivedPayload, request: EvaluationRequest, wire: ServerWire
    ) -> Evaluation:
        n_correct, n_test = (payload.metric(EVALUATION, k, int) for k in ("n-correct", "n-test"))
        if "own-mix-accuracy" not in payload.metrics.get(EVALUATION, {}):
            return Evaluation(n_correct, n_test)
        own = payload.metric(EVALUATION, "own-mix-accuracy", (float, int))
        return Evaluation(n_correct, n_test, float(own))


STAGE = EvaluationStage()
