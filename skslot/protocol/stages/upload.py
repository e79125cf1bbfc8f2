"""Stage "upload": each client's summary and, for statistics heads, its statistics.

The request gives a client its position, the seed of its validation split
and the run's summary settings; the reply (:class:`Upload`) carries its
summary (or, where the head's statistics determine it, its shrinkage) and
its row counts.  The server's checks tie the parts of one upload together
(:func:`check`, :func:`inconsistent_statistics`, :func:`inconsistent_parts`);
comparing clients with each other is the defence's (:mod:`skslot.defence`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._moments import ShiftedMoments
from ..._validation import check_feature_scale
from ...accounting import RELEASES, PrivacyBudgetExceeded
from ...gaussian import GaussianSummary
from ...heads import CLASS_COUNTS_SENSITIVITY, private_class_counts
from ...label_shift import class_counts
from ...privacy import SUMMARY_SENSITIVITY, private_summary
from ...selection import validation_sizes
from ...summary import COVARIANCES
from ...wire import (
    MessageFormatError,
    StatisticsFormatError,
    SummaryFormatError,
    WireFormatError,
)
from ...wire.payload import Payload, ReceivedPayload
from ...wire.summary_codec import (
    MAX_COUNT,
    SUMMARY_DTYPES,
    check_wire_label,
    summary_dimension,
)
from ._stage import ClientWire, ServerWire, Stage

if TYPE_CHECKING:
    from ...accounting import PrivacyLedger
    from ...defence import DefenceBounds, NoDefence
    from ...heads import OneShotHead
    from ..client import ClientParty
    from ..state import RunState

__all__ = [
    "STAGE",
    "Upload",
    "UploadRequest",
    "UploadStage",
    "check",
    "collapsed_spread",
    "collect",
    "inconsistent_parts",
    "inconsistent_statistics",
    "private_summary_problem",
    "run_dimension",
]

#: The groups of arrays an upload carries.
STATISTICS, VALIDATION_STATISTICS = "statistics", "validation-statistics"
#: The releases an upload carries (each where the run makes it).
UPLOAD_RELEASES = ("summary", "statistics", "class_counts")


@dataclass(frozen=True)
class UploadRequest:
    """Stage "upload": a client's position, and the seed of its validation split.

    Parameters
    ----------
    client_index : int
        The client's position in the run's order.
    split_seed : int or None, default=None
        Seed of its validation split (``None``: the run has no validation round).
    class_counts : bool, default=False
        Ask for the client's class counts (the label-shift rule's and the
        screening's input).
    summary_covariance : {"total", "within"}, default="total"
        What the summaries describe; with ``covariance_floor``, the settings
        with which the server derives the summary of a head whose statistics
        determine it (FedCGS).  A client summarising otherwise refuses, rather
        than map its rows with another summary than the server's.
    covariance_floor : float, default=1e-8
    mean_tau : float or None, default=None
        The run's fraction of the mean's transport (``None``: the mean follows
        ``tau``), with which the client makes its map as the server does.
    summary_dtype : {"float16", "float32", "float64"} or None, default=None
        The precision the summary travels in: the client keeps its summary
        rounded to it, so that its map is the server's (``None``: exact).
    validation_statistics : bool, default=True
        With a validation part, send the head's statistics of it too (for the
        refit of an unscreened run); a screened run's final head is fitted on
        the fitting parts alone and does not ask for them.
    privacy : tuple of (float, float, float) or None, default=None
        A private run's budget ``(epsilon, delta, clip_norm)``, which must be
        the client's own (:class:`~skslot.accounting.PrivacyBudget`).
    releases : tuple of str, default=()
        A private run's releases (:data:`~skslot.accounting.RELEASES`), which
        the client's ledger is planned for.
    shares : tuple of float, default=()
        Each release's share of the budget as the server accounts for it; a
        client splitting its budget otherwise refuses.
    """

    client_index: int
    split_seed: int | None = None
    class_counts: bool = False
    summary_covariance: str = "total"
    covariance_floor: float = 1e-8
    mean_tau: float | None = None
    summary_dtype: str | None = None
    validation_statistics: bool = True
    privacy: tuple[float, float, float] | None = None
    releases: tuple[str, ...] = ()
    shares: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class Upload:
    """A client's first reply: its summary and, for statistics heads, their statistics.

    The summary describes the fitting rows (all the training rows when there
    is no validation part), so that the held-out rows are as new to the map
    they are aligned with as a test row is.  For a head whose statistics
    determine the summary (``head.strategy.derives_summary``, FedCGS),
    ``summary`` is ``None``: the client sends its Ledoit-Wolf ``shrinkage``
    and its ``label`` instead, and the server derives the summary.

    Parameters
    ----------
    summary : GaussianSummary or None
        The summary of the fitting rows (``None`` where the server derives it).
    n_fit : int
        The fitting rows.
    n_test : int
        The test rows the client will evaluate on.
    statistics : object, default=None
        The head's statistics of the fitting rows (``None`` when the head
        uploads none).
    validation : object, default=None
        The head's statistics of the validation rows (``None`` when the client
        holds none, or the head uploads none).
    summary_bytes : int or None, default=None
        The summary's length on the wire, where a transport encodes it.
    class_counts : ndarray of int or None, default=None
        When asked for, the rows of each of the run's classes among all the
        training rows.
    shrinkage : float or None, default=None
        The Ledoit-Wolf shrinkage of a summary the server derives.
    label : int, str or None, default=None
        The client's own name, sent with a summary the server derives.
    n_validation : int, default=0
        The rows it holds out (none without a validation round).
    """

    summary: GaussianSummary | None
    n_fit: int
    n_test: int
    statistics: Any = None
    validation: Any = None
    summary_bytes: int | None = None
    class_counts: np.ndarray | None = None
    shrinkage: float | None = None
    label: int | str | None = None
    n_validation: int = 0

    @property
    def n_rows(self) -> int:
        """All the client's training rows: its fitting and its validation part."""
        return self.n_fit + self.n_validation

    @property
    def client_label(self) -> int | str | None:
        """The client's own name, from its summary or, for a derived summary, its upload."""
        return self.label if self.summary is None else self.summary.client

    @property
    def dimension(self) -> int | None:
        """The feature dimension of the summary, or of the statistics it is derived from."""
        if self.summary is not None:
            return self.summary.dimension
        return None if self.statistics is None else int(self.statistics.n_features)


