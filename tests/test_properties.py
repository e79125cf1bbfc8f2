"""Property-based tests of the core maths over random dimensions, counts and conditioning."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skslot import BuresBarycenter, GaussianMap, GaussianSummary, SLOTTransformer
from skslot._linalg import sym_eigh
from skslot.maps import bures_wasserstein_distance

from .conftest import PAPER

PROPERTY = settings(max_examples=40, deadline=None)
#: The problems include K = 1: one client is its own barycenter, and BuresBarycenter says so.
ONE_CLIENT_TOO = pytest.mark.filterwarnings(
    "ignore:BuresBarycenter was fitted on a single client:skslot.SingleClientWarning"
)


def random_summaries(seed, m, K, log_condition):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
        spectrum = np.exp(rng.uniform(0, log_condition, size=m)) * rng.uniform(0.1, 10)
        out.append(
            GaussianSummary(
                int(rng.integers(2, 1000)), rng.normal(size=m) * 5, (Q * spectrum) @ Q.T, client=k
            )
        )
    return out


problems = st.tuples(
    st.integers(0, 2**32 - 1),  # seed
    st.integers(1, 6),  # m
    st.integers(1, 5),  # K
    st.floats(0.0, np.log(1e6)),  # log condition number
)


def relative(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@ONE_CLIENT_TOO
@PROPERTY
@given(problems)
def test_barycenter_solves_its_fixed_point_equation(problem):
    summaries = random_summaries(*problem)
    bary = BuresBarycenter(tol=1e-11, max_iter=1000).fit(summaries)
    S = bary.covariance_
    R = sym_eigh(S).sqrt()
    M = sum(
        w * sym_eigh(R @ s.covariance @ R).sqrt()
        for w, s in zip(bary.weights_, summaries, strict=True)
    )
    assert relative(M, S) <= 1e-9


@ONE_CLIENT_TOO
@PROPERTY
@given(problems, st.floats(0.0, 1.0))
def test_maps_push_exactly_and_contract_w2(problem, tau):
    summaries = random_summaries(*problem)
    bary = BuresBarycenter(tol=1e-11, max_iter=1000).fit(summaries)
    ref = bary.reference_
    for s, T in zip(summaries, bary.maps().values(), strict=True):
        pushed = T.push(s)
        assert relative(pushed.covariance, ref.covariance) <= 1e-8
        full2 = bures_wasserstein_distance(s, ref) ** 2
        part2 = bures_wasserstein_distance(T.geodesic(tau).push(s), ref) ** 2
        assert abs(part2 - (1 - tau) ** 2 * full2) <= 1e-7 * max(full2, np.trace(ref.covariance))


@ONE_CLIENT_TOO
@PROPERTY
@given(problems, st.randoms(use_true_random=False))
def test_barycenter_ignores_client_order(problem, rnd):
    summaries = random_summaries(*problem)
    shuffled = list(summaries)
    rnd.shuffle(shuffled)
    a = BuresBarycenter(tol=1e-11, max_iter=1000).fit(summaries)
    b = BuresBarycenter(tol=1e-11, max_iter=1000).fit(shuffled)
    assert relative(b.covariance_, a.covariance_) <= 1e-8
    np.testing.assert_allclose(b.mean_, a.mean_, rtol=1e-12, atol=1e-12)


@ONE_CLIENT_TOO
@PROPERTY
@given(problems, st.floats(-3, 3))
def test_barycenter_is_equivariant_under_rotation_and_scaling(problem, log_scale):
    summaries = random_summaries(*problem)
    m = summaries[0].dimension
    Q, _ = np.linalg.qr(np.random.default_rng(problem[0] + 1).normal(size=(m, m)))
    c = float(np.exp(log_scale))
    moved = [GaussianSummary(s.n, c * Q @ s.mean, c**2 * Q @ s.covariance @ Q.T) for s in summaries]
    a = BuresBarycenter(tol=1e-11, max_iter=1000).fit(summaries)
    b = BuresBarycenter(tol=1e-11, max_iter=1000).fit(moved)
    assert relative(b.covariance_, c**2 * Q @ a.covariance_ @ Q.T) <= 1e-8
    for (_, Ta), (_, Tb) in zip(a.maps().items(), b.maps().items(), strict=True):
        assert relative(Tb.linear, Q @ Ta.linear @ Q.T) <= 1e-7


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 5),
    st.integers(2, 4),
    st.floats(-6, 6),
    st.floats(0, 1),
)
def test_transformer_output_scales_with_a_common_rescaling(seed, m, K, log_scale, tau):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(3 * m + 5, m)) * rng.uniform(0.5, 3, m) + k for k in range(K)])
    client = np.repeat(np.arange(K), 3 * m + 5)
    c = float(10.0**log_scale)
    Z = SLOTTransformer(tau=tau, **PAPER).fit_transform(X, client=client)
    Zc = SLOTTransformer(tau=tau, **PAPER).fit_transform(c * X, client=client)
    np.testing.assert_allclose(Zc, c * Z, rtol=1e-8, atol=1e-8 * c * np.abs(Z).max())


def test_geodesic_endpoints():
    rng = np.random.default_rng(0)
    T = GaussianMap(np.diag(rng.uniform(1, 2, 3)), rng.normal(size=3))
    np.testing.assert_array_equal(T.geodesic(0.0).linear, np.eye(3))
    np.testing.assert_allclose(T.geodesic(1.0).linear, T.linear)
