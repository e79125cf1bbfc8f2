"""Which clients break the server's reference step, in ``O(K)`` barycenter iterations.

A summary can pass every check of its own and still break the step with the
others (an ill-conditioned covariance, an overflow in the fixed point).  The
server then finds the clients to reject instead of failing the run: first
each summary alone (a one-client reference, one iteration each): those that
break the step by themselves; if none does, each leave-one-out set, probed
with :data:`PROBE_ITERATIONS` iterations: the one client whose removal lets
the step through.  Otherwise nobody is named and the run fails.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

__all__ = ["PROBE_ITERATIONS", "SERVER_STEP_ERRORS", "culprits"]

#: The errors a server step raises on values that break it (never a crash of the server).
SERVER_STEP_ERRORS = (ValueError, ArithmeticError, np.linalg.LinAlgError, MemoryError)
#: Fixed-point iterations of a leave-one-out probe.
PROBE_ITERATIONS = 2


def culprits(
    order: Sequence[Hashable],
    build: Callable[[list[int], int], object],
    min_clients: int,
) -> list[Hashable]:
    """The clients of ``order`` whose summaries break the reference step.

    Parameters
    ----------
    order : sequence of hashable
        The clients the step failed on.
    build : callable
        ``build(kept, max_iter)``: the step on the clients at positions
        ``kept`` of ``order``, stopped after ``max_iter`` iterations; raises
        one of :data:`SERVER_STEP_ERRORS` where their values break it.
    min_clients : int
        The fewest clients the run may keep.

    Returns
    -------
    list
        The clients to reject: empty where none can be named, or where
        rejecting them would leave fewer than ``min_clients`` (the run fails).

    Examples
    --------
    >>> def build(kept, max_iter):  # client "b" breaks any step it is part of
    ...     if 1 in kept:
    ...         raise ArithmeticError("overflow")
    >>> culprits(["a", "b", "c"], build, min_clients=2)
    ['b']
    """

    def breaks(kept: list[int], max_iter: int) -> bool:
        try:
            build(kept, max_iter)
        except SERVER_STEP_ERRORS:
            return True
        return False

    K = len(order)
    found = [c for k, c in enumerate(order) if breaks([k], 1)]
    if not found and K > min_clients:
        found = [
            c
            for k, c in enumerate(order)
            if not breaks([i for i in range(K) if i != k], PROBE_ITERATIONS)
        ]
        found = found if len(found) == 1 else []
    return found if K - len(found) >= min_clients else []
