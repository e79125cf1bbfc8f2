"""The server's side of a private run: the plan it announces, its checks, what each spent.

The server never holds a client's ledger.  It announces the releases each
client makes (:func:`head_releases`, of which a run may leave out
:data:`OPTIONAL_RELEASES`) in its upload requests (:attr:`RunAccount.plan`),
recomputes a private client's shrinkage from its released statistics
(:meth:`RunAccount.shrinkage_problem`) and records which releases it received
from each client (:class:`RunAccount`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..wire import MessageFormatError
from ._accounting import RELEASES, releases_at
from ._heads import private_release

if TYPE_CHECKING:
    from ..heads import OneShotHead
    from ..protocol.report import ProtocolReport
    from ..protocol.stages.upload._messages import Upload
    from ..wire.payload import ReceivedPayload
    from ._accounting import PrivacyBudget

__all__ = [
    "OPTIONAL_RELEASES",
    "RunAccount",
    "head_releases",
    "plan_from_wire",
    "plan_to_wire",
]


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
    made = {private_release(head), "evaluation"}
    if head.strategy.trains_locally:
        made |= {"summary", "class_counts"}
    return tuple(r for r in RELEASES if r in made)


def plan_to_wire(
    privacy: tuple[float, float, float] | None, releases: Sequence[str], shares: Sequence[float]
) -> dict[str, Any]:
    """The upload request's values that announce a private run's plan (none for an exact run).

    Parameters
    ----------
    privacy : tuple of (float, float, float) or None
        The budget's ``(epsilon, delta, clip_norm)``.
    releases : sequence of str
    shares : sequence of float

    Returns
    -------
    dict
        What :func:`plan_from_wire` reads back.
    """
    if privacy is None:
        return {}
    epsilon, delta, clip_norm = map(float, privacy)
    return {
        "epsilon": epsilon,
        "delta": delta,
        "clip-norm": clip_norm,
        "releases": ",".join(releases),
        "shares": [float(w) for w in shares],
    }


def plan_from_wire(payload: ReceivedPayload) -> dict[str, Any]:
    """The plan an upload request announces, checked: the keywords ``privacy``, ``releases``
    and ``shares`` of its :class:`~skslot.protocol.stages.upload.UploadRequest` (none for an
    exact run).

    Parameters
    ----------
    payload : ReceivedPayload
        The request as received.

    Returns
    -------
    dict

    Raises
    ------
    MessageFormatError
        If a release is unknown, or the shares do not match the releases.
    """
    epsilon = payload.optional("epsilon", (float, int))
    if epsilon is None:
        return {}
    releases = tuple(payload.value("releases", str).split(","))
    unknown = sorted(set(releases) - set(RELEASES))
    if unknown:
        raise MessageFormatError(f"releases names unknown releases {unknown}")
    shares = tuple(payload.floats("shares"))
    if len(shares) != len(releases) or not all(0.0 < w <= 1.0 for w in shares):
        raise MessageFormatError(f"{len(shares)} shares for {len(releases)} releases")
    privacy = (
        float(epsilon),
        float(payload.value("delta", (float, int))),
        float(payload.value("clip-norm", (float, int))),
    )
    return {"privacy": privacy, "releases": releases, "shares": shares}


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
    plan : dict
        The budget, the releases and their shares as an upload request
        announces them (:class:`~skslot.protocol.UploadRequest`'s ``privacy``,
        ``releases`` and ``shares``).
    received : dict
        Per client, the releases the server received from it.
    """

    def __init__(self, budget: PrivacyBudget | None, releases: Sequence[str]) -> None:
        self.budget = budget
        self.releases: tuple[str, ...] = tuple(releases)
        split = budget.split(self.releases) if budget is not None else {}
        self.plan: dict[str, Any] = {
            "privacy": None
            if budget is None
            else (float(budget.epsilon), float(budget.delta), float(budget.clip_norm)),
            "releases": self.releases,
            "shares": tuple(split[r] for r in self.releases),
        }
        self.received: dict[Hashable, list[str]] = {}

    @property
    def private(self) -> bool:
        """Whether the run is private (its clients release under the budget)."""
        return bool(self.releases)

    def shrinkage_problem(self, upload: Upload, covariance: str) -> str | None:
        """Why a private client's shrinkage is not the one its released statistics determine.

        Under privacy the client announces the OAS shrinkage of its released
        statistics (:meth:`~skslot.heads.ClassStatistics.oas_shrinkage`), a
        function of them alone, so the server recomputes it exactly; an exact
        client's (Ledoit-Wolf, of its rows) is not checked here.

        Parameters
        ----------
        upload : Upload
            An upload whose summary the server derives from its statistics.
        covariance : {"total", "within"}

        Returns
        -------
        str or None
        """
        if not self.private:
            return None
        expected = upload.statistics.oas_shrinkage(covariance)
        if upload.shrinkage is None or not np.isclose(
            upload.shrinkage, expected, rtol=1e-12, atol=0.0
        ):
            return (
                f"its shrinkage {upload.shrinkage!r} is not the OAS shrinkage of its released "
                f"statistics ({expected!r})"
            )
        return None

    def receive(self, c: Hashable, stage: str) -> None:
        """Record that client ``c``'s reply at ``stage`` carried the plan's releases there.

        Parameters
        ----------
        c : hashable
            The client's address.
        stage : str
            The stage whose reply was received.
        """
        made = self.received.setdefault(c, [])
        made += [r for r in releases_at(stage) if r in self.releases and r not in made]

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
