import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skslot import (
    BuresBarycenter,
    GaussianMap,
    GaussianSummary,
    GaussianSummaryEstimator,
    SingleClientWarning,
    _barycenter_mixed,
)
from skslot._anderson import AndersonMixing
from skslot._barycenter_mixed import MixedRoots
from skslot._linalg import RootInBasis, SymmetricEigh, sym_eigh, symmetrize
from skslot.barycenter import bures_wasserstein_barycenter

from .conftest import assert_close_in_norm, random_spd

SOLVERS = ["fixed-point", "picard"]


def summaries(rng, K=4, m=5, condition=20.0):
    return [
        GaussianSummary(
            int(rng.integers(10, 100)),
            rng.normal(size=m),
            random_spd(rng, m, condition),
            client=k,
        )
        for k in range(K)
    ]


def fixed_point_residual(S, covs, w):
    R = sym_eigh(S).sqrt()
    M = sum(wk * sym_eigh(R @ C @ R).sqrt() for wk, C in zip(w, covs, strict=True))
    return np.linalg.norm(M - S) / np.linalg.norm(S)


@pytest.mark.parametrize("solver", SOLVERS)
def test_one_client_is_its_own_barycenter(rng, solver):
    (s,) = summaries(rng, K=1)
    with pytest.warns(SingleClientWarning, match="BuresBarycenter was fitted on a single client"):
        bary = BuresBarycenter(solver=solver).fit([s])
    np.testing.assert_allclose(bary.covariance_, s.covariance, rtol=1e-10)
    np.testing.assert_allclose(bary.mean_, s.mean)
    np.testing.assert_allclose(bary.weights_, [1.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_two_clients_lie_on_their_geodesic(rng, solver):
    a, b = summaries(rng, K=2)
    bary = BuresBarycenter(solver=solver).fit([a, b])
    t = b.n / (a.n + b.n)
    on_geodesic = GaussianMap.optimal_transport(a, b).geodesic(t).push(a)
    np.testing.assert_allclose(bary.covariance_, on_geodesic.covariance, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(bary.mean_, on_geodesic.mean, rtol=1e-10)


@pytest.mark.parametrize("init", ["mean", "sqrt-mean"])
def test_commuting_covariances_closed_form(rng, init):
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    diags = rng.uniform(0.1, 10.0, size=(3, 6))
    items = [GaussianSummary(10 * (k + 1), np.zeros(6), (Q * d) @ Q.T) for k, d in enumerate(diags)]
    w = np.array([10, 20, 30]) / 60
    expected = (Q * (w @ np.sqrt(diags)) ** 2) @ Q.T
    bary = BuresBarycenter(init=init).fit(items)
    np.testing.assert_allclose(bary.covariance_, expected, rtol=1e-9, atol=1e-10)
    if init == "sqrt-mean":
        assert bary.n_iter_ == 1  # the start is already the fixed point


@pytest.mark.parametrize("solver", SOLVERS)
def test_solves_fixed_point_equation_and_is_permutation_invariant(rng, solver):
    items = summaries(rng, K=5, m=7, condition=1e3)
    bary = BuresBarycenter(solver=solver, tol=1e-12, max_iter=1000).fit(items)
    covs = [s.covariance for s in items]
    assert bary.residual_ <= 1e-12
    assert fixed_point_residual(bary.covariance_, covs, bary.weights_) <= 1e-11
    perm = BuresBarycenter(solver=solver, tol=1e-12, max_iter=1000).fit(items[::-1])
    np.testing.assert_allclose(perm.covariance_, bary.covariance_, rtol=1e-9)
    np.testing.assert_allclose(perm.mean_, bary.mean_, rtol=1e-12)
    assert perm.clients_ == bary.clients_[::-1]


def test_matches_pot(rng):
    ot_gaussian = pytest.importorskip("ot.gaussian")
    items = summaries(rng, K=4, m=6)
    w = np.array([s.n for s in items], dtype=float)
    w /= w.sum()
    bary = BuresBarycenter().fit(items)
    ref_mean, ref_cov = ot_gaussian.bures_wasserstein_barycenter(
        np.stack([s.mean for s in items]),
        np.stack([s.covariance for s in items]),
        weights=w,
        num_iter=1000,
        eps=1e-12,
    )
    assert_close_in_norm(bary.covariance_, ref_cov, rtol=1e-8)
    np.testing.assert_allclose(bary.mean_, ref_mean, rtol=1e-12)


def test_weights_options_and_errors(rng):
    items = summaries(rng, K=3)
    assert np.allclose(BuresBarycenter(weights="uniform").fit(items).weights_, 1 / 3)
    w = BuresBarycenter(weights=[1, 1, 2]).fit(items).weights_
    np.testing.assert_allclose(w, [0.25, 0.25, 0.5])
    with pytest.raises(ValueError, match="one weight per client"):
        BuresBarycenter(weights=[1, 2]).fit(items)
    with pytest.raises(ValueError, match="non-negative"):
        BuresBarycenter(weights=[1, -1, 2]).fit(items)
    with pytest.raises(ValueError, match="different dimensions"):
        BuresBarycenter().fit([items[0], GaussianSummary(5, np.zeros(2), np.eye(2))])
    with pytest.raises(TypeError, match="expected GaussianSummary"):
        BuresBarycenter().fit({"a": items[0], "b": "junk"})


def test_convergence_warning_not_print(rng, capsys):
    items = summaries(rng, K=4, m=6, condition=1e4)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        BuresBarycenter(max_iter=1, init="mean").fit(items)
    assert capsys.readouterr().out == ""


def test_reference_travels_and_maps_reach_it(rng):
    items = summaries(rng, K=3)
    bary = BuresBarycenter().fit({f"c{k}": s for k, s in enumerate(items)})
    ref = GaussianSummary.from_bytes(bary.reference_.to_bytes(dtype="float64"))
    assert ref.n == sum(s.n for s in items) and ref.shrinkage is None
    maps = bary.maps()
    assert list(maps) == ["c0", "c1", "c2"]
    for s, T in zip(items, maps.values(), strict=True):
        pushed = T.push(s)
        np.testing.assert_allclose(pushed.covariance, ref.covariance, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(pushed.mean, ref.mean, rtol=1e-10, atol=1e-12)


def test_fit_from_rows_equals_fit_from_summaries(rng):
    from skslot import GaussianSummaryEstimator

    X = rng.normal(size=(120, 4)) * [1, 2, 3, 4]
    client = np.repeat([0, 1, 2], 40)
    est = GaussianSummaryEstimator().fit(X, client=client)
    a = BuresBarycenter().fit(X, client=client)
    b = BuresBarycenter().fit(est.summaries_)
    np.testing.assert_allclose(a.covariance_, b.covariance_)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert a.n_features_in_ == 4


def test_kernel_rejects_unknown_options(rng):
    with pytest.raises(ValueError, match="solver must be one of"):
        bures_wasserstein_barycenter([np.eye(2)], np.ones(1), solver="newton")


def test_unlabelled_summaries_are_keyed_by_position_and_duplicates_rejected(rng):
    a, b = (GaussianSummary(10, rng.normal(size=2), random_spd(rng, 2)) for _ in range(2))
    bary = BuresBarycenter().fit([a, b])
    assert bary.clients_ == [0, 1] and len(bary.maps()) == 2
    dup = GaussianSummary(10, np.zeros(2), np.eye(2), client="x")
    with pytest.raises(ValueError, match="two summaries have client label 'x'"):
        BuresBarycenter().fit([dup, dup])


def test_anderson_mixing_solves_a_linear_iteration_like_gmres(rng):
    # on x <- M x + b in R^d, type-II Anderson with memory >= d is GMRES: it
    # reaches the fixed point in at most d + 1 images
    d = 4
    M = 0.9 * np.linalg.qr(rng.normal(size=(d, d)))[0]  # a rotation: the plain iteration is slow
    b = rng.normal(size=d)
    fixed = np.linalg.solve(np.eye(d) - M, b)
    mixer = AndersonMixing(memory=d)
    x = np.zeros(d)
    for _ in range(d + 2):
        x = mixer(x, M @ x + b)
    np.testing.assert_allclose(x, fixed, rtol=1e-9)
    plain = np.zeros(d)
    for _ in range(d + 2):
        plain = M @ plain + b
    assert np.linalg.norm(plain - fixed) > 0.1 * np.linalg.norm(fixed)


def test_anderson_mixing_reset_returns_the_plain_image(rng):
    mixer = AndersonMixing(memory=2)
    x, g = rng.normal(size=3), rng.normal(size=3)
    mixer(x, g)
    mixer.reset()
    assert mixer(g, 2 * g) is not None
    mixer.reset()
    image = rng.normal(size=3)
    assert mixer(x, image) is image


def lw_like(rng, K=6, m=40):
    # low rank plus a small ridge in random subspaces: a slow fixed point
    covs = []
    for _ in range(K):
        B = rng.normal(size=(m, 8)) * np.geomspace(1, 0.05, 8)
        covs.append(B @ B.T + rng.uniform(0.05, 0.2) * np.eye(m))
    w = rng.uniform(1, 3, size=K)
    return covs, w / w.sum()


@pytest.mark.parametrize("solver", SOLVERS)
def test_anderson_reaches_the_same_fixed_point_in_fewer_iterations(rng, solver):
    covs, w = lw_like(rng)
    options = {"solver": solver, "tol": 1e-11, "max_iter": 500}
    plain = bures_wasserstein_barycenter(covs, w, anderson=0, **options)
    fast = bures_wasserstein_barycenter(covs, w, **options)
    assert plain.converged and fast.converged
    assert fast.n_iter < plain.n_iter
    assert_close_in_norm(fast.covariance, plain.covariance, rtol=1e-9)
    assert fixed_point_residual(fast.covariance, covs, w) <= 1e-10


def test_non_positive_definite_mixed_iterate_falls_back_to_the_plain_step(rng, monkeypatch):
    covs, w = lw_like(rng)
    expected = bures_wasserstein_barycenter(covs, w, anderson=0, tol=1e-11, max_iter=500)
    calls = []

    def indefinite(self, x, gx):
        calls.append(1)
        return -gx  # never positive definite

    monkeypatch.setattr(AndersonMixing, "__call__", indefinite)
    got = bures_wasserstein_barycenter(covs, w, tol=1e-11, max_iter=500)
    assert calls and got.n_iter == expected.n_iter
    np.testing.assert_allclose(got.covariance, expected.covariance, rtol=1e-12)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "5"])
def test_anderson_memory_is_validated(rng, bad):
    with pytest.raises(ValueError, match="anderson must be a non-negative integer"):
        bures_wasserstein_barycenter([np.eye(2)], np.ones(1), anderson=bad)
    with pytest.raises(ValueError, match="anderson must be a non-negative integer"):
        BuresBarycenter(anderson=bad).fit(summaries(rng, K=2, m=2))


def extreme_covariances(rng, kind, m=12, K=5):
    covs = []
    for _ in range(K):
        if kind == "ill-conditioned":
            Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
            covs.append((Q * np.geomspace(1, 10 ** rng.uniform(4, 8), m)) @ Q.T)
        elif kind == "low rank + tiny ridge":
            B = rng.normal(size=(m, int(rng.integers(1, m))))
            covs.append(B @ B.T + 10 ** rng.uniform(-8, -4) * np.eye(m))
        else:  # commuting, scales over 12 orders of magnitude
            covs.append(np.diag(10 ** rng.uniform(-4, 4, size=m)) * 10 ** rng.uniform(-2, 2))
    return covs, rng.dirichlet(np.full(K, 0.3))


@pytest.mark.parametrize("kind", ["ill-conditioned", "low rank + tiny ridge", "commuting"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_anderson_never_costs_iterations_on_extreme_covariances(kind, seed):
    covs, w = extreme_covariances(np.random.default_rng(seed), kind)
    plain = bures_wasserstein_barycenter(covs, w, anderson=0, tol=1e-10, max_iter=3000)
    fast = bures_wasserstein_barycenter(covs, w, tol=1e-10, max_iter=3000)
    assert plain.converged and fast.converged
    assert fast.n_iter <= plain.n_iter
    assert_close_in_norm(fast.covariance, plain.covariance, rtol=1e-7)


def _ill_conditioned(m: int, condition: float, K: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(K):
        Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
        out.append((Q * np.geomspace(1.0, condition, m)) @ Q.T)
    return out


def test_the_iteration_stops_at_the_floor_float64_can_attain():
    """Condition 1e10, m = 100: the residual stalls near 3e-10 > tol = 1e-10 (issue 15 found
    such a stall to be the floating-point floor, at 40 digits); the stopping rule knows the
    floor, so there is no ConvergenceWarning advising a larger max_iter."""
    covariances = _ill_conditioned(100, 1e10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        bary = BuresBarycenter(max_iter=100).fit(
            [GaussianSummary(10, np.zeros(100), C) for C in covariances]
        )
    floor = bary.residual_floor_
    assert bary.tol < floor < 1e-8  # ~ m eps sqrt(kappa) = 2.2e-9
    assert bary.residual_ <= floor and bary.n_iter_ < 100
    # a well-conditioned problem still goes down to tol
    easy = BuresBarycenter().fit(
        [GaussianSummary(10, np.zeros(100), C) for C in _ill_conditioned(100, 10.0)]
    )
    assert easy.residual_floor_ < 1e-12 and easy.residual_ <= 1e-10


def test_a_warning_far_above_the_floor_still_advises_more_iterations():
    covariances = _ill_conditioned(30, 1e10)
    with pytest.warns(ConvergenceWarning, match=r"above .*the floor float64 can attain"):
        BuresBarycenter(max_iter=2, anderson=0).fit(
            [GaussianSummary(10, np.zeros(30), C) for C in covariances]
        )


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("client_batch", "n_jobs"), [(None, 2), (1, None), (4, 2), (3, -1)])
def test_blocks_of_clients_and_jobs_reach_the_same_barycenter(rng, solver, client_batch, n_jobs):
    covs, w = lw_like(rng, K=11, m=24)
    whole = bures_wasserstein_barycenter(covs, w, solver=solver)
    blocked = bures_wasserstein_barycenter(
        covs, w, solver=solver, client_batch=client_batch, n_jobs=n_jobs
    )
    # the same iterates up to the order of a sum: same iterations, same answer
    assert blocked.n_iter == whole.n_iter
    assert_close_in_norm(blocked.covariance, whole.covariance, rtol=1e-11)
    assert fixed_point_residual(blocked.covariance, covs, w) < 1e-9
    # streamed blocks keep no decomposition; one stack keeps every client's
    assert (blocked.inner is None) == (client_batch is not None)


def test_a_float32_memory_mapped_stack_is_streamed(rng, tmp_path):
    covs, w = lw_like(rng, K=7, m=16)
    stack = np.lib.format.open_memmap(tmp_path / "covs.npy", "w+", np.float32, (7, 16, 16))
    stack[:] = covs
    stack.flush()
    on_disk = np.load(tmp_path / "covs.npy", mmap_mode="r")
    streamed = bures_wasserstein_barycenter(on_disk, w, client_batch=2)
    # the float32 values, read in float64: exactly the barycenter of those values
    held = bures_wasserstein_barycenter([c.astype(np.float64) for c in on_disk], w)
    assert_close_in_norm(streamed.covariance, held.covariance, rtol=1e-12)
    assert not on_disk.flags.writeable and np.array_equal(on_disk, stack)


def test_streamed_maps_equal_maps_from_the_kept_decompositions(rng):
    items = summaries(rng, K=5, m=6)
    kept = BuresBarycenter().fit(items)
    streamed = BuresBarycenter(client_batch=2, n_jobs=2).fit(items)
    assert streamed._result.inner is None
    assert list(streamed.maps()) == list(kept.maps()) == list(range(5))
    for a, b in zip(kept.maps().values(), streamed.maps().values(), strict=True):
        np.testing.assert_allclose(b.linear, a.linear, rtol=1e-10)
        np.testing.assert_allclose(b.offset, a.offset, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "4"])
def test_client_batch_is_validated(rng, bad):
    covs, w = lw_like(rng, K=3, m=4)
    with pytest.raises((ValueError, TypeError), match="client_batch"):
        bures_wasserstein_barycenter(covs, w, client_batch=bad)


def test_covariances_and_weights_must_agree(rng):
    covs, w = lw_like(rng, K=3, m=4)
    with pytest.raises(ValueError, match="3 covariances but 2 weights"):
        bures_wasserstein_barycenter(covs, w[:2] / w[:2].sum())


# Ray's own start-up and shutdown: log files it leaves open, processes it reaps later
@pytest.mark.filterwarnings(r"ignore:unclosed file <_io\.\w+ name='/dev/null':ResourceWarning")
@pytest.mark.filterwarnings(r"ignore:subprocess \d+ is still running:ResourceWarning")
def test_a_ray_backend_spreads_the_blocks_and_changes_nothing(rng):
    """joblib's Ray backend runs the same blocks (on a cluster, once ray.init points at it)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install '.[simulation]'")
    from joblib import parallel_config
    from ray.util.joblib import register_ray

    covs, w = lw_like(rng, K=6, m=12)
    threads = bures_wasserstein_barycenter(covs, w, client_batch=2, n_jobs=2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        register_ray()
        with parallel_config(backend="ray", n_jobs=2):
            spread = bures_wasserstein_barycenter(covs, w, client_batch=2)
            maps = BuresBarycenter(client_batch=2).fit(summaries(rng, K=3, m=4)).maps()
    finally:
        ray.shutdown()
    assert spread.n_iter == threads.n_iter
    assert_close_in_norm(spread.covariance, threads.covariance, rtol=1e-12)
    assert sorted(maps) == [0, 1, 2]


# -- the mixed-precision evaluation (skslot/_barycenter_mixed.py) ----------------------

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"


def conditioned(condition: float, m: int = 96, K: int = 4, seed: int = 0):
    """Covariances of condition about ``condition``, with related eigenbases."""
    rng = np.random.default_rng(seed)
    Q0 = np.linalg.qr(rng.normal(size=(m, m)))[0]
    covs = []
    for _ in range(K):
        U, _, Vt = np.linalg.svd(Q0 + 0.3 * rng.normal(size=(m, m)) / np.sqrt(m))
        d = np.geomspace(1.0, 1.0 / condition, m) * np.exp(rng.uniform(-0.3, 0.3, m))
        covs.append(symmetrize(((U @ Vt) * d) @ (U @ Vt).T))
    return np.array(covs), np.full(K, 1.0 / K)


def low_rank_plus_ridge(m: int = 96, K: int = 6, seed: int = 0):
    """``B B^T + c I`` with a rank-``m / 4`` ``B`` in a random subspace per client (slow)."""
    rng = np.random.default_rng(seed)
    rank = m // 4
    covs = []
    for _ in range(K):
        B = rng.normal(size=(m, rank)) * np.geomspace(1, 0.05, rank)
        covs.append(B @ B.T + rng.uniform(0.05, 0.2) * np.eye(m))
    w = rng.uniform(1, 3, size=K)
    return np.array(covs), w / w.sum()


def sampled(m: int = 96, K: int = 4, seed: int = 0):
    """Ledoit-Wolf estimates of differently mixed anisotropic Gaussian rows."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(m, m)) / np.sqrt(m)
    rows, client = [], []
    for k in range(K):
        A = base + 0.5 * rng.normal(size=(m, m)) / np.sqrt(m)
        rows.append(rng.normal(size=(4 * m, m)) * np.exp(rng.uniform(-1.5, 0.5, m)) @ A.T)
        client += [k] * (4 * m)
    est = GaussianSummaryEstimator().fit(np.vstack(rows), client=np.array(client))
    return np.array([s.covariance for s in est.summaries_.values()]), np.full(K, 1.0 / K)


def digits(m: int = 128):
    """Ledoit-Wolf covariances of the three digit domains, on a random ``m``-d projection."""
    if not DIGITS.exists():
        pytest.skip(f"{DIGITS} is absent: the digits' covariances come from the shared data")
    data = np.load(DIGITS, allow_pickle=False)
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(data["X"].shape[1], m)))[0]
    est = GaussianSummaryEstimator().fit(data["X"] @ basis, client=data["domain"])
    covs = [s.covariance for s in est.summaries_.values()]
    counts = np.array([s.n for s in est.summaries_.values()], dtype=float)
    return np.array(covs), counts / counts.sum()


MIXED_SETS = {
    "condition 1e4": lambda: conditioned(1e4),
    "condition 1e6": lambda: conditioned(1e6),
    "condition 1e8": lambda: conditioned(1e8),
    "low rank + ridge": low_rank_plus_ridge,
    "sampled": sampled,
    "digits": digits,
}


@pytest.fixture
def mixed_runs(monkeypatch):
    """Every MixedRoots the kernel starts, in order (their ``counts`` tell the schedule)."""
    started = []
    start = MixedRoots.start.__func__

    def recording(cls, *args, **kwargs):
        roots = start(cls, *args, **kwargs)
        started.append(roots)
        return roots

    monkeypatch.setattr(MixedRoots, "start", classmethod(recording))
    return started


@pytest.mark.parametrize("name", list(MIXED_SETS))
def test_mixed_precision_matches_a_float64_reference_iteration(name, mixed_runs):
    covs, w = MIXED_SETS[name]()
    mixed = bures_wasserstein_barycenter(covs, w)
    float64 = bures_wasserstein_barycenter(covs, w, precision="float64")
    reference = bures_wasserstein_barycenter(covs, w, precision="float64", tol=1e-14)
    assert len(mixed_runs) == 1 and mixed_runs[0] is not None  # the mixed path ran
    assert mixed.converged and float64.converged
    true_mixed = fixed_point_residual(mixed.covariance, covs, w)
    true_float64 = fixed_point_residual(float64.covariance, covs, w)
    # never a worse residual than the float64 path: at the tolerance, or (condition 1e8)
    # at the floor where the measurement itself stalls (2.5e-9 to 3.1e-9 from other starts)
    assert true_mixed <= max(1e-10, 1.25 * true_float64)
    if reference.floor <= 0.5e-10:  # where float64 reaches the fixed point
        assert_close_in_norm(mixed.covariance, reference.covariance, rtol=1e-9)
    else:  # float64's floor is above tol: its own result moves by 2.4e-9 with the start
        assert reference.floor > 1e-10
        assert_close_in_norm(mixed.covariance, reference.covariance, rtol=1e-8)


def test_mixed_precision_switches_by_its_rules(mixed_runs):
    covs, w = sampled(m=128, K=6)
    bures_wasserstein_barycenter(covs, w)
    counts = mixed_runs[-1].counts
    # float32 decompositions from the mean, one float64 base, then float32 increments
    assert counts["eigh32"] >= 1 and counts["eigh64"] == 1 and counts["step32"] >= 2
    assert counts["fallback"] == 0
    # condition 1e8: rho keeps float32 off after the first decomposition
    covs, w = conditioned(1e8)
    bures_wasserstein_barycenter(covs, w)
    counts = mixed_runs[-1].counts
    assert counts["eigh32"] <= 1 and counts["warm32"] == 0
    assert counts["eigh64"] >= counts.total() - 2


@pytest.mark.parametrize("failing", ["_chord_root", "_chord_increment"])
def test_a_failed_chord_iteration_falls_back_to_an_eigendecomposition(
    failing, mixed_runs, monkeypatch
):
    covs, w = sampled(m=128, K=6)
    reference = bures_wasserstein_barycenter(covs, w, precision="float64", tol=1e-14)
    original = getattr(_barycenter_mixed, failing)
    calls = []

    def fails_once(*args):  # the first root's chord iteration diverges
        calls.append(args)
        if len(calls) == 1:
            raise _barycenter_mixed.ChordFailure
        return original(*args)

    monkeypatch.setattr(_barycenter_mixed, failing, fails_once)
    mixed = bures_wasserstein_barycenter(covs, w)
    counts = mixed_runs[-1].counts
    assert calls and counts["fallback"] == 1
    assert mixed.converged and mixed.residual <= 1e-10
    assert_close_in_norm(mixed.covariance, reference.covariance, rtol=1e-9)


def test_a_chord_step_that_stops_contracting_is_a_failure(monkeypatch, mixed_runs):
    covs, w = sampled(m=128, K=6)
    monkeypatch.setattr(_barycenter_mixed, "CHORD_SLOWDOWN", 0.0)  # any second step fails
    monkeypatch.setattr(_barycenter_mixed, "CHORD_FRACTION", 0.0)  # there is always a second
    mixed = bures_wasserstein_barycenter(covs, w)
    counts = mixed_runs[-1].counts
    assert counts["warm32"] == counts["step32"] == 0 and counts["fallback"] >= 2
    float64 = bures_wasserstein_barycenter(covs, w, precision="float64")
    assert mixed.converged and mixed.residual <= 1e-10
    assert_close_in_norm(mixed.covariance, float64.covariance, rtol=1e-9)


def test_maps_from_the_mixed_state_equal_maps_from_a_new_decomposition(mixed_runs):
    covs, w = sampled(m=128, K=6)
    items = [GaussianSummary(100, np.zeros(128), C, client=k) for k, C in enumerate(covs)]
    bary = BuresBarycenter(weights=w).fit(items)
    assert mixed_runs[-1]._kind == "step32"  # the maps come from (V_k, Y_k)
    assert all(isinstance(root, RootInBasis) for root in bary._result.inner)
    F, zero = bary._result.factor, np.zeros(128)
    for k, T in bary.maps().items():
        exact = sym_eigh(F.T @ covs[k] @ F)  # a new decomposition at the same factor
        assert_close_in_norm(T.linear, GaussianMap.from_factors(F, exact, zero, zero).linear, 1e-9)
        assert_close_in_norm(bary._result.inner[k].sqrt(), exact.sqrt(), rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_mixed_precision_works_at_any_scale_of_the_covariances(scale, mixed_runs):
    covs, w = sampled(m=64, K=3)  # float32 alone would overflow (or lose M_k) at these scales
    expected = bures_wasserstein_barycenter(covs, w, precision="float64")
    mixed = bures_wasserstein_barycenter(scale * covs, w)
    assert mixed_runs[-1].counts["step32"] > 0 and mixed.converged
    assert_close_in_norm(mixed.covariance / scale, expected.covariance, rtol=1e-9)
    zero = np.zeros(64)
    for got, want in zip(mixed.inner, expected.inner, strict=True):  # maps do not scale
        assert_close_in_norm(
            GaussianMap.from_factors(mixed.factor, got, zero, zero).linear,
            GaussianMap.from_factors(expected.factor, want, zero, zero).linear,
            rtol=1e-8,
        )


def test_the_float64_path_runs_where_mixed_precision_does_not_apply(mixed_runs):
    covs, w = sampled(m=40, K=3)
    float64 = bures_wasserstein_barycenter(covs, w, precision="float64")
    for options in ({"client_batch": 2}, {"n_jobs": 2}):  # (torch: tests/test_torch.py)
        other = bures_wasserstein_barycenter(covs, w, **options)
        assert all(isinstance(r, SymmetricEigh) for r in other.inner or [])
        assert_close_in_norm(other.covariance, float64.covariance, rtol=1e-12)
    assert mixed_runs == []  # none of them started the mixed path
    small = bures_wasserstein_barycenter(covs[:, :20, :20], w)  # below MIN_DIMENSION
    assert mixed_runs == [None]
    assert isinstance(small.inner[0], SymmetricEigh)
    singular = covs.copy()
    singular[0] = singular[0][:, :1] @ singular[0][:1, :]  # rank one: no Cholesky factor
    bures_wasserstein_barycenter(singular, w, max_iter=3)
    assert mixed_runs[-1] is None
    with pytest.raises(ValueError, match="precision must be one of"):
        bures_wasserstein_barycenter(covs, w, precision="float32")


def test_scipy_blas_is_single_threaded_only_inside_the_mixed_path():
    from threadpoolctl import threadpool_info

    def threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info()}

    before = threads()
    with _barycenter_mixed.scipy_blas_single_threaded():
        inside = threads()
    assert threads() == before
    own = _barycenter_mixed._scipy_own_blas()
    for path, n in inside.items():
        selected = own is not None and path in [c.filepath for c in own.lib_controllers]
        assert n == (1 if selected else before[path])
