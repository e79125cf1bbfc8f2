"""The client side of the one-shot protocol, as a Flower ``ClientApp``.

A thin entry point: each message type's handler decodes the request with its
stage's codec (:data:`skslot.protocol.stages.STAGES`), answers it with the
stage's client step on :class:`skslot.protocol.ClientParty` (the same step
the in-process transport calls), and encodes the reply.  The party's state of
the run (its summary exactly as the server decoded it, the reference) is kept
in the run's ``context.state`` (it never leaves the node again), so every
stage uses the same map.

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
  column; default: the table's ``split`` column if it has one; without one,
  a stratified ``test-size`` share of each class is held out with the run's
  ``seed``).  Labels must be in the run's class set
  (:attr:`~skslot.flower.ProtocolSettings.classes`: class names, or integer
  labels); a private node names none of its labels outside it to the server
  (its rows with one enter as null rows,
  :func:`~skslot.privacy.null_rows`).
  ``client-id`` (an int or a string) names this client; default: the Flower
  node id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message
from flwr.app.typing import ConfigRecordValues
from flwr.clientapp import ClientApp

from ..datasets import dirichlet_partition, load_dataset, load_table
from ..datasets._loaders import open_npz
from ..datasets._tables import DEFAULT_SPLIT_COLUMN, table_columns, table_kind
from ..defaults import DELTA, LIFETIME_DELTA
from ..privacy import LifetimeBudget, PrivacyBudget, refusal
from ..protocol import ClientParty, ClientState
from ..protocol.stages import STAGES, Stage
from ..selection import validation_split
from . import messages
from .config import DeploymentConfig

#: The node's own log (the SuperNode's output): nothing logged here reaches the server.
logger = logging.getLogger("skslot.flower.client")

__all__ = ["HANDLERS", "ClientData", "app", "load_client_data", "node_privacy", "reply_seconds"]

STATE = "skslot-client"


@dataclass(frozen=True, eq=False)
class ClientData:
    """One client's rows: its label, training and test split (float64).

    Parameters
    ----------
    client : int or str
        The client's label: its ``partition-id``, or its node config's
        ``client-id`` (default: the Flower node id).
    X_train, y_train : ndarray
        The training rows and their labels.
    X_test, y_test : ndarray
        The test rows and their labels.
    source : str, default="its own rows"
        What the node read, as its upload reply tells the server (no path,
        nothing that depends on the rows).
    """

    client: int | str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    source: str = "its own rows"


def _node_value(node_config: Mapping[str, Any], key: str, kind: type) -> Any:
    value = node_config[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"node config {key!r} must be {kind}, got {value!r}")
    return value


def load_client_data(
    node_config: Mapping[str, Any], config: DeploymentConfig, node_id: int = 0
) -> ClientData:
    """The rows a node holds, from its node config (see the module docstring).

    Parameters
    ----------
    node_config : mapping of str to value
        The node's config: ``partition-id`` (and ``dataset``), or ``data``
        (and ``client-id``, ``label``, ``features``, ``split``).
    config : DeploymentConfig
        The run's config: the partition's settings, the class set and the
        held-out share of a table without a split column.
    node_id : int, default=0
        The Flower node id, the client's label without ``client-id``.

    Returns
    -------
    ClientData

    Raises
    ------
    ValueError
        If a node config value has the wrong type, or ``partition-id`` is out
        of range.

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
        if path.lower().endswith(".npz"):
            with open_npz(path) as npz:
                if "X_train" in npz.files:  # one client's split: its train and test rows
                    X, X_test = (npz[k].astype(np.float64) for k in ("X_train", "X_test"))
                    source = "its own .npz of train and test rows"
                    return ClientData(client, X, npz["y_train"], X_test, npz["y_test"], source)
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
    skew = "no label skew" if config.alpha is None else f"Dirichlet alpha {config.alpha:g}"
    source = f"{messages.PARTITION} {pid} of {data.name} ({skew}, seed {config.seed})"
    return ClientData(pid, X[train], data.y[train], X[test], data.y[test], source)


