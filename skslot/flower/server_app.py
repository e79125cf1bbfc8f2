"""The server side of the one-shot protocol, as a Flower ``ServerApp``.

:func:`run_one_shot` drives the protocol's stages over a Flower ``Grid``
(:mod:`skslot.flower.messages`), calling the same server functions as the
in-process estimators (:class:`~skslot.BuresBarycenter`, the heads'
``fit_from_statistics``, :mod:`skslot.selection`):

* FedCGS and FedPFT, whose statistics are moments: ``upload`` (summary and the
  statistics of each client's *unaligned* rows, in one message), then
  ``evaluation`` (the head and the reference in one message).  The server
  aligns the statistics itself, so with ``tau = "auto"`` it fits one head per
  candidate without asking again, and one ``validation`` stage sits between
  the two (candidates out, correct-prediction counts back).
* O-FedAvg, which trains on aligned rows: ``upload`` (summary), ``updates``
  (the reference out, local heads back: one per candidate ``tau`` on the
  fitting rows with ``tau = "auto"``), then ``validation`` and a second
  ``updates`` stage (the chosen ``tau``, all rows) with ``tau = "auto"``, and
  ``evaluation``.

Decode, validate, then combine: a node that does not answer within
``reply_timeout``, answers with an error, or sends a payload that fails
validation (wire format, the configured dimension bound and class set,
counts that must agree across its messages) is left out of the rest of the
run and named in the :class:`DeploymentReport`.  Clients are identified by
their Flower node id, never by a label they declare (a declared label is only
shown in the report), and ordered by node id; the run goes on while at least
``min_clients`` remain, and otherwise stops with a :class:`DeploymentError`
carrying the report.  Whatever happens, the run's output directory ends with a
``report.json`` whose ``status`` says ``"completed"`` or ``"failed"``, and
never keeps a stale head or reference from an earlier run.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from logging import ERROR, INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from sklearn.base import clone

from ..barycenter import BuresBarycenter
from ..bench import DEFAULT_HEADS
from ..defence import (
    capped_counts,
    implausible_counts,
    implausible_norms,
    implausible_summaries,
    inconsistent_statistics,
)
from ..gaussian import GaussianMap, GaussianSummary, SummaryFormatError
from ..heads import ClassStatistics, StatisticsFormatError
from ..selection import (
    Selection,
    ValidationCounts,
    candidate_grid,
    candidate_heads,
    refit_head,
    select_candidate,
)
from . import messages
from .config import DeploymentConfig

__all__ = ["DeploymentError", "DeploymentReport", "app", "run_one_shot"]

STAGES = ("upload", "updates", "validation", "refit", "evaluation")
MESSAGE_TYPES = {
    "upload": "query.upload",
    "updates": "train.updates",
    "validation": "query.validation",
    "refit": "train.updates",
    "evaluation": "evaluate.head",
}
OUTPUT_FILES = ("report.json", "global_head.npz", "reference.bin")
#: What a run with private summaries does and does not protect (logged and reported).
PRIVACY_SCOPE = (
    "the (epsilon, delta) guarantee covers each client's summary, released once per run; "
    "the head's messages (class sums and Gram matrix, mixtures, local heads, validation "
    "counts) are NOT private: from them the server recovers a client's exact mean and "
    "covariance, so with a head enabled the summary's guarantee does not protect the data"
)


@dataclass
class DeploymentReport:
    """What happened in a deployment run, per client and per stage.

    Attributes
    ----------
    config : dict
        The run configuration.
    status : {"running", "completed", "failed"}
    error : str or None
        Why a failed run stopped.
    stages : list of str
        The stages run, in order.
    nodes : list of int
        Flower node ids the server addressed.
    clients : dict
        Node id to the label its summary declared (informational only: a
        client *is* its node).
    missing : dict
        Per stage, the nodes that did not answer in time.
    rejected : dict
        Per stage, ``{node: reason}`` for replies that were errors or failed
        validation.
    bytes_sent, bytes_received : dict
        Per node, per stage, bytes of the message contents (as Flower counts
        them: array data, keys and values).
    summary_payload_bytes : dict
        Per node, length of the summary payload; ``summary_values`` is the
        number of values it encodes, ``m (m + 1) / 2 + m + 1``.
    tau : float or None
        The ``tau`` of the final head (the chosen one with ``tau = "auto"``).
    capped : dict
        Per node whose declared count exceeded ``max-weight-ratio`` times the
        median, the factor its weight was multiplied by.
    privacy : str or None
        With private summaries, what the guarantee covers and what it does not.
    selection : dict or None
        With ``tau = "auto"``: the candidates, each client's balanced
        validation accuracy per candidate, their mean and standard error, the
        chosen candidate, and the clients left out of the choice.
    accuracy : dict
        Per node, accuracy on its local test split.
    macro_accuracy : float
        Mean of ``accuracy`` over clients.
    """

    config: dict
    status: str = "running"
    error: str | None = None
    stages: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    clients: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    bytes_sent: dict = field(default_factory=dict)
    bytes_received: dict = field(default_factory=dict)
    n_features: int | None = None
    summary_values: int | None = None
    summary_payload_bytes: dict = field(default_factory=dict)
    classes: list = field(default_factory=list)
    barycenter_iterations: int | None = None
    tau: float | None = None
    selection: dict | None = None
    capped: dict = field(default_factory=dict)
    privacy: str | None = None
    accuracy: dict = field(default_factory=dict)
    n_test: dict = field(default_factory=dict)
    macro_accuracy: float | None = None

    def name(self, node: int) -> str:
        """``node <id> (client <label>)``, or just the node when it declared no label."""
        if node in self.clients:
            return f"node {node} (client {self.clients[node]!r})"
        return f"node {node}"

    def reject(self, stage: str, node: int, reason: Exception | str) -> None:
        self.rejected.setdefault(stage, {})[node] = str(reason)
        log(WARNING, "rejected %s at the %s stage: %s", self.name(node), stage, reason)

    def to_json(self) -> str:
        def keys(d: Any) -> Any:
            if isinstance(d, dict):
                return {str(k): keys(v) for k, v in d.items()}
            if isinstance(d, list):
                return [keys(v) for v in d]
            return d

        return json.dumps(keys(asdict(self)), indent=2, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class DeploymentError(RuntimeError):
    """The run could not complete; ``report`` says who was missing or rejected, and why."""

    def __init__(self, message: str, report: DeploymentReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class _Client:
    """What the server holds about one accepted node."""

    summary: GaussianSummary
    n_fit: int
    n_test: int
    statistics: Any = None
    validation: Any = None
    weight: float = 0.0

    @property
    def n_validation(self) -> int:
        return self.summary.n - self.n_fit


class _Run:
    """One run's exchanges with the nodes, and its report."""

    def __init__(self, grid: Grid, config: DeploymentConfig) -> None:
        self.grid, self.config = grid, config
        self.report = DeploymentReport(config=config.to_run_config())
        self.clients: dict[int, _Client] = {}
        self.has_reference: set[int] = set()

    @property
    def order(self) -> list[int]:
        return sorted(self.clients)

    def exchange(self, stage: str, contents: dict[int, RecordDict]) -> dict[int, Message]:
        """Send one message per node, wait for the replies, record bytes and absentees."""
        report = self.report
        report.stages.append(stage)
        outgoing = []
        for node, content in contents.items():
            report.bytes_sent.setdefault(node, {})[stage] = messages.payload_bytes(content)
            outgoing.append(
                Message(
                    content, dst_node_id=node, message_type=MESSAGE_TYPES[stage], group_id=stage
                )
            )
        replies: dict[int, Message] = {}
        for reply in self.grid.send_and_receive(outgoing, timeout=self.config.reply_timeout):
            node = reply.metadata.src_node_id
            if node not in contents or node in replies:
                continue  # not asked, or a duplicate: ignored
            replies[node] = reply
            if reply.has_error():
                report.reject(stage, node, f"client error: {reply.error.reason}")
            else:
                report.bytes_received.setdefault(node, {})[stage] = messages.payload_bytes(
                    reply.content
                )
        report.missing[stage] = sorted(set(contents) - set(replies))
        for node in report.missing[stage]:
            log(WARNING, "%s did not answer the %s stage in time", report.name(node), stage)
        return {node: reply for node, reply in replies.items() if not reply.has_error()}

    def keep(self, stage: str, accepted: Iterable[int]) -> None:
        """Drop the clients not in ``accepted``; fail when fewer than ``min_clients`` remain."""
        accepted = set(accepted)
        self.clients = {node: c for node, c in self.clients.items() if node in accepted}
        if len(self.clients) < self.config.min_clients:
            report = self.report
            problems = [f"{report.name(n)} missing" for n in report.missing.get(stage, [])] + [
                f"{report.name(n)} rejected: {why}"
                for n, why in report.rejected.get(stage, {}).items()
            ]
            raise DeploymentError(
                f"only {len(self.clients)} client(s) completed the {stage} stage, fewer than "
                f"min_clients = {self.config.min_clients} "
                f"({'; '.join(problems) or 'no other node'})",
                report,
            )

    def reference_for(self, node: int, reference: bytes) -> bytes | None:
        """The reference bytes the first time a node is sent a message after it was built."""
        if node in self.has_reference:
            return None
        self.has_reference.add(node)
        return reference