# -- the client's step -----------------------------------------------------------------------


def private_summary_problem(head: OneShotHead, epsilon: float | None) -> str | None:
    """Why a private summary (``epsilon``) is refused with this head, or ``None``.

    A statistics head's messages are exact moments of the client's rows
    (FedCGS's class sums and Gram matrix determine its mean and covariance,
    FedPFT's mixtures its class means and covariances), so beside them a
    private summary would cost accuracy and protect nothing.

    Parameters
    ----------
    head : OneShotHead
    epsilon : float or None
        The summary's privacy budget.

    Returns
    -------
    str or None
    """
    if epsilon is None or not head.strategy.uploads_statistics:
        return None
    instead = (
        "give the client a privacy budget instead (ClientParty's privacy, OneShotProtocol's "
        "privacy; in a deployment the run config's epsilon), under which its statistics are "
        "released privately and its summary derived from them"
        if head.private_release is not None
        else "use FedCGS or O-FedAvg with epsilon, or no epsilon"
    )
    return (
        f"a private summary (epsilon) is refused with {type(head).__name__}: its statistics "
        "are exact moments of each client's rows, from which the server reads the mean and "
        "covariance a private summary is meant to protect (see the privacy guide's 'Where "
        f"the guarantee stops'); {instead}"
    )


