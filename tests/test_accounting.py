"""One privacy budget per client: its split, its accountant, its enforcement; private FedCGS."""

import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone

from skslot.datasets import make_federated_classification
from skslot.heads import (
    ClassStatistics,
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
)
from skslot.heads._softmax import softmax_objective
from skslot.privacy import (
    DEFAULT_SHARES,
    RELEASES,
    PrivacyBudget,
    PrivacyBudgetExceeded,
    PrivacyWarning,
    PrivateClassifier,
    gaussian_noise_scale,
    released_statistics,
)
from skslot.privacy._statistics import (
    CLASS_STATISTICS_SENSITIVITY,
    LOCAL_HEAD_GRADIENT_TOL,
    LOCAL_HEAD_SENSITIVITY,
    certified_descent,
    private_class_statistics,
    private_local_head,
    rounded_counts,
)

from .test_privacy import exact_delta

dp_accounting = pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")

pytestmark = pytest.mark.filterwarnings(
    "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
)


@pytest.mark.parametrize("epsilon", [0.5, 4.0, 16.0])
def test_one_release_gets_the_exact_gaussian_noise(epsilon):
    # a plan of one release meets Balle and Wang's exact condition, with the least noise
    ledger = PrivacyBudget(epsilon).ledger(["statistics"])
    sigma = ledger.noise_scale("statistics", CLASS_STATISTICS_SENSITIVITY)
    assert exact_delta(sigma, epsilon, CLASS_STATISTICS_SENSITIVITY) <= 1e-5 * (1 + 1e-9)
    assert exact_delta(sigma * (1 - 1e-5), epsilon, CLASS_STATISTICS_SENSITIVITY) > 1e-5
    assert sigma == gaussian_noise_scale(epsilon, 1e-5, CLASS_STATISTICS_SENSITIVITY)


def test_shares_split_the_noise_and_the_plan_composes_to_the_budget():
    budget = PrivacyBudget(2.0, shares={"statistics": 3.0, "evaluation": 0.5})
    ledger = budget.ledger(["summary", "statistics", "evaluation"])
    # the summary keeps its default weight, nine
    assert DEFAULT_SHARES["summary"] == 9.0
    assert ledger.shares == pytest.approx(
        {"summary": 9 / 12.5, "statistics": 3 / 12.5, "evaluation": 0.5 / 12.5}
    )
    z = {r: ledger.noise_multiplier(r) for r in ledger.shares}
    assert z["statistics"] / z["summary"] == pytest.approx(math.sqrt(3.0), rel=1e-12)
    assert PrivacyBudget(1.0).split(["statistics", "evaluation"]) == pytest.approx(
        {"statistics": 0.9, "evaluation": 0.1}
    )
    # the accountant's epsilon of every release of the plan is the budget
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(
        dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(v) for v in z.values()])
    )
    assert accountant.get_epsilon(1e-5) == pytest.approx(2.0, rel=2e-3)
    assert accountant.get_epsilon(1e-5) <= 2.0


