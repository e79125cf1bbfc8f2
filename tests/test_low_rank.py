"""Low-rank summaries, their barycenter and maps: equal to the dense paths, never m x m."""

import tracemalloc
import warnings

import numpy as np
import pytest
from sklearn.covariance import LedoitWolf

from skslot import (
    BuresBarycenter,
    GaussianMap,
    GaussianSummary,
    GaussianSummaryEstimator,
    InvalidSummaryError,
    SLOTTransformer,
)
from skslot._barycenter_kernel import bures_wasserstein_barycenter
from skslot._linalg import common_basis
from skslot.barycenter import _low_rank_barycenter
from skslot.exceptions import SmallClientWarning, UnknownClientWarning
from skslot.ledoit_wolf import low_rank_summary

from .conftest import assert_close_in_norm, few_rows_per_client


def rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


def low_rank_barycenter(summaries, **settings):
    """The reference, maps and record on the span of the bases, weights ``n_k / N``."""
    counts = np.array([s.n for s in summaries], dtype=np.float64)
    return _low_rank_barycenter(summaries, counts / counts.sum(), **settings)


def clients(rng, m, sizes):
    """Rows of anisotropic, shifted Gaussians: one client per size."""
    return [
        (rng.normal(0.5 * k, 1.0, size=(n, m)) * rng.uniform(0.2, 3.0, size=m)) + 10.0
        for k, n in enumerate(sizes)
    ]


@few_rows_per_client  # the dense estimator warns where the low-rank form is for
@pytest.mark.parametrize("shape", [(30, 60), (100, 400), (3, 50), (2, 7), (60, 20), (40, 1)])
def test_from_rows_is_scikit_learn_s_ledoit_wolf(rng, shape):
    X = rng.normal(loc=3.0, size=shape) * rng.uniform(0.1, 5.0, size=shape[1])
    lw = LedoitWolf().fit(X)
    s = low_rank_summary(X, client="a")
    assert s.rank == min(shape[0] - 1, shape[1]) or shape[1] == 1
    assert rel(s.mean, lw.location_) <= 1e-12
    # (2, 7): no shrinkage, so the floor (1e-8 of the mean variance) lifts the null space
    floored = s.shrinkage * np.trace(lw.covariance_) / shape[1] < 1e-8 * lw.covariance_.max()
    assert rel(s.covariance, lw.covariance_) <= (1e-8 if floored else 1e-10)
    assert s.shrinkage == pytest.approx(lw.shrinkage_, rel=1e-10, abs=1e-14)
    assert (s.n, s.client) == (shape[0], "a")
    dense = GaussianSummaryEstimator().fit(X).summaries_[None]
    assert rel(s.to_dense().covariance, dense.covariance) <= 1e-10


@few_rows_per_client
def test_identical_rows_get_the_dense_summary_s_floor(rng):
    X = np.tile(rng.normal(size=(1, 30)), (5, 1))
    with pytest.warns(UserWarning, match="zero sample covariance"):
        s = low_rank_summary(X)
    with pytest.warns(UserWarning, match="zero sample covariance"):
        dense = GaussianSummaryEstimator().fit(X).summaries_[None]
    assert s.rank == 0
    assert rel(s.covariance, dense.covariance) <= 1e-12


