"""Gaussian optimal transport: the W2 distance and affine maps between Gaussians.

Formulas (each written once, here):

* Bures-Wasserstein distance between ``N(mu_1, S_1)`` and ``N(mu_2, S_2)``
  [1]_::

      W2^2 = ||mu_1 - mu_2||^2 + tr S_1 + tr S_2 - 2 tr (S_2^{1/2} S_1 S_2^{1/2})^{1/2}

* Optimal-transport (Monge) map from ``N(mu_1, S_1)`` to ``N(mu_2, S_2)`` [2]_::

      T(x) = A x + b,   A = S_2^{1/2} (S_2^{1/2} S_1 S_2^{1/2})^{-1/2} S_2^{1/2},
      b = mu_2 - A mu_1

  ``A`` is the unique symmetric positive definite solution of ``A S_1 A = S_2``,
  so for *any* factor ``S_2 = F F^T`` (Cholesky, or the square root) also
  ``A = F (F^T S_1 F)^{-1/2} F^T``, and ``F^T S_1 F`` has the eigenvalues of
  ``S_2^{1/2} S_1 S_2^{1/2}``.  skslot uses the Cholesky factor: no
  eigendecomposition of ``S_2`` is needed.

* Between Gaussians whose covariances act as scalars ``c_1``, ``c_2`` on the
  orthogonal complement of the span of an orthonormal ``V`` (``d`` columns:
  the factor form of :class:`~skslot.GaussianSummary`, ``V`` the span of both
  bases), ``A`` keeps that block structure::

      A = V L V^T + (c_2 / c_1)^{1/2} (I - V V^T),   L = the map above between V^T S_1 V
                                                         and V^T S_2 V

  a ``d x d`` map plus a scalar, applied to rows in ``O(n m d)``.

* Its displacement interpolation (McCann geodesic) [3]_::

      T^tau = (1 - tau) Id + tau T,   W2(T^tau # G_1, G_2) = (1 - tau) W2(G_1, G_2)

* The same with the mean and the covariance moved by fractions of their own
  (``W2^2`` splits into a mean term and a Bures term [1]_, and each moves
  along its own geodesic)::

      T^(tau, rho)(x) = mu_1 + rho (mu_2 - mu_1) + ((1 - tau) I + tau A) (x - mu_1),
      W2^2(T^(tau, rho) # G_1, G_2) = (1 - rho)^2 ||mu_1 - mu_2||^2 + (1 - tau)^2 B^2(S_1, S_2)

  with ``B`` the Bures distance; ``rho = tau`` is ``T^tau``, ``rho = 1, tau = 0``
  moves the mean alone (every client centred on the reference mean) and
  ``rho = 0, tau = 1`` the covariance alone (CORAL-style [4]_).

* An affine map ``T(x) = A x + b`` acting on statistics of rows (what lets the
  server align a client's head statistics without seeing its rows)::

      Gaussian      N(mu, S)         ->  N(A mu + b, A S A^T)
      class sums    s_c = sum x      ->  A s_c + n_c b
      power sums    about shift c    ->  about A c + b:  A s1,  A G A^T

  (with ``z = x - c`` the power sums are ``s1 = sum z`` and ``G = sum z z^T``,
  and ``T(x) - T(c) = A z``, so no raw second moment is ever formed).

References
----------
.. [1] Bhatia, Jain and Lim, "On the Bures-Wasserstein distance between
   positive definite matrices", Expositiones Mathematicae, 2019.
.. [2] Knott and Smith, "On the optimal mapping of distributions", Journal of
   Optimization Theory and Applications, 1984.
.. [3] McCann, "A convexity principle for interacting gases", Advances in
   Mathematics, 1997.
.. [4] Sun, Feng and Saenko, "Return of frustratingly easy domain
   adaptation", AAAI 2016.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._backend import empty_like_rows, matmul_into, to_backend
from ._linalg import (
    RootInBasis,
    SymmetricEigh,
    cholesky_factor,
    common_basis,
    sym_eigh,
    symmetrize,
    trace_sqrt,
)
from ._moments import ShiftedMoments
from .gaussian import GaussianSummary

__all__ = ["GaussianMap", "bures_wasserstein_distance", "rebased_scores", "with_mean_image"]


def bures_wasserstein_distance(source: GaussianSummary, target: GaussianSummary) -> float:
    """2-Wasserstein distance between the Gaussians of two summaries.

    Parameters
    ----------
    source, target : GaussianSummary
        The two Gaussians, of the same dimension.

    Returns
    -------
    distance : float
        ``W2(N(source), N(target))``, the module docstring's formula.

    Raises
    ------
    ValueError
        If the dimensions differ.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.maps import bures_wasserstein_distance
    >>> a = GaussianSummary(2, np.zeros(2), np.eye(2))
    >>> b = GaussianSummary(2, np.array([3.0, 4.0]), 4 * np.eye(2))
    >>> round(bures_wasserstein_distance(a, b), 6)  # sqrt(25 + 2 * (2 - 1)^2)
    5.196152
    """
    _check_same_dimension(source, target)
    F = cholesky_factor(target.covariance)
    cross = trace_sqrt(F.T @ source.covariance @ F)
    diff = source.mean - target.mean
    sq = diff @ diff + source.trace + target.trace
    return float(np.sqrt(max(sq - 2.0 * cross, 0.0)))


def _check_same_dimension(a: GaussianSummary, b: GaussianSummary) -> None:
    if a.dimension != b.dimension:
        raise ValueError(f"summaries of different dimensions: {a.dimension} and {b.dimension}")


@dataclass(frozen=True, eq=False)
class GaussianMap:
    """An affine map ``x -> A x + b`` between Gaussians, dense or in factor form.

    Dense, ``A`` is ``linear`` (``m x m``).  In factor form (``basis`` given)
    ``A = V L V^T + a (I - V V^T)``: ``L = linear`` (``d x d``) on the span of
    the orthonormal ``V = basis`` and the scalar ``a = complement`` on its
    complement, applied to rows in ``O(n m d)`` without an ``m x m`` matrix
    (the maps between summaries in factor form, see the module docstring).

    Parameters
    ----------
    linear : ndarray of shape (m, m), or (d, d) in factor form
        ``A`` (symmetric positive definite for an optimal-transport map), or ``L``.
    offset : ndarray of shape (m,)
        ``b``.
    anchor : ndarray of shape (m,) or None, default=None
        A point whose image :meth:`geodesic` keeps (the source mean, for a
        map whose mean moves by a fraction of its own:
        :meth:`with_mean_fraction`); ``None``: the geodesic moves every point.
    basis : ndarray of shape (m, d) or None, default=None
        ``V``, orthonormal (factor form); ``None`` for a dense map.
    complement : float, default=1.0
        ``a``, the map on the complement of ``V``'s span (factor form).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianMap, GaussianSummary
    >>> source = GaussianSummary(10, np.zeros(2), np.diag([1.0, 4.0]))
    >>> target = GaussianSummary(10, np.ones(2), np.diag([4.0, 1.0]))
    >>> T = GaussianMap.optimal_transport(source, target)
    >>> np.round(np.diag(T.linear), 6)  # sqrt(4 / 1), sqrt(1 / 4)
    array([2. , 0.5])
    >>> np.round(np.diag(T.geodesic(0.5).linear), 6)  # half way: (1 + 2) / 2, (1 + 0.5) / 2
    array([1.5 , 0.75])
    """

    linear: np.ndarray
    offset: np.ndarray
    anchor: np.ndarray | None = None
    basis: np.ndarray | None = field(default=None, kw_only=True)
    complement: float = field(default=1.0, kw_only=True)

    @property
    def form(self) -> str:
        """``"dense"`` or ``"low-rank"`` (the factor form)."""
        return "dense" if self.basis is None else "low-rank"

    @classmethod
    def identity(cls, dimension: int, *, form: str = "dense") -> GaussianMap:
        """The map ``x -> x``.

        Parameters
        ----------
        dimension : int
            The dimension ``m`` it acts on.
        form : {"dense", "low-rank"}, default="dense"
            ``A = I``, or in factor form an empty basis and ``a = 1``.

        Returns
        -------
        map : GaussianMap
            ``A = I``, ``b = 0``.
        """
        if form == "dense":
            return cls(np.eye(dimension), np.zeros(dimension))
        return cls(np.zeros((0, 0)), np.zeros(dimension), basis=np.zeros((dimension, 0)))

    @classmethod
    def optimal_transport(
        cls,
        source: GaussianSummary,
        target: GaussianSummary,
        *,
        target_factor: np.ndarray | None = None,
        basis: np.ndarray | None = None,
    ) -> GaussianMap:
        """The Monge map pushing ``N(source)`` onto ``N(target)``, in the form of ``target``.

        A dense target gets a dense map (a factor-form ``source`` is formed
        densely); a target in factor form gets a map in factor form (a dense
        ``source`` is taken in its full eigenbasis), the dense formula on the
        span of the two bases and ``(c_t / c_s)^{1/2}`` on its complement.

        Parameters
        ----------
        source, target : GaussianSummary
            The Gaussians, of the same dimension.
        target_factor : ndarray of shape (m, m), optional
            A factor ``F`` of a dense target covariance, ``F F^T = S_t``, to reuse
            (one factorisation of the reference serves every client).
            Default: its Cholesky factor.
        basis : ndarray of shape (m, d), optional
            Orthonormal columns whose span holds both bases, for a target in
            factor form (the reference's basis holds every client's): saves
            computing the common one.

        Returns
        -------
        map : GaussianMap
            ``T(x) = A x + b`` of the module docstring.

        Raises
        ------
        ValueError
            If the dimensions differ.
        """
        _check_same_dimension(source, target)
        if target.basis is None:
            source = source.to_dense()
            F = cholesky_factor(target.covariance) if target_factor is None else target_factor
            inner = sym_eigh(F.T @ source.covariance @ F)
            return cls.from_factors(F, inner, source.mean, target.mean)
        source = source.to_low_rank()
        V = common_basis([target.basis, source.basis]) if basis is None else basis
        a = float(np.sqrt(target.complement / source.complement))
        F = cholesky_factor(target.project(V))
        inner = sym_eigh(F.T @ source.project(V) @ F)
        return cls.from_factors(F, inner, source.mean, target.mean, basis=V, complement=a)

    @classmethod
    def from_factors(
        cls,
        target_factor: np.ndarray,
        inner_eigh: SymmetricEigh | RootInBasis,
        source_mean: np.ndarray,
        target_mean: np.ndarray,
        *,
        basis: np.ndarray | None = None,
        complement: float = 1.0,
    ) -> GaussianMap:
        """Map from a factor ``F`` of ``S_t`` and the eigendecomposition of ``F^T S_s F``.

        Parameters
        ----------
        target_factor : ndarray of shape (m, m), or (d, d) in factor form
            ``F``, with ``F F^T = S_t`` (restricted to the span of ``basis``).
        inner_eigh : SymmetricEigh or RootInBasis
            The eigendecomposition of ``F^T S_s F``, or its square root in a
            basis (what the mixed-precision barycenter ends with): anything
            whose ``inv_sqrt()`` is ``(F^T S_s F)^{-1/2}`` (unused for an
            empty span, ``d = 0``).
        source_mean, target_mean : ndarray of shape (m,)
            ``mu_s`` and ``mu_t``.
        basis : ndarray of shape (m, d), optional
            ``V``, for a map in factor form.
        complement : float, default=1.0
            ``a``, the map on the complement of ``V``'s span (factor form).

        Returns
        -------
        map : GaussianMap
            ``A = F (F^T S_s F)^{-1/2} F^T`` (on the span of ``V``) and
            ``b = mu_t - A mu_s``.
        """
        A = target_factor  # an empty span's (d = 0)
        if A.size:
            A = target_factor @ inner_eigh.inv_sqrt() @ target_factor.T
            A = 0.5 * (A + A.T)
        T = cls(A, target_mean, basis=basis, complement=complement)
        return dataclasses.replace(T, offset=target_mean - T._linear_part(source_mean))

    def dense(self) -> GaussianMap:
        """This map with its ``m x m`` matrix (itself when dense; ``O(m^2)`` memory).

        Returns
        -------
        map : GaussianMap
        """
        if self.basis is None:
            return self
        V, a = self.basis, self.complement
        A = V @ (self.linear - a * np.eye(V.shape[1])) @ V.T
        A.flat[:: V.shape[0] + 1] += a
        anchor = None if self.anchor is None else self.anchor.copy()
        return GaussianMap(symmetrize(A), self.offset.copy(), anchor)

    def _linear_part(self, X: Any) -> Any:
        """``A x`` of a vector, ``X A^T`` of rows (NumPy; factor form in ``O(n m d)``)."""
        if self.basis is None:
            return self.linear @ X if X.ndim == 1 else X @ self.linear.T
        if X.ndim == 1:
            return self._linear_part(X[None, :])[0]
        inner = self.linear - self.complement * np.eye(self.linear.shape[0])
        return _factor_rows(self.basis, inner, self.complement, X)

    def geodesic(self, tau: float) -> GaussianMap:
        """``T^tau = (1 - tau) Id + tau T``, a fraction ``tau`` of the way.

        For an anchored map (:meth:`with_mean_fraction`) the linear part moves
        the same way and the anchor's image stays: the mean keeps its own
        fraction, whatever ``tau``.  Geodesics compose: ``T.geodesic(s).geodesic(t)``
        is ``T.geodesic(s * t)``.  In factor form ``L`` and ``a`` move alike.

        Parameters
        ----------
        tau : float
            Fraction of the way, ``0`` for the identity (up to the anchored
            mean), ``1`` for this map.

        Returns
        -------
        map : GaussianMap
            ``T^tau``.
        """
        L = tau * self.linear
        L.flat[:: L.shape[0] + 1] += 1.0 - tau
        a = (1.0 - tau) + tau * self.complement
        T = dataclasses.replace(self, linear=L, offset=tau * self.offset, complement=a)
        if self.anchor is None:
            return T
        image = self._linear_part(self.anchor) + self.offset
        return dataclasses.replace(T, offset=image - T._linear_part(self.anchor))

    def with_mean_fraction(self, mean_tau: float | None, source_mean: np.ndarray) -> GaussianMap:
        """This map with the source mean moved ``mean_tau`` of the way to its image.

        The module docstring's ``T^(tau, rho)`` at ``tau = 1``, ``rho =
        mean_tau``: ``x -> mu + mean_tau (T(mu) - mu) + A (x - mu)``, anchored
        at ``mu`` so that its :meth:`geodesic` moves the covariance alone.

        Parameters
        ----------
        mean_tau : float or None
            Fraction of the mean's transport; ``None``: this map as it is (its
            geodesic moves the mean by ``tau`` too, the paper's).
        source_mean : ndarray of shape (m,)
            ``mu``, the mean of the Gaussian this map transports.

        Returns
        -------
        map : GaussianMap
            The anchored map (this map itself when ``mean_tau`` is ``None``).

        Raises
        ------
        ValueError
            If this map is anchored already, or ``source_mean`` has another shape.

        Examples
        --------
        >>> import numpy as np
        >>> from skslot import GaussianMap
        >>> T = GaussianMap(np.diag([2.0, 0.5]), np.array([4.0, 0.0]))
        >>> half = T.with_mean_fraction(1.0, np.zeros(2)).geodesic(0.5)
        >>> np.diag(half.linear), half.apply(np.zeros((1, 2)))  # covariance half way, mean all
        (array([1.5 , 0.75]), array([[4., 0.]]))
        """
        if mean_tau is None:
            return self
        if self.anchor is not None:
            raise ValueError("with_mean_fraction takes a full map, and this map is anchored")
        mu = np.asarray(source_mean, dtype=np.float64)
        if mu.shape != self.offset.shape:
            raise ValueError(f"source_mean must have shape {self.offset.shape}, got {mu.shape}")
        mapped = self._linear_part(mu)
        image = mapped + self.offset
        return dataclasses.replace(self, offset=mu + mean_tau * (image - mu) - mapped, anchor=mu)

    def push(self, summary: GaussianSummary) -> GaussianSummary:
        """Image of a Gaussian: ``N(A mu + b, A S A^T)``.

        Parameters
        ----------
        summary : GaussianSummary
            The Gaussian ``N(mu, S)``.

        Returns
        -------
        image : GaussianSummary
            Its image, dense, with ``summary``'s count and client label (no shrinkage).
        """
        (mean,), (cov,) = self.push_gaussians(summary.mean[None], summary.covariance[None])
        return GaussianSummary(summary.n, mean, cov, client=summary.client)

    def push_gaussians(
        self, means: np.ndarray, covariances: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Images of a stack of Gaussians ``N(mu_j, S_j)``: ``N(A mu_j + b, A S_j A^T)``.

        Parameters
        ----------
        means : ndarray of shape (J, m)
            The means ``mu_j``.
        covariances : ndarray of shape (J, m, m)
            The covariances ``S_j``.

        Returns
        -------
        means : ndarray of shape (J, m)
            The images' means.
        covariances : ndarray of shape (J, m, m)
            The images' covariances, exactly symmetric.
        """
        A = self.dense().linear
        cov = A @ covariances @ A.T
        return means @ A.T + self.offset, 0.5 * (cov + cov.swapaxes(-1, -2))

    def push_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Images of sums of rows: ``sum_i T(x_i) = A s + n b`` for each (count, sum) pair.

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
        return self._linear_part(sums) + np.multiply.outer(counts, self.offset)

    def push_moments(self, moments: ShiftedMoments) -> ShiftedMoments:
        """Power sums of the images ``T(x_i)``, exactly, from those of the ``x_i``.

        About the shift ``T(c)``: ``s1 -> A s1`` and ``G -> A G A^T`` (the
        module docstring), so precision is kept for features with a large
        mean.  Fourth-order sums are not affine-equivariant and are refused.

        Parameters
        ----------
        moments : ShiftedMoments
            Power sums of the rows, without fourth-order sums.

        Returns
        -------
        moments : ShiftedMoments
            The power sums of their images, about the image of the shift.

        Raises
        ------
        ValueError
            If ``moments`` holds fourth-order sums.
        """
        if moments.fourth_order:
            raise ValueError("fourth-order power sums cannot be pushed through an affine map")
        A = self.dense().linear
        gram = A @ moments.gram @ A.T
        return ShiftedMoments(
            moments.n,
            A @ moments.shift + self.offset,
            A @ moments.s1,
            0.5 * (gram + gram.T),
        )

    def apply(
        self,
        X: np.ndarray,
        *,
        out: np.ndarray | None = None,
        chunk_size: int | None = None,
    ) -> np.ndarray:
        """``X A^T + b`` computed in ``X``'s floating dtype (in factor form in ``O(n m d)``).

        Parameters
        ----------
        X : ndarray or torch tensor of shape (n, m)
            A tensor is transformed in torch on its device, and the result is
            a tensor there.
        out : ndarray or tensor of shape (n, m), optional
            Written in place and returned (it may not overlap ``X``).
        chunk_size : int, optional
            Rows per block, to bound temporaries (or stream a memory map).

        Returns
        -------
        X_mapped : ndarray or torch tensor of shape (n, m)
            The images of the rows (``out`` when given).
        """
        if out is None:
            out = empty_like_rows(X, tuple(X.shape))
        a = self.complement
        if self.basis is None:
            At = to_backend(self.linear.T, X, dtype=out.dtype)
        else:
            V = to_backend(self.basis, X, dtype=out.dtype)
            inner = self.linear - a * np.eye(self.linear.shape[0])
            inner = to_backend(inner, X, dtype=out.dtype)
        b = to_backend(self.offset, X, dtype=out.dtype)
        step = max(X.shape[0] if chunk_size is None else int(chunk_size), 1)
        for start in range(0, X.shape[0], step):
            rows = slice(start, start + step)
            if self.basis is None:
                matmul_into(X[rows], At, out[rows])
                out[rows] += b
            else:
                out[rows] = _factor_rows(V, inner, a, X[rows]) + b
        return out


