"""Private class statistics: one Gaussian mechanism on clipped class sums, counts and Grams.

A client under a privacy budget releases FedCGS's statistics
(:class:`~skslot.heads.ClassStatistics`) with one Gaussian mechanism:

1. every row is scaled to norm at most ``C`` (``clip_norm``) and expressed in
   units of ``C``, ``u_i = x_i / C`` in the unit ball;
2. the vector ``(class sums, class counts, upper(G))``, ``G = sum_i u_i u_i^T``,
   receives independent ``N(0, sigma^2)`` noise on every entry;
3. post-processing (free): the counts are rounded onto non-negative integers
   adding up to the public row count ``n``; a class left with no row has no
   sum; the within-class scatter implied by the noisy Gram matrix and class
   sums is projected onto the positive semi-definite cone and the Gram matrix
   rebuilt from it, so the released statistics pass every consistency check a
   server applies to exact ones.  The SLOT summary, its shrinkage and the
   label-shift factors the server derives from them are post-processing too.

Sensitivity under replace-one (``u`` replaced by ``v``, both in the unit
ball): if both rows have the same class, the sums move by ``|u - v| <= 2``
and the counts not at all; otherwise one class sum loses ``u`` and another
gains ``v`` (``sqrt(|u|^2 + |v|^2) <= sqrt(2)``) and two counts move by one
(``sqrt(2)``).  The upper triangle of ``G`` moves by at most
``||u u^T - v v^T||_F = sqrt(|u|^4 + |v|^4 - 2 (u.v)^2) <= sqrt(2)``.  So the
L2 sensitivity of the whole vector is ``sqrt(max(4 + 2, 2 + 2 + 2)) = sqrt(6)``
(:data:`CLASS_STATISTICS_SENSITIVITY`).

FedPFT's per-class Gaussians need each class's own second moments: the
release :func:`private_class_moments` noises the class sums, the class counts
and one Gram matrix per class, ``G_c = sum_{i in c} u_i u_i^T``.  Replacing a
row within its class moves that class's sum and Gram by at most
``sqrt(9/2)`` together (:data:`~skslot.privacy.SUMMARY_SENSITIVITY`); replacing
it by a row of another class moves two sums (``sqrt(2)``), two counts
(``sqrt(2)``) and two Grams (``sqrt(|u|^4 + |v|^4) <= sqrt(2)``), so the
sensitivity is ``sqrt(6)`` again (:data:`CLASS_MOMENTS_SENSITIVITY`).  The
class means, covariances and the client's summary (total mean and
covariance, OAS-shrunk) are post-processing.

O-FedAvg's local head is released by output perturbation (Chaudhuri,
Monteleoni and Sarwate 2011, the sensitivity method, with Gaussian noise):
the client solves the multinomial logistic regression of its rows clipped to
``C`` and expressed in units of it, ``u_i`` in the unit ball, with the
intercept penalised as the weight of a constant feature of value one,

    ``theta* = argmin  sum_i -log softmax(theta [u_i; 1])_{y_i} + ||theta||^2 / (2 C')``,

``C' = C_reg C^2`` (the head's inverse regularisation ``C_reg`` in the rows'
units), and releases ``theta* + N(0, sigma^2 I)``.  Divided by ``n`` the
objective is ``lambda = 1 / (C' n)`` strongly convex, and each row's loss
gradient, ``(p - e_y) [u; 1]^T``, has norm at most
``sqrt(2) * sqrt(2) = 2``; replacing one row moves the gradient of the mean
loss by at most ``4 / n``, so the minimiser by at most ``4 / (n lambda) =
4 C'``.  The released point is within ``C' * tol`` of the exact minimiser
(:data:`LOCAL_HEAD_GRADIENT_TOL`): L-BFGS gets there and a gradient
descent whose number of steps follows from public values alone completes
what it leaves (:func:`certified_descent`), so the release never depends on
whether a solver converged and nothing is refused.  The sensitivity of what
is released is ``(4 + 2 tol) C'`` (:data:`LOCAL_HEAD_SENSITIVITY` times
``C'``).  The
released ``[W, b]`` in the rows' units is post-processing.

References
----------
.. [1] Chaudhuri, Monteleoni and Sarwate, "Differentially private empirical
   risk minimization", JMLR 12, 2011 (Corollary 8: the minimiser's
   sensitivity ``2 L / (n lambda)``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._linalg import sym_eigh, symmetrize
from .._moments import ShiftedMoments, clip_factors
from ..defaults import COVARIANCE_FLOOR
from ..gaussian import GaussianSummary
from ..heads._softmax import fit_softmax_regression, softmax_objective
from ..heads._statistics import ClassStatistics, between_class_scatter
from ..ledoit_wolf import oas_shrinkage, shrunk_summary
from ._summary import psd_projection, symmetric_noise

#: Replace-one L2 sensitivity of (class sums, class counts, upper(G)) of rows in the unit ball.
CLASS_STATISTICS_SENSITIVITY = math.sqrt(6.0)
#: Replace-one L2 sensitivity of (class sums, class counts, each class's upper(G_c)).
CLASS_MOMENTS_SENSITIVITY = math.sqrt(6.0)
#: Replace-one L2 sensitivity of the class counts alone: two counts move by one.
CLASS_COUNTS_SENSITIVITY = math.sqrt(2.0)
#: Largest Euclidean norm of the objective's gradient (rows in units of the clip norm) at
#: a released local head: the point is then within ``C' * tol`` of the exact minimiser.
LOCAL_HEAD_GRADIENT_TOL = 2e-3
#: Replace-one L2 sensitivity of a released local head per unit of ``C' = C_reg * clip^2``:
#: ``4`` for the exact minimisers, plus twice the distance the tolerance allows each.
LOCAL_HEAD_SENSITIVITY = 4.0 + 2.0 * LOCAL_HEAD_GRADIENT_TOL
#: Relative floor of a released within-class scatter's eigenvalues (in units of ``C^2``):
#: well above the server's rounding tolerance, far below any noise.
_PSD_FLOOR = 1e-9


def private_class_statistics(
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    *,
    clip_norm: float,
    sigma: float,
    rng: np.random.Generator,
) -> ClassStatistics:
    """The class statistics of ``X, y`` released with the Gaussian mechanism.

    Parameters
    ----------
    X : ndarray of shape (n, m)
        The client's rows (not modified; clipped chunk by chunk).
    y : ndarray of shape (n,)
        Their labels, each one of ``classes``.
    classes : ndarray of shape (C,)
        The run's class set, sorted.
    clip_norm : float
        The public bound ``C`` rows are clipped to.
    sigma : float
        Standard deviation of the noise on every entry, in units of ``C``
        (``sigma = noise_multiplier * sqrt(6) / 2``).
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    ClassStatistics
        Consistent statistics of rows clipped to ``C`` (about zero), noisy.
    """
    n, m = X.shape
    counts, sums, gram = _clipped_class_sums(X, y, classes, clip_norm, per_class=False)
    noisy_sums = sums + rng.normal(scale=sigma, size=sums.shape)
    noisy_counts = counts + rng.normal(scale=sigma, size=counts.shape)
    noisy_gram = symmetrize(gram[0]) + symmetric_noise(m, sigma, rng)
    return consistent_statistics(
        classes, noisy_counts, noisy_sums, noisy_gram, n=n, scale=clip_norm
    )


def _clipped_class_sums(
    X: np.ndarray, y: np.ndarray, classes: np.ndarray, clip_norm: float, *, per_class: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The class counts, and the class sums and Gram matrices about zero of the rows clipped
    to ``clip_norm``, in units of it: each row read once, clipped as the summary clips.

    The Gram matrices are one per class of ``classes`` with ``per_class``, else one of all
    the rows (shape ``(1, m, m)``); neither is symmetrised."""
    codes = np.searchsorted(classes, y)
    m = X.shape[1]
    zero = np.zeros(m)
    sums = np.zeros((classes.shape[0], m))
    grams = np.zeros((classes.shape[0] if per_class else 1, m, m))
    for c in np.unique(codes):
        part = ShiftedMoments.from_rows(
            X, rows=np.flatnonzero(codes == c), shift=zero, fourth_order=False, clip_norm=clip_norm
        )
        sums[c] = part.s1 / clip_norm
        grams[c if per_class else 0] += part.gram / (clip_norm * clip_norm)
    return np.bincount(codes, minlength=classes.shape[0]), sums, grams


