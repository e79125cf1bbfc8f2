"""Differentially private summaries: the noise formula, its wiring, clipping, PD repair."""

import math

import numpy as np
import pytest
from scipy.special import log_ndtr, ndtr
from sklearn.covariance import OAS, oas

from skslot import GaussianSummaryEstimator, SmallClientWarning
from skslot._moments import ShiftedMoments
from skslot.ledoit_wolf import oas_shrinkage
from skslot.privacy import (
    MAX_EPSILON,
    SUMMARY_SENSITIVITY,
    PrivacyWarning,
    gaussian_noise_scale,
    noisy_moments,
    psd_projection,
)

# these tests fix the noise on purpose (reproducible checks); the warning is tested below
pytestmark = pytest.mark.filterwarnings("ignore:random_state fixes the privacy noise")


def exact_delta(sigma, epsilon, sensitivity):
    """The smallest delta of N(0, sigma^2) noise at epsilon (Balle and Wang 2018, Theorem 8)."""
    a, b = sensitivity / (2.0 * sigma), epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 16.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-9])
def test_the_calibrated_noise_meets_the_exact_gaussian_condition(epsilon, delta):
    sigma = gaussian_noise_scale(epsilon, delta, 2.5)
    assert exact_delta(sigma, epsilon, 2.5) <= delta * (1 + 1e-9)
    # and it is the smallest such noise, to the accountant's precision
    assert exact_delta(sigma * (1 - 1e-5), epsilon, 2.5) > delta
    # sigma scales linearly with the sensitivity
    assert gaussian_noise_scale(epsilon, delta, 5.0) == pytest.approx(2 * sigma, rel=1e-12)
    if epsilon < 1:  # never more noise than the classical mechanism (valid for eps < 1)
        assert sigma <= 2.5 * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def test_sigma_decreases_with_epsilon_and_delta():
    sigmas = [gaussian_noise_scale(eps, 1e-5, 1.0) for eps in (1, 4, 16)]
    assert sigmas[0] > sigmas[1] > sigmas[2] > 0
    assert gaussian_noise_scale(1, 1e-3, 1.0) < gaussian_noise_scale(1, 1e-6, 1.0)
    with pytest.raises(ValueError, match="delta"):
        gaussian_noise_scale(1.0, 1.0, 1.0)


def test_sensitivity_bounds_replacing_one_row_of_the_unit_ball():
    rng = np.random.default_rng(0)
    iu = np.triu_indices(4)
    worst = 0.0
    for _ in range(3000):
        u, u2 = rng.normal(size=(2, 4))
        u, u2 = (v / max(np.linalg.norm(v), 1.0) * rng.uniform(0.5, 1) for v in (u, u2))
        change = np.concatenate([u - u2, (np.outer(u, u) - np.outer(u2, u2))[iu]])
        worst = max(worst, np.linalg.norm(change))
    assert worst <= SUMMARY_SENSITIVITY
    # the bound is reached: two unit rows at 120 degrees, oriented so that the
    # change of G is diagonal (its upper triangle then carries all of it)
    u, v = (np.array([np.cos(a), np.sin(a)]) for a in np.radians([-15.0, 105.0]))
    iu = np.triu_indices(2)
    change = np.concatenate([u - v, (np.outer(u, u) - np.outer(v, v))[iu]])
    assert np.linalg.norm(change) == pytest.approx(SUMMARY_SENSITIVITY, rel=1e-12)


def test_private_summaries_are_scale_equivariant():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(80, 5))
    small = GaussianSummaryEstimator(epsilon=2.0, clip_norm=1.5, random_state=3).fit(X)
    large = GaussianSummaryEstimator(epsilon=2.0, clip_norm=1.5e4, random_state=3).fit(X * 1e4)
    a, b = small.summaries_[None], large.summaries_[None]
    np.testing.assert_allclose(b.mean, 1e4 * a.mean, rtol=1e-9)
    np.testing.assert_allclose(b.covariance, 1e8 * a.covariance, rtol=1e-8)
    assert large.noise_scale_ == small.noise_scale_


def test_noise_has_the_stated_scale_and_symmetry():
    rng = np.random.default_rng(1)
    m, sigma = 3, 0.7
    base = ShiftedMoments(10, np.zeros(m), np.zeros(m), np.zeros((m, m)))
    draws = [noisy_moments(base, sigma, rng) for _ in range(4000)]
    s1 = np.array([d.s1 for d in draws])
    gram = np.array([d.gram for d in draws])
    np.testing.assert_allclose(s1.std(axis=0), sigma, rtol=0.06)
    np.testing.assert_allclose(gram.std(axis=0), sigma, rtol=0.06)
    np.testing.assert_array_equal(gram, np.swapaxes(gram, 1, 2))
    with pytest.raises(ValueError, match="about zero"):
        noisy_moments(ShiftedMoments(10, np.ones(m), np.zeros(m), np.zeros((m, m))), sigma, rng)


def test_estimator_releases_the_clipped_sum_with_noise_scale_sigma():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 4)) * 3  # most rows longer than the clip bound
    C = 2.0
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    clipped_sum = (X * np.minimum(1, C / norms)).sum(axis=0)
    released = []
    for seed in range(600):
        est = GaussianSummaryEstimator(epsilon=4.0, clip_norm=C, random_state=seed).fit(X)
        released.append(est.summaries_[None].mean * 200)
    sigma = gaussian_noise_scale(4.0, 1e-5, 3 / np.sqrt(2))  # rows in units of C
    assert est.noise_scale_ == sigma
    errors = np.array(released) - clipped_sum
    np.testing.assert_allclose(errors.mean(axis=0), 0, atol=4 * C * sigma / np.sqrt(600))
    np.testing.assert_allclose(errors.std(axis=0), C * sigma, rtol=0.1)


