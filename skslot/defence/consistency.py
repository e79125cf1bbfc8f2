"""Consistency of one client's messages with each other: its statistics, summary and counts.

The defence (:mod:`skslot.defence`) compares clients with each other; these
checks compare what one client sent: its head's statistics with its summary
(:func:`inconsistent_statistics`, :func:`collapsed_spread`), its validation
part's with its fitting part's (:func:`inconsistent_parts`).  The upload
stage's :func:`~skslot.protocol.stages.upload.check` runs them, with its own
checks of an upload's class counts and sums; the
updates stage's :func:`~skslot.protocol.stages.updates.collect` ties a local
head to the class sums of its client's upload (:func:`misplaced_class_means`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..gaussian import GaussianSummary

if TYPE_CHECKING:
    from ._bounds import DefenceBounds

__all__ = [
    "OWN_MEANS_AGREEMENT",
    "SPREAD_RTOL",
    "collapsed_spread",
    "inconsistent_parts",
    "inconsistent_statistics",
    "inconsistent_statistics_parts",
    "misplaced_class_means",
]


def inconsistent_statistics(
    summary: GaussianSummary,
    mean: np.ndarray,
    covariance_trace: float,
    n_described: int | None = None,
    trace_error: float = 0.0,
    *,
    covariance: str = "total",
    rtol: float = 1e-2,
) -> str | None:
    """Why a client's head statistics disagree with its own summary, or None.

    When both describe the same rows, the statistics' mean must equal the
    summary's, and the trace of their sample covariance the summary's
    (Ledoit-Wolf shrinkage keeps the trace: ``tr((1 - s) S + s (tr S / m) I) =
    tr S``), up to ``rtol`` relative to the summary's scale (its transmit
    rounding).  When the statistics describe ``n_described = n_s`` of the
    summary's ``N`` rows (FedPFT does not send classes with too few rows), the
    rest cannot be less spread than nothing: ``n_s tr S_s <= N tr S`` for
    either kind of covariance, and for the total covariance
    ``||mu_s - mu||^2 <= (N - n_s) / n_s tr S``, each up to ``rtol``.
    A deployment never pairs statistics with a private summary (the
    privacy package refuses one with the statistics heads), and a FedCGS summary is derived
    from its statistics, so this is FedPFT's check.

    Parameters
    ----------
    summary : GaussianSummary
        The client's summary.
    mean : ndarray of shape (m,)
        The mean its statistics imply.
    covariance_trace : float
        The trace of the covariance its statistics imply.
    n_described : int, optional
        The rows its statistics describe (default: the summary's ``n``).
    trace_error : float, default=0
        How far the statistics' own rounding moves the trace (absolute).
    covariance : {"total", "within"}, default="total"
        What the summary describes.
    rtol : float, default=1e-2
        Relative tolerance (the summary's transmit rounding).

    Returns
    -------
    str or None

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence.consistency import inconsistent_statistics
    >>> s = GaussianSummary(50, np.zeros(3), np.eye(3))
    >>> inconsistent_statistics(s, np.zeros(3), 3.0) is None
    True
    >>> inconsistent_statistics(s, np.zeros(3), 3e8)
    "the statistics imply a total variance 1e+08 times the summary's"
    >>> inconsistent_statistics(s, np.array([np.sqrt(3.0), 0, 0]), 3.0)
    "the statistics' mean lies 1 standard deviations from the summary's"
    """
    trace, N = summary.trace, summary.n
    n_s = N if n_described is None else int(n_described)
    offset = float(np.linalg.norm(mean - summary.mean))
    slack = rtol * (np.sqrt(trace) + float(np.linalg.norm(summary.mean)))
    if n_s >= N:
        if not abs(covariance_trace - trace) <= rtol * trace + trace_error:
            ratio = covariance_trace / trace
            return f"the statistics imply a total variance {ratio:.3g} times the summary's"
        bound = 0.0
    else:
        if n_s <= 0:
            return None if n_s == 0 else "the statistics describe a negative number of rows"
        if not covariance_trace <= (1 + rtol) * trace * N / n_s + trace_error:
            ratio = covariance_trace / trace
            return (
                f"the statistics imply a total variance {ratio:.3g} times the summary's, "
                f"more than its {n_s} of {N} rows can have"
            )
        if covariance != "total":  # the within-class spread does not bound the means
            return None
        bound = float(np.sqrt((N - n_s) / n_s * trace))
    if not offset <= (1 + rtol) * bound + slack:
        return (
            f"the statistics' mean lies {offset / np.sqrt(trace):.3g} standard deviations from "
            "the summary's"
        )
    return None


#: The share of the bound a summary's variance along a class direction must reach
#: (:func:`collapsed_spread`): room for the summary's and the means' transmit rounding.
SPREAD_RTOL = 0.1


def collapsed_spread(
    summary: GaussianSummary,
    class_counts: np.ndarray,
    class_means: np.ndarray,
    *,
    rtol: float = SPREAD_RTOL,
) -> str | None:
    """Why a summary's covariance is narrower than its own class means are apart, or None.

    The total covariance ``S`` of the summary's ``N`` rows holds the scatter
    of any of their classes' means about the rows' mean ``mu``:
    ``S >= B = sum_c (n_c / N) (mu_c - mu)(mu_c - mu)^T`` (within each class
    the rows spread about their mean, and classes not described only add).
    A shrunk summary ``Sigma = (1 - s) S + s (tr S / m) I`` (Ledoit-Wolf and
    OAS keep the trace) then has, along every unit ``v`` and whatever the
    shrinkage ``s``, ``v^T Sigma v >= min(v^T B v, tr(Sigma) / m)``.  Checked
    along the eigenvectors of ``B``, up to ``rtol``: a summary whose variance
    collapses where its own statistics' class means lie apart is refused.

    Parameters
    ----------
    summary : GaussianSummary
        The client's summary of its total covariance.
    class_counts : ndarray of shape (C,)
        The rows of each class its statistics describe.
    class_means : ndarray of shape (C, m)
        Their means.
    rtol : float, default=SPREAD_RTOL

    Returns
    -------
    str or None

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence.consistency import collapsed_spread
    >>> means = np.array([[-1.0, 0.0], [1.0, 0.0]])  # classes two apart along the first axis
    >>> collapsed_spread(GaussianSummary(10, np.zeros(2), np.eye(2)), [5, 5], means) is None
    True
    >>> collapsed_spread(GaussianSummary(10, np.zeros(2), np.diag([1e-6, 2.0])), [5, 5], means)
    "its summary's variance along its own class means' direction is 1e-06 of what they imply"
    """
    counts = np.asarray(class_counts, dtype=np.float64)
    if counts.size == 0 or summary.n <= 0:
        return None
    D = np.sqrt(counts / summary.n)[:, None] * (np.asarray(class_means) - summary.mean)
    # B = D^T D: its eigenvectors from the C x C Gram D D^T
    values, vectors = np.linalg.eigh(D @ D.T)
    keep = values > 1e-12 * max(float(values.max(initial=0.0)), 1e-300)
    if not keep.any():
        return None
    directions = (D.T @ vectors[:, keep]) / np.sqrt(values[keep])
    along = summary.variance_along(directions)
    floor = np.minimum(values[keep], summary.trace / summary.dimension)
    worst = int(np.argmin(along / floor))
    if along[worst] < (1.0 - rtol) * floor[worst]:
        return (
            "its summary's variance along its own class means' direction is "
            f"{along[worst] / floor[worst]:.3g} of what they imply"
        )
    return None


def inconsistent_parts(
    fitting_mean: np.ndarray,
    fitting_trace: float,
    validation_mean: np.ndarray,
    validation_trace: float,
    *,
    max_variance_ratio: float = 100.0,
    max_mean_offset: float = 10.0,
) -> str | None:
    """Why a client's validation part is out of line with its fitting part, or None.

    The two parts are one stratified split of one client's rows
    (:func:`~skslot.selection.validation_split`), so they describe one
    distribution; the summary, and so every check against it, describes the
    fitting part alone, while the final head of an unscreened run with
    ``tau = "auto"`` is refitted on both.  The
    validation part's total variance ``tr(S_v)`` may not exceed
    ``max_variance_ratio`` times the fitting part's, nor its mean lie more than
    ``max_mean_offset`` of the fitting part's standard deviations
    (``sqrt(tr S_f)``) from the fitting mean: the bounds
    :func:`~skslot.defence.implausible_summaries` puts on a client against the
    others.  A smaller spread is not refused (a part of one row per class has none).

    Parameters
    ----------
    fitting_mean : ndarray of shape (m,)
    fitting_trace : float
    validation_mean : ndarray of shape (m,)
    validation_trace : float
    max_variance_ratio, max_mean_offset : float, default=100, 10
        The defence's bounds (:class:`~skslot.defence.DefenceBounds`).

    Returns
    -------
    str or None

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.defence.consistency import inconsistent_parts
    >>> inconsistent_parts(np.zeros(2), 2.0, np.ones(2) * 0.1, 2.2) is None
    True
    >>> print(inconsistent_parts(np.zeros(2), 2.0, np.zeros(2), 2e4))
    its validation part's variance is 1e+04 times its fitting part's (max-variance-ratio = 100)
    """
    if not validation_trace <= max_variance_ratio * fitting_trace:
        ratio = validation_trace / fitting_trace if fitting_trace > 0 else float("inf")
        return (
            f"its validation part's variance is {ratio:.3g} times its fitting part's "
            f"(max-variance-ratio = {max_variance_ratio:g})"
        )
    offset = float(np.linalg.norm(np.asarray(validation_mean) - np.asarray(fitting_mean)))
    if not offset <= max_mean_offset * np.sqrt(fitting_trace):
        sd = np.sqrt(fitting_trace)
        return (
            f"its validation part's mean lies {offset / sd if sd > 0 else float('inf'):.3g} "
            f"standard deviations from its fitting part's (max-mean-offset = {max_mean_offset:g})"
        )
    return None


def inconsistent_statistics_parts(
    fitting: Any, validation: Any, defence: DefenceBounds
) -> str | None:
    """:func:`inconsistent_parts` of a client's two parts of statistics, with the defence's bounds.

    Where either part leaves some of its classes undescribed (FedPFT sends no
    class with fewer than ``min_samples_per_class`` rows), both parts are
    compared on the classes both describe, so a skipped class never switches
    the check off; a validation part that describes rows but no class the
    fitting part does is refused; where it describes none, there is nothing
    to compare.

    Parameters
    ----------
    fitting, validation : head statistics
        The client's statistics of its fitting and of its validation part.
    defence : DefenceBounds
        Its ``max_variance_ratio`` and ``max_mean_offset`` apply.

    Returns
    -------
    str or None
    """
    fit, held = fitting.implied_moments("total"), validation.implied_moments("total")
    if held.n == 0:
        return None
    described = (fit.n, held.n)
    rows = (int(fitting.class_counts().sum()), int(validation.class_counts().sum()))
    if described != rows:  # some class undescribed: compare the classes both parts describe
        both = set(fitting.described_classes())
        shared = [c for c in validation.described_classes() if c in both]
        if not shared:
            return "its validation part describes no class its fitting part describes"
        fit = fitting.implied_moments("total", classes=shared)
        held = validation.implied_moments("total", classes=shared)
    return inconsistent_parts(
        fit.mean,
        fit.trace,
        held.mean,
        held.trace,
        max_variance_ratio=defence.max_variance_ratio,
        max_mean_offset=defence.max_mean_offset,
    )


#: The share of its client's fitting rows whose class mean a local head must place in that
#: class (:func:`misplaced_class_means`).
OWN_MEANS_AGREEMENT = 0.9


def misplaced_class_means(
    coef: np.ndarray,
    intercept: np.ndarray,
    class_counts: np.ndarray,
    class_means: np.ndarray,
    *,
    min_agreement: float = OWN_MEANS_AGREEMENT,
) -> str | None:
    """Why a local head does not place its own client's class means in their classes, or None.

    A local head is trained to score each of its client's rows highest on
    the row's class; the mean of the rows of one class then scores highest
    on that class, among the classes the client holds, for a head that
    separates them at all.  Measured on the embedded digits and
    Office-Caltech10 (two clients per domain, alpha 0.1, 0.01 and no skew,
    58 clients): every honest head places the means of all its rows' classes
    (the means of 94 % of its rows or more at ``C = 0.00025``, the private
    federation's), a negated head none.  A head placing the means of fewer
    than ``min_agreement`` of the rows (each class weighing its rows) is
    refused: what it may score otherwise is bounded to the classes of its
    fewest rows, a tenth of them, whose rows weigh that little in the
    average of their class.

    Parameters
    ----------
    coef : ndarray of shape (C, m)
        The local head's coefficients.
    intercept : ndarray of shape (C,)
        Its intercepts.
    class_counts : ndarray of shape (C,)
        The client's rows of each class (those the means describe).
    class_means : ndarray of shape (C, m)
        Their means, aligned as the rows the head was trained on; those of
        classes without rows are not read.
    min_agreement : float, default=OWN_MEANS_AGREEMENT

    Returns
    -------
    str or None

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.defence.consistency import misplaced_class_means
    >>> coef, intercept = np.array([[1.0, 0.0], [-1.0, 0.0]]), np.zeros(2)
    >>> means = np.array([[2.0, 1.0], [-2.0, 0.0]])
    >>> misplaced_class_means(coef, intercept, [30, 10], means) is None
    True
    >>> misplaced_class_means(-3.0 * coef, intercept, [30, 10], means)
    'its local head places the means of 0 % of its own rows in their class (at least 90 %)'
    """
    counts = np.asarray(class_counts, dtype=np.float64)
    held = np.flatnonzero(counts > 0)
    if held.size < 2:  # one class: nothing to separate
        return None
    scores = np.asarray(class_means)[held] @ np.asarray(coef)[held].T + np.asarray(intercept)[held]
    placed = held[scores.argmax(axis=1)] == held
    share = float(counts[held][placed].sum() / counts[held].sum())
    if share >= min_agreement:
        return None
    return (
        f"its local head places the means of {100 * share:.0f} % of its own rows in their "
        f"class (at least {100 * min_agreement:.0f} %)"
    )
