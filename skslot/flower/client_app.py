"""The client side of the one-shot protocol, as a Flower ``ClientApp``.

Each handler answers one stage (see :mod:`skslot.flower.messages`) with the
library's own objects: :class:`~skslot.GaussianSummaryEstimator` for the
summary, :meth:`~skslot.SLOTTransformer.from_reference` for the map, and the
client functions of :mod:`skslot.selection` (the head's statistics, local
heads per ``tau``, validation counts), which :class:`~skslot.FederatedTauSearch`
calls in process too.  The summary exactly as the server decoded it and the
reference are kept in the run's ``context.state`` (they never leave the node
again), so every stage uses the same map.

A node's data comes from its *node config* (``flower-supernode --node-config``):

- ``partition-id`` and optionally ``dataset`` (a multi-domain ``.npz`` as in
  :func:`skslot.datasets.load_npz`, or ``"office-caltech10"``; default: the
  run config's ``dataset``): this node is client ``partition-id`` of the
  paper's partition with the run's ``alpha`` and ``seed``; or
- ``data``: a user's own ``.npz`` with ``X_train``, ``y_train``, ``X_test``,
  ``y_test``, and optionally ``client-id`` (an int or a string naming this
  client; default: the Flower node id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from .._validation import spawn_seeds
from ..bench import DEFAULT_HEADS
from ..datasets import dirichlet_partition, load_npz, load_office_caltech10
from ..gaussian import GaussianMap, GaussianSummary
from ..selection import client_statistics, local_updates, score_candidates, validation_split
from ..summary import GaussianSummaryEstimator
from ..transformer import SLOTTransformer
from . import messages
from .config import DeploymentConfig

__all__ = ["ClientData", "app", "load_client_data"]

STATE = "skslot-client"


@dataclass(frozen=True, eq=False)
class ClientData:
    """One client's rows: its label, training and test split (float64)."""

    client: int | str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def _node_value(node_config: Mapping[str, Any], key: str, kind: type) -> Any:
    value = node_config[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"node config {key!r} must be {kind}, got {value!r}")
    return value


def load_client_data(
    node_config: Mapping[str, Any], config: DeploymentConfig, node_id: int = 0
) -> ClientData:
    """The rows a node holds, from its node config (see the module docstring).

    Examples
    --------
    >>> from skslot.flower import DeploymentConfig, load_client_data
    >>> data = load_client_data({"partition-id": 3}, DeploymentConfig(alpha=None))
    >>> data.client, data.X_train.shape[1]  # webcam, the 4th domain of Office-Caltech10
    (3, 800)
    """
    if "data" in node_config:
        with np.load(_node_value(node_config, "data", str), allow_pickle=False) as archive:
            X_train, y_train, X_test, y_test = (
                archive[key] for key in ("X_train", "y_train", "X_test", "y_test")
            )
        client = node_config.get("client-id", node_id)
        return ClientData(
            client, X_train.astype(np.float64), y_train, X_test.astype(np.float64), y_test
        )
    pid = _node_value(node_config, "partition-id", int)
    dataset = node_config.get("dataset", config.dataset)
    data = load_office_caltech10() if dataset == "office-caltech10" else load_npz(dataset)
    part = dirichlet_partition(
        data.y,
        data.domain,
        alpha=config.alpha,
        clients_per_domain=config.clients_per_domain,
        test_size=config.test_size,
        random_state=config.seed,
    )
    if not 0 <= pid < part.n_clients:
        raise ValueError(
            f"partition-id {pid} is out of range: {data.name} has {part.n_clients} clients"
        )
    train = part.train_index[part.train_client == pid]
    test = part.test_index[part.test_client == pid]
    X = data.X.astype(np.float64)
    return ClientData(pid, X[train], data.y[train], X[test], data.y[test])


def _data(context: Context) -> tuple[DeploymentConfig, ClientData]:
    config = DeploymentConfig.from_run_config(context.run_config)
    data = load_client_data(context.node_config, config, context.node_id)
    unknown = np.setdiff1d(np.concatenate([data.y_train, data.y_test]), config.class_set)
    if unknown.size:
        raise ValueError(
            f"labels {unknown.tolist()} are not in the run's class set {config.classes!r}"
        )
    return config, data


