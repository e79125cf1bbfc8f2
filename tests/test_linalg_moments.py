import numpy as np
import pytest

from skslot._linalg import is_positive_definite, sym_eigh, trace_sqrt
from skslot._moments import ShiftedMoments

from .conftest import random_spd


def test_sqrt_and_inverse_sqrt_share_one_factorisation(rng):
    A = random_spd(rng, 6, condition=1e4)
    eig = sym_eigh(A)
    R, Rinv = eig.sqrt(), eig.inv_sqrt()
    np.testing.assert_allclose(R @ R, A, rtol=1e-10, atol=1e-10 * np.abs(A).max())
    np.testing.assert_allclose(R @ Rinv, np.eye(6), atol=1e-9)
    assert trace_sqrt(A) == pytest.approx(np.trace(R), rel=1e-12)


def test_weighted_sqrt_sum_equals_the_sum_of_square_roots(rng):
    stack = np.stack([random_spd(rng, 7, 100.0) for _ in range(4)])
    stack[2] = np.diag([0.0, 1.0, 4.0, 9.0, 0.0, 2.0, 3.0])  # singular: a zero root direction
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    expected = sum(w * sym_eigh(A).sqrt() for w, A in zip(weights, stack, strict=True))
    got = sym_eigh(stack).weighted_sqrt_sum(weights)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got, got.T)


def test_inverse_sqrt_rejects_singular():
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        sym_eigh(np.diag([1.0, 0.0])).inv_sqrt()
    assert not is_positive_definite(np.diag([1.0, -1e-3]))


@pytest.mark.parametrize("fourth_order", [True, False])
def test_recentring_and_merge_are_exact(rng, fourth_order):
    X = rng.normal(loc=50.0, size=(101, 5))
    whole = ShiftedMoments.from_rows(X, fourth_order=fourth_order).centred()
    parts = [
        ShiftedMoments.from_rows(X[i : i + 17], fourth_order=fourth_order)
        for i in range(0, 101, 17)
    ]
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merge(p)
    merged = merged.centred()
    Z = X - X.mean(0)
    np.testing.assert_allclose(merged.mean, X.mean(0), rtol=1e-13)
    np.testing.assert_allclose(merged.gram, Z.T @ Z, rtol=1e-10)
    np.testing.assert_allclose(whole.gram, Z.T @ Z, rtol=1e-10)
    if fourth_order:
        r = (Z**2).sum(1)
        np.testing.assert_allclose(merged.s3, Z.T @ r, rtol=1e-7, atol=1e-9 * np.abs(Z.T @ r).max())
        assert merged.s4 == pytest.approx((r**2).sum(), rel=1e-10)


def test_merge_rejects_other_dimension(rng):
    a = ShiftedMoments.from_rows(rng.normal(size=(4, 2)))
    b = ShiftedMoments.from_rows(rng.normal(size=(4, 3)))
    with pytest.raises(ValueError, match="dimension"):
        a.merge(b)
