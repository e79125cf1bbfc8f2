"""The one-shot protocol, written once: its driver, its client side and its transports.

* :class:`OneShotProtocol` (:mod:`~skslot.protocol.driver`): the stage order;
* :class:`ClientParty` (:mod:`~skslot.protocol.client`): what a client runs at
  each stage, the same objects in process and in the Flower ``ClientApp``;
* :class:`InProcessTransport`: clients as objects in this process; the Flower
  transport (:mod:`skslot.flower.transport`) moves the same requests and
  replies over a Flower ``Grid``;
* :mod:`~skslot.protocol.intake`: the checks that tie each client's messages
  together; :mod:`~skslot.protocol.reference`: the server's reference step;
  :class:`ProtocolReport`: what happened, per client and stage.

Examples
--------
>>> import numpy as np
>>> from skslot.datasets import make_federated_classification
>>> from skslot.heads import FedCGSClassifier
>>> from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol
>>> data = make_federated_classification(n_clients=3, alpha=0.5, random_state=0)
>>> classes = np.unique(data.y)
>>> head = FedCGSClassifier()
>>> parties = {
...     k: ClientParty(data.X[data.client == k], data.y[data.client == k], head=head,
...                    classes=classes, label=k)
...     for k in range(3)
... }
>>> result = OneShotProtocol(head, tau=0.4, evaluate=False).run(
...     InProcessTransport(parties), classes)
>>> result.stages, result.tau
(['upload'], 0.4)
"""

from .client import ClientParty, ClientState
from .driver import OneShotProtocol, ProtocolResult, Transport, held_out_rows
from .exchanges import (
    STAGES,
    Evaluation,
    EvaluationRequest,
    Exchange,
    ScreeningRequest,
    UpdatesRequest,
    Upload,
    UploadRequest,
    ValidationRequest,
)
from .in_process import InProcessTransport
from .reference import FixedReference, Reference, ReferenceStep
from .report import ProtocolReport, ProtocolRunError

__all__ = [
    "STAGES",
    "ClientParty",
    "ClientState",
    "Evaluation",
    "EvaluationRequest",
    "Exchange",
    "FixedReference",
    "InProcessTransport",
    "OneShotProtocol",
    "ProtocolReport",
    "ProtocolResult",
    "ProtocolRunError",
    "Reference",
    "ReferenceStep",
    "ScreeningRequest",
    "Transport",
    "UpdatesRequest",
    "Upload",
    "UploadRequest",
    "ValidationRequest",
    "held_out_rows",
]