def test_the_ledger_refuses_a_release_beyond_its_budget_and_repeats_a_release():
    ledger = PrivacyBudget(1.0).ledger(["summary", "statistics"], client="site-a")
    calls = []

    def mechanism(sigma, rng):
        calls.append(sigma)
        return rng.normal(scale=sigma, size=3)

    first = ledger.release("summary", mechanism, n=100, sensitivity=2.0)
    again = ledger.release("summary", mechanism, n=100, sensitivity=2.0)
    assert again is first and len(calls) == 1  # a repeated request spends nothing
    assert calls[0] == pytest.approx(ledger.noise_multiplier("summary"), rel=1e-12)
    assert 0.0 < ledger.spent() < 1.0  # half the plan spent
    with pytest.raises(PrivacyBudgetExceeded, match=r"'site-a'.*'evaluation' is not covered"):
        ledger.release("evaluation", mechanism, n=100, sensitivity=1.0)
    ledger.release("statistics", mechanism, n=100, sensitivity=2.0)
    assert ledger.spent() == pytest.approx(1.0, rel=2e-3)
    assert ledger.spent() <= 1.0
    report = ledger.to_dict()
    assert report["releases"]["statistics"]["released"] and report["spent"] == ledger.spent()
    assert ledger.released == ("summary", "statistics")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 0.0}, r"epsilon must be a real number in \(0.0, 1000000.0\], got 0.0"),
        ({"epsilon": float("nan")}, "epsilon must be a real number in"),
        ({"epsilon": 1.0, "delta": 1.0}, r"delta must be a real number in \(0.0, 1.0\)"),
        ({"epsilon": True}, "epsilon must be a real number in"),
        ({"epsilon": 1.0, "clip_norm": float("inf")}, "clip_norm must be a real number > 0.0"),
        ({"epsilon": 1.0, "shares": {"gram": 1.0}}, "unknown release 'gram'"),
        ({"epsilon": 1.0, "shares": {"summary": 0.0}}, "share of 'summary' must be a positive"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrivacyBudget(**kwargs)


def test_a_plan_must_name_known_distinct_releases():
    budget = PrivacyBudget(1.0)
    for releases in ([], ["summary", "summary"], ["gram"]):
        with pytest.raises(ValueError, match="releases must be distinct names"):
            budget.ledger(releases)
    assert set(budget.split(RELEASES)) == set(RELEASES)


def test_the_statistics_sensitivity_is_tight():
    rng = np.random.default_rng(0)
    iu = np.triu_indices(3)
    classes = np.arange(2)

    def release(rows, labels):  # the released vector: sums, counts, upper(G) about zero
        onehot = (labels[:, None] == classes).astype(float)
        return np.concatenate([(onehot.T @ rows).ravel(), onehot.sum(0), (rows.T @ rows)[iu]])

    base = rng.normal(size=(20, 3))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    labels = np.arange(20) % 2
    worst = 0.0
    for _ in range(2000):
        v = rng.normal(size=3)
        v *= rng.uniform(0, 1) / np.linalg.norm(v)
        other, other_label = base.copy(), labels.copy()
        other[0], other_label[0] = v, rng.integers(2)
        worst = max(worst, np.linalg.norm(release(other, other_label) - release(base, labels)))
    assert worst <= CLASS_STATISTICS_SENSITIVITY
    # reached: two orthogonal unit rows of different classes
    e = np.eye(3)
    rows, other = e[[0, 1, 2, 2]], e[[1, 1, 2, 2]]
    labels, other_labels = np.array([0, 1, 0, 1]), np.array([1, 1, 0, 1])
    gap = np.linalg.norm(release(other, other_labels) - release(rows, labels))
    assert gap == pytest.approx(CLASS_STATISTICS_SENSITIVITY, rel=1e-12)


def test_private_statistics_are_consistent_clipped_and_have_the_stated_noise():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 3)) * 2.0
    y = rng.integers(0, 3, size=400)
    classes = np.arange(3)
    X_before = X.copy()
    C = 1.5
    clipped = X * np.minimum(1.0, C / np.linalg.norm(X, axis=1, keepdims=True))
    exact = ClassStatistics.from_rows(clipped, y, classes)
    draws = []
    for seed in range(300):
        s = private_class_statistics(
            X, y, classes, clip_norm=C, sigma=0.2, rng=np.random.default_rng(seed)
        )
        # every check a server applies to exact statistics passes
        ClassStatistics.from_arrays(s.to_arrays(), classes=classes, n_features=3, n_samples=400)
        draws.append(s.sums.ravel())
    np.testing.assert_array_equal(X, X_before)  # the caller's rows are not clipped in place
    draws = np.asarray(draws)
    np.testing.assert_allclose(draws.mean(axis=0), exact.sums.ravel(), atol=4 * 0.2 * C / 17)
    np.testing.assert_allclose(draws.std(axis=0), 0.2 * C, rtol=0.2)


def test_rounded_counts_are_integers_adding_up_to_n():
    for noisy, n in (([3.4, -2.0, 7.9], 11), ([0.0, 0.0], 5), ([-1.0, -3.0], 4), ([1e3, 1.0], 3)):
        counts = rounded_counts(np.asarray(noisy), n)
        assert counts.sum() == n and np.all(counts >= 0)
        np.testing.assert_array_equal(counts, np.rint(counts))
    np.testing.assert_array_equal(rounded_counts(np.array([2.0, 5.0, 3.0]), 10), [2, 5, 3])


