"""A private client: the wrapper around its stages' steps, its upload's checks and releases.

A client with a privacy budget answers through :func:`private_answer`: a
request outside its plan is refused before any row is read
(:meth:`~skslot.protocol.stages.Stage.private_problem`, and
:func:`changed_rows_problem`).  At the upload it answers only a request of its
plan (:func:`private_upload_problem`), is charged once per run
(:func:`private_run`) and releases its summary and class counts through its
ledger (:class:`PrivateRelease`: :func:`released_summary`,
:func:`released_class_counts`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np

from .._moments import ShiftedMoments, clip_factors
from ..gaussian import GaussianSummary
from ..heads import LinearScores
from ..maps import GaussianMap
from ._heads import released_statistics
from ._lifetime import run_key
from ._plan import logger, null_rows, refusal, rows_digest
from ._statistics import CLASS_COUNTS_SENSITIVITY, private_class_counts
from ._summary import SUMMARY_SENSITIVITY, private_covariance_problem, private_summary
from .server import OPTIONAL_RELEASES, head_releases

if TYPE_CHECKING:
    from ..heads import OneShotHead
    from ..heads._fitting import StatisticsRelease
    from ..protocol.party import Party
    from ..protocol.stages._stage import Stage
    from ..protocol.stages.upload._messages import UploadRequest
    from ._accounting import PrivacyLedger

__all__ = [
    "COUNT_SENSITIVITY",
    "PrivateRelease",
    "changed_rows_problem",
    "evaluation_digest",
    "map_digest",
    "private_aligned_rows",
    "private_answer",
    "private_count",
    "private_run",
    "private_summary_problem",
    "private_upload_problem",
    "released_class_counts",
    "released_summary",
]


def private_answer(party: Party, step: Stage, request: Any) -> Any:
    """A private client's reply to ``request`` at ``stage``: a release of its plan, or the
    refusal.

    The stage's :meth:`~skslot.protocol.stages.Stage.private_problem` is read
    first, before any of the client's rows; a request it refuses charges
    nothing.  A step that fails after the request was admitted answers with
    the same refusal (its error in the client's own log).

    Parameters
    ----------
    party : ClientParty
        A client with a privacy budget.
    step : Stage
        A stage of :data:`~skslot.protocol.stages.STAGES`.
    request : object
        The stage's request, as received.

    Returns
    -------
    object
        The stage's reply.

    Raises
    ------
    RequestRefused
        If the request is outside the plan, or its step failed.
    """
    stage = step.name
    why = changed_rows_problem(party) or step.private_problem(party, request)
    if why is not None:
        logger.warning("client %r refuses the %r request: %s", party.label, stage, why)
        raise refusal(stage)
    try:
        return step.answer(party, request)
    except Exception:
        logger.exception("client %r failed to answer the %r request", party.label, stage)
        raise refusal(stage) from None


def changed_rows_problem(party: Party) -> str | None:
    """Why a private client refuses every request of a run whose rows changed since its first
    release, or ``None``.

    Each release's noise is drawn from the run's secret seed and the
    release's name, so a release made again on other rows (a node's file
    replaced, a client restored in a new process) would reuse the noise and
    tell the server the exact difference.

    Parameters
    ----------
    party : Party

    Returns
    -------
    str or None
    """
    kept = party.state.rows_digest
    if kept is None or kept == rows_digest(party.X, party.y):
        return None
    return "its rows changed since this run's first release (the same noise on other rows)"


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
    why = party.summary_settings_problem(request.summary_covariance, request.covariance_floor)
    if why:
        return why
    if not head.strategy.uploads_statistics:
        why = private_covariance_problem(request.summary_covariance)
        if why:
            return why
        if request.class_counts != ("class_counts" in releases):
            return "class counts the plan does not declare, or a plan's counts not asked for"
    return None


def private_run(party: Party, request: UploadRequest) -> PrivacyLedger:
    """The client's ledger for a private run, its lifetime budget charged once per run.

    The request was admitted (:func:`private_upload_problem`) before; a client
    without a budget never comes here (its release,
    :class:`~skslot.protocol.client.ExactRelease`, refuses a private run).

    Parameters
    ----------
    party : Party
        A client with a privacy budget.
    request : UploadRequest

    Returns
    -------
    PrivacyLedger

    Raises
    ------
    PrivacyBudgetExceeded
        If the client's lifetime budget does not cover the run (nothing is
        charged then).
    """
    own = party.privacy
    assert own is not None  # PrivateRelease is a private client's alone
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


def released_summary(
    party: Party, ledger: PrivacyLedger, covariance_floor: float
) -> GaussianSummary:
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


#: Replace-one L2 sensitivity of a count of rows (replacing a row changes it by one at most).
COUNT_SENSITIVITY = 1.0


def private_count(count: int, total: int, sigma: float, rng: np.random.Generator) -> int:
    """``count`` plus Gaussian noise, rounded into ``[0, total]`` (post-processing).

    Parameters
    ----------
    count : int
        The exact count.
    total : int
        The public number of rows it counts among.
    sigma : float
        Standard deviation of the noise.
    rng : numpy.random.Generator

    Returns
    -------
    int
    """
    return int(np.clip(np.rint(count + rng.normal(scale=sigma)), 0, total))


def evaluation_digest(head: LinearScores, tau: float) -> str:
    """The digest of a test count's input, the head and ``tau``: a private client releases
    one count per run, for one input (the same noise on another would tell the difference).

    Parameters
    ----------
    head : LinearScores
    tau : float

    Returns
    -------
    str
    """
    return hashlib.sha256(
        b"".join(np.ascontiguousarray(a).tobytes() for a in head.to_arrays().values())
        + repr(float(tau)).encode()
    ).hexdigest()


def map_digest(aligned: GaussianMap, part: str) -> str:
    """The digest of the map and part of the rows a private local head is released for.

    Parameters
    ----------
    aligned : GaussianMap
        The client's map at the head's fraction.
    part : {"fit", "all"}

    Returns
    -------
    str
    """
    parts = (aligned.linear, aligned.offset, np.asarray(part.encode()))
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in parts)).hexdigest()


def private_aligned_rows(
    X: np.ndarray, y: np.ndarray, aligned: GaussianMap, classes: np.ndarray, clip_norm: float
) -> tuple[np.ndarray, np.ndarray]:
    """A private client's rows as its local head is trained on them: each clipped to
    ``clip_norm`` in float64, then aligned, and each aligned row that is not finite (a
    reference of the server's choosing can make one overflow) the null row.

    Each row becomes a function of itself alone, so replacing one row changes
    one row of what the head is trained on (its release clips them again),
    and no row makes the step fail.

    Parameters
    ----------
    X : ndarray of shape (n, m)
    y : ndarray of shape (n,)
    aligned : GaussianMap
        The client's map at the run's fraction.
    classes : ndarray
    clip_norm : float

    Returns
    -------
    X, y : ndarray
    """
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    X = X * clip_factors(np.where(np.isfinite(norms), norms, np.inf), clip_norm)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        mapped = np.asarray(aligned.apply(X), dtype=np.float64)
    return null_rows(mapped, y, classes, part="aligned training")


class PrivateRelease:
    """A client under its privacy budget: each value it sends a release of its ledger.

    Its rows are clipped before any release (no scale check); its shrinkage is
    the OAS shrinkage of its released statistics, a function of the release
    alone that the server recomputes; its summary is that of the released
    moments (a head uploading statistics) or the release ``"summary"`` of its
    own (a head training locally); its class counts those of the released
    statistics or the release ``"class_counts"``; its one local head is
    trained on rows clipped before the map (:func:`private_aligned_rows`), for
    one map; its one test count is noisy (:func:`private_count`), for one
    head and ``tau``.  The stages' :meth:`~skslot.protocol.stages.Stage.private_problem`
    admitted each request first.  It has the methods of
    :class:`~skslot.protocol.party.ClientRelease`.

    Parameters
    ----------
    party : Party
        A client with a privacy budget.
    """

    def __init__(self, party: Party) -> None:
        self.party = party

    @property
    def ledger(self) -> PrivacyLedger:
        """The client's ledger for the run (:meth:`~skslot.protocol.ClientParty.ledger`)."""
        return self.party.ledger()

    @property
    def statistics_release(self) -> StatisticsRelease:
        """The head's statistics of rows ``(X, y, classes)``, released under the ledger
        (:func:`~skslot.privacy.released_statistics`)."""
        head, ledger = self.party.head, self.ledger
        return lambda X, y, classes: released_statistics(head, X, y, classes, ledger)

    def begin(self, request: UploadRequest) -> None:
        """Take part in the run: the ledger planned, the lifetime budget charged once.

        Parameters
        ----------
        request : UploadRequest
        """
        private_run(self.party, request)

    def check_rows(self, X: np.ndarray) -> None:
        """Nothing to check: every row is clipped before any release.

        Parameters
        ----------
        X : ndarray of shape (n, m)
            The client's fitting rows.
        """

    def shrinkage(self, fitting: Any, X: np.ndarray, y: np.ndarray, covariance: str) -> float:
        """The OAS shrinkage of the released statistics, which the server recomputes.

        Parameters
        ----------
        fitting : ClassStatistics
            The head's released statistics of the fitting rows.
        X, y : ndarray
            The fitting rows and their labels (not read).
        covariance : {"total", "within"}

        Returns
        -------
        float
        """
        return fitting.oas_shrinkage(covariance)

    def summary(self, fitting: Any, request: UploadRequest) -> GaussianSummary:
        """The summary of the released statistics, or the release ``"summary"``.

        Parameters
        ----------
        fitting : object or None
            The head's released statistics of the fitting rows.
        request : UploadRequest

        Returns
        -------
        GaussianSummary
        """
        party = self.party
        release = party.head.private_release
        if release is not None and party.head.strategy.uploads_statistics:
            summary = self.ledger.result(release).summary(
                covariance=request.summary_covariance,
                covariance_floor=request.covariance_floor,
                client=party.label,
            )
        else:
            return released_summary(party, self.ledger, request.covariance_floor)
        return summary

    def class_counts(self, fitting: Any) -> np.ndarray:
        """The class counts of the released statistics, or the release ``"class_counts"``.

        Parameters
        ----------
        fitting : object or None
            The head's released statistics of the fitting rows.

        Returns
        -------
        ndarray of int64
        """
        if fitting is not None:
            return fitting.class_counts()
        return released_class_counts(self.party, self.ledger)

    def released_counts(self, fitting: Any) -> np.ndarray | None:
        """The class counts released, where the plan releases any.

        Parameters
        ----------
        fitting : object or None
            The head's released statistics of the fitting rows.

        Returns
        -------
        ndarray of int64 or None
        """
        if fitting is not None or "class_counts" in self.ledger.shares:
            return self.class_counts(fitting)
        return None

    def local_head_rows(
        self, full_map: GaussianMap, taus: Sequence[float], part: str
    ) -> Callable[[np.ndarray, np.ndarray, GaussianMap], tuple[np.ndarray, np.ndarray]]:
        """The run's one local head's rows: clipped, then aligned (:func:`private_aligned_rows`);
        the map it is released for recorded (:func:`map_digest`).

        Parameters
        ----------
        full_map : GaussianMap
        taus : sequence of float
            The one fraction of the run's local head.
        part : {"fit", "all"}

        Returns
        -------
        callable
        """
        (tau,) = taus
        party = self.party
        party.state.local_head = map_digest(full_map.geodesic(tau), part)
        clip, classes = self.ledger.budget.clip_norm, party.classes

        def rows(X: np.ndarray, y: np.ndarray, aligned: GaussianMap) -> tuple:
            return private_aligned_rows(X, y, aligned, classes, clip)

        return rows

    def evaluation_count(self, head: LinearScores, tau: float, count: Callable[[], int]) -> int:
        """The release ``"evaluation"``: the count plus noise (:func:`private_count`), made
        once per run; the same head and ``tau`` again get the same count.

        Parameters
        ----------
        head : LinearScores
        tau : float
        count : callable
            ``count()``: the exact count.

        Returns
        -------
        int
        """
        party, state = self.party, self.party.state
        if state.evaluation is None:
            released = self.ledger.release(
                "evaluation",
                lambda sigma, rng: private_count(count(), party.n_test, sigma, rng),
                n=party.n_test,
                sensitivity=COUNT_SENSITIVITY,
            )
            state.evaluation = (evaluation_digest(head, tau), int(released))
        return state.evaluation[1]

    def own_mix_accuracy(self, accuracy: Callable[[], float | None]) -> float | None:
        """Nothing: the plan declares the count only (the weighted figure is not computed).

        Parameters
        ----------
        accuracy : callable

        Returns
        -------
        None
        """
        return None
