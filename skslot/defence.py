"""The server's stance towards clients: plausibility checks and weight caps.

Everything a client sends is self-declared: its count ``n`` becomes its weight
in the barycenter and in the head, and its moments enter the aggregates
unbounded.  After the wire checks (:meth:`GaussianSummary.from_bytes`, the
heads' ``decode_statistics``), these functions compare each client with the
others (with three clients or more: with two there is no majority) and return,
per client, why it is implausible; :func:`capped_counts` bounds the weight a
client that passed can take.  The Flower server applies them with the run
configuration's bounds (:class:`~skslot.flower.DeploymentConfig`); in process
they can be called on any list of summaries.

Bounds are relative to the median client, so they do not depend on the
features' units.  Their defaults leave every honest client of the real data
sets untouched (one, two and five clients per domain, every alpha of the
paper, five seeds: ``benchmarks/honest_bounds.py``): mean variance within 9.5x
the median, mean within 2.0 median standard deviations of the median mean,
count within 9.8x the median count, O-FedAvg head norm within 3.7x.

What they cannot do: with ``K`` clients, a client inside every bound still
holds up to ``cap / (cap + K - 1)`` of the weight, and one that sends
*consistent* statistics of poisoned rows (flipped labels at an honest count)
is indistinguishable from an honest client with unusual data
(``benchmarks/attacks.py`` measures both; docs/deployment.md, "Threat model").
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ._validation import check_in_range
from .gaussian import GaussianSummary
from .screening import ScreeningEvidence, strongest_case

__all__ = [
    "DefenceBounds",
    "capped_counts",
    "implausible_counts",
    "implausible_norms",
    "implausible_summaries",
    "inconsistent_parts",
    "inconsistent_statistics",
    "ratios_to_median",
    "summary_deviations",
]


class _Moments(Protocol):
    mean: np.ndarray
    trace: float
    n: int


class _Statistics(Protocol):
    """A head's statistics of some rows (FedCGS's class statistics, FedPFT's mixtures)."""

    def implied_moments(self, covariance: str = "total") -> _Moments: ...

    def class_counts(self) -> np.ndarray: ...


def ratios_to_median(values: Sequence[float]) -> np.ndarray | None:
    """Each client's value over the clients' median, or None with fewer than three clients.

    Examples
    --------
    >>> from skslot.defence import ratios_to_median
    >>> ratios_to_median([300, 210, 720, 60000]).round(2).tolist()
    [0.59, 0.41, 1.41, 117.65]
    """
    if len(values) < 3:
        return None
    values = np.asarray(values, dtype=np.float64)
    return values / float(np.median(values))


def summary_deviations(
    summaries: Sequence[GaussianSummary],
) -> tuple[np.ndarray, np.ndarray] | None:
    """How far each summary lies from the others: variance ratio and mean offset.

    Returns, per client, its mean variance ``tr(S) / m`` over the clients'
    median, and the distance of its mean from the coordinate-wise median mean
    in median standard deviations (``sqrt(m * median variance)``); None with
    fewer than three clients.  :func:`implausible_summaries` bounds both.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence import summary_deviations
    >>> clients = [GaussianSummary(50, np.full(2, i), (i + 1) * np.eye(2)) for i in range(3)]
    >>> variance_ratio, mean_offset = summary_deviations(clients)
    >>> variance_ratio.tolist(), mean_offset.round(3).tolist()
    ([0.5, 1.0, 1.5], [0.707, 0.0, 0.707])
    """
    if len(summaries) < 3:
        return None
    m = summaries[0].dimension
    variance = np.array([np.sum(np.diagonal(s.covariance) / m) for s in summaries])
    typical = float(np.median(variance))
    centre = np.median([s.mean for s in summaries], axis=0)
    offsets = np.array([np.linalg.norm(s.mean - centre) for s in summaries])
    return variance / typical, offsets / np.sqrt(m * typical)


