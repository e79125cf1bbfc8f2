import tracemalloc

import numpy as np
import pytest
from sklearn.covariance import LedoitWolf

from skslot import GaussianSummaryEstimator

from .conftest import few_rows_per_client


def rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@few_rows_per_client  # (30, 60) and (3, 4): Ledoit-Wolf where it matters most
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


# -- the input checks come out of the moments pass (issue #20) ----------------------------------


def direct_ledoit_wolf(X):
    """Ledoit-Wolf from its definition, in float64: ``beta`` sums ``||x x^T - S||_F^2``."""
    X = np.asarray(X, dtype=np.float64)
    n, m = X.shape
    mean = X.mean(axis=0)
    Xc = X - mean
    S = Xc.T @ Xc / n
    mu = np.trace(S) / m
    delta = np.sum((S - mu * np.eye(m)) ** 2) / m
    outer = np.einsum("ij,ik->ijk", Xc, Xc)
    beta = min(np.sum((outer - S) ** 2) / (n**2 * m), delta)
    shrinkage = beta / delta
    return mean, (1.0 - shrinkage) * S + shrinkage * mu * np.eye(m), shrinkage


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("chunk_size", [4096, 97])
def test_one_pass_summaries_equal_a_direct_ledoit_wolf(rng, dtype, chunk_size):
    X = (rng.normal(loc=3.0, size=(1000, 8)) * rng.uniform(0.1, 5.0, 8)).astype(dtype)
    client = rng.integers(0, 3, size=1000)
    est = GaussianSummaryEstimator(chunk_size=chunk_size, n_jobs=2).fit(X, client=client)
    for k in range(3):
        mean, cov, shrinkage = direct_ledoit_wolf(X[client == k])
        s = est.summaries_[k]
        assert rel(s.mean, mean) <= 1e-12
        assert rel(s.covariance, cov) <= 1e-10
        assert s.shrinkage == pytest.approx(shrinkage, rel=1e-9)


def test_ordinary_rows_are_read_once(rng, monkeypatch):
    """The pass's bounds settle the checks: no exact check, no second pass over X."""
    import skslot.summary

    def second_pass(*args):
        raise AssertionError("the rows were read again")

    monkeypatch.setattr(skslot.summary, "check_finite_rows", second_pass)
    monkeypatch.setattr(skslot.summary, "check_feature_scale", second_pass)
    X = rng.normal(loc=3.0, size=(500, 6))
    for rows in (X, X.astype(np.float32), 1e40 * X, 1e-40 * X):
        GaussianSummaryEstimator(chunk_size=64).fit(rows, client=rng.integers(0, 2, size=500))
    GaussianSummaryEstimator(epsilon=1.0, clip_norm=5.0).fit(X)
    GaussianSummaryEstimator().partial_fit(X).partial_fit(X)


def exact_scale_error(X):
    from skslot._validation import check_feature_scale

    with pytest.raises(ValueError) as info:
        check_feature_scale(X)
    return str(info.value)


@pytest.mark.parametrize("where", [(0, 0), (333, 2), (999, 5)])
@pytest.mark.parametrize("value", [1e60, -3e55, 1e300])
@pytest.mark.parametrize(
    "params, client",
    [
        ({}, None),
        ({"chunk_size": 64, "n_jobs": 2}, "three"),
        ({"epsilon": 1.0, "clip_norm": 5.0}, None),
    ],
)
def test_features_out_of_range_get_the_same_error(rng, where, value, params, client):
    X = rng.normal(size=(1000, 6))
    X[where] = value
    labels = None if client is None else rng.integers(0, 3, size=1000)
    message = exact_scale_error(X)
    assert f"features reach {abs(value):.3g} in magnitude, outside [1e-50, 1e+50]" in message
    with pytest.raises(ValueError) as info:
        GaussianSummaryEstimator(**params).fit(X, client=labels)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        GaussianSummaryEstimator(**params).partial_fit(X[:1]).partial_fit(X, client=labels)
    assert str(info.value) == message


def test_tiny_features_and_the_edges_of_the_range(rng):
    X = rng.normal(size=(100, 4))
    tiny = 1e-60 * X
    with pytest.raises(ValueError) as info:
        GaussianSummaryEstimator().fit(tiny)
    assert str(info.value) == exact_scale_error(tiny)
    assert "features reach" in str(info.value)
    for top in (4e49, 1e50):  # in range, beyond what the bounds settle: checked exactly
        big = X / np.abs(X).max() * top
        s = GaussianSummaryEstimator().fit(big).summaries_[None]
        _, cov, _ = direct_ledoit_wolf(big)
        assert rel(s.covariance, cov) <= 1e-10
    with pytest.raises(ValueError, match="features reach 1e\\+50 in magnitude"):
        GaussianSummaryEstimator().fit(X / np.abs(X).max() * np.nextafter(1e50, np.inf))
    with pytest.warns(UserWarning, match="zero sample covariance"):  # zeros are not "too small"
        s = GaussianSummaryEstimator().fit(np.zeros((10, 3))).summaries_[None]
    np.testing.assert_array_equal(s.mean, np.zeros(3))


