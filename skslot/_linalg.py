"""Symmetric matrix functions computed from one eigendecomposition.

Every matrix square root, inverse square root and Bures trace term of the
package is computed here, from a single call to a symmetric eigensolver, so
that the two functions needed by an optimal-transport map share one
factorisation.

Every function takes NumPy arrays or torch tensors (see :mod:`skslot._backend`)
and works on stacks of matrices (leading batch axes) as well as on one
matrix; the formulas use only operators and methods both share.

For NumPy, the factorisations here use NumPy's LAPACK, the library NumPy's
matrix products use too.  NumPy and SciPy wheels each ship their own OpenBLAS;
alternating calls between the two makes their idle worker threads compete for
the cores, which made the barycenter 2 to 4 times slower at the default thread
count.  (The mixed-precision barycenter, :mod:`skslot._barycenter_mixed`,
calls SciPy's float32 ``ssyevd`` and triangular solve with SciPy's OpenBLAS
held at one thread.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ._backend import is_tensor, linalg

#: A direction of a new basis whose residual against the span so far is below
#: this norm is taken as inside the span (its part outside is round-off).
SPAN_TOL = 1e-10


class SymmetricEigh(NamedTuple):
    """Eigendecomposition ``A = V diag(w) V^T`` of a symmetric matrix (or a stack of them)."""

    eigenvalues: Any
    eigenvectors: Any

    def apply(self, func: Callable[[Any], Any]) -> Any:
        """Return the matrix function ``V diag(func(w)) V^T``."""
        V = self.eigenvectors
        return (V * func(self.eigenvalues)[..., None, :]) @ V.swapaxes(-1, -2)

    def sqrt(self) -> Any:
        """Principal square root ``A^{1/2}`` of a positive semi-definite ``A``."""
        return self.apply(lambda w: w.clip(min=0.0) ** 0.5)

    def inv_sqrt(self) -> Any:
        """Inverse square root ``A^{-1/2}`` of a positive definite ``A``."""
        smallest = float(self.eigenvalues[..., 0].min())
        if smallest <= 0.0:
            raise np.linalg.LinAlgError(
                f"matrix is not positive definite: smallest eigenvalue {smallest:.3e}"
            )
        return self.apply(lambda w: 1.0 / w**0.5)

    def weighted_sqrt_sum(self, weights: Any) -> Any:
        """``sum_k w_k A_k^{1/2}`` over a stack of positive semi-definite ``A_k``.

        Written as one product ``W W^T`` with ``W = [V_k diag(w_k^{1/2} lambda_k^{1/4})]_k``
        of shape ``(m, K m)`` (``lambda_k`` the eigenvalues of ``A_k``): half the
        flops of ``K`` separate products ``V_k D_k V_k^T``, since NumPy runs
        ``W @ W.T`` as a symmetric rank-k update.  ``weights`` are non-negative,
        of shape ``(K,)``.
        """
        V = self.eigenvectors
        K, m = V.shape[0], V.shape[-1]
        scale = weights.reshape(K, 1) ** 0.5 * self.eigenvalues.clip(min=0.0) ** 0.25
        W = (V * scale[:, None, :]).swapaxes(0, 1).reshape(m, K * m)
        return W @ W.T

    def select(self, index: int) -> SymmetricEigh:
        """The decomposition of matrix ``index`` of a stack."""
        return SymmetricEigh(self.eigenvalues[index], self.eigenvectors[index])


class RootInBasis(NamedTuple):
    """A positive definite matrix's square root held in a basis: ``A^{1/2} = V Y V^T``.

    ``V`` is orthogonal and ``Y`` symmetric positive definite, nearly
    diagonal: the state the mixed-precision barycenter ends in
    (:mod:`skslot._barycenter_mixed`), where ``V`` is the eigenbasis of an
    earlier iterate and ``Y`` the root corrected since.  It serves the
    transport maps as :class:`SymmetricEigh` does, without a new
    eigendecomposition.
    """

    basis: Any
    root: Any

    def sqrt(self) -> Any:
        """``A^{1/2} = V Y V^T``."""
        V = self.basis
        return symmetrize(V @ self.root @ V.swapaxes(-1, -2))

    def inv_sqrt(self) -> Any:
        """``A^{-1/2} = V Y^{-1} V^T``, by one solve with ``Y`` (no decomposition of ``A``)."""
        V = self.basis
        return symmetrize(V @ linalg(V).solve(self.root, V.swapaxes(-1, -2)))

    def select(self, index: int) -> RootInBasis:
        """The root of matrix ``index`` of a stack."""
        return RootInBasis(self.basis[index], self.root[index])


def symmetrize(A: Any) -> Any:
    """Return ``(A + A^T) / 2``, removing round-off asymmetry."""
    return 0.5 * (A + A.swapaxes(-1, -2))


def sym_eigh(A: Any) -> SymmetricEigh:
    """Eigendecomposition of a symmetric matrix, eigenvalues ascending.

    LAPACK's divide-and-conquer driver (``syevd``, what :func:`numpy.linalg.eigh`
    calls), the fastest symmetric driver for a full spectrum at m = 128 to 1280
    here (``benchmarks/bench_eigh_drivers.py``); ``torch.linalg.eigh`` for
    tensors (batched on the GPU).  Only the lower triangle of ``A`` is read.
    """
    w, V = linalg(A).eigh(A)
    return SymmetricEigh(w, V)


def trace_sqrt(A: Any) -> float:
    """``tr(A^{1/2})`` of a positive semi-definite ``A``, from its eigenvalues only.

    The Bures fidelity term; round-off negative eigenvalues count as zero.
    """
    return float((linalg(A).eigvalsh(A).clip(min=0.0) ** 0.5).sum())


def cholesky_factor(A: Any) -> Any:
    """Lower Cholesky factor ``L`` with ``A = L L^T``.

    Any factor ``F`` with ``A = F F^T`` serves the Gaussian OT formulas (see
    :class:`skslot.maps.GaussianMap`); Cholesky is the cheapest (``m^3 / 3``).
    """
    return linalg(A).cholesky(A)


def solve_lower_transposed(L: Any, B: Any) -> Any:
    """``L^{-T} B`` for a lower-triangular ``L``."""
    if is_tensor(L):
        return linalg(L).solve_triangular(L.swapaxes(-1, -2), B, upper=True)
    return np.linalg.solve(L.T, B)


def upper_triangle(A: np.ndarray) -> np.ndarray:
    """The ``m (m + 1) / 2`` entries on and above the diagonal, row by row."""
    return A[np.triu_indices(A.shape[0])]


def symmetric_from_upper(upper: np.ndarray, m: int) -> np.ndarray:
    """The symmetric ``m x m`` matrix whose :func:`upper_triangle` is ``upper``."""
    full = np.zeros((m, m))
    full[np.triu_indices(m)] = upper
    return full + np.triu(full, 1).T


def checked_cholesky(A: Any) -> Any:
    """:func:`cholesky_factor` of a symmetric matrix, or ``None`` where it has none."""
    module = linalg(A)
    try:
        return module.cholesky(A)
    except module.LinAlgError:
        return None


def is_positive_definite(A: Any) -> bool:
    """Whether a symmetric matrix admits a Cholesky factorisation."""
    return checked_cholesky(A) is not None


def orthonormality_error(U: np.ndarray) -> float:
    """``max |U^T U - I|`` of a basis ``U`` of shape ``(m, r)``: 0 for an orthonormal one."""
    gram = U.T @ U
    gram.flat[:: U.shape[1] + 1] -= 1.0
    return float(np.max(np.abs(gram), initial=0.0))


def orthonormalized(U: np.ndarray) -> np.ndarray:
    """The thin QR factor ``Q`` of ``U`` with ``R``'s diagonal made non-negative.

    The same span; for nearly orthonormal columns, the nearest orthonormal
    ones (``O(m r^2)``).
    """
    Q, R = np.linalg.qr(U)
    return Q * np.sign(np.diagonal(R))


def common_basis(bases: Sequence[np.ndarray]) -> np.ndarray:
    """An orthonormal basis of the sum of the spans of orthonormal bases.

    Block Gram-Schmidt with re-orthogonalisation: each basis is projected off
    the span so far twice, and the directions of its residual with singular
    value above :data:`SPAN_TOL` join it (``O(m d sum r_k)`` time).

    Parameters
    ----------
    bases : sequence of ndarray of shape (m, r_k)
        Orthonormal columns each.

    Returns
    -------
    V : ndarray of shape (m, d)
        Orthonormal, with ``d <= min(m, sum r_k)``.
    """
    m = bases[0].shape[0]
    V = np.zeros((m, 0))
    for U in bases:
        R = U - V @ (V.T @ U)
        R -= V @ (V.T @ R)
        if R.shape[1] == 0:
            continue
        left, sv, _ = np.linalg.svd(R, full_matrices=False)
        new = left[:, sv > SPAN_TOL]
        new -= V @ (V.T @ new)
        new, _ = np.linalg.qr(new)
        V = np.hstack([V, new])
    return V