def test_negligible_noise_gives_the_oas_estimate_of_the_clipped_rows():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True).max()  # every row within the bound
    est = GaussianSummaryEstimator(epsilon=1e6, clip_norm=1.0, random_state=0).fit(X)
    assert est.noise_scale_ < 2e-3  # sigma ~ Delta / sqrt(2 epsilon) for large epsilon
    summary = est.summaries_[None]
    error = 6 * est.noise_scale_ / X.shape[0]  # six standard deviations of a sum's noise / n
    np.testing.assert_allclose(summary.mean, X.mean(axis=0), rtol=0, atol=error)
    np.testing.assert_allclose(summary.covariance, OAS().fit(X).covariance_, rtol=0, atol=error)
    assert summary.shrinkage == pytest.approx(oas(X)[1], rel=1e-2)


def test_oas_shrinkage_matches_scikit_learn():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 10))
    S = np.cov(X.T, bias=True)
    assert oas_shrinkage(S, 40) == pytest.approx(oas(X)[1], rel=1e-12)


def test_strong_noise_still_gives_a_positive_definite_finite_summary():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(20, 30))  # n < m and epsilon small: the noise dominates
    est = GaussianSummaryEstimator(epsilon=0.1, clip_norm=1.0, random_state=0)
    with pytest.warns(SmallClientWarning, match=r"client\(s\) 0, 1 hold no more rows than the 30 "):
        summary = est.fit(X, client=np.repeat([0, 1], 10)).summaries_[1]
    assert np.all(np.isfinite(summary.covariance))
    assert np.linalg.eigvalsh(summary.covariance).min() > 0


def test_psd_projection_is_the_nearest_psd_matrix():
    S = np.array([[2.0, 0.0], [0.0, -1.0]])
    np.testing.assert_array_equal(psd_projection(S), [[2.0, 0.0], [0.0, 0.0]])
    rng = np.random.default_rng(6)
    A = rng.normal(size=(5, 5))
    A = A + A.T
    P = psd_projection(A)
    assert np.linalg.eigvalsh(P).min() >= -1e-12
    for _ in range(100):  # no random PSD matrix is closer
        B = rng.normal(size=(5, 5))
        assert np.linalg.norm(A - P) <= np.linalg.norm(A - B @ B.T) + 1e-12


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"epsilon": 1.0}, "epsilon needs clip_norm"),
        ({"clip_norm": 1.0}, "clip_norm is only used with epsilon"),
        ({"epsilon": 0.0, "clip_norm": 1.0}, "epsilon"),
        ({"epsilon": 1.0, "clip_norm": 1.0, "delta": 1.0}, "delta"),
        ({"epsilon": 1.0, "clip_norm": -1.0}, "clip_norm"),
    ],
)
def test_bad_privacy_parameters_are_clear_errors(params, message):
    with pytest.raises(ValueError, match=message):
        GaussianSummaryEstimator(**params).fit(np.ones((5, 2)) + np.eye(5, 2))


def test_private_summaries_merge_before_the_noise():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(100, 3))
    params = {"epsilon": MAX_EPSILON, "clip_norm": 10.0, "random_state": 0}
    whole = GaussianSummaryEstimator(**params).fit(X)
    parts = (
        GaussianSummaryEstimator(**params)
        .fit(X[:40])
        .merge(GaussianSummaryEstimator(**params).fit(X[40:]))
    )
    np.testing.assert_allclose(
        parts.summaries_[None].covariance, whole.summaries_[None].covariance, rtol=1e-4
    )


@pytest.mark.filterwarnings("error::skslot.privacy.PrivacyWarning")
def test_default_noise_comes_from_fresh_entropy_not_the_global_seed(rng):
    """np.random.seed in the process cannot make the default noise reproducible."""
    X = rng.normal(size=(200, 3))
    releases = []
    for _ in range(2):
        np.random.seed(0)  # noqa: NPY002 - the legacy global seed is what is tested
        est = GaussianSummaryEstimator(epsilon=1.0, clip_norm=5.0, delta=1e-5).fit(X)
        releases.append(est.summaries_[None].mean)
    assert not np.allclose(releases[0], releases[1])
    assert est.releases_ == {None: 1}


def test_a_fixed_seed_and_a_large_delta_warn(rng):
    X = rng.normal(size=(50, 3))
    with pytest.warns(PrivacyWarning, match="random_state fixes the privacy noise"):
        GaussianSummaryEstimator(epsilon=1.0, clip_norm=5.0, random_state=0).fit(X)
    with pytest.warns(PrivacyWarning, match=r"delta = 0.1 exceeds 1 / n = 0.02"):
        GaussianSummaryEstimator(epsilon=1.0, clip_norm=5.0, delta=0.1).fit(X)


@pytest.mark.filterwarnings("ignore::skslot.privacy.PrivacyWarning")
def test_every_partial_fit_is_a_release(rng):
    est = GaussianSummaryEstimator(epsilon=1.0, clip_norm=5.0)
    for chunk in np.array_split(rng.normal(size=(90, 3)), 3):
        est.partial_fit(chunk)
    assert est.releases_ == {None: 3}
