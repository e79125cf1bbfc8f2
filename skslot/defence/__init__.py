"""The server's defence: what it checks of each client, and how far one client can move a run.

* The bounds (:class:`DefenceBounds`, or :class:`NoDefence` to check nothing
  beyond the wire formats): each client compared with the median client
  (summaries, counts, O-FedAvg head norms) and the weight a client that
  passed can take (:func:`capped_counts`, :func:`clipped_norms`).
* The screening (:mod:`skslot.defence.screening`): the federation's held-out
  evidence that a client's contribution hurts the others.
* The consistency of one client's messages with each other
  (:mod:`skslot.defence.consistency`): its statistics against its summary,
  its parts against each other.

The protocol runs them (:class:`~skslot.protocol.OneShotProtocol`'s
``defence``); in process they can be called on any list of summaries.
"""

from ._bounds import (
    DefenceBounds,
    NoDefence,
    capped_counts,
    clipped_norms,
    implausible_counts,
    implausible_norms,
    implausible_summaries,
    norm_ratios,
    ratios_to_median,
    summary_deviations,
)

__all__ = [
    "DefenceBounds",
    "NoDefence",
    "capped_counts",
    "clipped_norms",
    "implausible_counts",
    "implausible_norms",
    "implausible_summaries",
    "norm_ratios",
    "ratios_to_median",
    "summary_deviations",
]
