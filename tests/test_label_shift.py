"""The label-shift rule: each client's tau scaled by its class-proportion distance."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skslot import (
    FederatedTauSearch,
    GaussianSummary,
    GaussianSummaryEstimator,
    SLOTTransformer,
    UnknownClientWarning,
)
from skslot.heads import FedCGSClassifier, OneShotFedAvgClassifier
from skslot.label_shift import class_counts, label_shift_distances
from skslot.protocol import Upload
from skslot.protocol.stages import upload as upload_stage
from skslot.protocol.stages.upload import class_counts_problem

from .conftest import PAPER, ignoring, short_local_training


@pytest.fixture(scope="module")
def data(labelled_clients):
    return labelled_clients


def own_counts(data):
    classes = np.unique(data.y)
    return {k: class_counts(data.y[data.client == k], classes) for k in np.unique(data.client)}


def test_distances_are_the_total_variation_to_the_pooled_proportions(data):
    counts = own_counts(data)
    pooled = np.bincount(data.y) / data.y.shape[0]
    distances = label_shift_distances(counts)
    for k, c in counts.items():
        expected = 0.5 * sum(abs(c[j] / c.sum() - pooled[j]) for j in range(pooled.shape[0]))
        assert distances[k] == pytest.approx(expected, rel=1e-12)
        assert 0.0 < distances[k] < 1.0
    # the federation's own mix is not moved; two disjoint halves are half-way apart
    same = label_shift_distances({"a": np.array([3, 6]), "b": np.array([1, 2])})
    assert same == {"a": 0.0, "b": 0.0}
    apart = label_shift_distances({"a": np.array([5, 0]), "b": np.array([0, 5])})
    assert apart == {"a": 0.5, "b": 0.5}


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({}, "at least one client"),
        ({"a": np.array([1.0, 2.0])}, "integer arrays"),
        ({"a": np.array([1, -2])}, ">= 0"),
        ({"a": np.array([0, 0]), "b": np.array([1, 1])}, r"clients \['a'\] have no rows"),
    ],
)
def test_distance_errors_name_the_problem(counts, message):
    with pytest.raises(ValueError, match=message):
        label_shift_distances(counts)


def test_class_counts_name_labels_outside_the_class_set():
    np.testing.assert_array_equal(class_counts(np.array([2, 0, 2]), np.arange(4)), [1, 0, 2, 0])
    with pytest.raises(ValueError, match=r"labels \[7\] are not among the classes"):
        class_counts(np.array([0, 7]), np.arange(3))


def test_each_client_moves_tau_times_its_distance(data):
    X, y, client = data.X, data.y, data.client
    slot = SLOTTransformer(tau=0.8, client_tau="label-shift", mean_tau=None, label_mix="federation")
    slot.fit(X, y, client=client)
    uniform = SLOTTransformer(tau=0.8, **PAPER).fit(X, client=client)
    distances = label_shift_distances(own_counts(data))
    assert slot.tau_scales_ == pytest.approx(distances, rel=1e-12)
    assert uniform.tau_scales_ == {0: 1.0, 1: 1.0, 2: 1.0}
    Z = slot.transform(X, client=client)
    for k in slot.clients_:
        rows = client == k
        expected = uniform.maps_[k].geodesic(0.8 * distances[k]).apply(X[rows])
        np.testing.assert_allclose(Z[rows], expected, rtol=1e-12, atol=1e-12)
    # tau = 1 is the rule itself; a different tau needs no refit
    slot.set_params(tau=1.0)
    rows = client == 0
    np.testing.assert_allclose(
        slot.transform(X[rows], client=client[rows]),
        uniform.maps_[0].geodesic(distances[0]).apply(X[rows]),
        rtol=1e-12,
        atol=1e-12,
    )


def test_label_shift_errors_name_the_problem(data):
    X, y, client = data.X, data.y, data.client
    # without labels the rule cannot be applied: every client moves tau, and fit says so
    with pytest.warns(UserWarning, match="fit without y: no client's label mix"):
        unlabelled = SLOTTransformer(client_tau="label-shift").fit(X, client=client)
    assert set(unlabelled.tau_scales_.values()) == {1.0}
    with pytest.raises(ValueError, match="client_tau must be one of"):
        SLOTTransformer(client_tau="per-client").fit(X, y, client=client)
    slot = SLOTTransformer(client_tau="label-shift").fit(X, y, client=client)
    unseen = r"SLOTTransformer\.transform: client\(s\) 99 were not seen during fit"
    # an unseen client's label mix is taken as the federation's: label shift 0, so its
    # covariance stays and its mean moves to the reference mean (finite scores, no error)
    with ignoring(UnknownClientWarning, unseen):
        new = slot.transform(X[:5], client=np.full(5, 99))
    np.testing.assert_allclose(new - new.mean(axis=0), X[:5] - X[:5].mean(axis=0), atol=1e-10)
    np.testing.assert_allclose(new.mean(axis=0), slot.reference_.mean, atol=1e-10)
    with pytest.warns(UnknownClientWarning, match=unseen + ": their rows are left unchanged"):
        left = slot.set_params(unknown_client="identity").transform(X[:5], client=np.full(5, 99))
    np.testing.assert_array_equal(left, X[:5])
    reference, own = slot.reference_, slot.summaries_[0]
    with pytest.raises(ValueError, match="needs tau_scales"):
        SLOTTransformer.from_reference(reference, own, client_tau="label-shift")
    with pytest.raises(ValueError, match=r"no factor for clients \[0\]"):
        SLOTTransformer.from_reference(reference, own, tau_scales={1: 0.5})
    with pytest.raises(ValueError, match=r"tau_scales\[0\] must be in \[0.0, 1.0\], got 1.5"):
        SLOTTransformer.from_reference(reference, own, tau_scales={0: 1.5})


def test_a_pipeline_passes_the_labels_to_the_rule(data):
    X, y, client = data.X, data.y, data.client
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            SLOTTransformer(tau=1.0, client_tau="label-shift"), LogisticRegression(max_iter=500)
        )
        pipe.fit(X, y, client=client)
        assert pipe[0].tau_scales_ == pytest.approx(label_shift_distances(own_counts(data)))
        assert pipe.score(X, y, client=client) > 0.5


@short_local_training
@pytest.mark.parametrize("head", [FedCGSClassifier(), OneShotFedAvgClassifier(max_iter=50)])
def test_the_protocol_scales_every_client_by_the_counts_it_uploaded(data, head):
    """Both head shapes: the server scales the statistics' maps, or asks each client for its tau."""
    X, y, client = data.X, data.y, data.client
    head = clone(head).set_params(label_mix="federation")
    slot = SLOTTransformer(client_tau="label-shift", mean_tau=None, label_mix="federation")
    search = FederatedTauSearch(head, slot=slot, taus=(0.0, 0.5, 1.0), random_state=0)
    search.fit(X, y, client=client)
    distances = label_shift_distances(own_counts(data))
    assert search.slot_.tau_scales_ == pytest.approx(distances, rel=1e-12)
    # the chosen head predicts the rows as aligned by each client's scaled tau
    fitted = SLOTTransformer(
        tau=search.best_tau_, client_tau="label-shift", mean_tau=None, label_mix="federation"
    )
    fitted.fit(X, y, client=client)
    np.testing.assert_allclose(
        search.slot_.transform(X, client=client),
        fitted.transform(X, client=client),
        rtol=1e-9,
        atol=1e-9,
    )
    # the uniform search moves the clients differently
    uniform = FederatedTauSearch(
        head, slot=SLOTTransformer(**PAPER), taus=(0.0, 0.5, 1.0), random_state=0
    )
    uniform.fit(X, y, client=client)
    uniform.slot_.set_params(tau=1.0)
    search.slot_.set_params(tau=1.0)
    assert not np.allclose(
        uniform.slot_.transform(X, client=client), search.slot_.transform(X, client=client)
    )