def _wait_for_nodes(grid: Grid, config: DeploymentConfig) -> list[int]:
    deadline = time.monotonic() + config.connect_timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if (config.num_clients and len(nodes) >= config.num_clients) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


def _upload_cap(head: Any, n_classes: int, m: int) -> int:
    """Most bytes a client's statistics can take (float64, a little npy overhead)."""
    if not head.aligns_statistics:
        return 0
    components = getattr(head, "n_components", 1)
    return 8 * (n_classes * components + 2) * (m + 2) ** 2 + (1 << 20)


def _uploads(run: _Run, head: Any, classes: np.ndarray) -> None:
    """Stage "upload": decode every reply; keep the configured (or majority) dimension."""
    config, report = run.config, run.report
    nodes = report.nodes
    contents = {
        node: messages.upload_request(config.summary_dtype, index)
        for index, node in enumerate(nodes)
    }
    replies = run.exchange("upload", contents)
    expected = config.n_features or None
    decoded: dict[int, tuple] = {}
    for node in nodes:
        if node not in replies:
            continue
        try:
            payload, n_fit, n_test, *records = messages.read_upload_reply(replies[node])
            summary = GaussianSummary.from_bytes(
                payload, expected_dimension=expected, max_dimension=config.max_dimension
            )
            cap = _upload_cap(head, classes.shape[0], summary.dimension)
            stats, val = (
                None if r is None else messages.record_to_arrays(r, max_bytes=cap) for r in records
            )
        except (messages.ProtocolError, SummaryFormatError) as exc:
            report.reject("upload", node, exc)
            continue
        report.clients[node] = summary.client
        report.summary_payload_bytes[node] = len(payload)
        decoded[node] = (summary, n_fit, n_test, stats, val)
    if not decoded:
        run.keep("upload", [])
    dims = Counter(d[0].dimension for d in decoded.values())
    m = expected or max(dims, key=lambda d: (dims[d], -d))
    report.n_features = m
    report.summary_values = m * (m + 1) // 2 + m + 1
    for node, (summary, n_fit, n_test, stats, val) in decoded.items():
        try:
            if summary.dimension != m:
                raise StatisticsFormatError(f"dimension {summary.dimension}, expected {m}")
            client = _Client(summary, n_fit, n_test)
            if not 1 <= n_fit <= summary.n:
                raise StatisticsFormatError(
                    f"fitting part of {n_fit} rows, but the summary counts {summary.n}"
                )
            if not config.auto and n_fit != summary.n:
                raise StatisticsFormatError("a fixed-tau run has no validation part")
            if head.aligns_statistics:
                if stats is None:
                    raise StatisticsFormatError("the upload lacks the head's statistics")
                client.statistics = head.decode_statistics(
                    stats, classes=classes, n_features=m, n_samples=n_fit
                )
                if (val is None) != (client.n_validation == 0):
                    raise StatisticsFormatError(
                        f"validation statistics do not match a validation part of "
                        f"{client.n_validation} rows"
                    )
                if val is not None:
                    client.validation = head.decode_statistics(
                        val, classes=classes, n_features=m, n_samples=client.n_validation
                    )
                consistent = config.defence and config.epsilon is None
                if consistent and isinstance(client.statistics, ClassStatistics):
                    rows = client.statistics
                    if client.validation is not None:
                        rows = rows.merge(client.validation)
                    centred = rows.moments.centred()
                    why = inconsistent_statistics(
                        summary, centred.mean, float(np.trace(centred.gram)) / centred.n
                    )
                    if why:
                        raise StatisticsFormatError(f"inconsistent with its summary: {why}")
        except StatisticsFormatError as exc:
            report.reject("upload", node, exc)
            continue
        run.clients[node] = client
    run.keep("upload", run.clients)