def private_run(party: ClientParty, request: UploadRequest) -> PrivacyLedger | None:
    """The client's ledger for a private run, after checking the run against its budget.

    A client with a privacy budget takes part only in a run under that same
    budget, whose releases its head can make, and without a validation split
    (whose counts it would release outside the plan).

    Parameters
    ----------
    party : ClientParty
    request : UploadRequest

    Returns
    -------
    PrivacyLedger or None
        ``None`` for a run without privacy (and a client without a budget).

    Raises
    ------
    ValueError
        If the run and the client disagree on privacy.
    PrivacyBudgetExceeded
        If the run announces another plan than the one it announced first.
    """
    own = party.privacy
    if own is None and request.privacy is None:
        return None
    if own is None:
        raise ValueError(
            "the run asks for private releases, but this client has no privacy budget of its own"
        )
    if request.privacy is None:
        raise ValueError(
            "this client releases only under its privacy budget, and the run asks for exact "
            "values (set the run's privacy to the client's budget)"
        )
    settings = (float(own.epsilon), float(own.delta), float(own.clip_norm))
    if request.privacy != settings:
        raise ValueError(
            f"this client releases under (epsilon, delta, clip_norm) = {settings}, but the run "
            f"asks for {request.privacy}: it takes part only under its own budget"
        )
    if request.split_seed is not None:
        raise ValueError(
            "a private client holds out no validation rows: their counts are releases outside "
            "its budget (a private run has a fixed tau and no screening)"
        )
    release = party.head.private_release
    if release is None or release not in request.releases:
        raise ValueError(
            f"{type(party.head).__name__} has no private release among the run's "
            f"{list(request.releases)}"
        )
    state = party.state
    if state.releases and tuple(request.releases) != state.releases:
        raise PrivacyBudgetExceeded(
            f"this run's releases were announced as {list(state.releases)}; a request for "
            f"{list(request.releases)} would release again under another plan"
        )
    shares = own.split(request.releases)
    if request.shares and not np.allclose(
        [shares[r] for r in request.releases], request.shares, rtol=1e-9, atol=0.0
    ):
        raise ValueError(
            f"this client splits its budget {shares}, but the run accounts for "
            f"{dict(zip(request.releases, request.shares, strict=False))}"
        )
    state.releases = tuple(request.releases)
    return party.ledger()


def private_shrinkage_problem(upload: Upload, covariance: str) -> str | None:
    """Why a private client's shrinkage is not the one its released statistics determine.

    Under privacy the client announces the OAS shrinkage of its released
    statistics (:meth:`~skslot.heads.ClassStatistics.oas_shrinkage`), a
    function of them alone, so the server recomputes it exactly.

    Parameters
    ----------
    upload : Upload
    covariance : {"total", "within"}

    Returns
    -------
    str or None
    """
    expected = upload.statistics.oas_shrinkage(covariance)
    if not np.isclose(upload.shrinkage, expected, rtol=1e-12, atol=0.0):
        return (
            f"its shrinkage {upload.shrinkage!r} is not the OAS shrinkage of its released "
            f"statistics ({expected!r})"
        )
    return None


# -- the server's checks ---------------------------------------------------------------------


def run_dimension(uploads: Mapping[Hashable, Upload]) -> int | None:
    """The feature dimension of the run (a transport delivers uploads of one dimension).

    Parameters
    ----------
    uploads : mapping of address to Upload

    Returns
    -------
    int or None
        ``None`` when no upload was received.
    """
    dims = {upload.dimension for upload in uploads.values()}
    if len(dims) > 1:
        raise ValueError(f"the transport delivered summaries of dimensions {sorted(dims)}")
    return dims.pop() if dims else None


