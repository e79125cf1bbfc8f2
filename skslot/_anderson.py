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

__all__ = ["AndersonMixing"]


def _inner(a: Any, b: Any) -> float:
    return float((a * b).sum())


class AndersonMixing:
    """Mixes each new image with the last ``memory`` ones (see the module docstring).

    Call it with the current iterate and its image to get the next iterate;
    :meth:`reset` forgets the history (the next call returns the plain image).
    """

    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next step is the plain fixed-point step."""
        self._last: tuple[Any, Any] | None = None  # (f, g) of the previous call
        self._df: list[Any] = []
        self._dg: list[Any] = []

    def __call__(self, x: Any, gx: Any) -> Any:
        """The next iterate from the iterate ``x`` and its image ``gx = g(x)``."""
        f = gx - x
        if self._last is not None:
            f_prev, g_prev = self._last
            self._df.append(f - f_prev)
            self._dg.append(gx - g_prev)
            if len(self._df) > self.memory:
                del self._df[0], self._dg[0]
        self._last = (f, gx)
        if not self._df:
            return gx
        # normal equations of the memory x memory least-squares problem; the
        # pseudo-inverse drops directions that have become linearly dependent
        gram = np.array([[_inner(a, b) for b in self._df] for a in self._df])
        rhs = np.array([_inner(a, f) for a in self._df])
        gamma = np.linalg.lstsq(gram, rhs, rcond=1e-12)[0]
        mixed = gx
        for coefficient, dg in zip(gamma, self._dg, strict=True):
            mixed = mixed - float(coefficient) * dg
        return mixed
