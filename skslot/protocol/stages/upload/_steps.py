"""Stage "upload": the client's step, the server's step and the meaning of one upload."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ....defaults import VALIDATION_FRACTION
from ....defence.consistency import (
    collapsed_spread,
    inconsistent_statistics,
    inconsistent_statistics_parts,
)
from ....privacy.client import private_upload_problem
from ....selection import validation_sizes
from ._codec import UploadCodec, as_decoded
from ._messages import Upload, UploadRequest

if TYPE_CHECKING:
    from ....defence import DefenceBounds, NoDefence
    from ....heads import OneShotHead
    from ...party import Party
    from ...state import RunState


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
        A decoded upload with its summary (sent, or derived by the server):
        its class sums are finite, their counts non-negative integers (the
        codec's checks).
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
    assert summary is not None  # check() refuses an upload without one first
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
    request: UploadRequest,
    *,
    head: OneShotHead,
    defence: DefenceBounds | NoDefence,
    n_classes: int,
    validation_fraction: float = VALIDATION_FRACTION,
) -> str | None:
    """Why an upload does not answer ``request``: its parts, statistics and summary must agree.

    The summary (sent, or derived by the server) describes the fitting rows,
    so it must count ``n_fit`` rows and, with a defence, agree with the
    fitting statistics (:func:`inconsistent_statistics`; a summary the server
    derived from them agrees by construction), and the validation statistics
    with the fitting ones (:func:`inconsistent_statistics_parts`).  What the
    request asked for, the upload must carry, and nothing else: its class
    counts (:func:`class_counts_problem`), its class sums
    (:func:`class_sums_problem`), the head's statistics, those of a validation
    part.  A validation part is held out only where the request gave a
    split's seed; the split then bounds it: each of the run's ``n_classes``
    classes holds out ``floor(fraction * n_c)`` rows, so the validation part of
    ``n`` rows lies in ``(fraction * n - C, fraction * n]``, and the class
    counts, where asked for, fix it.

    Parameters
    ----------
    upload : Upload
        A decoded upload: its types, sizes and dimension are the codec's
        (:class:`UploadCodec`), checked before anything was allocated.
    request : UploadRequest
        What the client was asked.
    head : OneShotHead
        The run's head: whether its clients upload statistics, and whether the
        server derives the summary from them.
    defence : DefenceBounds or NoDefence
        Its bounds apply to the consistency of the parts (none without a defence).
    n_classes : int
        The number of the run's classes.
    validation_fraction : float, default=0.2
        The run's share of each class held out, where it splits.

    Returns
    -------
    str or None
        Why the upload is refused, or ``None``.
    """
    summary, covariance = upload.summary, request.summary_covariance
    if summary is None:  # derived before, where the head derives it
        return "the upload carries no summary"
    if upload.n_fit != summary.n:
        return f"its summary counts {summary.n} rows, but its fitting part {upload.n_fit}"
    held, rows = upload.n_validation, upload.n_rows
    fraction = None if request.split_seed is None else validation_fraction
    if fraction is None and held != 0:
        return "this run has no validation part (a fixed tau, without screening)"
    if fraction is not None:
        expected = fraction * rows  # Python integers and floats: no wrap-around
        if not expected - n_classes <= held <= expected * (1 + 1e-12):
            return (
                f"a validation part of {held} rows of {rows}: a split at validation_fraction = "
                f"{fraction} over {n_classes} classes holds out more than "
                f"{expected - n_classes:.1f} and at most {expected:.1f}"
            )
    why = class_counts_problem(
        upload, n_classes if request.class_counts else None, fraction
    ) or class_sums_problem(upload, request.class_sums, covariance=covariance)
    if why:
        return why
    statistics, validation = upload.statistics, upload.validation
    if not head.strategy.uploads_statistics:
        if statistics is not None or validation is not None:
            return "the head trains locally: its upload carries no statistics"
        return None
    if statistics is None:
        return "the upload lacks the head's statistics"
    if not request.validation_statistics and validation is not None:
        return "the run asked for no validation statistics"
    if request.validation_statistics and (validation is None) != (held == 0):
        return f"validation statistics do not match a validation part of {held} rows"
    if not defence.checks_consistency:
        return None
    if not head.strategy.derives_summary:
        implied = statistics.implied_moments(covariance)
        why = inconsistent_statistics(
            summary,
            implied.mean,
            implied.trace,
            n_described=implied.n,
            trace_error=implied.error,
            covariance=covariance,
        )
        if why is None and covariance == "total" and implied.class_means is not None:
            why = collapsed_spread(summary, implied.class_counts, implied.class_means)
        if why:
            return f"inconsistent with its summary: {why}"
    if validation is not None:
        why = inconsistent_statistics_parts(statistics, validation, defence)
        if why:
            return f"implausible: {why}"
    return None


# -- the server's step -----------------------------------------------------------------------


def collect(run: RunState) -> None:
    """The server's step: every client's upload, its summary derived where the head does so,
    each upload checked against its request (:func:`check`), the accepted clients entered
    into the run.

    Parameters
    ----------
    run : RunState
    """
    settings, report, account = run.settings, run.report, run.account
    head, covariance = settings.head, settings.summary_covariance
    strategy = head.strategy
    seeds = run.split_seeds() if run.splits else {}
    # class sums where the statistics carry none: what each client's local heads are checked
    # against, and its domain offset measured within classes (never beside a release plan:
    # exact class sums are outside every plan)
    summing = run.checks_local_heads or (
        settings.label_mix == "client" and not strategy.uploads_statistics and not account.releases
    )
    requests = {
        c: UploadRequest(
            k,
            seeds.get(c),
            class_counts=settings.client_tau == "label-shift" or run.screens,
            class_sums=summing,
            summary_covariance=covariance,
            covariance_floor=settings.covariance_floor,
            mean_tau=settings.mean_tau,
            validation_statistics=not run.screens,  # a screened final head never merges them
            **account.plan,
        )
        for k, c in enumerate(run.roster.parties)
    }
    replies = run.exchange("upload", requests).replies
    derives = strategy.derives_summary
    formed, accepted = {}, []
    for c in run.roster.parties:
        if c not in replies:
            continue
        upload = replies[c]
        report.clients[c] = upload.client_label  # shown, never trusted
        account.receive(c, "upload")  # spent, even if the upload is refused
        if upload.summary_bytes is not None:
            report.summary_payload_bytes[c] = upload.summary_bytes
        why = form_problem(upload, derives)
        if why is None and derives:
            why = account.shrinkage_problem(upload, covariance)
        if why is None and derives:
            try:
                summary = upload.statistics.summary(
                    upload.shrinkage,
                    covariance=covariance,
                    covariance_floor=settings.covariance_floor,
                    client=upload.label,
                )
            except ValueError as exc:
                why = f"its statistics make no summary: {exc}"
            else:
                upload = replace(upload, summary=summary)
                report.clients[c] = summary.client  # the label as a summary holds it
        if why is None:
            formed[c] = upload
            # values per summary on the wire, its count among them: the shrinkage alone where
            # the server derives the summary
            report.summary_values[c] = 1 if derives else upload.summary.n_values() + 1
            why = check(
                upload,
                requests[c],
                head=head,
                defence=run.defence,
                n_classes=run.classes.shape[0],
                validation_fraction=settings.validation_fraction,
            )
        if why:
            run.roster.reject("upload", c, why)
            continue
        run.roster.enter(c, upload)
        accepted.append(c)
    dimensions = {upload.dimension for upload in formed.values()}
    if len(dimensions) > 1:  # a transport delivers uploads of one dimension
        raise ValueError(f"the transport delivered summaries of dimensions {sorted(dimensions)}")
    report.n_features = dimensions.pop() if dimensions else None
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
    private_problem = staticmethod(private_upload_problem)

    def answer(self, party: Party, request: UploadRequest) -> Upload:
        state, strategy = party.state, party.head.strategy
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
        if derived:  # derived afresh from this upload's statistics
            shrinkage = release.shrinkage(fitting, X_fit, y_fit, request.summary_covariance)
            state.summary = fitting.summary(
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
            validation=validation if request.validation_statistics else None,
            class_counts=release.class_counts(fitting) if request.class_counts else None,
            shrinkage=state.summary.shrinkage if derived else None,
            label=party.label if derived else None,
            class_sums=release.class_sums(X_fit, y_fit) if request.class_sums else None,
        )

    def label(self, reply: Upload) -> int | str | None:
        return reply.client_label


STAGE = UploadStage()
