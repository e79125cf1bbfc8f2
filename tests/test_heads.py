import re
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from skslot import GaussianMap, SLOTTransformer
from skslot.datasets import make_federated_classification
from skslot.heads import (
    UNSCORED,
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
    StatisticsFormatError,
)
from skslot.heads.fedpft import _message_seed
from skslot.privacy import PrivacyBudget, PrivateClassifier

from .conftest import PAPER, short_local_training

HEADS = [FedCGSClassifier(), OneShotFedAvgClassifier(), FedPFTClassifier(random_state=0)]
# a fixed noise seed, so that the checks can compare fits (it warns: filtered below)
PRIVATE_HEADS = [
    PrivateClassifier(
        FedCGSClassifier(), privacy=PrivacyBudget(100.0, clip_norm=10.0, random_state=0)
    ),
    PrivateClassifier(
        FedPFTClassifier(random_state=0),
        privacy=PrivacyBudget(100.0, clip_norm=10.0, random_state=0),
    ),
    # a budget large enough for the checks' accuracy thresholds on their small data sets
    PrivateClassifier(
        OneShotFedAvgClassifier(), privacy=PrivacyBudget(1e5, clip_norm=5.0, random_state=0)
    ),
]


@short_local_training  # O-FedAvg at its default budget in the checks that fit it
@pytest.mark.filterwarnings(
    "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
)
@parametrize_with_checks([*HEADS, *PRIVATE_HEADS], xfail_strict=True)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture
def skewed():
    """Strong label skew: some clients lack some classes entirely."""
    return make_federated_classification(
        n_clients=4, n_samples_per_client=150, n_classes=5, alpha=0.1, random_state=3
    )


@short_local_training
@pytest.mark.parametrize("head", HEADS, ids=lambda h: type(h).__name__)
def test_global_class_set_and_deployment_path(head, skewed):
    X, y, client = skewed.X, skewed.y, skewed.client
    assert any(len(np.unique(y[client == k])) < 5 for k in range(4))  # the fixture's premise
    fitted = sklearn.clone(head).fit(X, y, client=client)
    np.testing.assert_array_equal(fitted.classes_, np.arange(5))
    assert fitted.predict_proba(X).shape == (len(X), 5)
    np.testing.assert_allclose(fitted.predict_proba(X).sum(1), 1.0)
    # a deployment: each client computes its own statistics, which travel as
    # named arrays; the server decodes them and combines them
    classes = np.unique(y)
    stats = []
    for k in range(4):
        own = sklearn.clone(head).client_statistics(
            X[client == k], y[client == k], classes, client_index=k
        )
        stats.append(
            head.decode_statistics(
                own.to_arrays(),
                classes=classes,
                n_features=X.shape[1],
                n_samples=int(np.sum(client == k)),
            )
        )
    server = sklearn.clone(head).fit_from_statistics(stats, classes)
    np.testing.assert_allclose(
        server.decision_function(X), fitted.decision_function(X), rtol=1e-7, atol=1e-7
    )
    np.testing.assert_array_equal(server.linear_scores().predict(X), fitted.predict(X))
    assert server.score(X, y) > 1 / 5 + 0.1  # well above chance under strong skew


def test_linear_scores_of_a_binary_fedpft_and_a_nonlinear_one(skewed):
    from sklearn.naive_bayes import GaussianNB

    X, y, client = skewed.X, np.where(skewed.y < 2, "low", "high"), skewed.client
    head = FedPFTClassifier(random_state=0).fit(X, y, client=client)
    np.testing.assert_array_equal(head.linear_scores().predict(X), head.predict(X))
    nonlinear = FedPFTClassifier(estimator=GaussianNB(), random_state=0).fit(X, y, client=client)
    with pytest.raises(TypeError, match="GaussianNB has no coef_"):
        nonlinear.linear_scores()


def _message(head, skewed, k=0):
    X, y, client = skewed.X, skewed.y, skewed.client
    stats = head.client_statistics(X[client == k], y[client == k], np.arange(5))
    return stats.to_arrays(), int(np.sum(client == k))


def _bump(name, index, value):
    def edit(arrays):
        changed = arrays[name].astype(np.float64).copy()
        changed[index] = value
        return {**arrays, name: changed}

    return edit