def test_class_counts_are_tied_to_the_summary_and_the_statistics(data):
    X, y = data.X[data.client == 0], data.y[data.client == 0]
    classes = np.unique(data.y)
    summary = GaussianSummaryEstimator().fit(X).summaries_[None]
    stats = FedCGSClassifier().client_statistics(X, y, classes)
    counts = class_counts(y, classes)

    def problem(upload_counts, statistics=stats, n_classes=classes.shape[0]):
        upload = Upload(summary, summary.n, 0, statistics=statistics, class_counts=upload_counts)
        return class_counts_problem(upload, n_classes)

    assert problem(counts) is None
    assert problem(None) == "the upload lacks the class counts the run asked for"
    assert problem(counts, n_classes=None) == "class counts were not asked for"
    moved = counts.copy()
    moved[0] += 1
    assert "add up to" in problem(moved)
    moved[1] -= 1  # the same total, a different mix than the statistics
    assert problem(moved) == "class counts differ from those of the client's statistics"
    assert problem(moved, statistics=None) is None  # a local-training head: only the sum
    # counts whose int64 sum wraps around to the summary's n
    wrapped = np.array([2**63 - 1, 2**63 - 1, summary.n + 2, 0][: classes.shape[0]])
    assert int(wrapped.sum()) == summary.n  # what a careless sum would accept
    assert "exceeds the" in problem(wrapped, statistics=None)


