"""The server's checks that tie each client's messages to each other and to the run.

A transport decodes what it receives and checks each message on its own (wire
format, shapes, the configured bounds).  These functions then compare a
client's reply with what it announced earlier and with the run's settings;
each returns why the reply is refused, or ``None``.  They are the same checks
in process and on Flower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..defence import inconsistent_statistics
from ..selection import ValidationCounts
from .exchanges import Evaluation, Upload

__all__ = [
    "counts_problem",
    "evaluation_problem",
    "local_updates_problem",
    "run_dimension",
    "upload_problem",
]


def run_dimension(uploads: Mapping[Any, Upload]) -> int | None:
    """The feature dimension of the run (the transport delivers summaries of one dimension).

    ``None`` when no upload was received.
    """
    dims = {upload.summary.dimension for upload in uploads.values()}
    if len(dims) > 1:
        raise ValueError(f"the transport delivered summaries of dimensions {sorted(dims)}")
    return dims.pop() if dims else None


def upload_problem(
    upload: Upload,
    n_features: int,
    *,
    auto: bool,
    uploads_statistics: bool,
    consistency: bool,
    summary_covariance: str = "total",
) -> str | None:
    """Why an upload does not fit the run: its parts, statistics and summary must agree."""
    summary = upload.summary
    if not auto and upload.n_fit != summary.n:
        return "a fixed-tau run has no validation part"
    if not uploads_statistics:
        if upload.statistics is not None or upload.validation is not None:
            return "the head trains locally: its upload carries no statistics"
        return None
    if upload.statistics is None:
        return "the upload lacks the head's statistics"
    if (upload.validation is None) != (upload.n_validation == 0):
        return f"validation statistics do not match a validation part of {upload.n_validation} rows"
    if consistency:
        rows = upload.statistics
        if upload.validation is not None:
            rows = rows.merge(upload.validation)
        implied = rows.implied_moments(summary_covariance)
        if implied is not None:
            why = inconsistent_statistics(summary, *implied)
            if why:
                return f"inconsistent with its summary: {why}"
    return None


def local_updates_problem(updates: Sequence, n_updates: int, n_samples: int) -> str | None:
    """Why a client's local heads do not match the request and its upload."""
    if len(updates) != n_updates:
        return f"{len(updates)} local heads, but {n_updates} were requested"
    for update in updates:
        if update.n_samples != n_samples:
            return (
                f"local head trained on {update.n_samples} rows but the client's summary "
                f"counted {n_samples}"
            )
    return None


def counts_problem(
    counts: ValidationCounts, n_candidates: int, n_classes: int, n_samples: int
) -> str | None:
    """Why validation counts do not match the candidates and the client's validation part."""
    if counts.correct.shape != (n_candidates, n_classes) or counts.total.shape != (n_classes,):
        return (
            f"validation counts of shape {counts.correct.shape}, expected "
            f"({n_candidates}, {n_classes})"
        )
    if int(counts.total.sum()) != n_samples:
        return (
            f"validation counts cover {int(counts.total.sum())} rows, but the client's "
            f"validation part has {n_samples}"
        )
    if np.any(counts.correct > counts.total) or np.any(counts.correct < 0):
        return "more correct predictions than validation rows of a class"
    return None


def evaluation_problem(evaluation: Evaluation, n_test: int) -> str | None:
    """Why test counts do not match the test size the client announced at upload."""
    if evaluation.n_test != n_test:
        return f"evaluated {evaluation.n_test} test rows, but announced {n_test}"
    if not 0 <= evaluation.n_correct <= n_test:
        return f"evaluation counts are inconsistent ({evaluation.n_correct} of {n_test})"
    return None
