"""The server side of the one-shot protocol, as a Flower ``ServerApp``.

A thin entry point: :func:`run_one_shot` runs the protocol's one driver,
:class:`skslot.protocol.OneShotProtocol` (the same object
:class:`~skslot.FederatedTauSearch` runs in process), over a Flower ``Grid``
through :class:`~skslot.flower.transport.FlowerTransport`, with the settings
of the run configuration (:class:`~skslot.flower.DeploymentConfig`).

Decode, validate, tie to the client's other messages, screen, then combine:
a node that does not answer within ``reply_timeout``, answers with an error,
or sends a payload that fails a check is left out of the rest of the run and
named in the report.  The run goes on while at least ``min_clients`` remain,
and otherwise stops with a :class:`~skslot.protocol.ProtocolRunError` carrying
the report.
With an ``output-dir``, each run writes to a folder of its own
(``run-<flower run id>``, :mod:`skslot.flower.outputs`) whose ``report.json``
says ``"running"`` from the start and ends ``"completed"`` or ``"failed"``;
no run touches another run's files.
"""

from __future__ import annotations

import logging
from dataclasses import fields

from flwr.app import Context
from flwr.common.logger import FLOWER_LOGGER, log
from flwr.serverapp import Grid, ServerApp

from ..heads import LinearScores
from ..protocol import ProtocolReport, ProtocolRunError
from ..protocol.report import logger as protocol_logger
from . import messages
from .config import DeploymentConfig
from .groups import RunSettings
from .outputs import RunOutputs, utc_now
from .transport import FlowerTransport

__all__ = ["app", "run_one_shot"]

#: What a run with private summaries alone (a head with no private release of its own) does
#: and does not protect (logged and reported).
PRIVACY_SCOPE = (
    "the (epsilon, delta) guarantee covers each client's summary, released once per run; "
    "the head's messages and the validation, screening and test counts are NOT private, "
    "so the summary's guarantee does not protect the data (with a built-in head, one "
    "budget per client covers everything it sends)"
)


def _forward_protocol_log() -> None:
    """Show the protocol's log on Flower's console, as the ServerApp's own lines."""
    for handler in FLOWER_LOGGER.handlers:
        if handler not in protocol_logger.handlers:
            protocol_logger.addHandler(handler)
    protocol_logger.setLevel(logging.INFO)


def run_one_shot(
    grid: Grid, config: DeploymentConfig
) -> tuple[ProtocolReport, LinearScores, bytes]:
    """Run the protocol; returns the report, the global head and the reference bytes.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The Flower grid the clients are reached through.
    config : DeploymentConfig
        The deployment's settings.

    Returns
    -------
    report : ProtocolReport
        What happened, stage by stage.
    scores : LinearScores
        The global head.
    reference : bytes
        The reference summary, encoded in ``config.summary_dtype``.

    Raises
    ------
    ProtocolRunError
        When fewer than ``config.min_clients`` clients complete a stage, or a
        server step fails on the clients' values; its ``report`` says why.
    """
    protocol = config.protocol()
    settings = [f.name for f in fields(FlowerTransport) if f.kw_only]  # named as in the config
    transport = FlowerTransport(grid, **{name: getattr(config, name) for name in settings})
    if not config.defence:
        protocol_logger.warning(
            "skslot: the defence is off: every client passing the wire checks counts"
        )
    private = config.privacy_budget() is not None  # else: the summary alone
    if config.epsilon is not None and not private:
        protocol_logger.warning("skslot: %s", PRIVACY_SCOPE)
    try:
        result = protocol.run(transport, config.class_set)
    except ProtocolRunError as exc:
        _report_transport(exc.report, transport)
        raise
    report = result.report
    _report_transport(report, transport)
    if config.epsilon is not None and not private:
        report.privacy = PRIVACY_SCOPE
    elif private:
        protocol_logger.info("skslot: %s", report.privacy)
    left_out = report.left_out()
    protocol_logger.info(
        "skslot: %d of %d node(s) took part%s",
        len(report.nodes) - len(left_out),
        len(report.nodes),
        "".join(f"; {report.name(n)} {why}" for n, why in left_out.items()),
    )
    reference = result.reference.smaller_bytes(config.summary_dtype)
    return report, result.head.linear_scores(), reference


#: The run-config settings only a node that reads a partition of ``dataset`` uses.
PARTITION_SETTINGS = ("dataset", "alpha", "clients_per_domain")


