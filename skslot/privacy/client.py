"""A private client: the wrapper around its stages' steps, and each value it sends a release.

A client with a privacy budget answers through :func:`private_answer`, as
Flower's ``LocalDpMod`` wraps a handler: a request outside its plan is
refused before any row is read
(:meth:`~skslot.protocol.stages.Stage.private_problem`; at the upload,
:func:`private_upload_problem`).  What its steps send is asked of
:class:`PrivateRelease`, the only code of the protocol that adds noise or
charges a ledger: the lifetime budget once per run, then each value a
release of the run's ledger or post-processing of one.
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
from ..label_shift import class_sums
from ..maps import GaussianMap
from ._heads import private_release, released_statistics
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
    "evaluation_digest",
    "map_digest",
    "private_answer",
    "private_summary_problem",
    "private_upload_problem",
]

#: Replace-one L2 sensitivity of a count of rows (replacing a row changes it by one at most).
COUNT_SENSITIVITY = 1.0


def private_answer(party: Party, step: Stage, request: Any) -> Any:
    """A private client's reply to ``request`` at ``stage``: a release of its plan, or the
    refusal.

    The stage's :meth:`~skslot.protocol.stages.Stage.private_problem` is read
    first, before any of the client's rows; a request it refuses charges
    nothing.  So is a run whose rows changed since its first release: each
    release's noise is drawn from the run's secret seed and the release's
    name, so a release made again on other rows (a node's file replaced, a
    client restored in a new process) would tell the server the exact
    difference.  A step that fails after the request was admitted answers
    with the same refusal (its error in the client's own log).

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
    stage, kept = step.name, party.state.rows_digest
    why = step.private_problem(party, request)
    if kept is not None and kept != rows_digest(party.X, party.y):
        why = "its rows changed since this run's first release (the same noise on other rows)"
    if why is not None:
        logger.warning("client %r refuses the %r request: %s", party.label, stage, why)
        raise refusal(stage)
    try:
        return step.answer(party, request)
    except Exception:
        logger.exception("client %r failed to answer the %r request", party.label, stage)
        raise refusal(stage) from None


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
        if private_release(head) is not None
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
    own, head = party.privacy, party.head
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
    releases, possible = tuple(request.releases), head_releases(head)
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
    kept = party.state.releases
    if kept and releases != kept:
        return f"releases {list(releases)}, but the run announced {list(kept)}"
    shares = own.split(releases)
    ours = [shares[r] for r in releases]
    if len(request.shares) != len(ours) or not np.allclose(
        ours, request.shares, rtol=1e-9, atol=0.0
    ):
        return f"shares {request.shares}, but the client splits its budget {shares}"
    why = party.summary_settings_problem(
        request.summary_covariance, request.covariance_floor
    ) or private_summary_problem(head, party.estimator.epsilon)
    if why or head.strategy.uploads_statistics:
        return why
    why = private_covariance_problem(request.summary_covariance)
    if why is None and request.class_counts != ("class_counts" in releases):
        why = "class counts the plan does not declare, or a plan's counts not asked for"
    return why


def _digest(*parts: np.ndarray) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in parts)).hexdigest()


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
    return _digest(*head.to_arrays().values(), np.asarray(repr(float(tau)).encode()))


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
    return _digest(aligned.linear, aligned.offset, np.asarray(part.encode()))