def form_problem(upload: Upload, derives_summary: bool) -> str | None:
    """Why an upload's summary does not have the head's form: sent, or derived from statistics.

    A head whose statistics determine the summary (FedCGS) has its clients
    send their shrinkage in its place; any other sends the summary itself.

    Parameters
    ----------
    upload : Upload
    derives_summary : bool
        Whether the run's head derives the summary from the statistics.

    Returns
    -------
    str or None
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


def check(
    upload: Upload,
    n_features: int,
    *,
    split: bool,
    uploads_statistics: bool,
    defence: DefenceBounds | NoDefence,
    derived: bool,
    validation_statistics: bool = True,
    summary_covariance: str = "total",
    n_classes: int | None = None,
    validation_fraction: float | None = None,
    run_classes: int | None = None,
) -> str | None:
    """Why an upload does not fit the run: its parts, statistics and summary must agree.

    The summary describes the fitting rows, so it must count ``n_fit`` rows
    and, with a defence, agree with the fitting statistics
    (:func:`inconsistent_statistics`; a summary the server ``derived`` from
    them agrees by construction), and the validation statistics with the
    fitting ones (:func:`inconsistent_parts`).  ``n_classes``: the run asked
    for the client's class counts (over its ``n_classes`` classes), which
    must add up to its fitting and validation rows and equal those of its
    statistics; with a validation split (``validation_fraction``) they also
    fix the size of its validation part.  Without them, the split still
    bounds it: the run's ``run_classes`` classes each hold out
    ``floor(fraction * n_c)`` rows, so the validation part of ``n`` rows lies
    in ``(fraction * n - C, fraction * n]``.

    Parameters
    ----------
    upload : Upload
    n_features : int
        The run's dimension.
    split : bool
        Whether the run has a validation part.
    uploads_statistics : bool
        Whether the head's clients upload statistics.
    defence : DefenceBounds or NoDefence
        Its bounds apply to the consistency of the parts (none without a defence).
    derived : bool
        Whether the server derived the summary from the statistics.
    validation_statistics : bool, default=True
        Whether the run asked for the validation part's statistics.
    summary_covariance : {"total", "within"}, default="total"
    n_classes : int, optional
        The number of class counts the run asked for.
    validation_fraction : float, optional
    run_classes : int, optional
        The number of the run's classes.

    Returns
    -------
    str or None
        Why the upload is refused, or ``None``.
    """
    summary = upload.summary
    for name in ("n_fit", "n_validation", "n_test"):
        value = getattr(upload, name)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return f"{name} must be an integer, got {value!r}"
        if value < 0:
            return f"{name} must be >= 0, got {value}"
    if summary.dimension != n_features:
        return f"dimension {summary.dimension}, expected {n_features}"
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
    if not validation_statistics:
        if upload.validation is not None:
            return "the run asked for no validation statistics"
    elif (upload.validation is None) != (upload.n_validation == 0):
        return f"validation statistics do not match a validation part of {upload.n_validation} rows"
    if not defence.checks_consistency:
        return None
    if not derived:
        implied = upload.statistics.implied_moments(summary_covariance)
        why = inconsistent_statistics(
            summary,
            implied.mean,
            implied.trace,
            n_described=implied.n,
            trace_error=implied.error,
            covariance=summary_covariance,
        )
        if why is None and summary_covariance == "total" and implied.class_means is not None:
            why = collapsed_spread(summary, implied.class_counts, implied.class_means)
        if why:
            return f"inconsistent with its summary: {why}"
    if upload.validation is not None:
        why = _inconsistent_parts(upload.statistics, upload.validation, defence)
        if why:
            return f"implausible: {why}"
    return None


def class_counts_problem(
    upload: Upload, n_classes: int | None, validation_fraction: float | None = None
) -> str | None:
    """Why an upload's class counts are not the ones asked for, or disagree with the rest.

    Parameters
    ----------
    upload : Upload
    n_classes : int or None
        The number of class counts asked for (``None``: not asked for).
    validation_fraction : float, optional
        With it, the validation part must be the one
        :func:`~skslot.selection.validation_split` holds out of those counts.

    Returns
    -------
    str or None
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
        described = upload.statistics.class_counts()
        if upload.validation is not None:
            described = described + upload.validation.class_counts()
        elif validation_fraction is not None:  # its validation part sent no statistics
            described = described + validation_sizes(counts, validation_fraction)
        if not np.array_equal(described, counts):
            return "class counts differ from those of the client's statistics"
    return None


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
    A deployment never pairs statistics with a private summary (``epsilon``
    is refused with the statistics heads), and a FedCGS summary is derived
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
    >>> from skslot.protocol.stages.upload import inconsistent_statistics
    >>> s = GaussianSummary(50, np.zeros(3), np.eye(3))
    >>> inconsistent_statistics(s, np.zeros(3), 3.0) is None
    True
    >>> inconsistent_statistics(s, np.zeros(3), 3e8)
    "the statistics imply a total variance 1e+08 times the summary's"
    >>> inconsistent_statistics(s, np.array([np.sqrt(3.0), 0, 0]), 3.0)
    "the statistics' mean lies 1 standard deviations from the summary's"
    """
    trace = float(np.trace(summary.covariance))
    N = summary.n
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
    >>> from skslot.protocol.stages.upload import collapsed_spread
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
    along = np.einsum("mk,mn,nk->k", directions, summary.covariance, directions)
    floor = np.minimum(values[keep], np.trace(summary.covariance) / summary.dimension)
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
    >>> from skslot.protocol.stages.upload import inconsistent_parts
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


def _inconsistent_parts(fitting: Any, validation: Any, defence: DefenceBounds) -> str | None:
    """:func:`inconsistent_parts` of a client's two parts of statistics, with the defence's bounds.

    Where either part leaves some of its classes undescribed (FedPFT sends no
    class with fewer than ``min_samples_per_class`` rows), both parts are
    compared on the classes both describe, so a skipped class never switches
    the check off; a validation part that describes rows but no class the
    fitting part does is refused; where it describes none, there is nothing
    to compare.
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