HOSTILE_MESSAGES = [
    (OneShotFedAvgClassifier(), _bump("coef", (0, 0), np.inf), "'coef' contains NaN"),
    (OneShotFedAvgClassifier(), lambda a: {**a, "n": np.array(7)}, "trained on 7 rows"),
    (OneShotFedAvgClassifier(), lambda a: {**a, "n_iter": np.array(-1)}, "n_iter = -1"),
    (FedCGSClassifier(), _bump("counts", 0, 0.5), "'counts' must hold integers"),
    (FedCGSClassifier(), _bump("sums", (0, 0), 1e6), "class sums do not add up"),
    (FedPFTClassifier(), lambda a: {**a, "index": a["index"] + 10}, "out of range or repeated"),
    (FedPFTClassifier(), _bump("weights", 0, 0.5), "weights do not sum to 1"),
    (FedPFTClassifier(), _bump("n", 0, 10**9), "mixtures describe"),
    (FedPFTClassifier(), _bump("n_components", 0, 0), "between 1 and n components"),
    (
        FedPFTClassifier(covariance_type="full"),
        _bump("covariances", (0, 0, 0), -1.0),
        "negative variances",
    ),
    (FedPFTClassifier(), _bump("covariances", (0, 0, -1), -1.0), "negative diagonal variances"),
    (
        FedPFTClassifier(covariance_type="diag"),
        lambda a: {**a, "covariances": a["covariances"][..., None]},
        "has shape",
    ),
]


@short_local_training
@pytest.mark.parametrize(("head", "edit", "reason"), HOSTILE_MESSAGES)
def test_decode_statistics_rejects_malformed_messages(head, edit, reason, skewed):
    arrays, n = _message(head, skewed)
    head.decode_statistics(arrays, classes=np.arange(5), n_features=8, n_samples=n)  # intact: ok
    with pytest.raises(StatisticsFormatError, match=re.escape(reason)):
        head.decode_statistics(edit(arrays), classes=np.arange(5), n_features=8, n_samples=n)


@pytest.mark.parametrize("covariance", ["total", "within"])
def test_fedcgs_federated_equals_centralised(covariance, skewed):
    X, y, client = skewed.X + 1e3, skewed.y, skewed.client  # a large mean, on purpose
    fed = FedCGSClassifier(covariance=covariance).fit(X, y, client=client)
    central = FedCGSClassifier(covariance=covariance).fit(X, y)
    np.testing.assert_allclose(fed.coef_, central.coef_, rtol=1e-8)
    np.testing.assert_allclose(fed.intercept_, central.intercept_, rtol=1e-8)
    Xc = X - X.mean(0)
    np.testing.assert_allclose(
        central.covariance_ if covariance == "total" else 0,
        Xc.T @ Xc / len(X) if covariance == "total" else 0,
        rtol=1e-9,
    )


def test_fedcgs_within_predicts_like_lda(skewed):
    X, y, client = skewed.X, skewed.y, skewed.client
    ours = FedCGSClassifier(covariance="within", shrinkage=0.0).fit(X, y, client=client)
    lda = LinearDiscriminantAnalysis(solver="lsqr").fit(X, y)
    np.testing.assert_array_equal(ours.predict(X), lda.predict(X))
    np.testing.assert_allclose(ours.coef_, lda.coef_, rtol=1e-8)
    np.testing.assert_allclose(ours.intercept_, lda.intercept_, rtol=1e-8)


def test_fedcgs_singular_covariance_needs_shrinkage():
    X = np.c_[np.arange(10.0), np.zeros(10)]
    y = np.repeat([0, 1], 5)
    with pytest.raises(ValueError, match="increase shrinkage"):
        FedCGSClassifier(shrinkage=0.0).fit(X, y)
    assert FedCGSClassifier(shrinkage=1e-3).fit(X, y).score(X, y) == 1.0


