"""Class statistics a client sends: counts, class sums and the Gram matrix.

These are FedCGS's client statistics (Guan et al., AAAI 2025) and the only
first- and second-order information the Gaussian heads need.  The Gram matrix
is kept as exactly mergeable power sums about a shift (see
:mod:`skslot._moments`), which are algebraically the raw ``sum x x^T`` but do
not lose precision when features have a large mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from numbers import Real
from typing import Any

import numpy as np

from .._linalg import is_positive_definite, symmetric_from_upper, symmetrize, upper_triangle
from .._moments import ShiftedMoments
from .._param_validation import Interval
from .._validation import check_option
from ..defaults import COVARIANCE_FLOOR
from ..gaussian import GaussianSummary
from ..label_shift import class_sums
from ..ledoit_wolf import ledoit_wolf_shrinkage, oas_shrinkage, shrunk_summary
from ..maps import GaussianMap
from ..wire import StatisticsFormatError
from ..wire.arrays import ArrayMessage, check_psd_up_to_rounding, read_array, read_sample_count
from ._mixtures import ImpliedMoments


@dataclass(frozen=True, eq=False)
class ClassStatistics:
    """Per-class counts and sums, and the second moments of all rows.

    Attributes
    ----------
    classes : ndarray of shape (C,)
        The global class set (a client may have zero rows of some classes).
    counts : ndarray of shape (C,)
    sums : ndarray of shape (C, m)
        Sum of the rows of each class.
    moments : ShiftedMoments
        Count, sum and Gram matrix of all rows.
    """

    classes: np.ndarray
    counts: np.ndarray
    sums: np.ndarray
    moments: ShiftedMoments

    @property
    def n_features(self) -> int:
        """The dimension ``m`` of the rows."""
        return self.sums.shape[1]

    def class_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows of each class and their sums: what the domain offsets are measured from.

        Returns
        -------
        counts : ndarray of shape (C,)
        sums : ndarray of shape (C, m)
        """
        return np.asarray(self.counts, dtype=np.float64), self.sums

    def class_counts(self) -> np.ndarray:
        """Rows of each class (int64), in the order of ``classes``.

        Returns
        -------
        counts : ndarray of shape (C,)
        """
        return np.rint(self.counts).astype(np.int64)

    @classmethod
    def from_rows(cls, X: np.ndarray, y: np.ndarray, classes: np.ndarray) -> ClassStatistics:
        """The statistics of a client's rows.

        Parameters
        ----------
        X : ndarray of shape (n_samples, m)
        y : ndarray of shape (n_samples,)
            Labels, each one of ``classes``.
        classes : ndarray of shape (C,)
            The global class set, sorted.

        Returns
        -------
        ClassStatistics
        """
        counts, sums = class_sums(X, y, classes)
        moments = ShiftedMoments.from_rows(X, fourth_order=False)
        # exactly symmetric, as the server decodes it from the upper triangle: a summary
        # derived from these statistics (:meth:`summary`) is the same on both sides
        moments = ShiftedMoments(moments.n, moments.shift, moments.s1, symmetrize(moments.gram))
        return cls(classes, counts.astype(np.float64), sums, moments)

    @classmethod
    def combine(cls, parts: Sequence[ClassStatistics]) -> ClassStatistics:
        """Statistics of the union of the clients' rows.

        Parameters
        ----------
        parts : sequence of ClassStatistics
            At least one, all over the same class set (``ValueError`` otherwise).

        Returns
        -------
        ClassStatistics
        """
        first = parts[0]
        if any(not np.array_equal(p.classes, first.classes) for p in parts):
            raise ValueError("client statistics use different class sets")
        return cls(
            first.classes,
            sum((p.counts for p in parts), np.zeros_like(first.counts)),
            sum((p.sums for p in parts), np.zeros_like(first.sums)),
            reduce(ShiftedMoments.merge, [p.moments for p in parts]),
        )

    def scaled(self, factor: float) -> ClassStatistics:
        """The statistics weighted by ``factor`` (a server capping a client's weight).

        Parameters
        ----------
        factor : float
            Multiplies the counts, the class sums and the moments.

        Returns
        -------
        ClassStatistics
        """
        m = self.moments
        moments = ShiftedMoments(m.n * factor, m.shift, factor * m.s1, factor * m.gram)
        return ClassStatistics(self.classes, factor * self.counts, factor * self.sums, moments)

    def merge(self, other: ClassStatistics) -> ClassStatistics:
        """The statistics of the union of the two messages' rows (exact).

        Parameters
        ----------
        other : ClassStatistics
            Statistics over the same class set.

        Returns
        -------
        ClassStatistics
        """
        return ClassStatistics.combine([self, other])

    def aligned(self, ot_map: GaussianMap) -> ClassStatistics:
        """The statistics of the rows ``T(x)``, computed from these alone (exact).

        What a server holding a client's map ``T`` computes instead of asking
        the client to align its rows first (:meth:`GaussianMap.push_sums`,
        :meth:`GaussianMap.push_moments`).

        Parameters
        ----------
        ot_map : GaussianMap
            The client's map ``T``.

        Returns
        -------
        ClassStatistics
        """
        return ClassStatistics(
            self.classes,
            self.counts,
            ot_map.push_sums(self.sums, self.counts),
            ot_map.push_moments(self.moments),
        )

    @property
    def n_samples(self) -> int:
        """The number of rows the statistics describe."""
        return int(self.moments.n)

    def to_arrays(self) -> ArrayMessage:
        """The message a client sends (see :mod:`skslot.wire.arrays`).

        The Gram matrix travels as its upper triangle, ``m (m + 1) / 2`` values.

        Returns
        -------
        arrays : dict of str to ndarray
            ``"n"``, ``"counts"``, ``"sums"``, ``"shift"``, ``"s1"`` and ``"gram_upper"``.
        """
        moments = self.moments
        return {
            "n": np.asarray(moments.n, dtype=np.int64),
            "counts": self.counts,
            "sums": self.sums,
            "shift": moments.shift,
            "s1": moments.s1,
            "gram_upper": upper_triangle(moments.gram),
        }

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, Any],
        *,
        classes: np.ndarray,
        n_features: int,
        n_samples: int | None = None,
    ) -> ClassStatistics:
        """Decode a received message and check it is self-consistent.

        ``n_samples``, when given, is the count the same client announced in
        its summary; the class counts must add up to it.

        Parameters
        ----------
        arrays : mapping of str to ndarray
            The received message (:meth:`to_arrays`).
        classes : ndarray of shape (C,)
            The run's class set.
        n_features : int
            The run's dimension ``m``.
        n_samples : int, optional
            The row count the client announced.

        Returns
        -------
        ClassStatistics

        Raises
        ------
        StatisticsFormatError
            If an array is malformed, or the counts, sums and Gram matrix disagree.
        """
        C, m = len(classes), n_features
        n = read_sample_count(arrays, n_samples, "statistics count")
        counts = read_array(arrays, "counts", (C,), integer=True, nonnegative=True)
        if counts.sum() != n:
            raise StatisticsFormatError(f"class counts add up to {counts.sum()}, not n = {n}")
        sums = read_array(arrays, "sums", (C, m))
        if np.any(sums[counts == 0] != 0):
            raise StatisticsFormatError("a class with no rows has a non-zero class sum")
        moments = ShiftedMoments(
            n,
            read_array(arrays, "shift", (m,)),
            read_array(arrays, "s1", (m,)),
            symmetric_from_upper(read_array(arrays, "gram_upper", (m * (m + 1) // 2,)), m),
        )
        total = moments.s1 + n * moments.shift
        if not np.allclose(sums.sum(axis=0), total, rtol=1e-8, atol=1e-8 * np.abs(total).max()):
            raise StatisticsFormatError("class sums do not add up to the sum of all rows")
        scatter = moments.centred().gram
        check_psd_up_to_rounding("the Gram matrix", scatter, 1e-12)
        stats = cls(np.asarray(classes), counts.astype(np.float64), sums, moments)
        # the class sums' between-class scatter is part of the Gram's total scatter:
        # sum_c n_c (mu_c - mu)(mu_c - mu)^T <= sum_i (x_i - mu)(x_i - mu)^T, up to the
        # rounding of both at the scale of the total scatter (the within part may be 0)
        between = between_class_scatter(stats.counts, stats.class_means, moments.mean)
        within = symmetrize(scatter - between)
        ridge = m * 1e-10 * float(np.max(np.diagonal(scatter), initial=0.0))
        if np.any(np.diagonal(within) < -ridge) or not is_positive_definite(
            within + (ridge + np.finfo(np.float64).tiny) * np.eye(m)
        ):
            raise StatisticsFormatError(
                "the class sums imply more spread between the classes than the Gram matrix "
                "holds in all (its within-class scatter is not positive semi-definite)"
            )
        return stats

    def implied_moments(self, covariance: str = "total") -> ImpliedMoments:
        """The mean, a total variance ``tr(S)`` and the count of the rows these describe (all).

        ``S`` is the covariance of all rows (``covariance="total"``) or of the
        class-centred rows (``"within"``): what the server compares with the
        same client's summary of that kind
        (:func:`skslot.defence.inconsistent_statistics`).

        Parameters
        ----------
        covariance : {"total", "within"}, default="total"
            The covariance whose trace is returned.

        Returns
        -------
        ImpliedMoments
            The mean, ``tr(S)`` and the row count (``error`` zero: the sums are exact).
        """
        S = self._covariance(covariance)
        return ImpliedMoments(self.moments.mean, float(np.trace(S)), int(self.moments.n))

    def ledoit_wolf_shrinkage(
        self, X: np.ndarray, y: np.ndarray, *, covariance: str = "total", chunk_size: int = 4096
    ) -> float:
        """The Ledoit-Wolf shrinkage of the rows ``X, y`` these statistics describe.

        The client's step before it sends its shrinkage (:meth:`summary`): the
        estimate needs the covariance ``S`` of the rows (all of them, or
        class-centred with ``covariance="within"``), which the statistics hold,
        and the fourth-order sum ``sum_i ||x_i - c_i||^4`` about each row's
        centre ``c_i`` (the mean, or its class's mean), which they do not: one
        pass of ``O(n m)`` over the rows instead of a second Gram matrix
        (:func:`skslot.ledoit_wolf.ledoit_wolf_shrinkage`, exactly scikit-learn's
        on the centred rows).

        Parameters
        ----------
        X : ndarray of shape (n_samples, m)
            The rows these statistics were computed from.
        y : ndarray of shape (n_samples,)
            Their labels.
        covariance : {"total", "within"}, default="total"
            The covariance to shrink: of all rows, or of the class-centred rows.
        chunk_size : int, default=4096
            Rows per pass of the fourth-order sum (bounds the memory).

        Returns
        -------
        shrinkage : float
            In ``[0, 1]``.

        Raises
        ------
        ValueError
            If the rows are not those the statistics count (rows per class).
        """
        S = self._covariance(covariance)
        X, y = np.asarray(X), np.asarray(y)
        codes = np.searchsorted(self.classes, y)
        found = np.bincount(codes, minlength=self.classes.shape[0])
        if X.shape[0] != y.shape[0] or not np.array_equal(found, self.class_counts()):
            raise ValueError(
                f"the rows ({X.shape[0]}, {found.tolist()} per class) are not those the "
                f"statistics describe ({self.class_counts().tolist()} per class)"
            )
        if covariance == "within":
            centres = self.class_means
        else:  # every row about the one mean
            centres, codes = self.moments.mean[None, :], np.zeros_like(codes)
        s4 = 0.0
        for start in range(0, X.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            centred = np.asarray(X[rows], dtype=np.float64) - centres[codes[rows]]
            s4 += float(np.sum(np.einsum("ij,ij->i", centred, centred) ** 2))
        return ledoit_wolf_shrinkage(S, s4, self.n_samples)

    def oas_shrinkage(self, covariance: str = "total") -> float:
        """The oracle approximating shrinkage of the covariance these statistics hold.

        A function of the statistics alone (unlike Ledoit-Wolf's, which needs
        the rows' fourth moments): what a private client announces with its
        released statistics, and what the server recomputes from them
        (:func:`skslot.ledoit_wolf.oas_shrinkage`).

        Parameters
        ----------
        covariance : {"total", "within"}, default="total"
            The covariance to shrink.

        Returns
        -------
        float
            In ``[0, 1]``.
        """
        return oas_shrinkage(self._covariance(covariance), self.n_samples)

    def _covariance(self, covariance: str) -> np.ndarray:
        """The covariance of all rows (``"total"``, ``scatter / N`` about the global mean) or
        of the class-centred rows (``"within"``): ``(scatter - sum_c N_c (mu_c - mu)(mu_c -
        mu)^T) / N``, the classic LDA pooled covariance, recovered without any per-class Gram
        matrix."""
        from ..summary import COVARIANCES  # on use: skslot.summary imports the heads

        check_option("covariance", covariance, COVARIANCES)
        N = self.moments.n
        total = self.moments.centred().gram / N
        if covariance == "total":
            return symmetrize(total)
        between = between_class_scatter(self.counts, self.class_means, self.moments.mean) / N
        return symmetrize(total - between)

    def summary(
        self,
        shrinkage: float,
        *,
        covariance: str = "total",
        covariance_floor: float = COVARIANCE_FLOOR,
        client: int | str | None = None,
    ) -> GaussianSummary:
        """The client's SLOT summary, derived from these statistics and its shrinkage.

        The mean and the covariance ``S`` (of all rows, or of the class-centred
        rows with ``covariance="within"``, the pooled within-class covariance) are those
        of the rows the statistics describe, shrunk as the client's
        Ledoit-Wolf estimate is (:func:`skslot.ledoit_wolf.shrunk_summary`, with the
        shrinkage the client computed from its rows' fourth moments, which the
        statistics do not hold).  A head whose statistics determine the summary
        this way (FedCGS) sends the shrinkage alone: the server derives the
        summary, so the summary and the statistics cannot disagree.

        Parameters
        ----------
        shrinkage : float
            The client's Ledoit-Wolf shrinkage, in ``[0, 1]``.
        covariance : {"total", "within"}, default="total"
            The covariance of the summary.
        covariance_floor : float, default=1e-8
            Relative floor of the shrunk covariance's eigenvalues
            (:func:`skslot.ledoit_wolf.shrunk_summary`).
        client : int or str, optional
            The summary's client label.

        Returns
        -------
        GaussianSummary

        Raises
        ------
        StatisticsFormatError
            If the shrinkage is not in ``[0, 1]`` or the statistics hold fewer than 2 rows.
        """
        if not Interval(Real, 0.0, 1.0, closed="both").is_satisfied_by(shrinkage):  # NaN fails
            raise StatisticsFormatError(f"the shrinkage must be in [0, 1], got {shrinkage!r}")
        n = int(self.moments.n)
        if n < 2:
            raise StatisticsFormatError(f"a summary needs at least 2 rows, the statistics hold {n}")
        return shrunk_summary(
            n,
            self.moments.mean,
            self._covariance(covariance),
            float(shrinkage),
            covariance_floor=covariance_floor,
            client=client,
        )

    @property
    def class_means(self) -> np.ndarray:
        """Means of the classes with at least one row (others are NaN-free zeros)."""
        safe = np.maximum(self.counts, 1.0)
        return self.sums / safe[:, None]


def between_class_scatter(
    counts: np.ndarray, class_means: np.ndarray, mean: np.ndarray
) -> np.ndarray:
    """``sum_c n_c (mu_c - mu)(mu_c - mu)^T`` over the classes with rows."""
    present = counts > 0
    diff = class_means[present] - mean
    return (diff * counts[present, None]).T @ diff