def _factor_rows(V: Any, inner: Any, a: float, X: Any) -> Any:
    """``X A = a X + (X V) (L - a I) V^T`` for the symmetric ``A`` of a map in factor form,
    given ``inner = L - a I`` (NumPy or torch)."""
    return a * X + ((X @ V) @ inner) @ V.T


def with_mean_image(ot_map: GaussianMap, mean: np.ndarray, image: np.ndarray) -> GaussianMap:
    """``ot_map`` with its offset changed so that it sends ``mean`` to ``image``.

    The linear part, hence the covariance's transport, is unchanged: what
    :mod:`skslot.label_mix` uses to move a client's mean by its domain
    offset instead of onto the reference mean.

    Parameters
    ----------
    ot_map : GaussianMap
        A full (unanchored) map.
    mean, image : ndarray of shape (m,)

    Returns
    -------
    GaussianMap
        Of ``ot_map``'s form.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.maps import GaussianMap, with_mean_image
    >>> T = with_mean_image(GaussianMap(2 * np.eye(2), np.ones(2)), np.zeros(2), np.full(2, 5.0))
    >>> T.apply(np.zeros((1, 2))), T.linear[0, 0]
    (array([[5., 5.]]), np.float64(2.0))
    """
    current = ot_map.apply(np.asarray(mean, dtype=np.float64)[None, :])[0]
    return dataclasses.replace(ot_map, offset=ot_map.offset + (image - current))


