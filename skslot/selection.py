"""Choosing ``tau`` inside the federation: the candidates, the validation split, the choice.

The clients count each candidate head's correct predictions on their
held-out rows (the ``validation`` stage, :mod:`skslot.protocol.stages.validation`);
this module holds what the server and the clients agree on around it: the
candidate grid, the stratified split (:func:`validation_split`) and the
choice from the counts (:func:`select_candidate`).  How the protocol runs is
told in docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Protocol

import numpy as np
from sklearn.base import BaseEstimator

from ._validation import check_in_range, check_open_fraction, check_option
from .defaults import TAUS

__all__ = [
    "DEFAULT_TAUS",
    "Candidate",
    "NoValidationRowsError",
    "Selection",
    "ValidationScores",
    "candidate_grid",
    "check_tau_grid",
    "select_candidate",
    "validation_sizes",
    "validation_split",
]

#: The paper's sweep, and the default grid of the federated search.
DEFAULT_TAUS = TAUS


class ValidationScores(Protocol):
    """What the choice reads of a client's validation counts
    (:class:`~skslot.protocol.ValidationCounts`, the ``validation`` stage's reply)."""

    @property
    def correct(self) -> np.ndarray:
        """Per candidate and class, the correct predictions."""

    @property
    def n_samples(self) -> int:
        """The client's validation rows."""

    def balanced_accuracy(self) -> np.ndarray:
        """Per candidate, the mean over the client's classes of the recall."""

    def balanced_accuracy_variance(self) -> np.ndarray:
        """Per candidate, the binomial sampling variance of :meth:`balanced_accuracy`."""


class NoValidationRowsError(ValueError):
    """No client held out a validation row, so the federation cannot choose.

    Clients hold out a share of each of their classes; clients with one or
    two rows per class (many small clients under label skew) hold out none.
    """


def check_tau_grid(taus: Any) -> tuple[float, ...]:
    """A non-empty grid of distinct ``tau`` in ``[0, 1]``, sorted ascending.

    Parameters
    ----------
    taus : sequence of float
        The grid to check.

    Returns
    -------
    tuple of float
        The values, sorted ascending.

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
    """One point of the search: a ``tau`` and server-side head parameters.

    Parameters
    ----------
    tau : float
        The fraction of the transport to the reference.
    params : dict, default={}
        Values of the head's server-side parameters.
    """

    tau: float
    params: dict = field(default_factory=dict)

    def describe(self) -> dict:
        """``{"tau": tau, **params}``, as a row of ``cv_results_``.

        Returns
        -------
        dict
        """
        return {"tau": self.tau, **self.params}


def candidate_grid(
    head: BaseEstimator, taus: Any, head_grid: Mapping[str, Sequence] | None = None
) -> list[Candidate]:
    """Every combination of ``tau`` and of the server-side parameters in ``head_grid``.

    Ordered by ``tau`` ascending, then by ``head_grid`` as given: ties in the
    selection go to the earlier candidate, so to the smaller ``tau``.

    Parameters
    ----------
    head : OneShotHead
        The head template (its ``server_params`` may be searched).
    taus : tuple of float
        The grid of ``tau`` (checked by :func:`check_tau_grid`).
    head_grid : mapping of str to sequence, optional
        Values of the head's server-side parameters to search.

    Returns
    -------
    list of Candidate

    Raises
    ------
    ValueError
        If ``head_grid`` names a parameter the clients' statistics depend on
        (searching it would need new client statistics per value), or lists
        no value for a parameter.
    """
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
    combos = [dict(zip(grid, values, strict=True)) for values in product(*grid.values())]
    return [Candidate(float(tau), combo) for tau in sorted(taus) for combo in combos]


def validation_split(y: Any, fraction: float, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """A client's rows split into a fitting and a validation part, stratified by class.

    Of the ``n_c`` rows of each class, ``floor(fraction * n_c)`` drawn at
    random go to validation, so every class keeps at least one fitting row;
    a class with too few rows (or a client too small) has no validation rows.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        The client's labels.
    fraction : float
        Share of each class held out, in ``(0, 1)``.
    seed : int or None
        Seed of the draw.

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
    held = [
        rng.permutation(np.flatnonzero(y == label))[:k]
        for label, k in zip(labels, sizes, strict=True)
        if k
    ]
    val = np.sort(np.concatenate(held)) if held else np.empty(0, dtype=np.intp)
    return np.setdiff1d(np.arange(y.shape[0]), val), val


def validation_sizes(class_counts: Any, fraction: float) -> np.ndarray:
    """Rows :func:`validation_split` holds out of each class: ``floor(fraction * n_c)``.

    What the server derives from a client's class counts, to tie its
    validation part and its counts to them.

    Parameters
    ----------
    class_counts : array-like of int
        The client's rows of each class.
    fraction : float
        Share of each class held out, in ``(0, 1)``.

    Returns
    -------
    ndarray of int64
        The rows held out of each class.

    Examples
    --------
    >>> from skslot.selection import validation_sizes
    >>> validation_sizes([10, 4, 1], 0.25).tolist()
    [2, 1, 0]
    """
    fraction = check_open_fraction("validation_fraction", fraction)
    counts = np.asarray(class_counts, dtype=np.int64)
    return np.floor(fraction * counts).astype(np.int64)


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
        """Each candidate's mean score over the clients."""
        return self.scores.mean(axis=0)

    def table(self) -> dict[str, Any]:
        """A ``cv_results_``-like dict: one entry per candidate, one column per client.

        Keys: ``params``, ``param_<name>`` for ``tau`` and each searched
        parameter, ``client<i>_validation_score`` (``i`` the position in
        ``clients``), ``mean_validation_score``, ``std_validation_score``
        (across clients), ``std_error_validation_score`` (of the mean, from the
        counts), ``rank_validation_score`` (by mean score) and ``chosen``.

        Returns
        -------
        dict of str to list or ndarray
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
        order = np.argsort(-mean, kind="stable")  # ties to the earlier candidate
        out["rank_validation_score"] = np.argsort(order).astype(np.int32) + 1
        out["chosen"] = np.arange(len(mean)) == self.index
        return out


SELECTION_RULES = ("one-standard-error", "best")


def select_candidate(
    candidates: Sequence[Candidate],
    counts: Mapping[Any, ValidationScores],
    selection_rule: str = "one-standard-error",
) -> Selection:
    """Server step: choose a candidate from the clients' validation counts.

    Each candidate's score is the mean over clients of each client's
    balanced validation accuracy: every client that sent counts (with at
    least one validation row) weighs the same, whatever its size, so a large
    client cannot decide alone.

    With ``selection_rule="one-standard-error"`` (the default) the choice is the
    *earliest* candidate (the least transport: candidates are ordered by
    ``tau``) whose score is within one standard error of the best score, the
    one-standard-error rule of Breiman et al. [1]_ (Hastie et al. [2]_, 7.10).
    The standard error is binomial, computed from the counts alone
    (:meth:`ValidationCounts.balanced_accuracy_variance`).  Clients hold few
    validation rows per class, so a plain maximum often follows noise; this
    rule moves away from ``tau = 0`` only when the validation data clearly
    favour it.  ``selection_rule="best"`` takes the maximum (ties to the earliest).

    Parameters
    ----------
    candidates : sequence of Candidate
        The candidates, in the order the clients scored them.
    counts : mapping of client to ValidationCounts
        Each client's counts (those without validation rows are left out).
    selection_rule : {"one-standard-error", "best"}, default="one-standard-error"
        How the candidate is chosen from the mean scores.

    Returns
    -------
    Selection
        The choice and the table it was made from.

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
    check_option("selection_rule", selection_rule, SELECTION_RULES)
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
    if selection_rule == "one-standard-error":
        index = int(np.flatnonzero(mean >= mean[best] - standard_errors[best])[0])
    return Selection(
        index, candidates[index], scores, standard_errors, list(used), candidates, best
    )