def implausible_summaries(
    summaries: Sequence[GaussianSummary],
    *,
    max_variance_ratio: float = 100.0,
    max_mean_offset: float = 10.0,
) -> dict[int, str]:
    """Positions of summaries far out of line with the others', with the reason.

    A summary is implausible when its mean variance ``tr(S) / m`` is more than
    ``max_variance_ratio`` times above or below the median client's, or its
    mean lies more than ``max_mean_offset`` median standard deviations
    (``sqrt(m * median variance)``) from the coordinate-wise median mean.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence import implausible_summaries
    >>> honest = [GaussianSummary(50, np.zeros(2) + i, np.eye(2)) for i in range(3)]
    >>> hostile = GaussianSummary(50, np.zeros(2), 1e8 * np.eye(2))
    >>> implausible_summaries([*honest, hostile])
    {3: "mean variance 1e+08 times the clients' median (max-variance-ratio = 100)"}
    """
    deviations = summary_deviations(summaries)
    if deviations is None:
        return {}
    reasons = {}
    for k, (ratio, offset) in enumerate(zip(*deviations, strict=True)):
        if max(ratio, 1.0 / ratio) > max_variance_ratio:
            reasons[k] = (
                f"mean variance {ratio:.3g} times the clients' median "
                f"(max-variance-ratio = {max_variance_ratio:g})"
            )
        elif offset > max_mean_offset:
            reasons[k] = (
                f"mean {offset:.3g} median standard deviations from the clients' median "
                f"(max-mean-offset = {max_mean_offset:g})"
            )
    return reasons


def implausible_counts(
    counts: Sequence[int], *, max_count_ratio: float = 100.0, what: str = "rows"
) -> dict[int, str]:
    """Positions of clients declaring more than ``max_count_ratio`` times the median count.

    Examples
    --------
    >>> from skslot.defence import implausible_counts
    >>> implausible_counts([300, 210, 720, 10**9])
    {3: "declares 1e+09 rows, 1.96e+06 times the clients' median (max-count-ratio = 100)"}
    """
    ratios = ratios_to_median(counts)
    if ratios is None:
        return {}
    return {
        k: f"declares {counts[k]:.3g} {what}, {r:.3g} times the clients' median "
        f"(max-count-ratio = {max_count_ratio:g})"
        for k, r in enumerate(ratios)
        if r > max_count_ratio
    }


def capped_counts(counts: Sequence[int], *, max_weight_ratio: float = 10.0) -> np.ndarray:
    """Each client's count, capped at ``max_weight_ratio`` times the median count.

    The weight a client takes in the barycenter and in the head is its capped
    count over the sum of capped counts (with fewer than three clients,
    counts are returned unchanged).

    Examples
    --------
    >>> from skslot.defence import capped_counts
    >>> capped_counts([300, 210, 720, 60000]).tolist()
    [300.0, 210.0, 720.0, 5100.0]
    """
    n = np.asarray(counts, dtype=np.float64)
    if n.shape[0] < 3:
        return n
    return np.minimum(n, max_weight_ratio * float(np.median(n)))


def implausible_norms(
    norms: Sequence[float], *, max_norm_ratio: float = 10.0, what: str = "norm"
) -> dict[int, str]:
    """Positions of clients whose ``norms`` exceed ``max_norm_ratio`` times the median.

    Used on O-FedAvg's local heads (Frobenius norm of ``[W, b]``): a client
    scaling its coefficients would otherwise dominate the average.

    Examples
    --------
    >>> from skslot.defence import implausible_norms
    >>> implausible_norms([1.0, 1.2, 0.8, 1100.0], what="local head norm")
    {3: "local head norm 1e+03 times the clients' median (max-norm-ratio = 10)"}
    """
    ratios = ratios_to_median(norms)
    if ratios is None:
        return {}
    return {
        k: f"{what} {r:.3g} times the clients' median (max-norm-ratio = {max_norm_ratio:g})"
        for k, r in enumerate(ratios)
        if r > max_norm_ratio
    }


