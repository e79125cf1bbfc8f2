"""make_slot_pipeline: an alignment and any head, both in the case the user names."""

import numpy as np
import pytest
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from skslot import ClientStandardScaler, SLOTTransformer, make_slot_pipeline
from skslot.datasets import (
    dirichlet_partition,
    load_office_caltech10,
    make_federated_classification,
)
from skslot.heads import FedCGSClassifier
from skslot.label_mix import ClientPriorClassifier, own_mix_accuracy


@pytest.fixture(scope="module")
def data():
    return make_federated_classification(n_clients=4, alpha=0.3, random_state=0)


def test_a_scikit_learn_head_gets_each_client_s_prior_with_its_own_mix(data):
    head = LogisticRegression()
    model = make_slot_pipeline(head)
    assert [name for name, _ in model.steps] == ["align", "head"]
    align, wrapped = model.named_steps["align"], model.named_steps["head"]
    assert isinstance(align, SLOTTransformer) and align.label_mix == "client"
    assert isinstance(wrapped, ClientPriorClassifier) and wrapped.estimator is head
    with sklearn.config_context(enable_metadata_routing=True):
        got = model.fit(data.X, data.y, client=data.client).predict(data.X, client=data.client)
        slot = SLOTTransformer().fit(data.X, data.y, client=data.client)
        Z = slot.transform(data.X, client=data.client)
        by_hand = ClientPriorClassifier(LogisticRegression()).fit(Z, data.y, client=data.client)
    np.testing.assert_array_equal(got, by_hand.predict(Z, client=data.client))


def test_the_case_is_said_once_and_set_on_clones_of_the_steps():
    head, slot = FedCGSClassifier(), SLOTTransformer(tau=0.3)
    model = make_slot_pipeline(head, slot=slot, label_mix="federation")
    assert model.named_steps["head"].label_mix == "federation"
    expected = {**slot.get_params(), "label_mix": "federation"}
    assert model.named_steps["align"].get_params() == expected
    assert head.label_mix == slot.label_mix == "client"  # the user's steps untouched
    # a head without the parameter serves the federation's mix as it is
    plain = LogisticRegression()
    assert make_slot_pipeline(plain, label_mix="federation").named_steps["head"] is plain
    # an alignment without the parameter, or none at all
    scaler = ClientStandardScaler()
    assert make_slot_pipeline(plain, slot=scaler).named_steps["align"] is scaler
    assert make_slot_pipeline(plain, slot="passthrough").named_steps["align"] == "passthrough"
    # a head inside a pipeline of its own: its label_mix is set, and it is not wrapped again
    nested = make_slot_pipeline(make_pipeline(StandardScaler(), FedCGSClassifier()),
                                label_mix="federation").named_steps["head"]  # fmt: skip
    assert nested.get_params()["fedcgsclassifier__label_mix"] == "federation"
    assert isinstance(make_slot_pipeline(nested).named_steps["head"], Pipeline)


def test_a_head_that_cannot_take_a_prior_or_an_unknown_case_is_refused():
    with pytest.raises(TypeError, match=r"LinearSVC has no predict_proba.*CalibratedClassifierCV"):
        make_slot_pipeline(LinearSVC())
    assert make_slot_pipeline(LinearSVC(), label_mix="federation").steps[1][0] == "head"
    with pytest.raises(ValueError, match=r"label_mix must be one of.*'domain'"):
        make_slot_pipeline(LogisticRegression(), label_mix="domain")


def test_a_grid_over_tau_reaches_the_alignment(data):
    model = make_slot_pipeline(FedCGSClassifier(), label_mix="federation")
    search = GridSearchCV(model, {"align__tau": [0.0, 0.6]}, cv=GroupKFold(2))
    with sklearn.config_context(enable_metadata_routing=True):
        search.fit(data.X, data.y, client=data.client, groups=data.client)
    assert search.best_params_["align__tau"] in (0.0, 0.6)


def test_four_shops_the_recommended_own_mix_pipeline_is_at_least_no_alignment():
    """Four shops (Office-Caltech10's domains, four classes, Dirichlet 0.1 over shops: one
    shop trained on 1 class, one on 2, two on 3): with each shop's own mix, the README's
    pipeline with LogisticRegression is at least LogisticRegression on the raw rows - 0.5."""
    data = load_office_caltech10()
    classes = np.arange(4, 8)
    keep = np.isin(data.y, classes)
    X, y, domain = data.X[keep].astype(np.float64), data.y[keep] - 4, data.domain[keep]
    part = dirichlet_partition(y, domain, alpha=0.1, random_state=5)
    train, test = part.train_index, part.test_index
    mixes = {k: np.bincount(y[train][part.train_client == k], minlength=4) for k in range(4)}
    assert sorted(int((m > 0).sum()) for m in mixes.values()) == [1, 2, 3, 3]

    def own_mix(predicted):
        right = predicted == y[test]
        accuracy = own_mix_accuracy(right, y[test], part.test_client, mixes, np.arange(4))
        return 100 * np.mean(list(accuracy.values()))

    plain = LogisticRegression(max_iter=1000).fit(X[train], y[train]).predict(X[test])
    model = make_slot_pipeline(LogisticRegression(max_iter=1000))
    with sklearn.config_context(enable_metadata_routing=True):
        model.fit(X[train], y[train], client=part.train_client)
        recommended = model.predict(X[test], client=part.test_client)
    assert own_mix(recommended) >= own_mix(plain) - 0.5
