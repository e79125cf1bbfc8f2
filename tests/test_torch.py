"""The torch backend on CPU tensors: same results as NumPy, tensors in and out, same checks."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch")

from skslot import (  # noqa: E402
    BuresBarycenter,
    GaussianMap,
    GaussianSummaryEstimator,
    SLOTTransformer,
    UnknownClientWarning,
)
from skslot.barycenter import bures_wasserstein_barycenter  # noqa: E402

from .conftest import PAPER, assert_close_in_norm, random_spd  # noqa: E402

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


def test_torch_runs_the_float64_iteration_where_numpy_runs_mixed_precision():
    rng = np.random.default_rng(2)
    covariances = np.stack([random_spd(rng, 36, 20.0) for _ in range(3)])  # m >= 32: mixed
    weights = rng.dirichlet(np.ones(3))
    float64 = bures_wasserstein_barycenter(covariances, weights, precision="float64")
    mixed = bures_wasserstein_barycenter(covariances, weights)
    on_device = bures_wasserstein_barycenter(torch.tensor(covariances), weights, device="cpu")
    np.testing.assert_allclose(on_device.covariance.numpy(), float64.covariance, rtol=1e-10)
    assert on_device.n_iter == float64.n_iter
    assert_close_in_norm(on_device.covariance.numpy(), mixed.covariance, rtol=1e-9)
    for got, want in zip(on_device.inner, mixed.inner, strict=True):  # maps' roots agree
        assert_close_in_norm(got.inv_sqrt().numpy(), want.inv_sqrt(), rtol=1e-8)


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
    expected = SLOTTransformer(tau=0.6, **PAPER).fit(X, client=client)
    tensor = torch.tensor(X, dtype=dtype)
    before = tensor.clone()
    slot = SLOTTransformer(tau=0.6, **PAPER).fit(tensor, client=torch.tensor(client))
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
    slot = SLOTTransformer(unknown_client="fit", **PAPER).fit(
        torch.tensor(X[seen]), client=client[seen]
    )
    expected = SLOTTransformer(unknown_client="fit", **PAPER).fit(X[seen], client=client[seen])
    rows = torch.tensor(X[~seen])
    with pytest.warns(UnknownClientWarning, match=r"client\(s\) 3 were not seen during fit"):
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
        SLOTTransformer(**PAPER).fit(X)


def test_tensor_of_the_wrong_width_at_transform(federated):
    slot = SLOTTransformer(**PAPER).fit(torch.tensor(federated.X), client=federated.client)
    with pytest.raises(ValueError, match="X has 3 features, but SLOTTransformer is expecting 8"):
        slot.transform(torch.ones(4, 3), client=[0, 0, 1, 1])


def test_barycenter_estimator_device_option(federated):
    summaries = GaussianSummaryEstimator().fit(federated.X, client=federated.client).summaries_
    expected = BuresBarycenter().fit(summaries)
    got = BuresBarycenter(device="cpu").fit(summaries)
    np.testing.assert_allclose(got.covariance_, expected.covariance_, rtol=1e-10)
    maps, expected_maps = got.maps(), expected.maps()
    for label in expected_maps:
        np.testing.assert_allclose(maps[label].linear, expected_maps[label].linear, rtol=1e-9)


# -- the array-namespace story: which estimators take which arrays, dispatch on or off ---------

NAMESPACE_SCRIPT = r"""
import json, sys, warnings
import numpy as np, sklearn, torch
import array_api_strict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from skslot import SLOTTransformer
from skslot.datasets import make_federated_classification
from skslot.heads import FedCGSClassifier, FedPFTClassifier, OneShotFedAvgClassifier

