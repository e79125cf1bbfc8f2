"""Renamed public names keep working, with a warning naming the new one."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from skslot import BuresBarycenter, GaussianSummary
from skslot.defence import DefenceBounds
from skslot.heads import FedCGSClassifier, OneShotFedAvgClassifier
from skslot.protocol import ClientParty, OneShotProtocol


@pytest.mark.parametrize(
    ("module", "old", "new_module", "new"),
    [
        ("skslot.selection", "ValidationCounts", "skslot.protocol.stages.validation", None),
        ("skslot.selection", "score_candidates", "skslot.protocol.stages.validation", None),
        ("skslot.selection", "candidate_heads", "skslot.heads", None),
        ("skslot.selection", "refit_head", "skslot.heads", None),
        ("skslot.selection", "local_updates", "skslot.heads", "local_heads"),
        ("skslot.selection", "client_statistics", "skslot.heads", "statistics_of_parts"),
        ("skslot.screening", "PairedCounts", "skslot.protocol.stages.screening", None),
        ("skslot.screening", "paired_counts", "skslot.protocol.stages.screening", None),
        ("skslot.defence", "inconsistent_statistics", "skslot.protocol.stages.upload", None),
        ("skslot.defence", "inconsistent_parts", "skslot.protocol.stages.upload", None),
        ("skslot.wire", "ProtocolError", "skslot.wire", "MessageFormatError"),
    ],
)
def test_a_moved_name_warns_and_is_the_new_one(module, old, new_module, new):
    with pytest.warns(DeprecationWarning, match=new or new_module):
        found = getattr(importlib.import_module(module), old)
    assert found is getattr(importlib.import_module(new_module), new or old)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("DeploymentError", "ProtocolRunError"),
        ("DeploymentReport", "ProtocolReport"),
        ("ProtocolError", "MessageFormatError"),
    ],
)
def test_the_flower_package_s_aliases_warn(old, new):
    flower = importlib.import_module("skslot.flower")
    with pytest.warns(DeprecationWarning, match=new):
        found = getattr(flower, old)
    assert found.__name__ == new


def test_renamed_methods_and_arguments_warn():
    summaries = [GaussianSummary(10, np.full(2, k), np.eye(2) * (k + 1)) for k in range(3)]
    bary = BuresBarycenter().fit(summaries)
    with pytest.warns(DeprecationWarning, match="BuresBarycenter.maps"):
        old = bary.transport_maps()
    assert old.keys() == bary.maps().keys()
    with pytest.warns(DeprecationWarning, match="check_summaries"):
        rejected, weights = DefenceBounds().screen(summaries)
    assert rejected == {} and weights.tolist() == [10.0, 10.0, 10.0]
    with pytest.warns(DeprecationWarning, match=r"use \.strategy"):
        assert FedCGSClassifier().protocol is FedCGSClassifier.strategy
    assert OneShotFedAvgClassifier.strategy.trains_locally
    party = ClientParty(np.eye(3), np.arange(3), head=FedCGSClassifier(), classes=np.arange(3))
    with pytest.raises(RuntimeError, match="no summary"), pytest.warns(
        DeprecationWarning, match="full_map"
    ):
        party.transport_map()
    with pytest.warns(DeprecationWarning, match="selection_rule"):
        protocol = OneShotProtocol(FedCGSClassifier(), tau="auto", rule="best")
    assert protocol.selection_rule == "best"