def rounded_counts(noisy: np.ndarray, n: int) -> np.ndarray:
    """Non-negative integers adding up to ``n``, as close to ``noisy`` as rounding allows.

    The negative parts are dropped, the rest rescaled to add up to ``n`` and
    rounded by largest remainders (a post-processing of the noisy counts).

    Parameters
    ----------
    noisy : ndarray of shape (C,)
        Noisy counts.
    n : int
        The public row count.

    Returns
    -------
    counts : ndarray of shape (C,), float64 holding integers
    """
    positive = np.clip(noisy, 0.0, None)
    if not positive.sum() > 0:
        positive = np.ones_like(positive)
    target = positive * (n / positive.sum())
    counts = np.floor(target)
    short = int(n - counts.sum())
    counts[np.argsort(counts - target, kind="stable")[:short]] += 1.0
    return counts


def consistent_statistics(
    classes: np.ndarray,
    counts: np.ndarray,
    sums: np.ndarray,
    gram: np.ndarray,
    *,
    n: int,
    scale: float,
) -> ClassStatistics:
    """Noisy statistics (in units of ``scale``) made consistent, in the rows' units.

    Parameters
    ----------
    classes : ndarray of shape (C,)
    counts : ndarray of shape (C,)
        Noisy class counts.
    sums : ndarray of shape (C, m)
        Noisy class sums.
    gram : ndarray of shape (m, m)
        Noisy symmetric Gram matrix about zero.
    n : int
        The public row count.
    scale : float
        The clipping norm the statistics are expressed in units of.

    Returns
    -------
    ClassStatistics
        Counts that add up to ``n``, no sum for a class without rows, and a
        Gram matrix whose within-class scatter is positive semi-definite.
    """
    counts = rounded_counts(counts, n)
    sums = np.where(counts[:, None] > 0, sums, 0.0)
    s1 = sums.sum(axis=0)
    mean = s1 / n
    means = sums / np.maximum(counts, 1.0)[:, None]
    between = between_class_scatter(counts, means, mean)
    within = symmetrize(gram - np.outer(s1, mean) - between)
    # eigenvalues floored just above zero (not at zero), so that the scatter the server
    # rebuilds from the Gram matrix stays positive semi-definite through its rounding
    eigh = sym_eigh(within)
    floor = _PSD_FLOOR * max(float(np.abs(eigh.eigenvalues).max(initial=0.0)), 1.0)
    within = symmetrize(eigh.apply(lambda w: w.clip(min=floor)))
    gram = symmetrize(within + between + np.outer(s1, mean))
    moments = ShiftedMoments(n, np.zeros_like(s1), scale * s1, (scale * scale) * gram)
    return ClassStatistics(np.asarray(classes), counts, scale * sums, moments)


