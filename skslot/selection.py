"""Choosing ``tau`` inside the federation: one-shot validation of candidate heads.

No party sees all rows, so ``tau`` (and any server-side head parameter, such as
FedCGS's ridge) is chosen by the protocol itself.  This module holds its client
and server functions; :class:`~skslot.FederatedTauSearch` runs them in process
and the Flower apps (:mod:`skslot.flower`) run them between real parties, so
the two agree exactly.

The protocol, for a grid of candidates ``(tau, head parameters)``:

1. *client*: split its rows into a fitting and a validation part
   (:func:`validation_split`, stratified by class), send the summary of its
   fitting rows (so that its held-out rows are new to its map, as test rows
   are) and, for heads whose statistics are moments, the statistics of each
   part of its *unaligned* rows;
2. *server*: build the reference and every client's map ``T_k``; fit one head
   per candidate from the fitting statistics pushed through ``T_k^tau``
   (:func:`candidate_heads`; for O-FedAvg, whose local training is not a
   moment, each client first uploads one local head per ``tau``,
   :func:`local_updates`);
3. *client*: align its validation rows with its own map at each candidate's
   ``tau`` and send only the counts of correct predictions per class
   (:func:`score_candidates`: a few hundred bytes);
4. *server*: score each candidate by the mean over clients of each client's
   balanced validation accuracy and choose the least-transport candidate
   within one standard error of the best (:func:`select_candidate`), then
   refit the head at that candidate on fitting and validation statistics
   together (:func:`refit_head`).

Validation statistics serve only the final refit, never the choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone

from ._validation import check_in_range, check_open_fraction, check_option
from .gaussian import GaussianMap
from .heads._base import OneShotHead
from .heads._wire import ArrayMessage, LinearScores, StatisticsFormatError, read_array

__all__ = [
    "DEFAULT_TAUS",
    "Candidate",
    "NoValidationRowsError",
    "Selection",
    "ValidationCounts",
    "candidate_grid",
    "candidate_heads",
    "check_tau_grid",
    "client_statistics",
    "head_without",
    "local_updates",
    "refit_head",
    "score_candidates",
    "select_candidate",
    "validation_sizes",
    "validation_split",
]

#: The paper's sweep, and the default grid of the federated search.
DEFAULT_TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


class NoValidationRowsError(ValueError):
    """No client held out a validation row, so the federation cannot choose.

    Clients hold out a share of each of their classes; clients with one or
    two rows per class (many small clients under label skew) hold out none.
    """


def check_tau_grid(taus: Any) -> tuple[float, ...]:
    """A non-empty grid of distinct ``tau`` in ``[0, 1]``, sorted ascending.

    Raises
    ------
    ValueError
        If the grid is empty, has a value outside ``[0, 1]`` or not a real
        number, or repeats a value.
    """
    if isinstance(taus, (str, bytes)) or not isinstance(taus, Sequence | np.ndarray):
        raise ValueError(f"taus must be a sequence of numbers in [0, 1], got {taus!r}")
    values = [check_in_range("each tau", t, 0.0, 1.0) for t in taus]
    if not values:
        raise ValueError("taus must hold at least one value")
    repeated = sorted({t for t in values if values.count(t) > 1})
    if repeated:
        raise ValueError(f"taus repeats {repeated}; give each value once")
    return tuple(sorted(values))


@dataclass(frozen=True)
class Candidate:
    """One point of the search: a ``tau`` and server-side head parameters."""

    tau: float
    params: dict = field(default_factory=dict)

    def describe(self) -> dict:
        """``{"tau": tau, **params}``, as a row of ``cv_results_``."""
        return {"tau": self.tau, **self.params}


def candidate_grid(
    head: OneShotHead, taus: Any, head_grid: Mapping[str, Sequence] | None = None
) -> list[Candidate]:
    """Every combination of ``tau`` and of the server-side parameters in ``head_grid``.

    Ordered by ``tau`` ascending, then by ``head_grid`` as given: ties in the
    selection go to the earlier candidate, so to the smaller ``tau``.

    Raises
    ------
    ValueError
        If ``head_grid`` names a parameter the clients' statistics depend on
        (searching it would need new client statistics per value), or lists
        no value for a parameter.
    """
    taus = check_tau_grid(taus)
    grid = dict(head_grid or {})
    allowed = getattr(head, "server_params", ())
    for name, values in grid.items():
        if name not in allowed:
            raise ValueError(
                f"head_grid can only search server-side parameters of {type(head).__name__} "
                f"({', '.join(allowed) or 'none'}), got {name!r}"
            )
        if isinstance(values, (str, bytes)) or len(values) == 0:
            raise ValueError(f"head_grid[{name!r}] must be a non-empty list of values")
    combos: list[dict] = [{}]
    for name, values in grid.items():
        combos = [{**c, name: v} for c in combos for v in values]
    return [Candidate(float(tau), combo) for tau in taus for combo in combos]


def validation_split(y: Any, fraction: float, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """A client's rows split into a fitting and a validation part, stratified by class.

    Of the ``n_c`` rows of each class, ``floor(fraction * n_c)`` drawn at
    random go to validation, so every class keeps at least one fitting row;
    a class with too few rows (or a client too small) has no validation rows.

    Returns
    -------
    fit_rows, validation_rows : ndarray of int
        Sorted row indices; the validation part may be empty.

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.selection import validation_split
    >>> fit, val = validation_split(np.array([0] * 10 + [1] * 4), 0.25, seed=0)
    >>> len(fit), len(val)  # 2 of class 0 and 1 of class 1 held out
    (11, 3)
    """
    y = np.asarray(y)
    labels, counts = np.unique(y, return_counts=True)
    sizes = validation_sizes(counts, fraction)
    rng = np.random.RandomState(seed)
    held = []
    for label, k in zip(labels, sizes, strict=True):
        rows = np.flatnonzero(y == label)
        if k:
            held.append(rng.permutation(rows)[:k])
    val = np.sort(np.concatenate(held)) if held else np.empty(0, dtype=np.intp)
    mask = np.ones(y.shape[0], dtype=bool)
    mask[val] = False
    return np.flatnonzero(mask), val


def validation_sizes(class_counts: Any, fraction: float) -> np.ndarray:
    """Rows :func:`validation_split` holds out of each class: ``floor(fraction * n_c)``.

    What the server derives from a client's class counts, to tie its
    validation part and its counts to them.

    >>> from skslot.selection import validation_sizes
    >>> validation_sizes([10, 4, 1], 0.25).tolist()
    [2, 1, 0]
    """
    fraction = check_open_fraction("validation_fraction", fraction)
    counts = np.asarray(class_counts, dtype=np.int64)
    return np.floor(fraction * counts).astype(np.int64)


@dataclass(frozen=True, eq=False)
class ValidationCounts:
    """What a client sends back: per candidate and class, its correct validation predictions.

    Attributes
    ----------
    correct : ndarray of shape (n_candidates, C)
        Correct predictions of each candidate head among the client's
        validation rows of each class.
    total : ndarray of shape (C,)
        The client's validation rows of each class.
    """

    correct: np.ndarray
    total: np.ndarray

    @property
    def n_samples(self) -> int:
        return int(self.total.sum())

    def balanced_accuracy(self) -> np.ndarray:
        """Per candidate, the mean over the client's classes of the recall."""
        present = self.total > 0
        return (self.correct[:, present] / self.total[present]).mean(axis=1)

    def balanced_accuracy_variance(self) -> np.ndarray:
        """Per candidate, the binomial sampling variance of :meth:`balanced_accuracy`.

        ``sum_c p_c (1 - p_c) / n_c / C^2`` over the ``C`` classes present,
        with the recall smoothed as ``p_c = (correct_c + 1/2) / (n_c + 1)`` so
        that a class of one or two rows counts as uncertain, not as exact.
        """
        present = self.total > 0
        n = self.total[present]
        p = (self.correct[:, present] + 0.5) / (n + 1.0)
        return (p * (1.0 - p) / n).sum(axis=1) / present.sum() ** 2

    def to_arrays(self) -> ArrayMessage:
        return {"correct": self.correct, "total": self.total}

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, Any],
        *,
        n_candidates: int,
        n_classes: int,
        n_samples: int | None = None,
    ) -> ValidationCounts:
        """Decode and check received counts.

        ``n_samples``, when given, is the size of the client's validation part
        as the server knows it (its summary's count minus its fitting count):
        the totals must add up to it.  No count may exceed its class total.

        Raises
        ------
        StatisticsFormatError
            If a count is missing, of the wrong shape, not a non-negative
            integer, larger than its total, or the totals do not add up.
        """
        total = read_array(arrays, "total", (n_classes,), integer=True, nonnegative=True)
        correct = read_array(
            arrays, "correct", (n_candidates, n_classes), integer=True, nonnegative=True
        )
        if n_samples is not None and int(total.sum()) != n_samples:
            raise StatisticsFormatError(
                f"validation counts cover {int(total.sum())} rows, but the client's validation "
                f"part has {n_samples}"
            )
        if np.any(correct > total):
            raise StatisticsFormatError("more correct predictions than validation rows of a class")
        return cls(correct, total)


