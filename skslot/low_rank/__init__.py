"""Low-rank Gaussian summaries: the exact server step when clients hold fewer rows than dimensions.

A client with ``n`` rows in ``m >= n`` dimensions has a sample covariance
``S`` of rank ``r <= n - 1``, so its Ledoit-Wolf covariance (see
:func:`skslot.ledoit_wolf.ledoit_wolf_summary`) is exactly::

    Sigma = U diag(e) U^T + c (I - U U^T),   e = (1 - s) lambda + c,   c = s mu (+ floor)

with ``U`` (``m x r``, orthonormal) and ``lambda`` the eigenvectors and
non-zero eigenvalues of ``S``, ``mu = tr(S) / m`` and ``s`` the shrinkage.
:class:`LowRankGaussianSummary` holds this factor form, computed from a thin QR
factorisation of the centred rows (``O(n^2 m)`` time, ``O(n m)`` memory: no
``m x m`` matrix is formed).

Every covariance of the federation then acts as its scalar ``c_k`` on the
orthogonal complement of ``V = span(U_1, ..., U_K)`` (of dimension ``d <=
sum r_k``), and the Bures-Wasserstein fixed point keeps that block structure,
so [1]_::

    Sigma_b = V B V^T + c_b (I - V V^T),   B = barycenter of V^T Sigma_k V,
    c_b = (sum_k w_k c_k^{1/2})^2

(:func:`low_rank_barycenter`, ``O(K d^3 + m d^2)`` instead of ``O(K m^3)``),
and the optimal-transport map between two such Gaussians is a ``d x d`` map on
their common span plus the scalar ``(c_t / c_s)^{1/2}`` on its complement
(:class:`LowRankMap`), applied to rows in ``O(n m d)``.  When ``d`` reaches
``m`` the span is the whole space and these are the dense formulas.

References
----------
.. [1] Agueh and Carlier, "Barycenters in the Wasserstein space", SIAM Journal
   on Mathematical Analysis, 2011 (the fixed-point characterisation whose
   invariant subspaces are used here).
"""

from ._barycenter import LowRankBarycenter, low_rank_barycenter
from ._map import LowRankMap, TransportMap, optimal_transport_map
from ._summary import (
    LowRankGaussianSummary,
    Summary,
    as_dense,
    common_basis,
    smaller_form,
    summary_from_bytes,
    summary_to_bytes,
)

__all__ = [
    "LowRankBarycenter",
    "LowRankGaussianSummary",
    "LowRankMap",
    "Summary",
    "TransportMap",
    "as_dense",
    "common_basis",
    "low_rank_barycenter",
    "optimal_transport_map",
    "smaller_form",
    "summary_from_bytes",
    "summary_to_bytes",
]
