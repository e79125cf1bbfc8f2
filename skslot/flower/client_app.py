"""The client side of the one-shot protocol, as a Flower ``ClientApp``.

Each handler answers one stage (see :mod:`skslot.flower.messages`) with the
library's own objects: :class:`~skslot.GaussianSummaryEstimator` for the
summary, :meth:`~skslot.SLOTTransformer.from_reference` for the map, the
head's :meth:`~skslot.heads.OneShotHead.client_statistics` for the upload.
The summary exactly as the server decoded it and the reference are kept in
the run's ``context.state`` (they never leave the node again), so every stage
uses the same map.

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

from ..bench import DEFAULT_HEADS
from ..datasets import dirichlet_partition, load_npz, load_office_caltech10
from ..gaussian import GaussianSummary
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
    return config, load_client_data(context.node_config, config, context.node_id)


def _state(context: Context) -> Any:
    if STATE not in context.state.config_records:
        raise RuntimeError("this node has no summary of this run (stage 1 did not run here)")
    return context.state.config_records[STATE]


def _aligner(context: Context) -> SLOTTransformer:
    """This client's map ``T_k^tau``, from its stored summary and the reference."""
    state = _state(context)
    if "reference" not in state:
        raise RuntimeError("this node has no reference of this run (stage 2 did not run here)")
    own = GaussianSummary.from_bytes(state["summary"])
    reference = GaussianSummary.from_bytes(state["reference"], expected_dimension=own.dimension)
    return SLOTTransformer.from_reference(reference, own, tau=state["tau"])


app = ClientApp()


@app.query("summary")
def summary(message: Message, context: Context) -> Message:
    """Stage 1: send the Ledoit-Wolf summary of the training features."""
    dtype = messages.read_summary_request(message)
    config, data = _data(context)
    private = config.epsilon is not None
    own = GaussianSummaryEstimator(
        epsilon=config.epsilon,
        delta=config.delta,
        clip_norm=config.clip_norm if private else None,
    ).fit(data.X_train, client=data.client)
    payload = own.summaries_[data.client].to_bytes(dtype)
    context.state[STATE] = ConfigRecord({"summary": payload})
    return messages.summary_reply(message, payload, np.unique(data.y_train))


@app.train("statistics")
def statistics(message: Message, context: Context) -> Message:
    """Stage 2: align the training features, send the head's statistics."""
    reference, tau, classes, client_index = messages.read_statistics_request(message)
    config, data = _data(context)
    state = _state(context)
    context.state[STATE] = ConfigRecord(
        {"summary": state["summary"], "reference": reference, "tau": tau}
    )
    Z = _aligner(context).transform(data.X_train)
    head = DEFAULT_HEADS[config.head](config.seed)
    stats = head.client_statistics(Z, data.y_train, classes, client_index=client_index)
    return messages.statistics_reply(message, stats.to_arrays())


@app.evaluate("head")
def evaluate(message: Message, context: Context) -> Message:
    """Stage 3: predict the local test split with the global head."""
    _, data = _data(context)
    aligner = _aligner(context)
    head = messages.read_head_request(message, n_features=aligner.n_features_in_)
    predictions = head.predict(aligner.transform(data.X_test))
    n_correct = int(np.sum(predictions == data.y_test))
    return messages.evaluation_reply(message, n_correct, int(data.y_test.shape[0]))
