"""Input checks shared by the estimators (no private scikit-learn API)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from difflib import get_close_matches
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.base import OneToOneFeatureMixin, TransformerMixin
from sklearn.utils import assert_all_finite, check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from ._backend import as_host_rows, empty_like_rows, is_tensor, row_index
from ._param_validation import Interval, Options

if TYPE_CHECKING:
    from ._moments import RowMagnitude


@contextlib.contextmanager
def unchanged_on_error(estimator: Any) -> Iterator[None]:
    """Run a ``fit`` whose failure leaves ``estimator`` as it was before the call.

    The estimator's attributes are restored when the block raises (a rejected
    fit neither half-replaces the fitted state nor clears it).  The copy is
    shallow: it undoes attributes set or deleted in the block, not changes made
    inside an attribute's own object.
    """
    before = dict(vars(estimator))
    try:
        yield
    except BaseException:
        vars(estimator).clear()
        vars(estimator).update(before)
        raise


ROUTING_HINT = (
    "Inside a Pipeline, cross_validate or GridSearchCV, enable metadata routing "
    "with sklearn.set_config(enable_metadata_routing=True) (or the "
    "sklearn.config_context context manager) and pass client=... to fit/predict; "
    "skslot estimators request `client` by default."
)


def _as_label(value: Any) -> int | str:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f"client labels must be integers or strings, got {value!r} "
            f"of type {type(value).__name__}"
        )
    return value


class ClientTransformerMixin(OneToOneFeatureMixin, TransformerMixin):
    """A transformer that takes ``client``: each row goes through its client's function.

    ``fit_transform`` passes ``client`` to ``fit`` and ``transform``, and the
    rows keep their floating dtype.  A subclass holds ``clients_`` (the labels ``fit`` saw) and
    ``unknown_client`` (``"fit"``, ``"error"`` or ``"identity"``), defines
    ``_client_transform(label, X)``, the function applied to the rows of
    client ``label`` (``X``: those rows, given for a client ``fit`` did not
    see, else ``None``), and says in ``_fits_unknown`` what
    ``unknown_client="fit"`` does with a new client's rows.
    """

    clients_: list
    unknown_client: str
    _fits_unknown: ClassVar[str]
    _client_transform: Callable[[Any, Any], Callable[[Any], Any]]

    def _transform_by_client(self, X: Any, client: Any) -> tuple[Any, list]:
        """Each row of ``X`` through its client's function, and the clients ``fit`` did not see.

        ``client`` may be ``None`` where ``fit`` saw a single client (a
        :class:`ValueError` with :data:`ROUTING_HINT` otherwise).  Every
        function is made before any is applied, so a new client that cannot
        be mapped raises before any work.
        """
        if client is None:
            if len(self.clients_) != 1:
                raise ValueError(
                    f"transform needs client labels: fit saw {len(self.clients_)} clients. "
                    + ROUTING_HINT
                )
            client = self.clients_[0]
        labels, codes = check_client_labels(client, X.shape[0])
        fitted = set(self.clients_)
        unknown = [label for label in labels if label not in fitted]
        if len(labels) == 1:  # every row the same client's: no row selection
            return self._client_transform(labels[0], X if unknown else None)(X), unknown
        rows = [row_index(np.flatnonzero(codes == i), X) for i in range(len(labels))]
        functions = [
            self._client_transform(label, None if label in fitted else X[r])
            for label, r in zip(labels, rows, strict=True)
        ]
        out = empty_like_rows(X, tuple(X.shape))
        for r, function in zip(rows, functions, strict=True):
            out[r] = function(X[r])
        return out, unknown

    def _fits_new_client(self, label: Any, X: Any) -> bool:
        """Whether the rows ``X`` of ``label``, a client ``fit`` did not see, are fitted
        (``unknown_client="fit"``) rather than left unchanged (``"identity"``).

        Raises
        ------
        ValueError
            With ``unknown_client="error"``, or ``"fit"`` and fewer than 2 rows.
        """
        if self.unknown_client == "error":
            raise ValueError(
                f"client {label!r} was not seen during fit{self._near_miss([label])} (fitted "
                f"clients: {self.clients_}); set unknown_client='fit' to "
                f"{self._fits_unknown}, or 'identity' to leave them unchanged"
            )
        if self.unknown_client == "fit" and X.shape[0] < 2:
            raise ValueError(
                f"{type(self).__name__}: client {label!r} was not seen during fit and has "
                f"{X.shape[0]} row in this transform; unknown_client='fit' needs at least 2 to "
                f"{self._fits_unknown} (transform a new client's rows together, or set "
                "unknown_client='identity' or 'error')"
            )
        return self.unknown_client == "fit"

    def _near_miss(self, unknown: list) -> str:
        """``" (did you mean 'a'?)"``: the fitted labels an unseen text label nearly spells."""
        fitted = [str(label) for label in self.clients_]
        meant = {
            close: label
            for label in unknown
            if isinstance(label, str)
            for close in get_close_matches(label.strip(), fitted, n=1, cutoff=0.8)
        }
        if not meant:
            return ""
        return " (" + ", ".join(f"{v!r}: did you mean {k!r}?" for k, v in meant.items()) + ")"

    def fit_transform(self, X: Any, y: Any = None, *, client: Any = None) -> Any:
        """``fit(X, y, client=client).transform(X, client=client)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows of every client.
        y : array-like of shape (n_samples,), default=None
            Passed to ``fit``.
        client : None, int, str or array-like of shape (n_samples,), default=None
            Client label of each row (``None``: one client).

        Returns
        -------
        X_new : ndarray, DataFrame or tensor of shape (n_samples, n_features)
            The transformed rows (see ``transform``).
        """
        return self.fit(X, y, client=client).transform(X, client=client)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def check_row_labels(y: Any, n_samples: int) -> np.ndarray:
    """Class labels ``y`` as a 1-D host array of one finite label per row.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        The class labels (a tensor is read into host NumPy).
    n_samples : int
        The number of rows they label.

    Returns
    -------
    y : ndarray of shape (n_samples,)
        The labels.

    Raises
    ------
    ValueError
        If ``y`` has another shape or non-finite float labels.
    """
    y = np.asarray(as_host_rows(y))
    if y.ndim != 1 or y.shape[0] != n_samples:
        raise ValueError(f"y must be 1-D with one label per row ({n_samples}), got shape {y.shape}")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite labels")
    return y


def check_client_size(n: float, client: Any) -> int:
    """``n``, a client's row count, where it can be summarised: at least 2 rows.

    Parameters
    ----------
    n : int or float
        The count (a float is a weight, as of moments scaled by a server: refused).
    client : object
        The client's label, named in the error.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If ``n < 2`` or ``n`` is not an integer.
    """
    if n < 2:
        raise ValueError(
            f"client {client!r} has {n} sample{'s' if n != 1 else ''}; at least 2 "
            "are needed to estimate a covariance"
        )
    if isinstance(n, bool) or not isinstance(n, Integral):
        raise ValueError(f"client {client!r} has a weight of {n!r} rows, not a count of rows")
    return int(n)


def check_client_labels(client: Any, n_samples: int) -> tuple[list, np.ndarray]:
    """Validate per-row client labels.

    Parameters
    ----------
    client : None, int, str or array-like of shape (n_samples,)
        ``None``: all rows belong to one client labelled ``None``; a scalar: all
        rows belong to that client; an array: the client of each row.

    Returns
    -------
    labels : list
        The distinct labels, sorted (Python ints or strs, or ``[None]``).
    codes : ndarray of shape (n_samples,)
        Index into ``labels`` of each row.
    """
    if client is None:
        return [None], np.zeros(n_samples, dtype=np.intp)
    if isinstance(client, (int, str, np.integer, np.str_)) and not isinstance(client, bool):
        return [_as_label(client)], np.zeros(n_samples, dtype=np.intp)
    arr = np.asarray(as_host_rows(client), dtype=object)  # a tensor is read into host NumPy
    if arr.ndim != 1:
        raise ValueError(f"client must be 1-D, got an array of shape {arr.shape}")
    if arr.shape[0] != n_samples:
        raise ValueError(f"client has {arr.shape[0]} labels but X has {n_samples} rows")
    values = [_as_label(v) for v in arr]
    kinds = {type(v) for v in values}
    if len(kinds) > 1:
        raise ValueError("client labels mix integers and strings; use one type for all labels")
    labels = sorted(set(values))
    index = {label: i for i, label in enumerate(labels)}
    codes = np.fromiter((index[v] for v in values), dtype=np.intp, count=n_samples)
    return labels, codes


def client_rows(client: Any, n_samples: int) -> dict[Any, np.ndarray]:
    """Each client's row indices, by label (:func:`check_client_labels`: sorted labels).

    Parameters
    ----------
    client : None, int, str or array-like of shape (n_samples,)
        The client labels, as :func:`check_client_labels` takes them.
    n_samples : int
        The number of rows.

    Returns
    -------
    dict of label to ndarray of int
        The sorted indices of each client's rows.
    """
    labels, codes = check_client_labels(client, n_samples)
    return {label: np.flatnonzero(codes == k) for k, label in enumerate(labels)}


def check_rows(
    estimator: Any,
    X: Any,
    *,
    reset: bool,
    ensure_min_samples: int = 1,
    ensure_all_finite: bool = True,
) -> Any:
    """``validate_data`` for NumPy-convertible input; the same checks on a torch tensor.

    A tensor stays a tensor on its device (float32 or float64; other numeric
    dtypes become float64), so the kernels run there.  Everything else goes
    through scikit-learn's ``validate_data`` (float64 or float32 kept).

    ``ensure_all_finite=False`` leaves out the finiteness check, a pass over
    ``X``, for a caller that reads the rows anyway: it must then call
    :func:`check_finite_rows` (the same messages) unless its own pass proved
    the rows finite.  Input that fails another check still gets the error the
    full check gives (a NaN is reported before, say, a wrong number of features).

    Parameters
    ----------
    estimator : estimator instance
        The estimator whose ``n_features_in_`` is set or checked.
    X : array-like or torch tensor of shape (n_samples, n_features)
        The rows.
    reset : bool
        Record the number of features (``fit``) rather than check it.
    ensure_min_samples : int, default=1
        The fewest rows accepted.
    ensure_all_finite : bool, default=True
        Check that the rows are finite.

    Returns
    -------
    X : ndarray or torch tensor of shape (n_samples, n_features)
        The checked rows, float32 or float64.
    """
    try:
        return _checked_rows(estimator, X, reset, ensure_min_samples, ensure_all_finite)
    except ValueError:
        if not ensure_all_finite:  # the full check, to raise the error it raises first
            _checked_rows(estimator, X, reset, ensure_min_samples, True)
        raise


def _checked_rows(estimator: Any, X: Any, reset: bool, min_samples: int, finite: bool) -> Any:
    if not is_tensor(X):
        return check_host_rows(
            estimator, X, reset=reset, ensure_min_samples=min_samples, ensure_all_finite=finite
        )
    import torch

    name = type(estimator).__name__
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D tensor, got a {X.ndim}D tensor of shape {tuple(X.shape)}")
    if X.is_complex():
        raise ValueError("Complex data not supported")
    if X.dtype not in (torch.float32, torch.float64):
        X = X.to(torch.float64)
    if X.shape[0] < min_samples:
        raise ValueError(
            f"Found array with {X.shape[0]} sample(s) (shape={tuple(X.shape)}) while a "
            f"minimum of {min_samples} is required by {name}."
        )
    if X.shape[1] < 1:
        raise ValueError(f"Found array with 0 feature(s) (shape={tuple(X.shape)})")
    if finite:
        check_finite_rows(estimator, X)
    if reset:
        estimator.n_features_in_ = int(X.shape[1])
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
    elif X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {name} is expecting "
            f"{estimator.n_features_in_} features as input."
        )
    return X


def check_finite_rows(estimator: Any, X: Any) -> None:
    """The finiteness check of :func:`check_rows`, with its messages, on checked rows.

    For rows that :func:`check_rows` returned with ``ensure_all_finite=False``:
    a tensor, or host NumPy rows (scikit-learn's message, naming ``estimator``).

    Parameters
    ----------
    estimator : estimator instance
        Named in the error message.
    X : ndarray or torch tensor of shape (n_samples, n_features)
        Rows returned by :func:`check_rows`.

    Raises
    ------
    ValueError
        If a value is NaN or infinite.
    """
    if is_tensor(X):
        import torch

        if not bool(torch.isfinite(X).all()):
            raise ValueError("Input X contains NaN or infinity.")
        return
    assert_all_finite(X, input_name="X", estimator_name=type(estimator).__name__)


def check_host_rows(estimator: Any, X: Any, *, reset: bool, **checks: Any) -> np.ndarray:
    """``validate_data`` on host NumPy rows, float64 or float32 kept.

    Any array goes in (tensors and other Array API arrays are read into host
    NumPy first, :func:`~skslot._backend.as_host_rows`).

    Parameters
    ----------
    estimator : estimator instance
        The estimator whose ``n_features_in_`` is set or checked.
    X : array-like of shape (n_samples, n_features)
        The rows.
    reset : bool
        Record the number of features (in ``fit``) rather than check it.
    **checks
        ``validate_data``'s other keyword arguments: ``ensure_min_samples``,
        ``ensure_all_finite``, ...

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The checked rows, float32 or float64.
    """
    return validate_data(
        estimator, as_host_rows(X), reset=reset, dtype=[np.float64, np.float32], **checks
    )


def check_classification_data(estimator: Any, X: Any, y: Any) -> tuple[Any, Any, np.ndarray]:
    """``validate_data`` for a classifier's ``fit``: float rows, class targets, >= 2 classes.

    Parameters
    ----------
    estimator : estimator instance
        The classifier being fitted.
    X : array-like of shape (n_samples, n_features)
        The rows.
    y : array-like of shape (n_samples,)
        The class labels.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The checked rows, float32 or float64.
    y : ndarray of shape (n_samples,)
        The checked labels.
    classes : ndarray
        The sorted class set.

    Raises
    ------
    ValueError
        If the rows or labels are invalid, or there are fewer than 2 classes.
    """
    X, y = validate_data(
        estimator, as_host_rows(X), as_host_rows(y), dtype=[np.float64, np.float32]
    )
    check_classification_targets(y)
    classes = np.unique(y)
    if classes.shape[0] < 2:
        raise ValueError(
            f"{type(estimator).__name__} needs at least 2 classes in y, "
            f"got {classes.shape[0]} class"
        )
    return X, y, classes


def _checked(name: str, value: Any, constraint: Interval | Options) -> Any:
    """``value`` where it satisfies ``constraint``, else ``"{name} must be ..."``."""
    if not constraint.is_satisfied_by(value):
        raise ValueError(f"{name} must be {constraint}, got {value!r}")
    return value


def check_in_range(name: str, value: Any, low: float, high: float | None) -> float:
    """A finite real number in ``[low, high]``.

    Parameters
    ----------
    name : str
        The value's name, for the error message.
    value : object
        The value to check.
    low : float
        The smallest value accepted.
    high : float or None
        The largest value accepted; ``None`` for no bound.

    Returns
    -------
    value : float
        ``value`` as a float.

    Raises
    ------
    ValueError
        If ``value`` is not a finite real number (a bool is none) or is out
        of range.
    """
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if value < low or (high is not None and not value <= high):  # numbers.Real: < and <= only
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {bounds}, got {value!r}")
    return float(value)


def check_open_fraction(name: str, value: Any) -> float:
    """A real number strictly between 0 and 1 (a share of rows that leaves some on each side).

    Parameters
    ----------
    name : str
        The value's name, for the error message.
    value : object
        The value to check.

    Returns
    -------
    fraction : float
        ``value`` as a float.

    Raises
    ------
    ValueError
        If ``value`` is not a real number in ``(0, 1)``.
    """
    fraction = check_in_range(name, value, 0.0, 1.0)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return fraction


def check_positive_int(name: str, value: Any) -> int:
    """An integer ``>= 1`` (a bool is none).

    Parameters
    ----------
    name : str
        The value's name, for the error message.
    value : object
        The value to check.

    Returns
    -------
    value : int
        ``value`` as an int.

    Raises
    ------
    ValueError
        If ``value`` is not a positive integer.
    """
    return int(_checked(name, value, Interval(Integral, 1, None, closed="left")))


def check_non_negative_int(name: str, value: Any) -> int:
    """An integer ``>= 0`` (a bool is none).

    Parameters
    ----------
    name : str
        The value's name, for the error message.
    value : object
        The value to check.

    Returns
    -------
    value : int
        ``value`` as an int.

    Raises
    ------
    ValueError
        If ``value`` is not a non-negative integer.
    """
    return int(_checked(name, value, Interval(Integral, 0, None, closed="left")))


def check_option(name: str, value: Any, options: tuple[str, ...]) -> str:
    """One of ``options``.

    Parameters
    ----------
    name : str
        The value's name, for the error message.
    value : object
        The value to check.
    options : tuple of str
        The values accepted.

    Returns
    -------
    value : str
        ``value`` itself.

    Raises
    ------
    ValueError
        If ``value`` is not one of ``options``.
    """
    return _checked(name, value, Options(options))


def client_weights(name: str, weights: Any, counts: Sequence[int]) -> np.ndarray:
    """Per-client weights summing to one.

    ``weights`` is ``"samples"`` (``n_k / N``), ``"uniform"`` (``1 / K``) or an
    array of one non-negative weight per client, normalised.

    Parameters
    ----------
    name : str
        The parameter's name, for error messages.
    weights : {"samples", "uniform"} or array-like of shape (K,)
        The weights, or how to derive them from the counts.
    counts : sequence of int
        Each client's number of rows.

    Returns
    -------
    weights : ndarray of shape (K,)
        Non-negative weights summing to one.

    Raises
    ------
    ValueError
        If ``weights`` is another string, has another shape, or is not
        finite, non-negative and not all zero.
    """
    K = len(counts)
    if isinstance(weights, str):
        check_option(name, weights, ("samples", "uniform"))
        w = np.asarray(counts, dtype=np.float64) if weights == "samples" else np.ones(K)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (K,):
            raise ValueError(f"{name} has shape {w.shape}, expected ({K},) (one weight per client)")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"{name} must be finite, non-negative, not all zero")
    return w / w.sum()


def spawn_seeds(random_state: Any, n: int) -> list[int]:
    """``n`` integer seeds drawn from ``random_state``: one per client, by position.

    A party that knows its position ``k`` among the clients and the shared
    ``random_state`` derives the same seed as an in-process ``fit``.

    Parameters
    ----------
    random_state : int, RandomState instance or None
        The shared seed.
    n : int
        The number of seeds.

    Returns
    -------
    seeds : list of int
        One seed in ``[0, 2**31 - 1)`` per position.
    """
    rng = check_random_state(random_state)
    return [int(seed) for seed in rng.randint(np.iinfo(np.int32).max, size=n)]


#: Largest feature magnitude accepted: squares summed over rows stay finite
#: and covariances stay in :data:`skslot.gaussian.VARIANCE_RANGE`.
FEATURE_RANGE = (1e-50, 1e50)


def check_feature_scale(X: Any, magnitude: RowMagnitude | None = None) -> None:
    """Reject features whose squares or products would leave float64's range.

    The moments are sums of squares, so features above ``1e50`` overflow and
    non-zero features below ``1e-50`` underflow to a zero covariance.  Both
    raise a :class:`ValueError` that says so, instead of silently producing
    infinities or a wrong "all rows identical" floor.

    ``magnitude``: bounds on ``max |X|`` from a pass that read the rows anyway
    (:meth:`~skslot._moments.ShiftedMoments.with_magnitude`); when
    they put it inside the range for certain, ``X`` is not read again.
    Otherwise the largest magnitude is computed exactly, as without them.

    Parameters
    ----------
    X : ndarray or torch tensor of shape (n_samples, n_features)
        The rows, already checked finite.
    magnitude : RowMagnitude, optional
        Bounds on ``max |X|`` from a pass over the rows.

    Raises
    ------
    ValueError
        If the largest magnitude is above ``1e50``, or positive and below ``1e-50``.
    """
    low, high = FEATURE_RANGE
    if X.shape[0] == 0 or (magnitude is not None and magnitude.within(low, high)):
        return
    largest = max(float(X.max()), -float(X.min()))  # no temporary of X's size
    if largest > high or 0.0 < largest < low:
        raise ValueError(
            f"features reach {largest:.3g} in magnitude, outside [{low:g}, {high:g}]: "
            "their second moments cannot be represented in float64; rescale the features"
        )