# -- the codec -------------------------------------------------------------------------------


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
    dimension: int | None


def _read_header(payload: ReceivedPayload, n_classes: int) -> _Header:
    summary = payload.optional("summary", bytes)
    shrinkage = payload.optional("shrinkage", float)
    label = check_wire_label(payload.config.get("label"))
    dimension = payload.optional("dimension", int)
    if (summary is None) == (dimension is None):  # what the statistics are decoded with
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
    return _Header(summary, n_fit, n_test, n_validation, counts, shrinkage, label, dimension)


# -- the server's step -----------------------------------------------------------------------


def collect(run: RunState) -> None:
    """The server's step: every client's upload, its summary derived where the head does so,
    each upload checked (:func:`check`), the accepted clients entered into the run.

    Parameters
    ----------
    run : RunState
    """
    protocol, report = run.protocol, run.report
    parties = run.parties
    seeds = run.split_seeds() if run.splits else {}
    counting = protocol.client_tau == "label-shift" or run.screens
    requests = {
        c: UploadRequest(
            k,
            seeds.get(c),
            class_counts=counting,
            summary_covariance=protocol.summary_covariance,
            covariance_floor=protocol.covariance_floor,
            mean_tau=protocol.mean_tau,
            validation_statistics=not run.screens,  # a screened final head never merges them
            privacy=run.privacy_settings,
            releases=run.releases,
            shares=run.shares,
        )
        for k, c in enumerate(parties)
    }
    exchange = run.exchange("upload", requests)
    head = protocol.head
    derives = head.strategy.derives_summary
    replies = {}
    for c, upload in exchange.replies.items():
        report.clients[c] = upload.client_label  # shown, never trusted
        for release in run.releases:  # spent, even if the upload is refused
            if release in UPLOAD_RELEASES:
                run.received_release(c, release)
        if upload.summary_bytes is not None:
            report.summary_payload_bytes[c] = upload.summary_bytes
        why = form_problem(upload, derives)
        if why is None and derives and run.releases:
            why = private_shrinkage_problem(upload, protocol.summary_covariance)
        if why is None and derives:
            try:
                summary = head.strategy.derived_summary(
                    upload.statistics,
                    upload.shrinkage,
                    covariance=protocol.summary_covariance,
                    covariance_floor=protocol.covariance_floor,
                    client=upload.label,
                )
            except ValueError as exc:
                why = f"its statistics make no summary: {exc}"
            else:
                upload = replace(upload, summary=summary)
                report.clients[c] = summary.client  # the label as a summary holds it
        if why:
            run.reject("upload", c, why)
            continue
        replies[c] = upload
    m = run_dimension(replies)
    report.n_features = m
    # values per summary on the wire: the shrinkage alone where the server derives it
    report.summary_values = None if m is None else 1 if derives else m * (m + 1) // 2 + m + 1
    accepted = []
    for c in parties:
        if c not in replies:
            continue
        why = check(
            replies[c],
            m,
            split=run.splits,
            uploads_statistics=head.strategy.uploads_statistics,
            defence=run.defence,
            derived=derives,
            validation_statistics=not run.screens,
            summary_covariance=protocol.summary_covariance,
            n_classes=run.classes.shape[0] if counting else None,
            validation_fraction=protocol.validation_fraction,
            run_classes=run.classes.shape[0],
        )
        if why:
            run.reject("upload", c, why)
            continue
        run.enter(c, replies[c])
        accepted.append(c)
    run.keep("upload", accepted)