def test_private_fedcgs_reports_its_spending_and_stays_close_to_exact():
    data = make_federated_classification(n_clients=3, n_samples_per_client=400, random_state=0)
    clip = float(np.linalg.norm(data.X, axis=1).max())  # known bound here: nothing is clipped
    exact = FedCGSClassifier().fit(data.X, data.y, client=data.client)
    budget = PrivacyBudget(8.0, clip_norm=clip, random_state=0)
    private = PrivateClassifier(FedCGSClassifier(), privacy=budget)
    private.fit(data.X, data.y, client=data.client)
    assert set(private.privacy_spent_) == set(np.unique(data.client))
    for spent in private.privacy_spent_.values():
        assert 7.9 < spent <= 8.0
    agreement = np.mean(private.predict(data.X) == exact.predict(data.X))
    assert agreement > 0.75
    weak = PrivateClassifier(
        FedCGSClassifier(), privacy=PrivacyBudget(0.05, clip_norm=clip, random_state=0)
    )
    weak.fit(data.X, data.y, client=data.client)
    assert np.mean(weak.predict(data.X) == exact.predict(data.X)) < agreement
    assert not hasattr(exact, "privacy_spent_")
    assert clone(private).privacy == budget and not hasattr(private.head, "classes_")


def test_private_fedavg_reports_its_spending_and_stays_close_to_its_minimisers():
    data = make_federated_classification(n_clients=3, n_samples_per_client=400, random_state=0)
    clip = float(np.linalg.norm(data.X, axis=1).max())  # known bound here: nothing is clipped
    C = 1e-3  # C' = C clip^2 = 0.38: the noise on each parameter is about the weights' size

    def accuracy(budget):
        head = PrivateClassifier(OneShotFedAvgClassifier(C=C), privacy=budget)
        return head, np.mean(head.fit(data.X, data.y, client=data.client).predict(data.X) == data.y)

    private, noisy = accuracy(PrivacyBudget(8.0, clip_norm=clip, random_state=0))
    assert set(private.privacy_spent_) == set(np.unique(data.client))
    assert all(7.9 < spent <= 8.0 for spent in private.privacy_spent_.values())
    # the heads the releases are centred on: the same minimisers, without noise
    classes = np.unique(data.y)
    heads = [
        np.column_stack(
            private_local_head(
                data.X[data.client == k], np.searchsorted(classes, data.y[data.client == k]),
                classes.shape[0], C=C, clip_norm=clip, sigma=0.0,
                rng=np.random.default_rng(0), max_iter=100,
            )
        )
        for k in np.unique(data.client)
    ]  # fmt: skip
    Wb = sum(w * h for w, h in zip(np.bincount(data.client) / 1200, heads, strict=True))
    predicted = classes[np.argmax(data.X @ Wb[:, :-1].T + Wb[:, -1], axis=1)]
    exact = np.mean(predicted == data.y)
    assert exact > 0.6 and noisy > exact - 0.05
    assert accuracy(PrivacyBudget(0.05, clip_norm=clip, random_state=0))[1] < noisy - 0.1