def _state(context: Context) -> Any:
    if STATE not in context.state.config_records:
        raise RuntimeError("this node has no summary of this run (no upload stage ran here)")
    return context.state.config_records[STATE]


def _split(config: DeploymentConfig, data: ClientData, index: int) -> tuple | None:
    """This client's (fitting, validation) rows when tau is chosen by validation."""
    if not config.auto:
        return None
    seed = spawn_seeds(config.seed, index + 1)[-1]
    return validation_split(data.y_train, config.validation_fraction, seed)


def _transport(context: Context, reference: bytes | None) -> GaussianMap:
    """This client's full map onto the reference (stored on first receipt)."""
    state = _state(context)
    if reference is not None:
        state["reference"] = reference
    if "reference" not in state:
        raise RuntimeError("this node has not received the reference of this run")
    own = GaussianSummary.from_bytes(state["summary"])
    received = GaussianSummary.from_bytes(state["reference"], expected_dimension=own.dimension)
    return SLOTTransformer.from_reference(received, own).maps_[own.client]


app = ClientApp()


@app.query("upload")
def upload(message: Message, context: Context) -> Message:
    """Send the summary of the training rows and, for FedCGS and FedPFT, their statistics.

    The summary is released once per run: a repeated request gets the same
    bytes (for a private summary, no fresh noise to average out).
    """
    dtype, index = messages.read_upload_request(message)
    config, data = _data(context)
    if STATE in context.state.config_records:
        payload = _state(context)["summary"]
    else:
        private = config.epsilon is not None
        own = GaussianSummaryEstimator(
            epsilon=config.epsilon,
            delta=config.delta,
            clip_norm=config.clip_norm if private else None,
        ).fit(data.X_train, client=data.client)
        payload = own.summaries_[data.client].to_bytes(dtype)
    context.state[STATE] = ConfigRecord({"summary": payload, "client-index": index})
    split = _split(config, data, index)
    head = DEFAULT_HEADS[config.head](config.seed)
    fitting = validation = None
    if head.aligns_statistics:
        fitting, validation = client_statistics(
            head, data.X_train, data.y_train, config.class_set, split, client_index=index
        )
    return messages.upload_reply(
        message,
        payload,
        n_fit=data.y_train.shape[0] if split is None else split[0].shape[0],
        n_test=data.y_test.shape[0],
        statistics=None if fitting is None else fitting.to_arrays(),
        validation=None if validation is None else validation.to_arrays(),
    )


@app.train("updates")
def updates(message: Message, context: Context) -> Message:
    """O-FedAvg: one local head per requested tau, on aligned fitting (or all) rows."""
    reference, taus, part = messages.read_updates_request(message)
    config, data = _data(context)
    transport = _transport(context, reference)
    index = _state(context)["client-index"]
    split = _split(config, data, index)
    rows = split[0] if part == "fit" and split is not None else slice(None)
    head = DEFAULT_HEADS[config.head](config.seed)
    local = local_updates(
        head,
        data.X_train[rows],
        data.y_train[rows],
        config.class_set,
        transport,
        taus,
        client_index=index,
    )
    return messages.updates_reply(message, [u.to_arrays() for u in local])


@app.query("validation")
def validation(message: Message, context: Context) -> Message:
    """Count each candidate head's correct predictions on the aligned validation rows."""
    config, data = _data(context)
    reference, heads, taus = messages.read_validation_request(
        message, config.class_set, data.X_train.shape[1]
    )
    transport = _transport(context, reference)
    split = _split(config, data, _state(context)["client-index"])
    if split is None:
        raise RuntimeError("validation was requested, but this run's tau is not 'auto'")
    rows = split[1]
    counts = score_candidates(
        heads, taus, transport, data.X_train[rows], data.y_train[rows], config.class_set
    )
    return messages.validation_reply(message, counts.to_arrays())


@app.evaluate("head")
def evaluate(message: Message, context: Context) -> Message:
    """Predict the local test split, aligned at the run's tau, with the global head."""
    config, data = _data(context)
    reference, head, tau = messages.read_head_request(
        message, config.class_set, data.X_train.shape[1]
    )
    transport = _transport(context, reference)
    predictions = head.predict(transport.geodesic(tau).apply(data.X_test))
    n_correct = int(np.sum(predictions == data.y_test))
    return messages.evaluation_reply(message, n_correct, int(data.y_test.shape[0]))
