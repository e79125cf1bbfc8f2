"""Differentially private Gaussian summaries: clipping, the Gaussian mechanism, PD repair.

A client that must not reveal any single row through its summary releases
its first and second moments with the Gaussian mechanism:

1. every row is scaled to Euclidean norm at most ``C`` (``clip_norm``), then
   divided by ``C``, so every row lies in the unit ball;
2. the sums of those rows ``s1 = sum_i u_i`` and ``G = sum_i u_i u_i^T``
   (about zero, so no data-dependent shift leaks) receive independent
   ``N(0, sigma^2)`` noise on each entry of ``s1`` and of the upper triangle
   of ``G`` (mirrored);
3. everything after that is post-processing, which costs no privacy: the
   mean ``C s1 / n``, the covariance ``C^2 (G / n - s1 s1^T / n^2)``, its projection
   onto the positive semi-definite cone, and the shrinkage towards
   ``mu I`` (the oracle approximating shrinkage of Chen et al., a function of
   the noisy covariance only, in place of Ledoit-Wolf's, which would need the
   rows' fourth moments).

Guarantee: the released ``(s1, G)`` is ``(epsilon, delta)``-differentially
private for datasets that differ by *replacing* one row, with the row count
``n`` public (it travels in the clear).  Replacing ``u`` by ``v`` (both in the
unit ball, ``a = |u|``, ``b = |v|``, ``c`` the cosine of their angle) moves
``(s1, upper(G))`` by at most ``sqrt(f)`` in L2 norm, with
``f = |u - v|^2 + ||u u^T - v v^T||_F^2 = a^2 + b^2 + a^4 + b^4 - 2abc - 2a^2 b^2 c^2``.
As a quadratic in ``c``, ``f`` is largest at ``c = -1 / (2ab)`` when
``ab >= 1/2`` (``f <= a^2 + b^2 + a^4 + b^4 + 1/2 <= 9/2``) and at ``c = -1``
otherwise (``f = (a + b)^2 + (a^2 - b^2)^2 < 3``), so the L2 sensitivity of
the release is ``Delta = sqrt(9/2) = 3 / sqrt(2)``, reached by two unit rows
at 120 degrees.  Working in units of
``C`` makes the mechanism equivariant: scaling the features and ``C``
together scales the summary and leaves its relative noise unchanged.
``sigma`` is the smallest
noise scale for which the Gaussian mechanism is ``(epsilon, delta)``-DP, from
the one calibrator of every release (:func:`skslot.privacy.gaussian_noise_scale`,
which meets the exact condition of Balle and Wang [1]_ for every ``epsilon > 0``,
unlike the classical ``sqrt(2 ln(1.25 / delta)) / epsilon`` bound, which needs
``epsilon < 1``).

References
----------
.. [1] Balle and Wang, "Improving the Gaussian mechanism for differential
   privacy: analytical calibration and optimal denoising", ICML 2018.
.. [2] Dwork and Roth, "The algorithmic foundations of differential privacy",
   2014, Appendix A (the classical Gaussian mechanism).
.. [3] Chen, Wiesel, Eldar and Hero, "Shrinkage algorithms for MMSE
   covariance estimation", IEEE Transactions on Signal Processing, 2010.
"""

from __future__ import annotations

import math
import secrets
import warnings
from typing import Any

import numpy as np
from sklearn.utils import check_random_state

from .._linalg import sym_eigh, symmetric_from_upper, symmetrize
from .._moments import ShiftedMoments
from ..defaults import COVARIANCE_FLOOR
from ..gaussian import GaussianSummary
from ..ledoit_wolf import oas_shrinkage, shrunk_summary

#: L2 sensitivity of ``(s1, upper(G))`` of rows in the unit ball, under replace-one.
SUMMARY_SENSITIVITY = 3.0 / math.sqrt(2.0)


def private_covariance_problem(covariance: str) -> str | None:
    """Why a summary of ``covariance`` has no private release, or ``None``.

    The one rule, at every boundary that releases a summary (the estimator,
    the protocol's settings and a private client): only the total
    covariance's sensitivity is derived (:data:`SUMMARY_SENSITIVITY`).

    Parameters
    ----------
    covariance : {"total", "within"}

    Returns
    -------
    str or None

    Examples
    --------
    >>> private_covariance_problem("total") is None
    True
    >>> print(private_covariance_problem("within"))  # doctest: +ELLIPSIS
    a summary of the 'within' covariance has no calibrated ... release (its sensitivity is not ...
    """
    if covariance == "total":
        return None
    return (
        f"a summary of the {covariance!r} covariance has no calibrated differentially private "
        "release (its sensitivity is not derived; a summary of the total covariance has one)"
    )


class PrivacyWarning(UserWarning):
    """A setting weakens the differential-privacy guarantee (a fixed seed, a large delta)."""


def noise_generator(random_state: Any, delta: float, n: int, client: Any) -> np.random.Generator:
    """The generator of one private release, and warnings about settings that weaken it.

    ``random_state=None`` (the default, and the only setting for production)
    draws fresh entropy from the operating system for every release: nothing
    in the process (``np.random.seed``, another library's seeding) can make
    the noise reproducible.  A fixed ``random_state`` makes it reproducible by
    anyone who knows the seed, and gives identical noise to every release of
    the same estimator (two releases of data differing by one row then differ
    by exactly that row's contribution): a :class:`PrivacyWarning` says so.
    ``delta`` above ``1 / n`` allows releasing a row outright with probability
    ``delta``: a :class:`PrivacyWarning` too.

    Parameters
    ----------
    random_state : None, int or RandomState
        ``None`` for fresh OS entropy; anything else seeds the noise (with a warning).
    delta : float
        The release's ``delta``, compared with ``1 / n``.
    n : int
        The client's row count.
    client : object
        The client's label, named in the warnings.

    Returns
    -------
    rng : numpy.random.Generator
        The generator of the release's noise.
    """
    warn_large_delta(delta, n, client, stacklevel=4)
    return np.random.default_rng(noise_seed(random_state, stacklevel=4))


