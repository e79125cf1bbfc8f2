"""``FederatedTauSearch``: SLOT-Align with ``tau`` chosen by the federation itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin
from sklearn.utils.validation import check_is_fitted

from ._doc_link import DocLinkMixin
from ._param_validation import HasMethods, Options, ParameterValidationMixin
from ._validation import (
    ROUTING_HINT,
    check_classification_data,
    check_client_labels,
    check_host_rows,
)
from .defaults import VALIDATION_FRACTION
from .heads._base import OneShotHead
from .protocol import (
    ClientParty,
    ClientState,
    FixedReference,
    InProcessTransport,
    OneShotProtocol,
    ProtocolRunError,
    ReferenceStep,
)
from .selection import DEFAULT_TAUS
from .transformer import UNKNOWN_CLIENT, SLOTTransformer

__all__ = ["FederatedTauSearch"]


class FederatedTauSearch(
    DocLinkMixin, ParameterValidationMixin, MetaEstimatorMixin, ClassifierMixin, BaseEstimator
):
    """SLOT-Align in front of a one-shot head, with ``tau`` chosen by federated validation.

    ``fit(X, y, client=...)`` runs, in process, the one driver
    (:class:`~skslot.protocol.OneShotProtocol`, docs/architecture.md) that
    the Flower apps run between real parties: no step uses rows of more
    than one client.  Each client holds out a
    stratified ``validation_fraction`` of its rows; the server fits one head
    per candidate ``(tau, head parameters)`` (for FedCGS and FedPFT from the
    clients' statistics, which it aligns itself; for O-FedAvg from one local
    head per ``tau`` that each client trains on its aligned fitting rows);
    each client counts the correct predictions of every candidate on its own
    validation rows, aligned with its own map; the server scores each
    candidate by the mean over clients of the balanced validation accuracy,
    chooses the least-transport candidate within one standard error of the
    best, and refits it on all rows.  ``tau = 0`` (no alignment) is in the default grid,
    so SLOT is only used where the federation's own data says it helps.

    Each client's summary, and so its map, is estimated from its fitting
    rows alone, so the validation scores rows that are new to the map it
    validates, as a test row is: a map estimated from the held-out rows too
    fits them better than new ones, most of all a within-class map
    (``slot=SLOTTransformer(covariance="within")``), and would bias the
    choice towards strong transport (measured in docs/results/out_of_sample_selection.md).  The
    deployed maps are those same maps; the final head is refitted on all
    rows.

    Parameters
    ----------
    head : OneShotHead
        The one-shot head (:class:`~skslot.heads.FedCGSClassifier`,
        :class:`~skslot.heads.FedPFTClassifier` or
        :class:`~skslot.heads.OneShotFedAvgClassifier`); cloned, never modified.
    taus : sequence of float, default=(0, 0.2, 0.4, 0.6, 0.8, 1)
        Candidate ``tau`` values, distinct, in ``[0, 1]``.
    head_grid : dict of str to list, default=None
        Server-side head parameters to search along with ``tau`` at no cost to
        the clients (``head.server_params``: FedCGS's ``shrinkage``,
        ``covariance`` and ``priors``; FedPFT's ``estimator``; O-FedAvg's
        ``weighting``).
    validation_fraction : float, default=0.2
        Share of each class of each client held out for validation, in
        ``(0, 1)``.  A client too small to hold out a row is left out of the
        choice (listed in ``left_out_``) but still trains.
    selection_rule : {"one-standard-error", "best"}, default="one-standard-error"
        How the server chooses from the candidates' mean balanced validation
        accuracy over clients: the least-transport candidate within one
        standard error of the best (robust to the few validation rows per
        class a client holds), or the best (see
        :func:`~skslot.selection.select_candidate`).
    refit : bool, default=True
        Refit the chosen candidate on the fitting and validation rows together
        (for FedCGS and FedPFT from statistics the clients already sent; for
        O-FedAvg one more local training round).  With ``False`` the chosen
        candidate, trained on the fitting rows only, is the final head.
    slot : SLOTTransformer, default=None
        Settings of the summaries, reference and maps (its ``tau`` is
        ignored); each client's summary is of its fitting rows.  A
        :class:`sklearn.frozen.FrozenEstimator` of a fitted transformer
        reuses its reference and maps, on the server and the clients alike:
        fitted on all rows, its maps contain the held-out rows, and the
        validation is then in sample for them.
    unknown_client : {"fit", "error", "identity"}, default="fit"
        What ``predict`` does with a client not seen in ``fit`` (see
        :class:`~skslot.SLOTTransformer`); ``"fit"``, the default, is what a
        client joining the federation later does: summarise its own rows and
        map them onto the reference.
    random_state : int, RandomState or None, default=None
        Seeds the clients' validation splits (one seed per client, by its
        position in sorted label order).

    Attributes
    ----------
    best_tau_ : float
    best_params_ : dict
        ``{"tau": ..., **head parameters}`` of the chosen candidate.
    best_index_ : int
    best_score_ : float
        Mean over clients of the chosen candidate's balanced validation accuracy
        (with the one-standard-error rule, not necessarily the highest).
    best_estimator_ : OneShotHead
        The final head, trained on aligned features.
    candidate_heads_ : list of OneShotHead
        The head of each candidate, trained on the fitting rows only (the
        ones the clients validated).
    slot_ : SLOTTransformer
        Each client's map at ``best_tau_`` (from the reference and its own
        summary, as a deployed client computes it).
    cv_results_ : dict of ndarray
        One entry per candidate: its parameters, each client's balanced
        validation accuracy (``client<i>_validation_score``, ``i`` indexing
        ``selection_clients_``), their mean, standard deviation and rank.
        ``pandas.DataFrame(cv_results_)`` shows it as a table.
    selection_clients_ : list
        Clients whose validation counts were used.
    left_out_ : dict
        Clients left out of the choice, with the reason.
    stages_ : list of str
        The protocol's stages in the order they ran (:class:`~skslot.protocol.OneShotProtocol`).
    clients_ : list
    classes_ : ndarray
    n_features_in_ : int

    See Also
    --------
    skslot.protocol.OneShotProtocol : the protocol's driver, which ``fit`` runs in process.

    Examples
    --------
    >>> from skslot import FederatedTauSearch
    >>> from skslot.datasets import make_federated_classification
    >>> from skslot.heads import FedCGSClassifier
    >>> data = make_federated_classification(n_clients=3, alpha=0.5, random_state=0)
    >>> search = FederatedTauSearch(FedCGSClassifier(), random_state=0)
    >>> search = search.fit(data.X, data.y, client=data.client)
    >>> search.best_tau_ in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    True
    >>> search.predict(data.X[:4], client=data.client[:4]).shape
    (4,)
    """

    __metadata_request__fit = {"client": True}
    __metadata_request__predict = {"client": True}
    __metadata_request__predict_proba = {"client": True}
    __metadata_request__decision_function = {"client": True}
    __metadata_request__score = {"client": True}

    #: The search's own parameters; the others (``head``, ``taus``, ``head_grid``,
    #: ``validation_fraction``, ``selection_rule``, ``refit``, ``random_state``) are those of
    #: the :class:`~skslot.protocol.OneShotProtocol` it runs, passed on by name and checked
    #: once when ``fit`` builds it.
    _parameter_constraints: ClassVar[dict] = {
        "slot": [HasMethods(["fit", "transform"]), None],  # a (frozen) SLOTTransformer
        "unknown_client": [Options(UNKNOWN_CLIENT)],
    }

    def __init__(
        self,
        head: OneShotHead,
        *,
        taus: Sequence[float] = DEFAULT_TAUS,
        head_grid: Mapping[str, Sequence] | None = None,
        validation_fraction: float = VALIDATION_FRACTION,
        selection_rule: str = "one-standard-error",
        refit: bool = True,
        slot: Any = None,
        unknown_client: str = "fit",
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.head = head
        self.taus = taus
        self.head_grid = head_grid
        self.validation_fraction = validation_fraction
        self.selection_rule = selection_rule
        self.refit = refit
        self.slot = slot
        self.unknown_client = unknown_client
        self.random_state = random_state

    def fit(self, X: Any, y: Any, *, client: Any = None) -> FederatedTauSearch:
        """Run the federated search over the clients in ``client``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (``None``: one client).

        Returns
        -------
        self : object
        """
        self._validate_params()
        # the transformer whose settings make the summaries and the reference
        slot = self.slot if self.slot is not None else SLOTTransformer()
        slot = getattr(slot, "estimator", slot)  # a FrozenEstimator's fitted transformer
        if not isinstance(slot, SLOTTransformer):
            raise TypeError(f"slot must be a SLOTTransformer, got {type(slot).__name__}")
        frozen = hasattr(self.slot, "estimator")  # a FrozenEstimator: its reference and maps
        if frozen:
            check_is_fitted(slot, "maps_")
            fixed_maps = {  # the server's at tau = 1, anchored, on both sides
                label: slot._anchored(full, slot.summaries_[label], label)
                for label, full in slot.maps_.items()
            }
            reference: ReferenceStep = FixedReference(slot.reference_, fixed_maps, slot.n_iter_)
        else:
            reference = ReferenceStep(slot.barycenter_estimator())
        params = self.get_params(deep=False)
        protocol = OneShotProtocol(
            **{k: v for k, v in params.items() if k not in self._parameter_constraints},
            tau="auto",
            reference=reference,
            evaluate=False,
            client_tau=slot.client_tau,
            summary_covariance=slot.covariance,
            covariance_floor=slot.barycenter_estimator().covariance_floor,
            mean_tau=slot.mean_tau,
        )
        X, y, classes = check_classification_data(self, X, y)
        labels, codes = check_client_labels(client, X.shape[0])
        reference.check_clients(labels)
        if slot.label_mix != protocol.label_mix:
            raise ValueError(
                f"the head serves label_mix={protocol.label_mix!r} but slot has "
                f"label_mix={slot.label_mix!r}: set the same label_mix on both"
            )
        parties = {
            label: ClientParty(
                X[codes == k],
                y[codes == k],
                head=self.head,
                classes=classes,
                label=label,
                summary_estimator=slot._summary_estimator(),
                validation_fraction=self.validation_fraction,
                state=ClientState(fixed_map=fixed_maps[label]) if frozen else None,
            )
            for k, label in enumerate(labels)
        }
        try:
            result = protocol.run(InProcessTransport(parties), classes)
        except ProtocolRunError as exc:  # in process, the server step's own error
            raise exc.__cause__ or exc from None
        rejected = result.report.rejected.get("upload", {})
        if rejected:  # in process, the clients' own uploads: a bug, never expected
            raise RuntimeError(f"the protocol rejected clients' uploads: {rejected}")
        selection = result.selection
        if selection is None:  # tau="auto": the federation chose
            raise RuntimeError("the federated search returned no choice")
        # each client's map, as a deployed client computes it from the reference it received
        summaries = {
            label: slot.summaries_[label] if frozen else parties[label].state.summary
            for label in labels
        }
        # with each client's own mix, the reference a client received is about its own
        # destination: its domain offset is its mean less that destination
        offsets = None
        if protocol.label_mix == "client" and not frozen:
            states = {label: parties[label].state for label in labels}
            offsets = {  # of the clients not left out before they received the reference
                label: state.summary.mean - state.reference.mean
                for label, state in states.items()
                if state.reference is not None and state.summary is not None
            }
        self.slot_ = SLOTTransformer.from_reference(
            result.reference,
            summaries,
            tau_scales=result.tau_scales,
            domain_offsets=offsets,
            label_mix=protocol.label_mix,
            client_tau=slot.client_tau,
            mean_tau=slot.mean_tau,
            unknown_client=self.unknown_client,
        ).set_params(tau=selection.candidate.tau)
        self.best_index_ = selection.index
        self.best_tau_ = selection.candidate.tau
        self.best_params_ = selection.candidate.describe()
        self.best_score_ = float(selection.mean_scores[selection.index])
        self.cv_results_ = selection.table()
        self.selection_clients_ = selection.clients
        self.left_out_ = dict((result.report.selection or {}).get("left_out", {}))
        self.candidate_heads_ = result.candidate_heads
        self.stages_ = list(result.stages)
        self.best_estimator_ = result.head
        self.clients_ = labels
        self.classes_ = classes
        return self

    def _predicted(self, method: str, X: Any, client: Any) -> np.ndarray:
        """``best_estimator_``'s ``method`` on the rows aligned by their clients' maps."""
        check_is_fitted(self, "best_estimator_")
        X = check_host_rows(self, X, reset=False)
        if client is None and len(self.clients_) > 1:
            raise ValueError(
                f"{type(self).__name__} needs client labels to align rows: fit saw "
                f"{len(self.clients_)} clients. {ROUTING_HINT}"
            )
        Z = self.slot_.transform(X, client=client)
        return getattr(self.best_estimator_, method)(Z, client=client)

    def predict(self, X: Any, *, client: Any = None) -> np.ndarray:
        """Align each row with its client's map at ``best_tau_``, then predict.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to classify.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (a client not seen in ``fit`` is handled as
            ``unknown_client`` says).  ``None`` is allowed when ``fit`` saw a
            single client.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            ``best_estimator_``'s prediction for each aligned row (under its
            client's own label mix with the head's ``label_mix="client"``).
        """
        return self._predicted("predict", X, client)

    def predict_proba(self, X: Any, *, client: Any = None) -> np.ndarray:
        """Class probabilities of the aligned rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to classify.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (a client not seen in ``fit`` is handled as
            ``unknown_client`` says).  ``None`` is allowed when ``fit`` saw a
            single client.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            ``best_estimator_``'s class probabilities, columns in the order of
            ``classes_``.
        """
        return self._predicted("predict_proba", X, client)

    def decision_function(self, X: Any, *, client: Any = None) -> np.ndarray:
        """Class scores of the aligned rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to score.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (a client not seen in ``fit`` is handled as
            ``unknown_client`` says).  ``None`` is allowed when ``fit`` saw a
            single client.

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            ``best_estimator_``'s class scores; of shape (n_samples,) for two
            classes.
        """
        return self._predicted("decision_function", X, client)

    def score(self, X: Any, y: Any, sample_weight: Any = None, *, client: Any = None) -> float:
        """Accuracy of ``predict(X, client=client)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to classify.
        y : array-like of shape (n_samples,)
            The true labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each row (``None``: equal weights).
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client of each row (a client not seen in ``fit`` is handled as
            ``unknown_client`` says).  ``None`` is allowed when ``fit`` saw a
            single client.

        Returns
        -------
        score : float
            The (weighted) share of rows whose prediction is ``y``.
        """
        from sklearn.metrics import accuracy_score  # on use: importing it costs every process

        return float(accuracy_score(y, self.predict(X, client=client), sample_weight=sample_weight))
