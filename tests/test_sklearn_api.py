"""The scikit-learn contract: estimator checks, metadata routing, pandas output."""

import pickle

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import (
    GridSearchCV,
    GroupKFold,
    LeaveOneGroupOut,
    StratifiedKFold,
    cross_validate,
)
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from skslot import (
    BuresBarycenter,
    GaussianSummaryEstimator,
    SLOTTransformer,
    UnknownClientWarning,
)

from .conftest import PAPER

ESTIMATORS = [
    GaussianSummaryEstimator(),
    BuresBarycenter(),
    SLOTTransformer(),
    SLOTTransformer(**PAPER),
    # factor form: the checks' data hold more rows than features, a few fewer
    GaussianSummaryEstimator(form="low-rank"),
    BuresBarycenter(form="low-rank"),
    SLOTTransformer(barycenter=BuresBarycenter(form="low-rank")),
]
PRIVATE = GaussianSummaryEstimator(epsilon=4.0, clip_norm=10.0, random_state=0)


# scikit-learn's checks fit without client labels (one client: the alignment is the identity),
# and PRIVATE fixes its noise's seed so that the checks can compare fits
@pytest.mark.filterwarnings(
    "ignore:(BuresBarycenter|SLOTTransformer) was fitted on a single client"
    ":skslot.SingleClientWarning"
)
@pytest.mark.filterwarnings(
    "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
)
# some checks fit PRIVATE on rows its clipping makes identical (the floor that warns then:
# tested with its warning in test_summary.py)
@pytest.mark.filterwarnings("ignore:client None has a zero sample covariance:UserWarning")
@parametrize_with_checks([*ESTIMATORS, PRIVATE])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture
def routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


def test_client_is_requested_by_default():
    for est in ESTIMATORS:
        assert est.get_metadata_routing().fit.requests["client"] is True
    assert SLOTTransformer(**PAPER).get_metadata_routing().transform.requests["client"] is True


def test_pipeline_routes_client_to_fit_and_predict(routing, federated):
    X, y, client = federated.X, federated.y, federated.client
    pipe = make_pipeline(SLOTTransformer(tau=0.4, **PAPER), LogisticRegression(max_iter=500))
    pipe.fit(X, y, client=client)
    slot = pipe[0]
    head = pipe[-1]
    expected = head.predict(slot.transform(X, client=client))
    np.testing.assert_array_equal(pipe.predict(X, client=client), expected)
    scores = cross_validate(
        clone(pipe),
        X,
        y,
        params={"client": client},
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
    )
    assert scores["test_score"].min() > 0.5


def test_grid_search_selects_middle_tau_under_label_and_domain_shift(routing, federated):
    X, y, client = federated.X, federated.y, federated.client
    taus = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    grid = GridSearchCV(
        make_pipeline(SLOTTransformer(**PAPER), LogisticRegression(max_iter=1000)),
        {"slottransformer__tau": taus},
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
    ).fit(X, y, client=client)
    scores = grid.cv_results_["mean_test_score"]
    best = grid.best_params_["slottransformer__tau"]
    assert 0.0 < best < 1.0  # partial transport beats no and full transport here
    assert scores[taus.index(best)] > scores[0] + 0.02


@pytest.mark.parametrize("cv", [GroupKFold(4), LeaveOneGroupOut()], ids=["GroupKFold", "LOGO"])
def test_grid_search_grouped_by_client_scores_held_out_clients(routing, federated, cv):
    """Each fold's test client is new to SLOT: it maps its own Gaussian (unknown_client="fit")."""
    X, y, client = federated.X, federated.y, federated.client
    taus = [0.0, 0.4, 1.0]
    grid = GridSearchCV(
        make_pipeline(SLOTTransformer(**PAPER), LogisticRegression(max_iter=1000)),
        {"slottransformer__tau": taus},
        cv=cv,
        error_score="raise",
    )
    with pytest.warns(UnknownClientWarning, match=r"client\(s\) \d were not seen during fit"):
        grid.fit(X, y, client=client, groups=client)
    scores = grid.cv_results_["mean_test_score"]
    assert np.isfinite(scores).all()
    assert grid.best_params_["slottransformer__tau"] > 0.0
    assert scores.max() > scores[0] + 0.02  # the held-out clients gain from alignment
    # scikit-learn's search routes metadata to fit and score, not predict: the best pipeline does
    with pytest.raises(TypeError, match="unexpected keyword argument 'client'"):
        grid.predict(X[:5], client=client[:5])
    best = grid.best_estimator_
    np.testing.assert_array_equal(
        best.predict(X[:5], client=client[:5]),
        best[-1].predict(best[0].transform(X[:5], client=client[:5])),
    )
    assert grid.score(X, y, client=client) == best.score(X, y, client=client)


def test_a_reloaded_pipeline_without_routing_says_how_to_enable_it(routing, federated):
    X, y, client = federated.X, federated.y, federated.client
    pipe = make_pipeline(SLOTTransformer(**PAPER), LogisticRegression(max_iter=500))
    reloaded = pickle.loads(pickle.dumps(pipe.fit(X, y, client=client)))
    with sklearn.config_context(enable_metadata_routing=False):
        with pytest.raises(ValueError, match="enable_metadata_routing=True"):
            reloaded.predict(X)
        with pytest.raises(ValueError, match="enable_metadata_routing=True"):
            reloaded.predict(X, client=client)
    np.testing.assert_array_equal(
        reloaded.predict(X, client=client), pipe.predict(X, client=client)
    )


def test_without_routing_direct_calls_work_and_pipeline_explains(federated):
    X, y, client = federated.X, federated.y, federated.client
    SLOTTransformer(**PAPER).fit(X, client=client).transform(X, client=client)
    pipe = make_pipeline(SLOTTransformer(**PAPER), LogisticRegression(max_iter=500))
    pipe.fit(X, y, slottransformer__client=client)  # step__param works for fit
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        pipe.predict(X)


def test_pandas_in_and_out(federated):
    pd = pytest.importorskip("pandas")
    cols = [f"f{i}" for i in range(federated.X.shape[1])]
    df = pd.DataFrame(federated.X, columns=cols, index=np.arange(len(federated.X)) + 100)
    client = pd.Series(federated.client).map({0: "a", 1: "b", 2: "c", 3: "d"})
    slot = SLOTTransformer(**PAPER).set_output(transform="pandas").fit(df, client=client)
    out = slot.transform(df, client=client.to_numpy())
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == cols and list(slot.get_feature_names_out()) == cols
    assert (out.index == df.index).all()
    np.testing.assert_allclose(
        out.to_numpy(),
        SLOTTransformer(**PAPER)
        .fit(federated.X, client=client)
        .transform(federated.X, client=client),
    )


def test_clone_keeps_parameters_untouched():
    w = np.array([1.0, 2.0])
    est = SLOTTransformer(tau=0.3, barycenter=BuresBarycenter(weights=w), **PAPER)
    c = clone(est)
    assert c.get_params()["tau"] == 0.3 and c.get_params()["barycenter__weights"] is not None
    assert est.barycenter.weights is w
