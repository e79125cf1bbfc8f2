"""The stages' codecs and checks on hostile input, transport-independent."""

from __future__ import annotations

import tracemalloc

import numpy as np

from skslot import GaussianSummary
from skslot.heads import OneShotFedAvgClassifier
from skslot.protocol import ServerWire, Upload, UploadRequest
from skslot.protocol.stages import upload as upload_stage

M = 256


def _upload_payload(m: int, n: int = 500, client: int = 0):
    rng = np.random.default_rng(m + client)
    covariance = np.diag(rng.uniform(0.5, 2.0, size=m))
    covariance[0, 1] = covariance[1, 0] = 0.1  # not merely diagonal on the wire
    summary = GaussianSummary(n, rng.normal(size=m), covariance, client=client)
    request = UploadRequest(client, summary_dtype="float32")
    reply = upload_stage.STAGE.encode_reply(Upload(summary, n, 10), request)
    return reply.received(), request


def _decode_peak(payloads, requests) -> tuple[int, dict, dict]:
    wire = ServerWire(OneShotFedAvgClassifier(), np.arange(3), summary_dtype="float32")
    tracemalloc.start()
    try:
        replies, rejected = upload_stage.STAGE.decode_replies(payloads, requests, wire)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, replies, rejected


def test_a_summary_of_another_dimension_is_refused_before_it_is_decoded():
    """A 4096-d summary among 256-d ones: its header is read, its values never decoded."""
    honest = {k: _upload_payload(M, client=k) for k in range(3)}
    payloads = {k: p for k, (p, _) in honest.items()}
    requests = {k: r for k, (_, r) in honest.items()}
    peak_honest, replies, rejected = _decode_peak(payloads, requests)
    assert sorted(replies) == [0, 1, 2] and not rejected
    big, big_request = _upload_payload(4096, client=3)
    peak, replies, rejected = _decode_peak({**payloads, 3: big}, {**requests, 3: big_request})
    assert sorted(replies) == [0, 1, 2]
    assert rejected == {3: f"dimension 4096, expected {M}"}
    assert peak < 2 * peak_honest, (peak, peak_honest)
    # decoding the large summary alone would cost far more than the honest run
    tracemalloc.start()
    GaussianSummary.from_bytes(big.config["summary"])
    decoded = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert decoded > 4 * peak_honest


def _factor_payload(basis: np.ndarray, client: int, n: int = 50):
    """An upload whose summary is in factor form, ``basis`` sent as it is (checked or not)."""
    from types import SimpleNamespace

    from skslot.wire import encode_summary

    m, r = basis.shape
    summary = SimpleNamespace(
        n=n, mean=np.zeros(m), basis=basis, eigenvalues=np.linspace(2.0, 3.0, r),
        complement=1.0, shrinkage=0.1, client=client,
    )  # fmt: skip
    request = UploadRequest(client, summary_dtype="float32")
    honest = upload_stage.STAGE.encode_reply(Upload(_dense(m, n, client), n, 10), request)
    honest.config["summary"] = encode_summary(summary, "float32")
    return honest.received(), request


def _dense(m: int, n: int, client: int) -> GaussianSummary:
    return GaussianSummary(n, np.zeros(m), np.eye(m), client=client)


def test_factor_summaries_are_read_beside_dense_ones_and_a_broken_basis_is_rejected():
    """Each form by its header; a basis that is not orthonormal is one client's rejection."""
    rng = np.random.default_rng(0)
    dense = {k: _upload_payload(M, client=k) for k in range(2)}
    U = np.linalg.qr(rng.normal(size=(M, 8)))[0]
    broken = U.copy()
    broken[:, 1] += 1e-3 * U[:, 0]  # no rounding makes this
    factor = {2: _factor_payload(U, 2), 3: _factor_payload(broken, 3)}
    big = {4: _factor_payload(np.linalg.qr(rng.normal(size=(4096, 8)))[0], 4)}
    above_its_rows = {5: _factor_payload(U, 5, n=5)}  # rank 8 from 5 rows
    sent = {**dense, **factor, **big, **above_its_rows}
    _, replies, rejected = _decode_peak(
        {k: p for k, (p, _) in sent.items()}, {k: r for k, (_, r) in sent.items()}
    )
    assert sorted(replies) == [0, 1, 2]
    assert replies[2].summary.form == "low-rank"
    assert replies[0].summary.form == "dense"
    np.testing.assert_allclose(replies[2].summary.basis.T @ replies[2].summary.basis, np.eye(8),
                               atol=1e-12)  # fmt: skip
    assert "basis is not orthonormal" in rejected[3]
    assert rejected[4] == f"dimension 4096, expected {M}"
    assert rejected[5] == f"rank 8 above the accepted 4 (dimension {M})"