def score_candidates(
    heads: Sequence[LinearScores],
    taus: Sequence[float],
    transport: GaussianMap,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
) -> ValidationCounts:
    """Client step: count correct predictions of each candidate on the validation rows.

    Each candidate ``j`` predicts the rows aligned with this client's own map
    at its ``tau``, ``transport.geodesic(taus[j])`` (aligned once per
    distinct ``tau``).

    Parameters
    ----------
    heads : sequence of LinearScores
        The candidate heads, as received.
    taus : sequence of float
        Each candidate's ``tau``.
    transport : GaussianMap
        This client's full (``tau = 1``) map onto the reference.
    X, y : ndarray
        The client's validation rows and labels.
    classes : ndarray
        The global class set.
    """
    if len(heads) != len(taus):
        raise ValueError(f"{len(heads)} candidate heads but {len(taus)} taus")
    classes = np.asarray(classes)
    codes = np.searchsorted(classes, y)
    total = np.bincount(codes, minlength=classes.shape[0]).astype(np.int64)
    correct = np.zeros((len(heads), classes.shape[0]), dtype=np.int64)
    aligned: dict[float, np.ndarray] = {}
    for j, (head, tau) in enumerate(zip(heads, taus, strict=True)):
        if tau not in aligned:
            aligned[tau] = transport.geodesic(tau).apply(X)
        hit = head.predict(aligned[tau]) == y
        correct[j] = np.bincount(codes[hit], minlength=classes.shape[0])
    return ValidationCounts(correct, total)