def test_the_private_local_head_is_the_penalised_minimiser_within_its_sensitivity():
    """Output perturbation's premises: the minimiser, and neighbours within ``4 C'``."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 3, 60)
    C, clip = 0.5, 1.5

    def head(X, y):
        coef, intercept = private_local_head(
            X, y, 3, C=C, clip_norm=clip, sigma=0.0, rng=rng, max_iter=500
        )
        return np.column_stack([coef * clip, intercept])  # in units of the clip norm

    theta = head(X, y)
    # the gradient of the penalised objective of the clipped rows (units of clip) vanishes
    U = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), clip)
    _, grad = softmax_objective(U, y, 3, C=C * clip**2, penalise_intercept=True)(theta.ravel())
    assert np.linalg.norm(grad) <= LOCAL_HEAD_GRADIENT_TOL
    # scikit-learn's objective leaves the intercept unpenalised: another minimiser
    assert np.linalg.norm(theta[:, -1]) > 0
    # replacing one row, anywhere, moves the released point by at most the sensitivity
    worst = 0.0
    for i in range(20):
        Xn, yn = X.copy(), y.copy()
        Xn[i] = 10.0 * rng.normal(size=4)  # clipped: far outside the ball
        yn[i] = (y[i] + 1) % 3
        worst = max(worst, float(np.linalg.norm(head(Xn, yn) - theta)))
    assert 0.05 * LOCAL_HEAD_SENSITIVITY * C * clip**2 < worst
    assert worst <= LOCAL_HEAD_SENSITIVITY * C * clip**2


def test_a_private_local_head_whose_solver_stops_short_is_released_all_the_same():
    """Nothing is refused, so no bit of the data leaks through a refusal: a solver stopped
    after 2 iterations is completed by a descent whose guarantee holds whatever the data,
    to within ``C' * tol`` of the minimiser."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 3, 60)
    clip = 1.5
    for C in (0.5, 50.0):  # the second: 2 L-BFGS iterations are far from the minimiser

        def head(max_iter, X=X, y=y, C=C):
            coef, intercept = private_local_head(
                X, y, 3, C=C, clip_norm=clip, sigma=0.0, rng=rng, max_iter=max_iter
            )
            return np.column_stack([coef * clip, intercept])  # in units of the clip norm

        U = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), clip)
        objective = softmax_objective(U, y, 3, C=C * clip**2, penalise_intercept=True)
        stopped, converged = head(2), head(1000)
        exact = certified_descent(objective, converged, n_rows=60, C=C * clip**2, tol=1e-9)
        assert np.linalg.norm(stopped - exact) <= C * clip**2 * LOCAL_HEAD_GRADIENT_TOL
    # the descent's own guarantee, from a start far away and at its fixed number of steps
    start = np.full((3, 5), 3.0)
    reached = certified_descent(objective, start, n_rows=60, C=C * clip**2)
    assert np.linalg.norm(reached - exact) <= C * clip**2 * LOCAL_HEAD_GRADIENT_TOL
    assert np.linalg.norm(start - exact) > 10 * C * clip**2 * LOCAL_HEAD_GRADIENT_TOL


def test_a_client_step_under_a_ledger_releases_once():
    data = make_federated_classification(n_clients=2, random_state=0)
    budget = PrivacyBudget(4.0, clip_norm=10.0, random_state=0)
    head = FedCGSClassifier()
    ledger = budget.ledger(["summary", "statistics"], client=0)
    classes = np.unique(data.y)
    first = released_statistics(head, data.X, data.y, classes, ledger)
    again = released_statistics(head, data.X, data.y, classes, ledger)
    assert again is first and ledger.released == ("statistics",)
    assert first.counts.sum() == data.X.shape[0]
    with pytest.raises(PrivacyBudgetExceeded, match="'statistics' is not covered"):
        released_statistics(head, data.X, data.y, classes, budget.ledger(["summary"]))
    with pytest.raises(PrivacyBudgetExceeded, match="'local_head' is not covered"):
        released_statistics(
            OneShotFedAvgClassifier(), data.X, data.y, classes, budget.ledger(["statistics"])
        )


