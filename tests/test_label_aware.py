"""Label-aware alignment: summaries of class-centred rows, end to end."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.covariance import LedoitWolf
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skslot import (
    FederatedTauSearch,
    GaussianSummaryEstimator,
    SLOTTransformer,
    UnknownClientWarning,
)
from skslot.heads import FedCGSClassifier
from skslot.ledoit_wolf import within_class_summary

from .conftest import PAPER, assert_close_in_norm, fitting_rows, ignoring


@pytest.fixture(scope="module")
def data(labelled_clients):
    return labelled_clients


def class_centred(X, y):
    Z = X.astype(np.float64).copy()
    for label in np.unique(y):
        Z[y == label] -= X[y == label].mean(axis=0)
    return Z


def test_within_class_summary_is_ledoit_wolf_of_the_class_centred_rows(data):
    est = GaussianSummaryEstimator(covariance="within").fit(data.X, data.y, client=data.client)
    for k in np.unique(data.client):
        X, y = data.X[data.client == k], data.y[data.client == k]
        lw = LedoitWolf().fit(class_centred(X, y))
        summary = est.summaries_[k]
        assert_close_in_norm(summary.covariance, lw.covariance_, rtol=1e-12)
        assert summary.shrinkage == pytest.approx(lw.shrinkage_, rel=1e-10, abs=1e-14)
        np.testing.assert_allclose(summary.mean, X.mean(axis=0), rtol=1e-12)
        assert summary.n == X.shape[0]
    total = GaussianSummaryEstimator().fit(data.X, client=data.client).summaries_
    # the label mix no longer enters: the within-class covariance has less variance
    assert all(
        np.trace(est.summaries_[k].covariance) < np.trace(total[k].covariance) for k in total
    )


def test_within_class_moments_stream_and_merge_exactly(data):
    X, y, client = data.X, data.y, data.client
    full = GaussianSummaryEstimator(covariance="within").fit(X, y, client=client)
    stream = GaussianSummaryEstimator(covariance="within")
    for start in range(0, X.shape[0], 37):
        rows = slice(start, start + 37)
        stream.partial_fit(X[rows], y[rows], client=client[rows])
    half = X.shape[0] // 2
    merged = (
        GaussianSummaryEstimator(covariance="within")
        .fit(X[:half], y[:half], client=client[:half])
        .merge(
            GaussianSummaryEstimator(covariance="within").fit(
                X[half:], y[half:], client=client[half:]
            )
        )
    )
    for other in (stream, merged):
        assert other.clients_ == full.clients_
        for k in full.clients_:
            assert_close_in_norm(
                other.summaries_[k].covariance, full.summaries_[k].covariance, rtol=1e-12
            )
            np.testing.assert_allclose(other.summaries_[k].mean, full.summaries_[k].mean)


def test_one_class_per_client_and_singleton_classes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 3))
    y = np.array([0, 0, 0, 1, 1, 2, 3])  # two singleton classes: their centred rows are 0
    summary = GaussianSummaryEstimator(covariance="within").fit(X, y).summaries_[None]
    lw = LedoitWolf().fit(class_centred(X, y))
    assert_close_in_norm(summary.covariance, lw.covariance_, rtol=1e-12)
    assert within_class_summary.__name__ in GaussianSummaryEstimator.__doc__


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda X, y, c: GaussianSummaryEstimator(covariance="within").fit(X, client=c),
            "pass the class labels",
        ),
        (
            lambda X, y, c: GaussianSummaryEstimator(
                covariance="within", epsilon=1.0, clip_norm=1.0
            ).fit(X, y, client=c),
            "no calibrated differentially private release",
        ),
        (
            lambda X, y, c: GaussianSummaryEstimator(covariance="pooled").fit(X, y, client=c),
            "covariance must be one of",
        ),
        (
            lambda X, y, c: SLOTTransformer(covariance="within", **PAPER).fit(X, client=c),
            "pass the class labels",
        ),
        (
            lambda X, y, c: GaussianSummaryEstimator(covariance="within").fit(X, y[:-1]),
            "y must be 1-D with one label per row",
        ),
    ],
)
def test_label_aware_errors_name_the_problem(data, make, message):
    with pytest.raises(ValueError, match=message):
        make(data.X, data.y, data.client)


def test_a_supervised_pipeline_passes_the_labels_to_slot(data):
    X, y, client = data.X, data.y, data.client
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            SLOTTransformer(tau=1.0, covariance="within", **PAPER), LogisticRegression(max_iter=500)
        )
        pipe.fit(X, y, client=client)
        slot = pipe[0]
        direct = GaussianSummaryEstimator(covariance="within").fit(X, y, client=client)
        for k in slot.clients_:
            np.testing.assert_array_equal(
                slot.summaries_[k].covariance, direct.summaries_[k].covariance
            )
        assert pipe.score(X, y, client=client) > 0.5
    # a client unseen in fit has no labels for its within-class summary: its label mix is
    # taken as the federation's, so its spread stays (and its mean follows tau_k = 0 here)
    with ignoring(UnknownClientWarning, r"SLOTTransformer\.transform: client\(s\) 99 were"):
        Z = slot.transform(X[:5], client=np.full(5, 99))
    np.testing.assert_allclose(Z, X[:5], atol=1e-10)
    slot.set_params(mean_tau=1.0)
    with ignoring(UnknownClientWarning, r"SLOTTransformer\.transform: client\(s\) 99 were"):
        Z = slot.transform(X[:5], client=np.full(5, 99))
    np.testing.assert_allclose(Z - Z.mean(axis=0), X[:5] - X[:5].mean(axis=0), atol=1e-10)
    np.testing.assert_allclose(Z.mean(axis=0), slot.reference_.mean, atol=1e-10)


def test_the_federated_search_runs_label_aware_summaries_of_its_fitting_rows(data):
    slot = SLOTTransformer(covariance="within", **PAPER)
    search = FederatedTauSearch(FedCGSClassifier(label_mix="federation"), slot=slot, random_state=0)
    search.fit(data.X, data.y, client=data.client)
    # the held-out rows are outside each client's summary, hence outside its map
    for k, rows in fitting_rows(data.y, data.client, 0).items():
        direct = GaussianSummaryEstimator(covariance="within").fit(data.X[rows], data.y[rows])
        expected = direct.summaries_[None]
        summary = search.slot_.summaries_[k]  # derived from FedCGS's statistics
        assert summary.n == rows.shape[0] < np.sum(data.client == k)
        np.testing.assert_allclose(summary.mean, expected.mean, rtol=1e-12)
        np.testing.assert_allclose(
            summary.covariance,
            expected.covariance,
            rtol=1e-10,
            atol=1e-12 * np.abs(expected.covariance).max(),
        )


def test_flower_runs_label_aware_summaries_as_in_process(tmp_path, data):
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from skslot.flower import DeploymentConfig, run_one_shot
    from skslot.flower.client_app import app as client_app

    from .flower_harness import LocalGrid, write_node_files

    node_configs = write_node_files(
        tmp_path, data.X, data.y, data.client, first_node=21, train_fraction=0.75
    )
    classes = ",".join(str(c) for c in np.unique(data.y))
    config = DeploymentConfig(
        summary_covariance="within",
        tau="auto",
        summary_dtype="float64",
        classes=classes,
        num_clients=3,
        connect_timeout=0.0,
        **PAPER,
    )
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    report, scores, _ = run_one_shot(grid, config)
    X = np.vstack([np.load(node_configs[21 + k]["data"])["X_train"] for k in range(3)])
    y = np.concatenate([np.load(node_configs[21 + k]["data"])["y_train"] for k in range(3)])
    client = np.repeat([0, 1, 2], 150)
    search = FederatedTauSearch(
        FedCGSClassifier(label_mix="federation"),
        slot=SLOTTransformer(covariance="within", **PAPER),
        random_state=config.seed,
    )
    search.fit(X, y, client=client)
    assert report.tau == search.best_tau_
    np.testing.assert_array_equal(scores.coef, search.best_estimator_.linear_scores().coef)
    with pytest.raises(ValueError, match="summary of the total covariance"):
        DeploymentConfig(summary_covariance="within", epsilon=1.0, head="O-FedAvg")
    # a FedCGS client's budget covers its statistics, its label-aware summary derived from them
    private = DeploymentConfig(summary_covariance="within", epsilon=1.0, tau=0.4)
    assert private.privacy_budget() is not None
