"""Warnings about what the clients' data give a federation: one clear message per cause,
and none where it does not apply."""

import logging
import subprocess
import sys
import warnings

import numpy as np
import pytest

from skslot import ClassCoverageWarning, ClientPriorClassifier, SLOTTransformer, SmallClientWarning
from skslot.exceptions import lone_classes
from skslot.heads import FedCGSClassifier, FedPFTClassifier, OneShotFedAvgClassifier, make_head
from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol


def shops(n=30, m=4, seed=0):
    """Three shops: 'a' and 'b' hold classes 0 and 1, 'c' holds 0, 1 and 2 (class 2: 'c' only)."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.arange(n) % 2, np.arange(n) % 2, np.arange(n) % 3]
    client = np.repeat(np.array(["a", "b", "c"]), n)
    return rng.normal(size=(3 * n, m)) + y[:, None], y, client


def test_lone_classes_names_each_class_one_client_holds():
    counts = {"a": np.array([3, 0, 0, 1]), "b": np.array([1, 2, 0, 0])}
    assert lone_classes(counts, np.array(["w", "x", "y", "z"])) == {"x": "b", "z": "a"}
    assert lone_classes({"a": np.array([3, 1])}, np.array([0, 1])) == {}  # one client


@pytest.mark.parametrize(
    "head",
    [
        FedCGSClassifier(),
        FedPFTClassifier(random_state=0),
        OneShotFedAvgClassifier(random_state=0, max_iter=20),
    ],
)
def test_a_head_warns_of_a_class_one_client_trained(head):
    X, y, client = shops()
    with pytest.warns(ClassCoverageWarning, match=r"class\(es\) trained by one client only "
                      r"\(class 2 by client 'c'\)") as caught:  # fmt: skip
        head.fit(X, y, client=client)
    assert sum(w.category is ClassCoverageWarning for w in caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClassCoverageWarning)
        head.fit(X[y < 2], y[y < 2], client=client[y < 2])  # every class in two shops: silent


def test_client_prior_classifier_warns_of_a_class_one_client_trained():
    from sklearn.linear_model import LogisticRegression

    X, y, client = shops()
    with pytest.warns(ClassCoverageWarning, match="ClientPriorClassifier: class"):
        ClientPriorClassifier(LogisticRegression()).fit(X, y, client=client)


def test_no_small_client_warning_where_no_covariance_moves():
    """A client with fewer rows than features: warned where its covariance is transported,
    not where only means move (tau = 0, the own-mix default's)."""
    X, y, client = shops(n=30, m=40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallClientWarning)
        SLOTTransformer().fit(X, y, client=client)  # label_mix="client": tau 0
        SLOTTransformer(tau=0, mean_tau=0, label_mix="federation").fit(X, y, client=client)
    with pytest.warns(SmallClientWarning, match="hold no more rows than the 40 features"):
        SLOTTransformer(label_mix="federation").fit(X, y, client=client)


def test_a_cause_is_warned_once_under_the_default_filters_even_across_fits():
    """A grouped cross-validation refits per fold and candidate, and each fit resets Python's
    own once-per-place memory; the library's warning still shows once per cause."""
    code = """
import warnings
import numpy as np
from skslot.heads import FedCGSClassifier
rng = np.random.default_rng(0)
y = np.r_[np.arange(30) % 2, np.arange(30) % 3]
X, client = rng.normal(size=(60, 3)), np.repeat([0, 1], 30)
for _ in range(4):
    with warnings.catch_warnings():  # as a cross-validation's fit may
        warnings.simplefilter("ignore", RuntimeWarning)
    FedCGSClassifier().fit(X, y, client=client)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stderr.count("ClassCoverageWarning") == 1, result.stderr


def test_the_protocol_reports_and_logs_a_class_one_node_trained(caplog):
    X, y, client = shops()
    classes = np.arange(3)
    head = make_head("FedCGS")
    parties = {
        k: ClientParty(X[client == k], y[client == k], head=head, classes=classes, label=k)
        for k in ("a", "b", "c")
    }
    with caplog.at_level(logging.WARNING, logger="skslot.protocol"):
        result = OneShotProtocol(head, tau=0.4, evaluate=False).run(
            InProcessTransport(parties), classes
        )
    assert result.report.lone_classes == {2: "c"}  # by the client's address
    said = [r.getMessage() for r in caplog.records if "one node only" in r.getMessage()]
    assert said == [
        "skslot: class(es) trained by one node only (class 2 by node c (client 'c')): the head "
        "learns each from that node's domain"
    ]
