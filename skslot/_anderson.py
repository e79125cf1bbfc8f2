"""Anderson acceleration of a fixed-point iteration ``x <- g(x)``.

Type-II Anderson mixing [1]_ (the "Anderson(m)" of Walker and Ni): from the
last ``memory + 1`` iterates ``x_j``, their images ``g_j = g(x_j)`` and
residuals ``f_j = g_j - x_j``, the next iterate is

.. math::

    x_{+} = g_k - \\sum_i \\gamma_i \\, \\Delta g_i, \\qquad
    \\gamma = \\arg\\min_\\gamma \\Big\\| f_k - \\sum_i \\gamma_i \\, \\Delta f_i \\Big\\|_F,

with ``Delta`` the differences of consecutive images and residuals.  It is a
multisecant quasi-Newton method: on a linear iteration it matches GMRES, and
it needs no derivative of ``g``.  The iterates may be NumPy arrays or torch
tensors of any shape (the inner product is the Frobenius one); the small
``memory x memory`` least-squares problem is solved on the host.

References
----------
.. [1] Walker and Ni, "Anderson acceleration for fixed-point iterations",
   SIAM Journal on Numerical Analysis, 2011.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _inner(a: Any, b: Any) -> float:
    """The Frobenius inner product, as one dot product of the flattened arrays (no temporary)."""
    return float(a.reshape(-1) @ b.reshape(-1))


class AndersonMixing:
    """Mixes each new image with the last ``memory`` ones (see the module docstring).

    Call it with the current iterate and its image to get the next iterate;
    :meth:`reset` forgets the history (the next call returns the plain image).
    The Gram matrix of the residuals' differences is kept between calls, so
    that a call costs ``2 memory`` inner products, not ``memory^2``.
    """

    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next step is the plain fixed-point step."""
        self._last: tuple[Any, Any] | None = None  # (f, g) of the previous call
        self._df: list[Any] = []
        self._dg: list[Any] = []
        self._gram = np.zeros((0, 0))  # inner products of the _df

    def __call__(self, x: Any, gx: Any) -> Any:
        """The next iterate from the iterate ``x`` and its image ``gx = g(x)``."""
        f = gx - x
        if self._last is not None:
            f_prev, g_prev = self._last
            self._remember(f - f_prev, gx - g_prev)
        self._last = (f, gx)
        if not self._df:
            return gx
        # normal equations of the memory x memory least-squares problem; the
        # pseudo-inverse drops directions that have become linearly dependent
        rhs = np.array([_inner(a, f) for a in self._df])
        gamma = np.linalg.lstsq(self._gram, rhs, rcond=1e-12)[0]
        mixed = gx - float(gamma[0]) * self._dg[0]
        for coefficient, dg in zip(gamma[1:], self._dg[1:], strict=True):
            mixed -= float(coefficient) * dg
        return mixed

    def _remember(self, df: Any, dg: Any) -> None:
        """Add a difference pair (dropping the oldest beyond ``memory``) and its Gram row."""
        row = [_inner(a, df) for a in self._df] + [_inner(df, df)]
        n = len(row)
        gram = np.empty((n, n))
        gram[:-1, :-1] = self._gram
        gram[-1, :] = gram[:, -1] = row
        self._df.append(df)
        self._dg.append(dg)
        if n > self.memory:
            del self._df[0], self._dg[0]
            gram = gram[1:, 1:]
        self._gram = gram
