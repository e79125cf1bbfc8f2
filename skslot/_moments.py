"""Exactly mergeable first-to-fourth order moments of a stream of rows.

A client that summarises its features, a worker that summarises one shard, or a
head that aggregates class statistics all need the same thing: the count, mean
and scatter matrix of some rows, computed chunk by chunk and merged across
parties without loss.  This module keeps power sums about a *shift* point ``c``

    n,  s1 = sum z,  G = sum z z^T,  s3 = sum ||z||^2 z,  s4 = sum ||z||^4,

with ``z = x - c``.  Power sums about any other point follow by exact
polynomial identities (:meth:`ShiftedMoments.recentred`), so two partial
results are merged by moving one to the other's shift and adding.  Keeping the
shift close to the mean (the first chunk's mean) avoids the cancellation of
raw moments about zero.  ``s3`` and ``s4`` are what the Ledoit-Wolf shrinkage
needs: ``sum_i ||x_i - mean||^4`` without a second ``n x m x m`` product.

The same pass also bounds the largest feature magnitude of the rows
(:class:`RowMagnitude`, from the row norms it computes anyway), so input checks
on the scale and finiteness of the rows need no second pass over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._backend import (
    as_host,
    empty_like_rows,
    is_tensor,
    matmul_into,
    row_index,
    row_norms_squared_into,
    stack,
    subtract_into,
    to_backend,
)

DEFAULT_CHUNK_SIZE = 4096


@dataclass(frozen=True)
class RowMagnitude:
    """Bounds on ``max |x_ij|``, the largest feature magnitude of the rows one pass read.

    They come from what the moments pass computes anyway, its shift ``c`` and
    the squared row norms ``r_i = ||x_i - c||^2`` (before any clipping)::

        max(sqrt(max r / m) - |c|_inf, |c|_inf if c is a mean of the rows)
            <=  max |x_ij|  <=  |c|_inf + sqrt(max r)

    since ``|x_ij| <= ||x_i - c|| + |c_j|`` and ``|x_ij - c_j| <= |x_ij| + |c_j|``.
    A non-finite value in the rows makes ``upper`` NaN or infinite (so does a
    square that overflows float64); ``lower`` is 0 when nothing is known.
    """

    lower: float
    upper: float

    @classmethod
    def of_pass(cls, shift: np.ndarray, largest_r: float, *, shift_is_mean: bool) -> RowMagnitude:
        """The bounds from a pass's shift and largest squared row norm ``max r``."""
        c = float(np.max(np.abs(shift)))
        root = float(np.sqrt(largest_r / shift.shape[0]))
        lower = max(root - c, c if shift_is_mean else 0.0, 0.0)  # NaN stays NaN
        return cls(lower, c + float(np.sqrt(largest_r)))

    @classmethod
    def join(cls, parts: list[RowMagnitude]) -> RowMagnitude:
        """Bounds for the union of the rows (NaN propagates)."""
        return cls(float(np.max([p.lower for p in parts])), float(np.max([p.upper for p in parts])))

    def within(self, low: float, high: float) -> bool:
        """Whether ``low <= max |x_ij| <= high`` for certain, with a factor 2 to spare.

        The margin covers the rounding of the shift and of the row norms; when
        it is ``False`` the rows may still be in range, and only an exact check
        (a pass over them) can tell.  ``False`` for NaN bounds.
        """
        return bool(self.lower >= 2.0 * low and self.upper <= 0.5 * high)


