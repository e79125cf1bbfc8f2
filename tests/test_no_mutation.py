"""No public entry point changes the arrays it is given."""

import numpy as np
import pytest

from skslot import (
    BuresBarycenter,
    GaussianMap,
    GaussianSummary,
    GaussianSummaryEstimator,
    SLOTTransformer,
)
from skslot.datasets import dirichlet_partition
from skslot.heads import FedCGSClassifier, FedPFTClassifier, OneShotFedAvgClassifier

from .conftest import PAPER, short_local_training

MESSAGE = ("n", "counts", "sums", "shift", "s1", "gram_upper")


@pytest.fixture
def arrays(federated):
    statistics = FedCGSClassifier().client_statistics(
        federated.X, federated.y, np.unique(federated.y)
    )
    message = {k: np.array(v) for k, v in statistics.to_arrays().items()}
    return {
        **message,
        "X": federated.X.copy(),
        "X32": federated.X.astype(np.float32),
        "y": federated.y.copy(),
        "client": federated.client.copy(),
        "mean": federated.X[:5].mean(0),
        "cov": np.cov(federated.X.T),
    }


def calls(a):
    X, X32, y, client = a["X"], a["X32"], a["y"], a["client"]
    mean, cov = a["mean"], a["cov"]
    slot = SLOTTransformer(**PAPER).fit(X, client=client)
    yield lambda: GaussianSummaryEstimator().fit(X, client=client)
    yield lambda: GaussianSummaryEstimator().partial_fit(X32, client=client)
    yield lambda: BuresBarycenter().fit(X, client=client)
    yield lambda: SLOTTransformer(**PAPER).fit_transform(X32, client=client)
    yield lambda: slot.transform(X, client=client)
    yield lambda: SLOTTransformer.from_reference(
        slot.reference_, slot.summaries_[0], **PAPER
    ).transform(X)
    yield lambda: GaussianSummary(10, mean, cov)
    yield lambda: GaussianMap(cov, mean).apply(X32, chunk_size=7)
    yield lambda: dirichlet_partition(y, client, alpha=0.5, random_state=0)
    yield lambda: GaussianSummaryEstimator(epsilon=1.0, clip_norm=0.5).fit(X, client=client)
    for head in (FedCGSClassifier(), OneShotFedAvgClassifier(), FedPFTClassifier(random_state=0)):
        yield lambda head=head: head.fit(X, y, client=client).predict_proba(X32)
        yield lambda head=head: head.client_statistics(X32, y, np.unique(y))
        yield lambda head=head: head.linear_scores().predict(X)
    # a head message decoded on receipt
    message = {k: a[k] for k in MESSAGE}
    yield lambda: FedCGSClassifier().decode_statistics(
        message, classes=np.unique(y), n_features=X.shape[1]
    )


@short_local_training
def test_inputs_are_left_untouched(arrays):
    snapshot = {k: v.copy() for k, v in arrays.items()}
    n_calls = 0
    for call in calls(arrays):
        call()
        n_calls += 1
        for key, value in arrays.items():
            np.testing.assert_array_equal(value, snapshot[key], err_msg=f"call {n_calls}: {key}")
            assert value.flags.writeable
    assert n_calls == 20