@dataclass(frozen=True, eq=False)
class Selection:
    """The server's choice and the table it was made from.

    Attributes
    ----------
    index : int
        Position of the chosen candidate.
    candidate : Candidate
    scores : ndarray of shape (n_clients, n_candidates)
        Balanced validation accuracy of each candidate at each client that
        took part, in the order of ``clients``.
    standard_errors : ndarray of shape (n_candidates,)
        Standard error of each candidate's mean score (binomial, from the counts).
    clients : list
        Labels of the clients whose counts were used.
    candidates : list of Candidate
    best : int
        Position of the candidate with the highest mean score (``index`` is
        the least-transport one within a standard error of it).
    """

    index: int
    candidate: Candidate
    scores: np.ndarray
    standard_errors: np.ndarray
    clients: list
    candidates: list
    best: int

    @property
    def mean_scores(self) -> np.ndarray:
        return self.scores.mean(axis=0)

    def table(self) -> dict[str, Any]:
        """A ``cv_results_``-like dict: one entry per candidate, one column per client.

        Keys: ``params``, ``param_<name>`` for ``tau`` and each searched
        parameter, ``client<i>_validation_score`` (``i`` the position in
        ``clients``), ``mean_validation_score``, ``std_validation_score``
        (across clients), ``std_error_validation_score`` (of the mean, from the
        counts), ``rank_validation_score`` (by mean score) and ``chosen``.
        """
        rows = [c.describe() for c in self.candidates]
        out: dict[str, Any] = {"params": rows}
        for name in rows[0]:
            out[f"param_{name}"] = np.ma.MaskedArray(
                np.array([r[name] for r in rows], dtype=object), mask=False
            )
        for i in range(len(self.clients)):
            out[f"client{i}_validation_score"] = self.scores[i].copy()
        mean = self.mean_scores
        out["mean_validation_score"] = mean
        out["std_validation_score"] = self.scores.std(axis=0)
        out["std_error_validation_score"] = self.standard_errors.copy()
        order = sorted(range(len(mean)), key=lambda j: (-mean[j], j))
        rank = np.empty(len(mean), dtype=np.int32)
        rank[order] = np.arange(1, len(mean) + 1)
        out["rank_validation_score"] = rank
        out["chosen"] = np.arange(len(mean)) == self.index
        return out


