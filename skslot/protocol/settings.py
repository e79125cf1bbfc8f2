"""What a run's stages read of the protocol: one frozen object, made once per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..accounting import PrivacyBudget
    from ..defence import DefenceBounds
    from ..heads import OneShotHead
    from ..selection import Candidate
    from .driver import OneShotProtocol
    from .stages.reference import ReferenceStep

__all__ = ["StageSettings"]


@dataclass(frozen=True)
class StageSettings:
    """A run's settings as its stages read them (:meth:`OneShotProtocol.run`).

    The driver makes it once, from the protocol's parameters and what they
    imply (the candidates, the label mix, the releases), so that no stage
    reads the protocol itself or changes what the run was started with.

    Parameters
    ----------
    head : OneShotHead
    candidates : tuple of Candidate
        The candidates ``(tau, server parameters)``.
    auto : bool
        Whether the federation chooses among them.
    label_mix : {"client", "federation"}
    client_tau : {"uniform", "label-shift"}
    mean_tau : float or None
    summary_covariance : {"total", "within"}
    covariance_floor : float
    validation_fraction : float
    selection_rule : str
    min_clients : int
    reference : ReferenceStep
    defence : DefenceBounds or None
    privacy : PrivacyBudget or None
    releases : tuple of str
        What each client releases under the budget (none without one).
    screen : {"auto", "on", "off"}
    screening : bool
        Whether the protocol screens (where enough clients can vote).
    random_state : int, RandomState or None
    config : dict or None
        The settings shown in the report.
    """

    head: OneShotHead
    candidates: tuple[Candidate, ...]
    auto: bool
    label_mix: str
    client_tau: str
    mean_tau: float | None
    summary_covariance: str
    covariance_floor: float
    validation_fraction: float
    selection_rule: str
    min_clients: int
    reference: ReferenceStep
    defence: DefenceBounds | None
    privacy: PrivacyBudget | None
    releases: tuple[str, ...]
    screen: str
    screening: bool
    random_state: Any
    config: dict | None

    @classmethod
    def of(cls, protocol: OneShotProtocol) -> StageSettings:
        """The settings of a run of ``protocol``.

        Parameters
        ----------
        protocol : OneShotProtocol

        Returns
        -------
        StageSettings
        """
        return cls(
            head=protocol.head,
            candidates=tuple(protocol.candidates),
            auto=protocol.auto,
            label_mix=protocol.label_mix,
            client_tau=protocol.client_tau,
            mean_tau=protocol.mean_tau,
            summary_covariance=protocol.summary_covariance,
            covariance_floor=protocol.covariance_floor,
            validation_fraction=protocol.validation_fraction,
            selection_rule=protocol.selection_rule,
            min_clients=protocol.min_clients,
            reference=protocol.reference,
            defence=protocol.defence,
            privacy=protocol.privacy,
            releases=protocol.releases,
            screen=protocol.screen,
            screening=protocol.screening,
            random_state=protocol.random_state,
            config=protocol.config,
        )