@pytest.mark.parametrize("covariance", ["total", "within"])
def test_fedcgs_oas_ridge_is_the_oracle_approximating_shrinkage_of_its_covariance(
    covariance, skewed
):
    """``shrinkage="oas"``: rho of scikit-learn's OAS on the shared covariance, the ridge
    ``rho / (1 - rho)``, and the head of that fixed ridge; the federation's rows alone."""
    from sklearn.covariance import oas

    X, y, client = skewed.X, skewed.y, skewed.client
    auto = FedCGSClassifier(covariance=covariance).fit(X, y, client=client)
    assert auto.shrinkage == "oas"  # the default
    if covariance == "total":  # OAS of the rows themselves: the same covariance, the same rho
        rho = oas(X)[1]
    else:  # the pooled within-class covariance, from the same N rows
        Xw = (
            X
            - np.stack([X[y == c].mean(0) for c in np.unique(y)])[np.searchsorted(np.unique(y), y)]
        )
        rho = oas(Xw, assume_centered=True)[1]
    assert 0.0 < rho < 1.0
    assert auto.shrinkage_ == pytest.approx(rho / (1.0 - rho), rel=1e-10)
    fixed = FedCGSClassifier(covariance=covariance, shrinkage=rho / (1.0 - rho))
    fixed.fit(X, y, client=client)
    np.testing.assert_allclose(auto.coef_, fixed.coef_, rtol=1e-8)
    np.testing.assert_allclose(auto.intercept_, fixed.intercept_, rtol=1e-8)
    central = FedCGSClassifier(covariance=covariance).fit(X, y)
    assert central.shrinkage_ == pytest.approx(auto.shrinkage_, rel=1e-10)
    with pytest.raises(ValueError, match="shrinkage"):
        FedCGSClassifier(shrinkage="ledoit-wolf").fit(X, y)


def test_fedavg_single_client_is_logistic_regression():
    data = make_federated_classification(n_clients=1, alpha=None, random_state=0)
    ours = OneShotFedAvgClassifier(C=0.5, max_iter=2000, tol=1e-10).fit(data.X, data.y)
    ref = LogisticRegression(C=0.5, tol=1e-10, max_iter=5000).fit(data.X, data.y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        ours.intercept_ - ours.intercept_.mean(), ref.intercept_ - ref.intercept_.mean(), atol=1e-4
    )


@pytest.mark.parametrize("local_classes", ["held", "all"])
def test_a_local_head_carried_by_a_translation_is_the_head_trained_on_the_moved_rows(
    local_classes,
):
    """The intercept is not penalised, so a local head trained on rows moved by ``d`` and
    carried to rows moved by ``d'`` (:meth:`LinearHeadUpdate.rebased`) is the head trained
    on the rows moved by ``d'``: the same coefficients, the intercepts up to a common
    constant (which no prediction sees)."""
    data = make_federated_classification(n_clients=1, alpha=None, random_state=0)
    rng = np.random.default_rng(0)
    m = data.X.shape[1]
    first, second = (GaussianMap(np.eye(m), rng.normal(scale=3.0, size=m)) for _ in range(2))
    head = OneShotFedAvgClassifier(C=0.5, max_iter=5000, tol=1e-10, local_classes=local_classes)
    classes = np.unique(data.y)
    trained = [head.client_statistics(t.apply(data.X), data.y, classes) for t in (first, second)]
    carried = trained[0].rebased(first, second)
    np.testing.assert_allclose(carried.coef, trained[1].coef, atol=5e-5)
    centred = [u.intercept - u.intercept.mean() for u in (carried, trained[1])]
    np.testing.assert_allclose(*centred, atol=5e-4)
    assert carried.n == trained[0].n


@short_local_training
@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_fedavg_is_the_weighted_average_of_local_heads(weighting, skewed):
    X, y, client = skewed.X, skewed.y, skewed.client
    keep = client != 0
    X, y, client = X[keep], y[keep], client[keep]
    X, y, client = X[: len(X) - 37], y[: len(y) - 37], client[: len(client) - 37]  # unequal n_k
    template = OneShotFedAvgClassifier(local_classes="all")
    head = template.set_params(weighting=weighting).fit(X, y, client=client)
    classes = np.unique(y)
    locals_ = [
        template.client_statistics(X[client == k], y[client == k], classes) for k in (1, 2, 3)
    ]
    n = np.array([u.n for u in locals_], dtype=float)
    w = n / n.sum() if weighting == "samples" else np.full(3, 1 / 3)
    np.testing.assert_allclose(
        head.coef_, sum(wk * u.coef for wk, u in zip(w, locals_, strict=True)), rtol=1e-10
    )
    for u in locals_:  # a client lacking classes still sends every class row
        assert u.coef.shape == (len(classes), X.shape[1])
        assert u.class_rows is None