def inconsistent_statistics(
    summary: GaussianSummary,
    mean: np.ndarray,
    covariance_trace: float,
    n_described: int | None = None,
    trace_error: float = 0.0,
    *,
    covariance: str = "total",
    rtol: float = 1e-2,
) -> str | None:
    """Why a client's head statistics disagree with its own summary, or None.

    When both describe the same rows, the statistics' mean must equal the
    summary's, and the trace of their sample covariance the summary's
    (Ledoit-Wolf shrinkage keeps the trace: ``tr((1 - s) S + s (tr S / m) I) =
    tr S``), up to ``rtol`` relative to the summary's scale (its transmit
    rounding).  When the statistics describe ``n_described = n_s`` of the
    summary's ``N`` rows (FedPFT does not send classes with too few rows), the
    rest cannot be less spread than nothing: ``n_s tr S_s <= N tr S`` for
    either kind of covariance, and for the total covariance
    ``||mu_s - mu||^2 <= (N - n_s) / n_s tr S``, each up to ``rtol``.
    ``trace_error`` widens the trace comparison by what the statistics' own
    rounding allows (absolute).  A deployment never pairs statistics with a
    private summary (``epsilon`` is refused with the statistics heads), and a
    FedCGS summary is derived from its statistics, so this is FedPFT's check.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence import inconsistent_statistics
    >>> s = GaussianSummary(10, np.zeros(2), np.eye(2))
    >>> inconsistent_statistics(s, np.zeros(2), 2.0) is None
    True
    >>> inconsistent_statistics(s, np.zeros(2), 2e8)
    "the statistics imply a total variance 1e+08 times the summary's"
    >>> inconsistent_statistics(s, np.ones(2), 2.0, n_described=8)  # 2 rows unseen
    "the statistics' mean lies 1 standard deviations from the summary's"
    """
    trace = float(np.trace(summary.covariance))
    N = summary.n
    n_s = N if n_described is None else int(n_described)
    offset = float(np.linalg.norm(mean - summary.mean))
    slack = rtol * (np.sqrt(trace) + float(np.linalg.norm(summary.mean)))
    if n_s >= N:
        if not abs(covariance_trace - trace) <= rtol * trace + trace_error:
            ratio = covariance_trace / trace
            return f"the statistics imply a total variance {ratio:.3g} times the summary's"
        bound = 0.0
    else:
        if n_s <= 0:
            return None if n_s == 0 else "the statistics describe a negative number of rows"
        if not covariance_trace <= (1 + rtol) * trace * N / n_s + trace_error:
            ratio = covariance_trace / trace
            return (
                f"the statistics imply a total variance {ratio:.3g} times the summary's, "
                f"more than its {n_s} of {N} rows can have"
            )
        if covariance != "total":  # the within-class spread does not bound the means
            return None
        bound = float(np.sqrt((N - n_s) / n_s * trace))
    if not offset <= (1 + rtol) * bound + slack:
        return (
            f"the statistics' mean lies {offset / np.sqrt(trace):.3g} standard deviations from "
            "the summary's"
        )
    return None


def inconsistent_parts(
    fitting_mean: np.ndarray,
    fitting_trace: float,
    validation_mean: np.ndarray,
    validation_trace: float,
    *,
    max_variance_ratio: float = 100.0,
    max_mean_offset: float = 10.0,
) -> str | None:
    """Why a client's validation part is out of line with its fitting part, or None.

    The two parts are one stratified split of one client's rows
    (:func:`~skslot.selection.validation_split`), so they describe one
    distribution; the summary, and so every check against it, describes the
    fitting part alone, while the final head is refitted on both.  The
    validation part's total variance ``tr(S_v)`` may not exceed
    ``max_variance_ratio`` times the fitting part's, nor its mean lie more than
    ``max_mean_offset`` of the fitting part's standard deviations
    (``sqrt(tr S_f)``) from the fitting mean: the bounds
    :func:`implausible_summaries` puts on a client against the others.  A
    smaller spread is not refused (a part of one row per class has none).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.defence import inconsistent_parts
    >>> inconsistent_parts(np.zeros(2), 2.0, np.full(2, 0.5), 1.5) is None
    True
    >>> print(inconsistent_parts(np.zeros(2), 2.0, np.zeros(2), 2e4))
    its validation part's variance is 1e+04 times its fitting part's (max-variance-ratio = 100)
    """
    if not validation_trace <= max_variance_ratio * fitting_trace:
        ratio = validation_trace / fitting_trace if fitting_trace > 0 else float("inf")
        return (
            f"its validation part's variance is {ratio:.3g} times its fitting part's "
            f"(max-variance-ratio = {max_variance_ratio:g})"
        )
    offset = float(np.linalg.norm(np.asarray(validation_mean) - np.asarray(fitting_mean)))
    if not offset <= max_mean_offset * np.sqrt(fitting_trace):
        sd = np.sqrt(fitting_trace)
        return (
            f"its validation part's mean lies {offset / sd if sd > 0 else float('inf'):.3g} "
            f"standard deviations from its fitting part's (max-mean-offset = {max_mean_offset:g})"
        )
    return None


