"""An alignment and a head in one pipeline, both in the case the user names.

Whose label mix a prediction assumes (:mod:`skslot.label_mix`) is a choice of
the alignment and of the head together: with each client's own mix, a head
must add the client's prior to its scores, or it loses what the client's rows
told it (on aligned rows the domain, which carried the client's mix, no longer
does).  skslot's heads have a ``label_mix`` parameter; a scikit-learn
classifier does not, and :func:`make_slot_pipeline` wraps it in
:class:`~skslot.label_mix.ClientPriorClassifier` where the case needs it.
"""

from __future__ import annotations

from typing import Any

from sklearn.base import clone
from sklearn.pipeline import Pipeline

from ._validation import check_option
from .defaults import LABEL_MIX
from .label_mix import LABEL_MIXES, ClientPriorClassifier
from .transformer import SLOTTransformer

__all__ = ["make_slot_pipeline"]


def _in_case(step: Any, label_mix: str) -> tuple[Any, bool]:
    """A clone of ``step`` with every ``label_mix`` in it set (nested steps' too), and
    whether it had one; ``step`` itself where it has none."""
    if isinstance(step, str):
        return step, False
    keys = [k for k in step.get_params(deep=True) if k.split("__")[-1] == "label_mix"]
    if not keys:
        return step, False
    return clone(step).set_params(**dict.fromkeys(keys, label_mix)), True


def make_slot_pipeline(
    head: Any, *, slot: Any = None, label_mix: str = LABEL_MIX, memory: Any = None
) -> Pipeline:
    """A pipeline of an alignment and a head, each in the case ``label_mix`` names.

    ``label_mix`` is the one place to say the case: it is set on (clones of)
    the steps that have a ``label_mix`` parameter, nested ones included
    (:class:`SLOTTransformer`, skslot's heads,
    :class:`~skslot.label_mix.ClientPriorClassifier`; a value set on a step
    beforehand gives way to it), and a head without one
    (``LogisticRegression``, ``LinearDiscriminantAnalysis``, ...) is wrapped
    in :class:`~skslot.label_mix.ClientPriorClassifier` with each client's
    own mix, so that it predicts each client's rows with its own class
    proportions.  Fit and predict it with ``client=`` under
    ``sklearn.config_context(enable_metadata_routing=True)``.

    Parameters
    ----------
    head : classifier
        The head. With ``label_mix="client"`` a head without a ``label_mix``
        parameter needs ``predict_proba``.
    slot : transformer, "passthrough" or None, default=None
        The alignment: ``None`` for ``SLOTTransformer()``, a transformer
        (:class:`ClientStandardScaler`, a configured :class:`SLOTTransformer`)
        or ``"passthrough"`` for none.
    label_mix : {"client", "federation"}, default="client"
        Whose label mix each client's future rows follow
        (:data:`~skslot.label_mix.LABEL_MIXES`).
    memory : str or object with the joblib.Memory interface, default=None
        Passed to :class:`~sklearn.pipeline.Pipeline`.

    Returns
    -------
    Pipeline
        Steps ``"align"`` and ``"head"`` (a grid over the alignment's
        ``tau`` is ``{"align__tau": [...]}``).

    Raises
    ------
    ValueError
        If ``label_mix`` is not a case.
    TypeError
        If the own mix needs a prior the head cannot take (no
        ``predict_proba``).

    See Also
    --------
    skslot.label_mix.ClientPriorClassifier : a classifier predicting with each client's mix.

    Examples
    --------
    >>> import numpy as np, sklearn
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skslot import make_slot_pipeline
    >>> model = make_slot_pipeline(LogisticRegression())
    >>> [type(step).__name__ for _, step in model.steps]
    ['SLOTTransformer', 'ClientPriorClassifier']
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(40, 2)); y = np.repeat([0, 1], 20); client = np.tile([0, 1], 20)
    >>> with sklearn.config_context(enable_metadata_routing=True):
    ...     model.fit(X, y, client=client).predict(X[:3], client=client[:3]).shape
    (3,)
    """
    check_option("label_mix", label_mix, LABEL_MIXES)
    if slot is None:
        slot = SLOTTransformer()
    fitted_head, has_case = _in_case(head, label_mix)
    if not has_case and label_mix == "client":
        if not hasattr(head, "predict_proba"):
            raise TypeError(
                f"{type(head).__name__} has no predict_proba: with each client's own label mix "
                "the head adds the client's prior to its class probabilities; wrap it in "
                "sklearn.calibration.CalibratedClassifierCV, or pass label_mix='federation'"
            )
        fitted_head = ClientPriorClassifier(head, label_mix=label_mix)
    return Pipeline([("align", _in_case(slot, label_mix)[0]), ("head", fitted_head)], memory=memory)
