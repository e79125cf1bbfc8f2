"""The library's defaults, in one table.

:class:`~skslot.SLOTTransformer`, the heads, :class:`~skslot.protocol.OneShotProtocol`,
the Flower run config (:class:`~skslot.flower.DeploymentConfig`) and ``skslot
bench`` read their defaults from here, so they agree (a test checks it).

=========================  ====================  ==========================================
name                       value                 what it is
=========================  ====================  ==========================================
``LABEL_MIX``              ``"client"``          whose label mix a client's future rows follow
``TAU``                    ``0.6``               fraction of the covariance's transport
                                                 (the federation's label mix)
``CLIENT_MIX_TAU``         ``0.0``               the same, with each client's own label mix
``MEAN_TAU``               ``1.0``               fraction of the mean's transport
``CLIENT_TAU``             ``"label-shift"``     ``tau`` scaled by each client's label shift
``TAUS``                   ``0, 0.2, ..., 1``    the candidates of the federated choice
``VALIDATION_FRACTION``    ``0.2``               held-out share of the federated choice
``COVARIANCE_FLOOR``       ``1e-8``              smallest eigenvalue of a summary's covariance
``DELTA``                  ``1e-5``              a privacy budget's delta
``LIFETIME_DELTA``         ``1e-4``              a lifetime budget's delta (over many runs)
``FORM``                   ``"auto"``            how an aligner holds the clients' summaries
=========================  ====================  ==========================================

Why ``LABEL_MIX = "client"``: the training data of the two cases a federation
is judged by look the same, and the wrong choice costs less this way round
(docs/choosing.md gives the measured cost of each mistake).
"""

from __future__ import annotations

__all__ = [
    "CLIENT_MIX_TAU",
    "CLIENT_TAU",
    "COVARIANCE_FLOOR",
    "DELTA",
    "FORM",
    "LABEL_MIX",
    "LIFETIME_DELTA",
    "MEAN_TAU",
    "TAU",
    "TAUS",
    "VALIDATION_FRACTION",
    "default_tau",
]

#: Whose label mix a client's future rows follow: its own ("client") or the
#: federation's, every class of its domain served ("federation").
LABEL_MIX = "client"
#: Fraction of each client's covariance transport along the Bures geodesic, where the
#: federation's label mix is served.
TAU = 0.6
#: The same where each client's own label mix is served: the covariance stays (its transport
#: costs up to a point there, docs/results/label_mix.md), the mean's domain offset moves.
CLIENT_MIX_TAU = 0.0
#: Fraction of each client's mean transport.
MEAN_TAU = 1.0
#: How each client's fraction follows from ``TAU``.
CLIENT_TAU = "label-shift"
#: The candidate ``tau`` values of the federated choice.
TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
#: Share of each class of each client held out for the federated choice.
VALIDATION_FRACTION = 0.2
#: Smallest eigenvalue kept in a client's shrunk covariance, relative to its mean variance.
COVARIANCE_FLOOR = 1e-8
#: A privacy budget's delta.
DELTA = 1e-5
#: A lifetime budget's delta: the delta a client's runs may add up to, over all of them.
LIFETIME_DELTA = 1e-4
#: How an aligner holds the clients' summaries: in factor form where every client holds no
#: more rows than features (exact, without an ``m x m`` matrix), else dense.
FORM = "auto"


def default_tau(label_mix: str) -> float:
    """The default ``tau`` for a label mix: :data:`CLIENT_MIX_TAU` or :data:`TAU`.

    Parameters
    ----------
    label_mix : {"client", "federation"}

    Returns
    -------
    float
    """
    return CLIENT_MIX_TAU if label_mix == "client" else TAU
