"""FedPFT's messages: per-class Gaussian mixtures, their maths and their arrays.

A client's :class:`ClassMixtures` holds one :class:`ClassMixture` per class;
both are exactly pushed forward through an affine map (the server aligns them
itself), merged over a client's two parts, sampled on the server, and encoded
to and decoded from named arrays (:meth:`ClassMixtures.to_arrays`,
:meth:`ClassMixtures.from_arrays`).  The estimator is
:class:`~skslot.heads.FedPFTClassifier`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from ..maps import GaussianMap
from ..wire import StatisticsFormatError
from ..wire.arrays import ArrayMessage, check_psd_up_to_rounding, read_array
from ._covariance_forms import covariance_factor


class ImpliedMoments(NamedTuple):
    """What a head's statistics imply of the client's rows, to check against its summary.

    ``mean`` and ``trace`` (of the total or the class-centred covariance) of
    the ``n`` rows described; ``error`` bounds the trace's uncertainty from
    the transmit rounding (absolute); ``class_counts`` and ``class_means``,
    where the statistics give them, the rows and mean of each class
    described (their between-class scatter bounds the total covariance).
    """

    mean: np.ndarray
    trace: float
    n: int
    error: float = 0.0
    class_counts: np.ndarray | None = None
    class_means: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class ClassMixture:
    """Gaussian mixture of one class at one client, as transmitted.

    ``covariances`` holds, per component, the full matrix (``"full"``, shape
    ``(m, m)``), the variances (``"diag"``, ``(m,)``), one variance
    (``"spherical"``, ``(1,)``), or for ``"lowrank"`` a factor and a diagonal
    side by side, ``[W | d]`` of shape ``(m, r + 1)``, for the covariance
    ``W W^T + diag(d)``.

    Parameters
    ----------
    label : object
        The class.
    n : int
        Rows of the class the mixture describes.
    weights : ndarray of shape (k,)
        Component weights, summing to 1.
    means : ndarray of shape (k, m)
    covariances : ndarray
        Of shape ``(k, m, m)``, ``(k, m)``, ``(k, 1)`` or ``(k, m, r + 1)``,
        by ``covariance_type``.
    covariance_type : {"full", "diag", "spherical", "lowrank"}
    """

    label: Any
    n: int
    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    covariance_type: str

    @cached_property
    def scales(self) -> np.ndarray:
        """Per component, a factor ``L`` with ``L L^T = S`` (full), or standard deviations.

        Computed once per received mixture, however many heads the server
        samples from it (one per candidate ``tau``).
        """
        if self.covariance_type == "full":
            return np.stack([covariance_factor(cov) for cov in self.covariances])
        if self.covariance_type == "lowrank":  # [W | sqrt(d)]: W z1 + sqrt(d) * z2, no factoring
            factors = self.covariances.copy()
            factors[:, :, -1] = np.sqrt(np.maximum(factors[:, :, -1], 0.0))
            return factors
        return np.sqrt(np.maximum(self.covariances, 0.0))  # diag: (k, m); spherical: (k, 1)

    def merge(self, other: ClassMixture) -> ClassMixture:
        """This class's mixture over the rows of both (see :meth:`ClassMixtures.merge`).

        Parameters
        ----------
        other : ClassMixture
            The same class's mixture over other rows, of the same covariance type.

        Returns
        -------
        ClassMixture
        """
        n = self.n + other.n
        a, b = self.n / n, other.n / n
        if self.weights.shape[0] == other.weights.shape[0] == 1:
            mean = a * self.means[0] + b * other.means[0]
            d = self.means[0] - other.means[0]
            if self.covariance_type == "full":
                between = a * b * np.outer(d, d)
            elif self.covariance_type == "diag":
                between = a * b * d * d
            else:
                between = np.array([a * b * float(d @ d) / d.shape[0]])
            cov = a * self.covariances[0] + b * other.covariances[0] + between
            return replace(self, n=n, weights=np.ones(1), means=mean[None], covariances=cov[None])
        return replace(
            self,
            n=n,
            weights=np.concatenate([a * self.weights, b * other.weights]),
            means=np.concatenate([self.means, other.means]),
            covariances=np.concatenate([self.covariances, other.covariances]),
        )

    def full_covariances(self) -> np.ndarray:
        """The component covariances as full matrices.

        Returns
        -------
        covariances : ndarray of shape (k, m, m)
        """
        if self.covariance_type == "full":
            return self.covariances
        m = self.means.shape[1]
        if self.covariance_type == "lowrank":
            W, d = self.covariances[:, :, :-1], self.covariances[:, :, -1]
            full = W @ W.swapaxes(1, 2)
            full[:, np.arange(m), np.arange(m)] += d  # in place: no (K, m, m) identity
            return full
        variances = np.broadcast_to(self.covariances, (self.covariances.shape[0], m))
        return variances[:, :, None] * np.eye(m)

    def traces(self) -> np.ndarray:
        """Each component covariance's trace, without building it in full.

        Returns
        -------
        traces : ndarray of shape (k,)
        """
        cov = self.covariances
        if self.covariance_type == "full":
            return np.trace(cov, axis1=1, axis2=2)
        if self.covariance_type == "lowrank":  # tr(W W^T + diag(d)) = ||W||_F^2 + sum(d)
            return (cov[:, :, :-1] ** 2).sum(axis=(1, 2)) + cov[:, :, -1].sum(axis=1)
        m = self.means.shape[1]
        return np.broadcast_to(cov, (cov.shape[0], m)).sum(axis=1)  # diag, or m * spherical

    def aligned(self, ot_map: GaussianMap) -> ClassMixture:
        """The exact pushforward through ``T``: each ``N(mu, S)`` becomes ``N(A mu + b, A S A^T)``.

        A diagonal or spherical covariance is no longer one after a general
        affine map, so the result is a full-covariance mixture in float64.

        Parameters
        ----------
        ot_map : GaussianMap
            The client's map ``T(x) = A x + b``.

        Returns
        -------
        ClassMixture
        """
        means, covariances = ot_map.push_gaussians(self.means, self.full_covariances())
        return ClassMixture(self.label, self.n, self.weights, means, covariances, "full")

    def sample(
        self, n: int, rng: np.random.RandomState, ot_map: GaussianMap | None = None
    ) -> np.ndarray:
        """Draw ``n`` rows from the mixture, or from its pushforward through ``ot_map``.

        A draw ``x = mu + L z`` mapped by ``T`` is ``(A mu + b) + (A L) z``, a
        draw from ``N(A mu + b, A S A^T)`` (``A L`` is a factor of ``A S A^T``):
        sampling the pushforward costs one product with ``A`` on the drawn rows
        instead of a new factorisation per map.  With the same ``rng`` state the
        draws for two maps share their ``z`` (common random numbers).

        Parameters
        ----------
        n : int
            Number of rows to draw.
        rng : numpy.random.RandomState
            Source of the draws.
        ot_map : GaussianMap, optional
            A map applied to the draws.

        Returns
        -------
        X : ndarray of shape (n, m)
        """
        m = self.means.shape[1]
        counts = rng.multinomial(n, self.weights / self.weights.sum())
        rows = []
        for j, count in enumerate(counts):
            if count == 0:
                continue
            z = rng.standard_normal(size=(count, m))
            scale = self.scales[j]
            if self.covariance_type == "full":
                z = z @ scale.T
            elif self.covariance_type == "lowrank":
                W = scale[:, :-1]
                z = z * scale[:, -1] + rng.standard_normal(size=(count, W.shape[1])) @ W.T
            else:
                z = z * scale
            rows.append(self.means[j] + z)
        X = np.vstack(rows)
        return X if ot_map is None else ot_map.apply(X)


@dataclass(frozen=True, eq=False)
class ClassMixtures:
    """A client's FedPFT message: one mixture per class it has enough rows of.

    ``skipped`` lists ``(class, count)`` for the classes with fewer than
    ``min_samples_per_class`` rows: they are not sent (a mixture of one point
    would reveal that point).  ``reg_covar`` is the variance the client added
    to every covariance's diagonal, and ``rounding`` the relative precision
    the parameters were transmitted in (set by the client that rounds them
    and by the decoder alike; they bound what :meth:`implied_moments` can
    say).

    Parameters
    ----------
    classes : ndarray of shape (C,)
        The global class set.
    mixtures : list of ClassMixture
        The sent classes' mixtures, in the order of ``classes``.
    skipped : list of (class, int)
        The classes not sent, and their row counts.
    n_features : int
        The dimension ``m``.
    covariance_type : {"full", "diag", "spherical", "lowrank"}, default="full"
    dtype : str, default="float64"
        The dtype the parameters travel in.
    rank : int, default=0
        The factor's rank of a ``"lowrank"`` covariance.
    reg_covar : float, default=0.0
        The variance added to every covariance's diagonal.
    rounding : float, default=0.0
        The relative precision of the transmitted parameters.
    """

    classes: np.ndarray
    mixtures: list[ClassMixture]
    skipped: list[tuple[Any, int]]
    n_features: int
    covariance_type: str = "full"
    dtype: str = "float64"
    rank: int = 0
    reg_covar: float = 0.0
    rounding: float = 0.0

    @property
    def n_samples(self) -> int:
        """Rows the mixtures describe, skipped classes included."""
        return int(sum(mx.n for mx in self.mixtures) + sum(k for _, k in self.skipped))

    def class_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows of each described class and their sums (a skipped class counts zero rows).

        Returns
        -------
        counts : ndarray of shape (C,)
        sums : ndarray of shape (C, m)
        """
        counts = np.zeros(self.classes.shape[0])
        sums = np.zeros((self.classes.shape[0], self.n_features))
        position = {label: i for i, label in enumerate(self.classes.tolist())}
        for mx in self.mixtures:
            i = position[mx.label]
            counts[i] = mx.n
            sums[i] = mx.n * (np.asarray(mx.weights, dtype=np.float64) @ mx.means)
        return counts, sums

    def class_counts(self) -> np.ndarray:
        """Rows of each class (int64, skipped classes included), in the order of ``classes``.

        Returns
        -------
        counts : ndarray of shape (C,)
        """
        counts = dict(self.skipped)
        counts.update((mx.label, mx.n) for mx in self.mixtures)
        return np.array([counts.get(c, 0) for c in self.classes.tolist()], dtype=np.int64)

    def described_classes(self) -> list:
        """The classes the mixtures describe (those sent, not skipped).

        Returns
        -------
        list
        """
        return [mx.label for mx in self.mixtures]

    def implied_moments(
        self, covariance: str = "total", *, classes: Sequence | None = None
    ) -> ImpliedMoments:
        """The mean, a total variance ``tr(S)`` and the count of the rows the mixtures describe.

        Exact for the sent classes, up to the transmit rounding (``error``)
        and less the ``reg_covar`` every component's diagonal carries: each
        component's trace (:meth:`ClassMixture.traces`; a low-rank one keeps
        every variance), its mean and weight give each class's mean and
        second moment, and those the total
        (``covariance="total"``) or class-centred (``"within"``) variance.
        Skipped classes are not described: the count says how many rows are,
        and the server compares with the client's summary accordingly
        (:func:`skslot.defence.inconsistent_statistics`).

        Parameters
        ----------
        covariance : {"total", "within"}, default="total"
            The covariance whose trace is returned.
        classes : sequence, optional
            Only the rows of these classes (``None``: every class described).

        Returns
        -------
        ImpliedMoments
            The mean, ``tr(S)``, the rows described and the trace's error bound.
        """
        m = self.n_features
        counts, means, second, spread = [], [], [], []
        kept = set(self.described_classes() if classes is None else classes)
        for mx in self.mixtures:
            if mx.label not in kept:
                continue
            traces = mx.traces()
            squares = (mx.means**2).sum(axis=1)
            counts.append(mx.n)
            means.append(mx.weights @ mx.means)
            # every component's diagonal carries the client's reg_covar
            second.append(float(mx.weights @ (traces + squares)) - m * self.reg_covar)
            spread.append(float(mx.weights @ (np.abs(traces) + 2 * squares)))
        if not counts:
            return ImpliedMoments(np.zeros(m), 0.0, 0)
        n = np.array(counts, dtype=np.float64)
        means_ = np.array(means)
        second_ = np.array(second)
        mean = n @ means_ / n.sum()
        if covariance == "total":
            trace = float(n @ second_ / n.sum() - mean @ mean)
        else:
            trace = float(n @ (second_ - (means_**2).sum(axis=1)) / n.sum())
        # the parameters' rounding moves each trace by at most rounding * |tr| and each
        # squared mean norm by 2 rounding ||mu||^2 (to first order)
        error = 2 * self.rounding * float(n @ np.array(spread)) / n.sum()
        return ImpliedMoments(mean, trace, int(n.sum()), error, n, means_)

    def scaled(self, factor: float) -> ClassMixtures:
        """The message weighted by ``factor``: the server draws that share of its rows.

        Parameters
        ----------
        factor : float
            Multiplies each class's count (rounded, at least 1).

        Returns
        -------
        ClassMixtures
        """
        mixtures = [replace(mx, n=max(1, round(mx.n * factor))) for mx in self.mixtures]
        return replace(self, mixtures=mixtures)

    def merge(self, other: ClassMixtures) -> ClassMixtures:
        """The message of the union of the two messages' rows (a client's two parts).

        Per class: two single Gaussians are moment-matched into one, the
        maximum-likelihood Gaussian of the union (``n``-weighted mean;
        within-part covariances plus the between-part term); mixtures of
        several components are concatenated, with weights scaled by each
        part's share of the rows.  Merged parameters are float64.

        Parameters
        ----------
        other : ClassMixtures
            A message over the same classes, of the same covariance type
            (``ValueError`` otherwise).

        Returns
        -------
        ClassMixtures
        """
        if other.covariance_type != self.covariance_type:
            raise ValueError("cannot merge mixtures of different covariance types")
        if not np.array_equal(self.classes, other.classes):
            raise ValueError("cannot merge mixtures over different class sets")
        if self.covariance_type == "lowrank":  # the union's covariance is not low rank
            return self._as_full().merge(other._as_full())
        by_class: dict[Any, ClassMixture] = {}
        for mx in [*self.mixtures, *other.mixtures]:
            label = _as_python(mx.label)
            by_class[label] = by_class[label].merge(mx) if label in by_class else mx
        merged = [by_class[label] for label in self.classes.tolist() if label in by_class]
        skipped = Counter(dict(self.skipped)) + Counter(dict(other.skipped))
        return replace(
            self,
            mixtures=merged,
            # a class skipped in one part but sent in the other: its skipped rows are lost
            skipped=[(label, count) for label, count in skipped.items() if label not in by_class],
            dtype="float64",
            rank=0,
            reg_covar=max(self.reg_covar, other.reg_covar),
            rounding=max(self.rounding, other.rounding),
        )

    def _as_full(self) -> ClassMixtures:
        """The same message with full covariance matrices."""
        mixtures = [
            replace(mx, covariances=mx.full_covariances(), covariance_type="full")
            for mx in self.mixtures
        ]
        return replace(self, mixtures=mixtures, covariance_type="full", rank=0)

    def aligned(self, ot_map: GaussianMap) -> ClassMixtures:
        """Every mixture pushed through ``ot_map`` (:meth:`ClassMixture.aligned`).

        Parameters
        ----------
        ot_map : GaussianMap
            The client's map.

        Returns
        -------
        ClassMixtures
            Full covariances, in float64.
        """
        mixtures = [mx.aligned(ot_map) for mx in self.mixtures]
        return ClassMixtures(self.classes, mixtures, self.skipped, self.n_features, "full")

    def to_arrays(self) -> ArrayMessage:
        """The message a client sends, mixtures concatenated component-wise.

        Weights, means and covariances travel in ``dtype`` (the head's
        ``transmit_dtype``, which already rounded them, so the cast is exact).

        Returns
        -------
        arrays : dict of str to ndarray
            ``"index"``, ``"n"``, ``"n_components"``, ``"weights"``, ``"means"``,
            ``"covariances"``, ``"skipped_index"`` and ``"skipped_count"``.
        """
        m = self.n_features
        mixtures = self.mixtures
        message = {
            "index": np.searchsorted(self.classes, [mx.label for mx in mixtures]).astype(np.int64),
            "n": np.array([mx.n for mx in mixtures], dtype=np.int64),
            "n_components": np.array([mx.weights.shape[0] for mx in mixtures], dtype=np.int64),
            "weights": np.concatenate([mx.weights for mx in mixtures] or [np.empty(0)]),
            "means": np.concatenate([mx.means for mx in mixtures] or [np.empty((0, m))]),
            "covariances": np.concatenate(
                [mx.covariances for mx in mixtures]
                or [np.empty(_covariance_shape(self.covariance_type, 0, m, self.rank))]
            ),
            "skipped_index": np.searchsorted(self.classes, [c for c, _ in self.skipped]).astype(
                np.int64
            ),
            "skipped_count": np.array([k for _, k in self.skipped], dtype=np.int64),
        }
        for name in ("weights", "means", "covariances"):
            message[name] = message[name].astype(self.dtype)
        return message

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, Any],
        *,
        classes: np.ndarray,
        n_features: int,
        n_samples: int | None = None,
        covariance_type: str = "full",
        rank: int = 0,
        n_components: int | None = None,
        min_samples_per_class: int | None = None,
        reg_covar: float = 0.0,
        eps: float = np.finfo(np.float64).eps,
    ) -> ClassMixtures:
        """Decode a received message and check every mixture.

        Class indices must be distinct and in range, counts must add up to at
        most ``n_samples`` (the client's summary), weights must be a
        distribution, and covariances positive semi-definite up to the
        rounding ``eps`` of the transmitted dtype (``"lowrank"``: the factor
        of the configured ``rank`` and a non-negative diagonal, positive
        semi-definite by construction).  With ``n_components`` (the head's
        setting), each class has exactly ``min(n_components, n)`` components,
        what a client builds: the decoded shapes, and so what the server
        builds from them, are bounded by the configuration, not by the bytes.
        With ``min_samples_per_class``, a skipped class has fewer rows than
        that and a sent one at least that many (at least 2 either way), and
        the counts add up to exactly ``n_samples``.

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
        covariance_type : {"full", "diag", "spherical", "lowrank"}, default="full"
            The head's covariance type.
        rank : int, default=0
            The head's rank of a ``"lowrank"`` covariance (at most ``m``).
        n_components : int, optional
            The head's components per class.
        min_samples_per_class : int, optional
            The head's fewest rows of a sent class.
        reg_covar : float, default=0.0
            The head's variance on every covariance's diagonal.
        eps : float, default=float64 eps
            The relative rounding of the transmitted dtype.

        Returns
        -------
        ClassMixtures

        Raises
        ------
        StatisticsFormatError
            If an array is malformed or a mixture breaks one of these checks.
        """
        classes = np.asarray(classes)
        C, m = len(classes), n_features
        index = read_array(arrays, "index", (None,), integer=True, nonnegative=True)
        J = index.shape[0]
        n = read_array(arrays, "n", (J,), integer=True, nonnegative=True)
        k = read_array(arrays, "n_components", (J,), integer=True, nonnegative=True)
        skipped_index = read_array(arrays, "skipped_index", (None,), integer=True, nonnegative=True)
        skipped_count = read_array(
            arrays, "skipped_count", skipped_index.shape, integer=True, nonnegative=True
        )
        both = np.concatenate([index, skipped_index])
        if np.any(both >= C) or np.unique(both).shape[0] != both.shape[0]:
            raise StatisticsFormatError("mixture class indices are out of range or repeated")
        if np.any(k < 1) or np.any(k > n):
            raise StatisticsFormatError("each mixture needs between 1 and n components")
        if n_components is not None and np.any(k != np.minimum(n_components, n)):
            raise StatisticsFormatError(
                f"mixtures of {sorted(set(k.tolist()))} components, but the head fits "
                f"min(n_components = {n_components}, rows of the class) per class"
            )
        if min_samples_per_class is not None:
            least = max(int(min_samples_per_class), 2)
            if np.any(skipped_count >= least) or np.any(skipped_count < 1) or np.any(n < least):
                raise StatisticsFormatError(
                    f"classes are sent with at least min_samples_per_class = {least} rows and "
                    "skipped with fewer (and at least 1)"
                )
        total = sum(int(c) for c in n) + sum(int(c) for c in skipped_count)
        exact = min_samples_per_class is not None
        if n_samples is not None and (total > n_samples or (exact and total != n_samples)):
            raise StatisticsFormatError(
                f"mixtures describe {total} rows but the client announced {n_samples}"
            )
        K = int(k.sum())
        weights = read_array(arrays, "weights", (K,), nonnegative=True)
        means = read_array(arrays, "means", (K, m))
        rank = min(rank, m)  # the client's effective rank (see FedPFTClassifier)
        reg_covar, eps = float(reg_covar), float(eps)
        covariances = read_array(
            arrays, "covariances", _covariance_shape(covariance_type, K, m, rank)
        )
        if covariance_type == "full":
            check_psd_up_to_rounding("a mixture covariance", covariances, eps)
        elif covariance_type == "lowrank":
            if np.any(covariances[:, :, -1] < 0):
                raise StatisticsFormatError("a low-rank mixture has negative diagonal variances")
        elif np.any(covariances < 0):
            raise StatisticsFormatError("a mixture has negative variances")
        bounds = np.concatenate([[0], np.cumsum(k)])
        mixtures = []
        for j in range(J):
            part = slice(bounds[j], bounds[j + 1])
            if abs(weights[part].sum() - 1.0) > (k[j] + 4) * eps + 1e-12:
                raise StatisticsFormatError("mixture weights do not sum to 1")
            parameters = (weights[part], means[part], covariances[part], covariance_type)
            mixtures.append(ClassMixture(classes[index[j]], int(n[j]), *parameters))
        skipped = [
            (classes[i].item(), int(c)) for i, c in zip(skipped_index, skipped_count, strict=True)
        ]
        return cls(classes, mixtures, skipped, m, covariance_type, "float64", rank, reg_covar, eps)


def _as_python(label: Any) -> Any:
    return label.item() if hasattr(label, "item") else label


def _covariance_shape(
    covariance_type: str, n_components: int, m: int, rank: int = 0
) -> tuple[int, ...]:
    """Shape of the stacked covariances of ``n_components`` components."""
    per_component = {
        "full": (m, m),
        "lowrank": (m, rank + 1),
        "diag": (m,),
        "spherical": (1,),
    }[covariance_type]
    return (n_components, *per_component)


def _as_transmitted(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):
        cast = values.astype(dtype)
    if not np.all(np.isfinite(cast)):
        raise ValueError(f"mixture parameters overflow {dtype.name}; use transmit_dtype='float32'")
    return cast.astype(np.float64)