def test_from_rows_never_forms_an_m_by_m_matrix(rng):
    n, m = 40, 3000
    X = rng.normal(size=(n, m))
    tracemalloc.start()
    low_rank_summary(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 10 * n * m * 8  # a dense covariance alone is m^2 * 8 = 72 MB
    assert peak < m * m * 8 / 10


def test_common_basis_is_orthonormal_and_holds_every_basis(rng):
    m = 50
    U1 = np.linalg.qr(rng.normal(size=(m, 6)))[0]
    U2 = np.linalg.qr(rng.normal(size=(m, 4)))[0]
    inside = np.linalg.qr(U1[:, :3] @ rng.normal(size=(3, 3)))[0]  # a span already held
    V = common_basis([U1, U2, inside, U1])
    assert V.shape == (m, 10)
    assert np.abs(V.T @ V - np.eye(10)).max() <= 1e-13
    for U in (U1, U2, inside):
        assert np.abs(U - V @ (V.T @ U)).max() <= 1e-12


@pytest.mark.parametrize(
    ("m", "sizes"),
    [(300, [30, 40, 25, 50]), (60, [30, 40, 25, 50]), (120, [15, 90])],
    ids=["span smaller than m", "span is the whole space", "one client with more rows"],
)
def test_the_barycenter_on_the_span_is_the_dense_barycenter(rng, m, sizes):
    lows = [low_rank_summary(X) for X in clients(rng, m, sizes)]
    reference, _, result = low_rank_barycenter(lows, tol=1e-12)
    w = np.array(sizes) / sum(sizes)
    dense = bures_wasserstein_barycenter(np.stack([s.covariance for s in lows]), w, tol=1e-12)
    assert result.converged and dense.converged
    assert rel(reference.covariance, dense.covariance) <= 1e-8
    assert rel(reference.mean, w @ np.stack([s.mean for s in lows])) <= 1e-14
    assert reference.n == sum(sizes)
    assert reference.rank == min(m, sum(min(n - 1, m) for n in sizes))
    # the complement's scalar: (sum_k w_k c_k^{1/2})^2
    expected = (w @ np.sqrt([s.complement for s in lows])) ** 2
    assert reference.complement == pytest.approx(expected, rel=1e-14)


def test_mixed_dense_and_low_rank_clients(rng):
    m = 40
    X_small, X_large = clients(rng, m, [12, 200])
    small = low_rank_summary(X_small)
    large = GaussianSummaryEstimator().fit(X_large).summaries_[None].to_low_rank()
    assert large.rank == m
    reference = low_rank_barycenter([small, large], tol=1e-12)[0]
    dense = bures_wasserstein_barycenter(
        np.stack([small.covariance, large.covariance]), np.array([12, 200]) / 212, tol=1e-12
    )
    assert rel(reference.covariance, dense.covariance) <= 1e-8


@pytest.mark.parametrize("tau", [0.0, 0.4, 1.0])
def test_the_maps_are_the_dense_maps(rng, tau):
    m = 200
    lows = [low_rank_summary(X) for X in clients(rng, m, [20, 35, 28])]
    reference, maps, _ = low_rank_barycenter(lows, tol=1e-12)
    target = reference.to_dense()
    rows = rng.normal(size=(9, m)) + 10.0
    for source, own in zip(lows, maps, strict=True):
        dense = GaussianMap.optimal_transport(source.to_dense(), target).geodesic(tau)
        for T in (
            own,  # from the iteration's factorisations
            GaussianMap.optimal_transport(source, reference, basis=reference.basis),
            GaussianMap.optimal_transport(source, reference),  # on the pair's own span
        ):
            T = T.geodesic(tau)
            assert rel(T.dense().linear, dense.linear) <= 1e-8
            assert rel(T.apply(rows), dense.apply(rows)) <= 1e-10
            counts = np.array([4.0, 5.0])
            sums = np.vstack([rows[:4].sum(axis=0), rows[4:].sum(axis=0)])
            assert rel(T.push_sums(sums, counts), dense.push_sums(sums, counts)) <= 1e-10
    # the full map pushes the source onto the reference: A S_s A = S_b
    A = GaussianMap.optimal_transport(lows[0], reference).dense().linear
    assert rel(A @ lows[0].covariance @ A, reference.covariance) <= 1e-8


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"basis": np.ones((5, 2))}, "not orthonormal"),
        ({"eigenvalues": [1.0, -1.0]}, "eigenvalues must be positive"),
        ({"eigenvalues": [1.0]}, "1 eigenvalues for a basis of 2 columns"),
        ({"complement": 0.0}, "complement must be positive"),
        ({"mean": np.zeros(4)}, "basis has 5 rows, expected 4"),
        ({"mean": [0, 0, np.nan, 0, 0]}, "mean contains NaN"),
        ({"n": 1}, "n must be between 2"),
        ({"complement": 1e120, "eigenvalues": [1e120, 1e120]}, "outside the supported range"),
        ({"mean": [1e101, 0, 0, 0, 0]}, "exceed the supported magnitude"),
    ],
)
def test_invalid_summaries_are_refused_naming_the_problem(changes, message):
    good = {
        "n": 10,
        "mean": np.zeros(5),
        "basis": np.eye(5)[:, :2],
        "eigenvalues": [2.0, 3.0],
        "complement": 0.5,
    }
    GaussianSummary(**good)
    with pytest.raises(InvalidSummaryError, match=message):
        GaussianSummary(**{**good, **changes})


