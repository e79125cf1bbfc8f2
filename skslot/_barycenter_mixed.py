"""The barycenter's square roots in mixed precision: float32 work on a float64 base.

Each iteration of :func:`skslot.barycenter.bures_wasserstein_barycenter`
evaluates ``N(F) = sum_k w_k M_k^{1/2}`` with ``M_k = F^T Sigma_k F``.  With
the clients' Cholesky factors ``Sigma_k = L_k L_k^T`` (taken once),
``M_k = Q_k^T Q_k`` with ``Q_k = L_k^T F``.  :class:`MixedRoots` evaluates
``N(F)`` in one of four ways:

``"eigh32"``, ``"eigh64"``
    ``M_k = V_k diag(lambda_k) V_k^T`` by an eigendecomposition (float32:
    SciPy's ``ssyevd``, 1.6 times faster than NumPy's float32 driver at
    m = 256; float64: NumPy's batched ``dsyevd``) and ``N = W W^T`` with
    ``W = [V_k diag(w_k^{1/2} lambda_k^{1/4})]_k``.  The decomposition becomes
    the *base* of the cheaper evaluations that follow: in its basis
    ``A_k = V_k^T M_k V_k = P_k^T P_k`` (``P_k = L_k^T F V_k``) stays nearly
    diagonal while ``F`` moves little, and its root ``Y_k``
    (``M_k^{1/2} = V_k Y_k V_k^T``) is corrected by the chord iteration
    ``Y <- Y + R o C`` (``R = A - Y^2``, ``C_ij = 1 / (d_i + d_j)``, ``d``
    the diagonal of ``Y``: the Sylvester equation of Newton's step with
    ``Y`` replaced by its diagonal).  The chord iteration contracts at about
    ``rho * r_base``: ``rho = max_k cond(M_k)^{1/2}`` (from the base) and
    ``r_base`` the relative fixed-point residual at the base, which bounds how
    far from diagonal ``Y_k`` is, relative to its smallest entry.
``"warm32"``
    on a float32 base, all in float32: ``A_k = P_k^T P_k`` formed again,
    the root corrected from the last one (``R = E + A_k - A_k^{last}``, ``E``
    the root equation's residual carried from the last evaluation), and
    ``N = sum_k w_k V_k Y_k V_k^T``.
``"step32"``
    on a float64 base, float32 *increments*: with ``dF = F - F_last``,
    ``dP_k = L_k^T dF V_k`` and ``dA_k = P_k^T dP_k + dP_k^T P_k`` (plus
    ``dP_k^T dP_k`` while it matters), the root's increment solves
    ``Y dY + dY Y (+ dY^2) = E + dA`` by chord steps (the first one free), and
    ``N += sum_k w_k V_k dY_k V_k^T`` accumulates in float64.  Only the
    increments are rounded to float32, so that their rounding errors sum to
    about ``3e-8 rho r_base`` of ``N``, not to a float32 evaluation's
    ``2e-7 rho``.

Which one runs follows the rules below, from the last residual ``r`` (each a
named constant, with its reason):

1. an evaluation is float32 while ``r > max(FLOAT32_RESIDUAL,
   FLOAT32_PER_RHO * rho)``;
2. a base serves the next evaluation while ``rho * r_base`` is within its
   reach: ``WARM_REACH`` for a float32 base (and only while rule 1 asks for
   float32), ``INCREMENT_REACH`` for a float64 one; otherwise the evaluation
   is a new eigendecomposition, in the precision rule 1 gives;
3. a chord iteration that fails (a step not finite, more than
   ``CHORD_SLOWDOWN`` times the last, or above its tolerance after
   ``CHORD_MAX_STEPS``) makes the evaluation an eigendecomposition instead,
   and nothing of the failed one is kept (the fallback);
4. the iteration stops where the residual plus the evaluation's own error
   estimate (:attr:`MixedRoots.error`, which the residual of a float32
   evaluation cannot see) is at most ``tol``;
5. the attainable residual (the stall rule's floor) is that of the last
   float64 eigendecomposition, 0 before the first.

The float32 work is scaled by a power of two near the largest variance (exact
in float64), so that it neither overflows nor underflows whatever the
covariances' scale.  The iteration ends in a state that gives every client's
transport map without a new factorisation: the last eigendecomposition, or the
base's basis ``V_k`` with the root ``Y_k`` accumulated in float64
(:class:`skslot._linalg.RootInBasis`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import cache
from typing import NamedTuple

import numpy as np
import scipy.linalg
from threadpoolctl import ThreadpoolController

from ._linalg import RootInBasis, SymmetricEigh, checked_cholesky, symmetrize

F32, F64 = np.float32, np.float64
#: The precision of an evaluation, ``F32`` or ``F64``.
Precision = type[np.float32] | type[np.float64]

#: Below this dimension the float64 path runs: an eigendecomposition costs
#: little more than the Python steps of a warm evaluation there (K = 8, one
#: thread: the mixed path took 0.7 times the float64 path's speed at m = 16,
#: 1.1 times at m = 32, 1.4 times at m = 64).
MIN_DIMENSION = 32
#: Rule 1: float32 evaluations while the residual exceeds both of these.
#: Float32's relative error in ``N`` is up to ``FLOAT32_ERROR * rho`` (below),
#: at most 2 % of the residual while they run; the float64 evaluations that
#: follow remove what they leave, which takes longer the later they start.
FLOAT32_RESIDUAL = 1e-4
FLOAT32_PER_RHO = 1e-5
#: Rule 2: a float32 base serves warm evaluations while ``rho * r_base`` is at
#: most this; the chord iteration slows beyond it and diverges from about 1.
WARM_REACH = 0.3
#: Rule 2: a float64 base serves float32 increments while ``rho * r_base`` is
#: at most ``min(INCREMENT_REACH, INCREMENT_PER_TOL * tol)``.  Their rounding
#: errors sum to up to ``INCREMENT_ERROR * rho * r_base`` of ``N``, which the
#: residual does not see: the first bound keeps them near ``3e-11`` (on the
#: sampled set of m = 256, increments on a base at ``rho * r_base = 1.6e-2``
#: reported 8e-11 where the true residual was 3e-10), the second below
#: ``0.3 tol`` (none at ``tol = 0``).
INCREMENT_REACH = 1e-3
INCREMENT_PER_TOL = 1e7
#: The relative error in ``N`` of an evaluation, not seen by its residual
#: (:attr:`MixedRoots.error`; the iteration stops where the residual plus it
#: is at most ``tol``): float32 evaluations ``FLOAT32_ERROR * rho``, float32
#: increments ``INCREMENT_ERROR * rho * r_base``.  Measured on the sampled,
#: low-rank and condition 1e4 and 1e6 sets of m = 256: 3e-8 to 1.8e-7, and
#: 0.6e-8 to 3e-8.
FLOAT32_ERROR = 2e-7
INCREMENT_ERROR = 3e-8
#: A chord iteration stops at a step of at most this fraction of the last
#: residual (relative to the root): the roots' error stays well below the
#: iteration's, which keeps Anderson's iteration count.
CHORD_FRACTION = 1e-2
#: ... and, in a warm evaluation, at a step of at most this: float32 resolves
#: the root itself to a few of its ``eps = 6e-8``.
FLOAT32_RESOLUTION = 3e-7
#: Rule 3: the most chord steps of one root, and the slowest contraction kept.
CHORD_MAX_STEPS = 8
CHORD_SLOWDOWN = 0.7
#: The increments' second-order terms ``dP^T dP`` and ``dY^2`` are dropped once
#: ``(||dF|| / ||F||)^2`` is below this fraction of ``tol``: then they cannot
#: move the residual at the tolerance.
SECOND_ORDER = 1e-2
#: Eigenvalues below this fraction of the largest are raised to it in a base,
#: so that the chord's ``1 / (d_i + d_j)`` stays finite (float32's and
#: float64's rounding of the eigenvalues).
EIGENVALUE_FLOOR: dict[Precision, float] = {F32: 1e-7, F64: 1e-16}

WARM = ("warm32", "step32")


class ChordFailure(Exception):
    """A chord iteration that does not contract (rule 3)."""


class _Decomposition(NamedTuple):
    """An eigendecomposition evaluation at ``F``: ``M_k = V_k diag(lambda_k) V_k^T``."""

    dtype: Precision
    eigenvalues: np.ndarray  # (K, m) as computed, ascending
    eigenvectors: np.ndarray  # (K, m, m)
    factors: np.ndarray | None  # Q_k = L_k^T F, (K, m, m); None once the warm state holds them

    def as_roots(self, scale: float) -> list[SymmetricEigh]:
        """Each client's decomposition, in float64, its eigenvalues times ``scale`` (the maps)."""
        eigenvalues, eigenvectors = self.eigenvalues * F64(scale), self.eigenvectors.astype(F64)
        return [SymmetricEigh(eigenvalues[k], eigenvectors[k]) for k in range(len(eigenvalues))]


