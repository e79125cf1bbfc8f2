"""One-shot FedAvg: local multinomial linear heads averaged once."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.utils import check_random_state

from .._param_validation import Interval, Options
from .._validation import client_weights
from ..defaults import LABEL_MIX
from ..label_mix import LABEL_MIXES, averaged_log_prior
from ..maps import GaussianMap, rebased_scores
from ..wire import StatisticsFormatError
from ..wire.arrays import ArrayMessage, read_array, read_count, read_sample_count
from ._base import LinearHeadMixin, OneShotHead
from ._linear_scores import UNSCORED
from ._softmax import fit_softmax_regression

__all__ = ["LinearHeadUpdate", "OneShotFedAvgClassifier"]


@dataclass(frozen=True, eq=False)
class LinearHeadUpdate:
    """A client's locally trained head: ``coef`` (C, m), ``intercept`` (C,), count ``n``.

    Parameters
    ----------
    classes : ndarray of shape (C,)
        The global class set.
    coef : ndarray of shape (C, m)
    intercept : ndarray of shape (C,)
    n : float
        Rows the head was trained on: its weight in the server's average
        (:meth:`scaled` multiplies it by a factor).
    n_iter : int, default=0
        Iterations of the client's solver.
    class_rows : ndarray of shape (C,), optional
        Rows of each class the head was trained on, when it spans only the
        classes its client holds (``local_classes="held"``): its rows of
        other classes are zero, and the server averages each class's row
        over the clients that discriminate it.
    """

    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    n: float
    n_iter: int = 0
    class_rows: np.ndarray | None = None

    @property
    def n_features(self) -> int:
        """The dimension ``m`` of the rows."""
        return self.coef.shape[1]

    @property
    def n_samples(self) -> int:
        """The averaging weight ``n``, as an int."""
        return int(self.n)

    def norm(self) -> float:
        """Frobenius norm of ``[W, b]`` (what the defence compares across clients).

        Returns
        -------
        norm : float
            ``||[W, b]||_F``.
        """
        return float(np.linalg.norm(np.column_stack([self.coef, self.intercept])))

    def clipped(self, factor: float) -> LinearHeadUpdate:
        """The update with its head ``[W, b]`` multiplied by ``factor``, its weight kept.

        Parameters
        ----------
        factor : float
            The multiplier of ``coef`` and ``intercept`` (the defence's clip:
            :func:`~skslot.defence.clipped_norms`).

        Returns
        -------
        update : LinearHeadUpdate
            A new update of norm ``factor`` times this one's.
        """
        return replace(self, coef=factor * self.coef, intercept=factor * self.intercept)

    def rebased(self, source: GaussianMap, target: GaussianMap) -> LinearHeadUpdate:
        """The update as a head of rows mapped by ``target`` instead of ``source``.

        Every row of its client scores the same (:func:`~skslot.maps.rebased_scores`):
        the head a client trained on its rows mapped onto one reference, carried to
        another one (the screening's reference built without one client).

        Parameters
        ----------
        source, target : GaussianMap
            The client's map the head was trained after, and the one it is carried to.

        Returns
        -------
        update : LinearHeadUpdate
            A new update with the same weight.
        """
        coef, intercept = rebased_scores(self.coef, self.intercept, source, target)
        return replace(self, coef=coef, intercept=intercept)

    def scaled(self, factor: float) -> LinearHeadUpdate:
        """The update with its averaging weight ``n`` multiplied by ``factor``.

        Parameters
        ----------
        factor : float
            The multiplier of ``n``.

        Returns
        -------
        update : LinearHeadUpdate
            A new update with the same head.
        """
        counts = None if self.class_rows is None else self.class_rows * factor
        return replace(self, n=self.n * factor, class_rows=counts)

    def to_arrays(self) -> ArrayMessage:
        """The message a client sends (see :mod:`skslot.wire.arrays`).

        Returns
        -------
        arrays : dict of str to ndarray
            ``coef``, ``intercept``, ``n`` and ``n_iter``, and ``class_rows``
            when the head spans the held classes only.
        """
        arrays = {
            "coef": self.coef,
            "intercept": self.intercept,
            "n": np.asarray(self.n, dtype=np.int64),
            "n_iter": np.asarray(self.n_iter, dtype=np.int64),
        }
        if self.class_rows is not None:
            arrays["class_rows"] = np.asarray(self.class_rows, dtype=np.int64)
        return arrays

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, Any],
        *,
        classes: np.ndarray,
        n_features: int,
        n_samples: int | None = None,
    ) -> LinearHeadUpdate:
        """Decode a received local head; ``n`` must match the client's summary.

        Parameters
        ----------
        arrays : mapping of str to ndarray
            The received message (:meth:`to_arrays`).
        classes : ndarray of shape (C,)
            The global class set.
        n_features : int
            The dimension of the features.
        n_samples : int, optional
            The rows the client announced; ``n`` must equal it.

        Returns
        -------
        update : LinearHeadUpdate
            The decoded update.

        Raises
        ------
        StatisticsFormatError
            If an array is missing or malformed, ``n`` disagrees with
            ``n_samples``, or the class counts do not add up to ``n``.
        """
        n = read_sample_count(arrays, n_samples, "local head trained on")
        coef = read_array(arrays, "coef", (len(classes), n_features))
        intercept = read_array(arrays, "intercept", (len(classes),))
        counts = None
        if "class_rows" in arrays:
            counts = read_array(
                arrays, "class_rows", (len(classes),), integer=True, nonnegative=True
            )
            if counts.sum() != n:
                raise StatisticsFormatError(
                    f"local head's class counts add up to {counts.sum()}, not its {n} rows"
                )
            # the classes it holds no rows of; every class where it holds one only
            unheld = (counts == 0) | (np.count_nonzero(counts) < 2)
            if np.any(coef[unheld]) or np.any(intercept[unheld]):
                raise StatisticsFormatError(
                    "a local head spanning its held classes scores a class it holds no rows of"
                )
        return cls(np.asarray(classes), coef, intercept, n, read_count(arrays, "n_iter", 0), counts)


class OneShotFedAvgClassifier(LinearHeadMixin, OneShotHead):
    """One-shot FedAvg (O-FedAvg): average local linear heads once.

    Each client trains a multinomial logistic-regression head from a shared
    initialisation, with L-BFGS for ``max_iter`` iterations; the server
    averages the parameters once, weighted by ``n_k`` (or uniformly).

    Under label skew a client holds few classes.  By default
    (``local_classes="held"``) its head spans only the classes it holds,
    with its own class prior taken out of the intercepts (``b_c - log
    (n_kc / n_k)``), and the server averages each class's row over the
    clients that discriminate it (hold it and at least one other class),
    client ``k`` weighted by its averaging weight times its share of the
    class, ``w_k n_kc / n_k``; the federation's class prior is then added to
    the intercepts.  A class no client discriminates is never predicted.
    With ``local_classes="all"`` (the classic O-FedAvg) each client trains
    every class of the global set, its rows pushing the scores of the
    classes it lacks down, and the average embeds the
    geometric mix of the clients' priors.  Where clients hold few classes
    the classic average mixes those pushes from every client into each
    class's row.  Measured on the embedded digits at alpha 0.1
    (docs/results/label_mix.md, 5 seeds): with each client's test rows drawn
    with its own mix, the held classes score 91.5 against 84.1 after
    :class:`~skslot.SLOTTransformer` (90.9 against 91.0 on the rows as they
    are); for every class of the domain, 60.4 against 51.9 after
    ``SLOTTransformer(label_mix="federation")``.  Where nearly every client
    holds one class the classic average does better with each client's own
    mix (alpha 0.01: 96.4 against 92.9 after SLOT).

    Parameters
    ----------
    C : float, default=1.0
        Inverse L2 regularisation strength of each local head.
    max_iter : int, default=100
        Local L-BFGS iterations (the local training budget).
    tol : float, default=1e-4
        Local stopping tolerance on the gradient.
    weighting : {"samples", "uniform"}, default="samples"
        Average weighted by ``n_k / N`` or uniformly.
    init_scale : float, default=0.0
        Standard deviation of the shared random initialisation (0: zeros).
    random_state : int, RandomState or None, default=None
        Seed of the shared initialisation.
    local_classes : {"auto", "held", "all"}, default="auto"
        The classes each local head spans: those its client holds, or the
        global class set.  ``"auto"``: ``"held"``, except in a private
        release (:mod:`skslot.privacy`: which classes a client holds depends
        on its rows, so a private head spans them all; ``"held"`` is refused
        there).
    label_mix : {"client", "federation"}, default="client"
        Whose label mix ``predict`` assumes for a row of a known client
        (``client=`` routed to it): the client's own, estimated from its
        training counts, or the federation's (:mod:`skslot.label_mix`).

    Attributes
    ----------
    classes_ : ndarray of shape (C,)
    coef_ : ndarray of shape (C, m)
    intercept_ : ndarray of shape (C,)
    n_iter_ : int
        Largest number of local L-BFGS iterations over the clients.
    upload_bytes_ : ndarray of shape (n_clients,)
        Bytes of each client's statistics on the wire (``.npy`` arrays, as
        Flower counts them: :func:`~skslot.heads.message_bytes`), in client
        order; the SLOT summary is counted apart.
    n_features_in_ : int

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import OneShotFedAvgClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    >>> head = OneShotFedAvgClassifier(max_iter=500)  # converged local heads on these data
    >>> head = head.fit(data.X, data.y, client=data.client)
    >>> head.predict(data.X[:3]).shape
    (3,)

    Each client's local head released under a privacy budget, by output
    perturbation: :class:`skslot.privacy.PrivateClassifier`.
    """

    statistics_type = LinearHeadUpdate
    server_params = ("weighting",)
    _parameter_constraints: ClassVar[dict] = {
        "C": [Interval(Real, 0.0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="left")],
        "weighting": [Options(("samples", "uniform"))],
        "init_scale": [Interval(Real, 0.0, None, closed="left")],
        "random_state": ["random_state"],
        "local_classes": [Options(("auto", "held", "all"))],
        "label_mix": [Options(LABEL_MIXES)],
    }

    def __init__(
        self,
        *,
        C: float = 1.0,
        max_iter: int = 100,
        tol: float = 1e-4,
        weighting: str = "samples",
        init_scale: float = 0.0,
        random_state: int | np.random.RandomState | None = None,
        local_classes: str = "auto",
        label_mix: str = LABEL_MIX,
    ) -> None:
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.weighting = weighting
        self.init_scale = init_scale
        self.random_state = random_state
        self.local_classes = local_classes
        self.label_mix = label_mix

    def shared_initialisation(self, n_classes: int, n_features: int) -> np.ndarray:
        """The initial ``[W, b]`` every client starts from (same seed, same values).

        Parameters
        ----------
        n_classes : int
            The size of the global class set.
        n_features : int
            The dimension of the features.

        Returns
        -------
        init : ndarray of shape (n_classes, n_features + 1)
            ``init_scale`` times standard normal draws seeded by
            ``random_state`` (0 when it is ``None``; a ``RandomState``
            instance is copied, not advanced), the intercepts last.
        """
        state = 0 if self.random_state is None else self.random_state
        rng = copy.deepcopy(check_random_state(state))  # an instance's state, left unconsumed
        return self.init_scale * rng.normal(size=(n_classes, n_features + 1))

    def _client_statistics(
        self, X: np.ndarray, y: np.ndarray, classes: np.ndarray, seed: int | None
    ) -> LinearHeadUpdate:
        """The local softmax head from the shared initialisation, over the global class set
        or (``local_classes`` other than ``"all"``) over the classes the client holds, its
        own prior then taken out of the intercepts (a client of one class has nothing to
        discriminate: its head is zero)."""
        n_classes, m = classes.shape[0], X.shape[1]
        codes = np.searchsorted(classes, y)
        counts = np.bincount(codes, minlength=n_classes)
        held = self.local_classes != "all"
        spanned = np.flatnonzero(counts) if held else np.arange(n_classes)
        coef, intercept, n_iter = np.zeros((n_classes, m)), np.zeros(n_classes), 0
        if not held or spanned.shape[0] >= 2:
            Wb, n_iter = fit_softmax_regression(
                X,
                np.searchsorted(spanned, codes),
                spanned.shape[0],
                C=self.C,
                max_iter=self.max_iter,
                tol=self.tol,
                init=self.shared_initialisation(n_classes, m)[spanned],
            )
            coef[spanned] = Wb[:, :-1]
            intercept[spanned] = Wb[:, -1]
            if held:
                intercept[spanned] -= np.log(counts[spanned] / counts.sum())
        class_rows = counts if held else None
        return LinearHeadUpdate(classes, coef, intercept, X.shape[0], n_iter, class_rows)

    def _embedded_prior(self) -> np.ndarray | None:
        if getattr(self, "_held_prior", None) is not None:
            return self._held_prior
        # each local head carries its client's prior: the average carries their geometric mix,
        # known where every client's counts are (in the order its head was averaged in)
        counts = getattr(self, "client_class_counts_", {})
        if len(counts) != len(self._weights):
            return None
        return averaged_log_prior(counts, self._weights)

    def _fit_from_statistics(
        self, statistics: list, classes: np.ndarray, maps: list | None
    ) -> None:
        """The weighted average of the local heads; of local heads over their held classes,
        each class's row averaged over the clients that discriminate it.

        There client ``k`` weighs ``w_k n_kc / n_k`` in class ``c``'s row where it
        holds ``c`` and another class; the federation's prior (the same
        weights' class mix) is added to the intercepts.  A class no client
        discriminates gets the intercept :data:`UNSCORED`.
        """
        if any(not np.array_equal(update.classes, classes) for update in statistics):
            raise ValueError("client heads use a different class set than the server")
        held = [u.class_rows is not None for u in statistics]
        if any(held) and not all(held):
            raise ValueError("some client heads span the held classes only, others all classes")
        w = client_weights("weighting", self.weighting, [u.n for u in statistics])
        self._weights = w
        self.classes_ = classes
        self.n_iter_ = max(u.n_iter for u in statistics)
        self._held_prior: np.ndarray | None = None
        if not all(held):
            self.coef_ = sum(wk * u.coef for wk, u in zip(w, statistics, strict=True))
            self.intercept_ = sum(wk * u.intercept for wk, u in zip(w, statistics, strict=True))
            return
        share = np.stack([wk * u.class_rows / u.n for wk, u in zip(w, statistics, strict=True)])
        discriminates = np.array([np.count_nonzero(u.class_rows) >= 2 for u in statistics])
        weight = share * discriminates[:, None]
        total = weight.sum(axis=0)
        weight = np.divide(weight, total, out=np.zeros_like(weight), where=total > 0)
        self.coef_ = np.einsum("kc,kcm->cm", weight, np.stack([u.coef for u in statistics]))
        intercept = np.einsum("kc,kc->c", weight, np.stack([u.intercept for u in statistics]))
        mix = share.sum(axis=0) / share.sum()
        self._held_prior = np.log(np.where(mix > 0, mix, 1.0))
        # a class no client discriminates has no row to score it by: it is never predicted
        self.intercept_ = np.where(total > 0, intercept + self._held_prior, UNSCORED)