def test_bad_rows_and_mismatched_clients_are_refused(rng):
    with pytest.raises(ValueError, match="at least 2 rows"):
        low_rank_summary(rng.normal(size=(1, 5)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        low_rank_summary(np.full((3, 5), np.inf))
    a = low_rank_summary(rng.normal(size=(4, 5)))
    b = low_rank_summary(rng.normal(size=(4, 6)))
    with pytest.raises(ValueError, match="dimensions"):
        BuresBarycenter().fit([a, b])
    with pytest.raises(ValueError, match="weights must be finite, non-negative"):
        BuresBarycenter(weights=[0.9, -0.3]).fit([a, a])
    with pytest.raises(ValueError, match="different dimensions"):
        GaussianMap.optimal_transport(a, b)


def test_the_caller_s_rows_are_not_changed(rng):
    X = rng.normal(size=(10, 30))
    before = X.copy()
    s = low_rank_summary(X)
    T = GaussianMap.optimal_transport(s, s)
    Y = T.apply(X)
    np.testing.assert_array_equal(X, before)
    assert rel(Y, X) <= 1e-10  # a summary onto itself: the identity
    assert isinstance(s.to_dense(), GaussianSummary)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_wire_format_round_trips_and_is_small(rng, dtype):
    s = low_rank_summary(rng.normal(size=(30, 400)) + 5.0, client="clinic")
    payload = s.to_bytes(dtype)
    assert len(payload) == s.payload_size(dtype)
    assert len(s.to_dense().to_bytes(dtype)) > 6 * len(
        payload
    )  # m (m + 3) / 2 against m (r + 1) + r
    back = GaussianSummary.from_bytes(payload, expected_dimension=400)
    assert (back.n, back.client, back.shrinkage, back.rank) == (30, "clinic", s.shrinkage, 29)
    assert np.abs(back.basis.T @ back.basis - np.eye(29)).max() <= 1e-13  # orthonormal again
    eps = float(np.finfo(dtype).eps)
    assert rel(back.covariance, s.covariance) <= 50 * eps
    assert back.complement == s.complement  # in the header, exactly


def _header_with(payload: bytes, **fields) -> bytes:
    import struct

    layout = struct.Struct("<4sBBBxIIQdd")
    names = ["magic", "version", "dtype", "flags", "m", "r", "n", "shrinkage", "complement"]
    values = dict(zip(names, layout.unpack_from(payload), strict=True)) | fields
    return layout.pack(*(values[k] for k in names)) + payload[layout.size :]


def test_malformed_low_rank_payloads_are_refused_before_allocating(rng):
    from skslot.wire import SummaryFormatError

    s = low_rank_summary(rng.normal(size=(6, 20)), client=3)
    good = s.to_bytes("float64")
    cases = {
        "truncated": good[:-8],
        "oversized": good + b"\0" * 8,
        "bad magic": _header_with(good, magic=b"XXXX"),
        "rank 21 above the accepted 20": _header_with(good, r=21),
        "dimension 100000 outside": _header_with(good, m=100000),  # refused on the header
        "n must be between 2": _header_with(good, n=1),
        "NaN or infinite": _header_with(good, complement=float("nan")),
    }
    for message, payload in cases.items():
        with pytest.raises(SummaryFormatError, match=message):
            GaussianSummary.from_bytes(payload)
    with pytest.raises(SummaryFormatError, match="dimension mismatch"):
        GaussianSummary.from_bytes(good, expected_dimension=21)
    with pytest.raises(SummaryFormatError, match="rank 5 above the accepted 4"):
        GaussianSummary.from_bytes(good, max_rank=4)
    # a hostile basis: one direction sent twice (its covariance would count it twice)
    twice = GaussianSummary(
        6, s.mean, basis=s.basis, eigenvalues=s.eigenvalues, complement=s.complement
    )
    object.__setattr__(twice, "basis", np.column_stack([s.basis[:, :-1], s.basis[:, 0]]))
    with pytest.raises(SummaryFormatError, match="basis is not orthonormal"):
        GaussianSummary.from_bytes(twice.to_bytes("float64"))
    # a negative eigenvalue (the encoder refuses one: written into the bytes here)
    at = 40 + 8 + 20 * 8  # the header, the int64 label, the mean: the first eigenvalue
    negative = good[:at] + np.float64(-1.0).tobytes() + good[at + 8 :]
    with pytest.raises(InvalidSummaryError, match="eigenvalues must be positive"):
        GaussianSummary.from_bytes(negative)


def test_nearly_dependent_rows_still_give_an_orthonormal_basis(rng):
    """Singular values down to 1e-5 of the largest: the Gram's eigenvectors lose
    orthogonality (eps / 1e-10), so the summary comes from a QR factorisation."""
    from skslot.ledoit_wolf import _covariance_eigh

    left = np.linalg.qr(rng.normal(size=(21, 21)))[0][:, :20]
    right = np.linalg.qr(rng.normal(size=(300, 20)))[0]
    Z = (left * np.geomspace(1.0, 1e-5, 20)) @ right.T
    Z -= Z.mean(axis=0)
    W = np.linalg.eigh(Z @ Z.T)[1][:, -20:]
    gram_basis = Z.T @ (W / np.linalg.norm(Z.T @ W, axis=0))
    assert np.abs(gram_basis.T @ gram_basis - np.eye(20)).max() > 1e-10  # the Gram path's error
    lam, U = _covariance_eigh(Z)
    assert rel(lam, np.linalg.eigvalsh(Z.T @ Z / 21)[-20:]) <= 1e-12
    assert U.shape == (300, 20)
    assert np.abs(U.T @ U - np.eye(20)).max() <= 1e-13
    X = Z + 7.0
    s = low_rank_summary(X)
    assert rel(s.covariance, LedoitWolf().fit(X).covariance_) <= 1e-10


@pytest.mark.parametrize("n, m", [(20, 60), (80, 30)])
def test_summary_estimator_in_low_rank_form_equals_its_dense_form(n, m):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2 * n, m)) * rng.uniform(0.5, 2.0, size=m)
    client = np.repeat(["a", "b"], n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallClientWarning)
        low = GaussianSummaryEstimator(form="low-rank").fit(X, client=client)
        dense = GaussianSummaryEstimator().fit(X, client=client)
    assert low.clients_ == dense.clients_ == ["a", "b"]
    for label in low.clients_:
        got, want = low.summaries_[label], dense.summaries_[label]
        assert got.form == "low-rank" and got.client == label
        np.testing.assert_allclose(got.covariance, want.covariance, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12, atol=1e-12)
        assert got.shrinkage == pytest.approx(want.shrinkage, rel=1e-10)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"covariance": "within"}, "covariance='within' needs form='dense'"),
        ({"epsilon": 1.0, "clip_norm": 1.0}, "epsilon .* needs form='dense'"),
    ],
)
def test_summary_estimator_low_rank_form_refuses_what_needs_dense_moments(params, match):
    X, y = np.random.default_rng(0).normal(size=(10, 20)), np.repeat([0, 1], 5)
    with pytest.raises(ValueError, match=match):
        GaussianSummaryEstimator(form="low-rank", **params).fit(X, y)