def as_decoded(summary: GaussianSummary, dtype: str | None) -> GaussianSummary:
    """The summary as the server decodes it from the wire (``dtype``; ``None``: as is)."""
    if dtype is None:
        return summary
    return GaussianSummary.from_bytes(summary.to_bytes(dtype))


def released_summary(
    party: ClientParty, ledger: PrivacyLedger, covariance_floor: float
) -> GaussianSummary:
    """A private client's summary of its rows, the release ``"summary"`` of its ledger.

    The rows are clipped to the budget's norm and summed about zero; the mean
    and covariance are released with the Gaussian mechanism and shrunk
    towards their trace by OAS (:func:`skslot.privacy.private_summary`).
    """
    X, clip_norm = party.X, ledger.budget.clip_norm

    def release(sigma: float, rng: np.random.Generator) -> GaussianSummary:
        moments = ShiftedMoments.from_rows(
            X, shift=np.zeros(X.shape[1]), fourth_order=False, clip_norm=clip_norm
        )
        return private_summary(
            moments,
            clip_norm=clip_norm,
            sigma=sigma,
            rng=rng,
            covariance_floor=covariance_floor,
            client=party.label,
        )

    return ledger.release("summary", release, n=X.shape[0], sensitivity=SUMMARY_SENSITIVITY)


def released_class_counts(party: ClientParty, ledger: PrivacyLedger) -> np.ndarray:
    """A private client's class counts, the release ``"class_counts"`` of its ledger."""
    return ledger.release(
        "class_counts",
        lambda sigma, rng: private_class_counts(party.y, party.classes, sigma=sigma, rng=rng),
        n=party.y.shape[0],
        sensitivity=CLASS_COUNTS_SENSITIVITY,
    )