def _plausible(run: _Run) -> None:
    """Reject clients out of line with the others; cap the weight of the rest.

    With ``defence`` off, every client keeps its declared count as weight.
    Otherwise :mod:`skslot.defence` with the run's bounds (3 clients or more): a summary
    whose scale or mean is far from the median client's, or a count above
    ``max-count-ratio`` times the median, is rejected and reported; the
    remaining clients' counts are capped at ``max-weight-ratio`` times the
    median, and a capped client's statistics are scaled down to that weight.
    """
    config = run.config
    if config.defence:
        nodes = run.order
        summaries = [run.clients[node].summary for node in nodes]
        reasons = implausible_summaries(
            summaries,
            max_variance_ratio=config.max_variance_ratio,
            max_mean_offset=config.max_mean_offset,
        )
        reasons.update(
            (k, why)
            for k, why in implausible_counts(
                [s.n for s in summaries], max_count_ratio=config.max_count_ratio
            ).items()
            if k not in reasons
        )
        for k, why in sorted(reasons.items()):
            run.report.reject("upload", nodes[k], f"implausible: {why}")
        run.keep("upload", [node for k, node in enumerate(nodes) if k not in reasons])
    nodes = run.order
    counts = [run.clients[node].summary.n for node in nodes]
    caps = (
        capped_counts(counts, max_weight_ratio=config.max_weight_ratio)
        if config.defence
        else np.asarray(counts, dtype=np.float64)
    )
    for node, n, capped in zip(nodes, counts, caps, strict=True):
        client = run.clients[node]
        client.weight = float(capped)
        if capped < n:
            factor = capped / n
            run.report.capped[node] = round(factor, 6)
            log(WARNING, "%s: weight capped to %.3g of its rows", run.report.name(node), factor)
            if client.statistics is not None:
                client.statistics = client.statistics.scaled(factor)
            if client.validation is not None:
                client.validation = client.validation.scaled(factor)


