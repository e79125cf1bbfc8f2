"""The server's account of a private run: the plan it announces and what each client spent."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from ..accounting import releases_at

if TYPE_CHECKING:
    from ..accounting import PrivacyBudget
    from .report import ProtocolReport

__all__ = ["RunAccount"]


class RunAccount:
    """What the server announces of a private run's budget and records of its releases.

    The server never holds a client's ledger: it announces the plan (the
    budget, the releases and their shares, which each private client checks
    against its own), records which releases it received from each client
    (spent, even where the reply is then refused) and recomputes each
    client's spending from them for the report.  Without a budget it records
    nothing.

    Parameters
    ----------
    budget : PrivacyBudget or None
        The run's budget (``None``: not a private run).
    releases : sequence of str
        The releases each client makes (:attr:`OneShotProtocol.releases`).

    Attributes
    ----------
    settings : tuple of (float, float, float) or None
        ``(epsilon, delta, clip_norm)`` as the clients check it.
    shares : tuple of float
        Each release's share of the budget, in the order of ``releases``.
    received : dict
        Per client, the releases the server received from it.
    """

    def __init__(self, budget: PrivacyBudget | None, releases: Sequence[str]) -> None:
        self.budget = budget
        self.releases: tuple[str, ...] = tuple(releases)
        self.settings = (
            None
            if budget is None
            else (float(budget.epsilon), float(budget.delta), float(budget.clip_norm))
        )
        split = budget.split(self.releases) if budget is not None else {}
        self.shares: tuple[float, ...] = tuple(split[r] for r in self.releases)
        self.received: dict[Hashable, list[str]] = {}

    @property
    def private(self) -> bool:
        """Whether the run is private (its clients release under the budget)."""
        return bool(self.releases)

    def receive(self, c: Hashable, stage: str) -> None:
        """Record that client ``c``'s reply at ``stage`` carried the plan's releases there.

        Parameters
        ----------
        c : hashable
            The client's address.
        stage : str
            The stage whose reply was received.
        """
        for release in releases_at(stage):
            if release in self.releases:
                made = self.received.setdefault(c, [])
                if release not in made:
                    made.append(release)

    def report(self, report: ProtocolReport) -> None:
        """Write the budget, its split and what each client spent into ``report``.

        Parameters
        ----------
        report : ProtocolReport
        """
        budget = self.budget
        if budget is None:
            return
        ledger = budget.ledger(self.releases, seed=0)  # accounting only: no noise drawn
        report.privacy = (
            f"every value a client sent is a release ({', '.join(self.releases)}) under its "
            f"(epsilon = {budget.epsilon:g}, delta = {budget.delta:g}) budget, rows clipped to "
            f"norm {budget.clip_norm:g}; public: each client's row counts and its membership"
        )
        report.privacy_spent = {c: ledger.spent_on(self.received.get(c, [])) for c in report.nodes}
