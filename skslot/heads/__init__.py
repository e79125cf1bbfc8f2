"""One-shot federated learning heads: each fits in one round of client statistics."""

from ._base import OneShotHead
from ._statistics import ClassStatistics
from ._wire import LinearScores, StatisticsFormatError, message_bytes
from .fedavg import LinearHeadUpdate, OneShotFedAvgClassifier
from .fedcgs import FedCGSClassifier
from .fedpft import ClassMixture, ClassMixtures, FedPFTClassifier
from ._registry import HEADS, head_class, make_head

__all__ = [
    "ClassMixture",
    "ClassMixtures",
    "ClassStatistics",
    "FedCGSClassifier",
    "FedPFTClassifier",
    "HEADS",
    "LinearHeadUpdate",
    "LinearScores",
    "OneShotFedAvgClassifier",
    "OneShotHead",
    "StatisticsFormatError",
    "head_class",
    "make_head",
    "message_bytes",
]
