"""The upload's wire format: a request's settings, a reply's header, summary and statistics.

Every value is read and checked for its type, shape and size before anything
is allocated for it; what the values mean is the stage's
:func:`~skslot.protocol.stages.upload.check`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....gaussian import GaussianSummary
from ....privacy import RELEASES
from ....summary import COVARIANCES
from ....wire import (
    MessageFormatError,
    StatisticsFormatError,
    SummaryFormatError,
    WireFormatError,
)
from ....wire.arrays import read_array
from ....wire.payload import Payload, ReceivedPayload
from ....wire.summary_codec import (
    MAX_COUNT,
    SUMMARY_DTYPES,
    check_wire_label,
    summary_dimension,
)
from .._stage import ClientWire, ServerWire, Stage
from ._messages import CLASS_SUMS, STATISTICS, VALIDATION_STATISTICS, Upload, UploadRequest

__all__ = ["UploadCodec", "as_decoded"]


@dataclass(frozen=True)
class _Header:
    """An upload's settings, read and checked before its statistics are decoded."""

    summary: bytes | None
    n_fit: int
    n_test: int
    n_validation: int
    class_counts: np.ndarray | None
    shrinkage: float | None
    label: int | str | None
    dimension: int


def _read_header(payload: ReceivedPayload, n_classes: int, max_dimension: int) -> _Header:
    summary = payload.optional("summary", bytes)
    shrinkage = payload.optional("shrinkage", float)
    label = check_wire_label(payload.config.get("label"))
    sent_dimension = payload.optional("dimension", int)
    if (summary is None) == (sent_dimension is None):  # what the statistics are decoded with
        raise MessageFormatError(
            "an upload carries either a summary or the dimension of the summary derived from "
            "its statistics"
        )
    n_fit, n_test = payload.value("n-fit", int), payload.value("n-test", int)
    n_validation = payload.value("n-validation", int)
    if min(n_fit, n_test, n_validation) < 0:
        raise MessageFormatError(
            f"row counts must be >= 0, got n-fit {n_fit}, n-validation {n_validation}, "
            f"n-test {n_test}"
        )
    if max(n_test, n_validation) > MAX_COUNT:
        raise MessageFormatError(
            f"n-test and n-validation must be at most 2**53 rows, got {n_test}, {n_validation}"
        )
    counts = None
    if payload.has("class-counts"):
        values = payload.config["class-counts"]
        if (
            not isinstance(values, list)
            or len(values) != n_classes
            or not all(type(v) is int and 0 <= v <= MAX_COUNT for v in values)
        ):
            raise MessageFormatError(
                f"class-counts must be a list of {n_classes} integers in [0, 2**53]"
            )
        counts = np.array(values, dtype=np.int64)
    if summary is not None:  # its header's: no summary is decoded before the run's dimension
        dimension = summary_dimension(summary, max_dimension=max_dimension)
    elif sent_dimension is not None and 1 <= sent_dimension <= max_dimension:
        dimension = sent_dimension  # of the summary derived from the statistics
    else:
        raise StatisticsFormatError(f"dimension {sent_dimension} is out of range")
    return _Header(summary, n_fit, n_test, n_validation, counts, shrinkage, label, dimension)


def as_decoded(summary: GaussianSummary, dtype: str | None) -> GaussianSummary:
    """The summary as the server decodes it from the wire.

    Parameters
    ----------
    summary : GaussianSummary
    dtype : {"float16", "float32", "float64"} or None
        The precision the summary travels in; ``None``: as is.

    Returns
    -------
    GaussianSummary
        In the form it travels in, the smaller of the two (:meth:`~GaussianSummary.smaller_form`).
    """
    if dtype is None:
        return summary.smaller_form("float64")
    return GaussianSummary.from_bytes(summary.smaller_form(dtype).to_bytes(dtype))


