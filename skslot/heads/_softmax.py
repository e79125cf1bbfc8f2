"""Multinomial logistic regression over a fixed class set: the objective and its solver.

The local training of O-FedAvg (:class:`~skslot.heads.OneShotFedAvgClassifier`)
and of its private release (:func:`~skslot.heads.private_local_head`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import scipy.optimize
from scipy.special import log_softmax
from sklearn.exceptions import ConvergenceWarning

#: Features whose root-mean-square entry exceeds this are solved in rescaled coordinates.
RESCALE_ABOVE = 1e3


def softmax_objective(
    X: np.ndarray, codes: np.ndarray, n_classes: int, *, C: float, penalise_intercept: bool = False
) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """The multinomial logistic loss over a fixed class set, with its gradient.

    ``F(W, b) = sum_i -log softmax(W x_i + b)_{y_i} + (||W||^2 + t ||b||^2) / (2 C)``
    with ``t = 1`` when ``penalise_intercept`` (the intercept is then the
    weight of a constant feature of value one, as a private release needs:
    the objective is ``1 / C`` strongly convex in every parameter) and
    ``t = 0`` otherwise (scikit-learn's objective).

    Parameters
    ----------
    X : ndarray of shape (n, m)
        The rows, float64.
    codes : ndarray of shape (n,)
        Each row's class, as an index into the class set.
    n_classes : int
        The size of the class set.
    C : float
        Inverse L2 regularisation strength, ``> 0``.
    penalise_intercept : bool, default=False
        Whether the intercept is penalised as the weights are.

    Returns
    -------
    objective : callable
        ``objective(theta) -> (F, grad)`` for the packed ``theta = [W, b]``
        (shape ``(n_classes, m + 1)``, raveled).
    """
    n, m = X.shape
    rows = np.arange(n)
    intercept_penalty = 1.0 if penalise_intercept else 0.0

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        Wb = theta.reshape(n_classes, m + 1)
        W, b = Wb[:, :m], Wb[:, m]
        log_p = log_softmax(X @ W.T + b, axis=1)
        penalty = np.sum(W * W) + intercept_penalty * np.sum(b * b)
        loss = -log_p[rows, codes].sum() + 0.5 * penalty / C
        residual = np.exp(log_p)
        residual[rows, codes] -= 1.0
        grad = np.empty_like(Wb)
        grad[:, :m] = residual.T @ X + W / C
        grad[:, m] = residual.sum(axis=0) + intercept_penalty * b / C
        return loss, grad.ravel()

    return objective


def fit_softmax_regression(
    X: np.ndarray,
    codes: np.ndarray,
    n_classes: int,
    *,
    C: float,
    max_iter: int,
    tol: float = 1e-4,
    init: np.ndarray,
    penalise_intercept: bool = False,
) -> tuple[np.ndarray, int]:
    """Multinomial logistic regression over a fixed class set, by L-BFGS.

    Minimises :func:`softmax_objective` (by default the objective of
    :class:`sklearn.linear_model.LogisticRegression`,
    ``sum_i -log softmax(W x_i + b)_{y_i} + ||W||^2 / (2 C)``) over all
    ``n_classes`` classes, including those absent from ``codes``, starting from
    ``init`` (packed ``[W, b]`` of shape ``(n_classes, m + 1)``).  Stops when
    the largest gradient entry is below ``tol`` (as scikit-learn's ``lbfgs``
    solver) or after ``max_iter`` iterations.  Returns the packed solution and
    the number of iterations run, and warns (``ConvergenceWarning``) when it
    stopped at ``max_iter`` or could not take a single step.

    Features of a very large scale (root-mean-square entry above
    :data:`RESCALE_ABOVE`) are solved in rescaled coordinates ``x / s``,
    ``W s``, with ``C s^2``: the same objective and optimum, but a first
    step L-BFGS can take (at ``1e20`` it would otherwise stop at once).  Not
    with ``penalise_intercept``, whose penalty the rescaling would change
    (the private release solves rows in the unit ball).

    Parameters
    ----------
    X : ndarray of shape (n, m)
        The rows.
    codes : ndarray of shape (n,)
        Each row's class, as an index into the class set.
    n_classes : int
        The size of the class set.
    C : float
        Inverse L2 regularisation strength, ``> 0``.
    max_iter : int
        Most L-BFGS iterations.
    tol : float, default=1e-4
        Tolerance on the largest gradient entry.
    init : ndarray of shape (n_classes, m + 1)
        The packed starting point ``[W, b]``.
    penalise_intercept : bool, default=False
        Penalise the intercept as the weights (:func:`softmax_objective`).

    Returns
    -------
    solution : ndarray of shape (n_classes, m + 1)
        The packed ``[W, b]``.
    n_iter : int
        The L-BFGS iterations run.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    m = X.shape[1]
    scale = float(np.sqrt(np.mean(X * X))) if X.size else 1.0
    if scale > RESCALE_ABOVE and not penalise_intercept:
        X = X / scale
        init = init.copy()
        init[:, :m] *= scale
        C = C * scale**2
    else:
        scale = 1.0
    objective = softmax_objective(X, codes, n_classes, C=C, penalise_intercept=penalise_intercept)
    result = scipy.optimize.minimize(
        objective,
        init.ravel(),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "gtol": tol, "ftol": 64 * np.finfo(float).eps},
    )
    n_iter = int(result.nit)
    if n_iter >= max_iter:
        warnings.warn(
            f"local training reached max_iter={max_iter} before its gradient tolerance "
            f"tol={tol:g}; increase max_iter for a converged local head",
            ConvergenceWarning,
            stacklevel=3,
        )
    elif n_iter == 0 and np.max(np.abs(objective(result.x)[1])) > tol:
        warnings.warn(
            f"local training took no step ({result.message}): the local head is its "
            "initialisation; check the features' scale and the data",
            ConvergenceWarning,
            stacklevel=3,
        )
    Wb = result.x.reshape(n_classes, m + 1)
    Wb[:, :m] /= scale
    return Wb, n_iter
