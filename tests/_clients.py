"""Shared test fixtures' helpers: a synthetic federation split into each client's rows."""

from __future__ import annotations

import numpy as np


def train_test_by_client(data, n_train: int) -> dict[int, tuple]:
    """``{client: (X_train, y_train, X_test, y_test)}``: each client's first ``n_train`` rows
    train, the rest test (``data`` from :func:`skslot.datasets.make_federated_classification`)."""
    out = {}
    for k in np.unique(data.client):
        rows = np.flatnonzero(data.client == k)
        train, test = rows[:n_train], rows[n_train:]
        out[int(k)] = (data.X[train], data.y[train], data.X[test], data.y[test])
    return out
