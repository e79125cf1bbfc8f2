"""The client side of the one-shot protocol, as a Flower ``ClientApp``.

Each handler decodes one stage's request (see :mod:`skslot.flower.messages`),
answers it with the protocol's own client, :class:`skslot.protocol.ClientParty`
(the same object :class:`~skslot.FederatedTauSearch` runs in process), and
encodes the reply.  The summary exactly as the server decoded it and the
reference are kept in the run's ``context.state`` (they never leave the node
again), so every stage uses the same map.

A node's data comes from its *node config* (``flower-supernode --node-config``):

- ``partition-id`` and optionally ``dataset`` (``"digits"``,
  ``"office-caltech10"`` or a multi-domain file, as
  :func:`skslot.datasets.load_dataset` reads; default: the run config's
  ``dataset``): this node is client ``partition-id`` of the paper's partition
  with the run's ``alpha`` and ``seed``; or
- ``data``: the node's own rows, either an ``.npz`` with ``X_train``,
  ``y_train``, ``X_test``, ``y_test``, or a table (``.csv``, ``.parquet`` or
  ``.npz`` with ``X``, ``y``, ``domain``) read by
  :func:`skslot.datasets.load_table` with the node config's ``label`` (the
  label column, default ``"label"``), ``features`` (comma-separated columns or
  a prefix; default: every other numeric column) and ``split`` (a train/test
  column; without one, a stratified ``test-size`` share of each class is
  held out with the run's ``seed``).  Labels must be in the run's class set
  (:attr:`~skslot.flower.DeploymentConfig.classes`: class names, or integer
  labels).  ``client-id`` (an int or a string) names this client; default:
  the Flower node id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from ..datasets import dirichlet_partition, load_dataset, load_table
from ..datasets._loaders import open_npz
from ..gaussian import GaussianSummary
from ..protocol import (
    ClientParty,
    ClientState,
    EvaluationRequest,
    ScreeningRequest,
    UpdatesRequest,
    UploadRequest,
    ValidationRequest,
)
from ..selection import validation_split
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
    >>> config = DeploymentConfig(alpha=None, dataset="office-caltech10")
    >>> data = load_client_data({"partition-id": 3}, config)
    >>> data.client, data.X_train.shape[1]  # webcam, the 4th domain of Office-Caltech10
    (3, 800)
    """
    if "data" in node_config:
        path = _node_value(node_config, "data", str)
        client = node_config.get("client-id", node_id)
        if _is_split_archive(path):
            with np.load(path, allow_pickle=False) as archive:
                X_train, y_train, X_test, y_test = (
                    archive[key] for key in ("X_train", "y_train", "X_test", "y_test")
                )
            return ClientData(
                client, X_train.astype(np.float64), y_train, X_test.astype(np.float64), y_test
            )
        return _own_table(path, node_config, config, client)
    pid = _node_value(node_config, "partition-id", int)
    data = load_dataset(node_config.get("dataset", config.dataset))
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


def _is_split_archive(path: str) -> bool:
    """Whether ``path`` is an ``.npz`` of one client's split (``X_train``, ``y_train``, ...)."""
    if not path.lower().endswith(".npz"):
        return False
    with open_npz(path) as archive:
        return "X_train" in archive.files


def _own_table(
    path: str, node_config: Mapping[str, Any], config: DeploymentConfig, client: int | str
) -> ClientData:
    """A node's own table: its label, features and split columns from the node config."""
    features = node_config.get("features")
    if isinstance(features, str) and "," in features:
        features = [name.strip() for name in features.split(",")]
    table = load_table(
        path,
        label=node_config.get("label", "label"),
        features=features,
        split=node_config.get("split"),
    )
    y = config.label_codes(table.classes[table.y], where=path)
    if table.is_test is not None:
        test = table.is_test
    else:
        test = np.zeros(y.shape[0], dtype=bool)
        _, held_out = validation_split(y, config.test_size, config.seed)
        test[held_out] = True
    return ClientData(client, table.X[~test], y[~test], table.X[test], y[test])


def _data(context: Context) -> tuple[DeploymentConfig, ClientData]:
    config = DeploymentConfig.from_run_config(context.run_config)
    data = load_client_data(context.node_config, config, context.node_id)
    unknown = np.setdiff1d(np.concatenate([data.y_train, data.y_test]), config.class_set)
    if unknown.size:
        raise ValueError(
            f"labels {unknown.tolist()} are not in the run's class set {config.classes!r}"
        )
    return config, data


