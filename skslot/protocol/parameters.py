"""The protocol's parameters: declared, checked and read by every stage of a run.

:class:`~skslot.protocol.OneShotProtocol` documents them and runs the stages;
a run's stages read them from the protocol itself (``RunState.settings``),
never a copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import ClassVar

import numpy as np

from .._param_validation import Interval, Options, validate_parameter_constraints
from ..defaults import (
    CLIENT_TAU,
    COVARIANCE_FLOOR,
    MEAN_TAU,
    TAUS,
    VALIDATION_FRACTION,
    default_tau,
)
from ..defence import DefenceBounds, NoDefence
from ..defence.screening import SCREENING
from ..heads import OneShotHead
from ..heads._base import ONE_SHOT_HEAD
from ..label_shift import CLIENT_TAU_RULES
from ..privacy import PrivacyBudget, private_covariance_problem, statistics_release_problem
from ..privacy.server import head_releases
from ..selection import SELECTION_RULES, Candidate, candidate_grid, check_tau_grid
from ..summary import COVARIANCES
from .stages.reference import ReferenceStep

__all__ = ["private_run_problem"]  # and ProtocolParameters, the base of OneShotProtocol


class ProtocolParameters:
    """The parameters of :class:`~skslot.protocol.OneShotProtocol`, checked once, and what
    they imply (the candidates, the label mix, the screening, the releases).

    Parameters are documented on :class:`~skslot.protocol.OneShotProtocol`.
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "head": [ONE_SHOT_HEAD],
        "tau": [Interval(Real, 0.0, 1.0, closed="both"), Options(("auto",)), None],
        "taus": ["array-like"],
        "head_grid": [Mapping, None],
        "validation_fraction": [Interval(Real, 0.0, 1.0, closed="neither")],
        "selection_rule": [Options(SELECTION_RULES)],
        "refit": ["boolean"],
        "reference": [ReferenceStep],
        "defence": [DefenceBounds, None],
        "min_clients": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "evaluate": ["boolean"],
        "client_tau": [Options(CLIENT_TAU_RULES)],
        "summary_covariance": [Options(COVARIANCES)],
        "covariance_floor": [Interval(Real, 0.0, None, closed="left")],
        "mean_tau": [Interval(Real, 0.0, 1.0, closed="both"), None],
        "screen": [Options(SCREENING)],
        "privacy": [PrivacyBudget, None],
    }

    def __init__(
        self,
        head: OneShotHead,
        *,
        tau: float | str | None = None,
        taus: Sequence[float] = TAUS,
        head_grid: Mapping[str, Sequence] | None = None,
        validation_fraction: float = VALIDATION_FRACTION,
        selection_rule: str = "one-standard-error",
        refit: bool = True,
        reference: ReferenceStep | None = None,
        defence: DefenceBounds | None = None,
        min_clients: int = 1,
        random_state: int | np.random.RandomState | None = None,
        evaluate: bool = True,
        client_tau: str = CLIENT_TAU,
        summary_covariance: str = "total",
        covariance_floor: float = COVARIANCE_FLOOR,
        mean_tau: float | None = MEAN_TAU,
        screen: str = "auto",
        privacy: PrivacyBudget | None = None,
        config: dict | None = None,
    ) -> None:
        self.head = head
        self.tau = default_tau(getattr(head, "label_mix", "federation")) if tau is None else tau
        self.taus = taus
        self.head_grid = head_grid
        self.validation_fraction = validation_fraction
        self.selection_rule = selection_rule
        self.refit = refit
        self.reference = reference if reference is not None else ReferenceStep()
        self.defence = defence
        self.min_clients = min_clients
        self.random_state = random_state
        self.evaluate = evaluate
        self.client_tau = client_tau
        self.summary_covariance = summary_covariance
        self.covariance_floor = covariance_floor
        self.mean_tau = mean_tau
        self.screen = screen
        self.privacy = privacy
        validate_parameter_constraints(self._parameter_constraints, vars(self), type(self).__name__)
        head._validate_params()
        if privacy is not None:
            why = private_run_problem(
                head, auto=self.auto, screen=screen, summary_covariance=summary_covariance
            )
            if why:
                raise ValueError(f"privacy: {why}")
        if screen == "on" and not (defence or NoDefence()).screens:
            raise ValueError(
                "screen='on' needs a defence: its thresholds are the DefenceBounds' "
                "screen_significance and screen_min_gain"
            )
        #: The candidates ``(tau, server parameters)``: the grid, or the fixed ``tau``.
        grid = check_tau_grid(taus)
        if self.auto:
            self.candidates = tuple(candidate_grid(head, grid, head_grid))
        else:
            self.candidates = (Candidate(float(self.tau)),)
        self.config = dict(config or {})

    @property
    def label_mix(self) -> str:
        """Whose label mix the run serves: the head's ``label_mix`` (:mod:`skslot.label_mix`).

        ``"client"``: each client's mean moves by its domain offset measured
        within classes, from the class sums of the head's statistics
        (FedCGS, FedPFT; with a head that uploads none, O-FedAvg, each mean
        stays where it is), and each client predicts with its own class
        counts at the evaluation (nothing sent for it).  ``"federation"``:
        each mean moves to the reference mean (the paper's) and the head
        serves the federation's mix.  A head without the parameter serves
        the federation's.
        """
        return getattr(self.head, "label_mix", "federation")

    @property
    def auto(self) -> bool:
        """Whether ``tau`` is chosen by the federation."""
        return self.tau == "auto"

    @property
    def screening(self) -> bool:
        """Whether the clients' contributions are screened by the others' validation.

        A run screens where it also reaches more than
        :data:`~skslot.defence.screening.MIN_VOTERS` clients (``RunState.screens``).
        """
        return (
            self.screen != "off" and (self.defence or NoDefence()).screens and self.privacy is None
        )

    @property
    def releases(self) -> tuple[str, ...]:
        """What each client releases under the run's privacy budget (none without one)."""
        if self.privacy is None:
            return ()
        # the releases a run may leave out (upload.OPTIONAL_RELEASES), when it does: the
        # evaluation's count, the class counts (the label-shift rule's input)
        made = {"evaluation": self.evaluate, "class_counts": self.client_tau == "label-shift"}
        return tuple(r for r in head_releases(self.head) if made.get(r, True))


def private_run_problem(
    head: OneShotHead, *, auto: bool, screen: str, summary_covariance: str
) -> str | None:
    """Why a run under a privacy budget cannot be made with these settings, or ``None``.

    The one check of a private run's settings, for the protocol and the
    deployment's configuration: a head with a private release, a fixed tau,
    no screening required, and the total covariance's summary where the
    summary is a release of its own.

    Parameters
    ----------
    head : OneShotHead
    auto : bool
        Whether ``tau`` is chosen by the federation.
    screen : str
        The ``screen`` setting.
    summary_covariance : str
        The summaries' covariance.

    Returns
    -------
    str or None
    """
    why = statistics_release_problem(head)
    if why:
        return why
    if auto:
        return (
            'a private run needs a fixed tau: tau="auto" releases every client\'s validation '
            "counts, which the budget does not cover"
        )
    if screen == "on":
        return (
            "a private run does not screen: the screening releases validation counts the "
            "budget does not cover"
        )
    why = private_covariance_problem(summary_covariance)
    if head.strategy.trains_locally and why:
        return (
            f"a private run of {type(head).__name__} releases each client's summary, and {why}: "
            "set summary_covariance to 'total'"
        )
    return None