def rebased_scores(
    coef: np.ndarray, intercept: np.ndarray, source: GaussianMap, target: GaussianMap
) -> tuple[np.ndarray, np.ndarray]:
    """Linear scores of rows mapped by ``source``, as scores of the same rows mapped by ``target``.

    A score ``W z + b`` of ``z = A x + c`` is, as a function of the unmapped
    row ``x``, the score ``W' z' + b'`` of ``z' = A' x + c'`` with

    ``W' = W A A'^{-1}``,  ``b' = b + W c - W' c'``:

    every row scores the same under either form.  Where the two maps differ
    by a translation alone (``A = A'``), ``W' = W`` and the intercept takes up
    the shift, which is what a head with an unpenalised intercept trained on
    the translated rows becomes (its loss is the same function of ``W`` and
    of the shifted intercept).

    Parameters
    ----------
    coef : ndarray of shape (C, m)
        ``W``.
    intercept : ndarray of shape (C,)
        ``b``.
    source, target : GaussianMap
        The map the rows were scored after, and the one they will be (its
        linear part invertible: an optimal-transport map's, or a fraction of
        it, is symmetric positive definite).

    Returns
    -------
    coef, intercept : ndarray
        ``W'`` and ``b'``.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.maps import GaussianMap, rebased_scores
    >>> source = GaussianMap(np.diag([2.0, 1.0]), np.array([1.0, 0.0]))
    >>> target = GaussianMap(np.eye(2), np.array([0.0, 3.0]))
    >>> W, b = np.array([[1.0, -1.0]]), np.array([0.5])
    >>> W2, b2 = rebased_scores(W, b, source, target)
    >>> x = np.array([[1.0, 2.0]])
    >>> source.apply(x) @ W.T + b, target.apply(x) @ W2.T + b2
    (array([[1.5]]), array([[1.5]]))
    """
    source, target = source.dense(), target.dense()
    # W' = W A A'^{-1}, solved as A'^T W'^T = (W A)^T
    moved = np.linalg.solve(target.linear.T, (coef @ source.linear).T).T
    return moved, intercept + coef @ source.offset - moved @ target.offset