class MixedRoots:
    """``N(F)`` of each iterate in mixed precision, with the state carried between them.

    Use :meth:`start` (``None`` where the mixed path does not apply); per
    iteration :meth:`evaluate`, then :meth:`observe` with the residual.

    Attributes
    ----------
    counts : collections.Counter
        Evaluations of each kind made, and ``"fallback"``: chord failures
        redone as eigendecompositions.
    """

    def __init__(self, lower: np.ndarray, weights: np.ndarray, tol: float, largest: float) -> None:
        K, m = lower.shape[:2]
        # Every float32 quantity is of the order of one: F and the L_k are divided by
        # 2^(e/2), the M_k then by 2^(2e) and N by 2^e, 2^e about the largest variance
        # (powers of two: exact in float64).  Unscaled, float32 would overflow from
        # variances of about 1e19 and lose the M_k's small end below about 1e-19.
        self._half = 2.0 ** round(np.log2(largest) / 2)
        self._scale = self._half**2  # of N and the roots; of the M_k squared
        lower = lower / self._half
        self._lower_t: dict[Precision, np.ndarray] = {
            F64: lower.swapaxes(1, 2),
            F32: lower.astype(F32).swapaxes(1, 2),
        }
        self._weights = [float(w) for w in weights]
        self._sqrt_weights = np.sqrt(weights)[:, None]
        self._tol = tol
        self.counts: Counter = Counter()
        self._rho = 0.0  # max_k cond(M_k)^{1/2}, from the last eigendecomposition
        self._residual = np.inf  # at the last evaluation
        self._base: tuple[Precision, float] | None = None  # (precision, residual at the base)
        self._decomposition: _Decomposition | None = None
        self._built = False  # whether the warm state holds the last decomposition
        self._float64_eigenvalues: np.ndarray | None = None
        self._kind = ""
        self._F: np.ndarray | None = None  # the last evaluation's F (scaled) and N
        self._N: np.ndarray | None = None
        # the warm state, float32: the basis as one (m, K m) matrix (client k's V_k
        # in columns k m .. (k + 1) m), the roots, the residuals of their equation,
        # P_k (increments) or A_k (warm evaluations), and the products V_k Y_k w_k
        self._basis = np.empty((m, K, m), F32)
        self._root = np.empty((K, m, m), F32)
        self._error = np.empty((K, m, m), F32)
        self._carried = np.empty((K, m, m), F32)
        self._products = np.empty((m, K, m), F32)
        # on a float64 base: the basis and the root accumulated in float64 (the maps)
        self._basis64: np.ndarray | None = None
        self._root64 = np.empty((K, m, m), F64)

    @classmethod
    def start(cls, covariances: np.ndarray, weights: np.ndarray, tol: float) -> MixedRoots | None:
        """The evaluator of a float64 stack, or ``None``.

        ``None`` below ``MIN_DIMENSION``, for one client (the arithmetic-mean
        start is its barycenter: one float64 evaluation confirms it), and
        where a covariance has no Cholesky factor (is not numerically
        positive definite).
        """
        if covariances.shape[-1] < MIN_DIMENSION or len(covariances) < 2:
            return None
        lower = checked_cholesky(covariances)
        if lower is None:
            return None
        largest = float(np.max(np.einsum("kii->ki", covariances)))  # the largest variance
        return cls(lower, weights, tol, largest)

    # -- the iteration's interface ------------------------------------------------

    def evaluate(self, F: np.ndarray) -> np.ndarray:
        """``N(F) = sum_k w_k (F^T Sigma_k F)^{1/2}`` (float64, symmetric), as the rules choose."""
        F = F / self._half
        kind = self._next_kind()
        N = None
        if kind in WARM:
            if not self._built:
                self._build_state()
            try:
                N = self._warm(F) if kind == "warm32" else self._step(F)
            except ChordFailure:
                self.counts["fallback"] += 1
                kind = self._eigh_kind()
        if N is None:
            N = self._eigh(F, F32 if kind == "eigh32" else F64)
        self.counts[kind] += 1
        self._kind, self._F, self._N = kind, F, N
        return N * self._scale

    def observe(self, residual: float) -> None:
        """The relative residual of the last evaluation (it sets a new base's distance)."""
        self._residual = residual
        if self._kind.startswith("eigh"):
            assert self._decomposition is not None  # the eigendecomposition just made
            self._base = (self._decomposition.dtype, residual)

    @property
    def error(self) -> float:
        """An estimate of the last evaluation's relative error in ``N`` (0 in float64)."""
        if self._kind == "eigh64":
            return 0.0
        if self._kind == "step32":
            assert self._base is not None  # increments run on a base
            return INCREMENT_ERROR * self._rho * self._base[1]
        return FLOAT32_ERROR * self._rho

    @property
    def floor_eigenvalues(self) -> np.ndarray | None:
        """The eigenvalues of the last float64 decomposition (rule 5), ``None`` before one."""
        if self._float64_eigenvalues is None:
            return None
        return self._float64_eigenvalues * self._scale**2

    def roots(self, kind: object = None) -> list[SymmetricEigh] | list[RootInBasis]:
        """Each client's ``(F^T Sigma_k F)^{1/2}`` at the last iterate, for the maps.

        NumPy float64 (``kind``, the covariances', is NumPy on this path);
        accurate to float32 only where the iteration ended on a float32
        evaluation (a ``tol`` above about ``1e-4``).
        """
        if self._kind.startswith("eigh"):
            assert self._decomposition is not None  # the last evaluation's
            return self._decomposition.as_roots(self._scale**2)
        if self._kind == "step32":
            assert self._basis64 is not None  # a float64 base's state, built for the increments
            root, basis = symmetrize(self._root64), self._basis64
        else:  # a float32 base's last warm evaluation
            root, basis = self._root.astype(F64), self._basis.swapaxes(0, 1).astype(F64)
        root = root * self._scale
        return [RootInBasis(basis[k], root[k]) for k in range(len(root))]

    @staticmethod
    def solve(F: np.ndarray, B: np.ndarray) -> np.ndarray:
        """``F^{-T} B``, ``F`` lower-triangular (SciPy's ``trsm``: 3 times NumPy's ``solve``)."""
        return scipy.linalg.solve_triangular(F, B, lower=True, trans="T", check_finite=False)

    # -- rules 1 and 2 -------------------------------------------------------------

    def _in_float32(self) -> bool:
        return self._residual > max(FLOAT32_RESIDUAL, FLOAT32_PER_RHO * self._rho)

    def _eigh_kind(self) -> str:
        return "eigh32" if self._in_float32() else "eigh64"

    def _next_kind(self) -> str:
        if self._base is None:
            return self._eigh_kind()
        precision, distance = self._base[0], self._rho * self._base[1]
        if precision is F32:
            if self._in_float32() and distance <= WARM_REACH:
                return "warm32"
        elif distance <= min(INCREMENT_REACH, INCREMENT_PER_TOL * self._tol):
            return "step32"
        return self._eigh_kind()

    # -- the evaluations -----------------------------------------------------------

    def _eigh(self, F: np.ndarray, dtype: Precision) -> np.ndarray:
        """An eigendecomposition evaluation, which becomes the next base."""
        self._decomposition = self._basis64 = None  # the last base's memory serves this one
        Q = self._lower_t[dtype] @ F.astype(dtype)
        M = np.empty_like(Q)
        for k in range(len(Q)):
            np.matmul(Q[k].T, Q[k], out=M[k])  # a symmetric rank-k update
        if dtype is F64:
            eigenvalues, eigenvectors = np.linalg.eigh(M)
            self._float64_eigenvalues = eigenvalues
        else:
            eigenvalues, eigenvectors = _float32_eigh(M)
        del M
        largest = eigenvalues[:, -1:].astype(F64)
        smallest = np.maximum(eigenvalues[:, :1], largest * EIGENVALUE_FLOOR[dtype])
        self._rho = float(np.sqrt(np.max(largest / smallest)))
        self._decomposition = _Decomposition(dtype, eigenvalues, eigenvectors, Q)
        self._built = False
        m = Q.shape[-1]
        scale = (self._sqrt_weights * eigenvalues.clip(min=0.0) ** 0.25).astype(dtype)
        W = (eigenvectors * scale[:, None, :]).swapaxes(0, 1).reshape(m, -1)
        return (W @ W.T).astype(F64)  # a symmetric rank-k update: symmetric

    def _build_state(self) -> None:
        """The warm state from the last decomposition (only when a warm evaluation follows)."""
        assert self._decomposition is not None  # a warm evaluation follows a base
        dtype, eigenvalues, eigenvectors, Q = self._decomposition
        largest = eigenvalues[:, -1:].astype(F64)
        eigenvalues = np.maximum(eigenvalues.astype(F64), largest * EIGENVALUE_FLOOR[dtype])
        K, m = eigenvalues.shape
        diagonal = (slice(None), np.arange(m), np.arange(m))
        self._basis[...] = eigenvectors.swapaxes(0, 1)
        self._root[...] = 0.0
        self._root[diagonal] = np.sqrt(eigenvalues)
        self._error[...] = 0.0
        if dtype is F32:  # warm evaluations carry A_k
            self._carried[...] = 0.0
            self._carried[diagonal] = eigenvalues
        else:  # increments carry P_k = Q_k V_k, and the float64 root and basis
            assert Q is not None  # dropped only below, once the state is built
            for k in range(K):
                np.matmul(Q[k].astype(F32), self._basis[:, k, :], out=self._carried[k])
            self._basis64 = eigenvectors
            self._root64[...] = 0.0
            self._root64[diagonal] = np.sqrt(eigenvalues)
        self._decomposition = self._decomposition._replace(factors=None)  # P_k holds them now
        self._built = True

    def _warm(self, F: np.ndarray) -> np.ndarray:
        """A float32 warm evaluation on a float32 base (raises ChordFailure)."""
        K, m = self._root.shape[:2]
        G = F.astype(F32) @ self._basis.reshape(m, K * m)  # every F V_k at once
        tolerance = max(CHORD_FRACTION * self._residual, FLOAT32_RESOLUTION)
        updates = []
        for k in range(K):
            P = self._lower_t[F32][k] @ G[:, k * m : (k + 1) * m]
            A = P.T @ P
            Y, R = _chord_root(A, self._root[k], self._error[k] + (A - self._carried[k]), tolerance)
            np.matmul(self._basis[:, k, :], Y * self._weights[k], out=self._products[:, k, :])
            updates.append((A, Y, R))
        for k, (A, Y, R) in enumerate(updates):  # kept only once every root succeeded
            self._carried[k], self._root[k], self._error[k] = A, Y, R
        return self._wide_sum()

    def _step(self, F: np.ndarray) -> np.ndarray:
        """Float32 increments on a float64 base (raises ChordFailure)."""
        K, m = self._root.shape[:2]
        dF = F - self._F
        second = (np.linalg.norm(dF) / np.linalg.norm(F)) ** 2 > SECOND_ORDER * self._tol
        G = dF.astype(F32) @ self._basis.reshape(m, K * m)  # every dF V_k at once
        tolerance = CHORD_FRACTION * self._residual
        updates = []
        for k in range(K):
            dP = self._lower_t[F32][k] @ G[:, k * m : (k + 1) * m]
            X = self._carried[k].T @ dP
            B = self._error[k] + (X + X.T)
            if second:
                B += dP.T @ dP
            dY, R = _chord_increment(self._root[k], B, tolerance, second)
            np.matmul(self._basis[:, k, :], dY * self._weights[k], out=self._products[:, k, :])
            updates.append((dP, dY, R))
        for k, (dP, dY, R) in enumerate(updates):  # kept only once every root succeeded
            self._carried[k] += dP
            self._root[k] += dY
            self._root64[k] += dY
            self._error[k] = R
        return self._N + self._wide_sum()

    def _wide_sum(self) -> np.ndarray:
        """``sum_k V_k (w_k Z_k) V_k^T`` from the products ``V_k Z_k w_k``: one product, float64."""
        K, m = self._root.shape[:2]
        wide = self._products.reshape(m, K * m) @ self._basis.reshape(m, K * m).T
        return symmetrize(wide.astype(F64))