def test_a_fixed_noise_seed_warns():
    data = make_federated_classification(n_clients=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        with pytest.raises(PrivacyWarning, match="random_state fixes the privacy noise"):
            PrivateClassifier(FedCGSClassifier(), privacy=PrivacyBudget(4.0, random_state=1)).fit(
                data.X, data.y, client=data.client
            )
        PrivateClassifier(FedCGSClassifier(), privacy=PrivacyBudget(4.0)).fit(
            data.X, data.y, client=data.client
        )


@pytest.mark.parametrize("covariance_type", ["lowrank", "full", "diag", "spherical"])
def test_private_fedpft_sends_one_checked_gaussian_per_class(covariance_type):
    data = make_federated_classification(n_clients=2, n_samples_per_client=300, random_state=1)
    budget = PrivacyBudget(8.0, clip_norm=10.0, random_state=0)
    head = FedPFTClassifier(covariance_type=covariance_type, rank=3, random_state=0)
    private = PrivateClassifier(head, privacy=budget).fit(data.X, data.y, client=data.client)
    assert all(7.9 < e <= 8.0 for e in private.privacy_spent_.values())
    classes = np.unique(data.y)
    rows = data.client == 0
    ledger = budget.ledger(["statistics"], client=0)
    message = released_statistics(head, data.X[rows], data.y[rows], classes, ledger)
    # what the server decodes passes every check of an exact message, and counts every row
    decoded = head.decode_statistics(
        message.to_arrays(),
        classes=classes,
        n_features=data.X.shape[1],
        n_samples=int(rows.sum()),
    )
    assert decoded.n_samples == rows.sum()
    assert all(len(mx.weights) == 1 for mx in decoded.mixtures)


def test_private_fedpft_fits_one_component():
    with pytest.raises(ValueError, match="one Gaussian per class"):
        PrivateClassifier(
            FedPFTClassifier(n_components=2, covariance_type="full"), privacy=PrivacyBudget(1.0)
        ).fit(np.eye(4), [0, 1, 0, 1])


def test_a_fixed_noise_seed_still_gives_each_client_its_own_noise(monkeypatch):
    import skslot.privacy._heads as heads

    data = make_federated_classification(n_clients=2, n_samples_per_client=200, random_state=0)
    rows = data.client == 0
    X = np.vstack([data.X[rows], data.X[rows]])  # two clients holding the same rows
    y = np.concatenate([data.y[rows], data.y[rows]])
    client = np.repeat([0, 1], rows.sum())
    released = []

    def recorded(*args):
        released.append(released_statistics(*args))
        return released[-1]

    monkeypatch.setattr(heads, "released_statistics", recorded)
    head = PrivateClassifier(
        FedCGSClassifier(), privacy=PrivacyBudget(4.0, clip_norm=10.0, random_state=0)
    )
    head.fit(X, y, client=client)
    first, second = released
    assert not np.allclose(first.sums, second.sums)  # correlated noise would not average out
    head.fit(X, y, client=client)  # the same fit again, reproducibly
    np.testing.assert_array_equal(released[3].sums, second.sums)


def test_a_releases_noise_depends_on_its_name_not_on_the_known_releases(monkeypatch):
    import skslot.privacy._accounting as accounting

    budget = PrivacyBudget(4.0)

    def draws() -> dict[str, np.ndarray]:
        ledger = budget.ledger(("summary", "class_counts"), seed=7)
        return {
            name: ledger.release(
                name, lambda s, rng: rng.standard_normal(4), n=100, sensitivity=1.0
            )
            for name in ("summary", "class_counts")
        }

    before = draws()
    monkeypatch.setattr(accounting, "RELEASES", ("a_new_release", *accounting.RELEASES))
    monkeypatch.setitem(accounting.DEFAULT_SHARES, "a_new_release", 1.0)
    after = draws()
    for name in before:  # the same bytes, though every release moved one place in RELEASES
        assert before[name].tobytes() == after[name].tobytes()
    assert not np.array_equal(before["summary"], before["class_counts"])


def test_the_release_plan_is_one_table_of_the_protocol_s_stages():
    from skslot.privacy import RELEASE_PLAN, releases_at
    from skslot.protocol.stages import STAGES

    assert RELEASES == tuple(release.name for release in RELEASE_PLAN)
    assert DEFAULT_SHARES == {release.name: release.share for release in RELEASE_PLAN}
    assert {release.stage for release in RELEASE_PLAN} <= set(STAGES)
    # every release is carried by a stage whose requests a private client matches against its
    # plan (the others refuse every request), in the protocol's order
    from skslot.protocol.stages import Stage

    answering = {
        n for n, st in STAGES.items() if type(st).private_problem is not Stage.private_problem
    }
    assert {release.stage for release in RELEASE_PLAN} == answering - {"refit"}
    assert sum((releases_at(stage) for stage in STAGES), ()) == RELEASES
