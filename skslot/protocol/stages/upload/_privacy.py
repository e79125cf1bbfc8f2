"""The upload's privacy: a private client's checks of the run, and its released summary.

A client with a privacy budget takes part only in a run under that budget
(:func:`private_run`), releases its summary and class counts through its
ledger (:func:`released_summary`, :func:`released_class_counts`); the server
recomputes a private client's shrinkage from its released statistics
(:func:`private_shrinkage_problem`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...._moments import ShiftedMoments
from ....accounting import PrivacyBudgetExceeded
from ....heads import CLASS_COUNTS_SENSITIVITY, private_class_counts
from ....lifetime import run_key
from ....low_rank import Summary
from ....privacy import SUMMARY_SENSITIVITY, private_summary

if TYPE_CHECKING:
    from ....accounting import PrivacyLedger
    from ....heads import OneShotHead
    from ...client import ClientParty
    from ._messages import Upload, UploadRequest

__all__ = [
    "private_run",
    "private_shrinkage_problem",
    "private_summary_problem",
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
    ledger = party.ledger()
    if party.lifetime is not None:  # charged once per run, before anything is released
        party.lifetime.charge(run_key(ledger.seed), float(own.epsilon), float(own.delta))
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
    expected = upload.statistics.oas_shrinkage(covariance)
    if not np.isclose(upload.shrinkage, expected, rtol=1e-12, atol=0.0):
        return (
            f"its shrinkage {upload.shrinkage!r} is not the OAS shrinkage of its released "
            f"statistics ({expected!r})"
        )
    return None


def released_summary(party: ClientParty, ledger: PrivacyLedger, covariance_floor: float) -> Summary:
    """A private client's summary of its rows, the release ``"summary"`` of its ledger.

    The rows are clipped to the budget's norm and summed about zero; the mean
    and covariance are released with the Gaussian mechanism and shrunk
    towards their trace by OAS (:func:`skslot.privacy.private_summary`).

    Parameters
    ----------
    party : ClientParty
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


def released_class_counts(party: ClientParty, ledger: PrivacyLedger) -> np.ndarray:
    """A private client's class counts, the release ``"class_counts"`` of its ledger.

    Parameters
    ----------
    party : ClientParty
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
