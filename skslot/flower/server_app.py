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
and otherwise stops with a :class:`DeploymentError` carrying the report.
Whatever happens, the run's output directory ends with a ``report.json``
whose ``status`` says ``"completed"`` or ``"failed"``, and never keeps a
stale head or reference from an earlier run (:mod:`skslot.flower.outputs`).
"""

from __future__ import annotations

import logging

from flwr.app import Context
from flwr.common.logger import FLOWER_LOGGER, log
from flwr.serverapp import Grid, ServerApp

from ..heads import LinearScores
from ..protocol import ProtocolReport, ProtocolRunError
from ..protocol.report import logger as protocol_logger
from .config import DeploymentConfig
from .outputs import write_outputs
from .transport import FlowerTransport

__all__ = ["DeploymentError", "DeploymentReport", "app", "run_one_shot", "write_outputs"]

#: What happened in a deployment run (the protocol's report).
DeploymentReport = ProtocolReport
#: A deployment run that could not complete (the protocol's error, with its report).
DeploymentError = ProtocolRunError

#: What a run with private summaries does and does not protect (logged and reported).
PRIVACY_SCOPE = (
    "the (epsilon, delta) guarantee covers each client's summary, released once per run; "
    "the head's messages (class sums and Gram matrix, mixtures, local heads, validation "
    "counts) are NOT private: from them the server recovers a client's exact mean and "
    "covariance, so with a head enabled the summary's guarantee does not protect the data"
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

    Raises
    ------
    DeploymentError
        When fewer than ``config.min_clients`` clients complete a stage, or a
        server step fails on the clients' values; its ``report`` says why.
    """
    protocol = config.protocol()
    transport = FlowerTransport(
        grid,
        head=protocol.head,
        classes=config.class_set,
        summary_dtype=config.summary_dtype,
        n_features=config.n_features,
        max_dimension=config.max_dimension,
        num_clients=config.num_clients,
        connect_timeout=config.connect_timeout,
        reply_timeout=config.reply_timeout,
    )
    if not config.defence:
        protocol_logger.warning(
            "skslot: the defence is off: every client passing the wire checks counts"
        )
    if config.epsilon is not None:
        protocol_logger.warning("skslot: %s", PRIVACY_SCOPE)
    result = protocol.run(transport, config.class_set)
    if config.epsilon is not None:
        result.report.privacy = PRIVACY_SCOPE
    protocol_logger.info("skslot: %d node(s) took part", len(result.report.nodes))
    return (
        result.report,
        result.head.linear_scores(),
        result.reference.to_bytes(config.summary_dtype),
    )


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point: run the protocol with the run config, log and save the report.

    A run that fails writes ``report.json`` with ``status = "failed"`` and the
    reason, then raises, so the ServerApp exits with an error.
    """
    _forward_protocol_log()
    config = DeploymentConfig.from_run_config(context.run_config)
    try:
        report, scores, reference = run_one_shot(grid, config)
    except Exception as exc:
        failed = getattr(exc, "report", None) or ProtocolReport(config=config.to_run_config())
        failed.status, failed.error = "failed", f"{type(exc).__name__}: {exc}"
        log(logging.ERROR, "skslot: the run failed: %s", failed.error)
        if config.output_dir:
            write_outputs(config.output_dir, failed)
        raise
    log(
        logging.INFO,
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
