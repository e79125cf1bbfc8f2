"""Whose label mix: the client prior at prediction, domain offsets within classes, defaults."""

import numpy as np
import pytest
import sklearn
from scipy.special import softmax
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from skslot_bench import BenchmarkConfig

from skslot import SLOTTransformer, defaults
from skslot.datasets import make_federated_classification
from skslot.exceptions import UnknownClientWarning
from skslot.flower.config import DeploymentConfig
from skslot.heads import (
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
)
from skslot.label_mix import (
    ClientPriorClassifier,
    client_log_prior,
    domain_offsets,
    own_mix_accuracy,
)
from skslot.protocol import OneShotProtocol

from .conftest import ignoring


@pytest.fixture(scope="module")
def data():
    return make_federated_classification(n_clients=4, alpha=0.3, random_state=0)


def test_domain_offsets_recover_planted_offsets_whatever_the_label_mix():
    rng = np.random.default_rng(0)
    K, C, m = 5, 6, 3
    counts = rng.integers(0, 30, (K, C))
    counts[:, 0] += 1  # every client holds class 0: the client-class graph is connected
    class_means = rng.normal(size=(C, m))
    offsets = rng.normal(size=(K, m)) * 5
    offsets -= counts.sum(1) @ offsets / counts.sum()  # the federation's mean stays
    sums = counts[..., None] * (class_means[None] + offsets[:, None])
    np.testing.assert_allclose(domain_offsets(counts, sums), offsets, atol=1e-10)


def test_client_log_prior_is_the_dirichlet_posterior_mean():
    pi = np.array([0.2, 0.3, 0.5])
    got = np.exp(client_log_prior(np.array([7, 0, 1]), pi))
    np.testing.assert_allclose(got, (np.array([7, 0, 1]) + 3 * pi) / (8 + 3))
    assert got.sum() == pytest.approx(1.0)


def test_own_mix_accuracy_weights_each_class_by_the_clients_mix():
    y = np.array([0, 0, 1, 1, 2, 0, 1])
    client = np.array([0, 0, 0, 0, 0, 1, 1])
    correct = np.array([True, False, True, True, False, True, False])
    got = own_mix_accuracy(correct, y, client, {0: np.array([2, 1, 1]), 1: [1, 1, 0]}, [0, 1, 2])
    assert got == {0: pytest.approx((2 * 0.5 + 1 * 1.0 + 0.0) / 4), 1: pytest.approx(0.5)}


def test_alignment_keeps_the_label_mix_and_removes_the_domain():
    rng = np.random.default_rng(1)
    means = np.array([[0.0, 0.0, 0.0], [5.0, 1.0, 0.0], [0.0, 4.0, 2.0]])
    shift = {0: np.zeros(3), 1: np.array([3.0, -2.0, 1.0]), 2: np.array([-1.0, 2.0, 4.0])}
    mixes = {0: [0.8, 0.1, 0.1], 1: [0.1, 0.2, 0.7], 2: [0.3, 0.4, 0.3]}
    y = np.concatenate([rng.choice(3, 600, p=mixes[k]) for k in range(3)])
    client = np.repeat([0, 1, 2], 600)
    X = means[y] + rng.normal(size=(1800, 3)) + np.stack([shift[k] for k in client])
    slot = SLOTTransformer().fit(X, y, client=client)
    Z = slot.transform(X, client=client)
    class_means = {
        (k, c): Z[(client == k) & (y == c)].mean(axis=0) for k in range(3) for c in range(3)
    }
    for c in range(3):  # the classes meet across clients (up to sampling)
        for k in (1, 2):
            np.testing.assert_allclose(class_means[k, c], class_means[0, c], atol=0.25)
    # the client means stay apart by their label mixes, as the class means say
    for k in (1, 2):
        expected = (np.bincount(y[client == k], minlength=3) / 600) @ means
        expected -= (np.bincount(y[client == 0], minlength=3) / 600) @ means
        np.testing.assert_allclose(
            Z[client == k].mean(axis=0) - Z[client == 0].mean(axis=0), expected, atol=0.25
        )
    # the federation's case moves every mean to the reference: the label mix is erased
    Z = slot.set_params(label_mix="federation").transform(X, client=client)
    np.testing.assert_allclose(Z[client == 1].mean(0), Z[client == 0].mean(0), atol=1e-8)


def test_fit_without_labels_works_with_the_defaults_and_says_what_it_does(data):
    with pytest.warns(UserWarning, match="fit without y: no client's label mix"):
        slot = SLOTTransformer().fit(data.X, client=data.client)
    Z = slot.transform(data.X, client=data.client)
    assert np.all(np.isfinite(Z))
    assert slot.domain_offsets_ is None
    assert slot.tau_value == defaults.CLIENT_MIX_TAU


@pytest.mark.parametrize(
    "head", [FedCGSClassifier(), LogisticRegression(max_iter=300), LinearDiscriminantAnalysis()]
)
def test_grouped_cross_validation_by_client_is_finite_with_the_defaults(data, head):
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(SLOTTransformer(), head)
        with ignoring(UnknownClientWarning, ".*were not seen during fit"):
            scores = cross_val_score(
                pipe,
                data.X,
                data.y,
                cv=GroupKFold(4),
                params={"client": data.client, "groups": data.client},
                error_score="raise",
            )
            search = GridSearchCV(
                pipe, {"slottransformer__tau": [0.0, 0.5, 1.0]}, cv=GroupKFold(4)
            ).fit(data.X, data.y, client=data.client, groups=data.client)
    assert np.all(np.isfinite(scores)) and scores.mean() > 0.4
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert np.isfinite(search.best_score_)


