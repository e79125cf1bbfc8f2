"""The moments pass bounds the rows' largest magnitude (what the summary's input checks use)."""

import numpy as np
import pytest

from skslot._moments import RowMagnitude, ShiftedMoments
from skslot._validation import FEATURE_RANGE


def assert_same_moments(a: ShiftedMoments, b: ShiftedMoments) -> None:
    assert a.n == b.n
    for name in ("shift", "s1", "gram", "s3"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or np.array_equal(x, y), name
    assert a.s4 == b.s4


SCALES = [(s, np.float64) for s in (1e-45, 1e-20, 1.0, 1e20, 1e45)] + [
    (s, np.float32) for s in (1e-20, 1.0, 1e20)
]


@pytest.mark.parametrize(("scale", "dtype"), SCALES)
@pytest.mark.parametrize("loc", [0.0, 3.0, -1e3])
def test_bounds_hold_and_the_moments_are_those_of_from_rows(rng, scale, dtype, loc):
    X = ((rng.normal(size=(300, 7)) * rng.uniform(0.1, 5.0, 7) + loc) * scale).astype(dtype)
    rows = rng.permutation(300)[:211]
    for kw in ({}, {"rows": rows}, {"chunk_size": 16}, {"shift": np.zeros(7), "clip_norm": 1.0}):
        moments, magnitude = ShiftedMoments.with_magnitude(X, **kw)
        assert_same_moments(moments, ShiftedMoments.from_rows(X, **kw))
        largest = float(np.abs(X if "rows" not in kw else X[rows]).max())
        assert magnitude.lower <= largest <= magnitude.upper
    if scale in (1e-20, 1.0, 1e20):  # the ordinary case needs no second look at the rows
        assert magnitude.within(*FEATURE_RANGE)


def test_nan_and_infinity_leave_the_question_open_without_warnings(rng):
    for value in (np.nan, np.inf, -np.inf):
        X = rng.normal(size=(40, 3))
        X[17, 1] = value
        with np.errstate(all="raise"):  # no floating-point warning on the unchecked rows
            _, magnitude = ShiftedMoments.with_magnitude(X, chunk_size=8)
        assert not magnitude.within(*FEATURE_RANGE)
        assert not np.isfinite(magnitude.upper)
    X = rng.normal(size=(40, 3))
    X[0, 0] = np.nan  # in the first chunk: the shift itself is NaN
    _, magnitude = ShiftedMoments.with_magnitude(X, chunk_size=8)
    assert np.isnan(magnitude.upper)


def test_constant_and_zero_rows(rng):
    _, zero = ShiftedMoments.with_magnitude(np.zeros((10, 4)))
    assert zero.lower == 0.0 and zero.upper == 0.0
    assert not zero.within(*FEATURE_RANGE)  # all zero or too small: an exact check decides
    _, constant = ShiftedMoments.with_magnitude(np.full((10, 4), -7.0))
    assert constant.lower == pytest.approx(7.0) and constant.within(*FEATURE_RANGE)


def test_join_and_within():
    parts = [RowMagnitude(1.0, 2.0), RowMagnitude(0.5, 4.0)]
    assert RowMagnitude.join(parts) == RowMagnitude(1.0, 4.0)
    assert np.isnan(RowMagnitude.join([*parts, RowMagnitude(np.nan, np.nan)]).upper)
    low, high = FEATURE_RANGE
    assert RowMagnitude(2 * low, high / 2).within(low, high)
    assert not RowMagnitude(1.9 * low, 1.0).within(low, high)  # the factor 2 to spare
    assert not RowMagnitude(1.0, 0.6 * high).within(low, high)
    assert not RowMagnitude(np.nan, np.nan).within(low, high)


def test_tensor_rows_give_the_same_bounds(rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch")
    X = rng.normal(loc=2.0, size=(50, 5))
    moments, magnitude = ShiftedMoments.with_magnitude(torch.tensor(X), chunk_size=16)
    expected, bounds = ShiftedMoments.with_magnitude(X, chunk_size=16)
    np.testing.assert_allclose(moments.gram, expected.gram, rtol=1e-12)
    assert magnitude.lower == pytest.approx(bounds.lower, rel=1e-12)
    assert magnitude.upper == pytest.approx(bounds.upper, rel=1e-12)
    X[3, 3] = np.nan
    _, magnitude = ShiftedMoments.with_magnitude(torch.tensor(X), chunk_size=16)
    assert np.isnan(magnitude.upper)
