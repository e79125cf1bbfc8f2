"""The upload's privacy: a private client's checks of the run, and its released summary.

A client with a privacy budget answers only an upload request of its plan
(:func:`private_upload_problem`), is charged once per run
(:func:`private_run`), releases its summary and class counts through its
ledger (:func:`released_summary`, :func:`released_class_counts`); the server
recomputes a private client's shrinkage from its released statistics
(:func:`private_shrinkage_problem`).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np

from ...._moments import ShiftedMoments
from ....accounting import RELEASES
from ....heads import CLASS_COUNTS_SENSITIVITY, private_class_counts
from ....lifetime import run_key
from ....low_rank import Summary
from ....privacy import SUMMARY_SENSITIVITY, private_covariance_problem, private_summary
from ...plan import rows_digest

if TYPE_CHECKING:
    from ....accounting import PrivacyLedger
    from ....heads import OneShotHead
    from ...party import Party
    from ._messages import Upload, UploadRequest

__all__ = [
    "OPTIONAL_RELEASES",
    "derived_settings_problem",
    "head_releases",
    "private_run",
    "private_shrinkage_problem",
    "private_summary_problem",
    "private_upload_problem",
    "released_class_counts",
    "released_summary",
]


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


def private_upload_problem(party: Party, request: UploadRequest) -> str | None:
    """Why a private client refuses an upload request, or ``None`` where the request asks for
    the releases of its plan alone.

    A client with a privacy budget takes part only in a run under that same
    budget and split, whose releases are those its head makes; it holds out
    no validation rows (their counts would be releases outside the plan),
    sends no class sums (exact sums of its rows), summarises the total
    covariance where it releases its own summary (the within-class
    summary's sensitivity is not derived), releases its class counts where,
    and only where, the plan declares them, and keeps the plan the run's
    first request announced.  Reads the request, the budget and the run's
    state, never the rows; changes nothing.

    Parameters
    ----------
    party : Party
        A client with a privacy budget.
    request : UploadRequest

    Returns
    -------
    str or None
        The reason, for the client's own log.
    """
    own = party.privacy
    if own is None:
        return "the client has no privacy budget"
    if request.privacy is None:
        return "the run asks for exact values"
    settings = (float(own.epsilon), float(own.delta), float(own.clip_norm))
    if request.privacy != settings:
        return (
            f"the run asks for (epsilon, delta, clip_norm) = {request.privacy}, the client "
            f"releases under {settings} only"
        )
    if request.split_seed is not None:
        return "a validation split: its counts are releases outside the plan"
    if request.class_sums:
        return "class sums: exact sums of its rows, outside the plan"
    head = party.head
    releases = tuple(request.releases)
    possible = head_releases(head)
    needed = set(possible) - set(OPTIONAL_RELEASES)
    if not needed <= set(releases) or not set(releases) <= set(possible):
        return (
            f"releases {list(releases)}; {type(head).__name__}'s client makes {list(possible)}, "
            f"among them {sorted(needed)}"
        )
    floor = request.covariance_floor
    if isinstance(floor, bool) or not (isinstance(floor, Real) and 0.0 <= floor < math.inf):
        return f"a covariance floor of {floor!r}"
    if len(set(releases)) != len(releases):
        return f"releases {list(releases)} name one twice"
    state = party.state
    if state.releases and releases != state.releases:
        return f"releases {list(releases)}, but the run announced {list(state.releases)}"
    shares = own.split(releases)
    ours = [shares[r] for r in releases]
    if len(request.shares) != len(ours) or not np.allclose(
        ours, request.shares, rtol=1e-9, atol=0.0
    ):
        return f"shares {request.shares}, but the client splits its budget {shares}"
    why = derived_settings_problem(party, request)
    if why:
        return why
    if not head.strategy.uploads_statistics:
        why = private_covariance_problem(request.summary_covariance)
        if why:
            return why
        if request.class_counts != ("class_counts" in releases):
            return "class counts the plan does not declare, or a plan's counts not asked for"
    return None


def derived_settings_problem(party: Party, request: UploadRequest) -> str | None:
    """Why a client of a head whose statistics determine its summary (FedCGS) refuses the
    run's summary settings: they must be its own, or it would map its rows with another
    summary than the server's.

    Parameters
    ----------
    party : Party
    request : UploadRequest

    Returns
    -------
    str or None
    """
    if not party.head.strategy.derives_summary:
        return None
    estimator = party.estimator
    own = (estimator.covariance, estimator.covariance_floor)
    if own == (request.summary_covariance, request.covariance_floor):
        return None
    return (
        f"this client summarises with covariance={own[0]!r}, covariance_floor={own[1]!r}, but "
        f"the run derives summaries with covariance={request.summary_covariance!r}, "
        f"covariance_floor={request.covariance_floor!r}: the client would map its rows with "
        "another summary than the server's"
    )


#: The releases a run of a private client may leave out (:attr:`OneShotProtocol.releases
#: <skslot.protocol.OneShotProtocol.releases>`): the label-shift rule's class counts and the
#: test count; every other release its head makes, the plan must declare.
OPTIONAL_RELEASES = ("class_counts", "evaluation")


def head_releases(head: OneShotHead) -> tuple[str, ...]:
    """The releases a private client of ``head`` can make in a run, in the plan's order.

    Its head's release (statistics, or a local head with its summary and
    class counts), and its test count.

    Parameters
    ----------
    head : OneShotHead

    Returns
    -------
    tuple of str
    """
    made = {head.private_release, "evaluation"}
    if head.strategy.trains_locally:
        made |= {"summary", "class_counts"}
    return tuple(r for r in RELEASES if r in made)


def private_run(party: Party, request: UploadRequest) -> PrivacyLedger | None:
    """The client's ledger for a private run, its lifetime budget charged once per run.

    The request was admitted (:func:`private_upload_problem`) before.

    Parameters
    ----------
    party : Party
    request : UploadRequest

    Returns
    -------
    PrivacyLedger or None
        ``None`` for a run without privacy (and a client without a budget).

    Raises
    ------
    ValueError
        If the run asks a client without a budget for private releases.
    PrivacyBudgetExceeded
        If the client's lifetime budget does not cover the run (nothing is
        charged then).
    """
    own = party.privacy
    if own is None:
        if request.privacy is not None:
            raise ValueError(
                "the run asks for private releases, but this client has no privacy budget of "
                "its own"
            )
        return None
    state = party.state
    before = (state.releases, state.noise_seed, state.rows_digest)
    state.releases = tuple(request.releases)
    state.rows_digest = rows_digest(party.X, party.y)  # the rows every release is made of
    ledger = party.ledger()
    if party.lifetime is not None:  # charged once per run, before anything is released
        try:
            party.lifetime.charge(run_key(ledger.seed), float(own.epsilon), float(own.delta))
        except Exception:
            state.releases, state.noise_seed, state.rows_digest = before  # nothing changed
            raise
    return ledger


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
    if upload.statistics is None or upload.shrinkage is None:
        return "the upload lacks the released statistics or its shrinkage"
    expected = upload.statistics.oas_shrinkage(covariance)
    if not np.isclose(upload.shrinkage, expected, rtol=1e-12, atol=0.0):
        return (
            f"its shrinkage {upload.shrinkage!r} is not the OAS shrinkage of its released "
            f"statistics ({expected!r})"
        )
    return None


def released_summary(party: Party, ledger: PrivacyLedger, covariance_floor: float) -> Summary:
    """A private client's summary of its rows, the release ``"summary"`` of its ledger.

    The rows are clipped to the budget's norm and summed about zero; the mean
    and covariance are released with the Gaussian mechanism and shrunk
    towards their trace by OAS (:func:`skslot.privacy.private_summary`).

    Parameters
    ----------
    party : Party
    ledger : PrivacyLedger
        The client's ledger for the run.
    covariance_floor : float

    Returns
    -------
    GaussianSummary
    """
    X, clip_norm = party.X, ledger.budget.clip_norm

    def release(sigma: float, rng: np.random.Generator) -> Summary:
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


def released_class_counts(party: Party, ledger: PrivacyLedger) -> np.ndarray:
    """A private client's class counts, the release ``"class_counts"`` of its ledger.

    Parameters
    ----------
    party : Party
    ledger : PrivacyLedger
        The client's ledger for the run.

    Returns
    -------
    ndarray of int64
        The noisy counts rounded onto integers adding up to the client's rows
        (:func:`~skslot.heads.private_class_counts`).
    """
    return ledger.release(
        "class_counts",
        lambda sigma, rng: private_class_counts(party.y, party.classes, sigma=sigma, rng=rng),
        n=party.y.shape[0],
        sensitivity=CLASS_COUNTS_SENSITIVITY,
    )