def test_a_head_shifts_its_scores_to_the_clients_own_prior_exactly(data):
    head = FedCGSClassifier().fit(data.X, data.y, client=data.client)
    counts = head.client_class_counts_[2]
    pi = head.class_counts_ / head.class_counts_.sum()
    base = head.decision_function(data.X[:7])
    own = head.decision_function(data.X[:7], client=2)
    shift = client_log_prior(counts, pi) - np.log(pi)
    np.testing.assert_allclose(own - base, np.tile(shift, (7, 1)))
    # unseen clients and the federation's case keep the federation's prior
    np.testing.assert_array_equal(head.decision_function(data.X[:7], client=99), base)
    head.set_params(label_mix="federation")
    np.testing.assert_array_equal(head.decision_function(data.X[:7], client=2), base)


def test_averaged_local_heads_shift_from_the_geometric_mix_of_the_clients_priors(data):
    head = OneShotFedAvgClassifier(max_iter=200, local_classes="all")
    head.fit(data.X, data.y, client=data.client)
    pi = head.class_counts_ / head.class_counts_.sum()
    logs = {k: client_log_prior(c, pi) for k, c in head.client_class_counts_.items()}
    n = np.array([c.sum() for c in head.client_class_counts_.values()])
    embedded = (n / n.sum()) @ np.stack(list(logs.values()))
    shift = head.decision_function(data.X[:3], client=1) - head.decision_function(data.X[:3])
    np.testing.assert_allclose(shift, np.tile(logs[1] - embedded, (3, 1)), atol=1e-12)


def test_heads_over_the_held_classes_shift_from_the_federations_prior(data):
    head = OneShotFedAvgClassifier(max_iter=200).fit(data.X, data.y, client=data.client)
    pi = head.class_counts_ / head.class_counts_.sum()
    own = client_log_prior(head.client_class_counts_[1], pi)
    shift = head.decision_function(data.X[:3], client=1) - head.decision_function(data.X[:3])
    np.testing.assert_allclose(shift, np.tile(own - np.log(pi), (3, 1)), atol=1e-12)


def test_a_head_from_statistics_takes_each_clients_counts_locally(data):
    fitted = FedPFTClassifier(random_state=0).fit(data.X, data.y, client=data.client)
    rows = data.client == 0
    stats = [
        FedPFTClassifier(random_state=0).client_statistics(
            data.X[data.client == k], data.y[data.client == k], fitted.classes_, client_index=k
        )
        for k in range(4)
    ]
    server = FedPFTClassifier(random_state=0).fit_from_statistics(stats, fitted.classes_)
    base = server.predict_proba(data.X[rows])
    np.testing.assert_array_equal(server.predict_proba(data.X[rows], client=0), base)
    server.with_client_counts({0: fitted.client_class_counts_[0]})
    assert not np.allclose(server.predict_proba(data.X[rows], client=0), base)
    with pytest.raises(ValueError, match="must be 4 non-negative integers"):
        server.with_client_counts({0: [1.5, 2, 3, 4]})


def test_client_prior_classifier_is_bayes_with_the_clients_counts(data):
    model = ClientPriorClassifier(LogisticRegression(max_iter=300))
    model.fit(data.X, data.y, client=data.client)
    plain = LogisticRegression(max_iter=300).fit(data.X, data.y)
    pi = model.class_counts_ / model.class_counts_.sum()
    shift = client_log_prior(model.client_class_counts_[3], pi) - np.log(pi)
    expected = softmax(np.log(plain.predict_proba(data.X[:5])) + shift, axis=1)
    np.testing.assert_allclose(model.predict_proba(data.X[:5], client=3), expected, atol=1e-10)
    np.testing.assert_allclose(model.predict_proba(data.X[:5]), plain.predict_proba(data.X[:5]))
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(SLOTTransformer(), ClientPriorClassifier(LogisticRegression()))
        pipe.fit(data.X, data.y, client=data.client)
        assert pipe.score(data.X, data.y, client=data.client) > 0.5


def test_one_table_of_defaults():
    slot, protocol = SLOTTransformer(), OneShotProtocol(FedCGSClassifier())
    config, bench = DeploymentConfig(), BenchmarkConfig()
    for head in (FedCGSClassifier(), FedPFTClassifier(), OneShotFedAvgClassifier()):
        assert head.label_mix == defaults.LABEL_MIX
    assert slot.label_mix == protocol.label_mix == config.label_mix == defaults.LABEL_MIX
    assert slot.tau_value == protocol.tau == config.protocol().tau == defaults.CLIENT_MIX_TAU
    assert bench.main_tau == defaults.TAU
    assert slot.mean_tau == protocol.mean_tau == config.mean_tau == bench.mean_tau
    assert slot.client_tau == protocol.client_tau == config.client_tau == bench.client_tau
    fraction = defaults.VALIDATION_FRACTION
    assert protocol.validation_fraction == config.validation_fraction == fraction
    assert tuple(protocol.taus) == tuple(bench.taus) == defaults.TAUS