@short_local_training
@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_fedavg_averages_each_class_over_the_clients_that_hold_it(weighting):
    rng = np.random.default_rng(0)
    holdings = [(0, 1), (1, 2, 3), (0, 3), (2,)]  # the last client holds one class
    X, y, client = [], [], []
    for k, held in enumerate(holdings):
        for c in held:
            n_kc = 20 + 7 * k + 3 * c
            X.append(rng.normal(size=(n_kc, 4)) + 2.0 * np.eye(4)[c])
            y += [c] * n_kc
            client += [k] * n_kc
    X, y, client = np.vstack(X), np.array(y), np.array(client)
    classes = np.arange(4)
    head = OneShotFedAvgClassifier(weighting=weighting).fit(X, y, client=client)
    locals_ = [
        OneShotFedAvgClassifier().client_statistics(X[client == k], y[client == k], classes)
        for k in range(4)
    ]
    n = np.array([u.n for u in locals_], dtype=float)
    w = n / n.sum() if weighting == "samples" else np.full(4, 1 / 4)
    share = np.stack([wk * u.class_rows / u.n for wk, u in zip(w, locals_, strict=True)])
    mix = share.sum(0) / share.sum()
    for c in classes:
        holders = [k for k, held in enumerate(holdings) if c in held and len(held) >= 2]
        weight = share[holders, c] / share[holders, c].sum()
        np.testing.assert_allclose(
            head.coef_[c],
            sum(v * locals_[k].coef[c] for v, k in zip(weight, holders, strict=True)),
            rtol=1e-10,
        )
        np.testing.assert_allclose(
            head.intercept_[c],
            sum(v * locals_[k].intercept[c] for v, k in zip(weight, holders, strict=True))
            + np.log(mix[c]),
            rtol=1e-10,
        )
    for k, held in enumerate(holdings):  # rows of other classes are zero; the own prior is out
        absent = np.setdiff1d(classes, held)
        assert not locals_[k].coef[absent].any() and not locals_[k].intercept[absent].any()
        np.testing.assert_array_equal(
            locals_[k].class_rows, np.bincount(y[client == k], minlength=4)
        )
    assert not locals_[3].coef.any()  # one class: nothing to discriminate
    # of clients 0 and 3: class 2 held by a one-class client only, class 3 by none
    partial = OneShotFedAvgClassifier().fit_from_statistics([locals_[0], locals_[3]], classes)
    np.testing.assert_array_equal(partial.intercept_[2:], [UNSCORED, UNSCORED])
    assert set(partial.predict(X)) <= {0, 1} and np.isfinite(partial.predict_proba(X)).all()


def test_fedavg_held_classes_travel_and_are_checked():
    from skslot.heads import LinearHeadUpdate
    from skslot.wire import StatisticsFormatError

    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.repeat([0, 2], 15)
    classes = np.arange(3)
    update = OneShotFedAvgClassifier().client_statistics(X, y, classes)
    arrays = update.to_arrays()
    back = LinearHeadUpdate.from_arrays(arrays, classes=classes, n_features=3, n_samples=30)
    np.testing.assert_array_equal(back.class_rows, [15, 0, 15])
    np.testing.assert_array_equal(back.scaled(0.5).class_rows, [7.5, 0, 7.5])
    with pytest.raises(StatisticsFormatError, match="add up to 31"):
        LinearHeadUpdate.from_arrays(
            {**arrays, "class_rows": np.array([15, 1, 15])}, classes=classes, n_features=3
        )
    with pytest.raises(StatisticsFormatError, match="negative"):
        LinearHeadUpdate.from_arrays(
            {**arrays, "class_rows": np.array([16, -1, 15])}, classes=classes, n_features=3
        )


def test_fedavg_private_heads_span_every_class():
    data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    budget = PrivacyBudget(epsilon=8.0, clip_norm=10.0)
    auto = PrivateClassifier(OneShotFedAvgClassifier(C=1e-3), privacy=budget)
    auto.fit(data.X, data.y, client=data.client)
    assert auto.head_._held_prior is None  # every local head spans all classes
    with pytest.raises(ValueError, match="reveals which classes"):
        PrivateClassifier(
            OneShotFedAvgClassifier(C=1e-3, local_classes="held"), privacy=budget
        ).fit(data.X, data.y, client=data.client)