def warn_large_delta(delta: float, n: int, client: Any, *, stacklevel: int = 3) -> None:
    """A :class:`PrivacyWarning` when ``delta`` exceeds ``1 / n``.

    Parameters
    ----------
    delta : float
        The release's ``delta``.
    n : int
        The client's row count.
    client : object
        The client's label, named in the warning.
    stacklevel : int, default=3
        Passed to :func:`warnings.warn`.
    """
    if delta > 1.0 / n:
        warnings.warn(
            f"delta = {delta:g} exceeds 1 / n = {1.0 / n:.3g} for client {client!r}: a mechanism "
            "may then reveal a row outright; use delta well below 1 / n",
            PrivacyWarning,
            stacklevel=stacklevel,
        )


def noise_seed(random_state: Any, *, stacklevel: int = 3) -> int:
    """The seed of a release's noise: fresh OS entropy, or (with a warning) from ``random_state``.

    Parameters
    ----------
    random_state : None, int or RandomState
        ``None`` for 63 bits of fresh operating-system entropy.
    stacklevel : int, default=3
        Passed to :func:`warnings.warn`.

    Returns
    -------
    int
        In ``[0, 2**63)``.
    """
    if random_state is None:
        return secrets.randbits(63)  # fresh OS entropy for every release
    warnings.warn(
        "random_state fixes the privacy noise: anyone who knows the seed can remove it, "
        "and repeated releases share it; use random_state=None outside tests",
        PrivacyWarning,
        stacklevel=stacklevel,
    )
    return int(check_random_state(random_state).randint(2**31 - 1))


def noisy_moments(
    moments: ShiftedMoments, sigma: float, rng: np.random.Generator
) -> ShiftedMoments:
    """``s1`` and ``G`` (about zero) plus Gaussian noise, symmetric on ``G``.

    Parameters
    ----------
    moments : ShiftedMoments
        Sums of rows about zero (a non-zero shift raises ``ValueError``).
    sigma : float
        Standard deviation of the noise on each entry of ``s1`` and of the
        upper triangle of ``G``.
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    noisy : ShiftedMoments
        The same count and shift, noisy ``s1`` and ``G``.
    """
    if np.any(moments.shift != 0):
        raise ValueError("private sums must be taken about zero (a data-free shift)")
    m = moments.s1.shape[0]
    gram = moments.gram + symmetric_noise(m, sigma, rng)  # drawn first, then s1's
    s1 = moments.s1 + rng.normal(scale=sigma, size=m)
    return ShiftedMoments(moments.n, moments.shift, s1, gram)  # no fourth order


def symmetric_noise(m: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """An ``m x m`` symmetric matrix of ``N(0, sigma^2)`` noise, drawn on its upper triangle.

    The noise of a released Gram matrix: the upper triangle (diagonal
    included) is what the mechanism's sensitivity counts, mirrored below.

    Parameters
    ----------
    m : int
        The dimension.
    sigma : float
        Standard deviation of each drawn entry.
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    ndarray of shape (m, m)
    """
    return symmetric_from_upper(rng.normal(scale=sigma, size=m * (m + 1) // 2), m)


def private_summary(
    moments: ShiftedMoments,
    *,
    clip_norm: float,
    sigma: float,
    rng: np.random.Generator,
    covariance_floor: float = COVARIANCE_FLOOR,
    client: int | str | None = None,
) -> GaussianSummary:
    """The summary released from the sums of rows clipped to ``clip_norm`` about zero.

    The sums are released in units of ``clip_norm`` (rows in the unit ball,
    sensitivity :data:`SUMMARY_SENSITIVITY`; :func:`noisy_moments`); the mean
    and covariance, projected onto the positive semi-definite cone
    (:func:`psd_projection`), are mapped back and shrunk by OAS
    (:func:`~skslot.ledoit_wolf.oas_shrinkage`), post-processing of the release
    alone.

    Parameters
    ----------
    moments : ShiftedMoments
        Sums of the clipped rows about zero (no fourth order).
    clip_norm : float
        The clipping norm ``C``.
    sigma : float
        Standard deviation of the noise, in units of ``clip_norm``.
    rng : numpy.random.Generator
        Source of the noise.
    covariance_floor : float, default=1e-8
        The relative floor on the covariance's smallest eigenvalue.
    client : int, str or None, default=None
        The label the summary carries.

    Returns
    -------
    GaussianSummary
    """
    C, n = clip_norm, int(moments.n)
    unit = ShiftedMoments(n, moments.shift, moments.s1 / C, moments.gram / (C * C))
    noisy = noisy_moments(unit, sigma, rng)
    mean = noisy.s1 / n
    S = (C * C) * psd_projection(noisy.gram / n - np.outer(mean, mean))
    return shrunk_summary(
        n, C * mean, S, oas_shrinkage(S, n), covariance_floor=covariance_floor, client=client
    )


def psd_projection(S: np.ndarray) -> np.ndarray:
    """The nearest positive semi-definite matrix in Frobenius norm (negative eigenvalues to 0).

    Parameters
    ----------
    S : ndarray of shape (m, m)
        A matrix, symmetrised first.

    Returns
    -------
    S_psd : ndarray of shape (m, m)
    """
    return symmetrize(sym_eigh(symmetrize(S)).apply(lambda w: w.clip(min=0.0)))