class PrivateRelease:
    """A client under its privacy budget: each value it sends a release of its ledger.

    Its rows are clipped before any release (no scale check); its shrinkage
    is the OAS shrinkage of its released statistics, a function of the
    release alone that the server recomputes; its summary is that of the
    released moments (a head uploading statistics) or the release
    ``"summary"`` of its own (clipped moments, the Gaussian mechanism and OAS,
    :func:`~skslot.privacy.private_summary`); its class counts those of the
    released statistics or the release ``"class_counts"``; its one local head
    is trained on rows clipped before the map, for one map; its one test
    count is noisy, for one head and ``tau``.  The stages'
    :meth:`~skslot.protocol.stages.Stage.private_problem` admitted each
    request first.  It has the methods of
    :class:`~skslot.protocol.party.ClientRelease`.

    Parameters
    ----------
    party : Party
        A client with a privacy budget.

    Attributes
    ----------
    budget : PrivacyBudget
        The party's budget when the release was made, which its ledger spends.
    """

    def __init__(self, party: Party) -> None:
        self.party = party
        self.budget = party.privacy
        self._ledger: PrivacyLedger | None = None

    @property
    def ledger(self) -> PrivacyLedger:
        """This run's ledger of the client's releases, under its privacy budget.

        Planned for the releases the upload request announced
        (``state.releases``) and seeded with the run's secret noise seed
        (drawn on first use, kept in the state), so that a client restored in
        a new process repeats, never redraws, a release.

        Raises
        ------
        RuntimeError
            If no run announced its releases.
        """
        party, state = self.party, self.party.state
        if not state.releases:
            raise RuntimeError("no upload request of this run announced its releases")
        ledger = self._ledger
        if (
            ledger is None
            or ledger.seed != state.noise_seed
            or tuple(ledger.shares) != tuple(state.releases)
        ):
            budget = self.budget
            assert budget is not None  # a private release is a private client's
            ledger = budget.ledger(state.releases, client=party.label, seed=state.noise_seed)
            state.noise_seed = ledger.seed
            self._ledger = ledger
        return ledger

    @property
    def statistics_release(self) -> StatisticsRelease:
        """The head's statistics of rows ``(X, y, classes)``, released under the ledger
        (:func:`~skslot.privacy.released_statistics`)."""
        head, ledger = self.party.head, self.ledger
        return lambda X, y, classes: released_statistics(head, X, y, classes, ledger)

    def begin(self, request: UploadRequest) -> None:
        """Take part in the run: the ledger planned, the lifetime budget charged once per run,
        before anything is released.

        Parameters
        ----------
        request : UploadRequest
            Admitted by :func:`private_upload_problem`.

        Raises
        ------
        PrivacyBudgetExceeded
            If the client's lifetime budget does not cover the run (nothing is
            charged or changed then).
        """
        party, state = self.party, self.party.state
        before = (state.releases, state.noise_seed, state.rows_digest)
        state.releases = tuple(request.releases)
        state.rows_digest = rows_digest(party.X, party.y)  # the rows every release is made of
        ledger = self.ledger
        if party.lifetime is None:
            return
        try:
            budget = ledger.budget
            party.lifetime.charge(run_key(ledger.seed), float(budget.epsilon), float(budget.delta))
        except Exception:
            state.releases, state.noise_seed, state.rows_digest = before  # nothing changed
            raise

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
        party, ledger = self.party, self.ledger
        floor, release = request.covariance_floor, private_release(party.head)
        if release is not None and party.head.strategy.uploads_statistics:
            return ledger.result(release).summary(
                covariance=request.summary_covariance, covariance_floor=floor, client=party.label
            )
        X, clip_norm = party.X, ledger.budget.clip_norm

        def mechanism(sigma: float, rng: np.random.Generator) -> GaussianSummary:
            zero = np.zeros(X.shape[1])
            moments = ShiftedMoments.from_rows(
                X, shift=zero, fourth_order=False, clip_norm=clip_norm
            )
            return private_summary(
                moments,
                clip_norm=clip_norm,
                sigma=sigma,
                rng=rng,
                covariance_floor=floor,
                client=party.label,
            )

        return ledger.release("summary", mechanism, n=X.shape[0], sensitivity=SUMMARY_SENSITIVITY)

    def class_counts(self, fitting: Any) -> np.ndarray:
        """The class counts of the released statistics, or the release ``"class_counts"``
        (noisy counts rounded onto integers adding up to the client's rows).

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
        y, classes = self.party.y, self.party.classes
        return self.ledger.release(
            "class_counts",
            lambda sigma, rng: private_class_counts(y, classes, sigma=sigma, rng=rng),
            n=y.shape[0],
            sensitivity=CLASS_COUNTS_SENSITIVITY,
        )

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

    def class_sums(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The exact class sums of the fitting rows: outside every plan, so never asked of an
        admitted request (:func:`private_upload_problem` refuses it).

        Parameters
        ----------
        X, y : ndarray
            The fitting rows and their labels.

        Returns
        -------
        counts, sums : ndarray
        """
        return class_sums(X, y, self.party.classes)

    def local_head_rows(
        self, full_map: GaussianMap, taus: Sequence[float], part: str
    ) -> Callable[[np.ndarray, np.ndarray, GaussianMap], tuple[np.ndarray, np.ndarray]]:
        """The run's one local head's rows, the map it is released for recorded
        (:func:`map_digest`).

        Each row is clipped to the budget's norm in float64, then aligned, and
        each aligned row that is not finite (a reference of the server's
        choosing can make one overflow) made the null row: each row a function
        of itself alone, so replacing one row changes one row of what the head
        is trained on (its release clips them again), and no row makes the
        step fail.

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
        clip_norm, classes = self.ledger.budget.clip_norm, party.classes

        def rows(X: np.ndarray, y: np.ndarray, aligned: GaussianMap) -> tuple:
            X = np.asarray(X, dtype=np.float64)
            norms = np.linalg.norm(X, axis=1)
            X = X * clip_factors(np.where(np.isfinite(norms), norms, np.inf), clip_norm)[:, None]
            with np.errstate(over="ignore", invalid="ignore"):
                mapped = np.asarray(aligned.apply(X), dtype=np.float64)
            return null_rows(mapped, y, classes, part="aligned training")

        return rows

    def evaluation_count(self, head: LinearScores, tau: float, count: Callable[[], int]) -> int:
        """The release ``"evaluation"``: the count plus noise, rounded into ``[0, n_test]``,
        made once per run; the same head and ``tau`` again get the same count.

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
        n_test = party.n_test
        if state.evaluation is None:

            def mechanism(sigma: float, rng: np.random.Generator) -> int:
                return int(np.clip(np.rint(count() + rng.normal(scale=sigma)), 0, n_test))

            released = self.ledger.release(
                "evaluation", mechanism, n=n_test, sensitivity=COUNT_SENSITIVITY
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
