"""What happened in a run of the protocol, per client and per stage, and how it fails."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["ProtocolReport", "ProtocolRunError", "client_name", "left_out", "logger"]

#: The protocol's log (the Flower ServerApp forwards it to Flower's console).
logger = logging.getLogger("skslot.protocol")


def client_name(node: Any, label: Any = None) -> str:
    """``node <id> (client <label>)``, or ``node <id>`` when the client declared no label.

    The one way logs and errors name a client: by its address, which is what
    identifies it, with the label it declared, which is only informational.

    Parameters
    ----------
    node : object
        The client's transport address (a Flower node id).
    label : object, optional
        The label the client declared.

    Returns
    -------
    str
    """
    return f"node {node}" if label is None else f"node {node} (client {label!r})"


@dataclass
class ProtocolReport:
    """What happened in a run, per client and per stage.

    Clients are keyed by their transport address (a Flower node id; in
    process, the client's label).

    Attributes
    ----------
    config : dict
        The run configuration.
    status : {"running", "completed", "failed"}
        ``"running"`` from the start until the run ends (a deployment's
        ``report.json`` says so while the run goes on, and still says so if
        its server process was killed).
    error : str or None
        Why a failed run stopped.
    run_id : int or None
        The transport's run identifier (the Flower run id), where there is one.
    started_at, finished_at : str or None
        UTC times (ISO 8601) of the run's start and end, where the transport
        records them.
    stages : list of str
        The stages run, in order.
    nodes : list
        The clients the server addressed.
    clients : dict
        Address to the label its summary declared (informational only: a
        client *is* its address).
    missing : dict
        Per stage, the clients that did not answer in time.
    waits : dict
        Per stage, where the transport measures it: seconds waited, clients
        asked and answered, messages re-sent per client, and why each missing
        client is missing (and ``"connect"``: seconds waited for the clients
        to connect, and how many did).
    rejected : dict
        Per stage, ``{client: reason}`` for replies that were errors or failed
        validation.
    bytes_sent, bytes_received : dict
        Per client, per stage, bytes of the message contents (as Flower counts
        them: array data, keys and values), where the transport counts them.
    n_features : int or None
        The run's dimension ``m``, once the uploads gave it.
    summary_values : dict
        Per client whose upload was read, the number of values its summary
        payload encodes, its count among them: ``m (m + 1) / 2 + m + 1``
        dense, ``m (r + 1) + r + 2`` in factor form of rank ``r`` (its
        complement's scalar too), 1 where the server derives the summary
        from the head's statistics (FedCGS's shrinkage, 8 bytes).
    summary_payload_bytes : dict
        Per client, length of the summary payload.
    classes : list
        The run's class set.
    barycenter_iterations : int or None
        Iterations of the last build of the reference.
    reference_clients : list
        The clients the reference of the final head was built from: those
        accepted when the final head was fitted (the reference is built again
        without a client rejected, missing or excluded after it was built;
        with a reference fitted before the run, the clients it served).
    tau : float or None
        The ``tau`` of the final head (the chosen one with ``tau = "auto"``).
    tau_scales : dict
        With ``client-tau = label-shift``: per client, the factor of ``tau``
        it moved by (the total-variation distance between its class
        proportions and the federation's).
    capped : dict
        Per client whose declared count exceeded ``max-weight-ratio`` times the
        median, the factor its weight was multiplied by.
    clipped : dict
        Per client whose O-FedAvg local head's norm exceeded ``clip-norm-ratio``
        times the median client's, the factor its heads were multiplied by
        (at the last stage that collected them).
    privacy : str or None
        With private releases, what the guarantee covers and what it does not.
    privacy_spent : dict
        In a private run (:class:`~skslot.protocol.OneShotProtocol`'s
        ``privacy``), per client, the privacy loss (at the budget's delta) of
        the releases the server received from it
        (:meth:`~skslot.privacy.server.RunAccount.report`).
    selection : dict or None
        With ``tau = "auto"``: the candidates, each client's balanced
        validation accuracy per candidate, their mean and standard error, the
        chosen candidate, and the clients left out of the choice.
    screening : dict or None
        Where contributions were screened (:mod:`skslot.defence.screening`): the
        candidate, per client the others' evidence on it (voters, the voter
        whose absence weakens the case most, agreeing voters, rows gained and
        lost, the gain, the sign test's p-value and its threshold) in its
        last round, the clients excluded in every round, those it could not
        screen (``unscreenable``, with why) and those it would have excluded
        but for ``min_clients`` (``kept``); or why it was skipped.
    final_head : str or None
        What the final head was fitted on: with a screening, the screened
        contributions only (the clients' fitting rows).
    untrained_classes : list
        The classes of the run's class set no accepted client's rows trained:
        the final head never predicts them.
    lone_classes : dict or None
        The classes one accepted client's rows alone trained, with that
        client's address, by the class counts the clients sent (in a private
        run, the counts they released); ``None`` where some client sent none.
    data : dict
        Per client, where the transport hears it, what data it says it read
        (its own word, unchecked).
    accuracy : dict
        Per client, its accuracy in the run's case (``accuracy_case``): on
        test rows weighted to its own training mix where the head serves each
        client's own label mix, else on its whole local test split.  Its own
        claim, which the server cannot check (the screening's evidence is
        what the server checked).
    accuracy_case : str or None
        What ``accuracy`` and ``macro_accuracy`` measure: ``"own label
        mix"`` where the head serves each client's own mix and every client
        evaluated sent its own-mix figure, else ``"whole test split"`` (a
        private run's clients release their counts only); ``None`` without
        any figure.
    test_accuracy : dict
        Per client, the accuracy on its whole local test split.
    own_mix_accuracy : dict
        Per client, where the head serves each client's own label mix and
        the client released it, the accuracy on its test rows weighted to its
        training mix (:func:`~skslot.label_mix.own_mix_accuracy`).
    n_test : dict
        Per client, the rows of its local test split.
    macro_accuracy : float
        Mean of ``accuracy`` over clients: of their own claims.
    """

    config: dict
    status: str = "running"
    error: str | None = None
    run_id: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    stages: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    clients: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    waits: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    bytes_sent: dict = field(default_factory=dict)
    bytes_received: dict = field(default_factory=dict)
    n_features: int | None = None
    summary_values: dict = field(default_factory=dict)
    summary_payload_bytes: dict = field(default_factory=dict)
    classes: list = field(default_factory=list)
    barycenter_iterations: int | None = None
    reference_clients: list = field(default_factory=list)
    tau: float | None = None
    tau_scales: dict = field(default_factory=dict)
    selection: dict | None = None
    capped: dict = field(default_factory=dict)
    clipped: dict = field(default_factory=dict)
    privacy: str | None = None
    privacy_spent: dict = field(default_factory=dict)
    screening: dict | None = None
    final_head: str | None = None
    untrained_classes: list = field(default_factory=list)
    lone_classes: dict | None = None
    data: dict = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    accuracy_case: str | None = None
    test_accuracy: dict = field(default_factory=dict)
    own_mix_accuracy: dict = field(default_factory=dict)
    n_test: dict = field(default_factory=dict)
    macro_accuracy: float | None = None

    def name(self, node: Any) -> str:
        """``node <id> (client <label>)``, or just the node when it declared no label.

        Parameters
        ----------
        node : object
            The client's transport address.

        Returns
        -------
        str
        """
        return client_name(node, self.clients.get(node))

    def reject(self, stage: str, node: Any, reason: Exception | str) -> None:
        """Record, and log, a client's reply rejected at a stage.

        Parameters
        ----------
        stage : str
            The stage's name.
        node : object
            The client's transport address.
        reason : Exception or str
            Why the reply was rejected.
        """
        self.rejected.setdefault(stage, {})[node] = str(reason)
        logger.warning("rejected %s at the %s stage: %s", self.name(node), stage, reason)

    def score_accuracy(self) -> None:
        """Set ``accuracy``, ``accuracy_case`` and ``macro_accuracy`` from the clients' figures.

        The macro accuracy averages one quantity: each client's own-mix figure
        where every client evaluated sent one (the evaluation accepts one only
        where the run asks for it), else each one's whole test split.
        """
        if not self.test_accuracy:
            return
        every = set(self.own_mix_accuracy) == set(self.test_accuracy)
        self.accuracy = dict(self.own_mix_accuracy if every else self.test_accuracy)
        self.accuracy_case = "own label mix" if every else "whole test split"
        self.macro_accuracy = float(np.mean(list(self.accuracy.values())))

    def left_out(self) -> dict:
        """Every addressed client that did not take part to the end, and why.

        Returns
        -------
        dict
            ``{client: "rejected at the <stage> stage: <reason>"}`` or ``"missing
            at the <stage> stage"``, in the order of ``nodes`` (a client
            rejected at one stage is not asked at the next).
        """
        return left_out(self.nodes, self.rejected, self.missing)

    def to_json(self) -> str:
        """The report as JSON text (keys as strings, NumPy values as Python ones).

        Returns
        -------
        str
        """

        return json.dumps(_plain(asdict(self)), indent=2)


def left_out(nodes: Sequence, rejected: Mapping, missing: Mapping) -> dict:
    """Each of ``nodes`` rejected or missing at some stage, with the stage and why.

    Written once for the report object and for a ``report.json`` read back
    (whose keys are strings: the nodes are matched by their text).

    Parameters
    ----------
    nodes : sequence
        The clients the server addressed.
    rejected : mapping
        Per stage, ``{client: reason}`` (:attr:`ProtocolReport.rejected`).
    missing : mapping
        Per stage, the clients that did not answer (:attr:`ProtocolReport.missing`).

    Returns
    -------
    dict
        ``{client: why}``, in the order of ``nodes``.
    """
    why: dict[str, str] = {}
    for stage, reasons in rejected.items():
        for node, reason in reasons.items():
            why.setdefault(str(node), f"rejected at the {stage} stage: {reason}")
    for stage, nodes_missing in missing.items():
        for node in nodes_missing:
            why.setdefault(str(node), f"missing at the {stage} stage")
    return {node: why[str(node)] for node in nodes if str(node) in why}


def _plain(value: Any) -> Any:
    """``value`` with every key a string and every NumPy scalar or array a Python value."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    return value


class ProtocolRunError(RuntimeError):
    """The run could not complete; ``report`` says who was missing or rejected, and why.

    Parameters
    ----------
    message : str
        Why the run stopped.
    report : ProtocolReport
        The run's report up to the failure.
    """

    def __init__(self, message: str, report: ProtocolReport) -> None:
        super().__init__(message)
        self.report = report