def _own_table(
    path: str, node_config: Mapping[str, Any], config: DeploymentConfig, client: int | str
) -> ClientData:
    """A node's own table: its label, features and split columns from the node config."""
    features = node_config.get("features")
    if isinstance(features, str) and "," in features:
        features = [name.strip() for name in features.split(",")]
    split = node_config.get("split")
    if split is None and DEFAULT_SPLIT_COLUMN in table_columns(path):
        split = DEFAULT_SPLIT_COLUMN  # the table's own split, said in the node's log
        logger.info("skslot: %s: its %r column splits train and test", path, split)
    private = node_privacy(node_config, config) is not None
    table = load_table(  # a private node's values that are not finite: its null rows
        path,
        label=node_config.get("label", "label"),
        features=features,
        split=split,
        finite=not private,
    )
    # a private node's labels outside the class set are not named to anyone (see _party)
    y = config.label_codes(table.classes[table.y], where=path, outside=-1 if private else None)
    if table.is_test is not None:
        test, held = table.is_test, f"test rows from its {split!r} column"
    else:
        n, held = y.shape[0], f"test rows drawn ({config.test_size:g} of them, seed {config.seed})"
        test = np.zeros(n, dtype=bool)
        if private:
            # a private node's split must not depend on its labels (its sizes are public):
            # round(test_size * n) rows drawn by position alone
            order = np.random.default_rng(config.seed).permutation(n)
            test[order[: round(config.test_size * n)]] = True
        else:
            test[validation_split(y, config.test_size, config.seed)[1]] = True
    source = f"its own .{table_kind(path)} table, {held}"  # a .csv.gz is a .csv
    return ClientData(client, table.X[~test], y[~test], table.X[test], y[test], source)


def _party(
    context: Context, config: DeploymentConfig, privacy: PrivacyBudget | None
) -> tuple[ClientParty, ClientData]:
    """This node as a party of the protocol (its rows, its budget and its state of this run),
    and its data.

    A private node's rows with a label outside the class set, or a value that
    is not finite, are its party's null rows: nothing names them.
    """
    data = load_client_data(context.node_config, config, context.node_id)
    if privacy is None:
        unknown = np.setdiff1d(np.concatenate([data.y_train, data.y_test]), config.class_set)
        if unknown.size:
            raise ValueError(
                f"labels {unknown.tolist()} are not in the run's class set {config.classes!r}"
            )
    stored = context.state.config_records.get(STATE)
    party = ClientParty(
        data.X_train,
        data.y_train,
        head=config.make_head(),
        classes=config.class_set,
        label=data.client,
        X_test=data.X_test,
        y_test=data.y_test,
        summary_estimator=config.summary_estimator(),
        validation_fraction=config.validation_fraction,
        state=None if stored is None else ClientState.from_config(dict(stored)),
        privacy=privacy,
        lifetime=node_lifetime(context.node_config),
    )
    return party, data


def node_privacy(node_config: Mapping[str, Any], config: DeploymentConfig) -> PrivacyBudget | None:
    """The budget this node releases under: its own node config's, else the run's.

    A node that sets ``epsilon`` in its node config enforces that budget: it
    refuses a run under another, or without one.  Its ``delta`` defaults to
    ``1e-5`` (never the server's), its ``clip-norm`` to the run's (the bound
    does not change the guarantee, only which rows are clipped).

    Parameters
    ----------
    node_config : mapping of str to value
        The node's config (``flower-supernode --node-config``).
    config : DeploymentConfig
        The run's configuration.

    Returns
    -------
    PrivacyBudget or None
    """
    if "epsilon" not in node_config:
        return config.privacy_budget()
    try:
        return PrivacyBudget(
            float(node_config["epsilon"]),
            float(node_config.get("delta", DELTA)),
            float(node_config.get("clip-norm", config.clip_norm)),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"node config 'epsilon', 'delta', 'clip-norm': {exc}") from None