@few_rows_per_client
def test_summary_estimator_low_rank_form_refuses_streaming_and_merging():
    X = np.random.default_rng(0).normal(size=(10, 20))
    est = GaussianSummaryEstimator(form="low-rank")
    assert not hasattr(est, "partial_fit")  # as scikit-learn hides what a setting lacks
    with pytest.raises(AttributeError, match="has no attribute 'partial_fit'") as refused:
        est.partial_fit(X)
    assert "partial_fit accumulates dense moments" in str(refused.value.__cause__)
    assert hasattr(GaussianSummaryEstimator(), "partial_fit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallClientWarning)
        est.fit(X)
    with pytest.raises(ValueError, match="merge accumulates dense moments"):
        est.merge(est)
    dense = GaussianSummaryEstimator().fit(X, client=np.repeat(["c", "d"], 5))
    with pytest.raises(ValueError, match="merge accumulates dense moments"):
        dense.merge(est)  # the other's summaries carry no moments: never dropped silently
    est.set_params(form="dense")  # its low-rank summaries cannot be extended either
    with pytest.raises(ValueError, match="partial_fit accumulates dense moments"):
        est.partial_fit(X)
    assert est.summaries_[None].form == "low-rank"
    with pytest.raises(ValueError, match="client 'b' has 1 sample"):
        GaussianSummaryEstimator(form="low-rank").fit(X[:3], client=["a", "a", "b"])


@pytest.mark.parametrize("mean_tau", [None, 0.0, 1.0, 0.3])
@pytest.mark.parametrize("tau", [0.0, 0.4, 1.0])
def test_low_rank_map_anchored_geodesic_equals_the_dense_maps(mean_tau, tau):
    rng = np.random.default_rng(5)
    source = low_rank_summary(rng.normal(size=(12, 40)) * 2.0 + 1.0)
    target = low_rank_summary(rng.normal(size=(15, 40)))
    low = GaussianMap.optimal_transport(source, target)
    want = low.dense().with_mean_fraction(mean_tau, source.mean).geodesic(tau)
    got = low.with_mean_fraction(mean_tau, source.mean).geodesic(tau)
    X = rng.normal(size=(9, 40))
    np.testing.assert_allclose(got.apply(X), want.apply(X), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got.apply(X, chunk_size=2), want.apply(X), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got.dense().linear, want.linear, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="source_mean must have shape"):
        low.with_mean_fraction(0.5, source.mean[:3])
    if mean_tau is not None:
        with pytest.raises(ValueError, match="this map is anchored"):
            got.with_mean_fraction(0.5, source.mean)


def test_low_rank_identity_map_leaves_rows_unchanged_in_their_dtype():
    X = np.random.default_rng(0).normal(size=(4, 7)).astype(np.float32)
    Y = GaussianMap.identity(7, form="low-rank").apply(X)
    assert Y.dtype == np.float32
    np.testing.assert_array_equal(Y, X)


def _federation(rng, m, sizes):
    """Rows, client labels and class labels of :func:`clients`."""
    parts = clients(rng, m, sizes)
    X = np.vstack(parts)
    client = np.repeat(np.arange(len(sizes)), sizes)
    y = rng.integers(0, 3, size=X.shape[0])
    return X, client, y


@few_rows_per_client
@pytest.mark.parametrize(
    "params", [{}, {"client_batch": 1}, {"client_batch": 2, "n_jobs": 2}, {"device": "cpu"}]
)
def test_barycenter_estimator_takes_the_low_rank_path_and_equals_the_dense_one(rng, params):
    if "device" in params:
        pytest.importorskip("torch", reason="the d x d fixed point on a torch device")
    X, client, _ = _federation(rng, 90, [25, 30, 20])
    low = BuresBarycenter(form="low-rank", **params).fit(X, client=client)
    dense = BuresBarycenter(form="dense").fit(X, client=client)
    assert low.form_ == "low-rank" and dense.form_ == "dense"
    assert low.covariance_ is None and low.reference_.form == "low-rank"
    assert low.reference_.rank <= 24 + 29 + 19
    assert low.n_iter_ > 0 and low.residual_ <= low.tol
    # equal to the iteration's tolerance (the two paths' float32 work rounds differently)
    assert_close_in_norm(low.reference_.covariance, dense.covariance_, rtol=1e-9)
    np.testing.assert_allclose(low.mean_, dense.mean_, rtol=1e-12)
    np.testing.assert_allclose(low.weights_, dense.weights_)
    assert low.reference_.n == dense.reference_.n == X.shape[0]
    rows = rng.normal(10.0, 2.0, size=(7, 90))
    for label in dense.clients_:
        got, want = low.maps()[label], dense.maps()[label]
        assert got.form == "low-rank"
        assert rel(got.apply(rows), want.apply(rows)) < 1e-8


@few_rows_per_client
def test_barycenter_estimator_makes_summaries_dense_when_their_ranks_span_the_space(rng):
    X, client, _ = _federation(rng, 30, [20, 25])  # ranks 19 + 24 >= 30
    low = GaussianSummaryEstimator(form="low-rank").fit(X, client=client).summaries_
    dense = GaussianSummaryEstimator().fit(X, client=client).summaries_
    want = BuresBarycenter().fit(dense)
    for given in (low, {0: low[0], 1: dense[1]}):  # all low rank; mixed
        got = BuresBarycenter().fit(given)
        assert got.form_ == "dense" and got.reference_.form == "dense"
        np.testing.assert_allclose(got.covariance_, want.covariance_, rtol=1e-9, atol=0)
        assert all(T.form == "dense" for T in got.maps().values())


@few_rows_per_client
def test_a_dense_client_among_low_rank_ones_takes_the_dense_path(rng):
    X, client, _ = _federation(rng, 80, [20, 20, 100])
    low = GaussianSummaryEstimator(form="low-rank").fit(X, client=client).summaries_
    dense = GaussianSummaryEstimator().fit(X, client=client).summaries_
    got = BuresBarycenter().fit([low[0], low[1], dense[2]])
    assert got.form_ == "dense"
    assert_close_in_norm(got.covariance_, BuresBarycenter().fit(dense).covariance_, rtol=1e-9)


@few_rows_per_client
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"tau": 0.4, "mean_tau": None, "client_tau": "uniform"},
        {"tau": 1.0, "client_tau": "uniform", "weights": "uniform"},
    ],
)
def test_slot_transformer_in_low_rank_form_aligns_as_the_dense_one(rng, params):
    X, client, y = _federation(rng, 100, [30, 25, 35])
    params = dict(params)
    weights = params.pop("weights", "samples")
    low = SLOTTransformer(barycenter=BuresBarycenter(form="low-rank", weights=weights), **params)
    low.fit(X, y, client=client)
    dense = SLOTTransformer(barycenter=BuresBarycenter(form="dense", weights=weights), **params)
    dense.fit(X, y, client=client)
    assert all(T.form == "low-rank" for T in low.maps_.values())
    assert low.tau_scales_ == pytest.approx(dense.tau_scales_)
    want = dense.transform(X, client=client)
    assert rel(low.transform(X, client=client), want) < 1e-8
    got32 = low.transform(X.astype(np.float32), client=client)
    assert got32.dtype == np.float32 and rel(got32, want) < 1e-5
    if low.client_tau == "uniform":  # a client unseen in fit: its map from its rows
        new = rng.normal(11.0, 2.0, size=(12, 100))
        with pytest.warns(UnknownClientWarning, match="not seen during fit"):
            got_new = low.transform(new, client=np.repeat(9, 12))
        with pytest.warns(UnknownClientWarning, match="not seen during fit"):
            want_new = dense.transform(new, client=np.repeat(9, 12))
        assert rel(got_new, want_new) < 1e-8


