"""The one-shot protocol, written once: its driver, its stages, its clients and transports.

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

from .client import ClientParty
from .driver import OneShotProtocol, ProtocolResult, held_out_rows
from .in_process import InProcessTransport
from .parameters import private_run_problem
from .party import ClientState
from .report import ProtocolReport, ProtocolRunError
from .roster import Member, Roster
from .stages import STAGES, ClientWire, ServerWire, Stage
from .stages.evaluation import Evaluation, EvaluationRequest
from .stages.reference import FixedReference, Reference, ReferenceStep
from .stages.screening import PairedCounts, ScreeningRequest
from .stages.updates import UpdatesRequest
from .stages.upload import Upload, UploadRequest
from .stages.validation import ValidationCounts, ValidationRequest
from .state import RunState
from .transport import Exchange, Transport

__all__ = [
    "STAGES",
    "ClientParty",
    "ClientState",
    "ClientWire",
    "Evaluation",
    "EvaluationRequest",
    "Exchange",
    "FixedReference",
    "InProcessTransport",
    "Member",
    "OneShotProtocol",
    "PairedCounts",
    "ProtocolReport",
    "ProtocolResult",
    "ProtocolRunError",
    "Reference",
    "ReferenceStep",
    "Roster",
    "RunState",
    "ScreeningRequest",
    "ServerWire",
    "Stage",
    "Transport",
    "UpdatesRequest",
    "Upload",
    "UploadRequest",
    "ValidationCounts",
    "ValidationRequest",
    "held_out_rows",
    "private_run_problem",
]
