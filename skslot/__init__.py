"""skslot: SLOT-Align for scikit-learn and federated deployments.

Training-free alignment of per-client features to a shared Gaussian reference
(Bures-Wasserstein barycenter) by partial optimal transport, in front of any
one-shot federated learning head.

The public names are imported on first use (PEP 562), so that ``import
skslot`` stays cheap for command-line entry points and Flower processes that
need only part of the library; ``from skslot import SLOTTransformer`` works as
usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .barycenter import BuresBarycenter
    from .baselines import ClientStandardScaler
    from .exceptions import (
        ClassCoverageWarning,
        InvalidSummaryError,
        SingleClientWarning,
        SmallClientWarning,
        UnknownClientWarning,
    )
    from .gaussian import GaussianSummary
    from .label_mix import ClientPriorClassifier
    from .maps import GaussianMap
    from .pipeline import make_slot_pipeline
    from .summary import GaussianSummaryEstimator
    from .tau_search import FederatedTauSearch
    from .transformer import SLOTTransformer
    from .wire import SummaryFormatError

# public name -> the submodule that defines it
_SUBMODULE_OF = {
    "BuresBarycenter": "barycenter",
    "ClassCoverageWarning": "exceptions",
    "ClientPriorClassifier": "label_mix",
    "ClientStandardScaler": "baselines",
    "FederatedTauSearch": "tau_search",
    "GaussianMap": "maps",
    "GaussianSummary": "gaussian",
    "GaussianSummaryEstimator": "summary",
    "InvalidSummaryError": "exceptions",
    "SLOTTransformer": "transformer",
    "SingleClientWarning": "exceptions",
    "SmallClientWarning": "exceptions",
    "SummaryFormatError": "wire",
    "UnknownClientWarning": "exceptions",
    "make_slot_pipeline": "pipeline",
}

__all__ = [
    "BuresBarycenter",
    "ClassCoverageWarning",
    "ClientPriorClassifier",
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
    "make_slot_pipeline",
]

__version__ = "0.2.0"


def __getattr__(name: str) -> object:
    try:
        submodule = _SUBMODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module 'skslot' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{submodule}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names and the module's dunders (not its own imports)."""
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__")})
