"""The server's reference step: the barycenter of the summaries and every client's map."""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from ...barycenter import BuresBarycenter
from ...exceptions import SingleClientWarning
from ...gaussian import GaussianSummary
from ...maps import GaussianMap

__all__ = ["FixedReference", "Reference", "ReferenceStep"]


@dataclass(frozen=True, eq=False)
class Reference:
    """A built reference, each client's full map onto it (by address), the iterations.

    Parameters
    ----------
    reference : GaussianSummary
        The barycenter of the clients' summaries.
    maps : dict of address to GaussianMap
        Each client's full map onto ``reference`` (at ``tau = 1``).
    n_iter : int
        The barycenter's iterations.
    """

    reference: GaussianSummary
    maps: dict[Hashable, GaussianMap]
    n_iter: int


class ReferenceStep:
    """Builds the reference with a :class:`~skslot.BuresBarycenter`'s settings.

    Parameters
    ----------
    barycenter : BuresBarycenter, optional
        The settings (cloned per build; its ``weights`` are replaced by the
        clients' weights as the server accepted them, unless it says
        ``"uniform"`` or gives explicit weights).
    wire_dtype : {"float16", "float32", "float64"}, optional
        The precision the reference travels in: a reference that cannot be
        sent in it fails the step (so the server looks for the client whose
        summary broke it).
    """

    def __init__(
        self, barycenter: BuresBarycenter | None = None, *, wire_dtype: str | None = None
    ) -> None:
        self.barycenter = barycenter if barycenter is not None else BuresBarycenter()
        self.wire_dtype = wire_dtype

    def check_clients(self, clients: Sequence[Hashable]) -> None:
        """Raise ``ValueError`` if the step cannot serve these clients (any can be served here).

        Parameters
        ----------
        clients : sequence of addresses
        """

    def build(
        self,
        clients: Sequence[Hashable],
        summaries: Sequence[GaussianSummary],
        weights: Sequence,
        *,
        max_iter: int | None = None,
    ) -> Reference:
        """The barycenter of ``summaries`` (one per client address) with ``weights``.

        Parameters
        ----------
        clients : sequence of addresses
            The clients, in the order of ``summaries``.
        summaries : sequence of GaussianSummary
            One per client.
        weights : sequence of float
            The clients' weights as the server accepted them (used unless the
            barycenter's ``weights`` say otherwise).
        max_iter : int, optional
            Caps the barycenter's iterations (a probe: does the step break on
            these summaries?), without warning that it did not converge.

        Returns
        -------
        Reference
            The reference and each client's map, by address.
        """
        if len(clients) != len(summaries):
            raise ValueError(f"{len(clients)} clients for {len(summaries)} summaries")
        # the barycenter keys its maps by each summary's position, given back to its address
        labelled = [s.replace(client=k) for k, s in enumerate(summaries)]
        barycenter = clone(self.barycenter)
        if isinstance(barycenter.weights, str) and barycenter.weights == "samples":
            barycenter.set_params(weights=list(weights))
        with warnings.catch_warnings():
            if max_iter is not None:
                barycenter.set_params(max_iter=max_iter)
                warnings.simplefilter("ignore", ConvergenceWarning)
            if len(clients) == 1:  # a probe of one client's summary
                warnings.simplefilter("ignore", SingleClientWarning)
            barycenter.fit(labelled)
        if self.wire_dtype is not None:
            barycenter.reference_.smaller_bytes(self.wire_dtype)  # raises if it cannot travel
        maps = barycenter.maps()  # by position, given back to each address
        by_address = {c: maps[k] for k, c in enumerate(clients)}
        return Reference(barycenter.reference_, by_address, int(barycenter.n_iter_))


class FixedReference(ReferenceStep):
    """A reference built before the run (a fitted :class:`~skslot.SLOTTransformer`'s).

    Parameters
    ----------
    reference : GaussianSummary
        The fitted reference.
    maps : mapping of address to GaussianMap
        Each client's fitted map onto it.
    n_iter : int, default=0
        The barycenter iterations it took, for the report.
    """

    def __init__(
        self, reference: GaussianSummary, maps: Mapping[Hashable, GaussianMap], n_iter: int = 0
    ) -> None:
        self.fixed = Reference(reference, dict(maps), n_iter)

    def check_clients(self, clients: Sequence[Hashable]) -> None:
        """Raise ``ValueError`` naming the clients the fitted reference has no map for.

        Parameters
        ----------
        clients : sequence of addresses
        """
        missing = [c for c in clients if c not in self.fixed.maps]
        if missing:
            raise ValueError(f"the fitted reference has no map for clients {missing}")

    def build(self, clients, summaries, weights, *, max_iter=None):
        """The fitted reference and the maps of ``clients`` (the summaries are not used).

        Parameters
        ----------
        clients : sequence of addresses
        summaries : sequence of GaussianSummary
            Ignored.
        weights : sequence of float
            Ignored.
        max_iter : int, optional
            Ignored.

        Returns
        -------
        Reference

        Raises
        ------
        ValueError
            If the fitted reference has no map for one of ``clients``.
        """
        self.check_clients(clients)
        return replace(self.fixed, maps={c: self.fixed.maps[c] for c in clients})