def _reference(run: _Run) -> tuple[bytes, dict[int, GaussianMap]]:
    """The barycenter of the accepted summaries, its bytes, each client's full map by node.

    Should the step fail on values that passed every check (possible with the
    defence off, or with two clients), the server looks for the client whose
    summary breaks it: if leaving out exactly one client lets the step
    succeed, that client is rejected and reported and the run goes on;
    otherwise the run fails with a report naming the step.
    """
    try:
        return _build_reference(run, run.order)
    except _REFERENCE_ERRORS as exc:
        error = exc
    culprits = []
    if len(run.order) > run.config.min_clients:
        for node in run.order:
            try:
                _build_reference(run, [other for other in run.order if other != node])
            except _REFERENCE_ERRORS:
                continue
            culprits.append(node)
    if len(culprits) != 1:
        raise DeploymentError(
            f"the reference could not be built from the clients' summaries: {error}", run.report
        ) from error
    (culprit,) = culprits
    run.report.reject("upload", culprit, f"its summary breaks the reference: {error}")
    run.keep("upload", [node for node in run.order if node != culprit])
    return _build_reference(run, run.order)


_REFERENCE_ERRORS = (ValueError, ArithmeticError, np.linalg.LinAlgError)


def _build_reference(run: _Run, nodes: list[int]) -> tuple[bytes, dict[int, GaussianMap]]:
    # a client is its node: the barycenter and the maps are keyed by node id
    summaries = [replace(run.clients[node].summary, client=node) for node in nodes]
    weights = [run.clients[node].weight for node in nodes]
    barycenter = BuresBarycenter(
        weights=weights,
        client_batch=run.config.client_batch or None,
        n_jobs=run.config.server_jobs,
    ).fit(summaries)
    reference = barycenter.reference_.to_bytes(run.config.summary_dtype)
    run.report.barycenter_iterations = int(barycenter.n_iter_)
    return reference, barycenter.transport_maps()


