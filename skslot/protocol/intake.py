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
from ..screening import PairedCounts
from ..selection import ValidationCounts, validation_sizes
from ..wire.arrays import sample_count_problem
from .exchanges import Evaluation, Upload

__all__ = [
    "class_counts_problem",
    "counts_problem",
    "evaluation_problem",
    "local_updates_problem",
    "paired_counts_problem",
    "run_dimension",
    "summary_form_problem",
    "upload_problem",
]


def run_dimension(uploads: Mapping[Any, Upload]) -> int | None:
    """The feature dimension of the run (the transport delivers summaries of one dimension).

    ``None`` when no upload was received.
    """
    dims = {upload.dimension for upload in uploads.values()}
    if len(dims) > 1:
        raise ValueError(f"the transport delivered summaries of dimensions {sorted(dims)}")
    return dims.pop() if dims else None


def summary_form_problem(upload: Upload, derives_summary: bool) -> str | None:
    """Why an upload's summary does not have the head's form: sent, or derived from statistics.

    A head whose statistics determine the summary (FedCGS) has its clients
    send their shrinkage in its place; any other sends the summary itself.
    """
    if not derives_summary:
        if upload.summary is None or upload.shrinkage is not None:
            return "the upload must carry the client's summary (and no separate shrinkage)"
        return None
    if upload.summary is not None:
        return (
            "the head's statistics determine the summary: the upload must carry the "
            "shrinkage, not a summary of its own"
        )
    if upload.statistics is None:
        return "the upload lacks the statistics its summary is derived from"
    if upload.shrinkage is None:
        return "the upload lacks the shrinkage its summary is derived with"
    return None


def upload_problem(
    upload: Upload,
    n_features: int,
    *,
    split: bool,
    uploads_statistics: bool,
    consistency: bool,
    summary_covariance: str = "total",
    n_classes: int | None = None,
    validation_fraction: float | None = None,
    run_classes: int | None = None,
) -> str | None:
    """Why an upload does not fit the run: its parts, statistics and summary must agree.

    The summary describes the fitting rows, so it must count ``n_fit`` rows
    and agree with the fitting statistics.  ``n_classes``: the run asked for
    the client's class counts (over its ``n_classes`` classes), which must add
    up to its fitting and validation rows and equal those of its statistics;
    with a validation split (``validation_fraction``) they also fix the size
    of its validation part.  Without them, the split still bounds it: the run's
    ``run_classes`` classes each hold out ``floor(fraction * n_c)`` rows, so
    the validation part of ``n`` rows lies in ``(fraction * n - C, fraction * n]``.
    """
    summary = upload.summary
    for name in ("n_fit", "n_validation", "n_test"):
        value = getattr(upload, name)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return f"{name} must be an integer, got {value!r}"
        if value < 0:
            return f"{name} must be >= 0, got {value}"
    if upload.n_fit != summary.n:
        return f"its summary counts {summary.n} rows, but its fitting part {upload.n_fit}"
    held, rows = upload.n_validation, upload.n_rows
    if not split and held != 0:
        return "this run has no validation part (a fixed tau, without screening)"
    if split and validation_fraction is not None and run_classes is not None:
        expected = validation_fraction * rows  # Python integers and floats: no wrap-around
        if not expected - run_classes <= held <= expected * (1 + 1e-12):
            return (
                f"a validation part of {held} rows of {rows}: a split at validation_fraction = "
                f"{validation_fraction} over {run_classes} classes holds out more than "
                f"{expected - run_classes:.1f} and at most {expected:.1f}"
            )
    why = class_counts_problem(upload, n_classes, validation_fraction if split else None)
    if why:
        return why
    if not uploads_statistics:
        if upload.statistics is not None or upload.validation is not None:
            return "the head trains locally: its upload carries no statistics"
        return None
    if upload.statistics is None:
        return "the upload lacks the head's statistics"
    if (upload.validation is None) != (upload.n_validation == 0):
        return f"validation statistics do not match a validation part of {upload.n_validation} rows"
    if consistency:
        implied = upload.statistics.implied_moments(summary_covariance)
        why = inconsistent_statistics(
            summary,
            implied.mean,
            implied.trace,
            n_described=implied.n,
            trace_error=implied.error,
            covariance=summary_covariance,
        )
        if why:
            return f"inconsistent with its summary: {why}"
    return None