def _party(
    context: Context,
    config: DeploymentConfig,
    data: ClientData,
    reference: bytes | None = None,
) -> ClientParty:
    """This node as a party of the protocol: its rows and its state of this run.

    ``reference``, when the request carries it, is stored in the run's state
    first (it travels once per build of the reference, replacing an earlier one).
    """
    state = ClientState()
    if STATE in context.state.config_records:
        stored = context.state.config_records[STATE]
        if reference is not None:
            stored["reference"] = reference
        state.summary = GaussianSummary.from_bytes(stored["summary"])
        state.client_index = stored["client-index"]
        seed = stored["split-seed"]
        state.split_seed = None if seed < 0 else seed
        state.mean_tau = config.mean_tau
        if "reference" in stored:
            state.reference = GaussianSummary.from_bytes(
                stored["reference"], expected_dimension=state.summary.dimension
            )
    elif reference is not None:
        raise RuntimeError("this node has no summary of this run (no upload stage ran here)")
    return ClientParty(
        data.X_train,
        data.y_train,
        head=config.make_head(),
        classes=config.class_set,
        label=data.client,
        X_test=data.X_test,
        y_test=data.y_test,
        summary_estimator=config.summary_estimator(),
        validation_fraction=config.validation_fraction,
        state=state,
    )


app = ClientApp()


@app.query("upload")
def upload(message: Message, context: Context) -> Message:
    """Send the summary of the training rows and what the head uploads with it.

    The summary is released once per run: a repeated request gets the same
    bytes (for a private summary, no fresh noise to average out).
    """
    dtype, index, split_seed, counts = messages.read_upload_request(message)
    config, data = _data(context)
    party = _party(context, config, data)
    reply = party.upload(
        UploadRequest(
            index,
            split_seed,
            class_counts=counts,
            summary_covariance=config.summary_covariance,
            covariance_floor=config.summary_estimator().covariance_floor,
            mean_tau=config.mean_tau,
        )
    )
    if reply.summary is None:  # derived from the statistics, in float64 as the server does
        payload = party.state.summary.to_bytes("float64")
    elif STATE in context.state.config_records:
        payload = context.state.config_records[STATE]["summary"]
    else:
        payload = reply.summary.to_bytes(dtype)
    context.state[STATE] = ConfigRecord(
        {
            "summary": payload,
            "client-index": index,
            "split-seed": -1 if split_seed is None else split_seed,
        }
    )
    return messages.upload_reply(
        message,
        None if reply.summary is None else payload,
        n_fit=reply.n_fit,
        n_test=reply.n_test,
        n_validation=reply.n_validation,
        statistics=None if reply.statistics is None else reply.statistics.to_arrays(),
        validation=None if reply.validation is None else reply.validation.to_arrays(),
        class_counts=reply.class_counts,
        shrinkage=reply.shrinkage,
        label=reply.label,
        dimension=None if reply.summary is not None else int(data.X_train.shape[1]),
    )


@app.train("updates")
def updates(message: Message, context: Context) -> Message:
    """Local heads trained on aligned rows: one per requested tau (O-FedAvg)."""
    reference, taus, part = messages.read_updates_request(message)
    config, data = _data(context)
    party = _party(context, config, data, reference)
    local = party.updates(UpdatesRequest(None, tuple(taus), part))
    return messages.updates_reply(message, [u.to_arrays() for u in local])


@app.query("validation")
def validation(message: Message, context: Context) -> Message:
    """Count each candidate head's correct predictions on the aligned validation rows."""
    config, data = _data(context)
    reference, heads, taus = messages.read_validation_request(
        message, config.class_set, data.X_train.shape[1]
    )
    party = _party(context, config, data, reference)
    counts = party.validate(ValidationRequest(None, tuple(heads), tuple(taus)))
    return messages.validation_reply(message, counts.to_arrays())


@app.query("screening")
def screening(message: Message, context: Context) -> Message:
    """Compare the chosen head with each head without one other client, on the validation rows."""
    config, data = _data(context)
    reference, full, left_out, masks, tau = messages.read_screening_request(
        message, config.class_set, data.X_train.shape[1]
    )
    party = _party(context, config, data, reference)
    counts = party.compare(ScreeningRequest(None, full, tuple(left_out), masks, tau))
    return messages.screening_reply(message, counts.to_arrays())


@app.evaluate("head")
def evaluate(message: Message, context: Context) -> Message:
    """Predict the local test split, aligned at the run's tau, with the global head."""
    config, data = _data(context)
    reference, head, tau = messages.read_head_request(
        message, config.class_set, data.X_train.shape[1]
    )
    result = _party(context, config, data, reference).evaluate(EvaluationRequest(None, head, tau))
    return messages.evaluation_reply(message, result.n_correct, result.n_test)
