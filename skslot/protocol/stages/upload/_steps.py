"""Stage "upload": the client's step, the server's step and the meaning of one upload."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ....defence.consistency import (
    collapsed_spread,
    inconsistent_statistics,
    inconsistent_statistics_parts,
)
from ....label_shift import class_sums
from ....privacy.client import private_summary_problem, private_upload_problem
from ....privacy.server import private_shrinkage_problem
from ....selection import validation_sizes
from ._codec import UploadCodec, as_decoded
from ._messages import Upload, UploadRequest

if TYPE_CHECKING:
    from ....defence import DefenceBounds, NoDefence
    from ...party import Party
    from ...state import RunState

__all__ = [
    "STAGE",
    "UploadStage",
    "check",
    "class_counts_problem",
    "class_sums_problem",
    "collect",
    "form_problem",
    "run_dimension",
]


# -- the server's checks ---------------------------------------------------------------------


def class_counts_problem(
    upload: Upload, n_classes: int | None, validation_fraction: float | None = None
) -> str | None:
    """Why an upload's class counts are not the ones asked for, or disagree with the rest.

    Parameters
    ----------
    upload : Upload
        A decoded upload: its class counts are ``n_classes`` non-negative
        integers (the codec's check).
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


def class_sums_problem(
    upload: Upload, asked: bool, *, covariance: str = "total", rtol: float = 1e-2
) -> str | None:
    """Why an upload's class sums are not the ones asked for, or disagree with its summary.

    A client may send none (one whose summary is private: exact class sums
    would give it away); those it sends describe the fitting rows, as the
    summary does: their
    counts add up to ``n_fit``, no class holds more fitting rows than its
    class count (where sent), their mean is the summary's (up to ``rtol``
    of the summary's scale, its transmit rounding), and the summary's
    covariance holds the scatter of their class means
    (:func:`collapsed_spread`, for a summary of the total covariance).

    Parameters
    ----------
    upload : Upload
        A decoded upload: its class sums are finite, their counts
        non-negative integers (the codec's checks).
    asked : bool
        Whether the run asked for them.
    covariance : {"total", "within"}, default="total"
        What the summary describes.
    rtol : float, default=1e-2

    Returns
    -------
    str or None
    """
    if upload.class_sums is None:  # a client whose summary is private sends none
        return None
    if not asked:
        return "class sums were not asked for"
    counts, sums = upload.class_sums
    total = sum(int(c) for c in counts)  # Python integers: no wrap-around
    if total != upload.n_fit:
        return f"its class sums count {total} rows, but its fitting part {upload.n_fit}"
    if upload.class_counts is not None and np.any(counts > upload.class_counts):
        return "its class sums count more rows of a class than its class counts"
    summary = upload.summary
    if summary is None:  # derived before, where the head derives it
        return "its class sums come without a summary"
    trace = summary.trace
    offset = float(np.linalg.norm(sums.sum(axis=0) / total - summary.mean))
    if not offset <= rtol * (np.sqrt(trace) + float(np.linalg.norm(summary.mean))):
        return (
            f"its class sums' mean lies {offset / np.sqrt(trace):.3g} standard deviations "
            "from its summary's"
        )
    if covariance != "total":  # the within-class spread does not bound the means
        return None
    held = counts > 0
    why = collapsed_spread(summary, counts[held], sums[held] / counts[held][:, None])
    return None if why is None else f"inconsistent with its class sums: {why}"


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
    dims = {d for d in (upload.dimension for upload in uploads.values()) if d is not None}
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
    class_sums: bool = False,
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
        A decoded upload: its types, sizes and dimension are the codec's
        (:class:`UploadCodec`), checked before anything was allocated.
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
    class_sums : bool, default=False
        Whether the run asked for the class sums of the fitting rows
        (:func:`~skslot.defence.consistency.class_sums_problem`).

    Returns
    -------
    str or None
        Why the upload is refused, or ``None``.
    """
    summary = upload.summary  # its types, sizes and dimension are the codec's checks
    if summary is None:  # derived before, where the head derives it
        return "the upload carries no summary"
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
    if why is None:
        why = class_sums_problem(upload, class_sums, covariance=summary_covariance)
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
        why = inconsistent_statistics_parts(upload.statistics, upload.validation, defence)
        if why:
            return f"implausible: {why}"
    return None


# -- the server's step -----------------------------------------------------------------------


def collect(run: RunState) -> None:
    """The server's step: every client's upload, its summary derived where the head does so,
    each upload checked (:func:`check`), the accepted clients entered into the run.

    Parameters
    ----------
    run : RunState
    """
    settings, report = run.settings, run.report
    parties = run.roster.parties
    seeds = run.split_seeds() if run.splits else {}
    counting = settings.client_tau == "label-shift" or run.screens
    head = settings.head
    # class sums where the statistics carry none: what each client's local heads are checked
    # against, and its domain offset measured within classes
    summing = run.checks_local_heads or (
        settings.label_mix == "client"
        and not head.strategy.uploads_statistics
        and not run.account.private
    )
    requests = {
        c: UploadRequest(
            k,
            seeds.get(c),
            class_counts=counting,
            class_sums=summing,
            summary_covariance=settings.summary_covariance,
            covariance_floor=settings.covariance_floor,
            mean_tau=settings.mean_tau,
            validation_statistics=not run.screens,  # a screened final head never merges them
            privacy=run.account.settings,
            releases=run.account.releases,
            shares=run.account.shares,
        )
        for k, c in enumerate(parties)
    }
    exchange = run.exchange("upload", requests)
    derives = head.strategy.derives_summary
    replies = {}
    for c, upload in exchange.replies.items():
        report.clients[c] = upload.client_label  # shown, never trusted
        run.account.receive(c, "upload")  # spent, even if the upload is refused
        if upload.summary_bytes is not None:
            report.summary_payload_bytes[c] = upload.summary_bytes
        why = form_problem(upload, derives)
        if why is None and derives and run.account.private:
            why = private_shrinkage_problem(upload, settings.summary_covariance)
        if why is None and derives:
            try:
                summary = head.strategy.derived_summary(
                    upload.statistics,
                    upload.shrinkage,
                    covariance=settings.summary_covariance,
                    covariance_floor=settings.covariance_floor,
                    client=upload.label,
                )
            except ValueError as exc:
                why = f"its statistics make no summary: {exc}"
            else:
                upload = replace(upload, summary=summary)
                report.clients[c] = summary.client  # the label as a summary holds it
        if why:
            run.roster.reject("upload", c, why)
            continue
        replies[c] = upload
    m = run_dimension(replies)
    report.n_features = m
    # values per summary on the wire, its count among them: the shrinkage alone where the
    # server derives the summary
    report.summary_values = {
        c: 1 if derives else upload.summary.n_values() + 1 for c, upload in replies.items()
    }
    accepted = []
    for c in parties:
        if c not in replies:
            continue
        why = check(
            replies[c],
            split=run.splits,
            uploads_statistics=head.strategy.uploads_statistics,
            defence=run.defence,
            derived=derives,
            validation_statistics=not run.screens,
            summary_covariance=settings.summary_covariance,
            n_classes=run.classes.shape[0] if counting else None,
            validation_fraction=settings.validation_fraction,
            run_classes=run.classes.shape[0],
            class_sums=summing,
        )
        if why:
            run.roster.reject("upload", c, why)
            continue
        run.roster.enter(c, replies[c])
        accepted.append(c)
    run.roster.keep("upload", accepted)


class UploadStage(UploadCodec):
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
    must be its own.  Its wire format is :class:`~skslot.protocol.stages.upload.UploadCodec`'s.
    """

    name = "upload"
    message_type = "query.upload"
    request = UploadRequest
    reply = Upload
    check = staticmethod(check)

    def private_problem(self, party: Party, request: UploadRequest) -> str | None:
        return private_upload_problem(party, request)

    def answer(self, party: Party, request: UploadRequest) -> Upload:
        state, strategy = party.state, party.head.strategy
        estimator = party.estimator
        why = private_summary_problem(party.head, estimator.epsilon)
        if why:
            raise ValueError(why)
        why = party.summary_settings_problem(request.summary_covariance, request.covariance_floor)
        if why:
            raise ValueError(why)
        derived = strategy.derives_summary
        release = party.release()
        release.begin(request)  # the run checked before the state changes
        if state.summary is not None and state.split_seed != request.split_seed:
            state.summary = None  # another split: another fitting part to summarise
        state.client_index, state.split_seed = request.client_index, request.split_seed
        state.mean_tau = request.mean_tau
        split = party.split
        X_fit, y_fit = party.fitting_rows()
        if derived:  # its summary's scale
            release.check_rows(X_fit)
        fitting, validation = strategy.client_upload(
            party.head,
            party.X,
            party.y,
            party.classes,
            split,
            client_index=request.client_index,
            released=release.statistics_release,
        )
        if not request.validation_statistics:
            validation = None
        if derived:  # derived afresh from this upload's (released) statistics
            shrinkage = release.shrinkage(fitting, X_fit, y_fit, request.summary_covariance)
            state.summary = strategy.derived_summary(
                fitting,
                shrinkage,
                covariance=request.summary_covariance,
                covariance_floor=request.covariance_floor,
                client=party.label,
            )
        elif state.summary is None:  # made once per run, kept as the server decodes it
            state.summary = as_decoded(release.summary(fitting, request), request.summary_dtype)
        released = release.released_counts(fitting)
        state.released_counts = None if released is None else tuple(int(c) for c in released)
        return Upload(
            None if derived else state.summary,
            n_fit=y_fit.shape[0],
            n_validation=0 if split is None else split[1].shape[0],
            n_test=party.n_test,
            statistics=fitting,
            validation=validation,
            class_counts=release.class_counts(fitting) if request.class_counts else None,
            shrinkage=state.summary.shrinkage if derived else None,
            label=party.label if derived else None,
            # exact class sums beside a private summary would give the summary away (a client
            # under a privacy budget refuses the request: its plan has none)
            class_sums=class_sums(X_fit, y_fit, party.classes)
            if request.class_sums and estimator.epsilon is None
            else None,
        )

    def label(self, reply: Upload) -> int | str | None:
        return reply.client_label


STAGE = UploadStage()
