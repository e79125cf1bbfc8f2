"""One-shot federated learning heads: each fits in one round of client statistics."""

from ..wire import StatisticsFormatError, message_bytes
from ._base import OneShotHead
from ._fitting import candidate_heads, head_without, local_heads, refit_head, statistics_of_parts
from ._linear_scores import UNSCORED, LinearScores
from ._mixtures import ClassMixture, ClassMixtures
from ._registry import HEADS, head_class, make_head
from ._statistics import ClassStatistics
from .fedavg import LinearHeadUpdate, OneShotFedAvgClassifier
from .fedcgs import FedCGSClassifier
from .fedpft import FedPFTClassifier

__all__ = [
    "HEADS",
    "UNSCORED",
    "ClassMixture",
    "ClassMixtures",
    "ClassStatistics",
    "FedCGSClassifier",
    "FedPFTClassifier",
    "LinearHeadUpdate",
    "LinearScores",
    "OneShotFedAvgClassifier",
    "OneShotHead",
    "StatisticsFormatError",
    "candidate_heads",
    "head_class",
    "head_without",
    "local_heads",
    "make_head",
    "message_bytes",
    "refit_head",
    "statistics_of_parts",
]
