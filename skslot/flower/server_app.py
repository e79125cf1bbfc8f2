"""The server side of the one-shot protocol, as a Flower ``ServerApp``.

:func:`run_one_shot` drives the three stages over a Flower ``Grid``:

1. ask every node for its summary; decode each with
   :meth:`GaussianSummary.from_bytes` (rejecting malformed, hostile, or
   wrong-dimension payloads and duplicated client labels);
2. compute the reference with :class:`~skslot.BuresBarycenter`, send it with
   ``tau`` and the global class set; decode each client's head statistics
   with the head's :meth:`~skslot.heads.OneShotHead.decode_statistics` and fit
   the global head with ``fit_from_statistics``;
3. send the global head as linear scores; collect each client's accuracy on
   its local test split.

A node that does not answer within ``reply_timeout``, answers with an error,
or sends a payload that fails validation is left out of the rest of the run
and named in the :class:`DeploymentReport`; the run goes on while at least
``min_clients`` remain, and otherwise stops with a :class:`DeploymentError`
carrying the report.  Clients are ordered by their label (the partition id),
the order in-process ``fit`` uses, so both give the same head.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from ..barycenter import BuresBarycenter
from ..bench import DEFAULT_HEADS
from ..gaussian import GaussianSummary, SummaryFormatError
from ..heads import StatisticsFormatError
from . import messages
from .config import DeploymentConfig

__all__ = ["DeploymentError", "DeploymentReport", "app", "run_one_shot"]

STAGES = ("summary", "statistics", "evaluation")
MESSAGE_TYPES = {
    "summary": "query.summary",
    "statistics": "train.statistics",
    "evaluation": "evaluate.head",
}


@dataclass
class DeploymentReport:
    """What happened in a deployment run, per client and per stage.

    Attributes
    ----------
    config : dict
        The run configuration.
    nodes : list of int
        Flower node ids the server addressed.
    clients : dict
        Client label (partition id) of each node that sent a valid summary.
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
    accuracy : dict
        Per client label, accuracy on its local test split.
    macro_accuracy : float
        Mean of ``accuracy`` over clients.
    """

    config: dict
    nodes: list = field(default_factory=list)
    clients: dict = field(default_factory=dict)
    missing: dict = field(default_factory=lambda: {stage: [] for stage in STAGES})
    rejected: dict = field(default_factory=lambda: {stage: {} for stage in STAGES})
    bytes_sent: dict = field(default_factory=dict)
    bytes_received: dict = field(default_factory=dict)
    n_features: int | None = None
    summary_values: int | None = None
    summary_payload_bytes: dict = field(default_factory=dict)
    classes: list = field(default_factory=list)
    barycenter_iterations: int | None = None
    accuracy: dict = field(default_factory=dict)
    n_test: dict = field(default_factory=dict)
    macro_accuracy: float | None = None

    def name(self, node: int) -> str:
        """``client <label> (node <id>)``, or just the node when it has no label."""
        if node in self.clients:
            return f"client {self.clients[node]!r} (node {node})"
        return f"node {node}"

    def to_json(self) -> str:
        def keys(d: Any) -> Any:
            if isinstance(d, dict):
                return {str(k): keys(v) for k, v in d.items()}
            return d

        return json.dumps(keys(asdict(self)), indent=2, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class DeploymentError(RuntimeError):
    """Too few clients answered a stage; ``report`` says who was missing or rejected."""

    def __init__(self, message: str, report: DeploymentReport) -> None:
        super().__init__(message)
        self.report = report


def _exchange(
    grid: Grid,
    contents: dict[int, RecordDict],
    stage: str,
    config: DeploymentConfig,
    report: DeploymentReport,
) -> dict[int, Message]:
    """Send one message per node, wait for the replies, record bytes and absentees."""
    outgoing = []
    for node, content in contents.items():
        report.bytes_sent.setdefault(node, {})[stage] = messages.payload_bytes(content)
        outgoing.append(
            Message(content, dst_node_id=node, message_type=MESSAGE_TYPES[stage], group_id=stage)
        )
    replies: dict[int, Message] = {}
    for reply in grid.send_and_receive(outgoing, timeout=config.reply_timeout):
        node = reply.metadata.src_node_id
        if node not in contents or node in replies:
            continue  # not asked, or a duplicate: ignored
        replies[node] = reply
        if reply.has_error():
            report.rejected[stage][node] = f"client error: {reply.error.reason}"
        else:
            report.bytes_received.setdefault(node, {})[stage] = messages.payload_bytes(
                reply.content
            )
    report.missing[stage] = sorted(set(contents) - set(replies))
    for node in report.missing[stage]:
        log(WARNING, "%s did not answer the %s stage in time", report.name(node), stage)
    return {node: reply for node, reply in replies.items() if not reply.has_error()}


def _require(
    accepted: Iterable, stage: str, config: DeploymentConfig, report: DeploymentReport
) -> None:
    """Raise :class:`DeploymentError`, naming who failed, when too few clients remain."""
    accepted = list(accepted)
    if len(accepted) < config.min_clients:
        problems = [f"{report.name(n)} missing" for n in report.missing[stage]] + [
            f"{report.name(n)} rejected: {why}" for n, why in report.rejected[stage].items()
        ]
        raise DeploymentError(
            f"only {len(accepted)} client(s) completed the {stage} stage, fewer than "
            f"min_clients = {config.min_clients} ({'; '.join(problems) or 'no other node'})",
            report,
        )


def _reject(report: DeploymentReport, stage: str, node: int, reason: Exception | str) -> None:
    report.rejected[stage][node] = str(reason)
    log(WARNING, "rejected %s at the %s stage: %s", report.name(node), stage, reason)


def _wait_for_nodes(grid: Grid, config: DeploymentConfig) -> list[int]:
    deadline = time.monotonic() + config.connect_timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if (config.num_clients and len(nodes) >= config.num_clients) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


def _summaries(
    replies: dict[int, Message], report: DeploymentReport
) -> dict[int, tuple[GaussianSummary, np.ndarray]]:
    """Stage 1 on receipt: decode, then keep the majority dimension and unique labels."""
    decoded = {}
    for node, reply in replies.items():
        try:
            payload, classes = messages.read_summary_reply(reply)
            summary = GaussianSummary.from_bytes(payload)
        except (messages.ProtocolError, SummaryFormatError) as exc:
            _reject(report, "summary", node, exc)
            continue
        decoded[node] = (summary, classes)
        report.summary_payload_bytes[node] = len(payload)
    if not decoded:
        return {}
    dims = Counter(s.dimension for s, _ in decoded.values())
    m = max(dims, key=lambda d: (dims[d], -d))
    kinds = Counter(c.dtype.kind in "iu" for _, c in decoded.values())
    integer_labels = max(kinds, key=lambda k: (kinds[k], k))
    labels = Counter(s.client for s, _ in decoded.values())
    accepted = {}
    for node, (summary, classes) in decoded.items():
        if summary.dimension != m:
            _reject(report, "summary", node, f"dimension {summary.dimension}, expected {m}")
        elif (classes.dtype.kind in "iu") != integer_labels:
            _reject(report, "summary", node, f"class labels of dtype {classes.dtype}")
        elif summary.client is None or labels[summary.client] > 1:
            _reject(report, "summary", node, f"client label {summary.client!r} is not unique")
        else:
            accepted[node] = (summary, classes)
            report.clients[node] = summary.client
    report.n_features = m
    report.summary_values = m * (m + 1) // 2 + m + 1
    return accepted


def _statistics_cap(head: Any, n_classes: int, m: int) -> int:
    """Most bytes a client's statistics can take (float64, a little npy overhead)."""
    components = getattr(head, "n_components", 1)
    return 8 * (n_classes * components + 2) * (m + 2) ** 2 + (1 << 20)


