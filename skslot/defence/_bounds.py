"""The server's stance towards clients: plausibility checks and weight caps.

Everything a client sends is self-declared: its count ``n`` becomes its weight
in the barycenter and in the head, and its moments enter the aggregates
unbounded.  After the wire checks (:meth:`GaussianSummary.from_bytes`, the
heads' ``decode_statistics``), these functions compare each client with the
others (with three clients or more: with two there is no majority) and return,
per client, why it is implausible; :func:`capped_counts` bounds the weight a
client that passed can take, and :func:`clipped_norms` how far its O-FedAvg local
head can move the average.  The Flower server applies them with the run
configuration's bounds (:class:`~skslot.flower.DeploymentConfig`); in process
they can be called on any list of summaries.

Bounds are relative to the median client, so they do not depend on the
features' units.  Their defaults leave every honest client of the real data
sets untouched (one, two and five clients per domain, every alpha of the
paper, five seeds: ``benchmarks/honest_bounds.py``): mean variance within 9.5x
the median, mean within 2.0 median standard deviations of the median mean,
count within 9.8x the median count, O-FedAvg head norm within 2.1x (its local heads
spanning the classes each client holds; a client of one class sends a zero head, left out
of the median: :func:`norm_ratios`).

What they cannot do: with ``K`` clients, a client inside every bound still
holds up to ``cap / (cap + K - 1)`` of the weight, and one that sends
*consistent* statistics of poisoned rows (flipped labels at an honest count)
is indistinguishable from an honest client with unusual data
(``benchmarks/attacks.py`` measures both; docs/threats.md).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import ClassVar

import numpy as np

from .._param_validation import Interval, Options, validate_parameter_constraints
from ..gaussian import GaussianSummary
from .screening import ScreeningEvidence, strongest_case

#: The bounds' defaults (:class:`DefenceBounds`), written once.
MAX_COUNT_RATIO, MAX_WEIGHT_RATIO, MAX_NORM_RATIO, CLIP_NORM_RATIO = 100.0, 10.0, 10.0, 1.0
MAX_VARIANCE_RATIO, MAX_MEAN_OFFSET = 100.0, 10.0
SCREEN_SIGNIFICANCE, SCREEN_MIN_GAIN = 0.01, 0.02
#: The bounds that are ratios to the median client's.
RATIOS = ("max_count_ratio", "max_weight_ratio", "max_norm_ratio", "max_variance_ratio")


def ratios_to_median(values: Sequence[float] | np.ndarray) -> np.ndarray | None:
    """Each client's value over the clients' median, or None with fewer than three clients.

    Parameters
    ----------
    values : sequence of float or ndarray of shape (n_clients,)
        One value per client.

    Returns
    -------
    ndarray of float64 or None
        Each value over their median, in the clients' order.

    Examples
    --------
    >>> from skslot.defence import ratios_to_median
    >>> ratios_to_median([300, 210, 720, 60000]).round(2).tolist()
    [0.59, 0.41, 1.41, 117.65]
    """
    if len(values) < 3:
        return None
    array = np.asarray(values, dtype=np.float64)
    return array / float(np.median(array))


def summary_deviations(
    summaries: Sequence[GaussianSummary],
) -> tuple[np.ndarray, np.ndarray] | None:
    """How far each summary lies from the others: variance ratio and mean offset.

    :func:`implausible_summaries` bounds both.

    Parameters
    ----------
    summaries : sequence of GaussianSummary
        One per client, of the same dimension ``m``.

    Returns
    -------
    variance_ratio, mean_offset : ndarray of shape (n_clients,), or None
        Per client, its mean variance ``tr(S) / m`` over the clients' median,
        and the distance of its mean from the coordinate-wise median mean in
        median standard deviations (``sqrt(m * median variance)``); None with
        fewer than three clients.

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
    variance = np.array([s.trace / m for s in summaries])
    typical = float(np.median(variance))
    centre = np.median([s.mean for s in summaries], axis=0)
    offsets = np.array([np.linalg.norm(s.mean - centre) for s in summaries])
    return variance / typical, offsets / np.sqrt(m * typical)


