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