@dataclass(frozen=True, eq=False)
class ClassMoments:
    """A private client's released per-class moments, made consistent (post-processing).

    Attributes
    ----------
    classes : ndarray of shape (C,)
    counts : ndarray of shape (C,)
        Non-negative integers (as float64) adding up to the public row count.
    means : ndarray of shape (C, m)
        Each class's mean (zero for a class without rows).
    covariances : ndarray of shape (C, m, m)
        Each class's covariance, positive semi-definite (zero without rows).
    """

    classes: np.ndarray
    counts: np.ndarray
    means: np.ndarray
    covariances: np.ndarray

    @property
    def n_samples(self) -> int:
        """The rows the moments describe (the public count)."""
        return int(self.counts.sum())

    def total(self) -> tuple[np.ndarray, np.ndarray]:
        """The mean and covariance of all the rows: the class moments pooled.

        Returns
        -------
        mean : ndarray of shape (m,)
        covariance : ndarray of shape (m, m)
        """
        n = self.counts.sum()
        mean = self.counts @ self.means / n
        between = between_class_scatter(self.counts, self.means, mean) / n
        return mean, symmetrize(self._within() + between)

    def _within(self) -> np.ndarray:
        """The pooled within-class covariance, before symmetrisation."""
        return np.einsum("c,cij->ij", self.counts, self.covariances) / self.counts.sum()

    def summary(
        self,
        *,
        covariance: str = "total",
        covariance_floor: float = COVARIANCE_FLOOR,
        client: int | str | None = None,
    ) -> GaussianSummary:
        """The client's SLOT summary, from these moments alone (post-processing).

        The pooled mean and covariance (of all rows, or class-centred with
        ``covariance="within"``), shrunk with the OAS intensity of that
        covariance (:func:`skslot.ledoit_wolf.oas_shrinkage`; Ledoit-Wolf's would
        need the rows' fourth moments).

        Parameters
        ----------
        covariance : {"total", "within"}, default="total"
        covariance_floor : float, default=1e-8
        client : int or str, optional

        Returns
        -------
        GaussianSummary
        """
        n = self.n_samples
        if covariance == "within":
            mean, S = self.counts @ self.means / self.counts.sum(), symmetrize(self._within())
        else:
            mean, S = self.total()
        return shrunk_summary(
            n, mean, S, oas_shrinkage(S, n), covariance_floor=covariance_floor, client=client
        )


