"""The upload's wire format: a request's settings, a reply's header, summary and statistics.

Every value is read and checked for its type, shape and size before anything
is allocated for it; what the values mean is the stage's
:func:`~skslot.protocol.stages.upload.check`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import replace
from numbers import Integral, Real
from typing import Any

import numpy as np

from ...._param_validation import Interval, Options
from ....gaussian import GaussianSummary
from ....privacy.server import plan_from_wire, plan_to_wire
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

#: The request's flags and their defaults: on the wire as 0 or 1 (payload values are never
#: booleans), where not the default.
_FLAGS = {"class-counts": False, "class-sums": False, "validation-statistics": True}


#: What the request's settings may be, named in the error of one that is not.
_BIT = Options((0, 1))
_INDEX = Interval(Integral, 0, None, closed="left")
_FRACTION = Interval(Real, 0, 1, closed="both")
_FLOOR = Interval(Real, 0, None, closed="left")
_COVARIANCES = Options(COVARIANCES)
_DTYPES = Options(SUMMARY_DTYPES)


def _setting(
    payload: ReceivedPayload,
    key: str,
    kind: Any,
    allowed: Interval | Options,
    *,
    optional: bool = False,
) -> Any:
    """The request's setting ``key``, of type ``kind`` and among the ``allowed`` values
    (``None`` where it is optional and absent)."""
    value = payload.optional(key, kind) if optional else payload.value(key, kind)
    if value is not None and not allowed.is_satisfied_by(value):
        raise MessageFormatError(f"{key} must be {allowed}, got {value!r}")
    return value


def _read_header(
    payload: ReceivedPayload, n_classes: int, max_dimension: int
) -> tuple[Upload, bytes | None, int]:
    """An upload's settings, read and checked before its statistics are decoded: the upload
    without its summary, statistics and class sums, the summary's bytes and the dimension,
    read from the summary's header (no summary is decoded before the run's dimension) or
    sent where the server derives the summary."""
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
        counts = payload.config["class-counts"]
        if (
            not isinstance(counts, list)
            or len(counts) != n_classes
            or not all(type(v) is int and 0 <= v <= MAX_COUNT for v in counts)
        ):
            raise MessageFormatError(
                f"class-counts must be a list of {n_classes} integers in [0, 2**53]"
            )
    if summary is not None:
        dimension = summary_dimension(summary, max_dimension=max_dimension)
    elif sent_dimension is not None and 1 <= sent_dimension <= max_dimension:
        dimension = sent_dimension
    else:
        raise StatisticsFormatError(f"dimension {sent_dimension} is out of range")
    upload = Upload(
        None,
        n_fit,
        n_test,
        summary_bytes=len(summary) if summary is not None else 8,  # the shrinkage
        class_counts=None if counts is None else np.array(counts, dtype=np.int64),
        shrinkage=shrinkage,
        label=label,
        n_validation=n_validation,
    )
    return upload, summary, dimension


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
    return GaussianSummary.from_bytes(summary.smaller_bytes(dtype))


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
        if request.mean_tau is not None:
            values["mean-tau"] = float(request.mean_tau)
        for key, default in _FLAGS.items():  # sent where not the default, as 0 or 1
            if getattr(request, key.replace("-", "_")) != default:
                values[key] = int(not default)
        values.update(plan_to_wire(request.privacy, request.releases, request.shares))
        return Payload(values)

    def decode_request(self, payload: ReceivedPayload, wire: ClientWire) -> UploadRequest:
        flags: dict[str, Any] = {}
        for key, default in _FLAGS.items():
            bit = _setting(payload, key, int, _BIT, optional=True)
            flags[key.replace("-", "_")] = default if bit is None else bit == 1
        mean_tau = _setting(payload, "mean-tau", (float, int), _FRACTION, optional=True)
        return UploadRequest(
            _setting(payload, "client-index", int, _INDEX),
            payload.optional("split-seed", int),
            summary_covariance=_setting(payload, "summary-covariance", str, _COVARIANCES),
            covariance_floor=float(_setting(payload, "covariance-floor", (float, int), _FLOOR)),
            mean_tau=None if mean_tau is None else float(mean_tau),
            summary_dtype=_setting(payload, "summary-dtype", str, _DTYPES),
            **flags,
            **plan_from_wire(payload),
        )

    def encode_reply(self, reply: Upload, request: UploadRequest) -> Payload:
        values: dict[str, Any] = {
            "n-fit": reply.n_fit,
            "n-test": reply.n_test,
            "n-validation": reply.n_validation,
        }
        if reply.summary is not None:
            dtype = request.summary_dtype or "float64"
            values["summary"] = reply.summary.smaller_bytes(dtype)
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
        dims = Counter(dimension for _, _, dimension in headers.values())
        m = wire.n_features or (max(dims, key=lambda d: (dims[d], -d)) if dims else 0)
        wire.dimension = m
        head = wire.head
        cap = head.strategy.max_upload_bytes(head, C, m)
        replies = {}
        for node, (upload, summary, dimension) in headers.items():
            payload = payloads[node]
            try:
                if dimension != m and summary is not None and wire.n_features:
                    raise SummaryFormatError(
                        f"dimension mismatch: payload has dimension {dimension}, expected {m}"
                    )
                if dimension != m:
                    raise StatisticsFormatError(f"dimension {dimension}, expected {m}")
                if summary is not None:
                    decoded = GaussianSummary.from_bytes(  # a factor form's rank: below its rows
                        summary,
                        expected_dimension=m,
                        max_dimension=wire.max_dimension,
                        max_rank=max(min(m, upload.n_fit - 1), 0),
                    )
                    upload = replace(upload, summary=decoded)
                if upload.n_fit < 1:  # the summary's count is tied to it by the check
                    raise StatisticsFormatError(f"fitting part of {upload.n_fit} rows")
                parts: dict[str, Any] = {}
                for name, n in (
                    (STATISTICS, upload.n_fit),
                    (VALIDATION_STATISTICS, upload.n_validation),
                ):
                    if payload.has_arrays(name):
                        parts[name] = head.decode_statistics(
                            payload.arrays(name, max_bytes=cap),
                            classes=wire.classes,
                            n_features=m,
                            n_samples=n,
                        )
                class_sums = None
                if payload.has_arrays(CLASS_SUMS):
                    arrays = payload.arrays(CLASS_SUMS, max_bytes=8 * C * (m + 1) + 4096)
                    class_sums = (
                        read_array(arrays, "counts", (C,), integer=True, nonnegative=True),
                        read_array(arrays, "sums", (C, m)),
                    )
            except WireFormatError as exc:
                rejected[node] = str(exc)
                continue
            replies[node] = replace(
                upload,
                statistics=parts.get(STATISTICS),
                validation=parts.get(VALIDATION_STATISTICS),
                class_sums=class_sums,
            )
        return replies, rejected