def implausible_summaries(
    summaries: Sequence[GaussianSummary],
    *,
    max_variance_ratio: float = MAX_VARIANCE_RATIO,
    max_mean_offset: float = MAX_MEAN_OFFSET,
) -> dict[int, str]:
    """Positions of summaries far out of line with the others', with the reason.

    A summary is implausible when its mean variance ``tr(S) / m`` is more than
    ``max_variance_ratio`` times above or below the median client's, or its
    mean lies more than ``max_mean_offset`` median standard deviations
    (``sqrt(m * median variance)``) from the coordinate-wise median mean.

    Parameters
    ----------
    summaries : sequence of GaussianSummary
        One per client (none is implausible with fewer than three).
    max_variance_ratio : float, default=100
        Largest ratio, either way, of a mean variance to the median client's.
    max_mean_offset : float, default=10
        Largest distance of a mean from the median mean, in median standard
        deviations.

    Returns
    -------
    dict of int to str
        The reason for each implausible summary, by position.

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
    counts: Sequence[int], *, max_count_ratio: float = MAX_COUNT_RATIO, what: str = "rows"
) -> dict[int, str]:
    """Positions of clients declaring more than ``max_count_ratio`` times the median count.

    Parameters
    ----------
    counts : sequence of int
        One count per client (none is implausible with fewer than three).
    max_count_ratio : float, default=100
        Largest ratio of a count to the median count.
    what : str, default="rows"
        What is counted, named in the reasons.

    Returns
    -------
    dict of int to str
        The reason for each implausible count, by position.

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