warnings.simplefilter("ignore")
data = make_federated_classification(n_clients=3, alpha=1.0, domain_shift=2.0, random_state=0)
X, y, client = data.X, data.y, data.client
kinds = {
    "numpy": X, "torch": torch.tensor(X), "array_api_strict": array_api_strict.asarray(X)
}
out = {}
for dispatch in (False, True):
    for kind, Xk in kinds.items():
        heads = (FedCGSClassifier(), OneShotFedAvgClassifier(), FedPFTClassifier(random_state=0))
        for head in heads:
            with sklearn.config_context(
                array_api_dispatch=dispatch, enable_metadata_routing=True
            ):
                pipe = make_pipeline(StandardScaler(), SLOTTransformer(), head)
                predicted = pipe.fit(Xk, y, client=client).predict(Xk, client=client)
                aligned = pipe[:-1].transform(Xk, client=client)
            out[f"{dispatch}/{kind}/{type(head).__name__}"] = {
                "predictions": type(predicted).__module__.split(".")[0],
                "aligned": type(aligned).__module__.split(".")[0],
                "accuracy": float(np.mean(predicted == y)),
            }
json.dump(out, sys.stdout)
"""


def test_every_estimator_takes_numpy_torch_and_array_api_arrays_with_dispatch_on_or_off():
    """One story: SLOT keeps torch tensors as tensors, the heads compute on host NumPy.

    StandardScaler -> SLOTTransformer -> head, with ``array_api_dispatch`` off
    and on (which needs ``SCIPY_ARRAY_API=1`` before SciPy is imported: a
    subprocess), on NumPy, torch and ``array_api_strict`` input.
    """
    pytest.importorskip("array_api_strict")
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    run = subprocess.run(
        [sys.executable, "-c", NAMESPACE_SCRIPT], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout)
    assert len(results) == 18
    for key, result in results.items():
        dispatch, kind, head = key.split("/")
        assert result["predictions"] == "numpy", key  # heads: host NumPy
        # StandardScaler keeps the namespace only with dispatch on; SLOT keeps a torch tensor a
        # tensor (on its device) and reads other namespaces into NumPy
        expected = "torch" if dispatch == "True" and kind == "torch" else "numpy"
        assert result["aligned"] == expected, key
        reference = results[f"False/numpy/{head}"]["accuracy"]
        assert result["accuracy"] == pytest.approx(reference, abs=0.01), key


def test_gradients_flow_through_transform_not_into_the_reference(federated):
    """A ``requires_grad`` tensor: transform is differentiable in X (the maps are constants)."""
    X, client = federated.X, federated.client
    slot = SLOTTransformer(tau=0.7, **PAPER).fit(torch.tensor(X, requires_grad=True), client=client)
    expected = SLOTTransformer(tau=0.7, **PAPER).fit(X, client=client)
    np.testing.assert_allclose(
        slot.reference_.covariance, expected.reference_.covariance, rtol=1e-10
    )
    streamed = GaussianSummaryEstimator()  # partial_fit summarises grad-tracking rows too
    for part in np.array_split(np.arange(X.shape[0]), 3):
        streamed.partial_fit(torch.tensor(X[part], requires_grad=True), client=client[part])
    whole = GaussianSummaryEstimator().fit(X, client=client)
    for label, summary in whole.summaries_.items():
        np.testing.assert_allclose(
            streamed.summaries_[label].covariance, summary.covariance, rtol=1e-10
        )
    weights = torch.tensor(np.random.default_rng(0).normal(size=X.shape[1]))
    X_grad = torch.tensor(X, requires_grad=True)
    Z = slot.transform(X_grad, client=client)
    (Z @ weights).sum().backward()
    np.testing.assert_allclose(
        Z.detach().numpy(), expected.transform(X, client=client), rtol=1e-8, atol=1e-12
    )
    for label in np.unique(client):  # d(sum_i w . (A x_i + b)) / d x_i = A^T w
        A = slot.maps_[label].geodesic(0.7).linear
        rows = X_grad.grad[torch.as_tensor(client == label)].numpy()
        np.testing.assert_allclose(rows, np.tile(A.T @ weights.numpy(), (rows.shape[0], 1)))