def run_one_shot(grid: Grid, config: DeploymentConfig) -> tuple[DeploymentReport, Any, bytes]:
    """Run the three stages; returns the report, the global head and the reference bytes.

    Raises
    ------
    DeploymentError
        When fewer than ``config.min_clients`` clients complete a stage.
    """
    report = DeploymentReport(config=config.to_run_config())
    nodes = _wait_for_nodes(grid, config)
    report.nodes = nodes
    log(INFO, "skslot: %d node(s) connected", len(nodes))

    # 1. summaries
    contents = {node: messages.summary_request(config.summary_dtype) for node in nodes}
    replies = _exchange(grid, contents, "summary", config, report)
    accepted = _summaries(replies, report)
    _require(accepted, "summary", config, report)
    order = sorted(accepted, key=lambda node: _sort_key(accepted[node][0].client))
    summaries = [accepted[node][0] for node in order]
    barycenter = BuresBarycenter().fit(summaries)
    report.barycenter_iterations = int(barycenter.n_iter_)
    reference = barycenter.reference_.to_bytes(config.summary_dtype)
    classes = np.unique(np.concatenate([accepted[node][1] for node in order]))
    report.classes = classes.tolist()
    m = report.n_features

    # 2. reference out, head statistics back
    head = DEFAULT_HEADS[config.head](config.seed)
    contents = {
        node: messages.statistics_request(reference, config.tau, classes, index)
        for index, node in enumerate(order)
    }
    replies = _exchange(grid, contents, "statistics", config, report)
    cap = _statistics_cap(head, classes.shape[0], m)
    statistics = {}
    for node in order:
        if node not in replies:
            continue
        try:
            arrays = messages.read_statistics_reply(replies[node], max_bytes=cap)
            statistics[node] = head.decode_statistics(
                arrays, classes=classes, n_features=m, n_samples=accepted[node][0].n
            )
        except (messages.ProtocolError, StatisticsFormatError) as exc:
            _reject(report, "statistics", node, exc)
    _require(statistics, "statistics", config, report)
    head.fit_from_statistics([statistics[node] for node in order if node in statistics], classes)
    scores = head.linear_scores()

    # 3. the global head out, local accuracy back
    contents = {node: messages.head_request(scores) for node in statistics}
    replies = _exchange(grid, contents, "evaluation", config, report)
    for node in order:
        if node not in replies:
            continue
        try:
            n_correct, n_test = messages.read_evaluation_reply(replies[node])
        except messages.ProtocolError as exc:
            _reject(report, "evaluation", node, exc)
            continue
        client = report.clients[node]
        report.n_test[client] = n_test
        if n_test:
            report.accuracy[client] = n_correct / n_test
    _require(report.accuracy, "evaluation", config, report)
    report.macro_accuracy = float(np.mean(list(report.accuracy.values())))
    return report, scores, reference


def _sort_key(label: int | str) -> tuple:
    """Integers before strings, each in natural order (as ``np.unique`` sorts one kind)."""
    return (isinstance(label, str), label)


def write_outputs(directory: str | Path, report: DeploymentReport, scores: Any, reference: bytes):
    """``report.json``, ``global_head.npz`` (classes, coef, intercept) and ``reference.bin``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(report.to_json())
    np.savez(
        directory / "global_head.npz",
        classes=scores.classes,
        coef=scores.coef,
        intercept=scores.intercept,
    )
    (directory / "reference.bin").write_bytes(reference)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point: run the protocol with the run config, log and save the report."""
    config = DeploymentConfig.from_run_config(context.run_config)
    try:
        report, scores, reference = run_one_shot(grid, config)
    except DeploymentError as exc:
        if config.output_dir:
            Path(config.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(config.output_dir) / "report.json").write_text(exc.report.to_json())
        raise
    log(
        INFO,
        "skslot: %s + SLOT (tau=%.2f): macro accuracy %.4f over %d clients %s",
        config.head,
        config.tau,
        report.macro_accuracy,
        len(report.accuracy),
        report.accuracy,
    )
    if config.output_dir:
        write_outputs(config.output_dir, report, scores, reference)
