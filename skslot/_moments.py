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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._backend import (
    as_host,
    empty_like_rows,
    is_tensor,
    row_index,
    row_norms_squared_into,
    subtract_into,
    to_backend,
)

__all__ = ["DEFAULT_CHUNK_SIZE", "ShiftedMoments"]

DEFAULT_CHUNK_SIZE = 4096


@dataclass(frozen=True, eq=False)
class ShiftedMoments:
    """Power sums of rows about a shift point (see the module docstring).

    Parameters
    ----------
    n : int
        Number of rows.
    shift : ndarray of shape (m,)
        The point ``c`` the sums are taken about.
    s1, gram : ndarray
        ``sum z`` and ``sum z z^T`` with ``z = x - c``.
    s3, s4 : ndarray or float, optional
        ``sum ||z||^2 z`` and ``sum ||z||^4``; ``None`` when not tracked.
    """

    n: int
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
        for start in range(0, n, chunk_size):
            chunk = read(start, start + chunk_size)
            B = buffer[: chunk.shape[0]]
            Z = B[:, :m]
            subtract_into(chunk, shift_b, Z)  # cast and centre in one pass
            r = B[:, m + 1] if fourth_order else norms[: chunk.shape[0]]
            if fourth_order or clip_norm is not None:
                row_norms_squared_into(Z, r)
            if clip_norm is not None:
                scale = clip_norm / (r**0.5).clip(min=clip_norm)
                Z *= scale[:, None]
                r *= scale * scale
            total += B.T @ B  # NumPy runs A^T A as a symmetric rank-k update
        total = as_host(total)
        gram = total[:m, :m].copy()
        s1 = total[:m, m].copy()
        if not fourth_order:
            return cls(n, shift, s1, gram)
        return cls(n, shift, s1, gram, total[:m, m + 1].copy(), float(total[m + 1, m + 1]))

    def recentred(self, shift: np.ndarray) -> ShiftedMoments:
        """The same power sums about another point (exact identities)."""
        d = self.shift - shift
        n, s1, G = self.n, self.s1, self.gram
        dd = float(d @ d)
        s1d = float(s1 @ d)
        Gd = G @ d
        new_s1 = s1 + n * d
        new_gram = G + np.outer(s1, d) + np.outer(d, s1) + n * np.outer(d, d)
        new_s3 = new_s4 = None
        if self.fourth_order:
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
            None if o.s3 is None else self.s3 + o.s3,
            None if o.s4 is None else self.s4 + o.s4,
        )

    @property
    def mean(self) -> np.ndarray:
        return self.shift + self.s1 / self.n

    def centred(self) -> ShiftedMoments:
        """The power sums about the mean: ``gram`` is then the scatter matrix."""
        return self.recentred(self.mean)