@dataclass(frozen=True, eq=False)
class ShiftedMoments:
    """Power sums of rows about a shift point (see the module docstring).

    Parameters
    ----------
    n : float
        Number of rows (a weight once scaled, as by
        :meth:`skslot.heads.ClassStatistics.scaled`; an int from :meth:`from_rows`).
    shift : ndarray of shape (m,)
        The point ``c`` the sums are taken about.
    s1, gram : ndarray
        ``sum z`` and ``sum z z^T`` with ``z = x - c``.
    s3, s4 : ndarray or float, optional
        ``sum ||z||^2 z`` and ``sum ||z||^4``; ``None`` when not tracked.
    """

    n: float
    shift: np.ndarray
    s1: np.ndarray
    gram: np.ndarray
    s3: np.ndarray | None = None
    s4: float | None = None

    @property
    def fourth_order(self) -> bool:
        return self.s3 is not None

    @classmethod
    def from_rows(
        cls,
        X: Any,
        *,
        rows: np.ndarray | None = None,
        shift: np.ndarray | None = None,
        fourth_order: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        clip_norm: float | None = None,
    ) -> ShiftedMoments:
        """Power sums of the rows of ``X`` (or of ``X[rows]``), ``chunk_size`` at a time.

        Only one chunk is ever gathered and converted to float64, so a float32
        ``X`` is not copied as a whole.  A torch tensor is reduced in torch on
        its device; the sums come back to the host.  The default shift is the mean of the
        first chunk.  With ``clip_norm``, each row ``x - shift`` is first
        scaled to Euclidean norm at most ``clip_norm`` (differential privacy
        clips about a data-free shift, zero).
        """
        return _power_sums(X, rows, shift, fourth_order, chunk_size, clip_norm, False)[0]

    @classmethod
    def with_magnitude(
        cls,
        X: Any,
        *,
        rows: np.ndarray | None = None,
        shift: np.ndarray | None = None,
        fourth_order: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        clip_norm: float | None = None,
    ) -> tuple[ShiftedMoments, RowMagnitude]:
        """:meth:`from_rows`, and the :class:`RowMagnitude` of the rows from the same pass.

        It is meant for rows not yet checked for finiteness: a NaN or an
        infinity then only makes the sums and the bounds non-finite (no
        floating-point warning), for the caller to check the rows exactly
        when :meth:`RowMagnitude.within` is ``False``.
        """
        with np.errstate(over="ignore", invalid="ignore"):
            moments, largest_r = _power_sums(
                X, rows, shift, fourth_order, chunk_size, clip_norm, True
            )
        assert largest_r is not None  # the pass computes it when asked
        magnitude = RowMagnitude.of_pass(moments.shift, largest_r, shift_is_mean=shift is None)
        return moments, magnitude

    def recentred(self, shift: np.ndarray) -> ShiftedMoments:
        """The same power sums about another point (exact identities)."""
        d = self.shift - shift
        n, s1, G = self.n, self.s1, self.gram
        dd = float(d @ d)
        s1d = float(s1 @ d)
        Gd = G @ d
        new_s1 = s1 + n * d
        new_gram = G + np.outer(s1, d) + np.outer(d, s1) + n * np.outer(d, d)
        new_s3: np.ndarray | None = None
        new_s4: float | None = None
        if self.s3 is not None and self.s4 is not None:  # tracked together (fourth_order)
            trG = float(np.trace(G))
            new_s3 = self.s3 + trG * d + 2.0 * Gd + 2.0 * s1d * d + dd * s1 + n * dd * d
            new_s4 = (
                self.s4
                + 4.0 * float(d @ Gd)
                + n * dd * dd
                + 4.0 * float(self.s3 @ d)
                + 2.0 * dd * trG
                + 4.0 * dd * s1d
            )
        return ShiftedMoments(n, shift, new_s1, new_gram, new_s3, new_s4)

    def merge(self, other: ShiftedMoments) -> ShiftedMoments:
        """Moments of the union of the two sets of rows."""
        if other.shift.shape != self.shift.shape:
            raise ValueError(
                f"cannot merge moments of dimension {other.shift.shape[0]} into "
                f"moments of dimension {self.shift.shape[0]}"
            )
        if other.fourth_order != self.fourth_order:
            raise ValueError("cannot merge moments with and without 4th order sums")
        if self.n == 0:
            return other
        if other.n == 0:
            return self
        o = other.recentred(self.shift)
        return ShiftedMoments(
            self.n + o.n,
            self.shift,
            self.s1 + o.s1,
            self.gram + o.gram,
            None if o.s3 is None or self.s3 is None else self.s3 + o.s3,
            None if o.s4 is None or self.s4 is None else self.s4 + o.s4,
        )

    @property
    def mean(self) -> np.ndarray:
        return self.shift + self.s1 / self.n

    def centred(self) -> ShiftedMoments:
        """The power sums about the mean: ``gram`` is then the scatter matrix."""
        return self.recentred(self.mean)