class UploadCodec(Stage[UploadRequest, Upload]):
    """Stage "upload"'s wire format, completed by its stage (:class:`UploadStage`).

    The uploads are decoded together: the summaries first, the run's
    dimension (the configured one, or the one most clients sent; ties: the
    smallest), then each upload's statistics at that dimension; a client of
    another dimension is rejected.  Sets ``wire.dimension``.
    """

    def encode_request(self, request: UploadRequest, wire: ServerWire) -> Payload:
        values: dict[str, Any] = {
            "summary-dtype": wire.summary_dtype,
            "client-index": request.client_index,
            "summary-covariance": request.summary_covariance,
            "covariance-floor": float(request.covariance_floor),
        }
        if request.split_seed is not None:
            values["split-seed"] = request.split_seed
        if request.class_counts:
            values["class-counts"] = 1  # a flag (payload values are never booleans)
        if request.class_sums:
            values["class-sums"] = 1
        if request.mean_tau is not None:
            values["mean-tau"] = float(request.mean_tau)
        if not request.validation_statistics:
            values["validation-statistics"] = 0  # a flag (payload values are never booleans)
        if request.privacy is not None:
            values["epsilon"], values["delta"], values["clip-norm"] = map(float, request.privacy)
            values["releases"] = ",".join(request.releases)
            values["shares"] = [float(w) for w in request.shares]
        return Payload(values)

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> UploadRequest:
        index = payload.value("client-index", int)
        if index < 0:
            raise MessageFormatError(f"client-index must be >= 0, got {index}")
        counts = payload.optional("class-counts", int) or 0
        sums = payload.optional("class-sums", int) or 0
        if counts not in (0, 1) or sums not in (0, 1):
            raise MessageFormatError(
                f"class-counts and class-sums must be 0 or 1, got {counts} and {sums}"
            )
        parts = payload.optional("validation-statistics", int)
        if parts not in (None, 0, 1):
            raise MessageFormatError(f"validation-statistics must be 0 or 1, got {parts}")
        mean_tau = payload.optional("mean-tau", (float, int))
        if mean_tau is not None and not 0.0 <= mean_tau <= 1.0:
            raise MessageFormatError(f"mean-tau must lie in [0, 1], got {mean_tau}")
        floor = payload.value("covariance-floor", (float, int))
        if not floor >= 0.0:
            raise MessageFormatError(f"covariance-floor must be >= 0, got {floor}")
        covariance = payload.value("summary-covariance", str)
        if covariance not in COVARIANCES:
            raise MessageFormatError(
                f"summary-covariance must be one of {COVARIANCES}, got {covariance!r}"
            )
        dtype = payload.value("summary-dtype", str)
        if dtype not in SUMMARY_DTYPES:
            raise MessageFormatError(
                f"summary-dtype must be one of {SUMMARY_DTYPES}, got {dtype!r}"
            )
        epsilon = payload.optional("epsilon", (float, int))
        privacy: tuple[float, float, float] | None = None
        releases: tuple[str, ...] = ()
        shares: tuple[float, ...] = ()
        if epsilon is not None:
            privacy = (
                float(epsilon),
                float(payload.value("delta", (float, int))),
                float(payload.value("clip-norm", (float, int))),
            )
            releases = tuple(payload.value("releases", str).split(","))
            unknown = sorted(set(releases) - set(RELEASES))
            if unknown:
                raise MessageFormatError(f"releases names unknown releases {unknown}")
            shares = tuple(payload.floats("shares"))
            if len(shares) != len(releases) or not all(0.0 < w <= 1.0 for w in shares):
                raise MessageFormatError(f"{len(shares)} shares for {len(releases)} releases")
        return UploadRequest(
            index,
            payload.optional("split-seed", int),
            class_counts=counts == 1,
            class_sums=sums == 1,
            summary_covariance=covariance,
            covariance_floor=float(floor),
            mean_tau=None if mean_tau is None else float(mean_tau),
            summary_dtype=dtype,
            validation_statistics=parts != 0,
            privacy=privacy,
            releases=releases,
            shares=shares if epsilon is not None else (),
        )

    def encode_reply(self, reply: Upload, request: UploadRequest) -> Payload:
        values: dict[str, Any] = {
            "n-fit": reply.n_fit,
            "n-test": reply.n_test,
            "n-validation": reply.n_validation,
        }
        if reply.summary is not None:
            dtype = request.summary_dtype or "float64"
            values["summary"] = reply.summary.smaller_form(dtype).to_bytes(dtype)
        else:  # derived from the statistics: the server needs their dimension to decode them
            values["dimension"] = int(reply.statistics.n_features)
        if reply.shrinkage is not None:
            values["shrinkage"] = float(reply.shrinkage)
        if reply.label is not None:
            values["label"] = reply.label
        if reply.class_counts is not None:
            values["class-counts"] = [int(c) for c in reply.class_counts]
        payload = Payload(values)
        if reply.statistics is not None:
            payload.arrays[STATISTICS] = reply.statistics.to_arrays()
        if reply.validation is not None:
            payload.arrays[VALIDATION_STATISTICS] = reply.validation.to_arrays()
        if reply.class_sums is not None:
            counts, sums = reply.class_sums
            payload.arrays[CLASS_SUMS] = {"counts": counts, "sums": sums}
        return payload

    def decode_reply(
        self, payload: ReceivedPayload, request: UploadRequest, wire: ServerWire
    ) -> Upload:
        replies, rejected = self.decode_replies({0: payload}, {0: request}, wire)
        if rejected:
            raise MessageFormatError(rejected[0])
        return replies[0]

    def decode_replies(
        self,
        payloads: Mapping[Hashable, ReceivedPayload],
        requests: Mapping[Hashable, UploadRequest],
        wire: ServerWire,
    ) -> tuple[dict[Hashable, Upload], dict[Hashable, str]]:
        C = wire.classes.shape[0]
        rejected: dict[Hashable, str] = {}
        headers = {}
        for node, payload in payloads.items():
            try:
                headers[node] = _read_header(payload, C, wire.max_dimension)
            except WireFormatError as exc:
                rejected[node] = str(exc)
        dims = Counter(header.dimension for header in headers.values())
        m = wire.n_features or (max(dims, key=lambda d: (dims[d], -d)) if dims else 0)
        wire.dimension = m
        head = wire.head
        cap = head.strategy.max_upload_bytes(head, C, m)
        replies = {}
        for node, header in headers.items():
            dimension = header.dimension
            try:
                if dimension != m and header.summary is not None and wire.n_features:
                    raise SummaryFormatError(
                        f"dimension mismatch: payload has dimension {dimension}, expected {m}"
                    )
                if dimension != m:
                    raise StatisticsFormatError(f"dimension {dimension}, expected {m}")
                summary = (
                    None
                    if header.summary is None
                    else GaussianSummary.from_bytes(  # a factor form's rank: below its rows
                        header.summary,
                        expected_dimension=m,
                        max_dimension=wire.max_dimension,
                        max_rank=max(min(m, header.n_fit - 1), 0),
                    )
                )
                if header.n_fit < 1:  # the summary's count is tied to it by the check
                    raise StatisticsFormatError(f"fitting part of {header.n_fit} rows")
                parts: list[Any] = []
                for name, n in (
                    (STATISTICS, header.n_fit),
                    (VALIDATION_STATISTICS, header.n_validation),
                ):
                    if not payloads[node].has_arrays(name):
                        parts.append(None)
                        continue
                    arrays = payloads[node].arrays(name, max_bytes=cap)
                    parts.append(
                        head.decode_statistics(
                            arrays, classes=wire.classes, n_features=m, n_samples=n
                        )
                    )
                class_sums = None
                if payloads[node].has_arrays(CLASS_SUMS):
                    arrays = payloads[node].arrays(CLASS_SUMS, max_bytes=8 * C * (m + 1) + 4096)
                    class_sums = (
                        read_array(arrays, "counts", (C,), integer=True, nonnegative=True),
                        read_array(arrays, "sums", (C, m)),
                    )
            except WireFormatError as exc:
                rejected[node] = str(exc)
                continue
            statistics, validation = parts
            replies[node] = Upload(
                summary,
                header.n_fit,
                header.n_test,
                statistics,
                validation,
                summary_bytes=len(header.summary) if header.summary is not None else 8,  # shrinkage
                class_counts=header.class_counts,
                shrinkage=header.shrinkage,
                label=header.label,
                n_validation=header.n_validation,
                class_sums=class_sums,
            )
        return replies, rejected