@dataclass(frozen=True)
class DefenceBounds:
    """The server's bounds on what clients declare, and the checks that apply them.

    Parameters
    ----------
    max_count_ratio, max_weight_ratio : float, default=100, 10
        A client declaring more than ``max_count_ratio`` times the median
        client's rows is rejected; the others' weights (in the barycenter and
        the head) are capped at ``max_weight_ratio`` times the median count.
    max_norm_ratio : float, default=10
        A client whose local head's norm exceeds this many times the median
        client's is rejected (heads trained locally: O-FedAvg).
    max_variance_ratio, max_mean_offset : float, default=100, 10
        Plausibility of a summary against the others' (see
        :func:`implausible_summaries`).
    screen_significance : float, default=0.001
        Family-wise level of the leave-one-client-out screening's sign test
        (:mod:`skslot.screening`; Bonferroni over the clients tested).
    screen_min_gain : float, default=0.02
        Smallest gain of the other clients' validation accuracy (a fraction of
        their rows) without a client that can exclude it.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence import DefenceBounds
    >>> clients = [GaussianSummary(n, np.zeros(2), np.eye(2)) for n in (100, 120, 90, 10**6)]
    >>> rejected, weights = DefenceBounds().screen(clients)
    >>> sorted(rejected), weights.tolist()
    ([3], [100.0, 120.0, 90.0])
    """

    max_count_ratio: float = 100.0
    max_weight_ratio: float = 10.0
    max_norm_ratio: float = 10.0
    max_variance_ratio: float = 100.0
    max_mean_offset: float = 10.0
    screen_significance: float = 0.001
    screen_min_gain: float = 0.02

    def __post_init__(self) -> None:
        for name in ("max_count_ratio", "max_weight_ratio", "max_norm_ratio"):
            check_in_range(name, getattr(self, name), 1.0, None)
        check_in_range("max_variance_ratio", self.max_variance_ratio, 1.0, None)
        check_in_range("max_mean_offset", self.max_mean_offset, 0.0, None)
        check_in_range("screen_significance", self.screen_significance, 0.0, 1.0)
        check_in_range("screen_min_gain", self.screen_min_gain, 0.0, 1.0)

    def inconsistent_parts(self, fitting: _Statistics, validation: _Statistics) -> str | None:
        """Why a client's two parts of statistics are out of line (:func:`inconsistent_parts`).

        Where the validation part leaves some of its rows undescribed (FedPFT
        sends no class with fewer than ``min_samples_per_class`` rows), its
        mean is that of other classes than the fitting part's, and only its
        variance is bounded; where it describes none, nothing is.
        """
        fit, held = fitting.implied_moments("total"), validation.implied_moments("total")
        if held.n == 0:
            return None
        complete = held.n == int(validation.class_counts().sum())
        return inconsistent_parts(
            fit.mean,
            fit.trace,
            held.mean,
            held.trace,
            max_variance_ratio=self.max_variance_ratio,
            max_mean_offset=self.max_mean_offset if complete else np.inf,
        )

    def strongest_case(
        self, votes: Mapping[Hashable, Mapping[Hashable, tuple[int, int, int]]]
    ) -> tuple[Hashable | None, dict[Hashable, ScreeningEvidence]]:
        """The client the others' paired counts exclude, if any, by this defence's thresholds.

        See :func:`skslot.screening.strongest_case`.
        """
        return strongest_case(
            votes, significance=self.screen_significance, min_gain=self.screen_min_gain
        )

    def screen(self, summaries: Sequence[GaussianSummary]) -> tuple[dict[int, str], np.ndarray]:
        """Positions of implausible clients with the reason, and the others' capped weights.

        The weights are in the order of the clients that remain.
        """
        reasons = implausible_summaries(
            summaries,
            max_variance_ratio=self.max_variance_ratio,
            max_mean_offset=self.max_mean_offset,
        )
        counts = [s.n for s in summaries]
        for k, why in implausible_counts(counts, max_count_ratio=self.max_count_ratio).items():
            reasons.setdefault(k, why)
        kept = [n for k, n in enumerate(counts) if k not in reasons]
        return reasons, capped_counts(kept, max_weight_ratio=self.max_weight_ratio)

    def implausible_test_sizes(self, sizes: Sequence[int]) -> dict[int, str]:
        """Positions of clients announcing far more test rows than the others (``max_count_ratio``).

        Clients without test rows neither vote nor count: the median is that
        of the others' sizes.
        """
        positions = [k for k, n in enumerate(sizes) if n > 0]
        found = implausible_counts(
            [sizes[k] for k in positions], max_count_ratio=self.max_count_ratio, what="test rows"
        )
        return {positions[k]: why for k, why in found.items()}

    def implausible_updates(self, norms: Sequence[float]) -> dict[int, str]:
        """Positions of local heads whose norm is out of line with the others'."""
        return implausible_norms(norms, max_norm_ratio=self.max_norm_ratio, what="local head norm")
