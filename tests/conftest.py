"""Shared fixtures: deterministic synthetic generators and the real data folder."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from skslot.datasets import make_federated_classification
from skslot.protocol import held_out_rows

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def assert_close_in_norm(actual: np.ndarray, desired: np.ndarray, rtol: float) -> None:
    """``||actual - desired||_F <= rtol ||desired||_F``: a matrix close as a whole.

    Elementwise tolerances fail on the entries near zero that any change of
    summation order moves; the Frobenius norm measures the matrix.
    """
    scale = np.linalg.norm(desired)
    difference = np.linalg.norm(actual - desired)
    assert difference <= rtol * scale, f"relative difference {difference / scale:.2e} > {rtol:.0e}"


def random_spd(rng: np.random.Generator, m: int, condition: float = 10.0) -> np.ndarray:
    """A random SPD matrix with eigenvalues log-spaced in [1, condition]."""
    Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
    return (Q * np.geomspace(1.0, condition, m)) @ Q.T


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def federated():
    """Four clients, domain shift and moderate label shift."""
    return make_federated_classification(
        n_clients=4,
        n_samples_per_client=300,
        alpha=1.0,
        domain_shift=2.0,
        random_state=0,
    )


@pytest.fixture(scope="module")
def labelled_clients():
    """Three clients of 5 features, label shift Dirichlet(0.3): the label-aware tests' data."""
    return make_federated_classification(
        n_clients=3,
        n_samples_per_client=200,
        n_features=5,
        alpha=0.3,
        domain_shift=2.0,
        random_state=1,
    )


def shared_npz(name: str) -> Path:
    """Path to a real data set in ../shared/data, or skip with the reason."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real data {path} is absent (a fresh clone without ../shared/data)")
    return path


def fitting_rows(y, client, random_state, fraction=0.2):
    """Each client's rows outside its validation split, as the search draws it."""
    rows = held_out_rows(y, client, validation_fraction=fraction, random_state=random_state)
    return {k: fit for k, (fit, _) in rows.items()}


#: The paper's geodesic: mean and covariance moved by the same tau, every client alike (the
#: tests of the map's maths, which need no labels; SLOTTransformer's defaults move the mean
#: fully and scale tau by each client's label shift).
PAPER = {"mean_tau": None, "client_tau": "uniform", "label_mix": "federation"}
#: The same for a protocol or a benchmark, whose label mix is the head's (or both cases).
PAPER_RUN = {"mean_tau": None, "client_tau": "uniform"}


#: O-FedAvg's local heads stop at their L-BFGS budget (``max_iter``, 100 by default, 50 where a
#: test shortens it to save time) and say so with a ConvergenceWarning.  The one-shot protocol
#: is defined for that budget, so the tests of everything else around the head (transports,
#: stages, codecs, pipelines) expect the warning; this filter ignores only that message.  The
#: tests of the warning itself (test_heads.py) assert it with pytest.warns.
short_local_training = pytest.mark.filterwarnings(
    "ignore:local training reached max_iter:sklearn.exceptions.ConvergenceWarning"
)

#: A skewed partition (Dirichlet alpha <= 0.1) or a small data set leaves some clients with
#: no more rows than features, and GaussianSummaryEstimator says so (SmallClientWarning); the
#: tests of that warning (test_transformer.py) assert it.  The "." after the estimator's name
#: stands for the message's colon, which would end a filter's message field.
few_rows_per_client = pytest.mark.filterwarnings(
    r"ignore:GaussianSummaryEstimator. client\(s\) .+ hold no more rows than the \d+ features"
    ":skslot.SmallClientWarning"
)


@contextlib.contextmanager
def ignoring(category: type[Warning], message: str) -> Iterator[None]:
    """Ignore the warnings of ``category`` whose message starts with ``message`` (a regex).

    For a call a test makes fail on purpose, which warns on its way to the error (a
    transform that meets an unseen client, then refuses it): the error is what is checked.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message, category)
        yield
