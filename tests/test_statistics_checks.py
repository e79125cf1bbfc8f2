"""A head's statistics checked against themselves and the head's configuration, before use."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from skslot.datasets import make_federated_classification
from skslot.heads import FedCGSClassifier, FedPFTClassifier, StatisticsFormatError

CLASSES = np.arange(4)


@pytest.fixture(scope="module")
def rows():
    data = make_federated_classification(
        n_clients=1, n_samples_per_client=400, n_features=8, alpha=None, random_state=0
    )
    return data.X, data.y


def fedcgs_message(rows):
    X, y = rows
    return FedCGSClassifier().client_statistics(X, y, CLASSES).to_arrays(), X.shape[0]


def decode_fedcgs(arrays, n):
    return FedCGSClassifier().decode_statistics(arrays, classes=CLASSES, n_features=8, n_samples=n)


def test_an_honest_fedcgs_message_passes(rows):
    arrays, n = fedcgs_message(rows)
    decoded = decode_fedcgs(arrays, n)
    np.testing.assert_array_equal(decoded.sums, arrays["sums"])


def test_a_class_without_rows_carries_no_sum(rows):
    X, y = rows
    keep = y != 2
    arrays = FedCGSClassifier().client_statistics(X[keep], y[keep], CLASSES).to_arrays()
    assert arrays["counts"][2] == 0
    decode_fedcgs(arrays, int(keep.sum()))
    arrays = dict(arrays, sums=arrays["sums"].copy())
    arrays["sums"][2] += 1.0
    arrays["sums"][0] -= 1.0  # the total is unchanged
    with pytest.raises(StatisticsFormatError, match="a class with no rows has a non-zero"):
        decode_fedcgs(arrays, int(keep.sum()))


def test_class_sums_moved_between_classes_must_fit_inside_the_gram(rows):
    """The between-class scatter of the sums is bounded by the Gram's total scatter."""
    arrays, n = fedcgs_message(rows)
    X = rows[0]
    counts = arrays["counts"]
    spread = X.std(axis=0).max()
    for move in (0.02, 5.0):  # class 1's mean moved by `move` standard deviations
        edited = dict(arrays, sums=arrays["sums"].copy())
        d = np.full(8, move * spread) * counts[1]
        edited["sums"][1] += d
        for c in (0, 2, 3):  # totals, Gram and counts unchanged
            edited["sums"][c] -= d / 3
        np.testing.assert_allclose(edited["sums"].sum(axis=0), arrays["sums"].sum(axis=0))
        if move < 1:
            decode_fedcgs(edited, n)  # within what the rows' scatter allows
        else:
            with pytest.raises(StatisticsFormatError, match="within-class scatter"):
                decode_fedcgs(edited, n)


@pytest.mark.parametrize(
    ("head", "n_components"),
    [
        (FedPFTClassifier(covariance_type="lowrank", rank=2), 3),
        (FedPFTClassifier(covariance_type="full"), 2),
        (FedPFTClassifier(covariance_type="diag", n_components=2), 1),
    ],
)
def test_mixtures_must_have_the_configured_number_of_components(rows, head, n_components):
    X, y = rows
    arrays = head.client_statistics(X, y, CLASSES).to_arrays()
    head.decode_statistics(arrays, classes=CLASSES, n_features=8, n_samples=X.shape[0])
    liar = FedPFTClassifier(
        covariance_type=head.covariance_type, n_components=n_components, rank=head.rank
    ).set_params(covariance_type="full" if head.covariance_type == "lowrank" else "diag")
    if head.covariance_type == "lowrank":  # several low-rank components: never built
        arrays = _lowrank_mixtures(X, y, n_components, head.rank)
    else:
        arrays = liar.client_statistics(X, y, CLASSES).to_arrays()
    with pytest.raises(StatisticsFormatError, match="components, but the head fits"):
        head.decode_statistics(arrays, classes=CLASSES, n_features=8, n_samples=X.shape[0])


def _lowrank_mixtures(X, y, n_components, rank, m=None):
    """A well-formed low-rank message with ``n_components`` per class (a client never sends it)."""
    m = X.shape[1] if m is None else m
    C = CLASSES.shape[0]
    n = np.bincount(y, minlength=C)
    K = C * n_components
    rng = np.random.default_rng(0)
    covariances = np.concatenate([rng.normal(size=(K, m, rank)), np.ones((K, m, 1))], axis=2)
    return {
        "index": np.arange(C),
        "n": n,
        "n_components": np.full(C, n_components),
        "skipped_index": np.zeros(0, dtype=np.int64),
        "skipped_count": np.zeros(0, dtype=np.int64),
        "weights": np.full(K, 1.0 / n_components),
        "means": rng.normal(size=(K, m)),
        "covariances": covariances,
    }