def node_lifetime(node_config: Mapping[str, Any]) -> LifetimeBudget | None:
    """The budget this node's runs release together, from its node config alone.

    ``lifetime-epsilon`` (and ``lifetime-delta``, default ``1e-4``) with
    ``budget-file``, the record on the node's disk
    (:class:`~skslot.privacy.LifetimeBudget`): each private run is charged
    once, and a run past it is refused before anything is released.  It
    needs the node's own ``epsilon``: a run's budget then never comes from
    the server.

    Parameters
    ----------
    node_config : mapping of str to value
        The node's config (``flower-supernode --node-config``).

    Returns
    -------
    LifetimeBudget or None
        ``None`` without ``lifetime-epsilon``.
    """
    if "lifetime-epsilon" not in node_config:
        return None
    if "budget-file" not in node_config or "epsilon" not in node_config:
        raise ValueError(
            "node config 'lifetime-epsilon' needs 'budget-file' (the record on this node's disk) "
            "and the node's own 'epsilon' (each run's budget)"
        )
    try:
        return LifetimeBudget(
            str(node_config["budget-file"]),
            float(node_config["lifetime-epsilon"]),
            float(node_config.get("lifetime-delta", LIFETIME_DELTA)),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"node config 'lifetime-epsilon', 'lifetime-delta': {exc}") from None


def reply_seconds(node_config: Mapping[str, Any]) -> float:
    """The node's ``reply-seconds``: no reply (nor error) leaves sooner after its message.

    How long a node takes to answer depends on its rows (their number, and
    for O-FedAvg how long its solver runs), and the server sees it; a node
    that sets ``reply-seconds`` above its slowest reply answers every message
    at that time, so its reply times tell the server nothing more (0, the
    default: as soon as it is done).

    Parameters
    ----------
    node_config : mapping of str to value
        The node's config (``flower-supernode --node-config``).

    Returns
    -------
    float
        Seconds, ``>= 0``.
    """
    value = node_config.get("reply-seconds", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"node config 'reply-seconds' must be a number >= 0, got {value!r}")
    return float(value)


def _handler(stage: Stage) -> Callable[[Message, Context], Message]:
    """The ``ClientApp`` handler of one message type: the party's side of the message
    (:meth:`~skslot.protocol.ClientParty.serve`: decode, the stage's client step, encode).

    The party's state of the run (its summary as the server decoded it, the
    reference once received) is kept in the run's ``context.state`` between
    messages, so every stage uses the same map.
    """

    def handle(message: Message, context: Context) -> Message:
        start = time.monotonic()
        party, answered = None, False
        try:
            config = DeploymentConfig.from_run_config(context.run_config)
            privacy = node_privacy(context.node_config, config)
            try:
                party, data = _party(context, config, privacy)
                content = messages.content(party.serve(stage.name, messages.received(message)))
                answered = True
            except Exception:
                if privacy is None:
                    raise
                # a private node's error could depend on its rows: its own log says what
                # failed, the server gets the one refusal
                logger.exception("skslot: this private node failed a %r request", stage.name)
                raise refusal(stage.name) from None
            finally:  # kept once answered; a private node keeps its seed and plan regardless
                if party is not None and (answered or privacy is not None):
                    kept: dict[str, ConfigRecordValues] = dict(party.state.to_config())
                    context.state[STATE] = ConfigRecord(kept)
            if stage.name == "upload":  # what this node read, for the run's report
                content[messages.SOURCE] = ConfigRecord({"source": data.source})
            return Message(content, reply_to=message)
        finally:  # a reply, or an error, no sooner than the node's reply-seconds
            time.sleep(max(0.0, start + reply_seconds(context.node_config) - time.monotonic()))

    handle.__doc__ = f"Answer the {stage.message_type!r} message: {stage.name} stage."
    return handle


app = ClientApp()

#: The handler of each message type ("updates" and "refit" share one: the first stage's).
HANDLERS: dict[str, Callable[[Message, Context], Message]] = {}
for _stage in STAGES.values():
    if _stage.message_type not in HANDLERS:
        HANDLERS[_stage.message_type] = _handler(_stage)
for _type, _handle in HANDLERS.items():
    _category, _, _action = _type.partition(".")
    getattr(app, _category)(_action)(_handle)
