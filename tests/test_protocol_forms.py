"""The protocol carries each summary form: the factor form where a client holds few rows."""

from __future__ import annotations

import numpy as np
import pytest

from skslot import GaussianSummaryEstimator
from skslot.datasets import make_federated_classification
from skslot.heads import make_head
from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol

from ._clients import train_test_by_client
from .conftest import assert_close_in_norm, few_rows_per_client, short_local_training

pytestmark = [short_local_training, few_rows_per_client]

M = 120  # features: more than the small clients' rows
CLASSES = np.arange(3)


def _clients(sizes: list[int]) -> dict[int, tuple]:
    """Clients of ``sizes`` training rows (and 30 test rows each) in ``M`` dimensions."""
    out = {}
    for k, n in enumerate(sizes):
        data = make_federated_classification(
            n_clients=1,
            n_samples_per_client=n + 30,
            n_features=M,
            n_classes=3,
            alpha=None,
            domain_shift=1.5,
            random_state=k,
        )
        out[k] = train_test_by_client(data, n)[0]
    return out


def _run(name: str, clients: dict[int, tuple], form: str | None, **settings):
    """A run with every client summarising in ``form`` (``None``: the protocol's default)."""
    head = make_head(name, seed=0)
    estimator = None if form is None else GaussianSummaryEstimator(form=form)
    parties = {
        k: ClientParty(
            X, y, X_test=Xt, y_test=yt, head=head, classes=CLASSES, label=k,
            summary_estimator=estimator,
        )
        for k, (X, y, Xt, yt) in clients.items()
    }  # fmt: skip
    protocol = OneShotProtocol(head, tau=0.6, client_tau="uniform", random_state=0, **settings)
    return protocol.run(InProcessTransport(parties), CLASSES), parties


@pytest.mark.parametrize("name", ["O-FedAvg", "FedPFT"])
def test_clients_of_few_rows_send_factor_summaries_and_the_run_is_the_dense_one(name):
    """By default each client of fewer rows than features sends its exact factor form: a
    smaller message, the reference built on the span of the factors, the same run."""
    clients = _clients([40, 40, 40])
    low, low_parties = _run(name, clients, None)
    dense, _ = _run(name, clients, "dense")
    assert all(s.form == "low-rank" for s in low.summaries)
    assert all(p.state.summary.form == "low-rank" for p in low_parties.values())
    assert low.reference.form == "low-rank"
    assert dense.reference.form == "dense"
    for k, summary in zip(low.clients, low.summaries, strict=True):
        # m (r + 1) + r values against m (m + 3) / 2: 4,839 against 7,380 at r = 39
        values = M * (summary.rank + 1) + summary.rank
        assert summary.rank == 39 and low.report.summary_payload_bytes[k] < 8 * values + 64
        assert dense.report.summary_payload_bytes[k] > 8 * M * (M + 3) // 2
    # the dense barycenter runs in mixed precision: equal to its tolerance, as a matrix
    assert_close_in_norm(low.reference.to_dense().covariance, dense.reference.covariance, 1e-9)
    np.testing.assert_allclose(low.reference.mean, dense.reference.mean, rtol=0, atol=1e-12)
    assert low.report.accuracy == pytest.approx(dense.report.accuracy, abs=1e-12)


def test_a_federation_of_both_forms_runs_the_dense_way_with_the_same_result():
    """A client of more rows than features sends the dense form beside the others' factors:
    the server builds the dense reference, and every client maps onto it."""
    clients = _clients([40, 200, 40])
    mixed, parties = _run("FedPFT", clients, None)
    dense, _ = _run("FedPFT", clients, "dense")
    kinds = [p.state.summary.form for p in parties.values()]
    assert kinds == ["low-rank", "dense", "low-rank"]
    assert mixed.reference.form == "dense"
    assert_close_in_norm(mixed.reference.covariance, dense.reference.covariance, 1e-9)
    assert mixed.report.accuracy == pytest.approx(dense.report.accuracy, abs=1e-12)


def test_a_screened_run_rebuilds_each_left_out_reference_in_factor_form():
    """The screening's references without one client travel in factor form too."""
    from skslot.defence import DefenceBounds

    clients = _clients([30, 30, 30, 30])  # fitting ranks add up to less than M
    low, _ = _run("FedPFT", clients, None, screen="on", defence=DefenceBounds())
    dense, _ = _run("FedPFT", clients, "dense", screen="on", defence=DefenceBounds())
    assert "screening" in low.stages and low.report.status == "completed"
    assert low.reference.form == "low-rank"
    assert low.clients == dense.clients
    assert low.report.accuracy == pytest.approx(dense.report.accuracy, abs=1e-12)


@pytest.mark.parametrize(("sizes", "form"), [([10, 10, 10], "low-rank"), ([40, 40, 40], "dense")])
def test_the_reference_travels_in_the_smaller_of_its_forms(sizes, form):
    """Ranks 9 + 9 + 9 span 27 of 120 dimensions: the factor form is the smaller message;
    39 + 39 + 39 span 117, whose factor form (14,277 values) would be larger than the dense
    one (7,380): the server sends that, and the clients' runs do not change."""
    clients = _clients(sizes)
    low, parties = _run("FedPFT", clients, None)
    dense, _ = _run("FedPFT", clients, "dense")
    assert low.reference.form == "low-rank"
    for party in parties.values():
        received = party.state.reference
        assert received.form == form
        np.testing.assert_allclose(
            received.to_dense().covariance, dense.reference.covariance, rtol=0, atol=1e-8
        )
    assert low.report.accuracy == pytest.approx(dense.report.accuracy, abs=1e-12)
