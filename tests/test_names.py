"""Each public name has one import path: no alias, renamed method or argument is served."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from skslot_bench import BenchmarkConfig

from skslot import BuresBarycenter, GaussianSummary
from skslot.defence import DefenceBounds
from skslot.heads import FedCGSClassifier
from skslot.protocol import ClientParty, OneShotProtocol
from skslot.tau_search import FederatedTauSearch


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("skslot.selection", "ValidationCounts"),
        ("skslot.selection", "local_updates"),
        ("skslot.defence.screening", "paired_counts"),
        ("skslot.defence", "inconsistent_statistics"),
        ("skslot.gaussian", "GaussianMap"),
        ("skslot.gaussian", "bures_wasserstein_distance"),
        ("skslot.gaussian", "SummaryFormatError"),
        ("skslot.wire", "ProtocolError"),
        ("skslot.flower", "DeploymentError"),
        ("skslot.flower", "DeploymentReport"),
    ],
)
def test_a_name_lives_in_one_module(module, name):
    with pytest.raises(AttributeError, match=name):
        getattr(importlib.import_module(module), name)


def test_methods_and_arguments_have_one_name():
    summaries = [GaussianSummary(10, np.full(2, k), np.eye(2) * (k + 1)) for k in range(3)]
    assert not hasattr(BuresBarycenter().fit(summaries), "transport_maps")
    assert not hasattr(DefenceBounds(), "screen")
    assert not hasattr(FedCGSClassifier(), "protocol")
    assert not hasattr(ClientParty, "transport_map")
    with pytest.raises(TypeError, match="rule"):
        OneShotProtocol(FedCGSClassifier(), tau="auto", rule="best")
    with pytest.raises(TypeError, match="rule"):
        FederatedTauSearch(FedCGSClassifier(), rule="best")
    with pytest.raises(TypeError, match="covariance"):
        BenchmarkConfig(covariance="within")