def test_fedpft_seeded_skips_small_classes_and_casts(skewed):
    X, y, client = skewed.X, skewed.y, skewed.client
    a = FedPFTClassifier(random_state=1).fit(X, y, client=client)
    b = FedPFTClassifier(random_state=1).fit(X, y, client=client)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    counts = {(k, c): int(np.sum((client == k) & (y == c))) for k in range(4) for c in range(5)}
    expected_skips = [[(c, n) for c in range(5) if 0 < (n := counts[k, c]) < 2] for k in range(4)]
    assert a.skipped_classes_ == expected_skips
    assert a.n_synthetic_ == sum(n for n in counts.values() if n >= 2)
    msg = FedPFTClassifier().client_statistics(X[client == 0], y[client == 0], np.arange(5))
    for mix in msg.mixtures:  # parameters went through float16
        np.testing.assert_array_equal(mix.means, mix.means.astype(np.float16).astype(float))
    with pytest.raises(ValueError, match="overflow float16"):
        FedPFTClassifier().fit(X * 1e5, y)


def test_fedpft_draws_of_a_client_depend_on_its_class_counts_only(skewed):
    """Leaving a client out, reordering, or merging a client's two parts redraws no one else."""
    X, y, client = skewed.X, skewed.y, skewed.client
    head, classes = FedPFTClassifier(random_state=3), np.arange(5)
    msgs = [head.client_statistics(X[client == k], y[client == k], classes) for k in range(4)]
    every = head._synthetic_rows(msgs, classes, None)
    without_1 = head._synthetic_rows([msgs[0], msgs[2], msgs[3]], classes, None)
    reordered = head._synthetic_rows(msgs[::-1], classes, None)
    for a, b in [(every[0], without_1[0]), (every[2], without_1[1]), (every[3], reordered[0])]:
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    rows = np.flatnonzero(client == 0)
    halves = [rows[::2], rows[1::2]]
    parts = [head.client_statistics(X[h], y[h], classes) for h in halves]
    merged = parts[0].merge(parts[1])
    drawn = head._synthetic_rows([merged], classes, None)[0]
    np.testing.assert_array_equal(drawn[1], every[0][1])
    assert _message_seed(7, merged, classes) == _message_seed(7, msgs[0], classes)
    assert _message_seed(7, msgs[0], classes) != _message_seed(8, msgs[0], classes)
    assert not np.array_equal(every[0][0], every[1][0][: every[0][0].shape[0]])


@pytest.mark.parametrize("covariance_type", ["full", "diag", "spherical"])
@pytest.mark.parametrize("n_components", [1, 2])
def test_fedpft_mixture_options_and_injected_estimator(covariance_type, n_components, skewed):
    head = FedPFTClassifier(
        n_components=n_components,
        covariance_type=covariance_type,
        estimator=LinearDiscriminantAnalysis(),
        random_state=0,
    ).fit(skewed.X, skewed.y, client=skewed.client)
    assert isinstance(head.estimator_, LinearDiscriminantAnalysis)
    assert head.score(skewed.X, skewed.y) > 0.5


@short_local_training
@pytest.mark.parametrize("head", HEADS, ids=lambda h: type(h).__name__)
def test_heads_in_a_routed_pipeline_after_slot(head, federated):
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(SLOTTransformer(tau=0.4, **PAPER), sklearn.clone(head))
        pipe.fit(federated.X, federated.y, client=federated.client)
        assert pipe.score(federated.X, federated.y, client=federated.client) > 0.5


def test_fedpft_sampling_is_bounded_by_configuration_not_by_claims(rng):
    """A message claiming 10^9 rows costs the server at most max_synthetic_per_client rows."""
    import dataclasses

    from skslot.heads import FedPFTClassifier

    X, y = rng.normal(size=(60, 3)), np.repeat([0, 1], 30)
    head = FedPFTClassifier(random_state=0, max_synthetic_per_client=500)
    honest = head.client_statistics(X, y, np.array([0, 1]))
    claims = dataclasses.replace(
        honest, mixtures=[dataclasses.replace(mx, n=10**9) for mx in honest.mixtures]
    )
    head.fit_from_statistics([honest, claims], np.array([0, 1]))
    assert head.n_synthetic_ == 60 + 500