# -- the chord iterations (rule 3) ---------------------------------------------------


def _chord_coefficients(Y: np.ndarray) -> np.ndarray:
    """``1 / (d_i + d_j)``, ``d`` the diagonal of ``Y``."""
    d = np.diagonal(Y)
    return 1.0 / (d[:, None] + d[None, :])


def _check_step(step: float, last: float, steps: int, tolerance: float) -> None:
    """Rule 3: raise ChordFailure on a step that is not finite, too slow, or still too large."""
    if not np.isfinite(step) or step > CHORD_SLOWDOWN * last:
        raise ChordFailure
    if steps >= CHORD_MAX_STEPS and step > tolerance:
        raise ChordFailure


def _chord_root(
    A: np.ndarray, Y: np.ndarray, R: np.ndarray, tolerance: float
) -> tuple[np.ndarray, np.ndarray]:
    """The root of ``A`` corrected from ``Y`` (``R = A - Y^2``) to a step of ``tolerance``.

    Returns the root and its equation's residual; steps are measured
    relative to ``||Y||``.
    """
    size = float(np.linalg.norm(Y))
    last = np.inf
    steps = 0
    while True:
        dY = R * _chord_coefficients(Y)
        step = float(np.linalg.norm(dY)) / size
        _check_step(step, last, steps, tolerance)
        if step <= tolerance:
            return Y, R
        Y = Y + dY
        R = A - Y @ Y.T  # symmetric: a rank-k update
        last = step
        steps += 1