SELECTION_RULES = ("one-standard-error", "best")


def select_candidate(
    candidates: Sequence[Candidate],
    counts: Mapping[Any, ValidationCounts],
    rule: str = "one-standard-error",
) -> Selection:
    """Server step: choose a candidate from the clients' validation counts.

    Each candidate's score is the mean over clients of each client's
    balanced validation accuracy: every client that sent counts (with at
    least one validation row) weighs the same, whatever its size, so a large
    client cannot decide alone.

    With ``rule="one-standard-error"`` (the default) the choice is the
    *earliest* candidate (the least transport: candidates are ordered by
    ``tau``) whose score is within one standard error of the best score, the
    one-standard-error rule of Breiman et al. [1]_ (Hastie et al. [2]_, 7.10).
    The standard error is binomial, computed from the counts alone
    (:meth:`ValidationCounts.balanced_accuracy_variance`).  Clients hold few
    validation rows per class, so a plain maximum often follows noise; this
    rule moves away from ``tau = 0`` only when the validation data clearly
    favour it.  ``rule="best"`` takes the maximum (ties to the earliest).

    Raises
    ------
    NoValidationRowsError
        If no client has validation rows (a ``ValueError``).

    References
    ----------
    .. [1] Breiman, Friedman, Olshen and Stone, "Classification and Regression
       Trees", 1984, section 3.4.3.
    .. [2] Hastie, Tibshirani and Friedman, "The Elements of Statistical
       Learning", 2nd ed., 2009.
    """
    check_option("rule", rule, SELECTION_RULES)
    candidates = list(candidates)
    used = {label: c for label, c in counts.items() if c.n_samples > 0}
    if not used:
        raise NoValidationRowsError(
            "no client has validation rows to choose tau with; use a larger "
            "validation_fraction or clients with more rows"
        )
    for label, c in used.items():
        if c.correct.shape[0] != len(candidates):
            raise ValueError(
                f"client {label!r} scored {c.correct.shape[0]} candidates, not {len(candidates)}"
            )
    scores = np.array([c.balanced_accuracy() for c in used.values()])
    variance = np.array([c.balanced_accuracy_variance() for c in used.values()])
    standard_errors = np.sqrt(variance.sum(axis=0)) / len(used)
    mean = scores.mean(axis=0)
    best = int(np.flatnonzero(mean == mean.max())[0])
    index = best
    if rule == "one-standard-error":
        index = int(np.flatnonzero(mean >= mean[best] - standard_errors[best])[0])
    return Selection(
        index, candidates[index], scores, standard_errors, list(used), candidates, best
    )


def candidate_heads(
    head: OneShotHead,
    candidates: Sequence[Candidate],
    statistics: Sequence | Mapping[float, Sequence],
    classes: np.ndarray,
    maps: Sequence[GaussianMap] | None = None,
) -> list[OneShotHead]:
    """Server step: one fitted head per candidate.

    Parameters
    ----------
    head : OneShotHead
        The head template (not modified).
    candidates : sequence of Candidate
    statistics : sequence, or mapping of tau to sequence
        For a head that aligns statistics (FedCGS, FedPFT): each client's
        statistics of its unaligned fitting rows, and ``maps``, each client's
        full map; the server pushes them through ``T_k^tau``.  For O-FedAvg: a
        mapping from each ``tau`` to the clients' local heads trained at it.
    classes : ndarray
    maps : sequence of GaussianMap, optional
    """
    fitted = []
    for candidate in candidates:
        model = clone(head).set_params(**candidate.params)
        if isinstance(statistics, Mapping):
            model.fit_from_statistics(statistics[candidate.tau], classes)
        else:
            model.fit_from_statistics(statistics, classes, maps=_at(maps, candidate.tau))
        fitted.append(model)
    return fitted