class UploadStage(Stage[UploadRequest, Upload]):
    """Stage "upload": a client's position and the run's settings out, its summary back.

    The client's step summarises its fitting rows and adds what the head
    uploads.  With a validation split (``request.split_seed``) the summary, and
    so the map, leaves the held-out rows out: the validation then scores rows
    new to the map, as the test does.  The summary is made once per run: a
    repeated request with the same split gets the same one (for a private
    summary, no fresh noise to average out; another split summarises other
    rows, a new release), kept as the server decodes it (``summary_dtype``).
    Where the head's statistics determine the summary (FedCGS), the client
    sends its Ledoit-Wolf shrinkage instead and keeps the summary the server
    derives from the same statistics, with the run's summary settings, which
    must be its own.

    The uploads are decoded together: the summaries first, the
    run's dimension (the configured one, or the one most clients sent; ties:
    the smallest), then each upload's statistics at that dimension; a client
    of another dimension is rejected.  Sets ``wire.dimension``.
    """

    name = "upload"
    message_type = "query.upload"
    request = UploadRequest
    reply = Upload
    check = staticmethod(check)
    answers_privately = True

    def answer(self, party: ClientParty, request: UploadRequest) -> Upload:
        state, strategy = party.state, party.head.strategy
        estimator = party.estimator
        why = private_summary_problem(party.head, estimator.epsilon)
        if why:
            raise ValueError(why)
        derived = strategy.derives_summary
        settings = (estimator.covariance, estimator.covariance_floor)
        if derived and settings != (request.summary_covariance, request.covariance_floor):
            raise ValueError(
                f"this client summarises with covariance={settings[0]!r}, "
                f"covariance_floor={settings[1]!r}, but the run derives summaries with "
                f"covariance={request.summary_covariance!r}, covariance_floor="
                f"{request.covariance_floor!r}: the client would map its rows with another "
                "summary than the server's"
            )
        ledger = private_run(party, request)  # checked before the state changes
        if ledger is not None and not strategy.uploads_statistics:
            if request.summary_covariance != "total":
                raise ValueError(
                    "this client releases the summary of its total covariance; the run asks "
                    f"for {request.summary_covariance!r}, whose sensitivity is not derived"
                )
        if state.summary is not None and state.split_seed != request.split_seed:
            state.summary = None  # another split: another fitting part to summarise
        state.client_index, state.split_seed = request.client_index, request.split_seed
        state.mean_tau = request.mean_tau
        split = party.split
        X_fit, y_fit = party.fitting_rows()
        if derived and ledger is None:  # its summary's scale check (a release is clipped)
            check_feature_scale(X_fit)
        fitting, validation = strategy.client_upload(
            party.head,
            party.X,
            party.y,
            party.classes,
            split,
            client_index=request.client_index,
            ledger=ledger,
        )
        if not request.validation_statistics:
            validation = None
        if derived:  # derived afresh from this upload's (released) statistics
            shrinkage = (  # private: a function of the release alone (no fourth moments)
                fitting.oas_shrinkage(request.summary_covariance)
                if ledger is not None
                else strategy.derived_shrinkage(
                    fitting, X_fit, y_fit, covariance=request.summary_covariance
                )
            )
            state.summary = strategy.derived_summary(
                fitting,
                shrinkage,
                covariance=request.summary_covariance,
                covariance_floor=request.covariance_floor,
                client=party.label,
            )
        elif ledger is not None:
            if strategy.uploads_statistics:  # the summary of the released moments
                summary = ledger.result(party.head.private_release).summary(
                    covariance=request.summary_covariance,
                    covariance_floor=request.covariance_floor,
                    client=party.label,
                )
            else:  # a head training locally: the summary is a release of its own
                summary = released_summary(party, ledger, request.covariance_floor)
            state.summary = as_decoded(summary, request.summary_dtype)
        elif state.summary is None:
            state.summary = as_decoded(party.summarise(), request.summary_dtype)
        return Upload(
            None if derived else state.summary,
            n_fit=y_fit.shape[0],
            n_validation=0 if split is None else split[1].shape[0],
            n_test=party.n_test,
            statistics=fitting,
            validation=validation,
            class_counts=(
                None
                if not request.class_counts
                else class_counts(party.y, party.classes)
                if ledger is None
                else fitting.class_counts()  # released: post-processing of the statistics
                if fitting is not None
                else released_class_counts(party, ledger)
            ),
            shrinkage=state.summary.shrinkage if derived else None,
            label=party.label if derived else None,
        )

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
        if counts not in (0, 1):
            raise MessageFormatError(f"class-counts must be 0 or 1, got {counts}")
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
        privacy, releases, shares = None, (), ()
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
            values["summary"] = reply.summary.to_bytes(request.summary_dtype or "float64")
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
        return payload

    def decode_reply(
        self, payload: ReceivedPayload, request: UploadRequest, wire: ServerWire
    ) -> Upload:
        replies, rejected = self.decode_replies({0: payload}, {0: request}, wire)
        if rejected:
            raise MessageFormatError(rejected[0])
        return replies[0]

    def label(self, reply: Upload) -> int | str | None:
        return reply.client_label

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
                header = _read_header(payload, C)
                if header.summary is None:  # derived from the statistics: their dimension
                    dimension = header.dimension
                    if not 1 <= dimension <= wire.max_dimension:
                        raise StatisticsFormatError(f"dimension {dimension} is out of range")
                else:  # its header's: no summary is decoded before the run's dimension is known
                    dimension = summary_dimension(header.summary, max_dimension=wire.max_dimension)
            except WireFormatError as exc:
                rejected[node] = str(exc)
                continue
            headers[node] = (dimension, header)
        dims = Counter(dimension for dimension, _ in headers.values())
        m = wire.n_features or (max(dims, key=lambda d: (dims[d], -d)) if dims else 0)
        wire.dimension = m
        head = wire.head
        cap = head.strategy.max_upload_bytes(head, C, m)
        replies = {}
        for node, (dimension, header) in headers.items():
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
                    else GaussianSummary.from_bytes(
                        header.summary, expected_dimension=m, max_dimension=wire.max_dimension
                    )
                )
                if header.n_fit < 1:  # the summary's count is tied to it by the check
                    raise StatisticsFormatError(f"fitting part of {header.n_fit} rows")
                parts = []
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
            except WireFormatError as exc:
                rejected[node] = str(exc)
                continue
            replies[node] = Upload(
                summary,
                header.n_fit,
                header.n_test,
                *parts,
                summary_bytes=8 if summary is None else len(header.summary),  # or its shrinkage
                class_counts=header.class_counts,
                shrinkage=header.shrinkage,
                label=header.label,
                n_validation=header.n_validation,
            )
        return replies, rejected


STAGE = UploadStage()
