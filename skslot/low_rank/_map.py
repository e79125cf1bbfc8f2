"""The optimal-transport map between low-rank Gaussians: a small map on their span."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._backend import empty_like_rows, to_backend
from .._linalg import symmetrize
from ..gaussian import GaussianSummary
from ..maps import GaussianMap
from ._summary import (
    LowRankGaussianSummary,
    Summary,
    as_dense,
    common_basis,
)

__all__ = ["LowRankMap", "TransportMap", "optimal_transport_map"]


@dataclass(frozen=True)
class LowRankMap:
    """The affine map ``x -> A x + b`` with ``A = V L V^T + a (I - V V^T)``.

    Parameters
    ----------
    basis : ndarray of shape (m, d)
        Orthonormal ``V``.
    linear : ndarray of shape (d, d)
        ``L``, the map on the span of ``V``.
    complement : float
        ``a``, the map on its complement.
    offset : ndarray of shape (m,)
        ``b``.
    anchor : ndarray of shape (m,) or None, default=None
        The point whose image :meth:`geodesic` keeps on the way (the source
        mean, set by :meth:`with_mean_fraction`); ``None`` interpolates the
        map itself, ``(1 - tau) Id + tau T``.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.low_rank import LowRankGaussianSummary, LowRankMap, low_rank_barycenter
    >>> rng = np.random.default_rng(0)
    >>> clients = [LowRankGaussianSummary.from_rows(rng.normal(k, 1 + k, size=(30, 200)))
    ...            for k in range(3)]
    >>> barycenter = low_rank_barycenter(clients)
    >>> T = barycenter.maps[0].geodesic(0.6)  # client 0, 60 % of the way to the reference
    >>> T.apply(rng.normal(size=(5, 200))).shape
    (5, 200)
    """

    basis: np.ndarray
    linear: np.ndarray
    complement: float
    offset: np.ndarray
    anchor: np.ndarray | None = None

    @classmethod
    def identity(cls, dimension: int) -> LowRankMap:
        """The identity map of ``R^dimension`` (an empty basis, 1 on the complement).

        Parameters
        ----------
        dimension : int

        Returns
        -------
        map : LowRankMap
        """
        return cls(np.zeros((dimension, 0)), np.zeros((0, 0)), 1.0, np.zeros(dimension))

    @classmethod
    def optimal_transport(
        cls,
        source: LowRankGaussianSummary,
        target: LowRankGaussianSummary,
        *,
        basis: np.ndarray | None = None,
    ) -> LowRankMap:
        """The Monge map pushing ``N(source)`` onto ``N(target)``.

        On the common span of the two bases the map is the dense formula of
        :class:`skslot.GaussianMap` between the restricted covariances; on the
        complement both are scalars, and the map is ``(c_t / c_s)^{1/2}``.

        Parameters
        ----------
        source, target : LowRankGaussianSummary
            Of one dimension.
        basis : ndarray of shape (m, d), optional
            Orthonormal columns whose span holds both bases (the reference's
            basis holds every client's): saves computing the common one.

        Returns
        -------
        map : LowRankMap

        Raises
        ------
        ValueError
            If the dimensions differ.
        """
        if source.dimension != target.dimension:
            raise ValueError(
                f"dimensions differ: source {source.dimension}, target {target.dimension}"
            )
        V = common_basis([target.basis, source.basis]) if basis is None else basis
        a = float(np.sqrt(target.complement / source.complement))
        d = V.shape[1]
        if d == 0:
            L = np.zeros((0, 0))
        else:
            zero = np.zeros(d)
            L = GaussianMap.optimal_transport(
                GaussianSummary(2, zero, source.project(V)),
                GaussianSummary(2, zero, target.project(V)),
            ).linear
        return cls.between(V, L, a, source.mean, target.mean)

    @classmethod
    def between(
        cls,
        basis: np.ndarray,
        linear: np.ndarray,
        complement: float,
        source_mean: np.ndarray,
        target_mean: np.ndarray,
    ) -> LowRankMap:
        """The map with linear part ``A = V L V^T + a (I - V V^T)`` taking ``mu_s`` to ``mu_t``.

        Parameters
        ----------
        basis : ndarray of shape (m, d)
            Orthonormal ``V``.
        linear : ndarray of shape (d, d)
            ``L``.
        complement : float
            ``a``.
        source_mean, target_mean : ndarray of shape (m,)

        Returns
        -------
        map : LowRankMap
            With offset ``b = mu_t - A mu_s``.
        """
        mapped = _apply_linear(basis, linear, complement, source_mean[None, :])[0]
        return cls(basis, linear, complement, target_mean - mapped)

    def geodesic(self, tau: float) -> LowRankMap:
        """``T^tau = (1 - tau) Id + tau T`` (see :meth:`skslot.GaussianMap.geodesic`).

        For an anchored map (:meth:`with_mean_fraction`) the anchor's image stays.

        Parameters
        ----------
        tau : float

        Returns
        -------
        map : LowRankMap
        """
        L = tau * self.linear
        L.flat[:: L.shape[0] + 1] += 1.0 - tau
        a = (1.0 - tau) + tau * self.complement
        if self.anchor is None:
            return LowRankMap(self.basis, L, a, tau * self.offset)
        image = self.apply(self.anchor[None, :])[0]
        mapped = _apply_linear(self.basis, L, a, self.anchor[None, :])[0]
        return LowRankMap(self.basis, L, a, image - mapped, self.anchor)

    def with_mean_fraction(self, mean_tau: float | None, source_mean: np.ndarray) -> LowRankMap:
        """This map with the source mean moved ``mean_tau`` of the way to its image.

        See :meth:`skslot.GaussianMap.with_mean_fraction`.

        Parameters
        ----------
        mean_tau : float or None
            Fraction of the mean's transport; ``None``: this map as it is.
        source_mean : ndarray of shape (m,)

        Returns
        -------
        map : LowRankMap
            Anchored at ``source_mean`` (this map itself when ``mean_tau`` is ``None``).

        Raises
        ------
        ValueError
            If this map is anchored already, or ``source_mean`` has another shape.
        """
        if mean_tau is None:
            return self
        if self.anchor is not None:
            raise ValueError("with_mean_fraction takes a full map, and this map is anchored")
        mu = np.asarray(source_mean, dtype=np.float64)
        if mu.shape != self.offset.shape:
            raise ValueError(f"source_mean must have shape {self.offset.shape}, got {mu.shape}")
        mapped = _apply_linear(self.basis, self.linear, self.complement, mu[None, :])[0]
        image = mapped + self.offset
        return LowRankMap(
            self.basis, self.linear, self.complement, mu + mean_tau * (image - mu) - mapped, mu
        )

    def apply(self, X: Any, *, out: Any = None, chunk_size: int | None = None) -> Any:
        """``T(x)`` for each row of ``X``, in ``O(n m d)`` (no ``m x m`` matrix).

        Parameters
        ----------
        X : ndarray or torch tensor of shape (n, m)
            Computed in ``X``'s floating dtype (a tensor on its device).
        out : ndarray or tensor of shape (n, m), optional
            Written in place and returned (it may not overlap ``X``).
        chunk_size : int, optional
            Rows per block, to bound temporaries.

        Returns
        -------
        Y : ndarray or torch tensor of shape (n, m)
        """
        if out is None:
            out = empty_like_rows(X, tuple(X.shape))
        d = self.basis.shape[1]
        V = to_backend(self.basis, X, dtype=out.dtype)
        inner = to_backend(self.linear - self.complement * np.eye(d), X, dtype=out.dtype)
        b = to_backend(self.offset, X, dtype=out.dtype)
        step = max(X.shape[0] if chunk_size is None else int(chunk_size), 1)
        for start in range(0, X.shape[0], step):
            rows = slice(start, start + step)
            out[rows] = _linear_rows(V, inner, self.complement, X[rows]) + b
        return out

    def push_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Images of sums of rows: ``sum_i T(x_i) = A s + n b``, in ``O(C m d)``.

        As :meth:`skslot.GaussianMap.push_sums`, without an ``m x m`` matrix.

        Parameters
        ----------
        sums : ndarray of shape (C, m)
            Sums ``s`` of groups of rows.
        counts : ndarray of shape (C,)
            The number of rows ``n`` in each sum.

        Returns
        -------
        sums : ndarray of shape (C, m)
            The sums of the rows' images.
        """
        linear = _apply_linear(self.basis, self.linear, self.complement, sums)
        return linear + np.multiply.outer(counts, self.offset)

    def dense(self) -> GaussianMap:
        """The same map as a dense :class:`~skslot.GaussianMap` (``O(m^2)`` memory).

        Returns
        -------
        map : GaussianMap
        """
        V = self.basis
        A = V @ (self.linear - self.complement * np.eye(V.shape[1])) @ V.T
        A.flat[:: V.shape[0] + 1] += self.complement
        anchor = None if self.anchor is None else self.anchor.copy()
        return GaussianMap(symmetrize(A), self.offset.copy(), anchor)


#: A map onto a reference, in either form.
TransportMap = GaussianMap | LowRankMap


def optimal_transport_map(
    source: Summary, target: Summary, *, target_factor: np.ndarray | None = None
) -> TransportMap:
    """The Monge map from ``source`` onto ``target``, in the form of ``target``.

    A reference in factor form (every client of the federation sent one) gets
    a :class:`LowRankMap` (a dense ``source`` is taken in its full eigenbasis);
    a dense reference gets a :class:`~skslot.GaussianMap` (a factor-form
    ``source`` is formed densely).  What a client computes from the reference
    it receives, and the server from the barycenter it built.

    Parameters
    ----------
    source, target : GaussianSummary or LowRankGaussianSummary
        Of one dimension.
    target_factor : ndarray of shape (m, m), optional
        A square root ``F F^T`` of a dense target's covariance (the
        barycenter's own): saves its factorisation.

    Returns
    -------
    map : GaussianMap or LowRankMap

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.low_rank import LowRankGaussianSummary, optimal_transport_map
    >>> rng = np.random.default_rng(0)
    >>> a, b = (LowRankGaussianSummary.from_rows(rng.normal(size=(6, 30))) for _ in range(2))
    >>> T = optimal_transport_map(a, b)
    >>> type(T).__name__, bool(np.allclose(T.dense().linear,
    ...     optimal_transport_map(a.to_dense(), b.to_dense()).linear))
    ('LowRankMap', True)
    """
    if isinstance(target, LowRankGaussianSummary):
        if not isinstance(source, LowRankGaussianSummary):
            source = LowRankGaussianSummary.from_dense(source)
        return LowRankMap.optimal_transport(source, target)
    return GaussianMap.optimal_transport(as_dense(source), target, target_factor=target_factor)


def _apply_linear(V: np.ndarray, L: np.ndarray, a: float, X: np.ndarray) -> np.ndarray:
    """``X A`` for the symmetric ``A = V L V^T + a (I - V V^T)``."""
    return _linear_rows(V, L - a * np.eye(L.shape[0]), a, X)


def _linear_rows(V: Any, inner: Any, a: float, X: Any) -> Any:
    """``X A = a X + (X V) (L - a I) V^T`` given ``inner = L - a I`` (NumPy or torch)."""
    return a * X + ((X @ V) @ inner) @ V.T