def _local_updates(
    run: _Run, stage: str, head: Any, classes: np.ndarray, reference: bytes, taus: list, part: str
) -> dict[float, list]:
    """Stage "updates" (or "refit"): each client's local heads at ``taus``, decoded."""
    m = run.report.n_features
    contents = {
        node: messages.updates_request(run.reference_for(node, reference), taus, part)
        for node in run.order
    }
    replies = run.exchange(stage, contents)
    cap = len(taus) * (8 * (classes.shape[0] + 1) * (m + 2) + 4096)
    received = {}
    for node in run.order:
        if node not in replies:
            continue
        client = run.clients[node]
        n = client.n_fit if part == "fit" else client.summary.n
        try:
            arrays = messages.read_updates_reply(replies[node], n_updates=len(taus), max_bytes=cap)
            factor = client.weight / client.summary.n
            received[node] = [
                head.decode_statistics(a, classes=classes, n_features=m, n_samples=n).scaled(factor)
                for a in arrays
            ]
        except (messages.ProtocolError, StatisticsFormatError) as exc:
            run.report.reject(stage, node, exc)
    if run.config.defence:
        nodes = list(received)
        norms = [
            max(float(np.linalg.norm(np.column_stack([u.coef, u.intercept]))) for u in received[n])
            for n in nodes
        ]
        for k, why in implausible_norms(
            norms, max_norm_ratio=run.config.max_norm_ratio, what="local head norm"
        ).items():
            run.report.reject(stage, nodes[k], f"implausible: {why}")
            del received[nodes[k]]
    run.keep(stage, received)
    return {tau: [received[node][i] for node in run.order] for i, tau in enumerate(taus)}


def _fit(run: _Run, what: str, step: Any) -> Any:
    """A server step on client values; its failure fails the run with a report, not a crash."""
    try:
        return step()
    except (ValueError, ArithmeticError, np.linalg.LinAlgError, MemoryError) as exc:
        raise DeploymentError(f"{what} failed: {type(exc).__name__}: {exc}", run.report) from exc


def _select(
    run: _Run, candidates: list, heads: list, classes: np.ndarray, reference: bytes
) -> Selection:
    """Stage "validation": candidates out, counts back (checked), the choice."""
    scores = [h.linear_scores() for h in heads]
    taus = [c.tau for c in candidates]
    contents = {
        node: messages.validation_request(run.reference_for(node, reference), scores, taus)
        for node in run.order
        if run.clients[node].n_validation > 0
    }
    left_out = {
        node: "no validation rows (too few rows per class to split)"
        for node in run.order
        if node not in contents
    }
    replies = run.exchange("validation", contents)
    counts = {}
    cap = 8 * (len(candidates) + 1) * classes.shape[0] + 4096
    for node in contents:
        if node not in replies:
            left_out[node] = "did not answer the validation stage"
            continue
        try:
            counts[node] = ValidationCounts.from_arrays(
                messages.read_validation_reply(replies[node], max_bytes=cap),
                n_candidates=len(candidates),
                n_classes=classes.shape[0],
                n_samples=run.clients[node].n_validation,
            )
        except (messages.ProtocolError, StatisticsFormatError) as exc:
            run.report.reject("validation", node, exc)
            left_out[node] = f"rejected: {exc}"
    rule = run.config.selection_rule
    selection = _fit(run, "the choice of tau", lambda: select_candidate(candidates, counts, rule))
    table = selection.table()
    run.report.selection = {
        "candidates": table["params"],
        "clients": selection.clients,
        "scores": selection.scores.tolist(),
        "mean_validation_score": table["mean_validation_score"].tolist(),
        "std_error_validation_score": table["std_error_validation_score"].tolist(),
        "chosen": selection.candidate.describe(),
        "left_out": left_out,
    }
    log(INFO, "skslot: validation chose %s", selection.candidate.describe())
    return selection