@few_rows_per_client
def test_a_low_rank_reference_travels_to_a_client_that_aligns_alone(rng):
    X, client, y = _federation(rng, 100, [30, 25, 35])
    fitted = SLOTTransformer(barycenter=BuresBarycenter(form="low-rank")).fit(X, y, client=client)
    own = GaussianSummaryEstimator(form="low-rank").fit(X[:30], client=0).summaries_[0]
    reference = GaussianSummary.from_bytes(fitted.reference_.to_bytes("float64"))
    alone = SLOTTransformer.from_reference(
        reference,
        own,
        tau_scales={0: fitted.tau_scales_[0]},
        domain_offsets={0: fitted.domain_offsets_[0]},  # the server's, with each own mix
        barycenter=BuresBarycenter(form="low-rank"),
    )
    assert alone.maps_[0].form == "low-rank"
    assert rel(alone.transform(X[:30]), fitted.transform(X[:30], client=np.zeros(30, int))) < 1e-8
    with pytest.raises(TypeError, match="reference must be a GaussianSummary"):
        SLOTTransformer.from_reference(reference.covariance, own)


@few_rows_per_client
def test_low_rank_identity_for_unknown_clients_and_refusals(rng):
    X, client, y = _federation(rng, 60, [20, 20])
    slot = SLOTTransformer(
        barycenter=BuresBarycenter(form="low-rank"), unknown_client="identity"
    ).fit(X, y, client=client)
    rows = rng.normal(size=(4, 60))
    with pytest.warns(UnknownClientWarning, match="left unchanged"):
        np.testing.assert_array_equal(slot.transform(rows, client=np.repeat(5, 4)), rows)
    with pytest.raises(ValueError, match="covariance='within' needs form='dense'"):
        SLOTTransformer(barycenter=BuresBarycenter(form="low-rank"), covariance="within").fit(
            X, y, client=client
        )
    with pytest.raises(ValueError, match="form"):
        BuresBarycenter(form="sparse").fit(X, client=client)


