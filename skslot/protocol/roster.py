"""The run's roster: which clients are in, and what the server holds about each."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import spawn_seeds
from ..gaussian import GaussianSummary
from .report import ProtocolReport, ProtocolRunError

if TYPE_CHECKING:
    from .stages.upload._messages import Upload

__all__ = ["Member", "Roster", "order_key", "split_seeds"]


def order_key(address: Hashable) -> tuple:
    """Clients in a stable order: by address, integers before strings.

    Parameters
    ----------
    address : hashable

    Returns
    -------
    tuple
    """
    return (isinstance(address, str), address)


def split_seeds(parties: Sequence[Hashable], random_state: Any) -> dict[Hashable, int]:
    """Each client's seed of its validation split: the run's ``k``-th for the ``k``-th client.

    Parameters
    ----------
    parties : sequence of addresses
    random_state : int, RandomState or None

    Returns
    -------
    dict of address to int
    """
    order = sorted(parties, key=order_key)
    return dict(zip(order, spawn_seeds(random_state, len(order)), strict=True))


@dataclass(eq=False)
class Member:
    """What the server holds about one accepted client.

    Parameters
    ----------
    upload : Upload
        Its checked upload.
    weight : float, default=0.0
        Its weight in the reference and the heads (its rows, until capped).
    statistics, validation : object, default=None
        The head's statistics of its fitting and validation parts, as weighed.
    """

    upload: Upload
    weight: float = 0.0
    statistics: Any = None
    validation: Any = None

    @property
    def summary(self) -> GaussianSummary:
        """Its summary (sent, or derived by the server from its statistics)."""
        summary = self.upload.summary
        assert summary is not None  # an upload enters with it (Roster.enter)
        return summary


class Roster:
    """Which clients a run reaches and which are still in, with what it holds about each.

    Parameters
    ----------
    report : ProtocolReport
        The run's report: it lists the nodes and records every refusal.
    min_clients : int
        Fewest clients a stage may end with before the run fails.

    Attributes
    ----------
    clients : dict of address to Member
        The accepted clients.
    """

    def __init__(self, report: ProtocolReport, min_clients: int) -> None:
        self.report = report
        self.min_clients = min_clients
        self.clients: dict[Hashable, Member] = {}

    @property
    def parties(self) -> list:
        """Every client the transport reaches, in the run's order."""
        return sorted(self.report.nodes, key=order_key)

    @property
    def order(self) -> list:
        """The accepted clients, in the run's order."""
        return sorted(self.clients, key=order_key)

    def enter(self, c: Hashable, upload: Upload) -> None:
        """Accept client ``c`` with its checked upload (at its own weight, until weighed).

        Parameters
        ----------
        c : hashable
            The client's address.
        upload : Upload
            Its checked upload.
        """
        if upload.summary is None:  # the server derives it before (the upload's check)
            raise ValueError(f"client {c!r}'s upload enters the run without its summary")
        self.clients[c] = Member(
            upload, float(upload.summary.n), upload.statistics, upload.validation
        )

    def class_counts(self, order: Sequence[Hashable]) -> dict[Hashable, np.ndarray]:
        """The class counts of the clients in ``order``, which the run asked each for.

        Parameters
        ----------
        order : sequence of hashable
            Accepted clients.

        Returns
        -------
        dict
            Each client's class counts, in ``order``.

        Raises
        ------
        ValueError
            If a client's upload holds none (the upload's check refuses that).
        """
        counts = {c: self.clients[c].upload.class_counts for c in order}
        missing = [c for c, n in counts.items() if n is None]
        if missing:
            raise ValueError(f"the uploads of clients {missing} hold no class counts")
        return {c: n for c, n in counts.items() if n is not None}

    def reject(self, stage: str, c: Hashable, why: str) -> None:
        """Report why client ``c``'s message at ``stage`` was refused (:meth:`keep` drops it).

        Parameters
        ----------
        stage : str
            The stage whose message was refused.
        c : hashable
            The client's address.
        why : str
            The reason, as reported.
        """
        self.report.reject(stage, c, why)

    def keep(self, stage: str, accepted: Iterable[Hashable]) -> None:
        """Drop the clients not in ``accepted``; fail when fewer than ``min_clients`` remain.

        Parameters
        ----------
        stage : str
            The stage the clients completed, named in the error.
        accepted : iterable of addresses
            The clients to keep.

        Raises
        ------
        ProtocolRunError
            When fewer than ``min_clients`` clients remain; its report says why.
        """
        accepted = set(accepted)
        self.clients = {c: client for c, client in self.clients.items() if c in accepted}
        if len(self.clients) < self.min_clients:
            report = self.report
            problems = [f"{report.name(n)} missing" for n in report.missing.get(stage, [])] + [
                f"{report.name(n)} rejected: {why}"
                for n, why in report.rejected.get(stage, {}).items()
            ]
            raise ProtocolRunError(
                f"only {len(self.clients)} client(s) completed the {stage} stage, fewer than "
                f"min_clients = {self.min_clients} "
                f"({'; '.join(problems) or 'no other node'})",
                report,
            )
