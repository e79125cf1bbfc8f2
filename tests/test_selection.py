"""Server-side alignment of statistics and the federated choice of tau (skslot.selection)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skslot import (
    BuresBarycenter,
    FederatedTauSearch,
    GaussianMap,
    GaussianSummaryEstimator,
    SLOTTransformer,
    SmallClientWarning,
    UnknownClientWarning,
)
from skslot._moments import ShiftedMoments
from skslot.datasets import make_federated_classification
from skslot.heads import (
    FedCGSClassifier,
    FedPFTClassifier,
    LinearScores,
    OneShotFedAvgClassifier,
    StatisticsFormatError,
)
from skslot.protocol.stages import validation as validation_stage
from skslot.protocol.stages.validation import ValidationCounts, score_candidates
from skslot.selection import (
    Candidate,
    candidate_grid,
    check_tau_grid,
    select_candidate,
    validation_split,
)

from .conftest import PAPER, fitting_rows, short_local_training

TAUS = (0.0, 0.3, 0.7, 1.0)
HEADS = [
    FedCGSClassifier(),
    FedPFTClassifier(random_state=0),
    OneShotFedAvgClassifier(random_state=0),
]


@pytest.fixture(scope="module")
def shifted():
    """Three clients with domain and label shift, features far from the origin."""
    data = make_federated_classification(
        n_clients=3, n_samples_per_client=200, alpha=0.5, domain_shift=2.0, random_state=1
    )
    slot = SLOTTransformer(**PAPER).fit(data.X + 1e3, client=data.client)
    return data.X + 1e3, data.y, data.client, slot


def _relative(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


# -- a map acting on statistics --------------------------------------------------------------


def test_pushed_sums_and_moments_equal_those_of_mapped_rows(rng):
    X = rng.normal(5.0, 2.0, size=(50, 4))
    A = rng.normal(size=(4, 4))
    T = GaussianMap(A, rng.normal(size=4))
    Y = T.apply(X)
    moments = T.push_moments(ShiftedMoments.from_rows(X, fourth_order=False))
    np.testing.assert_allclose(moments.mean, Y.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(
        moments.centred().gram, (Y - Y.mean(0)).T @ (Y - Y.mean(0)), rtol=1e-10
    )
    counts = np.array([20.0, 30.0])
    sums = np.vstack([X[:20].sum(0), X[20:].sum(0)])
    expected = np.vstack([Y[:20].sum(0), Y[20:].sum(0)])
    np.testing.assert_allclose(T.push_sums(sums, counts), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="fourth-order"):
        T.push_moments(ShiftedMoments.from_rows(X))


@pytest.mark.parametrize("tau", TAUS)
def test_fedcgs_from_server_aligned_statistics_equals_client_aligned_rows(shifted, tau):
    X, y, client, slot = shifted
    classes = np.unique(y)
    aligned = slot.set_params(tau=tau).transform(X, client=client)
    expected = FedCGSClassifier().fit(aligned, y, client=client)
    head = FedCGSClassifier()
    raw = [head.client_statistics(X[client == k], y[client == k], classes) for k in range(3)]
    maps = [slot.maps_[k].geodesic(tau) for k in range(3)]
    got = FedCGSClassifier().fit_from_statistics(raw, classes, maps=maps)
    assert _relative(got.coef_, expected.coef_) < 1e-8
    assert _relative(got.intercept_, expected.intercept_) < 1e-8
    np.testing.assert_array_equal(got.predict(aligned), expected.predict(aligned))


@pytest.mark.parametrize("tau", TAUS)
def test_fedpft_mixtures_push_forward_exactly(shifted, tau):
    """Before the transmit cast (float64, no ridge), the pushed mixture is the aligned rows' one.

    For full covariances; the low-rank form keeps the top directions of the
    rows it was fitted on, which a general linear map does not preserve, so
    the server samples its exact pushforward instead (tests/test_heads.py).
    """
    X, y, client, slot = shifted
    classes = np.unique(y)
    head = FedPFTClassifier(covariance_type="full", transmit_dtype="float64", reg_covar=0.0)
    T = slot.maps_[0].geodesic(tau)
    pushed = head.client_statistics(X[client == 0], y[client == 0], classes).aligned(T)
    direct = head.client_statistics(T.apply(X[client == 0]), y[client == 0], classes)
    assert len(pushed.mixtures) == len(direct.mixtures) > 1
    for p, d in zip(pushed.mixtures, direct.mixtures, strict=True):
        assert p.label == d.label and p.n == d.n
        assert _relative(p.means, d.means) < 1e-10
        assert _relative(p.covariances, d.covariances) < 1e-10


def test_diagonal_mixture_pushes_to_a_full_one(rng):
    head = FedPFTClassifier(covariance_type="diag", transmit_dtype="float64")
    X, y = rng.normal(size=(40, 3)), np.repeat([0, 1], 20)
    T = GaussianMap(rng.normal(size=(3, 3)), np.zeros(3))
    mixture = head.client_statistics(X, y, np.array([0, 1])).mixtures[0]
    pushed = mixture.aligned(T)
    assert pushed.covariance_type == "full"
    np.testing.assert_allclose(
        pushed.covariances[0], T.linear @ np.diag(mixture.covariances[0]) @ T.linear.T
    )


def test_sampling_the_pushforward_maps_the_same_draws(rng):
    """One factorisation serves every tau: a draw of N(Am+b, ASA^T) is T of a draw of N(m, S)."""
    head = FedPFTClassifier(transmit_dtype="float64")
    X, y = rng.normal(size=(60, 3)) @ rng.normal(size=(3, 3)), np.zeros(60, dtype=int)
    mixture = head.client_statistics(X, y, np.array([0, 1])).mixtures[0]
    T = GaussianMap(rng.normal(size=(3, 3)) + 3 * np.eye(3), rng.normal(size=3))
    plain = mixture.sample(50_000, np.random.RandomState(0))
    mapped = mixture.sample(50_000, np.random.RandomState(0), T)
    np.testing.assert_allclose(mapped, T.apply(plain), rtol=1e-12)
    target = mixture.aligned(T)
    np.testing.assert_allclose(mapped.mean(0), target.means[0], atol=0.05 * np.abs(T.linear).max())
    np.testing.assert_allclose(np.cov(mapped.T), target.covariances[0], rtol=0.05, atol=0.05)


@short_local_training
def test_a_head_trained_on_rows_refuses_server_side_maps(shifted):
    X, y, client, slot = shifted
    head = OneShotFedAvgClassifier()
    stats = [head.client_statistics(X[client == 0], y[client == 0], np.unique(y))]
    with pytest.raises(TypeError, match="cannot be aligned by the server"):
        head.fit_from_statistics(stats, np.unique(y), maps=[slot.maps_[0]])
    with pytest.raises(ValueError, match="1 maps for the statistics of 2 clients"):
        FedCGSClassifier().fit_from_statistics(
            [FedCGSClassifier().client_statistics(X, y, np.unique(y))] * 2,
            np.unique(y),
            maps=[slot.maps_[0]],
        )


# -- the protocol's pieces ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taus", "message"),
    [
        ((0.0, 1.5), r"each tau must be in \[0.0, 1.0\], got 1.5"),
        ((-0.1,), r"each tau must be in \[0.0, 1.0\]"),
        ((0.2, 0.4, 0.2), r"taus repeats \[0.2\]"),
        ((), "at least one value"),
        ("0.4", "must be a sequence"),
        ((0.1, "x"), "must be a real number"),
    ],
)
def test_bad_tau_grids_are_clear_errors(taus, message):
    with pytest.raises(ValueError, match=message):
        check_tau_grid(taus)


def test_candidate_grid_orders_by_tau_and_only_searches_server_parameters():
    grid = candidate_grid(FedCGSClassifier(), (1.0, 0.0), {"shrinkage": [1e-3, 1e-1]})
    assert [c.describe() for c in grid] == [
        {"tau": 0.0, "shrinkage": 1e-3},
        {"tau": 0.0, "shrinkage": 1e-1},
        {"tau": 1.0, "shrinkage": 1e-3},
        {"tau": 1.0, "shrinkage": 1e-1},
    ]
    with pytest.raises(ValueError, match=r"server-side parameters .* got 'C'"):
        candidate_grid(OneShotFedAvgClassifier(), (0.0,), {"C": [1.0]})
    with pytest.raises(ValueError, match="non-empty list"):
        candidate_grid(FedCGSClassifier(), (0.0,), {"shrinkage": []})


def test_validation_split_is_stratified_and_keeps_a_fitting_row_per_class():
    y = np.array([0] * 10 + [1] * 3 + [2])
    fit, val = validation_split(y, 0.4, seed=3)
    assert np.bincount(y[val], minlength=3).tolist() == [4, 1, 0]
    assert sorted(np.concatenate([fit, val]).tolist()) == list(range(14))
    assert set(y[fit]) == {0, 1, 2}
    again = validation_split(y, 0.4, seed=3)
    np.testing.assert_array_equal(val, again[1])
    assert validation_split(np.array([0, 1, 1]), 0.2, seed=0)[1].size == 0
    with pytest.raises(ValueError, match=r"validation_fraction must be in \(0, 1\)"):
        validation_split(y, 1.0, seed=0)


def test_validation_counts_are_decoded_then_checked_against_the_upload():
    good = {"correct": np.array([[1, 2], [0, 3]]), "total": np.array([2, 3])}
    counts = ValidationCounts.from_arrays(good, n_candidates=2, n_classes=2)
    np.testing.assert_allclose(counts.balanced_accuracy(), [(0.5 + 2 / 3) / 2, 0.5])
    assert validation_stage.check(counts, 2, 2, 5) is None
    assert validation_stage.check(counts, 2, 2, 6) == (
        "validation counts cover 5 rows, but the client's validation part has 6"
    )
    bad = ValidationCounts.from_arrays(
        {"correct": np.array([[3, 2], [0, 3]]), "total": np.array([2, 3])},
        n_candidates=2,
        n_classes=2,
    )
    assert "more correct predictions" in validation_stage.check(bad, 2, 2, 5)
    assert "expected (3, 2)" in validation_stage.check(counts, 3, 2, 5)
    with pytest.raises(StatisticsFormatError, match="has shape"):
        ValidationCounts.from_arrays(good, n_candidates=3, n_classes=2)
    negative = {"correct": np.array([[-1, 2], [0, 3]]), "total": np.array([2, 3])}
    with pytest.raises(StatisticsFormatError, match="negative"):
        ValidationCounts.from_arrays(negative, n_candidates=2, n_classes=2)


def _counts(correct, total):
    return ValidationCounts(np.array(correct), np.array(total))


def test_selection_rules():
    candidates = [Candidate(0.0), Candidate(0.4), Candidate(1.0)]
    # a large client and a small one: each weighs the same (balanced accuracy, mean over clients)
    counts = {
        "big": _counts([[600, 300], [610, 310], [400, 200]], [1000, 500]),
        "small": _counts([[8, 4], [9, 4], [2, 2]], [10, 5]),
    }
    best = select_candidate(candidates, counts, "best")
    assert best.index == 1 and best.best == 1
    scores = best.table()["mean_validation_score"]
    np.testing.assert_allclose(scores[1], ((0.61 + 0.62) / 2 + (0.9 + 0.8) / 2) / 2)
    # within one standard error of the best, the least transport wins
    safe = select_candidate(candidates, counts)
    assert safe.index == 0 and safe.best == 1
    assert scores[0] >= scores[1] - safe.standard_errors[1]
    table = pd.DataFrame(safe.table())
    assert table["chosen"].tolist() == [True, False, False]
    assert table["rank_validation_score"].tolist() == [2, 1, 3]
    # with many validation rows the standard error is small: the best is chosen
    many = {k: _counts(100 * np.array(c.correct), 100 * c.total) for k, c in counts.items()}
    assert select_candidate(candidates, many).index == 1


def test_selection_leaves_out_clients_without_validation_rows():
    candidates = [Candidate(0.0), Candidate(1.0)]
    counts = {0: _counts([[1], [2]], [2]), 1: _counts([[0], [0]], [0])}
    assert select_candidate(candidates, counts).clients == [0]
    with pytest.raises(ValueError, match="no client has validation rows"):
        select_candidate(candidates, {1: counts[1]})
    with pytest.raises(ValueError, match="scored 2 candidates, not 3"):
        select_candidate([*candidates, Candidate(0.5)], counts)
    with pytest.raises(ValueError, match="rule must be one of"):
        select_candidate(candidates, counts, "worst")


def test_scores_use_each_candidates_tau(rng):
    X, y = rng.normal(size=(30, 2)), rng.integers(0, 2, 30)
    T = GaussianMap(2 * np.eye(2), np.array([5.0, 0.0]))
    head = LinearScores(np.array([0, 1]), np.array([[-1.0, 0.0], [1.0, 0.0]]), np.zeros(2))
    counts = score_candidates([head, head], [0.0, 1.0], T, X, y, np.array([0, 1]))
    for j, tau in enumerate([0.0, 1.0]):
        hit = head.predict(T.geodesic(tau).apply(X)) == y
        assert counts.correct[j].tolist() == np.bincount(y[hit], minlength=2).tolist()
    assert counts.total.tolist() == np.bincount(y, minlength=2).tolist()


# -- FederatedTauSearch -----------------------------------------------------------------------


@parametrize_with_checks([FederatedTauSearch(head, random_state=0) for head in HEADS])
def test_sklearn_compatible(estimator, check):
    check(estimator)


@short_local_training
@pytest.mark.parametrize("head", HEADS, ids=lambda h: type(h).__name__)
def test_refit_equals_the_head_on_all_rows_aligned_at_the_chosen_tau(federated, head):
    X, y, client = federated.X, federated.y, federated.client
    head = clone(head).set_params(label_mix="federation")  # every mean to the reference
    slot = SLOTTransformer(label_mix="federation")
    search = FederatedTauSearch(head, slot=slot, taus=(0.0, 0.5, 1.0), random_state=0)
    search.fit(X, y, client=client)
    assert search.best_params_ == {"tau": search.best_tau_}
    Z = search.slot_.transform(X, client=client)
    if isinstance(head, FedPFTClassifier):  # sampled from the two parts' mixtures: close only
        assert search.score(X, y, client=client) > 0.6
        return
    expected = type(head)(**head.get_params()).fit(Z, y, client=client)
    assert _relative(search.best_estimator_.coef_, expected.coef_) < 1e-6
    np.testing.assert_array_equal(
        search.predict(X, client=client), expected.predict(Z, client=client)
    )


def test_search_reports_a_table_per_candidate_and_client(federated):
    search = FederatedTauSearch(
        FedCGSClassifier(), head_grid={"shrinkage": [1e-3, 1e-1]}, random_state=0
    ).fit(federated.X, federated.y, client=federated.client)
    table = pd.DataFrame(search.cv_results_)
    assert len(table) == 12 and search.selection_clients_ == [0, 1, 2, 3]
    assert {f"client{i}_validation_score" for i in range(4)} <= set(table.columns)
    assert table.loc[search.best_index_, "chosen"]
    assert search.best_params_ == table.loc[search.best_index_, "params"]
    assert search.best_score_ == table.loc[search.best_index_, "mean_validation_score"]
    assert len(search.candidate_heads_) == 12


def test_no_refit_keeps_the_chosen_candidate(federated):
    search = FederatedTauSearch(FedCGSClassifier(), refit=False, random_state=0).fit(
        federated.X, federated.y, client=federated.client
    )
    assert search.best_estimator_ is search.candidate_heads_[search.best_index_]


def test_a_frozen_slot_transformer_is_reused(federated):
    X, y, client = federated.X, federated.y, federated.client
    fit = np.sort(np.concatenate(list(fitting_rows(y, client, 0).values())))
    slot = SLOTTransformer(**PAPER).fit(X[fit], client=client[fit])  # on the search's fitting rows
    fresh = FederatedTauSearch(
        FedCGSClassifier(label_mix="federation"), slot=SLOTTransformer(**PAPER), random_state=0
    ).fit(X, y, client=client)
    frozen = FederatedTauSearch(
        FedCGSClassifier(label_mix="federation"), slot=FrozenEstimator(slot), random_state=0
    ).fit(X, y, client=client)
    # FedCGS's summaries are derived from its statistics, the frozen ones computed directly:
    # the same Ledoit-Wolf summaries up to rounding, and the frozen maps on both sides
    np.testing.assert_allclose(
        fresh.best_estimator_.coef_, frozen.best_estimator_.coef_, rtol=1e-9, atol=1e-12
    )
    for k in frozen.clients_:
        np.testing.assert_allclose(frozen.slot_.maps_[k].linear, slot.maps_[k].linear, rtol=1e-12)
    # a client the frozen transformer has no map for: refused before any work
    others = np.where(client == 3, 7, client)
    with pytest.raises(ValueError, match=r"the fitted reference has no map for clients \[7\]"):
        FederatedTauSearch(
            FedCGSClassifier(label_mix="federation"), slot=FrozenEstimator(slot)
        ).fit(X, y, client=others)


def test_a_frozen_transformer_s_maps_align_the_clients_held_out_rows(federated):
    """The server's maps and each client's are the frozen ones, even where the client's own
    summary (of its fitting rows) would make another map: the counts say so."""
    from sklearn.metrics import balanced_accuracy_score

    X, y, client = federated.X, federated.y, federated.client
    slot = SLOTTransformer(**PAPER).fit(X + 3.0 * client[:, None], client=client)  # other maps
    search = FederatedTauSearch(
        FedCGSClassifier(label_mix="federation"),
        taus=(0.0, 1.0),
        slot=FrozenEstimator(slot),
        random_state=0,
    ).fit(X, y, client=client)
    table = search.cv_results_
    kept = fitting_rows(y, client, 0)
    for i, k in enumerate(search.selection_clients_):
        own = np.flatnonzero(client == k)
        held = np.setdiff1d(own, kept[k])
        for j, tau in enumerate(table["param_tau"]):
            Z = slot.maps_[k].geodesic(float(tau)).apply(X[held])
            expected = balanced_accuracy_score(y[held], search.candidate_heads_[j].predict(Z))
            assert table[f"client{i}_validation_score"][j] == pytest.approx(expected, rel=1e-12)


def test_small_clients_are_left_out_of_the_choice(federated):
    X, y, client = federated.X, federated.y, federated.client.copy()
    tiny = np.flatnonzero(client == 3)[:4]
    keep = np.isin(np.arange(len(y)), tiny) | (client != 3)
    search = FederatedTauSearch(FedCGSClassifier(), validation_fraction=0.1, random_state=0)
    search.fit(X[keep], y[keep], client=client[keep])
    assert 3 in search.left_out_ and "no validation rows" in search.left_out_[3]
    assert search.selection_clients_ == [0, 1, 2]
    with pytest.raises(ValueError, match="no client has validation rows"):
        FederatedTauSearch(FedCGSClassifier(), validation_fraction=0.01).fit(
            X[:40], y[:40], client=client[:40]
        )


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"taus": (0, 0, 1)}, ValueError, "repeats"),
        ({"taus": (0, 2)}, ValueError, r"each tau must be in \[0.0, 1.0\]"),
        ({"validation_fraction": 0.0}, ValueError, "validation_fraction"),
        ({"head_grid": {"max_iter": [10]}}, ValueError, "server-side parameters"),
    ],
)
def test_bad_parameters_are_clear_errors(federated, params, error, message):
    search = FederatedTauSearch(OneShotFedAvgClassifier(), **params)
    with pytest.raises(error, match=message):
        search.fit(federated.X, federated.y, client=federated.client)


def test_head_must_be_a_one_shot_head(federated):
    from sklearn.linear_model import LogisticRegression

    with pytest.raises(TypeError, match="one-shot head"):
        FederatedTauSearch(LogisticRegression()).fit(federated.X, federated.y)


def test_predict_needs_client_labels_and_routing_works_in_a_pipeline(federated):
    X, y, client = federated.X, federated.y, federated.client
    search = FederatedTauSearch(FedCGSClassifier(), random_state=0).fit(X, y, client=client)
    with pytest.raises(ValueError, match="FederatedTauSearch needs client labels to align rows"):
        search.predict(X)
    with sklearn.config_context(enable_metadata_routing=True):
        search = FederatedTauSearch(FedCGSClassifier(), random_state=0)
        pipe = make_pipeline(StandardScaler(), search)
        pipe.fit(X, y, client=client)
        inner = pipe[-1]
        np.testing.assert_array_equal(
            pipe.predict(X, client=client),
            inner.predict(pipe[0].transform(X), client=client),
        )
        assert pipe.score(X, y, client=client) == inner.score(
            pipe[0].transform(X), y, client=client
        )


def test_a_new_client_is_aligned_with_its_own_summary(federated):
    X, y, client = federated.X, federated.y, federated.client
    seen = client != 3
    slot = SLOTTransformer(**PAPER)  # a new client's labels are not needed to map it
    search = FederatedTauSearch(
        FedCGSClassifier(label_mix="federation"), taus=(1.0,), slot=slot, random_state=0
    )
    search.fit(X[seen], y[seen], client=client[seen])
    with pytest.warns(UnknownClientWarning, match=r"client\(s\) 3 were not seen during fit"):
        predicted = search.predict(X[~seen], client=client[~seen])
    own = GaussianSummaryEstimator().fit(X[~seen], client=3).summaries_[3]
    T = GaussianMap.optimal_transport(own, search.slot_.reference_)
    expected = search.best_estimator_.predict(T.apply(X[~seen]))
    np.testing.assert_array_equal(predicted, expected)


@pytest.mark.parametrize("kind", ["full", "diag", "spherical"])
def test_merged_parts_are_the_statistics_of_all_rows(rng, kind):
    """The refit's input: a client's fitting and validation statistics merged."""
    X = rng.normal(size=(100, 4)) @ rng.normal(size=(4, 4)) + 50.0
    y, classes = rng.integers(0, 3, 100), np.arange(3)
    head = FedPFTClassifier(transmit_dtype="float64", covariance_type=kind, reg_covar=0.0)
    merged = head.client_statistics(X[:70], y[:70], classes).merge(
        head.client_statistics(X[70:], y[70:], classes)
    )
    whole = head.client_statistics(X, y, classes)
    for a, b in zip(merged.mixtures, whole.mixtures, strict=True):
        assert a.n == b.n and _relative(a.means, b.means) < 1e-12
        assert _relative(a.covariances, b.covariances) < 1e-10
    cgs = FedCGSClassifier()
    parts = cgs.client_statistics(X[:70], y[:70], classes).merge(
        cgs.client_statistics(X[70:], y[70:], classes)
    )
    expected = cgs.client_statistics(X, y, classes)
    np.testing.assert_allclose(parts.sums, expected.sums, rtol=1e-12)
    np.testing.assert_allclose(
        parts.moments.centred().gram, expected.moments.centred().gram, rtol=1e-10
    )


def test_statistics_aligned_by_factor_form_maps_equal_the_dense_maps():
    """Clients of fewer rows than features: the transformer holds factor-form maps, which
    the server pushes the statistics through as their m x m matrices."""
    rng = np.random.default_rng(0)
    client = np.repeat([0, 1, 2], 10)  # the span of the clients' rows: 27 of 100 dimensions
    X = rng.normal(size=(30, 100)) + 2.0 * client[:, None]
    y = np.tile([0, 1], 15)
    classes = np.unique(y)
    with pytest.warns(SmallClientWarning, match="no more rows than the 100 features"):
        slot = SLOTTransformer(label_mix="federation", barycenter=BuresBarycenter(form="low-rank"))
        factor = slot.fit(X, y, client=client)
    assert all(t.form == "low-rank" for t in factor.maps_.values())
    head = FedCGSClassifier()
    raw = [head.client_statistics(X[client == k], y[client == k], classes) for k in range(3)]
    low = [factor.maps_[k].geodesic(0.6) for k in range(3)]
    got = FedCGSClassifier().fit_from_statistics(raw, classes, maps=low)
    dense = [t.dense() for t in low]
    expected = FedCGSClassifier().fit_from_statistics(raw, classes, maps=dense)
    assert _relative(got.coef_, expected.coef_) < 1e-12


def test_a_frozen_transformer_in_factor_form_chooses_as_its_dense_form():
    """Clients of fewer rows than features: a fitted SLOTTransformer holds its reference and
    maps in factor form; the search's protocol sends their m x m forms, the same maps."""
    data = make_federated_classification(
        n_clients=3, n_samples_per_client=20, n_features=80, n_classes=3, alpha=None,
        domain_shift=1.5, random_state=0,
    )  # fmt: skip
    X, y, client = data.X, data.y, data.client
    found = {}
    for form in ("auto", "dense"):
        with pytest.warns(SmallClientWarning):
            slot = SLOTTransformer(label_mix="federation", barycenter=BuresBarycenter(form=form))
            slot.fit(X, y, client=client)
        search = FederatedTauSearch(
            OneShotFedAvgClassifier(label_mix="federation", max_iter=50),
            slot=FrozenEstimator(slot),
            random_state=0,
        ).fit(X, y, client=client)
        found[form] = (search, slot.reference_.form)
    (low, kind), (dense, _) = found["auto"], found["dense"]
    assert kind == "low-rank"
    np.testing.assert_allclose(
        low.cv_results_["mean_validation_score"], dense.cv_results_["mean_validation_score"]
    )
    assert low.best_tau_ == dense.best_tau_
    np.testing.assert_allclose(
        low.predict_proba(X, client=client), dense.predict_proba(X, client=client), atol=1e-6
    )
