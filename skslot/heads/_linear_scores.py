"""The global head as the server sends it back: linear decision scores."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..label_mix import prior_shift
from ..wire._errors import StatisticsFormatError
from ..wire.arrays import ArrayMessage, read_array

#: The score of a class no client's rows trained: finite (it travels in a head's message)
#: and far below any score, so the class is never predicted.
UNSCORED = -1e30


@dataclass(frozen=True, eq=False)
class LinearScores:
    """A fitted head as the server sends it back: scores ``X W^T + b``.

    Every head with linear decision scores (FedCGS, O-FedAvg, and FedPFT with
    a linear server classifier) exports itself in this form with
    :meth:`~skslot.heads.OneShotHead.linear_scores`; a client predicts with it
    exactly as the head would.

    Parameters
    ----------
    classes : ndarray of shape (C,)
    coef : ndarray of shape (C, m)
    intercept : ndarray of shape (C,)
    federation : ndarray of shape (C,), optional
        The federation's class proportions, where each client is to predict
        with its own label mix (the head's ``label_mix="client"``).
    embedded : ndarray of shape (C,), optional
        ``log`` of the class prior the scores embed (with ``federation``;
        zero for a class the federation has no rows of).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.heads import LinearScores
    >>> head = LinearScores(np.array([3, 7]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.zeros(2))
    >>> head.predict(np.array([[2.0, 1.0], [0.0, 5.0]]))
    array([3, 7])
    >>> LinearScores.from_arrays(head.to_arrays(), classes=head.classes, n_features=2).coef.shape
    (2, 2)
    """

    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    federation: np.ndarray | None = None
    embedded: np.ndarray | None = None

    def decision_scores(self, X: np.ndarray, class_counts: Any = None) -> np.ndarray:
        """Class scores ``X W^T + b``, under a client's own label mix where it is given.

        Parameters
        ----------
        X : ndarray of shape (n_samples, m)
        class_counts : array-like of shape (C,), optional
            The client's own training rows of each class: with
            ``federation`` set, the scores are shifted by ``log pi_k -
            embedded`` (:mod:`skslot.label_mix`); without, or for a head
            that serves the federation's mix, left as they are.

        Returns
        -------
        scores : ndarray of shape (n_samples, C)
        """
        scores = X @ self.coef.T.astype(X.dtype, copy=False) + self.intercept
        if class_counts is None or self.federation is None:
            return scores
        return scores + prior_shift(np.asarray(class_counts), self.federation, self.embedded)

    def predict(self, X: np.ndarray, class_counts: Any = None) -> np.ndarray:
        """Class of the largest score of each row.

        Parameters
        ----------
        X : ndarray of shape (n_samples, m)
        class_counts : array-like of shape (C,), optional
            The client's own class counts (see :meth:`decision_scores`).

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        return self.classes[np.argmax(self.decision_scores(X, class_counts), axis=1)]

    def to_arrays(self) -> ArrayMessage:
        """The head as a message of arrays (the class set is agreed and not sent).

        Returns
        -------
        arrays : dict of str to ndarray
            ``"coef"`` and ``"intercept"``, and with a client prior
            ``"federation"`` and ``"embedded"``.
        """
        arrays = {"coef": self.coef, "intercept": self.intercept}
        if self.federation is not None:
            embedded = self.embedded
            if embedded is None:  # the scores embed the federation's prior (as prior_shift reads)
                embedded = np.log(np.where(self.federation > 0, self.federation, 1.0))
            arrays.update(federation=self.federation, embedded=embedded)
        return arrays

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, Any], *, classes: np.ndarray, n_features: int
    ) -> LinearScores:
        """Decode and check a received head against the agreed class set and dimension.

        Parameters
        ----------
        arrays : mapping of str to ndarray
            The received message (:meth:`to_arrays`).
        classes : ndarray of shape (C,)
            The run's class set.
        n_features : int
            The run's dimension ``m``.

        Returns
        -------
        LinearScores

        Raises
        ------
        StatisticsFormatError
            If an array is missing, of another shape or not finite.
        """
        C = len(classes)
        coef = read_array(arrays, "coef", (C, n_features))
        # a class no client had scores very low but finite, as in the heads
        intercept = read_array(arrays, "intercept", (C,))
        if "federation" not in arrays and "embedded" not in arrays:
            return cls(np.asarray(classes), coef, intercept)
        federation = read_array(arrays, "federation", (C,), nonnegative=True)
        embedded = read_array(arrays, "embedded", (C,))
        if not np.isclose(federation.sum(), 1.0):
            raise StatisticsFormatError(
                f"the federation's class proportions add up to {federation.sum():.6g}, not 1"
            )
        return cls(np.asarray(classes), coef, intercept, federation, embedded)