def test_the_fedpft_memory_case_is_rejected_before_allocation():
    """Many low-rank components at m = 256: what the server builds is bounded by the config.

    Merged and aligned, each component becomes a full m x m float64 matrix;
    the decoder refuses the message first, allocating little beyond it.
    """
    m, rank, n_components = 256, 8, 40
    y = np.repeat(CLASSES, 200)
    X = np.zeros((y.shape[0], m))
    arrays = _lowrank_mixtures(X, y, n_components, rank, m)
    message_bytes = sum(a.nbytes for a in arrays.values())
    built_if_accepted = CLASSES.shape[0] * n_components * m * m * 8
    assert built_if_accepted > 10 * message_bytes
    head = FedPFTClassifier(covariance_type="lowrank", rank=rank)
    tracemalloc.start()
    try:
        with pytest.raises(StatisticsFormatError, match="components, but the head fits"):
            head.decode_statistics(arrays, classes=CLASSES, n_features=m, n_samples=y.shape[0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < message_bytes  # nothing of the size of the message, let alone m x m per part


@pytest.mark.parametrize("shift", [0.0, 1e4])
def test_honest_parts_with_one_row_per_class_or_far_apart_classes_pass(shift):
    """A validation part of one row per class has no within-class scatter at all."""
    rng = np.random.default_rng(3)
    for n_per_class in (1, 2):
        y = np.repeat(CLASSES, n_per_class)
        X = rng.normal(size=(y.shape[0], 8)) + shift * y[:, None] * rng.normal(size=8)
        arrays = FedCGSClassifier().client_statistics(X, y, CLASSES).to_arrays()
        decode_fedcgs(arrays, y.shape[0])


def fedpft_upload_problem(head, X, y):
    from skslot import GaussianSummaryEstimator
    from skslot.defence import DefenceBounds
    from skslot.protocol import Upload, UploadRequest
    from skslot.protocol.stages import upload as upload_stage

    arrays = head.client_statistics(X, y, CLASSES).to_arrays()
    stats = head.decode_statistics(arrays, classes=CLASSES, n_features=X.shape[1], n_samples=len(y))
    summary = GaussianSummaryEstimator().fit(X).summaries_[None]
    upload = Upload(summary, summary.n, 0, statistics=stats)
    return upload_stage.check(
        upload, UploadRequest(0), head=head, defence=DefenceBounds(), n_classes=CLASSES.shape[0]
    )


@pytest.mark.parametrize(
    ("scale", "offset", "transmit"),
    [
        (1e-3, 0.0, "float32"),
        (1e-4, 0.0, "float32"),
        (0.1, 0.0, "float16"),
        (0.1, 300.0, "float16"),
    ],
)
@pytest.mark.parametrize("covariance_type", ["lowrank", "full", "diag", "spherical"])
def test_honest_mixtures_agree_with_the_summary_at_any_scale(
    rows, scale, offset, transmit, covariance_type
):
    """reg_covar on tiny features and float16 means far from the origin are accounted for."""
    X, y = rows
    X = (X - X.mean(axis=0)) / X.std() * scale + offset
    head = FedPFTClassifier(covariance_type=covariance_type, transmit_dtype=transmit)
    assert fedpft_upload_problem(head, X, y) is None


def test_skipped_classes_cannot_loosen_the_check(rows):
    """A class declared skipped must have fewer rows than min_samples_per_class."""
    X, y = rows
    head = FedPFTClassifier(covariance_type="diag")
    arrays = dict(head.client_statistics(X, y, CLASSES).to_arrays())
    # classes 1..3 declared skipped with their true counts; only class 0 is sent
    counts = np.bincount(y, minlength=4)
    arrays.update(
        index=arrays["index"][:1],
        n=arrays["n"][:1],
        n_components=arrays["n_components"][:1],
        weights=arrays["weights"][:1],
        means=arrays["means"][:1],
        covariances=arrays["covariances"][:1],
        skipped_index=np.arange(1, 4),
        skipped_count=counts[1:],
    )
    with pytest.raises(StatisticsFormatError, match="skipped with fewer"):
        head.decode_statistics(arrays, classes=CLASSES, n_features=8, n_samples=X.shape[0])


# -- FedCGS: the summary derived from the statistics --------------------------------------


@pytest.mark.parametrize("covariance", ["total", "within"])
def test_the_fedcgs_summary_is_derived_exactly_from_the_statistics(rows, covariance):
    """Class sums, Gram matrix and the client's shrinkage give its Ledoit-Wolf summary."""
    from skslot import GaussianSummaryEstimator

    X, y = rows
    direct = GaussianSummaryEstimator(covariance=covariance).fit(X, y).summaries_[None]
    halves = [slice(0, 150), slice(150, None)]  # two parts, merged: the statistics of all rows
    fitting, validation = (
        FedCGSClassifier().client_statistics(X[h], y[h], CLASSES) for h in halves
    )
    derived = fitting.merge(validation).summary(
        direct.shrinkage,
        covariance=covariance,
        covariance_floor=1e-8,
        client="a",
    )
    assert derived.n == direct.n and derived.shrinkage == direct.shrinkage
    assert derived.client == "a"
    np.testing.assert_allclose(derived.mean, direct.mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(derived.covariance, direct.covariance, rtol=1e-10, atol=1e-14)
    # a decoded message gives the very same summary (the Gram travels as its upper triangle)
    again = (
        decode_fedcgs(fitting.to_arrays(), 150)
        .merge(validation)
        .summary(direct.shrinkage, covariance=covariance, client="a")
    )
    np.testing.assert_array_equal(again.covariance, derived.covariance)


@pytest.mark.parametrize("covariance", ["total", "within"])
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_the_shrinkage_a_fedcgs_client_announces_is_ledoit_wolfs(rows, covariance, offset):
    """From its statistics and one O(n m) pass: scikit-learn's estimate on the centred rows."""
    from sklearn.covariance import ledoit_wolf_shrinkage

    X, y = rows
    X = X + offset  # a large common mean must not cost precision
    means = np.array([X[y == c].mean(axis=0) for c in CLASSES])
    centred = X - (means[np.searchsorted(CLASSES, y)] if covariance == "within" else X.mean(0))
    expected = ledoit_wolf_shrinkage(centred, assume_centered=True)
    halves = [slice(0, 150), slice(150, None)]
    fitting, validation = (
        FedCGSClassifier().client_statistics(X[h], y[h], CLASSES) for h in halves
    )
    found = fitting.merge(validation).ledoit_wolf_shrinkage(X, y, covariance=covariance)
    np.testing.assert_allclose(found, expected, rtol=1e-8)
    assert 0.0 < found < 1.0
    # the rows in another order are the same rows; other rows are refused
    order = np.random.default_rng(0).permutation(X.shape[0])
    stats = fitting.merge(validation)
    again = stats.ledoit_wolf_shrinkage(X[order], y[order], covariance=covariance, chunk_size=7)
    np.testing.assert_allclose(again, found, rtol=1e-12)
    with pytest.raises(ValueError, match="not those the statistics describe"):
        stats.ledoit_wolf_shrinkage(X[:-1], y[:-1], covariance=covariance)


@pytest.mark.parametrize("shrinkage", [-0.1, 1.5, float("nan"), None, True])
def test_a_shrinkage_outside_0_1_makes_no_summary(rows, shrinkage):
    X, y = rows
    stats = FedCGSClassifier().client_statistics(X, y, CLASSES)
    with pytest.raises(StatisticsFormatError, match="shrinkage must be in"):
        stats.summary(shrinkage)


def test_an_announced_shrinkage_moves_the_summary_only_towards_the_scaled_identity(rows):
    """The one value a FedCGS client announces about its summary: its damage is bounded."""
    X, y = rows
    stats = FedCGSClassifier().client_statistics(X, y, CLASSES)
    S = np.cov(X.T, bias=True)
    unfloored = stats.summary(0.0, covariance_floor=0.0).covariance  # the sample covariance
    np.testing.assert_allclose(unfloored, S, rtol=1e-10, atol=1e-14)
    spherical = stats.summary(1.0).covariance
    np.testing.assert_allclose(spherical, np.trace(S) / 8 * np.eye(8), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_fedpft_mixtures_imply_in_process_what_the_server_decodes(dtype):
    """The client's own message and the server's decoding of it carry the same transmit
    rounding and reg_covar, so a check on their implied moments is one check, whatever the
    transport."""
    from skslot.heads import FedPFTClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)) + 1e3
    y = np.arange(60) % 3
    classes = np.arange(3)
    head = FedPFTClassifier(transmit_dtype=dtype)
    sent = head.client_statistics(X, y, classes)
    received = head.decode_statistics(sent.to_arrays(), classes=classes, n_features=4, n_samples=60)
    for kind in ("total", "within"):
        own, theirs = sent.implied_moments(kind), received.implied_moments(kind)
        np.testing.assert_array_equal(own.mean, theirs.mean)
        assert own.trace == theirs.trace and own.error == theirs.error > 0