@few_rows_per_client
def test_the_federated_search_runs_on_factor_summaries_as_on_dense_ones():
    """The protocol's messages carry each form: the same choice, the same alignment (a head
    whose statistics carry no summary: FedCGS derives its summary from its m x m Gram)."""
    from skslot import FederatedTauSearch
    from skslot.heads import FedPFTClassifier

    # three clients of 30 rows in 100 dimensions (ranks add up to less than m), three
    # classes apart, each client shifted and scaled
    rng = np.random.default_rng(0)
    y = np.tile(np.arange(3), 30)
    client = np.repeat(np.arange(3), 30)
    shift = 2 * rng.normal(size=(3, 100)) * rng.uniform(0.5, 2, size=100)
    X = 1.5 * np.eye(100)[y] + rng.normal(size=(90, 100)) + shift[client]
    searches = {
        form: FederatedTauSearch(
            FedPFTClassifier(random_state=0),
            slot=SLOTTransformer(client_tau="uniform", barycenter=BuresBarycenter(form=form)),
            random_state=0,
        ).fit(X, y, client=client)
        for form in ("dense", "low-rank")
    }
    dense, low = searches["dense"], searches["low-rank"]
    assert low.slot_.reference_.form == "low-rank"
    assert dense.slot_.reference_.form == "dense"
    assert low.best_tau_ == dense.best_tau_
    assert np.ptp(dense.cv_results_["mean_validation_score"]) > 0  # tau matters here
    np.testing.assert_allclose(
        low.cv_results_["mean_validation_score"], dense.cv_results_["mean_validation_score"]
    )
    np.testing.assert_allclose(
        low.slot_.transform(X, client=client), dense.slot_.transform(X, client=client), atol=1e-8
    )
    np.testing.assert_array_equal(low.predict(X, client=client), dense.predict(X, client=client))


