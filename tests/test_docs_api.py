"""The API reference (docs/api.rst) lists every public name of every public module."""

import importlib
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[1] / "docs" / "api.rst"
MODULES = [
    "skslot",
    "skslot.barycenter",
    "skslot.baselines",
    "skslot.bench",
    "skslot.datasets",
    "skslot.defence",
    "skslot.exceptions",
    "skslot.flower",
    "skslot.gaussian",
    "skslot.heads",
    "skslot.label_shift",
    "skslot.maps",
    "skslot.privacy",
    "skslot.protocol",
    "skslot.selection",
    "skslot.summary",
    "skslot.tau_search",
    "skslot.transformer",
    "skslot.wire",
]


def documented_names() -> set[str]:
    """``module.name`` for every autosummary entry, resolved against its currentmodule."""
    names, current = set(), None
    for line in API.read_text().splitlines():
        if match := re.match(r"\.\. currentmodule:: ([\w.]+)", line):
            current = match.group(1)
        elif (match := re.match(r"^ {3}([\w.]+)$", line)) and current:
            names.add(f"{current}.{match.group(1)}")
    return names


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_the_api_reference(module):
    documented = documented_names()
    public = importlib.import_module(module).__all__
    # documented under this module, or under the module that re-exports it
    missing = [
        name
        for name in public
        if f"{module}.{name}" not in documented
        and not any(entry.endswith(f".{name}") for entry in documented)
    ]
    assert not missing, f"{module}: {missing} are missing from docs/api.rst"


@pytest.mark.parametrize(
    "name",
    [
        "skslot.BuresBarycenter",
        "skslot.ClientStandardScaler",
        "skslot.FederatedTauSearch",
        "skslot.GaussianSummaryEstimator",
        "skslot.SLOTTransformer",
        "skslot.heads.FedCGSClassifier",
        "skslot.heads.FedPFTClassifier",
        "skslot.heads.OneShotFedAvgClassifier",
    ],
)
def test_html_repr_links_to_the_estimators_api_page(name):
    """The "?" of the HTML repr opens the estimator's page of the docs site's API reference."""
    from skslot._doc_link import DOCS_URL
    from skslot.heads import FedCGSClassifier

    module, _, cls_name = name.rpartition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    estimator = cls(FedCGSClassifier()) if cls_name == "FederatedTauSearch" else cls()
    assert name in documented_names()
    assert estimator._get_doc_link() == f"{DOCS_URL}generated/{name}.html"
    assert f'href="{DOCS_URL}generated/{name}.html"' in estimator._repr_html_()