def capped_counts(
    counts: Sequence[int], *, max_weight_ratio: float = MAX_WEIGHT_RATIO
) -> np.ndarray:
    """Each client's count, capped at ``max_weight_ratio`` times the median count.

    The weight a client takes in the barycenter and in the head is its capped
    count over the sum of capped counts (with fewer than three clients,
    counts are returned unchanged).

    Parameters
    ----------
    counts : sequence of int
        One count per client.
    max_weight_ratio : float, default=10
        The cap, in times the median count.

    Returns
    -------
    ndarray of float64
        The capped counts, in the clients' order.

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


def norm_ratios(norms: Sequence[float]) -> np.ndarray | None:
    """Each norm over the median of the non-zero norms; None with fewer than three of those.

    A head of norm zero scores nothing (O-FedAvg's head of a client holding
    one class, whose rows span the classes it holds): it moves no row of the
    average, so it takes no part in the median, and its ratio is zero.

    Parameters
    ----------
    norms : sequence of float
        One norm per client.

    Returns
    -------
    ndarray of float64 or None
        Each norm over the median non-zero norm, in the clients' order.

    Examples
    --------
    >>> from skslot.defence import norm_ratios
    >>> norm_ratios([0.0, 2.0, 0.0, 4.0, 3.0]).tolist()
    [0.0, 0.6666666666666666, 0.0, 1.3333333333333333, 1.0]
    """
    array = np.asarray(norms, dtype=np.float64)
    scoring = array > 0
    ratios = ratios_to_median(array[scoring])
    if ratios is None:
        return None
    out = np.zeros_like(array)
    out[scoring] = ratios
    return out


def implausible_norms(
    norms: Sequence[float], *, max_norm_ratio: float = MAX_NORM_RATIO, what: str = "norm"
) -> dict[int, str]:
    """Positions of clients whose ``norms`` exceed ``max_norm_ratio`` times the median.

    The median is over the non-zero norms (:func:`norm_ratios`).

    Used on O-FedAvg's local heads (Frobenius norm of ``[W, b]``): a client
    scaling its coefficients would otherwise dominate the average.

    Parameters
    ----------
    norms : sequence of float
        One norm per client (none is implausible with fewer than three).
    max_norm_ratio : float, default=10
        Largest ratio of a norm to the median norm.
    what : str, default="norm"
        What is measured, named in the reasons.

    Returns
    -------
    dict of int to str
        The reason for each implausible norm, by position.

    Examples
    --------
    >>> from skslot.defence import implausible_norms
    >>> implausible_norms([1.0, 1.2, 0.8, 1100.0], what="local head norm")
    {3: "local head norm 1e+03 times the clients' median (max-norm-ratio = 10)"}
    """
    ratios = norm_ratios(norms)
    if ratios is None:
        return {}
    return {
        k: f"{what} {r:.3g} times the clients' median (max-norm-ratio = {max_norm_ratio:g})"
        for k, r in enumerate(ratios)
        if r > max_norm_ratio
    }


def clipped_norms(
    norms: Sequence[float], *, clip_norm_ratio: float = CLIP_NORM_RATIO
) -> np.ndarray:
    """The factor that brings each norm to at most ``clip_norm_ratio`` times the median.

    The median is over the non-zero norms (:func:`norm_ratios`); a norm within
    the clip keeps the factor 1, one above it gets ``clip_norm_ratio / ratio``
    (with fewer than three non-zero norms, every factor is 1).

    Used on O-FedAvg's local heads (Frobenius norm of ``[W, b]``), as the
    weights are capped (:func:`capped_counts`): multiplying a head by the
    factor keeps its direction (every class's scores in the same order) and
    bounds how far it moves the average, so a client scaling its
    coefficients moves it no further than the clip.  Measured on the
    embedded digits and Office-Caltech10 (docs/results/attacks.md,
    docs/results/attacks_more_clients.md, docs/results/screening.md): at
    the default 1 (every head at most the median client's norm) local heads
    scaled nine times cost the honest clients at most 0.2 points at four,
    five and eight clients, and honest federations gain 5.7 points on
    average with each client's own mix and lose 0.7 where every class is
    served (6.8 at worst): a large honest head is mostly that of a client
    holding classes no other client holds, whose scores draw the others'
    rows into those classes.

    Parameters
    ----------
    norms : sequence of float
        One norm per client.
    clip_norm_ratio : float, default=1
        The clip, in times the median norm (``inf``: no clip).

    Returns
    -------
    ndarray of float64
        Per client, the factor in ``(0, 1]`` its head is multiplied by.

    Examples
    --------
    >>> from skslot.defence import clipped_norms
    >>> clipped_norms([1.0, 1.2, 0.8, 11.0], clip_norm_ratio=2.0).round(3).tolist()
    [1.0, 1.0, 1.0, 0.2]
    """
    ratios = norm_ratios(norms)
    if ratios is None:
        return np.ones(len(norms))
    over = ratios > clip_norm_ratio
    factors = np.ones(ratios.shape[0])
    factors[over] = clip_norm_ratio / ratios[over]
    return factors


@dataclass(frozen=True)
class DefenceBounds:
    """The server's bounds on what clients declare, and the checks that apply them.

    Each ratio and ``max_mean_offset`` may be ``inf``: no bound.

    Parameters
    ----------
    max_count_ratio : float, default=100
        A client declaring more than this many times the median client's rows
        is rejected.
    max_weight_ratio : float, default=10
        Each remaining client's weight, in the barycenter and the head, is
        capped at this many times the median count.
    max_norm_ratio : float, default=10
        O-FedAvg: a client whose local head's norm exceeds this many times the
        median client's is rejected (heads trained locally).
    clip_norm_ratio : float or None, default=1
        O-FedAvg: every other client's local heads are clipped to this many
        times the median client's norm (``None``: no clip).  Their direction
        is kept (:func:`~skslot.defence.clipped_norms`): a client scaling its
        coefficients moves the average no further than the clip.
    max_variance_ratio : float, default=100
        A summary whose mean variance ``tr(S) / m`` is more than this factor
        above or below the clients' median is rejected
        (:func:`~skslot.defence.implausible_summaries`, with 3 or more
        clients).  Honest clients of the real data sets stay within 9.5
        (docs/results/honest_bounds.md).
    max_mean_offset : float, default=10
        A summary whose mean lies more than this many median standard
        deviations from the clients' coordinate-wise median mean is rejected.
        The median standard deviation is ``sqrt(m * median variance)``;
        honest clients stay within 2.0.
    screen_significance : float, default=0.01
        Family-wise level of the screening's sign test.  The screening leaves
        one client out at a time (:mod:`skslot.defence.screening`; Bonferroni
        over the clients tested).
    screen_min_gain : float, default=0.02
        Smallest gain of the other clients' validation accuracy (a fraction of
        their rows) without a client that can exclude it.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence import DefenceBounds
    >>> clients = [GaussianSummary(n, np.zeros(2), np.eye(2)) for n in (100, 120, 90, 10**6)]
    >>> rejected, weights = DefenceBounds().check_summaries(clients)
    >>> sorted(rejected), weights.tolist()
    ([3], [100.0, 120.0, 90.0])
    """

    max_count_ratio: float = MAX_COUNT_RATIO
    max_weight_ratio: float = MAX_WEIGHT_RATIO
    max_norm_ratio: float = MAX_NORM_RATIO
    clip_norm_ratio: float | None = CLIP_NORM_RATIO
    max_variance_ratio: float = MAX_VARIANCE_RATIO
    max_mean_offset: float = MAX_MEAN_OFFSET
    screen_significance: float = SCREEN_SIGNIFICANCE
    screen_min_gain: float = SCREEN_MIN_GAIN

    #: The upload's consistency checks apply (:func:`skslot.protocol.stages.upload.check`).
    checks_consistency: ClassVar[bool] = True
    #: The clients' contributions may be screened with these thresholds.
    screens: ClassVar[bool] = True

    #: The values each bound may take (``inf``: no bound).
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **{
            ratio: [Interval(Real, 1.0, None, closed="left"), Options((math.inf,))]
            for ratio in RATIOS
        },
        "clip_norm_ratio": [Interval(Real, 1.0, None, closed="left"), Options((math.inf,)), None],
        "max_mean_offset": [Interval(Real, 0.0, None, closed="left"), Options((math.inf,))],
        "screen_significance": [Interval(Real, 0.0, 1.0, closed="both")],
        "screen_min_gain": [Interval(Real, 0.0, 1.0, closed="both")],
    }

    def __post_init__(self) -> None:
        validate_parameter_constraints(self._parameter_constraints, vars(self), type(self).__name__)

    def strongest_case(
        self, votes: Mapping[Hashable, Mapping[Hashable, tuple[int, int, int]]]
    ) -> tuple[Hashable | None, dict[Hashable, ScreeningEvidence]]:
        """The client the others' paired counts exclude, if any, by this defence's thresholds.

        Parameters
        ----------
        votes : mapping
            Per client, each other client's paired counts on it
            (see :func:`skslot.defence.screening.strongest_case`).

        Returns
        -------
        flagged : address or None
        evidence : dict of address to ScreeningEvidence
        """
        return strongest_case(
            votes, significance=self.screen_significance, min_gain=self.screen_min_gain
        )

    def check_summaries(
        self, summaries: Sequence[GaussianSummary]
    ) -> tuple[dict[int, str], np.ndarray]:
        """Positions of implausible clients with the reason, and the others' capped weights.

        Parameters
        ----------
        summaries : sequence of GaussianSummary

        Returns
        -------
        reasons : dict of int to str
            Why each implausible client (by position) is rejected.
        weights : ndarray
            The capped weights of the clients that remain, in their order.
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

        Parameters
        ----------
        sizes : sequence of int

        Returns
        -------
        dict of int to str
        """
        positions = [k for k, n in enumerate(sizes) if n > 0]
        found = implausible_counts(
            [sizes[k] for k in positions], max_count_ratio=self.max_count_ratio, what="test rows"
        )
        return {positions[k]: why for k, why in found.items()}

    def implausible_updates(self, norms: Sequence[float]) -> dict[int, str]:
        """Positions of local heads whose norm is out of line with the others'.

        Parameters
        ----------
        norms : sequence of float

        Returns
        -------
        dict of int to str
        """
        return implausible_norms(norms, max_norm_ratio=self.max_norm_ratio, what="local head norm")

    def clipped_updates(self, norms: Sequence[float]) -> np.ndarray:
        """The factor each local head is multiplied by, to at most ``clip_norm_ratio`` times
        the median norm.

        Parameters
        ----------
        norms : sequence of float
            One norm per client whose heads were kept.

        Returns
        -------
        ndarray of float64
            Per client, a factor in ``(0, 1]`` (see :func:`clipped_norms`);
            every factor 1 without a clip.
        """
        if self.clip_norm_ratio is None:
            return np.ones(len(norms))
        return clipped_norms(norms, clip_norm_ratio=self.clip_norm_ratio)


@dataclass(frozen=True)
class NoDefence(DefenceBounds):
    """No defence: bounds that every client meets, and no screening's exclusion.

    The protocol's stand-in for a missing :class:`DefenceBounds`
    (``defence=None``): it finds nothing implausible, caps no weight, clips no
    head, skips the checks of consistency between a client's messages, and
    excludes no one.

    Parameters
    ----------
    max_count_ratio, max_weight_ratio, max_norm_ratio : float, default=inf
        No bound (see :class:`DefenceBounds`).
    clip_norm_ratio : None
        No clip.
    max_variance_ratio, max_mean_offset : float, default=inf
        No bound.
    screen_significance, screen_min_gain : float, default=0.0, 1.0
        No sign test passes at level 0 (and the gain asked for is all the
        rows): the screening excludes no one.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot import GaussianSummary
    >>> from skslot.defence import NoDefence
    >>> clients = [GaussianSummary(n, np.zeros(2), np.eye(2)) for n in (100, 10**6)]
    >>> NoDefence().check_summaries(clients)
    ({}, array([1.e+02, 1.e+06]))
    """

    max_count_ratio: float = math.inf
    max_weight_ratio: float = math.inf
    max_norm_ratio: float = math.inf
    clip_norm_ratio: float | None = None
    max_variance_ratio: float = math.inf
    max_mean_offset: float = math.inf
    screen_significance: float = 0.0
    screen_min_gain: float = 1.0

    checks_consistency: ClassVar[bool] = False
    screens: ClassVar[bool] = False

    def check_summaries(
        self, summaries: Sequence[GaussianSummary]
    ) -> tuple[dict[int, str], np.ndarray]:
        return {}, np.array([float(s.n) for s in summaries])

    def implausible_test_sizes(self, sizes: Sequence[int]) -> dict[int, str]:
        return {}

    def implausible_updates(self, norms: Sequence[float]) -> dict[int, str]:
        return {}