def run_one_shot(grid: Grid, config: DeploymentConfig) -> tuple[DeploymentReport, Any, bytes]:
    """Run the protocol; returns the report, the global head and the reference bytes.

    Raises
    ------
    DeploymentError
        When fewer than ``config.min_clients`` clients complete a stage, or a
        server step fails on the clients' values; its ``report`` says why.
    """
    run = _Run(grid, config)
    report = run.report
    report.nodes = _wait_for_nodes(grid, config)
    log(INFO, "skslot: %d node(s) connected", len(report.nodes))
    classes = config.class_set
    report.classes = classes.tolist()
    head = DEFAULT_HEADS[config.head](config.seed)
    if not config.defence:
        log(WARNING, "skslot: the defence is off: every client passing the wire checks counts")
    if config.epsilon is not None:
        report.privacy = PRIVACY_SCOPE
        log(WARNING, "skslot: %s", PRIVACY_SCOPE)

    _uploads(run, head, classes)
    _plausible(run)
    reference, maps = _reference(run)

    def all_statistics() -> list:
        return [run.clients[node].statistics for node in run.order]

    def all_maps() -> list[GaussianMap]:
        return [maps[node] for node in run.order]

    if config.auto:
        candidates = candidate_grid(head, config.tau_grid, config.head_grid())
        if head.aligns_statistics:
            heads = _fit(
                run,
                "the candidate heads",
                lambda: candidate_heads(head, candidates, all_statistics(), classes, all_maps()),
            )
        else:
            taus = sorted({c.tau for c in candidates})
            updates = _local_updates(run, "updates", head, classes, reference, taus, "fit")
            heads = _fit(
                run,
                "the candidate heads",
                lambda: candidate_heads(head, candidates, updates, classes),
            )
        selection = _select(run, candidates, heads, classes, reference)
        best, tau = selection.candidate, selection.candidate.tau
        if head.aligns_statistics:
            final = _fit(
                run,
                "the final head",
                lambda: refit_head(
                    head,
                    best,
                    classes,
                    all_statistics(),
                    [run.clients[node].validation for node in run.order],
                    all_maps(),
                ),
            )
        else:
            refit = _local_updates(run, "refit", head, classes, reference, [tau], "all")
            final = _fit(run, "the final head", lambda: refit_head(head, best, classes, refit[tau]))
    else:
        tau = config.tau
        if head.aligns_statistics:
            final = _fit(
                run,
                "the head",
                lambda: clone(head).fit_from_statistics(
                    all_statistics(), classes, maps=[t.geodesic(tau) for t in all_maps()]
                ),
            )
        else:
            updates = _local_updates(run, "updates", head, classes, reference, [tau], "all")
            final = _fit(
                run, "the head", lambda: clone(head).fit_from_statistics(updates[tau], classes)
            )
    report.tau = float(tau)
    scores = final.linear_scores()

    # the global head out (with the reference where not sent yet), local accuracy back
    contents = {
        node: messages.head_request(run.reference_for(node, reference), scores, tau)
        for node in run.order
    }
    replies = run.exchange("evaluation", contents)
    for node in run.order:
        if node not in replies:
            continue
        n_test = run.clients[node].n_test
        try:
            n_correct = messages.read_evaluation_reply(replies[node], n_test)
        except messages.ProtocolError as exc:
            report.reject("evaluation", node, exc)
            continue
        report.n_test[node] = n_test
        if n_test:
            report.accuracy[node] = n_correct / n_test
    run.keep("evaluation", report.accuracy)
    report.macro_accuracy = float(np.mean(list(report.accuracy.values())))
    report.status = "completed"
    return report, scores, reference


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(
    directory: str | Path,
    report: DeploymentReport,
    scores: Any = None,
    reference: bytes | None = None,
) -> None:
    """``report.json``, and for a completed run ``global_head.npz`` and ``reference.bin``.

    Files of an earlier run are removed first, and each file is written
    atomically, so the directory never mixes two runs.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES:
        (directory / name).unlink(missing_ok=True)
    if scores is not None:
        buffer = io.BytesIO()
        np.savez(buffer, classes=scores.classes, coef=scores.coef, intercept=scores.intercept)
        _write_atomically(directory / "global_head.npz", buffer.getvalue())
    if reference is not None:
        _write_atomically(directory / "reference.bin", reference)
    _write_atomically(directory / "report.json", report.to_json().encode())


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point: run the protocol with the run config, log and save the report.

    A run that fails writes ``report.json`` with ``status = "failed"`` and the
    reason, then raises, so the ServerApp exits with an error.
    """
    config = DeploymentConfig.from_run_config(context.run_config)
    try:
        report, scores, reference = run_one_shot(grid, config)
    except Exception as exc:
        failed = getattr(exc, "report", None) or DeploymentReport(config=config.to_run_config())
        failed.status, failed.error = "failed", f"{type(exc).__name__}: {exc}"
        log(ERROR, "skslot: the run failed: %s", failed.error)
        if config.output_dir:
            write_outputs(config.output_dir, failed)
        raise
    log(
        INFO,
        "skslot: %s + SLOT (tau=%.2f%s): macro accuracy %.4f over %d clients %s",
        config.head,
        report.tau,
        ", chosen by validation" if config.auto else "",
        report.macro_accuracy,
        len(report.accuracy),
        report.accuracy,
    )
    if config.output_dir:
        write_outputs(config.output_dir, report, scores, reference)
