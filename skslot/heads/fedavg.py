"""One-shot FedAvg: local multinomial linear heads averaged once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

from .._param_validation import Interval, Options
from .._validation import client_weights
from ..accounting import PrivacyBudget, PrivacyLedger
from ..defaults import LABEL_MIX
from ..label_mix import LABEL_MIXES, averaged_log_prior
from ..wire.arrays import ArrayMessage, read_array, read_count, read_sample_count
from ._base import LinearHeadMixin, OneShotHead
from ._private import LOCAL_HEAD_SENSITIVITY, private_local_head
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
    n : int
        Rows the head was trained on: its weight in the server's average.
    n_iter : int, default=0
        Iterations of the client's solver.
    """

    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    n: int
    n_iter: int = 0

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
        return LinearHeadUpdate(
            self.classes, self.coef, self.intercept, self.n * factor, self.n_iter
        )

    def to_arrays(self) -> ArrayMessage:
        """The message a client sends (see :mod:`skslot.wire.arrays`).

        Returns
        -------
        arrays : dict of str to ndarray
            ``coef``, ``intercept``, ``n`` and ``n_iter``.
        """
        return {
            "coef": self.coef,
            "intercept": self.intercept,
            "n": np.asarray(self.n, dtype=np.int64),
            "n_iter": np.asarray(self.n_iter, dtype=np.int64),
        }

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
            If an array is missing or malformed, or ``n`` disagrees with ``n_samples``.
        """
        n = read_sample_count(arrays, n_samples, "local head trained on")
        return cls(
            np.asarray(classes),
            read_array(arrays, "coef", (len(classes), n_features)),
            read_array(arrays, "intercept", (len(classes),)),
            n,
            read_count(arrays, "n_iter", 0),
        )


class OneShotFedAvgClassifier(LinearHeadMixin, OneShotHead):
    """One-shot FedAvg (O-FedAvg): average local linear heads once.

    Each client trains a multinomial logistic-regression head over the *global*
    class set, from a shared initialisation, with L-BFGS for ``max_iter``
    iterations; the server averages the parameters once, weighted by ``n_k``
    (or uniformly).  A client missing some classes still trains all class
    rows (its data pushes their scores down), so its update averages correctly.

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
    label_mix : {"client", "federation"}, default="client"
        Whose label mix ``predict`` assumes for a row of a known client
        (``client=`` routed to it): the client's own, estimated from its
        training counts, or the federation's (:mod:`skslot.label_mix`).
    privacy : PrivacyBudget, default=None
        Each client releases its local head differentially privately under
        this budget (:class:`~skslot.accounting.PrivacyBudget`), by output
        perturbation (:func:`~skslot.heads.private_local_head`): rows clipped
        to the budget's ``clip_norm``, the intercept penalised as the weights
        (so the objective is strongly convex and its minimiser unique: the
        initialisation plays no part), solved to the gradient tolerance the
        release's sensitivity assumes within ``max_iter`` iterations, then
        noised.  The noise on each parameter grows with
        ``C * clip_norm**2`` (the regularisation in units of the clip norm):
        under privacy keep it near ``0.1`` (``C = 0.1`` on rows of norm at
        most 1, ``C = 0.1 / clip_norm**2`` in general;
        docs/results/private_federation.md), which keeps the head's scores
        above the noise.  In a federation the budget is the client's
        (:class:`~skslot.protocol.ClientParty`'s ``privacy``), which covers
        its summary and counts too.

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
    privacy_spent_ : dict
        With ``privacy``: the epsilon each client spent (the accountant's, at
        the budget's delta), by client label.

    Examples
    --------
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import OneShotFedAvgClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.3, random_state=0)
    >>> head = OneShotFedAvgClassifier(max_iter=500)  # converged local heads on these data
    >>> head = head.fit(data.X, data.y, client=data.client)
    >>> head.predict(data.X[:3]).shape
    (3,)

    Each client's local head released under a privacy budget:

    >>> from skslot.accounting import PrivacyBudget
    >>> budget = PrivacyBudget(epsilon=8.0, clip_norm=10.0)
    >>> private = OneShotFedAvgClassifier(C=0.1 / 10.0**2, privacy=budget)
    >>> private = private.fit(data.X, data.y, client=data.client)
    >>> max(private.privacy_spent_.values()) <= 8.0
    True
    """

    statistics_type = LinearHeadUpdate
    private_release = "local_head"
    server_params = ("weighting",)
    _parameter_constraints: ClassVar[dict] = {
        "C": [Interval(Real, 0.0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="left")],
        "weighting": [Options(("samples", "uniform"))],
        "init_scale": [Interval(Real, 0.0, None, closed="left")],
        "random_state": ["random_state"],
        "label_mix": [Options(LABEL_MIXES)],
        "privacy": [PrivacyBudget, None],
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
        label_mix: str = LABEL_MIX,
        privacy: PrivacyBudget | None = None,
    ) -> None:
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.weighting = weighting
        self.init_scale = init_scale
        self.random_state = random_state
        self.label_mix = label_mix
        self.privacy = privacy

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
            ``random_state`` (0 when it is ``None``), the intercepts last.
        """
        rng = np.random.RandomState(self.random_state if self.random_state is not None else 0)
        return self.init_scale * rng.normal(size=(n_classes, n_features + 1))

    def _client_statistics(
        self,
        X: np.ndarray,
        y: np.ndarray,
        classes: np.ndarray,
        seed: int | None,
        ledger: PrivacyLedger | None = None,
    ) -> LinearHeadUpdate:
        codes = np.searchsorted(classes, y)
        if ledger is not None:
            clip_norm = ledger.budget.clip_norm

            def release(sigma: float, rng: np.random.Generator) -> LinearHeadUpdate:
                coef, intercept = private_local_head(
                    X,
                    codes,
                    classes.shape[0],
                    C=self.C,
                    clip_norm=clip_norm,
                    sigma=sigma,
                    rng=rng,
                    max_iter=self.max_iter,
                )
                # no iteration count: how long the solver took depends on the rows
                return LinearHeadUpdate(classes, coef, intercept, X.shape[0], 0)

            return ledger.release(
                self.private_release,
                release,
                n=X.shape[0],
                sensitivity=LOCAL_HEAD_SENSITIVITY * self.C * clip_norm * clip_norm,
            )
        init = self.shared_initialisation(classes.shape[0], X.shape[1])
        Wb, n_iter = fit_softmax_regression(
            X,
            codes,
            classes.shape[0],
            C=self.C,
            max_iter=self.max_iter,
            tol=self.tol,
            init=init,
        )
        return LinearHeadUpdate(classes, Wb[:, :-1], Wb[:, -1], X.shape[0], n_iter)

    def _embedded_prior(self) -> np.ndarray | None:
        # each local head carries its client's prior: the average carries their geometric mix,
        # known where every client's counts are (in the order its head was averaged in)
        counts = getattr(self, "client_class_counts_", {})
        if len(counts) != len(self._weights):
            return None
        return averaged_log_prior(counts, self._weights)

    def _fit_from_statistics(
        self, statistics: list, classes: np.ndarray, maps: list | None
    ) -> None:
        for update in statistics:
            if not np.array_equal(update.classes, classes):
                raise ValueError("client heads use a different class set than the server")
        w = client_weights("weighting", self.weighting, [u.n for u in statistics])
        self._weights = w
        self.classes_ = classes
        self.coef_ = sum(wk * u.coef for wk, u in zip(w, statistics, strict=True))
        self.intercept_ = sum(wk * u.intercept for wk, u in zip(w, statistics, strict=True))
        self.n_iter_ = max(u.n_iter for u in statistics)