def head_without(
    head: OneShotHead,
    candidate: Candidate,
    statistics: Sequence | Mapping[float, Sequence],
    classes: np.ndarray,
    k: int,
    maps: Sequence[GaussianMap] | None = None,
) -> OneShotHead:
    """Server step: the head at ``candidate`` on every client's statistics but the ``k``-th.

    ``statistics`` and ``maps`` as in :func:`candidate_heads` (for O-FedAvg,
    the local heads at ``candidate.tau``): the screening's heads
    (:mod:`skslot.screening`).
    """
    if isinstance(statistics, Mapping):
        kept = {candidate.tau: _without(statistics[candidate.tau], k)}
        return candidate_heads(head, [candidate], kept, classes)[0]
    rest = None if maps is None else _without(maps, k)
    return candidate_heads(head, [candidate], _without(statistics, k), classes, rest)[0]


def _without(values: Sequence, k: int) -> list:
    return [v for i, v in enumerate(values) if i != k]


def refit_head(
    head: OneShotHead,
    candidate: Candidate,
    classes: np.ndarray,
    statistics: Sequence,
    validation_statistics: Sequence | None = None,
    maps: Sequence[GaussianMap] | None = None,
) -> OneShotHead:
    """Server step: the final head at the chosen candidate, on all rows.

    Parameters
    ----------
    head : OneShotHead
    candidate : Candidate
    classes : ndarray
    statistics : sequence
        For a head that aligns statistics: each client's fitting statistics
        (unaligned), with ``maps`` each client's full map.  For O-FedAvg: the
        local heads the clients trained on all their rows at the chosen ``tau``.
    validation_statistics : sequence, optional
        Each client's validation statistics, ``None`` for a client without
        validation rows; merged with its fitting statistics into those of all
        its rows (``statistics.merge``: exact for FedCGS, the maximum-likelihood
        Gaussian of the union for one-component FedPFT mixtures).
    maps : sequence of GaussianMap, optional
    """
    statistics = list(statistics)
    for k, extra in enumerate(validation_statistics or []):
        if extra is not None:  # the client's statistics of all its rows
            statistics[k] = statistics[k].merge(extra)
    model = clone(head).set_params(**candidate.params)
    return model.fit_from_statistics(statistics, classes, maps=_at(maps, candidate.tau))


def client_statistics(
    head: OneShotHead,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    parts: tuple[np.ndarray, np.ndarray] | None,
    *,
    client_index: int = 0,
) -> tuple[Any, Any]:
    """Client step of a head that aligns statistics: statistics of each part of its rows.

    Returns ``(fitting, validation)``: with ``parts`` (from
    :func:`validation_split`) the statistics of the fitting rows and of the
    validation rows (``None`` when there are none); without, those of all
    rows and ``None``.  The rows are not aligned: the server aligns the
    statistics.
    """
    head = clone(head)  # computing statistics records n_features_in_ on the head
    if parts is None:
        return head.client_statistics(X, y, classes, client_index=client_index), None
    fit, val = parts
    fitting = head.client_statistics(X[fit], y[fit], classes, client_index=client_index)
    if val.shape[0] == 0:
        return fitting, None
    return fitting, head.client_statistics(X[val], y[val], classes, client_index=client_index)


def local_updates(
    head: OneShotHead,
    X: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    transport: GaussianMap,
    taus: Sequence[float],
    *,
    client_index: int = 0,
) -> list:
    """Client step of a head trained on aligned rows (O-FedAvg): one update per ``tau``."""
    head = clone(head)  # training records n_features_in_ on the head
    return [
        head.client_statistics(
            transport.geodesic(tau).apply(X), y, classes, client_index=client_index
        )
        for tau in taus
    ]


def _at(maps: Sequence[GaussianMap] | None, tau: float) -> list[GaussianMap] | None:
    """The maps moved a fraction ``tau``; ``None`` (no transport at all) for ``tau = 0``."""
    if maps is None or tau == 0.0:
        return None
    return [t.geodesic(tau) for t in maps]