def private_class_moments(
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    *,
    clip_norm: float,
    sigma: float,
    rng: np.random.Generator,
) -> ClassMoments:
    """Each class's count, mean and covariance of ``X, y``, released with the Gaussian mechanism.

    Parameters
    ----------
    X : ndarray of shape (n, m)
        The client's rows (not modified; clipped chunk by chunk).
    y : ndarray of shape (n,)
        Their labels, each one of ``classes``.
    classes : ndarray of shape (C,)
        The run's class set, sorted.
    clip_norm : float
        The public bound ``C`` rows are clipped to.
    sigma : float
        Standard deviation of the noise on every entry, in units of ``C``.
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    ClassMoments
        In the rows' units.
    """
    n, m = X.shape
    counts, sums, grams = _clipped_class_sums(X, y, classes, clip_norm, per_class=True)
    counts = counts + rng.normal(scale=sigma, size=counts.shape)
    sums += rng.normal(scale=sigma, size=sums.shape)
    grams = symmetrize(grams)
    for gram in grams:  # every class's Gram is noised, held or not
        gram += symmetric_noise(m, sigma, rng)
    counts = rounded_counts(counts, n)
    means = np.zeros_like(sums)
    covariances = np.zeros_like(grams)
    for k in np.flatnonzero(counts > 0):
        means[k] = sums[k] / counts[k]
        covariances[k] = psd_projection(grams[k] / counts[k] - np.outer(means[k], means[k]))
    C = clip_norm
    return ClassMoments(np.asarray(classes), counts, C * means, (C * C) * covariances)