@pytest.mark.parametrize(
    "values",
    [[1, 2], [1, 2, -3], [1.0, 2.0, 3.0], [True, True, False], "1,2,3", [2**62, 0, 0]],
    ids=repr,
)
def test_a_malformed_class_count_list_is_a_protocol_error(values):
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from flwr.app import Message

    from skslot.flower import messages
    from skslot.heads import OneShotFedAvgClassifier
    from skslot.protocol import ClientWire, ServerWire, UploadRequest

    from .flower_harness import as_server_app

    as_server_app()
    classes = np.arange(3)
    wire = ServerWire(OneShotFedAvgClassifier(), classes, summary_dtype="float64")

    def over_flower(payload):
        sent = Message(messages.content(payload), dst_node_id=11, message_type="query.upload")
        return messages.received(sent)

    request = UploadRequest(0, class_counts=True)
    sent = over_flower(upload_stage.STAGE.encode_request(request, wire))
    assert upload_stage.STAGE.decode_request(sent, ClientWire(classes, 2)).class_counts is True
    summary = GaussianSummary(6, np.zeros(2), np.eye(2), client=0)
    upload = Upload(summary, 6, 0, class_counts=np.array([1, 2, 3]))
    reply = upload_stage.STAGE.encode_reply(upload, request)
    replies, _ = upload_stage.STAGE.decode_replies({11: over_flower(reply)}, {11: request}, wire)
    assert replies[11].class_counts.tolist() == [1, 2, 3]
    reply.config["class-counts"] = values
    _, rejected = upload_stage.STAGE.decode_replies({11: over_flower(reply)}, {11: request}, wire)
    expected = r"class-counts must be a list of 3 integers in \[0, 2\*\*53\]"
    assert re.fullmatch(expected, rejected[11])


def test_fedpft_counts_agree_with_a_class_skipped_in_one_part_only():
    """A class with too few validation rows is skipped there but sent in the fitting part."""
    from skslot.heads import FedPFTClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(23, 3))
    y = np.array([0] * 10 + [1] * 10 + [2] * 3)
    classes = np.arange(3)
    head = FedPFTClassifier(min_samples_per_class=2)
    fit_rows, val_rows = np.r_[0:8, 10:18, 20:22], np.r_[8:10, 18:20, 22:23]
    fitting = head.client_statistics(X[fit_rows], y[fit_rows], classes)
    validation = head.client_statistics(X[val_rows], y[val_rows], classes)
    assert validation.skipped == [(2, 1)]  # one row of class 2: not sent
    summary = GaussianSummaryEstimator().fit(X[fit_rows]).summaries_[None]
    upload = Upload(
        summary, 18, 0, fitting, validation, class_counts=class_counts(y, classes), n_validation=5
    )
    assert class_counts_problem(upload, 3) is None


def test_weights_set_the_federation_s_proportions():
    counts = {"big": np.array([900, 0]), "a": np.array([5, 5]), "b": np.array([5, 5])}
    pooled = label_shift_distances(counts)
    assert pooled["a"] == pytest.approx(910 / 920 - 0.5)  # the big client's mix dominates
    capped = label_shift_distances(counts, {"big": 20.0, "a": 10.0, "b": 10.0})
    assert capped["a"] == pytest.approx(0.25)  # p = (20 * [1, 0] + 20 * [.5, .5]) / 40
    assert capped["big"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="weights must be finite"):
        label_shift_distances(counts, {"big": -1.0, "a": 1.0, "b": 1.0})
