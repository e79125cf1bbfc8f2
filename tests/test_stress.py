"""Numerical stress: each case gives a correct result, never a silent NaN or inf."""

import contextlib

import numpy as np
import pytest

from skslot import BuresBarycenter, SingleClientWarning, SLOTTransformer, SmallClientWarning

from .conftest import PAPER


def rotated(rng, n, m, condition):
    Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
    return rng.normal(size=(n, m)) * np.sqrt(np.geomspace(1, condition, m)) @ Q.T


def case(name):
    rng = np.random.default_rng(0)
    two = np.repeat([0, 1], 50)
    if name.startswith("scale"):
        s = float(name.split()[1])
        return rng.normal(size=(100, 4)) * s + np.outer(two, [0, s, 0, 0]), two
    if name == "condition 1e12, non-commuting":
        return np.vstack([rotated(rng, 300, 6, 1e12) for _ in range(3)]), np.repeat([0, 1, 2], 300)
    if name == "m = 1":
        return rng.normal(size=(40, 1)) + np.repeat([[0.0], [3.0]], 20, axis=0), np.repeat(
            [0, 1], 20
        )
    if name == "n = 2 per client":
        return rng.normal(size=(4, 3)), np.array([0, 0, 1, 1])
    if name == "n << m":
        return rng.normal(size=(20, 200)), np.repeat([0, 1], 10)
    if name == "duplicated rows":
        return np.repeat(rng.normal(size=(10, 3)), 10, axis=0), np.tile([0, 1], 50)
    if name == "one client":
        return rng.normal(size=(30, 3)), np.zeros(30, dtype=int)
    if name == "1000 clients":
        X = rng.normal(size=(3000, 4)) + np.repeat(rng.normal(size=(1000, 4)), 3, axis=0)
        return X, np.repeat(np.arange(1000), 3)
    if name == "float16 input":
        return rng.normal(size=(100, 4)).astype(np.float16), two
    if name == "float32 input":
        return rng.normal(size=(100, 4)).astype(np.float32), two
    raise ValueError(name)


CASES = [
    "scale 1e-8",
    "scale 1e8",
    "condition 1e12, non-commuting",
    "m = 1",
    "n = 2 per client",
    "n << m",
    "duplicated rows",
    "one client",
    "1000 clients",
    "float16 input",
    "float32 input",
]

#: What the fit says of the cases whose clients are degenerate on purpose.
SAID = {
    "n = 2 per client": (SmallClientWarning, r"client\(s\) 0, 1 hold no more rows than the 3 "),
    "n << m": (SmallClientWarning, r"client\(s\) 0, 1 hold no more rows than the 200 "),
    "one client": (SingleClientWarning, "SLOTTransformer was fitted on a single client"),
    "1000 clients": (SmallClientWarning, r"\(1000 in all\) hold no more rows than the 4 "),
}


@pytest.mark.parametrize("name", CASES)
def test_full_transport_is_exact_under_stress(name):
    X, client = case(name)
    category, message = SAID.get(name, (None, None))
    said = pytest.warns(category, match=message) if category else contextlib.nullcontext()
    with said:
        slot = SLOTTransformer(tau=1.0, barycenter=BuresBarycenter(form="dense"), **PAPER)
        slot.fit(X, client=client)  # m x m
    Z = slot.transform(X, client=client)
    assert np.all(np.isfinite(Z))
    assert Z.dtype == (np.float32 if X.dtype == np.float32 else np.float64)
    ref = slot.reference_
    scale = np.abs(ref.covariance).max()
    for k in slot.clients_:
        pushed = slot.maps_[k].push(slot.summaries_[k])
        assert np.abs(pushed.covariance - ref.covariance).max() <= 1e-8 * scale
        rows = client == k
        tol = 1e-4 if X.dtype == np.float32 else 1e-9
        assert np.abs(Z[rows].mean(0) - ref.mean).max() <= tol * (np.abs(Z).max() + 1e-300)


@pytest.mark.parametrize("factor", [1e-6, 1e6])
def test_uniform_rescaling_rescales_the_output(factor):
    X, client = case("condition 1e12, non-commuting")
    Z = SLOTTransformer(tau=0.4, **PAPER).fit_transform(X, client=client)
    Z_scaled = SLOTTransformer(tau=0.4, **PAPER).fit_transform(factor * X, client=client)
    np.testing.assert_allclose(
        Z_scaled, factor * Z, rtol=1e-9, atol=1e-9 * np.abs(factor * Z).max()
    )