def private_class_counts(
    y: np.ndarray, classes: np.ndarray, *, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """The class counts of ``y`` released with the Gaussian mechanism, rounded to add up to ``n``.

    Parameters
    ----------
    y : ndarray of shape (n,)
        The labels, each one of ``classes``.
    classes : ndarray of shape (C,)
        The run's class set, sorted.
    sigma : float
        Standard deviation of the noise on each count
        (sensitivity :data:`CLASS_COUNTS_SENSITIVITY`).
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    counts : ndarray of int64, shape (C,)
        Non-negative, adding up to ``n`` (:func:`rounded_counts`).
    """
    counts = np.bincount(np.searchsorted(classes, y), minlength=classes.shape[0])
    noisy = counts + rng.normal(scale=sigma, size=counts.shape)
    return rounded_counts(noisy, y.shape[0]).astype(np.int64)


def private_local_head(
    X: np.ndarray,
    codes: np.ndarray,
    n_classes: int,
    *,
    C: float,
    clip_norm: float,
    sigma: float,
    rng: np.random.Generator,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray]:
    """A multinomial logistic-regression head released by output perturbation.

    See the module's description: rows clipped to ``clip_norm``, every
    parameter penalised, solved until the gradient's norm is below
    :data:`LOCAL_HEAD_GRADIENT_TOL` (a certified descent completing it where
    the solver stops short), then noised.

    Parameters
    ----------
    X : ndarray of shape (n, m)
        The (aligned) rows; not modified.
    codes : ndarray of shape (n,)
        Each row's class, as an index into the class set.
    n_classes : int
        The size of the class set.
    C : float
        The head's inverse L2 regularisation strength, in the rows' units.
    clip_norm : float
        The public bound rows are clipped to.
    sigma : float
        Standard deviation of the noise on each parameter in units of the
        clip norm (``noise_multiplier * LOCAL_HEAD_SENSITIVITY * C' / 2``).
    rng : numpy.random.Generator
        Source of the noise.
    max_iter : int
        Most solver iterations.

    Returns
    -------
    coef : ndarray of shape (n_classes, m)
    intercept : ndarray of shape (n_classes,)

    Notes
    -----
    Where L-BFGS stops short of the tolerance within ``max_iter`` iterations
    (three times), :func:`certified_descent` goes on from there: the release
    never depends on whether a solver converged, only its time does.
    """
    X = np.asarray(X, dtype=np.float64)
    m = X.shape[1]
    U = X * (clip_factors(np.linalg.norm(X, axis=1), clip_norm) / clip_norm)[:, None]
    C_units = C * clip_norm * clip_norm
    theta = np.zeros((n_classes, m + 1))
    objective = softmax_objective(U, codes, n_classes, C=C_units, penalise_intercept=True)
    for _ in range(3):  # L-BFGS may stop on its function tolerance: start again from there
        with warnings.catch_warnings():  # convergence is checked below, on the gradient's norm
            warnings.simplefilter("ignore", ConvergenceWarning)
            theta, _ = fit_softmax_regression(
                U,
                codes,
                n_classes,
                C=C_units,
                max_iter=max_iter,
                tol=LOCAL_HEAD_GRADIENT_TOL / math.sqrt(theta.size),
                init=theta,
                penalise_intercept=True,
            )
        if np.linalg.norm(objective(theta.ravel())[1]) <= LOCAL_HEAD_GRADIENT_TOL:
            break
    else:  # no refusal, whose bit would depend on the data: a descent certain to get there
        theta = certified_descent(objective, theta, n_rows=U.shape[0], C=C_units)
    theta = theta + rng.normal(scale=sigma, size=theta.shape)
    return theta[:, :m] / clip_norm, theta[:, m].copy()


def certified_descent(
    objective: Callable[[np.ndarray], tuple[float, np.ndarray]],
    theta: np.ndarray,
    *,
    n_rows: int,
    C: float,
    tol: float = LOCAL_HEAD_GRADIENT_TOL,
) -> np.ndarray:
    """Gradient descent from ``theta`` to within ``C * tol`` of the minimiser, certainly.

    The objective (:func:`~skslot.heads._softmax.softmax_objective` with the
    intercept penalised, rows in the unit ball) is ``1 / C`` strongly convex
    and ``n + 1 / C`` smooth (each row's loss Hessian is at most
    ``||[u; 1]||^2 / 2 <= 1``), so a step of ``1 / (n + 1 / C)`` contracts
    the distance to the minimiser by ``q = 1 - 1 / (1 + n C)`` per step
    (Nesterov 2004, Theorem 2.1.15).  Starting at distance at most
    ``C ||grad||`` (strong convexity), ``ceil(log(||grad|| / tol) / -log q)``
    steps end within ``C * tol`` of it, whatever the data: the release's
    sensitivity holds without a convergence test the data could fail.  The
    descent stops earlier where the gradient's norm reaches ``tol``.

    Parameters
    ----------
    objective : callable
        ``objective(theta) -> (value, gradient)`` of the packed parameters.
    theta : ndarray
        The start; not modified.
    n_rows : int
        The number of rows the objective sums over.
    C : float
        The objective's inverse regularisation strength.
    tol : float, default=LOCAL_HEAD_GRADIENT_TOL

    Returns
    -------
    ndarray
        A point within ``C * tol`` of the minimiser, of ``theta``'s shape.
    """
    shape, theta = theta.shape, theta.ravel().copy()
    gradient = objective(theta)[1]
    norm = float(np.linalg.norm(gradient))
    if norm <= tol:
        return theta.reshape(shape)
    step = 1.0 / (n_rows + 1.0 / C)
    rate = -math.log1p(-1.0 / (1.0 + n_rows * C))
    for _ in range(math.ceil(math.log(norm / tol) / rate)):
        theta -= step * gradient
        gradient = objective(theta)[1]
        if np.linalg.norm(gradient) <= tol:
            break
    return theta.reshape(shape)