def clip_factors(norms: Any, clip_norm: float) -> Any:
    """Each row's factor that scales it to Euclidean norm at most ``clip_norm``.

    ``clip_norm / max(norm, clip_norm)``: one for a row within the bound.

    Parameters
    ----------
    norms : array of shape (n,)
        The rows' Euclidean norms (NumPy or torch).
    clip_norm : float
        The bound, ``> 0``.

    Returns
    -------
    array of shape (n,)
    """
    return clip_norm / norms.clip(min=clip_norm)


def _power_sums(
    X: Any,
    rows: np.ndarray | None,
    shift: np.ndarray | None,
    fourth_order: bool,
    chunk_size: int,
    clip_norm: float | None,
    magnitude: bool,
) -> tuple[ShiftedMoments, float | None]:
    """The pass of :meth:`ShiftedMoments.from_rows`: the power sums, and with ``magnitude``
    the largest squared row norm about the shift (before clipping)."""

    def read(start: int, stop: int) -> Any:
        if rows is None:
            return X[start:stop]
        return X[row_index(rows[start:stop], X)]

    n = X.shape[0] if rows is None else rows.shape[0]
    m = X.shape[1]
    if shift is None:  # summed in float64: a float32 sum of large values overflows
        first = read(0, chunk_size)
        total_first = first.double().sum(0) if is_tensor(first) else first.sum(0, np.float64)
        shift = as_host(total_first) / first.shape[0]
    shift = np.asarray(shift, dtype=np.float64)
    # One symmetric product per chunk gives every sum: with B = [Z, 1, r],
    # r_i = ||z_i||^2, B^T B holds Z^T Z, s1 = Z^T 1, s3 = Z^T r and s4 = r^T r.
    width = m + (2 if fourth_order else 1)
    buffer = empty_like_rows(X, (min(chunk_size, n), width), float64=True)
    buffer[:, m] = 1.0
    norms = empty_like_rows(X, (min(chunk_size, n),), float64=True)
    shift_b = to_backend(shift, X)
    total = to_backend(np.zeros((width, width)), X)
    product = empty_like_rows(X, (width, width), float64=True)  # reused, not reallocated
    peaks = []  # each chunk's largest r_i (0-d: no device sync per chunk)
    for start in range(0, n, chunk_size):
        chunk = read(start, start + chunk_size)
        B = buffer[: chunk.shape[0]]
        Z = B[:, :m]
        subtract_into(chunk, shift_b, Z)  # cast and centre in one pass
        r = B[:, m + 1] if fourth_order else norms[: chunk.shape[0]]
        if fourth_order or clip_norm is not None or magnitude:
            row_norms_squared_into(Z, r)
        if magnitude:
            peaks.append(r.max())
        if clip_norm is not None:
            scale = clip_factors(r**0.5, clip_norm)
            Z *= scale[:, None]
            # r * scale^2, also where r overflowed to inf (a huge finite row: its scale is 0)
            r[...] = r.clip(max=clip_norm * clip_norm)
        total += matmul_into(B.T, B, product)  # NumPy runs A^T A as a symmetric rank-k update
    largest_r = float(as_host(stack(peaks)).max()) if magnitude else None  # NaN propagates
    total = as_host(total) if is_tensor(total) else total
    s1, gram = total[:m, m].copy(), total[:m, :m].copy()
    if not fourth_order:
        return ShiftedMoments(n, shift, s1, gram), largest_r
    s3, s4 = total[:m, m + 1].copy(), float(total[m + 1, m + 1])
    return ShiftedMoments(n, shift, s1, gram, s3, s4), largest_r