def sklearn_error(X):
    from sklearn.utils.validation import check_array

    with pytest.raises(ValueError) as info:
        check_array(X, estimator=GaussianSummaryEstimator(), input_name="X")
    return str(info.value)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("where", [(0, 0), (700, 3)])
def test_non_finite_rows_get_scikit_learns_error(rng, value, dtype, where):
    X = rng.normal(size=(1000, 4)).astype(dtype)
    X[where] = value
    message = sklearn_error(X)
    for params, client in [
        ({}, None),
        ({"chunk_size": 100, "n_jobs": 2}, rng.integers(0, 3, size=1000)),
        ({"epsilon": 1.0, "clip_norm": 5.0}, None),
    ]:
        with pytest.raises(ValueError) as info:
            GaussianSummaryEstimator(**params).fit(X, client=client)
        assert str(info.value) == message
        with pytest.raises(ValueError) as info:
            GaussianSummaryEstimator(**params).partial_fit(X[1:2]).partial_fit(X, client=client)
        assert str(info.value) == message


def test_non_finite_rows_are_reported_before_other_errors(rng):
    X = rng.normal(size=(6, 3))
    X[2, 1] = np.nan
    message = sklearn_error(X)
    cases = [
        lambda: GaussianSummaryEstimator().fit(X, client=[1, 2, "a", 1, 2, 1]),  # label types
        lambda: GaussianSummaryEstimator().fit(X, client=[1, 2]),  # label count
        lambda: GaussianSummaryEstimator().fit(X[2:3]),  # one row: the minimum is 2
        lambda: GaussianSummaryEstimator().partial_fit(X[:, :2]).partial_fit(X),  # width
    ]
    for case in cases:
        with pytest.raises(ValueError) as info:
            case()
        assert str(info.value) == message
    huge = rng.normal(size=(6, 3)) * 1e60
    with pytest.raises(ValueError, match="features reach"):  # before the labels, as before
        GaussianSummaryEstimator().fit(huge, client=[1, 2])


def test_rejected_rows_leave_the_estimator_as_it_was(rng):
    X = rng.normal(size=(30, 4))
    nan = X.copy()
    nan[5, 0] = np.nan
    est = GaussianSummaryEstimator().fit(X)
    fitted = est.summaries_[None]
    with pytest.raises(ValueError, match="NaN"):
        est.fit(np.hstack([nan, X[:, :1]]))  # five features, one NaN
    assert est.n_features_in_ == 4 and est.summaries_[None] is fitted
    low = GaussianSummaryEstimator(form="low-rank").fit(X)
    fitted = low.summaries_[None]
    for bad in (np.hstack([nan, X[:, :1]]), 1e60 * X):
        with pytest.raises(ValueError, match=r"NaN|scale"):
            low.fit(bad)
        assert low.summaries_[None] is fitted
    for bad in (nan, 1e60 * X):  # a rejected first chunk stores nothing
        est = GaussianSummaryEstimator()
        with pytest.raises(ValueError):
            est.partial_fit(bad)
        assert not hasattr(est, "summaries_")
        est.partial_fit(rng.normal(size=(10, 5)))  # another width starts afresh
        assert est.n_features_in_ == 5 and est.summaries_[None].n == 10


def test_tensor_rows_are_checked_in_the_pass(rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch")
    X = rng.normal(loc=2.0, size=(300, 5))
    got = GaussianSummaryEstimator(chunk_size=64).fit(torch.tensor(X)).summaries_[None]
    _, cov, _ = direct_ledoit_wolf(X)
    assert rel(got.covariance, cov) <= 1e-10
    for value, match in ((np.nan, "NaN or infinity"), (np.inf, "NaN or infinity")):
        bad = X.copy()
        bad[200, 1] = value
        with pytest.raises(ValueError, match=match):
            GaussianSummaryEstimator(chunk_size=64).fit(torch.tensor(bad))
    with pytest.raises(ValueError) as info:
        GaussianSummaryEstimator().fit(torch.tensor(1e60 * X))
    assert str(info.value) == exact_scale_error(1e60 * X)