def _chord_increment(
    Y: np.ndarray, B: np.ndarray, tolerance: float, second: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``dY`` with ``Y dY + dY Y (+ dY^2) = B``, by chord steps from ``B o C``.

    Returns ``dY`` and the equation's residual (the next evaluation's ``E``).
    """
    size = float(np.linalg.norm(Y))
    coefficients = _chord_coefficients(Y)
    dY = B * coefficients
    last = np.inf
    steps = 0
    while True:
        T = Y @ dY
        R = B - (T + T.T)
        if second:
            R -= dY @ dY.T
        steps += 1
        correction = R * coefficients
        step = float(np.linalg.norm(correction)) / size
        _check_step(step, last, steps, tolerance)
        if step <= tolerance:
            return dY, R
        dY += correction
        last = step


# -- kernels -------------------------------------------------------------------------


def _float32_eigh(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each float32 matrix of a stack decomposed by SciPy's ``ssyevd`` (``M`` is overwritten)."""
    eigenvalues = np.empty(M.shape[:2], F32)
    eigenvectors = np.empty_like(M)
    for k in range(len(M)):
        eigenvalues[k], eigenvectors[k] = scipy.linalg.eigh(
            M[k], driver="evd", overwrite_a=True, check_finite=False
        )
    return eigenvalues, eigenvectors


@cache
def _scipy_own_blas() -> ThreadpoolController | None:
    """The BLAS libraries SciPy ships beside NumPy's (its wheel's own OpenBLAS), if any."""
    root = os.path.dirname(os.path.abspath(scipy.__file__))
    places = (root + os.sep, root + ".libs" + os.sep)
    controller = ThreadpoolController()
    own = [c.filepath for c in controller.lib_controllers if c.filepath.startswith(places)]
    return controller.select(filepath=own) if own else None


@contextmanager
def scipy_blas_single_threaded() -> Iterator[None]:
    """SciPy's own OpenBLAS (where its wheel ships one) held at one thread.

    The mixed path calls SciPy's ``ssyevd`` and ``trsm`` between NumPy's
    products; with two OpenBLAS copies each at the default thread count, the
    idle workers of one spin on the cores the other needs (see
    ``docs/scaling.md``).  With SciPy's copy at one thread, its calls run
    on the calling thread only.
    """
    own = _scipy_own_blas()
    with nullcontext() if own is None else own.limit(limits=1):
        yield