def class_counts_problem(
    upload: Upload, n_classes: int | None, validation_fraction: float | None = None
) -> str | None:
    """Why an upload's class counts are not the ones asked for, or disagree with the rest.

    With ``validation_fraction``, the validation part must be the one
    :func:`~skslot.selection.validation_split` holds out of those counts.
    """
    counts = upload.class_counts
    if n_classes is None:
        return None if counts is None else "class counts were not asked for"
    if counts is None:
        return "the upload lacks the class counts the run asked for"
    counts = np.asarray(counts)
    if counts.shape != (n_classes,) or counts.dtype.kind not in "iu" or np.any(counts < 0):
        return (
            f"class counts must be {n_classes} non-negative integers, got an array of dtype "
            f"{counts.dtype} and shape {counts.shape}"
        )
    rows = upload.n_rows
    if np.any(counts > rows):
        return f"a class count exceeds the client's {rows} training rows"
    total = sum(int(c) for c in counts)  # Python integers: no wrap-around
    if total != rows:
        return (
            f"class counts add up to {total} rows but the client announced {rows} "
            f"({upload.n_fit} fitting, {upload.n_validation} held out)"
        )
    if validation_fraction is not None:
        held = sum(int(k) for k in validation_sizes(counts, validation_fraction))
        if held != upload.n_validation:
            return (
                f"a validation part of {upload.n_validation} rows, but its class counts make "
                f"{held} at validation_fraction = {validation_fraction}"
            )
    if upload.statistics is not None:
        parts = [p for p in (upload.statistics, upload.validation) if p is not None]
        if not np.array_equal(sum(p.class_counts() for p in parts), counts):
            return "class counts differ from those of the client's statistics"
    return None


def local_updates_problem(updates: Sequence, n_updates: int, n_samples: int) -> str | None:
    """Why a client's local heads do not match the request and its upload."""
    if len(updates) != n_updates:
        return f"{len(updates)} local heads, but {n_updates} were requested"
    for update in updates:
        why = sample_count_problem(update.n_samples, n_samples, "local head trained on")
        if why is not None:
            return why
    return None


def counts_problem(
    counts: ValidationCounts,
    n_candidates: int,
    n_classes: int,
    n_samples: int,
    class_totals: np.ndarray | None = None,
) -> str | None:
    """Why validation counts do not match the candidates and the client's validation part.

    ``class_totals``, where the server derived them from the client's class
    counts (:func:`~skslot.selection.validation_sizes`), are its validation
    rows of each class.
    """
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
    if class_totals is not None and not np.array_equal(counts.total, class_totals):
        return "validation rows per class differ from those its class counts make"
    return None


def paired_counts_problem(counts: PairedCounts, expected_rows: np.ndarray) -> str | None:
    """Why screening counts do not match the comparisons asked for.

    ``expected_rows`` are the rows each comparison must score: the client's
    validation rows of the comparison's classes, derived from its class
    counts (:func:`~skslot.selection.validation_sizes`).
    """
    expected_rows = np.asarray(expected_rows)
    arrays = (counts.better, counts.worse, counts.rows)
    if any(np.shape(a) != expected_rows.shape for a in arrays):
        shapes = [np.shape(a) for a in arrays]
        return f"screening counts of shapes {shapes}, expected {expected_rows.shape}"
    if any(np.asarray(a).dtype.kind not in "iu" for a in arrays):
        return "screening counts must be integers"
    better, worse, rows = (np.asarray(a).astype(object) for a in arrays)  # no wrap-around
    if any(np.any(a < 0) for a in (better, worse)):
        return "negative screening counts"
    if not np.array_equal(rows, expected_rows.astype(object)):
        return (
            f"the comparisons score {rows.tolist()} rows, but its class counts make "
            f"{expected_rows.tolist()} validation rows of those classes"
        )
    if np.any(better + worse > rows):
        return "more discordant rows than rows scored"
    return None


def evaluation_problem(evaluation: Evaluation, n_test: int) -> str | None:
    """Why test counts do not match the test size the client announced at upload."""
    if evaluation.n_test != n_test:
        return f"evaluated {evaluation.n_test} test rows, but announced {n_test}"
    if not 0 <= evaluation.n_correct <= n_test:
        return f"evaluation counts are inconsistent ({evaluation.n_correct} of {n_test})"
    return None