@few_rows_per_client
def test_a_rejected_refit_leaves_either_estimator_as_it_was(rng):
    X, client, _ = _federation(rng, 40, [20, 20])
    for first, second in (("dense", "low-rank"), ("low-rank", "dense")):
        bary = BuresBarycenter(form=first).fit(X, client=client)
        before = dict(vars(bary))
        with pytest.raises(ValueError, match="weights"):  # fails after the summaries
            bary.set_params(form=second, weights=[1.0]).fit(X, client=client + 7)
        assert bary.clients_ == [0, 1] and bary.form_ == before["form_"]
        assert bary.reference_ is before["reference_"] and set(bary.maps()) == {0, 1}
        est = GaussianSummaryEstimator(form=first).fit(X, client=client)
        fitted = dict(est.summaries_)
        with pytest.raises(ValueError, match="1 sample"):  # fails after the rows are checked
            est.set_params(form=second).fit(X[:21, :30], client=client[:21])
        assert est.n_features_in_ == 40 and est.summaries_ == fitted


@few_rows_per_client
def test_auto_form_is_low_rank_where_every_client_holds_fewer_rows_than_features(rng):
    X, client, y = _federation(rng, 90, [25, 30, 20])
    auto = GaussianSummaryEstimator(form="auto").fit(X, client=client)
    assert auto.form_ == "low-rank"
    assert all(s.form == "low-rank" for s in auto.summaries_.values())
    large = np.vstack([X, rng.normal(size=(100, 90))])  # a fourth client of 100 rows
    mixed = np.r_[client, np.full(100, 3)]
    assert GaussianSummaryEstimator(form="auto").fit(large, client=mixed).form_ == "dense"
    within = GaussianSummaryEstimator(form="auto", covariance="within")
    assert within.fit(X, y, client=client).form_ == "dense"  # no low-rank within-class form
    assert GaussianSummaryEstimator(form="auto").partial_fit(X, client=client).form_ == "dense"
    # the aligners' default: the factor form here, the dense alignment to rounding
    slot = SLOTTransformer().fit(X, y, client=client)
    assert slot.reference_.form == "low-rank"
    dense = SLOTTransformer(barycenter=BuresBarycenter(form="dense")).fit(X, y, client=client)
    np.testing.assert_allclose(
        slot.transform(X, client=client), dense.transform(X, client=client), atol=1e-8
    )
    assert BuresBarycenter().fit(X, client=client).form_ == "low-rank"