def test_fedpft_factors_a_slightly_indefinite_covariance_with_a_small_jitter():
    """float16 rounding can leave negative eigenvalues: the factor is of cov + jitter I."""
    from skslot.heads._covariance_forms import covariance_factor

    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    w = np.array([-1e-6, 1e-3, 0.5, 1.0, 2.0, 3.0])
    cov = (Q * w) @ Q.T
    L = covariance_factor(cov)
    shift = np.diag(L @ L.T - cov)
    assert np.allclose(shift, shift[0]) and 1e-6 < shift[0] <= 1e-5 * np.trace(cov) / 6
    pd = (Q * np.abs(w)) @ Q.T  # positive definite: the Cholesky factor itself
    np.testing.assert_array_equal(covariance_factor(pd), np.linalg.cholesky(pd))
    with pytest.raises(ValueError, match="too far from positive semi-definite"):
        covariance_factor(-np.eye(3))


# -- FedPFT's compact covariance: low rank plus diagonal -----------------------------------------


def _class_rows(n=60, m=12, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)) @ rng.normal(size=(3, m)) + 0.3 * rng.normal(size=(n, m))


def _lowrank_mixture(rows, rank, dtype="float64"):
    head = FedPFTClassifier(covariance_type="lowrank", rank=rank, transmit_dtype=dtype)
    y = np.zeros(rows.shape[0], dtype=int)
    return head, head.client_statistics(rows, y, np.array([0, 1])).mixtures[0]


def test_lowrank_keeps_the_top_directions_and_every_variance_exactly():
    rows = _class_rows()
    centred = rows - rows.mean(0)
    S = centred.T @ centred / rows.shape[0]
    for rank in (1, 3, 5):
        _, mixture = _lowrank_mixture(rows, rank)
        assert mixture.covariances.shape == (1, 12, rank + 1)
        approx = mixture.full_covariances()[0]
        np.testing.assert_allclose(np.diag(approx), np.diag(S) + 1e-6, rtol=1e-12)
        w, V = np.linalg.eigh(S)
        top = (V[:, -rank:] * w[-rank:]) @ V[:, -rank:].T
        np.testing.assert_allclose(
            approx - np.diag(np.diag(approx)), top - np.diag(np.diag(top)), atol=1e-10
        )
    _, exact = _lowrank_mixture(rows, 12)  # full rank: the full covariance (plus reg_covar)
    np.testing.assert_allclose(exact.full_covariances()[0], S + 1e-6 * np.eye(12), atol=1e-12)


def test_lowrank_samples_exactly_what_was_sent_and_its_pushforward():
    rows = _class_rows(m=6)
    _, mixture = _lowrank_mixture(rows, 2)
    rng = np.random.RandomState(0)
    draws = mixture.sample(200_000, rng)
    np.testing.assert_allclose(np.cov(draws.T), mixture.full_covariances()[0], atol=0.05)
    A = np.random.default_rng(1).normal(size=(6, 6))
    transport = GaussianMap(A, np.arange(6.0))
    moved = mixture.sample(200_000, np.random.RandomState(0), transport)
    np.testing.assert_allclose(moved, transport.apply(draws))  # common random numbers
    expected = mixture.aligned(transport)
    np.testing.assert_allclose(np.cov(moved.T), expected.covariances[0], rtol=0.05, atol=0.05)


def test_lowrank_on_the_wire_is_validated_against_the_configured_rank():
    rows = _class_rows()
    y = np.repeat([0, 1], 30)
    head = FedPFTClassifier(covariance_type="lowrank", rank=3)
    arrays = head.client_statistics(rows, y, np.array([0, 1])).to_arrays()
    assert arrays["covariances"].dtype == np.float16 and arrays["covariances"].shape == (2, 12, 4)
    decoded = head.decode_statistics(arrays, classes=np.array([0, 1]), n_features=12)
    assert decoded.covariance_type == "lowrank" and decoded.rank == 3
    with pytest.raises(StatisticsFormatError, match="covariances"):
        FedPFTClassifier(covariance_type="lowrank", rank=5).decode_statistics(
            arrays, classes=np.array([0, 1]), n_features=12
        )
    negative = {**arrays, "covariances": arrays["covariances"].copy()}
    negative["covariances"][0, 0, -1] = -1.0
    with pytest.raises(StatisticsFormatError, match="negative diagonal"):
        head.decode_statistics(negative, classes=np.array([0, 1]), n_features=12)
    # a tenth of the bytes of the full covariance, at m = 12 and rank 3: m (r + 1) vs m^2
    full = FedPFTClassifier(covariance_type="full").client_statistics(rows, y, np.array([0, 1]))
    full = full.to_arrays()
    assert arrays["covariances"].nbytes * 3 == full["covariances"].nbytes