def _report_transport(report: ProtocolReport, transport: FlowerTransport) -> None:
    """The transport's waits and what each node read into the report; without a partition,
    not the partition settings."""
    report.waits, report.data = transport.waits, dict(transport.sources)
    sources = transport.sources
    if sources and not any(text.startswith(messages.PARTITION) for text in sources.values()):
        for name in PARTITION_SETTINGS:
            report.config.pop(DeploymentConfig.setting(name).key, None)


def read_data(report: ProtocolReport) -> str:
    """What the nodes read, in a few words, for the run's last log line.

    Examples
    --------
    >>> from skslot.protocol import ProtocolReport
    >>> report = ProtocolReport(config={})
    >>> report.data = {1: "its own .csv table, test rows from its 'split' column"}
    >>> read_data(report)
    "node 1: its own .csv table, test rows from its 'split' column"
    """
    sources = sorted({text for text in report.data.values()})
    if len(sources) == 1 and len(report.data) > 1:
        return f"every node: {sources[0]}"
    return "; ".join(f"{report.name(node)}: {text}" for node, text in report.data.items())


def alignment(config: DeploymentConfig, tau: float) -> str:
    """How the run aligned, for its last log line: ``+ SLOT (tau=...)`` or ``without SLOT``.

    A run at ``tau = 0`` whose means stay too (``mean-tau`` 0, or following
    ``tau``) did not align at all.

    Examples
    --------
    >>> from skslot.flower import DeploymentConfig
    >>> alignment(DeploymentConfig(tau=0.0, mean_tau=None), 0.0)
    'without SLOT (tau=0)'
    >>> alignment(DeploymentConfig(tau=0.0), 0.0)  # the mean still moves
    '+ SLOT (tau=0.00)'
    >>> alignment(DeploymentConfig(tau="auto"), 0.4)
    '+ SLOT (tau=0.40, chosen by validation)'
    """
    moved_mean = config.mean_tau if config.mean_tau is not None else tau
    chosen = ", chosen by validation" if config.auto else ""
    if tau == 0 and moved_mean == 0:
        return f"without SLOT (tau=0{chosen})"
    return f"+ SLOT (tau={tau:.2f}{chosen})"


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point: run the protocol with the run config, log and save the report.

    With ``output-dir`` set, the run gets its own folder there
    (:class:`~skslot.flower.outputs.RunOutputs`): its ``report.json`` says
    ``"running"`` from the start, then ``"completed"`` (with the head and the
    reference beside it) or ``"failed"`` with the reason.  A failed run
    (a bad run config included) raises, so Flower marks the run failed.
    """
    _forward_protocol_log()
    started = ProtocolReport(
        config=dict(context.run_config), run_id=context.run_id or None, started_at=utc_now()
    )
    output_dir = context.run_config.get(RunSettings.setting("output_dir").key)
    outputs = None
    if isinstance(output_dir, str) and output_dir:  # this run's folder, its report "running"
        outputs = RunOutputs(output_dir, started.run_id)
        outputs.write(started)
        log(logging.INFO, "skslot: this run writes to %s", outputs.path)
    try:
        config = DeploymentConfig.from_run_config(context.run_config)
        started.config = config.to_run_config()
        report, scores, reference = run_one_shot(grid, config)
    except BaseException as exc:
        failed = getattr(exc, "report", None) or started
        failed.status, failed.error = "failed", f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, Exception):  # stopped: SIGINT/SIGTERM from Flower or a user
            failed.error = f"stopped ({type(exc).__name__})"
        failed.run_id, failed.started_at = started.run_id, started.started_at
        failed.finished_at = utc_now()
        log(logging.ERROR, "skslot: the run failed: %s", failed.error)
        if outputs is not None:
            outputs.write(failed)
        raise
    report.run_id, report.started_at = started.run_id, started.started_at
    report.finished_at = utc_now()
    log(logging.INFO, "skslot: data read: %s", read_data(report))
    assert report.tau is not None  # a completed run's
    log(
        logging.INFO,
        "skslot: %s %s, label-mix %r: macro accuracy %.4f (%s) over %d clients, as each "
        "reports its own test rows (unchecked): %s",
        config.head,
        alignment(config, report.tau),
        config.label_mix,
        report.macro_accuracy,
        report.accuracy_case,
        len(report.accuracy),
        "; ".join(f"{report.name(node)} {value:.4f}" for node, value in report.accuracy.items()),
    )
    if outputs is not None:
        outputs.write(report, scores, reference)
        log(logging.INFO, "skslot: completed; outputs in %s", outputs.path)
