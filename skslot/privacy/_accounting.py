"""One differential-privacy budget per client: its releases, their noise, its accountant.

A client that joins a run under a budget ``(epsilon, delta)`` makes a fixed
list of *releases* (its summary, its head's statistics, ...), each a Gaussian
mechanism on a vector whose replace-one L2 sensitivity is known.  Before the
first release the client calibrates one noise multiplier for the whole list
(:class:`PrivacyBudget.ledger`): release ``j``, given the share ``w_j`` of the
budget (``shares``, normalised over the list), is released with noise
multiplier ``z / sqrt(w_j)``, and ``z`` is the smallest for which the
composition of every release of the list is ``(epsilon, delta)``-DP.  The
composition and the calibration are done by Google's ``dp-accounting``
(privacy loss distributions, under the replace-one relation); this module
writes no composition formula of its own.  Doubling a release's share divides
its noise by ``sqrt(2)`` and raises everyone else's.

The client then enforces its budget itself (:class:`PrivacyLedger`): a release
outside the list is refused (:class:`PrivacyBudgetExceeded`), and asking for a
release again returns the first answer, so no repeated request spends the
budget twice.  ``spent()`` is the accountant's epsilon of what was released.

The unit of privacy is one row of the client's data (replace-one); the row
count ``n`` is public.

References
----------
.. [1] Doroshenko, Ghazi, Kamath, Kumar and Manurangsi, "Connect the dots:
   tighter discrete approximations of privacy loss distributions", PETS 2022
   (the accountant of ``dp-accounting``).
.. [2] Balle and Wang, "Improving the Gaussian mechanism for differential
   privacy: analytical calibration and optimal denoising", ICML 2018.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from .._param_validation import Interval, validate_parameter_constraints
from .._validation import check_in_range
from ..defaults import DELTA
from ._summary import noise_seed, warn_large_delta

if TYPE_CHECKING:  # pragma: no cover
    from dp_accounting import DpEvent, PrivacyAccountant


@dataclass(frozen=True)
class Release:
    """One value a client can release under its privacy budget, described as data.

    Parameters
    ----------
    name : str
        The release's name: its noise stream is seeded by it (:func:`release_key`).
    stage : str
        The protocol's stage whose reply carries it
        (:data:`skslot.protocol.stages.STAGES`).
    share : float
        Its default weight in a budget's split (:meth:`PrivacyBudget.split`).
    """

    name: str
    stage: str
    share: float


#: The largest epsilon a budget may have: the accountant calibrates up to it (beyond, its
#: arithmetic overflows, and no guarantee is left to calibrate anyway).
MAX_EPSILON = 1e6

#: The release plan: every release a client can make in a run, in the order of the
#: protocol, the stage that carries it and its default weight in a split: nine for those
#: that shape the model (the summary, a head's statistics or local head), one for a count.
#: Against equal shares, on the embedded digits (FedCGS and FedPFT, every release of a run
#: under one budget, with and without SLOT and label skew) these weights gain 0.5 to 11
#: points at every epsilon from 1 to 64 (docs/results/private_federation.md): a test count
#: needs little of the budget.
RELEASE_PLAN = (
    Release("summary", "upload", 9.0),
    Release("statistics", "upload", 9.0),
    Release("class_counts", "upload", 1.0),
    Release("local_head", "updates", 9.0),
    Release("evaluation", "evaluation", 1.0),
)

#: The names of the plan's releases, in the order of the protocol.
RELEASES = tuple(release.name for release in RELEASE_PLAN)

#: Each release's default weight in a split (the plan's ``share``).
DEFAULT_SHARES = {release.name: release.share for release in RELEASE_PLAN}


def releases_at(stage: str) -> tuple[str, ...]:
    """The releases the replies of ``stage`` carry, in the plan's order.

    Parameters
    ----------
    stage : str
        A stage of the protocol.

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> releases_at("upload")
    ('summary', 'statistics', 'class_counts')
    """
    return tuple(release.name for release in RELEASE_PLAN if release.stage == stage)


#: Width of the accountant's privacy-loss grid, relative to epsilon (at least
#: 1e-3): the grid is pessimistic by construction, so a coarser one only asks for
#: a little more noise (under 0.2 % at seven releases, more than a run makes), and a
#: calibration then takes about the same fraction of a second at every budget (a fixed 1e-4, the
#: library's default, takes ten seconds at epsilon 16 and grows with epsilon).
_RELATIVE_DISCRETISATION = 2.5e-4


T = TypeVar("T")


def release_key(release: str) -> int:
    """The 64-bit key a release's noise stream is seeded by, with the run's secret seed.

    A digest of the release's *name*, so a release draws the same noise
    whatever other releases the library knows or a run makes.

    Parameters
    ----------
    release : str
        The release's name.

    Returns
    -------
    int

    Examples
    --------
    >>> from skslot.privacy._accounting import release_key
    >>> release_key("summary") == release_key("summary") != release_key("statistics")
    True
    """
    return int.from_bytes(hashlib.sha256(release.encode()).digest()[:8], "little")


class PrivacyBudgetExceeded(RuntimeError):
    """A client was asked for a release its privacy budget does not cover."""


def _accounting() -> Any:
    try:
        import dp_accounting
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "a privacy budget needs the dp-accounting package: pip install 'skslot[privacy]'"
        ) from exc
    return dp_accounting


def _accountant(epsilon: float) -> PrivacyAccountant:
    """A fresh replace-one PLD accountant with a grid fitted to a budget of ``epsilon``."""
    dpa = _accounting()
    from dp_accounting.pld import pld_privacy_accountant

    return pld_privacy_accountant.PLDAccountant(
        dpa.NeighboringRelation.REPLACE_ONE,
        value_discretization_interval=_RELATIVE_DISCRETISATION * max(epsilon, 4.0),
    )


def _composition(multipliers: Sequence[float]) -> DpEvent:
    dpa = _accounting()
    return dpa.ComposedDpEvent([dpa.GaussianDpEvent(float(z)) for z in multipliers])


@lru_cache(maxsize=256)
def _calibrated_multiplier(epsilon: float, delta: float, shares: tuple[float, ...]) -> float:
    """The ``z`` for which releases of multipliers ``z / sqrt(w_j)`` compose to the budget."""
    dpa = _accounting()
    # one Gaussian of the whole budget brackets the answer: the accountant's
    # pessimism can only ask for more noise, never more than twice as much
    single = 2.0 * dpa.get_sigma_gaussian(epsilon, delta)  # replace-one: sensitivity 2
    return float(
        dpa.calibrate_dp_mechanism(
            lambda: _accountant(epsilon),
            lambda z: _composition([z / math.sqrt(w) for w in shares]),
            epsilon,
            delta,
            bracket_interval=dpa.ExplicitBracketInterval(0.5 * single, 4.0 * single),
            tol=1e-6 * single,
        )
    )


def gaussian_noise_scale(epsilon: float, delta: float, sensitivity: float) -> float:
    """The noise of one Gaussian release that is ``(epsilon, delta)``-DP on its own.

    The budget's one calibrator (a plan of this single release, as
    :meth:`PrivacyLedger.noise_scale` calibrates a plan of several): for one
    Gaussian the accountant meets the exact condition of Balle and Wang [1]_
    to a relative ``1e-7`` of the noise.

    Parameters
    ----------
    epsilon : float
        Privacy loss bound, ``> 0``.
    delta : float
        Failure probability, in ``(0, 1)``.
    sensitivity : float
        The release's replace-one L2 sensitivity, ``> 0``.

    Returns
    -------
    sigma : float
        The standard deviation of the noise on each entry.

    References
    ----------
    .. [1] Balle and Wang, "Improving the Gaussian mechanism for differential
       privacy: analytical calibration and optimal denoising", ICML 2018,
       Theorem 8.

    Examples
    --------
    >>> from skslot.privacy import gaussian_noise_scale
    >>> round(gaussian_noise_scale(1.0, 1e-5, 1.0), 4)
    3.7306
    """
    check_in_range("epsilon", epsilon, np.finfo(float).tiny, MAX_EPSILON)
    check_in_range("delta", delta, np.finfo(float).tiny, 1.0 - np.finfo(float).eps)
    check_in_range("sensitivity", sensitivity, np.finfo(float).tiny, None)
    return _calibrated_multiplier(float(epsilon), float(delta), (1.0,)) * sensitivity / 2.0


@dataclass(frozen=True)
class PrivacyBudget:
    """A client's differential-privacy budget for one run, and how it is split.

    Parameters
    ----------
    epsilon : float
        The epsilon of the client's (epsilon, delta) budget: the privacy loss
        bound (``> 0``) of everything the client releases in the run.
    delta : float, default=1e-5
        The delta of the client's (epsilon, delta) budget: the failure
        probability, in ``(0, 1)``; well below ``1 / n``.
    clip_norm : float, default=1.0
        Row-norm bound of the private releases, in the features' units: every
        row is scaled to Euclidean norm at most ``clip_norm`` before a
        release.  Choose it from public knowledge (``1`` clips nothing for
        L2-normalised features); a choice made from the data would leak.
    shares : mapping of str to float, optional
        The weight of each release (names of :data:`RELEASES`) in the split;
        normalised over the releases a run makes.  A release a run makes that
        is not named keeps its weight in :data:`DEFAULT_SHARES` (nine for the
        summary, a head's statistics or local head, one for a count).
    random_state : None, int or RandomState, default=None
        ``None`` (the only setting outside tests) draws the noise from fresh
        operating-system entropy; a seed makes it reproducible, with a
        :class:`~skslot.privacy.PrivacyWarning`.

    Examples
    --------
    >>> from skslot.privacy import PrivacyBudget
    >>> budget = PrivacyBudget(epsilon=4.0, shares={"summary": 3, "statistics": 9})
    >>> ledger = budget.ledger(["summary", "statistics"])
    >>> z_summary = ledger.noise_multiplier("summary")
    >>> round(z_summary / ledger.noise_multiplier("statistics"), 6)  # sqrt(3): a third of the share
    1.732051
    >>> ledger.spent()
    0.0
    """

    epsilon: float
    delta: float = DELTA
    clip_norm: float = 1.0
    shares: Mapping[str, float] | None = None
    random_state: Any = field(default=None, compare=False)

    #: The parameters' constraints (a deployment's run config reads them too).
    _parameter_constraints: ClassVar[dict[str, list]] = {
        "epsilon": [Interval(Real, 0.0, MAX_EPSILON, closed="right")],
        "delta": [Interval(Real, 0.0, 1.0, closed="neither")],
        "clip_norm": [Interval(Real, 0.0, None, closed="neither")],
    }

    def __post_init__(self) -> None:
        validate_parameter_constraints(
            self._parameter_constraints,
            {"epsilon": self.epsilon, "delta": self.delta, "clip_norm": self.clip_norm},
            caller_name=type(self).__name__,
        )
        for name, weight in dict(self.shares or {}).items():
            if name not in RELEASES:
                raise ValueError(f"shares names an unknown release {name!r}; known: {RELEASES}")
            if isinstance(weight, bool) or not isinstance(weight, Real) or not weight > 0:
                raise ValueError(f"the share of {name!r} must be a positive number, got {weight!r}")

    def split(self, releases: Sequence[str]) -> dict[str, float]:
        """Each release's share of the budget, summing to one.

        Parameters
        ----------
        releases : sequence of str
            The releases a run makes, each once (names of :data:`RELEASES`).

        Returns
        -------
        shares : dict of str to float
        """
        releases = list(releases)
        unknown = sorted(set(releases) - set(RELEASES))
        if unknown or len(set(releases)) != len(releases) or not releases:
            raise ValueError(
                f"releases must be distinct names of {RELEASES}, at least one; got {releases}"
            )
        weights = {r: float({**DEFAULT_SHARES, **(self.shares or {})}[r]) for r in releases}
        total = sum(weights.values())
        return {r: w / total for r, w in weights.items()}

    def ledger(
        self, releases: Sequence[str], *, client: Any = None, seed: int | None = None
    ) -> PrivacyLedger:
        """A fresh ledger for one client's run making ``releases``.

        Parameters
        ----------
        releases : sequence of str
            The releases the run makes.
        client : object, optional
            The client's label, named in warnings and errors.
        seed : int, optional
            The run's secret noise seed (a client restoring its ledger in a
            new process); ``None``: drawn now.

        Returns
        -------
        PrivacyLedger
        """
        return PrivacyLedger(self, releases, client=client, seed=seed)


class PrivacyLedger:
    """What one client has released under its budget; it refuses anything beyond.

    Built by :meth:`PrivacyBudget.ledger`.  Each release of the plan is made
    once, through :meth:`release`; a second request for it returns the first
    answer.

    Parameters
    ----------
    budget : PrivacyBudget
        The client's budget.
    releases : sequence of str
        The releases of the run.
    client : object, optional
        The client's label.
    seed : int, optional
        The run's secret noise seed; ``None``: fresh operating-system entropy
        (or, with a warning, from the budget's ``random_state``).

    Attributes
    ----------
    shares : dict of str to float
        Each release's share of the budget.
    """

    def __init__(
        self,
        budget: PrivacyBudget,
        releases: Sequence[str],
        *,
        client: Any = None,
        seed: int | None = None,
    ):
        self.budget = budget
        self.client = client
        self.shares = budget.split(releases)
        self._z = _calibrated_multiplier(
            float(budget.epsilon), float(budget.delta), tuple(self.shares.values())
        )
        #: The run's secret noise seed: each release draws its noise from it and
        #: its name, so a release made again (a retried request, in a new
        #: process) is the same release.  Kept by the client, never sent.
        self.seed = noise_seed(budget.random_state) if seed is None else int(seed)
        self._released: dict[str, Any] = {}

    def noise_multiplier(self, release: str) -> float:
        """The release's noise over half its replace-one L2 sensitivity.

        The accountant's convention (``dp_accounting.GaussianDpEvent`` under
        replace-one): a vector whose value moves by at most ``D`` in L2 norm
        when one row is replaced gets noise of standard deviation
        ``noise_multiplier * D / 2`` on every entry.

        Parameters
        ----------
        release : str
            A release of the plan.

        Returns
        -------
        float

        Raises
        ------
        PrivacyBudgetExceeded
            If ``release`` is not in the plan.
        """
        if release not in self.shares:
            raise PrivacyBudgetExceeded(
                f"client {self.client!r}: the release {release!r} is not covered by its "
                f"privacy budget (it covers {sorted(self.shares)})"
            )
        return self._z / math.sqrt(self.shares[release])

    def noise_scale(self, release: str, sensitivity: float) -> float:
        """The standard deviation of the noise on each entry of a release.

        Parameters
        ----------
        release : str
            A release of the plan.
        sensitivity : float
            Its replace-one L2 sensitivity.

        Returns
        -------
        float
        """
        return self.noise_multiplier(release) * sensitivity / 2.0

    def release(
        self,
        release: str,
        mechanism: Callable[[float, np.random.Generator], T],
        *,
        n: int,
        sensitivity: float,
    ) -> T:
        """Make one release of the plan, or return the one already made.

        Parameters
        ----------
        release : str
            A release of the plan.
        mechanism : callable
            ``mechanism(sigma, rng)``: the release with noise of standard
            deviation ``sigma`` per entry, drawn from ``rng``.
        n : int
            The client's row count (``delta`` is compared with ``1 / n``).
        sensitivity : float
            The release's replace-one L2 sensitivity.

        Returns
        -------
        object
            What ``mechanism`` returned (the first time: the same object after).

        Raises
        ------
        PrivacyBudgetExceeded
            If ``release`` is not in the plan.
        """
        if release in self._released:
            return self._released[release]
        sigma = self.noise_scale(release, sensitivity)
        warn_large_delta(self.budget.delta, n, self.client)
        rng = np.random.default_rng([self.seed, release_key(release)])
        result = mechanism(sigma, rng)
        self._released[release] = result
        return result

    def result(self, release: str) -> Any:
        """What a release made returned (the client's own copy of it).

        Parameters
        ----------
        release : str
            A release already made.

        Returns
        -------
        object

        Raises
        ------
        KeyError
            If it was not made.
        """
        if release not in self._released:
            raise KeyError(f"the release {release!r} was not made")
        return self._released[release]

    @property
    def released(self) -> tuple[str, ...]:
        """The releases made so far, in order."""
        return tuple(self._released)

    def spent(self) -> float:
        """The accountant's epsilon, at the budget's delta, of the releases made.

        Returns
        -------
        float
            At most the budget's epsilon; ``0.0`` before any release.
        """
        return self.spent_on(self.released)

    def spent_on(self, releases: Sequence[str]) -> float:
        """The accountant's epsilon, at the budget's delta, of some releases of the plan.

        What a server that knows the plan computes for the releases it received.

        Parameters
        ----------
        releases : sequence of str
            Releases of the plan, each once.

        Returns
        -------
        float
        """
        releases = list(releases)
        if not releases:
            return 0.0
        accountant = _accountant(float(self.budget.epsilon))
        accountant.compose(_composition([self.noise_multiplier(r) for r in releases]))
        return float(accountant.get_epsilon(self.budget.delta))

    def to_dict(self) -> dict[str, Any]:
        """The ledger as plain values, for a report.

        Returns
        -------
        dict
            ``epsilon``, ``delta``, ``clip_norm``, ``spent`` and, per release
            of the plan, its share, its noise multiplier and whether it was made.
        """
        return {
            "epsilon": float(self.budget.epsilon),
            "delta": float(self.budget.delta),
            "clip_norm": float(self.budget.clip_norm),
            "spent": self.spent(),
            "releases": {
                r: {
                    "share": s,
                    "noise_multiplier": self.noise_multiplier(r),
                    "released": r in self._released,
                }
                for r, s in self.shares.items()
            },
        }
