"""What a reference built from some of the clients gives each of them.

The run's reference (:meth:`skslot.protocol.state.RunState.adopt`) and the
references the screening compares against, each built without one client
(:meth:`~skslot.defence.aggregation.DefendedAggregation.screen`), are the
same computation on different sets of clients: the barycenter of their
summaries, each client's full map onto it (its mean moved to its destination
with ``label_mix="client"``) and each client's fraction of ``tau``.  An
:class:`Alignment` holds one such result and answers, for one client, the
reference it is sent and the map the server applies to its statistics.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..gaussian import GaussianSummary
from ..maps import GaussianMap

__all__ = ["Alignment"]


@dataclass(frozen=True, eq=False)
class Alignment:
    """A reference built from a set of clients, and what it gives each of them.

    Parameters
    ----------
    reference : GaussianSummary
        The barycenter of the clients' summaries.
    full_maps : mapping of address to GaussianMap
        Each client's full map onto it as the client applies it (at ``tau = 1``;
        its mean image at the client's destination where it has one; anchored at
        the client's mean, which moves by the run's ``mean_tau`` at every ``tau``,
        :meth:`~skslot.maps.GaussianMap.with_mean_fraction`, unless the map came
        anchored: a fitted transformer's).
    destinations : mapping of address to ndarray
        Each client's mean destination with ``label_mix="client"`` (empty
        otherwise).
    tau_scales : mapping of address to float
        Each client's factor of ``tau`` (``client_tau``; 1 where uniform).
    n_iter : int, default=0
        The barycenter's iterations.
    """

    reference: GaussianSummary
    full_maps: Mapping[Hashable, GaussianMap]
    destinations: Mapping[Hashable, np.ndarray] = field(default_factory=dict)
    tau_scales: Mapping[Hashable, float] = field(default_factory=dict)
    n_iter: int = 0

    def reference_for(self, c: Hashable) -> GaussianSummary:
        """The reference client ``c`` maps onto: about its own destination, where it has one.

        Parameters
        ----------
        c : hashable
            The client's address.

        Returns
        -------
        GaussianSummary
        """
        if c in self.destinations:
            return self.reference.replace(mean=self.destinations[c])
        return self.reference

    def tau_scale(self, c: Hashable) -> float:
        """Client ``c``'s factor of ``tau`` (1 where none was set).

        Parameters
        ----------
        c : hashable

        Returns
        -------
        float
        """
        return float(self.tau_scales.get(c, 1.0))

    def maps(self, order: Sequence[Hashable]) -> list[GaussianMap]:
        """Each client's map at ``tau = 1``: its full map, or that scaled by its factor of ``tau``.

        Parameters
        ----------
        order : sequence of addresses

        Returns
        -------
        list of GaussianMap
            In ``order``.
        """
        scaled = []
        for c in order:
            full, scale = self.full_maps[c], self.tau_scale(c)
            scaled.append(full if scale == 1.0 else full.geodesic(scale))
        return scaled
