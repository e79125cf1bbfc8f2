"""skslot: SLOT-Align for scikit-learn and federated deployments.

Training-free alignment of per-client features to a shared Gaussian reference
(Bures-Wasserstein barycenter) by partial optimal transport, in front of any
one-shot federated learning head.
"""

from .barycenter import BuresBarycenter, SingleClientWarning
from .baselines import ClientStandardScaler
from .gaussian import GaussianMap, GaussianSummary, SummaryFormatError
from .summary import GaussianSummaryEstimator
from .tau_search import FederatedTauSearch
from .transformer import SLOTTransformer

__all__ = [
    "BuresBarycenter",
    "ClientStandardScaler",
    "FederatedTauSearch",
    "GaussianMap",
    "GaussianSummary",
    "GaussianSummaryEstimator",
    "SLOTTransformer",
    "SingleClientWarning",
    "SummaryFormatError",
]

__version__ = "0.1.0"
