"""skslot: SLOT-Align for scikit-learn and federated deployments.

Training-free alignment of per-client features to a shared Gaussian reference
(Bures-Wasserstein barycenter) by partial optimal transport, in front of any
one-shot federated learning head.
"""

from .barycenter import BuresBarycenter
from .baselines import ClientStandardScaler
from .exceptions import (
    InvalidSummaryError,
    SingleClientWarning,
    SmallClientWarning,
    UnknownClientWarning,
)
from .gaussian import GaussianSummary
from .maps import GaussianMap
from .summary import GaussianSummaryEstimator
from .tau_search import FederatedTauSearch
from .transformer import SLOTTransformer
from .wire import SummaryFormatError

__all__ = [
    "BuresBarycenter",
    "ClientStandardScaler",
    "FederatedTauSearch",
    "GaussianMap",
    "GaussianSummary",
    "GaussianSummaryEstimator",
    "InvalidSummaryError",
    "SLOTTransformer",
    "SingleClientWarning",
    "SmallClientWarning",
    "SummaryFormatError",
    "UnknownClientWarning",
]

__version__ = "0.1.0"
