"""The torch backend on CPU tensors: same results as NumPy, tensors in and out, same checks."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch")

from skslot import (  # noqa: E402
    BuresBarycenter,
    GaussianMap,
    GaussianSummaryEstimator,
    SLOTTransformer,
)
from skslot.barycenter import bures_wasserstein_barycenter  # noqa: E402

from .conftest import random_spd  # noqa: E402

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_summaries_from_tensors_equal_numpy(federated, dtype):
    X = federated.X
    expected = GaussianSummaryEstimator().fit(X, client=federated.client)
    tensor = torch.tensor(X, dtype=dtype)
    got = GaussianSummaryEstimator(chunk_size=97).fit(tensor, client=federated.client)
    for label, summary in expected.summaries_.items():
        np.testing.assert_allclose(
            got.summaries_[label].covariance,
            summary.covariance,
            rtol=TOLERANCE[dtype],
            atol=TOLERANCE[dtype],
        )
        np.testing.assert_allclose(
            got.summaries_[label].mean, summary.mean, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype]
        )
        assert got.summaries_[label].shrinkage == pytest.approx(summary.shrinkage, rel=1e-4)


def test_barycenter_in_torch_equals_numpy():
    rng = np.random.default_rng(0)
    covariances = [random_spd(rng, 12, 50.0) for _ in range(5)]
    weights = rng.dirichlet(np.ones(5))
    expected = bures_wasserstein_barycenter(covariances, weights)
    on_device = bures_wasserstein_barycenter(covariances, weights, device="cpu")
    assert isinstance(on_device.covariance, np.ndarray)  # NumPy in, NumPy out
    from_tensors = bures_wasserstein_barycenter([torch.tensor(c) for c in covariances], weights)
    assert isinstance(from_tensors.covariance, torch.Tensor)  # tensors in, tensors out
    assert from_tensors.covariance.dtype == torch.float64
    for got in (on_device, from_tensors):
        np.testing.assert_allclose(np.asarray(got.covariance), expected.covariance, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(got.factor), expected.factor, rtol=1e-10)
        assert got.n_iter == expected.n_iter
        for a, b in zip(got.inner, expected.inner, strict=True):
            np.testing.assert_allclose(np.asarray(a.sqrt()), b.sqrt(), rtol=1e-9, atol=1e-12)


def test_barycenter_of_float32_tensors_is_computed_in_float64_and_returned_in_float32():
    rng = np.random.default_rng(1)
    covariances = [random_spd(rng, 10, 20.0) for _ in range(3)]
    weights = np.array([0.2, 0.3, 0.5])
    single = [torch.tensor(c, dtype=torch.float32) for c in covariances]
    got = bures_wasserstein_barycenter(single, weights)
    as_float64 = [c.double().numpy() for c in single]  # the same rounded inputs
    expected = bures_wasserstein_barycenter(as_float64, weights)
    assert got.covariance.dtype == torch.float32
    assert got.inner[0].eigenvectors.dtype == torch.float32
    np.testing.assert_allclose(got.covariance.numpy(), expected.covariance, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_slot_transformer_on_tensors(federated, dtype):
    X, client = federated.X, federated.client
    expected = SLOTTransformer(tau=0.6).fit(X, client=client)
    tensor = torch.tensor(X, dtype=dtype)
    before = tensor.clone()
    slot = SLOTTransformer(tau=0.6).fit(tensor, client=torch.tensor(client))
    Z = slot.transform(tensor, client=client)
    assert isinstance(Z, torch.Tensor) and Z.dtype == dtype and Z.device == tensor.device
    np.testing.assert_allclose(
        Z.numpy(),
        expected.transform(X, client=client),
        rtol=10 * TOLERANCE[dtype],
        atol=10 * TOLERANCE[dtype],
    )
    np.testing.assert_allclose(
        slot.reference_.covariance, expected.reference_.covariance, rtol=TOLERANCE[dtype]
    )
    assert torch.equal(tensor, before)  # the caller's tensor is untouched


def test_unknown_client_fit_and_integer_tensors(federated):
    X, client = federated.X, federated.client
    seen = client != 3
    slot = SLOTTransformer(unknown_client="fit").fit(torch.tensor(X[seen]), client=client[seen])
    expected = SLOTTransformer(unknown_client="fit").fit(X[seen], client=client[seen])
    rows = torch.tensor(X[~seen])
    np.testing.assert_allclose(
        slot.transform(rows, client=3).numpy(),
        expected.transform(X[~seen], client=3),
        rtol=1e-9,
        atol=1e-9,
    )
    integers = torch.arange(40).reshape(10, 4)
    est = GaussianSummaryEstimator().fit(integers)
    np.testing.assert_allclose(est.summaries_[None].mean, integers.double().mean(0).numpy())


def test_map_apply_on_tensors_with_out_and_chunks():
    rng = np.random.default_rng(1)
    T = GaussianMap(rng.normal(size=(5, 5)), rng.normal(size=5))
    X = torch.tensor(rng.normal(size=(23, 5)))
    out = torch.empty_like(X)
    result = T.apply(X, out=out, chunk_size=4)
    assert result is out
    np.testing.assert_allclose(out.numpy(), X.numpy() @ T.linear.T + T.offset, rtol=1e-12)


@pytest.mark.parametrize(
    ("X", "message"),
    [
        (torch.full((5, 3), float("nan")), "NaN or infinity"),
        (torch.ones(5, 3, 2), "Expected a 2D tensor"),
        (torch.ones(5, 3, dtype=torch.complex64), "Complex data not supported"),
        (torch.ones(1, 3), "minimum of 2 is required"),
    ],
)
def test_bad_tensors_get_clear_errors(X, message):
    with pytest.raises(ValueError, match=message):
        SLOTTransformer().fit(X)


def test_tensor_of_the_wrong_width_at_transform(federated):
    slot = SLOTTransformer().fit(torch.tensor(federated.X), client=federated.client)
    with pytest.raises(ValueError, match="X has 3 features, but SLOTTransformer is expecting 8"):
        slot.transform(torch.ones(4, 3), client=[0, 0, 1, 1])


def test_barycenter_estimator_device_option(federated):
    summaries = GaussianSummaryEstimator().fit(federated.X, client=federated.client).summaries_
    expected = BuresBarycenter().fit(summaries)
    got = BuresBarycenter(device="cpu").fit(summaries)
    np.testing.assert_allclose(got.covariance_, expected.covariance_, rtol=1e-10)
    maps, expected_maps = got.transport_maps(), expected.transport_maps()
    for label in expected_maps:
        np.testing.assert_allclose(maps[label].linear, expected_maps[label].linear, rtol=1e-9)
