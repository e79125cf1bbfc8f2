"""What a client can do alone, and SLOT's map split into its mean and covariance parts."""

import dataclasses
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skslot import ClientStandardScaler, GaussianSummary, SLOTTransformer, SmallClientWarning
from skslot.maps import GaussianMap, bures_wasserstein_distance

SCALERS = [ClientStandardScaler(), ClientStandardScaler(with_std=False)]


@pytest.mark.filterwarnings("ignore::skslot.SingleClientWarning")
@parametrize_with_checks([*SCALERS, SLOTTransformer(tau=0.4, mean_tau=1.0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("with_std", [True, False])
def test_each_client_is_scaled_by_its_own_statistics(federated, with_std):
    X, client = federated.X, federated.client
    X_before = X.copy()
    Z = ClientStandardScaler(with_std=with_std).fit_transform(X, client=client)
    for k in np.unique(client):
        rows = client == k
        expected = StandardScaler(with_std=with_std).fit_transform(X[rows])
        np.testing.assert_allclose(Z[rows], expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(X, X_before)


def test_a_constant_column_is_centred_not_divided_by_zero():
    X = np.column_stack([np.arange(6.0), np.full(6, 3.0)])
    Z = ClientStandardScaler().fit_transform(X, client=[0, 0, 0, 1, 1, 1])
    assert np.all(np.isfinite(Z))
    np.testing.assert_array_equal(Z[:, 1], 0.0)


def test_unknown_clients_and_float32(federated):
    X, client = federated.X, federated.client
    fitted = client != 3
    new = X[client == 3]
    scaler = ClientStandardScaler().fit(X[fitted], client=client[fitted])
    np.testing.assert_allclose(
        scaler.transform(new, client=3), StandardScaler().fit_transform(new), atol=1e-12
    )
    identity = scaler.set_params(unknown_client="identity").transform(new, client=3)
    np.testing.assert_array_equal(identity, new)
    with pytest.raises(ValueError, match="client 3 was not seen during fit"):
        scaler.set_params(unknown_client="error").transform(new, client=3)
    with pytest.raises(ValueError, match="has 1 row in this transform"):
        scaler.set_params(unknown_client="fit").transform(new[:1], client=3)
    with pytest.raises(ValueError, match="unknown_client must be one of"):
        ClientStandardScaler(unknown_client="skip").fit(X, client=client)
    assert scaler.transform(X[:4].astype(np.float32), client=client[:4]).dtype == np.float32
    with pytest.raises(ValueError, match="transform needs client labels"):
        scaler.transform(X)


def test_a_pipeline_swaps_the_baseline_for_slot(federated):
    X, y, client = federated.X, federated.y, federated.client
    with sklearn.config_context(enable_metadata_routing=True):
        for aligner in (ClientStandardScaler(), SLOTTransformer()):
            pipe = make_pipeline(aligner, LogisticRegression(max_iter=500))
            pipe.fit(X, y, client=client)
            expected = pipe[-1].predict(pipe[0].transform(X, client=client))
            np.testing.assert_array_equal(pipe.predict(X, client=client), expected)


@pytest.mark.parametrize(("mean_tau", "tau"), [(1.0, 0.0), (0.0, 1.0), (0.7, 0.3), (0.2, 0.9)])
def test_decomposed_geodesic_contracts_each_part_by_its_own_fraction(federated, mean_tau, tau):
    """W2^2 after = (1 - mean_tau)^2 ||mu_k - mu_b||^2 + (1 - tau)^2 B^2(S_k, S_b)."""
    slot = SLOTTransformer(client_tau="uniform").fit(federated.X, client=federated.client)
    ref = slot.reference_
    for k in slot.clients_:
        s = slot.summaries_[k]
        mean2 = float(np.sum((s.mean - ref.mean) ** 2))
        centred = GaussianSummary(s.n, ref.mean, s.covariance)
        bures2 = bures_wasserstein_distance(centred, ref) ** 2
        T = slot.maps_[k].with_mean_fraction(mean_tau, s.mean).geodesic(tau)
        moved = bures_wasserstein_distance(T.push(s), ref) ** 2
        expected = (1 - mean_tau) ** 2 * mean2 + (1 - tau) ** 2 * bures2
        assert moved == pytest.approx(expected, rel=1e-8, abs=1e-8 * (mean2 + bures2))
        # the covariance is that of the paper's geodesic at tau, the mean its own
        paper = slot.maps_[k].geodesic(tau).push(s)
        np.testing.assert_allclose(T.push(s).covariance, paper.covariance, rtol=1e-12)
        expected_mean = s.mean + mean_tau * (ref.mean - s.mean)
        np.testing.assert_allclose(T.push(s).mean, expected_mean, rtol=1e-9, atol=1e-9)


def test_mean_tau_none_or_equal_is_the_paper_geodesic(federated):
    X, client = federated.X, federated.client
    slot = SLOTTransformer(tau=0.4, mean_tau=None, client_tau="uniform").fit(X, client=client)
    paper = slot.transform(X, client=client)
    same = slot.set_params(mean_tau=0.4).transform(X, client=client)
    np.testing.assert_allclose(same, paper, rtol=1e-12, atol=1e-12 * np.abs(X).max())


def test_mean_part_alone_is_centring_onto_the_reference_mean(federated):
    """mean_tau = 1, tau = 0: each client's rows shifted by mu_b - mu_k, i.e. centring."""
    X, client = federated.X, federated.client
    slot = SLOTTransformer(tau=0.0, mean_tau=1.0, client_tau="uniform").fit(X, client=client)
    centred = ClientStandardScaler(with_std=False).fit_transform(X, client=client)
    # the summaries' means are the clients' row means, so this is exact up to rounding
    np.testing.assert_allclose(
        slot.transform(X, client=client), centred + slot.reference_.mean, atol=1e-10
    )


def test_mean_tau_is_validated_and_not_scaled_by_the_label_shift_factor(labelled_clients):
    X, y, client = labelled_clients.X, labelled_clients.y, labelled_clients.client
    with pytest.raises(ValueError, match="mean_tau must"):
        SLOTTransformer(mean_tau=1.5).fit(X, y, client=client)
    slot = SLOTTransformer(tau=0.5, mean_tau=1.0, client_tau="label-shift", label_mix="federation")
    Z = slot.fit(X, y, client=client).transform(X, client=client)
    with pytest.raises(ValueError, match="client 9 was not seen during fit"):
        slot.client_map(9)
    for k in slot.clients_:
        np.testing.assert_array_equal(slot.client_map(k).apply(X[client == k]), Z[client == k])
        d = slot.tau_scales_[k]
        s = slot.summaries_[k]
        expected = slot.maps_[k].with_mean_fraction(1.0, s.mean).geodesic(0.5 * d)
        np.testing.assert_allclose(Z[client == k], expected.apply(X[client == k]), atol=1e-12)


def test_anchored_geodesics_compose_and_check_their_input():
    rng = np.random.default_rng(0)
    B = rng.normal(size=(3, 3))
    T = GaussianMap(B @ B.T + np.eye(3), rng.normal(size=3))
    mu = rng.normal(size=3)
    anchored = T.with_mean_fraction(0.7, mu)
    twice, once = anchored.geodesic(0.5).geodesic(0.4), anchored.geodesic(0.2)
    np.testing.assert_allclose(twice.linear, once.linear, rtol=1e-12)
    np.testing.assert_allclose(twice.offset, once.offset, rtol=1e-12)
    # the anchor's image is kept at every tau, and tau = 0 translates by mean_tau of the way
    image = mu + 0.7 * (T.apply(mu[None])[0] - mu)
    for tau in (0.0, 0.3, 1.0):
        np.testing.assert_allclose(anchored.geodesic(tau).apply(mu[None])[0], image, rtol=1e-12)
    with pytest.raises(ValueError, match="takes a full map"):
        anchored.with_mean_fraction(1.0, mu)
    with pytest.raises(ValueError, match="source_mean must have shape"):
        T.with_mean_fraction(1.0, mu[:2])


@pytest.fixture(scope="module")
def digits_records():
    """The embedded 256-d digits, FedCGS (deterministic), 3 seeds, with and without skew."""
    from skslot_bench import BenchmarkConfig, run_benchmark

    from skslot.datasets import load_dataset

    config = BenchmarkConfig(
        alphas=(0.1, None), taus=(0.0, BenchmarkConfig.main_tau), seeds=(0, 1, 2), heads=("FedCGS",)
    )
    config = dataclasses.replace(config, auto=False)
    with warnings.catch_warnings():  # inside the runs too: any other warning is still shown
        # at alpha = 0.1 some clients hold fewer rows than the 256 dimensions (conftest)
        small = r"GaussianSummaryEstimator: client\(s\) .+ hold no more rows"
        warnings.filterwarnings("ignore", small, SmallClientWarning)
        return run_benchmark(load_dataset("digits"), config, progress=False)


def macro(records, alpha, selection, tau=None, case="domain"):
    """Macro accuracy (%) per seed of one kind of record, in one case."""
    by_seed = {}
    for r in records:
        if (r["alpha"], r["selection"], r["case"]) == (alpha, selection, case) and tau in (
            None,
            r["tau"],
        ):
            by_seed.setdefault(r["seed"], []).append(r["accuracy"])
    return np.array([100 * np.mean(by_seed[s]) for s in sorted(by_seed)])


def test_the_default_keeps_each_clients_own_mix_on_real_digits(digits_records):
    """Each client's own mix (the default): at least no alignment - 0.5, with and without
    skew, and at least centring with the client's prior - 0.5."""
    for alpha in (0.1, "none"):
        slot = macro(digits_records, alpha, "label-mix", case="own mix")
        none = macro(digits_records, alpha, "fixed", 0.0, case="own mix")
        centre = macro(digits_records, alpha, "centre", case="own mix")
        assert slot.mean() >= none.mean() - 0.5, (alpha, slot, none)
        assert slot.mean() >= centre.mean() - 0.5, (alpha, slot, centre)


def test_the_federation_setting_beats_each_clients_own_centring_on_real_digits(digits_records):
    """Every class of the domain: ahead of centring under skew, no loss without it."""
    tau = SLOTTransformer(label_mix="federation").tau_value
    skewed = macro(digits_records, 0.1, "fixed", tau) - macro(digits_records, 0.1, "centre")
    assert skewed.min() > 1.0 and skewed.mean() > 2.0, skewed
    no_skew = macro(digits_records, "none", "fixed", tau) - np.maximum(
        macro(digits_records, "none", "centre"), macro(digits_records, "none", "fixed", 0.0)
    )
    assert no_skew.mean() > -0.5, no_skew
