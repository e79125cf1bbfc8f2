import re
import warnings

import numpy as np
import pytest

from skslot import (
    BuresBarycenter,
    GaussianSummary,
    GaussianSummaryEstimator,
    SingleClientWarning,
    SLOTTransformer,
    SmallClientWarning,
    UnknownClientWarning,
)
from skslot.maps import bures_wasserstein_distance

from .conftest import PAPER, ignoring


def empirical_summary(Z):
    return GaussianSummary(len(Z), Z.mean(0), np.cov(Z.T, bias=True))


def test_full_transport_maps_each_client_gaussian_onto_reference(federated):
    X, client = federated.X, federated.client
    slot = SLOTTransformer(tau=1.0, **PAPER).fit(X, client=client)
    for k in slot.clients_:
        pushed = slot.maps_[k].push(slot.summaries_[k])
        ref = slot.reference_
        np.testing.assert_allclose(pushed.mean, ref.mean, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(pushed.covariance, ref.covariance, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("tau", [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
def test_w2_to_reference_contracts_by_one_minus_tau(federated, tau):
    slot = SLOTTransformer(tau=tau, **PAPER).fit(federated.X, client=federated.client)
    for k in slot.clients_:
        s = slot.summaries_[k]
        full2 = bures_wasserstein_distance(s, slot.reference_) ** 2
        moved = slot.maps_[k].geodesic(tau).push(s)
        assert bures_wasserstein_distance(moved, slot.reference_) ** 2 == pytest.approx(
            (1 - tau) ** 2 * full2, rel=1e-8, abs=1e-8 * full2
        )


def test_tau_zero_is_identity_and_transform_aligns_rows(federated):
    X, client = federated.X, federated.client
    np.testing.assert_allclose(
        SLOTTransformer(tau=0.0, **PAPER).fit_transform(X, client=client), X, rtol=0, atol=1e-12
    )
    slot = SLOTTransformer(tau=1.0, **PAPER).fit(X, client=client)
    Z = slot.transform(X, client=client)
    for k in slot.clients_:
        # empirical moments of the aligned rows: mean is exact, covariance up to shrinkage
        np.testing.assert_allclose(Z[client == k].mean(0), slot.reference_.mean, atol=1e-9)
    # tau can change after fit without a refit
    half = slot.set_params(tau=0.5).transform(X, client=client)
    np.testing.assert_allclose(half, 0.5 * X + 0.5 * Z, atol=1e-10)


def test_scalar_client_and_float32(federated):
    X = federated.X.astype(np.float32)
    slot = SLOTTransformer(**PAPER).fit(X, client=federated.client)
    rows = federated.client == 2
    Z = slot.transform(X[rows], client=2)
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z, slot.transform(X, client=federated.client)[rows], rtol=1e-5)


def test_unknown_client_policies(federated):
    X, client = federated.X, federated.client
    seen = client != 3
    slot = SLOTTransformer(tau=1.0, unknown_client="error", **PAPER).fit(
        X[seen], client=client[seen]
    )
    new_rows = X[~seen]
    with pytest.raises(ValueError, match="client 3 was not seen during fit"):
        slot.transform(new_rows, client=3)
    unseen = r"SLOTTransformer\.transform: client\(s\) 3 were not seen during fit: "
    slot.set_params(unknown_client="identity")
    with pytest.warns(UnknownClientWarning, match=unseen + "their rows are left unchanged"):
        np.testing.assert_array_equal(slot.transform(new_rows, client=3), new_rows)
    slot.set_params(unknown_client="fit")
    maps_before = dict(slot.maps_)
    with pytest.warns(UnknownClientWarning, match=unseen + "their maps are estimated"):
        Z = slot.transform(new_rows, client=3)
    assert slot.maps_ == maps_before and 3 not in slot.summaries_  # not mutated
    np.testing.assert_allclose(Z.mean(0), slot.reference_.mean, atol=1e-9)


def test_a_misspelt_client_label_is_named_with_the_label_it_nearly_spells(federated):
    names = np.array(["Kitchen", "Garden", "Toys", "Books"])
    X, client = federated.X, names[federated.client % 4]
    slot = SLOTTransformer(**PAPER).fit(X, client=client)
    meant = "'Kitchen ': did you mean 'Kitchen'?"
    with pytest.warns(UnknownClientWarning, match=re.escape(meant)):
        slot.transform(X[:5], client="Kitchen ")
    with pytest.raises(ValueError, match=re.escape(meant)):
        slot.set_params(unknown_client="error").transform(X[:5], client="Kitchen ")
    with pytest.warns(UnknownClientWarning) as record:  # nothing near: no guess
        slot.set_params(unknown_client="fit").transform(X[:5], client="Hospital")
    assert "did you mean" not in str(record[0].message)


def test_a_new_client_is_fitted_by_default_and_needs_two_rows(federated):
    X, client = federated.X, federated.client
    seen = client != 3
    slot = SLOTTransformer(tau=1.0, **PAPER).fit(X[seen], client=client[seen])
    assert slot.unknown_client == "fit"
    unseen = r"SLOTTransformer\.transform: client\(s\) 3 were not seen during fit"
    with pytest.warns(UnknownClientWarning, match=unseen):
        Z = slot.transform(X[~seen], client=3)
    np.testing.assert_allclose(Z.mean(0), slot.reference_.mean, atol=1e-9)
    with (
        pytest.raises(ValueError, match=r"SLOTTransformer: client 3 .* has 1 row .* at least 2"),
        ignoring(UnknownClientWarning, unseen),
    ):
        slot.transform(X[~seen][:1], client=3)


@pytest.mark.parametrize("client", [None, 7, np.zeros(40, dtype=int)])
def test_a_single_client_fit_warns_that_alignment_is_the_identity(client):
    X = np.random.default_rng(0).normal(size=(40, 3))
    with pytest.warns(SingleClientWarning, match="SLOTTransformer was fitted on a single client"):
        slot = SLOTTransformer(tau=1.0, **PAPER).fit(X, client=client)
    np.testing.assert_allclose(slot.transform(X, client=client), X, rtol=1e-12, atol=1e-12)
    with pytest.warns(SingleClientWarning, match="BuresBarycenter was fitted on a single"):
        BuresBarycenter().fit(X, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SingleClientWarning)  # two clients: no warning
        SLOTTransformer(**PAPER).fit(X, client=np.arange(40) % 2)


def test_from_reference_equals_in_process_fit(federated):
    X, client = federated.X, federated.client
    in_process = SLOTTransformer(tau=0.4, **PAPER).fit(X, client=client)
    # each party of a deployment: own summary -> server -> reference -> own map
    own = {
        k: GaussianSummaryEstimator().fit(X[client == k], client=k).summaries_[k] for k in range(4)
    }
    wire = {k: GaussianSummary.from_bytes(s.to_bytes(dtype="float64")) for k, s in own.items()}
    reference = BuresBarycenter().fit(list(wire.values())).reference_
    reference = GaussianSummary.from_bytes(reference.to_bytes(dtype="float64"))
    for k in range(4):
        party = SLOTTransformer.from_reference(reference, own[k], tau=0.4, **PAPER)
        np.testing.assert_allclose(
            party.transform(X[client == k]),
            in_process.transform(X[client == k], client=k),
            rtol=1e-7,
            atol=1e-8,
        )


@pytest.mark.parametrize("tau", [-0.1, 1.5, np.nan, "0.4"])
def test_tau_is_validated(federated, tau):
    with pytest.raises(ValueError, match="tau must be"):
        SLOTTransformer(tau=tau, **PAPER).fit(federated.X, client=federated.client)


def test_missing_client_at_transform_explains_routing(federated):
    slot = SLOTTransformer(**PAPER).fit(federated.X, client=federated.client)
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        slot.transform(federated.X)


def test_transform_rejects_wrong_shape_and_does_not_mutate(federated):
    X, client = federated.X.copy(), federated.client
    slot = SLOTTransformer(**PAPER).fit(X, client=client)
    np.testing.assert_array_equal(X, federated.X)
    with pytest.raises(ValueError, match="features"):
        slot.transform(X[:, :3], client=client)
    slot.transform(X, client=client)
    np.testing.assert_array_equal(X, federated.X)


def test_a_client_with_no_more_rows_than_features_is_named_once():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(43, 10))
    client = np.repeat(["a", "b", "small"], [20, 20, 3])
    with pytest.warns(SmallClientWarning, match=r"client\(s\) 'small' hold no more rows than "
                      r"the 10 features \(fewest: 3\)") as record:  # fmt: skip
        GaussianSummaryEstimator().fit(X, client=client)
    assert len(record) == 1
    assert "form='low-rank' holds such summaries exactly" in str(record[0].message)
    with pytest.warns(SmallClientWarning, match="their means$"):  # in that form: no hint
        GaussianSummaryEstimator(form="low-rank").fit(X, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every client larger than its dimension: silent
        GaussianSummaryEstimator().fit(X[:40], client=client[:40])


@pytest.mark.parametrize(
    ("policy", "what"),
    [("fit", "estimated from their rows"), ("identity", "left unchanged")],
)
def test_unknown_clients_at_transform_are_named_once(policy, what):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    client = np.repeat([0, 1, 2], 20)
    slot = SLOTTransformer(tau=0.5, unknown_client=policy, **PAPER).fit(X, client=client)
    new = np.repeat([7, 8], 5)
    with pytest.warns(UnknownClientWarning, match="client\\(s\\) 7, 8 were not seen") as record:
        slot.transform(X[:10], client=new)
    assert len(record) == 1 and what in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fitted clients: silent
        slot.transform(X[:10], client=np.repeat([0, 1], 5))
