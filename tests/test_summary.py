import tracemalloc

import numpy as np
import pytest
from sklearn.covariance import LedoitWolf

from skslot import GaussianSummaryEstimator


def rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@pytest.mark.parametrize("shape", [(200, 5), (30, 60), (500, 1), (3, 4)])
def test_matches_sklearn_ledoit_wolf(rng, shape):
    X = rng.normal(loc=3.0, size=shape) * rng.uniform(0.1, 5.0, size=shape[1])
    lw = LedoitWolf().fit(X)
    s = GaussianSummaryEstimator().fit(X).summaries_[None]
    assert rel(s.mean, lw.location_) <= 1e-10
    assert rel(s.covariance, lw.covariance_) <= 1e-10
    assert s.shrinkage == pytest.approx(lw.shrinkage_, rel=1e-10, abs=1e-14)
    assert s.n == shape[0]


def test_per_client_summaries_with_string_labels(rng):
    X = rng.normal(size=(90, 3))
    client = np.array(["b", "a", "c"] * 30)
    est = GaussianSummaryEstimator(n_jobs=2).fit(X, client=client)
    assert est.clients_ == ["a", "b", "c"]
    for label in "abc":
        lw = LedoitWolf().fit(X[client == label])
        assert rel(est.summaries_[label].covariance, lw.covariance_) <= 1e-10
        assert est.summaries_[label].client == label


def test_partial_fit_and_merge_equal_one_fit(rng):
    X = rng.normal(loc=100.0, size=(400, 6))
    client = rng.integers(0, 3, size=400)
    full = GaussianSummaryEstimator().fit(X, client=client)
    streamed = GaussianSummaryEstimator(chunk_size=13)
    for start in range(0, 400, 37):
        streamed.partial_fit(X[start : start + 37], client=client[start : start + 37])
    workers = [GaussianSummaryEstimator().fit(X[i::3], client=client[i::3]) for i in range(3)]
    merged = workers[0].merge(*workers[1:])
    for est in (streamed, merged):
        assert est.clients_ == full.clients_
        for k in full.clients_:
            a, b = est.summaries_[k], full.summaries_[k]
            assert a.n == b.n
            assert rel(a.mean, b.mean) <= 1e-12
            assert rel(a.covariance, b.covariance) <= 1e-10
            assert a.shrinkage == pytest.approx(b.shrinkage, rel=1e-8)


def test_float32_input_is_not_upcast_as_a_whole(rng):
    X = rng.normal(size=(40_000, 32)).astype(np.float32)
    est = GaussianSummaryEstimator(chunk_size=1000)
    tracemalloc.start()
    est.fit(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < X.nbytes  # a float64 copy alone would be 2 * X.nbytes
    lw = LedoitWolf().fit(X.astype(np.float64))
    assert rel(est.summaries_[None].covariance, lw.covariance_) <= 1e-10


def test_constant_columns_and_zero_covariance_get_a_floor(rng):
    X = rng.normal(size=(50, 4))
    X[:, 1] = 3.0
    s = GaussianSummaryEstimator().fit(X).summaries_[None]
    assert np.linalg.eigvalsh(s.covariance).min() > 0
    same = np.tile([1.0, 2.0], (10, 1))
    with pytest.warns(UserWarning, match="zero sample covariance"):
        s = GaussianSummaryEstimator(covariance_floor=1e-6).fit(same).summaries_[None]
    np.testing.assert_allclose(s.covariance, 1e-6 * 2.5 * np.eye(2))  # ||mean||^2 / m = 2.5


def test_too_few_samples_names_the_client(rng):
    X = rng.normal(size=(5, 2))
    with pytest.raises(ValueError, match="client 'lonely' has 1 sample"):
        GaussianSummaryEstimator().fit(X, client=["x"] * 4 + ["lonely"])


@pytest.mark.parametrize(
    "client, match",
    [
        ([1, 2, "a", 1, 2], "mix integers and strings"),
        ([1, 2, 3], "3 labels but X has 5 rows"),
        ([1.5] * 5, "integers or strings"),
        ([[1, 2]] * 5, "client must be 1-D"),
    ],
)
def test_bad_client_labels(rng, client, match):
    with pytest.raises(ValueError, match=match):
        GaussianSummaryEstimator().fit(rng.normal(size=(5, 2)), client=client)


def test_nan_rejected_and_input_not_mutated(rng):
    X = rng.normal(size=(20, 3))
    X_copy = X.copy()
    GaussianSummaryEstimator().fit(X)
    np.testing.assert_array_equal(X, X_copy)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GaussianSummaryEstimator().fit(X)
