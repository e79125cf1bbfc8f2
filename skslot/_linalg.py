"""Symmetric matrix functions computed from one eigendecomposition.

Every matrix square root, inverse square root and Bures trace term of the
package is computed here, from a single call to a symmetric eigensolver, so
that the two functions needed by an optimal-transport map share one
factorisation.

All factorisations use NumPy's LAPACK, the library NumPy's matrix products
use too.  NumPy and SciPy wheels each ship their own OpenBLAS; alternating
calls between the two makes their idle worker threads compete for the cores,
which made the barycenter 2 to 4 times slower at the default thread count
(``benchmarks/bench_barycenter.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = [
    "SymmetricEigh",
    "cholesky_factor",
    "is_positive_definite",
    "solve_lower_transposed",
    "sym_eigh",
    "symmetrize",
    "trace_sqrt",
]


class SymmetricEigh(NamedTuple):
    """Eigendecomposition ``A = V diag(w) V^T`` of a symmetric matrix."""

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray

    def apply(self, func: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Return the matrix function ``V diag(func(w)) V^T``."""
        V = self.eigenvectors
        return (V * func(self.eigenvalues)) @ V.T

    def sqrt(self) -> np.ndarray:
        """Principal square root ``A^{1/2}`` of a positive semi-definite ``A``."""
        return self.apply(lambda w: np.sqrt(np.maximum(w, 0.0)))

    def inv_sqrt(self) -> np.ndarray:
        """Inverse square root ``A^{-1/2}`` of a positive definite ``A``."""
        w = self.eigenvalues
        if w[0] <= 0.0:
            raise np.linalg.LinAlgError(
                f"matrix is not positive definite: smallest eigenvalue {w[0]:.3e}"
            )
        return self.apply(lambda w: 1.0 / np.sqrt(w))


def symmetrize(A: np.ndarray) -> np.ndarray:
    """Return ``(A + A^T) / 2``, removing round-off asymmetry."""
    return 0.5 * (A + A.T)


def sym_eigh(A: np.ndarray) -> SymmetricEigh:
    """Eigendecomposition of a symmetric matrix, eigenvalues ascending.

    LAPACK's divide-and-conquer driver (``syevd``, what :func:`numpy.linalg.eigh`
    calls), the fastest symmetric driver for a full spectrum at m = 128 to 1280
    here (``benchmarks/bench_eigh_drivers.py``).  Only the lower triangle of
    ``A`` is read.
    """
    w, V = np.linalg.eigh(A)
    return SymmetricEigh(w, V)


def trace_sqrt(A: np.ndarray) -> float:
    """``tr(A^{1/2})`` of a positive semi-definite ``A``, from its eigenvalues only.

    The Bures fidelity term; round-off negative eigenvalues count as zero.
    """
    return float(np.sqrt(np.maximum(np.linalg.eigvalsh(A), 0.0)).sum())


def cholesky_factor(A: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor ``L`` with ``A = L L^T``.

    Any factor ``F`` with ``A = F F^T`` serves the Gaussian OT formulas (see
    :class:`skslot.gaussian.GaussianMap`); Cholesky is the cheapest (``m^3 / 3``).
    """
    return np.linalg.cholesky(A)


def solve_lower_transposed(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``L^{-T} B`` for a lower-triangular ``L``."""
    return np.linalg.solve(L.T, B)


def is_positive_definite(A: np.ndarray) -> bool:
    """Whether a symmetric matrix admits a Cholesky factorisation."""
    try:
        np.linalg.cholesky(A)
    except np.linalg.LinAlgError:
        return False
    return True