def test_a_client_s_factor_form_travels_in_float64_whatever_its_feature_scales():
    """The basis a client computes is orthonormal to what the decoder accepts of float64
    arithmetic, also where the Gram route's own error would not be (scales 1 to 100)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 400)) * np.geomspace(1.0, 100.0, 400)
    summary = low_rank_summary(X)
    gram = summary.basis.T @ summary.basis - np.eye(summary.rank)
    assert np.max(np.abs(gram)) < 1e-13
    back = GaussianSummary.from_bytes(summary.to_bytes("float64"))
    np.testing.assert_allclose(back.covariance, summary.covariance, rtol=0, atol=1e-10)
    lw = LedoitWolf().fit(X).covariance_
    np.testing.assert_allclose(summary.covariance, lw, rtol=0, atol=1e-8 * np.abs(lw).max())


def test_the_magic_names_the_form_and_a_relabelled_payload_is_refused(rng):
    """One codec, two forms: the magic says which; a factor payload under the dense magic
    is not read as a dense one, nor the reverse."""
    from skslot.wire import SummaryFormatError, decode_summary

    s = low_rank_summary(rng.normal(size=(6, 20)), client=3)
    assert decode_summary(s.to_bytes("float64")).covariance is None
    assert decode_summary(s.to_dense().to_bytes("float64")).basis is None
    with pytest.raises(SummaryFormatError, match="payload truncated"):
        decode_summary(b"SKSG" + s.to_bytes("float64")[4:])
    with pytest.raises(SummaryFormatError, match="n must be between 2"):
        decode_summary(b"SKSL" + s.to_dense().to_bytes("float64")[4:])