def test_lowrank_merges_into_full_and_rejects_bad_settings():
    rows = _class_rows()
    y = np.repeat([0, 1], 30)
    head = FedPFTClassifier(covariance_type="lowrank", rank=2, transmit_dtype="float64")
    a = head.client_statistics(rows[:40], y[:40], np.array([0, 1]))
    b = head.client_statistics(rows[40:], y[40:], np.array([0, 1]))
    merged = a.merge(b)
    assert merged.covariance_type == "full"
    assert all(mx.covariance_type == "full" for mx in merged.mixtures)
    wide = FedPFTClassifier(covariance_type="lowrank", rank=40, transmit_dtype="float64")
    stats = wide.client_statistics(rows, y, np.array([0, 1]))
    assert stats.rank == 12  # at most the dimension: the full covariance, exactly
    decoded = wide.decode_statistics(stats.to_arrays(), classes=np.array([0, 1]), n_features=12)
    assert decoded.mixtures[0].covariances.shape == (1, 12, 13)
    with pytest.raises(ValueError, match="fits one component"):
        FedPFTClassifier(covariance_type="lowrank", rank=2, n_components=2).fit(rows, y)


def test_o_fedavg_trains_at_any_feature_scale_and_says_when_it_did_not_converge():
    """Features x1e20 (inside the accepted range) train as at scale 1; max_iter warns."""
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning

    X, y = load_digits(return_X_y=True)
    X, y = X[:600], y[:600]
    with pytest.warns(ConvergenceWarning, match="reached max_iter=5"):
        OneShotFedAvgClassifier(max_iter=5).fit(X, y)
    head = OneShotFedAvgClassifier(max_iter=300, tol=1e-3)
    with warnings.catch_warnings():  # the unscaled reference's convergence is not checked here
        warnings.filterwarnings("ignore", "local training reached max_iter", ConvergenceWarning)
        reference = head.fit(X, y).predict(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        scaled = OneShotFedAvgClassifier(max_iter=300, tol=1e-3).fit(1e20 * X, y)
    assert scaled.n_iter_ > 0
    assert np.mean(scaled.predict(1e20 * X) == reference) > 0.99


def test_o_fedavg_warns_when_local_training_takes_no_step(monkeypatch):
    import scipy.optimize
    from sklearn.exceptions import ConvergenceWarning

    real = scipy.optimize.minimize

    def stuck(fun, x0, **kwargs):
        result = real(fun, x0, **kwargs)
        result.x, result.nit, result.message = x0, 0, "ABNORMAL: LINE SEARCH FAILED"
        return result

    monkeypatch.setattr(scipy.optimize, "minimize", stuck)
    X = np.random.default_rng(0).normal(size=(40, 3))
    with pytest.warns(ConvergenceWarning, match="took no step"):
        OneShotFedAvgClassifier().fit(X, (X[:, 0] > 0).astype(int))


class _FourArgumentFedCGS(FedCGSClassifier):
    """A user's head written against ``_client_statistics(X, y, classes, seed)``."""

    def _client_statistics(self, X, y, classes, seed):
        return super()._client_statistics(X, y, classes, seed)


def test_a_head_written_before_private_releases_still_fits_and_runs(skewed):
    from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol

    head = _FourArgumentFedCGS()
    fitted = head.fit(skewed.X, skewed.y, client=skewed.client)
    exact = FedCGSClassifier().fit(skewed.X, skewed.y, client=skewed.client)
    np.testing.assert_array_equal(fitted.coef_, exact.coef_)
    classes = np.unique(skewed.y)
    parties = {
        k: ClientParty(
            skewed.X[skewed.client == k],
            skewed.y[skewed.client == k],
            head=head,
            classes=classes,
            label=int(k),
        )
        for k in np.unique(skewed.client)
    }
    result = OneShotProtocol(head, tau=0.4, evaluate=False).run(
        InProcessTransport(parties), classes
    )
    assert result.report.status == "completed"
